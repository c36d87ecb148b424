//! TLS between members: one certificate, both sides of the connection.
//!
//! Design: a member accepts peer connections and dials them with the same
//! certificate and key (`--peer-cert-file`, `--peer-key-file`), so
//! [`PeerSettings`] builds both rustls configurations from one set of
//! flags. The server side asks for a client certificate chaining to
//! `--peer-trusted-ca-file` when one is given (required, as etcd requires
//! it whenever a trusted CA is set) and may further insist on a common name
//! (`--peer-cert-allowed-cn`) or a host name or IP address the certificate
//! is valid for (`--peer-cert-allowed-hostname`). The client side verifies
//! the listening member against the same CA file, or the system's CAs
//! without one, and presents the member's certificate when asked. With
//! `--peer-auto-tls` the certificates are self-signed, nobody vouches for
//! them, and the client side accepts any certificate whose key signs the
//! handshake, as etcd does.
//!
//! Both sides re-read the certificate and key when the files change (see
//! `reload.rs`), speak the configured versions and cipher suites, and
//! offer no ALPN: the peer protocol is oxetcd's own, not HTTP.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, CipherSuite, ClientConfig, DigitallySignedStruct, DistinguishedName,
    ServerConfig, SignatureScheme,
};

use crate::reload::ReloadingCert;
use crate::settings::{check_suites, native_roots, provider, root_store};
use crate::verify::AcceptAnyServerCert;
use crate::{ServerSettings, TlsError, Versions};

/// What a peer's certificate must name, beyond chaining to the trusted CA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedPeer {
    /// `--peer-cert-allowed-cn`: the subject's common name, exactly.
    CommonName(String),
    /// `--peer-cert-allowed-hostname`: a DNS name or IP address the
    /// certificate is valid for (its subject alternative names).
    Hostname(String),
}

/// The peer port's TLS, from etcd's `--peer-*` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSettings {
    /// The member's certificate chain, leaf first: served to members that
    /// dial it and presented to members it dials.
    pub cert_file: PathBuf,
    /// The key of the leaf certificate.
    pub key_file: PathBuf,
    /// CAs the other members' certificates must chain to, both ways. When
    /// set, members that dial this one must present a certificate.
    pub trusted_ca_file: Option<PathBuf>,
    /// Accept any certificate from the members this one dials
    /// (`--peer-auto-tls`: self-signed certificates all round).
    pub skip_verify: bool,
    /// A further condition on the certificates of members that dial this
    /// one; needs `trusted_ca_file`.
    pub allowed: Option<AllowedPeer>,
    /// Certificate revocation lists for the certificates of members that
    /// dial this one (`--peer-crl-file`); needs `trusted_ca_file`.
    pub crl_file: Option<PathBuf>,
    /// Protocol versions to speak.
    pub versions: Versions,
    /// TLS 1.2 suites to offer (empty: all).
    pub cipher_suites: Vec<CipherSuite>,
}

impl PeerSettings {
    /// Settings for `cert_file` and `key_file`, no CA, every version and
    /// suite.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        Self {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            trusted_ca_file: None,
            skip_verify: false,
            allowed: None,
            crl_file: None,
            versions: Versions::default(),
            cipher_suites: Vec::new(),
        }
    }

    /// The configuration that accepts peer connections.
    pub fn server(&self) -> Result<Arc<ServerConfig>, TlsError> {
        if self.trusted_ca_file.is_none() && self.allowed.is_some() {
            return Err(TlsError::Config(
                "an allowed peer common name or host name needs a trusted CA: peer \
                 certificates are only checked against one"
                    .to_owned(),
            ));
        }
        let settings = ServerSettings {
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            client_ca_file: self.trusted_ca_file.clone(),
            crl_file: self.crl_file.clone(),
            versions: self.versions,
            cipher_suites: self.cipher_suites.clone(),
        };
        let config = settings.config(|verifier| match &self.allowed {
            None => verifier,
            Some(allowed) => Arc::new(AllowedOnly {
                inner: verifier,
                allowed: allowed.clone(),
            }),
        })?;
        Ok(Arc::new(config))
    }

    /// The configuration that dials peers.
    pub fn client(&self) -> Result<Arc<ClientConfig>, TlsError> {
        check_suites(self.versions, &self.cipher_suites)?;
        let provider = provider(&self.cipher_suites);
        let identity = ReloadingCert::new(
            self.cert_file.clone(),
            self.key_file.clone(),
            provider.clone(),
        )?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&self.versions.rustls())
            .map_err(|e| TlsError::Config(format!("cannot dial with these TLS versions: {e}")))?;
        // A named CA file is read even when verification is skipped, so a
        // typo in it is reported rather than ignored.
        let roots = self
            .trusted_ca_file
            .as_deref()
            .map(root_store)
            .transpose()?;
        let builder = if self.skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert::new(provider)))
        } else {
            let roots = match roots {
                Some(roots) => roots,
                None => native_roots().map_err(|e| match e {
                    TlsError::NoSystemRoots { reason } => TlsError::Config(format!(
                        "no CA certificates to verify peers with ({reason}); give \
                         --peer-trusted-ca-file"
                    )),
                    other => other,
                })?,
            };
            builder.with_root_certificates(roots)
        };
        Ok(Arc::new(
            builder.with_client_cert_resolver(Arc::new(identity)),
        ))
    }
}

/// A client verifier that accepts only certificates naming [`AllowedPeer`],
/// after the CA's verifier accepted them.
#[derive(Debug)]
struct AllowedOnly {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: AllowedPeer,
}

impl ClientCertVerifier for AllowedOnly {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let allowed = match &self.allowed {
            AllowedPeer::CommonName(name) => {
                subject_common_name(end_entity).as_deref() == Some(name.as_str())
            }
            AllowedPeer::Hostname(host) => valid_for_host(end_entity, host),
        };
        if allowed {
            Ok(verified)
        } else {
            // A bad_certificate alert, as Go's TLS sends when a peer's name
            // is refused: the dialing member reads `remote error: tls: bad
            // certificate`, the line etcd's tooling looks for.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Whether `cert`'s subject alternative names cover `host` (a DNS name or
/// an IP address, IPv6 with or without brackets).
fn valid_for_host(cert: &CertificateDer<'_>, host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let Ok(name) = ServerName::try_from(host) else {
        return false;
    };
    let Ok(cert) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    cert.verify_is_valid_for_subject_name(&name).is_ok()
}

/// The last common name in `cert`'s subject (the one Go's `x509` reports),
/// or `None` when it has none or the DER does not parse.
///
/// A certificate is `SEQUENCE { tbsCertificate SEQUENCE { [0] version
/// OPTIONAL, serial, signature, issuer, validity, subject, … } … }`; the
/// subject is a `SEQUENCE` of `SET`s of `SEQUENCE { OID, value }`, and a
/// common name is OID 2.5.4.3.
fn subject_common_name(cert: &[u8]) -> Option<String> {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const VERSION: u8 = 0xa0;
    const COMMON_NAME: [u8; 3] = [0x55, 0x04, 0x03];
    let (certificate, _) = der_element(cert, SEQUENCE)?;
    let (tbs, _) = der_element(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = der_any(rest)?.2;
    }
    // serial, signature algorithm, issuer, validity
    for _ in 0..4 {
        rest = der_any(rest)?.2;
    }
    let (mut names, _) = der_element(rest, SEQUENCE)?;
    let mut common_name = None;
    while !names.is_empty() {
        let (mut set, after) = der_element(names, SET)?;
        names = after;
        while !set.is_empty() {
            let (attribute, after) = der_element(set, SEQUENCE)?;
            set = after;
            let (oid, value) = der_element(attribute, OID)?;
            if oid == COMMON_NAME {
                let (tag, text, _) = der_any(value)?;
                common_name = Some(der_string(tag, text)?);
            }
        }
    }
    common_name
}

/// One DER element of type `tag`: its contents and what follows it.
fn der_element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (found, contents, rest) = der_any(input)?;
    (found == tag).then_some((contents, rest))
}

/// One DER element: its tag, its contents, and what follows it. Low tag
/// numbers and lengths of up to four bytes only: all a certificate's
/// subject needs.
fn der_any(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 {
            return None;
        }
        let (bytes, after) = rest.split_at_checked(count)?;
        rest = after;
        bytes
            .iter()
            .fold(0usize, |len, byte| (len << 8) | usize::from(*byte))
    };
    let (contents, rest) = rest.split_at_checked(len)?;
    Some((tag, contents, rest))
}

/// The text of a DER string of type `tag`.
fn der_string(tag: u8, bytes: &[u8]) -> Option<String> {
    const UTF8: u8 = 0x0c;
    const PRINTABLE: u8 = 0x13;
    const TELETEX: u8 = 0x14;
    const IA5: u8 = 0x16;
    const BMP: u8 = 0x1e;
    match tag {
        UTF8 | PRINTABLE | IA5 => String::from_utf8(bytes.to_vec()).ok(),
        // Latin-1 in practice.
        TELETEX => Some(bytes.iter().map(|b| char::from(*b)).collect()),
        BMP => {
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn cert_named(common_name: Option<&str>, sans: &[&str]) -> CertificateDer<'static> {
        let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(sans).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "oxetcd");
        if let Some(name) = common_name {
            params.distinguished_name.push(DnType::CommonName, name);
        }
        let key = KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().clone()
    }

    #[test]
    fn common_names_are_read_from_the_subject() {
        let cert = cert_named(Some("member-1.example"), &["127.0.0.1"]);
        assert_eq!(
            subject_common_name(&cert).as_deref(),
            Some("member-1.example")
        );
        assert_eq!(subject_common_name(&cert_named(None, &["localhost"])), None);
        // Truncated or garbage DER parses to nothing, never a panic.
        for len in 0..cert.len() {
            let _ = subject_common_name(&cert[..len]);
        }
        assert_eq!(subject_common_name(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(subject_common_name(&[]), None);
    }

    #[test]
    fn host_names_and_addresses_are_matched_against_the_alternative_names() {
        let cert = cert_named(Some("m"), &["127.0.0.1", "node-1.example", "::1"]);
        assert!(valid_for_host(&cert, "127.0.0.1"));
        assert!(valid_for_host(&cert, "node-1.example"));
        assert!(valid_for_host(&cert, "[::1]"));
        assert!(!valid_for_host(&cert, "127.0.0.2"));
        assert!(!valid_for_host(&cert, "node-2.example"));
        assert!(!valid_for_host(&cert, ""));
    }

    #[test]
    fn allowed_names_need_a_trusted_ca() {
        let dir = tempfile::tempdir().expect("dir");
        let pki = crate::test_pki::TestPki::write_to(dir.path()).expect("pki");
        let mut settings = PeerSettings::new(&pki.peer_cert, &pki.peer_key);
        settings.allowed = Some(AllowedPeer::CommonName("x".into()));
        assert!(settings.server().is_err());
        settings.trusted_ca_file = Some(pki.ca.clone());
        settings.server().expect("server config");
        settings.client().expect("client config");
        settings.skip_verify = true;
        settings
            .client()
            .expect("client config skipping verification");
    }
}
