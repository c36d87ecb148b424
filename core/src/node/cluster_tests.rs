//! Multi-member clusters of [`Node`]s in one process: deterministic, no
//! network, no threads. Each member has in-memory storage; the harness
//! carries raft messages between members (dropping those on cut links),
//! makes every `Persist` durable at once, moves virtual time to the next
//! deadline, and transfers snapshots by handing the leader's backend read
//! view to the follower, which installs it by copying it into its own
//! backend. A crash drops the node and keeps its storage. On request
//! ([`Cluster::track_leadership`]) it records the virtual time during which
//! no leader could commit, as the node simulator's lease checks need.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use oxetcd_proto::etcdserverpb::{
    LeaseGrantRequest, MemberAddRequest, MemberListRequest, MemberPromoteRequest,
    MemberRemoveRequest, MemberUpdateRequest, MoveLeaderRequest, PutRequest, RangeRequest,
    RangeResponse, WatchCreateRequest, WatchRequest, WatchResponse,
};

use super::*;
use crate::auth::Credentials;
use crate::memory::{MemoryKv, MemoryKvRead, MemoryLog};
use crate::testing::{self as driver, Effect};
use crate::watch::StreamId;
use oxetcd_proto::eraftpb::{Message, MessageType};

/// Virtual time a call may take before the harness gives up.
const CALL_TIME_MAX: Duration = Duration::from_secs(60);

/// Timer firings in one `run_until` at most (a livelock guard).
const STEPS_MAX: usize = 200_000;

/// What travels between members.
enum Packet {
    Message(Message),
    /// A whole snapshot stream: the data, then its final message.
    Snapshot {
        from: u64,
        message: Message,
        view: MemoryKvRead,
    },
    /// The end of a snapshot stream, reported back to its sender.
    SnapshotReport {
        sender: u64,
        to: u64,
        delivered: bool,
    },
}

pub(super) struct Member {
    pub(super) config: Config,
    /// The running member on the reference driver; `None` while crashed.
    running: Option<driver::Member>,
    pub(super) log: MemoryLog,
    pub(super) kv: MemoryKv,
    pub(super) answers: HashMap<RequestId, Result<Response, Error>>,
    /// Every watch response, with its stream, in arrival order.
    pub(super) watched: Vec<(StreamId, WatchResponse)>,
}

impl Member {
    pub(super) fn is_running(&self) -> bool {
        self.running.is_some()
    }
}

pub(super) struct Cluster {
    pub(super) members: BTreeMap<u64, Member>,
    pub(super) now: Instant,
    network: VecDeque<Packet>,
    /// Directed links that drop everything: (from, to).
    cut: BTreeSet<(u64, u64)>,
    /// Messages larger than this (encoded) are dropped, as the peer
    /// transport drops those that exceed its frame bound.
    message_bytes_max: usize,
    /// Members whose proposals forwarded to the leader are lost.
    pub(super) proposals_lost_from: BTreeSet<u64>,
    pub(super) next_request: RequestId,
    /// Whether no leader could commit at the last look, and when that was
    /// (`None`: not tracked).
    leadership_seen: Option<(Instant, bool)>,
    /// Spans of virtual time in which, at either end, no leader could
    /// commit (when tracked).
    pub(super) leaderless: Vec<(Instant, Instant)>,
}

pub(super) fn url(id: u64) -> String {
    format!("http://m{id}:2380")
}

pub(super) fn config(id: u64, initial: &[u64], state: ClusterState) -> Config {
    let mut config = Config::single(&format!("m{id}"));
    config.member_id = id;
    config.cluster_id = 0xc1;
    config.rng_seed = id;
    config.initial_members = initial
        .iter()
        .map(|&i| InitialMember {
            id: i,
            name: format!("m{i}"),
            peer_urls: vec![url(i)],
        })
        .collect();
    config.initial_cluster_state = state;
    config
}

pub(super) fn put(key: &str, value: &str) -> Request {
    Request::Put(PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        ..Default::default()
    })
}

fn get(key: &str, serializable: bool) -> Request {
    Request::Range(RangeRequest {
        key: key.as_bytes().to_vec(),
        serializable,
        ..Default::default()
    })
}

fn values(result: Result<Response, Error>) -> Vec<String> {
    match result {
        Ok(Response::Range(RangeResponse { kvs, .. })) => kvs
            .into_iter()
            .map(|kv| String::from_utf8(kv.value).unwrap())
            .collect(),
        other => panic!("expected a range answer, got {other:?}"),
    }
}

impl Cluster {
    /// A new cluster of members `1..=n`, settled with a leader.
    pub(super) fn new(n: u64) -> Self {
        Self::with(n, |_| {})
    }

    pub(super) fn with(n: u64, tune: impl Fn(&mut Config)) -> Self {
        let ids: Vec<u64> = (1..=n).collect();
        let mut cluster = Self {
            members: BTreeMap::new(),
            now: Instant::ZERO,
            network: VecDeque::new(),
            cut: BTreeSet::new(),
            message_bytes_max: usize::MAX,
            proposals_lost_from: BTreeSet::new(),
            next_request: 1,
            leadership_seen: None,
            leaderless: Vec::new(),
        };
        for &id in &ids {
            let mut config = config(id, &ids, ClusterState::New);
            tune(&mut config);
            cluster.start(id, config);
        }
        assert!(
            cluster.run_until(Duration::from_secs(10), |c| c.leader().is_some()),
            "no leader elected"
        );
        cluster
    }

    /// Starts a member on empty storage.
    pub(super) fn start(&mut self, id: u64, config: Config) {
        let log = MemoryLog::default();
        let kv = MemoryKv::default();
        let running = driver::Member::start(config.clone(), log.clone(), kv.clone(), self.now);
        self.members.insert(
            id,
            Member {
                config,
                running: Some(running.unwrap()),
                log,
                kv,
                answers: HashMap::new(),
                watched: Vec::new(),
            },
        );
    }

    pub(super) fn node(&self, id: u64) -> &Node<MemoryLog, MemoryKv> {
        &self.members[&id]
            .running
            .as_ref()
            .expect("member is running")
            .node
    }

    pub(super) fn node_mut(&mut self, id: u64) -> &mut Node<MemoryLog, MemoryKv> {
        &mut self
            .members
            .get_mut(&id)
            .and_then(|m| m.running.as_mut())
            .expect("member is running")
            .node
    }

    pub(super) fn running(&self) -> Vec<u64> {
        self.members
            .iter()
            .filter(|(_, m)| m.running.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// The highest term of a running member.
    pub(super) fn max_term(&self) -> u64 {
        self.running()
            .into_iter()
            .map(|id| self.node(id).term())
            .max()
            .unwrap_or(0)
    }

    /// The running leader of the highest term, if any.
    pub(super) fn leader(&self) -> Option<u64> {
        self.running()
            .into_iter()
            .filter(|&id| self.node(id).role() == Role::Leader)
            .max_by_key(|&id| self.node(id).term())
    }

    pub(super) fn followers(&self) -> Vec<u64> {
        let leader = self.leader();
        self.running()
            .into_iter()
            .filter(|&id| Some(id) != leader)
            .collect()
    }

    pub(super) fn isolate(&mut self, id: u64) {
        for &other in self.members.keys() {
            if other != id {
                self.cut.insert((id, other));
                self.cut.insert((other, id));
            }
        }
        self.note_leadership();
    }

    pub(super) fn heal(&mut self) {
        self.cut.clear();
        self.note_leadership();
    }

    /// Stops member `id` cleanly: its backend synced, as a member asked
    /// to stop syncs it.
    pub(super) fn stop(&mut self, id: u64) {
        let member = self.members.get_mut(&id).unwrap();
        member.running = None;
        member.kv.sync().expect("the in-memory backend syncs");
    }

    /// Stops member `id` as a crash would: its backend loses the commits
    /// since its last sync, and its log keeps what was appended (appends
    /// are durable when they return).
    pub(super) fn crash(&mut self, id: u64) {
        let member = self.members.get_mut(&id).unwrap();
        member.running = None;
        member.kv.lose_unsynced();
        self.note_leadership();
    }

    /// From now on, records in [`Cluster::leaderless`] the spans of
    /// virtual time in which no leader could commit.
    pub(super) fn track_leadership(&mut self) {
        self.leadership_seen = Some((self.now, self.leader_can_commit()));
    }

    /// Whether the running leader of the highest term reaches a majority
    /// of its voters (itself included) over links that are not cut.
    pub(super) fn leader_can_commit(&self) -> bool {
        let Some(leader) = self.leader() else {
            return false;
        };
        let voters = self.node(leader).raft.conf_state().voters;
        let reached = voters
            .iter()
            .filter(|&&id| {
                let running = self.members.get(&id).is_some_and(|m| m.running.is_some());
                id == leader || (running && self.linked(leader, id))
            })
            .count();
        voters.contains(&leader) && reached * 2 > voters.len()
    }

    /// Whether neither direction of the link between `a` and `b` is cut.
    pub(super) fn linked(&self, a: u64, b: u64) -> bool {
        !self.cut.contains(&(a, b)) && !self.cut.contains(&(b, a))
    }

    /// A look at the leadership, when tracked: the span since the last
    /// look counts as leaderless when either look found no leader that
    /// could commit.
    fn note_leadership(&mut self) {
        let Some((since, could)) = self.leadership_seen else {
            return;
        };
        let can = self.leader_can_commit();
        if !(could && can) && self.now > since {
            match self.leaderless.last_mut() {
                Some((_, end)) if *end == since => *end = self.now,
                _ => self.leaderless.push((since, self.now)),
            }
        }
        self.leadership_seen = Some((self.now, can));
    }

    /// Every running member's raft state and membership, a line each, for
    /// failure messages.
    pub(super) fn summary(&self) -> String {
        let lines: Vec<String> = self
            .running()
            .into_iter()
            .map(|id| {
                let n = self.node(id);
                let conf = n.raft.conf_state();
                let members: Vec<(u64, bool)> =
                    n.members().iter().map(|m| (m.id, m.is_learner)).collect();
                format!(
                    "m{id}: {:?} term {} leader {:?} applied {} committed {} timeout {:?} voters \
                     {:?} learners {:?} members {members:?}",
                    n.role(),
                    n.term(),
                    n.leader(),
                    n.applied_index(),
                    n.raft.committed(),
                    n.poll_timeout(),
                    conf.voters,
                    conf.learners,
                )
            })
            .collect();
        format!("at {:?}:\n{}", self.now, lines.join("\n"))
    }

    /// A read view of member `id`'s backend (running or not).
    pub(super) fn kv_view(&self, id: u64) -> MemoryKvRead {
        self.members[&id].kv.read().expect("an in-memory read view")
    }

    pub(super) fn restart(&mut self, id: u64) {
        let member = self.members.get_mut(&id).unwrap();
        let running = driver::Member::start(
            member.config.clone(),
            member.log.clone(),
            member.kv.clone(),
            self.now,
        );
        member.running = Some(running.unwrap());
        self.note_leadership();
    }

    /// Feeds a request to member `id`; returns its request ID.
    pub(super) fn send(&mut self, id: u64, request: Request) -> RequestId {
        let request_id = self.next_request;
        self.next_request += 1;
        let now = self.now;
        self.node_mut(id).handle(
            now,
            Input::Client(request_id, request, Credentials::Anonymous),
        );
        request_id
    }

    /// Feeds a watch request on `stream` to member `id`; what it answers
    /// collects in the member's `watched`.
    pub(super) fn watch(&mut self, id: u64, stream: StreamId, request: WatchRequest) {
        let now = self.now;
        self.node_mut(id).handle(
            now,
            Input::Watch {
                stream,
                request,
                credentials: Credentials::Anonymous,
            },
        );
    }

    pub(super) fn take_answer(
        &mut self,
        id: u64,
        request_id: RequestId,
    ) -> Option<Result<Response, Error>> {
        self.members.get_mut(&id)?.answers.remove(&request_id)
    }

    /// Sends a request and runs the cluster until it is answered.
    pub(super) fn call(&mut self, id: u64, request: Request) -> Result<Response, Error> {
        let request_id = self.send(id, request);
        let answered = self.run_until(CALL_TIME_MAX, |c| {
            c.members[&id].answers.contains_key(&request_id)
        });
        assert!(answered, "request to {id} not answered");
        self.take_answer(id, request_id).unwrap()
    }

    /// Delivers everything and drains every member until nothing moves.
    fn settle(&mut self) {
        for _ in 0..STEPS_MAX {
            let mut busy = false;
            for id in self.running() {
                busy |= self.drain(id);
            }
            busy |= self.deliver();
            if !busy {
                return;
            }
        }
        panic!("the cluster never settles");
    }

    /// Runs virtual time forward, firing timers, until `done` holds (true)
    /// or `limit` has passed (false).
    pub(super) fn run_until(&mut self, limit: Duration, done: impl Fn(&Self) -> bool) -> bool {
        let until = self.now + limit;
        for _ in 0..STEPS_MAX {
            self.settle();
            self.note_leadership();
            if done(self) {
                return true;
            }
            let next = self
                .running()
                .into_iter()
                .filter_map(|id| self.node(id).poll_timeout())
                .min();
            let Some(next) = next.filter(|&t| t <= until) else {
                self.now = until;
                self.fire_timers();
                self.settle();
                self.note_leadership();
                return done(self);
            };
            self.now = self.now.max(next);
            self.fire_timers();
        }
        panic!("too many timer steps:\n{}", self.summary());
    }

    pub(super) fn run_for(&mut self, d: Duration) {
        self.run_until(d, |_| false);
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        for id in self.running() {
            let node = self.node_mut(id);
            if node.poll_timeout().is_some_and(|t| t <= now) {
                node.handle_timeout(now);
            }
        }
    }

    /// Executes member `id`'s outputs on the reference driver and carries
    /// what leaves it; returns whether there was anything.
    fn drain(&mut self, id: u64) -> bool {
        let now = self.now;
        let member = self.members.get_mut(&id).unwrap();
        let Some(running) = member.running.as_mut() else {
            return false;
        };
        let effects = running
            .drain(now)
            .unwrap_or_else(|e| panic!("member {id}: {e}"));
        let any = !effects.is_empty();
        for effect in effects {
            match effect {
                Effect::Send(m) => {
                    let fits =
                        protobuf::Message::compute_size(&m) as usize <= self.message_bytes_max;
                    let lost = m.msg_type == MessageType::MsgPropose
                        && self.proposals_lost_from.contains(&id);
                    if fits && !lost && !self.cut.contains(&(id, m.to)) {
                        self.network.push_back(Packet::Message(m));
                    }
                }
                Effect::SendSnapshot { to, message, view } => {
                    if self.cut.contains(&(id, to)) {
                        self.network.push_back(Packet::SnapshotReport {
                            sender: id,
                            to,
                            delivered: false,
                        });
                    } else {
                        self.network.push_back(Packet::Snapshot {
                            from: id,
                            message,
                            view,
                        });
                    }
                }
                Effect::Answer(request_id, result) => {
                    member.answers.insert(request_id, result);
                }
                Effect::Watch(stream, response) => member.watched.push((stream, response)),
                // Ranges here all go through the node.
                Effect::DirectReads(_) => {}
            }
        }
        any
    }

    /// Delivers the packets in flight; returns whether there were any.
    fn deliver(&mut self) -> bool {
        let packets = std::mem::take(&mut self.network);
        let any = !packets.is_empty();
        let now = self.now;
        for packet in packets {
            match packet {
                Packet::Message(m) => {
                    let (from, to) = (m.from, m.to);
                    if self.cut.contains(&(from, to)) {
                        continue;
                    }
                    if let Some(running) =
                        self.members.get_mut(&to).and_then(|m| m.running.as_mut())
                    {
                        running.node.handle(now, Input::Peer(m));
                    }
                }
                Packet::Snapshot {
                    from,
                    message,
                    view,
                } => {
                    let to = message.to;
                    let receiver = self.members.get_mut(&to).and_then(|m| m.running.as_mut());
                    let delivered = match receiver {
                        Some(running) if !self.cut.contains(&(from, to)) => {
                            running.receive_snapshot(now, message, view);
                            true
                        }
                        _ => false,
                    };
                    self.network.push_back(Packet::SnapshotReport {
                        sender: from,
                        to,
                        delivered,
                    });
                }
                Packet::SnapshotReport {
                    sender,
                    to,
                    delivered,
                } => {
                    if let Some(running) = self
                        .members
                        .get_mut(&sender)
                        .and_then(|m| m.running.as_mut())
                    {
                        running
                            .node
                            .handle(now, Input::SnapshotSent { to, delivered });
                    }
                }
            }
        }
        any
    }

    /// The value member `id` holds for `key`, read locally.
    fn local(&mut self, id: u64, key: &str) -> Vec<String> {
        values(self.call(id, get(key, true)))
    }
}

#[test]
fn three_members_elect_one_leader_and_replicate_writes() {
    let mut c = Cluster::new(3);
    let leader = c.leader().unwrap();
    let Ok(Response::Put(answer)) = c.call(leader, put("k", "v1")) else {
        panic!("put on the leader failed");
    };
    let header = answer.header.unwrap();
    assert_eq!((header.revision, header.member_id), (2, leader));
    c.run_for(Duration::from_millis(500));
    for id in 1..=3 {
        assert_eq!(c.local(id, "k"), vec!["v1"], "member {id}");
        assert_eq!(c.node(id).leader(), Some(leader));
    }
    let status = c.call(leader, Request::Status).unwrap();
    let Response::Status(status) = status else {
        panic!("{status:?}")
    };
    assert_eq!(status.leader, leader);
    assert!(!status.is_learner);
    let Ok(Response::MemberList(list)) = c.call(
        leader,
        Request::MemberList(MemberListRequest { linearizable: true }),
    ) else {
        panic!("member list failed");
    };
    let names: Vec<_> = list.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["m1", "m2", "m3"]);
    assert_eq!(list.members[1].peer_ur_ls, vec![url(2)]);
}

#[test]
fn a_follower_forwards_writes_to_the_leader_and_reads_linearizably() {
    let mut c = Cluster::new(3);
    let follower = c.followers()[0];
    let Ok(Response::Put(answer)) = c.call(follower, put("k", "from-follower")) else {
        panic!("forwarded put failed");
    };
    let header = answer.header.unwrap();
    assert_eq!(
        header.member_id, follower,
        "the follower answers its client"
    );
    assert_eq!(header.revision, 2);
    // A linearizable read on the other follower sees the write at once.
    let other = c.followers()[1];
    assert_eq!(
        values(c.call(other, get("k", false))),
        vec!["from-follower"]
    );
    // Many writes through a follower, answered in order with their revisions.
    let ids: Vec<_> = (0..20)
        .map(|i| c.send(follower, put(&format!("k{i:02}"), "v")))
        .collect();
    c.run_for(Duration::from_millis(200));
    for (k, request_id) in ids.into_iter().enumerate() {
        let Some(Ok(Response::Put(p))) = c.take_answer(follower, request_id) else {
            panic!("write {k} not answered");
        };
        assert_eq!(p.header.unwrap().revision, 3 + k as i64);
    }
}

#[test]
fn a_cut_off_follower_serves_local_reads_and_reports_no_leader() {
    let mut c = Cluster::new(3);
    let leader = c.leader().unwrap();
    c.call(leader, put("k", "old")).unwrap();
    c.run_for(Duration::from_millis(300));
    let cut_off = c.followers()[0];
    c.isolate(cut_off);
    c.call(leader, put("k", "new")).unwrap();
    // Serializable: answered at once from the local (stale) state.
    assert_eq!(c.local(cut_off, "k"), vec!["old"]);
    // Linearizable: the round never completes; once the follower gives up
    // on its leader the read fails rather than hanging.
    let read = c.call(cut_off, get("k", false));
    assert!(
        matches!(read, Err(Error::LeaderChanged | Error::NoLeader)),
        "{read:?}"
    );
    // With no leader known, a write fails with etcd's "no leader".
    c.run_for(Duration::from_secs(3));
    assert_eq!(c.node(cut_off).leader(), None);
    assert_eq!(c.call(cut_off, put("k", "x")), Err(Error::NoLeader));
    // The rest of the cluster was never disturbed (pre-vote).
    assert_eq!(c.leader(), Some(leader));
    c.heal();
    c.run_for(Duration::from_secs(2));
    assert_eq!(
        c.leader(),
        Some(leader),
        "the rejoining member deposed nobody"
    );
    assert_eq!(values(c.call(cut_off, get("k", false))), vec!["new"]);
}

#[test]
fn a_leader_change_answers_pending_writes_instead_of_hanging() {
    let mut c = Cluster::new(3);
    let old = c.leader().unwrap();
    c.isolate(old);
    let pending = c.send(old, put("lost", "v"));
    // The others elect a new leader; the old one steps down (check-quorum)
    // and answers its uncommitted write.
    assert!(c.run_until(Duration::from_secs(10), |c| {
        c.members[&old].answers.contains_key(&pending)
    }));
    assert_eq!(c.take_answer(old, pending), Some(Err(Error::LeaderChanged)));
    assert!(c.run_until(Duration::from_secs(10), |c| c
        .leader()
        .is_some_and(|l| l != old)));
    let new = c.leader().unwrap();
    c.call(new, put("k", "after")).unwrap();
    c.heal();
    c.run_for(Duration::from_secs(1));
    // The old leader's entry was replaced; it follows and has the new write.
    assert_eq!(c.node(old).leader(), Some(new));
    assert_eq!(c.local(old, "k"), vec!["after"]);
    assert!(c.local(old, "lost").is_empty());
}

#[test]
fn crashed_members_restart_and_catch_up() {
    let mut c = Cluster::new(3);
    let leader = c.leader().unwrap();
    let follower = c.followers()[0];
    c.crash(follower);
    for i in 0..10 {
        c.call(leader, put(&format!("k{i}"), "v")).unwrap();
    }
    c.restart(follower);
    c.run_for(Duration::from_secs(2));
    assert_eq!(c.local(follower, "k9"), vec!["v"]);
    // Now the leader crashes: the others elect a new one and keep serving.
    c.crash(leader);
    assert!(c.run_until(Duration::from_secs(10), |c| c.leader().is_some()));
    let new = c.leader().unwrap();
    c.call(new, put("k", "after-crash")).unwrap();
    c.restart(leader);
    c.run_for(Duration::from_secs(2));
    assert_eq!(c.local(leader, "k"), vec!["after-crash"]);
    assert_eq!(c.leader(), Some(new));
}

#[test]
fn move_leader_hands_over_and_members_can_be_removed() {
    let mut c = Cluster::new(3);
    let leader = c.leader().unwrap();
    let target = c.followers()[0];
    let Ok(Response::MoveLeader(_)) = c.call(
        leader,
        Request::MoveLeader(MoveLeaderRequest { target_id: target }),
    ) else {
        panic!("move leader failed");
    };
    assert_eq!(c.leader(), Some(target));
    assert_eq!(
        c.call(
            leader,
            Request::MoveLeader(MoveLeaderRequest { target_id: target })
        ),
        Err(Error::NotLeader)
    );
    // Graceful stop of the new leader hands over again.
    let next = c
        .node_mut(target)
        .transfer_leadership_for_shutdown(Instant::ZERO);
    assert!(next.is_some());
    assert!(c.run_until(Duration::from_secs(3), |c| c.leader() == next));
    let leader = c.leader().unwrap();
    let removed = c.followers()[0];
    let Ok(Response::MemberRemove(r)) = c.call(
        leader,
        Request::MemberRemove(MemberRemoveRequest { id: removed }),
    ) else {
        panic!("remove failed");
    };
    assert_eq!(r.members.len(), 2);
    assert_eq!(
        c.call(
            leader,
            Request::MemberRemove(MemberRemoveRequest { id: removed })
        ),
        Err(Error::MemberNotFound)
    );
    c.crash(removed);
    c.call(leader, put("k", "two members")).unwrap();
}

/// Auth changes go through the log from any member; a member that was
/// down while the log was compacted gets the users and roles with the
/// snapshot that catches it up.
#[test]
fn auth_changes_replicate_and_travel_in_snapshots() {
    use crate::auth::{AuthRead, AuthRequest, AuthResponse};
    use oxetcd_proto::etcdserverpb::{AuthRoleAddRequest, AuthUserAddRequest};
    use oxetcd_proto::oxetcdpb::auth_change::Change;

    let mut c = Cluster::with(3, |config| {
        config.snapshot_count = 20;
        config.snapshot_catch_up_entries = 5;
    });
    let leader = c.leader().unwrap();
    let [follower, late] = c.followers()[..] else {
        panic!("three members")
    };
    c.crash(late);
    let role = Change::RoleAdd(AuthRoleAddRequest {
        name: "readers".into(),
    });
    let user = Change::UserAdd(AuthUserAddRequest {
        name: "alice".into(),
        hashed_password: "$2b$10$hash".into(),
        ..Default::default()
    });
    for change in [role, user] {
        let asked = Request::Auth(AuthRequest::Change(change));
        assert!(matches!(c.call(follower, asked), Ok(Response::Auth(_))));
    }
    for i in 0..60 {
        c.call(leader, put(&format!("k{i:02}"), "v")).unwrap();
    }
    assert!(c.members[&leader].log.state().unwrap().first_index > 1);
    c.restart(late);
    assert!(c.run_until(Duration::from_secs(5), |c| {
        c.node(late).applied_index() >= c.node(leader).applied_index()
    }));
    for id in [leader, follower, late] {
        let list = Request::Auth(AuthRequest::Read(AuthRead::UserList));
        let Ok(Response::Auth(AuthResponse::UserList(users))) = c.call(id, list) else {
            panic!("user list on {id}")
        };
        assert_eq!(users.users, ["alice"], "member {id}");
        let list = Request::Auth(AuthRequest::Read(AuthRead::RoleList));
        let Ok(Response::Auth(AuthResponse::RoleList(roles))) = c.call(id, list) else {
            panic!("role list on {id}")
        };
        assert_eq!(roles.roles, ["readers"], "member {id}");
    }
}

#[test]
fn a_learner_catches_up_by_snapshot_refuses_clients_and_is_promoted() {
    let mut c = Cluster::with(3, |config| {
        config.snapshot_count = 20;
        config.snapshot_catch_up_entries = 5;
    });
    let leader = c.leader().unwrap();
    for i in 0..60 {
        c.call(leader, put(&format!("k{i:02}"), "v")).unwrap();
    }
    // The leader compacted its log: a new member can only get a snapshot.
    assert!(c.members[&leader].log.state().unwrap().first_index > 1);
    let add = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec![url(4)],
        is_learner: true,
    });
    let Ok(Response::MemberAdd(added)) = c.call(leader, add) else {
        panic!("learner add failed");
    };
    let learner = added.member.unwrap();
    assert!(learner.is_learner);
    assert_eq!(added.members.len(), 4);
    // A second learner is one too many; a taken URL is refused.
    let again = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec![url(5)],
        is_learner: true,
    });
    assert_eq!(c.call(leader, again), Err(Error::TooManyLearners));
    let taken = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec![url(4)],
        is_learner: false,
    });
    assert_eq!(c.call(leader, taken), Err(Error::PeerUrlExists));
    // Not started yet: it cannot be promoted.
    let promote = Request::MemberPromote(MemberPromoteRequest { id: learner.id });
    assert_eq!(c.call(leader, promote.clone()), Err(Error::LearnerNotReady));
    // A follower asks the leader, which alone knows, and relays its answer.
    let follower = c.followers()[0];
    assert_eq!(
        c.call(follower, promote.clone()),
        Err(Error::LearnerNotReady)
    );

    let mut config = config(learner.id, &[1, 2, 3], ClusterState::Existing);
    config.snapshot_count = 20;
    c.start(learner.id, config);
    assert!(c.run_until(Duration::from_secs(5), |c| {
        c.node(learner.id).applied_index() >= c.node(leader).applied_index()
    }));
    assert!(c.node(learner.id).is_learner());
    assert_eq!(c.local(learner.id, "k59"), vec!["v"]);
    let learner_log = c.members[&learner.id].log.state().unwrap();
    assert!(
        learner_log.first_index > 1,
        "caught up by a snapshot, not the log"
    );
    assert_eq!(c.node(learner.id).members().len(), 4);
    assert_eq!(
        c.call(learner.id, put("k", "v")),
        Err(Error::NotSupportedForLearner)
    );
    assert_eq!(
        c.call(learner.id, get("k00", false)),
        Err(Error::NotSupportedForLearner)
    );
    let Ok(Response::Status(status)) = c.call(learner.id, Request::Status) else {
        panic!("status on a learner failed");
    };
    assert!(status.is_learner);
    assert_eq!(status.leader, leader);

    // Promoted through a follower, as etcdctl pointed at any member does.
    let Ok(Response::MemberPromote(promoted)) = c.call(follower, promote.clone()) else {
        panic!("promote through a follower failed");
    };
    assert!(promoted.members.iter().all(|m| !m.is_learner));
    assert_eq!(
        promoted.header.as_ref().map(|h| h.member_id),
        Some(follower),
        "the header is the asked member's, as etcd's"
    );
    assert_eq!(
        c.call(leader, promote.clone()),
        Err(Error::MemberNotLearner)
    );
    assert_eq!(c.call(follower, promote), Err(Error::MemberNotLearner));
    c.run_for(Duration::from_millis(500));
    assert!(!c.node(learner.id).is_learner());
    assert_eq!(values(c.call(learner.id, get("k00", false))), vec!["v"]);
    // Four voters now: with one of them down, the other three (the
    // promoted learner among them) still commit.
    let other = c
        .followers()
        .into_iter()
        .find(|&f| f != learner.id)
        .unwrap();
    c.crash(other);
    c.call(leader, put("quorum", "of three")).unwrap();
}

#[test]
fn member_updates_go_through_the_log_and_bad_input_gets_etcds_errors() {
    let mut c = Cluster::new(3);
    let leader = c.leader().unwrap();
    let follower = c.followers()[0];
    let update = Request::MemberUpdate(MemberUpdateRequest {
        id: follower,
        peer_ur_ls: vec!["http://m2-new:2380".into()],
    });
    let Ok(Response::MemberUpdate(updated)) = c.call(follower, update) else {
        panic!("update failed");
    };
    let record = updated.members.iter().find(|m| m.id == follower).unwrap();
    assert_eq!(record.peer_ur_ls, vec!["http://m2-new:2380"]);
    let bad = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec!["m9:2380".into()],
        is_learner: false,
    });
    assert_eq!(c.call(leader, bad), Err(Error::MemberBadUrls));
    let missing_again = || Request::MemberPromote(MemberPromoteRequest { id: 0x99 });
    assert_eq!(c.call(leader, missing_again()), Err(Error::MemberNotFound));
    let voter = Request::MemberPromote(MemberPromoteRequest { id: follower });
    assert_eq!(c.call(leader, voter.clone()), Err(Error::MemberNotLearner));
    // The same answers through a follower, which asks the leader.
    assert_eq!(
        c.call(follower, missing_again()),
        Err(Error::MemberNotFound)
    );
    assert_eq!(c.call(follower, voter), Err(Error::MemberNotLearner));
    // With one of three down, adding a voter would leave two running of
    // four: etcd refuses.
    let down = c.followers().into_iter().find(|&f| f != follower).unwrap();
    c.crash(down);
    c.run_for(Duration::from_secs(2));
    let add = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec![url(7)],
        is_learner: false,
    });
    assert_eq!(c.call(leader, add), Err(Error::MemberNotEnoughStarted));
    let remove = Request::MemberRemove(MemberRemoveRequest { id: follower });
    assert_eq!(c.call(leader, remove), Err(Error::MemberNotEnoughStarted));
}

/// `--strict-reconfig-check=false`: with one of three down, the leader
/// removes a running member anyway (etcd's rule; quorum is the operator's
/// risk then), where the strict check refuses it.
#[test]
fn without_the_strict_check_a_member_is_removed_whatever_quorum_says() {
    let mut c = Cluster::with(3, |config| config.strict_reconfig_check = false);
    let leader = c.leader().unwrap();
    let [down, removed] = c.followers()[..] else {
        panic!("three members")
    };
    c.crash(down);
    c.run_for(Duration::from_secs(2));
    let remove = Request::MemberRemove(MemberRemoveRequest { id: removed });
    let Ok(Response::MemberRemove(answer)) = c.call(leader, remove) else {
        panic!("the removal was refused")
    };
    assert!(answer.members.iter().all(|m| m.id != removed));
}

#[test]
fn leases_expire_on_the_leader_only_and_watches_fire_on_every_member() {
    let mut c = Cluster::new(3);
    let leader = c.leader().unwrap();
    for id in 1..=3 {
        let request = WatchRequest {
            request_union: Some(
                oxetcd_proto::etcdserverpb::watch_request::RequestUnion::CreateRequest(
                    WatchCreateRequest {
                        key: b"a".to_vec(),
                        range_end: b"b".to_vec(),
                        ..Default::default()
                    },
                ),
            ),
        };
        c.watch(id, 1, request);
    }
    let Ok(Response::LeaseGrant(grant)) = c.call(
        leader,
        Request::LeaseGrant(LeaseGrantRequest { ttl: 5, id: 0 }),
    ) else {
        panic!("grant failed");
    };
    let mut with_lease = PutRequest {
        key: b"a1".to_vec(),
        value: b"v".to_vec(),
        lease: grant.id,
        ..Default::default()
    };
    c.call(leader, Request::Put(with_lease.clone())).unwrap();
    with_lease.key = b"a2".to_vec();
    let follower = c.followers()[0];
    c.call(follower, Request::Put(with_lease)).unwrap();
    // Keep-alives are the leader's.
    let keep_alive =
        Request::LeaseKeepAlive(oxetcd_proto::etcdserverpb::LeaseKeepAliveRequest { id: grant.id });
    // A follower forwards it; the leader renews.
    let Ok(Response::LeaseKeepAlive(renewed)) = c.call(follower, keep_alive) else {
        panic!("keep-alive through a follower failed");
    };
    assert_eq!(renewed.ttl, 5);
    c.run_for(Duration::from_secs(2));
    for id in 1..=3 {
        assert_eq!(c.local(id, "a1"), vec!["v"], "member {id}");
    }
    // The leader dies; the new one expires the lease (remaining TTL plus
    // an election timeout) and its keys go on every member at once.
    c.crash(leader);
    c.run_for(Duration::from_secs(10));
    let new = c.leader().unwrap();
    for id in c.running() {
        assert!(c.local(id, "a1").is_empty(), "member {id} kept a1");
        assert!(c.local(id, "a2").is_empty(), "member {id} kept a2");
    }
    // Exactly one revoke went through the log.
    let log = &c.members[&new].log;
    let state = log.state().unwrap();
    let revokes = log
        .entries(state.first_index, state.last_index + 1)
        .unwrap()
        .iter()
        .filter(|e| e.entry_type == EntryType::EntryNormal && !e.data.is_empty())
        .filter(|e| {
            matches!(
                Proposal::decode(e.data.as_ref()).unwrap().request,
                Some(proposal::Request::LeaseRevoke(_))
            )
        })
        .count();
    assert_eq!(revokes, 1);
    // Every running member told its watcher about both puts and the
    // deletion, in one revision.
    for id in c.running() {
        let events: Vec<(i64, usize)> = c.members[&id]
            .watched
            .iter()
            .map(|(_, r)| r)
            .filter(|r| !r.events.is_empty())
            .map(|r| (r.header.unwrap().revision, r.events.len()))
            .collect();
        assert_eq!(events, vec![(2, 1), (3, 1), (4, 2)], "member {id}");
    }
}

/// Every member publishes its name and client URLs through the log once a
/// leader is known, and a member that applies its own removal says so.
#[test]
fn members_publish_their_attributes_and_learn_their_removal() {
    let mut c = Cluster::with(3, |config| {
        config.client_urls = vec![format!("http://client-{}:2379", config.member_id)];
    });
    let published = |c: &Cluster| {
        c.running().iter().all(|&id| {
            c.node(id).members().iter().all(|m| {
                m.name == format!("m{}", m.id)
                    && m.client_ur_ls == [format!("http://client-{}:2379", m.id)]
            })
        })
    };
    assert!(
        c.run_until(Duration::from_secs(5), published),
        "{:?}",
        c.node(1).members()
    );
    let leader = c.leader().unwrap();
    let removed = c.followers()[0];
    assert!(!c.node(removed).is_removed());
    let Ok(Response::MemberRemove(_)) = c.call(
        leader,
        Request::MemberRemove(MemberRemoveRequest { id: removed }),
    ) else {
        panic!("remove failed");
    };
    // The removal may reach the removed member with the next heartbeat.
    c.run_for(Duration::from_millis(500));
    let others_know = c
        .running()
        .iter()
        .filter(|&&id| id != removed)
        .all(|&id| !c.node(id).is_removed());
    assert!(others_know);
    assert!(
        c.node(removed).is_removed(),
        "the removed member did not learn it"
    );
}

fn keep_alive(id: i64) -> Request {
    Request::LeaseKeepAlive(oxetcd_proto::etcdserverpb::LeaseKeepAliveRequest { id })
}

fn time_to_live(id: i64) -> Request {
    Request::LeaseTimeToLive(oxetcd_proto::etcdserverpb::LeaseTimeToLiveRequest { id, keys: true })
}

/// A time-to-live with keys through a follower, for a lease with more keys
/// than one peer message may carry: the follower lists the keys itself, so
/// every peer message stays small and the answer holds every key, the
/// leader's TTL and the asked member's header. A lease revoked meanwhile is
/// not found.
#[test]
fn time_to_live_through_a_follower_lists_more_keys_than_a_message_carries() {
    const KEYS: usize = 400;
    /// 100-byte keys: 40 kB of keys against 16 KiB messages.
    const MESSAGE_BYTES_MAX: usize = 16 * 1024;
    let mut c = Cluster::new(3);
    let follower = c.followers()[0];
    let Ok(Response::LeaseGrant(grant)) = c.call(
        follower,
        Request::LeaseGrant(LeaseGrantRequest { ttl: 60, id: 0 }),
    ) else {
        panic!("grant failed");
    };
    let key = |i: usize| format!("{i:0>100}").into_bytes();
    for i in 0..KEYS {
        let put = PutRequest {
            key: key(i),
            value: b"v".to_vec(),
            lease: grant.id,
            ..Default::default()
        };
        c.call(follower, Request::Put(put)).unwrap();
    }
    c.message_bytes_max = MESSAGE_BYTES_MAX;
    let Ok(Response::LeaseTimeToLive(ttl)) = c.call(follower, time_to_live(grant.id)) else {
        panic!("time-to-live with many keys through a follower failed");
    };
    let expected: Vec<Vec<u8>> = {
        let mut keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
        keys.sort();
        keys
    };
    assert_eq!(ttl.keys.len(), KEYS);
    assert!(ttl.keys == expected, "the keys differ");
    assert_eq!(ttl.granted_ttl, 60);
    assert!((55..=60).contains(&ttl.ttl), "ttl {}", ttl.ttl);
    assert_eq!(ttl.header.unwrap().member_id, c.node(follower).member_id());

    // Revoked while the follower waits to apply what the leader had: the
    // leader saw the lease, the follower reads after the revoke.
    let leader = c.leader().unwrap();
    let query = c.send(follower, time_to_live(grant.id));
    let revoke = c.send(
        leader,
        Request::LeaseRevoke(oxetcd_proto::etcdserverpb::LeaseRevokeRequest { id: grant.id }),
    );
    let answered = c.run_until(CALL_TIME_MAX, |c| {
        c.members[&follower].answers.contains_key(&query)
            && c.members[&leader].answers.contains_key(&revoke)
    });
    assert!(answered, "the query or the revoke was never answered");
    let Some(Ok(Response::LeaseTimeToLive(ttl))) = c.take_answer(follower, query) else {
        panic!("time-to-live failed");
    };
    // Either order is linearizable; each answer must be whole.
    if ttl.ttl == -1 {
        assert!(ttl.keys.is_empty());
    } else {
        assert_eq!(ttl.keys.len(), KEYS);
    }
}

/// Keep-alives and time-to-live queries sent to a follower reach the
/// leader and renew there; one in flight when the leader dies is sent
/// again to the next leader instead of failing.
#[test]
fn followers_forward_lease_requests_to_the_leader() {
    let mut c = Cluster::new(3);
    let leader = c.leader().unwrap();
    let follower = c.followers()[0];
    let Ok(Response::LeaseGrant(grant)) = c.call(
        follower,
        Request::LeaseGrant(LeaseGrantRequest { ttl: 5, id: 0 }),
    ) else {
        panic!("grant failed");
    };
    let put = PutRequest {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        lease: grant.id,
        ..Default::default()
    };
    c.call(follower, Request::Put(put)).unwrap();
    let Ok(Response::LeaseTimeToLive(ttl)) = c.call(follower, time_to_live(grant.id)) else {
        panic!("time-to-live through a follower failed");
    };
    assert_eq!((ttl.granted_ttl, ttl.keys), (5, vec![b"k".to_vec()]));
    assert!((4..=5).contains(&ttl.ttl), "ttl {}", ttl.ttl);
    // The header is the asked member's, as etcd fills it.
    assert_eq!(ttl.header.unwrap().member_id, c.node(follower).member_id());

    // Keep-alives through the follower hold the lease well past its TTL.
    for _ in 0..4 {
        c.run_for(Duration::from_secs(3));
        let Ok(Response::LeaseKeepAlive(renewed)) = c.call(follower, keep_alive(grant.id)) else {
            panic!("keep-alive through a follower failed");
        };
        assert_eq!(renewed.ttl, 5);
    }
    for id in 1..=3 {
        assert_eq!(c.local(id, "k"), vec!["v"], "member {id}");
    }
    let Ok(Response::LeaseLeases(leases)) = c.call(follower, Request::LeaseLeases) else {
        panic!("lease list on a follower failed");
    };
    assert_eq!(leases.leases.len(), 1);
    // Unknown leases are answered as etcd answers them.
    let Ok(Response::LeaseKeepAlive(unknown)) = c.call(follower, keep_alive(grant.id + 1)) else {
        panic!("keep-alive of an unknown lease failed");
    };
    assert_eq!(unknown.ttl, 0);
    let Ok(Response::LeaseTimeToLive(unknown)) = c.call(follower, time_to_live(grant.id + 1))
    else {
        panic!("time-to-live of an unknown lease failed");
    };
    assert_eq!(unknown.ttl, -1);

    // A forward lost with its leader goes to the next one.
    c.cut.insert((follower, leader));
    let pending = c.send(follower, keep_alive(grant.id));
    c.run_for(Duration::from_millis(200));
    assert!(c.take_answer(follower, pending).is_none());
    c.crash(leader);
    c.heal();
    let answered = c.run_until(CALL_TIME_MAX, |c| {
        c.members[&follower].answers.contains_key(&pending)
    });
    assert!(answered, "the forwarded keep-alive was never answered");
    let Some(Ok(Response::LeaseKeepAlive(renewed))) = c.take_answer(follower, pending) else {
        panic!("the forwarded keep-alive failed after the leader change");
    };
    assert_eq!(renewed.ttl, 5);
    assert_ne!(c.leader(), Some(leader));
}

#[path = "alarm_tests.rs"]
mod alarm_tests;

/// `LearnerAutoPromote`: the leader promotes a learner once it is in sync,
/// and not before it has started.
#[test]
fn with_auto_promote_an_in_sync_learner_becomes_a_voter_by_itself() {
    let mut c = Cluster::with(3, |config| config.learner_auto_promote = true);
    let leader = c.leader().unwrap();
    for i in 0..10 {
        c.call(leader, put(&format!("k{i}"), "v")).unwrap();
    }
    let add = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec![url(4)],
        is_learner: true,
    });
    let Ok(Response::MemberAdd(added)) = c.call(leader, add) else {
        panic!("learner add failed");
    };
    let learner = added.member.unwrap();
    // Not started: it stays a learner.
    c.run_for(Duration::from_secs(1));
    let listed = |c: &Cluster| {
        c.node(leader)
            .members()
            .into_iter()
            .find(|m| m.id == learner.id)
            .map(|m| m.is_learner)
    };
    assert_eq!(listed(&c), Some(true));
    let mut config = config(learner.id, &[1, 2, 3], ClusterState::Existing);
    config.learner_auto_promote = true;
    c.start(learner.id, config);
    assert!(
        c.run_until(Duration::from_secs(5), |c| listed(c) == Some(false)),
        "the learner was not promoted"
    );
    c.run_for(Duration::from_millis(500));
    assert!(!c.node(learner.id).is_learner());
    assert_eq!(c.node(leader).members().len(), 4);
}

/// Without the gate a learner in sync stays a learner.
#[test]
fn without_auto_promote_a_learner_stays_one() {
    let mut c = Cluster::new(3);
    let leader = c.leader().unwrap();
    let add = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec![url(4)],
        is_learner: true,
    });
    let Ok(Response::MemberAdd(added)) = c.call(leader, add) else {
        panic!("learner add failed");
    };
    let learner = added.member.unwrap();
    c.start(
        learner.id,
        config(learner.id, &[1, 2, 3], ClusterState::Existing),
    );
    assert!(c.run_until(Duration::from_secs(5), |c| {
        c.node(learner.id).applied_index() >= c.node(leader).applied_index()
    }));
    c.run_for(Duration::from_secs(1));
    assert!(c.node(learner.id).is_learner());
}

/// With `fast_lease_keep_alive` (the default) the leader renews a lease it
/// holds at once; without it the keep-alive waits for a read-index round,
/// a heartbeat to the followers and their answers.
fn keep_alive_answered_without_a_round(fast: bool) -> bool {
    let mut c = Cluster::with(3, |config| config.fast_lease_keep_alive = fast);
    let leader = c.leader().unwrap();
    let grant = c.call(
        leader,
        Request::LeaseGrant(LeaseGrantRequest { ttl: 60, id: 0 }),
    );
    let Ok(Response::LeaseGrant(grant)) = grant else {
        panic!("{grant:?}");
    };
    let keep_alive = c.send(leader, keep_alive(grant.id));
    c.drain(leader);
    let at_once = c.members[&leader].answers.contains_key(&keep_alive);
    let answered = c.run_until(CALL_TIME_MAX, |c| {
        c.members[&leader].answers.contains_key(&keep_alive)
    });
    assert!(answered, "keep-alive never answered");
    let Some(Ok(Response::LeaseKeepAlive(renewed))) = c.take_answer(leader, keep_alive) else {
        panic!("keep-alive failed");
    };
    assert_eq!(renewed.ttl, 60);
    at_once
}

#[test]
fn a_fast_keep_alive_skips_the_read_index_round() {
    assert!(keep_alive_answered_without_a_round(true));
    assert!(!keep_alive_answered_without_a_round(false));
}
