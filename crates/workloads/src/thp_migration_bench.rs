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

use crate::params::{ParamError, ParamValue, Params};
use crate::WorkloadDef;
use mm::migrate::{MPOL_MF_MOVE, MPOL_MF_MOVE_MT};
use mm::types::PAGE_SIZE;
use mm::vma::Advice;
use sim::{Machine, Op, OpResult, Program, Rng, TaskSpec};

pub(crate) const DEF: WorkloadDef = WorkloadDef {
    name: "thp-migration-bench",
    summary: "seed 001's benchmark: N pages (2 MiB THPs or 4 KiB) touched on one node, one move_pages() of all to another",
    params: &[
        ("nr_pages", "32", "pages to allocate and move (1 to 1048576)"),
        ("page_size", "\"2M\"", "\"2M\" (THPs, MADV_HUGEPAGE) or \"4K\" (MADV_NOHUGEPAGE)"),
        ("mt", "0", "1 passes MPOL_MF_MOVE_MT (the seed's multi-threaded copy flag)"),
        ("from_node", "0", "node whose first CPU runs the task and allocates"),
        ("to_node", "1", "node the pages move to"),
    ],
    build,
};

fn build(p: &Params, m: &Machine) -> Result<Vec<TaskSpec>, ParamError> {
    let nodes = m.nodes.len() as i64;
    if nodes < 2 {
        return Err(ParamError::Invalid {
            name: "to_node",
            expected: "a machine of at least 2 nodes (move_pages() needs somewhere to move to)"
                .into(),
        });
    }
    let nr = p.int("nr_pages", 32, 1..=1 << 20)? as u64;
    let huge = match p.0.get("page_size") {
        None => true,
        Some(ParamValue::Str(s)) if s == "2M" => true,
        Some(ParamValue::Str(s)) if s == "4K" => false,
        Some(_) => {
            return Err(ParamError::Invalid {
                name: "page_size",
                expected: "\"2M\" or \"4K\"".into(),
            })
        }
    };
    let mt = p.int("mt", 0, 0..=1)? == 1;
    let from = p.int("from_node", 0, 0..=nodes - 1)? as usize;
    let to = p.int("to_node", 1, 0..=nodes - 1)? as u16;
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
                fixed: false,
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
