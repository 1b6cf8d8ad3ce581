//! The HTTP server of `serve --metrics ADDR`: hyper's HTTP/1.1 on a one-thread tokio
//! runtime, so that many scrapes are answered at once and none waits on another client.
//!
//! What a client of the metrics port can cost, and why it cannot delay a scrape:
//! - a connection costs a socket and a task on the one metrics thread, never a thread;
//! - the whole request head must arrive within [`HEAD_DEADLINE`] of the connection, however
//!   slowly it trickles (hyper's header timer starts when the connection is first served,
//!   and bytes do not renew it), and the whole connection, answer included, ends by [`CONNECTION_DEADLINE`];
//! - one request per connection (no keep-alive), a head of at most
//!   [`MAX_REQUEST_HEAD_BYTES`], an answer of at most [`MAX_ANSWER_BYTES`];
//! - at most [`MAX_CONNECTIONS_PER_ADDRESS`] connections from one address (IPv6 by its /64)
//!   and [`MAX_CONNECTIONS`] in all; a connection past either pushes out the oldest (that
//!   address's own first), which is closed at once. A scrape's connection lives for
//!   milliseconds, so it is the newest, never the one pushed out by connections that wait.
//!
//! Only `GET` and `HEAD` of `/metrics` answer the metrics; another path is 404, another
//! method 405.

use std::collections::{BTreeMap, HashMap};
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
use tokio::task::AbortHandle;

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
    let listener = std::net::TcpListener::bind(addr).map_err(|error| EngineError::Listen {
        addr,
        udp: false,
        flag: "--metrics",
        error,
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

/// Accepts for ever: each connection gets a task; one past a cap pushes out the oldest.
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
        let pushed_out = {
            let mut held = lock(&caps);
            let id = held.reserve();
            let slot = Slot {
                caps: Arc::clone(&caps),
                id,
            };
            // The task cannot run before it is counted in: this runtime has one thread,
            // and it is here until the next await.
            let task = tokio::spawn(connection(stream, slot, Arc::clone(&render)));
            held.admit(id, client_key(peer.ip()), task.abort_handle())
        };
        // Aborting drops the task's connection, which closes its socket at once.
        if let Some(task) = pushed_out {
            task.abort();
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

/// The connections open now, oldest first, each with what closes it (`H`), and how many
/// each address (IPv6: its /64) holds.
#[derive(Debug)]
struct Caps<H> {
    /// The next connection's id: ids grow, so the map's order is the connections' age.
    next_id: u64,
    open: BTreeMap<u64, (IpAddr, H)>,
    by_address: HashMap<IpAddr, usize>,
}

impl<H> Default for Caps<H> {
    fn default() -> Self {
        Self {
            next_id: 0,
            open: BTreeMap::new(),
            by_address: HashMap::new(),
        }
    }
}

impl<H> Caps<H> {
    /// The id the next connection will have.
    fn reserve(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Counts connection `id` from `key` in, closed by `close`; returns what closes the one
    /// it pushes out, if a cap was reached: the oldest of `key`'s own, or when only the
    /// total is full and `key` holds none, the oldest of all. Pushing out rather than
    /// turning the newcomer away keeps a scrape, which lives for milliseconds, from being
    /// refused by connections that wait out their deadline.
    fn admit(&mut self, id: u64, key: IpAddr, close: H) -> Option<H> {
        let from_key = self.by_address.get(&key).copied().unwrap_or(0);
        let victim =
            if from_key >= MAX_CONNECTIONS_PER_ADDRESS || self.open.len() >= MAX_CONNECTIONS {
                self.open
                    .iter()
                    .find(|(_, (k, _))| *k == key)
                    .or_else(|| self.open.iter().next())
                    .map(|(victim, _)| *victim)
            } else {
                None
            };
        let pushed_out = victim.and_then(|v| self.release(v));
        self.open.insert(id, (key, close));
        *self.by_address.entry(key).or_insert(0) += 1;
        pushed_out
    }

    /// Counts connection `id` out (if it was not pushed out already); what closed it.
    fn release(&mut self, id: u64) -> Option<H> {
        let (key, close) = self.open.remove(&id)?;
        if let Some(n) = self.by_address.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_address.remove(&key);
            }
        }
        Some(close)
    }
}

/// A connection's place under the caps, given back when its task ends.
struct Slot {
    caps: Arc<Mutex<Caps<AbortHandle>>>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = lock(&self.caps).release(self.id);
    }
}

/// The caps, locked. A panic elsewhere under this lock leaves plain counts behind: still
/// usable.
fn lock<H>(caps: &Mutex<Caps<H>>) -> std::sync::MutexGuard<'_, Caps<H>> {
    caps.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    /// Admits a connection from `from`, its id as what closes it; the id it pushed out.
    fn connect(caps: &mut Caps<u64>, from: &str) -> (u64, Option<u64>) {
        let id = caps.reserve();
        (id, caps.admit(id, client_key(ip(from)), id))
    }

    #[test]
    fn one_address_past_its_share_pushes_out_its_own_oldest() {
        let mut caps = Caps::default();
        let (scraper, _) = connect(&mut caps, "127.0.0.1");
        let first: Vec<u64> = (0..MAX_CONNECTIONS_PER_ADDRESS)
            .map(|_| connect(&mut caps, "127.0.0.3"))
            .map(|(id, pushed)| {
                assert_eq!(pushed, None);
                id
            })
            .collect();
        // Each connection past the share closes that address's oldest, never another's.
        for oldest in &first {
            assert_eq!(connect(&mut caps, "127.0.0.3").1, Some(*oldest));
        }
        assert!(caps.open.contains_key(&scraper));
        assert_eq!(
            caps.by_address[&ip("127.0.0.3")],
            MAX_CONNECTIONS_PER_ADDRESS
        );
        assert_eq!(caps.open.len(), MAX_CONNECTIONS_PER_ADDRESS + 1);
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_a_share() {
        let mut caps = Caps::default();
        let first = (0..MAX_CONNECTIONS_PER_ADDRESS)
            .map(|i| connect(&mut caps, &format!("2001:db8::{i:x}")))
            .map(|(id, _)| id)
            .min();
        assert_eq!(connect(&mut caps, "2001:db8::ffff:1").1, first);
        assert_eq!(connect(&mut caps, "2001:db8:0:1::1").1, None);
    }

    #[test]
    fn when_all_are_taken_the_oldest_goes_and_released_ones_are_forgotten() {
        let mut caps = Caps::default();
        let ids: Vec<u64> = (0..MAX_CONNECTIONS)
            .map(|i| connect(&mut caps, &format!("10.0.{}.{}", i / 8, i % 8)).0)
            .collect();
        assert_eq!(caps.open.len(), MAX_CONNECTIONS);
        // A scrape from a new address pushes out the oldest of all.
        let (scrape, pushed) = connect(&mut caps, "192.0.2.1");
        assert_eq!(pushed, Some(ids[0]));
        // Its slot comes back when it ends; one pushed out is not counted out twice.
        assert_eq!(caps.release(scrape), Some(scrape));
        assert_eq!(caps.release(ids[0]), None);
        for id in &ids[1..] {
            caps.release(*id);
        }
        assert!(caps.open.is_empty() && caps.by_address.is_empty());
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
