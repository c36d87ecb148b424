//! Why a data directory could not be opened, and how redb's errors become
//! core's [`StorageError`].

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use oxetcd_core::storage::{Cause, StorageError};

/// Why [`crate::open`] could not open a data directory. Each variant names
/// the path at fault.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenError {
    /// Something other than a directory is where a directory must be.
    NotADirectory {
        /// The offending path.
        path: PathBuf,
    },
    /// The process may not read or write the path.
    PermissionDenied {
        /// The offending path.
        path: PathBuf,
    },
    /// Another process (or another handle in this one) has the database open.
    AlreadyOpen {
        /// The database file.
        path: PathBuf,
    },
    /// The file is not a database this crate wrote, or it is damaged.
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The database was written by a newer storage format than this build
    /// understands; opening it could lose data.
    NewerFormat {
        /// The database file.
        path: PathBuf,
        /// The format version in the file.
        found: u64,
        /// The newest format version this build reads.
        supported: u64,
    },
    /// The database was written by an older storage format that this build
    /// cannot migrate from (no such data was ever deployed).
    OlderFormat {
        /// The database file.
        path: PathBuf,
        /// The format version in the file.
        found: u64,
        /// The format version this build reads.
        supported: u64,
    },
    /// Any other I/O error.
    Io {
        /// The path being opened.
        path: PathBuf,
        /// The error from the operating system.
        error: io::Error,
    },
}

impl OpenError {
    pub(crate) fn from_io(path: &Path, error: io::Error) -> Self {
        let path = path.to_path_buf();
        match error.kind() {
            io::ErrorKind::PermissionDenied => Self::PermissionDenied { path },
            io::ErrorKind::NotADirectory => Self::NotADirectory { path },
            _ => Self::Io { path, error },
        }
    }

    pub(crate) fn from_redb(path: &Path, error: redb::DatabaseError) -> Self {
        match error {
            redb::DatabaseError::DatabaseAlreadyOpen => Self::AlreadyOpen {
                path: path.to_path_buf(),
            },
            redb::DatabaseError::Storage(error) => Self::from_redb_storage(path, error),
            redb::DatabaseError::UpgradeRequired(version) => Self::Corrupt {
                path: path.to_path_buf(),
                detail: format!("redb file format {version} is not supported"),
            },
            other => Self::Corrupt {
                path: path.to_path_buf(),
                detail: other.to_string(),
            },
        }
    }

    pub(crate) fn from_redb_storage(path: &Path, error: redb::StorageError) -> Self {
        match error {
            redb::StorageError::Io(error) => match error.kind() {
                // redb reports a file it cannot parse as invalid data.
                io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof => Self::Corrupt {
                    path: path.to_path_buf(),
                    detail: error.to_string(),
                },
                _ => Self::from_io(path, error),
            },
            other => Self::Corrupt {
                path: path.to_path_buf(),
                detail: other.to_string(),
            },
        }
    }

    /// Any other redb error met while checking a freshly opened database.
    pub(crate) fn other(path: &Path, error: impl Into<redb::Error>) -> Self {
        match error.into() {
            redb::Error::DatabaseAlreadyOpen => Self::AlreadyOpen {
                path: path.to_path_buf(),
            },
            redb::Error::Io(error) => Self::from_io(path, error),
            other => Self::Corrupt {
                path: path.to_path_buf(),
                detail: other.to_string(),
            },
        }
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotADirectory { path } => {
                write!(f, "{}: exists but is not a directory", path.display())
            }
            Self::PermissionDenied { path } => write!(f, "{}: permission denied", path.display()),
            Self::AlreadyOpen { path } => write!(
                f,
                "{}: database is already open (is another member running on this data directory?)",
                path.display()
            ),
            Self::Corrupt { path, detail } => write!(
                f,
                "{}: corrupt or not an oxetcd database: {detail}",
                path.display()
            ),
            Self::NewerFormat { path, found, supported } => write!(
                f,
                "{}: written by a newer storage format version ({found}); this build supports up to {supported}",
                path.display()
            ),
            Self::OlderFormat { path, found, supported } => write!(
                f,
                "{}: written by storage format version {found}, which this build (format {supported}) cannot read or migrate; remove the data directory and let the member rejoin",
                path.display()
            ),
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Turns a redb error into core's final [`StorageError`], saying what was
/// being done: `.map_err(err("kv read"))`. (A `From` impl could not say it,
/// and the orphan rule forbids one here anyway.)
pub(crate) fn err<E: Into<redb::Error>>(what: &'static str) -> impl Fn(E) -> StorageError {
    move |error| match error.into() {
        redb::Error::Io(error) => io_error(what, error),
        redb::Error::Corrupted(detail) => {
            StorageError::corrupt("database", format_args!("{what}: {detail}"))
        }
        other => StorageError::Engine {
            during: what.to_owned(),
            source: Cause::new(other),
        },
    }
}

/// Runs `read`, the storage engine reading `record`, and turns a panic of
/// the engine into a refusal of the record as damaged: redb trusts its
/// file, and some damage makes it panic rather than answer an error (the
/// open is guarded the same way, `format::refusing_panics`). Only the
/// engine's own calls go in `read`, never a caller's, whose panic is a bug
/// and not damage.
pub(crate) fn refusing_engine_panics<T>(
    record: impl fmt::Display,
    read: impl FnOnce() -> Result<T, StorageError>,
) -> Result<T, StorageError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|panic| {
        Err(StorageError::corrupt(
            record,
            format_args!(
                "the storage engine failed on it ({}; the backend file is damaged)",
                panic_message(&*panic)
            ),
        ))
    })
}

/// What a caught panic said.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("no message")
}

/// An operating system error met while doing `during`, the operating
/// system's error kept as the source. A full disk is its own variant: it is
/// the one an operator fixes without touching the data.
pub(crate) fn io_error(during: impl Into<String>, error: io::Error) -> StorageError {
    let during = during.into();
    let full = matches!(
        error.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    );
    let source = Cause::new(error);
    if full {
        StorageError::DiskFull { during, source }
    } else {
        StorageError::Io { during, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_its_own_variant() {
        let full = io_error("log append commit", io::ErrorKind::StorageFull.into());
        assert!(matches!(full, StorageError::DiskFull { .. }), "{full:?}");
        let other = io_error("log append commit", io::ErrorKind::Other.into());
        assert!(matches!(other, StorageError::Io { .. }), "{other:?}");
    }

    #[test]
    fn a_missing_file_is_its_own_variant() {
        let dir = tempfile::tempdir().expect("temp dir");
        let error = crate::log::file_size(&dir.path().join("gone.redb")).unwrap_err();
        assert!(
            matches!(error, StorageError::FileMissing { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("gone.redb"), "{error}");
    }
}
