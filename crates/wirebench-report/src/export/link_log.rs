//! The link log (`wirebench lab --link-log`) as CSV: a header, then a row per link,
//! direction and interval. `plot` reads it back by column name.

use std::fmt;
use std::io::{self, Write};

use serde::Serialize;
use wirebench_proto::link_log::LinkLog;

use super::csv::{display, write_rows};
use super::Exporter;

/// Writes a [`LinkLog`] as CSV: `t_s` is the interval's start since the lab began (s, 3
/// decimals), `delivered_bps` the interval's delivered IP bytes as a rate,
/// `max_queue_delay_ms` the longest wait for the serializer (ms, 3 decimals), and
/// `capacity_bps` what the direction could have carried (wire bytes as a rate; 0: no limit).
/// New columns go at the end: scripts read these by position too.
pub struct LinkLogCsv;

/// A number written with `D` decimals.
#[derive(Default, Clone, Copy)]
struct Fixed<const D: usize>(f64);

impl<const D: usize> fmt::Display for Fixed<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.*}", D, self.0)
    }
}

/// One link, direction and interval: its fields, in order, are the columns and their names
/// the header (`wirebench_proto::link_log::HEADER`, which the readers check).
#[derive(Default, Serialize)]
struct LinkRow<'a> {
    #[serde(serialize_with = "display")]
    t_s: Fixed<3>,
    link: &'a str,
    direction: &'a str,
    packets_in: u64,
    bytes_in: u64,
    dropped_loss: u64,
    dropped_queue: u64,
    delivered: u64,
    delivered_bytes: u64,
    #[serde(serialize_with = "display")]
    delivered_bps: Fixed<0>,
    #[serde(serialize_with = "display")]
    max_queue_delay_ms: Fixed<3>,
    dropped_aqm: u64,
    marked: u64,
    #[serde(serialize_with = "display")]
    capacity_bps: Fixed<0>,
}

impl Exporter<LinkLog> for LinkLogCsv {
    fn export(&self, log: &LinkLog, out: &mut dyn Write) -> io::Result<()> {
        let rows = log.rows().map(|r| {
            let c = r.counts;
            LinkRow {
                t_s: Fixed(r.t_s()),
                link: r.link,
                direction: r.direction,
                packets_in: c.packets_in,
                bytes_in: c.bytes_in,
                dropped_loss: c.dropped_loss,
                dropped_queue: c.dropped_queue,
                delivered: c.delivered,
                delivered_bytes: c.delivered_bytes,
                delivered_bps: Fixed(r.delivered_bps()),
                max_queue_delay_ms: Fixed(r.max_queue_delay_ms()),
                dropped_aqm: c.dropped_aqm,
                marked: c.marked,
                capacity_bps: Fixed(r.capacity_bps()),
            }
        });
        write_rows(rows, out)?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::link_log::{LinkInterval, LinkTrace};

    #[test]
    fn the_header_written_is_the_one_readers_check() {
        let header = super::super::csv::header::<LinkRow<'_>>().expect("header");
        let want = format!("{}\n", wirebench_proto::link_log::HEADER);
        assert_eq!(String::from_utf8_lossy(&header), want);
    }

    #[test]
    fn the_csv_keeps_its_columns_and_figures() {
        let bin = |n: u64| LinkInterval {
            packets_in: n,
            bytes_in: n * 1500,
            dropped_loss: 1,
            dropped_queue: 2,
            delivered: n - 3,
            delivered_bytes: (n - 3) * 1500,
            max_queue_delay_ns: 1_234_567,
            dropped_aqm: 5,
            marked: n % 3,
            capacity_bytes: 150_000,
        };
        let log = LinkLog {
            links: vec![LinkTrace {
                link: "client-server".into(),
                interval_ns: 50_000_000,
                up: vec![LinkInterval::default(), bin(10), LinkInterval::default()],
                down: vec![bin(4)],
            }],
        };
        let mut out = Vec::new();
        LinkLogCsv.export(&log, &mut out).expect("to memory");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "t_s,link,direction,packets_in,bytes_in,dropped_loss,dropped_queue,delivered,\
             delivered_bytes,delivered_bps,max_queue_delay_ms,dropped_aqm,marked,capacity_bps\n\
             0.050,client-server,up,10,15000,1,2,7,10500,1680000,1.235,5,1,24000000\n\
             0.100,client-server,up,0,0,0,0,0,0,0,0.000,0,0,0\n\
             0.000,client-server,down,4,6000,1,2,1,1500,240000,1.235,5,1,24000000\n"
        );
    }
}
