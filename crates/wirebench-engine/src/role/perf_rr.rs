//! Request/response over the QUIC performance protocol (`run --quic-perf HOST --mode rr`):
//! each transaction is a stream of its own on the test's one connection, as the protocol's
//! requests are (secnetperf's requests per second): the response's size (8 bytes,
//! big-endian), the request, the stream's end; then the whole response and the server's end
//! of the stream. The round trip timed is the stream's: opening it costs no packet of its
//! own, so it is one request and one response on an open connection, as `--mode rr` is.

use std::sync::Arc;
use std::time::Duration;

use super::early_end::RoleError;
use super::rr::{read_message, write_message, Spin, Transact};
use super::{payload, RoleParams, POLL};
use crate::quic::{QuicConn, QuicStream};
use crate::Shared;

/// The protocol's header: how many bytes the client wants back.
const SIZE_LEN: usize = 8;

/// A perf client's transactions, each on a new stream of `conn`.
pub(super) struct PerfRr {
    conn: Arc<QuicConn>,
    /// The first transaction's stream, opened when the test set up.
    first: Option<Box<QuicStream>>,
    /// The header and the longest request.
    request: Vec<u8>,
    response: Vec<u8>,
    spin: Spin,
}

impl PerfRr {
    pub(super) fn new(first: Box<QuicStream>, p: &RoleParams) -> Self {
        let response = vec![0u8; p.spec.response_len() as usize];
        let mut request = vec![0u8; SIZE_LEN];
        request.extend_from_slice(&payload(p.spec.size));
        request[..SIZE_LEN].copy_from_slice(&(response.len() as u64).to_be_bytes());
        // Its streams come and go: it counts among the connection's running data streams
        // itself, until it is dropped, so the connection's figures wait for all of it.
        first.connection().data_stream_opened();
        Self {
            conn: Arc::clone(first.connection()),
            first: Some(first),
            request,
            response,
            spin: Spin::of(p),
        }
    }
}

impl Drop for PerfRr {
    fn drop(&mut self) {
        self.first = None;
        self.conn.data_stream_closed();
    }
}

impl Transact for PerfRr {
    fn transact(
        &mut self,
        _seq: u64,
        len: u64,
        _start_ns: u64,
        sh: &Shared,
        p: &RoleParams,
    ) -> Result<bool, RoleError> {
        let mut s = match self.first.take() {
            Some(s) => s,
            None => Box::new(
                QuicStream::open(&self.conn, Duration::from_secs(10))
                    .map_err(RoleError::Connect)?,
            ),
        };
        s.set_timeout(POLL);
        write_message(&mut s, &self.request[..SIZE_LEN + len as usize], sh, p)?;
        s.end_sending().map_err(RoleError::Send)?;
        if !read_message(&mut s, &mut self.response, &mut self.spin, sh, p)? {
            return Err(RoleError::TransactionUnanswered);
        }
        // The server ends its side with the response: a byte more breaks the protocol.
        let mut more = [0u8; 1];
        match s.read_for(&mut more, Duration::from_secs(10)) {
            Ok(0) => Ok(true),
            Ok(_) => Err(RoleError::AnsweredTooMuch(self.response.len() as u64)),
            Err(e) => Err(RoleError::Read(e)),
        }
    }

    fn spin(&self) -> &Spin {
        &self.spin
    }
}
