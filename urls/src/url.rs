//! URL syntax: `http://host:port` and `https://host:port`, as members
//! listen on and advertise them, and the `unix://` and `unixs://` socket
//! URLs etcd also takes. oxetcd does not listen on unix sockets yet, so a
//! URL that must be dialed or bound has to be TCP ([`parse_url`]); a unix
//! URL is accepted where it is only stored or advertised ([`check_url`]).
//!
//! Normalizing matters beyond tidiness: a member's ID hashes its peer URLs
//! as normalized here (scheme in lower case, no trailing slash).

use crate::InvalidValue;

/// A parsed `http://host:port` or `https://host:port` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `scheme://host:port`, scheme in lower case, host as given (IPv6 in
    /// brackets).
    pub normalized: String,
    /// The host as given: a name, an IPv4 address, or an IPv6 address in
    /// brackets.
    pub host: String,
    /// The port, which etcd's URLs always name.
    pub port: u16,
}

/// The items of a comma-separated list, trimmed; empty items are skipped.
pub fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// A comma-separated list of TCP URLs ([`parse_url`]), normalized; at
/// least one.
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

/// A URL of any scheme etcd takes (`http`, `https`, `unix`, `unixs`),
/// normalized; unix socket URLs are kept as given.
pub fn check_url(flag: &'static str, raw: &str) -> Result<String, InvalidValue> {
    if is_unix(raw) {
        return Ok(raw.to_owned());
    }
    parse_url(flag, raw).map(|url| url.normalized)
}

fn is_unix(raw: &str) -> bool {
    let lower = raw.to_ascii_lowercase();
    lower.starts_with("unix://") || lower.starts_with("unixs://") || lower.starts_with("unix:")
}

/// An `http://host:port` or `https://host:port` URL, with no path, user
/// or query; a unix socket URL is refused.
pub fn parse_url(flag: &'static str, raw: &str) -> Result<Url, InvalidValue> {
    if is_unix(raw) {
        return Err(InvalidValue::new(
            flag,
            raw,
            "unix socket URLs are not yet supported here by oxetcd; use http:// or https://",
        ));
    }
    let Some((scheme, rest)) = raw.split_once("://") else {
        return Err(InvalidValue::new(
            flag,
            raw,
            "expected a URL like http://127.0.0.1:2379",
        ));
    };
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => "http",
        "https" => "https",
        _ => {
            return Err(InvalidValue::new(
                flag,
                raw,
                format!("unsupported URL scheme {scheme:?}; use http:// or https://"),
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
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_normalized_as_member_ids_hash_them() {
        let url = parse_url("f", "HTTP://[::1]:2380/").unwrap();
        assert_eq!(url.normalized, "http://[::1]:2380");
        assert_eq!((url.host.as_str(), url.port), ("[::1]", 2380));
        assert_eq!(
            parse_urls("f", " https://a:1, ,http://b:2 ").unwrap(),
            ["https://a:1", "http://b:2"]
        );
    }

    #[test]
    fn bad_urls_name_the_flag_and_the_reason() {
        for (raw, reason) in [
            ("localhost:2380", "expected a URL like"),
            ("ftp://a:1", "unsupported URL scheme"),
            ("http://a:1/path", "a URL path is not allowed"),
            ("http://a", "a port is required"),
            ("http://::1]:2", "unbalanced brackets"),
            ("http://a:99999", "invalid port"),
            ("unix://socket", "unix socket URLs are not yet supported"),
        ] {
            let error = parse_url("listen-peer-urls", raw).unwrap_err();
            assert_eq!(error.flag, "listen-peer-urls");
            assert!(error.reason.contains(reason), "{raw}: {error}");
        }
        assert_eq!(
            check_url("f", "unix://socket").as_deref(),
            Ok("unix://socket")
        );
        assert!(parse_urls("f", " , ").is_err());
    }
}
