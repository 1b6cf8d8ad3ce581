//! Trace files: read once per file however many links replay them, read as a stream (the
//! text is never held whole), and named by their file when a link crosses a process
//! boundary (`lab up`'s holder reads the file again and checks it is the same trace).
//!
//! A scenario of 8 links on one 64 MiB trace once held it 8 times over, each copy 4 bytes
//! an opportunity and the text beside it while it was parsed; now the links share one copy
//! of the compact times ([`super::times`]). What that costs is measured in SECURITY.md.

use std::io::BufRead;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, Weak};

use serde::{Deserialize, Serialize};
use wirebench_report::input::InputError;

use super::{Inner, Parser, Trace, TraceError, MAX_TRACE_BYTES};

/// What tells one file's contents from another's without reading it: its device and inode,
/// size and modification time. A file edited in place gets a new time, so it is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_s: i64,
    mtime_ns: i64,
}

impl FileKey {
    fn of(m: &std::fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_s: m.mtime(),
            mtime_ns: m.mtime_nsec(),
        }
    }
}

/// The traces loaded and still held by some link, by file. Weak: a trace no link holds any
/// more is freed, and read again if asked for again.
static LOADED: Mutex<Vec<(FileKey, Weak<Inner>)>> = Mutex::new(Vec::new());

impl Trace {
    /// Reads and parses a trace file, or shares the trace already read from it (the same
    /// file, unchanged). Its size is checked ([`MAX_TRACE_BYTES`]) before a byte of it is
    /// read, and it is read a line at a time; errors name the file.
    ///
    /// # Errors
    ///
    /// The file cannot be read, is not a regular file, is too large, or
    /// [`Trace::parse`] refuses it.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let f = wirebench_report::input::open_regular(path, "trace", MAX_TRACE_BYTES)
            .map_err(|e| TraceError::Read(Box::new(e)))?;
        let read_err = |source| {
            TraceError::Read(Box::new(InputError::Read {
                path: path.to_owned(),
                source,
            }))
        };
        let key = FileKey::of(&f.metadata().map_err(read_err)?);
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.retain(|(_, w)| w.strong_count() > 0);
        if let Some(inner) = loaded
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(Trace { inner });
        }
        // Held while it is read: two links asking for one file at once read it once.
        let trace = read(f, path)?;
        loaded.push((key, std::sync::Arc::downgrade(&trace.inner)));
        Ok(trace)
    }
}

/// Parses an open trace file a line at a time.
fn read(f: std::fs::File, path: &Path) -> Result<Trace, TraceError> {
    let in_file = |source| TraceError::InFile {
        path: path.to_owned(),
        source: Box::new(source),
    };
    let read_err = |source| {
        TraceError::Read(Box::new(InputError::Read {
            path: path.to_owned(),
            source,
        }))
    };
    let mut r = std::io::BufReader::with_capacity(64 << 10, f);
    let (mut line, mut total) = (Vec::new(), 0u64);
    let mut p = Parser::default();
    loop {
        line.clear();
        // A line is at most the file, which is capped: this never reads past the cap + 1.
        let n = std::io::Read::take(&mut r, MAX_TRACE_BYTES + 1 - total)
            .read_until(b'\n', &mut line)
            .map_err(read_err)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > MAX_TRACE_BYTES {
            // It grew while it was read.
            return Err(TraceError::Read(Box::new(InputError::TooLarge {
                path: path.to_owned(),
                what: "trace",
                size: total,
                max: MAX_TRACE_BYTES,
            })));
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = std::str::from_utf8(body).map_err(|_| in_file(TraceError::NotText))?;
        p.line(text).map_err(in_file)?;
    }
    let file = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    p.finish(Some(file)).map_err(in_file)
}

/// How a trace crosses a process boundary: its file, and what the other side must find
/// there (so that a file changed in between is refused, not replayed as another trace).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceRef {
    file: PathBuf,
    opportunities: u64,
    period_ms: u64,
}

impl Serialize for Trace {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some(file) = self.file() else {
            return Err(serde::ser::Error::custom(
                "a trace given as text has no file to pass on: load it from a file",
            ));
        };
        TraceRef {
            file: file.to_owned(),
            opportunities: self.len(),
            period_ms: self.period_ms(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Trace {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = TraceRef::deserialize(d)?;
        let t = Trace::load(&r.file).map_err(serde::de::Error::custom)?;
        if (t.len(), t.period_ms()) != (r.opportunities, r.period_ms) {
            return Err(serde::de::Error::custom(format!(
                "{}: the trace changed since it was read ({} opportunities in {} ms, now {} in \
                 {} ms)",
                r.file.display(),
                r.opportunities,
                r.period_ms,
                t.len(),
                t.period_ms()
            )));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wb-tracefile-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn a_file_is_loaded_once_while_held_and_again_once_changed() {
        let dir = scratch("once");
        let p = dir.join("t");
        std::fs::write(&p, "1\n2\n3\n").expect("write");
        let a = Trace::load(&p).expect("loads");
        let b = Trace::load(&dir.join(".").join("t")).expect("loads");
        assert!(std::sync::Arc::ptr_eq(&a.inner, &b.inner), "shared");
        assert_eq!(a.file(), Some(p.as_path()));
        // Changed (another size): read again.
        std::fs::write(&p, "1\n2\n3\n4\n").expect("rewrite");
        let c = Trace::load(&p).expect("loads");
        assert_eq!(c.len(), 4);
        assert!(!std::sync::Arc::ptr_eq(&a.inner, &c.inner));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_trace_crosses_as_its_file_and_a_changed_file_is_refused() {
        let dir = scratch("serde");
        let p = dir.join("t");
        std::fs::write(&p, "1\n5\n").expect("write");
        let t = Trace::load(&p).expect("loads");
        let json = serde_json::to_string(&t).expect("serializes");
        assert!(json.contains("\"opportunities\":2"), "{json}");
        let back: Trace = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back, t);
        std::fs::write(&p, "1\n5\n9\n").expect("rewrite");
        let e = serde_json::from_str::<Trace>(&json).expect_err("changed");
        assert!(e.to_string().contains("the trace changed"), "{e}");
        // A trace given as text names no file: it cannot cross.
        let text = Trace::parse("1\n").expect("parses");
        assert!(serde_json::to_string(&text).is_err());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_stream_read_is_a_text_parse() {
        let dir = scratch("stream");
        for (i, text) in ["1\r\n 3 \n3", "1\n2\n", "0\n0\n", "\u{a0}7\u{a0}\n"]
            .iter()
            .enumerate()
        {
            let p = dir.join(format!("t{i}"));
            std::fs::write(&p, text).expect("write");
            let (a, b) = (Trace::load(&p), Trace::parse(text));
            match (a, b) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{text:?}"),
                (Err(a), Err(b)) => assert!(a.to_string().ends_with(&b.to_string()), "{a}"),
                (a, b) => panic!("{text:?}: {a:?} against {b:?}"),
            }
        }
        let p = dir.join("latin1");
        std::fs::write(&p, b"1\n\xff\n").expect("write");
        let e = Trace::load(&p).expect_err("not text").to_string();
        assert!(e.contains("not a text file"), "{e}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
