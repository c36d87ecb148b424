//! The bolt reader and writer against etcd itself: a snapshot saved from a
//! real etcd 3.4 (Debian's `/usr/bin/etcd`, started here on 127.0.0.x with
//! its own ports and data directory) is read by oxetcd with the numbers
//! etcdctl prints for it, and imported with its revisions; a snapshot
//! oxetcd writes is read by etcdctl with the numbers oxetcd prints.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use oxetcd_core::storage::{KeyVersion, KvMeta, KvRead, KvStore, KvWrite, LeaseRecord, Revision};
use oxetcd_proto::etcdserverpb::{AlarmMember, AlarmType};
use oxetcd_storage::snapshot_file::{self, FileExport, HashCheck};

const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";

/// An etcd process, killed when dropped.
struct Etcd {
    child: Child,
    endpoint: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ports from the process ID: two test binaries running at once differ.
fn ports() -> (u16, u16) {
    let base = 20_000 + (std::process::id() % 20_000) as u16;
    (base, base + 1)
}

fn start_etcd(dir: &Path) -> Etcd {
    let (client, peer) = ports();
    let host = "127.0.0.61";
    let client_url = format!("http://{host}:{client}");
    let peer_url = format!("http://{host}:{peer}");
    let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
    let child = Command::new(ETCD)
        .args(["--name", "snap", "--data-dir"])
        .arg(dir.join("etcd-data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("snap={peer_url}")])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("etcd starts");
    let etcd = Etcd {
        child,
        endpoint: client_url,
    };
    let started = Instant::now();
    while etcdctl(&etcd.endpoint, &["endpoint", "health"])
        .status
        .code()
        != Some(0)
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "etcd is not healthy: {}",
            std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    etcd
}

fn etcdctl(endpoint: &str, args: &[&str]) -> Output {
    Command::new(ETCDCTL)
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint])
        .args(args)
        .output()
        .expect("etcdctl runs")
}

fn ok(output: Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// etcdctl's `snapshot status -w json` of `file`: hash, revision,
/// totalKey, totalSize.
fn etcdctl_status(file: &Path) -> [u64; 4] {
    let out = ok(Command::new(ETCDCTL)
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "status", "-w", "json"])
        .arg(file)
        .output()
        .unwrap());
    // {"hash":459154311,"revision":6,"totalKey":12,"totalSize":20480}
    let field = |name: &str| -> u64 {
        let at = out
            .find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("{out}"));
        out[at + name.len() + 3..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"))
    };
    [
        field("hash"),
        field("revision"),
        field("totalKey"),
        field("totalSize"),
    ]
}

fn ours(file: &Path) -> [u64; 4] {
    let s = snapshot_file::status(file, HashCheck::Required).unwrap();
    [
        u64::from(s.hash),
        s.revision as u64,
        s.total_key,
        s.total_size,
    ]
}

fn installed() -> bool {
    Path::new(ETCD).is_file() && Path::new(ETCDCTL).is_file()
}

#[test]
fn an_etcd_snapshot_reads_and_imports_as_etcd_sees_it() {
    assert!(
        installed(),
        "Debian's etcd and etcdctl are needed: scripts/install-deps.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(dir.path());
    let e = etcd.endpoint.as_str();
    let lease = ok(etcdctl(e, &["lease", "grant", "600"]));
    let lease = lease.split_whitespace().nth(1).unwrap().to_owned();
    ok(etcdctl(e, &["put", "a", "1"])); // 2
    ok(etcdctl(e, &["put", "b", "2"])); // 3
    ok(etcdctl(e, &["put", "a", "three"])); // 4
    ok(etcdctl(e, &["del", "b"])); // 5
    ok(etcdctl(e, &["put", "c", "4", &format!("--lease={lease}")])); // 6
    ok(etcdctl(e, &["compact", "3"]));
    // Enough keys for branch pages in etcd's own key bucket.
    let many: String = (0..300)
        .map(|i| format!("put k{i:03} {}\n", "v".repeat(40)))
        .collect();
    for line in many.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        ok(etcdctl(e, &words[..]));
    }
    let file = dir.path().join("etcd.db");
    ok(etcdctl(e, &["snapshot", "save", file.to_str().unwrap()]));
    drop(etcd);

    let theirs = etcdctl_status(&file);
    assert_eq!(theirs[1], 306);
    assert_eq!(ours(&file), theirs, "hash, revision, totalKey, totalSize");

    let target = dir.path().join("restored");
    snapshot_file::restore_backend(&file, &target, true).unwrap();
    let (_, kv) = oxetcd_storage::open(&target).unwrap();
    let view = kv.read().unwrap();
    let meta = view.meta().unwrap();
    assert_eq!((meta.revision, meta.compact_revision), (306, 3));
    let mut a = Vec::new();
    view.versions(b"a", &mut |v| {
        a.push(v);
        ControlFlow::Continue(())
    })
    .unwrap();
    // Compacted at 3: a@2 stays (the newest at or below 3), as etcd keeps it.
    assert_eq!(a.len(), 2);
    assert_eq!(a[0].value, b"three");
    assert_eq!(
        (a[0].mod_revision.main, a[0].create_revision, a[0].version),
        (4, 2, 2)
    );
    let mut b = Vec::new();
    view.versions(b"b", &mut |v| {
        b.push(v);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert!(b[0].tombstone && b[0].mod_revision.main == 5, "{b:?}");
    let mut leases = Vec::new();
    view.leases(&mut |l| {
        leases.push(l);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].id, i64::from_str_radix(&lease, 16).unwrap());
    assert_eq!(leases[0].ttl_secs, 600);
}

#[test]
fn an_oxetcd_snapshot_reads_in_etcdctl_as_in_oxetcd() {
    assert!(
        installed(),
        "Debian's etcd and etcdctl are needed: scripts/install-deps.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let (_, kv) = oxetcd_storage::open(&dir.path().join("source")).unwrap();
    let mut w = kv.write().unwrap();
    let mut revision = 1;
    for i in 0..5000i64 {
        revision = 2 + i / 2;
        let tombstone = i % 7 == 6;
        w.put_version(&KeyVersion {
            key: format!("key-{:04}", i % 1000).into_bytes(),
            mod_revision: Revision {
                main: revision,
                sub: i % 2,
            },
            create_revision: if tombstone { 0 } else { 2 },
            version: i64::from(!tombstone),
            lease: 0,
            value: if tombstone {
                Vec::new()
            } else {
                vec![b'x'; (i % 300) as usize]
            },
            tombstone,
        })
        .unwrap();
    }
    w.put_lease(&LeaseRecord {
        id: 99,
        ttl_secs: 30,
        remaining_ttl_secs: 0,
    })
    .unwrap();
    let alarms = vec![AlarmMember {
        member_id: 0x1234,
        alarm: AlarmType::Nospace as i32,
    }];
    w.set_alarms(&alarms).unwrap();
    w.set_meta(&KvMeta {
        applied_index: 5000,
        applied_term: 2,
        revision,
        compact_revision: -1,
    })
    .unwrap();
    w.commit().unwrap();
    let file: PathBuf = dir.path().join("oxetcd.db");
    let mut bytes = Vec::new();
    for chunk in FileExport::new(kv.read().unwrap(), "3.6.0", 64 * 1024).unwrap() {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    std::fs::write(&file, &bytes).unwrap();
    let theirs = etcdctl_status(&file);
    assert_eq!(theirs[1] as i64, revision);
    // key: 5000; meta: consistent index; lease; cluster; alarm; auth.
    assert_eq!(theirs[2], 5000 + 1 + 1 + 1 + 1 + 1);
    assert_eq!(ours(&file), theirs, "hash, revision, totalKey, totalSize");

    // The alarm comes back with a restore, as etcd's restore keeps it.
    let target = dir.path().join("restored");
    snapshot_file::restore_backend(&file, &target, true).unwrap();
    let (_, restored) = oxetcd_storage::open(&target).unwrap();
    assert_eq!(restored.read().unwrap().alarms().unwrap(), alarms);
}
