//! The model's side of a calibration: what the model charges for each
//! measured operation, as a linear function of the costs, and the
//! least-squares fit of the costs the micro-benchmarks cannot give alone.
//!
//! # Why this measures the same step the model charges
//!
//! The model's time for an operation is linear in the cost table: every
//! step charges `n_c × cost_c`. Running the model's twin of a live
//! operation with a table that is zero except for one cost gives `n_c`, the
//! number of times that operation charges that cost (the "column" of the
//! cost). A live measurement `T` then reads `T = Σ n_c × cost_c`: one
//! equation per operation, in exactly the steps the model charges for it.
//! Costs that a micro-benchmark measures directly are known; the others are
//! the unknowns of a weighted least-squares fit over all equations (each
//! weighted by 1/T, so that a cheap operation counts as much as an
//! expensive one). Costs that are always charged together in every
//! operation cannot be told apart: they form a group whose members keep
//! their previous values' ratio and are scaled by one fitted factor.

use crate::fault_model::ModelOpts;
use mm::cost::{Cost, CostTable, Cx};
use mm::knobs::{KernelConfig, KnobValue, Preset};
use mm::memory::{exit_mmap, fork, handle_mm_fault, MmGlobal};
use mm::mprotect::Prot;
use mm::page_alloc::{MemoryLayout, NodeLayout, PageAlloc};
use mm::vma::{Advice, MmStruct};
use mm::Vaddr;
use mm::{SimTime, VcpuId};

/// An operation on a populated region of 4 KiB pages whose model time is
/// compared with the live kernel's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionOp {
    /// `munmap` of the whole region.
    Munmap,
    /// `mprotect` read-only then read-write again (per call).
    Mprotect,
    /// `fork`: the parent's side (the page-table copy).
    Fork,
}

/// The model's world of one region operation.
struct RegionWorld {
    pa: PageAlloc,
    cx: Cx,
    mm: MmStruct,
    addr: u64,
}

fn region_world(opts: &ModelOpts, pages: u64) -> Result<RegionWorld, String> {
    let cfg = host_config(&opts.knobs)?;
    let layout = MemoryLayout {
        nodes: vec![NodeLayout {
            nr_cpus: 2,
            nr_pages: opts.nr_pages.unwrap_or(2 * pages + (1 << 18)),
        }],
        dma32_pages: opts.dma32_pages,
    };
    let mut pa = PageAlloc::new(&layout, cfg.sysctl, cfg.pcp);
    let mut cx = Cx::new(VcpuId(0), opts.table.clone());
    let mut g = MmGlobal::new(cfg.mm);
    let mut mm = MmStruct::new(&mut pa, &mut cx, g.cfg.mmap_layout)
        .map_err(|e| format!("mm_alloc: {e:?}"))?;
    let len = pages * 4096;
    let addr = mm
        .mmap(&mut pa, &mut cx, Vaddr(0), len, mm::vma::MapFlags::NONE)
        .map_err(|e| format!("mmap: {e}"))?;
    mm.madvise(&mut pa, &mut cx, addr, len, Advice::NoHugePage)
        .map_err(|e| format!("madvise: {e}"))?;
    for p in 0..pages {
        cx.begin(VcpuId(0), SimTime(0));
        handle_mm_fault(&mut pa, &mut cx, &mut g, &mut mm, addr + p * 4096, true)
            .map_err(|e| format!("fault: {e:?}"))?;
    }
    Ok(RegionWorld {
        pa,
        cx,
        mm,
        addr: addr.0,
    })
}

/// The model's nanoseconds for `op` on `pages` populated 4 KiB pages, with
/// the system call's entry and exit, on the machine and costs of `opts`.
pub fn model_region_ns(opts: &ModelOpts, pages: u64, op: RegionOp) -> Result<u64, String> {
    let mut w = region_world(opts, pages)?;
    let len = pages * 4096;
    let syscall = opts.table.get(Cost::SyscallEntry);
    w.cx.begin(VcpuId(0), SimTime(0));
    let ns = match op {
        RegionOp::Munmap => {
            w.mm.munmap(&mut w.pa, &mut w.cx, Vaddr(w.addr), len)
                .map_err(|e| format!("munmap: {e}"))?;
            w.cx.compute_ns() + syscall
        }
        RegionOp::Mprotect => {
            w.mm.mprotect(&mut w.pa, &mut w.cx, Vaddr(w.addr), len, Prot::READ)
                .map_err(|e| format!("mprotect: {e}"))?;
            w.mm.mprotect(
                &mut w.pa,
                &mut w.cx,
                Vaddr(w.addr),
                len,
                Prot(Prot::READ.0 | Prot::WRITE.0),
            )
            .map_err(|e| format!("mprotect: {e}"))?;
            (w.cx.compute_ns() + 2 * syscall) / 2
        }
        RegionOp::Fork => {
            let child =
                fork(&mut w.pa, &mut w.cx, &mut w.mm).map_err(|e| format!("fork: {e:?}"))?;
            let ns = w.cx.compute_ns() + syscall;
            exit_mmap(&mut w.pa, &mut w.cx, child);
            ns
        }
    };
    exit_mmap(&mut w.pa, &mut w.cx, w.mm);
    Ok(ns)
}

/// The kernel configuration a calibration's model runs: 6.18 with the
/// host's `min_free_kbytes` (which sets the watermarks and, through the low
/// watermark, the PCP lists' `high`).
pub fn host_config(extra: &[(String, KnobValue)]) -> Result<KernelConfig, String> {
    let mut cfg = Preset::Linux6_18.config();
    for (k, v) in extra {
        cfg.set_knob(k, v).map_err(|e| format!("{k}: {e}"))?;
    }
    Ok(cfg)
}

/// One unknown of the fit: one cost, or a group of costs scaled together
/// from their `base` values.
#[derive(Clone, Debug)]
pub struct Unknown {
    /// The costs and the value each has at scale 1.
    pub members: Vec<(Cost, f64)>,
}

impl Unknown {
    /// One cost, solved in nanoseconds.
    pub fn single(c: Cost) -> Unknown {
        Unknown {
            members: vec![(c, 1.0)],
        }
    }

    /// The table with this unknown's members at their base values (rounded
    /// up to whole nanoseconds: a table holds integers) and everything else 0,
    /// and the factor from that table's scale to the unknown's.
    pub fn column_table(&self) -> (CostTable, f64) {
        let mut t = CostTable::uniform(0);
        // A single cost is run at 1000 ns so that its count is read exactly;
        // a group at 1000 x its base values (its ratio kept to 0.1 %).
        for &(c, b) in &self.members {
            t.set(c, (b * 1000.0).round().max(1.0) as u64);
        }
        (t, 1000.0)
    }
}

/// One equation: a live measurement and what the model charges for it.
#[derive(Clone, Debug)]
pub struct Equation {
    /// What was measured.
    pub name: String,
    /// The live value (ns per unit).
    pub live: f64,
    /// The model's ns per unit from the known costs alone.
    pub known: f64,
    /// The model's ns per unit per unit of each unknown.
    pub cols: Vec<f64>,
}

/// Solves `min Σ ((known + Σ cols x − live) / live)²` over `x ≥ 0`: an
/// unknown whose unconstrained solution is negative or undetermined is
/// dropped (reported as `None`) and the rest solved again.
pub fn solve(eqs: &[Equation], nr: usize) -> Vec<Option<f64>> {
    let mut active: Vec<usize> = (0..nr).collect();
    loop {
        let x = normal_equations(eqs, &active);
        match x {
            Some(x) => {
                if let Some(bad) = active.iter().zip(&x).position(|(_, &v)| v <= 0.0) {
                    active.remove(bad);
                    continue;
                }
                let mut out = vec![None; nr];
                for (&i, v) in active.iter().zip(x) {
                    out[i] = Some(v);
                }
                return out;
            }
            None if active.is_empty() => return vec![None; nr],
            None => {
                // Singular: drop the unknown with the smallest column norm.
                let norm = |i: usize| {
                    eqs.iter()
                        .map(|e| (e.cols[i] / e.live).powi(2))
                        .sum::<f64>()
                };
                let worst = (0..active.len())
                    .min_by(|&a, &b| norm(active[a]).total_cmp(&norm(active[b])))
                    .expect("non-empty");
                active.remove(worst);
            }
        }
    }
}

/// Weighted normal equations over the `active` unknowns, by Gaussian
/// elimination with partial pivoting; `None` if singular.
fn normal_equations(eqs: &[Equation], active: &[usize]) -> Option<Vec<f64>> {
    let n = active.len();
    if n == 0 {
        return Some(Vec::new());
    }
    let mut a = vec![vec![0.0; n + 1]; n];
    for e in eqs {
        let w = 1.0 / e.live.abs().max(1e-9);
        let rhs = (e.live - e.known) * w;
        for (r, &i) in active.iter().enumerate() {
            let ci = e.cols[i] * w;
            for (c, &j) in active.iter().enumerate() {
                a[r][c] += ci * e.cols[j] * w;
            }
            a[r][n] += ci * rhs;
        }
    }
    let scale = a
        .iter()
        .map(|r| r[..n].iter().fold(0.0f64, |m, v| m.max(v.abs())))
        .fold(0.0f64, f64::max);
    for col in 0..n {
        let piv = (col..n).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[piv][col].abs() <= 1e-12 * scale.max(1e-300) {
            return None;
        }
        a.swap(col, piv);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

/// Ordinary least squares of `y = a + b x`: `(a, b)`.
pub fn line_fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve_recovers_known_costs() {
        // live = 3 + 2 x0 + 5 x1 with x = (10, 4), plus one equation per unknown.
        let eq = |live: f64, cols: Vec<f64>| Equation {
            name: "e".into(),
            live,
            known: 3.0,
            cols,
        };
        let eqs = vec![
            eq(3.0 + 2.0 * 10.0 + 5.0 * 4.0, vec![2.0, 5.0]),
            eq(3.0 + 10.0, vec![1.0, 0.0]),
            eq(3.0 + 3.0 * 4.0, vec![0.0, 3.0]),
        ];
        let x = solve(&eqs, 2);
        assert!((x[0].unwrap() - 10.0).abs() < 1e-6);
        assert!((x[1].unwrap() - 4.0).abs() < 1e-6);
    }

    #[test]
    fn solve_drops_negative_and_undetermined_unknowns() {
        let eqs = vec![
            Equation {
                name: "a".into(),
                live: 10.0,
                known: 0.0,
                cols: vec![1.0, 0.0, -1.0],
            },
            Equation {
                name: "b".into(),
                live: 20.0,
                known: 0.0,
                cols: vec![2.0, 0.0, 0.0],
            },
        ];
        let x = solve(&eqs, 3);
        assert!(x[1].is_none(), "no equation determines unknown 1");
        assert!((x[0].unwrap() - 10.0).abs() < 1e-6);
    }

    #[test]
    fn line_fit_is_exact_on_a_line() {
        let (a, b) = line_fit(&[(1.0, 5.0), (4.0, 11.0), (16.0, 35.0)]).unwrap();
        assert!((a - 3.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9);
    }

    #[test]
    fn region_ops_charge_per_page() {
        let opts = ModelOpts::default();
        let per = |op, pages| model_region_ns(&opts, pages, op).unwrap();
        for op in [RegionOp::Munmap, RegionOp::Mprotect, RegionOp::Fork] {
            assert!(per(op, 1024) > per(op, 256), "{op:?} grows with the pages");
        }
    }
}
