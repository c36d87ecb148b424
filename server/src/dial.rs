//! From URLs to what to connect to: the peer transport's dials and
//! discovery's both start here.
//!
//! Design: a URL (`http`, `https`, `unix`, `unixs`; see `oxetcd_urls`)
//! becomes [`Target`]s — socket addresses in the URLs' order, each with
//! the TLS server name a secure URL's certificate must be valid for.
//! Literal addresses and socket paths need no lookup; host names are
//! resolved by the system resolver on a blocking thread, since it blocks.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use oxetcd_tls::rustls::pki_types::ServerName;
use oxetcd_urls::Target as UrlTarget;

use crate::runtime::{blocking, Runtime};
use crate::socket::SocketAddress;

/// One address to dial, and for an `https://` URL the name its
/// certificate must be valid for (the URL's host; for `unixs://`, the
/// socket file's name, as etcd's clients take it).
pub(crate) struct Target {
    /// Where to connect.
    pub(crate) addr: SocketAddress,
    /// The TLS server name, for a URL dialed with TLS.
    pub(crate) tls: Option<ServerName<'static>>,
}

/// The addresses of `urls`, in order. Host names are resolved on a
/// blocking thread (the system resolver blocks).
pub(crate) async fn resolve<R: Runtime>(
    runtime: &R,
    urls: &[String],
) -> Result<Vec<Target>, String> {
    let mut literal = Vec::new();
    let mut named = Vec::new();
    for url in urls {
        let bad = || format!("bad URL {url:?}");
        let parsed = oxetcd_urls::parse_url("urls", url).map_err(|_| bad())?;
        let name = |name: &str| ServerName::try_from(name.to_owned()).map_err(|_| bad());
        let (host, port) = match parsed.target {
            UrlTarget::Unix(path) => {
                let path = std::path::PathBuf::from(path);
                let tls = match parsed.secure {
                    false => None,
                    true => Some(name(
                        &path.file_name().unwrap_or_default().to_string_lossy(),
                    )?),
                };
                literal.push(Target {
                    addr: SocketAddress::Unix(path),
                    tls,
                });
                continue;
            }
            UrlTarget::Tcp { host, port } => (host, port),
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let tls = if parsed.secure {
            Some(name(bare)?)
        } else {
            None
        };
        match bare.parse::<IpAddr>() {
            Ok(ip) => literal.push(Target {
                addr: SocketAddress::Tcp(SocketAddr::new(ip, port)),
                tls,
            }),
            Err(_) => named.push((host, port, tls)),
        }
    }
    if named.is_empty() {
        return if literal.is_empty() {
            Err("no URLs".to_owned())
        } else {
            Ok(literal)
        };
    }
    let resolved = blocking(runtime, move || {
        let mut targets = Vec::new();
        let mut last = None;
        for (host, port, tls) in named {
            match (host.as_str(), port).to_socket_addrs() {
                Ok(found) => targets.extend(found.map(|addr| Target {
                    addr: SocketAddress::Tcp(addr),
                    tls: tls.clone(),
                })),
                Err(e) => last = Some(format!("{host}: {e}")),
            }
        }
        (targets, last)
    })
    .await
    .map_err(|e| e.to_string())?;
    literal.extend(resolved.0);
    if literal.is_empty() {
        return Err(resolved.1.unwrap_or_else(|| "nothing resolved".into()));
    }
    Ok(literal)
}
