//! TLS for QUIC tests, as a measurement tool needs it: the server has a key pair (made at
//! start, or kept in a file so that it survives restarts) and a certificate it signs
//! itself; the client checks the certificate's public key against a pin, the SHA-256 of
//! its SubjectPublicKeyInfo, which `serve` prints. No certificate authority, no host name:
//! nothing a user has to work around by hand. `--quic-insecure` (a lab) checks nothing
//! but the handshake's signature.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::EngineError;

/// The ALPN of wirebench's own tests over QUIC.
pub const ALPN: &[u8] = b"wirebench/1";

/// A fingerprint that cannot be one, or a certificate with no key to take one of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FingerprintError(String);

/// The SHA-256 of a certificate's public key (its SubjectPublicKeyInfo, DER).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of the key in `cert`.
    ///
    /// # Errors
    ///
    /// The certificate cannot be parsed.
    pub fn of_cert(cert: &CertificateDer<'_>) -> Result<Self, FingerprintError> {
        let ee = webpki::EndEntityCert::try_from(cert).map_err(|e| {
            FingerprintError(format!("the server's certificate cannot be read: {e}"))
        })?;
        let spki = ee.subject_public_key_info();
        Ok(Self(Sha256::digest(spki.as_ref()).into()))
    }

    /// Reads `sha256:` followed by 64 hex digits (the prefix and ':' separators optional).
    ///
    /// # Errors
    ///
    /// Anything else, in words for the user.
    pub fn parse(text: &str) -> Result<Self, FingerprintError> {
        let hex: String = text
            .trim()
            .strip_prefix("sha256:")
            .unwrap_or(text.trim())
            .chars()
            .filter(|c| *c != ':')
            .collect();
        let bad = || {
            FingerprintError(format!(
                "--quic-pin {text:?} is not a fingerprint: give the 64 hex digits `serve` prints (sha256:...)"
            ))
        };
        if hex.len() != 64 || !hex.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(out))
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("sha256:")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The server's key pair and the certificate it made for itself.
pub struct Identity {
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
    fingerprint: Fingerprint,
    /// The QUIC server configuration made once per ALPN: its session cache is what lets a
    /// client resume (and send 0-RTT data) on its next connection.
    quic: std::sync::Mutex<Vec<(&'static [u8], Arc<quinn::crypto::rustls::QuicServerConfig>)>>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("fingerprint", &self.fingerprint.to_string())
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// A new key pair, for this process only.
    ///
    /// # Errors
    ///
    /// The key or the certificate could not be made.
    pub fn generate() -> Result<Self, EngineError> {
        let key = rcgen::KeyPair::generate().map_err(tls_error)?;
        Self::of_key(&key)
    }

    /// The key pair in `path` (PEM, PKCS#8), made and saved there (readable by the owner
    /// only) when the file does not exist: the fingerprint stays the same across restarts.
    ///
    /// # Errors
    ///
    /// The file cannot be read or written, or holds no key rcgen can use.
    pub fn load_or_create(path: &Path) -> Result<Self, EngineError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let io = |what: &'static str| move |e| EngineError::io(what, e);
        // Small by nature: a key file larger than this is not one.
        const MAX_KEY_FILE: u64 = 64 * 1024;
        match std::fs::File::open(path) {
            Ok(f) => {
                use std::io::Read;
                let mut text = String::new();
                f.take(MAX_KEY_FILE)
                    .read_to_string(&mut text)
                    .map_err(io("reading the --quic-key file"))?;
                let key = rcgen::KeyPair::from_pem(&text).map_err(|e| {
                    EngineError::Setup(format!(
                        "--quic-key {}: not a PEM private key rcgen reads ({e}); remove it to make a new one",
                        path.display()
                    ))
                })?;
                Self::of_key(&key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = rcgen::KeyPair::generate().map_err(tls_error)?;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(io("creating the --quic-key file"))?;
                f.write_all(key.serialize_pem().as_bytes())
                    .and_then(|()| f.sync_all())
                    .map_err(io("writing the --quic-key file"))?;
                Self::of_key(&key)
            }
            Err(e) => Err(EngineError::io("opening the --quic-key file", e)),
        }
    }

    fn of_key(key: &rcgen::KeyPair) -> Result<Self, EngineError> {
        let params =
            rcgen::CertificateParams::new(vec!["wirebench".to_string()]).map_err(tls_error)?;
        let cert = params.self_signed(key).map_err(tls_error)?;
        let cert = cert.der().clone();
        let fingerprint =
            Fingerprint::of_cert(&cert).map_err(|e| EngineError::Setup(e.to_string()))?;
        Ok(Self {
            cert,
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            fingerprint,
            quic: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// What clients pin (`--quic-pin`).
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The QUIC server configuration offering `alpn`, made on first use and shared by every
    /// connection after (one session cache: resumption and 0-RTT across connections).
    pub(crate) fn quic_server_config(
        &self,
        alpn: &'static [u8],
    ) -> Result<Arc<quinn::crypto::rustls::QuicServerConfig>, EngineError> {
        let mut made = self.quic.lock().map_err(|_| tls_error("poisoned"))?;
        if let Some((_, c)) = made.iter().find(|(a, _)| *a == alpn) {
            return Ok(Arc::clone(c));
        }
        let tls = self.server_config(&[alpn])?;
        let c =
            Arc::new(quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(tls_error)?);
        made.push((alpn, Arc::clone(&c)));
        Ok(c)
    }

    /// The rustls server configuration with this identity, offering `alpn`.
    fn server_config(&self, alpn: &[&[u8]]) -> Result<rustls::ServerConfig, EngineError> {
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_error)?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .map_err(tls_error)?;
        cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        cfg.max_early_data_size = u32::MAX;
        // A crr client (`--quic-0rtt`) closes each connection once its answer came, often
        // before the tickets of its handshake arrive; each ticket resumes once (so 0-RTT
        // data cannot be replayed): a connection whose tickets do arrive leaves enough for
        // the next several.
        cfg.send_tls13_tickets = 8;
        Ok(cfg)
    }
}

/// How a client checks the server it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCheck {
    /// The certificate's public key must have this fingerprint.
    Pin(Fingerprint),
    /// Any certificate (`--quic-insecure`: a lab).
    Insecure,
    /// Any certificate at the handshake; the server then proves the pre-shared key over
    /// the session it made (`--psk-file` without `--quic-pin`), and the test's other
    /// connections are pinned to the key it showed.
    Psk,
}

/// The rustls client configuration that checks the server as `check` says, asking `alpn`.
pub(crate) fn client_config(
    check: ServerCheck,
    alpn: &[&[u8]],
    resume: bool,
) -> Result<rustls::ClientConfig, EngineError> {
    let provider = provider();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Verifier { check, provider }))
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    // A connection resumes an earlier one's session, and sends early data, only when asked
    // (`--quic-0rtt`): every other connection makes the whole handshake, as it measures it.
    cfg.enable_early_data = resume;
    if !resume {
        cfg.resumption = rustls::client::Resumption::disabled();
    }
    Ok(cfg)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(e: impl std::fmt::Display) -> EngineError {
    EngineError::Setup(format!("setting up TLS for QUIC: {e}"))
}

/// Checks the server's certificate by its key's fingerprint, and the handshake's
/// signatures by the provider's algorithms (the key must really be the server's).
#[derive(Debug)]
struct Verifier {
    check: ServerCheck,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.check {
            ServerCheck::Insecure | ServerCheck::Psk => Ok(ServerCertVerified::assertion()),
            ServerCheck::Pin(want) => {
                let got = Fingerprint::of_cert(end_entity)
                    .map_err(|e| rustls::Error::General(e.to_string()))?;
                if got == want {
                    Ok(ServerCertVerified::assertion())
                } else {
                    Err(rustls::Error::General(format!(
                        "the server's key is {got}, not the pinned {want}"
                    )))
                }
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_reads_back_as_printed() {
        let id = Identity::generate().expect("identity");
        let text = id.fingerprint().to_string();
        assert!(text.starts_with("sha256:") && text.len() == 7 + 64);
        assert_eq!(Fingerprint::parse(&text).ok(), Some(id.fingerprint()));
        assert_eq!(Fingerprint::parse(&text[7..]).ok(), Some(id.fingerprint()));
        assert!(Fingerprint::parse("sha256:xyz").is_err());
        assert!(Fingerprint::parse(&format!("{}é", &text[..text.len() - 2])).is_err());
    }

    #[test]
    fn a_kept_key_keeps_its_fingerprint() {
        let dir = std::env::temp_dir().join(format!("wb-quic-key-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let first = Identity::load_or_create(&dir).expect("made");
        let again = Identity::load_or_create(&dir).expect("loaded");
        assert_eq!(first.fingerprint(), again.fingerprint());
        std::fs::write(&dir, "not a key").expect("write");
        let err = Identity::load_or_create(&dir).expect_err("junk");
        assert!(err.to_string().contains("--quic-key"), "{err}");
        let _ = std::fs::remove_file(&dir);
    }
}
