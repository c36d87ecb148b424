//! URL syntax: `http://host:port` and `https://host:port`, as members
//! listen on and advertise them, and the `unix://` and `unixs://` socket
//! URLs etcd also takes (plain and TLS over a unix domain socket).
//!
//! Normalizing matters beyond tidiness: a member's ID hashes its peer URLs
//! as normalized here (scheme in lower case, no trailing slash). A unix
//! URL is kept as given but for its scheme's case: its socket path is
//! etcd's reading of it, the URL's host followed by its path, so
//! `unix:///run/etcd.sock` is `/run/etcd.sock` and `unix://etcd.unix:1`
//! is the relative file `etcd.unix:1`.

use crate::InvalidValue;

/// A parsed URL of one of etcd's schemes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `scheme://host:port` (scheme in lower case, host as given, IPv6 in
    /// brackets), or a unix socket URL as given with its scheme in lower
    /// case.
    pub normalized: String,
    /// `https://` or `unixs://`: TLS.
    pub secure: bool,
    /// Where the URL leads.
    pub target: Target,
}

/// Where a URL leads: a host and port, or a unix socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `http://host:port`, `https://host:port`.
    Tcp {
        /// The host as given: a name, an IPv4 address, or an IPv6 address
        /// in brackets.
        host: String,
        /// The port, which etcd's URLs always name.
        port: u16,
    },
    /// `unix://path`, `unixs://path`: the socket file's path.
    Unix(String),
}

/// The items of a comma-separated list, trimmed; empty items are skipped.
pub fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// A comma-separated list of URLs ([`parse_url`]), normalized; at least
/// one.
pub fn parse_urls(flag: &'static str, value: &str) -> Result<Vec<String>, InvalidValue> {
    let urls: Vec<String> = split_list(value)
        .map(|url| parse_url(flag, url).map(|u| u.normalized))
        .collect::<Result<_, _>>()?;
    if urls.is_empty() {
        return Err(InvalidValue::new(
            flag,
            value,
            "at least one URL is required",
        ));
    }
    Ok(urls)
}

/// A URL of any scheme etcd takes, normalized ([`parse_url`]).
pub fn check_url(flag: &'static str, raw: &str) -> Result<String, InvalidValue> {
    parse_url(flag, raw).map(|url| url.normalized)
}

/// An `http://host:port` or `https://host:port` URL, with no path, user
/// or query; or a `unix://` or `unixs://` socket URL naming a path.
pub fn parse_url(flag: &'static str, raw: &str) -> Result<Url, InvalidValue> {
    let Some((scheme, rest)) = raw.split_once(':') else {
        return Err(InvalidValue::new(
            flag,
            raw,
            "expected a URL like http://127.0.0.1:2379",
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme == "unix" || scheme == "unixs" {
        return unix_url(flag, raw, &scheme, rest);
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return Err(InvalidValue::new(
            flag,
            raw,
            "expected a URL like http://127.0.0.1:2379",
        ));
    };
    let secure = match scheme.as_str() {
        "http" => false,
        "https" => true,
        _ => {
            return Err(InvalidValue::new(
                flag,
                raw,
                format!("URL scheme must be http, https, unix, or unixs: {scheme}"),
            ))
        }
    };
    let authority = match rest.split_once('/') {
        Some((authority, "")) => authority,
        Some(_) => return Err(InvalidValue::new(flag, raw, "a URL path is not allowed")),
        None => rest,
    };
    if authority.contains(['@', '?', '#']) {
        return Err(InvalidValue::new(flag, raw, "expected http://host:port"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && (!host.contains(':') || host.ends_with(']')) => {
            (host, port)
        }
        _ => {
            return Err(InvalidValue::new(
                flag,
                raw,
                "a port is required (http://host:port)",
            ))
        }
    };
    if host.starts_with('[') != host.ends_with(']') {
        return Err(InvalidValue::new(
            flag,
            raw,
            "unbalanced brackets around an IPv6 address",
        ));
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| InvalidValue::new(flag, raw, format!("invalid port {port:?}")))?;
    Ok(Url {
        normalized: format!("{scheme}://{host}:{port}"),
        secure,
        target: Target::Tcp {
            host: host.to_owned(),
            port,
        },
    })
}

/// `unix:` or `unixs:` followed by `rest`: `//host/path`, `//host`,
/// `/path` or `path`; the socket path is host and path together.
fn unix_url(flag: &'static str, raw: &str, scheme: &str, rest: &str) -> Result<Url, InvalidValue> {
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.is_empty() || path.contains(['?', '#']) {
        return Err(InvalidValue::new(
            flag,
            raw,
            "expected a socket path, as in unix:///run/etcd.sock",
        ));
    }
    Ok(Url {
        normalized: format!("{scheme}:{rest}"),
        secure: scheme == "unixs",
        target: Target::Unix(path.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_normalized_as_member_ids_hash_them() {
        let url = parse_url("f", "HTTP://[::1]:2380/").unwrap();
        assert_eq!(url.normalized, "http://[::1]:2380");
        assert_eq!(
            url.target,
            Target::Tcp {
                host: "[::1]".to_owned(),
                port: 2380
            }
        );
        assert_eq!(
            parse_urls("f", " https://a:1, ,http://b:2 ").unwrap(),
            ["https://a:1", "http://b:2"]
        );
    }

    #[test]
    fn bad_urls_name_the_flag_and_the_reason() {
        for (raw, reason) in [
            ("localhost:2380", "expected a URL like"),
            (
                "ftp://a:1",
                "URL scheme must be http, https, unix, or unixs: ftp",
            ),
            ("http://a:1/path", "a URL path is not allowed"),
            ("http://a", "a port is required"),
            ("http://::1]:2", "unbalanced brackets"),
            ("http://a:99999", "invalid port"),
            ("unix://", "expected a socket path"),
        ] {
            let error = parse_url("listen-peer-urls", raw).unwrap_err();
            assert_eq!(error.flag, "listen-peer-urls");
            assert!(error.reason.contains(reason), "{raw}: {error}");
        }
        assert!(parse_urls("f", " , ").is_err());
    }

    #[test]
    fn unix_urls_name_a_socket_path_as_etcd_reads_them() {
        for (raw, normalized, path, secure) in [
            (
                "unix://etcd.unix:1",
                "unix://etcd.unix:1",
                "etcd.unix:1",
                false,
            ),
            (
                "UNIX:///run/etcd.sock",
                "unix:///run/etcd.sock",
                "/run/etcd.sock",
                false,
            ),
            (
                "unixs:/tmp/x.sock",
                "unixs:/tmp/x.sock",
                "/tmp/x.sock",
                true,
            ),
            (
                "unix://localhost:2379",
                "unix://localhost:2379",
                "localhost:2379",
                false,
            ),
        ] {
            let url = parse_url("f", raw).unwrap();
            assert_eq!(url.normalized, normalized, "{raw}");
            assert_eq!(url.target, Target::Unix(path.to_owned()), "{raw}");
            assert_eq!(url.secure, secure, "{raw}");
        }
        assert_eq!(
            check_url("f", "unix://socket").as_deref(),
            Ok("unix://socket")
        );
    }
}
