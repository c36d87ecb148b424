//! go-grpc-prometheus's server families (`grpc_server_*`) and etcd's
//! `etcd_server_client_requests_total`, recorded around every gRPC call.
//!
//! Design. Every method the server serves is in [`METHODS`] with its
//! kind; at start each gets its counters for every code (as
//! go-grpc-prometheus pre-registers them, so they read 0 before the first
//! call). A call looks its method up in an immutable map (no lock), counts
//! itself started, and becomes a [`GrpcCall`]: it counts the messages each
//! way (length prefixes of the gRPC frames, across HTTP/2 data frames),
//! and its code once, from the `grpc-status` header or trailer, or, for
//! the answers the router makes itself, as it makes them (as
//! go-grpc-prometheus counts a unary call handled when its handler
//! returns). A call dropped before it ended is `Canceled`, as a client
//! that went away is to gRPC-Go.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec};

use super::Families;

/// How a method streams, as go-grpc-prometheus's `grpc_type` says (its
/// fourth, `client_stream`, names no method etcd serves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Unary,
    ServerStream,
    BidiStream,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Unary => "unary",
            Self::ServerStream => "server_stream",
            Self::BidiStream => "bidi_stream",
        }
    }

    fn streams_requests(self) -> bool {
        self == Self::BidiStream
    }

    fn streams_responses(self) -> bool {
        matches!(self, Self::ServerStream | Self::BidiStream)
    }
}

/// Headers read on every call, named once: a lookup by `&str` parses
/// and checks the name each time.
static CLIENT_API_VERSION: http::HeaderName = http::HeaderName::from_static("client-api-version");
pub(crate) static GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

/// Every method served: service, method, kind.
const METHODS: &[(&str, &str, Kind)] = &[
    ("etcdserverpb.KV", "Range", Kind::Unary),
    ("etcdserverpb.KV", "RangeStream", Kind::ServerStream),
    ("etcdserverpb.KV", "Put", Kind::Unary),
    ("etcdserverpb.KV", "DeleteRange", Kind::Unary),
    ("etcdserverpb.KV", "Txn", Kind::Unary),
    ("etcdserverpb.KV", "Compact", Kind::Unary),
    ("etcdserverpb.Watch", "Watch", Kind::BidiStream),
    ("etcdserverpb.Lease", "LeaseGrant", Kind::Unary),
    ("etcdserverpb.Lease", "LeaseRevoke", Kind::Unary),
    ("etcdserverpb.Lease", "LeaseKeepAlive", Kind::BidiStream),
    ("etcdserverpb.Lease", "LeaseTimeToLive", Kind::Unary),
    ("etcdserverpb.Lease", "LeaseLeases", Kind::Unary),
    ("etcdserverpb.Cluster", "MemberAdd", Kind::Unary),
    ("etcdserverpb.Cluster", "MemberRemove", Kind::Unary),
    ("etcdserverpb.Cluster", "MemberUpdate", Kind::Unary),
    ("etcdserverpb.Cluster", "MemberList", Kind::Unary),
    ("etcdserverpb.Cluster", "MemberPromote", Kind::Unary),
    ("etcdserverpb.Maintenance", "Alarm", Kind::Unary),
    ("etcdserverpb.Maintenance", "Status", Kind::Unary),
    ("etcdserverpb.Maintenance", "Defragment", Kind::Unary),
    ("etcdserverpb.Maintenance", "Hash", Kind::Unary),
    ("etcdserverpb.Maintenance", "HashKV", Kind::Unary),
    ("etcdserverpb.Maintenance", "Snapshot", Kind::ServerStream),
    ("etcdserverpb.Maintenance", "MoveLeader", Kind::Unary),
    ("etcdserverpb.Maintenance", "Downgrade", Kind::Unary),
    ("etcdserverpb.Auth", "AuthEnable", Kind::Unary),
    ("etcdserverpb.Auth", "AuthDisable", Kind::Unary),
    ("etcdserverpb.Auth", "AuthStatus", Kind::Unary),
    ("etcdserverpb.Auth", "Authenticate", Kind::Unary),
    ("etcdserverpb.Auth", "UserAdd", Kind::Unary),
    ("etcdserverpb.Auth", "UserGet", Kind::Unary),
    ("etcdserverpb.Auth", "UserList", Kind::Unary),
    ("etcdserverpb.Auth", "UserDelete", Kind::Unary),
    ("etcdserverpb.Auth", "UserChangePassword", Kind::Unary),
    ("etcdserverpb.Auth", "UserGrantRole", Kind::Unary),
    ("etcdserverpb.Auth", "UserRevokeRole", Kind::Unary),
    ("etcdserverpb.Auth", "RoleAdd", Kind::Unary),
    ("etcdserverpb.Auth", "RoleGet", Kind::Unary),
    ("etcdserverpb.Auth", "RoleList", Kind::Unary),
    ("etcdserverpb.Auth", "RoleDelete", Kind::Unary),
    ("etcdserverpb.Auth", "RoleGrantPermission", Kind::Unary),
    ("etcdserverpb.Auth", "RoleRevokePermission", Kind::Unary),
    ("v3electionpb.Election", "Campaign", Kind::Unary),
    ("v3electionpb.Election", "Proclaim", Kind::Unary),
    ("v3electionpb.Election", "Leader", Kind::Unary),
    ("v3electionpb.Election", "Observe", Kind::ServerStream),
    ("v3electionpb.Election", "Resign", Kind::Unary),
    ("v3lockpb.Lock", "Lock", Kind::Unary),
    ("v3lockpb.Lock", "Unlock", Kind::Unary),
];

/// gRPC's codes by number, spelled as gRPC-Go's `Code.String()`.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// `Canceled`'s number.
const CANCELED: usize = 1;

/// `Unknown`'s number, for a status that does not parse.
const UNKNOWN: usize = 2;

/// Client API versions whose `etcd_server_client_requests_total` series
/// are resolved at start: etcd's clients send `major.minor`.
const KNOWN_API_VERSIONS: &[&str] = &["3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7"];

/// The longest client API version taken as a label as sent; longer ones
/// (or ones not `digits.digits`) count as `unknown`, so a client cannot
/// make series without bound.
const API_VERSION_BYTES_MAX: usize = 8;

/// One method's series.
struct MethodMetrics {
    kind: Kind,
    started: IntCounter,
    handled: [IntCounter; 17],
    received: IntCounter,
    sent: IntCounter,
    handling: Option<Histogram>,
}

/// `etcd_server_client_requests_total` for one request type. A series is
/// made on its first request (as etcd's appear), then used lock-free.
struct ClientRequests {
    kind: &'static str,
    unknown: OnceLock<IntCounter>,
    known: Vec<(&'static str, OnceLock<IntCounter>)>,
}

/// The gRPC families, resolved per method and code.
pub(crate) struct GrpcMetrics {
    /// By path (`/etcdserverpb.KV/Range`); looked up on every call, so
    /// hashed with hashbrown's default (foldhash), not SipHash: the table
    /// holds the server's own paths and never grows, so no client's path
    /// can make a lookup slow.
    methods: hashbrown::HashMap<String, Arc<MethodMetrics>>,
    client_requests: IntCounterVec,
    unary: ClientRequests,
    stream: ClientRequests,
}

impl GrpcMetrics {
    pub(super) fn new(r: &Families<'_>, extensive: bool) -> Self {
        let labels = &["grpc_type", "grpc_service", "grpc_method"];
        let coded = &["grpc_type", "grpc_service", "grpc_method", "grpc_code"];
        let started = r.counter_vec(
            "grpc_server_started_total",
            "Total number of RPCs started on the server.",
            labels,
        );
        let handled = r.counter_vec(
            "grpc_server_handled_total",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            coded,
        );
        let received = r.counter_vec(
            "grpc_server_msg_received_total",
            "Total number of RPC stream messages received on the server.",
            labels,
        );
        let sent = r.counter_vec(
            "grpc_server_msg_sent_total",
            "Total number of gRPC stream messages sent by the server.",
            labels,
        );
        let handling: Option<HistogramVec> = extensive.then(|| {
            r.histogram_vec(
                "grpc_server_handling_seconds",
                "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
                prometheus::DEFAULT_BUCKETS.to_vec(),
                labels,
            )
        });
        let methods = METHODS
            .iter()
            .map(|&(service, method, kind)| {
                let names = [kind.label(), service, method];
                let handled = CODES
                    .map(|code| handled.with_label_values(&[kind.label(), service, method, code]));
                let metrics = MethodMetrics {
                    kind,
                    started: started.with_label_values(&names),
                    handled,
                    received: received.with_label_values(&names),
                    sent: sent.with_label_values(&names),
                    handling: handling.as_ref().map(|h| h.with_label_values(&names)),
                };
                (format!("/{service}/{method}"), Arc::new(metrics))
            })
            .collect();
        let client_requests = r.counter_vec(
            "etcd_server_client_requests_total",
            "The total number of client requests per client version.",
            &["type", "client_api_version"],
        );
        let resolve = |kind: &'static str| ClientRequests {
            kind,
            unknown: OnceLock::new(),
            known: KNOWN_API_VERSIONS
                .iter()
                .map(|&v| (v, OnceLock::new()))
                .collect(),
        };
        Self {
            unary: resolve("unary"),
            stream: resolve("stream"),
            methods,
            client_requests,
        }
    }

    /// Starts recording a call to `path`; `None` for a method not served
    /// (answered `Unimplemented` before any handler, and not counted, as
    /// with gRPC-Go).
    pub(crate) fn start(&self, path: &str, headers: &http::HeaderMap) -> Option<GrpcCall> {
        let method = self.methods.get(path)?.clone();
        method.started.inc();
        let unary = method.kind == Kind::Unary;
        self.count_client_request(unary, headers);
        if !method.kind.streams_requests() {
            method.received.inc();
        }
        Some(GrpcCall {
            started_at: method.handling.as_ref().map(|_| Instant::now()),
            method,
            done: false,
        })
    }

    /// etcd's interceptors count each call by its kind and the client's
    /// `client-api-version` metadata.
    fn count_client_request(&self, unary: bool, headers: &http::HeaderMap) {
        let requests = if unary { &self.unary } else { &self.stream };
        let series = |slot: &OnceLock<IntCounter>, version: &str| {
            slot.get_or_init(|| {
                self.client_requests
                    .with_label_values(&[requests.kind, version])
            })
            .inc()
        };
        let version = headers
            .get(&CLIENT_API_VERSION)
            .and_then(|v| v.to_str().ok());
        let Some(version) = version else {
            return series(&requests.unknown, "unknown");
        };
        match requests.known.iter().find(|(known, _)| *known == version) {
            Some((_, slot)) => series(slot, version),
            // Rare: a version this table does not know, looked up by name.
            None if is_api_version(version) => self
                .client_requests
                .with_label_values(&[requests.kind, version])
                .inc(),
            None => series(&requests.unknown, "unknown"),
        }
    }
}

/// `digits.digits`, short.
fn is_api_version(version: &str) -> bool {
    version.len() <= API_VERSION_BYTES_MAX
        && version
            .split_once('.')
            .is_some_and(|(major, minor)| is_digits(major) && is_digits(minor))
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// One call being recorded. Counted as handled exactly once: with its
/// status, or `Canceled` if dropped before it had one.
pub(crate) struct GrpcCall {
    method: Arc<MethodMetrics>,
    started_at: Option<Instant>,
    done: bool,
}

impl GrpcCall {
    /// The request body, counting messages for a streaming method.
    pub(crate) fn request_body<B>(&self, body: B) -> Received<B> {
        Received {
            inner: body,
            counter: self
                .method
                .kind
                .streams_requests()
                .then(|| (self.method.received.clone(), MessageCounter::default())),
        }
    }

    /// Follows the response to its end: a trailers-only answer ends the
    /// call now; otherwise its body counts the messages sent and reads
    /// the status from its trailers.
    pub(crate) fn response(
        mut self,
        response: http::Response<tonic::body::Body>,
    ) -> http::Response<tonic::body::Body> {
        if let Some(code) = status_code(response.headers()) {
            self.finish(code);
            return response;
        }
        response.map(|body| {
            tonic::body::Body::new(Observed {
                inner: body,
                counter: MessageCounter::default(),
                call: self,
            })
        })
    }

    /// Ends the call with `code`, its answer made (for a unary call,
    /// its one message, sent on success).
    pub(crate) fn answered(mut self, code: tonic::Code) {
        self.finish(code as usize);
    }

    fn finish(&mut self, code: usize) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let method = &self.method;
        method.handled[code.min(CODES.len() - 1)].inc();
        // A unary answer is one message, sent only on success.
        if !method.kind.streams_responses() && code == 0 {
            method.sent.inc();
        }
        if let (Some(histogram), Some(started_at)) = (&method.handling, self.started_at) {
            histogram.observe(started_at.elapsed().as_secs_f64());
        }
    }
}

impl Drop for GrpcCall {
    fn drop(&mut self) {
        self.finish(CANCELED);
    }
}

/// The code in `grpc-status`, if the headers carry one.
fn status_code(headers: &http::HeaderMap) -> Option<usize> {
    let value = headers.get(&GRPC_STATUS)?;
    let code = std::str::from_utf8(value.as_bytes())
        .ok()
        .and_then(|text| text.parse::<usize>().ok())
        .filter(|&code| code < CODES.len())
        .unwrap_or(UNKNOWN);
    Some(code)
}

/// Counts gRPC messages in a byte stream: each starts with a 5-byte
/// prefix (a flag and a big-endian length), and may be split anywhere
/// across HTTP/2 data frames.
#[derive(Default)]
struct MessageCounter {
    prefix: [u8; 5],
    prefix_bytes: usize,
    /// Bytes of the current message's body not yet seen.
    remaining: u64,
}

impl MessageCounter {
    /// Messages whose prefix ends in `data`.
    fn count(&mut self, mut data: &[u8]) -> u64 {
        let mut messages = 0;
        while !data.is_empty() {
            if self.remaining > 0 {
                let skip = data
                    .len()
                    .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                data = &data[skip..];
                self.remaining -= skip as u64;
                continue;
            }
            let take = data.len().min(self.prefix.len() - self.prefix_bytes);
            self.prefix[self.prefix_bytes..self.prefix_bytes + take].copy_from_slice(&data[..take]);
            self.prefix_bytes += take;
            data = &data[take..];
            if self.prefix_bytes == self.prefix.len() {
                let [_, a, b, c, d] = self.prefix;
                self.remaining = u64::from(u32::from_be_bytes([a, b, c, d]));
                self.prefix_bytes = 0;
                messages += 1;
            }
        }
        messages
    }
}

/// A request body that counts the messages of a streaming call.
pub(crate) struct Received<B> {
    inner: B,
    counter: Option<(IntCounter, MessageCounter)>,
}

impl<B> Received<B> {
    /// A body of a call not recorded: passed through as it is.
    pub(crate) fn plain(body: B) -> Self {
        Self {
            inner: body,
            counter: None,
        }
    }
}

impl<B> HttpBody for Received<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some((received, counter))) =
            (&polled, &mut this.counter)
        {
            if let Some(data) = frame.data_ref() {
                let messages = counter.count(data);
                if messages > 0 {
                    received.inc_by(messages);
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that counts the messages sent and ends the call with
/// the status in its trailers.
struct Observed {
    inner: tonic::body::Body,
    counter: MessageCounter,
    call: GrpcCall,
}

impl HttpBody for Observed {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if this.call.method.kind.streams_responses() {
                        let messages = this.counter.count(data);
                        if messages > 0 {
                            this.call.method.sent.inc_by(messages);
                        }
                    }
                } else if let Some(trailers) = frame.trailers_ref() {
                    this.call.finish(status_code(trailers).unwrap_or(UNKNOWN));
                }
            }
            // An error ends the stream without trailers (hyper resets it).
            Poll::Ready(Some(Err(status))) => this.call.finish(status.code() as usize),
            Poll::Ready(None) => this.call.finish(0),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_counted_across_frames() {
        let mut counter = MessageCounter::default();
        let message = |len: u32| {
            let mut bytes = vec![0];
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend(std::iter::repeat_n(7, len as usize));
            bytes
        };
        let mut stream = message(3);
        stream.extend(message(0));
        stream.extend(message(10));
        assert_eq!(counter.count(&stream), 3);
        // The same bytes a few at a time: prefixes split across frames.
        let mut counter = MessageCounter::default();
        let counted: u64 = stream.chunks(2).map(|chunk| counter.count(chunk)).sum();
        assert_eq!(counted, 3);
    }

    #[test]
    fn api_versions_are_bounded() {
        assert!(is_api_version("3.10"));
        assert!(!is_api_version("3"));
        assert!(!is_api_version("3.4.5"));
        assert!(!is_api_version("12345.6789"));
        assert!(!is_api_version("a.b"));
    }
}
