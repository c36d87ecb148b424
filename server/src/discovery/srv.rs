//! DNS SRV discovery (`--discovery-srv`): the initial cluster from the
//! SRV records `_etcd-server-ssl._tcp.<domain>` (`https://` peers) and
//! `_etcd-server._tcp.<domain>` (`http://`), with `--discovery-srv-name`'s
//! suffix, as etcd builds it.
//!
//! Each record is a member at `scheme://target:port`. The record whose
//! address resolves to one of this member's advertised peer URLs is this
//! member, under its own name; the others get the names etcd gives them
//! (`0`, `1`, …: member IDs hash URLs, not names). A record of this member
//! under the other scheme is an error, and so is finding no record of this
//! member at all.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};

use oxetcd_urls::srv::{lookup_srv, service_name, SrvRecord};
use oxetcd_urls::{parse_url, Target};
use tracing::info;

use crate::config::Config;
use crate::runtime::{blocking, Runtime};

/// The initial cluster the SRV records of `domain` describe.
pub(super) async fn initial_cluster<R: Runtime>(
    runtime: &R,
    config: &Config,
    domain: &str,
    service_name_suffix: &str,
) -> Result<String, String> {
    let (name, advertised) = (
        config.name.clone(),
        config.initial_advertise_peer_urls.clone(),
    );
    let (domain, suffix) = (domain.to_owned(), service_name_suffix.to_owned());
    blocking(runtime, move || {
        lookup(&name, &advertised, &domain, &suffix)
    })
    .await
    .map_err(|e| e.to_string())?
}

/// [`initial_cluster`], blocking.
fn lookup(name: &str, advertised: &[String], domain: &str, suffix: &str) -> Result<String, String> {
    let mut mine = HashMap::new();
    for url in advertised {
        for addr in resolve_url(url)? {
            mine.insert(addr, url.clone());
        }
    }
    let mut members = Vec::new();
    let mut errors = Vec::new();
    let mut temp_name = 0usize;
    for (secure, scheme) in [(true, "https"), (false, "http")] {
        let service = service_name("etcd-server", secure, suffix, domain);
        let records = match lookup_srv(&service) {
            Ok(records) => records,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        info!(service = %service, records = records.len(), "found SRV records");
        for record in records {
            match member(&record, scheme, name, &mine, &mut temp_name) {
                Ok(entry) => members.push(entry),
                Err(e) => errors.push(e),
            }
        }
    }
    if members.is_empty() {
        return Err(format!(
            "error querying DNS SRV records for {domain}: {}",
            errors.join("; ")
        ));
    }
    let prefix = format!("{name}=");
    if !members.iter().any(|m| m.starts_with(&prefix)) {
        return Err(format!(
            "cannot find local etcd member {name:?} in SRV records"
        ));
    }
    Ok(members.join(","))
}

/// `name=scheme://target:port` for `record`: this member's name when it
/// resolves to one of `mine`, else the next temporary one.
fn member(
    record: &SrvRecord,
    scheme: &str,
    name: &str,
    mine: &HashMap<SocketAddr, String>,
    temp_name: &mut usize,
) -> Result<String, String> {
    let host = format!("{}:{}", record.target, record.port);
    let addrs: Vec<SocketAddr> = host
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .collect();
    let url = format!("{scheme}://{host}");
    match addrs.iter().find_map(|addr| mine.get(addr)) {
        Some(advertised) if !advertised.starts_with(&format!("{scheme}://")) => Err(format!(
            "bootstrap at {url} from DNS has scheme mismatch with expected peer {advertised}"
        )),
        Some(_) => Ok(format!("{name}={url}")),
        None => {
            let entry = format!("{temp_name}={url}");
            *temp_name += 1;
            Ok(entry)
        }
    }
}

/// The addresses an advertised peer URL resolves to.
fn resolve_url(url: &str) -> Result<Vec<SocketAddr>, String> {
    let parsed = parse_url("initial-advertise-peer-urls", url).map_err(|e| e.to_string())?;
    match parsed.target {
        Target::Tcp { host, port } => {
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            (bare, port)
                .to_socket_addrs()
                .map(Iterator::collect)
                .map_err(|e| format!("{url}: {e}"))
        }
        Target::Unix(_) => Ok(Vec::new()),
    }
}
