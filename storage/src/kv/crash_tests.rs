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

use oxetcd_core::storage::{KeyVersion, KvMeta, KvRead, KvStore, KvWrite, Revision};

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

/// Everything `kv` holds, or the first error reading it.
fn read_all(kv: &RedbKv) -> Result<(KvMeta, Vec<Stored>), oxetcd_core::storage::StorageError> {
    let read = kv.read()?;
    let mut versions = Vec::new();
    read.changes(0, i64::MAX, &mut |v| {
        versions.push((v.mod_revision.main, v.key, v.value));
        ControlFlow::Continue(())
    })?;
    Ok((read.meta()?, versions))
}

/// A byte flipped anywhere in a backend file (every 97th byte of one):
/// opening it answers, never panics; most flips land where nothing is
/// read, the rest are refused as corrupt, naming the file; and what an
/// opened file serves is its data or an error, never other data (the
/// records' checksums).
#[test]
fn a_flipped_byte_is_refused_or_harmless_never_served() {
    let disk = SimDisk::default();
    let kv = RedbKv::open_on(disk.clone(), Path::new("kv.redb")).expect("opens");
    let mut versions = BTreeMap::new();
    for i in 1..=200 {
        let mut txn = kv.write().expect("write");
        txn.put_version(&entry(i, &mut versions)).expect("put");
        txn.commit().expect("commit");
    }
    kv.sync().expect("sync");
    let good = read_all(&kv).expect("reads");
    drop(kv);
    let image = disk.state().synced.clone();
    let (mut served, mut refused_at_open, mut refused_at_read, mut read_panics) = (0, 0, 0, 0);
    for offset in (0..image.len()).step_by(97) {
        let mut damaged = image.clone();
        damaged[offset] ^= 0x10;
        match RedbKv::open_on(SimDisk::on(damaged, None), Path::new("kv.redb")) {
            Ok(kv) => {
                let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_all(&kv)));
                match read {
                    Ok(Ok(held)) => {
                        assert_eq!(held, good, "a flip at {offset} served other data");
                        served += 1;
                    }
                    Ok(Err(_)) => refused_at_read += 1,
                    Err(_) => read_panics += 1,
                }
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.starts_with("kv.redb: "), "{text}");
                refused_at_open += 1;
            }
        }
    }
    assert!(refused_at_open + refused_at_read > 0, "no flip refused");
    assert_eq!(read_panics, 0, "redb panicked reading a damaged file");
    eprintln!(
        "a flipped byte at {} places: {served} served the same data, {refused_at_open} refused \
         at open, {refused_at_read} refused at read, {read_panics} made redb panic while reading",
        served + refused_at_open + refused_at_read + read_panics
    );
}
