//! [`Decoder`]: a peer's header blocks into [`Field`]s (RFC 7541 §3, §6).
//!
//! Design. One pass over the block, no intermediate list: each field goes
//! to the caller as it is decoded. Names and values are judged (RFC 9113
//! §8.2) when they enter the dynamic table, and the table keeps the
//! verdict with the parsed field, so an indexed field costs a clone and no
//! checks. A field that makes the list malformed does not stop the walk:
//! every later representation still updates the table, which stays in
//! step with the peer's encoder, so a malformed list costs only its stream.
//! A compression error leaves the table out of step: the decoder then
//! refuses every later block.

use bytes::Bytes;
use http::HeaderName;

use super::table::{self, DynamicTable, STATIC_LEN};
use super::{decode_integer, entry_size, DecodeError, Field, Name, Pseudo, StringLiteral};

/// Decodes a peer's header blocks, keeping its dynamic table.
pub(crate) struct Decoder {
    table: DynamicTable<Entry>,
    /// The SETTINGS_HEADER_TABLE_SIZE we advertise: the peer may not set
    /// a larger table size (§6.3).
    table_size_max: usize,
    /// Huffman-decoded strings; kept for the connection's life, it grows
    /// to the longest decoded string (bounded by the block's length).
    scratch: Vec<u8>,
    /// A block failed with a compression error; the table is out of step.
    failed: bool,
}

/// A dynamic table entry, judged once when it was added.
enum Entry {
    /// An acceptable field.
    Valid(Field),
    /// A field whose value RFC 9113 §8.2.1 forbids; its name can still be
    /// referred to.
    BadValue(Name),
    /// A field whose name is not acceptable, and that name's length.
    BadName(usize),
}

impl Entry {
    /// The entry's name, when acceptable, and its length.
    fn name(&self) -> (Option<&Name>, usize) {
        match self {
            Self::Valid(field) => (Some(&field.name), field.name.as_str().len()),
            Self::BadValue(name) => (Some(name), name.as_str().len()),
            Self::BadName(name_bytes) => (None, *name_bytes),
        }
    }
}

impl Decoder {
    /// `max_table_size`: the SETTINGS_HEADER_TABLE_SIZE we advertise (4096).
    pub(crate) fn new(max_table_size: usize) -> Self {
        Self {
            table: DynamicTable::new(max_table_size),
            table_size_max: max_table_size,
            scratch: Vec::new(),
            failed: false,
        }
    }

    /// Decodes one complete header block (already joined from
    /// HEADERS+CONTINUATION), passing each field, in order, to `field`.
    /// `max_list_size` bounds the header list (sum over fields of name +
    /// value + 32, RFC 9113 §6.5.2).
    pub(crate) fn decode(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        mut field: impl FnMut(Field),
    ) -> Result<(), DecodeError> {
        if self.failed {
            return Err(DecodeError::Compression);
        }
        let result = self.decode_block(block, max_list_size, &mut field);
        if result == Err(DecodeError::Compression) {
            self.failed = true;
        }
        result
    }

    fn decode_block(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        field: &mut impl FnMut(Field),
    ) -> Result<(), DecodeError> {
        let mut pos = 0;
        let mut list_size = 0usize;
        let mut malformed = false;
        let mut at_start = true;
        while let Some(&first) = block.get(pos) {
            let decoded = match first {
                // Indexed header field (§6.1).
                0x80..=0xff => {
                    let (index, next) = decode_integer(block, pos, 7)?;
                    pos = next;
                    self.indexed(index)?
                }
                // Literal with incremental indexing (§6.2.1).
                0x40..=0x7f => self.literal(block, &mut pos, 6, !malformed)?,
                // Dynamic table size update (§6.3), only before the first
                // field (§4.2; RFC 9113 §4.3.1).
                0x20..=0x3f => {
                    let (size, next) = decode_integer(block, pos, 5)?;
                    pos = next;
                    let size = usize::try_from(size)
                        .ok()
                        .filter(|&size| at_start && size <= self.table_size_max)
                        .ok_or(DecodeError::Compression)?;
                    self.table.set_max_size(size);
                    continue;
                }
                // Literal without indexing (§6.2.2) or never indexed
                // (§6.2.3).
                0x00..=0x1f => self.literal(block, &mut pos, 4, !malformed)?,
            };
            at_start = false;
            if malformed {
                continue;
            }
            match decoded {
                Some(decoded) => {
                    list_size = list_size.saturating_add(decoded.size());
                    if list_size > max_list_size {
                        malformed = true;
                    } else {
                        field(decoded);
                    }
                }
                None => malformed = true,
            }
        }
        if malformed {
            Err(DecodeError::Malformed)
        } else {
            Ok(())
        }
    }

    /// The field at HPACK index `index`; `None` when it is not acceptable.
    fn indexed(&self, index: u64) -> Result<Option<Field>, DecodeError> {
        let index = usize::try_from(index).map_err(|_| DecodeError::Compression)?;
        if let Some(field) = table::static_field(index) {
            return Ok(Some(field.clone()));
        }
        match self.dynamic(index)? {
            Entry::Valid(field) => Ok(Some(field.clone())),
            Entry::BadValue(_) | Entry::BadName(_) => Ok(None),
        }
    }

    /// The dynamic table's entry at HPACK index `index` (62 on).
    fn dynamic(&self, index: usize) -> Result<&Entry, DecodeError> {
        index
            .checked_sub(STATIC_LEN + 1)
            .and_then(|index| self.table.get(index))
            .ok_or(DecodeError::Compression)
    }

    /// Decodes the literal field at `*pos`, whose name index has a
    /// `prefix_bits`-bit prefix (6: with incremental indexing, 4: without
    /// or never indexed), and moves `*pos` past it. The field is `None`
    /// when it is not acceptable, or when `wanted` is false and the table
    /// does not need it.
    fn literal(
        &mut self,
        block: &[u8],
        pos: &mut usize,
        prefix_bits: u32,
        wanted: bool,
    ) -> Result<Option<Field>, DecodeError> {
        let indexing = prefix_bits == 6;
        let (index, next) = decode_integer(block, *pos, prefix_bits)?;
        *pos = next;
        let (name, name_bytes) = if index == 0 {
            let literal = StringLiteral::parse(block, *pos)?;
            *pos = literal.end;
            let bytes = literal.bytes(block, &mut self.scratch)?;
            (parse_name(bytes), bytes.len())
        } else {
            let index = usize::try_from(index).map_err(|_| DecodeError::Compression)?;
            match table::static_field(index) {
                Some(field) => (Some(field.name.clone()), field.name.as_str().len()),
                None => {
                    let (name, name_bytes) = self.dynamic(index)?.name();
                    (name.cloned(), name_bytes)
                }
            }
        };
        let literal = StringLiteral::parse(block, *pos)?;
        *pos = literal.end;
        let value = literal.bytes(block, &mut self.scratch)?;
        let value_ok = is_valid_value(value);
        if indexing {
            let size = entry_size(name_bytes, value.len());
            let (entry, decoded) = match name {
                Some(name) if value_ok => {
                    let field = Field {
                        name,
                        value: Bytes::copy_from_slice(value),
                    };
                    (Entry::Valid(field.clone()), Some(field))
                }
                Some(name) => (Entry::BadValue(name), None),
                None => (Entry::BadName(name_bytes), None),
            };
            self.table.insert(entry, size);
            return Ok(decoded);
        }
        Ok(match name {
            Some(name) if value_ok && wanted => Some(Field {
                name,
                value: Bytes::copy_from_slice(value),
            }),
            _ => None,
        })
    }

    /// The dynamic table's entries, newest first, as (name, value) text,
    /// with `"<bad name>"` or `"<bad value>"` for refused parts.
    #[cfg(test)]
    pub(super) fn table_entries(&self) -> Vec<(String, String)> {
        self.table
            .iter()
            .map(|entry| match entry {
                Entry::Valid(field) => (
                    field.name.as_str().to_owned(),
                    String::from_utf8_lossy(&field.value).into_owned(),
                ),
                Entry::BadValue(name) => (name.as_str().to_owned(), "<bad value>".to_owned()),
                Entry::BadName(_) => ("<bad name>".to_owned(), String::new()),
            })
            .collect()
    }

    /// The dynamic table's size (§4.1).
    #[cfg(test)]
    pub(super) fn table_size(&self) -> usize {
        self.table.size()
    }
}

/// A literal field name as a [`Name`]; `None` when HTTP/2 does not accept
/// it: an unknown pseudo-header, upper case (RFC 9113 §8.2.1: malformed,
/// not to be lower-cased), or anything `HeaderName` refuses.
fn parse_name(name: &[u8]) -> Option<Name> {
    if name.first() == Some(&b':') {
        return Pseudo::from_bytes(name).map(Name::Pseudo);
    }
    if name.iter().any(u8::is_ascii_uppercase) {
        return None;
    }
    HeaderName::from_bytes(name).ok().map(Name::Header)
}

/// Whether RFC 9113 §8.2.1 accepts `value`: no NUL, CR or LF, and no
/// space or tab at either end.
fn is_valid_value(value: &[u8]) -> bool {
    let blank = |byte: Option<&u8>| matches!(byte, Some(b' ' | b'\t'));
    !blank(value.first())
        && !blank(value.last())
        && !value.iter().any(|&byte| matches!(byte, 0 | b'\r' | b'\n'))
}
