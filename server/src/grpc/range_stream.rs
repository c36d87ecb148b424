//! `KV.RangeStream` (etcd 3.7): a range answered as a stream of chunks, so
//! that neither member nor client holds the whole result at once.
//!
//! Design. [`ChunkPlan`] is the pure part: from the client's request it
//! plans one ordinary range per chunk and turns each answer into the
//! message to send. The first chunk is read as the client asked
//! (linearizable unless `serializable`, at its revision or the current
//! one); its header pins the revision, and every later chunk is a
//! serializable range at that revision from just after the last key sent,
//! so writes made during the stream are never seen. Chunks start at 10
//! keys and double while their encoding stays under half of
//! `--max-request-bytes`, halving above twice it (never below one key),
//! as etcd sizes them. Intermediate messages carry only `kvs`; the last
//! carries the pinned header, `more` (keys remain past the client's
//! `limit`) and `count` (every key of the range, as the unary `Range`
//! counts it). The service drives the plan with one chunk in flight, so a
//! stream holds at most one chunk in memory. Each chunk goes through the
//! node with the caller's credentials, so it is checked for read
//! permission like any range. Custom sort orders and revision filters are
//! refused as etcd refuses them; a compaction of the pinned revision
//! mid-stream ends the stream with etcd's compacted error.

use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use oxetcd_proto::etcdserverpb::{
    RangeRequest, RangeResponse, RangeStreamResponse, ResponseHeader,
};
use prost::Message as _;
use tonic::Status;

/// Keys in the first chunk, as etcd's `initialStreamChunkLimit`.
const FIRST_CHUNK_KEYS: i64 = 10;

/// What the stream does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Read this range, then hand its answer to [`ChunkPlan::answered`].
    Read(RangeRequest),
    /// The stream is over.
    Done,
}

/// The chunks of one `RangeStream` call.
#[derive(Debug)]
pub(crate) struct ChunkPlan {
    request: RangeRequest,
    /// Bytes a chunk aims at (`--max-request-bytes`).
    target_bytes: usize,
    /// Keys to ask for in the next chunk.
    chunk_keys: i64,
    /// Keys sent so far.
    sent: i64,
    /// The revision every chunk after the first reads at.
    pinned: Option<i64>,
    /// Where the next chunk starts (after the last key sent).
    next_key: Option<Vec<u8>>,
    /// The first chunk's header, sent with the last.
    header: Option<ResponseHeader>,
    done: bool,
}

impl ChunkPlan {
    /// A plan for `request`, or the refusal etcd gives before anything is
    /// sent.
    pub(crate) fn new(request: RangeRequest, target_bytes: usize) -> Result<Self, Status> {
        if request.key.is_empty() {
            return Err(Status::invalid_argument("etcdserver: key is not provided"));
        }
        let order = SortOrder::try_from(request.sort_order);
        let target = SortTarget::try_from(request.sort_target);
        let (Ok(order), Ok(target)) = (order, target) else {
            return Err(Status::invalid_argument("etcdserver: invalid sort option"));
        };
        let default_order =
            order == SortOrder::None || (target == SortTarget::Key && order == SortOrder::Ascend);
        if !default_order {
            return Err(Status::unimplemented(
                "RangeStream does not support custom sort orders",
            ));
        }
        let filters = [
            request.min_mod_revision,
            request.max_mod_revision,
            request.min_create_revision,
            request.max_create_revision,
        ];
        if filters.iter().any(|&f| f != 0) {
            return Err(Status::unimplemented(
                "RangeStream does not support revision filters",
            ));
        }
        Ok(Self {
            request,
            target_bytes: target_bytes.max(1),
            chunk_keys: FIRST_CHUNK_KEYS,
            sent: 0,
            pinned: None,
            next_key: None,
            header: None,
            done: false,
        })
    }

    /// The next range to read.
    pub(crate) fn next(&self) -> Next {
        if self.done {
            return Next::Done;
        }
        if self.in_one_range() {
            return Next::Read(self.request.clone());
        }
        let mut keys = self.chunk_keys;
        if self.request.limit > 0 {
            keys = keys.min(self.request.limit - self.sent);
        }
        let mut chunk = RangeRequest {
            limit: keys,
            ..self.request.clone()
        };
        if let (Some(pinned), Some(next_key)) = (self.pinned, &self.next_key) {
            chunk.key = next_key.clone();
            chunk.revision = pinned;
            chunk.serializable = true;
        }
        Next::Read(chunk)
    }

    /// The message to send for the answer to the range [`Self::next`]
    /// asked for.
    pub(crate) fn answered(&mut self, mut chunk: RangeResponse) -> RangeStreamResponse {
        let first = self.pinned.is_none();
        let header = chunk.header.take();
        if first {
            let current = header.as_ref().map_or(0, |h| h.revision);
            self.pinned = Some(if self.request.revision > 0 {
                self.request.revision
            } else {
                current
            });
        }
        let whole = self.in_one_range();
        let in_chunk = chunk.kvs.len() as i64;
        let reached_limit = self.request.limit > 0 && self.sent + in_chunk >= self.request.limit;
        if whole || !chunk.more || reached_limit || in_chunk == 0 {
            // The last chunk: `count` here counts from its first key to the
            // end of the range, so the keys sent before it complete it.
            self.done = true;
            return RangeStreamResponse {
                range_response: Some(RangeResponse {
                    header: self.header.take().or(header),
                    kvs: chunk.kvs,
                    more: chunk.more,
                    count: self.sent + chunk.count,
                }),
            };
        }
        if first {
            self.header = header;
        }
        self.sent += in_chunk;
        if let Some(last) = chunk.kvs.last() {
            let mut next_key = last.key.clone();
            next_key.push(0);
            self.next_key = Some(next_key);
        }
        let reply = RangeResponse {
            kvs: chunk.kvs,
            ..Default::default()
        };
        self.resize(reply.encoded_len());
        RangeStreamResponse {
            range_response: Some(reply),
        }
    }

    /// A count alone, or a limit a negative number makes none, is answered
    /// as one ordinary range.
    fn in_one_range(&self) -> bool {
        self.request.count_only || self.request.limit < 0
    }

    /// etcd's `adjustChunkLimit`: double below half the target, halve
    /// above twice it, never below one key.
    fn resize(&mut self, encoded: usize) {
        if encoded < self.target_bytes / 2 {
            self.chunk_keys = self.chunk_keys.saturating_mul(2);
        } else if encoded > self.target_bytes.saturating_mul(2) {
            self.chunk_keys = (self.chunk_keys / 2).max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxetcd_proto::mvccpb::KeyValue;

    /// The keys `k000`..: what a store holding `total` of them answers to
    /// `request` (a key range from `request.key` to `k999`).
    fn answer(total: usize, request: &RangeRequest) -> RangeResponse {
        let keys: Vec<Vec<u8>> = (0..total)
            .map(|i| format!("k{i:03}").into_bytes())
            .filter(|k| *k >= request.key)
            .collect();
        let count = keys.len() as i64;
        let limit = if request.limit > 0 {
            request.limit as usize
        } else {
            usize::MAX
        };
        let kvs: Vec<KeyValue> = if request.count_only {
            Vec::new()
        } else {
            keys.iter()
                .take(limit)
                .map(|k| KeyValue {
                    key: k.clone(),
                    value: vec![b'v'; 100],
                    ..Default::default()
                })
                .collect()
        };
        RangeResponse {
            header: Some(ResponseHeader {
                revision: 7,
                ..Default::default()
            }),
            more: !request.count_only && keys.len() > limit,
            kvs,
            count,
        }
    }

    /// Runs a whole stream over a store of `total` keys.
    fn stream(total: usize, request: RangeRequest, target: usize) -> Vec<RangeResponse> {
        let mut plan = ChunkPlan::new(request, target).expect("plan");
        let mut sent = Vec::new();
        for _ in 0..10_000 {
            let Next::Read(range) = plan.next() else {
                return sent;
            };
            let reply = plan.answered(answer(total, &range));
            sent.push(reply.range_response.expect("a range response"));
        }
        panic!("the stream never ended")
    }

    fn range(limit: i64) -> RangeRequest {
        RangeRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            limit,
            ..Default::default()
        }
    }

    #[test]
    fn merged_chunks_answer_as_the_unary_range() {
        for total in [0, 1, 9, 10, 11, 100, 333] {
            for limit in [0, 1, 10, 11, 50, 400] {
                let chunks = stream(total, range(limit), 1_000);
                let unary = answer(total, &range(limit));
                let (last, rest) = chunks.split_last().expect("at least one message");
                for chunk in rest {
                    assert!(chunk.header.is_none() && !chunk.more && chunk.count == 0);
                    assert!(!chunk.kvs.is_empty());
                }
                let kvs: Vec<_> = chunks.iter().flat_map(|c| c.kvs.clone()).collect();
                assert_eq!(kvs, unary.kvs, "total {total} limit {limit}");
                assert_eq!(last.count, unary.count, "total {total} limit {limit}");
                assert_eq!(last.more, unary.more, "total {total} limit {limit}");
                assert_eq!(last.header, unary.header);
            }
        }
    }

    #[test]
    fn chunks_grow_while_small_and_shrink_when_large() {
        // About 110 bytes a key: 10, 20, 40 ... keys while under half of
        // 64 KiB, then steady.
        let sizes: Vec<usize> = stream(2_000, range(0), 64 * 1024)
            .iter()
            .map(|c| c.kvs.len())
            .collect();
        assert_eq!(&sizes[..4], &[10, 20, 40, 80]);
        assert!(sizes.iter().all(|&n| n <= 640), "{sizes:?}");
        // A target smaller than one key: one key a chunk after the first.
        let sizes: Vec<usize> = stream(30, range(0), 10)
            .iter()
            .map(|c| c.kvs.len())
            .collect();
        assert_eq!(sizes[0], 10);
        assert!(sizes[1..].iter().all(|n| (1..=5).contains(n)), "{sizes:?}");
    }

    #[test]
    fn later_chunks_read_after_the_last_key_at_the_pinned_revision() {
        let mut plan = ChunkPlan::new(range(0), 1_000_000).expect("plan");
        let Next::Read(first) = plan.next() else {
            panic!("a first chunk")
        };
        assert_eq!(
            (first.limit, first.revision, first.serializable),
            (10, 0, false)
        );
        plan.answered(answer(100, &first));
        let Next::Read(second) = plan.next() else {
            panic!("a second chunk")
        };
        assert_eq!(second.key, b"k009\0".to_vec());
        assert_eq!((second.revision, second.serializable), (7, true));
        assert_eq!(second.limit, 20);
    }

    #[test]
    fn counts_and_refusals_are_etcds() {
        let count_only = RangeRequest {
            count_only: true,
            ..range(0)
        };
        let chunks = stream(42, count_only, 1_000);
        assert_eq!(chunks.len(), 1);
        assert_eq!((chunks[0].count, chunks[0].kvs.len()), (42, 0));
        let refused = |request: RangeRequest| ChunkPlan::new(request, 1_000).expect_err("refused");
        let status = refused(RangeRequest::default());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "etcdserver: key is not provided");
        let status = refused(RangeRequest {
            sort_order: SortOrder::Descend as i32,
            ..range(0)
        });
        assert_eq!(status.code(), tonic::Code::Unimplemented);
        assert_eq!(
            status.message(),
            "RangeStream does not support custom sort orders"
        );
        let status = refused(RangeRequest {
            min_mod_revision: 3,
            ..range(0)
        });
        assert_eq!(
            status.message(),
            "RangeStream does not support revision filters"
        );
        let status = refused(RangeRequest {
            sort_order: 9,
            ..range(0)
        });
        assert_eq!(status.message(), "etcdserver: invalid sort option");
        // Ascending by key is the default order.
        assert!(ChunkPlan::new(
            RangeRequest {
                sort_order: SortOrder::Ascend as i32,
                sort_target: SortTarget::Key as i32,
                ..range(0)
            },
            1_000
        )
        .is_ok());
    }
}
