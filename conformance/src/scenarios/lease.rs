//! Leases: grant, attach, revoke, keep-alive, time-to-live, listing and
//! expiry, with etcd's answers for missing leases.

use std::time::Duration;

use oxetcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest,
    PutRequest,
};

use super::{ensure, expect, get, ok, put};
use crate::scenarios::watch::{create, send_create};
use crate::target::Target;

fn grant(id: i64, ttl: i64) -> LeaseGrantRequest {
    LeaseGrantRequest { ttl, id }
}

fn put_leased(key: &str, value: &str, lease: i64) -> PutRequest {
    PutRequest {
        lease,
        ..put(key, value)
    }
}

fn ttl(id: i64) -> LeaseTimeToLiveRequest {
    LeaseTimeToLiveRequest { id, keys: true }
}

/// The TTL is raised to the minimum (2 s with etcd's default timing); an
/// ID that is taken, or a TTL too large, is refused; a server-chosen ID is
/// positive.
pub(super) fn lease_grant_rules(t: &mut Target) -> Result<(), String> {
    expect(&t.lease_grant(grant(100, 1)), "rev 1 id 100 ttl 2")?;
    expect(&t.lease_grant(grant(101, 60)), "rev 1 id 101 ttl 60")?;
    expect(
        &t.lease_grant(grant(100, 60)),
        "error 9 etcdserver: lease already exists",
    )?;
    expect(
        &t.lease_grant(grant(102, 9_000_000_001)),
        "error 11 etcdserver: too large lease TTL",
    )?;
    let chosen = ok(t.lease_grant(grant(0, 30)))?;
    ensure(chosen.id > 0 && chosen.ttl == 30, || {
        format!("server-chosen lease {chosen:?}")
    })?;
    let listed = ok(t.lease_leases())?;
    ensure(listed.leases.len() == 3, || format!("{listed:?}"))?;
    expect(
        &t.lease_time_to_live(ttl(101)),
        "rev 1 id 101 granted 60 keys []",
    )
}

/// Keys attach with a put, detach when put without the lease, and a revoke
/// deletes every attached key in one revision; afterwards the lease is
/// gone for every call, each answering as etcd does.
pub(super) fn lease_attach_and_revoke(t: &mut Target) -> Result<(), String> {
    expect(&t.lease_grant(grant(7, 60)), "rev 1 id 7 ttl 60")?;
    expect(&t.put(put_leased("a", "1", 7)), "rev 2")?;
    expect(&t.put(put_leased("b", "1", 7)), "rev 3")?;
    expect(&t.put(put_leased("c", "1", 7)), "rev 4")?;
    expect(&t.put(put("c", "2")), "rev 5")?;
    expect(
        &t.put(put_leased("d", "1", 8)),
        "error 5 etcdserver: requested lease not found",
    )?;
    expect(&t.range(get("a")), "rev 5 count 1 [a=1 c2 m2 v1 l7]")?;
    expect(
        &t.lease_time_to_live(ttl(7)),
        "rev 5 id 7 granted 60 keys [a, b]",
    )?;
    let s = t.watch_open();
    ok(t.watch_send(s, send_create(create("a", b"\0"))))?;
    expect(
        &t.watch_recv(s, Duration::from_secs(5)),
        "rev 5 watch 0 created",
    )?;
    expect(&t.lease_revoke(LeaseRevokeRequest { id: 7 }), "rev 6")?;
    expect(
        &t.watch_recv(s, Duration::from_secs(5)),
        "rev 6 watch 0 [DELETE a m6, DELETE b m6]",
    )?;
    expect(
        &t.range(super::everything()),
        "rev 6 count 1 [c=2 c4 m5 v2]",
    )?;
    expect(
        &t.lease_revoke(LeaseRevokeRequest { id: 7 }),
        "error 5 etcdserver: requested lease not found",
    )?;
    expect(
        &t.lease_time_to_live(ttl(7)),
        "rev 6 id 7 expired granted 0 keys []",
    )?;
    expect(
        &t.lease_keep_alive(LeaseKeepAliveRequest { id: 7 }),
        "rev 6 id 7 ttl 0",
    )?;
    expect(
        &t.put(put_leased("a", "1", 7)),
        "error 5 etcdserver: requested lease not found",
    )?;
    expect(&t.lease_leases(), "rev 6 leases []")
}

/// An unrenewed lease expires after its TTL and takes its keys; a renewed
/// one lives on.
pub(super) fn lease_expiry_and_keep_alive(t: &mut Target) -> Result<(), String> {
    expect(&t.lease_grant(grant(1, 2)), "rev 1 id 1 ttl 2")?;
    expect(&t.lease_grant(grant(2, 2)), "rev 1 id 2 ttl 2")?;
    expect(&t.put(put_leased("short", "1", 1)), "rev 2")?;
    expect(&t.put(put_leased("kept", "1", 2)), "rev 3")?;
    for _ in 0..4 {
        t.sleep(Duration::from_millis(1_000));
        expect(
            &t.lease_keep_alive(LeaseKeepAliveRequest { id: 2 }),
            "rev 3 id 2 ttl 2",
        )
        .or_else(|_| {
            expect(
                &t.lease_keep_alive(LeaseKeepAliveRequest { id: 2 }),
                "rev 4 id 2 ttl 2",
            )
        })?;
    }
    expect(&t.range(get("short")), "rev 4 count 0 []")?;
    expect(&t.range(get("kept")), "rev 4 count 1 [kept=1 c3 m3 v1 l2]")?;
    let remaining = ok(t.lease_time_to_live(ttl(2)))?;
    ensure((1..=2).contains(&remaining.ttl), || {
        format!("remaining TTL {} after a keep-alive", remaining.ttl)
    })?;
    expect(
        &t.lease_keep_alive(LeaseKeepAliveRequest { id: 1 }),
        "rev 4 id 1 ttl 0",
    )?;
    expect(&t.lease_leases(), "rev 4 leases [2]")
}
