//! The results document: one versioned schema for everything mmlab
//! produces (`docs/results-schema.md`, `docs/results-schema.json`), and its
//! tidy rows.
//!
//! # One shape
//!
//! A document is always one JSON object holding a list of experiments, be
//! it one `mmlab run` or every built-in experiment of `mmlab reproduce`:
//! a program reads every results file the same way. JSON Lines
//! (`--format jsonl`) is the same content for streaming: a header record
//! (the document without its experiments) and then one record per
//! experiment as it finishes; [`ResultsDoc::from_jsonl`] puts them back
//! together.
//!
//! # Stability
//!
//! [`SCHEMA_VERSION`] changes when a field is renamed, removed or changes
//! its meaning; adding an optional field does not change it. A reader
//! refuses a document of another schema version with an error that says
//! which.

use crate::experiment::{Experiment, Mode};
use crate::metrics;
use crate::report::RunResult;
use indexmap::IndexMap;
use mm::knobs::KnobValue;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// The `schema` field of every results document.
pub const SCHEMA_NAME: &str = "mmlab-results";
/// The version of the schema this mmlab writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// A results document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultsDoc {
    /// Always [`SCHEMA_NAME`].
    pub schema: String,
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The mmlab that wrote it (`CARGO_PKG_VERSION`).
    pub mmlab_version: String,
    /// The unit of every metric and counter name that the runs use.
    pub units: IndexMap<String, String>,
    /// The experiments, in the order they ran.
    pub experiments: Vec<ExperimentResults>,
    /// `mmlab reproduce` only: the seeds' headline figures beside the
    /// model's, with their bands under `--bands` (empty otherwise; absent
    /// from the JSON when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headlines: Vec<crate::bands::HeadlineResult>,
}

/// One experiment's results, with everything needed to run it again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentResults {
    pub name: String,
    pub description: String,
    /// The seeds that ran (each run names its own).
    pub seeds: Vec<u64>,
    pub profile: ProfileInfo,
    pub machine: MachineInfo,
    pub kernels: Vec<KernelInfo>,
    pub workloads: Vec<WorkloadInfo>,
    /// What the tables show.
    pub report: ReportInfo,
    /// One per (workload, kernel, seed), workloads in file order, kernels
    /// in the experiment's order, then seeds.
    pub runs: Vec<Run>,
    /// Published tables printed beside the model's (possibly none).
    pub published: Vec<PublishedTable>,
    /// `mmlab replay` only: the allocator stream's recorded and replayed
    /// counts (replay mode a).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Value>,
    /// `mmlab replay` only: the address-space replay (mode b) per kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aspace: Option<Value>,
    /// Warnings about how far the results can be trusted (replays).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileInfo {
    pub name: String,
    pub description: String,
}

/// The modelled machine (not the host that ran the model).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineInfo {
    pub name: String,
    /// Where its figures come from.
    pub source: String,
    pub nodes: Vec<NodeInfo>,
    pub llc_bytes_per_node: u64,
    pub dma32_bytes: u64,
    /// True if memory traffic went through the cache model.
    pub cache_model: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeInfo {
    pub cpus: u32,
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelInfo {
    pub name: String,
    pub preset: String,
    /// The knobs as written in the experiment, by kernel name.
    pub knobs: IndexMap<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The parameters as written (defaults not filled in).
    pub params: IndexMap<String, Value>,
    /// The kernels it ran on (`None`: all).
    pub kernels: Option<Vec<String>>,
    /// Its table's baseline kernel (`None`: none).
    pub baseline: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportInfo {
    /// The metrics the tables show, in order.
    pub metrics: Vec<String>,
    /// The report's baseline kernel.
    pub baseline: Option<String>,
    /// `absolute`, `relative` (baseline = 100) or `change` (% from the
    /// baseline); percentages are always absolute.
    pub mode: String,
}

/// One (kernel, workload, seed) simulation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    pub kernel: String,
    pub workload: String,
    pub seed: u64,
    /// Every metric of the registry (`mmlab list`), in its order.
    pub metrics: IndexMap<String, Number>,
    /// Every `/proc/vmstat`-named counter of the model.
    pub vmstat: IndexMap<String, u64>,
    /// Each CPU's PCP `count` and `high` per zone, once a virtual second.
    pub pcp_series: PcpSeries,
}

impl Run {
    /// The value of a metric or counter, as a float.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.metrics
            .get(name)
            .and_then(Number::as_f64)
            .or_else(|| self.vmstat.get(name).map(|&v| v as f64))
    }

    /// The value of a metric or counter as written.
    pub fn number(&self, name: &str) -> Option<Number> {
        self.metrics
            .get(name)
            .cloned()
            .or_else(|| self.vmstat.get(name).map(|&v| Number::from(v)))
    }
}

/// A time series as columns and rows of integers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcpSeries {
    /// Always `["time_ns", "cpu", "zone", "count", "high"]`.
    pub columns: Vec<String>,
    pub rows: Vec<[i64; 5]>,
}

/// A table from a publication, as the experiment file gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedTable {
    /// Where the figures come from (and how to read them).
    pub source: String,
    pub columns: Vec<String>,
    /// The unit of each column, where the experiment gives them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<Vec<String>>,
    /// Decimals to print (`None`: as published).
    pub precision: Option<usize>,
    /// Rows in the experiment's kernel order, then the others.
    pub rows: Vec<PublishedRow>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedRow {
    /// A kernel's name, or another label the publication uses.
    pub label: String,
    /// One per column; `null` where the publication gives no figure.
    pub values: Vec<Option<f64>>,
}

/// One row of the tidy form: one value of one metric of one run (or of a
/// published table).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TidyRow {
    pub experiment: String,
    /// Empty for a published figure (publications are not per workload).
    pub workload: String,
    /// The kernel, or a published row's label.
    pub kernel: String,
    /// `None` for a published figure.
    pub seed: Option<u64>,
    pub metric: String,
    pub value: Number,
    /// Empty where a published table gives no unit.
    pub unit: String,
    /// `model` or `published`.
    pub source: &'static str,
}

/// The column names of [`TidyRow`], in order.
pub const TIDY_COLUMNS: [&str; 8] = [
    "experiment",
    "workload",
    "kernel",
    "seed",
    "metric",
    "value",
    "unit",
    "source",
];

fn knob_json(v: &KnobValue) -> Value {
    match v {
        KnobValue::Int(i) => Value::from(*i),
        KnobValue::Str(s) => Value::from(s.clone()),
    }
}

fn param_json(v: &workloads::ParamValue) -> Value {
    match v {
        workloads::ParamValue::Int(i) => Value::from(*i),
        workloads::ParamValue::Str(s) => Value::from(s.clone()),
    }
}

/// The name `mode` has in experiment files.
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Absolute => "absolute",
        Mode::Relative => "relative",
        Mode::Change => "change",
    }
}

impl Run {
    /// The document's form of one run's result.
    pub fn from_result(r: &RunResult) -> Run {
        let metrics = metrics::METRICS
            .iter()
            .map(|m| (m.name.to_string(), (m.value)(r).json_number()))
            .collect();
        let vmstat = r.vmstat.iter().map(|(k, v)| (k.to_string(), v)).collect();
        let rows = r
            .stats
            .pcp_series
            .iter()
            .map(|p| {
                [
                    p.time_ns as i64,
                    i64::from(p.cpu),
                    i64::from(p.zone),
                    i64::from(p.count),
                    i64::from(p.high),
                ]
            })
            .collect();
        Run {
            kernel: r.kernel.clone(),
            workload: r.workload.clone(),
            seed: r.seed,
            metrics,
            vmstat,
            pcp_series: PcpSeries {
                columns: ["time_ns", "cpu", "zone", "count", "high"]
                    .map(String::from)
                    .to_vec(),
                rows,
            },
        }
    }
}

impl ExperimentResults {
    /// The document's form of an experiment's results.
    pub fn new(exp: &Experiment, seeds: &[u64], results: &[RunResult]) -> ExperimentResults {
        ExperimentResults {
            name: exp.name.clone(),
            description: exp.description.clone(),
            seeds: seeds.to_vec(),
            profile: ProfileInfo {
                name: exp.profile.name.clone(),
                description: exp.profile.description.clone(),
            },
            machine: MachineInfo {
                name: exp.machine.name.clone(),
                source: exp.machine_source.clone(),
                nodes: exp
                    .machine
                    .nodes
                    .iter()
                    .map(|n| NodeInfo {
                        cpus: n.cpus,
                        memory_bytes: n.memory_bytes,
                    })
                    .collect(),
                llc_bytes_per_node: exp.machine.llc_bytes,
                dma32_bytes: exp.machine.dma32_bytes,
                cache_model: exp.cache.is_some(),
            },
            kernels: exp
                .kernels
                .iter()
                .map(|k| KernelInfo {
                    name: k.name.clone(),
                    preset: k.config.preset.name().to_string(),
                    knobs: k
                        .knobs
                        .iter()
                        .map(|(n, v)| (n.clone(), knob_json(v)))
                        .collect(),
                })
                .collect(),
            workloads: exp
                .workloads
                .iter()
                .map(|w| WorkloadInfo {
                    name: w.name.clone(),
                    kind: w.kind.clone(),
                    params: w
                        .params
                        .0
                        .iter()
                        .map(|(k, v)| (k.clone(), param_json(v)))
                        .collect(),
                    kernels: w.kernels.clone(),
                    baseline: exp.baseline_of(w).cloned(),
                })
                .collect(),
            report: ReportInfo {
                metrics: exp.report.metrics.clone(),
                baseline: exp.report.baseline.clone(),
                mode: mode_name(exp.report.mode).to_string(),
            },
            runs: results.iter().map(Run::from_result).collect(),
            published: published_tables(exp),
            replay: None,
            aspace: None,
            warnings: Vec::new(),
        }
    }

    /// The runs of one (workload, kernel), every seed.
    pub fn runs_of<'a>(
        &'a self,
        workload: &'a str,
        kernel: &'a str,
    ) -> impl Iterator<Item = &'a Run> {
        self.runs
            .iter()
            .filter(move |r| r.workload == workload && r.kernel == kernel)
    }

    /// The tidy rows of this experiment: every metric and counter of every
    /// run, then every published figure.
    pub fn tidy_rows(&self) -> Vec<TidyRow> {
        let mut out = Vec::new();
        for r in &self.runs {
            let values = r
                .metrics
                .iter()
                .map(|(k, v)| (k, v.clone()))
                .chain(r.vmstat.iter().map(|(k, &v)| (k, Number::from(v))));
            for (metric, value) in values {
                out.push(TidyRow {
                    experiment: self.name.clone(),
                    workload: r.workload.clone(),
                    kernel: r.kernel.clone(),
                    seed: Some(r.seed),
                    metric: metric.clone(),
                    unit: metrics::unit_of(metric).unwrap_or("").to_string(),
                    value,
                    source: "model",
                });
            }
        }
        for t in &self.published {
            for row in &t.rows {
                for (c, v) in row.values.iter().enumerate() {
                    let Some(v) = v.and_then(Number::from_f64) else {
                        continue;
                    };
                    out.push(TidyRow {
                        experiment: self.name.clone(),
                        workload: String::new(),
                        kernel: row.label.clone(),
                        seed: None,
                        metric: t.columns[c].clone(),
                        value: v,
                        unit: t
                            .units
                            .as_ref()
                            .and_then(|u| u.get(c).cloned())
                            .unwrap_or_default(),
                        source: "published",
                    });
                }
            }
        }
        out
    }
}

/// The experiment's published tables, rows in its kernel order, then any
/// others in the file's (sorted) order, as the text tables print them.
fn published_tables(exp: &Experiment) -> Vec<PublishedTable> {
    let Some(p) = &exp.published else {
        return Vec::new();
    };
    let mut labels: Vec<&String> = exp
        .kernels
        .iter()
        .map(|k| &k.name)
        .filter(|n| p.rows.contains_key(*n))
        .collect();
    labels.extend(
        p.rows
            .keys()
            .filter(|k| !exp.kernels.iter().any(|x| &x.name == *k)),
    );
    vec![PublishedTable {
        source: p.source.clone(),
        columns: p.columns.clone(),
        units: p.units.clone(),
        precision: p.precision,
        rows: labels
            .into_iter()
            .map(|l| PublishedRow {
                label: l.clone(),
                values: p.rows[l]
                    .iter()
                    .map(|v| (!v.is_nan()).then_some(*v))
                    .collect(),
            })
            .collect(),
    }]
}

/// Why a file is not a results document this mmlab reads.
#[derive(Debug)]
pub struct DocError(pub String);

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DocError {}

impl ResultsDoc {
    /// A document of these experiments.
    pub fn new(experiments: Vec<ExperimentResults>) -> ResultsDoc {
        ResultsDoc {
            schema: SCHEMA_NAME.to_string(),
            schema_version: SCHEMA_VERSION,
            mmlab_version: env!("CARGO_PKG_VERSION").to_string(),
            units: metrics::units()
                .into_iter()
                .map(|(n, u)| (n.to_string(), u.to_string()))
                .collect(),
            experiments,
            headlines: Vec::new(),
        }
    }

    /// The header record of the JSON Lines form: the document without its
    /// experiments.
    pub fn header_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.shift_remove("experiments");
            o.shift_insert(0, "record".into(), Value::from("header"));
        }
        v
    }

    /// The JSON Lines record of the headlines (after the experiments).
    pub fn headlines_record(&self) -> Value {
        serde_json::json!({
            "record": "headlines",
            "headlines": serde_json::to_value(&self.headlines).unwrap_or(Value::Null),
        })
    }

    /// The JSON Lines record of one experiment.
    pub fn experiment_record(e: &ExperimentResults) -> Value {
        let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.shift_insert(0, "record".into(), Value::from("experiment"));
        }
        v
    }

    /// Reads a document, checking its schema and version first so that a
    /// wrong file gets an error that says what it is.
    pub fn from_json(text: &str) -> Result<ResultsDoc, DocError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| DocError(format!("not JSON: {e}")))?;
        Self::from_value(v)
    }

    fn from_value(v: Value) -> Result<ResultsDoc, DocError> {
        check_schema(&v)?;
        serde_json::from_value(v).map_err(|e| {
            DocError(format!(
                "not a valid {SCHEMA_NAME} version {SCHEMA_VERSION} document: {e}"
            ))
        })
    }

    /// Reads the JSON Lines form: a header record, then experiment records.
    pub fn from_jsonl(text: &str) -> Result<ResultsDoc, DocError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, first) = lines
            .next()
            .ok_or_else(|| DocError("empty: expected a header record".into()))?;
        let mut head: Value =
            serde_json::from_str(first).map_err(|e| DocError(format!("line 1: not JSON: {e}")))?;
        let obj = head
            .as_object_mut()
            .filter(|o| o.get("record") == Some(&Value::from("header")))
            .ok_or_else(|| DocError("line 1: expected {\"record\": \"header\", ...}".into()))?;
        obj.shift_remove("record");
        let mut exps = Vec::new();
        let mut headlines = None;
        for (i, line) in lines {
            let mut e: Value = serde_json::from_str(line)
                .map_err(|e| DocError(format!("line {}: not JSON: {e}", i + 1)))?;
            if let Some(h) = e
                .as_object_mut()
                .filter(|o| o.get("record") == Some(&Value::from("headlines")))
            {
                headlines = h.shift_remove("headlines");
                continue;
            }
            let o = e
                .as_object_mut()
                .filter(|o| o.get("record") == Some(&Value::from("experiment")))
                .ok_or_else(|| {
                    DocError(format!(
                        "line {}: expected {{\"record\": \"experiment\", ...}}",
                        i + 1
                    ))
                })?;
            o.shift_remove("record");
            exps.push(e);
        }
        obj.insert("experiments".into(), Value::Array(exps));
        if let Some(h) = headlines {
            obj.insert("headlines".into(), h);
        }
        Self::from_value(head)
    }

    /// Every experiment's tidy rows.
    pub fn tidy_rows(&self) -> Vec<TidyRow> {
        self.experiments
            .iter()
            .flat_map(|e| e.tidy_rows())
            .collect()
    }
}

/// Checks `schema` and `schema_version` before anything else is read.
fn check_schema(v: &Value) -> Result<(), DocError> {
    let Some(o) = v.as_object() else {
        return Err(DocError(format!(
            "expected a JSON object with \"schema\": \"{SCHEMA_NAME}\"; found {}",
            kind_of(v)
        )));
    };
    match o.get("schema").and_then(Value::as_str) {
        Some(SCHEMA_NAME) => {}
        Some(other) => {
            return Err(DocError(format!(
                "\"schema\" is \"{other}\"; expected \"{SCHEMA_NAME}\""
            )))
        }
        None if o.contains_key("mmlab_version") => {
            return Err(DocError(format!(
                "an mmlab results file from before the versioned schema (no \"schema\" field); \
                 run the experiment again with this mmlab to get a {SCHEMA_NAME} version \
                 {SCHEMA_VERSION} document"
            )))
        }
        None => {
            return Err(DocError(format!(
                "no \"schema\" field: not an mmlab results document (expected \"schema\": \"{SCHEMA_NAME}\")"
            )))
        }
    }
    match o.get("schema_version").and_then(Value::as_u64) {
        Some(v) if v == u64::from(SCHEMA_VERSION) => Ok(()),
        Some(v) => Err(DocError(format!(
            "schema version {v}; this mmlab reads version {SCHEMA_VERSION}{}",
            if v > u64::from(SCHEMA_VERSION) {
                " (the file was written by a newer mmlab)"
            } else {
                ""
            }
        ))),
        None => Err(DocError(
            "no \"schema_version\" number; expected one".into(),
        )),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array (an mmlab results file from before the versioned schema?)",
        Value::Object(_) => "an object",
    }
}

/// Writes `v` as JSON: pretty, except that an array whose elements are all
/// numbers, strings, booleans or nulls stays on one line, so that a time
/// series takes one line a sample instead of seven.
pub fn to_json_pretty<T: Serialize>(v: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, CompactLeaves::default());
    // Serializing our own types into a Vec cannot fail.
    let _ = v.serialize(&mut ser);
    String::from_utf8(out).unwrap_or_default()
}

/// serde_json's pretty formatter, with arrays of scalars on one line.
///
/// An array's layout is decided at its first element: the formatter learns
/// the element's kind only when serde_json calls `begin_array`,
/// `begin_object` or a `write_*` method for it.
#[derive(Default)]
struct CompactLeaves {
    indent: usize,
    /// Per open container: (has had an element, is inline).
    stack: Vec<(bool, bool)>,
    /// An array was just opened and its first element not yet seen.
    pending: bool,
}

impl CompactLeaves {
    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..self.indent {
            w.write_all(b"  ")?;
        }
        Ok(())
    }

    fn inline(&self) -> bool {
        self.stack.last().is_some_and(|s| s.1)
    }

    /// Called before every value: the first element of an array decides
    /// whether the array is inline (a scalar) or one element a line.
    fn before_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        container: bool,
    ) -> std::io::Result<()> {
        if !self.pending {
            return Ok(());
        }
        self.pending = false;
        if let Some(top) = self.stack.last_mut() {
            top.1 = !container;
        }
        if container {
            self.newline(w)?;
        }
        Ok(())
    }
}

macro_rules! scalar_writers {
    ($($name:ident: $t:ty),* $(,)?) => {
        $(
            fn $name<W: ?Sized + std::io::Write>(&mut self, w: &mut W, v: $t) -> std::io::Result<()> {
                self.before_value(w, false)?;
                serde_json::ser::CompactFormatter.$name(w, v)
            }
        )*
    };
}

impl serde_json::ser::Formatter for CompactLeaves {
    scalar_writers!(
        write_bool: bool, write_i8: i8, write_i16: i16, write_i32: i32, write_i64: i64,
        write_i128: i128, write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64,
        write_u128: u128, write_f32: f32, write_f64: f64, write_number_str: &str,
    );

    fn write_null<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.before_value(w, false)?;
        w.write_all(b"null")
    }

    fn begin_string<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.before_value(w, false)?;
        w.write_all(b"\"")
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.before_value(w, true)?;
        self.indent += 1;
        self.stack.push((false, false));
        self.pending = true;
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.indent -= 1;
        self.pending = false;
        let (had, inline) = self.stack.pop().unwrap_or((false, true));
        if had && !inline {
            self.newline(w)?;
        }
        w.write_all(b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if let Some(top) = self.stack.last_mut() {
            top.0 = true;
        }
        if first {
            // Laid out by before_value once the element's kind is known.
            return Ok(());
        }
        if self.inline() {
            w.write_all(b", ")
        } else {
            w.write_all(b",")?;
            self.newline(w)
        }
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.before_value(w, true)?;
        self.indent += 1;
        self.stack.push((false, false));
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.indent -= 1;
        let (had, _) = self.stack.pop().unwrap_or((false, false));
        if had {
            self.newline(w)?;
        }
        w.write_all(b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if let Some(top) = self.stack.last_mut() {
            top.0 = true;
        }
        if !first {
            w.write_all(b",")?;
        }
        self.newline(w)
    }

    fn end_object_key<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        Ok(())
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}
