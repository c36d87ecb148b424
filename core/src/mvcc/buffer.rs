//! The write buffer of one request: its changes, held back from the backend
//! until the whole request has succeeded, and readable in the meantime.
//!
//! A request is one revision: every change is stamped `begin + 1` with the
//! next sub revision. Reads at `begin + 1` see the base merged with the
//! buffered changes; reads at or before `begin` go to the base alone. This is
//! what lets a failed request leave the backend untouched, and lets reads
//! inside a txn see the txn's earlier writes.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow, RangeBounds};

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
    /// For each changed key, the index of its newest change, once there
    /// are more than [`SEARCHED_CHANGES_MAX`] changes; fewer (a put has
    /// one) are searched in place, which spares a copy of each key.
    newest: BTreeMap<Vec<u8>, usize>,
}

/// Changes a request may hold before they are indexed by key.
const SEARCHED_CHANGES_MAX: usize = 8;

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
        match self.newest_change(key) {
            Some(change) => Ok(Generation::of(change)),
            None => self.base.generation(key, self.begin),
        }
    }

    /// This request's newest change of `key`, if it changed it.
    fn newest_change(&self, key: &[u8]) -> Option<&KeyVersion> {
        if self.changes.len() <= SEARCHED_CHANGES_MAX {
            self.changes.iter().rev().find(|change| change.key == key)
        } else {
            self.newest.get(key).map(|&index| &self.changes[index])
        }
    }

    /// Writes `value` to `key`, continuing the key's generation if it is live.
    pub(crate) fn put(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    ) -> Result<(), StorageError> {
        let main = self.begin + 1;
        let (create_revision, version) = match self.generation(&key)? {
            Some(previous) => (previous.create_revision, previous.version + 1),
            None => (main, 1),
        };
        self.push(KeyVersion {
            key,
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
        self.changes.push(version);
        let count = self.changes.len();
        if count <= SEARCHED_CHANGES_MAX {
            return;
        }
        // Past the bound: index the changes so far (once), then each one.
        let first = if count == SEARCHED_CHANGES_MAX + 1 {
            0
        } else {
            count - 1
        };
        for (index, change) in self.changes.iter().enumerate().skip(first) {
            self.newest.insert(change.key.clone(), index);
        }
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
        let in_range = (Bound::Included(start), upper);
        let buffered: Vec<&KeyVersion> = if self.changes.len() <= SEARCHED_CHANGES_MAX {
            let mut newest = BTreeMap::new();
            for change in self
                .changes
                .iter()
                .filter(|c| RangeBounds::<[u8]>::contains(&in_range, &c.key[..]))
            {
                newest.insert(&change.key[..], change);
            }
            newest.into_values().collect()
        } else {
            self.newest
                .range::<[u8], _>(in_range)
                .map(|(_, &index)| &self.changes[index])
                .collect()
        };
        let mut buffered = buffered.into_iter().peekable();
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::ControlFlow;

    use super::*;
    use crate::memory::MemoryKv;
    use crate::storage::{KvStore, KvWrite};

    /// A request of `count` changes over few keys (the first key changed
    /// once, the others put again and some deleted), read back through the
    /// buffer, below and past the bound at which its changes are indexed by
    /// key: every read agrees with the newest change of each key over the
    /// base's keys, and each put continues its key's generation.
    #[test]
    fn reads_see_the_newest_change_of_each_key_at_any_count() {
        let kv = MemoryKv::default();
        let mut txn = kv.write().expect("a write");
        let mut meta = txn.meta().expect("meta");
        let base_keys = [b"b".to_vec(), b"d".to_vec(), b"x".to_vec()];
        for key in &base_keys {
            let buffer_base = &txn;
            let begin = meta.revision;
            let mut buffer = WriteBuffer::new(buffer_base, begin, 0);
            buffer.put(key.to_vec(), b"base".to_vec(), 0).expect("put");
            let changes = buffer.into_changes();
            for version in &changes {
                txn.put_version(version).expect("stored");
            }
            meta.revision = begin + 1;
            txn.set_meta(&meta).expect("meta");
        }
        let once = b"0".to_vec();
        let keys: Vec<Vec<u8>> = ["a", "b", "d"].map(|k| k.as_bytes().to_vec()).into();
        for count in 1..=(2 * SEARCHED_CHANGES_MAX + 3) {
            let mut buffer = WriteBuffer::new(&txn, meta.revision, 0);
            // The model: each key's newest value and version, `None` once
            // deleted.
            let mut model: BTreeMap<Vec<u8>, Option<(Vec<u8>, i64)>> = base_keys
                .iter()
                .map(|k| (k.clone(), Some((b"base".to_vec(), 1))))
                .collect();
            for i in 0..count {
                let key = if i == 0 { &once } else { &keys[i % keys.len()] };
                let version = model.get(key).cloned().flatten().map(|(_, v)| v);
                if i % 4 == 3 && version.is_some() {
                    buffer.delete(key);
                    model.insert(key.clone(), None);
                } else {
                    let value = format!("v{i}").into_bytes();
                    buffer.put(key.to_vec(), value.clone(), 0).expect("put");
                    model.insert(key.clone(), Some((value, version.unwrap_or(0) + 1)));
                }
            }
            for key in keys.iter().chain(&base_keys).chain([&once]) {
                let want = model.get(key).cloned().flatten();
                let got = buffer
                    .live(key)
                    .expect("live")
                    .map(|v| (v.value, v.version));
                assert_eq!(got, want, "count {count}, key {key:?}");
            }
            for (start, end) in [("a", Some("c")), ("b", None), ("c", Some("y")), ("", None)] {
                let end_bytes = end.map(str::as_bytes);
                let mut seen = Vec::new();
                let range_end = match end_bytes {
                    Some(end) => RangeEnd::Before(end),
                    None => RangeEnd::Unbounded,
                };
                let at = buffer.current_revision();
                buffer
                    .scan(start.as_bytes(), range_end, at, &mut |version| {
                        if !version.tombstone {
                            seen.push((version.key, version.value));
                        }
                        ControlFlow::Continue(())
                    })
                    .expect("scan");
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| {
                        k.as_slice() >= start.as_bytes()
                            && end_bytes.is_none_or(|end| k.as_slice() < end)
                    })
                    .filter_map(|(k, v)| Some((k.clone(), v.clone()?.0)))
                    .collect();
                assert_eq!(seen, want, "count {count}, range {start:?}..{end:?}");
            }
        }
    }
}
