//! `--peer-cert-allowed-cn` and `--peer-cert-allowed-hostname`: a client
//! certificate verifier that, after the CA's verifier accepted a
//! certificate, accepts it only if it names the one allowed peer — by the
//! subject's common name, or by a host name or IP address it is valid for.
//! A refusal is a `bad_certificate` alert, as Go's TLS sends it.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// What a peer's certificate must name, beyond chaining to the trusted CA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedPeer {
    /// `--peer-cert-allowed-cn`: the subject's common name, exactly.
    CommonName(String),
    /// `--peer-cert-allowed-hostname`: a DNS name or IP address the
    /// certificate is valid for (its subject alternative names).
    Hostname(String),
}

/// A client verifier that accepts only certificates naming [`AllowedPeer`],
/// after the CA's verifier accepted them.
#[derive(Debug)]
pub(crate) struct AllowedOnly {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: AllowedPeer,
}

impl AllowedOnly {
    /// `inner`, narrowed to certificates naming `allowed`.
    pub(crate) fn new(inner: Arc<dyn ClientCertVerifier>, allowed: AllowedPeer) -> Self {
        Self { inner, allowed }
    }
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
pub fn subject_common_name(cert: &[u8]) -> Option<String> {
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
}
