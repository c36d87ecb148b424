//! The driver's table of watch streams: where each stream's responses go.
//!
//! Design: every client `Watch` stream has one unbounded channel of
//! [`StreamItem`]s, read in order by the stream's task
//! ([`crate::grpc::WatchService`]), and a shared counter of what is queued
//! in it. The driver thread routes the node's watch outputs into the channel
//! through the stream's [`StreamGate`], which keeps the queue within
//! [`STREAM_QUEUE_BYTES`]: a watcher whose response does not fit is stalled,
//! and the node is told so it re-reads that watcher's history from storage
//! (see `oxetcd_core::watch`). Routing never blocks, so a slow or dead
//! client never holds up the node or other streams.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_channel::mpsc::UnboundedSender;
use oxetcd_core::watch::{queue_cost, CatchUp, Route, StreamGate, StreamId, WatchDelivery};
use oxetcd_core::Input;
use oxetcd_proto::etcdserverpb::WatchResponse;
use std::collections::HashMap;
use tracing::info;

/// Bytes (see [`queue_cost`]) one stream may have queued before its
/// slowest watchers are moved to catch-up from storage. A revision's
/// events are shared by the watchers of a stream that want them, and
/// counted once among them, so each further watcher of the same writes
/// adds only its own [`oxetcd_core::watch::QUEUE_ITEM_BYTES`]: with 64
/// watchers of one prefix on a stream, a stream falls about 3,700
/// revisions of 256-byte values behind before any watcher stalls (a
/// stream of one such watcher, about 40,000). A Kubernetes API server puts
/// every watch of a client on one stream.
pub const STREAM_QUEUE_BYTES: usize = 16 << 20;

/// What a stream's task reads, in order.
#[derive(Debug)]
pub(crate) enum StreamItem {
    /// Send this response (split into fragments if asked and too large).
    Response {
        response: WatchResponse,
        fragment: bool,
    },
    /// Send the deliveries in order, each watcher's consecutive ones
    /// queued together as one response (the events of an apply batch; each
    /// costs its own [`WatchDelivery::cost`] until it is sent).
    Events(Vec<WatchDelivery>),
    /// Read this watcher's history from storage, send it, then report.
    CatchUp(CatchUp),
}

/// The sending half of one stream, owned by the driver thread.
struct StreamRoute {
    items: UnboundedSender<StreamItem>,
    queued: Arc<AtomicUsize>,
    gate: StreamGate,
}

/// Every open watch stream.
#[derive(Default)]
pub(crate) struct WatchRoutes {
    streams: HashMap<StreamId, StreamRoute>,
}

impl WatchRoutes {
    pub(crate) fn open(
        &mut self,
        stream: StreamId,
        items: UnboundedSender<StreamItem>,
        queued: Arc<AtomicUsize>,
    ) {
        self.streams.insert(
            stream,
            StreamRoute {
                items,
                queued,
                gate: StreamGate::default(),
            },
        );
    }

    pub(crate) fn close(&mut self, stream: StreamId) {
        self.streams.remove(&stream);
    }

    /// Routes one response; returns the input to feed the node when the
    /// stream's queue is full.
    pub(crate) fn deliver(
        &mut self,
        stream: StreamId,
        response: WatchResponse,
        fragment: bool,
    ) -> Option<Input> {
        let route = self.streams.get_mut(&stream)?;
        let queued = route.queued.load(Ordering::Acquire);
        match route.gate.route(&response, queued, STREAM_QUEUE_BYTES) {
            Route::Deliver => {
                route
                    .queued
                    .fetch_add(queue_cost(&response), Ordering::AcqRel);
                if response.canceled {
                    route.gate.forget(response.watch_id);
                }
                // A closed channel means the stream is going away; its
                // `WatchClosed` is on the way.
                let _ = route
                    .items
                    .unbounded_send(StreamItem::Response { response, fragment });
                None
            }
            Route::Drop => None,
            Route::Stall {
                watch_id,
                from_revision,
            } => {
                info!(
                    stream,
                    watch_id,
                    from_revision,
                    queued,
                    "watcher fell behind; it catches up from storage"
                );
                Some(Input::WatchStalled {
                    stream,
                    watch_id,
                    from_revision,
                })
            }
        }
    }

    /// Routes a stream's deliveries of one apply batch as one item;
    /// returns the input for each watcher whose delivery did not fit.
    pub(crate) fn deliver_events(
        &mut self,
        stream: StreamId,
        mut deliveries: Vec<WatchDelivery>,
    ) -> Vec<Input> {
        let mut stalls = Vec::new();
        let Some(route) = self.streams.get_mut(&stream) else {
            return stalls;
        };
        let mut queued = route.queued.load(Ordering::Acquire);
        let mut cost = 0;
        // Filtered in place: nearly every delivery is kept.
        deliveries.retain(|delivery| {
            match route.gate.route_events(
                delivery.watch_id,
                delivery.revision(),
                delivery.cost(),
                queued,
                STREAM_QUEUE_BYTES,
            ) {
                Route::Deliver => {
                    queued = queued.saturating_add(delivery.cost());
                    cost += delivery.cost();
                    true
                }
                Route::Drop => false,
                Route::Stall {
                    watch_id,
                    from_revision,
                } => {
                    info!(
                        stream,
                        watch_id,
                        from_revision,
                        queued,
                        "watcher fell behind; it catches up from storage"
                    );
                    stalls.push(Input::WatchStalled {
                        stream,
                        watch_id,
                        from_revision,
                    });
                    false
                }
            }
        });
        if !deliveries.is_empty() {
            route.queued.fetch_add(cost, Ordering::AcqRel);
            // A closed channel: see `deliver`.
            let _ = route.items.unbounded_send(StreamItem::Events(deliveries));
        }
        stalls
    }

    /// Queues a catch-up; the watcher's live responses flow again after it.
    pub(crate) fn catch_up(&mut self, job: CatchUp) {
        let Some(route) = self.streams.get_mut(&job.stream) else {
            return;
        };
        let progress = route.gate.catch_up_routed(job.watch_id);
        let _ = route.items.unbounded_send(StreamItem::CatchUp(job));
        for response in progress {
            route
                .queued
                .fetch_add(queue_cost(&response), Ordering::AcqRel);
            let _ = route.items.unbounded_send(StreamItem::Response {
                response,
                fragment: false,
            });
        }
    }
}
