//! The write buffer of one request: its changes, held back from the backend
//! until the whole request has succeeded, and readable in the meantime.
//!
//! A request is one revision: every change is stamped `begin + 1` with the
//! next sub revision. Reads at `begin + 1` see the base merged with the
//! buffered changes; reads at or before `begin` go to the base alone. This is
//! what lets a failed request leave the backend untouched, and lets reads
//! inside a txn see the txn's earlier writes.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use crate::storage::{Generation, KeyVersion, KvRead, RangeEnd, Revision, StorageError};

use super::range::Snapshot;

/// Buffered changes on top of a read view.
pub(crate) struct WriteBuffer<'a, R: ?Sized> {
    base: &'a R,
    /// The store's revision before this request.
    begin: i64,
    compacted: i64,
    /// The changes, in sub revision order.
    changes: Vec<KeyVersion>,
    /// For each changed key, the index of its newest change.
    newest: BTreeMap<Vec<u8>, usize>,
}

impl<'a, R: KvRead + ?Sized> WriteBuffer<'a, R> {
    pub(crate) fn new(base: &'a R, begin: i64, compacted: i64) -> Self {
        Self {
            base,
            begin,
            compacted,
            changes: Vec::new(),
            newest: BTreeMap::new(),
        }
    }

    /// The revision before this request.
    pub(crate) fn begin(&self) -> i64 {
        self.begin
    }

    /// True once something was written.
    pub(crate) fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    /// The buffered changes, in order, to store.
    pub(crate) fn into_changes(self) -> Vec<KeyVersion> {
        self.changes
    }

    /// The live version of `key` as this request sees it now.
    pub(crate) fn live(&self, key: &[u8]) -> Result<Option<KeyVersion>, StorageError> {
        let mut found = None;
        super::range::visit_live(self, key, &[], self.current_revision(), &mut |version| {
            found = Some(version);
            ControlFlow::Break(())
        })?;
        Ok(found)
    }

    /// Where `key` stands in its generation as this request leaves it so
    /// far: a put needs no more of the live version than this.
    fn generation(&self, key: &[u8]) -> Result<Option<Generation>, StorageError> {
        match self.newest.get(key) {
            Some(&index) => Ok(Generation::of(&self.changes[index])),
            None => self.base.generation(key, self.begin),
        }
    }

    /// Writes `value` to `key`, continuing the key's generation if it is live.
    pub(crate) fn put(
        &mut self,
        key: &[u8],
        value: Vec<u8>,
        lease: i64,
    ) -> Result<(), StorageError> {
        let main = self.begin + 1;
        let (create_revision, version) = match self.generation(key)? {
            Some(previous) => (previous.create_revision, previous.version + 1),
            None => (main, 1),
        };
        self.push(KeyVersion {
            key: key.to_vec(),
            mod_revision: Revision {
                main,
                sub: self.changes.len() as i64,
            },
            create_revision,
            version,
            lease,
            value,
            tombstone: false,
        });
        Ok(())
    }

    /// Writes a tombstone for `key`, which must be live.
    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.push(KeyVersion {
            key: key.to_vec(),
            mod_revision: Revision {
                main: self.begin + 1,
                sub: self.changes.len() as i64,
            },
            tombstone: true,
            ..KeyVersion::default()
        });
    }

    fn push(&mut self, version: KeyVersion) {
        self.newest.insert(version.key.clone(), self.changes.len());
        self.changes.push(version);
    }
}

impl<R: KvRead + ?Sized> Snapshot for WriteBuffer<'_, R> {
    fn current_revision(&self) -> i64 {
        if self.changed() {
            self.begin + 1
        } else {
            self.begin
        }
    }

    fn compact_revision(&self) -> i64 {
        self.compacted
    }

    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        if at <= self.begin || !self.changed() {
            return self.base.scan(start, end, at, visit);
        }
        // Merge the base at `begin` with the newest buffered change per key;
        // both are in key order.
        let mut base = Vec::new();
        self.base.scan(start, end, self.begin, &mut |version| {
            base.push(version);
            ControlFlow::Continue(())
        })?;
        let upper = match end {
            RangeEnd::Before(end) if end <= start => return Ok(()),
            RangeEnd::Before(end) => Bound::Excluded(end),
            RangeEnd::Unbounded => Bound::Unbounded,
        };
        let mut buffered = self
            .newest
            .range::<[u8], _>((Bound::Included(start), upper))
            .map(|(_, &index)| &self.changes[index])
            .peekable();
        let mut base = base.into_iter().peekable();
        loop {
            let next = match (base.peek(), buffered.peek()) {
                (None, None) => return Ok(()),
                (Some(_), None) => base.next(),
                (None, Some(_)) => buffered.next().cloned(),
                (Some(b), Some(c)) => match b.key.cmp(&c.key) {
                    std::cmp::Ordering::Less => base.next(),
                    std::cmp::Ordering::Greater => buffered.next().cloned(),
                    std::cmp::Ordering::Equal => {
                        base.next();
                        buffered.next().cloned()
                    }
                },
            };
            if let Some(version) = next {
                if visit(version).is_break() {
                    return Ok(());
                }
            }
        }
    }
}
