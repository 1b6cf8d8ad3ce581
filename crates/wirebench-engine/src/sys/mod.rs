//! Everything the engine asks of the kernel beyond the standard library, one concern per
//! file: [`busy`] (busy polling), [`clock`] (Unix time, boot id), [`process`] (CPU time,
//! memory, the allocator), [`sockopt`] (socket buffers), [`tcp`] (set-up, TCP_INFO,
//! MSG_ZEROCOPY) and [`udp`] (the batched sends and receives with GSO and GRO: their
//! buffers and fallbacks here, their system calls `wirebench_sys::mmsg`'s, shared with the
//! lab's emulator).
//!
//! The only place in the engine with `unsafe`, each block with the reason it is sound.
//! These calls stay here rather than in `wirebench-sys` because only the engine makes them.

mod busy;
mod clock;
mod process;
mod sockopt;
mod tcp;
pub mod udp;

pub use busy::{busy_poll_setup, recv_nowait, set_busy_poll, wait_readable};
pub use clock::{clock_pair, host_id, same_clock, unix_now_ns};
pub use process::{
    max_rss_kib, release_free_memory, rss_kib, task_cpu_ns, thread_cpu_ns, thread_id,
    tune_allocator,
};
pub(crate) use sockopt::socket_caps;
pub use sockopt::{path_mtu, set_dont_fragment, set_max_pacing_rate};
pub use tcp::{sender_tcp_info, tcp_all_acked, tcp_datapath, tcp_info, SenderTcpInfo, ZeroCopy};
pub use udp::udp_datapath;
