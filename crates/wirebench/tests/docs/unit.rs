//! The pieces of the documents' tests, each on an example: reading commands as a shell
//! does, shortening and pointing them, the flag check, and GitHub's anchors.

use crate::adapt::{point, shorten, Peers};
use crate::markdown::{self, anchor, Block};
use crate::shell;

fn block(lines: &[&str]) -> Block {
    Block {
        file: "x.md".into(),
        line: 1,
        tag: "sh".into(),
        body: lines
            .iter()
            .enumerate()
            .map(|(i, l)| (i + 2, l.to_string()))
            .collect(),
    }
}

fn texts(lines: &[&str]) -> Vec<String> {
    markdown::commands(&block(lines))
        .into_iter()
        .map(|c| c.text)
        .collect()
}

#[test]
fn commands_are_read_as_a_shell_reads_them() {
    assert_eq!(
        texts(&[
            "# a comment",
            "wirebench run SERVER   # TCP",
            "",
            "a \\",
            "  b"
        ]),
        ["wirebench run SERVER", "a b"]
    );
    // A loop is one command, and a quote runs over its lines.
    assert_eq!(
        texts(&[
            "for i in 0 1; do",
            "  x $i",
            "done",
            "k --o='{\"a\":",
            "  1}'"
        ]),
        ["for i in 0 1; do\nx $i\ndone", "k --o='{\"a\":\n  1}'"]
    );
    assert_eq!(
        texts(&["echo $((i + 1)) 'a # b'"]),
        ["echo $((i + 1)) 'a # b'"]
    );
}

#[test]
fn adapting_keeps_the_command_and_shortens_it() {
    let p = Peers {
        server: "127.0.0.1:9".into(),
        iperf3: "127.0.0.1:8".into(),
        server_port: 9,
        repo: None,
    };
    let a = |c: &str| point(&shorten(c), &p);
    assert_eq!(
        a("wirebench run SERVER"),
        "wirebench run 127.0.0.1:9 -t 300ms"
    );
    assert_eq!(
        a("wirebench run SERVER:5201 -t 5s"),
        "wirebench run 127.0.0.1:9 -t 300ms"
    );
    assert_eq!(
        a("wirebench run SERVER -u -n 1M --json > result.json"),
        "wirebench run 127.0.0.1:9 -u -n 1M --json > result.json"
    );
    assert_eq!(
        a("wirebench lab -- run -t 10; wirebench plot x"),
        "wirebench lab -- run -t 300ms; wirebench plot x"
    );
    assert_eq!(
        a("wirebench run SERVER --mode rr -l 64 > r.txt"),
        "wirebench run 127.0.0.1:9 --mode rr -l 64 -t 300ms > r.txt"
    );
    assert_eq!(
        a("wirebench run SERVER --mode rrul --cc cubic"),
        "wirebench run 127.0.0.1:9 --mode rrul --cc cubic -t 300ms --idle 500ms"
    );
    assert_eq!(
        a("wirebench lab scenario s.toml --trials 5 --parallel 2 --time-scale 0.05 --out d"),
        "wirebench lab scenario s.toml --trials 1 --time-scale 0.01 --out d"
    );
    assert_eq!(
        a("wirebench sweep --vary parallel=1,2 -t 5 --idle 2s --repeat 2 --out r"),
        "wirebench sweep --vary parallel=1,2 -t 300ms --idle 500ms --repeat 1 --out r"
    );
    assert_eq!(
        a("wirebench sweep -u -n 100K --vary rate=25k,100k --out low"),
        "wirebench sweep --repeat 1 -u -n 10000 --vary rate=25k,100k --out low"
    );
    assert_eq!(
        a("wirebench sweep --preset rate-sweep --scale 0.1"),
        "wirebench sweep --preset rate-sweep --scale 0.01"
    );
    assert_eq!(
        a("for i in 0 1; do wirebench run -n 2M -t 5; done"),
        "for i in 0 1; do wirebench run -n 2M -t 300ms; done"
    );
    // A loop's lines stay lines.
    assert_eq!(
        a("for i in 0 1; do\nwirebench run SERVER -t 5\ndone"),
        "for i in 0 1; do\nwirebench run 127.0.0.1:9 -t 300ms\ndone"
    );
    // iperf3 counts whole seconds; its hosts are the test's iperf3 server, or its own.
    assert_eq!(
        a("wirebench run --iperf3 10.0.0.2 -O 2 -t 10 -B 10.0.0.1"),
        "wirebench run --iperf3 127.0.0.1:8 -O 2 -t 1 -B 127.0.0.1"
    );
    assert_eq!(
        a("iperf3 -c server -P 2 -J"),
        "iperf3 -c 127.0.0.1 -p 9 -P 2 -J -t 1"
    );
    assert_eq!(
        a("wirebench lab --serve 'iperf3 -s -1' -- exec -- iperf3 -c 10.77.0.2"),
        "wirebench lab --serve 'iperf3 -s -1' -- exec -- iperf3 -c 10.77.0.2 -t 1"
    );
}

#[test]
fn a_cluster_command_is_pointed_nowhere() {
    let p = Peers::unreachable(7, "/repo");
    assert_eq!(
        point(
            "sbatch --array=0-3 deploy/slurm/x.sbatch /shared/exp HOST --mesh h1,h2,h3",
            &p
        ),
        "sbatch --array=0-3 /repo/deploy/slurm/x.sbatch shared/exp 127.0.0.1:7 \
         --mesh 127.0.0.2:7,127.0.0.3:7,127.0.0.4:7"
    );
    assert_eq!(
        crate::adapt::foreign_address("run 10.0.0.2 -B 127.0.0.1", false),
        Some("10.0.0.2".into())
    );
    assert_eq!(
        crate::adapt::foreign_address("lab -- exec -- iperf3 -c 10.77.0.2", true),
        None
    );
}

/// A working directory for the flag check's examples.
fn scratch(tag: &str) -> std::path::PathBuf {
    let base = std::env::temp_dir().join(format!("wirebench-docs-{}-{tag}", std::process::id()));
    shell::work_dir(&base, "x.md")
}

#[test]
fn the_flag_check_refuses_bad_flags() {
    let dir = scratch("flags");
    let nowhere = format!("127.0.0.1:{}", shell::free_port());
    let check = |args: &str| shell::check_flags(&format!("wirebench {args}"), &dir);
    assert_eq!(check(&format!("run {nowhere} -t 5s -u")), Ok(()));
    assert_eq!(
        check(&format!("sweep {nowhere} -n 1M --vary rate=1M,2M --out s")),
        Ok(())
    );
    for bad in [
        format!("run {nowhere} --bogus"),
        format!("run {nowhere} -t abc"),
        format!("sweep {nowhere} --vary rate=x --out s"),
        format!("sweep {nowhere} --scale 0.1"),
    ] {
        let result = check(&bad);
        assert!(
            result.as_ref().is_err_and(|e| e.starts_with("bad flags")),
            "{bad}: {result:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir.parent().unwrap_or(&dir));
}

/// Why the flag check runs the command rather than appending `--help`: clap checks each
/// flag it meets up to `--help` (a misspelt one, a value of the wrong type), but not the
/// values the binary parses itself after clap, nor flags that need each other.
#[test]
fn help_alone_would_not_check_a_vary() {
    let help = |args: &[&str]| {
        std::process::Command::new(shell::binary())
            .args(args)
            .arg("--help")
            .output()
            .expect("wirebench runs")
            .status
            .code()
    };
    assert_eq!(help(&["run", "--bogus"]), Some(2));
    assert_eq!(help(&["run", "-t", "abc"]), Some(2));
    assert_eq!(help(&["sweep", "--vary", "rate=x"]), Some(0));
    assert_eq!(help(&["sweep", "--scale", "0.1"]), Some(0));
}

#[test]
fn anchors_follow_githubs_rule() {
    assert_eq!(
        anchor("Trace-driven links (`--trace-up`, `--trace-down`)"),
        "trace-driven-links---trace-up---trace-down"
    );
    assert_eq!(
        anchor("iperf3's schema (`run --iperf3-json`)"),
        "iperf3s-schema-run---iperf3-json"
    );
    assert_eq!(anchor("The `-V` table"), "the--v-table");
    assert_eq!(anchor("Sweeps: [`sweep`](x.md)"), "sweeps-sweep");
    let doc = "# A\n## B b\n```sh\n# not a heading\n```\n## B b\n";
    let found = markdown::anchors(doc);
    for a in ["a", "b-b", "b-b-1"] {
        assert!(found.contains(a), "{a} in {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
    let links =
        markdown::links("see [x](a.md#b) and `[y](c.md)`\n```sh\n[z](d.md)\n```\n![i](e.png)");
    assert_eq!(links, [(1, "a.md#b".to_string()), (5, "e.png".to_string())]);
}
