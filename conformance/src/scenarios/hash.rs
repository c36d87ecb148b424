//! `Maintenance.Hash`: the hash of the whole backend. Its value depends
//! on the backend's layout (etcd's bolt buckets, oxetcd's own records), so
//! the scenario checks what both promise: asking twice with no write in
//! between answers the same hash at the same revision, and a write changes
//! it.

use super::{ensure, ok, put};
use crate::target::Target;

fn hash_at(t: &mut Target) -> Result<(u32, i64), String> {
    let answer = ok(t.hash())?;
    Ok((answer.hash, answer.header.unwrap_or_default().revision))
}

/// Equal data, equal hash; new data, another hash.
pub(super) fn hash_follows_the_data(t: &mut Target) -> Result<(), String> {
    ok(t.put(put("a", "1")))?;
    let first = hash_at(t)?;
    ensure(first.1 == 2, || format!("hash at revision {}", first.1))?;
    let again = hash_at(t)?;
    ensure(again == first, || format!("{again:?} then {first:?}"))?;
    ok(t.put(put("a", "2")))?;
    let after = hash_at(t)?;
    ensure(after.1 == 3 && after.0 != first.0, || {
        format!("{after:?} after a put, {first:?} before")
    })
}
