//! The backend's write transaction ([`RedbKvWrite`]): what one apply
//! step writes, committed at once.
//!
//! Design. The transaction holds redb's `revisions` table open from begin
//! to commit ([`OpenTxn`]): opening a table looks it up in redb's table
//! tree and closing it writes its root back, and a put needs the table
//! twice (the live version's lookup, then the insert). Versions go to the
//! table at once and their index changes to an [`Overlay`] that the
//! transaction's own reads merge in; the overlay, the meta record and the
//! bytes in use are published or written at commit (see the parent
//! module for durability and the index).

use std::fmt;
use std::ops::ControlFlow;
use std::time::Instant;

use oxetcd_core::storage::{
    generation_read, version_bytes, Alarms, AuthState, CompactionHash, Generation, KeyVersion,
    KvMeta, KvRead, KvWrite, LeaseRecord, Membership, RangeEnd, Revision, StorageError,
    LEASE_BYTES,
};
use oxetcd_core::version::migration::Step;
use oxetcd_proto::etcdserverpb::AlarmMember;
use redb::{Durability, ReadableTable, TableDefinition, WriteTransaction};

use super::index::{Gen, Overlay};
use super::meta::{
    read_alarms, read_auth, read_commit_seq, read_membership, read_meta, read_used_bytes,
    MetaRecord, ALARMS, AUTH, COMMIT_SEQ, KV_META, MEMBERSHIP, USED_BYTES,
};
use super::used::UsedBytes;
use super::view::{changes, leases, View};
use super::{
    in_file, revision_key, stored_revision, RedbKv, COMPACTION_HASHES_MAX, LEASES, REVISIONS,
};
use crate::codec::{encode_kv_meta, encode_lease, RevisionRecord};
use crate::error::err;
use crate::format::META;
use crate::sealed::{seal, Address};

/// The backend's write transaction. Dropping it without
/// [`KvWrite::commit`] discards its writes.
pub struct RedbKvWrite {
    txn: OpenTxn,
    kv: RedbKv,
    /// Commit sequence of the state this transaction started from.
    seq: u64,
    /// Index changes, published only once the redb commit succeeded.
    overlay: Overlay,
    /// The meta record set by the transaction, written at commit: the apply
    /// step sets it after every request, and one write per batch is enough.
    meta: Option<KvMeta>,
    /// Bytes in use, kept as versions and leases come and go.
    used: UsedBytes,
    /// Hashes recorded by compactions in this transaction, published at
    /// commit.
    compaction_hashes: Vec<CompactionHash>,
    /// Lowest main revision this transaction put or removed (`u64::MAX`:
    /// none), for an online defragmentation.
    lowest: u64,
    /// Commit durably, whatever the cadence says (the membership changed).
    durable: bool,
}

/// The `revisions` table as a write transaction holds it.
type Revisions<'txn> = redb::Table<'txn, u128, &'static [u8]>;

self_cell::self_cell!(
    /// A write transaction with its `revisions` table open from begin to
    /// commit (see the module note).
    struct OpenTxn {
        owner: WriteTransaction,
        #[not_covariant]
        dependent: Revisions,
    }
);

impl fmt::Debug for RedbKvWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbKvWrite")
            .field("commit_seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl RedbKvWrite {
    /// Begins the backend's write transaction (`KvStore::write`).
    pub(super) fn begin(kv: &RedbKv) -> Result<Self, StorageError> {
        let in_file = |e: StorageError| e.in_file(kv.shared.path.display());
        let txn = kv
            .db()
            .begin_write()
            .map_err(err("kv write"))
            .map_err(in_file)?;
        let (seq, used_bytes) = {
            let meta = txn
                .open_table(META)
                .map_err(err("kv write"))
                .map_err(in_file)?;
            let seq = read_commit_seq(&meta).map_err(in_file)?;
            (seq, read_used_bytes(&meta).map_err(in_file)?)
        };
        // The previous writer publishes its index changes just after its
        // redb commit, which already let this transaction begin.
        kv.shared.index.wait_for(seq)?;
        let txn = OpenTxn::try_new(txn, |txn| txn.open_table(REVISIONS))
            .map_err(err("kv write"))
            .map_err(in_file)?;
        Ok(RedbKvWrite {
            txn,
            kv: kv.clone(),
            seq,
            overlay: Overlay::default(),
            meta: None,
            used: UsedBytes::new(used_bytes),
            compaction_hashes: Vec::new(),
            lowest: u64::MAX,
            durable: false,
        })
    }

    fn view<'a, T>(&'a self, revisions: &'a T) -> View<'a, T> {
        View {
            index: &self.kv.shared.index,
            seq: self.seq,
            overlay: Some(&self.overlay),
            revisions,
        }
    }

    /// `result`, a damaged record's error naming the backend file.
    fn named<T>(&self, result: Result<T, StorageError>) -> Result<T, StorageError> {
        in_file(&self.kv.shared.path, result)
    }

    /// Writes one meta record now (the membership, auth or alarms).
    fn write_record(
        &mut self,
        record: MetaRecord,
        payload: &[u8],
        what: &'static str,
    ) -> Result<(), StorageError> {
        let mut table = self
            .txn
            .borrow_owner()
            .open_table(META)
            .map_err(err(what))?;
        record.write(&mut table, payload, what)
    }

    /// One of the backend's tables, as this transaction sees it.
    fn table<K: redb::Key + 'static>(
        &self,
        table: TableDefinition<K, &'static [u8]>,
    ) -> Result<redb::Table<'_, K, &'static [u8]>, StorageError> {
        let txn = self.txn.borrow_owner();
        self.named(txn.open_table(table).map_err(err("kv read")))
    }

    fn meta_table(&self) -> Result<redb::Table<'_, &'static str, &'static [u8]>, StorageError> {
        self.table(META)
    }

    /// [`KvWrite::put_version`], its errors not yet naming the file.
    fn put_stored_version(&mut self, version: &KeyVersion) -> Result<(), StorageError> {
        let rev = stored_revision(version.mod_revision).ok_or_else(|| {
            StorageError::invariant(format_args!(
                "kv put: negative revision {:?}",
                version.mod_revision
            ))
        })?;
        let record = RevisionRecord {
            key: &version.key,
            create_revision: version.create_revision,
            version: version.version,
            lease: version.lease,
            tombstone: version.tombstone,
            value: &version.value,
        }
        .encode(revision_key(rev));
        self.lowest = self.lowest.min(rev.0);
        let used = &mut self.used;
        let clashed = self.txn.with_dependent_mut(|_, table| {
            // One B-tree operation in the common case: the replaced record,
            // if any, is checked after the fact and put back if it was
            // another key's.
            let clash = match table
                .insert(revision_key(rev), record.as_slice())
                .map_err(err("kv put"))?
            {
                Some(old) => {
                    let old = old.value();
                    let replaced = RevisionRecord::decode(old, revision_key(rev))?;
                    if replaced.key == version.key.as_slice() {
                        used.count(
                            false,
                            version_bytes(replaced.key.len(), replaced.value.len()),
                        );
                        None
                    } else {
                        Some(old.to_vec())
                    }
                }
                None => None,
            };
            if let Some(old) = &clash {
                table
                    .insert(revision_key(rev), old.as_slice())
                    .map_err(err("kv put"))?;
            }
            Ok::<_, StorageError>(clash.is_some())
        })?;
        if clashed {
            return Err(StorageError::invariant(format_args!(
                "kv put: revision {:?} already holds another key",
                version.mod_revision
            )));
        }
        let gen = Gen::new(version.create_revision, version.version, version.tombstone);
        self.overlay.put(&version.key, rev, gen);
        self.used
            .count(true, version_bytes(version.key.len(), version.value.len()));
        Ok(())
    }

    /// [`KvWrite::remove_version`], its errors not yet naming the file.
    fn remove_stored_version(
        &mut self,
        key: &[u8],
        revision: Revision,
    ) -> Result<(), StorageError> {
        let Some(rev) = stored_revision(revision) else {
            return Ok(()); // never stored
        };
        let owned = self.txn.with_dependent_mut(|_, table| {
            let owned = match table.get(revision_key(rev)).map_err(err("kv remove"))? {
                Some(bytes) => {
                    let record = RevisionRecord::decode(bytes.value(), revision_key(rev))?;
                    (record.key == key).then(|| version_bytes(record.key.len(), record.value.len()))
                }
                None => None,
            };
            if owned.is_some() {
                table.remove(revision_key(rev)).map_err(err("kv remove"))?;
            }
            Ok::<_, StorageError>(owned)
        })?;
        if let Some(bytes) = owned {
            self.lowest = self.lowest.min(rev.0);
            self.used.count(false, bytes);
            self.overlay.remove(key, rev);
        }
        Ok(())
    }
}

impl KvRead for RedbKvWrite {
    fn meta(&self) -> Result<KvMeta, StorageError> {
        match self.meta {
            Some(meta) => Ok(meta),
            None => self.named(read_meta(&self.meta_table()?)),
        }
    }

    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let scanned = self
            .txn
            .with_dependent(|_, table| self.view(table).scan(start, end, at, visit));
        self.named(scanned)
    }

    fn generation(&self, key: &[u8], at: i64) -> Result<Option<Generation>, StorageError> {
        let Ok(stored_at) = u64::try_from(at) else {
            return Ok(None); // nothing is stored below revision 0
        };
        let newest = self
            .kv
            .shared
            .index
            .newest(key, self.seq, stored_at, Some(&self.overlay))?;
        match newest {
            None => Ok(None),
            // Damaged at open: the read is refused.
            Some((_, gen)) if gen == Gen::UNKNOWN => generation_read(self, key, at),
            Some((_, gen)) => Ok((gen.version > 0).then_some(Generation {
                create_revision: gen.create,
                version: gen.version,
            })),
        }
    }

    fn versions(
        &self,
        key: &[u8],
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let visited = self
            .txn
            .with_dependent(|_, table| self.view(table).versions(key, visit));
        self.named(visited)
    }

    fn changes(
        &self,
        from: i64,
        to: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let visited = self
            .txn
            .with_dependent(|_, table| changes(table, from, to, visit));
        self.named(visited)
    }

    fn leases(
        &self,
        visit: &mut dyn FnMut(LeaseRecord) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        let table = self.table(LEASES)?;
        self.named(leases(&table, visit))
    }

    fn membership(&self) -> Result<Option<Membership>, StorageError> {
        self.named(read_membership(&self.meta_table()?))
    }

    fn auth(&self) -> Result<Option<AuthState>, StorageError> {
        self.named(read_auth(&self.meta_table()?))
    }

    fn alarms(&self) -> Result<Alarms, StorageError> {
        self.named(read_alarms(&self.meta_table()?))
    }

    fn used_bytes(&self) -> Result<u64, StorageError> {
        Ok(self.used.bytes)
    }
}

impl KvWrite for RedbKvWrite {
    fn migrate(&mut self, steps: &[Step]) -> Result<(), StorageError> {
        const WHAT: &str = "kv migrate";
        for step in steps {
            match *step {
                Step::AddTable(name) => {
                    self.txn
                        .borrow_owner()
                        .open_table(TableDefinition::<&[u8], &[u8]>::new(name))
                        .map_err(err(WHAT))?;
                }
                Step::DropTable(name) => {
                    self.txn
                        .borrow_owner()
                        .delete_table(TableDefinition::<&[u8], &[u8]>::new(name))
                        .map_err(err(WHAT))?;
                }
                Step::DropMetaKey(key) => {
                    let mut table = self
                        .txn
                        .borrow_owner()
                        .open_table(META)
                        .map_err(err(WHAT))?;
                    table.remove(key).map_err(err(WHAT))?;
                }
            }
        }
        Ok(())
    }

    fn put_version(&mut self, version: &KeyVersion) -> Result<(), StorageError> {
        let result = self.put_stored_version(version);
        self.named(result)
    }

    fn remove_version(&mut self, key: &[u8], revision: Revision) -> Result<(), StorageError> {
        let result = self.remove_stored_version(key, revision);
        self.named(result)
    }

    fn put_lease(&mut self, lease: &LeaseRecord) -> Result<(), StorageError> {
        let mut table = self
            .txn
            .borrow_owner()
            .open_table(LEASES)
            .map_err(err("kv lease"))?;
        let sealed = seal(Address::Lease(lease.id), &encode_lease(lease));
        let replaced = table
            .insert(lease.id, sealed.as_slice())
            .map_err(err("kv lease"))?
            .is_some();
        drop(table);
        if !replaced {
            self.used.count(true, LEASE_BYTES);
        }
        Ok(())
    }

    fn remove_lease(&mut self, id: i64) -> Result<(), StorageError> {
        let mut table = self
            .txn
            .borrow_owner()
            .open_table(LEASES)
            .map_err(err("kv lease"))?;
        let removed = table.remove(id).map_err(err("kv lease"))?.is_some();
        drop(table);
        if removed {
            self.used.count(false, LEASE_BYTES);
        }
        Ok(())
    }

    fn set_meta(&mut self, meta: &KvMeta) -> Result<(), StorageError> {
        self.meta = Some(*meta);
        Ok(())
    }

    fn set_membership(&mut self, membership: &Membership) -> Result<(), StorageError> {
        // Durable: a member replaying its log after a crash finds the
        // members where they were, whatever its flags say now.
        self.durable = true;
        self.write_record(MEMBERSHIP, &membership.encode(), "kv membership")
    }

    fn set_auth(&mut self, auth: &AuthState) -> Result<(), StorageError> {
        self.write_record(AUTH, &auth.encode(), "kv auth")
    }

    fn set_alarms(&mut self, alarms: &[AlarmMember]) -> Result<(), StorageError> {
        let payload = oxetcd_core::storage::encode_alarms(alarms);
        self.write_record(ALARMS, &payload, "kv alarms")
    }

    fn commit(self) -> Result<(), StorageError> {
        let Self {
            txn,
            kv,
            seq,
            overlay,
            meta,
            used,
            compaction_hashes,
            lowest,
            durable,
        } = self;
        // Closes `revisions`, writing its root back, before the commit.
        let mut txn = txn.into_owner();
        let (used_bytes, used_bytes_changed) = (used.bytes, used.changed);
        let changes_index = !overlay.is_empty();
        let seq = seq + 1;
        if changes_index || meta.is_some() || used_bytes_changed {
            let mut table = txn.open_table(META).map_err(err("kv commit"))?;
            if used_bytes_changed {
                USED_BYTES.write(&mut table, &used_bytes.to_le_bytes(), "kv commit")?;
            }
            if let Some(meta) = meta {
                KV_META.write(&mut table, &encode_kv_meta(&meta), "kv commit")?;
            }
            if changes_index {
                COMMIT_SEQ.write(&mut table, &seq.to_le_bytes(), "kv commit")?;
            }
        }
        let durable = durable || kv.cadence().is_due(Instant::now());
        let durability = if durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        txn.set_durability(durability).map_err(err("kv commit"))?;
        // Held across the commit, so that a defragmentation's snapshot
        // either shows this commit or finds it recorded.
        let recorded = (lowest != u64::MAX).then(|| kv.shared.dirty_from.record(lowest));
        let started = Instant::now();
        txn.commit().map_err(err("kv commit"))?;
        let committed = Instant::now();
        drop(recorded);
        kv.cadence().record(durable, committed);
        if let Some(observe) = kv.shared.commit_observer.get() {
            observe(committed - started);
        }
        if changes_index {
            kv.shared.index.publish(seq, overlay)?;
        }
        if let Some(kept) = kv.kept_hashes().as_mut() {
            for hash in compaction_hashes {
                kept.push_front(hash);
                kept.truncate(COMPACTION_HASHES_MAX);
            }
        }
        Ok(())
    }

    fn before_compaction(&mut self, meta: &KvMeta, revision: i64) -> Result<(), StorageError> {
        if self.kv.kept_hashes().is_none() {
            return Ok(());
        }
        match crate::bolt::hash::hash_kv_at(&*self, meta, revision) {
            Ok(hashed) => self.compaction_hashes.push(CompactionHash {
                hash: hashed.hash,
                compact_revision: hashed.compact_revision,
                revision,
            }),
            Err(oxetcd_core::Error::Storage(e)) => return Err(e),
            // A revision the compaction itself refuses: nothing to keep.
            Err(_) => {}
        }
        Ok(())
    }
}
