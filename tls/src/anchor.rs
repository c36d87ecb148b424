//! A trusted CA certificate presented as the certificate itself.
//!
//! Go's TLS (and so etcd) accepts a certificate that is byte for byte one
//! of the trusted CAs, even when it is marked as a CA: the chain is the
//! trust anchor alone. etcd's own fixtures rely on it — `CommonName-root`
//! is a self-signed CA serving as the server's certificate, the client's
//! certificate and the trusted CA at once. webpki refuses any CA
//! certificate as an end entity (`CaUsedAsEndEntity`).
//!
//! Design: wrappers around webpki's verifiers that change one answer only.
//! When webpki refuses a certificate as a CA used as an end entity, and
//! that certificate is exactly one of the configured trust anchors, it is
//! accepted if it is within its validity period and, with revocation lists,
//! not revoked by serial; a server's must also be valid for the name
//! dialed. Every other certificate and every other refusal is webpki's.
//! The client side is the ports' one client verifier, which also applies
//! the peer port's `--peer-cert-allowed-*` ([`AllowedPeer`]): a
//! certificate not naming the allowed peer is refused with a
//! `bad_certificate` alert, as Go's TLS sends it.
//! Handshake signatures are always checked with the presented key, so the
//! peer must hold the anchor's private key. A CA certificate issued by a
//! trusted CA (rather than being one) is still refused.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::der;
use crate::AllowedPeer;

/// The trusted CA certificates, and what else an anchor presented as an
/// end entity must pass.
#[derive(Debug)]
pub(crate) struct Anchors {
    certificates: Vec<CertificateDer<'static>>,
    revoked: Vec<webpki::CertRevocationList<'static>>,
}

impl Anchors {
    /// `certificates` as anchors; `lists` are the revocation lists in
    /// force (empty: none). A list that does not parse is left to webpki,
    /// which refuses it when the verifier is built.
    pub(crate) fn new(
        certificates: Vec<CertificateDer<'static>>,
        lists: &[CertificateRevocationListDer<'_>],
    ) -> Self {
        let revoked = lists
            .iter()
            .filter_map(|list| webpki::OwnedCertRevocationList::from_der(list).ok())
            .map(webpki::CertRevocationList::from)
            .collect();
        Self {
            certificates,
            revoked,
        }
    }

    /// Whether `refused` is webpki refusing `cert` only for being a CA,
    /// and `cert` is one of the anchors, valid at `now` and not revoked.
    fn accepts(&self, refused: &rustls::Error, cert: &CertificateDer<'_>, now: UnixTime) -> bool {
        ca_used_as_end_entity(refused)
            && self.certificates.iter().any(|anchor| anchor == cert)
            && der::validity(cert)
                .is_some_and(|(from, until)| (from..=until).contains(&now.as_secs()))
            && der::serial(cert).is_some_and(|serial| {
                self.revoked
                    .iter()
                    .all(|list| matches!(list.find_serial(serial), Ok(None)))
            })
    }
}

/// Whether `error` is webpki's `CaUsedAsEndEntity`.
fn ca_used_as_end_entity(error: &rustls::Error) -> bool {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => matches!(
            other.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::CaUsedAsEndEntity)
        ),
        _ => false,
    }
}

/// The ports' client certificate verifier: webpki's, also accepting a
/// trust anchor, and narrowed to certificates naming `allowed` when set.
#[derive(Debug)]
pub(crate) struct ClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    anchors: Anchors,
    allowed: Option<AllowedPeer>,
}

impl ClientVerifier {
    pub(crate) fn new(
        inner: Arc<dyn ClientCertVerifier>,
        anchors: Anchors,
        allowed: Option<AllowedPeer>,
    ) -> Self {
        Self {
            inner,
            anchors,
            allowed,
        }
    }
}

impl ClientCertVerifier for ClientVerifier {
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
        let verdict = self
            .inner
            .verify_client_cert(end_entity, intermediates, now);
        let verified = match verdict {
            Err(refused) if self.anchors.accepts(&refused, end_entity, now) => {
                ClientCertVerified::assertion()
            }
            verdict => verdict?,
        };
        match &self.allowed {
            Some(allowed) if !allowed.named_by(end_entity) => {
                // A bad_certificate alert, as Go's TLS sends when a peer's
                // name is refused: the dialing member reads `remote error:
                // tls: bad certificate`, the line etcd's tooling looks for.
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName,
                ))
            }
            _ => Ok(verified),
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

/// A server certificate verifier that also accepts a trust anchor valid
/// for the name dialed.
#[derive(Debug)]
pub(crate) struct AnchorServerVerifier {
    inner: Arc<dyn ServerCertVerifier>,
    anchors: Anchors,
}

impl AnchorServerVerifier {
    pub(crate) fn new(inner: Arc<dyn ServerCertVerifier>, anchors: Anchors) -> Self {
        Self { inner, anchors }
    }
}

impl ServerCertVerifier for AnchorServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verdict = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match verdict {
            Err(refused) if self.anchors.accepts(&refused, end_entity, now) => {
                let named = webpki::EndEntityCert::try_from(end_entity)
                    .is_ok_and(|cert| cert.verify_is_valid_for_subject_name(server_name).is_ok());
                if named {
                    Ok(ServerCertVerified::assertion())
                } else {
                    Err(rustls::Error::InvalidCertificate(
                        CertificateError::NotValidForName,
                    ))
                }
            }
            verdict => verdict,
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

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    use rustls::server::WebPkiClientVerifier;
    use rustls::RootCertStore;

    /// A self-signed CA valid from `from` to `until` (years).
    fn ca(name: &str, from: i32, until: i32) -> CertificateDer<'static> {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(until, 1, 1);
        let key = KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().clone()
    }

    fn client_verifier(trusted: &[&CertificateDer<'static>]) -> ClientVerifier {
        let mut roots = RootCertStore::empty();
        for cert in trusted {
            roots.add((*cert).clone()).expect("root");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
        let certificates = trusted.iter().map(|cert| (*cert).clone()).collect();
        ClientVerifier::new(inner, Anchors::new(certificates, &[]), None)
    }

    fn at(year: i32) -> UnixTime {
        let days = days_since_epoch(year);
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(days * 86_400))
    }

    fn days_since_epoch(year: i32) -> u64 {
        (1970..year)
            .map(|y| {
                if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 {
                    366
                } else {
                    365
                }
            })
            .sum()
    }

    #[test]
    fn an_anchor_presented_as_the_client_certificate_is_accepted_while_valid() {
        let root = ca("root", 2020, 2040);
        let verifier = client_verifier(&[&root]);
        // webpki alone refuses it, for being a CA.
        let refused = verifier.inner.verify_client_cert(&root, &[], at(2030));
        assert!(
            matches!(&refused, Err(e) if ca_used_as_end_entity(e)),
            "{refused:?}"
        );
        assert!(verifier.verify_client_cert(&root, &[], at(2030)).is_ok());
        // Outside its validity period it is refused, as before.
        assert!(verifier.verify_client_cert(&root, &[], at(2019)).is_err());
        assert!(verifier.verify_client_cert(&root, &[], at(2041)).is_err());
    }

    #[test]
    fn a_ca_that_is_not_an_anchor_is_still_refused() {
        let root = ca("root", 2020, 2040);
        let other = ca("root", 2020, 2040);
        let verifier = client_verifier(&[&root]);
        assert!(verifier.verify_client_cert(&other, &[], at(2030)).is_err());
    }

    #[test]
    fn an_anchor_served_by_a_server_is_accepted_for_its_names_only() {
        use rustls::client::WebPkiServerVerifier;
        let root = ca("root", 2020, 2040);
        let mut roots = RootCertStore::empty();
        roots.add(root.clone()).expect("root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
        let verifier = AnchorServerVerifier::new(inner, Anchors::new(vec![root.clone()], &[]));
        let verify = |name: &str| {
            let name = ServerName::try_from(name.to_owned()).expect("name");
            verifier.verify_server_cert(&root, &[], &name, &[], at(2030))
        };
        assert!(verify("localhost").is_ok());
        assert!(verify("127.0.0.1").is_ok());
        assert!(verify("example.org").is_err());
    }

    #[test]
    fn validity_is_read_from_the_certificate() {
        let cert = ca("root", 2020, 2040);
        let (from, until) = der::validity(&cert).expect("validity");
        assert_eq!(from, days_since_epoch(2020) * 86_400);
        assert_eq!(until, days_since_epoch(2040) * 86_400);
        // Truncated DER reads as nothing, never a panic.
        for len in 0..cert.len() {
            let _ = der::validity(&cert[..len]);
            let _ = der::serial(&cert[..len]);
        }
        assert!(der::serial(&cert).is_some_and(|serial| !serial.is_empty()));
    }
}
