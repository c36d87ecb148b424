//! Property test: random sequences of puts, delete ranges, txns,
//! compactions and historical ranges, applied to [`MemoryKv`] through
//! [`apply`] and [`range`], agree with a plain model that keeps every
//! key's full history as `(revision, value or deletion)`.

use std::collections::BTreeMap;

use oxetcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use oxetcd_proto::etcdserverpb::request_op::Request as Op;
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use oxetcd_proto::mvccpb::KeyValue;
use quickcheck::{Arbitrary, Gen, QuickCheck};

use super::*;
use crate::memory::MemoryKv;
use crate::storage::KvStore;
use crate::Request;

/// Keys come from a small alphabet so operations collide often.
const KEYS: u8 = 6;

#[derive(Clone, Debug)]
enum Write {
    Put {
        key: u8,
        value: u8,
    },
    /// `end`: `None` for one key, `Some(KEYS)` for "from key", else a key.
    DeleteRange {
        key: u8,
        end: Option<u8>,
    },
}

#[derive(Clone, Debug)]
enum KvOp {
    Put {
        key: u8,
        value: u8,
    },
    DeleteRange {
        key: u8,
        end: Option<u8>,
    },
    /// If `guard` has version `version`, run `success`, else `failure`.
    Txn {
        guard: u8,
        version: i64,
        success: Vec<Write>,
        failure: Vec<Write>,
    },
    /// Compact at `back` revisions before the current one.
    Compact {
        back: i64,
    },
    /// Range at `back` revisions before the current one (negative: future).
    Range {
        key: u8,
        end: Option<u8>,
        back: i64,
        limit: i64,
    },
}

fn small(g: &mut Gen, below: u8) -> u8 {
    u8::arbitrary(g) % below
}

fn end(g: &mut Gen) -> Option<u8> {
    match small(g, 3) {
        0 => None,
        1 => Some(KEYS),
        _ => Some(small(g, KEYS + 1)),
    }
}

impl Arbitrary for Write {
    fn arbitrary(g: &mut Gen) -> Self {
        if bool::arbitrary(g) {
            Write::Put {
                key: small(g, KEYS),
                value: small(g, 4),
            }
        } else {
            Write::DeleteRange {
                key: small(g, KEYS),
                end: end(g),
            }
        }
    }
}

impl Arbitrary for KvOp {
    fn arbitrary(g: &mut Gen) -> Self {
        let writes = |g: &mut Gen| (0..small(g, 4)).map(|_| Write::arbitrary(g)).collect();
        match small(g, 10) {
            0..=2 => KvOp::Put {
                key: small(g, KEYS),
                value: small(g, 4),
            },
            3 => KvOp::DeleteRange {
                key: small(g, KEYS),
                end: end(g),
            },
            4 | 5 => KvOp::Txn {
                guard: small(g, KEYS),
                version: i64::from(small(g, 3)),
                success: writes(g),
                failure: writes(g),
            },
            6 => KvOp::Compact {
                back: i64::from(small(g, 6)),
            },
            _ => KvOp::Range {
                key: small(g, KEYS),
                end: end(g),
                back: i64::from(small(g, 8)) - 1,
                limit: i64::from(small(g, 4)),
            },
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        match self {
            KvOp::Txn {
                guard,
                version,
                success,
                failure,
            } => {
                let (guard, version) = (*guard, *version);
                let failure2 = failure.clone();
                let a = success.shrink().map(move |success| KvOp::Txn {
                    guard,
                    version,
                    success,
                    failure: failure2.clone(),
                });
                let success2 = success.clone();
                let b = failure.shrink().map(move |failure| KvOp::Txn {
                    guard,
                    version,
                    success: success2.clone(),
                    failure,
                });
                Box::new(a.chain(b))
            }
            _ => quickcheck::empty_shrinker(),
        }
    }
}

fn key(k: u8) -> Vec<u8> {
    vec![b'a' + k]
}

fn range_end(end: Option<u8>) -> Vec<u8> {
    match end {
        None => Vec::new(),
        Some(KEYS) => vec![0],
        Some(e) => key(e),
    }
}

fn to_op(write: &Write) -> RequestOp {
    let request = match *write {
        Write::Put { key: k, value } => Op::RequestPut(PutRequest {
            key: key(k),
            value: vec![value],
            ..PutRequest::default()
        }),
        Write::DeleteRange { key: k, end } => Op::RequestDeleteRange(DeleteRangeRequest {
            key: key(k),
            range_end: range_end(end),
            prev_kv: false,
        }),
    };
    RequestOp {
        request: Some(request),
    }
}

/// One key's history: `(revision, Some(value) | None for a delete)`.
type KeyHistory = Vec<(i64, Option<Vec<u8>>)>;

/// Every key's full history.
#[derive(Default)]
struct Model {
    history: BTreeMap<Vec<u8>, KeyHistory>,
    revision: i64,
    compacted: i64,
}

impl Model {
    fn new() -> Self {
        Self {
            revision: 1,
            // Never compacted.
            compacted: -1,
            ..Self::default()
        }
    }

    fn in_span(k: &[u8], start: &[u8], end: &[u8]) -> bool {
        match end {
            [] => k == start,
            [0] => k >= start,
            end => k >= start && k < end,
        }
    }

    /// The live key-value of `k` at `at`, with etcd's fields.
    fn get(&self, k: &[u8], at: i64) -> Option<KeyValue> {
        let history = self.history.get(k)?;
        let visible = history.iter().take_while(|(rev, _)| *rev <= at).count();
        let (mod_revision, value) = history.get(visible.checked_sub(1)?)?;
        let value = value.clone()?;
        // The generation is everything after the last delete before it.
        let generation_start = history[..visible]
            .iter()
            .rposition(|(_, v)| v.is_none())
            .map_or(0, |i| i + 1);
        Some(KeyValue {
            key: k.to_vec(),
            create_revision: history[generation_start].0,
            mod_revision: *mod_revision,
            version: (visible - generation_start) as i64,
            value,
            lease: 0,
        })
    }

    fn range(&self, start: &[u8], end: &[u8], at: i64) -> Vec<KeyValue> {
        self.history
            .keys()
            .filter(|k| Self::in_span(k, start, end))
            .filter_map(|k| self.get(k, at))
            .collect()
    }

    /// Applies writes as one revision; returns whether anything changed.
    fn write(&mut self, writes: &[Write]) -> bool {
        let rev = self.revision + 1;
        let mut changed = false;
        for write in writes {
            match *write {
                Write::Put { key: k, value } => {
                    self.history
                        .entry(key(k))
                        .or_default()
                        .push((rev, Some(vec![value])));
                    changed = true;
                }
                Write::DeleteRange { key: k, end } => {
                    // Reads inside the request see its own earlier writes.
                    for kv in self.range(&key(k), &range_end(end), rev) {
                        self.history.entry(kv.key).or_default().push((rev, None));
                        changed = true;
                    }
                }
            }
        }
        if changed {
            self.revision = rev;
        }
        changed
    }
}

fn run(ops: Vec<KvOp>) -> bool {
    let kv = MemoryKv::default();
    let mut meta = kv.read().unwrap().meta().unwrap();
    let mut model = Model::new();
    for op in &ops {
        // Validation must never panic, whatever the shape.
        let request = match op {
            KvOp::Put { key: k, value } => Request::Put(PutRequest {
                key: key(*k),
                value: vec![*value],
                ..PutRequest::default()
            }),
            KvOp::DeleteRange { key: k, end } => Request::DeleteRange(DeleteRangeRequest {
                key: key(*k),
                range_end: range_end(*end),
                prev_kv: false,
            }),
            KvOp::Txn {
                guard,
                version,
                success,
                failure,
            } => Request::Txn(TxnRequest {
                compare: vec![Compare {
                    result: CompareResult::Equal as i32,
                    target: CompareTarget::Version as i32,
                    key: key(*guard),
                    range_end: Vec::new(),
                    target_union: Some(TargetUnion::Version(*version)),
                }],
                success: success.iter().map(to_op).collect(),
                failure: failure.iter().map(to_op).collect(),
            }),
            KvOp::Compact { back } => Request::Compact(CompactionRequest {
                revision: model.revision - back,
                physical: false,
            }),
            KvOp::Range {
                key: k,
                end,
                back,
                limit,
            } => Request::Range(RangeRequest {
                key: key(*k),
                range_end: range_end(*end),
                revision: model.revision - back,
                limit: *limit,
                ..RangeRequest::default()
            }),
        };
        let _ = validate(&request, &Limits::default());

        if let Request::Range(request) = &request {
            check_range(&kv, &model, request);
            continue;
        }
        let mut txn = kv.write().unwrap();
        let write = request.into_write().expect("a write");
        let result = apply(&mut txn, &mut meta, write);
        txn.commit().unwrap();
        match op {
            KvOp::Put { key: k, value } => {
                model.write(&[Write::Put {
                    key: *k,
                    value: *value,
                }]);
                assert!(result.is_ok());
            }
            KvOp::DeleteRange { key: k, end } => {
                model.write(&[Write::DeleteRange { key: *k, end: *end }]);
                let Ok(Response::DeleteRange(r)) = result else {
                    panic!("{result:?}")
                };
                assert_eq!(r.header.map(|h| h.revision), Some(model.revision));
            }
            KvOp::Txn {
                guard,
                version,
                success,
                failure,
            } => {
                let current = model
                    .get(&key(*guard), model.revision)
                    .map_or(0, |kv| kv.version);
                let succeeded = current == *version;
                model.write(if succeeded { success } else { failure });
                let Ok(Response::Txn(r)) = result else {
                    panic!("{result:?}")
                };
                assert_eq!(r.succeeded, succeeded);
                assert_eq!(r.header.map(|h| h.revision), Some(model.revision));
            }
            KvOp::Compact { back } => {
                let at = model.revision - back;
                if at <= model.compacted {
                    assert_eq!(result, Err(Error::Compacted));
                } else {
                    assert!(result.is_ok(), "{result:?}");
                    model.compacted = at;
                }
            }
            KvOp::Range { .. } => unreachable!("handled above"),
        }
        let stored = kv.read().unwrap().meta().unwrap();
        assert_eq!(stored.revision, model.revision);
        assert_eq!(meta.revision, model.revision);
        assert_eq!(stored.compact_revision, model.compacted);
        // Every readable revision still reads right after each step.
        for at in model.compacted.max(1)..=model.revision {
            let all = RangeRequest {
                key: vec![0],
                range_end: vec![0],
                revision: at,
                ..RangeRequest::default()
            };
            check_range(&kv, &model, &all);
        }
    }
    true
}

fn check_range(kv: &MemoryKv, model: &Model, request: &RangeRequest) {
    let result = range(&kv.read().unwrap(), request);
    if request.revision > model.revision {
        assert_eq!(result, Err(Error::FutureRevision));
        return;
    }
    let at = if request.revision <= 0 {
        model.revision
    } else {
        request.revision
    };
    if at < model.compacted {
        assert_eq!(result, Err(Error::Compacted));
        return;
    }
    let response = result.unwrap();
    let mut expected = model.range(&request.key, &request.range_end, at);
    assert_eq!(
        response.count,
        expected.len() as i64,
        "count of {request:?}"
    );
    let limit = usize::try_from(request.limit).unwrap_or(0);
    let more = limit > 0 && expected.len() > limit;
    if more {
        expected.truncate(limit);
    }
    assert_eq!(response.kvs, expected, "kvs of {request:?}");
    assert_eq!(response.more, more);
    assert_eq!(response.header.map(|h| h.revision), Some(model.revision));
}

#[test]
fn mvcc_matches_the_model() {
    QuickCheck::new()
        .tests(300)
        .quickcheck(run as fn(Vec<KvOp>) -> bool);
}
