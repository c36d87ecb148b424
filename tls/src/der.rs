//! A few fields of an X.509 certificate, read straight from its DER: the
//! subject's common name (the user of `--client-cert-auth`, the peer of
//! `--peer-cert-allowed-cn`), the serial number and the validity period
//! (for a trust anchor presented as a certificate, see `anchor.rs`).
//!
//! Design: one bounded walk over the `tbsCertificate`, by tag and length;
//! any malformed input reads as `None`, never a panic. Verifying a
//! certificate stays webpki's job: nothing here checks a signature.

/// The last common name in `cert`'s subject (the one Go's `x509` reports),
/// or `None` when it has none or the DER does not parse.
///
/// A certificate is `SEQUENCE { tbsCertificate SEQUENCE { [0] version
/// OPTIONAL, serial, signature, issuer, validity, subject, … } … }`; the
/// subject is a `SEQUENCE` of `SET`s of `SEQUENCE { OID, value }`, and a
/// common name is OID 2.5.4.3.
pub fn subject_common_name(cert: &[u8]) -> Option<String> {
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const COMMON_NAME: [u8; 3] = [0x55, 0x04, 0x03];
    let (mut names, _) = der_element(tbs_fields(cert)?.subject, SEQUENCE)?;
    let mut common_name = None;
    while !names.is_empty() {
        let (mut set, after) = der_element(names, SET)?;
        names = after;
        while !set.is_empty() {
            let (attribute, after) = der_element(set, SEQUENCE)?;
            set = after;
            let (oid, value) = der_element(attribute, OID)?;
            if oid == COMMON_NAME {
                let (tag, text, _) = der_any(value)?;
                common_name = Some(der_string(tag, text)?);
            }
        }
    }
    common_name
}

/// The serial number's DER contents (the big-endian integer, as
/// revocation lists name certificates), or `None` when the DER does not
/// parse.
pub(crate) fn serial(cert: &[u8]) -> Option<&[u8]> {
    const INTEGER: u8 = 0x02;
    der_element(tbs_fields(cert)?.serial, INTEGER).map(|(serial, _)| serial)
}

/// The validity period, `notBefore` and `notAfter` in seconds since the
/// Unix epoch, or `None` when the DER does not parse.
pub(crate) fn validity(cert: &[u8]) -> Option<(u64, u64)> {
    let (period, _) = der_element(tbs_fields(cert)?.validity, SEQUENCE)?;
    let (tag, not_before, rest) = der_any(period)?;
    let not_before = der_time(tag, not_before)?;
    let (tag, not_after, _) = der_any(rest)?;
    Some((not_before, der_time(tag, not_after)?))
}

const SEQUENCE: u8 = 0x30;

/// The fields of a `tbsCertificate` this module reads, each one whole
/// DER element (tag and length included).
struct TbsFields<'a> {
    serial: &'a [u8],
    validity: &'a [u8],
    subject: &'a [u8],
}

/// A certificate is `SEQUENCE { tbsCertificate SEQUENCE { [0] version
/// OPTIONAL, serial, signature, issuer, validity, subject, … } … }`.
fn tbs_fields(cert: &[u8]) -> Option<TbsFields<'_>> {
    const VERSION: u8 = 0xa0;
    let (certificate, _) = der_element(cert, SEQUENCE)?;
    let (mut rest, _) = der_element(certificate, SEQUENCE)?;
    if rest.first() == Some(&VERSION) {
        rest = der_any(rest)?.2;
    }
    let mut fields = [&rest[..0]; 5];
    for field in &mut fields {
        let after = der_any(rest)?.2;
        *field = &rest[..rest.len() - after.len()];
        rest = after;
    }
    let [serial, _signature, _issuer, validity, subject] = fields;
    Some(TbsFields {
        serial,
        validity,
        subject,
    })
}

/// A `UTCTime` (`YYMMDDHHMMSSZ`, years 1950–2049) or `GeneralizedTime`
/// (`YYYYMMDDHHMMSSZ`) in seconds since the Unix epoch; the forms RFC 5280
/// allows in certificates, nothing else.
fn der_time(tag: u8, text: &[u8]) -> Option<u64> {
    const UTC_TIME: u8 = 0x17;
    const GENERALIZED_TIME: u8 = 0x18;
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&text[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let [month, day, hour, minute, second] = [0, 2, 4, 6, 8].map(|at| digits(&rest[at..at + 2]));
    let (month, day) = (month?, day?);
    let (hour, minute, second) = (hour?, minute?, second?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    u64::try_from(days * 86_400 + i64::from(hour * 3600 + minute * 60 + second)).ok()
}

/// Decimal digits as a number.
fn digits(text: &[u8]) -> Option<u32> {
    text.iter().try_fold(0u32, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: u32, month: u32, day: u32) -> i64 {
    let year = i64::from(year) - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// One DER element of type `tag`: its contents and what follows it.
fn der_element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (found, contents, rest) = der_any(input)?;
    (found == tag).then_some((contents, rest))
}

/// One DER element: its tag, its contents, and what follows it. Low tag
/// numbers and lengths of up to four bytes only: all a certificate's
/// subject needs.
fn der_any(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 {
            return None;
        }
        let (bytes, after) = rest.split_at_checked(count)?;
        rest = after;
        bytes
            .iter()
            .fold(0usize, |len, byte| (len << 8) | usize::from(*byte))
    };
    let (contents, rest) = rest.split_at_checked(len)?;
    Some((tag, contents, rest))
}

/// The text of a DER string of type `tag`.
fn der_string(tag: u8, bytes: &[u8]) -> Option<String> {
    const UTF8: u8 = 0x0c;
    const PRINTABLE: u8 = 0x13;
    const TELETEX: u8 = 0x14;
    const IA5: u8 = 0x16;
    const BMP: u8 = 0x1e;
    match tag {
        UTF8 | PRINTABLE | IA5 => String::from_utf8(bytes.to_vec()).ok(),
        // Latin-1 in practice.
        TELETEX => Some(bytes.iter().map(|b| char::from(*b)).collect()),
        BMP => {
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}
