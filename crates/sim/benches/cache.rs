//! Throughput of the cache model, in line accesses per second of wall time.
//!
//! Run with `cargo bench -p sim --bench cache`. The target is at least
//! 100 M line accesses per second per core for the LLC-only configuration,
//! because a simulated 2 MiB copy is 65,536 line accesses and an experiment
//! copies thousands of huge pages.

// Benchmarks measure wall time by design; the model itself never does
// (clippy.toml forbids the wall clock in the crate's library code).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::hint::black_box;
use std::time::Instant;

use mm::VcpuId;
use sim::cache::{AccessKind, CacheConfig, CacheModel, CacheStats};

const HUGE: u64 = 2 << 20;

/// Runs `f` (which returns the line accesses it made) until at least
/// `min_lines` lines have been accessed, and prints the rate.
fn bench(name: &str, min_lines: u64, mut f: impl FnMut() -> u64) {
    // Warm up: fills the caches so that the steady state is measured.
    let mut warm = 0;
    while warm < min_lines / 4 {
        warm += f();
    }
    let start = Instant::now();
    let mut lines = 0;
    while lines < min_lines {
        lines += f();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{name:<48} {:>8.1} M line accesses/s  ({lines} lines in {secs:.3} s)",
        lines as f64 / secs / 1e6
    );
}

/// COW-like copies of 2 MiB pages through a 45 MiB LLC: 36 CPUs of one
/// socket each copy from a shared source region to its own destinations,
/// so nearly every access misses (the streaming case).
fn copy_stream(cfg: CacheConfig, name: &str) {
    let mut cache = CacheModel::new(cfg).unwrap();
    let mut stats = CacheStats::default();
    let mut i = 0u64;
    bench(name, 100_000_000, || {
        let cpu = VcpuId((i % 36) as u32);
        let src = (i % 64) * HUGE;
        let dst = (1 << 30) + (i % 2048) * HUGE;
        cache.copy_range(cpu, dst, src, HUGE, &mut stats);
        i += 1;
        2 * HUGE / 64
    });
    black_box(&stats);
}

/// Repeated sweeps over a 16 MiB working set that fits in the LLC (every
/// access hits after the warm-up).
fn hit_sweep(cfg: CacheConfig, name: &str) {
    let mut cache = CacheModel::new(cfg).unwrap();
    let mut stats = CacheStats::default();
    bench(name, 100_000_000, || {
        cache.access_range(VcpuId(0), 0, 16 << 20, AccessKind::Write, &mut stats);
        (16 << 20) / 64
    });
    black_box(&stats);
}

/// A 1 MiB, 16-way LLC whose model state (16 K lines) fits in the host's
/// caches: the compute-bound rate of the model, without the host cache
/// misses on the model's own state that a 45 MiB LLC's 4 MiB of state incurs.
fn small_llc() -> CacheConfig {
    CacheConfig {
        llc_size_bytes: 1 << 20,
        llc_ways: 16,
        ..CacheConfig::haswell_e5_2699_v3_llc_only()
    }
}

fn main() {
    copy_stream(
        small_llc(),
        "1 MiB LLC only, 2 MiB copies (state in host cache)",
    );
    copy_stream(
        CacheConfig::haswell_e5_2699_v3_llc_only(),
        "LLC only, 2 MiB copies (miss-dominated)",
    );
    hit_sweep(
        CacheConfig::haswell_e5_2699_v3_llc_only(),
        "LLC only, 16 MiB sweeps (hit-dominated)",
    );
    copy_stream(
        CacheConfig::haswell_e5_2699_v3(),
        "L2 + inclusive LLC, 2 MiB copies",
    );
    hit_sweep(
        CacheConfig::haswell_e5_2699_v3(),
        "L2 + inclusive LLC, 16 MiB sweeps",
    );
}
