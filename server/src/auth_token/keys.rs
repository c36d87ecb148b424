//! Key files for `--auth-token jwt`: read in the PEM forms etcd 3.4 reads
//! (golang-jwt's `Parse{RSA,EC}{Private,Public}KeyFromPEM`), checked
//! against the method and against each other, and handed to jsonwebtoken
//! in the forms `ring_provider` signs and verifies with.
//!
//! - RSA private keys: PKCS#1 (`RSA PRIVATE KEY`) or PKCS#8 (`PRIVATE KEY`).
//! - EC private keys: SEC1 (`EC PRIVATE KEY`) or PKCS#8.
//! - Public keys: SPKI (`PUBLIC KEY`), or a certificate's (`CERTIFICATE`),
//!   as etcd's own e2e tests pass `pub-key=server.crt`.
//! - HS*: the `priv-key` file's bytes, all of them, are the secret.
//!
//! The first key-like PEM block of a file counts. The DER walking here is
//! the little the forms above need; anything it does not understand is an
//! error, never a panic.

use std::fs::File;
use std::io::Read;

use jsonwebtoken::{DecodingKey, EncodingKey};
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, EcdsaSigningAlgorithm, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING,
    ECDSA_P384_SHA384_FIXED_SIGNING,
};
use rustls_pki_types::pem::{PemObject, SectionKind};

use super::{SignMethod, TokenConfigError, OPTION_PRIVATE_KEY, OPTION_PUBLIC_KEY};

/// Key files longer than this are refused; a PEM key or certificate is a
/// few kilobytes, and the file is read whole.
pub(super) const KEY_FILE_BYTES_MAX: u64 = 1 << 20;

/// The public key sizes ring verifies RSA signatures with; ring signs only
/// up to 4096 bits, which it checks when the private key loads.
const RSA_MODULUS_BITS_MIN: usize = 2048;
const RSA_MODULUS_BITS_MAX: usize = 8192;

/// The keys of one method: a signing key unless only a public key was
/// given, and always a verifying one.
pub(super) struct Keys {
    pub(super) signing: Option<EncodingKey>,
    pub(super) verifying: DecodingKey,
}

/// Reads the key file `path` given as `option`.
pub(super) fn read_file(option: &'static str, path: &str) -> Result<Vec<u8>, TokenConfigError> {
    let unreadable =
        |e: std::io::Error| TokenConfigError::InvalidOptions(format!("{option} {path}: {e}"));
    let mut bytes = Vec::new();
    File::open(path)
        .map_err(unreadable)?
        .take(KEY_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > KEY_FILE_BYTES_MAX {
        return Err(TokenConfigError::InvalidOptions(format!(
            "{option} {path}: longer than {KEY_FILE_BYTES_MAX} bytes"
        )));
    }
    Ok(bytes)
}

/// The keys `method` uses, from the `pub-key` and `priv-key` files'
/// contents (etcd's `jwtOptions.Key`).
pub(super) fn load(
    method: SignMethod,
    public_pem: Option<&[u8]>,
    private_pem: Option<&[u8]>,
) -> Result<Keys, TokenConfigError> {
    // etcd tests a key's length, not whether a file was named.
    let public_pem = public_pem.filter(|pem| !pem.is_empty());
    let private_pem = private_pem.filter(|pem| !pem.is_empty());
    match Family::of(method) {
        // etcd ignores `pub-key` here: the secret both signs and verifies.
        Family::Hmac => {
            let secret = private_pem.ok_or(TokenConfigError::MissingKey)?;
            Ok(Keys {
                signing: Some(EncodingKey::from_secret(secret)),
                verifying: DecodingKey::from_secret(secret),
            })
        }
        Family::Rsa => pair(
            public_pem.map(rsa_public).transpose()?,
            private_pem.map(rsa_private).transpose()?,
            EncodingKey::from_rsa_der,
            DecodingKey::from_rsa_der,
        ),
        Family::Ec(curve) => pair(
            public_pem.map(|pem| ec_public(pem, curve)).transpose()?,
            private_pem.map(|pem| ec_private(pem, curve)).transpose()?,
            EncodingKey::from_ec_der,
            DecodingKey::from_ec_der,
        ),
    }
}

/// Keys from a public key and a private one (with the public key derived
/// from it), either of which may be missing but not both.
fn pair(
    public: Option<Vec<u8>>,
    private: Option<PrivateKey>,
    encoding: fn(&[u8]) -> EncodingKey,
    decoding: fn(&[u8]) -> DecodingKey,
) -> Result<Keys, TokenConfigError> {
    match (public, private) {
        (None, None) => Err(TokenConfigError::MissingKey),
        (Some(public), None) => Ok(Keys {
            signing: None,
            verifying: decoding(&public),
        }),
        (public, Some(private)) => {
            if public.is_some_and(|public| public != private.public) {
                return Err(TokenConfigError::KeyMismatch);
            }
            Ok(Keys {
                signing: Some(encoding(&private.der)),
                verifying: decoding(&private.public),
            })
        }
    }
}

/// A private key as jsonwebtoken holds it, and its public key as a
/// verifying key holds it.
struct PrivateKey {
    der: Vec<u8>,
    public: Vec<u8>,
}

/// Which keys a method takes.
#[derive(Clone, Copy)]
enum Family {
    Rsa,
    Ec(Curve),
    Hmac,
}

impl Family {
    fn of(method: SignMethod) -> Self {
        match method {
            SignMethod::RS256
            | SignMethod::RS384
            | SignMethod::RS512
            | SignMethod::PS256
            | SignMethod::PS384
            | SignMethod::PS512 => Self::Rsa,
            SignMethod::ES256 => Self::Ec(Curve::P256),
            SignMethod::ES384 => Self::Ec(Curve::P384),
            SignMethod::HS256 | SignMethod::HS384 | SignMethod::HS512 => Self::Hmac,
        }
    }
}

/// The curve an ES* method signs on; golang-jwt refuses any other.
#[derive(Clone, Copy)]
enum Curve {
    P256,
    P384,
}

impl Curve {
    fn name(self) -> &'static str {
        match self {
            Self::P256 => "P-256",
            Self::P384 => "P-384",
        }
    }

    /// The named curve's OID, as a whole DER element.
    fn oid(self) -> &'static [u8] {
        match self {
            Self::P256 => OID_P256,
            Self::P384 => OID_P384,
        }
    }

    fn signing(self) -> &'static EcdsaSigningAlgorithm {
        match self {
            Self::P256 => &ECDSA_P256_SHA256_FIXED_SIGNING,
            Self::P384 => &ECDSA_P384_SHA384_FIXED_SIGNING,
        }
    }

    /// Bytes of an uncompressed point: 0x04, then x and y.
    fn point_bytes(self) -> usize {
        match self {
            Self::P256 => 1 + 2 * 32,
            Self::P384 => 1 + 2 * 48,
        }
    }
}

/// An RSA private key: PKCS#1 DER, and its public key as PKCS#1
/// `RSAPublicKey` DER.
fn rsa_private(pem: &[u8]) -> Result<PrivateKey, TokenConfigError> {
    let invalid = |reason: String| invalid_key(OPTION_PRIVATE_KEY, reason);
    let der = match first_pem(pem).map_err(invalid)? {
        (SectionKind::RsaPrivateKey, der) => der,
        (SectionKind::PrivateKey, der) => {
            let (algorithm, key) = pkcs8_parts(&der)
                .ok_or_else(|| invalid("malformed PKCS#8 private key".to_owned()))?;
            if !algorithm.starts_with(OID_RSA_ENCRYPTION) {
                return Err(invalid("not an RSA key".to_owned()));
            }
            key.to_vec()
        }
        (kind, _) => {
            return Err(invalid(format!(
                "expected an RSA private key, found {kind:?}"
            )))
        }
    };
    let pair = RsaKeyPair::from_der(&der)
        .map_err(|e| invalid(format!("not a usable RSA private key: {e}")))?;
    let public = pair.public_key().as_ref().to_vec();
    Ok(PrivateKey { der, public })
}

/// An RSA public key as PKCS#1 `RSAPublicKey` DER.
fn rsa_public(pem: &[u8]) -> Result<Vec<u8>, TokenConfigError> {
    let invalid = |reason: String| invalid_key(OPTION_PUBLIC_KEY, reason);
    let (algorithm, key) = public_key(pem).map_err(invalid)?;
    if !algorithm.starts_with(OID_RSA_ENCRYPTION) {
        return Err(invalid("not an RSA key".to_owned()));
    }
    let bits =
        rsa_modulus_bits(&key).ok_or_else(|| invalid("malformed RSA public key".to_owned()))?;
    if !(RSA_MODULUS_BITS_MIN..=RSA_MODULUS_BITS_MAX).contains(&bits) {
        return Err(invalid(format!(
            "{bits}-bit RSA key; {RSA_MODULUS_BITS_MIN} to {RSA_MODULUS_BITS_MAX} bits are supported"
        )));
    }
    Ok(key)
}

/// An EC private key on `curve`: PKCS#8 DER (what ring loads), and its
/// public key as an uncompressed point.
fn ec_private(pem: &[u8], curve: Curve) -> Result<PrivateKey, TokenConfigError> {
    let invalid = |reason: String| invalid_key(OPTION_PRIVATE_KEY, reason);
    let der = match first_pem(pem).map_err(invalid)? {
        // ring reads PKCS#8 only; a SEC1 key is the inner part of one. Its
        // own curve, if it names one, must then be `curve` (ring checks).
        (SectionKind::EcPrivateKey, sec1) => sec1_to_pkcs8(curve, &sec1),
        (SectionKind::PrivateKey, der) => der,
        (kind, _) => {
            return Err(invalid(format!(
                "expected an EC private key, found {kind:?}"
            )))
        }
    };
    let pair = EcdsaKeyPair::from_pkcs8(curve.signing(), &der, &SystemRandom::new())
        .map_err(|e| invalid(format!("not a usable {} private key: {e}", curve.name())))?;
    let public = pair.public_key().as_ref().to_vec();
    Ok(PrivateKey { der, public })
}

/// An EC public key on `curve` as an uncompressed point.
fn ec_public(pem: &[u8], curve: Curve) -> Result<Vec<u8>, TokenConfigError> {
    let invalid = |reason: String| invalid_key(OPTION_PUBLIC_KEY, reason);
    let (algorithm, point) = public_key(pem).map_err(invalid)?;
    let expected = [OID_EC_PUBLIC_KEY, curve.oid()].concat();
    if algorithm != expected {
        return Err(invalid(format!("not a {} EC key", curve.name())));
    }
    if point.len() != curve.point_bytes() || point.first() != Some(&0x04) {
        return Err(invalid("not an uncompressed EC point".to_owned()));
    }
    Ok(point)
}

fn invalid_key(option: &'static str, reason: String) -> TokenConfigError {
    TokenConfigError::InvalidKey { option, reason }
}

/// The first PEM block ring or rustls knows the label of (keys,
/// certificates); others are skipped.
fn first_pem(pem: &[u8]) -> Result<(SectionKind, Vec<u8>), String> {
    <(SectionKind, Vec<u8>)>::from_pem_slice(pem).map_err(|e| format!("no PEM key found: {e}"))
}

/// A `PUBLIC KEY` or `CERTIFICATE` block's key: the `AlgorithmIdentifier`'s
/// contents and the key's bits.
fn public_key(pem: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    let (kind, der) = first_pem(pem)?;
    let spki = match kind {
        SectionKind::PublicKey => der.as_slice(),
        SectionKind::Certificate => {
            certificate_spki(&der).ok_or_else(|| "malformed certificate".to_owned())?
        }
        kind => {
            return Err(format!(
                "expected a public key or a certificate, found {kind:?}"
            ))
        }
    };
    let (algorithm, key) = spki_parts(spki).ok_or_else(|| "malformed public key".to_owned())?;
    Ok((algorithm.to_vec(), key.to_vec()))
}

// DER, just enough of it.

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
/// `[0]`, constructed: a certificate's explicit version.
const CONTEXT_0: u8 = 0xa0;

/// rsaEncryption (1.2.840.113549.1.1.1), as a DER element.
const OID_RSA_ENCRYPTION: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
];
/// id-ecPublicKey (1.2.840.10045.2.1).
const OID_EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// prime256v1 (1.2.840.10045.3.1.7).
const OID_P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// secp384r1 (1.3.132.0.34).
const OID_P384: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

/// One DER element: its tag, its contents, and the whole element.
struct Element<'a> {
    tag: u8,
    contents: &'a [u8],
    whole: &'a [u8],
}

/// The element `input` starts with, and what follows it. `None` if it is
/// cut short or its length is not definite in at most four bytes.
fn element(input: &[u8]) -> Option<(Element<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        let length = bytes
            .iter()
            .fold(0usize, |length, &byte| (length << 8) | usize::from(byte));
        (length, rest)
    };
    if rest.len() < length {
        return None;
    }
    let (contents, rest) = rest.split_at(length);
    let header = input.len() - rest.len() - length;
    let whole = &input[..header + length];
    Some((
        Element {
            tag,
            contents,
            whole,
        },
        rest,
    ))
}

/// The contents of the element `input` starts with if its tag is `tag`,
/// and what follows it.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (element, rest) = element(input)?;
    (element.tag == tag).then_some((element.contents, rest))
}

/// A `PrivateKeyInfo`'s `AlgorithmIdentifier` contents and private key.
fn pkcs8_parts(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (info, _) = expect(der, SEQUENCE)?;
    let (_version, rest) = expect(info, INTEGER)?;
    let (algorithm, rest) = expect(rest, SEQUENCE)?;
    let (key, _) = expect(rest, OCTET_STRING)?;
    Some((algorithm, key))
}

/// A `SubjectPublicKeyInfo`'s `AlgorithmIdentifier` contents and key bits.
fn spki_parts(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (info, _) = expect(der, SEQUENCE)?;
    let (algorithm, rest) = expect(info, SEQUENCE)?;
    let (bits, _) = expect(rest, BIT_STRING)?;
    // The first byte counts unused bits; a key has none.
    match bits.split_first()? {
        (0, key) => Some((algorithm, key)),
        _ => None,
    }
}

/// A certificate's `SubjectPublicKeyInfo`, as a whole element: the seventh
/// field of `tbsCertificate` when the version is given, else the sixth.
fn certificate_spki(der: &[u8]) -> Option<&[u8]> {
    let (certificate, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&CONTEXT_0) {
        rest = element(rest)?.1;
    }
    // serialNumber, signature, issuer, validity, subject.
    for _ in 0..5 {
        rest = element(rest)?.1;
    }
    let (spki, _) = element(rest)?;
    (spki.tag == SEQUENCE).then_some(spki.whole)
}

/// The modulus length in bits of a PKCS#1 `RSAPublicKey`.
fn rsa_modulus_bits(der: &[u8]) -> Option<usize> {
    let (key, _) = expect(der, SEQUENCE)?;
    let (modulus, rest) = expect(key, INTEGER)?;
    expect(rest, INTEGER)?;
    let significant = match modulus.iter().position(|&byte| byte != 0) {
        Some(first) => &modulus[first..],
        None => return Some(0),
    };
    let leading = significant
        .first()
        .map_or(0, |byte| byte.leading_zeros() as usize);
    Some(significant.len() * 8 - leading)
}

/// A SEC1 `ECPrivateKey` wrapped as the PKCS#8 `PrivateKeyInfo` for
/// `curve`.
fn sec1_to_pkcs8(curve: Curve, sec1: &[u8]) -> Vec<u8> {
    let algorithm = [OID_EC_PUBLIC_KEY, curve.oid()].concat();
    let info = [
        &[INTEGER, 1, 0][..],
        &encode(SEQUENCE, &algorithm),
        &encode(OCTET_STRING, sec1),
    ]
    .concat();
    encode(SEQUENCE, &info)
}

/// A DER element with `tag` and `contents`.
fn encode(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match u8::try_from(contents.len()) {
        Ok(short) if short < 0x80 => out.push(short),
        _ => {
            let length = contents.len().to_be_bytes();
            let skip = length.iter().take_while(|&&byte| byte == 0).count();
            let significant = &length[skip..];
            // At most size_of::<usize>() bytes, so this fits the 7 bits.
            out.push(0x80 | significant.len() as u8);
            out.extend_from_slice(significant);
        }
    }
    out.extend_from_slice(contents);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_lengths_round_trip() {
        for len in [0, 1, 0x7f, 0x80, 0xff, 0x100, 0x1_0000] {
            let contents = vec![7u8; len];
            let der = encode(OCTET_STRING, &contents);
            let (element, rest) = element(&der).expect("parses");
            assert_eq!(
                (element.tag, element.contents, element.whole, rest.len()),
                (OCTET_STRING, &contents[..], &der[..], 0),
                "length {len}"
            );
        }
    }

    #[test]
    fn der_cut_short_is_none() {
        let der = encode(SEQUENCE, &[1, 2, 3]);
        for end in 0..der.len() {
            assert!(element(&der[..end]).is_none(), "prefix of {end} bytes");
        }
        // Indefinite length, and a five-byte length.
        assert!(element(&[SEQUENCE, 0x80, 0, 0]).is_none());
        assert!(element(&[SEQUENCE, 0x85, 0, 0, 0, 0, 1, 0]).is_none());
    }
}
