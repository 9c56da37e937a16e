//! Workload parameters as given in an experiment file.

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
