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

use super::batch::watch_id_field;

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
}

impl WatchDelivery {
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

    /// What it costs in a stream's queue, as [`queue_cost`](super::queue_cost) of its response.
    pub fn cost(&self) -> usize {
        1 + self.events.events.len()
    }

    /// The length of [`WatchDelivery::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        self.events.encoded.len() + watch_id_field(self.watch_id).1
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
