//! Feeds arbitrary bytes to the packet log reader: every record it yields must encode back to
//! the bytes it came from (kind, seq, size and the two times), and nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirebench_proto::packet_log::{Reader, Record, RECORD_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = Reader::new(data) else {
        return;
    };
    for rec in reader {
        let Ok(rec) = rec else { break };
        let mut buf = [0u8; RECORD_LEN];
        rec.encode(&mut buf);
        assert_eq!(Record::decode(&buf, 0).ok(), Some(rec));
    }
});
