//! A server's data connection through a user-space stack (`serve --stack smoltcp`): the
//! stack listens from the test's admission on, and its first frame must be the test's
//! `attach`, from the control connection's address; then it joins the test as a kernel
//! connection would through `state::attach`.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wirebench_proto::control::{decode, Message};

use crate::control::SETUP_TIMEOUT;
use crate::role::DataSocket;
use crate::{UserAccept, UserStream};

/// An attach frame is well under this (a type, a version, a cookie and a stream index).
const MAX_ATTACH: usize = 256;

/// How often a wait for the attach looks at the cancel flag.
const CANCEL_EVERY: Duration = Duration::from_millis(100);

/// The test waiting for its connection.
pub(super) struct Waiting {
    pub(super) cookie: u64,
    pub(super) streams: u32,
    pub(super) tx: SyncSender<(u32, DataSocket)>,
    /// Why the connection did not come: the session ends the test with it.
    pub(super) failed: SyncSender<String>,
    /// Set when the test ends: stop waiting, free the device.
    pub(super) cancel: Arc<AtomicBool>,
}

/// Takes the test's data connection from the stack and hands it to the test, or tells the
/// test why none came (none in time, a wrong first frame); a cancelled wait says nothing.
pub(super) fn take(listener: Box<dyn UserAccept>, w: &Waiting) {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    let taken = listener
        .accept(SETUP_TIMEOUT, &w.cancel)
        .map_err(|e| e.to_string())
        .and_then(|mut s| match read_attach(s.as_mut(), deadline, &w.cancel) {
            Some((cookie, stream)) if cookie == w.cookie && stream < w.streams => Ok((stream, s)),
            Some(_) => Err(
                "the data connection to the server's user-space stack named \
                            another test or stream"
                    .to_owned(),
            ),
            None => Err(
                "the data connection to the server's user-space stack did not \
                         begin with the test's attach in time"
                    .to_owned(),
            ),
        });
    match taken {
        Ok((stream, s)) => {
            let _ = w.tx.try_send((stream, DataSocket::User(s)));
        }
        Err(_) if w.cancel.load(Ordering::Relaxed) => {}
        Err(why) => {
            let _ = w.failed.try_send(why);
        }
    }
}

/// The connection's first frame, if it is an attach: its cookie and stream. Reads no byte
/// past the frame: the test's data follows it.
fn read_attach(
    s: &mut dyn UserStream,
    deadline: Instant,
    cancel: &AtomicBool,
) -> Option<(u64, u32)> {
    let mut frame = [0u8; MAX_ATTACH];
    read_full(s, &mut frame[..4], deadline, cancel)?;
    let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    let end = len.checked_add(4).filter(|&e| e <= MAX_ATTACH)?;
    read_full(s, &mut frame[4..end], deadline, cancel)?;
    match decode(&frame[..end], MAX_ATTACH) {
        Ok(Some((Message::Attach { cookie, stream, .. }, _))) => Some((cookie, stream)),
        _ => None,
    }
}

fn read_full(
    s: &mut dyn UserStream,
    buf: &mut [u8],
    deadline: Instant,
    cancel: &AtomicBool,
) -> Option<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.checked_duration_since(Instant::now())?;
        if cancel.load(Ordering::Relaxed) {
            return None;
        }
        s.set_timeout(left.min(CANCEL_EVERY));
        match s.read(&mut buf[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(_) => return None,
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{self, Read, Write};
    use std::time::Duration;
    use wirebench_proto::control::{encode, PROTOCOL_VERSION};
    use wirebench_proto::results::UserStack;

    /// A stream that yields its bytes a few at a time.
    #[derive(Debug)]
    struct Trickle(io::Cursor<Vec<u8>>);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(3);
            self.0.read(&mut buf[..n])
        }
    }
    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    impl UserStream for Trickle {
        fn set_timeout(&mut self, _: Duration) {}
        fn shutdown_write(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn stack(&self) -> UserStack {
            UserStack::default()
        }
    }

    fn go() -> AtomicBool {
        AtomicBool::new(false)
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn the_attach_is_read_exactly_and_the_data_after_it_stays() {
        let attach = Message::Attach {
            version: PROTOCOL_VERSION,
            cookie: 0xc0ff_ee00_0000_0001,
            stream: 0,
        };
        let mut bytes = encode(&attach).unwrap();
        bytes.extend_from_slice(b"DATA");
        let mut s = Trickle(io::Cursor::new(bytes));
        assert_eq!(
            read_attach(&mut s, far(), &go()),
            Some((0xc0ff_ee00_0000_0001, 0))
        );
        let mut rest = Vec::new();
        s.0.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"DATA");
    }

    #[test]
    fn a_cancelled_wait_reads_nothing() {
        let attach = encode(&Message::Attach {
            version: PROTOCOL_VERSION,
            cookie: 1,
            stream: 0,
        })
        .unwrap();
        let cancelled = AtomicBool::new(true);
        let mut s = Trickle(io::Cursor::new(attach));
        assert_eq!(read_attach(&mut s, far(), &cancelled), None);
        assert_eq!(s.0.position(), 0);
    }

    #[test]
    fn anything_but_a_small_attach_is_turned_away() {
        let start = encode(&Message::Begin).unwrap();
        assert_eq!(
            read_attach(&mut Trickle(io::Cursor::new(start)), far(), &go()),
            None
        );
        // A length past the cap is refused before its bytes are read.
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        huge.extend_from_slice(&[b'x'; 64]);
        assert_eq!(
            read_attach(&mut Trickle(io::Cursor::new(huge)), far(), &go()),
            None
        );
        // A peer that ends inside the frame.
        let mut cut = encode(&Message::Attach {
            version: PROTOCOL_VERSION,
            cookie: 1,
            stream: 0,
        })
        .unwrap();
        cut.truncate(10);
        assert_eq!(
            read_attach(&mut Trickle(io::Cursor::new(cut)), far(), &go()),
            None
        );
    }
}
