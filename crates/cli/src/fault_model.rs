//! One fault pattern, two kernels: a [`native::faults::FaultPattern`] (the
//! description that `native` runs on the live kernel) translated into the
//! model's system calls and user accesses, so that the same definition drives
//! both and their counts can be compared (`mmlab bench faults`,
//! `crates/cli/tests/model_vs_live.rs`).
//!
//! # The translation
//!
//! | live child (native::faults)                      | model (mm)                                  |
//! |--------------------------------------------------|---------------------------------------------|
//! | THP knobs set for the run                        | the same knobs on the preset's config       |
//! | `mmap(len + 4 MiB, PROT_NONE)` reservation       | `mmap` + `mprotect(PROT_NONE)`              |
//! | `mmap(MAP_FIXED)` of the region at `offset` past a 2 MiB boundary, then the advice | `mmap` fixed, `madvise` |
//! | touch one byte per 4 KiB in the pattern's order  | `user_access_fresh()`, else `handle_mm_fault()` |
//! | `munmap` a range, map it again, touch all again  | `munmap`, `mmap` fixed + advice, touch      |
//! | `fork`, the child writes every 4 KiB, exits      | `fork()`, writes in the child's mm, `exit_mmap()` |
//!
//! A phase's faults are the address space's `ru_minflt` difference (the
//! child's for the fork writer), as the live child measures with
//! `getrusage()`; the counters are the model's `/proc/vmstat` and per-size
//! stats after the run (the model runs nothing else).
//!
//! The model runs the pattern on a machine of 2 CPUs with enough memory for
//! it (the region twice over, plus 1 GiB), with the uniform cost table: the
//! counts do not depend on costs. [`run_model_opts`] takes a cost table, a
//! memory size and extra knobs instead, and reports the model's time of each
//! timed phase (`mmlab calibrate` fits and checks costs with it).

use mm::cost::{Cost, CostTable, Cx};
use mm::knobs::{KernelConfig, KnobValue, Preset};
use mm::memory::{exit_mmap, fork, handle_mm_fault, user_access_fresh, MmGlobal};
use mm::mprotect::Prot;
use mm::page_alloc::{MemoryLayout, NodeLayout, PageAlloc};
use mm::pgtable::PMD_SIZE;
use mm::vma::{Advice, MmStruct};
use mm::vmstat::VmStat;
use mm::Vaddr;
use mm::{SimTime, VcpuId};
use native::faults::{Access, FaultPattern, Step};
use native::knobs::{ThpEnabled, ThpKnobs};
use std::time::Instant;

/// The per-size knobs the model has (16 KiB to 2 MiB).
pub const MODEL_SIZES_KB: [u32; 8] = [16, 32, 64, 128, 256, 512, 1024, 2048];

/// What the model did with a pattern.
#[derive(Clone, Debug)]
pub struct ModelFaultReport {
    /// Faults of the touch phase.
    pub touch: u64,
    /// Faults of each step, in order.
    pub steps: Vec<u64>,
    /// Host nanoseconds the model spent in the touch phase.
    pub touch_host_ns: u64,
    /// Host CPU nanoseconds this thread ran during the touch phase
    /// (`CLOCK_THREAD_CPUTIME_ID`): on a shared host, the rate per
    /// CPU-second does not count time spent waiting for a core.
    pub touch_cpu_ns: u64,
    /// The counters after the run.
    pub vmstat: VmStat,
    /// Model nanoseconds of the touch phase's faults: the sum of the
    /// computation each fault charged under [`ModelOpts::table`] (no lock
    /// waits: one CPU, nothing contends), and [`Cost::FreshPteTouch`] of
    /// each access that is the first to a large folio's other pages.
    pub touch_model_ns: u64,
    /// Model nanoseconds of each step's timed part (the re-touch, or the
    /// fork writer's faults), in order.
    pub steps_model_ns: Vec<u64>,
}

/// How the model runs a pattern.
#[derive(Clone, Debug)]
pub struct ModelOpts {
    /// The cost table the faults are charged with.
    pub table: CostTable,
    /// Pages of the model's one node; `None`: the region twice over plus
    /// 1 GiB. The PCP lists' `high` and the watermarks scale with it.
    pub nr_pages: Option<u64>,
    /// Pages of the node that form ZONE_DMA32 (the rest are ZONE_NORMAL).
    pub dma32_pages: u64,
    /// Knobs set on the preset besides the pattern's THP knobs
    /// (`vm.percpu_pagelist_high_fraction`).
    pub knobs: Vec<(String, KnobValue)>,
    /// Bytes of the last-level cache both CPUs share; 0: no LLC model
    /// (lines never leave the cache). With it, a `struct page` line the
    /// model's traffic has pushed out costs `dram_local_ns` when a fault
    /// loads it ([`mm::cacheline::LlcClocks`]).
    pub llc_bytes: u64,
}

impl Default for ModelOpts {
    /// Every step 1 ns, memory for the region, no extra knobs: the counts do
    /// not depend on costs.
    fn default() -> ModelOpts {
        ModelOpts {
            table: CostTable::uniform(1),
            nr_pages: None,
            dma32_pages: 0,
            knobs: Vec::new(),
            llc_bytes: 0,
        }
    }
}

impl ModelFaultReport {
    /// A `/proc/vmstat` counter.
    pub fn vm(&self, name: &str) -> u64 {
        self.vmstat
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| v)
    }

    /// A per-size statistic (`hugepages-<size>kB/stats/<name>`); 0 for a
    /// size the model does not have.
    pub fn size(&self, size_kb: u32, name: &str) -> u64 {
        self.vmstat.try_mthp_stat(size_kb as u64, name).unwrap_or(0)
    }
}

fn word(v: ThpEnabled) -> &'static str {
    v.as_str()
}

/// The kernel configuration of `preset` with the pattern's THP knobs.
/// A size the host has and the model does not (8 KiB) must be `never`.
pub fn model_config(knobs: &ThpKnobs, preset: Preset) -> Result<KernelConfig, String> {
    let mut cfg = preset.config();
    let set = |cfg: &mut KernelConfig, name: &str, v: &str| {
        cfg.set_knob(name, &KnobValue::Str(v.to_string()))
            .map_err(|e| format!("{name} = {v}: {e}"))
    };
    set(
        &mut cfg,
        "transparent_hugepage/enabled",
        word(knobs.enabled),
    )?;
    let mthp = cfg.mm.anon_folio == mm::memory::AnonFolioPolicy::Mthp;
    for &(kb, v) in &knobs.sizes {
        if !MODEL_SIZES_KB.contains(&kb) && v != ThpEnabled::Never {
            return Err(format!("hugepages-{kb}kB: the model has no such size"));
        }
    }
    if mthp {
        for kb in MODEL_SIZES_KB {
            let name = format!("transparent_hugepage/hugepages-{kb}kB/enabled");
            set(&mut cfg, &name, word(knobs.value_for(kb)))?;
        }
    }
    Ok(cfg)
}

/// The model's world for one pattern.
struct World {
    pa: PageAlloc,
    cx: Cx,
    g: MmGlobal,
    /// Computation charged by every fault so far, and the user accesses'
    /// [`Cost::FreshPteTouch`].
    fault_ns: u64,
}

impl World {
    fn touch_page(&mut self, mm: &mut MmStruct, a: u64, write: bool) -> Result<(), String> {
        if let Some((_, fresh)) = user_access_fresh(&mut self.pa, mm, Vaddr(a), write) {
            // The engine charges the same on the access (touch_chunk()).
            if fresh {
                self.fault_ns += self.cx.table().get(Cost::FreshPteTouch);
            }
            return Ok(());
        }
        // Each fault is one kernel entry, as the engine runs it: the
        // segments of the previous one are dropped rather than piled up
        // (nothing here plays them on virtual time).
        self.cx.begin(VcpuId(0), SimTime(0));
        handle_mm_fault(&mut self.pa, &mut self.cx, &mut self.g, mm, Vaddr(a), write)
            .map_err(|e| format!("fault at {a:#x}: {e:?}"))?;
        self.fault_ns += self.cx.compute_ns();
        // The access again, which now succeeds (and marks the page used).
        user_access_fresh(&mut self.pa, mm, Vaddr(a), write);
        Ok(())
    }

    fn touch_all(
        &mut self,
        mm: &mut MmStruct,
        start: u64,
        order: &[u32],
        write: bool,
    ) -> Result<u64, String> {
        let before = mm.nr_faults;
        for &p in order {
            self.touch_page(mm, start + p as u64 * 4096, write)?;
        }
        Ok(mm.nr_faults - before)
    }

    fn map_fixed(&mut self, mm: &mut MmStruct, a: u64, len: u64, advice: Option<Advice>) {
        let got = mm.mmap(
            &mut self.pa,
            &mut self.cx,
            Vaddr(a),
            len,
            mm::vma::MapFlags::FIXED,
        );
        assert_eq!(got, Ok(Vaddr(a)), "MAP_FIXED inside the reservation");
        if let Some(adv) = advice {
            mm.madvise(&mut self.pa, &mut self.cx, Vaddr(a), len, adv)
                .expect("madvise on the new mapping");
        }
    }
}

/// Runs `pattern` through the model under `preset`. Errors: knobs the model
/// cannot set, an invalid pattern, or a fault that fails.
pub fn run_model(pattern: &FaultPattern, preset: Preset) -> Result<ModelFaultReport, String> {
    run_model_opts(pattern, preset, &ModelOpts::default())
}

/// [`run_model`] with a cost table, a memory size and extra knobs.
pub fn run_model_opts(
    pattern: &FaultPattern,
    preset: Preset,
    opts: &ModelOpts,
) -> Result<ModelFaultReport, String> {
    pattern.validate().map_err(|e| e.to_string())?;
    let mut cfg = model_config(&pattern.knobs, preset)?;
    for (name, v) in &opts.knobs {
        cfg.set_knob(name, v).map_err(|e| format!("{name}: {e}"))?;
    }
    let len = pattern.len_bytes as u64;
    let nr_pages = opts.nr_pages.unwrap_or(2 * len.div_ceil(4096) + (1 << 18));
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages,
        }],
        dma32_pages: opts.dma32_pages,
    };
    let mut w = World {
        pa: PageAlloc::new(&layout, cfg.sysctl, cfg.pcp),
        cx: Cx::new(VcpuId(0), opts.table.clone()),
        g: MmGlobal::new(cfg.mm),
        fault_ns: 0,
    };
    if opts.llc_bytes > 0 {
        w.pa.set_llc_lines();
        w.cx.set_llc(mm::cacheline::LlcClocks::new(opts.llc_bytes, None, 2));
    }
    let mut mm = MmStruct::new(&mut w.pa, &mut w.cx, w.g.cfg.mmap_layout)
        .map_err(|e| format!("mm_alloc: {e:?}"))?;
    // The PROT_NONE reservation and the region inside it.
    let reserve = len + 2 * PMD_SIZE;
    let raw = mm
        .mmap(
            &mut w.pa,
            &mut w.cx,
            Vaddr(0),
            reserve,
            mm::vma::MapFlags::NONE,
        )
        .map_err(|e| format!("reservation: {e}"))?;
    mm.mprotect(&mut w.pa, &mut w.cx, raw, reserve, Prot::NONE)
        .map_err(|e| format!("reservation: {e}"))?;
    let start = raw.0.next_multiple_of(PMD_SIZE) + pattern.offset_bytes as u64;
    let advice = match pattern.advice {
        native::faults::Advice::None => None,
        native::faults::Advice::Hugepage => Some(Advice::HugePage),
        native::faults::Advice::NoHugepage => Some(Advice::NoHugePage),
    };
    w.map_fixed(&mut mm, start, len, advice);
    let order = pattern.touch_order();
    let write = pattern.access == Access::Write;
    let cpu0 = native::sys::thread_cpu_ns();
    let t0 = Instant::now();
    let touch = w.touch_all(&mut mm, start, &order, write)?;
    let touch_host_ns = t0.elapsed().as_nanos() as u64;
    let touch_cpu_ns = native::sys::thread_cpu_ns() - cpu0;
    let touch_model_ns = w.fault_ns;
    let mut steps = Vec::new();
    let mut steps_model_ns = Vec::new();
    for step in &pattern.steps {
        match *step {
            Step::MunmapRetouch {
                offset_bytes,
                len_bytes,
            } => {
                let a = start + offset_bytes as u64;
                mm.munmap(&mut w.pa, &mut w.cx, Vaddr(a), len_bytes as u64)
                    .map_err(|e| format!("munmap: {e}"))?;
                w.map_fixed(&mut mm, a, len_bytes as u64, advice);
                let ns0 = w.fault_ns;
                steps.push(w.touch_all(&mut mm, start, &order, write)?);
                steps_model_ns.push(w.fault_ns - ns0);
            }
            Step::ForkWriter => {
                let mut child =
                    fork(&mut w.pa, &mut w.cx, &mut mm).map_err(|e| format!("fork: {e:?}"))?;
                let all: Vec<u32> = (0..pattern.nr_pages() as u32).collect();
                let ns0 = w.fault_ns;
                steps.push(w.touch_all(&mut child, start, &all, true)?);
                steps_model_ns.push(w.fault_ns - ns0);
                exit_mmap(&mut w.pa, &mut w.cx, child);
            }
        }
    }
    exit_mmap(&mut w.pa, &mut w.cx, mm);
    Ok(ModelFaultReport {
        touch,
        steps,
        touch_host_ns,
        touch_cpu_ns,
        vmstat: w.pa.vmstat.clone(),
        touch_model_ns,
        steps_model_ns,
    })
}
