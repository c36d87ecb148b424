//! Fuzzing what storage reads from files it did not write itself: etcd's
//! WAL files (an etcd data directory being imported) and bolt databases
//! (etcd's backend, and snapshot files from anyone). Any bytes give
//! records or an error, never a panic; a bolt file that opens is walked
//! whole (`snapshot status`) and imported.

use std::ops::ControlFlow;

use oxetcd_core::memory::MemoryKv;
use oxetcd_core::storage::{
    AuthState, KeyVersion, KvMeta, KvStore, KvWrite, LeaseRecord, Revision,
};
use protobuf::Message as _;
use raft_proto::eraftpb::{Entry, HardState};

use crate::bolt::{etcd, BoltReader};
use crate::etcd_wal::{self, tests::frame};

fn etcd_wal_seeds() -> Vec<Vec<u8>> {
    let mut crc = 0;
    let mut file = Vec::new();
    file.extend(frame(etcd_wal::CRC_TYPE, &[], &mut crc));
    file.extend(frame(etcd_wal::METADATA_TYPE, &[8, 1, 16, 2], &mut crc));
    for index in 1..=3u64 {
        let entry = Entry {
            index,
            term: 1,
            data: vec![index as u8; 20].into(),
            ..Default::default()
        };
        let bytes = entry.write_to_bytes().expect("an entry encodes");
        file.extend(frame(etcd_wal::ENTRY_TYPE, &bytes, &mut crc));
    }
    let state = HardState {
        term: 1,
        vote: 1,
        commit: 3,
        ..Default::default()
    };
    let bytes = state.write_to_bytes().expect("a hard state encodes");
    file.extend(frame(etcd_wal::STATE_TYPE, &bytes, &mut crc));
    vec![file]
}

#[test]
fn fuzz_etcd_wal_file() {
    let ran = oxetcd_fuzz::fuzz("etcd-wal-file", &etcd_wal_seeds(), |bytes| {
        for last in [true, false] {
            let mut crc = 0;
            let _ = etcd_wal::decode_file(bytes, &mut crc, last);
        }
    });
    assert!(ran > 0);
}

/// A small backend's bolt image: versions (a deletion among them), a
/// lease, a user.
fn bolt_seed() -> Vec<u8> {
    let kv = MemoryKv::default();
    let mut write = kv.write().expect("write");
    for (i, key) in ["a", "b", "a", "c"].iter().enumerate() {
        let main = i as i64 + 2;
        write
            .put_version(&KeyVersion {
                key: key.as_bytes().to_vec(),
                mod_revision: Revision { main, sub: 0 },
                create_revision: main,
                version: 1,
                lease: 0,
                value: vec![b'v'; 10],
                tombstone: i == 3,
            })
            .expect("put");
    }
    write
        .put_lease(&LeaseRecord {
            id: 7,
            ttl_secs: 60,
            remaining_ttl_secs: 0,
        })
        .expect("lease");
    write
        .set_auth(&AuthState {
            users: vec![oxetcd_proto::authpb::User {
                name: b"u".to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .expect("auth");
    write
        .set_meta(&KvMeta {
            applied_index: 9,
            applied_term: 1,
            revision: 5,
            compact_revision: -1,
        })
        .expect("meta");
    write.commit().expect("commit");
    let image = etcd::image(kv.read().expect("read"), "3.6.0", 4096).expect("image");
    image
        .map(|chunk| chunk.expect("chunk"))
        .fold(Vec::new(), |mut all, chunk| {
            all.extend_from_slice(&chunk);
            all
        })
}

#[test]
fn fuzz_bolt_file() {
    let seed = bolt_seed();
    // The seed itself opens, walks and imports.
    let reader = BoltReader::open(seed.clone()).expect("the seed opens");
    etcd::status(&reader).expect("the seed walks");
    let ran = oxetcd_fuzz::fuzz("bolt-file", &[seed], |bytes| {
        let Ok(reader) = BoltReader::open(bytes.to_vec()) else {
            return;
        };
        let _ = etcd::status(&reader);
        let kv = MemoryKv::default();
        if let Ok(mut write) = kv.write() {
            if etcd::import(&reader, &mut write).is_ok() {
                let _ = write.commit();
                if let Ok(view) = kv.read() {
                    let _ = oxetcd_core::storage::KvRead::changes(&view, 0, i64::MAX, &mut |_| {
                        ControlFlow::Continue(())
                    });
                }
            }
        }
    });
    assert!(ran > 0);
}
