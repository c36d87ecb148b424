//! The node simulator: whole nodes (raft, MVCC, watch, leases,
//! membership) in the in-process cluster of `cluster_tests`, driven by a
//! seed. Clients send puts, linearizable and serializable reads, reads at
//! past revisions, compare-and-sets on mod revisions, Kubernetes' creates
//! if absent and deletes if unchanged, informers (a list, then a watch
//! from its revision + 1), deletes and
//! compactions (at a drawn revision: some already compacted, some in the
//! future, which the node refuses) to random members without waiting;
//! they grant leases, attach keys to them, revoke them and keep them alive
//! (`sim_leases`; members checkpoint leases every second); watchers
//! watch members from now or from a past revision (`sim_watches`); faults
//! come and go (a member cut off from the others, a member crashed and
//! restarted with only what it persisted, its watchers ended and some
//! resumed elsewhere; the leader asked to hand over to another member;
//! members removed, the leader among them, and fresh ones added as voters
//! or as learners promoted later, between two and five members, the
//! operator learning from the member list what its changes did
//! (`sim_members`); a value of 16 KiB now and then; the log compacted
//! every few entries, so members fall behind into snapshots (new members
//! start from one); a crash drops the backend's
//! commits since its last durable one, and the node replays them from
//! the log); virtual time moves on in random steps, now and then
//! by seconds, so leases expire. Every answer is recorded with its virtual
//! times, a request that never got one as unknown, each lease's possible
//! expiry as a revoke nobody answered, and the history is checked by
//! `oxetcd-history`; then every watch is checked against the model the
//! history led to. Each run ends healed: the members added are started
//! and the removed ones stopped, leases that got no keep-alive must be
//! gone within their bound, the rest are revoked, a final put follows,
//! and every member must then hold the same member list and raft
//! configuration, the same key space at the same revision, with the same
//! `HashKV` (`sim_hash`), and no key attached to a lease its member no
//! longer holds. The tests print how many membership changes the runs
//! applied.
//!
//! A failure prints its seed and an excerpt of the history (what can
//! explain the violation, `oxetcd_history::excerpt`; `SIM_FULL_HISTORY=1`
//! prints all of it); `SIM_SEED=n` replays one seed, `SIM_SEEDS` sets how
//! many run (default [`SEEDS_DEFAULT`], split over [`PARTS`] tests, each
//! bounded by [`SIM_TIME_MAX`]). A run the checker cannot decide within its
//! search bound (many writes of unknown outcome) is counted and listed, not
//! passed: more than 1% of them fails the test.

use std::collections::BTreeMap;
use std::time::{Duration, Instant as WallClock};

use oxetcd_history::{
    check_with_watches, traffic, Operation, Outcome, Request as HRequest, Response as HResponse,
};
use oxetcd_proto::etcdserverpb::{CompactionRequest, MoveLeaderRequest, PutRequest, RangeRequest};

use super::cluster_tests::Cluster;
use super::sim_hash::hash_kv;
use super::sim_leases::{check_attached, Leases, CHECKPOINT_INTERVAL};
use super::sim_members::Membership;
use super::sim_watches::Watchers;
use super::*;

/// Seeds per CI run unless `SIM_SEEDS` says otherwise.
const SEEDS_DEFAULT: u64 = 10_000;
/// The tests the seeds are split over.
const PARTS: u64 = 4;
/// Wall time one part's seeds may take.
const SIM_TIME_MAX: Duration = Duration::from_secs(240);
/// Applied entries between two log compactions, and entries kept
/// behind the applied index: small, so snapshots are sent within a run.
const SNAPSHOT_COUNT: u64 = 12;
const SNAPSHOT_CATCH_UP_ENTRIES: u64 = 3;
/// Steps of one run: each sends a request, opens a watcher, changes a
/// fault or moves time.
const STEPS: usize = 120;
/// One time step in this many moves time by seconds rather than
/// milliseconds, so leases expire within a run.
const LONG_STEP_ONE_IN: u64 = 6;
pub(super) const KEYS: u64 = 3;
/// How long the healed cluster may take to answer what is still pending.
pub(super) const DRAIN_TIME: Duration = Duration::from_secs(30);
/// Rounds of catching up and reading the member list at the end of a run
/// at most: a member added late is started in one and caught up in the
/// next.
const ROUNDS_TO_CONVERGE: usize = 3;
/// How often the operator reads the member list while the healed cluster
/// answers what is pending.
const OPERATOR_INTERVAL: Duration = Duration::from_secs(1);
/// Watchers each run opens before its first step.
const WATCHERS_AT_START: usize = 2;

pub(super) struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A random client request, as both the node and the checker take it.
fn request(rng: &mut Rng, n: usize) -> HRequest {
    let k = rng.below(KEYS);
    let kind = rng.below(traffic::KINDS);
    // Now and then a large value: many raft messages and snapshot bytes.
    let value = if rng.below(LARGE_ONE_IN) == 0 {
        format!("v{n}-{}", "x".repeat(LARGE_BYTES))
    } else {
        format!("v{n}")
    };
    traffic::request(kind, k, &value, rng.below(12) as i64)
}

/// A membership step asks for a change one time in this many (otherwise
/// time moves on): about one change every sixty steps, which keeps the
/// runs' cost within a sixth of what they cost without.
const MEMBER_CHANGE_ONE_IN: u64 = 2;
/// One request in this many carries a value of [`LARGE_BYTES`].
const LARGE_ONE_IN: u64 = 40;
const LARGE_BYTES: usize = 16 * 1024;

fn to_node(request: &HRequest) -> Request {
    match request.clone() {
        HRequest::Range(r) => Request::Range(r),
        HRequest::Put(r) => Request::Put(r),
        HRequest::DeleteRange(r) => Request::DeleteRange(r),
        HRequest::Txn(r) => Request::Txn(r),
        HRequest::Compaction(r) => Request::Compact(r),
        HRequest::LeaseGrant(r) => Request::LeaseGrant(r),
        HRequest::LeaseRevoke(r) => Request::LeaseRevoke(r),
    }
}

/// A compaction at a revision drawn around `seen`, the highest revision
/// an answer showed: mostly at or below it, now and then above it.
fn compaction(rng: &mut Rng, seen: i64) -> HRequest {
    let revision = (seen + 2 - rng.below(8) as i64).max(1);
    HRequest::Compaction(CompactionRequest {
        revision,
        physical: false,
    })
}

/// A read of every traffic key at a revision drawn at or below `seen`:
/// refused once that revision is compacted.
fn past_read(rng: &mut Rng, seen: i64) -> HRequest {
    HRequest::Range(RangeRequest {
        key: b"k".to_vec(),
        range_end: b"l".to_vec(),
        revision: (seen - rng.below(8) as i64).max(1),
        ..Default::default()
    })
}

/// The highest revision any answer of `history` showed.
fn seen(history: &[Operation]) -> i64 {
    history
        .iter()
        .filter_map(|op| match &op.outcome {
            Outcome::Ok(response) => Some(response.revision()),
            _ => None,
        })
        .max()
        .unwrap_or(1)
}

/// What the checker records of an answer. A put refused for its lease
/// certainly changed nothing, nor did a request a learner refused.
fn outcome(request: &HRequest, answer: Result<Response, Error>) -> Outcome {
    if matches!(
        (request, &answer),
        (HRequest::Put(_), Err(Error::LeaseNotFound)) | (_, Err(Error::NotSupportedForLearner))
    ) {
        return Outcome::Failed;
    }
    let answer = answer.map(|response| match response {
        Response::Range(r) => HResponse::Range(r),
        Response::Put(r) => HResponse::Put(r),
        Response::DeleteRange(r) => HResponse::DeleteRange(r),
        Response::Txn(r) => HResponse::Txn(r),
        Response::Compact(r) => HResponse::Compaction(r),
        Response::LeaseGrant(r) => HResponse::LeaseGrant(r),
        Response::LeaseRevoke(r) => HResponse::LeaseRevoke(r),
        other => panic!("a KV request answered {other:?}"),
    });
    Outcome::of(request, answer)
}

fn nanos(cluster: &Cluster) -> u64 {
    cluster.now.saturating_since(Instant::ZERO).as_nanos() as u64
}

/// How a run ended, when it did not find a violation (which panics).
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    Linearizable,
    /// The checker's search hit its bound before deciding.
    Undecided,
}

/// Every member's configuration in a run.
pub(super) fn tune(config: &mut Config) {
    config.snapshot_count = SNAPSHOT_COUNT;
    config.snapshot_catch_up_entries = SNAPSHOT_CATCH_UP_ENTRIES;
    config.lease.checkpoint_interval = CHECKPOINT_INTERVAL;
    // A member restarted or promoted after a restart starts leases from
    // the checkpoint it persisted (etcd 3.6's default).
    config.lease.checkpoint_persist = true;
}

/// One seeded run; panics with the seed on a violation.
pub(super) fn run(seed: u64) -> Verdict {
    run_counting(seed).0
}

/// Member `id` stops (crashed, or removed and shut down): its unanswered
/// requests die with it (unknown), its watchers end, and some resume
/// elsewhere.
fn stop(
    cluster: &mut Cluster,
    watchers: &mut Watchers,
    rng: &mut Rng,
    pending: &mut BTreeMap<RequestId, (u64, usize)>,
    id: u64,
) {
    watchers.collect(cluster);
    cluster.crash(id);
    pending.retain(|_, (member, _)| *member != id);
    watchers.crashed(cluster, rng, id);
}

/// One seeded run, and the membership changes it applied; panics with the
/// seed on a violation.
pub(super) fn run_counting(seed: u64) -> (Verdict, u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // The log is compacted often, so a member that fell behind (cut
    // off, or crashed) is sent a snapshot and restarts from it.
    let mut cluster = Cluster::with(3, tune);
    cluster.track_leadership();
    let mut leases = Leases::default();
    let mut membership = Membership::new(&cluster);
    let ids: Vec<u64> = cluster.members.keys().copied().collect();
    let mut history: Vec<Operation> = Vec::new();
    // Request ID -> (member, index in the history).
    let mut pending: BTreeMap<RequestId, (u64, usize)> = BTreeMap::new();
    let mut crashed: Vec<u64> = Vec::new();
    let collect = |cluster: &mut Cluster,
                   pending: &mut BTreeMap<RequestId, (u64, usize)>,
                   history: &mut Vec<Operation>| {
        let now = nanos(cluster);
        let ready: Vec<RequestId> = pending
            .iter()
            .filter(|(rid, (member, _))| cluster.members[member].answers.contains_key(rid))
            .map(|(rid, _)| *rid)
            .collect();
        for rid in ready {
            if let Some((member, at)) = pending.remove(&rid) {
                if let Some(answer) = cluster.take_answer(member, rid) {
                    let op = &mut history[at];
                    op.outcome = outcome(&op.request, answer);
                    op.complete = Some(now);
                }
            }
        }
    };
    let mut watchers = Watchers::default();
    // Informer lists not answered yet: (index in the history, member).
    let mut informers: Vec<(usize, u64)> = Vec::new();
    for _ in 0..WATCHERS_AT_START {
        let member = ids[rng.below(3) as usize];
        watchers.create(&mut cluster, &mut rng, member, 1);
    }
    for n in 0..STEPS {
        match rng.below(31) {
            step @ (0..=11 | 18 | 19 | 24..=26) => {
                let running = membership.clients(&cluster);
                let member = running[rng.below(running.len() as u64) as usize];
                let request = match step {
                    18 => compaction(&mut rng, seen(&history)),
                    19 => past_read(&mut rng, seen(&history)),
                    24..=26 => leases.request(&cluster, &mut rng, n, history.len()),
                    _ => request(&mut rng, n),
                };
                let rid = cluster.send(member, to_node(&request));
                pending.insert(rid, (member, history.len()));
                history.push(Operation {
                    client: member as u32,
                    invoke: nanos(&cluster),
                    complete: None,
                    request,
                    outcome: Outcome::Unknown,
                });
            }
            12 => {
                let members = membership.members();
                cluster.isolate(members[rng.below(members.len() as u64) as usize]);
            }
            13 => cluster.heal(),
            14 if crashed.is_empty() => {
                let members = membership.members();
                let victim = members[rng.below(members.len() as u64) as usize];
                if cluster.running().contains(&victim) {
                    stop(&mut cluster, &mut watchers, &mut rng, &mut pending, victim);
                    crashed.push(victim);
                }
            }
            15 => {
                for id in crashed.drain(..) {
                    cluster.restart(id);
                }
            }
            16 | 17 => {
                let running = membership.clients(&cluster);
                let member = running[rng.below(running.len() as u64) as usize];
                watchers.create(&mut cluster, &mut rng, member, seen(&history));
            }
            27 => {
                let running = membership.clients(&cluster);
                let member = running[rng.below(running.len() as u64) as usize];
                leases.keep_alive(&mut cluster, &mut rng, member);
            }
            29 => {
                // A Kubernetes informer: a list of every key; its watch
                // opens once the list is answered.
                let running = membership.clients(&cluster);
                let member = running[rng.below(running.len() as u64) as usize];
                let list = HRequest::Range(RangeRequest {
                    key: b"k".to_vec(),
                    range_end: b"l".to_vec(),
                    ..Default::default()
                });
                let rid = cluster.send(member, to_node(&list));
                pending.insert(rid, (member, history.len()));
                informers.push((history.len(), member));
                history.push(Operation {
                    client: member as u32,
                    invoke: nanos(&cluster),
                    complete: None,
                    request: list,
                    outcome: Outcome::Unknown,
                });
            }
            28 => {
                // A leader transfer (etcdctl move-leader), its answer
                // not recorded: it changes no key.
                if let Some(leader) = cluster.leader() {
                    let members = membership.members();
                    let target = members[rng.below(members.len() as u64) as usize];
                    if target != leader {
                        cluster.send(
                            leader,
                            Request::MoveLeader(MoveLeaderRequest { target_id: target }),
                        );
                    }
                }
            }
            30 if rng.below(MEMBER_CHANGE_ONE_IN) == 0 => {
                membership.change(&mut cluster, &mut rng);
            }
            _ => {
                let step = if rng.below(LONG_STEP_ONE_IN) == 0 {
                    Duration::from_millis(1_000 + rng.below(5_000))
                } else {
                    Duration::from_millis(1 + rng.below(400))
                };
                cluster.run_for(step);
            }
        }
        collect(&mut cluster, &mut pending, &mut history);
        for id in membership.observe(&mut cluster, false, seed) {
            stop(&mut cluster, &mut watchers, &mut rng, &mut pending, id);
        }
        crashed.retain(|&id| !membership.is_removed(id));
        informers.retain(|&(at, member)| {
            let listed = match &history[at].outcome {
                Outcome::Ok(HResponse::Range(list)) => list.header.as_ref().map(|h| h.revision),
                Outcome::Unknown => return true,
                _ => None,
            };
            if let Some(revision) = listed {
                if cluster.running().contains(&member) {
                    watchers.informer(&mut cluster, member, revision);
                }
            }
            false
        });
        watchers.collect(&mut cluster);
    }
    // Heal, restart, and let everything pending be answered, the operator
    // reading the member list now and then: it starts the members added
    // and stops those removed.
    cluster.heal();
    for id in crashed.drain(..) {
        cluster.restart(id);
    }
    let mut waited = Duration::ZERO;
    let healed = loop {
        let done = cluster.run_until(OPERATOR_INTERVAL, |c| {
            c.leader().is_some_and(|l| c.node(l).is_ready())
                && membership.answered(c)
                && pending
                    .iter()
                    .all(|(rid, (member, _))| c.members[member].answers.contains_key(rid))
        });
        collect(&mut cluster, &mut pending, &mut history);
        for id in membership.observe(&mut cluster, true, seed) {
            stop(&mut cluster, &mut watchers, &mut rng, &mut pending, id);
        }
        waited += OPERATOR_INTERVAL;
        if done || waited >= DRAIN_TIME {
            break done;
        }
    };
    assert!(
        healed,
        "seed {seed}: no leader, or requests unanswered, once healed; {}",
        cluster.summary()
    );
    collect(&mut cluster, &mut pending, &mut history);
    // Leases: those that got no keep-alive must be gone in time; then
    // every lease left goes, so nothing changes from here on.
    leases.check_ttls(&mut cluster, &history, seed);
    leases.revoke_all(&mut cluster, &mut history);
    let expiries = leases.expiries(&history);
    history.extend(expiries);
    // The final put, on the leader.
    let elected = cluster.run_until(DRAIN_TIME, |c| c.leader().is_some());
    assert!(elected, "seed {seed}: no leader once healed");
    let leader = cluster.leader().expect("a leader once healed");
    let last = HRequest::Put(PutRequest {
        key: b"k-final".to_vec(),
        value: b"end".to_vec(),
        ..Default::default()
    });
    let invoke = nanos(&cluster);
    let answer = cluster.call(leader, to_node(&last));
    history.push(Operation {
        client: u32::MAX,
        invoke,
        complete: Some(nanos(&cluster)),
        outcome: outcome(&last, answer),
        request: last,
    });
    // Every member applies everything and reads the whole key space: the
    // reads join the history, so the unknown writes must be explained in
    // a way that also leads to what the members hold.
    let applied = |c: &Cluster, id: u64| c.node(id).metrics().proposals_applied;
    // The list read once every member applied all: members added late are
    // started (and caught up in the next round), the removed ones stop.
    for round in 0..=ROUNDS_TO_CONVERGE {
        let before = cluster.members.len();
        let stopped = membership.observe(&mut cluster, true, seed);
        for &id in &stopped {
            stop(&mut cluster, &mut watchers, &mut rng, &mut pending, id);
        }
        if round > 0 && stopped.is_empty() && cluster.members.len() == before {
            break;
        }
        assert!(
            round < ROUNDS_TO_CONVERGE,
            "seed {seed}: the member list still changes"
        );
        let converged = cluster.run_until(DRAIN_TIME, |c| {
            c.running()
                .iter()
                .all(|&id| applied(c, id) >= applied(c, leader))
        });
        assert!(
            converged,
            "seed {seed}: members did not catch up; {}",
            cluster.summary()
        );
    }
    membership.check(&cluster, seed);
    watchers.finish(&mut cluster, seed);
    let all = HRequest::Range(RangeRequest {
        key: vec![0],
        range_end: vec![0],
        serializable: true,
        ..Default::default()
    });
    let mut views = Vec::new();
    for id in cluster.running() {
        let invoke = nanos(&cluster);
        let answer = cluster.call(id, to_node(&all));
        let outcome = outcome(&all, answer);
        let Outcome::Ok(HResponse::Range(view)) = &outcome else {
            panic!("seed {seed}: member {id} answered {outcome:?}");
        };
        views.push((id, view.clone()));
        history.push(Operation {
            client: u32::MAX - 1,
            invoke,
            complete: Some(nanos(&cluster)),
            request: all.clone(),
            outcome,
        });
    }
    let model = match check_with_watches(&history, &watchers.watches(), 1) {
        Ok(model) => model,
        Err(v) if v.undecided => {
            eprintln!("seed {seed}: {v}");
            return (Verdict::Undecided, membership.applied);
        }
        Err(v) => {
            // What the leader actually holds at each revision near the
            // violation's, beside the history's excerpt, to tell a server
            // bug from a checker one. SIM_FULL_HISTORY=1 prints them all.
            let full = std::env::var_os("SIM_FULL_HISTORY").is_some();
            let mut actual = String::new();
            let last = views.first().map_or(1, |(_, view)| {
                view.header.as_ref().map_or(1, |h| h.revision)
            });
            let around = oxetcd_history::excerpt::REVISIONS_AROUND;
            let revisions = if full {
                2..=last
            } else {
                (v.revision - around).max(2)..=(v.revision + around).min(last)
            };
            for revision in revisions {
                let at = Request::Range(RangeRequest {
                    key: vec![0],
                    range_end: vec![0],
                    revision,
                    serializable: true,
                    ..Default::default()
                });
                if let Ok(Response::Range(r)) = cluster.call(leader, at) {
                    let kvs: Vec<String> = r
                        .kvs
                        .iter()
                        .map(|kv| {
                            format!(
                                "{}={}@{}/c{}/v{}",
                                String::from_utf8_lossy(&kv.key),
                                String::from_utf8_lossy(&kv.value),
                                kv.mod_revision,
                                kv.create_revision,
                                kv.version
                            )
                        })
                        .collect();
                    actual.push_str(&format!("{revision}: {}\n", kvs.join(" ")));
                }
            }
            let shown: Vec<usize> = if full {
                (0..history.len()).collect()
            } else {
                oxetcd_history::excerpt(&history, &v)
            };
            let brief: Vec<String> = shown
                .iter()
                .map(|&i| {
                    let op = &history[i];
                    format!("{i} m{} {:?} -> {:?}", op.client, op.request, op.outcome)
                })
                .collect();
            panic!(
                "seed {seed}: not linearizable: {v}\nthe leader holds:\n{actual}history ({} of {} \
                 operations; SIM_SEED={seed} replays, SIM_FULL_HISTORY=1 shows all):\n{}",
                shown.len(),
                history.len(),
                brief.join("\n")
            );
        }
    };
    for (id, view) in &views {
        let at = view.header.as_ref().map_or(0, |h| h.revision);
        assert_eq!(at, model.revision(), "seed {seed}: member {id}'s revision");
        assert_eq!(view.kvs, views[0].1.kvs, "seed {seed}: member {id}'s keys");
    }
    // Every member's HashKV at the final revision is the same.
    let hashes: Vec<(u64, u64)> = cluster
        .running()
        .into_iter()
        .map(|id| (id, hash_kv(&cluster.kv_view(id), model.revision())))
        .collect();
    for (id, hash) in &hashes {
        assert_eq!(*hash, hashes[0].1, "seed {seed}: member {id}'s HashKV");
    }
    check_attached(&cluster, seed);
    watchers.check(&model, seed);
    (Verdict::Linearizable, membership.applied)
}

/// Runs this part's share of the seeds (`SIM_SEEDS` in all, default
/// [`SEEDS_DEFAULT`], split over [`PARTS`] tests so that they run on
/// every core), within [`SIM_TIME_MAX`].
fn seeded_part(part: u64) {
    if let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        if part == 0 {
            assert_eq!(run(seed), Verdict::Linearizable, "seed {seed}");
        }
        return;
    }
    let seeds = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS_DEFAULT);
    let share = seeds.div_ceil(PARTS);
    let first = part * share;
    let last = seeds.min(first + share);
    // The test's own wall-clock bound; the nodes see only virtual time.
    #[allow(clippy::disallowed_methods)]
    let started = WallClock::now();
    let mut ran = 0;
    let mut undecided = Vec::new();
    let mut changes = 0;
    for seed in first..last {
        if started.elapsed() > SIM_TIME_MAX {
            break;
        }
        let replay = Replay(seed);
        let (verdict, applied) = run_counting(seed);
        std::mem::forget(replay);
        if verdict == Verdict::Undecided {
            undecided.push(seed);
        }
        changes += applied;
        ran += 1;
    }
    eprintln!(
        "node simulator: seeds {first}..{last}: {ran} run in {:?}, membership changes applied: \
         {changes}, undecided by the checker: {undecided:?}",
        started.elapsed()
    );
    assert!(ran > 0 || first >= last);
    // The checker must decide nearly every run for the seeds to mean much.
    assert!(
        undecided.len() * 100 <= ran as usize,
        "more than 1% of the seeds undecided: {undecided:?}"
    );
}

/// Names the seed of a run that panicked where no message does.
struct Replay(u64);

impl Drop for Replay {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "node simulator: seed {0} failed; SIM_SEED={0} replays",
                self.0
            );
        }
    }
}

#[test]
fn seeded_runs_are_linearizable_and_converge_0() {
    seeded_part(0);
}

#[test]
fn seeded_runs_are_linearizable_and_converge_1() {
    seeded_part(1);
}

#[test]
fn seeded_runs_are_linearizable_and_converge_2() {
    seeded_part(2);
}

#[test]
fn seeded_runs_are_linearizable_and_converge_3() {
    seeded_part(3);
}

/// Seeds that found bugs, replayed. A seed names a run of the traffic
/// mix of its day; when the mix changes it names another run, so each fix
/// is also pinned by a unit test.
///
/// Seed 6 found that a compaction at a delete's own revision dropped the
/// tombstone, so a watch from that revision (allowed: the compaction
/// revision is kept) never saw the delete, etcd-io/etcd#18089 (unit tests
/// in `mvcc/tests.rs`).
#[test]
fn seed_6_a_watch_from_the_compaction_revision_sees_its_delete() {
    assert_eq!(run(6), Verdict::Linearizable);
}

/// Seed 3605 found that a lease checkpoint whose proposal was refused
/// (during a leader transfer) ended the lease's checkpoints, so the next
/// leader started the lease from a remaining TTL eight seconds old and it
/// outlived its bound (unit test in `lease/tests.rs`).
#[test]
fn seed_3605_a_lost_checkpoint_does_not_stop_the_next() {
    assert_eq!(run(3605), Verdict::Linearizable);
}

/// Seed 121 found that a member removed before its attributes were
/// published kept its publication's retry due, so its timer fired at
/// once, for ever (unit test in `membership_tests.rs`).
#[test]
fn seed_121_a_removed_member_keeps_no_timer_due() {
    assert_eq!(run(121), Verdict::Linearizable);
}

/// Seed 136 found that a member restarted after a crash went back to the
/// configuration before a removal it had applied, not knowing the removal
/// committed, and waited for the removed member's vote for ever (unit
/// test in `membership_tests.rs`).
#[test]
fn seed_136_a_member_left_alone_by_a_removal_leads_after_a_crash() {
    assert_eq!(run(136), Verdict::Linearizable);
}

/// Seed 1604 found that the history checker filled a revision nobody
/// answered for with a write on a key a synced watch had been silent
/// about there, and then held the watch to that write (unit test in the
/// history crate's `tests.rs`).
#[test]
fn seed_1604_a_silent_watch_narrows_the_writes_that_fill_a_gap() {
    assert_eq!(run(1604), Verdict::Linearizable);
}
