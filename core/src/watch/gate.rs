//! The runtime's gate on one stream's bounded queue: each watch response
//! is delivered, dropped, or marks its watcher stalled.
//!
//! A stalled watcher's later responses are dropped until its catch-up is
//! routed (the catch-up covers them); stream-wide progress notifications
//! are held back while any watcher is stalled and released after the
//! catch-up, so a stream never claims a revision whose events it has not
//! sent. Writes never wait for a watcher, and one slow watcher never holds
//! back the others.

use std::collections::BTreeSet;

use oxetcd_proto::etcdserverpb::WatchResponse;

use super::{NO_WATCH_ID, PROGRESS_REQUESTS_WAITING_MAX, QUEUE_ITEM_BYTES};

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
    /// (both in bytes, as [`queue_cost`] counts them). A response always
    /// fits an empty queue, so one large revision cannot stall a watcher
    /// forever.
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

/// What a response costs in a stream's queue, in bytes: its encoding and
/// the queue's own [`QUEUE_ITEM_BYTES`]. Bytes, not events, so that the
/// bound holds whatever the values' size.
pub fn queue_cost(response: &WatchResponse) -> usize {
    use prost::Message;
    QUEUE_ITEM_BYTES + response.encoded_len()
}
