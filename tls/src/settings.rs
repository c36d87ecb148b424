//! rustls configurations from the files and options etcd's flags name:
//! what the ports' settings (`port.rs`) and etcdctl's share.
//!
//! Design: a settings struct holds paths and choices only (cheap to
//! compare and print, as the server's `Config` needs); building it reads
//! the files and makes the rustls configuration, failing with a
//! [`TlsError`] that names the file at fault. Cryptography is always
//! rustls's ring provider, narrowed to the configured protocol versions
//! and TLS 1.2 cipher suites.
//!
//! etcdctl's side, [`ClientSettings`], offers `h2` only (gRPC), verifies
//! the server against `--cacert` or else the system's CAs, and with
//! `--insecure-skip-tls-verify` accepts any server certificate while still
//! checking that the server holds its key (see `verify.rs`).

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::{WantsClientCert, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::{
    CipherSuite, ClientConfig, ConfigBuilder, RootCertStore, SupportedCipherSuite,
    SupportedProtocolVersion, WantsVerifier,
};

use crate::anchor::{AnchorServerVerifier, Anchors};
use crate::verify::AcceptAnyServerCert;
use crate::TlsError;

/// ALPN name of HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";

/// ALPN name of HTTP/1.1.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// PEM files larger than this are refused before they are read whole; a
/// system CA bundle is a few hundred KiB.
const PEM_FILE_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// A TLS protocol version, as `--tls-min-version` and `--tls-max-version`
/// name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `TLS1.2`.
    Tls12,
    /// `TLS1.3`.
    Tls13,
}

impl TlsVersion {
    /// Parses etcd's spelling (`TLS1.2`, `TLS1.3`). Older versions are
    /// refused: rustls does not speak them.
    pub fn parse(value: &str) -> Result<Self, TlsError> {
        match value.trim() {
            "TLS1.2" => Ok(Self::Tls12),
            "TLS1.3" => Ok(Self::Tls13),
            "TLS1.0" | "TLS1.1" => Err(TlsError::Versions(format!(
                "{value} is not supported; use TLS1.2 or TLS1.3"
            ))),
            _ => Err(TlsError::Versions(format!(
                "unknown TLS version {value:?}; use TLS1.2 or TLS1.3"
            ))),
        }
    }

    /// etcd's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tls12 => "TLS1.2",
            Self::Tls13 => "TLS1.3",
        }
    }

    fn rustls(self) -> &'static SupportedProtocolVersion {
        match self {
            Self::Tls12 => &rustls::version::TLS12,
            Self::Tls13 => &rustls::version::TLS13,
        }
    }
}

/// The range of protocol versions to speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Versions {
    min: TlsVersion,
    max: TlsVersion,
}

impl Default for Versions {
    /// TLS 1.2 and 1.3, etcd's default.
    fn default() -> Self {
        Self {
            min: TlsVersion::Tls12,
            max: TlsVersion::Tls13,
        }
    }
}

impl Versions {
    /// `min..=max`; an error when `min` is above `max`.
    pub fn new(min: TlsVersion, max: TlsVersion) -> Result<Self, TlsError> {
        if min > max {
            return Err(TlsError::Versions(format!(
                "--tls-min-version {} is above --tls-max-version {}",
                min.as_str(),
                max.as_str()
            )));
        }
        Ok(Self { min, max })
    }

    /// The lowest version.
    pub fn min(self) -> TlsVersion {
        self.min
    }

    /// The highest version.
    pub fn max(self) -> TlsVersion {
        self.max
    }

    pub(crate) fn rustls(self) -> Vec<&'static SupportedProtocolVersion> {
        [TlsVersion::Tls12, TlsVersion::Tls13]
            .into_iter()
            .filter(|v| (self.min..=self.max).contains(v))
            .map(TlsVersion::rustls)
            .collect()
    }
}

/// What `--cipher-suites` asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CipherSuites {
    /// The TLS 1.2 suites to offer (empty: all that rustls implements).
    /// TLS 1.3's suites are not configurable, as in etcd.
    pub tls12: Vec<CipherSuite>,
    /// Names etcd knows that rustls does not implement (CBC, RC4, 3DES and
    /// RSA key exchange suites): left out, worth a warning.
    pub unsupported: Vec<String>,
}

/// Go's names of the TLS 1.2 suites rustls does not implement.
const GO_SUITES_NOT_IMPLEMENTED: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// Parses `--cipher-suites` entries, Go's names (IANA's, and Go's
/// short `…_CHACHA20_POLY1305` forms). TLS 1.3 names are accepted and
/// change nothing; an unknown name is an error.
pub fn parse_cipher_suites<S: AsRef<str>>(names: &[S]) -> Result<CipherSuites, TlsError> {
    let provider = rustls::crypto::ring::default_provider();
    let mut chosen = CipherSuites::default();
    for name in names {
        let name = name.as_ref().trim();
        if name.is_empty() {
            continue;
        }
        let matches = |suite: &SupportedCipherSuite| {
            let rustls_name = format!("{:?}", suite.suite());
            let go_name = rustls_name.replacen("TLS13_", "TLS_", 1);
            name == rustls_name || name == go_name || format!("{name}_SHA256") == go_name
        };
        match provider.cipher_suites.iter().find(|s| matches(s)) {
            Some(SupportedCipherSuite::Tls13(_)) => {}
            Some(suite) => {
                if !chosen.tls12.contains(&suite.suite()) {
                    chosen.tls12.push(suite.suite());
                }
            }
            None if GO_SUITES_NOT_IMPLEMENTED.contains(&name) => {
                chosen.unsupported.push(name.to_owned())
            }
            None => {
                return Err(TlsError::CipherSuites(format!(
                    "unknown cipher suite {name:?}"
                )))
            }
        }
    }
    if chosen.tls12.is_empty() && !chosen.unsupported.is_empty() {
        return Err(TlsError::CipherSuites(format!(
            "none of the cipher suites {} is supported; supported: {}",
            chosen.unsupported.join(","),
            supported_tls12_names(&provider).join(",")
        )));
    }
    Ok(chosen)
}

fn supported_tls12_names(provider: &CryptoProvider) -> Vec<String> {
    provider
        .cipher_suites
        .iter()
        .filter(|s| matches!(s, SupportedCipherSuite::Tls12(_)))
        .map(|s| format!("{:?}", s.suite()))
        .collect()
}

/// The ring provider, narrowed to `tls12` when that is not empty.
pub(crate) fn provider(tls12: &[CipherSuite]) -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !tls12.is_empty() {
        provider.cipher_suites.retain(|suite| {
            matches!(suite, SupportedCipherSuite::Tls13(_)) || tls12.contains(&suite.suite())
        });
    }
    Arc::new(provider)
}

/// `--cipher-suites` names TLS 1.2 suites only: refused when TLS 1.3 is
/// the lowest version.
pub(crate) fn check_suites(versions: Versions, suites: &[CipherSuite]) -> Result<(), TlsError> {
    if !suites.is_empty() && versions.min() == TlsVersion::Tls13 {
        return Err(TlsError::CipherSuites(
            "--cipher-suites applies to TLS 1.2 only and cannot be used when only TLS1.3 \
             is enabled"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The client side: etcdctl's `--cacert`, `--cert`, `--key` and
/// `--insecure-skip-tls-verify`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientSettings {
    /// CAs to verify servers with; `None`: the system's.
    pub ca_file: Option<PathBuf>,
    /// The client's certificate chain, for servers that ask for one.
    pub cert_file: Option<PathBuf>,
    /// The key of the client certificate.
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate (the handshake's signatures are still
    /// verified, so the server must hold the key of what it presents).
    pub skip_verify: bool,
}

impl ClientSettings {
    /// Reads the files and builds the configuration.
    pub fn build(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = verify_servers(
            builder,
            provider,
            self.ca_file.as_deref(),
            self.skip_verify,
            |e| e,
        )?;
        let mut config = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(certificates(cert)?, private_key(key)?)
                .map_err(|e| TlsError::Identity {
                    cert: cert.clone(),
                    key: key.clone(),
                    reason: e.to_string(),
                })?,
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(TlsError::CertWithoutKey {
                    cert_flag: "cert",
                    key_flag: "key",
                })
            }
        };
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Ok(Arc::new(config))
    }
}

/// How a client configuration verifies servers: against the CAs in
/// `ca_file`, or else the system's (`no_system_roots` may reword the
/// error when there are none); with `skip_verify`, not at all beyond the
/// handshake's signatures (see `verify.rs`). A named CA file is read even
/// when verification is skipped, so a typo in it is reported rather than
/// ignored.
pub(crate) fn verify_servers(
    builder: ConfigBuilder<ClientConfig, WantsVerifier>,
    provider: Arc<CryptoProvider>,
    ca_file: Option<&Path>,
    skip_verify: bool,
    no_system_roots: impl FnOnce(TlsError) -> TlsError,
) -> Result<ConfigBuilder<ClientConfig, WantsClientCert>, TlsError> {
    let trusted = match ca_file {
        Some(path) => Some((path, root_store(path)?)),
        None => None,
    };
    if skip_verify {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert::new(provider))));
    }
    let Some((path, (roots, anchors))) = trusted else {
        let roots = native_roots().map_err(no_system_roots)?;
        return Ok(builder.with_root_certificates(roots));
    };
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsError::TrustAnchors {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let verifier = AnchorServerVerifier::new(verifier, Anchors::new(anchors, &[]));
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier)))
}

/// A PEM file's bytes, bounded by [`PEM_FILE_BYTES_MAX`].
fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    let read_error = |error| TlsError::Read {
        path: path.to_path_buf(),
        error,
    };
    let file = File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > PEM_FILE_BYTES_MAX {
        return Err(read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {PEM_FILE_BYTES_MAX} bytes"),
        )));
    }
    Ok(bytes)
}

/// Every certificate in a PEM file; at least one.
pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(chain)
}

/// The revocation lists in a file: PEM blocks, or one DER list (etcd's
/// fixtures are DER).
pub(crate) fn revocation_lists(
    path: &Path,
) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    let bytes = read_pem(path)?;
    let pem_error = |reason: String| TlsError::Pem {
        path: path.to_path_buf(),
        reason,
    };
    let lists = if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        CertificateRevocationListDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error(e.to_string()))?
    } else {
        vec![CertificateRevocationListDer::from(bytes)]
    };
    if lists.is_empty() {
        return Err(pem_error("no certificate revocation list".to_owned()));
    }
    Ok(lists)
}

/// The first private key in a PEM file.
pub(crate) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_pem(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            path: path.to_path_buf(),
        },
        other => TlsError::Pem {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    })
}

/// The CAs in a PEM file, as webpki's trust anchors and as the
/// certificates themselves; at least one usable.
pub(crate) fn root_store(
    path: &Path,
) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), TlsError> {
    let certs = certificates(path)?;
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(certs.iter().cloned());
    if roots.is_empty() {
        return Err(TlsError::TrustAnchors {
            path: path.to_path_buf(),
            reason: format!("{ignored} certificate(s) could not be parsed"),
        });
    }
    Ok((roots, certs))
}

/// The system's CAs (as Go's crypto/x509 finds them: the distribution's
/// bundle, `SSL_CERT_FILE`, `SSL_CERT_DIR`).
pub(crate) fn native_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let reason = if found.errors.is_empty() {
            "the system's certificate store is empty".to_owned()
        } else {
            found
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        };
        return Err(TlsError::NoSystemRoots { reason });
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Port, PortSettings};

    /// A self-signed certificate and its key, as PEM files in `dir`.
    fn identity(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}-key.pem")),
        );
        std::fs::write(&cert_path, cert.pem()).expect("write");
        std::fs::write(&key_path, key.serialize_pem()).expect("write");
        (cert_path, key_path)
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().expect("dir");
        let (cert, key) = identity(dir.path(), "a");
        let (_, other_key) = identity(dir.path(), "b");
        let text = dir.path().join("text.pem");
        std::fs::write(&text, "not pem at all\n").expect("write");
        let missing = dir.path().join("missing.pem");

        let error = PortSettings::new(Port::Client, &missing, &key)
            .server()
            .unwrap_err();
        assert!(matches!(error, TlsError::Read { .. }), "{error}");
        assert!(error.to_string().contains("missing.pem"), "{error}");

        let error = PortSettings::new(Port::Client, &text, &key)
            .server()
            .unwrap_err();
        assert!(matches!(error, TlsError::NoCertificate { .. }), "{error}");
        assert!(error.to_string().contains("text.pem"), "{error}");

        // A certificate file is not a key file.
        let error = PortSettings::new(Port::Client, &cert, &cert)
            .server()
            .unwrap_err();
        assert!(matches!(error, TlsError::NoPrivateKey { .. }), "{error}");

        let error = PortSettings::new(Port::Client, &cert, &other_key)
            .server()
            .unwrap_err();
        assert!(matches!(error, TlsError::Identity { .. }), "{error}");
        assert!(error.to_string().contains("b-key.pem"), "{error}");

        let mut settings = PortSettings::new(Port::Client, &cert, &key);
        settings.trusted_ca_file = Some(text.clone());
        assert!(matches!(
            settings.server().unwrap_err(),
            TlsError::NoCertificate { .. }
        ));
        settings.trusted_ca_file = Some(cert.clone());
        settings
            .server()
            .expect("a certificate is a usable CA file");

        let client = ClientSettings {
            ca_file: Some(missing.clone()),
            skip_verify: true,
            ..Default::default()
        };
        let error = client.build().unwrap_err();
        assert!(error.to_string().contains("missing.pem"), "{error}");
        let client = ClientSettings {
            ca_file: Some(cert.clone()),
            cert_file: Some(cert.clone()),
            ..Default::default()
        };
        assert_eq!(
            client.build().unwrap_err().to_string(),
            "--cert and --key must be given together"
        );
        let client = ClientSettings {
            ca_file: Some(cert.clone()),
            cert_file: Some(cert.clone()),
            key_file: Some(key.clone()),
            ..Default::default()
        };
        let config = client.build().expect("client config");
        assert_eq!(config.alpn_protocols, vec![ALPN_H2.to_vec()]);
    }

    #[test]
    fn oversized_files_are_refused_unread() {
        let dir = tempfile::tempdir().expect("dir");
        let big = dir.path().join("big.pem");
        let file = File::create(&big).expect("create");
        file.set_len(PEM_FILE_BYTES_MAX + 1).expect("grow");
        let error = certificates(&big).unwrap_err();
        assert!(error.to_string().contains("larger than"), "{error}");
    }

    #[test]
    fn versions_parse_like_etcd() {
        assert_eq!(TlsVersion::parse("TLS1.2").unwrap(), TlsVersion::Tls12);
        assert_eq!(TlsVersion::parse("TLS1.3").unwrap(), TlsVersion::Tls13);
        assert!(TlsVersion::parse("TLS1.1")
            .unwrap_err()
            .to_string()
            .contains("not supported"));
        assert!(TlsVersion::parse("1.3").is_err());
        let error = Versions::new(TlsVersion::Tls13, TlsVersion::Tls12).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--tls-min-version TLS1.3 is above --tls-max-version TLS1.2"
        );
        assert_eq!(
            Versions::default().rustls().len(),
            2,
            "TLS 1.2 and 1.3 by default"
        );
    }

    #[test]
    fn cipher_suites_take_go_names() {
        let chosen = parse_cipher_suites(&[
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_AES_128_GCM_SHA256",
            "TLS_RSA_WITH_AES_128_CBC_SHA",
            "",
        ])
        .expect("parse");
        assert_eq!(
            chosen.tls12,
            [
                CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            ]
        );
        assert_eq!(chosen.unsupported, ["TLS_RSA_WITH_AES_128_CBC_SHA"]);
        let error = parse_cipher_suites(&["TLS_NOPE"]).unwrap_err();
        assert_eq!(error.to_string(), "unknown cipher suite \"TLS_NOPE\"");
        let error = parse_cipher_suites(&["TLS_RSA_WITH_AES_128_CBC_SHA"]).unwrap_err();
        assert!(
            error.to_string().contains("none of the cipher suites"),
            "{error}"
        );
    }
}
