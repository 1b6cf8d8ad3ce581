//! Who the server lets in, with the time passed in: the pending-handshake stage (connections
//! that have not said what they are), test slots overall and per client address, starts per
//! minute per address, and the limits on what a test asks. Pure: the driver holds one behind
//! a lock and carries out what it returns.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::packet_log::{FILE_HEADER_LEN, RECORD_LEN};
use wirebench_proto::spec::{Direction, Mechanism, TestSpec};
use wirebench_proto::units::{format_bytes, format_duration, format_rate_bps};

use super::memory::{format_mib, server_writes_log};
pub use super::throttle::client_key;
use super::throttle::KeyGuesses;

/// Most connections that have not yet sent their first frame.
pub const MAX_PENDING: usize = 256;

/// Most such connections from one address: one address cannot take the whole stage.
pub const MAX_PENDING_PER_ADDR: usize = 64;

/// The longest test a server started without `--max-duration` runs: a client asking for
/// `-t 1000h` cannot hold a slot for ever.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(3600);

/// The longest `--gap`, `--ack-timeout` and `--drain` a server accepts by default: they
/// stretch how long a stuck client holds a slot (the idle limit is 30 s plus gap and ack
/// timeout), so the server, not the client, bounds them.
pub const DEFAULT_MAX_TIMING: Duration = Duration::from_secs(10);

/// The window of `--max-tests-per-minute`.
const MINUTE: Duration = Duration::from_secs(60);

/// Why the server will not run a test. The words name the limit's flag and value, so the
/// user knows what to change; the variant says which limit it was (for counting).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The client speaks another control protocol version.
    #[error("the client ({client_tool}) speaks control protocol {client_version}, this server ({server_tool}) speaks {server_version}")]
    Version {
        /// The client's tool and version.
        client_tool: String,
        /// The client's protocol version.
        client_version: u32,
        /// This server's tool and version.
        server_tool: String,
        /// This server's protocol version.
        server_version: u32,
    },
    /// The client's answer to the challenge is wrong.
    #[error("authentication failed: wrong pre-shared key")]
    AuthFailed,
    /// The client answered the challenge with another message.
    #[error("authentication failed: expected auth, got {0}")]
    AuthExpected(String),
    /// The spec does not validate.
    #[error("{0}")]
    Invalid(String),
    /// `--max-duration`.
    #[error("--time {} exceeds the server's --max-duration {}", format_duration(*.asked), format_duration(*.max))]
    Duration {
        /// What the test asks.
        asked: Duration,
        /// The limit.
        max: Duration,
    },
    /// `--max-streams`.
    #[error("{asked} streams exceed the server's --max-streams {max}")]
    Streams {
        /// What the test asks.
        asked: u32,
        /// The limit.
        max: u32,
    },
    /// `--max-size`.
    #[error("messages of {asked} bytes exceed the server's --max-size {max}")]
    Size {
        /// The largest message the test uses.
        asked: u64,
        /// The limit.
        max: u64,
    },
    /// `--max-bytes`, for a test with a bound.
    #[error("{} would exceed the server's --max-bytes {}", format_bytes(*.asked), format_bytes(*.max))]
    Bytes {
        /// The most the test can move.
        asked: u64,
        /// The limit.
        max: u64,
    },
    /// `--max-bytes`, for a test without a bound.
    #[error("an unbounded test was asked but the server moves at most {}: use -n, or -b with -t", format_bytes(*.max))]
    Unbounded {
        /// The limit.
        max: u64,
    },
    /// `--max-rate`, for a test with a rate.
    #[error("rate {} exceeds the server's --max-rate {}", format_rate_bps(*.asked as f64), format_rate_bps(*.max as f64))]
    Rate {
        /// The sum over the test's streams, bits/s.
        asked: u64,
        /// The limit, bits/s.
        max: u64,
    },
    /// `--max-rate`, for a test without a rate.
    #[error("an unlimited rate was asked but the server allows at most {}: use -b/--rate", format_rate_bps(*.max as f64))]
    UnlimitedRate {
        /// The limit, bits/s.
        max: u64,
    },
    /// `--max-pps`, for a test whose rate and message size imply more messages a second.
    #[error("{asked} packets/s exceed the server's --max-pps {max}: use larger messages (-l) or a lower rate (-b)")]
    Pps {
        /// Messages a second over the test's streams, both ways.
        asked: u64,
        /// The limit.
        max: u64,
    },
    /// `--max-pps`, for a test without a rate.
    #[error("an unlimited rate was asked but the server allows at most {max} packets/s (--max-pps): use -b/--rate")]
    UnlimitedPps {
        /// The limit.
        max: u64,
    },
    /// `--max-memory`: what the test would hold, with what running tests hold, is over it.
    #[error("this test would hold about {} of server memory, over the server's --max-memory {} ({} in use by running tests): use fewer streams (-P), smaller messages (-l, --response-size) or a smaller --window", format_bytes(*.asked), format_mib(*.max), format_mib(*.in_use))]
    Memory {
        /// The test's estimate, bytes.
        asked: u64,
        /// The limit, bytes.
        max: u64,
        /// What running tests hold, bytes.
        in_use: u64,
    },
    /// `--max-memory-per-client`: what the test would hold, with what the same address's
    /// running tests hold, is over one address's share of the memory.
    #[error("this test would hold about {} of server memory, over the share one client address may hold, {} (--max-memory-per-client; {} held by {ip}'s running tests): use fewer streams (-P), smaller messages (-l, --response-size) or a smaller --window", format_bytes(*.asked), format_mib(*.max), format_mib(*.in_use))]
    MemoryPerClient {
        /// The client's address.
        ip: IpAddr,
        /// The test's estimate, bytes.
        asked: u64,
        /// The share, bytes.
        max: u64,
        /// What the address's running tests hold, bytes.
        in_use: u64,
    },
    /// The server's user-space stack (`serve --stack`) cannot carry this test, or carries
    /// another one now.
    #[error("{0}")]
    UserStack(String),
    /// `--max-tests`.
    #[error("server busy: {running} tests running, the limit is {max} (--max-tests)")]
    Busy {
        /// Tests running now.
        running: usize,
        /// The limit.
        max: usize,
    },
    /// The test asked to run alone (`run --exclusive`, as a mesh's throughput tests do)
    /// and another such test runs now.
    #[error("server busy: another test that asked to run alone (--exclusive) is running")]
    Exclusive,
    /// `--max-tests-per-client`.
    #[error(
        "{ip} already runs {running} tests, the limit per client is {max} (--max-tests-per-client)"
    )]
    PerClient {
        /// The client's address.
        ip: IpAddr,
        /// Its tests running now.
        running: usize,
        /// The limit.
        max: usize,
    },
    /// `--max-tests-per-minute`.
    #[error("{ip} started {started} tests in the last minute, the limit is {max} (--max-tests-per-minute)")]
    PerMinute {
        /// The client's address.
        ip: IpAddr,
        /// Its starts in the last minute.
        started: usize,
        /// The limit.
        max: usize,
    },
    /// `--gap`, `--ack-timeout` or `--drain` longer than the server allows.
    #[error("{flag} {} exceeds the server's limit {}", format_duration(*.asked), format_duration(*.max))]
    Timing {
        /// The client's flag.
        flag: &'static str,
        /// What the test asks.
        asked: Duration,
        /// The limit.
        max: Duration,
    },
    /// The address sent too many wrong keys lately: the server looks at its next one later.
    #[error("too many wrong pre-shared keys from this address: try again in {}", format_duration(*.wait))]
    KeyGuesses {
        /// How long until the server looks at this address's next key.
        wait: Duration,
    },
    /// The server is going away.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A file transfer this server cannot serve.
    #[error("{0}")]
    File(String),
    /// The server failed to set the test up (no randomness, a poisoned lock).
    #[error("the server cannot run the test: {0}")]
    Internal(String),
}

impl Refusal {
    /// The refusal's kind on the wire: what the client's code reads (a sweep retries
    /// `busy`), beside the words.
    pub fn error_kind(&self) -> ErrorKind {
        match self {
            Refusal::Version { .. } => ErrorKind::Version,
            Refusal::AuthFailed | Refusal::AuthExpected(_) | Refusal::KeyGuesses { .. } => {
                ErrorKind::Auth
            }
            Refusal::Invalid(_) | Refusal::UserStack(_) | Refusal::File(_) => ErrorKind::Refused,
            Refusal::Duration { .. } => ErrorKind::MaxDuration,
            Refusal::Streams { .. } => ErrorKind::MaxStreams,
            Refusal::Size { .. } => ErrorKind::MaxSize,
            Refusal::Bytes { .. } | Refusal::Unbounded { .. } => ErrorKind::MaxBytes,
            Refusal::Rate { .. } | Refusal::UnlimitedRate { .. } => ErrorKind::MaxRate,
            Refusal::Pps { .. } | Refusal::UnlimitedPps { .. } => ErrorKind::MaxPps,
            Refusal::Memory { .. } | Refusal::MemoryPerClient { .. } => ErrorKind::MaxMemory,
            Refusal::Timing { .. } => ErrorKind::MaxTiming,
            Refusal::Busy { .. } | Refusal::Exclusive => ErrorKind::Busy,
            Refusal::PerClient { .. } => ErrorKind::MaxTestsPerClient,
            Refusal::PerMinute { .. } => ErrorKind::MaxTestsPerMinute,
            Refusal::ShuttingDown => ErrorKind::Shutdown,
            Refusal::Internal(_) => ErrorKind::Internal,
        }
    }

    /// The refusal's kind in one word, for counting (the metrics' `reason` label).
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Version { .. } => "version",
            Refusal::AuthFailed => "auth_failed",
            Refusal::AuthExpected(_) => "auth_expected",
            Refusal::Invalid(_) => "invalid",
            Refusal::Duration { .. } => "max_duration",
            Refusal::Streams { .. } => "max_streams",
            Refusal::Size { .. } => "max_size",
            Refusal::Bytes { .. } => "max_bytes",
            Refusal::Unbounded { .. } => "unbounded",
            Refusal::Rate { .. } => "max_rate",
            Refusal::UnlimitedRate { .. } => "unlimited_rate",
            Refusal::Pps { .. } => "max_pps",
            Refusal::UnlimitedPps { .. } => "unlimited_pps",
            Refusal::Memory { .. } => "max_memory",
            Refusal::MemoryPerClient { .. } => "max_memory_per_client",
            Refusal::Timing { .. } => "max_timing",
            Refusal::UserStack(_) => "user_stack",
            Refusal::Busy { .. } => "busy",
            Refusal::Exclusive => "exclusive",
            Refusal::PerClient { .. } => "per_client",
            Refusal::PerMinute { .. } => "per_minute",
            Refusal::KeyGuesses { .. } => "auth_throttled",
            Refusal::ShuttingDown => "shutting_down",
            Refusal::File(_) => "file",
            Refusal::Internal(_) => "internal",
        }
    }
}

/// The limits on what one test may ask (`serve --max-*`).
#[derive(Debug, Clone)]
pub struct SpecLimits {
    /// `--max-duration`.
    pub max_duration: Option<Duration>,
    /// `--max-rate`, bits/s over all streams.
    pub max_rate_bps: Option<u64>,
    /// `--max-pps`, messages a second over all streams, both ways.
    pub max_pps: Option<u64>,
    /// `--max-bytes`, all streams.
    pub max_bytes: Option<u64>,
    /// `--max-streams`, both ways for `--bidir`.
    pub max_streams: Option<u32>,
    /// `--max-size`.
    pub max_size: Option<u64>,
    /// The longest `--gap`, `--ack-timeout` and `--drain` accepted.
    pub max_timing: Duration,
}

impl Default for SpecLimits {
    /// No limit on what moves; the server's bound on the timing flags.
    fn default() -> Self {
        Self {
            max_duration: None,
            max_rate_bps: None,
            max_pps: None,
            max_bytes: None,
            max_streams: None,
            max_size: None,
            max_timing: DEFAULT_MAX_TIMING,
        }
    }
}

/// The most bytes one stream of `spec` moves both ways, if it is bounded: its amount, or its
/// rate for its duration; for rr and crr each request's response on top (a 64-byte request
/// may ask for a 1 MB answer); with a packet log, the log the server streams back (a record
/// per datagram).
fn most_per_stream(spec: &TestSpec) -> Option<u128> {
    let sent = match (spec.bytes, spec.offered_bps(), spec.duration_ns) {
        (Some(b), _, _) => u128::from(b),
        (None, Some(bps), Some(d)) => u128::from(bps) * u128::from(d) / 8_000_000_000,
        _ => return None,
    };
    let size = u128::from(spec.size.max(1));
    let messages = sent.div_ceil(size);
    if matches!(spec.mechanism, Mechanism::Rr | Mechanism::Crr) {
        return Some(sent + messages * u128::from(spec.response_len()));
    }
    if server_writes_log(spec) {
        return Some(sent + log_bytes(messages));
    }
    Some(sent)
}

/// The packet log of `datagrams` datagrams: its header and a record each. Loss runs add
/// records too; the server counts those as they are written.
fn log_bytes(datagrams: u128) -> u128 {
    datagrams * RECORD_LEN as u128 + FILE_HEADER_LEN as u128
}

/// The bits a second one stream of `spec` moves at its rate (`offered`): the payload, and a
/// packet log's records on top (`RECORD_LEN` bytes per datagram of `size`).
fn rate_with_log(spec: &TestSpec, offered: u64) -> u64 {
    if !server_writes_log(spec) {
        return offered;
    }
    let per_record = u128::from(offered) * RECORD_LEN as u128 / u128::from(spec.size.max(1));
    u64::try_from(u128::from(offered) + per_record).unwrap_or(u64::MAX)
}

/// The messages a second one stream of `spec` moves both ways, if it has a rate: its rate in
/// messages, or its bit rate over the message size; rr and crr count each response too.
fn packets_per_stream(spec: &TestSpec) -> Option<u64> {
    let requests = match spec.rate_pps {
        Some(pps) if pps > 0 => pps,
        _ => {
            let bits = spec.size.max(1).saturating_mul(8);
            spec.offered_bps()?.div_ceil(bits)
        }
    };
    Some(if spec.mechanism.is_rr() {
        requests.saturating_mul(2)
    } else {
        requests
    })
}

impl SpecLimits {
    /// Why the server will not run `spec`, if it will not.
    pub fn check(&self, spec: &TestSpec) -> Result<(), Refusal> {
        spec.validate()
            .map_err(|e| Refusal::Invalid(e.to_string()))?;
        if let (Some(max), Some(d)) = (self.max_duration, spec.duration_ns) {
            let asked = Duration::from_nanos(d);
            if asked > max {
                return Err(Refusal::Duration { asked, max });
            }
        }
        let streams = u64::from(spec.total_streams());
        if let Some(max) = self.max_streams {
            if spec.total_streams() > max {
                let asked = spec.total_streams();
                return Err(Refusal::Streams { asked, max });
            }
        }
        if let Some(max) = self.max_size {
            let asked = spec.size.max(spec.response_len());
            if asked > max {
                return Err(Refusal::Size { asked, max });
            }
        }
        let max_timing = self.max_timing;
        for (flag, ns) in [
            ("--gap", spec.gap_ns),
            ("--ack-timeout", spec.ack_timeout_ns),
            ("--drain", spec.drain_ns),
        ] {
            let asked = Duration::from_nanos(ns);
            if asked > max_timing {
                let max = max_timing;
                return Err(Refusal::Timing { flag, asked, max });
            }
        }
        // A reverse file transfer's amount is the server's file: checked once it is known.
        let file_pending =
            spec.file.is_some() && spec.direction == Direction::Reverse && spec.bytes.is_none();
        if let (Some(max), false) = (self.max_bytes, file_pending) {
            // The most a test can move, every stream (what moves is also counted as it moves).
            let most = most_per_stream(spec).map(|b| b * u128::from(streams));
            match most {
                Some(b) if b <= u128::from(max) => {}
                Some(b) => {
                    let asked = u64::try_from(b).unwrap_or(u64::MAX);
                    return Err(Refusal::Bytes { asked, max });
                }
                None => return Err(Refusal::Unbounded { max }),
            }
        }
        if let Some(max) = self.max_rate_bps {
            // -b applies to each stream: the server's limit is on their sum.
            let offered = spec.offered_bps().map(|r| rate_with_log(spec, r));
            match offered.map(|r| r.saturating_mul(streams)) {
                Some(asked) if asked <= max => {}
                Some(asked) => return Err(Refusal::Rate { asked, max }),
                None => return Err(Refusal::UnlimitedRate { max }),
            }
        }
        if let Some(max) = self.max_pps {
            match packets_per_stream(spec).map(|r| r.saturating_mul(streams)) {
                Some(asked) if asked <= max => {}
                Some(asked) => return Err(Refusal::Pps { asked, max }),
                None => return Err(Refusal::UnlimitedPps { max }),
            }
        }
        Ok(())
    }
}

/// The slot limits (`serve --max-tests*`).
#[derive(Debug, Clone)]
pub struct SlotLimits {
    /// `--max-tests`.
    pub max_tests: usize,
    /// `--max-tests-per-client`.
    pub per_client: Option<usize>,
    /// `--max-tests-per-minute`.
    pub per_minute: Option<usize>,
}

/// A connection in the pending stage, by the order it came in.
pub type PendingId = u64;

/// A test slot held; give it back with [`Admission::release`].
#[derive(Debug)]
#[must_use = "a ticket holds a slot until it is released"]
pub struct Ticket {
    ip: IpAddr,
    /// The server memory reserved for the test, bytes (`--max-memory`).
    memory: u64,
    /// Its entry in `Admission::tests`.
    id: u64,
    /// Set when its memory went to another test (`control::reclaim`): the test must end.
    reclaim: Arc<AtomicBool>,
}

impl Ticket {
    /// The server memory reserved for the test, bytes.
    pub fn memory(&self) -> u64 {
        self.memory
    }

    /// Whether the test's memory went to a test that waited for it, as it sat idle
    /// (`control::reclaim`): its driver ends it.
    pub fn reclaimed(&self) -> bool {
        self.reclaim.load(Ordering::Relaxed)
    }
}

/// A running test's reservation, as admission keeps it.
#[derive(Debug)]
struct Held {
    ip: IpAddr,
    /// Bytes it holds; 0 once reclaimed.
    memory: u64,
    /// Its driver says it moved too little in the last window (`control::reclaim`).
    idle: bool,
    reclaim: Arc<AtomicBool>,
}

/// A client address's use of the server.
#[derive(Debug, Default)]
struct ClientUse {
    running: usize,
    /// What its running tests' tickets hold, bytes.
    memory: u64,
    starts: VecDeque<Instant>,
}

/// The server's admission state.
#[derive(Debug)]
pub struct Admission {
    slots: SlotLimits,
    max_pending: usize,
    max_pending_per_addr: usize,
    /// Connections not yet identified, oldest first (ids grow).
    pending: BTreeMap<PendingId, IpAddr>,
    next_pending: PendingId,
    running: usize,
    clients: HashMap<IpAddr, ClientUse>,
    /// Wrong keys by address, and how long each must wait before its next.
    guesses: KeyGuesses,
    /// `--max-memory`: the most all running tests may hold together, bytes.
    max_memory: Option<u64>,
    /// What the running tests' tickets hold, bytes.
    memory_in_use: u64,
    /// `--max-memory-per-client`: the most one address's running tests may hold, bytes.
    memory_per_client: Option<u64>,
    /// Running tests' reservations, by ticket.
    tests: HashMap<u64, Held>,
    next_ticket: u64,
    /// The running test that asked to run alone (`--exclusive`), by ticket.
    exclusive: Option<u64>,
}

impl Admission {
    /// Admission with these slot limits and the default pending caps.
    pub fn new(slots: SlotLimits) -> Self {
        Self::with_pending_caps(slots, MAX_PENDING, MAX_PENDING_PER_ADDR)
    }

    /// Admission with these pending caps (tests use small ones).
    pub fn with_pending_caps(slots: SlotLimits, overall: usize, per_addr: usize) -> Self {
        Self {
            slots,
            max_pending: overall.max(1),
            max_pending_per_addr: per_addr.max(1),
            pending: BTreeMap::new(),
            next_pending: 0,
            running: 0,
            clients: HashMap::new(),
            guesses: KeyGuesses::default(),
            max_memory: None,
            memory_in_use: 0,
            memory_per_client: None,
            tests: HashMap::new(),
            next_ticket: 0,
            exclusive: None,
        }
    }

    /// The same, keeping running tests together under `max` bytes of server memory, and
    /// one address's under `per_client`.
    #[must_use]
    pub fn with_max_memory(mut self, max: Option<u64>, per_client: Option<u64>) -> Self {
        self.max_memory = max;
        self.memory_per_client = per_client;
        self
    }

    /// What running tests hold now, bytes.
    pub fn memory_in_use(&self) -> u64 {
        self.memory_in_use
    }

    /// A new connection from `ip` enters the pending stage. Returns its id and, when the
    /// stage was full, the connection to drop for it: the oldest of its own address when
    /// that address holds its cap, else the oldest of the address that holds the most. A
    /// flood of silent connections then ages out instead of locking newcomers out, and one
    /// that floods from a few addresses pushes out only its own: a client with a connection
    /// or two, however slow its round trips, keeps its place.
    pub fn pending_open(&mut self, ip: IpAddr) -> (PendingId, Option<PendingId>) {
        let ip = client_key(ip);
        let id = self.next_pending;
        self.next_pending += 1;
        let same_addr = self.pending.values().filter(|a| **a == ip).count();
        let evict = if same_addr >= self.max_pending_per_addr {
            self.oldest_of(ip)
        } else if self.pending.len() >= self.max_pending {
            self.busiest().and_then(|busy| self.oldest_of(busy))
        } else {
            None
        };
        if let Some(old) = evict {
            self.pending.remove(&old);
        }
        self.pending.insert(id, ip);
        (id, evict)
    }

    /// The oldest pending connection from `ip` (a key of [`client_key`]).
    fn oldest_of(&self, ip: IpAddr) -> Option<PendingId> {
        self.pending
            .iter()
            .find(|(_, a)| **a == ip)
            .map(|(k, _)| *k)
    }

    /// The address with the most pending connections; of several, the one whose oldest
    /// connection came first (ids grow, so the map's order is the age order).
    fn busiest(&self) -> Option<IpAddr> {
        let mut count: HashMap<IpAddr, (usize, PendingId)> = HashMap::new();
        for (id, ip) in &self.pending {
            count.entry(*ip).or_insert((0, *id)).0 += 1;
        }
        count
            .into_iter()
            .max_by_key(|(_, (n, first))| (*n, std::cmp::Reverse(*first)))
            .map(|(ip, _)| ip)
    }

    /// Why `ip` may not try a key now, if it has to wait (it sent too many wrong ones).
    pub fn key_wait(&self, now: Instant, ip: IpAddr) -> Result<(), Refusal> {
        match self.guesses.wait(now, ip) {
            Some(wait) => Err(Refusal::KeyGuesses { wait }),
            None => Ok(()),
        }
    }

    /// `ip` sent a wrong key at `now`.
    pub fn key_failed(&mut self, now: Instant, ip: IpAddr) {
        self.guesses.failed(now, ip);
    }

    /// `ip` proved the key: its wrong ones are forgotten.
    pub fn key_proven(&mut self, ip: IpAddr) {
        self.guesses.proven(ip);
    }

    /// The connection said what it is (or ended): it leaves the pending stage.
    pub fn pending_close(&mut self, id: PendingId) {
        self.pending.remove(&id);
    }

    /// Connections in the pending stage now.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Tests running now.
    pub fn running(&self) -> usize {
        self.running
    }

    /// A test slot for `ip`, or the limit it would break. Only admitted starts count
    /// towards the per-minute limit: a refused attempt costs the client nothing.
    pub fn admit(&mut self, now: Instant, ip: IpAddr) -> Result<Ticket, Refusal> {
        self.admit_holding(now, ip, 0)
    }

    /// [`admit`](Self::admit) for a test that will hold `memory` bytes of server memory
    /// (`control::memory::test_memory`): refused when running tests and it together would
    /// pass `--max-memory`; else reserved until the ticket is released.
    pub fn admit_holding(
        &mut self,
        now: Instant,
        ip: IpAddr,
        memory: u64,
    ) -> Result<Ticket, Refusal> {
        self.admit_test(now, ip, memory, false)
    }

    /// [`admit_holding`](Self::admit_holding) for a test that may ask to run alone
    /// (`exclusive`): refused as busy while another test that asked so runs; tests that did
    /// not ask run beside it (a mesh's latency tests beside its throughput tests).
    pub fn admit_test(
        &mut self,
        now: Instant,
        ip: IpAddr,
        memory: u64,
        exclusive: bool,
    ) -> Result<Ticket, Refusal> {
        if exclusive && self.exclusive.is_some() {
            return Err(Refusal::Exclusive);
        }
        let ip = client_key(ip);
        // Forget the starts older than a minute, and the addresses with nothing left.
        self.clients.retain(|_, u| {
            while u
                .starts
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) >= MINUTE)
            {
                u.starts.pop_front();
            }
            u.running > 0 || !u.starts.is_empty()
        });
        let u = self.clients.entry(ip).or_default();
        if let Some(max) = self.slots.per_client {
            if u.running >= max {
                let running = u.running;
                return Err(Refusal::PerClient { ip, running, max });
            }
        }
        if let Some(max) = self.slots.per_minute {
            if u.starts.len() >= max {
                let started = u.starts.len();
                return Err(Refusal::PerMinute { ip, started, max });
            }
        }
        if self.running >= self.slots.max_tests {
            let (running, max) = (self.running, self.slots.max_tests);
            return Err(Refusal::Busy { running, max });
        }
        // A test larger than the whole budget is refused as such; an address past its
        // share never takes memory from others' idle tests.
        if let Some(max) = self.max_memory.filter(|max| memory > *max) {
            let in_use = self.memory_in_use;
            return Err(Refusal::Memory {
                asked: memory,
                max,
                in_use,
            });
        }
        if let Some(max) = self.memory_per_client {
            let in_use = u.memory;
            if memory > max.saturating_sub(in_use) {
                return Err(Refusal::MemoryPerClient {
                    ip,
                    asked: memory,
                    max,
                    in_use,
                });
            }
        }
        if let Some(max) = self.max_memory {
            let in_use = self.memory_in_use;
            if !self.make_room(memory) {
                return Err(Refusal::Memory {
                    asked: memory,
                    max,
                    in_use,
                });
            }
        }
        let u = self.clients.entry(ip).or_default();
        u.running += 1;
        u.memory = u.memory.saturating_add(memory);
        u.starts.push_back(now);
        self.running += 1;
        self.memory_in_use = self.memory_in_use.saturating_add(memory);
        let (id, reclaim) = (self.next_ticket, Arc::new(AtomicBool::new(false)));
        self.next_ticket += 1;
        let held = Held {
            ip,
            memory,
            idle: false,
            reclaim: Arc::clone(&reclaim),
        };
        self.tests.insert(id, held);
        if exclusive {
            self.exclusive = Some(id);
        }
        Ok(Ticket {
            ip,
            memory,
            id,
            reclaim,
        })
    }

    /// Frees `memory` bytes under `--max-memory` if they are not free: ends idle tests
    /// (`control::reclaim`), the largest first, when together they free enough. Whether
    /// the memory is free now.
    fn make_room(&mut self, memory: u64) -> bool {
        let Some(max) = self.max_memory else {
            return true;
        };
        let free = max.saturating_sub(self.memory_in_use);
        if memory <= free {
            return true;
        }
        let idle = self
            .tests
            .iter()
            .filter(|(_, h)| h.idle && h.memory > 0)
            .map(|(id, h)| (*id, h.memory))
            .collect();
        let chosen = super::reclaim::choose(idle, memory - free);
        for id in &chosen {
            let Some(h) = self.tests.get_mut(id) else {
                continue;
            };
            h.reclaim.store(true, Ordering::Relaxed);
            self.memory_in_use = self.memory_in_use.saturating_sub(h.memory);
            if let Some(u) = self.clients.get_mut(&h.ip) {
                u.memory = u.memory.saturating_sub(h.memory);
            }
            h.memory = 0;
        }
        !chosen.is_empty()
    }

    /// The test `ticket` holds moved too little in the last window (`idle`), or moves
    /// enough again: only an idle test's memory can go to a test that waits for it.
    pub fn set_idle(&mut self, ticket: &Ticket, idle: bool) {
        if let Some(h) = self.tests.get_mut(&ticket.id) {
            h.idle = idle;
        }
    }

    /// Reserves `memory` more bytes for the test `ticket` holds, once its size is known (an
    /// iperf3 client says its streams after it was let in:
    /// `control::memory::iperf3_test_memory`). Refused as at admission; the ticket then
    /// holds what it held.
    pub fn hold(&mut self, ticket: &mut Ticket, memory: u64) -> Result<(), Refusal> {
        let asked = ticket.memory.saturating_add(memory);
        if let Some(max) = self.max_memory.filter(|max| asked > *max) {
            let in_use = self.memory_in_use.saturating_sub(ticket.memory);
            return Err(Refusal::Memory { asked, max, in_use });
        }
        let client_in_use = self
            .clients
            .get(&ticket.ip)
            .map_or(ticket.memory, |u| u.memory);
        if let Some(max) = self.memory_per_client {
            if memory > max.saturating_sub(client_in_use) {
                let (ip, in_use) = (ticket.ip, client_in_use.saturating_sub(ticket.memory));
                return Err(Refusal::MemoryPerClient {
                    ip,
                    asked,
                    max,
                    in_use,
                });
            }
        }
        if let Some(max) = self.max_memory {
            let in_use = self.memory_in_use.saturating_sub(ticket.memory);
            if !self.make_room(memory) {
                return Err(Refusal::Memory { asked, max, in_use });
            }
        }
        if let Some(u) = self.clients.get_mut(&ticket.ip) {
            u.memory = u.memory.saturating_add(memory);
        }
        if let Some(h) = self.tests.get_mut(&ticket.id) {
            h.memory = h.memory.saturating_add(memory);
        }
        self.memory_in_use = self.memory_in_use.saturating_add(memory);
        ticket.memory = asked;
        Ok(())
    }

    /// A test ended: its slot is free again (its start still counts for the minute).
    pub fn release(&mut self, ticket: Ticket) {
        // What it holds now: nothing once its memory went to another test.
        let memory = self.tests.remove(&ticket.id).map_or(0, |h| h.memory);
        if self.exclusive == Some(ticket.id) {
            self.exclusive = None;
        }
        self.running = self.running.saturating_sub(1);
        self.memory_in_use = self.memory_in_use.saturating_sub(memory);
        if let Some(u) = self.clients.get_mut(&ticket.ip) {
            u.running = u.running.saturating_sub(1);
            u.memory = u.memory.saturating_sub(memory);
            if u.running == 0 && u.starts.is_empty() {
                self.clients.remove(&ticket.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::spec::Protocol;

    /// The helpers on their own, where `validate` would stop most extreme specs first.
    #[test]
    fn the_bounds_saturate_on_extreme_specs() {
        let base: TestSpec = serde_json::from_str(
            r#"{"protocol":"udp","mechanism":"stream","direction":"forward","size":1,
                "bytes":1,"rate_bps":0,"streams":1,"interval_ns":1000000000,
                "drain_ns":0,"ack_timeout_ns":1000000}"#,
        )
        .expect("a spec");
        for v in [0, 1, u64::from(u32::MAX), u64::MAX] {
            for mechanism in [Mechanism::Stream, Mechanism::Rr] {
                for packet_log in [false, true] {
                    // Set as fields: zeros too (`Some(0)`), which the setters would not make.
                    let mut s = base
                        .clone()
                        .protocol(Protocol::Udp)
                        .mechanism(mechanism)
                        .size(v)
                        .packet_log(packet_log);
                    s.bytes = Some(v);
                    s.duration_ns = Some(v);
                    s.rate_bps = Some(v);
                    s.rate_pps = Some(v);
                    s.response_size = Some(v);
                    let _ = most_per_stream(&s);
                    let _ = rate_with_log(&s, v);
                    let _ = packets_per_stream(&s);
                    s.bytes = None;
                    let _ = most_per_stream(&s);
                }
            }
        }
        assert_eq!(log_bytes(0), FILE_HEADER_LEN as u128);
        let tiny = base.packet_log(true).rate_bps(u64::MAX);
        assert_eq!(rate_with_log(&tiny, u64::MAX), u64::MAX);
        assert_eq!(packets_per_stream(&tiny), Some(u64::MAX.div_ceil(8)));
    }
}
