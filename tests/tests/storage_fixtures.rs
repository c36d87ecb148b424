//! Data directories written by earlier storage versions
//! (`tests/fixtures/storage/`, made once by
//! `scripts/make-storage-fixtures.sh` and kept as made) open under this
//! build with their whole history: a 3.5 directory is migrated up to 3.6
//! when the member starts (logged, and reported by `Status`), a 3.6 one
//! opens as it is, and a member run as 3.5 refuses a 3.6 directory with
//! etcd's words.
//!
//! Each fixture holds one member's history: `a`=1 (revision 2), `b`=1
//! (3), `a`=2 (4), `b` deleted (5), a txn putting `c` and `d` (6), a
//! compaction at 3, a lease of an hour with `leased`=x on it (7), a
//! role `reader` and a user `alice` (auth off).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use oxetcd_tests::etcdctl::{ctl, ctl_ok};
use oxetcd_tests::{Grpc, Launch, Ports, Server, ServerKind};

fn fixture(version: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/storage")
        .join(format!("{version}.tar.gz"))
}

/// The fixture unpacked into a fresh directory (its `member/` in `dir`).
fn unpack(version: &str, dir: &Path) {
    std::fs::create_dir_all(dir).expect("data dir");
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(fixture(version))
        .arg("-C")
        .arg(dir)
        .status()
        .expect("tar runs");
    assert!(status.success(), "unpacking {version}: {status}");
}

fn launch(kind: ServerKind, dir: &Path) -> (Launch, String) {
    let client = Ports::Kernel.take();
    let peer = Ports::Kernel.take();
    let peer_url = format!("http://127.0.0.1:{peer}");
    let launch = Launch::new(
        kind,
        "fixture",
        dir,
        vec![format!("http://127.0.0.1:{client}")],
        peer_url.clone(),
    )
    .member(&peer_url, &format!("fixture={peer_url}"), "new", "fixtures");
    (launch, format!("127.0.0.1:{client}"))
}

/// The fixture's history, read back through etcdctl.
fn check_history(address: &str) {
    let all = ctl_ok(address, &["get", "--prefix", ""]);
    assert_eq!(all, "a\n2\nc\n1\nd\n1\nleased\nx\n", "{all}");
    assert_eq!(ctl_ok(address, &["get", "a", "--rev=4"]), "a\n2\n");
    assert_eq!(ctl_ok(address, &["get", "b", "--rev=4"]), "b\n1\n");
    let compacted = ctl(address, &["get", "a", "--rev=2"]);
    assert!(
        compacted
            .stderr
            .contains("required revision has been compacted"),
        "{compacted:?}"
    );
    let json = ctl_ok(address, &["get", "a", "-w", "json"]);
    assert!(json.contains("\"revision\":7"), "{json}");
    assert!(json.contains("\"create_revision\":2"), "{json}");
    assert!(json.contains("\"mod_revision\":4"), "{json}");
    assert!(json.contains("\"version\":2"), "{json}");
    let leases = ctl_ok(address, &["lease", "list"]);
    let lease = leases
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("no lease in {leases}"))
        .to_owned();
    let alive = ctl_ok(address, &["lease", "timetolive", &lease, "--keys"]);
    assert!(alive.contains("leased"), "{alive}");
    assert_eq!(ctl_ok(address, &["user", "list"]), "alice\n");
    assert_eq!(ctl_ok(address, &["role", "list"]), "reader\n");
}

fn storage_version(address: &str) -> String {
    let mut grpc = Grpc::connect(&format!("http://{address}")).expect("gRPC");
    grpc.status().expect("status").storage_version
}

fn start(launch: &Launch) -> Server {
    launch.start().unwrap_or_else(|e| panic!("{e}"))
}

fn a_3_5_directory_is_migrated_up(kind: ServerKind) {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("data");
    unpack("3.5", &dir);
    let (launch, address) = launch(kind, &dir);
    let mut server = start(&launch);
    check_history(&address);
    let log = server.log();
    assert!(
        log.contains("updated the cluster version from 3.5 to 3.6")
            && log.contains("migrated the storage version"),
        "{log}"
    );
    assert_eq!(storage_version(&address), "3.6.0");
    // It writes on from where the history ended, and keeps it.
    assert_eq!(ctl_ok(&address, &["put", "e", "1"]), "OK\n");
    server
        .terminate(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}"));
    let _server = start(&launch);
    assert_eq!(ctl_ok(&address, &["get", "e"]), "e\n1\n");
    assert_eq!(ctl_ok(&address, &["get", "a", "--rev=4"]), "a\n2\n");
    assert_eq!(ctl_ok(&address, &["get", "leased"]), "leased\nx\n");
}

#[test]
fn a_3_5_directory_is_migrated_up_by_oxetcd() {
    a_3_5_directory_is_migrated_up(ServerKind::Oxetcd);
}

#[test]
fn a_3_5_directory_is_migrated_up_by_oxetcd_smol() {
    a_3_5_directory_is_migrated_up(ServerKind::OxetcdSmol);
}

#[test]
fn a_3_6_directory_opens_and_refuses_a_3_5_member() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("data");
    unpack("3.6", &dir);
    let (launch, address) = launch(ServerKind::Oxetcd, &dir);
    let mut server = start(&launch.clone().flags(&["--unsafe-run-as-version", "3.5.0"]));
    let exit = server.wait_exit(Duration::from_secs(20));
    let log = server.log();
    assert!(exit.is_some_and(|s| !s.success()), "{exit:?}: {log}");
    assert!(
        log.contains("invalid downgrade; server version is lower than determined cluster version")
            && log.contains(
                "the data directory holds storage version 3.6, newer than this member's \
                 version 3.5.0"
            ),
        "{log}"
    );
    let _server = start(&launch);
    check_history(&address);
    assert_eq!(storage_version(&address), "3.6.0");
}
