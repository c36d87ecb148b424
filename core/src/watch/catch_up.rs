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
use oxetcd_proto::mvccpb::KeyValue;

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
    Ok(read_catch_ups(view, std::slice::from_ref(job))?.outcome(0, job))
}

/// What one pass over storage found for a group of catch-ups (see
/// [`read_catch_ups`]): the changes any of them takes, each read once, and
/// which of them each job takes.
#[derive(Debug)]
pub struct CatchUpRead {
    /// Every change some job takes, in revision order, with its previous
    /// version where some job that takes it wants that.
    changes: Vec<(KeyVersion, Option<KeyValue>)>,
    /// Per job, in the order given.
    jobs: Vec<JobRead>,
}

/// What [`CatchUpRead`] holds for one job.
#[derive(Debug)]
enum JobRead {
    /// Its first revision is compacted away, at this revision.
    Compacted(i64),
    /// It takes these changes (indices into `changes`), up to `upto`.
    Events {
        taken: Vec<u32>,
        upto: i64,
        capped: bool,
    },
}

/// One job's window while the changes are read.
struct Window {
    from: i64,
    last: i64,
    taken: Vec<u32>,
    /// The revision of the last change taken.
    taken_revision: i64,
    upto: i64,
    capped: bool,
    done: bool,
}

/// Reads, in one pass over a snapshot at or after every job's `to`, what
/// each of `jobs` asks for: the watchers of a stream that fell behind
/// together want the same stretch of history, and each reading it alone
/// would read it once per watcher. [`CatchUpRead::outcome`] then gives each
/// job exactly what [`catch_up`] would. Pure, like [`catch_up`]; the pass
/// spans the jobs' windows together, so the caller groups jobs whose
/// windows are near one another.
pub fn read_catch_ups(view: &impl KvRead, jobs: &[CatchUp]) -> Result<CatchUpRead, StorageError> {
    let compacted = view.meta()?.compact_revision;
    let mut windows: Vec<Option<Window>> = jobs
        .iter()
        .map(|job| {
            (job.from >= compacted).then(|| {
                let from = job.from.max(1);
                let last = job.to.min(from.saturating_add(CATCH_UP_REVISIONS_MAX - 1));
                Window {
                    from,
                    last,
                    taken: Vec::new(),
                    taken_revision: 0,
                    upto: last,
                    capped: last < job.to,
                    done: false,
                }
            })
        })
        .collect();
    let open = windows.iter().flatten().filter(|w| w.from <= w.last);
    let (low, high) = open.fold((i64::MAX, i64::MIN), |(low, high), w| {
        (low.min(w.from), high.max(w.last))
    });
    // Each change some job takes, and whether one of those wants `prev_kv`.
    let mut taken: Vec<(KeyVersion, bool)> = Vec::new();
    if low <= high {
        view.changes(low, high, &mut |version| {
            let revision = version.mod_revision.main;
            let (mut wanted, mut with_prev, mut open) = (false, false, false);
            for (window, job) in windows.iter_mut().zip(jobs) {
                let Some(window) = window.as_mut().filter(|w| !w.done) else {
                    continue;
                };
                if revision > window.last {
                    window.done = true;
                    continue;
                }
                open = true;
                if revision < window.from {
                    continue;
                }
                // A revision is never split: the cap falls between two.
                if window.taken.len() >= CATCH_UP_EVENTS_MAX && window.taken_revision < revision {
                    window.upto = revision - 1;
                    window.capped = true;
                    window.done = true;
                    continue;
                }
                if job.spec.contains(&version.key) && job.spec.wants(version.tombstone) {
                    // Bounded by the jobs' windows, far below u32::MAX.
                    window.taken.push(taken.len() as u32);
                    window.taken_revision = revision;
                    wanted = true;
                    with_prev |= job.spec.prev_kv;
                }
            }
            if wanted {
                taken.push((version, with_prev));
            }
            if open {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        })?;
    }
    let mut changes = Vec::with_capacity(taken.len());
    for (version, with_prev) in taken {
        let prev = if with_prev && !is_create(&version) {
            previous(view, &version.key, version.mod_revision.main - 1)?
        } else {
            None
        };
        changes.push((version, prev));
    }
    let jobs = windows
        .into_iter()
        .map(|window| match window {
            None => JobRead::Compacted(compacted),
            Some(w) => JobRead::Events {
                taken: w.taken,
                upto: w.upto,
                capped: w.capped,
            },
        })
        .collect();
    Ok(CatchUpRead { changes, jobs })
}

impl CatchUpRead {
    /// Job `index`'s outcome, `job` being the job read at that index: what
    /// [`catch_up`] of it alone would give on the same snapshot.
    pub fn outcome(&self, index: usize, job: &CatchUp) -> CatchUpOutcome {
        let Some(read) = self.jobs.get(index) else {
            // Not a job of this read: it has nothing for it.
            return CatchUpOutcome::Events {
                response: None,
                upto: job.from - 1,
            };
        };
        let (taken, upto, capped) = match read {
            JobRead::Compacted(compacted) => {
                return CatchUpOutcome::Compacted {
                    response: compacted_response(job, *compacted),
                }
            }
            JobRead::Events {
                taken,
                upto,
                capped,
            } => (taken, *upto, *capped),
        };
        let events: Vec<_> = taken
            .iter()
            .filter_map(|&i| self.changes.get(i as usize))
            .map(|(version, prev)| {
                let prev = if job.spec.prev_kv { prev.clone() } else { None };
                event(version.clone(), prev)
            })
            .collect();
        let response = (!events.is_empty()).then(|| WatchResponse {
            header: Some(ResponseHeader {
                revision: if capped { upto } else { job.header.revision },
                ..job.header
            }),
            watch_id: job.watch_id,
            events,
            ..Default::default()
        });
        CatchUpOutcome::Events { response, upto }
    }
}

/// The cancel of a watcher whose history from `job.from` is compacted away,
/// at `compacted`.
fn compacted_response(job: &CatchUp, compacted: i64) -> WatchResponse {
    // etcd's compaction notice carries no revision in its header.
    WatchResponse {
        header: Some(ResponseHeader {
            revision: 0,
            ..job.header
        }),
        watch_id: job.watch_id,
        canceled: true,
        compact_revision: if crate::canary::on(crate::canary::Canary::CompactedWatchWithoutRevision)
        {
            0
        } else {
            compacted
        },
        ..Default::default()
    }
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
