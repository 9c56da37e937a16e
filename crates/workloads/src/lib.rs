//! Programs that drive the model: each task is a lazy stream of operations.
//!
//! A workload is built from a name and parameters (as written in an
//! experiment file) into tasks bound to vCPUs. Every workload documents what
//! it models and where its parameters come from.

pub mod anon_cow_seq;
pub mod anon_w_seq;
pub mod ebizzy;
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

pub use params::{ParamError, ParamValue, Params};

use sim::{Machine, TaskSpec};

/// A workload the registry can build.
pub struct WorkloadDef {
    /// The name in experiment files.
    pub name: &'static str,
    /// One line on what it models.
    pub summary: &'static str,
    /// Its parameters: name, default, meaning.
    pub params: &'static [(&'static str, &'static str, &'static str)],
    build: fn(&Params, &Machine) -> Result<Vec<TaskSpec>, ParamError>,
}

/// Every workload.
pub const WORKLOADS: &[WorkloadDef] = &[
    anon_cow_seq::DEF,
    anon_w_seq::DEF,
    ebizzy::DEF,
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

/// The benchmark runs workload `name` makes with `params`, for a
/// runs-per-minute score; 0 for workloads that do not count runs.
pub fn nr_runs(name: &str, params: &Params) -> u64 {
    match name {
        "speedometer" => speedometer::nr_runs(params),
        _ => 0,
    }
}

/// Builds workload `name` with `params` for `machine`.
pub fn build(name: &str, params: &Params, machine: &Machine) -> Result<Vec<TaskSpec>, ParamError> {
    let def =
        WORKLOADS
            .iter()
            .find(|w| w.name == name)
            .ok_or_else(|| ParamError::UnknownWorkload {
                name: name.to_string(),
                valid: WORKLOADS.iter().map(|w| w.name).collect(),
            })?;
    params.check_known(def.params.iter().map(|p| p.0))?;
    (def.build)(params, machine)
}
