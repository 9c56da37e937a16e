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
//! exact (see "How a run is isolated" in `native::faults`). The counters can still be
//! moved by another process, but only upwards: [`run_exact`] retries a run whose
//! deltas exceed the expectation, at most 3 times. One test runs the literal `always`
//! setting and checks its counters as lower bounds only.

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

/// A system-wide counter's delta and the value this pattern alone produces.
struct Expect {
    name: String,
    got: u64,
    want: u64,
}

fn vm(r: &FaultReport, name: &str, want: u64) -> Expect {
    Expect {
        name: name.to_string(),
        got: r.counters.vm(name),
        want,
    }
}

/// Every mTHP size's `anon_fault_alloc` (`expected`, 0 if unlisted) and
/// `anon_fault_fallback` (0).
fn allocs(r: &FaultReport, expected: &[(u32, u64)]) -> Vec<Expect> {
    let mut out = Vec::new();
    for size in native::knobs::mthp_sizes_kb() {
        let want = expected
            .iter()
            .find(|(s, _)| *s == size)
            .map_or(0, |&(_, n)| n);
        for (name, want) in [("anon_fault_alloc", want), ("anon_fault_fallback", 0)] {
            out.push(Expect {
                name: format!("hugepages-{size}kB/{name}"),
                got: r.counters.size(size, name),
                want,
            });
        }
    }
    out
}

/// Runs `p` until its system-wide counter deltas are exact, at most 3 times.
///
/// `check` asserts the per-process figures (exact every time) and returns the
/// counter expectations. The counters are system-wide, so another process can only
/// add to them: a delta below the expectation fails at once, one above it is retried.
fn run_exact(p: &FaultPattern, check: impl Fn(&FaultReport) -> Vec<Expect>) {
    for attempt in 1..=3 {
        let Some(r) = run(p) else { return };
        let expects = check(&r);
        for e in &expects {
            assert!(
                e.got >= e.want,
                "{}: {} = {}, expected {}",
                p.name,
                e.name,
                e.got,
                e.want
            );
        }
        let disturbed: Vec<String> = expects
            .iter()
            .filter(|e| e.got != e.want)
            .map(|e| format!("{} = {} (expected {})", e.name, e.got, e.want))
            .collect();
        if disturbed.is_empty() {
            return;
        }
        eprintln!(
            "{}: attempt {attempt}: another process moved the counters: {}",
            p.name,
            disturbed.join(", ")
        );
    }
    panic!("{}: counters disturbed in 3 attempts", p.name);
}

#[test]
fn thp_off_faults_every_4k_page() {
    let p = FaultPattern::new("1 GiB, THP off", GIB, ThpKnobs::off());
    run_exact(&p, |r| {
        assert_eq!(r.touch.nr_minflt, 262_144);
        let mut e = allocs(r, &[]);
        e.push(vm(r, "thp_fault_alloc", 0));
        e
    });
}

#[test]
fn pmd_thp_aligned_faults_once_per_2m() {
    let p = isolated(FaultPattern::new(
        "1 GiB, 2M only",
        GIB,
        ThpKnobs::only(2048, ThpEnabled::Always),
    ));
    run_exact(&p, |r| {
        assert_eq!(r.touch.nr_minflt, 512);
        let mut e = allocs(r, &[(2048, 512)]);
        e.push(vm(r, "thp_fault_alloc", 512));
        e.push(vm(r, "thp_fault_fallback", 0));
        e
    });
}

#[test]
fn pmd_thp_always_literal_aligned() {
    // The literal `always` setting: every process on the host gets THPs while it is
    // in force, so the system-wide counters are only checked as lower bounds; the
    // fault count is this process's own and exact.
    let p = FaultPattern::new(
        "1 GiB, 2M only always",
        GIB,
        ThpKnobs::only(2048, ThpEnabled::Always),
    );
    let Some(r) = run(&p) else { return };
    assert_eq!(r.touch.nr_minflt, 512);
    let alloc = r.counters.vm("thp_fault_alloc");
    assert!(alloc >= 512, "thp_fault_alloc {alloc} < 512");
    if alloc > 512 {
        eprintln!("thp_fault_alloc {alloc}: other processes faulted THPs meanwhile");
    }
}

#[test]
fn pmd_thp_unaligned_falls_back_at_the_ends() {
    let p = isolated(unaligned(FaultPattern::new(
        "1 GiB-20K at +12K, 2M only",
        0,
        ThpKnobs::only(2048, ThpEnabled::Always),
    )));
    run_exact(&p, |r| {
        // 509 4K faults in the first 2 MiB block, 510 THPs, 510 4K faults in the last.
        assert_eq!(r.touch.nr_minflt, 1_529);
        let mut e = allocs(r, &[(2048, 510)]);
        e.push(vm(r, "thp_fault_alloc", 510));
        e
    });
}

#[test]
fn mthp_16k_only() {
    let p = isolated(FaultPattern::new(
        "1 GiB, 16K only",
        GIB,
        ThpKnobs::only(16, ThpEnabled::Always),
    ));
    run_exact(&p, |r| {
        assert_eq!(r.touch.nr_minflt, 65_536);
        let mut e = allocs(r, &[(16, 65_536)]);
        e.push(vm(r, "thp_fault_alloc", 0));
        e
    });
}

#[test]
fn mthp_64k_only_sequential_and_random() {
    let seq = isolated(FaultPattern::new(
        "1 GiB, 64K only",
        GIB,
        ThpKnobs::only(64, ThpEnabled::Always),
    ));
    let mut rnd = seq.clone();
    rnd.order = TouchOrder::Random { seed: 1 };
    rnd.name += ", random order";
    for p in [seq, rnd] {
        run_exact(&p, |r| {
            assert_eq!(r.touch.nr_minflt, 16_384);
            allocs(r, &[(64, 16_384)])
        });
    }
}

#[test]
fn mthp_64k_unaligned() {
    let p = isolated(unaligned(FaultPattern::new(
        "1 GiB-20K at +12K, 64K only",
        0,
        ThpKnobs::only(64, ThpEnabled::Always),
    )));
    run_exact(&p, |r| {
        // 16,382 64K folios, 13 4K pages before the first 64K boundary, 14 after the
        // last.
        assert_eq!(r.touch.nr_minflt, 16_409);
        allocs(r, &[(64, 16_382)])
    });
}

#[test]
fn mthp_all_sizes_unaligned() {
    let p = isolated(unaligned(FaultPattern::new(
        "1 GiB-20K at +12K, 16K..2M",
        0,
        ThpKnobs::all_of(&SIZES_16K_TO_2M, ThpEnabled::Always),
    )));
    run_exact(&p, |r| {
        // Each end of the region steps down through every smaller size once: 2 of
        // each size below 2M, 510 PMD THPs, and 3 single 4K pages (12K at the start,
        // 8K short of the end: 1 + 2 pages left over).
        assert_eq!(r.touch.nr_minflt, 527);
        let mut want: Vec<(u32, u64)> = SIZES_16K_TO_2M[..7].iter().map(|&s| (s, 2)).collect();
        want.push((2048, 510));
        allocs(r, &want)
    });
}

#[test]
fn thp_cow_splits_the_pmd() {
    let mut p = isolated(FaultPattern::new(
        "512 MiB 2M, fork + child writes",
        512 * MIB,
        ThpKnobs::only(2048, ThpEnabled::Always),
    ));
    p.steps.push(Step::ForkWriter);
    run_exact(&p, |r| {
        assert_eq!(r.touch.nr_minflt, 256);
        // The writer takes one COW fault per 4 KiB: the PMD is split, then each
        // 4 KiB page is copied on its own.
        assert_eq!(r.steps[0].nr_minflt, 131_072);
        let mut e = allocs(r, &[(2048, 256)]);
        e.push(vm(r, "thp_split_pmd", 256));
        e
    });
}

#[test]
fn partial_munmap_splits_and_retouch_faults_4k() {
    let mut p = isolated(FaultPattern::new(
        "8 MiB 2M, munmap 1 MiB inside the 2nd PMD",
        8 * MIB,
        ThpKnobs::only(2048, ThpEnabled::Always),
    ));
    // Unmap [2.5 MiB, 3.5 MiB): the THP at [2 MiB, 4 MiB) loses half its pages.
    //
    //   before:  |  THP  |  THP  |  THP  |  THP  |
    //   munmap:  |  THP  |pp    pp|  THP  |  THP  |   (PMD split, 1 MiB hole)
    //   retouch: |  THP  |pp4444pp|  THP  |  THP  |   (256 4K faults)
    p.steps.push(Step::MunmapRetouch {
        offset_bytes: 2 * MIB + 512 * KIB,
        len_bytes: MIB,
    });
    run_exact(&p, |r| {
        assert_eq!(r.touch.nr_minflt, 4);
        // The re-mapped 1 MiB cannot hold a 2 MiB folio: 256 4K faults; the rest of
        // the region is still mapped.
        assert_eq!(r.steps[0].nr_minflt, 256);
        let mut e = allocs(r, &[(2048, 4)]);
        e.push(vm(r, "thp_split_pmd", 1));
        e
    });
}
