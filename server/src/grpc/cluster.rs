//! The `etcdserverpb.Cluster` service: every call is a membership request
//! to the node, which answers with etcd's responses and errors.

use oxetcd_core::storage::KvStore;
use oxetcd_proto::etcdserverpb::cluster_server::Cluster;
use oxetcd_proto::etcdserverpb::{
    MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse,
};
use tonic::Status;

use super::credentials::Gate;
use crate::driver::Handle;
use oxetcd_core::auth::Credentials;

/// Serves `etcdserverpb.Cluster`.
pub struct ClusterService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
}

impl<K: KvStore> ClusterService<K> {
    /// A service sending its requests through `handle`.
    pub fn new(handle: Handle<K>, gate: Gate) -> Self {
        Self { handle, gate }
    }
}

#[tonic::async_trait]
impl<K: KvStore> Cluster for ClusterService<K> {
    async fn member_add(
        &self,
        request: tonic::Request<MemberAddRequest>,
    ) -> Result<tonic::Response<MemberAddResponse>, Status> {
        ask!(self, request => MemberAdd, "member add").map(tonic::Response::new)
    }

    async fn member_remove(
        &self,
        request: tonic::Request<MemberRemoveRequest>,
    ) -> Result<tonic::Response<MemberRemoveResponse>, Status> {
        ask!(self, request => MemberRemove, "member remove").map(tonic::Response::new)
    }

    async fn member_update(
        &self,
        request: tonic::Request<MemberUpdateRequest>,
    ) -> Result<tonic::Response<MemberUpdateResponse>, Status> {
        ask!(self, request => MemberUpdate, "member update").map(tonic::Response::new)
    }

    async fn member_list(
        &self,
        request: tonic::Request<MemberListRequest>,
    ) -> Result<tonic::Response<MemberListResponse>, Status> {
        // etcd lists members without looking at the caller's token.
        let list = oxetcd_core::Request::MemberList(request.into_inner());
        ask!(@send self.handle, Credentials::Anonymous, list, MemberList, "member list")
            .map(tonic::Response::new)
    }

    async fn member_promote(
        &self,
        request: tonic::Request<MemberPromoteRequest>,
    ) -> Result<tonic::Response<MemberPromoteResponse>, Status> {
        ask!(self, request => MemberPromote, "member promote").map(tonic::Response::new)
    }
}
