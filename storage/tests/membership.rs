//! The membership record: written in a backend transaction beside the
//! applied index, seen by that transaction and by later readers only once
//! committed, and kept across closing and reopening the database — the same
//! as core's in-memory backend.

use oxetcd_core::memory::MemoryKv;
use oxetcd_core::storage::{KvMeta, KvRead, KvStore, KvWrite, Membership, VersionRecord};
use oxetcd_proto::eraftpb::ConfState;
use oxetcd_proto::etcdserverpb::Member;
use oxetcd_proto::oxetcdpb::{DowngradeInfoSet, MemberVersion};
use oxetcd_storage::RedbKv;

fn membership() -> Membership {
    Membership {
        conf_state: ConfState {
            voters: vec![1, 2],
            learners: vec![3],
            ..Default::default()
        },
        members: vec![Member {
            id: 1,
            name: "m1".into(),
            peer_ur_ls: vec!["http://m1:2380".into()],
            client_ur_ls: vec![],
            is_learner: false,
        }],
        versions: VersionRecord {
            members: vec![MemberVersion {
                id: 1,
                server_version: "3.6.0".into(),
            }],
            cluster: "3.5.0".into(),
            downgrade: Some(DowngradeInfoSet {
                enabled: true,
                target_version: "3.5.0".into(),
            }),
            storage: "3.5.0".into(),
        },
    }
}

fn exercise<K: KvStore>(kv: &K) {
    assert_eq!(kv.read().unwrap().membership().unwrap(), None);
    let mut txn = kv.write().unwrap();
    txn.set_membership(&membership()).unwrap();
    let meta = KvMeta {
        applied_index: 7,
        ..txn.meta().unwrap()
    };
    txn.set_meta(&meta).unwrap();
    assert_eq!(txn.membership().unwrap(), Some(membership()));
    assert_eq!(
        kv.read().unwrap().membership().unwrap(),
        None,
        "uncommitted"
    );
    txn.commit().unwrap();
    let view = kv.read().unwrap();
    assert_eq!(view.membership().unwrap(), Some(membership()));
    assert_eq!(view.meta().unwrap().applied_index, 7);
}

#[test]
fn redb_membership_matches_memory_and_survives_reopen() {
    exercise(&MemoryKv::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    exercise(&RedbKv::open(&path).unwrap());
    let reopened = RedbKv::open(&path).unwrap();
    assert_eq!(
        reopened.read().unwrap().membership().unwrap(),
        Some(membership())
    );
}
