//! The node simulator's membership changes: among the faults of a run,
//! clients remove members (a follower, a learner or the leader itself) and
//! add fresh ones (a new ID, an empty data directory, caught up from a
//! snapshot) as voters, or as learners promoted later, keeping the cluster
//! between [`MEMBERS_MIN`] and [`MEMBERS_MAX`] members (as far as the
//! operator can: a change answered with an error may still take effect).
//!
//! Design. The simulator is an operator with etcdctl: it sends a change to
//! a member it counts in the cluster and does not wait. An answer may not
//! come, or not say what happened (a leader change), so the operator
//! learns what happened from the member list, as etcd's clients do. A list
//! is read from the running member that applied the most, and only when it
//! applied more than at the last read: the lists are then views
//! of one committed log at growing indexes, so a member that left the list
//! was removed, and one that joined it with a URL the operator asked for
//! was added, and is started then: empty, `existing`, with the listed
//! members as its initial cluster. A removed member keeps running (it may
//! not know) until it applies its own removal or reaches a member that
//! applied it, which refuses it as the peer transport does; then it stops,
//! and its requests and watchers end as a crashed member's do. Crashes,
//! partitions and leader transfers pick among the members of the last list,
//! those being added or removed included.
//!
//! Checked: members that applied as much hold the same list and raft
//! configuration; a removed member never leads in a term after the one
//! its removal was seen in; once healed, every member holds the same list,
//! and its raft configuration has the list's voters and learners, no more.

use std::collections::{BTreeMap, BTreeSet};

use oxetcd_proto::etcdserverpb::{MemberAddRequest, MemberPromoteRequest, MemberRemoveRequest};

use super::cluster_tests::{self, Cluster};
use super::sim_tests::Rng;
use super::*;

/// Members the cluster keeps at least: a removal is asked only above it.
const MEMBERS_MIN: usize = 2;
/// Members the cluster holds at most: an add is asked only below it.
const MEMBERS_MAX: usize = 5;

/// A change asked and not answered yet.
struct Asked {
    member: u64,
    request: RequestId,
    /// +1 for an add, -1 for a removal, 0 for a promotion: what it does to
    /// the size of the cluster if it succeeds.
    delta: i64,
}

/// The operator's view of the cluster's membership during one run.
pub(super) struct Membership {
    /// The members of the last list read, and whether each is a learner.
    listed: BTreeMap<u64, bool>,
    /// The applied index of the member the last list was read from.
    listed_at: u64,
    /// Peer URLs asked for in adds, not seen in a list yet.
    urls: BTreeSet<String>,
    asked: Vec<Asked>,
    /// Members seen removed, with the highest term of a running member
    /// when their removal was seen.
    removed: BTreeMap<u64, u64>,
    /// The next peer URL's number: URLs are never used twice.
    next_url: u64,
    /// Changes seen applied: adds, removals and promotions.
    pub(super) applied: u64,
}

impl Membership {
    /// The membership of a new cluster of `cluster`'s members.
    pub(super) fn new(cluster: &Cluster) -> Self {
        let listed: BTreeMap<u64, bool> = cluster.members.keys().map(|&id| (id, false)).collect();
        let next_url = listed.keys().max().map_or(1, |id| id + 1);
        Self {
            listed,
            listed_at: 0,
            urls: BTreeSet::new(),
            asked: Vec::new(),
            removed: BTreeMap::new(),
            next_url,
            applied: 0,
        }
    }

    /// The members of the last list: what crashes, partitions and leader
    /// transfers pick from.
    pub(super) fn members(&self) -> Vec<u64> {
        self.listed.keys().copied().collect()
    }

    /// The running members a client may send to: those of the last list,
    /// or any running one if none of them runs.
    pub(super) fn clients(&self, cluster: &Cluster) -> Vec<u64> {
        let running = cluster.running();
        let listed: Vec<u64> = running
            .iter()
            .copied()
            .filter(|id| self.listed.contains_key(id))
            .collect();
        if listed.is_empty() {
            running
        } else {
            listed
        }
    }

    /// Whether `id` was seen removed.
    pub(super) fn is_removed(&self, id: u64) -> bool {
        self.removed.contains_key(&id)
    }

    /// Whether every change asked was answered (or its member stopped).
    pub(super) fn answered(&self, cluster: &Cluster) -> bool {
        self.asked.iter().all(|a| {
            let member = &cluster.members[&a.member];
            !member.is_running() || member.answers.contains_key(&a.request)
        })
    }

    /// A drawn change, sent to a drawn member without waiting: a removal
    /// of any member, an add of a voter or a learner, or the promotion of
    /// a learner.
    pub(super) fn change(&mut self, cluster: &mut Cluster, rng: &mut Rng) {
        let clients = self.clients(cluster);
        if clients.is_empty() {
            return;
        }
        let to = clients[rng.below(clients.len() as u64) as usize];
        // The sizes if every removal, or every add, in flight succeeds.
        let listed = self.listed.len() as i64;
        let in_flight = |sign: i64| self.asked.iter().filter(|a| a.delta == sign).count() as i64;
        let smallest = listed - in_flight(-1);
        let largest = listed + in_flight(1);
        let learner = self.listed.iter().find(|(_, &l)| l).map(|(&id, _)| id);
        let (request, delta) = match (rng.below(4), learner) {
            (0 | 1, _) if smallest > MEMBERS_MIN as i64 => {
                let members = self.members();
                let id = members[rng.below(members.len() as u64) as usize];
                (Request::MemberRemove(MemberRemoveRequest { id }), -1)
            }
            (3, Some(id)) => (Request::MemberPromote(MemberPromoteRequest { id }), 0),
            (draw, _) if largest < MEMBERS_MAX as i64 => {
                let url = cluster_tests::url(self.next_url);
                self.next_url += 1;
                self.urls.insert(url.clone());
                let add = MemberAddRequest {
                    peer_ur_ls: vec![url],
                    is_learner: draw == 3,
                };
                (Request::MemberAdd(add), 1)
            }
            _ => return,
        };
        let request = cluster.send(to, request);
        self.asked.push(Asked {
            member: to,
            request,
            delta,
        });
    }

    /// Reads the member list, as an operator checks what its changes did:
    /// starts the members added, counts what changed, and returns the
    /// removed members still running that must stop now (`all`: every one
    /// of them, as once the run is healed). Panics with the seed if a
    /// removed member leads again.
    pub(super) fn observe(&mut self, cluster: &mut Cluster, all: bool, seed: u64) -> Vec<u64> {
        // A change answered, or whose member stopped, is no longer in
        // flight: the lists tell what it did.
        let running = cluster.running();
        self.asked.retain(|a| {
            running.contains(&a.member)
                && !cluster.members[&a.member].answers.contains_key(&a.request)
        });
        let newest = cluster
            .running()
            .into_iter()
            .max_by_key(|&id| (cluster.node(id).applied_index(), std::cmp::Reverse(id)));
        if let Some(newest) = newest {
            let at = cluster.node(newest).applied_index();
            if at > self.listed_at {
                let list = cluster.node(newest).members();
                same_at_same_index(cluster, newest, &list, seed);
                self.listed_at = at;
                self.read(cluster, list);
            }
        }
        let mut stop = Vec::new();
        for (&id, &term) in &self.removed {
            if !cluster.running().contains(&id) {
                continue;
            }
            let node = cluster.node(id);
            assert!(
                node.role() != Role::Leader || node.term() <= term,
                "seed {seed}: member {id}, removed in term {term}, leads in term {}",
                node.term()
            );
            // The peer transport refuses a member its peer applied the
            // removal of, and the refused member stops.
            let refused = cluster.running().into_iter().any(|other| {
                other != id
                    && cluster.linked(id, other)
                    && cluster.node(other).members().iter().all(|m| m.id != id)
            });
            if all || node.is_removed() || refused {
                stop.push(id);
            }
        }
        stop
    }

    /// Takes in a newer list.
    fn read(&mut self, cluster: &mut Cluster, list: Vec<Member>) {
        let term = cluster.max_term();
        let now: BTreeMap<u64, bool> = list.iter().map(|m| (m.id, m.is_learner)).collect();
        for &id in self.listed.keys() {
            if !now.contains_key(&id) {
                self.removed.insert(id, term);
                self.applied += 1;
            }
        }
        for member in &list {
            match self.listed.get(&member.id) {
                Some(&was_learner) => {
                    if was_learner && !member.is_learner {
                        self.applied += 1;
                    }
                }
                None => {
                    self.applied += 1;
                    let ours = member.peer_ur_ls.iter().any(|u| self.urls.remove(u));
                    if ours && !cluster.members.contains_key(&member.id) {
                        let mut config =
                            cluster_tests::config(member.id, &[], ClusterState::Existing);
                        config.initial_members = list
                            .iter()
                            .map(|m| InitialMember {
                                id: m.id,
                                name: format!("m{}", m.id),
                                peer_urls: m.peer_ur_ls.clone(),
                            })
                            .collect();
                        super::sim_tests::tune(&mut config);
                        cluster.start(member.id, config);
                    }
                }
            }
        }
        self.listed = now;
    }

    /// Once healed and converged: every running member is a member of the
    /// last list and holds that list, its raft configuration has the
    /// list's voters and learners, and no removed member is among them.
    pub(super) fn check(&self, cluster: &Cluster, seed: u64) {
        let running = cluster.running();
        let listed = self.members();
        assert_eq!(running, listed, "seed {seed}: running members vs the list");
        let voters: Vec<u64> = self
            .listed
            .iter()
            .filter(|(_, &l)| !l)
            .map(|(&id, _)| id)
            .collect();
        let learners: Vec<u64> = self
            .listed
            .iter()
            .filter(|(_, &l)| l)
            .map(|(&id, _)| id)
            .collect();
        for &id in &running {
            let node = cluster.node(id);
            let ids: Vec<u64> = node.members().iter().map(|m| m.id).collect();
            assert_eq!(ids, listed, "seed {seed}: member {id}'s member list");
            let conf = node.raft.conf_state();
            let mut conf_voters = conf.voters.clone();
            conf_voters.sort_unstable();
            let mut conf_learners = conf.learners.clone();
            conf_learners.sort_unstable();
            let state = cluster.summary();
            assert_eq!(
                conf_voters, voters,
                "seed {seed}: member {id}'s voters; {state}"
            );
            assert_eq!(
                conf_learners, learners,
                "seed {seed}: member {id}'s learners; {state}"
            );
        }
        for id in self.removed.keys() {
            assert!(
                !listed.contains(id),
                "seed {seed}: removed member {id} is back"
            );
        }
    }
}

/// Every running member that applied as much as `newest` holds the same
/// list and raft configuration: both change only as the log applies.
/// Panics with the seed.
fn same_at_same_index(cluster: &Cluster, newest: u64, list: &[Member], seed: u64) {
    let at = cluster.node(newest).applied_index();
    let conf = cluster.node(newest).raft.conf_state();
    for id in cluster.running() {
        let node = cluster.node(id);
        if id == newest || node.applied_index() != at {
            continue;
        }
        let same = node
            .members()
            .iter()
            .map(|m| (m.id, m.is_learner))
            .eq(list.iter().map(|m| (m.id, m.is_learner)))
            && node.raft.conf_state() == conf;
        assert!(
            same,
            "seed {seed}: members {newest} and {id} applied {at} and differ; {}",
            cluster.summary()
        );
    }
}
