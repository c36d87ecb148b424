//! Walking an HPACK header block (RFC 7541 §6) to strip a URL scheme from
//! `:authority` values (or shorten a unix socket path there to the
//! socket's file name), and nothing else.
//!
//! The walk decodes only what it must: representation types, integers and
//! string lengths everywhere, a literal name when it could be
//! `:authority`, and a `:authority` value. Every other byte is copied as
//! is. It keeps no dynamic table: a name given by index is `:authority`
//! only as static index 1 (what grpc-go, and Go's HPACK encoder in
//! general, sends — it prefers a static name match to a dynamic one).

use super::huffman::{self, HuffmanError};

/// `:authority`'s index in the static table (RFC 7541 Appendix A).
const STATIC_AUTHORITY: u64 = 1;

const AUTHORITY: &[u8] = b":authority";

/// Schemes stripped from `:authority`, lower case (matched without regard
/// to case, as URL schemes are).
const SCHEMES: [&[u8]; 2] = [b"http://", b"https://"];

/// The block could not be walked; whoever decodes it next (h2) reports why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Malformed;

/// Writes `block` to `out` (cleared first) with the scheme (and any path)
/// removed from every literal `:authority` value that starts with
/// `http://` or `https://`, re-encoded as a raw string in the same
/// representation. Returns whether anything changed; when nothing did,
/// `out`'s contents are unspecified. `scratch` holds decoded strings.
pub(super) fn strip_authority_scheme(
    block: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<bool, Malformed> {
    out.clear();
    let mut copied = 0;
    let mut changed = false;
    let mut pos = 0;
    while let Some(&first) = block.get(pos) {
        let literal_prefix_bits = match first {
            // Indexed header field (§6.1).
            0x80..=0xff => None,
            // Literal with incremental indexing (§6.2.1).
            0x40..=0x7f => Some(6),
            // Dynamic table size update (§6.3).
            0x20..=0x3f => None,
            // Literal without indexing or never indexed (§6.2.2, §6.2.3).
            0x00..=0x1f => Some(4),
        };
        let Some(prefix_bits) = literal_prefix_bits else {
            let prefix_bits = if first & 0x80 != 0 { 7 } else { 5 };
            pos = integer(block, pos, prefix_bits)?.1;
            continue;
        };
        let (name_index, after_index) = integer(block, pos, prefix_bits)?;
        pos = after_index;
        let is_authority = if name_index == 0 {
            let name = string(block, pos)?;
            pos = name.end;
            name.equals(block, AUTHORITY, scratch)?
        } else {
            name_index == STATIC_AUTHORITY
        };
        let value = string(block, pos)?;
        pos = value.end;
        if !is_authority {
            continue;
        }
        scratch.clear();
        value.decode(block, scratch, usize::MAX)?;
        if let Some(authority) = without_scheme(scratch).or_else(|| socket_name(scratch)) {
            out.extend_from_slice(&block[copied..value.length_start]);
            raw_string(out, authority);
            copied = value.end;
            changed = true;
        }
    }
    if changed {
        out.extend_from_slice(&block[copied..]);
    }
    Ok(changed)
}

/// The authority part of a `scheme://authority[/path…]` value, or `None`
/// when the value does not start with one of [`SCHEMES`].
fn without_scheme(value: &[u8]) -> Option<&[u8]> {
    let scheme = SCHEMES.iter().find(|scheme| {
        value.len() >= scheme.len() && value[..scheme.len()].eq_ignore_ascii_case(scheme)
    })?;
    let rest = &value[scheme.len()..];
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The file name of a unix socket path (`/run/etcd.sock` → `etcd.sock`),
/// which grpc-go sends as the authority when it dials a unix socket; `None`
/// for anything that does not start with `/`, or ends with one.
fn socket_name(value: &[u8]) -> Option<&[u8]> {
    if value.first() != Some(&b'/') {
        return None;
    }
    let start = value.iter().rposition(|&b| b == b'/')? + 1;
    (start < value.len()).then(|| &value[start..])
}

/// A string literal's place in the block (§5.2).
struct StringLiteral {
    /// Where its length prefix (and Huffman flag) starts.
    length_start: usize,
    /// Where its octets start.
    start: usize,
    /// Just past its octets.
    end: usize,
    huffman: bool,
}

impl StringLiteral {
    /// Appends the decoded string to `out`, at most `limit` bytes.
    fn decode(&self, block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), Malformed> {
        let octets = &block[self.start..self.end];
        if !self.huffman {
            out.extend_from_slice(&octets[..octets.len().min(limit)]);
            return Ok(());
        }
        match huffman::decode(octets, out, limit) {
            Ok(()) | Err(HuffmanError::TooLong) => Ok(()),
            Err(HuffmanError::Invalid) => Err(Malformed),
        }
    }

    /// Whether the decoded string is `expected`.
    fn equals(
        &self,
        block: &[u8],
        expected: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Result<bool, Malformed> {
        if !self.huffman {
            return Ok(&block[self.start..self.end] == expected);
        }
        // One byte past `expected` tells a longer string apart.
        scratch.clear();
        self.decode(block, scratch, expected.len() + 1)?;
        Ok(scratch.as_slice() == expected)
    }
}

/// Parses the string literal at `pos`.
fn string(block: &[u8], pos: usize) -> Result<StringLiteral, Malformed> {
    let huffman = block.get(pos).ok_or(Malformed)? & 0x80 != 0;
    let (length, start) = integer(block, pos, 7)?;
    let end = usize::try_from(length)
        .ok()
        .and_then(|length| start.checked_add(length))
        .filter(|&end| end <= block.len())
        .ok_or(Malformed)?;
    Ok(StringLiteral {
        length_start: pos,
        start,
        end,
        huffman,
    })
}

/// Decodes the integer (§5.1) whose `prefix_bits`-bit prefix is in
/// `block[pos]`; returns it and the position after it.
fn integer(block: &[u8], pos: usize, prefix_bits: u32) -> Result<(u64, usize), Malformed> {
    /// Continuation octets accepted: enough for any length or index that
    /// fits a header block, few enough that the value never overflows.
    const CONTINUATION_OCTETS_MAX: usize = 5;
    let mask = (1u8 << prefix_bits) - 1;
    let mut value = u64::from(block.get(pos).ok_or(Malformed)? & mask);
    let mut pos = pos + 1;
    if value < u64::from(mask) {
        return Ok((value, pos));
    }
    for octet in 0..CONTINUATION_OCTETS_MAX {
        let byte = *block.get(pos).ok_or(Malformed)?;
        pos += 1;
        value += u64::from(byte & 0x7f) << (7 * octet);
        if byte & 0x80 == 0 {
            return Ok((value, pos));
        }
    }
    Err(Malformed)
}

/// Appends `value` as a raw (not Huffman-coded) string literal.
pub(super) fn raw_string(out: &mut Vec<u8>, value: &[u8]) {
    encode_integer(out, 0x00, 7, value.len() as u64);
    out.extend_from_slice(value);
}

/// Appends `value` as an integer with a `prefix_bits`-bit prefix, the
/// first octet's other bits being `flags`.
pub(super) fn encode_integer(out: &mut Vec<u8>, flags: u8, prefix_bits: u32, mut value: u64) {
    let max = (1u64 << prefix_bits) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
pub(super) mod tests {
    //! Includes a small HPACK encoder and decoder (with a dynamic table),
    //! which the connection tests share.

    use super::*;

    pub(crate) fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    /// RFC 7541 Appendix A: the static table.
    const STATIC: [(&str, &str); 61] = [
        (":authority", ""),
        (":method", "GET"),
        (":method", "POST"),
        (":path", "/"),
        (":path", "/index.html"),
        (":scheme", "http"),
        (":scheme", "https"),
        (":status", "200"),
        (":status", "204"),
        (":status", "206"),
        (":status", "304"),
        (":status", "400"),
        (":status", "404"),
        (":status", "500"),
        ("accept-charset", ""),
        ("accept-encoding", "gzip, deflate"),
        ("accept-language", ""),
        ("accept-ranges", ""),
        ("accept", ""),
        ("access-control-allow-origin", ""),
        ("age", ""),
        ("allow", ""),
        ("authorization", ""),
        ("cache-control", ""),
        ("content-disposition", ""),
        ("content-encoding", ""),
        ("content-language", ""),
        ("content-length", ""),
        ("content-location", ""),
        ("content-range", ""),
        ("content-type", ""),
        ("cookie", ""),
        ("date", ""),
        ("etag", ""),
        ("expect", ""),
        ("expires", ""),
        ("from", ""),
        ("host", ""),
        ("if-match", ""),
        ("if-modified-since", ""),
        ("if-none-match", ""),
        ("if-range", ""),
        ("if-unmodified-since", ""),
        ("last-modified", ""),
        ("link", ""),
        ("location", ""),
        ("max-forwards", ""),
        ("proxy-authenticate", ""),
        ("proxy-authorization", ""),
        ("range", ""),
        ("referer", ""),
        ("refresh", ""),
        ("retry-after", ""),
        ("server", ""),
        ("set-cookie", ""),
        ("strict-transport-security", ""),
        ("transfer-encoding", ""),
        ("user-agent", ""),
        ("vary", ""),
        ("via", ""),
        ("www-authenticate", ""),
    ];

    /// Entry overhead counted by the table size (§4.1).
    const ENTRY_OVERHEAD: usize = 32;

    pub(crate) type Field = (Vec<u8>, Vec<u8>);

    pub(crate) fn field(name: &str, value: &str) -> Field {
        (name.as_bytes().to_vec(), value.as_bytes().to_vec())
    }

    /// A dynamic table, newest first.
    #[derive(Default)]
    struct Table {
        entries: std::collections::VecDeque<Field>,
        size: usize,
        max: usize,
    }

    impl Table {
        fn new(max: usize) -> Self {
            Self {
                max,
                ..Self::default()
            }
        }

        fn insert(&mut self, field: Field) {
            let size = field.0.len() + field.1.len() + ENTRY_OVERHEAD;
            while self.size + size > self.max {
                let Some(old) = self.entries.pop_back() else {
                    break;
                };
                self.size -= old.0.len() + old.1.len() + ENTRY_OVERHEAD;
            }
            if size <= self.max {
                self.size += size;
                self.entries.push_front(field);
            }
        }

        fn resize(&mut self, max: usize) {
            self.max = max;
            while self.size > self.max {
                let old = self.entries.pop_back().unwrap();
                self.size -= old.0.len() + old.1.len() + ENTRY_OVERHEAD;
            }
        }

        fn get(&self, index: u64) -> Field {
            let index = index as usize;
            if index <= STATIC.len() {
                let (name, value) = STATIC[index - 1];
                return field(name, value);
            }
            self.entries
                .get(index - 62)
                .unwrap_or_else(|| panic!("index {index} beyond the dynamic table"))
                .clone()
        }
    }

    /// How the encoder represents one field.
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Repr {
        /// Indexed when the table has it, else a literal with incremental
        /// indexing (Go's default).
        Indexing,
        WithoutIndexing,
        NeverIndexed,
    }

    /// An HPACK encoder that uses static names and dynamic full matches
    /// the way Go's does, Huffman-coding strings when asked.
    pub(crate) struct Encoder {
        table: Table,
        pub(crate) huffman: bool,
    }

    impl Encoder {
        pub(crate) fn new(huffman: bool) -> Self {
            Self {
                table: Table::new(4096),
                huffman,
            }
        }

        pub(crate) fn resize(&mut self, out: &mut Vec<u8>, max: usize) {
            self.table.resize(max);
            encode_integer(out, 0x20, 5, max as u64);
        }

        pub(crate) fn encode(&mut self, fields: &[(Field, Repr)]) -> Vec<u8> {
            let mut out = Vec::new();
            for (field, repr) in fields {
                self.field(&mut out, field, *repr);
            }
            out
        }

        pub(crate) fn field(&mut self, out: &mut Vec<u8>, field: &Field, repr: Repr) {
            let full = (1..=STATIC.len() as u64)
                .chain((0..self.table.entries.len() as u64).map(|i| i + 62))
                .find(|&i| self.table.get(i) == *field);
            if let (Some(index), Repr::Indexing) = (full, repr) {
                encode_integer(out, 0x80, 7, index);
                return;
            }
            let name = (1..=STATIC.len() as u64).find(|&i| self.table.get(i).0 == field.0);
            let (flags, prefix_bits) = match repr {
                Repr::Indexing => (0x40, 6),
                Repr::WithoutIndexing => (0x00, 4),
                Repr::NeverIndexed => (0x10, 4),
            };
            encode_integer(out, flags, prefix_bits, name.unwrap_or(0));
            if name.is_none() {
                self.string(out, &field.0);
            }
            self.string(out, &field.1);
            if let Repr::Indexing = repr {
                self.table.insert(field.clone());
            }
        }

        fn string(&self, out: &mut Vec<u8>, value: &[u8]) {
            if self.huffman {
                let coded = huffman::encode(value);
                encode_integer(out, 0x80, 7, coded.len() as u64);
                out.extend_from_slice(&coded);
            } else {
                raw_string(out, value);
            }
        }
    }

    /// An HPACK decoder, standing in for h2's.
    pub(crate) struct Decoder {
        table: Table,
    }

    impl Decoder {
        pub(crate) fn new() -> Self {
            Self {
                table: Table::new(4096),
            }
        }

        pub(crate) fn decode(&mut self, block: &[u8]) -> Vec<Field> {
            let mut fields = Vec::new();
            let mut pos = 0;
            while pos < block.len() {
                let first = block[pos];
                if first & 0x80 != 0 {
                    let (index, next) = integer(block, pos, 7).unwrap();
                    fields.push(self.table.get(index));
                    pos = next;
                } else if first & 0xe0 == 0x20 {
                    let (max, next) = integer(block, pos, 5).unwrap();
                    self.table.resize(max as usize);
                    pos = next;
                } else {
                    let indexing = first & 0x40 != 0;
                    let (index, next) = integer(block, pos, if indexing { 6 } else { 4 }).unwrap();
                    pos = next;
                    let name = if index == 0 {
                        let name = string(block, pos).unwrap();
                        pos = name.end;
                        Self::text(block, &name)
                    } else {
                        self.table.get(index).0
                    };
                    let value = string(block, pos).unwrap();
                    pos = value.end;
                    let field = (name, Self::text(block, &value));
                    if indexing {
                        self.table.insert(field.clone());
                    }
                    fields.push(field);
                }
            }
            fields
        }

        fn text(block: &[u8], literal: &StringLiteral) -> Vec<u8> {
            let mut out = Vec::new();
            literal.decode(block, &mut out, usize::MAX).unwrap();
            out
        }
    }

    fn rewrite(block: &[u8]) -> Result<Option<Vec<u8>>, Malformed> {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        strip_authority_scheme(block, &mut out, &mut scratch).map(|changed| changed.then_some(out))
    }

    /// RFC 7541 C.3 (raw strings) and C.4 (Huffman), three requests each,
    /// with the header lists they decode to.
    fn rfc_requests() -> Vec<(&'static str, Vec<u8>, Vec<Field>)> {
        let first = vec![
            field(":method", "GET"),
            field(":scheme", "http"),
            field(":path", "/"),
            field(":authority", "www.example.com"),
        ];
        let mut second = first.clone();
        second.push(field("cache-control", "no-cache"));
        let third = vec![
            field(":method", "GET"),
            field(":scheme", "https"),
            field(":path", "/index.html"),
            field(":authority", "www.example.com"),
            field("custom-key", "custom-value"),
        ];
        vec![
            (
                "C.3.1",
                hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
                first.clone(),
            ),
            (
                "C.3.2",
                hex("8286 84be 5808 6e6f 2d63 6163 6865"),
                second.clone(),
            ),
            (
                "C.3.3",
                hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
                third.clone(),
            ),
            (
                "C.4.1",
                hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
                first,
            ),
            ("C.4.2", hex("8286 84be 5886 a8eb 1064 9cbf"), second),
            (
                "C.4.3",
                hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
                third,
            ),
        ]
    }

    #[test]
    fn walks_rfc_requests_without_changing_them() {
        // The decoder checks that the vectors are what the RFC says; the
        // walk must accept each block and find nothing to rewrite.
        let mut raw = Decoder::new();
        let mut coded = Decoder::new();
        for (name, block, fields) in rfc_requests() {
            let decoder = if name.starts_with("C.3") {
                &mut raw
            } else {
                &mut coded
            };
            assert_eq!(decoder.decode(&block), fields, "{name}");
            assert_eq!(rewrite(&block), Ok(None), "{name}");
        }
    }

    #[test]
    fn rewrites_rfc_requests_with_a_scheme() {
        // C.3.1 and C.4.1 with `http://` in front of the authority.
        let raw = hex("8286 8441 1668 7474 703a 2f2f 7777 772e 6578 616d 706c 652e 636f 6d");
        let expected = hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d");
        assert_eq!(rewrite(&raw), Ok(Some(expected.clone())));

        let mut coded = hex("8286 84");
        coded.push(0x41);
        let value = huffman::encode(b"http://www.example.com");
        encode_integer(&mut coded, 0x80, 7, value.len() as u64);
        coded.extend_from_slice(&value);
        assert_eq!(rewrite(&coded), Ok(Some(expected)));
    }

    #[test]
    fn keeps_the_representation_and_strips_paths() {
        for (repr, flags, prefix_bits) in [(0x00, 0x00, 4), (0x10, 0x10, 4), (0x40, 0x40, 6)] {
            // Literal name, Huffman-coded.
            let mut block = vec![repr];
            let name = huffman::encode(b":authority");
            encode_integer(&mut block, 0x80, 7, name.len() as u64);
            block.extend_from_slice(&name);
            raw_string(&mut block, b"HTTPS://h:1/some/path");
            let mut want = block[..1 + 1 + name.len()].to_vec();
            raw_string(&mut want, b"h:1");
            assert_eq!(rewrite(&block), Ok(Some(want)), "{repr:#x}");

            // Static name index 1.
            let mut block = Vec::new();
            encode_integer(&mut block, flags, prefix_bits, 1);
            raw_string(&mut block, b"https://[::1]:2379?x");
            let mut want = block[..1].to_vec();
            raw_string(&mut want, b"[::1]:2379");
            assert_eq!(rewrite(&block), Ok(Some(want)), "{repr:#x}");
        }
    }

    #[test]
    fn a_socket_path_becomes_the_socket_name() {
        let mut block = Vec::new();
        encode_integer(&mut block, 0x40, 6, 1);
        raw_string(&mut block, b"/tmp/dir/etcd.sock");
        let mut want = block[..1].to_vec();
        raw_string(&mut want, b"etcd.sock");
        assert_eq!(rewrite(&block), Ok(Some(want)));
        for kept in [&b"/tmp/dir/"[..], b"etcd.unix:1", b"h:1"] {
            let mut block = Vec::new();
            encode_integer(&mut block, 0x40, 6, 1);
            raw_string(&mut block, kept);
            assert_eq!(rewrite(&block), Ok(None), "{kept:?}");
        }
    }

    #[test]
    fn leaves_other_fields_alone() {
        let mut block = Vec::new();
        // `host: http://x` (literal name), `:path: http://x` (index 4),
        // `:authority: httpx` (no scheme), a size update.
        block.push(0x00);
        raw_string(&mut block, b"host");
        raw_string(&mut block, b"http://x");
        encode_integer(&mut block, 0x00, 4, 4);
        raw_string(&mut block, b"http://x");
        encode_integer(&mut block, 0x40, 6, 1);
        raw_string(&mut block, b"httpx");
        encode_integer(&mut block, 0x20, 5, 4096);
        // A long literal name that starts like `:authority`.
        block.push(0x00);
        let name = huffman::encode(b":authorityx");
        encode_integer(&mut block, 0x80, 7, name.len() as u64);
        block.extend_from_slice(&name);
        raw_string(&mut block, b"http://x");
        assert_eq!(rewrite(&block), Ok(None));
    }

    #[test]
    fn malformed_blocks_are_reported() {
        for block in [
            &[0x41][..],                                 // literal, value missing
            &[0x41, 0x05, b'a'],                         // value shorter than its length
            &[0x7f],                                     // integer continuation missing
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // integer too long
            &[0x41, 0x81, 0x00],                         // Huffman value with bad padding
            &[0x40, 0x81],                               // literal name cut short
        ] {
            assert_eq!(rewrite(block), Err(Malformed), "{block:x?}");
        }
        assert_eq!(rewrite(&[]), Ok(None));
    }

    #[test]
    fn integers_round_trip() {
        // RFC 7541 C.1: 10 and 1337 in a 5-bit prefix, 42 in 8 bits.
        let mut out = Vec::new();
        encode_integer(&mut out, 0xe0, 5, 10);
        encode_integer(&mut out, 0xe0, 5, 1337);
        assert_eq!(out, [0xea, 0xff, 0x9a, 0x0a]);
        assert_eq!(integer(&out, 0, 5), Ok((10, 1)));
        assert_eq!(integer(&out, 1, 5), Ok((1337, 4)));
        for value in [0, 1, 14, 15, 16, 127, 128, 255, 16_384, 1 << 28] {
            let mut out = Vec::new();
            encode_integer(&mut out, 0, 4, value);
            assert_eq!(integer(&out, 0, 4), Ok((value, out.len())), "{value}");
        }
    }
}
