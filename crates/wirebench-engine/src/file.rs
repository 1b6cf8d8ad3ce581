//! File transfers (`--file`): the sender reads a file into its messages, the receiver writes
//! what arrives to a file, and both hash the file's bytes (XXH3-64) so the results can say
//! whether the copy is identical. Over UDP streaming a datagram may be lost or late: the
//! receiver writes each at its offset and reports the byte ranges that never arrived. The
//! copy is written beside its name and takes it only when whole: one with holes, or cut off,
//! is removed (the results list what is missing and say why nothing was kept), so a copy
//! under the name is always the file, and a peer cannot fill a `--save-dir` with sparse or
//! partial files.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use thiserror::Error;
use wirebench_proto::results::FileReport;
use wirebench_proto::units::format_bytes;
use wirebench_stats::LostRun;
use wirebench_sys::output::{clean_temps, written_by_this_process, Pending};
use xxhash_rust::xxh3::Xxh3;

/// Most missing ranges a report lists; more are counted, not listed.
const MAX_RANGES: usize = 10_000;

/// How much a server's `--save-dir` may hold unless `--save-quota` says otherwise: enough
/// for a few large transfers, far from filling a disk.
pub const DEFAULT_SAVE_QUOTA: u64 = 10_000_000_000;

/// Most files a `--save-dir` may hold: each costs an inode and a directory entry whatever
/// its size, and each transfer's check lists the directory.
pub const MAX_SAVED_FILES: usize = 10_000;

/// What a file costs the disk at least, whatever its length: a block.
const BLOCK_BYTES: u64 = 4096;

/// Where a server saves the files clients send (`--save-dir`), and the most it may hold in
/// all (`--save-quota`, and [`MAX_SAVED_FILES`] files): what is there already, counted on
/// disk when a transfer asks, and the transfers being written, each at its whole size.
#[derive(Debug, Clone)]
pub struct SaveDir {
    path: PathBuf,
    quota_bytes: u64,
    /// Transfers being saved now: their paths and sizes on disk.
    writing: Arc<Mutex<HashMap<PathBuf, u64>>>,
}

/// A transfer that would take `--save-dir` past its quota.
#[derive(Debug, Error)]
pub enum OverQuota {
    /// Past `--save-quota`.
    #[error("saving this {} file would take the server's --save-dir past its --save-quota {} ({} used): send a smaller file, or ask the operator to make room", format_bytes(*.asked), format_bytes(*.quota), format_bytes(*.used))]
    Bytes {
        /// The transfer's size on disk.
        asked: u64,
        /// The quota.
        quota: u64,
        /// Held on disk by saved files and transfers being written.
        used: u64,
    },
    /// Past [`MAX_SAVED_FILES`].
    #[error("the server's --save-dir holds its most files ({MAX_SAVED_FILES}): ask the operator to make room")]
    Files,
}

/// What `bytes` of file take on disk at least: whole blocks, one at least.
fn on_disk(bytes: u64) -> u64 {
    bytes
        .div_ceil(BLOCK_BYTES)
        .max(1)
        .saturating_mul(BLOCK_BYTES)
}

impl SaveDir {
    /// Saves into `path`, at most `quota_bytes` in all. The temporary files of copies a
    /// server that is gone was writing are removed.
    pub fn new(path: PathBuf, quota_bytes: u64) -> Self {
        clean_temps(&path);
        Self {
            path,
            quota_bytes,
            writing: Arc::default(),
        }
    }

    /// Room for a `bytes`-byte copy named `name`: its path and a hold on the room, given
    /// back when the hold is dropped (by then the file itself counts), or why not.
    pub fn reserve(&self, name: &str, bytes: u64) -> Result<(PathBuf, QuotaHold), OverQuota> {
        let path = self.path.join(name);
        let mut writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let (saved_files, saved_bytes) = self.saved(&writing);
        if saved_files.saturating_add(writing.len()) >= MAX_SAVED_FILES {
            return Err(OverQuota::Files);
        }
        let used = saved_bytes.saturating_add(writing.values().sum());
        let asked = on_disk(bytes);
        if used.saturating_add(asked) > self.quota_bytes {
            let quota = self.quota_bytes;
            return Err(OverQuota::Bytes { asked, quota, used });
        }
        writing.insert(path.clone(), asked);
        let hold = QuotaHold {
            writing: Arc::clone(&self.writing),
            path: path.clone(),
        };
        Ok((path, hold))
    }

    /// The directory's entries (but the copies being written) and what its regular files
    /// take on disk: their blocks, or their length in whole blocks if more (a sparse copy
    /// may fill in). Links and other kinds are not followed: only what wirebench wrote is
    /// there. The listing stops at [`MAX_SAVED_FILES`] entries.
    fn saved(&self, writing: &HashMap<PathBuf, u64>) -> (usize, u64) {
        use std::os::unix::fs::MetadataExt;
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return (0, 0);
        };
        let (mut files, mut bytes) = (0usize, 0u64);
        for e in entries.filter_map(Result::ok).take(MAX_SAVED_FILES) {
            // A copy being written is counted at its whole size in `writing`, under the
            // name it will take; its temporary file is not counted twice.
            if writing.contains_key(&e.path())
                || written_by_this_process(&e.file_name().to_string_lossy())
            {
                continue;
            }
            files += 1;
            if let Ok(m) = e.metadata() {
                if m.is_file() {
                    let blocks = m.blocks().saturating_mul(512);
                    bytes = bytes.saturating_add(blocks.max(on_disk(m.len())));
                }
            }
        }
        (files, bytes)
    }
}

/// Room taken in a [`SaveDir`] for one transfer; given back when dropped.
#[derive(Debug)]
pub struct QuotaHold {
    writing: Arc<Mutex<HashMap<PathBuf, u64>>>,
    path: PathBuf,
}

impl Drop for QuotaHold {
    fn drop(&mut self) {
        let mut writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        writing.remove(&self.path);
    }
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

/// The file to send could not be read as far as the transfer needs: it shrank or became
/// unreadable after it was opened.
#[derive(Debug, Error)]
#[error("reading the file to send: {0}")]
pub struct FileReadError(#[from] std::io::Error);

/// The sending side of a file transfer.
pub struct FileSource {
    reader: BufReader<File>,
    hasher: Xxh3,
    bytes: u64,
}

impl FileSource {
    /// Opens `path` for sending; its size is the transfer's.
    pub fn open(path: &Path) -> std::io::Result<(Self, u64)> {
        // Non-blocking open, then a look at what was opened: a FIFO or a device opens
        // without waiting for a writer and is refused, never read.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let src = Self {
            reader: BufReader::with_capacity(1 << 20, f),
            hasher: Xxh3::new(),
            bytes: 0,
        };
        Ok((src, meta.len()))
    }

    /// Fills `buf` with the file's next bytes (a file that shrank under us is an error).
    pub fn fill(&mut self, buf: &mut [u8]) -> Result<(), FileReadError> {
        self.reader.read_exact(buf)?;
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
        Ok(())
    }

    /// Fills `buf` with the file's bytes from `offset` (pread), hashing nothing: a UDP
    /// sender reads each datagram's chunk at the place its sequence number gives, however
    /// often a partial send makes it read it, and hashes only what left ([`Self::sent`]).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), FileReadError> {
        self.reader.get_ref().read_exact_at(buf, offset)?;
        Ok(())
    }

    /// Counts and hashes file bytes that were sent, given in the file's order.
    pub fn sent(&mut self, buf: &[u8]) {
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
    }

    /// What was sent.
    pub fn report(&self) -> FileReport {
        FileReport {
            bytes: self.bytes,
            digest: Some(hex(self.hasher.digest())),
            ..FileReport::default()
        }
    }
}

/// The receiving side of a file transfer.
pub struct FileSink {
    /// The copy being saved: a temporary file that takes its name when the copy is finished.
    out: Option<Pending>,
    hasher: Xxh3,
    bytes: u64,
    /// Out-of-order writes happened (UDP streaming): the digest is made by reading the file
    /// back at the end, when there is one.
    scattered: bool,
    missing: Vec<(u64, u64)>,
    missing_more: u64,
    error: Option<String>,
    /// The most bytes saved, and the end of the copy.
    max_bytes: u64,
    /// The room this copy holds in the server's `--save-dir`, while it is written.
    _room: Option<QuotaHold>,
}

impl FileSink {
    /// A sink that saves to `path` in a directory others fill (a server's `--save-dir`), or
    /// only hashes with `None`. The copy is written to a temporary file beside `path` and
    /// renamed over it when finished: a test that fails or is cut off midway leaves no half
    /// copy and any earlier file of that name as it was. Whatever `path` names now (a link,
    /// a FIFO) is never written through.
    pub fn create(path: Option<PathBuf>) -> std::io::Result<Self> {
        Ok(Self::saving(match path {
            Some(p) => Some(Pending::create_exact(&p).map_err(|e| e.source)?),
            None => None,
        }))
    }

    /// A sink that saves to a path the user named (`run -R --file F --save PATH`), or only
    /// hashes with `None`: as [`FileSink::create`], but a link at `path` is written through
    /// (the file it names is replaced), as a plain write would.
    pub fn create_for_user(path: Option<PathBuf>) -> std::io::Result<Self> {
        Ok(Self::saving(match path {
            Some(p) => Some(Pending::create(&p).map_err(|e| e.source)?),
            None => None,
        }))
    }

    fn saving(out: Option<Pending>) -> Self {
        Self {
            out,
            hasher: Xxh3::new(),
            bytes: 0,
            scattered: false,
            missing: Vec::new(),
            missing_more: 0,
            error: None,
            max_bytes: u64::MAX,
            _room: None,
        }
    }

    /// Keeps `room` (in a `--save-dir`'s quota) until the copy is finished.
    pub fn holding(mut self, room: QuotaHold) -> Self {
        self._room = Some(room);
        self
    }

    /// Saves at most `max_bytes` (the transfer's own size): a peer that sends more, or
    /// writes at far offsets, cannot grow the copy past what the test declared.
    pub fn bounded(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Stops saving, with why.
    fn over(&mut self) {
        self.error
            .get_or_insert("more bytes arrived than the file holds: the copy was cut there".into());
    }

    /// Appends bytes that arrived in order.
    pub fn write(&mut self, buf: &[u8]) {
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
        let room = self.max_bytes.saturating_sub(self.bytes - buf.len() as u64);
        let buf = if (buf.len() as u64) > room {
            self.over();
            &buf[..room as usize]
        } else {
            buf
        };
        if let Some(out) = &mut self.out {
            if let Err(e) = out.write_all(buf) {
                self.error.get_or_insert(format!("saving the file: {e}"));
                self.out = None;
            }
        }
    }

    /// Writes bytes that belong at `offset` (UDP streaming: datagrams in any order).
    pub fn write_at(&mut self, offset: u64, buf: &[u8]) {
        self.scattered = true;
        self.bytes += buf.len() as u64;
        let room = self.max_bytes.saturating_sub(offset);
        let buf = if (buf.len() as u64) > room {
            self.over();
            &buf[..room as usize]
        } else {
            buf
        };
        if let Some(out) = &self.out {
            if let Err(e) = out.file().write_all_at(buf, offset) {
                self.error.get_or_insert(format!("saving the file: {e}"));
                self.out = None;
            }
        }
    }

    /// Records that sequence numbers `run` never arrived: with `chunk` file bytes per
    /// datagram of a `file_bytes` file, the bytes they carried are missing.
    pub fn lost(&mut self, run: LostRun, chunk: u64, file_bytes: u64) {
        let start = run.first.saturating_mul(chunk).min(file_bytes);
        let end = run
            .first
            .saturating_add(run.count)
            .saturating_mul(chunk)
            .min(file_bytes);
        if end <= start {
            return;
        }
        let listed = self.missing.len();
        match self.missing.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ if listed < MAX_RANGES => self.missing.push((start, end)),
            _ => self.missing_more += 1,
        }
    }

    /// What was received, saved and missed. A whole copy (every byte of the file arrived,
    /// none missing, nothing failed) takes its name here; any other is removed, so a copy
    /// under the name is always the whole file, and a transfer cut off or declared far
    /// larger than it sent leaves nothing behind.
    pub fn finish(mut self, file_bytes: u64) -> FileReport {
        let whole = self.error.is_none()
            && self.missing.is_empty()
            && self.missing_more == 0
            && self.bytes >= file_bytes;
        if !whole {
            if let Some(out) = self.out.take() {
                drop(out);
                self.error.get_or_insert(format!(
                    "the copy was not whole ({} of {file_bytes} bytes arrived, {} ranges missing): not saved",
                    self.bytes.min(file_bytes),
                    self.missing.len() as u64 + self.missing_more
                ));
            }
        }
        if let Some(out) = &self.out {
            // Never longer than the file, whatever a peer sent past its end.
            let _ = out.file().set_len(file_bytes);
        }
        let digest = match (&self.out, self.scattered) {
            (_, false) => Some(hex(self.hasher.digest())),
            // Read the file back: what a user of the copy gets. Only a whole copy is: its
            // cost is that of the bytes that arrived.
            (Some(out), true) => read_back(out.file()).map(hex),
            (None, true) => None,
        };
        let saved_as = self.out.take().and_then(|out| {
            let name = out.target().display().to_string();
            match out.commit() {
                Ok(()) => Some(name),
                Err(e) => {
                    self.error.get_or_insert(format!("saving the file: {e}"));
                    None
                }
            }
        });
        FileReport {
            bytes: self.bytes,
            digest,
            saved_as,
            missing: self.missing,
            missing_more: self.missing_more,
            error: self.error,
        }
    }
}

/// The XXH3-64 of a file read from its start, if it could be read whole.
fn read_back(mut f: &File) -> Option<u64> {
    let mut h = Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    f.seek(SeekFrom::Start(0)).ok()?;
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Some(h.digest()),
            Ok(n) => h.update(&buf[..n]),
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("wirebench-file-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_save_dir_holds_no_more_than_its_quota_counting_transfers_being_written() {
        let dir = tmp("quota");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // 600 bytes take a block.
        std::fs::write(dir.join("earlier"), vec![7u8; 600]).unwrap();
        let save = SaveDir::new(dir.clone(), 5 * 4096);
        let (path, hold) = save.reserve("a", 3 * 4096).expect("1 + 3 blocks fit in 5");
        assert_eq!(path, dir.join("a"));
        // The transfer being written counts at its whole size, before it wrote a byte; a
        // 1-byte file costs a block.
        let over = save.reserve("b", 4097).unwrap_err();
        assert!(
            matches!(
                over,
                OverQuota::Bytes {
                    asked: 8192,
                    quota: 20480,
                    used: 16384
                }
            ),
            "{over:?}"
        );
        assert!(over.to_string().contains("--save-quota 20.48 KB"), "{over}");
        // Its file, as it grows, is not counted twice.
        std::fs::write(&path, vec![7u8; 150]).unwrap();
        assert!(save.reserve("c", 1).is_ok());
        // Done: the file counts as it is on disk, and the rest is free again.
        drop(hold);
        assert!(save.reserve("d", 4096).is_ok());
        assert!(save.reserve("e", u64::MAX).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_save_dir_holds_no_more_than_its_most_files() {
        let dir = tmp("files");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..MAX_SAVED_FILES - 1 {
            std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
        }
        let save = SaveDir::new(dir.clone(), u64::MAX);
        let hold = save.reserve("last", 1).expect("one more fits");
        assert!(matches!(save.reserve("over", 1), Err(OverQuota::Files)));
        drop(hold);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fifo_is_neither_sent_nor_written_and_opening_it_does_not_block() {
        let path = tmp("fifo");
        let _ = std::fs::remove_file(&path);
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        assert!(
            made.is_ok_and(|s| s.success()),
            "mkfifo (coreutils) could not make {path:?}"
        );
        assert!(FileSource::open(&path).is_err());
        assert!(FileSink::create(Some(path.clone())).is_err());
        assert!(FileSource::open(Path::new("/dev/zero")).is_err());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_saved_copy_never_grows_past_the_transfer_size() {
        let path = tmp("bounded");
        let mut sink = FileSink::create(Some(path.clone()))
            .expect("create")
            .bounded(1000);
        sink.write(&[1u8; 800]);
        sink.write(&[2u8; 800]);
        sink.write_at(1u64 << 40, &[3u8; 100]);
        let got = sink.finish(1000);
        assert!(got.error.is_some());
        // Cut: not kept at all, so nothing grew.
        assert!(std::fs::metadata(&path).is_err());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn in_order_copy_is_identical_and_hashes_alike() {
        let src_path = tmp("src");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&src_path, &data).expect("write source");
        let (mut src, size) = FileSource::open(&src_path).expect("open");
        assert_eq!(size, 100_000);
        let dst_path = tmp("dst");
        let mut sink = FileSink::create(Some(dst_path.clone())).expect("create");
        let mut buf = [0u8; 4096];
        let mut left = size as usize;
        while left > 0 {
            let n = left.min(buf.len());
            src.fill(&mut buf[..n]).expect("fill");
            sink.write(&buf[..n]);
            left -= n;
        }
        assert!(src.fill(&mut buf[..1]).is_err(), "past the end");
        let sent = src.report();
        let got = sink.finish(size);
        assert_eq!(sent.digest, got.digest);
        assert_eq!(std::fs::read(&dst_path).expect("read copy"), data);
        let _ = std::fs::remove_file(src_path);
        let _ = std::fs::remove_file(dst_path);
    }

    #[test]
    fn scattered_writes_report_missing_ranges() {
        let path = tmp("scatter");
        let mut sink = FileSink::create(Some(path.clone())).expect("create");
        // 10 pieces of 100 bytes, 1000-byte file; pieces 2, 3 and 9 lost, 5 arrives late
        for i in [0u64, 1, 4, 6, 7, 8, 5] {
            sink.write_at(i * 100, &[i as u8; 100]);
        }
        sink.lost(LostRun { first: 2, count: 2 }, 100, 1000);
        sink.lost(LostRun { first: 9, count: 5 }, 100, 1000); // past the end: clipped
        let r = sink.finish(1000);
        assert_eq!(r.missing, vec![(200, 400), (900, 1000)]);
        assert_eq!(r.bytes, 700);
        // Not whole: not kept, and no digest of a copy no one has.
        assert!(std::fs::metadata(&path).is_err());
        assert!(r.digest.is_none() && r.saved_as.is_none());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_copy_takes_its_name_only_when_finished_and_a_cut_off_one_leaves_nothing() {
        let dir = tmp("whole");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let saves = SaveDir::new(dir.clone(), 1 << 20);
        let (path, room) = saves.reserve("copy", 10).expect("room");
        std::fs::write(&path, b"earlier").expect("earlier");
        let mut sink = FileSink::create(Some(path.clone()))
            .expect("create")
            .holding(room);
        sink.write(b"01234");
        // Mid-transfer: the old file is as it was and the temporary is not counted twice.
        assert_eq!(std::fs::read(&path).expect("read"), b"earlier");
        assert_eq!(saves.saved(&HashMap::new()).0, 1);
        drop(sink);
        assert_eq!(std::fs::read(&path).expect("read"), b"earlier");
        assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 1);

        let (path, room) = saves.reserve("copy", 10).expect("room");
        let mut sink = FileSink::create(Some(path.clone()))
            .expect("create")
            .holding(room);
        sink.write(b"0123456789");
        let report = sink.finish(10);
        assert_eq!(
            report.saved_as.as_deref(),
            Some(path.to_str().expect("utf-8"))
        );
        assert_eq!(std::fs::read(&path).expect("read"), b"0123456789");
        assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_copy_cut_short_or_with_holes_is_not_kept_and_says_why() {
        let dir = tmp("cut");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let saves = SaveDir::new(dir.clone(), 1 << 40);
        // Declared 1 GB, sent 1 KiB, then the test ended.
        let (path, room) = saves.reserve("big", 1 << 30).expect("room");
        let mut sink = FileSink::create(Some(path.clone()))
            .expect("create")
            .holding(room)
            .bounded(1 << 30);
        sink.write(&[1u8; 1024]);
        let report = sink.finish(1 << 30);
        assert_eq!(report.saved_as, None);
        assert!(
            report
                .error
                .as_deref()
                .is_some_and(|e| e.contains("not whole")),
            "{report:?}"
        );
        // UDP: every byte but one datagram's, out of order.
        let (path, room) = saves.reserve("holes", 3000).expect("room");
        let mut sink = FileSink::create(Some(path)).expect("create").holding(room);
        sink.write_at(0, &[1u8; 1000]);
        sink.write_at(2000, &[1u8; 1000]);
        sink.lost(LostRun { first: 1, count: 1 }, 1000, 3000);
        let report = sink.finish(3000);
        assert_eq!((report.saved_as, report.digest), (None, None));
        assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 0);
        assert_eq!(saves.saved(&HashMap::new()), (0, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
