//! A throwaway PKI for tests: a CA, a server certificate for
//! `127.0.0.1`/`localhost`, a client certificate and a peer certificate it
//! signed, and a second, unrelated CA with a peer certificate of its own,
//! written as PEM files into a directory the caller owns. On request, more
//! client certificates, each with a common name of the caller's choosing
//! (the name etcd's `--client-cert-auth` takes as the user's).
//!
//! A peer certificate carries both extended key usages, server and client
//! authentication: a member presents the same certificate when it accepts
//! a peer connection and when it dials one, and each side checks the usage
//! its role needs (etcd's peer certificates are made the same way).
//!
//! It lives here, beside [`crate::self_signed`], because the same rcgen
//! serves both, and because the crate's own tests and the end-to-end tests
//! of the servers need the same files. Nothing in a server uses it.

use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The PEM files of a test PKI.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
    /// A server certificate for `127.0.0.1` and `localhost`.
    pub server_cert: PathBuf,
    /// Its key.
    pub server_key: PathBuf,
    /// A client certificate.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// A peer certificate for `127.0.0.1` and `localhost`, usable as server
    /// and as client certificate.
    pub peer_cert: PathBuf,
    /// Its key.
    pub peer_key: PathBuf,
    /// A peer certificate like `peer_cert`, signed by the unrelated CA.
    pub other_peer_cert: PathBuf,
    /// Its key.
    pub other_peer_key: PathBuf,
    /// Client certificates with the common names asked for.
    pub named_clients: Vec<NamedClient>,
}

/// A client certificate whose subject's common name is `name`.
#[derive(Debug, Clone)]
pub struct NamedClient {
    /// The common name.
    pub name: String,
    /// The certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

impl TestPki {
    /// Makes fresh keys and certificates and writes them into `dir`.
    pub fn write_to(dir: &Path) -> io::Result<Self> {
        Self::write_with_clients(dir, &[])
    }

    /// As [`TestPki::write_to`], plus a client certificate (signed by the
    /// same CA) for each of `names`, that name its common name.
    pub fn write_with_clients(dir: &Path, names: &[&str]) -> io::Result<Self> {
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).map(|()| path)
        };
        let authority = Authority::new("oxetcd test CA")?;
        let other = Authority::new("unrelated CA")?;
        let local = ["127.0.0.1", "localhost"];
        let (server_cert, server_key) =
            authority.sign(&local, &[ExtendedKeyUsagePurpose::ServerAuth])?;
        let (client_cert, client_key) =
            authority.sign(&[], &[ExtendedKeyUsagePurpose::ClientAuth])?;
        let peer_usages = [
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let (peer_cert, peer_key) = authority.sign(&local, &peer_usages)?;
        let (other_peer_cert, other_peer_key) = other.sign(&local, &peer_usages)?;
        let mut named_clients = Vec::with_capacity(names.len());
        for name in names {
            let (cert, key) =
                authority.sign_named(name, &[], &[ExtendedKeyUsagePurpose::ClientAuth])?;
            named_clients.push(NamedClient {
                name: (*name).to_owned(),
                cert: write(&format!("client-{name}.pem"), &cert)?,
                key: write(&format!("client-{name}-key.pem"), &key)?,
            });
        }
        Ok(Self {
            ca: write("ca.pem", &authority.cert.pem())?,
            other_ca: write("other-ca.pem", &other.cert.pem())?,
            server_cert: write("server.pem", &server_cert)?,
            server_key: write("server-key.pem", &server_key)?,
            client_cert: write("client.pem", &client_cert)?,
            client_key: write("client-key.pem", &client_key)?,
            peer_cert: write("peer.pem", &peer_cert)?,
            peer_key: write("peer-key.pem", &peer_key)?,
            other_peer_cert: write("other-peer.pem", &other_peer_cert)?,
            other_peer_key: write("other-peer-key.pem", &other_peer_key)?,
            named_clients,
        })
    }

    /// The client certificate made for common name `name`, if any.
    pub fn named_client(&self, name: &str) -> Option<&NamedClient> {
        self.named_clients.iter().find(|c| c.name == name)
    }
}

/// A test PKI together with what keeps its directory alive (a
/// `tempfile::TempDir`, in tests): the files last as long as it does, and
/// it reads as the [`TestPki`] it holds.
#[derive(Debug)]
pub struct TestPkiIn<D> {
    /// The directory's owner.
    pub dir: D,
    files: TestPki,
}

impl<D: AsRef<Path>> TestPkiIn<D> {
    /// Makes fresh keys and certificates and writes them into `dir`.
    pub fn write(dir: D) -> io::Result<Self> {
        Self::write_with_clients(dir, &[])
    }

    /// As [`TestPkiIn::write`], with [`TestPki::write_with_clients`]'s
    /// named client certificates.
    pub fn write_with_clients(dir: D, names: &[&str]) -> io::Result<Self> {
        let files = TestPki::write_with_clients(dir.as_ref(), names)?;
        Ok(Self { dir, files })
    }
}

impl<D> std::ops::Deref for TestPkiIn<D> {
    type Target = TestPki;

    fn deref(&self) -> &TestPki {
        &self.files
    }
}

struct Authority {
    cert: Certificate,
    key: KeyPair,
}

impl Authority {
    fn new(name: &str) -> io::Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(other)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(other)?;
        let cert = params.self_signed(&key).map_err(other)?;
        Ok(Self { cert, key })
    }

    /// A certificate for `names` signed by this CA, as (cert PEM, key PEM).
    fn sign(
        &self,
        names: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> io::Result<(String, String)> {
        self.sign_named("oxetcd test", names, usages)
    }

    /// As [`Authority::sign`], with `common_name` as the subject's.
    fn sign_named(
        &self,
        common_name: &str,
        names: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> io::Result<(String, String)> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).map_err(other)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = usages.to_vec();
        let key = KeyPair::generate().map_err(other)?;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(other)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn other(error: rcgen::Error) -> io::Error {
    io::Error::other(error.to_string())
}
