//! This member's proposals between proposing and applying.
//!
//! Design. Every proposal carries an ID unique to its proposer and run
//! (`base + k`, the base mixed from the member's ID and raft position), so
//! a member recognises its own entries when it applies them, whichever
//! leader appended them. [`Proposals`] keeps, per ID, the ticket waiting
//! for it, the leadership it went to and its data; and, for the entries
//! this member appended as leader, the ID at each index. It decides which
//! proposals an applied entry settles and which are lost (to a leader
//! change, or to a snapshot that may or may not hold them); the node
//! answers. A client's write this member appended as leader also keeps
//! the proposal it encoded, so that applying the entry need not decode
//! what the member already had (the entry's bytes are compared first).
//! Invariants: every index in `at` names a proposal in `by_id` whose
//! `index` is that index; an ID is settled at most once.

use std::collections::BTreeMap;

use bytes::Bytes;
use hashbrown::HashMap;
use oxetcd_proto::oxetcdpb::Proposal;

use super::{Leadership, Ticket};

/// A proposal of this member waiting to be applied.
#[derive(Debug)]
struct Proposed {
    ticket: Ticket,
    /// The leader it went to, and its term then.
    leader: Leadership,
    /// Its index, when proposed on this member as leader.
    index: Option<u64>,
    /// The entry's data: an entry with this proposal's ID and other data is
    /// not ours (IDs of an earlier run of this member may repeat).
    data: Bytes,
    /// What `data` encodes, kept for an entry appended here until it is
    /// applied ([`Proposals::take_decoded`]).
    decoded: Option<Proposal>,
}

/// What one applied entry means for this member's proposals.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Settled {
    /// The ticket waiting for this very entry.
    pub(super) ours: Option<Ticket>,
    /// Tickets of proposals appended at or before its index that are not
    /// this entry: lost to a leader change.
    pub(super) lost: Vec<Ticket>,
}

#[derive(Debug)]
pub(super) struct Proposals {
    by_id: HashMap<u64, Proposed>,
    /// IDs of the entries this member appended as leader, by index.
    at: BTreeMap<u64, u64>,
    base: u64,
    next: u64,
}

impl Proposals {
    /// Proposals numbered from `base`, which should differ between runs.
    pub(super) fn new(base: u64) -> Self {
        Self {
            by_id: HashMap::new(),
            at: BTreeMap::new(),
            base,
            next: 0,
        }
    }

    /// A fresh proposal ID, never 0 (0 means nobody waits: the leader's
    /// own lease proposals).
    pub(super) fn next_id(&mut self) -> u64 {
        loop {
            self.next += 1;
            let id = self.base.wrapping_add(self.next);
            if id != 0 {
                return id;
            }
        }
    }

    /// `ticket` waits for proposal `id`, sent to `leader` (appended here
    /// at `index` when this member leads).
    pub(super) fn proposed(
        &mut self,
        id: u64,
        ticket: Ticket,
        leader: Leadership,
        index: Option<u64>,
        data: Bytes,
    ) {
        if let Some(index) = index {
            self.at.insert(index, id);
        }
        let proposed = Proposed {
            ticket,
            leader,
            index,
            data,
            decoded: None,
        };
        let previous = self.by_id.insert(id, proposed);
        debug_assert!(previous.is_none(), "proposal {id} proposed twice");
    }

    /// Keeps `decoded`, what proposal `id` encodes, if this member
    /// appended it as leader; dropped otherwise.
    pub(super) fn keep_decoded(&mut self, id: u64, decoded: Proposal) {
        if let Some(proposed) = self.by_id.get_mut(&id).filter(|p| p.index.is_some()) {
            proposed.decoded = Some(decoded);
        }
    }

    /// The proposal the entry at `index` with `data` encodes, when this
    /// member appended it and kept it: the entry's bytes are the very
    /// ones it encoded.
    pub(super) fn take_decoded(&mut self, index: u64, data: &[u8]) -> Option<Proposal> {
        let id = self.at.get(&index)?;
        let proposed = self.by_id.get_mut(id).filter(|p| p.data == data)?;
        proposed.decoded.take()
    }

    /// The entry at `index` with `data`, proposed as `id`, was applied.
    pub(super) fn settle(&mut self, index: u64, data: &[u8], id: u64) -> Settled {
        let mut settled = Settled::default();
        while let Some((&at, &appended)) = self.at.first_key_value() {
            if at > index {
                break;
            }
            self.at.pop_first();
            if at == index && appended == id {
                continue;
            }
            if let Some(lost) = self.by_id.remove(&appended) {
                settled.lost.push(lost.ticket);
            }
        }
        if id != 0 && self.by_id.get(&id).is_some_and(|p| p.data == data) {
            settled.ours = self.by_id.remove(&id).map(|p| p.ticket);
        }
        debug_assert!(
            self.at.first_key_value().is_none_or(|(&at, _)| at > index),
            "nothing appended at or before an applied index waits"
        );
        settled
    }

    /// The leadership is now `current` (`None`: no leader) with `committed`
    /// committed: proposals sent to another leadership and not known
    /// committed can no longer be followed. Returns their tickets.
    pub(super) fn leadership_changed(
        &mut self,
        current: Option<Leadership>,
        committed: u64,
    ) -> Vec<Ticket> {
        let lost: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, p)| {
                current != Some(p.leader) && p.index.is_none_or(|index| index > committed)
            })
            .map(|(id, _)| *id)
            .collect();
        lost.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// A snapshot up to `applied` was installed: proposals appended at or
    /// before it may or may not be in it. Returns their tickets.
    pub(super) fn covered_by_snapshot(&mut self, applied: u64) -> Vec<Ticket> {
        let later = self.at.split_off(&(applied + 1));
        let covered = std::mem::replace(&mut self.at, later);
        debug_assert!(self
            .at
            .first_key_value()
            .is_none_or(|(&at, _)| at > applied));
        covered
            .into_values()
            .filter_map(|id| self.by_id.remove(&id).map(|p| p.ticket))
            .collect()
    }

    /// Proposals waiting to be applied.
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Drops every proposal whose ticket no longer waits.
    pub(super) fn retain(&mut self, waits: impl Fn(Ticket) -> bool) {
        self.by_id.retain(|_, p| waits(p.ticket));
        let by_id = &self.by_id;
        self.at.retain(|_, id| by_id.contains_key(id));
    }

    fn remove(&mut self, id: u64) -> Option<Ticket> {
        let proposed = self.by_id.remove(&id)?;
        if let Some(index) = proposed.index {
            self.at.remove(&index);
        }
        Some(proposed.ticket)
    }
}

/// Mixes numbers into one well-spread 64-bit value (splitmix64's
/// finalizer), for proposal IDs that differ between runs of a member.
pub(super) fn mix(values: &[u64]) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for &v in values {
        x ^= v;
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEADER: Leadership = Leadership { leader: 1, term: 2 };

    #[test]
    fn ids_are_never_zero_and_never_repeat_in_a_run() {
        let mut proposals = Proposals::new(u64::MAX - 1);
        let ids: Vec<u64> = (0..3).map(|_| proposals.next_id()).collect();
        assert_eq!(ids, vec![u64::MAX, 1, 2]);
    }

    #[test]
    fn an_entry_settles_its_proposal_and_loses_the_ones_it_replaced() {
        let mut proposals = Proposals::new(0);
        let (a, b) = (proposals.next_id(), proposals.next_id());
        proposals.proposed(a, 10, LEADER, Some(5), Bytes::from_static(b"a"));
        proposals.proposed(b, 11, LEADER, Some(6), Bytes::from_static(b"b"));
        // Another leader's entry took index 5: ours at 5 is lost.
        let settled = proposals.settle(5, b"x", 0);
        assert_eq!(
            settled,
            Settled {
                ours: None,
                lost: vec![10]
            }
        );
        // Same ID, other data: an earlier run's proposal, not ours.
        assert_eq!(proposals.settle(6, b"other", b).ours, None);
        let mut proposals = Proposals::new(0);
        let c = proposals.next_id();
        proposals.proposed(c, 12, LEADER, None, Bytes::from_static(b"c"));
        assert_eq!(proposals.settle(9, b"c", c).ours, Some(12));
        assert_eq!(proposals.settle(9, b"c", c).ours, None, "settled once");
    }

    #[test]
    fn a_kept_proposal_is_taken_once_for_its_own_entry_only() {
        let mut proposals = Proposals::new(0);
        let (a, b) = (proposals.next_id(), proposals.next_id());
        let kept = |id| Proposal {
            id,
            user: "root".into(),
            ..Proposal::default()
        };
        proposals.proposed(a, 10, LEADER, Some(5), Bytes::from_static(b"a"));
        proposals.keep_decoded(a, kept(a));
        // Forwarded to a leader: not appended here, nothing kept.
        proposals.proposed(b, 11, LEADER, None, Bytes::from_static(b"b"));
        proposals.keep_decoded(b, kept(b));
        assert_eq!(proposals.take_decoded(6, b"b"), None, "not appended here");
        assert_eq!(proposals.take_decoded(5, b"x"), None, "another entry at 5");
        assert_eq!(proposals.take_decoded(5, b"a"), Some(kept(a)));
        assert_eq!(proposals.take_decoded(5, b"a"), None, "taken once");
        assert_eq!(proposals.settle(5, b"a", a).ours, Some(10), "still settled");
    }

    #[test]
    fn a_leader_change_loses_what_was_not_committed_under_it() {
        let mut proposals = Proposals::new(0);
        let (a, b, c) = (
            proposals.next_id(),
            proposals.next_id(),
            proposals.next_id(),
        );
        proposals.proposed(a, 10, LEADER, Some(5), Bytes::new());
        proposals.proposed(b, 11, LEADER, Some(8), Bytes::new());
        let other = Leadership { leader: 3, term: 3 };
        proposals.proposed(c, 12, other, None, Bytes::new());
        let mut lost = proposals.leadership_changed(Some(other), 6);
        lost.sort();
        assert_eq!(
            lost,
            vec![11],
            "index 5 is committed; c went to the new leader"
        );
        assert_eq!(proposals.leadership_changed(None, 6), vec![12]);
        assert_eq!(proposals.covered_by_snapshot(5), vec![10]);
        assert_eq!(proposals.settle(9, b"", 0), Settled::default());
    }
}
