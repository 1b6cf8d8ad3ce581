//! `serve --metrics ADDR`: the server's counters, and the two text formats a scrape can
//! ask for (`metrics_http.rs` serves them over HTTP).
//!
//! The counters move where the server already takes a lock or ends a session: no metric is
//! touched on the data path. Both formats are written by `prometheus-client` from one
//! registry: OpenMetrics to a scraper whose `Accept` header asks for it (Prometheus does),
//! the Prometheus text format 0.0.4 otherwise (`promtool check metrics`, older scrapers).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use wirebench_proto::error_kind::ErrorKind;

/// A label naming why: a refusal's kind, or the limit that ended a test.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Reason {
    reason: &'static str,
}

/// How many client addresses' latest figures the metrics keep (the most recent ones): the
/// series stay a bounded set whatever addresses come.
pub(super) const LATEST_CLIENTS: usize = 64;

/// The kinds of test whose latest figures are kept, each client's in this order.
const KINDS: [&str; 2] = ["throughput", "latency"];

/// A client address and a kind of test (`throughput` or `latency`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    client: String,
    kind: &'static str,
}

/// A gauge family of the latest figures: its name, its help and its series.
type LatestFamily = (
    &'static str,
    &'static str,
    Family<ClientLabels, Gauge<f64, AtomicU64>>,
);

/// The latest figures of one client's test of one kind, from the server's results.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Latest {
    /// Streaming: received bits/s over the test's time.
    pub throughput_bps: Option<f64>,
    /// Request/response: the median round trip, s.
    pub latency_s: Option<f64>,
    /// UDP: lost over sent.
    pub loss_ratio: Option<f64>,
    /// When it ended, s since the Unix epoch.
    pub ended_unix_s: f64,
}

/// The server's counters.
#[derive(Debug, Default)]
pub(super) struct Metrics {
    /// The latest test's figures of the [`LATEST_CLIENTS`] most recent client addresses,
    /// by kind: each path's latest figures, as the server saw them.
    /// Least recent first; each client's figures by kind, as [`KINDS`] orders them.
    latest: Mutex<VecDeque<(IpAddr, [Option<Latest>; 2])>>,
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

    /// A test ended for `kind`: counted when the kind is one of the server's limits.
    pub(super) fn limited(&self, kind: ErrorKind) {
        if let Some(reason) = limit_label(kind) {
            self.tests_limited.get_or_create(&Reason { reason }).inc();
        }
    }

    /// Keeps `latest` as `client`'s latest figures of a test of `kind`, forgetting the
    /// least recent client past [`LATEST_CLIENTS`].
    pub(super) fn latest(&self, client: IpAddr, kind: &'static str, latest: Latest) {
        let Ok(mut l) = self.latest.lock() else {
            return;
        };
        // The client moves to the most recent end; past LATEST_CLIENTS the least recent goes.
        let mut figures = match l.iter().position(|(c, _)| *c == client) {
            Some(i) => l.remove(i).map_or([None; 2], |(_, f)| f),
            None => [None; 2],
        };
        figures[usize::from(kind == KINDS[1])] = Some(latest);
        l.push_back((client, figures));
        if l.len() > LATEST_CLIENTS {
            l.pop_front();
        }
    }

    /// The latest figures as gauge families, made afresh for a scrape.
    fn latest_families(&self) -> [LatestFamily; 4] {
        let make = || Family::<ClientLabels, Gauge<f64, AtomicU64>>::default();
        let (tp, lat, loss, at) = (make(), make(), make(), make());
        if let Ok(l) = self.latest.lock() {
            let each = l.iter().flat_map(|(client, figures)| {
                KINDS
                    .iter()
                    .zip(figures)
                    .filter_map(move |(kind, f)| f.map(|f| (client, *kind, f)))
            });
            for (client, kind, f) in each {
                let labels = ClientLabels {
                    client: client.to_string(),
                    kind,
                };
                if let Some(b) = f.throughput_bps {
                    tp.get_or_create(&labels).set(b / 8.0);
                }
                if let Some(s) = f.latency_s {
                    lat.get_or_create(&labels).set(s);
                }
                if let Some(r) = f.loss_ratio {
                    loss.get_or_create(&labels).set(r);
                }
                at.get_or_create(&labels).set(f.ended_unix_s);
            }
        }
        [
            ("client_throughput_bytes_per_second", "A client's latest test's throughput (received bytes/s over the test's time), the most recent 64 clients", tp),
            ("client_latency_seconds", "A client's latest request/response test's median round trip, the most recent 64 clients", lat),
            ("client_loss_ratio", "A client's latest UDP test's loss (lost over sent), the most recent 64 clients", loss),
            ("client_last_test_timestamp_seconds", "When a client's latest test ended, s since the Unix epoch, the most recent 64 clients", at),
        ]
    }

    /// The text a scrape gets in `format`, with the gauges as read now.
    pub(super) fn render(&self, running: usize, pending: usize, format: Format) -> String {
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
        for (name, help, family) in self.latest_families() {
            reg.register(name, help, family);
        }
        reg.register(
            "pending_handshakes",
            "Connections that have not yet proven what they are",
            self.pending.clone(),
        );
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = match format {
            Format::OpenMetrics => text::encode(&mut out, &reg),
            Format::Text => prometheus_text::encode(&mut out, &reg),
        };
        out
    }
}

/// The `reason` label of a test the server ended at a limit: the flag without its dashes
/// (`max-bytes`); `None` for a kind that is no limit a running test meets.
fn limit_label(kind: ErrorKind) -> Option<&'static str> {
    Some(match kind {
        ErrorKind::MaxBytes => "max-bytes",
        ErrorKind::MaxRate => "max-rate",
        ErrorKind::MaxPps => "max-pps",
        ErrorKind::MaxDuration => "max-duration",
        ErrorKind::MaxMemory => "max-memory",
        _ => return None,
    })
}

/// The exposition format of a scrape's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text: counter families named without `_total`, ends with `# EOF`.
    OpenMetrics,
    /// The Prometheus text format 0.0.4: what a scraper gets unless it asks for OpenMetrics.
    Text,
}

impl Format {
    /// The format a request's `Accept` header (absent, or not text: `None`) asks for.
    ///
    /// As Prometheus' own Go client negotiates (`expfmt.NegotiateIncludingOpenMetrics`): the
    /// media ranges by their `q`, highest first (ties in the order written); the first that
    /// names OpenMetrics (version 1.0.0, 0.0.1 or none) or `text/plain` (version 0.0.4 or
    /// none) decides, and anything else falls back to the 0.0.4 text.
    pub(super) fn negotiate(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return Self::Text;
        };
        let mut ranges: Vec<(f32, Option<Self>)> = accept
            .split(',')
            .take(MAX_MEDIA_RANGES)
            .map(media_range)
            .filter(|(q, _)| *q > 0.0)
            .collect();
        // A stable sort keeps the header's order among equal weights.
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranges
            .into_iter()
            .find_map(|(_, f)| f)
            .unwrap_or(Self::Text)
    }

    /// The `Content-Type` of an answer in this format.
    pub(super) fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Text => prometheus_text::CONTENT_TYPE,
        }
    }
}

/// The media ranges of one `Accept` header looked at: more is no scraper's, and the header's
/// size is bounded by the HTTP server before this sees it.
const MAX_MEDIA_RANGES: usize = 32;

/// One media range of an `Accept` header: its weight (`q`, 1 when absent or unreadable) and
/// the format it names, if it names one wirebench writes.
fn media_range(range: &str) -> (f32, Option<Format>) {
    let mut parts = range.split(';').map(str::trim);
    let media = parts.next().unwrap_or("");
    let (mut q, mut version) = (1.0_f32, None);
    for param in parts {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"');
        match key.trim().to_ascii_lowercase().as_str() {
            "q" => {
                q = value
                    .parse()
                    .ok()
                    .filter(|q: &f32| q.is_finite())
                    .unwrap_or(1.0)
            }
            "version" => version = Some(value),
            _ => {}
        }
    }
    let format = if media.eq_ignore_ascii_case("application/openmetrics-text") {
        matches!(version, None | Some("1.0.0") | Some("0.0.1")).then_some(Format::OpenMetrics)
    } else if media.eq_ignore_ascii_case("text/plain") {
        matches!(version, None | Some("0.0.4")).then_some(Format::Text)
    } else {
        None
    };
    (q, format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_figures_keep_the_most_recent_clients_and_one_entry_each() {
        let m = Metrics::default();
        let f = |b: f64| Latest {
            throughput_bps: Some(b),
            latency_s: None,
            loss_ratio: None,
            ended_unix_s: 1.0,
        };
        for i in 0..100u8 {
            m.latest(
                IpAddr::from([10, 0, 0, i]),
                "throughput",
                f(8.0 * f64::from(i)),
            );
        }
        m.latest(IpAddr::from([10, 0, 0, 99]), "throughput", f(8000.0));
        let text = m.render(0, 0, Format::Text);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("wirebench_client_throughput_bytes_per_second{"))
            .collect();
        assert_eq!(lines.len(), LATEST_CLIENTS, "{text}");
        assert!(!text.contains("client=\"10.0.0.35\""), "{text}");
        assert!(text.contains("wirebench_client_throughput_bytes_per_second{client=\"10.0.0.99\",kind=\"throughput\"} 1000"), "{text}");
    }

    /// What Prometheus 3 sends by default.
    const PROMETHEUS: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

    #[test]
    fn openmetrics_only_when_asked_for() {
        assert_eq!(Format::negotiate(Some(PROMETHEUS)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(
            Format::negotiate(Some("text/html, */*;q=0.8")),
            Format::Text
        );
        assert_eq!(Format::negotiate(Some("")), Format::Text);
    }

    #[test]
    fn the_highest_weight_decides_and_refused_or_unknown_versions_do_not() {
        // The text format weighs more here, though written second.
        let text_first =
            "application/openmetrics-text; version=1.0.0; q=0.5, text/plain; version=0.0.4";
        assert_eq!(Format::negotiate(Some(text_first)), Format::Text);
        // q=0 refuses a format; an unknown version is not the one wirebench writes.
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=9.9.9, text/plain;q=0.1"
            )),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some(
                "text/plain;version=1.0.0, APPLICATION/OpenMetrics-Text;q=0.9"
            )),
            Format::OpenMetrics
        );
    }

    #[test]
    fn garbage_accept_headers_fall_back_to_the_text_format() {
        for junk in [
            ";;;",
            "q=2",
            "application/openmetrics-text;q=NaN;;=",
            ",,,,",
            "\u{0}",
        ] {
            let _ = Format::negotiate(Some(junk));
        }
        assert_eq!(Format::negotiate(Some(";q=1, =;")), Format::Text);
        // Only the first ranges are looked at.
        let long = "a/b;q=1,".repeat(10_000) + "application/openmetrics-text";
        assert_eq!(Format::negotiate(Some(&long)), Format::Text);
    }

    #[test]
    fn the_text_format_names_counter_families_with_their_total_and_has_no_eof() {
        let m = Metrics::default();
        m.tests_started.inc();
        m.refused("max_bytes");
        m.bytes_received.inc_by(100_000);
        let text = m.render(2, 3, Format::Text);
        for line in [
            "# TYPE wirebench_tests_started_total counter",
            "wirebench_tests_started_total 1",
            "wirebench_tests_refused_total{reason=\"max_bytes\"} 1",
            "wirebench_received_bytes_total 100000",
            "# TYPE wirebench_tests_running gauge",
            "wirebench_tests_running 2",
            "wirebench_pending_handshakes 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
        let m = Metrics::default();
        m.tests_started.inc();
        let om = m.render(0, 0, Format::OpenMetrics);
        assert!(
            om.contains("# TYPE wirebench_tests_started counter\n"),
            "{om}"
        );
        assert!(om.contains("\nwirebench_tests_started_total 1\n"), "{om}");
        assert!(om.ends_with("# EOF\n"), "{om}");
    }

    #[test]
    fn limits_are_counted_by_kind_whatever_the_words() {
        let m = Metrics::default();
        for kind in [
            ErrorKind::MaxBytes,
            ErrorKind::MaxRate,
            ErrorKind::Timeout,
            ErrorKind::PeerClosed,
            ErrorKind::Unknown,
        ] {
            m.limited(kind);
        }
        let text = m.render(0, 0, Format::Text);
        let limited = |l: &&str| l.starts_with("wirebench_tests_limited_total{");
        assert_eq!(text.lines().filter(limited).count(), 2, "{text}");
        for line in [
            "wirebench_tests_limited_total{reason=\"max-bytes\"} 1",
            "wirebench_tests_limited_total{reason=\"max-rate\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }
}
