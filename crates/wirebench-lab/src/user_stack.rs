//! Hosts whose test traffic goes through a user-space TCP/IP stack (smoltcp) instead of
//! the kernel's: `--stack smoltcp`, `stack = "smoltcp"` in a scenario.
//!
//! The stack runs inside `wirebench run` (crate `wirebench-smoltcp`) on a TUN device of the
//! host. The lab makes that device before the test: persistent, so that the test attaches
//! to it by name, up, with a route to the stack's own address (the host's address + 100 on
//! the same subnet). The host's kernel forwards between the device and the host's link and
//! translates the stack's address to the host's on the way out (source NAT, nftables), so
//! that the server sees the data connection come from the same address as the control
//! connection, which stays on the kernel's stack (a server takes data connections only
//! from the address its test's control connection came from). Translation rewrites
//! addresses and ports only: the TCP that the server talks to is smoltcp's.
//!
//! A server host's stack runs inside `wirebench serve --stack smoltcp`, which tells each
//! client to make its data connection to a port of its own (`--stack-port`); the host's
//! kernel sends TCP to that port on to the stack (destination NAT) and the replies back
//! with the host's address. Its control port stays the kernel's.
//!
//! The NAT rules are given to `nft`, not built over netlink as the lab's other steps are:
//! nftables' netlink messages are a language of their own, and two rules do not earn a
//! codec for them. Without `nft`, `--stack smoltcp` says so.

use std::io;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::netns::NetNs;
use crate::rtnl::Rtnl;
use crate::sys;

/// Which TCP/IP stack a host's test traffic uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stack {
    /// The kernel's (Linux).
    #[default]
    Kernel,
    /// smoltcp, in user space, on a TUN device.
    Smoltcp,
}

impl Stack {
    /// Its name in flags and files.
    pub fn name(self) -> &'static str {
        match self {
            Stack::Kernel => "kernel",
            Stack::Smoltcp => "smoltcp",
        }
    }
}

impl std::str::FromStr for Stack {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "kernel" | "linux" => Ok(Stack::Kernel),
            "smoltcp" => Ok(Stack::Smoltcp),
            other => Err(format!(
                "stack {other:?}: the lab has kernel (Linux's) and smoltcp"
            )),
        }
    }
}

/// The TUN device of a host's first user-space stack; the next are `wbsmol1`, ...
pub const DEVICE: &str = "wbsmol0";

/// Where a host's user-space stack sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackSite {
    /// The TUN device.
    pub device: String,
    /// The stack's address.
    pub address: Ipv4Addr,
    /// Its subnet's prefix length (the host's link's).
    pub prefix: u8,
}

impl StackSite {
    /// The `wirebench run` options that put its data connection on this stack.
    pub fn run_args(&self, stack: Stack) -> Vec<String> {
        vec![
            "--stack".into(),
            stack.name().into(),
            "--stack-device".into(),
            self.device.clone(),
            "--stack-addr".into(),
            format!("{}/{}", self.address, self.prefix),
        ]
    }

    /// The `wirebench serve` options that take each test's data connection on this stack,
    /// at `port` (see [`prepare_server`]).
    pub fn serve_args(&self, stack: Stack, port: u16) -> Vec<String> {
        let mut args = self.run_args(stack);
        args.extend(["--stack-port".into(), port.to_string()]);
        args
    }
}

/// The address of stack `n` (0, 1, ...: one per test) of a host at `host`: the same
/// subnet, + 100 + n.
///
/// # Errors
///
/// When that is past the subnet's end (the lab's hosts are .1 and .2).
pub fn stack_address(host: Ipv4Addr, n: u8) -> io::Result<Ipv4Addr> {
    let o = host.octets();
    let last = o[3]
        .checked_add(100)
        .and_then(|l| l.checked_add(n))
        .filter(|&l| l < 255)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no room for a user-space stack's address next to {host}"),
            )
        })?;
    Ok(Ipv4Addr::new(o[0], o[1], o[2], last))
}

/// Makes the TUN device for user-space stack `n` (one per test: a TUN device takes one
/// stack) in `ns`, whose host has address `host` (/24), routes the stack's address to it,
/// and lets the kernel forward and translate it to the host's.
///
/// # Errors
///
/// No TUN (the message says what to do), or a refused netlink, sysctl or nft step.
pub fn prepare(ns: &NetNs, host: Ipv4Addr, n: u8) -> io::Result<StackSite> {
    let address = stack_address(host, n)?;
    let device = format!("wbsmol{n}");
    let dev = device.as_str();
    ns.run(|| {
        sys::tun_persist(dev).map_err(|e| {
            let hint = match e.kind() {
                io::ErrorKind::NotFound => "load the tun module (modprobe tun)",
                io::ErrorKind::PermissionDenied => {
                    "/dev/net/tun is not open to this user: run as root, or give the user \
                     access to /dev/net/tun (the lab's own user namespace needs no more)"
                }
                _ => "a user-space stack needs a TUN device",
            };
            io::Error::new(
                e.kind(),
                format!("making TUN device {dev} for --stack smoltcp: {e} ({hint})"),
            )
        })?;
        let index = sys::if_index(dev)?;
        let mut nl = Rtnl::open()?;
        nl.set_up(index)?;
        nl.add_device_route(address, 32, index)?;
        Ok(())
    })?;
    ns.sysctl("net/ipv4/ip_forward", "1")?;
    nft(ns, &nat_rules(address, host))?;
    // Packets from the stack arrive on the device with its address as source: the reverse
    // path is that device, but strict filtering is off so that nothing depends on it.
    ns.sysctl("net/ipv4/conf/all/rp_filter", "0")?;
    ns.sysctl(&format!("net/ipv4/conf/{dev}/rp_filter"), "0")?;
    Ok(StackSite {
        device,
        address,
        prefix: 24,
    })
}

/// [`prepare`] for a server's stack: besides, TCP connections to the host's `port` go to the
/// stack (destination NAT), so that a client reaches the stack at the host's address, as a
/// server's `serve --stack-port` tells it to. The control port stays the kernel's.
///
/// # Errors
///
/// As [`prepare`].
pub fn prepare_server(ns: &NetNs, host: Ipv4Addr, n: u8, port: u16) -> io::Result<StackSite> {
    let site = prepare(ns, host, n)?;
    nft(ns, &forward_rules(host, port, site.address))?;
    Ok(site)
}

/// The nftables rule that sends TCP to the host's `port` on to the stack.
fn forward_rules(host: Ipv4Addr, port: u16, stack: Ipv4Addr) -> String {
    format!(
        "add table ip wirebench_stack\n\
         add chain ip wirebench_stack in {{ type nat hook prerouting priority dstnat; policy accept; }}\n\
         add rule ip wirebench_stack in ip daddr {host} tcp dport {port} dnat to {stack}\n"
    )
}

/// The nftables rule that gives the stack's packets the host's address on the way out.
fn nat_rules(stack: Ipv4Addr, host: Ipv4Addr) -> String {
    // `add` twice is fine: the table and chain are made once, a rule per stack.
    format!(
        "add table ip wirebench_stack\n\
         add chain ip wirebench_stack out {{ type nat hook postrouting priority srcnat; policy accept; }}\n\
         add rule ip wirebench_stack out ip saddr {stack} snat to {host}\n"
    )
}

/// Gives `rules` to `nft` in `ns`.
fn nft(ns: &NetNs, rules: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::fd::{AsFd, AsRawFd};
    let mut cmd = std::process::Command::new("nft");
    cmd.args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    sys::run_in(&mut cmd, ns.as_fd().as_raw_fd());
    let nft_err = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "running nft for --stack smoltcp's address translation: {e} (install nftables)"
            ),
        )
    };
    let mut child = cmd.spawn().map_err(nft_err)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(rules.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "nft refused --stack smoltcp's address translation: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_sits_beside_its_host() {
        assert_eq!(
            stack_address(Ipv4Addr::new(10, 77, 0, 1), 0).ok(),
            Some(Ipv4Addr::new(10, 77, 0, 101))
        );
        assert_eq!(
            stack_address(Ipv4Addr::new(10, 77, 0, 2), 3).ok(),
            Some(Ipv4Addr::new(10, 77, 0, 105))
        );
        assert!(stack_address(Ipv4Addr::new(10, 77, 0, 200), 0).is_err());
        assert_eq!("smoltcp".parse::<Stack>(), Ok(Stack::Smoltcp));
        assert!("lwip".parse::<Stack>().is_err());
        let site = StackSite {
            device: DEVICE.into(),
            address: Ipv4Addr::new(10, 77, 0, 101),
            prefix: 24,
        };
        assert_eq!(
            site.run_args(Stack::Smoltcp).join(" "),
            "--stack smoltcp --stack-device wbsmol0 --stack-addr 10.77.0.101/24"
        );
        assert_eq!(
            site.serve_args(Stack::Smoltcp, 5301).join(" "),
            "--stack smoltcp --stack-device wbsmol0 --stack-addr 10.77.0.101/24 --stack-port 5301"
        );
        assert!(forward_rules(
            Ipv4Addr::new(10, 77, 0, 2),
            5301,
            Ipv4Addr::new(10, 77, 0, 102)
        )
        .contains("ip daddr 10.77.0.2 tcp dport 5301 dnat to 10.77.0.102"));
    }
}
