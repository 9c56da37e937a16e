//! The tables behind the Python package's DataFrames, built from the mmlab
//! library's own values: a results document's tidy rows
//! ([`mmlab::results::ResultsDoc::tidy_rows`], the rows of the CLI's tidy
//! CSV), a sweep's points, and a trace's events.

use crate::table::{BoolCol, DictCol, ListCol, PrimCol, StrCol, Table};
use anyhow::{anyhow, Result};
use mmlab::results::{ResultsDoc, TidyRow};
use std::path::Path;
use trace::{EventKind, TraceReader};

/// The tidy columns of `rows` ([`TIDY_COLUMNS`]); `value` as a float (the
/// document's integers are exact below 2^53).
fn tidy_columns(t: &mut Table, rows: &[TidyRow], with_source: bool) {
    let n = rows.len();
    let mut text: [DictCol; 5] = Default::default();
    let mut seed = PrimCol::<u64>::with_capacity(n);
    let mut value = PrimCol::<f64>::with_capacity(n);
    let mut source = DictCol::default();
    for r in rows {
        for (c, v) in
            text.iter_mut()
                .zip([&r.experiment, &r.workload, &r.kernel, &r.metric, &r.unit])
        {
            c.push(Some(v));
        }
        seed.push(r.seed);
        value.push(Some(r.value.as_f64().unwrap_or(f64::NAN)));
        source.push(Some(r.source));
    }
    let [experiment, workload, kernel, metric, unit] = text;
    // In the order of TIDY_COLUMNS (a test checks it).
    t.push("experiment", experiment.finish());
    t.push("workload", workload.finish());
    t.push("kernel", kernel.finish());
    t.push("seed", seed.finish(n));
    t.push("metric", metric.finish());
    t.push("value", value.finish(n));
    t.push("unit", unit.finish());
    if with_source {
        t.push("source", source.finish());
    }
}

/// A results document as tidy rows: every metric and counter of every run,
/// then, with `published`, the published figures.
pub fn tidy_table(doc: &ResultsDoc, published: bool) -> Table {
    let rows: Vec<TidyRow> = doc
        .tidy_rows()
        .into_iter()
        .filter(|r| published || r.source == "model")
        .collect();
    let mut t = Table::default();
    tidy_columns(&mut t, &rows, true);
    t
}

/// The model rows of sweep points, each row with the index of its point
/// (column `point`, first) in the order given.
pub fn sweep_table<'a>(points: impl IntoIterator<Item = (u32, &'a ResultsDoc)>) -> Table {
    let mut rows = Vec::new();
    let mut index = PrimCol::<u32>::default();
    for (i, doc) in points {
        for r in doc.tidy_rows().into_iter().filter(|r| r.source == "model") {
            index.push(Some(i));
            rows.push(r);
        }
    }
    let mut t = Table::default();
    t.push("point", index.finish(rows.len()));
    tidy_columns(&mut t, &rows, false);
    t
}

/// The columns of the events table that some kinds have, in their order:
/// one per field name the tracepoints use.
#[derive(Default)]
struct EventFields {
    pfn: PrimCol<u64>,
    order: PrimCol<u32>,
    migratetype: PrimCol<i32>,
    gfp_flags: PrimCol<u64>,
    percpu_refill: BoolCol,
    address: PrimCol<u64>,
    ip: PrimCol<u64>,
    error_code: PrimCol<u64>,
    addr: PrimCol<u64>,
    len: PrimCol<u64>,
    prot: PrimCol<u64>,
    flags: PrimCol<u64>,
    fd: PrimCol<u64>,
    off: PrimCol<u64>,
    brk: PrimCol<u64>,
    old_len: PrimCol<u64>,
    new_len: PrimCol<u64>,
    new_addr: PrimCol<u64>,
    start: PrimCol<u64>,
    len_in: PrimCol<u64>,
    behavior: PrimCol<i64>,
    ret: PrimCol<i64>,
    parent: PrimCol<i32>,
    child: PrimCol<i32>,
    target_pid: PrimCol<i32>,
    filename: StrCol,
    pgoff: PrimCol<u64>,
    comm: StrCol,
    exec: BoolCol,
    vmas: ListCol,
    vma: VmaFields,
}

/// The child table of the `vmas` column (exec layouts).
#[derive(Default)]
struct VmaFields {
    n: usize,
    start: PrimCol<u64>,
    len: PrimCol<u64>,
    pgoff: PrimCol<u64>,
    prot: PrimCol<u32>,
    flags: PrimCol<u32>,
    name: StrCol,
}

impl EventFields {
    /// Sets row `i`'s fields from the event's kind.
    fn set(&mut self, i: usize, kind: &EventKind) {
        use EventKind as K;
        match kind {
            K::PageAlloc {
                pfn,
                order,
                migratetype,
                gfp_flags,
            } => {
                self.page(i, *pfn, *order, Some(*migratetype));
                self.gfp_flags.set(i, *gfp_flags);
            }
            K::PageFree { pfn, order } => self.page(i, *pfn, *order, None),
            K::PageAllocZoneLocked {
                pfn,
                order,
                migratetype,
                percpu_refill,
            } => {
                self.page(i, *pfn, *order, Some(*migratetype));
                self.percpu_refill.set(i, *percpu_refill);
            }
            K::PagePcpuDrain {
                pfn,
                order,
                migratetype,
            } => self.page(i, *pfn, *order, Some(*migratetype)),
            K::PageFaultUser {
                address,
                ip,
                error_code,
            }
            | K::PageFaultKernel {
                address,
                ip,
                error_code,
            } => {
                self.address.set(i, *address);
                self.ip.set(i, *ip);
                self.error_code.set(i, *error_code);
            }
            _ => self.set_syscall_or_task(i, kind),
        }
    }

    fn page(&mut self, i: usize, pfn: u64, order: u32, migratetype: Option<i32>) {
        self.pfn.set(i, pfn);
        self.order.set(i, order);
        if let Some(m) = migratetype {
            self.migratetype.set(i, m);
        }
    }

    fn set_syscall_or_task(&mut self, i: usize, kind: &EventKind) {
        use EventKind as K;
        match kind {
            K::Mmap {
                addr,
                len,
                prot,
                flags,
                fd,
                off,
                ret,
            } => {
                for (c, v) in [
                    (&mut self.addr, addr),
                    (&mut self.len, len),
                    (&mut self.prot, prot),
                    (&mut self.flags, flags),
                    (&mut self.fd, fd),
                    (&mut self.off, off),
                ] {
                    c.set(i, *v);
                }
                self.ret.set_opt(i, *ret);
            }
            K::Munmap { addr, len, ret } => {
                self.addr.set(i, *addr);
                self.len.set(i, *len);
                self.ret.set_opt(i, *ret);
            }
            K::Brk { brk, ret } => {
                self.brk.set(i, *brk);
                self.ret.set_opt(i, *ret);
            }
            K::Mremap {
                addr,
                old_len,
                new_len,
                flags,
                new_addr,
                ret,
            } => {
                for (c, v) in [
                    (&mut self.addr, addr),
                    (&mut self.old_len, old_len),
                    (&mut self.new_len, new_len),
                    (&mut self.flags, flags),
                    (&mut self.new_addr, new_addr),
                ] {
                    c.set(i, *v);
                }
                self.ret.set_opt(i, *ret);
            }
            K::Mprotect {
                start,
                len,
                prot,
                ret,
            } => {
                self.start.set(i, *start);
                self.len.set(i, *len);
                self.prot.set(i, *prot);
                self.ret.set_opt(i, *ret);
            }
            K::Madvise {
                start,
                len_in,
                behavior,
                ret,
            } => {
                self.start.set(i, *start);
                self.len_in.set(i, *len_in);
                self.behavior.set(i, *behavior);
                self.ret.set_opt(i, *ret);
            }
            _ => self.set_task(i, kind),
        }
    }

    fn set_task(&mut self, i: usize, kind: &EventKind) {
        use EventKind as K;
        match kind {
            K::Fork { parent, child } => {
                self.parent.set(i, *parent);
                self.child.set(i, *child);
            }
            K::Exec { pid, filename } => {
                self.target_pid.set(i, *pid);
                self.filename.set(i, filename);
            }
            K::Exit { pid } => self.target_pid.set(i, *pid),
            K::ExecLayout { pid, vmas } => {
                self.target_pid.set(i, *pid);
                self.vmas.set(i, vmas.len());
                let v = &mut self.vma;
                for m in vmas {
                    v.start.set(v.n, m.start);
                    v.len.set(v.n, m.len);
                    v.pgoff.set(v.n, m.pgoff);
                    v.prot.set(v.n, m.prot);
                    v.flags.set(v.n, m.flags);
                    v.name.set(v.n, &m.name);
                    v.n += 1;
                }
            }
            K::MmapRecord {
                addr,
                len,
                pgoff,
                prot,
                flags,
                filename,
            } => {
                self.addr.set(i, *addr);
                self.len.set(i, *len);
                self.pgoff.set(i, *pgoff);
                self.prot.set(i, u64::from(*prot));
                self.flags.set(i, u64::from(*flags));
                self.filename.set(i, filename);
            }
            K::Comm { comm, exec } => {
                self.comm.set(i, comm);
                self.exec.set(i, *exec);
            }
            _ => {}
        }
    }

    fn finish(self, t: &mut Table, n: usize) {
        let cols = [
            ("pfn", self.pfn.finish(n)),
            ("order", self.order.finish(n)),
            ("migratetype", self.migratetype.finish(n)),
            ("gfp_flags", self.gfp_flags.finish(n)),
            ("percpu_refill", self.percpu_refill.finish(n)),
            ("address", self.address.finish(n)),
            ("ip", self.ip.finish(n)),
            ("error_code", self.error_code.finish(n)),
            ("addr", self.addr.finish(n)),
            ("len", self.len.finish(n)),
            ("prot", self.prot.finish(n)),
            ("flags", self.flags.finish(n)),
            ("fd", self.fd.finish(n)),
            ("off", self.off.finish(n)),
            ("brk", self.brk.finish(n)),
            ("old_len", self.old_len.finish(n)),
            ("new_len", self.new_len.finish(n)),
            ("new_addr", self.new_addr.finish(n)),
            ("start", self.start.finish(n)),
            ("len_in", self.len_in.finish(n)),
            ("behavior", self.behavior.finish(n)),
            ("ret", self.ret.finish(n)),
            ("parent", self.parent.finish(n)),
            ("child", self.child.finish(n)),
            ("target_pid", self.target_pid.finish(n)),
            ("filename", self.filename.finish(n)),
            ("pgoff", self.pgoff.finish(n)),
            ("comm", self.comm.finish(n)),
            ("exec", self.exec.finish(n)),
        ];
        for (name, col) in cols {
            t.push(name, col);
        }
        let v = self.vma;
        let mut child = Table::default();
        child.push("start", v.start.finish(v.n));
        child.push("len", v.len.finish(v.n));
        child.push("pgoff", v.pgoff.finish(v.n));
        child.push("prot", v.prot.finish(v.n));
        child.push("flags", v.flags.finish(v.n));
        child.push("name", v.name.finish(v.n));
        t.push("vmas", self.vmas.finish(n, child));
    }
}

/// A trace's events, header and trailer (JSON, as the file stores them).
pub struct TraceTable {
    pub events: Table,
    pub header: serde_json::Value,
    pub trailer: Option<serde_json::Value>,
}

/// Reads a whole trace into columns: `ts_ns`, `cpu`, `pid`, `tid`, `kind`
/// (the tracepoint's name), then one column per field name, null where the
/// event's kind has no such field. A damaged trace is an error that says
/// where, as `mmlab trace-stats` reports it.
pub fn read_trace(path: &Path) -> Result<TraceTable> {
    let mut r = TraceReader::open(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let header = serde_json::to_value(r.header())?;
    let (mut ts, mut cpu) = (PrimCol::<u64>::default(), PrimCol::<u32>::default());
    let (mut pid, mut tid) = (PrimCol::<i32>::default(), PrimCol::<i32>::default());
    let mut kind = DictCol::default();
    let mut fields = EventFields::default();
    let mut n = 0;
    for ev in r.by_ref() {
        let ev = ev.map_err(|e| {
            anyhow!(
                "{}: the trace is damaged after {n} events: {e}",
                path.display()
            )
        })?;
        ts.push(Some(ev.ts_ns));
        cpu.push(Some(ev.cpu));
        pid.push(Some(ev.pid));
        tid.push(Some(ev.tid));
        kind.push(Some(ev.kind.name()));
        fields.set(n, &ev.kind);
        n += 1;
    }
    let mut t = Table::default();
    t.push("ts_ns", ts.finish(n));
    t.push("cpu", cpu.finish(n));
    t.push("pid", pid.finish(n));
    t.push("tid", tid.finish(n));
    t.push("kind", kind.finish());
    fields.finish(&mut t, n);
    let trailer = r.trailer().map(serde_json::to_value).transpose()?;
    Ok(TraceTable {
        events: t,
        header,
        trailer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Data;
    use mmlab::api::{self, RunOptions, Source};
    use mmlab::results::TIDY_COLUMNS;

    /// The CLI's small test experiment (two kernels, page churn on 4
    /// CPUs), shared with the CLI crate's tests.
    const SMALL: &str = include_str!("../../crates/cli/tests/fixtures/small.toml");

    fn doc() -> ResultsDoc {
        api::run(
            Source::Toml {
                text: SMALL,
                origin: Path::new("small.toml"),
            },
            &RunOptions::default(),
        )
        .expect("runs")
    }

    fn f64s(t: &Table, name: &str) -> Vec<f64> {
        let Data::Prim { bytes, .. } = &t.column(name).expect("column").data else {
            panic!("{name} is not primitive")
        };
        bytes
            .chunks(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8")))
            .collect()
    }

    #[test]
    fn the_tidy_table_holds_the_documents_tidy_rows() {
        let d = doc();
        let rows = d.tidy_rows();
        let t = tidy_table(&d, true);
        assert_eq!(t.nrows, rows.len());
        let names: Vec<&str> = t.columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, TIDY_COLUMNS);
        let values = f64s(&t, "value");
        for (r, v) in rows.iter().zip(values) {
            assert_eq!(r.value.as_f64(), Some(v));
        }
    }

    #[test]
    fn a_sweep_table_numbers_its_points() {
        let d = doc();
        let t = sweep_table([(0, &d), (1, &d)]);
        assert_eq!(t.nrows, 2 * d.tidy_rows().len());
        assert_eq!(t.columns[0].0, "point");
        assert!(t.column("source").is_none());
    }

    #[test]
    fn a_recorded_trace_becomes_columns_of_every_event() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/trace/tests/fixtures/dd-gzip.mmtrace");
        let tt = read_trace(&path).expect("reads");
        let n = TraceReader::open(&path).expect("opens").count();
        assert!(n > 100);
        assert_eq!(tt.events.nrows, n);
        assert!(tt.trailer.is_some());
        for (name, c) in &tt.events.columns {
            assert_eq!(c.len, n, "{name}");
        }
    }

    #[test]
    fn a_file_that_is_not_a_trace_says_so() {
        let e = read_trace(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("Cargo.toml")
                .as_path(),
        )
        .err()
        .expect("not a trace");
        assert!(e.to_string().contains("Cargo.toml"), "{e}");
    }
}
