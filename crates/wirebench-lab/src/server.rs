//! Servers inside a lab's hosts: `wirebench serve`, which says when it listens, or any
//! program (`lab --serve 'iperf3 -s'`), which is ready once a socket of its host listens.

use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::topo::Lab;

/// How long a server program may take to listen.
const LISTEN_DEADLINE: Duration = Duration::from_secs(10);

/// A server that could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The program did not start.
    #[error("starting {program} in the server host: {source}")]
    Spawn {
        /// What was started.
        program: String,
        /// Why it failed.
        source: io::Error,
    },
    /// `wirebench serve` ended or said something else than that it listens.
    #[error("the server in the lab did not start")]
    NotListening,
    /// A server program ended before any socket of its host listened.
    #[error("{program} ended before it listened ({status})")]
    Ended {
        /// The program.
        program: String,
        /// How it ended.
        status: ExitStatus,
    },
    /// A server program did not listen in time.
    #[error("{program} did not listen within {} s", LISTEN_DEADLINE.as_secs())]
    Timeout {
        /// The program.
        program: String,
    },
    /// Reading the host's sockets or the server's output failed.
    #[error("waiting for the server: {0}")]
    Io(#[from] io::Error),
}

/// A server running in a lab host, ended (by its id) when dropped.
#[derive(Debug)]
pub struct LabServer {
    child: Child,
    /// `wirebench serve`'s QUIC key, as its banner names it (`sha256:...`).
    pub quic_key: Option<String>,
}

impl LabServer {
    /// Starts `wirebench serve` (the executable `exe`) in `node`, bound to `addr`, and
    /// returns once it says it listens.
    ///
    /// # Errors
    ///
    /// When it cannot be started or ends before it listens.
    pub fn wirebench(
        lab: &Lab,
        exe: &Path,
        node: usize,
        addr: &str,
        extra: &[String],
    ) -> Result<Self, ServerError> {
        let mut c = lab.command(node, exe);
        // The lab's own server, in a namespace only this experiment reaches: the limits a
        // public server needs (short timings, few slots per address) would refuse the
        // scenarios' long drains and concurrent cross traffic.
        c.args(["serve", "--quiet", "--bind", addr])
            .args(["--max-tests", "256", "--max-tests-per-client", "256"])
            .args(["--max-duration", "24h", "--max-timing", "1h"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // A group of its own: a terminal's Ctrl-C is for the lab, which stops the test
            // and then the server; the server never sees it mid-test.
            .process_group(0);
        let child = c.spawn().map_err(|source| ServerError::Spawn {
            program: "wirebench serve".into(),
            source,
        })?;
        let mut server = Self {
            child,
            quic_key: None,
        };
        let stdout = server
            .child
            .stdout
            .take()
            .ok_or(ServerError::NotListening)?;
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        lines.read_line(&mut first)?;
        if !first.contains("listening") {
            return Err(ServerError::NotListening);
        }
        server.quic_key = first
            .split_once("QUIC, key ")
            .map(|(_, k)| k.trim_end().trim_end_matches(')').to_owned());
        // Keep reading, so that the server never blocks on a full pipe.
        std::thread::spawn(move || io::copy(&mut lines, &mut io::sink()));
        Ok(server)
    }

    /// Starts `words` (a program and its arguments) in `node` and returns once a TCP socket
    /// listens or a UDP socket is bound in that host: the program is then ready, whatever
    /// it prints. Nothing else runs in a lab host, so any such socket is the server's.
    ///
    /// # Errors
    ///
    /// When it cannot be started, ends first, or does not listen within 10 s.
    pub fn program(lab: &Lab, node: usize, words: &[&str]) -> Result<Self, ServerError> {
        let (prog, args) = words.split_first().ok_or(ServerError::NotListening)?;
        let mut c = lab.command(node, prog);
        c.args(args).stdin(Stdio::null()).process_group(0);
        let child = c.spawn().map_err(|source| ServerError::Spawn {
            program: (*prog).to_owned(),
            source,
        })?;
        let mut server = Self {
            child,
            quic_key: None,
        };
        let until = Instant::now() + LISTEN_DEADLINE;
        loop {
            if let Some(status) = server.child.try_wait()? {
                return Err(ServerError::Ended {
                    program: (*prog).to_owned(),
                    status,
                });
            }
            if lab.netns(node).run(host_listens)? {
                return Ok(server);
            }
            if Instant::now() > until {
                return Err(ServerError::Timeout {
                    program: (*prog).to_owned(),
                });
            }
            // Polled: the kernel offers no wait for "a socket in this namespace listens".
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for LabServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a TCP socket listens or a UDP socket is bound in the calling thread's network
/// namespace (`/proc/thread-self/net/*`: the thread's namespace, not the process's).
fn host_listens() -> io::Result<bool> {
    // In /proc/net/tcp, `st` (the 4th column) 0A is TCP_LISTEN.
    for (file, listening) in [
        ("tcp", Some("0A")),
        ("tcp6", Some("0A")),
        ("udp", None),
        ("udp6", None),
    ] {
        let text = match std::fs::read_to_string(format!("/proc/thread-self/net/{file}")) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let found = text.lines().skip(1).any(|l| match listening {
            Some(st) => l.split_whitespace().nth(3) == Some(st),
            None => true,
        });
        if found {
            return Ok(true);
        }
    }
    Ok(false)
}
