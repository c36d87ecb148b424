//! One watcher the server opens for itself, on a client's behalf: how a
//! waiting `Campaign` or `Lock` learns that its predecessor's key is gone,
//! and how `Observe` follows the leader.
//!
//! Design. It is a watch stream like a client's (see
//! [`super::watch`]): registered with the driver, fed by the node's
//! watch outputs through the same bounded route, its catch-ups read from
//! storage on a blocking thread. It holds one watcher, created with the
//! caller's credentials so the node checks read permission as for the
//! client's own watch. Nothing here polls: [`KeyWatch::next`] waits for
//! what the driver routes. Dropping it closes the stream.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_channel::mpsc::UnboundedReceiver;
use futures_util::StreamExt;
use oxetcd_core::storage::KvStore;
use oxetcd_core::watch::{queue_cost, StreamId};
use oxetcd_core::Error;
use oxetcd_proto::etcdserverpb::{watch_request, WatchCreateRequest, WatchRequest, WatchResponse};
use tonic::Status;

use super::caller::{as_client_error, recipe_error, Caller};
use crate::driver::Handle;
use crate::watch_routes::StreamItem;

/// A single watcher on a stream of the server's own.
pub(crate) struct KeyWatch<K: KvStore> {
    handle: Handle<K>,
    stream: StreamId,
    items: UnboundedReceiver<StreamItem>,
    queued: Arc<AtomicUsize>,
    /// Responses taken off the route, not yet returned.
    ready: VecDeque<WatchResponse>,
}

impl<K: KvStore> KeyWatch<K> {
    /// Opens a stream and creates the watcher `create` on it, as `caller`.
    pub(crate) fn open(caller: &Caller<K>, create: WatchCreateRequest) -> Result<Self, Status> {
        let handle = caller.handle().clone();
        let parts = handle.open_watch().map_err(|e| as_client_error(&e))?;
        let request = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(create)),
        };
        handle.watch_request(parts.stream, request, caller.credentials().clone());
        Ok(Self {
            handle,
            stream: parts.stream,
            items: parts.items,
            queued: parts.queued,
            ready: VecDeque::new(),
        })
    }

    /// The next response that carries events. A cancelled watcher (its
    /// history compacted, or refused) is an error with etcd's client's
    /// words for it, as is the stream going away with the server.
    pub(crate) async fn next(&mut self) -> Result<WatchResponse, Status> {
        loop {
            while let Some(response) = self.ready.pop_front() {
                if response.canceled {
                    return Err(cancelled(&response));
                }
                if !response.events.is_empty() {
                    return Ok(response);
                }
            }
            match self.items.next().await {
                Some(StreamItem::Response { response, .. }) => {
                    self.queued
                        .fetch_sub(queue_cost(&response), Ordering::AcqRel);
                    self.ready.push_back(response);
                }
                Some(StreamItem::Events(deliveries)) => {
                    for delivery in deliveries {
                        self.queued.fetch_sub(delivery.cost(), Ordering::AcqRel);
                        self.ready.push_back(delivery.response());
                    }
                }
                Some(StreamItem::CatchUp(job)) => {
                    let outcome = self
                        .handle
                        .catch_up(job.clone())
                        .await
                        .map_err(|e| as_client_error(&e))?;
                    let (response, input) = outcome.into_parts(&job);
                    if let Some((response, _fragment)) = response {
                        self.ready.push_back(response);
                    }
                    self.handle.caught_up(input);
                }
                None => return Err(as_client_error(&Error::Stopped)),
            }
        }
    }
}

impl<K: KvStore> Drop for KeyWatch<K> {
    fn drop(&mut self) {
        self.handle.close_watch(self.stream);
    }
}

/// What etcd's client reports for a watcher the server cancelled.
fn cancelled(response: &WatchResponse) -> Status {
    if response.compact_revision != 0 {
        as_client_error(&Error::Compacted)
    } else if !response.cancel_reason.is_empty() {
        recipe_error(response.cancel_reason.clone())
    } else {
        as_client_error(&Error::FutureRevision)
    }
}
