//! When each path runs, sans-IO: the agent passes the time in (ms on its own monotonic
//! clock), starts what [`Schedule::poll`] says, and tells how each run ended.
//!
//! Each path runs once a round, `every` apart. A round's run starts at a time drawn at
//! random in its first half-slip (so that agents do not synchronise), and may start as late
//! as the round's time plus its slip: a throughput run waits while another throughput run
//! involves either of its hosts, and a server that says it is busy is asked again a little
//! later. A round whose run did not start within its slip is *missed*, with why: every round
//! is either a run or a miss, and the archive has a row for each.

use std::time::Duration;

use crate::config::{Kind, Mesh, Path};

/// How long after a busy answer the host is asked again (at most; less when the slip
/// ends sooner).
pub const BUSY_RETRY: Duration = Duration::from_millis(500);

/// A run to start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// The run's number, for [`Schedule::finished`].
    pub id: u64,
    /// Index into the schedule's paths.
    pub path: usize,
    /// Its round's time, ms on the agent's clock.
    pub round_ms: u64,
}

/// A round whose run did not start within its slip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missed {
    /// Index into the schedule's paths.
    pub path: usize,
    /// Its round's time, ms on the agent's clock.
    pub round_ms: u64,
    /// Why, in words (the archive's `reason`).
    pub why: MissedWhy,
}

/// Why a round's run did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissedWhy {
    /// Another throughput run of this agent held one of its hosts through the slip.
    HostsBusy,
    /// The server said busy (another agent's throughput test) through the slip.
    ServerBusy,
    /// The path's previous run was still running.
    Overrun,
    /// The agent looked only after the slip had passed (it was held up).
    Late,
}

impl MissedWhy {
    /// Its kind in one word, as the archive's `error_kind` has it: `busy`, `overrun` or
    /// `late`.
    pub fn kind(self) -> &'static str {
        match self {
            MissedWhy::HostsBusy | MissedWhy::ServerBusy => "busy",
            MissedWhy::Overrun => "overrun",
            MissedWhy::Late => "late",
        }
    }
}

impl std::fmt::Display for MissedWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MissedWhy::HostsBusy => {
                "not started within its slip: another throughput test held one of its hosts"
            }
            MissedWhy::ServerBusy => "not started within its slip: the server said busy each time",
            MissedWhy::Overrun => "not started within its slip: its previous run was still running",
            MissedWhy::Late => "not started within its slip: the agent was held up past it",
        })
    }
}

/// How a run ended, as far as the schedule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It ran (whatever it measured, or however it failed other than busy).
    Ran,
    /// The server refused it as busy: ask again within the slip.
    Busy,
}

/// One path's state.
#[derive(Debug, Clone)]
struct Slot {
    path: Path,
    kind: Kind,
    every_ms: u64,
    slip_ms: u64,
    /// This round's time.
    round_ms: u64,
    /// When its run may start (the drawn time, or the next try after a busy answer).
    at_ms: u64,
    /// The run in progress, if one is: its number and its round.
    running: Option<(u64, u64)>,
    /// This round's run has started (or the round was missed): wait for the next round.
    done: bool,
    /// The server said busy on this round's last try.
    refused: bool,
    /// A throughput run of this agent held a host when the round was due.
    blocked: bool,
}

/// The schedule of an agent's paths.
#[derive(Debug)]
pub struct Schedule {
    slots: Vec<Slot>,
    rng: u64,
    next_id: u64,
    /// Rounds whose run was refused busy after a later round of its path began (so it
    /// cannot be tried again): missed, said at the next poll.
    refused_late: Vec<Missed>,
}

/// A xorshift64* step: the slips' randomness (seeded by the agent; not for secrets).
fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// A random offset in `0..=max`.
fn draw(rng: &mut u64, max: u64) -> u64 {
    if max == 0 {
        0
    } else {
        next_random(rng) % (max + 1)
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Schedule {
    /// The schedule of `paths` of `mesh` (the ones this agent runs), from `now_ms`, with
    /// randomness from `seed`. `resume(path)` gives a path's next round as a previous run of
    /// the agent left it (ms on this clock), if it did: a round in the past is run now, none
    /// is made up for the time the agent was away, and one more than a period ahead (the
    /// wall clock stepped back meanwhile) comes within a period.
    pub fn new(
        mesh: &Mesh,
        paths: &[Path],
        now_ms: u64,
        seed: u64,
        resume: &dyn Fn(&Path) -> Option<u64>,
    ) -> Self {
        let mut rng = seed | 1;
        let slots = paths
            .iter()
            .map(|p| {
                let t = &mesh.tests[p.test];
                let (every_ms, slip_ms) = (ms(t.every).max(1), ms(t.slip));
                // A first round at a random phase of the period, so that paths spread out. A
                // resumed round is never more than a period away: one further off is the wall
                // clock stepped back while the agent was away, not a schedule.
                let round_ms = resume(p)
                    .map(|r| r.clamp(now_ms, now_ms + every_ms))
                    .unwrap_or_else(|| now_ms + draw(&mut rng, every_ms.saturating_sub(1)));
                let mut s = Slot {
                    path: *p,
                    kind: t.kind,
                    every_ms,
                    slip_ms,
                    round_ms,
                    at_ms: round_ms,
                    running: None,
                    done: false,
                    refused: false,
                    blocked: false,
                };
                s.at_ms = round_ms + draw(&mut rng, slip_ms / 2);
                s
            })
            .collect();
        Self {
            slots,
            rng,
            next_id: 0,
            refused_late: Vec::new(),
        }
    }

    /// The paths, in the order [`Start::path`] and [`Missed::path`] index them.
    pub fn paths(&self) -> impl Iterator<Item = Path> + '_ {
        self.slots.iter().map(|s| s.path)
    }

    /// Each path's next round not yet started or missed: what a restarted agent resumes from.
    pub fn next_rounds(&self) -> impl Iterator<Item = (Path, u64)> + '_ {
        self.slots.iter().map(|s| {
            let next = if s.done {
                s.round_ms + s.every_ms
            } else {
                s.round_ms
            };
            (s.path, next)
        })
    }

    /// Whether a throughput run holds `host` now.
    fn host_held(&self, host: usize) -> bool {
        self.slots.iter().any(|s| {
            s.running.is_some()
                && s.kind == Kind::Throughput
                && (s.path.source == host || s.path.destination == host)
        })
    }

    /// The rounds that end at `now_ms`: the next round begins for paths whose round was run,
    /// and a round not run within its slip is missed.
    fn roll(&mut self, now_ms: u64, missed: &mut Vec<Missed>) {
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            let deadline = s.round_ms + s.slip_ms;
            if !s.done && now_ms > deadline {
                let why = if s.running.is_some() {
                    MissedWhy::Overrun
                } else if s.refused {
                    MissedWhy::ServerBusy
                } else {
                    MissedWhy::HostsBusy
                };
                missed.push(Missed {
                    path: i,
                    round_ms: s.round_ms,
                    why,
                });
                s.done = true;
            }
            // The next round, once this one is settled and its time has come: the latest
            // round that has begun (rounds that passed while the agent was held up are not
            // made up, as after a restart).
            if s.done && now_ms >= s.round_ms + s.every_ms {
                let behind = (now_ms - s.round_ms) / s.every_ms;
                s.round_ms += behind * s.every_ms;
                s.done = false;
                s.refused = false;
                s.blocked = false;
                let offset = draw(&mut self.rng, s.slip_ms / 2);
                s.at_ms = s.round_ms + offset;
                // A round whose slip has passed as well (the agent was held up): missed at
                // once.
                if now_ms > s.round_ms + s.slip_ms {
                    let why = if s.running.is_some() {
                        MissedWhy::Overrun
                    } else {
                        MissedWhy::Late
                    };
                    missed.push(Missed {
                        path: i,
                        round_ms: s.round_ms,
                        why,
                    });
                    s.done = true;
                }
            }
        }
    }

    /// What to do at `now_ms`: the runs to start (none of them a throughput run beside
    /// another on a host), and the rounds missed since the last call.
    pub fn poll(&mut self, now_ms: u64) -> (Vec<Start>, Vec<Missed>) {
        let mut missed = std::mem::take(&mut self.refused_late);
        self.roll(now_ms, &mut missed);
        let mut due: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                let s = &self.slots[i];
                !s.done && now_ms >= s.at_ms
            })
            .collect();
        due.sort_by_key(|&i| (self.slots[i].at_ms, i));
        let mut starts = Vec::new();
        for i in due {
            let s = &self.slots[i];
            if s.running.is_some() {
                continue;
            }
            if s.kind == Kind::Throughput
                && (self.host_held(s.path.source) || self.host_held(s.path.destination))
            {
                self.slots[i].blocked = true;
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            let s = &mut self.slots[i];
            s.running = Some((id, s.round_ms));
            s.done = true;
            starts.push(Start {
                id,
                path: i,
                round_ms: s.round_ms,
            });
        }
        (starts, missed)
    }

    /// Run `id` ended at `now_ms`, as `ended` says. A busy answer is tried again within the
    /// round's slip.
    pub fn finished(&mut self, id: u64, now_ms: u64, ended: Ended) {
        let Some((path, s)) = self
            .slots
            .iter_mut()
            .enumerate()
            .find(|(_, s)| s.running.is_some_and(|(r, _)| r == id))
        else {
            return;
        };
        let round = s.running.take().map_or(0, |(_, round)| round);
        // Refused: its round is open again, to be tried once more within the slip (or
        // missed, past it); if a later round began meanwhile, it can be tried no more and
        // is missed (it was neither run nor said missed before: found by the property
        // test, a round refused busy as its slip ended went unrecorded).
        if ended == Ended::Busy && round == s.round_ms {
            s.done = false;
            s.refused = true;
            let retry = ms(BUSY_RETRY).min(s.slip_ms / 4).max(1);
            s.at_ms = now_ms + retry;
        } else if ended == Ended::Busy {
            self.refused_late.push(Missed {
                path,
                round_ms: round,
                why: MissedWhy::ServerBusy,
            });
        }
    }

    /// The next time something may happen without a run ending (a run due, a round to roll
    /// or to miss), ms; `None` with no paths.
    pub fn next_wake(&self) -> Option<u64> {
        self.slots
            .iter()
            .map(|s| {
                if s.done {
                    s.round_ms + s.every_ms
                } else if s.running.is_some() || s.blocked {
                    // A blocked run waits for a run's end (a call of its own) or its slip.
                    s.round_ms + s.slip_ms + 1
                } else {
                    s.at_ms.min(s.round_ms + s.slip_ms + 1)
                }
            })
            .min()
    }
}

#[cfg(test)]
mod tests;
