//! `--peer-cert-allowed-cn` and `--peer-cert-allowed-hostname`: the one
//! peer a certificate must name, beyond chaining to the trusted CA — by the
//! subject's common name, or by a host name or IP address it is valid for.
//! The port's client verifier ([`crate::anchor::ClientVerifier`]) applies
//! it.

use rustls::pki_types::{CertificateDer, ServerName};

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

impl AllowedPeer {
    /// Whether `cert` names this peer.
    pub(crate) fn named_by(&self, cert: &CertificateDer<'_>) -> bool {
        match self {
            Self::CommonName(name) => subject_common_name(cert).as_deref() == Some(name.as_str()),
            Self::Hostname(host) => valid_for_host(cert, host),
        }
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
