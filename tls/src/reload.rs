//! The server's certificate, re-read when its files change.
//!
//! etcd re-reads `--cert-file` and `--key-file` on every handshake, so a
//! rotated certificate (cert-manager, a renewed Let's Encrypt certificate,
//! a Kubernetes secret swapped through its symlink) is served without a
//! restart. [`ReloadingCert`] does the same more cheaply: each handshake
//! looks at both files' modification time and length (two `stat` calls)
//! and reads them again only when either changed. A re-read that fails —
//! a file caught half-written, a key that does not match the certificate
//! yet — keeps the last good certificate and is tried again at the next
//! handshake, so a rotation in progress never takes the port down.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

use crate::settings::{certificates, private_key};
use crate::TlsError;

/// What identifies one version of the files: modification time and
/// length of the certificate and of the key.
type Stamp = [(SystemTime, u64); 2];

/// Serves the certificate in two PEM files, re-reading them when they
/// change.
#[derive(Debug)]
pub(crate) struct ReloadingCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: Option<Stamp>,
}

impl ReloadingCert {
    /// Reads the files now; an error names the file at fault.
    pub(crate) fn new(
        cert_file: PathBuf,
        key_file: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let stamp = stamp(&cert_file, &key_file);
        let key = load(&cert_file, &key_file, &provider)?;
        Ok(Self {
            cert_file,
            key_file,
            provider,
            current: RwLock::new(Loaded { key, stamp }),
        })
    }

    /// The certificate to serve now, re-read first if the files changed.
    pub(crate) fn current(&self) -> Arc<CertifiedKey> {
        let stamp = stamp(&self.cert_file, &self.key_file);
        {
            let current = self.current.read().unwrap_or_else(|e| e.into_inner());
            // Files that cannot be looked at now (mid-rotation) leave the
            // certificate as it is.
            if stamp.is_none() || current.stamp == stamp {
                return current.key.clone();
            }
        }
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if current.stamp != stamp {
            if let Ok(key) = load(&self.cert_file, &self.key_file, &self.provider) {
                *current = Loaded { key, stamp };
            }
        }
        current.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A member dialing a peer presents the certificate it serves, re-read the
/// same way.
impl ResolvesClientCert for ReloadingCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn load(
    cert_file: &std::path::Path,
    key_file: &std::path::Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = certificates(cert_file)?;
    let key = private_key(key_file)?;
    CertifiedKey::from_der(chain, key, provider)
        .map(Arc::new)
        .map_err(|e| TlsError::Identity {
            cert: cert_file.to_path_buf(),
            key: key_file.to_path_buf(),
            reason: e.to_string(),
        })
}

fn stamp(cert_file: &std::path::Path, key_file: &std::path::Path) -> Option<Stamp> {
    let one = |path: &std::path::Path| {
        let metadata = std::fs::metadata(path).ok()?;
        Some((metadata.modified().ok()?, metadata.len()))
    };
    Some([one(cert_file)?, one(key_file)?])
}
