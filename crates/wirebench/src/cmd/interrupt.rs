//! The signals that stop a client's test: SIGINT (Ctrl-C), and SIGTERM and SIGHUP, which
//! `timeout`, Slurm, Kubernetes and a closed terminal send. The first of any of them stops
//! the test cleanly (both sides' figures are exchanged and printed, marked interrupted); a
//! second one, half a second or more later, exits at once. One closer to the first is the
//! same request delivered twice (a job manager signals every process of a job, and a lab
//! passes its own signal on to its `run` too), not a second Ctrl-C. The exit code is 128 +
//! the signal's number, as shells report a process the signal ended, so scripts see the
//! same code whether wirebench printed its document first or not.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// A signal this soon after the first is the first one delivered again, not a second.
const SAME_REQUEST: Duration = Duration::from_millis(500);

/// A signal that interrupts a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ctrl-C.
    Int,
    /// `kill`, `timeout`, Slurm, Kubernetes.
    Term,
    /// The terminal closed.
    Hup,
}

impl Signal {
    /// Every signal that interrupts a test, in the order [`Interrupt::signal`] looks.
    const ALL: [Self; 3] = [Self::Int, Self::Term, Self::Hup];

    /// Its number.
    fn number(self) -> i32 {
        match self {
            Self::Int => SIGINT,
            Self::Term => SIGTERM,
            Self::Hup => SIGHUP,
        }
    }

    /// Its name, as the results document and messages spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Int => "SIGINT",
            Self::Term => "SIGTERM",
            Self::Hup => "SIGHUP",
        }
    }

    /// The exit code of a test it interrupted: 128 + its number (130, 143, 129).
    pub fn exit_code(self) -> u8 {
        // SIGINT, SIGTERM and SIGHUP are 2, 15 and 1 on every Unix wirebench runs on.
        u8::try_from(128 + self.number()).unwrap_or(u8::MAX)
    }
}

/// Whether (and by which signal) the user or the system asked the test to stop.
pub struct Interrupt {
    /// Set by any of the signals: what the driver watches.
    any: Arc<AtomicBool>,
    /// One flag per signal, in [`Signal::ALL`]'s order: which it was.
    each: [Arc<AtomicBool>; 3],
}

impl Interrupt {
    /// Installs the handlers: a signal sets the flags, and a thread exits at once, with
    /// that signal's code, on one that comes [`SAME_REQUEST`] or more after the first.
    pub fn install() -> Self {
        let any = Arc::new(AtomicBool::new(false));
        let each = [(); 3].map(|()| Arc::new(AtomicBool::new(false)));
        for (sig, flag) in Signal::ALL.iter().zip(&each) {
            // A handler that cannot be installed leaves that signal's default action, which
            // is what wirebench did before it handled it.
            let _ = signal_hook::flag::register(sig.number(), Arc::clone(flag));
            let _ = signal_hook::flag::register(sig.number(), Arc::clone(&any));
        }
        if let Ok(mut signals) =
            signal_hook::iterator::Signals::new(Signal::ALL.map(Signal::number))
        {
            let _ = std::thread::Builder::new()
                .name("wirebench-signals".into())
                .spawn(move || {
                    let mut first: Option<Instant> = None;
                    for number in signals.forever() {
                        match first {
                            None => first = Some(Instant::now()),
                            Some(t) if t.elapsed() >= SAME_REQUEST => {
                                let code = Signal::ALL
                                    .iter()
                                    .find(|s| s.number() == number)
                                    .map_or(1, |s| s.exit_code());
                                std::process::exit(i32::from(code));
                            }
                            Some(_) => {}
                        }
                    }
                });
        }
        Self { any, each }
    }

    /// The flag the driver watches (set by any of the signals).
    pub fn flag(&self) -> &Arc<AtomicBool> {
        &self.any
    }

    /// Whether a signal came.
    pub fn is_set(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// The signal that came (SIGINT first if several did), or `None`.
    pub fn signal(&self) -> Option<Signal> {
        if !self.is_set() {
            return None;
        }
        Signal::ALL
            .iter()
            .zip(&self.each)
            .find(|(_, f)| f.load(Ordering::Relaxed))
            .map(|(s, _)| *s)
            // The flag can be set an instant before the signal's own flag.
            .or(Some(Signal::Int))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_the_shells() {
        assert_eq!(Signal::Int.exit_code(), 130);
        assert_eq!(Signal::Term.exit_code(), 143);
        assert_eq!(Signal::Hup.exit_code(), 129);
    }
}
