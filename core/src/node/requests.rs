//! The requests a node holds: who waits for each answer, until when, and
//! which of them wait for a leader.
//!
//! Design. A request is admitted once and gets a [`Ticket`], never reused,
//! so a late answer can never reach a newer request. [`Requests`] keeps the
//! origin of every waiting ticket and its deadline (in admission order: all
//! share one timeout), and counts the ones followers forwarded here.
//! [`Leaderless`] holds the requests that need a leader while none is
//! known, each until an election timeout from when it was held. Neither
//! answers anyone: they hand back what expired or what was taken, and the
//! node answers. Invariants: a ticket is answered at most once (`take`
//! removes it); the forwarded count equals the waiting peer origins.

use std::collections::VecDeque;

use hashbrown::HashMap;

use super::{Held, Origin, Ticket};
use crate::Instant;

/// Waiting requests, by ticket.
#[derive(Debug)]
pub(super) struct Requests {
    waiting: HashMap<Ticket, Origin>,
    next_ticket: Ticket,
    /// When each waiting request times out, in admission order.
    deadlines: VecDeque<(Instant, Ticket)>,
    /// Waiting requests that followers forwarded to this leader.
    forwarded_in: usize,
}

impl Default for Requests {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
            next_ticket: 1,
            deadlines: VecDeque::new(),
            forwarded_in: 0,
        }
    }
}

impl Requests {
    /// Starts waiting for a request from `origin`, until `deadline`.
    pub(super) fn admit(&mut self, origin: Origin, deadline: Instant) -> Ticket {
        debug_assert!(
            self.deadlines
                .back()
                .is_none_or(|(last, _)| *last <= deadline),
            "deadlines are admitted in order"
        );
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        if matches!(origin, Origin::Peer { .. }) {
            self.forwarded_in += 1;
        }
        let previous = self.waiting.insert(ticket, origin);
        debug_assert!(previous.is_none(), "ticket {ticket} admitted twice");
        self.deadlines.push_back((deadline, ticket));
        debug_assert!(self.forwarded_in <= self.waiting.len());
        ticket
    }

    /// The origin of `ticket`, which no longer waits; `None` if it was
    /// answered already (it timed out, for one).
    pub(super) fn take(&mut self, ticket: Ticket) -> Option<Origin> {
        let origin = self.waiting.remove(&ticket)?;
        if matches!(origin, Origin::Peer { .. }) {
            debug_assert!(self.forwarded_in > 0, "a forwarded request counted");
            self.forwarded_in -= 1;
        }
        debug_assert!(self.forwarded_in <= self.waiting.len());
        Some(origin)
    }

    pub(super) fn waits(&self, ticket: Ticket) -> bool {
        self.waiting.contains_key(&ticket)
    }

    /// Requests followers forwarded here that still wait.
    pub(super) fn forwarded_in(&self) -> usize {
        self.forwarded_in
    }

    /// The earliest deadline, if any request waits.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.front().map(|(at, _)| *at)
    }

    /// The tickets whose deadline passed by `now` and that still wait.
    pub(super) fn expired(&mut self, now: Instant) -> Vec<Ticket> {
        let mut expired = Vec::new();
        while self.deadlines.front().is_some_and(|(at, _)| *at <= now) {
            let (_, ticket) = self.deadlines.pop_front().expect("front exists");
            if self.waits(ticket) {
                expired.push(ticket);
            }
        }
        expired
    }

    /// Every waiting origin, taken (the node stops).
    pub(super) fn drain(&mut self) -> Vec<Origin> {
        self.forwarded_in = 0;
        self.deadlines.clear();
        self.waiting.drain().map(|(_, origin)| origin).collect()
    }
}

/// Requests waiting for a leader, in the order they were held.
#[derive(Debug, Default)]
pub(super) struct Leaderless {
    held: VecDeque<(Instant, Ticket, Held)>,
}

impl Leaderless {
    /// Holds `held` until `give_up`; refuses (false) if `max` are held.
    pub(super) fn hold(
        &mut self,
        ticket: Ticket,
        held: Held,
        give_up: Instant,
        max: usize,
    ) -> bool {
        if self.held.len() >= max {
            return false;
        }
        // `expired` stops at the first request still in time.
        debug_assert!(
            self.held.back().is_none_or(|(at, _, _)| *at <= give_up),
            "requests are held in the order they give up"
        );
        self.held.push_back((give_up, ticket, held));
        true
    }

    /// Everything held, in order (a leader is known).
    pub(super) fn release(&mut self) -> Vec<(Ticket, Held)> {
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|(_, ticket, held)| (ticket, held))
            .collect()
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.held.front().map(|(at, _, _)| *at)
    }

    /// The tickets that gave up by `now`.
    pub(super) fn expired(&mut self, now: Instant) -> Vec<Ticket> {
        let mut expired = Vec::new();
        while self.held.front().is_some_and(|(at, _, _)| *at <= now) {
            let (_, ticket, _) = self.held.pop_front().expect("front exists");
            expired.push(ticket);
        }
        expired
    }

    pub(super) fn retain(&mut self, waits: impl Fn(Ticket) -> bool) {
        self.held.retain(|(_, t, _)| waits(*t));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Request;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn a_ticket_is_answered_once_and_expires_only_while_waiting() {
        let mut requests = Requests::default();
        let a = requests.admit(Origin::Client(10), at(100));
        let b = requests.admit(Origin::Client(11), at(200));
        assert_ne!(a, b);
        assert_eq!(requests.take(a), Some(Origin::Client(10)));
        assert_eq!(requests.take(a), None, "answered once");
        assert_eq!(requests.poll_timeout(), Some(at(100)));
        assert!(requests.expired(at(150)).is_empty(), "a was answered");
        assert_eq!(requests.expired(at(200)), vec![b]);
        assert!(requests.waits(b), "expiring names it; the node answers it");
    }

    #[test]
    fn forwarded_requests_are_counted_while_they_wait() {
        let mut requests = Requests::default();
        let peer = Origin::Peer {
            member: 2,
            forward_id: 7,
        };
        let t = requests.admit(peer, at(100));
        requests.admit(Origin::Client(1), at(100));
        assert_eq!(requests.forwarded_in(), 1);
        requests.take(t);
        assert_eq!(requests.forwarded_in(), 0);
        requests.admit(peer, at(100));
        assert_eq!(requests.drain().len(), 2);
        assert_eq!(requests.forwarded_in(), 0);
    }

    #[test]
    fn leaderless_requests_are_bounded_and_give_up_in_order() {
        let mut leaderless = Leaderless::default();
        assert!(leaderless.hold(
            1,
            Held::Request(Request::Status, Default::default()),
            at(100),
            2
        ));
        assert!(leaderless.hold(
            2,
            Held::Request(Request::Status, Default::default()),
            at(200),
            2
        ));
        assert!(!leaderless.hold(
            3,
            Held::Request(Request::Status, Default::default()),
            at(300),
            2
        ));
        assert_eq!(leaderless.poll_timeout(), Some(at(100)));
        assert_eq!(leaderless.expired(at(150)), vec![1]);
        let released: Vec<Ticket> = leaderless.release().into_iter().map(|(t, _)| t).collect();
        assert_eq!(released, vec![2]);
        assert_eq!(leaderless.poll_timeout(), None);
    }
}
