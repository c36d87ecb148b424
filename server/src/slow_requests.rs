//! Warnings for slow requests, as etcd logs them
//! (`--warning-apply-duration`, `--warning-unary-request-duration`).
//!
//! Design. Three places measure, with the runtime's monotonic clock (the
//! core never reads one):
//! - the driver times each step of the node that applies entries, and
//!   warns `apply request took too long` when the step took longer than
//!   the apply duration. A step applies a batch of entries in one backend
//!   transaction, so the warning names the batch's index range where etcd
//!   names the one request;
//! - a client's range is timed from its arrival to its answer (etcd times
//!   `Range` the same way) and warned with the prefix `read-only range `;
//! - every client request is timed from arrival to answer, and one slower
//!   than the unary duration is warned as etcd 3.5 does, `request stats`
//!   with its sizes and a summary of the request (values are never logged,
//!   only their size, as etcd redacts them). At debug level every
//!   request's stats are logged.
//!
//! This module only formats and logs; it never changes an answer.

use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime};

use oxetcd_core::{Error, GoDuration, Request, Response};
use oxetcd_proto::etcdserverpb::RangeRequest;
use prost::Message as _;
use tracing::{debug, enabled, warn, Level};

/// etcd's default `--warning-apply-duration`.
pub const WARNING_APPLY_DURATION_DEFAULT: Duration = Duration::from_millis(100);

/// etcd's default `--warning-unary-request-duration`.
pub const WARNING_UNARY_REQUEST_DURATION_DEFAULT: Duration = Duration::from_millis(300);

/// Bytes of a key shown in a request summary at most; a longer key is cut
/// (keys may be up to a request in size).
const SUMMARY_KEY_BYTES_MAX: usize = 256;

/// When a request is slow enough to be warned about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowRequests {
    /// `--warning-apply-duration`.
    pub apply: Duration,
    /// `--warning-unary-request-duration`.
    pub unary: Duration,
}

impl Default for SlowRequests {
    fn default() -> Self {
        Self {
            apply: WARNING_APPLY_DURATION_DEFAULT,
            unary: WARNING_UNARY_REQUEST_DURATION_DEFAULT,
        }
    }
}

/// What is kept of a client request while it is in flight: its arrival
/// and the little a warning names (keys, sizes, counts; never a value),
/// taken before the request goes to the node.
pub(crate) struct Timed {
    /// When it arrived; its wall-clock time is worked out only when it is
    /// logged (one clock read per request, not two).
    started: Instant,
    method: &'static str,
    /// The range itself (small: keys and options), for the read-only
    /// range warning.
    range: Option<RangeRequest>,
    /// etcd's loggable request, built only when it is logged.
    key: Vec<u8>,
    range_end: Vec<u8>,
    value_size: usize,
    /// Request count and size of a txn's branches, (success, failure); of
    /// the request otherwise (count as etcd reports it).
    counts: [(i64, i64); 2],
    txn_ops: [usize; 3],
    revision: i64,
}

impl Timed {
    /// Starts timing `request`, arriving now.
    pub(crate) fn start(request: &Request) -> Self {
        let size = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let mut timed = Self {
            started: Instant::now(),
            method: method(request),
            range: None,
            key: Vec::new(),
            range_end: Vec::new(),
            value_size: 0,
            counts: [(-1, -1); 2],
            txn_ops: [0; 3],
            revision: 0,
        };
        match request {
            Request::Range(r) => {
                timed.range = Some(r.clone());
                timed.counts = [(0, size(r.encoded_len())); 2];
            }
            Request::Put(r) => {
                timed.key = r.key.clone();
                timed.value_size = r.value.len();
                timed.counts = [(1, size(r.encoded_len())); 2];
            }
            Request::DeleteRange(r) => {
                timed.key = r.key.clone();
                timed.range_end = r.range_end.clone();
                timed.counts = [(0, size(r.encoded_len())); 2];
            }
            Request::Txn(r) => {
                let branch = |ops: &[oxetcd_proto::etcdserverpb::RequestOp]| {
                    (
                        size(ops.len()),
                        size(ops.iter().map(|op| op.encoded_len()).sum()),
                    )
                };
                timed.counts = [branch(&r.success), branch(&r.failure)];
                timed.txn_ops = [r.compare.len(), r.success.len(), r.failure.len()];
            }
            Request::Compact(r) => timed.revision = r.revision,
            _ => {}
        }
        timed
    }

    /// etcd's loggable form of the request.
    fn summary(&self) -> String {
        if let Some(range) = &self.range {
            return range_summary(range);
        }
        match self.method {
            "/etcdserverpb.KV/Put" => {
                format!("key:{} value_size:{}", quoted(&self.key), self.value_size)
            }
            "/etcdserverpb.KV/DeleteRange" => keys(&self.key, &self.range_end),
            "/etcdserverpb.KV/Txn" => {
                let [compare, success, failure] = self.txn_ops;
                format!("compare:<{compare}> success:<{success}> failure:<{failure}>")
            }
            "/etcdserverpb.KV/Compact" => format!("revision:{}", self.revision),
            _ => String::new(),
        }
    }
}

impl SlowRequests {
    /// A step of the driver applied entries `first..=last` in `took`.
    pub(crate) fn applied(&self, took: Duration, first: u64, last: u64) {
        if took > self.apply {
            warn!(
                took = %GoDuration(took),
                expected_duration = %GoDuration(self.apply),
                prefix = "",
                request = %format_args!("entries {first}..={last}"),
                response = "",
                "apply request took too long"
            );
        }
    }

    /// The client request `timed` was answered with `result`.
    pub(crate) fn answered(&self, timed: &Timed, result: &Result<Response, Error>) {
        let took = timed.started.elapsed();
        if let (Some(range), true) = (&timed.range, took > self.apply) {
            self.read_only_range(took, range, result);
        }
        let debugging = enabled!(Level::DEBUG);
        if took <= self.unary && !debugging {
            return;
        }
        let stats = Stats::of(timed, result);
        let start_time = epoch_time(
            SystemTime::now()
                .checked_sub(took)
                .unwrap_or(SystemTime::UNIX_EPOCH),
        );
        macro_rules! log_stats {
            ($level:ident) => {
                $level!(
                    start_time = %start_time,
                    time_spent = %GoDuration(took),
                    remote = "No remote client info.",
                    response_type = timed.method,
                    request_count = stats.request_count,
                    request_size = stats.request_size,
                    response_count = stats.response_count,
                    response_size = stats.response_size,
                    request_content = %timed.summary(),
                    "request stats"
                )
            };
        }
        if debugging {
            log_stats!(debug);
        } else {
            log_stats!(warn);
        }
    }

    fn read_only_range(
        &self,
        took: Duration,
        range: &RangeRequest,
        result: &Result<Response, Error>,
    ) {
        let (response, error) = match result {
            Ok(Response::Range(r)) => (
                format!(
                    "range_response_count:{} size:{}",
                    r.kvs.len(),
                    r.encoded_len()
                ),
                String::new(),
            ),
            Ok(_) => (String::new(), String::new()),
            Err(e) => (String::new(), e.message().to_string()),
        };
        warn!(
            took = %GoDuration(took),
            expected_duration = %GoDuration(self.apply),
            prefix = "read-only range ",
            request = %range_summary(range),
            response = %response,
            error = %error,
            "apply request took too long"
        );
    }
}

/// Sizes and counts etcd's `request stats` report.
struct Stats {
    request_count: i64,
    request_size: i64,
    response_count: i64,
    response_size: i64,
}

impl Stats {
    fn of(timed: &Timed, result: &Result<Response, Error>) -> Self {
        let (succeeded, response_count, response_size) = match result {
            Ok(Response::Range(r)) => (true, r.count, r.encoded_len()),
            Ok(Response::Put(r)) => (true, 0, r.encoded_len()),
            Ok(Response::DeleteRange(r)) => (true, r.deleted, r.encoded_len()),
            // etcd counts the branch that ran.
            Ok(Response::Txn(r)) => (r.succeeded, 0, r.encoded_len()),
            Ok(_) | Err(_) => (true, 0, 0),
        };
        let (request_count, request_size) = timed.counts[usize::from(!succeeded)];
        if request_count < 0 {
            return Self {
                request_count: -1,
                request_size: -1,
                response_count: -1,
                response_size: -1,
            };
        }
        Self {
            request_count,
            request_size,
            response_count,
            response_size: i64::try_from(response_size).unwrap_or(i64::MAX),
        }
    }
}

/// The gRPC method a request came as (etcd reports the full method).
fn method(request: &Request) -> &'static str {
    match request {
        Request::Range(_) => "/etcdserverpb.KV/Range",
        Request::Put(_) => "/etcdserverpb.KV/Put",
        Request::DeleteRange(_) => "/etcdserverpb.KV/DeleteRange",
        Request::Txn(_) => "/etcdserverpb.KV/Txn",
        Request::Compact(_) => "/etcdserverpb.KV/Compact",
        Request::Status => "/etcdserverpb.Maintenance/Status",
        Request::LeaseGrant(_) => "/etcdserverpb.Lease/LeaseGrant",
        Request::LeaseRevoke(_) => "/etcdserverpb.Lease/LeaseRevoke",
        Request::LeaseKeepAlive(_) => "/etcdserverpb.Lease/LeaseKeepAlive",
        Request::LeaseTimeToLive(_) => "/etcdserverpb.Lease/LeaseTimeToLive",
        Request::LeaseLeases => "/etcdserverpb.Lease/LeaseLeases",
        Request::MemberAdd(_) => "/etcdserverpb.Cluster/MemberAdd",
        Request::MemberRemove(_) => "/etcdserverpb.Cluster/MemberRemove",
        Request::MemberUpdate(_) => "/etcdserverpb.Cluster/MemberUpdate",
        Request::MemberPromote(_) => "/etcdserverpb.Cluster/MemberPromote",
        Request::MemberList(_) => "/etcdserverpb.Cluster/MemberList",
        Request::MoveLeader(_) => "/etcdserverpb.Maintenance/MoveLeader",
        Request::Alarm(_) => "/etcdserverpb.Maintenance/Alarm",
        Request::Downgrade(_) => "/etcdserverpb.Maintenance/Downgrade",
        Request::Auth(_) => "/etcdserverpb.Auth",
    }
}

fn range_summary(r: &RangeRequest) -> String {
    let mut s = keys(&r.key, &r.range_end);
    if r.limit != 0 {
        let _ = write!(s, " limit:{}", r.limit);
    }
    if r.revision != 0 {
        let _ = write!(s, " revision:{}", r.revision);
    }
    if r.serializable {
        s.push_str(" serializable:true");
    }
    if r.keys_only {
        s.push_str(" keys_only:true");
    }
    if r.count_only {
        s.push_str(" count_only:true");
    }
    s
}

fn keys(key: &[u8], range_end: &[u8]) -> String {
    if range_end.is_empty() {
        format!("key:{}", quoted(key))
    } else {
        format!("key:{} range_end:{}", quoted(key), quoted(range_end))
    }
}

/// Bytes as a Go-quoted string, printable ASCII as is, the rest escaped;
/// cut at [`SUMMARY_KEY_BYTES_MAX`].
fn quoted(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len().min(SUMMARY_KEY_BYTES_MAX) + 2);
    s.push('"');
    for &b in bytes.iter().take(SUMMARY_KEY_BYTES_MAX) {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(char::from(b)),
            _ => {
                let _ = write!(s, "\\{b:03o}");
            }
        }
    }
    s.push('"');
    if bytes.len() > SUMMARY_KEY_BYTES_MAX {
        s.push_str("...");
    }
    s
}

/// A wall-clock time as seconds since the epoch with nanoseconds (the
/// JSON log's own timestamp carries the readable form).
fn epoch_time(t: SystemTime) -> String {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => format!("{}.{:09}", d.as_secs(), d.subsec_nanos()),
        Err(_) => String::from("0"),
    }
}

#[cfg(test)]
mod tests {
    use oxetcd_proto::etcdserverpb::{
        PutRequest, RangeResponse, RequestOp, TxnRequest, TxnResponse,
    };

    use super::*;

    #[test]
    fn summaries_quote_keys_and_redact_values() {
        let put = Request::Put(PutRequest {
            key: b"a\"b\x01".to_vec(),
            value: b"secret".to_vec(),
            ..Default::default()
        });
        let timed = Timed::start(&put);
        assert_eq!(timed.summary(), r#"key:"a\"b\001" value_size:6"#);
        let range = RangeRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            limit: 3,
            serializable: true,
            ..Default::default()
        };
        assert_eq!(
            Timed::start(&Request::Range(range)).summary(),
            r#"key:"a" range_end:"b" limit:3 serializable:true"#
        );
        let long = vec![b'k'; SUMMARY_KEY_BYTES_MAX + 5];
        assert!(quoted(&long).ends_with("\"..."));
    }

    #[test]
    fn stats_count_as_etcd_does() {
        let range = Request::Range(RangeRequest::default());
        let answer = Ok(Response::Range(RangeResponse {
            count: 4,
            ..Default::default()
        }));
        let stats = Stats::of(&Timed::start(&range), &answer);
        assert_eq!((stats.request_count, stats.response_count), (0, 4));
        let txn = Request::Txn(TxnRequest {
            success: vec![RequestOp::default(); 2],
            failure: vec![RequestOp::default(); 5],
            ..Default::default()
        });
        let failed = Ok(Response::Txn(TxnResponse::default()));
        let stats = Stats::of(&Timed::start(&txn), &failed);
        assert_eq!(stats.request_count, 5, "the failure branch ran");
        let status = Stats::of(&Timed::start(&Request::Status), &Err(Error::Timeout));
        assert_eq!(status.request_count, -1, "etcd reports -1 for other calls");
        assert_eq!(method(&range), "/etcdserverpb.KV/Range");
    }
}
