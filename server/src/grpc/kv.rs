//! The `etcdserverpb.KV` service: each call is one core request through the
//! driver. Validation and limits live in the node, not here. `RangeStream`
//! is a sequence of ranges planned by [`super::range_stream`].

use std::future::Future;

use oxetcd_core::auth::Credentials;
use oxetcd_core::storage::KvStore;
use oxetcd_core::{Request, Response};
use oxetcd_proto::etcdserverpb::kv_server::Kv;
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, RangeStreamResponse, TxnRequest, TxnResponse,
};
use tonic::codegen::BoxStream;
use tonic::Status;

use super::credentials::Gate;
use super::range_stream::{ChunkPlan, Next};
use super::{mismatched, status_from_error};
use crate::driver::Handle;

/// Serves `etcdserverpb.KV` through the node.
pub struct KvService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
    /// Bytes a `RangeStream` chunk aims at (`--max-request-bytes`).
    chunk_bytes: usize,
}

impl<K: KvStore> KvService<K> {
    /// A service sending its requests to `handle`; `RangeStream` chunks aim
    /// at `chunk_bytes`.
    pub fn new(handle: Handle<K>, gate: Gate, chunk_bytes: usize) -> Self {
        Self {
            handle,
            gate,
            chunk_bytes,
        }
    }
}

/// For the router's own unary path ([`super::unary`]), which sends a
/// call's request itself, without tonic's request or the trait's boxed
/// future.
impl<K: KvStore> KvService<K> {
    /// The credentials of a call with these parts.
    pub(super) fn credentials(&self, parts: &http::request::Parts) -> Credentials {
        self.gate.credentials_of(&parts.headers, &parts.extensions)
    }

    /// Sends `request` through the node as whoever `credentials` say.
    /// The handle's own future, not one around it: a caller's future holds
    /// it, so each level would add its arguments' room and a move.
    pub(super) fn ask(
        &self,
        credentials: Credentials,
        request: Request,
    ) -> impl Future<Output = Result<Response, oxetcd_core::Error>> + Send + '_ {
        self.handle.request_as(credentials, request)
    }
}

#[tonic::async_trait]
impl<K: KvStore> Kv for KvService<K> {
    type RangeStreamStream = BoxStream<RangeStreamResponse>;

    async fn range(
        &self,
        request: tonic::Request<RangeRequest>,
    ) -> Result<tonic::Response<RangeResponse>, Status> {
        ask!(self, request => Range, "range").map(tonic::Response::new)
    }

    /// One range per chunk, each through the node with the caller's
    /// credentials; the next is read only once the previous was taken.
    /// A learner refuses it even serializable, as etcd refuses every
    /// stream there.
    async fn range_stream(
        &self,
        request: tonic::Request<RangeRequest>,
    ) -> Result<tonic::Response<Self::RangeStreamStream>, Status> {
        let credentials = self.gate.credentials(&request);
        let plan = ChunkPlan::new(request.into_inner(), self.chunk_bytes)?;
        match self.handle.request(Request::Status).await {
            Ok(Response::Status(status)) if status.is_learner => {
                return Err(Status::failed_precondition(
                    "etcdserver: rpc not supported for learner",
                ))
            }
            Ok(_) => {}
            Err(e) => return Err(status_from_error(&e)),
        }
        let handle = self.handle.clone();
        let stream = futures_util::stream::unfold(Some(plan), move |plan| {
            let handle = handle.clone();
            let credentials = credentials.clone();
            async move {
                let mut plan = plan?;
                let Next::Read(range) = plan.next() else {
                    return None;
                };
                match handle.request_as(credentials, Request::Range(range)).await {
                    Ok(Response::Range(chunk)) => Some((Ok(plan.answered(chunk)), Some(plan))),
                    Ok(other) => Some((Err(mismatched("range stream", &other)), None)),
                    Err(e) => Some((Err(status_from_error(&e)), None)),
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(stream)))
    }

    async fn put(
        &self,
        request: tonic::Request<PutRequest>,
    ) -> Result<tonic::Response<PutResponse>, Status> {
        ask!(self, request => Put, "put").map(tonic::Response::new)
    }

    async fn delete_range(
        &self,
        request: tonic::Request<DeleteRangeRequest>,
    ) -> Result<tonic::Response<DeleteRangeResponse>, Status> {
        ask!(self, request => DeleteRange, "delete range").map(tonic::Response::new)
    }

    async fn txn(
        &self,
        request: tonic::Request<TxnRequest>,
    ) -> Result<tonic::Response<TxnResponse>, Status> {
        ask!(self, request => Txn, "txn").map(tonic::Response::new)
    }

    async fn compact(
        &self,
        request: tonic::Request<CompactionRequest>,
    ) -> Result<tonic::Response<CompactionResponse>, Status> {
        ask!(self, request => Compact, "compact").map(tonic::Response::new)
    }
}
