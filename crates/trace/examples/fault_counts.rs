//! The live counts of one recorded run, as JSON on stdout, for the
//! validation corpus (`scripts/corpus.py measure`):
//!
//! ```sh
//! cargo run --release -p trace --example fault_counts -- run.mmtrace
//! ```
//!
//! - `ru_minflt`, `ru_majflt`: the workload's own faults (`wait4()`).
//! - `page_fault_user`, `page_fault_kernel` (on user addresses), `execs`,
//!   `exec_layouts`: events in the trace.
//! - `harness_faults`: faults of the recorded process before its first
//!   exec that are not the exec's own: the recorder's child running the
//!   recorder's code between its fork and its `execve()` (which
//!   `ru_minflt` counts). The exec's own faults (`padzero()` of the new
//!   `.bss`, `create_elf_tables()` on the new stack) also come before the
//!   `sched_process_exec` event, but at addresses inside the layout that
//!   exec made (its `ExecLayout`); those are not counted. A plain
//!   `perf record` import leaves out perf's own child before the exec, so
//!   its predictions add these to compare with a live count taken the way
//!   `mmlab record` takes it (`scripts/corpus.py predict`).
//! - `anon_fault_alloc`: by folio size in KiB, the workload's page
//!   allocations of order 2 or more with `__GFP_HIGHMEM`, `__GFP_MOVABLE`,
//!   `__GFP_COMP` and `__GFP_NOMEMALLOC`: the mask `vma_thp_gfp_mask()`
//!   gives a THP or mTHP fault (`GFP_TRANSHUGE_LIGHT` under the default
//!   `defrag`), which the page cache's large folios (no `__GFP_NOMEMALLOC`)
//!   and the network's page fragments (not movable) never carry. Per
//!   process, unlike the system-wide `hugepages-*/stats/anon_fault_alloc`
//!   counters, which count every process of a shared machine. The bits are
//!   those of the 6.12/6.18 `gfp_types.h` enum (HIGHMEM 1, MOVABLE 3, COMP
//!   18, NOMEMALLOC 19), as this host's `mm_page_alloc` records them.
use std::collections::BTreeMap;
use std::path::Path;

use trace::{EventKind, TraceReader};

const THP_GFP: u64 = (1 << 1) | (1 << 3) | (1 << 18) | (1 << 19);
const TASK_SIZE: u64 = (1 << 47) - 4096;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: fault_counts TRACE");
        std::process::exit(2);
    };
    let mut r = match TraceReader::open(Path::new(&path)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    let (mut user, mut kernel, mut execs, mut layouts) = (0u64, 0u64, 0u64, 0u64);
    let mut anon: BTreeMap<u64, u64> = BTreeMap::new();
    // The recorded process, its faults before its first exec (page
    // addresses), and whether that exec has been seen / its layout counted.
    let mut root: Option<i32> = None;
    let mut before_exec: Vec<u64> = Vec::new();
    let (mut exec_seen, mut harness): (bool, Option<u64>) = (false, None);
    for ev in r.by_ref() {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                eprintln!("{path}: {e}");
                std::process::exit(1);
            }
        };
        let root_pid = *root.get_or_insert(ev.pid);
        if ev.pid == root_pid && harness.is_none() {
            match &ev.kind {
                EventKind::PageFaultUser { address, .. } if !exec_seen => {
                    before_exec.push(*address)
                }
                EventKind::PageFaultKernel { address, .. }
                    if !exec_seen && *address < TASK_SIZE =>
                {
                    before_exec.push(*address)
                }
                EventKind::Exec { .. } => exec_seen = true,
                EventKind::ExecLayout { vmas, .. } => {
                    let inside = |a: u64| vmas.iter().any(|v| v.start <= a && a - v.start < v.len);
                    harness = Some(before_exec.iter().filter(|&&a| !inside(a)).count() as u64);
                }
                _ => {}
            }
        }
        match ev.kind {
            EventKind::PageFaultUser { .. } => user += 1,
            EventKind::PageFaultKernel { address, .. } if address < TASK_SIZE => kernel += 1,
            EventKind::Exec { .. } => execs += 1,
            EventKind::ExecLayout { .. } => layouts += 1,
            EventKind::PageAlloc {
                order, gfp_flags, ..
            } if order >= 2 && gfp_flags & THP_GFP == THP_GFP => {
                *anon.entry(4u64 << order).or_default() += 1;
            }
            _ => {}
        }
    }
    let t = r.trailer().cloned().unwrap_or_default();
    // No layout recorded: every fault before the exec is taken as the
    // harness's.
    let harness = harness.unwrap_or(before_exec.len() as u64);
    let anon: Vec<String> = anon.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    println!(
        "{{\"ru_minflt\": {}, \"ru_majflt\": {}, \"page_fault_user\": {user}, \"page_fault_kernel\": {kernel}, \
         \"execs\": {execs}, \"exec_layouts\": {layouts}, \"harness_faults\": {harness}, \"lost_events\": {}, \"anon_fault_alloc\": {{{}}}}}",
        t.workload_minflt.map_or("null".to_string(), |v| v.to_string()),
        t.workload_majflt.map_or("null".to_string(), |v| v.to_string()),
        t.nr_lost_events,
        anon.join(", ")
    );
}
