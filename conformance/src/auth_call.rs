//! One call of etcd's `Auth` service, as a value.
//!
//! Design. The seventeen `Auth` RPCs go through a single
//! [`crate::Target::auth`] so the target interface stays small; the
//! answer is the core's [`oxetcd_core::auth::AuthResponse`], which has one
//! variant per etcd response, whichever target answered. Passwords travel
//! in plain text here, as a client sends them; each target hashes them
//! where etcd does (the server that receives the call).

use oxetcd_proto::authpb::{permission, Permission, UserAddOptions};
use oxetcd_proto::etcdserverpb::{
    AuthRoleAddRequest, AuthRoleDeleteRequest, AuthRoleGetRequest, AuthRoleGrantPermissionRequest,
    AuthRoleRevokePermissionRequest, AuthUserAddRequest, AuthUserChangePasswordRequest,
    AuthUserDeleteRequest, AuthUserGetRequest, AuthUserGrantRoleRequest, AuthUserRevokeRoleRequest,
    AuthenticateRequest,
};

/// A call of `etcdserverpb.Auth`.
#[allow(missing_docs)]
#[derive(Clone, Debug)]
pub enum AuthCall {
    Enable,
    Disable,
    /// etcd 3.5's `AuthStatus` (3.4 answers `Unimplemented`).
    Status,
    Authenticate(AuthenticateRequest),
    UserAdd(AuthUserAddRequest),
    UserGet(AuthUserGetRequest),
    UserList,
    UserDelete(AuthUserDeleteRequest),
    UserChangePassword(AuthUserChangePasswordRequest),
    UserGrantRole(AuthUserGrantRoleRequest),
    UserRevokeRole(AuthUserRevokeRoleRequest),
    RoleAdd(AuthRoleAddRequest),
    RoleGet(AuthRoleGetRequest),
    RoleList,
    RoleDelete(AuthRoleDeleteRequest),
    RoleGrantPermission(AuthRoleGrantPermissionRequest),
    RoleRevokePermission(AuthRoleRevokePermissionRequest),
}

impl AuthCall {
    /// `UserAdd` of `name` with `password`.
    pub fn user_add(name: &str, password: &str) -> Self {
        Self::UserAdd(AuthUserAddRequest {
            name: name.to_owned(),
            password: password.to_owned(),
            ..Default::default()
        })
    }

    /// `UserAdd` of `name` with `options.no_password`.
    pub fn user_add_no_password(name: &str) -> Self {
        Self::UserAdd(AuthUserAddRequest {
            name: name.to_owned(),
            options: Some(UserAddOptions { no_password: true }),
            ..Default::default()
        })
    }

    /// `Authenticate` as `name` with `password`.
    pub fn authenticate(name: &str, password: &str) -> Self {
        Self::Authenticate(AuthenticateRequest {
            name: name.to_owned(),
            password: password.to_owned(),
        })
    }

    /// `UserGet` of `name`.
    pub fn user_get(name: &str) -> Self {
        Self::UserGet(AuthUserGetRequest {
            name: name.to_owned(),
        })
    }

    /// `UserDelete` of `name`.
    pub fn user_delete(name: &str) -> Self {
        Self::UserDelete(AuthUserDeleteRequest {
            name: name.to_owned(),
        })
    }

    /// `UserGrantRole`: `role` to `user`.
    pub fn grant_role(user: &str, role: &str) -> Self {
        Self::UserGrantRole(AuthUserGrantRoleRequest {
            user: user.to_owned(),
            role: role.to_owned(),
        })
    }

    /// `UserRevokeRole`: `role` from `user`.
    pub fn revoke_role(user: &str, role: &str) -> Self {
        Self::UserRevokeRole(AuthUserRevokeRoleRequest {
            name: user.to_owned(),
            role: role.to_owned(),
        })
    }

    /// `RoleAdd` of `name`.
    pub fn role_add(name: &str) -> Self {
        Self::RoleAdd(AuthRoleAddRequest {
            name: name.to_owned(),
        })
    }

    /// `RoleGet` of `name`.
    pub fn role_get(name: &str) -> Self {
        Self::RoleGet(AuthRoleGetRequest {
            role: name.to_owned(),
        })
    }

    /// `RoleDelete` of `name`.
    pub fn role_delete(name: &str) -> Self {
        Self::RoleDelete(AuthRoleDeleteRequest {
            role: name.to_owned(),
        })
    }

    /// `RoleGrantPermission`: `kind` on `[key, end)` (`end` empty: the
    /// key alone) to `role`.
    pub fn grant(role: &str, kind: permission::Type, key: &[u8], end: &[u8]) -> Self {
        Self::RoleGrantPermission(AuthRoleGrantPermissionRequest {
            name: role.to_owned(),
            perm: Some(Permission {
                perm_type: kind as i32,
                key: key.to_vec(),
                range_end: end.to_vec(),
            }),
        })
    }

    /// `RoleRevokePermission` of the permission on `[key, end)` from `role`.
    pub fn revoke(role: &str, key: &[u8], end: &[u8]) -> Self {
        Self::RoleRevokePermission(AuthRoleRevokePermissionRequest {
            role: role.to_owned(),
            key: key.to_vec(),
            range_end: end.to_vec(),
        })
    }
}
