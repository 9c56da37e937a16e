//! Unpredictable bytes for temporary names, from the kernel's `getrandom(2)`.
//!
//! A seeded generator would make names predictable, which is exactly what a
//! temporary name must not be: a local user who can guess it can create it
//! first (a denial of service) or, where a program follows symlinks, redirect
//! the write.

/// 64 unpredictable bits. Falls back to `/dev/urandom`, then to a mix of the
/// time, the pid and a counter (still unique, and the callers open with
/// `O_EXCL`, so a guessed name costs a retry, never a wrong file).
pub(crate) fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == buf.len() as isize {
        return u64::from_ne_bytes(buf);
    }
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        if f.read_exact(&mut buf).is_ok() {
            return u64::from_ne_bytes(buf);
        }
    }
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut x = t ^ (u64::from(std::process::id()) << 32) ^ c.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // SplitMix64's finalizer spreads the bits.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_differ() {
        let a = super::random_u64();
        let b = super::random_u64();
        assert_ne!(a, b, "two 64-bit draws collided");
    }
}
