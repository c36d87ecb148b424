//! Admission of inbound peer connections: what a connection may hold before
//! it has shown it comes from a member, and after.
//!
//! Design. Anyone can open a TCP connection to the peer port, so a
//! connection that has not completed its handshake (TLS, then our hello)
//! must not be able to keep a member out. Such connections wait in
//! [`Handshakes`], a bounded queue: when it is full, the *oldest* pending
//! handshake is evicted to admit the new one, never the new one refused.
//! A member's handshake takes milliseconds, so it completes long before
//! [`HANDSHAKES_MAX`] later connections could push it out, while idle
//! connections held open by a flood are the oldest and go first. Once its
//! hello is accepted a connection leaves the queue and takes a slot of
//! the established limit ([`super::INBOUND_CONNECTIONS_MAX`]), which only
//! members reach.
//!
//! Invariant: at most [`HANDSHAKES_MAX`] handshakes are pending at once;
//! each [`Pending`] leaves the queue exactly once (when it completes, is
//! evicted, or is dropped).

use std::collections::VecDeque;
use std::sync::Mutex;

use futures_channel::oneshot;

/// Handshakes pending at once, at most; beyond it the oldest is evicted.
pub const HANDSHAKES_MAX: usize = 128;

/// The pending handshakes of one transport, oldest first.
#[derive(Debug, Default)]
pub(super) struct Handshakes {
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    next: u64,
    pending: VecDeque<(u64, oneshot::Sender<()>)>,
}

/// One pending handshake. Its [`Pending::evicted`] resolves if a newer
/// connection pushed it out; dropping it leaves the queue.
pub(super) struct Pending<'a> {
    handshakes: &'a Handshakes,
    id: u64,
    evicted: Option<oneshot::Receiver<()>>,
}

impl Handshakes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        match self.queue.lock() {
            Ok(queue) => queue,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Admits a new handshake, evicting the oldest pending one when
    /// [`HANDSHAKES_MAX`] are pending. Returns the new one and whether an
    /// older one was evicted.
    pub(super) fn admit(&self) -> (Pending<'_>, bool) {
        let (tx, rx) = oneshot::channel();
        let mut queue = self.lock();
        let evicted = if queue.pending.len() >= HANDSHAKES_MAX {
            // The receiver learns of it when the sender goes.
            queue.pending.pop_front().is_some()
        } else {
            false
        };
        let id = queue.next;
        queue.next += 1;
        queue.pending.push_back((id, tx));
        debug_assert!(queue.pending.len() <= HANDSHAKES_MAX);
        let pending = Pending {
            handshakes: self,
            id,
            evicted: Some(rx),
        };
        (pending, evicted)
    }

    /// Handshakes pending now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().pending.len()
    }
}

impl Pending<'_> {
    /// Resolves once this handshake was evicted (never, while it stays).
    pub(super) fn evicted(&mut self) -> oneshot::Receiver<()> {
        self.evicted.take().unwrap_or_else(|| oneshot::channel().1)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut queue = self.handshakes.lock();
        if let Some(at) = queue.pending.iter().position(|(id, _)| *id == self.id) {
            queue.pending.remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_evicted(rx: &mut oneshot::Receiver<()>) -> bool {
        // A dropped sender is the eviction.
        rx.try_recv().is_err()
    }

    #[test]
    fn a_full_queue_evicts_its_oldest_and_admits_the_new() {
        let handshakes = Handshakes::default();
        let mut held = Vec::new();
        for _ in 0..HANDSHAKES_MAX {
            let (mut pending, evicted) = handshakes.admit();
            assert!(!evicted);
            let rx = pending.evicted();
            held.push((pending, rx));
        }
        assert_eq!(handshakes.len(), HANDSHAKES_MAX);
        let (mut newest, evicted) = handshakes.admit();
        assert!(evicted);
        assert_eq!(handshakes.len(), HANDSHAKES_MAX);
        assert!(is_evicted(&mut held[0].1), "the oldest goes");
        assert!(!is_evicted(&mut held[1].1), "the others stay");
        let mut newest_rx = newest.evicted();
        assert!(!is_evicted(&mut newest_rx));
        drop(held);
        drop(newest);
        assert_eq!(handshakes.len(), 0, "every pending one left the queue");
    }
}
