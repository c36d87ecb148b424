//! Histories written by hand: each promise of etcd kept once and broken
//! once, so every rule of the checker is shown to pass what is right and
//! catch what is wrong.

use oxetcd_proto::etcdserverpb::{
    compare, request_op, response_op, CompactionRequest, CompactionResponse, Compare,
    DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
    RequestOp, ResponseHeader, ResponseOp, TxnRequest, TxnResponse, WatchResponse,
};
use oxetcd_proto::mvccpb::{event::EventType, Event, KeyValue};

use crate::*;

fn header(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision,
        ..Default::default()
    })
}

fn kv(key: &str, value: &str, create: i64, modified: i64, version: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
        create_revision: create,
        mod_revision: modified,
        version,
        lease: 0,
    }
}

fn put_req(key: &str, value: &str) -> Request {
    Request::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        prev_kv: true,
        ..Default::default()
    })
}

fn put_ok(revision: i64, prev: Option<KeyValue>) -> Outcome {
    Outcome::Ok(Response::Put(PutResponse {
        header: header(revision),
        prev_kv: prev,
    }))
}

fn get_req(key: &str) -> Request {
    Request::Range(RangeRequest {
        key: key.into(),
        ..Default::default()
    })
}

fn get_ok(revision: i64, kvs: Vec<KeyValue>) -> Outcome {
    Outcome::Ok(Response::Range(RangeResponse {
        header: header(revision),
        count: kvs.len() as i64,
        kvs,
        more: false,
    }))
}

/// An operation by client 0 over `[invoke, complete]`.
fn op(invoke: u64, complete: u64, request: Request, outcome: Outcome) -> Operation {
    Operation {
        client: 0,
        invoke,
        complete: Some(complete),
        request,
        outcome,
    }
}

/// put a=1, put a=2, a CAS on a's mod revision, delete a, and reads of
/// each, all as etcd answers them.
fn good_history() -> Vec<Operation> {
    let cas = TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Mod as i32,
            key: b"a".to_vec(),
            target_union: Some(compare::TargetUnion::ModRevision(3)),
            ..Default::default()
        }],
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: b"a".to_vec(),
                value: b"3".to_vec(),
                ..Default::default()
            })),
        }],
        failure: Vec::new(),
    };
    vec![
        op(0, 1, put_req("a", "1"), put_ok(2, None)),
        op(
            2,
            3,
            put_req("a", "2"),
            put_ok(3, Some(kv("a", "1", 2, 2, 1))),
        ),
        op(4, 5, get_req("a"), get_ok(3, vec![kv("a", "2", 2, 3, 2)])),
        op(
            6,
            7,
            Request::Txn(cas),
            Outcome::Ok(Response::Txn(TxnResponse {
                header: header(4),
                succeeded: true,
                responses: vec![ResponseOp {
                    response: Some(response_op::Response::ResponsePut(PutResponse::default())),
                }],
            })),
        ),
        op(
            8,
            9,
            Request::DeleteRange(DeleteRangeRequest {
                key: b"a".to_vec(),
                ..Default::default()
            }),
            Outcome::Ok(Response::DeleteRange(DeleteRangeResponse {
                header: header(5),
                deleted: 1,
                prev_kvs: Vec::new(),
            })),
        ),
        op(10, 11, get_req("a"), get_ok(5, Vec::new())),
        // A delete of nothing makes no revision.
        op(
            12,
            13,
            Request::DeleteRange(DeleteRangeRequest {
                key: b"a".to_vec(),
                ..Default::default()
            }),
            Outcome::Ok(Response::DeleteRange(DeleteRangeResponse {
                header: header(5),
                deleted: 0,
                prev_kvs: Vec::new(),
            })),
        ),
    ]
}

#[test]
fn a_history_as_etcd_answers_it_passes() {
    let model = check(&good_history(), 1).unwrap();
    assert_eq!(model.revision(), 5);
    assert_eq!(
        model.get_at(b"a", 4).map(|kv| kv.value.clone()),
        Some(b"3".to_vec())
    );
}

#[test]
fn a_wrong_value_is_caught() {
    let mut history = good_history();
    history[2].outcome = get_ok(3, vec![kv("a", "1", 2, 2, 1)]);
    let v = check(&history, 1).unwrap_err();
    assert_eq!((v.operation, v.revision), (Some(2), 3), "{v}");
}

#[test]
fn a_stale_read_is_caught() {
    let mut history = good_history();
    // Invoked after put a=2 (revision 3) completed, it answers revision 2.
    history[2].outcome = get_ok(2, vec![kv("a", "1", 2, 2, 1)]);
    let v = check(&history, 1).unwrap_err();
    assert_eq!(v.operation, Some(2), "{v}");
    assert!(v.what.contains("after revision 3 was seen"), "{v}");
    // A serializable read may be that stale.
    if let Request::Range(r) = &mut history[2].request {
        r.serializable = true;
    }
    check(&history, 1).unwrap();
}

#[test]
fn a_reused_revision_is_caught() {
    let mut history = good_history();
    // Concurrent with the first put, so real time allows either order.
    history[1].invoke = 0;
    history[1].outcome = put_ok(2, Some(kv("a", "1", 2, 2, 1)));
    let v = check(&history, 1).unwrap_err();
    assert!(v.what.contains("same revision"), "{v}");
}

#[test]
fn a_wrong_branch_is_caught() {
    let mut history = good_history();
    // The compare held (a's mod revision was 3): failing it is wrong.
    if let Outcome::Ok(Response::Txn(t)) = &mut history[3].outcome {
        t.succeeded = false;
    }
    let v = check(&history, 1).unwrap_err();
    assert_eq!(v.operation, Some(3), "{v}");
}

#[test]
fn a_wrong_prev_kv_is_caught() {
    let mut history = good_history();
    history[1].outcome = put_ok(3, Some(kv("a", "0", 2, 2, 1)));
    let v = check(&history, 1).unwrap_err();
    assert_eq!(v.operation, Some(1), "{v}");
}

#[test]
fn unknown_writes_fill_the_revisions_nobody_answered() {
    // Two puts time out; a read shows that the second was applied.
    let history = vec![
        op(0, 1, put_req("a", "1"), put_ok(2, None)),
        Operation {
            complete: None,
            outcome: Outcome::Unknown,
            ..op(2, 0, put_req("b", "x"), Outcome::Unknown)
        },
        Operation {
            complete: None,
            outcome: Outcome::Unknown,
            ..op(2, 0, put_req("b", "y"), Outcome::Unknown)
        },
        op(9, 10, get_req("b"), get_ok(3, vec![kv("b", "y", 3, 3, 1)])),
    ];
    let model = check(&history, 1).unwrap();
    assert_eq!(
        model.get_at(b"b", 3).map(|kv| kv.value.clone()),
        Some(b"y".to_vec())
    );

    // A revision nobody could have made.
    let mut broken = history.clone();
    broken.truncate(1);
    broken.push(op(
        9,
        10,
        get_req("b"),
        get_ok(3, vec![kv("b", "z", 3, 3, 1)]),
    ));
    let v = check(&broken, 1).unwrap_err();
    assert!(v.what.contains("no unknown write fits"), "{v}");
}

#[test]
fn a_write_that_failed_never_explains_a_revision() {
    let history = vec![
        op(0, 1, put_req("a", "1"), put_ok(2, None)),
        op(2, 3, put_req("b", "x"), Outcome::Failed),
        op(9, 10, get_req("b"), get_ok(3, vec![kv("b", "x", 3, 3, 1)])),
    ];
    check(&history, 1).unwrap_err();
}

fn put_event(key: &str, value: &str, create: i64, at: i64, version: i64) -> Event {
    Event {
        r#type: EventType::Put as i32,
        kv: Some(kv(key, value, create, at, version)),
        prev_kv: None,
    }
}

fn events(revision: i64, events: Vec<Event>) -> WatchResponse {
    WatchResponse {
        header: header(revision),
        events,
        ..Default::default()
    }
}

/// Puts of a and b in one txn at revision 2, then a again at 3.
fn two_revisions() -> Model {
    let mut model = Model::new(1);
    let txn = TxnRequest {
        success: ["a", "b"]
            .iter()
            .map(|k| RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: k.as_bytes().to_vec(),
                    value: b"1".to_vec(),
                    ..Default::default()
                })),
            })
            .collect(),
        ..Default::default()
    };
    assert!(model.apply(&Request::Txn(txn)).changed);
    assert!(model.apply(&put_req("a", "2")).changed);
    model
}

fn watch_all(responses: Vec<WatchResponse>) -> Watch {
    Watch {
        key: vec![0],
        range_end: vec![0],
        start_revision: 2,
        prev_kv: false,
        responses,
        created_revision: 1,
    }
}

#[test]
fn a_watch_as_etcd_delivers_it_passes() {
    let model = two_revisions();
    let watch = watch_all(vec![
        events(
            2,
            vec![put_event("a", "1", 2, 2, 1), put_event("b", "1", 2, 2, 1)],
        ),
        events(3, Vec::new()),
        events(3, vec![put_event("a", "2", 2, 3, 2)]),
    ]);
    // The progress notification at 3 comes before revision 3's event: it
    // is ahead of what was delivered.
    let v = check_watch(&watch, &model).unwrap_err();
    assert_eq!(v.response, 1, "{v}");
    let mut fixed = watch.clone();
    fixed.responses.swap(1, 2);
    check_watch(&fixed, &model).unwrap();
}

#[test]
fn a_skipped_split_or_repeated_event_is_caught() {
    let model = two_revisions();
    let skipped = watch_all(vec![events(3, vec![put_event("a", "2", 2, 3, 2)])]);
    assert!(check_watch(&skipped, &model).is_err(), "skipped revision 2");
    let split = watch_all(vec![
        events(2, vec![put_event("a", "1", 2, 2, 1)]),
        events(2, vec![put_event("b", "1", 2, 2, 1)]),
    ]);
    let v = check_watch(&split, &model).unwrap_err();
    assert!(v.what.contains("split"), "{v}");
    let repeated = watch_all(vec![
        events(
            2,
            vec![put_event("a", "1", 2, 2, 1), put_event("b", "1", 2, 2, 1)],
        ),
        events(
            2,
            vec![put_event("a", "1", 2, 2, 1), put_event("b", "1", 2, 2, 1)],
        ),
    ]);
    assert!(
        check_watch(&repeated, &model).is_err(),
        "repeated revision 2"
    );
}

#[test]
fn a_wrong_prev_kv_in_a_watch_is_caught() {
    let model = two_revisions();
    let mut with_prev = put_event("a", "2", 2, 3, 2);
    with_prev.prev_kv = Some(kv("a", "1", 2, 2, 1));
    let mut watch = Watch {
        key: b"a".to_vec(),
        range_end: Vec::new(),
        start_revision: 3,
        prev_kv: true,
        responses: vec![events(3, vec![with_prev.clone()])],
        created_revision: 2,
    };
    check_watch(&watch, &model).unwrap();
    with_prev.prev_kv = Some(kv("a", "0", 2, 2, 1));
    watch.responses = vec![events(3, vec![with_prev])];
    assert!(check_watch(&watch, &model).is_err());
}

#[test]
fn a_cancellation_for_compaction_must_be_owed() {
    let mut model = two_revisions();
    assert!(model.apply(&put_req("c", "1")).changed);
    let cancelled = |compact_revision| WatchResponse {
        header: header(3),
        canceled: true,
        compact_revision,
        ..Default::default()
    };
    // Revision 2 delivered, 3 owed: compacted at 4 it is gone, at 3 kept.
    let first = events(
        2,
        vec![put_event("a", "1", 2, 2, 1), put_event("b", "1", 2, 2, 1)],
    );
    check_watch(&watch_all(vec![first.clone(), cancelled(4)]), &model).unwrap();
    let v = check_watch(&watch_all(vec![first, cancelled(3)]), &model).unwrap_err();
    assert!(v.what.contains("is kept"), "{v}");
}

fn compact_req(revision: i64) -> Request {
    Request::Compaction(CompactionRequest {
        revision,
        physical: false,
    })
}

fn compact_ok(revision: i64) -> Outcome {
    Outcome::Ok(Response::Compaction(CompactionResponse {
        header: header(revision),
    }))
}

fn get_at_req(key: &str, revision: i64) -> Request {
    Request::Range(RangeRequest {
        key: key.into(),
        revision,
        ..Default::default()
    })
}

/// Puts a=1 (2) and a=2 (3), a compaction at 3, then reads at 3 and 2.
fn compacted_history(read_below: Outcome) -> Vec<Operation> {
    vec![
        op(0, 1, put_req("a", "1"), put_ok(2, None)),
        op(
            2,
            3,
            put_req("a", "2"),
            put_ok(3, Some(kv("a", "1", 2, 2, 1))),
        ),
        op(4, 5, compact_req(3), compact_ok(3)),
        op(
            6,
            7,
            get_at_req("a", 3),
            get_ok(3, vec![kv("a", "2", 2, 3, 2)]),
        ),
        op(8, 9, get_at_req("a", 2), read_below),
    ]
}

#[test]
fn a_compaction_changes_no_key_and_refuses_reads_below_it() {
    // Refused below the compaction: the history is etcd's.
    let model = check(&compacted_history(Outcome::Failed), 1).unwrap();
    assert_eq!((model.revision(), model.compacted()), (3, Some(3)));
    // Answered below the compaction: etcd would have refused it.
    let history = compacted_history(get_ok(3, vec![kv("a", "1", 2, 2, 1)]));
    let v = check(&history, 1).unwrap_err();
    assert_eq!(v.operation, Some(4), "{v}");
    assert!(v.what.contains("compaction at 3"), "{v}");
    // Later, at a revision of its own, the model refuses it as well.
    let mut later = history.clone();
    later.insert(4, op(7, 8, put_req("b", "1"), put_ok(4, None)));
    if let Outcome::Ok(Response::Range(r)) = &mut later[5].outcome {
        r.header = header(4);
    }
    later[5].invoke = 0;
    let v = check(&later, 1).unwrap_err();
    assert!(v.what.contains("Compacted"), "{v}");
}

#[test]
fn compactions_must_move_forward_and_stay_below_the_revision() {
    let mut history = compacted_history(Outcome::Failed);
    // A second compaction at 3, or one in the future, cannot succeed.
    history.push(op(10, 11, compact_req(3), compact_ok(3)));
    let v = check(&history, 1).unwrap_err();
    assert_eq!(v.operation, Some(5), "{v}");
    history[5] = op(10, 11, compact_req(4), compact_ok(3));
    let v = check(&history, 1).unwrap_err();
    assert!(v.what.contains("FutureRevision"), "{v}");
    // Refused ones, or ones without an answer, are accepted as they are.
    history[5] = op(10, 11, compact_req(4), Outcome::Unknown);
    check(&history, 1).unwrap();
    // Two at one revision, overlapping: they can have succeeded in
    // ascending order, whichever was answered first.
    let mut both = compacted_history(Outcome::Failed);
    both.truncate(2);
    both.push(op(4, 7, compact_req(3), compact_ok(3)));
    both.push(op(5, 6, compact_req(2), compact_ok(3)));
    check(&both, 1).unwrap();
}

#[test]
fn a_cancellation_needs_a_compact_revision_or_a_reason() {
    let model = two_revisions();
    let cancelled = |reason: &str| WatchResponse {
        header: header(3),
        canceled: true,
        cancel_reason: reason.to_owned(),
        ..Default::default()
    };
    let v = check_watch(&watch_all(vec![cancelled("")]), &model).unwrap_err();
    assert!(v.what.contains("without compact_revision"), "{v}");
    check_watch(&watch_all(vec![cancelled("permission denied")]), &model).unwrap();
}

#[test]
fn a_watch_cut_short_is_checked_as_far_as_it_got() {
    let model = two_revisions();
    let first = events(
        2,
        vec![put_event("a", "1", 2, 2, 1), put_event("b", "1", 2, 2, 1)],
    );
    // Revision 3 never came: a prefix, and correct.
    check_watch(&watch_all(vec![first.clone()]), &model).unwrap();
    // A progress notification at 3 makes the watch answer for it.
    let v = check_watch(&watch_all(vec![first, events(3, Vec::new())]), &model).unwrap_err();
    assert!(v.what.contains("undelivered"), "{v}");
}

fn lease_put_req(key: &str, value: &str, lease: i64) -> Request {
    Request::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        prev_kv: true,
        ..Default::default()
    })
}

fn grant_ok(revision: i64, id: i64) -> Outcome {
    Outcome::Ok(Response::LeaseGrant(
        oxetcd_proto::etcdserverpb::LeaseGrantResponse {
            header: header(revision),
            id,
            ttl: 5,
            ..Default::default()
        },
    ))
}

fn revoke_ok(revision: i64) -> Outcome {
    Outcome::Ok(Response::LeaseRevoke(
        oxetcd_proto::etcdserverpb::LeaseRevokeResponse {
            header: header(revision),
        },
    ))
}

fn leased(key: &str, value: &str, create: i64, modified: i64, lease: i64) -> KeyValue {
    KeyValue {
        lease,
        ..kv(key, value, create, modified, 1)
    }
}

/// Lease 7 granted at 1; a and b attached at 2 and 3; the revoke answers
/// at `revoked`; reads of everything after.
fn revoked_history(revoked: i64, read: Outcome) -> Vec<Operation> {
    vec![
        op(0, 1, traffic::lease_grant(7, 5), grant_ok(1, 7)),
        op(2, 3, lease_put_req("a", "1", 7), put_ok(2, None)),
        op(4, 5, lease_put_req("b", "1", 7), put_ok(3, None)),
        op(6, 7, traffic::lease_revoke(7), revoke_ok(revoked)),
        op(8, 9, get_req("a"), read),
    ]
}

#[test]
fn a_revoke_deletes_every_attached_key_in_its_own_revision() {
    let model = check(&revoked_history(4, get_ok(4, vec![])), 1).unwrap();
    assert_eq!(model.revision(), 4);
    assert!(!model.lease_exists(7));
    assert_eq!(model.events_at(4).len(), 2, "both keys deleted at 4");
    // The keys still there after the revoke answered.
    let kept = get_ok(4, vec![leased("a", "1", 2, 2, 7)]);
    assert!(check(&revoked_history(4, kept), 1).is_err());
}

#[test]
fn a_revoke_split_over_two_revisions_is_caught() {
    // Revision 4 deleted a (nobody answered for it), 5 deleted b and the
    // revoke answered 5: no revoke explains 4.
    let mut history = revoked_history(5, get_ok(5, vec![]));
    history.push(op(
        10,
        11,
        get_at_req("b", 4),
        get_ok(5, vec![leased("b", "1", 3, 3, 7)]),
    ));
    let v = check(&history, 1).unwrap_err();
    assert!(!v.undecided, "{v}");
}

#[test]
fn a_revoke_of_a_lease_without_keys_makes_no_revision() {
    let history = vec![
        op(0, 1, traffic::lease_grant(7, 5), grant_ok(1, 7)),
        op(2, 3, traffic::lease_revoke(7), revoke_ok(1)),
        op(4, 5, put_req("a", "1"), put_ok(2, None)),
    ];
    let model = check(&history, 1).unwrap();
    assert!(!model.lease_exists(7));
}

#[test]
fn a_put_on_a_lease_not_granted_yet_or_revoked_is_caught() {
    // Attached before the grant's revision was passed: the grant answered
    // at 2, after the put made 2.
    let early = vec![
        op(0, 1, lease_put_req("a", "1", 7), put_ok(2, None)),
        op(2, 3, traffic::lease_grant(7, 5), grant_ok(2, 7)),
    ];
    assert!(check(&early, 1).is_err());
    let late = vec![
        op(0, 1, traffic::lease_grant(7, 5), grant_ok(1, 7)),
        op(2, 3, traffic::lease_revoke(7), revoke_ok(1)),
        op(4, 5, lease_put_req("a", "1", 7), put_ok(2, None)),
    ];
    assert!(check(&late, 1).is_err());
}

#[test]
fn an_expiry_explains_the_deletion_of_a_leases_keys() {
    let mut history = vec![
        op(0, 1, traffic::lease_grant(7, 5), grant_ok(1, 7)),
        op(2, 3, lease_put_req("a", "1", 7), put_ok(2, None)),
        op(4, 5, lease_put_req("b", "1", 7), put_ok(3, None)),
        op(8, 9, get_req("a"), get_ok(4, vec![])),
    ];
    // Without the expiry nothing explains revision 4.
    assert!(check(&history, 1).is_err());
    history.push(Operation {
        client: 1,
        invoke: 0,
        complete: None,
        request: traffic::lease_expiry(7),
        outcome: Outcome::Unknown,
    });
    let model = check(&history, 1).unwrap();
    assert!(model.get_at(b"b", 4).is_none(), "b went with a");
}

/// Two puts of unknown outcome and an answer that shows revision 2
/// happened: either put may have made it. A watch on `a` that answered
/// for revision 2 without an event rules out the put of `a`, so the model
/// the watch is held against is the one the server made.
#[test]
fn a_watch_silent_at_a_revision_rules_out_writes_on_its_range() {
    let unknown = |request: Request| Operation {
        client: 1,
        invoke: 0,
        complete: None,
        request,
        outcome: Outcome::Unknown,
    };
    let history = vec![
        unknown(put_req("a", "1")),
        unknown(put_req("b", "1")),
        op(5, 6, get_req("c"), get_ok(2, Vec::new())),
    ];
    let model = check(&history, 1).unwrap();
    assert!(model.get_at(b"a", 2).is_some(), "the first fit, unguided");
    let watch = Watch {
        key: b"a".to_vec(),
        range_end: Vec::new(),
        start_revision: 2,
        prev_kv: false,
        responses: vec![events(2, Vec::new())],
        created_revision: 1,
    };
    let model = check_with_watches(&history, std::slice::from_ref(&watch), 1).unwrap();
    assert!(model.get_at(b"a", 2).is_none());
    assert!(model.get_at(b"b", 2).is_some());
    check_watch(&watch, &model).unwrap();
}
