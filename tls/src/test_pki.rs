//! A throwaway PKI for tests: a CA, a server certificate for
//! `127.0.0.1`/`localhost` and a client certificate it signed, and a second,
//! unrelated CA, written as PEM files into a directory the caller owns.
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
}

impl TestPki {
    /// Makes fresh keys and certificates and writes them into `dir`.
    pub fn write_to(dir: &Path) -> io::Result<Self> {
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).map(|()| path)
        };
        let authority = Authority::new("oxetcd test CA")?;
        let other = Authority::new("unrelated CA")?;
        let (server_cert, server_key) = authority.sign(
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client_cert, client_key) = authority.sign(&[], ExtendedKeyUsagePurpose::ClientAuth)?;
        Ok(Self {
            ca: write("ca.pem", &authority.cert.pem())?,
            other_ca: write("other-ca.pem", &other.cert.pem())?,
            server_cert: write("server.pem", &server_cert)?,
            server_key: write("server-key.pem", &server_key)?,
            client_cert: write("client.pem", &client_cert)?,
            client_key: write("client-key.pem", &client_key)?,
        })
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
    fn sign(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> io::Result<(String, String)> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).map_err(other)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "oxetcd test");
        params.extended_key_usages = vec![usage];
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
