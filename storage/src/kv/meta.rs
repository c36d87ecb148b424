//! The backend's `meta` records: their keys, what each held before
//! checksums, and reading and writing them through the checksummed
//! envelope (module `sealed`).
//!
//! Design. Every record of the `meta` table but the two every database
//! file carries (format version and contents, module `format`) is sealed
//! when written and checked when read, so a damaged applied index,
//! membership or auth record is refused, never acted on. A checksum cannot
//! speak for a record that is not found, though: a flipped bit in a key
//! would hide its record, and a hidden applied index would read as a fresh
//! store's. So at open every key of the table must be one that a storage
//! version's schema (`oxetcd_core::version::migration`) names; any other is
//! refused as damage before a default record is written in its place.
//! Records written before checksums are sealed at open, once each decodes
//! ([`seal_old_records`]), so each is read unchecked at most once.

use oxetcd_core::storage::{decode_alarms, Alarms, AuthState, KvMeta, Membership, StorageError};
use oxetcd_core::version::migration::SCHEMAS;
use redb::{ReadableTable, Table};

use crate::codec::{decode_kv_meta, decode_u64};
use crate::error::{err, refusing_engine_panics};
use crate::sealed::{seal, unseal, Address, Shape};

/// One kind of `meta` record: its key, and its payload's shape before
/// checksums (which tells an old record from a sealed one).
#[derive(Clone, Copy, Debug)]
pub(super) struct MetaRecord {
    pub(super) key: &'static str,
    shape: Shape,
}

/// [`KvMeta`]: applied index and term, revision, compact revision; four
/// LE words.
pub(super) const KV_META: MetaRecord = MetaRecord {
    key: "kv_meta",
    shape: Shape::Fixed(32),
};
/// The commit sequence of the last commit that changed the key index, so
/// that a snapshot knows which index changes it contains; LE u64.
pub(super) const COMMIT_SEQ: MetaRecord = MetaRecord {
    key: "kv_commit_seq",
    shape: Shape::Fixed(8),
};
/// The bytes in use (core's `KvRead::used_bytes`); LE u64.
pub(super) const USED_BYTES: MetaRecord = MetaRecord {
    key: "kv_used_bytes",
    shape: Shape::Fixed(8),
};
/// The membership with the cluster and storage versions
/// ([`Membership::encode`]), written in the apply transaction that
/// changes it, beside the applied index.
pub(super) const MEMBERSHIP: MetaRecord = MetaRecord {
    key: "membership",
    shape: Shape::Message,
};
/// The auth store ([`AuthState::encode`]), written in the apply
/// transaction that changes it.
pub(super) const AUTH: MetaRecord = MetaRecord {
    key: "auth",
    shape: Shape::Message,
};
/// The active alarms (core's `encode_alarms`).
pub(super) const ALARMS: MetaRecord = MetaRecord {
    key: "alarms",
    shape: Shape::Message,
};

/// The `meta` table as the backend reads it.
pub(super) trait MetaTable: ReadableTable<&'static str, &'static [u8]> {}

impl<T: ReadableTable<&'static str, &'static [u8]>> MetaTable for T {}

impl MetaRecord {
    /// The record's payload, checked, handed to `decode`; `None` when
    /// there is no record.
    pub(super) fn read<T>(
        &self,
        table: &impl MetaTable,
        decode: impl FnOnce(&[u8]) -> Result<T, StorageError>,
    ) -> Result<Option<T>, StorageError> {
        let address = Address::Meta(self.key);
        let stored = refusing_engine_panics(address, || {
            let stored = table.get(self.key).map_err(err("kv read"))?;
            Ok(stored.map(|stored| stored.value().to_vec()))
        })?;
        match stored {
            Some(stored) => decode(unseal(address, self.shape, &stored)?).map(Some),
            None => Ok(None),
        }
    }

    /// Stores `payload` as the record, sealed; `during` names the
    /// operation in an error.
    pub(super) fn write(
        &self,
        table: &mut Table<'_, &'static str, &'static [u8]>,
        payload: &[u8],
        during: &'static str,
    ) -> Result<(), StorageError> {
        if let Shape::Fixed(len) = self.shape {
            assert_eq!(
                payload.len(),
                len,
                "meta record {:?}: payload size",
                self.key
            );
        }
        let sealed = seal(Address::Meta(self.key), payload);
        table
            .insert(self.key, sealed.as_slice())
            .map_err(err(during))?;
        Ok(())
    }
}

/// The meta record of a fresh store: revision 1 and never compacted, as etcd.
pub(super) const FRESH_META: KvMeta = KvMeta {
    applied_index: 0,
    applied_term: 0,
    revision: 1,
    compact_revision: -1,
};

pub(super) fn read_meta(table: &impl MetaTable) -> Result<KvMeta, StorageError> {
    Ok(KV_META.read(table, decode_kv_meta)?.unwrap_or(FRESH_META))
}

pub(super) fn read_commit_seq(table: &impl MetaTable) -> Result<u64, StorageError> {
    let seq = COMMIT_SEQ.read(table, |bytes| decode_u64("kv commit sequence", bytes))?;
    Ok(seq.unwrap_or(0))
}

pub(super) fn read_used_bytes(table: &impl MetaTable) -> Result<u64, StorageError> {
    let used = USED_BYTES.read(table, |bytes| decode_u64("bytes-in-use", bytes))?;
    Ok(used.unwrap_or(0))
}

pub(super) fn read_membership(table: &impl MetaTable) -> Result<Option<Membership>, StorageError> {
    MEMBERSHIP.read(table, Membership::decode)
}

pub(super) fn read_auth(table: &impl MetaTable) -> Result<Option<AuthState>, StorageError> {
    AUTH.read(table, AuthState::decode)
}

pub(super) fn read_alarms(table: &impl MetaTable) -> Result<Alarms, StorageError> {
    Ok(ALARMS.read(table, decode_alarms)?.unwrap_or_default())
}

/// Seals each record written before checksums that decodes, so that from
/// this open on it is checked when read: a sealed record cannot turn into
/// an unchecked one by a single flipped bit (see module `sealed`), while
/// an old one could pass for another old one. A record that does not
/// decode, or a damaged sealed one, is left for its reader to refuse. Run
/// at open, in the transaction that makes the tables.
pub(super) fn seal_old_records(
    table: &mut Table<'_, &'static str, &'static [u8]>,
) -> Result<(), redb::Error> {
    type Decodes = fn(&Table<'_, &'static str, &'static [u8]>) -> bool;
    let records: [(MetaRecord, Decodes); 6] = [
        (KV_META, |t| read_meta(t).is_ok()),
        (COMMIT_SEQ, |t| read_commit_seq(t).is_ok()),
        (USED_BYTES, |t| read_used_bytes(t).is_ok()),
        (MEMBERSHIP, |t| read_membership(t).is_ok()),
        (AUTH, |t| read_auth(t).is_ok()),
        (ALARMS, |t| read_alarms(t).is_ok()),
    ];
    for (record, decodes) in records {
        let address = Address::Meta(record.key);
        let Some(stored) = table.get(record.key)?.map(|s| s.value().to_vec()) else {
            continue;
        };
        // Sealing adds bytes: a payload as long as the record is all of it.
        let old = unseal(address, record.shape, &stored).is_ok_and(|p| p.len() == stored.len());
        if old && decodes(table) {
            table.insert(record.key, seal(address, &stored).as_slice())?;
        }
    }
    Ok(())
}

/// Refuses a `meta` table with a key no storage version's schema names
/// (see the module note): the damage is in the file, so it is redb's
/// `Corrupted`, which the open reports naming the file.
pub(super) fn check_keys(table: &impl MetaTable) -> Result<(), redb::Error> {
    for row in table.iter()? {
        let (key, _) = row?;
        let key = key.value();
        let known = SCHEMAS.iter().any(|schema| schema.meta_keys.contains(&key));
        if !known {
            return Err(redb::Error::Corrupted(format!(
                "unknown meta record {key:?} (the backend file is damaged)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;
    use std::path::Path;

    use oxetcd_core::storage::{encode_alarms, KvRead, KvStore, KvWrite, LeaseRecord};
    use oxetcd_proto::etcdserverpb::{AlarmMember, Member};
    use redb::{Database, ReadableDatabase};

    use super::*;
    use crate::codec::{encode_kv_meta, encode_lease};
    use crate::format::META;
    use crate::kv::{RedbKv, LEASES};

    /// Every record kind of the `meta` table this module writes.
    const RECORDS: [MetaRecord; 6] = [KV_META, COMMIT_SEQ, USED_BYTES, MEMBERSHIP, AUTH, ALARMS];

    /// Every record this module writes is one the storage schema names,
    /// so the check at open never refuses what the backend wrote.
    #[test]
    fn every_record_is_in_the_schema() {
        for record in RECORDS {
            assert!(
                SCHEMAS.iter().all(|s| s.meta_keys.contains(&record.key)),
                "{}",
                record.key
            );
        }
    }

    fn membership() -> Membership {
        Membership {
            members: vec![Member {
                id: 0x1234,
                name: "one".into(),
                peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
                ..Member::default()
            }],
            ..Membership::default()
        }
    }

    fn auth() -> AuthState {
        AuthState {
            enabled: true,
            revision: 4,
            ..AuthState::default()
        }
    }

    const ALARM: AlarmMember = AlarmMember {
        member_id: 0x1234,
        alarm: 1,
    };

    const LEASE: LeaseRecord = LeaseRecord {
        id: 7,
        ttl_secs: 60,
        remaining_ttl_secs: 30,
    };

    const APPLIED: KvMeta = KvMeta {
        applied_index: 9,
        applied_term: 2,
        revision: 1,
        compact_revision: -1,
    };

    /// A backend at `path` whose meta records and lease are written as
    /// they were before checksums.
    fn write_old_records(path: &Path) {
        drop(RedbKv::open(path).unwrap());
        let db = Database::open(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert(KV_META.key, encode_kv_meta(&APPLIED).as_slice())
                .unwrap();
            meta.insert(COMMIT_SEQ.key, 0u64.to_le_bytes().as_slice())
                .unwrap();
            meta.insert(USED_BYTES.key, 32u64.to_le_bytes().as_slice())
                .unwrap();
            meta.insert(MEMBERSHIP.key, membership().encode().as_slice())
                .unwrap();
            meta.insert(AUTH.key, auth().encode().as_slice()).unwrap();
            meta.insert(ALARMS.key, encode_alarms(&[ALARM]).as_slice())
                .unwrap();
            let mut leases = txn.open_table(LEASES).unwrap();
            leases
                .insert(LEASE.id, encode_lease(&LEASE).as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
    }

    fn leases(read: &impl KvRead) -> Vec<LeaseRecord> {
        let mut leases = Vec::new();
        read.leases(&mut |lease| {
            leases.push(lease);
            ControlFlow::Continue(())
        })
        .unwrap();
        leases
    }

    /// The stored bytes of every meta record `kv` holds.
    fn stored_meta(kv: &RedbKv) -> Vec<(&'static str, Vec<u8>)> {
        let db = kv.db();
        let txn = db.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        RECORDS
            .iter()
            .filter_map(|r| Some((r.key, meta.get(r.key).unwrap()?.value().to_vec())))
            .collect()
    }

    /// Records written before checksums read as they were, and the open
    /// seals them: each is stored with its tag and checksum after it.
    #[test]
    fn records_written_before_checksums_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        write_old_records(&path);
        let kv = RedbKv::open(&path).unwrap();
        let stored = stored_meta(&kv);
        assert_eq!(stored.len(), RECORDS.len());
        for (key, bytes) in stored {
            assert_eq!(bytes.first(), Some(&0xa5), "{key} sealed");
            let record = RECORDS.iter().find(|r| r.key == key).unwrap();
            let payload = unseal(Address::Meta(key), record.shape, &bytes).unwrap();
            assert_eq!(payload.len() + crate::sealed::SEAL_BYTES, bytes.len());
        }
        let read = kv.read().unwrap();
        assert_eq!(read.meta().unwrap(), APPLIED);
        assert_eq!(read.membership().unwrap(), Some(membership()));
        assert_eq!(read.auth().unwrap(), Some(auth()));
        assert_eq!(read.alarms().unwrap(), vec![ALARM]);
        assert_eq!(read.used_bytes().unwrap(), 32);
        assert_eq!(leases(&read), vec![LEASE]);
        drop(read);
        let mut txn = kv.write().unwrap();
        txn.set_meta(&KvMeta {
            applied_index: 10,
            ..APPLIED
        })
        .unwrap();
        txn.set_membership(&membership()).unwrap();
        txn.put_lease(&LEASE).unwrap();
        txn.commit().unwrap();
        let read = kv.read().unwrap();
        assert_eq!(read.meta().unwrap().applied_index, 10);
        assert_eq!(read.membership().unwrap(), Some(membership()));
        assert_eq!(leases(&read), vec![LEASE]);
        let db = kv.db();
        let txn = db.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        let stored = meta.get(KV_META.key).unwrap().unwrap();
        assert_eq!(
            stored.value().len(),
            32 + crate::sealed::SEAL_BYTES,
            "sealed"
        );
    }

    /// An old record that does not decode is not sealed at open (that
    /// would vouch for it): it stays as it is, and its reader refuses it.
    #[test]
    fn an_old_record_that_does_not_decode_is_left_to_its_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        write_old_records(&path);
        // Field 1, five bytes long, but one byte follows.
        let broken = [0x0a, 0x05, 0x01];
        {
            let db = Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META)
                .unwrap()
                .insert(MEMBERSHIP.key, broken.as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        let kv = RedbKv::open(&path).unwrap();
        let stored = stored_meta(&kv);
        let membership = stored.iter().find(|(key, _)| *key == MEMBERSHIP.key);
        assert_eq!(
            membership.map(|(_, b)| b.as_slice()),
            Some(broken.as_slice())
        );
        assert!(kv.read().unwrap().membership().is_err());
        // The others were sealed.
        let auth = stored.iter().find(|(key, _)| *key == AUTH.key).unwrap();
        assert_eq!(auth.1.first(), Some(&0xa5));
    }

    /// Flips one bit of the stored record `key` of the closed backend at
    /// `path`.
    fn flip_meta_bit(path: &Path, key: &str, at: usize) {
        let db = Database::open(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            let mut stored = meta.get(key).unwrap().unwrap().value().to_vec();
            stored[at / 8] ^= 1 << (at % 8);
            meta.insert(key, stored.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }

    /// A damaged applied index or membership record is refused at read,
    /// naming the file and the record; never served.
    #[test]
    fn a_damaged_meta_record_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        {
            let kv = RedbKv::open(&path).unwrap();
            let mut txn = kv.write().unwrap();
            txn.set_meta(&APPLIED).unwrap();
            txn.set_membership(&membership()).unwrap();
            txn.set_auth(&auth()).unwrap();
            txn.commit().unwrap();
            kv.sync().unwrap();
        }
        for (key, at) in [(KV_META.key, 8), (MEMBERSHIP.key, 3), (AUTH.key, 0)] {
            flip_meta_bit(&path, key, at);
            let kv = RedbKv::open(&path).unwrap();
            let read = kv.read().unwrap();
            let error = match key {
                "kv_meta" => read.meta().unwrap_err(),
                "membership" => read.membership().unwrap_err(),
                _ => read.auth().unwrap_err(),
            };
            let text = error.to_string();
            let prefix = format!("{}: corrupt meta record {key:?}: ", path.display());
            assert!(text.starts_with(&prefix), "{text}");
            assert!(text.contains("damaged"), "{text}");
            drop((read, kv));
            flip_meta_bit(&path, key, at);
        }
        // Undamaged again.
        let kv = RedbKv::open(&path).unwrap();
        assert_eq!(kv.read().unwrap().meta().unwrap(), APPLIED);
    }

    /// A flipped bit in a record's key is refused at open: the record
    /// would otherwise be missed, and a missed applied index read as a
    /// fresh store's.
    #[test]
    fn an_unknown_meta_key_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        {
            let kv = RedbKv::open(&path).unwrap();
            let mut txn = kv.write().unwrap();
            txn.set_meta(&APPLIED).unwrap();
            txn.commit().unwrap();
        }
        {
            let db = Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut meta = txn.open_table(META).unwrap();
                let stored = meta.remove(KV_META.key).unwrap().unwrap().value().to_vec();
                meta.insert("kv_mdta", stored.as_slice()).unwrap();
            }
            txn.commit().unwrap();
        }
        let error = RedbKv::open(&path).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("{}: ", path.display())),
            "{error}"
        );
        assert!(error.contains("unknown meta record \"kv_mdta\""), "{error}");
    }

    /// Every meta record and lease of `kv` is sealed, besides the format
    /// version and contents every database carries.
    fn assert_all_sealed(kv: &RedbKv) {
        use crate::sealed::{is_sealed, Address};
        let db = kv.db();
        let txn = db.begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        let mut sealed = 0;
        for row in meta.iter().unwrap() {
            let (key, value) = row.unwrap();
            let key = key.value();
            if key == "format_version" || key == "contents" {
                continue;
            }
            assert!(is_sealed(Address::Meta(key), value.value()), "{key}");
            sealed += 1;
        }
        assert!(sealed >= 4, "{sealed} meta records");
        let leases = txn.open_table(LEASES).unwrap();
        for row in leases.iter().unwrap() {
            let (id, value) = row.unwrap();
            assert!(is_sealed(Address::Lease(id.value()), value.value()));
        }
    }

    /// A backend holding every kind of meta record and a lease.
    fn source(path: &Path) -> RedbKv {
        let kv = RedbKv::open(path).unwrap();
        let mut txn = kv.write().unwrap();
        txn.set_meta(&APPLIED).unwrap();
        txn.set_membership(&membership()).unwrap();
        txn.set_auth(&auth()).unwrap();
        txn.set_alarms(&[ALARM]).unwrap();
        txn.put_lease(&LEASE).unwrap();
        txn.commit().unwrap();
        kv
    }

    /// A backend restored from an oxetcd snapshot, or imported from an
    /// etcd backend, holds sealed records only: both write through the
    /// backend's own transaction.
    #[test]
    fn restored_and_imported_records_are_sealed() {
        use crate::bolt::{etcd, BoltReader};
        use crate::snapshot::{import, SnapshotExport};

        let dir = tempfile::tempdir().unwrap();
        let source = source(&dir.path().join("source.redb"));
        assert_all_sealed(&source);

        let mut stream = Vec::new();
        for chunk in SnapshotExport::new(source.read().unwrap(), 1024) {
            stream.extend_from_slice(&chunk.unwrap());
        }
        let restored = RedbKv::open(&dir.path().join("restored.redb")).unwrap();
        let mut txn = restored.write().unwrap();
        import(&mut txn, stream.as_slice()).unwrap();
        txn.commit().unwrap();
        assert_all_sealed(&restored);
        assert_eq!(
            restored.read().unwrap().membership().unwrap(),
            Some(membership())
        );

        let mut image = Vec::new();
        for chunk in etcd::image(source.read().unwrap(), "3.6.0", 4096).unwrap() {
            image.extend_from_slice(&chunk.unwrap());
        }
        let reader = BoltReader::open(image).unwrap();
        let imported = RedbKv::open(&dir.path().join("imported.redb")).unwrap();
        let mut txn = imported.write().unwrap();
        etcd::import(&reader, &mut txn).unwrap();
        txn.commit().unwrap();
        assert_all_sealed(&imported);
        assert_eq!(imported.read().unwrap().auth().unwrap(), Some(auth()));
    }
}
