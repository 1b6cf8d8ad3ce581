//! `wirebench lab`: glue between the flags and the lab crate.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Stdio};

use anyhow::{anyhow, Context};
use wirebench_lab::topo::{Lab, LinkLog, LinkReport, Topology};

use crate::cli::{LabAction, LabArgs};
use crate::Failure;

/// The client host's address on a one-link lab.
pub const CLIENT_ADDR: &str = "10.77.0.1";
/// The server host's address on a one-link lab.
pub const SERVER_ADDR: &str = "10.77.0.2";

pub fn lab(args: &LabArgs) -> Result<(), Failure> {
    if let Some(action) = &args.action {
        return match action {
            LabAction::Up {
                name,
                scenario,
                link,
            } => crate::testbed::up(name, scenario.as_deref(), link),
            LabAction::Exec {
                name,
                host,
                command,
            } => crate::testbed::exec(name, host, command),
            LabAction::Down { name } => crate::testbed::down(name),
            LabAction::List => crate::testbed::list(),
            LabAction::Hold { name, topology } => crate::testbed::hold(name, topology),
            LabAction::Scenario(s) => crate::scenario::run(s),
        };
    }
    let (up, down) = args.link.props().configs().map_err(Failure::Usage)?;
    let (mode, rest) = match args.command.split_first() {
        Some((m, rest)) if m == "run" || m == "exec" => (m.as_str(), rest),
        _ => {
            return Err(Failure::Usage(
                "lab needs a command after --: `run [run options]` or `exec -- COMMAND`".into(),
            ))
        }
    };
    let rest = match rest.split_first() {
        Some((dd, r)) if dd == "--" => r,
        _ => rest,
    };
    if mode == "exec" && rest.is_empty() {
        return Err(Failure::Usage("lab -- exec needs a COMMAND".into()));
    }
    if mode == "run" && args.serve.is_some() {
        return Err(Failure::Usage(
            "--serve is for `exec`; `run` uses wirebench serve".into(),
        ));
    }
    let log_ns = match &args.link_log {
        None => 0,
        Some(_) => log_interval_ns(&args.link_log_interval)?,
    };
    // Made before the lab, so that a path it cannot write is said before any test runs.
    let mut log_file = match &args.link_log {
        None => None,
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
    };
    wirebench_lab::ensure_privilege().map_err(|e| anyhow!(e))?;
    let lab = Lab::build_logged(&Topology::pair(up, down), log_ns).context("building the lab")?;
    let exe = std::env::current_exe().context("finding the wirebench executable")?;

    let mut server = match &args.serve {
        Some(cmd) => {
            let words: Vec<&str> = cmd.split_whitespace().collect();
            let Some((prog, sargs)) = words.split_first() else {
                return Err(Failure::Usage("--serve needs a command".into()));
            };
            let mut c = lab.command(1, prog);
            c.args(sargs).stdin(Stdio::null());
            let child = c
                .spawn()
                .with_context(|| format!("starting {prog} in the server host"))?;
            // Give it a moment to listen.
            std::thread::sleep(std::time::Duration::from_millis(300));
            child
        }
        None => start_server(&lab, &exe, 1, SERVER_ADDR)?,
    };

    let json = mode == "run" && rest.iter().any(|a| a == "--json" || a == "-J");
    let mut client = if mode == "run" {
        let mut c = lab.command(0, &exe);
        c.arg("run").arg(SERVER_ADDR).args(rest);
        c
    } else {
        let mut c = lab.command(0, &rest[0]);
        c.args(&rest[1..]);
        c
    };
    client
        .env("LAB_SERVER", SERVER_ADDR)
        .env("LAB_CLIENT", CLIENT_ADDR);
    if json {
        client.stdout(Stdio::piped());
    }
    let mut child = client.spawn().with_context(|| {
        format!(
            "starting {} in the client host",
            rest.first().map_or("wirebench run", |s| s)
        )
    })?;
    let mut out = String::new();
    if json {
        if let Some(mut so) = child.stdout.take() {
            so.read_to_string(&mut out)
                .context("reading the test's output")?;
        }
    }
    let status = child.wait().context("waiting for the command")?;
    stop_child(&mut server);
    let (reports, logs) = lab.stop_logged().context("stopping the emulator")?;
    if let (Some(w), Some(p)) = (&mut log_file, &args.link_log) {
        write_link_log(w, &["client-server".to_string()], &logs)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if json {
        let mut v: serde_json::Value =
            serde_json::from_str(&out).context("reading the test's JSON")?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("lab".into(), lab_json(&args.link.props(), &reports));
        }
        let mut stdout = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut stdout, &v).context("writing JSON")?;
        writeln!(stdout).context("writing JSON")?;
    } else {
        eprint!("{}", report_lines(&reports));
    }
    if status.success() {
        Ok(())
    } else {
        Err(Failure::Runtime(anyhow!(
            "the command in the client host failed ({status})"
        )))
    }
}

/// Starts `wirebench serve` in `node`, bound to `addr`, and waits until it listens.
pub fn start_server(
    lab: &Lab,
    exe: &std::path::Path,
    node: usize,
    addr: &str,
) -> Result<Child, Failure> {
    let mut c = lab.command(node, exe);
    c.args(["serve", "--quiet", "--bind", addr])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = c
        .spawn()
        .context("starting wirebench serve in the server host")?;
    let stdout = child.stdout.take().context("server stdout")?;
    let mut lines = BufReader::new(stdout);
    let mut first = String::new();
    lines
        .read_line(&mut first)
        .context("waiting for the server")?;
    if !first.contains("listening") {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Failure::Runtime(anyhow!(
            "the server in the lab did not start"
        )));
    }
    // Keep reading so that the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
    Ok(child)
}

/// Ends a child this lab started (it is ours, by its id).
pub fn stop_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The `lab` object of a results JSON: the link as configured and what each direction did.
pub fn lab_json(
    props: &wirebench_lab::props::LinkProps,
    reports: &[LinkReport],
) -> serde_json::Value {
    serde_json::json!({
        "link": props,
        "client": CLIENT_ADDR,
        "server": SERVER_ADDR,
        "links": reports,
    })
}

/// A few lines on what the emulated link did.
pub fn report_lines(reports: &[LinkReport]) -> String {
    let mut s = String::new();
    for (i, r) in reports.iter().enumerate() {
        for (dir, d) in [
            ("up (client → server)", &r.up),
            ("down (server → client)", &r.down),
        ] {
            let mean_q = if d.link.delivered > 0 {
                d.link.queue_delay_ns as f64 / d.link.delivered as f64 / 1e6
            } else {
                0.0
            };
            s += &format!(
                "lab link {i} {dir}: {} packets in, {} lost, {} queue drops, {} delivered, \
                 queue delay mean {mean_q:.3} ms max {:.3} ms, {} emulator drops\n",
                d.link.packets_in,
                d.link.dropped_loss,
                d.link.dropped_queue,
                d.link.delivered,
                d.link.max_queue_delay_ns as f64 / 1e6,
                d.emulator_drops + d.send_errors + d.oversize,
            );
        }
    }
    s
}

/// The header of a link log (`lab --link-log`): one row per link, direction and interval.
pub const LINK_LOG_HEADER: &str = "t_s,link,direction,packets_in,bytes_in,dropped_loss,\
dropped_queue,delivered,delivered_bytes,delivered_bps,max_queue_delay_ms";

/// Writes link logs as CSV: `t_s` is the interval's start since the lab began; rows run
/// from the first interval to the last in which anything happened, quiet ones included.
/// `link` is the link's name (its two ends, `client-server` on one link).
pub fn write_link_log(
    w: &mut impl Write,
    names: &[String],
    logs: &[LinkLog],
) -> std::io::Result<()> {
    writeln!(w, "{LINK_LOG_HEADER}")?;
    for (i, log) in names.iter().zip(logs) {
        let secs = log.interval_ns as f64 / 1e9;
        for (dir, bins) in [("up", &log.up), ("down", &log.down)] {
            let first = bins.iter().position(|b| *b != Default::default());
            for (k, b) in bins.iter().enumerate().skip(first.unwrap_or(bins.len())) {
                writeln!(
                    w,
                    "{:.3},{i},{dir},{},{},{},{},{},{},{:.0},{:.3}",
                    k as f64 * secs,
                    b.packets_in,
                    b.bytes_in,
                    b.dropped_loss,
                    b.dropped_queue,
                    b.delivered,
                    b.delivered_bytes,
                    b.delivered_bytes as f64 * 8.0 / secs,
                    b.max_queue_delay_ns as f64 / 1e6,
                )?;
            }
        }
    }
    w.flush()
}

/// A link log's interval, ns, from its flag's text: 1 ms or more.
pub fn log_interval_ns(text: &str) -> Result<u64, Failure> {
    let d = wirebench_proto::units::parse_duration(text)
        .map_err(|e| Failure::Usage(format!("--link-log-interval: {e}")))?;
    if d < std::time::Duration::from_millis(1) {
        return Err(Failure::Usage(
            "--link-log-interval must be at least 1ms".into(),
        ));
    }
    Ok(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
