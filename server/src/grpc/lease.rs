//! The `etcdserverpb.Lease` service: each call is one core request through
//! the driver; `LeaseKeepAlive` answers each request of its stream in turn.
//! The node already answers a missing lease the way etcd's clients expect
//! (TTL 0 for a keep-alive, -1 for a time-to-live).

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use oxetcd_core::storage::KvStore;
use oxetcd_core::{Request, Response};
use oxetcd_proto::etcdserverpb::lease_server::Lease;
use oxetcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse,
    LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use tonic::{Status, Streaming};

use super::{mismatched, status_from_error};
use crate::driver::Handle;

/// Serves `etcdserverpb.Lease` through the node.
pub struct LeaseService<K: KvStore> {
    handle: Handle<K>,
}

impl<K: KvStore> LeaseService<K> {
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
        match self
            .request(Request::LeaseGrant(request.into_inner()))
            .await?
        {
            Response::LeaseGrant(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("lease grant", &other)),
        }
    }

    async fn lease_revoke(
        &self,
        request: tonic::Request<LeaseRevokeRequest>,
    ) -> Result<tonic::Response<LeaseRevokeResponse>, Status> {
        match self
            .request(Request::LeaseRevoke(request.into_inner()))
            .await?
        {
            Response::LeaseRevoke(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("lease revoke", &other)),
        }
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
                    match handle.request(Request::LeaseKeepAlive(request)).await {
                        Ok(Response::LeaseKeepAlive(response)) => Ok(response),
                        Ok(other) => Err(mismatched("lease keep-alive", &other)),
                        Err(e) => Err(status_from_error(&e)),
                    }
                }
            });
        Ok(tonic::Response::new(Box::pin(responses)))
    }

    async fn lease_time_to_live(
        &self,
        request: tonic::Request<LeaseTimeToLiveRequest>,
    ) -> Result<tonic::Response<LeaseTimeToLiveResponse>, Status> {
        match self
            .request(Request::LeaseTimeToLive(request.into_inner()))
            .await?
        {
            Response::LeaseTimeToLive(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("lease time-to-live", &other)),
        }
    }

    async fn lease_leases(
        &self,
        _request: tonic::Request<LeaseLeasesRequest>,
    ) -> Result<tonic::Response<LeaseLeasesResponse>, Status> {
        match self.request(Request::LeaseLeases).await? {
            Response::LeaseLeases(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched("lease leases", &other)),
        }
    }
}
