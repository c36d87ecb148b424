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
//! encoding, and the events are never cloned on the way out. Watchers of
//! the same range share a range id (module `ranges`), so a run of them
//! asks whether the range holds the changed key once, not per watcher.
//!
//! **Batching.** A stream whose client reads slower than revisions are
//! applied has several deliveries of a watcher queued at once; it sends
//! them as one response ([`batch`]), as etcd sends a watcher that fell
//! behind a stretch of revisions at once, within etcd's limits and never
//! across the stream's other responses.
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
//!
//! One concept per file: `registry.rs` (who watches what, create and
//! cancel), `fanout.rs` (live events of each applied revision),
//! `catch_up.rs` (history from storage until synced), `progress.rs`
//! (progress notifications), `spec.rs` (what a watcher watches), `event.rs`
//! (stored versions as events), `delivery.rs` (shared, pre-encoded events),
//! and on the runtime's side `gate.rs` (a stream's bounded queue),
//! `batch.rs` (a watcher's queued revisions as one response) and
//! `fragment.rs` (responses too large for one message).

mod batch;
mod catch_up;
mod delivery;
mod event;
mod fanout;
mod fragment;
mod gate;
mod progress;
mod ranges;
mod registry;
mod spec;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use self::batch::{batch, WatchBatch};
pub use self::catch_up::{catch_up, read_catch_ups, CatchUp, CatchUpOutcome, CatchUpRead};
pub use self::delivery::{RevisionEvents, WatchDelivery, QUEUE_ITEM_BYTES};
pub use self::fragment::fragments;
pub use self::gate::{queue_cost, Route, StreamGate};
pub(crate) use self::registry::{Context, WatchRegistry};
pub use self::spec::WatchSpec;

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
