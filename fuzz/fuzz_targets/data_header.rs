//! Feeds arbitrary datagrams to the data-header, hello and ack decoders.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirebench_proto::header::{decode_ack, DataHeader, UdpHello};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = DataHeader::read(data) {
        let mut buf = [0u8; 16];
        h.write(&mut buf).expect("16 bytes hold a header");
        assert_eq!(DataHeader::read(&buf), Ok(h));
    }
    if let Ok(h) = UdpHello::decode(data) {
        assert_eq!(&h.encode()[..], data);
    }
    let _ = decode_ack(data);
});
