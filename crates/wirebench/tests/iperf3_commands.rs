//! iperf3's own release checklist, `test_commands.sh` (esnet/iperf, as of 3.12), run by the
//! installed iperf3 client against `iperf3 -s` and against `wirebench serve` on loopback:
//! every command that passes against `iperf3 -s` passes against wirebench, with the same
//! byte counts where iperf3's are exact (TCP `-n` and `-k` from the client), or is refused
//! with iperf3's own words where wirebench does not serve it (`--sctp`, `-A`'s server CPU,
//! listed in docs/iperf3.md). A command that hangs fails the test. The table of results is
//! printed (`--nocapture`), as docs/iperf3.md shows it.
//!
//! `WIREBENCH_IPERF3` names another iperf3 to run (client and reference server), such as a
//! newer release built by hand; by default the one on PATH.
//!
//! The script's `-t 5` is `-t 1` here (and `-O 2` is `-O 1`), and commands that run iperf3's
//! default 10 s get `-t 1`, so that the whole list runs in about two minutes.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::wirebench;
use serde_json::Value;

/// test_commands.sh's client commands, in its order, after `-c HOST`.
const COMMANDS: &[&str] = &[
    "-V -t 1 -T test1",
    "-u -V -t 1",
    "-i .3 -O 1 -t 1",
    "-i 1 -J -t 1",
    "-4 -t 1",
    "-4 -u -t 1",
    "-6 -t 1",
    "-6 -u -t 1",
    "-V -t 1 --fq-rate 5m",
    "-u -V -t 1 --fq-rate 5m",
    "--sctp -V -t 1",
    "-P 3 -t 1",
    "-u -P 3 -t 1",
    "-P 2 -t 1 -R",
    "-u -P 2 -t 1 -R",
    "-P 2 -t 1 --bidir",
    "-u -P 2 -t 1 --bidir",
    "-Z -t 1",
    "-Z -t 1 -R",
    "-t 1 -w 8M",
    "-n 5M",
    "-n 5M -u -b1G",
    "-n 5M -R",
    "-n 5M -u -b1G -R",
    "-n 5M -t 5",
    "-k 1K",
    "-k 1K -u -b1G",
    "-k 1K -R",
    "-k 1K -u -b1G -R",
    "-A 2/2 -t 1",
    "-A 2/2 -u -b1G -t 1",
    "-u -b1G/100 -t 1",
    "-M 1000 -V -t 1",
    "-C reno -V -t 1",
];

/// What wirebench refuses by design, and the words the iperf3 client then prints.
const REFUSED: &[(&str, &str)] = &[
    ("--sctp", "no SCTP support available"),
    ("-A 2/2", "unable to set CPU affinity"),
];

/// The iperf3 to run: `WIREBENCH_IPERF3`, or `iperf3` on PATH.
fn iperf3() -> Command {
    Command::new(std::env::var_os("WIREBENCH_IPERF3").unwrap_or_else(|| "iperf3".into()))
}

/// How long one command may take before it counts as hung.
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// A server of one kind on one address, killed when dropped.
struct Peer {
    child: Child,
    port: u16,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on `host` (the kernel's pick; iperf3 takes no port 0).
fn free_port(host: &str) -> u16 {
    std::net::TcpListener::bind((host, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `iperf3 -s` on `host`, once it listens.
fn iperf3_server(host: &str) -> Peer {
    for _ in 0..5 {
        let port = free_port(host);
        let mut child = iperf3()
            .args(["-s", "--forceflush", "-B", host, "-p", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 -s");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let mut listening = false;
        while out.read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.contains("Server listening") {
                listening = true;
                break;
            }
            line.clear();
        }
        if listening {
            // Its further output is not read: let it go nowhere rather than fill a pipe.
            std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
            return Peer { child, port };
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("iperf3 -s did not start on {host}");
}

/// `wirebench serve` on `host` and a free port (iperf3 clients are told apart by their
/// first bytes).
fn wirebench_server(host: &str) -> Peer {
    let mut child = wirebench()
        .args(["serve", "--bind", host, "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start wirebench serve");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("server banner");
    // "wirebench server listening on ADDR:PORT (...)"
    let port = line
        .split_whitespace()
        .skip_while(|w| *w != "on")
        .nth(1)
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| {
            p.trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Peer { child, port }
}

/// What one command did against one server.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// It ran: bytes sent and received (the first direction's sums).
    Passed { sent: u64, received: u64 },
    /// It ended with iperf3's error text.
    Failed(String),
    /// It did not end within [`COMMAND_LIMIT`].
    Hung,
}

impl Outcome {
    fn passed(&self) -> bool {
        matches!(self, Self::Passed { .. })
    }

    /// The table's cell.
    fn cell(&self) -> String {
        match self {
            // -V: the text output, whose counts are not read.
            Self::Passed {
                sent: 0,
                received: 0,
            } => "passes".into(),
            Self::Passed { sent, received } => {
                format!("passes ({sent} B sent, {received} B received)")
            }
            Self::Failed(e) => format!("fails: {e}"),
            Self::Hung => "hangs".into(),
        }
    }
}

/// Runs `iperf3 -c HOST -p PORT ARGS`, bounded in time, with `-J` unless the command asks
/// for `-V` (which iperf3 refuses beside `-J`: its text then says whether it passed).
fn run(host: &str, port: u16, args: &str) -> Outcome {
    let verbose = args.split_whitespace().any(|w| w == "-V");
    let mut child = iperf3()
        .args(["-c", host, "-p", &port.to_string()])
        .args((!verbose).then_some("-J"))
        .args(args.split_whitespace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run iperf3 -c");
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let until = Instant::now() + COMMAND_LIMIT;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = reader.join().unwrap_or_default();
    let Some(status) = status else {
        return Outcome::Hung;
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    let failed = || {
        let first = stderr.trim().lines().next().unwrap_or_default();
        Outcome::Failed(first.trim_start_matches("iperf3: error - ").to_string())
    };
    if verbose {
        let done = status.success() && text.contains("iperf Done.");
        return if done {
            Outcome::Passed {
                sent: 0,
                received: 0,
            }
        } else {
            failed()
        };
    }
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    // iperf3 3.12 exits 0 after an error with -J: the document says it.
    if let Some(e) = v["error"].as_str() {
        return Outcome::Failed(e.lines().next().unwrap_or_default().to_string());
    }
    if !status.success() || v.is_null() {
        let why = stderr
            .trim()
            .trim_start_matches("iperf3: error - ")
            .to_string();
        return Outcome::Failed(why);
    }
    let end = &v["end"];
    let sum = |key: &str| end[key]["bytes"].as_u64();
    let sent = sum("sum_sent").or_else(|| sum("sum")).unwrap_or(0);
    let received = sum("sum_received").or_else(|| sum("sum")).unwrap_or(0);
    Outcome::Passed { sent, received }
}

/// Whether a command's byte counts are exact in iperf3 itself: TCP, an amount (`-n`, `-k`),
/// the client sending.
fn exact(args: &str) -> bool {
    let words: Vec<&str> = args.split_whitespace().collect();
    let amount = words.contains(&"-n") || words.contains(&"-k");
    amount && !words.contains(&"-u") && !words.contains(&"-R") && !words.contains(&"-t")
}

/// A TCP test's `-n` in bytes (iperf3's M is MiB), for the commands that give one alone.
fn tcp_amount(args: &str) -> Option<u64> {
    let words: Vec<&str> = args.split_whitespace().collect();
    if words.contains(&"-u") || words.contains(&"-t") {
        return None;
    }
    let n = words.iter().position(|w| *w == "-n")?;
    let m = words.get(n + 1)?.strip_suffix('M')?.parse::<u64>().ok()?;
    Some(m << 20)
}

#[test]
#[ignore = "needs iperf3"]
fn iperf3s_test_commands_pass_against_wirebench_as_against_iperf3() {
    if std::env::var_os("WIREBENCH_IPERF3").is_none() {
        common::require("iperf3");
    }
    let started = Instant::now();
    let v4 = (iperf3_server("127.0.0.1"), wirebench_server("127.0.0.1"));
    let v6 = (iperf3_server("::1"), wirebench_server("::1"));
    let mut table = vec![
        "| command (`iperf3 -c HOST ...`) | against `iperf3 -s` | against `wirebench serve` |"
            .to_string(),
        "|---|---|---|".to_string(),
    ];
    let mut wrong = Vec::new();
    for args in COMMANDS {
        let six = args.split_whitespace().any(|w| w == "-6");
        let (host, (theirs, ours)) = if six {
            ("::1", &v6)
        } else {
            ("127.0.0.1", &v4)
        };
        let a = run(host, theirs.port, args);
        let b = run(host, ours.port, args);
        table.push(format!("| `{args}` | {} | {} |", a.cell(), b.cell()));
        let refused = REFUSED
            .iter()
            .find(|(flag, _)| args.contains(flag))
            .map(|(_, words)| *words);
        match (&a, &b, refused) {
            (_, Outcome::Hung, _) => wrong.push(format!("{args}: hangs against wirebench")),
            (a, Outcome::Failed(e), Some(words)) if a.passed() && !e.contains(words) => {
                wrong.push(format!(
                    "{args}: refused without iperf3's words {words:?}: {e}"
                ));
            }
            (a, b, None) if a.passed() && !b.passed() => {
                wrong.push(format!(
                    "{args}: passes against iperf3 -s, not against wirebench: {b:?}"
                ));
            }
            _ => {}
        }
        if let (Outcome::Passed { sent: theirs, .. }, Outcome::Passed { sent, received }) = (&a, &b)
        {
            if exact(args) && (theirs != sent || sent != received) {
                wrong.push(format!(
                    "{args}: counts differ: iperf3 -s {a:?}, wirebench {b:?}"
                ));
            }
        }
        // A TCP -n arrives whole either way: the server sends exactly it with -R.
        if let (Some(n), Outcome::Passed { sent, received }) = (tcp_amount(args), &b) {
            if *sent != n || *received != n {
                wrong.push(format!(
                    "{args}: wirebench moved {sent} and {received}, not {n}"
                ));
            }
        }
    }
    drop((v4, v6));
    println!("{}", table.join("\n"));
    println!("(ran in {:.0} s)", started.elapsed().as_secs_f64());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
