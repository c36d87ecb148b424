//! The lessor's unit tests: TTL rules, keys attached and recovered,
//! checkpoints across promotion, the revoke rate and expiry spreading.

use super::*;
use crate::memory::MemoryKv;
use crate::storage::{KvStore, Revision};

fn at(secs: u64) -> Instant {
    Instant::from_nanos(secs * 1_000_000_000)
}

#[test]
fn minimum_ttl_follows_etcds_formula() {
    assert_eq!(LeaseConfig::default().min_ttl_secs, 2);
    // 3/2 of 10 ticks of 500 ms = 7.5 s, rounded up.
    assert_eq!(LeaseConfig::from_raft_timing(500, 5000).min_ttl_secs, 8);
    assert_eq!(LeaseConfig::from_raft_timing(10, 50).min_ttl_secs, 1);
}

#[test]
fn grant_raises_ttl_refuses_duplicates_and_expires_on_the_leader_only() {
    let kv = MemoryKv::default();
    let mut lessor = Lessor::recover(LeaseConfig::default(), &kv.read().unwrap()).unwrap();
    let mut txn = kv.write().unwrap();
    assert_eq!(lessor.grant(&mut txn, 7, 1, at(0)).unwrap(), Ok(2));
    assert_eq!(
        lessor.grant(&mut txn, 7, 10, at(0)).unwrap(),
        Err(Error::LeaseExists)
    );
    assert_eq!(
        lessor
            .grant(&mut txn, 8, LEASE_TTL_MAX_SECS + 1, at(0))
            .unwrap(),
        Err(Error::LeaseTtlTooLarge)
    );
    assert_eq!(lessor.poll_timeout(), None, "a follower holds no deadline");
    lessor.promote(at(10));
    // Full TTL plus the election timeout.
    assert_eq!(lessor.poll_timeout(), Some(at(12) + Duration::from_secs(1)));
    let (revokes, _) = lessor.poll_due(at(13));
    assert_eq!(revokes, vec![7]);
    assert_eq!(lessor.renew(7, at(13)), Renewal::Expiring);
    // Not applied within the retry interval: proposed again.
    assert_eq!(lessor.poll_due(at(15)).0, Vec::<i64>::new());
    assert_eq!(lessor.poll_due(at(16)).0, vec![7]);
}

#[test]
fn keys_attach_detach_and_recover_from_storage() {
    let kv = MemoryKv::default();
    let mut lessor = Lessor::recover(LeaseConfig::default(), &kv.read().unwrap()).unwrap();
    let mut txn = kv.write().unwrap();
    lessor.grant(&mut txn, 1, 60, at(0)).unwrap().unwrap();
    lessor.grant(&mut txn, 2, 60, at(0)).unwrap().unwrap();
    let version = |key: &[u8], main, lease, tombstone| KeyVersion {
        key: key.to_vec(),
        mod_revision: Revision { main, sub: 0 },
        create_revision: main,
        version: 1,
        lease,
        value: Vec::new(),
        tombstone,
    };
    let changes = [
        version(b"a", 2, 1, false),
        version(b"b", 3, 1, false),
        version(b"c", 4, 2, false),
    ];
    for change in &changes {
        txn.put_version(change).unwrap();
    }
    lessor.on_changes(&changes);
    // "b" moves to no lease, "c" is deleted.
    let moved = [version(b"b", 5, 0, false), version(b"c", 6, 0, true)];
    for change in &moved {
        txn.put_version(change).unwrap();
    }
    lessor.on_changes(&moved);
    let mut meta = txn.meta().unwrap();
    meta.revision = 6;
    txn.set_meta(&meta).unwrap();
    txn.commit().unwrap();
    let keys = |lessor: &Lessor, id| lessor.time_to_live(id, at(0), true).unwrap().keys;
    assert_eq!(keys(&lessor, 1), vec![b"a".to_vec()]);
    assert!(keys(&lessor, 2).is_empty());

    let recovered = Lessor::recover(LeaseConfig::default(), &kv.read().unwrap()).unwrap();
    assert_eq!(keys(&recovered, 1), vec![b"a".to_vec()]);
    assert!(keys(&recovered, 2).is_empty());

    let mut txn = kv.write().unwrap();
    let mut lessor = recovered;
    assert_eq!(
        lessor.revoke(&mut txn, 1).unwrap(),
        Some(vec![b"a".to_vec()])
    );
    assert_eq!(lessor.revoke(&mut txn, 1).unwrap(), None);
    txn.commit().unwrap();
    let recovered = Lessor::recover(LeaseConfig::default(), &kv.read().unwrap()).unwrap();
    assert!(!recovered.contains(1));
    assert!(recovered.contains(2));
}

/// A lessor leading from time 0 that checkpoints leases every 5 s, over
/// an empty in-memory backend, and its configuration.
fn checkpointing_leader() -> (LeaseConfig, MemoryKv, Lessor) {
    let config = LeaseConfig {
        checkpoint_interval: Duration::from_secs(5),
        ..LeaseConfig::default()
    };
    let kv = MemoryKv::default();
    let mut lessor = Lessor::recover(config, &kv.read().unwrap()).unwrap();
    lessor.promote(at(0));
    (config, kv, lessor)
}

#[test]
fn checkpoints_keep_the_remaining_ttl_across_promotion() {
    let (config, kv, mut lessor) = checkpointing_leader();
    let mut txn = kv.write().unwrap();
    lessor.grant(&mut txn, 1, 30, at(0)).unwrap().unwrap();
    // Short leases are not checkpointed.
    lessor.grant(&mut txn, 2, 3, at(0)).unwrap().unwrap();
    let (_, checkpoints) = lessor.poll_due(at(5));
    assert_eq!(
        checkpoints,
        vec![LeaseCheckpoint {
            id: 1,
            remaining_ttl: 25
        }]
    );
    lessor
        .checkpoint(&mut txn, &checkpoints[0], at(5), true)
        .unwrap();
    txn.commit().unwrap();
    // A new leader (here: after a restart) starts from 25 s, not 30 s.
    let mut recovered = Lessor::recover(config, &kv.read().unwrap()).unwrap();
    recovered.promote(at(100));
    let ttl = recovered.time_to_live(1, at(100), false).unwrap();
    assert_eq!(ttl.remaining_secs, 26, "25 s plus the election timeout");
    assert_eq!(ttl.granted_secs, 30);
    // A keep-alive renews to the full TTL and asks to clear the record.
    assert_eq!(
        recovered.renew(1, at(101)),
        Renewal::Renewed {
            ttl_secs: 30,
            clear_checkpoint: true
        }
    );
}

/// A primary lessor with `count` leases of `ttl_secs`, granted at 0.
fn leader_with_leases(count: i64, ttl_secs: i64) -> (MemoryKv, Lessor) {
    let kv = MemoryKv::default();
    let mut lessor = Lessor::recover(LeaseConfig::default(), &kv.read().unwrap()).unwrap();
    lessor.promote(at(0));
    let mut txn = kv.write().unwrap();
    for id in 1..=count {
        lessor
            .grant(&mut txn, id, ttl_secs, at(0))
            .unwrap()
            .unwrap();
    }
    txn.commit().unwrap();
    (kv, lessor)
}

#[test]
fn revokes_are_rate_limited_to_etcds_rate() {
    let (_kv, mut lessor) = leader_with_leases(1_200, 10);
    assert_eq!(lessor.poll_timeout(), Some(at(10)));
    assert_eq!(lessor.poll_due(at(10)).0.len(), 500);
    // The rest waits for the next round, half a second on.
    let next_round = at(10) + Duration::from_millis(500);
    assert_eq!(lessor.poll_timeout(), Some(next_round));
    assert!(lessor
        .poll_due(at(10) + Duration::from_millis(499))
        .0
        .is_empty());
    assert_eq!(lessor.poll_due(next_round).0.len(), 500);
    let last_round = next_round + Duration::from_millis(500);
    assert_eq!(lessor.poll_due(last_round).0.len(), 200);
    // Retries of revokes not applied count against the rate too: the
    // first 500 are retried at 13 s, the next at 13.5 s, both due by
    // 13.5 s; rounds stay half a second apart.
    let retried = at(13) + Duration::from_millis(500);
    assert_eq!(lessor.poll_due(retried).0.len(), 500);
    assert!(lessor
        .poll_due(retried + Duration::from_millis(1))
        .0
        .is_empty());
    assert_eq!(lessor.poll_due(at(14)).0.len(), 500);
}

/// Expiries of the lessor's leases, soonest first.
fn expiries(lessor: &Lessor) -> Vec<Instant> {
    let mut all: Vec<Instant> = lessor.leases.values().filter_map(|l| l.expiry).collect();
    all.sort_unstable();
    all
}

#[test]
fn a_new_leader_spreads_piled_up_expiries() {
    let kv = MemoryKv::default();
    let mut lessor = Lessor::recover(LeaseConfig::default(), &kv.read().unwrap()).unwrap();
    let mut txn = kv.write().unwrap();
    // 2,000 leases that all expire at once on promotion, and 10 more
    // much later, whose window is not crowded.
    for id in 1..=2_000 {
        lessor.grant(&mut txn, id, 10, at(0)).unwrap().unwrap();
    }
    for id in 2_001..=2_010 {
        lessor.grant(&mut txn, id, 100, at(0)).unwrap().unwrap();
    }
    txn.commit().unwrap();
    lessor.promote(at(100));
    // Full TTL plus the election timeout: 111 s, unspread.
    let unspread = at(111);
    let all = expiries(&lessor);
    assert_eq!(all.len(), 2_010);
    assert!(
        all.iter().all(|&e| e >= unspread),
        "a lease expires earlier"
    );
    // Three quarters of the revoke rate stay; the rest follow at that
    // rate: at most 750 in any one-second window.
    assert_eq!(all.iter().filter(|&&e| e == unspread).count(), 750);
    for (i, &start) in all.iter().enumerate() {
        let in_window = all[i..]
            .iter()
            .take_while(|&&e| e < start + Duration::from_secs(1))
            .count();
        assert!(in_window <= 750, "{in_window} expiries from {start:?}");
    }
    // The last of the 2,000 goes 2000/750 s after the first.
    let last_spread = all[1_999].saturating_since(unspread);
    assert!(
        (Duration::from_millis(2_600)..=Duration::from_millis(2_700)).contains(&last_spread),
        "{last_spread:?}"
    );
    // The long leases kept their expiry.
    assert_eq!(all[2_000], at(201));
    assert_eq!(all[2_009], at(201));

    // Fewer leases than a second of revokes are left alone.
    let (_kv, mut few) = leader_with_leases(999, 10);
    few.demote();
    few.promote(at(50));
    assert!(expiries(&few).iter().all(|&e| e == at(61)));
}

#[test]
fn chosen_ids_are_positive_and_skip_taken_ones() {
    let first = choose_id(1, 5, |_| false);
    assert!(first > 0);
    assert_eq!(choose_id(1, 5, |id| id == first), first + 1);
    assert_ne!(choose_id(1, 6, |_| false), first);
}

/// A checkpoint that is never applied (its proposal refused during a
/// leader transfer, or lost with the leader) does not end the lease's
/// checkpoints: the next one is due an interval later all the same. (The
/// node simulator found this: a new leader then started a lease from a
/// remaining TTL several checkpoints old.)
#[test]
fn a_lost_checkpoint_does_not_stop_the_next() {
    let (_, kv, mut lessor) = checkpointing_leader();
    let mut txn = kv.write().unwrap();
    lessor.grant(&mut txn, 1, 60, at(0)).unwrap().unwrap();
    let (_, first) = lessor.poll_due(at(5));
    assert_eq!(first.len(), 1, "{first:?}");
    // Never applied: the next is due five seconds on.
    assert_eq!(lessor.poll_due(at(9)).1, vec![]);
    let (_, second) = lessor.poll_due(at(10));
    assert_eq!(
        second,
        vec![LeaseCheckpoint {
            id: 1,
            remaining_ttl: 50
        }]
    );
    // Applied, it moves the next to an interval after the apply.
    lessor
        .checkpoint(&mut txn, &second[0], at(11), true)
        .unwrap();
    assert_eq!(lessor.poll_due(at(15)).1, vec![]);
    assert_eq!(lessor.poll_due(at(16)).1.len(), 1);
}
