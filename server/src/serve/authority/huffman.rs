//! HPACK's Huffman code (RFC 7541 §5.2 and Appendix B): decoding only.
//!
//! The code is canonical — codes of one length are consecutive and ordered
//! by symbol, and a length's first code follows the previous length's last
//! — so the code lengths alone define it. [`CODE_BITS`] holds the "len"
//! column of Appendix B; the codes themselves are derived at compile time
//! and checked against the RFC in the tests. Decoding walks one bit at a
//! time, which is plenty for the few short strings the authority rewrite
//! decodes (a `:authority` value, a literal header name).
//!
//! This module never allocates beyond the caller's output buffer and never
//! panics on any input.

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

/// The canonical decoding tables derived from [`CODE_BITS`].
struct Canonical {
    /// How many codes have each length.
    count: [u32; CODE_BITS_MAX + 1],
    /// The numerically first code of each length.
    first_code: [u32; CODE_BITS_MAX + 1],
    /// Where each length's symbols start in `symbols`.
    first_index: [u16; CODE_BITS_MAX + 1],
    /// Symbols ordered by (code length, symbol): the order of their codes.
    symbols: [u16; 257],
}

const CANONICAL: Canonical = canonical();

const fn canonical() -> Canonical {
    let mut count = [0u32; CODE_BITS_MAX + 1];
    let mut symbol = 0;
    while symbol < CODE_BITS.len() {
        count[CODE_BITS[symbol] as usize] += 1;
        symbol += 1;
    }
    let mut first_code = [0u32; CODE_BITS_MAX + 1];
    let mut first_index = [0u16; CODE_BITS_MAX + 1];
    let mut symbols = [0u16; 257];
    let mut code = 0u32;
    let mut index = 0usize;
    let mut bits = 1;
    while bits <= CODE_BITS_MAX {
        code <<= 1;
        first_code[bits] = code;
        first_index[bits] = index as u16;
        let mut symbol = 0;
        while symbol < CODE_BITS.len() {
            if CODE_BITS[symbol] as usize == bits {
                symbols[index] = symbol as u16;
                index += 1;
            }
            symbol += 1;
        }
        code += count[bits];
        bits += 1;
    }
    // A complete prefix code ends exactly at 2^30: every bit string is a
    // code or a prefix of one.
    assert!(
        code == 1 << CODE_BITS_MAX,
        "HPACK Huffman table is not complete"
    );
    Canonical {
        count,
        first_code,
        first_index,
        symbols,
    }
}

/// Why a Huffman-coded string could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HuffmanError {
    /// The string contains the EOS symbol, or its padding is longer than
    /// seven bits or not a prefix of EOS (RFC 7541 §5.2: a decoding error).
    Invalid,
    /// The decoded string would exceed the caller's limit; decoding stopped.
    TooLong,
}

/// Appends the decoding of `input` to `out`, writing at most `limit` bytes.
pub(super) fn decode(input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), HuffmanError> {
    let table = &CANONICAL;
    let mut written = 0;
    let mut code = 0u32;
    let mut bits = 0usize;
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            bits += 1;
            let offset = code.wrapping_sub(table.first_code[bits]);
            if offset < table.count[bits] {
                let symbol = table.symbols[usize::from(table.first_index[bits]) + offset as usize];
                if symbol == EOS {
                    return Err(HuffmanError::Invalid);
                }
                if written == limit {
                    return Err(HuffmanError::TooLong);
                }
                out.push(symbol as u8);
                written += 1;
                code = 0;
                bits = 0;
            }
            // Unreachable for a complete code (EOS, all ones, ends every
            // run of ones by 30 bits), but keeps the index in range.
            if bits == CODE_BITS_MAX {
                return Err(HuffmanError::Invalid);
            }
        }
    }
    // Padding: fewer than eight bits, all ones (the start of EOS).
    if bits > 7 || code != (1u32 << bits) - 1 {
        return Err(HuffmanError::Invalid);
    }
    Ok(())
}

/// The code of `symbol`, right-aligned, and its length (tests encode with
/// it).
#[cfg(test)]
pub(super) fn code(symbol: u16) -> (u32, u8) {
    let table = &CANONICAL;
    let bits = CODE_BITS[usize::from(symbol)];
    let start = usize::from(table.first_index[usize::from(bits)]);
    let end = start + table.count[usize::from(bits)] as usize;
    let rank = table.symbols[start..end]
        .iter()
        .position(|&s| s == symbol)
        .expect("every symbol has a code");
    (table.first_code[usize::from(bits)] + rank as u32, bits)
}

/// Huffman-encodes `input` (tests build client header blocks with it).
#[cfg(test)]
pub(super) fn encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pending = 0u64;
    let mut pending_bits = 0;
    for &byte in input {
        let (code, bits) = code(u16::from(byte));
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

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

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
            assert_eq!(code(symbol), (want_code, want_bits), "symbol {symbol}");
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
        ("https://www.example.com", "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3"),
        ("gzip", "9bd9 ab"),
        (
            "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
            "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
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
}
