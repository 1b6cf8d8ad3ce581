//! What the server's threads share: its configuration, who is admitted, the tests waiting
//! for their data connections and hellos, and the log.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use wirebench_proto::control::{CRR_STREAM, PACKET_LOG_STREAM, RESULTS_STREAM};
use wirebench_proto::spec::Protocol;

use crate::control::admission::{Admission, PendingId, SpecLimits, Ticket};
pub use crate::control::admission::{DEFAULT_MAX_DURATION, DEFAULT_MAX_TIMING};
use crate::control::throttle::LogBudget;
use crate::role::DataSocket;

/// The name a test goes by in the server's log and live lines: a hash of its cookie. The
/// cookie itself is the test's secret (it attaches data connections and keys datagrams'
/// sequence numbers), so no log or line shows it, whole or in part.
pub(crate) fn test_id(cookie: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&cookie.to_le_bytes())
}

/// Server limits and address.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address and port to listen on (port 0: any free port). The IPv6 wildcard `[::]`
    /// takes IPv4 clients too (dual stack; on a host without IPv6, `0.0.0.0` instead),
    /// unless `ipv6_only`.
    pub bind: SocketAddr,
    /// An IPv6 `bind` takes IPv6 clients only (`serve -6`).
    pub ipv6_only: bool,
    /// Most tests running at once.
    pub max_tests: usize,
    /// Longest test accepted; tests asking for more are refused, and any test is ended there
    /// (none: [`DEFAULT_MAX_DURATION`]).
    pub max_duration: Option<Duration>,
    /// Longest `--gap`, `--ack-timeout` and `--drain` accepted ([`DEFAULT_MAX_TIMING`]).
    pub max_timing: Duration,
    /// Serve Prometheus metrics here (`--metrics`).
    pub metrics: Option<SocketAddr>,
    /// Highest rate accepted, bits/s, over all of a test's streams.
    pub max_rate_bps: Option<u64>,
    /// What tests may cost the server beyond their bytes: memory, packets.
    pub budget: ServerBudget,
    /// Most bytes a test may move (all streams).
    pub max_bytes: Option<u64>,
    /// Most streams a test may have (both ways for --bidir).
    pub max_streams: Option<u32>,
    /// Largest message (request, response) a test may use.
    pub max_size: Option<u64>,
    /// Most tests one client address may run at once.
    pub max_tests_per_client: Option<usize>,
    /// Most tests one client address may start in a minute.
    pub max_tests_per_minute: Option<usize>,
    /// Print one line per session on stderr.
    pub log: bool,
    /// Print the server's memory and load on stderr this often (`--stats`).
    pub stats_every: Option<Duration>,
    /// Clients must prove this pre-shared key (`--psk-file`).
    pub psk: Option<crate::auth::Psk>,
    /// Save what file transfers send here (`--save-dir`), within its quota; none: only
    /// hash them.
    pub save_dir: Option<crate::SaveDir>,
    /// Send files from here for reverse file transfers (`--files-dir`); none: refuse them.
    pub files_dir: Option<PathBuf>,
    /// Admit iperf3 clients although a pre-shared key is set (`--allow-iperf3`): iperf3
    /// cannot prove a key.
    pub allow_iperf3: bool,
    /// `--iperf3-json`: an iperf3 client's `--get-server-output` gets the JSON document (as
    /// from `iperf3 -s -J`), not the text lines (as from `iperf3 -s`).
    pub iperf3_json: bool,
    /// Also answer iperf3 clients on this port (`--iperf3-port`), TCP and UDP.
    pub iperf3_port: Option<u16>,
    /// Also serve QUIC perf clients on this UDP port (`--quic-perf-port`), with the QUIC
    /// identity; ignored without one.
    pub quic_perf_port: Option<u16>,
    /// Shown each interval of each test (`serve`'s live lines); none: nothing.
    pub watch: Option<super::roles::ServerWatch>,
    /// Take TCP data connections through this user-space stack (`--stack`), on its port;
    /// none: the kernel's, on the control port.
    pub user_stack: Option<std::sync::Arc<dyn crate::UserListener>>,
    /// The server's QUIC identity: QUIC tests are served on the UDP port with it; none
    /// (`serve --no-quic`): QUIC Initials are dropped.
    pub quic: Option<std::sync::Arc<crate::quic::Identity>>,
}

/// What the server's tests may cost it beyond the bytes they move (`serve --max-memory`,
/// `--max-pps`); none: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerBudget {
    /// Most server memory all running tests may hold together, bytes; each test's share is
    /// estimated from its spec at admission (`control::memory`) and held while it runs.
    pub max_memory: Option<u64>,
    /// Most server memory one client address's running tests may hold together (IPv6 by
    /// /64), bytes: by default half of `max_memory`, so one address leaves others room.
    pub max_memory_per_client: Option<u64>,
    /// Most messages a second one test may move, over all its streams and both ways:
    /// datagrams, and each request and response of rr.
    pub max_pps: Option<u64>,
}

/// A test waiting for its data connections and UDP hellos.
pub(super) struct Pending {
    pub(super) peer: IpAddr,
    pub(super) local: IpAddr,
    pub(super) protocol: Protocol,
    /// Streams of the test: attach and hello indices below this are accepted.
    pub(super) streams: u32,
    pub(super) tx: SyncSender<(u32, DataSocket)>,
    /// The test's data connection goes to the server's user-space stack: the kernel's
    /// listener takes none for it.
    pub(super) user_stack: bool,
    /// The packet log connection, for a test whose server side writes one.
    pub(super) log_tx: Option<SyncSender<TcpStream>>,
}

/// The server's shared state.
pub(crate) struct State {
    pub(crate) cfg: ServerConfig,
    pub(crate) port: u16,
    /// The kernel's caps on socket buffers, read once: the memory budget counts buffers as
    /// the kernel grants them.
    pub(crate) socket_caps: crate::control::memory::SocketCaps,
    /// Who is let in: the pending stage, test slots, starts per minute.
    pub(super) admission: Mutex<Admission>,
    /// Clients refused for a wrong key, since the start.
    pub(super) auth_failures: AtomicUsize,
    /// Told each time a test ends (see [`State::wait_idle`]).
    pub(super) test_ended: Condvar,
    /// Admitted tests ended since the start (`serve -1` exits after the first).
    pub(super) tests_ended: std::sync::atomic::AtomicU64,
    /// The counters `--metrics` serves.
    pub(super) metrics: super::metrics::Metrics,
    /// Set on SIGTERM: running tests end with a message, new ones are refused.
    pub(crate) shutdown: Arc<AtomicBool>,
    pub(super) pending: Mutex<HashMap<u64, Pending>>,
    /// Running `--mode crr` tests: where each transaction's connection goes, and the client
    /// address it must come from.
    pub(super) crr: Mutex<HashMap<u64, (IpAddr, SyncSender<DataSocket>)>>,
    /// iperf3 tests waiting for their data streams.
    pub(crate) iperf3: super::iperf3::registry::Registry,
    /// How many lines each address's refused connections may still log.
    pub(super) log_budget: Mutex<LogBudget>,
    /// Finished tests' last frames, for clients that fetch them (`control::shelf`).
    pub(super) shelf: Mutex<crate::control::shelf::Shelf>,
    /// QUIC connections in their handshake (`net::quic`).
    pub(super) quic_handshakes: Mutex<crate::quic::handshakes::Handshakes>,
}

/// The server log: one line per event, `key=value` pairs with values quoted where they have
/// spaces, starting with the time (Unix seconds) and the client.
pub(crate) fn log(state: &State, line: std::fmt::Arguments<'_>) {
    if state.cfg.log {
        let t = crate::sys::unix_now_ns() as f64 / 1e9;
        eprintln!("time={t:.3} {line}");
    }
}

/// A log line about a connection from `ip` that was refused or failed before its test
/// ran: a few per address, then one every few seconds carrying `suppressed=N`, the lines left
/// out since (a flood of wrong keys or garbage must not flood the operator's log).
pub(crate) fn log_refused(state: &State, ip: IpAddr, line: std::fmt::Arguments<'_>) {
    if !state.cfg.log {
        return;
    }
    let allowed = match state.log_budget.lock() {
        Ok(mut b) => b.allow(Instant::now(), ip),
        Err(_) => Some(0),
    };
    match allowed {
        Some(0) => log(state, line),
        Some(n) => log(state, format_args!("{line} suppressed={n}")),
        None => {}
    }
}

/// A log value (logfmt): bare when it is one printable word, else quoted, with `"` and `\\`
/// escaped and every control or non-ASCII character written as `\\n`, `\\t`, `\\u{..}`: a
/// client-sent string can never start a line of its own or move the terminal's cursor.
pub(crate) fn q(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\')
    {
        return v.to_string();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == ' ' || c.is_ascii_graphic() => out.push(c),
            c => out.push_str(&c.escape_unicode().to_string()),
        }
    }
    out.push('"');
    out
}

impl State {
    /// The admission state; a panic elsewhere while holding it leaves it usable.
    pub(crate) fn admission(&self) -> MutexGuard<'_, Admission> {
        self.admission.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A test ended: its slot is free, and whoever waits for the server to go idle is told.
    pub(crate) fn release(&self, ticket: Ticket) {
        let mut a = self.admission();
        a.release(ticket);
        // Counted under the admission lock, which the waiters hold between their looks.
        self.tests_ended
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        drop(a);
        self.test_ended.notify_all();
    }

    /// Waits until `n` admitted tests have ended since the start.
    pub(crate) fn wait_tests_ended(&self, n: u64) {
        let mut a = self.admission();
        while self.tests_ended.load(std::sync::atomic::Ordering::SeqCst) < n {
            a = match self.test_ended.wait(a) {
                Ok(a) => a,
                Err(p) => p.into_inner(),
            };
        }
    }

    /// Waits until no test runs or `until` passes; the tests still running.
    pub(crate) fn wait_idle(&self, until: Instant) -> usize {
        let mut a = self.admission();
        while a.running() > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            a = match self.test_ended.wait_timeout(a, left) {
                Ok((a, _)) => a,
                Err(p) => p.into_inner().0,
            };
        }
        a.running()
    }

    /// The connection `id` said what it is, or ended: it leaves the pending stage.
    pub(super) fn leave_pending(&self, id: PendingId) {
        self.admission().pending_close(id);
    }

    pub(super) fn spec_limits(&self) -> SpecLimits {
        let cfg = &self.cfg;
        SpecLimits {
            // No --max-duration: the documented ceiling still ends every test.
            max_duration: Some(cfg.max_duration.unwrap_or(DEFAULT_MAX_DURATION)),
            max_rate_bps: cfg.max_rate_bps,
            max_pps: cfg.budget.max_pps,
            max_bytes: cfg.max_bytes,
            max_streams: cfg.max_streams,
            max_size: cfg.max_size,
            max_timing: cfg.max_timing,
        }
    }
}

/// Routes a data connection (its `attach` read) to the test whose cookie it carries.
pub(super) fn attach(
    conn: TcpStream,
    state: &State,
    cookie: u64,
    stream: u32,
) -> Result<(), &'static str> {
    let peer = super::ends(&conn)
        .map_err(|_| "the connection has no peer address")?
        .0
        .ip();
    if stream == CRR_STREAM {
        let crr = state.crr.lock().map_err(|_| "server state poisoned")?;
        return match crr.get(&cookie) {
            // A full queue (a client opening connections faster than it waits for answers)
            // drops the connection: the client sees it closed.
            Some((ip, tx)) if *ip == peer => tx
                .try_send(DataSocket::Tcp(conn))
                .map_err(|_| "too many transactions at once"),
            _ => Err("unknown test or wrong address"),
        };
    }
    if stream == RESULTS_STREAM {
        return fetch(conn, state, cookie, peer);
    }
    let pending = state.pending.lock().map_err(|_| "server state poisoned")?;
    match pending.get(&cookie) {
        Some(p)
            if p.peer == peer
                && p.protocol == Protocol::Tcp
                && !p.user_stack
                && stream < p.streams =>
        {
            p.tx.try_send((stream, DataSocket::Tcp(conn)))
                .map_err(|_| "more data connections than streams")
        }
        Some(Pending {
            peer: p,
            log_tx: Some(tx),
            ..
        }) if *p == peer && stream == PACKET_LOG_STREAM => {
            tx.try_send(conn).map_err(|_| "packet log already attached")
        }
        Some(p) if p.peer == peer && p.user_stack => Err("the test's data connection goes to the server's user-space stack, on the port its accept named (tcp_port): this client ignored it; upgrade the client"),
        _ => Err("unknown test, wrong stream or wrong address"),
    }
}

/// A client fetches its finished test's results on a new connection (`control::shelf`):
/// the frames are written from a thread of their own, within the control write timeout,
/// and the connection closes. One fetch per test: the shelf gives them once.
fn fetch(conn: TcpStream, state: &State, cookie: u64, peer: IpAddr) -> Result<(), &'static str> {
    let frames = state
        .shelf
        .lock()
        .map_err(|_| "server state poisoned")?
        .take(Instant::now(), cookie, peer)
        .ok_or("no results kept for this test and address")?;
    log(
        state,
        format_args!(
            "client={peer} event=results_fetched test={:016x} bytes={}",
            test_id(cookie),
            frames.len()
        ),
    );
    std::thread::Builder::new()
        .name("wirebench-fetch".into())
        .spawn(move || {
            use std::io::Write;
            let mut conn = conn;
            if conn.set_nonblocking(false).is_ok()
                && conn
                    .set_write_timeout(Some(crate::control::WRITE_TIMEOUT))
                    .is_ok()
            {
                let _ = conn.write_all(&frames);
            }
            let _ = conn.shutdown(std::net::Shutdown::Both);
        })
        .map(|_| ())
        .map_err(|_| "no thread for the fetch")
}
