//! The `etcdserverpb.KV` service: each call is one core request through the
//! driver. Validation and limits live in the node, not here.

use oxetcd_core::storage::KvStore;
use oxetcd_core::{Request, Response};
use oxetcd_proto::etcdserverpb::kv_server::Kv;
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use tonic::Status;

use super::{mismatched, status_from_error};
use crate::driver::Handle;

/// Serves `etcdserverpb.KV` through the node.
pub struct KvService<K: KvStore> {
    handle: Handle<K>,
}

impl<K: KvStore> KvService<K> {
    /// A service sending its requests to `handle`.
    pub fn new(handle: Handle<K>) -> Self {
        Self { handle }
    }

    async fn request(&self, request: Request) -> Result<Response, Status> {
        self.handle
            .request(request)
            .await
            .map_err(|e| status_from_error(&e))
    }
}

#[tonic::async_trait]
impl<K: KvStore> Kv for KvService<K> {
    async fn range(
        &self,
        request: tonic::Request<RangeRequest>,
    ) -> Result<tonic::Response<RangeResponse>, Status> {
        match self.request(Request::Range(request.into_inner())).await? {
            Response::Range(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("range", &other)),
        }
    }

    async fn put(
        &self,
        request: tonic::Request<PutRequest>,
    ) -> Result<tonic::Response<PutResponse>, Status> {
        match self.request(Request::Put(request.into_inner())).await? {
            Response::Put(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("put", &other)),
        }
    }

    async fn delete_range(
        &self,
        request: tonic::Request<DeleteRangeRequest>,
    ) -> Result<tonic::Response<DeleteRangeResponse>, Status> {
        match self
            .request(Request::DeleteRange(request.into_inner()))
            .await?
        {
            Response::DeleteRange(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("delete range", &other)),
        }
    }

    async fn txn(
        &self,
        request: tonic::Request<TxnRequest>,
    ) -> Result<tonic::Response<TxnResponse>, Status> {
        match self.request(Request::Txn(request.into_inner())).await? {
            Response::Txn(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("txn", &other)),
        }
    }

    async fn compact(
        &self,
        request: tonic::Request<CompactionRequest>,
    ) -> Result<tonic::Response<CompactionResponse>, Status> {
        match self.request(Request::Compact(request.into_inner())).await? {
            Response::Compact(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("compact", &other)),
        }
    }
}
