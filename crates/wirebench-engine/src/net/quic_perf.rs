//! The QUIC performance protocol (draft-banks-quic-performance, ALPN `perf`), as msquic's
//! secnetperf, picoquic's quicperf and quinn's perf speak it: the client opens a
//! bidirectional stream, writes how many bytes it wants back (8 bytes, big-endian), then
//! what it uploads, and ends its side; the server reads to the end, answers with that many
//! bytes and ends its side.
//!
//! `run --quic-perf HOST[:PORT]` measures such a server: upload (the default), download
//! (`-R`), both (`--bidir`), `-P` streams each way on one connection, `-n`/`-t`/`-b`/`-l`.
//! The roles are the TCP ones on QUIC streams, as for a wirebench server; the protocol has
//! no report, so the server's side of each figure is unknown (null), never made up.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use wirebench_proto::results::{PeerTool, Results, Role};
use wirebench_proto::spec::{Direction, Mechanism, TestSpec};

use super::client::resolve;
use super::roles::{RoleEvent, Roles, Watch};
use crate::control::SETUP_TIMEOUT;
use crate::quic::{Congestion, Dialer, QuicStream, ServerCheck};
use crate::role::{DataSocket, RoleParams};
use crate::EngineError;

/// The performance protocol's ALPN.
pub const PERF_ALPN: &[u8] = b"perf";

/// The port perf servers listen on unless told otherwise (secnetperf's and quinn's).
pub const DEFAULT_PERF_PORT: u16 = 4433;

/// What a timed download asks the server for: more than any test moves (the client stops
/// reading at its time, and the stream is stopped).
const UNBOUNDED: u64 = 1 << 62;

/// A test against a perf server.
#[derive(Debug, Clone)]
pub struct QuicPerfConfig {
    /// Server host name or address.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The test: streaming, over QUIC.
    pub spec: TestSpec,
    /// How the server's key is checked.
    pub check: ServerCheck,
    /// The local address, if given.
    pub bind: Option<IpAddr>,
}

/// A test the perf protocol cannot carry.
#[derive(Debug, thiserror::Error)]
#[error("--quic-perf: {0}")]
pub struct PerfRefusal(&'static str);

impl QuicPerfConfig {
    /// Refuses what the protocol cannot carry, before anything is sent.
    ///
    /// # Errors
    ///
    /// Not streaming or request/response of bytes on streams (crr, stop-and-wait,
    /// datagrams, files).
    pub fn check(&self) -> Result<(), PerfRefusal> {
        let s = &self.spec;
        if !matches!(s.mechanism, Mechanism::Stream | Mechanism::Rr) {
            return Err(PerfRefusal(
                "the perf protocol streams bytes, or a request and its response per stream (--mode rr): no --mode crr or stop-and-wait",
            ));
        }
        if s.quic_datagrams || s.file.is_some() || s.quic_streams.is_some() {
            return Err(PerfRefusal(
                "the perf protocol streams bytes on -P streams of one connection: no --datagrams, --file or --quic-streams",
            ));
        }
        Ok(())
    }
}

/// Runs the test against a perf server; the results document, the server's side unknown.
///
/// # Errors
///
/// The server could not be reached or refused the handshake (a wrong pin, no `perf`
/// ALPN), or a stream could not be opened.
pub fn run_quic_perf(cfg: &QuicPerfConfig, watch: &mut dyn Watch) -> Result<Results, EngineError> {
    let spec = &cfg.spec;
    let addr = resolve(&cfg.host, cfg.port)?;
    let cc = spec
        .congestion
        .as_deref()
        .and_then(Congestion::of_name)
        .unwrap_or_default();
    let conn = Arc::new(
        Dialer::new(cfg.check, PERF_ALPN, false)?
            .max_packet(cfg.spec.quic_mtu)
            .connect(addr, cfg.bind, cc)?,
    );
    conn.set_gso(!spec.no_offload);
    let local = conn.local().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut streams = Vec::new();
    for i in 0..spec.total_streams() {
        let (role, s) = open(&conn, spec, i).map_err(|e| EngineError::io("a perf stream", e))?;
        watch.connected(i, local, conn.remote());
        let params = params(spec, i, role, &s);
        streams.push((role, DataSocket::Quic(Box::new(s)), params));
    }
    let mut roles = Roles::start(streams)?;
    let mut report = loop {
        let done = roles.poll(watch).into_iter().find_map(|e| match e {
            RoleEvent::Done(r) => Some(r),
            RoleEvent::SendersDone(_) => None,
        });
        if let Some(r) = done {
            break *r;
        }
        // The roles run on their own threads: this loop only shows their progress.
        std::thread::sleep(Duration::from_millis(20));
    };
    // The test is over: the server hears so now, not at its idle timeout.
    conn.close_now();
    // A timed download ends at the client's own time bound, which is no error.
    let own_bound = |half: &mut wirebench_proto::results::SideReport| {
        if half.error_kind == Some(crate::ErrorKind::MaxDuration) {
            half.error = None;
            half.error_kind = None;
        }
    };
    own_bound(&mut report);
    if let Some(r) = report.reverse.as_deref_mut() {
        own_bound(r);
    }
    let mut r = Results::assemble(
        spec,
        format!("{}:{} (QUIC perf)", cfg.host, cfg.port),
        Some(&report),
        None,
        None,
    );
    r.peer = Some(PeerTool {
        tool: "quic-perf".into(),
        reported_by_peer: Vec::new(),
    });
    Ok(r)
}

/// Opens stream `i` and asks for its direction: an upload asks for nothing back; a download
/// asks for its amount (or more than a timed one takes) and ends its side at once; a
/// request/response client's is its first transaction's, which it writes itself.
fn open(
    conn: &Arc<crate::quic::QuicConn>,
    spec: &TestSpec,
    i: u32,
) -> std::io::Result<(Role, QuicStream)> {
    let mut s = QuicStream::open(conn, SETUP_TIMEOUT)?;
    s.data_stream(i == 0);
    s.set_timeout(SETUP_TIMEOUT);
    if spec.mechanism == Mechanism::Rr {
        return Ok((Role::Sender, s));
    }
    match spec.stream_direction(i) {
        Direction::Reverse => {
            let want = spec.bytes.unwrap_or(UNBOUNDED);
            s.write_all(&want.to_be_bytes())?;
            s.finish()?;
            Ok((Role::Receiver, s))
        }
        _ => {
            s.write_all(&0u64.to_be_bytes())?;
            Ok((Role::Sender, s))
        }
    }
}

/// What stream `i`'s role needs: a receiver of a timed download stops at the test's time.
fn params(spec: &TestSpec, i: u32, role: Role, s: &QuicStream) -> RoleParams {
    RoleParams {
        // (The roles read a deadline as a server's limit, which ends the test and is
        // reported as such; the client clears that report: it is its own time.)
        deadline_ns: (role == Role::Receiver)
            .then_some(spec.duration_ns)
            .flatten(),
        limit: None,
        hello: None,
        token: Default::default(),
        stream: i,
        intervals: None,
        datapath: crate::quic::stream::datapath(s),
        same_clock: false,
        packet_log: None,
        offloads: Default::default(),
        // Request/response: a stream per transaction.
        crr: (spec.mechanism == Mechanism::Rr).then_some(crate::role::CrrPart::PerfStreams),
        file: None,
        spec: spec.clone(),
    }
}
