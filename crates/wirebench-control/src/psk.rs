//! Pre-shared-key authentication of a test (`--psk-file`): a challenge-response over the
//! control channel with HMAC-SHA256 (RFC 2104) and a fresh nonce from each side, so that a
//! recorded exchange cannot be replayed, and the server proves the key too.
//!
//! ```text
//! client → start   { nonce: Nc, spec, ... }
//! server → challenge { nonce: Ns }                      (only when the server has a key)
//! client → auth    { mac: HMAC(K, "wirebench-client-1" | Nc | Ns | spec as JSON) }
//! server → accept  { server_mac: HMAC(K, "wirebench-server-1" | Ns | Nc), ... }
//! ```
//!
//! The client's MAC covers the spec, so the test that runs is the test the key holder asked
//! for. The server compares in constant time (`Mac::verify_slice`).
//!
//! Over QUIC both sides first bind the key to their TLS session ([`Psk::bound`]: the
//! session's exported keying material, RFC 8446 7.5, under the key): a party in the middle
//! that ends one TLS session with the client and another with the server holds two
//! different exports, so neither side's proof passes on the other's. The key so proves the
//! server to a client that pinned no certificate.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Why a key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PskError {
    /// Fewer than [`MIN_KEY_BYTES`] bytes once trimmed.
    #[error("the pre-shared key must have at least {MIN_KEY_BYTES} bytes (e.g. `head -c 32 /dev/urandom | base64`)")]
    TooShort,
    /// More than [`MAX_KEY_BYTES`] bytes: not a key file.
    #[error("the pre-shared key has {0} bytes, more than {MAX_KEY_BYTES}: is it the right file?")]
    TooLong(u64),
    /// The key file is a FIFO, a device, a directory or a socket.
    #[error("{path}: not a regular file, so not a key file")]
    NotRegular {
        /// The file, as given.
        path: String,
    },
    /// The key file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file, as given.
        path: String,
        /// Why it cannot be read.
        source: std::io::Error,
    },
}

/// Fewest bytes a key may have.
pub const MIN_KEY_BYTES: usize = 16;
/// Most bytes a key file may hold, whitespace included: a key is a line of text.
pub const MAX_KEY_BYTES: u64 = 4096;

/// A pre-shared key.
#[derive(Clone)]
pub struct Psk(Vec<u8>);

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.write_str("Psk(..)")
    }
}

impl Psk {
    /// A key from a file's or a variable's contents; surrounding whitespace is not part of
    /// it.
    pub fn new(bytes: &[u8]) -> Result<Self, PskError> {
        if bytes.len() as u64 > MAX_KEY_BYTES {
            return Err(PskError::TooLong(bytes.len() as u64));
        }
        let text = bytes.trim_ascii();
        if text.len() < MIN_KEY_BYTES {
            return Err(PskError::TooShort);
        }
        Ok(Self(text.to_vec()))
    }

    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        // HMAC takes a key of any length.
        let mut m =
            <HmacSha256 as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                m.update(b"\n");
            }
            m.update(p);
        }
        m
    }

    /// This key bound to a TLS session whose exported keying material is `export`: the
    /// key both sides of that one session use in the exchange.
    #[must_use]
    pub fn bound(&self, export: &[u8]) -> Self {
        Self(
            self.mac(&[b"wirebench-tls-binding-1", export])
                .finalize()
                .into_bytes()
                .to_vec(),
        )
    }

    /// The client's answer to the server's challenge.
    pub fn client_mac(&self, cn: &str, sn: &str, spec: &str) -> String {
        hex(&self
            .mac(&[
                b"wirebench-client-1",
                cn.as_bytes(),
                sn.as_bytes(),
                spec.as_bytes(),
            ])
            .finalize()
            .into_bytes())
    }

    /// Whether `mac_hex` is the right answer, compared in constant time.
    pub fn verify_client(&self, cn: &str, sn: &str, spec: &str, mac_hex: &str) -> bool {
        let Some(mac) = unhex(mac_hex) else {
            return false;
        };
        self.mac(&[
            b"wirebench-client-1",
            cn.as_bytes(),
            sn.as_bytes(),
            spec.as_bytes(),
        ])
        .verify_slice(&mac)
        .is_ok()
    }

    /// The server's proof that it holds the key too.
    pub fn server_mac(&self, server_nonce: &str, client_nonce: &str) -> String {
        hex(&self
            .mac(&[
                b"wirebench-server-1",
                server_nonce.as_bytes(),
                client_nonce.as_bytes(),
            ])
            .finalize()
            .into_bytes())
    }

    /// Whether the server's proof is right, compared in constant time.
    pub fn verify_server(&self, sn: &str, cn: &str, mac_hex: &str) -> bool {
        let Some(mac) = unhex(mac_hex) else {
            return false;
        };
        self.mac(&[b"wirebench-server-1", sn.as_bytes(), cn.as_bytes()])
            .verify_slice(&mac)
            .is_ok()
    }
}

/// Bytes as lowercase hex: nonces and MACs on the wire.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_right_key_passes_and_anything_else_fails() {
        let k = Psk::new(b"  0123456789abcdef0123\n").expect("key");
        let wrong = Psk::new(b"0123456789abcdef0124").expect("key");
        let mac = k.client_mac("cn", "sn", "{\"spec\":1}");
        assert!(k.verify_client("cn", "sn", "{\"spec\":1}", &mac));
        assert!(!wrong.verify_client("cn", "sn", "{\"spec\":1}", &mac));
        // a replay against a new server nonce, or another spec, fails
        assert!(!k.verify_client("cn", "sn2", "{\"spec\":1}", &mac));
        assert!(!k.verify_client("cn", "sn", "{\"spec\":2}", &mac));
        for junk in ["", "zz", "abc", &"0".repeat(64), &"f".repeat(1000)] {
            assert!(!k.verify_client("cn", "sn", "{\"spec\":1}", junk), "{junk}");
        }
        let proof = k.server_mac("sn", "cn");
        assert!(k.verify_server("sn", "cn", &proof));
        assert!(!wrong.verify_server("sn", "cn", &proof));
        assert!(!k.verify_server("sn", "cn", &mac));
        assert_eq!(format!("{k:?}"), "Psk(..)");
    }

    #[test]
    fn a_key_bound_to_another_session_proves_nothing_on_this_one() {
        let k = Psk::new(b"0123456789abcdef0123").expect("key");
        let (client_side, server_side) = (k.bound(b"session A"), k.bound(b"session B"));
        // The same session: both proofs pass.
        let same = k.bound(b"session A");
        let mac = client_side.client_mac("cn", "sn", "{}");
        assert!(same.verify_client("cn", "sn", "{}", &mac));
        assert!(client_side.verify_server("sn", "cn", &same.server_mac("sn", "cn")));
        // A relay between two sessions: neither side's proof passes on the other's.
        assert!(!server_side.verify_client("cn", "sn", "{}", &mac));
        assert!(!client_side.verify_server("sn", "cn", &server_side.server_mac("sn", "cn")));
        // Nor does the unbound key's.
        assert!(!same.verify_client("cn", "sn", "{}", &k.client_mac("cn", "sn", "{}")));
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(Psk::new(b"short").is_err());
        assert!(Psk::new(b"   \n").is_err());
    }
}
