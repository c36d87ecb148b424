//! 1,000 watchers on overlapping prefixes, spread over 20 streams on 4
//! connections, while 4 writers put, delete and write two-key txns. Every
//! delivered event is checked against the writers' own record of what they
//! wrote:
//!
//! - each watcher sees exactly the events of its range from its start
//!   revision on, in revision order, none twice, none skipped (a tenth of
//!   the watchers start at revision 1 and replay history first);
//! - all events of one revision reach a watcher in one response;
//! - a progress notification for revision P arrives only after every event
//!   up to P for every watcher of its stream.
//!
//! One stream (on its own connection, with small HTTP/2 windows) reads
//! nothing for a while, so its watchers fall behind, are moved to the
//! catch-up path and must still see everything exactly once. The writers
//! start only once a progress notification on that stream shows all its
//! watchers synced: a watcher still catching up when the stream stops
//! reading would stay on the catch-up path and never fall behind. It also holds
//! the one watcher of a prefix where a fifth writer puts values of 1 MiB:
//! a stream's queue is bounded in bytes, and those fill it however few
//! revisions they are.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::request_op::Request as Op;
use oxetcd_proto::etcdserverpb::watch_client::WatchClient;
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RequestOp, TxnRequest, WatchCreateRequest,
    WatchProgressRequest, WatchRequest,
};
use oxetcd_proto::prefix_end;
use oxetcd_tests::{Server, ServerKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::Notify;
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint};

const WATCHERS: usize = 1_000;
/// Watcher `WATCHERS`, on the slow stream, watches [`BIG_PREFIX`] alone.
const BIG_PREFIX: &str = "s/";
/// Values of this size put under [`BIG_PREFIX`] while the slow stream
/// reads nothing: more bytes than a stream may queue (16 MiB).
const BIG_WRITES: usize = 24;
const BIG_VALUE_BYTES: usize = 1 << 20;
const STREAMS: usize = 20;
const CONNECTIONS: usize = 4;
const WRITERS: usize = 4;
const WRITES_PER_WRITER: usize = 250;
/// The slow stream reads nothing for this long: with the small HTTP/2
/// windows of its connection, long enough to fill its queue on the server.
const SLOW_PERIOD: Duration = Duration::from_secs(3);
/// ... and, on a machine so busy that this is longer, until this share of
/// the writes is made (in percent), so its queue fills however slowly the
/// writes go ...
const SLOW_UNTIL_WRITTEN_PERCENT: usize = 75;
/// ... but never longer than this.
const SLOW_PERIOD_MAX: Duration = Duration::from_secs(30);
/// HTTP/2 windows of the slow stream's own connection, so the server feels
/// its slowness at once instead of after megabytes of client buffering.
const SLOW_WINDOW_BYTES: u32 = 64 * 1024;
/// Longest to wait for the slow stream's watchers to be synced.
const SYNCED_DEADLINE: Duration = Duration::from_secs(20);
/// Longest to wait for every watcher to receive everything.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(20);

/// One event as the writers and the watchers see it: (revision, key, is delete).
type Seen = (i64, String, bool);

#[derive(Default)]
struct WatcherLog {
    prefix: String,
    /// First revision the watcher must see (known once created).
    start: Option<i64>,
    events: Vec<Seen>,
    /// For each event, the number of the response it came in.
    response_of: Vec<usize>,
    canceled: bool,
}

#[derive(Default)]
struct StreamLog {
    responses: usize,
    /// Progress notifications: (revision, events received per watcher then).
    progress: Vec<(i64, Vec<(usize, usize)>)>,
}

struct Shared {
    watchers: Vec<Mutex<WatcherLog>>,
    streams: Vec<Mutex<StreamLog>>,
    /// Writes made so far, by all writers.
    written: AtomicUsize,
    /// Told once the slow stream's watchers are all synced.
    slow_stream_synced: Notify,
}

#[test]
fn a_thousand_watchers_under_concurrent_writes_see_exactly_their_events() {
    let server = Server::start(ServerKind::Oxetcd).expect("server starts");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let endpoint = server.endpoint().to_owned();
    let result = runtime.block_on(run(endpoint));
    if let Err(e) = result {
        panic!("{e}\n--- server log ---\n{}", server.log_tail());
    }
    // The slow stream's watchers went through the catch-up path.
    let stalls = server.log().matches("fell behind").count();
    eprintln!("{stalls} watchers fell behind and caught up from storage");
    assert!(
        stalls > 0,
        "no watcher fell behind; the slow path went untested"
    );
}

async fn run(endpoint: String) -> Result<(), String> {
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        let channel = Endpoint::from_shared(endpoint.clone())
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))?;
        channels.push(channel);
    }
    let slow_channel = Endpoint::from_shared(endpoint.clone())
        .map_err(|e| e.to_string())?
        .initial_stream_window_size(SLOW_WINDOW_BYTES)
        .initial_connection_window_size(SLOW_WINDOW_BYTES)
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let shared = Arc::new(Shared {
        watchers: (0..=WATCHERS)
            .map(|i| {
                Mutex::new(WatcherLog {
                    prefix: prefix_of(i),
                    ..Default::default()
                })
            })
            .collect(),
        streams: (0..STREAMS).map(|_| Mutex::default()).collect(),
        written: AtomicUsize::new(0),
        slow_stream_synced: Notify::new(),
    });

    // Streams and their watchers (client-chosen IDs: watcher i is i + 1).
    let mut senders = Vec::new();
    for stream in 0..STREAMS {
        let (sender, receiver) = unbounded_channel();
        for i in watchers_of(stream) {
            let create = WatchCreateRequest {
                key: prefix_of(i).into_bytes(),
                range_end: prefix_end(prefix_of(i).as_bytes()),
                start_revision: if i % 10 == 0 { 1 } else { 0 },
                watch_id: i as i64 + 1,
                ..Default::default()
            };
            let _ = sender.send(WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(create)),
            });
        }
        let channel = if stream == 0 {
            slow_channel.clone()
        } else {
            channels[stream % CONNECTIONS].clone()
        };
        // Catch-up responses of the 1 MiB values exceed tonic's 4 MiB default.
        let mut client = WatchClient::new(channel).max_decoding_message_size(usize::MAX);
        let responses = client
            .watch(Requests(receiver))
            .await
            .map_err(|e| format!("watch: {e}"))?
            .into_inner();
        tokio::spawn(read_stream(stream, responses, shared.clone()));
        senders.push(sender);
    }
    // Answered once every watcher created before it is synced.
    let _ = senders[0].send(WatchRequest {
        request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
    });
    tokio::time::timeout(SYNCED_DEADLINE, shared.slow_stream_synced.notified())
        .await
        .map_err(|_| "the slow stream's watchers were never synced".to_owned())?;
    let started = Instant::now();

    // Writers, and progress requests while they write.
    let truth: Arc<Mutex<BTreeMap<i64, Vec<Seen>>>> = Arc::default();
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let kv = KvClient::new(channels[writer % CONNECTIONS].clone());
        writers.push(tokio::spawn(write(
            writer,
            kv,
            truth.clone(),
            shared.clone(),
        )));
    }
    writers.push(tokio::spawn(write_big(
        KvClient::new(channels[0].clone()),
        truth.clone(),
    )));
    let progress = {
        let senders = senders.clone();
        tokio::spawn(async move {
            for _ in 0..40 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                for sender in &senders {
                    let _ = sender.send(WatchRequest {
                        request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
                    });
                }
            }
        })
    };
    for writer in writers {
        writer.await.map_err(|e| e.to_string())??;
    }
    let _ = progress.await;
    let written = started.elapsed();
    let truth = truth.lock().unwrap().clone();
    let all: Vec<Seen> = truth.values().flatten().cloned().collect();

    // Wait until every watcher has everything it should.
    let expected_for = |log: &WatcherLog| -> Option<Vec<Seen>> {
        let start = log.start?;
        Some(
            all.iter()
                .filter(|(rev, key, _)| *rev >= start && key.starts_with(&log.prefix))
                .cloned()
                .collect(),
        )
    };
    loop {
        let done = shared.watchers.iter().all(|w| {
            let log = w.lock().unwrap();
            expected_for(&log).is_some_and(|e| log.events.len() >= e.len())
        });
        if done {
            break;
        }
        if started.elapsed() > written + DELIVERY_DEADLINE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let delivered_in = started.elapsed();
    // A little longer: anything extra (a duplicate) shows up too.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut failures = Vec::new();
    let mut delivered = 0;
    for (i, watcher) in shared.watchers.iter().enumerate() {
        let log = watcher.lock().unwrap();
        delivered += log.events.len();
        if log.canceled {
            failures.push(format!("watcher {i} was canceled"));
            continue;
        }
        let Some(expected) = expected_for(&log) else {
            failures.push(format!("watcher {i} was never created"));
            continue;
        };
        if log.events != expected {
            let first_diff = log
                .events
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(log.events.len().min(expected.len()));
            failures.push(format!(
                "watcher {i} ({}, from {:?}): got {} events, expected {}; first difference at {first_diff}: got {:?}, expected {:?}",
                log.prefix,
                log.start,
                log.events.len(),
                expected.len(),
                log.events.get(first_diff),
                expected.get(first_diff)
            ));
            continue;
        }
        // One response per revision.
        let mut response_of_revision: HashMap<i64, usize> = HashMap::new();
        for (event, &response) in log.events.iter().zip(&log.response_of) {
            let first = *response_of_revision.entry(event.0).or_insert(response);
            if first != response {
                failures.push(format!(
                    "watcher {i}: revision {} split over responses {first} and {response}",
                    event.0
                ));
                break;
            }
        }
    }
    // Progress never ran ahead of delivery.
    let mut notifications = 0;
    for (s, stream) in shared.streams.iter().enumerate() {
        let stream = stream.lock().unwrap();
        for (revision, counts) in &stream.progress {
            notifications += 1;
            for &(i, received) in counts {
                let log = shared.watchers[i].lock().unwrap();
                let due = expected_for(&log)
                    .unwrap_or_default()
                    .iter()
                    .filter(|(rev, _, _)| rev <= revision)
                    .count();
                if received < due {
                    failures.push(format!(
                        "stream {s}: progress at revision {revision} while watcher {i} had {received} of {due} events"
                    ));
                }
            }
        }
    }
    eprintln!(
        "{} writes in {written:.1?}; {delivered} events to {WATCHERS} watchers delivered in {delivered_in:.1?} \
         ({:.0} events/s); {notifications} progress notifications checked",
        truth.len(),
        delivered as f64 / delivered_in.as_secs_f64()
    );
    if notifications == 0 {
        failures.push("no progress notification arrived".to_owned());
    }
    if failures.is_empty() {
        Ok(())
    } else {
        let shown = failures.len().min(20);
        Err(format!(
            "{} failures (first {shown}):\n{}",
            failures.len(),
            failures[..shown].join("\n")
        ))
    }
}

/// The watchers of a stream: every `STREAMS`th, and the slow stream's
/// watcher of the large values.
fn watchers_of(stream: usize) -> Vec<usize> {
    let mut watchers: Vec<usize> = (stream..WATCHERS).step_by(STREAMS).collect();
    if stream == 0 {
        watchers.push(WATCHERS);
    }
    watchers
}

/// Overlapping prefixes: everything, one of ten groups, or one key; the
/// last watcher's is [`BIG_PREFIX`].
fn prefix_of(i: usize) -> String {
    if i == WATCHERS {
        return BIG_PREFIX.to_owned();
    }
    match i % 3 {
        0 => "k/".to_owned(),
        1 => format!("k/{}/", i % 10),
        _ => format!("k/{}/{}", i % 10, (i / 10) % 10),
    }
}

async fn read_stream(
    stream: usize,
    mut responses: tonic::Streaming<oxetcd_proto::etcdserverpb::WatchResponse>,
    shared: Arc<Shared>,
) {
    // The slow stream pauses after its first progress notification.
    let mut paused = stream != 0;
    while let Ok(Some(response)) = responses.message().await {
        let number = {
            let mut log = shared.streams[stream].lock().unwrap();
            log.responses += 1;
            log.responses
        };
        if response.watch_id == -1 {
            let revision = response.header.map_or(0, |h| h.revision);
            let counts = watchers_of(stream)
                .into_iter()
                .map(|i| (i, shared.watchers[i].lock().unwrap().events.len()))
                .collect();
            shared.streams[stream]
                .lock()
                .unwrap()
                .progress
                .push((revision, counts));
            if !paused {
                paused = true;
                shared.slow_stream_synced.notify_one();
                pause(&shared).await;
            }
            continue;
        }
        let Some(i) = usize::try_from(response.watch_id - 1)
            .ok()
            .filter(|&i| i <= WATCHERS)
        else {
            continue;
        };
        {
            let mut log = shared.watchers[i].lock().unwrap();
            if response.created {
                let current = response.header.map_or(0, |h| h.revision);
                log.start = Some(if i % 10 == 0 { 1 } else { current + 1 });
            }
            if response.canceled {
                log.canceled = true;
            }
            for event in response.events {
                let kv = event.kv.unwrap_or_default();
                log.events.push((
                    kv.mod_revision,
                    String::from_utf8_lossy(&kv.key).into_owned(),
                    event.r#type == 1,
                ));
                log.response_of.push(number);
            }
        }
    }
}

/// The slow stream's pause: reads nothing for [`SLOW_PERIOD`], longer on a
/// busy machine (see [`SLOW_UNTIL_WRITTEN_PERCENT`]).
async fn pause(shared: &Shared) {
    let since = Instant::now();
    let most = WRITERS * WRITES_PER_WRITER * SLOW_UNTIL_WRITTEN_PERCENT / 100;
    while since.elapsed() < SLOW_PERIOD
        || (shared.written.load(Ordering::Relaxed) < most && since.elapsed() < SLOW_PERIOD_MAX)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes and records what it wrote, by revision.
async fn write(
    writer: usize,
    mut kv: KvClient<Channel>,
    truth: Arc<Mutex<BTreeMap<i64, Vec<Seen>>>>,
    shared: Arc<Shared>,
) -> Result<(), String> {
    let mut state = 0x9e37_79b9_u64 ^ (writer as u64 + 1);
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    for n in 0..WRITES_PER_WRITER {
        let key = |r: usize| format!("k/{}/{}", r % 10, (r / 10) % 10);
        match next() % 5 {
            0 => {
                let k = key(next());
                let response = kv
                    .delete_range(DeleteRangeRequest {
                        key: k.clone().into_bytes(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| format!("delete: {e}"))?
                    .into_inner();
                if response.deleted == 1 {
                    let revision = response.header.map_or(0, |h| h.revision);
                    truth
                        .lock()
                        .unwrap()
                        .insert(revision, vec![(revision, k, true)]);
                }
            }
            1 => {
                let (a, b) = (key(next()), key(next()));
                if a == b {
                    continue;
                }
                let op = |k: &str| RequestOp {
                    request: Some(Op::RequestPut(PutRequest {
                        key: k.as_bytes().to_vec(),
                        value: format!("t{writer}-{n}").into_bytes(),
                        ..Default::default()
                    })),
                };
                let response = kv
                    .txn(TxnRequest {
                        compare: vec![],
                        success: vec![op(&a), op(&b)],
                        failure: vec![],
                    })
                    .await
                    .map_err(|e| format!("txn: {e}"))?
                    .into_inner();
                let revision = response.header.map_or(0, |h| h.revision);
                truth
                    .lock()
                    .unwrap()
                    .insert(revision, vec![(revision, a, false), (revision, b, false)]);
            }
            _ => {
                let value = format!("p{writer}-{n}").into_bytes();
                put(&mut kv, key(next()), value, &truth).await?;
            }
        }
        shared.written.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Puts [`BIG_WRITES`] values of [`BIG_VALUE_BYTES`] under [`BIG_PREFIX`]
/// and records them.
async fn write_big(
    mut kv: KvClient<Channel>,
    truth: Arc<Mutex<BTreeMap<i64, Vec<Seen>>>>,
) -> Result<(), String> {
    for n in 0..BIG_WRITES {
        let value = vec![b'b'; BIG_VALUE_BYTES];
        put(&mut kv, format!("{BIG_PREFIX}{n}"), value, &truth).await?;
    }
    Ok(())
}

/// Puts `key` and records the put at its revision.
async fn put(
    kv: &mut KvClient<Channel>,
    key: String,
    value: Vec<u8>,
    truth: &Mutex<BTreeMap<i64, Vec<Seen>>>,
) -> Result<(), String> {
    let response = kv
        .put(PutRequest {
            key: key.clone().into_bytes(),
            value,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("put {key}: {e}"))?
        .into_inner();
    let revision = response.header.map_or(0, |h| h.revision);
    truth
        .lock()
        .unwrap()
        .insert(revision, vec![(revision, key, false)]);
    Ok(())
}

/// A channel's receiving end as the request stream of a call.
struct Requests<T>(UnboundedReceiver<T>);

impl<T> Stream for Requests<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}
