//! The client side of the driver: the [`Handle`] every service holds.
//!
//! Design. A request goes to the driver thread as a command with a oneshot
//! for its answer, admitted against [`super::IN_FLIGHT_REQUESTS_MAX`] so a
//! burst cannot queue without bound. Work that reads the backend (ranges
//! the node allows, snapshot files, `HashKV`, watch catch-ups) runs on the
//! runtime's blocking threads on a read view taken then, never on the
//! driver thread. A serializable range may skip the driver thread
//! altogether (see [`super::direct`]).

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use futures_channel::{mpsc as async_mpsc, oneshot};
use oxetcd_core::auth::Credentials;
use oxetcd_core::storage::{KvMeta, KvRead, KvStore};
use oxetcd_core::watch::{CatchUp, CatchUpOutcome, CatchUpRead, StreamId};
use oxetcd_core::{mvcc, watch, Error, Input, Request, Response};
use oxetcd_proto::etcdserverpb::{RangeRequest, RangeResponse, ResponseHeader, WatchRequest};
use oxetcd_storage::bolt::hash::{hash_backend, hash_kv, KvHash};
use oxetcd_storage::snapshot::CHUNK_BYTES_DEFAULT;
use oxetcd_storage::snapshot_file::FileExport;
use tracing::error;

use super::awaited;
use super::direct::DirectGate;
use super::run::{fatal, fatal_storage};
use super::{Blocking, Command, FileChunks, Reply, IN_FLIGHT_REQUESTS_MAX};
use crate::metrics::Metrics;
use crate::slow_requests::{SlowRequests, Timed};
use crate::watch_routes::StreamItem;

/// A handle to the running node, cloned into every service.
pub struct Handle<K> {
    pub(super) commands: Sender<Command>,
    pub(super) in_flight: Arc<AtomicUsize>,
    pub(super) kv: K,
    pub(super) blocking: Blocking,
    /// Numbers watch streams.
    pub(super) next_stream: Arc<AtomicU64>,
    /// When a client request is slow enough to warn about.
    pub(super) slow: SlowRequests,
    pub(super) metrics: Arc<Metrics>,
    /// Serializable ranges this handle may answer without the node.
    pub(super) direct: Arc<DirectGate>,
}

impl<K: Clone> Clone for Handle<K> {
    fn clone(&self) -> Self {
        Self {
            commands: self.commands.clone(),
            in_flight: self.in_flight.clone(),
            kv: self.kv.clone(),
            blocking: self.blocking.clone(),
            next_stream: self.next_stream.clone(),
            slow: self.slow,
            metrics: self.metrics.clone(),
            direct: self.direct.clone(),
        }
    }
}

/// The receiving end of one watch stream, from [`Handle::open_watch`].
pub(crate) struct WatchStreamParts {
    pub(crate) stream: StreamId,
    pub(crate) items: async_mpsc::UnboundedReceiver<StreamItem>,
    pub(crate) queued: Arc<AtomicUsize>,
}

impl<K> Handle<K> {
    /// The server's metrics, recorded by the driver and the services.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

impl<K: KvStore> Handle<K> {
    /// Sends one request of the server's own through the node (no
    /// credentials: checked as nobody's once auth is on) and waits for its
    /// answer.
    pub async fn request(&self, request: Request) -> Result<Response, Error> {
        self.request_as(Credentials::Anonymous, request).await
    }

    /// Sends one client request through the node, as whoever
    /// `credentials` say, and waits for its answer. A range is answered by
    /// reading a backend snapshot once the node allows it.
    pub async fn request_as(
        &self,
        credentials: Credentials,
        request: Request,
    ) -> Result<Response, Error> {
        let timed = Timed::start(&request);
        let result = self.ask(credentials, request).await;
        self.slow.answered(&timed, &result);
        result
    }

    /// The reads' futures are boxed: held in place, their state would be
    /// part of every request's future (a third of it), copied as the
    /// call's futures are boxed and moved, a put's included.
    async fn ask(&self, credentials: Credentials, request: Request) -> Result<Response, Error> {
        let _slot = self.admit()?;
        let request = match self.direct.admit(&credentials, request) {
            Ok((range, header)) => {
                // As the node would: checked, counted, read.
                mvcc::validate_range(&range)?;
                self.metrics.node.count_range();
                return Box::pin(self.read(range, header))
                    .await
                    .map(Response::Range);
            }
            Err(request) => request,
        };
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Client(request, credentials, reply))
            .map_err(|_| Error::Stopped)?;
        match awaited::reply(answer).await.map_err(|_| Error::Stopped)? {
            Reply::Done(result) => result,
            Reply::Read { request, header } => Box::pin(self.read(request, header))
                .await
                .map(Response::Range),
        }
    }

    /// Sends one client request through the node without waiting for its
    /// answer: the clean-up a call owes after its client went away (a
    /// waiting `Campaign` or `Lock` deletes its key). It is not admitted
    /// against the in-flight bound: each cancelled call sends at most one,
    /// and refusing it would leave the key behind.
    pub(crate) fn request_detached(&self, credentials: Credentials, request: Request) {
        let (reply, _answer) = oneshot::channel();
        let _ = self
            .commands
            .send(Command::Client(request, credentials, reply));
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

    /// etcd's `HashKV` of this member's applied key space up to `revision`
    /// (0: the current one), computed on a read view on a blocking thread.
    ///
    /// A revision a compaction recorded the hash of (see
    /// [`KvStore::compaction_hashes`]) is answered with that hash, its
    /// compact revision of then, and the current revision, as etcd 3.6
    /// answers: the history it covered may be gone.
    pub async fn hash_kv(&self, revision: i64) -> Result<KvHash, Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let view = kv.read().map_err(fatal_storage)?;
            let recorded = kv
                .compaction_hashes()
                .into_iter()
                .find(|h| revision > 0 && h.revision == revision);
            match recorded {
                Some(h) => Ok(KvHash {
                    hash: h.hash,
                    compact_revision: h.compact_revision,
                    revision: view.meta().map_err(fatal_storage)?.revision,
                }),
                None => hash_kv(&view, revision),
            }
        })
        .await
    }

    /// etcd's `Hash` of this member's applied backend, with its revision,
    /// computed on a read view on a blocking thread.
    pub async fn hash(&self) -> Result<(u32, i64), Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let view = kv.read().map_err(fatal_storage)?;
            hash_backend(&view)
        })
        .await
    }

    /// Raises `alarm` for `member_id` through the log, as
    /// `Maintenance.Alarm` ACTIVATE does: once applied, every member
    /// enforces it (CORRUPT stops every write, NOSPACE the growing ones)
    /// and stores it. Raising an active alarm again changes nothing.
    pub async fn raise_alarm(
        &self,
        member_id: u64,
        alarm: oxetcd_proto::etcdserverpb::AlarmType,
    ) -> Result<(), Error> {
        use oxetcd_proto::etcdserverpb::{alarm_request::AlarmAction, AlarmRequest};
        let request = Request::Alarm(AlarmRequest {
            action: AlarmAction::Activate as i32,
            member_id,
            alarm: alarm as i32,
        });
        self.request(request).await.map(|_| ())
    }

    /// The alarms this member has applied, read from its backend (no
    /// consensus: what `/health` judges this member on).
    pub async fn local_alarms(&self) -> Result<oxetcd_core::storage::Alarms, Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let alarms = kv.read().and_then(|view| view.alarms());
            alarms.map_err(fatal_storage)
        })
        .await
    }

    /// The hashes this member's compactions recorded, newest first (none
    /// unless the backend keeps them).
    pub fn compaction_hashes(&self) -> Vec<oxetcd_core::storage::CompactionHash> {
        self.kv.compaction_hashes()
    }

    /// Defragments the backend on a blocking thread, online: reads and
    /// writes go on while it copies, and wait only for its swap (etcd's
    /// defragmentation stops them for the whole pass). A failure is
    /// reported, not fatal: nothing was lost, the space just stays in the
    /// file.
    pub async fn defragment(&self) -> Result<(), Error> {
        let kv = self.kv.clone();
        let started = std::time::Instant::now();
        self.metrics.defrag_inflight.set(1);
        let defragmented = self
            .run_blocking(move || kv.defragment().map_err(Error::Storage))
            .await;
        self.metrics.defrag_inflight.set(0);
        defragmented?;
        tracing::info!(
            took_ms = started.elapsed().as_millis() as u64,
            "finished defragmenting the backend"
        );
        Ok(())
    }

    /// The backend as a snapshot file (an etcd bolt database and its
    /// checksum, see [`FileExport`]) of a read view taken now, naming
    /// `cluster_version` as the cluster's, for the Maintenance `Snapshot`
    /// call; [`Handle::next_file_chunk`] pulls its chunks.
    pub async fn snapshot_file(&self, cluster_version: String) -> Result<FileChunks, Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let view = kv.read().map_err(fatal_storage)?;
            match FileExport::new(view, &cluster_version, CHUNK_BYTES_DEFAULT) {
                Ok(export) => Ok(Box::new(export) as FileChunks),
                Err(e) => fatal("exporting a snapshot", &e),
            }
        })
        .await
    }

    /// The next chunk of a snapshot file, read on a blocking thread (it
    /// walks the backend), with the rest of the file; `None` at its end.
    pub async fn next_file_chunk(
        &self,
        mut chunks: FileChunks,
    ) -> Result<Option<(Vec<u8>, FileChunks)>, Error> {
        self.run_blocking(move || match chunks.next() {
            None => Ok(None),
            Some(Ok(chunk)) => Ok(Some((chunk, chunks))),
            Some(Err(e)) => fatal("exporting a snapshot", &e),
        })
        .await
    }

    /// Stops the node: a leader first hands leadership over (bounded by an
    /// election timeout), then pending requests are answered `etcdserver:
    /// server stopped`, outstanding log writes finish, and the backend is
    /// synced.
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
    pub(crate) fn watch_request(
        &self,
        stream: StreamId,
        request: WatchRequest,
        credentials: Credentials,
    ) {
        let _ = self.commands.send(Command::Watch(Input::Watch {
            stream,
            request,
            credentials,
        }));
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

    /// Reads a group of catch-ups in one pass over a fresh snapshot
    /// ([`watch::read_catch_ups`]), on a blocking thread, and gives the
    /// jobs back with it; the stream reports each job with
    /// [`Handle::caught_up`] once it queued its response.
    pub(crate) async fn catch_up_group(
        &self,
        jobs: Vec<CatchUp>,
    ) -> Result<(Vec<CatchUp>, CatchUpRead), Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let view = kv.read().map_err(fatal_storage)?;
            let read = watch::read_catch_ups(&view, &jobs).map_err(fatal_storage)?;
            Ok((jobs, read))
        })
        .await
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

    /// Runs `work` on the runtime's blocking threads (CPU-heavy work, such
    /// as hashing a password, never runs on an async worker).
    pub(crate) async fn run_blocking<T: Send + 'static>(
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
    header: ResponseHeader,
) -> Result<RangeResponse, Error> {
    let view = kv.read().map_err(fatal_storage)?;
    match mvcc::read(&view, request, header) {
        Err(Error::Storage(e)) => Err(fatal_storage(e)),
        other => other,
    }
}
