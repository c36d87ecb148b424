//! TLS flags of the client port and the peer links, parsed by one parser.
//!
//! Design: both sides have the same flags under different names
//! (`--cert-file` / `--peer-cert-file`, …) and are checked by the same
//! rules, as etcd checks them: an `https://` URL to listen on needs a
//! certificate and key (or auto TLS), the two files come together, client
//! certificate authentication needs a CA to verify against, and TLS flags
//! next to `http://` URLs only are ignored with a warning. [`Side`] holds
//! what differs — flag names and words in messages — so the rules are
//! written once, in [`parse_side`]. Versions and cipher suites are shared by
//! both sides (etcd has one set of flags for them); the peer side adds the
//! allowed common name or host name and the rule that this member's own
//! `https://` peer URLs, which it dials, need a certificate too. The files
//! are read when the server starts (`serve/tls.rs`, `peer/tls.rs`).

use std::path::PathBuf;

use super::cluster::InitialMember;
use super::urls::{split_list, ListenUrl};
use super::values::invalid;
use super::ConfigError;

/// TLS of the client port: `--cert-file`, `--key-file`,
/// `--trusted-ca-file`, `--client-cert-auth`, `--auto-tls`,
/// `--tls-min-version`, `--tls-max-version` and `--cipher-suites`. It
/// applies to the `https://` client URLs; `http://` ones stay plaintext.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The server's certificate chain.
    pub cert_file: Option<PathBuf>,
    /// Its key.
    pub key_file: Option<PathBuf>,
    /// CAs client certificates must chain to. As in etcd, giving it makes
    /// a client certificate mandatory, with or without `--client-cert-auth`.
    pub trusted_ca_file: Option<PathBuf>,
    /// `--client-cert-auth`.
    pub client_cert_auth: bool,
    /// `--auto-tls` with no certificate given: serve a self-signed
    /// certificate kept in `<data-dir>/fixtures/client`.
    pub auto_tls: bool,
    /// `--client-crl-file`: revoked client certificates are refused (read
    /// when the server starts).
    pub crl_file: Option<PathBuf>,
    /// Protocol versions.
    pub versions: oxetcd_tls::Versions,
    /// TLS 1.2 cipher suites (empty: all).
    pub cipher_suites: Vec<oxetcd_tls::rustls::CipherSuite>,
}

/// TLS of the peer links: `--peer-cert-file`, `--peer-key-file`,
/// `--peer-trusted-ca-file`, `--peer-client-cert-auth`, `--peer-auto-tls`,
/// `--peer-cert-allowed-cn` and `--peer-cert-allowed-hostname` (versions
/// and cipher suites are [`ClientTls`]'s, as in etcd). It applies to this
/// member's `https://` listen peer URLs and to dials to `https://` peer
/// URLs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerTls {
    /// The member's certificate chain, served and presented to peers.
    pub cert_file: Option<PathBuf>,
    /// Its key.
    pub key_file: Option<PathBuf>,
    /// CAs peers' certificates must chain to, both ways. As in etcd,
    /// giving it makes a certificate mandatory for members that dial in.
    pub trusted_ca_file: Option<PathBuf>,
    /// `--peer-client-cert-auth`.
    pub client_cert_auth: bool,
    /// `--peer-auto-tls` with no certificate given: a self-signed
    /// certificate kept in `<data-dir>/fixtures/peer`, and peers'
    /// certificates not verified.
    pub auto_tls: bool,
    /// `--peer-crl-file`: revoked certificates of dialing members are
    /// refused.
    pub crl_file: Option<PathBuf>,
    /// `--peer-cert-allowed-cn` or `--peer-cert-allowed-hostname`.
    pub allowed: Option<oxetcd_tls::AllowedPeer>,
}

impl PeerTls {
    /// A certificate to serve and present: files or `--peer-auto-tls`.
    pub fn has_identity(&self) -> bool {
        self.cert_file.is_some() || self.auto_tls
    }
}

/// The flags of one side, by name.
pub(super) struct Side {
    /// "client" or "peer", as messages say it.
    word: &'static str,
    cert_file: &'static str,
    key_file: &'static str,
    trusted_ca_file: &'static str,
    client_cert_auth: &'static str,
    auto_tls: &'static str,
    crl_file: &'static str,
    listen_urls: &'static str,
}

impl Side {
    /// Why `url` cannot be served: etcd's words for each side.
    fn missing_identity(&self, url: &ListenUrl) -> String {
        if self.word == "client" {
            format!(
                "TLS key/cert (--cert-file, --key-file) must be provided for client url {} \
                 with HTTPS scheme",
                url.url
            )
        } else {
            format!(
                "cannot listen on TLS for {}: KeyFile and CertFile are not presented (give \
                 --peer-cert-file and --peer-key-file, or --peer-auto-tls)",
                url.addr
            )
        }
    }
}

/// The client port's flags.
pub(super) const CLIENT: Side = Side {
    word: "client",
    cert_file: "cert-file",
    key_file: "key-file",
    trusted_ca_file: "trusted-ca-file",
    client_cert_auth: "client-cert-auth",
    auto_tls: "auto-tls",
    crl_file: "client-crl-file",
    listen_urls: "listen-client-urls",
};

/// The peer links' flags.
pub(super) const PEER: Side = Side {
    word: "peer",
    cert_file: "peer-cert-file",
    key_file: "peer-key-file",
    trusted_ca_file: "peer-trusted-ca-file",
    client_cert_auth: "peer-client-cert-auth",
    auto_tls: "peer-auto-tls",
    crl_file: "peer-crl-file",
    listen_urls: "listen-peer-urls",
};

/// What both sides have, parsed and checked.
pub(super) struct Common {
    pub(super) cert_file: Option<PathBuf>,
    pub(super) key_file: Option<PathBuf>,
    pub(super) trusted_ca_file: Option<PathBuf>,
    pub(super) client_cert_auth: bool,
    pub(super) auto_tls: bool,
    pub(super) crl_file: Option<PathBuf>,
}

impl Common {
    fn has_identity(&self) -> bool {
        self.cert_file.is_some() || self.auto_tls
    }
}

/// A flag's value (its default when not given) and a switch's state.
pub(super) struct Switches<'a> {
    pub(super) value: &'a dyn Fn(&'static str) -> String,
    pub(super) switch: &'a dyn Fn(&'static str) -> bool,
}

impl Switches<'_> {
    fn path(&self, flag: &'static str) -> Option<PathBuf> {
        Some(PathBuf::from((self.value)(flag))).filter(|p| !p.as_os_str().is_empty())
    }

    fn text(&self, flag: &'static str) -> Option<String> {
        Some((self.value)(flag)).filter(|v| !v.is_empty())
    }
}

/// The rules both sides share, for `side`'s flags and its URLs to listen
/// on.
pub(super) fn parse_side(
    side: &Side,
    given: &Switches<'_>,
    listen_urls: &[ListenUrl],
    warnings: &mut Vec<String>,
) -> Result<Common, ConfigError> {
    let mut tls = Common {
        cert_file: given.path(side.cert_file),
        key_file: given.path(side.key_file),
        trusted_ca_file: given.path(side.trusted_ca_file),
        client_cert_auth: (given.switch)(side.client_cert_auth),
        auto_tls: (given.switch)(side.auto_tls),
        crl_file: given.path(side.crl_file),
    };
    match (&tls.cert_file, &tls.key_file) {
        (Some(_), None) | (None, Some(_)) => {
            let flag = if tls.cert_file.is_some() {
                side.cert_file
            } else {
                side.key_file
            };
            return Err(invalid(
                flag,
                &(given.value)(flag),
                format!(
                    "--{} and --{} must be given together",
                    side.cert_file, side.key_file
                ),
            ));
        }
        (Some(_), Some(_)) if tls.auto_tls => {
            warnings.push(format!("ignoring {} auto TLS since certs given", side.word));
            tls.auto_tls = false;
        }
        _ => {}
    }
    let configured = tls.has_identity() || tls.trusted_ca_file.is_some();
    for url in listen_urls {
        if url.is_secure() && !tls.has_identity() {
            return Err(invalid(
                side.listen_urls,
                &url.url,
                side.missing_identity(url),
            ));
        }
        if !url.is_secure() && configured {
            warnings.push(format!(
                "scheme is HTTP while {} TLS flags are present; serving {} URL {} without TLS",
                side.word, side.word, url.url
            ));
        }
        if !url.is_secure() && tls.client_cert_auth {
            warnings.push(format!(
                "scheme is HTTP while --{} is enabled; ignoring client cert auth for {} URL {}",
                side.client_cert_auth, side.word, url.url
            ));
        }
    }
    let secure = listen_urls.iter().any(ListenUrl::is_secure);
    if secure && tls.client_cert_auth && tls.trusted_ca_file.is_none() {
        return Err(invalid(
            side.trusted_ca_file,
            "",
            format!(
                "--{} needs --{}: {} certificates are verified against it",
                side.client_cert_auth, side.trusted_ca_file, side.word
            ),
        ));
    }
    if tls.crl_file.is_some() && tls.trusted_ca_file.is_none() {
        warnings.push(format!(
            "--{} has no effect without --{}: only {} certificates verified against a CA \
             are checked for revocation",
            side.crl_file, side.trusted_ca_file, side.word
        ));
    }
    Ok(tls)
}

/// The client port's TLS: the shared rules, then versions and cipher
/// suites (which the peer links use too).
pub(super) fn parse_client_tls(
    given: &Switches<'_>,
    listen_client_urls: &[ListenUrl],
    warnings: &mut Vec<String>,
) -> Result<ClientTls, ConfigError> {
    let common = parse_side(&CLIENT, given, listen_client_urls, warnings)?;
    let value = given.value;
    let tls_error =
        |flag: &'static str, e: oxetcd_tls::TlsError| invalid(flag, &value(flag), e.to_string());
    let version = |flag: &'static str, default: oxetcd_tls::TlsVersion| match value(flag).trim() {
        "" => Ok(default),
        text => oxetcd_tls::TlsVersion::parse(text).map_err(|e| tls_error(flag, e)),
    };
    let min = version("tls-min-version", oxetcd_tls::TlsVersion::Tls12)?;
    let max = version("tls-max-version", oxetcd_tls::TlsVersion::Tls13)?;
    let versions =
        oxetcd_tls::Versions::new(min, max).map_err(|e| tls_error("tls-max-version", e))?;
    let names: Vec<String> = split_list(&value("cipher-suites"))
        .map(str::to_owned)
        .collect();
    let suites =
        oxetcd_tls::parse_cipher_suites(&names).map_err(|e| tls_error("cipher-suites", e))?;
    for name in &suites.unsupported {
        warnings.push(format!(
            "cipher suite {name} is not implemented by oxetcd; ignoring it"
        ));
    }
    if !suites.tls12.is_empty() && min == oxetcd_tls::TlsVersion::Tls13 {
        return Err(invalid(
            "cipher-suites",
            &value("cipher-suites"),
            "cipher suites cannot be configured when only TLS1.3 is enabled",
        ));
    }
    Ok(ClientTls {
        cert_file: common.cert_file,
        key_file: common.key_file,
        trusted_ca_file: common.trusted_ca_file,
        client_cert_auth: common.client_cert_auth,
        auto_tls: common.auto_tls,
        crl_file: common.crl_file,
        versions,
        cipher_suites: suites.tls12,
    })
}

/// The peer links' TLS: the shared rules, the allowed peer, and a
/// certificate for this member's own `https://` peer URLs (advertised, or
/// in `--initial-cluster`), which it dials.
pub(super) fn parse_peer_tls(
    given: &Switches<'_>,
    listen_peer_urls: &[ListenUrl],
    advertise_peer_urls: &[String],
    initial_cluster: &[InitialMember],
    warnings: &mut Vec<String>,
) -> Result<PeerTls, ConfigError> {
    let common = parse_side(&PEER, given, listen_peer_urls, warnings)?;
    let allowed = match (
        given.text("peer-cert-allowed-cn"),
        given.text("peer-cert-allowed-hostname"),
    ) {
        (Some(cn), Some(hostname)) => {
            return Err(invalid(
                "peer-cert-allowed-cn",
                &cn,
                format!(
                    "AllowedCN and AllowedHostname are mutually exclusive (cn={cn:?}, \
                     hostname={hostname:?})"
                ),
            ))
        }
        (Some(cn), None) => Some(oxetcd_tls::AllowedPeer::CommonName(cn)),
        (None, Some(hostname)) => Some(oxetcd_tls::AllowedPeer::Hostname(hostname)),
        (None, None) => None,
    };
    let dialed_https = advertise_peer_urls
        .iter()
        .map(|url| ("initial-advertise-peer-urls", url))
        .chain(
            initial_cluster
                .iter()
                .flat_map(|m| &m.peer_urls)
                .map(|url| ("initial-cluster", url)),
        )
        .find(|(_, url)| url.starts_with("https://"));
    if let Some((flag, url)) = dialed_https {
        if !common.has_identity() {
            return Err(invalid(
                flag,
                url,
                format!(
                    "peer URL {url} uses TLS but no peer certificate is given (--peer-cert-file \
                     and --peer-key-file, or --peer-auto-tls)"
                ),
            ));
        }
    }
    if allowed.is_some() && common.trusted_ca_file.is_none() {
        let flag = match allowed {
            Some(oxetcd_tls::AllowedPeer::Hostname(_)) => "peer-cert-allowed-hostname",
            _ => "peer-cert-allowed-cn",
        };
        return Err(invalid(
            flag,
            &(given.value)(flag),
            "needs --peer-trusted-ca-file: only verified peer certificates are checked for it",
        ));
    }
    Ok(PeerTls {
        cert_file: common.cert_file,
        key_file: common.key_file,
        trusted_ca_file: common.trusted_ca_file,
        client_cert_auth: common.client_cert_auth,
        auto_tls: common.auto_tls,
        crl_file: common.crl_file,
        allowed,
    })
}
