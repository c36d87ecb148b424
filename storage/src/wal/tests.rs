//! The WAL against the failures it must survive: reopen after every kind of
//! write, torn and zeroed tails, damage in the middle, a crash between the
//! steps of a rotation or a compaction, and the import of a `log.redb`.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use oxetcd_core::storage::{LogState, LogStore};
use raft_proto::eraftpb::{Entry, HardState};

use super::frame::decode_frame;
use super::segment::{segment_name, SPARE_FILE};
use super::{WalLog, WalOptions};
use crate::{OpenError, RedbLog};

/// Small segments, so that a few dozen entries rotate.
const SMALL: WalOptions = WalOptions {
    segment_bytes: 4096,
    reserve_bytes: 0,
};

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: format!("value {index}@{term} {}", "x".repeat(100))
            .into_bytes()
            .into(),
        ..Entry::default()
    }
}

fn hard_state(term: u64, commit: u64) -> HardState {
    HardState {
        term,
        vote: 1,
        commit,
        ..HardState::default()
    }
}

fn open(dir: &Path) -> WalLog {
    WalLog::open_with(dir, SMALL).unwrap()
}

fn append(log: &WalLog, low: u64, high: u64, term: u64) {
    let batch: Vec<_> = (low..high).map(|i| entry(i, term)).collect();
    log.append(&batch, Some(&hard_state(term, low))).unwrap();
}

fn indexes(log: &WalLog) -> Vec<u64> {
    let state = log.state().unwrap();
    log.entries(state.first_index, state.last_index + 1)
        .unwrap()
        .iter()
        .map(|e| e.index)
        .collect()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    names.sort();
    names
}

/// The offsets of the frames of a segment file.
fn frame_offsets(path: &Path) -> Vec<usize> {
    let bytes = fs::read(path).unwrap();
    let mut at = 0;
    let mut offsets = Vec::new();
    // Bounded: every frame is at least 8 bytes.
    for _ in 0..bytes.len() / 8 {
        match decode_frame(&bytes[at..]) {
            Ok((_, len)) => {
                offsets.push(at);
                at += len;
            }
            Err(_) => break,
        }
    }
    offsets.push(at);
    offsets
}

fn write_at(path: &Path, offset: usize, bytes: &[u8]) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, offset as u64).unwrap();
}

#[test]
fn round_trip_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = WalLog::open(dir.path()).unwrap();
    assert_eq!(
        log.state().unwrap(),
        LogState {
            hard_state: HardState::default(),
            first_index: 1,
            last_index: 0,
            snapshot_term: 0,
            cluster_id: 0,
        }
    );
    // Preallocated whole.
    let first = &segments(dir.path())[0];
    assert_eq!(fs::metadata(first).unwrap().len(), 64 * 1024 * 1024);
    append(&log, 1, 6, 1);
    log.store_cluster_id(0xc1 << 40).unwrap();
    // A new leader overwrites from 4; a hard state alone.
    log.append(&[entry(4, 2)], None).unwrap();
    log.append(&[], Some(&hard_state(2, 3))).unwrap();
    assert_eq!(log.entries(2, 4).unwrap(), vec![entry(2, 1), entry(3, 1)]);
    assert!(log.entries(1, 6).is_err());
    assert!(log.append(&[entry(7, 2)], None).is_err(), "a gap");
    assert!(log.append(&[entry(5, 2), entry(7, 2)], None).is_err());
    let state = log.state().unwrap();
    drop(log);
    let log = WalLog::open(dir.path()).unwrap();
    assert_eq!(log.state().unwrap(), state);
    assert_eq!(state.last_index, 4);
    assert_eq!(state.cluster_id, 0xc1 << 40);
    assert_eq!(state.hard_state, hard_state(2, 3));
    assert_eq!(log.entries(1, 5).unwrap()[3], entry(4, 2));
}

#[test]
fn reopen_after_rotation_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 1..=60 {
        append(&log, i, i + 1, 1);
    }
    let before = segments(dir.path()).len();
    assert!(before >= 3, "{before} segments");
    drop(log);
    let log = open(dir.path());
    assert_eq!(indexes(&log), (1..=60).collect::<Vec<_>>());
    // Rotation after a reopen, then compaction releases whole segments.
    for i in 61..=80 {
        append(&log, i, i + 1, 2);
    }
    log.compact(70).unwrap();
    let after = segments(dir.path()).len();
    assert!(after < before, "{before} -> {after} segments");
    assert_eq!(log.segment_count(), after);
    let state = log.state().unwrap();
    assert_eq!((state.first_index, state.last_index), (70, 80));
    assert_eq!(state.snapshot_term, 2);
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.state().unwrap(), state);
    assert_eq!(indexes(&log), (70..=80).collect::<Vec<_>>());
    // Compacting past the end, and installing a snapshot, empty the log.
    log.compact(90).unwrap();
    let state = log.state().unwrap();
    assert_eq!((state.first_index, state.last_index), (90, 89));
    log.install_snapshot(100, 4).unwrap();
    assert_eq!(segments(dir.path()).len(), 1);
    append(&log, 101, 104, 4);
    let state = log.state().unwrap();
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.state().unwrap(), state);
    assert_eq!((state.first_index, state.snapshot_term), (101, 4));
    assert_eq!(indexes(&log), vec![101, 102, 103]);
}

#[test]
fn a_batch_larger_than_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    append(&log, 1, 3, 1);
    append(&log, 3, 100, 1);
    append(&log, 100, 102, 1);
    drop(log);
    let log = open(dir.path());
    assert_eq!(indexes(&log), (1..102).collect::<Vec<_>>());
}

#[test]
fn a_torn_last_record_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let log = WalLog::open(dir.path()).unwrap();
    for i in 1..=3 {
        append(&log, i, i + 1, 1);
    }
    drop(log);
    let path = segments(dir.path()).pop().unwrap();
    let offsets = frame_offsets(&path);
    let (last, end) = (offsets[offsets.len() - 2], offsets[offsets.len() - 1]);
    // The file cut in the middle of the last record.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(((last + end) / 2) as u64).unwrap();
    drop(file);
    let log = WalLog::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), vec![1, 2]);
    append(&log, 3, 5, 2);
    drop(log);
    let log = WalLog::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), vec![1, 2, 3, 4]);
    assert_eq!(log.entries(3, 4).unwrap(), vec![entry(3, 2)]);
}

#[test]
fn a_partly_written_last_record_is_zeroed() {
    let dir = tempfile::tempdir().unwrap();
    let log = WalLog::open(dir.path()).unwrap();
    for i in 1..=3 {
        append(&log, i, i + 1, 1);
    }
    drop(log);
    let path = segments(dir.path()).pop().unwrap();
    let offsets = frame_offsets(&path);
    let (last, end) = (offsets[offsets.len() - 2], offsets[offsets.len() - 1]);
    // Its header made it to disk and its second half did not; then its
    // header did not and the second half did.
    write_at(&path, (last + end) / 2, &vec![0; end - (last + end) / 2]);
    let log = WalLog::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), vec![1, 2]);
    drop(log);
    assert_eq!(frame_offsets(&path).last(), Some(&last));
    let bytes = fs::read(&path).unwrap();
    assert!(
        bytes[last..].iter().all(|&b| b == 0),
        "the torn record is zeroed"
    );

    let log = WalLog::open(dir.path()).unwrap();
    append(&log, 3, 4, 1);
    drop(log);
    write_at(&path, last, &[0; 16]);
    let log = WalLog::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), vec![1, 2]);
}

#[test]
fn a_zero_filled_tail_ends_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = WalLog::open(dir.path()).unwrap();
    append(&log, 1, 3, 1);
    drop(log);
    let path = segments(dir.path()).pop().unwrap();
    let len = fs::metadata(&path).unwrap().len();
    let end = *frame_offsets(&path).last().unwrap();
    assert!(fs::read(&path).unwrap()[end..].iter().all(|&b| b == 0));
    for _ in 0..2 {
        let log = WalLog::open(dir.path()).unwrap();
        assert_eq!(indexes(&log), vec![1, 2]);
    }
    // Nothing was written by the reopens: the next record goes at `end`.
    assert_eq!(*frame_offsets(&path).last().unwrap(), end);
    assert_eq!(fs::metadata(&path).unwrap().len(), len);
}

#[test]
fn a_flipped_bit_in_a_middle_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = WalLog::open(dir.path()).unwrap();
    for i in 1..=4 {
        append(&log, i, i + 1, 1);
    }
    drop(log);
    let path = segments(dir.path()).pop().unwrap();
    let offsets = frame_offsets(&path);
    let bad = offsets[2];
    let mut bytes = fs::read(&path).unwrap();
    bytes[bad + 20] ^= 0x04;
    fs::write(&path, &bytes).unwrap();
    let error = WalLog::open(dir.path()).unwrap_err();
    assert!(
        matches!(&error, OpenError::Corrupt { path: p, .. } if *p == path),
        "{error}"
    );
    let text = error.to_string();
    assert!(text.contains(&segment_name(0)), "{text}");
    assert!(text.contains(&format!("offset {bad}")), "{text}");
    // Refused again, and nothing was cut off meanwhile.
    assert!(WalLog::open(dir.path()).is_err());
    assert_eq!(fs::read(&path).unwrap(), bytes);

    // A zeroed header in the middle is no end of the log either.
    bytes[bad + 20] ^= 0x04;
    bytes[bad..bad + 8].fill(0);
    fs::write(&path, &bytes).unwrap();
    let error = WalLog::open(dir.path()).unwrap_err();
    assert!(
        error.to_string().contains(&format!("offset {bad}")),
        "{error}"
    );
}

#[test]
fn damage_at_the_end_of_an_older_segment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 1..=40 {
        append(&log, i, i + 1, 1);
    }
    drop(log);
    let first = &segments(dir.path())[0];
    let offsets = frame_offsets(first);
    let last = offsets[offsets.len() - 2];
    write_at(first, last + 12, &[0xff]);
    let error = WalLog::open_with(dir.path(), SMALL).unwrap_err();
    assert!(
        matches!(&error, OpenError::Corrupt { path, .. } if path == first),
        "{error}"
    );
    assert!(
        error.to_string().contains(&format!("offset {last}")),
        "{error}"
    );
}

/// Fills the first segment so that the next append rotates, and returns
/// the log with its entries.
fn nearly_full(dir: &Path) -> (WalLog, u64) {
    let log = open(dir);
    let mut next = 1;
    while segments(dir).len() < 2 {
        append(&log, next, next + 1, 1);
        next += 1;
        assert!(next < 100, "no rotation");
    }
    (log, next)
}

#[test]
fn a_crash_between_rotation_steps_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let (log, next) = nearly_full(dir.path());
    let want: Vec<u64> = (1..next).collect();
    drop(log);
    let wal = dir.path();
    let second = wal.join(segment_name(1));

    // 1. A spare being zero-filled, or zeroed and given its header but not
    //    yet renamed: removed.
    fs::write(wal.join(SPARE_FILE), vec![0; 100]).unwrap();
    let log = open(wal);
    assert_eq!(indexes(&log), want);
    assert!(!wal.join(SPARE_FILE).exists());
    drop(log);
    fs::copy(&second, wal.join(SPARE_FILE)).unwrap();
    let log = open(wal);
    assert_eq!(indexes(&log), want);
    assert!(!wal.join(SPARE_FILE).exists());
    drop(log);

    // 2. A new segment in place with its header only: written into.
    let third = wal.join(segment_name(2));
    let offsets = frame_offsets(&second);
    let mut header_only = fs::read(&second).unwrap();
    header_only[offsets[1]..].fill(0);
    fs::write(&third, &header_only).unwrap();
    // Its header names segment 1: copied as 2, it is refused.
    assert!(WalLog::open_with(wal, SMALL).is_err());
    fs::remove_file(&third).unwrap();

    // 3. A new segment in place whose header never made it: removed.
    fs::write(&third, vec![0; 4096]).unwrap();
    let log = open(wal);
    assert_eq!(indexes(&log), want);
    assert!(!third.exists());
    // And the log goes on, across more rotations.
    for i in next..next + 40 {
        append(&log, i, i + 1, 1);
    }
    drop(log);
    let log = open(wal);
    assert_eq!(indexes(&log), (1..next + 40).collect::<Vec<_>>());
    assert!(segments(wal).len() > 2, "{:?}", segments(wal));
}

#[test]
fn a_crash_between_segment_removals_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 1..=80 {
        append(&log, i, i + 1, 1);
    }
    let all = segments(dir.path());
    let kept = all.len() - 2;
    let saved: Vec<_> = all.iter().map(|p| fs::read(p).unwrap()).collect();
    log.compact(79).unwrap();
    assert_eq!(segments(dir.path()).len(), 1);
    drop(log);
    // The oldest removal was lost, the next ones were not: a gap.
    fs::write(&all[0], &saved[0]).unwrap();
    let log = open(dir.path());
    assert_eq!(indexes(&log), vec![79, 80]);
    assert!(!all[0].exists());
    drop(log);

    // A gap that loses entries the log still needs is refused.
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for i in 1..=80 {
        append(&log, i, i + 1, 1);
    }
    drop(log);
    let all = segments(dir.path());
    fs::remove_file(&all[kept]).unwrap();
    let error = WalLog::open_with(dir.path(), SMALL).unwrap_err();
    assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
    assert!(error.to_string().contains("in no segment"), "{error}");
}

#[test]
fn a_second_open_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _log = WalLog::open(dir.path()).unwrap();
    let error = WalLog::open(dir.path()).unwrap_err();
    assert!(matches!(error, OpenError::AlreadyOpen { .. }), "{error}");
}

/// A data directory written before the WAL, with a compacted log.
fn legacy_dir() -> (tempfile::TempDir, LogState, Vec<Entry>) {
    let dir = tempfile::tempdir().unwrap();
    let member = dir.path().join(crate::MEMBER_DIR);
    fs::create_dir_all(&member).unwrap();
    let redb = RedbLog::open(&member.join(crate::LOG_FILE)).unwrap();
    let batch: Vec<_> = (1..=2500).map(|i| entry(i, 1 + i / 1000)).collect();
    redb.append(&batch, Some(&hard_state(3, 2400))).unwrap();
    redb.compact(1200).unwrap();
    redb.store_cluster_id(0xabc).unwrap();
    let state = redb.state().unwrap();
    let entries = redb
        .entries(state.first_index, state.last_index + 1)
        .unwrap();
    drop(redb);
    (dir, state, entries)
}

#[test]
fn a_legacy_log_is_imported_once() {
    let (dir, state, entries) = legacy_dir();
    let member = dir.path().join(crate::MEMBER_DIR);
    assert_eq!((state.first_index, state.snapshot_term), (1200, 2));
    let (log, _kv) = crate::open(dir.path()).unwrap();
    assert_eq!(log.state().unwrap(), state);
    assert_eq!(log.entries(1200, 2501).unwrap(), entries);
    assert!(!member.join(crate::LOG_FILE).exists());
    append(&log, 2501, 2502, 3);
    drop((log, _kv));
    let (log, _kv) = crate::open(dir.path()).unwrap();
    assert_eq!(log.state().unwrap().last_index, 2501);
    assert_eq!(log.entries(1200, 2501).unwrap(), entries);
}

#[test]
fn an_interrupted_import_starts_over_or_finishes() {
    // Crashed while building the WAL: the staging directory is redone.
    let (dir, state, entries) = legacy_dir();
    let member = dir.path().join(crate::MEMBER_DIR);
    let staging = member.join(super::import::IMPORT_DIR);
    fs::create_dir(&staging).unwrap();
    fs::write(staging.join(segment_name(0)), b"half").unwrap();
    let (log, kv) = crate::open(dir.path()).unwrap();
    assert_eq!(log.state().unwrap(), state);
    assert!(!staging.exists());
    drop((log, kv));

    // Crashed after the WAL was in place, before log.redb went: it goes.
    let (dir, state, _) = legacy_dir();
    let member = dir.path().join(crate::MEMBER_DIR);
    let legacy = member.join(crate::LOG_FILE);
    let copy = dir.path().join("copy.redb");
    fs::copy(&legacy, &copy).unwrap();
    drop(crate::open(dir.path()).unwrap());
    fs::copy(&copy, &legacy).unwrap();
    let (log, _kv) = crate::open(dir.path()).unwrap();
    assert!(!legacy.exists());
    assert_eq!(log.state().unwrap(), state);
    assert_eq!(log.entries(1200, 2501).unwrap(), entries);
}

#[test]
fn a_newer_wal_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(WalLog::open(dir.path()).unwrap());
    let path = segments(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&path).unwrap();
    // Frame header (8), item type and length (5), magic (4), then the version.
    bytes[17..21].copy_from_slice(&2u32.to_le_bytes());
    let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    let mut crc = crate::crc32c::Crc32c::default();
    crc.update(&bytes[..4]);
    crc.update(&bytes[8..8 + len]);
    bytes[4..8].copy_from_slice(&crc.sum().to_le_bytes());
    fs::write(&path, &bytes).unwrap();
    let error = WalLog::open(dir.path()).unwrap_err();
    assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
    assert!(
        error.to_string().contains("WAL format version 2"),
        "{error}"
    );
}

#[test]
fn a_file_cut_at_any_point_of_its_last_record_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let log = WalLog::open(dir.path()).unwrap();
    for i in 1..=3 {
        append(&log, i, i + 1, 1);
    }
    drop(log);
    let path = segments(dir.path()).pop().unwrap();
    let saved = fs::read(&path).unwrap();
    let offsets = frame_offsets(&path);
    let (last, end) = (offsets[offsets.len() - 2], offsets[offsets.len() - 1]);
    for cut in [end - 1, end - 4, last + 9, last + 1, last] {
        fs::write(&path, &saved[..cut]).unwrap();
        let log = WalLog::open(dir.path()).unwrap();
        assert_eq!(indexes(&log), vec![1, 2], "cut at {cut}");
    }
}

/// An append of entries with less than the reserve free is refused as a
/// full disk and changes nothing; a hard state alone still passes, and the
/// same append succeeds once the reserve is met.
#[test]
fn an_append_below_the_reserve_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    append(&open(dir.path()), 1, 4, 1);
    let tight = WalOptions {
        reserve_bytes: u64::MAX / 2,
        ..SMALL
    };
    let log = WalLog::open_with(dir.path(), tight).unwrap();
    let batch: Vec<_> = (4..6).map(|i| entry(i, 1)).collect();
    let refused = log.append(&batch, None).unwrap_err();
    assert!(
        matches!(refused, oxetcd_core::storage::StorageError::DiskFull { .. }),
        "{refused:?}"
    );
    assert_eq!(indexes(&log), [1, 2, 3]);
    log.append(&[], Some(&hard_state(2, 3))).unwrap();
    drop(log);
    let log = open(dir.path());
    assert_eq!(log.state().unwrap().hard_state, hard_state(2, 3));
    log.append(&batch, None).unwrap();
    drop(log);
    assert_eq!(indexes(&open(dir.path())), [1, 2, 3, 4, 5]);
}

/// A small tmpfs mounted on a temp dir, unmounted on drop. Needs root.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let id = std::process::Command::new("id")
            .arg("-u")
            .output()
            .expect("running id -u");
        assert_eq!(
            String::from_utf8_lossy(&id.stdout).trim(),
            "0",
            "this test mounts a small tmpfs to fill: run it as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
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
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the file system holding `dir` with `dir/filler` until a write
/// fails for space; panics if it never does.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = fs::File::create(&path).unwrap();
    let chunk = vec![1u8; 4096];
    // Bounded: the file systems these tests fill hold a few MiB.
    for _ in 0..1_000_000 {
        if let Err(e) = file.write_all(&chunk).and_then(|()| file.sync_all()) {
            assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
            return path;
        }
    }
    panic!("{} never filled", dir.display());
}

/// A next segment that cannot be made for want of space fails the append
/// as a full disk, leaves no spare behind and the log as it was; once
/// space returns the same append goes through, and all of it reopens.
#[test]
fn a_segment_not_made_for_space_leaves_the_log_usable() {
    let fs = Tmpfs::mount("1m");
    let options = WalOptions {
        segment_bytes: 256 * 1024,
        reserve_bytes: 0,
    };
    let log = WalLog::open_with(fs.path(), options).unwrap();
    let filler = fill(fs.path());
    // Fill the first segment: the spare cannot be made in the background
    // either, so the rotation makes it in line and fails.
    let mut next = 1;
    let refused = loop {
        assert!(next < 10_000, "the segment never filled");
        let batch: Vec<_> = (next..next + 16).map(|i| entry(i, 1)).collect();
        match log.append(&batch, None) {
            Ok(()) => next += 16,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(refused, oxetcd_core::storage::StorageError::DiskFull { .. }),
        "{refused:?}"
    );
    assert!(!fs.path().join(SPARE_FILE).exists(), "the spare is removed");
    assert_eq!(segments(fs.path()).len(), 1);
    assert_eq!(log.state().unwrap().last_index, next - 1);

    fs::remove_file(filler).unwrap();
    let batch: Vec<_> = (next..next + 16).map(|i| entry(i, 1)).collect();
    log.append(&batch, None).unwrap();
    assert_eq!(segments(fs.path()).len(), 2);
    drop(log);
    let log = WalLog::open_with(fs.path(), options).unwrap();
    assert_eq!(indexes(&log), (1..next + 16).collect::<Vec<_>>());
}
