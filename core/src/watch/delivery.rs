//! Live events as they leave the node: shared by every watcher that wants
//! the same ones, and encoded once.
//!
//! The events of one revision a watcher wants become a [`RevisionEvents`]
//! — the response header and events, with their protobuf encoding made
//! when they are built. Every watcher that wants the same selection of the
//! revision gets a [`WatchDelivery`] pointing at the same shared events; a
//! stream writes each watcher's response by copying those bytes around the
//! watch ID, so the cost per watcher is a copy, not an encoding.

use std::sync::Arc;

use super::batch::{watch_id_field, watch_id_len};

use oxetcd_proto::etcdserverpb::{ResponseHeader, WatchResponse};
use oxetcd_proto::mvccpb::Event;

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

    /// `header` as encoded (field 1 of a `WatchResponse`).
    pub(super) fn header_field(&self) -> &[u8] {
        &self.encoded[..self.header_bytes]
    }

    /// `events` as encoded (field 11 of a `WatchResponse`, repeated).
    pub(super) fn events_field(&self) -> &[u8] {
        &self.encoded[self.header_bytes..]
    }

    /// The length of [`RevisionEvents::events_field`].
    pub(super) fn events_bytes(&self) -> usize {
        self.encoded.len() - self.header_bytes
    }
}

/// Bytes a queued response is reckoned at in a stream's queue besides its
/// encoding: what the queue's own structures take per response (see
/// [`queue_cost`](super::queue_cost)).
pub const QUEUE_ITEM_BYTES: usize = 64;

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
    /// Its [`WatchDelivery::cost`], reckoned once.
    cost: usize,
}

impl WatchDelivery {
    /// `events` for watcher `watch_id`, sharing them with no other
    /// delivery of its stream.
    pub fn new(watch_id: i64, events: Arc<RevisionEvents>, fragment: bool) -> Self {
        let mut delivery = Self {
            watch_id,
            events,
            fragment,
            cost: 0,
        };
        delivery.share(1);
        delivery
    }

    /// Counts its encoding as shared by `among` deliveries of its stream.
    fn share(&mut self, among: usize) {
        self.cost = QUEUE_ITEM_BYTES + self.encoded_len().div_ceil(among.max(1));
    }

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

    /// What it costs in a stream's queue, in bytes: its share of the
    /// encoding (see `mark_shared`), and the queue's own
    /// [`QUEUE_ITEM_BYTES`]. Unshared, that is
    /// [`queue_cost`](super::queue_cost) of its response.
    pub fn cost(&self) -> usize {
        self.cost
    }

    /// The length of [`WatchDelivery::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        self.events.encoded.len() + watch_id_len(self.watch_id)
    }

    /// Writes the protobuf encoding of [`WatchDelivery::response`], byte
    /// for byte what prost writes for it, from the shared encoding.
    pub fn encode(&self, buf: &mut impl prost::bytes::BufMut) {
        let (id, id_len) = watch_id_field(self.watch_id);
        buf.put_slice(self.events.header_field());
        buf.put_slice(&id[..id_len]);
        buf.put_slice(self.events.events_field());
    }
}

/// Marks each run of consecutive `deliveries` that share one encoding with
/// the run's length, so that a stream's queue counts the encoding once per
/// run ([`WatchDelivery::cost`]). The node queues a stream's deliveries of
/// a revision watcher after watcher, so the watchers that share a
/// revision's events are one run; deliveries that share apart from one
/// another are counted as separate runs, which only overstates the cost.
pub(crate) fn mark_shared(deliveries: &mut [WatchDelivery]) {
    let mut start = 0;
    while start < deliveries.len() {
        let events = Arc::as_ptr(&deliveries[start].events);
        let run = deliveries[start..]
            .iter()
            .take_while(|delivery| Arc::as_ptr(&delivery.events) == events)
            .count();
        if run > 1 {
            for delivery in &mut deliveries[start..start + run] {
                delivery.share(run);
            }
        }
        start += run;
    }
}
