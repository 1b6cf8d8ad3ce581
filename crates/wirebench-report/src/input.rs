//! Checked loading of the files `plot`, `report` and `--resume` read back: results
//! documents, experiment summaries, trial files and packet logs.
//!
//! These files may come from anywhere (a colleague's experiment, a hostile server's packet
//! log), so each is read in three steps: its size is checked before a byte is read; serde
//! parses it into its type (so memory follows the file's size, never a count it declares);
//! then a pass over the JSON rejects values no measurement makes: non-finite numbers (as
//! strings too, since an experiment's point values are strings), negatives where a quantity
//! cannot be negative, and magnitudes past what any link does. Without that pass a time of
//! `1e308` s made the plot's axis zero-wide in floating point and the tick loop never ended.
//! Each refusal is one line that names the file and the key.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use wirebench_proto::packet_log::{LogError, Reader, Record};
use wirebench_proto::results::Results;

use crate::experiment::summary::ExperimentSummary;

/// The largest JSON document read (results of a day-long test at 100 ms intervals take
/// about 350 MB; a summary or a trial file a few kB).
pub const MAX_JSON_BYTES: u64 = 512 << 20;

/// The largest magnitude of a number in a document (1e15: a petabit/s in bits/s, 31 million
/// years in s). Plotting stays exact well below 2^53.
pub const MAX_VALUE: f64 = 1e15;

/// The smallest magnitude of a non-zero number. A latency of 1e-307 µs on a log axis made
/// its tick loop endless (1e-300 did not); no measurement comes near either, while rounding
/// leaves spreads of 1e-17 beside values of 0.1, so the bound is far from both.
pub const MIN_VALUE: f64 = 1e-100;

/// The largest time in seconds (`*_s` keys): 1e9 s is 31 years.
pub const MAX_SECONDS: f64 = 1e9;

/// The largest link log (CSV) read: an hour of 10 ms intervals over ten links is about
/// 600 MB.
pub const MAX_LINK_LOG_BYTES: u64 = 1 << 30;

/// The largest packet log read: records are read one at a time, so this only bounds how
/// long a read can run (an hour at 10 million datagrams a second is 1.2 TB; a day at
/// 100,000 is 280 GB).
pub const MAX_PACKET_LOG_BYTES: u64 = 1 << 40;

/// How many lost sequence numbers an arrival plot marks one by one, over the whole log; past
/// that, a loss run is marked at its two ends. It keeps the plot's memory bounded whatever
/// the log's runs declare.
pub const MAX_LOST_MARKS: u64 = 1_000_000;

/// Why a file was refused.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be opened or read.
    #[error("{}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A directory without a readable `summary.json`.
    #[error("{}: not an experiment directory: {source}", .dir.display())]
    NotAnExperiment {
        /// The directory.
        dir: PathBuf,
        /// Why `summary.json` could not be read.
        source: std::io::Error,
    },
    /// A FIFO, a device, a socket or a directory where a file should be.
    #[error("{what} {} is not a regular file ({kind}): remove it or move it away", .path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it should be.
        what: &'static str,
        /// What it is.
        kind: &'static str,
    },
    /// A trial file named twice in a summary: each trial is one file, counted once.
    #[error(
        "{}: {key} = {value:?} names a trial file {first} names already: each trial is counted once; fix or remove the entry",
        .path.display()
    )]
    Repeated {
        /// The summary.
        path: PathBuf,
        /// Where in it, e.g. `points[0].files[2]`.
        key: String,
        /// The name as written.
        value: String,
        /// Where it was named first.
        first: String,
    },
    /// A path, read from a file, that leads out of the experiment's directory.
    #[error(
        "{}: {key} = {value:?} leads outside {} ({why}): only files inside the experiment's \
         directory are read; fix or remove the entry",
        .path.display(),
        .dir.display()
    )]
    Outside {
        /// The file that named the path.
        path: PathBuf,
        /// Where in it, e.g. `points[0].files[2]`.
        key: String,
        /// The path as written.
        value: String,
        /// The experiment's directory.
        dir: PathBuf,
        /// Why.
        why: &'static str,
    },
    /// Larger than any file of its kind.
    #[error("{}: {size} bytes is too large for a wirebench {what} (at most {max} bytes)", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// What it should be.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// Not the JSON document it should be.
    #[error("{}: {source}", .path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A value no measurement makes.
    #[error("{}: {key} = {value}: {why}", .path.display())]
    Value {
        /// The file.
        path: PathBuf,
        /// Where, e.g. `intervals[3].start_s`.
        key: String,
        /// The value as written.
        value: String,
        /// What it should be.
        why: &'static str,
    },
    /// A completed trial's file that no run writes (`report`, `plot --kind box`).
    #[error(
        "{0}; a trial file no wirebench run writes: remove it (a rerun with the same --out \
         measures the trial again) and make the report again"
    )]
    BadTrial(Box<InputError>),
    /// A link log with a value no link makes.
    #[error("{}: {source}", .path.display())]
    LinkLog {
        /// The file.
        path: PathBuf,
        /// Why.
        source: wirebench_proto::link_log::CsvValueError,
    },
    /// A packet log that could not be read.
    #[error("{}: {source}", .path.display())]
    PacketLog {
        /// The file.
        path: PathBuf,
        /// Why.
        source: LogError,
    },
}

use wirebench_sys::input::kind_of;

/// Opens `path` for reading if it is a regular file of at most `max` bytes: the one way
/// wirebench opens a file it reads back. Opened `O_NONBLOCK` (a FIFO's open would wait for a
/// writer), then checked with `fstat` on what was opened (a link to `/dev/zero` is a device,
/// whatever its name), so a FIFO, a device, a socket or a directory is refused at once and
/// its size is never trusted to end.
///
/// # Errors
///
/// It cannot be opened, it is not a regular file, or it holds more than `max` bytes.
pub fn open_regular(
    path: &Path,
    what: &'static str,
    max: u64,
) -> Result<std::fs::File, InputError> {
    use wirebench_sys::input::Refused;
    wirebench_sys::input::open_regular(path, max).map_err(|e| match e {
        Refused::Io(source) => InputError::Read {
            path: path.to_path_buf(),
            source,
        },
        Refused::NotRegular(kind) => InputError::NotRegular {
            path: path.to_path_buf(),
            what,
            kind,
        },
        Refused::TooLarge(size) => InputError::TooLarge {
            path: path.to_path_buf(),
            what,
            size,
            max,
        },
    })
}

/// Reads at most `max` bytes of `path` (a file that grows while read is cut, then refused).
fn read_capped(path: &Path, what: &'static str, max: u64) -> Result<Vec<u8>, InputError> {
    let f = open_regular(path, what, max)?;
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > max {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            what,
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

/// Checks and parses a JSON document of type `T` from untrusted bytes; `path` only names it
/// in errors. The fuzz targets call this.
///
/// # Errors
///
/// Not JSON, not a `T`, or a value [`check_json`] refuses.
pub fn parse_json<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, InputError> {
    let json = |source| InputError::Json {
        path: path.to_path_buf(),
        source,
    };
    let t = serde_json::from_slice(bytes).map_err(json)?;
    // After the typed parse, so a document of the wrong shape gets serde's message.
    check_json(bytes).map_err(|b| InputError::Value {
        path: path.to_path_buf(),
        key: b.key,
        value: b.value,
        why: b.why,
    })?;
    Ok(t)
}

/// Reads any wirebench JSON document (results, summary, trial file, experiment record) of
/// type `T` with every check: size first, then serde, then the values. `sweep --resume` and
/// `lab scenario --resume` read trial files through this.
///
/// # Errors
///
/// Unreadable, too large, not a `T`, or a value out of range; one line naming the key.
pub fn json<T: DeserializeOwned>(path: &Path) -> Result<T, InputError> {
    let bytes = read_capped(path, "JSON document", MAX_JSON_BYTES)?;
    parse_json(path, &bytes)
}

/// Reads a results document (`run --json`, a trial's file).
///
/// # Errors
///
/// As [`json`].
pub fn results(path: &Path) -> Result<Results, InputError> {
    json(path)
}

/// Reads an experiment's `summary.json` from its directory, and checks that every trial file
/// it names stays inside `dir` (see [`inside`]).
///
/// # Errors
///
/// As [`json`], or a trial file named by an absolute path, through `..`, or through a link
/// out of `dir`, or one that is there but not a regular file.
pub fn summary(dir: &Path) -> Result<ExperimentSummary, InputError> {
    let path = dir.join("summary.json");
    let s: ExperimentSummary = json(&path).map_err(|e| match e {
        InputError::Read { source, .. } => InputError::NotAnExperiment {
            dir: dir.to_path_buf(),
            source,
        },
        e => e,
    })?;
    // A file is the same file however its name is spelled (`./a`, `trials//a`, a link to
    // it): known by its device and inode where it is there, else by its name's parts.
    let mut named: std::collections::HashMap<(u64, u64, PathBuf), (usize, usize)> =
        std::collections::HashMap::new();
    for (i, p) in s.points.iter().enumerate() {
        for (j, f) in p.files.iter().enumerate() {
            let outside = |why| InputError::Outside {
                path: path.clone(),
                key: format!("points[{i}].files[{j}]"),
                value: f.clone(),
                dir: dir.to_path_buf(),
                why,
            };
            relative(f).map_err(outside)?;
            let full = dir.join(f);
            let meta = std::fs::metadata(&full).ok();
            let key = match &meta {
                Some(m) => {
                    use std::os::unix::fs::MetadataExt;
                    (m.dev(), m.ino(), PathBuf::new())
                }
                None => (
                    0,
                    0,
                    Path::new(f)
                        .components()
                        .filter(|c| !matches!(c, std::path::Component::CurDir))
                        .collect(),
                ),
            };
            if let Some((a, b)) = named.insert(key, (i, j)) {
                return Err(InputError::Repeated {
                    path: path.clone(),
                    key: format!("points[{i}].files[{j}]"),
                    value: f.clone(),
                    first: format!("points[{a}].files[{b}]"),
                });
            }
            // A name that is not there is passed over, as a trial that could not be read.
            let Some(meta) = meta else {
                continue;
            };
            // A FIFO or a device: refused here, not when a plot reads it.
            if !meta.is_file() {
                return Err(InputError::NotRegular {
                    path: full,
                    what: "trial file",
                    kind: kind_of(&meta),
                });
            }
            resolves_inside(dir, &full).map_err(outside)?;
        }
    }
    Ok(s)
}

/// Checks that `name`, a path read from a file, is relative and does not go up: not
/// absolute, no `..`, not empty.
///
/// # Errors
///
/// Why it could lead out, in words.
pub fn relative(name: &str) -> Result<(), &'static str> {
    use std::path::Component;
    if name.is_empty() {
        return Err("an empty path");
    }
    for c in Path::new(name).components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err("it goes up with `..`"),
            Component::RootDir | Component::Prefix(_) => return Err("it is an absolute path"),
        }
    }
    Ok(())
}

/// Checks that `full`, a path under `dir` that exists, is still inside `dir` once its links
/// are resolved.
///
/// # Errors
///
/// Why it leads out, in words.
pub fn resolves_inside(dir: &Path, full: &Path) -> Result<(), &'static str> {
    let (Ok(real), Ok(base)) = (full.canonicalize(), dir.canonicalize()) else {
        return Err("a link that leads nowhere");
    };
    if real.starts_with(&base) {
        Ok(())
    } else {
        Err("a link that leads out of it")
    }
}

/// Reads a file that an earlier run saved (a trial file, when a run resumes): `Ok(None)`
/// when there is none, or when it does not read as a `T` (cut short by a crash, or from
/// another version: the trial is run again and the file replaced). Only the regular file
/// of at most [`MAX_JSON_BYTES`] is read; anything else is refused, since running on would
/// replace or ignore what the user put there.
///
/// # Errors
///
/// The file is there but is not a regular file, is too large, or cannot be read.
pub fn saved<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, InputError> {
    let f = match open_regular(path, "trial file", MAX_JSON_BYTES) {
        Ok(f) => f,
        Err(InputError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    // Streamed: a large trial is never held twice (its bytes and its document).
    let r = std::io::BufReader::new(f.take(MAX_JSON_BYTES + 1));
    Ok(serde_json::from_reader(r).ok())
}

/// Reads a JSON document of type `T` from a regular file of at most [`MAX_JSON_BYTES`],
/// streamed (never held as bytes beside the document), without [`check_json`]'s value
/// bounds: for wirebench's own records (manifests, shard records) and trials being merged.
/// `what` names the file's kind in errors.
///
/// # Errors
///
/// Not a regular file, too large, unreadable, or not a `T`.
pub fn json_streamed<T: DeserializeOwned>(
    path: &Path,
    what: &'static str,
) -> Result<T, InputError> {
    let f = open_regular(path, what, MAX_JSON_BYTES)?;
    // Cut at the cap, so a file that grows while read ends as a parse error.
    let r = std::io::BufReader::new(f.take(MAX_JSON_BYTES));
    serde_json::from_reader(r).map_err(|source| InputError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Opens a packet log for reading, record by record (see [`open_regular`]).
///
/// # Errors
///
/// Not a regular file, larger than [`MAX_PACKET_LOG_BYTES`], or unreadable.
pub fn packet_log(path: &Path) -> Result<std::fs::File, InputError> {
    open_regular(path, "packet log", MAX_PACKET_LOG_BYTES)
}

/// A value [`check_json`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    /// Where, e.g. `intervals[3].start_s`.
    pub key: String,
    /// The value as parsed.
    pub value: String,
    /// What it should be.
    pub why: &'static str,
}

/// Walks a JSON document without building it and refuses values no measurement makes:
/// magnitudes past [`MAX_VALUE`] (times in `*_s` keys past [`MAX_SECONDS`]), negative
/// numbers except in keys that can be negative (one-way delays, whose clocks may differ),
/// and strings that spell a number out of those bounds (`"inf"`, `"NaN"`, `"1e308"`).
/// Integers are u64 counters, sequence numbers and Unix times: any u64 is kept.
///
/// # Errors
///
/// The first bad value, or a document that is not JSON (with an empty key).
pub fn check_json(bytes: &[u8]) -> Result<(), BadValue> {
    let mut key = String::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut bad = None;
    let r = Walk {
        key: &mut key,
        bad: &mut bad,
    }
    .deserialize(&mut de);
    match (bad, r) {
        (Some(b), _) => Err(b),
        (None, Ok(())) => Ok(()),
        // Where the walk stopped, and why: `1e400` is JSON serde cannot hold as a number.
        (None, Err(e)) => Err(BadValue {
            key: if key.is_empty() {
                "(the document)".into()
            } else {
                key
            },
            value: format!("(at line {} column {})", e.line(), e.column()),
            why: match e.to_string() {
                m if m.contains("number out of range") => "a number out of range",
                _ if e.is_syntax() || e.is_eof() => "not JSON",
                _ => "not a document",
            },
        }),
    }
}

/// One node of the walk: `key` is its place in the document; the first bad value goes to
/// `bad` and the walk stops with an error.
struct Walk<'a> {
    key: &'a mut String,
    bad: &'a mut Option<BadValue>,
}

impl Walk<'_> {
    fn refuse<E: serde::de::Error>(self, value: String, why: &'static str) -> Result<(), E> {
        *self.bad = Some(BadValue {
            key: if self.key.is_empty() {
                "(the document)".into()
            } else {
                self.key.clone()
            },
            value,
            why,
        });
        Err(E::custom(why))
    }

    /// The last name in the key (`start_s` of `intervals[3].start_s`).
    fn leaf(&self) -> &str {
        let k = self.key.rsplit('.').next().unwrap_or("");
        k.split('[').next().unwrap_or(k)
    }

    fn number<E: serde::de::Error>(self, v: f64, shown: String) -> Result<(), E> {
        let leaf = self.leaf();
        let signed = self.key.contains("delay") || self.key.contains("offset");
        if !v.is_finite() {
            return self.refuse(shown, "not a finite number");
        }
        if v < 0.0 && !signed {
            return self.refuse(shown, "cannot be negative");
        }
        let max = if leaf.ends_with("_s") {
            MAX_SECONDS
        } else {
            MAX_VALUE
        };
        if v != 0.0 && v.abs() < MIN_VALUE {
            // Found by fuzz-smoke: a latency of 1e-308 µs made the log axis's loop endless.
            return self.refuse(shown, "too small (a non-zero value is at least 1e-100)");
        }
        if v.abs() > max {
            return self.refuse(
                shown,
                if max == MAX_SECONDS {
                    "out of range (a time is at most 1e9 s)"
                } else {
                    "out of range (at most 1e15)"
                },
            );
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        // Only negative integers come here; the same rules as a float.
        self.number(v as f64, v.to_string())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.number(v, format!("{v:e}"))
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        // A manifest's hash is hex: "1234e56789012345" spells a number no plot reads.
        let leaf = self.leaf();
        if leaf == "manifest" || leaf.ends_with("hash") {
            return Ok(());
        }
        // Point values of an experiment are strings that plots parse as numbers.
        match s.trim().parse::<f64>() {
            Ok(v) => self.number(v, format!("{s:?}")),
            Err(_) => Ok(()),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let base = self.key.len();
        let mut i = 0usize;
        loop {
            let _ = write!(self.key, "[{i}]");
            let more = seq.next_element_seed(Walk {
                key: self.key,
                bad: self.bad,
            })?;
            self.key.truncate(base);
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let base = self.key.len();
        while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if base > 0 {
                self.key.push('.');
            }
            // Keys are the writer's names; a crafted one is shown short.
            self.key.extend(k.chars().take(64));
            map.next_value_seed(Walk {
                key: self.key,
                bad: self.bad,
            })?;
            self.key.truncate(base);
        }
        Ok(())
    }
}

/// Reads a link log (CSV) with its size capped and its numbers checked
/// ([`wirebench_proto::link_log::check_csv`]); the text is then parsed by whoever draws it.
///
/// # Errors
///
/// Unreadable, too large, not UTF-8, or a value out of range; one line naming the file.
pub fn link_log_text(path: &Path) -> Result<String, InputError> {
    let bytes = read_capped(path, "link log", MAX_LINK_LOG_BYTES)?;
    let text = String::from_utf8(bytes).map_err(|e| InputError::Read {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })?;
    wirebench_proto::link_log::check_csv(&text).map_err(|source| InputError::LinkLog {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text)
}

/// What an arrival plot draws from a packet log: each datagram's sequence number and arrival
/// time since the first, and the sequence numbers to mark as lost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Arrivals {
    /// `(seq, seconds since the first arrival)` of one datagram record in `every`, in file
    /// order: at most [`MAX_ARRIVAL_DOTS`], more than a plot's pixels.
    pub received: Vec<(f64, f64)>,
    /// Datagram records in the log.
    pub received_count: u64,
    /// One record in this many is in `received` (1: every one).
    pub every: u64,
    /// `(seq, 0)` per lost datagram marked (see [`MAX_LOST_MARKS`]).
    pub lost: Vec<(f64, f64)>,
    /// Every datagram the log counts as lost, marked or not.
    pub lost_count: u64,
}

/// Most arrivals an arrival plot keeps: a plot 3.5 inches wide at 300 dpi has about a
/// thousand columns of pixels, so a log of millions of datagrams is drawn from an even
/// sample of them.
pub const MAX_ARRIVAL_DOTS: usize = 200_000;

/// Reads what an arrival plot needs from packet-log bytes: every datagram record while
/// there are at most [`MAX_ARRIVAL_DOTS`], then one in 2, 4, ... (every other one kept is
/// dropped each time the limit is passed, so the sample stays even). Memory is bounded by
/// that, plus [`MAX_LOST_MARKS`] marks, whatever the records claim or the log's length.
///
/// # Errors
///
/// What [`Reader`] refuses: bad magic, version, kind, a truncated record, a loss run past
/// the last sequence number.
pub fn arrivals_from(input: impl Read) -> Result<Arrivals, LogError> {
    let mut first = None;
    let mut out = Arrivals {
        every: 1,
        ..Arrivals::default()
    };
    let mut budget = MAX_LOST_MARKS;
    for rec in Reader::new(input)? {
        match rec? {
            Record::Datagram {
                seq,
                arrival_unix_ns,
                ..
            } => {
                let t0 = *first.get_or_insert(arrival_unix_ns);
                let k = out.received_count;
                out.received_count += 1;
                if !k.is_multiple_of(out.every) {
                    continue;
                }
                out.received
                    .push((seq as f64, arrival_unix_ns.saturating_sub(t0) as f64 / 1e9));
                if out.received.len() > MAX_ARRIVAL_DOTS {
                    // Keep records 0, 2·every, 4·every, ...: those at even places.
                    let mut i = 0;
                    out.received.retain(|_| {
                        i += 1;
                        i % 2 == 1
                    });
                    out.every *= 2;
                }
            }
            Record::Lost { first: s, count } => {
                // The reader guarantees count >= 1 and that the run's last sequence number,
                // s + count - 1, is a u64 (it may be u64::MAX, so s + count may not be).
                let last = s + (count - 1);
                out.lost_count = out.lost_count.saturating_add(count);
                if count <= budget.min(10_000) {
                    budget -= count;
                    out.lost.extend((s..=last).map(|q| (q as f64, 0.0)));
                } else {
                    // Long runs, and all runs once the budget is spent, are drawn as their ends.
                    out.lost.push((s as f64, 0.0));
                    out.lost.push((last as f64, 0.0));
                }
            }
        }
    }
    Ok(out)
}

/// Reads what an arrival plot needs from the packet log at `path` (see [`arrivals_from`]).
///
/// # Errors
///
/// Unreadable, or a record [`Reader`] refuses; one line naming the file.
pub fn arrivals(path: &Path) -> Result<Arrivals, InputError> {
    let f = packet_log(path)?;
    arrivals_from(std::io::BufReader::new(f)).map_err(|source| InputError::PacketLog {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(doc: &str) -> BadValue {
        check_json(doc.as_bytes()).expect_err("refused")
    }

    #[test]
    fn good_documents_pass() {
        for doc in [
            r#"{"a": 1, "b": [1.5, 2e9], "c": {"rate_bps": 1e12}, "d": "1G"}"#,
            r#"{"epoch_unix_ns": 18446744073709551615, "delay_ms": {"min": -3.5}}"#,
            r#"{"point": {"bytes": "1000000"}, "s": null, "t": true}"#,
            // Hashes are hex, and some spell numbers: identifiers, not values.
            r#"{"trial": {"manifest": "1234e56789012345"}, "manifest_hash": "9999999999999999"}"#,
        ] {
            assert_eq!(check_json(doc.as_bytes()), Ok(()), "{doc}");
        }
    }

    #[test]
    fn absurd_values_name_their_key() {
        let b = bad(r#"{"intervals": [{"start_s": 0}, {"start_s": 1e308}]}"#);
        assert_eq!(b.key, "intervals[1].start_s");
        assert!(b.why.contains("1e9 s"), "{b:?}");
        let b = bad(r#"{"end": {"sent_bps": -1}}"#);
        assert_eq!(
            (b.key.as_str(), b.why),
            ("end.sent_bps", "cannot be negative")
        );
        let b = bad(r#"{"points": [{"point": {"bytes": "NaN"}}]}"#);
        assert_eq!(b.key, "points[0].point.bytes");
        let b = bad(r#"{"x": "inf"}"#);
        assert_eq!(b.why, "not a finite number");
        let b = bad(r#"{"x": 2e15}"#);
        assert!(b.why.contains("1e15"));
        // serde_json itself refuses numbers that overflow to infinity: said so, with
        // where (issue 45: it read `  = : not JSON`).
        let b = bad(r#"{"x": 1e400}"#);
        assert_eq!((b.key.as_str(), b.why), ("x", "a number out of range"));
        assert!(b.value.contains("line 1 column"), "{b:?}");
    }

    /// fuzz-smoke's find: `results_json` hang 840165f8d739b3d1, `end.latency_us.p999 =
    /// 1e-308` drawn on a log axis.
    #[test]
    fn smoke_hang_840165f8_subnormal_latency_is_refused() {
        let b = bad(r#"{"end": {"latency_us": {"min": 3.4, "p999": 1e-308}}}"#);
        assert_eq!(b.key, "end.latency_us.p999");
        assert!(b.why.contains("too small"));
        assert_eq!(check_json(br#"{"stddev": 1e-17, "x": 0.0}"#), Ok(()));
    }

    #[test]
    fn loss_runs_are_marked_within_the_budget() {
        let mut bytes = wirebench_proto::packet_log::file_header().to_vec();
        let mut push = |r: Record| {
            let mut b = [0u8; wirebench_proto::packet_log::RECORD_LEN];
            r.encode(&mut b);
            bytes.extend_from_slice(&b);
        };
        // 1000 runs of 10,000: marked one by one they would be 10 million points.
        for k in 0..1000u64 {
            push(Record::Lost {
                first: k * 20_000,
                count: 10_000,
            });
        }
        push(Record::Datagram {
            kind: wirebench_proto::packet_log::Arrived::Received,
            seq: 5,
            size: 100,
            send_unix_ns: 1,
            arrival_unix_ns: 2,
        });
        let a = arrivals_from(&bytes[..]).expect("a log");
        assert!(a.lost.len() as u64 <= MAX_LOST_MARKS + 2 * 1000);
        assert_eq!(a.received.len(), 1);
    }

    #[test]
    fn a_long_log_is_drawn_from_an_even_sample_of_its_arrivals() {
        let mut bytes = wirebench_proto::packet_log::file_header().to_vec();
        let n = 500_001u64;
        for seq in 0..n {
            let mut b = [0u8; wirebench_proto::packet_log::RECORD_LEN];
            Record::Datagram {
                kind: wirebench_proto::packet_log::Arrived::Received,
                seq,
                size: 100,
                send_unix_ns: 1,
                arrival_unix_ns: 1_000 + seq,
            }
            .encode(&mut b);
            bytes.extend_from_slice(&b);
        }
        let a = arrivals_from(&bytes[..]).expect("a log");
        assert_eq!((a.received_count, a.every), (n, 4));
        assert!(a.received.len() <= MAX_ARRIVAL_DOTS);
        // Records 0, 4, 8, ... 500,000: the first and the last among them.
        assert_eq!(a.received.len() as u64, (n - 1) / 4 + 1);
        assert!(a
            .received
            .iter()
            .enumerate()
            .all(|(i, p)| p.0 == (4 * i) as f64));
        // A short log keeps every record.
        let short =
            &bytes[..bytes.len() - (n as usize - 10) * wirebench_proto::packet_log::RECORD_LEN];
        let a = arrivals_from(short).expect("a log");
        assert_eq!((a.received_count, a.every, a.received.len()), (10, 1, 10));
    }

    #[test]
    fn a_loss_run_that_ends_at_the_last_sequence_number_is_marked() {
        // Regression (fuzz smoke): a run of 2 from u64::MAX - 1 is valid, and counting to
        // first + count overflowed.
        let mut bytes = wirebench_proto::packet_log::file_header().to_vec();
        let mut b = [0u8; wirebench_proto::packet_log::RECORD_LEN];
        Record::Lost {
            first: u64::MAX - 1,
            count: 2,
        }
        .encode(&mut b);
        bytes.extend_from_slice(&b);
        let a = arrivals_from(&bytes[..]).expect("a log");
        assert_eq!(a.lost_count, 2);
        assert_eq!(
            a.lost,
            [((u64::MAX - 1) as f64, 0.0), (u64::MAX as f64, 0.0)]
        );
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wirebench-input-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn a_fifo_is_refused_without_blocking_and_a_missing_trial_is_none() {
        let d = temp_dir("fifo");
        let fifo = d.join("t.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()));
        // No writer ever opens it: a blocking open would hang here.
        let e = saved::<serde_json::Value>(&fifo).expect_err("refused");
        assert!(
            e.to_string()
                .ends_with("t.json is not a regular file (a FIFO): remove it or move it away"),
            "{e}"
        );
        assert!(saved::<serde_json::Value>(&d.join("none.json"))
            .expect("missing is fine")
            .is_none());
        std::fs::write(d.join("cut.json"), b"{\"a\": ").expect("write");
        assert!(saved::<serde_json::Value>(&d.join("cut.json"))
            .expect("a cut file is run again")
            .is_none());
        let e = open_regular(Path::new("/dev/zero"), "trial file", 10).expect_err("device");
        assert!(e.to_string().contains("(a character device)"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn names_from_files_stay_inside_the_directory() {
        for ok in ["trials/p001-r001.json", "./a.json"] {
            assert_eq!(relative(ok), Ok(()), "{ok}");
        }
        assert_eq!(relative("/etc/passwd"), Err("it is an absolute path"));
        assert_eq!(relative("../x"), Err("it goes up with `..`"));
        assert_eq!(relative("trials/../../x"), Err("it goes up with `..`"));
        assert_eq!(relative(""), Err("an empty path"));
        let d = temp_dir("inside");
        std::fs::create_dir_all(d.join("trials")).expect("trials");
        std::fs::write(d.join("trials/a.json"), b"{}").expect("a");
        std::os::unix::fs::symlink("a.json", d.join("trials/in.json")).expect("in");
        std::os::unix::fs::symlink("/etc/hostname", d.join("trials/out.json")).expect("out");
        assert_eq!(resolves_inside(&d, &d.join("trials/in.json")), Ok(()));
        assert_eq!(
            resolves_inside(&d, &d.join("trials/out.json")),
            Err("a link that leads out of it")
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
