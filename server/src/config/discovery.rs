//! How a new member learns its initial cluster, when not from
//! `--initial-cluster`: v3 discovery (`--discovery-token` and
//! `--discovery-endpoints`, with their TLS, auth and timeout flags) or DNS
//! SRV records (`--discovery-srv`, `--discovery-srv-name`).
//!
//! Design: this module only reads the flags and applies etcd's rules
//! between them (one way of bootstrapping; a token for the endpoints).
//! The protocols run when the server starts (`crate::discovery`), and
//! their answer replaces the initial cluster ([`Config::discovered`]).
//! With v3 discovery the token is also the cluster token member IDs are
//! derived from, as in etcd.

use std::time::Duration;

use oxetcd_tls::ClientSettings;

use super::settings::Settings;
use super::values::invalid;
use super::ConfigError;

/// etcd's words when more than one way of bootstrapping is given.
pub(crate) const CONFLICTING_BOOTSTRAP: &str =
    "multiple discovery or bootstrap flags are set. Choose \
                                         one of \"initial-cluster\", \"discovery\", \
                                         \"discovery-endpoints\" or \"discovery-srv\"";

/// Where the initial cluster comes from, when not from `--initial-cluster`.
#[derive(Clone, Debug, PartialEq)]
pub enum Discovery {
    /// A registry in another etcd-compatible cluster.
    V3(V3Discovery),
    /// DNS SRV records of `domain`.
    Srv {
        /// `--discovery-srv`.
        domain: String,
        /// `--discovery-srv-name`: a suffix to the service names.
        service_name: String,
    },
}

/// v3 discovery's flags.
#[derive(Clone, Debug, PartialEq)]
pub struct V3Discovery {
    /// `--discovery-token`.
    pub token: String,
    /// `--discovery-endpoints`.
    pub endpoints: Vec<String>,
    /// `--discovery-dial-timeout`.
    pub dial_timeout: Duration,
    /// `--discovery-request-timeout`.
    pub request_timeout: Duration,
    /// `--discovery-keepalive-time`.
    pub keepalive_time: Duration,
    /// `--discovery-keepalive-timeout`.
    pub keepalive_timeout: Duration,
    /// TLS towards the endpoints: `None` for plaintext
    /// (`--discovery-insecure-transport`, the default, with no TLS file
    /// given and no `https://` endpoint).
    pub tls: Option<ClientSettings>,
    /// `--discovery-user` (`name[:password]`) and `--discovery-password`.
    pub credentials: Option<(String, String)>,
}

/// The discovery the flags ask for, if any; an error for conflicting or
/// incomplete ones. `initial_cluster_given`: `--initial-cluster` was given.
pub(super) fn parse(
    settings: &Settings,
    initial_cluster_given: bool,
) -> Result<Option<Discovery>, ConfigError> {
    let endpoints = settings.list("discovery-endpoints");
    let token = settings.text("discovery-token");
    let domain = settings.text("discovery-srv");
    let chosen = [
        initial_cluster_given,
        !endpoints.is_empty(),
        !domain.is_empty(),
    ];
    if chosen.iter().filter(|&&c| c).count() > 1 {
        let flag = if endpoints.is_empty() {
            "discovery-srv"
        } else {
            "discovery-endpoints"
        };
        return Err(invalid(flag, &settings.text(flag), CONFLICTING_BOOTSTRAP));
    }
    if !domain.is_empty() {
        return Ok(Some(Discovery::Srv {
            domain,
            service_name: settings.text("discovery-srv-name"),
        }));
    }
    if endpoints.is_empty() {
        if !token.is_empty() {
            return Err(invalid(
                "discovery-token",
                &token,
                "--discovery-endpoints must be set with --discovery-token",
            ));
        }
        return Ok(None);
    }
    if token.is_empty() {
        return Err(invalid(
            "discovery-endpoints",
            &endpoints.join(","),
            "--discovery-token must be set with --discovery-endpoints",
        ));
    }
    let file = |flag: &str| {
        Some(settings.text(flag))
            .filter(|f| !f.is_empty())
            .map(Into::into)
    };
    let (ca_file, cert_file, key_file) = (
        file("discovery-cacert"),
        file("discovery-cert"),
        file("discovery-key"),
    );
    let secure = !settings.bool("discovery-insecure-transport")
        || ca_file.is_some()
        || cert_file.is_some()
        || endpoints.iter().any(|e| e.starts_with("https://"));
    let tls = secure.then(|| ClientSettings {
        ca_file,
        cert_file,
        key_file,
        skip_verify: settings.bool("discovery-insecure-skip-tls-verify"),
    });
    let user = settings.text("discovery-user");
    let credentials = (!user.is_empty()).then(|| match user.split_once(':') {
        Some((name, password)) => (name.to_owned(), password.to_owned()),
        None => (user.clone(), settings.text("discovery-password")),
    });
    Ok(Some(Discovery::V3(V3Discovery {
        token,
        endpoints,
        dial_timeout: settings.duration("discovery-dial-timeout"),
        request_timeout: settings.duration("discovery-request-timeout"),
        keepalive_time: settings.duration("discovery-keepalive-time"),
        keepalive_timeout: settings.duration("discovery-keepalive-timeout"),
        tls,
        credentials,
    })))
}
