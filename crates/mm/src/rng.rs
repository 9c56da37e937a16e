//! SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
//! generators", OOPSLA 2014; constants as in Vigna's public-domain
//! splitmix64.c): the one small seeded generator of the model crates.
//!
//! `sim` expands a run's seed with it into xoshiro256** streams
//! (`sim::rng`), and the tests of `mm` and `sim` drive their seeded operation
//! lists with it. It lives here, in the lowest crate, so that there is one
//! copy. The model's state never depends on it.

/// A SplitMix64 generator; the field is its state.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An integer in `0..n` by plain modulo: slightly biased for huge `n`,
    /// which does not matter to the seeded operation lists that use it.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // splitmix64.c seeded with 0 starts with these values.
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }
}
