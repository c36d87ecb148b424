//! Puts and deletes: revisions, versions, generations and their options.

use oxetcd_proto::etcdserverpb::{DeleteRangeRequest, PutRequest, RangeRequest};

use super::{del, del_range, everything, expect, get, put, range};
use crate::target::Target;

/// A fresh store is at revision 1; every put bumps the revision once and the
/// key's version; a delete ends the generation and a re-put starts a new one.
pub(super) fn revisions_across_put_delete_reput(t: &mut Target) -> Result<(), String> {
    expect(&t.range(get("a")), "rev 1 count 0 []")?;
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.range(get("a")), "rev 2 count 1 [a=1 c2 m2 v1]")?;
    expect(&t.put(put("a", "2")), "rev 3")?;
    expect(&t.put(put("b", "x")), "rev 4")?;
    expect(&t.range(get("a")), "rev 4 count 1 [a=2 c2 m3 v2]")?;
    // The same value again is still a new version.
    expect(&t.put(put("a", "2")), "rev 5")?;
    expect(&t.range(get("a")), "rev 5 count 1 [a=2 c2 m5 v3]")?;
    expect(&t.delete_range(del("a")), "rev 6 deleted 1")?;
    expect(&t.range(get("a")), "rev 6 count 0 []")?;
    expect(&t.put(put("a", "3")), "rev 7")?;
    expect(&t.range(get("a")), "rev 7 count 1 [a=3 c7 m7 v1]")?;
    expect(&t.range(get("b")), "rev 7 count 1 [b=x c4 m4 v1]")?;
    // An empty value is a value.
    expect(&t.put(put("e", "")), "rev 8")?;
    expect(&t.range(get("e")), "rev 8 count 1 [e= c8 m8 v1]")?;
    let serializable = RangeRequest {
        serializable: true,
        ..get("a")
    };
    expect(&t.range(serializable), "rev 8 count 1 [a=3 c7 m7 v1]")
}

/// Deleting nothing is not a write: the revision stays.
pub(super) fn delete_missing_key_keeps_revision(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.delete_range(del("b")), "rev 2 deleted 0")?;
    expect(&t.delete_range(del_range("c", "d")), "rev 2 deleted 0")?;
    let with_prev = DeleteRangeRequest {
        prev_kv: true,
        ..del("b")
    };
    expect(&t.delete_range(with_prev), "rev 2 deleted 0")?;
    expect(&t.put(put("c", "1")), "rev 3")?;
    expect(&t.delete_range(del("a")), "rev 4 deleted 1")?;
    expect(&t.delete_range(del("a")), "rev 4 deleted 0")?;
    expect(&t.range(everything()), "rev 4 count 1 [c=1 c3 m3 v1]")
}

/// A range delete is one revision; prev_kv returns the deleted versions in
/// key order; history before the delete is still readable.
pub(super) fn delete_range_prev_kv_and_counts(t: &mut Target) -> Result<(), String> {
    for (i, key) in ["a", "b", "c", "d"].iter().enumerate() {
        expect(
            &t.put(put(key, (i + 1).to_string())),
            &format!("rev {}", i + 2),
        )?;
    }
    let with_prev = DeleteRangeRequest {
        prev_kv: true,
        ..del_range("b", "d")
    };
    expect(
        &t.delete_range(with_prev),
        "rev 6 deleted 2 prev [b=2 c3 m3 v1, c=3 c4 m4 v1]",
    )?;
    expect(
        &t.range(range("a", "e")),
        "rev 6 count 2 [a=1 c2 m2 v1, d=4 c5 m5 v1]",
    )?;
    let before = RangeRequest {
        revision: 5,
        ..range("a", "e")
    };
    expect(
        &t.range(before),
        "rev 6 count 4 [a=1 c2 m2 v1, b=2 c3 m3 v1, c=3 c4 m4 v1, d=4 c5 m5 v1]",
    )?;
    // From-key delete without prev_kv: a count only.
    expect(&t.delete_range(del_range("a", b"\0")), "rev 7 deleted 2")?;
    expect(&t.range(everything()), "rev 7 count 0 []")?;
    // Deleting everything again deletes nothing.
    expect(&t.delete_range(del_range(b"\0", b"\0")), "rev 7 deleted 0")
}

/// prev_kv on put returns the replaced version, nothing for a new key or a
/// key whose generation was deleted.
pub(super) fn put_prev_kv(t: &mut Target) -> Result<(), String> {
    let with_prev = |key: &str, value: &str| PutRequest {
        prev_kv: true,
        ..put(key, value)
    };
    expect(&t.put(with_prev("a", "1")), "rev 2")?;
    expect(&t.put(with_prev("a", "2")), "rev 3 prev a=1 c2 m2 v1")?;
    expect(&t.put(put("a", "3")), "rev 4")?;
    expect(&t.put(with_prev("a", "4")), "rev 5 prev a=3 c2 m4 v3")?;
    expect(&t.delete_range(del("a")), "rev 6 deleted 1")?;
    expect(&t.put(with_prev("a", "5")), "rev 7")
}

/// ignore_value keeps the value but is still a new version; it needs an
/// existing key and no value.
pub(super) fn put_ignore_value(t: &mut Target) -> Result<(), String> {
    let keep_value = |key: &str, value: &str| PutRequest {
        ignore_value: true,
        ..put(key, value)
    };
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.put(keep_value("a", "")), "rev 3")?;
    expect(&t.range(get("a")), "rev 3 count 1 [a=1 c2 m3 v2]")?;
    let with_prev = PutRequest {
        prev_kv: true,
        ..keep_value("a", "")
    };
    expect(&t.put(with_prev), "rev 4 prev a=1 c2 m3 v2")?;
    expect(
        &t.put(keep_value("missing", "")),
        "error 3 etcdserver: key not found",
    )?;
    expect(
        &t.put(keep_value("a", "x")),
        "error 3 etcdserver: value is provided",
    )?;
    expect(&t.range(get("a")), "rev 4 count 1 [a=1 c2 m4 v3]")?;
    // A deleted key is missing too.
    expect(&t.delete_range(del("a")), "rev 5 deleted 1")?;
    expect(
        &t.put(keep_value("a", "")),
        "error 3 etcdserver: key not found",
    )?;
    expect(&t.range(everything()), "rev 5 count 0 []")
}

/// ignore_lease keeps the lease; it needs an existing key and no lease.
pub(super) fn put_ignore_lease(t: &mut Target) -> Result<(), String> {
    let keep_lease = |key: &str, value: &str| PutRequest {
        ignore_lease: true,
        ..put(key, value)
    };
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.put(keep_lease("a", "2")), "rev 3")?;
    expect(&t.range(get("a")), "rev 3 count 1 [a=2 c2 m3 v2]")?;
    expect(
        &t.put(keep_lease("missing", "1")),
        "error 3 etcdserver: key not found",
    )?;
    let with_lease = PutRequest {
        lease: 7,
        ..keep_lease("a", "3")
    };
    expect(&t.put(with_lease), "error 3 etcdserver: lease is provided")?;
    let keep_both = PutRequest {
        ignore_value: true,
        ..keep_lease("a", "")
    };
    expect(&t.put(keep_both), "rev 4")?;
    expect(&t.range(get("a")), "rev 4 count 1 [a=2 c2 m4 v3]")
}

/// A put naming a lease that was never granted is refused and writes
/// nothing.
pub(super) fn put_unknown_lease(t: &mut Target) -> Result<(), String> {
    let leased = PutRequest {
        lease: 12345,
        ..put("a", "1")
    };
    expect(
        &t.put(leased),
        "error 5 etcdserver: requested lease not found",
    )?;
    expect(&t.range(get("a")), "rev 1 count 0 []")?;
    expect(&t.put(put("a", "1")), "rev 2")
}

/// Each generation of a key keeps its own history: reads at a revision see
/// the generation alive then, with its create revision and version.
pub(super) fn history_across_generations(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "g1v1")), "rev 2")?;
    expect(&t.put(put("a", "g1v2")), "rev 3")?;
    expect(&t.delete_range(del("a")), "rev 4 deleted 1")?;
    expect(&t.put(put("b", "x")), "rev 5")?;
    expect(&t.put(put("a", "g2v1")), "rev 6")?;
    expect(&t.delete_range(del("a")), "rev 7 deleted 1")?;
    expect(&t.put(put("a", "g3v1")), "rev 8")?;
    let at = |revision: i64| RangeRequest {
        revision,
        ..get("a")
    };
    expect(&t.range(at(2)), "rev 8 count 1 [a=g1v1 c2 m2 v1]")?;
    expect(&t.range(at(3)), "rev 8 count 1 [a=g1v2 c2 m3 v2]")?;
    expect(&t.range(at(4)), "rev 8 count 0 []")?;
    expect(&t.range(at(5)), "rev 8 count 0 []")?;
    expect(&t.range(at(6)), "rev 8 count 1 [a=g2v1 c6 m6 v1]")?;
    expect(&t.range(at(7)), "rev 8 count 0 []")?;
    expect(&t.range(at(8)), "rev 8 count 1 [a=g3v1 c8 m8 v1]")?;
    let prev = PutRequest {
        prev_kv: true,
        ..put("a", "g3v2")
    };
    expect(&t.put(prev), "rev 9 prev a=g3v1 c8 m8 v1")?;
    let everything_at = |revision: i64| RangeRequest {
        revision,
        ..everything()
    };
    expect(&t.range(everything_at(4)), "rev 9 count 0 []")?;
    expect(
        &t.range(everything_at(6)),
        "rev 9 count 2 [a=g2v1 c6 m6 v1, b=x c5 m5 v1]",
    )
}
