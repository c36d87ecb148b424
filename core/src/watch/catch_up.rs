//! Catch-up: watchers that need history are sent it from storage, in
//! stretches, off the node's thread, until they are synced.
//!
//! The node asks ([`CatchUp`], via `Output::WatchCatchUp`); the runtime
//! reads with [`catch_up`] — a pure function of a read snapshot, at most
//! [`CATCH_UP_REVISIONS_MAX`] revisions and about
//! [`CATCH_UP_EVENTS_MAX`] events at once — delivers the response in the
//! stream's order and answers `Input::WatchCaughtUp` with the last revision
//! covered. The registry then asks for the next stretch, or marks the
//! watcher synced when nothing newer was applied meanwhile. A watcher
//! whose events the runtime dropped (stalled), and every synced watcher
//! after a snapshot replaced the store, catch up the same way.
//!
//! Invariants, asserted in debug builds: a stream counts exactly its
//! catching-up watchers; a watcher leaves catch-up with everything up to
//! the current revision sent.

use std::ops::ControlFlow;

use oxetcd_proto::etcdserverpb::{ResponseHeader, WatchResponse};

use super::event::{event, is_create, previous};
use super::registry::{Context, WatcherKey};
use super::{StreamId, WatchRegistry, WatchSpec, CATCH_UP_EVENTS_MAX, CATCH_UP_REVISIONS_MAX};
use crate::storage::{KeyVersion, KvRead, StorageError};
use crate::Output;

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
    /// What the runtime does with the outcome of `job`: the response to
    /// send, if any, with whether the watcher's fragmenting applies to it
    /// (a compaction's cancel is never split), and the input that reports
    /// the outcome to the node, fed after the response is queued.
    pub fn into_parts(self, job: &CatchUp) -> (Option<(WatchResponse, bool)>, crate::Input) {
        let input = self.input(job);
        let response = match self {
            Self::Events { response, .. } => response.map(|r| (r, job.spec.fragment)),
            Self::Compacted { response } => Some((response, false)),
        };
        (response, input)
    }

    /// The input that reports this outcome to the node.
    fn input(&self, job: &CatchUp) -> crate::Input {
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
                compact_revision: if crate::canary::on(
                    crate::canary::Canary::CompactedWatchWithoutRevision,
                ) {
                    0
                } else {
                    compacted
                },
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

impl WatchRegistry {
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
        self.catching_up += 1;
        watcher.next_revision = watcher.next_revision.min(from_revision).max(1);
        if let Some(state) = self.streams.get_mut(&stream) {
            state.catching_up += 1;
        }
        self.request_catch_up((stream, watch_id), cx);
        self.debug_assert_stream(stream);
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
        self.debug_assert_registry();
        debug_assert!(
            self.watchers.values().all(|w| w.catching_up),
            "a watcher stayed synced across a snapshot"
        );
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
        // The runtime read at most up to the revision the node asked for.
        debug_assert!(
            upto <= cx.header.revision,
            "caught up to {upto}, past the current revision {}",
            cx.header.revision
        );
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
        let duplicate = crate::canary::on(crate::canary::Canary::DuplicateEventsAtCatchUp)
            .then(|| watcher.spec.clone());
        self.catching_up -= 1;
        if let Some(state) = self.streams.get_mut(&stream) {
            state.catching_up -= 1;
        }
        if let Some(spec) = duplicate {
            // The boundary revision read once more; the watcher, synced
            // now, ignores the report of this read.
            cx.outputs.push_back(Output::WatchCatchUp(CatchUp {
                stream,
                watch_id,
                spec,
                from: upto,
                to: upto,
                header: cx.header,
            }));
        }
        self.release_progress(stream, cx);
        self.debug_assert_stream(stream);
    }

    /// Asks the runtime for the watcher's next stretch of history: from
    /// the first revision it has not been sent, up to the current one.
    pub(super) fn request_catch_up(&mut self, key: WatcherKey, cx: &mut Context<'_>) {
        let Some(watcher) = self.watchers.get(&key) else {
            return;
        };
        debug_assert!(watcher.catching_up, "a synced watcher asked for history");
        cx.outputs.push_back(Output::WatchCatchUp(CatchUp {
            stream: key.0,
            watch_id: key.1,
            spec: watcher.spec.clone(),
            from: watcher.next_revision,
            to: cx.header.revision,
            header: cx.header,
        }));
    }
}
