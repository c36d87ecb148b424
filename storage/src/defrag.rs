//! Offline defragmentation of a stopped member's data directory
//! (`oxetcdctl defrag --data-dir`): the backend is opened (its format
//! checked as at any open) and compacted by redb, which moves pages down and
//! truncates the file, so space freed by compactions and deletions goes
//! back to the file system. The raft log's WAL needs none: compaction
//! removes its segments whole.
//!
//! A member that runs holds both files; the open then fails with
//! [`OpenError::AlreadyOpen`] at once rather than waiting for it to stop.

use std::path::{Path, PathBuf};

use redb::Database;

use crate::format::open_database;
use crate::{OpenError, KV_FILE, MEMBER_DIR};

/// redb compacts in passes and says whether a pass moved anything; a few
/// passes reach the fixed point, this many bound a file that never does.
pub(crate) const COMPACT_PASSES_MAX: usize = 16;

/// One database's size before and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Defragmented {
    /// The database file.
    pub path: PathBuf,
    /// Its size before, in bytes.
    pub before_bytes: u64,
    /// Its size after, in bytes.
    pub after_bytes: u64,
}

/// Compacts the backend of the data directory `data_dir`, which no member
/// may be running on. The file must exist: a directory without it is not a
/// member's data directory, and nothing is created.
pub fn defragment(data_dir: &Path) -> Result<Vec<Defragmented>, OpenError> {
    let member = data_dir.join(MEMBER_DIR);
    let files = [(KV_FILE, crate::kv::CONTENTS)];
    for (file, _) in files {
        let path = member.join(file);
        if !path.is_file() {
            return Err(OpenError::Io {
                path,
                error: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such database (is this an oxetcd data directory?)",
                ),
            });
        }
    }
    let mut report = Vec::with_capacity(files.len());
    for (file, contents) in files {
        let path = member.join(file);
        let before_bytes = size(&path)?;
        let mut db: Database = open_database(&path, contents, |_| Ok(()))?;
        for _ in 0..COMPACT_PASSES_MAX {
            let moved = db.compact().map_err(|e| OpenError::Corrupt {
                path: path.clone(),
                detail: format!("compaction failed: {e}"),
            })?;
            if !moved {
                break;
            }
        }
        drop(db);
        let after_bytes = size(&path)?;
        report.push(Defragmented {
            path,
            before_bytes,
            after_bytes,
        });
    }
    Ok(report)
}

fn size(path: &Path) -> Result<u64, OpenError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| OpenError::from_io(path, e))
}

#[cfg(test)]
mod tests {
    use oxetcd_core::storage::{KeyVersion, KvRead, KvStore, KvWrite, Revision};

    use super::*;

    /// Writes a thousand 4 KiB values, then removes them all.
    fn fill_and_empty(kv: &crate::RedbKv) {
        let value = vec![7u8; 4096];
        let mut w = kv.write().unwrap();
        for main in 2..1002 {
            w.put_version(&KeyVersion {
                key: format!("k{main}").into_bytes(),
                mod_revision: Revision { main, sub: 0 },
                create_revision: main,
                version: 1,
                lease: 0,
                value: value.clone(),
                tombstone: false,
            })
            .unwrap();
        }
        w.commit().unwrap();
        kv.sync().unwrap();
        let mut w = kv.write().unwrap();
        for main in 2..1002 {
            w.remove_version(format!("k{main}").as_bytes(), Revision { main, sub: 0 })
                .unwrap();
        }
        w.commit().unwrap();
        kv.sync().unwrap();
    }

    #[test]
    fn a_backend_shrinks_after_its_data_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (_, kv) = crate::open(dir.path()).unwrap();
            fill_and_empty(&kv);
        }
        let report = defragment(dir.path()).unwrap();
        let kv = &report[0];
        assert!(kv.path.ends_with("member/kv.redb"));
        assert!(
            kv.after_bytes < kv.before_bytes / 2,
            "{} -> {}",
            kv.before_bytes,
            kv.after_bytes
        );
        crate::open(dir.path()).unwrap();
    }

    /// Online, through the store a running member holds: the file shrinks,
    /// and what the store holds reads the same before and after.
    #[test]
    fn a_running_backend_shrinks_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let (_, kv) = crate::open(dir.path()).unwrap();
        fill_and_empty(&kv);
        let before = kv.size_bytes().unwrap();
        let meta = kv.read().unwrap().meta().unwrap();
        let view = kv.read().unwrap();
        // A view held open meanwhile is waited out, not torn.
        let reader = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(view);
        });
        kv.defragment().unwrap();
        reader.join().unwrap();
        let after = kv.size_bytes().unwrap();
        assert!(after < before / 2, "{before} -> {after}");
        assert_eq!(kv.read().unwrap().meta().unwrap(), meta);
        let mut w = kv.write().unwrap();
        w.set_meta(&meta).unwrap();
        w.commit().unwrap();
    }

    #[test]
    fn a_running_member_or_a_missing_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            defragment(&dir.path().join("none")),
            Err(OpenError::Io { .. })
        ));
        let _open = crate::open(dir.path()).unwrap();
        assert!(matches!(
            defragment(dir.path()),
            Err(OpenError::AlreadyOpen { .. })
        ));
    }
}
