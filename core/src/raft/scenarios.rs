//! Scenario tests: the situations from etcd's history, each played out on
//! a calm simulated cluster (see [`super::sim`]) with explicit faults, plus
//! a few exact, message-level checks on a single raft.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{ConfChange, ConfChangeType, Entry, Message, MessageType};
use quickcheck::{Arbitrary, Gen, QuickCheck};

use super::sim::{Options, Sim};
use super::{Action, Config, DurableState, LogSource, PersistId, ProposeError, Raft, Role};
use crate::storage::StorageError;
use crate::Instant;

const ELECTION: Duration = Duration::from_millis(100);

fn ok<T>(result: Result<T, String>) -> T {
    result.unwrap_or_else(|report| panic!("{report}"))
}

/// Runs until a leader has committed its term's first entry; returns it.
fn elect(sim: &mut Sim) -> u64 {
    let found = ok(sim.run_while_not(ELECTION * 20, |s| {
        s.leader().and_then(|l| s.raft(l)).is_some_and(|r| {
            r.committed() == r.last_index() && r.log_term(r.committed()) == Some(r.term())
        })
    }));
    assert!(found, "no leader within 20 election timeouts");
    sim.leader().expect("found")
}

/// Proposes on `id` and drains it; returns the index.
fn propose(sim: &mut Sim, id: u64, data: &[u8]) -> Result<u64, ProposeError> {
    let result = sim.propose(id, data);
    ok(sim.drain(id));
    result
}

/// Whether `id` applied up to `index` within `max`.
fn applies(sim: &mut Sim, id: u64, index: u64, max: Duration) -> bool {
    ok(sim.run_while_not(max, |s| s.applied_index(id) >= index))
}

fn conf_change(sim: &mut Sim, leader: u64, change_type: ConfChangeType, node_id: u64) -> u64 {
    let cc = ConfChange {
        change_type,
        node_id,
        ..Default::default()
    };
    let index = sim
        .raft_mut(leader)
        .expect("leader runs")
        .propose_conf_change(super::encode_conf_change(&cc))
        .expect("change accepted");
    ok(sim.drain(leader));
    index
}

#[test]
fn isolated_leader_steps_down_and_a_new_one_is_elected() {
    let mut sim = Sim::new(1, Options::calm(3));
    let old = elect(&mut sim);
    let old_term = sim.raft(old).unwrap().term();
    let isolated_at = sim.now;
    sim.isolate(old);
    // Check-quorum: the old leader notices within an election timeout
    // (plus one heartbeat interval of granularity).
    let stepped_down = ok(sim.run_while_not(ELECTION * 2, |s| {
        s.raft(old).unwrap().role() != Role::Leader
    }));
    assert!(stepped_down, "isolated leader kept leading");
    let after = sim.now.saturating_since(isolated_at);
    assert!(
        after <= ELECTION + Duration::from_millis(20),
        "stepped down only after {after:?}"
    );
    assert!(
        propose(&mut sim, old, b"lost").is_err(),
        "a deposed leader accepts no writes"
    );
    // The majority side elects a new leader in a higher term and commits.
    let found = ok(sim.run_while_not(ELECTION * 10, |s| s.leader().is_some_and(|l| l != old)));
    assert!(found, "majority elected no new leader");
    let new = sim.leader().unwrap();
    assert!(sim.raft(new).unwrap().term() > old_term);
    let index = propose(&mut sim, new, b"after").expect("new leader takes writes");
    assert!(applies(&mut sim, new, index, ELECTION * 5));
    // Healed, the old leader follows and catches up.
    sim.heal();
    assert!(
        applies(&mut sim, old, index, ELECTION * 10),
        "old leader did not catch up"
    );
    assert_eq!(sim.raft(old).unwrap().leader(), Some(new));
}

/// Two members; the leader removes itself, and from when the
/// removal commits nothing it sends reaches the survivor. Returns the old
/// leader, the survivor and the removal's index, once the old leader
/// applied it (and stepped down) while the survivor has not heard.
fn remove_the_leader_unheard(sim: &mut Sim) -> (u64, u64, u64) {
    let old = elect(sim);
    let survivor = sim.ids().find(|&id| id != old).expect("two members");
    let index = conf_change(sim, old, ConfChangeType::RemoveNode, old);
    let committed = ok(sim.run_while_not(ELECTION * 5, |s| {
        s.raft(old).is_some_and(|r| r.committed() >= index)
    }));
    assert!(committed, "the removal did not commit");
    sim.block(old, survivor);
    assert!(applies(sim, old, index, ELECTION * 5));
    assert_ne!(sim.raft(old).expect("running").role(), Role::Leader);
    assert!(sim.raft(survivor).expect("running").committed() < index);
    (old, survivor, index)
}

/// The survivor of a two-member cluster whose leader removed itself cannot
/// elect itself until it knows the removal committed (it still counts the
/// old leader as a voter), and the runtime stops a removed member once it
/// stops saying farewell. The farewell's heartbeats get through once the
/// link heals, and it ends as soon as the survivor answers one.
#[test]
fn a_removed_leader_tells_the_last_voter_before_it_stops() {
    let heartbeat = Options::calm(2).heartbeat_interval;
    let mut sim = Sim::new(3, Options::calm(2));
    let (old, survivor, index) = remove_the_leader_unheard(&mut sim);
    // As the runtime does: the removed member stops once it applied its
    // removal and says no farewell.
    let stops = |s: &Sim| {
        s.raft(old)
            .is_none_or(|r| s.applied_index(old) >= index && !r.saying_farewell())
    };
    if ok(sim.run_while_not(heartbeat * 3, stops)) {
        sim.crash(old);
    }
    sim.heal();
    let said = ok(sim.run_while_not(heartbeat * 3, stops));
    assert!(said, "the farewell was not answered once the link healed");
    sim.crash(old);
    assert!(sim.raft(survivor).expect("running").committed() >= index);
    // Its leader gone, the survivor campaigns within a heartbeat interval.
    let leads = ok(sim.run_while_not(heartbeat * 3, |s| s.leader() == Some(survivor)));
    assert!(leads, "the survivor did not take over at once");
    assert_eq!(
        sim.raft(survivor).expect("running").conf_state().voters,
        [survivor]
    );
}

/// Unanswered, a farewell ends after an election timeout.
#[test]
fn an_unanswered_farewell_ends_after_an_election_timeout() {
    let heartbeat = Options::calm(2).heartbeat_interval;
    let mut sim = Sim::new(4, Options::calm(2));
    let (old, _, _) = remove_the_leader_unheard(&mut sim);
    let began = sim.now;
    let ended = ok(sim.run_while_not(ELECTION * 2, |s| {
        !s.raft(old).expect("running").saying_farewell()
    }));
    assert!(ended, "the farewell never ended");
    let took = sim.now.saturating_since(began);
    assert!(
        took >= ELECTION - heartbeat && took <= ELECTION + heartbeat,
        "ended after {took:?}"
    );
}

#[test]
fn isolated_follower_rejoins_without_disrupting_the_leader() {
    let mut sim = Sim::new(2, Options::calm(3));
    let leader = elect(&mut sim);
    let term = sim.raft(leader).unwrap().term();
    let follower = sim.ids().find(|&id| id != leader).unwrap();
    sim.isolate(follower);
    // Alone, it campaigns again and again — with pre-vote, without ever
    // raising its term.
    ok(sim.run_for(ELECTION * 10));
    assert_eq!(
        sim.raft(follower).unwrap().term(),
        term,
        "pre-vote kept the term"
    );
    let index = propose(&mut sim, leader, b"while away").unwrap();
    sim.heal();
    assert!(applies(&mut sim, follower, index, ELECTION * 10));
    assert_eq!(sim.leader(), Some(leader), "leadership was not disturbed");
    assert_eq!(sim.raft(leader).unwrap().term(), term, "no new term");
}

#[test]
fn without_pre_vote_a_rejoining_follower_forces_an_election() {
    // The contrast that motivates pre-vote (and shows the test above is
    // not vacuous).
    let mut opts = Options::calm(3);
    opts.pre_vote = false;
    opts.check_quorum = false;
    let mut sim = Sim::new(3, opts);
    let leader = elect(&mut sim);
    let term = sim.raft(leader).unwrap().term();
    let follower = sim.ids().find(|&id| id != leader).unwrap();
    sim.isolate(follower);
    ok(sim.run_for(ELECTION * 10));
    assert!(sim.raft(follower).unwrap().term() > term);
    sim.heal();
    ok(sim.run_for(ELECTION * 5));
    let new_term = sim.raft(sim.leader().unwrap()).unwrap().term();
    assert!(
        new_term > term,
        "the rejoining follower's term deposed the leader"
    );
}

#[test]
fn adding_a_learner_to_a_single_member_cluster_keeps_quorum() {
    // `member add --learner` of a member that never starts: etcd's advice
    // for safe additions, because a learner does not count.
    let mut opts = Options::calm(2);
    opts.initial_voters = 1;
    let mut sim = Sim::new(4, opts);
    sim.crash(2);
    let leader = elect(&mut sim);
    assert_eq!(leader, 1);
    let index = conf_change(&mut sim, 1, ConfChangeType::AddLearnerNode, 2);
    assert!(applies(&mut sim, 1, index, ELECTION));
    assert_eq!(sim.raft(1).unwrap().conf_state().learners, vec![2]);
    let index = propose(&mut sim, 1, b"still writable").unwrap();
    assert!(
        applies(&mut sim, 1, index, ELECTION),
        "a learner must not cost quorum"
    );
}

#[test]
fn adding_a_voter_that_never_starts_costs_quorum() {
    // The mistyped `member add` of etcd's history: with two voters, one of
    // them absent, nothing commits any more.
    let mut opts = Options::calm(2);
    opts.initial_voters = 1;
    let mut sim = Sim::new(5, opts);
    sim.crash(2);
    let leader = elect(&mut sim);
    let index = conf_change(&mut sim, leader, ConfChangeType::AddNode, 2);
    assert!(
        applies(&mut sim, 1, index, ELECTION),
        "the change itself commits in the old configuration"
    );
    assert_eq!(sim.raft(1).unwrap().conf_state().voters, vec![1, 2]);
    if let Ok(index) = propose(&mut sim, 1, b"stuck") {
        assert!(
            !applies(&mut sim, 1, index, ELECTION * 10),
            "committed without a quorum"
        );
    }
    // Starting the member restores quorum.
    ok(sim.restart(2));
    let found = ok(sim.run_while_not(ELECTION * 20, |s| {
        s.leader()
            .is_some_and(|l| s.raft(l).unwrap().committed() > index)
    }));
    assert!(found, "quorum did not come back with the new member");
}

#[test]
fn new_voter_then_partition_loses_quorum_but_a_new_learner_does_not() {
    for learner in [false, true] {
        let mut opts = Options::calm(4);
        opts.initial_voters = 3;
        let mut sim = Sim::new(6, opts);
        let leader = elect(&mut sim);
        let change = if learner {
            ConfChangeType::AddLearnerNode
        } else {
            ConfChangeType::AddNode
        };
        let index = conf_change(&mut sim, leader, change, 4);
        assert!(
            applies(&mut sim, 4, index, ELECTION * 10),
            "new member caught up"
        );
        // Two members on each side, the leader with one old member.
        let partner = (1..=3).find(|&id| id != leader).unwrap();
        for a in [leader, partner] {
            for b in (1..=4).filter(|&b| b != leader && b != partner) {
                sim.block(a, b);
                sim.block(b, a);
            }
        }
        let index = propose(&mut sim, leader, b"split").unwrap();
        let committed = applies(&mut sim, leader, index, ELECTION * 5);
        if learner {
            assert!(
                committed,
                "2 of 3 voters is a quorum; the learner does not count"
            );
        } else {
            assert!(!committed, "2 of 4 voters is not a quorum");
            // Check-quorum: the leader gives up, and nobody can win.
            ok(sim.run_for(ELECTION * 10));
            assert_eq!(sim.leader(), None, "a leader without quorum");
        }
        sim.heal();
        let found = ok(sim.run_while_not(ELECTION * 20, |s| {
            (1..=4).all(|id| s.applied_index(id) >= index)
        }));
        assert!(found, "cluster did not recover after healing");
    }
}

#[test]
fn learner_replicates_but_never_votes_or_counts() {
    let mut opts = Options::calm(3);
    opts.initial_voters = 2;
    let mut sim = Sim::new(7, opts);
    let leader = elect(&mut sim);
    let index = conf_change(&mut sim, leader, ConfChangeType::AddLearnerNode, 3);
    let index = propose(&mut sim, leader, b"x").unwrap().max(index);
    assert!(
        applies(&mut sim, 3, index, ELECTION * 10),
        "learner receives the log"
    );
    let other = if leader == 1 { 2 } else { 1 };
    sim.crash(other);
    let index = propose(&mut sim, leader, b"needs the other voter").unwrap();
    assert!(applies(&mut sim, 3, 0, Duration::ZERO));
    assert!(
        !applies(&mut sim, leader, index, ELECTION * 5),
        "learner counted toward commit"
    );
    // A learner never campaigns, however long it waits.
    sim.crash(leader);
    ok(sim.run_for(ELECTION * 10));
    assert_eq!(sim.raft(3).unwrap().role(), Role::Follower);
    assert!(!sim.raft(3).unwrap().is_voter());
    // Promotion makes it a voter.
    ok(sim.restart(leader));
    ok(sim.restart(other));
    let leader = elect(&mut sim);
    let index = conf_change(&mut sim, leader, ConfChangeType::AddNode, 3);
    assert!(applies(&mut sim, 3, index, ELECTION * 10));
    assert!(sim.raft(3).unwrap().is_voter());
}

#[test]
fn one_membership_change_at_a_time() {
    let mut opts = Options::calm(5);
    opts.initial_voters = 3;
    let mut sim = Sim::new(8, opts);
    let leader = elect(&mut sim);
    conf_change(&mut sim, leader, ConfChangeType::AddLearnerNode, 4);
    let cc = ConfChange {
        change_type: ConfChangeType::AddLearnerNode,
        node_id: 5,
        ..Default::default()
    };
    let raft = sim.raft_mut(leader).unwrap();
    assert_eq!(
        raft.propose_conf_change(super::encode_conf_change(&cc)),
        Err(ProposeError::ConfChangePending)
    );
    let demote = ConfChange {
        change_type: ConfChangeType::AddLearnerNode,
        node_id: leader,
        ..Default::default()
    };
    ok(sim.run_for(ELECTION));
    let raft = sim.raft_mut(leader).unwrap();
    assert!(matches!(
        raft.propose_conf_change(super::encode_conf_change(&demote)),
        Err(ProposeError::InvalidConfChange(_))
    ));
    assert!(
        raft.propose_conf_change(super::encode_conf_change(&cc))
            .is_ok(),
        "accepted once the first is applied"
    );
}

#[test]
fn leader_transfer_hands_over_quickly() {
    let mut sim = Sim::new(9, Options::calm(3));
    let leader = elect(&mut sim);
    let term = sim.raft(leader).unwrap().term();
    let target = sim.ids().find(|&id| id != leader).unwrap();
    let now = sim.now;
    sim.raft_mut(leader)
        .unwrap()
        .transfer_leader(now, target)
        .unwrap();
    assert_eq!(
        propose(&mut sim, leader, b"during"),
        Err(ProposeError::TransferringLeadership)
    );
    ok(sim.drain(leader));
    let moved = ok(sim.run_while_not(ELECTION / 2, |s| s.leader() == Some(target)));
    assert!(moved, "transfer took longer than half an election timeout");
    assert_eq!(sim.raft(target).unwrap().term(), term + 1);
    let index = propose(&mut sim, target, b"after").unwrap();
    assert!(applies(&mut sim, leader, index, ELECTION * 5));
    // A learner or a stranger cannot be the target.
    let now = sim.now;
    assert!(sim
        .raft_mut(target)
        .unwrap()
        .transfer_leader(now, 42)
        .is_err());
}

#[test]
fn lagging_member_catches_up_by_snapshot() {
    let mut opts = Options::calm(3);
    opts.compact_after = 5;
    let mut sim = Sim::new(10, opts);
    let leader = elect(&mut sim);
    let lagging = sim.ids().find(|&id| id != leader).unwrap();
    sim.crash(lagging);
    let mut last = 0;
    for k in 0..40 {
        last = propose(&mut sim, leader, format!("w{k}").as_bytes()).unwrap();
        ok(sim.run_for(Duration::from_millis(5)));
    }
    assert!(
        sim.raft(leader).unwrap().snapshot_index() > 5,
        "leader compacted"
    );
    ok(sim.restart(lagging));
    assert!(
        applies(&mut sim, lagging, last, ELECTION * 20),
        "lagging member did not catch up"
    );
    assert!(sim.stats.snapshots > 0, "caught up without a snapshot");
    assert_eq!(
        sim.leader(),
        Some(leader),
        "snapshots did not disturb the leader"
    );
}

#[test]
fn reads_are_linearizable_through_followers_and_leaders() {
    let mut sim = Sim::new(11, Options::calm(3));
    let leader = elect(&mut sim);
    let index = propose(&mut sim, leader, b"v").unwrap();
    assert!(applies(&mut sim, leader, index, ELECTION));
    for id in sim.ids().collect::<Vec<_>>() {
        let ctx = sim.read(id).unwrap();
        ok(sim.drain(id));
        let done =
            ok(sim.run_while_not(ELECTION, |s| s.read_results.iter().any(|&(c, _)| c == ctx)));
        assert!(done, "read on {id} never confirmed");
        let (_, read_index) = *sim.read_results.iter().find(|&&(c, _)| c == ctx).unwrap();
        assert!(
            read_index >= index,
            "read on {id} at {read_index} misses write {index}"
        );
    }
}

#[test]
fn restarted_member_waits_a_full_election_timeout() {
    let mut sim = Sim::new(12, Options::calm(3));
    let leader = elect(&mut sim);
    sim.crash(leader);
    ok(sim.restart(leader));
    let restarted_at = sim.now;
    let deadline = sim.raft(leader).unwrap().poll_timeout().unwrap();
    assert!(
        deadline.saturating_since(restarted_at) >= ELECTION,
        "election timer fast-forwarded: fires after {:?}",
        deadline.saturating_since(restarted_at)
    );
}

// ----- single-raft checks -------------------------------------------------

/// An in-memory durable log for driving one raft by hand.
#[derive(Clone, Default)]
struct Disk(Rc<RefCell<Vec<Entry>>>);

impl LogSource for Disk {
    fn entries(&self, low: u64, high: u64) -> Result<Vec<Entry>, StorageError> {
        let disk = self.0.borrow();
        Ok(disk
            .iter()
            .filter(|e| e.index >= low && e.index < high)
            .cloned()
            .collect())
    }
}

struct Driver {
    raft: Raft<Disk>,
    disk: Disk,
    now: Instant,
    sent: Vec<Message>,
    reads: Vec<u64>,
    unpersisted: Vec<PersistId>,
}

impl Driver {
    fn new(id: u64, voters: &[u64]) -> Self {
        let mut config = Config::new(id);
        config.pre_vote = false;
        config.election_timeout = ELECTION;
        config.heartbeat_interval = Duration::from_millis(10);
        let disk = Disk::default();
        let mut raft =
            Raft::new(config, DurableState::default(), disk.clone(), Instant::ZERO).unwrap();
        raft.bootstrap(voters, &[], |_| Bytes::new()).unwrap();
        let mut d = Self {
            raft,
            disk,
            now: Instant::ZERO,
            sent: Vec::new(),
            reads: Vec::new(),
            unpersisted: Vec::new(),
        };
        d.drain();
        d.persist();
        d
    }

    /// Drains, collecting messages and reads, holding writes back.
    fn drain(&mut self) {
        while let Some(action) = self.raft.poll_action() {
            match action {
                Action::Send(m) => self.sent.push(m),
                Action::Persist(p) => {
                    let mut disk = self.disk.0.borrow_mut();
                    if let Some(first) = p.entries.first() {
                        disk.retain(|e| e.index < first.index);
                    }
                    disk.extend(p.entries.iter().cloned());
                    self.unpersisted.push(p.id);
                }
                Action::ReadReady(r) => self.reads.push(r.index),
                Action::Fatal(e) => panic!("fatal: {e}"),
                _ => {}
            }
        }
    }

    /// Acknowledges every write, draining after each.
    fn persist(&mut self) {
        while !self.unpersisted.is_empty() {
            let id = self.unpersisted.remove(0);
            self.raft.persisted(self.now, id);
            self.drain();
        }
    }

    fn step(&mut self, m: Message) {
        self.raft.step(self.now, m);
        self.drain();
    }

    fn take(&mut self, msg_type: MessageType) -> Vec<Message> {
        let (taken, rest) = self.sent.drain(..).partition(|m| m.msg_type == msg_type);
        self.sent = rest;
        taken
    }

    fn reply(&self, to_msg: &Message, msg_type: MessageType) -> Message {
        Message {
            msg_type,
            from: to_msg.to,
            to: to_msg.from,
            term: to_msg.term,
            ..Default::default()
        }
    }

    /// Makes member 1 of {1, 2, 3} leader: campaign, persist, one grant.
    fn leader_of_three() -> Self {
        let mut d = Driver::new(1, &[1, 2, 3]);
        d.raft.campaign(d.now);
        d.drain();
        let requests = d.take(MessageType::MsgRequestVote);
        assert_eq!(requests.len(), 2);
        d.persist();
        let grant = d.reply(&requests[0], MessageType::MsgRequestVoteResponse);
        d.step(grant);
        assert_eq!(d.raft.role(), Role::Leader);
        d
    }
}

#[test]
fn own_vote_counts_only_once_durable() {
    let mut d = Driver::new(1, &[1]);
    d.raft.campaign(d.now);
    d.drain();
    assert_eq!(
        d.raft.role(),
        Role::Candidate,
        "won before its vote was durable"
    );
    d.persist();
    assert_eq!(d.raft.role(), Role::Leader);
}

#[test]
fn only_term_or_vote_changes_store_the_hard_state() {
    let mut d = Driver::new(1, &[1]);
    d.raft.campaign(d.now);
    let mut campaign_writes = Vec::new();
    while let Some(action) = d.raft.poll_action() {
        if let Action::Persist(p) = action {
            campaign_writes.push(p.hard_state.clone());
            d.unpersisted.push(p.id);
        }
    }
    assert!(
        campaign_writes
            .iter()
            .any(|hs| hs.as_ref().is_some_and(|hs| hs.vote == 1 && hs.term == 2)),
        "the vote is stored: {campaign_writes:?}"
    );
    d.persist();
    assert_eq!(d.raft.role(), Role::Leader);
    for _ in 0..3 {
        let index = d.raft.propose(Bytes::from_static(b"x")).unwrap();
        let mut writes = 0;
        while let Some(action) = d.raft.poll_action() {
            if let Action::Persist(p) = action {
                // The commit index moved since the last write; that alone
                // is not stored.
                assert_eq!(p.hard_state, None, "hard state rewritten for entry {index}");
                d.disk.0.borrow_mut().extend(p.entries.iter().cloned());
                d.raft.persisted(d.now, p.id);
                writes += 1;
            }
        }
        assert_eq!(writes, 1);
        d.drain();
        assert_eq!(d.raft.hard_state().commit, index);
    }
}

#[test]
fn vote_grant_waits_for_the_durable_vote() {
    let mut d = Driver::new(2, &[1, 2, 3]);
    let request = Message {
        msg_type: MessageType::MsgRequestVote,
        from: 1,
        to: 2,
        term: 2,
        index: 3,
        log_term: 1,
        ..Default::default()
    };
    d.step(request);
    assert!(
        d.take(MessageType::MsgRequestVoteResponse).is_empty(),
        "grant sent before the vote was durable"
    );
    d.persist();
    let grants = d.take(MessageType::MsgRequestVoteResponse);
    assert_eq!(grants.len(), 1);
    assert!(!grants[0].reject);
}

#[test]
fn leader_sends_appends_before_its_own_write_is_durable() {
    let mut d = Driver::leader_of_three();
    d.persist();
    // Followers acknowledge the term's first entry: they move to Replicate.
    for append in d.take(MessageType::MsgAppend) {
        let mut ack = d.reply(&append, MessageType::MsgAppendResponse);
        ack.index = d.raft.last_index();
        d.step(ack);
    }
    d.sent.clear();
    let index = d.raft.propose(Bytes::from_static(b"x")).unwrap();
    d.drain();
    let appends = d.take(MessageType::MsgAppend);
    assert!(
        !d.unpersisted.is_empty(),
        "the leader's write is still in flight"
    );
    assert!(
        appends
            .iter()
            .any(|m| m.entries.iter().any(|e| e.index == index)),
        "followers got the entry already"
    );
}

#[test]
fn many_reads_share_one_heartbeat_round_and_wait_for_the_terms_first_commit() {
    let mut d = Driver::leader_of_three();
    d.persist();
    d.sent.clear();
    // The new leader has not committed its term's entry: reads wait.
    for k in 0..100u64 {
        d.raft
            .read_index(Bytes::copy_from_slice(&k.to_be_bytes()))
            .unwrap();
    }
    d.drain();
    let heartbeats = d.take(MessageType::MsgHeartbeat);
    assert_eq!(
        heartbeats.len(),
        2,
        "one round for 100 reads: one heartbeat per follower"
    );
    for hb in &heartbeats {
        let mut answer = d.reply(hb, MessageType::MsgHeartbeatResponse);
        answer.context = hb.context.clone();
        d.step(answer);
    }
    assert!(
        d.reads.is_empty(),
        "reads served before the term's first commit"
    );
    // A follower acknowledges the term's entry: it commits, reads go.
    let append = d
        .take(MessageType::MsgAppend)
        .into_iter()
        .next()
        .expect("append to a follower");
    let mut ack = d.reply(&append, MessageType::MsgAppendResponse);
    ack.index = d.raft.last_index();
    d.step(ack);
    assert_eq!(d.reads.len(), 100);
    assert!(d.reads.iter().all(|&i| i == d.raft.committed()));
    // Later reads: again one round for the batch.
    d.sent.clear();
    for k in 0..50u64 {
        d.raft
            .read_index(Bytes::copy_from_slice(&k.to_be_bytes()))
            .unwrap();
    }
    d.drain();
    assert_eq!(d.take(MessageType::MsgHeartbeat).len(), 2);
}

#[test]
fn single_voter_reads_need_no_round() {
    let mut d = Driver::new(1, &[1]);
    d.raft.campaign(d.now);
    d.drain();
    d.persist();
    d.raft.read_index(Bytes::from_static(b"r")).unwrap();
    d.drain();
    assert_eq!(d.reads.len(), 1);
    assert!(d.sent.is_empty());
}

#[derive(Clone, Debug)]
struct ArbitraryMessage(Message);

impl Arbitrary for ArbitraryMessage {
    fn arbitrary(g: &mut Gen) -> Self {
        let types = [
            MessageType::MsgHup,
            MessageType::MsgAppend,
            MessageType::MsgAppendResponse,
            MessageType::MsgRequestVote,
            MessageType::MsgRequestVoteResponse,
            MessageType::MsgSnapshot,
            MessageType::MsgHeartbeat,
            MessageType::MsgHeartbeatResponse,
            MessageType::MsgTransferLeader,
            MessageType::MsgTimeoutNow,
            MessageType::MsgReadIndex,
            MessageType::MsgReadIndexResp,
            MessageType::MsgRequestPreVote,
            MessageType::MsgRequestPreVoteResponse,
        ];
        let small = |g: &mut Gen| u64::from(u8::arbitrary(g) % 8);
        let mut m = Message {
            msg_type: *g.choose(&types).unwrap(),
            from: small(g),
            to: if bool::arbitrary(g) { 1 } else { small(g) },
            term: small(g),
            log_term: small(g),
            index: if bool::arbitrary(g) {
                small(g)
            } else {
                u64::arbitrary(g)
            },
            commit: if bool::arbitrary(g) {
                small(g)
            } else {
                u64::arbitrary(g)
            },
            reject: bool::arbitrary(g),
            reject_hint: small(g),
            context: Bytes::from(Vec::<u8>::arbitrary(g)),
            ..Default::default()
        };
        for k in 0..u8::arbitrary(g) % 4 {
            m.entries.push(Entry {
                index: m
                    .index
                    .wrapping_add(u64::from(k) + u64::from(bool::arbitrary(g))),
                term: small(g),
                data: Bytes::from(Vec::<u8>::arbitrary(g)),
                ..Default::default()
            });
        }
        if bool::arbitrary(g) {
            let mut snapshot = oxetcd_proto::eraftpb::Snapshot::default();
            snapshot.mut_metadata().index = small(g);
            snapshot.mut_metadata().term = small(g);
            snapshot.mut_metadata().mut_conf_state().voters = vec![small(g)];
            m.snapshot = Some(snapshot).into();
        }
        ArbitraryMessage(m)
    }
}

/// Whatever peers send — wrong terms, impossible indexes, malformed
/// entries, garbage contexts — a leader and a follower neither panic nor
/// break their invariants.
#[test]
fn arbitrary_peer_messages_never_panic() {
    fn property(messages: Vec<ArbitraryMessage>, leader: bool) -> bool {
        let mut d = if leader {
            Driver::leader_of_three()
        } else {
            Driver::new(1, &[1, 2, 3])
        };
        for ArbitraryMessage(m) in messages {
            d.step(m);
            d.persist();
            d.raft.check_invariants();
            d.now = d.now + Duration::from_millis(7);
            d.raft.handle_timeout(d.now);
            d.drain();
        }
        true
    }
    QuickCheck::new()
        .tests(500)
        .quickcheck(property as fn(Vec<ArbitraryMessage>, bool) -> bool);
}
