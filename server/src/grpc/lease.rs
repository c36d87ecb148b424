//! The `etcdserverpb.Lease` service: each call is one core request through
//! the driver; `LeaseKeepAlive` answers each request of its stream in turn.
//! The node already answers a missing lease the way etcd's clients expect
//! (TTL 0 for a keep-alive, -1 for a time-to-live).

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use oxetcd_core::storage::KvStore;
use oxetcd_proto::etcdserverpb::lease_server::Lease;
use oxetcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse,
    LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use tonic::{Status, Streaming};

use super::credentials::Gate;
use crate::driver::Handle;

/// Serves `etcdserverpb.Lease` through the node.
pub struct LeaseService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
}

impl<K: KvStore> LeaseService<K> {
    /// A service sending its requests to `handle`.
    pub fn new(handle: Handle<K>, gate: Gate) -> Self {
        Self { handle, gate }
    }
}

/// The responses of one keep-alive stream.
pub type KeepAliveStream =
    Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl<K: KvStore> Lease for LeaseService<K> {
    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_grant(
        &self,
        request: tonic::Request<LeaseGrantRequest>,
    ) -> Result<tonic::Response<LeaseGrantResponse>, Status> {
        ask!(self, request => LeaseGrant, "lease grant").map(tonic::Response::new)
    }

    async fn lease_revoke(
        &self,
        request: tonic::Request<LeaseRevokeRequest>,
    ) -> Result<tonic::Response<LeaseRevokeResponse>, Status> {
        ask!(self, request => LeaseRevoke, "lease revoke").map(tonic::Response::new)
    }

    async fn lease_keep_alive(
        &self,
        request: tonic::Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<tonic::Response<Self::LeaseKeepAliveStream>, Status> {
        let handle = self.handle.clone();
        let requests = request.into_inner();
        // One request at a time, in order; an error ends the stream.
        let responses = requests
            .take_while(|request| std::future::ready(request.is_ok()))
            .then(move |request| {
                let handle = handle.clone();
                async move {
                    let request = request?;
                    ask!(@send handle, oxetcd_core::auth::Credentials::Anonymous, oxetcd_core::Request::LeaseKeepAlive(request), LeaseKeepAlive, "lease keep-alive")
                }
            });
        Ok(tonic::Response::new(Box::pin(responses)))
    }

    async fn lease_time_to_live(
        &self,
        request: tonic::Request<LeaseTimeToLiveRequest>,
    ) -> Result<tonic::Response<LeaseTimeToLiveResponse>, Status> {
        ask!(self, request => LeaseTimeToLive, "lease time-to-live").map(tonic::Response::new)
    }

    async fn lease_leases(
        &self,
        request: tonic::Request<LeaseLeasesRequest>,
    ) -> Result<tonic::Response<LeaseLeasesResponse>, Status> {
        ask!(self, request => LeaseLeases(), "lease leases").map(tonic::Response::new)
    }
}
