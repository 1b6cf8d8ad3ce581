//! Feeds arbitrary bytes, in arbitrary pieces, to the control-frame decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirebench_proto::control::{encode, FrameDecoder, MAX_FRAME, MAX_HELLO_FRAME};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the piece size, so partial frames are exercised too.
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let piece = usize::from(split).max(1);
    let max = if split & 1 == 0 { MAX_HELLO_FRAME } else { MAX_FRAME };
    let mut d = FrameDecoder::new(max);
    for chunk in rest.chunks(piece) {
        d.feed(chunk);
        loop {
            match d.next_message() {
                Ok(Some(msg)) => {
                    // Whatever decodes must encode again.
                    let _ = encode(&msg);
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
});
