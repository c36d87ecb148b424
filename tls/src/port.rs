//! The TLS of a member's ports, client and peer: one settings type.
//!
//! Design: both ports are set up by the same flags under two names
//! (`--cert-file` / `--peer-cert-file`, `--trusted-ca-file` /
//! `--peer-trusted-ca-file`, …), read the same files the same way (the
//! certificate and key re-read when they change, see `reload.rs`), speak
//! the same versions and cipher suites, and ask whoever connects for a
//! certificate chaining to the trusted CA when one is given (required, as
//! etcd requires it whenever a trusted CA is set, with or without
//! `--client-cert-auth`). What the peer port has beyond that is data in
//! [`PortSettings`], not a second type:
//!
//! - members dial each other with the same certificate, so the peer port
//!   also has a client side ([`PortSettings::client`]) that verifies the
//!   member dialed against the same trusted CA (or the system's CAs
//!   without one) and presents the member's certificate when asked: the
//!   authentication is mutual;
//! - it may insist on a name in the certificates of members that dial in
//!   ([`PortSettings::allowed`], `--peer-cert-allowed-cn` or
//!   `--peer-cert-allowed-hostname`);
//! - with `--peer-auto-tls` the certificates are self-signed, nobody
//!   vouches for them, and the client side accepts any certificate whose
//!   key signs the handshake ([`PortSettings::skip_verify`]), as etcd does.
//!
//! The [`Port`] decides what rides on the session: gRPC and the HTTP
//! endpoints share the client port (ALPN `h2` and `http/1.1`), while the
//! peer protocol is oxetcd's own and offers no ALPN.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{CipherSuite, ClientConfig, ServerConfig};

use crate::anchor::{Anchors, ClientVerifier};
use crate::reload::ReloadingCert;
use crate::settings::{
    check_suites, provider, revocation_lists, root_store, verify_servers, ALPN_H2, ALPN_HTTP11,
};
use crate::{AllowedPeer, TlsError, Versions};

/// Which of a member's ports a configuration is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// The client port: gRPC and the HTTP endpoints.
    Client,
    /// The peer port: oxetcd's peer protocol, between members.
    Peer,
}

impl Port {
    /// "client" or "peer", as logs say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Peer => "peer",
        }
    }

    /// The ALPN protocols offered: both HTTP versions on the client port
    /// (gRPC needs `h2`, the HTTP endpoints take either), none on the peer
    /// port.
    fn alpn_protocols(self) -> Vec<Vec<u8>> {
        match self {
            Self::Client => vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()],
            Self::Peer => Vec::new(),
        }
    }
}

/// The TLS of one port, from etcd's flags for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSettings {
    /// Which port.
    pub port: Port,
    /// The certificate chain, leaf first: served to whoever connects (and
    /// presented to the members the peer port dials).
    pub cert_file: PathBuf,
    /// The key of the leaf certificate.
    pub key_file: PathBuf,
    /// CAs the certificates of whoever connects must chain to; when set,
    /// they must present one. The peer port's client side verifies the
    /// members it dials against it too (without it, against the system's
    /// CAs).
    pub trusted_ca_file: Option<PathBuf>,
    /// Certificate revocation lists (DER or PEM): a certificate they revoke
    /// is refused. Checked only where certificates are
    /// (`trusted_ca_file`).
    pub crl_file: Option<PathBuf>,
    /// A further condition on the certificates of whoever connects; needs
    /// `trusted_ca_file`. The peer port's `--peer-cert-allowed-*`.
    pub allowed: Option<AllowedPeer>,
    /// The client side accepts any certificate from the members it dials
    /// (`--peer-auto-tls`: self-signed certificates all round).
    pub skip_verify: bool,
    /// Protocol versions to speak.
    pub versions: Versions,
    /// TLS 1.2 suites to offer (empty: all).
    pub cipher_suites: Vec<CipherSuite>,
}

impl PortSettings {
    /// Settings of `port` for `cert_file` and `key_file`: no CA, no
    /// further condition, every version and suite.
    pub fn new(port: Port, cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        Self {
            port,
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            trusted_ca_file: None,
            crl_file: None,
            allowed: None,
            skip_verify: false,
            versions: Versions::default(),
            cipher_suites: Vec::new(),
        }
    }

    /// Reads the files and builds the configuration that accepts
    /// connections on the port.
    pub fn server(&self) -> Result<Arc<ServerConfig>, TlsError> {
        if self.trusted_ca_file.is_none() && self.allowed.is_some() {
            return Err(TlsError::Config(
                "an allowed peer common name or host name needs a trusted CA: peer \
                 certificates are only checked against one"
                    .to_owned(),
            ));
        }
        let (provider, identity) = self.identity()?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&self.versions.rustls())
            .map_err(|e| TlsError::Config(format!("cannot serve these TLS versions: {e}")))?;
        let builder = match &self.trusted_ca_file {
            Some(path) => {
                let (roots, certificates) = root_store(path)?;
                let mut verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let mut lists = Vec::new();
                if let Some(crl_file) = &self.crl_file {
                    // As etcd: the presented certificate's serial is looked
                    // up in the lists; a certificate they do not cover
                    // passes.
                    lists = revocation_lists(crl_file)?;
                    verifier = verifier
                        .with_crls(lists.iter().cloned())
                        .only_check_end_entity_revocation()
                        .allow_unknown_revocation_status();
                }
                let verifier = verifier.build().map_err(|e| TlsError::TrustAnchors {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                let anchors = Anchors::new(certificates, &lists);
                let verifier = ClientVerifier::new(verifier, anchors, self.allowed.clone());
                builder.with_client_cert_verifier(Arc::new(verifier))
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(identity));
        config.alpn_protocols = self.port.alpn_protocols();
        Ok(Arc::new(config))
    }

    /// Reads the files and builds the configuration that dials the port of
    /// other members, presenting this one's certificate.
    pub fn client(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let (provider, identity) = self.identity()?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&self.versions.rustls())
            .map_err(|e| TlsError::Config(format!("cannot dial with these TLS versions: {e}")))?;
        let builder = verify_servers(
            builder,
            provider,
            self.trusted_ca_file.as_deref(),
            self.skip_verify,
            |e| match e {
                TlsError::NoSystemRoots { reason } => TlsError::Config(format!(
                    "no CA certificates to verify peers with ({reason}); give \
                     --peer-trusted-ca-file"
                )),
                other => other,
            },
        )?;
        let mut config = builder.with_client_cert_resolver(Arc::new(identity));
        config.alpn_protocols = self.port.alpn_protocols();
        Ok(Arc::new(config))
    }

    /// The crypto provider for the configured versions and suites, and the
    /// (reloading) certificate both sides present.
    fn identity(&self) -> Result<(Arc<CryptoProvider>, ReloadingCert), TlsError> {
        check_suites(self.versions, &self.cipher_suites)?;
        let provider = provider(&self.cipher_suites);
        let identity = ReloadingCert::new(
            self.cert_file.clone(),
            self.key_file.clone(),
            provider.clone(),
        )?;
        Ok((provider, identity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pki::TestPki;
    use crate::TlsVersion;

    #[test]
    fn allowed_names_need_a_trusted_ca() {
        let dir = tempfile::tempdir().expect("dir");
        let pki = TestPki::write_to(dir.path()).expect("pki");
        let mut settings = PortSettings::new(Port::Peer, &pki.peer_cert, &pki.peer_key);
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

    #[test]
    fn the_client_port_offers_both_http_versions_and_the_peer_port_none() {
        let dir = tempfile::tempdir().expect("dir");
        let pki = TestPki::write_to(dir.path()).expect("pki");
        let client_port = PortSettings::new(Port::Client, &pki.server_cert, &pki.server_key);
        assert_eq!(
            client_port.server().expect("config").alpn_protocols,
            [ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()]
        );
        let peer_port = PortSettings::new(Port::Peer, &pki.peer_cert, &pki.peer_key);
        assert!(peer_port
            .server()
            .expect("config")
            .alpn_protocols
            .is_empty());
        assert!(peer_port
            .client()
            .expect("config")
            .alpn_protocols
            .is_empty());
    }

    #[test]
    fn cipher_suites_need_tls12() {
        let dir = tempfile::tempdir().expect("dir");
        let pki = TestPki::write_to(dir.path()).expect("pki");
        let mut settings = PortSettings::new(Port::Client, &pki.server_cert, &pki.server_key);
        settings.cipher_suites = vec![CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256];
        settings.server().expect("TLS 1.2 and 1.3");
        settings.versions = Versions::new(TlsVersion::Tls13, TlsVersion::Tls13).expect("v");
        assert!(matches!(
            settings.server().unwrap_err(),
            TlsError::CipherSuites(_)
        ));
    }
}
