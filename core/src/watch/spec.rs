//! What a watcher watches: a key or a range, and which kinds of event.
//!
//! A create request is normalised as etcd does it (an empty key is `"\0"`,
//! a range end of `"\0"` means every key from the key on) and refused
//! with etcd's reason when its range is empty.

use oxetcd_proto::etcdserverpb::watch_create_request::FilterType;
use oxetcd_proto::etcdserverpb::WatchCreateRequest;

/// Why a create request is refused (etcd's message, in `cancel_reason`).
pub(super) const EMPTY_RANGE: &str = "mvcc: watcher range is empty";

/// What a watcher watches and how it wants its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// First key (etcd turns an empty key into `"\0"`).
    pub key: Vec<u8>,
    /// `None`: `key` alone; `Some(empty)`: every key from `key` on;
    /// `Some(end)`: `[key, end)`.
    pub range_end: Option<Vec<u8>>,
    /// Drop put events.
    pub no_put: bool,
    /// Drop delete events.
    pub no_delete: bool,
    /// Attach each key's previous version.
    pub prev_kv: bool,
    /// Split responses larger than the request limit.
    pub fragment: bool,
}

impl WatchSpec {
    /// The spec of a create request, normalised as etcd does; `Err` holds
    /// the cancel reason.
    pub fn from_create(request: &WatchCreateRequest) -> Result<Self, &'static str> {
        let key = if request.key.is_empty() {
            vec![0]
        } else {
            request.key.clone()
        };
        let range_end = match request.range_end.as_slice() {
            [] => None,
            [0] => Some(Vec::new()),
            end => Some(end.to_vec()),
        };
        if let Some(end) = &range_end {
            if !end.is_empty() && key.as_slice() >= end.as_slice() {
                return Err(EMPTY_RANGE);
            }
        }
        let has = |filter: FilterType| request.filters.contains(&(filter as i32));
        Ok(Self {
            key,
            range_end,
            no_put: has(FilterType::Noput),
            no_delete: has(FilterType::Nodelete),
            prev_kv: request.prev_kv,
            fragment: request.fragment,
        })
    }

    /// True when `key` is in the watched range.
    pub fn contains(&self, key: &[u8]) -> bool {
        match &self.range_end {
            None => key == self.key.as_slice(),
            Some(end) if end.is_empty() => key >= self.key.as_slice(),
            Some(end) => key >= self.key.as_slice() && key < end.as_slice(),
        }
    }

    /// True unless a filter drops this kind of event.
    pub(super) fn wants(&self, tombstone: bool) -> bool {
        if tombstone {
            !self.no_delete
        } else {
            !self.no_put
        }
    }
}
