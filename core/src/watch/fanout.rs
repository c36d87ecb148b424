//! Fan-out: the events of each applied revision, to every synced watcher
//! that wants some.
//!
//! When the apply step writes revision `R`, each synced watcher whose range
//! holds a changed key gets one [`WatchDelivery`] with every event of `R`
//! it wants — a revision (a txn) is never split — with `prev_kv` read from
//! the write transaction at `R - 1`. The events are built once per distinct
//! selection and shared by every watcher that wants it; a stream's
//! deliveries of a whole apply batch leave as one `Output::WatchEvents`,
//! released after the batch commits, in revision order. A revision of one
//! change, the common case, takes a shorter path with no grouping.
//!
//! Invariants, asserted in debug builds: a watcher catching up gets no live
//! events, and a watcher's deliveries go out in revision order.

use std::collections::BTreeMap;
use std::sync::Arc;

use oxetcd_proto::etcdserverpb::ResponseHeader;

use super::delivery::mark_shared;
use super::event::{event, is_create, previous};
use super::ranges::Contains;
use super::registry::{Watcher, WatcherKey};
use super::{RevisionEvents, StreamId, WatchDelivery, WatchRegistry};
use crate::storage::{KeyVersion, KvRead, StorageError};
use crate::Output;

impl WatchRegistry {
    /// The apply step wrote `changes` as revision `revision` (through
    /// `view`, which sees them): every synced watcher that wants some gets
    /// a delivery, held until [`WatchRegistry::flush_events`].
    pub(crate) fn on_revision(
        &mut self,
        revision: i64,
        changes: &[KeyVersion],
        view: &dyn KvRead,
        header: ResponseHeader,
    ) -> Result<(), StorageError> {
        debug_assert!(
            self.pending
                .values()
                .filter_map(|deliveries| deliveries.last())
                .all(|delivery| delivery.revision() < revision),
            "revision {revision} delivered after a later one"
        );
        if self.watchers.is_empty() || changes.is_empty() {
            return Ok(());
        }
        if let [change] = changes {
            return self.on_single_change(revision, change, view, header);
        }
        let (mut takes, wants_prev) = self.takes(revision, changes);
        if takes.is_empty() {
            return Ok(());
        }
        let mut prevs = Vec::with_capacity(changes.len());
        for (change, wanted) in changes.iter().zip(&wants_prev) {
            prevs.push(if *wanted && !is_create(change) {
                previous(view, &change.key, revision - 1)?
            } else {
                None
            });
        }
        // Grouped by watcher (and so by stream), changes in sub-revision
        // order within each.
        takes.sort_unstable();
        let (keys, selections): (Vec<WatcherKey>, Vec<usize>) = takes.into_iter().unzip();
        let header = ResponseHeader { revision, ..header };
        let mut shared: BTreeMap<(&[usize], bool), Arc<RevisionEvents>> = BTreeMap::new();
        let mut start = 0;
        while start < keys.len() {
            let key = keys[start];
            let end = start + keys[start..].iter().take_while(|k| **k == key).count();
            let selection = &selections[start..end];
            start = end;
            let Some(watcher) = self.watchers.get_mut(&key) else {
                continue;
            };
            let with_prev = watcher.spec.prev_kv;
            let events = shared
                .entry((selection, with_prev))
                .or_insert_with(|| {
                    let events = selection
                        .iter()
                        .map(|&i| {
                            let prev = if with_prev { prevs[i].clone() } else { None };
                            event(changes[i].clone(), prev)
                        })
                        .collect();
                    Arc::new(RevisionEvents::new(header, events))
                })
                .clone();
            watcher.took(revision);
            self.pending
                .entry(key.0)
                .or_default()
                .push(WatchDelivery::new(key.1, events, watcher.spec.fragment));
        }
        Ok(())
    }

    /// Which watcher takes which of `changes` (by index), and which changes
    /// some watcher wants with their previous version.
    fn takes(
        &self,
        revision: i64,
        changes: &[KeyVersion],
    ) -> (Vec<(WatcherKey, usize)>, Vec<bool>) {
        let mut takes = Vec::new();
        let mut wants_prev = vec![false; changes.len()];
        for (index, change) in changes.iter().enumerate() {
            let candidates = self
                .by_key
                .get(&change.key)
                .into_iter()
                .flatten()
                .chain(self.ranged.iter());
            for key in candidates {
                let Some(watcher) = self.watchers.get(key) else {
                    continue;
                };
                if watcher.wants(revision, change) {
                    wants_prev[index] |= watcher.spec.prev_kv;
                    takes.push((*key, index));
                }
            }
        }
        (takes, wants_prev)
    }

    /// [`WatchRegistry::on_revision`] for a revision of one change (a put,
    /// or a delete of one key), the common case. Every watcher that wants
    /// it takes the same event, with or without `prev_kv`, so one pass over
    /// the candidates in watcher order suffices: no grouping, no sorting,
    /// one lookup per watcher and one per stream.
    fn on_single_change(
        &mut self,
        revision: i64,
        change: &KeyVersion,
        view: &dyn KvRead,
        header: ResponseHeader,
    ) -> Result<(), StorageError> {
        let Self {
            watchers,
            by_key,
            ranged,
            pending,
            ..
        } = self;
        let header = ResponseHeader { revision, ..header };
        let mut plain: Option<Arc<RevisionEvents>> = None;
        let mut with_prev: Option<Arc<RevisionEvents>> = None;
        // The deliveries of one stream in a row, added to `pending` at once.
        let mut current: Option<StreamId> = None;
        let mut run: Vec<WatchDelivery> = Vec::new();
        let mut contains = Contains::default();
        let mut take = |key: WatcherKey, watcher: &mut Watcher| -> Result<(), StorageError> {
            if !watcher.wants_in(revision, change, &mut contains) {
                return Ok(());
            }
            let shared = if watcher.spec.prev_kv {
                &mut with_prev
            } else {
                &mut plain
            };
            let events = match shared {
                Some(events) => events.clone(),
                None => {
                    let prev = if watcher.spec.prev_kv && !is_create(change) {
                        previous(view, &change.key, revision - 1)?
                    } else {
                        None
                    };
                    let events = Arc::new(RevisionEvents::new(
                        header,
                        vec![event(change.clone(), prev)],
                    ));
                    *shared = Some(events.clone());
                    events
                }
            };
            watcher.took(revision);
            let delivery = WatchDelivery::new(key.1, events, watcher.spec.fragment);
            if current != Some(key.0) {
                if let Some(stream) = current {
                    pending.entry(stream).or_default().append(&mut run);
                }
                current = Some(key.0);
            }
            run.push(delivery);
            Ok(())
        };
        // Both walks visit the candidates in watcher order. When most
        // watchers watch ranges, walking them all is cheaper than a search
        // per candidate; `contains` skips single-key watchers of other keys.
        if ranged.len().saturating_mul(2) >= watchers.len() {
            for (key, watcher) in watchers.iter_mut() {
                take(*key, watcher)?;
            }
        } else {
            let point = by_key.get(&change.key).into_iter().flatten();
            for key in Merged::new(point, ranged.iter()) {
                if let Some(watcher) = watchers.get_mut(key) {
                    take(*key, watcher)?;
                }
            }
        }
        if let Some(stream) = current {
            pending.entry(stream).or_default().append(&mut run);
        }
        Ok(())
    }

    /// The apply batch committed: one output per stream with every
    /// delivery of the batch.
    pub(crate) fn flush_events(&mut self, outputs: &mut impl Extend<Output>) {
        let pending = std::mem::take(&mut self.pending);
        outputs.extend(pending.into_iter().map(|(stream, mut deliveries)| {
            mark_shared(&mut deliveries);
            Output::WatchEvents { stream, deliveries }
        }));
    }
}

/// Two ascending iterators of distinct items as one ascending iterator.
struct Merged<A: Iterator, B: Iterator> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<A: Iterator, B: Iterator<Item = A::Item>> Merged<A, B> {
    fn new(a: A, b: B) -> Self {
        Self {
            a: a.peekable(),
            b: b.peekable(),
        }
    }
}

impl<T: Ord, A: Iterator<Item = T>, B: Iterator<Item = T>> Iterator for Merged<A, B> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if b < a => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}
