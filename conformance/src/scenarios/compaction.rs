//! Compaction: what stays readable, what errors, with which code.

use oxetcd_proto::etcdserverpb::RangeRequest;

use super::{compact, del, everything, expect, get, op_range, put, txn};
use crate::target::Target;

const COMPACTED: &str = "error 11 etcdserver: mvcc: required revision has been compacted";
const FUTURE: &str = "error 11 etcdserver: mvcc: required revision is a future revision";

/// Reads before the compacted revision fail with OutOfRange, reads at it
/// succeed; compacting again at or before it fails; compacting past the
/// current revision fails; compaction writes no revision.
pub(super) fn compacted_and_future_revisions(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.put(put("a", "2")), "rev 3")?;
    expect(&t.put(put("a", "3")), "rev 4")?;
    expect(&t.put(put("b", "1")), "rev 5")?;
    let at = |revision: i64| RangeRequest {
        revision,
        ..get("a")
    };
    expect(&t.compact(compact(3)), "rev 5")?;
    expect(&t.range(at(2)), COMPACTED)?;
    expect(&t.range(at(1)), COMPACTED)?;
    expect(&t.range(at(3)), "rev 5 count 1 [a=2 c2 m3 v2]")?;
    expect(&t.range(at(4)), "rev 5 count 1 [a=3 c2 m4 v3]")?;
    expect(&t.range(get("a")), "rev 5 count 1 [a=3 c2 m4 v3]")?;
    expect(&t.compact(compact(3)), COMPACTED)?;
    expect(&t.compact(compact(2)), COMPACTED)?;
    expect(&t.compact(compact(6)), FUTURE)?;
    expect(&t.compact(compact(5)), "rev 5")?;
    expect(&t.range(at(4)), COMPACTED)?;
    expect(&t.range(at(5)), "rev 5 count 1 [a=3 c2 m4 v3]")?;
    expect(&t.range(at(6)), FUTURE)?;
    // A txn reading compacted or future history fails as a whole.
    expect(
        &t.txn(txn(vec![], vec![op_range(at(4))], vec![])),
        COMPACTED,
    )?;
    expect(&t.txn(txn(vec![], vec![op_range(at(6))], vec![])), FUTURE)?;
    expect(&t.put(put("c", "1")), "rev 6")?;
    expect(
        &t.range(RangeRequest {
            revision: 5,
            ..everything()
        }),
        "rev 6 count 2 [a=3 c2 m4 v3, b=1 c5 m5 v1]",
    )
}

/// Compacting at the current revision keeps every live key with its
/// create revision and version; deleted keys are gone for good.
pub(super) fn compaction_keeps_latest_versions(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.put(put("b", "1")), "rev 3")?;
    expect(&t.delete_range(del("b")), "rev 4 deleted 1")?;
    expect(&t.put(put("a", "2")), "rev 5")?;
    expect(&t.put(put("c", "1")), "rev 6")?;
    expect(&t.compact(compact(6)), "rev 6")?;
    expect(
        &t.range(everything()),
        "rev 6 count 2 [a=2 c2 m5 v2, c=1 c6 m6 v1]",
    )?;
    expect(
        &t.range(RangeRequest {
            revision: 6,
            ..everything()
        }),
        "rev 6 count 2 [a=2 c2 m5 v2, c=1 c6 m6 v1]",
    )?;
    expect(
        &t.range(RangeRequest {
            revision: 5,
            ..everything()
        }),
        COMPACTED,
    )?;
    expect(&t.put(put("b", "2")), "rev 7")?;
    expect(&t.range(get("b")), "rev 7 count 1 [b=2 c7 m7 v1]")?;
    expect(&t.put(put("a", "3")), "rev 8")?;
    expect(&t.range(get("a")), "rev 8 count 1 [a=3 c2 m8 v3]")?;
    expect(&t.compact(compact(8)), "rev 8")?;
    expect(
        &t.range(everything()),
        "rev 8 count 3 [a=3 c2 m8 v3, b=2 c7 m7 v1, c=1 c6 m6 v1]",
    )
}

/// Compacting at or below revision 1 on a fresh store, and then again.
pub(super) fn compaction_edge_revisions(t: &mut Target) -> Result<(), String> {
    // Revision 0 is still above "never compacted"; after it, 0 and below
    // count as compacted.
    expect(&t.compact(compact(0)), "rev 1")?;
    expect(&t.compact(compact(0)), COMPACTED)?;
    expect(&t.compact(compact(-1)), COMPACTED)?;
    expect(&t.compact(compact(1)), "rev 1")?;
    expect(&t.compact(compact(1)), COMPACTED)?;
    expect(&t.compact(compact(2)), FUTURE)?;
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(
        &t.range(RangeRequest {
            revision: 1,
            ..get("a")
        }),
        "rev 2 count 0 []",
    )?;
    expect(&t.compact(compact(2)), "rev 2")?;
    expect(
        &t.range(RangeRequest {
            revision: 1,
            ..get("a")
        }),
        COMPACTED,
    )?;
    expect(&t.range(get("a")), "rev 2 count 1 [a=1 c2 m2 v1]")
}
