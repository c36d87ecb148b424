//! Fragmenting: a response too large for one gRPC message is split into
//! several, for watchers that asked for it (etcd's `fragment`); a
//! revision's events are otherwise never split.

use oxetcd_proto::etcdserverpb::WatchResponse;
use prost::Message;

/// Splits a response larger than `max_bytes` into fragments, each but the
/// last flagged `fragment`, as etcd does for watchers that asked for it. A
/// response with fewer than two events is never split.
pub fn fragments(response: WatchResponse, max_bytes: usize) -> Vec<WatchResponse> {
    if response.events.len() < 2 || response.encoded_len() < max_bytes {
        return vec![response];
    }
    let mut out = Vec::new();
    let mut template = response;
    let events = std::mem::take(&mut template.events);
    let mut current = WatchResponse {
        fragment: true,
        ..template.clone()
    };
    for event in events {
        current.events.push(event);
        if current.events.len() > 1 && current.encoded_len() >= max_bytes {
            let overflow = current.events.pop();
            let full = std::mem::replace(
                &mut current,
                WatchResponse {
                    fragment: true,
                    ..template.clone()
                },
            );
            out.push(full);
            current.events.extend(overflow);
        }
    }
    current.fragment = false;
    out.push(current);
    out
}
