//! Summarizes a recorded build (or any process tree) for the kbuild and
//! kernel-compile workloads: what the page allocator and the fault path saw
//! per process, split into anonymous memory, file-backed memory (the page
//! cache) and kernel memory, and how long the pages lived.
//!
//! ```text
//! cargo run --release -p trace --example kbuild_summary -- kb.mmtrace USER_S SYS_S
//! ```
//!
//! `USER_S` and `SYS_S` are the build's user and system seconds as
//! `/usr/bin/time` printed them (the recording does not hold them). The
//! output is what `docs/kbuild-recording.md` keeps; the workloads' defaults
//! are computed from it there.
//!
//! # How events are classified
//!
//! - A fault (`page_fault_user`, or `page_fault_kernel` on a user address)
//!   is *anonymous* when its address lies in an `mmap()` with
//!   `MAP_ANONYMOUS` or in the
//!   heap (`brk`), *file* when it lies in a file `mmap()`; an address in
//!   neither was mapped by `execve()` (the program's and the loader's
//!   segments, `.bss`, the stack): a write there is counted as anonymous
//!   (`.bss`, stack, or the copy-on-write of a data page), a read or an
//!   instruction fetch as file (text and read-only data). A write fault in
//!   a file mapping is counted as anonymous too (its copy-on-write page is
//!   anonymous memory).
//! - A movable allocation (`__GFP_MOVABLE`) made by a thread right after one
//!   of its faults belongs to that fault: an anonymous page (or a COW copy)
//!   for an anonymous fault, a page-cache page (read-ahead) for a file
//!   fault. A movable allocation made outside a fault is a page-cache page
//!   of a `read()`/`write()`. An unmovable or reclaimable one is kernel
//!   memory (page tables, slab, kernel stacks), by order.
//! - A page's lifetime ends at its `mm_page_free`; pages still allocated
//!   when the recording ends are counted as such (the page cache of the
//!   files the build wrote and read stays).

use std::collections::BTreeMap;
use std::path::Path;

use trace::event::EventKind;
use trace::TraceReader;

const GFP_MOVABLE: u64 = 0x08;
const PF_WRITE: u64 = 0x2;
const MAP_ANONYMOUS: u64 = 0x20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Anon,
    PageCacheFault,
    PageCacheSyscall,
    Kernel,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Anon => "anonymous (fault)",
            Class::PageCacheFault => "page cache (file fault)",
            Class::PageCacheSyscall => "page cache (read/write)",
            Class::Kernel => "kernel (unmovable/reclaimable)",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    Anon,
    File,
    /// A write to a private file mapping: the copy-on-write page is
    /// anonymous memory.
    FileCow,
}

#[derive(Default)]
struct Proc {
    /// `mmap()` ranges: start -> (end, is_file).
    maps: BTreeMap<u64, (u64, bool)>,
    start_brk: u64,
    brk: u64,
    comm: String,
    pages: u64,
    anon_pages: u64,
    faults_anon: u64,
    faults_file: u64,
    exited: bool,
}

impl Proc {
    fn fault_kind(&self, addr: u64, error_code: u64) -> FaultKind {
        if let Some((_, &(end, file))) = self.maps.range(..=addr).next_back() {
            if addr < end {
                return match (file, error_code & PF_WRITE != 0) {
                    (false, _) => FaultKind::Anon,
                    (true, false) => FaultKind::File,
                    (true, true) => FaultKind::FileCow,
                };
            }
        }
        if self.start_brk != 0 && addr >= self.start_brk && addr < self.brk.max(self.start_brk) {
            return FaultKind::Anon;
        }
        if error_code & PF_WRITE != 0 {
            FaultKind::Anon
        } else {
            FaultKind::File
        }
    }

    fn unmap(&mut self, start: u64, len: u64) {
        let end = start + len;
        let hit: Vec<u64> = self
            .maps
            .range(..end)
            .filter(|(_, &(e, _))| e > start)
            .map(|(&s, _)| s)
            .collect();
        for s in hit {
            let (e, f) = self.maps.remove(&s).unwrap();
            if s < start {
                self.maps.insert(s, (start, f));
            }
            if e > end {
                self.maps.insert(end, (e, f));
            }
        }
    }
}

struct Live {
    class: Class,
    cpu: u32,
    pid: i32,
    pages: u64,
}

#[derive(Default)]
struct Lifetimes {
    freed_same_cpu: u64,
    freed_other_cpu: u64,
    freed_by_other_pid: u64,
    freed_after_owner_exit: u64,
    never_freed: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: kbuild_summary TRACE USER_S SYS_S")?;
    let user_s: f64 = args.get(1).ok_or("missing USER_S")?.parse()?;
    let sys_s: f64 = args.get(2).ok_or("missing SYS_S")?.parse()?;
    let mut reader = TraceReader::open(Path::new(path))?;
    let mut procs: BTreeMap<i32, Proc> = BTreeMap::new();
    // Per thread: the kind of its last fault, if no other event came since.
    let mut in_fault: BTreeMap<i32, FaultKind> = BTreeMap::new();
    let mut live: BTreeMap<u64, Live> = BTreeMap::new();
    let mut by_class: BTreeMap<Class, [u64; 11]> = BTreeMap::new();
    let mut life: BTreeMap<Class, Lifetimes> = BTreeMap::new();
    let (mut forks, mut execs, mut exits) = (0u64, 0u64, 0u64);
    let (mut faults_user, mut faults_kernel) = (0u64, 0u64);
    let (mut first_ts, mut last_ts) = (u64::MAX, 0u64);
    let mut comm_exec: BTreeMap<String, u64> = BTreeMap::new();
    for ev in reader.by_ref() {
        let ev = ev?;
        first_ts = first_ts.min(ev.ts_ns);
        last_ts = last_ts.max(ev.ts_ns);
        let is_alloc = matches!(
            ev.kind,
            EventKind::PageAlloc { .. }
                | EventKind::PageAllocZoneLocked { .. }
                | EventKind::PagePcpuDrain { .. }
                | EventKind::PageFree { .. }
        );
        match &ev.kind {
            EventKind::PageFaultUser {
                address,
                error_code,
                ..
            }
            | EventKind::PageFaultKernel {
                address,
                error_code,
                ..
            } => {
                if matches!(ev.kind, EventKind::PageFaultUser { .. }) {
                    faults_user += 1;
                } else {
                    faults_kernel += 1;
                }
                let p = procs.entry(ev.pid).or_default();
                let k = p.fault_kind(*address, *error_code);
                match k {
                    FaultKind::Anon | FaultKind::FileCow => p.faults_anon += 1,
                    FaultKind::File => p.faults_file += 1,
                }
                in_fault.insert(ev.tid, k);
                continue;
            }
            EventKind::PageAlloc {
                pfn,
                order,
                gfp_flags,
                ..
            } => {
                let class = if gfp_flags & GFP_MOVABLE == 0 {
                    Class::Kernel
                } else {
                    match in_fault.get(&ev.tid) {
                        Some(FaultKind::Anon | FaultKind::FileCow) => Class::Anon,
                        Some(FaultKind::File) => Class::PageCacheFault,
                        None => Class::PageCacheSyscall,
                    }
                };
                by_class.entry(class).or_insert([0; 11])[(*order as usize).min(10)] += 1;
                let pages = 1u64 << order;
                let p = procs.entry(ev.pid).or_default();
                p.pages += pages;
                if class == Class::Anon {
                    p.anon_pages += pages;
                }
                if let Some(old) = live.insert(
                    *pfn,
                    Live {
                        class,
                        cpu: ev.cpu,
                        pid: ev.pid,
                        pages,
                    },
                ) {
                    // Allocated before and its free not seen: treat as freed.
                    let _ = old;
                }
            }
            EventKind::PageFree { pfn, .. } => {
                if let Some(l) = live.remove(pfn) {
                    let lt = life.entry(l.class).or_default();
                    if l.cpu == ev.cpu {
                        lt.freed_same_cpu += l.pages;
                    } else {
                        lt.freed_other_cpu += l.pages;
                    }
                    if l.pid != ev.pid {
                        lt.freed_by_other_pid += l.pages;
                    }
                    if procs.get(&l.pid).is_some_and(|p| p.exited) {
                        lt.freed_after_owner_exit += l.pages;
                    }
                }
            }
            EventKind::Mmap {
                len,
                flags,
                ret: Some(ret),
                ..
            } if *ret > 0 => {
                let p = procs.entry(ev.pid).or_default();
                let start = *ret as u64;
                p.unmap(start, *len);
                p.maps.insert(
                    start,
                    (
                        start + len.div_ceil(4096) * 4096,
                        flags & MAP_ANONYMOUS == 0,
                    ),
                );
            }
            EventKind::Munmap {
                addr,
                len,
                ret: Some(0),
            } => {
                procs.entry(ev.pid).or_default().unmap(*addr, *len);
            }
            // An entry-only brk (no result recorded) says nothing of the break.
            EventKind::Brk {
                brk,
                ret: Some(ret),
            } => {
                let p = procs.entry(ev.pid).or_default();
                if *brk == 0 || p.start_brk == 0 {
                    p.start_brk = *ret as u64;
                }
                p.brk = *ret as u64;
            }
            EventKind::Fork { child, .. } => {
                forks += 1;
                // The child starts with a copy of the parent's address space.
                let parent = procs.get(&ev.pid);
                let (maps, sb, b) = parent.map_or((BTreeMap::new(), 0, 0), |p| {
                    (p.maps.clone(), p.start_brk, p.brk)
                });
                let c = procs.entry(*child).or_default();
                c.maps = maps;
                c.start_brk = sb;
                c.brk = b;
            }
            EventKind::Exec { pid, filename } => {
                execs += 1;
                let comm = filename.rsplit('/').next().unwrap_or(filename).to_string();
                *comm_exec.entry(comm.clone()).or_default() += 1;
                let p = procs.entry(*pid).or_default();
                p.maps.clear();
                p.start_brk = 0;
                p.brk = 0;
                p.comm = comm;
            }
            EventKind::Exit { pid } => {
                exits += 1;
                if let Some(p) = procs.get_mut(pid) {
                    if *pid == ev.pid {
                        p.exited = true;
                    }
                }
            }
            _ => {}
        }
        if !is_alloc {
            in_fault.remove(&ev.tid);
        }
    }
    for l in live.values() {
        life.entry(l.class).or_default().never_freed += l.pages;
    }
    print_summary(
        &Summary {
            user_s,
            sys_s,
            secs: (last_ts - first_ts) as f64 / 1e9,
            forks,
            execs,
            exits,
            faults_user,
            faults_kernel,
        },
        &by_class,
        &life,
        &procs,
        &comm_exec,
    );
    Ok(())
}

struct Summary {
    user_s: f64,
    sys_s: f64,
    secs: f64,
    forks: u64,
    execs: u64,
    exits: u64,
    faults_user: u64,
    faults_kernel: u64,
}

fn print_summary(
    s: &Summary,
    by_class: &BTreeMap<Class, [u64; 11]>,
    life: &BTreeMap<Class, Lifetimes>,
    procs: &BTreeMap<i32, Proc>,
    comm_exec: &BTreeMap<String, u64>,
) {
    println!(
        "recording: {:.2} s, user {:.2} s, sys {:.2} s; {} forks, {} execs, {} exits",
        s.secs, s.user_s, s.sys_s, s.forks, s.execs, s.exits
    );
    let faults = s.faults_user + s.faults_kernel;
    let (fa, ff): (u64, u64) = procs
        .values()
        .fold((0, 0), |(a, f), p| (a + p.faults_anon, f + p.faults_file));
    println!(
        "faults: {faults} ({} user, {} kernel): anonymous {fa} ({:.1} %), file {ff} ({:.1} %)",
        s.faults_user,
        s.faults_kernel,
        100.0 * fa as f64 / faults as f64,
        100.0 * ff as f64 / faults as f64
    );
    println!("\npage allocations by class and order (blocks):");
    let mut total_pages = 0u64;
    for (c, orders) in by_class {
        let blocks: u64 = orders.iter().sum();
        let pages: u64 = orders.iter().enumerate().map(|(o, n)| n << o).sum();
        total_pages += pages;
        let per: Vec<String> = orders
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(o, n)| format!("o{o}:{n}"))
            .collect();
        println!(
            "  {:<32} {blocks:>9} blocks {pages:>9} pages  [{}]",
            c.name(),
            per.join(" ")
        );
    }
    println!("  {:<32} {:>26} pages", "total", total_pages);
    println!("\npage lifetimes by class (pages):");
    println!(
        "  {:<32} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "class", "same cpu", "other cpu", "other pid", "after exit", "not freed"
    );
    for (c, l) in life {
        println!(
            "  {:<32} {:>10} {:>10} {:>10} {:>12} {:>10}",
            c.name(),
            l.freed_same_cpu,
            l.freed_other_cpu,
            l.freed_by_other_pid,
            l.freed_after_owner_exit,
            l.never_freed
        );
    }
    let anon = by_class.get(&Class::Anon).map_or(0, |o| {
        o.iter().enumerate().map(|(i, n)| n << i).sum::<u64>()
    });
    println!("\nper unit of user time:");
    println!(
        "  user time per page allocated      {:>8.2} us",
        s.user_s * 1e6 / total_pages as f64
    );
    println!(
        "  user time per anonymous page      {:>8.2} us",
        s.user_s * 1e6 / anon as f64
    );
    println!(
        "  user time per fault               {:>8.2} us",
        s.user_s * 1e6 / faults as f64
    );
    println!(
        "  user time per exec                {:>8.2} ms",
        s.user_s * 1e3 / s.execs.max(1) as f64
    );
    println!(
        "  system / user time                {:>8.3}",
        s.sys_s / s.user_s
    );
    let mut per_proc: Vec<u64> = procs.values().map(|p| p.pages).filter(|&n| n > 0).collect();
    per_proc.sort_unstable();
    let q = |f: f64| per_proc[((per_proc.len() - 1) as f64 * f).round() as usize];
    println!(
        "\npages allocated per process ({} processes that allocated): mean {:.0}, \
         quantiles 10 % {} / 25 % {} / 50 % {} / 75 % {} / 90 % {} / 95 % {} / 99 % {} / max {}",
        per_proc.len(),
        per_proc.iter().sum::<u64>() as f64 / per_proc.len() as f64,
        q(0.10),
        q(0.25),
        q(0.50),
        q(0.75),
        q(0.90),
        q(0.95),
        q(0.99),
        q(1.0)
    );
    // Share of all pages allocated by processes of each size class
    // (log2 buckets), for a job-size distribution weighted as the pages are.
    let mut buckets: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for &n in &per_proc {
        let b = buckets.entry(64 - n.leading_zeros()).or_default();
        b.0 += 1;
        b.1 += n;
    }
    println!("  processes by pages allocated (log2 buckets): [lo, hi) processes, pages");
    for (b, (n, pages)) in &buckets {
        println!(
            "    [{:>6}, {:>6})  {:>5}  {:>8}",
            1u64 << (b - 1),
            1u64 << b,
            n,
            pages
        );
    }
    let mut by_comm: BTreeMap<&str, (u64, u64, u64, u64, u64)> = BTreeMap::new();
    for p in procs.values().filter(|p| !p.comm.is_empty()) {
        let e = by_comm.entry(&p.comm).or_default();
        e.0 += 1;
        e.1 += p.pages;
        e.2 += p.anon_pages;
        e.3 += p.faults_anon;
        e.4 += p.faults_file;
    }
    let mut rows: Vec<_> = by_comm.into_iter().collect();
    rows.sort_by_key(|(_, v)| std::cmp::Reverse(v.1));
    println!("\nby program (processes that exec'd it; pages are all classes):");
    println!(
        "  {:<16} {:>7} {:>7} {:>10} {:>10} {:>12} {:>12}",
        "program", "execs", "procs", "pages/proc", "anon/proc", "anon flt/proc", "file flt/proc"
    );
    for (comm, (n, pages, anon, fa, ff)) in rows.iter().take(12) {
        println!(
            "  {:<16} {:>7} {:>7} {:>10.0} {:>10.0} {:>12.0} {:>12.0}",
            comm,
            comm_exec.get(*comm).copied().unwrap_or(0),
            n,
            *pages as f64 / *n as f64,
            *anon as f64 / *n as f64,
            *fa as f64 / *n as f64,
            *ff as f64 / *n as f64
        );
    }
}
