//! `--initial-cluster`: the members a new cluster starts with, each a name
//! and its peer URLs, checked as etcd checks them at bootstrap, and the IDs
//! the members and the cluster get from them.
//!
//! The server reads it from its flags; `oxetcdctl snapshot restore` reads
//! the same flags to name the member it restores, and must come to the
//! same member and cluster IDs as the server started on the directory
//! later, so both use these functions.

use oxetcd_core::ids;

use crate::url::{parse_url, split_list};
use crate::InvalidValue;

/// etcd's default `--name`.
pub const DEFAULT_NAME: &str = "default";

/// etcd's default `--initial-cluster`: the default name at the default
/// advertised peer URL.
pub const DEFAULT_INITIAL_CLUSTER: &str = "default=http://localhost:2380";

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
        member_id(&self.peer_urls, token)
    }
}

/// Parses `--initial-cluster` (`name=url,name=url,...`, a name repeated
/// for each of its URLs) and checks it as etcd does at bootstrap: this
/// member is in it with exactly its advertised peer URLs, and no URL is
/// listed twice. Left at its default while `--name` is not, it stands for
/// `<name>=<each advertised peer URL>`, as in etcd.
pub fn parse_initial_cluster(
    name: &str,
    advertise_peer_urls: &[String],
    value: &str,
) -> Result<Vec<InitialMember>, InvalidValue> {
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
            return Err(InvalidValue::new(
                FLAG,
                value,
                format!("{pair:?} is not name=URL"),
            ));
        };
        let url = parse_url(FLAG, url.trim())?.normalized;
        if !seen_urls.insert(url.clone()) {
            return Err(InvalidValue::new(
                FLAG,
                value,
                format!("duplicate URL {url}"),
            ));
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
        return Err(InvalidValue::new(
            FLAG,
            value,
            "at least one member is required",
        ));
    }
    for member in &mut members {
        member.peer_urls.sort();
    }
    let Some(local) = members.iter().find(|m| m.name == name) else {
        return Err(InvalidValue::new(
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
        return Err(InvalidValue::new(FLAG, value, reason));
    }
    Ok(members)
}

/// The ID of a member with these peer URLs (normalized, in any order) in a
/// cluster with `token`.
pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    let urls: Vec<&str> = peer_urls.iter().map(String::as_str).collect();
    ids::member_id(&urls, token)
}

/// The ID of the cluster `members` make with `token`, derived from their
/// IDs as etcd derives it.
pub fn cluster_id(members: &[InitialMember], token: &str) -> u64 {
    let ids: Vec<u64> = members.iter().map(|m| m.member_id(token)).collect();
    ids::cluster_id(&ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(list: &[&str]) -> Vec<String> {
        list.iter().map(|url| (*url).to_owned()).collect()
    }

    /// A default single-member etcd reports these IDs.
    #[test]
    fn the_default_member_has_etcds_ids() {
        let advertised = urls(&["http://localhost:2380"]);
        let members = parse_initial_cluster(DEFAULT_NAME, &advertised, DEFAULT_INITIAL_CLUSTER)
            .expect("the defaults agree");
        assert_eq!(
            format!("{:x}", members[0].member_id("etcd-cluster")),
            "8e9e05c52164694d"
        );
        assert_eq!(
            format!("{:x}", cluster_id(&members, "etcd-cluster")),
            "cdf818194e3a8c32"
        );
    }

    #[test]
    fn members_gather_their_urls_and_the_local_one_must_match() {
        let members = parse_initial_cluster(
            "a",
            &urls(&["http://b:1", "http://a:1"]),
            "a=http://a:1,b=http://b:2,a=HTTP://b:1",
        )
        .expect("a matches");
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].peer_urls, ["http://a:1", "http://b:1"]);
        let error = parse_initial_cluster("a", &urls(&["http://a:1"]), "a=http://a:1,b=http://a:1")
            .unwrap_err();
        assert!(error.reason.contains("duplicate URL"), "{error}");
        let error = parse_initial_cluster("x", &urls(&["http://a:1"]), "a=http://a:1").unwrap_err();
        assert!(error.reason.contains("couldn't find local name"), "{error}");
    }

    #[test]
    fn the_default_cluster_stands_for_a_named_member_at_its_urls() {
        let members =
            parse_initial_cluster("n1", &urls(&["http://n1:2380"]), DEFAULT_INITIAL_CLUSTER)
                .expect("derived from the advertised URLs");
        assert_eq!(members[0].name, "n1");
        assert_eq!(members[0].peer_urls, ["http://n1:2380"]);
    }
}
