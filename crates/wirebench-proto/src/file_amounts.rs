//! A file transfer's amounts (`--file`): what each message carries of the file, and the
//! test's amount for a file of a given size, and back.

use crate::header::HEADER_LEN;
use crate::spec::{Protocol, TestSpec};

impl TestSpec {
    /// File bytes each message carries: all of it over TCP, all but the header over UDP.
    pub fn file_chunk(&self) -> u64 {
        match self.protocol {
            Protocol::Tcp | Protocol::Quic => self.size,
            Protocol::Udp => self.size.saturating_sub(HEADER_LEN as u64).max(1),
        }
    }

    /// The test's amount in payload bytes for a file of `file_bytes`: the file itself over
    /// TCP; over UDP, the file plus a header per datagram.
    pub fn bytes_for_file(&self, file_bytes: u64) -> u64 {
        match self.protocol {
            Protocol::Tcp | Protocol::Quic => file_bytes,
            Protocol::Udp => {
                let datagrams = file_bytes.div_ceil(self.file_chunk()).max(1);
                file_bytes + datagrams * HEADER_LEN as u64
            }
        }
    }

    /// The size of the file of a file transfer whose amount is `bytes` (the inverse of
    /// [`bytes_for_file`](Self::bytes_for_file)).
    pub fn file_bytes(&self) -> u64 {
        let bytes = self.bytes.unwrap_or(0);
        match self.protocol {
            Protocol::Tcp | Protocol::Quic => bytes,
            Protocol::Udp => {
                bytes.saturating_sub(bytes.div_ceil(self.size.max(1)) * HEADER_LEN as u64)
            }
        }
    }
}
