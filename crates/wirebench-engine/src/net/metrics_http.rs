//! The HTTP server of `serve --metrics ADDR`: hyper's HTTP/1.1 on a one-thread tokio
//! runtime, so that many scrapes are answered at once and none waits on another client.
//!
//! What a client of the metrics port can cost, and why it cannot delay a scrape:
//! - a connection costs a socket and a task on the one metrics thread, never a thread;
//! - the whole request head must arrive within [`HEAD_DEADLINE`] of the connection, however
//!   slowly it trickles (hyper's header timer starts at the first read and is not renewed by
//!   bytes), and the whole connection, answer included, ends by [`CONNECTION_DEADLINE`];
//! - one request per connection (no keep-alive), a head of at most
//!   [`MAX_REQUEST_HEAD_BYTES`], an answer of at most [`MAX_ANSWER_BYTES`];
//! - at most [`MAX_CONNECTIONS_PER_ADDRESS`] connections from one address (IPv6 by its /64)
//!   and [`MAX_CONNECTIONS`] in all; a connection past either is closed at once, before a
//!   byte of it is read.
//!
//! Only `GET` and `HEAD` of `/metrics` answer the metrics; another path is 404, another
//! method 405.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use super::metrics::Format;
use crate::control::admission::client_key;
use crate::EngineError;

/// The whole request head must arrive within this of the connection.
pub(super) const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// A connection ends by this, answered or not: the head's deadline and time to write an
/// answer that fits in a socket buffer many times over.
pub(super) const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);
/// Connections from one address (IPv6: one /64) at once. A Prometheus server scrapes over
/// one; a few more leave room for a person with curl.
pub(super) const MAX_CONNECTIONS_PER_ADDRESS: usize = 8;
/// Connections at once, from everyone.
pub(super) const MAX_CONNECTIONS: usize = 64;
/// The request head's size: hyper's smallest read buffer, many times a scraper's request.
const MAX_REQUEST_HEAD_BYTES: usize = 8192;
/// Header lines in a request head.
const MAX_HEADERS: usize = 32;
/// The largest answer. The metrics are a fixed set of series whose labels come from closed
/// sets (refusal kinds, limits), a few kilobytes; past this something is wrong, and the
/// scraper hears so rather than getting an answer of any size.
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// The pause after a failed `accept` (out of descriptors): the connection waits in the
/// backlog, so retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What a scrape's answer is made from: the metrics, now, in a format.
type Render = Arc<dyn Fn(Format) -> String + Send + Sync>;

/// Binds `addr` and serves what `render` makes from a thread of its own.
pub(super) fn start(
    addr: SocketAddr,
    render: impl Fn(Format) -> String + Send + Sync + 'static,
) -> Result<SocketAddr, EngineError> {
    let listener = std::net::TcpListener::bind(addr).map_err(|source| EngineError::Connect {
        addr: format!("{addr} (--metrics)"),
        source,
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| EngineError::io("reading the metrics address", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| EngineError::io("setting up the metrics socket", e))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| EngineError::io("starting the metrics server", e))?;
    let listener = {
        let _in_runtime = runtime.enter();
        tokio::net::TcpListener::from_std(listener)
            .map_err(|e| EngineError::io("setting up the metrics socket", e))?
    };
    let render: Render = Arc::new(render);
    std::thread::Builder::new()
        .name("wirebench-metrics".into())
        .spawn(move || runtime.block_on(serve(listener, render)))
        .map_err(|e| EngineError::io("starting the metrics thread", e))?;
    Ok(bound)
}

/// Accepts for ever: each connection within the caps gets a task, the others are closed.
async fn serve(listener: tokio::net::TcpListener, render: Render) {
    let caps = Arc::new(Mutex::new(Caps::default()));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Past a cap, `stream` is dropped here: closed before a byte of it is read.
        if let Some(slot) = Slot::take(&caps, peer.ip()) {
            tokio::spawn(connection(stream, slot, Arc::clone(&render)));
        }
    }
}

/// Serves one connection until it is answered or its deadline, holding its slot till then.
async fn connection(stream: tokio::net::TcpStream, slot: Slot, render: Render) {
    let _slot = slot;
    let service = service_fn(move |req: Request<Incoming>| {
        let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
        let reply = answer(req.method(), req.uri().path(), accept, &*render);
        async move { Ok::<_, Infallible>(reply) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_DEADLINE)
        .keep_alive(false)
        .max_buf_size(MAX_REQUEST_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .serve_connection(TokioIo::new(stream), service);
    // Dropping the connection at its deadline closes the socket, whatever it was doing.
    let _ = tokio::time::timeout(CONNECTION_DEADLINE, conn).await;
}

/// The answer to one request: the metrics for `GET`/`HEAD /metrics` in the format `accept`
/// asks for, 404 for any other path, 405 for any other method. hyper leaves the body out of
/// an answer to `HEAD` and keeps its length.
fn answer(
    method: &Method,
    path: &str,
    accept: Option<&str>,
    render: &dyn Fn(Format) -> String,
) -> Response<Full<Bytes>> {
    if path != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n".into(),
        );
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: use GET or HEAD\n".into(),
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let format = Format::negotiate(accept);
    let body = render(format);
    if body.len() > MAX_ANSWER_BYTES {
        return plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "the metrics came to {} bytes, over the {MAX_ANSWER_BYTES} this server sends: report this as a wirebench bug\n",
                body.len()
            ),
        );
    }
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    r
}

/// A short plain-text answer with `status`.
fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The connections open now: in all, and by address (IPv6 by /64).
#[derive(Debug, Default)]
struct Caps {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

impl Caps {
    /// Counts a connection from `key` in, if both caps leave room for it.
    fn admit(&mut self, key: IpAddr) -> bool {
        let from_key = self.by_address.get(&key).copied().unwrap_or(0);
        if self.total >= MAX_CONNECTIONS || from_key >= MAX_CONNECTIONS_PER_ADDRESS {
            return false;
        }
        self.total += 1;
        self.by_address.insert(key, from_key + 1);
        true
    }

    /// Counts a connection from `key` out.
    fn release(&mut self, key: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.by_address.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_address.remove(&key);
            }
        }
    }
}

/// A connection's place under the caps, given back when the connection ends.
struct Slot {
    caps: Arc<Mutex<Caps>>,
    key: IpAddr,
}

impl Slot {
    /// A place for a connection from `ip`, if the caps leave one.
    fn take(caps: &Arc<Mutex<Caps>>, ip: IpAddr) -> Option<Self> {
        let key = client_key(ip);
        // A panic elsewhere under this lock leaves plain counts behind: still usable.
        let admitted = caps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(key);
        admitted.then(|| Self {
            caps: Arc::clone(caps),
            key,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.caps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .release(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn one_address_holds_at_most_its_share_and_gets_it_back() {
        let caps = Arc::new(Mutex::new(Caps::default()));
        let held: Vec<Slot> = (0..MAX_CONNECTIONS_PER_ADDRESS)
            .filter_map(|_| Slot::take(&caps, ip("127.0.0.3")))
            .collect();
        assert_eq!(held.len(), MAX_CONNECTIONS_PER_ADDRESS);
        assert!(Slot::take(&caps, ip("127.0.0.3")).is_none());
        // Another address is not held back by it.
        assert!(Slot::take(&caps, ip("127.0.0.1")).is_some());
        drop(held);
        assert!(Slot::take(&caps, ip("127.0.0.3")).is_some());
        let c = caps.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!((c.total, c.by_address.len()), (0, 0));
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_a_share() {
        let caps = Arc::new(Mutex::new(Caps::default()));
        let held: Vec<Slot> = (0..MAX_CONNECTIONS_PER_ADDRESS)
            .filter_map(|i| Slot::take(&caps, ip(&format!("2001:db8::{i:x}"))))
            .collect();
        assert_eq!(held.len(), MAX_CONNECTIONS_PER_ADDRESS);
        assert!(Slot::take(&caps, ip("2001:db8::ffff:1")).is_none());
        assert!(Slot::take(&caps, ip("2001:db8:0:1::1")).is_some());
    }

    #[test]
    fn no_more_than_the_total_from_many_addresses() {
        let caps = Arc::new(Mutex::new(Caps::default()));
        let held: Vec<Slot> = (0..=255u8)
            .filter_map(|i| Slot::take(&caps, IpAddr::from([10, 0, 0, i])))
            .collect();
        assert_eq!(held.len(), MAX_CONNECTIONS);
    }

    fn render(f: Format) -> String {
        format!("{f:?}\n")
    }

    fn body(r: Response<Full<Bytes>>) -> String {
        let Ok(collected) = block_on(r.into_body().collect());
        String::from_utf8_lossy(&collected.to_bytes()).into_owned()
    }

    /// Runs a future that is ready at once (a `Full` body's).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(f)
    }

    #[test]
    fn metrics_only_at_metrics_by_get_or_head() {
        let ok = answer(&Method::GET, "/metrics", None, &render);
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(
            ok.headers().get(CONTENT_TYPE),
            Some(&HeaderValue::from_static(Format::Text.content_type()))
        );
        assert_eq!(body(ok), "Text\n");
        let om = answer(
            &Method::HEAD,
            "/metrics",
            Some("application/openmetrics-text; version=1.0.0"),
            &render,
        );
        assert_eq!(om.status(), StatusCode::OK);
        assert_eq!(body(om), "OpenMetrics\n");
        for path in ["/", "/metrics/", "/metricsx", "/../metrics", ""] {
            let r = answer(&Method::GET, path, None, &render);
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        }
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
            let r = answer(&method, "/metrics", None, &render);
            assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
            assert_eq!(
                r.headers().get(ALLOW),
                Some(&HeaderValue::from_static("GET, HEAD"))
            );
        }
    }

    #[test]
    fn an_answer_past_its_bound_is_not_sent() {
        let huge = |_: Format| "x".repeat(MAX_ANSWER_BYTES + 1);
        let r = answer(&Method::GET, "/metrics", None, &huge);
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body(r).len() < 200);
    }
}
