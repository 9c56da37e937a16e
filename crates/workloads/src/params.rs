//! Workload parameters: as given in an experiment file ([`Params`]), as a
//! workload declares them ([`ParamSpec`]), and as it reads them ([`Args`]).
//!
//! # One table per workload
//!
//! Each workload lists its parameters once, in its `DEF`: name, help,
//! default and accepted values. `mmlab list` prints that table, the
//! registry rejects names that are not in it, and the workload's `build`
//! reads every value through [`Args`], which takes the default and the range
//! from the same row. A default written in the help and again in the code
//! cannot drift apart, because it is written once.

use sim::Machine;
use std::collections::BTreeMap;
use std::fmt;

/// One parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    /// An integer.
    Int(i64),
    /// A string.
    Str(String),
}

/// A workload's parameters by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params(pub BTreeMap<String, ParamValue>);

/// What is wrong with a workload or its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamError {
    /// No workload of that name.
    UnknownWorkload {
        /// The name given.
        name: String,
        /// Valid names.
        valid: Vec<&'static str>,
    },
    /// A parameter the workload does not have.
    Unknown {
        /// The parameter.
        name: String,
        /// Valid parameters.
        valid: Vec<&'static str>,
    },
    /// A value of the wrong type or range.
    Invalid {
        /// The parameter.
        name: &'static str,
        /// What is expected.
        expected: String,
    },
    /// The workload does not fit the machine (whatever its parameters say).
    Machine {
        /// Why not.
        what: String,
    },
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::UnknownWorkload { name, valid } => {
                write!(
                    f,
                    "unknown workload \"{name}\"; valid workloads: {}",
                    valid.join(", ")
                )
            }
            ParamError::Unknown { name, valid } => {
                write!(
                    f,
                    "unknown parameter \"{name}\"; valid parameters: {}",
                    valid.join(", ")
                )
            }
            ParamError::Invalid { name, expected } => {
                write!(f, "parameter \"{name}\": expected {expected}")
            }
            ParamError::Machine { what } => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for ParamError {}

impl Params {
    /// Fails on a parameter not in `known`.
    pub fn check_known(
        &self,
        known: impl Iterator<Item = &'static str> + Clone,
    ) -> Result<(), ParamError> {
        for k in self.0.keys() {
            if !known.clone().any(|n| n == k) {
                return Err(ParamError::Unknown {
                    name: k.clone(),
                    valid: known.collect(),
                });
            }
        }
        Ok(())
    }

    /// An integer parameter in `range`, or `default` if absent.
    pub fn int(
        &self,
        name: &'static str,
        default: i64,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64, ParamError> {
        let invalid = || ParamError::Invalid {
            name,
            expected: format!("an integer from {} to {}", range.start(), range.end()),
        };
        match self.0.get(name) {
            None => Ok(default),
            Some(ParamValue::Int(v)) if range.contains(v) => Ok(*v),
            Some(_) => Err(invalid()),
        }
    }

    /// One of the words `choices`, or `default` if absent.
    pub fn choice(
        &self,
        name: &'static str,
        default: &'static str,
        choices: &[&'static str],
    ) -> Result<&'static str, ParamError> {
        match self.0.get(name) {
            None => Ok(default),
            Some(ParamValue::Str(s)) if choices.contains(&s.as_str()) => Ok(choices
                .iter()
                .find(|c| **c == s.as_str())
                .expect("contained")),
            Some(_) => Err(ParamError::Invalid {
                name,
                expected: format!("one of {}", choices.join(", ")),
            }),
        }
    }

    /// A size in bytes in `range`, or `default` if absent: an integer (bytes)
    /// or a string with a binary unit (`"128MiB"`, `"2GiB"`, `"4KiB"`).
    pub fn size(
        &self,
        name: &'static str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ParamError> {
        let invalid = || ParamError::Invalid {
            name,
            expected: format!(
                "a size from {} to {} bytes, as an integer or with a unit (KiB, MiB, GiB, TiB)",
                range.start(),
                range.end()
            ),
        };
        let v = match self.0.get(name) {
            None => return Ok(default),
            Some(ParamValue::Int(v)) => u64::try_from(*v).map_err(|_| invalid())?,
            Some(ParamValue::Str(s)) => mm::types::parse_size(s).map_err(|_| invalid())?,
        };
        if range.contains(&v) {
            Ok(v)
        } else {
            Err(invalid())
        }
    }
}

/// A number a workload's parameter table gives as a default or a bound:
/// a constant, or one that depends on the machine (and, rarely, on another
/// parameter).
#[derive(Clone, Copy)]
pub enum Count {
    /// This value.
    N(i64),
    /// Computed for the machine and the other parameters; the text says
    /// how, as a noun phrase ("the number of CPUs").
    Of(fn(&Machine, &Params) -> i64, &'static str),
}

impl Count {
    /// The number of CPUs.
    pub const CPUS: Count = Count::Of(|m, _| m.nr_cpus() as i64, "the number of CPUs");
    /// The CPUs less one, at least 1 (a parent and its children).
    pub const CPUS_LESS_ONE: Count = Count::Of(
        |m, _| (m.nr_cpus() as i64 - 1).max(1),
        "the number of CPUs less one (at least 1)",
    );
    /// The index of the last CPU.
    pub const LAST_CPU: Count = Count::Of(|m, _| m.nr_cpus() as i64 - 1, "the last CPU");
    /// Half the CPUs, at least 1.
    pub const HALF_CPUS: Count = Count::Of(
        |m, _| (m.nr_cpus() as i64 / 2).max(1),
        "half the number of CPUs (at least 1)",
    );
    /// The index of the last node.
    pub const LAST_NODE: Count = Count::Of(|m, _| m.nodes.len() as i64 - 1, "the last node");

    /// The value on `machine` with `params`.
    pub fn eval(self, machine: &Machine, params: &Params) -> i64 {
        match self {
            Count::N(n) => n,
            Count::Of(f, _) => f(machine, params),
        }
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Count::N(n) => write!(f, "{n}"),
            Count::Of(_, text) => f.write_str(text),
        }
    }
}

/// What values a parameter takes, and its default.
///
/// Defaults are taken as they are, not checked against the range (a
/// machine-dependent default may fall outside a constant range).
#[derive(Clone, Copy)]
pub enum ParamKind {
    /// An integer from `min` to `max`.
    Int {
        /// The value when the parameter is not given.
        default: Count,
        /// The smallest value accepted.
        min: i64,
        /// The largest value accepted.
        max: Count,
    },
    /// 0 or 1.
    Flag {
        /// The value when the parameter is not given.
        default: bool,
    },
    /// A size in bytes: an integer or a string with a binary unit.
    Size {
        /// The value when the parameter is not given.
        default: u64,
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
    },
    /// A size in bytes that may be left out (no default).
    OptSize {
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
    },
    /// One of some words.
    Choice {
        /// The value when the parameter is not given.
        default: &'static str,
        /// The words accepted.
        choices: &'static [&'static str],
    },
}

/// One row of a workload's parameter table.
#[derive(Clone, Copy)]
pub struct ParamSpec {
    /// The name in experiment files.
    pub name: &'static str,
    /// What it means (one line, for `mmlab list`).
    pub help: &'static str,
    /// Its values and default.
    pub kind: ParamKind,
}

impl ParamSpec {
    /// An integer parameter from `min` to `max`.
    pub const fn int(
        name: &'static str,
        default: Count,
        min: i64,
        max: Count,
        help: &'static str,
    ) -> ParamSpec {
        ParamSpec {
            name,
            help,
            kind: ParamKind::Int { default, min, max },
        }
    }

    /// A 0/1 parameter.
    pub const fn flag(name: &'static str, default: bool, help: &'static str) -> ParamSpec {
        ParamSpec {
            name,
            help,
            kind: ParamKind::Flag { default },
        }
    }

    /// A size parameter from `min` to `max` bytes.
    pub const fn size(
        name: &'static str,
        default: u64,
        min: u64,
        max: u64,
        help: &'static str,
    ) -> ParamSpec {
        ParamSpec {
            name,
            help,
            kind: ParamKind::Size { default, min, max },
        }
    }

    /// A size parameter that may be left out.
    pub const fn opt_size(name: &'static str, min: u64, max: u64, help: &'static str) -> ParamSpec {
        ParamSpec {
            name,
            help,
            kind: ParamKind::OptSize { min, max },
        }
    }

    /// A parameter that is one of `choices`.
    pub const fn choice(
        name: &'static str,
        default: &'static str,
        choices: &'static [&'static str],
        help: &'static str,
    ) -> ParamSpec {
        ParamSpec {
            name,
            help,
            kind: ParamKind::Choice { default, choices },
        }
    }

    /// The default, as `mmlab list` prints it.
    pub fn default_text(&self) -> String {
        match self.kind {
            ParamKind::Int { default, .. } => default.to_string(),
            ParamKind::Flag { default } => u8::from(default).to_string(),
            ParamKind::Size { default, .. } => size_text(default),
            ParamKind::OptSize { .. } => "none".to_string(),
            ParamKind::Choice { default, .. } => default.to_string(),
        }
    }

    /// The values accepted, as `mmlab list` prints them.
    pub fn accepts_text(&self) -> String {
        match self.kind {
            ParamKind::Int { min, max, .. } => format!("{min} to {max}"),
            ParamKind::Flag { .. } => "0 or 1".to_string(),
            ParamKind::Size { min, max, .. } | ParamKind::OptSize { min, max } => {
                format!("{} to {}", size_text(min), size_text(max))
            }
            ParamKind::Choice { choices, .. } => choices.join(", "),
        }
    }
}

/// `64MiB`-style text for a size, exact (bytes if no unit divides it).
fn size_text(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

/// A workload's parameters read through its table: each read finds the
/// parameter's row, so its default and range are the ones `mmlab list`
/// shows. Asking for a name the table lacks, or as the wrong kind, is a
/// bug in the workload and panics (every workload is built with its
/// defaults in the tests).
pub struct Args<'a> {
    params: &'a Params,
    specs: &'static [ParamSpec],
    machine: &'a Machine,
}

impl<'a> Args<'a> {
    /// `params` read through `specs`, for `machine`.
    pub fn new(params: &'a Params, specs: &'static [ParamSpec], machine: &'a Machine) -> Args<'a> {
        Args {
            params,
            specs,
            machine,
        }
    }

    /// The machine the workload is built for.
    pub fn machine(&self) -> &'a Machine {
        self.machine
    }

    /// The parameters as given (for the rare check that spans two).
    pub fn given(&self) -> &'a Params {
        self.params
    }

    fn kind(&self, name: &'static str) -> ParamKind {
        self.specs
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("the workload reads parameter {name}, which its table lacks"))
            .kind
    }

    fn wrong_kind(name: &str, kind: &str) -> ! {
        panic!("the workload reads parameter {name} as {kind}, which its table does not say")
    }

    /// An integer parameter.
    pub fn int(&self, name: &'static str) -> Result<i64, ParamError> {
        let ParamKind::Int { default, min, max } = self.kind(name) else {
            Self::wrong_kind(name, "an integer")
        };
        let (m, p) = (self.machine, self.params);
        let max = max.eval(m, p);
        // A default beyond a machine-dependent maximum (8 threads on a near
        // node of 2 CPUs) is brought within it: a default must always be
        // accepted.
        let default = default.eval(m, p);
        let default = if min <= max {
            default.clamp(min, max)
        } else {
            default
        };
        p.int(name, default, min..=max)
    }

    /// A 0/1 parameter.
    pub fn flag(&self, name: &'static str) -> Result<bool, ParamError> {
        let ParamKind::Flag { default } = self.kind(name) else {
            Self::wrong_kind(name, "a flag")
        };
        Ok(self.params.int(name, i64::from(default), 0..=1)? == 1)
    }

    /// A size parameter, in bytes.
    pub fn size(&self, name: &'static str) -> Result<u64, ParamError> {
        let ParamKind::Size { default, min, max } = self.kind(name) else {
            Self::wrong_kind(name, "a size")
        };
        self.params.size(name, default, min..=max)
    }

    /// A size parameter that may be left out.
    pub fn opt_size(&self, name: &'static str) -> Result<Option<u64>, ParamError> {
        let ParamKind::OptSize { min, max } = self.kind(name) else {
            Self::wrong_kind(name, "an optional size")
        };
        if !self.params.0.contains_key(name) {
            return Ok(None);
        }
        self.params.size(name, 0, min..=max).map(Some)
    }

    /// A parameter that is one of some words.
    pub fn choice(&self, name: &'static str) -> Result<&'static str, ParamError> {
        let ParamKind::Choice { default, choices } = self.kind(name) else {
            Self::wrong_kind(name, "a choice")
        };
        self.params.choice(name, default, choices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_exactly() {
        assert_eq!(size_text(64 << 20), "64MiB");
        assert_eq!(size_text(1 << 40), "1TiB");
        assert_eq!(size_text(4096), "4KiB");
        assert_eq!(size_text((2 << 20) - 4096), "2044KiB");
        assert_eq!(size_text(0), "0");
        assert_eq!(size_text(1000), "1000");
    }
}
