//! The raft log as a write-ahead log: segment files of a fixed,
//! preallocated size in `member/wal/`, appended to in place.
//!
//! Design. One concept per file:
//!
//! - `frame`: what one write puts on disk (length, CRC-32C, typed items).
//! - `segment`: segment files: names, zero-filled preallocation, reading
//!   one back and telling a torn tail from damage in the middle.
//! - `image`: the log the items describe, in memory, which answers reads.
//! - `store`: [`WalLog`], the `LogStore`: one write and one `fdatasync`
//!   per append, rotation, compaction, recovery at open.
//! - `import`: a `log.redb` from before the WAL, imported once.
//! - `space`: the free space kept for the backend; appends of entries
//!   are refused as a full disk below it.
//!
//! etcd's `wal` package is the model: 64 MB segments, preallocated, a
//! record header with a CRC, the log state repeated at the start of every
//! segment so that old segments can be removed whole, and a torn last
//! write cut off at open. Unlike etcd, each checksum covers one write, not
//! the whole history, so damage before valid records is found and named
//! (file and offset) rather than mistaken for the end of the log.

mod frame;
#[cfg(test)]
mod fuzz_tests;
mod image;
pub(crate) mod import;
mod segment;
mod space;
mod store;

pub use store::{WalLog, WalOptions};

#[cfg(test)]
mod tests;

/// Whether `name` is a WAL segment's file name (`%016x.wal`).
pub(crate) fn is_segment_name(name: &str) -> bool {
    segment::parse_segment_name(name).is_some()
}

/// Name of the segment being prepared, see [`segment`].
pub(crate) const SPARE_NAME: &str = segment::SPARE_FILE;
