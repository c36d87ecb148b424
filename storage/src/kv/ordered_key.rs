//! A user key as the key index keeps it in order ([`OrderedKey`]).
//!
//! A descent through an ordered set of shared keys compares the new key
//! with a dozen or more others, and each comparison reads the other key's
//! bytes from wherever its allocation lies: a cache miss apiece once the
//! keys outgrow the caches. So each key carries its first [`HEAD_BYTES`]
//! bytes inline, as a big-endian number padded with zeros, and two keys
//! compare by those numbers first; only keys with the same head compare
//! their bytes. Keys that differ early (most generated keys) are ordered
//! without a miss; keys sharing a long prefix cost what they did before,
//! plus one integer comparison.
//!
//! The order is exactly the bytes' order. If two heads differ, they first
//! differ at a position `i` below [`HEAD_BYTES`]. Where both keys are
//! longer than `i`, that is their first differing byte. Where one is not,
//! its head has a padding zero at `i` and the other a byte above it (the
//! heads differ there), so the shorter key is a prefix of the longer one
//! and comes first, as it does by bytes. Equal heads defer to the bytes.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::sync::Arc;

/// Leading bytes of a key held inline.
const HEAD_BYTES: usize = 16;

/// A key with its leading bytes inline (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct OrderedKey {
    head: u128,
    key: Arc<[u8]>,
}

impl OrderedKey {
    pub(crate) fn new(key: Arc<[u8]>) -> Self {
        Self {
            head: head(&key),
            key,
        }
    }
}

/// `key`'s first [`HEAD_BYTES`] bytes, zero-padded, as a big-endian number.
fn head(key: &[u8]) -> u128 {
    let mut bytes = [0; HEAD_BYTES];
    let n = key.len().min(HEAD_BYTES);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}

impl Ord for OrderedKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.head
            .cmp(&other.head)
            .then_with(|| self.key.cmp(&other.key))
    }
}

impl PartialOrd for OrderedKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for OrderedKey {
    fn eq(&self, other: &Self) -> bool {
        self.head == other.head && self.key == other.key
    }
}

impl Eq for OrderedKey {}

/// Lookups by plain bytes (a scan's bounds) compare bytes: the order is
/// the same (see the module docs), as `Borrow` requires.
impl Borrow<[u8]> for OrderedKey {
    fn borrow(&self) -> &[u8] {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{quickcheck, TestResult};

    fn ordered(key: &[u8]) -> OrderedKey {
        OrderedKey::new(Arc::from(key))
    }

    quickcheck! {
        fn keys_order_as_their_bytes(a: Vec<u8>, b: Vec<u8>) -> bool {
            ordered(&a).cmp(&ordered(&b)) == a.cmp(&b)
                && (ordered(&a) == ordered(&b)) == (a == b)
        }

        /// Keys that share most of their head, or all of it, or differ by
        /// trailing zeros: the cases where padding and the fallback meet.
        fn keys_near_the_head_boundary_order_as_their_bytes(
            prefix_len: u8,
            a_tail: Vec<u8>,
            b_tail: Vec<u8>
        ) -> TestResult {
            let prefix: Vec<u8> = (0..prefix_len % 24).collect();
            let (mut a, mut b) = (prefix.clone(), prefix);
            a.extend(&a_tail);
            b.extend(&b_tail);
            TestResult::from_bool(ordered(&a).cmp(&ordered(&b)) == a.cmp(&b))
        }
    }

    #[test]
    fn padding_zeros_do_not_tie_a_key_with_its_zero_extension() {
        for (a, b) in [
            (&b"ab"[..], &b"ab\0"[..]),
            (b"", b"\0"),
            (b"0123456789abcdef", b"0123456789abcdef\0"),
            (b"0123456789abcde", b"0123456789abcde\0\0"),
        ] {
            assert_eq!(ordered(a).cmp(&ordered(b)), Ordering::Less, "{a:?} {b:?}");
            assert_eq!(
                ordered(b).cmp(&ordered(a)),
                Ordering::Greater,
                "{a:?} {b:?}"
            );
        }
    }
}
