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

use trace::event::{Event, EventKind};
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

/// What the walk over the trace gathers.
#[derive(Default)]
struct Walk {
    procs: BTreeMap<i32, Proc>,
    /// Per thread: the kind of its last fault, if no other event came since.
    in_fault: BTreeMap<i32, FaultKind>,
    live: BTreeMap<u64, Live>,
    by_class: BTreeMap<Class, [u64; 11]>,
    life: BTreeMap<Class, Lifetimes>,
    forks: u64,
    execs: u64,
    exits: u64,
    faults_user: u64,
    faults_kernel: u64,
    first_ts: Option<u64>,
    last_ts: u64,
    comm_exec: BTreeMap<String, u64>,
}

impl Walk {
    fn event(&mut self, ev: &Event) {
        self.first_ts.get_or_insert(ev.ts_ns);
        self.last_ts = self.last_ts.max(ev.ts_ns);
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
            } => {
                self.faults_user += 1;
                self.fault(ev, *address, *error_code);
                return;
            }
            EventKind::PageFaultKernel {
                address,
                error_code,
                ..
            } => {
                self.faults_kernel += 1;
                self.fault(ev, *address, *error_code);
                return;
            }
            EventKind::PageAlloc {
                pfn,
                order,
                gfp_flags,
                ..
            } => self.alloc(ev, *pfn, *order, *gfp_flags),
            EventKind::PageFree { pfn, .. } => self.free(ev, *pfn),
            _ => self.address_space(ev),
        }
        if !is_alloc {
            self.in_fault.remove(&ev.tid);
        }
    }

    fn fault(&mut self, ev: &Event, address: u64, error_code: u64) {
        let p = self.procs.entry(ev.pid).or_default();
        let k = p.fault_kind(address, error_code);
        match k {
            FaultKind::Anon | FaultKind::FileCow => p.faults_anon += 1,
            FaultKind::File => p.faults_file += 1,
        }
        self.in_fault.insert(ev.tid, k);
    }

    fn alloc(&mut self, ev: &Event, pfn: u64, order: u32, gfp_flags: u64) {
        let class = if gfp_flags & GFP_MOVABLE == 0 {
            Class::Kernel
        } else {
            match self.in_fault.get(&ev.tid) {
                Some(FaultKind::Anon | FaultKind::FileCow) => Class::Anon,
                Some(FaultKind::File) => Class::PageCacheFault,
                None => Class::PageCacheSyscall,
            }
        };
        self.by_class.entry(class).or_insert([0; 11])[(order as usize).min(10)] += 1;
        let pages = 1u64 << order;
        let p = self.procs.entry(ev.pid).or_default();
        p.pages += pages;
        if class == Class::Anon {
            p.anon_pages += pages;
        }
        // A pfn allocated before whose free was not seen is taken as freed.
        let live = Live {
            class,
            cpu: ev.cpu,
            pid: ev.pid,
            pages,
        };
        self.live.insert(pfn, live);
    }

    fn free(&mut self, ev: &Event, pfn: u64) {
        let Some(l) = self.live.remove(&pfn) else {
            return;
        };
        let lt = self.life.entry(l.class).or_default();
        if l.cpu == ev.cpu {
            lt.freed_same_cpu += l.pages;
        } else {
            lt.freed_other_cpu += l.pages;
        }
        if l.pid != ev.pid {
            lt.freed_by_other_pid += l.pages;
        }
        if self.procs.get(&l.pid).is_some_and(|p| p.exited) {
            lt.freed_after_owner_exit += l.pages;
        }
    }

    /// mmap, munmap, brk, fork, exec and exit: each process's mappings.
    fn address_space(&mut self, ev: &Event) {
        match &ev.kind {
            EventKind::Mmap {
                len,
                flags,
                ret: Some(ret),
                ..
            } if *ret > 0 => {
                let p = self.procs.entry(ev.pid).or_default();
                let start = *ret as u64;
                p.unmap(start, *len);
                let end = start + len.div_ceil(4096) * 4096;
                p.maps.insert(start, (end, flags & MAP_ANONYMOUS == 0));
            }
            EventKind::Munmap {
                addr,
                len,
                ret: Some(0),
            } => self.procs.entry(ev.pid).or_default().unmap(*addr, *len),
            // An entry-only brk (no result recorded) says nothing of the break.
            EventKind::Brk {
                brk,
                ret: Some(ret),
            } => {
                let p = self.procs.entry(ev.pid).or_default();
                if *brk == 0 || p.start_brk == 0 {
                    p.start_brk = *ret as u64;
                }
                p.brk = *ret as u64;
            }
            EventKind::Fork { child, .. } => self.fork(ev.pid, *child),
            EventKind::Exec { pid, filename } => self.exec(*pid, filename),
            EventKind::Exit { pid } => {
                self.exits += 1;
                if let Some(p) = self.procs.get_mut(pid) {
                    if *pid == ev.pid {
                        p.exited = true;
                    }
                }
            }
            _ => {}
        }
    }

    fn fork(&mut self, parent: i32, child: i32) {
        self.forks += 1;
        // The child starts with a copy of the parent's address space.
        let (maps, sb, b) = self
            .procs
            .get(&parent)
            .map_or((BTreeMap::new(), 0, 0), |p| {
                (p.maps.clone(), p.start_brk, p.brk)
            });
        let c = self.procs.entry(child).or_default();
        c.maps = maps;
        c.start_brk = sb;
        c.brk = b;
    }

    fn exec(&mut self, pid: i32, filename: &str) {
        self.execs += 1;
        let comm = filename.rsplit('/').next().unwrap_or(filename).to_string();
        *self.comm_exec.entry(comm.clone()).or_default() += 1;
        let p = self.procs.entry(pid).or_default();
        p.maps.clear();
        p.start_brk = 0;
        p.brk = 0;
        p.comm = comm;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: kbuild_summary TRACE USER_S SYS_S")?;
    let user_s: f64 = args.get(1).ok_or("missing USER_S")?.parse()?;
    let sys_s: f64 = args.get(2).ok_or("missing SYS_S")?.parse()?;
    let mut reader = TraceReader::open(Path::new(path))?;
    let mut w = Walk::default();
    for ev in reader.by_ref() {
        w.event(&ev?);
    }
    for l in w.live.values() {
        w.life.entry(l.class).or_default().never_freed += l.pages;
    }
    let secs = (w.last_ts - w.first_ts.unwrap_or(w.last_ts)) as f64 / 1e9;
    print_header(&w, user_s, sys_s, secs);
    print_classes(&w);
    print_rates(&w, user_s, sys_s);
    print_processes(&w);
    print_programs(&w);
    Ok(())
}

fn pages_of(orders: &[u64; 11]) -> u64 {
    orders.iter().enumerate().map(|(o, n)| n << o).sum()
}

fn print_header(w: &Walk, user_s: f64, sys_s: f64, secs: f64) {
    println!(
        "recording: {secs:.2} s, user {user_s:.2} s, sys {sys_s:.2} s; {} forks, {} execs, {} exits",
        w.forks, w.execs, w.exits
    );
    let faults = w.faults_user + w.faults_kernel;
    let (fa, ff): (u64, u64) = w
        .procs
        .values()
        .fold((0, 0), |(a, f), p| (a + p.faults_anon, f + p.faults_file));
    println!(
        "faults: {faults} ({} user, {} kernel): anonymous {fa} ({:.1} %), file {ff} ({:.1} %)",
        w.faults_user,
        w.faults_kernel,
        100.0 * fa as f64 / faults as f64,
        100.0 * ff as f64 / faults as f64
    );
}

fn print_classes(w: &Walk) {
    println!("\npage allocations by class and order (blocks):");
    let mut total_pages = 0u64;
    for (c, orders) in &w.by_class {
        let blocks: u64 = orders.iter().sum();
        let pages = pages_of(orders);
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
    for (c, l) in &w.life {
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
}

fn print_rates(w: &Walk, user_s: f64, sys_s: f64) {
    let total_pages: u64 = w.by_class.values().map(pages_of).sum();
    let anon = w.by_class.get(&Class::Anon).map_or(0, pages_of);
    let faults = w.faults_user + w.faults_kernel;
    println!("\nper unit of user time:");
    println!(
        "  user time per page allocated      {:>8.2} us",
        user_s * 1e6 / total_pages as f64
    );
    println!(
        "  user time per anonymous page      {:>8.2} us",
        user_s * 1e6 / anon as f64
    );
    println!(
        "  user time per fault               {:>8.2} us",
        user_s * 1e6 / faults as f64
    );
    println!(
        "  user time per exec                {:>8.2} ms",
        user_s * 1e3 / w.execs.max(1) as f64
    );
    println!(
        "  system / user time                {:>8.3}",
        sys_s / user_s
    );
}

fn print_processes(w: &Walk) {
    let mut per_proc: Vec<u64> = w
        .procs
        .values()
        .map(|p| p.pages)
        .filter(|&n| n > 0)
        .collect();
    if per_proc.is_empty() {
        return;
    }
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
}

fn print_programs(w: &Walk) {
    let mut by_comm: BTreeMap<&str, (u64, u64, u64, u64, u64)> = BTreeMap::new();
    for p in w.procs.values().filter(|p| !p.comm.is_empty()) {
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
            w.comm_exec.get(*comm).copied().unwrap_or(0),
            n,
            *pages as f64 / *n as f64,
            *anon as f64 / *n as f64,
            *fa as f64 / *n as f64,
            *ff as f64 / *n as f64
        );
    }
}
