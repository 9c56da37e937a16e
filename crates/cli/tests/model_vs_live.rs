//! One fault pattern, two kernels: each [`FaultPattern`] below runs through
//! the model (`mmlab::fault_model`, preset `linux-6.18`) and, where the host
//! allows, through the live kernel (`native::faults`), and the two must agree
//! exactly: the faults of every phase (`ru_minflt` of the process that ran
//! it), `thp_fault_alloc`, `thp_fault_fallback`, `thp_split_pmd`, and every
//! size's `anon_fault_alloc`/`anon_fault_fallback`.
//!
//! The patterns go beyond the issue tracker's table: other offsets and
//! lengths, random order, reads, partial `munmap` then re-touch, and `fork`
//! then write, for 4 KiB pages, 64 KiB and 2 MiB folios and every size at
//! once. Large-folio sizes use the `madvise` knob with `MADV_HUGEPAGE`, so
//! that no other process on the host gets large folios during the run and the
//! system-wide counters are this pattern's alone (see `native::faults`); they
//! can still only be moved upwards by another process, so a live delta above
//! the model's is retried (at most 3 runs), one below it fails at once.
//!
//! # khugepaged
//!
//! The region is `MADV_HUGEPAGE`, so khugepaged scans it (every 10 s by
//! default) and may collapse a 2 MiB range of it into a THP while the
//! pattern runs: a range with up to `max_ptes_none` (511) empty entries, as
//! the one a `munmap` has just emptied. The faults that follow then differ
//! from a kernel without khugepaged, which is what the model is: the
//! re-touch of the hole takes fewer, and a child's copy-on-write of a
//! PMD-mapped THP does. That is how `all_sizes_odd_region_with_munmap_and_fork`
//! once measured `[6, 4091]` against the model's `[9, 4091]`; with
//! khugepaged scanning without a pause (`scan_sleep_millisecs = 0`) 2 of 6
//! runs gave `[9, 3857]` and `[9, 3885]`, each with `thp_collapse_alloc`
//! moved during the run. A collapse always moves that counter, so a run in
//! which it moved is not this pattern alone: it is retried like a run
//! whose counters another process moved.
//!
//! Where the live kernel cannot run (not root, no THP knobs) the test says
//! `SKIPPED (cannot run here)` for the live half and still checks the model's
//! own figures given with each pattern.

use mm::knobs::Preset;
use mmlab::fault_model::{run_model, ModelFaultReport, MODEL_SIZES_KB};
use native::faults::{self, Access, Advice, FaultPattern, FaultReport, Step, TouchOrder};
use native::knobs::{thp_snapshot, LiveKernel, LiveLock, ThpEnabled, ThpKnobs};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// `sizes` at `madvise`, the region `MADV_HUGEPAGE`.
fn isolated(name: &str, len: usize, sizes: &[u32]) -> FaultPattern {
    let mut p = FaultPattern::new(name, len, ThpKnobs::all_of(sizes, ThpEnabled::Madvise));
    p.advice = Advice::Hugepage;
    p
}

/// The counters compared: name, model value, live value.
fn counters(m: &ModelFaultReport, l: &FaultReport) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for name in ["thp_fault_alloc", "thp_fault_fallback", "thp_split_pmd"] {
        out.push((name.to_string(), m.vm(name), l.counters.vm(name)));
    }
    for kb in MODEL_SIZES_KB {
        for name in ["anon_fault_alloc", "anon_fault_fallback"] {
            out.push((
                format!("hugepages-{kb}kB/{name}"),
                m.size(kb, name),
                l.counters.size(kb, name),
            ));
        }
    }
    out
}

/// What each pattern must give in the model (and so in the kernel): the
/// faults of the touch phase and of each step, and the counters that are not
/// zero.
struct Want {
    touch: u64,
    steps: Vec<u64>,
    counters: Vec<(&'static str, u64)>,
}

fn compare(p: &FaultPattern, want: Want) {
    let m = run_model(p, Preset::Linux6_18).unwrap_or_else(|e| panic!("{}: model: {e}", p.name));
    eprintln!(
        "{}: model: touch {} faults, steps {:?}",
        p.name, m.touch, m.steps
    );
    assert_eq!(m.touch, want.touch, "{}: model touch faults", p.name);
    assert_eq!(m.steps, want.steps, "{}: model step faults", p.name);
    for (name, v) in &want.counters {
        let got = if let Some((kb, stat)) = name.split_once('/') {
            m.size(kb.parse().expect("size"), stat)
        } else {
            m.vm(name)
        };
        assert_eq!(got, *v, "{}: model {name}", p.name);
    }

    let sizes: Vec<u32> = p.knobs.sizes.iter().map(|&(s, _)| s).collect();
    if let Err(why) = LiveKernel::probe().require_thp_knobs(&sizes) {
        eprintln!("SKIPPED (cannot run here): {}: live half: {why}", p.name);
        return;
    }
    for attempt in 1..=3 {
        let lock = LiveLock::acquire().expect("live-kernel lock");
        let before = thp_snapshot().expect("read THP knobs");
        let r = faults::run_locked(p, &lock);
        let after = thp_snapshot().expect("read THP knobs");
        drop(lock);
        assert_eq!(before, after, "THP knobs not restored after {}", p.name);
        let r = r.unwrap_or_else(|e| panic!("{}: live: {e}", p.name));
        eprintln!("{}", r.table());
        let collapses = r.counters.vm("thp_collapse_alloc");
        if collapses > 0 {
            // See the module doc: khugepaged changed the memory under test.
            eprintln!(
                "{}: attempt {attempt}: khugepaged collapsed {collapses} THP(s) during the run: retried",
                p.name
            );
            continue;
        }
        // The process's own faults: exact.
        assert_eq!(
            r.touch.nr_minflt, m.touch,
            "{}: touch faults, live vs model",
            p.name
        );
        let live_steps: Vec<u64> = r.steps.iter().map(|s| s.nr_minflt).collect();
        assert_eq!(
            live_steps, m.steps,
            "{}: step faults, live vs model",
            p.name
        );
        // System-wide counters: never below the model's; above it only if
        // another process moved them, which a retry tells apart.
        let cs = counters(&m, &r);
        for (name, model, live) in &cs {
            assert!(
                live >= model,
                "{}: {name}: live {live} < model {model}",
                p.name
            );
        }
        let disturbed: Vec<String> = cs
            .iter()
            .filter(|(_, model, live)| live != model)
            .map(|(n, model, live)| format!("{n}: live {live}, model {model}"))
            .collect();
        if disturbed.is_empty() {
            return;
        }
        eprintln!(
            "{}: attempt {attempt}: counters above the model's (another process?): {}",
            p.name,
            disturbed.join(", ")
        );
    }
    panic!(
        "{}: counters disturbed (or khugepaged collapsing) in 3 attempts",
        p.name
    );
}

#[test]
fn pages_4k_random_order_at_an_odd_offset() {
    let mut p = FaultPattern::new(
        "4K, 64 MiB-20K at +12K, random",
        64 * MIB - 20 * KIB,
        ThpKnobs::off(),
    );
    p.offset_bytes = 12 * KIB;
    p.order = TouchOrder::Random { seed: 3 };
    compare(
        &p,
        Want {
            touch: (64 * MIB as u64 - 20 * 1024) / 4096,
            steps: vec![],
            counters: vec![],
        },
    );
}

#[test]
fn pages_4k_partial_munmap_then_fork_writer() {
    let mut p = FaultPattern::new(
        "4K, 16 MiB, munmap 100K, fork writer",
        16 * MIB,
        ThpKnobs::off(),
    );
    p.steps.push(Step::MunmapRetouch {
        offset_bytes: MIB + 8 * KIB,
        len_bytes: 100 * KIB,
    });
    p.steps.push(Step::ForkWriter);
    compare(
        &p,
        Want {
            touch: 4096,
            // 25 pages come back fresh; the child copies every page.
            steps: vec![25, 4096],
            counters: vec![],
        },
    );
}

#[test]
fn reads_map_the_zero_page_per_4k_even_with_64k_mthp() {
    let mut p = isolated("64K, 8 MiB read", 8 * MIB, &[64]);
    p.access = Access::Read;
    compare(
        &p,
        Want {
            touch: 2048,
            steps: vec![],
            counters: vec![],
        },
    );
}

#[test]
fn mthp_64k_odd_offset_partial_munmap_retouch() {
    let mut p = isolated(
        "64K, 32 MiB-20K at +12K, munmap 200K",
        32 * MIB - 20 * KIB,
        &[64],
    );
    p.offset_bytes = 12 * KIB;
    // [3 MiB + 4 KiB, +200 KiB) relative to the region: the region starts
    // 12 KiB past a 2 MiB boundary, so the hole spans folios only in part.
    p.steps.push(Step::MunmapRetouch {
        offset_bytes: 3 * MIB + 4 * KIB,
        len_bytes: 200 * KIB,
    });
    // Touch: 13 4K pages, 510 64K folios, 14 4K pages = 537 faults.
    // The hole is [3 MiB + 16 KiB, 3 MiB + 216 KiB) from the 2 MiB boundary:
    // 12 4K pages up to the next 64K boundary (the rest of that 64K block is
    // still mapped), 2 whole 64K blocks, then 6 4K pages = 20 faults.
    compare(
        &p,
        Want {
            touch: 537,
            steps: vec![20],
            counters: vec![("64/anon_fault_alloc", 512)],
        },
    );
}

#[test]
fn mthp_64k_fork_writer_copies_4k_at_a_time() {
    let mut p = isolated("64K, 16 MiB, fork writer", 16 * MIB, &[64]);
    p.steps.push(Step::ForkWriter);
    compare(
        &p,
        Want {
            touch: 256,
            steps: vec![4096],
            counters: vec![("64/anon_fault_alloc", 256)],
        },
    );
}

#[test]
fn pmd_thp_unaligned_by_1m() {
    let mut p = isolated("2M, 20 MiB at +1M", 20 * MIB, &[2048]);
    p.offset_bytes = MIB;
    // 256 4K faults, 9 THPs, 256 4K faults.
    compare(
        &p,
        Want {
            touch: 521,
            steps: vec![],
            counters: vec![("thp_fault_alloc", 9), ("2048/anon_fault_alloc", 9)],
        },
    );
}

#[test]
fn pmd_thp_munmap_4k_then_retouch() {
    let mut p = isolated("2M, 16 MiB, munmap 4K at +6M+12K", 16 * MIB, &[2048]);
    p.steps.push(Step::MunmapRetouch {
        offset_bytes: 6 * MIB + 12 * KIB,
        len_bytes: 4 * KIB,
    });
    compare(
        &p,
        Want {
            touch: 8,
            steps: vec![1],
            counters: vec![("thp_fault_alloc", 8), ("thp_split_pmd", 1)],
        },
    );
}

#[test]
fn pmd_thp_read_then_fork_writer_replaces_the_huge_zero_page() {
    let mut p = isolated("2M, 8 MiB read, fork writer", 8 * MIB, &[2048]);
    p.access = Access::Read;
    p.steps.push(Step::ForkWriter);
    // Reads map the huge zero page (one fault per 2 MiB); the child's first
    // write to each allocates a THP (6.18: do_huge_zero_wp_pmd()).
    compare(
        &p,
        Want {
            touch: 4,
            steps: vec![4],
            counters: vec![("thp_fault_alloc", 4)],
        },
    );
}

#[test]
fn all_sizes_odd_region_with_munmap_and_fork() {
    let sizes = [16, 32, 64, 128, 256, 512, 1024, 2048];
    let mut p = isolated(
        "16K..2M, 16 MiB-20K at +12K, munmap, fork",
        16 * MIB - 20 * KIB,
        &sizes,
    );
    p.offset_bytes = 12 * KIB;
    p.steps.push(Step::MunmapRetouch {
        offset_bytes: 5 * MIB,
        len_bytes: 300 * KIB,
    });
    p.steps.push(Step::ForkWriter);
    compare(
        &p,
        Want {
            // Each end steps down through every size: 2 of each below 2M,
            // 6 THPs, 3 4K pages. The hole, [5 MiB + 12 KiB, + 300 KiB) from
            // the boundary, comes back as 4K, 16K, 32K, 64K, 128K, 32K, 16K,
            // 4K, 4K: each the largest block that is aligned, inside the
            // hole and still empty = 9 faults. The child copies every page.
            touch: 23,
            steps: vec![9, 4091],
            counters: vec![("thp_fault_alloc", 6)],
        },
    );
}
