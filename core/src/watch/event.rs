//! Stored versions as watch events: a put carries its key-value, a delete
//! only the key and the revision that deleted it (as etcd's do), and
//! either may carry the key's previous live version (`prev_kv`), read from
//! a view of the store.

use std::ops::ControlFlow;

use oxetcd_proto::mvccpb::{event::EventType, Event, KeyValue};

use crate::mvcc::key_value;
use crate::storage::{KeyVersion, KvRead, RangeEnd, StorageError};

/// A put that started a key's generation has no previous version to show.
pub(super) fn is_create(version: &KeyVersion) -> bool {
    !version.tombstone && version.create_revision == version.mod_revision.main
}

/// The live version of `key` at revision `at`, if any.
pub(super) fn previous(
    view: &(impl KvRead + ?Sized),
    key: &[u8],
    at: i64,
) -> Result<Option<KeyValue>, StorageError> {
    let end = [key, &[0]].concat();
    let mut found = None;
    view.scan(key, RangeEnd::Before(&end), at, &mut |version| {
        if !version.tombstone {
            found = Some(key_value(version));
        }
        ControlFlow::Break(())
    })?;
    Ok(found)
}

/// The event for one stored version. A delete shows only the key and the
/// revision that deleted it, as etcd's do.
pub(super) fn event(version: KeyVersion, prev_kv: Option<KeyValue>) -> Event {
    let kind = if version.tombstone {
        EventType::Delete
    } else {
        EventType::Put
    };
    Event {
        r#type: kind as i32,
        kv: Some(key_value(version)),
        prev_kv,
    }
}
