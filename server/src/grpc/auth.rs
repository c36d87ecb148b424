//! The `etcdserverpb.Auth` service: users, roles and permissions.
//!
//! Design. Every call becomes a core auth request: changes go through the
//! log, reads are answered after a read barrier from the applied state.
//! A password is hashed here, with bcrypt at `--bcrypt-cost` on a blocking
//! thread, before the request leaves this member: the log, the backend
//! and snapshots hold hashes only.
//!
//! `Authenticate` checks the password here too (bcrypt, on a blocking
//! thread, against the hash read after a read barrier), then proposes the
//! token it picked so that every member learns it. Every call carries its
//! caller's credentials; the node decides what each may do.

use oxetcd_core::auth::{AuthRead, AuthRequest, AuthResponse};
use oxetcd_core::storage::KvStore;
use oxetcd_core::{Error, Request, Response};
use oxetcd_proto::etcdserverpb::auth_server::Auth;
use oxetcd_proto::etcdserverpb::*;
use oxetcd_proto::oxetcdpb::auth_change::Change;
use oxetcd_proto::oxetcdpb::AuthenticateChange;
use std::sync::atomic::{AtomicU64, Ordering};
use tonic::Status;

use super::credentials::Gate;
use oxetcd_core::auth::Credentials;

use super::{mismatched, status_from_error};
use crate::driver::Handle;

/// Serves `etcdserverpb.Auth`.
pub struct AuthService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
    bcrypt_cost: u32,
    /// Numbers the tokens this member hands out.
    tokens_issued: AtomicU64,
}

impl<K: KvStore> AuthService<K> {
    /// A service sending its requests through `handle`, hashing passwords
    /// at `bcrypt_cost`.
    pub fn new(handle: Handle<K>, gate: Gate, bcrypt_cost: u32) -> Self {
        Self {
            handle,
            gate,
            bcrypt_cost,
            tokens_issued: AtomicU64::new(0),
        }
    }

    async fn ask(&self, who: Credentials, request: AuthRequest) -> Result<AuthResponse, Status> {
        match self.handle.request_as(who, Request::Auth(request)).await {
            Ok(Response::Auth(response)) => Ok(response),
            Ok(other) => Err(mismatched("auth", &other)),
            Err(e) => Err(status_from_error(&e)),
        }
    }

    async fn change(&self, who: Credentials, change: Change) -> Result<AuthResponse, Status> {
        self.ask(who, AuthRequest::Change(change)).await
    }

    async fn read(&self, who: Credentials, read: AuthRead) -> Result<AuthResponse, Status> {
        self.ask(who, AuthRequest::Read(read)).await
    }

    /// Whether `password` is the one `hash` was made from, checked on a
    /// blocking thread.
    async fn verify(&self, password: String, hash: String) -> Result<bool, Status> {
        self.handle
            .run_blocking(move || Ok(bcrypt::verify(password, &hash).unwrap_or(false)))
            .await
            .map_err(|e| status_from_error(&e))
    }

    /// A fresh simple token: sixteen random letters, then a number, as
    /// etcd's look. Without the system's randomness there is no token: one
    /// that could be guessed would let anyone in.
    fn new_token(&self) -> Result<String, Status> {
        let mut seed = [0u8; 16];
        getrandom::fill(&mut seed).map_err(|e| {
            tracing::error!(error = %e, "no randomness for an auth token");
            Status::unavailable("etcdserver: cannot make an auth token")
        })?;
        let letters: String = seed
            .iter()
            .map(|b| {
                char::from(
                    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[usize::from(*b) % 52],
                )
            })
            .collect();
        let n = self.tokens_issued.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(format!("{letters}.{n}"))
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
        request: tonic::Request<AuthEnableRequest>,
    ) -> Result<tonic::Response<AuthEnableResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::Enable(request.into_inner())).await,
            Enable
        )
    }

    async fn auth_disable(
        &self,
        request: tonic::Request<AuthDisableRequest>,
    ) -> Result<tonic::Response<AuthDisableResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::Disable(request.into_inner()))
                .await,
            Disable
        )
    }

    async fn auth_status(
        &self,
        request: tonic::Request<AuthStatusRequest>,
    ) -> Result<tonic::Response<AuthStatusResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(self.read(who, AuthRead::Status).await, Status)
    }

    async fn authenticate(
        &self,
        request: tonic::Request<AuthenticateRequest>,
    ) -> Result<tonic::Response<AuthenticateResponse>, Status> {
        let AuthenticateRequest { name, password } = request.into_inner();
        let read = AuthRead::Password { name: name.clone() };
        let stored = expect!(self.read(Credentials::Anonymous, read).await, Password)?;
        let stored = stored.into_inner();
        if !self.verify(password, stored.hash).await? {
            return Err(status_from_error(&Error::AuthFailed));
        }
        // A JWT needs no log entry: any member that has the key checks it.
        if let Some(jwt) = self.gate.jwt() {
            let token = jwt
                .sign(&name, stored.revision, std::time::SystemTime::now())
                .map_err(|e| {
                    tracing::warn!(error = %e, "signing an auth token failed");
                    status_from_error(&Error::AuthFailed)
                })?;
            return Ok(tonic::Response::new(AuthenticateResponse {
                header: stored.header,
                token,
            }));
        }
        let token = self.new_token()?;
        let change = Change::Authenticate(AuthenticateChange { name, token });
        expect!(
            self.change(Credentials::Anonymous, change).await,
            Authenticate
        )
    }

    async fn user_add(
        &self,
        request: tonic::Request<AuthUserAddRequest>,
    ) -> Result<tonic::Response<AuthUserAddResponse>, Status> {
        let who = self.gate.credentials(&request);
        let mut request = request.into_inner();
        let no_password = request.options.as_ref().is_some_and(|o| o.no_password);
        let password = std::mem::take(&mut request.password);
        request.hashed_password = if no_password {
            String::new()
        } else {
            self.hash(password).await?
        };
        expect!(self.change(who, Change::UserAdd(request)).await, UserAdd)
    }

    async fn user_get(
        &self,
        request: tonic::Request<AuthUserGetRequest>,
    ) -> Result<tonic::Response<AuthUserGetResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.read(who, AuthRead::UserGet(request.into_inner()))
                .await,
            UserGet
        )
    }

    async fn user_list(
        &self,
        request: tonic::Request<AuthUserListRequest>,
    ) -> Result<tonic::Response<AuthUserListResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(self.read(who, AuthRead::UserList).await, UserList)
    }

    async fn user_delete(
        &self,
        request: tonic::Request<AuthUserDeleteRequest>,
    ) -> Result<tonic::Response<AuthUserDeleteResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::UserDelete(request.into_inner()))
                .await,
            UserDelete
        )
    }

    async fn user_change_password(
        &self,
        request: tonic::Request<AuthUserChangePasswordRequest>,
    ) -> Result<tonic::Response<AuthUserChangePasswordResponse>, Status> {
        let who = self.gate.credentials(&request);
        let mut request = request.into_inner();
        let password = std::mem::take(&mut request.password);
        request.hashed_password = self.hash(password).await?;
        expect!(
            self.change(who, Change::UserChangePassword(request)).await,
            UserChangePassword
        )
    }

    async fn user_grant_role(
        &self,
        request: tonic::Request<AuthUserGrantRoleRequest>,
    ) -> Result<tonic::Response<AuthUserGrantRoleResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::UserGrantRole(request.into_inner()))
                .await,
            UserGrantRole
        )
    }

    async fn user_revoke_role(
        &self,
        request: tonic::Request<AuthUserRevokeRoleRequest>,
    ) -> Result<tonic::Response<AuthUserRevokeRoleResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::UserRevokeRole(request.into_inner()))
                .await,
            UserRevokeRole
        )
    }

    async fn role_add(
        &self,
        request: tonic::Request<AuthRoleAddRequest>,
    ) -> Result<tonic::Response<AuthRoleAddResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::RoleAdd(request.into_inner()))
                .await,
            RoleAdd
        )
    }

    async fn role_get(
        &self,
        request: tonic::Request<AuthRoleGetRequest>,
    ) -> Result<tonic::Response<AuthRoleGetResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.read(who, AuthRead::RoleGet(request.into_inner()))
                .await,
            RoleGet
        )
    }

    async fn role_list(
        &self,
        request: tonic::Request<AuthRoleListRequest>,
    ) -> Result<tonic::Response<AuthRoleListResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(self.read(who, AuthRead::RoleList).await, RoleList)
    }

    async fn role_delete(
        &self,
        request: tonic::Request<AuthRoleDeleteRequest>,
    ) -> Result<tonic::Response<AuthRoleDeleteResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::RoleDelete(request.into_inner()))
                .await,
            RoleDelete
        )
    }

    async fn role_grant_permission(
        &self,
        request: tonic::Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<tonic::Response<AuthRoleGrantPermissionResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::RoleGrantPermission(request.into_inner()))
                .await,
            RoleGrantPermission
        )
    }

    async fn role_revoke_permission(
        &self,
        request: tonic::Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<tonic::Response<AuthRoleRevokePermissionResponse>, Status> {
        let who = self.gate.credentials(&request);
        expect!(
            self.change(who, Change::RoleRevokePermission(request.into_inner()))
                .await,
            RoleRevokePermission
        )
    }
}
