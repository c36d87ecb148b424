//! A mutation fuzzer on stable Rust, bounded by count and time, for the
//! code that reads what peers, clients, files and disks hand oxetcd.
//!
//! Design. A target is a function of a byte slice that must not panic
//! (errors are fine: refusing bad input is its job). Each crate keeps its
//! targets beside the code they test, as tests, and builds its seeds from
//! valid encodings there (so the corpus is committed as code and follows
//! format changes). [`fuzz`] feeds the target the seeds, then inputs made
//! from them by one to four byte-level mutations — bit flips, interesting
//! bytes and length words, insertions, deletions, truncation, repeats, and
//! splices of two seeds — and now and then plain random bytes. The random
//! sequence is fixed, so a run is reproducible; a panic stops the run and
//! fails it with the input in hex. The budget is [`Budget::default`]'s
//! unless `OXETCD_FUZZ_ITERATIONS` or `OXETCD_FUZZ_SECONDS` say otherwise,
//! for longer runs by hand.

use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// How much one target may run.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub iterations: u64,
    pub time: Duration,
}

impl Default for Budget {
    /// What a CI run spends on one target: at most 20,000 inputs or 5 s.
    fn default() -> Self {
        let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        Self {
            iterations: number("OXETCD_FUZZ_ITERATIONS").unwrap_or(20_000),
            time: Duration::from_secs(number("OXETCD_FUZZ_SECONDS").unwrap_or(5)),
        }
    }
}

/// A small fast generator (xorshift64*), seeded per target.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Inputs grow at most this large.
const INPUT_BYTES_MAX: usize = 64 * 1024;

/// Byte values that sit on boundaries.
const INTERESTING_BYTES: [u8; 8] = [0, 1, 0x7f, 0x80, 0xfe, 0xff, b'\n', b'='];

/// Runs `target` on the seeds and on inputs mutated from them, within
/// `Budget::default()`. Answers how many inputs ran.
pub fn fuzz(name: &str, seeds: &[Vec<u8>], target: impl Fn(&[u8])) -> u64 {
    fuzz_within(name, seeds, Budget::default(), target)
}

/// [`fuzz`] within `budget`.
pub fn fuzz_within(name: &str, seeds: &[Vec<u8>], budget: Budget, target: impl Fn(&[u8])) -> u64 {
    let started = Instant::now();
    let seed = name.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = Rng(seed | 1);
    let mut ran = 0;
    let run = |input: &[u8], ran: &mut u64| {
        *ran += 1;
        if catch_unwind(AssertUnwindSafe(|| target(input))).is_err() {
            panic!(
                "fuzz target {name} panicked on input {} ({} bytes)",
                hex(input),
                input.len()
            );
        }
    };
    for seed in seeds {
        run(seed, &mut ran);
    }
    while ran < budget.iterations && started.elapsed() < budget.time {
        let input = if seeds.is_empty() || rng.below(16) == 0 {
            let len = rng.below(256);
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            let mut input = seeds[rng.below(seeds.len())].clone();
            for _ in 0..=rng.below(4) {
                mutate(&mut input, seeds, &mut rng);
            }
            input
        };
        run(&input, &mut ran);
    }
    eprintln!(
        "fuzz target {name}: {ran} inputs in {:?}",
        started.elapsed()
    );
    ran
}

fn mutate(input: &mut Vec<u8>, seeds: &[Vec<u8>], rng: &mut Rng) {
    let len = input.len();
    match rng.below(9) {
        0 if len > 0 => {
            let at = rng.below(len);
            input[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            input[at] = INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())];
        }
        2 if len >= 4 => {
            // A length or count word: small, large, or off by one.
            let at = rng.below(len - 3);
            let word: u32 = match rng.below(5) {
                0 => 0,
                1 => u32::MAX,
                2 => len as u32 + 1,
                3 => 0x7fff_ffff,
                _ => rng.next() as u32 % 4096,
            };
            let bytes = if rng.below(2) == 0 {
                word.to_le_bytes()
            } else {
                word.to_be_bytes()
            };
            input[at..at + 4].copy_from_slice(&bytes);
        }
        3 if len < INPUT_BYTES_MAX => {
            let at = rng.below(len + 1);
            let count = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..count).map(|_| rng.next() as u8).collect();
            input.splice(at..at, bytes);
        }
        4 if len > 0 => {
            let at = rng.below(len);
            let end = (at + 1 + rng.below(16)).min(len);
            input.drain(at..end);
        }
        5 => input.truncate(rng.below(len + 1)),
        6 if len > 0 && len < INPUT_BYTES_MAX / 2 => {
            let at = rng.below(len);
            let end = (at + 1 + rng.below(64)).min(len);
            let copy = input[at..end].to_vec();
            let to = rng.below(len + 1);
            input.splice(to..to, copy);
        }
        7 if !seeds.is_empty() => {
            let other = &seeds[rng.below(seeds.len())];
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            input.truncate(cut);
            input.extend_from_slice(&other[from..]);
        }
        _ => {
            if let Some(byte) = input.last_mut() {
                *byte = byte.wrapping_add(1);
            }
        }
    }
    input.truncate(INPUT_BYTES_MAX);
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_target_is_reported_with_its_input() {
        let caught = catch_unwind(|| {
            fuzz_within(
                "finds-the-magic",
                &[b"ab".to_vec()],
                Budget {
                    iterations: 100_000,
                    time: Duration::from_secs(10),
                },
                |input| assert!(!input.starts_with(b"a\x80"), "magic"),
            )
        });
        let message = caught.expect_err("the mutations reach the magic input");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            text.contains("finds-the-magic panicked on input 6180"),
            "{text}"
        );
    }

    #[test]
    fn runs_stay_within_the_budget() {
        let budget = Budget {
            iterations: 500,
            time: Duration::from_secs(10),
        };
        assert_eq!(fuzz_within("counts", &[vec![1, 2, 3]], budget, |_| {}), 500);
    }
}
