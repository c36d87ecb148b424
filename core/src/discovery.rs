//! v3 discovery: how a new member learns its initial cluster from a
//! registry kept in another etcd-compatible cluster
//! (`--discovery-token`, `--discovery-endpoints`).
//!
//! Design. [`Discovery`] is the protocol as a pure state machine, as etcd
//! 3.6 runs it. Each step returns a [`Step`]: a [`Call`] for the server to
//! make against the discovery cluster (a range, a put, or a watch), a
//! pause before retrying a call that failed, or the end — the initial
//! cluster in `--initial-cluster` form, or an error with etcd's words. The
//! server feeds back each call's outcome as an [`Event`]. Nothing here
//! reads a clock or touches a socket.
//!
//! The registry for token `T` holds `/_etcd/registry/T/_config/size` (the
//! cluster's size, set by whoever made the token) and one key per member,
//! `/_etcd/registry/T/members/<member ID in hex>`, whose value is
//! `name=peerURL[,name=peerURL…]`. The protocol:
//!
//! 1. read the size, then the members (their create revisions order
//!    them); if the first `size` members are others, the cluster is full;
//! 2. register this member's key;
//! 3. read the size and the members again; while fewer than `size` have
//!    registered, watch the members' prefix from the revision after that
//!    read;
//! 4. answer the first `size` members, by create revision.
//!
//! A missing or malformed size key ends discovery at once; any other
//! failure of a call is retried after an exponential pause (2 s doubling
//! to 256 s, as etcd) — etcd retries without end, and so does this.

use std::time::Duration;

use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest, WatchCreateRequest};
use oxetcd_proto::mvccpb::KeyValue;
use oxetcd_proto::prefix_end;

/// etcd's prefix of every discovery registry.
pub const REGISTRY_PREFIX: &str = "/_etcd/registry";

/// The longest pause between retries is `1 s << RETRY_EXPONENT_MAX`.
const RETRY_EXPONENT_MAX: u32 = 8;

/// Why discovery ended without a cluster (etcd's messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiscoveryError {
    /// The registry has no size key.
    SizeNotFound,
    /// The size key is not a positive number.
    BadSizeKey,
    /// `size` other members registered before this one.
    FullCluster,
    /// The registered members do not make a valid initial cluster.
    InvalidUrl(String),
}

impl std::fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SizeNotFound => f.write_str("discovery: size key not found"),
            Self::BadSizeKey => f.write_str("discovery: size key is bad"),
            Self::FullCluster => f.write_str("discovery: cluster is full"),
            Self::InvalidUrl(cluster) => write!(f, "discovery: invalid peer URL ({cluster})"),
        }
    }
}

impl std::error::Error for DiscoveryError {}

/// A call to make against the discovery cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// A range: answer with [`Event::Ranged`].
    Range(RangeRequest),
    /// Registers this member: answer with [`Event::Registered`].
    Put(PutRequest),
    /// Watches the members' prefix: answer with [`Event::Watched`] for
    /// each batch of events, or [`Event::Failed`].
    Watch(WatchCreateRequest),
}

/// What the server does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Make this call.
    Send(Call),
    /// Wait this long, then report [`Event::Retry`].
    Pause(Duration),
    /// Keep waiting for the watch's next events.
    Wait,
    /// Discovery is done: the initial cluster, `name=url,…`.
    Done(String),
    /// Discovery failed for good.
    Failed(DiscoveryError),
}

/// What happened to the last [`Call`].
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The range answered: its key-values and header revision.
    Ranged(Vec<KeyValue>, i64),
    /// The put answered.
    Registered,
    /// The watch delivered these created or updated key-values.
    Watched(Vec<KeyValue>),
    /// The call failed (unreachable, timed out, refused); it is retried
    /// after a pause. The reason is the server's to log.
    Failed,
    /// The pause of [`Step::Pause`] is over.
    Retry,
}

/// Where the protocol is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Reading the size, before registering (`true`: after).
    Size { registered: bool },
    /// Reading the members, before registering or after.
    Members { registered: bool },
    /// Registering.
    Register,
    /// Watching for more members.
    Watch,
}

/// A registered member.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Registered {
    key: Vec<u8>,
    entry: String,
    create_revision: i64,
}

/// The discovery protocol of one member.
#[derive(Clone, Debug)]
pub struct Discovery {
    prefix: String,
    self_key: Vec<u8>,
    self_entry: String,
    phase: Phase,
    /// The last call made, to repeat after a failure.
    last: Option<Call>,
    retries: u32,
    size: usize,
    members: Vec<Registered>,
}

impl Discovery {
    /// Discovery for the member `member_id` in the cluster of `token`,
    /// registering `self_entry` (`name=peerURL,…`, as in
    /// `--initial-cluster`).
    pub fn new(token: &str, member_id: u64, self_entry: &str) -> Self {
        let prefix = format!("{REGISTRY_PREFIX}/{token}");
        let self_key = format!("{prefix}/members/{member_id:x}").into_bytes();
        Self {
            prefix,
            self_key,
            self_entry: self_entry.to_owned(),
            phase: Phase::Size { registered: false },
            last: None,
            retries: 0,
            size: 0,
            members: Vec::new(),
        }
    }

    /// The first step.
    pub fn start(&mut self) -> Step {
        self.phase = Phase::Size { registered: false };
        self.send(self.size_range())
    }

    /// The step after `event`.
    pub fn handle(&mut self, event: Event) -> Step {
        match (self.phase, event) {
            (_, Event::Retry) => match self.last.clone() {
                Some(call) => Step::Send(call),
                None => self.start(),
            },
            (Phase::Watch, Event::Failed) => {
                // The watch starts again from the members' range.
                self.phase = Phase::Members { registered: true };
                self.last = Some(self.members_range());
                self.pause()
            }
            (_, Event::Failed) => self.pause(),
            (Phase::Size { registered }, Event::Ranged(kvs, _)) => {
                self.retries = 0;
                match parse_size(&kvs) {
                    Ok(size) => {
                        self.size = size;
                        self.phase = Phase::Members { registered };
                        self.send(self.members_range())
                    }
                    Err(e) => Step::Failed(e),
                }
            }
            (Phase::Members { registered }, Event::Ranged(kvs, revision)) => {
                self.retries = 0;
                self.members.clear();
                for kv in kvs {
                    self.add(kv);
                }
                if !self.has_room() {
                    return Step::Failed(DiscoveryError::FullCluster);
                }
                if !registered {
                    self.phase = Phase::Register;
                    return self.send(Call::Put(PutRequest {
                        key: self.self_key.clone(),
                        value: self.self_entry.clone().into_bytes(),
                        ..Default::default()
                    }));
                }
                self.finish_or_watch(revision)
            }
            (Phase::Register, Event::Registered) => {
                self.retries = 0;
                self.phase = Phase::Size { registered: true };
                self.send(self.size_range())
            }
            (Phase::Watch, Event::Watched(kvs)) => {
                for kv in kvs {
                    self.add(kv);
                }
                self.finish_or_wait()
            }
            // An answer that does not fit the phase (a late one): ignored,
            // the call in flight is still awaited.
            (_, _) => Step::Wait,
        }
    }

    fn send(&mut self, call: Call) -> Step {
        self.last = Some(call.clone());
        Step::Send(call)
    }

    /// A pause before repeating the last call: `1 s << retries`, at most
    /// `1 s << 8`.
    fn pause(&mut self) -> Step {
        self.retries = self.retries.saturating_add(1);
        let exponent = self.retries.min(RETRY_EXPONENT_MAX);
        Step::Pause(Duration::from_secs(1 << exponent))
    }

    fn size_range(&self) -> Call {
        Call::Range(RangeRequest {
            key: format!("{}/_config/size", self.prefix).into_bytes(),
            ..Default::default()
        })
    }

    fn members_prefix(&self) -> Vec<u8> {
        format!("{}/members", self.prefix).into_bytes()
    }

    fn members_range(&self) -> Call {
        let key = self.members_prefix();
        Call::Range(RangeRequest {
            range_end: prefix_end(&key),
            key,
            ..Default::default()
        })
    }

    /// Done when `size` members registered; else a watch from `revision`
    /// + 1.
    fn finish_or_watch(&mut self, revision: i64) -> Step {
        if self.members.len() >= self.size {
            return self.done();
        }
        self.phase = Phase::Watch;
        let key = self.members_prefix();
        self.send(Call::Watch(WatchCreateRequest {
            range_end: prefix_end(&key),
            key,
            start_revision: revision.saturating_add(1),
            ..Default::default()
        }))
    }

    /// Done when `size` members registered; else the watch goes on.
    fn finish_or_wait(&mut self) -> Step {
        if self.members.len() >= self.size {
            self.done()
        } else {
            Step::Wait
        }
    }

    fn done(&self) -> Step {
        let cluster = self
            .members
            .iter()
            .take(self.size)
            .map(|m| m.entry.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let valid = self
            .members
            .iter()
            .take(self.size)
            .all(|m| m.entry.split(',').all(|pair| pair.contains('=')));
        if valid {
            Step::Done(cluster)
        } else {
            Step::Failed(DiscoveryError::InvalidUrl(cluster))
        }
    }

    /// Whether this member is among the first `size` registered, or fewer
    /// than `size` others have registered.
    fn has_room(&self) -> bool {
        match self.members.iter().position(|m| m.key == self.self_key) {
            Some(position) => position < self.size,
            None => self.members.len() < self.size,
        }
    }

    /// Records a registered member, once, in create-revision order; values
    /// that are not `name=url` are skipped, as etcd skips them.
    fn add(&mut self, kv: KeyValue) {
        let entry = String::from_utf8_lossy(&kv.value).trim().to_owned();
        if !kv.key.starts_with(&self.members_prefix()) || !entry.contains('=') {
            return;
        }
        if self.members.iter().any(|m| m.key == kv.key) {
            return;
        }
        let at = self
            .members
            .partition_point(|m| m.create_revision <= kv.create_revision);
        self.members.insert(
            at,
            Registered {
                key: kv.key,
                entry,
                create_revision: kv.create_revision,
            },
        );
    }
}

/// The size key's value: a positive number.
fn parse_size(kvs: &[KeyValue]) -> Result<usize, DiscoveryError> {
    let kv = kvs.first().ok_or(DiscoveryError::SizeNotFound)?;
    let text = std::str::from_utf8(&kv.value).map_err(|_| DiscoveryError::BadSizeKey)?;
    match text.trim().parse::<usize>() {
        Ok(size) if size > 0 => Ok(size),
        _ => Err(DiscoveryError::BadSizeKey),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, create_revision: i64) -> KeyValue {
        KeyValue {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            create_revision,
            ..Default::default()
        }
    }

    fn size(n: &str) -> Event {
        Event::Ranged(vec![kv("/_etcd/registry/t/_config/size", n, 1)], 1)
    }

    fn member(id: u64, name: &str, revision: i64) -> KeyValue {
        kv(
            &format!("/_etcd/registry/t/members/{id:x}"),
            &format!("{name}=http://{name}:2380"),
            revision,
        )
    }

    fn range_key(step: &Step) -> String {
        match step {
            Step::Send(Call::Range(r)) => String::from_utf8_lossy(&r.key).into_owned(),
            other => panic!("expected a range, got {other:?}"),
        }
    }

    #[test]
    fn a_member_registers_waits_for_the_others_and_answers_by_create_revision() {
        let mut d = Discovery::new("t", 0xa1, "a=http://a:2380");
        assert_eq!(range_key(&d.start()), "/_etcd/registry/t/_config/size");
        let step = d.handle(size("3"));
        assert_eq!(range_key(&step), "/_etcd/registry/t/members");
        let Step::Send(Call::Put(put)) = d.handle(Event::Ranged(vec![member(0xb2, "b", 5)], 5))
        else {
            panic!("expected the registration");
        };
        assert_eq!(put.key, b"/_etcd/registry/t/members/a1");
        assert_eq!(put.value, b"a=http://a:2380");
        assert_eq!(
            range_key(&d.handle(Event::Registered)),
            "/_etcd/registry/t/_config/size"
        );
        d.handle(size("3"));
        let members = vec![member(0xb2, "b", 5), member(0xa1, "a", 6)];
        let Step::Send(Call::Watch(watch)) = d.handle(Event::Ranged(members, 6)) else {
            panic!("expected a watch");
        };
        assert_eq!(watch.start_revision, 7);
        assert_eq!(watch.key, b"/_etcd/registry/t/members");
        assert_eq!(watch.range_end, b"/_etcd/registry/t/membert");
        // A duplicate and a malformed value change nothing.
        let noise = vec![
            member(0xb2, "b", 5),
            kv("/_etcd/registry/t/members/ff", "junk", 7),
        ];
        assert_eq!(d.handle(Event::Watched(noise)), Step::Wait);
        let step = d.handle(Event::Watched(vec![
            member(0xc3, "c", 8),
            member(0xd4, "d", 9),
        ]));
        assert_eq!(
            step,
            Step::Done("b=http://b:2380,a=http://a:2380,c=http://c:2380".into())
        );
    }

    #[test]
    fn enough_members_already_means_no_watch() {
        let mut d = Discovery::new("t", 1, "a=http://a:2380");
        d.start();
        d.handle(size("1"));
        d.handle(Event::Ranged(vec![], 1));
        d.handle(Event::Registered);
        d.handle(size("1"));
        assert_eq!(
            d.handle(Event::Ranged(vec![member(1, "a", 2)], 2)),
            Step::Done("a=http://a:2380".into())
        );
    }

    #[test]
    fn a_full_cluster_and_bad_sizes_end_discovery() {
        let mut d = Discovery::new("t", 0xa1, "a=http://a:2380");
        d.start();
        d.handle(size("2"));
        let others = vec![member(0xb2, "b", 5), member(0xc3, "c", 6)];
        assert_eq!(
            d.handle(Event::Ranged(others, 6)),
            Step::Failed(DiscoveryError::FullCluster)
        );
        assert_eq!(
            DiscoveryError::FullCluster.to_string(),
            "discovery: cluster is full"
        );
        for (event, error) in [
            (Event::Ranged(vec![], 1), DiscoveryError::SizeNotFound),
            (size("0"), DiscoveryError::BadSizeKey),
            (size("three"), DiscoveryError::BadSizeKey),
        ] {
            let mut d = Discovery::new("t", 1, "a=http://a:2380");
            d.start();
            assert_eq!(d.handle(event), Step::Failed(error));
        }
    }

    #[test]
    fn failures_are_retried_with_growing_pauses() {
        let mut d = Discovery::new("t", 1, "a=http://a:2380");
        let first = d.start();
        let pauses: Vec<Step> = (0..10).map(|_| d.handle(Event::Failed)).collect();
        let secs: Vec<u64> = pauses
            .iter()
            .map(|s| match s {
                Step::Pause(p) => p.as_secs(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
        assert_eq!(d.handle(Event::Retry), first);
        // A success resets the pauses.
        d.handle(size("1"));
        assert_eq!(d.handle(Event::Failed), Step::Pause(Duration::from_secs(2)));
    }

    #[test]
    fn a_failed_watch_reads_the_members_again() {
        let mut d = Discovery::new("t", 1, "a=http://a:2380");
        d.start();
        d.handle(size("2"));
        d.handle(Event::Ranged(vec![], 3));
        d.handle(Event::Registered);
        d.handle(size("2"));
        d.handle(Event::Ranged(vec![member(1, "a", 4)], 4));
        assert!(matches!(d.handle(Event::Failed), Step::Pause(_)));
        assert_eq!(
            range_key(&d.handle(Event::Retry)),
            "/_etcd/registry/t/members"
        );
        assert!(matches!(
            d.handle(Event::Ranged(vec![member(1, "a", 4), member(2, "b", 5)], 5)),
            Step::Done(_)
        ));
    }
}
