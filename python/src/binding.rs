//! The PyO3 module `mmlab._native`. Thin: every function converts its
//! arguments, runs the library with the GIL released, and hands back
//! columns ([`crate::table`]) for `mmlab/_arrow.py` to wrap. Errors become
//! `mmlab.MmlabError` with the library's message (file, line, what was
//! expected), the whole `anyhow` chain.

use crate::frames;
use crate::source::PySource;
use crate::table::{Column, Data, Table};
use mmlab::api::{self, RunOptions};
use mmlab::replay::{ReplayMode, ReplayOn};
use mmlab::sweep::{self, Point};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use std::path::{Path, PathBuf};

/// `mmlab.MmlabError` (defined in Python, `mmlab/_errors.py`, so that it
/// pickles: a Ray task's error reaches the driver whole) with the library's
/// message, the whole `anyhow` chain.
fn err(py: Python<'_>, e: anyhow::Error) -> PyErr {
    let msg = format!("{e:#}");
    match py
        .import("mmlab._errors")
        .and_then(|m| m.getattr("MmlabError"))
        .and_then(|t| t.call1((msg.clone(),)))
    {
        Ok(v) => PyErr::from_value(v),
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(msg),
    }
}

/// One column as `(name, type, length, null_count, validity, a, b, extra)`:
/// `a`/`b` the data buffers (values; or offsets and bytes), `extra` the
/// dictionary's strings, a list column's child columns or a null column's
/// type (type `null`: every row null, no buffers).
fn column<'py>(py: Python<'py>, name: &str, c: &Column) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = |b: &[u8]| PyBytes::new(py, b).into_any();
    let none = || py.None().into_bound(py);
    let validity = c.validity.bitmap().map_or_else(none, bytes);
    let (ty, a, b, extra) = match &c.data {
        Data::Prim { prim, bytes: v } => (prim.name(), bytes(v), none(), none()),
        Data::Bool { bits } => ("bool", bytes(bits), none(), none()),
        Data::Str { offsets, bytes: v } => ("str", bytes(offsets), bytes(v), none()),
        Data::Dict { indices, dict } => (
            "dict",
            bytes(indices),
            none(),
            PyList::new(py, dict)?.into_any(),
        ),
        Data::List { offsets, child } => ("list", bytes(offsets), none(), columns(py, child)?),
        Data::Null { ty } => ("null", none(), none(), ty.into_pyobject(py)?.into_any()),
    };
    let items: Vec<Bound<'py, PyAny>> = vec![
        name.into_pyobject(py)?.into_any(),
        ty.into_pyobject(py)?.into_any(),
        c.len.into_pyobject(py)?.into_any(),
        c.validity.null_count().into_pyobject(py)?.into_any(),
        validity,
        a,
        b,
        extra,
    ];
    PyTuple::new(py, items)
}

fn columns<'py>(py: Python<'py>, t: &Table) -> PyResult<Bound<'py, PyAny>> {
    let cols = t
        .columns
        .iter()
        .map(|(n, c)| column(py, n, c))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, cols)?.into_any())
}

fn source(kind: String, payload: String, origin: String) -> PySource {
    PySource {
        kind,
        payload,
        origin: PathBuf::from(origin),
    }
}

/// The value of a grid point's setting, as a TOML value.
#[derive(FromPyObject)]
enum Value {
    // bool before int: Python's bool is an int.
    Bool(bool),
    Int(i64),
    Str(String),
}

impl From<Value> for toml::Value {
    fn from(v: Value) -> toml::Value {
        match v {
            Value::Bool(b) => toml::Value::Boolean(b),
            Value::Int(i) => toml::Value::Integer(i),
            Value::Str(s) => toml::Value::String(s),
        }
    }
}

type PyPoint = (Vec<(String, Value)>, Option<u64>);

/// The points that failed: `(index, message)`.
type Failures = Vec<(usize, String)>;

fn point(p: PyPoint) -> Point {
    Point {
        settings: p.0.into_iter().map(|(k, v)| (k, v.into())).collect(),
        seed: p.1,
    }
}

/// mmlab's version (the Rust crates').
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The built-in experiments' names.
#[pyfunction]
fn builtin_names() -> Vec<&'static str> {
    api::builtin_names()
}

/// Runs an experiment: the tidy columns of its results document.
#[pyfunction]
#[pyo3(signature = (kind, payload, origin, seeds, jobs, progress))]
fn run<'py>(
    py: Python<'py>,
    kind: String,
    payload: String,
    origin: String,
    seeds: Vec<u64>,
    jobs: Option<usize>,
    progress: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let src = source(kind, payload, origin);
    let opts = RunOptions {
        seeds,
        jobs,
        progress,
        timeline: None,
    };
    let table = py
        .detach(|| {
            src.with_source(|s| api::run(s, &opts))
                .map(|doc| frames::tidy_table(&doc, true))
        })
        .map_err(|e| err(py, e))?;
    columns(py, &table)
}

/// Runs an experiment: its results document as JSON text.
#[pyfunction]
#[pyo3(signature = (kind, payload, origin, seeds, jobs))]
fn run_document(
    py: Python<'_>,
    kind: String,
    payload: String,
    origin: String,
    seeds: Vec<u64>,
    jobs: Option<usize>,
) -> PyResult<String> {
    let src = source(kind, payload, origin);
    let opts = RunOptions {
        seeds,
        jobs,
        progress: false,
        timeline: None,
    };
    py.detach(|| {
        src.with_source(|s| api::run(s, &opts))
            .map(|doc| mmlab::results::to_json_pretty(&doc))
    })
    .map_err(|e| err(py, e))
}

/// Checks a sweep before it runs: every grid key names a knob or a
/// workload parameter, and every point's experiment is valid. Returns the
/// error of each invalid point as `(index, message)`.
#[pyfunction]
fn sweep_check(
    py: Python<'_>,
    kind: String,
    payload: String,
    origin: String,
    keys: Vec<String>,
    points: Vec<PyPoint>,
) -> PyResult<Failures> {
    let src = source(kind, payload, origin);
    let points: Vec<Point> = points.into_iter().map(point).collect();
    py.detach(|| {
        let spec = src.spec()?;
        for k in &keys {
            spec.setting(k)?;
        }
        Ok(points
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                spec.experiments(&p.settings)
                    .err()
                    .map(|e| (i, format!("{e:#}")))
            })
            .collect())
    })
    .map_err(|e| err(py, e))
}

/// Runs the points of a sweep on `jobs` threads (the GIL released), calling
/// `progress(done)` about five times a second. Returns the columns of the
/// points that ran (column `point`: the index in `points`) and the errors
/// of those that failed, `(index, message)`. Ctrl-C stops it.
#[pyfunction]
#[pyo3(signature = (kind, payload, origin, points, jobs, progress))]
#[allow(clippy::too_many_arguments)]
fn sweep_local<'py>(
    py: Python<'py>,
    kind: String,
    payload: String,
    origin: String,
    points: Vec<PyPoint>,
    jobs: Option<usize>,
    progress: Py<PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Failures)> {
    let src = source(kind, payload, origin);
    let points: Vec<Point> = points.into_iter().map(point).collect();
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut interrupted: Option<PyErr> = None;
    let result = py.detach(|| -> anyhow::Result<(Table, Failures)> {
        let spec = src.spec()?;
        let mut report = |done: usize| {
            Python::attach(|py| {
                let r = py
                    .check_signals()
                    .and_then(|_| progress.call1(py, (done,)).map(|_| ()));
                match r {
                    Ok(()) => true,
                    Err(e) => {
                        interrupted.get_or_insert(e);
                        false
                    }
                }
            })
        };
        let out = sweep::run_points(&spec, &points, jobs, &mut report);
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for (i, r) in out.iter().enumerate() {
            match r {
                Ok(doc) => ok.push((i as u32, doc)),
                Err(e) => failed.push((i, format!("{e:#}"))),
            }
        }
        Ok((frames::sweep_table(ok), failed))
    });
    if let Some(e) = interrupted {
        return Err(e);
    }
    let (table, failed) = result.map_err(|e| err(py, e))?;
    Ok((columns(py, &table)?, failed))
}

/// Runs one point of a sweep (a Ray task's work): its columns, with
/// `index` in column `point`.
#[pyfunction]
fn sweep_point<'py>(
    py: Python<'py>,
    kind: String,
    payload: String,
    origin: String,
    index: u32,
    p: PyPoint,
) -> PyResult<Bound<'py, PyAny>> {
    let src = source(kind, payload, origin);
    let p = point(p);
    let table = py
        .detach(|| {
            let spec = src.spec()?;
            let doc = sweep::run_point(&spec, &p)?;
            Ok(frames::sweep_table([(index, &doc)]))
        })
        .map_err(|e| err(py, e))?;
    columns(py, &table)
}

/// Reads a trace: its event columns, header JSON and trailer JSON (or None).
#[pyfunction]
fn read_trace<'py>(
    py: Python<'py>,
    path: PathBuf,
) -> PyResult<(Bound<'py, PyAny>, String, Option<String>)> {
    let t = py
        .detach(|| frames::read_trace(Path::new(&path)))
        .map_err(|e| err(py, e))?;
    Ok((
        columns(py, &t.events)?,
        t.header.to_string(),
        t.trailer.map(|v| v.to_string()),
    ))
}

fn replay_mode(mode: &str) -> anyhow::Result<ReplayMode> {
    Ok(match mode {
        "both" => ReplayMode::Both,
        "alloc" => ReplayMode::Alloc,
        "aspace" => ReplayMode::Aspace,
        other => anyhow::bail!(
            "mode \"{other}\": expected \"both\", \"alloc\" (replay mode a) or \"aspace\" (mode b)"
        ),
    })
}

/// Replays a trace (`mmlab replay`): the tidy columns of mode (a)'s runs
/// and the whole results document as JSON text. `experiment` is the
/// `(kind, payload, origin)` of the experiment whose machine and kernels
/// it uses, or None for the recorded ones.
#[pyfunction]
#[pyo3(signature = (trace, experiment, seed, warm, mode))]
fn replay<'py>(
    py: Python<'py>,
    trace: PathBuf,
    experiment: Option<(String, String, String)>,
    seed: Option<u64>,
    warm: bool,
    mode: String,
) -> PyResult<(Bound<'py, PyAny>, String)> {
    let experiment = experiment.map(|(k, p, o)| source(k, p, o));
    let (table, text) = py
        .detach(|| {
            let mode = replay_mode(&mode)?;
            // A path is read after the trace's header, as `mmlab replay
            // --experiment` does, so that a bad trace is reported first.
            let on = match &experiment {
                None => ReplayOn::Recorded,
                Some(s) if s.kind == "path" => ReplayOn::File(Path::new(&s.payload)),
                Some(s) => ReplayOn::Loaded(Box::new(s.replay_experiment()?)),
            };
            let r = mmlab::replay::replay_on(&trace, on, seed, warm, mode, None)?;
            Ok((
                frames::tidy_table(&r.doc, false),
                mmlab::results::to_json_pretty(&r.doc),
            ))
        })
        .map_err(|e| err(py, e))?;
    Ok((columns(py, &table)?, text))
}

/// A validation row: (mode, counter, recorded, model).
type Row = (&'static str, String, Option<u64>, u64);

/// Validates a trace (`mmlab validate`): its rows, its text and its warnings.
#[pyfunction]
#[pyo3(signature = (trace, seed, warm, mode))]
fn validate(
    py: Python<'_>,
    trace: PathBuf,
    seed: Option<u64>,
    warm: bool,
    mode: String,
) -> PyResult<(Vec<Row>, String, Vec<String>)> {
    py.detach(|| {
        let v = mmlab::replay::validate(&trace, seed, warm, replay_mode(&mode)?)?;
        let rows = v
            .rows()
            .into_iter()
            .map(|r| (r.mode, r.counter, r.recorded, r.model))
            .collect();
        Ok((rows, v.text(&trace), v.warnings))
    })
    .map_err(|e| err(py, e))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_names, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(run_document, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_check, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_local, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_point, m)?)?;
    m.add_function(wrap_pyfunction!(read_trace, m)?)?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    Ok(())
}
