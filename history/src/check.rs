//! Linearizability of a KV history, decided with etcd's revisions.
//!
//! Design. etcd numbers every change of its key space: a write that
//! changed something answers the revision it made, unique and one more
//! than the last. So the order of the writes is read off their answers,
//! not searched for, and the check is a replay:
//!
//! 1. The writes whose answers show a change are placed at their
//!    revisions; two at one revision, or a revision below the start, is a
//!    violation at once.
//! 2. The model replays revisions in order. At a revision held by a known
//!    write, its answer must be the model's; at a revision nobody answered
//!    for (a gap), one of the writes whose outcome is unknown (a timeout, a
//!    lost connection) must have made it: each candidate is tried, with
//!    backtracking, under a bound on the steps.
//! 3. Every answer that did not change anything (reads, deletes of
//!    nothing, txns that wrote nothing, compactions) is checked against
//!    the model at its header revision once the replay has passed it. A
//!    compaction changes no key but moves the compacted revision, which
//!    decides later answers (a read below it, a compaction at or below it
//!    is refused): at one revision the other answers are checked first,
//!    then the compactions in ascending order, the one order in which all
//!    of them can have succeeded. A compaction without an answer changes
//!    no revision, so it never fills a gap; the model leaves it out.
//!    Real time orders what one revision cannot: a linearizable read sent
//!    after a compaction was answered must be refused below it.
//!    What the answers showed of a revision (a key's value written there,
//!    a key created there) narrows the candidates, and so do watches, when
//!    they are given ([`check_with_watches`]): the events they delivered,
//!    and the revisions they answered for without an event, at which
//!    nothing on their range changed. The gap is filled with the write the
//!    server made, not merely one that fits the answers, so the model can
//!    be held against those watches after.
//! 4. Real time: an operation must not see an older revision than one an
//!    operation completed before it started saw; a write that changed
//!    something must come strictly after. Serializable reads may be stale
//!    and are exempt from this rule only.
//! 5. Leases. A grant is checked like a compaction: it changes no key,
//!    makes no revision, and its lease exists from its header revision on
//!    (grants first at one revision, revokes after the other answers). A
//!    grant without an answer may have happened, so its lease exists from
//!    the start. A revoke's answer does not say whether it deleted keys:
//!    one answered at revision `r` either made `r` (it is tried first
//!    where `r` is a gap) or found no key attached once `r` was made (it
//!    is then checked as an answer that changed nothing). Revokes without
//!    an answer, the leader's expiries among them, are unknown writes.
//!
//! A violation names the operation, the revision and what differed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use oxetcd_proto::etcdserverpb::{response_op, RangeResponse, ResponseOp};
use oxetcd_proto::mvccpb::event::EventType;

use crate::model::{in_range, Model, Request, Response};
use crate::watch::Watch;

/// A time in any unit, the same for every operation of a history.
pub type Time = u64;

/// How an operation ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Answered.
    Ok(Response),
    /// Refused: it certainly changed nothing.
    Failed,
    /// No answer (a timeout, a lost connection): it may have been applied.
    Unknown,
}

impl Outcome {
    /// How `request` ended, from its answer: a refused read changed
    /// nothing (`Failed`); a refused write may still have been applied (a
    /// leader change, a timeout, a lost connection), so its outcome is
    /// `Unknown`.
    pub fn of<E>(request: &Request, answer: Result<Response, E>) -> Self {
        match answer {
            Ok(response) => Self::Ok(response),
            Err(_) if matches!(request, Request::Range(_)) => Self::Failed,
            Err(_) => Self::Unknown,
        }
    }
}

/// One client operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    pub client: u32,
    pub invoke: Time,
    /// When the answer came; `None` without one.
    pub complete: Option<Time>,
    pub request: Request,
    pub outcome: Outcome,
}

/// Why a history is not linearizable, or could not be decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// The operation at fault, as an index into the history.
    pub operation: Option<usize>,
    pub revision: i64,
    pub what: String,
    /// Not a violation found: the search over the writes of unknown
    /// outcome ran out of its step bound ([`STEPS_MAX`]) first.
    pub undecided: bool,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.operation {
            Some(op) => write!(
                f,
                "operation {op} at revision {}: {}",
                self.revision, self.what
            ),
            None => write!(f, "revision {}: {}", self.revision, self.what),
        }
    }
}

/// Replay steps at most before the check gives up undecided.
pub const STEPS_MAX: u64 = 200_000;

/// Checks `history`, run against a key space that was empty at
/// `start_revision`. Answers the model the history leads to.
pub fn check(history: &[Operation], start_revision: i64) -> Result<Model, Violation> {
    check_with_watches(history, &[], start_revision)
}

/// [`check`], with what `watches` delivered as observations of the
/// revisions too (see the module doc); the watches themselves are checked
/// against the model with [`crate::check_watch`].
pub fn check_with_watches(
    history: &[Operation],
    watches: &[Watch],
    start_revision: i64,
) -> Result<Model, Violation> {
    check_real_time(history)?;
    check_compacted_reads(history)?;
    let plan = Plan::new(history, watches, start_revision)?;
    let mut start = Model::new(start_revision);
    for op in history {
        if let (Request::LeaseGrant(r), Outcome::Unknown | Outcome::Failed) =
            (&op.request, &op.outcome)
        {
            start.note_possible_lease(r.id);
        }
    }
    let mut search = Search {
        history,
        plan: &plan,
        steps: 0,
        best: None,
        dead_ends: HashSet::new(),
    };
    let mut used = vec![false; history.len()];
    match search.replay(start, start_revision + 1, &mut used) {
        Some(mut model) => {
            for op in history {
                if let (Request::Compaction(r), Outcome::Unknown) = (&op.request, &op.outcome) {
                    model.note_possible_compaction(r.revision);
                }
            }
            Ok(model)
        }
        None => Err(search.best.unwrap_or(Violation {
            operation: None,
            revision: start_revision,
            what: "no order of the unknown writes explains the history".into(),
            undecided: false,
        })),
    }
}

fn violation(operation: usize, revision: i64, what: impl Into<String>) -> Violation {
    Violation {
        operation: Some(operation),
        revision,
        what: what.into(),
        undecided: false,
    }
}

/// The known writes by revision, and the other answers by the revision
/// at which they are checked.
struct Plan {
    writes: BTreeMap<i64, usize>,
    checks: BTreeMap<i64, Vec<usize>>,
    /// Answered revokes by their header revision: each made that
    /// revision, or changed nothing (see the module doc).
    revokes: BTreeMap<i64, Vec<usize>>,
    unknown: Vec<usize>,
    /// The last revision anything answered.
    last: i64,
    /// Per operation: the highest revision answered by an operation that
    /// completed before it was invoked.
    floor: Vec<i64>,
    /// Answered operations as (revision, completion), by revision: a write
    /// that made revision `r` was sent before any answer at `r` or later
    /// came back.
    answered: Vec<(i64, Time)>,
    /// What the answers showed of each revision: a key written at it
    /// (with its value, when the answer showed that version), or created
    /// at it. A write filling that revision must have done so.
    observed: HashMap<i64, Vec<Seen>>,
}

impl Plan {
    /// The earliest completion of an answer at `revision` or later.
    fn ceiling(&self, revision: i64) -> Option<Time> {
        let at = self.answered.partition_point(|(r, _)| *r < revision);
        self.answered.get(at).map(|(_, time)| *time)
    }

    fn new(history: &[Operation], watches: &[Watch], start: i64) -> Result<Self, Violation> {
        let mut writes = BTreeMap::new();
        let mut checks: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        let mut revokes: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        let mut unknown = Vec::new();
        let mut last = start;
        for (i, op) in history.iter().enumerate() {
            match &op.outcome {
                Outcome::Ok(response) => {
                    let revision = response.revision();
                    last = last.max(revision);
                    if response.changed() {
                        if revision <= start {
                            return Err(violation(i, revision, "a change at or below the start"));
                        }
                        if let Some(other) = writes.insert(revision, i) {
                            return Err(violation(
                                i,
                                revision,
                                format!("the same revision as operation {other}"),
                            ));
                        }
                    } else {
                        checks.entry(revision).or_default().push(i);
                        if matches!(op.request, Request::LeaseRevoke(_)) {
                            revokes.entry(revision).or_default().push(i);
                        }
                    }
                }
                Outcome::Unknown
                    if !matches!(
                        op.request,
                        Request::Range(_) | Request::Compaction(_) | Request::LeaseGrant(_)
                    ) =>
                {
                    unknown.push(i)
                }
                _ => {}
            }
        }
        // Grants first at each revision, revokes after the other answers,
        // compactions last, in ascending order (see the module doc); the
        // sort is stable, the rest keep history order.
        for list in checks.values_mut() {
            list.sort_by_key(|&i| match &history[i].request {
                Request::LeaseGrant(_) => (0, 0),
                Request::LeaseRevoke(_) => (2, 0),
                Request::Compaction(r) => (3, r.revision),
                _ => (1, 0),
            });
        }
        let mut observed: HashMap<i64, Vec<Seen>> = HashMap::new();
        for op in history {
            if let Outcome::Ok(response) = &op.outcome {
                for kv in shown(response) {
                    let written = Seen::Written {
                        key: kv.key.clone(),
                        value: kv.value.clone(),
                    };
                    observed.entry(kv.mod_revision).or_default().push(written);
                    let created = Seen::Created {
                        key: kv.key.clone(),
                    };
                    observed
                        .entry(kv.create_revision)
                        .or_default()
                        .push(created);
                }
            }
        }
        let events = watches
            .iter()
            .flat_map(|w| &w.responses)
            .flat_map(|r| &r.events);
        for event in events {
            let Some(kv) = &event.kv else {
                continue;
            };
            let seen = if event.r#type == EventType::Delete as i32 {
                Seen::Deleted {
                    key: kv.key.clone(),
                }
            } else {
                observed
                    .entry(kv.create_revision)
                    .or_default()
                    .push(Seen::Created {
                        key: kv.key.clone(),
                    });
                Seen::Written {
                    key: kv.key.clone(),
                    value: kv.value.clone(),
                }
            };
            observed.entry(kv.mod_revision).or_default().push(seen);
            if let Some(prev) = &event.prev_kv {
                observed
                    .entry(prev.mod_revision)
                    .or_default()
                    .push(Seen::Written {
                        key: prev.key.clone(),
                        value: prev.value.clone(),
                    });
            }
        }
        for watch in watches {
            for revision in silent_revisions(watch) {
                observed.entry(revision).or_default().push(Seen::Untouched {
                    key: watch.key.clone(),
                    range_end: watch.range_end.clone(),
                });
            }
        }
        let mut answered: Vec<(i64, Time)> = history
            .iter()
            .filter_map(|op| match (&op.outcome, op.complete) {
                (Outcome::Ok(r), Some(at)) => Some((r.revision(), at)),
                _ => None,
            })
            .collect();
        answered.sort_unstable();
        // Suffix minimum of completion times: answered[i].1 becomes the
        // earliest completion among answers at answered[i].0 or later.
        for i in (0..answered.len().saturating_sub(1)).rev() {
            answered[i].1 = answered[i].1.min(answered[i + 1].1);
        }
        Ok(Self {
            writes,
            checks,
            revokes,
            unknown,
            last,
            floor: floors(history),
            answered,
            observed,
        })
    }
}

/// For each operation, the highest revision answered by any operation
/// that completed before it was invoked.
fn floors(history: &[Operation]) -> Vec<i64> {
    let mut completed: Vec<(Time, i64)> = history
        .iter()
        .filter_map(|op| match (&op.outcome, op.complete) {
            (Outcome::Ok(r), Some(at)) => Some((at, r.revision())),
            _ => None,
        })
        .collect();
    completed.sort_unstable();
    let mut best = Vec::with_capacity(completed.len());
    let mut max = 0;
    for (_, revision) in &completed {
        max = max.max(*revision);
        best.push(max);
    }
    history
        .iter()
        .map(|op| {
            let before = completed.partition_point(|(at, _)| *at < op.invoke);
            before.checked_sub(1).map_or(0, |i| best[i])
        })
        .collect()
}

/// Real time against revisions, for the answered operations.
fn check_real_time(history: &[Operation]) -> Result<(), Violation> {
    let floor = floors(history);
    for (i, op) in history.iter().enumerate() {
        let Outcome::Ok(response) = &op.outcome else {
            continue;
        };
        let revision = response.revision();
        let stale_allowed = matches!(&op.request, Request::Range(r) if r.serializable);
        if stale_allowed {
            continue;
        }
        if response.changed() && revision <= floor[i] {
            return Err(violation(
                i,
                revision,
                format!(
                    "a write made revision {revision} after revision {} was seen",
                    floor[i]
                ),
            ));
        }
        if revision < floor[i] {
            return Err(violation(
                i,
                revision,
                format!(
                    "answered at revision {revision} after revision {} was seen",
                    floor[i]
                ),
            ));
        }
    }
    Ok(())
}

/// Real time against compactions: a linearizable read at a revision
/// below a compaction answered before the read was sent must have been
/// refused (a serializable one may be served by a member that has not
/// applied the compaction yet).
fn check_compacted_reads(history: &[Operation]) -> Result<(), Violation> {
    let compactions: Vec<(Time, i64)> = history
        .iter()
        .filter_map(|op| match (&op.request, &op.outcome, op.complete) {
            (Request::Compaction(r), Outcome::Ok(_), Some(at)) => Some((at, r.revision)),
            _ => None,
        })
        .collect();
    if compactions.is_empty() {
        return Ok(());
    }
    for (i, op) in history.iter().enumerate() {
        let (Request::Range(read), Outcome::Ok(response)) = (&op.request, &op.outcome) else {
            continue;
        };
        if read.revision <= 0 || read.serializable {
            continue;
        }
        let compacted = compactions
            .iter()
            .filter(|(at, _)| *at < op.invoke)
            .map(|(_, revision)| *revision)
            .max();
        if let Some(compacted) = compacted.filter(|c| read.revision < *c) {
            return Err(violation(
                i,
                response.revision(),
                format!(
                    "read revision {} after a compaction at {compacted} was answered",
                    read.revision
                ),
            ));
        }
    }
    Ok(())
}

struct Search<'a> {
    history: &'a [Operation],
    plan: &'a Plan,
    steps: u64,
    /// The violation found furthest into the replay, for the report.
    best: Option<Violation>,
    /// Gaps already tried in vain: (revision, which unknown writes were
    /// used, the model's state). The same situation reached by another
    /// order of the same writes fails the same way, so it is not tried
    /// again; without this the search is exponential in the unknowns.
    dead_ends: HashSet<(i64, u64, u64)>,
}

impl Search<'_> {
    fn fail(&mut self, v: Violation) -> Option<Model> {
        if self.steps <= STEPS_MAX && self.best.as_ref().is_none_or(|b| v.revision >= b.revision) {
            self.best = Some(v);
        }
        None
    }

    /// Replays from `revision` on; `model` is at `revision - 1`.
    fn replay(&mut self, mut model: Model, revision: i64, used: &mut [bool]) -> Option<Model> {
        let mut revision = revision;
        loop {
            self.steps += 1;
            if self.steps > STEPS_MAX {
                // Reported as it is, not as the furthest violation seen.
                self.best = Some(Violation {
                    operation: None,
                    revision,
                    what: format!("undecided after {STEPS_MAX} steps"),
                    undecided: true,
                });
                return None;
            }
            if let Err(v) = self.check_answers_at(&mut model, revision - 1, used) {
                return self.fail(v);
            }
            if revision > self.plan.last {
                return Some(model);
            }
            match self.plan.writes.get(&revision) {
                Some(&i) => {
                    let Outcome::Ok(answered) = &self.history[i].outcome else {
                        return None;
                    };
                    let applied = model.apply(&self.history[i].request);
                    if !applied.changed || !same_answer(&applied.response, answered) {
                        return self.fail(violation(
                            i,
                            revision,
                            format!(
                                "answered {answered:?}, the model answers {:?}",
                                applied.response
                            ),
                        ));
                    }
                }
                None => return self.fill_gap(model, revision, used),
            }
            revision += 1;
        }
    }

    /// Tries each revoke answered at the gap `revision`, then each unused
    /// unknown write.
    fn fill_gap(&mut self, model: Model, revision: i64, used: &mut [bool]) -> Option<Model> {
        let situation = (revision, digest_used(used), model.digest());
        if self.dead_ends.contains(&situation) {
            return None;
        }
        let answered: &[usize] = self.plan.revokes.get(&revision).map_or(&[], Vec::as_slice);
        let candidates: Vec<usize> = answered.iter().chain(&self.plan.unknown).copied().collect();
        for (k, &i) in candidates.iter().enumerate() {
            if used[i] {
                continue;
            }
            let unknown = k >= answered.len();
            // It cannot have made a revision below one that was seen before
            // it was sent.
            if unknown && revision <= self.plan.floor[i] {
                continue;
            }
            // Nor one after an answer showed this revision had happened.
            if unknown
                && self
                    .plan
                    .ceiling(revision)
                    .is_some_and(|ceiling| self.history[i].invoke > ceiling)
            {
                continue;
            }
            let mut tried = model.clone();
            if !tried.apply(&self.history[i].request).changed {
                continue;
            }
            // What was seen of this revision, it must have done.
            let seen = self.plan.observed.get(&revision).into_iter().flatten();
            let fits = seen.into_iter().all(|seen| seen.holds(&tried, revision));
            if !fits {
                continue;
            }
            used[i] = true;
            if let Some(done) = self.replay(tried, revision + 1, used) {
                return Some(done);
            }
            used[i] = false;
        }
        self.dead_ends.insert(situation);
        self.fail(Violation {
            operation: None,
            revision,
            what: "nothing answered for this revision, and no unknown write fits it".into(),
            undecided: false,
        })
    }

    /// The answers that changed nothing, at `revision`, against the model
    /// now that it is there (a revoke that made `revision` excepted). The
    /// model is left as it was unless an answer is wrong (a write the
    /// model says changes something), but for grants, revokes and
    /// compactions, which change it without a revision.
    fn check_answers_at(
        &self,
        model: &mut Model,
        revision: i64,
        used: &[bool],
    ) -> Result<(), Violation> {
        for &i in self.plan.checks.get(&revision).into_iter().flatten() {
            if used[i] {
                continue;
            }
            let op = &self.history[i];
            let Outcome::Ok(answered) = &op.outcome else {
                continue;
            };
            if let Some(refusal) = model.refusal(&op.request) {
                return Err(violation(
                    i,
                    revision,
                    format!("answered {answered:?}, etcd refuses it: {refusal:?}"),
                ));
            }
            let expected = model.apply(&op.request);
            if expected.changed {
                let what = match &op.request {
                    Request::LeaseRevoke(r) => format!(
                        "revoke of lease {:x} answered at {revision}, when keys were still \
                         attached to it",
                        r.id
                    ),
                    _ => "answered as if nothing changed, the model changes something".into(),
                };
                return Err(violation(i, revision, what));
            }
            if !same_answer(&expected.response, answered) {
                return Err(violation(
                    i,
                    revision,
                    format!(
                        "answered {answered:?}, the model answers {:?}",
                        expected.response
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Something an answer showed of one revision.
enum Seen {
    /// `key` was written at the revision, holding `value`.
    Written { key: Vec<u8>, value: Vec<u8> },
    /// `key` was created at the revision.
    Created { key: Vec<u8> },
    /// `key` was deleted at the revision.
    Deleted { key: Vec<u8> },
    /// Nothing in `[key, range_end)` changed at the revision: a watch on
    /// that range answered for it without an event there.
    Untouched { key: Vec<u8>, range_end: Vec<u8> },
}

impl Seen {
    fn holds(&self, model: &Model, revision: i64) -> bool {
        match self {
            Self::Written { key, value } => model
                .get_at(key, revision)
                .is_some_and(|kv| kv.mod_revision == revision && &kv.value == value),
            Self::Created { key } => model
                .get_at(key, revision)
                .is_some_and(|kv| kv.create_revision == revision),
            Self::Deleted { key } => {
                model.get_at(key, revision).is_none() && model.get_at(key, revision - 1).is_some()
            }
            Self::Untouched { key, range_end } => !model.events_at(revision).iter().any(|e| {
                e.kv.as_ref()
                    .is_some_and(|kv| in_range(&kv.key, key, range_end))
            }),
        }
    }
}

/// The revisions a watch answered for without an event: every event on
/// its range up to the last one it delivered, or up to a progress
/// notification's revision, must have been delivered ([`crate::check_watch`]
/// holds it to that), so at these revisions nothing on its range changed.
fn silent_revisions(watch: &Watch) -> impl Iterator<Item = i64> {
    let start = if watch.start_revision > 0 {
        watch.start_revision
    } else {
        watch.created_revision + 1
    };
    let mut upto = start - 1;
    let mut with_events = HashSet::new();
    for response in watch.responses.iter().take_while(|r| !r.canceled) {
        if response.events.is_empty() {
            upto = upto.max(response.header.as_ref().map_or(0, |h| h.revision));
        }
        for event in &response.events {
            let revision = event.kv.as_ref().map_or(0, |kv| kv.mod_revision);
            with_events.insert(revision);
            upto = upto.max(revision);
        }
    }
    (start..=upto).filter(move |revision| !with_events.contains(revision))
}

/// The stored values an answer shows (reads, previous values), with
/// their mod revisions.
fn shown(response: &Response) -> Vec<&oxetcd_proto::mvccpb::KeyValue> {
    fn ops<'a>(list: &'a [ResponseOp], out: &mut Vec<&'a oxetcd_proto::mvccpb::KeyValue>) {
        for op in list {
            match &op.response {
                Some(response_op::Response::ResponseRange(r)) => out.extend(&r.kvs),
                Some(response_op::Response::ResponsePut(r)) => out.extend(&r.prev_kv),
                Some(response_op::Response::ResponseDeleteRange(r)) => out.extend(&r.prev_kvs),
                Some(response_op::Response::ResponseTxn(t)) => ops(&t.responses, out),
                None => {}
            }
        }
    }
    let mut out = Vec::new();
    match response {
        // A keys-only read shows no value: not an observation of one.
        Response::Range(r) => out.extend(r.kvs.iter().filter(|kv| !kv.value.is_empty())),
        Response::Put(r) => out.extend(&r.prev_kv),
        Response::DeleteRange(r) => out.extend(&r.prev_kvs),
        Response::Txn(t) => ops(&t.responses, &mut out),
        Response::Compaction(_) | Response::LeaseGrant(_) | Response::LeaseRevoke(_) => {}
    }
    out
}

fn digest_used(used: &[bool]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for (i, _) in used.iter().enumerate().filter(|(_, u)| **u) {
        i.hash(&mut hasher);
    }
    hasher.finish()
}

/// An answer against the model's: what etcd promises of it (the header
/// revision, the keys read, previous values, deleted counts, the branch
/// taken, the reads inside a txn), not its member or raft fields.
fn same_answer(model: &Response, answered: &Response) -> bool {
    if model.revision() != answered.revision() {
        return false;
    }
    match (model, answered) {
        (Response::Range(m), Response::Range(a)) => same_range(m, a),
        (Response::Put(m), Response::Put(a)) => m.prev_kv == a.prev_kv,
        (Response::DeleteRange(m), Response::DeleteRange(a)) => {
            m.deleted == a.deleted && m.prev_kvs == a.prev_kvs
        }
        (Response::Txn(m), Response::Txn(a)) => {
            m.succeeded == a.succeeded && same_ops(&m.responses, &a.responses)
        }
        (Response::Compaction(_), Response::Compaction(_)) => true,
        // The granted TTL is the server's (raised to its minimum).
        (Response::LeaseGrant(m), Response::LeaseGrant(a)) => m.id == a.id,
        (Response::LeaseRevoke(_), Response::LeaseRevoke(_)) => true,
        _ => false,
    }
}

fn same_range(model: &RangeResponse, answered: &RangeResponse) -> bool {
    if model.count != answered.count || model.more != answered.more {
        return false;
    }
    // Sorted requests are answered by the model in key order: compare as
    // sets keyed by key.
    let by_key = |kvs: &[oxetcd_proto::mvccpb::KeyValue]| {
        kvs.iter()
            .map(|kv| (kv.key.clone(), kv.clone()))
            .collect::<HashMap<_, _>>()
    };
    model.kvs == answered.kvs || by_key(&model.kvs) == by_key(&answered.kvs)
}

fn same_ops(model: &[ResponseOp], answered: &[ResponseOp]) -> bool {
    model.len() == answered.len()
        && model
            .iter()
            .zip(answered)
            .all(|(m, a)| match (&m.response, &a.response) {
                (
                    Some(response_op::Response::ResponseRange(m)),
                    Some(response_op::Response::ResponseRange(a)),
                ) => same_range(m, a),
                (
                    Some(response_op::Response::ResponsePut(m)),
                    Some(response_op::Response::ResponsePut(a)),
                ) => m.prev_kv == a.prev_kv,
                (
                    Some(response_op::Response::ResponseDeleteRange(m)),
                    Some(response_op::Response::ResponseDeleteRange(a)),
                ) => m.deleted == a.deleted && m.prev_kvs == a.prev_kvs,
                (
                    Some(response_op::Response::ResponseTxn(m)),
                    Some(response_op::Response::ResponseTxn(a)),
                ) => m.succeeded == a.succeeded && same_ops(&m.responses, &a.responses),
                (None, None) => true,
                _ => false,
            })
}
