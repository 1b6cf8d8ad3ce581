//! Socket options: the socket buffers asked for and granted.

use socket2::SockRef;

/// Socket buffer size asked for on data sockets. The kernel caps it at
/// `net.core.{r,w}mem_max`; the granted size is read back and recorded.
pub const DATA_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// Asks for large socket buffers and returns the (send, receive) sizes granted.
pub fn size_buffers(sock: SockRef<'_>) -> (u64, u64) {
    // A refusal here is not fatal: the granted size, whatever it is, goes into the results.
    let _ = sock.set_send_buffer_size(DATA_BUFFER_BYTES);
    let _ = sock.set_recv_buffer_size(DATA_BUFFER_BYTES);
    (
        sock.send_buffer_size().unwrap_or(0) as u64,
        sock.recv_buffer_size().unwrap_or(0) as u64,
    )
}
