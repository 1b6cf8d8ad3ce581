//! `run --stack smoltcp`: the TCP data connection through a user-space stack on a TUN
//! device. Checks the combinations that cannot work, each with a one-line reason, and
//! builds the connector the engine opens data connections with.

use std::sync::Arc;

use wirebench_engine::UserConnector;
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};
use wirebench_smoltcp::{Congestion, SmolConfig, SmolConnector, DEFAULT_BUFFER_BYTES};

use crate::cli::{ClientArgs, RunArgs, StackArg};

/// The connector for `--stack`, `None` for the kernel's stack; a one-line reason when the
/// test cannot run over the stack asked for.
pub fn connector(
    args: &RunArgs,
    client: &ClientArgs,
    spec: &TestSpec,
) -> Result<Option<Arc<dyn UserConnector>>, String> {
    if client.stack == StackArg::Kernel {
        return Ok(None);
    }
    refuse(args, spec)?;
    let addr = client.stack_addr.as_deref().ok_or(
        "--stack smoltcp needs --stack-addr ADDR/PREFIX (the stack's own address; `wirebench lab --stack smoltcp` gives it)",
    )?;
    let (address, prefix) = SmolConfig::parse_address(addr).map_err(|e| e.to_string())?;
    let congestion = match &spec.congestion {
        Some(cc) => Congestion::parse(cc).map_err(|e| e.to_string())?,
        None => Congestion::Cubic,
    };
    let buffer_bytes = match client.stack_buffer {
        None => DEFAULT_BUFFER_BYTES,
        Some(b) if (4096..=(64 << 20)).contains(&b) => b as usize,
        Some(b) => return Err(format!("--stack-buffer {b}: give 4K to 64M")),
    };
    Ok(Some(Arc::new(SmolConnector(SmolConfig {
        device: client.stack_device.clone(),
        address,
        prefix,
        buffer_bytes,
        congestion,
        // The receiver drains for --drain after the test: the sender's stack waits as long
        // for the rest of its buffer to be taken, not longer.
        linger: std::time::Duration::from_nanos(spec.drain_ns)
            .max(std::time::Duration::from_secs(1)),
    }))))
}

/// What smoltcp cannot carry here, each with why.
fn refuse(args: &RunArgs, spec: &TestSpec) -> Result<(), String> {
    if args.host.is_none() {
        return Err("--stack smoltcp needs a HOST: the in-process server is on loopback, which the TUN device does not reach".into());
    }
    if args.iperf3.is_some() {
        return Err(
            "--stack smoltcp is for wirebench servers; --iperf3 uses the kernel's sockets".into(),
        );
    }
    if spec.protocol == Protocol::Udp {
        return Err("--stack smoltcp carries TCP only (UDP's GSO, GRO and batched calls are the kernel's): drop --udp or --stack".into());
    }
    if spec.zerocopy {
        return Err("--zerocopy is MSG_ZEROCOPY, a kernel socket feature: smoltcp copies into its own buffers".into());
    }
    if spec.streams > 1 || spec.direction == Direction::Bidir {
        return Err("--stack smoltcp opens one data connection (one stack on one TUN device): use -P 1 without --bidir".into());
    }
    if spec.mechanism == Mechanism::Crr {
        return Err("--mode crr opens a connection per transaction on the kernel's stack: use --mode rr over smoltcp".into());
    }
    Ok(())
}
