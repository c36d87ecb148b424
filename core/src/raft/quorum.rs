//! Majority quorums: which index a majority has acknowledged, and whether
//! an election is won, lost or still open.
//!
//! Only voters are ever counted; learners live beside the quorum (in
//! [`super::progress::ProgressTracker`]) and never reach this module.
//! Membership changes are single-step (one voter added or removed at a
//! time), so one majority configuration is enough: any two majorities of
//! configurations that differ by one voter intersect. This module holds no
//! state beyond the voter set and never reads the clock.

use std::collections::BTreeSet;

/// A set of voters, any majority of which decides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MajorityConfig {
    voters: BTreeSet<u64>,
}

/// The state of an election under a [`MajorityConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoteResult {
    /// A majority granted.
    Won,
    /// A majority can no longer grant.
    Lost,
    /// Neither yet.
    Pending,
}

impl MajorityConfig {
    /// A configuration of these voters (duplicates collapse).
    pub fn new(voters: impl IntoIterator<Item = u64>) -> Self {
        Self {
            voters: voters.into_iter().collect(),
        }
    }

    /// Whether `id` is a voter.
    pub fn contains(&self, id: u64) -> bool {
        self.voters.contains(&id)
    }

    /// Number of voters.
    pub fn len(&self) -> usize {
        self.voters.len()
    }

    /// True when there are no voters: nothing can be decided.
    pub fn is_empty(&self) -> bool {
        self.voters.is_empty()
    }

    /// The voters, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.voters.iter().copied()
    }

    /// Votes needed to decide: a strict majority.
    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    pub(crate) fn insert(&mut self, id: u64) {
        self.voters.insert(id);
    }

    pub(crate) fn remove(&mut self, id: u64) {
        self.voters.remove(&id);
    }

    /// The highest index that a majority of voters has acknowledged, given
    /// each voter's acknowledged index (`acked`). 0 with no voters, so an
    /// empty configuration never commits anything.
    pub fn committed_index(&self, mut acked: impl FnMut(u64) -> u64) -> u64 {
        if self.voters.is_empty() {
            return 0;
        }
        let mut indexes: Vec<u64> = self.voters.iter().map(|&id| acked(id)).collect();
        indexes.sort_unstable_by(|a, b| b.cmp(a));
        // Sorted descending, the quorum-th value is acknowledged by exactly
        // the voters before it and itself: a majority.
        indexes[self.quorum() - 1]
    }

    /// The election's state given each voter's answer (`None`: no answer
    /// yet). Answers from non-voters are never asked for.
    pub fn vote_result(&self, mut vote: impl FnMut(u64) -> Option<bool>) -> VoteResult {
        if self.voters.is_empty() {
            // Nobody can vote: an empty configuration cannot elect anyone.
            return VoteResult::Lost;
        }
        let (mut granted, mut missing) = (0, 0);
        for &id in &self.voters {
            match vote(id) {
                Some(true) => granted += 1,
                Some(false) => {}
                None => missing += 1,
            }
        }
        let quorum = self.quorum();
        if granted >= quorum {
            VoteResult::Won
        } else if granted + missing >= quorum {
            VoteResult::Pending
        } else {
            VoteResult::Lost
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{QuickCheck, TestResult};
    use std::collections::BTreeMap;

    /// The committed index is the largest index that a majority has
    /// acknowledged: checked against counting, for every candidate index.
    #[test]
    fn committed_index_matches_counting() {
        fn property(acks: Vec<(u8, u16)>) -> TestResult {
            // Voter ids 1..=8 at most, each with one acknowledged index.
            let acks: BTreeMap<u64, u64> = acks
                .into_iter()
                .map(|(id, index)| (u64::from(id % 8) + 1, u64::from(index)))
                .collect();
            if acks.is_empty() {
                return TestResult::discard();
            }
            let config = MajorityConfig::new(acks.keys().copied());
            let got = config.committed_index(|id| acks[&id]);
            let majority = acks.len() / 2 + 1;
            let count = |i: u64| acks.values().filter(|&&a| a >= i).count();
            let expected = acks
                .values()
                .copied()
                .filter(|&i| count(i) >= majority)
                .max()
                .unwrap_or(0);
            TestResult::from_bool(got == expected && count(got) >= majority)
        }
        QuickCheck::new()
            .tests(2_000)
            .quickcheck(property as fn(Vec<(u8, u16)>) -> TestResult);
    }

    /// An election is won exactly when a majority granted, lost exactly
    /// when a majority can no longer grant, and adding answers never moves
    /// a decided election.
    #[test]
    fn vote_result_matches_counting_and_is_monotonic() {
        fn property(voters: u8, answers: Vec<(u8, bool)>) -> bool {
            let n = u64::from(voters % 7) + 1;
            let config = MajorityConfig::new(1..=n);
            let mut votes = BTreeMap::new();
            let mut decided: Option<VoteResult> = None;
            for (id, granted) in answers {
                let id = u64::from(id) % (n + 2) + 1; // may be a non-voter
                votes.entry(id).or_insert(granted);
                let result = config.vote_result(|v| votes.get(&v).copied());
                let granted = (1..=n).filter(|v| votes.get(v) == Some(&true)).count();
                let rejected = (1..=n).filter(|v| votes.get(v) == Some(&false)).count();
                let quorum = n as usize / 2 + 1;
                let expected = if granted >= quorum {
                    VoteResult::Won
                } else if n as usize - rejected < quorum {
                    VoteResult::Lost
                } else {
                    VoteResult::Pending
                };
                if result != expected {
                    return false;
                }
                if let Some(d) = decided {
                    if d != result {
                        return false;
                    }
                } else if result != VoteResult::Pending {
                    decided = Some(result);
                }
            }
            true
        }
        QuickCheck::new()
            .tests(2_000)
            .quickcheck(property as fn(u8, Vec<(u8, bool)>) -> bool);
    }

    /// Quorums of configurations one voter apart always intersect: the
    /// reason single-step membership changes need no joint consensus.
    #[test]
    fn single_step_changes_keep_quorums_intersecting() {
        for n in 1..=7u64 {
            let before = MajorityConfig::new(1..=n);
            let after = MajorityConfig::new(1..=n + 1);
            assert!(
                before.quorum() + after.quorum() > after.len(),
                "{n} → {} voters: quorums {} and {} may be disjoint",
                n + 1,
                before.quorum(),
                after.quorum()
            );
        }
    }

    #[test]
    fn table() {
        let c = MajorityConfig::new([1, 2, 3]);
        let acked = BTreeMap::from([(1, 5), (2, 3), (3, 9)]);
        assert_eq!(c.committed_index(|id| acked[&id]), 5);
        assert_eq!(MajorityConfig::default().committed_index(|_| 7), 0);
        assert_eq!(
            MajorityConfig::default().vote_result(|_| Some(true)),
            VoteResult::Lost
        );
        let one = MajorityConfig::new([1]);
        assert_eq!(one.vote_result(|_| Some(true)), VoteResult::Won);
        assert_eq!(
            c.vote_result(|id| (id == 1).then_some(true)),
            VoteResult::Pending
        );
        assert_eq!(
            c.vote_result(|id| (id != 1).then_some(false)),
            VoteResult::Lost
        );
    }
}
