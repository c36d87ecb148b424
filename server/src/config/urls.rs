//! URL lists to listen on: `http://host:port` and `https://host:port`,
//! where the host is an IP address or `localhost`, and `unix://path` and
//! `unixs://path` (a unix domain socket, TLS for `unixs`). The URL syntax of every
//! URL flag (to listen on, to advertise, or only to store, as the `unix://`
//! and `unixs://` socket URLs etcd also takes) is `oxetcd_urls`'s, which
//! oxetcdctl shares: member IDs hash peer URLs as it normalizes them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use oxetcd_urls::Target;

use super::values::invalid;
use super::ConfigError;
use crate::socket::SocketAddress;

pub(super) use oxetcd_urls::{check_url, parse_url, parse_urls, split_list};

/// A URL to listen on, with the socket address it binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenUrl {
    /// The URL as normalized (`http://host:port`, `https://host:port`,
    /// `unix://path`, `unixs://path`).
    pub url: String,
    /// Where to bind (`localhost` binds 127.0.0.1).
    pub addr: SocketAddress,
    /// `https://` or `unixs://`: served with TLS.
    pub secure: bool,
}

impl ListenUrl {
    /// True for `https://` and `unixs://`: served with TLS.
    pub fn is_secure(&self) -> bool {
        self.secure
    }
}

impl fmt::Display for ListenUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

/// A comma-separated list of URLs to listen on; at least one.
pub(super) fn parse_listen_urls(
    flag: &'static str,
    value: &str,
) -> Result<Vec<ListenUrl>, ConfigError> {
    let mut urls = Vec::new();
    for raw in split_list(value) {
        let url = parse_url(flag, raw)?;
        let addr = match &url.target {
            Target::Unix(path) => SocketAddress::Unix(PathBuf::from(path)),
            Target::Tcp { host, port } => {
                let ip = if host.eq_ignore_ascii_case("localhost") {
                    IpAddr::V4(Ipv4Addr::LOCALHOST)
                } else {
                    let bare = host.trim_start_matches('[').trim_end_matches(']');
                    bare.parse::<IpAddr>().map_err(|_| {
                        invalid(
                            flag,
                            raw,
                            "expected an IP address or localhost in a URL to listen on",
                        )
                    })?
                };
                SocketAddress::Tcp(SocketAddr::new(ip, *port))
            }
        };
        urls.push(ListenUrl {
            url: url.normalized,
            addr,
            secure: url.secure,
        });
    }
    if urls.is_empty() {
        return Err(invalid(flag, value, "at least one URL is required"));
    }
    Ok(urls)
}
