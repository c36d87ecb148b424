//! Opening a database file: its `meta` table records the storage format
//! version and what the file holds, and a file from a newer format, or with
//! the other database's contents, is refused before anything is written.

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition, WriteTransaction};

use crate::error::{panic_message, OpenError};

/// Every database's table of named records; each database adds its own
/// records beside the two below.
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// The storage format version this build writes and the only one it reads.
/// Bump it on any change to a table layout or record encoding, and teach
/// [`open_database`] to migrate from the previous one.
///
/// - 1: MVCC versions keyed by (user key, revision), plus a revision index.
/// - 2: MVCC versions keyed by revision, with an in-memory key index. Never
///   deployed with version 1 data, so there is no migration from it.
///
/// Record checksums (versions, module `codec`; meta records and leases,
/// module `sealed`) came within version 2 without a bump: every record
/// written before them still reads as it is, so no file needs migrating.
pub(crate) const FORMAT_VERSION: u64 = 2;

/// Meta record: the format version, a little-endian u64.
const FORMAT_VERSION_KEY: &str = "format_version";
/// Meta record: what the file holds (`raft-log` or `mvcc`), so that swapped
/// or misplaced files are refused rather than misread.
const CONTENTS_KEY: &str = "contents";

/// Opens or creates the database at `path`, checks (or, when it is new,
/// writes) its format version and contents, and lets `init` create the
/// caller's tables and default records, all in one durable transaction.
///
/// `init` must be idempotent: it runs on every open, so that tables added
/// within a format version appear in older files too.
pub(crate) fn open_database(
    path: &Path,
    contents: &'static str,
    init: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error>,
) -> Result<Database, OpenError> {
    open_built(path, contents, init, |builder| builder.create(path))
}

/// [`open_database`] on a storage backend of the tests' own (a simulated
/// disk); `path` only names it in errors.
#[cfg(test)]
pub(crate) fn open_database_on(
    backend: impl redb::StorageBackend,
    path: &Path,
    contents: &'static str,
    init: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error>,
) -> Result<Database, OpenError> {
    open_built(path, contents, init, |builder| {
        builder.create_with_backend(backend)
    })
}

/// redb's page cache for each database. Pages beyond it are read from the
/// kernel's page cache (a `pread` each), as etcd's bbolt reads through its
/// mmap, so a small cache costs reads little and keeps a member's resident
/// memory near what it holds outside the backend: after 100,000 keys of
/// 256 B, 66–72 MiB with this cache against 98–105 MiB with redb's default
/// of 1 GiB (which holds every page written), and no slower gets at 256
/// clients. redb fills a page it reads with a byte-at-a-time iterator, so
/// debug builds read large values slowly without a cache; the workspace
/// builds redb optimized in its dev profile.
const PAGE_CACHE_BYTES: usize = 8 << 20;

/// Opens the database `create` makes, then
/// checks or writes its format records and runs `init`, in one durable
/// transaction.
fn open_built(
    path: &Path,
    contents: &'static str,
    init: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error>,
    create: impl FnOnce(&redb::Builder) -> Result<Database, redb::DatabaseError>,
) -> Result<Database, OpenError> {
    let mut builder = Database::builder();
    builder.set_cache_size(PAGE_CACHE_BYTES);
    let db = create(&builder).map_err(|e| OpenError::from_redb(path, e))?;
    let txn = db.begin_write().map_err(|e| OpenError::other(path, e))?;
    let fresh = txn
        .list_tables()
        .map_err(|e| OpenError::other(path, e))?
        .next()
        .is_none();
    {
        let mut meta = txn
            .open_table(META)
            .map_err(|e| OpenError::other(path, e))?;
        if fresh {
            meta.insert(FORMAT_VERSION_KEY, FORMAT_VERSION.to_le_bytes().as_slice())
                .map_err(|e| OpenError::other(path, e))?;
            meta.insert(CONTENTS_KEY, contents.as_bytes())
                .map_err(|e| OpenError::other(path, e))?;
        } else {
            check_meta(path, contents, &meta)?;
        }
    }
    init(&txn).map_err(|e| OpenError::other(path, e))?;
    txn.commit().map_err(|e| OpenError::other(path, e))?;
    Ok(db)
}

/// Runs `open` (opening a database and reading it through), turning a
/// panic of the storage engine into a refusal naming the file: redb
/// trusts its file, and some damage makes it panic rather than answer an
/// error. A member must refuse a damaged file, not crash on it.
pub(crate) fn refusing_panics<T>(
    path: &Path,
    open: impl FnOnce() -> Result<T, OpenError>,
) -> Result<T, OpenError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)).unwrap_or_else(|panic| {
        let why = panic_message(&*panic);
        Err(OpenError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("the storage engine failed on the file's contents ({why})"),
        })
    })
}

fn check_meta(
    path: &Path,
    contents: &'static str,
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<(), OpenError> {
    let corrupt = |detail: String| OpenError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let version = meta
        .get(FORMAT_VERSION_KEY)
        .map_err(|e| OpenError::other(path, e))?
        .ok_or_else(|| corrupt("no storage format version".into()))?;
    let version = <[u8; 8]>::try_from(version.value())
        .map(u64::from_le_bytes)
        .map_err(|_| corrupt("malformed storage format version".into()))?;
    if version > FORMAT_VERSION {
        return Err(OpenError::NewerFormat {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if version < FORMAT_VERSION {
        // No data in an older format was ever deployed: nothing to migrate.
        return Err(OpenError::OlderFormat {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let found = meta
        .get(CONTENTS_KEY)
        .map_err(|e| OpenError::other(path, e))?
        .ok_or_else(|| corrupt("no contents record".into()))?;
    if found.value() != contents.as_bytes() {
        return Err(corrupt(format!(
            "holds {:?}, expected {contents:?}",
            String::from_utf8_lossy(found.value())
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Rewrites the format version of a closed database file.
    pub(crate) fn set_format_version(path: &Path, version: u64) {
        let db = Database::open(path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert(FORMAT_VERSION_KEY, version.to_le_bytes().as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
}
