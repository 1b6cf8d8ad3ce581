//! What `--iperf3-json` takes from a test as it runs that its results document does not
//! hold: when and where to it began, the data connections' addresses (iperf3's
//! `start.connected`) and, with `-P` above 1, each stream's own intervals (iperf3's
//! `intervals[].streams`; the results document keeps the streams' sums). Bounded: a record
//! per stream the test has and [`MAX_INTERVALS`] intervals each.

use std::net::SocketAddr;

use wirebench_engine::Watch;
use wirebench_proto::results::{IntervalRecord, Role};
use wirebench_proto::spec::{TestSpec, MAX_INTERVALS};
use wirebench_report::export::{Connected, Iperf3Client};

/// The client's side of a test for iperf3's schema, filled as the test runs.
#[derive(Debug)]
pub struct Iperf3Record {
    client: Iperf3Client,
    /// The test's streams, both ways.
    streams: usize,
    /// Whether each stream's intervals are kept (`-P` above 1).
    per_stream: bool,
}

impl Iperf3Record {
    /// A test of `spec` against `host:port`, beginning now.
    pub fn begin(host: &str, port: u16, spec: &TestSpec) -> Self {
        let unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let streams = spec.total_streams() as usize;
        Self {
            client: Iperf3Client {
                unix_s,
                host: host.to_string(),
                port,
                system_info: wirebench_report::export::iperf3::system_info(),
                connected: Vec::new(),
                stream_intervals: Vec::new(),
            },
            streams,
            per_stream: spec.streams > 1,
        }
    }

    /// What was recorded.
    pub fn finish(self) -> Iperf3Client {
        self.client
    }
}

impl Watch for Iperf3Record {
    fn connected(&mut self, stream: u32, local: SocketAddr, remote: SocketAddr) {
        if (stream as usize) < self.streams && self.client.connected.len() < self.streams {
            self.client.connected.push(Connected {
                stream,
                local,
                remote,
            });
        }
    }

    fn stream_interval(&mut self, _role: Role, stream: u32, rec: &IntervalRecord) {
        let k = stream as usize;
        if !self.per_stream || k >= self.streams {
            return;
        }
        let all = &mut self.client.stream_intervals;
        if all.len() <= k {
            all.resize_with(k + 1, Vec::new);
        }
        if (all[k].len() as u64) < MAX_INTERVALS {
            all[k].push(*rec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_stay_within_the_tests_streams_and_intervals() {
        let spec = TestSpec {
            streams: 2,
            ..TestSpec::default()
        };
        let mut r = Iperf3Record::begin("h", 1, &spec);
        let a: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        for s in 0..5 {
            r.connected(s, a, a);
        }
        let rec = IntervalRecord::default();
        for _ in 0..MAX_INTERVALS + 3 {
            r.stream_interval(Role::Sender, 1, &rec);
        }
        r.stream_interval(Role::Sender, 7, &rec);
        let c = r.finish();
        assert_eq!(c.connected.len(), 2);
        assert_eq!(c.stream_intervals.len(), 2);
        assert!(c.stream_intervals[0].is_empty());
        assert_eq!(c.stream_intervals[1].len() as u64, MAX_INTERVALS);
    }

    #[test]
    fn one_stream_keeps_no_stream_intervals() {
        let mut r = Iperf3Record::begin("h", 1, &TestSpec::default());
        r.stream_interval(Role::Sender, 0, &IntervalRecord::default());
        assert!(r.finish().stream_intervals.is_empty());
    }
}
