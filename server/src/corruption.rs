//! Corruption checks: members compare their `HashKV` with their peers',
//! as etcd's `corrupt.go` does.
//!
//! Design. Two checks, with etcd's rules and log lines:
//! - the initial check (`--experimental-initial-corrupt-check`, 3.6's
//!   `--feature-gates=InitialCorruptCheck=true`), before the node starts:
//!   this member hashes its backend at its current revision and asks every
//!   peer for its hash at that revision; a peer with the same compact
//!   revision and another hash means this member diverged, and the server
//!   refuses to start (`found data inconsistency with peers`). Peers that
//!   cannot answer (down, behind, compacted past) are logged and skipped.
//! - the periodic check (`--corrupt-check-time`, 3.4's
//!   `--experimental-corrupt-check-time`), on the leader only: it hashes,
//!   asks its followers at its revision, passes a read barrier, hashes
//!   again, and flags a follower ahead of it, a follower compacted
//!   further, or one with its compact revision and another hash (and
//!   itself, when its own two hashes differ at one revision); the
//!   compact hash check is in [`crate::compact_hash_check`]. What they
//!   find ends in
//!   [`on_corruption`], the one place that raises the CORRUPT alarm.
//!
//! Peers are asked over the peer port ([`PeerTransport::hash_kv`]; why not
//! over gRPC is in `peer/hash_kv.rs`). The comparisons are pure functions
//! over the hashes gathered, tested without a network. This module never
//! changes data.

use std::time::Duration;

use oxetcd_core::storage::{KvRead, KvStore};
use oxetcd_core::{GoDuration, Request, Response};
use oxetcd_proto::etcdserverpb::{AlarmType, MemberListRequest};
use oxetcd_storage::bolt::hash::KvHash;
use tracing::{error, info, warn};

use crate::driver::Handle;
use crate::peer::{PeerHashError, PeerTransport};
use crate::runtime::Runtime;

/// A member's hash as a peer answered it, or why it did not.
#[derive(Debug)]
pub struct PeerHash {
    /// The peer.
    pub id: u64,
    /// Where it was asked.
    pub urls: Vec<String>,
    /// Its answer.
    pub result: Result<KvHash, PeerHashError>,
}

/// The initial check found this member's data diverged from a peer's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inconsistent {
    /// This member.
    pub member_id: u64,
}

impl std::fmt::Display for Inconsistent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:x} found data inconsistency with peers",
            self.member_id
        )
    }
}

impl std::error::Error for Inconsistent {}

/// Asks every peer in `peers` (ID and peer URLs) for its hash at
/// `revision`, one after another, each within `limit`; failures are
/// logged as etcd logs them.
pub async fn peer_hashes<R: Runtime>(
    transport: &PeerTransport<R>,
    me: u64,
    peers: &[(u64, Vec<String>)],
    revision: i64,
    limit: Duration,
) -> Vec<PeerHash> {
    let mut answers = Vec::with_capacity(peers.len());
    for (id, urls) in peers {
        if *id == me || urls.is_empty() {
            continue;
        }
        let result = transport.hash_kv(*id, urls, revision, limit).await;
        if let Err(e) = &result {
            warn!(
                local_member_id = %hex(me),
                requested_revision = revision,
                remote_peer_endpoint = %urls.join(","),
                error = %e,
                "failed hash kv request"
            );
        }
        answers.push(PeerHash {
            id: *id,
            urls: urls.clone(),
            result,
        });
    }
    answers
}

/// The initial check's verdict on `local` (this member's hash at its
/// current revision) against its peers' answers.
pub fn check_initial(me: u64, local: &KvHash, peers: &[PeerHash]) -> Result<(), Inconsistent> {
    let mut mismatches = 0;
    for peer in peers {
        let endpoints = peer.urls.join(",");
        match &peer.result {
            Ok(theirs) if theirs.hash != local.hash => {
                let same_compaction = theirs.compact_revision == local.compact_revision;
                let message = if same_compaction {
                    mismatches += 1;
                    "found different hash values from remote peer"
                } else {
                    "found different compact revision values from remote peer"
                };
                warn!(
                    local_member_id = %hex(me),
                    local_member_revision = local.revision,
                    local_member_compact_revision = local.compact_revision,
                    local_member_hash = local.hash,
                    remote_peer_id = %hex(peer.id),
                    remote_peer_endpoints = %endpoints,
                    remote_peer_revision = theirs.revision,
                    remote_peer_compact_revision = theirs.compact_revision,
                    remote_peer_hash = theirs.hash,
                    "{message}"
                );
            }
            Ok(_) => {}
            Err(PeerHashError::FutureRevision) => warn!(
                local_member_id = %hex(me),
                local_member_revision = local.revision,
                local_member_compact_revision = local.compact_revision,
                local_member_hash = local.hash,
                remote_peer_id = %hex(peer.id),
                remote_peer_endpoints = %endpoints,
                "cannot fetch hash from slow remote peer"
            ),
            Err(PeerHashError::Compacted) => warn!(
                local_member_id = %hex(me),
                local_member_revision = local.revision,
                local_member_compact_revision = local.compact_revision,
                local_member_hash = local.hash,
                remote_peer_id = %hex(peer.id),
                remote_peer_endpoints = %endpoints,
                "cannot fetch hash from remote peer; local member is behind"
            ),
            Err(_) => {}
        }
    }
    if mismatches > 0 {
        return Err(Inconsistent { member_id: me });
    }
    info!(
        local_member_id = %hex(me),
        "initial corruption checking passed; no corruption"
    );
    Ok(())
}

/// The leader's verdict: `first` and `second` are its own hashes before
/// and after asking its followers (`peers`, asked at `first.revision`).
/// Returns the member the first finding names, if any (etcd raises one
/// alarm per check), and logs every finding as etcd does.
pub fn check_as_leader(
    me: u64,
    first: &KvHash,
    second: &KvHash,
    peers: &[PeerHash],
) -> Option<u64> {
    let mut alarm = None;
    if second.hash != first.hash
        && second.revision == first.revision
        && second.compact_revision == first.compact_revision
    {
        warn!(
            revision_1 = first.revision,
            compact_revision_1 = first.compact_revision,
            hash_1 = first.hash,
            revision_2 = second.revision,
            compact_revision_2 = second.compact_revision,
            hash_2 = second.hash,
            "found hash mismatch"
        );
        alarm.get_or_insert(me);
    }
    let mut checked = 0;
    for peer in peers {
        let Ok(theirs) = &peer.result else {
            continue;
        };
        checked += 1;
        if theirs.revision > second.revision {
            warn!(
                leader_revision = second.revision,
                follower_revision = theirs.revision,
                follower_peer_id = %hex(peer.id),
                "revision from follower must be less than or equal to leader's"
            );
            alarm.get_or_insert(peer.id);
        }
        if theirs.compact_revision > second.compact_revision {
            warn!(
                leader_compact_revision = second.compact_revision,
                follower_compact_revision = theirs.compact_revision,
                follower_peer_id = %hex(peer.id),
                "compact revision from follower must be less than or equal to leader's"
            );
            alarm.get_or_insert(peer.id);
        }
        if theirs.compact_revision == first.compact_revision && theirs.hash != first.hash {
            warn!(
                leader_compact_revision = second.compact_revision,
                leader_hash = first.hash,
                follower_compact_revision = theirs.compact_revision,
                follower_hash = theirs.hash,
                follower_peer_id = %hex(peer.id),
                "same compact revision then hashes must match"
            );
            alarm.get_or_insert(peer.id);
        }
    }
    info!(
        number_of_peers_checked = checked,
        "finished peer corruption check"
    );
    alarm
}

/// What a check does when it finds `member_id` diverged: it logs the
/// finding and raises the CORRUPT alarm for that member through the log,
/// which stops writes cluster-wide, as in etcd. A failure to raise it
/// (no leader just now) is logged; the next check finds it again.
pub async fn on_corruption<K: KvStore>(handle: &Handle<K>, member_id: u64) {
    error!(
        member_id = %hex(member_id),
        alarm = "CORRUPT",
        "found data inconsistency; raising the CORRUPT alarm"
    );
    if let Err(e) = handle.raise_alarm(member_id, AlarmType::Corrupt).await {
        error!(member_id = %hex(member_id), error = %e, "failed to raise the CORRUPT alarm");
    }
}

/// The initial check, before the node starts: this member's hash
/// against its peers' (those of the stored membership, or
/// `configured_peers` on a store that has none). An error when this
/// member diverged or its own hash cannot be computed.
pub async fn check_before_start<R: Runtime, K: KvStore>(
    runtime: &R,
    transport: &PeerTransport<R>,
    kv: &K,
    me: u64,
    configured_peers: Vec<(u64, Vec<String>)>,
    limit: Duration,
) -> Result<(), String> {
    info!(
        local_member_id = %hex(me),
        timeout = %GoDuration(limit),
        "starting initial corruption check"
    );
    let kv = kv.clone();
    let (done, result) = futures_channel::oneshot::channel();
    runtime.spawn_blocking(move || {
        let hashed = kv
            .read()
            .map_err(oxetcd_core::Error::Storage)
            .and_then(|view| {
                let members = view.membership().map_err(oxetcd_core::Error::Storage)?;
                let hash = oxetcd_storage::bolt::hash::hash_kv(&view, 0)?;
                Ok((hash, members))
            });
        let _ = done.send(hashed);
    });
    let (local, membership) = result
        .await
        .map_err(|_| "the hash was abandoned".to_owned())?
        .map_err(|e| format!("{} failed to fetch hash ({e})", hex(me)))?;
    let peers = match membership {
        Some(stored) => stored
            .members
            .into_iter()
            .map(|m| (m.id, m.peer_ur_ls))
            .collect(),
        None => configured_peers,
    };
    let answers = peer_hashes(transport, me, &peers, local.revision, limit).await;
    check_initial(me, &local, &answers).map_err(|e| e.to_string())
}

/// The periodic check, every `every` while the server runs: on the
/// leader only, hash, ask the followers, hash again, compare.
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
        "enabled corruption checking"
    );
    loop {
        runtime
            .sleep_until(crate::runtime::deadline_after(every))
            .await;
        if let Err(e) = check_once(&handle, &transport, me, limit).await {
            warn!(error = %e, "failed to check hash KV");
        }
    }
}

/// One periodic check; nothing when this member does not lead.
async fn check_once<R: Runtime, K: KvStore>(
    handle: &Handle<K>,
    transport: &PeerTransport<R>,
    me: u64,
    limit: Duration,
) -> Result<(), oxetcd_core::Error> {
    let Response::Status(status) = handle.request(Request::Status).await? else {
        return Ok(());
    };
    if status.leader != me {
        return Ok(());
    }
    let list = Request::MemberList(MemberListRequest {
        linearizable: false,
    });
    let Response::MemberList(list) = handle.request(list).await? else {
        return Ok(());
    };
    let peers: Vec<(u64, Vec<String>)> = list
        .members
        .into_iter()
        .map(|m| (m.id, m.peer_ur_ls))
        .collect();
    let first = handle.hash_kv(0).await?;
    let answers = peer_hashes(transport, me, &peers, first.revision, limit).await;
    // A read barrier, as etcd's linearizable read before its second hash:
    // everything committed by now is applied.
    let barrier = Request::MemberList(MemberListRequest { linearizable: true });
    handle.request(barrier).await?;
    let second = handle.hash_kv(0).await?;
    if let Some(member_id) = check_as_leader(me, &first, &second, &answers) {
        on_corruption(handle, member_id).await;
    }
    Ok(())
}

/// A member ID as etcd prints it.
fn hex(id: u64) -> String {
    format!("{id:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(hash: u32, compact_revision: i64, revision: i64) -> KvHash {
        KvHash {
            hash,
            compact_revision,
            revision,
        }
    }

    fn peer(id: u64, result: Result<KvHash, PeerHashError>) -> PeerHash {
        PeerHash {
            id,
            urls: vec![format!("http://127.0.0.1:{id}")],
            result,
        }
    }

    #[test]
    fn the_initial_check_fails_only_on_a_hash_at_the_same_compaction() {
        let local = hash(7, 3, 10);
        let agreeing = [
            peer(2, Ok(hash(7, 3, 12))),
            // Another compaction: not comparable, only logged.
            peer(3, Ok(hash(9, 5, 10))),
            peer(4, Err(PeerHashError::FutureRevision)),
            peer(5, Err(PeerHashError::Unreachable("down".into()))),
        ];
        assert_eq!(check_initial(1, &local, &agreeing), Ok(()));
        let diverged = [peer(2, Ok(hash(7, 3, 10))), peer(3, Ok(hash(8, 3, 10)))];
        let e = check_initial(0x1f, &local, &diverged).expect_err("diverged");
        assert_eq!(e.to_string(), "1f found data inconsistency with peers");
    }

    #[test]
    fn the_leader_flags_what_etcd_flags() {
        let first = hash(7, 3, 10);
        let healthy = [
            peer(2, Ok(hash(7, 3, 10))),
            peer(3, Err(PeerHashError::FutureRevision)),
            // A follower that compacted less long ago is not comparable.
            peer(4, Ok(hash(1, 2, 10))),
        ];
        assert_eq!(check_as_leader(1, &first, &first, &healthy), None);
        let cases = [
            (peer(2, Ok(hash(8, 3, 10))), Some(2), "another hash"),
            (peer(2, Ok(hash(7, 3, 11))), Some(2), "ahead of the leader"),
            (peer(2, Ok(hash(7, 4, 10))), Some(2), "compacted further"),
        ];
        for (answer, expected, what) in cases {
            assert_eq!(
                check_as_leader(1, &first, &first, &[answer]),
                expected,
                "{what}"
            );
        }
        // Its own hash moved at one revision: the leader itself.
        assert_eq!(
            check_as_leader(1, &first, &hash(8, 3, 10), &healthy),
            Some(1)
        );
        // The first finding is the one alarmed, as etcd alarms once.
        let two = [peer(2, Ok(hash(8, 3, 10))), peer(3, Ok(hash(9, 3, 10)))];
        assert_eq!(check_as_leader(1, &first, &first, &two), Some(2));
    }
}
