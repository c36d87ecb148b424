//! Which member this is: its ID, its peers' IDs and its cluster's, settled
//! before the node starts.
//!
//! Design. The flags give IDs by etcd's derivation (peer URLs and the
//! cluster token), but they are not always the cluster's: `member add`
//! chose the ID of a member that joins, and a cluster restored or imported
//! from etcd may have been made with another token. So, as etcd does:
//!
//! - A member that ran before uses the ID it stored then
//!   (`member/member_id`, hex, synced before its node first ran), whatever
//!   the flags say now.
//! - A member on an empty data directory with `--initial-cluster-state
//!   existing` asks the other members of `--initial-cluster` for the
//!   membership over the peer port (`peer/members.rs`) and matches it with
//!   its flags as etcd does: as many members, and each of the cluster's
//!   peer URL lists equal to one of `--initial-cluster`'s. It then takes
//!   the cluster's IDs: its own (by its advertised peer URLs), its peers'
//!   and the cluster's. With no answer within [`ASK_TIME`] it stops with
//!   etcd's error; it also stops when the cluster's version does not admit
//!   its own (etcd's `incompatible with current running cluster`), before
//!   it joins anything.
//! - Otherwise the flags' IDs are used, and the member ID is stored.
//!
//! The learned cluster ID is stored in the log before the node starts, as
//! an ID learned by the transport is.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oxetcd_core::storage::LogStore;
use oxetcd_core::version::{check_server_version, VersionRefusal};
use oxetcd_proto::etcdserverpb::MemberListResponse;
use tracing::{info, warn};

use crate::config::{ClusterState, Config, KnownIds};
use crate::peer::{ClusterFacts, PeerTransport, TransportTls};
use crate::runtime::Runtime;
use crate::RunError;

/// Where a member keeps its ID, under the data directory.
const MEMBER_ID_FILE: &str = "member_id";

/// How long a joining member tries its peers for the membership.
pub(crate) const ASK_TIME: Duration = Duration::from_secs(10);

/// One peer's time to answer, at most.
const ANSWER_TIME: Duration = Duration::from_secs(3);

/// Pause between rounds over the peers.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Settles `config.known_ids` (see the module note). `fresh`: the log is
/// empty, so this member never ran here.
pub(crate) async fn settle<R: Runtime>(
    runtime: &R,
    config: &mut Config,
    peer_tls: Option<TransportTls>,
    log: &impl LogStore,
    fresh: bool,
) -> Result<(), RunError> {
    let path = member_id_path(&config.data_dir);
    if let Some(member_id) = read_member_id(&path)? {
        if member_id != config.derived_member_id() {
            info!(
                member_id = %format_args!("{member_id:x}"),
                "using the member ID stored in the data directory"
            );
        }
        config.known_ids = Some(KnownIds {
            member_id,
            ..KnownIds::default()
        });
        return Ok(());
    }
    if fresh && config.initial_cluster_state == ClusterState::Existing {
        let facts = ask_peers(runtime, config, peer_tls).await?;
        check_server_version(
            config.server_version,
            facts.cluster_version,
            facts.downgrade_target,
        )
        .map_err(|refusal| {
            // etcd's joiner says it this way whichever side it is on.
            let (VersionRefusal::BelowClusterVersion { server, cluster }
            | VersionRefusal::AboveClusterRange { server, cluster }) = refusal;
            RunError::Join(format!(
                "incompatible with current running cluster \
                 (server version {server}, cluster version {cluster})"
            ))
        })?;
        let cluster = &facts.members;
        let known = match_flags(config, cluster)?;
        info!(
            member_id = %format_args!("{:x}", known.member_id),
            cluster_id = %format_args!("{:x}", known.cluster_id),
            members = cluster.members.len(),
            "learned this member's ID from the cluster"
        );
        log.store_cluster_id(known.cluster_id)
            .map_err(|e| RunError::DataDir(format!("{}: {e}", config.data_dir.display())))?;
        config.known_ids = Some(known);
    }
    write_member_id(&path, config.member_id())
}

/// The membership as the first member of `--initial-cluster` (other than
/// this one) to answer tells it, trying them in rounds for [`ASK_TIME`].
async fn ask_peers<R: Runtime>(
    runtime: &R,
    config: &Config,
    peer_tls: Option<TransportTls>,
) -> Result<ClusterFacts, RunError> {
    // A transport of its own, listening nowhere, with no IDs: it only
    // asks questions and is dropped before the member's own starts.
    let mut transport_config = config.peer_transport_config();
    transport_config.cluster_id = 0;
    transport_config.member_id = 0;
    transport_config.tls = peer_tls;
    let transport = PeerTransport::new(
        runtime.clone(),
        transport_config,
        std::sync::Arc::new(|_| {}),
    );
    let peers: Vec<&[String]> = config
        .initial_cluster
        .iter()
        .filter(|m| m.name != config.name)
        .map(|m| m.peer_urls.as_slice())
        .collect();
    let started = Instant::now();
    let result = loop {
        let mut last = None;
        for urls in &peers {
            match transport.members(urls, ANSWER_TIME).await {
                Ok(facts) if !facts.members.members.is_empty() => {
                    last = Some(Ok(facts));
                    break;
                }
                Ok(_) => warn!(peers = ?urls, "a peer answered with no members"),
                Err(error) => warn!(peers = ?urls, %error, "failed to get the cluster's members"),
            }
        }
        if let Some(found) = last {
            break found;
        }
        if started.elapsed() >= ASK_TIME || peers.is_empty() {
            break Err(RunError::Join(
                "cannot fetch cluster info from peer urls: could not retrieve cluster \
                 information from the given URLs"
                    .to_owned(),
            ));
        }
        runtime
            .sleep_until(crate::runtime::deadline_after(RETRY_PAUSE))
            .await;
    };
    transport.shutdown();
    result
}

/// Matches the cluster's members with `--initial-cluster` by peer URLs, as
/// etcd's `ValidateClusterAndAssignIDs` does, and names the IDs.
fn match_flags(config: &Config, cluster: &MemberListResponse) -> Result<KnownIds, RunError> {
    let invalid = |why: String| {
        RunError::Join(format!(
            "error validating peerURLs {}: {why}",
            describe(cluster)
        ))
    };
    if cluster.members.len() != config.initial_cluster.len() {
        return Err(invalid("member count is unequal".to_owned()));
    }
    let mut known = KnownIds {
        cluster_id: cluster.header.as_ref().map_or(0, |h| h.cluster_id),
        ..KnownIds::default()
    };
    for member in &cluster.members {
        let urls = normalized(&member.peer_ur_ls);
        let Some(local) = config.initial_cluster.iter().find(|m| m.peer_urls == urls) else {
            return Err(invalid(format!(
                "PeerURLs: no match found for existing member ({:x}, {:?})",
                member.id, member.peer_ur_ls
            )));
        };
        if local.name == config.name {
            known.member_id = member.id;
        } else {
            known.members.push((urls, member.id));
        }
    }
    if known.member_id == 0 || known.cluster_id == 0 {
        return Err(invalid("this member is not among them".to_owned()));
    }
    Ok(known)
}

/// Peer URLs as `--initial-cluster` keeps them: normalized, sorted.
fn normalized(urls: &[String]) -> Vec<String> {
    let mut out: Vec<String> = urls
        .iter()
        .map(|url| oxetcd_urls::check_url("peer-urls", url).unwrap_or_else(|_| url.clone()))
        .collect();
    out.sort();
    out
}

fn describe(cluster: &MemberListResponse) -> String {
    cluster
        .members
        .iter()
        .map(|m| format!("{:x}={}", m.id, m.peer_ur_ls.join(",")))
        .collect::<Vec<_>>()
        .join(",")
}

/// Stores `member_id` as this member's, before its node first runs.
pub(crate) fn store_member_id(data_dir: &Path, member_id: u64) -> Result<(), RunError> {
    write_member_id(&member_id_path(data_dir), member_id)
}

fn member_id_path(data_dir: &Path) -> PathBuf {
    data_dir.join("member").join(MEMBER_ID_FILE)
}

fn read_member_id(path: &Path) -> Result<Option<u64>, RunError> {
    let bad = |why: String| RunError::DataDir(format!("{}: {why}", path.display()));
    match std::fs::read_to_string(path) {
        Ok(text) => u64::from_str_radix(text.trim(), 16)
            .map(Some)
            .map_err(|e| bad(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// Writes the ID durably: a temporary file, synced, renamed over the
/// name, and the directory synced.
fn write_member_id(path: &Path, member_id: u64) -> Result<(), RunError> {
    use std::io::Write as _;
    let bad = |e: std::io::Error| RunError::DataDir(format!("{}: {e}", path.display()));
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(bad)?;
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary).map_err(bad)?;
    file.write_all(format!("{member_id:x}\n").as_bytes())
        .map_err(bad)?;
    file.sync_all().map_err(bad)?;
    std::fs::rename(&temporary, path).map_err(bad)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxetcd_proto::etcdserverpb::{Member, ResponseHeader};

    fn config(args: &[&str]) -> Config {
        let no_env: [(&str, &str); 0] = [];
        match crate::config::parse(args, no_env) {
            Ok(crate::config::Command::Run(config)) => config,
            other => panic!("valid flags expected: {other:?}"),
        }
    }

    fn member(id: u64, urls: &[&str]) -> Member {
        Member {
            id,
            peer_ur_ls: urls.iter().map(|u| u.to_string()).collect(),
            ..Default::default()
        }
    }

    fn cluster(members: Vec<Member>) -> MemberListResponse {
        MemberListResponse {
            header: Some(ResponseHeader {
                cluster_id: 0xc1,
                ..Default::default()
            }),
            members,
        }
    }

    const JOINER: &[&str] = &[
        "--name",
        "b",
        "--initial-advertise-peer-urls",
        "http://127.0.0.1:2480",
        "--initial-cluster",
        "a=http://127.0.0.1:2380,b=http://127.0.0.1:2480",
        "--initial-cluster-state",
        "existing",
    ];

    #[test]
    fn a_joiner_takes_the_clusters_ids_by_peer_urls() {
        let mut config = config(JOINER);
        let known = match_flags(
            &config,
            &cluster(vec![
                member(0xa, &["http://127.0.0.1:2380"]),
                // Stored as the user gave it to `member add`.
                member(0xb, &["HTTP://127.0.0.1:2480/"]),
            ]),
        )
        .expect("matches");
        assert_eq!((known.member_id, known.cluster_id), (0xb, 0xc1));
        config.known_ids = Some(known);
        assert_eq!(config.member_id(), 0xb);
        assert_eq!(config.running_cluster_id(), 0xc1);
        assert_eq!(
            config.initial_peers(),
            vec![(0xa, vec!["http://127.0.0.1:2380".to_owned()])]
        );
        let ids: Vec<u64> = config
            .node_config()
            .initial_members
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(ids, vec![0xa, 0xb]);
    }

    #[test]
    fn a_cluster_that_does_not_match_the_flags_is_refused_in_etcds_words() {
        let config = config(JOINER);
        let one = cluster(vec![member(0xa, &["http://127.0.0.1:2380"])]);
        let error = match_flags(&config, &one).expect_err("count").to_string();
        assert!(error.contains("member count is unequal"), "{error}");
        let other = cluster(vec![
            member(0xa, &["http://127.0.0.1:2380"]),
            member(0xc, &["http://127.0.0.1:2999"]),
        ]);
        let error = match_flags(&config, &other).expect_err("urls").to_string();
        assert!(
            error.contains("error validating peerURLs")
                && error.contains("PeerURLs: no match found for existing member (c,"),
            "{error}"
        );
    }

    #[test]
    fn the_member_id_file_round_trips() {
        let dir = std::env::temp_dir().join(format!("oxetcd-identity-{}", std::process::id()));
        let path = member_id_path(&dir);
        assert_eq!(read_member_id(&path).expect("absent is fine"), None);
        write_member_id(&path, 0x8e9e05c52164694d).expect("written");
        assert_eq!(
            read_member_id(&path).expect("read"),
            Some(0x8e9e05c52164694d)
        );
        std::fs::write(&path, "not hex").expect("overwrite");
        assert!(read_member_id(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
