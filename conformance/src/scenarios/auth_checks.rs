//! What permissions allow once auth is on: reads and writes by key, range
//! and prefix, txns (compares and both branches), puts with `prev_kv`,
//! a lease's keys, tokens of deleted users, and disabling auth.
//!
//! One deliberate difference from Debian's etcd 3.4.23: `LeaseTimeToLive`
//! with `keys` shows a lease's keys only to a user who may read every one
//! of them (etcd 3.4.26 and 3.5.8 added this check, after key names
//! leaked to users without read access); etcd 3.4.23 shows them to
//! anyone authenticated. The step asserts each side's answer.

use oxetcd_proto::authpb::permission::Type;
use oxetcd_proto::etcdserverpb::compare::CompareResult;
use oxetcd_proto::etcdserverpb::{LeaseGrantRequest, LeaseTimeToLiveRequest, PutRequest};

use super::auth::{disable, enable_with_root, login, INVALID_TOKEN, PERMISSION_DENIED, USER_EMPTY};
use super::{
    cmp_value, everything, expect, get, ok, op_put, op_range, prefix, prefix_end, put, txn,
};
use crate::auth_call::AuthCall;
use crate::target::Target;

/// Users, their one role each, and the role's one permission (a prefix).
const USERS: [(&str, &str, Type, &str); 5] = [
    ("reader", "ro", Type::Read, "k/"),
    ("writer", "rw", Type::Readwrite, "k/"),
    ("wonly", "wo", Type::Write, "k/"),
    ("prefixer", "pre", Type::Readwrite, "p/"),
    ("doomed", "ro", Type::Read, "k/"),
];

/// Adds [`USERS`] and their roles.
fn add_users(t: &mut Target) -> Result<(), String> {
    for (user, role, kind, key) in USERS {
        expect(
            &t.auth(AuthCall::user_add(user, &format!("{user}-pw"))),
            "ok",
        )?;
        if !matches!(
            ok(t.auth(AuthCall::RoleList))?,
            oxetcd_core::auth::AuthResponse::RoleList(r) if r.roles.iter().any(|r| r == role)
        ) {
            expect(&t.auth(AuthCall::role_add(role)), "ok")?;
            let end = prefix_end(key.as_bytes());
            expect(
                &t.auth(AuthCall::grant(role, kind, key.as_bytes(), &end)),
                "ok",
            )?;
        }
        expect(&t.auth(AuthCall::grant_role(user, role)), "ok")?;
    }
    Ok(())
}

/// Logs `user` in with its password and makes its token the current one.
fn as_user(t: &mut Target, user: &str) -> Result<String, String> {
    t.set_token(None);
    let token = login(t, user, &format!("{user}-pw"))?;
    t.set_token(Some(&token));
    Ok(token)
}

/// Reads and writes by key, prefix, range and from a key: read-only users
/// cannot write, write-only users cannot read (nor put with `prev_kv`,
/// which reads), prefix users cannot leave their prefix; root may do
/// anything; a grant counts at once for tokens taken before it.
pub(super) fn auth_key_permissions(t: &mut Target) -> Result<(), String> {
    ok(t.put(put("k/1", "a")))?;
    ok(t.put(put("p/1", "b")))?;
    ok(t.put(put("other", "c")))?;
    add_users(t)?;
    let root = enable_with_root(t)?;

    let reader = as_user(t, "reader")?;
    expect(&t.range(get("k/1")), "rev 4 count 1 [k/1=a c2 m2 v1]")?;
    expect(&t.range(prefix("k/")), "rev 4 count 1 [k/1=a c2 m2 v1]")?;
    expect(&t.put(put("k/1", "x")), PERMISSION_DENIED)?;
    expect(&t.delete_range(super::del("k/1")), PERMISSION_DENIED)?;
    expect(&t.range(get("other")), PERMISSION_DENIED)?;
    expect(&t.range(prefix("k")), PERMISSION_DENIED)?;

    as_user(t, "writer")?;
    expect(&t.put(put("k/2", "w")), "rev 5")?;
    let with_prev = PutRequest {
        prev_kv: true,
        ..put("k/2", "w2")
    };
    expect(&t.put(with_prev.clone()), "rev 6 prev k/2=w c5 m5 v1")?;
    expect(&t.put(put("p/2", "w")), PERMISSION_DENIED)?;

    as_user(t, "wonly")?;
    expect(&t.put(put("k/3", "o")), "rev 7")?;
    expect(&t.put(with_prev), PERMISSION_DENIED)?;
    expect(&t.range(get("k/3")), PERMISSION_DENIED)?;
    expect(&t.delete_range(super::del("k/3")), "rev 8 deleted 1")?;

    let prefixer = as_user(t, "prefixer")?;
    expect(&t.range(prefix("p/")), "rev 8 count 1 [p/1=b c3 m3 v1]")?;
    expect(&t.range(get("other")), PERMISSION_DENIED)?;
    expect(&t.range(everything()), PERMISSION_DENIED)?;
    expect(&t.range(prefix("p")), PERMISSION_DENIED)?;
    expect(&t.put(put("p/3", "x")), "rev 9")?;
    expect(&t.put(put("q", "x")), PERMISSION_DENIED)?;

    t.set_token(Some(&root));
    expect(&t.range(everything()), "rev 9 count 5 [k/1=a c2 m2 v1, k/2=w2 c5 m6 v2, other=c c4 m4 v1, p/1=b c3 m3 v1, p/3=x c9 m9 v1]")?;

    // A from-key grant and a range grant, taking effect on a token taken
    // before them.
    expect(
        &t.auth(AuthCall::grant("ro", Type::Read, b"o", b"\0")),
        "ok",
    )?;
    expect(
        &t.auth(AuthCall::grant("pre", Type::Write, b"a", b"c")),
        "ok",
    )?;
    t.set_token(Some(&reader));
    expect(
        &t.range(super::range("o", "\0")),
        "rev 9 count 3 [other=c c4 m4 v1, p/1=b c3 m3 v1, p/3=x c9 m9 v1]",
    )?;
    expect(&t.range(super::range("n", "\0")), PERMISSION_DENIED)?;
    expect(&t.put(put("other", "r")), PERMISSION_DENIED)?;
    t.set_token(Some(&prefixer));
    expect(&t.put(put("b", "x")), "rev 10")?;
    expect(&t.put(put("c", "x")), PERMISSION_DENIED)?;
    expect(&t.range(get("b")), PERMISSION_DENIED)?;
    disable(t, &root)
}

/// A txn needs read on every key it compares and on every range in
/// either branch, and write on every put and delete in either branch —
/// whichever branch runs.
pub(super) fn auth_txn_permissions(t: &mut Target) -> Result<(), String> {
    ok(t.put(put("k/1", "a")))?;
    ok(t.put(put("other", "c")))?;
    add_users(t)?;
    let root = enable_with_root(t)?;
    let is_a = || cmp_value("k/1", CompareResult::Equal, "a");

    as_user(t, "reader")?;
    expect(
        &t.txn(txn(vec![is_a()], vec![op_range(get("k/1"))], vec![])),
        "rev 3 succeeded {range(rev 3 count 1 [k/1=a c2 m2 v1])}",
    )?;
    // A put in the branch that does not run is refused all the same.
    expect(
        &t.txn(txn(
            vec![is_a()],
            vec![op_range(get("k/1"))],
            vec![op_put(put("k/1", "b"))],
        )),
        PERMISSION_DENIED,
    )?;

    as_user(t, "writer")?;
    expect(
        &t.txn(txn(vec![is_a()], vec![op_put(put("k/1", "b"))], vec![])),
        "rev 4 succeeded {put(rev 4)}",
    )?;
    // Comparing a key the user may not read.
    expect(
        &t.txn(txn(
            vec![cmp_value("other", CompareResult::Equal, "c")],
            vec![op_put(put("k/1", "c"))],
            vec![],
        )),
        PERMISSION_DENIED,
    )?;
    // Reading outside the prefix in the failure branch.
    expect(
        &t.txn(txn(vec![is_a()], vec![], vec![op_range(get("other"))])),
        PERMISSION_DENIED,
    )?;

    as_user(t, "wonly")?;
    expect(
        &t.txn(txn(vec![], vec![op_put(put("k/2", "x"))], vec![])),
        "rev 5 succeeded {put(rev 5)}",
    )?;
    expect(
        &t.txn(txn(vec![is_a()], vec![op_put(put("k/2", "y"))], vec![])),
        PERMISSION_DENIED,
    )?;

    t.set_token(Some(&root));
    expect(&t.range(get("k/1")), "rev 5 count 1 [k/1=b c2 m4 v2]")?;
    disable(t, &root)
}

/// A lease's keys in `LeaseTimeToLive`, the token of a user deleted after
/// it logged in, and auth disabled opening everything again.
pub(super) fn auth_leases_tokens_and_disable(t: &mut Target) -> Result<(), String> {
    let lease = 7;
    ok(t.lease_grant(LeaseGrantRequest {
        ttl: 600,
        id: lease,
    }))?;
    ok(t.put(PutRequest {
        lease,
        ..put("k/l", "held")
    }))?;
    add_users(t)?;
    let root = enable_with_root(t)?;
    let ttl = |keys| LeaseTimeToLiveRequest { id: lease, keys };

    as_user(t, "reader")?;
    let shown = ok(t.lease_time_to_live(ttl(true)))?;
    super::ensure(shown.keys == [b"k/l".to_vec()], || {
        format!("the reader was shown keys {:?}", shown.keys)
    })?;
    as_user(t, "prefixer")?;
    ok(t.lease_time_to_live(ttl(false)))?;
    let keys = t.lease_time_to_live(ttl(true));
    if t.is_etcd() {
        // etcd 3.4.23 shows any authenticated user the keys.
        let shown = ok(keys)?;
        super::ensure(shown.keys == [b"k/l".to_vec()], || {
            format!("etcd showed the prefixer keys {:?}", shown.keys)
        })?;
    } else {
        expect(&keys, PERMISSION_DENIED)?;
    }

    // A deleted user's token is refused at once.
    let doomed = as_user(t, "doomed")?;
    expect(&t.range(get("k/l")), "rev 2 count 1 [k/l=held c2 m2 v1 l7]")?;
    t.set_token(Some(&root));
    expect(&t.auth(AuthCall::user_delete("doomed")), "ok")?;
    t.set_token(Some(&doomed));
    expect(&t.range(get("k/l")), INVALID_TOKEN)?;
    expect(&t.put(put("k/l", "x")), INVALID_TOKEN)?;

    // Disabled: anyone without a token may do anything.
    disable(t, &root)?;
    expect(&t.put(put("other", "free")), "rev 3")?;
    expect(
        &t.range(prefix("k/")),
        "rev 3 count 1 [k/l=held c2 m2 v1 l7]",
    )?;
    expect(
        &t.auth(AuthCall::UserList),
        "users [prefixer, reader, root, wonly, writer]",
    )?;
    // And enabled again, the rules are back.
    let root = enable_with_root_again(t)?;
    expect(&t.put(put("other", "x")), USER_EMPTY)?;
    disable(t, &root)
}

/// Enables auth again (root exists already) and logs root in.
fn enable_with_root_again(t: &mut Target) -> Result<String, String> {
    t.set_token(None);
    expect(&t.auth(AuthCall::Enable), "ok")?;
    login(t, "root", super::auth::ROOT_PASSWORD)
}
