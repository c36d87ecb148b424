//! [`Encoder`]: our response header blocks (RFC 7541 §6).
//!
//! Design. A field the tables hold exactly becomes one index; otherwise a
//! small, non-sensitive field is sent as a literal with incremental
//! indexing, so from a connection's second response on, a gRPC server's
//! usual fields (`:status: 200`, `content-type: application/grpc`,
//! `grpc-status: 0`) are a byte each. Strings are always raw. Lookups scan
//! the dynamic table, newest first: it holds a handful of entries in
//! practice and at most 128 (4096 bytes at 32 or more each), and a scan of
//! a few entries beats hashing.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::table::{self, DynamicTable, STATIC, STATIC_LEN, STATIC_STATUS};
use super::{encode_integer, encode_raw_string, entry_size};

/// The largest dynamic table we use, whatever the peer allows: the
/// default size, plenty for the few fields we repeat, and it bounds the
/// table's memory and its scans.
const TABLE_BYTES_MAX: usize = 4096;

/// Fields larger than this fraction of the table are not added to it: one
/// would evict much of what we reuse, for a field that rarely repeats.
const INDEXED_FIELD_TABLE_FRACTION: usize = 4;

/// Never added to the table: `grpc-message` varies with each error, and
/// credentials must not be (RFC 7541 §7.1.3).
const NOT_INDEXED: [HeaderName; 2] = [
    HeaderName::from_static("grpc-message"),
    http::header::AUTHORIZATION,
];

/// Encodes our header blocks, keeping the dynamic table the peer's
/// decoder mirrors.
pub(crate) struct Encoder {
    /// The fields added to the table, newest first.
    table: DynamicTable<(HeaderName, HeaderValue)>,
    /// The table size the peer's decoder was last told (its default until
    /// we send an update).
    signaled_size: usize,
    /// The smallest table size set since the last block, when one was set.
    pending_min_size: Option<usize>,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// A table of 4096 bytes, the peer's default SETTINGS_HEADER_TABLE_SIZE.
    pub(crate) fn new() -> Self {
        Self {
            table: DynamicTable::new(TABLE_BYTES_MAX),
            signaled_size: TABLE_BYTES_MAX,
            pending_min_size: None,
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE changed: the encoder uses at
    /// most `size` (at most 4096), and the next block starts with a
    /// dynamic table size update when the size in use changes (RFC 7541
    /// §4.2, §6.3; when it fell and rose again between blocks, the minimum
    /// is signaled, then the final size).
    pub(crate) fn set_max_table_size(&mut self, size: usize) {
        let size = size.min(TABLE_BYTES_MAX);
        // Evict now: the peer's decoder evicts at the smallest size too.
        self.table.set_max_size(size);
        self.pending_min_size = Some(self.pending_min_size.map_or(size, |min| min.min(size)));
    }

    /// Appends one header block to `out`: `:status` first when given, then
    /// every field of `headers` (all values of a multi-valued name, in
    /// order).
    pub(crate) fn encode(
        &mut self,
        status: Option<StatusCode>,
        headers: &HeaderMap,
        out: &mut Vec<u8>,
    ) {
        self.size_updates(out);
        if let Some(status) = status {
            encode_status(status, out);
        }
        for (name, value) in headers {
            self.header(name, value, out);
        }
    }

    /// The size updates owed since the last block.
    fn size_updates(&mut self, out: &mut Vec<u8>) {
        let Some(min) = self.pending_min_size.take() else {
            return;
        };
        let size = self.table.max_size();
        // The table was cut below both the old and the new size: the peer
        // must evict at that size too before growing again.
        let dipped = min < size.min(self.signaled_size);
        if dipped {
            encode_integer(out, 0x20, 5, min as u64);
        }
        if dipped || size != self.signaled_size {
            encode_integer(out, 0x20, 5, size as u64);
        }
        self.signaled_size = size;
    }

    fn header(&mut self, name: &HeaderName, value: &HeaderValue, out: &mut Vec<u8>) {
        let sensitive = value.is_sensitive();
        let mut dynamic_name = None;
        for (offset, (entry_name, entry_value)) in self.table.iter().enumerate() {
            if entry_name == name {
                let index = STATIC_LEN + 1 + offset;
                if entry_value == value && !sensitive {
                    encode_integer(out, 0x80, 7, index as u64);
                    return;
                }
                dynamic_name.get_or_insert(index);
            }
        }
        let (static_name, static_exact) = table::static_header(name, value.as_bytes());
        if let (Some(index), false) = (static_exact, sensitive) {
            encode_integer(out, 0x80, 7, index as u64);
            return;
        }
        // A static name index is smaller, and never evicted.
        let name_index = static_name.or(dynamic_name);
        let size = entry_size(name.as_str().len(), value.len());
        let indexing = !sensitive
            && !NOT_INDEXED.contains(name)
            && size <= self.table.max_size() / INDEXED_FIELD_TABLE_FRACTION;
        let (flags, prefix_bits) = match (indexing, sensitive) {
            // Literal with incremental indexing (§6.2.1).
            (true, _) => (0x40, 6),
            // Never indexed (§6.2.3).
            (false, true) => (0x10, 4),
            // Without indexing (§6.2.2).
            (false, false) => (0x00, 4),
        };
        encode_integer(out, flags, prefix_bits, name_index.unwrap_or(0) as u64);
        if name_index.is_none() {
            encode_raw_string(out, name.as_str().as_bytes());
        }
        encode_raw_string(out, value.as_bytes());
        if indexing {
            self.table.insert((name.clone(), value.clone()), size);
        }
    }

    /// The dynamic table's entries, newest first, as text.
    #[cfg(test)]
    pub(super) fn table_entries(&self) -> Vec<(String, String)> {
        self.table
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect()
    }
}

/// `:status`: its static entry when there is one (200 is index 8),
/// else a literal without indexing named by index 8. Statuses other than
/// 200 are rare enough on our connections not to spend table on.
fn encode_status(status: StatusCode, out: &mut Vec<u8>) {
    let code = status.as_str().as_bytes();
    for index in STATIC_STATUS {
        if STATIC[index - 1].value.as_ref() == code {
            encode_integer(out, 0x80, 7, index as u64);
            return;
        }
    }
    encode_integer(out, 0x00, 4, *STATIC_STATUS.start() as u64);
    encode_raw_string(out, code);
}
