//! Single-member behaviour of the node: group commit, reads, leases,
//! watches and restarts, through the same raft as a cluster.

use std::time::Duration;

use oxetcd_proto::etcdserverpb::{
    PutRequest, RangeRequest, RangeResponse, WatchRequest, WatchResponse,
};

use super::*;
use crate::auth::Credentials;
use crate::memory::{MemoryKv, MemoryLog};
use crate::testing::{Effect, Member};
use crate::watch::StreamId;

/// A single member on the reference driver, with persists held so that
/// tests can see group commit; answers and watch responses collected.
struct Harness {
    member: Member,
    answers: Vec<(RequestId, Result<Response, Error>)>,
    watched: Vec<(StreamId, WatchResponse)>,
    /// Each `DirectReads` told, with how many answers came before it.
    direct_reads: Vec<(usize, DirectReads)>,
    now: Instant,
}

impl std::ops::Deref for Harness {
    type Target = Member;

    fn deref(&self) -> &Member {
        &self.member
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Member {
        &mut self.member
    }
}

impl Harness {
    /// A single member on these stores, settled (leader, nothing pending).
    fn new(log: MemoryLog, kv: MemoryKv) -> Self {
        let mut h = Self::started(Config::single("test"), log, kv);
        h.settle();
        h
    }

    /// A node just built on these stores; nothing drained or persisted yet.
    fn started(config: Config, log: MemoryLog, kv: MemoryKv) -> Self {
        let mut member = Member::start(config, log, kv, Instant::ZERO).unwrap();
        member.hold_persists();
        Self {
            member,
            answers: Vec::new(),
            watched: Vec::new(),
            direct_reads: Vec::new(),
            now: Instant::ZERO,
        }
    }

    /// Drains outputs without acknowledging persists.
    fn drain(&mut self) {
        let effects = self.member.drain(self.now).unwrap();
        self.collect(effects);
    }

    fn collect(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Answer(id, result) => self.answers.push((id, result)),
                Effect::Watch(stream, response) => self.watched.push((stream, response)),
                Effect::DirectReads(reads) => self.direct_reads.push((self.answers.len(), reads)),
                Effect::Send(m) => panic!("a single member sends nothing: {m:?}"),
                Effect::SendSnapshot { to, .. } => {
                    panic!("snapshot to {to} from a single member")
                }
            }
        }
    }

    /// Persists the oldest outstanding batch; returns its entry count.
    fn persist_one(&mut self) -> usize {
        let persisted = self.member.persist_next(self.now).unwrap();
        self.drain();
        persisted.unwrap_or(0)
    }

    fn settle(&mut self) {
        self.drain();
        for _ in 0..1_000 {
            if self.persist_one() == 0 && self.held_persists() == 0 {
                break;
            }
        }
    }

    fn put(&mut self, id: RequestId, key: &str, value: &str) {
        let put = PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            ..Default::default()
        };
        self.node.handle(
            Instant::ZERO,
            Input::Client(id, Request::Put(put), Credentials::Anonymous),
        );
        self.drain();
    }

    fn get(&mut self, id: RequestId, key: &str) {
        let range = RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        };
        self.node.handle(
            Instant::ZERO,
            Input::Client(id, Request::Range(range), Credentials::Anonymous),
        );
        self.drain();
    }

    fn answer(&mut self, id: RequestId) -> Option<Result<Response, Error>> {
        let at = self.answers.iter().position(|(i, _)| *i == id)?;
        Some(self.answers.remove(at).1)
    }

    fn range_answer(&mut self, id: RequestId) -> RangeResponse {
        match self.answer(id) {
            Some(Ok(Response::Range(r))) => r,
            other => panic!("expected a range answer, got {other:?}"),
        }
    }

    /// Feeds a request at the harness's time and settles.
    fn call(&mut self, id: RequestId, request: Request) -> Result<Response, Error> {
        self.member
            .node
            .handle(self.now, Input::Client(id, request, Credentials::Anonymous));
        self.settle();
        self.answer(id).expect("request answered")
    }

    fn watch(&mut self, stream: StreamId, request: WatchRequest) {
        self.member.node.handle(
            self.now,
            Input::Watch {
                stream,
                request,
                credentials: Credentials::Anonymous,
            },
        );
        self.settle();
    }

    /// Lets time pass and fires due timers.
    fn advance(&mut self, by: Duration) {
        self.now = self.now + by;
        self.member.node.handle_timeout(self.now);
        self.settle();
    }

    fn take_watched(&mut self) -> Vec<(StreamId, WatchResponse)> {
        std::mem::take(&mut self.watched)
    }
}

fn create_watch(key: &str, end: &str, start_revision: i64) -> WatchRequest {
    use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
    WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(
            oxetcd_proto::etcdserverpb::WatchCreateRequest {
                key: key.as_bytes().to_vec(),
                range_end: end.as_bytes().to_vec(),
                start_revision,
                prev_kv: true,
                ..Default::default()
            },
        )),
    }
}

/// (watch id, header revision, [(key, mod revision, is delete, prev value)])
fn summary(responses: &[(StreamId, WatchResponse)]) -> Vec<(i64, i64, Vec<String>)> {
    responses
        .iter()
        .map(|(_, r)| {
            let events = r
                .events
                .iter()
                .map(|e| {
                    let kv = e.kv.clone().unwrap_or_default();
                    let prev = e
                        .prev_kv
                        .as_ref()
                        .map(|p| String::from_utf8_lossy(&p.value).into_owned());
                    format!(
                        "{}{}@{}{}",
                        if e.r#type == 1 { "-" } else { "+" },
                        String::from_utf8_lossy(&kv.key),
                        kv.mod_revision,
                        prev.map_or(String::new(), |p| format!(" prev {p}"))
                    )
                })
                .collect();
            (r.watch_id, r.header.unwrap_or_default().revision, events)
        })
        .collect()
}

#[test]
fn lease_attaches_keys_expires_on_time_and_deletes_them_in_one_revision() {
    use oxetcd_proto::etcdserverpb::{
        LeaseGrantRequest, LeaseKeepAliveRequest, LeaseTimeToLiveRequest,
    };
    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    let grant = h.call(1, Request::LeaseGrant(LeaseGrantRequest { ttl: 1, id: 0 }));
    let Ok(Response::LeaseGrant(grant)) = grant else {
        panic!("{grant:?}");
    };
    assert_eq!(grant.ttl, 2, "raised to the minimum TTL");
    assert!(grant.id > 0);
    let with_lease = |key: &str, lease| {
        Request::Put(PutRequest {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            lease,
            ..Default::default()
        })
    };
    assert!(h.call(2, with_lease("a", grant.id)).is_ok());
    assert!(h.call(3, with_lease("b", grant.id)).is_ok());
    assert_eq!(h.call(4, with_lease("c", 99)), Err(Error::LeaseNotFound));
    let ttl = h.call(
        5,
        Request::LeaseTimeToLive(LeaseTimeToLiveRequest {
            id: grant.id,
            keys: true,
        }),
    );
    let Ok(Response::LeaseTimeToLive(ttl)) = ttl else {
        panic!("{ttl:?}");
    };
    assert_eq!(ttl.keys, vec![b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(ttl.granted_ttl, 2);
    h.watch(1, create_watch("a", "c", 0));
    // Granted at time 0 by the leader: it expires at 2 s unless renewed.
    h.advance(Duration::from_millis(1_900));
    let keep_alive = Request::LeaseKeepAlive(LeaseKeepAliveRequest { id: grant.id });
    let Ok(Response::LeaseKeepAlive(renewed)) = h.call(6, keep_alive.clone()) else {
        panic!("keep-alive failed");
    };
    assert_eq!(renewed.ttl, 2);
    h.advance(Duration::from_millis(1_900));
    h.get(7, "a");
    assert_eq!(
        h.range_answer(7).kvs.len(),
        1,
        "renewed lease expired early"
    );
    h.advance(Duration::from_millis(200));
    h.get(8, "a");
    let range = h.range_answer(8);
    assert!(range.kvs.is_empty());
    assert_eq!(
        range.header.unwrap().revision,
        4,
        "both keys in one revision"
    );
    let Ok(Response::LeaseKeepAlive(gone)) = h.call(9, keep_alive) else {
        panic!("keep-alive failed");
    };
    assert_eq!(gone.ttl, 0);
    let watched = summary(&h.take_watched());
    assert_eq!(
        watched,
        vec![
            (0, 3, vec![]),
            (0, 4, vec!["-a@4 prev v".into(), "-b@4 prev v".into()])
        ]
    );
}

#[test]
fn watch_delivers_live_and_historical_events_once_each() {
    use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    h.put(1, "k1", "a");
    h.settle();
    h.watch(7, create_watch("k", "l", 0));
    h.put(2, "k2", "b");
    h.put(3, "x", "c");
    h.put(4, "k1", "d");
    h.settle();
    // A second watcher on the same stream replays history from rev 1.
    h.watch(7, create_watch("k", "l", 1));
    h.put(5, "k2", "e");
    h.settle();
    h.watch(
        7,
        WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(Default::default())),
        },
    );
    let watched = summary(&h.take_watched());
    assert_eq!(
        watched,
        vec![
            (0, 2, vec![]),
            (0, 3, vec!["+k2@3".into()]),
            (0, 5, vec!["+k1@5 prev a".into()]),
            (1, 5, vec![]),
            (
                1,
                5,
                vec!["+k1@2".into(), "+k2@3".into(), "+k1@5 prev a".into()]
            ),
            (0, 6, vec!["+k2@6 prev b".into()]),
            (1, 6, vec!["+k2@6 prev b".into()]),
            (-1, 6, vec![]),
        ]
    );
}

/// The TTL left of a 60 s lease checkpointed twice (at 10 s and 20 s)
/// on a single member running `server_version`, after a restart, with
/// the `LeaseCheckpointPersist` gate `persist_gate`; and its granted TTL.
fn ttl_after_a_restart(server_version: crate::version::Version, persist_gate: bool) -> (i64, i64) {
    use oxetcd_proto::etcdserverpb::{LeaseGrantRequest, LeaseTimeToLiveRequest};
    let log = MemoryLog::default();
    let kv = MemoryKv::default();
    let mut config = Config::single("test");
    config.lease.checkpoint_interval = Duration::from_secs(10);
    config.lease.checkpoint_persist = persist_gate;
    config.server_version = server_version;
    let mut h = Harness::started(config.clone(), log.clone(), kv.clone());
    h.settle();
    let grant = Request::LeaseGrant(LeaseGrantRequest { ttl: 60, id: 42 });
    assert!(h.call(1, grant.clone()).is_ok());
    assert_eq!(h.call(2, grant), Err(Error::LeaseExists));
    h.advance(Duration::from_secs(10));
    h.advance(Duration::from_secs(10));
    assert_eq!(
        h.node.versions().cluster(),
        Some(server_version.major_minor())
    );
    drop(h);
    let mut h = Harness::started(config, log, kv);
    h.settle();
    let Ok(Response::LeaseTimeToLive(ttl)) = h.call(
        3,
        Request::LeaseTimeToLive(LeaseTimeToLiveRequest {
            id: 42,
            keys: false,
        }),
    ) else {
        panic!("time to live failed");
    };
    (ttl.ttl, ttl.granted_ttl)
}

#[test]
fn leases_survive_a_restart_with_their_checkpointed_ttl() {
    use crate::version::Version;
    // 40 s were left at the last checkpoint; the new leader adds its
    // election timeout (1 s) and truncates to whole seconds.
    assert_eq!(ttl_after_a_restart(Version::new(3, 6, 0), false), (41, 60));
    // At cluster version 3.5 checkpoints stay in memory, as a 3.5
    // member keeps them: the restarted lease has its whole TTL again.
    assert_eq!(ttl_after_a_restart(Version::new(3, 5, 0), false), (61, 60));
    // Unless the gate asks for them to be written.
    assert_eq!(ttl_after_a_restart(Version::new(3, 5, 0), true), (41, 60));
}

#[test]
fn put_is_answered_after_persist_and_apply() {
    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    h.put(1, "foo", "bar");
    assert!(
        h.answer(1).is_none(),
        "answered before the entry was durable"
    );
    h.settle();
    let Some(Ok(Response::Put(put))) = h.answer(1) else {
        panic!("no put answer");
    };
    let header = put.header.unwrap();
    assert_eq!(header.revision, 2);
    assert_eq!(header.member_id, h.node.member_id());
    // As etcd's: the cluster is bootstrapped in term 1, and the member's
    // first election makes term 2.
    assert_eq!(header.raft_term, 2);
    h.get(2, "foo");
    let range = h.range_answer(2);
    assert_eq!(range.kvs.len(), 1);
    assert_eq!(range.kvs[0].value, b"bar");
    assert_eq!(range.header.unwrap().revision, 2);
}

#[test]
fn writes_during_an_fsync_share_the_next_one() {
    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    h.put(1, "a", "1");
    assert_eq!(h.held_persists(), 1, "first write goes out at once");
    for id in 2..=100 {
        h.put(id, "a", "x");
    }
    assert_eq!(
        h.held_persists(),
        1,
        "no second persist while one is in flight"
    );
    assert_eq!(h.persist_one(), 1);
    assert_eq!(
        h.persist_one(),
        99,
        "the 99 waiting writes ride one persist"
    );
    for id in 1..=100 {
        let Some(Ok(Response::Put(put))) = h.answer(id) else {
            panic!("put {id} not answered");
        };
        // Each write reports its own revision, not its batch's.
        assert_eq!(put.header.unwrap().revision, 1 + id as i64);
    }
}

/// While the runtime reports a full disk, a write waiting for its log
/// write stays unanswered (it is not durable), new writes are refused with
/// the disk-full error, and reads are answered; once space returns the
/// waiting write lands and writes are admitted again.
#[test]
fn a_full_disk_refuses_new_writes_but_serves_reads() {
    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    h.put(1, "k", "v1");
    h.settle();
    assert!(matches!(h.answer(1), Some(Ok(Response::Put(_)))));
    h.put(2, "k", "v2");
    assert_eq!(h.held_persists(), 1, "the write of v2 is out");
    h.member.node.handle(h.now, Input::DiskFull { full: true });
    h.put(3, "other", "x");
    assert_eq!(h.answer(3), Some(Err(Error::DiskFull)));
    assert_eq!(
        Error::DiskFull.code(),
        crate::error::Code::ResourceExhausted
    );
    assert_eq!(
        Error::DiskFull.message(),
        "etcdserver: no space left on device"
    );
    assert!(h.answer(2).is_none(), "v2 is not durable yet");
    h.get(4, "k");
    assert_eq!(h.range_answer(4).kvs[0].value, b"v1", "reads are served");

    // The runtime's retry succeeds: space is back.
    h.member.node.handle(h.now, Input::DiskFull { full: false });
    h.settle();
    assert!(matches!(h.answer(2), Some(Ok(Response::Put(_)))));
    h.put(5, "other", "y");
    h.settle();
    assert!(matches!(h.answer(5), Some(Ok(Response::Put(_)))));
    h.get(6, "k");
    assert_eq!(h.range_answer(6).kvs[0].value, b"v2");
    h.get(7, "other");
    assert_eq!(h.range_answer(7).kvs[0].value, b"y");
}

#[test]
fn linearizable_read_waits_for_pending_apply() {
    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    h.put(1, "k", "v1");
    h.settle();
    h.put(2, "k", "v2");
    // The second put is not committed yet: a read may answer at once
    // with the committed state.
    h.get(3, "k");
    assert_eq!(h.range_answer(3).kvs[0].value, b"v1");
    h.settle();
    h.get(4, "k");
    assert_eq!(h.range_answer(4).kvs[0].value, b"v2");
}

#[test]
fn oversized_proposal_is_refused_and_nothing_is_lost() {
    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    h.put(1, "k", "small");
    h.settle();
    let big = "x".repeat(1_572_864);
    h.put(2, "k", &big);
    assert_eq!(h.answer(2), Some(Err(Error::RequestTooLarge)));
    h.get(3, "k");
    assert_eq!(h.range_answer(3).kvs[0].value, b"small");
}

#[test]
fn empty_key_is_refused() {
    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    h.put(1, "", "v");
    assert_eq!(h.answer(1), Some(Err(Error::EmptyKey)));
}

#[test]
fn restart_replays_unapplied_entries_once() {
    let log = MemoryLog::default();
    let kv = MemoryKv::default();
    let mut h = Harness::new(log.clone(), kv.clone());
    for id in 1..=10 {
        h.put(id, &format!("k{id}"), "v");
    }
    h.settle();
    drop(h);
    // Restart on a backend that applied only part of the log: a read
    // that arrives before the new term's first entry commits waits for
    // the replay instead of answering from the old state.
    let lagging = MemoryKv::default();
    let mut h = Harness::started(Config::single("test"), log.clone(), lagging);
    h.get(1, "k10");
    assert!(h.answer(1).is_none(), "read answered before the replay");
    h.settle();
    assert_eq!(h.range_answer(1).kvs.len(), 1);
    drop(h);
    // Same backend: nothing is applied twice.
    let mut h = Harness::new(log.clone(), kv.clone());
    h.get(1, "k1");
    let range = h.range_answer(1);
    assert_eq!(range.header.unwrap().revision, 11);
    assert_eq!(range.kvs[0].version, 1);
    drop(h);
    // A backend that lost everything (never made durable): the log
    // replays into the same revisions.
    let mut h = Harness::new(log, MemoryKv::default());
    h.get(2, "k10");
    let range = h.range_answer(2);
    assert_eq!(range.header.unwrap().revision, 11);
    assert_eq!(range.kvs[0].mod_revision, 11);
    assert_eq!(h.node.applied_index(), h.log.state().unwrap().last_index);
}

/// Regression: a read that arrived after the raft had elected this member
/// but before the node had seen the report of it was issued to the new
/// leader, then failed with `leader changed` when the report came (first
/// seen as a range failing right after a SIGTERM restart).
#[test]
fn a_read_between_an_election_and_its_report_is_answered() {
    let log = MemoryLog::default();
    let kv = MemoryKv::default();
    let mut h = Harness::new(log.clone(), kv.clone());
    h.put(1, "k", "v");
    h.settle();
    drop(h);
    let mut h = Harness::started(Config::single("test"), log, kv);
    h.drain();
    // A read right after every acknowledgement, before the node drains.
    let mut reads = Vec::new();
    while h.held_persists() > 0 {
        let now = h.now;
        h.member.persist_next(now).unwrap();
        let id = 100 + reads.len() as RequestId;
        let range = RangeRequest {
            key: b"k".to_vec(),
            ..Default::default()
        };
        h.node.handle(
            Instant::ZERO,
            Input::Client(id, Request::Range(range), Credentials::Anonymous),
        );
        reads.push(id);
        h.drain();
    }
    h.settle();
    assert!(reads.len() >= 2, "the restart took several writes");
    for id in reads {
        assert_eq!(h.range_answer(id).kvs[0].value, b"v", "read {id}");
    }
}

/// A lone voter needs nobody: it is ready (a leader, an entry of its term
/// applied, its own attributes in the membership) without any timer
/// firing, on a fresh start and on a restart — and not before it leads.
#[test]
fn a_sole_voter_is_ready_without_waiting() {
    let (log, kv) = (MemoryLog::default(), MemoryKv::default());
    let config = Config {
        client_urls: vec!["http://127.0.0.1:2379".to_owned()],
        ..Config::single("test")
    };
    let mut h = Harness::started(config.clone(), log.clone(), kv.clone());
    assert!(!h.node.is_ready(), "nothing is applied yet");
    h.settle();
    assert!(h.node.is_ready());
    let members = h.node.members();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].name, "test");
    assert_eq!(members[0].client_ur_ls, config.client_urls);
    let term = h.node.term();
    drop(h);

    let mut h = Harness::started(config, log, kv);
    assert!(
        !h.node.is_ready(),
        "a restarted member has its attributes stored, but no leader yet"
    );
    h.settle();
    assert!(h.node.is_ready());
    assert!(h.node.term() > term);
}

/// A joining member stores the cluster ID its peers give it before
/// anything else it persists, and finds it again at restart; a second,
/// different offer changes nothing.
#[test]
fn a_learned_cluster_id_is_stored_and_found_at_restart() {
    let (log, kv) = (MemoryLog::default(), MemoryKv::default());
    let config = Config {
        cluster_id: 0,
        initial_cluster_state: ClusterState::Existing,
        ..Config::single("joining")
    };
    let mut h = Harness::started(config.clone(), log.clone(), kv.clone());
    assert_eq!(h.node.cluster_id(), 0);
    let now = h.now;
    h.member.node.handle(now, Input::ClusterId { id: 0xabc });
    h.drain();
    assert_eq!(h.node.cluster_id(), 0xabc);
    assert_eq!(log.state().unwrap().cluster_id, 0xabc);
    h.member.node.handle(now, Input::ClusterId { id: 0xdef });
    h.drain();
    assert_eq!(h.node.cluster_id(), 0xabc);
    assert_eq!(log.state().unwrap().cluster_id, 0xabc);
    drop(h);
    let h = Harness::started(config, log, kv);
    assert_eq!(h.node.cluster_id(), 0xabc);
}

/// Serializable ranges may skip the node only while auth is off. The
/// runtime is told so at start, and told that auth is on before the enable
/// is answered, so no range sent after that answer skips the permission
/// check; it is told again once auth is off.
#[test]
fn direct_reads_close_before_an_auth_enable_is_answered() {
    use crate::auth::AuthRequest;
    use oxetcd_proto::authpb::UserAddOptions;
    use oxetcd_proto::etcdserverpb::{
        AuthDisableRequest, AuthEnableRequest, AuthUserAddRequest, AuthUserGrantRoleRequest,
    };
    use oxetcd_proto::oxetcdpb::auth_change::Change;

    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    let (_, told) = *h.direct_reads.last().expect("told at start");
    assert!(told.open);
    assert_eq!(told.header.member_id, h.node.config.member_id);
    assert_eq!(
        told.header.revision, 0,
        "the snapshot's, filled in by the reader"
    );
    assert!(told.header.raft_term >= 1, "{told:?}");

    let root = [
        Change::UserAdd(AuthUserAddRequest {
            name: "root".into(),
            options: Some(UserAddOptions { no_password: true }),
            ..Default::default()
        }),
        Change::UserGrantRole(AuthUserGrantRoleRequest {
            user: "root".into(),
            role: "root".into(),
        }),
    ];
    for (id, change) in (10..).zip(root) {
        assert!(h
            .call(id, Request::Auth(AuthRequest::Change(change)))
            .is_ok());
    }
    assert!(h.direct_reads.last().is_some_and(|(_, d)| d.open));

    let enable = Request::Auth(AuthRequest::Change(Change::Enable(AuthEnableRequest {})));
    h.member
        .node
        .handle(h.now, Input::Client(20, enable, Credentials::Anonymous));
    h.settle();
    let answered = h
        .answers
        .iter()
        .position(|(id, _)| *id == 20)
        .expect("enable answered");
    let (told_at, told) = *h.direct_reads.last().expect("told");
    assert!(!told.open, "closed once auth is on");
    assert!(
        told_at <= answered,
        "told after {told_at} answers, but the enable was answer {answered}"
    );
    assert!(h.answer(20).expect("answered").is_ok());

    let disable = Request::Auth(AuthRequest::Change(Change::Disable(AuthDisableRequest {})));
    let root = Credentials::User {
        name: "root".into(),
        revision: None,
    };
    h.member
        .node
        .handle(h.now, Input::Client(21, disable, root));
    h.settle();
    assert!(h.answer(21).expect("answered").is_ok());
    assert!(
        h.direct_reads.last().is_some_and(|(_, d)| d.open),
        "open again"
    );
}

#[test]
fn a_range_is_checked_again_against_the_auth_state_it_reads() {
    use crate::auth::{AuthInfo, AuthRequest};
    use oxetcd_proto::authpb::{Permission, UserAddOptions};
    use oxetcd_proto::etcdserverpb::{
        AuthEnableRequest, AuthRoleAddRequest, AuthRoleGrantPermissionRequest,
        AuthRoleRevokePermissionRequest, AuthUserAddRequest, AuthUserGrantRoleRequest,
    };
    use oxetcd_proto::oxetcdpb::auth_change::Change;

    let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
    h.put(1, "a", "v");
    h.settle();
    let user = |name: &str| {
        Change::UserAdd(AuthUserAddRequest {
            name: name.into(),
            options: Some(UserAddOptions { no_password: true }),
            ..Default::default()
        })
    };
    let grant = |user: &str, role: &str| {
        Change::UserGrantRole(AuthUserGrantRoleRequest {
            user: user.into(),
            role: role.into(),
        })
    };
    let changes = [
        user("root"),
        grant("root", "root"),
        user("reader"),
        Change::RoleAdd(AuthRoleAddRequest { name: "r".into() }),
        Change::RoleGrantPermission(AuthRoleGrantPermissionRequest {
            name: "r".into(),
            perm: Some(Permission {
                key: b"a".to_vec(),
                ..Default::default()
            }),
        }),
        grant("reader", "r"),
        Change::Enable(AuthEnableRequest {}),
    ];
    for (id, change) in (10..).zip(changes) {
        let change = Request::Auth(AuthRequest::Change(change));
        assert!(h.call(id, change).is_ok());
    }
    let reader = AuthInfo {
        user: "reader".into(),
        revision: h.node.auth.revision(),
    };
    let range = RangeRequest {
        key: b"a".to_vec(),
        ..Default::default()
    };
    let serve = |h: &mut Harness, id: RequestId, who: AuthInfo| {
        let ticket = h.node.admit(id);
        h.node
            .serve_read(ticket, ReadKind::Range(range.clone(), who));
        h.settle();
        h.answer(id).expect("answered")
    };
    assert!(matches!(
        serve(&mut h, 20, reader.clone()),
        Ok(Response::Range(_))
    ));

    // The permission goes between the read's admission and its serving:
    // the read fails, as etcd's does, rather than showing the key.
    let revoke = Change::RoleRevokePermission(AuthRoleRevokePermissionRequest {
        role: "r".into(),
        key: b"a".to_vec(),
        range_end: Vec::new(),
    });
    let root = Credentials::User {
        name: "root".into(),
        revision: None,
    };
    h.member.node.handle(
        h.now,
        Input::Client(21, Request::Auth(AuthRequest::Change(revoke)), root),
    );
    h.settle();
    assert!(h.answer(21).expect("revoked").is_ok());
    assert_eq!(serve(&mut h, 22, reader), Err(Error::AuthOldRevision));
}

/// The auto-compactor of a leader compacts through the log on the
/// schedule's clock; nothing happens before its first look.
#[test]
fn auto_compaction_by_revision_compacts_through_the_log() {
    use crate::compactor::{AutoCompaction, REVISION_INTERVAL};
    let config = Config {
        auto_compaction: AutoCompaction::Revision(2),
        ..Config::single("test")
    };
    let mut h = Harness::started(config, MemoryLog::default(), MemoryKv::default());
    h.settle();
    for n in 0..5 {
        h.put(100 + n, &format!("k{n}"), "v");
        h.settle();
    }
    let compacted = |h: &Harness| h.kv.read().unwrap().meta().unwrap().compact_revision;
    assert_eq!(compacted(&h), -1);
    h.advance(REVISION_INTERVAL - Duration::from_secs(1));
    assert_eq!(compacted(&h), -1, "not before the first look");
    h.advance(Duration::from_secs(1));
    // Revision 6 (five puts) minus a retention of 2.
    assert_eq!(compacted(&h), 4);
    let old = RangeRequest {
        key: b"k0".to_vec(),
        revision: 3,
        ..Default::default()
    };
    assert_eq!(h.call(1, Request::Range(old)), Err(Error::Compacted));
    // No new revisions: the next look has nothing to do.
    h.advance(REVISION_INTERVAL);
    assert_eq!(compacted(&h), 4);
    h.put(200, "k9", "v");
    h.settle();
    h.advance(REVISION_INTERVAL);
    assert_eq!(compacted(&h), 5);
}

/// The node's metrics: mvcc operations and live keys move with applied
/// writes (a key created, overwritten, deleted; a txn's chosen branch),
/// ranges when asked, and the counts survive a restart's recount of keys.
#[test]
fn metrics_count_operations_and_live_keys() {
    use oxetcd_proto::etcdserverpb::{request_op, DeleteRangeRequest, RequestOp, TxnRequest};
    let (log, kv) = (MemoryLog::default(), MemoryKv::default());
    let mut h = Harness::new(log.clone(), kv.clone());
    h.node.keys_counted(0);
    let start = h.node.metrics();
    assert!(start.has_leader && start.is_leader && !start.is_learner);
    assert_eq!(start.leader_changes_seen, 1);
    assert_eq!(start.keys, 0);
    let put = |key: &str| PutRequest {
        key: key.as_bytes().to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    };
    h.call(1, Request::Put(put("a"))).unwrap();
    h.call(2, Request::Put(put("a"))).unwrap();
    h.call(3, Request::Put(put("b"))).unwrap();
    let delete = DeleteRangeRequest {
        key: b"b".to_vec(),
        ..Default::default()
    };
    h.call(4, Request::DeleteRange(delete)).unwrap();
    let txn = TxnRequest {
        compare: Vec::new(),
        success: vec![
            RequestOp {
                request: Some(request_op::Request::RequestPut(put("c"))),
            },
            RequestOp {
                request: Some(request_op::Request::RequestRange(RangeRequest {
                    key: b"a".to_vec(),
                    ..Default::default()
                })),
            },
        ],
        failure: Vec::new(),
    };
    h.call(5, Request::Txn(txn)).unwrap();
    // A txn of one operation is a single put to storage: etcd does not
    // count it as a transaction.
    let lone = TxnRequest {
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(put("e"))),
        }],
        ..Default::default()
    };
    h.call(8, Request::Txn(lone)).unwrap();
    h.get(6, "a");
    h.settle();
    let m = h.node.metrics();
    assert_eq!((m.puts, m.deletes, m.txns), (5, 1, 1));
    assert_eq!(m.ranges, 2, "one asked, one in the txn");
    assert_eq!(m.keys, 3, "a, c and e");
    assert_eq!(m.proposals_pending, 0);
    assert_eq!(m.proposals_applied, m.proposals_committed);

    // A restarted node adds what it applies to the count the runtime
    // makes of the keys it starts with.
    let view = kv.read().unwrap();
    let revision = view.meta().unwrap().revision;
    let mut restarted = Harness::new(log, kv);
    restarted.call(7, Request::Put(put("d"))).unwrap();
    assert_eq!(restarted.node.metrics().keys, 0, "not counted yet");
    restarted
        .node
        .keys_counted(crate::live_keys(&view, revision).unwrap());
    assert_eq!(restarted.node.metrics().keys, 4, "a, c, e, and d since");
}

/// Past etcd's gap of 5,000 unapplied entries a write is refused with
/// `etcdserver: too many requests`; a lease revoke too, unless
/// `priority_request` is on, which lets it in up to twice the gap.
fn revoke_past_the_gap(priority_request: bool) -> Option<Result<Response, Error>> {
    use oxetcd_proto::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest};
    let mut config = Config::single("test");
    config.priority_request = priority_request;
    let mut h = Harness::started(config, MemoryLog::default(), MemoryKv::default());
    h.settle();
    let grant = h.call(1, Request::LeaseGrant(LeaseGrantRequest { ttl: 60, id: 0 }));
    let Ok(Response::LeaseGrant(grant)) = grant else {
        panic!("{grant:?}");
    };
    // Nothing persisted, so nothing applied: the gap grows by one a put.
    for id in 0..UNAPPLIED_ENTRIES_MAX {
        h.put(10 + id, "k", "v");
    }
    assert_eq!(h.node.unapplied(), UNAPPLIED_ENTRIES_MAX);
    h.put(9, "k", "one too many");
    assert_eq!(h.answer(9), Some(Err(Error::TooManyRequests)));
    let revoke = Request::LeaseRevoke(LeaseRevokeRequest { id: grant.id });
    h.member
        .node
        .handle(h.now, Input::Client(2, revoke, Credentials::Anonymous));
    h.drain();
    let refused = h.answer(2);
    h.settle();
    refused.or_else(|| h.answer(2))
}

#[test]
fn only_a_priority_lease_revoke_passes_the_unapplied_gap() {
    assert_eq!(
        revoke_past_the_gap(false),
        Some(Err(Error::TooManyRequests))
    );
    let Some(Ok(Response::LeaseRevoke(_))) = revoke_past_the_gap(true) else {
        panic!("the priority revoke was not proposed and applied");
    };
}
