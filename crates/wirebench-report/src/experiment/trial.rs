//! A sweep's trial file (`trials/pPPP-rRRR.json`): the trial's results document with a
//! `trial` object that binds it to its experiment (the manifest's hash, its point and
//! repeat) and says whether it completed. A failed trial is recorded with its reason, so
//! that a summary never counts it and a rerun measures it again.
//!
//! Why the binding: a trial copied from another experiment's directory, or left by another
//! grid in a directory whose manifest was lost, read as "already saved" and went into the
//! wrong point's mean.

use std::path::Path;

use serde::{Deserialize, Serialize};
use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::results::Results;
use wirebench_proto::spec::Mechanism;

use super::shard::Manifest;
use crate::input::{self, InputError};

/// What binds a trial file to its experiment, and whether the trial counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialTag {
    /// The hash of the experiment's manifest (`manifest.json`'s `hash`).
    pub manifest: String,
    /// The point in the grid, from 1 (as in the file's name).
    pub point: usize,
    /// The repeat of that point, from 1 (as in the file's name).
    pub repeat: u32,
    /// Which measurement of this trial the file holds, from 1: a failed trial measured
    /// again by a rerun counts up.
    pub attempt: u32,
    /// Whether the trial failed; its figures then count in no statistic.
    pub failed: bool,
    /// Why it failed, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why it failed, for code: the kind the failing side gave (a server limit by its flag,
    /// `busy`, `timeout`, ...), when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<ErrorKind>,
}

/// A trial whose test made no results: why, in words, and its kind when known (a server
/// limit that refused it, say), which the experiment's warnings name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmeasured {
    /// Why, in words.
    pub reason: String,
    /// The kind of failure, when the side that failed said it.
    pub cause: Option<ErrorKind>,
}

impl std::fmt::Display for Unmeasured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl From<String> for Unmeasured {
    fn from(reason: String) -> Self {
        Self {
            reason,
            cause: None,
        }
    }
}

impl From<&str> for Unmeasured {
    fn from(reason: &str) -> Self {
        reason.to_string().into()
    }
}

/// A trial file: the tag, and the results document when the test began (a test that never
/// began, a refused connection say, has the tag only).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrialFile {
    /// The binding and the outcome.
    pub trial: TrialTag,
    /// The results document, whose keys sit beside `trial` at the top of the file, so a
    /// completed trial's file still reads as a results document.
    #[serde(flatten)]
    pub results: Option<Results>,
}

/// Why a trial file cannot stand for its trial: it belongs to another experiment, another
/// trial, or to none. `sweep` measures such a trial again; `merge` refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {why}")]
pub struct NotThisTrial {
    /// The file, relative to the experiment's directory.
    pub file: String,
    /// The grid point whose trial the file stands for, from 0.
    pub point: usize,
    /// What is wrong, in words.
    pub why: String,
}

impl From<&NotThisTrial> for super::shard::ReplacedTrial {
    fn from(not: &NotThisTrial) -> Self {
        Self {
            file: not.file.clone(),
            point: not.point + 1,
            why: not.why.clone(),
        }
    }
}

/// How a trial's own `test` (the results document's, in seconds) differs from the test
/// the manifest plans for its point (the engine's spec, in ns): the first key that both
/// have, or that one has in seconds and the other in ns, with another value. A trial
/// re-tagged to another point (its tag edited, or another trial's file copied in) is so
/// refused although its tag matches.
fn test_differs(own: &Option<serde_json::Value>, planned: &serde_json::Value) -> Option<String> {
    let (Some(own), Some(planned)) = (
        own.as_ref().and_then(|v| v.as_object()),
        planned.as_object(),
    ) else {
        return None;
    };
    for (k, v) in own {
        // The plan spells "a response as large as the request" as 0 (the wire's spelling);
        // the results give the size it was.
        let planned_value = match (k.as_str(), planned.get(k)) {
            ("response_size", Some(p)) if p.as_u64() == Some(0) => planned.get("size"),
            (_, p) => p,
        };
        let same = match (planned_value, k.strip_suffix("_s")) {
            (Some(p), _) => p == v || p.as_f64().zip(v.as_f64()).is_some_and(|(a, b)| a == b),
            (None, Some(stem)) => match (planned.get(&format!("{stem}_ns")), v.as_f64()) {
                (Some(ns), Some(s)) => ns
                    .as_f64()
                    .is_some_and(|ns| (ns / 1e9 - s).abs() <= 1e-9 * s.abs().max(1.0)),
                _ => true,
            },
            (None, None) => true,
        };
        if !same {
            return Some(format!("{k} {v}"));
        }
    }
    None
}

/// Checks every completed trial file `files` (relative to `dir`) names, as `report` and
/// `plot` read them: regular, within the size cap, JSON, and every value one a
/// measurement makes (see [`crate::input::check_json`]). A file that is not there is
/// passed over (the summary's own check names one that leads elsewhere).
///
/// # Errors
///
/// The first bad file, in one line naming it and its first bad value.
pub fn check_files<'a>(
    dir: &Path,
    files: impl IntoIterator<Item = &'a String>,
) -> Result<(), InputError> {
    for f in files {
        let path = dir.join(f);
        match crate::input::json::<serde::de::IgnoredAny>(&path) {
            Err(InputError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(InputError::BadTrial(Box::new(e))),
            Ok(_) => {}
        }
    }
    Ok(())
}

/// The first key of a trial file: whether it has a tag and results.
#[derive(Deserialize)]
struct Head {
    trial: Option<TrialTag>,
    #[serde(default)]
    end: Option<serde::de::IgnoredAny>,
}

impl TrialFile {
    /// The file for a measured trial (`point` and `repeat` from 0): completed, or failed
    /// with the reason [`failure`] finds (an error before any results, `Err`, is one), and
    /// its kind when the failing side gave one.
    pub fn measured<E: Into<Unmeasured>>(
        manifest: &Manifest,
        point: usize,
        repeat: u32,
        attempt: u32,
        outcome: Result<Results, E>,
    ) -> Self {
        let (results, reason, cause) = match outcome {
            Ok(r) => {
                let why = failure(&r);
                let cause = why.as_ref().and(r.error_cause);
                (Some(r), why, cause)
            }
            Err(e) => {
                let e = e.into();
                (None, Some(e.reason), e.cause)
            }
        };
        Self {
            trial: TrialTag {
                manifest: manifest.hash.clone(),
                point: point + 1,
                repeat: repeat + 1,
                attempt,
                failed: reason.is_some(),
                reason,
                cause,
            },
            results,
        }
    }

    /// Reads a trial file with the checks every file read back gets (size, then values).
    ///
    /// # Errors
    ///
    /// Unreadable, too large, not JSON, or a value out of range.
    pub fn read(path: &Path) -> Result<Self, InputError> {
        let head: Head = input::json(path)?;
        let results = match head.end {
            Some(_) => Some(input::results(path)?),
            None => None,
        };
        Ok(Self::from_parts(head.trial, results))
    }

    /// Parses a trial file's bytes with the same checks (`path` only names it in errors):
    /// what the fuzz targets call.
    ///
    /// # Errors
    ///
    /// Not JSON, or a value out of range.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, InputError> {
        let head: Head = input::parse_json(path, bytes)?;
        let results = match head.end {
            Some(_) => Some(input::parse_json(path, bytes)?),
            None => None,
        };
        Ok(Self::from_parts(head.trial, results))
    }

    /// A file without a tag gets an empty one, which [`TrialFile::check`] refuses.
    fn from_parts(trial: Option<TrialTag>, results: Option<Results>) -> Self {
        Self {
            trial: trial.unwrap_or(TrialTag {
                manifest: String::new(),
                point: 0,
                repeat: 0,
                attempt: 0,
                failed: false,
                reason: None,
                cause: None,
            }),
            results,
        }
    }

    /// Checks that this file is trial `repeat` of point `point` (from 0) of `manifest`'s
    /// experiment, as file `file`.
    ///
    /// # Errors
    ///
    /// No tag (a file of an older wirebench, or not a sweep's), another experiment's hash,
    /// another trial's place, or a completed trial without results.
    pub fn check(
        &self,
        manifest: &Manifest,
        file: &str,
        point: usize,
        repeat: u32,
    ) -> Result<(), NotThisTrial> {
        let t = &self.trial;
        let no = |why: String| {
            Err(NotThisTrial {
                file: file.to_string(),
                point,
                why,
            })
        };
        if t.manifest.is_empty() {
            return no(
                "has no trial tag (saved by an older wirebench, or not a sweep's \
                       trial), so nothing shows it belongs to this experiment"
                    .into(),
            );
        }
        if t.manifest != manifest.hash {
            return no(format!(
                "belongs to another experiment (manifest {}, this one is {})",
                t.manifest, manifest.hash
            ));
        }
        if (t.point, t.repeat) != (point + 1, repeat + 1) {
            return no(format!(
                "is point {} repeat {} of this experiment, not point {} repeat {}",
                t.point,
                t.repeat,
                point + 1,
                repeat + 1
            ));
        }
        if !t.failed && self.results.is_none() {
            return no("says it completed but holds no results".into());
        }
        let planned = manifest.tests.get(point);
        if let (Some(r), Some(planned)) = (&self.results, planned) {
            if let Some(why) = test_differs(&serde_json::to_value(&r.test).ok(), planned) {
                return no(format!(
                    "is tagged point {} repeat {} but its own test is another one ({why})",
                    point + 1,
                    repeat + 1
                ));
            }
        }
        Ok(())
    }

    /// The reason the trial failed, `None` when it completed.
    pub fn failed(&self) -> Option<&str> {
        self.trial
            .failed
            .then(|| self.trial.reason.as_deref().unwrap_or("failed"))
    }
}

/// Why a test that returned results still failed as a trial, or `None` when it completed:
/// an error it ended with, nothing sent, nothing received, or less sent than its `-n` asked
/// for. Any of these as a figure would be a zero the path never measured.
pub fn failure(r: &Results) -> Option<String> {
    if let Some(e) = &r.error {
        return Some(e.clone());
    }
    let e = &r.end;
    let (Some(sent), Some(sent_messages)) = (e.sent.bytes, e.sent.messages) else {
        return Some("the sender never reported what it sent".into());
    };
    if sent == 0 && sent_messages == 0 {
        return Some(format!(
            "nothing was sent in {:.3} s (no error was reported)",
            e.duration_s
        ));
    }
    match (e.received.bytes, e.received.messages) {
        (Some(0), Some(0)) => return Some(format!("nothing was received ({sent} bytes sent)")),
        (None, _) | (_, None) => {
            return Some("the receiver never reported what it received".into());
        }
        _ => {}
    }
    // A message a stream short is rounding, not a failure; rr's -n counts transactions'
    // requests, which its own error reports.
    let slack = r.test.size.saturating_mul(u64::from(r.test.streams.max(1)));
    let moves_data = matches!(r.test.mechanism, Mechanism::Stream | Mechanism::StopAndWait);
    match r.test.bytes {
        Some(asked) if moves_data && e.file.is_none() && sent.saturating_add(slack) < asked => {
            Some(format!("{sent} bytes sent of the {asked} asked for"))
        }
        _ => None,
    }
}

/// Writes a trial file whole or not at all.
///
/// # Errors
///
/// The file cannot be written.
pub fn write_trial(path: &Path, trial: &TrialFile) -> Result<(), super::ShardError> {
    let mut bytes = serde_json::to_vec_pretty(trial).map_err(|e| super::ShardError::Parse {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    bytes.push(b'\n');
    super::shard::write_atomic(path, &bytes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::experiment::parse_vary;

    fn manifest(repeat: u32) -> Manifest {
        Manifest::new(
            "wirebench 0".into(),
            vec![parse_vary("rate=10M,20M").expect("vary")],
            repeat,
            true,
            None,
            vec![],
        )
    }

    #[test]
    fn a_trial_that_never_began_is_failed_and_bound_to_its_place() {
        let m = manifest(2);
        let t = TrialFile::measured(&m, 1, 0, 1, Err::<Results, _>("cannot connect"));
        assert_eq!(t.failed(), Some("cannot connect"));
        assert_eq!((t.trial.point, t.trial.repeat), (2, 1));
        assert!(t.check(&m, "f", 1, 0).is_ok());
        let e = t.check(&m, "f", 0, 0).expect_err("another place");
        assert_eq!(
            e.to_string(),
            "f: is point 2 repeat 1 of this experiment, not point 1 repeat 1"
        );
        let e = t
            .check(&manifest(3), "f", 1, 0)
            .expect_err("another experiment");
        assert!(e.why.starts_with("belongs to another experiment"), "{e}");
        // The file has the tag only, and reads back as a failed trial.
        let json = serde_json::to_value(&t).expect("json");
        assert_eq!(json["trial"]["failed"], true);
        assert_eq!(json.as_object().map(|o| o.len()), Some(1));
    }

    /// Regression: `sweep --mode rr --vary size=...` refused each of its own trials, whose
    /// results give the response's size where the plan says 0 ("as large as the request").
    #[test]
    fn a_response_as_large_as_the_request_is_the_planned_one() {
        let planned = serde_json::json!({"mechanism": "rr", "size": 64, "response_size": 0});
        let own =
            |r: u64| Some(serde_json::json!({"mechanism": "rr", "size": 64, "response_size": r}));
        assert_eq!(test_differs(&own(64), &planned), None);
        assert_eq!(
            test_differs(&own(200), &planned).as_deref(),
            Some("response_size 200")
        );
    }

    /// A UDP stream of `-n asked` that sent `sent` and received `received` bytes.
    pub(crate) fn udp(asked: u64, sent: u64, received: u64, error: Option<&str>) -> Results {
        let doc = serde_json::json!({
            "schema": 1, "wirebench": "t", "server": "s",
            "test": {"protocol": "udp", "mechanism": "stream", "direction": "forward",
                     "size": 1000, "bytes": asked, "rate_bps": 10_000_000, "rate_pps": 0,
                     "gap_s": 0.0, "streams": 1, "interval_s": 1.0, "drain_s": 1.0,
                     "ack_timeout_s": 0.2},
            "datapath": {},
            "intervals": [],
            "end": {"duration_s": 0.8, "sent": {"bytes": sent, "messages": sent / 1000, "duration_s": 0.8},
                    "received": {"bytes": received, "messages": received / 1000, "duration_s": 0.8},
                    "sent_bps": sent as f64 * 10.0, "received_bps": received as f64 * 10.0,
                    "retransmits": 0, "local_drops": 0, "resources": {}},
            "error": error,
        });
        serde_json::from_value(doc).expect("a valid document")
    }

    #[test]
    fn a_trial_fails_on_an_error_on_nothing_moved_and_on_a_short_send() {
        assert_eq!(failure(&udp(1_000_000, 1_000_000, 990_000, None)), None);
        // One message short over one stream is rounding.
        assert_eq!(failure(&udp(1_000_000, 999_500, 999_500, None)), None);
        assert_eq!(
            failure(&udp(
                1_000_000,
                400_000,
                0,
                Some("the peer closed the control connection")
            )),
            Some("the peer closed the control connection".into())
        );
        // The report: 0 bytes in 0.708 s and no error was "delivered 100%".
        assert_eq!(
            failure(&udp(1_000_000, 0, 0, None)),
            Some("nothing was sent in 0.800 s (no error was reported)".into())
        );
        assert_eq!(
            failure(&udp(1_000_000, 1_000_000, 0, None)),
            Some("nothing was received (1000000 bytes sent)".into())
        );
        assert_eq!(
            failure(&udp(1_000_000, 500_000, 500_000, None)),
            Some("500000 bytes sent of the 1000000 asked for".into())
        );
    }

    #[test]
    fn an_untagged_file_belongs_to_no_experiment() {
        let t = TrialFile {
            trial: TrialTag {
                manifest: String::new(),
                point: 0,
                repeat: 0,
                attempt: 0,
                failed: false,
                reason: None,
                cause: None,
            },
            results: None,
        };
        let e = t.check(&manifest(1), "trials/p001-r001.json", 0, 0);
        assert!(e.is_err_and(|e| e.why.contains("no trial tag")));
    }
}
