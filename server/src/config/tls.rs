//! TLS flags of the client port and the peer links: one type, one parser.
//!
//! Design: both sides have the same flags under different names
//! (`--cert-file` / `--peer-cert-file`, …) and are checked by the same
//! rules, as etcd checks them: an `https://` URL to listen on needs a
//! certificate and key (or auto TLS), the two files come together, client
//! certificate authentication needs a CA to verify against, and TLS flags
//! next to `http://` URLs only are ignored with a warning. Both parse into
//! one [`PortTls`]; [`Side`] holds what differs — flag names, words in
//! messages, and what the peer side has beyond the client's: the allowed
//! common name or host name, and the rule that the `https://` peer URLs this
//! member dials (its own advertised ones, those in `--initial-cluster`) need
//! a certificate too — so the rules are written once, in [`parse_side`].
//! Versions and cipher suites have one set of flags (as in etcd), read with
//! the client side's and copied to the peer side's. The files are read when
//! the server starts (`serve/tls.rs`, `peer/tls.rs`).

use std::path::PathBuf;

use super::cluster::InitialMember;
use super::urls::{split_list, ListenUrl};
use super::values::invalid;
use super::ConfigError;

/// The TLS of one side, the client port or the peer links, from its flags
/// (client / peer): `--cert-file` / `--peer-cert-file`, `--key-file` /
/// `--peer-key-file`, `--trusted-ca-file` / `--peer-trusted-ca-file`,
/// `--client-cert-auth` / `--peer-client-cert-auth`, `--auto-tls` /
/// `--peer-auto-tls`, `--client-crl-file` / `--peer-crl-file`; the peer
/// side's `--peer-cert-allowed-cn` or `--peer-cert-allowed-hostname`; and
/// both sides' `--tls-min-version`, `--tls-max-version` and
/// `--cipher-suites`. It applies to the side's `https://` URLs (and, on the
/// peer side, to dials to `https://` peer URLs); `http://` ones stay
/// plaintext.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortTls {
    /// The certificate chain served (and, on the peer side, presented to
    /// the members dialed).
    pub cert_file: Option<PathBuf>,
    /// Its key.
    pub key_file: Option<PathBuf>,
    /// CAs the other side's certificates must chain to (on the peer side
    /// both ways). As in etcd, giving it makes a certificate mandatory for
    /// whoever connects, with or without `client_cert_auth`.
    pub trusted_ca_file: Option<PathBuf>,
    /// `--client-cert-auth` / `--peer-client-cert-auth`.
    pub client_cert_auth: bool,
    /// Auto TLS with no certificate given: a self-signed certificate kept
    /// in `<data-dir>/fixtures/client` or `…/peer`; on the peer side the
    /// certificates of members dialed are then not verified.
    pub auto_tls: bool,
    /// Revoked certificates of whoever connects are refused (read when the
    /// server starts).
    pub crl_file: Option<PathBuf>,
    /// The peer side's further condition on the certificates of members
    /// that dial in; always `None` on the client side.
    pub allowed: Option<oxetcd_tls::AllowedPeer>,
    /// Protocol versions (the same on both sides).
    pub versions: oxetcd_tls::Versions,
    /// TLS 1.2 cipher suites, empty for all (the same on both sides).
    pub cipher_suites: Vec<oxetcd_tls::rustls::CipherSuite>,
}

impl PortTls {
    /// A certificate to serve and present: files or auto TLS.
    pub fn has_identity(&self) -> bool {
        self.cert_file.is_some() || self.auto_tls
    }
}

/// The flags of one side, by name, and what the side has beyond the
/// client's.
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
    /// Why an `https://` URL to listen on cannot be served: etcd's words,
    /// which differ between the sides.
    missing_identity: fn(&ListenUrl) -> String,
    /// The flags naming whom the side accepts, when it has them.
    allowed: Option<AllowedFlags>,
}

/// `--peer-cert-allowed-cn` and `--peer-cert-allowed-hostname`, by name.
struct AllowedFlags {
    common_name: &'static str,
    hostname: &'static str,
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
    missing_identity: |url| {
        format!(
            "TLS key/cert (--cert-file, --key-file) must be provided for client url {} with \
             HTTPS scheme",
            url.url
        )
    },
    allowed: None,
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
    missing_identity: |url| {
        format!(
            "cannot listen on TLS for {}: KeyFile and CertFile are not presented (give \
             --peer-cert-file and --peer-key-file, or --peer-auto-tls)",
            url.addr
        )
    },
    allowed: Some(AllowedFlags {
        common_name: "peer-cert-allowed-cn",
        hostname: "peer-cert-allowed-hostname",
    }),
};

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

    /// `flag`'s value refused for `reason`.
    fn refuse(&self, flag: &'static str, reason: impl Into<String>) -> ConfigError {
        invalid(flag, &(self.value)(flag), reason)
    }
}

/// The rules of both sides, for `side`'s flags, its URLs to listen on and
/// the URLs it dials (each with the flag that named it); versions and
/// cipher suites are left at their defaults.
pub(super) fn parse_side(
    side: &Side,
    given: &Switches<'_>,
    listen_urls: &[ListenUrl],
    dialed_urls: &[(&'static str, &str)],
    warnings: &mut Vec<String>,
) -> Result<PortTls, ConfigError> {
    let mut tls = PortTls {
        cert_file: given.path(side.cert_file),
        key_file: given.path(side.key_file),
        trusted_ca_file: given.path(side.trusted_ca_file),
        client_cert_auth: (given.switch)(side.client_cert_auth),
        auto_tls: (given.switch)(side.auto_tls),
        crl_file: given.path(side.crl_file),
        ..PortTls::default()
    };
    match (&tls.cert_file, &tls.key_file) {
        (Some(_), None) | (None, Some(_)) => {
            let flag = if tls.cert_file.is_some() {
                side.cert_file
            } else {
                side.key_file
            };
            return Err(given.refuse(
                flag,
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
    check_listen(side, &tls, listen_urls, warnings)?;
    if tls.crl_file.is_some() && tls.trusted_ca_file.is_none() {
        warnings.push(format!(
            "--{} has no effect without --{}: only {} certificates verified against a CA \
             are checked for revocation",
            side.crl_file, side.trusted_ca_file, side.word
        ));
    }
    if let Some(flags) = &side.allowed {
        tls.allowed = parse_allowed(flags, given)?;
    }
    check_dialed(side, &tls, given, dialed_urls)?;
    Ok(tls)
}

/// What the URLs `side` listens on need of its TLS flags, and what the
/// flags mean for plain URLs (warnings).
fn check_listen(
    side: &Side,
    tls: &PortTls,
    listen_urls: &[ListenUrl],
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let configured = tls.has_identity() || tls.trusted_ca_file.is_some();
    for url in listen_urls {
        if url.is_secure() && !tls.has_identity() {
            return Err(invalid(
                side.listen_urls,
                &url.url,
                (side.missing_identity)(url),
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
    Ok(())
}

/// The URLs `side` dials over TLS need its certificate; an allowed name
/// needs a CA to verify against.
fn check_dialed(
    side: &Side,
    tls: &PortTls,
    given: &Switches<'_>,
    dialed_urls: &[(&'static str, &str)],
) -> Result<(), ConfigError> {
    let dialed_https = dialed_urls
        .iter()
        .find(|(_, url)| url.starts_with("https://") || url.starts_with("unixs:"));
    if let Some(&(flag, url)) = dialed_https {
        if !tls.has_identity() {
            return Err(invalid(
                flag,
                url,
                format!(
                    "{} URL {url} uses TLS but no {} certificate is given (--{} and --{}, or \
                     --{})",
                    side.word, side.word, side.cert_file, side.key_file, side.auto_tls
                ),
            ));
        }
    }
    if let (Some(allowed), Some(flags)) = (&tls.allowed, &side.allowed) {
        if tls.trusted_ca_file.is_none() {
            let flag = match allowed {
                oxetcd_tls::AllowedPeer::Hostname(_) => flags.hostname,
                oxetcd_tls::AllowedPeer::CommonName(_) => flags.common_name,
            };
            return Err(given.refuse(
                flag,
                format!(
                    "needs --{}: only verified {} certificates are checked for it",
                    side.trusted_ca_file, side.word
                ),
            ));
        }
    }
    Ok(())
}

/// The allowed common name or host name; at most one of them.
fn parse_allowed(
    flags: &AllowedFlags,
    given: &Switches<'_>,
) -> Result<Option<oxetcd_tls::AllowedPeer>, ConfigError> {
    match (given.text(flags.common_name), given.text(flags.hostname)) {
        (Some(cn), Some(hostname)) => Err(invalid(
            flags.common_name,
            &cn,
            format!(
                "AllowedCN and AllowedHostname are mutually exclusive (cn={cn:?}, \
                 hostname={hostname:?})"
            ),
        )),
        (Some(cn), None) => Ok(Some(oxetcd_tls::AllowedPeer::CommonName(cn))),
        (None, Some(hostname)) => Ok(Some(oxetcd_tls::AllowedPeer::Hostname(hostname))),
        (None, None) => Ok(None),
    }
}

/// The client port's TLS: the rules of both sides, then the versions and
/// cipher suites (which the peer links use too).
pub(super) fn parse_client_tls(
    given: &Switches<'_>,
    listen_client_urls: &[ListenUrl],
    warnings: &mut Vec<String>,
) -> Result<PortTls, ConfigError> {
    let tls = parse_side(&CLIENT, given, listen_client_urls, &[], warnings)?;
    let (versions, cipher_suites) = parse_versions(given, warnings)?;
    Ok(PortTls {
        versions,
        cipher_suites,
        ..tls
    })
}

/// The peer links' TLS: the rules of both sides, with the `https://` peer
/// URLs this member dials (advertised, or in `--initial-cluster`), and the
/// client side's versions and cipher suites.
pub(super) fn parse_peer_tls(
    given: &Switches<'_>,
    listen_peer_urls: &[ListenUrl],
    advertise_peer_urls: &[String],
    initial_cluster: &[InitialMember],
    client_tls: &PortTls,
    warnings: &mut Vec<String>,
) -> Result<PortTls, ConfigError> {
    let dialed: Vec<(&'static str, &str)> = advertise_peer_urls
        .iter()
        .map(|url| ("initial-advertise-peer-urls", url.as_str()))
        .chain(
            initial_cluster
                .iter()
                .flat_map(|m| &m.peer_urls)
                .map(|url| ("initial-cluster", url.as_str())),
        )
        .collect();
    let tls = parse_side(&PEER, given, listen_peer_urls, &dialed, warnings)?;
    Ok(PortTls {
        versions: client_tls.versions,
        cipher_suites: client_tls.cipher_suites.clone(),
        ..tls
    })
}

/// `--tls-min-version`, `--tls-max-version` and `--cipher-suites`.
fn parse_versions(
    given: &Switches<'_>,
    warnings: &mut Vec<String>,
) -> Result<(oxetcd_tls::Versions, Vec<oxetcd_tls::rustls::CipherSuite>), ConfigError> {
    let value = given.value;
    let tls_error = |flag: &'static str, e: oxetcd_tls::TlsError| given.refuse(flag, e.to_string());
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
        return Err(given.refuse(
            "cipher-suites",
            "cipher suites cannot be configured when only TLS1.3 is enabled",
        ));
    }
    Ok((versions, suites.tls12))
}
