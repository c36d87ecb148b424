//! When the backend's next commit must be durable: at least every
//! [`DURABLE_INTERVAL`] or [`DURABLE_EVERY_COMMITS`] commits (see the
//! parent module's durability note).

use std::time::Instant;

use super::{DURABLE_EVERY_COMMITS, DURABLE_INTERVAL};

/// When the next backend commit must be durable.
#[derive(Debug)]
pub(super) struct DurableCadence {
    last_durable: Instant,
    commits_since_durable: u32,
}

impl DurableCadence {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            last_durable: now,
            commits_since_durable: 0,
        }
    }

    pub(super) fn is_due(&self, now: Instant) -> bool {
        self.commits_since_durable + 1 >= DURABLE_EVERY_COMMITS
            || now.saturating_duration_since(self.last_durable) >= DURABLE_INTERVAL
    }

    pub(super) fn record(&mut self, durable: bool, now: Instant) {
        if durable {
            self.last_durable = now;
            self.commits_since_durable = 0;
        } else {
            self.commits_since_durable += 1;
        }
    }
}
