//! The Election and Lock services (etcd's `v3election` and `v3lock`), in
//! the calls that answer at once: campaigning and locking uncontended,
//! again with the same lease, proclaiming, resigning and unlocking, stale
//! leader keys, and etcd's errors (`Unknown`, with etcd's text). Waiting
//! calls — contention, revokes, `Observe`, cancelled waiters — are in
//! `tests/tests/election_lock.rs`. The services are the server's (clients
//! of the node), so the in-process core has none and these scenarios
//! check only that it says so.

use oxetcd_proto::etcdserverpb::LeaseGrantRequest;
use oxetcd_proto::v3electionpb::{
    CampaignRequest, LeaderKey, LeaderRequest, ProclaimRequest, ResignRequest,
};
use oxetcd_proto::v3lockpb::{LockRequest, UnlockRequest};

use super::{expect, get, ok, prefix, put};
use crate::target::Target;

/// A lease granted with a chosen ID, so keys are known in advance.
const LEASE: i64 = 0x1234;

/// Another, for a second contender.
const OTHER_LEASE: i64 = 0xbeef;

/// A lease nobody granted.
const UNKNOWN_LEASE: i64 = 0x7777;

fn grant(t: &mut Target, id: i64) -> Result<(), String> {
    ok(t.lease_grant(LeaseGrantRequest { ttl: 60, id })).map(|_| ())
}

fn campaign(name: &str, lease: i64, value: &str) -> CampaignRequest {
    CampaignRequest {
        name: name.into(),
        lease,
        value: value.into(),
    }
}

fn leader(name: &str) -> LeaderRequest {
    LeaderRequest { name: name.into() }
}

fn proclaim(leader: &LeaderKey, value: &str) -> ProclaimRequest {
    ProclaimRequest {
        leader: Some(leader.clone()),
        value: value.into(),
    }
}

fn resign(leader: &LeaderKey) -> ResignRequest {
    ResignRequest {
        leader: Some(leader.clone()),
    }
}

fn lock(name: &str, lease: i64) -> LockRequest {
    LockRequest {
        name: name.into(),
        lease,
    }
}

fn unlock(key: &str) -> UnlockRequest {
    UnlockRequest { key: key.into() }
}

/// The in-process core answers as a server without the service would.
fn core_has_none(t: &mut Target) -> Result<(), String> {
    expect(
        &t.campaign(campaign("e", LEASE, "a")),
        "error 12 unknown service v3electionpb.Election",
    )?;
    expect(
        &t.lock(lock("l", LEASE)),
        "error 12 unknown service v3lockpb.Lock",
    )
}

/// One candidate: elected at once under `name/<lease hex>`; `Leader`
/// names it; `Proclaim` rewrites its value; campaigning again with the
/// same lease takes the same key over (proclaiming a new value); a
/// `LeaderKey` with another create revision is not the leader; `Resign`
/// deletes the key, after which there is no leader.
pub(super) fn election_campaign_proclaim_resign(t: &mut Target) -> Result<(), String> {
    if !t.is_server() {
        return core_has_none(t);
    }
    grant(t, LEASE)?;
    expect(&t.leader(leader("e")), "error 2 election: no leader")?;
    let elected = t.campaign(campaign("e", LEASE, "a"));
    expect(&elected, "rev 2 leader e e/1234 c2 l4660")?;
    let key = ok(elected)?.leader.unwrap_or_default();
    expect(&t.leader(leader("e")), "rev 2 e/1234=a c2 m2 v1 l4660")?;
    expect(&t.proclaim(proclaim(&key, "b")), "rev 3")?;
    expect(&t.leader(leader("e")), "rev 3 e/1234=b c2 m3 v2 l4660")?;

    // Again with the same lease: the same key, its value proclaimed.
    expect(
        &t.campaign(campaign("e", LEASE, "c")),
        "rev 3 leader e e/1234 c2 l4660",
    )?;
    expect(&t.leader(leader("e")), "rev 4 e/1234=c c2 m4 v3 l4660")?;
    expect(
        &t.campaign(campaign("e", LEASE, "c")),
        "rev 4 leader e e/1234 c2 l4660",
    )?;
    expect(
        &t.range(get("e/1234")),
        "rev 4 count 1 [e/1234=c c2 m4 v3 l4660]",
    )?;

    // A key of another generation leads nothing.
    let stale = LeaderKey {
        rev: 1,
        ..key.clone()
    };
    expect(
        &t.proclaim(proclaim(&stale, "x")),
        "error 2 election: not leader",
    )?;
    expect(&t.resign(resign(&stale)), "rev 4")?;
    expect(
        &t.range(get("e/1234")),
        "rev 4 count 1 [e/1234=c c2 m4 v3 l4660]",
    )?;

    expect(&t.resign(resign(&key)), "rev 5")?;
    expect(&t.leader(leader("e")), "error 2 election: no leader")?;
    expect(&t.resign(resign(&key)), "rev 5")?;
    expect(
        &t.proclaim(proclaim(&key, "d")),
        "error 2 election: not leader",
    )
}

/// The oldest key under `name/` leads, whoever wrote it; a `Leader` of
/// one election never sees another's keys (`e/` is not `ee/`).
pub(super) fn election_leader_is_the_oldest_key(t: &mut Target) -> Result<(), String> {
    if !t.is_server() {
        return core_has_none(t);
    }
    ok(t.put(put("ee/x", "other")))?;
    ok(t.put(put("e/zzz", "first")))?;
    ok(t.put(put("e/aaa", "second")))?;
    expect(&t.leader(leader("e")), "rev 4 e/zzz=first c3 m3 v1")?;
    expect(&t.leader(leader("ee")), "rev 4 ee/x=other c2 m2 v1")?;
    expect(&t.leader(leader("")), "error 2 election: no leader")
}

/// etcd's errors: a `Proclaim` or `Resign` without a leader key, a lease
/// that does not exist, and nothing written by the refused calls.
pub(super) fn election_errors(t: &mut Target) -> Result<(), String> {
    if !t.is_server() {
        return core_has_none(t);
    }
    expect(
        &t.proclaim(ProclaimRequest {
            leader: None,
            value: b"v".to_vec(),
        }),
        "error 2 \"leader\" field must be provided",
    )?;
    expect(
        &t.resign(ResignRequest { leader: None }),
        "error 2 \"leader\" field must be provided",
    )?;
    expect(
        &t.campaign(campaign("e", UNKNOWN_LEASE, "v")),
        "error 2 etcdserver: requested lease not found",
    )?;
    expect(
        &t.campaign(campaign("e", -1, "v")),
        "error 2 etcdserver: requested lease not found",
    )?;
    expect(&t.range(prefix("e/")), "rev 1 count 0 []")
}

/// A lock taken uncontended is `name/<lease hex>`, with an empty value;
/// locking again with the same lease finds it held already; `Unlock`
/// deletes the key it is given (a missing key is no error, an empty one
/// is etcd's); a second lease waits behind the first (not shown: it would
/// block); an unknown lease is refused.
pub(super) fn lock_and_unlock(t: &mut Target) -> Result<(), String> {
    if !t.is_server() {
        return core_has_none(t);
    }
    grant(t, LEASE)?;
    grant(t, OTHER_LEASE)?;
    expect(&t.lock(lock("l", LEASE)), "rev 2 key l/1234")?;
    expect(
        &t.range(prefix("l/")),
        "rev 2 count 1 [l/1234= c2 m2 v1 l4660]",
    )?;
    expect(&t.lock(lock("l", LEASE)), "rev 2 key l/1234")?;
    expect(&t.unlock(unlock("l/1234")), "rev 3")?;
    expect(&t.unlock(unlock("l/1234")), "rev 3")?;
    expect(
        &t.unlock(unlock("")),
        "error 2 etcdserver: key is not provided",
    )?;
    expect(&t.lock(lock("l", OTHER_LEASE)), "rev 4 key l/beef")?;
    expect(
        &t.lock(lock("m", UNKNOWN_LEASE)),
        "error 2 etcdserver: requested lease not found",
    )?;
    expect(&t.range(prefix("m/")), "rev 4 count 0 []")?;
    // Revoking the holder's lease frees the lock.
    ok(t.lease_revoke(oxetcd_proto::etcdserverpb::LeaseRevokeRequest { id: OTHER_LEASE }))?;
    expect(&t.lock(lock("l", LEASE)), "rev 6 key l/1234")
}
