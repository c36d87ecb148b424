//! Membership changes under faults, in the in-process cluster: each test
//! pins a bug the node simulator found with members added and removed
//! while members crash (`sim_members`).
//!
//! A removed member reports it ([`Node::is_removed`]) and the runtime
//! stops it; until then its timers must not stay due. A member restarted
//! after a crash must come back in the configuration it had reached, or
//! learn it again from its log: never in an older one, nor in one it
//! guessed from its flags.

use std::time::Duration;

use oxetcd_proto::etcdserverpb::{MemberAddRequest, MemberAddResponse, MemberRemoveRequest};

use super::cluster_tests::{self, Cluster};
use super::*;

/// A member removed before its attributes were published kept its
/// publication's retry due: `poll_timeout` answered a time in the past
/// for ever, so a runtime driven by it woke at once, again and again (the
/// node simulator found it, a new member removed while it caught up).
#[test]
fn a_member_removed_before_it_published_keeps_no_timer_due() {
    let mut c = Cluster::new(3);
    let leader = c.leader().expect("a leader");
    let id = add_member(&mut c, leader, false);
    // Its publish never reaches the leader: it retries every election
    // timeout.
    c.proposals_lost_from.insert(id);
    let config = cluster_tests::config(id, &[1, 2, 3], ClusterState::Existing);
    c.start(id, config);
    c.run_for(Duration::from_secs(2));
    assert!(!c.node(id).publication.is_published());
    let remove = Request::MemberRemove(MemberRemoveRequest { id });
    assert!(c.call(leader, remove).is_ok());
    assert!(c.run_until(Duration::from_secs(2), |c| c.node(id).is_removed()));
    let now = c.now;
    assert!(
        c.node(id).poll_timeout().is_none_or(|t| t > now),
        "a removed member's timer is due at once"
    );
    // Time moves on without a timer firing in a loop.
    c.run_for(Duration::from_secs(10));
}

/// A member restarted after a crash took its configuration from what its
/// backend had synced, and its commit index from the hard state, stored
/// lazily: it could come back from before a removal it had applied,
/// without knowing the removal committed. The member a removal left alone
/// then waited for the removed member's vote for ever (the node simulator
/// found it). A membership change is now applied only once a stored hard
/// state says it is committed.
#[test]
fn a_member_left_alone_by_a_removal_leads_after_a_crash() {
    let mut c = Cluster::new(2);
    let leader = c.leader().expect("a leader");
    let other = if leader == 1 { 2 } else { 1 };
    let remove = Request::MemberRemove(MemberRemoveRequest { id: other });
    assert!(c.call(leader, remove).is_ok());
    c.crash(other);
    // The backend loses what it applied since its last sync.
    c.crash(leader);
    c.restart(leader);
    assert!(
        c.run_until(Duration::from_secs(10), |c| c.leader() == Some(leader)),
        "the member left alone does not lead"
    );
    assert!(c.call(leader, cluster_tests::put("k", "v")).is_ok());
}

/// A member restarted with a backend that had synced nothing (a crash
/// soon after it joined) took its configured initial members for the
/// voters, itself among them: a learner came back as a voter that no other
/// member counted, campaigned, and led a term of its own (the node
/// simulator found it). It now learns the membership again from its log.
#[test]
fn a_learner_restarted_before_its_backend_synced_is_still_a_learner() {
    let mut c = Cluster::new(3);
    let leader = c.leader().expect("a leader");
    let id = add_member(&mut c, leader, true);
    // As etcd's `--initial-cluster` for a joining member: the members and
    // itself.
    let mut config = cluster_tests::config(id, &[1, 2, 3], ClusterState::Existing);
    config.initial_members.push(InitialMember {
        id,
        name: format!("m{id}"),
        peer_urls: vec![cluster_tests::url(4)],
    });
    c.start(id, config);
    assert!(c.run_until(Duration::from_secs(5), |c| c.node(id).is_learner()));
    c.crash(id);
    c.restart(id);
    c.run_for(Duration::from_secs(5));
    let conf = c.node(id).raft.conf_state();
    assert_eq!(conf.voters, vec![1, 2, 3], "the restarted learner's voters");
    assert_eq!(conf.learners, vec![id]);
    assert!(c.node(id).is_learner());
    assert_ne!(c.node(id).role(), Role::Leader);
}

/// A member that applies the bootstrap entries again after a restart
/// (its backend had synced nothing of them) took each initial member's
/// record from its flags, and found none when the flags' IDs were not the
/// cluster's (another `--initial-cluster-token`; etcd ignores the flags
/// once a member has run): the member stood in its list with no peer
/// URLs, so no message reached it and the pair never elected a leader
/// again. The bootstrap entries now carry each initial member's record.
#[test]
fn a_member_replaying_the_bootstrap_entries_learns_the_members_from_them() {
    let mut c = Cluster::new(1);
    let leader = c.leader().expect("a leader");
    let id = add_member(&mut c, leader, false);
    let joiner_config = |first: u64| {
        let mut config = cluster_tests::config(id, &[first], ClusterState::Existing);
        config.initial_members.push(InitialMember {
            id,
            name: format!("m{id}"),
            peer_urls: vec![cluster_tests::url(4)],
        });
        config
    };
    c.start(id, joiner_config(1));
    assert!(
        c.run_until(Duration::from_secs(5), |c| c.node(id).applied_index()
            >= c.node(leader).applied_index())
    );
    c.crash(id);
    // What a crash between the log's append and the first apply leaves:
    // the log, and a backend with nothing in it.
    let member = c.members.get_mut(&id).expect("the joiner");
    member.kv = crate::memory::MemoryKv::default();
    // Flags whose IDs are not the cluster's.
    member.config = joiner_config(0xbad);
    c.restart(id);
    assert!(
        c.run_until(Duration::from_secs(5), |c| c.node(id).applied_index()
            >= c.node(leader).applied_index()),
        "{}",
        c.summary()
    );
    let first = c
        .node(id)
        .members()
        .into_iter()
        .find(|m| m.id == leader)
        .expect("the first member is listed");
    assert_eq!(first.peer_ur_ls, vec![cluster_tests::url(leader)]);
    assert_eq!(first.name, format!("m{leader}"));
    // Both voters answer: the pair commits.
    c.crash(leader);
    c.restart(leader);
    assert!(
        c.run_until(Duration::from_secs(10), |c| c.leader().is_some()),
        "{}",
        c.summary()
    );
    let leader = c.leader().expect("a leader");
    assert!(c.call(leader, cluster_tests::put("k", "v")).is_ok());
}

/// Adds member 4 (its URL from [`cluster_tests::url`]) through `leader`,
/// as a learner or a voter; its new ID.
fn add_member(c: &mut Cluster, leader: u64, is_learner: bool) -> u64 {
    let add = Request::MemberAdd(MemberAddRequest {
        peer_ur_ls: vec![cluster_tests::url(4)],
        is_learner,
    });
    let Ok(Response::MemberAdd(MemberAddResponse {
        member: Some(added),
        ..
    })) = c.call(leader, add)
    else {
        panic!("the add failed");
    };
    added.id
}
