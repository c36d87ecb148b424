//! KV calls made on a client's behalf: what the Election and Lock services
//! are built from.
//!
//! Design. etcd 3.4 serves Election and Lock with its own Go client over
//! the KV, Lease and Watch APIs, inside the server; we send the same calls
//! through the driver [`Handle`] with the caller's credentials, so every
//! one of them is checked as the KV call it is. etcd's client hands those
//! calls' errors back as plain Go errors, which gRPC answers as `Unknown`
//! with the error's text; [`Caller`] gives the same answer, so
//! `etcdserver: requested lease not found` from a `Campaign` is code 2 on
//! both servers.

use oxetcd_core::auth::Credentials;
use oxetcd_core::storage::KvStore;
use oxetcd_core::{Error, Request, Response};
use oxetcd_proto::etcdserverpb::{
    DeleteRangeRequest, DeleteRangeResponse, LeaseGrantRequest, RangeRequest, RangeResponse,
    TxnRequest, TxnResponse,
};
use tonic::Status;

use crate::driver::Handle;

/// Seconds a lease granted for a call without one lives: etcd's session
/// default, which its Election and Lock servers grant then and never
/// refresh.
const SESSION_TTL_S: i64 = 60;

/// One client's view of the node: requests sent as its credentials.
pub(crate) struct Caller<K: KvStore> {
    handle: Handle<K>,
    credentials: Credentials,
}

impl<K: KvStore> Clone for Caller<K> {
    fn clone(&self) -> Self {
        Self {
            handle: self.handle.clone(),
            credentials: self.credentials.clone(),
        }
    }
}

impl<K: KvStore> Caller<K> {
    pub(crate) fn new(handle: Handle<K>, credentials: Credentials) -> Self {
        Self {
            handle,
            credentials,
        }
    }

    pub(crate) fn handle(&self) -> &Handle<K> {
        &self.handle
    }

    pub(crate) fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    pub(crate) async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Status> {
        match self.send(Request::Range(request)).await? {
            Response::Range(response) => Ok(response),
            other => Err(super::mismatched("range", &other)),
        }
    }

    pub(crate) async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Status> {
        match self.send(Request::Txn(request)).await? {
            Response::Txn(response) => Ok(response),
            other => Err(super::mismatched("txn", &other)),
        }
    }

    pub(crate) async fn delete(&self, key: Vec<u8>) -> Result<DeleteRangeResponse, Status> {
        let request = DeleteRangeRequest {
            key,
            ..Default::default()
        };
        match self.send(Request::DeleteRange(request)).await? {
            Response::DeleteRange(response) => Ok(response),
            other => Err(super::mismatched("delete range", &other)),
        }
    }

    /// The lease a call works under: `lease` as given, or for 0 a lease
    /// granted now for [`SESSION_TTL_S`], as etcd's session does. An
    /// unknown lease is not checked here: the write under it fails.
    pub(crate) async fn session_lease(&self, lease: i64) -> Result<i64, Status> {
        if lease != 0 {
            return Ok(lease);
        }
        let request = LeaseGrantRequest {
            ttl: SESSION_TTL_S,
            id: 0,
        };
        match self.send(Request::LeaseGrant(request)).await? {
            Response::LeaseGrant(response) => Ok(response.id),
            other => Err(super::mismatched("lease grant", &other)),
        }
    }

    /// Sends `request` and forgets it: for a call whose client is gone.
    pub(crate) fn send_detached(&self, request: Request) {
        self.handle
            .request_detached(self.credentials.clone(), request);
    }

    async fn send(&self, request: Request) -> Result<Response, Status> {
        self.handle
            .request_as(self.credentials.clone(), request)
            .await
            .map_err(|e| as_client_error(&e))
    }
}

/// The status etcd's Election and Lock servers answer for an error of a
/// call they made (see the module docs).
pub(crate) fn as_client_error(error: &Error) -> Status {
    recipe_error(error.message())
}

/// An error of the Election or Lock recipe itself (`election: not leader`):
/// a plain Go error in etcd, so gRPC's `Unknown`.
pub(crate) fn recipe_error(message: impl Into<String>) -> Status {
    Status::unknown(message)
}
