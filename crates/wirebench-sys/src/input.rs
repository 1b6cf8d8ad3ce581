//! Files read back: opened only if they are regular files of a bounded size, before a byte
//! of them is read.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file is not opened for reading.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// It cannot be opened or examined.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A FIFO, a device, a directory or a socket (what it is, in words).
    #[error("{0}, not a regular file")]
    NotRegular(&'static str),
    /// It holds more bytes than the caller takes.
    #[error("{0} bytes, too large")]
    TooLarge(u64),
}

/// What a path names when it is not a regular file, in words.
pub fn kind_of(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading if it is a regular file of at most `max` bytes: the one way
/// wirebench opens a file it reads back. Opened `O_NONBLOCK` (a FIFO's open would wait for a
/// writer), then checked with `fstat` on what was opened (a link to `/dev/zero` is a device,
/// whatever its name), so a FIFO, a device, a socket or a directory is refused at once and
/// its size is never trusted to end. Read it through `take(max + 1)`: a file that grows
/// while it is read is cut.
///
/// # Errors
///
/// It cannot be opened, it is not a regular file, or it holds more than `max` bytes.
pub fn open_regular(path: &Path, max: u64) -> Result<File, Refused> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(Refused::NotRegular(kind_of(&meta)));
    }
    if meta.len() > max {
        return Err(Refused::TooLarge(meta.len()));
    }
    Ok(f)
}
