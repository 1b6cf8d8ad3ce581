//! The message headers of `sendmmsg(2)`/`recvmmsg(2)`: [`BATCH`] `mmsghdr`s, each with its
//! iovec and control buffer, made once and pointed at the caller's buffers before each
//! call. Sending and receiving set them up the same way, here.
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use super::cmsg;

/// Messages per sendmmsg/recvmmsg call.
pub const BATCH: usize = 32;

/// [`BATCH`] message headers with their iovecs and control buffers.
pub(super) struct Mmsgs {
    hdrs: Box<[libc::mmsghdr]>,
    iovs: Box<[libc::iovec]>,
    cmsgs: Box<[u64]>,
    /// u64 words of control buffer per message.
    words: usize,
}

impl Mmsgs {
    /// Empty headers: null pointers, zero lengths.
    pub(super) fn new() -> Self {
        let words = cmsg::int_space_words();
        Self {
            // SAFETY: mmsghdr is a plain C struct of integers and raw pointers, for which
            // all-zero bytes are a valid value ("no message").
            hdrs: (0..BATCH).map(|_| unsafe { mem::zeroed() }).collect(),
            iovs: (0..BATCH)
                .map(|_| libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                })
                .collect(),
            cmsgs: vec![0u64; BATCH * words].into_boxed_slice(),
            words,
        }
    }

    /// Points message `m` at `buf` (one datagram, or a GSO/GRO batch of them) for the next
    /// call, with its control buffer when `control` is set (to receive one, or to write one
    /// with [`Self::set_segment`]) and none otherwise.
    #[inline]
    pub(super) fn point(&mut self, m: usize, buf: &mut [u8], control: bool) {
        let iov = &mut self.iovs[m];
        iov.iov_base = buf.as_mut_ptr().cast();
        iov.iov_len = buf.len();
        let h = &mut self.hdrs[m];
        h.msg_hdr.msg_name = std::ptr::null_mut();
        h.msg_hdr.msg_namelen = 0;
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_flags = 0;
        h.msg_len = 0;
        if control {
            let words = self.words;
            h.msg_hdr.msg_control = self.cmsgs[m * words..(m + 1) * words].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = words * 8;
        } else {
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
        }
    }

    /// Asks the kernel to cut message `m` (pointed with its control buffer) into datagrams
    /// of `seg` bytes: UDP GSO's `UDP_SEGMENT`.
    #[inline]
    pub(super) fn set_segment(&mut self, m: usize, seg: u16) {
        let words = self.words;
        cmsg::put_u16(
            &mut self.hdrs[m].msg_hdr,
            words,
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            seg,
        );
    }

    /// Sends messages `0..n` (pointed since the buffers last changed) on the connected
    /// `sock`; returns how many the kernel took.
    pub(super) fn send(&mut self, sock: &UdpSocket, n: usize) -> io::Result<usize> {
        let n = n.min(BATCH);
        // SAFETY: the first `n` headers point at iovecs and control buffers owned by `self`
        // and at the caller's buffers, pointed by `point` just before this call and alive
        // during it; the socket is connected, so no address is needed.
        let rc = unsafe { libc::sendmmsg(sock.as_raw_fd(), self.hdrs.as_mut_ptr(), n as u32, 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc as usize)
    }

    /// Receives at least one and at most `n` (1 to [`BATCH`]) messages into the buffers the
    /// first `n` headers were pointed at (`MSG_WAITFORONE`: waits for the first as long as
    /// the socket's receive timeout lets it, then takes what is queued); returns how many.
    pub(super) fn recv(&mut self, sock: &UdpSocket, n: usize) -> io::Result<usize> {
        let n = n.clamp(1, BATCH);
        // SAFETY: every header points at an iovec over its own buffer and at its own control
        // buffer, pointed by `point` just before this call and alive during it.
        let rc = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((rc as usize).min(n))
    }

    /// Message `m` of the last receive: its length, and the header whose control messages
    /// the kernel wrote.
    #[inline]
    pub(super) fn received(&self, m: usize) -> (usize, &libc::msghdr) {
        let h = &self.hdrs[m];
        (h.msg_len as usize, &h.msg_hdr)
    }
}
