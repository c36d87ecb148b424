//! Why a storage operation failed.
//!
//! [`StorageError`] has one variant per cause, so that a caller can tell a
//! full disk (free space and restart) from damaged data (restore a snapshot or
//! let the member rejoin) from a broken invariant (a bug). Every variant is
//! final for the node: one that sees one stops, and an fsync error is never
//! retried. A runtime may retry a log append that failed with
//! [`StorageError::DiskFull`] itself, without telling the node it was
//! durable: the log guarantees such a failure changed nothing.
//!
//! core names no redb or `std::fs` type, yet the implementation's own error
//! stays reachable through [`std::error::Error::source`]: it travels as a
//! [`Cause`], a type-erased error rather than its text, so a caller can still
//! downcast to an `io::Error` and read its kind. It is shared rather than
//! boxed because storage errors are cloned (the raft hands its fatal error to
//! every later call, and core's client-facing [`crate::error::Error`] is
//! `Clone`).

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// An error from a storage implementation. It is final: a node that sees one
/// stops (an fsync error is never retried).
///
/// `Display` gives the cause and its context, without a `storage:` prefix:
/// whoever reports it says it was storage.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageError {
    /// The disk, or the file system's quota, is full. Nothing on disk is
    /// damaged: freeing space recovers (a log append that failed so may
    /// be retried; see [`crate::storage::LogStore::append`]).
    DiskFull {
        /// What was being done (`"log append commit"`).
        during: String,
        /// The operating system's error.
        source: Cause,
    },
    /// The operating system failed a read, a write, a sync, or a thread the
    /// store needs.
    Io {
        /// What was being done, and on which file when there is one.
        during: String,
        /// The operating system's error.
        source: Cause,
    },
    /// A file the store needs is not there (removed under a running member).
    FileMissing {
        /// The missing file.
        path: String,
        /// The operating system's error.
        source: Cause,
    },
    /// The storage engine failed in a way that is neither I/O nor damage: a
    /// value too large, a poisoned lock, an earlier I/O error that closed the
    /// database.
    Engine {
        /// What was being done (`"kv commit"`).
        during: String,
        /// The engine's error.
        source: Cause,
    },
    /// A stored record does not decode, or the storage engine found its file
    /// damaged. Reading again reads the same bytes.
    Corrupt {
        /// The file the record was read from, once the store that read it
        /// has named it ([`StorageError::in_file`]).
        path: Option<String>,
        /// The record, with its key when it has one (`"log entry 7"`).
        record: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The log does not hold every entry of `[low, high)`.
    EntriesUnavailable {
        /// First index asked for.
        low: u64,
        /// One past the last index asked for.
        high: u64,
        /// First index stored.
        first: u64,
        /// Last index stored (`first - 1` when the log is empty).
        last: u64,
    },
    /// An append would leave a gap in the log or rewrite compacted entries.
    AppendGap {
        /// Index of the first appended entry.
        at: u64,
        /// First index stored.
        first: u64,
        /// Last index stored.
        last: u64,
    },
    /// The entries of one append do not follow each other.
    AppendNotContiguous {
        /// Index of the entry out of place.
        index: u64,
        /// Index of the entry before it.
        after: u64,
    },
    /// The in-memory key index is unusable: a writer panicked while changing
    /// it. Reopening the store rebuilds it.
    IndexPoisoned,
    /// The durable state, or what storage returned, breaks an invariant the
    /// caller relies on (a backend applied past the end of its log, an index
    /// naming a version that is not stored). A bug or damage; there is nothing
    /// to retry.
    Invariant {
        /// Which invariant, with the values that break it.
        detail: String,
    },
}

impl StorageError {
    /// A [`StorageError::Corrupt`] naming the record and what is wrong with it.
    pub fn corrupt(record: impl fmt::Display, detail: impl fmt::Display) -> Self {
        Self::Corrupt {
            path: None,
            record: record.to_string(),
            detail: detail.to_string(),
        }
    }

    /// Names the file a [`StorageError::Corrupt`] was read from, unless it
    /// names one already; any other error is returned as it is. A store
    /// calls it where it knows its file, so that an operator is told which
    /// file is damaged.
    pub fn in_file(self, file: impl fmt::Display) -> Self {
        match self {
            Self::Corrupt {
                path: None,
                record,
                detail,
            } => Self::Corrupt {
                path: Some(file.to_string()),
                record,
                detail,
            },
            other => other,
        }
    }

    /// A [`StorageError::Invariant`] saying which invariant broke.
    pub fn invariant(detail: impl fmt::Display) -> Self {
        Self::Invariant {
            detail: detail.to_string(),
        }
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DiskFull { during, source }
            | Self::Io { during, source }
            | Self::Engine { during, source } => write!(f, "{during}: {source}"),
            Self::FileMissing { path, source } => write!(f, "{path} is missing: {source}"),
            Self::Corrupt {
                path: None,
                record,
                detail,
            } => write!(f, "corrupt {record}: {detail}"),
            Self::Corrupt {
                path: Some(path),
                record,
                detail,
            } => write!(f, "{path}: corrupt {record}: {detail}"),
            Self::EntriesUnavailable {
                low,
                high,
                first,
                last,
            } if low > high => write!(
                f,
                "log entries [{low}, {high}): empty range (first index {first}, last index {last})"
            ),
            Self::EntriesUnavailable {
                low,
                high,
                first,
                last,
            } => write!(
                f,
                "log entries [{low}, {high}) not all stored: first index {first}, last index {last}"
            ),
            Self::AppendGap { at, first, last } => write!(
                f,
                "log append at {at} leaves a gap or overwrites compacted entries: \
                 first index {first}, last index {last}"
            ),
            Self::AppendNotContiguous { index, after } => {
                write!(
                    f,
                    "log append not contiguous: entry {index} follows {after}"
                )
            }
            Self::IndexPoisoned => f.write_str(
                "kv index: a writer panicked while changing it; the store must be reopened",
            ),
            Self::Invariant { detail } => f.write_str(detail),
        }
    }
}

impl Error for StorageError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::DiskFull { source, .. }
            | Self::Io { source, .. }
            | Self::FileMissing { source, .. }
            | Self::Engine { source, .. } => Some(source.error()),
            _ => None,
        }
    }
}

/// The storage implementation's own error behind a [`StorageError`] (an
/// `io::Error`, a redb error), whatever its type.
///
/// Two causes are equal when they print the same: foreign errors such as
/// `io::Error` have no equality of their own, and the types that carry a
/// [`StorageError`] (core's `Error`, the raft's actions) derive `PartialEq`
/// for their tests.
#[derive(Clone)]
pub struct Cause(Arc<dyn Error + Send + Sync>);

impl Cause {
    /// Keeps `error` as a source.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// The error itself, to downcast (`cause.error().downcast_ref::<io::Error>()`).
    pub fn error(&self) -> &(dyn Error + 'static) {
        &*self.0
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Cause {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn io_error_is_the_source() {
        let error = StorageError::Io {
            during: "log append commit".into(),
            source: Cause::new(io::Error::other("fsync failed")),
        };
        assert_eq!(error.to_string(), "log append commit: fsync failed");
        let source = error.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(source.map(io::Error::kind), Some(io::ErrorKind::Other));
    }

    #[test]
    fn a_corrupt_record_names_its_file_once_told() {
        let error = StorageError::corrupt("meta record \"kv_meta\"", "checksum mismatch");
        assert_eq!(
            error.to_string(),
            "corrupt meta record \"kv_meta\": checksum mismatch"
        );
        let named = error.in_file("member/kv.redb");
        assert_eq!(
            named.to_string(),
            "member/kv.redb: corrupt meta record \"kv_meta\": checksum mismatch"
        );
        assert_eq!(named.clone().in_file("other"), named, "named once");
        assert_eq!(
            StorageError::IndexPoisoned.in_file("kv.redb"),
            StorageError::IndexPoisoned
        );
    }

    #[test]
    fn causes_compare_by_text() {
        let a = Cause::new(io::Error::other("x"));
        assert_eq!(a, a.clone());
        assert_eq!(a, Cause::new(io::Error::other("x")));
        assert_ne!(a, Cause::new(io::Error::other("y")));
    }
}
