//! `--stack smoltcp`: a test's TCP data connection through a user-space stack on a TUN
//! device, for `run` (the client's connection) and `serve` (each test's, on the server's
//! side). Checks the combinations that cannot work, each with a one-line reason, and builds
//! what the engine opens or takes data connections with.

use std::sync::Arc;

use wirebench_engine::{UserConnector, UserListener};
use wirebench_proto::spec::TestSpec;
use wirebench_smoltcp::{SmolConfig, SmolConnector, SmolListener, DEFAULT_BUFFER_BYTES};

use crate::cli::{ClientArgs, RunArgs, ServeArgs, StackArg, StackArgs};

/// The connector for `run --stack`, `None` for the kernel's stack; a one-line reason when
/// the test cannot run over the stack asked for.
pub fn connector(
    args: &RunArgs,
    client: &ClientArgs,
    spec: &TestSpec,
) -> Result<Option<Arc<dyn UserConnector>>, String> {
    if client.stack.stack == StackArg::Kernel {
        return kernel(&client.stack, false).map(|()| None);
    }
    if args.host.is_none() {
        return Err("--stack smoltcp needs a HOST: the in-process server is on loopback, which the TUN device does not reach".into());
    }
    if args.iperf3.is_some() {
        return Err(
            "--stack smoltcp is for wirebench servers; --iperf3 uses the kernel's sockets".into(),
        );
    }
    let congestion = wirebench_smoltcp::check(spec).map_err(|e| format!("--stack smoltcp: {e}"))?;
    let mut config = settings(&client.stack, "wirebench lab --stack smoltcp")?;
    // Before any connection: a mistyped device is said now, in one line.
    wirebench_smoltcp::probe(&config.device, "wirebench lab --stack smoltcp")
        .map_err(|e| e.to_string())?;
    config.congestion = congestion;
    config.linger = wirebench_smoltcp::linger(spec);
    Ok(Some(Arc::new(SmolConnector(config))))
}

/// The listener for `serve --stack`, `None` for the kernel's stack.
pub fn listener(serve: &ServeArgs) -> Result<Option<Arc<dyn UserListener>>, String> {
    if serve.stack.stack == StackArg::Kernel {
        return kernel(&serve.stack, serve.stack_port.is_some()).map(|()| None);
    }
    if serve.iperf3_port.is_some() && serve.iperf3_port == serve.stack_port {
        return Err("--stack-port and --iperf3-port are the same port: give each its own".into());
    }
    let port = match (serve.stack_port, serve.port) {
        (Some(p), _) if p != 0 && p != serve.port => p,
        (Some(p), _) => {
            return Err(format!(
                "--stack-port {p}: give a port of its own (not 0, not --port's), which the host forwards to the stack"
            ))
        }
        (None, 0) => {
            return Err("--port 0 leaves the stack's port unknown: give --stack-port".into())
        }
        (None, p) => p.checked_add(1).ok_or("--port 65535: give --stack-port")?,
    };
    let config = settings(&serve.stack, "wirebench lab --server-stack smoltcp")?;
    let listener = SmolListener { config, port };
    // Once at the start: a missing or closed device is said now, not as a timeout per test.
    wirebench_smoltcp::probe(
        &listener.config.device,
        "wirebench lab --server-stack smoltcp",
    )
    .map_err(|e| e.to_string())?;
    Ok(Some(Arc::new(listener)))
}

/// The kernel's stack: a user-space stack's settings given without it are a mistake.
fn kernel(stack: &StackArgs, port: bool) -> Result<(), String> {
    let given: Vec<&str> = [
        (stack.stack_addr.is_some(), "--stack-addr"),
        (stack.stack_buffer.is_some(), "--stack-buffer"),
        (port, "--stack-port"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    match given.as_slice() {
        [] => Ok(()),
        flags => Err(format!(
            "{} only with --stack smoltcp (a user-space stack's settings): add it, or drop them",
            flags.join(", ")
        )),
    }
}

/// The stack's device, address and buffers from the flags (congestion control and linger
/// come from each test).
fn settings(stack: &StackArgs, maker: &str) -> Result<SmolConfig, String> {
    let addr = stack.stack_addr.as_deref().ok_or(format!(
        "--stack smoltcp needs --stack-addr ADDR/PREFIX (the stack's own address; `{maker}` gives it)"
    ))?;
    let (address, prefix) = SmolConfig::parse_address(addr).map_err(|e| e.to_string())?;
    let buffer_bytes = match stack.stack_buffer {
        None => DEFAULT_BUFFER_BYTES,
        Some(b) if (4096..=(64 << 20)).contains(&b) => b as usize,
        Some(b) => return Err(format!("--stack-buffer {b}: give 4K to 64M")),
    };
    Ok(SmolConfig {
        device: stack.stack_device.clone(),
        address,
        prefix,
        buffer_bytes,
        congestion: wirebench_smoltcp::Congestion::Cubic,
        linger: wirebench_smoltcp::DEFAULT_LINGER,
    })
}
