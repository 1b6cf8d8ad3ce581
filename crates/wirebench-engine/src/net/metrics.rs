//! `serve --metrics ADDR`: the server's counters in the Prometheus text format, over plain
//! HTTP, for operators (the `prometheus-client` crate writes the format).
//!
//! The counters move where the server already takes a lock or ends a session: no metric is
//! touched on the data path. The exporter answers one scrape at a time, each bounded in
//! size and time, so a peer that opens the metrics port and stays silent costs one thread
//! two seconds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::EngineError;

/// A label naming why: a refusal's kind, or the limit that ended a test.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Reason {
    reason: &'static str,
}

/// The server's counters.
#[derive(Debug, Default)]
pub(super) struct Metrics {
    /// Tests that began (their data moved).
    pub tests_started: Counter,
    /// Tests refused, by the refusal's kind.
    pub tests_refused: Family<Reason, Counter>,
    /// Tests the server ended at one of its limits, by limit.
    pub tests_limited: Family<Reason, Counter>,
    /// Data bytes the server received, over all ended tests.
    pub bytes_received: Counter,
    /// Data bytes the server sent (rr/crr responses too), over all ended tests.
    pub bytes_sent: Counter,
    /// Connections that sent a wrong key.
    pub auth_failures: Counter,
    /// Tests running, read at scrape time.
    running: Gauge,
    /// Connections in the pending stage, read at scrape time.
    pending: Gauge,
}

impl Metrics {
    /// A test was refused for `kind`.
    pub(super) fn refused(&self, kind: &'static str) {
        self.tests_refused
            .get_or_create(&Reason { reason: kind })
            .inc();
    }

    /// A test was ended by the server's `limit`.
    pub(super) fn limited(&self, limit: &'static str) {
        self.tests_limited
            .get_or_create(&Reason { reason: limit })
            .inc();
    }

    /// The text a scrape gets (OpenMetrics), with the gauges as read now.
    pub(super) fn render(&self, running: usize, pending: usize) -> String {
        self.running.set(i64::try_from(running).unwrap_or(i64::MAX));
        self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
        let mut reg = Registry::with_prefix("wirebench");
        reg.register(
            "tests_started",
            "Tests that began moving data",
            self.tests_started.clone(),
        );
        reg.register(
            "tests_refused",
            "Tests refused, by reason",
            self.tests_refused.clone(),
        );
        reg.register(
            "tests_limited",
            "Tests the server ended at one of its limits, by limit",
            self.tests_limited.clone(),
        );
        reg.register(
            "received_bytes",
            "Data bytes the server received, over ended tests",
            self.bytes_received.clone(),
        );
        reg.register(
            "sent_bytes",
            "Data bytes the server sent (rr/crr responses included), over ended tests",
            self.bytes_sent.clone(),
        );
        reg.register(
            "auth_failures",
            "Connections refused for a wrong pre-shared key",
            self.auth_failures.clone(),
        );
        reg.register("tests_running", "Tests running now", self.running.clone());
        reg.register(
            "pending_handshakes",
            "Connections that have not yet proven what they are",
            self.pending.clone(),
        );
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &reg);
        out
    }
}

/// Binds `addr` and serves what `render` makes (OpenMetrics text) from a thread of its own.
pub(super) fn start(
    addr: SocketAddr,
    render: impl Fn() -> String + Send + 'static,
) -> Result<SocketAddr, EngineError> {
    let listener = TcpListener::bind(addr).map_err(|source| EngineError::Connect {
        addr: format!("{addr} (--metrics)"),
        source,
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| EngineError::io("reading the metrics address", e))?;
    std::thread::Builder::new()
        .name("wirebench-metrics".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                scrape(conn, &render);
            }
        })
        .map_err(|e| EngineError::io("starting the metrics thread", e))?;
    Ok(bound)
}

/// Answers one HTTP request with the metrics, whatever its path.
fn scrape(mut conn: TcpStream, render: &impl Fn() -> String) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
    // Read the request head (at most 8 KiB), then answer.
    let mut head = [0u8; 8192];
    let mut have = 0;
    while have < head.len() {
        match conn.read(&mut head[have..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => have += n,
        }
        if head[..have].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let openmetrics = render();
    // OpenMetrics to a scraper that asks for it (Prometheus does), else the classic text
    // format, which `promtool check metrics` and older scrapers read.
    let asks_openmetrics = head[..have]
        .windows(b"openmetrics-text".len())
        .any(|w| w.eq_ignore_ascii_case(b"openmetrics-text"));
    let (content_type, body) = if asks_openmetrics {
        (
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            openmetrics,
        )
    } else {
        (
            "text/plain; version=0.0.4; charset=utf-8",
            classic_text(&openmetrics),
        )
    };
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(reply.as_bytes());
}

/// The classic Prometheus text format (0.0.4) from OpenMetrics text: a counter's family is
/// named with its `_total` suffix there, and there is no `# EOF`.
fn classic_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64);
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let suffix = if counters.contains(&name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{p}{name}{suffix} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_names_counter_families_with_their_total() {
        let om = "# HELP x_bytes Bytes.\n# TYPE x_bytes counter\nx_bytes_total 3\n# HELP g G.\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            classic_text(om),
            "# HELP x_bytes_total Bytes.\n# TYPE x_bytes_total counter\nx_bytes_total 3\n# HELP g G.\n# TYPE g gauge\ng 1\n"
        );
    }
}
