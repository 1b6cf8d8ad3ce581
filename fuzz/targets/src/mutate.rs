//! A small mutator for the stable smoke run: no coverage feedback, so it leans on what breaks
//! readers of files: numbers at their limits (big-endian u64/u32 maxima where a binary format
//! keeps counts, `1e308`, `NaN`, `-1` where a text one does), truncation, repetition and
//! splicing of valid files. The coverage-guided search is `cargo +nightly fuzz` (`fuzz/run`).

/// The longest input made (as libFuzzer's default `-max_len` of a few kB, times 16).
pub const MAX_LEN: usize = 64 << 10;

/// xorshift64*: deterministic, so a seed reproduces a run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced: xorshift would stay at 0).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// Text that matters to the JSON, CSV and TOML readers.
const TOKENS: &[&[u8]] = &[
    b"1e308",
    b"-1e308",
    b"1e-308",
    b"NaN",
    b"inf",
    b"-inf",
    b"-1",
    b"0",
    b"18446744073709551615",
    b"4294967296",
    b"1e15",
    b"1e16",
    b"\"1e308\"",
    b"\"NaN\"",
    b"null",
    b"[]",
    b"{}",
    b"[",
    b"{",
    b"\"",
    b",",
    b":",
    b"\n",
    b"=",
    b"[[link]]\n",
    b"[[test]]\n",
    b"[[profile]]\n",
    b"trials = 4000000000\n",
    b"\xff\xfe",
];

/// Binary values that matter to the packet log and the wire formats.
const WORDS: &[u64] = &[
    0,
    1,
    u64::MAX,
    u64::MAX - 1,
    1 << 63,
    1 << 32,
    u32::MAX as u64,
    10_000,
    10_001,
    1_000_000,
];

/// Replaces one number of a text document with a token that spells one (`1e308`, `NaN`,
/// `-1`, ...).
fn number(rng: &mut Rng, buf: &mut Vec<u8>) {
    let starts: Vec<usize> = (0..buf.len())
        .filter(|&i| buf[i].is_ascii_digit() && (i == 0 || !buf[i - 1].is_ascii_alphanumeric()))
        .collect();
    if starts.is_empty() {
        return;
    }
    let at = starts[rng.below(starts.len())];
    let end = (at..buf.len())
        .find(|&i| !buf[i].is_ascii_digit() && !b".eE+-".contains(&buf[i]))
        .unwrap_or(buf.len());
    let t = TOKENS[rng.below(12)];
    buf.splice(at..end, t.iter().copied());
}

/// One random change of `buf`; `pool` gives other inputs to splice from.
fn once(rng: &mut Rng, buf: &mut Vec<u8>, pool: &[Vec<u8>]) {
    let len = buf.len();
    match rng.below(10) {
        0 if len > 0 => {
            let i = rng.below(len);
            buf[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            buf[i] = [0, 1, 0x7f, 0x80, 0xff, b'9', b'-'][rng.below(7)];
        }
        2 if len >= 8 => {
            // A big-endian word at an 8-byte boundary of the packet log's records, or
            // anywhere.
            let w = WORDS[rng.below(WORDS.len())].to_be_bytes();
            let at = if rng.below(2) == 0 {
                rng.below(len / 8) * 8
            } else {
                rng.below(len - 7)
            };
            let at = at.min(len - 8);
            buf[at..at + 8].copy_from_slice(&w);
        }
        3 => {
            let t = TOKENS[rng.below(TOKENS.len())];
            let at = rng.below(len + 1);
            buf.splice(at..at, t.iter().copied());
        }
        4 if len > 0 => {
            // Replace a number-looking run of text with a token.
            let at = rng.below(len);
            let end = (at..len)
                .find(|&i| !buf[i].is_ascii_digit() && !b".eE+-".contains(&buf[i]))
                .unwrap_or(len);
            let t = TOKENS[rng.below(12)];
            buf.splice(at..end, t.iter().copied());
        }
        5 if len > 0 => {
            buf.truncate(rng.below(len));
        }
        6 if len > 0 => {
            let a = rng.below(len);
            let b = (a + 1 + rng.below(64)).min(len);
            buf.drain(a..b);
        }
        7 if len > 0 => {
            // Repeat a piece (more records, more rows, more tables).
            let a = rng.below(len);
            let b = (a + 1 + rng.below(256)).min(len);
            let piece: Vec<u8> = buf[a..b].to_vec();
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(buf.len() + 1);
                buf.splice(at..at, piece.iter().copied());
            }
        }
        8 if !pool.is_empty() => {
            let other = &pool[rng.below(pool.len())];
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            buf.truncate(cut);
            buf.extend_from_slice(&other[from..]);
        }
        _ => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            buf.splice(at..at, bytes);
        }
    }
}

/// A mutant of `input`: one to eight changes, at most [`MAX_LEN`] bytes.
pub fn mutate(rng: &mut Rng, input: &[u8], pool: &[Vec<u8>]) -> Vec<u8> {
    let mut buf = input.to_vec();
    // Text formats break on almost any byte change; half the time, change only a number, so
    // the document still parses and its values reach the checks and the plots.
    if input.first().is_some_and(u8::is_ascii_graphic) && rng.below(2) == 0 {
        number(rng, &mut buf);
        return buf;
    }
    for _ in 0..1 + rng.below(8) {
        once(rng, &mut buf, pool);
        buf.truncate(MAX_LEN);
    }
    buf
}

/// The files of a corpus directory (none if it does not exist), in name order.
pub fn seeds(dir: &std::path::Path) -> Vec<Vec<u8>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .map(|mut b| {
            b.truncate(MAX_LEN);
            b
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_stay_within_the_length_and_reproduce() {
        let pool = vec![b"{\"a\": 1}".to_vec(), vec![0u8; 100]];
        let (mut a, mut b) = (Rng::new(9), Rng::new(9));
        for i in 0..2_000 {
            let x = mutate(&mut a, &pool[i % 2], &pool);
            assert!(x.len() <= MAX_LEN);
            assert_eq!(x, mutate(&mut b, &pool[i % 2], &pool));
        }
    }
}
