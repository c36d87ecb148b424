//! `snapshot save`, `snapshot status`, `snapshot restore` and `defrag
//! --data-dir`, used as a person would: keys written to a running oxetcd,
//! the snapshot saved and inspected, new members started on the restored
//! directories and read back with Debian's etcdctl; a stopped member
//! defragmented and started again. Snapshots are etcd's bolt databases
//! both ways: Debian's etcdctl inspects and restores oxetcd's, and etcd
//! serves the result; oxetcdctl restores etcd's into oxetcd.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::{Launch, Ports, Server, ServerKind};
use serde_json::Value;

fn oxetcdctl() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_oxetcdctl"))
}

/// Runs oxetcdctl against `address` (offline commands ignore it).
fn ours(address: &str, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    etcdctl::run_program(&oxetcdctl(), address, &args, None).expect("oxetcdctl runs")
}

/// Runs Debian's etcdctl against `address`.
fn theirs(address: &str, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    etcdctl::run(address, &args, None).expect("etcdctl runs")
}

fn ok(output: Output, what: &str) -> Output {
    assert_eq!(output.code, 0, "{what}: {output:?}");
    output
}

fn json(output: &Output) -> Value {
    serde_json::from_str(output.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {output:?}"))
}

fn header(value: &Value, field: &str) -> u64 {
    value["header"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("no header.{field} in {value}"))
}

/// etcdctl's JSON carries keys and values in base64.
fn b64(text: &str) -> String {
    use std::fmt::Write;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0u32, |w, (i, b)| w | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                let _ = write!(
                    out,
                    "{}",
                    ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char
                );
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Writes the history every test restores: three versions of `a` (one
/// value easy to find in the file), `b` under a lease, `c` put and deleted.
/// Returns the lease ID (hex) and the store revision.
fn write_history(address: &str) -> (String, i64) {
    let granted = ok(ours(address, &["lease", "grant", "600"]), "lease grant");
    // "lease 694d77aa9e38260f granted with TTL(600s)"
    let lease = granted
        .stdout
        .split_whitespace()
        .nth(1)
        .expect("lease ID")
        .to_owned();
    for args in [
        &["put", "a", "1"][..],
        &["put", "a", "snapshot-value-two"],
        &["put", "b", "leased", &format!("--lease={lease}")],
        &["put", "c", "3"],
        &["del", "c"],
        &["put", "a", "3"],
    ] {
        ok(ours(address, args), "write");
    }
    (lease, 7)
}

fn lease_id(hex: &str) -> i64 {
    i64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("lease {hex}: {e}"))
}

fn restore_args<'a>(
    file: &'a str,
    data_dir: &'a str,
    name: &'a str,
    cluster: &'a str,
    token: &'a str,
    peer: &'a str,
) -> Vec<&'a str> {
    vec![
        "snapshot",
        "restore",
        file,
        "--data-dir",
        data_dir,
        "--name",
        name,
        "--initial-cluster",
        cluster,
        "--initial-cluster-token",
        token,
        "--initial-advertise-peer-urls",
        peer,
    ]
}

/// Starts oxetcd as `name` of the cluster `cluster` on `data_dir`.
fn start_member(name: &str, data_dir: &Path, peer_url: &str, cluster: &str, token: &str) -> Server {
    start_kind(ServerKind::Oxetcd, name, data_dir, peer_url, cluster, token)
}

/// Starts `kind` as `name` of the cluster `cluster` on `data_dir`.
fn start_kind(
    kind: ServerKind,
    name: &str,
    data_dir: &Path,
    peer_url: &str,
    cluster: &str,
    token: &str,
) -> Server {
    let client_url = Ports::Kernel.http_url();
    Launch::new(kind, name, data_dir, vec![client_url], peer_url.to_owned())
        .member(peer_url, cluster, "new", token)
        .start()
        .unwrap_or_else(|e| panic!("member {name} starts on the restored directory: {e}"))
}

/// Checks the restored keys, revisions and lease through etcdctl.
/// A user with a password and a role with a prefix permission.
fn write_users(address: &str) {
    for args in [
        &["user", "add", "alice:pw-of-alice", "--interactive=false"][..],
        &["role", "add", "readers"],
        &[
            "role",
            "grant-permission",
            "readers",
            "read",
            "a",
            "--prefix=true",
        ],
        &["user", "grant-role", "alice", "readers"],
    ] {
        ok(theirs(address, args), &args.join(" "));
    }
}

/// The user and role of [`write_users`], as etcdctl shows them.
fn check_users(address: &str) {
    let user = ok(theirs(address, &["user", "get", "alice"]), "user get");
    assert!(user.stdout.contains("Roles: readers"), "{user:?}");
    let role = ok(theirs(address, &["role", "get", "readers"]), "role get");
    assert!(role.stdout.contains("[a, b) (prefix a)"), "{role:?}");
}

fn check_restored(address: &str, lease: &str, revision: i64) {
    let all = json(&ok(
        theirs(address, &["get", "", "--prefix", "-w", "json"]),
        "get all",
    ));
    assert_eq!(header(&all, "revision") as i64, revision, "{all}");
    let kvs = all["kvs"].as_array().expect("kvs");
    assert_eq!(kvs.len(), 2, "a and b, c deleted: {all}");
    assert_eq!(kvs[0]["key"], b64("a"));
    assert_eq!(kvs[0]["value"], b64("3"));
    assert_eq!(kvs[0]["create_revision"], 2);
    assert_eq!(kvs[0]["mod_revision"], 7);
    assert_eq!(kvs[0]["version"], 3);
    assert_eq!(kvs[1]["key"], b64("b"));
    assert_eq!(kvs[1]["lease"].as_i64(), Some(lease_id(lease)));
    // The history came along.
    let old = ok(theirs(address, &["get", "a", "--rev", "3"]), "old revision");
    assert_eq!(old.stdout, "a\nsnapshot-value-two\n");
    let ttl = ok(
        theirs(address, &["lease", "timetolive", lease, "--keys"]),
        "lease",
    );
    assert!(
        ttl.stdout.contains("attached keys([b])") && !ttl.stdout.contains("already expired"),
        "{ttl:?}"
    );
}

/// Runs `check` until it stops panicking, for at most `within` (a new
/// cluster elects its leader in its first seconds).
fn eventually(within: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let started = Instant::now();
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if started.elapsed() > within => panic!("still failing after {within:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn save_status_restore_and_serve_as_a_new_cluster() {
    let source = Server::start(ServerKind::Oxetcd).expect("oxetcd starts");
    let address = source.address();
    let (lease, revision) = write_history(&address);
    let original = json(&ok(theirs(&address, &["get", "a", "-w", "json"]), "get"));
    let scratch = tempfile::tempdir().expect("tempdir");
    let file = scratch.path().join("snap.db");
    let file_name = file.display().to_string();

    let saved = ok(ours(&address, &["snapshot", "save", &file_name]), "save");
    assert_eq!(saved.stdout, format!("Snapshot saved at {file_name}\n"));

    // key: six versions (a×3, b, c and its deletion); meta: the
    // consistent index; lease: one; members: one; cluster: its version;
    // auth: its revision.
    let status = json(&ok(
        ours(&address, &["snapshot", "status", &file_name, "-w", "json"]),
        "status",
    ));
    assert_eq!(status["revision"], revision, "{status}");
    assert_eq!(status["totalKey"], 11, "{status}");
    // Debian's etcdctl reads the file as a bolt database, with the same
    // hash and counts.
    let etcdctl_status = json(&ok(
        theirs(&address, &["snapshot", "status", &file_name, "-w", "json"]),
        "etcdctl status",
    ));
    assert_eq!(etcdctl_status, status);
    let size = std::fs::metadata(&file).expect("file").len();
    assert_eq!(status["totalSize"].as_u64(), Some(size - 32), "{status}");
    let simple = ok(
        ours(&address, &["snapshot", "status", &file_name]),
        "status",
    );
    let hash = format!("{:x}", status["hash"].as_u64().expect("hash"));
    assert!(
        simple
            .stdout
            .starts_with(&format!("{hash}, {revision}, 11, ")),
        "{simple:?}"
    );

    // A snapshot is one member's: two endpoints are refused, as etcdctl
    // refuses them.
    let two = format!("{address},127.0.0.1:1");
    let two_file = scratch.path().join("two.db").display().to_string();
    let refused = ours(&two, &["snapshot", "save", &two_file]);
    assert_eq!(refused, theirs(&two, &["snapshot", "save", &two_file]));
    assert_eq!(refused.code, 5, "{refused:?}");

    // Debian's etcdctl saves oxetcd's snapshots too (they follow etcd's
    // size rule), and they read the same.
    let by_etcdctl = scratch.path().join("by-etcdctl.db").display().to_string();
    ok(
        theirs(&address, &["snapshot", "save", &by_etcdctl]),
        "etcdctl save",
    );
    let theirs_status = json(&ok(
        ours(&address, &["snapshot", "status", &by_etcdctl, "-w", "json"]),
        "status",
    ));
    assert_eq!(theirs_status, status);

    // A new single-member cluster on the restored directory.
    let data_dir = scratch.path().join("restored");
    let peer = Ports::Kernel.http_url();
    let cluster = format!("solo={peer}");
    let data_dir_arg = data_dir.display().to_string();
    let restore = restore_args(
        &file_name,
        &data_dir_arg,
        "solo",
        &cluster,
        "restored-cluster",
        &peer,
    );
    let restored = ours(&address, &restore);
    assert_eq!(restored.code, 0, "{restored:?}");
    assert!(
        restored.stderr.contains("restored snapshot"),
        "{restored:?}"
    );
    let again = ours(&address, &restore);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("exists"), "{again:?}");

    let member = start_member("solo", &data_dir, &peer, &cluster, "restored-cluster");
    let new_address = member.address();
    check_restored(&new_address, &lease, revision);
    let now = json(&ok(
        theirs(&new_address, &["get", "a", "-w", "json"]),
        "get",
    ));
    assert_ne!(
        header(&now, "cluster_id"),
        header(&original, "cluster_id"),
        "a restored member starts a new cluster"
    );
    let put = json(&ok(
        theirs(&new_address, &["put", "d", "new", "-w", "json"]),
        "put on the restored member",
    ));
    assert_eq!(header(&put, "revision") as i64, revision + 1);
    let members = ok(theirs(&new_address, &["member", "list"]), "member list");
    assert_eq!(members.stdout.lines().count(), 1, "{members:?}");
    assert!(members.stdout.contains(", solo, "), "{members:?}");
}

/// Restores `file` with oxetcdctl into three members `m1`..`m3` of a new
/// cluster (token `token`) under `scratch`, and starts them.
fn restore_three(address: &str, file: &str, scratch: &Path, token: &str) -> Vec<Server> {
    let names = ["m1", "m2", "m3"];
    let peers: Vec<String> = names.iter().map(|_| Ports::Kernel.http_url()).collect();
    let cluster = names
        .iter()
        .zip(&peers)
        .map(|(n, p)| format!("{n}={p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::new();
    for (name, peer) in names.iter().zip(&peers) {
        let dir = scratch.join(name);
        let restored = ours(
            address,
            &restore_args(
                file,
                &dir.display().to_string(),
                name,
                &cluster,
                token,
                peer,
            ),
        );
        assert_eq!(restored.code, 0, "{restored:?}");
        members.push(start_member(name, &dir, peer, &cluster, token));
    }
    members
}

#[test]
fn three_members_restored_from_one_snapshot_form_a_cluster() {
    let source = Server::start(ServerKind::Oxetcd).expect("oxetcd starts");
    let address = source.address();
    let (lease, revision) = write_history(&address);
    let scratch = tempfile::tempdir().expect("tempdir");
    let file = scratch.path().join("snap.db").display().to_string();
    ok(ours(&address, &["snapshot", "save", &file]), "save");
    drop(source);

    let members = restore_three(&address, &file, scratch.path(), "three");
    let addresses: Vec<String> = members.iter().map(Server::address).collect();
    eventually(Duration::from_secs(20), || {
        let out = theirs(&addresses[2], &["put", "d", "replicated", "-w", "json"]);
        (out.code == 0).then_some(()).ok_or(format!("{out:?}"))
    });
    for address in &addresses {
        eventually(Duration::from_secs(10), || {
            let out = theirs(address, &["get", "d", "--print-value-only"]);
            (out.stdout == "replicated\n")
                .then_some(())
                .ok_or(format!("{out:?}"))
        });
        let list = ok(theirs(address, &["member", "list"]), "member list");
        assert_eq!(list.stdout.lines().count(), 3, "{list:?}");
    }
    // Every member holds the snapshot's history, the new write after it.
    let b = json(&ok(
        theirs(&addresses[1], &["get", "b", "-w", "json"]),
        "get",
    ));
    assert_eq!(header(&b, "revision") as i64, revision + 1, "{b}");
    assert_eq!(b["kvs"][0]["lease"].as_i64(), Some(lease_id(&lease)));
    let old = ok(theirs(&addresses[0], &["get", "a", "--rev", "3"]), "old");
    assert_eq!(old.stdout, "a\nsnapshot-value-two\n");
}

/// The whole key space at revision `rev` as etcdctl shows it, the header
/// reduced to the revision (member and cluster IDs and terms differ).
fn key_space_at(address: &str, rev: i64) -> Value {
    let mut value = json(&ok(
        theirs(
            address,
            &["get", "--prefix", "", &format!("--rev={rev}"), "-w", "json"],
        ),
        "get --rev",
    ));
    let revision = value["header"]["revision"].clone();
    value["header"] = serde_json::json!({ "revision": revision });
    value
}

/// The way in from etcd, proven as a user would: Debian's etcd holds a
/// history (overwrites, deletes, a range delete, a lease, users and roles,
/// a compaction), Debian's etcdctl saves a snapshot, oxetcdctl restores it
/// into a three-member oxetcd cluster, and every member answers `get
/// --prefix --rev=R -w json` for every revision R as etcd does, refuses
/// the compacted ones as etcd does, and keeps the lease with its TTL.
#[test]
fn an_etcd_snapshot_restored_into_three_members_answers_every_revision_as_etcd() {
    let etcd = Server::start(ServerKind::Etcd).expect("etcd starts");
    let address = etcd.address();
    let (lease, _) = write_history(&address);
    write_users(&address);
    for args in [
        &["put", "p/1", "x"][..],
        &["put", "p/2", "y"],
        &["put", "p/1", "z"],
        &["del", "--prefix", "p/"],
        &["put", "a", "4"],
    ] {
        ok(theirs(&address, args), "write");
    }
    let compact = 4;
    ok(
        theirs(&address, &["compact", &compact.to_string()]),
        "compact",
    );
    ok(theirs(&address, &["put", "e", "after-compaction"]), "write");
    let last = header(
        &json(&ok(theirs(&address, &["get", "e", "-w", "json"]), "get")),
        "revision",
    ) as i64;
    let scratch = tempfile::tempdir().expect("tempdir");
    let file = scratch.path().join("etcd.db").display().to_string();
    ok(
        theirs(&address, &["snapshot", "save", &file]),
        "etcdctl save",
    );

    let members = restore_three(&address, &file, scratch.path(), "from-etcd");
    let addresses: Vec<String> = members.iter().map(Server::address).collect();
    eventually(Duration::from_secs(20), || {
        let out = theirs(&addresses[0], &["endpoint", "health"]);
        (out.code == 0).then_some(()).ok_or(format!("{out:?}"))
    });
    let theirs_seen: Vec<Value> = (compact..=last)
        .map(|rev| key_space_at(&address, rev))
        .collect();
    let etcd_ttl = json(&ok(
        theirs(&address, &["lease", "timetolive", &lease, "-w", "json"]),
        "ttl",
    ));
    for member in &addresses {
        for (rev, expected) in (compact..=last).zip(&theirs_seen) {
            assert_eq!(
                &key_space_at(member, rev),
                expected,
                "{member} at revision {rev}"
            );
        }
        let below = theirs(member, &["get", "a", &format!("--rev={}", compact - 1)]);
        assert!(
            below
                .stderr
                .contains("required revision has been compacted"),
            "{member}: {below:?}"
        );
        let ttl = json(&ok(
            theirs(member, &["lease", "timetolive", &lease, "-w", "json"]),
            "ttl",
        ));
        assert_eq!(
            ttl["granted-ttl"], etcd_ttl["granted-ttl"],
            "{member}: {ttl}"
        );
        let remaining = ttl["ttl"].as_i64().unwrap_or(-1);
        assert!((1..=600).contains(&remaining), "{member}: {ttl}");
        check_users(member);
    }
    eprintln!(
        "restored etcd's revisions {compact}..={last} into 3 members; each answers every one as etcd"
    );
}

#[test]
fn a_corrupt_or_foreign_snapshot_is_refused() {
    let source = Server::start(ServerKind::Oxetcd).expect("oxetcd starts");
    let address = source.address();
    write_history(&address);
    let scratch = tempfile::tempdir().expect("tempdir");
    let file = scratch.path().join("snap.db");
    let file_name = file.display().to_string();
    ok(ours(&address, &["snapshot", "save", &file_name]), "save");

    // One byte of a value flipped: the checksum no longer matches.
    let mut bytes = std::fs::read(&file).expect("read");
    let at = bytes
        .windows(18)
        .position(|w| w == b"snapshot-value-two")
        .expect("the value is in the file");
    bytes[at] ^= 0x20;
    std::fs::write(&file, &bytes).expect("write");
    let status = ours(&address, &["snapshot", "status", &file_name]);
    assert_eq!(status.code, 1, "{status:?}");
    assert!(
        status.stderr.starts_with("Error: expected sha256 ["),
        "{status:?}"
    );
    let peer = "http://localhost:2380";
    let cluster = "default=http://localhost:2380";
    let target = scratch.path().join("restored");
    let target_name = target.display().to_string();
    let restore = ours(
        &address,
        &restore_args(&file_name, &target_name, "default", cluster, "t", peer),
    );
    assert_eq!(restore.code, 1, "{restore:?}");
    assert!(restore.stderr.contains("expected sha256"), "{restore:?}");
    assert!(!target.exists(), "a failed restore leaves nothing");
    // --skip-hash-check takes the file as it is, flipped byte and all.
    let mut skip = restore_args(&file_name, &target_name, "default", cluster, "t", peer);
    skip.push("--skip-hash-check");
    ok(ours(&address, &skip), "restore --skip-hash-check");
    assert!(target.join("member").join("kv.redb").is_file());

    // A cut file fails its framing even with the check skipped.
    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("write");
    let other = scratch.path().join("other").display().to_string();
    let mut cut = restore_args(&file_name, &other, "default", cluster, "t", peer);
    cut.push("--skip-hash-check");
    let cut = ours(&address, &cut);
    assert_eq!(cut.code, 1, "{cut:?}");
    assert!(cut.stderr.contains("integrity check failed"), "{cut:?}");

    // A file that is no bolt database is named as such.
    let other = scratch.path().join("not-a-snapshot");
    std::fs::write(&other, b"hello").expect("write");
    let status = ours(
        &address,
        &["snapshot", "status", &other.display().to_string()],
    );
    assert_eq!(status.code, 1, "{status:?}");
    assert!(status.stderr.contains("is not a snapshot"), "{status:?}");

    // Argument errors, as etcdctl reports them.
    let none = ours(&address, &["snapshot", "status"]);
    assert_eq!(
        (none.code, none.stderr.as_str()),
        (
            128,
            "Error: snapshot status requires exactly one argument\n"
        )
    );
    let none = ours(&address, &["snapshot", "restore"]);
    assert_eq!(
        (none.code, none.stderr.as_str()),
        (
            128,
            "Error: snapshot restore requires exactly one argument\n"
        )
    );
}

/// etcd's own tools restore oxetcd's snapshot, and etcd serves it: the
/// keys, their history, the revision and the lease are etcd's now.
#[test]
fn etcd_restores_and_serves_an_oxetcd_snapshot() {
    let source = Server::start(ServerKind::Oxetcd).expect("oxetcd starts");
    let address = source.address();
    let (lease, revision) = write_history(&address);
    write_users(&address);
    let scratch = tempfile::tempdir().expect("tempdir");
    let file = scratch.path().join("snap.db").display().to_string();
    ok(
        theirs(&address, &["snapshot", "save", &file]),
        "etcdctl save",
    );
    drop(source);

    let data_dir = scratch.path().join("etcd-restored");
    let peer = Ports::Kernel.http_url();
    let cluster = format!("solo={peer}");
    let restored = theirs(
        &address,
        &restore_args(
            &file,
            &data_dir.display().to_string(),
            "solo",
            &cluster,
            "to-etcd",
            &peer,
        ),
    );
    assert_eq!(restored.code, 0, "{restored:?}");
    assert!(
        format!("{}{}", restored.stdout, restored.stderr).contains("added member"),
        "{restored:?}"
    );
    let etcd = start_kind(
        ServerKind::Etcd,
        "solo",
        &data_dir,
        &peer,
        &cluster,
        "to-etcd",
    );
    check_restored(&etcd.address(), &lease, revision);
    check_users(&etcd.address());
    let put = json(&ok(
        theirs(&etcd.address(), &["put", "d", "on-etcd", "-w", "json"]),
        "put on etcd",
    ));
    assert_eq!(header(&put, "revision") as i64, revision + 1);
}

/// oxetcdctl reads and restores etcd's snapshot: the way in from etcd.
#[test]
fn an_etcd_snapshot_restores_into_oxetcd() {
    let etcd = Server::start(ServerKind::Etcd).expect("etcd starts");
    let address = etcd.address();
    let (lease, revision) = write_history(&address);
    write_users(&address);
    let scratch = tempfile::tempdir().expect("tempdir");
    let file = scratch.path().join("etcd.db").display().to_string();
    ok(
        theirs(&address, &["snapshot", "save", &file]),
        "etcdctl save",
    );
    drop(etcd);

    let status = json(&ok(
        ours(&address, &["snapshot", "status", &file, "-w", "json"]),
        "status",
    ));
    let etcdctl_status = json(&ok(
        theirs(&address, &["snapshot", "status", &file, "-w", "json"]),
        "etcdctl status",
    ));
    assert_eq!(status, etcdctl_status);
    assert_eq!(status["revision"], revision, "{status}");

    let data_dir = scratch.path().join("oxetcd-restored");
    let peer = Ports::Kernel.http_url();
    let cluster = format!("solo={peer}");
    ok(
        ours(
            &address,
            &restore_args(
                &file,
                &data_dir.display().to_string(),
                "solo",
                &cluster,
                "from-etcd",
                &peer,
            ),
        ),
        "restore",
    );
    let member = start_member("solo", &data_dir, &peer, &cluster, "from-etcd");
    check_restored(&member.address(), &lease, revision);
    check_users(&member.address());
    let put = json(&ok(
        theirs(&member.address(), &["put", "d", "on-oxetcd", "-w", "json"]),
        "put on oxetcd",
    ));
    assert_eq!(header(&put, "revision") as i64, revision + 1);
}

/// Auth on and an active alarm travel in etcd's snapshot too: the
/// restored oxetcd enforces the same users and roles, and keeps the alarm
/// until it is disarmed, as a member restored by etcd would.
#[test]
fn an_etcd_snapshot_keeps_auth_on_and_its_alarms() {
    let scratch = tempfile::tempdir().expect("tempdir");
    // A quota smaller than one value: the put below raises NOSPACE.
    let etcd = Launch::new(
        ServerKind::Etcd,
        "etcd",
        &scratch.path().join("etcd"),
        vec![Ports::Kernel.http_url()],
        Ports::Kernel.http_url(),
    )
    .flags(&["--quota-backend-bytes=262144"])
    .start()
    .expect("etcd starts");
    let address = etcd.address();
    ok(theirs(&address, &["put", "a", "1"]), "put");
    write_users(&address);
    let big = "x".repeat(300_000);
    let too_large = etcdctl::run(&address, &["put".to_owned(), "big".to_owned()], Some(&big))
        .expect("etcdctl runs");
    assert!(
        too_large.stderr.contains("database space exceeded"),
        "{too_large:?}"
    );
    for args in [
        &["user", "add", "root:pw-of-root", "--interactive=false"][..],
        &["user", "grant-role", "root", "root"],
        &["auth", "enable"],
    ] {
        ok(theirs(&address, args), &args.join(" "));
    }
    let root = ["--user", "root:pw-of-root"];
    let file = scratch.path().join("etcd.db").display().to_string();
    ok(
        theirs(
            &address,
            &[&root[..], &["snapshot", "save", &file]].concat(),
        ),
        "etcdctl save",
    );
    drop(etcd);

    let data_dir = scratch.path().join("restored");
    let peer = Ports::Kernel.http_url();
    let cluster = format!("solo={peer}");
    let target = data_dir.display().to_string();
    let args = restore_args(&file, &target, "solo", &cluster, "with-auth", &peer);
    ok(ours(&address, &args), "restore");
    let restored = start_member("solo", &data_dir, &peer, &cluster, "with-auth");
    let address = restored.address();
    let anonymous = theirs(&address, &["get", "a"]);
    assert_ne!(anonymous.code, 0, "auth is on: {anonymous:?}");
    let alice = ["--user", "alice:pw-of-alice"];
    let read = ok(
        theirs(&address, &[&alice[..], &["get", "a"]].concat()),
        "alice reads her prefix",
    );
    assert_eq!(read.stdout, "a\n1\n");
    let alarms = ok(
        theirs(&address, &[&root[..], &["alarm", "list"]].concat()),
        "alarm list",
    );
    assert!(alarms.stdout.contains("alarm:NOSPACE"), "{alarms:?}");
    let refused = theirs(&address, &[&root[..], &["put", "b", "1"]].concat());
    assert!(
        refused.stderr.contains("database space exceeded"),
        "{refused:?}"
    );
    ok(
        theirs(&address, &[&root[..], &["alarm", "disarm"]].concat()),
        "disarm",
    );
    ok(
        theirs(&address, &[&root[..], &["put", "b", "1"]].concat()),
        "put after disarm",
    ); // (Under NOSPACE her put was refused for space first, as etcd's.)
    let write = theirs(&address, &[&alice[..], &["put", "a", "2"]].concat());
    assert!(
        write.stderr.contains("permission denied"),
        "alice may only read: {write:?}"
    );
}

fn kv_file(data_dir: &Path) -> PathBuf {
    data_dir.join("member").join("kv.redb")
}

#[test]
fn offline_defrag_shrinks_the_backend_and_keeps_the_data() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let data_dir = scratch.path().join("data");
    let dir_name = data_dir.display().to_string();
    let mut server = Server::start_in(ServerKind::Oxetcd, &data_dir).expect("oxetcd starts");
    let address = server.address();
    let big = "x".repeat(64 * 1024);
    for i in 0..60 {
        ok(ours(&address, &["put", &format!("big{i:02}"), &big]), "put");
    }
    ok(ours(&address, &["put", "kept", "value"]), "put");
    ok(ours(&address, &["del", "big", "--prefix"]), "del");
    let revision = header(
        &json(&ok(ours(&address, &["get", "kept", "-w", "json"]), "get")),
        "revision",
    );
    ok(
        ours(
            &address,
            &["compaction", &revision.to_string(), "--physical"],
        ),
        "compaction",
    );

    // A running member's backend is refused, at once.
    let busy = ours(&address, &["defrag", "--data-dir", &dir_name]);
    assert_eq!(busy.code, 1, "{busy:?}");
    assert!(
        busy.stderr
            .starts_with(&format!("Failed to defragment etcd data[{dir_name}] (")),
        "{busy:?}"
    );

    server
        .terminate(Duration::from_secs(10))
        .expect("server stops");
    let before = std::fs::metadata(kv_file(&data_dir)).expect("kv").len();
    let defrag = ours(&address, &["defrag", "--data-dir", &dir_name]);
    // etcdctl prints nothing when it succeeds.
    assert_eq!(
        (defrag.code, defrag.stdout.as_str(), defrag.stderr.as_str()),
        (0, "", ""),
        "{defrag:?}"
    );
    let after = std::fs::metadata(kv_file(&data_dir)).expect("kv").len();
    // 3.75 MiB were written and freed; what is kept fits in far less. (The
    // backend may already have given back some of its free tail itself
    // when it committed after the compaction, so `before` can be small.)
    assert!(
        after <= before && after < 512 * 1024,
        "the backend went from {before} bytes to {after}"
    );
    let missing = scratch.path().join("missing").display().to_string();
    let error = ours(&address, &["defrag", "--data-dir", &missing]);
    assert_eq!(error.code, 1, "{error:?}");
    assert!(
        error
            .stderr
            .starts_with(&format!("Failed to defragment etcd data[{missing}] (")),
        "{error:?}"
    );

    let server = Server::start_in(ServerKind::Oxetcd, &data_dir).expect("restarts");
    let address = server.address();
    let kept = json(&ok(
        theirs(&address, &["get", "", "--prefix", "-w", "json"]),
        "get",
    ));
    assert_eq!(header(&kept, "revision"), revision, "{kept}");
    assert_eq!(kept["kvs"][0]["value"], b64("value"), "{kept}");
    assert_eq!(kept["kvs"].as_array().map(Vec::len), Some(1), "{kept}");
    ok(
        theirs(&address, &["put", "after", "defrag"]),
        "put after defrag",
    );
}
