//! A `wirebench serve` whose log (stderr) the test reads.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};

use super::wirebench;

/// A `serve` whose stdout and stderr are kept: the banner lines and the log.
pub struct LoggedServer {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    /// Where its metrics are (`--metrics`), `HOST:PORT`.
    pub metrics: Option<String>,
}

impl LoggedServer {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `serve` on 127.0.0.1 and a free port with `extra` flags.
    pub fn start(extra: &[&str]) -> Self {
        let mut child = wirebench()
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wirebench serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("banner");
        let port = line
            .split_whitespace()
            .nth(4)
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        let metrics = extra.contains(&"--metrics").then(|| {
            let mut m = String::new();
            out.read_line(&mut m).expect("metrics line");
            m.split_whitespace()
                .find(|w| w.starts_with("http://"))
                .unwrap_or_else(|| panic!("no metrics address in {m:?}"))
                .trim_start_matches("http://")
                .trim_end_matches("/metrics")
                .to_string()
        });
        Self {
            child,
            port,
            metrics,
        }
    }

    /// The server's stderr, line by line, from a thread (the log stays readable while
    /// the server runs).
    pub fn stderr_lines(&mut self) -> std::sync::mpsc::Receiver<String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let err = self.child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    }

    /// Ends the server and returns its log.
    pub fn log(mut self) -> String {
        let _ = self.child.kill();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let _ = self.child.wait();
        err
    }
}

impl Drop for LoggedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
