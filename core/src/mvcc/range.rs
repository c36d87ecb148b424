//! Range execution: key spans, historical revisions, revision filters,
//! sorting, `limit`/`more`/`count`, as etcd computes them.
//!
//! The same code answers a top-level range (on a read view) and a range
//! inside a txn (on the txn's write buffer, which sees earlier writes of the
//! same txn); [`Snapshot`] is what both provide.

use std::cmp::Ordering;
use std::ops::ControlFlow;

use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use oxetcd_proto::etcdserverpb::{RangeRequest, RangeResponse, ResponseHeader};
use oxetcd_proto::mvccpb::KeyValue;

use crate::error::Error;
use crate::storage::{KeyVersion, KvRead, RangeEnd, StorageError};

/// What a range reads from: a revision-aware key space.
pub(crate) trait Snapshot {
    /// The revision reads see when they ask for none (and the header's).
    fn current_revision(&self) -> i64;

    /// Revision up to which history is compacted (0 = none).
    fn compact_revision(&self) -> i64;

    /// As [`KvRead::scan`].
    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError>;
}

/// A plain read view with the revisions from its meta record.
pub(crate) struct ViewSnapshot<'a, R: ?Sized> {
    pub(crate) view: &'a R,
    pub(crate) current: i64,
    pub(crate) compacted: i64,
}

impl<R: KvRead + ?Sized> Snapshot for ViewSnapshot<'_, R> {
    fn current_revision(&self) -> i64 {
        self.current
    }

    fn compact_revision(&self) -> i64 {
        self.compacted
    }

    fn scan(
        &self,
        start: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
    ) -> Result<(), StorageError> {
        self.view.scan(start, end, at, visit)
    }
}

/// Runs `request` on `snapshot`.
pub(crate) fn execute(
    snapshot: &impl Snapshot,
    request: &RangeRequest,
) -> Result<RangeResponse, Error> {
    let sort_order =
        SortOrder::try_from(request.sort_order).map_err(|_| Error::InvalidSortOption)?;
    let sort_target =
        SortTarget::try_from(request.sort_target).map_err(|_| Error::InvalidSortOption)?;

    let current = snapshot.current_revision();
    let at = read_revision(current, snapshot.compact_revision(), request.revision)?;

    let has_filters = request.min_mod_revision != 0
        || request.max_mod_revision != 0
        || request.min_create_revision != 0
        || request.max_create_revision != 0;
    // etcd fetches only `limit + 1` keys (in key order) unless the raw sort
    // order or a revision filter needs them all. A sort target other than KEY
    // with order NONE still sorts, but only those first `limit + 1` keys.
    let fetch_max = if request.limit > 0 && sort_order == SortOrder::None && !has_filters {
        usize::try_from(request.limit)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
    } else {
        usize::MAX
    };

    let mut count: i64 = 0;
    let mut kvs = Vec::new();
    visit_live(
        snapshot,
        &request.key,
        &request.range_end,
        at,
        &mut |version| {
            count += 1;
            if !request.count_only && kvs.len() < fetch_max {
                kvs.push(key_value(version));
            }
            ControlFlow::Continue(())
        },
    )?;

    if request.max_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision <= request.max_mod_revision);
    }
    if request.min_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision >= request.min_mod_revision);
    }
    if request.max_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision <= request.max_create_revision);
    }
    if request.min_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision >= request.min_create_revision);
    }

    sort(&mut kvs, sort_order, sort_target);

    let mut more = false;
    if let Ok(limit) = usize::try_from(request.limit) {
        if limit > 0 && kvs.len() > limit {
            kvs.truncate(limit);
            more = true;
        }
    }
    if request.keys_only {
        for kv in &mut kvs {
            kv.value = Vec::new();
        }
    }
    Ok(RangeResponse {
        header: Some(ResponseHeader {
            revision: current,
            ..ResponseHeader::default()
        }),
        kvs,
        more,
        count,
    })
}

/// The revision a read of `requested` runs at: `<= 0` means current; later
/// than current is a future revision; before the compaction point is gone.
pub(crate) fn read_revision(current: i64, compacted: i64, requested: i64) -> Result<i64, Error> {
    if requested > current {
        return Err(Error::FutureRevision);
    }
    let at = if requested <= 0 { current } else { requested };
    if at < compacted {
        return Err(Error::Compacted);
    }
    Ok(at)
}

/// Visits the live (non-deleted) keys of a request's span at revision `at`,
/// in key order. The span follows etcd: an empty `range_end` means `key`
/// alone, `"\0"` means every key from `key` on, otherwise `[key, range_end)`.
pub(crate) fn visit_live(
    snapshot: &(impl Snapshot + ?Sized),
    key: &[u8],
    range_end: &[u8],
    at: i64,
    visit: &mut dyn FnMut(KeyVersion) -> ControlFlow<()>,
) -> Result<(), StorageError> {
    let point_end;
    let end = if range_end.is_empty() {
        point_end = [key, &[0]].concat();
        RangeEnd::Before(&point_end)
    } else if range_end == [0] {
        RangeEnd::Unbounded
    } else if range_end <= key {
        // An inverted span is empty; do not ask the backend about it.
        return Ok(());
    } else {
        RangeEnd::Before(range_end)
    };
    snapshot.scan(key, end, at, &mut |version| {
        if version.tombstone {
            ControlFlow::Continue(())
        } else {
            visit(version)
        }
    })
}

/// The wire form of a stored version.
pub(crate) fn key_value(version: KeyVersion) -> KeyValue {
    KeyValue {
        key: version.key,
        create_revision: version.create_revision,
        mod_revision: version.mod_revision.main,
        version: version.version,
        value: version.value,
        lease: version.lease,
    }
}

/// Sorts as etcd does: order NONE with a target other than KEY means
/// ascending; NONE by KEY (and ASCEND by KEY) is the natural key order.
/// Ties keep key order (the sort is stable).
fn sort(kvs: &mut [KeyValue], order: SortOrder, target: SortTarget) {
    let order = match (order, target) {
        (SortOrder::None, SortTarget::Key) | (SortOrder::Ascend, SortTarget::Key) => return,
        (SortOrder::None, _) => SortOrder::Ascend,
        (order, _) => order,
    };
    let compare = |a: &KeyValue, b: &KeyValue| -> Ordering {
        match target {
            SortTarget::Key => a.key.cmp(&b.key),
            SortTarget::Version => a.version.cmp(&b.version),
            SortTarget::Create => a.create_revision.cmp(&b.create_revision),
            SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
            SortTarget::Value => a.value.cmp(&b.value),
        }
    };
    match order {
        SortOrder::Descend => kvs.sort_by(|a, b| compare(b, a)),
        _ => kvs.sort_by(compare),
    }
}
