//! How long the driver polls its channel before it blocks on it.
//!
//! Design. Blocking on the channel costs the sender a futex wake, and the
//! driver a sleep and a wake-up on a core that went idle: on a virtual
//! machine that is an inter-processor interrupt, tens of microseconds of a
//! single client's put whose whole round trip is a few hundred. So while
//! commands keep coming soon after the driver starts to wait, it polls the
//! channel for up to [`SPIN_MAX`] first ([`SPIN_MAX_ALONE`] for a member
//! without peers), yielding its core to any other runnable thread between
//! polls, and only then blocks. [`Spin`] decides from the last wait
//! alone:
//! - a command that came within that bound of the wait's start makes the
//!   next wait poll first;
//! - a command that came later, or a wait that ended at a timer, makes the
//!   next wait block at once.
//!
//! So an idle node never polls, a node under load rarely waits at all, and
//! a burst's end costs one wait of at most that bound. Each command the
//! driver receives leads to at most one such poll, and the node's timers
//! cut it short (the caller caps it at the next deadline).

use std::time::Duration;

/// The longest the driver of a member with peers polls before blocking:
/// longer than a single client's turn on loopback (the answer goes out,
/// the next request comes in: about 150 µs), far shorter than a raft tick.
pub(super) const SPIN_MAX: Duration = Duration::from_micros(250);

/// The same for a member alone, whose polling takes no core a peer on the
/// same machine needs. A client's turn took 250–350 µs on a slower virtual
/// machine, where [`SPIN_MAX`] missed most turns; with this bound, and
/// lone requests polling as long for their replies (`super::awaited`), a
/// 1-client put's p50 there fell from 0.56 to 0.48 ms (Go `clientv3`,
/// alternating runs), for more of a core polling while the client waits.
/// Three members sharing that machine's two cores, polling for up to this
/// long too, answered one client sooner but 256 clients 11 % slower, for
/// 11 % more CPU a put.
pub(super) const SPIN_MAX_ALONE: Duration = Duration::from_micros(500);

/// The bound for a member with peers ([`SPIN_MAX`]) or alone
/// ([`SPIN_MAX_ALONE`]).
pub(super) fn bound(has_peers: bool) -> Duration {
    if has_peers {
        SPIN_MAX
    } else {
        SPIN_MAX_ALONE
    }
}

/// The polling policy: how long the next wait polls before it blocks.
#[derive(Debug, Default)]
pub(super) struct Spin {
    budget: Duration,
}

impl Spin {
    /// How long the next wait polls the channel before it blocks.
    pub(super) fn budget(&self) -> Duration {
        self.budget
    }

    /// A wait ended: a command came `gap` after it began, or none came
    /// (`None`: a timer was due). `max` is the member's [`bound`].
    pub(super) fn record(&mut self, gap: Option<Duration>, max: Duration) {
        self.budget = match gap {
            Some(gap) if gap <= max => max,
            _ => Duration::ZERO,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_only_while_commands_come_soon() {
        let mut spin = Spin::default();
        assert_eq!(spin.budget(), Duration::ZERO, "a fresh driver blocks");
        for max in [SPIN_MAX, SPIN_MAX_ALONE] {
            spin.record(Some(Duration::from_micros(120)), max);
            assert_eq!(spin.budget(), max);
            spin.record(Some(max), max);
            assert_eq!(spin.budget(), max, "the bound itself still counts");
            spin.record(Some(max + Duration::from_micros(1)), max);
            assert_eq!(spin.budget(), Duration::ZERO, "a late command: block");
            spin.record(Some(Duration::ZERO), max);
            assert_eq!(spin.budget(), max);
            spin.record(None, max);
            assert_eq!(spin.budget(), Duration::ZERO, "a timer: block");
        }
        assert_eq!(bound(true), SPIN_MAX);
        assert_eq!(bound(false), SPIN_MAX_ALONE);
        spin.record(Some(SPIN_MAX + Duration::from_micros(1)), bound(false));
        assert_eq!(spin.budget(), SPIN_MAX_ALONE, "a member alone waits longer");
    }
}
