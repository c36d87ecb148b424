//! The compact hash check (`--experimental-compact-hash-check-enabled`,
//! 3.6's `--feature-gates=CompactHashCheck=true`, every
//! `--compact-hash-check-time`), as etcd 3.6 runs it.
//!
//! Design. Each compaction records the hash of the history it drops
//! (`KvStore::compaction_hashes`, the newest ten, in memory); a member
//! asked for `HashKV` at such a revision answers with that recorded hash.
//! The leader, every interval, takes the recorded hashes it has not
//! checked yet, newest first, and asks its peers for theirs at the same
//! revision. Peers that answer with another compact revision (or not at
//! all) are skipped. When every hash agrees and every peer answered, that
//! revision is checked and the pass ends; when some peer could not be
//! compared, the next older hash is tried. When hashes differ, the
//! members outside the majority are reported to [`on_corruption`] (all of
//! the cluster, member 0, when no hash has a majority). The verdict is a
//! pure function of the answers ([`check_peer_hashes`]), tested without a
//! network. This module never changes data.

use std::collections::BTreeMap;
use std::time::Duration;

use oxetcd_core::storage::{CompactionHash, KvStore};
use oxetcd_core::{GoDuration, Request, Response};
use oxetcd_proto::etcdserverpb::MemberListRequest;
use tracing::{error, info, warn};

use crate::corruption::{on_corruption, peer_hashes, PeerHash};
use crate::driver::Handle;
use crate::peer::PeerTransport;
use crate::runtime::Runtime;

/// What one recorded hash's comparison concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The pass is over (the hash was checked, or a mismatch found);
    /// otherwise the next older hash is tried.
    pub done: bool,
    /// Every peer answered and agreed: this revision is checked.
    pub checked: bool,
    /// Members whose data diverged (0: the cluster, no majority).
    pub corrupt: Vec<u64>,
}

/// Compares the leader's `recorded` hash with its peers' answers at its
/// revision, as etcd's `checkPeerHashes` does, logging as it does.
pub fn check_peer_hashes(leader: u64, recorded: &CompactionHash, peers: &[PeerHash]) -> Verdict {
    let mut by_hash: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    by_hash.entry(recorded.hash).or_default().push(leader);
    let mut peers_checked = 0;
    for peer in peers {
        let reason = match &peer.result {
            Err(_) => Some("no response".to_owned()),
            Ok(theirs) if theirs.compact_revision != recorded.compact_revision => Some(format!(
                "the peer's CompactRevision {} doesn't match leader's CompactRevision {}",
                theirs.compact_revision, recorded.compact_revision
            )),
            Ok(_) => None,
        };
        if let Some(reason) = reason {
            warn!(
                number_of_peers = peers.len(),
                leader_id = %hex(leader),
                peer_id = %hex(peer.id),
                reason = %reason,
                "Skipped peer's hash"
            );
            continue;
        }
        if let Ok(theirs) = &peer.result {
            peers_checked += 1;
            by_hash.entry(theirs.hash).or_default().push(peer.id);
        }
    }
    if by_hash.len() == 1 {
        let all = peers_checked == peers.len();
        if all {
            info!(
                number_of_peers_checked = peers_checked,
                revision = recorded.revision,
                compact_revision = recorded.compact_revision,
                "successfully checked hash on whole cluster"
            );
        } else {
            warn!(
                number_of_peers_checked = peers_checked,
                number_of_peers = peers.len(),
                revision = recorded.revision,
                compact_revision = recorded.compact_revision,
                "skipped revision in compaction hash check; was not able to check all peers"
            );
        }
        return Verdict {
            done: all,
            checked: all,
            corrupt: Vec::new(),
        };
    }
    let members = peers.len() + 1;
    let quorum = members / 2 + 1;
    let majority = by_hash
        .iter()
        .find(|(_, members)| members.len() >= quorum)
        .map(|(hash, _)| *hash);
    let mut corrupt = Vec::new();
    if majority.is_none() {
        error!(
            leader_id = %hex(leader),
            leader_hash = recorded.hash,
            revision = recorded.revision,
            compact_revision = recorded.compact_revision,
            "Detected compaction hash mismatch but cannot identify the corrupted members, so \
             intentionally set the memberID as 0"
        );
        corrupt.push(0);
    }
    for (hash, members) in by_hash.iter().filter(|(h, _)| Some(**h) != majority) {
        if majority.is_some() {
            corrupt.extend(members.iter().copied());
        }
        error!(
            leader_id = %hex(leader),
            leader_hash = recorded.hash,
            compact_revision = recorded.compact_revision,
            revision = recorded.revision,
            member_ids = %members.iter().map(|m| hex(*m)).collect::<Vec<_>>().join(","),
            member_hash = hash,
            "Detected compaction hash mismatch"
        );
    }
    Verdict {
        done: true,
        checked: false,
        corrupt,
    }
}

/// The check, every `every` while the server runs, acting on the leader
/// only.
pub async fn monitor<R: Runtime, K: KvStore>(
    runtime: R,
    handle: Handle<K>,
    transport: PeerTransport<R>,
    me: u64,
    every: Duration,
    limit: Duration,
) {
    info!(
        local_member_id = %hex(me),
        interval = %GoDuration(every),
        "enabled compact hash check"
    );
    let mut latest_checked = 0;
    loop {
        runtime
            .sleep_until(crate::runtime::deadline_after(every))
            .await;
        match check_once(&handle, &transport, me, limit, latest_checked).await {
            Ok(Some(checked)) => latest_checked = latest_checked.max(checked),
            Ok(None) => {}
            Err(e) => warn!(error = %e, "failed to check compaction hashes"),
        }
    }
}

/// One pass on the leader; the revision it found checked, if any.
async fn check_once<R: Runtime, K: KvStore>(
    handle: &Handle<K>,
    transport: &PeerTransport<R>,
    me: u64,
    limit: Duration,
    latest_checked: i64,
) -> Result<Option<i64>, oxetcd_core::Error> {
    let Response::Status(status) = handle.request(Request::Status).await? else {
        return Ok(None);
    };
    if status.leader != me {
        return Ok(None);
    }
    info!(
        local_member_id = %hex(me),
        timeout = %GoDuration(limit),
        "starting compact hash check"
    );
    let list = Request::MemberList(MemberListRequest {
        linearizable: false,
    });
    let Response::MemberList(list) = handle.request(list).await? else {
        return Ok(None);
    };
    let peers: Vec<(u64, Vec<String>)> = list
        .members
        .into_iter()
        .filter(|m| m.id != me)
        .map(|m| (m.id, m.peer_ur_ls))
        .collect();
    // Newest first; only those not checked yet.
    let unchecked: Vec<CompactionHash> = handle
        .compaction_hashes()
        .into_iter()
        .take_while(|h| h.revision > latest_checked)
        .collect();
    let mut checked = None;
    let mut examined = unchecked.len();
    for (i, recorded) in unchecked.iter().enumerate() {
        let answers = peer_hashes(transport, me, &peers, recorded.revision, limit).await;
        if answers.is_empty() {
            continue;
        }
        let verdict = check_peer_hashes(me, recorded, &answers);
        for member_id in &verdict.corrupt {
            on_corruption(handle, *member_id).await;
        }
        if verdict.checked {
            checked = Some(recorded.revision);
        }
        if verdict.done {
            examined = i + 1;
            break;
        }
    }
    info!(
        number_of_hashes_checked = examined,
        "finished compaction hash check"
    );
    Ok(checked)
}

/// A member ID as etcd prints it.
fn hex(id: u64) -> String {
    format!("{id:x}")
}

#[cfg(test)]
mod tests {
    use oxetcd_storage::bolt::hash::KvHash;

    use super::*;
    use crate::peer::PeerHashError;

    const RECORDED: CompactionHash = CompactionHash {
        hash: 7,
        compact_revision: 3,
        revision: 10,
    };

    fn peer(id: u64, hash: u32, compact_revision: i64) -> PeerHash {
        PeerHash {
            id,
            urls: Vec::new(),
            result: Ok(KvHash {
                hash,
                compact_revision,
                revision: 12,
            }),
        }
    }

    fn silent(id: u64) -> PeerHash {
        PeerHash {
            id,
            urls: Vec::new(),
            result: Err(PeerHashError::Unavailable),
        }
    }

    #[test]
    fn agreement_of_every_peer_checks_the_revision() {
        let v = check_peer_hashes(1, &RECORDED, &[peer(2, 7, 3), peer(3, 7, 3)]);
        assert_eq!(
            v,
            Verdict {
                done: true,
                checked: true,
                corrupt: vec![]
            }
        );
    }

    #[test]
    fn a_peer_not_compared_sends_the_check_to_the_next_hash() {
        for others in [
            [peer(2, 7, 3), silent(3)],
            // Another compact revision: not comparable.
            [peer(2, 7, 3), peer(3, 9, 2)],
        ] {
            let v = check_peer_hashes(1, &RECORDED, &others);
            assert_eq!(
                v,
                Verdict {
                    done: false,
                    checked: false,
                    corrupt: vec![]
                }
            );
        }
    }

    #[test]
    fn the_minority_is_corrupt_and_without_a_majority_the_cluster_is() {
        let v = check_peer_hashes(1, &RECORDED, &[peer(2, 7, 3), peer(3, 8, 3)]);
        assert_eq!(v.corrupt, vec![3]);
        assert!(v.done && !v.checked);
        // The leader itself can be the odd one out.
        let v = check_peer_hashes(1, &RECORDED, &[peer(2, 8, 3), peer(3, 8, 3)]);
        assert_eq!(v.corrupt, vec![1]);
        // Two members, two hashes: nobody has a majority.
        let v = check_peer_hashes(1, &RECORDED, &[peer(2, 8, 3)]);
        assert_eq!(v.corrupt, vec![0]);
    }
}
