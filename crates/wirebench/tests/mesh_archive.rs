//! `wirebench mesh`'s archives: `archive report` drawn by Chromium, a full disk, and a
//! PostgreSQL archive two agents share.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::mesh::{
    agent_count, agent_rows, closed_port, closed_port_on, query, tempdir, Postgres, Serve,
};
use common::wirebench;

/// `archive report` of a short loopback mesh (one path up, one down), drawn by headless
/// Chromium: the screenshot and the page are kept in `target/test-artifacts/`
/// (`archive-report.png`, `archive-report.html`), and the page has a plot and a row per path.
#[test]
#[ignore = "needs chromium"]
fn the_archive_report_opens_in_chromium() {
    let chromium = common::require_chromium();
    let dir = tempdir("report");
    let server = Serve::on("127.0.0.1");
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        format!(
            "[hosts]\none = \"127.0.0.1:{}\"\ntwo = \"127.0.0.2:{}\"\n\
             [groups.g]\nsources = [\"two\"]\ndestinations = [\"one\"]\n\
             [groups.down]\nsources = [\"one\"]\ndestinations = [\"two\"]\n\
             [tests.throughput]\ngroup = \"g\"\nrun = [\"-t\", \"0.3\"]\nevery = \"1s\"\nslip = \"200ms\"\n\
             [tests.latency]\ngroup = \"down\"\nrun = [\"--mode\", \"rr\", \"-t\", \"0.2\"]\nevery = \"1s\"\n",
            server.1,
            closed_port()
        ),
    )
    .expect("mesh file");
    let archive = dir.join("a.sqlite");
    let out = wirebench()
        .arg("mesh")
        .arg(&file)
        .arg("--archive")
        .arg(&archive)
        .args(["--for", "6s", "--as", "one", "--as", "two"])
        .output()
        .expect("mesh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let artifacts = tmp.parent().unwrap_or(tmp).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifacts");
    let html = artifacts.join("archive-report.html");
    let out = wirebench()
        .args(["archive", "report"])
        .arg(&archive)
        .arg("-o")
        .arg(&html)
        .output()
        .expect("report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).expect("html");
    assert!(page.contains("<svg") && page.contains("two → one") && page.contains("one → two"));
    let shot = artifacts.join("archive-report.png");
    let _ = std::fs::remove_file(&shot);
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--hide-scrollbars",
            "--window-size=1200,1400",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 20_000, "{} bytes: a blank page?", png.len());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("screenshot: {}", shot.display());
}

/// An archive on a file system that fills up (a 320 KiB tmpfs, in a mount namespace of the
/// test's own): the agent stops with one line naming the archive, exit 1, and every row it
/// wrote before is still there and readable.
#[test]
#[ignore = "needs root"]
fn a_full_disk_stops_the_agent_in_one_line_and_loses_nothing_written() {
    common::require_root();
    let dir = tempdir("full");
    let server = Serve::on("127.0.0.1");
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        format!(
            "[hosts]\none = \"127.0.0.1:{}\"\ntwo = \"127.0.0.2\"\n\
             [groups.g]\nsources = [\"two\"]\ndestinations = [\"one\"]\n\
             [tests.a]\ngroup = \"g\"\nrun = [\"--mode\", \"rr\", \"-t\", \"0.05\", \"-i\", \"10ms\"]\nevery = \"1s\"\nslip = \"100ms\"\n\
             [tests.b]\ngroup = \"g\"\nrun = [\"--mode\", \"rr\", \"-t\", \"0.05\", \"-i\", \"10ms\"]\nevery = \"1s\"\nslip = \"100ms\"\n",
            server.1
        ),
    )
    .expect("mesh file");
    let small = dir.join("small");
    std::fs::create_dir_all(&small).expect("dir");
    let bin = env!("CARGO_BIN_EXE_wirebench");
    let script = format!(
        "mount -t tmpfs -o size=320k tmpfs {small} && \
         {bin} mesh {file} --archive {small}/a.sqlite --as two --for 120s >{dir}/out 2>{dir}/err; \
         echo $? > {dir}/code; cp {small}/a.sqlite* {dir}/ 2>/dev/null; true",
        small = small.display(),
        file = file.display(),
        dir = dir.display()
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let code = std::fs::read_to_string(dir.join("code")).expect("code");
    let err = std::fs::read_to_string(dir.join("err")).expect("err");
    assert_eq!(code.trim(), "1", "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("a.sqlite") && last.contains("full"), "{err}");
    // Every run it said it archived (a line each, printed once written) is there.
    let said = std::fs::read_to_string(dir.join("out"))
        .expect("out")
        .lines()
        .count();
    let rows = query(&dir.join("a.sqlite"));
    assert!(said >= 3, "{said} runs archived before the disk was full");
    assert_eq!(rows.len(), said, "{err}");
    assert!(rows.iter().all(|r| r["outcome"] == "done"), "{rows:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two agents (two sites) write to one PostgreSQL archive at once; `archive query` and
/// `archive report` read it as they read a file; an unreachable server is one line.
#[test]
#[ignore = "needs root and PostgreSQL"]
fn two_agents_share_a_postgresql_archive() {
    let dir = tempdir("pg");
    let pg = Postgres::start(&dir);
    let servers: Vec<Serve> = (1..=2)
        .map(|i| Serve::on(&format!("127.0.0.{i}")))
        .collect();
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        format!(
            "[hosts]\none = \"127.0.0.1:{}\"\ntwo = \"127.0.0.2:{}\"\n\
             [groups.g]\nmesh = [\"one\", \"two\"]\n\
             [tests.latency]\ngroup = \"g\"\nrun = [\"--mode\", \"rr\", \"-t\", \"0.2\"]\nevery = \"1s\"\nslip = \"200ms\"\n",
            servers[0].1, servers[1].1
        ),
    )
    .expect("mesh file");
    let agent = |host: &str| {
        wirebench()
            .arg("mesh")
            .arg(&file)
            .args(["--archive", &pg.url, "--for", "6s", "--as", host])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
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
    let rows = query(Path::new(&pg.url));
    assert_eq!(
        rows.len() as u64,
        agent_count(&a.stderr) + agent_count(&b.stderr)
    );
    for (s, d) in [("one", "two"), ("two", "one")] {
        let n = rows
            .iter()
            .filter(|r| r["source"] == s && r["destination"] == d && r["outcome"] == "done")
            .count();
        assert!(n >= 4, "{s} -> {d}: {n} done");
    }
    let html = dir.join("r.html");
    let out = wirebench()
        .args(["archive", "report", &pg.url, "-o"])
        .arg(&html)
        .output()
        .expect("report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&html)
        .expect("html")
        .contains("one → two"));
    // A server that is not there: one line naming the archive (without a password).
    let gone = format!(
        "postgres://wirebench:secret@127.0.0.1:{}/postgres",
        closed_port_on("127.0.0.1")
    );
    let out = wirebench()
        .arg("mesh")
        .arg(&file)
        .args(["--archive", &gone, "--for", "1s", "--as", "one"])
        .output()
        .expect("mesh");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("archive postgres://wirebench@127.0.0.1") && !err.contains("secret"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    drop(servers);
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An agent killed with SIGKILL in the middle of its schedule: the archive opens, every run
/// it printed is a row (a row is committed before its line is printed) and each is whole,
/// and the next agent resumes on the same archive.
#[test]
fn an_agent_killed_mid_schedule_leaves_a_whole_archive_the_next_one_resumes() {
    use std::io::{BufRead, BufReader};
    let dir = tempdir("killed");
    let server = Serve::on("127.0.0.1");
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        format!(
            "[hosts]\none = \"127.0.0.1:{}\"\ntwo = \"127.0.0.2\"\n\
             [groups.g]\nsources = [\"two\"]\ndestinations = [\"one\"]\n\
             [tests.latency]\ngroup = \"g\"\nrun = [\"--mode\", \"rr\", \"-t\", \"0.2\"]\nevery = \"1s\"\nslip = \"200ms\"\n\
             [tests.throughput]\ngroup = \"g\"\nrun = [\"-t\", \"0.5\"]\nevery = \"1s\"\nslip = \"500ms\"\n",
            server.1
        ),
    )
    .expect("mesh file");
    let archive = dir.join("a.sqlite");
    let mut agent = wirebench()
        .arg("mesh")
        .arg(&file)
        .arg("--archive")
        .arg(&archive)
        .args(["--for", "60s", "--as", "two"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("mesh");
    let mut out = BufReader::new(agent.stdout.take().expect("stdout"));
    let mut printed = 0;
    let mut line = String::new();
    while printed < 6 {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("a run") > 0,
            "the agent ended"
        );
        printed += 1;
    }
    let _ = Command::new("kill")
        .args(["-KILL", &agent.id().to_string()])
        .status();
    let _ = agent.wait();
    let rows = query(&archive);
    assert!(
        rows.len() >= printed,
        "{} rows, {printed} printed",
        rows.len()
    );
    for r in &rows {
        assert!(
            r["started_unix_ms"].is_i64() && r["ended_unix_ms"].is_i64(),
            "{r}"
        );
        assert!(r["outcome"] == "done" || r["reason"].is_string(), "{r}");
    }
    let more = agent_rows(&file, &archive, &["--for", "3s", "--as", "two"], rows.len());
    assert!(more.len() > rows.len());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
