//! The one way wirebench writes a file it leaves behind (results, summaries, CSV, plots,
//! `report.html`, trial files, shard records): whole or not at all.
//!
//! Written in place, an interrupted or failed write left a campaign's files broken: SIGINT
//! while `report` wrote turned an existing 94 MB `report.html` into 0 bytes, and a full disk
//! left 0-byte `.html` and `.svg` files. So every output goes to a temporary file beside its
//! target (same directory, so the rename cannot cross file systems), is synced, then renamed
//! over the target. On any error the temporary file is removed and the target is left as it
//! was. A process killed mid-write leaves its temporary file behind; [`clean_temps`] removes
//! those when a later run starts in that directory.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// What every temporary file's name holds, after the target's own name:
/// `.NAME.wirebench-tmp-PID-N@HOST`.
pub const TEMP_MARK: &str = ".wirebench-tmp-";

/// A temporary file older than this is left over whichever host wrote it: no write of
/// wirebench's takes an hour. (One from this host is removed as soon as its process is gone.)
pub const STALE_TEMP: Duration = Duration::from_secs(3600);

/// An output that could not be written; the file it would have replaced is intact.
#[derive(Debug, thiserror::Error)]
#[error(
    "writing {}: {source}; nothing was replaced (any earlier file of that name is as it was): \
     {}",
    .path.display(),
    hint(.source)
)]
pub struct WriteError {
    /// The file that was to be written.
    pub path: PathBuf,
    /// Why it could not be.
    pub source: io::Error,
}

/// What to do about a write that failed with `source`.
fn hint(source: &io::Error) -> &'static str {
    if source.get_ref().is_some_and(|e| e.is::<NotRegular>()) {
        "move it away (wirebench never writes into a FIFO, a device or a directory, nor \
         opens a lock file through a link) and run again"
    } else {
        "free space or fix the directory's permissions and run again"
    }
}

/// What is at a name where a file was to be written or a lock taken, when it is not a
/// regular file wirebench may replace or open.
#[derive(Debug, thiserror::Error)]
#[error("{what}, not {wanted}")]
pub struct NotRegular {
    /// What it is, in words (`a FIFO`, `a directory`, `a symbolic link`).
    pub what: &'static str,
    /// What it should be (`a regular file`, `a directory`).
    pub wanted: &'static str,
}

impl NotRegular {
    /// As an I/O error (for [`WriteError::source`]): `what` where a regular file should be.
    pub fn err(what: &'static str) -> io::Error {
        Self::instead_of(what, "a regular file")
    }

    /// As an I/O error: `what` where `wanted` should be.
    pub fn instead_of(what: &'static str, wanted: &'static str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, Self { what, wanted })
    }
}

/// The name of a temporary file beside `path`, unique to this host, process and call, so
/// that shards on several hosts sharing one directory never write the same one. The process
/// is named by its id and start time, so that a later process given the same id (a
/// container's first process, restarted) tells an earlier one's leftovers from its own. A
/// long target name is shortened (its start and a hash): the temporary name stays within
/// the 255 bytes a file name may have whenever the target's does.
pub fn temp_path(path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{}{TEMP_MARK}{}.{}-{n}@{}",
        short_name(&name),
        std::process::id(),
        own_start(),
        hostname()
    ))
}

/// `name` if short, else its first bytes and a hash of the whole.
fn short_name(name: &str) -> String {
    const KEEP: usize = 80;
    if name.len() <= 120 {
        return name.to_string();
    }
    let mut end = KEEP;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(name, &mut h);
    format!("{}~{:016x}", &name[..end], std::hash::Hasher::finish(&h))
}

/// When process `pid` started (clock ticks since boot, `/proc/PID/stat`'s 22nd field).
fn start_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (2nd field) may hold spaces and parentheses: count from its closing one.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This process's start time ([`start_of`]), or 0 where `/proc` does not say.
fn own_start() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| start_of(std::process::id()).unwrap_or(0))
}

/// An output begun: its temporary file made beside the target, which is not touched until
/// [`Pending::commit`] (or [`Pending::finish`]). Made before long work (a lab run, a test
/// whose packet log or received copy it is) so that a place that cannot be written is said
/// before the work, not after it; dropped uncommitted, the temporary file is removed.
#[derive(Debug)]
pub struct Pending {
    path: PathBuf,
    file: std::fs::File,
    tmp: TempGuard,
}

/// Removes a temporary file when dropped, unless disarmed (emptied) by a commit.
#[derive(Debug)]
struct TempGuard(PathBuf);

impl Drop for TempGuard {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl Pending {
    /// Makes the temporary file beside `path`, or beside the file `path` links to: a user's
    /// output that is a symbolic link is written through it, as a plain write would be.
    ///
    /// # Errors
    ///
    /// The directory cannot be written, or `path` is there and is not a regular file (a
    /// FIFO, a device or a directory is never replaced).
    pub fn create(path: &Path) -> Result<Self, WriteError> {
        let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        let target = match is_link {
            true => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            false => path.to_path_buf(),
        };
        Self::create_exact(&target)
    }

    /// Makes the temporary file beside `path`, never following a link there: committed, the
    /// file replaces whatever entry `path` names (a link is replaced, not written through).
    /// For directories others fill, such as a server's `--save-dir`.
    ///
    /// # Errors
    ///
    /// As [`Pending::create`].
    pub fn create_exact(path: &Path) -> Result<Self, WriteError> {
        let fail = |source| WriteError {
            path: path.to_path_buf(),
            source,
        };
        let old = std::fs::symlink_metadata(path).ok();
        if old
            .as_ref()
            .is_some_and(|m| !m.is_file() && !m.file_type().is_symlink())
        {
            let what = old
                .as_ref()
                .map_or("not a regular file", crate::input::kind_of);
            return Err(fail(NotRegular::err(what)));
        }
        let tmp = temp_path(path);
        // Readable too: a copy written out of order is hashed by reading it back.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(fail)?;
        let tmp = TempGuard(tmp);
        // A file replaced keeps its mode (a report kept private stays private).
        if let Some(old) = old.filter(std::fs::Metadata::is_file) {
            let _ = file.set_permissions(old.permissions());
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            tmp,
        })
    }

    /// The temporary file, for an output written as it goes (`&File` reads, writes and
    /// seeks); the target is untouched until [`Pending::commit`].
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// The file this output becomes when committed.
    pub fn target(&self) -> &Path {
        &self.path
    }

    /// Syncs what was written and renames it over the target.
    ///
    /// # Errors
    ///
    /// It could not be synced or renamed; the temporary file is removed and the target is
    /// left as it was.
    pub fn commit(self) -> Result<(), WriteError> {
        let Self {
            path,
            file,
            mut tmp,
        } = self;
        // Synced before the rename: else a crash can leave the new name on empty data.
        let done = file
            .sync_all()
            .and_then(|()| std::fs::rename(&tmp.0, &path));
        if let Err(source) = done {
            // The guard removes the temporary file.
            return Err(WriteError { path, source });
        }
        tmp.0 = PathBuf::new();
        // The rename itself made durable; a directory that cannot be synced (some network
        // file systems) still holds the whole file.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }

    /// Writes what `fill` writes (buffered), then [`Pending::commit`]s it.
    ///
    /// # Errors
    ///
    /// It could not be written, synced or renamed; the temporary file is removed and the
    /// target is left as it was.
    pub fn finish(
        self,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<(), WriteError> {
        let mut w = BufWriter::new(&self.file);
        let written = fill(&mut w).and_then(|()| w.flush());
        drop(w);
        match written {
            Ok(()) => self.commit(),
            Err(source) => Err(WriteError {
                path: self.path.clone(),
                source,
            }),
        }
    }
}

impl Write for Pending {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&self.file).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&self.file).flush()
    }
}

/// Writes `path` whole or not at all with what `fill` writes (buffered): a temporary file
/// beside it, synced, then renamed over it.
///
/// # Errors
///
/// The temporary file could not be made, written, synced or renamed; it is removed and
/// `path` is left as it was.
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), WriteError> {
    Pending::create(path)?.finish(fill)
}

/// Writes `bytes` to `path` whole or not at all (see [`write_with`]).
///
/// # Errors
///
/// As [`write_with`].
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_with(path, |w| w.write_all(bytes))
}

/// Removes the temporary files that interrupted writes left in `dir`: those of this host
/// whose process is gone, and any older than [`STALE_TEMP`]. Another live process's (a
/// shard on this host, or on another sharing the directory) are kept. Returns how many
/// were removed; a directory that cannot be listed has none.
pub fn clean_temps(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let host = hostname();
    let now = SystemTime::now();
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(owner) = temp_owner(&name.to_string_lossy()) else {
            continue;
        };
        // Only plain files: a link or directory of that name is not one of ours.
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let dead = owner.host == host && !owner.is_this_process() && owner.is_gone();
        let stale = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age > STALE_TEMP);
        if (dead || stale) && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether `name` is a temporary file this process is writing now (its output not yet
/// committed): a directory's owner counts those apart (a `--save-dir` counts the transfers
/// it is writing at their whole size).
pub fn written_by_this_process(name: &str) -> bool {
    temp_owner(name).is_some_and(|o| o.is_this_process())
}

/// This host's name (the kernel's), for the records of who ran what.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// [`clean_temps`] in an experiment directory: the directory, its `trials/` and `shards/`.
pub fn clean_experiment_temps(dir: &Path) {
    for sub in [".", "trials", "shards"] {
        clean_temps(&dir.join(sub));
    }
}

/// Who wrote a temporary file.
#[derive(Debug, PartialEq, Eq)]
struct TempOwner {
    pid: u32,
    /// The process's start time (none in names made before it was recorded).
    start: Option<u64>,
    host: String,
}

impl TempOwner {
    /// Whether the writer is this process.
    fn is_this_process(&self) -> bool {
        self.pid == std::process::id()
            && self.start.is_none_or(|s| s == own_start())
            && self.host == hostname()
    }

    /// Whether the writer, on this host, is gone: no process has its id, or the one that
    /// has it started at another time.
    fn is_gone(&self) -> bool {
        match (start_of(self.pid), self.start) {
            (None, _) => !Path::new(&format!("/proc/{}", self.pid)).exists(),
            (Some(now), Some(then)) => now != then,
            (Some(_), None) => false,
        }
    }
}

/// The writer of `name` if it is one of [`temp_path`]'s names.
fn temp_owner(name: &str) -> Option<TempOwner> {
    if !name.starts_with('.') {
        return None;
    }
    let (_, tail) = name.rsplit_once(TEMP_MARK)?;
    let (ids, host) = tail.split_once('@')?;
    let (process, n) = ids.split_once('-')?;
    n.parse::<u64>().ok()?;
    let (pid, start) = match process.split_once('.') {
        Some((pid, start)) => (pid, Some(start.parse().ok()?)),
        None => (process, None),
    };
    Some(TempOwner {
        pid: pid.parse().ok()?,
        start,
        host: host.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wirebench-output-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_no_temp() {
        let d = dir("whole");
        let p = d.join("report.html");
        std::fs::write(&p, b"old").expect("old");
        let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
        std::fs::set_permissions(&p, private).expect("chmod");
        write(&p, b"new").expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), b"new");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&p).expect("meta").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(&d).expect("ls").count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_removes_its_temp() {
        let d = dir("failed");
        let p = d.join("summary.csv");
        std::fs::write(&p, b"old").expect("old");
        let e = write_with(&p, |w| {
            w.write_all(&[b'x'; 100_000])?;
            Err(io::Error::other("disk full"))
        })
        .expect_err("fails");
        assert!(e.to_string().contains("summary.csv"), "{e}");
        assert_eq!(std::fs::read(&p).expect("read"), b"old");
        assert_eq!(std::fs::read_dir(&d).expect("ls").count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn temp_names_are_recognised_and_only_dead_writers_temps_are_cleaned() {
        let t = temp_path(Path::new("/x/0001.json"));
        let name = t.file_name().expect("name").to_string_lossy().into_owned();
        assert!(name.starts_with(".0001.json.wirebench-tmp-"), "{name}");
        let owner = temp_owner(&name).expect("ours");
        assert_eq!(owner.pid, std::process::id());
        assert_eq!(temp_owner("0001.json"), None);
        assert_eq!(temp_owner(".a.wirebench-tmp-x-1@h"), None);

        let d = dir("clean");
        let host = hostname();
        // No process has pid 4194304 (above Linux's largest pid).
        let dead = d.join(format!(".a.json{TEMP_MARK}4194304-0@{host}"));
        let mine = d.join(format!(".b.json{TEMP_MARK}{}-0@{host}", std::process::id()));
        let elsewhere = d.join(format!(".c.json{TEMP_MARK}4194304-0@another-host"));
        let kept = d.join("a.json");
        for p in [&dead, &mine, &elsewhere, &kept] {
            std::fs::write(p, b"x").expect("write");
        }
        assert_eq!(clean_temps(&d), 1);
        assert!(!dead.exists());
        assert!(mine.exists() && elsewhere.exists() && kept.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_output_written_as_it_goes_appears_only_when_committed() {
        let d = dir("streamed");
        let p = d.join("packets.wbpl");
        std::fs::write(&p, b"the last run's log").expect("old");
        let mut out = Pending::create(&p).expect("create");
        out.write_all(b"new records").expect("write");
        assert_eq!(std::fs::read(&p).expect("read"), b"the last run's log");
        out.commit().expect("commit");
        assert_eq!(std::fs::read(&p).expect("read"), b"new records");

        // Given up (dropped uncommitted): the old file stays and no temporary is left.
        let mut out = Pending::create(&p).expect("create");
        out.write_all(b"half").expect("write");
        drop(out);
        assert_eq!(std::fs::read(&p).expect("read"), b"new records");
        assert_eq!(std::fs::read_dir(&d).expect("ls").count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fifo_or_directory_is_never_replaced() {
        let d = dir("special");
        let fifo = d.join("fifo");
        mkfifo(&fifo);
        let e = Pending::create(&fifo).expect_err("a FIFO");
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        assert!(Pending::create_exact(&d).is_err());
        assert!(std::fs::symlink_metadata(&fifo)
            .expect("kept")
            .file_type()
            .is_fifo());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_link_is_written_through_by_create_and_replaced_by_create_exact() {
        let d = dir("links");
        let real = d.join("real.json");
        let link = d.join("link.json");
        std::fs::write(&real, b"old").expect("real");
        std::os::unix::fs::symlink(&real, &link).expect("link");
        write(&link, b"through").expect("write");
        assert_eq!(std::fs::read(&real).expect("read"), b"through");
        assert!(link
            .symlink_metadata()
            .expect("link")
            .file_type()
            .is_symlink());

        Pending::create_exact(&link)
            .expect("create")
            .finish(|w| w.write_all(b"own"))
            .expect("finish");
        assert!(link.symlink_metadata().expect("file").is_file());
        assert_eq!(std::fs::read(&real).expect("read"), b"through");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A FIFO made with the `mkfifo` tool, so this crate keeps no unsafe for a test.
    fn mkfifo(p: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mkfifo {}", p.display());
    }

    #[test]
    fn an_earlier_process_with_this_processs_id_is_told_apart_by_its_start() {
        let d = dir("reused-pid");
        let (pid, host) = (std::process::id(), hostname());
        // As a container's first process leaves it, restarted under the same id.
        let earlier = format!(".a.json{TEMP_MARK}{pid}.{}-0@{host}", own_start() + 1);
        let mine = temp_path(&d.join("b.json"));
        let mine_name = mine
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(!written_by_this_process(&earlier));
        assert!(written_by_this_process(&mine_name));
        std::fs::write(d.join(&earlier), b"x").expect("write");
        std::fs::write(&mine, b"x").expect("write");
        assert_eq!(clean_temps(&d), 1);
        assert!(mine.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_long_target_name_gets_a_temporary_name_a_file_system_takes() {
        let d = dir("long");
        let name = format!("{}.bin", "n".repeat(251));
        let p = d.join(&name);
        write(&p, b"whole").expect("a 255-byte name is written");
        assert_eq!(std::fs::read(&p).expect("read"), b"whole");
        let t = temp_path(&p);
        assert!(t.file_name().expect("name").len() <= 255);
        assert!(temp_owner(&t.file_name().expect("name").to_string_lossy()).is_some());
        let _ = std::fs::remove_dir_all(&d);
    }
}
