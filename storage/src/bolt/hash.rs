//! `HashKV`: etcd's hash of the key space up to a revision, which members
//! of one cluster compare to find a diverged member.
//!
//! Design. etcd hashes its `key` bucket as it stores it: CRC-32C over the
//! bucket's name, then over each stored version's key (the revision
//! encoding, with the deletion mark) and value (`mvccpb.KeyValue`, a
//! deletion being its key alone), in revision order, up to the revision
//! asked for. The same bytes come from oxetcd's versions through the
//! snapshot writer's encoding ([`super::etcd`]), so two members holding
//! the same history give the same hash, and so does an etcd member
//! holding it.
//!
//! Compacted history follows etcd's rule to the letter: a version at or
//! below the compaction revision counts only if it is its key's live
//! version at the revision hashed (etcd's `keep` set), and when no key is
//! live then, every stored version counts. So the hash is a function of
//! the history alone, on any member.
//!
//! `Hash` ([`hash_backend`]) is etcd's hash of the whole backend. etcd's
//! runs over its bolt file's buckets, a layout ours does not share; ours
//! hashes what the backend holds that every member applied alike: every
//! stored version (as `HashKV` encodes it, compacted ones gone), then
//! each lease, the auth store and the alarms. The applied index and the
//! membership's publication details are left out, as etcd leaves out its
//! consistent index: members with equal data answer equal hashes, before
//! and after a restart.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use oxetcd_core::storage::{KvMeta, KvRead, Revision};
use oxetcd_core::Error;
use prost::Message as _;

use super::etcd::{key_value, revision_key, KEY_BUCKET};
use crate::crc32c::Crc32c;

/// A `HashKV` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvHash {
    /// CRC-32C of the key space up to `revision`.
    pub hash: u32,
    /// The revision of the last compaction.
    pub compact_revision: i64,
    /// The view's current revision (the response header's).
    pub revision: i64,
}

/// The hash of `view`'s key space up to revision `at` (0: the current
/// revision), with etcd's errors for a revision compacted or not yet
/// written.
pub fn hash_kv<R: KvRead>(view: &R, at: i64) -> Result<KvHash, Error> {
    hash_kv_at(view, &view.meta()?, at)
}

/// [`hash_kv`] of a view whose meta record is `meta` (a write transaction
/// in the middle of an apply batch has not stored its meta yet).
pub fn hash_kv_at<R: KvRead>(view: &R, meta: &KvMeta, at: i64) -> Result<KvHash, Error> {
    let upto = if at == 0 { meta.revision } else { at };
    if at > meta.revision {
        return Err(Error::FutureRevision);
    }
    if at > 0 && at <= meta.compact_revision {
        return Err(Error::Compacted);
    }
    let keep = live_at(view, upto)?;
    let mut crc = Crc32c::default();
    crc.update(KEY_BUCKET);
    view.changes(0, upto, &mut |version| {
        let compacted = version.mod_revision.main <= meta.compact_revision;
        if compacted && !keep.is_empty() && !keep.contains(&version.mod_revision) {
            return ControlFlow::Continue(());
        }
        crc.update(&revision_key(version.mod_revision, version.tombstone));
        crc.update(&key_value(&version).encode_to_vec());
        ControlFlow::Continue(())
    })?;
    Ok(KvHash {
        hash: crc.sum(),
        compact_revision: meta.compact_revision,
        revision: meta.revision,
    })
}

/// etcd's `Hash`: CRC-32C of everything the backend holds that members
/// apply alike (see the module's design); returns it with the view's
/// revision.
pub fn hash_backend<R: KvRead>(view: &R) -> Result<(u32, i64), Error> {
    let meta = view.meta()?;
    let mut crc = Crc32c::default();
    crc.update(KEY_BUCKET);
    view.changes(0, meta.revision, &mut |version| {
        crc.update(&revision_key(version.mod_revision, version.tombstone));
        crc.update(&key_value(&version).encode_to_vec());
        ControlFlow::Continue(())
    })?;
    crc.update(b"lease");
    view.leases(&mut |lease| {
        crc.update(&lease.id.to_be_bytes());
        crc.update(&lease.ttl_secs.to_be_bytes());
        crc.update(&lease.remaining_ttl_secs.to_be_bytes());
        ControlFlow::Continue(())
    })?;
    crc.update(b"auth");
    if let Some(auth) = view.auth()? {
        crc.update(&auth.encode());
    }
    crc.update(b"alarm");
    crc.update(&oxetcd_core::storage::encode_alarms(&view.alarms()?));
    crc.update(&meta.compact_revision.to_be_bytes());
    Ok((crc.sum(), meta.revision))
}

/// The revision of each key's live version at `at`: its latest version
/// up to `at`, unless that is a deletion.
fn live_at<R: KvRead>(view: &R, at: i64) -> Result<HashSet<Revision>, Error> {
    let mut latest: HashMap<Vec<u8>, (Revision, bool)> = HashMap::new();
    view.changes(0, at, &mut |version| {
        latest.insert(version.key, (version.mod_revision, version.tombstone));
        ControlFlow::Continue(())
    })?;
    Ok(latest
        .into_values()
        .filter(|(_, tombstone)| !tombstone)
        .map(|(revision, _)| revision)
        .collect())
}

#[cfg(test)]
mod tests {
    use oxetcd_core::memory::MemoryKv;
    use oxetcd_core::storage::{KeyVersion, KvMeta, KvStore, KvWrite, Revision};

    use super::*;

    fn put(kv: &MemoryKv, key: &str, main: i64, tombstone: bool) {
        let mut txn = kv.write().unwrap();
        txn.put_version(&KeyVersion {
            key: key.as_bytes().to_vec(),
            value: if tombstone { Vec::new() } else { b"v".to_vec() },
            create_revision: main,
            mod_revision: Revision { main, sub: 0 },
            version: 1,
            lease: 0,
            tombstone,
        })
        .unwrap();
        let meta = txn.meta().unwrap();
        txn.set_meta(&KvMeta {
            revision: main,
            ..meta
        })
        .unwrap();
        txn.commit().unwrap();
    }

    #[test]
    fn same_history_same_hash_and_each_revision_counts() {
        let (a, b) = (MemoryKv::default(), MemoryKv::default());
        for kv in [&a, &b] {
            put(kv, "x", 2, false);
            put(kv, "y", 3, false);
        }
        let ha = hash_kv(&a.read().unwrap(), 0).unwrap();
        assert_eq!(ha, hash_kv(&b.read().unwrap(), 0).unwrap());
        assert_eq!(ha.revision, 3);
        let at2 = hash_kv(&a.read().unwrap(), 2).unwrap();
        assert_ne!(at2.hash, ha.hash, "revision 3 is left out at 2");
        put(&b, "y", 4, true);
        assert_eq!(hash_kv(&b.read().unwrap(), 3).unwrap().hash, ha.hash);
        assert_ne!(hash_kv(&b.read().unwrap(), 0).unwrap().hash, ha.hash);
        assert_eq!(hash_kv(&b.read().unwrap(), 9), Err(Error::FutureRevision));
    }

    #[test]
    fn the_backend_hash_follows_data_and_alarms_not_the_applied_index() {
        let (a, b) = (MemoryKv::default(), MemoryKv::default());
        for kv in [&a, &b] {
            put(kv, "x", 2, false);
        }
        let ha = hash_backend(&a.read().unwrap()).unwrap();
        let mut txn = b.write().unwrap();
        let meta = txn.meta().unwrap();
        txn.set_meta(&KvMeta {
            applied_index: 99,
            ..meta
        })
        .unwrap();
        txn.commit().unwrap();
        assert_eq!(ha, hash_backend(&b.read().unwrap()).unwrap());
        let mut txn = b.write().unwrap();
        txn.set_alarms(&[oxetcd_proto::etcdserverpb::AlarmMember {
            member_id: 1,
            alarm: 1,
        }])
        .unwrap();
        txn.commit().unwrap();
        assert_ne!(ha.0, hash_backend(&b.read().unwrap()).unwrap().0);
        put(&a, "y", 3, false);
        assert_ne!(ha.0, hash_backend(&a.read().unwrap()).unwrap().0);
    }
}
