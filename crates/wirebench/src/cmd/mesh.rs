//! `wirebench mesh FILE`: the agent. It reads the mesh file, keeps the paths that run from
//! this machine's hosts, drives their schedule (`wirebench-mesh`) with its own monotonic
//! clock, runs each test with the engine on a thread of its own (throughput tests ask the
//! server to run them alone: `--exclusive`), and writes a row for every scheduled run to
//! the archive, done or failed with its reason, with the path's next round in the same
//! transaction, so that a restarted agent resumes its schedule.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wirebench_engine::rrul::{run_rrul, RrulPlan};
use wirebench_engine::{ClientConfig, EngineError, Iperf3Config, Psk, Watch};
use wirebench_mesh::{Ended, Kind, Mesh, Missed, Path, Peer, Schedule, Start};
use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::results::Results;
use wirebench_proto::spec::TestSpec;
use wirebench_report::archive::metrics::MeshMetrics;
use wirebench_report::archive::{figures, Archive, NextRound, Outcome, Row};

use super::interrupt::Interrupt;
use crate::cli::{MeshArgs, ModeArg};
use crate::Failure;

/// The largest mesh file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The longest the agent waits for running tests once it stops (their own bounds end them
/// sooner; this is a backstop).
const STOP_GRACE: Duration = Duration::from_secs(120);

/// Shows nothing (the agent prints a line per run); notes when the test's first data
/// connection opened: the run's start in its row, after any wait for the hosts.
#[derive(Default)]
struct Stamp {
    first_unix_ms: Option<i64>,
}

impl Watch for Stamp {
    fn connected(
        &mut self,
        _stream: u32,
        _local: std::net::SocketAddr,
        _remote: std::net::SocketAddr,
    ) {
        self.first_unix_ms.get_or_insert_with(unix_ms);
    }
}

/// A test of the mesh, ready to run against a destination.
#[derive(Clone)]
enum Ready {
    /// One wirebench test.
    Test(TestSpec),
    /// `--mode rrul`: a load and two probes.
    Rrul(Box<RrulPlan>),
    /// A test against an iperf3 server (`peer = "iperf3"`), with iperf3's own flags.
    Iperf3 {
        spec: TestSpec,
        window: u64,
        mss: Option<u32>,
        fq_rate_bps: Option<u64>,
    },
}

/// Why a run made no results: its kind (busy is asked again) and its words.
struct RunFailure {
    kind: ErrorKind,
    text: String,
}

impl From<EngineError> for RunFailure {
    fn from(e: EngineError) -> Self {
        Self {
            kind: e.kind(),
            text: e.to_string(),
        }
    }
}

/// What a run's thread sends back.
struct Done {
    id: u64,
    started_unix_ms: i64,
    ended_unix_ms: i64,
    result: Result<Results, RunFailure>,
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Reads the mesh file, bounded, and checks it; a one-line error naming the file and place.
fn read_mesh(path: &std::path::Path) -> Result<Mesh, Failure> {
    let named = |why: String| Failure::Usage(format!("{}: {why}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| named(e.to_string()))?;
    if !meta.is_file() {
        return Err(named("not a file".into()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(named(format!(
            "{} bytes: a mesh file is at most {MAX_FILE_BYTES}",
            meta.len()
        )));
    }
    // No more than the bound, whatever the file became since it was looked at.
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| {
            std::io::Read::read_to_string(
                &mut std::io::Read::take(f, MAX_FILE_BYTES + 1),
                &mut text,
            )
        })
        .map_err(|e| named(e.to_string()))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(named(format!(
            "a mesh file is at most {MAX_FILE_BYTES} bytes"
        )));
    }
    Mesh::parse(&text).map_err(|e| named(e.to_string()))
}

/// Each test's `run` flags as a spec, checked as `run` checks them; throughput tests ask to
/// run alone.
fn ready_tests(mesh: &Mesh) -> Result<Vec<Ready>, Failure> {
    mesh.tests
        .iter()
        .map(|t| {
            let place = |why: String| Failure::Usage(format!("tests.{}.run: {why}", t.name));
            let argv = ["wirebench", "run", "HOST"]
                .into_iter()
                .map(String::from)
                .chain(t.run.iter().cloned());
            let cli = crate::cli::parse_from(argv).map_err(|e| {
                let text = e.to_string();
                place(
                    text.lines()
                        .next()
                        .unwrap_or_default()
                        .trim_start_matches("error: ")
                        .into(),
                )
            })?;
            let crate::cli::Command::Run(cmd) = cli.command else {
                return Err(place("not run's flags".into()));
            };
            let args = &cmd.run;
            if args.iperf3.is_some() {
                return Err(place(
                    "--iperf3: the destinations are iperf3 servers when the test says peer = \"iperf3\"".into(),
                ));
            }
            if args.both_directions || args.file.is_some() || args.packet_log.is_some() {
                return Err(place(
                    "--both-directions, --file and --packet-log do not run in a mesh".into(),
                ));
            }
            let alone = t.kind == Kind::Throughput;
            if args.mode == ModeArg::Rrul {
                if t.peer == Peer::Iperf3 {
                    return Err(place("--mode rrul runs against wirebench servers only".into()));
                }
                let mut plan = super::rrul::plan(args).map_err(place)?;
                plan.load.exclusive = alone;
                return Ok(Ready::Rrul(Box::new(plan)));
            }
            let mut spec = args.spec().map_err(place)?;
            spec.exclusive = alone;
            Ok(match t.peer {
                Peer::Wirebench => Ready::Test(spec),
                Peer::Iperf3 => Ready::Iperf3 {
                    spec,
                    window: args.window.unwrap_or(0),
                    mss: cmd.client.iperf3_only.set_mss,
                    fq_rate_bps: cmd.client.iperf3_only.fq_rate.filter(|&r| r > 0),
                },
            })
        })
        .collect()
}

/// This machine's hosts of the mesh: those named by `--as`, else those whose address is
/// one of this machine's (a UDP socket binds to it).
fn local_hosts(mesh: &Mesh, named: &[String]) -> Result<Vec<usize>, Failure> {
    if !named.is_empty() {
        return named
            .iter()
            .map(|n| {
                mesh.hosts.iter().position(|h| &h.name == n).ok_or_else(|| {
                    Failure::Usage(format!("--as {n}: the mesh file has no host of that name"))
                })
            })
            .collect();
    }
    Ok((0..mesh.hosts.len())
        .filter(|&i| host_ip(&mesh.hosts[i].address).is_some_and(is_local))
        .collect())
}

/// The IP address a host's `HOST[:PORT]` names (resolved), if any.
fn host_ip(address: &str) -> Option<IpAddr> {
    let (host, port) = super::run::split_host_port(address, crate::cli::DEFAULT_PORT).ok()?;
    (host.as_str(), port)
        .to_socket_addrs()
        .ok()?
        .next()
        .map(|a| a.ip())
}

/// Whether `ip` is this machine's.
fn is_local(ip: IpAddr) -> bool {
    UdpSocket::bind((ip, 0)).is_ok()
}

/// The agent.
pub fn mesh(args: &MeshArgs) -> Result<(), Failure> {
    let mesh = read_mesh(&args.file)?;
    let tests = ready_tests(&mesh)?;
    let ours = local_hosts(&mesh, &args.hosts)?;
    let paths: Vec<Path> = mesh
        .paths
        .iter()
        .copied()
        .filter(|p| ours.contains(&p.source))
        .collect();
    if paths.is_empty() {
        return Err(Failure::Usage(format!(
            "{}: no path runs from this machine (no host's address is one of its own): name this agent's hosts with --as",
            args.file.display()
        )));
    }
    let psk = crate::psk::load_psk(args.psk_file.as_deref()).map_err(Failure::Usage)?;
    let mut archive = Archive::create(&args.archive).map_err(|e| Failure::Runtime(e.into()))?;
    let started = Instant::now();
    let wall0 = unix_ms();
    let resumed: HashMap<(String, String, String), i64> = archive
        .next_rounds()
        .map_err(|e| Failure::Runtime(e.into()))?
        .into_iter()
        .map(|n| ((n.test, n.source, n.destination), n.next_unix_ms))
        .collect();
    let resume = |p: &Path| {
        resumed
            .get(&path_key(&mesh, p))
            .map(|&at| u64::try_from(at - wall0).unwrap_or(0))
    };
    let seed = args.seed.unwrap_or_else(random_seed);
    let sched = Schedule::new(&mesh, &paths, 0, seed, &resume);
    let (tx, rx) = mpsc::channel::<Done>();
    let metrics = Arc::new(MeshMetrics::default());
    if let Some(addr) = args.metrics {
        let m = Arc::clone(&metrics);
        let bound = wirebench_engine::serve_metrics(addr, move |f| {
            m.render(f == wirebench_engine::MetricsFormat::OpenMetrics)
        })
        .map_err(|e| Failure::Runtime(e.into()))?;
        eprintln!("mesh: metrics at http://{bound}/metrics");
    }
    let mut agent = Agent {
        metrics,
        order: sched.paths().collect(),
        mesh: &mesh,
        tests: &tests,
        sched,
        archive,
        wall0,
        psk,
        tx,
        running: HashMap::new(),
        counts: (0, 0),
    };
    eprintln!(
        "mesh: {} paths from {} of {} hosts; archive {}",
        paths.len(),
        ours.len(),
        mesh.hosts.len(),
        args.archive.display()
    );
    let interrupt = Interrupt::install();
    let mut stopping_since: Option<Instant> = None;
    loop {
        let now = ms(started.elapsed());
        let stop = interrupt.is_set() || args.run_for.is_some_and(|d| started.elapsed() >= d);
        if stop {
            let since = *stopping_since.get_or_insert_with(Instant::now);
            if agent.running.is_empty() || since.elapsed() > STOP_GRACE {
                break;
            }
        } else {
            agent.step(now)?;
        }
        let wait = if stop {
            Duration::from_millis(200)
        } else {
            let next = agent.sched.next_wake().unwrap_or(now + 1000);
            let until_stop = args.run_for.map_or(u64::MAX, |d| ms(d).saturating_sub(now));
            let wait = next
                .saturating_sub(now)
                .clamp(1, 1000)
                .min(until_stop.max(1));
            Duration::from_millis(wait)
        };
        match rx.recv_timeout(wait) {
            Ok(done) => agent.ended(done, ms(started.elapsed()), stop)?,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let (done, failed) = agent.counts;
    eprintln!(
        "mesh: {} runs: {done} done, {failed} failed; archive {}",
        done + failed,
        args.archive.display()
    );
    Ok(())
}

/// A path's names: test, source, destination.
fn path_key(mesh: &Mesh, p: &Path) -> (String, String, String) {
    (
        mesh.tests[p.test].name.clone(),
        mesh.hosts[p.source].name.clone(),
        mesh.hosts[p.destination].name.clone(),
    )
}

/// The agent at work: its schedule, its runs under way and its archive.
struct Agent<'a> {
    /// What `--metrics` serves.
    metrics: Arc<MeshMetrics>,
    mesh: &'a Mesh,
    tests: &'a [Ready],
    /// The schedule's paths, as its indices name them.
    order: Vec<Path>,
    sched: Schedule,
    archive: Archive,
    /// The wall clock (ms since the Unix epoch) when the schedule's clock was 0.
    wall0: i64,
    psk: Option<Psk>,
    tx: mpsc::Sender<Done>,
    /// Runs under way: their path.
    running: HashMap<u64, usize>,
    /// Rows written: done, failed.
    counts: (u64, u64),
}

impl Agent<'_> {
    /// What the schedule says at `now`: rows for the rounds missed, runs started.
    fn step(&mut self, now: u64) -> Result<(), Failure> {
        let (starts, missed) = self.sched.poll(now);
        for m in missed {
            let row = missed_row(self.mesh, &self.order, &m, self.wall0);
            self.keep(&row, m.path)?;
        }
        for s in starts {
            spawn_run(
                self.mesh,
                &self.order,
                self.tests,
                s,
                self.psk.as_ref(),
                &self.tx,
            );
            self.running.insert(s.id, s.path);
        }
        Ok(())
    }

    /// A run ended at `now`: a busy answer is asked again within its slip (no row for the
    /// try), anything else is its row.
    fn ended(&mut self, done: Done, now: u64, stopping: bool) -> Result<(), Failure> {
        let Some(path) = self.running.remove(&done.id) else {
            return Ok(());
        };
        let busy = matches!(&done.result, Err(e) if e.kind == ErrorKind::Busy);
        if busy && !stopping {
            self.sched.finished(done.id, now, Ended::Busy);
            return Ok(());
        }
        self.sched.finished(done.id, now, Ended::Ran);
        let row = run_row(self.mesh, &self.order[path], done);
        self.keep(&row, path)
    }

    /// Writes `row` of schedule path `path` with the path's next round, and prints it.
    fn keep(&mut self, row: &Row, path: usize) -> Result<(), Failure> {
        let next = next_of(&self.sched, &self.order, path, self.mesh, self.wall0);
        write(&mut self.archive, row, next)?;
        self.metrics.record(row);
        if row.outcome == Outcome::Done {
            self.counts.0 += 1;
        } else {
            self.counts.1 += 1;
        }
        line(row);
        Ok(())
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A seed for the slips that differs between agents: the clock's nanoseconds and the
/// process id (not a secret).
fn random_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// Writes a row: an archive that cannot be written ends the agent (nothing written is lost).
fn write(archive: &mut Archive, row: &Row, next: Option<NextRound>) -> Result<(), Failure> {
    archive
        .insert(row, next.as_ref())
        .map_err(|e| Failure::Runtime(e.into()))
}

/// The path's next round as the schedule has it, for the archive.
fn next_of(
    sched: &Schedule,
    order: &[Path],
    path: usize,
    mesh: &Mesh,
    wall0: i64,
) -> Option<NextRound> {
    let p = order.get(path)?;
    let (_, at) = sched.next_rounds().find(|(q, _)| q == p)?;
    Some(NextRound {
        test: mesh.tests[p.test].name.clone(),
        source: mesh.hosts[p.source].name.clone(),
        destination: mesh.hosts[p.destination].name.clone(),
        next_unix_ms: wall0.saturating_add(i64::try_from(at).unwrap_or(i64::MAX)),
    })
}

/// One line per run on stdout, as it is archived.
fn line(row: &Row) {
    let what = match (&row.outcome, row.throughput_bps, row.latency_us) {
        (Outcome::Failed, _, _) => format!(
            "failed ({}): {}",
            row.error_kind.as_deref().unwrap_or("?"),
            row.reason.as_deref().unwrap_or("")
        ),
        (_, Some(bps), _) => format!("{:.2} Mbit/s", bps / 1e6),
        (_, _, Some(us)) => format!("{us:.1} µs median round trip"),
        _ => "done".into(),
    };
    println!(
        "{} {} -> {} {}: {what}",
        wirebench_report::archive::query::utc(row.started_unix_ms),
        row.source,
        row.destination,
        row.test
    );
}

/// Starts run `s` on a thread of its own: from the source host's address to the
/// destination's server.
fn spawn_run(
    mesh: &Mesh,
    order: &[Path],
    tests: &[Ready],
    s: Start,
    psk: Option<&Psk>,
    tx: &mpsc::Sender<Done>,
) {
    let p = order[s.path];
    let ready = tests[p.test].clone();
    let dest = mesh.hosts[p.destination].address.clone();
    let source = mesh.hosts[p.source].address.clone();
    let bind = host_ip(&source);
    let psk = psk.cloned();
    let (mine, id) = (tx.clone(), s.id);
    let spawned = std::thread::Builder::new()
        .name("wirebench-mesh-run".into())
        .spawn(move || {
            let called = unix_ms();
            let mut stamp = Stamp::default();
            let result = run_one(ready, (&source, &dest), bind, psk, &mut stamp);
            // A run's time in its row is its data's: from its first data connection for the
            // test's own time; one that made no results, from its call to its end.
            let started_unix_ms = stamp.first_unix_ms.unwrap_or(called);
            let ended_unix_ms = match &result {
                Ok(r) => started_unix_ms + (r.end.duration_s * 1000.0).ceil() as i64,
                Err(_) => unix_ms(),
            };
            let _ = mine.send(Done {
                id,
                started_unix_ms,
                ended_unix_ms,
                result,
            });
        });
    if let Err(e) = spawned {
        let now = unix_ms();
        let _ = tx.send(Done {
            id,
            started_unix_ms: now,
            ended_unix_ms: now,
            result: Err(RunFailure {
                kind: ErrorKind::Internal,
                text: format!("starting a run's thread: {e}"),
            }),
        });
    }
}

/// The hold's rate and message size: a message a second, so that the hold is never taken
/// for idle by a server short of memory that reclaims idle tests.
const HOLD_RATE_BPS: u64 = 800;
const HOLD_SIZE: u64 = 100;
/// The longest a hold may last: past any test a mesh runs, and ended as soon as the run is.
const HOLD_LONGEST: Duration = Duration::from_secs(3600);
/// How long the agent waits for its own host's server to grant the hold.
const HOLD_WAIT: Duration = Duration::from_secs(10);

/// Watches a hold: says when its data connection is up (the server admitted it) and ends
/// it when asked.
struct HoldWatch {
    up: Option<mpsc::Sender<()>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Watch for HoldWatch {
    fn connected(
        &mut self,
        _stream: u32,
        _local: std::net::SocketAddr,
        _remote: std::net::SocketAddr,
    ) {
        if let Some(up) = self.up.take() {
            let _ = up.send(());
        }
    }
    fn interrupted(&mut self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A throughput run's hold on its source host: a trickle test that asks the source's own
/// server to run alone (`--exclusive`), for as long as the run lasts, so that another
/// agent's throughput test to this host hears `busy` meanwhile, as one to the destination
/// does. Ended when dropped.
struct Hold {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Hold {
    /// Takes the hold on the server at `source` (the source host's address), from `bind`.
    /// `Ok(None)`: no server listens there (then no other agent can test to it either).
    fn take(
        source: &str,
        bind: Option<IpAddr>,
        psk: Option<Psk>,
    ) -> Result<Option<Self>, RunFailure> {
        let (host, port) = super::run::split_host_port(source, crate::cli::DEFAULT_PORT)
            .unwrap_or_else(|_| (source.to_string(), crate::cli::DEFAULT_PORT));
        let spec = TestSpec {
            duration_ns: Some(HOLD_LONGEST.as_nanos() as u64),
            rate_bps: Some(HOLD_RATE_BPS),
            size: HOLD_SIZE,
            exclusive: true,
            ..TestSpec::default()
        };
        let cfg = ClientConfig {
            host,
            port,
            spec,
            packet_log: None,
            file: None,
            save: None,
            psk,
            bind,
            stack: None,
            quic: None,
        };
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (up_tx, up_rx) = mpsc::channel();
        let (err_tx, err_rx) = mpsc::channel();
        let mut watch = HoldWatch {
            up: Some(up_tx),
            stop: Arc::clone(&stop),
        };
        let thread = std::thread::Builder::new()
            .name("wirebench-mesh-hold".into())
            .spawn(move || {
                if let Err(e) = wirebench_engine::run(&cfg, &mut watch) {
                    let _ = err_tx.send(e);
                }
            })
            .map_err(|e| RunFailure {
                kind: ErrorKind::Internal,
                text: format!("starting a hold's thread: {e}"),
            })?;
        let hold = Self {
            stop,
            thread: Some(thread),
        };
        let until = Instant::now() + HOLD_WAIT;
        loop {
            if up_rx.try_recv().is_ok() {
                return Ok(Some(hold));
            }
            match err_rx.recv_timeout(Duration::from_millis(10)) {
                Ok(e) if e.kind() == ErrorKind::Connect => return Ok(None),
                Ok(e) => {
                    let mut f = RunFailure::from(e);
                    f.text = format!("holding the source host: {}", f.text);
                    return Err(f);
                }
                Err(_) if Instant::now() > until => {
                    hold.stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(RunFailure {
                        kind: ErrorKind::Timeout,
                        text: "holding the source host: its server did not admit the hold".into(),
                    });
                }
                Err(_) => {}
            }
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs one test against `dest` from `bind`; a throughput test first holds its source host
/// (`source`, its server's address) for as long as it runs.
fn run_one(
    ready: Ready,
    (source, dest): (&str, &str),
    bind: Option<IpAddr>,
    psk: Option<Psk>,
    stamp: &mut Stamp,
) -> Result<Results, RunFailure> {
    let alone = match &ready {
        Ready::Test(spec) => spec.exclusive,
        Ready::Rrul(plan) => plan.load.exclusive,
        Ready::Iperf3 { spec, .. } => spec.exclusive,
    };
    let _hold = if alone {
        Hold::take(source, bind, psk.clone())?
    } else {
        None
    };
    let port = match &ready {
        Ready::Iperf3 { .. } => wirebench_engine::iperf3::DEFAULT_PORT,
        _ => crate::cli::DEFAULT_PORT,
    };
    let (host, port) =
        super::run::split_host_port(dest, port).unwrap_or_else(|_| (dest.to_string(), port));
    let cfg = |spec: TestSpec| ClientConfig {
        host: host.clone(),
        port,
        spec,
        packet_log: None,
        file: None,
        save: None,
        psk: psk.clone(),
        bind,
        stack: None,
        quic: None,
    };
    match ready {
        Ready::Test(spec) => Ok(wirebench_engine::run(&cfg(spec), stamp)?),
        Ready::Rrul(plan) => {
            stamp.first_unix_ms = Some(unix_ms());
            // A mesh's run is not stopped part way: the agent waits for it.
            let never = Arc::new(std::sync::atomic::AtomicBool::new(false));
            run_rrul(&cfg(plan.load.clone()), &plan, &never).map_err(|e| RunFailure {
                kind: e.engine().map_or(ErrorKind::Internal, EngineError::kind),
                text: e.to_string(),
            })
        }
        Ready::Iperf3 {
            spec,
            window,
            mss,
            fq_rate_bps,
        } => {
            let cfg = Iperf3Config {
                host: host.clone(),
                port,
                spec,
                window,
                packet_log: None,
                mss,
                fq_rate_bps,
                bind,
            };
            cfg.check()?;
            Ok(wirebench_engine::run_iperf3(&cfg, stamp)?)
        }
    }
}

/// An error kind in the words the results use (`busy`, `connect`, ...).
fn kind_word(k: ErrorKind) -> String {
    serde_json::to_string(&k)
        .map(|s| s.trim_matches('"').to_string())
        .unwrap_or_default()
}

/// The row of a run that ended.
fn run_row(mesh: &Mesh, p: &Path, done: Done) -> Row {
    let t = &mesh.tests[p.test];
    let mut row = Row {
        started_unix_ms: done.started_unix_ms,
        ended_unix_ms: done.ended_unix_ms,
        source: mesh.hosts[p.source].name.clone(),
        destination: mesh.hosts[p.destination].name.clone(),
        test: t.name.clone(),
        kind: t.kind.as_str().into(),
        outcome: Outcome::Done,
        error_kind: None,
        reason: None,
        throughput_bps: None,
        latency_us: None,
        loss_ratio: None,
        results: None,
    };
    match done.result {
        Ok(r) => {
            (row.throughput_bps, row.latency_us, row.loss_ratio) = figures(&r);
            if let Some(e) = &r.error {
                row.outcome = Outcome::Failed;
                row.reason = Some(e.clone());
                row.error_kind = Some(r.error_cause.map_or("incomplete".into(), kind_word));
            }
            row.results = serde_json::to_string(&r).ok();
        }
        Err(e) => {
            row.outcome = Outcome::Failed;
            row.error_kind = Some(kind_word(e.kind));
            row.reason = Some(e.text);
        }
    }
    row
}

/// The row of a round whose run did not start within its slip.
fn missed_row(mesh: &Mesh, order: &[Path], m: &Missed, wall0: i64) -> Row {
    let p = order[m.path];
    let t = &mesh.tests[p.test];
    Row {
        started_unix_ms: wall0.saturating_add(i64::try_from(m.round_ms).unwrap_or(i64::MAX)),
        ended_unix_ms: unix_ms(),
        source: mesh.hosts[p.source].name.clone(),
        destination: mesh.hosts[p.destination].name.clone(),
        test: t.name.clone(),
        kind: t.kind.as_str().into(),
        outcome: Outcome::Failed,
        error_kind: Some(m.why.kind().into()),
        reason: Some(m.why.to_string()),
        throughput_bps: None,
        latency_us: None,
        loss_ratio: None,
        results: None,
    }
}
