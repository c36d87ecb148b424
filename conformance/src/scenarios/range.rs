//! Ranges: ends, prefixes, limits, history, sorting, projections, filters.

use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use oxetcd_proto::etcdserverpb::RangeRequest;

use super::{everything, expect, get, ok, op_put, prefix, put, range, sorted, txn};
use crate::scenarios::ensure;
use crate::target::Target;

/// `range_end` is exclusive; an empty end means one key; "\0" means every
/// key from `key` on; an end at or before the key selects nothing.
pub(super) fn range_end_prefix_and_from_key(t: &mut Target) -> Result<(), String> {
    for (i, key) in ["a", "ab", "abc", "b", "c"].iter().enumerate() {
        expect(
            &t.put(put(key, (i + 1).to_string())),
            &format!("rev {}", i + 2),
        )?;
    }
    let (a, ab, abc, b, c) = (
        "a=1 c2 m2 v1",
        "ab=2 c3 m3 v1",
        "abc=3 c4 m4 v1",
        "b=4 c5 m5 v1",
        "c=5 c6 m6 v1",
    );
    expect(
        &t.range(range("a", "b")),
        &format!("rev 6 count 3 [{a}, {ab}, {abc}]"),
    )?;
    expect(
        &t.range(prefix("ab")),
        &format!("rev 6 count 2 [{ab}, {abc}]"),
    )?;
    expect(&t.range(get("b")), &format!("rev 6 count 1 [{b}]"))?;
    expect(&t.range(get("zz")), "rev 6 count 0 []")?;
    expect(&t.range(range("b", "a")), "rev 6 count 0 []")?;
    expect(&t.range(range("a", "a")), "rev 6 count 0 []")?;
    expect(
        &t.range(range("ab", b"\0")),
        &format!("rev 6 count 4 [{ab}, {abc}, {b}, {c}]"),
    )?;
    expect(
        &t.range(everything()),
        &format!("rev 6 count 5 [{a}, {ab}, {abc}, {b}, {c}]"),
    )?;
    expect(
        &t.range(range("abc", "b")),
        &format!("rev 6 count 1 [{abc}]"),
    )
}

/// Keys are ordered bytewise, including bytes outside ASCII; the prefix end
/// of all-0xff bytes is "\0".
pub(super) fn binary_keys_order_bytewise(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put([0x00, 0x01], "z")), "rev 2")?;
    expect(&t.put(put("a", "y")), "rev 3")?;
    expect(&t.put(put([0xff], "x")), "rev 4")?;
    expect(&t.put(put([0xff, 0xff], "w")), "rev 5")?;
    expect(&t.put(put([0x7f, 0x80], [0x00, 0xfe])), "rev 6")?;
    expect(
        &t.range(everything()),
        "rev 6 count 5 [\\x00\\x01=z c2 m2 v1, a=y c3 m3 v1, \\x7f\\x80=\\x00\\xfe c6 m6 v1, \
         \\xff=x c4 m4 v1, \\xff\\xff=w c5 m5 v1]",
    )?;
    expect(
        &t.range(prefix([0xff])),
        "rev 6 count 2 [\\xff=x c4 m4 v1, \\xff\\xff=w c5 m5 v1]",
    )?;
    expect(&t.range(get([0xff])), "rev 6 count 1 [\\xff=x c4 m4 v1]")?;
    expect(&t.range(get([0x00])), "rev 6 count 0 []")
}

/// `limit` cuts the answer, `more` says keys were left out, `count` is the
/// number of keys in the range.
pub(super) fn limit_more_and_count(t: &mut Target) -> Result<(), String> {
    for i in 1..=5 {
        expect(
            &t.put(put(format!("k{i}"), format!("v{i}"))),
            &format!("rev {}", i + 1),
        )?;
    }
    let kv = |i: i64| format!("k{i}=v{i} c{} m{} v1", i + 1, i + 1);
    let limited = |limit: i64| RangeRequest {
        limit,
        ..prefix("k")
    };
    expect(
        &t.range(limited(2)),
        &format!("rev 6 count 5 more [{}, {}]", kv(1), kv(2)),
    )?;
    expect(
        &t.range(limited(4)),
        &format!(
            "rev 6 count 5 more [{}, {}, {}, {}]",
            kv(1),
            kv(2),
            kv(3),
            kv(4)
        ),
    )?;
    let all = format!("[{}, {}, {}, {}, {}]", kv(1), kv(2), kv(3), kv(4), kv(5));
    expect(&t.range(limited(5)), &format!("rev 6 count 5 {all}"))?;
    expect(&t.range(limited(6)), &format!("rev 6 count 5 {all}"))?;
    expect(&t.range(limited(0)), &format!("rev 6 count 5 {all}"))?;
    let descending = sorted(limited(2), SortTarget::Key, SortOrder::Descend);
    expect(
        &t.range(descending),
        &format!("rev 6 count 5 more [{}, {}]", kv(5), kv(4)),
    )?;
    let historical = RangeRequest {
        revision: 4,
        ..limited(2)
    };
    expect(
        &t.range(historical),
        &format!("rev 6 count 3 more [{}, {}]", kv(1), kv(2)),
    )?;
    let inner = RangeRequest {
        limit: 1,
        ..range("k2", "k4")
    };
    expect(&t.range(inner), &format!("rev 6 count 2 more [{}]", kv(2)))
}

/// `revision` reads the store as of that revision; the header still carries
/// the current revision; `<= 0` means latest; later than current is an
/// error.
pub(super) fn historical_revisions(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.put(put("a", "2")), "rev 3")?;
    expect(&t.put(put("b", "1")), "rev 4")?;
    expect(&t.delete_range(super::del("a")), "rev 5 deleted 1")?;
    let at = |revision: i64| RangeRequest {
        revision,
        ..range("a", "c")
    };
    expect(&t.range(at(1)), "rev 5 count 0 []")?;
    expect(&t.range(at(2)), "rev 5 count 1 [a=1 c2 m2 v1]")?;
    expect(&t.range(at(3)), "rev 5 count 1 [a=2 c2 m3 v2]")?;
    expect(
        &t.range(at(4)),
        "rev 5 count 2 [a=2 c2 m3 v2, b=1 c4 m4 v1]",
    )?;
    expect(&t.range(at(5)), "rev 5 count 1 [b=1 c4 m4 v1]")?;
    expect(&t.range(at(0)), "rev 5 count 1 [b=1 c4 m4 v1]")?;
    expect(&t.range(at(-1)), "rev 5 count 1 [b=1 c4 m4 v1]")?;
    let future = "error 11 etcdserver: mvcc: required revision is a future revision";
    expect(&t.range(at(6)), future)?;
    expect(&t.range(at(100)), future)?;
    expect(&t.put(put("a", "3")), "rev 6")?;
    expect(
        &t.range(at(6)),
        "rev 6 count 2 [a=3 c6 m6 v1, b=1 c4 m4 v1]",
    )?;
    expect(&t.range(at(3)), "rev 6 count 1 [a=2 c2 m3 v2]")
}

/// Three keys whose key, version, create, mod and value orders all differ:
///
/// ```text
/// a=f c4 m7 v2     version: c a b    create: b c a
/// b=h c2 m6 v3     mod:     c b a    value:  a c b
/// c=g c3 m3 v1
/// ```
fn sort_fixture(t: &mut Target) -> Result<(), String> {
    for (i, (key, value)) in [
        ("b", "x"),
        ("c", "g"),
        ("a", "x"),
        ("b", "x"),
        ("b", "h"),
        ("a", "f"),
    ]
    .iter()
    .enumerate()
    {
        expect(&t.put(put(key, value)), &format!("rev {}", i + 2))?;
    }
    Ok(())
}

const A: &str = "a=f c4 m7 v2";
const B: &str = "b=h c2 m6 v3";
const C: &str = "c=g c3 m3 v1";

/// Every sort target in every order; NONE sorts by key for KEY and
/// ascending for any other target; sorting happens before the limit.
pub(super) fn sort_orders_and_targets(t: &mut Target) -> Result<(), String> {
    sort_fixture(t)?;
    use SortOrder::{Ascend, Descend, None};
    use SortTarget::{Create, Key, Mod, Value, Version};
    let cases = [
        (Key, None, [A, B, C]),
        (Key, Ascend, [A, B, C]),
        (Key, Descend, [C, B, A]),
        (Version, None, [C, A, B]),
        (Version, Ascend, [C, A, B]),
        (Version, Descend, [B, A, C]),
        (Create, None, [B, C, A]),
        (Create, Ascend, [B, C, A]),
        (Create, Descend, [A, C, B]),
        (Mod, None, [C, B, A]),
        (Mod, Ascend, [C, B, A]),
        (Mod, Descend, [A, B, C]),
        (Value, None, [A, C, B]),
        (Value, Ascend, [A, C, B]),
        (Value, Descend, [B, C, A]),
    ];
    for (target, order, [x, y, z]) in cases {
        let request = sorted(everything(), target, order);
        expect(&t.range(request), &format!("rev 7 count 3 [{x}, {y}, {z}]"))
            .map_err(|e| format!("sort {target:?} {order:?}: {e}"))?;
    }
    let limited = RangeRequest {
        limit: 2,
        ..sorted(everything(), Mod, Descend)
    };
    expect(&t.range(limited), &format!("rev 7 count 3 more [{A}, {B}]"))?;
    let limited = RangeRequest {
        limit: 1,
        ..sorted(everything(), Create, Ascend)
    };
    expect(&t.range(limited), &format!("rev 7 count 3 more [{B}]"))
}

/// keys_only drops values (after sorting by value); count_only drops every
/// key-value but keeps the count.
pub(super) fn keys_only_and_count_only(t: &mut Target) -> Result<(), String> {
    sort_fixture(t)?;
    let keys_only = |request: RangeRequest| RangeRequest {
        keys_only: true,
        ..request
    };
    let count_only = |request: RangeRequest| RangeRequest {
        count_only: true,
        ..request
    };
    let (a, b, c) = ("a= c4 m7 v2", "b= c2 m6 v3", "c= c3 m3 v1");
    expect(
        &t.range(keys_only(everything())),
        &format!("rev 7 count 3 [{a}, {b}, {c}]"),
    )?;
    expect(
        &t.range(keys_only(sorted(
            everything(),
            SortTarget::Value,
            SortOrder::Descend,
        ))),
        &format!("rev 7 count 3 [{b}, {c}, {a}]"),
    )?;
    let limited = RangeRequest {
        limit: 1,
        ..keys_only(everything())
    };
    expect(&t.range(limited), &format!("rev 7 count 3 more [{a}]"))?;
    expect(&t.range(count_only(everything())), "rev 7 count 3 []")?;
    expect(&t.range(count_only(prefix("b"))), "rev 7 count 1 []")?;
    expect(&t.range(count_only(get("zz"))), "rev 7 count 0 []")?;
    let limited = RangeRequest {
        limit: 1,
        ..count_only(everything())
    };
    expect(&t.range(limited), "rev 7 count 3 []")?;
    let historical = RangeRequest {
        revision: 3,
        ..count_only(everything())
    };
    expect(&t.range(historical), "rev 7 count 2 []")
}

/// min/max mod/create revision filters apply before the limit; `count` is
/// the number of keys in the range before filtering.
pub(super) fn mod_and_create_revision_filters(t: &mut Target) -> Result<(), String> {
    sort_fixture(t)?;
    let filtered = |min_mod, max_mod, min_create, max_create| RangeRequest {
        min_mod_revision: min_mod,
        max_mod_revision: max_mod,
        min_create_revision: min_create,
        max_create_revision: max_create,
        ..everything()
    };
    expect(
        &t.range(filtered(6, 0, 0, 0)),
        &format!("rev 7 count 3 [{A}, {B}]"),
    )?;
    expect(
        &t.range(filtered(0, 6, 0, 0)),
        &format!("rev 7 count 3 [{B}, {C}]"),
    )?;
    expect(
        &t.range(filtered(0, 0, 3, 0)),
        &format!("rev 7 count 3 [{A}, {C}]"),
    )?;
    expect(
        &t.range(filtered(0, 0, 0, 3)),
        &format!("rev 7 count 3 [{B}, {C}]"),
    )?;
    expect(
        &t.range(filtered(4, 6, 0, 0)),
        &format!("rev 7 count 3 [{B}]"),
    )?;
    expect(
        &t.range(filtered(0, 0, 3, 3)),
        &format!("rev 7 count 3 [{C}]"),
    )?;
    expect(
        &t.range(filtered(3, 7, 2, 4)),
        &format!("rev 7 count 3 [{A}, {B}, {C}]"),
    )?;
    expect(&t.range(filtered(100, 0, 0, 0)), "rev 7 count 3 []")?;
    let limited = RangeRequest {
        limit: 1,
        ..filtered(6, 0, 0, 0)
    };
    expect(&t.range(limited), &format!("rev 7 count 3 more [{A}]"))?;
    let descending = sorted(filtered(6, 0, 0, 0), SortTarget::Key, SortOrder::Descend);
    expect(&t.range(descending), &format!("rev 7 count 3 [{B}, {A}]"))?;
    let count_only = RangeRequest {
        count_only: true,
        ..filtered(6, 0, 0, 0)
    };
    expect(&t.range(count_only), "rev 7 count 3 []")
}

/// Five hundred keys written out of order in five txns come back in key
/// order, each at its txn's revision.
pub(super) fn many_keys_in_order(t: &mut Target) -> Result<(), String> {
    const KEYS: usize = 500;
    const PER_TXN: usize = 100;
    for batch in 0..KEYS / PER_TXN {
        let ops = (0..PER_TXN)
            .map(|j| {
                let i = (batch * PER_TXN + j) * 37 % KEYS;
                op_put(put(format!("key-{i:04}"), format!("value-{batch}")))
            })
            .collect();
        let answer = ok(t.txn(txn(vec![], ops, vec![])))?;
        ensure(
            answer.succeeded && answer.responses.len() == PER_TXN,
            || format!("txn {batch}: {answer:?}"),
        )?;
    }
    let all = ok(t.range(prefix("key-")))?;
    ensure(
        all.count == KEYS as i64 && all.kvs.len() == KEYS && !all.more,
        || {
            format!(
                "count {} kvs {} more {}",
                all.count,
                all.kvs.len(),
                all.more
            )
        },
    )?;
    for (i, kv) in all.kvs.iter().enumerate() {
        let batch = (0..KEYS / PER_TXN)
            .find(|b| (b * PER_TXN..(b + 1) * PER_TXN).any(|n| n * 37 % KEYS == i))
            .unwrap_or(usize::MAX);
        let expected = format!("key-{i:04}=value-{batch} c{r} m{r} v1", r = batch + 2);
        ensure(super::render::kv(kv) == expected, || {
            format!(
                "kvs[{i}]: expected {expected}, got {}",
                super::render::kv(kv)
            )
        })?;
    }
    let page = RangeRequest {
        limit: 3,
        ..range("key-0100", "key-0200")
    };
    let shown = ok(t.range(page))?;
    ensure(
        shown.count == 100 && shown.more && shown.kvs.len() == 3,
        || {
            format!(
                "page: count {} more {} kvs {}",
                shown.count,
                shown.more,
                shown.kvs.len()
            )
        },
    )?;
    expect(
        &t.range(RangeRequest {
            count_only: true,
            ..get("key-0499")
        }),
        "rev 6 count 1 []",
    )
}

/// A negative limit means no limit; a limit far past the key count too.
pub(super) fn negative_and_huge_limits(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.put(put("b", "2")), "rev 3")?;
    let all = "rev 3 count 2 [a=1 c2 m2 v1, b=2 c3 m3 v1]";
    for limit in [-1, -100, 3, i64::MAX] {
        expect(
            &t.range(RangeRequest {
                limit,
                ..everything()
            }),
            all,
        )
        .map_err(|e| format!("limit {limit}: {e}"))?;
    }
    expect(
        &t.range(RangeRequest {
            limit: 1,
            ..sorted(everything(), SortTarget::Value, SortOrder::Descend)
        }),
        "rev 3 count 2 more [b=2 c3 m3 v1]",
    )
}
