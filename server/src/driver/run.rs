//! The driver thread's loop: wait for commands or the node's next timer,
//! feed a batch of commands, drain the node's outputs and carry each out.
//!
//! Design. See the module above for the rules. Each output is carried out
//! by the [`Executor`] as it is polled, and what it hands back is fed to
//! the node at once. Stopping (a hand-over first for a leader) and a
//! removed member's exit end the loop; the log writer then finishes what
//! it was given and the backend is synced.

use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{mpsc, Arc};
use std::thread;

use futures_channel::oneshot;
use oxetcd_core::storage::{Cause, KvRead, KvStore, LogStore, StorageError};
use oxetcd_core::{Config, Error, Input, Instant, Node, RequestId};
use slab::Slab;
use tracing::{error, info, warn};

use super::awaited;
use super::direct::DirectGate;
use super::disk_full::DiskState;
use super::execute::Executor;
use super::links::ClusterLinks;
use super::log_writer::write_log;
use super::spin::{self, Spin};
use super::{Command, LogJob, PeerLink, Reply, INPUT_BATCH_MAX};
use crate::metrics::{Metrics, NodePublisher, SLOW_APPLY};
use crate::slow_requests::SlowRequests;
use crate::watch_routes::WatchRoutes;

/// Why the driver loop ended.
enum Ending {
    /// Asked to stop; answer here once stopped.
    Stop(oneshot::Sender<()>),
    /// This member was removed from the cluster.
    Removed,
    /// Every handle is gone.
    Abandoned,
}

/// A stop that waits for leadership to move first.
struct HandOver {
    done: oneshot::Sender<()>,
    /// Stop anyway at this time.
    deadline: Instant,
}

/// What the driver tells the runtime besides answers: whether the node
/// started, that the member stopped because it was removed, that the
/// member became ready to serve, and the metrics.
pub(super) struct Signals {
    pub(super) started: oneshot::Sender<Result<(), Error>>,
    pub(super) removed: Option<oneshot::Sender<()>>,
    pub(super) ready: Option<oneshot::Sender<u64>>,
    pub(super) metrics: Arc<Metrics>,
    /// Where the node's [`oxetcd_core::DirectReads`] go.
    pub(super) direct: Arc<DirectGate>,
}

/// The driver thread's body. It takes over everything the thread owns,
/// each a different thing, hence the long list.
#[allow(clippy::too_many_arguments)]
pub(super) fn drive<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    inbox: Receiver<Command>,
    commands: Sender<Command>,
    peers: Option<Arc<dyn PeerLink>>,
    signals: Signals,
    slow: SlowRequests,
) {
    let Signals {
        started,
        removed,
        ready,
        metrics,
        direct,
    } = signals;
    let clock = Clock::new();
    // etcd waits about this long for a leadership transfer on stop.
    let hand_over_time = config.election_timeout;
    let Started {
        node,
        writer,
        log_jobs,
        pending_log_jobs,
        disk,
    } = match start(
        config,
        log.clone(),
        kv.clone(),
        commands.clone(),
        &clock,
        metrics.clone(),
    ) {
        Ok(started_node) => started_node,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let _ = started.send(Ok(()));
    count_keys(&kv, commands);
    let links = ClusterLinks::new(
        kv.clone(),
        peers,
        node.member_id(),
        metrics.heartbeat_send_failures.clone(),
    );
    let mut driver = Driver {
        synced_at: node.applied_index(),
        node,
        clock,
        log,
        executor: Executor {
            pending: Slab::new(),
            log: log_jobs,
            log_jobs: pending_log_jobs,
            held: None,
            routes: WatchRoutes::default(),
            links,
            direct: direct.clone(),
        },
        hand_over: None,
        hand_over_time,
        ready,
        slow,
        publisher: NodePublisher::new(metrics.node.clone()),
        metrics,
        disk,
        spin: Spin::default(),
    };
    let ending = driver.run(&inbox);
    direct.shut();

    let Driver { executor, disk, .. } = driver;
    // A log write waiting for space is given up: it was never acknowledged.
    disk.stop();
    for (_, reply) in executor.pending {
        let _ = reply.send(Reply::Done(Err(Error::Stopped)));
    }
    // Let the log writer finish what it was given, so nothing acknowledged to
    // the node is half written.
    drop(executor.log);
    let _ = writer.join();
    match kv.sync() {
        Ok(()) => {}
        // As after a crash: the backend comes back at its last durable
        // commit and the log, never compacted past it, replays the rest.
        Err(e @ StorageError::DiskFull { .. }) => {
            warn!(error = %e, "syncing the backend failed for want of space; the log replays it at the next start");
        }
        Err(e) => fatal("syncing the backend", &e),
    }
    info!("node stopped");
    match ending {
        Ending::Stop(done) => {
            let _ = done.send(());
        }
        Ending::Removed => {
            if let Some(removed) = removed {
                let _ = removed.send(());
            }
        }
        Ending::Abandoned => {}
    }
}

/// A node built, with its log writer running.
struct Started<L: LogStore, K: KvStore> {
    node: Node<L, K>,
    writer: thread::JoinHandle<()>,
    /// The log writer's queue.
    log_jobs: Sender<LogJob>,
    /// Jobs queued at the log writer and not yet done.
    pending_log_jobs: Arc<AtomicUsize>,
    /// Whether the log's disk is full, shared with the log writer.
    disk: Arc<DiskState>,
}

/// Builds the node and starts the log writer thread on its stores.
fn start<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    commands: Sender<Command>,
    clock: &Clock,
    metrics: Arc<Metrics>,
) -> Result<Started<L, K>, Error> {
    let node = Node::new(config, log.clone(), kv.clone(), clock.now())?;
    let (log_jobs, jobs) = mpsc::channel();
    let pending_log_jobs = Arc::new(AtomicUsize::new(0));
    let pending = pending_log_jobs.clone();
    let disk = Arc::new(DiskState::default());
    let writer_disk = disk.clone();
    let writer = thread::Builder::new()
        .name("oxetcd-log".into())
        .spawn(move || write_log(log, kv, jobs, commands, &pending, &writer_disk, &metrics))
        .map_err(|e| {
            Error::Storage(StorageError::Io {
                during: "spawning the log writer".into(),
                source: Cause::new(e),
            })
        })?;
    Ok(Started {
        node,
        writer,
        log_jobs,
        pending_log_jobs,
        disk,
    })
}

/// The driver thread's state between rounds.
struct Driver<L: LogStore, K: KvStore> {
    node: Node<L, K>,
    /// The log, for the appends the driver makes itself.
    log: L,
    clock: Clock,
    executor: Executor<K>,
    /// The applied index the peer links' member list was last synced at.
    synced_at: u64,
    hand_over: Option<HandOver>,
    hand_over_time: std::time::Duration,
    /// Told once, when the member is first ready to serve.
    ready: Option<oneshot::Sender<u64>>,
    /// When an apply step is slow enough to warn about.
    slow: SlowRequests,
    /// The node's numbers into the metrics, after every round.
    publisher: NodePublisher,
    metrics: Arc<Metrics>,
    /// Whether the log's disk is full, shared with the log writer.
    disk: Arc<DiskState>,
    /// How long the next wait polls before it blocks.
    spin: Spin,
}

impl<L: LogStore, K: KvStore> Driver<L, K> {
    /// Rounds until the loop ends: wait for a command or the next timer,
    /// feed a batch of commands, fire due timers, carry out the outputs.
    fn run(&mut self, inbox: &Receiver<Command>) -> Ending {
        self.executor.links.sync_members(&self.node.members());
        // The first round carries out what the node has to do at once (a
        // sole voter campaigns at start) before waiting for anything.
        let mut first = None;
        let mut waited = false;
        loop {
            if std::mem::replace(&mut waited, true) {
                first = match self.wait(inbox) {
                    Ok(command) => command,
                    Err(ending) => return ending,
                };
            }
            let now = self.clock.now();
            let mut stop = None;
            let mut next = first.take();
            let mut fed = 0;
            while let Some(command) = next {
                stop = self.feed(now, command);
                if stop.is_some() {
                    break;
                }
                fed += 1;
                next = if fed < INPUT_BATCH_MAX {
                    inbox.try_recv().ok()
                } else {
                    None
                };
            }
            if self
                .node
                .poll_timeout()
                .is_some_and(|deadline| deadline <= now)
            {
                self.node.handle_timeout(now);
            }
            self.carry_out(now);
            if let Some(ending) = self.after_round(stop) {
                return ending;
            }
        }
    }

    /// Waits for the next command, or for the node's or the hand-over's
    /// deadline (then `None`), polling the channel first while commands
    /// come soon (see [`Spin`]).
    fn wait(&mut self, inbox: &Receiver<Command>) -> Result<Option<Command>, Ending> {
        let wake_at = [
            self.node.poll_timeout(),
            self.hand_over.as_ref().map(|h| h.deadline),
        ]
        .into_iter()
        .flatten()
        .min();
        let began = self.clock.now();
        let waited = match self.poll_inbox(inbox, began, wake_at) {
            Some(polled) => polled,
            None => block(
                inbox,
                wake_at.map(|at| at.saturating_since(self.clock.now())),
            ),
        };
        let gap = matches!(waited, Ok(Some(_))).then(|| self.clock.now().saturating_since(began));
        let max = spin::bound(self.executor.links.has_peers());
        awaited::set_bound(max);
        self.spin.record(gap, max);
        waited
    }

    /// Polls the channel for the spin budget, up to `wake_at`; `None` when
    /// nothing came in that time.
    fn poll_inbox(
        &self,
        inbox: &Receiver<Command>,
        began: Instant,
        wake_at: Option<Instant>,
    ) -> Option<Result<Option<Command>, Ending>> {
        let until = began + self.spin.budget();
        let until = wake_at.map_or(until, |deadline| deadline.min(until));
        while self.clock.now() < until {
            match inbox.try_recv() {
                Ok(command) => return Some(Ok(Some(command))),
                Err(TryRecvError::Disconnected) => return Some(Err(Ending::Abandoned)),
                Err(TryRecvError::Empty) => thread::yield_now(),
            }
        }
        None
    }

    /// Feeds one command; returns the stop waiter when it says to stop now.
    fn feed(&mut self, now: Instant, command: Command) -> Option<oneshot::Sender<()>> {
        let node = &mut self.node;
        match command {
            Command::Client(request, credentials, reply) => {
                let slot = self.executor.pending.vacant_entry();
                let id = slot.key() as RequestId;
                slot.insert(reply);
                node.handle(now, Input::Client(id, request, credentials));
            }
            Command::Persisted(id) => node.handle(now, Input::Persisted { id }),
            Command::Stop(done) => {
                if self.hand_over.is_some() {
                    // Stopping already; this caller waits no longer.
                    let _ = done.send(());
                } else if let Some(to) = node.transfer_leadership_for_shutdown(now) {
                    info!(to = %format_args!("{to:x}"), "stopping: handing leadership over first");
                    self.hand_over = Some(HandOver {
                        done,
                        deadline: now + self.hand_over_time,
                    });
                } else {
                    return Some(done);
                }
            }
            Command::WatchOpen {
                stream,
                items,
                queued,
            } => self.executor.routes.open(stream, items, queued),
            Command::WatchClosed(stream) => {
                self.executor.routes.close(stream);
                node.handle(now, Input::WatchClosed { stream });
            }
            Command::Watch(input) => node.handle(now, input),
            Command::KeysCounted(keys) => node.keys_counted(keys),
            Command::DiskFull(full) => node.handle(now, Input::DiskFull { full }),
            Command::Peer(event) => {
                if let Some(input) = self.executor.links.peer_event(event) {
                    node.handle(now, input);
                }
            }
        }
        None
    }

    /// Drains the node's outputs, feeding back what the world answers at
    /// once, until the node has nothing more to do. Each poll is timed:
    /// applying committed entries happens inside it, so a slow one is a
    /// slow apply (etcd's `slow_apply_total`), and one that compacted
    /// times the compaction.
    fn carry_out_once(&mut self, now: Instant) {
        loop {
            let compactions = self.node.compactions();
            // Entries are applied inside a poll: a poll that moved the
            // applied index is an apply step, timed for the slow warning.
            let applied = self.node.applied_index();
            let polled_at = std::time::Instant::now();
            let Some(output) = self.node.poll_output() else {
                break;
            };
            let took = polled_at.elapsed();
            if took >= SLOW_APPLY {
                self.metrics.slow_apply.inc();
            }
            if self.node.applied_index() != applied {
                let last = self.node.applied_index();
                self.slow.applied(took, applied + 1, last);
            }
            if self.node.compactions() != compactions {
                let ms = took.as_secs_f64() * 1000.0;
                self.metrics.compaction_pause_ms.observe(ms);
                self.metrics.compaction_total_ms.observe(ms);
            }
            for input in self.executor.execute(output) {
                self.node.handle(now, input);
            }
        }
        self.publisher.publish(self.node.metrics());
    }

    /// Carries out every output, as [`Self::carry_out_once`], and after
    /// each drain the held persist: appended here when the log writer has
    /// nothing queued (no thread hand-off either way), else sent to it.
    /// Commands that arrive during the append wait in the inbox and share
    /// the next one, as they would wait for the log writer.
    fn carry_out(&mut self, mut now: Instant) {
        // Bounded: each pass either ends the loop or makes one append the
        // node asked for, and it asks for the next only once this one is
        // acknowledged; a round's work is finite.
        loop {
            self.carry_out_once(now);
            let Some(persist) = self.executor.take_held_if_writer_idle() else {
                self.executor.release_held();
                return;
            };
            let started = std::time::Instant::now();
            match self
                .log
                .append(&persist.entries, persist.hard_state.as_ref())
            {
                Ok(()) => {}
                Err(e @ StorageError::DiskFull { .. }) => {
                    // The log writer retries it, so this thread keeps
                    // serving reads and refusing writes meanwhile.
                    if self.disk.mark_full(&e) {
                        self.node.handle(now, Input::DiskFull { full: true });
                    }
                    self.executor.send_to_log(LogJob::Persist(persist, None));
                    continue;
                }
                Err(e) => fatal("appending to the raft log", &e),
            }
            self.metrics
                .wal_fsync
                .observe(started.elapsed().as_secs_f64());
            now = self.clock.now();
            if self.disk.mark_written() {
                self.node.handle(now, Input::DiskFull { full: false });
            }
            self.node.handle(now, Input::Persisted { id: persist.id });
        }
    }

    /// What follows a round: the peer links' member list, readiness, and
    /// whether the loop ends (stopped, removed, or handed over).
    fn after_round(&mut self, stop: Option<oneshot::Sender<()>>) -> Option<Ending> {
        let node = &self.node;
        // Membership changes are applied entries (or an installed
        // snapshot); between them the member list cannot change.
        if node.applied_index() != self.synced_at {
            self.synced_at = node.applied_index();
            self.executor.links.sync_members(&node.members());
        }
        if self.ready.is_some() && node.is_ready() {
            if let Some(ready) = self.ready.take() {
                let _ = ready.send(node.cluster_id());
            }
        }
        if let Some(done) = stop {
            return Some(Ending::Stop(done));
        }
        if let Some(refusal) = node.version_refusal() {
            // etcd refuses to run such a member and exits non-zero; what
            // this member has not acknowledged is not promised to anyone.
            let server = node.server_version();
            if let Some(storage) = node
                .versions()
                .storage()
                .filter(|s| *s > server.major_minor())
            {
                error!(
                    "the data directory holds storage version {}, newer than this member's \
                     version {server}",
                    storage.major_minor_string()
                );
            }
            error!(server_version = %server, "{refusal}; stopping");
            std::process::exit(1);
        }
        if node.is_removed() || self.executor.links.refused_as_removed {
            error!("the member has been permanently removed from the cluster; stopping");
            return Some(Ending::Removed);
        }
        let h = self.hand_over.take()?;
        let leader = node.leader();
        if leader.is_some_and(|l| l != node.member_id()) {
            info!(leader = ?leader.map(|l| format!("{l:x}")), "leadership handed over; stopping");
            return Some(Ending::Stop(h.done));
        }
        if self.clock.now() >= h.deadline {
            warn!("leadership was not handed over in time; stopping anyway");
            return Some(Ending::Stop(h.done));
        }
        self.hand_over = Some(h);
        None
    }
}

/// Counts the live keys of the backend as the node found it, on a thread
/// of its own (one pass over the key space, which a member with many keys
/// should not wait for before it serves), and tells the node. The view is
/// taken before the node's first round, so it holds nothing applied since.
fn count_keys<K: KvStore>(kv: &K, commands: Sender<Command>) {
    let view = match kv.read() {
        Ok(view) => view,
        Err(e) => fatal("reading the backend", &e),
    };
    let counting = thread::Builder::new()
        .name("oxetcd-count-keys".into())
        .spawn(move || {
            let revision = view.meta().map(|meta| meta.revision);
            match revision.and_then(|revision| oxetcd_core::live_keys(&view, revision)) {
                Ok(keys) => {
                    let _ = commands.send(Command::KeysCounted(keys));
                }
                Err(e) => fatal("counting the backend's keys", &e),
            }
        });
    if let Err(e) = counting {
        warn!(error = %e, "cannot count the backend's keys; etcd_debugging_mvcc_keys_total stays 0");
    }
}

pub(super) fn fatal_storage(e: StorageError) -> Error {
    fatal("reading the backend", &e)
}

/// Blocks on the channel for the next command, for at most `timeout`
/// (then `None`).
fn block(
    inbox: &Receiver<Command>,
    timeout: Option<std::time::Duration>,
) -> Result<Option<Command>, Ending> {
    match timeout {
        Some(timeout) => match inbox.recv_timeout(timeout) {
            Ok(command) => Ok(Some(command)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(Ending::Abandoned),
        },
        None => inbox.recv().map(Some).map_err(|_| Ending::Abandoned),
    }
}

/// Logs a storage failure and exits: storage errors are never retried.
pub(super) fn fatal(what: &str, error: &dyn std::fmt::Display) -> ! {
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
