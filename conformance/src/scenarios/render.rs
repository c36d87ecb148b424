//! A compact, complete text form of KV answers, so expectations read like
//! etcd's documentation and failures show exactly which field differs.
//! Cluster ID, member ID and raft term are left out: they are not the
//! KV's business and differ between servers.

use oxetcd_proto::etcdserverpb::{
    response_op, CompactionResponse, DeleteRangeResponse, LeaseGrantResponse,
    LeaseKeepAliveResponse, LeaseLeasesResponse, LeaseRevokeResponse, LeaseTimeToLiveResponse,
    PutResponse, RangeResponse, ResponseHeader, TxnResponse, WatchResponse,
};
use oxetcd_proto::mvccpb::{Event, KeyValue};
use oxetcd_proto::v3electionpb::{
    CampaignResponse, LeaderResponse, ProclaimResponse, ResignResponse,
};
use oxetcd_proto::v3lockpb::{LockResponse, UnlockResponse};

use crate::target::Failure;

/// Values longer than this render as their length.
const VALUE_SHOWN_BYTES_MAX: usize = 64;

/// A text form of an answer.
pub trait Render {
    /// The rendering (see the module docs of `scenarios`).
    fn render(&self) -> String;
}

impl<T: Render> Render for Result<T, Failure> {
    fn render(&self) -> String {
        match self {
            Ok(answer) => answer.render(),
            Err(e) => format!("error {} {}", e.code, e.message),
        }
    }
}

impl Render for RangeResponse {
    fn render(&self) -> String {
        let more = if self.more { " more" } else { "" };
        format!(
            "{} count {}{more} {}",
            header(self.header.as_ref()),
            self.count,
            kvs(&self.kvs)
        )
    }
}

impl Render for PutResponse {
    fn render(&self) -> String {
        match &self.prev_kv {
            Some(prev) => format!("{} prev {}", header(self.header.as_ref()), kv(prev)),
            None => header(self.header.as_ref()),
        }
    }
}

impl Render for DeleteRangeResponse {
    fn render(&self) -> String {
        let prev = if self.prev_kvs.is_empty() {
            String::new()
        } else {
            format!(" prev {}", kvs(&self.prev_kvs))
        };
        format!(
            "{} deleted {}{prev}",
            header(self.header.as_ref()),
            self.deleted
        )
    }
}

impl Render for TxnResponse {
    fn render(&self) -> String {
        let branch = if self.succeeded {
            "succeeded"
        } else {
            "failed"
        };
        let ops: Vec<String> = self
            .responses
            .iter()
            .map(|op| match &op.response {
                Some(response_op::Response::ResponseRange(r)) => format!("range({})", r.render()),
                Some(response_op::Response::ResponsePut(r)) => format!("put({})", r.render()),
                Some(response_op::Response::ResponseDeleteRange(r)) => {
                    format!("delete({})", r.render())
                }
                Some(response_op::Response::ResponseTxn(r)) => format!("txn({})", r.render()),
                None => "none".to_owned(),
            })
            .collect();
        format!(
            "{} {branch} {{{}}}",
            header(self.header.as_ref()),
            ops.join("; ")
        )
    }
}

impl Render for CompactionResponse {
    fn render(&self) -> String {
        header(self.header.as_ref())
    }
}

/// `rev R watch W` then the flags set, then the events:
/// `[PUT a=1 c2 m2 v1 prev a=0 c2 m1 v1, DELETE b m5]`.
impl Render for WatchResponse {
    fn render(&self) -> String {
        let mut out = format!("{} watch {}", header(self.header.as_ref()), self.watch_id);
        if self.created {
            out.push_str(" created");
        }
        if self.canceled {
            out.push_str(" canceled");
        }
        if !self.cancel_reason.is_empty() {
            out.push_str(&format!(" reason {:?}", self.cancel_reason));
        }
        if self.compact_revision != 0 {
            out.push_str(&format!(" compact {}", self.compact_revision));
        }
        if self.fragment {
            out.push_str(" fragment");
        }
        if !self.events.is_empty() {
            let events: Vec<String> = self.events.iter().map(event).collect();
            out.push_str(&format!(" [{}]", events.join(", ")));
        }
        out
    }
}

impl Render for Option<WatchResponse> {
    fn render(&self) -> String {
        match self {
            Some(response) => response.render(),
            None => "nothing".to_owned(),
        }
    }
}

fn event(event: &Event) -> String {
    let kv_shown = event.kv.as_ref().map_or_else(String::new, |kv| {
        if event.r#type == 1 {
            format!("{} m{}", bytes(&kv.key), kv.mod_revision)
        } else {
            self::kv(kv)
        }
    });
    let kind = if event.r#type == 1 { "DELETE" } else { "PUT" };
    match &event.prev_kv {
        Some(prev) => format!("{kind} {kv_shown} prev {}", kv(prev)),
        None => format!("{kind} {kv_shown}"),
    }
}

impl Render for LeaseGrantResponse {
    fn render(&self) -> String {
        let error = if self.error.is_empty() {
            String::new()
        } else {
            format!(" error {:?}", self.error)
        };
        format!(
            "{} id {} ttl {}{error}",
            header(self.header.as_ref()),
            self.id,
            self.ttl
        )
    }
}

impl Render for LeaseRevokeResponse {
    fn render(&self) -> String {
        header(self.header.as_ref())
    }
}

impl Render for LeaseKeepAliveResponse {
    fn render(&self) -> String {
        format!(
            "{} id {} ttl {}",
            header(self.header.as_ref()),
            self.id,
            self.ttl
        )
    }
}

/// The remaining TTL is left out (it depends on timing); scenarios check it
/// with a tolerance. Keys sorted: etcd lists them in Go map order, which
/// differs from call to call.
impl Render for LeaseTimeToLiveResponse {
    fn render(&self) -> String {
        let mut keys: Vec<String> = self.keys.iter().map(|k| bytes(k)).collect();
        keys.sort_unstable();
        let remaining = if self.ttl < 0 { " expired" } else { "" };
        format!(
            "{} id {}{remaining} granted {} keys [{}]",
            header(self.header.as_ref()),
            self.id,
            self.granted_ttl,
            keys.join(", ")
        )
    }
}

/// IDs sorted: etcd lists leases in expiry order, which ties leave open.
impl Render for LeaseLeasesResponse {
    fn render(&self) -> String {
        let mut ids: Vec<i64> = self.leases.iter().map(|l| l.id).collect();
        ids.sort_unstable();
        let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
        format!(
            "{} leases [{}]",
            header(self.header.as_ref()),
            ids.join(", ")
        )
    }
}

/// `rev R leader NAME KEY cCREATE lLEASE`: the answer's header and the
/// leader key it names.
impl Render for CampaignResponse {
    fn render(&self) -> String {
        match &self.leader {
            Some(l) => format!(
                "{} leader {} {} c{} l{}",
                header(self.header.as_ref()),
                bytes(&l.name),
                bytes(&l.key),
                l.rev,
                l.lease
            ),
            None => format!("{} no leader key", header(self.header.as_ref())),
        }
    }
}

impl Render for ProclaimResponse {
    fn render(&self) -> String {
        header(self.header.as_ref())
    }
}

impl Render for ResignResponse {
    fn render(&self) -> String {
        header(self.header.as_ref())
    }
}

impl Render for LeaderResponse {
    fn render(&self) -> String {
        match &self.kv {
            Some(found) => format!("{} {}", header(self.header.as_ref()), kv(found)),
            None => format!("{} no kv", header(self.header.as_ref())),
        }
    }
}

impl Render for LockResponse {
    fn render(&self) -> String {
        format!("{} key {}", header(self.header.as_ref()), bytes(&self.key))
    }
}

impl Render for UnlockResponse {
    fn render(&self) -> String {
        header(self.header.as_ref())
    }
}

fn header(header: Option<&ResponseHeader>) -> String {
    match header {
        Some(h) => format!("rev {}", h.revision),
        None => "rev none".to_owned(),
    }
}

fn kvs(kvs: &[KeyValue]) -> String {
    let shown: Vec<String> = kvs.iter().map(kv).collect();
    format!("[{}]", shown.join(", "))
}

/// `key=value cCREATE mMOD vVERSION` plus ` lLEASE` when leased.
pub fn kv(kv: &KeyValue) -> String {
    let value = if kv.value.len() > VALUE_SHOWN_BYTES_MAX {
        format!("<{} bytes>", kv.value.len())
    } else {
        bytes(&kv.value)
    };
    let lease = if kv.lease != 0 {
        format!(" l{}", kv.lease)
    } else {
        String::new()
    };
    format!(
        "{}={value} c{} m{} v{}{lease}",
        bytes(&kv.key),
        kv.create_revision,
        kv.mod_revision,
        kv.version
    )
}

/// Printable ASCII as is, everything else (and `\`) as `\xNN`.
pub fn bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for &c in b {
        if (0x21..0x7f).contains(&c) && c != b'\\' && c != b',' && c != b'=' {
            out.push(c as char);
        } else {
            out.push_str(&format!("\\x{c:02x}"));
        }
    }
    out
}

/// `alarms [<member hex> NOSPACE, ...]`; the header is left out.
impl Render for oxetcd_proto::etcdserverpb::AlarmResponse {
    fn render(&self) -> String {
        let alarms: Vec<String> = self
            .alarms
            .iter()
            .map(|a| {
                let name = oxetcd_proto::etcdserverpb::AlarmType::try_from(a.alarm)
                    .map_or("UNKNOWN", |t| t.as_str_name());
                format!("{:x} {name}", a.member_id)
            })
            .collect();
        format!("alarms [{}]", alarms.join(", "))
    }
}

/// Auth answers: what each one says beyond its header (the header's
/// revision is the KV store's, shown by KV answers). A token is random,
/// so only its presence shows.
impl Render for oxetcd_core::auth::AuthResponse {
    fn render(&self) -> String {
        use oxetcd_core::auth::AuthResponse as A;
        match self {
            A::Status(r) => format!("enabled {} auth revision {}", r.enabled, r.auth_revision),
            A::Authenticate(r) if r.token.is_empty() => "no token".to_owned(),
            A::Authenticate(_) => "token".to_owned(),
            A::UserGet(r) => format!("roles [{}]", r.roles.join(", ")),
            A::UserList(r) => format!("users [{}]", r.users.join(", ")),
            A::RoleList(r) => format!("roles [{}]", r.roles.join(", ")),
            A::RoleGet(r) => {
                let perms: Vec<String> = r.perm.iter().map(permission).collect();
                format!("perms [{}]", perms.join(", "))
            }
            A::Password(_) => "password hash".to_owned(),
            _ => "ok".to_owned(),
        }
    }
}

/// `READ key`, or `WRITE [key, end)` for a range.
fn permission(p: &oxetcd_proto::authpb::Permission) -> String {
    use oxetcd_proto::authpb::permission::Type;
    let kind = match Type::try_from(p.perm_type) {
        Ok(Type::Read) => "READ",
        Ok(Type::Write) => "WRITE",
        Ok(Type::Readwrite) => "READWRITE",
        Err(_) => "UNKNOWN",
    };
    if p.range_end.is_empty() {
        format!("{kind} {}", bytes(&p.key))
    } else {
        format!("{kind} [{}, {})", bytes(&p.key), bytes(&p.range_end))
    }
}
