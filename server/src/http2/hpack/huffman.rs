//! HPACK's Huffman code (RFC 7541 §5.2 and Appendix B).
//!
//! The code is canonical — codes of one length are consecutive and ordered
//! by symbol, and a length's first code follows the previous length's last
//! — so the code lengths alone define it. [`CODE_BITS`] holds the "len"
//! column of Appendix B; the codes ([`CODES`]) are derived at compile time
//! and checked against the RFC in the tests.
//!
//! Decoding is table-driven, four bits at a time (the scheme of nghttp2
//! and h2). The code's tree has 256 internal nodes; they are the states of
//! an automaton, and [`DECODE`], built at compile time (12 KiB), gives for
//! each state and nibble the next state, the symbol completed on the way
//! if any (at most one: the shortest code has five bits, so a nibble
//! completes at most one code), whether the nibble ran into EOS, and
//! whether the input may end in the new state: only where the bits since
//! the last symbol are at most seven ones, a prefix of EOS (the padding
//! rule).
//!
//! This module never allocates beyond the caller's output buffer and never
//! panics on any input. Encoding is for tests: our encoder sends raw
//! strings, which cost less to produce and to read than they save.

/// The symbol for end-of-string; it may only appear as padding.
const EOS: u16 = 256;

/// Longest code in the table.
const CODE_BITS_MAX: usize = 30;

/// Code length in bits of each symbol 0..=255 and EOS (256), from RFC 7541
/// Appendix B, sixteen symbols a row.
#[rustfmt::skip]
const CODE_BITS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, // 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, // 0x10
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,         // 0x20 ' '..'/'
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,              // 0x30 '0'..'?'
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,                // 0x40 '@'..'O'
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,             // 0x50 'P'..'_'
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,                // 0x60 '`'..'o'
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,            // 0x70 'p'..DEL
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, // 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, // 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, // 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, // 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, // 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, // 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, // 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, // 0xf0
    30,                                                             // EOS
];

/// Each symbol's code, right-aligned, and its length in bits.
const CODES: [(u32, u8); 257] = codes();

/// Assigns the canonical codes: by length, then by symbol.
const fn codes() -> [(u32, u8); 257] {
    let mut codes = [(0u32, 0u8); 257];
    let mut code = 0u32;
    let mut bits = 1;
    while bits <= CODE_BITS_MAX {
        code <<= 1;
        let mut symbol = 0;
        while symbol < CODE_BITS.len() {
            if CODE_BITS[symbol] as usize == bits {
                codes[symbol] = (code, bits as u8);
                code += 1;
            }
            symbol += 1;
        }
        bits += 1;
    }
    // A complete prefix code ends exactly at 2^30: every bit string is a
    // code or a prefix of one.
    assert!(
        code == 1 << CODE_BITS_MAX,
        "HPACK Huffman table is not complete"
    );
    codes
}

/// Internal nodes of the code's tree: a complete binary tree with 257
/// leaves has 256. Node 0 is the root.
const NODES: usize = 256;

/// Marks a child in [`Tree::children`] as a leaf; the low bits are its
/// symbol. Without it, a child is an internal node's number.
const LEAF: u16 = 0x8000;

/// The code's tree, built from [`CODES`].
struct Tree {
    /// Each internal node's children for bit 0 and bit 1.
    children: [[u16; 2]; NODES],
    /// Whether the input may end at a node: its path from the root is at
    /// most seven one bits (valid padding), or it is the root.
    may_end: [bool; NODES],
}

const fn tree() -> Tree {
    // 0 means "no child yet": the root is nobody's child.
    let mut children = [[0u16; 2]; NODES];
    let mut may_end = [false; NODES];
    may_end[0] = true;
    let mut nodes = 1;
    let mut symbol = 0;
    while symbol < CODES.len() {
        let (code, bits) = CODES[symbol];
        let mut node = 0;
        let mut depth = 1;
        let mut all_ones = true;
        // Every bit but the last leads to an internal node.
        while depth < bits {
            let bit = ((code >> (bits - depth)) & 1) as usize;
            all_ones = all_ones && bit == 1;
            if children[node][bit] == 0 {
                assert!(nodes < NODES, "HPACK Huffman tree too large");
                children[node][bit] = nodes as u16;
                may_end[nodes] = all_ones && depth <= 7;
                nodes += 1;
            }
            assert!(
                children[node][bit] & LEAF == 0,
                "HPACK Huffman code not prefix-free"
            );
            node = children[node][bit] as usize;
            depth += 1;
        }
        let bit = (code & 1) as usize;
        assert!(
            children[node][bit] == 0,
            "HPACK Huffman code not prefix-free"
        );
        children[node][bit] = LEAF | symbol as u16;
        symbol += 1;
    }
    assert!(nodes == NODES, "HPACK Huffman tree incomplete");
    Tree { children, may_end }
}

/// One transition of the decoding automaton.
#[derive(Clone, Copy)]
struct Step {
    /// The state (internal node) after the nibble.
    state: u8,
    /// The symbol completed by the nibble, when `flags` has [`EMITS`].
    symbol: u8,
    flags: u8,
}

/// [`Step::flags`]: the nibble completed `symbol`.
const EMITS: u8 = 1;
/// [`Step::flags`]: the input may end after the nibble.
const MAY_END: u8 = 2;
/// [`Step::flags`]: the nibble completed EOS, a decoding error.
const FAILS: u8 = 4;

/// The decoding automaton: `DECODE[state][nibble]`.
static DECODE: [[Step; 16]; NODES] = decode_table();

const fn decode_table() -> [[Step; 16]; NODES] {
    let tree = tree();
    let mut table = [[Step {
        state: 0,
        symbol: 0,
        flags: 0,
    }; 16]; NODES];
    let mut state = 0;
    while state < NODES {
        let mut nibble = 0;
        while nibble < 16 {
            let mut node = state;
            let mut symbol = 0;
            let mut flags = 0;
            let mut bit = 4;
            while bit > 0 {
                bit -= 1;
                let child = tree.children[node][(nibble >> bit) & 1];
                if child & LEAF == 0 {
                    node = child as usize;
                } else if child & !LEAF == EOS {
                    flags = FAILS;
                    node = 0;
                    break;
                } else {
                    symbol = (child & !LEAF) as u8;
                    flags |= EMITS;
                    node = 0;
                }
            }
            if flags & FAILS == 0 && tree.may_end[node] {
                flags |= MAY_END;
            }
            table[state][nibble] = Step {
                state: node as u8,
                symbol,
                flags,
            };
            nibble += 1;
        }
        state += 1;
    }
    table
}

/// Why a Huffman-coded string could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HuffmanError {
    /// The string contains the EOS symbol, or its padding is longer than
    /// seven bits or not a prefix of EOS (RFC 7541 §5.2: a decoding error).
    Invalid,
    /// The decoded string would exceed the caller's limit; decoding stopped.
    TooLong,
}

/// Appends the decoding of `input` to `out`, writing at most `limit` bytes.
pub(crate) fn decode(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), HuffmanError> {
    // Codes are at least five bits long.
    out.reserve((input.len().saturating_mul(8) / 5).min(limit));
    let mut written = 0;
    let mut state = 0u8;
    let mut may_end = true;
    for &byte in input {
        for nibble in [byte >> 4, byte & 0x0f] {
            let step = DECODE[usize::from(state)][usize::from(nibble)];
            if step.flags & FAILS != 0 {
                return Err(HuffmanError::Invalid);
            }
            if step.flags & EMITS != 0 {
                if written == limit {
                    return Err(HuffmanError::TooLong);
                }
                out.push(step.symbol);
                written += 1;
            }
            state = step.state;
            may_end = step.flags & MAY_END != 0;
        }
    }
    if may_end {
        Ok(())
    } else {
        Err(HuffmanError::Invalid)
    }
}

/// Huffman-encodes `input` (tests build peers' header blocks with it).
#[cfg(test)]
pub(crate) fn encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pending = 0u64;
    let mut pending_bits = 0;
    for &byte in input {
        let (code, bits) = CODES[usize::from(byte)];
        pending = (pending << bits) | u64::from(code);
        pending_bits += u32::from(bits);
        while pending_bits >= 8 {
            pending_bits -= 8;
            out.push((pending >> pending_bits) as u8);
        }
    }
    if pending_bits > 0 {
        let pad = 8 - pending_bits;
        out.push(((pending << pad) | ((1 << pad) - 1)) as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::hpack::tests::hex;

    fn decoded(input: &[u8]) -> Result<Vec<u8>, HuffmanError> {
        let mut out = Vec::new();
        decode(input, &mut out, usize::MAX).map(|()| out)
    }

    #[test]
    fn derived_codes_match_appendix_b() {
        // (symbol, code as hex, len) rows of RFC 7541 Appendix B.
        let rows: &[(u16, u32, u8)] = &[
            (0, 0x1ff8, 13),
            (1, 0x7f_ffd8, 23),
            (2, 0xfff_ffe2, 28),
            (9, 0xff_ffea, 24),
            (10, 0x3fff_fffc, 30),
            (13, 0x3fff_fffd, 30),
            (22, 0x3fff_fffe, 30),
            (u16::from(b' '), 0x14, 6),
            (u16::from(b'/'), 0x18, 6),
            (u16::from(b'0'), 0x0, 5),
            (u16::from(b':'), 0x5c, 7),
            (u16::from(b'a'), 0x3, 5),
            (u16::from(b'h'), 0x27, 6),
            (u16::from(b'p'), 0x2b, 6),
            (u16::from(b't'), 0x9, 5),
            (u16::from(b'z'), 0x7b, 7),
            (255, 0x3ff_ffee, 26),
            (EOS, 0x3fff_ffff, 30),
        ];
        for &(symbol, want_code, want_bits) in rows {
            assert_eq!(
                CODES[usize::from(symbol)],
                (want_code, want_bits),
                "symbol {symbol}"
            );
        }
    }

    /// The Huffman-coded strings of RFC 7541 C.4 (requests) and C.6
    /// (responses).
    const EXAMPLES: &[(&str, &str)] = &[
        ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
        ("no-cache", "a8eb 1064 9cbf"),
        ("custom-key", "25a8 49e9 5ba9 7d7f"),
        ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
        ("302", "6402"),
        ("307", "640e ff"),
        ("private", "aec3 771a 4b"),
        (
            "Mon, 21 Oct 2013 20:13:21 GMT",
            "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
        ),
        (
            "https://www.example.com",
            "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3",
        ),
        ("gzip", "9bd9 ab"),
        (
            "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
            concat!(
                "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f",
                "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ),
        ),
    ];

    #[test]
    fn decodes_rfc_examples() {
        for &(text, coded) in EXAMPLES {
            assert_eq!(decoded(&hex(coded)).unwrap(), text.as_bytes(), "{text}");
            assert_eq!(encode(text.as_bytes()), hex(coded), "{text}");
        }
    }

    #[test]
    fn round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decoded(&encode(&all)).unwrap(), all);
        assert_eq!(decoded(&[]).unwrap(), b"");
    }

    #[test]
    fn rejects_bad_padding_and_eos() {
        // Eight bits of padding: longer than seven.
        assert_eq!(decoded(&[0xff]), Err(HuffmanError::Invalid));
        // '0' (00000) then padding 000: not a prefix of EOS.
        assert_eq!(decoded(&[0x00]), Err(HuffmanError::Invalid));
        // EOS itself (30 ones) padded with two ones.
        assert_eq!(
            decoded(&[0xff, 0xff, 0xff, 0xff]),
            Err(HuffmanError::Invalid)
        );
        // '0' then valid padding 111.
        assert_eq!(decoded(&[0x07]).unwrap(), b"0");
    }

    #[test]
    fn stops_at_the_limit() {
        let coded = hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff");
        let mut out = Vec::new();
        assert_eq!(decode(&coded, &mut out, 3), Err(HuffmanError::TooLong));
        assert_eq!(out, b"www");
        out.clear();
        assert_eq!(decode(&coded, &mut out, 15), Ok(()));
    }

    /// The bit-at-a-time decoder this module used before the automaton:
    /// the reference the table-driven one must agree with.
    fn reference(input: &[u8], limit: usize) -> Result<Vec<u8>, (HuffmanError, Vec<u8>)> {
        let mut out = Vec::new();
        let mut code = 0u32;
        let mut bits = 0u8;
        for &byte in input {
            for shift in (0..8).rev() {
                code = (code << 1) | u32::from((byte >> shift) & 1);
                bits += 1;
                let symbol = CODES.iter().position(|&c| c == (code, bits));
                if let Some(symbol) = symbol {
                    if symbol == usize::from(EOS) {
                        return Err((HuffmanError::Invalid, out));
                    }
                    if out.len() == limit {
                        return Err((HuffmanError::TooLong, out));
                    }
                    out.push(symbol as u8);
                    code = 0;
                    bits = 0;
                }
            }
        }
        if bits > 7 || code != (1u32 << bits) - 1 {
            return Err((HuffmanError::Invalid, out));
        }
        Ok(out)
    }

    /// Decodes with the automaton, in the reference's shape.
    fn table_driven(input: &[u8], limit: usize) -> Result<Vec<u8>, (HuffmanError, Vec<u8>)> {
        let mut out = Vec::new();
        match decode(input, &mut out, limit) {
            Ok(()) => Ok(out),
            Err(e) => Err((e, out)),
        }
    }

    #[test]
    fn decodes_every_byte_value() {
        for byte in 0..=255u8 {
            for len in [1, 2, 3, 8] {
                let text = vec![byte; len];
                let coded = encode(&text);
                assert_eq!(decoded(&coded), Ok(text.clone()), "{byte:#x} x {len}");
                // Behind and before a short code, so every bit alignment occurs.
                let text = [&b"a"[..], &text, b"0"].concat();
                assert_eq!(
                    decoded(&encode(&text)),
                    Ok(text.clone()),
                    "{byte:#x} x {len}"
                );
            }
        }
    }

    #[test]
    fn random_strings_round_trip() {
        let mut rng = crate::http2::hpack::tests::Rng::new(0x5eed_0001);
        for _ in 0..2_000 {
            let len = rng.below(80);
            // Half the strings are header-like ASCII, half any bytes.
            let ascii = rng.below(2) == 0;
            let text: Vec<u8> = (0..len)
                .map(|_| {
                    if ascii {
                        b' ' + rng.below(95) as u8
                    } else {
                        rng.next() as u8
                    }
                })
                .collect();
            let coded = encode(&text);
            assert_eq!(decoded(&coded), Ok(text.clone()), "{text:x?}");
            assert_eq!(reference(&coded, usize::MAX), Ok(text), "reference");
        }
    }

    #[test]
    fn agrees_with_the_bit_at_a_time_decoder() {
        // Random bytes (mostly invalid somewhere) and truncated or
        // bit-flipped encodings, with and without a limit.
        let mut rng = crate::http2::hpack::tests::Rng::new(0x5eed_0002);
        for round in 0..5_000 {
            let mut input: Vec<u8> = if round % 2 == 0 {
                (0..rng.below(12)).map(|_| rng.next() as u8).collect()
            } else {
                let text: Vec<u8> = (0..rng.below(20)).map(|_| rng.next() as u8).collect();
                encode(&text)
            };
            if !input.is_empty() && rng.below(2) == 0 {
                let at = rng.below(input.len());
                input[at] ^= 1 << rng.below(8);
            }
            if rng.below(4) == 0 {
                input.truncate(rng.below(input.len() + 1));
            }
            let limit = if rng.below(3) == 0 {
                rng.below(16)
            } else {
                usize::MAX
            };
            assert_eq!(
                table_driven(&input, limit),
                reference(&input, limit),
                "{input:x?} limit {limit}"
            );
        }
    }

    #[test]
    fn all_ones_padding_up_to_seven_bits_is_accepted() {
        // 'a' is 00011 (five bits): padding of three ones ends the byte.
        assert_eq!(decoded(&[0b0001_1111]), Ok(b"a".to_vec()));
        // Two 'a's take ten bits; six ones pad to sixteen.
        assert_eq!(decoded(&[0b0001_1000, 0b1111_1111]), Ok(b"aa".to_vec()));
        // A zero in the padding.
        assert_eq!(decoded(&[0b0001_1110]), Err(HuffmanError::Invalid));
    }
}
