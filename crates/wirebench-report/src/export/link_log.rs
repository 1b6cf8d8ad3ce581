//! The link log (`wirebench lab --link-log`) as CSV: a header, then a row per link,
//! direction and interval. `plot` reads it back by column name.

use std::io::{self, Write};

use wirebench_proto::link_log::{LinkLog, HEADER};

use super::Exporter;

/// Writes a [`LinkLog`] as CSV: `t_s` is the interval's start since the lab began (s, 3
/// decimals), `delivered_bps` the interval's delivered IP bytes as a rate, and
/// `max_queue_delay_ms` the longest wait for the serializer (ms, 3 decimals).
pub struct LinkLogCsv;

impl Exporter<LinkLog> for LinkLogCsv {
    fn export(&self, log: &LinkLog, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{HEADER}")?;
        for r in log.rows() {
            let c = &r.counts;
            writeln!(
                out,
                "{:.3},{},{},{},{},{},{},{},{},{:.0},{:.3}",
                r.t_s(),
                r.link,
                r.direction,
                c.packets_in,
                c.bytes_in,
                c.dropped_loss,
                c.dropped_queue,
                c.delivered,
                c.delivered_bytes,
                r.delivered_bps(),
                r.max_queue_delay_ms(),
            )?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::link_log::{LinkInterval, LinkTrace};

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
             delivered_bytes,delivered_bps,max_queue_delay_ms\n\
             0.050,client-server,up,10,15000,1,2,7,10500,1680000,1.235\n\
             0.100,client-server,up,0,0,0,0,0,0,0,0.000\n\
             0.000,client-server,down,4,6000,1,2,1,1500,240000,1.235\n"
        );
    }
}
