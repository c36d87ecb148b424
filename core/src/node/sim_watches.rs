//! The node simulator's watchers: clients that watch a member through the
//! faults of a run, every response kept in arrival order, each watch
//! checked at the end with `oxetcd_history::check_watch` against the model
//! the run's KV history led to.
//!
//! Design. Each watcher has a stream of its own, so its responses are told
//! apart by stream. A watcher ends with its member's crash: what it got so
//! far must be an exact prefix of what it owed (the checker asks no more of
//! a watch cut short). It may be resumed on a running member from the
//! revision after its last event, as Kubernetes resumes a watch: a new
//! watcher, checked on its own from there, so the two together must be
//! exact. A watcher still open once the run is healed asks for a progress
//! notification, which makes it answer for every event up to the final
//! revision. A watcher whose start revision is compacted must be cancelled
//! with `compact_revision` and is not resumed. An informer lists the keys,
//! then watches from the list's revision + 1, as Kubernetes does.

use oxetcd_history::{check_watch, Model, Watch};
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse,
};

use super::cluster_tests::Cluster;
use super::sim_tests::{Rng, DRAIN_TIME, KEYS};
use crate::watch::{StreamId, NO_WATCH_ID};

/// Watchers one run creates at most (resumptions included): each costs a
/// catch-up now and then and a check at the end.
const WATCHERS_MAX: usize = 12;

/// One watcher as its client saw it.
struct Watcher {
    member: u64,
    stream: StreamId,
    watch: Watch,
    /// The creation was answered.
    created: bool,
    /// Its member crashed: nothing more comes.
    ended: bool,
    /// A progress notification arrived after the last one was asked for.
    progressed: bool,
}

impl Watcher {
    fn cancelled(&self) -> bool {
        self.watch.responses.iter().any(|r| r.canceled)
    }

    /// The revision a resumed watch starts from: the one after the last
    /// event delivered, or where this watch started.
    fn resume_revision(&self) -> Option<i64> {
        let last_event = self
            .watch
            .responses
            .iter()
            .rev()
            .find_map(|r| r.events.last())
            .and_then(|e| e.kv.as_ref())
            .map(|kv| kv.mod_revision);
        match last_event {
            Some(revision) => Some(revision + 1),
            None if self.watch.start_revision > 0 => Some(self.watch.start_revision),
            None if self.created => Some(self.watch.created_revision + 1),
            None => None,
        }
    }
}

/// Every watcher of one run.
#[derive(Default)]
pub(super) struct Watchers {
    list: Vec<Watcher>,
    next_stream: StreamId,
}

impl Watchers {
    /// A watcher on `member` with drawn key, `prev_kv` and start: from now
    /// (0) or from a revision at or below `seen`, the highest revision an
    /// answer showed so far.
    pub(super) fn create(&mut self, cluster: &mut Cluster, rng: &mut Rng, member: u64, seen: i64) {
        let (key, range_end) = match rng.below(3) {
            0 => (vec![0], vec![0]),
            1 => (b"k".to_vec(), b"l".to_vec()),
            _ => (oxetcd_history::traffic::key(rng.below(KEYS)), Vec::new()),
        };
        let prev_kv = rng.below(2) == 0;
        let start_revision = match rng.below(3) {
            0 => 0,
            _ => (seen - rng.below(10) as i64).max(1),
        };
        self.open(cluster, member, key, range_end, prev_kv, start_revision);
    }

    /// A Kubernetes informer's watch: after listing every key at
    /// `listed` (the list's header revision), it watches from the next
    /// revision, so the list and the watch together must miss nothing.
    pub(super) fn informer(&mut self, cluster: &mut Cluster, member: u64, listed: i64) {
        self.open(
            cluster,
            member,
            b"k".to_vec(),
            b"l".to_vec(),
            false,
            listed + 1,
        );
    }

    fn open(
        &mut self,
        cluster: &mut Cluster,
        member: u64,
        key: Vec<u8>,
        range_end: Vec<u8>,
        prev_kv: bool,
        start_revision: i64,
    ) {
        if self.list.len() >= WATCHERS_MAX {
            return;
        }
        self.next_stream += 1;
        let stream = self.next_stream;
        let create = WatchCreateRequest {
            key: key.clone(),
            range_end: range_end.clone(),
            start_revision,
            prev_kv,
            ..Default::default()
        };
        cluster.watch(
            member,
            stream,
            WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(create)),
            },
        );
        self.list.push(Watcher {
            member,
            stream,
            watch: Watch {
                key,
                range_end,
                start_revision,
                prev_kv,
                responses: Vec::new(),
                created_revision: 0,
            },
            created: false,
            ended: false,
            progressed: false,
        });
    }

    /// Moves every response the members sent to its watcher.
    pub(super) fn collect(&mut self, cluster: &mut Cluster) {
        for member in cluster.members.values_mut() {
            for (stream, response) in std::mem::take(&mut member.watched) {
                let Some(watcher) = self.list.iter_mut().find(|w| w.stream == stream) else {
                    continue;
                };
                if response.created && !watcher.created {
                    watcher.created = true;
                    watcher.watch.created_revision = response.header.map_or(0, |h| h.revision);
                    if response.canceled {
                        // Refused at creation: a watch that never was.
                        watcher.ended = true;
                    }
                    continue;
                }
                watcher.progressed |= is_progress(&response);
                watcher.watch.responses.push(response);
            }
        }
    }

    /// `member` crashed: its watchers end; each is resumed on a running
    /// member, drawn, half the time.
    pub(super) fn crashed(&mut self, cluster: &mut Cluster, rng: &mut Rng, member: u64) {
        self.collect(cluster);
        let mut resume = Vec::new();
        for watcher in self
            .list
            .iter_mut()
            .filter(|w| w.member == member && !w.ended)
        {
            watcher.ended = true;
            if watcher.cancelled() || rng.below(2) == 0 {
                continue;
            }
            if let Some(from) = watcher.resume_revision() {
                let w = &watcher.watch;
                resume.push((w.key.clone(), w.range_end.clone(), w.prev_kv, from));
            }
        }
        for (key, range_end, prev_kv, from) in resume {
            let running = cluster.running();
            let Some(&to) = running.get(rng.below(running.len() as u64) as usize) else {
                return;
            };
            self.open(cluster, to, key, range_end, prev_kv, from);
        }
    }

    /// Once the run is healed and every member holds the final revision:
    /// each open watcher asks for a progress notification, so it answers
    /// for every event up to that revision.
    pub(super) fn finish(&mut self, cluster: &mut Cluster, seed: u64) {
        self.collect(cluster);
        let running = cluster.running();
        for watcher in &mut self.list {
            if watcher.ended || watcher.cancelled() || !running.contains(&watcher.member) {
                continue;
            }
            watcher.progressed = false;
            let request = WatchRequest {
                request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
            };
            cluster.watch(watcher.member, watcher.stream, request);
        }
        let waiting: Vec<(u64, StreamId)> = self
            .list
            .iter()
            .filter(|w| !w.ended && !w.cancelled() && running.contains(&w.member))
            .map(|w| (w.member, w.stream))
            .collect();
        let answered = cluster.run_until(DRAIN_TIME, |c| {
            waiting.iter().all(|(member, stream)| {
                c.members[member]
                    .watched
                    .iter()
                    .any(|(s, r)| s == stream && is_progress(r))
            })
        });
        self.collect(cluster);
        assert!(
            answered,
            "seed {seed}: progress requests unanswered once healed"
        );
    }

    /// Every watch that was created, as the checker takes them.
    pub(super) fn watches(&self) -> Vec<Watch> {
        self.list
            .iter()
            .filter(|w| w.created)
            .map(|w| w.watch.clone())
            .collect()
    }

    /// Checks every watch that was created against `model`; panics with
    /// the seed on a violation.
    pub(super) fn check(&self, model: &Model, seed: u64) {
        for watcher in self.list.iter().filter(|w| w.created) {
            if let Err(v) = check_watch(&watcher.watch, model) {
                let w = &watcher.watch;
                let responses: Vec<String> = w
                    .responses
                    .iter()
                    .enumerate()
                    .map(|(i, r)| format!("{i}: {}", brief(r)))
                    .collect();
                panic!(
                    "seed {seed}: watch broke a promise: {v}\nwatch of {:?}..{:?} on m{} from {} \
                     (created at {}, prev_kv {}, ended {}), responses:\n{}",
                    String::from_utf8_lossy(&w.key),
                    String::from_utf8_lossy(&w.range_end),
                    watcher.member,
                    w.start_revision,
                    w.created_revision,
                    w.prev_kv,
                    watcher.ended,
                    responses.join("\n")
                );
            }
        }
    }
}

/// A progress notification: no events, no creation, no cancellation.
fn is_progress(response: &WatchResponse) -> bool {
    response.watch_id == NO_WATCH_ID
        && response.events.is_empty()
        && !response.created
        && !response.canceled
}

/// One response on a line: its revision and its events' keys and
/// revisions, or what else it is.
fn brief(response: &WatchResponse) -> String {
    let revision = response.header.map_or(0, |h| h.revision);
    if response.canceled {
        return format!(
            "@{revision} cancelled, compact_revision {} {:?}",
            response.compact_revision, response.cancel_reason
        );
    }
    if response.events.is_empty() {
        return format!("@{revision} progress");
    }
    let events: Vec<String> = response
        .events
        .iter()
        .filter_map(|e| e.kv.as_ref())
        .map(|kv| format!("{}@{}", String::from_utf8_lossy(&kv.key), kv.mod_revision))
        .collect();
    format!("@{revision} {}", events.join(" "))
}
