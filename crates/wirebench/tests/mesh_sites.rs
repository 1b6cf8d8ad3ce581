//! Agents of several sites at once: each runs the paths from its own host, and a
//! throughput test never starts while another involves either of its hosts, whichever agent
//! runs it. An agent's own runs are kept apart by its schedule; another agent's by the
//! servers: the destination's (`run --exclusive`) and the source's, which the agent holds
//! for as long as its run lasts.

mod common;

use common::mesh::{agent_count, apart, query, tempdir, Serve};
use common::wirebench;

#[test]
fn two_agents_never_overlap_throughput_tests_on_a_host() {
    let dir = tempdir("sites");
    let servers: Vec<Serve> = (1..=3)
        .map(|i| Serve::on(&format!("127.0.0.{i}")))
        .collect();
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        format!(
            "[hosts]\none = \"127.0.0.1:{}\"\ntwo = \"127.0.0.2:{}\"\nthree = \"127.0.0.3:{}\"\n\
             [groups.g]\nmesh = [\"one\", \"two\", \"three\"]\n\
             [tests.throughput]\ngroup = \"g\"\nrun = [\"-t\", \"0.5\"]\nevery = \"3s\"\nslip = \"2s\"\n",
            servers[0].1, servers[1].1, servers[2].1
        ),
    )
    .expect("mesh file");
    let agent = |host: &str| {
        wirebench()
            .arg("mesh")
            .arg(&file)
            .arg("--archive")
            .arg(dir.join(format!("{host}.sqlite")))
            .args(["--for", "20s", "--as", host])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("mesh")
    };
    let (a, b) = (agent("one"), agent("two"));
    let (a, b) = (
        a.wait_with_output().expect("a"),
        b.wait_with_output().expect("b"),
    );
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let mut rows = query(&dir.join("one.sqlite"));
    assert_eq!(rows.len() as u64, agent_count(&a.stderr));
    let theirs = query(&dir.join("two.sqlite"));
    assert_eq!(theirs.len() as u64, agent_count(&b.stderr));
    rows.extend(theirs);
    let done = apart(&rows, None);
    for who in ["one", "two"] {
        let n = done.iter().filter(|d| d.2 == who).count();
        assert!(n >= 3, "{n} runs of agent {who} done");
    }
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}
