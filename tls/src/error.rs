//! Why a TLS configuration could not be built: one variant per cause, each
//! naming the file or flag at fault.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a TLS configuration could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read (missing, unreadable, too large).
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// A file is not valid PEM.
    Pem {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        reason: String,
    },
    /// A certificate file holds no `CERTIFICATE` block.
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A key file holds no private key (PKCS#8, PKCS#1 or SEC1).
    NoPrivateKey {
        /// The file.
        path: PathBuf,
    },
    /// The certificate and key do not make a usable identity (the key
    /// does not match the certificate, or its type is not supported).
    Identity {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// A CA file holds no certificate usable as a trust anchor.
    TrustAnchors {
        /// The file.
        path: PathBuf,
        /// Why the certificates were refused.
        reason: String,
    },
    /// Only one of a certificate and its key was given.
    CertWithoutKey {
        /// The flag naming the certificate.
        cert_flag: &'static str,
        /// The flag naming the key.
        key_flag: &'static str,
    },
    /// No CA was given and the system offers none to verify servers with.
    NoSystemRoots {
        /// Why the system's store gave nothing.
        reason: String,
    },
    /// A `--tls-min-version` / `--tls-max-version` value or combination
    /// that cannot be served.
    Versions(String),
    /// A `--cipher-suites` entry or combination that cannot be served.
    CipherSuites(String),
    /// rustls refused the configuration for another reason.
    Config(String),
    /// `--auto-tls` could not make or store its certificate.
    SelfSigned {
        /// The file or directory involved.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            Self::Pem { path, reason } => {
                write!(f, "{}: not a valid PEM file: {reason}", path.display())
            }
            Self::NoCertificate { path } => {
                write!(f, "{}: no PEM certificate found", path.display())
            }
            Self::NoPrivateKey { path } => write!(
                f,
                "{}: no PEM private key found (PKCS#8, PKCS#1 or SEC1)",
                path.display()
            ),
            Self::Identity { cert, key, reason } => write!(
                f,
                "the key in {} cannot be used with the certificate in {}: {reason}",
                key.display(),
                cert.display()
            ),
            Self::TrustAnchors { path, reason } => {
                write!(f, "{}: no usable CA certificate: {reason}", path.display())
            }
            Self::CertWithoutKey {
                cert_flag,
                key_flag,
            } => write!(f, "--{cert_flag} and --{key_flag} must be given together"),
            Self::NoSystemRoots { reason } => write!(
                f,
                "no CA certificates to verify the server with ({reason}); give --cacert"
            ),
            Self::Versions(reason) | Self::CipherSuites(reason) | Self::Config(reason) => {
                f.write_str(reason)
            }
            Self::SelfSigned { path, reason } => write!(
                f,
                "cannot create the self-signed certificate in {}: {reason}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { error, .. } => Some(error),
            _ => None,
        }
    }
}
