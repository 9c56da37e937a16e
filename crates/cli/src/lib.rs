//! The parts of the `mmlab` command that its integration tests use too.
//!
//! The binary (`main.rs`) is the only place that parses arguments and
//! prints; this library holds the translation of live-kernel fault patterns
//! into the model, which `mmlab bench faults` and
//! `tests/model_vs_live.rs` share.

pub mod fault_model;
