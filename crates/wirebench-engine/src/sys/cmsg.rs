//! Control messages (`cmsg(3)`): writing one into a message's control buffer, and walking
//! the ones the kernel wrote. The pointer arithmetic of `CMSG_*` is here once; callers get
//! the level, type and data bytes.
#![allow(unsafe_code)]

use std::mem;

/// Bytes of control-message space for one int-sized option, in u64 words (the buffers are
/// made of u64 so that the headers in them are aligned).
pub(super) fn int_space_words() -> usize {
    // SAFETY: CMSG_SPACE only computes a size.
    let bytes = unsafe { libc::CMSG_SPACE(mem::size_of::<libc::c_int>() as u32) } as usize;
    bytes.div_ceil(8)
}

/// Writes one control message carrying `value` at `level`/`kind` as the only one of `msg`,
/// whose `msg_control` points at `words` u64 words (at least [`int_space_words`]), and sets
/// `msg_controllen` to its size.
#[inline]
pub(super) fn put_u16(msg: &mut libc::msghdr, words: usize, level: i32, kind: i32, value: u16) {
    msg.msg_controllen = words * 8;
    // SAFETY: msg_control points at `words * 8` bytes of 8-aligned, writable memory, enough
    // for one cmsghdr with an int (CMSG_SPACE of an int), which holds a u16; so CMSG_FIRSTHDR
    // returns a valid header pointer and CMSG_DATA points inside the buffer.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(msg);
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), value);
        msg.msg_controllen = libc::CMSG_SPACE(mem::size_of::<u16>() as u32) as _;
    }
}

/// Calls `f(level, type, data)` for each control message the kernel wrote into `msg`'s
/// control buffer (after a `recvmsg`/`recvmmsg` set `msg_controllen`). The data is cut at
/// the buffer's end, so a truncated message (MSG_CTRUNC) gives short data, never a read past
/// it.
#[inline]
pub(super) fn for_each(msg: &libc::msghdr, mut f: impl FnMut(i32, i32, &[u8])) {
    if msg.msg_control.is_null() {
        return;
    }
    let end = (msg.msg_control as usize).saturating_add(msg.msg_controllen);
    // SAFETY: msg_control points at a buffer of at least msg_controllen bytes that the
    // kernel wrote control messages into; CMSG_FIRSTHDR/NXTHDR return headers within
    // msg_controllen (or null), and each data slice below stays within the buffer.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let claimed = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            let len = claimed.min(end.saturating_sub(data as usize));
            f(
                (*c).cmsg_level,
                (*c).cmsg_type,
                std::slice::from_raw_parts(data, len),
            );
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

/// The first four bytes of control-message data as a C int, if there are four.
#[inline]
pub(super) fn int(data: &[u8]) -> Option<libc::c_int> {
    Some(libc::c_int::from_ne_bytes(data.get(..4)?.try_into().ok()?))
}
