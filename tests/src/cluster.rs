//! Multi-member clusters of real processes on 127.0.0.1: members planned
//! with their ports and data dirs, started together as a new cluster,
//! killed and restarted, joined later through `etcdctl member add`, and
//! watched until they agree on a leader or show a write.
//!
//! What differs between tests is data, in [`ClusterOptions`]: which
//! binary each member runs (mixed clusters too), plaintext or TLS peer
//! URLs and the TLS flags, where ports come from, fault-injecting proxies
//! in front of the peer ports, further flags, and how long waits may take. Every wait is bounded and, when it fails, panics
//! with the members' logs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oxetcd_conformance::{Server, ServerKind};

use crate::etcdctl::ctl_ok;
use crate::launch::Launch;
use crate::ports::Ports;
use crate::probe::{self, status};
use crate::proxy::PeerProxies;

/// Raft timing for clusters under test: etcd's ratio (heartbeat a tenth
/// of the election timeout), elections ten times faster than etcd's
/// default, so a killed leader is replaced in well under a second.
pub const FAST_TIMING: [&str; 4] = ["--heartbeat-interval", "50", "--election-timeout", "500"];

/// Longest a cluster waits, by default, for a leader that all running
/// members agree on.
pub const LEADER_DEADLINE: Duration = Duration::from_secs(10);

/// Longest a cluster waits, by default, for a member to catch up with a
/// write.
pub const CATCH_UP_DEADLINE: Duration = Duration::from_secs(15);

/// A mixed cluster: both binaries, tokio's twice.
pub const MIXED: [ServerKind; 3] = [
    ServerKind::Oxetcd,
    ServerKind::OxetcdSmol,
    ServerKind::Oxetcd,
];

/// The election timeout of [`FAST_TIMING`].
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(500);

/// Pause between two polls of a wait.
const POLL: Duration = Duration::from_millis(50);

/// How a test's cluster is set up.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// `--initial-cluster-token`.
    pub token: String,
    /// Where the members' client and peer ports come from.
    pub ports: Ports,
    /// Flags every member gets after the harness's own ([`FAST_TIMING`]
    /// unless replaced; a flag given twice takes the later value).
    pub flags: Vec<String>,
    /// `Some`: peer URLs are `https://` and every member gets these TLS
    /// flags (a member's own may be changed before it starts);
    /// `None`: plaintext peer URLs.
    pub peer_tls: Option<Vec<String>>,
    /// Longest to wait for a leader that all running members agree on.
    pub leader_deadline: Duration,
    /// Longest to wait for a member to show a write.
    pub catch_up_deadline: Duration,
    /// Every member behind a proxy of [`Cluster::proxies`]: it advertises
    /// (and the others dial) the proxy's port, and listens on its own.
    pub peer_proxies: bool,
}

impl ClusterOptions {
    /// Plaintext peers, ports below the ephemeral range, [`FAST_TIMING`], 10 s to
    /// elect a leader and 15 s to catch up.
    pub fn new(token: &str) -> Self {
        Self {
            token: token.to_owned(),
            ports: Ports::BELOW_EPHEMERAL,
            flags: FAST_TIMING.iter().map(|f| (*f).to_owned()).collect(),
            peer_tls: None,
            leader_deadline: LEADER_DEADLINE,
            catch_up_deadline: CATCH_UP_DEADLINE,
            peer_proxies: false,
        }
    }

    /// `flags` added after the ones already set.
    pub fn flags<S: AsRef<str>>(mut self, flags: &[S]) -> Self {
        self.flags
            .extend(flags.iter().map(|f| f.as_ref().to_owned()));
        self
    }

    /// `https://` peer URLs, every member with `flags` (its TLS flags).
    pub fn peer_tls<S: AsRef<str>>(mut self, flags: &[S]) -> Self {
        self.peer_tls = Some(flags.iter().map(|f| f.as_ref().to_owned()).collect());
        self
    }

    /// Ports from `ports`.
    pub fn ports(mut self, ports: Ports) -> Self {
        self.ports = ports;
        self
    }

    /// Every member behind a fault-injecting proxy when `on`.
    pub fn peer_proxies(mut self, on: bool) -> Self {
        self.peer_proxies = on;
        self
    }

    /// Waits bounded by `leader` (an agreed leader) and `catch_up` (a
    /// write seen).
    pub fn deadlines(mut self, leader: Duration, catch_up: Duration) -> Self {
        self.leader_deadline = leader;
        self.catch_up_deadline = catch_up;
        self
    }
}

/// One member: its plan (name, binary, ports, data dir, flags) and, while
/// it runs, its process.
pub struct Member {
    /// `--name`.
    pub name: String,
    /// Which binary it runs.
    pub kind: ServerKind,
    /// Its client port on 127.0.0.1 (plaintext).
    pub client_port: u16,
    /// Its peer listener's port on 127.0.0.1.
    pub peer_port: u16,
    /// The peer port the others dial: `peer_port`, or a proxy's in front
    /// of it (set before the member starts).
    pub advertised_peer_port: u16,
    /// Its data dir, kept across restarts.
    pub data_dir: PathBuf,
    /// Its peer TLS flags; `None`: plaintext peer URLs.
    pub peer_tls: Option<Vec<String>>,
    /// The running process; `None` while stopped.
    pub server: Option<Server>,
    token: String,
    flags: Vec<String>,
    /// The initial cluster and state of the last start, for restarts.
    started_with: Option<(String, String)>,
}

impl Member {
    /// A member named `name` running `kind`, its data dir under `root`,
    /// set up as `options` say; not started.
    pub fn new(name: &str, kind: ServerKind, root: &Path, options: &ClusterOptions) -> Self {
        let peer_port = options.ports.take();
        Self {
            name: name.to_owned(),
            kind,
            client_port: options.ports.take(),
            peer_port,
            advertised_peer_port: peer_port,
            data_dir: root.join(name),
            peer_tls: options.peer_tls.clone(),
            server: None,
            token: options.token.clone(),
            flags: options.flags.clone(),
            started_with: None,
        }
    }

    /// `127.0.0.1:<client port>`, as etcdctl's `--endpoints` takes it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The peer URL the others know this member by.
    pub fn peer_url(&self) -> String {
        format!(
            "{}://127.0.0.1:{}",
            self.peer_scheme(),
            self.advertised_peer_port
        )
    }

    /// The peer URL this member listens on.
    pub fn listen_peer_url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.peer_scheme(), self.peer_port)
    }

    fn peer_scheme(&self) -> &'static str {
        if self.peer_tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// How this member starts as one of `initial_cluster` in `state`.
    pub fn launch(&self, initial_cluster: &str, state: &str) -> Launch {
        let client_url = format!("http://127.0.0.1:{}", self.client_port);
        Launch::new(
            self.kind,
            &self.name,
            &self.data_dir,
            vec![client_url],
            self.listen_peer_url(),
        )
        .member(&self.peer_url(), initial_cluster, state, &self.token)
        .flags(&self.flags)
        .flags(self.peer_tls.as_deref().unwrap_or_default())
    }

    /// Starts this member as one of `initial_cluster` in `state` (`new`
    /// or `existing`); panics if it does not come up.
    pub fn start(&mut self, initial_cluster: &str, state: &str) {
        let server = self
            .launch(initial_cluster, state)
            .start()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.name));
        self.server = Some(server);
        self.started_with = Some((initial_cluster.to_owned(), state.to_owned()));
    }

    /// Starts this member again as it was started last.
    pub fn restart(&mut self) {
        let (initial, state) = self
            .started_with
            .clone()
            .unwrap_or_else(|| panic!("{} was never started", self.name));
        self.start(&initial, &state);
    }

    /// Starts this member again as it was started last, with `flags`
    /// added (a flag given twice takes the later value); the error (with
    /// the log) when it does not come up.
    pub fn restart_with(&mut self, flags: &[&str]) -> Result<(), String> {
        let (initial, state) = self
            .started_with
            .clone()
            .unwrap_or_else(|| panic!("{} was never started", self.name));
        let server = self.launch(&initial, &state).flags(flags).start()?;
        self.server = Some(server);
        Ok(())
    }

    /// Kills the process with SIGKILL; its data dir stays.
    pub fn kill(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill();
        }
    }

    /// Sends the running process a signal by name (`STOP`, `CONT`, …).
    pub fn signal(&self, name: &str) {
        let pid = self
            .server
            .as_ref()
            .and_then(Server::pid)
            .unwrap_or_else(|| panic!("{} is not running", self.name));
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .unwrap_or_else(|e| panic!("kill -{name}: {e}"));
        assert!(status.success(), "kill -{name} {pid}: {status}");
    }

    /// Whether the process was started and not stopped since.
    pub fn is_up(&self) -> bool {
        self.server.is_some()
    }

    /// Everything the running process logged (empty while stopped).
    pub fn log(&self) -> String {
        self.server.as_ref().map(Server::log).unwrap_or_default()
    }

    /// The last lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.server
            .as_ref()
            .map(Server::log_tail)
            .unwrap_or_default()
    }
}

/// `name=peer URL` of every member, as `--initial-cluster` takes them.
pub fn initial_cluster(members: &[&Member]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A cluster: its members (`m0`, `m1`, … in order), the temporary
/// directory their data dirs live in, and their peer proxies if any.
pub struct Cluster {
    /// The members, started or not.
    pub members: Vec<Member>,
    /// How it was set up.
    pub options: ClusterOptions,
    root: tempfile::TempDir,
    /// Dropped after the members: their links stay up while they stop.
    proxies: Option<PeerProxies>,
}

impl Cluster {
    /// Starts one member per entry of `kinds` as a new cluster.
    pub fn start(options: ClusterOptions, kinds: &[ServerKind]) -> Self {
        let mut cluster = Self::plan(options, kinds);
        cluster.start_all();
        cluster
    }

    /// Plans one member per entry of `kinds`, none started: a test may
    /// change a member's plan (its TLS flags, the port it is advertised
    /// at) before [`Cluster::start_all`].
    pub fn plan(options: ClusterOptions, kinds: &[ServerKind]) -> Self {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let mut cluster = Self {
            members: Vec::new(),
            proxies: options.peer_proxies.then(PeerProxies::new),
            options,
            root,
        };
        for (i, kind) in kinds.iter().enumerate() {
            let member = cluster.new_member(&format!("m{i}"), *kind);
            cluster.members.push(member);
        }
        cluster
    }

    /// Starts every planned member as a new cluster of them all.
    pub fn start_all(&mut self) {
        let initial = self.initial_cluster();
        for member in &mut self.members {
            member.start(&initial, "new");
        }
    }

    /// `--initial-cluster` of every member.
    pub fn initial_cluster(&self) -> String {
        initial_cluster(&self.members.iter().collect::<Vec<_>>())
    }

    /// The directory the members' data dirs are in.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A member set up as the others (behind a proxy of its own when the
    /// others are), not started and not in the cluster.
    pub fn new_member(&self, name: &str, kind: ServerKind) -> Member {
        let mut member = Member::new(name, kind, self.root(), &self.options);
        if let Some(proxies) = &self.proxies {
            member.advertised_peer_port = proxies.front(name, member.peer_port, self.options.ports);
        }
        member
    }

    /// The members' peer proxies; panics unless
    /// [`ClusterOptions::peer_proxies`] was set.
    pub fn proxies(&self) -> &PeerProxies {
        self.proxies
            .as_ref()
            .unwrap_or_else(|| panic!("a cluster without peer proxies"))
    }

    /// Adds a member named `name` running `kind` through `etcdctl member
    /// add` on member `via` (as a learner when `learner`) and starts it
    /// as `existing`, with the running members and itself as its initial
    /// cluster. It is not pushed to [`Cluster::members`].
    pub fn add_member(&self, via: usize, name: &str, kind: ServerKind, learner: bool) -> Member {
        self.join(via, self.new_member(name, kind), learner)
    }

    /// [`Cluster::add_member`] for a member planned with
    /// [`Cluster::new_member`].
    pub fn join(&self, via: usize, mut member: Member, learner: bool) -> Member {
        let peer_url = member.peer_url();
        let mut args = vec!["member", "add", &member.name];
        if learner {
            args.push("--learner");
        }
        args.extend(["--peer-urls", &peer_url]);
        let added = ctl_ok(&self.members[via].address(), &args);
        assert!(added.contains("added"), "{added}");
        let mut current: Vec<&Member> = self.members.iter().filter(|m| m.is_up()).collect();
        current.push(&member);
        let initial = initial_cluster(&current);
        member.start(&initial, "existing");
        member
    }

    /// The leader's position once every running member reports the same
    /// one.
    pub fn wait_leader(&self) -> usize {
        let all: Vec<usize> = (0..self.members.len()).collect();
        self.wait_leader_among(&all)
    }

    /// The leader's position once every running member in `among`
    /// reports the same one.
    pub fn wait_leader_among(&self, among: &[usize]) -> usize {
        let started = Instant::now();
        let deadline = self.options.leader_deadline;
        loop {
            let up: Vec<usize> = among
                .iter()
                .copied()
                .filter(|i| self.members[*i].is_up())
                .collect();
            let statuses: Vec<Option<(u64, u64)>> = up
                .iter()
                .map(|i| status(&self.members[*i].address()))
                .collect();
            let leaders: Vec<u64> = statuses.iter().map(|s| s.map_or(0, |s| s.1)).collect();
            if leaders[0] != 0 && leaders.iter().all(|l| *l == leaders[0]) {
                let found = statuses
                    .iter()
                    .position(|s| s.is_some_and(|(id, _)| id == leaders[0]));
                if let Some(pos) = found {
                    return up[pos];
                }
            }
            if started.elapsed() > deadline {
                panic!(
                    "no agreed leader within {deadline:?}: {leaders:x?}\n{:#?}",
                    self.logs()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits until `get key` on member `member` prints `value`;
    /// `serializable` reads the member's own state. Panics with every
    /// member's log after [`ClusterOptions::catch_up_deadline`].
    pub fn wait_value(&self, member: usize, key: &str, value: &str, serializable: bool) {
        let address = self.members[member].address();
        let within = self.options.catch_up_deadline;
        if let Err(e) = probe::wait_value(&address, key, value, serializable, within) {
            panic!("{e}\n{:#?}", self.logs());
        }
    }

    /// The running members' addresses, comma-separated for etcdctl.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .filter(|m| m.is_up())
            .map(Member::address)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The end of every member's log.
    pub fn logs(&self) -> Vec<String> {
        self.members.iter().map(Member::log_tail).collect()
    }
}
