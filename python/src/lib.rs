//! The native part of the `mmlab` Python package (`mmlab._native`).
//!
//! The package calls the mmlab library directly (no `mmlab` subprocess):
//! `mmlab::api` runs experiments, `mmlab::sweep` runs points of a sweep,
//! `trace` reads traces. What crosses into Python is columns in Arrow's
//! memory layout ([`table`]), which the package's Python side wraps as
//! pyarrow arrays and pandas DataFrames without a Python object per value.
//!
//! Only [`binding`] uses PyO3, behind the `python` feature, so that the
//! rest is built and tested by `cargo test --workspace` on a machine with
//! only the Rust toolchain (see docs/ARCHITECTURE.md, "The Python package").

pub mod frames;
pub mod source;
pub mod table;

#[cfg(feature = "python")]
mod binding;
