//! vm-scalability `anon-cow-seq-hugetlb`: children write, page after page,
//! hugetlb memory they share copy-on-write with their parent.
//!
//! # What it models
//!
//! vm-scalability's `case-anon-cow-seq-hugetlb` runs
//! `usemem -n $nr_task --prealloc --prefault -O -U $((unit_size / (nr_task+1)))`
//! after `setup_hugetlb`: the parent maps `size` bytes with
//! `MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB` (`-O -U`) and populates them
//! (`--prealloc --prefault`) before forking `nr_task` children; each child
//! writes one word per 4 KiB from the start to the end and exits; the parent
//! waits.
//!
//! It is the copy-on-write variant of `anon-cow-seq` that still copies huge
//! pages on current kernels: a child's first write to each 2 MiB page is a
//! `hugetlb_wp()` fault that takes a new page from the pool and copies all
//! 512 sub-pages (`copy_user_large_folio()`, in the order of
//! `mmlab.huge_copy_order`); the next 511 writes to it do not fault. (The
//! anonymous THP copy-on-write has split the PMD and copied 4 KiB since
//! Linux 5.8.)
//!
//! # Parameters and their sources
//!
//! - `size` (default 16 MiB, rounded up to 2 MiB by mmap): the bytes each
//!   process maps. vm-scalability uses `unit_size / (nr_task + 1)` with
//!   `unit_size = mem / 2` (half of MemTotal), so that the parent's pages and
//!   one copy per child fit; here it is given so that experiments stay small.
//! - `children` (default one per CPU, less one): `nr_task`, which
//!   vm-scalability sets to the number of CPUs.
//! - `setup` (default `overcommit`): what `setup_hugetlb` does before the
//!   run: it writes `nr_overcommit_hugepages = unit_size / Hugepagesize +
//!   nr_task + 1` (the pages of all `nr_task + 1` copies, plus one per
//!   process for unaligned sizes), so that the pool is made of surplus pages
//!   allocated at mmap and at copy-on-write and freed when unmapped. `none`
//!   leaves the pool to the kernel's `vm.nr_hugepages` /
//!   `vm.nr_overcommit_hugepages` knobs.
//!
//! - `fork_gap_ns` (default 0): time the parent spends before each fork
//!   after the first, as in `anon-cow-seq` (what forking a larger region
//!   costs, which spreads the children over it); it runs as the parent's
//!   `Compute` and counts in `user_ns`.
//!
//! Deviation: `--prefault` is `MAP_POPULATE`, whose faults the kernel takes
//! through `get_user_pages()` (counted in `pgfault` but not in the task's
//! `ru_minflt`); the model populates with user writes, one fault per 2 MiB
//! either way.

use crate::anon_cow_seq::CowParent;
use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::hugetlb::HPAGE_SIZE;
use mm::types::PAGE_SIZE;
use sim::TaskSpec;

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "hugetlb-cow",
    summary: "vm-scalability anon-cow-seq-hugetlb: a parent populates MAP_HUGETLB memory, \
              forked children write it (2 MiB copy-on-write)",
    params: &[
        P::size(
            "size",
            16 << 20,
            PAGE_SIZE,
            1 << 40,
            "bytes the parent maps with MAP_HUGETLB and populates",
        ),
        P::int(
            "children",
            Count::CPUS_LESS_ONE,
            1,
            N(65_536),
            "children forked, placed round-robin on the CPUs after the parent's",
        ),
        P::choice(
            "setup",
            "overcommit",
            &["overcommit", "none"],
            "overcommit: write nr_overcommit_hugepages as vm-scalability's setup_hugetlb; \
             none: use the kernel's hugetlb knobs",
        ),
        P::int(
            "fork_gap_ns",
            N(0),
            0,
            N(1_000_000_000_000),
            "time the parent spends before each fork after the first (as in anon-cow-seq)",
        ),
    ],
    build,
    nr_runs: None,
};

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let size = a.size("size")?;
    let children = a.int("children")? as u32;
    let overcommit = match a.choice("setup")? {
        "overcommit" => {
            let per_process = size.div_ceil(HPAGE_SIZE);
            Some(per_process * (children as u64 + 1) + children as u64 + 1)
        }
        _ => None,
    };
    let fork_gap_ns = a.int("fork_gap_ns")? as u64;
    Ok(vec![TaskSpec::new(
        Box::new(CowParent::hugetlb(size, children, overcommit).fork_gap(fork_gap_ns)),
        mm::VcpuId(0),
    )])
}
