//! Transactions: compares, branches, revisions, nesting and validation.

use oxetcd_proto::etcdserverpb::compare::CompareResult::{Equal, Greater, Less, NotEqual};
use oxetcd_proto::etcdserverpb::{Compare, DeleteRangeRequest, PutRequest, RangeRequest};

use super::{
    cmp_create, cmp_lease, cmp_mod, cmp_value, cmp_version, del, del_range, everything, expect,
    get, op_del, op_put, op_range, op_txn, over, prefix, prefix_end, put, range, txn,
};
use crate::target::Target;

/// Every compare target with every result, on an existing and a missing
/// key. A VALUE compare on a missing key is always false; other targets
/// compare a missing key as zero.
pub(super) fn compare_every_target_and_result(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "1")), "rev 2")?;
    expect(&t.put(put("a", "2")), "rev 3")?;
    expect(&t.put(put("b", "x")), "rev 4")?;
    // a: value "2", create 2, mod 3, version 2, lease 0.
    let cases: Vec<(Compare, bool)> = vec![
        (cmp_version("a", Equal, 2), true),
        (cmp_version("a", Equal, 1), false),
        (cmp_version("a", NotEqual, 1), true),
        (cmp_version("a", NotEqual, 2), false),
        (cmp_version("a", Greater, 1), true),
        (cmp_version("a", Greater, 2), false),
        (cmp_version("a", Less, 3), true),
        (cmp_version("a", Less, 2), false),
        (cmp_create("a", Equal, 2), true),
        (cmp_create("a", NotEqual, 2), false),
        (cmp_create("a", Greater, 2), false),
        (cmp_create("a", Less, 3), true),
        (cmp_mod("a", Equal, 3), true),
        (cmp_mod("a", Greater, 2), true),
        (cmp_mod("a", Less, 3), false),
        (cmp_mod("a", NotEqual, 4), true),
        (cmp_value("a", Equal, "2"), true),
        (cmp_value("a", Equal, "1"), false),
        (cmp_value("a", NotEqual, "2"), false),
        (cmp_value("a", Greater, "1"), true),
        (cmp_value("a", Less, "3"), true),
        // Bytewise, not numeric.
        (cmp_value("a", Less, "10"), false),
        (cmp_value("a", Greater, "10"), true),
        (cmp_value("a", Equal, "2x"), false),
        (cmp_lease("a", Equal, 0), true),
        (cmp_lease("a", NotEqual, 0), false),
        (cmp_lease("a", Greater, 0), false),
        (cmp_version("missing", Equal, 0), true),
        (cmp_version("missing", Greater, 0), false),
        (cmp_create("missing", Equal, 0), true),
        (cmp_mod("missing", Less, 1), true),
        (cmp_lease("missing", Equal, 0), true),
        (cmp_value("missing", Equal, ""), false),
        (cmp_value("missing", NotEqual, "x"), false),
        (cmp_value("missing", Less, "x"), false),
    ];
    for (compare, holds) in cases {
        let shown = format!("{compare:?}");
        let expected = if holds {
            "rev 4 succeeded {}"
        } else {
            "rev 4 failed {}"
        };
        expect(&t.txn(txn(vec![compare], vec![], vec![])), expected)
            .map_err(|e| format!("{shown}: {e}"))?;
    }
    // Every compare must hold.
    let both = |value: &str| vec![cmp_version("a", Equal, 2), cmp_value("b", Equal, value)];
    expect(&t.txn(txn(both("x"), vec![], vec![])), "rev 4 succeeded {}")?;
    expect(&t.txn(txn(both("y"), vec![], vec![])), "rev 4 failed {}")
}

/// A compare with `range_end` must hold for every key in the range; over no
/// keys it compares zero (and a VALUE compare fails).
pub(super) fn compare_over_a_range(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("k1", "a")), "rev 2")?;
    expect(&t.put(put("k2", "b")), "rev 3")?;
    expect(&t.put(put("k3", "c")), "rev 4")?;
    expect(&t.put(put("k2", "b")), "rev 5")?;
    let cases: Vec<(Compare, bool)> = vec![
        (over(cmp_version("k1", Greater, 0), "k4"), true),
        (over(cmp_version("k1", Equal, 1), "k4"), false),
        (over(cmp_version("k1", Equal, 1), "k2"), true),
        (over(cmp_version("k3", Equal, 1), b"\0"), true),
        (over(cmp_value("k1", NotEqual, "z"), "k4"), true),
        (over(cmp_value("k1", Equal, "a"), "k4"), false),
        (over(cmp_value("k1", Less, "d"), "k4"), true),
        (over(cmp_mod("k1", Less, 6), "k4"), true),
        (over(cmp_mod("k1", Less, 5), "k4"), false),
        (over(cmp_create("k1", Greater, 1), b"\0"), true),
        (over(cmp_create("k1", Less, 4), b"\0"), false),
        (over(cmp_version("k", Greater, 0), prefix_end(b"k")), true),
        (over(cmp_version("x", Equal, 0), "y"), true),
        (over(cmp_version("x", Greater, 0), "y"), false),
        (over(cmp_value("x", Equal, ""), "y"), false),
    ];
    for (compare, holds) in cases {
        let shown = format!("{compare:?}");
        let expected = if holds {
            "rev 5 succeeded {}"
        } else {
            "rev 5 failed {}"
        };
        expect(&t.txn(txn(vec![compare], vec![], vec![])), expected)
            .map_err(|e| format!("{shown}: {e}"))?;
    }
    Ok(())
}

/// The branch that runs is reported; a txn that writes is one revision for
/// all its writes; one that writes nothing keeps the revision.
pub(super) fn branches_and_revisions(t: &mut Target) -> Result<(), String> {
    let create_once = || {
        txn(
            vec![cmp_version("a", Equal, 0)],
            vec![
                op_put(put("a", "1")),
                op_put(PutRequest {
                    prev_kv: true,
                    ..put("b", "2")
                }),
                op_range(get("a")),
            ],
            vec![op_range(get("a"))],
        )
    };
    expect(
        &t.txn(create_once()),
        "rev 2 succeeded {put(rev 2); put(rev 2); range(rev 2 count 1 [a=1 c2 m2 v1])}",
    )?;
    expect(
        &t.range(range("a", "c")),
        "rev 2 count 2 [a=1 c2 m2 v1, b=2 c2 m2 v1]",
    )?;
    expect(
        &t.txn(create_once()),
        "rev 2 failed {range(rev 2 count 1 [a=1 c2 m2 v1])}",
    )?;
    let swap = txn(
        vec![cmp_value("a", Equal, "1")],
        vec![
            op_put(PutRequest {
                prev_kv: true,
                ..put("a", "10")
            }),
            op_del(DeleteRangeRequest {
                prev_kv: true,
                ..del("b")
            }),
        ],
        vec![],
    );
    expect(
        &t.txn(swap.clone()),
        "rev 3 succeeded {put(rev 3 prev a=1 c2 m2 v1); delete(rev 3 deleted 1 prev [b=2 c2 m2 v1])}",
    )?;
    expect(&t.txn(swap), "rev 3 failed {}")?;
    expect(&t.range(everything()), "rev 3 count 1 [a=10 c2 m3 v2]")?;
    expect(&t.txn(txn(vec![], vec![], vec![])), "rev 3 succeeded {}")?;
    // Deleting nothing inside a txn is not a write either.
    expect(
        &t.txn(txn(vec![], vec![op_del(del("missing"))], vec![])),
        "rev 3 succeeded {delete(rev 3 deleted 0)}",
    )?;
    expect(&t.put(put("c", "1")), "rev 4")?;
    // The failure branch can write too.
    let otherwise = txn(
        vec![cmp_value("c", Equal, "2")],
        vec![op_put(put("d", "no"))],
        vec![op_put(put("d", "yes")), op_range(prefix("d"))],
    );
    expect(
        &t.txn(otherwise),
        "rev 5 failed {put(rev 5); range(rev 5 count 1 [d=yes c5 m5 v1])}",
    )
}

/// Reads inside a txn see the txn's earlier writes; each op's header shows
/// the revision as of that op.
pub(super) fn reads_see_earlier_writes(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("c", "0")), "rev 2")?;
    let ops = vec![
        op_range(get("c")),
        op_put(put("a", "1")),
        op_range(get("a")),
        op_put(put("b", "1")),
        op_range(range("a", "c")),
        op_del(DeleteRangeRequest {
            prev_kv: true,
            ..del("c")
        }),
        op_range(get("c")),
        op_range(everything()),
        op_range(RangeRequest {
            revision: 2,
            ..everything()
        }),
    ];
    expect(
        &t.txn(txn(vec![], ops, vec![])),
        "rev 3 succeeded {range(rev 2 count 1 [c=0 c2 m2 v1]); put(rev 3); \
         range(rev 3 count 1 [a=1 c3 m3 v1]); put(rev 3); \
         range(rev 3 count 2 [a=1 c3 m3 v1, b=1 c3 m3 v1]); \
         delete(rev 3 deleted 1 prev [c=0 c2 m2 v1]); range(rev 3 count 0 []); \
         range(rev 3 count 2 [a=1 c3 m3 v1, b=1 c3 m3 v1]); \
         range(rev 3 count 1 [c=0 c2 m2 v1])}",
    )?;
    expect(
        &t.range(RangeRequest {
            revision: 2,
            ..get("c")
        }),
        "rev 3 count 1 [c=0 c2 m2 v1]",
    )?;
    expect(&t.range(get("c")), "rev 3 count 0 []")?;
    let again = vec![op_put(put("a", "2")), op_range(get("a"))];
    expect(
        &t.txn(txn(vec![], again, vec![])),
        "rev 4 succeeded {put(rev 4); range(rev 4 count 1 [a=2 c3 m4 v2])}",
    )
}

/// A txn op may itself be a txn; nested compares see the store as it was
/// before the outer txn, and nested headers carry revision 0.
pub(super) fn nested_txns(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "1")), "rev 2")?;
    let inner = txn(
        vec![cmp_value("a", Equal, "1")],
        vec![op_put(put("b", "1"))],
        vec![op_put(put("b", "0"))],
    );
    let outer = txn(
        vec![cmp_version("a", Equal, 1)],
        vec![op_txn(inner), op_range(get("b"))],
        vec![op_put(put("c", "1"))],
    );
    expect(
        &t.txn(outer),
        "rev 3 succeeded {txn(rev 0 succeeded {put(rev 3)}); range(rev 3 count 1 [b=1 c3 m3 v1])}",
    )?;
    let inner = txn(
        vec![cmp_value("a", Equal, "2")],
        vec![op_put(put("b", "2"))],
        vec![op_put(put("c", "1")), op_range(get("c"))],
    );
    let outer = txn(
        vec![cmp_version("a", Equal, 1)],
        vec![op_txn(inner)],
        vec![],
    );
    expect(
        &t.txn(outer),
        "rev 4 succeeded {txn(rev 0 failed {put(rev 4); range(rev 4 count 1 [c=1 c4 m4 v1])})}",
    )?;
    // Every compare, nested ones included, is evaluated against the store as
    // it was before the txn: the put of a=9 is not seen by the inner compare.
    let inner = txn(
        vec![cmp_value("a", Equal, "1")],
        vec![op_put(put("d", "seen"))],
        vec![],
    );
    let outer = txn(vec![], vec![op_put(put("a", "9")), op_txn(inner)], vec![]);
    expect(
        &t.txn(outer),
        "rev 5 succeeded {put(rev 5); txn(rev 0 succeeded {put(rev 5)})}",
    )?;
    let deepest = txn(vec![], vec![op_put(put("e", "3"))], vec![]);
    let middle = txn(vec![], vec![op_txn(deepest)], vec![]);
    let outer = txn(vec![], vec![op_txn(middle)], vec![]);
    expect(
        &t.txn(outer),
        "rev 6 succeeded {txn(rev 0 succeeded {txn(rev 0 succeeded {put(rev 6)})})}",
    )?;
    expect(
        &t.range(everything()),
        "rev 6 count 5 [a=9 c2 m5 v2, b=1 c3 m3 v1, c=1 c4 m4 v1, d=seen c5 m5 v1, e=3 c6 m6 v1]",
    )
}

/// A branch may not write the same key twice (two puts, or a put inside a
/// deleted range); the other branch and reads do not count.
pub(super) fn duplicate_keys(t: &mut Target) -> Result<(), String> {
    let duplicate = "error 3 etcdserver: duplicate key given in txn request";
    let in_success = |ops| txn(vec![], ops, vec![]);
    expect(
        &t.txn(in_success(vec![
            op_put(put("a", "1")),
            op_put(put("a", "2")),
        ])),
        duplicate,
    )?;
    expect(
        &t.txn(in_success(vec![
            op_put(put("a", "1")),
            op_del(del_range("a", "b")),
        ])),
        duplicate,
    )?;
    expect(
        &t.txn(in_success(vec![
            op_del(del_range("a", "c")),
            op_put(put("b", "1")),
        ])),
        duplicate,
    )?;
    expect(
        &t.txn(txn(
            vec![],
            vec![op_put(put("x", "1"))],
            vec![op_put(put("a", "1")), op_put(put("a", "2"))],
        )),
        duplicate,
    )?;
    let nested = txn(vec![], vec![op_put(put("a", "2"))], vec![]);
    expect(
        &t.txn(in_success(vec![op_put(put("a", "1")), op_txn(nested)])),
        duplicate,
    )?;
    expect(&t.range(everything()), "rev 1 count 0 []")?;
    // Fine: one put per branch; a put and reads; two deletes.
    expect(
        &t.txn(txn(
            vec![],
            vec![op_put(put("a", "1"))],
            vec![op_put(put("a", "2"))],
        )),
        "rev 2 succeeded {put(rev 2)}",
    )?;
    expect(
        &t.txn(in_success(vec![op_put(put("a", "3")), op_range(get("a")), op_range(get("a"))])),
        "rev 3 succeeded {put(rev 3); range(rev 3 count 1 [a=3 c2 m3 v2]); range(rev 3 count 1 [a=3 c2 m3 v2])}",
    )?;
    expect(
        &t.txn(in_success(vec![op_del(del("a")), op_del(del("a"))])),
        "rev 4 succeeded {delete(rev 4 deleted 1); delete(rev 4 deleted 0)}",
    )
}

/// At most 128 operations per branch and 128 compares (etcd's
/// `--max-txn-ops` default).
pub(super) fn too_many_ops(t: &mut Target) -> Result<(), String> {
    let too_many = "error 3 etcdserver: too many operations in txn request";
    let puts = |n: usize| -> Vec<_> {
        (0..n)
            .map(|i| op_put(put(format!("k{i:03}"), "v")))
            .collect()
    };
    let compares = |n: usize| -> Vec<_> {
        (0..n)
            .map(|i| cmp_version(format!("k{i:03}"), Equal, 0))
            .collect()
    };
    expect(&t.txn(txn(vec![], puts(129), vec![])), too_many)?;
    expect(&t.txn(txn(vec![], vec![], puts(129))), too_many)?;
    expect(&t.txn(txn(compares(129), vec![], vec![])), too_many)?;
    expect(&t.range(everything()), "rev 1 count 0 []")?;
    let all_puts = vec!["put(rev 2)"; 128].join("; ");
    expect(
        &t.txn(txn(compares(128), puts(128), vec![])),
        &format!("rev 2 succeeded {{{all_puts}}}"),
    )?;
    expect(
        &t.range(RangeRequest {
            count_only: true,
            ..prefix("k")
        }),
        "rev 2 count 128 []",
    )?;
    expect(
        &t.range(RangeRequest {
            limit: 1,
            ..prefix("k")
        }),
        "rev 2 count 128 more [k000=v c2 m2 v1]",
    )
}

/// Ops inside a txn honour their own options: limit, sort, keys_only,
/// count_only, revision, prev_kv, ignore_value.
pub(super) fn ops_inside_honour_their_options(t: &mut Target) -> Result<(), String> {
    use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
    for (i, key) in ["k1", "k2", "k3"].iter().enumerate() {
        expect(
            &t.put(put(key, format!("v{}", 3 - i))),
            &format!("rev {}", i + 2),
        )?;
    }
    let ops = vec![
        op_range(RangeRequest {
            limit: 2,
            ..prefix("k")
        }),
        op_range(super::sorted(
            prefix("k"),
            SortTarget::Value,
            SortOrder::Ascend,
        )),
        op_range(RangeRequest {
            keys_only: true,
            ..get("k1")
        }),
        op_range(RangeRequest {
            count_only: true,
            ..prefix("k")
        }),
        op_range(RangeRequest {
            revision: 2,
            ..prefix("k")
        }),
        op_put(PutRequest {
            prev_kv: true,
            ..put("k1", "new")
        }),
        op_put(PutRequest {
            ignore_value: true,
            prev_kv: true,
            ..put("k2", "")
        }),
        op_del(DeleteRangeRequest {
            prev_kv: true,
            ..del("k3")
        }),
        op_range(prefix("k")),
    ];
    expect(
        &t.txn(txn(vec![], ops, vec![])),
        "rev 5 succeeded {range(rev 4 count 3 more [k1=v3 c2 m2 v1, k2=v2 c3 m3 v1]); \
         range(rev 4 count 3 [k3=v1 c4 m4 v1, k2=v2 c3 m3 v1, k1=v3 c2 m2 v1]); \
         range(rev 4 count 1 [k1= c2 m2 v1]); range(rev 4 count 3 []); \
         range(rev 4 count 1 [k1=v3 c2 m2 v1]); put(rev 5 prev k1=v3 c2 m2 v1); \
         put(rev 5 prev k2=v2 c3 m3 v1); delete(rev 5 deleted 1 prev [k3=v1 c4 m4 v1]); \
         range(rev 5 count 2 [k1=new c2 m5 v2, k2=v2 c3 m5 v2])}",
    )
}

/// Requests inside the branch that runs are validated like top-level ones:
/// ignore_value on a missing key and an unknown lease fail the whole txn;
/// the branch that does not run is not checked against the store.
pub(super) fn ops_inside_are_validated(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a", "1")), "rev 2")?;
    let keep_value = |key: &str| PutRequest {
        ignore_value: true,
        ..put(key, "")
    };
    expect(
        &t.txn(txn(
            vec![],
            vec![op_put(put("b", "1")), op_put(keep_value("missing"))],
            vec![],
        )),
        "error 3 etcdserver: key not found",
    )?;
    let leased = PutRequest {
        lease: 999,
        ..put("b", "1")
    };
    expect(
        &t.txn(txn(vec![], vec![op_put(leased.clone())], vec![])),
        "error 5 etcdserver: requested lease not found",
    )?;
    expect(
        &t.txn(txn(
            vec![],
            vec![op_put(put("c", "1"))],
            vec![op_put(keep_value("missing")), op_put(leased)],
        )),
        "rev 3 succeeded {put(rev 3)}",
    )?;
    expect(
        &t.txn(txn(vec![], vec![op_put(keep_value("a"))], vec![])),
        "rev 4 succeeded {put(rev 4)}",
    )?;
    expect(
        &t.range(everything()),
        "rev 4 count 2 [a=1 c2 m4 v2, c=1 c3 m3 v1]",
    )
}
