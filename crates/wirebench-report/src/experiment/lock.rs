//! One lock per experiment directory, whatever runs in it: a plain sweep, any shard of one,
//! a lab scenario (plain or sharded), or `merge`.
//!
//! Shards of one run with the same shard count `N` run side by side, as a job array runs
//! them; anything else on one directory is refused in one line naming the holder (what it
//! runs, its pid and host). Two runs at once on one `--out` measure each other's load,
//! and the last rename wins (issue 45: a plain sweep, `--shard 0/2` and `--shard 1/2` on
//! one directory took 8 measurements of 4 trials, at half the rate each).
//!
//! # How
//!
//! Each run holds an exclusive `flock` on its own lock file in `shards/` (`I-of-N.lock`,
//! `merge.lock`) for as long as it runs, and writes who it is into it (a JSON
//! [`Holder`]). The kernel drops the lock when the process ends, however it ends, so a
//! lock is never stale. A run takes its lock under the directory's gate
//! (`shards/directory.lock`, held for the few milliseconds of the check): it reads who
//! holds the other lock files and refuses to start beside one it may not share the
//! directory with. Every run checks under the gate, so two runs that start at the same
//! instant see each other.
//!
//! Lock files are opened through [`crate::rundir::open_lock`]: never through a link, never
//! a FIFO or a device (a FIFO there made `merge` wait for ever).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::shard::{Shard, ShardError};

/// The gate's file in `shards/`: no run holds it beyond its check.
const GATE: &str = "directory.lock";

/// How long a run waits for the gate: others hold it for milliseconds, so this is only
/// reached when something that is not wirebench holds it.
const GATE_WAIT: Duration = Duration::from_secs(10);

/// The most of a lock file read for its holder.
const RECORD_BYTES: u64 = 1024;

/// What runs in an experiment directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    /// `sweep` (plain or a shard).
    Sweep,
    /// `lab scenario` (plain or a shard).
    LabScenario,
    /// `merge` (reading shards, writing the merged directory).
    Merge,
}

/// Who holds a directory's lock, as written in its lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// What it runs.
    pub kind: RunKind,
    /// Its share (the whole experiment for a plain run and for `merge`).
    pub shard: Shard,
    /// Its process.
    pub pid: u32,
    /// Its host.
    pub host: String,
}

impl Holder {
    fn this(kind: RunKind, shard: Shard) -> Self {
        Self {
            kind,
            shard,
            pid: std::process::id(),
            host: crate::output::hostname(),
        }
    }

    /// The run in words: `` `sweep --shard 0/2` (pid 12 on h) ``.
    pub fn describe(&self) -> String {
        let what = match self.kind {
            RunKind::Sweep => "sweep",
            RunKind::LabScenario => "lab scenario",
            RunKind::Merge => "merge",
        };
        let shard = match self.shard.count {
            1 => String::new(),
            n => format!(" --shard {}/{n}", self.shard.index),
        };
        format!(
            "`{what}{shard}` (pid {} on {})",
            self.pid,
            crate::text::printable(&self.host)
        )
    }

    /// Whether `self` and `other` may run in one directory at once: shards of one kind of
    /// run with the same count.
    fn may_share(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.kind != RunKind::Merge
            && self.shard.count == other.shard.count
            && self.shard.count > 1
    }

    /// Whether this process wrote it (`merge` of a lab scenario runs the scenario's
    /// summary under its own lock).
    fn is_this_process(&self) -> bool {
        self.pid == std::process::id() && self.host == crate::output::hostname()
    }
}

/// A lock file held by a process whose record is not a [`Holder`] (an older wirebench's
/// `pid N on HOST`): it shares the directory with nothing.
fn unknown(text: &str) -> String {
    let text: String = text.trim().chars().take(120).collect();
    format!(
        "another process (its lock file says {:?})",
        crate::text::printable(&text)
    )
}

/// This process's lock on an experiment directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    _own: Flock<File>,
}

impl DirLock {
    /// The lock file of a run of `kind` and `shard` in `dir`.
    pub fn path(dir: &Path, kind: RunKind, shard: Shard) -> PathBuf {
        let name = match kind {
            RunKind::Merge => "merge.lock".to_string(),
            _ => format!("{}.lock", shard.label()),
        };
        dir.join("shards").join(name)
    }

    /// Takes `dir`'s lock for a run of `kind` and `shard`, without waiting (beyond the
    /// gate's milliseconds), and writes who holds it into its file.
    ///
    /// # Errors
    ///
    /// Another run holds the directory and may not share it ([`ShardError::InUse`]), runs
    /// this very shard ([`ShardError::Locked`]), or a lock file is a link, a FIFO, a device
    /// or cannot be made.
    pub fn acquire(dir: &Path, kind: RunKind, shard: Shard) -> Result<Self, ShardError> {
        crate::rundir::make_dirs(dir, &["shards"])?;
        let _gate = gate(dir)?;
        let me = Holder::this(kind, shard);
        for (_, held) in holders(dir) {
            let shares = match &held {
                Ok(h) => h.is_this_process() || h.may_share(&me),
                Err(_) => false,
            };
            if !shares {
                return Err(in_use(dir, kind, &held));
            }
        }
        let path = Self::path(dir, kind, shard);
        let file = crate::rundir::open_lock(&path)?;
        let io = |source| ShardError::Io {
            what: "locking",
            path: path.clone(),
            source,
        };
        let mut locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut f, Errno::EWOULDBLOCK)) => {
                let holder = match read_record(&mut f) {
                    Ok(h) => h.describe(),
                    Err(text) => unknown(&text),
                };
                return Err(ShardError::Locked {
                    shard: format!("{}/{}", shard.index, shard.count),
                    dir: dir.to_path_buf(),
                    holder,
                });
            }
            Err((_, errno)) => return Err(io(errno.into())),
        };
        let record = serde_json::to_vec(&me).unwrap_or_default();
        locked
            .set_len(0)
            .and_then(|()| locked.rewind())
            .and_then(|()| locked.write_all(&record))
            .map_err(io)?;
        Ok(Self { _own: locked })
    }

    /// Who holds a lock in `dir` now, other than this process, in words: what a reader
    /// that must not read a directory being written (`merge`, `report` of several
    /// directories) refuses on. Looks without writing anything.
    pub fn holder(dir: &Path) -> Option<String> {
        holders(dir).into_iter().find_map(|(_, h)| match h {
            Ok(h) if h.is_this_process() => None,
            Ok(h) => Some(h.describe()),
            Err(text) => Some(unknown(&text)),
        })
    }
}

/// The refusal of a run of `kind` in `dir`, held by `held`.
fn in_use(dir: &Path, kind: RunKind, held: &Result<Holder, String>) -> ShardError {
    let holder = match held {
        Ok(h) => h.describe(),
        Err(text) => unknown(text),
    };
    let hint = match kind {
        RunKind::Merge => "merge once it has ended",
        _ => {
            "only shards of one run with the same --shard count share a directory: wait \
             for it to end, or give this one another --out"
        }
    };
    ShardError::InUse {
        dir: dir.to_path_buf(),
        holder,
        hint,
    }
}

/// The directory's gate, held exclusively while a run checks and takes its lock.
fn gate(dir: &Path) -> Result<Flock<File>, ShardError> {
    let path = dir.join("shards").join(GATE);
    let mut file = crate::rundir::open_lock(&path)?;
    let start = Instant::now();
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => return Ok(l),
            Err((f, Errno::EWOULDBLOCK)) if start.elapsed() < GATE_WAIT => {
                file = f;
                // Held for the milliseconds of another run's check.
                std::thread::sleep(Duration::from_millis(2));
            }
            Err((_, errno)) => {
                let source = match errno {
                    Errno::EWOULDBLOCK => std::io::Error::other(format!(
                        "held by another process for over {} s (no wirebench run holds it \
                         that long): find it with `fuser`",
                        GATE_WAIT.as_secs()
                    )),
                    e => e.into(),
                };
                return Err(ShardError::Io {
                    what: "locking",
                    path,
                    source,
                });
            }
        }
    }
}

/// Every lock file in `dir/shards` some process holds now, with its holder (or the text
/// of a record that is not one). Links, FIFOs and devices are passed over: no wirebench
/// run holds one.
fn holders(dir: &Path) -> Vec<(PathBuf, Result<Holder, String>)> {
    let Ok(entries) = std::fs::read_dir(dir.join("shards")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        if name == GATE || path.extension().is_none_or(|x| x != "lock") {
            continue;
        }
        let Some(file) = crate::rundir::open_lock_to_read(&path) else {
            continue;
        };
        if let Err((mut f, Errno::EWOULDBLOCK)) = Flock::lock(file, FlockArg::LockSharedNonblock) {
            out.push((path, read_record(&mut f)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The holder a lock file records, or its text when it is not one.
fn read_record(f: &mut File) -> Result<Holder, String> {
    let mut text = String::new();
    let _ = f.rewind();
    let _ = Read::by_ref(f).take(RECORD_BYTES).read_to_string(&mut text);
    serde_json::from_str(&text).map_err(|_| text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wb-lock-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn a_shard_is_locked_once_and_free_again_when_dropped() {
        let dir = tempdir("shard");
        let shard = Shard { index: 1, count: 2 };
        let held = DirLock::acquire(&dir, RunKind::Sweep, shard).expect("first");
        let e = DirLock::acquire(&dir, RunKind::Sweep, shard).expect_err("second");
        let text = e.to_string();
        assert!(text.contains("shard 1/2"), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        // This process's own lock is no other run's: `holder` looks past it.
        assert_eq!(DirLock::holder(&dir), None);
        drop(held);
        assert!(DirLock::acquire(&dir, RunKind::Sweep, shard).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn who_may_share_a_directory() {
        let h = |kind, index, count| Holder {
            kind,
            shard: Shard { index, count },
            pid: 1,
            host: "h".into(),
        };
        let s02 = h(RunKind::Sweep, 0, 2);
        assert!(s02.may_share(&h(RunKind::Sweep, 1, 2)));
        assert!(!s02.may_share(&h(RunKind::Sweep, 0, 1)));
        assert!(!s02.may_share(&h(RunKind::Sweep, 1, 3)));
        assert!(!s02.may_share(&h(RunKind::LabScenario, 1, 2)));
        assert!(!s02.may_share(&h(RunKind::Merge, 0, 1)));
        assert!(!h(RunKind::LabScenario, 0, 1).may_share(&h(RunKind::LabScenario, 0, 1)));
        assert_eq!(s02.describe(), "`sweep --shard 0/2` (pid 1 on h)");
    }

    #[test]
    fn a_lock_file_that_is_a_link_or_a_fifo_is_refused_and_left_alone() {
        let dir = tempdir("special");
        std::fs::create_dir_all(dir.join("shards")).expect("shards");
        let outside = dir.join("outside");
        std::fs::write(&outside, b"keep").expect("outside");
        let lock = DirLock::path(&dir, RunKind::Sweep, Shard::WHOLE);
        std::os::unix::fs::symlink(&outside, &lock).expect("link");
        let e = DirLock::acquire(&dir, RunKind::Sweep, Shard::WHOLE).expect_err("a link");
        assert!(e.to_string().contains("a symbolic link"), "{e}");
        assert_eq!(std::fs::read(&outside).expect("read"), b"keep");
        std::fs::remove_file(&lock).expect("rm");
        let ok = std::process::Command::new("mkfifo").arg(&lock).status();
        assert!(ok.is_ok_and(|s| s.success()));
        let e = DirLock::acquire(&dir, RunKind::Sweep, Shard::WHOLE).expect_err("a FIFO");
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        assert_eq!(DirLock::holder(&dir), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
