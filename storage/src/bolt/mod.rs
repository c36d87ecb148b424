//! bolt database files: the format of etcd's backend, and so of etcd's
//! snapshots. oxetcd writes its snapshots in it (so that etcd's own tools
//! read them) and reads it (so that `snapshot status` and `snapshot
//! restore` take snapshots from etcd as well as from oxetcd).
//!
//! Design. The format is bbolt's: a file of fixed-size pages. Pages 0 and 1
//! are meta pages (the one with the higher transaction ID and a valid
//! checksum is current); the meta names the freelist page and the root
//! page of the root bucket, a B+tree whose keys are bucket names and whose
//! values are bucket headers. A bucket header names its own B+tree's root
//! page, or is followed by the bucket's single leaf page ("inline"). Branch
//! pages hold (first key of child, child page) pairs; leaf pages hold
//! key/value pairs. A node larger than a page takes that many consecutive
//! pages (its "overflow").
//!
//! - [`layout`]: the page and meta encodings, shared by both sides.
//! - [`mod@write`]: [`BoltWriter`] lays out a fresh file from sorted sources, in
//!   two passes (plan, then emit), and yields it in chunks in file order,
//!   so a snapshot never sits whole in memory.
//! - [`mod@read`]: [`BoltReader`] walks any bbolt file, etcd's included; every
//!   offset and page number is checked, so a corrupt file is an error,
//!   never a panic or an endless walk.
//! - [`etcd`]: etcd 3.4's schema (buckets, key encodings) on top of both:
//!   the image of a backend read view, its import, and `snapshot status`.

pub mod etcd;
pub mod hash;
pub mod layout;
pub mod read;
pub mod write;

pub use read::{BoltError, BoltReader, Bucket, ReadAt, Visit};
pub use write::{BoltWriter, EntrySource, VecSource};
