//! The `simple` format: keys and values on their own lines, one-line
//! summaries for everything else.

use std::fmt::Write as _;
use std::io::Write as _;

use oxetcd_proto::authpb::Permission;
use oxetcd_proto::etcdserverpb::response_op::Response;
use oxetcd_proto::etcdserverpb::{
    AuthRoleGetResponse, DeleteRangeResponse, PutResponse, RangeResponse,
};
use oxetcd_proto::mvccpb::KeyValue;

use super::{
    alarm_name, db_status_rows, event_name, hash_rows, member_rows, status_rows, AuthChange,
    DowngradeStep, Printer, Rendered, View,
};

pub(super) fn render(printer: &Printer, view: &View<'_>) -> Rendered {
    let mut out: Vec<u8> = Vec::new();
    let mut err = String::new();
    let o = &mut out;
    match *view {
        View::Get(r) => get(printer, o, r),
        View::Put(r) => put(printer, o, r),
        View::Del(r) => del(printer, o, r),
        View::Txn(r) => {
            o.extend_from_slice(if r.succeeded {
                b"SUCCESS\n"
            } else {
                b"FAILURE\n"
            });
            for op in &r.responses {
                o.push(b'\n');
                match &op.response {
                    Some(Response::ResponseRange(r)) => get(printer, o, r),
                    Some(Response::ResponsePut(r)) => put(printer, o, r),
                    Some(Response::ResponseDeleteRange(r)) => del(printer, o, r),
                    _ => {
                        let _ = writeln!(o, "unexpected response {op:?}");
                    }
                }
            }
        }
        View::Watch(r) => {
            for event in &r.events {
                let _ = writeln!(o, "{}", event_name(event.r#type));
                if let Some(prev) = &event.prev_kv {
                    kv(printer, o, prev);
                }
                kv(
                    printer,
                    o,
                    event.kv.as_ref().unwrap_or(&KeyValue::default()),
                );
            }
        }
        View::Grant(r) => {
            let _ = writeln!(o, "lease {:016x} granted with TTL({}s)", r.id, r.ttl);
        }
        View::Revoke(id, _) => {
            let _ = writeln!(o, "lease {id:016x} revoked");
        }
        View::KeepAlive(r) => {
            let _ = writeln!(o, "lease {:016x} keepalived with TTL({})", r.id, r.ttl);
        }
        View::TimeToLive(r, keys) => {
            if r.granted_ttl == 0 && r.ttl == -1 {
                let _ = writeln!(o, "lease {:016x} already expired", r.id);
            } else {
                let _ = write!(
                    o,
                    "lease {:016x} granted with TTL({}s), remaining({}s)",
                    r.id, r.granted_ttl, r.ttl
                );
                if keys {
                    let names: Vec<String> = r
                        .keys
                        .iter()
                        .map(|k| String::from_utf8_lossy(k).into_owned())
                        .collect();
                    let _ = write!(o, ", attached keys({})", super::go::string_list(&names));
                }
                o.push(b'\n');
            }
        }
        View::Leases(r) => {
            let _ = writeln!(o, "found {} leases", r.leases.len());
            for lease in &r.leases {
                let _ = writeln!(o, "{:016x}", lease.id);
            }
        }
        View::Alarm(r) => {
            for alarm in &r.alarms {
                // Go prints the protobuf's compact text form.
                let _ = write!(o, "memberID:{} ", alarm.member_id);
                if alarm.alarm != 0 {
                    let _ = write!(o, "alarm:{} ", alarm_name(alarm.alarm));
                }
                o.push(b'\n');
            }
        }
        View::MemberAdd {
            response,
            name,
            peer_urls,
        } => {
            let new_id = response.member.as_ref().map_or(0, |m| m.id);
            let cluster_id = response.header.as_ref().map_or(0, |h| h.cluster_id);
            let _ = writeln!(o, "Member {new_id:16x} added to cluster {cluster_id:16x}");
            let mut initial = Vec::new();
            for member in &response.members {
                for url in &member.peer_ur_ls {
                    let member_name = if member.id == new_id {
                        name
                    } else {
                        &member.name
                    };
                    initial.push(format!("{member_name}={url}"));
                }
            }
            o.push(b'\n');
            let _ = writeln!(o, "ETCD_NAME={}", super::go::quote(name.as_bytes()));
            let _ = writeln!(
                o,
                "ETCD_INITIAL_CLUSTER={}",
                super::go::quote(initial.join(",").as_bytes())
            );
            let _ = writeln!(
                o,
                "ETCD_INITIAL_ADVERTISE_PEER_URLS={}",
                super::go::quote(peer_urls.as_bytes())
            );
            o.extend_from_slice(b"ETCD_INITIAL_CLUSTER_STATE=\"existing\"\n");
        }
        View::MemberRemove(id, r) => {
            let cluster_id = r.header.as_ref().map_or(0, |h| h.cluster_id);
            let _ = writeln!(o, "Member {id:16x} removed from cluster {cluster_id:16x}");
        }
        View::MemberUpdate(id, r) => {
            let cluster_id = r.header.as_ref().map_or(0, |h| h.cluster_id);
            let _ = writeln!(o, "Member {id:16x} updated in cluster {cluster_id:16x}");
        }
        View::MemberPromote(id, r) => {
            let cluster_id = r.header.as_ref().map_or(0, |h| h.cluster_id);
            let _ = writeln!(o, "Member {id:16x} promoted in cluster {cluster_id:16x}");
        }
        View::MemberList(r) => rows(o, member_rows(r)),
        View::EndpointHealth(list) => {
            for h in list {
                if h.error.is_empty() {
                    let _ = writeln!(
                        err,
                        "{} is healthy: successfully committed proposal: took = {}",
                        h.endpoint, h.took
                    );
                } else {
                    let _ = writeln!(
                        err,
                        "{} is unhealthy: failed to commit proposal: {}",
                        h.endpoint, h.error
                    );
                }
            }
        }
        View::EndpointStatus(list) => rows(o, status_rows(list)),
        View::EndpointHashKv(list) => rows(o, hash_rows(list)),
        View::DbStatus(status) => rows(o, db_status_rows(&status)),
        View::MoveLeader { leader, target, .. } => {
            let _ = writeln!(o, "Leadership transferred from {leader:x} to {target:x}");
        }
        View::Downgrade(step, r) => {
            let step = match step {
                DowngradeStep::Validate => "validate",
                DowngradeStep::Enable => "enable",
                DowngradeStep::Cancel => "cancel",
            };
            let _ = writeln!(o, "Downgrade {step} success, cluster version {}", r.version);
        }
        View::AuthStatus(r) => {
            let _ = writeln!(o, "Authentication Status: {}", r.enabled);
            let _ = writeln!(o, "AuthRevision: {}", r.auth_revision);
        }
        View::AuthChange(change, _) => auth_change(o, change),
        View::UserGet(name, r) => {
            let _ = write!(o, "User: {name}\nRoles:");
            for role in &r.roles {
                let _ = write!(o, " {role}");
            }
            o.push(b'\n');
        }
        View::UserList(r) => lines(o, &r.users),
        View::RoleGet(name, r) => role_get(o, name, r),
        View::RoleList(r) => lines(o, &r.roles),
    }
    Rendered {
        stdout: out,
        stderr: err,
    }
}

fn auth_change(o: &mut Vec<u8>, change: AuthChange<'_>) {
    let _ = match change {
        AuthChange::UserAdded(user) => writeln!(o, "User {user} created"),
        AuthChange::UserDeleted(user) => writeln!(o, "User {user} deleted"),
        AuthChange::PasswordChanged => writeln!(o, "Password updated"),
        AuthChange::RoleGranted { user, role } => {
            writeln!(o, "Role {role} is granted to user {user}")
        }
        AuthChange::RoleRevoked { user, role } => {
            writeln!(o, "Role {role} is revoked from user {user}")
        }
        AuthChange::RoleAdded(role) => writeln!(o, "Role {role} created"),
        AuthChange::RoleDeleted(role) => writeln!(o, "Role {role} deleted"),
        AuthChange::PermissionGranted(role) => writeln!(o, "Role {role} updated"),
        AuthChange::PermissionRevoked {
            role,
            key,
            range_end,
        } => {
            if range_end.is_empty() {
                o.extend_from_slice(b"Permission of key ");
                o.extend_from_slice(key);
            } else {
                o.extend_from_slice(b"Permission of range ");
                key_range(o, key, range_end);
            }
            writeln!(o, " is revoked from role {role}")
        }
    };
}

/// A role's permissions, reads then writes (a read-write one under both):
/// a single key bare, a range as `[key, end)` or `[key, <open ended>`,
/// with `(prefix key)` when the range is exactly a prefix's.
fn role_get(o: &mut Vec<u8>, name: &str, r: &AuthRoleGetResponse) {
    const READ: i32 = 0;
    const WRITE: i32 = 1;
    const READ_WRITE: i32 = 2;
    let _ = writeln!(o, "Role {name}");
    for (heading, kind) in [("KV Read:", READ), ("KV Write:", WRITE)] {
        let _ = writeln!(o, "{heading}");
        for perm in r
            .perm
            .iter()
            .filter(|p| p.perm_type == kind || p.perm_type == READ_WRITE)
        {
            permission(o, perm);
        }
    }
}

fn permission(o: &mut Vec<u8>, perm: &Permission) {
    o.push(b'\t');
    if perm.range_end.is_empty() {
        o.extend_from_slice(&perm.key);
        o.push(b'\n');
        return;
    }
    key_range(o, &perm.key, &perm.range_end);
    if crate::command::kv::prefix_end(&perm.key) == perm.range_end {
        o.extend_from_slice(b" (prefix ");
        o.extend_from_slice(&perm.key);
        o.push(b')');
    }
    o.push(b'\n');
}

/// `[key, end)`, or etcdctl's unclosed `[key, <open ended>` for a range
/// that runs to the end of the key space.
fn key_range(o: &mut Vec<u8>, key: &[u8], end: &[u8]) {
    o.push(b'[');
    o.extend_from_slice(key);
    if end == b"\0" {
        o.extend_from_slice(b", <open ended>");
    } else {
        o.extend_from_slice(b", ");
        o.extend_from_slice(end);
        o.push(b')');
    }
}

fn lines(out: &mut Vec<u8>, items: &[String]) {
    for item in items {
        let _ = writeln!(out, "{item}");
    }
}

fn rows(out: &mut Vec<u8>, rows: Vec<Vec<String>>) {
    for row in rows {
        out.extend_from_slice(row.join(", ").as_bytes());
        out.push(b'\n');
    }
}

fn get(printer: &Printer, out: &mut Vec<u8>, r: &RangeResponse) {
    for item in &r.kvs {
        kv(printer, out, item);
    }
}

fn put(printer: &Printer, out: &mut Vec<u8>, r: &PutResponse) {
    out.extend_from_slice(b"OK\n");
    if let Some(prev) = &r.prev_kv {
        kv(printer, out, prev);
    }
}

fn del(printer: &Printer, out: &mut Vec<u8>, r: &DeleteRangeResponse) {
    let _ = writeln!(out, "{}", r.deleted);
    for prev in &r.prev_kvs {
        kv(printer, out, prev);
    }
}

/// A key line (unless value-only) and a value line, the bytes as stored.
fn kv(printer: &Printer, out: &mut Vec<u8>, item: &KeyValue) {
    let mut line = |bytes: &[u8]| {
        if printer.hex {
            for b in bytes {
                let _ = write!(out, "\\x{b:02x}");
            }
        } else {
            out.extend_from_slice(bytes);
        }
        out.push(b'\n');
    };
    if !printer.value_only {
        line(&item.key);
    }
    line(&item.value);
}
