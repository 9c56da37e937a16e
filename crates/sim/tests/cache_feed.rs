//! The engine feeding its cache model: THP clearing in the kernel's sub-page
//! order, the 4.18 THP copy-on-write, and user writes line by line; the
//! time they cost; and nothing of it when the model is off.

use mm::cost::CostTable;
use mm::knobs::{KnobValue, Preset};
use mm::memory::MmConfig;
use mm::page_alloc::PageAlloc;
use mm::vma::MapFlags;
use mm::{VcpuId, PAGE_SIZE};
use sim::cache::{CacheConfig, CacheCosts, CacheModel, LlcInclusion};
use sim::{Engine, Machine, NodeSpec, Op, OpResult, Program, Rng, RunStats, TaskSpec};

const MIB: u64 = 1 << 20;
const THP: u64 = 2 * MIB;
/// Lines in a THP.
const THP_LINES: u64 = THP / 64;

/// Maps `len` bytes and writes every line of it once, page by page from the
/// start (usemem), optionally forking `children` that do the same to the
/// parent's memory (copy-on-write) first.
struct Writer {
    len: u64,
    step: u32,
    addr: u64,
    children: u32,
}

impl Program for Writer {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.step += 1;
        match self.step {
            // 2 MiB-aligned, so that the 4.18 preset (no THP alignment of
            // mmap) maps THPs.
            1 => Some(Op::Mmap {
                len: self.len,
                hint: Some(1 << 30),
                flags: MapFlags::FIXED,
                advice: None,
            }),
            2 => {
                let OpResult::Mapped(Ok(a)) = last else {
                    panic!("mmap failed: {last:?}")
                };
                self.addr = a;
                Some(write_all(a, self.len))
            }
            s if s <= 2 + self.children => Some(Op::fork(Child {
                addr: self.addr,
                len: self.len,
                step: 0,
            })),
            s if s == 3 + self.children && self.children > 0 => Some(Op::Wait),
            _ => None,
        }
    }
}

struct Child {
    addr: u64,
    len: u64,
    step: u32,
}

impl Program for Child {
    fn next(&mut self, _last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.step += 1;
        (self.step == 1).then(|| write_all(self.addr, self.len))
    }
}

fn write_all(addr: u64, len: u64) -> Op {
    Op::Touch {
        addr,
        len,
        stride: PAGE_SIZE,
        bytes: PAGE_SIZE,
        write: true,
    }
}

fn config(clear: &str, copy: &str) -> MmConfig {
    let mut cfg = Preset::Linux4_18.config();
    for (k, v) in [
        ("transparent_hugepage/enabled", "always"),
        ("mmlab.huge_clear_order", clear),
        ("mmlab.huge_copy_order", copy),
    ] {
        cfg.set_knob(k, &KnobValue::Str(v.into())).unwrap();
    }
    cfg.mm
}

const COSTS: CacheCosts = CacheCosts {
    l2_hit_line_ps: 1000,
    llc_hit_line_ps: 2000,
    dram_line_ps: 7000,
    dram_socket_line_ps: 0,
    user_line_ps: 500,
};

/// One socket of `cpus` CPUs, 1 MiB 16-way LLC, 64 KiB 4-way L2s: a THP
/// is twice the LLC, so the order of a clear decides what survives it.
fn run(cpus: u32, cfg: MmConfig, cache: bool, program: impl Program + 'static) -> RunStats {
    run_with(cpus, cfg, cache.then_some(COSTS), vec![Box::new(program)])
}

/// Runs `programs`, the i-th on CPU i, with the cache model at `costs`.
fn run_with(
    cpus: u32,
    cfg: MmConfig,
    costs: Option<CacheCosts>,
    programs: Vec<Box<dyn Program>>,
) -> RunStats {
    let m = Machine {
        name: "test".into(),
        nodes: vec![NodeSpec {
            cpus,
            memory_bytes: 256 * MIB,
        }],
        llc_bytes: MIB,
        dma32_bytes: 0,
    };
    let pa = PageAlloc::new(&m.memory_layout(), Default::default(), Default::default());
    let mut eng = Engine::new(pa, CostTable::uniform(10), 1).with_mm_config(cfg);
    if let Some(costs) = costs {
        let c = CacheModel::new(CacheConfig {
            llc_size_bytes: MIB,
            llc_ways: 16,
            line_bytes: 64,
            l2: Some((64 << 10, 4)),
            sockets: 1,
            cpus_per_socket: cpus,
            inclusion: LlcInclusion::Inclusive,
        })
        .unwrap();
        eng = eng.with_cache(c, costs);
    }
    for (i, p) in programs.into_iter().enumerate() {
        eng.spawn(TaskSpec::new(p, VcpuId(i as u32)));
    }
    eng.run()
}

fn writer(len: u64, children: u32) -> Writer {
    Writer {
        len,
        step: 0,
        addr: 0,
        children,
    }
}

/// One process, one THP: the kernel clears 512 sub-pages (plus the page
/// tables it allocates), then the user writes the 32,768 lines. With the
/// target sub-page (0, where the write starts) cleared last, the first
/// lines the user writes are still cached; cleared first, none is (a THP is
/// twice the LLC and LRU keeps the last MiB).
#[test]
fn thp_clear_order_decides_what_the_first_touch_finds() {
    let seq = run(1, config("sequential", "sequential"), true, writer(THP, 0));
    let tl = run(
        1,
        config("target-last", "target-last"),
        true,
        writer(THP, 0),
    );
    for r in [&seq, &tl] {
        // Every user line and every cleared line went through the cache.
        let user = r.cache.accesses() - r.cache_kernel.accesses();
        assert_eq!(user, THP_LINES);
        assert!(r.cache_kernel.writes >= THP_LINES, "{:?}", r.cache_kernel);
        assert_eq!(r.touch_bytes, THP);
    }
    let user_misses = |r: &RunStats| r.cache.llc_misses - r.cache_kernel.llc_misses;
    // Sequential: the clear streamed 2 MiB through a 1 MiB LLC, so the
    // user's sweep from the start misses on every line.
    assert_eq!(user_misses(&seq), THP_LINES);
    // Target-last: the last MiB cleared is the first half of the page,
    // which the user writes first: those lines hit.
    assert!(
        user_misses(&tl) <= THP_LINES / 2 + 64,
        "target-last user misses {}",
        user_misses(&tl)
    );
    assert!(tl.user_ns < seq.user_ns);
    assert!(tl.runtime_ns < seq.runtime_ns);
    assert!(tl.touch_bytes_per_s > seq.touch_bytes_per_s);
}

/// The 4.18 THP copy-on-write copies 512 sub-pages: 32,768 source reads
/// and 32,768 destination writes per child, in the copy order.
#[test]
fn thp_cow_copies_through_the_cache() {
    let seq = run(2, config("target-last", "sequential"), true, writer(THP, 1));
    let tl = run(
        2,
        config("target-last", "target-last"),
        true,
        writer(THP, 1),
    );
    for r in [&seq, &tl] {
        // Parent: clear + writes; child: copy (read + write) + writes.
        assert!(r.cache_kernel.reads >= THP_LINES, "{:?}", r.cache_kernel);
        assert_eq!(
            r.cache.accesses() - r.cache_kernel.accesses(),
            2 * THP_LINES
        );
    }
    let user_misses = |r: &RunStats| r.cache.llc_misses - r.cache_kernel.llc_misses;
    assert!(
        user_misses(&tl) < user_misses(&seq),
        "target-last {} vs sequential {}",
        user_misses(&tl),
        user_misses(&seq)
    );
}

/// Off, the engine records no memory traffic and charges the cost table's
/// clear_page/copy_page; on, the clears cost what the levels say. The same
/// seed gives the same result twice.
#[test]
fn off_records_nothing_and_on_is_deterministic() {
    let off = run(
        1,
        config("target-last", "target-last"),
        false,
        writer(THP, 1),
    );
    assert_eq!(off.cache, Default::default());
    assert_eq!(off.cache_kernel, Default::default());
    let a = run(
        1,
        config("target-last", "target-last"),
        true,
        writer(THP, 1),
    );
    let b = run(
        1,
        config("target-last", "target-last"),
        true,
        writer(THP, 1),
    );
    assert_eq!(a, b);
    assert_ne!(a.runtime_ns, off.runtime_ns);
    assert_eq!(a.touch_bytes, off.touch_bytes);
}

/// Writes a fresh anonymous region (4 KiB pages: THP off), page by page.
struct Fresh(u32);

impl Program for Fresh {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.0 += 1;
        match (self.0, last) {
            (1, _) => Some(Op::Mmap {
                len: THP,
                hint: None,
                flags: MapFlags::NONE,
                advice: None,
            }),
            (2, OpResult::Mapped(Ok(a))) => Some(write_all(a, THP)),
            _ => None,
        }
    }
}

/// Misses queue for the socket's memory channels: a core streaming alone
/// is not slowed by channels faster than it, but two cores whose misses
/// together need more than the channels give take longer than one.
#[test]
fn misses_queue_for_the_sockets_memory_channels() {
    let cfg = config("target-last", "target-last");
    let mut never = cfg;
    never.thp_enabled = mm::memory::ThpEnabled::Never;
    let with = |socket_ps: u64, n: u32| {
        let costs = CacheCosts {
            dram_socket_line_ps: socket_ps,
            ..COSTS
        };
        let programs: Vec<Box<dyn Program>> = (0..n)
            .map(|_| Box::new(Fresh(0)) as Box<dyn Program>)
            .collect();
        run_with(2, never, Some(costs), programs)
    };
    // One core: channels at 1/7 of the core's miss time never queue.
    assert_eq!(with(1000, 1).runtime_ns, with(0, 1).runtime_ns);
    // Two cores, channels as slow as one core's misses: the pair takes
    // longer than either alone, but not longer than one after the other.
    let alone = with(7000, 1).runtime_ns;
    let both = with(7000, 2).runtime_ns;
    assert!(both > alone + alone / 4, "alone {alone} both {both}");
    assert!(both <= 2 * alone + alone / 10, "alone {alone} both {both}");
    // Without a limit the two slow each other only through the shared LLC
    // and the allocator's locks.
    let free = with(0, 2).runtime_ns;
    assert!(
        free < both && free < alone + alone / 10,
        "alone {alone} both {both} unlimited {free}"
    );
}

/// vm-scalability's anon-cow-seq-hugetlb in miniature: a pool of 2 MiB
/// pages, a parent that maps and writes one `MAP_HUGETLB` page, and one
/// forked child that writes it too (a `hugetlb_wp()` copy).
struct HugetlbWriter {
    step: u32,
    addr: u64,
}

impl Program for HugetlbWriter {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.step += 1;
        match self.step {
            1 => Some(Op::SetHugepages {
                nr_hugepages: Some(2),
                nr_overcommit_hugepages: None,
            }),
            2 => Some(Op::MmapHugetlb {
                len: THP,
                hint: None,
                flags: MapFlags::NONE,
            }),
            3 => {
                let OpResult::Mapped(Ok(a)) = last else {
                    panic!("hugetlb mmap failed: {last:?}")
                };
                self.addr = a;
                Some(write_all(a, THP))
            }
            4 => Some(Op::fork(Child {
                addr: self.addr,
                len: THP,
                step: 0,
            })),
            5 => Some(Op::Wait),
            _ => None,
        }
    }
}

fn config_618(clear: &str, copy: &str) -> MmConfig {
    let mut cfg = Preset::Linux6_18.config();
    cfg.set_knob("mmlab.huge_clear_order", &KnobValue::Str(clear.into()))
        .unwrap();
    cfg.set_knob("mmlab.huge_copy_order", &KnobValue::Str(copy.into()))
        .unwrap();
    cfg.mm
}

/// On Linux 6.18 (where an anonymous THP copy-on-write splits the PMD), a
/// hugetlb copy-on-write still copies all 2 MiB through
/// `copy_user_large_folio()` in the order of `mmlab.huge_copy_order`, and the
/// cache model sees that order: the child writes the page from its start
/// (the target sub-page 0), a THP is twice the LLC, so it finds cached only
/// the sub-pages copied last.
#[test]
fn hugetlb_cow_copies_in_the_configured_order_through_the_cache() {
    let user_misses = |r: &RunStats| r.cache.llc_misses - r.cache_kernel.llc_misses;
    let run_order = |copy: &str| {
        let r = run_with(
            2,
            config_618("sequential", copy),
            Some(COSTS),
            vec![Box::new(HugetlbWriter { step: 0, addr: 0 })],
        );
        // The kernel reads only the copy's source: one 2 MiB page.
        assert_eq!(
            r.cache_kernel.reads, THP_LINES,
            "{copy}: {:?}",
            r.cache_kernel
        );
        // The parent's and the child's writes, every line once.
        assert_eq!(
            r.cache.accesses() - r.cache_kernel.accesses(),
            2 * THP_LINES
        );
        assert_eq!(r.touch_bytes, 2 * THP);
        r
    };
    let seq = run_order("sequential");
    let tl = run_order("target-last");
    let nb = run_order("neighbourhood");
    // The parent's page was cleared sequentially: its first writes find
    // nothing; neither do the child's after a sequential copy.
    assert_eq!(user_misses(&seq), 2 * THP_LINES);
    // Neighbourhood copies sub-pages 3..511 ascending, then 2, 1, 0: the
    // child finds those three sub-pages (192 lines) cached, nothing more.
    assert_eq!(user_misses(&nb), 2 * THP_LINES - 3 * 64);
    // Target-last copies 511 down to 0: the last MiB of the copy's traffic
    // is the first 512 KiB of source and destination, so the child's first
    // 8,192 lines hit, about.
    let tl_child = user_misses(&tl) - THP_LINES;
    assert!(
        (THP_LINES - 8192 - 256..=THP_LINES - 8192 + 256).contains(&tl_child),
        "target-last child misses {tl_child}"
    );
    assert!(tl.user_ns < nb.user_ns && nb.user_ns < seq.user_ns);
}
