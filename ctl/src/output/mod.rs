//! etcdctl's output formats: `simple`, `json`, `fields`, `table` and
//! `protobuf`, rendered to strings so they can be tested without a server.
//!
//! Each command hands the printer a [`View`] of what it got back; the
//! printer answers with what to write on stdout and stderr, or with
//! [`Unsupported`] for the combinations etcdctl refuses (`get -w table`).

mod fields;
pub mod go;
mod json;
mod protobuf;
mod simple;
mod table;

use std::fmt;
use std::str::FromStr;

use oxetcd_proto::etcdserverpb::{
    AlarmResponse, AuthRoleGetResponse, AuthRoleListResponse, AuthStatusResponse,
    AuthUserGetResponse, AuthUserListResponse, DeleteRangeResponse, DowngradeResponse,
    HashKvResponse, LeaseGrantResponse, LeaseKeepAliveResponse, LeaseLeasesResponse,
    LeaseRevokeResponse, LeaseTimeToLiveResponse, MemberAddResponse, MemberListResponse,
    MemberPromoteResponse, MemberRemoveResponse, MemberUpdateResponse, MoveLeaderResponse,
    PutResponse, RangeResponse, ResponseHeader, StatusResponse, TxnResponse, WatchResponse,
};

/// `-w`/`--write-out`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Human lines (the default).
    Simple,
    /// Go's `encoding/json` of the response, with etcd's field names.
    Json,
    /// `"Field" : value` lines.
    Fields,
    /// Bordered tables (cluster commands only).
    Table,
    /// The response's protobuf encoding.
    Protobuf,
}

impl Format {
    /// The flag value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Simple => "simple",
            Self::Json => "json",
            Self::Fields => "fields",
            Self::Table => "table",
            Self::Protobuf => "protobuf",
        }
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "simple" => Ok(Self::Simple),
            "json" => Ok(Self::Json),
            "fields" => Ok(Self::Fields),
            "table" => Ok(Self::Table),
            "protobuf" => Ok(Self::Protobuf),
            _ => Err("unsupported output format".to_owned()),
        }
    }
}

/// The downgrade step a response answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DowngradeStep {
    /// `downgrade validate`.
    Validate,
    /// `downgrade enable`.
    Enable,
    /// `downgrade cancel`.
    Cancel,
}

/// One endpoint's answer to `endpoint health`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// The endpoint as given.
    pub endpoint: String,
    /// Whether a read went through.
    pub health: bool,
    /// How long it took, as Go prints durations.
    pub took: String,
    /// Why not, when unhealthy.
    pub error: String,
}

/// What `snapshot status` found in a snapshot file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DbStatus {
    /// CRC-32C of the snapshot's contents.
    pub hash: u32,
    /// The revision the snapshot was taken at.
    pub revision: i64,
    /// Entries of all the snapshot's buckets.
    pub total_key: u64,
    /// Bytes of the snapshot, its checksum excluded.
    pub total_size: u64,
}

/// A change to users, roles or permissions that the server answered with a
/// header only: what the simple format says about it. The other formats
/// print the header (all these responses are a header and nothing else,
/// so they share one encoding too).
#[derive(Clone, Copy, Debug)]
pub enum AuthChange<'a> {
    /// `user add`.
    UserAdded(&'a str),
    /// `user delete`.
    UserDeleted(&'a str),
    /// `user passwd`.
    PasswordChanged,
    /// `user grant-role`.
    RoleGranted {
        /// The user.
        user: &'a str,
        /// The role it was granted.
        role: &'a str,
    },
    /// `user revoke-role`.
    RoleRevoked {
        /// The user.
        user: &'a str,
        /// The role taken from it.
        role: &'a str,
    },
    /// `role add`.
    RoleAdded(&'a str),
    /// `role delete`.
    RoleDeleted(&'a str),
    /// `role grant-permission` to this role.
    PermissionGranted(&'a str),
    /// `role revoke-permission`.
    PermissionRevoked {
        /// The role.
        role: &'a str,
        /// The key as given on the command line.
        key: &'a [u8],
        /// The range end sent: empty for one key, `\0` for open ended.
        range_end: &'a [u8],
    },
}

/// What a command got back, for the printer.
#[derive(Clone, Copy, Debug)]
pub enum View<'a> {
    /// `get`.
    Get(&'a RangeResponse),
    /// `put`.
    Put(&'a PutResponse),
    /// `del`.
    Del(&'a DeleteRangeResponse),
    /// `txn`.
    Txn(&'a TxnResponse),
    /// One `watch` response.
    Watch(&'a WatchResponse),
    /// `lease grant`.
    Grant(&'a LeaseGrantResponse),
    /// `lease revoke` of this lease.
    Revoke(i64, &'a LeaseRevokeResponse),
    /// One `lease keep-alive` answer.
    KeepAlive(&'a LeaseKeepAliveResponse),
    /// `lease timetolive`, with `--keys` or not.
    TimeToLive(&'a LeaseTimeToLiveResponse, bool),
    /// `lease list`.
    Leases(&'a LeaseLeasesResponse),
    /// `member add NAME --peer-urls URLS`.
    MemberAdd {
        /// The server's answer.
        response: &'a MemberAddResponse,
        /// The new member's name, for the `ETCD_*` lines.
        name: &'a str,
        /// `--peer-urls` as given.
        peer_urls: &'a str,
    },
    /// `member remove` of this member.
    MemberRemove(u64, &'a MemberRemoveResponse),
    /// `member update` of this member.
    MemberUpdate(u64, &'a MemberUpdateResponse),
    /// `member promote` of this member.
    MemberPromote(u64, &'a MemberPromoteResponse),
    /// `member list`.
    MemberList(&'a MemberListResponse),
    /// `endpoint health`.
    EndpointHealth(&'a [Health]),
    /// `endpoint status`: endpoint and its answer.
    EndpointStatus(&'a [(String, StatusResponse)]),
    /// `endpoint hashkv`: endpoint and its answer.
    EndpointHashKv(&'a [(String, HashKvResponse)]),
    /// `move-leader`.
    MoveLeader {
        /// The leader before.
        leader: u64,
        /// The transferee.
        target: u64,
        /// The server's answer.
        response: &'a MoveLeaderResponse,
    },
    /// `alarm list` and `alarm disarm`.
    Alarm(&'a AlarmResponse),
    /// `downgrade validate|enable|cancel`.
    Downgrade(DowngradeStep, &'a DowngradeResponse),
    /// `snapshot status`.
    DbStatus(DbStatus),
    /// `auth status`.
    AuthStatus(&'a AuthStatusResponse),
    /// A user, role or permission change, and the answer's header.
    AuthChange(AuthChange<'a>, Option<&'a ResponseHeader>),
    /// `user get` of this user.
    UserGet(&'a str, &'a AuthUserGetResponse),
    /// `user list`.
    UserList(&'a AuthUserListResponse),
    /// `role get` of this role.
    RoleGet(&'a str, &'a AuthRoleGetResponse),
    /// `role list`.
    RoleList(&'a AuthRoleListResponse),
}

/// What to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    /// Bytes for standard output (protobuf output is binary).
    pub stdout: Vec<u8>,
    /// Text for standard error (`endpoint health` reports there).
    pub stderr: String,
}

impl Rendered {
    fn text(stdout: String) -> Self {
        Self {
            stdout: stdout.into_bytes(),
            stderr: String::new(),
        }
    }
}

/// etcdctl refuses this format for this command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsupported(pub Format);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} not supported as output format", self.0.name())
    }
}

impl std::error::Error for Unsupported {}

/// A format plus etcdctl's printing switches.
#[derive(Clone, Copy, Debug)]
pub struct Printer {
    /// `-w`.
    pub format: Format,
    /// `--hex`: keys and values as `\x..` escapes (simple format).
    pub hex: bool,
    /// `get --print-value-only` (simple format).
    pub value_only: bool,
}

impl Printer {
    /// A printer for `format` with no switches.
    pub fn new(format: Format) -> Self {
        Self {
            format,
            hex: false,
            value_only: false,
        }
    }

    /// Renders `view`.
    pub fn render(&self, view: &View<'_>) -> Result<Rendered, Unsupported> {
        let unsupported = Unsupported(self.format);
        match self.format {
            Format::Simple => Ok(simple::render(self, view)),
            Format::Json => Ok(Rendered::text(json::render(view))),
            Format::Fields => fields::render(view).map(Rendered::text).ok_or(unsupported),
            Format::Table => table::render(view).map(Rendered::text).ok_or(unsupported),
            Format::Protobuf => protobuf::render(view)
                .map(|stdout| Rendered {
                    stdout,
                    stderr: String::new(),
                })
                .ok_or(unsupported),
        }
    }
}

/// The member-list rows etcdctl's simple and table formats share.
fn member_rows(response: &MemberListResponse) -> Vec<Vec<String>> {
    response
        .members
        .iter()
        .map(|m| {
            vec![
                format!("{:x}", m.id),
                if m.name.is_empty() {
                    "unstarted"
                } else {
                    "started"
                }
                .to_owned(),
                m.name.clone(),
                m.peer_ur_ls.join(","),
                m.client_ur_ls.join(","),
                m.is_learner.to_string(),
            ]
        })
        .collect()
}

/// The endpoint-status rows etcdctl's simple and table formats share.
fn status_rows(statuses: &[(String, StatusResponse)]) -> Vec<Vec<String>> {
    statuses
        .iter()
        .map(|(endpoint, s)| {
            let member_id = s.header.as_ref().map_or(0, |h| h.member_id);
            vec![
                endpoint.clone(),
                format!("{member_id:x}"),
                s.version.clone(),
                go::human_bytes(s.db_size.max(0) as u64),
                (s.leader == member_id).to_string(),
                s.is_learner.to_string(),
                s.raft_term.to_string(),
                s.raft_index.to_string(),
                s.raft_applied_index.to_string(),
                s.errors.join(", "),
            ]
        })
        .collect()
}

/// The hash rows etcdctl's simple and table formats share.
fn hash_rows(hashes: &[(String, HashKvResponse)]) -> Vec<Vec<String>> {
    hashes
        .iter()
        .map(|(endpoint, h)| vec![endpoint.clone(), h.hash.to_string()])
        .collect()
}

/// The snapshot-status row etcdctl's simple and table formats share.
fn db_status_rows(s: &DbStatus) -> Vec<Vec<String>> {
    vec![vec![
        format!("{:x}", s.hash),
        s.revision.to_string(),
        s.total_key.to_string(),
        go::human_bytes(s.total_size),
    ]]
}

/// Alarm type names, as the protobuf enum spells them.
fn alarm_name(alarm: i32) -> String {
    match alarm {
        0 => "NONE".to_owned(),
        1 => "NOSPACE".to_owned(),
        2 => "CORRUPT".to_owned(),
        other => other.to_string(),
    }
}

/// Permission type names, as the protobuf enum spells them.
fn permission_name(kind: i32) -> String {
    match kind {
        0 => "READ".to_owned(),
        1 => "WRITE".to_owned(),
        2 => "READWRITE".to_owned(),
        other => other.to_string(),
    }
}

/// Event type names (`PUT`, `DELETE`).
pub fn event_name(kind: i32) -> &'static str {
    if kind == 1 {
        "DELETE"
    } else {
        "PUT"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etcdctl 3.4's `snapshot status` of a snapshot with these numbers,
    /// in every format it supports.
    #[test]
    fn db_status_prints_as_etcdctl() {
        let view = View::DbStatus(DbStatus {
            hash: 4_064_050_180,
            revision: 2,
            total_key: 5,
            total_size: 20_480,
        });
        let text = |format| {
            let rendered = Printer::new(format).render(&view).map(|r| r.stdout);
            rendered.map(|bytes| String::from_utf8(bytes).unwrap())
        };
        assert_eq!(text(Format::Simple).unwrap(), "f23c7c04, 2, 5, 20 kB\n");
        assert_eq!(
            text(Format::Json).unwrap(),
            "{\"hash\":4064050180,\"revision\":2,\"totalKey\":5,\"totalSize\":20480}\n"
        );
        assert_eq!(
            text(Format::Fields).unwrap(),
            "\"Hash\" : 4064050180\n\"Revision\" : 2\n\"Keys\" : 5\n\"Size\" : 20480\n"
        );
        assert_eq!(
            text(Format::Table).unwrap(),
            "+----------+----------+------------+------------+\n\
             |   HASH   | REVISION | TOTAL KEYS | TOTAL SIZE |\n\
             +----------+----------+------------+------------+\n\
             | f23c7c04 |        2 |          5 |      20 kB |\n\
             +----------+----------+------------+------------+\n"
        );
        assert_eq!(text(Format::Protobuf), Err(Unsupported(Format::Protobuf)));
    }

    fn rendered(format: Format, view: &View<'_>) -> Result<String, Unsupported> {
        Printer::new(format)
            .render(view)
            .map(|r| String::from_utf8_lossy(&r.stdout).into_owned())
    }

    /// etcdctl 3.5's `auth status` (3.4 has none to compare with): simple
    /// and json; fields and table unsupported.
    #[test]
    fn auth_status_prints_as_etcdctl_3_5() {
        let response = AuthStatusResponse {
            header: Some(ResponseHeader {
                cluster_id: 1,
                member_id: 2,
                revision: 3,
                raft_term: 4,
            }),
            enabled: true,
            auth_revision: 7,
        };
        let view = View::AuthStatus(&response);
        assert_eq!(
            rendered(Format::Simple, &view).unwrap(),
            "Authentication Status: true\nAuthRevision: 7\n"
        );
        assert_eq!(
            rendered(Format::Json, &view).unwrap(),
            "{\"header\":{\"cluster_id\":1,\"member_id\":2,\"revision\":3,\"raft_term\":4},\
             \"enabled\":true,\"authRevision\":7}\n"
        );
        let off = AuthStatusResponse::default();
        assert_eq!(
            rendered(Format::Json, &View::AuthStatus(&off)).unwrap(),
            "{}\n"
        );
        assert_eq!(
            rendered(Format::Simple, &View::AuthStatus(&off)).unwrap(),
            "Authentication Status: false\nAuthRevision: 0\n"
        );
        assert_eq!(
            rendered(Format::Fields, &view),
            Err(Unsupported(Format::Fields))
        );
        assert_eq!(
            rendered(Format::Table, &view),
            Err(Unsupported(Format::Table))
        );
    }

    #[test]
    fn revoked_permissions_name_their_range_as_etcdctl() {
        let revoked = |key: &'static [u8], range_end: &'static [u8]| {
            let change = AuthChange::PermissionRevoked {
                role: "r",
                key,
                range_end,
            };
            rendered(Format::Simple, &View::AuthChange(change, None)).unwrap()
        };
        assert_eq!(
            revoked(b"a", b""),
            "Permission of key a is revoked from role r\n"
        );
        assert_eq!(
            revoked(b"a", b"b"),
            "Permission of range [a, b) is revoked from role r\n"
        );
        assert_eq!(
            revoked(b"a", b"\0"),
            "Permission of range [a, <open ended> is revoked from role r\n"
        );
    }
}
