//! placeholder

pub mod cache;
