//! Feeds arbitrary bytes to the iperf3 decoders: state bytes, length-prefixed JSON,
//! SERVER_ERROR codes, parameters and results documents, cookies, connect datagrams and
//! the UDP header (32- and 64-bit), and to both control sessions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirebench_engine::iperf3::{decode_everything, UdpHeader};

fuzz_target!(|data: &[u8]| {
    decode_everything(data);
    for wide in [false, true] {
        if let Ok(h) = UdpHeader::decode(wide, data) {
            let mut buf = [0u8; 16];
            h.encode(wide, &mut buf).expect("16 bytes hold a header");
            assert_eq!(UdpHeader::decode(wide, &buf), Ok(h));
        }
    }
});
