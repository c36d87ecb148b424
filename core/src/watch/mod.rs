//! Watch: which watchers exist, which events each must see, and the pure
//! helpers a runtime uses to deliver them without breaking etcd's
//! guarantees.
//!
//! # Design
//!
//! A watcher is named by `(stream, watch_id)`: the runtime numbers each
//! client `Watch` stream, and watch IDs are per stream as in etcd. The
//! registry lives in the node; the runtime only routes what it emits.
//!
//! **Synced watchers.** When the apply step applies an entry that writes
//! revision `R`, the node hands the registry the versions `R` wrote (in sub
//! revision order) and the open write transaction. Each synced watcher whose
//! range holds a changed key gets *one* [`WatchDelivery`] carrying every
//! event of `R` it wants — so the events of a revision (a txn) are never
//! split — with `prev_kv` read from the transaction at `R - 1` when asked
//! for. Fan-out stays cheap on the node's thread: the events are built once
//! per distinct selection (which of `R`'s events, with or without
//! `prev_kv`) and shared (`Arc<[Event]>`) by every watcher that wants that
//! selection, and a stream's deliveries of a whole apply batch leave as one
//! `Output::WatchEvents`, released after the batch commits, in revision
//! order. The shared events are encoded to protobuf once, with the
//! revision's header ([`RevisionEvents`]); a stream writes each watcher's
//! response by copying those bytes around its watch ID
//! ([`WatchDelivery::encode`]), so the cost per watcher is a copy, not an
//! encoding, and the events are never cloned on the way out.
//!
//! **Unsynced watchers and catch-up.** A watcher that needs history — one
//! created with `start_revision` at or below the current revision, or one the
//! runtime could not keep up with — is *catching up*. The node does no
//! history reads itself (they can be long, and the node's thread must keep
//! applying): it emits `Output::WatchCatchUp` naming the watcher, its spec
//! and the revisions `[from, to]` it must be sent, where `to` is the revision
//! the node has applied. The runtime runs [`catch_up`] — a pure function of
//! a read snapshot — on any thread, delivers the response it builds *in the
//! stream's order*, and answers `Input::WatchCaughtUp` with the last revision
//! covered (a catch-up reads at most [`CATCH_UP_REVISIONS_MAX`] revisions).
//! The node then either marks the watcher synced (nothing newer was applied
//! meanwhile) or asks for the next stretch. While a watcher catches up the
//! node emits no live events for it, so nothing is sent twice; because every
//! stretch starts where the last one ended, nothing is skipped. History
//! below the compacted revision cancels the watcher with a response carrying
//! `compact_revision`, as etcd does.
//!
//! **Slow consumers.** Each stream has a bounded queue in the runtime. The
//! runtime passes every watch response through the stream's [`StreamGate`]
//! before queueing it: when the queue is full the gate refuses the response,
//! marks the watcher *stalled* from the response's first revision, and the
//! runtime tells the node (`Input::WatchStalled`). The node moves the watcher
//! to catch-up from that revision; until the gate routes the catch-up, it
//! drops every later response for that watcher (the catch-up will cover
//! them). Writes never wait for a watcher, and one slow watcher never holds
//! back the others: only its own events are dropped, to be re-read from
//! storage.
//!
//! **Progress.** A progress notification on a stream says "you have every
//! event up to revision P". The node answers `RequestProgress` only when no
//! watcher of the stream is catching up (otherwise once the last one
//! syncs), and the gate holds back a stream-wide notification while any of
//! the stream's watchers is stalled, releasing it after the catch-up that
//! covers it. Every request gets its own answer, even those that waited
//! together for one catch-up: a client may count answers against requests
//! (etcd 3.4 answers each at once, and may then claim a revision whose
//! events it has not sent; etcd 3.6 waits as we do but folds requests that
//! arrive while one waits into a single answer). Waiting requests are
//! counted, not queued, and the count is bounded. Periodic notifications
//! (`progress_notify`) go only to synced watchers that had no events since
//! the last round, as etcd's do.
//!
//! This module never reads the clock, and the registry never reads storage
//! other than the transaction it is handed for `prev_kv`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use oxetcd_proto::etcdserverpb::watch_create_request::FilterType;
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{ResponseHeader, WatchCreateRequest, WatchRequest, WatchResponse};
use oxetcd_proto::mvccpb::{event::EventType, Event, KeyValue};
use prost::Message;

use crate::storage::{KeyVersion, KvRead, RangeEnd, StorageError};
use crate::{Instant, Output};

/// Names one client `Watch` stream; chosen by the runtime.
pub type StreamId = u64;

/// The watch ID of responses that belong to no watcher (etcd's
/// `InvalidWatchID`): failed creates and stream-wide progress.
pub const NO_WATCH_ID: i64 = -1;

/// Revisions one catch-up reads at most (etcd's `watchBatchMaxRevs`): the
/// response it builds stays bounded, and the node gets a turn between
/// stretches of a long history.
pub const CATCH_UP_REVISIONS_MAX: i64 = 1_000;

/// Events one catch-up response holds at most; a revision is never split,
/// so a single larger revision still goes out whole.
pub const CATCH_UP_EVENTS_MAX: usize = 10_000;

/// `RequestProgress` requests of one stream waiting for its catch-ups at
/// most; later ones are folded into the last answer, as etcd 3.6 folds all
/// of them. A stream's answers then stay bounded however fast its client
/// asks.
const PROGRESS_REQUESTS_WAITING_MAX: u32 = 1_024;

/// etcd's default `--experimental-watch-progress-notify-interval`.
pub const PROGRESS_NOTIFY_INTERVAL_DEFAULT: Duration = Duration::from_secs(10 * 60);

/// Why a create request is refused (etcd's messages, in `cancel_reason`).
const EMPTY_RANGE: &str = "mvcc: watcher range is empty";
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";

/// What a watcher watches and how it wants its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// First key (etcd turns an empty key into `"\0"`).
    pub key: Vec<u8>,
    /// `None`: `key` alone; `Some(empty)`: every key from `key` on;
    /// `Some(end)`: `[key, end)`.
    pub range_end: Option<Vec<u8>>,
    /// Drop put events.
    pub no_put: bool,
    /// Drop delete events.
    pub no_delete: bool,
    /// Attach each key's previous version.
    pub prev_kv: bool,
    /// Split responses larger than the request limit.
    pub fragment: bool,
}

impl WatchSpec {
    /// The spec of a create request, normalised as etcd does; `Err` holds
    /// the cancel reason.
    pub fn from_create(request: &WatchCreateRequest) -> Result<Self, &'static str> {
        let key = if request.key.is_empty() {
            vec![0]
        } else {
            request.key.clone()
        };
        let range_end = match request.range_end.as_slice() {
            [] => None,
            [0] => Some(Vec::new()),
            end => Some(end.to_vec()),
        };
        if let Some(end) = &range_end {
            if !end.is_empty() && key.as_slice() >= end.as_slice() {
                return Err(EMPTY_RANGE);
            }
        }
        let has = |filter: FilterType| request.filters.contains(&(filter as i32));
        Ok(Self {
            key,
            range_end,
            no_put: has(FilterType::Noput),
            no_delete: has(FilterType::Nodelete),
            prev_kv: request.prev_kv,
            fragment: request.fragment,
        })
    }

    /// True when `key` is in the watched range.
    pub fn contains(&self, key: &[u8]) -> bool {
        match &self.range_end {
            None => key == self.key.as_slice(),
            Some(end) if end.is_empty() => key >= self.key.as_slice(),
            Some(end) => key >= self.key.as_slice() && key < end.as_slice(),
        }
    }

    /// True unless a filter drops this kind of event.
    fn wants(&self, tombstone: bool) -> bool {
        if tombstone {
            !self.no_delete
        } else {
            !self.no_put
        }
    }
}

/// The events of one revision that some watchers want, shared by all of
/// them (see the module docs), with the header of their responses and the
/// wire encoding of both, made once: a stream then writes each watcher's
/// response by copying bytes, and never encodes the events again.
#[derive(Debug, PartialEq)]
pub struct RevisionEvents {
    header: ResponseHeader,
    events: Vec<Event>,
    /// `header` as field 1 of a `WatchResponse`, then `events` as its field
    /// 11; the watch ID (field 2) goes between them, at `header_bytes`.
    encoded: Vec<u8>,
    header_bytes: usize,
}

impl RevisionEvents {
    /// Wraps `events` of `header.revision`, in sub-revision order.
    pub fn new(header: ResponseHeader, events: Vec<Event>) -> Self {
        let header_bytes = prost::encoding::message::encoded_len(1, &header);
        let events_bytes = prost::encoding::message::encoded_len_repeated(11, &events);
        let mut encoded = Vec::with_capacity(header_bytes + events_bytes);
        prost::encoding::message::encode(1, &header, &mut encoded);
        for event in &events {
            prost::encoding::message::encode(11, event, &mut encoded);
        }
        Self {
            header,
            events,
            encoded,
            header_bytes,
        }
    }

    /// The header of the responses that carry them.
    pub fn header(&self) -> &ResponseHeader {
        &self.header
    }

    /// The events.
    pub fn events(&self) -> &[Event] {
        &self.events
    }
}

/// One synced watcher's events of one revision (see the module docs). The
/// events are shared with every watcher of the revision that wants the
/// same ones.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchDelivery {
    /// The watcher.
    pub watch_id: i64,
    /// Every event of the revision the watcher wants, in sub-revision
    /// order, with the header for its response.
    pub events: Arc<RevisionEvents>,
    /// The watcher asked for fragmented responses.
    pub fragment: bool,
}

/// A `WatchResponse`'s field 2 (`watch_id`, varint) key byte.
const WATCH_ID_KEY: u8 = 2 << 3;

impl WatchDelivery {
    /// The revision every event belongs to.
    pub fn revision(&self) -> i64 {
        self.events.header.revision
    }

    /// The watcher's response; copies the shared events.
    pub fn response(&self) -> WatchResponse {
        WatchResponse {
            header: Some(self.events.header),
            watch_id: self.watch_id,
            events: self.events.events.clone(),
            ..Default::default()
        }
    }

    /// What it costs in a stream's queue, as [`queue_cost`] of its response.
    pub fn cost(&self) -> usize {
        1 + self.events.events.len()
    }

    /// The length of [`WatchDelivery::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        self.events.encoded.len() + self.watch_id_field().1
    }

    /// Writes the protobuf encoding of [`WatchDelivery::response`], byte
    /// for byte what prost writes for it, from the shared encoding.
    pub fn encode(&self, buf: &mut impl prost::bytes::BufMut) {
        let (head, events) = self.events.encoded.split_at(self.events.header_bytes);
        let (id, id_len) = self.watch_id_field();
        buf.put_slice(head);
        buf.put_slice(&id[..id_len]);
        buf.put_slice(events);
    }

    /// Field 2 as encoded, and its length (none for ID 0, proto3's default).
    fn watch_id_field(&self) -> ([u8; 11], usize) {
        let mut field = [0; 11];
        if self.watch_id == 0 {
            return (field, 0);
        }
        field[0] = WATCH_ID_KEY;
        let mut rest = &mut field[1..];
        // An int64 is encoded as its two's complement u64.
        prost::encoding::encode_varint(self.watch_id as u64, &mut rest);
        let unused = rest.len();
        (field, field.len() - unused)
    }
}

/// A request to send a watcher the events of `[from, to]` from storage,
/// then answer `Input::WatchCaughtUp`.
#[derive(Clone, Debug, PartialEq)]
pub struct CatchUp {
    /// The watcher's stream.
    pub stream: StreamId,
    /// The watcher.
    pub watch_id: i64,
    /// What it watches.
    pub spec: WatchSpec,
    /// First revision to send.
    pub from: i64,
    /// Last revision to send: the node's applied revision when it asked.
    pub to: i64,
    /// Header for the response (revision `to`).
    pub header: ResponseHeader,
}

/// What [`catch_up`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum CatchUpOutcome {
    /// Events were read up to `upto` (`to`, unless the stretch was capped).
    /// `response` is `None` when the watcher wants none of them.
    Events {
        /// The response to deliver, if any.
        response: Option<WatchResponse>,
        /// Last revision covered.
        upto: i64,
    },
    /// `from` is below the compacted revision: deliver `response` (a cancel
    /// carrying `compact_revision`); the watcher is gone.
    Compacted {
        /// The cancel response.
        response: WatchResponse,
    },
}

impl CatchUpOutcome {
    /// The input that reports this outcome to the node.
    pub fn input(&self, job: &CatchUp) -> crate::Input {
        let (upto, compacted) = match self {
            Self::Events { upto, .. } => (*upto, false),
            Self::Compacted { .. } => (job.to, true),
        };
        crate::Input::WatchCaughtUp {
            stream: job.stream,
            watch_id: job.watch_id,
            upto,
            compacted,
        }
    }
}

/// Reads the events `job` asks for from a snapshot at or after `job.to`.
/// Pure: the runtime calls it on whatever thread it likes.
pub fn catch_up(view: &impl KvRead, job: &CatchUp) -> Result<CatchUpOutcome, StorageError> {
    let compacted = view.meta()?.compact_revision;
    if job.from < compacted {
        return Ok(CatchUpOutcome::Compacted {
            // etcd's compaction notice carries no revision in its header.
            response: WatchResponse {
                header: Some(ResponseHeader {
                    revision: 0,
                    ..job.header
                }),
                watch_id: job.watch_id,
                canceled: true,
                compact_revision: compacted,
                ..Default::default()
            },
        });
    }
    let from = job.from.max(1);
    let last = job.to.min(from.saturating_add(CATCH_UP_REVISIONS_MAX - 1));
    let mut matched: Vec<KeyVersion> = Vec::new();
    let mut upto = last;
    let mut capped = false;
    view.changes(from, last, &mut |version| {
        let revision = version.mod_revision.main;
        if matched.len() >= CATCH_UP_EVENTS_MAX
            && matched
                .last()
                .is_some_and(|v| v.mod_revision.main < revision)
        {
            upto = revision - 1;
            capped = true;
            return ControlFlow::Break(());
        }
        if job.spec.contains(&version.key) && job.spec.wants(version.tombstone) {
            matched.push(version);
        }
        ControlFlow::Continue(())
    })?;
    capped |= last < job.to;
    let mut events = Vec::with_capacity(matched.len());
    for version in matched {
        let prev = if job.spec.prev_kv && !is_create(&version) {
            previous(view, &version.key, version.mod_revision.main - 1)?
        } else {
            None
        };
        events.push(event(version, prev));
    }
    let response = (!events.is_empty()).then(|| WatchResponse {
        header: Some(ResponseHeader {
            revision: if capped { upto } else { job.header.revision },
            ..job.header
        }),
        watch_id: job.watch_id,
        events,
        ..Default::default()
    });
    Ok(CatchUpOutcome::Events { response, upto })
}

/// Splits a response larger than `max_bytes` into fragments, each but the
/// last flagged `fragment`, as etcd does for watchers that asked for it. A
/// response with fewer than two events is never split.
pub fn fragments(response: WatchResponse, max_bytes: usize) -> Vec<WatchResponse> {
    if response.events.len() < 2 || response.encoded_len() < max_bytes {
        return vec![response];
    }
    let mut out = Vec::new();
    let mut template = response;
    let events = std::mem::take(&mut template.events);
    let mut current = WatchResponse {
        fragment: true,
        ..template.clone()
    };
    for event in events {
        current.events.push(event);
        if current.events.len() > 1 && current.encoded_len() >= max_bytes {
            let overflow = current.events.pop();
            let full = std::mem::replace(
                &mut current,
                WatchResponse {
                    fragment: true,
                    ..template.clone()
                },
            );
            out.push(full);
            current.events.extend(overflow);
        }
    }
    current.fragment = false;
    out.push(current);
    out
}

/// What a runtime does with one watch response for a stream; see
/// [`StreamGate::route`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Queue it.
    Deliver,
    /// Drop it (a catch-up covers it, or it is held back).
    Drop,
    /// The queue is full: drop it, and report `Input::WatchStalled` with
    /// this watcher and revision.
    Stall {
        /// The watcher that fell behind.
        watch_id: i64,
        /// First revision it has not been sent.
        from_revision: i64,
    },
}

/// The runtime-side guard of one stream's bounded queue (see the module
/// docs): decides, per response, whether it may be queued.
#[derive(Debug, Default)]
pub struct StreamGate {
    stalled: BTreeSet<i64>,
    /// Stream-wide progress notifications held back while stalled, one per
    /// `RequestProgress`; at most [`PROGRESS_REQUESTS_WAITING_MAX`], later
    /// ones replacing the last.
    deferred_progress: Vec<WatchResponse>,
}

impl StreamGate {
    /// Routes `response` given the stream's queue occupancy and its limit
    /// (both in [`queue_cost`] units). A response always fits an empty
    /// queue, so one large revision cannot stall a watcher forever.
    pub fn route(&mut self, response: &WatchResponse, queued: usize, limit: usize) -> Route {
        let id = response.watch_id;
        if response.created || response.canceled {
            if response.canceled {
                self.stalled.remove(&id);
            }
            return Route::Deliver;
        }
        if let Some(first) = response.events.first() {
            let from_revision = first.kv.as_ref().map_or(0, |kv| kv.mod_revision);
            return self.route_events(id, from_revision, queue_cost(response), queued, limit);
        }
        // A progress notification.
        if id == NO_WATCH_ID {
            if !self.stalled.is_empty() {
                if self.deferred_progress.len() >= PROGRESS_REQUESTS_WAITING_MAX as usize {
                    self.deferred_progress.pop();
                }
                self.deferred_progress.push(response.clone());
                return Route::Drop;
            }
            return Route::Deliver;
        }
        if self.stalled.contains(&id) {
            Route::Drop
        } else {
            Route::Deliver
        }
    }

    /// Routes a response of `watch_id` holding events from `from_revision`
    /// on and costing `cost` ([`queue_cost`]), as [`StreamGate::route`]
    /// does, without the response having to exist yet.
    pub fn route_events(
        &mut self,
        watch_id: i64,
        from_revision: i64,
        cost: usize,
        queued: usize,
        limit: usize,
    ) -> Route {
        if self.stalled.contains(&watch_id) {
            return Route::Drop;
        }
        if queued > 0 && queued.saturating_add(cost) > limit {
            self.stalled.insert(watch_id);
            return Route::Stall {
                watch_id,
                from_revision,
            };
        }
        Route::Deliver
    }

    /// The catch-up of `watch_id` is being queued: later responses for it
    /// flow again. Returns the held-back progress notifications to queue
    /// right after the catch-up, in order, once no watcher is stalled.
    pub fn catch_up_routed(&mut self, watch_id: i64) -> Vec<WatchResponse> {
        self.stalled.remove(&watch_id);
        if self.stalled.is_empty() {
            std::mem::take(&mut self.deferred_progress)
        } else {
            Vec::new()
        }
    }

    /// Forgets a watcher (its stream closed or it was canceled).
    pub fn forget(&mut self, watch_id: i64) {
        self.stalled.remove(&watch_id);
    }
}

/// What a response costs in a stream's queue: one, plus one per event.
pub fn queue_cost(response: &WatchResponse) -> usize {
    1 + response.events.len()
}

/// One watcher in the registry.
#[derive(Debug)]
struct Watcher {
    spec: WatchSpec,
    progress_notify: bool,
    catching_up: bool,
    /// The first revision this watcher has not been given (or, for one
    /// created with a future start revision, the first it wants).
    next_revision: i64,
    /// Events went out since the last periodic progress round.
    recently_notified: bool,
}

/// One stream's bookkeeping.
#[derive(Debug, Default)]
struct Stream {
    /// Next automatically chosen watch ID (etcd counts from 0).
    next_id: i64,
    watchers: BTreeSet<i64>,
    catching_up: usize,
    /// `RequestProgress` requests waiting for the stream's watchers to
    /// sync, each to be answered.
    progress_requests: u32,
}

type WatcherKey = (StreamId, i64);

/// Every watcher of the node.
#[derive(Debug)]
pub(crate) struct WatchRegistry {
    watchers: BTreeMap<WatcherKey, Watcher>,
    streams: BTreeMap<StreamId, Stream>,
    /// Single-key watchers by key.
    by_key: BTreeMap<Vec<u8>, BTreeSet<WatcherKey>>,
    /// Watchers of a range (checked one by one).
    ranged: BTreeSet<WatcherKey>,
    progress_interval: Duration,
    /// Next periodic progress round, while any watcher asked for it.
    next_progress: Option<Instant>,
    /// Deliveries of the apply batch under way, per stream, in revision
    /// order; drained by [`WatchRegistry::flush_events`] after it commits.
    pending: BTreeMap<StreamId, Vec<WatchDelivery>>,
}

/// The node's state a watch operation needs.
pub(crate) struct Context<'a> {
    pub(crate) now: Instant,
    /// Header with the node's current revision.
    pub(crate) header: ResponseHeader,
    pub(crate) outputs: &'a mut VecDeque<Output>,
}

impl WatchRegistry {
    pub(crate) fn new(progress_interval: Duration) -> Self {
        Self {
            watchers: BTreeMap::new(),
            streams: BTreeMap::new(),
            by_key: BTreeMap::new(),
            ranged: BTreeSet::new(),
            progress_interval,
            next_progress: None,
            pending: BTreeMap::new(),
        }
    }

    /// Number of watchers (all streams).
    #[allow(dead_code)]
    pub(crate) fn len(&self) -> usize {
        self.watchers.len()
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
            Some(RequestUnion::ProgressRequest(_)) => {
                let state = self.streams.entry(stream).or_default();
                state.progress_requests =
                    (state.progress_requests + 1).min(PROGRESS_REQUESTS_WAITING_MAX);
                self.release_progress(stream, cx);
            }
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
    }

    /// The runtime dropped events of a synced watcher from `from_revision`
    /// on: it catches up from there.
    pub(crate) fn handle_stalled(
        &mut self,
        stream: StreamId,
        watch_id: i64,
        from_revision: i64,
        cx: &mut Context<'_>,
    ) {
        let Some(watcher) = self.watchers.get_mut(&(stream, watch_id)) else {
            return;
        };
        if watcher.catching_up {
            return;
        }
        watcher.catching_up = true;
        watcher.next_revision = watcher.next_revision.min(from_revision).max(1);
        if let Some(state) = self.streams.get_mut(&stream) {
            state.catching_up += 1;
        }
        self.request_catch_up((stream, watch_id), cx);
    }

    /// The backend was replaced by a snapshot from another member: events
    /// between a watcher's position and the new revision were never seen
    /// here, so every synced watcher catches up from storage.
    pub(crate) fn handle_restored(&mut self, cx: &mut Context<'_>) {
        let synced: Vec<(WatcherKey, i64)> = self
            .watchers
            .iter()
            .filter(|(_, w)| !w.catching_up)
            .map(|(key, w)| (*key, w.next_revision))
            .collect();
        for ((stream, watch_id), next_revision) in synced {
            self.handle_stalled(stream, watch_id, next_revision, cx);
        }
    }

    /// A catch-up was delivered up to `upto`, or found history compacted.
    pub(crate) fn handle_caught_up(
        &mut self,
        stream: StreamId,
        watch_id: i64,
        upto: i64,
        compacted: bool,
        cx: &mut Context<'_>,
    ) {
        let key = (stream, watch_id);
        let Some(watcher) = self.watchers.get_mut(&key) else {
            return;
        };
        if !watcher.catching_up {
            return;
        }
        if compacted {
            self.remove(key);
            self.release_progress(stream, cx);
            return;
        }
        watcher.next_revision = watcher.next_revision.max(upto + 1);
        if watcher.next_revision <= cx.header.revision {
            self.request_catch_up(key, cx);
            return;
        }
        watcher.catching_up = false;
        if let Some(state) = self.streams.get_mut(&stream) {
            state.catching_up -= 1;
        }
        self.release_progress(stream, cx);
    }

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
        if self.watchers.is_empty() || changes.is_empty() {
            return Ok(());
        }
        if let [change] = changes {
            return self.on_single_change(revision, change, view, header);
        }
        // Which watcher takes which change, and which changes anyone wants
        // with their previous version.
        let mut takes: Vec<(WatcherKey, usize)> = Vec::new();
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
                if watcher.catching_up
                    || watcher.next_revision > revision
                    || !watcher.spec.contains(&change.key)
                    || !watcher.spec.wants(change.tombstone)
                {
                    continue;
                }
                wants_prev[index] |= watcher.spec.prev_kv;
                takes.push((*key, index));
            }
        }
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
            watcher.next_revision = revision + 1;
            watcher.recently_notified = true;
            self.pending.entry(key.0).or_default().push(WatchDelivery {
                watch_id: key.1,
                events,
                fragment: watcher.spec.fragment,
            });
        }
        Ok(())
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
        let mut take = |key: WatcherKey, watcher: &mut Watcher| -> Result<(), StorageError> {
            if watcher.catching_up
                || watcher.next_revision > revision
                || !watcher.spec.contains(&change.key)
                || !watcher.spec.wants(change.tombstone)
            {
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
            watcher.next_revision = revision + 1;
            watcher.recently_notified = true;
            let delivery = WatchDelivery {
                watch_id: key.1,
                events,
                fragment: watcher.spec.fragment,
            };
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
        outputs.extend(
            pending
                .into_iter()
                .map(|(stream, deliveries)| Output::WatchEvents { stream, deliveries }),
        );
    }

    /// When the next periodic progress round is due, if any watcher wants one.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.next_progress
    }

    /// Runs the periodic progress round if it is due.
    pub(crate) fn handle_timeout(&mut self, cx: &mut Context<'_>) {
        let Some(due) = self.next_progress else {
            return;
        };
        if due > cx.now {
            return;
        }
        let mut any = false;
        let mut notify = Vec::new();
        for (key, watcher) in &mut self.watchers {
            if !watcher.progress_notify {
                continue;
            }
            any = true;
            if !watcher.catching_up && !watcher.recently_notified {
                notify.push(*key);
            }
            watcher.recently_notified = false;
        }
        for (stream, watch_id) in notify {
            let response = WatchResponse {
                header: Some(cx.header),
                watch_id,
                ..Default::default()
            };
            emit(cx, stream, response, false);
        }
        self.next_progress = any.then(|| cx.now + self.progress_interval);
    }

    fn create(&mut self, stream: StreamId, create: &WatchCreateRequest, cx: &mut Context<'_>) {
        let current = cx.header.revision;
        let refuse = |cx: &mut Context<'_>, reason: &str| {
            let response = WatchResponse {
                header: Some(cx.header),
                watch_id: NO_WATCH_ID,
                created: true,
                canceled: true,
                cancel_reason: reason.to_owned(),
                ..Default::default()
            };
            emit(cx, stream, response, false);
        };
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
        let start = create.start_revision;
        let synced = start == 0 || start > current;
        state.watchers.insert(id);
        if !synced {
            state.catching_up += 1;
        }
        let watcher = Watcher {
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
    }

    fn request_catch_up(&mut self, key: WatcherKey, cx: &mut Context<'_>) {
        let Some(watcher) = self.watchers.get(&key) else {
            return;
        };
        cx.outputs.push_back(Output::WatchCatchUp(CatchUp {
            stream: key.0,
            watch_id: key.1,
            spec: watcher.spec.clone(),
            from: watcher.next_revision,
            to: cx.header.revision,
            header: cx.header,
        }));
    }

    /// Answers each of a stream's waiting progress requests once none of
    /// its watchers is catching up.
    fn release_progress(&mut self, stream: StreamId, cx: &mut Context<'_>) {
        let Some(state) = self.streams.get_mut(&stream) else {
            return;
        };
        if state.catching_up > 0 {
            return;
        }
        for _ in 0..std::mem::take(&mut state.progress_requests) {
            let response = WatchResponse {
                header: Some(cx.header),
                watch_id: NO_WATCH_ID,
                ..Default::default()
            };
            emit(cx, stream, response, false);
        }
    }

    /// Removes a watcher; false if there was none.
    fn remove(&mut self, key: WatcherKey) -> bool {
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
        true
    }

    fn unindex(&mut self, key: WatcherKey) {
        let Some(watcher) = self.watchers.remove(&key) else {
            return;
        };
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

fn emit(cx: &mut Context<'_>, stream: StreamId, response: WatchResponse, fragment: bool) {
    cx.outputs.push_back(Output::Watch {
        stream,
        response,
        fragment,
    });
}

/// A put that started a key's generation has no previous version to show.
fn is_create(version: &KeyVersion) -> bool {
    !version.tombstone && version.create_revision == version.mod_revision.main
}

/// The live version of `key` at revision `at`, if any.
fn previous(
    view: &(impl KvRead + ?Sized),
    key: &[u8],
    at: i64,
) -> Result<Option<KeyValue>, StorageError> {
    let end = [key, &[0]].concat();
    let mut found = None;
    view.scan(key, RangeEnd::Before(&end), at, &mut |version| {
        if !version.tombstone {
            found = Some(key_value(version));
        }
        ControlFlow::Break(())
    })?;
    Ok(found)
}

/// The event for one stored version. A delete shows only the key and the
/// revision that deleted it, as etcd's do.
fn event(version: KeyVersion, prev_kv: Option<KeyValue>) -> Event {
    let kind = if version.tombstone {
        EventType::Delete
    } else {
        EventType::Put
    };
    Event {
        r#type: kind as i32,
        kv: Some(key_value(version)),
        prev_kv,
    }
}

fn key_value(version: KeyVersion) -> KeyValue {
    KeyValue {
        key: version.key,
        create_revision: version.create_revision,
        mod_revision: version.mod_revision.main,
        version: version.version,
        value: version.value,
        lease: version.lease,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response_with(events: usize, value_bytes: usize) -> WatchResponse {
        WatchResponse {
            watch_id: 3,
            events: (0..events)
                .map(|i| Event {
                    r#type: 0,
                    kv: Some(KeyValue {
                        key: format!("k{i}").into_bytes(),
                        mod_revision: 7,
                        value: vec![b'x'; value_bytes],
                        ..Default::default()
                    }),
                    prev_kv: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn deliveries_encode_as_their_responses() {
        let mut events = response_with(3, 5).events;
        events[1].prev_kv = Some(KeyValue {
            key: b"k1".to_vec(),
            value: b"old".to_vec(),
            ..Default::default()
        });
        events[2].r#type = EventType::Delete as i32;
        let header = ResponseHeader {
            cluster_id: u64::MAX,
            member_id: 12,
            revision: 7,
            raft_term: 300,
        };
        let shared = Arc::new(RevisionEvents::new(header, events));
        for watch_id in [0, 1, 127, 128, i64::MAX, NO_WATCH_ID, i64::MIN] {
            let delivery = WatchDelivery {
                watch_id,
                events: shared.clone(),
                fragment: false,
            };
            let expected = delivery.response().encode_to_vec();
            let mut encoded = Vec::new();
            delivery.encode(&mut encoded);
            assert_eq!(encoded, expected, "watch ID {watch_id}");
            assert_eq!(delivery.encoded_len(), expected.len());
            assert_eq!(delivery.cost(), queue_cost(&delivery.response()));
        }
        let none = WatchDelivery {
            watch_id: 4,
            events: Arc::new(RevisionEvents::new(ResponseHeader::default(), Vec::new())),
            fragment: false,
        };
        let mut encoded = Vec::new();
        none.encode(&mut encoded);
        assert_eq!(encoded, none.response().encode_to_vec());
    }

    /// Deliveries of one put as (stream, [watch IDs]) after flushing, with
    /// `fillers` single-key watchers of other keys (many of them make the
    /// registry look candidates up rather than walk every watcher).
    fn deliveries_of_one_put(fillers: usize) -> Vec<(StreamId, Vec<i64>)> {
        let mut registry = WatchRegistry::new(PROGRESS_NOTIFY_INTERVAL_DEFAULT);
        let mut outputs = VecDeque::new();
        let mut cx = Context {
            now: Instant::ZERO,
            header: ResponseHeader {
                revision: 1,
                ..Default::default()
            },
            outputs: &mut outputs,
        };
        let mut watch = |stream, key: &[u8], end: &[u8]| {
            let create = WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                    key: key.to_vec(),
                    range_end: end.to_vec(),
                    ..Default::default()
                })),
            };
            registry.handle_request(stream, create, &mut cx);
        };
        watch(1, b"a", b"");
        watch(1, b"b", b"");
        watch(2, b"a", b"c");
        watch(2, b"a", b"");
        watch(3, b"b", b"\0");
        watch(3, b"a", b"\0");
        for i in 0..fillers {
            watch(4, format!("z{i}").as_bytes(), b"");
        }
        let change = KeyVersion {
            key: b"a".to_vec(),
            mod_revision: crate::storage::Revision { main: 2, sub: 0 },
            create_revision: 2,
            version: 1,
            lease: 0,
            value: b"v".to_vec(),
            tombstone: false,
        };
        let kv = crate::memory::MemoryKv::default();
        let view = crate::storage::KvStore::read(&kv).unwrap();
        registry
            .on_revision(2, &[change], &view, ResponseHeader::default())
            .unwrap();
        let mut flushed = Vec::new();
        registry.flush_events(&mut flushed);
        flushed
            .into_iter()
            .map(|output| match output {
                Output::WatchEvents { stream, deliveries } => {
                    for d in &deliveries {
                        assert_eq!(d.revision(), 2);
                        assert_eq!(d.events.events().len(), 1);
                    }
                    (stream, deliveries.iter().map(|d| d.watch_id).collect())
                }
                other => panic!("unexpected output {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_put_reaches_the_same_watchers_in_order_however_they_are_found() {
        let expected = vec![(1, vec![0]), (2, vec![0, 1]), (3, vec![1])];
        // Mostly ranged watchers: every watcher is walked.
        assert_eq!(deliveries_of_one_put(0), expected);
        // Mostly single-key watchers: candidates are looked up.
        assert_eq!(deliveries_of_one_put(20), expected);
    }

    #[test]
    fn specs_normalise_as_etcd() {
        let create = |key: &[u8], end: &[u8]| WatchCreateRequest {
            key: key.to_vec(),
            range_end: end.to_vec(),
            ..Default::default()
        };
        let point = WatchSpec::from_create(&create(b"a", b"")).unwrap();
        assert!(point.contains(b"a") && !point.contains(b"ab"));
        let from = WatchSpec::from_create(&create(b"b", b"\0")).unwrap();
        assert!(from.contains(b"b") && from.contains(b"zz") && !from.contains(b"a"));
        let all = WatchSpec::from_create(&create(b"", b"\0")).unwrap();
        assert_eq!(all.key, b"\0");
        assert!(all.contains(b"\0a"));
        let span = WatchSpec::from_create(&create(b"a", b"c")).unwrap();
        assert!(span.contains(b"b") && !span.contains(b"c"));
        assert_eq!(
            WatchSpec::from_create(&create(b"c", b"a")),
            Err(EMPTY_RANGE)
        );
        assert_eq!(
            WatchSpec::from_create(&create(b"a", b"a")),
            Err(EMPTY_RANGE)
        );
    }

    #[test]
    fn fragments_split_large_responses_and_keep_every_event() {
        let small = response_with(3, 10);
        assert_eq!(fragments(small.clone(), 1000), vec![small]);
        let one = response_with(1, 5000);
        assert_eq!(fragments(one.clone(), 1000).len(), 1);
        let big = response_with(10, 300);
        let parts = fragments(big.clone(), 1000);
        assert!(parts.len() > 1);
        assert!(parts[..parts.len() - 1].iter().all(|p| p.fragment));
        assert!(!parts.last().unwrap().fragment);
        let rejoined: Vec<Event> = parts.into_iter().flat_map(|p| p.events).collect();
        assert_eq!(rejoined, big.events);
    }

    #[test]
    fn gate_stalls_drops_then_resumes_and_defers_progress() {
        let mut gate = StreamGate::default();
        let events = response_with(2, 1);
        assert_eq!(gate.route(&events, 0, 4), Route::Deliver);
        // Any response fits an empty queue.
        assert_eq!(gate.route(&response_with(9, 1), 0, 4), Route::Deliver);
        assert_eq!(
            gate.route(&events, 2, 4),
            Route::Stall {
                watch_id: 3,
                from_revision: 7
            }
        );
        // Later responses for the stalled watcher are dropped even with room.
        assert_eq!(gate.route(&events, 0, 4), Route::Drop);
        let other = WatchResponse {
            watch_id: 4,
            ..response_with(1, 1)
        };
        assert_eq!(gate.route(&other, 0, 4), Route::Deliver);
        let progress = WatchResponse {
            watch_id: NO_WATCH_ID,
            ..Default::default()
        };
        assert_eq!(gate.route(&progress, 0, 4), Route::Drop);
        // Each held-back answer to a `RequestProgress` is kept.
        let later = WatchResponse {
            header: Some(ResponseHeader {
                revision: 9,
                ..Default::default()
            }),
            ..progress.clone()
        };
        assert_eq!(gate.route(&later, 0, 4), Route::Drop);
        assert_eq!(gate.catch_up_routed(3), vec![progress.clone(), later]);
        assert_eq!(gate.route(&events, 0, 4), Route::Deliver);
        assert_eq!(gate.route(&progress, 0, 4), Route::Deliver);
        assert!(gate.catch_up_routed(3).is_empty());
    }

    fn progress_request() -> WatchRequest {
        WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(Default::default())),
        }
    }

    /// Stream-wide progress answers (watch ID -1) among `outputs`, by
    /// stream, with their header revision.
    fn progress_answers(outputs: &mut VecDeque<Output>) -> Vec<(StreamId, i64)> {
        let mut answers = Vec::new();
        for output in outputs.drain(..) {
            if let Output::Watch {
                stream, response, ..
            } = output
            {
                if response.watch_id == NO_WATCH_ID && !response.created {
                    answers.push((stream, response.header.map_or(0, |h| h.revision)));
                }
            }
        }
        answers
    }

    #[test]
    fn every_progress_request_is_answered_after_the_catch_up() {
        let mut registry = WatchRegistry::new(PROGRESS_NOTIFY_INTERVAL_DEFAULT);
        let mut outputs = VecDeque::new();
        let header = |revision| ResponseHeader {
            revision,
            ..Default::default()
        };
        let mut cx = Context {
            now: Instant::ZERO,
            header: header(10),
            outputs: &mut outputs,
        };
        // A watcher replaying history from revision 2 is catching up.
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: b"k".to_vec(),
                start_revision: 2,
                ..Default::default()
            })),
        };
        registry.handle_request(1, create, &mut cx);
        // A synced stream answers at once.
        registry.handle_request(2, progress_request(), &mut cx);
        for _ in 0..3 {
            registry.handle_request(1, progress_request(), &mut cx);
        }
        assert_eq!(
            progress_answers(cx.outputs),
            vec![(2, 10)],
            "no answer may claim revision 10 before the catch-up delivered it"
        );
        // The node applied revision 11 meanwhile: one more stretch.
        cx.header = header(11);
        registry.handle_caught_up(1, 0, 10, false, &mut cx);
        registry.handle_request(1, progress_request(), &mut cx);
        assert!(progress_answers(cx.outputs).is_empty());
        registry.handle_caught_up(1, 0, 11, false, &mut cx);
        assert_eq!(progress_answers(cx.outputs), vec![(1, 11); 4]);
        // Nothing is left waiting.
        registry.handle_caught_up(1, 0, 11, false, &mut cx);
        registry.handle_request(1, progress_request(), &mut cx);
        assert_eq!(progress_answers(cx.outputs), vec![(1, 11)]);
    }

    #[test]
    fn waiting_progress_requests_are_bounded() {
        let mut registry = WatchRegistry::new(PROGRESS_NOTIFY_INTERVAL_DEFAULT);
        let mut outputs = VecDeque::new();
        let mut cx = Context {
            now: Instant::ZERO,
            header: ResponseHeader {
                revision: 5,
                ..Default::default()
            },
            outputs: &mut outputs,
        };
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: b"k".to_vec(),
                start_revision: 1,
                ..Default::default()
            })),
        };
        registry.handle_request(1, create, &mut cx);
        let asked = PROGRESS_REQUESTS_WAITING_MAX as usize + 10;
        for _ in 0..asked {
            registry.handle_request(1, progress_request(), &mut cx);
        }
        // Canceling the catching-up watcher releases the waiting answers.
        let cancel = WatchRequest {
            request_union: Some(RequestUnion::CancelRequest(
                oxetcd_proto::etcdserverpb::WatchCancelRequest { watch_id: 0 },
            )),
        };
        registry.handle_request(1, cancel, &mut cx);
        assert_eq!(
            progress_answers(cx.outputs).len(),
            PROGRESS_REQUESTS_WAITING_MAX as usize
        );
    }
}
