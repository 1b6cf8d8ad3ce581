//! What an experiment warns of, as data: a sender that fell short of the rate asked,
//! failed trials, a server limit that refused or stopped trials, a point with too few
//! completed trials for its statistics, trials measured again, and files in a trial's
//! place that were not that trial. One list, made once from
//! the trials (`Merged::warnings`) and saved as `warnings.json`, is what the terminal prints
//! after the summary and what the HTML report shows beside the rows and plots it concerns,
//! so the two cannot say different things.

use serde::{Deserialize, Serialize};
use wirebench_proto::error_kind::ErrorKind;

use super::merge::Merged;
use super::plan::point_words;
use super::summary::{ExperimentSummary, FailedTrial, PointSummary, RetriedTrial};
use crate::plot::scale::{with_unit, Quantity};

/// One warning, about one point of the experiment or about all of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    /// The point it concerns, from 1 as in the trial files' names (`trials/p003-...`);
    /// absent when it concerns the whole experiment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<usize>,
    /// What is wrong.
    #[serde(flatten)]
    pub concern: Concern,
}

/// What a warning is about, with the figures it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Concern {
    /// Trials failed: they count in no figure, plot or knee.
    FailedTrials {
        /// Trials that failed.
        failed: u64,
        /// Trials measured.
        trials: u64,
        /// Each failed trial, its file, reason and kind.
        failures: Vec<FailedTrial>,
    },
    /// A server limit refused or stopped trials (a subset of the failed ones).
    LimitHit {
        /// The limit, by its kind (its server flag is [`ErrorKind::limit_flag`]).
        cause: ErrorKind,
        /// Trials it refused or stopped.
        trials: u64,
    },
    /// One completed trial of several: no spread, no confidence interval. (None completed
    /// is a [`Concern::FailedTrials`] of all of them.)
    TooFewGood {
        /// Completed trials.
        good: u64,
        /// Trials measured.
        trials: u64,
    },
    /// The sender did not reach the rate asked by more than
    /// [`SHORTFALL`](super::summary::SHORTFALL): the point measures the sender, not the path.
    SenderShortfall {
        /// The rate asked, bits/s over all streams.
        offered_bps: f64,
        /// The mean rate sent, bits/s.
        sent_bps: f64,
    },
    /// Trials measured more than once (a rerun measured them again after they failed):
    /// measured later than the rest of their experiment.
    Retried {
        /// The trials, with their attempts.
        retried: Vec<RetriedTrial>,
    },
    /// A file in a trial's place was not that trial (another experiment's, another point's,
    /// unreadable): the sweep measured the trial again and saved it there.
    Replaced {
        /// The file, relative to the experiment's directory.
        file: String,
        /// What was wrong with it, in words.
        why: String,
    },
}

impl Concern {
    /// A short name of the kind, for a heading or a count: "trials failed".
    pub fn title(&self) -> &'static str {
        match self {
            Self::FailedTrials { .. } => "trials failed",
            Self::LimitHit { .. } => "server limit hit",
            Self::TooFewGood { .. } => "too few good trials",
            Self::SenderShortfall { .. } => "sender fell short",
            Self::Retried { .. } => "trials measured again",
            Self::Replaced { .. } => "file replaced",
        }
    }

    /// What is wrong and what it means, in one sentence without the point (rates in SI
    /// units to 3 significant digits). Failed trials' reasons are not in it (see
    /// [`Concern::reasons`]).
    pub fn text(&self) -> String {
        let rate = |v: f64| with_unit(Quantity::BitRate, v);
        match self {
            Self::FailedTrials { failed, trials, .. } if failed >= trials => format!(
                "{} failed: the point has no figures and is in no plot",
                if *trials == 1 {
                    "its one trial".to_string()
                } else {
                    format!("all {trials} trials")
                }
            ),
            Self::FailedTrials { failed, trials, .. } => {
                format!("{failed} of {trials} trials failed; they count in no figure, plot or knee")
            }
            Self::LimitHit { cause, trials } => format!(
                "the server's {} refused or stopped {trials} trial{}: raise it on the server, \
                 or ask for less",
                cause.limit_flag().unwrap_or("limit"),
                plural(*trials)
            ),
            Self::TooFewGood { good: 0, .. } => {
                "no trial completed: the point has no figures and is in no plot".into()
            }
            Self::TooFewGood { good, trials } => format!(
                "only {good} of {trials} trials completed: no spread or confidence interval"
            ),
            Self::SenderShortfall {
                offered_bps,
                sent_bps,
            } => format!(
                "the sender reached {} of the {} asked ({:.0}% short): this point measures the \
                 sender, not the path",
                rate(*sent_bps),
                rate(*offered_bps),
                (1.0 - sent_bps / offered_bps) * 100.0
            ),
            Self::Retried { retried } => {
                let files = |completed: bool| {
                    let of: Vec<String> = retried
                        .iter()
                        .filter(|r| r.completed == completed)
                        .map(|r| format!("{}, {} attempts", r.file, r.attempts))
                        .collect();
                    (of.len(), of.join("; "))
                };
                let mut parts = Vec::new();
                let (n, done) = files(true);
                if n > 0 {
                    parts.push(format!(
                        "{n} trial{} completed only when a rerun measured {} again, later than \
                         the rest ({done})",
                        plural(n as u64),
                        if n == 1 { "it" } else { "them" }
                    ));
                }
                let (n, failed) = files(false);
                if n > 0 {
                    parts.push(format!(
                        "{n} trial{} failed again when a rerun measured {} again ({failed})",
                        plural(n as u64),
                        if n == 1 { "it" } else { "them" }
                    ));
                }
                parts.join("; ")
            }
            Self::Replaced { file, why } => {
                format!("{file} {why}: the trial was measured again and saved in its place")
            }
        }
    }

    /// The distinct reasons of failed trials, each with the files that failed for it, in
    /// the order first seen; empty for other concerns.
    pub fn reasons(&self) -> Vec<(String, Vec<String>)> {
        let Self::FailedTrials { failures, .. } = self else {
            return Vec::new();
        };
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for f in failures {
            match out.iter_mut().find(|(r, _)| *r == f.reason) {
                Some((_, files)) => files.push(f.file.clone()),
                None => out.push((f.reason.clone(), vec![f.file.clone()])),
            }
        }
        out
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

impl Warning {
    /// The point's summary in `s`, when the warning names one that is there.
    pub fn point_in<'a>(&self, s: &'a ExperimentSummary) -> Option<&'a PointSummary> {
        self.point
            .and_then(|p| p.checked_sub(1))
            .and_then(|i| s.points.get(i))
    }

    /// The warning in one line, as the terminal prints it: "rate 100 Mbit/s, size 500 B:
    /// 2 of 2 trials failed; ...", with the failed trials' reasons.
    pub fn line(&self, s: &ExperimentSummary) -> String {
        let at = match (self.point, self.point_in(s)) {
            (_, Some(p)) => point_words(&p.point),
            (Some(n), None) => format!("point {n}"),
            (None, None) => "the experiment".into(),
        };
        let reasons: Vec<String> = self
            .concern
            .reasons()
            .into_iter()
            .map(|(r, files)| format!("{r} ({})", files.join(", ")))
            .collect();
        if reasons.is_empty() {
            format!("{at}: {}", self.concern.text())
        } else {
            format!("{at}: {}: {}", self.concern.text(), reasons.join("; "))
        }
    }
}

/// The warnings of `s`, point by point in grid order: failed trials, the limits that
/// refused or stopped them, too few completed trials, a sender short of the rate asked,
/// and trials measured again (`retried[i]`: point `i`'s; empty where not known, as for a
/// summary read back alone).
pub fn warnings_of(s: &ExperimentSummary, retried: &[Vec<RetriedTrial>]) -> Vec<Warning> {
    let short = s.shortfalls();
    let mut out = Vec::new();
    for (i, p) in s.points.iter().enumerate() {
        let mut put = |concern| {
            out.push(Warning {
                point: Some(i + 1),
                concern,
            })
        };
        if p.failed > 0 {
            put(Concern::FailedTrials {
                failed: p.failed,
                trials: p.trials,
                failures: p.failures.clone(),
            });
        }
        let mut limits: Vec<(ErrorKind, u64)> = Vec::new();
        for kind in p.failures.iter().filter_map(|f| f.cause) {
            if kind.limit_flag().is_none() {
                continue;
            }
            match limits.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => limits.push((kind, 1)),
            }
        }
        for (cause, trials) in limits {
            put(Concern::LimitHit { cause, trials });
        }
        // None completed is said by the failed trials' warning; one of several is not.
        let good = p.trials.saturating_sub(p.failed);
        if good == 1 && p.trials >= 2 {
            put(Concern::TooFewGood {
                good,
                trials: p.trials,
            });
        }
        // The shortfalls are found by the one rule the summary has (`SHORTFALL`).
        if let Some(sf) = short.iter().find(|sf| sf.index == i) {
            put(Concern::SenderShortfall {
                offered_bps: sf.offered_bps,
                sent_bps: sf.sent_bps,
            });
        }
        if let Some(r) = retried.get(i).filter(|r| !r.is_empty()) {
            put(Concern::Retried { retried: r.clone() });
        }
    }
    out
}

impl Merged {
    /// The experiment's warnings (see [`warnings_of`]), with the trials measured again,
    /// which only the trial files say. `s` is this experiment's summary.
    pub fn warnings(&self, s: &ExperimentSummary) -> Vec<Warning> {
        let retried: Vec<Vec<RetriedTrial>> =
            self.trials.iter().map(|t| t.retried.clone()).collect();
        let mut out = warnings_of(s, &retried);
        // The files a sweep replaced, which only its shard records remember; after the
        // point's other warnings (a sort that keeps the order within a point).
        for r in self.shards.iter().flat_map(|sh| &sh.replaced) {
            out.push(Warning {
                point: Some(r.point),
                concern: Concern::Replaced {
                    file: r.file.clone(),
                    why: r.why.clone(),
                },
            });
        }
        out.sort_by_key(|w| w.point.unwrap_or(usize::MAX));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::summary::{summarize_points, PointTrials};
    use crate::experiment::trial::tests::udp;
    use crate::experiment::{grid, parse_vary};

    fn failed(file: &str, cause: Option<ErrorKind>) -> FailedTrial {
        FailedTrial {
            file: file.into(),
            reason: "server refused the test: rate too high".into(),
            cause,
        }
    }

    /// Three points: one fine, one whose sender fell short with a trial measured again,
    /// one refused by the server's --max-rate in both trials.
    fn summary() -> (ExperimentSummary, Vec<Vec<RetriedTrial>>) {
        let points = grid(&[parse_vary("rate=10M,20M,100M").expect("vary")]);
        // 1 MB asked at 20 Mbit/s, 999.5 kB sent at 10 Mbit/s: far short.
        let ok = |f: &str| (f.to_string(), udp(1_000_000, 1_000_000, 1_000_000, None));
        let short = |f: &str| (f.to_string(), udp(1_000_000, 999_500, 999_500, None));
        let retried = RetriedTrial {
            file: "trials/p002-r002.json".into(),
            attempts: 2,
            completed: true,
        };
        let trials = vec![
            PointTrials {
                completed: vec![ok("a"), ok("b")],
                ..PointTrials::default()
            },
            PointTrials {
                completed: vec![short("c"), short("d")],
                retried: vec![retried.clone()],
                ..PointTrials::default()
            },
            PointTrials {
                failed: vec![
                    failed("trials/p003-r001.json", Some(ErrorKind::MaxRate)),
                    failed("trials/p003-r002.json", Some(ErrorKind::MaxRate)),
                ],
                ..PointTrials::default()
            },
        ];
        let s = summarize_points(&points, &[Some(10e6), Some(20e6), Some(100e6)], &trials);
        let retried = trials.iter().map(|t| t.retried.clone()).collect();
        (s, retried)
    }

    #[test]
    fn each_point_gets_its_own_typed_warnings_in_grid_order() {
        let (s, retried) = summary();
        let w = warnings_of(&s, &retried);
        let kinds: Vec<(Option<usize>, &str)> =
            w.iter().map(|w| (w.point, w.concern.title())).collect();
        assert_eq!(
            kinds,
            vec![
                (Some(2), "sender fell short"),
                (Some(2), "trials measured again"),
                (Some(3), "trials failed"),
                (Some(3), "server limit hit"),
            ]
        );
        assert_eq!(
            w[3].concern,
            Concern::LimitHit {
                cause: ErrorKind::MaxRate,
                trials: 2
            }
        );
        // Without the trial files, everything but the trials measured again.
        assert_eq!(warnings_of(&s, &[]).len(), 3);
    }

    #[test]
    fn the_lines_say_rates_in_si_units_and_group_reasons() {
        let (s, retried) = summary();
        let lines: Vec<String> = warnings_of(&s, &retried)
            .iter()
            .map(|w| w.line(&s))
            .collect();
        assert_eq!(
            lines[0],
            "rate 20.0 Mbit/s: the sender reached 9.99 Mbit/s of the 20.0 Mbit/s asked \
             (50% short): this point measures the sender, not the path"
        );
        assert_eq!(
            lines[2],
            "rate 100 Mbit/s: all 2 trials failed: the point has no figures and is in no plot: \
             server refused the test: rate too high (trials/p003-r001.json, \
             trials/p003-r002.json)"
        );
        assert_eq!(
            lines[3],
            "rate 100 Mbit/s: the server's --max-rate refused or stopped 2 trials: raise it \
             on the server, or ask for less"
        );
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[1],
            "rate 20.0 Mbit/s: 1 trial completed only when a rerun measured it again, later \
             than the rest (trials/p002-r002.json, 2 attempts)"
        );
    }

    #[test]
    fn warnings_read_back_as_written_with_their_kind_named() {
        let (s, retried) = summary();
        let w = warnings_of(&s, &retried);
        let json = serde_json::to_value(&w).expect("json");
        assert_eq!(json[3]["kind"], "limit_hit");
        assert_eq!(json[3]["cause"], "max_rate");
        assert_eq!(json[3]["point"], 3);
        let back: Vec<Warning> = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, w);
    }

    #[test]
    fn one_good_trial_of_several_is_too_few_and_one_of_one_is_enough() {
        let points = grid(&[parse_vary("rate=10M").expect("vary")]);
        let trials = vec![PointTrials {
            completed: vec![("a".into(), udp(1_000_000, 1_000_000, 1_000_000, None))],
            failed: vec![failed("b", None)],
            ..PointTrials::default()
        }];
        let s = summarize_points(&points, &[Some(10e6)], &trials);
        let w = warnings_of(&s, &[]);
        assert_eq!(w.len(), 2);
        assert_eq!(w[1].concern, Concern::TooFewGood { good: 1, trials: 2 });
        assert_eq!(
            w[1].concern.text(),
            "only 1 of 2 trials completed: no spread or confidence interval"
        );
        // No limit: the failure had no kind.
        assert!(w.iter().all(|w| w.concern.title() != "server limit hit"));
    }

    #[test]
    fn one_trial_of_one_is_enough_and_a_point_out_of_range_is_named_by_number() {
        let points = grid(&[parse_vary("rate=10M").expect("vary")]);
        let trials = vec![PointTrials {
            completed: vec![("a".into(), udp(1_000_000, 1_000_000, 1_000_000, None))],
            ..PointTrials::default()
        }];
        let s = summarize_points(&points, &[Some(10e6)], &trials);
        assert!(warnings_of(&s, &[]).is_empty());
        let w = Warning {
            point: Some(9),
            concern: Concern::TooFewGood { good: 0, trials: 1 },
        };
        assert!(w.line(&s).starts_with("point 9: no trial completed"));
    }
}
