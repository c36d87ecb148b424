//! The watch module's unit tests: delivery encoding, fan-out order, spec
//! normalisation, fragmenting, the stream gate, and progress requests.

use std::collections::VecDeque;
use std::sync::Arc;

use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{ResponseHeader, WatchCreateRequest, WatchRequest, WatchResponse};
use oxetcd_proto::mvccpb::{event::EventType, Event, KeyValue};
use prost::Message;

use super::spec::EMPTY_RANGE;
use super::*;
use crate::storage::KeyVersion;
use crate::{Instant, Output};

fn response_with(events: usize, value_bytes: usize) -> WatchResponse {
    WatchResponse {
        watch_id: 3,
        events: (0..events)
            .map(|i| Event {
                r#type: 0,
                kv: Some(KeyValue {
                    key: format!("k{i}").into_bytes(),
                    mod_revision: 7,
                    value: vec![b'x'; value_bytes],
                    ..Default::default()
                }),
                prev_kv: None,
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn deliveries_encode_as_their_responses() {
    let mut events = response_with(3, 5).events;
    events[1].prev_kv = Some(KeyValue {
        key: b"k1".to_vec(),
        value: b"old".to_vec(),
        ..Default::default()
    });
    events[2].r#type = EventType::Delete as i32;
    let header = ResponseHeader {
        cluster_id: u64::MAX,
        member_id: 12,
        revision: 7,
        raft_term: 300,
    };
    let shared = Arc::new(RevisionEvents::new(header, events));
    for watch_id in [0, 1, 127, 128, i64::MAX, NO_WATCH_ID, i64::MIN] {
        let delivery = WatchDelivery::new(watch_id, shared.clone(), false);
        let expected = delivery.response().encode_to_vec();
        let mut encoded = Vec::new();
        delivery.encode(&mut encoded);
        assert_eq!(encoded, expected, "watch ID {watch_id}");
        assert_eq!(delivery.encoded_len(), expected.len());
        assert_eq!(delivery.cost(), queue_cost(&delivery.response()));
    }
    let none = WatchDelivery::new(
        4,
        Arc::new(RevisionEvents::new(ResponseHeader::default(), Vec::new())),
        false,
    );
    let mut encoded = Vec::new();
    none.encode(&mut encoded);
    assert_eq!(encoded, none.response().encode_to_vec());
}

/// The deliveries, per stream, of a put of `key` (with `value`) as
/// revision 2, to the watchers `watches` (stream, key, range end) made at
/// revision 1.
fn deliveries_of_put(
    watches: &[(StreamId, Vec<u8>, Vec<u8>)],
    key: &[u8],
    value: Vec<u8>,
) -> Vec<(StreamId, Vec<WatchDelivery>)> {
    let mut registry = WatchRegistry::new(PROGRESS_NOTIFY_INTERVAL_DEFAULT);
    let mut outputs = VecDeque::new();
    let mut cx = Context {
        now: Instant::ZERO,
        header: ResponseHeader {
            revision: 1,
            ..Default::default()
        },
        outputs: &mut outputs,
    };
    for (stream, key, end) in watches {
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: key.clone(),
                range_end: end.clone(),
                ..Default::default()
            })),
        };
        registry.handle_request(*stream, create, &mut cx);
    }
    let change = KeyVersion {
        key: key.to_vec(),
        mod_revision: crate::storage::Revision { main: 2, sub: 0 },
        create_revision: 2,
        version: 1,
        lease: 0,
        value,
        tombstone: false,
    };
    let kv = crate::memory::MemoryKv::default();
    let view = crate::storage::KvStore::read(&kv).unwrap();
    registry
        .on_revision(2, &[change], &view, ResponseHeader::default())
        .unwrap();
    let mut flushed = Vec::new();
    registry.flush_events(&mut flushed);
    flushed
        .into_iter()
        .map(|output| match output {
            Output::WatchEvents { stream, deliveries } => {
                for d in &deliveries {
                    assert_eq!(d.revision(), 2);
                    assert_eq!(d.events.events().len(), 1);
                }
                (stream, deliveries)
            }
            other => panic!("unexpected output {other:?}"),
        })
        .collect()
}

/// Deliveries of one put as (stream, [watch IDs]) after flushing, with
/// `fillers` single-key watchers of other keys (many of them make the
/// registry look candidates up rather than walk every watcher).
fn deliveries_of_one_put(fillers: usize) -> Vec<(StreamId, Vec<i64>)> {
    let watch = |stream, key: &[u8], end: &[u8]| (stream, key.to_vec(), end.to_vec());
    let mut watches = vec![
        watch(1, b"a", b""),
        watch(1, b"b", b""),
        watch(2, b"a", b"c"),
        watch(2, b"a", b""),
        watch(3, b"b", b"\0"),
        watch(3, b"a", b"\0"),
    ];
    for i in 0..fillers {
        watches.push(watch(4, format!("z{i}").as_bytes(), b""));
    }
    deliveries_of_put(&watches, b"a", b"v".to_vec())
        .into_iter()
        .map(|(stream, deliveries)| (stream, deliveries.iter().map(|d| d.watch_id).collect()))
        .collect()
}

#[test]
fn a_put_reaches_the_same_watchers_in_order_however_they_are_found() {
    let expected = vec![(1, vec![0]), (2, vec![0, 1]), (3, vec![1])];
    // Mostly ranged watchers: every watcher is walked.
    assert_eq!(deliveries_of_one_put(0), expected);
    // Mostly single-key watchers: candidates are looked up.
    assert_eq!(deliveries_of_one_put(20), expected);
}

/// Watchers of the same range share the answer to "is the key in it"
/// (see `ranges`); runs of equal ranges between others must not carry an
/// answer over to a different range.
#[test]
fn watchers_of_equal_ranges_between_others_take_what_their_range_holds() {
    let watch = |stream, key: &[u8], end: &[u8]| (stream, key.to_vec(), end.to_vec());
    let inside = |stream| watch(stream, b"k/", b"k0");
    let outside = |stream| watch(stream, b"x/", b"x0");
    let watches = vec![
        inside(1),
        inside(1),
        outside(1),
        outside(1),
        inside(1),
        outside(2),
        inside(2),
        inside(2),
        outside(2),
        watch(2, b"k/a", b""),
        watch(2, b"k/b", b""),
        inside(2),
    ];
    let took: Vec<(StreamId, Vec<i64>)> = deliveries_of_put(&watches, b"k/a", b"v".to_vec())
        .into_iter()
        .map(|(stream, deliveries)| (stream, deliveries.iter().map(|d| d.watch_id).collect()))
        .collect();
    assert_eq!(took, vec![(1, vec![0, 1, 4]), (2, vec![1, 2, 4, 6])]);
}

#[test]
fn a_streams_watchers_of_one_revision_count_its_encoding_once() {
    // 64 watchers of one prefix on stream 1, one on stream 2.
    let watches: Vec<_> = std::iter::repeat_n(1, 64)
        .chain([2])
        .map(|stream| (stream, b"a".to_vec(), b"b".to_vec()))
        .collect();
    let costs: std::collections::BTreeMap<_, _> =
        deliveries_of_put(&watches, b"a1", vec![b'v'; 256])
            .into_iter()
            .collect();
    let alone = &costs[&2];
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0].cost(), queue_cost(&alone[0].response()));
    let shared = &costs[&1];
    assert_eq!(shared.len(), 64);
    let total: usize = shared.iter().map(WatchDelivery::cost).sum();
    let encoded = shared.iter().map(WatchDelivery::encoded_len).max().unwrap();
    assert!(encoded > 256, "the value is in the encoding");
    // Each watcher's own bytes, then the encoding once (plus rounding).
    assert!(
        total <= 64 * QUEUE_ITEM_BYTES + encoded + 64,
        "64 deliveries of one shared encoding cost {total}"
    );
    assert!(total >= 64 * QUEUE_ITEM_BYTES + encoded - 64);
}

#[test]
fn specs_normalise_as_etcd() {
    let create = |key: &[u8], end: &[u8]| WatchCreateRequest {
        key: key.to_vec(),
        range_end: end.to_vec(),
        ..Default::default()
    };
    let point = WatchSpec::from_create(&create(b"a", b"")).unwrap();
    assert!(point.contains(b"a") && !point.contains(b"ab"));
    let from = WatchSpec::from_create(&create(b"b", b"\0")).unwrap();
    assert!(from.contains(b"b") && from.contains(b"zz") && !from.contains(b"a"));
    let all = WatchSpec::from_create(&create(b"", b"\0")).unwrap();
    assert_eq!(all.key, b"\0");
    assert!(all.contains(b"\0a"));
    let span = WatchSpec::from_create(&create(b"a", b"c")).unwrap();
    assert!(span.contains(b"b") && !span.contains(b"c"));
    assert_eq!(
        WatchSpec::from_create(&create(b"c", b"a")),
        Err(EMPTY_RANGE)
    );
    assert_eq!(
        WatchSpec::from_create(&create(b"a", b"a")),
        Err(EMPTY_RANGE)
    );
}

#[test]
fn fragments_split_large_responses_and_keep_every_event() {
    let small = response_with(3, 10);
    assert_eq!(fragments(small.clone(), 1000), vec![small]);
    let one = response_with(1, 5000);
    assert_eq!(fragments(one.clone(), 1000).len(), 1);
    let big = response_with(10, 300);
    let parts = fragments(big.clone(), 1000);
    assert!(parts.len() > 1);
    assert!(parts[..parts.len() - 1].iter().all(|p| p.fragment));
    assert!(!parts.last().unwrap().fragment);
    let rejoined: Vec<Event> = parts.into_iter().flat_map(|p| p.events).collect();
    assert_eq!(rejoined, big.events);
}

#[test]
fn gate_stalls_drops_then_resumes_and_defers_progress() {
    let mut gate = StreamGate::default();
    let events = response_with(2, 1);
    assert_eq!(gate.route(&events, 0, 4), Route::Deliver);
    // Any response fits an empty queue.
    assert_eq!(gate.route(&response_with(9, 1), 0, 4), Route::Deliver);
    assert_eq!(
        gate.route(&events, 2, 4),
        Route::Stall {
            watch_id: 3,
            from_revision: 7
        }
    );
    // Later responses for the stalled watcher are dropped even with room.
    assert_eq!(gate.route(&events, 0, 4), Route::Drop);
    let other = WatchResponse {
        watch_id: 4,
        ..response_with(1, 1)
    };
    assert_eq!(gate.route(&other, 0, 4), Route::Deliver);
    let progress = WatchResponse {
        watch_id: NO_WATCH_ID,
        ..Default::default()
    };
    assert_eq!(gate.route(&progress, 0, 4), Route::Drop);
    // Each held-back answer to a `RequestProgress` is kept.
    let later = WatchResponse {
        header: Some(ResponseHeader {
            revision: 9,
            ..Default::default()
        }),
        ..progress.clone()
    };
    assert_eq!(gate.route(&later, 0, 4), Route::Drop);
    assert_eq!(gate.catch_up_routed(3), vec![progress.clone(), later]);
    assert_eq!(gate.route(&events, 0, 4), Route::Deliver);
    assert_eq!(gate.route(&progress, 0, 4), Route::Deliver);
    assert!(gate.catch_up_routed(3).is_empty());
}

fn progress_request() -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::ProgressRequest(Default::default())),
    }
}

/// Stream-wide progress answers (watch ID -1) among `outputs`, by
/// stream, with their header revision.
fn progress_answers(outputs: &mut VecDeque<Output>) -> Vec<(StreamId, i64)> {
    let mut answers = Vec::new();
    for output in outputs.drain(..) {
        if let Output::Watch {
            stream, response, ..
        } = output
        {
            if response.watch_id == NO_WATCH_ID && !response.created {
                answers.push((stream, response.header.map_or(0, |h| h.revision)));
            }
        }
    }
    answers
}

#[test]
fn every_progress_request_is_answered_after_the_catch_up() {
    let mut registry = WatchRegistry::new(PROGRESS_NOTIFY_INTERVAL_DEFAULT);
    let mut outputs = VecDeque::new();
    let header = |revision| ResponseHeader {
        revision,
        ..Default::default()
    };
    let mut cx = Context {
        now: Instant::ZERO,
        header: header(10),
        outputs: &mut outputs,
    };
    // A watcher replaying history from revision 2 is catching up.
    let create = WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: b"k".to_vec(),
            start_revision: 2,
            ..Default::default()
        })),
    };
    registry.handle_request(1, create, &mut cx);
    // A synced stream answers at once.
    registry.handle_request(2, progress_request(), &mut cx);
    for _ in 0..3 {
        registry.handle_request(1, progress_request(), &mut cx);
    }
    assert_eq!(
        progress_answers(cx.outputs),
        vec![(2, 10)],
        "no answer may claim revision 10 before the catch-up delivered it"
    );
    // The node applied revision 11 meanwhile: one more stretch.
    cx.header = header(11);
    registry.handle_caught_up(1, 0, 10, false, &mut cx);
    registry.handle_request(1, progress_request(), &mut cx);
    assert!(progress_answers(cx.outputs).is_empty());
    registry.handle_caught_up(1, 0, 11, false, &mut cx);
    assert_eq!(progress_answers(cx.outputs), vec![(1, 11); 4]);
    // Nothing is left waiting.
    registry.handle_caught_up(1, 0, 11, false, &mut cx);
    registry.handle_request(1, progress_request(), &mut cx);
    assert_eq!(progress_answers(cx.outputs), vec![(1, 11)]);
}

#[test]
fn waiting_progress_requests_are_bounded() {
    let mut registry = WatchRegistry::new(PROGRESS_NOTIFY_INTERVAL_DEFAULT);
    let mut outputs = VecDeque::new();
    let mut cx = Context {
        now: Instant::ZERO,
        header: ResponseHeader {
            revision: 5,
            ..Default::default()
        },
        outputs: &mut outputs,
    };
    let create = WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: b"k".to_vec(),
            start_revision: 1,
            ..Default::default()
        })),
    };
    registry.handle_request(1, create, &mut cx);
    let asked = PROGRESS_REQUESTS_WAITING_MAX as usize + 10;
    for _ in 0..asked {
        registry.handle_request(1, progress_request(), &mut cx);
    }
    // Canceling the catching-up watcher releases the waiting answers.
    let cancel = WatchRequest {
        request_union: Some(RequestUnion::CancelRequest(
            oxetcd_proto::etcdserverpb::WatchCancelRequest { watch_id: 0 },
        )),
    };
    registry.handle_request(1, cancel, &mut cx);
    assert_eq!(
        progress_answers(cx.outputs).len(),
        PROGRESS_REQUESTS_WAITING_MAX as usize
    );
}

/// A small deterministic generator: each call gives a number below `n`.
fn rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    }
}

/// A store whose history holds `revisions` revisions (from 2) of up to
/// `width` changes each over keys `k0`..`k{keys - 1}`: puts and deletes,
/// compacted at `compacted`.
fn history(
    revisions: i64,
    width: usize,
    keys: usize,
    compacted: i64,
    seed: u64,
) -> crate::memory::MemoryKv {
    use crate::storage::{KvMeta, KvStore, KvWrite, Revision};
    let mut random = rng(seed);
    let mut next = move |n: usize| random(n as u64) as usize;
    let kv = crate::memory::MemoryKv::default();
    let mut write = kv.write().unwrap();
    // Each live key's create revision and version.
    let mut live: std::collections::HashMap<Vec<u8>, (i64, i64)> = Default::default();
    for main in 2..revisions + 2 {
        let mut keys: Vec<Vec<u8>> = (0..1 + next(width))
            .map(|_| format!("k{}", next(keys)).into_bytes())
            .collect();
        keys.sort();
        keys.dedup();
        for (sub, key) in keys.into_iter().enumerate() {
            let delete = live.contains_key(&key) && next(4) == 0;
            let version = if delete {
                live.remove(&key);
                KeyVersion {
                    key,
                    mod_revision: Revision {
                        main,
                        sub: sub as i64,
                    },
                    create_revision: 0,
                    version: 0,
                    lease: 0,
                    value: Vec::new(),
                    tombstone: true,
                }
            } else {
                let (create, count) = live.get(&key).map_or((main, 1), |&(c, v)| (c, v + 1));
                live.insert(key.clone(), (create, count));
                KeyVersion {
                    key,
                    mod_revision: Revision {
                        main,
                        sub: sub as i64,
                    },
                    create_revision: create,
                    version: count,
                    lease: 0,
                    value: format!("v{main}.{sub}").into_bytes(),
                    tombstone: false,
                }
            };
            write.put_version(&version).unwrap();
        }
    }
    write
        .set_meta(&KvMeta {
            revision: revisions + 1,
            compact_revision: compacted,
            ..Default::default()
        })
        .unwrap();
    write.commit().unwrap();
    kv
}

/// `count` catch-ups with assorted ranges, filters, `prev_kv`, windows
/// (some compacted away, some empty) and positions in the history.
fn catch_up_jobs(count: usize, current: i64, seed: u64) -> Vec<CatchUp> {
    let mut random = rng(seed);
    let mut next = move |n: i64| random(n as u64) as i64;
    (0..count)
        .map(|i| {
            let low = next(8);
            let (key, range_end) = match next(3) {
                0 => (format!("k{low}").into_bytes(), Vec::new()),
                1 => (
                    format!("k{low}").into_bytes(),
                    format!("k{}", (low + 1 + next(4)).min(9)).into_bytes(),
                ),
                _ => (b"k".to_vec(), b"l".to_vec()),
            };
            let filters = match next(4) {
                0 => vec![0],
                1 => vec![1],
                _ => Vec::new(),
            };
            let spec = WatchSpec::from_create(&WatchCreateRequest {
                key,
                range_end,
                filters,
                prev_kv: next(2) == 0,
                ..Default::default()
            })
            .unwrap();
            let from = 1 + next(current + 2);
            let to = (from + next(current)).min(current);
            CatchUp {
                stream: 1,
                watch_id: i as i64,
                spec,
                from,
                to,
                header: ResponseHeader {
                    revision: to,
                    ..Default::default()
                },
            }
        })
        .collect()
}

#[test]
fn a_group_of_catch_ups_reads_what_each_would_read_alone() {
    use crate::storage::KvStore;
    for seed in 0..20 {
        let kv = history(80, 3, 8, 6, seed);
        let view = kv.read().unwrap();
        for round in 0..10 {
            let jobs = catch_up_jobs(1 + round % 7, 81, seed * 100 + round as u64);
            let group = read_catch_ups(&view, &jobs).unwrap();
            for (i, job) in jobs.iter().enumerate() {
                assert_eq!(
                    group.outcome(i, job),
                    catch_up(&view, job).unwrap(),
                    "seed {seed}, round {round}, job {job:?}"
                );
            }
        }
    }
}

#[test]
fn a_group_of_catch_ups_caps_each_job_where_it_would_alone() {
    use crate::storage::KvStore;
    // About 20 changes a revision: a job over every key reaches the event
    // cap within its 1,000 revisions, at a different revision per start.
    let kv = history(1_200, 40, 32, 1, 7);
    let view = kv.read().unwrap();
    let all = |from: i64, watch_id: i64, prev_kv: bool| CatchUp {
        stream: 1,
        watch_id,
        spec: WatchSpec::from_create(&WatchCreateRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            prev_kv,
            ..Default::default()
        })
        .unwrap(),
        from,
        to: 1_201,
        header: ResponseHeader {
            revision: 1_201,
            ..Default::default()
        },
    };
    let jobs = vec![
        all(2, 1, false),
        all(40, 2, true),
        all(41, 3, false),
        all(900, 4, false),
    ];
    let group = read_catch_ups(&view, &jobs).unwrap();
    let mut capped = 0;
    for (i, job) in jobs.iter().enumerate() {
        let alone = catch_up(&view, job).unwrap();
        if let CatchUpOutcome::Events { upto, .. } = &alone {
            capped += usize::from(*upto < job.from + CATCH_UP_REVISIONS_MAX - 1 && *upto < job.to);
        }
        assert_eq!(group.outcome(i, job), alone, "job {i}");
    }
    assert!(capped >= 2, "the event cap went untested");
}
