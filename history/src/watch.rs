//! What a watch promises, checked against the model a linearizable
//! history led to ([`crate::check()`]).
//!
//! Design. A watch on `[key, range_end)` from revision `start` must
//! deliver exactly the model's events on that range from `start` on, in
//! revision order, each once (ordered, unique, reliable, resumable); all
//! events of one revision in one response (atomic); with `prev_kv`, the
//! key's value before the event; a progress notification at revision R
//! only once every event up to R was delivered; and a watch cancelled by a
//! compaction says which revision it was compacted at, one above the
//! revision it was owed next. The responses of one watch are checked in
//! the order they arrived. An event at a compaction revision may come
//! without `prev_kv`: etcd reads the version before it, which is
//! compacted.
//!
//! A watch may end anywhere: its member crashed, or the client stopped
//! reading. What it delivered must then be an exact prefix of what it
//! owed, nothing more is asked of it; a progress notification is what
//! makes it answer for every event up to its revision, so a client that
//! wants a watch checked as complete asks for one last. A watch the
//! client resumes after its last event is a new [`Watch`] from the
//! revision after it, checked the same way, so the two together are
//! exact. The checked watches are never cancelled by their client: a
//! cancellation is either a compaction's (with `compact_revision`) or a
//! refusal (with a `cancel_reason`).

use oxetcd_proto::etcdserverpb::WatchResponse;
use oxetcd_proto::mvccpb::Event;

use crate::model::Model;

/// One watch as a client saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Watch {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    /// The revision asked for (0: from the revision after the one the
    /// creation answered).
    pub start_revision: i64,
    pub prev_kv: bool,
    /// Every response after the creation, in arrival order.
    pub responses: Vec<WatchResponse>,
    /// The creation's header revision.
    pub created_revision: i64,
}

/// Why a watch broke a promise.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchViolation {
    /// Which response (index into [`Watch::responses`]).
    pub response: usize,
    pub what: String,
}

impl std::fmt::Display for WatchViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "response {}: {}", self.response, self.what)
    }
}

fn revision_of(event: &Event) -> i64 {
    event.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

/// Checks `watch` against `model`.
pub fn check_watch(watch: &Watch, model: &Model) -> Result<(), WatchViolation> {
    let start = if watch.start_revision > 0 {
        watch.start_revision
    } else {
        watch.created_revision + 1
    };
    let fail = |response: usize, what: String| Err(WatchViolation { response, what });
    // Everything the watch should see, up to what the model knows.
    let expected = model.events_in(&watch.key, &watch.range_end, start, model.revision());
    let mut delivered = 0usize;
    let mut last = start - 1;
    for (i, response) in watch.responses.iter().enumerate() {
        if response.canceled {
            // Justified only if the next revision it owed is compacted
            // (etcd keeps the compaction revision itself).
            let next = last + 1;
            if response.compact_revision == 0 && response.cancel_reason.is_empty() {
                return fail(
                    i,
                    format!("cancelled without compact_revision or reason, revision {next} owed"),
                );
            }
            if response.compact_revision > model.revision() {
                return fail(
                    i,
                    format!(
                        "cancelled for compaction at {}, past the last revision {}",
                        response.compact_revision,
                        model.revision()
                    ),
                );
            }
            if response.compact_revision > 0 && response.compact_revision <= next {
                return fail(
                    i,
                    format!(
                        "cancelled for compaction at {} while revision {next} is kept",
                        response.compact_revision
                    ),
                );
            }
            return if i + 1 == watch.responses.len() {
                Ok(())
            } else {
                fail(i, "responses after the cancellation".into())
            };
        }
        if response.events.is_empty() {
            // A progress notification: nothing at or below its revision
            // may still be owed.
            let at = response.header.as_ref().map_or(0, |h| h.revision);
            let owed = expected[delivered..]
                .iter()
                .take_while(|e| revision_of(e) <= at)
                .count();
            if owed > 0 {
                return fail(
                    i,
                    format!("progress at revision {at} with {owed} events up to it undelivered"),
                );
            }
            continue;
        }
        let first = revision_of(&response.events[0]);
        if first <= last {
            return fail(
                i,
                format!("revision {first} after revision {last} was delivered"),
            );
        }
        for event in &response.events {
            let revision = revision_of(event);
            let Some(want) = expected.get(delivered) else {
                return fail(
                    i,
                    format!("an event at revision {revision} the history has not"),
                );
            };
            let mut got = event.clone();
            if !watch.prev_kv {
                got.prev_kv = None;
            }
            let mut want = want.clone();
            // Without `prev_kv` asked, or at a compaction revision, where
            // the version before is compacted (see
            // [`Model::may_have_compacted_at`]), none is owed.
            let prev_compacted = got.prev_kv.is_none() && model.may_have_compacted_at(revision);
            if !watch.prev_kv || prev_compacted {
                want.prev_kv = None;
            }
            if got != want {
                return fail(
                    i,
                    format!("delivered {got:?} where the history has {want:?}"),
                );
            }
            delivered += 1;
            last = revision;
        }
        // Atomic: the revision this response ends with is whole in it.
        if let Some(next) = expected.get(delivered) {
            if revision_of(next) == last {
                return fail(
                    i,
                    format!("the events of revision {last} are split across responses"),
                );
            }
        }
    }
    Ok(())
}
