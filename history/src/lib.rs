//! Checking what clients saw of an etcd-compatible store: a recorded
//! history of KV operations ([`mod@check`]) and of watches ([`mod@watch`]) against
//! a model of etcd's MVCC ([`model`]).
//!
//! Design. The checker is pure and knows nothing of how a history was
//! made: the node simulator in `core`'s tests and the process tests in
//! `tests/` both record [`Operation`]s (request, answer or the lack of
//! one, invoke and completion times) and [`Watch`]es, and hand them here.
//! Linearizability is decided with etcd's own revision numbers, which
//! order every change, so the search is over the writes whose outcome is
//! unknown only (see [`mod@check`]). A violation names the operation, the
//! revision and what differed.

pub mod check;
pub mod excerpt;
pub mod model;
pub mod traffic;
pub mod watch;

pub use check::{check, check_with_watches, Operation, Outcome, Time, Violation};
pub use excerpt::excerpt;
pub use model::{Model, Request, Response};
pub use watch::{check_watch, Watch, WatchViolation};

#[cfg(test)]
mod tests;
