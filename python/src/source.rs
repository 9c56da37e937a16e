//! What the Python package passes for an experiment: a path, TOML text,
//! a dict (as JSON text) or a built-in experiment's name, each with the
//! path that names it in errors and locates relative profile paths.

use anyhow::{anyhow, bail, Result};
use mmlab::api::{Source, BUILTIN_EXPERIMENTS};
use mmlab::experiment::{Experiment, ExperimentFile};
use mmlab::sweep::Spec;
use std::path::{Path, PathBuf};

/// An experiment as the Python side gives it.
#[derive(Clone, Debug)]
pub struct PySource {
    /// `path`, `toml`, `json` (a dict) or `builtin`.
    pub kind: String,
    /// The path, the text, the JSON text or the name.
    pub payload: String,
    /// Names the experiment in errors (for text and dicts).
    pub origin: PathBuf,
}

/// A dict's experiment, with the key path of what is wrong in the error
/// (`kernel[0].preset: ...`): line numbers of JSON text the user never
/// wrote would not help.
fn parse_json(text: &str, origin: &Path) -> Result<ExperimentFile> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde_json appends "at line L column C" of its own text.
        let msg = inner.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        if path == "." {
            anyhow!("{}: {msg}", origin.display())
        } else {
            anyhow!("{}: {path}: {msg}", origin.display())
        }
    })
}

impl PySource {
    /// Calls `f` with the library's [`Source`] for this experiment.
    pub fn with_source<T>(&self, f: impl FnOnce(Source) -> Result<T>) -> Result<T> {
        match self.kind.as_str() {
            "path" => f(Source::Path(Path::new(&self.payload))),
            "toml" => f(Source::Toml {
                text: &self.payload,
                origin: &self.origin,
            }),
            "json" => f(Source::Parsed {
                file: Box::new(parse_json(&self.payload, &self.origin)?),
                origin: &self.origin,
            }),
            "builtin" => f(Source::Builtin(&self.payload)),
            other => bail!("unknown experiment source kind \"{other}\""),
        }
    }

    /// The sweep spec of this experiment.
    pub fn spec(&self) -> Result<Spec> {
        self.with_source(Spec::from_source)
    }

    /// The experiment whose machine, profile and kernels a replay uses, as
    /// `mmlab replay --experiment` reads it: `[[workload]]` may be left out
    /// (the trace stands for it). A built-in name is that one experiment
    /// (without its companions).
    pub fn replay_experiment(&self) -> Result<Experiment> {
        let toml = |text: &str, origin: &Path| -> Result<Experiment> {
            let f: ExperimentFile =
                toml::from_str(text).map_err(|e| anyhow!("{}: {e}", origin.display()))?;
            Experiment::from_file(f, origin, true)
        };
        match self.kind.as_str() {
            "path" => Experiment::load_for_replay(Path::new(&self.payload)),
            "toml" => toml(&self.payload, &self.origin),
            "json" => {
                Experiment::from_file(parse_json(&self.payload, &self.origin)?, &self.origin, true)
            }
            "builtin" => {
                let (_, text) = BUILTIN_EXPERIMENTS
                    .iter()
                    .find(|(n, _)| *n == self.payload)
                    .ok_or_else(|| anyhow!("no built-in experiment \"{}\"", self.payload))?;
                toml(text, &self.origin)
            }
            other => bail!("unknown experiment source kind \"{other}\""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dicts_error_names_the_key() {
        let s = PySource {
            kind: "json".into(),
            payload: r#"{"name": "x", "profile": "haswell-ep", "machine": {"name": "m", "nodes": 1, "cpus_per_node": 2, "memory_per_node": "1GiB"}, "kernel": [{"name": "a", "presett": "linux-6.6"}]}"#.into(),
            origin: PathBuf::from("<dict>"),
        };
        let e = s.spec().expect_err("misspelt key");
        let m = e.to_string();
        assert!(m.starts_with("<dict>: kernel[0]"), "{m}");
        assert!(m.contains("presett") && !m.contains("line 1"), "{m}");
    }
}
