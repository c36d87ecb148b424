//! The oxetcd client library and the `oxetcdctl` commands built on it.
//!
//! - [`client`]: a cluster client over a list of endpoints, moving
//!   round-robin to the next endpoint when one fails (etcd 3.4's balancer).
//! - [`command`]: etcdctl's commands, flags, messages and exit codes.
//! - [`connector`]: TLS connections (oxetcd's rustls stream) for
//!   `https://` endpoints.
//! - [`output`]: etcdctl's output formats (`simple`, `json`, `fields`,
//!   `table`, `protobuf`), byte for byte.
//! - [`prompt`]: password prompts, on a terminal or from piped stdin.
//! - [`restore`]: `snapshot restore`, a new member's data directory from a
//!   snapshot file.
//! - [`bench`]: a load generator in the manner of etcd's `benchmark` tool,
//!   with CSV samples and SVG or PNG plots.

pub mod bench;
pub mod client;
pub mod command;
pub mod connector;
pub mod dial;
pub mod error;
pub mod output;
pub mod prompt;
pub mod restore;

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use connector::{Coalesced, PlainConnector, TlsConnector};

pub use client::{Client, Config};
pub use error::Error;

/// Opens `conns` connections spread round-robin over the endpoints of
/// `config`, with its TLS settings, for the benchmark (which measures
/// connections, so it does no failover). Their writes are coalesced
/// ([`connector::Coalesced`]).
pub async fn connect(config: &Config, conns: usize) -> Result<Vec<Channel>, Error> {
    let endpoints = &config.endpoints;
    if endpoints.is_empty() {
        return Err(Error::BadEndpoint("no endpoints given".into()));
    }
    let tls = config.tls.client_config(endpoints)?;
    let mut channels = Vec::with_capacity(conns);
    for i in 0..conns.max(1) {
        let endpoint = &endpoints[i % endpoints.len()];
        let secure = config.tls.secures(endpoint);
        let (url, socket) = client::dial_target(endpoint, secure)?;
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| Error::BadEndpoint(format!("{url}: {e}")))?
            .connect_timeout(config.dial_timeout)
            .tcp_nodelay(true);
        let connected = match tls.as_ref().filter(|_| secure) {
            None => {
                endpoint
                    .connect_with_connector(Coalesced(PlainConnector(socket)))
                    .await
            }
            Some(tls) => {
                endpoint
                    .connect_with_connector(Coalesced(TlsConnector::new(tls.clone(), socket)))
                    .await
            }
        };
        let channel = connected.map_err(|e| match client::dial_error(&url, &e) {
            Error::Protocol(cause) => Error::Protocol(format!("cannot connect to {cause}")),
            other => other,
        })?;
        channels.push(channel);
    }
    Ok(channels)
}

/// Go's `time.ParseDuration` for the forms flags use: `5s`, `1.5s`,
/// `500ms`, `1m30s`, `2h`, `100us`; a bare number is seconds.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "time: invalid duration {}",
            output::go::quote(text.as_bytes())
        )
    };
    if let Ok(seconds) = text.parse::<f64>() {
        return if seconds >= 0.0 && seconds.is_finite() {
            Ok(Duration::from_secs_f64(seconds))
        } else {
            Err(bad())
        };
    }
    let mut rest = text;
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let unit_len = rest[number_len..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len() - number_len);
        let value: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        let scale = match &rest[number_len..number_len + unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[number_len + unit_len..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_go_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_go_duration("5x").is_err());
    }
}
