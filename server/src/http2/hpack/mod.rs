//! HPACK (RFC 7541): header compression for our HTTP/2 server side.
//!
//! Design. [`Decoder`] reads a peer's header blocks into [`Field`]s, and
//! its dynamic table holds fields already parsed and checked, so a field
//! named by index — most of a gRPC client's request after its first on a
//! connection — costs a clone (a reference count) and no parsing; the
//! static table is built at compile time for the same reason. A literal
//! value costs one allocation. [`Encoder`] writes our responses: a field
//! the tables hold exactly is one index, small non-sensitive fields are
//! added to its dynamic table, and strings go raw, never Huffman-coded
//! (cheaper for us to write and for clients to read than the bytes they
//! would save). Both share [`table`]; [`huffman`] decodes the peer's
//! Huffman-coded strings. The primitives here (integers, string literals)
//! are also the ones `serve::authority`'s `:authority` rewrite walks blocks
//! with.
//!
//! Nothing here panics on any input or does I/O. What bounds the memory a
//! peer can make the decoder use is the caller's: the block's length, the
//! table size it advertises, and the header list size it accepts.

mod decode;
mod encode;
pub(crate) mod huffman;
pub(crate) mod table;

#[cfg(test)]
pub(crate) mod tests;

use std::fmt;

use bytes::Bytes;
use http::HeaderName;

pub(crate) use self::decode::Decoder;
pub(crate) use self::encode::Encoder;

/// The pseudo-header fields (RFC 9113 §8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pseudo {
    /// `:method`.
    Method,
    /// `:scheme`.
    Scheme,
    /// `:authority`.
    Authority,
    /// `:path`.
    Path,
    /// `:status`.
    Status,
    /// `:protocol` (RFC 8441, extended CONNECT).
    Protocol,
}

impl Pseudo {
    /// The field name, colon included.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Method => ":method",
            Self::Scheme => ":scheme",
            Self::Authority => ":authority",
            Self::Path => ":path",
            Self::Status => ":status",
            Self::Protocol => ":protocol",
        }
    }

    /// The pseudo-header called `name` (colon included), if any.
    pub(crate) fn from_bytes(name: &[u8]) -> Option<Self> {
        Some(match name {
            b":method" => Self::Method,
            b":scheme" => Self::Scheme,
            b":authority" => Self::Authority,
            b":path" => Self::Path,
            b":status" => Self::Status,
            b":protocol" => Self::Protocol,
            _ => return None,
        })
    }
}

/// A field name: a pseudo-header or a (lower-case) header name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Name {
    /// A pseudo-header field (`:method`, …).
    Pseudo(Pseudo),
    /// Any other field.
    Header(HeaderName),
}

impl Name {
    /// The name as sent.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Self::Pseudo(pseudo) => pseudo.as_str(),
            Self::Header(name) => name.as_str(),
        }
    }
}

/// One decoded header field. Cloning is cheap (HeaderName of a standard
/// header is a constant, other names and all values are `bytes::Bytes`-backed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    /// The field's name.
    pub(crate) name: Name,
    /// The field's value, as sent (checked against RFC 9113 §8.2.1).
    pub(crate) value: Bytes,
}

impl Field {
    /// What the field counts toward a header list's or table's size
    /// (RFC 7541 §4.1, RFC 9113 §6.5.2).
    pub(crate) fn size(&self) -> usize {
        entry_size(self.name.as_str().len(), self.value.len())
    }
}

/// The size of a field of these lengths: each field counts 32 bytes of
/// overhead beyond its name and value (RFC 7541 §4.1).
pub(crate) fn entry_size(name_bytes: usize, value_bytes: usize) -> usize {
    name_bytes.saturating_add(value_bytes).saturating_add(32)
}

/// Why a header block was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// The block is not valid HPACK (bad integer, index out of range, bad
    /// Huffman, size update above the limit or not at the block's start,
    /// truncated...): a connection error of type COMPRESSION_ERROR. The
    /// decoder is unusable after it.
    Compression,
    /// The block decoded, and the table is in sync, but the field list is
    /// unacceptable: longer than `max_list_size`, or a field name that is
    /// not a valid lower-case HTTP/2 header name (upper case, invalid
    /// chars, an unknown pseudo-header name like ":foo"), or a value with
    /// NUL/CR/LF/leading or trailing whitespace as RFC 9113 §8.2.1
    /// forbids. A stream error (the connection goes on). The decoder has
    /// processed the whole block, so its dynamic table stays in sync with
    /// the peer's encoder; fields may stop being passed on after the
    /// problem.
    Malformed,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Compression => "header block is not valid HPACK",
            Self::Malformed => "header list is malformed",
        })
    }
}

impl std::error::Error for DecodeError {}

/// Continuation octets accepted after an integer's prefix (§5.1): five
/// carry 35 bits, more than any length or index that fits a header block
/// or any table size needs, and the value never overflows a `u64`.
const INTEGER_CONTINUATION_OCTETS_MAX: usize = 5;

/// Decodes the integer (§5.1) whose `prefix_bits`-bit prefix (1 to 8) is in
/// `block[pos]`; returns it and the position after it.
pub(crate) fn decode_integer(
    block: &[u8],
    pos: usize,
    prefix_bits: u32,
) -> Result<(u64, usize), DecodeError> {
    let mask = u8::MAX >> (8 - prefix_bits);
    let first = block.get(pos).ok_or(DecodeError::Compression)?;
    let mut value = u64::from(first & mask);
    let mut pos = pos + 1;
    if value < u64::from(mask) {
        return Ok((value, pos));
    }
    for octet in 0..INTEGER_CONTINUATION_OCTETS_MAX {
        let byte = *block.get(pos).ok_or(DecodeError::Compression)?;
        pos += 1;
        value += u64::from(byte & 0x7f) << (7 * octet);
        if byte & 0x80 == 0 {
            return Ok((value, pos));
        }
    }
    Err(DecodeError::Compression)
}

/// Appends `value` as an integer with a `prefix_bits`-bit prefix (1 to 8),
/// the first octet's other bits being `flags`.
pub(crate) fn encode_integer(out: &mut Vec<u8>, flags: u8, prefix_bits: u32, mut value: u64) {
    let max = u8::MAX >> (8 - prefix_bits);
    if value < u64::from(max) {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max);
    value -= u64::from(max);
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A string literal's place in a block (§5.2).
pub(crate) struct StringLiteral {
    /// Where its octets start.
    pub(crate) start: usize,
    /// Just past its octets.
    pub(crate) end: usize,
    /// Whether the octets are Huffman-coded.
    pub(crate) huffman: bool,
}

impl StringLiteral {
    /// Parses the string literal at `pos`, checking that it fits `block`.
    pub(crate) fn parse(block: &[u8], pos: usize) -> Result<Self, DecodeError> {
        let huffman = block.get(pos).ok_or(DecodeError::Compression)? & 0x80 != 0;
        let (length, start) = decode_integer(block, pos, 7)?;
        let end = usize::try_from(length)
            .ok()
            .and_then(|length| start.checked_add(length))
            .filter(|&end| end <= block.len())
            .ok_or(DecodeError::Compression)?;
        Ok(Self {
            start,
            end,
            huffman,
        })
    }

    /// The string: its octets in `block` when raw, else decoded into
    /// `scratch` (cleared first).
    pub(crate) fn bytes<'a>(
        &self,
        block: &'a [u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], DecodeError> {
        let octets = block
            .get(self.start..self.end)
            .ok_or(DecodeError::Compression)?;
        if !self.huffman {
            return Ok(octets);
        }
        scratch.clear();
        huffman::decode(octets, scratch, usize::MAX).map_err(|_| DecodeError::Compression)?;
        Ok(scratch)
    }
}

/// Appends `value` as a raw (not Huffman-coded) string literal.
pub(crate) fn encode_raw_string(out: &mut Vec<u8>, value: &[u8]) {
    encode_integer(out, 0x00, 7, value.len() as u64);
    out.extend_from_slice(value);
}
