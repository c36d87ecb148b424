//! `--initial-cluster` and the raft timing flags, checked as etcd checks
//! them at bootstrap.

use super::flags::{DEFAULT_INITIAL_CLUSTER, DEFAULT_NAME, ELECTION_TIMEOUT_MS_MAX};
use super::urls::{parse_url, split_list};
use super::values::invalid;
use super::ConfigError;
use oxetcd_core::ids;

/// One member of `--initial-cluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialMember {
    /// Its `--name`.
    pub name: String,
    /// Its peer URLs, normalized and sorted.
    pub peer_urls: Vec<String>,
}

impl InitialMember {
    /// Its ID in a cluster with `token`.
    pub fn member_id(&self, token: &str) -> u64 {
        let urls: Vec<&str> = self.peer_urls.iter().map(String::as_str).collect();
        ids::member_id(&urls, token)
    }
}

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Bootstrap a new cluster from `--initial-cluster`.
    New,
    /// Join a cluster that already runs (after `member add`).
    Existing,
}

/// Parses `--initial-cluster` (`name=url,name=url,...`, a name repeated
/// for each of its URLs) and checks it as etcd does at bootstrap: this
/// member is in it with exactly its advertised peer URLs, and no URL is
/// listed twice. Left at its default while `--name` is not, it stands for
/// `<name>=<each advertised peer URL>`, as in etcd.
pub(super) fn parse_initial_cluster(
    name: &str,
    advertise_peer_urls: &[String],
    value: &str,
) -> Result<Vec<InitialMember>, ConfigError> {
    const FLAG: &str = "initial-cluster";
    let derived;
    let value = if name != DEFAULT_NAME && value == DEFAULT_INITIAL_CLUSTER {
        derived = advertise_peer_urls
            .iter()
            .map(|url| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(",");
        derived.as_str()
    } else {
        value
    };
    let mut members: Vec<InitialMember> = Vec::new();
    let mut seen_urls = std::collections::BTreeSet::new();
    for pair in split_list(value) {
        let Some((member, url)) = pair.split_once('=') else {
            return Err(invalid(FLAG, value, format!("{pair:?} is not name=URL")));
        };
        let url = parse_url(FLAG, url.trim())?.normalized;
        if !seen_urls.insert(url.clone()) {
            return Err(invalid(FLAG, value, format!("duplicate URL {url}")));
        }
        match members.iter_mut().find(|m| m.name == member) {
            Some(existing) => existing.peer_urls.push(url),
            None => members.push(InitialMember {
                name: member.to_owned(),
                peer_urls: vec![url],
            }),
        }
    }
    if members.is_empty() {
        return Err(invalid(FLAG, value, "at least one member is required"));
    }
    for member in &mut members {
        member.peer_urls.sort();
    }
    let Some(local) = members.iter().find(|m| m.name == name) else {
        return Err(invalid(
            FLAG,
            value,
            format!("couldn't find local name {name:?} in the initial cluster configuration"),
        ));
    };
    let mut advertised = advertise_peer_urls.to_vec();
    advertised.sort();
    if local.peer_urls != advertised {
        let missing: Vec<String> = local
            .peer_urls
            .iter()
            .filter(|url| !advertised.contains(url))
            .map(|url| format!("{name}={url}"))
            .collect();
        let reason = if missing.is_empty() {
            let extra: Vec<&str> = advertised
                .iter()
                .filter(|url| !local.peer_urls.contains(url))
                .map(String::as_str)
                .collect();
            format!(
                "--initial-advertise-peer-urls has {} but missing from --initial-cluster",
                extra.join(",")
            )
        } else {
            format!(
                "--initial-cluster has {} but missing from --initial-advertise-peer-urls={}",
                missing.join(","),
                advertised.join(",")
            )
        };
        return Err(invalid(FLAG, value, reason));
    }
    Ok(members)
}

/// `--heartbeat-interval` and `--election-timeout`, with etcd's rules: both
/// positive, the timeout at least five heartbeats and at most 50 s.
pub(super) fn parse_raft_timing(
    heartbeat: &str,
    election: &str,
) -> Result<(u64, u64), ConfigError> {
    let positive = |flag: &'static str, value: &str| match value.trim().parse::<u64>() {
        Ok(0) => Err(invalid(flag, value, "must be greater than zero")),
        Ok(n) => Ok(n),
        Err(e) => Err(invalid(flag, value, e.to_string())),
    };
    let heartbeat_ms = positive("heartbeat-interval", heartbeat)?;
    let election_ms = positive("election-timeout", election)?;
    if heartbeat_ms.saturating_mul(5) > election_ms {
        return Err(invalid(
            "election-timeout",
            election,
            format!(
                "--election-timeout[{election_ms}ms] should be at least as 5 times as \
                 --heartbeat-interval[{heartbeat_ms}ms]"
            ),
        ));
    }
    if election_ms > ELECTION_TIMEOUT_MS_MAX {
        return Err(invalid(
            "election-timeout",
            election,
            format!(
                "--election-timeout[{election_ms}ms] is too long, and should be set less than \
                 {ELECTION_TIMEOUT_MS_MAX}ms"
            ),
        ));
    }
    Ok((heartbeat_ms, election_ms))
}
