//! thp-migration-bench (github.com/x-y-z/thp-migration-bench, seed 001):
//! allocate N pages on one node, touch them, and time one `move_pages()` of
//! all of them to another node.
//!
//! # What it models
//!
//! The seed's benchmark maps N × 2 MiB with `MADV_HUGEPAGE`, binds it to
//! node 0, writes every page (and checks through pagemap/kpageflags that
//! each is a THP), then calls `move_pages()` once with every page's address
//! and node 1, and reports bytes moved / time. `page_size = "4K"` is the
//! base-page variant (the seed's 512 × 4K and 1 × 4K rows): the mapping is
//! `MADV_NOHUGEPAGE` and every 4 KiB page gets its own entry in the
//! `move_pages()` arrays. `mt = 1` passes the seed's `MPOL_MF_MOVE_MT`.
//!
//! The task runs on the first CPU of `from_node`, so that the first touch
//! allocates there (the benchmark's `mbind()` to node 0 is the model's
//! local allocation). The time of the `move_pages()` call is
//! `RunStats::move_pages_ns`; the throughput metric is `migrate_gbps`.

use crate::params::{Args, Count, Count::N, ParamError, ParamSpec as P};
use crate::WorkloadDef;
use mm::migrate::{MPOL_MF_MOVE, MPOL_MF_MOVE_MT};
use mm::types::PAGE_SIZE;
use mm::vma::{Advice, MapFlags};
use sim::{Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "thp-migration-bench",
    summary: "seed 001's benchmark: N pages (2 MiB THPs or 4 KiB) touched on one node, one move_pages() of all to another",
    params: &[
        P::int(
            "nr_pages",
            N(32),
            1,
            N(1 << 20),
            "pages to allocate and move",
        ),
        P::choice(
            "page_size",
            "2M",
            &["2M", "4K"],
            "2M: THPs (MADV_HUGEPAGE); 4K: base pages (MADV_NOHUGEPAGE)",
        ),
        P::flag(
            "mt",
            false,
            "1 passes MPOL_MF_MOVE_MT (the seed's multi-threaded copy flag)",
        ),
        P::int(
            "from_node",
            N(0),
            0,
            Count::LAST_NODE,
            "node whose first CPU runs the task and allocates",
        ),
        P::int("to_node", N(1), 0, Count::LAST_NODE, "node the pages move to"),
    ],
    build,
    nr_runs: None,
};

fn build(a: &Args) -> Result<Vec<TaskSpec>, ParamError> {
    let m = a.machine();
    let nodes = m.nodes.len() as i64;
    if nodes < 2 {
        return Err(ParamError::Invalid {
            name: "to_node",
            expected: "a machine of at least 2 nodes (move_pages() needs somewhere to move to)"
                .into(),
        });
    }
    let nr = a.int("nr_pages")? as u64;
    let huge = a.choice("page_size")? == "2M";
    let mt = a.flag("mt")?;
    let from = a.int("from_node")? as usize;
    let to = a.int("to_node")? as u16;
    let page = if huge { 2 << 20 } else { PAGE_SIZE };
    let cpu: u32 = m.nodes[..from].iter().map(|n| n.cpus).sum();
    Ok(vec![TaskSpec::new(
        Box::new(ThpMigrationBench {
            nr,
            page,
            huge,
            flags: MPOL_MF_MOVE | if mt { MPOL_MF_MOVE_MT } else { 0 },
            to,
            step: 0,
            addr: 0,
        }),
        mm::VcpuId(cpu),
    )])
}

/// The benchmark's one process.
pub struct ThpMigrationBench {
    nr: u64,
    page: u64,
    huge: bool,
    flags: i32,
    to: u16,
    step: u8,
    addr: u64,
}

impl Program for ThpMigrationBench {
    fn next(&mut self, last: OpResult, _rng: &mut Rng) -> Option<Op> {
        self.step += 1;
        let len = self.nr * self.page;
        match (self.step, last) {
            // THPs need 2 MiB-aligned memory: map 2 MiB more and start at
            // the first aligned address, as an aligned allocation does (a
            // kernel that aligns anonymous mappings itself, 6.7+, gives an
            // aligned address anyway).
            (1, _) => Some(Op::Mmap {
                len: if self.huge { len + self.page } else { len },
                hint: None,
                flags: MapFlags::NONE,
                advice: Some(if self.huge {
                    Advice::HugePage
                } else {
                    Advice::NoHugePage
                }),
            }),
            (2, OpResult::Mapped(Ok(addr))) => {
                let addr = if self.huge {
                    addr.next_multiple_of(self.page)
                } else {
                    addr
                };
                self.addr = addr;
                Some(Op::Touch {
                    bytes: 1,
                    addr,
                    len,
                    stride: PAGE_SIZE,
                    write: true,
                })
            }
            (3, _) => Some(Op::MovePages {
                pages: (0..self.nr).map(|i| self.addr + i * self.page).collect(),
                nodes: Some(vec![self.to; self.nr as usize]),
                flags: self.flags,
            }),
            _ => None,
        }
    }
}
