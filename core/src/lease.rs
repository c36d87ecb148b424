//! Leases: the lessor's state, its rules, and when the leader must act.
//!
//! Design. What every member agrees on — which leases exist, their granted
//! TTL, the remaining TTL of the last checkpoint, and which keys are
//! attached — changes only when log entries are applied (grant, revoke,
//! checkpoint, and every write that attaches or detaches a key), and is
//! stored in the MVCC backend's lease table in the same transaction as the
//! rest of the entry, so it survives restarts and travels with the backend.
//! Attached keys are not stored twice: they are recovered from the live keys
//! whose version names the lease.
//!
//! Expiry is the leader's alone (the "primary" lessor, as etcd calls it).
//! Only a primary lessor holds deadlines; it learns the time from the node's
//! inputs and never reads a clock. When a deadline passes the node proposes a
//! revoke through the log, and proposes it again after
//! [`LeaseConfig::expired_retry_interval`] if it has not been applied by then.
//! A member that becomes leader gives every lease its checkpointed remaining
//! TTL (or its full TTL when none was recorded) plus the election timeout,
//! as etcd's `Promote` does; periodic checkpoints of leases longer than the
//! checkpoint interval go through the log, so a new leader never renews a
//! long lease to its full TTL; the next checkpoint is scheduled when one is
//! proposed, so one that never applies does not end them. A keep-alive clears a recorded remaining TTL
//! with one more checkpoint, as etcd does.
//!
//! Expiry is rate-limited as etcd's is: one round of revokes proposes at
//! most `EXPIRED_REVOKES_PER_ROUND_MAX` leases, and the next round comes
//! `REVOKE_ROUND_INTERVAL` later at the earliest, so a thousand leases
//! expiring at once cost at most a thousand revokes a second. A new leader
//! with many leases also spreads their expiries before anything is due
//! (etcd's `Promote`): leases that would expire in the same second beyond
//! three quarters of that rate are pushed back, each by about one more
//! second per that many leases, so a pile of leases granted together (or
//! all renewed to their full TTL by the promotion) does not fill the whole
//! revoke budget at once. No lease ever expires earlier for it.
//!
//! Invariants, asserted in debug builds: every attached key's lease exists
//! and lists it, and every key a lease lists is attached to it; the
//! deadline set holds exactly one entry per lease with a deadline, the
//! lease's own, and a lease that expires has one (a promoted lessor: every
//! lease); checkpoints name leases that exist, one each.
//!
//! This module never reads the clock and writes storage only through the
//! [`KvWrite`] it is handed by the apply step.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::time::Duration;

use hashbrown::HashMap;

use oxetcd_proto::etcdserverpb::{LeaseCheckpoint, LeaseStatus};

use crate::error::Error;
use crate::mvcc::LeaseCheck;
use crate::storage::{KeyVersion, KvRead, KvWrite, LeaseRecord, RangeEnd, StorageError};
use crate::Instant;

/// The largest TTL a lease may be granted, in seconds (etcd's `MaxLeaseTTL`).
pub const LEASE_TTL_MAX_SECS: i64 = 9_000_000_000;

/// Leases revoked for expiry per second at most (etcd's `leaseRevokeRate`).
const LEASE_REVOKE_RATE_PER_SEC: usize = 1_000;

/// Leases revoked for expiry in one timer round at most, so a pile of leases
/// expiring together does not flood the log (half of etcd's revoke rate,
/// which etcd spends in half-second rounds).
const EXPIRED_REVOKES_PER_ROUND_MAX: usize = LEASE_REVOKE_RATE_PER_SEC / 2;

/// The shortest time between two rounds that revoke leases: with
/// [`EXPIRED_REVOKES_PER_ROUND_MAX`], the revoke rate.
const REVOKE_ROUND_INTERVAL: Duration = Duration::from_millis(500);

/// Expiries per second a new leader leaves in place before it spreads the
/// rest (etcd's three quarters of the revoke rate: piled-up leases never
/// take the whole budget).
const PROMOTED_EXPIRIES_PER_SEC_MAX: usize = 3 * LEASE_REVOKE_RATE_PER_SEC / 4;

/// Checkpoints carried by one log entry at most (etcd's batch limit).
const CHECKPOINTS_PER_ENTRY_MAX: usize = 1_000;

/// Lease timing, derived from the raft timing as etcd derives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Smallest TTL granted, in seconds; shorter requests are raised to it.
    pub min_ttl_secs: i64,
    /// How often the leader checkpoints the remaining TTL of leases longer
    /// than this (etcd's `--experimental-lease-checkpoint-interval`, 5 min).
    pub checkpoint_interval: Duration,
    /// Checkpoints are written to the backend whatever the cluster version
    /// (the `LeaseCheckpointPersist` gate); otherwise from 3.6 on.
    pub checkpoint_persist: bool,
    /// Added to every lease's remaining TTL when a member becomes leader
    /// (the election timeout, as etcd's `Promote`).
    pub promote_extend: Duration,
    /// A revoke of an expired lease is proposed again after this long if it
    /// has not been applied (etcd's 3 s).
    pub expired_retry_interval: Duration,
}

impl LeaseConfig {
    /// The lease timing of a member with this heartbeat interval and
    /// election timeout. The minimum TTL is etcd's: one and a half election
    /// timeouts counted in whole heartbeat ticks, rounded up to a second.
    pub fn from_raft_timing(heartbeat_interval_ms: u64, election_timeout_ms: u64) -> Self {
        let heartbeat_ms = heartbeat_interval_ms.max(1);
        let election_ticks = election_timeout_ms / heartbeat_ms;
        let min_ttl_ms = (3 * election_ticks / 2) * heartbeat_ms;
        Self {
            min_ttl_secs: i64::try_from(min_ttl_ms.div_ceil(1000)).unwrap_or(i64::MAX),
            checkpoint_interval: Duration::from_secs(5 * 60),
            checkpoint_persist: false,
            promote_extend: Duration::from_millis(election_timeout_ms),
            expired_retry_interval: Duration::from_secs(3),
        }
    }
}

impl Default for LeaseConfig {
    /// etcd's defaults: `--heartbeat-interval 100`, `--election-timeout 1000`,
    /// which give a minimum TTL of 2 s.
    fn default() -> Self {
        Self::from_raft_timing(100, 1000)
    }
}

/// One lease in memory.
#[derive(Debug)]
struct Lease {
    ttl_secs: i64,
    /// From the last checkpoint; 0 for none.
    remaining_ttl_secs: i64,
    /// When it expires, on the leader; `None` on a follower.
    expiry: Option<Instant>,
    /// Its entry in the leader's deadlines: the expiry, or once a revoke
    /// was proposed, when to propose it again.
    deadline: Option<Instant>,
    keys: BTreeSet<Vec<u8>>,
}

impl Lease {
    fn record(&self, id: i64) -> LeaseRecord {
        LeaseRecord {
            id,
            ttl_secs: self.ttl_secs,
            remaining_ttl_secs: self.remaining_ttl_secs,
        }
    }

    /// The TTL a new leader starts from.
    fn remaining_or_ttl_secs(&self) -> i64 {
        if self.remaining_ttl_secs > 0 {
            self.remaining_ttl_secs
        } else {
            self.ttl_secs
        }
    }
}

/// The answer to a keep-alive, as the lessor sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Renewed; the lease's TTL. `clear_checkpoint` asks the node to propose
    /// a checkpoint that forgets the recorded remaining TTL.
    Renewed {
        ttl_secs: i64,
        clear_checkpoint: bool,
    },
    /// The lease expired and its revoke is on the way: answer once it lands.
    Expiring,
    /// No such lease.
    NotFound,
}

/// What a lease reports for `LeaseTimeToLive`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TimeToLive {
    pub(crate) remaining_secs: i64,
    pub(crate) granted_secs: i64,
    pub(crate) keys: Vec<Vec<u8>>,
}

/// Every lease of the store, and the leader's deadlines.
#[derive(Debug)]
pub(crate) struct Lessor {
    config: LeaseConfig,
    leases: BTreeMap<i64, Lease>,
    /// Which lease each attached key belongs to.
    key_leases: HashMap<Vec<u8>, i64>,
    primary: bool,
    /// Leader only: (deadline, lease) for expiry or revoke retry.
    deadlines: BTreeSet<(Instant, i64)>,
    /// Leader only: (when, lease) for the next checkpoint.
    checkpoints: BTreeSet<(Instant, i64)>,
    /// Leader only: no revokes are proposed before this (the rate limit).
    next_revoke_round: Instant,
}

impl LeaseCheck for Lessor {
    fn lease_exists(&self, id: i64) -> bool {
        self.leases.contains_key(&id)
    }
}

impl Lessor {
    /// The lessor of what `view` stores: its leases and, from every live key
    /// naming one, the attached keys. Not primary until [`Lessor::promote`].
    pub(crate) fn recover(config: LeaseConfig, view: &impl KvRead) -> Result<Self, StorageError> {
        let mut leases = BTreeMap::new();
        view.leases(&mut |record| {
            leases.insert(
                record.id,
                Lease {
                    ttl_secs: record.ttl_secs,
                    remaining_ttl_secs: record.remaining_ttl_secs,
                    expiry: None,
                    deadline: None,
                    keys: BTreeSet::new(),
                },
            );
            ControlFlow::Continue(())
        })?;
        let mut key_leases = HashMap::new();
        if !leases.is_empty() {
            let current = view.meta()?.revision.max(1);
            view.scan(b"", RangeEnd::Unbounded, current, &mut |version| {
                if !version.tombstone && version.lease != 0 {
                    if let Some(lease) = leases.get_mut(&version.lease) {
                        lease.keys.insert(version.key.clone());
                        key_leases.insert(version.key, version.lease);
                    }
                }
                ControlFlow::Continue(())
            })?;
        }
        let lessor = Self {
            config,
            leases,
            key_leases,
            primary: false,
            deadlines: BTreeSet::new(),
            checkpoints: BTreeSet::new(),
            next_revoke_round: Instant::ZERO,
        };
        lessor.debug_assert_consistent();
        Ok(lessor)
    }

    /// This member became leader at `now`: every lease gets its remaining
    /// (or full) TTL plus the election timeout, and piled-up expiries are
    /// spread out.
    pub(crate) fn promote(&mut self, now: Instant) {
        self.primary = true;
        self.deadlines.clear();
        self.checkpoints.clear();
        self.next_revoke_round = now;
        let extend = self.config.promote_extend;
        let ids: Vec<i64> = self.leases.keys().copied().collect();
        for id in ids {
            let secs = if crate::canary::on(crate::canary::Canary::LeaseTtlResetOnLeaderChange) {
                self.leases[&id].ttl_secs
            } else {
                self.leases[&id].remaining_or_ttl_secs()
            };
            self.set_expiry(id, now + extend + secs_duration(secs));
            self.schedule_checkpoint(id, now);
        }
        self.spread_expiries();
        debug_assert_eq!(
            self.deadlines.len(),
            self.leases.len(),
            "a promoted lessor holds a deadline per lease"
        );
        self.debug_assert_consistent();
    }

    /// Pushes back expiries beyond [`PROMOTED_EXPIRIES_PER_SEC_MAX`] in
    /// any one-second window, as etcd's `Promote` does: walking the leases
    /// by expiry, a window opens at the first lease past the current one;
    /// the n-th lease of a window beyond the budget is moved to
    /// n / budget seconds after the window's start (never earlier than it
    /// was), and the window grows to cover it.
    fn spread_expiries(&mut self) {
        if self.leases.len() < LEASE_REVOKE_RATE_PER_SEC {
            // Fewer leases than one second of revokes cannot pile up.
            return;
        }
        let mut by_expiry: Vec<(Instant, i64)> = self
            .leases
            .iter()
            .filter_map(|(&id, lease)| lease.expiry.map(|expiry| (expiry, id)))
            .collect();
        by_expiry.sort_unstable();
        let Some(&(first, _)) = by_expiry.first() else {
            return;
        };
        const SECOND: Duration = Duration::from_secs(1);
        let budget = PROMOTED_EXPIRIES_PER_SEC_MAX as u128;
        let mut window_start = first;
        let mut window_end = first + SECOND;
        let mut in_window: u128 = 0;
        for (expiry, id) in by_expiry {
            if expiry > window_end {
                window_start = expiry;
                window_end = expiry + SECOND;
                in_window = 1;
                continue;
            }
            in_window += 1;
            if in_window <= budget {
                continue;
            }
            let spread_nanos = SECOND.as_nanos() * in_window / budget;
            let spread = Duration::from_nanos(u64::try_from(spread_nanos).unwrap_or(u64::MAX));
            let delay = spread.saturating_sub(expiry.saturating_since(window_start));
            window_end = window_start + delay;
            self.set_expiry(id, expiry + delay);
        }
    }

    /// This member is no longer leader: it forgets every deadline.
    #[allow(dead_code)] // Called once the node can lose leadership (Raft).
    pub(crate) fn demote(&mut self) {
        self.primary = false;
        self.deadlines.clear();
        self.checkpoints.clear();
        for lease in self.leases.values_mut() {
            lease.expiry = None;
            lease.deadline = None;
        }
        self.debug_assert_consistent();
    }

    /// Applies a grant. `id` is non-zero (the node picks one for requests
    /// that left it 0). Returns the granted TTL.
    pub(crate) fn grant(
        &mut self,
        txn: &mut impl KvWrite,
        id: i64,
        ttl_secs: i64,
        now: Instant,
    ) -> Result<Result<i64, Error>, StorageError> {
        if ttl_secs > LEASE_TTL_MAX_SECS {
            return Ok(Err(Error::LeaseTtlTooLarge));
        }
        if id == 0 || self.leases.contains_key(&id) {
            return Ok(Err(if id == 0 {
                Error::LeaseNotFound
            } else {
                Error::LeaseExists
            }));
        }
        let ttl_secs = ttl_secs.max(self.config.min_ttl_secs);
        let lease = Lease {
            ttl_secs,
            remaining_ttl_secs: 0,
            expiry: None,
            deadline: None,
            keys: BTreeSet::new(),
        };
        txn.put_lease(&lease.record(id))?;
        self.leases.insert(id, lease);
        if self.primary {
            self.set_expiry(id, now + secs_duration(ttl_secs));
            self.schedule_checkpoint(id, now);
        }
        self.debug_assert_lease(id);
        Ok(Ok(ttl_secs))
    }

    /// Applies a revoke's lease-table part: forgets the lease and returns its
    /// keys in key order, for the caller to delete in one revision. `None`
    /// when there is no such lease.
    pub(crate) fn revoke(
        &mut self,
        txn: &mut impl KvWrite,
        id: i64,
    ) -> Result<Option<Vec<Vec<u8>>>, StorageError> {
        let Some(lease) = self.leases.remove(&id) else {
            return Ok(None);
        };
        txn.remove_lease(id)?;
        if let Some(deadline) = lease.deadline {
            self.deadlines.remove(&(deadline, id));
        }
        self.checkpoints.retain(|&(_, lease_id)| lease_id != id);
        for key in &lease.keys {
            let attached = self.key_leases.remove(key);
            debug_assert_eq!(attached, Some(id), "key of lease {id:x} attached elsewhere");
        }
        debug_assert!(
            lease
                .deadline
                .is_none_or(|deadline| !self.deadlines.contains(&(deadline, id))),
            "revoked lease {id:x} left a deadline"
        );
        Ok(Some(lease.keys.into_iter().collect()))
    }

    /// Applies one checkpoint: records the remaining TTL (0 forgets it),
    /// in the backend too when `persist` (see
    /// [`crate::version::capability::Capability::LeaseCheckpointPersist`]).
    pub(crate) fn checkpoint(
        &mut self,
        txn: &mut impl KvWrite,
        checkpoint: &LeaseCheckpoint,
        now: Instant,
        persist: bool,
    ) -> Result<(), StorageError> {
        let Some(lease) = self.leases.get_mut(&checkpoint.id) else {
            return Ok(());
        };
        lease.remaining_ttl_secs = checkpoint.remaining_ttl.max(0);
        if persist {
            txn.put_lease(&lease.record(checkpoint.id))?;
        }
        if self.primary {
            self.schedule_checkpoint(checkpoint.id, now);
        }
        Ok(())
    }

    /// Moves keys between leases after a write: every change detaches its
    /// key from the lease it had, and a put attaches it to the lease it
    /// names (which exists: the write checked).
    pub(crate) fn on_changes(&mut self, changes: &[KeyVersion]) {
        if self.leases.is_empty() && self.key_leases.is_empty() {
            return;
        }
        for change in changes {
            debug_assert!(
                change.tombstone || change.lease == 0 || self.leases.contains_key(&change.lease),
                "key attached to lease {:x}, which does not exist",
                change.lease
            );
            if let Some(old) = self.key_leases.remove(&change.key) {
                if let Some(lease) = self.leases.get_mut(&old) {
                    lease.keys.remove(&change.key);
                }
            }
            if !change.tombstone && change.lease != 0 {
                if let Some(lease) = self.leases.get_mut(&change.lease) {
                    lease.keys.insert(change.key.clone());
                    self.key_leases.insert(change.key.clone(), change.lease);
                }
            }
            debug_assert!(
                self.key_leases.get(&change.key).is_none_or(|id| self
                    .leases
                    .get(id)
                    .is_some_and(|lease| lease.keys.contains(&change.key))),
                "a key's lease does not list it"
            );
        }
    }

    /// A keep-alive at `now` (leader only).
    pub(crate) fn renew(&mut self, id: i64, now: Instant) -> Renewal {
        let Some(lease) = self.leases.get(&id) else {
            return Renewal::NotFound;
        };
        if lease.expiry.is_some_and(|expiry| expiry <= now) {
            return Renewal::Expiring;
        }
        let ttl_secs = lease.ttl_secs;
        let clear_checkpoint = lease.remaining_ttl_secs > 0;
        self.set_expiry(id, now + secs_duration(ttl_secs));
        Renewal::Renewed {
            ttl_secs,
            clear_checkpoint,
        }
    }

    /// `LeaseTimeToLive` at `now`; `None` when there is no such lease.
    pub(crate) fn time_to_live(&self, id: i64, now: Instant, keys: bool) -> Option<TimeToLive> {
        let lease = self.leases.get(&id)?;
        let remaining_secs = match lease.expiry {
            // etcd truncates the remaining duration to whole seconds.
            Some(expiry) if expiry >= now => (expiry.saturating_since(now).as_secs()) as i64,
            Some(expiry) => -(now.saturating_since(expiry).as_secs() as i64),
            None => i64::MAX / 1_000_000_000,
        };
        Some(TimeToLive {
            remaining_secs,
            granted_secs: lease.ttl_secs,
            keys: if keys {
                lease.keys.iter().cloned().collect()
            } else {
                Vec::new()
            },
        })
    }

    /// The keys attached to a lease, in key order; `None` when there is no
    /// such lease. Any member can answer this from its applied state.
    pub(crate) fn keys(&self, id: i64) -> Option<Vec<Vec<u8>>> {
        self.leases
            .get(&id)
            .map(|lease| lease.keys.iter().cloned().collect())
    }

    /// Every lease, soonest expiry first (as etcd lists them), then by ID.
    pub(crate) fn statuses(&self) -> Vec<LeaseStatus> {
        let mut all: Vec<(Option<Instant>, i64)> = self
            .leases
            .iter()
            .map(|(&id, lease)| (lease.expiry, id))
            .collect();
        all.sort_unstable();
        all.into_iter().map(|(_, id)| LeaseStatus { id }).collect()
    }

    /// True when a lease with this ID exists.
    pub(crate) fn contains(&self, id: i64) -> bool {
        self.leases.contains_key(&id)
    }

    /// The next instant the lessor needs [`Lessor::poll_due`].
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let expiry = self
            .deadlines
            .first()
            .map(|&(at, _)| at.max(self.next_revoke_round));
        let checkpoint = self.checkpoints.first().map(|&(at, _)| at);
        match (expiry, checkpoint) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Leases whose revoke is due at `now` (each is given a retry deadline),
    /// and checkpoints due at `now` (remaining TTL rounded up to a second).
    /// At most [`EXPIRED_REVOKES_PER_ROUND_MAX`] revokes per round, and
    /// rounds that revoke [`REVOKE_ROUND_INTERVAL`] apart.
    pub(crate) fn poll_due(&mut self, now: Instant) -> (Vec<i64>, Vec<LeaseCheckpoint>) {
        let mut revokes = Vec::new();
        let revokes_max = if now >= self.next_revoke_round {
            EXPIRED_REVOKES_PER_ROUND_MAX
        } else {
            0
        };
        while revokes.len() < revokes_max {
            let Some(&(at, id)) = self.deadlines.first() else {
                break;
            };
            if at > now {
                break;
            }
            self.deadlines.remove(&(at, id));
            let retry = now + self.config.expired_retry_interval;
            if let Some(lease) = self.leases.get_mut(&id) {
                lease.deadline = Some(retry);
                self.deadlines.insert((retry, id));
                revokes.push(id);
            }
        }
        if !revokes.is_empty() {
            self.next_revoke_round = now + REVOKE_ROUND_INTERVAL;
        }
        for &id in &revokes {
            self.debug_assert_lease(id);
        }
        let mut checkpoints = Vec::new();
        while checkpoints.len() < CHECKPOINTS_PER_ENTRY_MAX {
            let Some(&(at, id)) = self.checkpoints.first() else {
                break;
            };
            if at > now {
                break;
            }
            self.checkpoints.remove(&(at, id));
            let Some(expiry) = self.leases.get(&id).and_then(|lease| lease.expiry) else {
                continue;
            };
            if expiry <= now {
                continue;
            }
            let remaining = expiry.saturating_since(now);
            let secs = remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0);
            checkpoints.push(LeaseCheckpoint {
                id,
                remaining_ttl: i64::try_from(secs).unwrap_or(i64::MAX),
            });
        }
        // The next checkpoint of each is due an interval from now even if
        // this one is never applied (its proposal refused during a leader
        // transfer, or lost with a leader change); applying it moves the
        // next to an interval after the apply. Without this, one lost
        // checkpoint stopped a lease's checkpoints, and a later leader
        // started it from a stale remaining TTL.
        let interval = self.config.checkpoint_interval;
        for checkpoint in &checkpoints {
            if checkpoint.remaining_ttl > i64::try_from(interval.as_secs()).unwrap_or(i64::MAX) {
                self.checkpoints.insert((now + interval, checkpoint.id));
            }
        }
        (revokes, checkpoints)
    }

    fn set_expiry(&mut self, id: i64, expiry: Instant) {
        let Some(lease) = self.leases.get_mut(&id) else {
            return;
        };
        lease.expiry = Some(expiry);
        if let Some(old) = lease.deadline.replace(expiry) {
            self.deadlines.remove(&(old, id));
        }
        self.deadlines.insert((expiry, id));
        self.debug_assert_lease(id);
    }

    /// etcd checkpoints only leases that outlive the checkpoint interval.
    fn schedule_checkpoint(&mut self, id: i64, now: Instant) {
        let interval = self.config.checkpoint_interval;
        if interval.is_zero() {
            return;
        }
        let Some(lease) = self.leases.get(&id) else {
            return;
        };
        let interval_secs = i64::try_from(interval.as_secs()).unwrap_or(i64::MAX);
        if lease.remaining_or_ttl_secs() > interval_secs {
            self.checkpoints.retain(|&(_, lease_id)| lease_id != id);
            self.checkpoints.insert((now + interval, id));
        }
    }
}

/// The lessor's invariants, checked in debug builds.
impl Lessor {
    /// Lease `id`'s deadline is in the deadline set, it has a deadline
    /// whenever it has an expiry, and every key it lists is attached to it.
    /// Costs a lookup per key of the lease.
    fn debug_assert_lease(&self, id: i64) {
        if !cfg!(debug_assertions) {
            return;
        }
        let Some(lease) = self.leases.get(&id) else {
            return;
        };
        if let Some(deadline) = lease.deadline {
            assert!(
                self.deadlines.contains(&(deadline, id)),
                "lease {id:x}'s deadline is not in the deadline set"
            );
        }
        assert!(
            lease.expiry.is_none() || lease.deadline.is_some(),
            "lease {id:x} expires with no deadline"
        );
        for key in &lease.keys {
            assert_eq!(
                self.key_leases.get(key),
                Some(&id),
                "a key of lease {id:x} is not attached to it"
            );
        }
    }

    /// Every lease as [`Self::debug_assert_lease`] checks it, and the
    /// other way round: every deadline, checkpoint and attached key names
    /// a lease that exists, with at most one deadline and one checkpoint
    /// per lease. Costs a pass over leases and keys.
    fn debug_assert_consistent(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        for &id in self.leases.keys() {
            self.debug_assert_lease(id);
        }
        for &(deadline, id) in &self.deadlines {
            assert_eq!(
                self.leases.get(&id).and_then(|lease| lease.deadline),
                Some(deadline),
                "a deadline of lease {id:x} it does not hold"
            );
        }
        let mut checkpointed = BTreeSet::new();
        for &(_, id) in &self.checkpoints {
            assert!(self.leases.contains_key(&id), "checkpoint of a lease gone");
            assert!(checkpointed.insert(id), "lease {id:x} checkpointed twice");
        }
        for (key, id) in &self.key_leases {
            assert!(
                self.leases
                    .get(id)
                    .is_some_and(|lease| lease.keys.contains(key)),
                "a key attached to lease {id:x}, which does not list it"
            );
        }
        let listed: usize = self.leases.values().map(|lease| lease.keys.len()).sum();
        assert_eq!(
            listed,
            self.key_leases.len(),
            "keys listed twice or not attached"
        );
    }
}

/// A lease ID chosen for a grant that asked for none: derived from the log
/// position of the grant (so every member picks the same one) and the
/// cluster, positive and non-zero, stepping past IDs already taken.
pub(crate) fn choose_id(cluster_id: u64, index: u64, taken: impl Fn(i64) -> bool) -> i64 {
    let mut x = cluster_id ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64's finalizer: neighbouring indexes give unrelated IDs.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let mut id = (x & (i64::MAX as u64)) as i64;
    while id == 0 || taken(id) {
        id = id.wrapping_add(1) & i64::MAX;
    }
    id
}

fn secs_duration(secs: i64) -> Duration {
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

#[cfg(test)]
mod tests;
