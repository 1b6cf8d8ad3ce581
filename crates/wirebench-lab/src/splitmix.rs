//! splitmix64 (Steele, Lea and Flood, 2014): the lab's seeded random numbers. One stream per
//! purpose (loss per kind of traffic, jitter, netem's decisions, PIE's drops), each a
//! `u64` of state, so that a seed fixes a run and nothing is shared between threads.

/// The stream's increment (the golden ratio's 64-bit fraction).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's output function: a well-spread 64-bit number from `z` (also a seed mixer and
/// a hash step).
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The next number of the stream whose state is `state`.
pub(crate) fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(GAMMA);
    mix(*state)
}

/// A uniform number in [0, 1) from the stream whose state is `state`.
pub(crate) fn uniform(state: &mut u64) -> f64 {
    (next(state) >> 11) as f64 / (1u64 << 53) as f64
}
