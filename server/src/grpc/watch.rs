//! The `etcdserverpb.Watch` service: one bidirectional stream per call, many
//! watchers per stream.
//!
//! Design: the call registers a stream with the driver and returns
//! [`WatchResponses`], a stream that does three things when polled, all on
//! the calling task: forwards the client's requests to the node, yields the
//! responses the driver routed to this stream, in order, and runs the
//! catch-ups queued among them (a snapshot read on a blocking thread) before
//! anything queued after them. Catch-ups queued one behind another (the
//! watchers of a stream that fell behind together) are read in one pass
//! over storage, and their responses built one at a time as they go out.
//! Nothing here decides what a watcher sees; that is the node's (see
//! `oxetcd_core::watch`).
//!
//! Live events leave without being encoded here: the node encodes each
//! revision's shared events once, and [`WatchCodec`] writes a watcher's
//! response by copying those bytes around its watch ID, so fanning one
//! revision out to many watchers costs a copy per watcher. That is why this
//! service has its own [`WatchServer`] rather than the generated one, whose
//! codec can only encode `WatchResponse` messages. The client's requests
//! are polled once per batch of routed deliveries, not once per response:
//! polling them locks the connection's shared state.
//!
//! When the stream is polled it takes every batch of deliveries already
//! routed to it, up to the next response of another kind, and sends each
//! watcher's queued revisions as one response ([`watch::batch`]): a client
//! that reads slower than revisions are applied gets fewer, larger
//! responses. A stream that fell behind its writers gathers for a while
//! before it sends ([`super::watch_pace`]); one that keeps up sends each
//! apply's events as they come. HTTP/2 frames follow: tonic
//! hands HTTP/2 one piece per poll that finds something to send (or per
//! [`WATCH_YIELD_BYTES`]), each written as DATA frames of up to the
//! client's frame size, so what was queued together leaves in as few
//! frames as the client allows.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_channel::mpsc::UnboundedReceiver;
use futures_util::{Stream, StreamExt};
use oxetcd_core::storage::KvStore;
use oxetcd_core::watch::{
    self, queue_cost, CatchUp, CatchUpRead, StreamId, WatchBatch, WatchDelivery,
    CATCH_UP_REVISIONS_MAX,
};
use oxetcd_core::Error;
use oxetcd_proto::etcdserverpb::{WatchRequest, WatchResponse};
use prost::bytes::BufMut;
use prost::Message;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::{Status, Streaming};
use tonic_prost::ProstDecoder;

use super::credentials::Gate;
use super::status_from_error;
use super::watch_pace::Pace;
use crate::driver::Handle;
use crate::watch_routes::StreamItem;
use oxetcd_core::auth::Credentials;

/// The runtime's timers, for pacing streams.
pub type WatchTimer = Arc<dyn hyper::rt::Timer + Send + Sync>;

/// Serves `etcdserverpb.Watch`.
pub struct WatchService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
    /// Responses larger than this are fragmented for watchers that asked.
    fragment_bytes: usize,
    timer: WatchTimer,
}

impl<K: KvStore> WatchService<K> {
    /// A service over `handle` that splits the responses of watchers that
    /// ask at `fragment_bytes` ([`oxetcd_core::grpc_message_bytes`]) and
    /// paces busy streams on `timer`.
    pub fn new(handle: Handle<K>, gate: Gate, fragment_bytes: usize, timer: WatchTimer) -> Self {
        Self {
            handle,
            gate,
            fragment_bytes,
            timer,
        }
    }
}

/// The gRPC path of the only method.
const WATCH_PATH: &str = "/etcdserverpb.Watch/Watch";

/// `etcdserverpb.Watch` over HTTP/2, as the generated server would serve
/// it, but with [`WatchCodec`] (see the module docs).
pub struct WatchServer<K: KvStore> {
    service: Arc<WatchService<K>>,
    max_decoding_message_size: usize,
}

impl<K: KvStore> WatchServer<K> {
    /// Serves `service`, decoding requests up to `max_decoding_message_size`.
    pub fn new(service: WatchService<K>, max_decoding_message_size: usize) -> Self {
        Self {
            service: Arc::new(service),
            max_decoding_message_size,
        }
    }
}

impl<K: KvStore> Clone for WatchServer<K> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            max_decoding_message_size: self.max_decoding_message_size,
        }
    }
}

impl<K: KvStore, B> Service<http::Request<B>> for WatchServer<K>
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != WATCH_PATH {
            let status = Status::unimplemented(format!("unknown method {}", request.uri().path()));
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let call = WatchCall(self.service.clone());
        let max_decoding = self.max_decoding_message_size;
        Box::pin(async move {
            // Responses are as large as the data asked for, as in etcd.
            let mut grpc = tonic::server::Grpc::new(WatchCodec)
                .apply_max_message_size_config(Some(max_decoding), Some(usize::MAX));
            Ok(grpc.streaming(call, request).await)
        })
    }
}

/// One call of the method.
struct WatchCall<K: KvStore>(Arc<WatchService<K>>);

impl<K: KvStore> Service<tonic::Request<Streaming<WatchRequest>>> for WatchCall<K> {
    type Response = tonic::Response<WatchResponses<K>>;
    type Error = Status;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<Streaming<WatchRequest>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.watch(request) })
    }
}

impl<K: KvStore> WatchService<K> {
    fn watch(
        &self,
        request: tonic::Request<Streaming<WatchRequest>>,
    ) -> Result<tonic::Response<WatchResponses<K>>, Status> {
        let credentials = self.gate.credentials(&request);
        let parts = self
            .handle
            .open_watch()
            .map_err(|e| status_from_error(&e))?;
        Ok(tonic::Response::new(WatchResponses {
            handle: self.handle.clone(),
            credentials,
            stream: parts.stream,
            requests: request.into_inner(),
            items: parts.items,
            queued: parts.queued,
            ready: VecDeque::new(),
            batches: Vec::new().into_iter(),
            held: None,
            gathering: Vec::new(),
            gathered_last: 0,
            pace: Pace::default(),
            timer: self.timer.clone(),
            due: None,
            catching_up: None,
            caught_up: None,
            fragment_bytes: self.fragment_bytes,
            done: false,
        }))
    }
}

/// One message of a watch stream.
#[derive(Debug)]
pub enum WatchMessage {
    /// A response built in full (created, canceled, progress, catch-up).
    Response(WatchResponse),
    /// A watcher's live events of one or more revisions, written from
    /// their shared encoding.
    Batch {
        /// The events.
        batch: WatchBatch,
        /// Other batches follow it at once (see [`make_room`]).
        more: bool,
    },
}

/// Encodes [`WatchMessage`]s, decodes `WatchRequest`s.
#[derive(Clone, Copy, Debug, Default)]
pub struct WatchCodec;

impl Codec for WatchCodec {
    type Encode = WatchMessage;
    type Decode = WatchRequest;
    type Encoder = WatchEncoder;
    type Decoder = ProstDecoder<WatchRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        WatchEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

/// Bytes a stream gathers before it hands them to HTTP/2, unless it has
/// nothing more to send: tonic's default. Each piece is an allocation of
/// its own that lives until HTTP/2 has written it, and a busy stream hands
/// over hundreds of MiB a second. At 128 KiB a piece the allocator kept
/// about 19 MiB more resident under the watch fan-out benchmark (peak RSS
/// 83 against 64 MiB) for no measurable saving in CPU: the connection's
/// lock, wake-up and write per piece are already shared by the pieces of
/// every stream that a flush finds queued.
const WATCH_YIELD_BYTES: usize = 32 * 1024;

/// A stream's first encode buffer (tonic's default); it grows as needed
/// ([`make_room`]).
const WATCH_BUFFER_BYTES: usize = 8 * 1024;

/// Makes room in `dst` for a message of `len` bytes. In a burst (`more`
/// messages follow at once) a buffer that lacks the room gets room for a
/// whole piece ([`WATCH_YIELD_BYTES`]), so the buffer of a piece is
/// allocated once or twice rather than doubled from [`WATCH_BUFFER_BYTES`]
/// up past the piece's size, copying what it holds each time (8, 16, 32
/// then 64 KiB): profiled under the watch fan-out benchmark, the share of
/// the server's CPU spent copying fell by about a point (16.9 to 15.7 %
/// in one pair of runs; the run-to-run spread is as large). Room for the
/// message and a whole piece after it (so that a piece is never regrown)
/// took a further 3 % of samples off the copying, but raised the fan-out's
/// peak RSS by 5-10 MiB (46-51 against 50-57 MiB) for no events/s that
/// alternating runs could tell apart. Otherwise it gets the message's room
/// only, so a stream that sends now and then keeps a small buffer.
fn make_room(dst: &mut EncodeBuf<'_>, len: usize, more: bool) {
    // The spare room (tonic's buffer is a `BytesMut`, which adds 64 bytes
    // when it has none).
    if dst.chunk_mut().len() < len {
        dst.reserve(if more {
            len.max(WATCH_YIELD_BYTES)
        } else {
            len
        });
    }
}

/// The encoding half of [`WatchCodec`].
#[derive(Clone, Copy, Debug, Default)]
pub struct WatchEncoder;

impl Encoder for WatchEncoder {
    type Item = WatchMessage;
    type Error = Status;

    fn encode(&mut self, item: WatchMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        match item {
            WatchMessage::Response(response) => {
                make_room(dst, response.encoded_len(), false);
                // The buffer grows as needed, so encoding cannot run out of room.
                response
                    .encode(dst)
                    .map_err(|e| Status::internal(format!("encoding a watch response: {e}")))
            }
            WatchMessage::Batch { batch, more } => {
                make_room(dst, batch.encoded_len(), more);
                batch.encode(dst);
                Ok(())
            }
        }
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(WATCH_BUFFER_BYTES, WATCH_YIELD_BYTES)
    }
}

type CatchUpFuture =
    Pin<Box<dyn Future<Output = Result<(Vec<CatchUp>, CatchUpRead), Error>> + Send>>;

/// Catch-ups read together, handed out one response at a time; each job
/// with its index in `read`.
struct CaughtUp {
    read: CatchUpRead,
    jobs: std::iter::Enumerate<std::vec::IntoIter<CatchUp>>,
}

/// Catch-ups one read takes at most: etcd's `maxWatchersPerSync`.
const CATCH_UP_GROUP_MAX: usize = 512;

/// The responses of one watch stream (see the module docs).
pub struct WatchResponses<K: KvStore> {
    handle: Handle<K>,
    /// Who opened the stream: every create on it is checked as them.
    credentials: Credentials,
    stream: StreamId,
    requests: Streaming<WatchRequest>,
    items: UnboundedReceiver<StreamItem>,
    queued: Arc<AtomicUsize>,
    /// Responses ready to go out, before anything still in `items`.
    ready: VecDeque<WatchResponse>,
    /// Batches of routed deliveries not yet sent (after `ready`, before
    /// `held` and anything still in `items`). Each stays counted in
    /// `queued` until then, so the stream's bound covers them.
    batches: std::vec::IntoIter<WatchBatch>,
    /// The item that ended the last run of deliveries taken off `items`,
    /// to be handled before anything still in `items`.
    held: Option<StreamItem>,
    /// Deliveries taken off `items`, waiting for their pace (before
    /// `held`); counted in `queued` until sent.
    gathering: Vec<WatchDelivery>,
    /// How many deliveries the last send took: the room `gathering` starts
    /// with, so a stream's steady bursts gather without regrowing it.
    gathered_last: usize,
    pace: Pace,
    timer: WatchTimer,
    /// Fires when `gathering` is due.
    due: Option<Pin<Box<dyn hyper::rt::Sleep>>>,
    /// A group of catch-ups being read: the stream sends nothing queued
    /// after them until it has sent their responses.
    catching_up: Option<CatchUpFuture>,
    caught_up: Option<CaughtUp>,
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

    /// Gathers `deliveries` and every run of deliveries already queued
    /// behind them; sends them now or arms the pace's timer.
    fn gather(&mut self, deliveries: Vec<WatchDelivery>, cx: &mut Context<'_>) {
        if self.gathering.is_empty() {
            self.gathering
                .reserve(self.gathered_last.max(deliveries.len()));
        }
        self.gathering.extend(deliveries);
        let applies =
            1 + take_queued_events(&mut self.items, &mut self.gathering, &mut self.held, cx);
        let now = Instant::now();
        // Sent now, whatever the pace, when another kind of response waits
        // behind them or the queue is half its bound (before the driver
        // would stall watchers).
        match self.pace.gathered(applies, now) {
            Some(due)
                if self.held.is_none()
                    && self.queued.load(Ordering::Acquire) < GATHERED_BYTES_MAX
                    && self.gathering.len() < GATHERED_MAX =>
            {
                if self.due.is_none() {
                    self.due = Some(self.timer.sleep_until(due));
                }
            }
            _ => self.send_gathered(now),
        }
    }

    /// `first` and the catch-ups queued right behind it whose windows start
    /// near its own, to be read in one pass: the watchers of a stream that
    /// fell behind together want the same history. Stops at anything else,
    /// which it holds for after them; never waits.
    fn group_catch_ups(&mut self, first: CatchUp, cx: &mut Context<'_>) -> Vec<CatchUp> {
        let from = first.from;
        let near = |job: &CatchUp| job.from.abs_diff(from) < CATCH_UP_REVISIONS_MAX as u64;
        let mut jobs = vec![first];
        while jobs.len() < CATCH_UP_GROUP_MAX {
            match self.items.poll_next_unpin(cx) {
                Poll::Ready(Some(StreamItem::CatchUp(job))) if near(&job) => jobs.push(job),
                Poll::Ready(Some(other)) => {
                    self.held = Some(other);
                    break;
                }
                // The end of the route is seen again on the next poll.
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        jobs
    }

    /// Sends what was gathered, each watcher's revisions as one response.
    fn send_gathered(&mut self, now: Instant) {
        self.due = None;
        self.pace.sent(now);
        self.gathered_last = self.gathering.len().min(BATCHED_DELIVERIES_MAX);
        let deliveries = std::mem::take(&mut self.gathering);
        self.batches = watch::batch(deliveries, self.fragment_bytes).into_iter();
    }
}

// Nothing in it is structurally pinned: the catch-up future is boxed.
impl<K: KvStore> Unpin for WatchResponses<K> {}

impl<K: KvStore> Stream for WatchResponses<K> {
    type Item = Result<WatchMessage, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(response) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(WatchMessage::Response(response))));
            }
            if let Some(batch) = this.batches.next() {
                this.queued.fetch_sub(batch.cost(), Ordering::AcqRel);
                // Only a batch of one revision can be this large.
                if batch.fragment
                    && batch.events() > 1
                    && batch.encoded_len() >= this.fragment_bytes
                {
                    this.push(batch.response(), true);
                    continue;
                }
                let more = this.batches.len() > 0;
                return Poll::Ready(Some(Ok(WatchMessage::Batch { batch, more })));
            }
            // The client's requests, as they come; a closed request stream
            // ends the call, as etcd's does.
            loop {
                match this.requests.poll_next_unpin(cx) {
                    Poll::Ready(Some(Ok(request))) => {
                        this.handle
                            .watch_request(this.stream, request, this.credentials.clone())
                    }
                    Poll::Ready(Some(Err(_))) | Poll::Ready(None) => {
                        this.done = true;
                        return Poll::Ready(None);
                    }
                    Poll::Pending => break,
                }
            }
            if let Some(future) = this.catching_up.as_mut() {
                let read = match future.as_mut().poll(cx) {
                    Poll::Ready(read) => read,
                    Poll::Pending => return Poll::Pending,
                };
                this.catching_up = None;
                match read {
                    Ok((jobs, read)) => {
                        this.caught_up = Some(CaughtUp {
                            read,
                            jobs: jobs.into_iter().enumerate(),
                        })
                    }
                    Err(e) => {
                        this.done = true;
                        return Poll::Ready(Some(Err(status_from_error(&e))));
                    }
                }
                continue;
            }
            // One job's response at a time: the next is built once the
            // last has gone, so a group's responses are never all in memory.
            if let Some(group) = this.caught_up.as_mut() {
                let Some((index, job)) = group.jobs.next() else {
                    this.caught_up = None;
                    continue;
                };
                let outcome = group.read.outcome(index, &job);
                let (response, input) = outcome.into_parts(&job);
                if let Some((response, fragment)) = response {
                    this.push(response, fragment);
                }
                this.handle.caught_up(input);
                continue;
            }
            let next = match this.held.take() {
                Some(item) => Poll::Ready(Some(item)),
                None => this.items.poll_next_unpin(cx),
            };
            if !this.gathering.is_empty() {
                // Gathered events leave before anything queued after them.
                match next {
                    Poll::Ready(Some(StreamItem::Events(deliveries))) => {
                        this.gather(deliveries, cx);
                    }
                    Poll::Ready(other) => {
                        this.held = other;
                        this.send_gathered(Instant::now());
                    }
                    Poll::Pending => {
                        let due = this
                            .due
                            .as_mut()
                            .is_none_or(|due| due.as_mut().poll(cx).is_ready());
                        if !due {
                            return Poll::Pending;
                        }
                        this.send_gathered(Instant::now());
                    }
                }
                continue;
            }
            match next {
                Poll::Ready(Some(StreamItem::Response { response, fragment })) => {
                    this.queued
                        .fetch_sub(queue_cost(&response), Ordering::AcqRel);
                    this.push(response, fragment);
                }
                Poll::Ready(Some(StreamItem::Events(deliveries))) => {
                    // Taken only once the last batches are sent.
                    this.gather(deliveries, cx);
                }
                Poll::Ready(Some(StreamItem::CatchUp(job))) => {
                    let jobs = this.group_catch_ups(job, cx);
                    let handle = this.handle.clone();
                    this.catching_up =
                        Some(Box::pin(async move { handle.catch_up_group(jobs).await }));
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

/// Deliveries one poll takes off a stream's route at most, to batch them,
/// so one poll's work stays bounded even while the driver keeps routing.
const BATCHED_DELIVERIES_MAX: usize = 8_192;

/// Queued bytes at which a paced stream sends without waiting for its
/// pace: half the stream's queue bound, so pacing never makes the driver
/// stall a watcher that keeps up.
const GATHERED_BYTES_MAX: usize = crate::watch_routes::STREAM_QUEUE_BYTES / 2;

/// Gathered deliveries at which a paced stream sends without waiting for
/// its pace, so what it holds stays bounded in count too.
const GATHERED_MAX: usize = BATCHED_DELIVERIES_MAX / 2;

/// Appends to `deliveries` the deliveries already routed to the stream, up
/// to the first item of another kind, which it puts in `held`; never waits.
/// Returns how many runs (applies) it took.
fn take_queued_events(
    items: &mut UnboundedReceiver<StreamItem>,
    deliveries: &mut Vec<WatchDelivery>,
    held: &mut Option<StreamItem>,
    cx: &mut Context<'_>,
) -> usize {
    let mut runs = 0;
    while deliveries.len() < BATCHED_DELIVERIES_MAX {
        match items.poll_next_unpin(cx) {
            Poll::Ready(Some(StreamItem::Events(more))) => {
                deliveries.extend(more);
                runs += 1;
            }
            Poll::Ready(Some(other)) => {
                *held = Some(other);
                break;
            }
            // The end of the route is seen again on the next poll.
            Poll::Ready(None) | Poll::Pending => break,
        }
    }
    runs
}

impl<K: KvStore> Drop for WatchResponses<K> {
    fn drop(&mut self) {
        self.handle.close_watch(self.stream);
    }
}
