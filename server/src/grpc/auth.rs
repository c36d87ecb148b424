//! The `etcdserverpb.Auth` service: users, roles and permissions.
//!
//! Design. Every call becomes a core auth request: changes go through the
//! log, reads are answered after a read barrier from the applied state.
//! A password is hashed here, with bcrypt at `--bcrypt-cost` on a blocking
//! thread, before the request leaves this member: the log, the backend
//! and snapshots hold hashes only.
//!
//! Enabling auth is not served yet, because nothing would check a
//! permission: `AuthEnable` is refused, so auth stays off and every
//! request is allowed, as it is on an etcd whose auth is off.
//! `Authenticate` answers etcd's `authentication is not enabled`, and
//! `AuthDisable` succeeds (auth is off).

use oxetcd_core::auth::{AuthRead, AuthRequest, AuthResponse};
use oxetcd_core::storage::KvStore;
use oxetcd_core::{Error, Request, Response};
use oxetcd_proto::etcdserverpb::auth_server::Auth;
use oxetcd_proto::etcdserverpb::*;
use oxetcd_proto::oxetcdpb::auth_change::Change;
use tonic::Status;

use super::{mismatched, status_from_error};
use crate::driver::Handle;

/// Serves `etcdserverpb.Auth`.
pub struct AuthService<K: KvStore> {
    handle: Handle<K>,
    bcrypt_cost: u32,
}

impl<K: KvStore> AuthService<K> {
    /// A service sending its requests through `handle`, hashing passwords
    /// at `bcrypt_cost`.
    pub fn new(handle: Handle<K>, bcrypt_cost: u32) -> Self {
        Self {
            handle,
            bcrypt_cost,
        }
    }

    async fn ask(&self, request: AuthRequest) -> Result<AuthResponse, Status> {
        match self.handle.request(Request::Auth(request)).await {
            Ok(Response::Auth(response)) => Ok(response),
            Ok(other) => Err(mismatched("auth", &other)),
            Err(e) => Err(status_from_error(&e)),
        }
    }

    async fn change(&self, change: Change) -> Result<AuthResponse, Status> {
        self.ask(AuthRequest::Change(change)).await
    }

    async fn read(&self, read: AuthRead) -> Result<AuthResponse, Status> {
        self.ask(AuthRequest::Read(read)).await
    }

    /// `password`'s bcrypt hash, made on a blocking thread.
    async fn hash(&self, password: String) -> Result<String, Status> {
        let cost = self.bcrypt_cost;
        self.handle
            .run_blocking(move || {
                bcrypt::hash(password, cost).map_err(|e| {
                    tracing::warn!(error = %e, "hashing a password failed");
                    Error::Stopped
                })
            })
            .await
            .map_err(|e| status_from_error(&e))
    }
}

/// Unwraps the auth response a call must come back as.
macro_rules! expect {
    ($response:expr, $variant:ident) => {
        match $response? {
            AuthResponse::$variant(response) => Ok(tonic::Response::new(response)),
            other => Err(mismatched(stringify!($variant), &Response::Auth(other))),
        }
    };
}

#[tonic::async_trait]
impl<K: KvStore> Auth for AuthService<K> {
    async fn auth_enable(
        &self,
        _request: tonic::Request<AuthEnableRequest>,
    ) -> Result<tonic::Response<AuthEnableResponse>, Status> {
        Err(Status::unimplemented(
            "oxetcd does not check permissions yet, so auth cannot be enabled",
        ))
    }

    async fn auth_disable(
        &self,
        _request: tonic::Request<AuthDisableRequest>,
    ) -> Result<tonic::Response<AuthDisableResponse>, Status> {
        let status = expect!(self.read(AuthRead::Status).await, Status)?.into_inner();
        Ok(tonic::Response::new(AuthDisableResponse {
            header: status.header,
        }))
    }

    async fn auth_status(
        &self,
        _request: tonic::Request<AuthStatusRequest>,
    ) -> Result<tonic::Response<AuthStatusResponse>, Status> {
        expect!(self.read(AuthRead::Status).await, Status)
    }

    async fn authenticate(
        &self,
        _request: tonic::Request<AuthenticateRequest>,
    ) -> Result<tonic::Response<AuthenticateResponse>, Status> {
        Err(status_from_error(&Error::AuthNotEnabled))
    }

    async fn user_add(
        &self,
        request: tonic::Request<AuthUserAddRequest>,
    ) -> Result<tonic::Response<AuthUserAddResponse>, Status> {
        let mut request = request.into_inner();
        let no_password = request.options.as_ref().is_some_and(|o| o.no_password);
        let password = std::mem::take(&mut request.password);
        request.hashed_password = if no_password {
            String::new()
        } else {
            self.hash(password).await?
        };
        expect!(self.change(Change::UserAdd(request)).await, UserAdd)
    }

    async fn user_get(
        &self,
        request: tonic::Request<AuthUserGetRequest>,
    ) -> Result<tonic::Response<AuthUserGetResponse>, Status> {
        expect!(
            self.read(AuthRead::UserGet(request.into_inner())).await,
            UserGet
        )
    }

    async fn user_list(
        &self,
        _request: tonic::Request<AuthUserListRequest>,
    ) -> Result<tonic::Response<AuthUserListResponse>, Status> {
        expect!(self.read(AuthRead::UserList).await, UserList)
    }

    async fn user_delete(
        &self,
        request: tonic::Request<AuthUserDeleteRequest>,
    ) -> Result<tonic::Response<AuthUserDeleteResponse>, Status> {
        expect!(
            self.change(Change::UserDelete(request.into_inner())).await,
            UserDelete
        )
    }

    async fn user_change_password(
        &self,
        request: tonic::Request<AuthUserChangePasswordRequest>,
    ) -> Result<tonic::Response<AuthUserChangePasswordResponse>, Status> {
        let mut request = request.into_inner();
        let password = std::mem::take(&mut request.password);
        request.hashed_password = self.hash(password).await?;
        expect!(
            self.change(Change::UserChangePassword(request)).await,
            UserChangePassword
        )
    }

    async fn user_grant_role(
        &self,
        request: tonic::Request<AuthUserGrantRoleRequest>,
    ) -> Result<tonic::Response<AuthUserGrantRoleResponse>, Status> {
        expect!(
            self.change(Change::UserGrantRole(request.into_inner()))
                .await,
            UserGrantRole
        )
    }

    async fn user_revoke_role(
        &self,
        request: tonic::Request<AuthUserRevokeRoleRequest>,
    ) -> Result<tonic::Response<AuthUserRevokeRoleResponse>, Status> {
        expect!(
            self.change(Change::UserRevokeRole(request.into_inner()))
                .await,
            UserRevokeRole
        )
    }

    async fn role_add(
        &self,
        request: tonic::Request<AuthRoleAddRequest>,
    ) -> Result<tonic::Response<AuthRoleAddResponse>, Status> {
        expect!(
            self.change(Change::RoleAdd(request.into_inner())).await,
            RoleAdd
        )
    }

    async fn role_get(
        &self,
        request: tonic::Request<AuthRoleGetRequest>,
    ) -> Result<tonic::Response<AuthRoleGetResponse>, Status> {
        expect!(
            self.read(AuthRead::RoleGet(request.into_inner())).await,
            RoleGet
        )
    }

    async fn role_list(
        &self,
        _request: tonic::Request<AuthRoleListRequest>,
    ) -> Result<tonic::Response<AuthRoleListResponse>, Status> {
        expect!(self.read(AuthRead::RoleList).await, RoleList)
    }

    async fn role_delete(
        &self,
        request: tonic::Request<AuthRoleDeleteRequest>,
    ) -> Result<tonic::Response<AuthRoleDeleteResponse>, Status> {
        expect!(
            self.change(Change::RoleDelete(request.into_inner())).await,
            RoleDelete
        )
    }

    async fn role_grant_permission(
        &self,
        request: tonic::Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<tonic::Response<AuthRoleGrantPermissionResponse>, Status> {
        expect!(
            self.change(Change::RoleGrantPermission(request.into_inner()))
                .await,
            RoleGrantPermission
        )
    }

    async fn role_revoke_permission(
        &self,
        request: tonic::Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<tonic::Response<AuthRoleRevokePermissionResponse>, Status> {
        expect!(
            self.change(Change::RoleRevokePermission(request.into_inner()))
                .await,
            RoleRevokePermission
        )
    }
}
