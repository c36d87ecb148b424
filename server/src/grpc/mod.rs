//! The gRPC side of the client port.
//!
//! Design: tonic's generated `*Server` types do the gRPC framing (Watch has
//! its own [`WatchServer`], which writes live events from their shared
//! encoding; the unary KV calls are framed by `unary` when they are as
//! usual, and by tonic otherwise); our service structs turn each call into
//! a core [`Request`](oxetcd_core::Request) sent through the driver
//! [`Handle`].
//! Election and Lock are clients of the others: each of their calls is a
//! sequence of KV calls and watches made as the caller (see `caller.rs`). A
//! small router of our own dispatches by the path's service name
//! (`/etcdserverpb.KV/Range` → the KV server); an unknown service is
//! answered as gRPC `Unimplemented`, never as an HTTP error.
//! Core errors become gRPC statuses in exactly one place,
//! [`status_from_error`], so clients see etcd's codes and messages; the
//! errors of the calls Election and Lock make for a client are answered
//! as etcd's in-process client hands them back (`Unknown` with etcd's
//! text), in `caller.rs`.

/// Sends one request through the node and answers with the response kind
/// it must come back as: `ask!(self, request => Put, "put")` sends the call's
/// message as whoever its credentials say and answers with
/// `Response::Put`'s message, or the core error as a gRPC status.
macro_rules! ask {
    ($service:expr, $call:ident => $variant:ident, $what:literal) => {{
        let credentials = $service.gate.credentials(&$call);
        ask!(@send $service.handle, credentials,
            oxetcd_core::Request::$variant($call.into_inner()), $variant, $what)
    }};
    ($service:expr, $call:ident => $variant:ident(), $what:literal) => {{
        let credentials = $service.gate.credentials(&$call);
        ask!(@send $service.handle, credentials, oxetcd_core::Request::$variant, $variant, $what)
    }};
    (@send $handle:expr, $credentials:expr, $request:expr, $variant:ident, $what:literal) => {
        ask!(@answer $handle.request_as($credentials, $request).await, $variant, $what)
    };
    (@answer $answered:expr, $variant:ident, $what:literal) => {
        match $answered {
            Ok(oxetcd_core::Response::$variant(response)) => Ok(response),
            Ok(other) => Err($crate::grpc::mismatched($what, &other)),
            Err(e) => Err($crate::grpc::status_from_error(&e)),
        }
    };
}

mod auth;
mod caller;
mod cluster;
mod credentials;
mod election;
mod key_queue;
mod key_watch;
mod kv;
mod lease;
mod lock;
mod maintenance;
mod range;
mod range_stream;
mod unary;
mod watch;
mod watch_pace;

use std::convert::Infallible;
use std::future::{ready, Future};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_util::future::{poll_fn, Either};
use oxetcd_core::storage::KvStore;
use oxetcd_core::{Error, Request};
use oxetcd_proto::etcdserverpb::auth_server::AuthServer;
use oxetcd_proto::etcdserverpb::cluster_server::ClusterServer;
use oxetcd_proto::etcdserverpb::kv_server::KvServer;
use oxetcd_proto::etcdserverpb::lease_server::LeaseServer;
use oxetcd_proto::etcdserverpb::maintenance_server::MaintenanceServer;
use oxetcd_proto::v3electionpb::election_server::ElectionServer;
use oxetcd_proto::v3lockpb::lock_server::LockServer;
use tonic::body::Body;
use tonic::codegen::Service;

pub use auth::AuthService;
pub use cluster::ClusterService;
pub use election::ElectionService;
pub use kv::KvService;
pub use lease::{KeepAliveStream, LeaseService};
pub use lock::LockService;
pub use maintenance::MaintenanceService;
pub use watch::{WatchCodec, WatchMessage, WatchResponses, WatchServer, WatchService, WatchTimer};

use self::credentials::Gate;
use crate::driver::Handle;
use crate::metrics::GrpcCall;

/// What a gRPC message may carry beyond `--max-request-bytes`, so that a
/// request just over the limit reaches the node and gets `etcdserver:
/// request is too large` rather than a transport error.
pub use oxetcd_core::GRPC_OVERHEAD_BYTES;

/// The etcd API version this server reports.
pub const ETCD_VERSION: &str = "3.6.0";

/// Turns a core error into the gRPC status etcd answers with.
pub fn status_from_error(error: &Error) -> tonic::Status {
    tonic::Status::new(tonic::Code::from_i32(error.code() as i32), error.message())
}

/// Identity and location facts the services report.
#[derive(Clone, Debug)]
pub struct Member {
    /// This member's ID.
    pub member_id: u64,
    /// The cluster's ID.
    pub cluster_id: u64,
    /// The data directory, measured for `db_size`.
    pub data_dir: PathBuf,
}

/// Dispatches gRPC requests to the generated servers by service name.
pub struct GrpcRouter<K: KvStore> {
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    kv: KvServer<KvService<K>>,
    /// The KV service itself, for the calls [`unary`] answers.
    kv_service: std::sync::Arc<KvService<K>>,
    /// The largest request message decoded.
    max_decoding: usize,
    range: range::RangeServer<K>,
    maintenance: MaintenanceServer<MaintenanceService<K>>,
    watch: WatchServer<K>,
    lease: LeaseServer<LeaseService<K>>,
    cluster: ClusterServer<ClusterService<K>>,
    auth: AuthServer<AuthService<K>>,
    election: ElectionServer<ElectionService<K>>,
    lock: LockServer<LockService<K>>,
}

impl<K: KvStore> GrpcRouter<K> {
    /// Builds every service over `handle`; messages up to
    /// `max_request_bytes` plus [`GRPC_OVERHEAD_BYTES`] are decoded.
    pub fn new(
        handle: Handle<K>,
        member: Member,
        max_request_bytes: usize,
        bcrypt_cost: u32,
        tokens: crate::auth_token::TokenConfig,
        timer: WatchTimer,
    ) -> Self {
        let decode_max = oxetcd_core::grpc_message_bytes(max_request_bytes);
        let gate = Gate::new(tokens);
        // Responses are as large as the data asked for, as in etcd.
        let encode_max = usize::MAX;
        let kv = std::sync::Arc::new(KvService::new(
            handle.clone(),
            gate.clone(),
            max_request_bytes,
        ));
        Self {
            metrics: handle.metrics().clone(),
            kv_service: kv.clone(),
            max_decoding: decode_max,
            range: range::RangeServer::new(kv.clone(), decode_max),
            kv: KvServer::from_arc(kv)
                .max_decoding_message_size(decode_max)
                .max_encoding_message_size(encode_max),
            watch: WatchServer::new(
                WatchService::new(handle.clone(), gate.clone(), decode_max, timer),
                decode_max,
            ),
            cluster: ClusterServer::new(ClusterService::new(handle.clone(), gate.clone()))
                .max_decoding_message_size(decode_max)
                .max_encoding_message_size(encode_max),
            lease: LeaseServer::new(LeaseService::new(handle.clone(), gate.clone()))
                .max_decoding_message_size(decode_max)
                .max_encoding_message_size(encode_max),
            auth: AuthServer::new(AuthService::new(handle.clone(), gate.clone(), bcrypt_cost))
                .max_decoding_message_size(decode_max)
                .max_encoding_message_size(encode_max),
            election: ElectionServer::new(ElectionService::new(handle.clone(), gate.clone()))
                .max_decoding_message_size(decode_max)
                .max_encoding_message_size(encode_max),
            lock: LockServer::new(LockService::new(handle.clone(), gate.clone()))
                .max_decoding_message_size(decode_max)
                .max_encoding_message_size(encode_max),
            maintenance: MaintenanceServer::new(MaintenanceService::new(handle, gate, member))
                .max_decoding_message_size(decode_max)
                .max_encoding_message_size(encode_max),
        }
    }

    /// Answers one gRPC request. The call starts here, synchronously, so
    /// the future returned holds only the service's boxed call: it is
    /// kept inside the stream's responder, allocated per request, so its
    /// size is paid on every request.
    ///
    /// The body is the connection's for calls from the wire (HTTP/2's
    /// request body, or hyper's for HTTP/1.1), or the JSON gateway's
    /// ([`Body`]) for the calls it transcodes: all take this same path, so
    /// auth, metrics and errors are one.
    pub fn route<B>(
        &self,
        request: http::Request<B>,
    ) -> impl Future<Output = http::Response<Body>> + Send + 'static
    where
        B: http_body::Body<Data = bytes::Bytes> + Unpin + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        // The call is recorded from here to its last frame, or to the
        // answer the router makes itself (or to its drop).
        let recorded = self
            .metrics
            .grpc
            .start(request.uri().path(), request.headers());
        let request = request.map(|body| match &recorded {
            Some(call) => call.request_body(body),
            None => crate::metrics::Received::plain(body),
        });
        let path = request.uri().path();
        let service = path
            .strip_prefix('/')
            .and_then(|rest| rest.split_once('/'))
            .map_or(path, |(service, _method)| service);
        let call = match service {
            "etcdserverpb.KV" => match KvUnary::of(path) {
                Some(method) => {
                    let unary = self.kv_unary(method, request);
                    return Either::Left(Either::Left(
                        async move { finish(unary.await, recorded) },
                    ));
                }
                None => call(self.kv.clone(), request),
            },
            "etcdserverpb.Maintenance" => call(self.maintenance.clone(), request),
            "etcdserverpb.Watch" => call(self.watch.clone(), request),
            "etcdserverpb.Lease" => call(self.lease.clone(), request),
            "etcdserverpb.Cluster" => call(self.cluster.clone(), request),
            "etcdserverpb.Auth" => call(self.auth.clone(), request),
            "v3electionpb.Election" => call(self.election.clone(), request),
            "v3lockpb.Lock" => call(self.lock.clone(), request),
            _ => {
                let status = tonic::Status::unimplemented(format!("unknown service {service}"));
                return Either::Right(ready(status.into_http()));
            }
        };
        Either::Left(Either::Right(async move {
            match call.await {
                Ok(response) => finish(Called::Served(response), recorded),
                Err(never) => match never {},
            }
        }))
    }
}

/// What a call answered.
enum Called {
    /// The router's own answer ([`unary::answer`]), its status known as
    /// it was made.
    Known(http::Response<Body>, tonic::Code),
    /// A tonic service's response, its status read as it goes out.
    Served(http::Response<Body>),
}

/// The response of a call, recorded: a known status at once (as
/// go-grpc-prometheus counts a call handled when its handler returns),
/// a served response as it goes out.
fn finish(called: Called, recorded: Option<GrpcCall>) -> http::Response<Body> {
    match called {
        Called::Known(response, code) => {
            if let Some(call) = recorded {
                call.answered(code);
            }
            response
        }
        Called::Served(response) => {
            let response = oversized_as_etcd(response);
            match recorded {
                Some(call) => call.response(response),
                None => response,
            }
        }
    }
}

/// The unary KV methods [`unary`] answers.
#[derive(Clone, Copy, Debug)]
enum KvUnary {
    Range,
    Put,
    DeleteRange,
    Txn,
    Compact,
}

impl KvUnary {
    fn of(path: &str) -> Option<Self> {
        Some(match path.strip_prefix("/etcdserverpb.KV/")? {
            "Range" => Self::Range,
            "Put" => Self::Put,
            "DeleteRange" => Self::DeleteRange,
            "Txn" => Self::Txn,
            "Compact" => Self::Compact,
            _ => return None,
        })
    }
}

impl<K: KvStore> GrpcRouter<K> {
    /// Answers a unary KV call through [`unary`]; what it does not serve goes
    /// to the generated server (ranges to [`range::RangeServer`]).
    fn kv_unary<B>(
        &self,
        method: KvUnary,
        request: http::Request<RequestBody<B>>,
    ) -> Pin<Box<dyn Future<Output = Called> + Send>>
    where
        B: http_body::Body<Data = bytes::Bytes> + Unpin + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        let service = self.kv_service.clone();
        let kv = self.kv.clone();
        let range = self.range.clone();
        let max_decoding = self.max_decoding;
        let to_tonic = move |request| async move {
            let served = match method {
                KvUnary::Range => call(range, request).await,
                _ => call(kv, request).await,
            };
            match served {
                Ok(response) => Called::Served(response),
                Err(never) => match never {},
            }
        };
        Box::pin(async move {
            // In a block of its own, so that what is read and decoded
            // takes no room in the future while the node answers.
            let (credentials, request) = {
                let (parts, message) = match unary::read(request, max_decoding).await {
                    unary::Read::Message(parts, message) => (parts, message),
                    unary::Read::Tonic(request) => return to_tonic(request).await,
                };
                // One request sent for every method, so the future holds
                // one request's state, not one per method.
                let decoded = match method {
                    KvUnary::Range => unary::decode(parts, message).map(Request::Range),
                    KvUnary::Put => unary::decode(parts, message).map(Request::Put),
                    KvUnary::DeleteRange => unary::decode(parts, message).map(Request::DeleteRange),
                    KvUnary::Txn => unary::decode(parts, message).map(Request::Txn),
                    KvUnary::Compact => unary::decode(parts, message).map(Request::Compact),
                };
                match decoded {
                    unary::Decoded::Call(parts, request) => (service.credentials(&parts), request),
                    unary::Decoded::Tonic(request) => return to_tonic(*request).await,
                }
            };
            let answered = service.ask(credentials, request).await;
            let (response, code) = match method {
                KvUnary::Range => {
                    let range = ask!(@answer answered, Range, "range");
                    unary::answer(range, range::encode_draining)
                }
                KvUnary::Put => unary::answer(ask!(@answer answered, Put, "put"), encode_whole),
                KvUnary::DeleteRange => {
                    let deleted = ask!(@answer answered, DeleteRange, "delete range");
                    unary::answer(deleted, encode_whole)
                }
                KvUnary::Txn => unary::answer(ask!(@answer answered, Txn, "txn"), encode_whole),
                KvUnary::Compact => {
                    let compacted = ask!(@answer answered, Compact, "compact");
                    unary::answer(compacted, encode_whole)
                }
            };
            Called::Known(response, code)
        })
    }
}

/// Writes `message` after reserving its exact size.
fn encode_whole<M: prost::Message>(message: M, buffer: &mut Vec<u8>, reserve: unary::Reserve) {
    reserve(buffer, message.encoded_len());
    message.encode_raw(buffer);
}

/// Rewrites the status of a request refused for its size while decoding to
/// the code and message etcd's clients see for it (`ResourceExhausted`,
/// `grpc: received message larger than max (N vs. M)`); the codec reports
/// it as `OutOfRange` with its own wording.
fn oversized_as_etcd(response: http::Response<Body>) -> http::Response<Body> {
    const CODEC_PREFIX: &str = "Error, decoded message length too large: found ";
    let out_of_range = response
        .headers()
        .get(&crate::metrics::GRPC_STATUS)
        .is_some_and(|code| code.as_bytes() == b"11");
    if !out_of_range {
        return response;
    }
    let Some(status) = tonic::Status::from_header_map(response.headers()) else {
        return response;
    };
    match parse_oversized(status.message().strip_prefix(CODEC_PREFIX)) {
        Some((found, limit)) => tonic::Status::resource_exhausted(format!(
            "grpc: received message larger than max ({found} vs. {limit})"
        ))
        .into_http(),
        None => response,
    }
}

/// Reads `N bytes, the limit is: M bytes` into `(N, M)`.
fn parse_oversized(rest: Option<&str>) -> Option<(u64, u64)> {
    let (found, rest) = rest?.split_once(" bytes, the limit is: ")?;
    let limit = rest.strip_suffix(" bytes")?;
    Some((found.parse().ok()?, limit.parse().ok()?))
}

/// A call's request body, its messages counted for the metrics.
type RequestBody<B> = crate::metrics::Received<B>;

/// What a generated server's call returns (tonic boxes every call).
type CallFuture = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

/// Starts `request` on `service`. tonic's generated servers are always
/// ready, so the call starts at once, and their call is already boxed, so
/// it is returned as it is; were one ever not ready, the call waits for
/// readiness inside a boxed future of its own.
fn call<S, B>(mut service: S, request: http::Request<B>) -> CallFuture
where
    S: Service<
            http::Request<B>,
            Response = http::Response<Body>,
            Error = Infallible,
            Future = CallFuture,
        > + Send
        + 'static,
    B: Send + 'static,
{
    match service.poll_ready(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Ok(())) => service.call(request),
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => Box::pin(async move {
            match poll_fn(|cx| service.poll_ready(cx)).await {
                Ok(()) => service.call(request).await,
                Err(never) => match never {},
            }
        }),
    }
}

/// The answer a service gets when the node replied with the wrong kind of
/// response (a bug, reported rather than panicking).
fn mismatched(expected: &str, got: &oxetcd_core::Response) -> tonic::Status {
    tracing::error!(
        expected,
        ?got,
        "the node answered with the wrong response kind"
    );
    tonic::Status::internal(format!("etcdserver: unexpected response to {expected}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_etcd_statuses() {
        let cases = [
            (
                Error::Compacted,
                tonic::Code::OutOfRange,
                "etcdserver: mvcc: required revision has been compacted",
            ),
            (
                Error::FutureRevision,
                tonic::Code::OutOfRange,
                "etcdserver: mvcc: required revision is a future revision",
            ),
            (
                Error::RequestTooLarge,
                tonic::Code::InvalidArgument,
                "etcdserver: request is too large",
            ),
            (
                Error::TooManyRequests,
                tonic::Code::ResourceExhausted,
                "etcdserver: too many requests",
            ),
            (
                Error::EmptyKey,
                tonic::Code::InvalidArgument,
                "etcdserver: key is not provided",
            ),
            (
                Error::LeaseNotFound,
                tonic::Code::NotFound,
                "etcdserver: requested lease not found",
            ),
            (
                Error::NoLeader,
                tonic::Code::Unavailable,
                "etcdserver: no leader",
            ),
            (
                Error::Stopped,
                tonic::Code::Unavailable,
                "etcdserver: server stopped",
            ),
            (
                Error::Unimplemented("etcdserverpb.Lease"),
                tonic::Code::Unimplemented,
                "unknown service etcdserverpb.Lease",
            ),
        ];
        for (error, code, message) in cases {
            let status = status_from_error(&error);
            assert_eq!(status.code(), code, "{error:?}");
            assert_eq!(status.message(), message, "{error:?}");
        }
    }

    #[test]
    fn oversized_messages_get_etcds_status() {
        let codec = tonic::Status::out_of_range(
            "Error, decoded message length too large: found 600007 bytes, the limit is: 525288 bytes",
        );
        let response = oversized_as_etcd(codec.into_http());
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "grpc: received message larger than max (600007 vs. 525288)"
        );

        let other = status_from_error(&Error::Compacted).into_http();
        let response = oversized_as_etcd(other);
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::OutOfRange);
    }

    #[test]
    fn every_core_code_is_a_grpc_code() {
        use oxetcd_core::Code;
        for code in [
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::Unauthenticated,
        ] {
            let grpc = tonic::Code::from_i32(code as i32);
            // from_i32 answers Unknown for a number it does not know.
            if !matches!(code, Code::Unknown) {
                assert_ne!(grpc, tonic::Code::Unknown, "{code:?}");
            }
            assert_eq!(grpc as i32, code as i32, "{code:?}");
        }
    }
}
