//! Auto-compaction: when the leader compacts the key-value history on its
//! own (`--auto-compaction-mode`, `--auto-compaction-retention`).
//!
//! Design. [`Compactor`] is a small sub-state-machine of the node with
//! etcd's two schedules (its `v3compactor`). It is fed the time and the
//! current revision; it answers with the revision to compact, and the node
//! proposes that compaction through the log like a client's and reports
//! the outcome back ([`Compactor::handle_result`]). It acts only while its
//! member leads (etcd pauses the compactor on followers), but a periodic
//! compactor keeps sampling revisions on every member, so a new leader
//! knows what the retention window held.
//!
//! - Periodic: every tenth of the retention (of an hour at most) the
//!   current revision is sampled, keeping a window of retention/interval +
//!   1 samples. The first compaction comes a whole retention after start,
//!   at the oldest sample; later ones come every retention (every hour at
//!   most). A failure is retried an interval later.
//! - Revision: every five minutes, the current revision minus the
//!   retention is compacted, unless it is not positive or was compacted
//!   already.
//!
//! A compaction to a revision already compacted counts as done, as in
//! etcd. One compaction is in flight at a time; no timer runs meanwhile
//! (the request timeout bounds it). This module never reads the clock.

use std::collections::VecDeque;
use std::time::Duration;

use tracing::{info, warn};

use crate::error::Error;
use crate::GoDuration;
use crate::Instant;

/// etcd's sampling divisor: a periodic compactor looks every tenth of its
/// retention.
const PERIODIC_DIVISOR: u32 = 10;

/// A periodic compactor never waits longer than this between compactions
/// once the first retention has passed (etcd's ceiling).
const PERIODIC_INTERVAL_MAX: Duration = Duration::from_secs(3600);

/// A periodic compactor looks at most this often, whatever its
/// retention, so a retention of nanoseconds cannot spin the node.
const PERIODIC_INTERVAL_MIN: Duration = Duration::from_millis(1);

/// How often a revision compactor looks (etcd's `revInterval`).
pub const REVISION_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// `--auto-compaction-mode` with its retention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AutoCompaction {
    /// No automatic compaction (retention 0).
    #[default]
    Off,
    /// Keep this much history.
    Periodic(Duration),
    /// Keep this many revisions.
    Revision(u64),
}

/// The auto-compaction schedule of one member.
#[derive(Debug)]
pub struct Compactor {
    schedule: Schedule,
    /// When to look next; `None` while off or while a compaction is in
    /// flight.
    next: Option<Instant>,
    /// The compaction proposed and not yet answered, and when.
    in_flight: Option<(i64, Instant)>,
}

#[derive(Debug)]
enum Schedule {
    Off,
    Periodic {
        retention: Duration,
        /// The revision at each look, oldest first; the first is the one a
        /// retention ago.
        samples: VecDeque<i64>,
        samples_max: usize,
        /// The last successful compaction (or the start).
        last_success: Instant,
        /// The time to wait after `last_success`: the retention at first,
        /// then at most an hour.
        wait: Duration,
    },
    Revision {
        retention: i64,
        /// The last revision compacted (0: none yet).
        previous: i64,
    },
}

impl Compactor {
    /// A compactor started at `now` with the backend at `revision`.
    pub fn new(mode: AutoCompaction, now: Instant, revision: i64) -> Self {
        let schedule = match mode {
            AutoCompaction::Off | AutoCompaction::Periodic(Duration::ZERO) => Schedule::Off,
            AutoCompaction::Revision(0) => Schedule::Off,
            AutoCompaction::Periodic(retention) => {
                let interval = periodic_interval(retention);
                // Whole intervals in the retention, plus the sample at its
                // start (etcd's `getRetentions`).
                let per = retention.as_nanos() / interval.as_nanos().max(1);
                let samples_max = usize::try_from(per).unwrap_or(usize::MAX).saturating_add(1);
                Schedule::Periodic {
                    retention,
                    samples: VecDeque::from([revision]),
                    samples_max,
                    last_success: now,
                    wait: retention,
                }
            }
            AutoCompaction::Revision(retention) => Schedule::Revision {
                retention: i64::try_from(retention).unwrap_or(i64::MAX),
                previous: 0,
            },
        };
        let next = match &schedule {
            Schedule::Off => None,
            Schedule::Periodic { retention, .. } => Some(now + periodic_interval(*retention)),
            Schedule::Revision { .. } => Some(now + REVISION_INTERVAL),
        };
        if let Schedule::Periodic { retention, .. } = &schedule {
            info!(compact_period = %GoDuration(*retention), "started auto periodic compactor");
        }
        if let Schedule::Revision { retention, .. } = &schedule {
            info!(
                revision_compaction_retention = retention,
                "started auto revision compactor"
            );
        }
        Self {
            schedule,
            next,
            in_flight: None,
        }
    }

    /// When the compactor next wants [`Compactor::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next
    }

    /// Looks, if it is time: returns the revision to compact when this
    /// member (`leading`) should propose a compaction now. The current
    /// revision is `revision`.
    pub fn handle_timeout(&mut self, now: Instant, revision: i64, leading: bool) -> Option<i64> {
        let next = self.next?;
        if now < next {
            return None;
        }
        match &mut self.schedule {
            Schedule::Off => None,
            Schedule::Periodic {
                retention,
                samples,
                last_success,
                wait,
                ..
            } => {
                if !leading || now.saturating_since(*last_success) < *wait {
                    self.sample(now, revision);
                    return None;
                }
                // The window always holds the sample taken at start or
                // since; were it empty, this look only samples.
                let Some(&target) = samples.front() else {
                    self.sample(now, revision);
                    return None;
                };
                // After the first retention, compact at most hourly.
                *wait = periodic_interval_cap(*retention);
                info!(
                    revision = target,
                    compact_period = %GoDuration(*retention),
                    "starting auto periodic compaction"
                );
                self.start(now, target)
            }
            Schedule::Revision {
                retention,
                previous,
            } => {
                let target = revision.saturating_sub(*retention);
                if !leading || target <= 0 || target == *previous {
                    self.next = Some(now + REVISION_INTERVAL);
                    return None;
                }
                info!(
                    revision = target,
                    revision_compaction_retention = *retention,
                    "starting auto revision compaction"
                );
                self.start(now, target)
            }
        }
    }

    /// The compaction handed out last was applied (`Ok`) or failed. A
    /// revision already compacted counts as done. The current revision is
    /// `revision`.
    pub fn handle_result(&mut self, now: Instant, revision: i64, result: Result<(), &Error>) {
        let Some((target, started)) = self.in_flight.take() else {
            return;
        };
        let done = matches!(result, Ok(()) | Err(Error::Compacted));
        match &mut self.schedule {
            Schedule::Off => {}
            Schedule::Periodic {
                retention,
                last_success,
                ..
            } => {
                if done {
                    info!(
                        revision = target,
                        compact_period = %GoDuration(*retention),
                        took = %GoDuration(now.saturating_since(*last_success)),
                        "completed auto periodic compaction"
                    );
                    *last_success = now;
                } else {
                    warn!(
                        revision = target,
                        compact_period = %GoDuration(*retention),
                        retry_interval = %GoDuration(periodic_interval(*retention)),
                        error = %error_text(result),
                        "failed auto periodic compaction"
                    );
                }
                self.sample(now, revision);
            }
            Schedule::Revision {
                retention,
                previous,
            } => {
                if done {
                    *previous = target;
                    info!(
                        revision = target,
                        revision_compaction_retention = *retention,
                        took = %GoDuration(now.saturating_since(started)),
                        "completed auto revision compaction"
                    );
                } else {
                    warn!(
                        revision = target,
                        revision_compaction_retention = *retention,
                        retry_interval = %GoDuration(REVISION_INTERVAL),
                        error = %error_text(result),
                        "failed auto revision compaction"
                    );
                }
                self.next = Some(now + REVISION_INTERVAL);
            }
        }
    }

    fn start(&mut self, now: Instant, target: i64) -> Option<i64> {
        self.in_flight = Some((target, now));
        self.next = None;
        Some(target)
    }

    /// A periodic compactor's look: the current revision joins the window
    /// and the next look is an interval away.
    fn sample(&mut self, now: Instant, revision: i64) {
        if let Schedule::Periodic {
            retention,
            samples,
            samples_max,
            ..
        } = &mut self.schedule
        {
            samples.push_back(revision);
            while samples.len() > *samples_max {
                samples.pop_front();
            }
            self.next = Some(now + periodic_interval(*retention));
        }
    }
}

/// A periodic compactor's interval between looks: a tenth of the
/// retention, of an hour at most.
fn periodic_interval(retention: Duration) -> Duration {
    (periodic_interval_cap(retention) / PERIODIC_DIVISOR).max(PERIODIC_INTERVAL_MIN)
}

fn periodic_interval_cap(retention: Duration) -> Duration {
    retention.min(PERIODIC_INTERVAL_MAX)
}

fn error_text(result: Result<(), &Error>) -> String {
    match result {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests;
