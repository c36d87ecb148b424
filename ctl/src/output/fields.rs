//! The `fields` format: one `"Name" : value` line per field, Go-quoted
//! strings, headers first. `None` for the commands etcdctl has no fields
//! output for.

use std::fmt::Write as _;

use oxetcd_proto::etcdserverpb::response_op::Response;
use oxetcd_proto::etcdserverpb::{
    DeleteRangeResponse, PutResponse, RangeResponse, ResponseHeader, TxnResponse,
};
use oxetcd_proto::mvccpb::KeyValue;

use super::go::{quote, string_list};
use super::{alarm_name, event_name, permission_name, View};

pub(super) fn render(view: &View<'_>) -> Option<String> {
    let mut out = String::new();
    let o = &mut out;
    match *view {
        View::Get(r) => get(o, r),
        View::Put(r) => put(o, r),
        View::Del(r) => del(o, r),
        View::Txn(r) => txn(o, r),
        View::Watch(r) => {
            header(o, r.header.as_ref());
            for e in &r.events {
                let _ = writeln!(o, "\"Type\" : {}", event_name(e.r#type));
                if let Some(prev) = &e.prev_kv {
                    kv(o, "Prev", prev);
                }
                kv(o, "", e.kv.as_ref().unwrap_or(&KeyValue::default()));
            }
        }
        View::Grant(r) => {
            header(o, r.header.as_ref());
            let _ = writeln!(o, "\"ID\" : {}\n\"TTL\" : {}", r.id, r.ttl);
        }
        View::Revoke(_, r) => header(o, r.header.as_ref()),
        View::KeepAlive(r) => {
            header(o, r.header.as_ref());
            let _ = writeln!(o, "\"ID\" : {}\n\"TTL\" : {}", r.id, r.ttl);
        }
        View::TimeToLive(r, _) => {
            header(o, r.header.as_ref());
            let _ = writeln!(
                o,
                "\"ID\" : {}\n\"TTL\" : {}\n\"GrantedTTL\" : {}",
                r.id, r.ttl, r.granted_ttl
            );
            for key in &r.keys {
                let _ = writeln!(o, "\"Key\" : {}", quote(key));
            }
        }
        View::Leases(r) => {
            header(o, r.header.as_ref());
            for lease in &r.leases {
                let _ = writeln!(o, "\"ID\" : {}", lease.id);
            }
        }
        View::MemberList(r) => {
            header(o, r.header.as_ref());
            for m in &r.members {
                let _ = writeln!(o, "\"ID\" : {}", m.id);
                let _ = writeln!(o, "\"Name\" : {}", quote(m.name.as_bytes()));
                for url in &m.peer_ur_ls {
                    let _ = writeln!(o, "\"PeerURL\" : {}", quote(url.as_bytes()));
                }
                for url in &m.client_ur_ls {
                    let _ = writeln!(o, "\"ClientURL\" : {}", quote(url.as_bytes()));
                }
                let _ = writeln!(o, "\"IsLearner\" : {}\n", m.is_learner);
            }
        }
        View::EndpointHealth(list) => {
            for h in list {
                let _ = writeln!(o, "\"Endpoint\" : {}", quote(h.endpoint.as_bytes()));
                let _ = writeln!(o, "\"Health\" : {}", h.health);
                let _ = writeln!(o, "\"Took\" : {}", h.took);
                let _ = writeln!(o, "\"Error\" : {}\n", h.error);
            }
        }
        View::EndpointStatus(list) => {
            for (endpoint, s) in list {
                header(o, s.header.as_ref());
                let _ = writeln!(o, "\"Version\" : {}", quote(s.version.as_bytes()));
                let _ = writeln!(o, "\"DBSize\" : {}", s.db_size);
                let _ = writeln!(o, "\"Leader\" : {}", s.leader);
                let _ = writeln!(o, "\"IsLearner\" : {}", s.is_learner);
                let _ = writeln!(o, "\"RaftIndex\" : {}", s.raft_index);
                let _ = writeln!(o, "\"RaftTerm\" : {}", s.raft_term);
                let _ = writeln!(o, "\"RaftAppliedIndex\" : {}", s.raft_applied_index);
                let _ = writeln!(o, "\"Errors\" : {}", string_list(&s.errors));
                let _ = writeln!(o, "\"Endpoint\" : {}\n", quote(endpoint.as_bytes()));
            }
        }
        View::EndpointHashKv(list) => {
            for (endpoint, h) in list {
                header(o, h.header.as_ref());
                let _ = writeln!(o, "\"Endpoint\" : {}", quote(endpoint.as_bytes()));
                let _ = writeln!(o, "\"Hash\" : {}\n", h.hash);
            }
        }
        View::Alarm(r) => {
            header(o, r.header.as_ref());
            for a in &r.alarms {
                let _ = writeln!(o, "\"MemberID\" : {}", a.member_id);
                let _ = writeln!(o, "\"AlarmType\" : {}\n", alarm_name(a.alarm));
            }
        }
        View::DbStatus(status) => {
            let _ = writeln!(o, "\"Hash\" : {}", status.hash);
            let _ = writeln!(o, "\"Revision\" : {}", status.revision);
            let _ = writeln!(o, "\"Keys\" : {}", status.total_key);
            let _ = writeln!(o, "\"Size\" : {}", status.total_size);
        }
        View::Downgrade(_, r) => {
            header(o, r.header.as_ref());
            let _ = writeln!(o, "\"Version\" : {}", r.version);
        }
        View::AuthChange(_, h) => header(o, h),
        View::RoleGet(_, r) => {
            header(o, r.header.as_ref());
            for p in &r.perm {
                // Go's Println puts a space between its operands, after
                // the one already in `"PermType" : `.
                let _ = writeln!(o, "\"PermType\" :  {}", permission_name(p.perm_type));
                let _ = writeln!(o, "\"Key\" : {}", quote(&p.key));
                let _ = writeln!(o, "\"RangeEnd\" : {}", quote(&p.range_end));
            }
        }
        View::RoleList(r) => {
            header(o, r.header.as_ref());
            o.push_str("\"Roles\" :");
            for role in &r.roles {
                let _ = write!(o, " {}", quote(role.as_bytes()));
            }
            o.push('\n');
        }
        // etcdctl has no fields output for these (3.5's `auth status`
        // included).
        View::AuthStatus(_)
        | View::UserGet(..)
        | View::UserList(_)
        | View::MemberAdd { .. }
        | View::MemberRemove(..)
        | View::MemberUpdate(..)
        | View::MemberPromote(..)
        | View::MoveLeader { .. } => return None,
    }
    Some(out)
}

fn header(o: &mut String, h: Option<&ResponseHeader>) {
    let h = h.cloned().unwrap_or_default();
    let _ = writeln!(
        o,
        "\"ClusterID\" : {}\n\"MemberID\" : {}\n\"Revision\" : {}\n\"RaftTerm\" : {}",
        h.cluster_id, h.member_id, h.revision, h.raft_term
    );
}

fn kv(o: &mut String, prefix: &str, kv: &KeyValue) {
    let _ = writeln!(o, "\"{prefix}Key\" : {}", quote(&kv.key));
    let _ = writeln!(o, "\"{prefix}CreateRevision\" : {}", kv.create_revision);
    let _ = writeln!(o, "\"{prefix}ModRevision\" : {}", kv.mod_revision);
    let _ = writeln!(o, "\"{prefix}Version\" : {}", kv.version);
    let _ = writeln!(o, "\"{prefix}Value\" : {}", quote(&kv.value));
    let _ = writeln!(o, "\"{prefix}Lease\" : {}", kv.lease);
}

fn get(o: &mut String, r: &RangeResponse) {
    header(o, r.header.as_ref());
    for item in &r.kvs {
        kv(o, "", item);
    }
    let _ = writeln!(o, "\"More\" : {}\n\"Count\" : {}", r.more, r.count);
}

fn put(o: &mut String, r: &PutResponse) {
    header(o, r.header.as_ref());
    if let Some(prev) = &r.prev_kv {
        kv(o, "Prev", prev);
    }
}

fn del(o: &mut String, r: &DeleteRangeResponse) {
    header(o, r.header.as_ref());
    let _ = writeln!(o, "\"Deleted\" : {}", r.deleted);
    for prev in &r.prev_kvs {
        kv(o, "Prev", prev);
    }
}

fn txn(o: &mut String, r: &TxnResponse) {
    header(o, r.header.as_ref());
    let _ = writeln!(o, "\"Succeeded\" : {}", r.succeeded);
    for op in &r.responses {
        match &op.response {
            Some(Response::ResponseRange(r)) => get(o, r),
            Some(Response::ResponsePut(r)) => put(o, r),
            Some(Response::ResponseDeleteRange(r)) => del(o, r),
            Some(Response::ResponseTxn(r)) => txn(o, r),
            None => {
                let _ = writeln!(o, "\"Unknown\" : \"<nil>\"");
            }
        }
    }
}
