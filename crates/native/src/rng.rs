//! A small deterministic PRNG: SplitMix64.
//!
//! SplitMix64 is the generator of Steele, Lea and Flood, "Fast Splittable Pseudorandom
//! Number Generators" (OOPSLA 2014), in the form Sebastiano Vigna published as
//! `splitmix64.c` (public domain, <https://prng.di.unimi.it/splitmix64.c>). It is
//! written out here rather than taken from a crate so that a seed gives the same touch
//! order and the same copy targets on every build, forever: the fault patterns in
//! [`crate::faults`] are meant to be replayed through the model with the same seed.

/// SplitMix64: a 64-bit state advanced by the golden-ratio increment and mixed by two
/// xor-shift-multiply rounds. Every seed, including 0, is valid.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose first output depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..bound` (`bound > 0`), by Lemire's multiply-shift: the bias is at
    /// most `bound / 2^64`, far below anything these measurements could notice.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "SplitMix64::below needs a positive bound");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Shuffles `items` in place with the Fisher–Yates algorithm (Durstenfeld's form).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // The first outputs of Vigna's splitmix64.c seeded with 1234567.
        let mut rng = SplitMix64::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
        assert_eq!(rng.next_u64(), 9817491932198370423);
    }

    #[test]
    fn shuffle_is_a_permutation_and_deterministic() {
        let mut a: Vec<u32> = (0..1000).collect();
        let mut b = a.clone();
        SplitMix64::new(7).shuffle(&mut a);
        SplitMix64::new(7).shuffle(&mut b);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<u32>>());
        assert_ne!(a, sorted, "a shuffle of 1000 items left them in order");
    }
}
