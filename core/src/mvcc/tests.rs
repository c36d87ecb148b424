//! Unit tests of the MVCC rules, one rule per test, on the in-memory backend.

use std::ops::ControlFlow;

use oxetcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use oxetcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use oxetcd_proto::etcdserverpb::request_op::Request as Op;
use oxetcd_proto::etcdserverpb::response_op::Response as OpResponse;
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse,
    RangeRequest, RangeResponse, RequestOp, ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
use oxetcd_proto::mvccpb::KeyValue;

use super::*;
use crate::memory::MemoryKv;
use crate::storage::KvStore;
use crate::Request;

/// A store and its meta, applying one request per write transaction.
struct Store {
    kv: MemoryKv,
    meta: KvMeta,
    leases: Vec<i64>,
}

impl LeaseCheck for Vec<i64> {
    fn lease_exists(&self, id: i64) -> bool {
        self.contains(&id)
    }
}

impl Store {
    fn new() -> Self {
        let kv = MemoryKv::default();
        let meta = kv.read().unwrap().meta().unwrap();
        Self {
            kv,
            meta,
            leases: Vec::new(),
        }
    }

    /// Applies and commits even on error, so tests can see that an error
    /// wrote nothing.
    fn apply(&mut self, request: Request) -> Result<Response, Error> {
        let write = request.into_write().expect("a write");
        let mut txn = self.kv.write().unwrap();
        let result = apply_with_leases(&mut txn, &mut self.meta, write, &self.leases);
        txn.commit().unwrap();
        result
    }

    fn put(&mut self, key: &str, value: &str) -> PutResponse {
        match self.apply(Request::Put(put(key, value))).unwrap() {
            Response::Put(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn delete(&mut self, key: &str, end: &str) -> DeleteRangeResponse {
        match self.apply(Request::DeleteRange(delete(key, end))).unwrap() {
            Response::DeleteRange(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn txn(&mut self, request: TxnRequest) -> Result<TxnResponse, Error> {
        self.apply(Request::Txn(request)).map(|r| match r {
            Response::Txn(r) => r,
            other => panic!("{other:?}"),
        })
    }

    fn compact(&mut self, revision: i64) -> Result<(), Error> {
        self.apply(Request::Compact(CompactionRequest {
            revision,
            physical: false,
        }))
        .map(|_| ())
    }

    fn range(&self, request: RangeRequest) -> Result<RangeResponse, Error> {
        range(&self.kv.read().unwrap(), &request)
    }

    fn get(&self, key: &str) -> Option<KeyValue> {
        self.range(get(key)).unwrap().kvs.pop()
    }

    fn keys(&self, request: RangeRequest) -> Vec<String> {
        names(&self.range(request).unwrap().kvs)
    }

    fn revision(&self) -> i64 {
        self.kv.read().unwrap().meta().unwrap().revision
    }

    /// Every stored version, as (key, main, sub, tombstone).
    fn history(&self) -> Vec<(String, i64, i64, bool)> {
        let mut out = Vec::new();
        self.kv
            .read()
            .unwrap()
            .changes(0, i64::MAX, &mut |v| {
                out.push((
                    String::from_utf8(v.key).unwrap(),
                    v.mod_revision.main,
                    v.mod_revision.sub,
                    v.tombstone,
                ));
                ControlFlow::Continue(())
            })
            .unwrap();
        out
    }
}

fn names(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8(kv.key.clone()).unwrap())
        .collect()
}

fn get(key: &str) -> RangeRequest {
    RangeRequest {
        key: key.into(),
        ..RangeRequest::default()
    }
}

fn span(key: &str, end: &str) -> RangeRequest {
    RangeRequest {
        key: key.into(),
        range_end: end.into(),
        ..RangeRequest::default()
    }
}

fn put(key: &str, value: &str) -> PutRequest {
    PutRequest {
        key: key.into(),
        value: value.into(),
        ..PutRequest::default()
    }
}

fn delete(key: &str, end: &str) -> DeleteRangeRequest {
    DeleteRangeRequest {
        key: key.into(),
        range_end: end.into(),
        prev_kv: false,
    }
}

fn op_put(key: &str, value: &str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(put(key, value))),
    }
}

fn op_delete(key: &str, end: &str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestDeleteRange(delete(key, end))),
    }
}

fn op_range(request: RangeRequest) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestRange(request)),
    }
}

fn op_txn(txn: TxnRequest) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestTxn(txn)),
    }
}

fn txn(compare: Vec<Compare>, success: Vec<RequestOp>, failure: Vec<RequestOp>) -> TxnRequest {
    TxnRequest {
        compare,
        success,
        failure,
    }
}

fn cmp(key: &str, target: CompareTarget, result: CompareResult, union: TargetUnion) -> Compare {
    Compare {
        result: result as i32,
        target: target as i32,
        key: key.into(),
        range_end: Vec::new(),
        target_union: Some(union),
    }
}

fn sorted(mut request: RangeRequest, order: SortOrder, target: SortTarget) -> RangeRequest {
    request.sort_order = order as i32;
    request.sort_target = target as i32;
    request
}

fn range_of(response: &ResponseOp) -> &RangeResponse {
    match &response.response {
        Some(OpResponse::ResponseRange(r)) => r,
        other => panic!("{other:?}"),
    }
}

fn rev(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision,
        ..ResponseHeader::default()
    })
}

// ---- revisions and generations ----

#[test]
fn fresh_store_is_at_revision_one() {
    let s = Store::new();
    let r = s.range(get("a")).unwrap();
    assert_eq!(r.header, rev(1));
    assert_eq!((r.count, r.kvs.len(), r.more), (0, 0, false));
}

#[test]
fn meta_revision_zero_reads_as_one() {
    let kv = MemoryKv::default();
    let mut meta = KvMeta::default();
    let mut w = kv.write().unwrap();
    let r = apply(&mut w, &mut meta, crate::Write::Put(put("a", "1"))).unwrap();
    assert_eq!(
        r,
        Response::Put(PutResponse {
            header: rev(2),
            prev_kv: None
        })
    );
    assert_eq!(meta.revision, 2);
}

#[test]
fn put_bumps_revision_and_sets_versions() {
    let mut s = Store::new();
    assert_eq!(s.put("a", "1").header, rev(2));
    assert_eq!(s.put("a", "2").header, rev(3));
    let kv = s.get("a").unwrap();
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version, kv.value),
        (2, 3, 2, b"2".to_vec())
    );
    assert_eq!(s.revision(), 3);
    assert_eq!(s.meta.revision, 3);
}

#[test]
fn delete_and_put_again_starts_a_new_generation() {
    let mut s = Store::new();
    s.put("a", "1");
    s.put("a", "2");
    assert_eq!(s.delete("a", "").deleted, 1);
    assert!(s.get("a").is_none());
    s.put("a", "3");
    let kv = s.get("a").unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (5, 5, 1));
}

#[test]
fn deleting_nothing_keeps_the_revision() {
    let mut s = Store::new();
    s.put("a", "1");
    let r = s.delete("b", "");
    assert_eq!((r.deleted, r.header), (0, rev(2)));
    assert_eq!(s.revision(), 2);
    assert_eq!(s.history().len(), 1);
}

#[test]
fn delete_writes_a_tombstone_seen_by_history() {
    let mut s = Store::new();
    s.put("a", "1");
    s.delete("a", "");
    assert_eq!(
        s.history(),
        vec![("a".into(), 2, 0, false), ("a".into(), 3, 0, true)]
    );
    // Reading before the delete still sees the key.
    let old = s
        .range(RangeRequest {
            revision: 2,
            ..get("a")
        })
        .unwrap();
    assert_eq!(old.kvs.len(), 1);
    assert_eq!(old.header, rev(3));
}

// ---- range ----

fn abc() -> Store {
    let mut s = Store::new();
    for (k, v) in [("a", "3"), ("b", "1"), ("c", "2"), ("d", "0")] {
        s.put(k, v);
    }
    s
}

#[test]
fn range_spans_follow_etcd() {
    let s = abc();
    assert_eq!(s.keys(get("b")), ["b"]);
    assert_eq!(s.keys(span("b", "d")), ["b", "c"]);
    assert_eq!(s.keys(span("b", "\0")), ["b", "c", "d"]);
    assert_eq!(s.keys(span("\0", "\0")), ["a", "b", "c", "d"]);
    assert!(s.keys(span("c", "b")).is_empty());
    assert!(s.keys(span("c", "c")).is_empty());
    assert!(s.keys(get("z")).is_empty());
}

#[test]
fn range_limit_sets_more_and_count_is_total() {
    let s = abc();
    let r = s
        .range(RangeRequest {
            limit: 2,
            ..span("a", "\0")
        })
        .unwrap();
    assert_eq!(
        (names(&r.kvs), r.more, r.count),
        (vec!["a".into(), "b".into()], true, 4)
    );
    let r = s
        .range(RangeRequest {
            limit: 4,
            ..span("a", "\0")
        })
        .unwrap();
    assert_eq!((r.kvs.len(), r.more, r.count), (4, false, 4));
    let r = s
        .range(RangeRequest {
            limit: -1,
            ..span("a", "\0")
        })
        .unwrap();
    assert_eq!((r.kvs.len(), r.more), (4, false));
}

#[test]
fn range_at_historical_revisions() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.put("a", "2"); // 3
    s.put("b", "1"); // 4
    let at = |rev| {
        s.range(RangeRequest {
            revision: rev,
            ..span("a", "\0")
        })
        .unwrap()
    };
    assert_eq!(at(2).kvs[0].value, b"1");
    assert_eq!(at(2).count, 1);
    assert_eq!(at(3).kvs[0].value, b"2");
    assert_eq!(at(4).count, 2);
    assert_eq!(at(0).count, 2);
    assert_eq!(at(-7).count, 2);
    assert_eq!(at(1).count, 0);
    assert_eq!(at(2).header, rev(4));
    assert_eq!(
        s.range(RangeRequest {
            revision: 5,
            ..get("a")
        }),
        Err(Error::FutureRevision)
    );
}

#[test]
fn range_at_the_compaction_point_is_allowed_below_is_not() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.put("a", "2"); // 3
    s.put("a", "3"); // 4
    s.compact(3).unwrap();
    let at = |rev| {
        s.range(RangeRequest {
            revision: rev,
            ..get("a")
        })
    };
    assert_eq!(at(3).unwrap().kvs[0].value, b"2");
    assert_eq!(at(2), Err(Error::Compacted));
    assert_eq!(at(0).unwrap().kvs[0].value, b"3");
}

#[test]
fn range_sorts() {
    let mut s = abc(); // a=3@2 b=1@3 c=2@4 d=0@5
    s.put("b", "9"); // b version 2, mod 6
    let all = || span("a", "\0");
    assert_eq!(
        s.keys(sorted(all(), SortOrder::Descend, SortTarget::Key)),
        ["d", "c", "b", "a"]
    );
    assert_eq!(
        s.keys(sorted(all(), SortOrder::Ascend, SortTarget::Key)),
        ["a", "b", "c", "d"]
    );
    assert_eq!(
        s.keys(sorted(all(), SortOrder::Ascend, SortTarget::Value)),
        ["d", "c", "a", "b"]
    );
    assert_eq!(
        s.keys(sorted(all(), SortOrder::Descend, SortTarget::Mod)),
        ["b", "d", "c", "a"]
    );
    assert_eq!(
        s.keys(sorted(all(), SortOrder::Descend, SortTarget::Create)),
        ["d", "c", "b", "a"]
    );
    // Ties (version 1) keep key order.
    assert_eq!(
        s.keys(sorted(all(), SortOrder::Descend, SortTarget::Version)),
        ["b", "a", "c", "d"]
    );
    assert_eq!(
        s.keys(sorted(all(), SortOrder::Ascend, SortTarget::Version)),
        ["a", "c", "d", "b"]
    );
}

#[test]
fn sort_order_none_with_a_target_other_than_key_ascends() {
    let s = abc();
    let r = sorted(span("a", "\0"), SortOrder::None, SortTarget::Value);
    assert_eq!(s.keys(r), ["d", "b", "c", "a"]);
}

#[test]
fn sort_order_none_with_limit_sorts_only_the_first_keys() {
    // etcd fetches limit + 1 keys in key order when the raw order is NONE,
    // then sorts those by the target: "a"=3 "b"=1 "c"=2 sorted by value.
    let s = abc();
    let r = RangeRequest {
        limit: 2,
        ..sorted(span("a", "\0"), SortOrder::None, SortTarget::Value)
    };
    let r = s.range(r).unwrap();
    assert_eq!(
        (names(&r.kvs), r.more, r.count),
        (vec!["b".into(), "c".into()], true, 4)
    );
    // With an explicit order every key is sorted first.
    let r = RangeRequest {
        limit: 2,
        ..sorted(span("a", "\0"), SortOrder::Ascend, SortTarget::Value)
    };
    assert_eq!(s.keys(r), ["d", "b"]);
}

#[test]
fn keys_only_drops_values() {
    let s = abc();
    let r = s
        .range(RangeRequest {
            keys_only: true,
            ..get("a")
        })
        .unwrap();
    assert_eq!(r.kvs[0].key, b"a");
    assert!(r.kvs[0].value.is_empty());
    assert_eq!(r.kvs[0].version, 1);
}

#[test]
fn count_only_counts_without_kvs() {
    let s = abc();
    let r = s
        .range(RangeRequest {
            count_only: true,
            limit: 1,
            ..span("a", "\0")
        })
        .unwrap();
    assert_eq!((r.kvs.len(), r.count, r.more), (0, 4, false));
}

#[test]
fn revision_filters_prune_kvs_but_not_count() {
    let s = abc(); // a@2 b@3 c@4 d@5
    let all = || span("a", "\0");
    assert_eq!(
        s.keys(RangeRequest {
            min_mod_revision: 3,
            ..all()
        }),
        ["b", "c", "d"]
    );
    assert_eq!(
        s.keys(RangeRequest {
            max_mod_revision: 3,
            ..all()
        }),
        ["a", "b"]
    );
    assert_eq!(
        s.keys(RangeRequest {
            min_create_revision: 4,
            ..all()
        }),
        ["c", "d"]
    );
    assert_eq!(
        s.keys(RangeRequest {
            max_create_revision: 4,
            ..all()
        }),
        ["a", "b", "c"]
    );
    let r = s
        .range(RangeRequest {
            min_mod_revision: 3,
            limit: 2,
            ..all()
        })
        .unwrap();
    assert_eq!(
        (names(&r.kvs), r.more, r.count),
        (vec!["b".into(), "c".into()], true, 4)
    );
    let r = s
        .range(RangeRequest {
            min_mod_revision: 4,
            limit: 2,
            ..all()
        })
        .unwrap();
    assert_eq!((r.kvs.len(), r.more, r.count), (2, false, 4));
}

#[test]
fn range_refuses_unknown_sort_values() {
    let s = abc();
    let bad = RangeRequest {
        sort_order: 9,
        ..get("a")
    };
    assert_eq!(s.range(bad), Err(Error::InvalidSortOption));
    let bad = RangeRequest {
        sort_target: 9,
        ..get("a")
    };
    assert_eq!(s.range(bad), Err(Error::InvalidSortOption));
}

// ---- put ----

#[test]
fn put_prev_kv() {
    let mut s = Store::new();
    let first = s
        .apply(Request::Put(PutRequest {
            prev_kv: true,
            ..put("a", "1")
        }))
        .unwrap();
    assert_eq!(
        first,
        Response::Put(PutResponse {
            header: rev(2),
            prev_kv: None
        })
    );
    let Response::Put(second) = s
        .apply(Request::Put(PutRequest {
            prev_kv: true,
            ..put("a", "2")
        }))
        .unwrap()
    else {
        panic!()
    };
    let prev = second.prev_kv.unwrap();
    assert_eq!((prev.value, prev.mod_revision), (b"1".to_vec(), 2));
}

#[test]
fn put_ignore_value_keeps_the_value() {
    let mut s = Store::new();
    s.put("a", "1");
    s.apply(Request::Put(PutRequest {
        ignore_value: true,
        ..put("a", "")
    }))
    .unwrap();
    let kv = s.get("a").unwrap();
    assert_eq!((kv.value, kv.version), (b"1".to_vec(), 2));
}

#[test]
fn put_ignore_value_on_a_missing_key_fails_and_writes_nothing() {
    let mut s = Store::new();
    let r = s.apply(Request::Put(PutRequest {
        ignore_value: true,
        ..put("a", "")
    }));
    assert_eq!(r, Err(Error::KeyNotFound));
    assert_eq!(Error::KeyNotFound.message(), "etcdserver: key not found");
    assert_eq!((s.revision(), s.meta.revision), (1, 1));
    assert!(s.history().is_empty());
}

#[test]
fn put_ignore_lease_keeps_the_lease() {
    let mut s = Store::new();
    s.leases.push(5);
    s.apply(Request::Put(PutRequest {
        lease: 5,
        ..put("a", "1")
    }))
    .unwrap();
    s.apply(Request::Put(PutRequest {
        ignore_lease: true,
        ..put("a", "2")
    }))
    .unwrap();
    let kv = s.get("a").unwrap();
    assert_eq!((kv.lease, kv.value), (5, b"2".to_vec()));
    // Without ignore_lease a put detaches it.
    s.put("a", "3");
    assert_eq!(s.get("a").unwrap().lease, 0);
}

#[test]
fn put_with_an_unknown_lease_fails_first() {
    let mut s = Store::new();
    let r = s.apply(Request::Put(PutRequest {
        lease: 7,
        ..put("a", "1")
    }));
    assert_eq!(r, Err(Error::LeaseNotFound));
    // The lease is checked before the key, as etcd does for a plain put.
    let mut s2 = Store::new();
    let r = s2.apply(Request::Put(PutRequest {
        lease: 7,
        ignore_value: true,
        ..put("a", "")
    }));
    assert_eq!(r, Err(Error::LeaseNotFound));
    assert_eq!(s.revision(), 1);
}

// ---- delete range ----

#[test]
fn delete_range_prev_kvs_and_count() {
    let mut s = abc();
    let r = s
        .apply(Request::DeleteRange(DeleteRangeRequest {
            prev_kv: true,
            ..delete("b", "d")
        }))
        .unwrap();
    let Response::DeleteRange(r) = r else {
        panic!()
    };
    assert_eq!(
        (r.deleted, names(&r.prev_kvs), r.header),
        (2, vec!["b".into(), "c".into()], rev(6))
    );
    assert_eq!(s.keys(span("a", "\0")), ["a", "d"]);
    // One revision for the whole delete, sub revisions per key.
    let last: Vec<_> = s.history().into_iter().filter(|h| h.1 == 6).collect();
    assert_eq!(
        last,
        vec![("b".into(), 6, 0, true), ("c".into(), 6, 1, true)]
    );
}

#[test]
fn delete_from_key_and_everything() {
    let mut s = abc();
    assert_eq!(s.delete("c", "\0").deleted, 2);
    assert_eq!(s.delete("\0", "\0").deleted, 2);
    assert!(s.keys(span("\0", "\0")).is_empty());
}

// ---- txn ----

fn branch_taken(s: &mut Store, compare: Compare) -> bool {
    s.txn(txn(vec![compare], vec![], vec![])).unwrap().succeeded
}

#[test]
fn txn_compares_every_target_and_result() {
    let mut s = Store::new();
    s.leases.push(9);
    s.put("a", "m"); // 2
    s.apply(Request::Put(PutRequest {
        lease: 9,
        ..put("a", "m")
    }))
    .unwrap(); // 3: version 2
    use CompareResult::*;
    use CompareTarget as T;
    let cases = [
        (T::Version, TargetUnion::Version(2), Equal, true),
        (T::Version, TargetUnion::Version(1), Greater, true),
        (T::Version, TargetUnion::Version(3), Less, true),
        (T::Version, TargetUnion::Version(2), NotEqual, false),
        (T::Create, TargetUnion::CreateRevision(2), Equal, true),
        (T::Create, TargetUnion::CreateRevision(2), Greater, false),
        (T::Mod, TargetUnion::ModRevision(3), Equal, true),
        (T::Mod, TargetUnion::ModRevision(4), Less, true),
        (T::Value, TargetUnion::Value(b"m".to_vec()), Equal, true),
        (T::Value, TargetUnion::Value(b"a".to_vec()), Greater, true),
        (T::Value, TargetUnion::Value(b"z".to_vec()), Less, true),
        (T::Value, TargetUnion::Value(b"m".to_vec()), NotEqual, false),
        (T::Lease, TargetUnion::Lease(9), Equal, true),
        (T::Lease, TargetUnion::Lease(0), NotEqual, true),
    ];
    for (target, union, result, expected) in cases {
        let c = cmp("a", target, result, union.clone());
        assert_eq!(
            branch_taken(&mut s, c),
            expected,
            "{target:?} {result:?} {union:?}"
        );
    }
    // Read-only txns bump nothing.
    assert_eq!(s.revision(), 3);
}

#[test]
fn txn_compare_on_a_missing_key() {
    let mut s = Store::new();
    let c = cmp(
        "x",
        CompareTarget::Create,
        CompareResult::Equal,
        TargetUnion::CreateRevision(0),
    );
    assert!(branch_taken(&mut s, c));
    let c = cmp(
        "x",
        CompareTarget::Version,
        CompareResult::Equal,
        TargetUnion::Version(0),
    );
    assert!(branch_taken(&mut s, c));
    // A missing value is not the empty value: VALUE compares always fail.
    let c = cmp(
        "x",
        CompareTarget::Value,
        CompareResult::Equal,
        TargetUnion::Value(vec![]),
    );
    assert!(!branch_taken(&mut s, c));
    let c = cmp(
        "x",
        CompareTarget::Value,
        CompareResult::NotEqual,
        TargetUnion::Value(vec![]),
    );
    assert!(!branch_taken(&mut s, c));
}

#[test]
fn txn_compare_with_range_end_checks_every_key() {
    let mut s = abc(); // a=3 b=1 c=2 d=0
    let mut c = cmp(
        "a",
        CompareTarget::Value,
        CompareResult::Greater,
        TargetUnion::Value(b"0".to_vec()),
    );
    c.range_end = b"d".to_vec();
    assert!(branch_taken(&mut s, c.clone()));
    c.range_end = b"\0".to_vec();
    assert!(!branch_taken(&mut s, c));
    let mut c = cmp(
        "x",
        CompareTarget::Version,
        CompareResult::Equal,
        TargetUnion::Version(0),
    );
    c.range_end = b"z".to_vec();
    assert!(branch_taken(&mut s, c));
}

#[test]
fn txn_compare_with_mismatched_union_compares_against_zero() {
    let mut s = Store::new();
    s.put("a", "1");
    let c = cmp(
        "a",
        CompareTarget::Version,
        CompareResult::Greater,
        TargetUnion::Value(b"zz".to_vec()),
    );
    assert!(branch_taken(&mut s, c));
    let mut c = cmp(
        "a",
        CompareTarget::Version,
        CompareResult::Greater,
        TargetUnion::Version(0),
    );
    c.target_union = None;
    assert!(branch_taken(&mut s, c));
}

#[test]
fn txn_takes_success_or_failure() {
    let mut s = Store::new();
    let guard = || {
        cmp(
            "a",
            CompareTarget::Version,
            CompareResult::Equal,
            TargetUnion::Version(0),
        )
    };
    let r = s
        .txn(txn(
            vec![guard()],
            vec![op_put("a", "s")],
            vec![op_put("a", "f")],
        ))
        .unwrap();
    assert!(r.succeeded);
    assert_eq!(s.get("a").unwrap().value, b"s");
    let r = s
        .txn(txn(
            vec![guard()],
            vec![op_put("a", "s")],
            vec![op_put("a", "f")],
        ))
        .unwrap();
    assert!(!r.succeeded);
    assert_eq!(s.get("a").unwrap().value, b"f");
    assert!(matches!(
        r.responses[0].response,
        Some(OpResponse::ResponsePut(_))
    ));
}

#[test]
fn txn_is_one_revision_with_sub_revisions() {
    let mut s = abc(); // at 5
    let r = s
        .txn(txn(
            vec![],
            vec![op_put("x", "1"), op_delete("a", "c"), op_put("y", "2")],
            vec![],
        ))
        .unwrap();
    assert_eq!(r.header, rev(6));
    assert_eq!(s.revision(), 6);
    let at6: Vec<_> = s.history().into_iter().filter(|h| h.1 == 6).collect();
    assert_eq!(
        at6,
        vec![
            ("x".into(), 6, 0, false),
            ("a".into(), 6, 1, true),
            ("b".into(), 6, 2, true),
            ("y".into(), 6, 3, false)
        ]
    );
    let Some(OpResponse::ResponsePut(p)) = &r.responses[0].response else {
        panic!()
    };
    assert_eq!(p.header, rev(6));
    let Some(OpResponse::ResponseDeleteRange(d)) = &r.responses[1].response else {
        panic!()
    };
    assert_eq!((d.deleted, d.header), (2, rev(6)));
}

#[test]
fn txn_reads_see_earlier_writes_of_the_txn() {
    let mut s = Store::new();
    s.put("a", "old"); // 2
    let r = s
        .txn(txn(
            vec![],
            vec![
                op_range(get("a")),
                op_put("a", "new"),
                op_range(get("a")),
                op_range(RangeRequest {
                    revision: 2,
                    ..get("a")
                }),
            ],
            vec![],
        ))
        .unwrap();
    let before = range_of(&r.responses[0]);
    assert_eq!(
        (before.kvs[0].value.as_slice(), before.header),
        (&b"old"[..], rev(2))
    );
    let after = range_of(&r.responses[2]);
    assert_eq!(
        (after.kvs[0].value.as_slice(), after.header),
        (&b"new"[..], rev(3))
    );
    assert_eq!((after.kvs[0].version, after.kvs[0].mod_revision), (2, 3));
    let historical = range_of(&r.responses[3]);
    assert_eq!(historical.kvs[0].value, b"old");
}

#[test]
fn txn_delete_header_is_the_old_revision_until_something_changes() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    let r = s
        .txn(txn(
            vec![],
            vec![op_delete("zz", ""), op_put("b", "1"), op_delete("zz", "")],
            vec![],
        ))
        .unwrap();
    let Some(OpResponse::ResponseDeleteRange(first)) = &r.responses[0].response else {
        panic!()
    };
    let Some(OpResponse::ResponseDeleteRange(last)) = &r.responses[2].response else {
        panic!()
    };
    assert_eq!((first.header, last.header), (rev(2), rev(3)));
}

#[test]
fn read_only_txn_keeps_the_revision() {
    let mut s = abc();
    let r = s
        .txn(txn(
            vec![],
            vec![op_range(get("a")), op_delete("zz", "")],
            vec![],
        ))
        .unwrap();
    assert_eq!(r.header, rev(5));
    assert_eq!(s.revision(), 5);
}

#[test]
fn nested_txn_compares_see_the_state_before_the_txn() {
    let mut s = Store::new();
    let missing = || {
        cmp(
            "a",
            CompareTarget::Version,
            CompareResult::Equal,
            TargetUnion::Version(0),
        )
    };
    let inner = txn(
        vec![missing()],
        vec![op_put("in", "then")],
        vec![op_put("in", "else")],
    );
    let r = s
        .txn(txn(vec![], vec![op_put("a", "1"), op_txn(inner)], vec![]))
        .unwrap();
    assert_eq!(s.get("in").unwrap().value, b"then");
    let Some(OpResponse::ResponseTxn(nested)) = &r.responses[1].response else {
        panic!()
    };
    assert!(nested.succeeded);
    // etcd leaves the nested header empty.
    assert_eq!(nested.header, Some(ResponseHeader::default()));
    assert_eq!(r.header, rev(2));
}

#[test]
fn nested_txn_ops_see_earlier_writes() {
    let mut s = Store::new();
    let inner = txn(vec![], vec![op_range(get("a"))], vec![]);
    let r = s
        .txn(txn(vec![], vec![op_put("a", "1"), op_txn(inner)], vec![]))
        .unwrap();
    let Some(OpResponse::ResponseTxn(nested)) = &r.responses[1].response else {
        panic!()
    };
    assert_eq!(range_of(&nested.responses[0]).kvs[0].value, b"1");
}

#[test]
fn txn_failing_check_writes_nothing() {
    let mut s = Store::new();
    s.put("a", "1");
    let missing = PutRequest {
        ignore_value: true,
        ..put("b", "")
    };
    let r = s.txn(txn(
        vec![],
        vec![
            op_put("x", "1"),
            RequestOp {
                request: Some(Op::RequestPut(missing)),
            },
        ],
        vec![],
    ));
    assert_eq!(r, Err(Error::KeyNotFound));
    let leased = PutRequest {
        lease: 3,
        ..put("y", "")
    };
    let r = s.txn(txn(
        vec![],
        vec![
            op_put("x", "1"),
            RequestOp {
                request: Some(Op::RequestPut(leased)),
            },
        ],
        vec![],
    ));
    assert_eq!(r, Err(Error::LeaseNotFound));
    assert_eq!((s.revision(), s.meta.revision), (2, 2));
    assert_eq!(s.history().len(), 1);
}

#[test]
fn txn_put_checks_come_before_range_checks() {
    let mut s = Store::new();
    let leased = PutRequest {
        lease: 3,
        ..put("y", "")
    };
    let r = s.txn(txn(
        vec![],
        vec![
            op_range(RangeRequest {
                revision: 99,
                ..get("a")
            }),
            RequestOp {
                request: Some(Op::RequestPut(leased)),
            },
        ],
        vec![],
    ));
    assert_eq!(r, Err(Error::LeaseNotFound));
}

#[test]
fn txn_range_revisions_are_checked_against_the_state_before_the_txn() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.put("a", "2"); // 3
    let at = |revision| {
        op_range(RangeRequest {
            revision,
            ..get("a")
        })
    };
    // Revision 4 would exist after the put, but the check runs before it.
    let r = s.txn(txn(vec![], vec![op_put("b", "1"), at(4)], vec![]));
    assert_eq!(r, Err(Error::FutureRevision));
    // Never compacted: etcd's store counts as "compacted at -1".
    assert!(s.txn(txn(vec![], vec![at(-1)], vec![])).is_ok());
    assert_eq!(
        s.txn(txn(vec![], vec![at(-2)], vec![])),
        Err(Error::Compacted)
    );
    s.compact(3).unwrap();
    assert_eq!(
        s.txn(txn(vec![], vec![at(2)], vec![])),
        Err(Error::Compacted)
    );
    assert_eq!(
        s.txn(txn(vec![], vec![at(-1)], vec![])),
        Err(Error::Compacted)
    );
    let r = s.txn(txn(vec![], vec![at(3)], vec![])).unwrap();
    assert_eq!(range_of(&r.responses[0]).kvs[0].value, b"2");
}

#[test]
fn txn_put_ignoring_a_key_deleted_earlier_in_the_txn_fails_cleanly() {
    // A "from key" delete does not count as overlapping a put, so this passes
    // validation; etcd would then fail mid-apply. We refuse it whole.
    let mut s = Store::new();
    s.put("a", "1");
    let request = txn(
        vec![],
        vec![
            op_delete("a", "\0"),
            RequestOp {
                request: Some(Op::RequestPut(PutRequest {
                    ignore_value: true,
                    ..put("a", "")
                })),
            },
        ],
        vec![],
    );
    assert_eq!(
        validate(&Request::Txn(request.clone()), &Limits::default()),
        Ok(())
    );
    assert_eq!(s.txn(request), Err(Error::KeyNotFound));
    assert_eq!(s.get("a").unwrap().value, b"1");
    assert_eq!(s.revision(), 2);
}

#[test]
fn txn_empty_op_gets_an_empty_response() {
    let mut s = Store::new();
    let r = s
        .txn(txn(vec![], vec![RequestOp { request: None }], vec![]))
        .unwrap();
    assert_eq!(r.responses, vec![ResponseOp { response: None }]);
}

// ---- compaction ----

#[test]
fn compaction_checks_its_revision() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.put("a", "2"); // 3
    assert_eq!(s.compact(4), Err(Error::FutureRevision));
    assert_eq!(s.compact(0), Ok(()));
    s.compact(2).unwrap();
    assert_eq!(s.compact(2), Err(Error::Compacted));
    assert_eq!(s.compact(1), Err(Error::Compacted));
    assert_eq!(s.compact(-1), Err(Error::Compacted));
    s.compact(3).unwrap();
    assert_eq!(s.meta.compact_revision, 3);
    assert_eq!(s.kv.read().unwrap().meta().unwrap().compact_revision, 3);
}

#[test]
fn compaction_keeps_the_newest_version_and_its_own_tombstones() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.put("a", "2"); // 3
    s.put("b", "1"); // 4
    s.delete("b", ""); // 5
    s.put("c", "1"); // 6
    s.put("a", "3"); // 7
    let r = s
        .apply(Request::Compact(CompactionRequest {
            revision: 5,
            physical: true,
        }))
        .unwrap();
    assert_eq!(
        r,
        Response::Compact(oxetcd_proto::etcdserverpb::CompactionResponse { header: rev(7) })
    );
    assert_eq!(
        s.history(),
        vec![
            ("a".into(), 3, 0, false),
            ("b".into(), 5, 0, true),
            ("c".into(), 6, 0, false),
            ("a".into(), 7, 0, false)
        ]
    );
    // Compaction bumps nothing.
    assert_eq!(s.revision(), 7);
    let at5 = s
        .range(RangeRequest {
            revision: 5,
            ..span("a", "\0")
        })
        .unwrap();
    assert_eq!(
        (names(&at5.kvs), at5.kvs[0].value.clone()),
        (vec!["a".into()], b"2".to_vec())
    );
    // The key survives with its generation intact.
    s.put("a", "4");
    assert_eq!(s.get("a").unwrap().version, 4);
    assert_eq!(s.get("a").unwrap().create_revision, 2);
}

#[test]
fn compaction_after_a_tombstone_forgets_the_key() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.delete("a", ""); // 3
    s.put("b", "1"); // 4
    s.compact(4).unwrap();
    assert_eq!(s.history(), vec![("b".into(), 4, 0, false)]);
    s.put("a", "2");
    let kv = s.get("a").unwrap();
    assert_eq!((kv.version, kv.create_revision), (1, 5));
}

/// The bug etcd fixed in etcd-io/etcd#18089: compaction at a delete's own
/// revision dropped the tombstone, so a watch from that revision (allowed:
/// the compaction revision is kept) never saw the delete. The tombstone
/// stays until a later compaction.
#[test]
fn compaction_at_a_tombstone_keeps_it_until_the_next_one() {
    let mut s = Store::new();
    s.put("a", "1"); // 2
    s.delete("a", ""); // 3
    s.compact(3).unwrap();
    assert_eq!(s.history(), vec![("a".into(), 3, 0, true)]);
    assert!(s.get("a").is_none());
    s.put("a", "2"); // 4
    let kv = s.get("a").unwrap();
    assert_eq!((kv.version, kv.create_revision), (1, 4));
    s.compact(4).unwrap();
    assert_eq!(s.history(), vec![("a".into(), 4, 0, false)]);
}

// ---- validate ----

fn check(request: Request) -> Result<(), Error> {
    validate(&request, &Limits::default())
}

fn check_txn(request: TxnRequest) -> Result<(), Error> {
    check(Request::Txn(request))
}

#[test]
fn validate_empty_keys() {
    assert_eq!(check(Request::Range(get(""))), Err(Error::EmptyKey));
    assert_eq!(check(Request::Put(put("", "v"))), Err(Error::EmptyKey));
    assert_eq!(
        check(Request::DeleteRange(delete("", "z"))),
        Err(Error::EmptyKey)
    );
    let empty_compare = cmp(
        "",
        CompareTarget::Version,
        CompareResult::Equal,
        TargetUnion::Version(0),
    );
    assert_eq!(
        check_txn(txn(vec![empty_compare], vec![], vec![])),
        Err(Error::EmptyKey)
    );
    assert_eq!(
        check_txn(txn(vec![], vec![op_put("", "")], vec![])),
        Err(Error::EmptyKey)
    );
    assert_eq!(
        check_txn(txn(vec![], vec![], vec![op_range(get(""))])),
        Err(Error::EmptyKey)
    );
    let nested = txn(vec![], vec![op_delete("", "")], vec![]);
    assert_eq!(
        check_txn(txn(vec![], vec![op_txn(nested)], vec![])),
        Err(Error::EmptyKey)
    );
    assert_eq!(check(Request::Put(put("k", ""))), Ok(()));
    assert_eq!(
        check(Request::Compact(CompactionRequest::default())),
        Ok(())
    );
}

#[test]
fn validate_ignore_conflicts() {
    let r = PutRequest {
        ignore_value: true,
        ..put("k", "v")
    };
    assert_eq!(check(Request::Put(r)), Err(Error::ValueProvided));
    let r = PutRequest {
        ignore_lease: true,
        lease: 1,
        ..put("k", "")
    };
    assert_eq!(check(Request::Put(r)), Err(Error::LeaseProvided));
    let r = PutRequest {
        ignore_lease: true,
        ignore_value: true,
        ..put("k", "")
    };
    assert_eq!(check(Request::Put(r)), Ok(()));
}

#[test]
fn validate_sort_options() {
    assert_eq!(
        check(Request::Range(RangeRequest {
            sort_order: 3,
            ..get("k")
        })),
        Err(Error::InvalidSortOption)
    );
    assert_eq!(
        check(Request::Range(RangeRequest {
            sort_target: 5,
            ..get("k")
        })),
        Err(Error::InvalidSortOption)
    );
    assert_eq!(
        check(Request::Range(RangeRequest {
            sort_order: 2,
            sort_target: 4,
            ..get("k")
        })),
        Ok(())
    );
    let bad = op_range(RangeRequest {
        sort_order: -1,
        ..get("k")
    });
    assert_eq!(
        check_txn(txn(vec![], vec![bad], vec![])),
        Err(Error::InvalidSortOption)
    );
}

#[test]
fn validate_too_many_ops() {
    let limits = Limits { txn_ops_max: 2 };
    let ops = |n: usize| {
        (0..n)
            .map(|i| op_put(&format!("k{i}"), ""))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        validate(&Request::Txn(txn(vec![], ops(2), ops(2))), &limits),
        Ok(())
    );
    assert_eq!(
        validate(&Request::Txn(txn(vec![], ops(3), vec![])), &limits),
        Err(Error::TooManyOps)
    );
    let guard = || {
        cmp(
            "k",
            CompareTarget::Version,
            CompareResult::Equal,
            TargetUnion::Version(0),
        )
    };
    assert_eq!(
        validate(
            &Request::Txn(txn(vec![guard(), guard(), guard()], vec![], vec![])),
            &limits
        ),
        Err(Error::TooManyOps)
    );
    // A nested txn gets the limit minus its parent's count.
    let nested = |n| op_txn(txn(vec![], ops(n), vec![]));
    assert_eq!(
        validate(&Request::Txn(txn(vec![], vec![nested(1)], vec![])), &limits),
        Ok(())
    );
    assert_eq!(
        validate(&Request::Txn(txn(vec![], vec![nested(2)], vec![])), &limits),
        Err(Error::TooManyOps)
    );
    // The count is checked before keys.
    assert_eq!(
        validate(
            &Request::Txn(txn(
                vec![],
                vec![op_put("", ""), op_put("", ""), op_put("", "")],
                vec![]
            )),
            &limits
        ),
        Err(Error::TooManyOps)
    );
}

#[test]
fn validate_empty_op_is_key_not_found() {
    assert_eq!(
        check_txn(txn(vec![], vec![RequestOp { request: None }], vec![])),
        Err(Error::KeyNotFound)
    );
}

#[test]
fn duplicate_puts_in_one_branch() {
    assert_eq!(
        check_txn(txn(
            vec![],
            vec![op_put("a", "1"), op_put("a", "2")],
            vec![]
        )),
        Err(Error::DuplicateKey)
    );
    // Different branches never run together.
    assert_eq!(
        check_txn(txn(vec![], vec![op_put("a", "1")], vec![op_put("a", "2")])),
        Ok(())
    );
    assert_eq!(
        check_txn(txn(
            vec![],
            vec![op_put("a", "1"), op_put("b", "2")],
            vec![]
        )),
        Ok(())
    );
}

#[test]
fn put_overlapping_a_delete_in_one_branch() {
    let dup = |ops| check_txn(txn(vec![], ops, vec![]));
    assert_eq!(
        dup(vec![op_delete("a", ""), op_put("a", "")]),
        Err(Error::DuplicateKey)
    );
    assert_eq!(
        dup(vec![op_put("a", ""), op_delete("a", "")]),
        Err(Error::DuplicateKey)
    );
    assert_eq!(
        dup(vec![op_delete("a", "c"), op_put("b", "")]),
        Err(Error::DuplicateKey)
    );
    assert_eq!(dup(vec![op_delete("a", "c"), op_put("c", "")]), Ok(()));
    assert_eq!(dup(vec![op_delete("b", ""), op_put("ba", "")]), Ok(()));
    // A "from key" delete covers nothing in etcd's check.
    assert_eq!(dup(vec![op_delete("a", "\0"), op_put("b", "")]), Ok(()));
    // Deletes never conflict with each other.
    assert_eq!(dup(vec![op_delete("a", "z"), op_delete("a", "")]), Ok(()));
    // Reads never conflict.
    assert_eq!(dup(vec![op_range(get("a")), op_put("a", "")]), Ok(()));
}

#[test]
fn duplicate_keys_across_nested_txns() {
    let dup = |ops| check_txn(txn(vec![], ops, vec![]));
    let nested = |then, els| op_txn(txn(vec![], then, els));
    // The same key in a nested txn's two branches is fine.
    assert_eq!(
        dup(vec![nested(vec![op_put("a", "")], vec![op_put("a", "")])]),
        Ok(())
    );
    // A nested put against an outer put or delete is not.
    assert_eq!(
        dup(vec![nested(vec![op_put("a", "")], vec![]), op_put("a", "")]),
        Err(Error::DuplicateKey)
    );
    assert_eq!(
        dup(vec![op_put("a", ""), nested(vec![], vec![op_put("a", "")])]),
        Err(Error::DuplicateKey)
    );
    assert_eq!(
        dup(vec![
            nested(vec![op_put("b", "")], vec![]),
            op_delete("a", "c")
        ]),
        Err(Error::DuplicateKey)
    );
    // Two nested txns putting the same key conflict, whichever branches.
    assert_eq!(
        dup(vec![
            nested(vec![op_put("a", "")], vec![]),
            nested(vec![], vec![op_put("a", "")])
        ]),
        Err(Error::DuplicateKey)
    );
    // A nested delete before a nested put conflicts; after it, it does not.
    assert_eq!(
        dup(vec![
            nested(vec![op_delete("a", "")], vec![]),
            nested(vec![op_put("a", "")], vec![])
        ]),
        Err(Error::DuplicateKey)
    );
    assert_eq!(
        dup(vec![
            nested(vec![op_put("a", "")], vec![]),
            nested(vec![op_delete("a", "")], vec![])
        ]),
        Ok(())
    );
    // An outer put against a nested delete conflicts.
    assert_eq!(
        dup(vec![
            nested(vec![], vec![op_delete("a", "")]),
            op_put("a", "")
        ]),
        Err(Error::DuplicateKey)
    );
    // Conflicts deep inside count too.
    let deep = nested(
        vec![nested(vec![op_put("a", ""), op_put("a", "")], vec![])],
        vec![],
    );
    assert_eq!(dup(vec![deep]), Err(Error::DuplicateKey));
    // The failure branch is checked on its own.
    assert_eq!(
        check_txn(txn(
            vec![],
            vec![],
            vec![op_put("a", ""), op_delete("a", "")]
        )),
        Err(Error::DuplicateKey)
    );
}

#[test]
fn failed_apply_leaves_txn_and_meta_unchanged() {
    let mut s = abc();
    let before_meta = s.meta;
    let before = s.history();
    let bad = txn(
        vec![],
        vec![
            op_delete("a", "\0"),
            op_put("x", "1"),
            op_range(RangeRequest {
                revision: 50,
                ..get("a")
            }),
        ],
        vec![],
    );
    assert_eq!(s.txn(bad), Err(Error::FutureRevision));
    assert_eq!(
        s.apply(Request::Compact(CompactionRequest {
            revision: 50,
            physical: false
        })),
        Err(Error::FutureRevision)
    );
    assert_eq!(s.meta, before_meta);
    assert_eq!(s.history(), before);
    assert_eq!(s.revision(), 5);
}

#[test]
fn a_range_is_never_a_write_and_reads_only() {
    let s = abc();
    let range = Request::Range(span("a", "\0"));
    assert!(
        range.clone().into_write().is_err(),
        "a range never reaches apply"
    );
    let Request::Range(range) = range else {
        panic!()
    };
    let r = crate::mvcc::range(&s.kv.read().unwrap(), &range).unwrap();
    assert_eq!((r.count, r.header), (4, rev(5)));
    assert_eq!(s.revision(), 5);
}

#[test]
fn sub_revisions_restart_per_request() {
    let mut s = Store::new();
    s.put("a", "1");
    s.put("b", "1");
    let subs: Vec<_> = s.history().iter().map(|h| (h.1, h.2)).collect();
    assert_eq!(subs, vec![(2, 0), (3, 0)]);
}
