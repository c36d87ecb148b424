//! oxetcd started on a data directory etcd wrote, as a user switching
//! would do it: Debian's etcd runs on a directory and is written to
//! (puts, deletes, a txn, a compaction, a lease with a key, a user and a
//! role), stopped cleanly, and each oxetcd binary is started on a copy of
//! the directory with the same flags. Every revision's range, the lease,
//! the users and the members must read as etcd served them, with the same
//! member and cluster IDs; oxetcd then takes writes, keeps them over a
//! restart, and etcd's own files are left as they were. The second test
//! is etcd's `TestIssue6361` flow: Debian's etcdctl saves a snapshot and
//! restores it into etcd's layout, and oxetcd starts on that.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::{Launch, Ports, Server, ServerKind};
use serde_json::Value;

const TOKEN: &str = "etcddir-token";
const STOP: Duration = Duration::from_secs(20);

fn ctl(address: &str, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    etcdctl::run(address, &args, None).expect("etcdctl runs")
}

fn ok(address: &str, args: &[&str]) -> String {
    let out = ctl(address, args);
    assert_eq!(out.code, 0, "etcdctl {args:?}: {out:?}");
    out.stdout
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A member's flags: name, data directory, client and peer URLs.
struct Flags {
    name: String,
    data_dir: PathBuf,
    client_url: String,
    peer_url: String,
}

impl Flags {
    fn new(name: &str, data_dir: &Path) -> Self {
        Self {
            name: name.to_owned(),
            data_dir: data_dir.to_path_buf(),
            client_url: Ports::Kernel.http_url(),
            peer_url: Ports::Kernel.http_url(),
        }
    }

    fn start(&self, kind: ServerKind) -> Server {
        let cluster = format!("{}={}", self.name, self.peer_url);
        Launch::new(
            kind,
            &self.name,
            &self.data_dir,
            vec![self.client_url.clone()],
            self.peer_url.clone(),
        )
        .member(&self.peer_url, &cluster, "new", TOKEN)
        .start()
        .unwrap_or_else(|e| panic!("{} starts on {}: {e}", kind.name(), self.data_dir.display()))
    }
}

/// What a user sees of a member's data: each revision's whole key space
/// (headers reduced to the revision), the lease, users, roles, members,
/// and the member's and cluster's IDs.
#[derive(Debug, PartialEq)]
struct Seen {
    revisions: BTreeMap<i64, Value>,
    compacted_below: String,
    lease_ttl: i64,
    lease_keys: Value,
    users: String,
    roles: String,
    members: Value,
    member_id: u64,
    cluster_id: u64,
}

fn look(address: &str, compact: i64, last: i64, lease: &str) -> (Seen, i64) {
    let mut revisions = BTreeMap::new();
    for rev in compact..=last {
        let mut value = json(&ok(
            address,
            &["get", "--prefix", "", &format!("--rev={rev}"), "-w", "json"],
        ));
        let revision = value["header"]["revision"].clone();
        value["header"] = serde_json::json!({ "revision": revision });
        revisions.insert(rev, value);
    }
    let below = ctl(address, &["get", "a", &format!("--rev={}", compact - 1)]);
    assert_ne!(below.code, 0, "{below:?}");
    let whole = json(&ok(address, &["get", "a", "-w", "json"]));
    let lease = json(&ok(
        address,
        &["lease", "timetolive", lease, "--keys", "-w", "json"],
    ));
    let mut members = json(&ok(address, &["member", "list", "-w", "json"]));
    let remaining = lease["ttl"].as_i64().unwrap_or(-1);
    members["header"] = Value::Null;
    let seen = Seen {
        revisions,
        // The last line: etcdctl logs its retries before it.
        compacted_below: below.stderr.trim().lines().last().unwrap_or("").to_owned(),
        lease_ttl: lease["granted-ttl"].as_i64().unwrap_or(-1),
        lease_keys: lease["keys"].clone(),
        users: ok(address, &["user", "list"]),
        roles: ok(address, &["role", "get", "reader"]),
        members,
        member_id: whole["header"]["member_id"].as_u64().unwrap_or(0),
        cluster_id: whole["header"]["cluster_id"].as_u64().unwrap_or(0),
    };
    (seen, remaining)
}

/// Writes history on etcd: returns (compacted revision, last revision,
/// lease ID in hex).
fn write_history(address: &str) -> (i64, i64, String) {
    ok(address, &["put", "a", "1"]);
    ok(address, &["put", "b", "2"]);
    ok(address, &["put", "a", "3"]);
    ok(address, &["del", "b"]);
    let txn = ctl_stdin(address, &["txn"], "\nput c 4\nput d 5\n\n\n");
    assert!(txn.stdout.contains("SUCCESS"), "{txn:?}");
    let grant = ok(address, &["lease", "grant", "600"]);
    let lease = grant
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("lease grant said {grant}"))
        .to_owned();
    ok(address, &["put", "--lease", &lease, "e", "6"]);
    ok(address, &["put", "a", "7"]);
    ok(address, &["del", "c"]);
    ok(address, &["compact", "4"]);
    ok(address, &["user", "add", "alice:secret"]);
    ok(address, &["role", "add", "reader"]);
    ok(
        address,
        &["role", "grant-permission", "reader", "read", "a"],
    );
    ok(address, &["user", "grant-role", "alice", "reader"]);
    let last = json(&ok(address, &["get", "a", "-w", "json"]))["header"]["revision"]
        .as_i64()
        .unwrap_or(0);
    assert_eq!(last, 9, "the history's last revision");
    (4, last, lease)
}

/// Waits (up to 30 s) until `server` logs that it serves clients: the
/// client port accepts connections before the import is done.
fn wait_ready(server: &Server) {
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if server.log().contains("ready to serve client requests") {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("not ready within 30 s:\n{}", server.log_tail());
}

fn ctl_stdin(address: &str, args: &[&str], stdin: &str) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    etcdctl::run(address, &args, Some(stdin)).expect("etcdctl runs")
}

/// Copies a directory tree.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every file under `dir` and its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                out.insert(entry.path(), fs::read(entry.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn oxetcd_takes_over_a_stopped_etcd_data_directory() {
    let scratch = tempfile::tempdir().unwrap();
    let original = scratch.path().join("etcd");
    let flags = Flags::new("m1", &original);
    let mut etcd = flags.start(ServerKind::Etcd);
    let address = etcd.address();
    let (compact, last, lease) = write_history(&address);
    let (expected, _) = look(&address, compact, last, &lease);
    etcd.terminate(STOP).expect("etcd stops cleanly");
    assert_eq!(expected.lease_ttl, 600);
    assert!(expected.users.contains("alice"), "{expected:?}");

    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        let dir = scratch.path().join(kind.name());
        copy_dir(&original, &dir);
        let etcd_files = contents(&dir);
        // The same flags: the same ports, so the same member ID.
        let flags = Flags {
            name: flags.name.clone(),
            data_dir: dir.clone(),
            client_url: flags.client_url.clone(),
            peer_url: flags.peer_url.clone(),
        };
        let mut server = flags.start(kind);
        wait_ready(&server);
        let address = server.address();
        assert!(
            server.log().contains("imported etcd data directory"),
            "{}",
            server.log_tail()
        );
        let (seen, remaining) = look(&address, compact, last, &lease);
        assert_eq!(
            seen,
            expected,
            "{} serves etcd's data as etcd did",
            kind.name()
        );
        assert!(
            (1..=600).contains(&remaining),
            "the lease keeps running: {remaining}"
        );

        // oxetcd takes writes on top, at the next revision.
        let put = json(&ok(&address, &["put", "g", "8", "-w", "json"]));
        assert_eq!(put["header"]["revision"].as_i64(), Some(last + 1));
        server.terminate(STOP).expect("oxetcd stops");
        let mut again = flags.start(kind);
        wait_ready(&again);
        let address = again.address();
        assert!(!again.log().contains("imported etcd data directory"));
        assert_eq!(
            ok(&address, &["get", "g", "--print-value-only"]).trim(),
            "8"
        );
        assert_eq!(
            ok(&address, &["get", "a", "--rev=8", "--print-value-only"]).trim(),
            "7"
        );
        again.terminate(STOP).expect("oxetcd stops");

        // etcd's files are as etcd left them.
        let after = contents(&dir);
        for (path, bytes) in &etcd_files {
            assert!(
                after.get(path) == Some(bytes),
                "{} changed {}",
                kind.name(),
                path.display()
            );
        }
    }
}

/// etcd's `TestIssue6361`: a snapshot saved from etcd and restored by
/// Debian's etcdctl into etcd's layout (a data directory with a WAL, a
/// snap file and the backend), then served by oxetcd.
#[test]
fn etcdctl_restored_directory_starts_under_oxetcd() {
    let scratch = tempfile::tempdir().unwrap();
    let source_flags = Flags::new("source", &scratch.path().join("source"));
    let mut source = source_flags.start(ServerKind::Etcd);
    let address = source.address();
    for n in 0..10 {
        ok(&address, &["put", &format!("foo{n}"), &format!("val{n}")]);
    }
    let snapshot = scratch.path().join("snap.db");
    ok(
        &address,
        &["snapshot", "save", snapshot.to_str().unwrap_or_default()],
    );
    source.terminate(STOP).expect("etcd stops");

    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        let dir = scratch.path().join(format!("restored-{}", kind.name()));
        let flags = Flags::new("m1", &dir);
        let cluster = format!("m1={}", flags.peer_url);
        let restore = ctl(
            "http://127.0.0.1:1",
            &[
                "snapshot",
                "restore",
                snapshot.to_str().unwrap_or_default(),
                "--name",
                "m1",
                "--data-dir",
                dir.to_str().unwrap_or_default(),
                "--initial-cluster",
                &cluster,
                "--initial-cluster-token",
                TOKEN,
                "--initial-advertise-peer-urls",
                &flags.peer_url,
            ],
        );
        assert_eq!(restore.code, 0, "{restore:?}");
        assert!(dir.join("member/wal").is_dir() && dir.join("member/snap/db").is_file());
        let mut server = flags.start(kind);
        wait_ready(&server);
        let address = server.address();
        assert!(
            server.log().contains("imported etcd data directory"),
            "{}",
            server.log_tail()
        );
        for n in 0..10 {
            assert_eq!(
                ok(&address, &["get", &format!("foo{n}"), "--print-value-only"]).trim(),
                format!("val{n}")
            );
        }
        let members = json(&ok(&address, &["member", "list", "-w", "json"]));
        assert_eq!(members["members"][0]["name"].as_str(), Some("m1"));
        ok(&address, &["put", "after", "restore"]);
        assert_eq!(
            ok(&address, &["get", "after", "--print-value-only"]).trim(),
            "restore"
        );
        server.terminate(STOP).expect("oxetcd stops");
    }
}

/// The readers of etcd's files on what Debian's etcd writes: the WAL's
/// metadata, hard state and entries; a torn tail ends the log, a flipped
/// byte before it is an error naming the file and offset; a snapshot file
/// (etcd made to snapshot every few entries) with its members, which
/// oxetcd then serves.
#[test]
fn readers_of_etcd_files_on_what_etcd_writes() {
    use oxetcd_storage::{etcd_dir, etcd_wal};

    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("etcd");
    let flags = Flags::new("m1", &dir);
    let cluster = format!("m1={}", flags.peer_url);
    let mut etcd = Launch::new(
        ServerKind::Etcd,
        "m1",
        &dir,
        vec![flags.client_url.clone()],
        flags.peer_url.clone(),
    )
    .member(&flags.peer_url, &cluster, "new", TOKEN)
    .flags(&["--snapshot-count=5"])
    .start()
    .expect("etcd starts");
    let address = etcd.address();
    for n in 0..20 {
        ok(&address, &["put", &format!("k{n}"), &format!("v{n}")]);
    }
    let header = json(&ok(&address, &["get", "k0", "-w", "json"]))["header"].clone();
    etcd.terminate(STOP).expect("etcd stops cleanly");

    let wal = etcd_wal::read_dir(&dir.join("member/wal")).expect("etcd's WAL reads");
    assert_eq!(Some(wal.member_id), header["member_id"].as_u64());
    assert_eq!(Some(wal.cluster_id), header["cluster_id"].as_u64());
    assert!(!wal.torn);
    let last = wal.entries.last().map(|e| e.index).unwrap_or(0);
    assert!(
        wal.hard_state.commit >= 21 && wal.hard_state.commit <= last,
        "{wal:?}"
    );
    let snap = etcd_dir::read_snap(&dir.join("member/snap"))
        .expect("snap dir reads")
        .expect("etcd wrote a snapshot");
    assert!(snap.index >= 5 && snap.index <= last, "{}", snap.index);
    assert!(
        String::from_utf8_lossy(&snap.data).contains("raftAttributes"),
        "the v2 store holds the members"
    );

    // A torn tail: the WAL file cut inside its last record.
    let (name, bytes) = fs::read_dir(dir.join("member/wal"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
        .map(|e| (e.file_name(), fs::read(e.path()).unwrap()))
        .max()
        .unwrap();
    let records = etcd_wal::decode_file(&bytes, &mut 0, true).expect("decodes");
    let last_record = records.records.last().unwrap().offset as usize;
    let broken = scratch.path().join("broken");
    fs::create_dir(&broken).unwrap();
    fs::write(broken.join(&name), &bytes[..last_record + 12]).unwrap();
    let torn = etcd_wal::read_dir(&broken).expect("a torn tail is the end of the log");
    assert!(torn.torn);
    assert_eq!(torn.records + 1, wal.records);
    // A flipped byte inside an earlier record is an error with the file
    // and the offset.
    let mut flipped = bytes.clone();
    let third = records.records[3].offset as usize;
    flipped[third + 14] ^= 0x40;
    fs::write(broken.join(&name), &flipped).unwrap();
    let error = etcd_wal::read_dir(&broken).unwrap_err().to_string();
    assert!(
        error.contains(&name.to_string_lossy().to_string())
            && error.contains(&format!("offset {third}")),
        "{error}"
    );

    // Another member's flags: refused, nothing written.
    let elsewhere = ["http://127.0.0.9:1".to_owned()];
    let other = etcd_dir::FlagsMember {
        id: 1,
        peer_urls: &elsewhere,
    };
    let error = etcd_dir::import(&dir, Some(other)).unwrap_err().to_string();
    assert!(error.contains("belongs to member"), "{error}");
    assert!(!dir.join("member/kv.redb").exists());
    assert!(!dir.join("member/oxetcd-import.tmp").exists());

    // What an import that did not finish leaves (its scratch directory,
    // a segment of oxetcd's WAL beside etcd's) is started over.
    fs::create_dir_all(dir.join("member/oxetcd-import.tmp/member")).unwrap();
    fs::write(dir.join("member/oxetcd-import.tmp/member/junk"), b"x").unwrap();
    fs::write(
        dir.join("member/wal/0000000000000000.wal"),
        vec![0x5a; 4096],
    )
    .unwrap();

    // oxetcd serves the directory, members from the snapshot's v2 store.
    let mut server = flags.start(ServerKind::Oxetcd);
    wait_ready(&server);
    let address = server.address();
    let members = json(&ok(&address, &["member", "list", "-w", "json"]));
    assert_eq!(members["members"][0]["name"].as_str(), Some("m1"));
    assert_eq!(members["members"][0]["ID"], header["member_id"]);
    assert_eq!(
        ok(&address, &["get", "k19", "--print-value-only"]).trim(),
        "v19"
    );
    server.terminate(STOP).expect("oxetcd stops");
    assert!(!dir.join("member/oxetcd-import.tmp").exists());
}

/// A whole three-member etcd cluster switched while stopped (to both
/// binaries, side by side): each member imports its own directory, raft carries on from etcd's term and index,
/// a leader is elected, the data is etcd's, and writes go through.
#[test]
fn a_stopped_etcd_cluster_restarts_as_oxetcd() {
    let scratch = tempfile::tempdir().unwrap();
    let members: Vec<Flags> = (1..=3)
        .map(|n| Flags::new(&format!("m{n}"), &scratch.path().join(format!("m{n}"))))
        .collect();
    let cluster = members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url))
        .collect::<Vec<_>>()
        .join(",");
    let launch = |m: &Flags, kind: ServerKind| {
        Launch::new(
            kind,
            &m.name,
            &m.data_dir,
            vec![m.client_url.clone()],
            m.peer_url.clone(),
        )
        .member(&m.peer_url, &cluster, "new", TOKEN)
    };
    // etcd's members wait for each other: start them side by side.
    let mut etcds: Vec<Server> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .iter()
            .map(|m| s.spawn(move || launch(m, ServerKind::Etcd).start()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().expect("etcd member starts"))
            .collect()
    });
    let address = etcds[0].address();
    for n in 0..5 {
        ok(&address, &["put", &format!("k{n}"), &format!("v{n}")]);
    }
    let before = json(&ok(&address, &["get", "k", "--prefix", "-w", "json"]));
    // Every member has applied everything before it stops.
    for etcd in &etcds {
        let mut applied = false;
        for _ in 0..100 {
            let value = ok(
                &etcd.address(),
                &["get", "k4", "--consistency=s", "--print-value-only"],
            );
            if value.trim() == "v4" {
                applied = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(applied, "{} applies k4", etcd.address());
    }
    for etcd in &mut etcds {
        etcd.terminate(STOP).expect("etcd stops cleanly");
    }

    let servers: Vec<Server> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .iter()
            .enumerate()
            .map(|(n, m)| {
                // Both binaries, in one cluster.
                let kind = if n == 1 {
                    ServerKind::OxetcdSmol
                } else {
                    ServerKind::Oxetcd
                };
                s.spawn(move || launch(m, kind).start())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().expect("oxetcd member starts"))
            .collect()
    });
    for server in &servers {
        wait_ready(server);
    }
    for server in &servers {
        let after = json(&ok(
            &server.address(),
            &["get", "k", "--prefix", "-w", "json"],
        ));
        assert_eq!(after["kvs"], before["kvs"]);
        assert_eq!(
            after["header"]["cluster_id"],
            before["header"]["cluster_id"]
        );
    }
    let put = json(&ok(
        &servers[1].address(),
        &["put", "k5", "v5", "-w", "json"],
    ));
    assert_eq!(
        put["header"]["revision"].as_i64(),
        before["header"]["revision"].as_i64().map(|r| r + 1)
    );
    let status = ok(&servers[2].address(), &["member", "list"]);
    assert_eq!(status.lines().count(), 3, "{status}");
}
