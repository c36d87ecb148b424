//! The driver: runs the node on its own OS thread and connects it to the
//! async world.
//!
//! Design:
//! - The [`Node`] lives on one dedicated thread, because applying entries
//!   writes the backend with blocking calls that must not stall an async
//!   executor. The thread waits on a `std::sync::mpsc` channel until the next
//!   command or the node's `poll_timeout`, feeds every command already queued
//!   (up to [`INPUT_BATCH_MAX`]) with `now` from a monotonic clock, then
//!   drains `poll_output` until `None`. Feeding a burst before draining is how
//!   many client requests end up in one proposal batch.
//! - `Output::Persist` goes to a second thread that owns the log writes: it
//!   calls [`LogStore::append`] (fsync) and answers `Input::Persisted` with
//!   the persist's ID through the driver's channel, once per `Persist` and
//!   in order. The node asks for the next write only after the previous one
//!   is acknowledged, so writes that arrive during an fsync share the next
//!   one (group commit). Log compactions (`Output::CompactLog`) go to the
//!   same thread, after a sync of the backend.
//! - Peer messages are not wired yet: this driver runs a member with no
//!   peers, whose raft sends nothing.
//! - Clients hold a cloneable [`Handle`]. Each request waits on a oneshot kept
//!   in a [`Slab`] owned by the driver thread; its slot key is the
//!   [`RequestId`]. `Output::Read` only says "ready": the requesting task then
//!   runs the range on a fresh backend snapshot on a blocking thread, so reads
//!   run concurrently with writes and with each other.
//! - Watch streams register an unbounded channel with the driver thread;
//!   the node's watch outputs are routed into it through the stream's gate
//!   (see [`crate::watch_routes`]), and the stream's task runs catch-ups on
//!   a snapshot on a blocking thread, reporting back with
//!   `Input::WatchCaughtUp`.
//! - A storage error is final: it is logged and the process exits non-zero.
//!   A panic on the driver thread (a bug) is treated the same way, because a
//!   server whose node is gone cannot answer anything.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;

use futures_channel::{mpsc as async_mpsc, oneshot};
use oxetcd_core::raft::{Persist, PersistId};
use oxetcd_core::storage::{KvMeta, KvRead, KvStore, LogStore, StorageError};
use oxetcd_core::watch::{self, CatchUp, CatchUpOutcome, StreamId};
use oxetcd_core::{
    mvcc, Config, Error, Input, Instant, Node, Output, Request, RequestId, Response,
};
use oxetcd_proto::etcdserverpb::{RangeRequest, RangeResponse, ResponseHeader, WatchRequest};
use slab::Slab;
use tracing::{debug, error, info};

use crate::watch_routes::{StreamItem, WatchRoutes};

/// Client requests admitted but not yet answered, across all connections.
/// Beyond it new requests are refused with `etcdserver: too many requests`
/// instead of queueing without bound: each one holds its decoded request
/// (up to `--max-request-bytes`) and a slot in the driver. Sized well above
/// what a node applies in one round trip of a busy cluster.
pub const IN_FLIGHT_REQUESTS_MAX: usize = 8192;

/// Commands fed to the node before its outputs are drained. Large enough to
/// batch a burst of proposals into one log write, small enough that the log
/// writer is never left idle behind a long queue of inputs.
const INPUT_BATCH_MAX: usize = 1024;

/// Runs blocking work on the runtime's blocking threads.
pub type Blocking = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

/// A handle to the running node, cloned into every service.
pub struct Handle<K> {
    commands: Sender<Command>,
    in_flight: Arc<AtomicUsize>,
    kv: K,
    blocking: Blocking,
    /// Numbers watch streams.
    next_stream: Arc<AtomicU64>,
}

impl<K: Clone> Clone for Handle<K> {
    fn clone(&self) -> Self {
        Self {
            commands: self.commands.clone(),
            in_flight: self.in_flight.clone(),
            kv: self.kv.clone(),
            blocking: self.blocking.clone(),
            next_stream: self.next_stream.clone(),
        }
    }
}

/// The receiving end of one watch stream, from [`Handle::open_watch`].
pub(crate) struct WatchStreamParts {
    pub(crate) stream: StreamId,
    pub(crate) items: async_mpsc::UnboundedReceiver<StreamItem>,
    pub(crate) queued: Arc<AtomicUsize>,
}

/// What the driver thread receives.
enum Command {
    Client(Request, oneshot::Sender<Reply>),
    Persisted(PersistId),
    Stop(oneshot::Sender<()>),
    WatchOpen {
        stream: StreamId,
        items: async_mpsc::UnboundedSender<StreamItem>,
        queued: Arc<AtomicUsize>,
    },
    WatchClosed(StreamId),
    /// An input about watches, fed as is.
    Watch(Input),
}

/// The driver's answer to one client request.
enum Reply {
    Done(Result<Response, Error>),
    /// The range may run now, on a fresh snapshot.
    Read {
        request: RangeRequest,
        header: ResponseHeader,
    },
}

/// Work for the log-writer thread, done in order.
enum LogJob {
    /// One batch of log writes, acknowledged with its ID.
    Persist(Persist),
    /// Drop the log up to and including this index, once the backend that
    /// holds it is durable.
    Compact(u64),
}

/// Starts the node on `log` and `kv` on its own thread; returns once the
/// node has been built (it may replay log entries first).
pub async fn start<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    blocking: Blocking,
) -> Result<Handle<K>, Error> {
    let (commands, inbox) = mpsc::channel();
    let (started, on_start) = oneshot::channel();
    let node_kv = kv.clone();
    let persisted = commands.clone();
    thread::Builder::new()
        .name("oxetcd-node".into())
        .spawn(move || {
            let run =
                AssertUnwindSafe(move || drive(config, log, node_kv, inbox, persisted, started));
            if panic::catch_unwind(run).is_err() {
                error!("the node thread panicked; stopping");
                std::process::exit(1);
            }
        })
        .map_err(|e| Error::Storage(StorageError::new(format!("spawning the node thread: {e}"))))?;
    match on_start.await {
        Ok(Ok(())) => Ok(Handle {
            commands,
            in_flight: Arc::new(AtomicUsize::new(0)),
            kv,
            blocking,
            next_stream: Arc::new(AtomicU64::new(1)),
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Stopped),
    }
}

impl<K: KvStore> Handle<K> {
    /// Sends one request through the node and waits for its answer. A range
    /// is answered by reading a backend snapshot once the node allows it.
    pub async fn request(&self, request: Request) -> Result<Response, Error> {
        let _slot = self.admit()?;
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Client(request, reply))
            .map_err(|_| Error::Stopped)?;
        match answer.await.map_err(|_| Error::Stopped)? {
            Reply::Done(result) => result,
            Reply::Read { request, header } => {
                self.read(request, header).await.map(Response::Range)
            }
        }
    }

    /// The backend's meta record (revision, applied index), read on a
    /// blocking thread.
    pub async fn meta(&self) -> Result<KvMeta, Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let meta = kv.read().and_then(|view| view.meta());
            meta.map_err(fatal_storage)
        })
        .await
    }

    /// Stops the node: pending requests are answered `etcdserver: server
    /// stopped`, outstanding log writes finish, and the backend is synced.
    pub async fn stop(&self) {
        let (done, stopped) = oneshot::channel();
        if self.commands.send(Command::Stop(done)).is_ok() {
            let _ = stopped.await;
        }
    }

    /// Opens a watch stream: the driver routes its responses to the
    /// returned receiver from now on.
    pub(crate) fn open_watch(&self) -> Result<WatchStreamParts, Error> {
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let (items, receiver) = async_mpsc::unbounded();
        let queued = Arc::new(AtomicUsize::new(0));
        self.commands
            .send(Command::WatchOpen {
                stream,
                items,
                queued: queued.clone(),
            })
            .map_err(|_| Error::Stopped)?;
        Ok(WatchStreamParts {
            stream,
            items: receiver,
            queued,
        })
    }

    /// Passes a client's watch request to the node.
    pub(crate) fn watch_request(&self, stream: StreamId, request: WatchRequest) {
        let _ = self
            .commands
            .send(Command::Watch(Input::Watch { stream, request }));
    }

    /// The stream's client is gone.
    pub(crate) fn close_watch(&self, stream: StreamId) {
        let _ = self.commands.send(Command::WatchClosed(stream));
    }

    /// Reads a catch-up on a fresh snapshot, on a blocking thread; the
    /// stream reports it with [`Handle::caught_up`] once it queued the
    /// response.
    pub(crate) async fn catch_up(&self, job: CatchUp) -> Result<CatchUpOutcome, Error> {
        let kv = self.kv.clone();
        let outcome = self
            .run_blocking(move || {
                let view = kv.read().map_err(fatal_storage)?;
                watch::catch_up(&view, &job).map_err(fatal_storage)
            })
            .await?;
        Ok(outcome)
    }

    /// Tells the node a catch-up was delivered.
    pub(crate) fn caught_up(&self, input: Input) {
        let _ = self.commands.send(Command::Watch(input));
    }

    /// Runs an admitted range on a fresh snapshot. A point read touches one
    /// key, a few microseconds of work, so it runs right here: handing it to
    /// a blocking thread would cost more than the read. Anything that may
    /// walk many keys goes to a blocking thread so it never stalls the
    /// executor.
    async fn read(
        &self,
        request: RangeRequest,
        header: ResponseHeader,
    ) -> Result<RangeResponse, Error> {
        if request.range_end.is_empty() {
            return range_on_snapshot(&self.kv, &request, header);
        }
        let kv = self.kv.clone();
        self.run_blocking(move || range_on_snapshot(&kv, &request, header))
            .await
    }

    async fn run_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let (tx, rx) = oneshot::channel();
        (self.blocking)(Box::new(move || {
            // A panic here is a bug in the read path; the caller gets an
            // error instead of a runtime thread dying with it.
            match panic::catch_unwind(AssertUnwindSafe(work)) {
                Ok(result) => {
                    let _ = tx.send(result);
                }
                Err(_) => error!("a read panicked"),
            }
        }));
        rx.await.map_err(|_| Error::Stopped)?
    }

    fn admit(&self) -> Result<InFlight<'_>, Error> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let slot = InFlight(&self.in_flight);
        if before >= IN_FLIGHT_REQUESTS_MAX {
            return Err(Error::TooManyRequests);
        }
        Ok(slot)
    }
}

/// One admitted request; gives its slot back when dropped (answered, or the
/// client went away).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn range_on_snapshot<K: KvStore>(
    kv: &K,
    request: &RangeRequest,
    mut header: ResponseHeader,
) -> Result<RangeResponse, Error> {
    let view = kv.read().map_err(fatal_storage)?;
    let meta = view.meta().map_err(fatal_storage)?;
    let mut response = match mvcc::range(&view, request) {
        Err(Error::Storage(e)) => return Err(fatal_storage(e)),
        other => other?,
    };
    header.revision = meta.revision;
    response.header = Some(header);
    Ok(response)
}

/// The driver thread's body.
fn drive<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    inbox: Receiver<Command>,
    commands: Sender<Command>,
    started: oneshot::Sender<Result<(), Error>>,
) {
    let clock = Clock::new();
    let mut node = match Node::new(config, log.clone(), kv.clone(), clock.now()) {
        Ok(node) => node,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let (persist, jobs) = mpsc::channel();
    let writer_kv = kv.clone();
    let writer = match thread::Builder::new()
        .name("oxetcd-log".into())
        .spawn(move || write_log(log, writer_kv, jobs, commands))
    {
        Ok(writer) => writer,
        Err(e) => {
            let message = format!("spawning the log writer: {e}");
            let _ = started.send(Err(Error::Storage(StorageError::new(message))));
            return;
        }
    };
    let _ = started.send(Ok(()));

    let mut pending: Slab<oneshot::Sender<Reply>> = Slab::new();
    let mut routes = WatchRoutes::default();
    let mut feedback: Vec<Input> = Vec::new();
    let stopped = loop {
        let first = match node.poll_timeout() {
            Some(deadline) => match inbox.recv_timeout(deadline.saturating_since(clock.now())) {
                Ok(command) => Some(command),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break None,
            },
            None => match inbox.recv() {
                Ok(command) => Some(command),
                Err(_) => break None,
            },
        };
        let now = clock.now();
        let mut stop = None;
        let mut next = first;
        let mut fed = 0;
        while let Some(command) = next {
            match command {
                Command::Client(request, reply) => {
                    let slot = pending.vacant_entry();
                    let id = slot.key() as RequestId;
                    slot.insert(reply);
                    node.handle(now, Input::Client(id, request));
                }
                Command::Persisted(id) => node.handle(now, Input::Persisted { id }),
                Command::Stop(done) => {
                    stop = Some(done);
                    break;
                }
                Command::WatchOpen {
                    stream,
                    items,
                    queued,
                } => routes.open(stream, items, queued),
                Command::WatchClosed(stream) => {
                    routes.close(stream);
                    node.handle(now, Input::WatchClosed { stream });
                }
                Command::Watch(input) => node.handle(now, input),
            }
            fed += 1;
            next = if fed < INPUT_BATCH_MAX {
                inbox.try_recv().ok()
            } else {
                None
            };
        }
        if node.poll_timeout().is_some_and(|deadline| deadline <= now) {
            node.handle_timeout(now);
        }
        loop {
            while let Some(output) = node.poll_output() {
                execute(output, &mut pending, &persist, &mut routes, &mut feedback);
            }
            // Stalled watchers: the node moves them to catch-up.
            if feedback.is_empty() {
                break;
            }
            for input in feedback.drain(..) {
                node.handle(now, input);
            }
        }
        if let Some(done) = stop {
            break Some(done);
        }
    };

    for reply in pending.drain() {
        let _ = reply.send(Reply::Done(Err(Error::Stopped)));
    }
    // Let the log writer finish what it was given, so nothing acknowledged to
    // the node is half written.
    drop(persist);
    let _ = writer.join();
    if let Err(e) = kv.sync() {
        fatal("syncing the backend", &e);
    }
    info!("node stopped");
    if let Some(done) = stopped {
        let _ = done.send(());
    }
}

fn execute(
    output: Output,
    pending: &mut Slab<oneshot::Sender<Reply>>,
    persist: &Sender<LogJob>,
    routes: &mut WatchRoutes,
    feedback: &mut Vec<Input>,
) {
    match output {
        Output::Persist(job) => {
            // The writer only stops after this thread drops `persist`.
            let _ = persist.send(LogJob::Persist(job));
        }
        Output::CompactLog { index } => {
            let _ = persist.send(LogJob::Compact(index));
        }
        Output::Send(message) => {
            debug!(to = message.to, msg_type = ?message.msg_type, "no peer transport; message dropped");
        }
        Output::SendSnapshot { to, .. } => {
            debug!(to, "no peer transport; snapshot not sent");
            feedback.push(Input::SnapshotSent {
                to,
                delivered: false,
            });
        }
        Output::Respond(id, result) => {
            if let Err(Error::Storage(e)) = &result {
                fatal("applying entries", e);
            }
            answer(pending, id, Reply::Done(result));
        }
        Output::Read {
            id,
            request,
            header,
        } => answer(pending, id, Reply::Read { request, header }),
        Output::Fatal(e) => fatal("the node's storage", &e),
        Output::Watch {
            stream,
            response,
            fragment,
        } => feedback.extend(routes.deliver(stream, response, fragment)),
        Output::WatchCatchUp(job) => routes.catch_up(job),
    }
}

fn answer(pending: &mut Slab<oneshot::Sender<Reply>>, id: RequestId, reply: Reply) {
    let waiter = usize::try_from(id)
        .ok()
        .and_then(|key| pending.try_remove(key));
    match waiter {
        // The client may have gone away; its answer is simply dropped.
        Some(waiter) => {
            let _ = waiter.send(reply);
        }
        None => debug!(request_id = id, "answer for an unknown request"),
    }
}

/// The log writer thread's body: one fsynced append per persist,
/// acknowledged in order; compactions after a backend sync.
fn write_log<L: LogStore, K: KvStore>(
    log: L,
    kv: K,
    jobs: Receiver<LogJob>,
    commands: Sender<Command>,
) {
    for job in jobs {
        match job {
            LogJob::Persist(persist) => {
                if let Some(snapshot) = &persist.snapshot {
                    // Snapshots arrive over the peer transport, which this
                    // driver does not run: there is no data to install.
                    let what = format!("installing snapshot {}", snapshot.index);
                    fatal(&what, &"no snapshot data was received");
                }
                if let Err(e) = log.append(&persist.entries, persist.hard_state.as_ref()) {
                    fatal("appending to the raft log", &e);
                }
                if commands.send(Command::Persisted(persist.id)).is_err() {
                    break;
                }
            }
            LogJob::Compact(index) => {
                // The log is the durable record of what the backend holds
                // only as far as the backend is durable.
                if let Err(e) = kv.sync() {
                    fatal("syncing the backend", &e);
                }
                if let Err(e) = log.compact(index + 1) {
                    fatal("compacting the raft log", &e);
                }
            }
        }
    }
}

fn fatal_storage(e: StorageError) -> Error {
    fatal("reading the backend", &e)
}

/// Logs a storage failure and exits: storage errors are never retried.
fn fatal(what: &str, error: &dyn std::fmt::Display) -> ! {
    error!(error = %error, "{what} failed; stopping");
    std::process::exit(1)
}

/// The driver's monotonic clock, as the node's [`Instant`]: nanoseconds
/// since the driver started.
struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    fn new() -> Self {
        Self {
            origin: std::time::Instant::now(),
        }
    }

    fn now(&self) -> Instant {
        let nanos = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Instant::from_nanos(nanos)
    }
}

#[cfg(test)]
mod tests {
    use oxetcd_core::memory::{MemoryKv, MemoryLog};
    use oxetcd_proto::etcdserverpb::PutRequest;

    use super::*;

    fn thread_blocking() -> Blocking {
        Arc::new(|work| {
            thread::spawn(work);
        })
    }

    fn put(key: &str, value: &str) -> Request {
        Request::Put(PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            ..Default::default()
        })
    }

    /// Concurrent writes all land, a range sees them with the snapshot's
    /// revision, and stopping answers later requests with `Stopped`.
    #[test]
    fn writes_then_reads_then_stops() {
        futures_lite::future::block_on(async {
            let config = oxetcd_core::Config::single("test");
            let handle = start(
                config,
                MemoryLog::default(),
                MemoryKv::default(),
                thread_blocking(),
            )
            .await
            .unwrap();
            let writes = (0..64).map(|i| handle.request(put(&format!("k{i:02}"), "v")));
            for result in futures_util::future::join_all(writes).await {
                assert!(matches!(result, Ok(Response::Put(_))), "{result:?}");
            }
            let range = RangeRequest {
                key: b"k".to_vec(),
                range_end: b"l".to_vec(),
                ..Default::default()
            };
            let Ok(Response::Range(response)) = handle.request(Request::Range(range)).await else {
                panic!("range failed");
            };
            assert_eq!(response.count, 64);
            let header = response.header.unwrap();
            assert_eq!(header.revision, 65);
            assert_eq!(handle.meta().await.unwrap().revision, 65);

            handle.stop().await;
            assert_eq!(handle.request(put("late", "v")).await, Err(Error::Stopped));
        });
    }

    #[test]
    fn in_flight_bound_refuses_beyond_the_limit() {
        futures_lite::future::block_on(async {
            let config = oxetcd_core::Config::single("test");
            let handle = start(
                config,
                MemoryLog::default(),
                MemoryKv::default(),
                thread_blocking(),
            )
            .await
            .unwrap();
            handle
                .in_flight
                .store(IN_FLIGHT_REQUESTS_MAX, Ordering::Release);
            assert_eq!(
                handle.request(put("k", "v")).await,
                Err(Error::TooManyRequests)
            );
            handle.in_flight.store(0, Ordering::Release);
            assert!(handle.request(put("k", "v")).await.is_ok());
            assert_eq!(handle.in_flight.load(Ordering::Acquire), 0);
            handle.stop().await;
        });
    }
}
