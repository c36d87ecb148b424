//! URL lists: `http://host:port` and `https://host:port`, to listen on
//! (an IP address or `localhost`) or to advertise (any host), and the
//! `unix://` and `unixs://` socket URLs etcd also takes. oxetcd does not
//! listen on unix sockets yet, so a URL to listen on must be TCP; a unix
//! URL is accepted where it is only stored or advertised.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::values::invalid;
use super::ConfigError;

/// A URL to listen on, with the socket address it binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenUrl {
    /// The URL as normalized (`http://host:port` or `https://host:port`).
    pub url: String,
    /// Where to bind (`localhost` binds 127.0.0.1).
    pub addr: SocketAddr,
}

impl ListenUrl {
    /// True for `https://`: served with TLS.
    pub fn is_secure(&self) -> bool {
        self.url.starts_with("https://")
    }
}

impl fmt::Display for ListenUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

/// A parsed `http://host:port` or `https://host:port` URL.
pub(super) struct Url {
    /// `scheme://host:port`, scheme in lower case, host as given (IPv6 in
    /// brackets).
    pub(super) normalized: String,
    pub(super) host: String,
    pub(super) port: u16,
}

pub(super) fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

pub(super) fn parse_urls(flag: &'static str, value: &str) -> Result<Vec<String>, ConfigError> {
    let urls: Vec<String> = split_list(value)
        .map(|url| parse_url(flag, url).map(|u| u.normalized))
        .collect::<Result<_, _>>()?;
    if urls.is_empty() {
        return Err(invalid(flag, value, "at least one URL is required"));
    }
    Ok(urls)
}

pub(super) fn parse_listen_urls(
    flag: &'static str,
    value: &str,
) -> Result<Vec<ListenUrl>, ConfigError> {
    let mut urls = Vec::new();
    for raw in split_list(value) {
        let url = parse_url(flag, raw)?;
        let ip = if url.host.eq_ignore_ascii_case("localhost") {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            let bare = url.host.trim_start_matches('[').trim_end_matches(']');
            bare.parse::<IpAddr>().map_err(|_| {
                invalid(
                    flag,
                    raw,
                    "expected an IP address or localhost in a URL to listen on",
                )
            })?
        };
        urls.push(ListenUrl {
            url: url.normalized,
            addr: SocketAddr::new(ip, url.port),
        });
    }
    if urls.is_empty() {
        return Err(invalid(flag, value, "at least one URL is required"));
    }
    Ok(urls)
}

/// A URL of any scheme etcd takes (`http`, `https`, `unix`, `unixs`),
/// normalized; unix socket URLs are kept as given.
pub(super) fn check_url(flag: &'static str, raw: &str) -> Result<String, ConfigError> {
    if is_unix(raw) {
        return Ok(raw.to_owned());
    }
    parse_url(flag, raw).map(|url| url.normalized)
}

fn is_unix(raw: &str) -> bool {
    let lower = raw.to_ascii_lowercase();
    lower.starts_with("unix://") || lower.starts_with("unixs://") || lower.starts_with("unix:")
}

pub(super) fn parse_url(flag: &'static str, raw: &str) -> Result<Url, ConfigError> {
    if is_unix(raw) {
        return Err(invalid(
            flag,
            raw,
            "unix socket URLs are not yet supported here by oxetcd; use http:// or https://",
        ));
    }
    let Some((scheme, rest)) = raw.split_once("://") else {
        return Err(invalid(
            flag,
            raw,
            "expected a URL like http://127.0.0.1:2379",
        ));
    };
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => "http",
        "https" => "https",
        _ => {
            return Err(invalid(
                flag,
                raw,
                format!("unsupported URL scheme {scheme:?}; use http:// or https://"),
            ))
        }
    };
    let authority = match rest.split_once('/') {
        Some((authority, "")) => authority,
        Some(_) => return Err(invalid(flag, raw, "a URL path is not allowed")),
        None => rest,
    };
    if authority.contains(['@', '?', '#']) {
        return Err(invalid(flag, raw, "expected http://host:port"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && (!host.contains(':') || host.ends_with(']')) => {
            (host, port)
        }
        _ => return Err(invalid(flag, raw, "a port is required (http://host:port)")),
    };
    if host.starts_with('[') != host.ends_with(']') {
        return Err(invalid(
            flag,
            raw,
            "unbalanced brackets around an IPv6 address",
        ));
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| invalid(flag, raw, format!("invalid port {port:?}")))?;
    Ok(Url {
        normalized: format!("{scheme}://{host}:{port}"),
        host: host.to_owned(),
        port,
    })
}
