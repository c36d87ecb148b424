//! The `etcdserverpb.Watch` service: one bidirectional stream per call, many
//! watchers per stream.
//!
//! Design: the call registers a stream with the driver and returns
//! [`WatchResponses`], a stream that does three things when polled, all on
//! the calling task: forwards the client's requests to the node, yields the
//! responses the driver routed to this stream, in order, and runs the
//! catch-ups queued among them (a snapshot read on a blocking thread) before
//! anything queued after them. Nothing here decides what a watcher sees;
//! that is the node's (see `oxetcd_core::watch`).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_channel::mpsc::UnboundedReceiver;
use futures_util::{Stream, StreamExt};
use oxetcd_core::storage::KvStore;
use oxetcd_core::watch::{self, queue_cost, CatchUp, CatchUpOutcome, StreamId, WatchDelivery};
use oxetcd_core::Error;
use oxetcd_proto::etcdserverpb::watch_server::Watch;
use oxetcd_proto::etcdserverpb::{WatchRequest, WatchResponse};
use tonic::{Status, Streaming};

use super::status_from_error;
use crate::driver::Handle;
use crate::watch_routes::StreamItem;

/// Serves `etcdserverpb.Watch`.
pub struct WatchService<K: KvStore> {
    handle: Handle<K>,
    /// Responses larger than this are fragmented for watchers that asked.
    fragment_bytes: usize,
}

impl<K: KvStore> WatchService<K> {
    /// A service over `handle`. Like etcd, it fragments responses larger
    /// than `max_request_bytes` plus its allowance for gRPC overhead.
    pub fn new(handle: Handle<K>, max_request_bytes: usize) -> Self {
        Self {
            handle,
            fragment_bytes: max_request_bytes.saturating_add(super::GRPC_OVERHEAD_BYTES),
        }
    }
}

#[tonic::async_trait]
impl<K: KvStore> Watch for WatchService<K> {
    type WatchStream = WatchResponses<K>;

    async fn watch(
        &self,
        request: tonic::Request<Streaming<WatchRequest>>,
    ) -> Result<tonic::Response<Self::WatchStream>, Status> {
        let parts = self
            .handle
            .open_watch()
            .map_err(|e| status_from_error(&e))?;
        Ok(tonic::Response::new(WatchResponses {
            handle: self.handle.clone(),
            stream: parts.stream,
            requests: request.into_inner(),
            items: parts.items,
            queued: parts.queued,
            ready: VecDeque::new(),
            deliveries: VecDeque::new(),
            catching_up: None,
            fragment_bytes: self.fragment_bytes,
            done: false,
        }))
    }
}

type CatchUpFuture = Pin<Box<dyn Future<Output = (CatchUp, Result<CatchUpOutcome, Error>)> + Send>>;

/// The responses of one watch stream (see the module docs).
pub struct WatchResponses<K: KvStore> {
    handle: Handle<K>,
    stream: StreamId,
    requests: Streaming<WatchRequest>,
    items: UnboundedReceiver<StreamItem>,
    queued: Arc<AtomicUsize>,
    /// Responses ready to go out, before anything still in `items`.
    ready: VecDeque<WatchResponse>,
    /// Deliveries of a routed batch not yet turned into responses (after
    /// `ready`, before anything still in `items`). Each stays counted in
    /// `queued` until then, so the stream's bound covers them.
    deliveries: VecDeque<WatchDelivery>,
    catching_up: Option<CatchUpFuture>,
    fragment_bytes: usize,
    done: bool,
}

impl<K: KvStore> WatchResponses<K> {
    fn push(&mut self, response: WatchResponse, fragment: bool) {
        if fragment {
            self.ready
                .extend(watch::fragments(response, self.fragment_bytes));
        } else {
            self.ready.push_back(response);
        }
    }
}

// Nothing in it is structurally pinned: the catch-up future is boxed.
impl<K: KvStore> Unpin for WatchResponses<K> {}

impl<K: KvStore> Stream for WatchResponses<K> {
    type Item = Result<WatchResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(response) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(response)));
            }
            // The client's requests, as they come; a closed request stream
            // ends the call, as etcd's does.
            loop {
                match this.requests.poll_next_unpin(cx) {
                    Poll::Ready(Some(Ok(request))) => {
                        this.handle.watch_request(this.stream, request)
                    }
                    Poll::Ready(Some(Err(_))) | Poll::Ready(None) => {
                        this.done = true;
                        return Poll::Ready(None);
                    }
                    Poll::Pending => break,
                }
            }
            // Built here, one at a time, so the copying of shared events
            // is the stream's work and never the node's.
            if let Some(delivery) = this.deliveries.pop_front() {
                this.queued.fetch_sub(delivery.cost(), Ordering::AcqRel);
                this.push(delivery.response(), delivery.fragment);
                continue;
            }
            if let Some(future) = this.catching_up.as_mut() {
                let (job, outcome) = match future.as_mut().poll(cx) {
                    Poll::Ready(done) => done,
                    Poll::Pending => return Poll::Pending,
                };
                this.catching_up = None;
                let outcome = match outcome {
                    Ok(outcome) => outcome,
                    Err(e) => {
                        this.done = true;
                        return Poll::Ready(Some(Err(status_from_error(&e))));
                    }
                };
                match &outcome {
                    CatchUpOutcome::Events {
                        response: Some(response),
                        ..
                    } => this.push(response.clone(), job.spec.fragment),
                    CatchUpOutcome::Events { response: None, .. } => {}
                    CatchUpOutcome::Compacted { response } => this.push(response.clone(), false),
                }
                this.handle.caught_up(outcome.input(&job));
                continue;
            }
            match this.items.poll_next_unpin(cx) {
                Poll::Ready(Some(StreamItem::Response { response, fragment })) => {
                    this.queued
                        .fetch_sub(queue_cost(&response), Ordering::AcqRel);
                    this.push(response, fragment);
                }
                Poll::Ready(Some(StreamItem::Events(deliveries))) => {
                    this.deliveries.extend(deliveries);
                }
                Poll::Ready(Some(StreamItem::CatchUp(job))) => {
                    let handle = this.handle.clone();
                    this.catching_up = Some(Box::pin(async move {
                        let outcome = handle.catch_up(job.clone()).await;
                        (job, outcome)
                    }));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<K: KvStore> Drop for WatchResponses<K> {
    fn drop(&mut self) {
        self.handle.close_watch(self.stream);
    }
}
