//! HPACK's two tables (RFC 7541 §2.3): the static table, built at compile
//! time as ready [`Field`]s, and the dynamic table, generic over what each
//! side keeps in an entry (the decoder its parsed fields, the encoder the
//! header name and value it matches against).
//!
//! Index space (§2.3.3): 1 to 61 are the static table, 62 on the dynamic
//! table, newest first. The dynamic table never holds more than its size
//! limit (each entry counted as name + value + 32 bytes); with that limit
//! at most the 4096 bytes we advertise or use, it holds at most 128
//! entries.

use std::collections::VecDeque;

use bytes::Bytes;
use http::HeaderName;

use super::{Field, Name, Pseudo};

/// How many entries the static table has.
pub(crate) const STATIC_LEN: usize = 61;

/// The static table (RFC 7541 Appendix A); HPACK index `i` is
/// `STATIC[i - 1]`. Entries with an empty value (`:authority`, …) are only
/// ever used for their names.
pub(crate) static STATIC: [Field; STATIC_LEN] = [
    pseudo(Pseudo::Authority, ""),
    pseudo(Pseudo::Method, "GET"),
    pseudo(Pseudo::Method, "POST"),
    pseudo(Pseudo::Path, "/"),
    pseudo(Pseudo::Path, "/index.html"),
    pseudo(Pseudo::Scheme, "http"),
    pseudo(Pseudo::Scheme, "https"),
    pseudo(Pseudo::Status, "200"),
    pseudo(Pseudo::Status, "204"),
    pseudo(Pseudo::Status, "206"),
    pseudo(Pseudo::Status, "304"),
    pseudo(Pseudo::Status, "400"),
    pseudo(Pseudo::Status, "404"),
    pseudo(Pseudo::Status, "500"),
    header("accept-charset", ""),
    header("accept-encoding", "gzip, deflate"),
    header("accept-language", ""),
    header("accept-ranges", ""),
    header("accept", ""),
    header("access-control-allow-origin", ""),
    header("age", ""),
    header("allow", ""),
    header("authorization", ""),
    header("cache-control", ""),
    header("content-disposition", ""),
    header("content-encoding", ""),
    header("content-language", ""),
    header("content-length", ""),
    header("content-location", ""),
    header("content-range", ""),
    header("content-type", ""),
    header("cookie", ""),
    header("date", ""),
    header("etag", ""),
    header("expect", ""),
    header("expires", ""),
    header("from", ""),
    header("host", ""),
    header("if-match", ""),
    header("if-modified-since", ""),
    header("if-none-match", ""),
    header("if-range", ""),
    header("if-unmodified-since", ""),
    header("last-modified", ""),
    header("link", ""),
    header("location", ""),
    header("max-forwards", ""),
    header("proxy-authenticate", ""),
    header("proxy-authorization", ""),
    header("range", ""),
    header("referer", ""),
    header("refresh", ""),
    header("retry-after", ""),
    header("server", ""),
    header("set-cookie", ""),
    header("strict-transport-security", ""),
    header("transfer-encoding", ""),
    header("user-agent", ""),
    header("vary", ""),
    header("via", ""),
    header("www-authenticate", ""),
];

/// Where the static table's `:status` entries are (HPACK indexes 8 to 14).
pub(crate) const STATIC_STATUS: std::ops::RangeInclusive<usize> = 8..=14;

/// Where the static table's header (not pseudo-header) entries start.
const STATIC_FIRST_HEADER: usize = 15;

const fn pseudo(pseudo: Pseudo, value: &'static str) -> Field {
    Field {
        name: Name::Pseudo(pseudo),
        value: Bytes::from_static(value.as_bytes()),
    }
}

const fn header(name: &'static str, value: &'static str) -> Field {
    Field {
        name: Name::Header(HeaderName::from_static(name)),
        value: Bytes::from_static(value.as_bytes()),
    }
}

/// The static entry at HPACK index `index`, if it is one.
pub(crate) fn static_field(index: usize) -> Option<&'static Field> {
    STATIC.get(index.checked_sub(1)?)
}

/// Looks `name` (a header, not a pseudo-header) up in the static table:
/// the HPACK index of its first entry, and of the entry with `value` too.
pub(crate) fn static_header(name: &HeaderName, value: &[u8]) -> (Option<usize>, Option<usize>) {
    let mut name_index = None;
    // Standard header names compare as enum values, so this is cheap.
    for (offset, field) in STATIC[STATIC_FIRST_HEADER - 1..].iter().enumerate() {
        if matches!(&field.name, Name::Header(static_name) if static_name == name) {
            let index = STATIC_FIRST_HEADER + offset;
            name_index.get_or_insert(index);
            if field.value.as_ref() == value {
                return (name_index, Some(index));
            }
        } else if name_index.is_some() {
            // A name's entries are consecutive.
            break;
        }
    }
    (name_index, None)
}

/// A dynamic table (§2.3.2, §4): entries newest first, evicted oldest
/// first to stay within the size limit.
pub(crate) struct DynamicTable<T> {
    /// Each entry with its size (§4.1), newest first.
    entries: VecDeque<(T, usize)>,
    /// The sum of the entries' sizes.
    size: usize,
    /// The size limit in force.
    max_size: usize,
}

impl<T> DynamicTable<T> {
    /// An empty table limited to `max_size` bytes.
    pub(crate) fn new(max_size: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    /// The entry at `index`, 0 being the newest (HPACK index 62).
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        self.entries.get(index).map(|(entry, _)| entry)
    }

    /// The entries, newest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(entry, _)| entry)
    }

    /// The sum of the entries' sizes.
    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The size limit in force.
    pub(crate) fn max_size(&self) -> usize {
        self.max_size
    }

    /// Adds `entry`, of size `size`, evicting the oldest entries to make
    /// room; an entry larger than the limit empties the table and is not
    /// added (§4.4).
    pub(crate) fn insert(&mut self, entry: T, size: usize) {
        if size > self.max_size {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max_size - size);
        self.entries.push_front((entry, size));
        self.size += size;
    }

    /// Changes the size limit, evicting the oldest entries until the
    /// table fits it (§4.3).
    pub(crate) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some((_, evicted)) = self.entries.pop_back() else {
                break;
            };
            self.size -= evicted;
        }
    }
}
