//! The typed calls a [`Client`] makes, one method per etcd RPC oxetcdctl
//! uses, each through [`Client::unary`] (retried on another endpoint when
//! it provably was not sent) or, for calls that may wait without bound
//! (lock, campaign, observe), through `waiting`; and the typed gRPC
//! clients over a [`Transport`].

use super::*;

/// `Client` methods for `Auth` calls, one per line: the method (named as
/// tonic names the call), request and response types, and whether the
/// call is repeatable, as for [`Client::unary`].
macro_rules! auth_calls {
    ($($name:ident($request:ty) -> $response:ty, $repeatable:literal;)*) => {$(
        #[doc = concat!("The `Auth` service's `", stringify!($name), "` call.")]
        pub async fn $name(&self, request: $request) -> Result<$response, Error> {
            self.unary($repeatable, |t| {
                let request = request.clone();
                async move { auth(t).$name(request).await }
            })
            .await
        }
    )*};
}

impl Client {
    /// `KV.Range`.
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Error> {
        self.unary(true, |t| {
            let request = request.clone();
            async move { kv(t).range(request).await }
        })
        .await
    }

    /// `KV.RangeStream` (etcd 3.7), its chunks merged into the answer
    /// `KV.Range` gives: the keys of every chunk in order, and the last
    /// chunk's header, `more` and `count`.
    pub async fn range_stream(&self, request: RangeRequest) -> Result<RangeResponse, Error> {
        self.unary(true, |t| {
            let request = request.clone();
            async move {
                let mut chunks = kv(t).range_stream(request).await?.into_inner();
                let mut merged = RangeResponse::default();
                while let Some(chunk) = chunks.message().await? {
                    let Some(mut chunk) = chunk.range_response else {
                        continue;
                    };
                    merged.kvs.append(&mut chunk.kvs);
                    merged.header = chunk.header.or(merged.header);
                    merged.more |= chunk.more;
                    merged.count = merged.count.max(chunk.count);
                }
                Ok(tonic::Response::new(merged))
            }
        })
        .await
    }

    /// `KV.Put`.
    pub async fn put(&self, request: PutRequest) -> Result<PutResponse, Error> {
        self.unary(false, |t| {
            let request = request.clone();
            async move { kv(t).put(request).await }
        })
        .await
    }

    /// `KV.DeleteRange`.
    pub async fn delete_range(
        &self,
        request: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, Error> {
        self.unary(false, |t| {
            let request = request.clone();
            async move { kv(t).delete_range(request).await }
        })
        .await
    }

    /// `KV.Txn`; repeatable when it only reads.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Error> {
        use oxetcd_proto::etcdserverpb::request_op::Request;
        let read_only = request
            .success
            .iter()
            .chain(&request.failure)
            .all(|op| matches!(op.request, Some(Request::RequestRange(_))));
        self.unary(read_only, |t| {
            let request = request.clone();
            async move { kv(t).txn(request).await }
        })
        .await
    }

    /// `KV.Compact`.
    pub async fn compact(&self, request: CompactionRequest) -> Result<CompactionResponse, Error> {
        self.unary(false, |t| async move { kv(t).compact(request).await })
            .await
    }

    /// `Lease.LeaseGrant`.
    pub async fn lease_grant(
        &self,
        request: LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, Error> {
        self.unary(
            false,
            |t| async move { lease(t).lease_grant(request).await },
        )
        .await
    }

    /// `Lease.LeaseRevoke`.
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, Error> {
        self.unary(true, |t| async move {
            lease(t).lease_revoke(LeaseRevokeRequest { id }).await
        })
        .await
    }

    /// `Lease.LeaseTimeToLive`.
    pub async fn lease_time_to_live(
        &self,
        request: LeaseTimeToLiveRequest,
    ) -> Result<LeaseTimeToLiveResponse, Error> {
        self.unary(true, |t| async move {
            lease(t).lease_time_to_live(request).await
        })
        .await
    }

    /// `Lease.LeaseLeases`.
    pub async fn lease_leases(&self) -> Result<LeaseLeasesResponse, Error> {
        self.unary(true, |t| async move {
            lease(t).lease_leases(LeaseLeasesRequest {}).await
        })
        .await
    }

    /// `Cluster.MemberList`.
    pub async fn member_list(&self, linearizable: bool) -> Result<MemberListResponse, Error> {
        self.unary(true, |t| async move {
            cluster(t)
                .member_list(MemberListRequest { linearizable })
                .await
        })
        .await
    }

    /// `Cluster.MemberAdd`.
    pub async fn member_add(&self, request: MemberAddRequest) -> Result<MemberAddResponse, Error> {
        self.unary(false, |t| {
            let request = request.clone();
            async move { cluster(t).member_add(request).await }
        })
        .await
    }

    /// `Cluster.MemberRemove`.
    pub async fn member_remove(&self, id: u64) -> Result<MemberRemoveResponse, Error> {
        self.unary(false, |t| async move {
            cluster(t).member_remove(MemberRemoveRequest { id }).await
        })
        .await
    }

    /// `Cluster.MemberUpdate`.
    pub async fn member_update(
        &self,
        request: MemberUpdateRequest,
    ) -> Result<MemberUpdateResponse, Error> {
        self.unary(false, |t| {
            let request = request.clone();
            async move { cluster(t).member_update(request).await }
        })
        .await
    }

    /// `Cluster.MemberPromote`.
    pub async fn member_promote(&self, id: u64) -> Result<MemberPromoteResponse, Error> {
        self.unary(false, |t| async move {
            cluster(t).member_promote(MemberPromoteRequest { id }).await
        })
        .await
    }

    /// `Maintenance.Status` of the current endpoint.
    pub async fn status(&self) -> Result<StatusResponse, Error> {
        self.unary(true, |t| async move {
            maintenance(t).status(StatusRequest {}).await
        })
        .await
    }

    /// `Maintenance.HashKV` of the current endpoint.
    pub async fn hash_kv(&self, revision: i64) -> Result<HashKvResponse, Error> {
        self.unary(true, |t| async move {
            maintenance(t).hash_kv(HashKvRequest { revision }).await
        })
        .await
    }

    /// `Maintenance.Defragment` of the current endpoint.
    pub async fn defragment(&self) -> Result<DefragmentResponse, Error> {
        self.unary(true, |t| async move {
            maintenance(t).defragment(DefragmentRequest {}).await
        })
        .await
    }

    /// `Maintenance.Alarm`.
    pub async fn alarm(&self, request: AlarmRequest) -> Result<AlarmResponse, Error> {
        self.unary(true, |t| async move { maintenance(t).alarm(request).await })
            .await
    }

    /// `Maintenance.MoveLeader` (must reach the leader).
    pub async fn move_leader(&self, target_id: u64) -> Result<MoveLeaderResponse, Error> {
        self.unary(false, |t| async move {
            maintenance(t)
                .move_leader(MoveLeaderRequest { target_id })
                .await
        })
        .await
    }

    /// `Maintenance.Downgrade`.
    pub async fn downgrade(&self, request: DowngradeRequest) -> Result<DowngradeResponse, Error> {
        self.unary(false, |t| {
            let request = request.clone();
            async move { maintenance(t).downgrade(request).await }
        })
        .await
    }

    /// `Lock.Lock`: waits for as long as others hold the lock (no command
    /// timeout, as etcdctl's `lock`); dropping the future cancels the
    /// call, and the server then removes the queued key.
    pub async fn lock(&self, request: LockRequest) -> Result<LockResponse, Error> {
        self.waiting(|t| {
            let request = request.clone();
            async move { lock(t).lock(request).await }
        })
        .await
    }

    /// `Lock.Unlock`: deletes the lock's key (repeatable: a second delete
    /// changes nothing).
    pub async fn unlock(&self, key: Vec<u8>) -> Result<UnlockResponse, Error> {
        self.unary(true, |t| {
            let key = key.clone();
            async move { lock(t).unlock(UnlockRequest { key }).await }
        })
        .await
    }

    /// `Election.Campaign`: waits until elected, like [`Client::lock`].
    pub async fn campaign(&self, request: CampaignRequest) -> Result<CampaignResponse, Error> {
        self.waiting(|t| {
            let request = request.clone();
            async move { election(t).campaign(request).await }
        })
        .await
    }

    /// `Election.Resign` (repeatable: it deletes only the key it names).
    pub async fn resign(&self, leader: LeaderKey) -> Result<ResignResponse, Error> {
        self.unary(true, |t| {
            let leader = leader.clone();
            async move {
                election(t)
                    .resign(ResignRequest {
                        leader: Some(leader),
                    })
                    .await
            }
        })
        .await
    }

    /// `Election.Observe`: the stream of the election's leaders.
    pub async fn observe(&self, name: Vec<u8>) -> Result<Streaming<LeaderResponse>, Error> {
        self.waiting(|t| {
            let name = name.clone();
            async move { election(t).observe(LeaderRequest { name }).await }
        })
        .await
    }

    /// Runs a call that may wait without bound: only the connection is
    /// bounded by the command timeout. A call refused for a stale token is
    /// sent once more after authenticating again.
    async fn waiting<T, F, Fut>(&self, mut call: F) -> Result<T, Error>
    where
        F: FnMut(Transport) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut token_refreshed = false;
        loop {
            let deadline = Instant::now() + self.config.command_timeout;
            let (index, transport) = self.transport(deadline).await?;
            match call(transport).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if !token_refreshed && self.token_refused(&status) => {
                    token_refreshed = true;
                    self.refresh_token(index).await?;
                }
                Err(status) => {
                    if endpoint_failed(&status) {
                        self.failed(index);
                    }
                    return Err(Error::from_status(&status));
                }
            }
        }
    }

    auth_calls! {
        auth_enable(AuthEnableRequest) -> AuthEnableResponse, false;
        auth_disable(AuthDisableRequest) -> AuthDisableResponse, false;
        auth_status(AuthStatusRequest) -> AuthStatusResponse, true;
        user_add(AuthUserAddRequest) -> AuthUserAddResponse, false;
        user_get(AuthUserGetRequest) -> AuthUserGetResponse, true;
        user_list(AuthUserListRequest) -> AuthUserListResponse, true;
        user_delete(AuthUserDeleteRequest) -> AuthUserDeleteResponse, false;
        user_change_password(AuthUserChangePasswordRequest) -> AuthUserChangePasswordResponse, false;
        user_grant_role(AuthUserGrantRoleRequest) -> AuthUserGrantRoleResponse, false;
        user_revoke_role(AuthUserRevokeRoleRequest) -> AuthUserRevokeRoleResponse, false;
        role_add(AuthRoleAddRequest) -> AuthRoleAddResponse, false;
        role_get(AuthRoleGetRequest) -> AuthRoleGetResponse, true;
        role_list(AuthRoleListRequest) -> AuthRoleListResponse, true;
        role_delete(AuthRoleDeleteRequest) -> AuthRoleDeleteResponse, false;
        role_grant_permission(AuthRoleGrantPermissionRequest) -> AuthRoleGrantPermissionResponse, false;
        role_revoke_permission(AuthRoleRevokePermissionRequest) -> AuthRoleRevokePermissionResponse, false;
    }
}

/// A KV client over `transport`.
pub fn kv(transport: Transport) -> KvClient<Transport> {
    KvClient::new(transport).max_decoding_message_size(RESPONSE_BYTES_MAX)
}

/// A Lease client over `transport`.
pub fn lease(transport: Transport) -> LeaseClient<Transport> {
    LeaseClient::new(transport).max_decoding_message_size(RESPONSE_BYTES_MAX)
}

/// A Cluster client over `transport`.
pub fn cluster(transport: Transport) -> ClusterClient<Transport> {
    ClusterClient::new(transport).max_decoding_message_size(RESPONSE_BYTES_MAX)
}

/// A Maintenance client over `transport`.
pub fn maintenance(transport: Transport) -> MaintenanceClient<Transport> {
    MaintenanceClient::new(transport).max_decoding_message_size(RESPONSE_BYTES_MAX)
}

/// An Auth client over `transport`.
pub fn auth(transport: Transport) -> AuthClient<Transport> {
    AuthClient::new(transport).max_decoding_message_size(RESPONSE_BYTES_MAX)
}

/// An Election client over `transport`.
pub fn election(transport: Transport) -> ElectionClient<Transport> {
    ElectionClient::new(transport).max_decoding_message_size(RESPONSE_BYTES_MAX)
}

/// A Lock client over `transport`.
pub fn lock(transport: Transport) -> LockClient<Transport> {
    LockClient::new(transport).max_decoding_message_size(RESPONSE_BYTES_MAX)
}

/// A Watch client over `transport`.
pub fn watch(
    transport: Transport,
) -> oxetcd_proto::etcdserverpb::watch_client::WatchClient<Transport> {
    oxetcd_proto::etcdserverpb::watch_client::WatchClient::new(transport)
        .max_decoding_message_size(RESPONSE_BYTES_MAX)
}
