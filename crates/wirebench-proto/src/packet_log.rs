//! The packet log (`--packet-log FILE`): one fixed-size binary record per datagram received
//! and per loss run, as UDPmon registers each packet's sequence number and arrival time.
//!
//! Binary, so that the receiver hands its writer thread bytes it can copy, not text to
//! format: a record is 32 bytes, 10 million datagrams make 320 MB. `wirebench packet-log
//! FILE` turns a log into CSV. The same bytes travel from a server's receiver to the client
//! over a TCP connection of their own, so the server never writes a file.
//!
//! ```text
//! file:    magic "WBPKTLOG" | version u32 = 1 | record length u32 = 32 | records ...
//! record:  kind u8 | 3 zero bytes | size u32 | seq u64 | a u64 | b u64      (big-endian)
//!   kind 1 received, 2 duplicate, 3 too old: size = datagram bytes, a = send time,
//!          b = arrival time, both Unix ns (the send time rebuilt from the header's 48 bits
//!          with the receiver's clock; its offset is unknown unless both ends share a clock)
//!   kind 4 lost: seq = first sequence number of the run, a = run length, size = b = 0
//! ```
//!
//! Records come in arrival order; a loss run is written once it is settled (it left the
//! receiver's reorder window, or the test ended), so it appears after datagrams that arrived
//! later. Every sequence number below the sender's count is covered by exactly one
//! `received` record or one `lost` run.

use std::io::Read;

use thiserror::Error;

/// First bytes of every packet log.
pub const MAGIC: [u8; 8] = *b"WBPKTLOG";

/// Format version written after the magic.
pub const VERSION: u32 = 1;

/// Length of the file header.
pub const FILE_HEADER_LEN: usize = 16;

/// Length of each record.
pub const RECORD_LEN: usize = 32;

/// The file header.
pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut out = [0u8; FILE_HEADER_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_be_bytes());
    out[12..].copy_from_slice(&(RECORD_LEN as u32).to_be_bytes());
    out
}

/// What happened to a datagram that arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrived {
    /// First copy: counted.
    Received,
    /// A copy of a datagram already counted.
    Duplicate,
    /// Too far behind to tell late from duplicate: not counted (its sequence number was
    /// settled as lost).
    TooOld,
}

/// One record of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A datagram arrived.
    Datagram {
        /// How it was counted.
        kind: Arrived,
        /// Its sequence number.
        seq: u64,
        /// Its length in bytes.
        size: u32,
        /// When it was sent, Unix ns (see the module documentation).
        send_unix_ns: u64,
        /// When it arrived, Unix ns on the receiver's clock.
        arrival_unix_ns: u64,
    },
    /// Sequence numbers `first .. first + count` never arrived.
    Lost {
        /// First missing sequence number.
        first: u64,
        /// How many in a row.
        count: u64,
    },
}

/// Bytes that are not a packet log.
#[derive(Debug, Error)]
pub enum LogError {
    /// Not a packet log at all.
    #[error("not a wirebench packet log (bad magic)")]
    Magic,
    /// A version or record length this build does not read.
    #[error("packet log version {version} with {record_len}-byte records is not supported (this build reads version {VERSION}, {RECORD_LEN}-byte records)")]
    Version {
        /// Version found.
        version: u32,
        /// Record length found.
        record_len: u32,
    },
    /// A record kind this build does not know.
    #[error("record {index}: unknown kind {kind}")]
    Kind {
        /// Record index, from 0.
        index: u64,
        /// Kind byte.
        kind: u8,
    },
    /// A loss run that is empty or runs past the last sequence number (`first + count - 1`
    /// overflows): no receiver writes one, and a reader that expanded it would not end.
    #[error("record {index}: a loss run of {count} from {first} is impossible")]
    LostRun {
        /// Record index, from 0.
        index: u64,
        /// First sequence number of the run.
        first: u64,
        /// Its length.
        count: u64,
    },
    /// The file ends inside a record or the header.
    #[error("the packet log is truncated ({0} stray bytes at the end)")]
    Truncated(usize),
    /// Reading failed.
    #[error("reading the packet log: {0}")]
    Io(#[from] std::io::Error),
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn be32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

impl Record {
    /// Encodes the record.
    pub fn encode(&self, out: &mut [u8; RECORD_LEN]) {
        let (kind, size, seq, a, b) = match *self {
            Record::Datagram {
                kind,
                seq,
                size,
                send_unix_ns,
                arrival_unix_ns,
            } => {
                let k = match kind {
                    Arrived::Received => 1,
                    Arrived::Duplicate => 2,
                    Arrived::TooOld => 3,
                };
                (k, size, seq, send_unix_ns, arrival_unix_ns)
            }
            Record::Lost { first, count } => (4, 0, first, count, 0),
        };
        out[0] = kind;
        out[1..4].fill(0);
        out[4..8].copy_from_slice(&size.to_be_bytes());
        out[8..16].copy_from_slice(&seq.to_be_bytes());
        out[16..24].copy_from_slice(&a.to_be_bytes());
        out[24..32].copy_from_slice(&b.to_be_bytes());
    }

    /// Decodes record number `index` from untrusted bytes.
    pub fn decode(buf: &[u8; RECORD_LEN], index: u64) -> Result<Self, LogError> {
        let size = be32(&buf[4..8]);
        let seq = be64(&buf[8..16]);
        let a = be64(&buf[16..24]);
        let b = be64(&buf[24..32]);
        let datagram = |kind| Record::Datagram {
            kind,
            seq,
            size,
            send_unix_ns: a,
            arrival_unix_ns: b,
        };
        match buf[0] {
            1 => Ok(datagram(Arrived::Received)),
            2 => Ok(datagram(Arrived::Duplicate)),
            3 => Ok(datagram(Arrived::TooOld)),
            // A run is at least one datagram and its last sequence number is a u64, so a
            // consumer may count `first..=first + (count - 1)` without overflow; the run may
            // end at u64::MAX, where `first + count` overflows.
            4 if a == 0 || seq.checked_add(a - 1).is_none() => Err(LogError::LostRun {
                index,
                first: seq,
                count: a,
            }),
            4 => Ok(Record::Lost {
                first: seq,
                count: a,
            }),
            kind => Err(LogError::Kind { index, kind }),
        }
    }
}

/// Reads a packet log record by record.
pub struct Reader<R> {
    inner: R,
    index: u64,
    done: bool,
}

/// Fills `buf` from `r`; returns how many bytes were read (less than `buf.len()` only at the
/// end of the input).
fn fill(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut off = 0;
    while off < buf.len() {
        match r.read(&mut buf[off..]) {
            Ok(0) => break,
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(off)
}

impl<R: Read> Reader<R> {
    /// Checks the file header and returns a reader of the records after it.
    pub fn new(mut inner: R) -> Result<Self, LogError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        let n = fill(&mut inner, &mut h)?;
        if n < 8 || h[..8] != MAGIC {
            return Err(LogError::Magic);
        }
        if n < FILE_HEADER_LEN {
            return Err(LogError::Truncated(n));
        }
        let (version, record_len) = (be32(&h[8..12]), be32(&h[12..16]));
        if version != VERSION || record_len != RECORD_LEN as u32 {
            return Err(LogError::Version {
                version,
                record_len,
            });
        }
        Ok(Self {
            inner,
            index: 0,
            done: false,
        })
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut buf = [0u8; RECORD_LEN];
        let n = match fill(&mut self.inner, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                self.done = true;
                return Some(Err(e.into()));
            }
        };
        if n < RECORD_LEN {
            self.done = true;
            return (n > 0).then_some(Err(LogError::Truncated(n)));
        }
        let rec = Record::decode(&buf, self.index);
        self.index += 1;
        if rec.is_err() {
            self.done = true;
        }
        Some(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::Datagram {
                kind: Arrived::Received,
                seq: 0,
                size: 1472,
                send_unix_ns: 1_700_000_000_000_000_000,
                arrival_unix_ns: 1_700_000_000_000_050_000,
            },
            Record::Datagram {
                kind: Arrived::Duplicate,
                seq: 1 << 40,
                size: 16,
                send_unix_ns: 5,
                arrival_unix_ns: 6,
            },
            Record::Datagram {
                kind: Arrived::TooOld,
                seq: u64::MAX,
                size: 65_507,
                send_unix_ns: u64::MAX,
                arrival_unix_ns: 0,
            },
            Record::Lost { first: 7, count: 3 },
        ]
    }

    fn file(records: &[Record]) -> Vec<u8> {
        let mut out = file_header().to_vec();
        for r in records {
            let mut b = [0u8; RECORD_LEN];
            r.encode(&mut b);
            out.extend_from_slice(&b);
        }
        out
    }

    #[test]
    fn records_round_trip() {
        let recs = sample();
        let bytes = file(&recs);
        assert_eq!(bytes.len(), FILE_HEADER_LEN + 4 * RECORD_LEN);
        let back: Vec<Record> = Reader::new(&bytes[..])
            .expect("header")
            .collect::<Result<_, _>>()
            .expect("records");
        assert_eq!(back, recs);
    }

    #[test]
    fn random_bytes_never_panic() {
        // xorshift: deterministic, so a failure reproduces.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for len in 0..2_000usize {
            let mut bytes = file_header().to_vec();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes.push(x as u8 % 6); // kinds 0..=5: valid and invalid
            }
            let n = Reader::new(&bytes[..]).map(|r| r.count()).unwrap_or(0);
            assert!(n <= len / RECORD_LEN + 1);
        }
    }

    #[test]
    fn junk_is_an_error_not_a_panic() {
        assert!(matches!(Reader::new(&b""[..]), Err(LogError::Magic)));
        assert!(matches!(
            Reader::new(&b"WBPKTLOX00000000"[..]),
            Err(LogError::Magic)
        ));
        assert!(matches!(
            Reader::new(&b"WBPKTLOG\0\0"[..]),
            Err(LogError::Truncated(10))
        ));
        let mut h = file_header();
        h[11] = 9;
        assert!(matches!(
            Reader::new(&h[..]),
            Err(LogError::Version { version: 9, .. })
        ));
        // a truncated last record
        let mut bytes = file(&sample());
        bytes.truncate(bytes.len() - 5);
        let out: Vec<_> = Reader::new(&bytes[..]).expect("header").collect();
        assert_eq!(out.len(), 4);
        assert!(matches!(out[3], Err(LogError::Truncated(27))));
        // an impossible loss run stops the reader
        for (first, count) in [(u64::MAX, 2), (2, u64::MAX), (0, 0)] {
            let bytes = file(&[Record::Lost { first, count }]);
            let out: Vec<_> = Reader::new(&bytes[..]).expect("header").collect();
            assert!(matches!(out[..], [Err(LogError::LostRun { index: 0, .. })]));
        }
        let bytes = file(&[Record::Lost {
            first: u64::MAX,
            count: 1,
        }]);
        assert!(Reader::new(&bytes[..]).expect("header").all(|r| r.is_ok()));
        // an unknown kind stops the reader
        let mut bytes = file(&sample());
        bytes[FILE_HEADER_LEN + RECORD_LEN] = 99;
        let out: Vec<_> = Reader::new(&bytes[..]).expect("header").collect();
        assert_eq!(out.len(), 2);
        assert!(matches!(out[1], Err(LogError::Kind { index: 1, kind: 99 })));
    }
}
