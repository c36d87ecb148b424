//! The `etcdserverpb.Maintenance` service. `Status` combines the node's raft
//! state (leader, term, indexes, learner flag) with what only the server
//! knows (version, database size); `MoveLeader` goes to the node;
//! `Snapshot` streams the backend as an etcd snapshot: a bolt database
//! with etcd's schema and its SHA-256 (see `oxetcd_storage::snapshot_file`),
//! so etcd's tools read it; `Alarm` goes through the log; `Hash` and
//! `HashKV` hash this member's own backend; `Downgrade` goes to the node,
//! which holds the cluster version and the downgrade job.

use std::path::Path;

use oxetcd_core::storage::KvStore;
use oxetcd_core::{Request, Response};
use oxetcd_proto::etcdserverpb::maintenance_server::Maintenance;
use oxetcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, DefragmentRequest, DefragmentResponse, DowngradeRequest,
    DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse, MoveLeaderRequest,
    MoveLeaderResponse, ResponseHeader, SnapshotRequest, SnapshotResponse, StatusRequest,
    StatusResponse,
};
use tonic::codegen::BoxStream;
use tonic::Status;

use super::credentials::Gate;
use super::{mismatched, status_from_error, Member, ETCD_VERSION};
use crate::driver::Handle;
use oxetcd_core::auth::{AuthRead, AuthRequest};

/// Serves `etcdserverpb.Maintenance`.
pub struct MaintenanceService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
    member: Member,
}

impl<K: KvStore> MaintenanceService<K> {
    /// A service answering from `handle` and reporting `member`.
    pub fn new(handle: Handle<K>, gate: Gate, member: Member) -> Self {
        Self {
            handle,
            gate,
            member,
        }
    }
}

impl<K: KvStore> MaintenanceService<K> {
    /// Maintenance this member serves itself (hashes, snapshots,
    /// defragmentation) is for administrators once auth is on, as in etcd,
    /// whose refusals here are its auth package's own errors, passed on
    /// unconverted: code `Unknown`, `auth: …`.
    async fn check_admin<T>(&self, request: &tonic::Request<T>) -> Result<(), Status> {
        let who = self.gate.credentials(request);
        let read = Request::Auth(AuthRequest::Read(AuthRead::Admin));
        match self.handle.request_as(who, read).await {
            Ok(_) => Ok(()),
            Err(e) => match e.auth_package_message() {
                Some(message) => Err(Status::new(tonic::Code::Unknown, message)),
                None => Err(status_from_error(&e)),
            },
        }
    }
}

#[tonic::async_trait]
impl<K: KvStore> Maintenance for MaintenanceService<K> {
    type SnapshotStream = BoxStream<SnapshotResponse>;

    async fn status(
        &self,
        _request: tonic::Request<StatusRequest>,
    ) -> Result<tonic::Response<StatusResponse>, Status> {
        let response = self.handle.request(Request::Status).await;
        let mut status = match response.map_err(|e| status_from_error(&e))? {
            Response::Status(status) => status,
            other => return Err(mismatched("status", &other)),
        };
        if status.version.is_empty() {
            status.version = ETCD_VERSION.to_owned();
        }
        let db_size = i64::try_from(backend_size(&self.member.data_dir)).unwrap_or(i64::MAX);
        status.db_size = db_size;
        if status.db_size_in_use == 0 {
            status.db_size_in_use = db_size;
        }
        if status.header.is_none() {
            let meta = self
                .handle
                .meta()
                .await
                .map_err(|e| status_from_error(&e))?;
            status.header = Some(ResponseHeader {
                cluster_id: self.member.cluster_id,
                member_id: self.member.member_id,
                revision: meta.revision,
                raft_term: status.raft_term,
            });
        }
        Ok(tonic::Response::new(status))
    }

    /// Lists, raises or clears alarms through the log, as etcd's does
    /// (no auth check there either).
    async fn alarm(
        &self,
        request: tonic::Request<AlarmRequest>,
    ) -> Result<tonic::Response<AlarmResponse>, Status> {
        let who = self.gate.credentials(&request);
        let request = Request::Alarm(request.into_inner());
        match self.handle.request_as(who, request).await {
            Ok(Response::Alarm(response)) => Ok(tonic::Response::new(response)),
            Ok(other) => Err(mismatched("alarm", &other)),
            Err(e) => Err(status_from_error(&e)),
        }
    }

    async fn defragment(
        &self,
        request: tonic::Request<DefragmentRequest>,
    ) -> Result<tonic::Response<DefragmentResponse>, Status> {
        self.check_admin(&request).await?;
        self.handle
            .defragment()
            .await
            .map_err(|e| status_from_error(&e))?;
        Ok(tonic::Response::new(DefragmentResponse {
            header: Some(ResponseHeader {
                cluster_id: self.member.cluster_id,
                member_id: self.member.member_id,
                ..Default::default()
            }),
        }))
    }

    /// etcd's hash of this member's whole applied backend, on its own
    /// state (no consensus, as in etcd): members with equal data answer
    /// equal hashes (see `oxetcd_storage::bolt::hash::hash_backend`).
    async fn hash(
        &self,
        request: tonic::Request<HashRequest>,
    ) -> Result<tonic::Response<HashResponse>, Status> {
        self.check_admin(&request).await?;
        let (hash, revision) = self
            .handle
            .hash()
            .await
            .map_err(|e| status_from_error(&e))?;
        Ok(tonic::Response::new(HashResponse {
            header: Some(ResponseHeader {
                cluster_id: self.member.cluster_id,
                member_id: self.member.member_id,
                revision,
                ..Default::default()
            }),
            hash,
        }))
    }

    /// etcd's hash of this member's key space up to a revision, on its
    /// own applied state (no consensus, as in etcd): members holding the
    /// same history answer the same hash.
    async fn hash_kv(
        &self,
        request: tonic::Request<HashKvRequest>,
    ) -> Result<tonic::Response<HashKvResponse>, Status> {
        self.check_admin(&request).await?;
        let revision = request.into_inner().revision;
        let hashed = self
            .handle
            .hash_kv(revision)
            .await
            .map_err(|e| status_from_error(&e))?;
        Ok(tonic::Response::new(HashKvResponse {
            header: Some(ResponseHeader {
                cluster_id: self.member.cluster_id,
                member_id: self.member.member_id,
                revision: hashed.revision,
                ..Default::default()
            }),
            hash: hashed.hash,
            compact_revision: hashed.compact_revision,
            ..Default::default()
        }))
    }

    /// The backend as etcd's snapshot: the bolt image of a read view taken
    /// now (whole 4096-byte pages) followed by its SHA-256, the layout
    /// etcd's clients check for, in messages of about a megabyte, built
    /// as it is sent. The image records the cluster version as etcd does,
    /// `major.minor.0`. The total is
    /// not known before the first page is planned, so `remaining_bytes`
    /// stays 0; clients read until the stream ends, as etcd's do.
    async fn snapshot(
        &self,
        request: tonic::Request<SnapshotRequest>,
    ) -> Result<tonic::Response<Self::SnapshotStream>, Status> {
        self.check_admin(&request).await?;
        // The applied cluster version; this member's own until it is set.
        let version = self
            .handle
            .metrics()
            .cluster_version()
            .unwrap_or_else(|| self.handle.metrics().server_version().major_minor())
            .to_string();
        let chunks = self
            .handle
            .snapshot_file(version)
            .await
            .map_err(|e| status_from_error(&e))?;
        let handle = self.handle.clone();
        let header = ResponseHeader {
            cluster_id: self.member.cluster_id,
            member_id: self.member.member_id,
            ..Default::default()
        };
        let stream = futures_util::stream::unfold(Some(chunks), move |chunks| {
            let handle = handle.clone();
            async move {
                match handle.next_file_chunk(chunks?).await {
                    Ok(Some((blob, rest))) => Some((
                        Ok(SnapshotResponse {
                            header: Some(header),
                            remaining_bytes: 0,
                            blob,
                            ..Default::default()
                        }),
                        Some(rest),
                    )),
                    Ok(None) => None,
                    Err(e) => Some((Err(status_from_error(&e)), None)),
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(stream)))
    }

    async fn move_leader(
        &self,
        request: tonic::Request<MoveLeaderRequest>,
    ) -> Result<tonic::Response<MoveLeaderResponse>, Status> {
        let who = self.gate.credentials(&request);
        let request = Request::MoveLeader(request.into_inner());
        match self.handle.request_as(who, request).await {
            Ok(Response::MoveLeader(response)) => Ok(tonic::Response::new(response)),
            Ok(other) => Err(mismatched("move leader", &other)),
            Err(e) => Err(status_from_error(&e)),
        }
    }

    /// VALIDATE, ENABLE or CANCEL a downgrade: the node applies etcd's
    /// rules (root only once auth is on).
    async fn downgrade(
        &self,
        request: tonic::Request<DowngradeRequest>,
    ) -> Result<tonic::Response<DowngradeResponse>, Status> {
        let who = self.gate.credentials(&request);
        let request = Request::Downgrade(request.into_inner());
        match self.handle.request_as(who, request).await {
            Ok(Response::Downgrade(response)) => Ok(tonic::Response::new(response)),
            Ok(other) => Err(mismatched("downgrade", &other)),
            Err(e) => Err(status_from_error(&e)),
        }
    }
}

/// The backend's file size, etcd's `dbSize` (the raft log, with its
/// preallocated segments, is not part of it, as etcd's WAL is not).
fn backend_size(data_dir: &Path) -> u64 {
    let file = data_dir
        .join(oxetcd_storage::MEMBER_DIR)
        .join(oxetcd_storage::KV_FILE);
    std::fs::metadata(file).map_or(0, |meta| meta.len())
}
