//! Control messages (`cmsg(3)`): writing one into a control buffer, and walking the ones
//! the kernel wrote into one.
//!
//! Both work on byte slices, never on a `msghdr`'s pointers: the walk is given exactly the
//! `msg_controllen` bytes the kernel says it wrote (clamped by the caller to the buffer it
//! lent), and it never reads past them, whatever a `cmsg_len` inside claims. A message whose
//! `cmsg_len` runs past the end (the kernel cut it: `MSG_CTRUNC`) gives its data up to the
//! end and ends the walk; one whose `cmsg_len` is shorter than a header ends it too, as
//! glibc's `CMSG_NXTHDR` does.
#![allow(unsafe_code)]

use std::mem;

/// Bytes of a `cmsghdr`.
const HDR: usize = mem::size_of::<libc::cmsghdr>();

/// Rounds `len` up to the alignment of control messages: Linux's `CMSG_ALIGN`, the size
/// of a `size_t` (glibc and musl alike).
const fn align(len: usize) -> usize {
    let a = mem::size_of::<usize>();
    (len + a - 1) & !(a - 1)
}

/// `CMSG_LEN`: a control message's `cmsg_len` for `data` bytes of data.
pub const fn len(data: usize) -> usize {
    align(HDR) + data
}

/// `CMSG_SPACE`: the bytes a control message with `data` bytes of data takes in a buffer,
/// padding included.
pub const fn space(data: usize) -> usize {
    align(HDR) + align(data)
}

/// A control buffer of `N` bytes, aligned for the `cmsghdr`s in it (as the kernel and
/// `CMSG_FIRSTHDR` expect of `msg_control`).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct Buf<const N: usize>(pub [u8; N]);

impl<const N: usize> Default for Buf<N> {
    fn default() -> Self {
        Self([0; N])
    }
}

/// One control message: its level, type and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cmsg<'a> {
    /// `cmsg_level` (`SOL_SOCKET`, `SOL_UDP`, ...).
    pub level: libc::c_int,
    /// `cmsg_type` (`SCM_TIMESTAMPNS`, `UDP_GRO`, ...).
    pub kind: libc::c_int,
    /// The data, cut at the buffer's end if the message was truncated.
    pub data: &'a [u8],
}

impl Cmsg<'_> {
    /// The data as a C int, when it holds one.
    pub fn int(&self) -> Option<libc::c_int> {
        Some(libc::c_int::from_ne_bytes(
            self.data.get(..4)?.try_into().ok()?,
        ))
    }

    /// The data as a `timespec` (as `SCM_TIMESTAMPNS` carries), in ns since the Unix epoch;
    /// `None` when it is too short or before the epoch.
    pub fn timespec_ns(&self) -> Option<u64> {
        let bytes = self.data.get(..mem::size_of::<libc::timespec>())?;
        // SAFETY: `bytes` holds size_of::<timespec>() readable bytes (checked just above);
        // timespec is two integers, valid for any bit pattern; read_unaligned has no
        // alignment requirement.
        let ts: libc::timespec = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let sec = u64::try_from(ts.tv_sec).ok()?;
        let nsec = u64::try_from(ts.tv_nsec).ok()?;
        Some(sec.saturating_mul(1_000_000_000).saturating_add(nsec))
    }
}

/// The control messages in `buf`: the `msg_controllen` bytes a `recvmsg`/`recvmmsg` wrote.
pub fn walk(buf: &[u8]) -> Walk<'_> {
    Walk { buf, at: 0 }
}

/// An iterator over the control messages of a buffer (see [`walk`]).
#[derive(Debug, Clone)]
pub struct Walk<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Walk<'a> {
    type Item = Cmsg<'a>;

    fn next(&mut self) -> Option<Cmsg<'a>> {
        let rest = self.buf.get(self.at..)?;
        let head = rest.get(..HDR)?;
        // SAFETY: `head` holds HDR = size_of::<cmsghdr>() readable bytes (the `get` above
        // returned them); cmsghdr is integers only, valid for any bit pattern;
        // read_unaligned has no alignment requirement.
        let h: libc::cmsghdr = unsafe { std::ptr::read_unaligned(head.as_ptr().cast()) };
        // A size_t in glibc, a socklen_t in musl: either fits a usize.
        #[allow(clippy::unnecessary_cast)]
        let claimed = h.cmsg_len as usize;
        if claimed < HDR {
            // Malformed: it could not even hold its header. Nothing after it can be found.
            self.at = self.buf.len();
            return None;
        }
        let data_start = align(HDR).min(rest.len());
        let data_end = claimed.min(rest.len()).max(data_start);
        let data = &rest[data_start..data_end];
        // The next header, if any, starts after this one's padding; a message that ran
        // past the end ends the walk.
        self.at = if claimed > rest.len() {
            self.buf.len()
        } else {
            self.at.saturating_add(align(claimed))
        };
        Some(Cmsg {
            level: h.cmsg_level,
            kind: h.cmsg_type,
            data,
        })
    }
}

/// Writes one control message (`level`, `kind`, `data`) at the start of `buf` and returns
/// the bytes it takes ([`space`] of its data, the `msg_controllen` to pass), or `None` when
/// `buf` is too small for it.
pub fn put(buf: &mut [u8], level: libc::c_int, kind: libc::c_int, data: &[u8]) -> Option<usize> {
    let total = space(data.len());
    let out = buf.get_mut(..total)?;
    out.fill(0);
    // SAFETY: all-zero bytes are a valid cmsghdr (integers, and on musl padding).
    let mut h: libc::cmsghdr = unsafe { mem::zeroed() };
    h.cmsg_len = len(data.len()) as _;
    h.cmsg_level = level;
    h.cmsg_type = kind;
    // SAFETY: `out` holds `total` >= HDR writable bytes (space() includes the header);
    // write_unaligned has no alignment requirement.
    unsafe { std::ptr::write_unaligned(out.as_mut_ptr().cast::<libc::cmsghdr>(), h) };
    out[align(HDR)..align(HDR) + data.len()].copy_from_slice(data);
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_agree_with_libc() {
        for n in [0usize, 1, 2, 4, 8, 16, 17] {
            // SAFETY: CMSG_LEN/CMSG_SPACE only compute sizes.
            let (l, s) = unsafe { (libc::CMSG_LEN(n as u32), libc::CMSG_SPACE(n as u32)) };
            assert_eq!((len(n), space(n)), (l as usize, s as usize), "{n} bytes");
        }
    }

    fn two_messages() -> Buf<64> {
        let mut b = Buf::<64>::default();
        let first = put(
            &mut b.0,
            libc::SOL_UDP,
            libc::UDP_GRO,
            &1400i32.to_ne_bytes(),
        )
        .expect("room");
        put(&mut b.0[first..], libc::SOL_SOCKET, 99, &[1, 2, 3]).expect("room");
        b
    }

    #[test]
    fn walks_what_put_wrote() {
        let b = two_messages();
        let used = space(4) + space(3);
        let got: Vec<_> = walk(&b.0[..used]).collect();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].level, got[0].kind), (libc::SOL_UDP, libc::UDP_GRO));
        assert_eq!(got[0].int(), Some(1400));
        assert_eq!(
            (got[1].level, got[1].kind, got[1].data),
            (libc::SOL_SOCKET, 99, &[1, 2, 3][..])
        );
    }

    #[test]
    fn zero_controllen_has_no_messages() {
        let b = two_messages();
        assert_eq!(walk(&b.0[..0]).count(), 0);
        assert_eq!(walk(&[]).count(), 0);
        // Less than a header: nothing either.
        assert_eq!(walk(&b.0[..HDR - 1]).count(), 0);
    }

    #[test]
    fn a_cmsg_len_past_the_end_is_cut_at_the_end_and_ends_the_walk() {
        let mut b = Buf::<64>::default();
        put(&mut b.0, libc::SOL_SOCKET, 1, &[7; 8]).expect("room");
        // Claims 1000 bytes of data in a 24-byte control length.
        // SAFETY: the buffer holds a cmsghdr at its start (written by put).
        unsafe {
            let h = b.0.as_mut_ptr().cast::<libc::cmsghdr>();
            (*h).cmsg_len = len(1000) as _;
        }
        let controllen = space(8);
        let got: Vec<_> = walk(&b.0[..controllen]).collect();
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].data,
            &[7; 8][..],
            "cut at msg_controllen, not read past"
        );
        // Cut shorter still (MSG_CTRUNC mid-data): the data ends at the buffer's end.
        let got: Vec<_> = walk(&b.0[..align(HDR) + 3]).collect();
        assert_eq!(got[0].data, &[7, 7, 7][..]);
        assert_eq!(got[0].int(), None, "too short for an int");
        assert_eq!(got[0].timespec_ns(), None);
    }

    #[test]
    fn a_cmsg_len_shorter_than_a_header_ends_the_walk() {
        let mut b = two_messages();
        // SAFETY: the buffer holds a cmsghdr at its start (written by put).
        unsafe {
            let h = b.0.as_mut_ptr().cast::<libc::cmsghdr>();
            (*h).cmsg_len = 3;
        }
        assert_eq!(
            walk(&b.0).count(),
            0,
            "no loop, no read of garbage after it"
        );
    }

    #[test]
    fn an_oversized_second_message_is_cut() {
        let mut b = two_messages();
        let second = space(4);
        // SAFETY: a cmsghdr starts at `second` (written by put), 8-aligned in an 8-aligned
        // buffer.
        unsafe {
            let h = b.0.as_mut_ptr().add(second).cast::<libc::cmsghdr>();
            (*h).cmsg_len = usize::MAX as _;
        }
        let got: Vec<_> = walk(&b.0[..second + space(3)]).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].data.len(), space(3) - align(HDR));
    }

    #[test]
    fn put_refuses_a_buffer_too_small() {
        let mut b = [0u8; 8];
        assert_eq!(put(&mut b, 1, 2, &[0; 4]), None);
    }

    #[test]
    fn a_timespec_reads_as_unix_ns() {
        let ts = libc::timespec {
            tv_sec: 3,
            tv_nsec: 5,
        };
        let mut b = Buf::<64>::default();
        // SAFETY: timespec is plain integers; viewing it as its bytes is sound.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&ts as *const libc::timespec).cast::<u8>(),
                mem::size_of::<libc::timespec>(),
            )
        };
        let n = put(&mut b.0, libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, bytes).expect("room");
        let c = walk(&b.0[..n]).next().expect("one");
        assert_eq!(c.timespec_ns(), Some(3_000_000_005));
    }
}
