//! The backend under a crash at every write and sync boundary, on a
//! simulated disk.
//!
//! Design. [`SimDisk`] is a redb storage backend over memory that keeps
//! two images: what reads see (the page cache) and what was synced (the
//! platter). Writes since the last sync are listed; after a set number of
//! operations (writes, length changes, syncs) the power goes: every
//! later call fails, as the process would die. The image a restart finds
//! is the synced one plus some of the unsynced writes: none, all, a torn
//! prefix (the last one half written), or every other one (written back
//! out of order). Each crash point of a reference run is tried with each
//! image: the backend must open, and what it holds must be exactly the
//! entries up to the applied index it records (data and applied index
//! commit together), with nothing synced lost.

use std::collections::BTreeMap;
use std::io;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use oxetcd_core::storage::{
    Alarms, AuthState, Generation, KeyVersion, KvMeta, KvRead, KvStore, KvWrite, LeaseRecord,
    Membership, Revision, StorageError,
};
use oxetcd_proto::etcdserverpb::{AlarmMember, Member};
use raft_proto::eraftpb::ConfState;

use super::RedbKv;

/// Entries the workload applies.
const ENTRIES: u64 = 40;
/// A sync after every this many entries.
const SYNC_EVERY: u64 = 7;
/// Longest the whole enumeration may take.
const TIME_MAX: Duration = Duration::from_secs(120);

#[derive(Debug, Default)]
struct DiskState {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a power loss for certain.
    synced: Vec<u8>,
    /// Writes since the last sync, in order.
    unsynced: Vec<(usize, Vec<u8>)>,
    /// Operations left before the power goes; `None`: never.
    ops_left: Option<usize>,
    /// Operations done.
    ops: usize,
    crashed: bool,
}

/// A disk in memory that loses what was not synced (see the module note).
#[derive(Clone, Debug, Default)]
struct SimDisk(Arc<Mutex<DiskState>>);

impl SimDisk {
    fn on(image: Vec<u8>, ops_left: Option<usize>) -> Self {
        Self(Arc::new(Mutex::new(DiskState {
            current: image.clone(),
            synced: image,
            ops_left,
            ..DiskState::default()
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DiskState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one operation; fails once the power is gone.
    fn operate(state: &mut DiskState) -> io::Result<()> {
        if state.crashed {
            return Err(io::Error::other("power lost"));
        }
        if let Some(left) = state.ops_left.as_mut() {
            if *left == 0 {
                state.crashed = true;
                return Err(io::Error::other("power lost"));
            }
            *left -= 1;
        }
        state.ops += 1;
        Ok(())
    }

    /// The images a restart may find (see the module note).
    fn images_after_crash(&self) -> Vec<(&'static str, Vec<u8>)> {
        let state = self.state();
        let apply = |writes: &mut dyn Iterator<Item = (usize, &[u8])>| {
            let mut image = state.synced.clone();
            for (offset, data) in writes {
                if image.len() < offset + data.len() {
                    image.resize(offset + data.len(), 0);
                }
                image[offset..offset + data.len()].copy_from_slice(data);
            }
            image
        };
        let all = &state.unsynced;
        let mut images = vec![("synced only", state.synced.clone())];
        if !all.is_empty() {
            images.push((
                "every write",
                apply(&mut all.iter().map(|(o, d)| (*o, d.as_slice()))),
            ));
            let cut = all.len() / 2;
            images.push((
                "torn",
                apply(
                    &mut all[..cut]
                        .iter()
                        .map(|(o, d)| (*o, d.as_slice()))
                        .chain(all.get(cut).map(|(o, d)| (*o, &d[..d.len() / 2]))),
                ),
            ));
            images.push((
                "out of order",
                apply(&mut all.iter().rev().step_by(2).map(|(o, d)| (*o, d.as_slice()))),
            ));
        }
        images
    }
}

impl redb::StorageBackend for SimDisk {
    fn len(&self) -> io::Result<u64> {
        let state = self.state();
        if state.crashed {
            return Err(io::Error::other("power lost"));
        }
        Ok(state.current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let state = self.state();
        if state.crashed {
            return Err(io::Error::other("power lost"));
        }
        let start = offset as usize;
        let bytes = state
            .current
            .get(start..start + out.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state();
        Self::operate(&mut state)?;
        state.current.resize(len as usize, 0);
        // A length change reaches the disk with the next sync; a shorter
        // file loses its tail at once (the blocks are freed).
        if state.synced.len() > len as usize {
            state.synced.truncate(len as usize);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.state();
        Self::operate(&mut state)?;
        state.synced = state.current.clone();
        state.unsynced.clear();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut state = self.state();
        Self::operate(&mut state)?;
        let start = offset as usize;
        if state.current.len() < start + data.len() {
            state.current.resize(start + data.len(), 0);
        }
        state.current[start..start + data.len()].copy_from_slice(data);
        state.unsynced.push((start, data.to_vec()));
        Ok(())
    }
}

/// Entry `i`'s write: key `k{i % 3}` = `v{i}` at revision `i + 1`.
fn entry(i: u64, versions: &mut BTreeMap<String, (i64, i64)>) -> KeyVersion {
    let key = format!("k{}", i % 3);
    let revision = i as i64 + 1;
    let (create, version) = versions
        .entry(key.clone())
        .and_modify(|(_, v)| *v += 1)
        .or_insert((revision, 1));
    KeyVersion {
        key: key.into_bytes(),
        mod_revision: Revision {
            main: revision,
            sub: 0,
        },
        create_revision: *create,
        version: *version,
        lease: 0,
        value: format!("v{i}").into_bytes(),
        tombstone: false,
    }
}

/// A stored version as the check compares it: revision, key, value.
type Stored = (i64, Vec<u8>, Vec<u8>);

/// What a run got done before the power went.
struct Run {
    /// The applied index of the last sync that returned.
    synced: u64,
    /// The last entry whose commit began.
    attempted: u64,
}

/// Applies entries 1.. on `kv` (each with its applied index in the same
/// transaction), syncing every [`SYNC_EVERY`], until one fails.
fn workload(kv: &RedbKv) -> Run {
    let mut versions = BTreeMap::new();
    let mut run = Run {
        synced: 0,
        attempted: 0,
    };
    for i in 1..=ENTRIES {
        let version = entry(i, &mut versions);
        run.attempted = i;
        let Ok(mut txn) = kv.write() else { break };
        let meta = KvMeta {
            applied_index: i,
            applied_term: 1,
            revision: i as i64 + 1,
            compact_revision: -1,
        };
        if txn.put_version(&version).is_err() || txn.set_meta(&meta).is_err() {
            break;
        }
        if txn.commit().is_err() {
            break;
        }
        if i % SYNC_EVERY == 0 {
            if kv.sync().is_err() {
                break;
            }
            run.synced = i;
        }
    }
    run
}

/// What `kv` holds: its meta, and every stored version as (revision,
/// key, value).
fn held(kv: &RedbKv) -> (KvMeta, Vec<Stored>) {
    let read = kv.read().expect("read");
    let mut versions = Vec::new();
    read.changes(0, i64::MAX, &mut |v| {
        versions.push((v.mod_revision.main, v.key, v.value));
        ControlFlow::Continue(())
    })
    .expect("changes");
    (read.meta().expect("meta"), versions)
}

#[test]
fn a_crash_at_any_write_or_sync_loses_nothing_synced_and_splits_no_commit() {
    let path = Path::new("sim-disk/kv.redb");
    // The reference run: how many operations the whole workload takes.
    let disk = SimDisk::default();
    let kv = RedbKv::open_on(disk.clone(), path).expect("opens");
    let opened_at = disk.state().ops;
    let run = workload(&kv);
    assert_eq!((run.synced, run.attempted), (35, ENTRIES));
    drop(kv);
    let total = disk.state().ops;

    let mut everything = Vec::new();
    let mut versions = BTreeMap::new();
    for i in 1..=ENTRIES {
        let v = entry(i, &mut versions);
        everything.push((v.mod_revision.main, v.key, v.value));
    }
    // The test's own wall-clock bound.
    let started = Instant::now();
    let mut tried = 0;
    for crash_at in opened_at..total {
        if started.elapsed() > TIME_MAX {
            break;
        }
        let disk = SimDisk::on(Vec::new(), Some(crash_at));
        let Ok(kv) = RedbKv::open_on(disk.clone(), path) else {
            continue;
        };
        let run = workload(&kv);
        drop(kv);
        for (how, image) in disk.images_after_crash() {
            tried += 1;
            let what = format!("crash after {crash_at} operations, {how}");
            let kv = RedbKv::open_on(SimDisk::on(image, None), path)
                .unwrap_or_else(|e| panic!("{what}: the backend does not open: {e}"));
            let (meta, versions) = held(&kv);
            let applied = meta.applied_index;
            assert!(
                run.synced <= applied && applied <= run.attempted,
                "{what}: applied index {applied} outside {}..={}",
                run.synced,
                run.attempted
            );
            assert_eq!(meta.revision, applied as i64 + 1, "{what}");
            assert_eq!(
                versions,
                everything[..applied as usize],
                "{what}: the data is not that of entries 1..={applied}"
            );
        }
    }
    assert!(tried > 0);
    eprintln!(
        "backend crash points: {} operations, {tried} crash images reopened and checked in {:?}",
        total - opened_at,
        started.elapsed()
    );
}

/// A commit that changes the membership is synced when it returns; the
/// commits around it are not.
#[test]
fn a_membership_change_survives_a_crash_at_once() {
    let path = Path::new("sim-disk/kv.redb");
    let disk = SimDisk::default();
    let kv = RedbKv::open_on(disk.clone(), path).expect("opens");
    let membership = Membership {
        members: vec![Member {
            id: 0x1234,
            name: "one".into(),
            peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
            ..Member::default()
        }],
        conf_state: ConfState {
            voters: vec![0x1234],
            ..ConfState::default()
        },
        ..Membership::default()
    };
    let mut versions = BTreeMap::new();
    for i in 1..=3 {
        let mut txn = kv.write().expect("write");
        txn.put_version(&entry(i, &mut versions)).expect("put");
        txn.set_meta(&KvMeta {
            applied_index: i,
            applied_term: 1,
            revision: i as i64 + 1,
            compact_revision: -1,
        })
        .expect("meta");
        if i == 2 {
            txn.set_membership(&membership).expect("membership");
        }
        txn.commit().expect("commit");
    }
    // Taken before the backend closes: closing syncs.
    let (how, synced) = disk.images_after_crash().swap_remove(0);
    assert_eq!(how, "synced only");
    drop(kv);
    let kv = RedbKv::open_on(SimDisk::on(synced, None), path).expect("reopens");
    let read = kv.read().expect("read");
    // Entry 3 came after the membership's commit and was not synced.
    assert_eq!(read.meta().expect("meta").applied_index, 2);
    assert_eq!(read.membership().expect("membership"), Some(membership));
}

/// A put continues a key's generation from the key index, without
/// reading the newest version; the index takes it from the record at
/// open. A record whose checksum fails there gives the index nothing, and
/// the put's lookup reads the record and is refused, as a read is.
#[test]
fn a_generation_from_a_damaged_record_is_refused() {
    let path = Path::new("sim-disk/kv.redb");
    let disk = SimDisk::default();
    let kv = RedbKv::open_on(disk.clone(), path).expect("opens");
    let put = |kv: &RedbKv, key: &str, value: &str, (main, sub): (i64, i64), version: i64| {
        let mut txn = kv.write().expect("write");
        txn.put_version(&KeyVersion {
            key: key.as_bytes().to_vec(),
            mod_revision: Revision { main, sub },
            create_revision: 2,
            version,
            lease: 0,
            value: value.as_bytes().to_vec(),
            tombstone: false,
        })
        .expect("put");
        txn.commit().expect("commit");
    };
    put(&kv, "a", "first-a", (2, 0), 1);
    put(&kv, "b", "first-b", (2, 1), 1);
    put(&kv, "a", "second-value-of-a", (3, 0), 2);
    let expected = |version| {
        Some(Generation {
            create_revision: 2,
            version,
        })
    };
    {
        let txn = kv.write().expect("write");
        assert_eq!(txn.generation(b"a", 3).expect("a"), expected(2));
        assert_eq!(txn.generation(b"a", 2).expect("a at 2"), expected(1));
        assert_eq!(txn.generation(b"c", 3).expect("c"), None);
    }
    kv.sync().expect("sync");
    drop(kv);
    let mut image = disk.state().synced.clone();
    let at = image
        .windows(b"second-value-of-a".len())
        .position(|w| w == b"second-value-of-a")
        .expect("the record is in the file");
    image[at] ^= 0x10;
    let kv = RedbKv::open_on(SimDisk::on(image, None), path).expect("reopens");
    let txn = kv.write().expect("write");
    let refused = txn.generation(b"a", 3).expect_err("damaged");
    assert!(refused.to_string().contains("checksum"), "{refused}");
    assert_eq!(txn.generation(b"b", 3).expect("b"), expected(1));
}

/// Everything a backend holds, as the flipped-byte sweep compares it.
#[derive(Debug, PartialEq)]
struct Held {
    meta: KvMeta,
    membership: Option<Membership>,
    auth: Option<AuthState>,
    alarms: Alarms,
    used_bytes: u64,
    leases: Vec<LeaseRecord>,
    versions: Vec<Stored>,
}

/// Everything `kv` holds, or the first error reading it.
fn read_all(kv: &RedbKv) -> Result<Held, StorageError> {
    let read = kv.read()?;
    let mut versions = Vec::new();
    read.changes(0, i64::MAX, &mut |v| {
        versions.push((v.mod_revision.main, v.key, v.value));
        ControlFlow::Continue(())
    })?;
    let mut leases = Vec::new();
    read.leases(&mut |lease| {
        leases.push(lease);
        ControlFlow::Continue(())
    })?;
    Ok(Held {
        meta: read.meta()?,
        membership: read.membership()?,
        auth: read.auth()?,
        alarms: read.alarms()?,
        used_bytes: read.used_bytes()?,
        leases,
        versions,
    })
}

/// A backend holding some of every kind of record: versions, leases,
/// the applied index, membership, auth and alarms.
fn every_kind_of_record(kv: &RedbKv) {
    let mut versions = BTreeMap::new();
    for i in 1..=200 {
        let mut txn = kv.write().expect("write");
        txn.put_version(&entry(i, &mut versions)).expect("put");
        txn.set_meta(&KvMeta {
            applied_index: i + 10,
            applied_term: 2,
            revision: i as i64 + 1,
            compact_revision: -1,
        })
        .expect("meta");
        if i % 50 == 0 {
            txn.put_lease(&LeaseRecord {
                id: i as i64,
                ttl_secs: 60,
                remaining_ttl_secs: 30,
            })
            .expect("lease");
        }
        txn.commit().expect("commit");
    }
    let mut txn = kv.write().expect("write");
    txn.set_membership(&Membership {
        members: vec![Member {
            id: 0x1234,
            name: "one".into(),
            peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
            client_ur_ls: vec!["http://127.0.0.1:2379".into()],
            is_learner: false,
        }],
        conf_state: ConfState {
            voters: vec![0x1234],
            ..ConfState::default()
        },
        ..Membership::default()
    })
    .expect("membership");
    txn.set_auth(&AuthState {
        enabled: true,
        revision: 3,
        ..AuthState::default()
    })
    .expect("auth");
    txn.set_alarms(&[AlarmMember {
        member_id: 0x1234,
        alarm: 1,
    }])
    .expect("alarms");
    txn.commit().expect("commit");
}

/// What the flipped-byte sweep saw, by place.
#[derive(Debug, Default)]
struct Sweep {
    /// Opened, and served exactly the data written.
    same_data: usize,
    /// Refused at open (a damaged meta record among them counted in
    /// `meta_at_open` too).
    refused_at_open: usize,
    meta_at_open: usize,
    /// Opened, then a read was refused: a version record, a meta or lease
    /// record, or the storage engine's own check.
    refused_at_read: usize,
    version_at_read: usize,
    meta_at_read: usize,
    /// Read refusals that did not name the backend file.
    unnamed_at_read: Vec<String>,
    /// Opened, and served something other than the data written.
    other_data: Vec<usize>,
    panics: usize,
}

/// Whether a refusal's text blames a meta or lease record.
fn blames_meta(text: &str) -> bool {
    [
        "meta record",
        "lease record",
        "membership record",
        "auth record",
        "alarm record",
        "kv commit sequence record",
        "bytes-in-use record",
    ]
    .iter()
    .any(|name| text.contains(name))
}

/// The backend file the sweeps damage; every refusal must name it.
const SWEPT_FILE: &str = "sim-disk/kv.redb";

/// The synced image of a backend holding every kind of record, and what
/// it serves.
fn swept_image() -> (Vec<u8>, Held) {
    let disk = SimDisk::default();
    let kv = RedbKv::open_on(disk.clone(), Path::new(SWEPT_FILE)).expect("opens");
    every_kind_of_record(&kv);
    kv.sync().expect("sync");
    let good = read_all(&kv).expect("reads");
    drop(kv);
    let image = disk.state().synced.clone();
    (image, good)
}

/// Flips one bit of the byte at each of `offsets` in turn, opens the
/// damaged image and reads everything, counting what came of it.
fn sweep(image: &[u8], good: &Held, offsets: impl Iterator<Item = usize>) -> Sweep {
    let path = Path::new(SWEPT_FILE);
    let named = format!("{SWEPT_FILE}: ");
    let mut sweep = Sweep::default();
    for offset in offsets {
        let mut damaged = image.to_vec();
        damaged[offset] ^= 0x10;
        match RedbKv::open_on(SimDisk::on(damaged, None), path) {
            Ok(kv) => {
                let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_all(&kv)));
                match read {
                    Ok(Ok(held)) if held == *good => sweep.same_data += 1,
                    Ok(Ok(_)) => sweep.other_data.push(offset),
                    Ok(Err(e)) => {
                        let text = e.to_string();
                        sweep.refused_at_read += 1;
                        if text.contains("version record") {
                            sweep.version_at_read += 1;
                        } else if blames_meta(&text) {
                            sweep.meta_at_read += 1;
                        }
                        if !text.starts_with(&named) {
                            sweep.unnamed_at_read.push(text);
                        }
                    }
                    Err(_) => sweep.panics += 1,
                }
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.starts_with(&named), "{text}");
                sweep.refused_at_open += 1;
                if blames_meta(&text) {
                    sweep.meta_at_open += 1;
                }
            }
        }
    }
    sweep
}

impl Sweep {
    /// Prints the figures, then checks that nothing other than the data
    /// written was served, redb never panicked while reading, and every
    /// refusal at read named the file.
    fn report_and_check(&self, what: &str) {
        let places = self.same_data
            + self.refused_at_open
            + self.refused_at_read
            + self.other_data.len()
            + self.panics;
        eprintln!(
            "{what}: a flipped byte at {places} places: {} served the same data, {} refused at \
             open ({} of them a meta record), {} refused at read ({} a version record, {} a \
             meta or lease record), {} served other data, {} made redb panic while reading",
            self.same_data,
            self.refused_at_open,
            self.meta_at_open,
            self.refused_at_read,
            self.version_at_read,
            self.meta_at_read,
            self.other_data.len(),
            self.panics,
        );
        assert!(
            self.other_data.is_empty(),
            "{what}: flips at {:?} served other data",
            self.other_data
        );
        assert_eq!(
            self.panics, 0,
            "{what}: redb panicked reading a damaged file"
        );
        assert!(
            self.unnamed_at_read.is_empty(),
            "{what}: refusals at read that do not name the file: {:?}",
            self.unnamed_at_read
        );
    }
}

/// A byte flipped anywhere in a backend file (every 97th byte of one):
/// opening it answers, never panics; most flips land where nothing is
/// read, the rest are refused as corrupt, naming the file; and what an
/// opened file serves is its data or an error, never other data (the
/// records' checksums, meta records and leases as much as versions).
#[test]
fn a_flipped_byte_is_refused_or_harmless_never_served() {
    let (image, good) = swept_image();
    let sweep = sweep(&image, &good, (0..image.len()).step_by(97));
    sweep.report_and_check("whole file");
    assert!(
        sweep.version_at_read > 0,
        "no damaged version record refused"
    );
}

/// Every byte of the page that holds the meta records (the one page that
/// holds the membership record, written by the last commit alone): a
/// damaged applied index, membership, auth or alarm record is refused,
/// never served.
#[test]
fn a_flipped_byte_in_the_meta_records_is_refused_never_served() {
    const PAGE_BYTES: usize = 4096;
    let (image, good) = swept_image();
    let pages: Vec<usize> = image
        .windows(b"membership".len())
        .enumerate()
        .filter(|(_, window)| *window == b"membership")
        .map(|(at, _)| at / PAGE_BYTES * PAGE_BYTES)
        .collect();
    assert_eq!(pages.len(), 1, "the meta page is not found: {pages:?}");
    let start = pages[0];
    let end = (start + PAGE_BYTES).min(image.len());
    let sweep = sweep(&image, &good, start..end);
    sweep.report_and_check("meta page");
    assert!(
        sweep.meta_at_open + sweep.meta_at_read > 0,
        "no damaged meta record refused"
    );
}
