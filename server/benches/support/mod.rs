//! What the benches share (a folder, so Cargo does not take it for a bench of its own).
#![allow(dead_code)] // each bench uses part of it

/// Deterministic pseudo-random numbers (splitmix64), so every run loads the same data.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A number in `[0, 1)` from [`mix`].
pub fn unit(x: u64) -> f64 {
    (mix(x) >> 11) as f64 / (1u64 << 53) as f64
}
