//! The node simulator's leases: grants, puts attached to a lease, revokes
//! and keep-alives among the run's traffic, the expiries the leader makes
//! of its own, and the promises leases keep that a KV history does not
//! show.
//!
//! Design. The simulator picks lease IDs (1, 2, …), so a put can name a
//! lease before its grant is answered, or one never granted (refused:
//! "requested lease not found"). Grants and revokes join the KV history;
//! an expiry is no client's operation, so each lease granted adds a revoke
//! of unknown outcome invoked with its grant ([`traffic::lease_expiry`]),
//! which lets the checker explain the deletion of that lease's keys, all
//! at one revision, wherever the leader made it. Keep-alives are not in
//! the history: they change no key.
//!
//! What the history cannot show is checked here:
//!
//! - No lease outlives its TTL by more than leader changes and the time
//!   without a leader explain ([`Leases::check_ttls`]). A leader expires a
//!   lease at its TTL; a new leader gives it the remaining TTL of the last
//!   checkpoint it applied plus the election timeout. The old leader
//!   checkpoints every [`CHECKPOINT_INTERVAL`] while it can commit, and
//!   the new one may not have applied the last of them, so each promotion
//!   adds at most the election timeout, two intervals and a second of
//!   rounding (`PROMOTION_SLACK`), on top of the time in which no leader
//!   could commit (recorded by the cluster). Promotions are counted by
//!   terms. A lease that got no keep-alive must be gone once that bound has
//!   passed: a new leader that restarts leases from their full TTL is
//!   caught when it is promoted late in a long lease; so the wait for
//!   the bounds begins with a leadership transfer.
//! - No key outlives its lease: every live key on every member names a
//!   lease that member holds ([`check_attached`]).
//!
//! At the end of a run every lease left is revoked by a client, so that
//! nothing changes while the members' final state is compared.

use std::time::Duration;

use oxetcd_history::{traffic, Operation, Outcome, Request as HRequest, Response as HResponse};
use oxetcd_proto::etcdserverpb::{
    LeaseKeepAliveRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, MoveLeaderRequest,
};

use super::cluster_tests::Cluster;
use super::sim_tests::{Rng, DRAIN_TIME, KEYS};
use super::*;
use crate::storage::{KvRead, RangeEnd};

/// Leases one run grants at most.
const LEASES_MAX: usize = 4;
/// TTLs a grant asks for, in seconds: some expire within a run, some
/// outlive it, some last long enough for a leader change to matter.
const TTLS_SECS: [i64; 4] = [2, 4, 10, 20];
/// Keys only lease puts write (after the traffic's `KEYS`), so a lease
/// keeps more than one key until it goes.
pub(super) const LEASE_KEYS: u64 = 2;
/// The lease checkpoint interval of the simulated members: short, so that
/// checkpoints happen within a run.
pub(super) const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// What each promotion may add to a lease's life besides the election
/// timeout: two checkpoint intervals (the last checkpoint the new leader
/// applied may be one behind), a second of rounding (checkpoints record
/// whole seconds, rounded up), and half a second of commit and apply
/// latency.
const PROMOTION_SLACK: Duration = Duration::from_millis(2 * 1_000 + 1_000 + 500);
/// Virtual time the end of a run waits at most for lease bounds to pass.
const TTL_WAIT_MAX: Duration = Duration::from_secs(15);
/// Rounds of revokes at the end of a run at most.
const REVOKE_ROUNDS_MAX: usize = 3;

/// One lease the run asked for.
struct Lease {
    id: i64,
    /// Its grant's place in the history.
    grant: usize,
    /// The highest term of a running member when the grant was sent.
    term: u64,
    /// A keep-alive was sent for it: its TTL started again, at a time the
    /// checks do not know.
    renewed: bool,
}

/// Every lease of one run.
#[derive(Default)]
pub(super) struct Leases {
    list: Vec<Lease>,
}

impl Leases {
    /// A lease request drawn for step `n`: a grant (while fewer than
    /// [`LEASES_MAX`] were asked for), a put attached to a lease (now and
    /// then one never granted), or a revoke. `at` is where the history
    /// will hold it.
    pub(super) fn request(
        &mut self,
        cluster: &Cluster,
        rng: &mut Rng,
        n: usize,
        at: usize,
    ) -> HRequest {
        let draw = rng.below(6);
        if self.list.is_empty() || (draw == 0 && self.list.len() < LEASES_MAX) {
            let id = self.list.len() as i64 + 1;
            self.list.push(Lease {
                id,
                grant: at,
                term: cluster.max_term(),
                renewed: false,
            });
            let ttl = TTLS_SECS[rng.below(TTLS_SECS.len() as u64) as usize];
            return traffic::lease_grant(id, ttl);
        }
        // One past the last: not granted (yet).
        let id = rng.below(self.list.len() as u64 + 1) as i64 + 1;
        if draw == 5 {
            return traffic::lease_revoke(id);
        }
        let k = rng.below(KEYS + LEASE_KEYS);
        traffic::lease_put(k, &format!("v{n}"), id)
    }

    /// A keep-alive of a drawn lease, sent to `member`; its answer is not
    /// awaited.
    pub(super) fn keep_alive(&mut self, cluster: &mut Cluster, rng: &mut Rng, member: u64) {
        if self.list.is_empty() {
            return;
        }
        let at = rng.below(self.list.len() as u64) as usize;
        let lease = &mut self.list[at];
        lease.renewed = true;
        let request = Request::LeaseKeepAlive(LeaseKeepAliveRequest { id: lease.id });
        cluster.send(member, request);
    }

    /// The expiry each lease may have had, as the checker takes it: a
    /// revoke of unknown outcome, invoked with the grant.
    pub(super) fn expiries(&self, history: &[Operation]) -> Vec<Operation> {
        self.list
            .iter()
            .map(|lease| Operation {
                client: u32::MAX - 2,
                invoke: history[lease.grant].invoke,
                complete: None,
                request: traffic::lease_expiry(lease.id),
                outcome: Outcome::Unknown,
            })
            .collect()
    }

    /// Once the run is healed: waits for the bound of each lease that was
    /// granted and never kept alive (at most [`TTL_WAIT_MAX`] in all) and
    /// checks the leader no longer holds it then. Panics with the seed.
    pub(super) fn check_ttls(&self, cluster: &mut Cluster, history: &[Operation], seed: u64) {
        let until = cluster.now + TTL_WAIT_MAX;
        let mut due: Vec<(&Lease, Instant, i64)> = self
            .list
            .iter()
            .filter(|lease| !lease.renewed)
            .filter_map(|lease| {
                let op = &history[lease.grant];
                match (&op.outcome, op.complete) {
                    (Outcome::Ok(HResponse::LeaseGrant(r)), Some(at)) => {
                        Some((lease, Instant::ZERO + Duration::from_nanos(at), r.ttl))
                    }
                    _ => None,
                }
            })
            .collect();
        if !due.is_empty() {
            transfer_leadership(cluster);
        }
        // Each pass either checks a lease or finds its bound moved on (a
        // leader change while waiting); both are bounded.
        for _ in 0..4 * LEASES_MAX {
            let Some((at, &(lease, granted, ttl))) =
                due.iter()
                    .enumerate()
                    .min_by_key(|(_, (lease, granted, ttl))| {
                        bound(cluster, lease.term, *granted, *ttl)
                    })
            else {
                return;
            };
            let deadline = bound(cluster, lease.term, granted, ttl);
            if deadline > until {
                return;
            }
            if deadline > cluster.now {
                let wait = deadline.saturating_since(cluster.now);
                cluster.run_for(wait);
                continue;
            }
            let Some(leader) = leader_once_healed(cluster, seed) else {
                continue;
            };
            let request = Request::LeaseTimeToLive(LeaseTimeToLiveRequest {
                id: lease.id,
                keys: true,
            });
            let answer = cluster.call(leader, request);
            // The call took time: a leader change meanwhile moves the bound.
            if bound(cluster, lease.term, granted, ttl) > cluster.now {
                continue;
            }
            match answer {
                Ok(Response::LeaseTimeToLive(r)) if r.ttl == -1 => {}
                other => panic!(
                    "seed {seed}: lease {} (TTL {ttl} s, granted by {granted:?}, term {}) \
                     outlived its bound {deadline:?}: {} terms since, {:?} without a leader; \
                     the leader answers {other:?}",
                    lease.id,
                    lease.term,
                    cluster.max_term() - lease.term,
                    leaderless_since(cluster, granted),
                ),
            }
            due.remove(at);
        }
    }

    /// Revokes every lease a member still holds, recording the revokes in
    /// `history`, so that no expiry changes the key space afterwards.
    pub(super) fn revoke_all(&self, cluster: &mut Cluster, history: &mut Vec<Operation>) {
        for _ in 0..REVOKE_ROUNDS_MAX {
            let Some(leader) = cluster.leader() else {
                return;
            };
            let Ok(Response::LeaseLeases(leases)) = cluster.call(leader, Request::LeaseLeases)
            else {
                return;
            };
            if leases.leases.is_empty() {
                return;
            }
            for lease in leases.leases {
                let request = traffic::lease_revoke(lease.id);
                let invoke = nanos(cluster);
                let answer = cluster.call(
                    leader,
                    Request::LeaseRevoke(LeaseRevokeRequest { id: lease.id }),
                );
                let answer = answer.map(|response| match response {
                    Response::LeaseRevoke(r) => HResponse::LeaseRevoke(r),
                    other => panic!("a revoke answered {other:?}"),
                });
                history.push(Operation {
                    client: u32::MAX - 3,
                    invoke,
                    complete: Some(nanos(cluster)),
                    outcome: Outcome::of(&request, answer),
                    request,
                });
            }
        }
    }
}

/// No key outlives its lease: every live key of every running member
/// names a lease that member holds. Panics with the seed.
pub(super) fn check_attached(cluster: &Cluster, seed: u64) {
    for id in cluster.running() {
        let view = cluster.kv_view(id);
        let mut leases = Vec::new();
        view.leases(&mut |record| {
            leases.push(record.id);
            std::ops::ControlFlow::Continue(())
        })
        .expect("an in-memory view reads");
        let revision = view.meta().expect("an in-memory view reads").revision;
        view.scan(b"", RangeEnd::Unbounded, revision, &mut |version| {
            assert!(
                version.tombstone || version.lease == 0 || leases.contains(&version.lease),
                "seed {seed}: member {id}: key {} outlived its lease {}",
                String::from_utf8_lossy(&version.key),
                version.lease
            );
            std::ops::ControlFlow::Continue(())
        })
        .expect("an in-memory view reads");
    }
}

/// The latest a lease granted (answered) at `granted` for `ttl_secs`,
/// when the highest term was `term`, may still exist (see the module
/// doc): its TTL, a revoke retry and a second of latency, each promotion
/// since, and the time no leader could commit.
fn bound(cluster: &Cluster, term: u64, granted: Instant, ttl_secs: i64) -> Instant {
    let lease = &cluster
        .members
        .values()
        .next()
        .expect("a member")
        .config
        .lease;
    let promotions = u32::try_from(cluster.max_term().saturating_sub(term)).unwrap_or(u32::MAX);
    let ttl = Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(0));
    granted
        + ttl
        + lease.expired_retry_interval
        + Duration::from_secs(1)
        + (lease.promote_extend + PROMOTION_SLACK) * promotions
        + leaderless_since(cluster, granted)
}

/// Virtual time since `since` in which no leader could commit.
fn leaderless_since(cluster: &Cluster, since: Instant) -> Duration {
    cluster
        .leaderless
        .iter()
        .map(|&(from, to)| to.saturating_since(from.max(since)))
        .sum()
}

/// Hands leadership to another member: a promotion late in the life of
/// the leases the run granted, without a fault.
fn transfer_leadership(cluster: &mut Cluster) {
    let Some(leader) = cluster.leader() else {
        return;
    };
    let Some(&target) = cluster.followers().first() else {
        return;
    };
    // A refusal (a transfer under way, a lagging target) only means no
    // promotion: the bound counts what happened.
    let _ = cluster.call(
        leader,
        Request::MoveLeader(MoveLeaderRequest { target_id: target }),
    );
}

/// The leader, waiting for one (the run is healed by now).
fn leader_once_healed(cluster: &mut Cluster, seed: u64) -> Option<u64> {
    if cluster.leader().is_none() {
        let elected = cluster.run_until(DRAIN_TIME, |c| c.leader().is_some());
        assert!(elected, "seed {seed}: no leader once healed");
        return None;
    }
    cluster.leader()
}

fn nanos(cluster: &Cluster) -> u64 {
    cluster.now.saturating_since(Instant::ZERO).as_nanos() as u64
}
