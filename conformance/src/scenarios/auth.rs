//! Auth management: enabling and disabling, users, roles and their
//! permissions, each refusal with etcd's code and words, and the lists as
//! etcd sorts them. What the permissions then allow is in `auth_checks`.
//!
//! Every scenario starts on a fresh target, so none has to undo what it
//! did for the next; each still ends with auth disabled, as etcd's own
//! tests leave a cluster.
//!
//! etcd 3.4 has no `AuthStatus` (it answers `Unimplemented`), so the auth
//! revision — which every successful change moves on by one, and nothing
//! else moves — is asserted on oxetcd and the core only; on etcd the same
//! step asserts the `Unimplemented` answer. Passwords are hashed at
//! bcrypt's lowest cost (`--bcrypt-cost=4` on the servers).
//!
//! `etcdserver: revision of auth store is old` is not provoked here: with
//! simple tokens a request is admitted at the auth revision current when
//! it arrives, so it can only fail that way when an auth change lands
//! between its admission and its apply — a race, not a step a scenario
//! can take deterministically on every target.

use oxetcd_core::auth::AuthResponse;
use oxetcd_proto::authpb::permission::Type;

use super::{ensure, expect, get, ok, prefix_end, put};
use crate::auth_call::AuthCall;
use crate::target::{Failure, Target};

/// etcd's refusals, by name.
pub(super) const USER_EMPTY: &str = "error 3 etcdserver: user name is empty";
pub(super) const AUTH_FAILED: &str =
    "error 3 etcdserver: authentication failed, invalid user ID or password";
pub(super) const PERMISSION_DENIED: &str = "error 7 etcdserver: permission denied";
pub(super) const INVALID_TOKEN: &str = "error 16 etcdserver: invalid auth token";
const NOT_ENABLED: &str = "error 9 etcdserver: authentication is not enabled";
const USER_EXISTS: &str = "error 9 etcdserver: user name already exists";
const USER_NOT_FOUND: &str = "error 9 etcdserver: user name not found";
const ROLE_EXISTS: &str = "error 9 etcdserver: role name already exists";
const ROLE_NOT_FOUND: &str = "error 9 etcdserver: role name not found";
const ROLE_NOT_GRANTED: &str = "error 9 etcdserver: role is not granted to the user";
const PERMISSION_NOT_GRANTED: &str = "error 9 etcdserver: permission is not granted to the role";
const INVALID_MANAGEMENT: &str = "error 3 etcdserver: invalid auth management";

/// Root's password in every scenario.
pub(super) const ROOT_PASSWORD: &str = "root-pw";

/// Authenticates `name` and returns the token.
#[track_caller]
pub(super) fn login(t: &mut Target, name: &str, password: &str) -> Result<String, String> {
    match ok(t.auth(AuthCall::authenticate(name, password)))? {
        AuthResponse::Authenticate(r) if !r.token.is_empty() => Ok(r.token),
        other => Err(format!("authenticating {name} answered {other:?}")),
    }
}

/// Adds `root` with the `root` role, enables auth, and returns root's
/// token; the current token is none afterwards.
pub(super) fn enable_with_root(t: &mut Target) -> Result<String, String> {
    t.set_token(None);
    expect(&t.auth(AuthCall::user_add("root", ROOT_PASSWORD)), "ok")?;
    expect(&t.auth(AuthCall::grant_role("root", "root")), "ok")?;
    expect(&t.auth(AuthCall::Enable), "ok")?;
    login(t, "root", ROOT_PASSWORD)
}

/// Disables auth with `root_token`; the current token is none afterwards.
pub(super) fn disable(t: &mut Target, root_token: &str) -> Result<(), String> {
    t.set_token(Some(root_token));
    let answer = t.auth(AuthCall::Disable);
    t.set_token(None);
    expect(&answer, "ok")
}

/// `AuthStatus` answers `enabled` and `revision` — on oxetcd and the core;
/// Debian's etcd 3.4 has no such RPC and answers `Unimplemented`.
#[track_caller]
pub(super) fn auth_status(t: &mut Target, enabled: bool, revision: u64) -> Result<(), String> {
    let answer = t.auth(AuthCall::Status);
    if t.is_etcd() {
        expect(
            &answer,
            "error 12 unknown method AuthStatus for service etcdserverpb.Auth",
        )
    } else {
        expect(
            &answer,
            &format!("enabled {enabled} auth revision {revision}"),
        )
    }
}

/// Enabling needs a `root` user holding the `root` role; root keeps the
/// role and cannot be deleted while auth is on; with auth on, calls need
/// a valid token and Authenticate a right password; disabling opens
/// everything again. The auth revision moves on with each change.
pub(super) fn auth_enable_needs_root(t: &mut Target) -> Result<(), String> {
    auth_status(t, false, 0)?;
    expect(
        &t.auth(AuthCall::Enable),
        "error 9 etcdserver: root user does not exist",
    )?;
    expect(
        &t.auth(AuthCall::authenticate("root", ROOT_PASSWORD)),
        NOT_ENABLED,
    )?;
    expect(&t.auth(AuthCall::user_add("root", ROOT_PASSWORD)), "ok")?;
    expect(
        &t.auth(AuthCall::Enable),
        "error 9 etcdserver: root user does not have root role",
    )?;
    auth_status(t, false, 1)?;
    expect(&t.auth(AuthCall::grant_role("root", "root")), "ok")?;
    expect(&t.auth(AuthCall::user_get("root")), "roles [root]")?;
    expect(&t.auth(AuthCall::Enable), "ok")?;
    auth_status(t, true, 3)?;
    // Enabling again is an auth change like any other: root's.
    expect(&t.auth(AuthCall::Enable), USER_EMPTY)?;

    // No token: refused as a user with no name; a garbage token: refused.
    expect(&t.auth(AuthCall::UserList), USER_EMPTY)?;
    expect(&t.put(put("k", "v")), USER_EMPTY)?;
    expect(&t.range(get("k")), USER_EMPTY)?;
    t.set_token(Some("no-such-token"));
    expect(&t.auth(AuthCall::UserList), INVALID_TOKEN)?;
    expect(&t.put(put("k", "v")), INVALID_TOKEN)?;
    t.set_token(None);
    expect(
        &t.auth(AuthCall::authenticate("root", "wrong")),
        AUTH_FAILED,
    )?;
    expect(
        &t.auth(AuthCall::authenticate("nobody", ROOT_PASSWORD)),
        AUTH_FAILED,
    )?;
    let root = login(t, "root", ROOT_PASSWORD)?;
    t.set_token(Some(&root));
    auth_status(t, true, 3)?;
    // Enabling again changes nothing.
    expect(&t.auth(AuthCall::Enable), "ok")?;
    auth_status(t, true, 3)?;
    expect(&t.auth(AuthCall::UserList), "users [root]")?;
    expect(&t.put(put("k", "v")), "rev 2")?;
    expect(
        &t.auth(AuthCall::revoke_role("root", "root")),
        INVALID_MANAGEMENT,
    )?;
    expect(&t.auth(AuthCall::user_delete("root")), INVALID_MANAGEMENT)?;
    expect(&t.auth(AuthCall::user_get("root")), "roles [root]")?;

    // Disabling opens everything; the token is then no longer known.
    expect(&t.auth(AuthCall::Disable), "ok")?;
    expect(&t.put(put("k", "w")), INVALID_TOKEN)?;
    t.set_token(None);
    auth_status(t, false, 4)?;
    expect(&t.put(put("k", "w")), "rev 3")?;
    expect(&t.range(get("k")), "rev 3 count 1 [k=w c2 m3 v2]")?;
    expect(&t.auth(AuthCall::UserList), "users [root]")?;
    expect(
        &t.auth(AuthCall::authenticate("root", ROOT_PASSWORD)),
        NOT_ENABLED,
    )?;
    // Without auth, root may lose its role and go.
    expect(&t.auth(AuthCall::revoke_role("root", "root")), "ok")?;
    expect(&t.auth(AuthCall::user_delete("root")), "ok")?;
    auth_status(t, false, 6)
}

/// Users and roles: each refusal etcd makes, the lists sorted by name,
/// a user's roles sorted, granting twice changing nothing, and deleting a
/// role taking it from its users.
pub(super) fn auth_users_and_roles(t: &mut Target) -> Result<(), String> {
    expect(&t.auth(AuthCall::user_add("", "pw")), USER_EMPTY)?;
    for name in ["zed", "alice", "bob"] {
        expect(&t.auth(AuthCall::user_add(name, "pw")), "ok")?;
    }
    expect(&t.auth(AuthCall::user_add("alice", "pw")), USER_EXISTS)?;
    expect(&t.auth(AuthCall::UserList), "users [alice, bob, zed]")?;
    expect(&t.auth(AuthCall::user_get("alice")), "roles []")?;
    expect(&t.auth(AuthCall::user_get("nobody")), USER_NOT_FOUND)?;
    expect(&t.auth(AuthCall::user_delete("nobody")), USER_NOT_FOUND)?;
    let change =
        AuthCall::UserChangePassword(oxetcd_proto::etcdserverpb::AuthUserChangePasswordRequest {
            name: "nobody".to_owned(),
            password: "pw2".to_owned(),
            ..Default::default()
        });
    expect(&t.auth(change), USER_NOT_FOUND)?;
    expect(
        &t.auth(AuthCall::grant_role("nobody", "r1")),
        USER_NOT_FOUND,
    )?;

    expect(
        &t.auth(AuthCall::role_add("")),
        "error 3 etcdserver: role name is empty",
    )?;
    for name in ["r2", "r1", "r3"] {
        expect(&t.auth(AuthCall::role_add(name)), "ok")?;
    }
    expect(&t.auth(AuthCall::role_add("r1")), ROLE_EXISTS)?;
    expect(&t.auth(AuthCall::RoleList), "roles [r1, r2, r3]")?;
    expect(&t.auth(AuthCall::role_get("r1")), "perms []")?;
    expect(&t.auth(AuthCall::role_get("r9")), ROLE_NOT_FOUND)?;
    expect(&t.auth(AuthCall::role_delete("r9")), ROLE_NOT_FOUND)?;
    expect(&t.auth(AuthCall::grant_role("alice", "r9")), ROLE_NOT_FOUND)?;
    expect(
        &t.auth(AuthCall::grant("r9", Type::Read, b"a", b"")),
        ROLE_NOT_FOUND,
    )?;

    expect(&t.auth(AuthCall::grant_role("alice", "r3")), "ok")?;
    expect(&t.auth(AuthCall::grant_role("alice", "r1")), "ok")?;
    expect(&t.auth(AuthCall::user_get("alice")), "roles [r1, r3]")?;
    auth_status(t, false, 8)?;
    // Granting a held role again succeeds and changes nothing.
    expect(&t.auth(AuthCall::grant_role("alice", "r1")), "ok")?;
    auth_status(t, false, 8)?;
    expect(&t.auth(AuthCall::user_get("alice")), "roles [r1, r3]")?;
    expect(
        &t.auth(AuthCall::revoke_role("alice", "r2")),
        ROLE_NOT_GRANTED,
    )?;
    expect(
        &t.auth(AuthCall::revoke_role("nobody", "r2")),
        USER_NOT_FOUND,
    )?;
    expect(&t.auth(AuthCall::revoke_role("alice", "r3")), "ok")?;
    expect(&t.auth(AuthCall::grant_role("bob", "r1")), "ok")?;
    expect(&t.auth(AuthCall::role_delete("r1")), "ok")?;
    expect(&t.auth(AuthCall::user_get("alice")), "roles []")?;
    expect(&t.auth(AuthCall::user_get("bob")), "roles []")?;
    expect(&t.auth(AuthCall::RoleList), "roles [r2, r3]")?;
    expect(&t.auth(AuthCall::user_delete("alice")), "ok")?;
    expect(&t.auth(AuthCall::user_get("alice")), USER_NOT_FOUND)?;
    expect(&t.auth(AuthCall::UserList), "users [bob, zed]")?;
    auth_status(t, false, 12)
}

/// Permissions on a key, a range, a prefix and from a key, for READ,
/// WRITE and READWRITE: kept sorted by key, a second grant on the same
/// key and range end replacing the first, revoking matching key and range
/// end exactly.
pub(super) fn auth_role_permissions(t: &mut Target) -> Result<(), String> {
    expect(&t.auth(AuthCall::role_add("p")), "ok")?;
    let grants: [(Type, &[u8], Vec<u8>); 4] = [
        (Type::Readwrite, b"p/", prefix_end(b"p/")),
        (Type::Read, b"k", b"\0".to_vec()),
        (Type::Write, b"b", b"d".to_vec()),
        (Type::Read, b"a", Vec::new()),
    ];
    for (kind, key, end) in &grants {
        expect(&t.auth(AuthCall::grant("p", *kind, key, end)), "ok")?;
    }
    expect(
        &t.auth(AuthCall::role_get("p")),
        "perms [READ a, WRITE [b, d), READ [k, \\x00), READWRITE [p/, p0)]",
    )?;
    expect(&t.auth(AuthCall::grant("p", Type::Write, b"a", b"")), "ok")?;
    expect(
        &t.auth(AuthCall::role_get("p")),
        "perms [WRITE a, WRITE [b, d), READ [k, \\x00), READWRITE [p/, p0)]",
    )?;
    auth_status(t, false, 6)?;
    expect(
        &t.auth(AuthCall::revoke("p", b"b", b"")),
        PERMISSION_NOT_GRANTED,
    )?;
    expect(
        &t.auth(AuthCall::revoke("p", b"b", b"c")),
        PERMISSION_NOT_GRANTED,
    )?;
    expect(&t.auth(AuthCall::revoke("q", b"b", b"d")), ROLE_NOT_FOUND)?;
    expect(&t.auth(AuthCall::revoke("p", b"b", b"d")), "ok")?;
    expect(&t.auth(AuthCall::revoke("p", b"k", b"\0")), "ok")?;
    expect(
        &t.auth(AuthCall::role_get("p")),
        "perms [WRITE a, READWRITE [p/, p0)]",
    )?;
    auth_status(t, false, 8)?;

    // The same rules hold with auth on, for root.
    let root = enable_with_root(t)?;
    t.set_token(Some(&root));
    expect(&t.auth(AuthCall::revoke("p", b"a", b"")), "ok")?;
    expect(
        &t.auth(AuthCall::role_get("p")),
        "perms [READWRITE [p/, p0)]",
    )?;
    // Granting `root` to root made no role of that name.
    expect(&t.auth(AuthCall::RoleList), "roles [p]")?;
    expect(&t.auth(AuthCall::role_get("root")), ROLE_NOT_FOUND)?;
    disable(t, &root)
}

/// A user added without a password exists and may be granted roles, but
/// cannot authenticate: etcd 3.4 refuses with its auth package's own
/// error, passed on unconverted (code Unknown).
pub(super) fn auth_user_without_password(t: &mut Target) -> Result<(), String> {
    expect(&t.auth(AuthCall::user_add_no_password("svc")), "ok")?;
    expect(&t.auth(AuthCall::role_add("r")), "ok")?;
    expect(&t.auth(AuthCall::grant_role("svc", "r")), "ok")?;
    expect(&t.auth(AuthCall::user_get("svc")), "roles [r]")?;
    let root = enable_with_root(t)?;
    t.set_token(None);
    let refused = t.auth(AuthCall::authenticate("svc", "anything"));
    let want = Failure::new(
        2,
        "auth: authentication failed, password was given for no password user",
    );
    ensure(refused.as_ref().err() == Some(&want), || {
        format!("authenticating a user without a password answered {refused:?}")
    })?;
    expect(
        &t.auth(AuthCall::authenticate("svc", "")),
        &format!("error {} {}", want.code, want.message),
    )?;
    disable(t, &root)
}
