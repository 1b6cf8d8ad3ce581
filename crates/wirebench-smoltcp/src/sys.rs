//! The one `unsafe` of this crate: moving smoltcp's TUN device to another thread.
#![allow(unsafe_code)]

use smoltcp::phy::TunTapInterface;

/// smoltcp's TUN device, which may move to another thread with the stream that owns it.
///
/// `TunTapInterface` holds its file descriptor in an `Rc` (so that the transmit tokens it
/// hands out can reach it), which makes it `!Send`. The tokens live only inside one
/// `Interface::poll` call, so outside such a call the `Rc` has exactly one owner: this
/// value. Moving the sole owner of an `Rc` to another thread is sound; sharing it would not
/// be, and this type is not `Sync` and never cloned.
#[derive(Debug)]
pub(crate) struct Tun(pub(crate) TunTapInterface);

// SAFETY: see the type's comment: every clone of the inner `Rc` is dropped before `poll`
// returns, so the value moved is the only owner and no two threads touch the count.
unsafe impl Send for Tun {}
