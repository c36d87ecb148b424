//! Watch: live events, history, compaction, filters, ranges, IDs, cancel,
//! progress (requested and periodic) and fragments, as etcd streams them.

use std::time::Duration;

use oxetcd_proto::etcdserverpb::watch_create_request::FilterType;
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    WatchCancelRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest,
};

use super::{
    compact, del, del_range, ensure, expect, op_del, op_put, prefix_end, put, render::Render, txn,
};
use crate::target::{Target, WATCH_PROGRESS_NOTIFY_INTERVAL};

/// How long to wait for a response that must come (etcd syncs unsynced
/// watchers every 100 ms).
const COMES: Duration = Duration::from_secs(5);
/// How long to wait to be fairly sure nothing else comes.
const QUIET: Duration = Duration::from_millis(300);

pub(crate) fn create(key: &str, range_end: &[u8]) -> WatchCreateRequest {
    WatchCreateRequest {
        key: key.as_bytes().to_vec(),
        range_end: range_end.to_vec(),
        ..Default::default()
    }
}

pub(crate) fn send_create(request: WatchCreateRequest) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(request)),
    }
}

fn cancel(watch_id: i64) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest { watch_id })),
    }
}

fn progress() -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
    }
}

/// Receives the next response and compares its rendering.
#[track_caller]
fn next(t: &mut Target, stream: usize, expected: &str) -> Result<(), String> {
    let got = t.watch_recv(stream, COMES);
    expect(&got, expected)
}

#[track_caller]
fn quiet(t: &mut Target, stream: usize) -> Result<(), String> {
    let got = t.watch_recv(stream, QUIET);
    expect(&got, "nothing")
}

/// Puts, deletes and txns reach a prefix watcher as they happen, one
/// response per revision with every event of it, with `prev_kv`.
pub(super) fn watch_live_events_with_prev_kv(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("a1", "x")), "rev 2")?;
    let s = t.watch_open();
    let mut request = create("a", &prefix_end(b"a"));
    request.prev_kv = true;
    super::ok(t.watch_send(s, send_create(request)))?;
    next(t, s, "rev 2 watch 0 created")?;
    expect(&t.put(put("a2", "y")), "rev 3")?;
    next(t, s, "rev 3 watch 0 [PUT a2=y c3 m3 v1]")?;
    expect(&t.put(put("b", "z")), "rev 4")?;
    expect(&t.put(put("a1", "x2")), "rev 5")?;
    next(
        t,
        s,
        "rev 5 watch 0 [PUT a1=x2 c2 m5 v2 prev a1=x c2 m2 v1]",
    )?;
    expect(
        &t.txn(txn(
            vec![],
            vec![
                op_put(put("a3", "1")),
                op_del(del("a2")),
                op_put(put("b", "2")),
            ],
            vec![],
        )),
        "rev 6 succeeded {put(rev 6); delete(rev 6 deleted 1); put(rev 6)}",
    )?;
    next(
        t,
        s,
        "rev 6 watch 0 [PUT a3=1 c6 m6 v1, DELETE a2 m6 prev a2=y c3 m3 v1]",
    )?;
    expect(&t.delete_range(del_range("a", "b")), "rev 7 deleted 2")?;
    next(
        t,
        s,
        "rev 7 watch 0 [DELETE a1 m7 prev a1=x2 c2 m5 v2, DELETE a3 m7 prev a3=1 c6 m6 v1]",
    )?;
    // Nothing for a delete that deletes nothing or a write elsewhere.
    expect(&t.delete_range(del("a1")), "rev 7 deleted 0")?;
    expect(&t.put(put("c", "1")), "rev 8")?;
    quiet(t, s)
}

/// A start revision replays history from storage in one response (header
/// at the current revision), then live events follow without a gap or a
/// repeat; history below the compacted revision cancels the watcher with
/// `compact_revision`.
pub(super) fn watch_history_and_compaction(t: &mut Target) -> Result<(), String> {
    expect(&t.put(put("k", "1")), "rev 2")?;
    expect(&t.put(put("k", "2")), "rev 3")?;
    expect(&t.delete_range(del("k")), "rev 4 deleted 1")?;
    expect(&t.put(put("k", "3")), "rev 5")?;
    let s = t.watch_open();
    let mut request = create("k", b"");
    request.start_revision = 3;
    super::ok(t.watch_send(s, send_create(request)))?;
    next(t, s, "rev 5 watch 0 created")?;
    next(
        t,
        s,
        "rev 5 watch 0 [PUT k=2 c2 m3 v2, DELETE k m4, PUT k=3 c5 m5 v1]",
    )?;
    expect(&t.put(put("k", "4")), "rev 6")?;
    next(t, s, "rev 6 watch 0 [PUT k=4 c5 m6 v2]")?;
    expect(&t.compact(compact(5)), "rev 6")?;
    let mut request = create("k", b"");
    request.start_revision = 4;
    super::ok(t.watch_send(s, send_create(request)))?;
    next(t, s, "rev 6 watch 1 created")?;
    next(t, s, "rev 0 watch 1 canceled compact 5")?;
    // At the compacted revision itself history is still there.
    let mut request = create("k", b"");
    request.start_revision = 5;
    super::ok(t.watch_send(s, send_create(request)))?;
    next(t, s, "rev 6 watch 2 created")?;
    next(t, s, "rev 6 watch 2 [PUT k=3 c5 m5 v1, PUT k=4 c5 m6 v2]")?;
    quiet(t, s)
}

/// Filters, single keys, from-key ranges, a future start revision, client
/// chosen IDs, duplicate IDs, empty ranges and cancel.
pub(super) fn watch_filters_ranges_ids_and_cancel(t: &mut Target) -> Result<(), String> {
    let s = t.watch_open();
    let mut no_put = create("a", b"\0");
    no_put.filters = vec![FilterType::Noput as i32];
    super::ok(t.watch_send(s, send_create(no_put)))?;
    next(t, s, "rev 1 watch 0 created")?;
    let mut no_delete = create("b", b"");
    no_delete.filters = vec![FilterType::Nodelete as i32];
    no_delete.watch_id = 7;
    super::ok(t.watch_send(s, send_create(no_delete)))?;
    next(t, s, "rev 1 watch 7 created")?;
    let mut duplicate = create("c", b"");
    duplicate.watch_id = 7;
    super::ok(t.watch_send(s, send_create(duplicate)))?;
    next(
        t,
        s,
        "rev 1 watch -1 created canceled reason \"mvcc: duplicate watch ID provided on the WatchStream\"",
    )?;
    super::ok(t.watch_send(s, send_create(create("d", b"c"))))?;
    next(
        t,
        s,
        "rev 1 watch -1 created canceled reason \"mvcc: watcher range is empty\"",
    )?;
    let mut future = create("f", b"");
    future.start_revision = 5;
    super::ok(t.watch_send(s, send_create(future)))?;
    next(t, s, "rev 1 watch 1 created")?;
    expect(&t.put(put("b", "1")), "rev 2")?;
    next(t, s, "rev 2 watch 7 [PUT b=1 c2 m2 v1]")?;
    expect(&t.delete_range(del("b")), "rev 3 deleted 1")?;
    next(t, s, "rev 3 watch 0 [DELETE b m3]")?;
    expect(&t.put(put("f", "1")), "rev 4")?;
    expect(&t.put(put("f", "2")), "rev 5")?;
    next(t, s, "rev 5 watch 1 [PUT f=2 c4 m5 v2]")?;
    super::ok(t.watch_send(s, cancel(7)))?;
    next(t, s, "rev 5 watch 7 canceled")?;
    // Canceling an unknown watcher answers nothing.
    super::ok(t.watch_send(s, cancel(99)))?;
    quiet(t, s)?;
    expect(&t.put(put("b", "2")), "rev 6")?;
    quiet(t, s)
}

/// A progress request is answered with the current revision on watch ID -1;
/// watchers on other streams are not disturbed.
pub(super) fn watch_progress_and_streams(t: &mut Target) -> Result<(), String> {
    let one = t.watch_open();
    let two = t.watch_open();
    super::ok(t.watch_send(one, send_create(create("x", b""))))?;
    next(t, one, "rev 1 watch 0 created")?;
    super::ok(t.watch_send(two, send_create(create("x", b""))))?;
    next(t, two, "rev 1 watch 0 created")?;
    expect(&t.put(put("x", "1")), "rev 2")?;
    expect(&t.put(put("y", "1")), "rev 3")?;
    next(t, one, "rev 2 watch 0 [PUT x=1 c2 m2 v1]")?;
    next(t, two, "rev 2 watch 0 [PUT x=1 c2 m2 v1]")?;
    super::ok(t.watch_send(one, progress()))?;
    next(t, one, "rev 3 watch -1")?;
    quiet(t, two)
}

/// Bytes of each value in the fragment scenario: two such events fit one
/// response under etcd's split point (the default `--max-request-bytes`
/// plus 512 KiB of gRPC allowance, 2 MiB), three do not, and each put
/// stays under the request limit.
const FRAGMENT_VALUE_BYTES: usize = 900_000;

/// A watcher that asked for `fragment` gets a revision too large for one
/// response split over several, every part but the last flagged
/// `fragment`, together holding the revision's events in order; a watcher
/// that did not ask gets it whole.
pub(super) fn watch_fragments_large_revisions(t: &mut Target) -> Result<(), String> {
    let value = vec![b'v'; FRAGMENT_VALUE_BYTES];
    for (i, key) in ["f1", "f2", "f3"].iter().enumerate() {
        expect(&t.put(put(key, &value)), &format!("rev {}", i + 2))?;
    }
    let fragmented = t.watch_open();
    let mut request = create("f", &prefix_end(b"f"));
    request.prev_kv = true;
    request.fragment = true;
    super::ok(t.watch_send(fragmented, send_create(request.clone())))?;
    next(t, fragmented, "rev 4 watch 0 created")?;
    let whole = t.watch_open();
    request.fragment = false;
    super::ok(t.watch_send(whole, send_create(request)))?;
    next(t, whole, "rev 4 watch 0 created")?;
    // One revision deleting all three, each event carrying its value.
    expect(&t.delete_range(del_range("f", "g")), "rev 5 deleted 3")?;
    let shown = format!("<{FRAGMENT_VALUE_BYTES} bytes>");
    let deleted = |key: &str, created: i64| {
        format!("DELETE {key} m5 prev {key}={shown} c{created} m{created} v1")
    };
    let expected_first = format!(
        "rev 5 watch 0 fragment [{}, {}]",
        deleted("f1", 2),
        deleted("f2", 3)
    );
    next(t, fragmented, &expected_first)?;
    next(
        t,
        fragmented,
        &format!("rev 5 watch 0 [{}]", deleted("f3", 4)),
    )?;
    next(
        t,
        whole,
        &format!(
            "rev 5 watch 0 [{}, {}, {}]",
            deleted("f1", 2),
            deleted("f2", 3),
            deleted("f3", 4)
        ),
    )?;
    quiet(t, fragmented)?;
    quiet(t, whole)
}

/// Responses one periodic-progress wait may take at most before the one
/// it waits for (notifications at older revisions, every half second).
const PROGRESS_WAIT_RESPONSES_MAX: usize = 20;

/// Waits for a periodic progress notification of `watch_id` at `revision`;
/// every response before it must be such a notification at an older
/// revision. Bounded by count and by [`COMES`] per response.
fn wait_periodic_progress(
    t: &mut Target,
    stream: usize,
    watch_id: i64,
    revision: i64,
) -> Result<(), String> {
    let expected = format!("rev {revision} watch {watch_id}");
    for _ in 0..PROGRESS_WAIT_RESPONSES_MAX {
        let got = t.watch_recv(stream, COMES);
        let rendered = got.render();
        if rendered == expected {
            return Ok(());
        }
        let older = got.as_ref().ok().and_then(Option::as_ref).is_some_and(|r| {
            r.watch_id == watch_id
                && r.events.is_empty()
                && !r.created
                && !r.canceled
                && r.header.as_ref().is_some_and(|h| h.revision < revision)
        });
        ensure(older, || {
            format!("waiting for {expected:?}, got {rendered}")
        })?;
    }
    Err(format!(
        "no {expected:?} among {PROGRESS_WAIT_RESPONSES_MAX} responses"
    ))
}

/// With `--experimental-watch-progress-notify-interval` at half a second,
/// a watcher that asked for `progress_notify` hears the current revision
/// (an empty response with its own watch ID) while no event reaches it,
/// including revisions written elsewhere; one that did not ask hears
/// nothing.
pub(super) fn watch_periodic_progress_notify(t: &mut Target) -> Result<(), String> {
    let s = t.watch_open();
    let mut request = create("p", b"");
    request.progress_notify = true;
    super::ok(t.watch_send(s, send_create(request)))?;
    next(t, s, "rev 1 watch 0 created")?;
    let silent = t.watch_open();
    super::ok(t.watch_send(silent, send_create(create("p", b""))))?;
    next(t, silent, "rev 1 watch 0 created")?;
    expect(&t.put(put("q", "1")), "rev 2")?;
    wait_periodic_progress(t, s, 0, 2)?;
    expect(&t.put(put("p", "1")), "rev 3")?;
    // The event comes first; any notification before it is older.
    let mut seen_event = false;
    for _ in 0..PROGRESS_WAIT_RESPONSES_MAX {
        let got = t.watch_recv(s, COMES);
        if got.render() == "rev 3 watch 0 [PUT p=1 c3 m3 v1]" {
            seen_event = true;
            break;
        }
        expect(&got, "rev 2 watch 0")?;
    }
    ensure(seen_event, || {
        "the put never reached the watcher".to_owned()
    })?;
    expect(&t.put(put("r", "1")), "rev 4")?;
    wait_periodic_progress(t, s, 0, 4)?;
    // The watcher that did not ask got the event only.
    next(t, silent, "rev 3 watch 0 [PUT p=1 c3 m3 v1]")?;
    let got = t.watch_recv(silent, WATCH_PROGRESS_NOTIFY_INTERVAL * 3);
    expect(&got, "nothing")
}
