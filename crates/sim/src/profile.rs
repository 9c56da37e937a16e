//! Cost profiles: nanoseconds for each named kernel step, each with its source.
//!
//! A profile is data, read from a file by the CLI (profiles/*.toml); this
//! module checks it is complete and turns it into the table the model uses.

use mm::cost::{Cost, CostTable};
use std::collections::BTreeMap;
use std::fmt;

/// One cost with its provenance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostEntry {
    /// Nanoseconds.
    pub ns: u64,
    /// Where the figure comes from: a publication, a datasheet, or the
    /// command that measured it.
    pub source: String,
}

/// A complete cost profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name (printed with every result).
    pub name: String,
    /// What machine it describes.
    pub description: String,
    /// Every cost, by key.
    pub entries: BTreeMap<String, CostEntry>,
}

/// What is wrong with a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileError {
    /// A key that names no cost.
    UnknownCost(String),
    /// Costs the profile does not give.
    Missing(Vec<&'static str>),
    /// A cost without a source.
    NoSource(String),
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::UnknownCost(k) => {
                write!(f, "unknown cost \"{k}\"; valid costs: ")?;
                let keys: Vec<_> = Cost::ALL.iter().map(|c| c.key()).collect();
                write!(f, "{}", keys.join(", "))
            }
            ProfileError::Missing(ks) => write!(f, "missing costs: {}", ks.join(", ")),
            ProfileError::NoSource(k) => write!(
                f,
                "cost \"{k}\" has no source; every cost must say where its figure comes from"
            ),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// Checks that every cost is given, known and sourced.
    pub fn validate(&self) -> Result<(), ProfileError> {
        for (k, e) in &self.entries {
            if Cost::from_key(k).is_none() {
                return Err(ProfileError::UnknownCost(k.clone()));
            }
            if e.source.trim().is_empty() {
                return Err(ProfileError::NoSource(k.clone()));
            }
        }
        let missing: Vec<_> = Cost::ALL
            .iter()
            .map(|c| c.key())
            .filter(|k| !self.entries.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            return Err(ProfileError::Missing(missing));
        }
        Ok(())
    }

    /// The table the model uses. Call [`Profile::validate`] first.
    pub fn table(&self) -> CostTable {
        let mut t = CostTable::uniform(0);
        for (k, e) in &self.entries {
            if let Some(c) = Cost::from_key(k) {
                t.set(c, e.ns);
            }
        }
        t
    }
}
