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

use crate::der::subject_common_name;

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
