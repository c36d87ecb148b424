//! Carrying out the node's outputs: one [`Executor::execute`] for every
//! [`Output`], which may hand inputs back for the node.
//!
//! Design. Each output has one place it goes: answers to the waiting
//! request's oneshot, persists (with the snapshot data they install),
//! compactions and the learned cluster ID to the log writer, in order;
//! raft messages and snapshot streams to the peer links; watch outputs to
//! their streams' routes. What the world answers at once — a refused send,
//! a snapshot with nowhere to go, a watch stream too full to take more —
//! comes back as the node's inputs, which the loop feeds before it polls
//! the next output.
//!
//! A persist without a snapshot is held until the round's other outputs
//! are out (raft messages go before the fsync, as they would if the log
//! writer did it); then, if the log writer has nothing queued, the driver
//! appends it itself (see `Driver::carry_out`), which spares two thread
//! wake-ups per write. Any other log job first sends the held persist to
//! the log writer, so the log's writes keep their order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use futures_channel::oneshot;
use oxetcd_core::raft::Persist;
use oxetcd_core::storage::KvStore;
use oxetcd_core::{Error, Input, Output, RequestId};
use slab::Slab;
use tracing::debug;

use super::direct::DirectGate;
use super::links::ClusterLinks;
use super::run::fatal;
use super::{LogJob, Reply};
use crate::watch_routes::WatchRoutes;

/// Everything the node's outputs go to.
pub(super) struct Executor<K> {
    /// Requests waiting for their answer; the slot key is the request ID.
    pub(super) pending: Slab<oneshot::Sender<Reply>>,
    /// The log writer's queue.
    pub(super) log: Sender<LogJob>,
    /// Jobs sent to the log writer and not yet done.
    pub(super) log_jobs: Arc<AtomicUsize>,
    /// A persist without a snapshot, held until the end of the round.
    pub(super) held: Option<Persist>,
    pub(super) routes: WatchRoutes,
    pub(super) links: ClusterLinks<K>,
    /// Serializable ranges the handles may answer themselves.
    pub(super) direct: Arc<DirectGate>,
}

impl<K: KvStore> Executor<K> {
    /// Carries out one output; returns what the node must hear at once.
    pub(super) fn execute(&mut self, output: Output) -> Vec<Input> {
        match output {
            Output::Persist(job) if job.snapshot.is_none() => {
                self.release_held();
                self.held = Some(job);
            }
            Output::Persist(job) => {
                let data = self.links.take_snapshot(&job);
                self.queue_log_job(LogJob::Persist(job, data));
            }
            Output::CompactLog { index } => self.queue_log_job(LogJob::Compact(index)),
            Output::StoreClusterId(id) => self.queue_log_job(LogJob::ClusterId(id)),
            Output::Send(message) => return self.links.send(message).into_iter().collect(),
            Output::SendSnapshot { to, message } => {
                return self.links.send_snapshot(to, message).into_iter().collect()
            }
            Output::Respond(id, result) => {
                if let Err(Error::Storage(e)) = &result {
                    fatal("applying entries", e);
                }
                self.answer(id, Reply::Done(result));
            }
            Output::Read {
                id,
                request,
                header,
            } => self.answer(id, Reply::Read { request, header }),
            Output::Fatal(e) => fatal("the node's storage", &e),
            Output::Watch {
                stream,
                response,
                fragment,
            } => {
                return self
                    .routes
                    .deliver(stream, response, fragment)
                    .into_iter()
                    .collect()
            }
            Output::WatchEvents { stream, deliveries } => {
                return self.routes.deliver_events(stream, deliveries)
            }
            Output::WatchCatchUp(job) => self.routes.catch_up(job),
            Output::DirectReads(reads) => self.direct.publish(reads),
        }
        Vec::new()
    }

    /// Queues work for the log writer, which only stops after the driver
    /// drops its sender, after the held persist.
    fn queue_log_job(&mut self, job: LogJob) {
        self.release_held();
        self.send_to_log(job);
    }

    pub(super) fn send_to_log(&self, job: LogJob) {
        self.log_jobs.fetch_add(1, Ordering::AcqRel);
        let _ = self.log.send(job);
    }

    /// Sends the held persist, if any, to the log writer.
    pub(super) fn release_held(&mut self) {
        if let Some(persist) = self.held.take() {
            self.send_to_log(LogJob::Persist(persist, None));
        }
    }

    /// The held persist, if the log writer has nothing to do before it.
    pub(super) fn take_held_if_writer_idle(&mut self) -> Option<Persist> {
        if self.log_jobs.load(Ordering::Acquire) == 0 {
            self.held.take()
        } else {
            None
        }
    }

    fn answer(&mut self, id: RequestId, reply: Reply) {
        let waiter = usize::try_from(id)
            .ok()
            .and_then(|key| self.pending.try_remove(key));
        match waiter {
            // The client may have gone away; its answer is simply dropped.
            Some(waiter) => {
                let _ = waiter.send(reply);
            }
            None => debug!(request_id = id, "answer for an unknown request"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use oxetcd_core::memory::MemoryKv;
    use oxetcd_core::raft::PersistId;

    use super::*;

    fn persist(id: u64) -> Persist {
        Persist {
            id: PersistId(id),
            snapshot: None,
            entries: Vec::new(),
            hard_state: None,
        }
    }

    fn executor() -> (Executor<MemoryKv>, mpsc::Receiver<LogJob>) {
        let (log, jobs) = mpsc::channel();
        let counter = prometheus::IntCounter::new("failures", "heartbeat send failures")
            .expect("a valid counter");
        let executor = Executor {
            pending: Slab::new(),
            log,
            log_jobs: Arc::new(AtomicUsize::new(0)),
            held: None,
            routes: WatchRoutes::default(),
            links: ClusterLinks::new(MemoryKv::default(), None, 1, counter),
            direct: Arc::default(),
        };
        (executor, jobs)
    }

    fn job_name(job: LogJob) -> String {
        match job {
            LogJob::Persist(p, _) => format!("persist {}", p.id.0),
            LogJob::Compact(index) => format!("compact {index}"),
            LogJob::ClusterId(id) => format!("cluster id {id}"),
        }
    }

    /// A held persist goes to the log writer before any later log job, and
    /// is appended in place only when the writer has nothing queued.
    #[test]
    fn a_held_persist_keeps_the_log_writes_in_order() {
        let (mut executor, jobs) = executor();
        assert!(executor.execute(Output::Persist(persist(1))).is_empty());
        assert!(jobs.try_recv().is_err(), "held, not sent");
        executor.execute(Output::CompactLog { index: 5 });
        executor.execute(Output::StoreClusterId(9));
        let sent: Vec<_> = jobs.try_iter().map(job_name).collect();
        assert_eq!(sent, ["persist 1", "compact 5", "cluster id 9"]);
        assert_eq!(executor.log_jobs.load(Ordering::Acquire), 3);

        // The writer is busy: the next persist goes to it too.
        executor.execute(Output::Persist(persist(2)));
        assert!(executor.take_held_if_writer_idle().is_none());
        executor.release_held();
        let sent: Vec<_> = jobs.try_iter().map(job_name).collect();
        assert_eq!(sent, ["persist 2"]);

        // Idle: the driver takes it.
        executor.log_jobs.store(0, Ordering::Release);
        executor.execute(Output::Persist(persist(3)));
        assert_eq!(executor.take_held_if_writer_idle().map(|p| p.id.0), Some(3));
        executor.release_held();
        assert!(jobs.try_recv().is_err());
    }
}
