//! CSV: a packet log, a line per datagram and per lost sequence number.

use std::io::{Read, Write};

use wirebench_proto::packet_log::{Arrived, LogError, Reader, Record};

/// Prints a packet log as CSV: `kind,seq,count,size,send_unix_ns,arrival_unix_ns,delay_ns`,
/// a line per datagram (kind `received`, `duplicate` or `too_old`) and a line per lost
/// sequence number (kind `lost`, `count` 1). A run longer than a million (a sender that
/// jumped, not a path that dropped) stays one line, its length in `count`.
pub fn packet_log_csv(input: impl Read, out: &mut impl Write) -> Result<(), LogError> {
    const MAX_EXPAND: u64 = 1_000_000;
    let reader = Reader::new(input)?;
    writeln!(
        out,
        "kind,seq,count,size,send_unix_ns,arrival_unix_ns,delay_ns"
    )?;
    for rec in reader {
        match rec? {
            Record::Datagram {
                kind,
                seq,
                size,
                send_unix_ns,
                arrival_unix_ns,
            } => {
                let kind = match kind {
                    Arrived::Received => "received",
                    Arrived::Duplicate => "duplicate",
                    Arrived::TooOld => "too_old",
                };
                let delay = arrival_unix_ns.wrapping_sub(send_unix_ns) as i64;
                writeln!(
                    out,
                    "{kind},{seq},1,{size},{send_unix_ns},{arrival_unix_ns},{delay}"
                )?;
            }
            Record::Lost { first, count } if count > MAX_EXPAND => {
                writeln!(out, "lost,{first},{count},,,,")?;
            }
            Record::Lost { first, count } => {
                for seq in first..first.saturating_add(count) {
                    writeln!(out, "lost,{seq},1,,,,")?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_log_csv_expands_loss_runs() {
        let mut log = wirebench_proto::packet_log::file_header().to_vec();
        for r in [
            Record::Datagram {
                kind: Arrived::Received,
                seq: 0,
                size: 100,
                send_unix_ns: 1000,
                arrival_unix_ns: 1250,
            },
            Record::Lost { first: 1, count: 3 },
            Record::Lost {
                first: 10,
                count: 5_000_000,
            },
        ] {
            let mut b = [0u8; wirebench_proto::packet_log::RECORD_LEN];
            r.encode(&mut b);
            log.extend_from_slice(&b);
        }
        let mut out = Vec::new();
        packet_log_csv(&log[..], &mut out).expect("valid log");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "kind,seq,count,size,send_unix_ns,arrival_unix_ns,delay_ns",
                "received,0,1,100,1000,1250,250",
                "lost,1,1,,,,",
                "lost,2,1,,,,",
                "lost,3,1,,,,",
                "lost,10,5000000,,,,",
            ]
        );
        assert!(packet_log_csv(&b"junk"[..], &mut Vec::new()).is_err());
    }
}
