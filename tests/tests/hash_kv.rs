//! `HashKV` as etcd computes it: the same history gives the same hash on
//! oxetcd, oxetcd-smol and Debian's etcd, at the current revision and at
//! older ones, across overwrites, deletions and a compaction; a compacted
//! or future revision gets etcd's error.

use oxetcd_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest, PutRequest};
use oxetcd_tests::{Grpc, Server, ServerKind};

fn put(client: &mut Grpc, key: &str, value: &str) {
    client
        .put(PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            ..Default::default()
        })
        .expect("put");
}

/// Writes one fixed history (revisions 2 to 13, a compaction at 6) and
/// returns the hashes at 0, 7, 10 and 13 with the compact revision, and
/// the errors asked for revisions 5 and 99.
fn history(kind: ServerKind) -> (Vec<(u32, i64, i64)>, String, String) {
    let server = Server::start(kind).unwrap_or_else(|e| panic!("{e}"));
    let mut client = Grpc::connect(server.endpoint()).unwrap_or_else(|e| panic!("{e}"));
    for k in 0..4 {
        put(&mut client, &format!("k{k}"), "first");
    }
    put(&mut client, "k1", "second");
    client
        .delete_range(DeleteRangeRequest {
            key: b"k2".to_vec(),
            ..Default::default()
        })
        .expect("delete");
    client
        .compact(CompactionRequest {
            revision: 6,
            physical: true,
        })
        .expect("compact");
    for k in 0..6 {
        put(&mut client, &format!("k{}", k % 3), &format!("later {k}"));
    }
    client
        .delete_range(DeleteRangeRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            ..Default::default()
        })
        .expect("delete all");
    let hashes = [0, 7, 10, 13]
        .into_iter()
        .map(|revision| {
            let answer = client.hash_kv(revision).expect("hash_kv");
            let header = answer.header.expect("header");
            (answer.hash, answer.compact_revision, header.revision)
        })
        .collect();
    let compacted = format!("{:?}", client.hash_kv(5).expect_err("compacted"));
    let future = format!("{:?}", client.hash_kv(99).expect_err("future"));
    (hashes, compacted, future)
}

#[test]
fn the_same_history_hashes_as_etcds() {
    let etcd = history(ServerKind::Etcd);
    assert_eq!(etcd.0.len(), 4);
    assert!(etcd
        .0
        .iter()
        .all(|(_, compact, revision)| *compact == 6 && *revision == 14));
    assert!(etcd.1.contains("compacted"), "{}", etcd.1);
    assert!(etcd.2.contains("future revision"), "{}", etcd.2);
    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        assert_eq!(history(kind), etcd, "{} against etcd", kind.name());
    }
}
