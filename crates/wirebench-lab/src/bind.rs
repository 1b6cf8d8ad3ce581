//! A scenario run bound to its file, as a sweep is bound to its plan (issue 45).
//!
//! Every scenario run writes its manifest (`manifest.json`: the scenario, the profiles
//! asked for, the time scale, the trials per profile; see [`crate::run::manifest`]). A
//! run that reads trials already saved (`--resume`, or a shard) checks it against its own
//! first, and refuses, naming what changed, to keep trials of another scenario: a link,
//! a test or a stack profile changed (a 10M link made 20M), or another time scale. Trials
//! measured under one scenario are never summarised as another's.
//!
//! What a resume may change without harm:
//!
//! - the trial count (`trials`, `--trials`): the trials saved are trials of the same
//!   scenario, more are run or fewer summarised;
//! - `parallel` and `description`: how it runs and how it is described, not what it
//!   measures;
//! - the profiles asked for (`--profile`): a profile not asked now is left on disk;
//! - new `[[profile]]`s, when the run declares them with `--add-profiles` (each profile
//!   measured before, each link and each test as it was): their trials are run, the
//!   others kept.
//!
//! A sharded run numbers its trials by profile and trial count (`k = p·T + t`), so its
//! manifest must match byte for byte, as before; what differs is named the same way.

use std::path::Path;

use serde_json::Value;
use wirebench_report::experiment::shard::{Manifest, ShardError};

use crate::scenario::Scenario;

/// `s` escaped for a terminal (control characters, bidi overrides).
fn printable(s: &str) -> String {
    wirebench_report::text::printable(s).into_owned()
}

/// The manifest every shard of a scenario run shares: the scenario (in JSON without its
/// unset keys, which reads back as the file did), the profiles asked for, and the time
/// scale, as its tests;
/// the trials per profile as its repeat; no varies (which tells it from a sweep's).
pub fn manifest(sc: &Scenario, profiles: &[String], trials: u32, time_scale: f64) -> Manifest {
    let mut scenario = serde_json::to_value(sc).unwrap_or_default();
    drop_nulls(&mut scenario);
    Manifest::new(
        format!("wirebench {}", env!("CARGO_PKG_VERSION")),
        Vec::new(),
        trials,
        true,
        None,
        vec![
            scenario,
            serde_json::Value::from(profiles.to_vec()),
            serde_json::Value::from(time_scale),
        ],
    )
}

/// The directory's trials were measured under another scenario: what changed, in words.
#[derive(Debug, thiserror::Error)]
#[error(
    "{}: the trials there were measured with another scenario: {what}; give another \
     --out, or run without --resume to measure every trial again",
    .path.display()
)]
pub struct Changed {
    /// The directory's manifest.
    pub path: std::path::PathBuf,
    /// What changed, in words.
    pub what: String,
}

/// Why a run cannot be bound to its directory.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another scenario's trials.
    #[error(transparent)]
    Changed(#[from] Changed),
    /// The manifest: edited, unreadable or not written.
    #[error(transparent)]
    Shard(#[from] ShardError),
}

/// Binds the run with manifest `ours` to the directory `out`: writes the manifest, or
/// checks the one there (`resume`: trials are read; `sharded`: it must match exactly;
/// `add_profiles`: new profiles are declared).
///
/// # Errors
///
/// The directory's trials were measured under another scenario ([`BindError::Changed`]),
/// its manifest was edited, or the manifest cannot be read or written.
pub fn bind(
    out: &Path,
    ours: &Manifest,
    resume: bool,
    sharded: bool,
    add_profiles: bool,
) -> Result<(), BindError> {
    let path = out.join("manifest.json");
    let bytes = manifest_bytes(ours);
    if !resume && !sharded {
        // Every trial is measured again: the directory becomes this run's.
        wirebench_report::rundir::write(&path, &bytes).map_err(ShardError::from)?;
        return Ok(());
    }
    if wirebench_report::rundir::write_new(&path, &bytes).map_err(ShardError::from)? {
        return Ok(());
    }
    let theirs = Manifest::read(out)?;
    let content = theirs.content_hash();
    if theirs.hash != content {
        return Err(ShardError::ManifestEdited {
            path,
            recorded: theirs.hash,
            content,
        }
        .into());
    }
    if theirs.hash == ours.hash {
        return Ok(());
    }
    let diff = differences(&theirs, ours, sharded);
    let refused = !diff.changed.is_empty() || (!diff.added.is_empty() && !add_profiles);
    if refused || sharded {
        return Err(Changed {
            path,
            what: diff.describe(add_profiles),
        }
        .into());
    }
    // Only what a resume may change: the manifest becomes this run's.
    wirebench_report::rundir::write(&path, &bytes).map_err(ShardError::from)?;
    Ok(())
}

/// Removes the keys set to null (TOML has no null: an unset key is an absent one).
fn drop_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn manifest_bytes(m: &Manifest) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(m).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// What differs between two scenario runs' manifests.
#[derive(Debug, Default, PartialEq)]
struct Differences {
    /// What changed that the trials saved depend on, in words.
    changed: Vec<String>,
    /// Profiles this run adds.
    added: Vec<String>,
}

impl Differences {
    fn describe(&self, add_profiles: bool) -> String {
        let mut parts = self.changed.clone();
        if !self.added.is_empty() && !add_profiles {
            parts.push(format!(
                "profile {} added (declare it with --add-profiles)",
                self.added.join(", ")
            ));
        } else if !self.added.is_empty() {
            parts.push(format!("profile {} added", self.added.join(", ")));
        }
        if parts.is_empty() {
            parts.push("the trial count or how the run is made".into());
        }
        parts.join("; ")
    }
}

/// The scenario's keys a resume may change (see the module's list).
const HARMLESS: [&str; 3] = ["trials", "parallel", "description"];

/// What differs from `theirs` (the directory's) to `ours`; with `sharded`, everything
/// counts.
fn differences(theirs: &Manifest, ours: &Manifest, sharded: bool) -> Differences {
    let mut d = Differences::default();
    let (old, new) = (scenario_of(theirs), scenario_of(ours));
    for key in ["link", "test"] {
        d.changed.extend(list_changes(key, &old[key], &new[key]));
    }
    let keys = |v: &Value| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>());
    let mut other: Vec<String> = keys(old).unwrap_or_default();
    other.extend(keys(new).unwrap_or_default());
    other.sort();
    other.dedup();
    for k in other {
        let listed = matches!(k.as_str(), "link" | "test" | "profile");
        let harmless = HARMLESS.contains(&k.as_str()) && !sharded;
        if !listed && !harmless && old[&k] != new[&k] {
            d.changed
                .push(format!("{k} {} → {}", short(&old[&k]), short(&new[&k])));
        }
    }
    profile_changes(theirs, ours, &mut d);
    if theirs.tests.get(2) != ours.tests.get(2) {
        d.changed.push(format!(
            "--time-scale {} → {}",
            short(theirs.tests.get(2).unwrap_or(&Value::Null)),
            short(ours.tests.get(2).unwrap_or(&Value::Null))
        ));
    }
    if sharded && theirs.repeat != ours.repeat {
        d.changed
            .push(format!("trials {} → {}", theirs.repeat, ours.repeat));
    }
    d
}

/// The scenario of a manifest (JSON), or null.
fn scenario_of(m: &Manifest) -> &Value {
    static NULL: Value = Value::Null;
    m.tests.first().unwrap_or(&NULL)
}

/// The changes between two lists of links or tests, each named.
fn list_changes(key: &str, old: &Value, new: &Value) -> Vec<String> {
    let empty = Vec::new();
    let (old, new) = (
        old.as_array().unwrap_or(&empty),
        new.as_array().unwrap_or(&empty),
    );
    let mut out = Vec::new();
    for i in 0..old.len().max(new.len()) {
        match (old.get(i), new.get(i)) {
            (Some(a), Some(b)) if a != b => {
                out.push(format!("{key} {} changed ({})", name(key, b), fields(a, b)))
            }
            (Some(a), None) => out.push(format!("{key} {} removed", name(key, a))),
            (None, Some(b)) => out.push(format!("{key} {} added", name(key, b))),
            _ => {}
        }
    }
    out
}

/// A link or test in words: a test's name, a link's ends.
fn name(key: &str, v: &Value) -> String {
    let s = |k: &str| v[k].as_str().unwrap_or("?").to_string();
    let n = match (key, v["name"].as_str()) {
        ("test", Some(n)) => n.to_string(),
        ("test", None) => format!("{}-{}", s("from"), s("to")),
        _ => format!("{}-{}", s("a"), s("b")),
    };
    printable(&n)
}

/// The fields that differ between two objects: `rate "10M" → "20M"`, at most three.
fn fields(a: &Value, b: &Value) -> String {
    let mut keys: Vec<&String> = a
        .as_object()
        .into_iter()
        .chain(b.as_object())
        .flat_map(|m| m.keys())
        .collect();
    keys.sort();
    keys.dedup();
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| a[k.as_str()] != b[k.as_str()])
        .map(|k| format!("{k} {} → {}", short(&a[k.as_str()]), short(&b[k.as_str()])))
        .collect();
    let more = diffs.len().saturating_sub(3);
    let mut s = diffs.into_iter().take(3).collect::<Vec<_>>().join(", ");
    if more > 0 {
        s += &format!(", and {more} more");
    }
    s
}

/// A JSON value in at most 60 characters, printable.
fn short(v: &Value) -> String {
    let s = match v {
        Value::Null => "unset".to_string(),
        v => v.to_string(),
    };
    let cut: String = s.chars().take(60).collect();
    let cut = if cut.len() < s.len() {
        cut + "…"
    } else {
        cut
    };
    printable(&cut)
}

/// Profiles measured before that changed, and profiles this run adds: only those both
/// runs ask for count (a profile not asked now is left on disk).
fn profile_changes(theirs: &Manifest, ours: &Manifest, d: &mut Differences) {
    let chosen = |m: &Manifest| -> Vec<Value> {
        let asked: Vec<String> = m
            .tests
            .get(1)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        scenario_of(m)["profile"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                asked.is_empty() || asked.iter().any(|a| Some(a.as_str()) == p["name"].as_str())
            })
            .cloned()
            .collect()
    };
    let (old, new) = (chosen(theirs), chosen(ours));
    for p in &new {
        let n = printable(p["name"].as_str().unwrap_or("?"));
        match old.iter().find(|o| o["name"] == p["name"]) {
            Some(o) if o != p => d
                .changed
                .push(format!("profile {n} changed ({})", fields(o, p))),
            Some(_) => {}
            None => d.added.push(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn scenario(rate: &str, profiles: &[&str], args: &str) -> Scenario {
        let mut text = format!(
            "name = \"s\"\ntrials = 1\n[[link]]\na = \"h1\"\nb = \"h2\"\nrate = \"{rate}\"\n"
        );
        for p in profiles {
            text += &format!("[[profile]]\nname = \"{p}\"\n");
        }
        text += &format!("[[test]]\nname = \"m\"\nfrom = \"h1\"\nto = \"h2\"\nargs = {args}\n");
        toml::from_str(&text).expect("scenario")
    }

    fn manifest(sc: &Scenario, trials: u32, scale: f64) -> Manifest {
        super::manifest(sc, &[], trials, scale)
    }

    #[test]
    fn what_changed_is_named_and_what_may_change_is_not() {
        let base = scenario("10M", &["a"], "[\"-t\", \"200ms\"]");
        let m = manifest(&base, 1, 1.0);
        let faster = manifest(&scenario("20M", &["a"], "[\"-t\", \"200ms\"]"), 1, 1.0);
        let d = differences(&m, &faster, false);
        assert_eq!(d.changed, ["link h1-h2 changed (rate \"10M\" → \"20M\")"]);
        let longer = manifest(&scenario("10M", &["a"], "[\"-t\", \"300ms\"]"), 1, 1.0);
        let d = differences(&m, &longer, false);
        assert_eq!(d.changed.len(), 1, "{d:?}");
        assert!(d.changed[0].starts_with("test m changed (args"), "{d:?}");
        let scaled = differences(&m, &manifest(&base, 1, 0.5), false);
        assert_eq!(scaled.changed, ["--time-scale 1.0 → 0.5"]);
        // More trials: harmless unsharded, a change when sharded.
        let more = manifest(&base, 3, 1.0);
        assert_eq!(differences(&m, &more, false), Differences::default());
        assert_eq!(differences(&m, &more, true).changed, ["trials 1 → 3"]);
        // A profile added is declared; one changed is not allowed.
        let added = manifest(&scenario("10M", &["a", "b"], "[\"-t\", \"200ms\"]"), 1, 1.0);
        let d = differences(&m, &added, false);
        assert!(d.changed.is_empty() && d.added == ["b"], "{d:?}");
        assert!(d.describe(false).contains("--add-profiles"));
    }
}
