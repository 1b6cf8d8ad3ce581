//! The key and the randomness behind pre-shared-key authentication that touch the system:
//! reading a key file, drawing nonces. The key itself and the MACs are sans-IO, in
//! `wirebench_control::psk`.

use wirebench_control::psk::{hex, MAX_KEY_BYTES};
pub use wirebench_control::psk::{Psk, PskError};

/// Reads a key from `path`: a regular file of at most [`MAX_KEY_BYTES`] bytes. Opened
/// without blocking (a FIFO's open would wait for a writer) and checked on what was
/// opened, so a FIFO, a device or a directory is refused before a byte is read.
pub fn load_psk(path: &std::path::Path) -> Result<Psk, PskError> {
    use std::io::Read;
    use wirebench_sys::input::Refused;
    let read = |source| PskError::Read {
        path: path.display().to_string(),
        source,
    };
    let f = wirebench_sys::input::open_regular(path, MAX_KEY_BYTES).map_err(|e| match e {
        Refused::Io(source) => read(source),
        Refused::NotRegular(_) => PskError::NotRegular {
            path: path.display().to_string(),
        },
        Refused::TooLarge(size) => PskError::TooLong(size),
    })?;
    let mut bytes = Vec::new();
    f.take(MAX_KEY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    Psk::new(&bytes)
}

/// The system gave no randomness for a nonce.
#[derive(Debug, thiserror::Error)]
#[error("drawing a nonce: {0}")]
pub struct NonceError(pub(crate) getrandom::Error);

/// 16 random bytes, hex: a nonce.
pub fn nonce() -> Result<String, NonceError> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(NonceError)?;
    Ok(hex(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_fresh() {
        let n1 = nonce().expect("nonce");
        assert_eq!(n1.len(), 32);
        assert_ne!(n1, nonce().expect("nonce"));
    }

    #[test]
    fn only_a_small_regular_file_is_read_as_a_key() {
        let dir = std::env::temp_dir().join(format!("wirebench-psk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let key = dir.join("key");
        std::fs::write(&key, "0123456789abcdef0123\n").expect("a key file");
        assert!(load_psk(&key).is_ok());
        let big = dir.join("big");
        std::fs::write(&big, vec![b'k'; 4097]).expect("a file");
        assert!(matches!(load_psk(&big), Err(PskError::TooLong(4097))));
        assert!(matches!(
            Psk::new(&[b'k'; 5000]),
            Err(PskError::TooLong(5000))
        ));
        // A device, a directory and a FIFO are refused at once, never read (or waited on).
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo: {made}");
        for path in [std::path::Path::new("/dev/zero"), &dir, &fifo] {
            let e = load_psk(path).expect_err("not a key file");
            assert!(matches!(e, PskError::NotRegular { .. }), "{path:?}: {e}");
        }
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
