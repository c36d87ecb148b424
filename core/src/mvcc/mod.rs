//! MVCC key-value semantics, identical to etcd's, over the [`KvRead`] and
//! [`KvWrite`] interfaces.
//!
//! Pure functions: [`validate`] at the edge, [`range`] on a read view, and
//! [`apply`] for one write request inside the apply step's transaction.
//!
//! The rules, as etcd has them:
//!
//! - The store's revision starts at 1. Every write request that changes
//!   something (a put, a delete that removes a key, a txn whose branch does
//!   either) bumps the main revision by exactly one; the changes inside it
//!   are numbered by sub revision from 0. A request that changes nothing
//!   (a delete of a missing key, a read-only txn, a compaction) keeps it.
//! - A key's life is a series of generations: the first put creates it
//!   (`create_revision` = that revision, `version` = 1), each later put bumps
//!   `version`, a delete writes a tombstone and ends the generation, and the
//!   next put starts a new one.
//! - Reads at a historical revision see the newest version at or before it;
//!   revisions below the compaction point are gone (reading exactly at the
//!   compaction point is allowed).
//!
//! Headers: every response this module builds carries a header with only
//! `revision` set, the value etcd puts there; the caller fills in cluster,
//! member and term. Nested txn responses keep an all-zero header, as etcd's do.
//!
//! A meta record whose `revision` is 0 (a backend that never wrote one) is
//! read as revision 1.
//!
//! This module never panics on client input: every request shape, valid or
//! not, yields a response or an [`Error`].

mod apply;
mod buffer;
mod range;
mod txn;
mod validate;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;

use oxetcd_proto::etcdserverpb::{RangeRequest, RangeResponse, ResponseHeader};

use crate::error::Error;
use crate::storage::{KeyVersion, KvMeta, KvRead, KvWrite};
use crate::{Response, Write};

pub(crate) use range::key_value;
pub use validate::{validate, validate_range};

/// Limits enforced when a request enters the node.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Maximum operations in one txn (etcd's `--max-txn-ops`, default 128).
    pub txn_ops_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { txn_ops_max: 128 }
    }
}

/// Answers whether a lease exists, for puts that attach one.
///
/// The lease subsystem implements this; until it is wired in, [`NoLeases`]
/// makes every put with a lease fail with [`Error::LeaseNotFound`].
pub trait LeaseCheck {
    /// True when the lease `id` is granted and not yet revoked or expired.
    fn lease_exists(&self, id: i64) -> bool;
}

/// A [`LeaseCheck`] for a store with no leases at all.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoLeases;

impl LeaseCheck for NoLeases {
    fn lease_exists(&self, _id: i64) -> bool {
        false
    }
}

/// Executes a range request against a read view.
///
/// The response header carries the view's current revision (not the
/// requested historical one), as etcd's does.
pub fn range(view: &impl KvRead, request: &RangeRequest) -> Result<RangeResponse, Error> {
    let meta = view.meta()?;
    let snapshot = range::ViewSnapshot {
        view,
        current: current_revision(&meta),
        compacted: meta.compact_revision,
    };
    range::execute(&snapshot, request)
}

/// Runs an admitted range ([`crate::Output::Read`]) on a read view: the
/// answer is headed by the node's `header`, with the view's revision.
pub fn read(
    view: &impl KvRead,
    request: &RangeRequest,
    mut header: ResponseHeader,
) -> Result<RangeResponse, Error> {
    let mut response = range(view, request)?;
    header.revision = response.header.as_ref().map_or(1, |h| h.revision);
    response.header = Some(header);
    Ok(response)
}

/// Applies one request inside `txn` with no leases granted; see
/// [`apply_with_leases`].
pub fn apply(txn: &mut impl KvWrite, meta: &mut KvMeta, request: Write) -> Result<Response, Error> {
    apply_with_leases(txn, meta, request, &NoLeases)
}

/// Applies one key-space write (put, delete range, txn, compaction) inside
/// `txn`, with `leases` telling which leases exist; other writes are not
/// the key space's.
///
/// `meta` is the state the request applies to; when the request changes it
/// (`revision` after a write, `compact_revision` after a compaction), the new
/// value is written back to `meta` and stored with [`KvWrite::set_meta`].
/// A request that fails leaves `txn` and `meta` unchanged: every write is
/// buffered and reaches `txn` only once the whole request has succeeded.
/// Storage errors are the exception: they are final for the node anyway.
/// The request is taken whole: a put's key and value become the version's.
pub fn apply_with_leases(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    request: Write,
    leases: &dyn LeaseCheck,
) -> Result<Response, Error> {
    apply::apply(txn, meta, request, leases, &mut Vec::new())
}

/// As [`apply_with_leases`], and appends the versions the request wrote
/// (puts and tombstones, in sub revision order) to `changes`: what watchers
/// are told and what moves keys between leases. A failed request appends
/// nothing.
pub fn apply_recording(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    request: Write,
    leases: &dyn LeaseCheck,
    changes: &mut Vec<KeyVersion>,
) -> Result<Response, Error> {
    apply::apply(txn, meta, request, leases, changes)
}

/// The revision a store is at; a meta record never written reads as 1.
fn current_revision(meta: &KvMeta) -> i64 {
    meta.revision.max(1)
}
