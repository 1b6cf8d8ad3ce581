//! The one way wirebench writes into a directory that runs fill (a sweep's or a lab
//! scenario's `--out`, a shard's share of one, `merge -o`, `report -o`): its trial files,
//! summaries, manifests, records and lock files.
//!
//! Such a directory is shared: other shards, other runs, other users, or whoever can
//! create a name in it. What it holds at a name is never trusted to be what wirebench left
//! there (issue 45):
//!
//! - **A symbolic link is replaced, never written through.** A file is written to a
//!   temporary name beside its target and renamed over it ([`crate::output::Pending`]),
//!   and `rename` replaces the link itself: a trial file that links to a file outside the
//!   experiment, or to a sibling trial (`p001-r002.json → p001-r001.json`), leaves that
//!   file byte for byte as it was. Refusing the link instead would stop a resume on a name
//!   that is plainly not a trial of this run; replacing it loses nothing the user had.
//! - **A FIFO, a device, a socket or a directory is refused**, in one line naming the
//!   path and what it is: never opened (so never waited on), never renamed over.
//! - **A lock file is opened `O_NOFOLLOW | O_NONBLOCK`, then checked with `fstat`**: a
//!   link is refused (a lock cannot be replaced by a rename without racing the process
//!   that holds it), and so is anything that is not a regular file; nothing waits.
//! - **A subdirectory (`trials/`, `shards/`) that is a link is refused**: every file in
//!   it would be written wherever it leads.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::input::kind_of;
use crate::output::{NotRegular, Pending, WriteError};

/// Writes `bytes` to `path` whole or not at all, replacing a link there (never writing
/// through it).
///
/// # Errors
///
/// `path` names a FIFO, a device, a socket or a directory (refused, left as it is), or the
/// file cannot be written; `path` is left as it was.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_with(path, |w| w.write_all(bytes))
}

/// [`write`] with what `fill` writes (buffered).
///
/// # Errors
///
/// As [`write`].
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), WriteError> {
    refuse_special(path)?;
    Pending::create_exact(path)?.finish(fill)
}

/// Writes `bytes` to `path` whole unless something is there already (a file, a link, a
/// FIFO): `Ok(false)` then, and it is left as it was. A hard link does what a rename cannot
/// (fail when the name exists), on local file systems and on NFS alike, and never follows
/// a link at the name.
///
/// # Errors
///
/// The file cannot be written.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<bool, WriteError> {
    let fail = |source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    let tmp = crate::output::temp_path(path);
    let linked = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(source) => Err(fail(source)),
    }
}

/// Makes `dir` (and its parents) and each of `subs` in it, refusing a sub that is a link
/// or not a directory.
///
/// # Errors
///
/// A directory cannot be made, or a sub is a link or a file.
pub fn make_dirs(dir: &Path, subs: &[&str]) -> Result<(), WriteError> {
    let fail = |path: &Path, source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    for sub in subs {
        let path = dir.join(sub);
        match std::fs::create_dir(&path) {
            Ok(()) => continue,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail(&path, e)),
        }
        let meta = std::fs::symlink_metadata(&path).map_err(|e| fail(&path, e))?;
        if !meta.is_dir() {
            let what = match meta.file_type().is_symlink() {
                true => "a symbolic link",
                false => what(&meta),
            };
            return Err(fail(&path, NotRegular::instead_of(what, "a directory")));
        }
    }
    Ok(())
}

/// Opens (creating) the lock file `path` for reading and writing, without following a
/// link and without waiting: a link, a FIFO, a device or a directory there is refused.
///
/// # Errors
///
/// As said, or the file cannot be made.
pub fn open_lock(path: &Path) -> Result<File, WriteError> {
    let fail = |source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| fail(not_followed(path, e)))?;
    regular(f).map_err(fail)
}

/// Opens the lock file `path` to read who holds it: `None` when nothing is there, or when
/// what is there is a link or not a regular file (no process of wirebench's holds such a
/// file). Never waits.
pub fn open_lock_to_read(path: &Path) -> Option<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    regular(f).ok()
}

/// `f` if it is a regular file (by `fstat`, on what was opened).
fn regular(f: File) -> io::Result<File> {
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(NotRegular::err(kind_of(&meta)));
    }
    Ok(f)
}

/// `ELOOP` from an `O_NOFOLLOW` open says a link is there: said so.
fn not_followed(path: &Path, e: io::Error) -> io::Error {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    match e.raw_os_error() {
        Some(libc::ELOOP) if is_link => NotRegular::err("a symbolic link"),
        _ => e,
    }
}

/// Refuses a name that is not a regular file or a link (a link is replaced): what a run
/// checks of its outputs before its long work, and every write before it begins.
///
/// # Errors
///
/// A FIFO, a device, a socket or a directory at `path`.
pub fn refuse_special(path: &Path) -> Result<(), WriteError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.is_file() && !m.file_type().is_symlink() => Err(WriteError {
            path: path.to_path_buf(),
            source: NotRegular::err(kind_of(&m)),
        }),
        _ => Ok(()),
    }
}

fn what(meta: &std::fs::Metadata) -> &'static str {
    if meta.is_file() {
        "a file"
    } else {
        kind_of(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wirebench-rundir-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("trials")).expect("dir");
        d
    }

    fn mkfifo(p: &Path) {
        let ok = std::process::Command::new("mkfifo").arg(p).status();
        assert!(ok.is_ok_and(|s| s.success()), "mkfifo {}", p.display());
    }

    #[test]
    fn a_link_is_replaced_never_written_through() {
        let d = dir("links");
        let outside = d.join("outside");
        std::fs::write(&outside, b"the user's").expect("outside");
        let (r1, r2) = (d.join("trials/r1.json"), d.join("trials/r2.json"));
        std::os::unix::fs::symlink(&outside, &r1).expect("link");
        write(&r1, b"trial 1").expect("write");
        assert_eq!(std::fs::read(&outside).expect("read"), b"the user's");
        assert!(std::fs::symlink_metadata(&r1).expect("r1").is_file());
        // A sibling: r2 -> r1. r1 keeps its trial.
        std::os::unix::fs::symlink("r1.json", &r2).expect("link");
        write(&r2, b"trial 2").expect("write");
        assert_eq!(std::fs::read(&r1).expect("read"), b"trial 1");
        assert_eq!(std::fs::read(&r2).expect("read"), b"trial 2");
        // Written once: nothing at the name is replaced, a link neither.
        let m = d.join("manifest.json");
        std::os::unix::fs::symlink(&outside, &m).expect("link");
        assert!(!write_new(&m, b"{}").expect("write_new"));
        assert_eq!(std::fs::read(&outside).expect("read"), b"the user's");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_in_one_line_naming_it() {
        let d = dir("special");
        let fifo = d.join("trials/f.json");
        mkfifo(&fifo);
        let e = write(&fifo, b"x").expect_err("a FIFO").to_string();
        assert!(e.contains("f.json: a FIFO, not a regular file"), "{e}");
        assert!(e.contains("move it away") && !e.contains('\n'), "{e}");
        let sub = d.join("trials/d.json");
        std::fs::create_dir(&sub).expect("dir");
        let e = write(&sub, b"x").expect_err("a directory").to_string();
        assert!(e.contains("a directory, not a regular file"), "{e}");
        // A lock file: never opened through a link or as a FIFO, never waited on.
        let e = open_lock(&fifo).expect_err("a FIFO").to_string();
        assert!(e.contains("a FIFO, not a regular file"), "{e}");
        assert!(open_lock_to_read(&fifo).is_none());
        let link = d.join("l.lock");
        std::os::unix::fs::symlink(d.join("outside"), &link).expect("link");
        let e = open_lock(&link).expect_err("a link").to_string();
        assert!(e.contains("a symbolic link, not a regular file"), "{e}");
        assert!(!d.join("outside").exists());
        // A subdirectory that is a link is refused.
        std::os::unix::fs::symlink("/tmp", d.join("shards")).expect("link");
        let e = make_dirs(&d, &["trials", "shards"]).expect_err("a link");
        assert!(
            e.to_string().contains("a symbolic link, not a directory"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
