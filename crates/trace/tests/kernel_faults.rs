//! The estimate of the kernel's faults on user memory when
//! `exceptions:page_fault_kernel` was not recorded ([`trace::kfault`]), on a
//! real recording: `fixtures/readbuf.perf.data` (`perf record -d` of
//! `fixtures/readbuf.c`: a `read()` of a 1 MiB file into a fresh 1 MiB
//! anonymous buffer, then 64 pages written by the program; perf 6.1,
//! kernel 6.18 on this project's 2-CPU host, THP `madvise`, every mTHP
//! size `never`), imported with its `page_fault_kernel` events and as if
//! they had not been recorded.

use std::path::Path;

use host::scratch::ScratchFile;
use mm::cost::CostTable;
use mm::knobs::Preset;
use mm::page_alloc::{MemoryLayout, NodeLayout};
use trace::aspace::{replay_aspace, AspaceReplay};
use trace::kfault::ERROR_PCT;
use trace::perf::{import_with, ImportOptions};

fn import(ignore: &[&str]) -> (trace::perf::ImportSummary, ScratchFile) {
    // A private directory of its own, removed when the test ends, passed or
    // failed.
    let out = ScratchFile::new("kfault", "out.mmtrace").expect("scratch dir");
    let opts = ImportOptions {
        ignore_events: ignore.iter().map(|s| s.to_string()).collect(),
        ..ImportOptions::default()
    };
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/readbuf.perf.data");
    let s = import_with(&input, &out, &opts).expect("imports");
    (s, out)
}

fn replay(path: &Path) -> AspaceReplay {
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: (1 << 30) / 4096,
        }],
        dma32_pages: 0,
    };
    replay_aspace(
        path,
        &layout,
        &CostTable::uniform(1),
        &[Preset::Linux6_18.config()],
    )
    .expect("replays")
}

#[test]
fn the_estimate_finds_the_kernel_faults_the_recording_lacks() {
    let (_, full) = import(&[]);
    let (sum, plain) = import(&["exceptions:page_fault_kernel"]);
    let whole = replay(&full);
    let lacking = replay(&plain);
    // The recording has them: the 256 pages of the buffer, and a few of
    // the exec (the new stack, the loader's .bss).
    let recorded = whole.recorded.kernel_faults;
    assert!((256..270).contains(&recorded), "{recorded}");
    assert_eq!(lacking.recorded.kernel_faults, 0);
    // The import says what is lost, and that it is estimated.
    let line = sum
        .reduced_capability
        .iter()
        .find(|l| l.starts_with("exceptions:page_fault_kernel"))
        .expect("the import names the missing event");
    assert!(line.contains("ESTIMATE"), "{line}");
    // The estimate does not read page_fault_kernel: the same either way,
    // and within its band of the recorded count.
    let e = lacking.recorded.kernel_fault_estimate;
    assert_eq!(e, whole.recorded.kernel_fault_estimate);
    let faults = lacking.recorded.faults;
    let (lo, hi) = e.band(faults);
    assert!(
        lo <= recorded && recorded <= hi,
        "{recorded} not in {lo}..{hi} ({e:?})"
    );
    assert!(ERROR_PCT.0 < 0.0 && ERROR_PCT.1 > 0.0);
    // The program's own 64 written pages are explained by its user faults.
    assert!(e.explained >= 64, "{e:?}");
}

#[test]
fn without_the_allocator_events_nothing_is_estimated() {
    let (sum, plain) = import(&["exceptions:page_fault_kernel", "kmem:mm_page_alloc"]);
    let r = replay(&plain);
    assert_eq!(r.recorded.kernel_fault_estimate.kernel_faults, 0);
    let line = sum
        .reduced_capability
        .iter()
        .find(|l| l.starts_with("exceptions:page_fault_kernel"))
        .expect("the import names the missing event");
    assert!(line.contains("not estimated"), "{line}");
}
