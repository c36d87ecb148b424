//! The `etcdserverpb.KV` service: each call is one core request through the
//! driver. Validation and limits live in the node, not here.

use oxetcd_core::storage::KvStore;
use oxetcd_proto::etcdserverpb::kv_server::Kv;
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use tonic::Status;

use super::credentials::Gate;
use crate::driver::Handle;

/// Serves `etcdserverpb.KV` through the node.
pub struct KvService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
}

impl<K: KvStore> KvService<K> {
    /// A service sending its requests to `handle`.
    pub fn new(handle: Handle<K>, gate: Gate) -> Self {
        Self { handle, gate }
    }
}

#[tonic::async_trait]
impl<K: KvStore> Kv for KvService<K> {
    async fn range(
        &self,
        request: tonic::Request<RangeRequest>,
    ) -> Result<tonic::Response<RangeResponse>, Status> {
        ask!(self, request => Range, "range").map(tonic::Response::new)
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
