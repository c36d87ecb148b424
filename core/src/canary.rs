//! Bug canaries: switches that put back, in a test build only, classes of
//! bugs etcd once shipped, so the node simulator shows it catches each.
//!
//! Design. A canary is on for one test thread at a time (a thread-local),
//! so canary runs and ordinary tests share a test binary without touching
//! each other. Outside `cfg(test)` [`on`] is a constant `false` the
//! compiler removes with the branch it guards: a release build carries no
//! trace of them. Each switch sits at the one place its bug would be; the
//! canary tests (`node/canary_tests.rs`) turn one on, run seeds until the
//! simulator reports a violation, and fail if none does within their
//! bound.

/// The bug classes that can be put back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Canary {
    /// A linearizable read served from the member's own state, without a
    /// read index round: a partitioned old leader (or a lagging
    /// follower) answers stale data.
    StaleRead,
    /// After a restart the member believes it applied one entry fewer
    /// than it did (the applied index and the data not persisted in one
    /// transaction), so the last entry is applied twice.
    ApplyTwice,
    /// A vote granted without the check that the candidate's log is at
    /// least as up to date: a leader without committed entries can win.
    VoteWithoutLogCheck,
    /// A put's `prev_kv` shows the key as the put left it, not as it was.
    PrevKvWrongRevision,
    /// A txn's compares read the revision before the current one, not
    /// the one its operations write on.
    TxnCompareStale,
    /// After a restart the member believes it applied one entry more than
    /// it did (the applied index persisted before the data, out of one
    /// transaction), so that entry is never applied.
    AppliedIndexBeforeData,
    /// A learner's acknowledgement counts toward the voters' quorum: an
    /// entry on the leader and a learner is committed without a majority
    /// of voters.
    LearnerInQuorum,
    /// A watch created with a start revision skips the events of that
    /// revision itself.
    WatchSkipsStartRevision,
    /// A watch whose start revision is compacted is cancelled without
    /// saying at which revision (no `compact_revision`): the client cannot
    /// tell a compaction from any other end, and resumes as if nothing
    /// was lost.
    CompactedWatchWithoutRevision,
    /// A watch catching up from history is sent the events of the last
    /// revision it caught up to again as it joins the live stream.
    DuplicateEventsAtCatchUp,
    /// A lease revoke deletes all but one of its keys at its revision and
    /// the last one at the next (the revoke not atomic with its keys).
    RevokeLeavesKeyBehind,
    /// A new leader starts every lease from its full TTL, not from the
    /// checkpointed remaining TTL (no checkpoint): leases outlive their
    /// TTL across leader changes.
    LeaseTtlResetOnLeaderChange,
}

/// The applied index a member starting on `log` believes in: `applied`,
/// unless a canary misremembers it ([`Canary::ApplyTwice`],
/// [`Canary::AppliedIndexBeforeData`]).
pub(crate) fn applied_index_at_start(applied: u64, log: &crate::storage::LogState) -> u64 {
    if on(Canary::ApplyTwice) {
        return applied.saturating_sub(1).max(log.first_index - 1);
    }
    if on(Canary::AppliedIndexBeforeData) {
        return (applied + 1).min(log.last_index);
    }
    applied
}

#[cfg(test)]
thread_local! {
    static ON: std::cell::Cell<Option<Canary>> = const { std::cell::Cell::new(None) };
}

/// Whether `canary` is on in this thread.
#[cfg(test)]
pub(crate) fn on(canary: Canary) -> bool {
    ON.with(|on| on.get() == Some(canary))
}

/// Whether `canary` is on: never, outside tests.
#[cfg(not(test))]
#[inline(always)]
pub(crate) const fn on(_canary: Canary) -> bool {
    false
}

/// Turns `canary` on in this thread (or every canary off) until the guard
/// drops.
#[cfg(test)]
pub(crate) fn turn_on(canary: Canary) -> impl Drop {
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            ON.with(|on| on.set(None));
        }
    }
    ON.with(|on| on.set(Some(canary)));
    Off
}
