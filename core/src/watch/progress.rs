//! Progress notifications: "this stream has every event up to revision P".
//!
//! A `RequestProgress` is answered only when none of the stream's watchers
//! is catching up (otherwise once the last one syncs), each request with
//! its own answer; waiting requests are counted, not queued, and the count
//! is bounded ([`PROGRESS_REQUESTS_WAITING_MAX`]). Periodic notifications
//! (`progress_notify`) go only to synced watchers that had no events since
//! the last round, as etcd's do.

use oxetcd_proto::etcdserverpb::WatchResponse;

use super::registry::{emit, Context};
use super::{StreamId, WatchRegistry, NO_WATCH_ID, PROGRESS_REQUESTS_WAITING_MAX};
use crate::Instant;

impl WatchRegistry {
    /// A `RequestProgress` from the stream: answered at once, or counted
    /// to be answered once none of its watchers is catching up.
    pub(super) fn request_progress(&mut self, stream: StreamId, cx: &mut Context<'_>) {
        let state = self.streams.entry(stream).or_default();
        state.progress_requests = (state.progress_requests + 1).min(PROGRESS_REQUESTS_WAITING_MAX);
        self.release_progress(stream, cx);
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

    /// Answers each of a stream's waiting progress requests once none of
    /// its watchers is catching up.
    pub(super) fn release_progress(&mut self, stream: StreamId, cx: &mut Context<'_>) {
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
}
