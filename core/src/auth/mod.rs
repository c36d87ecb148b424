//! The auth store: users, roles and their key permissions, as etcd keeps
//! them.
//!
//! Design. [`AuthStore`] is a sub-state-machine of the node: changes
//! ([`AuthChange`]) arrive only through the log and are applied in log
//! order on every member, each with etcd's checks and errors, and every
//! change bumps the auth revision; reads ([`AuthRead`]) answer from the
//! applied state. Passwords never reach it in plain text: the member that
//! receives a user add or password change stores a bcrypt hash in the
//! request before proposing it, so the log, the backend and snapshots only
//! ever hold hashes. The node writes [`AuthStore::state`] in the apply
//! transaction of every change, so the store survives restarts and
//! travels in snapshots with the applied index it belongs to.
//!
//! Invariants: users' role lists are sorted and hold no duplicates; roles'
//! permissions are sorted by key, with at most one permission per
//! (key, range end); the revision grows by one per successful change and
//! never otherwise.
//!
//! Enabling auth needs a `root` user holding the `root` role. Once it is
//! on, a request's credentials ([`Credentials`]) resolve to an
//! [`AuthInfo`] at admission (a simple token through `tokens.rs`, learned
//! through the log by every member), and `permission.rs` decides what it
//! may touch, at admission and again at apply.

mod permission;
mod tokens;

pub use self::permission::{Access, AuthInfo};
use self::tokens::SimpleTokens;

use std::collections::BTreeMap;

use oxetcd_proto::authpb::{Permission, Role, User, UserAddOptions};
use oxetcd_proto::etcdserverpb::{
    AuthDisableResponse, AuthEnableResponse, AuthRoleAddRequest, AuthRoleAddResponse,
    AuthRoleDeleteRequest, AuthRoleDeleteResponse, AuthRoleGetRequest, AuthRoleGetResponse,
    AuthRoleGrantPermissionRequest, AuthRoleGrantPermissionResponse, AuthRoleListResponse,
    AuthRoleRevokePermissionRequest, AuthRoleRevokePermissionResponse, AuthStatusResponse,
    AuthUserAddRequest, AuthUserAddResponse, AuthUserChangePasswordRequest,
    AuthUserChangePasswordResponse, AuthUserDeleteRequest, AuthUserDeleteResponse,
    AuthUserGetRequest, AuthUserGetResponse, AuthUserGrantRoleRequest, AuthUserGrantRoleResponse,
    AuthUserListResponse, AuthUserRevokeRoleRequest, AuthUserRevokeRoleResponse,
    AuthenticateResponse, ResponseHeader,
};
use oxetcd_proto::oxetcdpb::auth_change::Change as AuthChange;
use oxetcd_proto::oxetcdpb::AuthenticateChange;

use crate::error::Error;
use crate::storage::AuthState;
use crate::Instant;

/// Who a client says it is, as the runtime saw the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Credentials {
    /// No token and no verified certificate name.
    #[default]
    Anonymous,
    /// A simple token (`--auth-token simple`), resolved by the node.
    Token(String),
    /// A user the runtime vouches for: a verified JWT's claims, or a
    /// verified client certificate's common name (no revision: the
    /// current one).
    User {
        /// The user's name.
        name: String,
        /// The auth revision the token was issued at.
        revision: Option<u64>,
    },
}

/// The user and the role that administer the cluster once auth is on.
pub const ROOT: &str = "root";

/// A read of the auth store, answered from the applied state.
#[derive(Clone, Debug, PartialEq)]
pub enum AuthRead {
    /// Whether auth is enabled, and the revision.
    Status,
    /// One user's roles.
    UserGet(AuthUserGetRequest),
    /// Every user's name.
    UserList,
    /// One role's permissions.
    RoleGet(AuthRoleGetRequest),
    /// Every role's name.
    RoleList,
    /// Whether the caller administers the cluster (answered as `Status`
    /// when it does): maintenance the runtime serves itself asks first.
    Admin,
    /// A user's stored password hash, for `Authenticate` to check before
    /// proposing (never answered to a client).
    Password {
        /// The user.
        name: String,
    },
}

/// A request to the auth store: a change through the log, or a read.
#[derive(Clone, Debug, PartialEq)]
pub enum AuthRequest {
    /// Through the log (a password only as a hash).
    Change(AuthChange),
    /// From the applied state, after a read barrier.
    Read(AuthRead),
}

/// An answer of the auth store, one variant per etcd response.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq)]
pub enum AuthResponse {
    Status(AuthStatusResponse),
    UserAdd(AuthUserAddResponse),
    UserGet(AuthUserGetResponse),
    UserList(AuthUserListResponse),
    UserDelete(AuthUserDeleteResponse),
    UserChangePassword(AuthUserChangePasswordResponse),
    UserGrantRole(AuthUserGrantRoleResponse),
    UserRevokeRole(AuthUserRevokeRoleResponse),
    RoleAdd(AuthRoleAddResponse),
    RoleGet(AuthRoleGetResponse),
    RoleList(AuthRoleListResponse),
    RoleDelete(AuthRoleDeleteResponse),
    RoleGrantPermission(AuthRoleGrantPermissionResponse),
    RoleRevokePermission(AuthRoleRevokePermissionResponse),
    Enable(AuthEnableResponse),
    Disable(AuthDisableResponse),
    Authenticate(AuthenticateResponse),
    /// A user's bcrypt hash (see [`AuthRead::Password`]).
    Password(PasswordHash),
}

/// What `Authenticate` checks a password against.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PasswordHash {
    /// Unused; every answer has a header.
    pub header: Option<ResponseHeader>,
    /// The bcrypt hash (empty for a user without a password).
    pub hash: String,
    /// The auth revision it was read at (a JWT's `revision` claim).
    pub revision: u64,
}

impl AuthResponse {
    /// Sets the response header.
    pub fn with_header(mut self, header: ResponseHeader) -> Self {
        *self.header_mut() = Some(header);
        self
    }

    /// The response's header.
    pub fn header_mut(&mut self) -> &mut Option<ResponseHeader> {
        match self {
            Self::Status(r) => &mut r.header,
            Self::UserAdd(r) => &mut r.header,
            Self::UserGet(r) => &mut r.header,
            Self::UserList(r) => &mut r.header,
            Self::UserDelete(r) => &mut r.header,
            Self::UserChangePassword(r) => &mut r.header,
            Self::UserGrantRole(r) => &mut r.header,
            Self::UserRevokeRole(r) => &mut r.header,
            Self::RoleAdd(r) => &mut r.header,
            Self::RoleGet(r) => &mut r.header,
            Self::RoleList(r) => &mut r.header,
            Self::RoleDelete(r) => &mut r.header,
            Self::RoleGrantPermission(r) => &mut r.header,
            Self::RoleRevokePermission(r) => &mut r.header,
            Self::Enable(r) => &mut r.header,
            Self::Disable(r) => &mut r.header,
            Self::Authenticate(r) => &mut r.header,
            Self::Password(r) => &mut r.header,
        }
    }
}

/// Users, roles and permissions of one member, as applied.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthStore {
    enabled: bool,
    revision: u64,
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
    /// Not stored: a restarted member has none.
    tokens: SimpleTokens,
}

impl AuthStore {
    /// The store as the backend recorded it (empty if it never did).
    /// Simple tokens live `token_ttl` after their last use.
    pub fn recover(state: Option<AuthState>, token_ttl: std::time::Duration) -> Self {
        let tokens = SimpleTokens::new(token_ttl);
        let Some(state) = state else {
            return Self {
                tokens,
                ..Self::default()
            };
        };
        let name = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        Self {
            tokens,
            enabled: state.enabled,
            revision: state.revision,
            users: state
                .users
                .into_iter()
                .map(|u| (name(&u.name), u))
                .collect(),
            roles: state
                .roles
                .into_iter()
                .map(|r| (name(&r.name), r))
                .collect(),
        }
    }

    /// What the backend stores.
    pub fn state(&self) -> AuthState {
        AuthState {
            enabled: self.enabled,
            revision: self.revision,
            users: self.users.values().cloned().collect(),
            roles: self.roles.values().cloned().collect(),
        }
    }

    /// Whether auth is enabled.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The auth revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Applies one change from the log. On success the revision is bumped
    /// (unless the change found nothing to change, as etcd's grant of a role
    /// already granted) and the caller stores [`AuthStore::state`]; on an
    /// error nothing changed.
    pub fn apply(&mut self, change: AuthChange, now: Instant) -> Result<AuthResponse, Error> {
        let before = self.revision;
        let applied = match change {
            AuthChange::Enable(_) => self.enable(),
            AuthChange::Disable(_) => Ok(self.disable()),
            AuthChange::Authenticate(r) => self.authenticate(r, now),
            AuthChange::UserAdd(r) => self.user_add(r),
            AuthChange::UserDelete(r) => self.user_delete(r),
            AuthChange::UserChangePassword(r) => self.user_change_password(r),
            AuthChange::UserGrantRole(r) => self.user_grant_role(r),
            AuthChange::UserRevokeRole(r) => self.user_revoke_role(r),
            AuthChange::RoleAdd(r) => self.role_add(r),
            AuthChange::RoleDelete(r) => self.role_delete(r),
            AuthChange::RoleGrantPermission(r) => self.role_grant_permission(r),
            AuthChange::RoleRevokePermission(r) => self.role_revoke_permission(r),
        }?;
        let response = match applied {
            Applied::Changed(response) => {
                self.revision += 1;
                response
            }
            Applied::Unchanged(response) => response,
        };
        debug_assert!(self.revision - before <= 1, "one change, one revision");
        Ok(response)
    }

    /// Resolves a request's credentials at `now`: an unknown or expired
    /// token is refused; nobody is [`AuthInfo::default`]. While auth is off
    /// a user is not checked, but a simple token still is, as etcd looks
    /// every token up: none is known then (disabling forgets them all), so
    /// a token kept from before is refused as invalid.
    pub fn resolve(&mut self, credentials: &Credentials, now: Instant) -> Result<AuthInfo, Error> {
        if !self.enabled {
            return match credentials {
                Credentials::Token(token) if self.tokens.resolve(token, now).is_none() => {
                    Err(Error::InvalidAuthToken)
                }
                _ => Ok(AuthInfo::default()),
            };
        }
        match credentials {
            Credentials::Anonymous => Ok(AuthInfo::default()),
            Credentials::Token(token) => match self.tokens.resolve(token, now) {
                Some(user) => Ok(AuthInfo {
                    user,
                    revision: self.revision,
                }),
                None => Err(Error::InvalidAuthToken),
            },
            Credentials::User { name, revision } => Ok(AuthInfo {
                user: name.clone(),
                revision: revision.unwrap_or(self.revision),
            }),
        }
    }

    fn enable(&mut self) -> Result<Applied, Error> {
        let response = AuthResponse::Enable(AuthEnableResponse::default());
        if self.enabled {
            return Ok(Applied::Unchanged(response));
        }
        let root = self.users.get(ROOT).ok_or(Error::RootUserNotExist)?;
        if !root.roles.iter().any(|r| r == ROOT) {
            return Err(Error::RootRoleNotExist);
        }
        self.enabled = true;
        Ok(Applied::Changed(response))
    }

    fn disable(&mut self) -> Applied {
        let response = AuthResponse::Disable(AuthDisableResponse::default());
        if !self.enabled {
            return Applied::Unchanged(response);
        }
        self.enabled = false;
        self.tokens.clear();
        Applied::Changed(response)
    }

    /// The proposing member checked the password; every member learns the
    /// token. Nothing stored changes, so the revision stays.
    fn authenticate(&mut self, r: AuthenticateChange, now: Instant) -> Result<Applied, Error> {
        self.authenticable(&r.name)?;
        self.tokens.assign(r.token.clone(), &r.name, now);
        Ok(Applied::Unchanged(AuthResponse::Authenticate(
            AuthenticateResponse {
                header: None,
                token: r.token,
            },
        )))
    }

    /// The user `name`, if it may authenticate with a password: auth is
    /// on, the user exists and has a password. etcd tells no cause apart.
    fn authenticable(&self, name: &str) -> Result<&User, Error> {
        if !self.enabled {
            return Err(Error::AuthNotEnabled);
        }
        let user = self.users.get(name).ok_or(Error::AuthFailed)?;
        if user.options.as_ref().is_some_and(|o| o.no_password) {
            return Err(Error::AuthFailed);
        }
        Ok(user)
    }

    fn user_add(&mut self, r: AuthUserAddRequest) -> Result<Applied, Error> {
        if r.name.is_empty() {
            return Err(Error::UserEmpty);
        }
        if self.users.contains_key(&r.name) {
            return Err(Error::UserAlreadyExists);
        }
        let no_password = r.options.as_ref().is_some_and(|o| o.no_password);
        let user = User {
            name: r.name.clone().into_bytes(),
            password: if no_password {
                Vec::new()
            } else {
                r.hashed_password.into_bytes()
            },
            roles: Vec::new(),
            options: Some(UserAddOptions { no_password }),
        };
        self.users.insert(r.name, user);
        Ok(Applied::Changed(AuthResponse::UserAdd(
            AuthUserAddResponse::default(),
        )))
    }

    fn user_delete(&mut self, r: AuthUserDeleteRequest) -> Result<Applied, Error> {
        if self.enabled && r.name == ROOT {
            return Err(Error::InvalidAuthManagement);
        }
        if self.users.remove(&r.name).is_none() {
            return Err(Error::UserNotFound);
        }
        self.tokens.invalidate_user(&r.name);
        Ok(Applied::Changed(AuthResponse::UserDelete(
            AuthUserDeleteResponse::default(),
        )))
    }

    fn user_change_password(&mut self, r: AuthUserChangePasswordRequest) -> Result<Applied, Error> {
        let user = self.users.get_mut(&r.name).ok_or(Error::UserNotFound)?;
        user.password = r.hashed_password.into_bytes();
        self.tokens.invalidate_user(&r.name);
        Ok(Applied::Changed(AuthResponse::UserChangePassword(
            AuthUserChangePasswordResponse::default(),
        )))
    }

    fn user_grant_role(&mut self, r: AuthUserGrantRoleRequest) -> Result<Applied, Error> {
        if r.role != ROOT && !self.roles.contains_key(&r.role) {
            if !self.users.contains_key(&r.user) {
                return Err(Error::UserNotFound);
            }
            return Err(Error::RoleNotFound);
        }
        let user = self.users.get_mut(&r.user).ok_or(Error::UserNotFound)?;
        let response = AuthResponse::UserGrantRole(AuthUserGrantRoleResponse::default());
        match user.roles.binary_search(&r.role) {
            // Granted already: etcd answers success and changes nothing,
            // the revision included.
            Ok(_) => Ok(Applied::Unchanged(response)),
            Err(at) => {
                user.roles.insert(at, r.role);
                Ok(Applied::Changed(response))
            }
        }
    }

    fn user_revoke_role(&mut self, r: AuthUserRevokeRoleRequest) -> Result<Applied, Error> {
        if self.enabled && r.name == ROOT && r.role == ROOT {
            return Err(Error::InvalidAuthManagement);
        }
        let user = self.users.get_mut(&r.name).ok_or(Error::UserNotFound)?;
        let at = user
            .roles
            .binary_search(&r.role)
            .map_err(|_| Error::RoleNotGranted)?;
        user.roles.remove(at);
        Ok(Applied::Changed(AuthResponse::UserRevokeRole(
            AuthUserRevokeRoleResponse::default(),
        )))
    }

    fn role_add(&mut self, r: AuthRoleAddRequest) -> Result<Applied, Error> {
        if r.name.is_empty() {
            return Err(Error::RoleEmpty);
        }
        if self.roles.contains_key(&r.name) {
            return Err(Error::RoleAlreadyExists);
        }
        let role = Role {
            name: r.name.clone().into_bytes(),
            key_permission: Vec::new(),
        };
        self.roles.insert(r.name, role);
        Ok(Applied::Changed(AuthResponse::RoleAdd(
            AuthRoleAddResponse::default(),
        )))
    }

    fn role_delete(&mut self, r: AuthRoleDeleteRequest) -> Result<Applied, Error> {
        if self.enabled && r.role == ROOT {
            return Err(Error::InvalidAuthManagement);
        }
        if self.roles.remove(&r.role).is_none() {
            return Err(Error::RoleNotFound);
        }
        for user in self.users.values_mut() {
            user.roles.retain(|role| *role != r.role);
        }
        Ok(Applied::Changed(AuthResponse::RoleDelete(
            AuthRoleDeleteResponse::default(),
        )))
    }

    fn role_grant_permission(
        &mut self,
        r: AuthRoleGrantPermissionRequest,
    ) -> Result<Applied, Error> {
        let role = self.roles.get_mut(&r.name).ok_or(Error::RoleNotFound)?;
        grant(&mut role.key_permission, r.perm.unwrap_or_default());
        Ok(Applied::Changed(AuthResponse::RoleGrantPermission(
            AuthRoleGrantPermissionResponse::default(),
        )))
    }

    fn role_revoke_permission(
        &mut self,
        r: AuthRoleRevokePermissionRequest,
    ) -> Result<Applied, Error> {
        let role = self.roles.get_mut(&r.role).ok_or(Error::RoleNotFound)?;
        let before = role.key_permission.len();
        role.key_permission
            .retain(|p| p.key != r.key || p.range_end != r.range_end);
        if role.key_permission.len() == before {
            return Err(Error::PermissionNotGranted);
        }
        Ok(Applied::Changed(AuthResponse::RoleRevokePermission(
            AuthRoleRevokePermissionResponse::default(),
        )))
    }

    /// Answers a read from the applied state.
    pub fn read(&self, read: &AuthRead) -> Result<AuthResponse, Error> {
        Ok(match read {
            AuthRead::Status | AuthRead::Admin => AuthResponse::Status(AuthStatusResponse {
                header: None,
                enabled: self.enabled,
                auth_revision: self.revision,
            }),
            AuthRead::UserGet(r) => {
                let user = self.users.get(&r.name).ok_or(Error::UserNotFound)?;
                AuthResponse::UserGet(AuthUserGetResponse {
                    header: None,
                    roles: user.roles.clone(),
                })
            }
            AuthRead::UserList => AuthResponse::UserList(AuthUserListResponse {
                header: None,
                users: self.users.keys().cloned().collect(),
            }),
            AuthRead::RoleGet(r) => {
                let role = self.roles.get(&r.role).ok_or(Error::RoleNotFound)?;
                AuthResponse::RoleGet(AuthRoleGetResponse {
                    header: None,
                    perm: role.key_permission.clone(),
                })
            }
            AuthRead::RoleList => AuthResponse::RoleList(AuthRoleListResponse {
                header: None,
                roles: self.roles.keys().cloned().collect(),
            }),
            AuthRead::Password { name } => {
                // etcd's password check tells a user without a password
                // apart, in its own words.
                let no_password = |u: &User| u.options.as_ref().is_some_and(|o| o.no_password);
                if self.enabled && self.users.get(name).is_some_and(no_password) {
                    return Err(Error::NoPasswordUser);
                }
                let user = self.authenticable(name)?;
                AuthResponse::Password(PasswordHash {
                    header: None,
                    hash: String::from_utf8_lossy(&user.password).into_owned(),
                    revision: self.revision,
                })
            }
        })
    }
}

/// What a change that passed its checks did to the store.
enum Applied {
    /// The store changed: the revision moves on.
    Changed(AuthResponse),
    /// There was nothing to change (etcd answers success and keeps the
    /// revision).
    Unchanged(AuthResponse),
}

/// Grants `perm` as etcd does: a permission on the same key and range end
/// changes type; another is inserted in key order.
fn grant(perms: &mut Vec<Permission>, perm: Permission) {
    if let Some(existing) = perms
        .iter_mut()
        .find(|p| p.key == perm.key && p.range_end == perm.range_end)
    {
        existing.perm_type = perm.perm_type;
        return;
    }
    let at = perms.partition_point(|p| p.key <= perm.key);
    perms.insert(at, perm);
}

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests {
    use oxetcd_proto::etcdserverpb::{
        AuthRoleAddRequest, AuthRoleDeleteRequest, AuthRoleGrantPermissionRequest,
        AuthRoleRevokePermissionRequest, AuthUserAddRequest, AuthUserChangePasswordRequest,
        AuthUserDeleteRequest, AuthUserGrantRoleRequest, AuthUserRevokeRoleRequest,
    };

    use super::*;

    fn user_add(name: &str) -> AuthChange {
        AuthChange::UserAdd(AuthUserAddRequest {
            name: name.to_owned(),
            hashed_password: format!("hash of {name}"),
            ..Default::default()
        })
    }

    fn role_add(name: &str) -> AuthChange {
        AuthChange::RoleAdd(AuthRoleAddRequest {
            name: name.to_owned(),
        })
    }

    fn perm(key: &str, end: &str, perm_type: i32) -> Permission {
        Permission {
            perm_type,
            key: key.as_bytes().to_vec(),
            range_end: end.as_bytes().to_vec(),
        }
    }

    #[test]
    fn users_get_etcds_checks_and_every_change_bumps_the_revision() {
        let mut store = AuthStore::default();
        assert_eq!(
            store.apply(user_add(""), Instant::ZERO),
            Err(Error::UserEmpty)
        );
        store.apply(user_add("b"), Instant::ZERO).unwrap();
        store.apply(user_add("a"), Instant::ZERO).unwrap();
        assert_eq!(
            store.apply(user_add("a"), Instant::ZERO),
            Err(Error::UserAlreadyExists)
        );
        assert_eq!(store.revision(), 2, "failures change nothing");
        let Ok(AuthResponse::UserList(list)) = store.read(&AuthRead::UserList) else {
            panic!("list")
        };
        assert_eq!(list.users, ["a", "b"]);
        let change = AuthChange::UserChangePassword(AuthUserChangePasswordRequest {
            name: "nobody".into(),
            hashed_password: "x".into(),
            ..Default::default()
        });
        assert_eq!(store.apply(change, Instant::ZERO), Err(Error::UserNotFound));
        let delete = |name: &str| {
            AuthChange::UserDelete(AuthUserDeleteRequest {
                name: name.to_owned(),
            })
        };
        store.apply(delete("a"), Instant::ZERO).unwrap();
        assert_eq!(
            store.apply(delete("a"), Instant::ZERO),
            Err(Error::UserNotFound)
        );
        assert_eq!(store.revision(), 3);
    }

    #[test]
    fn roles_are_granted_revoked_and_removed_from_users_with_their_deletion() {
        let mut store = AuthStore::default();
        store.apply(user_add("u"), Instant::ZERO).unwrap();
        let grant_role = |role: &str| {
            AuthChange::UserGrantRole(AuthUserGrantRoleRequest {
                user: "u".into(),
                role: role.to_owned(),
            })
        };
        assert_eq!(
            store.apply(grant_role("r"), Instant::ZERO),
            Err(Error::RoleNotFound)
        );
        assert_eq!(
            store.apply(role_add(""), Instant::ZERO),
            Err(Error::RoleEmpty)
        );
        store.apply(role_add("r"), Instant::ZERO).unwrap();
        assert_eq!(
            store.apply(role_add("r"), Instant::ZERO),
            Err(Error::RoleAlreadyExists)
        );
        store.apply(grant_role("r"), Instant::ZERO).unwrap();
        store.apply(grant_role(ROOT), Instant::ZERO).unwrap();
        let revision = store.revision();
        store.apply(grant_role("r"), Instant::ZERO).unwrap();
        assert_eq!(store.revision(), revision, "a second grant changes nothing");
        let get = AuthRead::UserGet(AuthUserGetRequest { name: "u".into() });
        let Ok(AuthResponse::UserGet(user)) = store.read(&get) else {
            panic!("get")
        };
        assert_eq!(user.roles, ["r", ROOT]);
        let revoke = |role: &str| {
            AuthChange::UserRevokeRole(AuthUserRevokeRoleRequest {
                name: "u".into(),
                role: role.to_owned(),
            })
        };
        store.apply(revoke(ROOT), Instant::ZERO).unwrap();
        assert_eq!(
            store.apply(revoke(ROOT), Instant::ZERO),
            Err(Error::RoleNotGranted)
        );
        let delete = AuthChange::RoleDelete(AuthRoleDeleteRequest { role: "r".into() });
        store.apply(delete.clone(), Instant::ZERO).unwrap();
        assert_eq!(store.apply(delete, Instant::ZERO), Err(Error::RoleNotFound));
        let Ok(AuthResponse::UserGet(user)) = store.read(&get) else {
            panic!("get")
        };
        assert!(user.roles.is_empty());
    }

    #[test]
    fn permissions_merge_by_key_and_range_and_stay_sorted() {
        let mut store = AuthStore::default();
        store.apply(role_add("r"), Instant::ZERO).unwrap();
        for p in [perm("b", "", 0), perm("a", "c", 1), perm("b", "", 2)] {
            let change = AuthChange::RoleGrantPermission(AuthRoleGrantPermissionRequest {
                name: "r".into(),
                perm: Some(p),
            });
            store.apply(change, Instant::ZERO).unwrap();
        }
        let get = AuthRead::RoleGet(AuthRoleGetRequest { role: "r".into() });
        let Ok(AuthResponse::RoleGet(role)) = store.read(&get) else {
            panic!("get")
        };
        assert_eq!(role.perm, [perm("a", "c", 1), perm("b", "", 2)]);
        let revoke = |key: &str, end: &str| {
            AuthChange::RoleRevokePermission(AuthRoleRevokePermissionRequest {
                role: "r".into(),
                key: key.as_bytes().to_vec(),
                range_end: end.as_bytes().to_vec(),
            })
        };
        assert_eq!(
            store.apply(revoke("a", ""), Instant::ZERO),
            Err(Error::PermissionNotGranted)
        );
        store.apply(revoke("a", "c"), Instant::ZERO).unwrap();
        let recovered =
            AuthStore::recover(Some(store.state()), std::time::Duration::from_secs(300));
        assert_eq!(recovered, store, "the stored form holds everything");
    }

    #[test]
    fn enabling_needs_root_then_tokens_and_permissions_decide() {
        use oxetcd_proto::etcdserverpb::{AuthEnableRequest, AuthUserGrantRoleRequest};
        use permission::Access;
        let t0 = Instant::ZERO;
        let mut store = AuthStore::default();
        let enable = || AuthChange::Enable(AuthEnableRequest {});
        assert_eq!(store.apply(enable(), t0), Err(Error::RootUserNotExist));
        store.apply(user_add(ROOT), t0).unwrap();
        assert_eq!(store.apply(enable(), t0), Err(Error::RootRoleNotExist));
        let grant = |user: &str, role: &str| {
            AuthChange::UserGrantRole(AuthUserGrantRoleRequest {
                user: user.to_owned(),
                role: role.to_owned(),
            })
        };
        store.apply(grant(ROOT, ROOT), t0).unwrap();
        store.apply(user_add("reader"), t0).unwrap();
        store.apply(role_add("r"), t0).unwrap();
        let read_a = AuthChange::RoleGrantPermission(AuthRoleGrantPermissionRequest {
            name: "r".into(),
            perm: Some(perm("a", "", 0)),
        });
        store.apply(read_a, t0).unwrap();
        store.apply(grant("reader", "r"), t0).unwrap();
        assert_eq!(
            store.resolve(&Credentials::Anonymous, t0),
            Ok(AuthInfo::default()),
            "off: nobody may do anything"
        );
        assert_eq!(
            store.resolve(&Credentials::Token("x".into()), t0),
            Err(Error::InvalidAuthToken),
            "off: a token is still looked up"
        );
        store.apply(enable(), t0).unwrap();
        assert!(store.enabled());

        // Nobody, a wrong token, then a real one.
        let nobody = store.resolve(&Credentials::Anonymous, t0).unwrap();
        assert_eq!(
            store.check(&nobody, Access::Read, b"a", b""),
            Err(Error::UserEmpty)
        );
        let bad = store.resolve(&Credentials::Token("nope".into()), t0);
        assert_eq!(bad, Err(Error::InvalidAuthToken));
        let authenticate = |name: &str, token: &str| {
            AuthChange::Authenticate(AuthenticateChange {
                name: name.to_owned(),
                token: token.to_owned(),
            })
        };
        assert_eq!(
            store.apply(authenticate("ghost", "g"), t0),
            Err(Error::AuthFailed)
        );
        store.apply(authenticate("reader", "tok.1"), t0).unwrap();
        let reader = store
            .resolve(&Credentials::Token("tok.1".into()), t0)
            .unwrap();
        assert_eq!(reader.user, "reader");
        assert_eq!(store.check(&reader, Access::Read, b"a", b""), Ok(()));
        assert_eq!(
            store.check(&reader, Access::Write, b"a", b""),
            Err(Error::PermissionDenied)
        );
        assert_eq!(
            store.check(&reader, Access::Read, b"b", b""),
            Err(Error::PermissionDenied)
        );
        assert_eq!(store.check_admin(&reader), Err(Error::PermissionDenied));

        // A change after admission: the request is refused as old.
        store.apply(role_add("other"), t0).unwrap();
        assert_eq!(
            store.check(&reader, Access::Read, b"a", b""),
            Err(Error::AuthOldRevision)
        );

        // Deleting the user ends its token; disabling ends every check.
        let delete = AuthChange::UserDelete(AuthUserDeleteRequest {
            name: "reader".into(),
        });
        store.apply(delete, t0).unwrap();
        let gone = store.resolve(&Credentials::Token("tok.1".into()), t0);
        assert_eq!(gone, Err(Error::InvalidAuthToken));
        let root = store
            .resolve(
                &Credentials::User {
                    name: ROOT.into(),
                    revision: None,
                },
                t0,
            )
            .unwrap();
        assert_eq!(store.check_admin(&root), Ok(()));
        assert_eq!(
            store.check(&root, Access::Write, b"anything", b"\0"),
            Ok(())
        );
        store
            .apply(AuthChange::Disable(Default::default()), t0)
            .unwrap();
        assert_eq!(store.check(&nobody, Access::Write, b"a", b""), Ok(()));
    }
}
