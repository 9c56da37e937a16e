//! Programs that drive the model: each task is a lazy stream of operations.
//!
//! A workload is built from a name and parameters (as written in an
//! experiment file) into tasks bound to vCPUs. Every workload documents what
//! it models and where its parameters come from.

pub mod anon_cow_seq;
pub mod anon_w_seq;
pub mod ebizzy;
pub mod folio_buckets;
pub mod hugetlb_cow;
pub mod kbuild;
pub mod kernel_compile;
pub mod malloc_dontneed;
pub mod page_churn;
pub mod page_fault1;
pub mod params;
pub mod recorded_build;
pub mod small_vmas;
pub mod speedometer;
pub mod stream;
pub mod thp_migration_bench;
pub mod tiering_promote;

pub use params::{Args, Count, ParamError, ParamKind, ParamSpec, ParamValue, Params};

use sim::{Machine, TaskSpec};

/// What makes a workload's tasks from its arguments.
pub type BuildFn = fn(&Args) -> Result<Vec<TaskSpec>, ParamError>;
/// What counts a benchmark's runs from its arguments.
pub type NrRunsFn = fn(&Args) -> Result<u64, ParamError>;

/// A workload the registry can build: its name, its parameter table and
/// what it does with them. To add a workload, write a module with a `DEF`
/// and list it in [`WORKLOADS`]; `mmlab list`, the experiment validation
/// and the runner find it there.
pub struct WorkloadDef {
    /// The name in experiment files.
    pub name: &'static str,
    /// One line on what it models.
    pub summary: &'static str,
    /// Its parameters, in the order `mmlab list` prints them.
    pub params: &'static [ParamSpec],
    /// Makes the tasks.
    pub build: BuildFn,
    /// For a benchmark scored in runs per minute: how many runs the tasks
    /// make in all. `None` for the others.
    pub nr_runs: Option<NrRunsFn>,
}

/// Every workload.
pub const WORKLOADS: &[WorkloadDef] = &[
    anon_cow_seq::DEF,
    anon_w_seq::DEF,
    ebizzy::DEF,
    folio_buckets::DEF,
    hugetlb_cow::DEF,
    kbuild::DEF,
    kernel_compile::DEF,
    malloc_dontneed::DEF,
    page_churn::DEF,
    page_fault1::DEF,
    small_vmas::DEF,
    speedometer::DEF,
    stream::DEF,
    thp_migration_bench::DEF,
    tiering_promote::DEF,
];

/// Workload `name`, with `params` checked against its table (names only:
/// values are checked as the workload reads them).
pub fn find(name: &str, params: &Params) -> Result<&'static WorkloadDef, ParamError> {
    let def =
        WORKLOADS
            .iter()
            .find(|w| w.name == name)
            .ok_or_else(|| ParamError::UnknownWorkload {
                name: name.to_string(),
                valid: WORKLOADS.iter().map(|w| w.name).collect(),
            })?;
    params.check_known(def.params.iter().map(|p| p.name))?;
    Ok(def)
}

/// The benchmark runs workload `name` makes with `params` on `machine`, for
/// a runs-per-minute score; 0 for workloads that do not count runs.
pub fn nr_runs(name: &str, params: &Params, machine: &Machine) -> Result<u64, ParamError> {
    let def = find(name, params)?;
    match def.nr_runs {
        Some(f) => f(&Args::new(params, def.params, machine)),
        None => Ok(0),
    }
}

/// Builds workload `name` with `params` for `machine`.
pub fn build(name: &str, params: &Params, machine: &Machine) -> Result<Vec<TaskSpec>, ParamError> {
    let def = find(name, params)?;
    let tasks = (def.build)(&Args::new(params, def.params, machine))?;
    // A task bound to a vCPU the machine lacks is the workload's bug, not
    // the user's; it is an error here rather than a panic in the engine.
    let nr_cpus = machine.nr_cpus();
    if let Some(t) = tasks.iter().find(|t| t.cpu.0 >= nr_cpus) {
        return Err(ParamError::Machine {
            what: format!(
                "workload \"{name}\" binds a task to vCPU {} but the machine has {nr_cpus} CPUs",
                t.cpu.0
            ),
        });
    }
    Ok(tasks)
}

/// The unit tests' machine: `nodes` nodes of `cpus` CPUs and 64 MiB each,
/// no LLC and no DMA32 zone.
#[cfg(test)]
pub(crate) fn test_machine(nodes: u32, cpus: u32) -> sim::Machine {
    sim::Machine {
        name: "m".into(),
        nodes: (0..nodes)
            .map(|_| sim::NodeSpec {
                cpus,
                memory_bytes: 64 << 20,
            })
            .collect(),
        llc_bytes: 0,
        dma32_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim::NodeSpec;

    fn machine() -> Machine {
        Machine {
            name: "test".into(),
            nodes: vec![
                NodeSpec {
                    cpus: 8,
                    memory_bytes: 256 << 20,
                },
                NodeSpec {
                    cpus: 8,
                    memory_bytes: 256 << 20,
                },
            ],
            llc_bytes: 0,
            dma32_bytes: 0,
        }
    }

    /// Every workload builds with its defaults (so that every read matches a
    /// row of its table: a mismatch panics), and its table has no name twice.
    #[test]
    fn every_workload_builds_with_its_defaults() {
        let m = machine();
        for w in WORKLOADS {
            let p = Params::default();
            let tasks = build(w.name, &p, &m).unwrap_or_else(|e| panic!("{}: {e}", w.name));
            assert!(!tasks.is_empty(), "{}: no tasks", w.name);
            nr_runs(w.name, &p, &m).unwrap();
            for (i, s) in w.params.iter().enumerate() {
                assert!(
                    w.params[..i].iter().all(|o| o.name != s.name),
                    "{}: parameter {} twice",
                    w.name,
                    s.name
                );
            }
        }
    }

    /// Giving each parameter its printed default explicitly builds the same
    /// number of tasks as leaving it out: the table's default is the one the
    /// code uses.
    #[test]
    fn printed_defaults_are_the_defaults() {
        let m = machine();
        for w in WORKLOADS {
            let n = build(w.name, &Params::default(), &m).unwrap().len();
            for s in w.params {
                let v = match s.kind {
                    ParamKind::Int { default, .. } => {
                        ParamValue::Int(default.eval(&m, &Params::default()))
                    }
                    ParamKind::Flag { default } => ParamValue::Int(i64::from(default)),
                    ParamKind::Size { .. } => ParamValue::Str(s.default_text()),
                    ParamKind::Choice { default, .. } => ParamValue::Str(default.into()),
                    ParamKind::OptSize { .. } => continue,
                };
                if let (ParamKind::Size { default, .. }, ParamValue::Str(t)) = (s.kind, &v) {
                    let one = Params([(s.name.to_string(), v.clone())].into());
                    assert_eq!(one.size(s.name, 0, 0..=u64::MAX), Ok(default), "{t}");
                }
                let p = Params([(s.name.to_string(), v)].into());
                let got =
                    build(w.name, &p, &m).unwrap_or_else(|e| panic!("{} {}: {e}", w.name, s.name));
                assert_eq!(got.len(), n, "{} {}", w.name, s.name);
            }
        }
    }
}
