//! The decoder on RFC 7541 Appendix C and on every kind of bad block, the
//! encoder through the decoder, and seeded random inputs for both. Shared
//! test helpers ([`hex`], [`Rng`]) live here too.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::*;

/// The bytes written in hex, ignoring anything else (spaces, newlines).
pub(crate) fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// A small seeded generator (xorshift64*) for reproducible random tests.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

type Text = Vec<(String, String)>;

fn text(fields: &[(&str, &str)]) -> Text {
    fields
        .iter()
        .map(|&(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// Decodes `block` with no list size limit.
fn decode(decoder: &mut Decoder, block: &[u8]) -> Result<Text, DecodeError> {
    decode_limited(decoder, block, usize::MAX)
}

fn decode_limited(decoder: &mut Decoder, block: &[u8], max: usize) -> Result<Text, DecodeError> {
    let mut fields = Vec::new();
    decoder.decode(block, max, |field| {
        let value = String::from_utf8(field.value.to_vec()).unwrap();
        fields.push((field.name.as_str().to_owned(), value));
    })?;
    Ok(fields)
}

#[test]
fn integers_rfc_c1_and_round_trip() {
    // RFC 7541 C.1: 10 and 1337 in a 5-bit prefix, 42 in 8 bits.
    let mut out = Vec::new();
    encode_integer(&mut out, 0xe0, 5, 10);
    encode_integer(&mut out, 0xe0, 5, 1337);
    encode_integer(&mut out, 0x00, 8, 42);
    assert_eq!(out, [0xea, 0xff, 0x9a, 0x0a, 0x2a]);
    assert_eq!(decode_integer(&out, 0, 5), Ok((10, 1)));
    assert_eq!(decode_integer(&out, 1, 5), Ok((1337, 4)));
    assert_eq!(decode_integer(&out, 4, 8), Ok((42, 5)));
    for prefix_bits in [4, 5, 6, 7] {
        for value in [
            0,
            1,
            14,
            15,
            16,
            127,
            128,
            255,
            16_384,
            1 << 28,
            u64::from(u32::MAX),
        ] {
            let mut out = Vec::new();
            encode_integer(&mut out, 0, prefix_bits, value);
            assert_eq!(decode_integer(&out, 0, prefix_bits), Ok((value, out.len())));
        }
    }
}

#[test]
fn integers_truncated_or_too_long_are_refused() {
    for bytes in [
        &[][..],
        &[0x1f],
        &[0x1f, 0x80],
        &[0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    ] {
        assert_eq!(
            decode_integer(bytes, 0, 5),
            Err(DecodeError::Compression),
            "{bytes:x?}"
        );
    }
    // Five continuation octets are the most accepted.
    assert_eq!(
        decode_integer(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0x01], 0, 5),
        Ok((
            31 + 0x7f + (0x7f << 7) + (0x7f << 14) + (0x7f << 21) + (1 << 28),
            6
        ))
    );
}

#[test]
fn rfc_c2_literal_fields() {
    let cases: [(&str, (&str, &str), usize); 4] = [
        (
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            ("custom-key", "custom-header"),
            55,
        ),
        (
            "040c 2f73 616d 706c 652f 7061 7468",
            (":path", "/sample/path"),
            0,
        ),
        (
            "1008 7061 7373 776f 7264 0673 6563 7265 74",
            ("password", "secret"),
            0,
        ),
        ("82", (":method", "GET"), 0),
    ];
    for (block, field, table_size) in cases {
        let mut decoder = Decoder::new(4096);
        assert_eq!(
            decode(&mut decoder, &hex(block)),
            Ok(text(&[field])),
            "{block}"
        );
        assert_eq!(decoder.table_size(), table_size, "{block}");
        let entries = if table_size == 0 {
            vec![]
        } else {
            text(&[field])
        };
        assert_eq!(decoder.table_entries(), entries, "{block}");
    }
}

/// The header lists of RFC 7541 C.3 and C.4 (the same requests), with
/// the dynamic table after each, newest first, and its size.
fn rfc_requests() -> [(Text, Text, usize); 3] {
    let first = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    let second = [&first[..], &[("cache-control", "no-cache")]].concat();
    let third = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    [
        (text(&first), text(&[(":authority", "www.example.com")]), 57),
        (
            text(&second),
            text(&[
                ("cache-control", "no-cache"),
                (":authority", "www.example.com"),
            ]),
            110,
        ),
        (
            text(&third),
            text(&[
                ("custom-key", "custom-value"),
                ("cache-control", "no-cache"),
                (":authority", "www.example.com"),
            ]),
            164,
        ),
    ]
}

/// The header lists of RFC 7541 C.5 and C.6 (the same responses, with a
/// 256-byte table), with the table after each, newest first, and its size.
fn rfc_responses() -> [(Text, Text, usize); 3] {
    let date1 = ("date", "Mon, 21 Oct 2013 20:13:21 GMT");
    let date2 = ("date", "Mon, 21 Oct 2013 20:13:22 GMT");
    let location = ("location", "https://www.example.com");
    let private = ("cache-control", "private");
    let cookie = (
        "set-cookie",
        "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
    );
    [
        (
            text(&[(":status", "302"), private, date1, location]),
            text(&[location, date1, private, (":status", "302")]),
            222,
        ),
        (
            text(&[(":status", "307"), private, date1, location]),
            text(&[(":status", "307"), location, date1, private]),
            222,
        ),
        (
            text(&[
                (":status", "200"),
                private,
                date2,
                location,
                ("content-encoding", "gzip"),
                cookie,
            ]),
            text(&[cookie, ("content-encoding", "gzip"), date2]),
            215,
        ),
    ]
}

/// Decodes `blocks` in sequence with a table of `table_size`, checking
/// the lists and tables `expected`.
fn check_sequence(
    name: &str,
    table_size: usize,
    blocks: [&str; 3],
    expected: [(Text, Text, usize); 3],
) {
    let mut decoder = Decoder::new(table_size);
    for (n, (block, (fields, table, size))) in blocks.iter().zip(expected).enumerate() {
        assert_eq!(
            decode(&mut decoder, &hex(block)),
            Ok(fields),
            "{name}.{}",
            n + 1
        );
        assert_eq!(decoder.table_entries(), table, "{name}.{}", n + 1);
        assert_eq!(decoder.table_size(), size, "{name}.{}", n + 1);
    }
}

#[test]
fn rfc_c3_requests_without_huffman() {
    let blocks = [
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ];
    check_sequence("C.3", 4096, blocks, rfc_requests());
}

#[test]
fn rfc_c4_requests_with_huffman() {
    let blocks = [
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ];
    check_sequence("C.4", 4096, blocks, rfc_requests());
}

#[test]
fn rfc_c5_responses_with_eviction() {
    let blocks = [
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31",
    ];
    check_sequence("C.5", 256, blocks, rfc_responses());
}

#[test]
fn rfc_c6_responses_with_huffman() {
    let blocks = [
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ];
    check_sequence("C.6", 256, blocks, rfc_responses());
}

#[test]
fn static_fields_are_typed() {
    let mut fields = Vec::new();
    let result = Decoder::new(4096).decode(&[0x82, 0x81, 0x9f], usize::MAX, |f| fields.push(f));
    assert_eq!(result, Ok(()));
    assert_eq!(fields[0].name, Name::Pseudo(Pseudo::Method));
    assert_eq!(fields[1].name, Name::Pseudo(Pseudo::Authority));
    assert_eq!(fields[2].name, Name::Header(http::header::CONTENT_TYPE));
    assert_eq!(fields[2].value, Bytes::new());
    // A literal `:protocol` and a literal standard name.
    let mut block = vec![0x00];
    encode_raw_string(&mut block, b":protocol");
    encode_raw_string(&mut block, b"websocket");
    block.push(0x00);
    encode_raw_string(&mut block, b"te");
    encode_raw_string(&mut block, b"trailers");
    fields.clear();
    let result = Decoder::new(4096).decode(&block, usize::MAX, |f| fields.push(f));
    assert_eq!(result, Ok(()));
    assert_eq!(fields[0].name, Name::Pseudo(Pseudo::Protocol));
    assert_eq!(fields[1].name, Name::Header(http::header::TE));
}

#[test]
fn bad_hpack_is_a_compression_error() {
    let cases: &[(&str, &[u8])] = &[
        ("index 0", &[0x80]),
        ("index past the static table, empty dynamic", &[0xbe]),
        (
            "index far beyond the table",
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x0f],
        ),
        ("name index past the table", &[0x7e, 0x01, b'a']),
        ("truncated integer", &[0xff]),
        ("truncated integer continuation", &[0xff, 0x80]),
        (
            "integer overflow",
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        ),
        ("string length beyond the block", &[0x40, 0x05, b'a']),
        (
            "huge string length",
            &[0x40, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x0f],
        ),
        ("value missing", &[0x41]),
        ("bad Huffman padding", &[0x41, 0x81, 0x00]),
        ("Huffman EOS", &[0x41, 0x84, 0xff, 0xff, 0xff, 0xff]),
        ("size update above the limit", &[0x3f, 0xe2, 0x1f]),
        ("size update after a field", &[0x82, 0x20]),
    ];
    for &(name, block) in cases {
        let mut decoder = Decoder::new(4096);
        assert_eq!(
            decode(&mut decoder, block),
            Err(DecodeError::Compression),
            "{name}"
        );
        // The decoder is unusable after it.
        assert_eq!(
            decode(&mut decoder, &[0x82]),
            Err(DecodeError::Compression),
            "{name}"
        );
    }
    // Size updates at the start, up to the limit, are fine.
    let mut decoder = Decoder::new(4096);
    let block = [0x20, 0x3f, 0xe1, 0x1f, 0x82];
    assert_eq!(
        decode(&mut decoder, &block),
        Ok(text(&[(":method", "GET")]))
    );
}

/// A literal with incremental indexing and a literal name.
fn indexed_literal(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut block = vec![0x40];
    encode_raw_string(&mut block, name);
    encode_raw_string(&mut block, value);
    block
}

#[test]
fn malformed_lists_keep_the_table_in_sync() {
    // (name, value, Huffman-coded name)
    let bad_fields: [(&[u8], &[u8], bool); 9] = [
        (b"Upper", b"x", false),
        (b"X-Upper", b"x", true),
        (b":foo", b"x", false),
        (b"bad name", b"x", false),
        (b"", b"x", false),
        (b"x-crlf", b"a\r\nb", false),
        (b"x-nul", b"a\0b", false),
        (b"x-lead", b" a", false),
        (b"x-trail", b"a\t", false),
    ];
    for (name, value, huffman) in bad_fields {
        let bad = if huffman {
            let mut block = vec![0x40];
            let coded = huffman::encode(name);
            encode_integer(&mut block, 0x80, 7, coded.len() as u64);
            block.extend_from_slice(&coded);
            encode_raw_string(&mut block, value);
            block
        } else {
            indexed_literal(name, value)
        };
        let bad_size = entry_size(name.len(), value.len());
        let mut decoder = Decoder::new(4096);
        let block = [&[0x82][..], &bad, &indexed_literal(b"good", b"1")].concat();
        assert_eq!(
            decode(&mut decoder, &block),
            Err(DecodeError::Malformed),
            "{bad:x?}"
        );
        // Both entries were added, the bad one before the good one.
        let entries = decoder.table_entries();
        assert_eq!(entries.len(), 2, "{bad:x?}");
        assert_eq!(entries[0], ("good".to_owned(), "1".to_owned()), "{bad:x?}");
        assert_eq!(
            decoder.table_size(),
            bad_size + entry_size(4, 1),
            "{bad:x?}"
        );
        // Index 62 is the good field, 63 the bad one.
        assert_eq!(
            decode(&mut decoder, &[0xbe]),
            Ok(text(&[("good", "1")])),
            "{bad:x?}"
        );
        assert_eq!(
            decode(&mut decoder, &[0xbf]),
            Err(DecodeError::Malformed),
            "{bad:x?}"
        );
        // A bad name referred to by index, with a fine value, stays bad;
        // the entry it adds still counts.
        let by_name = [0x7f, 0x00, 0x01, b'v'];
        let result = decode(&mut decoder, &by_name);
        assert_eq!(decoder.table_entries().len(), 3, "{bad:x?}");
        let name_is_bad = entries[1].0 == "<bad name>";
        let expected = if name_is_bad {
            Err(DecodeError::Malformed)
        } else {
            Ok(vec![(entries[1].0.clone(), "v".to_owned())])
        };
        assert_eq!(result, expected, "{bad:x?}");
        assert_eq!(
            decode(&mut decoder, &[0x82]),
            Ok(text(&[(":method", "GET")])),
            "{bad:x?}"
        );
    }
}

#[test]
fn list_size_limit_is_malformed_and_keeps_the_table_in_sync() {
    let mut decoder = Decoder::new(4096);
    // 38 + 42 bytes: over a limit of 50; the entry after it is still added.
    let block = [
        &indexed_literal(b"aaa", b"bbb")[..],
        &[0x82],
        &indexed_literal(b"c", b"d"),
    ]
    .concat();
    assert_eq!(
        decode_limited(&mut decoder, &block, 50),
        Err(DecodeError::Malformed)
    );
    assert_eq!(decoder.table_entries(), text(&[("c", "d"), ("aaa", "bbb")]));
    assert_eq!(
        decode_limited(&mut decoder, &[0xbf, 0xbe], 80),
        Ok(text(&[("aaa", "bbb"), ("c", "d")]))
    );
    // Exactly at the limit is fine; one byte over is not.
    assert_eq!(
        decode_limited(&mut decoder, &[0xbf, 0x82], 80),
        Ok(text(&[("aaa", "bbb"), (":method", "GET")]))
    );
    assert_eq!(
        decode_limited(&mut decoder, &[0xbf, 0x82], 79),
        Err(DecodeError::Malformed)
    );
}

fn grpc_response_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers
}

fn grpc_trailers(status: &'static str, message: Option<&'static str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("grpc-status", HeaderValue::from_static(status));
    if let Some(message) = message {
        headers.insert("grpc-message", HeaderValue::from_static(message));
    }
    headers
}

/// What `encode(status, headers)` should decode to.
fn expected(status: Option<StatusCode>, headers: &HeaderMap) -> Text {
    let status = status.map(|s| (":status".to_owned(), s.as_str().to_owned()));
    status
        .into_iter()
        .chain(
            headers.iter().map(|(name, value)| {
                (name.as_str().to_owned(), value.to_str().unwrap().to_owned())
            }),
        )
        .collect()
}

/// Encodes one block, decodes it, checks the list and that both tables
/// agree; returns the block.
fn round_trip(
    encoder: &mut Encoder,
    decoder: &mut Decoder,
    status: Option<StatusCode>,
    headers: &HeaderMap,
) -> Vec<u8> {
    let mut block = Vec::new();
    encoder.encode(status, headers, &mut block);
    assert_eq!(
        decode(decoder, &block),
        Ok(expected(status, headers)),
        "{block:x?}"
    );
    assert_eq!(
        decoder.table_entries(),
        encoder.table_entries(),
        "{block:x?}"
    );
    block
}

#[test]
fn grpc_responses_become_single_byte_indexes() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let headers = grpc_response_headers();
    let ok = grpc_trailers("0", None);
    let first = round_trip(&mut encoder, &mut decoder, Some(StatusCode::OK), &headers);
    // :status 200 is static; content-type by static name, added.
    assert_eq!(first[..2], [0x88, 0x5f]);
    let trailers = round_trip(&mut encoder, &mut decoder, None, &ok);
    assert_eq!(trailers[0], 0x40, "grpc-status is a literal name, added");
    for _ in 0..3 {
        let again = round_trip(&mut encoder, &mut decoder, Some(StatusCode::OK), &headers);
        assert_eq!(again, [0x88, 0xbf], "content-type is now at 63");
        assert_eq!(round_trip(&mut encoder, &mut decoder, None, &ok), [0xbe]);
    }
    // grpc-message is never added: it repeats in full, after grpc-status
    // (3 bytes by dynamic name, then 1 byte indexed).
    let failed = grpc_trailers("2", Some("boom"));
    let first = round_trip(&mut encoder, &mut decoder, None, &failed);
    let second = round_trip(&mut encoder, &mut decoder, None, &failed);
    assert_eq!(first[..3], [0x7e, 0x01, b'2']);
    assert_eq!(second[0], 0xbe);
    assert_eq!(first[3..], second[1..]);
    assert_eq!(second[1], 0x00, "without indexing, literal name");
    assert!(encoder
        .table_entries()
        .iter()
        .all(|(name, _)| name != "grpc-message"));
}

#[test]
fn statuses_use_the_static_table() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let empty = HeaderMap::new();
    for (code, block) in [
        (200, vec![0x88]),
        (204, vec![0x89]),
        (304, vec![0x8b]),
        (404, vec![0x8d]),
        (500, vec![0x8e]),
        (503, vec![0x08, 0x03, b'5', b'0', b'3']),
    ] {
        let status = StatusCode::from_u16(code).unwrap();
        assert_eq!(
            round_trip(&mut encoder, &mut decoder, Some(status), &empty),
            block
        );
    }
    assert!(encoder.table_entries().is_empty());
}

#[test]
fn sensitive_large_and_credential_fields_are_not_added() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let mut headers = HeaderMap::new();
    let mut secret = HeaderValue::from_static("s3cret");
    secret.set_sensitive(true);
    headers.insert("x-token", secret.clone());
    headers.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_static("Basic x"),
    );
    // 32 + 7 + 986 = 1025 bytes: over a quarter of 4096.
    let big = HeaderValue::from_str(&"b".repeat(986)).unwrap();
    headers.insert("x-large", big);
    let first = round_trip(&mut encoder, &mut decoder, None, &headers);
    assert_eq!(first[0], 0x10, "sensitive: never indexed, literal name");
    assert!(encoder.table_entries().is_empty());
    let second = round_trip(&mut encoder, &mut decoder, None, &headers);
    assert_eq!(first, second);
    // One byte less and it is added.
    headers.insert("x-large", HeaderValue::from_str(&"b".repeat(985)).unwrap());
    round_trip(&mut encoder, &mut decoder, None, &headers);
    assert_eq!(encoder.table_entries().len(), 1);
    // A sensitive value is never sent as an index, even when the table has it.
    let mut headers = HeaderMap::new();
    headers.insert("x-token", HeaderValue::from_static("open"));
    round_trip(&mut encoder, &mut decoder, None, &headers);
    secret = HeaderValue::from_static("open");
    secret.set_sensitive(true);
    headers.insert("x-token", secret);
    let block = round_trip(&mut encoder, &mut decoder, None, &headers);
    assert_eq!(
        block,
        [0x1f, 0x2f, 0x04, b'o', b'p', b'e', b'n'],
        "never indexed, name 62"
    );
}

#[test]
fn table_size_changes_are_signaled() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let headers = grpc_response_headers();
    let ok = Some(StatusCode::OK);
    round_trip(&mut encoder, &mut decoder, ok, &headers);
    // Unchanged, or above what we use: no update.
    encoder.set_max_table_size(4096);
    encoder.set_max_table_size(65_536);
    assert_eq!(
        round_trip(&mut encoder, &mut decoder, ok, &headers),
        [0x88, 0xbe]
    );
    // Down to 0: an update, the table empties, nothing is added.
    encoder.set_max_table_size(0);
    let block = round_trip(&mut encoder, &mut decoder, ok, &headers);
    assert_eq!(block[..3], [0x20, 0x88, 0x0f]);
    assert!(decoder.table_entries().is_empty());
    // Back up: an update to 4096, and content-type is added again.
    encoder.set_max_table_size(4096);
    let block = round_trip(&mut encoder, &mut decoder, ok, &headers);
    assert_eq!(block[..5], [0x3f, 0xe1, 0x1f, 0x88, 0x5f]);
    // Down to 40 (evicting content-type, 60 bytes) and back up between
    // blocks: the minimum, then the final size.
    encoder.set_max_table_size(40);
    encoder.set_max_table_size(4096);
    let block = round_trip(&mut encoder, &mut decoder, ok, &headers);
    assert_eq!(block[..7], [0x3f, 0x09, 0x3f, 0xe1, 0x1f, 0x88, 0x5f]);
    // Down to 100 and back: nothing evicted, but the dip is signaled.
    encoder.set_max_table_size(100);
    encoder.set_max_table_size(4096);
    let block = round_trip(&mut encoder, &mut decoder, ok, &headers);
    assert_eq!(block, [0x3f, 0x45, 0x3f, 0xe1, 0x1f, 0x88, 0xbe]);
    // Down to 2000; then up and back to 2000: no update needed.
    encoder.set_max_table_size(2000);
    let block = round_trip(&mut encoder, &mut decoder, ok, &headers);
    assert_eq!(block, [0x3f, 0xb1, 0x0f, 0x88, 0xbe]);
    encoder.set_max_table_size(4096);
    encoder.set_max_table_size(2000);
    assert_eq!(
        round_trip(&mut encoder, &mut decoder, ok, &headers),
        [0x88, 0xbe]
    );
}

/// A random header value: visible ASCII with inner spaces.
fn random_value(rng: &mut Rng) -> String {
    let len = rng.below(40);
    let mut value: String = (0..len)
        .map(|_| char::from(b' ' + rng.below(95) as u8))
        .collect();
    value = value.trim_matches(' ').to_owned();
    if rng.below(8) == 0 {
        value = "x".repeat(rng.below(1500));
    }
    value
}

#[test]
fn random_header_lists_round_trip() {
    const NAMES: [&str; 10] = [
        "content-type",
        "grpc-status",
        "grpc-message",
        "authorization",
        "accept-encoding",
        "set-cookie",
        "x-a",
        "x-bb",
        "etag",
        "x-trace-id",
    ];
    const SIZES: [usize; 6] = [0, 40, 64, 256, 4096, 100_000];
    let mut rng = Rng::new(0x4e4b_0001);
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let mut values: Vec<String> = (0..8).map(|_| random_value(&mut rng)).collect();
    values.push("gzip, deflate".to_owned());
    for _ in 0..2_000 {
        for _ in 0..rng.below(4).saturating_sub(1) {
            encoder.set_max_table_size(SIZES[rng.below(SIZES.len())]);
        }
        if rng.below(4) == 0 {
            let at = rng.below(values.len());
            values[at] = random_value(&mut rng);
        }
        let mut headers = HeaderMap::new();
        for _ in 0..rng.below(8) {
            let name = HeaderName::from_static(NAMES[rng.below(NAMES.len())]);
            let mut value = HeaderValue::from_str(&values[rng.below(values.len())]).unwrap();
            value.set_sensitive(rng.below(10) == 0);
            headers.append(name, value);
        }
        let status = [None, Some(200), Some(404), Some(503)][rng.below(4)];
        let status = status.map(|code| StatusCode::from_u16(code).unwrap());
        round_trip(&mut encoder, &mut decoder, status, &headers);
    }
}

/// Header blocks of every kind, for the fuzz seeds.
fn seed_blocks() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = [
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5886 a8eb 1064 9cbf",
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6",
        "3fe1 1f82 1008 7061 7373 776f 7264 0673 6563 7265 74",
    ]
    .iter()
    .map(|block| hex(block))
    .collect();
    seeds.push(indexed_literal(b"x-upper", b"value"));
    seeds
}

#[test]
fn random_bytes_never_panic_the_decoder() {
    let mut rng = Rng::new(0x4e4b_0002);
    let seeds = seed_blocks();
    let mut outcomes = [0usize; 3];
    for round in 0..10_000 {
        // Pure noise, or a valid block with noise after it.
        let mut input = if round % 2 == 0 {
            Vec::new()
        } else {
            seeds[rng.below(seeds.len())].clone()
        };
        input.extend((0..rng.below(48)).map(|_| rng.next() as u8));
        let mut decoder = Decoder::new([0, 256, 4096][rng.below(3)]);
        for _ in 0..2 {
            let result = decoder.decode(&input, rng.below(2000), |_| {});
            outcomes[match result {
                Ok(()) => 0,
                Err(DecodeError::Malformed) => 1,
                Err(DecodeError::Compression) => 2,
            }] += 1;
        }
    }
    // The inputs reached every outcome.
    assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");
}

#[test]
fn fuzz_decoder() {
    let ran = oxetcd_fuzz::fuzz("hpack-decoder", &seed_blocks(), |input| {
        let mut decoder = Decoder::new(4096);
        let mut count = 0;
        let _ = decoder.decode(input, 16_384, |_| count += 1);
        let _ = decoder.decode(input, 16_384, |_| count += 1);
    });
    assert!(ran > 0);
}
