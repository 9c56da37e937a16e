//! The fault patterns from the issue tracker, run on the live kernel, with exact
//! counts.
//!
//! Each test takes the [`LiveLock`] (one live-kernel test at a time across threads
//! and test binaries), checks that every THP knob reads back as before the run, and
//! prints "SKIPPED (cannot run here): <reason>" when the host cannot run it.
//!
//! Most patterns use per-size knobs of `madvise` with `MADV_HUGEPAGE` rather than
//! `always`: the kernel picks the same folio orders for this VMA, and other
//! processes on the host keep 4 KiB pages, so the system-wide counter deltas stay
//! exact (see "How a run is isolated" in `native::faults`). Two tests run the literal
//! `always` settings and allow a retry if another process disturbed the counters.

use native::faults::{self, Advice, FaultPattern, FaultReport, Step, TouchOrder, GIB};
use native::knobs::{thp_snapshot, LiveKernel, LiveLock, ThpEnabled, ThpKnobs};

const MIB: usize = 1 << 20;
const KIB: usize = 1 << 10;
/// Every mTHP size of the issue tracker's "all sizes" pattern.
const SIZES_16K_TO_2M: [u32; 8] = [16, 32, 64, 128, 256, 512, 1024, 2048];

/// Runs `p` under the lock and checks the knobs are back afterwards; `None` (after
/// printing why) if this host cannot run it.
fn run(p: &FaultPattern) -> Option<FaultReport> {
    let sizes: Vec<u32> = p.knobs.sizes.iter().map(|&(s, _)| s).collect();
    if let Err(why) = LiveKernel::probe().require_thp_knobs(&sizes) {
        eprintln!("SKIPPED (cannot run here): {}: {why}", p.name);
        return None;
    }
    let lock = LiveLock::acquire().expect("live-kernel lock");
    let before = thp_snapshot().expect("read THP knobs");
    let report = faults::run_locked(p, &lock);
    let after = thp_snapshot().expect("read THP knobs");
    assert_eq!(before, after, "THP knobs not restored after {}", p.name);
    let report = report.unwrap_or_else(|e| panic!("{}: {e}", p.name));
    eprintln!("{}", report.table());
    Some(report)
}

/// The pattern with `madvise` in place of `always` and `MADV_HUGEPAGE` applied.
fn isolated(mut p: FaultPattern) -> FaultPattern {
    for (_, v) in &mut p.knobs.sizes {
        if *v == ThpEnabled::Always {
            *v = ThpEnabled::Madvise;
        }
    }
    p.advice = Advice::Hugepage;
    p.name += " (madvise)";
    p
}

/// The issue tracker's unaligned layout: start 12 KiB past a 2 MiB boundary, 20 KiB
/// shorter than 1 GiB.
fn unaligned(mut p: FaultPattern) -> FaultPattern {
    p.offset_bytes = 12 * KIB;
    p.len_bytes = GIB - 20 * KIB;
    p
}

/// Asserts every mTHP size's `anon_fault_alloc` and `anon_fault_fallback` delta.
fn assert_allocs(r: &FaultReport, expected: &[(u32, u64)]) {
    for size in native::knobs::mthp_sizes_kb() {
        let want = expected
            .iter()
            .find(|(s, _)| *s == size)
            .map_or(0, |&(_, n)| n);
        assert_eq!(
            r.counters.anon_fault_alloc(size),
            want,
            "{}: hugepages-{size}kB anon_fault_alloc",
            r.pattern.name
        );
        assert_eq!(
            r.counters.anon_fault_fallback(size),
            0,
            "{}: hugepages-{size}kB anon_fault_fallback",
            r.pattern.name
        );
    }
}

#[test]
fn thp_off_faults_every_4k_page() {
    let p = FaultPattern::new("1 GiB, THP off", GIB, ThpKnobs::off());
    let Some(r) = run(&p) else { return };
    assert_eq!(r.touch.nr_minflt, 262_144);
    assert_eq!(r.counters.vm("thp_fault_alloc"), 0);
    assert_allocs(&r, &[]);
}

#[test]
fn pmd_thp_aligned_faults_once_per_2m() {
    let p = isolated(FaultPattern::new(
        "1 GiB, 2M only",
        GIB,
        ThpKnobs::only(2048, ThpEnabled::Always),
    ));
    let Some(r) = run(&p) else { return };
    assert_eq!(r.touch.nr_minflt, 512);
    assert_eq!(r.counters.vm("thp_fault_alloc"), 512);
    assert_eq!(r.counters.vm("thp_fault_fallback"), 0);
    assert_allocs(&r, &[(2048, 512)]);
}

#[test]
fn pmd_thp_always_literal_aligned() {
    // The literal `always` setting: fault counts are this process's own and exact;
    // the counters are system-wide, so allow two retries if another process faulted
    // THPs meanwhile.
    let p = FaultPattern::new(
        "1 GiB, 2M only always",
        GIB,
        ThpKnobs::only(2048, ThpEnabled::Always),
    );
    for attempt in 1..=3 {
        let Some(r) = run(&p) else { return };
        assert_eq!(r.touch.nr_minflt, 512);
        let alloc = r.counters.vm("thp_fault_alloc");
        assert!(alloc >= 512, "thp_fault_alloc {alloc} < 512");
        if alloc == 512 {
            return;
        }
        eprintln!("attempt {attempt}: thp_fault_alloc {alloc}: another process faulted THPs");
    }
    panic!("thp_fault_alloc was disturbed in 3 attempts");
}

#[test]
fn pmd_thp_unaligned_falls_back_at_the_ends() {
    let p = isolated(unaligned(FaultPattern::new(
        "1 GiB-20K at +12K, 2M only",
        0,
        ThpKnobs::only(2048, ThpEnabled::Always),
    )));
    let Some(r) = run(&p) else { return };
    // 509 4K faults in the first 2 MiB block, 510 THPs, 510 4K faults in the last.
    assert_eq!(r.touch.nr_minflt, 1_529);
    assert_eq!(r.counters.vm("thp_fault_alloc"), 510);
    assert_allocs(&r, &[(2048, 510)]);
}

#[test]
fn mthp_16k_only() {
    let p = isolated(FaultPattern::new(
        "1 GiB, 16K only",
        GIB,
        ThpKnobs::only(16, ThpEnabled::Always),
    ));
    let Some(r) = run(&p) else { return };
    assert_eq!(r.touch.nr_minflt, 65_536);
    assert_eq!(r.counters.vm("thp_fault_alloc"), 0);
    assert_allocs(&r, &[(16, 65_536)]);
}

#[test]
fn mthp_64k_only_sequential_and_random() {
    let seq = isolated(FaultPattern::new(
        "1 GiB, 64K only",
        GIB,
        ThpKnobs::only(64, ThpEnabled::Always),
    ));
    let Some(r) = run(&seq) else { return };
    assert_eq!(r.touch.nr_minflt, 16_384);
    assert_allocs(&r, &[(64, 16_384)]);

    let mut rnd = seq.clone();
    rnd.order = TouchOrder::Random { seed: 1 };
    rnd.name += ", random order";
    let Some(r) = run(&rnd) else { return };
    assert_eq!(r.touch.nr_minflt, 16_384);
    assert_allocs(&r, &[(64, 16_384)]);
}

#[test]
fn mthp_64k_unaligned() {
    let p = isolated(unaligned(FaultPattern::new(
        "1 GiB-20K at +12K, 64K only",
        0,
        ThpKnobs::only(64, ThpEnabled::Always),
    )));
    let Some(r) = run(&p) else { return };
    // 16,382 64K folios, 13 4K pages before the first 64K boundary, 14 after the last.
    assert_eq!(r.touch.nr_minflt, 16_409);
    assert_allocs(&r, &[(64, 16_382)]);
}

#[test]
fn mthp_all_sizes_unaligned() {
    let p = isolated(unaligned(FaultPattern::new(
        "1 GiB-20K at +12K, 16K..2M",
        0,
        ThpKnobs::all_of(&SIZES_16K_TO_2M, ThpEnabled::Always),
    )));
    let Some(r) = run(&p) else { return };
    // Each end of the region steps down through every smaller size once: 2 of each
    // size below 2M, 510 PMD THPs, and 3 single 4K pages (12K at the start, 8K short
    // of the end: 1 + 2 pages left over).
    assert_eq!(r.touch.nr_minflt, 527);
    let mut want: Vec<(u32, u64)> = SIZES_16K_TO_2M[..7].iter().map(|&s| (s, 2)).collect();
    want.push((2048, 510));
    assert_allocs(&r, &want);
}

#[test]
fn thp_cow_splits_the_pmd() {
    let mut p = isolated(FaultPattern::new(
        "512 MiB 2M, fork + child writes",
        512 * MIB,
        ThpKnobs::only(2048, ThpEnabled::Always),
    ));
    p.steps.push(Step::ForkWriter);
    let Some(r) = run(&p) else { return };
    assert_eq!(r.touch.nr_minflt, 256);
    assert_eq!(r.counters.vm("thp_split_pmd"), 256);
    assert_allocs(&r, &[(2048, 256)]);
    // The writer takes one COW fault per 4 KiB: the PMD is split, then each 4 KiB
    // page is copied on its own.
    assert_eq!(r.steps[0].nr_minflt, 131_072);
}

#[test]
fn partial_munmap_splits_and_retouch_faults_4k() {
    let mut p = isolated(FaultPattern::new(
        "8 MiB 2M, munmap 1 MiB inside the 2nd PMD",
        8 * MIB,
        ThpKnobs::only(2048, ThpEnabled::Always),
    ));
    // Unmap [2.5 MiB, 3.5 MiB): the THP at [2 MiB, 4 MiB) loses half its pages.
    p.steps.push(Step::MunmapRetouch {
        offset_bytes: 2 * MIB + 512 * KIB,
        len_bytes: MIB,
    });
    let Some(r) = run(&p) else { return };
    assert_eq!(r.touch.nr_minflt, 4);
    assert_eq!(r.counters.vm("thp_split_pmd"), 1);
    // The re-mapped 1 MiB cannot hold a 2 MiB folio: 256 4K faults; the rest of the
    // region is still mapped.
    assert_eq!(r.steps[0].nr_minflt, 256);
    assert_allocs(&r, &[(2048, 4)]);
}
