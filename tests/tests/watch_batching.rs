//! A watcher's revisions queued on a stream its client is not reading leave
//! in a few responses, not one per revision, on both binaries.
//!
//! Two watchers (one with `prev_kv`) on one stream, on a connection with a
//! small HTTP/2 window, are not read while 1,000 revisions are written (puts
//! over 50 keys, and every 50th revision a two-key txn), few enough that
//! the stream's queue holds them all and the watchers stay on the live
//! path. Then a `RequestProgress` is sent and the stream read. Each watcher
//! must see exactly the written events, in revision order, none twice, with
//! a revision's events in one response and the right `prev_kv`; the
//! progress notification must come after every event; and the events must
//! arrive in far fewer responses than revisions.
//!
//! A watcher asking for fragments, with `prev_kv`, sees large revisions the
//! same way: batched into responses below the fragment limit, and a
//! revision larger than the limit alone, in fragments, the last unflagged.
//!
//! Streams outpaced by their writers (8 streams of 32 watchers, 8
//! concurrent writers of puts and two-key txns; each reader pauses once,
//! then reads as fast as responses come) are paced, gathering for a while
//! before they send: each watcher must still see every event once, in
//! order, each revision in one response, in fewer responses than
//! revisions.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::request_op::Request as Op;
use oxetcd_proto::etcdserverpb::watch_client::WatchClient;
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    PutRequest, RequestOp, TxnRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest,
    WatchResponse,
};
use oxetcd_tests::{Server, ServerKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint};

/// Revisions written while the stream is not read.
const REVISIONS: usize = 1_000;
/// Every this many revisions one is a two-key txn.
const TXN_EVERY: usize = 50;
/// Distinct keys, so most puts overwrite and carry a `prev_kv`.
const KEYS: usize = 50;
/// HTTP/2 windows of the watch connection: the server feels the unread
/// stream after a few dozen responses.
const WINDOW_BYTES: u32 = 8 * 1024;
/// Longest to wait for any one response once reading.
const READ_DEADLINE: Duration = Duration::from_secs(20);
/// Longest the writes may take.
const WRITE_DEADLINE: Duration = Duration::from_secs(120);

#[test]
fn queued_revisions_leave_in_few_responses_on_tokio() {
    check(ServerKind::Oxetcd, run);
}

#[test]
fn queued_revisions_leave_in_few_responses_on_smol() {
    check(ServerKind::OxetcdSmol, run);
}

#[test]
fn large_revisions_batch_below_the_fragment_limit_on_tokio() {
    check(ServerKind::Oxetcd, run_fragments);
}

#[test]
fn large_revisions_batch_below_the_fragment_limit_on_smol() {
    check(ServerKind::OxetcdSmol, run_fragments);
}

#[test]
fn an_outpaced_stream_sends_whole_revisions_in_order_on_tokio() {
    check(ServerKind::Oxetcd, run_outpaced);
}

#[test]
fn an_outpaced_stream_sends_whole_revisions_in_order_on_smol() {
    check(ServerKind::OxetcdSmol, run_outpaced);
}

/// Runs `scenario` against a fresh server of `kind`.
fn check<F: Future<Output = Result<(), String>>>(kind: ServerKind, scenario: fn(String) -> F) {
    let server = Server::start(kind).expect("server starts");
    let runtime = runtime();
    let result = runtime.block_on(scenario(server.endpoint().to_owned()));
    if let Err(e) = result {
        panic!("{}: {e}", kind.name());
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// What one watcher received: per event (revision, key, value, prev value),
/// and the response each event came in.
#[derive(Default)]
struct Received {
    events: Vec<(i64, String, String, Option<String>)>,
    response_of: Vec<usize>,
    responses: usize,
}

/// A connection to write on, and one to watch on whose HTTP/2 windows
/// are [`WINDOW_BYTES`].
async fn connect(endpoint: String) -> Result<(Channel, Channel), String> {
    let writer = Endpoint::from_shared(endpoint.clone())
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let watching = Endpoint::from_shared(endpoint)
        .map_err(|e| e.to_string())?
        .initial_stream_window_size(WINDOW_BYTES)
        .initial_connection_window_size(WINDOW_BYTES)
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    Ok((writer, watching))
}

async fn run(endpoint: String) -> Result<(), String> {
    let (writer, watching) = connect(endpoint).await?;

    let creates = [(1, false), (2, true)].map(|(id, prev_kv)| WatchCreateRequest {
        key: b"burst/".to_vec(),
        range_end: b"burst0".to_vec(),
        watch_id: id,
        prev_kv,
        ..Default::default()
    });
    let (requests, mut responses) = open_watchers(WatchClient::new(watching), creates).await?;

    // The burst, while the stream is not read: (revision, key, value).
    let mut kv = KvClient::new(writer);
    let mut written: Vec<(i64, String, String)> = Vec::new();
    let started = Instant::now();
    for n in 0..REVISIONS {
        if started.elapsed() > WRITE_DEADLINE {
            return Err(format!("only {n} writes in {WRITE_DEADLINE:?}"));
        }
        let key = |k: usize| format!("burst/{:02}", k % KEYS);
        let value = format!("v{n}");
        if n % TXN_EVERY == TXN_EVERY - 1 {
            let keys = [key(n), key(n + 1)];
            let success = keys
                .iter()
                .map(|k| RequestOp {
                    request: Some(Op::RequestPut(PutRequest {
                        key: k.clone().into_bytes(),
                        value: value.clone().into_bytes(),
                        ..Default::default()
                    })),
                })
                .collect();
            let txn = TxnRequest {
                success,
                ..Default::default()
            };
            let revision = kv
                .txn(txn)
                .await
                .map_err(|e| format!("txn: {e}"))?
                .into_inner()
                .header
                .map_or(0, |h| h.revision);
            for k in keys {
                written.push((revision, k, value.clone()));
            }
        } else {
            let put = PutRequest {
                key: key(n).into_bytes(),
                value: value.clone().into_bytes(),
                ..Default::default()
            };
            let revision = kv
                .put(put)
                .await
                .map_err(|e| format!("put: {e}"))?
                .into_inner()
                .header
                .map_or(0, |h| h.revision);
            written.push((revision, key(n), value));
        }
    }
    let last_revision = written.last().map_or(0, |w| w.0);
    // What each event's prev_kv must be: the key's value before it.
    let mut expected = Vec::new();
    let mut latest: HashMap<String, String> = HashMap::new();
    for (revision, key, value) in &written {
        let prev = latest.insert(key.clone(), value.clone());
        expected.push((*revision, key.clone(), value.clone(), prev));
    }

    requests
        .send(WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
        })
        .map_err(|e| e.to_string())?;
    let mut received: BTreeMap<i64, Received> = BTreeMap::new();
    let mut progress = None;
    let mut response_number = 0;
    while progress.is_none() {
        let response = next(&mut responses).await?;
        response_number += 1;
        if response.canceled || response.compact_revision != 0 {
            return Err(format!("watcher canceled: {response:?}"));
        }
        if response.events.is_empty() {
            if response.watch_id == -1 {
                progress = response.header.map(|h| h.revision);
            }
            continue;
        }
        let watcher = received.entry(response.watch_id).or_default();
        watcher.responses += 1;
        for event in &response.events {
            let kv = event.kv.clone().unwrap_or_default();
            let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
            let prev = event.prev_kv.clone().map(|p| text(p.value));
            watcher
                .events
                .push((kv.mod_revision, text(kv.key), text(kv.value), prev));
            watcher.response_of.push(response_number);
        }
    }
    if progress != Some(last_revision) {
        return Err(format!(
            "progress {progress:?} after the events, expected {last_revision}"
        ));
    }

    let revisions = written
        .iter()
        .map(|w| w.0)
        .collect::<std::collections::BTreeSet<_>>();
    for (id, prev_kv) in [(1, false), (2, true)] {
        let Some(watcher) = received.get(&id) else {
            return Err(format!("watcher {id} received nothing"));
        };
        let want: Vec<_> = expected
            .iter()
            .map(|(r, k, v, p)| (*r, k.clone(), v.clone(), p.clone().filter(|_| prev_kv)))
            .collect();
        if watcher.events != want {
            let first = watcher
                .events
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(watcher.events.len().min(want.len()));
            return Err(format!(
                "watcher {id}: {} events, expected {}; first difference at {first}: {:?} vs {:?}",
                watcher.events.len(),
                want.len(),
                watcher.events.get(first),
                want.get(first)
            ));
        }
        // A revision's events in one response.
        for pair in watcher
            .events
            .windows(2)
            .zip(watcher.response_of.windows(2))
        {
            let ([a, b], [ra, rb]) = pair else { continue };
            if a.0 == b.0 && ra != rb {
                return Err(format!("watcher {id}: revision {} split", a.0));
            }
        }
        eprintln!(
            "watcher {id}: {} revisions in {} responses",
            revisions.len(),
            watcher.responses
        );
        if watcher.responses * 4 > revisions.len() {
            return Err(format!(
                "watcher {id}: {} revisions in {} responses, expected far fewer",
                revisions.len(),
                watcher.responses
            ));
        }
    }
    drop(requests);
    Ok(())
}

/// The default `--max-request-bytes` plus etcd's gRPC overhead: responses
/// of watchers that ask are fragmented at this size.
const FRAGMENT_BYTES: usize = 1_572_864 + 512 * 1024;
/// Puts of mid-sized values before the large txn.
const MID_PUTS: usize = 20;
const MID_VALUE_BYTES: usize = 100 * 1024;
/// Each of the txn's two values; with `prev_kv` its revision exceeds
/// [`FRAGMENT_BYTES`].
const LARGE_VALUE_BYTES: usize = 700 * 1024;

async fn run_fragments(endpoint: String) -> Result<(), String> {
    let (writer, watching) = connect(endpoint).await?;
    let create = WatchCreateRequest {
        key: b"big/".to_vec(),
        range_end: b"big0".to_vec(),
        prev_kv: true,
        fragment: true,
        ..Default::default()
    };
    let client = WatchClient::new(watching).max_decoding_message_size(2 * FRAGMENT_BYTES);
    let (requests, mut responses) = open_watchers(client, [create]).await?;

    // (revision, key, value length, prev value length), as written.
    let mut kv = KvClient::new(writer)
        .max_decoding_message_size(2 * FRAGMENT_BYTES)
        .max_encoding_message_size(2 * FRAGMENT_BYTES);
    let mut latest: HashMap<String, usize> = HashMap::new();
    let mut expected: Vec<(i64, String, usize, Option<usize>)> = Vec::new();
    let mut writes: Vec<Vec<(String, usize)>> = (0..MID_PUTS)
        .map(|n| vec![(format!("big/{:02}", n % 5), MID_VALUE_BYTES + n)])
        .collect();
    writes.push(vec![("big/a".into(), LARGE_VALUE_BYTES)]);
    writes.push(vec![("big/b".into(), LARGE_VALUE_BYTES)]);
    writes.push(vec![
        ("big/a".into(), LARGE_VALUE_BYTES + 1),
        ("big/b".into(), LARGE_VALUE_BYTES + 1),
    ]);
    for write in &writes {
        let success = write
            .iter()
            .map(|(key, len)| RequestOp {
                request: Some(Op::RequestPut(PutRequest {
                    key: key.clone().into_bytes(),
                    value: vec![b'x'; *len],
                    ..Default::default()
                })),
            })
            .collect();
        let txn = TxnRequest {
            success,
            ..Default::default()
        };
        let revision = kv
            .txn(txn)
            .await
            .map_err(|e| format!("txn: {e}"))?
            .into_inner()
            .header
            .map_or(0, |h| h.revision);
        for (key, len) in write {
            let prev = latest.insert(key.clone(), *len);
            expected.push((revision, key.clone(), *len, prev));
        }
    }
    let last_revision = expected.last().map_or(0, |e| e.0);

    // Read until the last revision is whole: (revision, key, value length,
    // prev length) per event, and per event its response and whether that
    // response was a fragment.
    let mut events = Vec::new();
    let mut response_of = Vec::new();
    let mut fragments = 0;
    let mut responses_seen = 0;
    let mut in_fragment = false;
    while events
        .last()
        .map(|e: &(i64, String, usize, Option<usize>)| e.0)
        != Some(last_revision)
        || in_fragment
    {
        let response = next(&mut responses).await?;
        responses_seen += 1;
        let bytes = prost::Message::encoded_len(&response);
        if bytes > FRAGMENT_BYTES {
            return Err(format!("a response of {bytes} bytes"));
        }
        let revisions: std::collections::BTreeSet<i64> = response
            .events
            .iter()
            .filter_map(|e| e.kv.as_ref().map(|kv| kv.mod_revision))
            .collect();
        if (response.fragment || in_fragment) && revisions.len() > 1 {
            return Err(format!("a fragment holds revisions {revisions:?}"));
        }
        if response.fragment {
            fragments += 1;
        }
        in_fragment = response.fragment;
        for event in &response.events {
            let kv = event.kv.clone().unwrap_or_default();
            events.push((
                kv.mod_revision,
                String::from_utf8_lossy(&kv.key).into_owned(),
                kv.value.len(),
                event.prev_kv.as_ref().map(|p| p.value.len()),
            ));
            response_of.push(responses_seen);
        }
    }
    if events != expected {
        return Err(format!(
            "{} events, expected {}; {:?} vs {:?}",
            events.len(),
            expected.len(),
            events.iter().map(|e| e.0).collect::<Vec<_>>(),
            expected.iter().map(|e| e.0).collect::<Vec<_>>()
        ));
    }
    if fragments == 0 {
        return Err("the txn larger than the fragment limit was not fragmented".into());
    }
    // Outside fragments, a revision's events share a response.
    let txn_revision = last_revision;
    for (pair, of) in events.windows(2).zip(response_of.windows(2)) {
        if pair[0].0 == pair[1].0 && pair[0].0 != txn_revision && of[0] != of[1] {
            return Err(format!("revision {} split", pair[0].0));
        }
    }
    let before_txn = response_of
        .iter()
        .zip(&events)
        .filter(|(_, e)| e.0 != txn_revision)
        .map(|(of, _)| *of)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    eprintln!(
        "{} revisions before the txn in {before_txn} responses; the txn in {} fragments",
        writes.len() - 1,
        fragments + 1
    );
    if before_txn * 2 > writes.len() - 1 {
        return Err(format!(
            "{} revisions in {before_txn} responses, expected fewer",
            writes.len() - 1
        ));
    }
    drop(requests);
    Ok(())
}

/// Streams outpaced by the writers, on one connection, and the watchers
/// of each.
const OUTPACED_STREAMS: usize = 8;
const OUTPACED_WATCHERS: i64 = 32;
/// Concurrent writers, and the writes of each; every 25th is a two-key txn.
const OUTPACED_WRITERS: usize = 8;
const OUTPACED_WRITES: usize = 150;
/// Each value.
const OUTPACED_VALUE_BYTES: usize = 128;
/// How long each reader pauses after its first response.
const OUTPACED_PAUSE: Duration = Duration::from_millis(100);

/// What one outpaced stream's watchers saw, by watch ID: each event's
/// revision and key, and the number of the response it came in.
type Seen = HashMap<i64, Vec<(i64, String, usize)>>;

async fn run_outpaced(endpoint: String) -> Result<(), String> {
    let channel = |endpoint: String| async move {
        Endpoint::from_shared(endpoint)
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))
    };
    let writer = channel(endpoint.clone()).await?;
    let watching = channel(endpoint).await?;

    let events_per_writer = OUTPACED_WRITES + OUTPACED_WRITES / 25;
    let events = events_per_writer * OUTPACED_WRITERS;
    let mut readers = Vec::new();
    for _ in 0..OUTPACED_STREAMS {
        let creates = (1..=OUTPACED_WATCHERS).map(|id| WatchCreateRequest {
            key: b"paced/".to_vec(),
            range_end: b"paced0".to_vec(),
            watch_id: id,
            ..Default::default()
        });
        let client = WatchClient::new(watching.clone());
        let (requests, responses) = open_watchers(client, creates).await?;
        readers.push(tokio::spawn(read_outpaced(requests, responses, events)));
    }

    let mut writers = Vec::new();
    for w in 0..OUTPACED_WRITERS {
        writers.push(tokio::spawn(write_outpaced(
            KvClient::new(writer.clone()),
            w,
        )));
    }
    let mut expected: Vec<(i64, String)> = Vec::new();
    for writer in writers {
        let written = writer.await.map_err(|e| e.to_string())??;
        for (revision, keys) in written {
            expected.extend(keys.into_iter().map(|k| (revision, k)));
        }
    }
    // A txn's keys keep their order: the sort is stable.
    expected.sort_by_key(|(revision, _)| *revision);
    let revisions = OUTPACED_WRITERS * OUTPACED_WRITES;

    let mut most = 0;
    for reader in readers {
        let seen = reader.await.map_err(|e| e.to_string())??;
        for id in 1..=OUTPACED_WATCHERS {
            let got = seen.get(&id).cloned().unwrap_or_default();
            let events: Vec<(i64, String)> = got.iter().map(|(r, k, _)| (*r, k.clone())).collect();
            if events != expected {
                let first = events
                    .iter()
                    .zip(&expected)
                    .position(|(a, b)| a != b)
                    .unwrap_or(events.len().min(expected.len()));
                return Err(format!(
                    "watcher {id}: {} events, expected {}; first difference at {first}: {:?} vs {:?}",
                    events.len(),
                    expected.len(),
                    events.get(first),
                    expected.get(first)
                ));
            }
            for pair in got.windows(2) {
                let [(ra, _, a), (rb, _, b)] = pair else {
                    continue;
                };
                if ra == rb && a != b {
                    return Err(format!("watcher {id}: revision {ra} split"));
                }
            }
            let mut numbers: Vec<usize> = got.iter().map(|(_, _, n)| *n).collect();
            numbers.dedup();
            most = most.max(numbers.len());
        }
    }
    eprintln!("{revisions} revisions reached each watcher in at most {most} responses");
    if most >= revisions {
        return Err(format!(
            "{revisions} revisions in up to {most} responses per watcher, expected fewer"
        ));
    }
    Ok(())
}

/// Opens a stream with the watchers `creates` asks for, each created.
async fn open_watchers(
    mut client: WatchClient<Channel>,
    creates: impl IntoIterator<Item = WatchCreateRequest>,
) -> Result<
    (
        UnboundedSender<WatchRequest>,
        tonic::Streaming<WatchResponse>,
    ),
    String,
> {
    let (requests, receiver) = unbounded_channel();
    let mut watchers = 0;
    for create in creates {
        requests
            .send(WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(create)),
            })
            .map_err(|e| e.to_string())?;
        watchers += 1;
    }
    let mut responses = client
        .watch(Requests(receiver))
        .await
        .map_err(|e| format!("watch: {e}"))?
        .into_inner();
    for _ in 0..watchers {
        let response = next(&mut responses).await?;
        if !response.created {
            return Err(format!("expected a created response, got {response:?}"));
        }
    }
    Ok((requests, responses))
}

/// Reads a stream as fast as it comes until each watcher saw `events`.
async fn read_outpaced(
    requests: UnboundedSender<WatchRequest>,
    mut responses: tonic::Streaming<WatchResponse>,
    events: usize,
) -> Result<Seen, String> {
    let mut seen = Seen::new();
    let mut complete = std::collections::HashSet::new();
    let mut number = 0;
    while (complete.len() as i64) < OUTPACED_WATCHERS {
        let response = next(&mut responses).await?;
        number += 1;
        if response.canceled || response.compact_revision != 0 {
            return Err(format!("watcher canceled: {response:?}"));
        }
        if number == 1 {
            // Behind from the start: what is written meanwhile queues up.
            tokio::time::sleep(OUTPACED_PAUSE).await;
        }
        let watcher = seen.entry(response.watch_id).or_default();
        for event in response.events {
            let kv = event.kv.unwrap_or_default();
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            watcher.push((kv.mod_revision, key, number));
        }
        if watcher.len() >= events {
            complete.insert(response.watch_id);
        }
    }
    drop(requests);
    Ok(seen)
}

/// One writer's writes, each a txn of one or two puts; returns each one's
/// revision and keys, in the order written.
async fn write_outpaced(
    mut kv: KvClient<Channel>,
    w: usize,
) -> Result<Vec<(i64, Vec<String>)>, String> {
    let mut written = Vec::new();
    let started = Instant::now();
    for n in 0..OUTPACED_WRITES {
        if started.elapsed() > WRITE_DEADLINE {
            return Err(format!("writer {w}: only {n} writes in {WRITE_DEADLINE:?}"));
        }
        let keys: Vec<String> = if n % 25 == 24 {
            vec![format!("paced/{w}/{n}a"), format!("paced/{w}/{n}b")]
        } else {
            vec![format!("paced/{w}/{n}")]
        };
        let puts = keys.iter().map(|k| RequestOp {
            request: Some(Op::RequestPut(PutRequest {
                key: k.clone().into_bytes(),
                value: vec![b'v'; OUTPACED_VALUE_BYTES],
                ..Default::default()
            })),
        });
        let txn = TxnRequest {
            success: puts.collect(),
            ..Default::default()
        };
        let revision = kv
            .txn(txn)
            .await
            .map_err(|e| format!("txn: {e}"))?
            .into_inner()
            .header
            .map_or(0, |h| h.revision);
        written.push((revision, keys));
    }
    Ok(written)
}

async fn next(responses: &mut tonic::Streaming<WatchResponse>) -> Result<WatchResponse, String> {
    match tokio::time::timeout(READ_DEADLINE, responses.message()).await {
        Ok(Ok(Some(response))) => Ok(response),
        Ok(Ok(None)) => Err("the watch stream ended".into()),
        Ok(Err(e)) => Err(format!("watch stream: {e}")),
        Err(_) => Err(format!("no response in {READ_DEADLINE:?}")),
    }
}

struct Requests<T>(UnboundedReceiver<T>);

impl<T> Stream for Requests<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}
