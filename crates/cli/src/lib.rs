//! The `mmlab` library: everything the `mmlab` command does except parsing
//! its arguments, so that the binary, its tests and the Python binding
//! share one code path.
//!
//! - [`api`]: run an experiment (a path, TOML text or a parsed file) and get
//!   the results document ([`results::ResultsDoc`]) and its tidy rows.
//! - [`results`]: the versioned results schema (`docs/results-schema.md`).
//! - [`bands`]: the seeds' headline figures, the model's, and their bands
//!   over the profiles' uncertain inputs (`reproduce --bands`).
//! - [`metrics`]: the metric registry (name, unit, help, value function).
//! - [`experiment`], [`runner`], [`report`]: experiment files, running them,
//!   the text and markdown tables.
//! - [`csv_out`]: tidy and wide CSV.
//! - [`sweep`]: one experiment at many points (knob and parameter values,
//!   seeds), the points side by side on the host's cores.
//! - [`replay`], [`aspace`]: `mmlab replay` and `mmlab validate`.
//! - [`import`]: `mmlab import` of a perf.data with the machine's snapshot.
//! - [`fault_model`]: live-kernel fault patterns translated into the model,
//!   shared by `mmlab bench faults`, `mmlab calibrate` and
//!   `tests/model_vs_live.rs`.
//! - [`calibrate`]: `mmlab calibrate`, the host's costs measured and fitted.
//! - [`output`]: atomic file writes and closed-pipe handling.
//! - [`fuzz`]: seeded fuzzing of experiments, traces and perf.data files
//!   (`mmlab fuzz`).

pub mod api;
pub mod args;
pub mod aspace;
pub mod bands;
pub mod bench;
pub mod calibrate;
pub mod charts;
pub mod compare;
pub mod csv_out;
pub mod experiment;
pub mod fault_model;
pub mod fuzz;
pub mod html;
pub mod import;
pub mod info;
pub mod metrics;
pub mod native_json;
pub mod output;
pub mod replay;
pub mod report;
pub mod results;
pub mod runner;
pub mod sweep;
pub mod timeline_out;
