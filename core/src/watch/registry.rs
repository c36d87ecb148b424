//! The registry: every watcher of the node, by stream and by key, and the
//! requests that create and cancel them.
//!
//! A watcher is named by `(stream, watch_id)`. Single-key watchers are
//! indexed by key, range watchers kept apart (checked one by one), so a
//! revision finds its candidates without a walk over every watcher
//! ([`super::fanout`]). A watcher is either synced — it gets live events as
//! revisions are applied — or catching up from storage
//! ([`super::catch_up`]), never both; its stream counts the ones catching
//! up, which gates the answers to progress requests ([`super::progress`]).
//!
//! Invariants, asserted in debug builds: a watcher is in its stream's set
//! and in exactly one index (by key, or ranged) as its spec says; a
//! stream's count of catching-up watchers is exact; a synced watcher has
//! been sent every revision it wants up to the current one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{ResponseHeader, WatchCreateRequest, WatchRequest, WatchResponse};

use super::ranges::{Contains, RangeId, Ranges};
use super::{StreamId, WatchDelivery, WatchSpec, NO_WATCH_ID};
use crate::storage::KeyVersion;
use crate::{Instant, Output};

/// Why a create request is refused (etcd's message, in `cancel_reason`).
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";

/// One watcher in the registry.
#[derive(Debug)]
pub(super) struct Watcher {
    pub(super) spec: WatchSpec,
    /// Shared by the watchers of the same range (see [`Ranges`]).
    pub(super) range: RangeId,
    pub(super) progress_notify: bool,
    pub(super) catching_up: bool,
    /// The first revision this watcher has not been given (or, for one
    /// created with a future start revision, the first it wants).
    pub(super) next_revision: i64,
    /// Events went out since the last periodic progress round.
    pub(super) recently_notified: bool,
}

impl Watcher {
    /// A synced watcher not yet given `revision` wants `change` of it.
    pub(super) fn wants(&self, revision: i64, change: &KeyVersion) -> bool {
        self.wants_in(revision, change, &mut Contains::default())
    }

    /// [`Watcher::wants`], with the range's answer remembered in
    /// `contains` for the next watcher of the same range.
    pub(super) fn wants_in(
        &self,
        revision: i64,
        change: &KeyVersion,
        contains: &mut Contains,
    ) -> bool {
        !self.catching_up
            && self.next_revision <= revision
            && self.spec.wants(change.tombstone)
            && contains.check(self.range, &self.spec, &change.key)
    }

    /// The watcher was given its events of `revision`: the next it gets is
    /// a later one.
    pub(super) fn took(&mut self, revision: i64) {
        debug_assert!(
            !self.catching_up && self.next_revision <= revision,
            "revision {revision} given to a watcher catching up or past it (next {})",
            self.next_revision
        );
        self.next_revision = revision + 1;
        self.recently_notified = true;
    }
}

/// One stream's bookkeeping.
#[derive(Debug, Default)]
pub(super) struct Stream {
    /// Next automatically chosen watch ID (etcd counts from 0).
    pub(super) next_id: i64,
    pub(super) watchers: BTreeSet<i64>,
    pub(super) catching_up: usize,
    /// `RequestProgress` requests waiting for the stream's watchers to
    /// sync, each to be answered.
    pub(super) progress_requests: u32,
}

pub(super) type WatcherKey = (StreamId, i64);

/// Every watcher of the node.
#[derive(Debug)]
pub(crate) struct WatchRegistry {
    pub(super) watchers: BTreeMap<WatcherKey, Watcher>,
    pub(super) streams: BTreeMap<StreamId, Stream>,
    /// Single-key watchers by key.
    pub(super) by_key: BTreeMap<Vec<u8>, BTreeSet<WatcherKey>>,
    /// Watchers of a range (checked one by one).
    pub(super) ranged: BTreeSet<WatcherKey>,
    /// The ranges watched, by id.
    pub(super) ranges: Ranges,
    pub(super) progress_interval: Duration,
    /// Next periodic progress round, while any watcher asked for it.
    pub(super) next_progress: Option<Instant>,
    /// Deliveries of the apply batch under way, per stream, in revision
    /// order; drained by [`WatchRegistry::flush_events`] after it commits.
    pub(super) pending: BTreeMap<StreamId, Vec<WatchDelivery>>,
    /// Watchers catching up, over every stream (for metrics, read every
    /// round: kept rather than summed).
    pub(super) catching_up: usize,
}

/// The node's state a watch operation needs.
pub(crate) struct Context<'a> {
    pub(crate) now: Instant,
    /// Header with the node's current revision.
    pub(crate) header: ResponseHeader,
    pub(crate) outputs: &'a mut VecDeque<Output>,
}

impl WatchRegistry {
    /// An empty registry; periodic progress every `progress_interval`.
    pub(crate) fn new(progress_interval: Duration) -> Self {
        Self {
            watchers: BTreeMap::new(),
            streams: BTreeMap::new(),
            by_key: BTreeMap::new(),
            ranged: BTreeSet::new(),
            ranges: Ranges::default(),
            progress_interval,
            next_progress: None,
            pending: BTreeMap::new(),
            catching_up: 0,
        }
    }

    /// Number of watchers (all streams).
    #[allow(dead_code)]
    pub(crate) fn len(&self) -> usize {
        self.watchers.len()
    }

    /// Watchers, those of them catching up, and streams, for metrics.
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        (
            self.watchers.len() as u64,
            self.catching_up as u64,
            self.streams.len() as u64,
        )
    }

    /// One request from a client's stream.
    pub(crate) fn handle_request(
        &mut self,
        stream: StreamId,
        request: WatchRequest,
        cx: &mut Context<'_>,
    ) {
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(stream, &create, cx),
            // Canceling an unknown watcher answers nothing, as etcd 3.4.
            Some(RequestUnion::CancelRequest(cancel)) if self.remove((stream, cancel.watch_id)) => {
                let response = WatchResponse {
                    header: Some(cx.header),
                    watch_id: cancel.watch_id,
                    canceled: true,
                    ..Default::default()
                };
                emit(cx, stream, response, false);
                self.release_progress(stream, cx);
            }
            Some(RequestUnion::CancelRequest(_)) => {}
            Some(RequestUnion::ProgressRequest(_)) => self.request_progress(stream, cx),
            None => {}
        }
    }

    /// The client's stream is gone: so are its watchers.
    pub(crate) fn handle_closed(&mut self, stream: StreamId) {
        let Some(state) = self.streams.remove(&stream) else {
            return;
        };
        for id in state.watchers {
            self.unindex((stream, id));
        }
        self.debug_assert_registry();
    }

    /// Answers a create request that registers nothing, as etcd answers
    /// it: created and cancelled at once, with `reason`.
    pub(crate) fn refuse_create(stream: StreamId, reason: &str, cx: &mut Context<'_>) {
        let response = WatchResponse {
            header: Some(cx.header),
            watch_id: NO_WATCH_ID,
            created: true,
            canceled: true,
            cancel_reason: reason.to_owned(),
            ..Default::default()
        };
        emit(cx, stream, response, false);
    }

    /// Creates a watcher, synced (no start revision, or a future one) or
    /// catching up from its start revision; refuses an empty range or a
    /// watch ID the stream already uses.
    fn create(&mut self, stream: StreamId, create: &WatchCreateRequest, cx: &mut Context<'_>) {
        let current = cx.header.revision;
        let refuse = |cx: &mut Context<'_>, reason: &str| Self::refuse_create(stream, reason, cx);
        let spec = match WatchSpec::from_create(create) {
            Ok(spec) => spec,
            Err(reason) => return refuse(cx, reason),
        };
        let state = self.streams.entry(stream).or_default();
        let id = if create.watch_id == 0 {
            while state.watchers.contains(&state.next_id) {
                state.next_id += 1;
            }
            state.next_id += 1;
            state.next_id - 1
        } else if state.watchers.contains(&create.watch_id) {
            return refuse(cx, DUPLICATE_ID);
        } else {
            create.watch_id
        };
        let mut start = create.start_revision;
        if start > 0 && crate::canary::on(crate::canary::Canary::WatchSkipsStartRevision) {
            start = start.saturating_add(1);
        }
        let synced = start == 0 || start > current;
        state.watchers.insert(id);
        if !synced {
            state.catching_up += 1;
            self.catching_up += 1;
        }
        let watcher = Watcher {
            range: self.ranges.acquire(&spec),
            spec,
            progress_notify: create.progress_notify,
            catching_up: !synced,
            next_revision: if synced {
                start.max(current + 1)
            } else {
                start
            },
            recently_notified: false,
        };
        if watcher.progress_notify && self.next_progress.is_none() {
            self.next_progress = Some(cx.now + self.progress_interval);
        }
        let key = (stream, id);
        match watcher.spec.range_end {
            None => {
                self.by_key
                    .entry(watcher.spec.key.clone())
                    .or_default()
                    .insert(key);
            }
            Some(_) => {
                self.ranged.insert(key);
            }
        }
        self.watchers.insert(key, watcher);
        let response = WatchResponse {
            header: Some(cx.header),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        emit(cx, stream, response, false);
        if !synced {
            self.request_catch_up(key, cx);
        }
        self.debug_assert_stream(stream);
    }

    /// Removes a watcher; false if there was none.
    pub(super) fn remove(&mut self, key: WatcherKey) -> bool {
        let Some(state) = self.streams.get_mut(&key.0) else {
            return false;
        };
        if !state.watchers.remove(&key.1) {
            return false;
        }
        if self.watchers.get(&key).is_some_and(|w| w.catching_up) {
            state.catching_up -= 1;
        }
        self.unindex(key);
        self.debug_assert_stream(key.0);
        true
    }

    /// Drops a watcher and its index entry (not its stream's set).
    fn unindex(&mut self, key: WatcherKey) {
        let Some(watcher) = self.watchers.remove(&key) else {
            return;
        };
        self.catching_up -= usize::from(watcher.catching_up);
        self.ranges.release(&watcher.spec);
        match watcher.spec.range_end {
            None => {
                if let Some(set) = self.by_key.get_mut(&watcher.spec.key) {
                    set.remove(&key);
                    if set.is_empty() {
                        self.by_key.remove(&watcher.spec.key);
                    }
                }
            }
            Some(_) => {
                self.ranged.remove(&key);
            }
        }
    }

    /// Checks, in debug builds, that the stream's watchers exist and are
    /// indexed as their specs say, and that the stream counts exactly its
    /// catching-up ones. Costs a lookup per watcher of the stream.
    pub(super) fn debug_assert_stream(&self, stream: StreamId) {
        if !cfg!(debug_assertions) {
            return;
        }
        let Some(state) = self.streams.get(&stream) else {
            return;
        };
        let mut catching_up = 0;
        for &id in &state.watchers {
            let key = (stream, id);
            let Some(watcher) = self.watchers.get(&key) else {
                panic!("stream {stream} lists watcher {id}, which does not exist");
            };
            assert!(
                self.is_indexed(key, watcher),
                "watcher {key:?} is not indexed as its spec says"
            );
            catching_up += usize::from(watcher.catching_up);
        }
        assert_eq!(
            state.catching_up, catching_up,
            "stream {stream} miscounts its watchers catching up"
        );
    }

    /// Checks, in debug builds, every stream as [`Self::debug_assert_stream`]
    /// does, and that the indexes hold no watcher a stream does not list.
    /// Costs a lookup per watcher.
    pub(super) fn debug_assert_registry(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        for &stream in self.streams.keys() {
            self.debug_assert_stream(stream);
        }
        let catching_up: usize = self.streams.values().map(|s| s.catching_up).sum();
        assert_eq!(
            self.catching_up, catching_up,
            "watchers catching up miscounted"
        );
        let listed: usize = self.streams.values().map(|s| s.watchers.len()).sum();
        let indexed = self.ranged.len() + self.by_key.values().map(BTreeSet::len).sum::<usize>();
        assert!(
            listed == self.watchers.len() && indexed == self.watchers.len(),
            "{} watchers, {listed} listed by streams, {indexed} indexed",
            self.watchers.len()
        );
        let ranges: BTreeSet<RangeId> = self.watchers.values().map(|w| w.range).collect();
        assert!(
            ranges.len() == self.ranges.len()
                && self
                    .watchers
                    .values()
                    .all(|w| self.ranges.id_of(&w.spec) == Some(w.range)),
            "{} ranges watched, {} named",
            ranges.len(),
            self.ranges.len()
        );
    }

    /// The watcher is in the index its spec says, and only there.
    fn is_indexed(&self, key: WatcherKey, watcher: &Watcher) -> bool {
        let by_key = self
            .by_key
            .get(&watcher.spec.key)
            .is_some_and(|set| set.contains(&key));
        let ranged = self.ranged.contains(&key);
        if watcher.spec.range_end.is_some() {
            ranged && !by_key
        } else {
            by_key && !ranged
        }
    }
}

/// Queues a response for the stream's runtime.
pub(super) fn emit(
    cx: &mut Context<'_>,
    stream: StreamId,
    response: WatchResponse,
    fragment: bool,
) {
    cx.outputs.push_back(Output::Watch {
        stream,
        response,
        fragment,
    });
}
