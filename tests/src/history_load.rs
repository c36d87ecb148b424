//! The history workload of the fault tests: concurrent clients on a
//! three-member cluster recorded as a history while a [`Fault`] strikes a
//! third of the way in, then checked by `oxetcd-history`.
//!
//! Design. [`run`] is the whole test: a cluster is started, a watch on
//! every key from revision 2 is opened on a member no fault kills or
//! replaces, and [`Workload::clients`] threads each send
//! [`Workload::ops`] requests (puts, linearizable and serializable reads,
//! compare-and-set txns on mod revisions, deletes over a few keys) to one
//! member, recording invoke and completion times; a write that got no
//! answer is recorded as unknown, a request never sent (its member could
//! not be dialed) is not recorded. A client holds before its last third
//! until the fault is healed, so a third of the history at least comes
//! before the fault, and a third after the heal. Once the clients are done and the
//! cluster agrees on a leader, a final put closes the history, every
//! member must show it (none is left behind), the history must be
//! linearizable, and the watch must deliver exactly its events, in order,
//! whole. A violation is reported as data ([`Report::violations`]) so the
//! long matrix can count them; the tests assert there are none.
//!
//! Every wait is bounded: the clients by [`Workload::client_deadline`],
//! the watch by [`Workload::watch_deadline`], the cluster's own waits by
//! its [`ClusterOptions`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use oxetcd_conformance::{Grpc, ServerKind};
use oxetcd_history::{
    check, check_watch, check_with_watches, traffic, Operation, Outcome, Request, Response, Watch,
};
use oxetcd_proto::etcdserverpb::{
    watch_request, CompactionRequest, PutRequest, WatchCreateRequest, WatchRequest,
};

use crate::cluster::{Cluster, ClusterOptions};
use crate::etcdctl::ctl_ok;
use crate::probe;
use crate::proxy::{Direction, Link};

/// How much load, and how long it may take.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Client threads; client `i` talks to member `i % 3`.
    pub clients: usize,
    /// Operations each client records.
    pub ops: usize,
    /// Keys `k0`, `k1`, … the operations touch.
    pub keys: u64,
    /// No client runs longer than this.
    pub client_deadline: Duration,
    /// How long the watch may take to deliver the last revision.
    pub watch_deadline: Duration,
}

impl Workload {
    /// `clients` clients of `ops` operations each over four keys; two
    /// minutes for the clients, 30 s for the watch.
    pub const fn new(clients: usize, ops: usize) -> Self {
        Self {
            clients,
            ops,
            keys: 4,
            client_deadline: Duration::from_secs(120),
            watch_deadline: Duration::from_secs(30),
        }
    }
}

/// What happens to the cluster a third of the way in. The leader is the
/// one elected at the start; "the follower" is the member after the
/// watched one (the watch stays on a member that is never killed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL, restarted a second later.
    KillLeader,
    /// SIGSTOP for two election timeouts and more, then SIGCONT.
    PauseLeader,
    /// SIGKILL, restarted a second later.
    KillFollower,
    /// Not a fault but maintenance under load: a compaction at the
    /// current revision, then an online defragmentation of every member.
    CompactAndDefragment,
    /// Its peer traffic black-holed both ways for [`PARTITION`], then
    /// healed. Needs peer proxies.
    IsolateLeader,
    /// Its peer connections cut and refused for [`PARTITION`], then
    /// healed. Needs peer proxies.
    IsolateFollower,
    /// One-way partitions of the leader: bytes toward it black-holed for
    /// [`PARTITION`] (it still sends), healed; then bytes from the leader
    /// of that moment black-holed (it still hears), healed. Needs peer
    /// proxies.
    OneWayLeader,
    /// Every chunk to and from the leader delayed by [`SLOW_LINK`] for
    /// [`PARTITION`]. Needs peer proxies.
    SlowLeaderLink,
    /// The follower removed with `member remove`, killed, its data dir
    /// wiped, and a new member of the same binary added under a new name
    /// and peer URL and started; its clients move to the new member.
    ReplaceFollower,
}

/// How long a partition or slow link lasts: six election timeouts.
pub const PARTITION: Duration = Duration::from_secs(3);

/// The delay a slow link adds to each chunk: a fifth of the election
/// timeout, so a round trip over it still fits in one.
pub const SLOW_LINK: Duration = Duration::from_millis(100);

/// How long a killed member stays down.
const DOWN: Duration = Duration::from_secs(1);

/// How long a paused member stays stopped: four election timeouts.
const PAUSED: Duration = Duration::from_secs(2);

/// A client whose member cannot be dialed tries again after this; the
/// dial itself retries for up to 20 s.
const REDIAL_PAUSE: Duration = Duration::from_millis(100);

/// How often a client holding for the heal looks again.
const HOLD_POLL: Duration = Duration::from_millis(10);

/// Attempts at the final put, 200 ms apart.
const FINAL_PUT_ATTEMPTS: usize = 5;

/// Attempts per operation a client makes at most (dials that fail count):
/// bounds the client loop by count as the deadline bounds it by time.
const ATTEMPTS_PER_OP: usize = 4;

impl Fault {
    /// Every fault of the process-level fault matrix.
    pub const MATRIX: [Self; 7] = [
        Self::IsolateLeader,
        Self::IsolateFollower,
        Self::OneWayLeader,
        Self::SlowLeaderLink,
        Self::KillLeader,
        Self::PauseLeader,
        Self::ReplaceFollower,
    ];

    /// Its name in the matrix's output and `FAULT_CELL`.
    pub fn name(self) -> &'static str {
        match self {
            Self::KillLeader => "kill-leader",
            Self::PauseLeader => "pause-leader",
            Self::KillFollower => "kill-follower",
            Self::CompactAndDefragment => "compact-defrag",
            Self::IsolateLeader => "isolate-leader",
            Self::IsolateFollower => "isolate-follower",
            Self::OneWayLeader => "one-way-leader",
            Self::SlowLeaderLink => "slow-leader-link",
            Self::ReplaceFollower => "replace-follower",
        }
    }

    /// The fault named `name` ([`Fault::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::KillFollower, Self::CompactAndDefragment]
            .into_iter()
            .chain(Self::MATRIX)
            .find(|f| f.name() == name)
    }

    /// Whether it acts on peer proxies ([`ClusterOptions::peer_proxies`]).
    pub fn needs_proxies(self) -> bool {
        matches!(
            self,
            Self::IsolateLeader | Self::IsolateFollower | Self::OneWayLeader | Self::SlowLeaderLink
        )
    }

    /// Strikes `cluster`, whose leader was `leader` and whose member
    /// `watched` carries the watch, and heals it; `recording`'s clients
    /// follow a replaced member.
    fn strike(self, cluster: &mut Cluster, leader: usize, watched: usize, recording: &Recording) {
        let n = cluster.members.len();
        let follower = (watched + 1) % n;
        assert_ne!(follower, leader, "three members at least");
        let name = |i: usize, cluster: &Cluster| cluster.members[i].name.clone();
        if self.needs_proxies() {
            // The faults below act on the proxies: they must be in the
            // members' path, and know which member dials.
            let proxies = cluster.proxies();
            assert!(
                proxies.open_connections() >= n * (n - 1),
                "{} peer connections through the proxies",
                proxies.open_connections()
            );
            for member in &cluster.members {
                assert!(
                    proxies.member_id(&member.name).is_some(),
                    "{}'s proxy has not seen its member ID",
                    member.name
                );
            }
        }
        match self {
            Self::KillLeader | Self::KillFollower => {
                let victim = if self == Self::KillLeader {
                    leader
                } else {
                    follower
                };
                cluster.members[victim].kill();
                thread::sleep(DOWN);
                cluster.members[victim].restart();
            }
            Self::PauseLeader => {
                cluster.members[leader].signal("STOP");
                thread::sleep(PAUSED);
                cluster.members[leader].signal("CONT");
            }
            Self::CompactAndDefragment => {
                let mut admin = Grpc::connect(&url(&cluster.members[leader].address()))
                    .unwrap_or_else(|e| panic!("admin: {e}"));
                let revision = admin
                    .status()
                    .unwrap_or_else(|e| panic!("status: {e:?}"))
                    .header
                    .map_or(1, |h| h.revision);
                admin
                    .compact(CompactionRequest {
                        revision,
                        physical: true,
                    })
                    .unwrap_or_else(|e| panic!("compact: {e:?}"));
                for member in &cluster.members {
                    let mut client = Grpc::connect(&url(&member.address()))
                        .unwrap_or_else(|e| panic!("{}: {e}", member.name));
                    client
                        .defragment()
                        .unwrap_or_else(|e| panic!("defragment {}: {e:?}", member.name));
                }
            }
            Self::IsolateLeader => {
                let leader = name(leader, cluster);
                cluster.proxies().blackhole(&leader);
                thread::sleep(PARTITION);
                cluster.proxies().heal(&leader);
            }
            Self::IsolateFollower => {
                let follower = name(follower, cluster);
                cluster.proxies().cut(&follower);
                thread::sleep(PARTITION);
                cluster.proxies().heal(&follower);
            }
            Self::OneWayLeader => {
                let deaf = name(leader, cluster);
                cluster
                    .proxies()
                    .set(&deaf, Direction::Toward, Link::Blackhole);
                thread::sleep(PARTITION);
                cluster.proxies().heal(&deaf);
                let mute = name(cluster.wait_leader(), cluster);
                cluster
                    .proxies()
                    .set(&mute, Direction::From, Link::Blackhole);
                thread::sleep(PARTITION);
                cluster.proxies().heal(&mute);
            }
            Self::SlowLeaderLink => {
                let slow = name(leader, cluster);
                for direction in [Direction::Toward, Direction::From] {
                    cluster
                        .proxies()
                        .set(&slow, direction, Link::Slow(SLOW_LINK));
                }
                thread::sleep(PARTITION);
                cluster.proxies().heal(&slow);
            }
            Self::ReplaceFollower => replace(cluster, leader, follower, recording),
        }
    }
}

/// Member `victim` removed through `leader`, killed and wiped; a new
/// member of its binary added and started in its place.
fn replace(cluster: &mut Cluster, leader: usize, victim: usize, recording: &Recording) {
    let name = format!("m{}", cluster.members.len());
    let planned = cluster.new_member(&name, cluster.members[victim].kind);
    // Its clients dial the new member from their next dial on (the dial
    // waits for it to come up), never the removed one again.
    recording.redirect(victim, &planned.address());
    let via = cluster.members[leader].address();
    let id = probe::member_id(&via, &cluster.members[victim].peer_url());
    let removed = ctl_ok(&via, &["member", "remove", &id]);
    assert!(removed.contains("removed"), "{removed}");
    cluster.members[victim].kill();
    let wiped = &cluster.members[victim].data_dir;
    std::fs::remove_dir_all(wiped).unwrap_or_else(|e| panic!("{}: {e}", wiped.display()));
    cluster.members[victim] = cluster.join(leader, planned, false);
}

/// What a run recorded and what the checks found.
#[derive(Clone, Debug)]
pub struct Report {
    /// Operations recorded, the final put included.
    pub operations: usize,
    /// Writes recorded without an answer.
    pub unknown: usize,
    /// Operations recorded while the fault lasted, and how long it did.
    pub during_fault: (usize, Duration),
    /// The history's last revision (0 when it did not check).
    pub revisions: i64,
    /// Why the history is not linearizable or the watch not exact.
    pub violations: Vec<String>,
    /// From the cluster's start to the end of the checks.
    pub elapsed: Duration,
}

impl Report {
    /// Panics with the violations, naming `what` ran, if there are any.
    pub fn assert_checked(&self, what: &str) {
        assert!(
            self.violations.is_empty(),
            "{what}: {} violation(s):\n{}",
            self.violations.len(),
            self.violations.join("\n")
        );
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} operations ({} unknown, {} in the {:.1} s of the fault), {} revisions, {} violations, {:.1} s",
            self.operations,
            self.unknown,
            self.during_fault.0,
            self.during_fault.1.as_secs_f64(),
            self.revisions,
            self.violations.len(),
            self.elapsed.as_secs_f64()
        )
    }
}

/// Starts a cluster of `kinds` set up as `options` say, records
/// `workload` across `fault`, and checks what the clients saw.
pub fn run(
    kinds: &[ServerKind],
    fault: Fault,
    workload: Workload,
    options: ClusterOptions,
) -> Report {
    let started = Instant::now();
    let mut cluster = Cluster::start(options, kinds);
    let leader = cluster.wait_leader();
    let watched = (leader + 1) % cluster.members.len();
    let recording = Recording::start(&cluster, watched, workload);
    recording.wait_recorded(workload.clients * workload.ops / 3);
    let before = recording.recorded.load(Ordering::Acquire);
    let struck = Instant::now();
    fault.strike(&mut cluster, leader, watched, &recording);
    recording.healed.store(true, Ordering::Release);
    let during = recording.recorded.load(Ordering::Acquire) - before;
    let fault_lasted = struck.elapsed();
    let mut report = recording.finish(&cluster);
    report.during_fault = (during, fault_lasted);
    report.elapsed = started.elapsed();
    report
}

/// Clients at work and the watch, while the history is recorded.
struct Recording {
    workload: Workload,
    started: Instant,
    watched: usize,
    watcher: Grpc,
    stream: usize,
    created_revision: i64,
    /// Where each member's clients dial, by member position.
    endpoints: Arc<Mutex<Vec<String>>>,
    recorded: Arc<AtomicUsize>,
    /// Set once the fault is over; clients hold before their last third
    /// until then, so some of the history always follows the heal.
    healed: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Operation>>>,
    clients: Vec<JoinHandle<()>>,
}

impl Recording {
    /// Opens the watch on member `watched` and starts the clients.
    fn start(cluster: &Cluster, watched: usize, workload: Workload) -> Self {
        let started = Instant::now();
        let endpoints: Vec<String> = cluster.members.iter().map(|m| url(&m.address())).collect();
        let mut watcher = Grpc::connect(&endpoints[watched]).unwrap_or_else(|e| panic!("{e}"));
        let stream = watcher.watch_open();
        let create = WatchCreateRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            start_revision: 2,
            prev_kv: true,
            ..Default::default()
        };
        watcher
            .watch_send(
                stream,
                WatchRequest {
                    request_union: Some(watch_request::RequestUnion::CreateRequest(create)),
                },
            )
            .unwrap_or_else(|e| panic!("watch: {e:?}"));
        let created = watcher
            .watch_recv(stream, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("watch created: {e:?}"))
            .unwrap_or_else(|| panic!("no answer to the watch's creation"));
        assert!(created.created, "{created:?}");
        let mut recording = Self {
            workload,
            started,
            watched,
            watcher,
            stream,
            created_revision: created.header.map_or(0, |h| h.revision),
            endpoints: Arc::new(Mutex::new(endpoints)),
            recorded: Arc::new(AtomicUsize::new(0)),
            healed: Arc::new(AtomicBool::new(false)),
            history: Arc::new(Mutex::new(Vec::new())),
            clients: Vec::new(),
        };
        recording.clients = (0..workload.clients)
            .map(|client| recording.spawn_client(client))
            .collect();
        recording
    }

    fn spawn_client(&self, client: usize) -> JoinHandle<()> {
        let workload = self.workload;
        let started = self.started;
        let (endpoints, recorded, healed, history) = (
            self.endpoints.clone(),
            self.recorded.clone(),
            self.healed.clone(),
            self.history.clone(),
        );
        thread::spawn(move || {
            let at = || nanos_since(started);
            let endpoint = || {
                let endpoints = endpoints.lock().unwrap_or_else(PoisonError::into_inner);
                endpoints[client % endpoints.len()].clone()
            };
            let mut rng = Rng(client as u64 + 1);
            let mut seen = vec![0; workload.keys as usize];
            let mut grpc: Option<Grpc> = None;
            let mut n = 0;
            let hold_at = workload.ops * 2 / 3;
            for _ in 0..workload.ops * ATTEMPTS_PER_OP {
                if n == workload.ops || started.elapsed() > workload.client_deadline {
                    break;
                }
                while n == hold_at
                    && !healed.load(Ordering::Acquire)
                    && started.elapsed() < workload.client_deadline
                {
                    thread::sleep(HOLD_POLL);
                }
                let Some(client_grpc) = grpc.as_mut() else {
                    // Its member may be down: dial again (bounded), and
                    // record nothing until a request is sent.
                    grpc = Grpc::connect(&endpoint()).ok();
                    if grpc.is_none() {
                        thread::sleep(REDIAL_PAUSE);
                    }
                    continue;
                };
                let request = next_request(&mut rng, workload.keys, client, n, &seen);
                let invoke = at();
                let outcome = send(client_grpc, &request);
                let complete = matches!(outcome, Outcome::Ok(_)).then(at);
                if !matches!(outcome, Outcome::Ok(_)) {
                    grpc = None;
                }
                remember(&outcome, &mut seen);
                history
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Operation {
                        client: client as u32,
                        invoke,
                        complete,
                        request,
                        outcome,
                    });
                n += 1;
                recorded.fetch_add(1, Ordering::AcqRel);
            }
        })
    }

    /// Waits until `count` operations are recorded (or the clients'
    /// deadline).
    fn wait_recorded(&self, count: usize) {
        while self.recorded.load(Ordering::Acquire) < count
            && self.started.elapsed() < self.workload.client_deadline
        {
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Member `member`'s clients dial `address` from their next dial on.
    fn redirect(&self, member: usize, address: &str) {
        self.endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)[member] = url(address);
    }

    /// Joins the clients, closes the history with a final put, and checks
    /// it and the watch.
    fn finish(mut self, cluster: &Cluster) -> Report {
        for client in std::mem::take(&mut self.clients) {
            client
                .join()
                .unwrap_or_else(|_| panic!("a client panicked"));
        }
        let mut history =
            std::mem::take(&mut *self.history.lock().unwrap_or_else(PoisonError::into_inner));
        // A final put once the cluster is whole: every write still in
        // flight has landed before it, so the history's last revision is
        // its own; and every member must show it.
        cluster.wait_leader();
        let mut last_client = Grpc::connect(&url(&cluster.members[self.watched].address()))
            .unwrap_or_else(|e| panic!("{e}"));
        // A leader elected just now may still refuse a proposal or two
        // ("leader changed"): the put is retried, each failure recorded
        // as the unknown outcome it is.
        let mut final_put = Err(String::new());
        for attempt in 0..FINAL_PUT_ATTEMPTS {
            let request = PutRequest {
                key: b"k-final".to_vec(),
                value: b"end".to_vec(),
                ..Default::default()
            };
            let invoke = nanos_since(self.started);
            let answer = last_client.put(request.clone());
            let complete = answer.is_ok().then(|| nanos_since(self.started));
            if let Err(e) = &answer {
                eprintln!("the final put, attempt {attempt}: {e:?}");
                final_put = Err(format!("{e:?}"));
                thread::sleep(Duration::from_millis(200));
            }
            let succeeded = answer.is_ok();
            let request = Request::Put(request);
            history.push(Operation {
                client: self.workload.clients as u32,
                invoke,
                complete,
                outcome: Outcome::of(&request, answer.map(Response::Put)),
                request,
            });
            if succeeded {
                final_put = Ok(());
                break;
            }
        }
        if let Err(e) = final_put {
            panic!(
                "the final put failed {FINAL_PUT_ATTEMPTS} times, last: {e}\n{:#?}",
                cluster.logs()
            );
        }
        for member in 0..cluster.members.len() {
            cluster.wait_value(member, "k-final", "end", true);
        }
        let unknown = history
            .iter()
            .filter(|op| op.outcome == Outcome::Unknown)
            .count();
        let mut report = Report {
            operations: history.len(),
            unknown,
            during_fault: (0, Duration::ZERO),
            revisions: 0,
            violations: Vec::new(),
            elapsed: self.started.elapsed(),
        };
        let model = match check(&history, 1) {
            Ok(model) => model,
            Err(v) => {
                let around: Vec<_> = history
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| v.operation.is_some_and(|o| i.abs_diff(o) < 3))
                    .collect();
                report
                    .violations
                    .push(format!("not linearizable: {v}\naround it: {around:#?}"));
                return report;
            }
        };
        report.revisions = model.revision();
        let total = self.workload.clients * self.workload.ops;
        assert!(
            model.revision() > 1 + (total / 10) as i64,
            "few writes landed: {report}"
        );

        // The watch, up to the history's last revision.
        let mut responses = Vec::new();
        let waited = Instant::now();
        let mut last = 1;
        while last < model.revision() && waited.elapsed() < self.workload.watch_deadline {
            match self
                .watcher
                .watch_recv(self.stream, Duration::from_millis(500))
            {
                Ok(Some(response)) => {
                    if let Some(event) = response.events.last() {
                        last = event.kv.as_ref().map_or(last, |kv| kv.mod_revision);
                    }
                    responses.push(response);
                }
                Ok(None) => {}
                Err(e) => {
                    report.violations.push(format!("watch: ended: {e:?}"));
                    return report;
                }
            }
        }
        if last != model.revision() {
            report.violations.push(format!(
                "watch: delivered up to revision {last} of {} within {:?}",
                model.revision(),
                self.workload.watch_deadline
            ));
        }
        let watch = Watch {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            start_revision: 2,
            prev_kv: true,
            responses,
            created_revision: self.created_revision,
        };
        // Where writes of unknown outcome leave more than one explanation,
        // the model follows the one the watch shows the server made; the
        // watch is then held to that model.
        let model = match check_with_watches(&history, std::slice::from_ref(&watch), 1) {
            Ok(model) => model,
            Err(v) => {
                report
                    .violations
                    .push(format!("not linearizable with the watch's events: {v}"));
                return report;
            }
        };
        if let Err(v) = check_watch(&watch, &model) {
            report.violations.push(format!("watch: {v}"));
        }
        report.elapsed = self.started.elapsed();
        report
    }
}

/// A small deterministic generator, one per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// The next request of client `client`, given the mod revisions it last
/// read (for its compare-and-sets).
fn next_request(rng: &mut Rng, keys: u64, client: usize, n: usize, seen: &[i64]) -> Request {
    let k = rng.next() % keys;
    let kind = rng.next() % traffic::KINDS;
    traffic::request(kind, k, &format!("c{client}-{n}"), seen[k as usize])
}

/// Sends `request`; answers the outcome.
fn send(client: &mut Grpc, request: &Request) -> Outcome {
    let answer = match request {
        Request::Range(r) => client.range(r.clone()).map(Response::Range),
        Request::Put(r) => client.put(r.clone()).map(Response::Put),
        Request::DeleteRange(r) => client.delete_range(r.clone()).map(Response::DeleteRange),
        Request::Txn(r) => client.txn(r.clone()).map(Response::Txn),
        Request::Compaction(r) => client.compact(*r).map(Response::Compaction),
        Request::LeaseGrant(r) => client.lease_grant(*r).map(Response::LeaseGrant),
        Request::LeaseRevoke(r) => client.lease_revoke(*r).map(Response::LeaseRevoke),
    };
    Outcome::of(request, answer)
}

/// The mod revisions of keys a response shows.
fn remember(outcome: &Outcome, seen: &mut [i64]) {
    let Outcome::Ok(Response::Range(r)) = outcome else {
        return;
    };
    for kv in &r.kvs {
        if let Some(k) = std::str::from_utf8(&kv.key)
            .ok()
            .and_then(|k| k.strip_prefix('k'))
            .and_then(|k| k.parse::<usize>().ok())
        {
            if let Some(slot) = seen.get_mut(k) {
                *slot = kv.mod_revision;
            }
        }
    }
}

fn nanos_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn url(address: &str) -> String {
    format!("http://{address}")
}
