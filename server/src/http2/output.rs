//! What a connection has to write: frame bytes, and large payloads by
//! reference.
//!
//! Design: frame headers, header blocks, control frames and small
//! payloads are appended to one buffer (`tail`); a payload of
//! [`BY_REFERENCE_BYTES`] or more (a watch response of many events, a range
//! chunk) is not copied: the buffer so far is sealed as a chunk and the
//! payload's own `Bytes` follows it. The writer takes it all as slices for
//! one vectored write ([`Output::slices`]) and reports how much went
//! ([`Output::advance`]); bytes always leave in the order they were added.
//! The output also knows when it holds nothing but PING acknowledgements
//! ([`Output::only_pongs`]), which the server may hold back a moment.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};

use super::frame;

/// Payloads this large or larger are written from their own buffer.
const BY_REFERENCE_BYTES: usize = 2048;

/// The tail buffer's starting size.
const TAIL_BYTES: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct Output {
    /// Sealed chunks, oldest first; `tail` follows them.
    sealed: VecDeque<Bytes>,
    sealed_len: usize,
    tail: BytesMut,
    /// Everything added since the output was last empty was a PING
    /// acknowledgement.
    pongs_only: bool,
}

impl Output {
    /// The buffer frames are appended to.
    pub(crate) fn buf(&mut self) -> &mut BytesMut {
        self.pongs_only = false;
        if self.tail.capacity() == 0 {
            self.tail.reserve(TAIL_BYTES);
        }
        &mut self.tail
    }

    /// Appends the acknowledgement of a PING.
    pub(crate) fn pong(&mut self, payload: [u8; 8]) {
        let alone = self.is_empty() || self.pongs_only;
        frame::write_pong(self.buf(), payload);
        self.pongs_only = alone;
    }

    /// The output holds nothing but PING acknowledgements.
    pub(crate) fn only_pongs(&self) -> bool {
        self.pongs_only && !self.is_empty()
    }

    /// Appends a payload: copied when small, else by reference.
    pub(crate) fn payload(&mut self, payload: Bytes) {
        if payload.len() < BY_REFERENCE_BYTES {
            self.buf().extend_from_slice(&payload);
            return;
        }
        self.pongs_only = false;
        if !self.tail.is_empty() {
            let sealed = self.tail.split().freeze();
            self.sealed_len += sealed.len();
            self.sealed.push_back(sealed);
        }
        self.sealed_len += payload.len();
        self.sealed.push_back(payload);
    }

    pub(crate) fn len(&self) -> usize {
        self.sealed_len + self.tail.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `slices` with what is to be written, in order; returns how
    /// many it filled.
    pub(crate) fn slices<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> usize {
        let chunks = self
            .sealed
            .iter()
            .map(|chunk| &chunk[..])
            .chain(std::iter::once(&self.tail[..]))
            .filter(|chunk| !chunk.is_empty());
        let mut n = 0;
        for (slot, chunk) in slices.iter_mut().zip(chunks) {
            *slot = IoSlice::new(chunk);
            n += 1;
        }
        n
    }

    /// `n` bytes from the front were written.
    pub(crate) fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.sealed.front_mut() else {
                break;
            };
            let take = n.min(front.len());
            front.advance(take);
            self.sealed_len -= take;
            n -= take;
            if front.is_empty() {
                self.sealed.pop_front();
            }
        }
        let take = n.min(self.tail.len());
        self.tail.advance(take);
        if self.tail.is_empty() {
            // Start again at the buffer's beginning when nothing else
            // holds it.
            self.tail.clear();
        }
        if self.is_empty() {
            self.pongs_only = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(output: &Output) -> Vec<u8> {
        let mut slices = [IoSlice::new(&[]); 8];
        let n = output.slices(&mut slices);
        slices[..n].iter().flat_map(|s| s.iter().copied()).collect()
    }

    #[test]
    fn bytes_leave_in_order_whether_copied_or_not() {
        let mut output = Output::default();
        output.buf().extend_from_slice(b"head1");
        output.payload(Bytes::from_static(b"small"));
        let big = Bytes::from(vec![7u8; BY_REFERENCE_BYTES]);
        output.payload(big.clone());
        output.buf().extend_from_slice(b"head2");
        output.payload(big.clone());
        let mut expected = b"head1small".to_vec();
        expected.extend_from_slice(&big);
        expected.extend_from_slice(b"head2");
        expected.extend_from_slice(&big);
        assert_eq!(output.len(), expected.len());
        assert_eq!(written(&output), expected);
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(output.slices(&mut slices), 4, "big payloads are not copied");

        // Written a piece at a time, across chunk boundaries.
        let mut at = 0;
        for step in [3, 9, BY_REFERENCE_BYTES, 1, 6, BY_REFERENCE_BYTES] {
            let step = step.min(expected.len() - at);
            output.advance(step);
            at += step;
            assert_eq!(written(&output), &expected[at..]);
            assert_eq!(output.len(), expected.len() - at);
        }
        assert!(output.is_empty());
        output.buf().extend_from_slice(b"again");
        assert_eq!(written(&output), b"again");
    }

    #[test]
    fn pongs_alone_are_told_apart() {
        let mut output = Output::default();
        assert!(!output.only_pongs());
        output.pong([1; 8]);
        output.pong([2; 8]);
        assert!(output.only_pongs());
        output.advance(17);
        assert!(output.only_pongs(), "one pong left");
        output.advance(17);
        assert!(!output.only_pongs(), "empty");
        output.buf().extend_from_slice(b"frame");
        output.pong([3; 8]);
        assert!(!output.only_pongs(), "a pong behind another frame");
        output.advance(output.len());
        output.pong([4; 8]);
        output.payload(Bytes::from(vec![0u8; BY_REFERENCE_BYTES]));
        assert!(!output.only_pongs(), "a pong and a payload");
    }

    #[test]
    fn slices_stop_at_the_room_given() {
        let mut output = Output::default();
        let big = Bytes::from(vec![1u8; BY_REFERENCE_BYTES]);
        for _ in 0..5 {
            output.buf().extend_from_slice(b"h");
            output.payload(big.clone());
        }
        let mut slices = [IoSlice::new(&[]); 3];
        assert_eq!(output.slices(&mut slices), 3);
        assert_eq!(slices[0].len(), 1);
        assert_eq!(slices[1].len(), BY_REFERENCE_BYTES);
    }
}
