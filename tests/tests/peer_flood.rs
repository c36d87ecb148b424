//! A flood of idle connections on the peer ports does not keep a
//! restarted member out, and the members' logs stay small while it lasts.
//!
//! A mixed three-member cluster on 127.0.0.1 takes a write; one follower
//! is killed with SIGKILL (the smol one in the first round unless it
//! leads, a tokio one in the second, each round on the cluster the one
//! before left). Then every
//! member's peer port (the dead one's too, since it comes back on the
//! same port) gets more idle connections than a member admits
//! (`INBOUND_CONNECTIONS_MAX + HANDSHAKES_MAX + 16`), which never send a
//! byte and are reopened as soon as the member closes them. While that
//! goes on, more keys are put through the leader and the
//! killed member is restarted: within [`REJOIN_MAX`] of its restart it
//! must report healthy and serve the last key from its own state (so it
//! caught up from the others through the flood). The flood is held for
//! [`FLOOD_HOLD`] in all, then every member's log growth over the flood
//! must stay under [`LOG_BYTES_MAX`]: refusals are logged rate-limited
//! with counts, not one line per connection (a budget of lines per second,
//! so the bound holds for a flood of this length, not for any length).
//! The flood's threads stop when the test ends or after
//! [`FLOOD_DEADLINE`], whichever comes first.

use std::io::{self, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use oxetcd_server::peer::{HANDSHAKES_MAX, INBOUND_CONNECTIONS_MAX};
use oxetcd_tests::cluster::MIXED;
use oxetcd_tests::etcdctl::ctl_ok;
use oxetcd_tests::probe::{http_get, wait_value};
use oxetcd_tests::{Cluster, ClusterOptions, ServerKind};

/// Idle connections held open against each peer port.
const IDLE: usize = INBOUND_CONNECTIONS_MAX + HANDSHAKES_MAX + 16;

/// Longest from a restart until the member is healthy and has the last key.
const REJOIN_MAX: Duration = Duration::from_secs(3);

/// How long the flood runs in all, from its start to its stop.
const FLOOD_HOLD: Duration = Duration::from_secs(8);

/// The flood's threads stop by then whatever happens.
const FLOOD_DEADLINE: Duration = Duration::from_secs(20);

/// Most a member may log over the whole flood.
const LOG_BYTES_MAX: usize = 64 * 1024;

/// Keys put through the leader while the flood runs.
const KEYS_DURING_FLOOD: usize = 5;

/// Longest a flood connection attempt may take (a full accept queue drops
/// SYNs, and a plain connect would wait for retransmissions).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);

/// What one port's flood did.
#[derive(Debug, Default)]
struct FloodStats {
    /// Connections established.
    opened: usize,
    /// Connections the member closed (or answered) that were reopened.
    closed_by_member: usize,
    /// Connection attempts that failed (refused while the member was
    /// down, or timed out).
    failed: usize,
}

/// Holds [`IDLE`] idle connections to `addr`, reopening each as soon as
/// it is closed, until `stop` is set or `deadline` passes.
fn flood(addr: SocketAddr, stop: &AtomicBool, deadline: Instant) -> FloodStats {
    let mut stats = FloodStats::default();
    let open = |stats: &mut FloodStats| {
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .and_then(|s| s.set_nonblocking(true).map(|()| s));
        match stream {
            Ok(stream) => {
                stats.opened += 1;
                Some(stream)
            }
            Err(_) => {
                stats.failed += 1;
                None
            }
        }
    };
    let mut streams: Vec<Option<TcpStream>> = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        if stop.load(Ordering::Acquire) || Instant::now() >= deadline {
            return stats;
        }
        let stream = open(&mut stats);
        streams.push(stream);
    }
    while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
        for slot in &mut streams {
            if stop.load(Ordering::Acquire) {
                break;
            }
            let closed = match slot {
                None => true,
                Some(stream) => match stream.read(&mut [0u8; 64]) {
                    Ok(_) => {
                        stats.closed_by_member += 1;
                        true
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                    Err(_) => {
                        stats.closed_by_member += 1;
                        true
                    }
                },
            };
            if closed {
                std::thread::sleep(Duration::from_millis(1));
                *slot = open(&mut stats);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    stats
}

/// The flood's threads, one per port; stopped and joined when dropped.
struct Flood {
    stop: Arc<AtomicBool>,
    threads: Vec<(u16, JoinHandle<FloodStats>)>,
}

impl Flood {
    fn start(ports: &[u16]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + FLOOD_DEADLINE;
        let threads = ports
            .iter()
            .map(|&port| {
                let stop = stop.clone();
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                (
                    port,
                    std::thread::spawn(move || flood(addr, &stop, deadline)),
                )
            })
            .collect();
        Self { stop, threads }
    }

    /// Stops every thread and returns what each port's flood did.
    fn stop(mut self) -> Vec<(u16, FloodStats)> {
        self.stop.store(true, Ordering::Release);
        self.threads
            .drain(..)
            .map(|(port, thread)| (port, thread.join().expect("flood thread")))
            .collect()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for (_, thread) in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[test]
fn a_peer_port_flood_does_not_keep_a_restarted_member_out() {
    let mut cluster = Cluster::start(ClusterOptions::new("peer-flood"), &MIXED);
    // One round per binary: the member restarted under the flood runs it.
    for (round, kind) in [ServerKind::OxetcdSmol, ServerKind::Oxetcd]
        .into_iter()
        .enumerate()
    {
        flood_round(&mut cluster, round, kind);
    }
}

/// Kills a follower (one running `kind` if there is one), floods every
/// peer port, restarts it under the flood and checks it rejoins in time
/// and that the logs stay small.
fn flood_round(cluster: &mut Cluster, round: usize, kind: ServerKind) {
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    let first = format!("flood/{round}/0");
    ctl_ok(&leader_address, &["put", &first, "v0"]);
    let followers = (0..cluster.members.len()).filter(|&i| i != leader);
    let victim = followers
        .clone()
        .find(|&i| cluster.members[i].kind == kind)
        .or_else(|| followers.clone().next())
        .expect("a follower");
    cluster.wait_value(victim, &first, "v0", true);
    cluster.members[victim].kill();
    eprintln!(
        "round {round}: leader m{leader} ({}), restarting m{victim} ({})",
        cluster.members[leader].kind.name(),
        cluster.members[victim].kind.name()
    );

    let ports: Vec<u16> = cluster.members.iter().map(|m| m.peer_port).collect();
    let log_before: Vec<usize> = cluster.members.iter().map(|m| m.log().len()).collect();
    let flood_started = Instant::now();
    let flood = Flood::start(&ports);
    // The flood fills the live members' queues first.
    std::thread::sleep(Duration::from_secs(1));

    let mut last = (String::new(), String::new());
    for n in 1..=KEYS_DURING_FLOOD {
        let (key, value) = (format!("flood/{round}/{n}"), format!("v{n}"));
        ctl_ok(&leader_address, &["put", &key, &value]);
        last = (key, value);
    }

    let restarted = Instant::now();
    cluster.members[victim].restart();
    let listening = restarted.elapsed();
    let address = cluster.members[victim].address();
    if let Err(e) = wait_value(&address, &last.0, &last.1, true, REJOIN_MAX) {
        panic!("{e}\n{:#?}", cluster.logs());
    }
    let caught_up = restarted.elapsed();
    let mut health = http_get(&address, "/health");
    while health.0 != 200 && restarted.elapsed() < REJOIN_MAX {
        std::thread::sleep(Duration::from_millis(50));
        health = http_get(&address, "/health");
    }
    let healthy = restarted.elapsed();
    eprintln!(
        "round {round}: m{victim} restarted under the flood: client port up after \
         {listening:?}, {}={} served after {caught_up:?}, healthy after {healthy:?}",
        last.0, last.1
    );
    assert_eq!(
        health.0,
        200,
        "m{victim} not healthy within {REJOIN_MAX:?}: {health:?}\n{:#?}",
        cluster.logs()
    );
    assert!(
        healthy <= REJOIN_MAX,
        "m{victim} took {healthy:?} to rejoin\n{:#?}",
        cluster.logs()
    );

    // The cluster keeps working under the flood: a write through the
    // leader reaches the restarted member.
    if let Some(rest) = FLOOD_HOLD.checked_sub(flood_started.elapsed()) {
        std::thread::sleep(rest);
    }
    let after = format!("flood/{round}/after");
    ctl_ok(&leader_address, &["put", &after, "done"]);
    cluster.wait_value(victim, &after, "done", true);
    let flooded_for = flood_started.elapsed();
    let stats = flood.stop();

    for (port, s) in &stats {
        eprintln!(
            "round {round}: peer port {port}: {} connections opened, {} closed by the member \
             and reopened, {} attempts failed",
            s.opened, s.closed_by_member, s.failed
        );
    }
    for (i, member) in cluster.members.iter().enumerate() {
        // The restarted member's log is all from this run, its startup
        // included.
        let before = if i == victim { 0 } else { log_before[i] };
        let bytes = member.log().len().saturating_sub(before);
        eprintln!(
            "round {round}: m{i} ({}) logged {bytes} bytes over the {flooded_for:?} flood{}",
            member.kind.name(),
            if i == victim { " (restarted)" } else { "" }
        );
        assert!(
            bytes < LOG_BYTES_MAX,
            "m{i} logged {bytes} bytes during the flood\n{}",
            member.log_tail()
        );
    }
    for (port, s) in &stats {
        assert!(
            s.opened >= IDLE,
            "the flood on {port} opened only {} connections",
            s.opened
        );
    }
}
