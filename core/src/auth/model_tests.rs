//! Random sequences of auth changes and permission checks against a
//! model of who may do what.
//!
//! The model is the plainest statement of etcd's rules: users hold sets of
//! role names, roles hold permissions by (key, range end), and a check is
//! allowed when auth is off, when the user holds the root role, or when one
//! of its roles grants the access on the key. Every change must succeed or
//! fail exactly as the model says, with etcd's error, and bump the auth
//! revision exactly when it changed something; after every step each user's
//! access to each key must be what the model says.

use std::collections::{BTreeMap, BTreeSet};

use oxetcd_proto::authpb::permission::Type as PermissionType;
use oxetcd_proto::authpb::{Permission, UserAddOptions};
use oxetcd_proto::etcdserverpb::{
    AuthDisableRequest, AuthEnableRequest, AuthRoleAddRequest, AuthRoleDeleteRequest,
    AuthRoleGrantPermissionRequest, AuthRoleRevokePermissionRequest, AuthUserAddRequest,
    AuthUserDeleteRequest, AuthUserGrantRoleRequest, AuthUserRevokeRoleRequest,
};
use quickcheck::{Arbitrary, Gen};

use super::permission::Access;
use super::{AuthChange, AuthStore, Credentials};
use crate::error::Error;
use crate::time::Instant;

const USERS: [&str; 3] = ["root", "u1", "u2"];
const ROLES: [&str; 3] = ["root", "r1", "r2"];
const KEYS: [&str; 3] = ["a", "b", "c"];
/// Grants: one key, the range [a, c), and everything from b on.
const GRANTS: [(&str, &str); 3] = [("a", ""), ("a", "c"), ("b", "\0")];

#[derive(Clone, Debug)]
enum Step {
    UserAdd(usize),
    UserDelete(usize),
    RoleAdd(usize),
    RoleDelete(usize),
    Grant(usize, usize),
    Revoke(usize, usize),
    GrantPermission(usize, usize, i32),
    RevokePermission(usize, usize),
    Enable,
    Disable,
}

impl Arbitrary for Step {
    fn arbitrary(g: &mut Gen) -> Self {
        let pick = |g: &mut Gen, n: usize| usize::from(u8::arbitrary(g)) % n;
        match u8::arbitrary(g) % 10 {
            0 => Self::UserAdd(pick(g, USERS.len())),
            1 => Self::UserDelete(pick(g, USERS.len())),
            2 => Self::RoleAdd(pick(g, ROLES.len())),
            3 => Self::RoleDelete(pick(g, ROLES.len())),
            4 => Self::Grant(pick(g, USERS.len()), pick(g, ROLES.len())),
            5 => Self::Revoke(pick(g, USERS.len()), pick(g, ROLES.len())),
            6 => Self::GrantPermission(
                pick(g, ROLES.len()),
                pick(g, GRANTS.len()),
                i32::from(u8::arbitrary(g) % 3),
            ),
            7 => Self::RevokePermission(pick(g, ROLES.len()), pick(g, GRANTS.len())),
            8 => Self::Enable,
            _ => Self::Disable,
        }
    }
}

impl Step {
    fn change(&self) -> AuthChange {
        let user = |u: &usize| USERS[*u].to_owned();
        let role = |r: &usize| ROLES[*r].to_owned();
        match self {
            Self::UserAdd(u) => AuthChange::UserAdd(AuthUserAddRequest {
                name: user(u),
                options: Some(UserAddOptions { no_password: true }),
                ..Default::default()
            }),
            Self::UserDelete(u) => AuthChange::UserDelete(AuthUserDeleteRequest { name: user(u) }),
            Self::RoleAdd(r) => AuthChange::RoleAdd(AuthRoleAddRequest { name: role(r) }),
            Self::RoleDelete(r) => AuthChange::RoleDelete(AuthRoleDeleteRequest { role: role(r) }),
            Self::Grant(u, r) => AuthChange::UserGrantRole(AuthUserGrantRoleRequest {
                user: user(u),
                role: role(r),
            }),
            Self::Revoke(u, r) => AuthChange::UserRevokeRole(AuthUserRevokeRoleRequest {
                name: user(u),
                role: role(r),
            }),
            Self::GrantPermission(r, p, kind) => {
                AuthChange::RoleGrantPermission(AuthRoleGrantPermissionRequest {
                    name: role(r),
                    perm: Some(Permission {
                        perm_type: *kind,
                        key: GRANTS[*p].0.as_bytes().to_vec(),
                        range_end: GRANTS[*p].1.as_bytes().to_vec(),
                    }),
                })
            }
            Self::RevokePermission(r, p) => {
                AuthChange::RoleRevokePermission(AuthRoleRevokePermissionRequest {
                    role: role(r),
                    key: GRANTS[*p].0.as_bytes().to_vec(),
                    range_end: GRANTS[*p].1.as_bytes().to_vec(),
                })
            }
            Self::Enable => AuthChange::Enable(AuthEnableRequest {}),
            Self::Disable => AuthChange::Disable(AuthDisableRequest {}),
        }
    }
}

/// etcd's rules, stated plainly.
#[derive(Debug, Default)]
struct Model {
    enabled: bool,
    users: BTreeMap<&'static str, BTreeSet<&'static str>>,
    /// Permissions by (key, range end), with their type.
    roles: BTreeMap<&'static str, BTreeMap<(&'static str, &'static str), i32>>,
}

impl Model {
    /// Applies `step`: `Ok(true)` when it changed something.
    fn apply(&mut self, step: &Step) -> Result<bool, Error> {
        match *step {
            Step::UserAdd(u) if self.users.contains_key(USERS[u]) => Err(Error::UserAlreadyExists),
            Step::UserAdd(u) => Ok(self.users.insert(USERS[u], BTreeSet::new()).is_none()),
            Step::UserDelete(u) if self.enabled && USERS[u] == "root" => {
                Err(Error::InvalidAuthManagement)
            }
            Step::UserDelete(u) => self
                .users
                .remove(USERS[u])
                .map(|_| true)
                .ok_or(Error::UserNotFound),
            Step::RoleAdd(r) if self.roles.contains_key(ROLES[r]) => Err(Error::RoleAlreadyExists),
            Step::RoleAdd(r) => Ok(self.roles.insert(ROLES[r], BTreeMap::new()).is_none()),
            Step::RoleDelete(r) if self.enabled && ROLES[r] == "root" => {
                Err(Error::InvalidAuthManagement)
            }
            Step::RoleDelete(r) => {
                self.roles.remove(ROLES[r]).ok_or(Error::RoleNotFound)?;
                for roles in self.users.values_mut() {
                    roles.remove(ROLES[r]);
                }
                Ok(true)
            }
            Step::Grant(u, r) => {
                // The root role need not exist as a role to be granted.
                if ROLES[r] != "root" && !self.roles.contains_key(ROLES[r]) {
                    return Err(if self.users.contains_key(USERS[u]) {
                        Error::RoleNotFound
                    } else {
                        Error::UserNotFound
                    });
                }
                let roles = self.users.get_mut(USERS[u]).ok_or(Error::UserNotFound)?;
                Ok(roles.insert(ROLES[r]))
            }
            Step::Revoke(u, r) if self.enabled && USERS[u] == "root" && ROLES[r] == "root" => {
                Err(Error::InvalidAuthManagement)
            }
            Step::Revoke(u, r) => {
                let roles = self.users.get_mut(USERS[u]).ok_or(Error::UserNotFound)?;
                roles
                    .remove(ROLES[r])
                    .then_some(true)
                    .ok_or(Error::RoleNotGranted)
            }
            Step::GrantPermission(r, p, kind) => {
                let role = self.roles.get_mut(ROLES[r]).ok_or(Error::RoleNotFound)?;
                role.insert(GRANTS[p], kind);
                Ok(true)
            }
            Step::RevokePermission(r, p) => {
                let role = self.roles.get_mut(ROLES[r]).ok_or(Error::RoleNotFound)?;
                role.remove(&GRANTS[p])
                    .map(|_| true)
                    .ok_or(Error::PermissionNotGranted)
            }
            Step::Enable if self.enabled => Ok(false),
            Step::Enable => {
                let root = self.users.get("root").ok_or(Error::RootUserNotExist)?;
                if !root.contains("root") {
                    return Err(Error::RootRoleNotExist);
                }
                self.enabled = true;
                Ok(true)
            }
            Step::Disable => Ok(std::mem::replace(&mut self.enabled, false)),
        }
    }

    /// Whether `user` may `write` (or read) `key`.
    fn allows(&self, user: &str, write: bool, key: &str) -> Result<(), Error> {
        if !self.enabled {
            return Ok(());
        }
        let roles = self.users.get(user).ok_or(Error::PermissionDenied)?;
        let granted = roles.contains("root")
            || roles.iter().filter_map(|r| self.roles.get(r)).any(|perms| {
                perms.iter().any(|(&(from, end), &kind)| {
                    let inside = match end {
                        "" => key == from,
                        "\0" => key >= from,
                        end => from <= key && key < end,
                    };
                    let kind_fits = kind == PermissionType::Readwrite as i32
                        || (kind == PermissionType::Write as i32) == write;
                    inside && kind_fits
                })
            });
        if granted {
            Ok(())
        } else {
            Err(Error::PermissionDenied)
        }
    }
}

#[test]
fn changes_and_checks_agree_with_the_model() {
    fn agrees(steps: Vec<Step>) -> Result<(), String> {
        let now = Instant::ZERO;
        let mut store = AuthStore::default();
        let mut model = Model::default();
        for (i, step) in steps.iter().enumerate() {
            let before = store.revision();
            let got = store.apply(step.change(), now).map(|_| ());
            let want = model.apply(step);
            if got != want.clone().map(|_| ()) {
                return Err(format!("step {i} {step:?}: store {got:?}, model {want:?}"));
            }
            let bumped = store.revision() != before;
            if bumped != matches!(want, Ok(true)) {
                return Err(format!(
                    "step {i} {step:?}: revision {before} → {}",
                    store.revision()
                ));
            }
            for user in USERS {
                let who = store
                    .resolve(
                        &Credentials::User {
                            name: user.to_owned(),
                            revision: None,
                        },
                        now,
                    )
                    .map_err(|e| format!("resolving {user}: {e:?}"))?;
                for key in KEYS {
                    for (write, access) in [(false, Access::Read), (true, Access::Write)] {
                        let got = store.check(&who, access, key.as_bytes(), b"");
                        let want = model.allows(user, write, key);
                        if got != want {
                            return Err(format!(
                                "after step {i} {step:?}: {user} write={write} {key}: \
                                 store {got:?}, model {want:?}"
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
    fn property(steps: Vec<Step>) -> quickcheck::TestResult {
        match agrees(steps) {
            Ok(()) => quickcheck::TestResult::passed(),
            Err(e) => quickcheck::TestResult::error(e),
        }
    }
    quickcheck::QuickCheck::new()
        .tests(1_000)
        .rng(Gen::new(60))
        .quickcheck(property as fn(Vec<Step>) -> quickcheck::TestResult);
}
