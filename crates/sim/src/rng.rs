//! The seeded random streams of a simulation.
//!
//! One `u64` seed per run. Every stream (one per task, one per workload
//! generator) is derived from it with SplitMix64 and then runs xoshiro256**
//! (Blackman and Vigna, "Scrambled linear pseudorandom number generators",
//! ACM TOMS 2021; reference code at prng.di.unimi.it). Neither depends on the
//! host, the thread schedule or the order of hash tables.

pub use mm::rng::SplitMix64;

/// A xoshiro256** stream.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// The stream number `stream` of the run seeded with `seed`.
    pub fn stream(seed: u64, stream: u64) -> Rng {
        let mut sm = SplitMix64(seed ^ stream.wrapping_mul(0xd134_2543_de82_ef95));
        let s = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        Rng { s }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform integer in `0..n` (Lemire's multiply-shift; the tiny bias
    /// for huge `n` does not matter to the workloads).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `pct` percent.
    pub fn percent(&mut self, pct: u32) -> bool {
        self.below(100) < pct as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| Rng::stream(7, 1).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = Rng::stream(7, 1);
        let mut y = Rng::stream(7, 2);
        assert_ne!(x.next_u64(), y.next_u64());
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::stream(1, 0);
        for n in [1, 2, 3, 10, 1000] {
            for _ in 0..1000 {
                assert!(r.below(n) < n);
            }
        }
    }
}
