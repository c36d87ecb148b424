//! The `etcdserverpb.Cluster` service: every call is a membership request
//! to the node, which answers with etcd's responses and errors.

use oxetcd_core::storage::KvStore;
use oxetcd_core::{Request, Response};
use oxetcd_proto::etcdserverpb::cluster_server::Cluster;
use oxetcd_proto::etcdserverpb::{
    MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse,
};
use tonic::Status;

use super::{mismatched, status_from_error};
use crate::driver::Handle;

/// Serves `etcdserverpb.Cluster`.
pub struct ClusterService<K: KvStore> {
    handle: Handle<K>,
}

impl<K: KvStore> ClusterService<K> {
    /// A service sending its requests through `handle`.
    pub fn new(handle: Handle<K>) -> Self {
        Self { handle }
    }

    async fn call(&self, request: Request) -> Result<Response, Status> {
        self.handle
            .request(request)
            .await
            .map_err(|e| status_from_error(&e))
    }
}

#[tonic::async_trait]
impl<K: KvStore> Cluster for ClusterService<K> {
    async fn member_add(
        &self,
        request: tonic::Request<MemberAddRequest>,
    ) -> Result<tonic::Response<MemberAddResponse>, Status> {
        match self.call(Request::MemberAdd(request.into_inner())).await? {
            Response::MemberAdd(r) => Ok(tonic::Response::new(r)),
            other => Err(mismatched("member add", &other)),
        }
    }

    async fn member_remove(
        &self,
        request: tonic::Request<MemberRemoveRequest>,
    ) -> Result<tonic::Response<MemberRemoveResponse>, Status> {
        match self
            .call(Request::MemberRemove(request.into_inner()))
            .await?
        {
            Response::MemberRemove(r) => Ok(tonic::Response::new(r)),
            other => Err(mismatched("member remove", &other)),
        }
    }

    async fn member_update(
        &self,
        request: tonic::Request<MemberUpdateRequest>,
    ) -> Result<tonic::Response<MemberUpdateResponse>, Status> {
        match self
            .call(Request::MemberUpdate(request.into_inner()))
            .await?
        {
            Response::MemberUpdate(r) => Ok(tonic::Response::new(r)),
            other => Err(mismatched("member update", &other)),
        }
    }

    async fn member_list(
        &self,
        request: tonic::Request<MemberListRequest>,
    ) -> Result<tonic::Response<MemberListResponse>, Status> {
        match self.call(Request::MemberList(request.into_inner())).await? {
            Response::MemberList(r) => Ok(tonic::Response::new(r)),
            other => Err(mismatched("member list", &other)),
        }
    }

    async fn member_promote(
        &self,
        request: tonic::Request<MemberPromoteRequest>,
    ) -> Result<tonic::Response<MemberPromoteResponse>, Status> {
        match self
            .call(Request::MemberPromote(request.into_inner()))
            .await?
        {
            Response::MemberPromote(r) => Ok(tonic::Response::new(r)),
            other => Err(mismatched("member promote", &other)),
        }
    }
}
