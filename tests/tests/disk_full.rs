//! A full disk, as a user meets it: a member (oxetcd and oxetcd-smol)
//! whose data dir is on a small tmpfs that the test fills.
//!
//! While the disk is full, puts fail with `ResourceExhausted` `etcdserver:
//! no space left on device` (the put whose log write met the full disk
//! waits, unacknowledged, until space returns), gets still answer, and the
//! process keeps running. Once the filler is removed, the waiting put lands
//! and new puts succeed. Every acknowledged put is readable, then again
//! after a `kill -9` and a restart on the same data dir.
//!
//! In a three-member cluster (both binaries), a member whose disk is full
//! refuses the writes it is sent and serves serializable reads; the
//! other two go on writing, and it catches up once space returns.
//!
//! A member asked to stop (SIGTERM) while its disk is full stops cleanly
//! and promptly. Started again on the still full disk, it waits for space,
//! or exits saying the disk is full when it must first apply logged
//! entries to the backend; once space returns it serves every
//! acknowledged put.
//!
//! Mounting needs root: the test fails, saying so, when not run as root.
//! Every wait is bounded.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use oxetcd_tests::process::ChildGuard;
use oxetcd_tests::{Grpc, Launch, Ports, Server, ServerKind};

/// The filesystem the data dir lives on: one 64 MiB WAL segment, the
/// backend, and room to fill.
const TMPFS_SIZE: &str = "128m";

/// gRPC's `ResourceExhausted`.
const RESOURCE_EXHAUSTED: i32 = 8;

const DISK_FULL: &str = "etcdserver: no space left on device";

/// Longest to wait for the member to see the disk full, or space back.
const DEADLINE: Duration = Duration::from_secs(20);

/// A refused put must be answered at once, not after a timeout.
const REFUSAL_MAX: Duration = Duration::from_secs(3);

const POLL: Duration = Duration::from_millis(100);

#[test]
fn oxetcd_refuses_writes_on_a_full_disk_and_resumes() {
    refuses_writes_and_resumes(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_refuses_writes_on_a_full_disk_and_resumes() {
    refuses_writes_and_resumes(ServerKind::OxetcdSmol);
}

#[test]
fn oxetcd_stops_cleanly_with_a_full_disk() {
    stops_cleanly_while_full(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_stops_cleanly_with_a_full_disk() {
    stops_cleanly_while_full(ServerKind::OxetcdSmol);
}

/// A tmpfs of [`TMPFS_SIZE`] mounted on a temp dir; unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount() -> Self {
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .expect("running id -u");
        assert_eq!(
            String::from_utf8_lossy(&uid.stdout).trim(),
            "0",
            "disk_full mounts a small tmpfs to fill it: run this test as root"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_SIZE}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("running mount");
        assert!(status.success(), "mount -t tmpfs failed: {status}");
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Detach it at least, so the temp dir can go.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Fills the filesystem holding `dir` with `dir/filler` until a write
/// fails for want of space; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = File::create(&path).expect("creating the filler");
    for chunk_bytes in [1 << 20, 4096] {
        let chunk = vec![7u8; chunk_bytes];
        // Bounded: the tmpfs holds 128 MiB.
        let mut full = false;
        for _ in 0..(256 << 20) / chunk_bytes {
            if let Err(e) = file.write_all(&chunk) {
                assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
                full = true;
                break;
            }
        }
        assert!(full, "{} never filled", dir.display());
    }
    path
}

fn put(client: &mut Grpc, key: &str, value: &str) -> Result<(), (i32, String)> {
    let request = PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        ..Default::default()
    };
    client
        .put(request)
        .map(|_| ())
        .map_err(|f| (f.code, f.message))
}

/// The value of `key`, read linearizably or serializably.
fn get(client: &mut Grpc, key: &str, serializable: bool) -> Option<Vec<u8>> {
    let request = RangeRequest {
        key: key.as_bytes().to_vec(),
        serializable,
        ..Default::default()
    };
    let response = client
        .range(request)
        .unwrap_or_else(|f| panic!("get {key} (serializable: {serializable}): {f:?}"));
    response.kvs.into_iter().next().map(|kv| kv.value)
}

/// Every acknowledged put reads back, both ways.
fn check_all(client: &mut Grpc, acked: &[(String, String)]) {
    for (key, value) in acked {
        for serializable in [false, true] {
            assert_eq!(
                get(client, key, serializable).as_deref(),
                Some(value.as_bytes()),
                "acknowledged {key} (serializable: {serializable})"
            );
        }
    }
}

/// Waits until the member logs that it met the full disk.
fn wait_full(server: &Server) {
    let started = Instant::now();
    while !server.log().contains("the disk is full") {
        assert!(
            started.elapsed() < DEADLINE,
            "the member never met the full disk\n{}",
            server.log_tail()
        );
        std::thread::sleep(POLL);
    }
}

/// Starts `kind` on `data_dir` as the harness's single member, logging to
/// `log_path`, without waiting for it; the process and its client URL.
fn start_member(kind: ServerKind, data_dir: &Path, log_path: &Path) -> (ChildGuard, String) {
    let log = File::create(log_path).expect("log file");
    let client_url = format!("http://127.0.0.1:{}", Ports::Kernel.take());
    let child = ChildGuard::spawn(
        Command::new(kind.program().expect("the server binary"))
            .arg("--name=default")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={}", Ports::Kernel.http_url()))
            .stdout(log.try_clone().expect("log file"))
            .stderr(log),
    )
    .expect("starting the member");
    (child, client_url)
}

fn connect(server: &Server) -> Grpc {
    Grpc::connect(server.endpoint()).expect("connect")
}

fn refuses_writes_and_resumes(kind: ServerKind) {
    let tmpfs = Tmpfs::mount();
    let data_dir = tmpfs.path().join("data");
    let mut server = Server::start_in(kind, &data_dir).expect("start");
    let mut client = connect(&server);
    let mut acked = Vec::new();
    for i in 0..10 {
        let (key, value) = (format!("before/{i}"), format!("v{i}"));
        put(&mut client, &key, &value).expect("put before the disk fills");
        acked.push((key, value));
    }

    let filler = fill(tmpfs.path());
    // This put's log write meets the full disk: it is not acknowledged
    // while the disk is full, and lands once space returns.
    let endpoint = server.endpoint().to_owned();
    let waiting = std::thread::spawn(move || {
        let mut client = Grpc::connect(&endpoint).expect("connect");
        put(&mut client, "waiting", "w")
    });

    // Once the member has met the full disk, later puts are refused at
    // once with the disk-full error.
    wait_full(&server);
    for i in 0..5 {
        let asked = Instant::now();
        assert_eq!(
            put(&mut client, &format!("refused/{i}"), "x"),
            Err((RESOURCE_EXHAUSTED, DISK_FULL.to_owned()))
        );
        assert!(
            asked.elapsed() < REFUSAL_MAX,
            "refused after {:?}",
            asked.elapsed()
        );
    }
    check_all(&mut client, &acked);
    assert_eq!(get(&mut client, "waiting", true), None, "not durable yet");
    assert!(
        server.is_running(),
        "the member exited\n{}",
        server.log_tail()
    );

    fs::remove_file(filler).expect("removing the filler");
    let started = Instant::now();
    while put(&mut client, "after/0", "a0").is_err() {
        assert!(
            started.elapsed() < DEADLINE,
            "puts never resumed\n{}",
            server.log_tail()
        );
        std::thread::sleep(POLL);
    }
    acked.push(("after/0".to_owned(), "a0".to_owned()));
    for i in 1..10 {
        let (key, value) = (format!("after/{i}"), format!("a{i}"));
        put(&mut client, &key, &value).expect("put after space returned");
        acked.push((key, value));
    }
    // The waiting put was written once space returned; its client may
    // have given up by then, but the write is there.
    let waited = waiting.join().expect("the waiting put's thread");
    if waited.is_ok() {
        acked.push(("waiting".to_owned(), "w".to_owned()));
    }
    assert_eq!(
        get(&mut client, "waiting", false).as_deref(),
        Some(&b"w"[..])
    );
    for i in 0..5 {
        let key = format!("refused/{i}");
        assert_eq!(get(&mut client, &key, false), None, "refused {key} landed");
    }
    check_all(&mut client, &acked);
    assert!(
        server.is_running(),
        "the member exited\n{}",
        server.log_tail()
    );

    server.kill();
    drop(client);
    let server = Server::start_in(kind, &data_dir).expect("restart");
    let mut client = connect(&server);
    check_all(&mut client, &acked);
    assert_eq!(
        get(&mut client, "waiting", false).as_deref(),
        Some(&b"w"[..])
    );
    put(&mut client, "restarted", "r").expect("put after the restart");
    drop(client);
    drop(server);
    drop(tmpfs);
}

fn stops_cleanly_while_full(kind: ServerKind) {
    let tmpfs = Tmpfs::mount();
    let data_dir = tmpfs.path().join("data");
    let mut server = Server::start_in(kind, &data_dir).expect("start");
    let mut client = connect(&server);
    let acked = vec![("before".to_owned(), "v".to_owned())];
    put(&mut client, "before", "v").expect("put before the disk fills");
    let filler = fill(tmpfs.path());
    let endpoint = server.endpoint().to_owned();
    let waiting = std::thread::spawn(move || {
        let mut client = Grpc::connect(&endpoint).expect("connect");
        put(&mut client, "waiting", "w")
    });
    wait_full(&server);
    drop(client);
    let status = server
        .terminate(DEADLINE)
        .unwrap_or_else(|e| panic!("stopping with a full disk: {e}"));
    assert!(status.success(), "{status}\n{}", server.log_tail());
    assert!(
        waiting.join().expect("the waiting put's thread").is_err(),
        "the unwritten put was acknowledged"
    );

    // Started again with the disk still full, the member waits for space
    // when its log is what cannot be written (the new leader's entry), and
    // exits saying the disk is full when entries logged before the stop
    // must first be applied to the backend: a backend commit that fails
    // for want of space is final. Either way nothing is lost.
    let logs = tempfile::tempdir().expect("temp dir");
    let log_path = logs.path().join("restart.log");
    let read_log = || fs::read_to_string(&log_path).unwrap_or_default();
    let (mut restarted, client_url) = start_member(kind, &data_dir, &log_path);
    let started = Instant::now();
    let waited = loop {
        assert!(
            started.elapsed() < DEADLINE,
            "the restarted member neither waited nor stopped\n{}",
            read_log()
        );
        if read_log().contains("the disk is full") {
            break true;
        }
        if let Ok(Some(status)) = restarted.child().try_wait() {
            assert!(!status.success(), "exited 0 on a full disk");
            assert!(
                read_log().contains("No space left on device"),
                "exited for another reason\n{}",
                read_log()
            );
            break false;
        }
        std::thread::sleep(POLL);
    };
    if waited {
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            matches!(restarted.child().try_wait(), Ok(None)),
            "the member exited while waiting for space\n{}",
            read_log()
        );
    }

    fs::remove_file(filler).expect("removing the filler");
    let client_url = if waited {
        client_url
    } else {
        let (again, url) = start_member(kind, &data_dir, &log_path);
        restarted = again;
        url
    };
    let started = Instant::now();
    let mut client = loop {
        assert!(
            started.elapsed() < DEADLINE,
            "the member never served\n{}",
            read_log()
        );
        if let Ok(client) = Grpc::connect(&client_url) {
            break client;
        }
        std::thread::sleep(POLL);
    };
    check_all(&mut client, &acked);
    put(&mut client, "after", "a").expect("put once space returned");
    drop(client);
    restarted.kill();
    drop(tmpfs);
}

#[test]
fn a_cluster_member_with_a_full_disk_refuses_writes_and_catches_up() {
    let tmpfs = Tmpfs::mount();
    let scratch = tempfile::tempdir().expect("temp dir");
    let kinds = [
        ServerKind::Oxetcd,
        ServerKind::OxetcdSmol,
        ServerKind::OxetcdSmol,
    ];
    let names = ["m0", "m1", "full"];
    let data_dirs = [
        scratch.path().join("m0"),
        scratch.path().join("m1"),
        tmpfs.path().join("data"),
    ];
    let peers: Vec<String> = (0..3).map(|_| Ports::BELOW_EPHEMERAL.http_url()).collect();
    let initial_cluster = names
        .iter()
        .zip(&peers)
        .map(|(name, peer)| format!("{name}={peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let launches: Vec<Launch> = (0..3)
        .map(|i| {
            Launch::new(
                kinds[i],
                names[i],
                &data_dirs[i],
                vec![Ports::BELOW_EPHEMERAL.http_url()],
                peers[i].clone(),
            )
            .member(&peers[i], &initial_cluster, "new", "disk-full")
        })
        .collect();
    let servers: Vec<Server> = launches
        .iter()
        .map(|l| l.start().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let mut clients: Vec<Grpc> = servers.iter().map(connect).collect();
    let started = Instant::now();
    while put(&mut clients[0], "quorum", "q").is_err() {
        assert!(
            started.elapsed() < DEADLINE,
            "no quorum\n{}",
            servers[0].log_tail()
        );
        std::thread::sleep(POLL);
    }
    let mut acked = vec![("quorum".to_owned(), "q".to_owned())];
    let status = clients[2].status().expect("status of the member to fill");
    let full_id = status.header.map_or(0, |h| h.member_id);
    let full_leads = status.leader == full_id;

    let filler = fill(tmpfs.path());
    // A write reaches the member to fill either way: its own client's, or
    // the leader's replication of one through another member.
    let endpoint = servers[if full_leads { 2 } else { 0 }]
        .endpoint()
        .to_owned();
    let waiting = std::thread::spawn(move || {
        let mut client = Grpc::connect(&endpoint).expect("connect");
        put(&mut client, "waiting", "w")
    });
    wait_full(&servers[2]);
    for i in 0..3 {
        assert_eq!(
            put(&mut clients[2], &format!("refused/{i}"), "x"),
            Err((RESOURCE_EXHAUSTED, DISK_FULL.to_owned())),
            "a put through the member with the full disk"
        );
    }
    assert_eq!(
        get(&mut clients[2], "quorum", true).as_deref(),
        Some(&b"q"[..]),
        "a serializable read on the member with the full disk"
    );
    // The other two are a quorum: writes through them go on, even when
    // the leader is the member that cannot log (it replicates what it is
    // sent before its own write).
    for i in 0..5 {
        let (key, value) = (format!("while-full/{i}"), format!("f{i}"));
        put(&mut clients[1], &key, &value).expect("a put while one member is full");
        acked.push((key, value));
    }

    fs::remove_file(filler).expect("removing the filler");
    let started = Instant::now();
    while put(&mut clients[2], "after", "a").is_err() {
        assert!(
            started.elapsed() < DEADLINE,
            "puts never resumed\n{}",
            servers[2].log_tail()
        );
        std::thread::sleep(POLL);
    }
    acked.push(("after".to_owned(), "a".to_owned()));
    let _ = waiting.join().expect("the waiting put's thread");
    acked.push(("waiting".to_owned(), "w".to_owned()));
    for (i, client) in clients.iter_mut().enumerate() {
        let started = Instant::now();
        // Linearizable reads first: they wait for the member to catch up.
        for (key, value) in &acked {
            while get(client, key, false).as_deref() != Some(value.as_bytes()) {
                assert!(started.elapsed() < DEADLINE, "{key} on member {i}");
                std::thread::sleep(POLL);
            }
        }
        check_all(client, &acked);
    }
    drop(clients);
    drop(servers);
    drop(tmpfs);
}
