//! The `json` format: what Go's `encoding/json` makes of the response types
//! etcdctl prints, with their JSON tags (`cluster_id`, `create_revision`,
//! `dbSize`, …), `omitempty` where the tags have it, base64 for bytes.
//!
//! Several lease responses are etcd client structs that embed the header,
//! so its fields appear at the top level; the watch response is the
//! client's own struct with Go field names (`Header`, `Events`, …).

use oxetcd_proto::etcdserverpb::response_op::Response;
use oxetcd_proto::etcdserverpb::{
    DeleteRangeResponse, HashKvResponse, Member, PutResponse, RangeResponse, ResponseHeader,
    StatusResponse, TxnResponse,
};
use oxetcd_proto::mvccpb::{Event, KeyValue};

use super::go::json_string;
use super::View;

pub(super) fn render(view: &View<'_>) -> String {
    let mut text = match *view {
        View::Get(r) => range(r),
        View::Put(r) => put(r),
        View::Del(r) => del(r),
        View::Txn(r) => txn(r),
        View::Watch(r) => {
            let mut o = Obj::new();
            o.raw(
                "Header",
                &header(r.header.as_ref().unwrap_or(&ResponseHeader::default())),
            );
            if r.events.is_empty() {
                o.raw("Events", "null");
            } else {
                o.raw("Events", &list(r.events.iter().map(event)));
            }
            o.int("CompactRevision", r.compact_revision, false);
            o.boolean("Canceled", r.canceled, false);
            o.boolean("Created", r.created, false);
            o.finish()
        }
        View::Grant(r) => {
            let mut o = Obj::new();
            o.embed(r.header.as_ref());
            o.int("ID", r.id, false);
            o.int("TTL", r.ttl, false);
            o.string("Error", &r.error, false);
            o.finish()
        }
        View::Revoke(_, r) => only_header(r.header.as_ref()),
        View::KeepAlive(r) => {
            let mut o = Obj::new();
            o.embed(r.header.as_ref());
            o.int("ID", r.id, false);
            o.int("TTL", r.ttl, false);
            o.finish()
        }
        View::TimeToLive(r, _) => {
            let mut o = Obj::new();
            o.embed(r.header.as_ref());
            o.int("id", r.id, false);
            o.int("ttl", r.ttl, false);
            o.int("granted-ttl", r.granted_ttl, false);
            if r.keys.is_empty() {
                o.raw("keys", "null");
            } else {
                o.raw(
                    "keys",
                    &list(r.keys.iter().map(|k| json_string(&base64(k)))),
                );
            }
            o.finish()
        }
        View::Leases(r) => {
            let mut o = Obj::new();
            o.embed(r.header.as_ref());
            o.raw(
                "leases",
                &list(r.leases.iter().map(|l| {
                    let mut o = Obj::new();
                    o.int("id", l.id, false);
                    o.finish()
                })),
            );
            o.finish()
        }
        View::MemberAdd { response: r, .. } => {
            let mut o = Obj::new();
            o.header(r.header.as_ref());
            if let Some(m) = &r.member {
                o.raw("member", &member(m));
            }
            o.members(&r.members);
            o.finish()
        }
        View::MemberRemove(_, r) => members_response(r.header.as_ref(), &r.members),
        View::MemberUpdate(_, r) => members_response(r.header.as_ref(), &r.members),
        View::MemberPromote(_, r) => members_response(r.header.as_ref(), &r.members),
        View::MemberList(r) => members_response(r.header.as_ref(), &r.members),
        View::EndpointHealth(list_) => list(list_.iter().map(|h| {
            let mut o = Obj::new();
            o.string("endpoint", &h.endpoint, false);
            o.boolean("health", h.health, false);
            o.string("took", &h.took, false);
            o.string("error", &h.error, true);
            o.finish()
        })),
        View::EndpointStatus(list_) => list(list_.iter().map(|(endpoint, s)| {
            let mut o = Obj::new();
            o.string("Endpoint", endpoint, false);
            o.raw("Status", &status(s));
            o.finish()
        })),
        View::EndpointHashKv(list_) => list(list_.iter().map(|(endpoint, h)| {
            let mut o = Obj::new();
            o.string("Endpoint", endpoint, false);
            o.raw("HashKV", &hash_kv(h));
            o.finish()
        })),
        View::MoveLeader { response, .. } => only_header(response.header.as_ref()),
        View::DbStatus(status) => format!(
            "{{\"hash\":{},\"revision\":{},\"totalKey\":{},\"totalSize\":{}}}",
            status.hash, status.revision, status.total_key, status.total_size
        ),
        View::Alarm(r) => {
            let mut o = Obj::new();
            o.header(r.header.as_ref());
            if !r.alarms.is_empty() {
                o.raw(
                    "alarms",
                    &list(r.alarms.iter().map(|a| {
                        let mut o = Obj::new();
                        o.uint("memberID", a.member_id, true);
                        o.int("alarm", i64::from(a.alarm), true);
                        o.finish()
                    })),
                );
            }
            o.finish()
        }
        View::Downgrade(_, r) => {
            let mut o = Obj::new();
            o.header(r.header.as_ref());
            o.string("version", &r.version, true);
            o.finish()
        }
        View::AuthStatus(r) => {
            let mut o = Obj::new();
            o.header(r.header.as_ref());
            o.boolean("enabled", r.enabled, true);
            o.uint("authRevision", r.auth_revision, true);
            o.finish()
        }
        View::AuthChange(_, header) => only_header(header),
        View::UserGet(_, r) => names(r.header.as_ref(), "roles", &r.roles),
        View::UserList(r) => names(r.header.as_ref(), "users", &r.users),
        View::RoleList(r) => names(r.header.as_ref(), "roles", &r.roles),
        View::RoleGet(_, r) => {
            let mut o = Obj::new();
            o.header(r.header.as_ref());
            if !r.perm.is_empty() {
                o.raw(
                    "perm",
                    &list(r.perm.iter().map(|p| {
                        let mut o = Obj::new();
                        o.int("permType", i64::from(p.perm_type), true);
                        o.bytes("key", &p.key);
                        o.bytes("range_end", &p.range_end);
                        o.finish()
                    })),
                );
            }
            o.finish()
        }
    };
    text.push('\n');
    text
}

fn range(r: &RangeResponse) -> String {
    let mut o = Obj::new();
    o.header(r.header.as_ref());
    if !r.kvs.is_empty() {
        o.raw("kvs", &list(r.kvs.iter().map(key_value)));
    }
    o.boolean("more", r.more, true);
    o.int("count", r.count, true);
    o.finish()
}

fn put(r: &PutResponse) -> String {
    let mut o = Obj::new();
    o.header(r.header.as_ref());
    if let Some(prev) = &r.prev_kv {
        o.raw("prev_kv", &key_value(prev));
    }
    o.finish()
}

fn del(r: &DeleteRangeResponse) -> String {
    let mut o = Obj::new();
    o.header(r.header.as_ref());
    o.int("deleted", r.deleted, true);
    if !r.prev_kvs.is_empty() {
        o.raw("prev_kvs", &list(r.prev_kvs.iter().map(key_value)));
    }
    o.finish()
}

fn txn(r: &TxnResponse) -> String {
    let mut o = Obj::new();
    o.header(r.header.as_ref());
    o.boolean("succeeded", r.succeeded, true);
    if !r.responses.is_empty() {
        o.raw(
            "responses",
            &list(r.responses.iter().map(|op| {
                let inner = match &op.response {
                    Some(Response::ResponseRange(r)) => {
                        format!("{{\"ResponseRange\":{}}}", range(r))
                    }
                    Some(Response::ResponsePut(r)) => format!("{{\"ResponsePut\":{}}}", put(r)),
                    Some(Response::ResponseDeleteRange(r)) => {
                        format!("{{\"ResponseDeleteRange\":{}}}", del(r))
                    }
                    Some(Response::ResponseTxn(r)) => format!("{{\"ResponseTxn\":{}}}", txn(r)),
                    None => "null".to_owned(),
                };
                let mut o = Obj::new();
                o.raw("Response", &inner);
                o.finish()
            })),
        );
    }
    o.finish()
}

fn status(s: &StatusResponse) -> String {
    let mut o = Obj::new();
    o.header(s.header.as_ref());
    o.string("version", &s.version, true);
    o.int("dbSize", s.db_size, true);
    o.uint("leader", s.leader, true);
    o.uint("raftIndex", s.raft_index, true);
    o.uint("raftTerm", s.raft_term, true);
    o.uint("raftAppliedIndex", s.raft_applied_index, true);
    if !s.errors.is_empty() {
        o.raw("errors", &list(s.errors.iter().map(|e| json_string(e))));
    }
    o.int("dbSizeInUse", s.db_size_in_use, true);
    o.boolean("isLearner", s.is_learner, true);
    // etcd 3.5+'s storageVersion, dbSizeQuota and downgradeInfo are left
    // out: etcdctl 3.4, whose output this matches, does not know them.
    o.finish()
}

fn hash_kv(h: &HashKvResponse) -> String {
    let mut o = Obj::new();
    o.header(h.header.as_ref());
    o.uint("hash", u64::from(h.hash), true);
    o.int("compact_revision", h.compact_revision, true);
    // hash_revision (etcd 3.5+) is left out, as etcdctl 3.4 prints it.
    o.finish()
}

fn members_response(h: Option<&ResponseHeader>, members: &[Member]) -> String {
    let mut o = Obj::new();
    o.header(h);
    o.members(members);
    o.finish()
}

fn member(m: &Member) -> String {
    let mut o = Obj::new();
    o.uint("ID", m.id, true);
    o.string("name", &m.name, true);
    if !m.peer_ur_ls.is_empty() {
        o.raw(
            "peerURLs",
            &list(m.peer_ur_ls.iter().map(|u| json_string(u))),
        );
    }
    if !m.client_ur_ls.is_empty() {
        o.raw(
            "clientURLs",
            &list(m.client_ur_ls.iter().map(|u| json_string(u))),
        );
    }
    o.boolean("isLearner", m.is_learner, true);
    o.finish()
}

/// A header and a list of names (`omitempty`, as the auth responses'
/// `roles` and `users` are).
fn names(h: Option<&ResponseHeader>, field: &str, names: &[String]) -> String {
    let mut o = Obj::new();
    o.header(h);
    if !names.is_empty() {
        o.raw(field, &list(names.iter().map(|n| json_string(n))));
    }
    o.finish()
}

fn only_header(h: Option<&ResponseHeader>) -> String {
    let mut o = Obj::new();
    o.header(h);
    o.finish()
}

fn header(h: &ResponseHeader) -> String {
    let mut o = Obj::new();
    o.header_fields(h);
    o.finish()
}

/// A key-value as mvccpb's JSON tags have it (all `omitempty`).
pub(super) fn key_value(kv: &KeyValue) -> String {
    let mut o = Obj::new();
    o.bytes("key", &kv.key);
    o.int("create_revision", kv.create_revision, true);
    o.int("mod_revision", kv.mod_revision, true);
    o.int("version", kv.version, true);
    o.bytes("value", &kv.value);
    o.int("lease", kv.lease, true);
    o.finish()
}

fn event(e: &Event) -> String {
    let mut o = Obj::new();
    o.int("type", i64::from(e.r#type), true);
    if let Some(kv) = &e.kv {
        o.raw("kv", &key_value(kv));
    }
    if let Some(prev) = &e.prev_kv {
        o.raw("prev_kv", &key_value(prev));
    }
    o.finish()
}

fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    format!("[{}]", items.join(","))
}

/// Standard base64, as `encoding/json` writes `[]byte`.
pub(super) fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A JSON object written field by field in declaration order, the way
/// `encoding/json` walks a struct.
struct Obj {
    text: String,
    empty: bool,
}

impl Obj {
    fn new() -> Self {
        Self {
            text: "{".to_owned(),
            empty: true,
        }
    }

    fn key(&mut self, name: &str) {
        if !self.empty {
            self.text.push(',');
        }
        self.empty = false;
        self.text.push_str(&json_string(name));
        self.text.push(':');
    }

    fn raw(&mut self, name: &str, json: &str) {
        self.key(name);
        self.text.push_str(json);
    }

    fn int(&mut self, name: &str, value: i64, omit_empty: bool) {
        if !(omit_empty && value == 0) {
            self.raw(name, &value.to_string());
        }
    }

    fn uint(&mut self, name: &str, value: u64, omit_empty: bool) {
        if !(omit_empty && value == 0) {
            self.raw(name, &value.to_string());
        }
    }

    fn boolean(&mut self, name: &str, value: bool, omit_empty: bool) {
        if value || !omit_empty {
            self.raw(name, if value { "true" } else { "false" });
        }
    }

    fn string(&mut self, name: &str, value: &str, omit_empty: bool) {
        if !(omit_empty && value.is_empty()) {
            self.raw(name, &json_string(value));
        }
    }

    /// Bytes are always `omitempty` in etcd's types.
    fn bytes(&mut self, name: &str, value: &[u8]) {
        if !value.is_empty() {
            self.raw(name, &json_string(&base64(value)));
        }
    }

    /// A `header` pointer field: omitted when absent.
    fn header(&mut self, h: Option<&ResponseHeader>) {
        if let Some(h) = h {
            self.raw("header", &header(h));
        }
    }

    /// An embedded `*ResponseHeader`: its fields inline, when present.
    fn embed(&mut self, h: Option<&ResponseHeader>) {
        if let Some(h) = h {
            self.header_fields(h);
        }
    }

    fn header_fields(&mut self, h: &ResponseHeader) {
        self.uint("cluster_id", h.cluster_id, true);
        self.uint("member_id", h.member_id, true);
        self.int("revision", h.revision, true);
        self.uint("raft_term", h.raft_term, true);
    }

    fn members(&mut self, members: &[Member]) {
        if !members.is_empty() {
            self.raw("members", &list(members.iter().map(member)));
        }
    }

    fn finish(mut self) -> String {
        self.text.push('}');
        self.text
    }
}
