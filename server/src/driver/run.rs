//! The driver thread's loop: wait for commands or the node's next timer,
//! feed a batch of commands, drain the node's outputs and carry each out.
//!
//! Design. See the module above for the rules; here they are executed:
//! answers go to their oneshots, persists and compactions to the log
//! writer, raft messages and snapshots to the peer links, watch outputs to
//! their streams. Stopping (a hand-over first for a leader) and a removed
//! member's exit end the loop; the log writer then finishes what it was
//! given and the backend is synced.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{mpsc, Arc};
use std::thread;

use futures_channel::oneshot;
use oxetcd_core::storage::{Cause, KvStore, LogStore, StorageError};
use oxetcd_core::{Config, Error, Input, Instant, Node, Output, RequestId};
use slab::Slab;
use tracing::{debug, error, info, warn};

use super::links::ClusterLinks;
use super::log_writer::write_log;
use super::{Command, LogJob, PeerLink, Reply, INPUT_BATCH_MAX};
use crate::peer::PeerEvent;
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
/// started, that the member stopped because it was removed, and that the
/// member became ready to serve.
pub(super) struct Signals {
    pub(super) started: oneshot::Sender<Result<(), Error>>,
    pub(super) removed: Option<oneshot::Sender<()>>,
    pub(super) ready: Option<oneshot::Sender<u64>>,
}

/// The driver thread's body.
pub(super) fn drive<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    inbox: Receiver<Command>,
    commands: Sender<Command>,
    peers: Option<Arc<dyn PeerLink>>,
    signals: Signals,
) {
    let Signals {
        started,
        removed,
        mut ready,
    } = signals;
    let clock = Clock::new();
    // etcd waits about this long for a leadership transfer on stop.
    let hand_over_time = config.election_timeout;
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
            let error = StorageError::Io {
                during: "spawning the log writer".into(),
                source: Cause::new(e),
            };
            let _ = started.send(Err(Error::Storage(error)));
            return;
        }
    };
    let _ = started.send(Ok(()));

    let mut pending: Slab<oneshot::Sender<Reply>> = Slab::new();
    let mut routes = WatchRoutes::default();
    let mut feedback: Vec<Input> = Vec::new();
    let mut cluster = ClusterLinks::new(kv.clone(), peers, node.member_id());
    cluster.sync_members(&node.members());
    let mut synced_at = node.applied_index();
    let mut hand_over: Option<HandOver> = None;
    // The first round drains what the node has to do at once (a sole
    // voter campaigns at start) before waiting for anything.
    let mut first_round = true;
    let ending = loop {
        let wake_at = [node.poll_timeout(), hand_over.as_ref().map(|h| h.deadline)]
            .into_iter()
            .flatten()
            .min();
        let first = match wake_at {
            _ if std::mem::take(&mut first_round) => None,
            Some(deadline) => match inbox.recv_timeout(deadline.saturating_since(clock.now())) {
                Ok(command) => Some(command),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break Ending::Abandoned,
            },
            None => match inbox.recv() {
                Ok(command) => Some(command),
                Err(_) => break Ending::Abandoned,
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
                    if hand_over.is_some() {
                        // Stopping already; this caller waits no longer.
                        let _ = done.send(());
                    } else if let Some(to) = node.transfer_leadership_for_shutdown(now) {
                        info!(to = %format_args!("{to:x}"), "stopping: handing leadership over first");
                        hand_over = Some(HandOver {
                            done,
                            deadline: now + hand_over_time,
                        });
                    } else {
                        stop = Some(done);
                        break;
                    }
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
                // Before any message of the connection that taught it.
                Command::Peer(PeerEvent::ClusterId { id }) => node.set_cluster_id(id),
                Command::Peer(event) => {
                    if let Some(input) = cluster.peer_event(event) {
                        node.handle(now, input);
                    }
                }
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
                let output = match cluster.execute(output, &persist, &mut feedback) {
                    Some(output) => output,
                    None => continue,
                };
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
        // Membership changes are applied entries (or an installed
        // snapshot); between them the member list cannot change.
        if node.applied_index() != synced_at {
            synced_at = node.applied_index();
            cluster.sync_members(&node.members());
        }
        if ready.is_some() && node.is_ready() {
            if let Some(ready) = ready.take() {
                let _ = ready.send(node.cluster_id());
            }
        }
        if let Some(done) = stop {
            break Ending::Stop(done);
        }
        if node.is_removed() || cluster.refused_as_removed {
            error!("the member has been permanently removed from the cluster; stopping");
            break Ending::Removed;
        }
        if let Some(h) = hand_over.take() {
            let leader = node.leader();
            if leader.is_some_and(|l| l != node.member_id()) {
                info!(leader = ?leader.map(|l| format!("{l:x}")), "leadership handed over; stopping");
                break Ending::Stop(h.done);
            }
            if clock.now() >= h.deadline {
                warn!("leadership was not handed over in time; stopping anyway");
                break Ending::Stop(h.done);
            }
            hand_over = Some(h);
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
            let _ = persist.send(LogJob::Persist(job, None));
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
        Output::WatchEvents { stream, deliveries } => {
            routes.deliver_events(stream, deliveries, feedback)
        }
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

pub(super) fn fatal_storage(e: StorageError) -> Error {
    fatal("reading the backend", &e)
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
