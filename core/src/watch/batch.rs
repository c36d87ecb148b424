//! Batching: the live events a stream has queued for one watcher, sent as
//! one response.
//!
//! The node hands a stream one [`WatchDelivery`] per watcher and revision.
//! When a stream's client reads slower than revisions are applied, several
//! of a watcher's deliveries wait in the stream's queue at once; sending
//! each as its own response costs the client a message (and its per-message
//! work) per revision. [`batch`] folds a watcher's consecutive waiting
//! deliveries into one [`WatchBatch`] — one response with the events of
//! every revision in order, under the header of the last — as etcd sends a
//! watcher that fell behind all events of a stretch of revisions at once.
//!
//! Guarantees: a watcher's events keep their order; a revision's events
//! stay in one response; a batch holds at most [`CATCH_UP_REVISIONS_MAX`]
//! revisions (etcd's `watchBatchMaxRevs`) and, when it holds more than one,
//! stays below the fragment limit, so only a single revision can ever need
//! fragmenting, as before. Only what is already queued is batched: nothing
//! waits to be batched. Responses of different watchers may be reordered
//! relative to each other, which no client can observe per watcher; the
//! caller batches only between the stream's other responses (creates,
//! cancels, progress, catch-ups), never across them.

use std::collections::BTreeMap;
use std::sync::Arc;

use oxetcd_proto::etcdserverpb::WatchResponse;

use super::{RevisionEvents, WatchDelivery, CATCH_UP_REVISIONS_MAX};

/// One watcher's events of one or more consecutive queued revisions, sent
/// as one response (see the module docs). Made by [`batch`].
#[derive(Clone, Debug, PartialEq)]
pub struct WatchBatch {
    /// The watcher.
    pub watch_id: i64,
    /// The watcher asked for fragmented responses.
    pub fragment: bool,
    /// The shared events of each revision, in revision order.
    revisions: Vec<Arc<RevisionEvents>>,
    /// Bytes of every revision's events as encoded (field 11 of each).
    events_bytes: usize,
    /// Events in all revisions.
    events: usize,
    /// The sum of its deliveries' [`WatchDelivery::cost`].
    cost: usize,
}

impl From<WatchDelivery> for WatchBatch {
    fn from(delivery: WatchDelivery) -> Self {
        let events_bytes = delivery.events.events_bytes();
        let events = delivery.events.events().len();
        let cost = delivery.cost();
        Self {
            watch_id: delivery.watch_id,
            fragment: delivery.fragment,
            revisions: vec![delivery.events],
            events_bytes,
            events,
            cost,
        }
    }
}

impl WatchBatch {
    /// The revisions it holds, in order; never empty.
    pub fn revisions(&self) -> &[Arc<RevisionEvents>] {
        &self.revisions
    }

    /// Events in all its revisions.
    pub fn events(&self) -> usize {
        self.events
    }

    /// What it costs in a stream's queue: the sum of its deliveries'
    /// [`WatchDelivery::cost`].
    pub fn cost(&self) -> usize {
        self.cost
    }

    /// The watcher's response, with the last revision's header; copies the
    /// shared events.
    pub fn response(&self) -> WatchResponse {
        WatchResponse {
            header: Some(*self.last().header()),
            watch_id: self.watch_id,
            events: self
                .revisions
                .iter()
                .flat_map(|revision| revision.events().iter().cloned())
                .collect(),
            ..Default::default()
        }
    }

    /// The length of [`WatchBatch::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        self.last().header_field().len() + watch_id_len(self.watch_id) + self.events_bytes
    }

    /// Writes the protobuf encoding of [`WatchBatch::response`], byte for
    /// byte what prost writes for it, from the shared encodings.
    pub fn encode(&self, buf: &mut impl prost::bytes::BufMut) {
        let (id, id_len) = watch_id_field(self.watch_id);
        buf.put_slice(self.last().header_field());
        buf.put_slice(&id[..id_len]);
        for revision in &self.revisions {
            buf.put_slice(revision.events_field());
        }
    }

    fn last(&self) -> &RevisionEvents {
        // Never empty: made from a delivery, and only ever extended.
        &self.revisions[self.revisions.len() - 1]
    }

    /// Adds `delivery` if it follows the last revision and the batch stays
    /// within its limits (see the module docs); gives it back otherwise.
    fn extend(&mut self, delivery: WatchDelivery, max_bytes: usize) -> Option<WatchDelivery> {
        let bytes = delivery.events.events_bytes();
        // The batch's length with it: its header replaces the last one's.
        let len = delivery.events.header_field().len()
            + watch_id_len(self.watch_id)
            + self.events_bytes.saturating_add(bytes);
        let fits = self.revisions.len() < CATCH_UP_REVISIONS_MAX as usize
            && delivery.revision() > self.last().header().revision
            && len < max_bytes;
        if !fits {
            return Some(delivery);
        }
        self.events += delivery.events.events().len();
        self.events_bytes += bytes;
        self.cost += delivery.cost();
        self.revisions.push(delivery.events);
        None
    }
}

/// Folds each watcher's queued `deliveries` (in the order they were
/// queued) into as few responses as the limits allow: every delivery of a
/// watcher joins that watcher's latest batch if it fits, and starts a new
/// one, after every batch made so far, if not. A batch of more than one
/// revision stays below `max_bytes`, the stream's fragment limit. Batches
/// come out in the order of their first delivery.
pub fn batch(
    deliveries: impl IntoIterator<Item = WatchDelivery>,
    max_bytes: usize,
) -> Vec<WatchBatch> {
    let mut batches: Vec<WatchBatch> = Vec::new();
    // Each watcher's latest batch, by index in `batches`, in the order the
    // watchers first came; `slot_of` finds a watcher's slot. Ordered, not
    // hashed: clients choose watch IDs.
    let mut slots: Vec<(i64, usize)> = Vec::new();
    let mut slot_of: BTreeMap<i64, usize> = BTreeMap::new();
    // A stream's deliveries come revision by revision, each revision's in
    // the same watcher order, so the slot after the last one used is
    // nearly always the next one wanted: one comparison, no search.
    let mut guess = 0;
    for delivery in deliveries {
        let id = delivery.watch_id;
        let slot = match slots.get(guess) {
            Some(&(guessed, _)) if guessed == id => Some(guess),
            _ => slot_of.get(&id).copied(),
        };
        let rest = match slot {
            Some(slot) => {
                guess = if slot + 1 == slots.len() { 0 } else { slot + 1 };
                batches[slots[slot].1].extend(delivery, max_bytes)
            }
            None => {
                slot_of.insert(id, slots.len());
                slots.push((id, batches.len()));
                guess = 0;
                Some(delivery)
            }
        };
        if let Some(delivery) = rest {
            if let Some(slot) = slot {
                slots[slot].1 = batches.len();
            }
            batches.push(WatchBatch::from(delivery));
        }
    }
    batches
}

/// A `WatchResponse`'s field 2 (`watch_id`, varint) key byte.
const WATCH_ID_KEY: u8 = 2 << 3;

/// The length of [`watch_id_field`], without encoding it.
pub(super) fn watch_id_len(watch_id: i64) -> usize {
    if watch_id == 0 {
        0
    } else {
        1 + prost::encoding::encoded_len_varint(watch_id as u64)
    }
}

/// Field 2 as encoded, and its length (none for ID 0, proto3's default).
pub(super) fn watch_id_field(watch_id: i64) -> ([u8; 11], usize) {
    let mut field = [0; 11];
    if watch_id == 0 {
        return (field, 0);
    }
    field[0] = WATCH_ID_KEY;
    let mut rest = &mut field[1..];
    // An int64 is encoded as its two's complement u64.
    prost::encoding::encode_varint(watch_id as u64, &mut rest);
    let unused = rest.len();
    (field, field.len() - unused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxetcd_proto::etcdserverpb::ResponseHeader;
    use oxetcd_proto::mvccpb::{Event, KeyValue};
    use prost::Message;

    fn revision(revision: i64, keys: &[&str], value_bytes: usize) -> Arc<RevisionEvents> {
        let header = ResponseHeader {
            cluster_id: 7,
            member_id: 8,
            revision,
            raft_term: 2,
        };
        let events = keys
            .iter()
            .map(|key| Event {
                kv: Some(KeyValue {
                    key: key.as_bytes().to_vec(),
                    mod_revision: revision,
                    value: vec![b'v'; value_bytes],
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        Arc::new(RevisionEvents::new(header, events))
    }

    fn delivery(watch_id: i64, events: &Arc<RevisionEvents>) -> WatchDelivery {
        WatchDelivery::new(watch_id, events.clone(), false)
    }

    fn encoded(batch: &WatchBatch) -> Vec<u8> {
        let mut out = Vec::new();
        batch.encode(&mut out);
        assert_eq!(out.len(), batch.encoded_len());
        out
    }

    #[test]
    fn a_watchers_queued_revisions_become_one_response() {
        let revisions: Vec<_> = (10..20).map(|r| revision(r, &["a", "b"], 3)).collect();
        // Two watchers (one with ID 0, which proto3 leaves out) see every
        // revision, interleaved as the node queues them.
        let deliveries = revisions
            .iter()
            .flat_map(|r| [delivery(0, r), delivery(300, r)]);
        let batches = batch(deliveries, 1 << 20);
        assert_eq!(batches.len(), 2);
        for (batch, id) in batches.iter().zip([0, 300]) {
            assert_eq!(batch.watch_id, id);
            assert_eq!(batch.events(), 20);
            let cost: usize = revisions.iter().map(|r| delivery(id, r).cost()).sum();
            assert_eq!(batch.cost(), cost);
            let response = batch.response();
            assert_eq!(response.header.map(|h| h.revision), Some(19));
            let revs: Vec<i64> = response
                .events
                .iter()
                .filter_map(|e| e.kv.as_ref().map(|kv| kv.mod_revision))
                .collect();
            let expected: Vec<i64> = (10..20).flat_map(|r| [r, r]).collect();
            assert_eq!(revs, expected);
            assert_eq!(encoded(batch), response.encode_to_vec());
        }
    }

    #[test]
    fn a_single_delivery_encodes_as_before() {
        let r = revision(5, &["k"], 10);
        let one = delivery(-12, &r);
        let mut before = Vec::new();
        one.encode(&mut before);
        let batches = batch([one.clone()], 1 << 20);
        assert_eq!(batches.len(), 1);
        assert_eq!(encoded(&batches[0]), before);
        assert_eq!(batches[0].response(), one.response());
        assert_eq!(batches[0].cost(), one.cost());
    }

    #[test]
    fn batches_stay_below_the_fragment_limit_and_keep_revisions_whole() {
        // Each revision is about 1 KiB; the limit holds about three.
        let revisions: Vec<_> = (1..=10).map(|r| revision(r, &["x", "y"], 500)).collect();
        let max_bytes = 3_300;
        let batches = batch(revisions.iter().map(|r| delivery(1, r)), max_bytes);
        assert!(
            batches.len() >= 3 && batches.len() < 10,
            "{}",
            batches.len()
        );
        let mut next = 1;
        for batch in &batches {
            assert!(batch.encoded_len() < max_bytes, "{}", batch.encoded_len());
            for r in batch.revisions() {
                assert_eq!(r.header().revision, next);
                assert_eq!(r.events().len(), 2);
                next += 1;
            }
        }
        assert_eq!(next, 11);
        // A revision larger than the limit goes alone, to be fragmented.
        let big = revision(11, &["x", "y"], 4_000);
        let small = revision(12, &["z"], 1);
        let batches = batch([delivery(1, &big), delivery(1, &small)], max_bytes);
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].revisions().len(), 1);
    }

    /// Random runs of three watchers' deliveries of random sizes: each
    /// watcher's batches, in order, hold exactly its deliveries in order,
    /// and every batch keeps to the limits.
    #[test]
    fn any_interleaving_keeps_each_watchers_order_and_the_limits() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for _ in 0..200 {
            let max_bytes = 200 + next(2_000) as usize;
            let mut deliveries = Vec::new();
            let mut rev = 1;
            for _ in 0..next(60) {
                rev += 1 + next(3) as i64;
                let keys = ["a", "b", "c"];
                let shared = revision(rev, &keys[..1 + next(3) as usize], next(400) as usize);
                for watch_id in 0..3 {
                    if next(3) > 0 {
                        deliveries.push(delivery(watch_id, &shared));
                    }
                }
            }
            let batches = batch(deliveries.clone(), max_bytes);
            assert_eq!(batches, by_search(deliveries.clone(), max_bytes));
            assert_eq!(
                batches.iter().map(WatchBatch::cost).sum::<usize>(),
                deliveries.iter().map(WatchDelivery::cost).sum::<usize>()
            );
            for watch_id in 0..3 {
                let sent: Vec<i64> = batches
                    .iter()
                    .filter(|b| b.watch_id == watch_id)
                    .flat_map(|b| b.revisions().iter().map(|r| r.header().revision))
                    .collect();
                let queued: Vec<i64> = deliveries
                    .iter()
                    .filter(|d| d.watch_id == watch_id)
                    .map(WatchDelivery::revision)
                    .collect();
                assert_eq!(sent, queued);
            }
            for batch in &batches {
                let len = batch.encoded_len();
                assert!(
                    batch.revisions().len() == 1 || len < max_bytes,
                    "{len} >= {max_bytes}"
                );
                assert_eq!(encoded(batch), batch.response().encode_to_vec());
            }
        }
    }

    /// What [`batch`] must make, with a search for every delivery's
    /// watcher: its guess of the next watcher is only a shortcut.
    fn by_search(deliveries: Vec<WatchDelivery>, max_bytes: usize) -> Vec<WatchBatch> {
        let mut batches: Vec<WatchBatch> = Vec::new();
        let mut latest: BTreeMap<i64, usize> = BTreeMap::new();
        for delivery in deliveries {
            let rest = match latest.get(&delivery.watch_id) {
                Some(&index) => batches[index].extend(delivery, max_bytes),
                None => Some(delivery),
            };
            if let Some(delivery) = rest {
                latest.insert(delivery.watch_id, batches.len());
                batches.push(WatchBatch::from(delivery));
            }
        }
        batches
    }

    /// Watchers in the same order revision after revision, some skipping
    /// some revisions: every guess that misses falls back to the search.
    #[test]
    fn cycles_of_watchers_batch_as_a_search_would() {
        for skip in [0, 2, 3, 5] {
            let mut deliveries = Vec::new();
            for rev in 1..=40 {
                let shared = revision(rev, &["k"], 10);
                for watch_id in [9, 3, 7, 1] {
                    if skip == 0 || (rev + watch_id) % skip != 0 {
                        deliveries.push(delivery(watch_id, &shared));
                    }
                }
            }
            let batches = batch(deliveries.clone(), 400);
            assert_eq!(batches, by_search(deliveries, 400));
            assert!(batches.len() > 4, "the limit splits each watcher's run");
        }
    }

    #[test]
    fn at_most_catch_up_revisions_max_revisions_per_response() {
        let count = CATCH_UP_REVISIONS_MAX as usize + 5;
        let revisions: Vec<_> = (1..=count as i64).map(|r| revision(r, &["k"], 1)).collect();
        let batches = batch(revisions.iter().map(|r| delivery(4, r)), usize::MAX);
        let sizes: Vec<usize> = batches.iter().map(|b| b.revisions().len()).collect();
        assert_eq!(sizes, vec![CATCH_UP_REVISIONS_MAX as usize, 5]);
    }
}
