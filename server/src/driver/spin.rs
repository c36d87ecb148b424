//! How long the driver polls its channel before it blocks on it.
//!
//! Design. Blocking on the channel costs the sender a futex wake, and the
//! driver a sleep and a wake-up on a core that went idle: on a virtual
//! machine that is an inter-processor interrupt, tens of microseconds of a
//! single client's put whose whole round trip is a few hundred. So while
//! commands keep coming soon after the driver starts to wait, it polls the
//! channel for up to [`SPIN_MAX`] first, yielding its core to any other
//! runnable thread between polls, and only then blocks. [`Spin`] decides
//! from the last wait alone:
//! - a command that came within [`SPIN_MAX`] of the wait's start makes the
//!   next wait poll first;
//! - a command that came later, or a wait that ended at a timer, makes the
//!   next wait block at once.
//!
//! So an idle node never polls, a node under load rarely waits at all, and
//! a burst's end costs one wait of at most [`SPIN_MAX`]. Each command the
//! driver receives leads to at most one such poll, and the node's timers
//! cut it short (the caller caps it at the next deadline).

use std::time::Duration;

/// The longest the driver polls before blocking: longer than a single
/// client's turn on loopback (the answer goes out, the next request comes
/// in: about 150 µs), far shorter than a raft tick.
pub(super) const SPIN_MAX: Duration = Duration::from_micros(250);

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
    /// (`None`: a timer was due).
    pub(super) fn record(&mut self, gap: Option<Duration>) {
        self.budget = match gap {
            Some(gap) if gap <= SPIN_MAX => SPIN_MAX,
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
        spin.record(Some(Duration::from_micros(120)));
        assert_eq!(spin.budget(), SPIN_MAX);
        spin.record(Some(SPIN_MAX));
        assert_eq!(spin.budget(), SPIN_MAX, "the bound itself still counts");
        spin.record(Some(SPIN_MAX + Duration::from_micros(1)));
        assert_eq!(spin.budget(), Duration::ZERO, "a late command: block");
        spin.record(Some(Duration::ZERO));
        assert_eq!(spin.budget(), SPIN_MAX);
        spin.record(None);
        assert_eq!(spin.budget(), Duration::ZERO, "a timer: block");
    }
}
