//! `wirebench mesh` and `wirebench archive` through the binary: a mesh on loopback (servers
//! on 127.0.0.1, .2 and .3, and a fourth host that is down) for 20 s. Every scheduled run is
//! a row (done, or failed with its reason), no two throughput runs that share a host
//! overlap (from the rows' own times), the agent's count is the archive's, and a restarted
//! agent adds to the archive. Also `run --exclusive` (what the mesh's throughput tests ask
//! of a server), and bad mesh files and archives, each a one-line error.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::mesh::{agent_count, agent_rows, apart, closed_port, query, tempdir, Serve};
use common::{wait_for_line, wirebench};
use serde_json::Value;

#[test]
fn a_loopback_mesh_archives_every_run_and_never_overlaps_throughput_on_a_host() {
    let dir = tempdir("loopback");
    let servers: Vec<Serve> = (1..=3)
        .map(|i| Serve::on(&format!("127.0.0.{i}")))
        .collect();
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[hosts]
one = "127.0.0.1:{}"
two = "127.0.0.2:{}"
three = "127.0.0.3:{}"
four = "127.0.0.4:{}"

[groups.three]
mesh = ["one", "two", "three"]

[groups.probe]
sources = ["one"]
destinations = ["two", "four"]

[tests.throughput]
group = "three"
run = ["-t", "0.5"]
every = "4s"
slip = "2s"

[tests.latency]
group = "probe"
run = ["--mode", "rr", "-t", "0.3"]
every = "2s"
slip = "500ms"
"#,
            servers[0].1,
            servers[1].1,
            servers[2].1,
            closed_port()
        ),
    )
    .expect("mesh file");
    let archive = dir.join("archive.sqlite");
    let hosts = ["--as", "one", "--as", "two", "--as", "three"];
    let rows = agent_rows(
        &file,
        &archive,
        &[&["--for", "20s"], &hosts[..]].concat(),
        0,
    );
    // 6 throughput paths every 4 s, 2 latency paths every 2 s, over 20 s: rounds the
    // schedule made, give or take the first one's phase and the last one under way.
    let count = |test: &str, src: &str, dst: &str| {
        rows.iter()
            .filter(|r| r["test"] == test && r["source"] == src && r["destination"] == dst)
            .count()
    };
    for (s, d) in [("one", "two"), ("two", "three"), ("three", "one")] {
        let n = count("throughput", s, d);
        assert!((3..=6).contains(&n), "throughput {s} -> {d}: {n} rows");
    }
    let n = count("latency", "one", "two");
    assert!((8..=11).contains(&n), "latency one -> two: {n} rows");
    // The host that is down: every run a failed row with its reason.
    let down: Vec<&Value> = rows.iter().filter(|r| r["destination"] == "four").collect();
    assert!(
        down.len() >= 8,
        "{} rows for the host that is down",
        down.len()
    );
    for r in &down {
        assert_eq!(r["outcome"], "failed", "{r}");
        assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        assert!(r["error_kind"].is_string(), "{r}");
    }
    // Done runs carry their figure; failed ones their reason.
    for r in &rows {
        match r["outcome"].as_str() {
            Some("done") if r["test"] == "throughput" => {
                assert!(r["throughput_bps"].as_f64().is_some_and(|b| b > 0.0), "{r}")
            }
            Some("done") => assert!(r["latency_us"].as_f64().is_some_and(|u| u > 0.0), "{r}"),
            _ => assert!(r["reason"].is_string(), "{r}"),
        }
    }
    // No two throughput runs that share a host overlap.
    let runs = apart(&rows, Some("throughput"));
    assert!(runs.len() >= 12, "{} throughput runs done", runs.len());
    // A restarted agent resumes its schedule and adds to the archive.
    let more = agent_rows(
        &file,
        &archive,
        &[&["--for", "6s"], &hosts[..]].concat(),
        rows.len(),
    );
    assert!(more.len() > rows.len());
    // The CSV and the table read the same archive.
    let csv = wirebench()
        .args(["archive", "query", "--csv", "--test", "latency"])
        .arg(&archive)
        .output()
        .expect("csv");
    let text = String::from_utf8_lossy(&csv.stdout);
    assert!(text.starts_with("started,started_unix_ms,"), "{text}");
    assert!(
        text.lines().skip(1).all(|l| l.contains(",latency,")),
        "{text}"
    );
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a mesh's throughput test asks of a server: to run alone among tests that ask so. A
/// second one is refused as busy; a test that does not ask runs beside it.
#[test]
fn an_exclusive_test_is_refused_beside_another_and_others_run() {
    let server = common::Server::start(&[]);
    let mut first = server.spawn(&["--exclusive", "-t", "4", "-i", "0.1"]);
    wait_for_line(&mut first, "0.00-0.10");
    let second = server.run(&["--exclusive", "-t", "0.3", "--json"]);
    assert_eq!(second.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&second.stdout).expect("JSON");
    assert_eq!(doc["error_cause"], "busy", "{doc}");
    assert_eq!(doc["test"]["exclusive"], true, "{doc}");
    assert!(
        doc["error"]
            .as_str()
            .is_some_and(|e| e.contains("--exclusive")),
        "{doc}"
    );
    let beside = server.run(&["--mode", "rr", "-t", "0.3"]);
    assert!(
        beside.status.success(),
        "{}",
        String::from_utf8_lossy(&beside.stderr)
    );
    assert!(first.wait().expect("first").success());
}

#[test]
fn bad_mesh_files_and_archives_are_one_line_naming_the_place() {
    let dir = tempdir("bad");
    let file = dir.join("bad.toml");
    let cases = [
        ("[hosts]\none = \"127.0.0.1\"\n[tests.t]\ngroup = \"g\"\nevery = \"1s\"\n", "tests.t.group"),
        ("[hosts]\none = \"127.0.0.1\"\n[groups.g]\nmesh = [\"one\", \"two\"]\n[tests.t]\ngroup = \"g\"\nevery = \"1s\"\n", "groups.g.mesh"),
        ("[hosts\n", "line 1"),
        ("[hosts]\none = \"127.0.0.1\"\ntwo = \"127.0.0.2\"\n[groups.g]\nmesh = [\"one\", \"two\"]\n[tests.t]\ngroup = \"g\"\nevery = \"5s\"\nrun = [\"--bogus\"]\n", "tests.t.run"),
    ];
    for (text, place) in cases {
        std::fs::write(&file, text).expect("write");
        let out = wirebench()
            .arg("mesh")
            .arg(&file)
            .arg("--archive")
            .arg(dir.join("a.sqlite"))
            .args(["--for", "1s"])
            .output()
            .expect("mesh");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{place}: {err}");
        assert!(
            err.contains(place) && err.trim().lines().count() == 1,
            "{place}: {err}"
        );
    }
    let not = dir.join("not.sqlite");
    std::fs::write(&not, vec![b'x'; 4096]).expect("write");
    let out = wirebench()
        .args(["archive", "query"])
        .arg(&not)
        .output()
        .expect("query");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not a wirebench archive") && err.trim().lines().count() == 1,
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shipped loopback mesh parses (its hosts are this machine's) and names its tests.
#[test]
fn the_shipped_loopback_mesh_is_a_mesh() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/mesh/loopback.toml");
    let text = std::fs::read_to_string(&file).expect("loopback.toml");
    let mesh = wirebench_mesh_check(&text);
    assert!(
        mesh.contains("throughput") && mesh.contains("latency"),
        "{mesh}"
    );
}

/// Runs the agent on `text` for no time against an archive in a temporary directory: its
/// first line names the paths it would run.
fn wirebench_mesh_check(text: &str) -> String {
    let dir = tempdir("shipped");
    let file = dir.join("m.toml");
    std::fs::write(&file, text).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_wirebench"))
        .arg("mesh")
        .arg(&file)
        .arg("--archive")
        .arg(dir.join("a.sqlite"))
        .args(["--for", "0s"])
        .output()
        .expect("mesh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("12 paths from 3 of 3 hosts"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    text.to_string()
}

/// One HTTP GET of `/metrics` at `addr` asking for `accept`: the body.
fn scrape(addr: &str, accept: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("metrics port");
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        c,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n"
    )
    .expect("request");
    let mut raw = String::new();
    c.read_to_string(&mut raw).expect("answer");
    raw.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// The agent's `--metrics`: once a run is archived (its line printed), its path's latest
/// figure and its count are in the metrics, in both formats; promtool accepts them.
#[test]
#[ignore = "needs promtool"]
fn the_agents_metrics_have_each_paths_latest_figures_and_promtool_accepts_them() {
    common::require("promtool");
    let dir = tempdir("metrics");
    let server = Serve::on("127.0.0.1");
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        format!(
            "[hosts]\none = \"127.0.0.1:{}\"\ntwo = \"127.0.0.2:1\"\n\
             [groups.g]\nsources = [\"two\"]\ndestinations = [\"one\"]\n\
             [tests.throughput]\ngroup = \"g\"\nrun = [\"-t\", \"0.3\"]\nevery = \"1s\"\n",
            server.1
        ),
    )
    .expect("mesh file");
    let mut agent = wirebench()
        .arg("mesh")
        .arg(&file)
        .arg("--archive")
        .arg(dir.join("a.sqlite"))
        .args(["--for", "30s", "--as", "two", "--metrics", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mesh");
    let mut err = BufReader::new(agent.stderr.take().expect("stderr"));
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            err.read_line(&mut line).expect("stderr") > 0,
            "no metrics line"
        );
        if let Some(a) = line.split("http://").nth(1) {
            break a.trim().trim_end_matches("/metrics").to_string();
        }
    };
    // The first run's line: it is archived, and counted, before it is printed.
    let mut out = BufReader::new(agent.stdout.take().expect("stdout"));
    line.clear();
    out.read_line(&mut line).expect("a run");
    assert!(line.contains("two -> one throughput"), "{line}");
    let om = scrape(&addr, "application/openmetrics-text; version=1.0.0");
    let text = scrape(&addr, "text/plain");
    let _ = agent.kill();
    let _ = agent.wait();
    let labels = "{test=\"throughput\",source=\"two\",destination=\"one\"}";
    let gauge = format!("wirebench_mesh_throughput_bytes_per_second{labels} ");
    let value = om
        .lines()
        .find_map(|l| l.strip_prefix(&gauge))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(value.is_some_and(|v| v > 0.0), "{om}");
    assert!(om.contains("wirebench_mesh_runs_total{test=\"throughput\",source=\"two\",destination=\"one\",outcome=\"done\"} 1"), "{om}");
    assert!(om.trim_end().ends_with("# EOF"), "{om}");
    // promtool reads Prometheus' text format (the OpenMetrics answer is checked above).
    {
        let body = &text;
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool");
        {
            use std::io::Write;
            p.stdin
                .take()
                .expect("stdin")
                .write_all(body.as_bytes())
                .expect("write");
        }
        let o = p.wait_with_output().expect("promtool");
        assert!(
            o.status.success(),
            "promtool: {}{}\n{body}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shipped Grafana dashboard asks only for series the agent exports: every metric name
/// in its queries is in the agent's metrics (rendered here from archived runs of each kind).
#[test]
fn the_grafana_dashboard_queries_only_what_the_agent_exports() {
    use wirebench_report::archive::metrics::MeshMetrics;
    use wirebench_report::archive::{Outcome, Row};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("deploy/mesh/grafana-dashboard.json"))
        .expect("dashboard");
    let dash: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let m = MeshMetrics::default();
    let row = |test: &str, bps: Option<f64>, us: Option<f64>, outcome| Row {
        started_unix_ms: 0,
        ended_unix_ms: 1,
        source: "a".into(),
        destination: "b".into(),
        test: test.into(),
        kind: test.into(),
        outcome,
        error_kind: None,
        reason: None,
        throughput_bps: bps,
        latency_us: us,
        loss_ratio: bps.map(|_| 0.0),
        results: None,
    };
    m.record(&row("throughput", Some(1e9), None, Outcome::Done));
    m.record(&row("latency", None, Some(20.0), Outcome::Done));
    m.record(&row("latency", None, None, Outcome::Failed));
    let exported = m.render(false);
    let mut queried = 0;
    let mut ids = std::collections::BTreeSet::new();
    for panel in dash["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(panel["id"].as_u64().expect("id")),
            "a panel id twice"
        );
        for t in panel["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().expect("expr");
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("wirebench_"))
            {
                queried += 1;
                assert!(
                    exported
                        .lines()
                        .any(|l| l.starts_with(&format!("{name}{{"))),
                    "the dashboard asks for {name}, which the agent does not export:\n{exported}"
                );
            }
        }
    }
    assert!(queried >= 6, "{queried} metrics queried");
}

/// The shipped systemd unit is one systemd accepts (`systemd-analyze verify`, with the
/// binary under test in place of /usr/local/bin/wirebench).
#[test]
#[ignore = "needs systemd-analyze"]
fn the_systemd_unit_verifies() {
    common::require("systemd-analyze");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let unit =
        std::fs::read_to_string(root.join("deploy/mesh/wirebench-mesh.service")).expect("unit");
    let dir = tempdir("unit");
    let path = dir.join("wirebench-mesh.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/wirebench", env!("CARGO_BIN_EXE_wirebench")),
    )
    .expect("write");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze");
    let err = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("wirebench-mesh"))
        .collect();
    assert!(out.status.success() && ours.is_empty(), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agent's memory over 1,000 runs quickly: 100 paths every 2 s (half against a server,
/// half against a host that is down). Its resident memory after the 1,000th run is within
/// 4 MiB of what it was after the 500th (the first hundreds warm SQLite's page cache and
/// the allocator's arenas: over 4,000 runs it stayed between 29.1 and 29.8 MiB from the
/// 1,500th on), and every run is a row.
#[test]
fn a_thousand_runs_leave_the_agents_memory_flat_and_every_run_a_row() {
    let dir = tempdir("thousand");
    let server = {
        let mut child = wirebench()
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(["--max-tests", "128", "--max-tests-per-client", "64"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("banner");
        let port: u16 = line
            .split_whitespace()
            .find_map(|w| w.rsplit_once(':').and_then(|(_, p)| p.parse().ok()))
            .expect("port");
        Serve(child, port)
    };
    let mut text = String::from("[hosts]\n");
    let sources: Vec<String> = (11..21).map(|i| format!("s{i}")).collect();
    for (i, s) in sources.iter().enumerate() {
        text += &format!("{s} = \"127.0.0.{}\"\n", 11 + i);
    }
    text += &format!(
        "srv = \"127.0.0.1:{}\"\ndown = \"127.0.0.4:{}\"\n[groups.g]\nsources = {:?}\ndestinations = [\"srv\", \"down\"]\n",
        server.1,
        closed_port(),
        sources
    );
    for t in 0..5 {
        text += &format!(
            "[tests.t{t}]\ngroup = \"g\"\nrun = [\"--mode\", \"rr\", \"-t\", \"0.05\"]\nevery = \"2s\"\nslip = \"1s\"\n"
        );
    }
    let file = dir.join("mesh.toml");
    std::fs::write(&file, text).expect("mesh file");
    let archive = dir.join("a.sqlite");
    let mut agent = wirebench()
        .arg("mesh")
        .arg(&file)
        .arg("--archive")
        .arg(&archive)
        .args(["--for", "120s"])
        .args(sources.iter().flat_map(|s| ["--as", s.as_str()]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mesh");
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    };
    let mut out = BufReader::new(agent.stdout.take().expect("stdout"));
    let (mut lines, mut line) = (0u64, String::new());
    let mut at_500 = 0;
    while lines < 1000 {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("a run") > 0,
            "the agent ended after {lines} runs"
        );
        lines += 1;
        if lines == 500 {
            at_500 = rss(agent.id());
        }
    }
    let at_1000 = rss(agent.id());
    eprintln!("resident memory: {at_500} KiB after 500 runs, {at_1000} KiB after 1000");
    let _ = Command::new("kill")
        .args(["-TERM", &agent.id().to_string()])
        .status();
    // What it prints while it stops.
    std::thread::spawn(move || {
        let mut rest = String::new();
        while out.read_line(&mut rest).is_ok_and(|n| n > 0) {}
    });
    let mut err = String::new();
    {
        use std::io::Read;
        agent
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .expect("stderr");
    }
    assert!(agent.wait().expect("agent").success(), "{err}");
    assert!(
        at_1000 <= at_500 + 4096,
        "resident memory grew from {at_500} KiB after 500 runs to {at_1000} KiB after 1000"
    );
    let rows = query(&archive);
    assert_eq!(rows.len() as u64, agent_count(err.as_bytes()), "{err}");
    assert!(rows.len() >= 1000);
    let done = rows.iter().filter(|r| r["outcome"] == "done").count();
    assert!(done >= 400, "{done} of {} runs done", rows.len());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shipped loopback mesh (`deploy/mesh/loopback.toml`, its servers on free ports) for
/// 60 s: every scheduled run is a row (a round is a run or a miss), each path has the rounds
/// its schedule makes, and no two throughput runs that share a host overlap.
#[test]
fn the_shipped_loopback_mesh_runs_for_a_minute() {
    let dir = tempdir("minute");
    let servers: Vec<Serve> = (1..=3)
        .map(|i| Serve::on(&format!("127.0.0.{i}")))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut text =
        std::fs::read_to_string(root.join("deploy/mesh/loopback.toml")).expect("loopback.toml");
    for (i, s) in servers.iter().enumerate() {
        let at = format!("127.0.0.{}:5300", i + 1);
        assert!(text.contains(&at), "{at}");
        text = text.replace(&at, &format!("127.0.0.{}:{}", i + 1, s.1));
    }
    let file = dir.join("loopback.toml");
    std::fs::write(&file, text).expect("write");
    let archive = dir.join("a.sqlite");
    let rows = agent_rows(&file, &archive, &["--for", "60s"], 0);
    let hosts = ["one", "two", "three"];
    for s in hosts {
        for d in hosts.iter().filter(|d| **d != s) {
            let n = |test: &str| {
                rows.iter()
                    .filter(|r| r["test"] == test && r["source"] == s && r["destination"] == *d)
                    .count()
            };
            // 60 s: every 10 s and every 5 s, give or take the first round's phase and the
            // one under way at the end.
            assert!(
                (5..=7).contains(&n("throughput")),
                "throughput {s} -> {d}: {}",
                n("throughput")
            );
            assert!(
                (11..=13).contains(&n("latency")),
                "latency {s} -> {d}: {}",
                n("latency")
            );
        }
    }
    for r in &rows {
        if r["outcome"] != "done" {
            assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        }
    }
    let done = apart(&rows, Some("throughput"));
    assert!(
        done.len() >= 24,
        "{} of the throughput runs done",
        done.len()
    );
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}
