//! What the leader knows about each member's log, and how it paces appends.
//!
//! Each member has a [`Progress`] in one of three [`ProgressState`]s:
//!
//! - **Probe**: the leader does not know where the member's log matches its
//!   own. It sends one append at a time and waits for the answer (or the next
//!   heartbeat answer) before the next, backing off quickly on rejection with
//!   the member's hint.
//! - **Replicate**: the logs match up to `matched`; the leader streams
//!   appends optimistically, at most [`Inflights`]' capacity unacknowledged.
//! - **Snapshot**: the member needs entries the leader has compacted; the
//!   runtime streams it a snapshot, and appends pause until it reports the
//!   outcome. Heartbeats continue in every state.
//!
//! The [`ProgressTracker`] holds the membership (voters in a
//! [`MajorityConfig`], learners beside it) and one progress per member.
//! Nothing here sends messages or reads the clock; times arrive as values.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use oxetcd_proto::eraftpb::ConfState;

use super::quorum::MajorityConfig;
use crate::Instant;

/// How the leader currently sends appends to a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressState {
    /// One append at a time until the logs are known to match.
    Probe,
    /// Streaming appends, bounded by the in-flight window.
    Replicate,
    /// Waiting for a snapshot to be delivered; no appends.
    Snapshot,
}

/// The window of appends sent to one member and not yet acknowledged,
/// each remembered by the index of its last entry.
///
/// The capacity is [`super::Config::max_inflight_msgs`]: it bounds both the
/// memory a slow member costs the leader and how far the leader runs ahead
/// of a member's acknowledgements.
#[derive(Clone, Debug)]
pub struct Inflights {
    /// Last entry index of each unacknowledged append, ascending.
    window: VecDeque<u64>,
    capacity: usize,
}

impl Inflights {
    /// An empty window holding at most `capacity` appends.
    pub fn new(capacity: usize) -> Self {
        assert!(
            capacity > 0,
            "an in-flight window needs room for one append"
        );
        Self {
            window: VecDeque::with_capacity(capacity.min(64)),
            capacity,
        }
    }

    /// Records an append whose last entry is `last_index`.
    pub fn add(&mut self, last_index: u64) {
        assert!(
            !self.is_full(),
            "in-flight window of {} is full",
            self.capacity
        );
        if let Some(&back) = self.window.back() {
            assert!(
                last_index >= back,
                "in-flight appends out of order: {last_index} after {back}"
            );
        }
        self.window.push_back(last_index);
    }

    /// Forgets every append whose last entry is at or below `index` (the
    /// member acknowledged it).
    pub fn free_to(&mut self, index: u64) {
        while self.window.front().is_some_and(|&i| i <= index) {
            self.window.pop_front();
        }
    }

    /// Forgets the oldest append, making room for one more: used when a
    /// heartbeat answer shows the member alive while the window is full
    /// (its appends were probably lost).
    pub fn free_first_one(&mut self) {
        self.window.pop_front();
    }

    /// True when no more appends may be sent.
    pub fn is_full(&self) -> bool {
        self.window.len() >= self.capacity
    }

    /// Number of unacknowledged appends.
    pub fn len(&self) -> usize {
        self.window.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    fn reset(&mut self) {
        self.window.clear();
    }
}

/// The leader's view of one member's log.
#[derive(Clone, Debug)]
pub struct Progress {
    matched: u64,
    next_index: u64,
    state: ProgressState,
    /// In `Snapshot`: the log index the snapshot will at least cover.
    pending_snapshot: u64,
    /// In `Probe`: an append is out and unanswered, so no other is sent.
    probe_sent: bool,
    inflights: Inflights,
    /// When the member last answered this leader (check-quorum).
    last_heard: Option<Instant>,
    learner: bool,
}

impl Progress {
    pub(crate) fn new(next_index: u64, max_inflight: usize, learner: bool) -> Self {
        Self {
            matched: 0,
            next_index: next_index.max(1),
            state: ProgressState::Probe,
            pending_snapshot: 0,
            probe_sent: false,
            inflights: Inflights::new(max_inflight),
            last_heard: None,
            learner,
        }
    }

    /// Highest index known to match the leader's log.
    pub fn matched(&self) -> u64 {
        self.matched
    }

    /// Index of the next entry to send.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// How appends are sent.
    pub fn state(&self) -> ProgressState {
        self.state
    }

    /// True for a learner.
    pub fn is_learner(&self) -> bool {
        self.learner
    }

    /// When the member last answered this leader.
    pub fn last_heard(&self) -> Option<Instant> {
        self.last_heard
    }

    /// The unacknowledged appends.
    pub fn inflights(&self) -> &Inflights {
        &self.inflights
    }

    pub(crate) fn set_learner(&mut self, learner: bool) {
        self.learner = learner;
    }

    pub(crate) fn heard_at(&mut self, now: Instant) {
        self.last_heard = Some(self.last_heard.map_or(now, |t| t.max(now)));
    }

    /// Whether the member answered within `window` before `now`.
    pub(crate) fn recently_heard(&self, now: Instant, window: Duration) -> bool {
        self.last_heard
            .is_some_and(|t| now.saturating_since(t) < window)
    }

    /// True when no append may be sent now.
    pub fn is_paused(&self) -> bool {
        match self.state {
            ProgressState::Probe => self.probe_sent,
            ProgressState::Replicate => self.inflights.is_full(),
            ProgressState::Snapshot => true,
        }
    }

    pub(crate) fn become_probe(&mut self) {
        // Leaving Snapshot, the member has at least the snapshot (if it was
        // delivered) — probing from there avoids asking for it again.
        let floor = if self.state == ProgressState::Snapshot {
            self.pending_snapshot.max(self.matched) + 1
        } else {
            self.matched + 1
        };
        self.reset_state(ProgressState::Probe);
        self.next_index = floor;
    }

    pub(crate) fn become_replicate(&mut self) {
        self.reset_state(ProgressState::Replicate);
        self.next_index = self.matched + 1;
    }

    pub(crate) fn become_snapshot(&mut self, snapshot_index: u64) {
        self.reset_state(ProgressState::Snapshot);
        self.pending_snapshot = snapshot_index;
    }

    fn reset_state(&mut self, state: ProgressState) {
        self.state = state;
        self.probe_sent = false;
        self.pending_snapshot = 0;
        self.inflights.reset();
    }

    /// Lets a probing member receive the next append (after any answer).
    pub(crate) fn resume(&mut self) {
        self.probe_sent = false;
    }

    /// The member acknowledged its log matches up to `index`. Returns
    /// whether that is news.
    pub(crate) fn maybe_update(&mut self, index: u64) -> bool {
        let updated = index > self.matched;
        if updated {
            self.matched = index;
            self.resume();
        }
        self.next_index = self.next_index.max(index + 1);
        updated
    }

    /// The member rejected an append whose previous index was `rejected`;
    /// `match_hint` is the highest index at which the logs may match.
    /// Returns false when the rejection is stale (answers an append sent
    /// before a later acknowledgement or probe).
    pub(crate) fn maybe_decr_to(&mut self, rejected: u64, match_hint: u64) -> bool {
        if self.state == ProgressState::Replicate {
            if rejected <= self.matched {
                return false;
            }
            // Appends after `matched` were lost or refused: resend from there.
            self.next_index = self.matched + 1;
            return true;
        }
        if self.next_index.checked_sub(1) != Some(rejected) {
            return false;
        }
        self.next_index = rejected.min(match_hint + 1).max(self.matched + 1);
        self.resume();
        true
    }

    /// The member acknowledged appends up to `index`.
    pub(crate) fn ack_inflights(&mut self, index: u64) {
        self.inflights.free_to(index);
    }

    /// An append is going out with entries up to `last` (none if `None`).
    pub(crate) fn sent_append(&mut self, last: Option<u64>) {
        match self.state {
            ProgressState::Replicate => {
                if let Some(last) = last {
                    self.next_index = last + 1;
                    self.inflights.add(last);
                }
            }
            ProgressState::Probe => self.probe_sent = true,
            ProgressState::Snapshot => {
                unreachable!("append sent to a member waiting for a snapshot")
            }
        }
    }

    /// Room for one more append after a heartbeat answer, if the window is full.
    pub(crate) fn free_one_if_full(&mut self) {
        if self.state == ProgressState::Replicate && self.inflights.is_full() {
            self.inflights.free_first_one();
        }
    }

    /// Restarts tracking for a new leader term.
    pub(crate) fn reset(&mut self, next_index: u64, now: Instant) {
        self.reset_state(ProgressState::Probe);
        self.matched = 0;
        self.next_index = next_index.max(1);
        // A new leader gives everyone a full election timeout to answer
        // before check-quorum counts them as lost.
        self.last_heard = Some(now);
    }
}

/// The membership and every member's [`Progress`].
#[derive(Clone, Debug)]
pub(crate) struct ProgressTracker {
    voters: MajorityConfig,
    learners: BTreeSet<u64>,
    progress: BTreeMap<u64, Progress>,
    max_inflight: usize,
}

impl ProgressTracker {
    /// Membership from `conf_state`; every member starts probing at
    /// `next_index`. Joint configurations are not supported: outgoing
    /// voters are ignored by the caller's validation.
    pub(crate) fn new(conf_state: &ConfState, next_index: u64, max_inflight: usize) -> Self {
        let mut tracker = Self {
            voters: MajorityConfig::default(),
            learners: BTreeSet::new(),
            progress: BTreeMap::new(),
            max_inflight,
        };
        for &id in &conf_state.voters {
            tracker.add_voter(id, next_index);
        }
        for &id in &conf_state.learners {
            if !tracker.voters.contains(id) {
                tracker.add_learner(id, next_index);
            }
        }
        tracker
    }

    pub(crate) fn voters(&self) -> &MajorityConfig {
        &self.voters
    }

    pub(crate) fn is_voter(&self, id: u64) -> bool {
        self.voters.contains(id)
    }

    pub(crate) fn is_learner(&self, id: u64) -> bool {
        self.learners.contains(&id)
    }

    pub(crate) fn conf_state(&self) -> ConfState {
        ConfState {
            voters: self.voters.iter().collect(),
            learners: self.learners.iter().copied().collect(),
            ..Default::default()
        }
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Progress> {
        self.progress.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Progress> {
        self.progress.get_mut(&id)
    }

    /// Every member but `except`, in ascending order.
    pub(crate) fn peers(&self, except: u64) -> Vec<u64> {
        self.progress
            .keys()
            .copied()
            .filter(|&id| id != except)
            .collect()
    }

    pub(crate) fn add_voter(&mut self, id: u64, next_index: u64) {
        self.learners.remove(&id);
        self.voters.insert(id);
        let max_inflight = self.max_inflight;
        self.progress
            .entry(id)
            .or_insert_with(|| Progress::new(next_index, max_inflight, false))
            .set_learner(false);
    }

    pub(crate) fn add_learner(&mut self, id: u64, next_index: u64) {
        assert!(
            !self.voters.contains(id),
            "member {id:x} is a voter; demotion is not supported"
        );
        self.learners.insert(id);
        let max_inflight = self.max_inflight;
        self.progress
            .entry(id)
            .or_insert_with(|| Progress::new(next_index, max_inflight, true))
            .set_learner(true);
    }

    pub(crate) fn remove(&mut self, id: u64) {
        self.voters.remove(id);
        self.learners.remove(&id);
        self.progress.remove(&id);
    }

    /// The highest index a majority of voters has acknowledged.
    pub(crate) fn committed_index(&self) -> u64 {
        let matched = |id: u64| self.progress.get(&id).map_or(0, |p| p.matched);
        if crate::canary::on(crate::canary::Canary::LearnerInQuorum) && !self.voters.is_empty() {
            let mut acked: Vec<u64> = self
                .voters
                .iter()
                .chain(self.learners.iter().copied())
                .map(matched)
                .collect();
            acked.sort_unstable_by(|a, b| b.cmp(a));
            return acked[self.voters.quorum() - 1];
        }
        self.voters.committed_index(matched)
    }

    /// Restarts every progress for a new leader term; `self_id` matches up
    /// to `self_matched` (what it has made durable).
    pub(crate) fn reset_all(
        &mut self,
        next_index: u64,
        now: Instant,
        self_id: u64,
        self_matched: u64,
    ) {
        for (&id, progress) in &mut self.progress {
            progress.reset(next_index, now);
            if id == self_id {
                progress.matched = self_matched;
                progress.next_index = self_matched + 1;
                progress.state = ProgressState::Replicate;
            }
        }
    }

    /// Whether a majority of voters (counting `self_id`) answered within
    /// `window` before `now`.
    pub(crate) fn quorum_active(&self, self_id: u64, now: Instant, window: Duration) -> bool {
        let active = self
            .voters
            .iter()
            .filter(|&id| {
                id == self_id
                    || self
                        .progress
                        .get(&id)
                        .is_some_and(|p| p.recently_heard(now, window))
            })
            .count();
        active >= self.voters.quorum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::QuickCheck;

    #[derive(Clone, Debug)]
    enum InflightOp {
        /// Send an append `n` entries past the last one.
        Send(u8),
        /// Acknowledge up to the `n`-th outstanding append.
        Ack(u8),
        FreeFirst,
    }

    impl quickcheck::Arbitrary for InflightOp {
        fn arbitrary(g: &mut quickcheck::Gen) -> Self {
            match u8::arbitrary(g) % 3 {
                0 => InflightOp::Send(u8::arbitrary(g) % 4),
                1 => InflightOp::Ack(u8::arbitrary(g)),
                _ => InflightOp::FreeFirst,
            }
        }
    }

    /// The window against a plain `Vec` model: it never exceeds its
    /// capacity, stays sorted, and acknowledging frees exactly the appends
    /// at or below the acknowledged index.
    #[test]
    fn inflights_match_model() {
        fn property(capacity: u8, ops: Vec<InflightOp>) -> bool {
            let capacity = usize::from(capacity % 8) + 1;
            let mut window = Inflights::new(capacity);
            let mut model: Vec<u64> = Vec::new();
            let mut last = 0u64;
            for op in ops {
                match op {
                    InflightOp::Send(n) => {
                        if window.is_full() {
                            if model.len() < capacity {
                                return false;
                            }
                            continue;
                        }
                        last += u64::from(n);
                        window.add(last);
                        model.push(last);
                    }
                    InflightOp::Ack(k) => {
                        let Some(&index) = model.get(usize::from(k) % (model.len() + 1)) else {
                            continue;
                        };
                        window.free_to(index);
                        model.retain(|&i| i > index);
                    }
                    InflightOp::FreeFirst => {
                        window.free_first_one();
                        if !model.is_empty() {
                            model.remove(0);
                        }
                    }
                }
                if window.len() != model.len()
                    || window.len() > capacity
                    || window.is_full() != (model.len() == capacity)
                    || !window.window.iter().eq(model.iter())
                {
                    return false;
                }
            }
            true
        }
        QuickCheck::new()
            .tests(1_000)
            .quickcheck(property as fn(u8, Vec<InflightOp>) -> bool);
    }

    #[derive(Clone, Debug)]
    enum ProgressOp {
        /// Send what the leader has (the leader's log grows by `n` first).
        Send(u8),
        /// The member acknowledges some append up to `n`-th of its log.
        Ack(u16),
        /// The member rejects the append at `rejected` with `hint`.
        Reject(u16, u16),
        Probe,
        HeartbeatAnswer,
    }

    impl quickcheck::Arbitrary for ProgressOp {
        fn arbitrary(g: &mut quickcheck::Gen) -> Self {
            match u8::arbitrary(g) % 5 {
                0 => ProgressOp::Send(u8::arbitrary(g) % 5),
                1 => ProgressOp::Ack(u16::arbitrary(g) % 64),
                2 => ProgressOp::Reject(u16::arbitrary(g) % 64, u16::arbitrary(g) % 64),
                3 => ProgressOp::Probe,
                _ => ProgressOp::HeartbeatAnswer,
            }
        }
    }

    /// Under any sequence of sends, acknowledgements (including stale and
    /// duplicated ones), rejections and state changes: `matched` never
    /// decreases, `next_index` stays above `matched`, a probe is paused
    /// exactly while its append is unanswered, and the window never
    /// exceeds its capacity.
    #[test]
    fn progress_invariants_hold() {
        fn property(ops: Vec<ProgressOp>) -> bool {
            let mut last = 10u64;
            let mut p = Progress::new(last + 1, 4, false);
            let mut prev_matched = 0;
            for op in ops {
                match op {
                    ProgressOp::Send(n) => {
                        last += u64::from(n);
                        if !p.is_paused() {
                            let sent = (p.next_index <= last).then_some(last);
                            p.sent_append(sent);
                        }
                    }
                    ProgressOp::Ack(i) => {
                        let i = u64::from(i).min(last);
                        if p.maybe_update(i) && p.state == ProgressState::Probe {
                            p.become_replicate();
                        }
                        p.inflights.free_to(i);
                    }
                    ProgressOp::Reject(r, hint) => {
                        let (r, hint) = (u64::from(r).min(last), u64::from(hint).min(last));
                        if p.maybe_decr_to(r, hint) && p.state == ProgressState::Replicate {
                            p.become_probe();
                        }
                    }
                    ProgressOp::Probe => p.become_probe(),
                    ProgressOp::HeartbeatAnswer => {
                        p.resume();
                        p.free_one_if_full();
                    }
                }
                if p.matched < prev_matched
                    || p.next_index <= p.matched
                    || p.inflights.len() > 4
                    || (p.state == ProgressState::Probe && p.is_paused() != p.probe_sent)
                {
                    return false;
                }
                prev_matched = p.matched;
            }
            true
        }
        QuickCheck::new()
            .tests(1_000)
            .quickcheck(property as fn(Vec<ProgressOp>) -> bool);
    }

    #[test]
    fn rejection_backs_off_with_the_hint_and_ignores_stale_answers() {
        let mut p = Progress::new(101, 4, false);
        p.sent_append(Some(100));
        // The member's log ends at 40: jump straight there, not one by one.
        assert!(p.maybe_decr_to(100, 40));
        assert_eq!(p.next_index, 41);
        // A late rejection of an older probe changes nothing.
        assert!(!p.maybe_decr_to(100, 10));
        p.maybe_update(40);
        p.become_replicate();
        p.sent_append(Some(60));
        assert!(!p.maybe_decr_to(30, 0), "rejection below matched is stale");
        assert!(p.maybe_decr_to(50, 45));
        assert_eq!(p.next_index, 41);
    }
}
