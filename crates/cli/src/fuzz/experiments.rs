//! The experiment fuzz target: random valid-looking experiment files from a
//! seed, mutations of the built-in ones, and byte damage, each parsed,
//! validated and, when accepted, run (every kernel × workload, `zoneinfo`,
//! the tables and the results document).
//!
//! The generator draws from the same registries the validator checks
//! against (knobs, presets, workloads and their parameter tables, metrics,
//! profiles), mostly within their ranges (so that most inputs run) and
//! sometimes outside them (so that the errors are exercised). Machines are
//! small (at most 4 nodes of 8 CPUs and 1 GiB) and integer parameters are
//! drawn mostly at or below their defaults, so that an accepted run ends
//! far within the event budget; one that does not is a liveness failure.

use std::path::Path;

use mm::knobs::{all_knobs, Preset};
use toml::{Table, Value};
use workloads::params::{Count, ParamKind};

use super::{check_error, Budget, Outcome, Rng, Target};
use crate::experiment::{Experiment, BUILTIN_PROFILES};
use crate::report::Format;

/// The name the inputs go by in error messages.
const ORIGIN: &str = "fuzz.toml";

/// The experiment target.
pub struct Experiments;

impl Target for Experiments {
    fn make(&self, seed: u64) -> (Vec<u8>, &'static str) {
        let mut rng = Rng::new(seed);
        let text = match rng.below(10) {
            0..=4 => toml::to_string(&generate(&mut rng)).unwrap_or_default(),
            5..=8 => toml::to_string(&mutate_builtin(&mut rng)).unwrap_or_default(),
            _ => {
                let base = if rng.pct(50) {
                    generate(&mut rng)
                } else {
                    mutate_builtin(&mut rng)
                };
                let mut bytes = toml::to_string(&base).unwrap_or_default().into_bytes();
                damage_bytes(&mut rng, &mut bytes);
                return (bytes, "toml");
            }
        };
        (text.into_bytes(), "toml")
    }

    fn run(&self, input: &[u8], budget: &Budget) -> Outcome {
        // `mmlab run` reads the file as UTF-8 and says so if it is not.
        let Ok(text) = std::str::from_utf8(input) else {
            return Outcome::Rejected("not UTF-8".into());
        };
        match Experiment::parse(text, Path::new(ORIGIN)) {
            Err(e) => check_error(&e, ORIGIN),
            Ok(exp) if budget.front_only => {
                zoneinfo_all(&exp);
                Outcome::Ran
            }
            Ok(exp) => run_accepted(exp, budget),
        }
    }
}

/// Runs an accepted experiment as `mmlab run` and `mmlab zoneinfo` would.
fn run_accepted(exp: Experiment, budget: &Budget) -> Outcome {
    zoneinfo_all(&exp);
    let mut results = Vec::new();
    for (k, w) in exp.pairs() {
        match crate::runner::run_one_within(&exp, k, w, exp.seed, None, Some(budget.events)) {
            // Found while building the workload: a validation error, late.
            Err(e) => {
                let msg = format!("{e:#}");
                if msg.trim().is_empty() {
                    return Outcome::Failed("an empty error from a run".into());
                }
                return Outcome::Rejected(msg);
            }
            Ok((_, true)) => {
                return Outcome::Failed(format!(
                    "liveness: kernel \"{}\" × workload \"{}\" ({}) did not end within {} events",
                    k.name, w.name, w.kind, budget.events
                ))
            }
            Ok((r, false)) => results.push(r),
        }
    }
    let run = crate::api::ExperimentRun {
        seeds: vec![exp.seed],
        experiment: exp,
        results,
    };
    let _ = run.tables(Format::Text);
    let _ = run.tables(Format::Markdown);
    let doc = crate::results::ResultsDoc::new(vec![run.to_results()]);
    for f in [Format::Json, Format::Csv, Format::CsvWide] {
        let _ = crate::output::write_document(&doc, f, &mut std::io::sink());
    }
    Outcome::Ran
}

/// Every kernel's boot-time `/proc/zoneinfo`, as `mmlab zoneinfo` prints it.
fn zoneinfo_all(exp: &Experiment) {
    for k in &exp.kernels {
        let pa = mm::page_alloc::PageAlloc::new(
            &exp.machine.memory_layout(),
            k.config.sysctl,
            k.config.pcp,
        );
        let _ = mm::vmstat::zoneinfo(&pa);
    }
}

const SIZES: &[&str] = &["64MiB", "128MiB", "256MiB", "512MiB", "1GiB"];
const ODD_SIZES: &[&str] = &[
    "0", "3MiB", "1TiB", "16TiB", "1.5GiB", "abc", "-2MiB", "4KiB",
];
const INTS: &[i64] = &[
    0,
    1,
    2,
    5,
    8,
    10,
    64,
    100,
    1000,
    3000,
    3001,
    65536,
    500000,
    -1,
    i32::MAX as i64,
    i64::MAX,
];

/// A random experiment, mostly valid.
pub fn generate(rng: &mut Rng) -> Value {
    let mut t = Table::new();
    t.insert(
        "name".into(),
        Value::String(format!("fuzz-{}", rng.below(1000))),
    );
    if rng.pct(50) {
        t.insert("description".into(), Value::String("generated".into()));
    }
    if rng.pct(70) {
        t.insert("seed".into(), Value::Integer(rng.below(1 << 20) as i64));
    }
    let (profile, shape) = if rng.pct(98) {
        // As `rng.pick(BUILTIN_PROFILES)` (the same draw), the shape parsed
        // once per process.
        let i = rng.below(BUILTIN_PROFILES.len() as u64) as usize;
        (BUILTIN_PROFILES[i].0.to_string(), builtin_shapes()[i])
    } else {
        ("no-such-profile".to_string(), Shape::default())
    };
    t.insert("profile".into(), Value::String(profile));
    if rng.pct(15) {
        let tail = *rng.pick(&[0i64, 1, 3, 3600, 3601, -1]);
        t.insert("idle_tail_s".into(), Value::Integer(tail));
    }
    t.insert("machine".into(), Value::Table(machine(rng, shape)));
    let nk = 1 + rng.below(3);
    let kernels: Vec<Value> = (0..nk).map(|i| Value::Table(kernel(rng, i))).collect();
    t.insert("kernel".into(), Value::Array(kernels));
    let nw = if rng.pct(97) { 1 + rng.below(2) } else { 0 };
    let wls: Vec<Value> = (0..nw).map(|i| Value::Table(workload(rng, i))).collect();
    t.insert("workload".into(), Value::Array(wls));
    if rng.pct(60) {
        t.insert("report".into(), Value::Table(report(rng, nk)));
    }
    bound_big_machine_work(&mut t);
    bound_big_sizes(&mut t);
    Value::Table(t)
}

/// The most memory a generated workload parameter may ask for when the
/// machine can hold it: 1.5 GiB written once in 4 KiB pages is about
/// 400 000 faults, well within the event budget.
const BIG_SIZE: &str = "1536MiB";

/// Brings a workload size the machine can hold but that is larger than
/// [`BIG_SIZE`] (an odd size, `1TiB` or `16TiB`, drawn on one of the rare
/// machines of terabytes) down to it: anon-w-seq writing 1 TiB on a
/// 16 TiB node (input 834335 of `--seed 5000000`) is 268 M faults and
/// about 4 minutes of CPU, a long run that the event budget calls endless.
/// A size larger than the machine stays, so validation's error is still
/// exercised.
fn bound_big_sizes(t: &mut Table) {
    let size = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .and_then(|s| crate::experiment::parse_size(s).ok())
    };
    let m = t.get("machine");
    let nodes = m.and_then(|m| m.get("nodes")).and_then(Value::as_integer);
    let machine = size(m.and_then(|m| m.get("memory_per_node")))
        .zip(nodes)
        .map_or(0, |(b, n)| b.saturating_mul(n.max(0) as u64));
    let big = crate::experiment::parse_size(BIG_SIZE).expect("a size");
    each_workload_params(t.get_mut("workload"), |def, p| {
        for spec in def.params {
            if !matches!(
                spec.kind,
                ParamKind::Size { .. } | ParamKind::OptSize { .. }
            ) {
                continue;
            }
            if size(p.get(spec.name)).is_some_and(|b| b > big && b <= machine) {
                p.insert(spec.name.to_string(), Value::String(BIG_SIZE.into()));
            }
        }
    });
}

/// CPUs beyond which per-CPU defaults are bounded (the generator's usual
/// machines have at most 32).
const BIG_MACHINE_CPUS: i64 = 64;
/// What a per-CPU count is set to on such a machine.
const BIG_MACHINE_TASKS: i64 = 16;

/// On the rare machine of hundreds of CPUs (`cpus_per_node = 300`, which
/// `machine()` draws to exercise large machines), sets every workload
/// parameter left at a per-CPU default ("the number of CPUs" and its
/// kin) to [`BIG_MACHINE_TASKS`]: 3 nodes of 300 CPUs make malloc-dontneed
/// 900 processes, about 30 M engine events and 20 s of CPU (input 81531
/// of `--seed 5000000`), a long run that the event budget calls endless.
/// A mutated built-in gets the same (input 112339: the vmacache experiment
/// mutated to 1,000 CPUs left malloc-dontneed 1,000 processes).
/// The machine itself, and parameters the generator drew, stay.
fn bound_big_machine_work(t: &mut Table) {
    let int = |v: Option<&Value>| v.and_then(Value::as_integer).unwrap_or(0);
    let m = t.get("machine");
    let cpus = int(m.and_then(|m| m.get("nodes")))
        .saturating_mul(int(m.and_then(|m| m.get("cpus_per_node"))));
    if cpus <= BIG_MACHINE_CPUS {
        return;
    }
    each_workload_params(t.get_mut("workload"), |def, p| {
        for spec in def.params {
            if let ParamKind::Int {
                default: Count::Of(_, what),
                min,
                ..
            } = spec.kind
            {
                if what.contains("number of CPUs") && !p.contains_key(spec.name) {
                    p.insert(
                        spec.name.to_string(),
                        Value::Integer(BIG_MACHINE_TASKS.max(min)),
                    );
                }
            }
        }
    });
}

/// Calls `f` with each `[[workload]]` entry's registry definition and its
/// `params` table (entries of unknown type or without `params` are skipped).
fn each_workload_params(
    list: Option<&mut Value>,
    mut f: impl FnMut(&workloads::WorkloadDef, &mut Table),
) {
    let Some(ws) = list.and_then(Value::as_array_mut) else {
        return;
    };
    for w in ws {
        let kind = w.get("type").and_then(Value::as_str).unwrap_or("");
        let Some(def) = workloads::WORKLOADS.iter().find(|d| d.name == kind) else {
            continue;
        };
        if let Some(p) = w.get_mut("params").and_then(Value::as_table_mut) {
            f(def, p);
        }
    }
}

/// What a profile asks of the machine: its NUMA node count and SMT width,
/// and whether it has a `[cache]` section.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    numa_nodes: Option<u64>,
    threads_per_core: u64,
    cache: bool,
}

/// [`profile_shape`] of every built-in profile, in their order.
fn builtin_shapes() -> &'static [Shape] {
    static SHAPES: std::sync::OnceLock<Vec<Shape>> = std::sync::OnceLock::new();
    SHAPES.get_or_init(|| {
        BUILTIN_PROFILES
            .iter()
            .map(|(name, text)| profile_shape(name, text))
            .collect()
    })
}

fn profile_shape(name: &str, text: &str) -> Shape {
    match crate::experiment::parse_profile(text, name) {
        Ok(p) => Shape {
            numa_nodes: p.numa.as_ref().map(|n| n.distance.len() as u64),
            threads_per_core: p
                .numa
                .as_ref()
                .map_or(1, |n| n.threads_per_core.max(1) as u64),
            cache: p.cache.is_some(),
        },
        Err(_) => Shape::default(),
    }
}

fn machine(rng: &mut Rng, shape: Shape) -> Table {
    let mut m = Table::new();
    m.insert("name".into(), Value::String("m".into()));
    let nodes = match shape.numa_nodes {
        _ if rng.pct(2) => rng.below(6),
        Some(n) => n,
        None => 1 + rng.below(4),
    };
    m.insert("nodes".into(), Value::Integer(nodes as i64));
    let tpc = shape.threads_per_core.max(1);
    let cpus = if rng.pct(98) {
        tpc * (1 + rng.below((8 / tpc).max(1)))
    } else {
        *rng.pick(&[0, 3, 300, 1025])
    };
    m.insert("cpus_per_node".into(), Value::Integer(cpus as i64));
    let mem = if rng.pct(97) {
        rng.pick(SIZES)
    } else {
        rng.pick(ODD_SIZES)
    };
    m.insert("memory_per_node".into(), Value::String(mem.to_string()));
    if rng.pct(30) {
        let d = if rng.pct(90) {
            rng.pick(SIZES)
        } else {
            rng.pick(ODD_SIZES)
        };
        m.insert("dma32".into(), Value::String(d.to_string()));
    }
    if rng.pct(if shape.cache { 25 } else { 2 }) {
        m.insert("cache_model".into(), Value::Boolean(true));
        let llc = *rng.pick(&["2MiB", "8MiB", "32MiB", "8MiB", "3MiB"]);
        m.insert("llc_per_node".into(), Value::String(llc.into()));
    }
    m
}

/// The words a knob's `accepts` text lists (`always, madvise or never`).
fn accepted_words(accepts: &str) -> Vec<String> {
    accepts
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
        .filter(|w| !w.is_empty() && !["or", "an", "integer", "from", "to", "and"].contains(w))
        .filter(|w| w.parse::<i64>().is_err())
        .map(str::to_string)
        .collect()
}

fn knob_value(rng: &mut Rng, accepts: &str) -> Value {
    let words = accepted_words(accepts);
    let numeric = accepts.contains("integer");
    if !numeric && !words.is_empty() && rng.pct(95) {
        return Value::String(rng.pick(&words).clone());
    }
    if rng.pct(3) {
        return Value::String("bogus".into());
    }
    // Numbers the text names are its limits: try them and their neighbours.
    let named: Vec<i64> = accepts
        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter_map(|w| w.parse().ok())
        .collect();
    if !named.is_empty() && rng.pct(60) {
        let v = *rng.pick(&named);
        return Value::Integer(v.saturating_add(rng.below(3) as i64 - 1));
    }
    Value::Integer(*rng.pick(INTS))
}

fn kernel(rng: &mut Rng, i: u64) -> Table {
    let mut k = Table::new();
    k.insert("name".into(), Value::String(format!("k{i}")));
    let preset = if rng.pct(97) {
        rng.pick(Preset::ALL).name().to_string()
    } else {
        "linux-9.9".into()
    };
    k.insert("preset".into(), Value::String(preset));
    let knobs: Vec<_> = all_knobs().collect();
    let mut kt = Table::new();
    for _ in 0..rng.below(4) {
        let knob = rng.pick(&knobs);
        let v = knob_value(rng, knob.accepts);
        // A per-size mTHP knob needs the mthp policy (linux-6.8+).
        if knob.name.starts_with("transparent_hugepage/hugepages-") && rng.pct(80) {
            kt.insert(
                "mmlab.anon_folio_policy".into(),
                Value::String("mthp".into()),
            );
        }
        kt.insert(knob.name.to_string(), v);
    }
    if rng.pct(3) {
        kt.insert("vm.no_such_knob".into(), Value::Integer(1));
    }
    k.insert("knobs".into(), Value::Table(kt));
    k
}

fn count(c: Count) -> Option<i64> {
    match c {
        Count::N(n) => Some(n),
        Count::Of(..) => None,
    }
}

/// A value for an integer parameter: mostly at or below its default (runs
/// stay short), sometimes its limits, rarely outside them.
fn int_param(rng: &mut Rng, default: Count, min: i64, max: Count) -> i64 {
    let d = count(default).unwrap_or(1).max(min);
    match rng.below(50) {
        0 => min.saturating_sub(1),
        1 => count(max).map_or(i64::MAX, |m| m.saturating_add(1)),
        2..=4 => min,
        5 => count(max)
            .filter(|m| *m <= d.saturating_mul(2))
            .unwrap_or(d),
        // A machine-dependent maximum: the default is the safe choice.
        _ if count(max).is_none() && rng.pct(50) => d,
        _ => {
            let hi = (d / (1 + rng.below(8) as i64)).max(min);
            min + rng.below((hi - min).max(0) as u64 + 1) as i64
        }
    }
}

fn size_param(rng: &mut Rng, default: u64, min: u64) -> Value {
    let v = match rng.below(40) {
        0 => return Value::String(rng.pick(ODD_SIZES).to_string()),
        1 => min,
        // An eighth of the default or less: a machine's worth of tasks
        // (up to 32) each touching 128 MiB a few times is a few million
        // engine events, more than the budget.
        _ => (default >> (3 + rng.below(4))).max(min),
    };
    if rng.pct(50) {
        Value::Integer(v.min(i64::MAX as u64) as i64)
    } else {
        Value::String(format!("{}KiB", v / 1024))
    }
}

fn workload(rng: &mut Rng, i: u64) -> Table {
    let mut w = Table::new();
    w.insert("name".into(), Value::String(format!("w{i}")));
    let def = rng.pick(workloads::WORKLOADS);
    let kind = if rng.pct(98) {
        def.name
    } else {
        "no-such-workload"
    };
    w.insert("type".into(), Value::String(kind.into()));
    let mut p = Table::new();
    for spec in def.params {
        // A size of more than 16 MiB by default is always drawn (smaller):
        // page-fault1's 128 MiB per task on 24 CPUs is 3 M faults, a run
        // longer than the event budget, not a loop.
        let big = matches!(spec.kind, ParamKind::Size { default, .. } if default > 16 << 20);
        if !big && rng.pct(60) {
            continue;
        }
        let v = match spec.kind {
            ParamKind::Int { default, min, max } => {
                Value::Integer(int_param(rng, default, min, max))
            }
            ParamKind::Flag { default } => Value::Integer(if rng.pct(5) {
                2
            } else {
                i64::from(default ^ rng.pct(50))
            }),
            ParamKind::Size { default, min, .. } => size_param(rng, default, min),
            ParamKind::OptSize { min, max } => size_param(rng, (min + max / 1024).max(min), min),
            ParamKind::Choice { default, choices } => {
                let c = if rng.pct(90) {
                    *rng.pick(choices)
                } else {
                    default
                };
                Value::String(if rng.pct(3) {
                    "bogus".into()
                } else {
                    c.to_string()
                })
            }
        };
        p.insert(spec.name.to_string(), v);
    }
    if rng.pct(3) {
        p.insert("no_such_param".into(), Value::Integer(1));
    }
    w.insert("params".into(), Value::Table(p));
    w
}

fn report(rng: &mut Rng, nr_kernels: u64) -> Table {
    let mut r = Table::new();
    let names = crate::metrics::metric_names();
    let metrics: Vec<Value> = (0..1 + rng.below(5))
        .map(|_| Value::String(rng.pick(&names).to_string()))
        .collect();
    r.insert("metrics".into(), Value::Array(metrics));
    if rng.pct(50) {
        let b = format!("k{}", rng.below(nr_kernels + 1));
        r.insert("baseline".into(), Value::String(b));
    }
    if rng.pct(50) {
        let mode = *rng.pick(&["relative", "absolute", "bogus"]);
        r.insert("mode".into(), Value::String(mode.into()));
    }
    r
}

/// A built-in experiment, shrunk to a small machine and short workloads,
/// with a few random changes.
pub fn mutate_builtin(rng: &mut Rng) -> Value {
    let (_, text) = rng.pick(crate::api::BUILTIN_EXPERIMENTS);
    let Ok(mut v) = text.parse::<Value>() else {
        return generate(rng);
    };
    shrink(rng, &mut v);
    for _ in 0..1 + rng.below(3) {
        mutate_leaf(rng, &mut v);
    }
    bound_work(&mut v);
    if let Some(t) = v.as_table_mut() {
        bound_big_machine_work(t);
        bound_big_sizes(t);
    }
    v
}

/// Brings every accepted integer workload parameter above its default back
/// to the default, as `generate()` draws them: a mutation may set a valid
/// but large count (page-fault1 `iterations = 500000`, input 5069976, is
/// about 4.6 G faults), a run that ends but takes the better part of an
/// hour. A parameter whose default is per-CPU ("the number of CPUs" and
/// its kin) is brought to at most [`BIG_MACHINE_TASKS`], twice the most
/// CPUs `shrink()` gives a machine: anon-cow-seq mutated to
/// `children = 3001` on 4 CPUs (input 244834 of `--seed 5000000`) is 12 M
/// copy-on-write faults, 5.6 s of CPU, past the event budget. Values
/// outside the parameter's range stay, so validation's errors are still
/// exercised.
fn bound_work(v: &mut Value) {
    each_workload_params(v.get_mut("workload"), |def, p| {
        for spec in def.params {
            let ParamKind::Int { default, min, max } = spec.kind else {
                continue;
            };
            let d = count(default).unwrap_or(BIG_MACHINE_TASKS);
            let Some(Value::Integer(n)) = p.get_mut(spec.name) else {
                continue;
            };
            let in_range = *n >= min && count(max).is_none_or(|m| *n <= m);
            if in_range && *n > d {
                *n = d;
            }
        }
    });
}

/// A small machine, and integer workload parameters cut by up to 8 times.
fn shrink(rng: &mut Rng, v: &mut Value) {
    if let Some(m) = v.get_mut("machine").and_then(Value::as_table_mut) {
        m.insert("nodes".into(), Value::Integer(1 + rng.below(2) as i64));
        m.insert(
            "cpus_per_node".into(),
            Value::Integer(1 + rng.below(4) as i64),
        );
        m.insert(
            "memory_per_node".into(),
            Value::String(rng.pick(&SIZES[..4]).to_string()),
        );
        m.remove("dma32");
    }
    if let Some(ws) = v.get_mut("workload").and_then(Value::as_array_mut) {
        for w in ws {
            if let Some(p) = w.get_mut("params").and_then(Value::as_table_mut) {
                for (_, x) in p.iter_mut() {
                    match x {
                        Value::Integer(n) => *n = (*n / (1 + rng.below(8) as i64)).max(1),
                        // Sizes too: a quarter to a sixteenth, in whole pages.
                        Value::String(t) => {
                            if let Ok(b) = crate::experiment::parse_size(t) {
                                let kib = (b >> (2 + rng.below(3))) / 4096 * 4;
                                *t = format!("{}KiB", kib.max(4));
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// Replaces, removes or retypes one random leaf of `v`.
fn mutate_leaf(rng: &mut Rng, v: &mut Value) {
    match v {
        Value::Table(t) if !t.is_empty() => {
            let keys: Vec<String> = t.keys().cloned().collect();
            let k = rng.pick(&keys).clone();
            if rng.pct(10) {
                t.remove(&k);
            } else if let Some(child) = t.get_mut(&k) {
                mutate_leaf(rng, child);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = rng.below(a.len() as u64) as usize;
            if rng.pct(10) {
                let dup = a[i].clone();
                a.push(dup);
            } else {
                mutate_leaf(rng, &mut a[i]);
            }
        }
        _ if rng.pct(75) => {
            // Type-preserving: a neighbour, a scaled value, another size.
            *v = match v.clone() {
                Value::Integer(n) => Value::Integer(match rng.below(4) {
                    0 => n.saturating_add(1),
                    1 => n.saturating_sub(1).max(0),
                    2 => n / 2,
                    _ => n.saturating_mul(2),
                }),
                Value::String(s) if SIZES.contains(&s.as_str()) => {
                    Value::String(rng.pick(SIZES).to_string())
                }
                Value::Boolean(b) => Value::Boolean(!b),
                other => other,
            };
        }
        _ => {
            let old = v.clone();
            *v = match rng.below(6) {
                0 => Value::Integer(*rng.pick(INTS)),
                1 => Value::String(rng.pick(ODD_SIZES).to_string()),
                2 => Value::Boolean(rng.pct(50)),
                3 => Value::Array(Vec::new()),
                4 => match old {
                    Value::Integer(n) => Value::Integer(n.saturating_mul(2)),
                    other => other,
                },
                _ => Value::String(String::new()),
            };
        }
    }
}

/// Flips, inserts or removes a few bytes.
pub fn damage_bytes(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        if bytes.is_empty() {
            bytes.push(b'[');
            continue;
        }
        let at = rng.below(bytes.len() as u64) as usize;
        match rng.below(4) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes.insert(at, *rng.pick(b"[]{}=\"\n#,.0123456789-\\\xff")),
            2 => {
                bytes.remove(at);
            }
            _ => bytes.truncate(at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer workload parameters of an input, by workload type.
    fn int_params(input: &[u8]) -> Vec<(String, String, i64)> {
        let v: Value = std::str::from_utf8(input).unwrap().parse().unwrap();
        let mut out = Vec::new();
        for w in v
            .get("workload")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let kind = w
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            for (k, x) in w
                .get("params")
                .and_then(Value::as_table)
                .into_iter()
                .flatten()
            {
                if let Value::Integer(n) = x {
                    out.push((kind.clone(), k.clone(), *n));
                }
            }
        }
        out
    }

    #[test]
    fn input_5069976_no_longer_asks_for_half_a_million_iterations() {
        let (input, _) = Experiments.make(5_069_976);
        let params = int_params(&input);
        let it = params
            .iter()
            .find(|(kind, k, _)| kind == "page-fault1" && k == "iterations")
            .expect("the input is still a page-fault1 mutation");
        assert_eq!(it.2, 4, "page-fault1's default iterations: {params:?}");
    }

    #[test]
    fn input_5081531_no_longer_runs_900_processes() {
        // The machine and workload of input 81531 of `--seed 5000000` (at
        // 15b4a44; a workload added to the registry since changes what a
        // seed draws): malloc-dontneed's `tasks` left at the number of CPUs.
        let mut t: Table = "[machine]\nname = \"m\"\nnodes = 3\ncpus_per_node = 300\n\
             memory_per_node = \"256MiB\"\n[[workload]]\nname = \"w0\"\n\
             type = \"malloc-dontneed\"\nparams = { large = \"4KiB\" }\n"
            .parse()
            .unwrap();
        bound_big_machine_work(&mut t);
        let text = toml::to_string(&t).unwrap();
        let params = int_params(text.as_bytes());
        assert_eq!(
            params,
            vec![("malloc-dontneed".into(), "tasks".into(), BIG_MACHINE_TASKS)]
        );
    }

    #[test]
    fn input_5244834_no_longer_forks_3001_children() {
        // Input 244834 of `--seed 5000000` at ee91eb1: the built-in
        // anon-cow-seq mutated to `children = 3001` on a 4-CPU machine.
        let (bytes, _) = Experiments.make(5_244_834);
        let params = int_params(&bytes);
        let children = params
            .iter()
            .find(|(kind, k, _)| kind == "anon-cow-seq" && k == "children")
            .map(|x| x.2);
        assert_eq!(children, Some(BIG_MACHINE_TASKS), "{params:?}");
    }

    #[test]
    fn input_5834335_no_longer_writes_1_tib() {
        // The machine and workloads of input 834335 of `--seed 5000000`
        // (at 4a7d0fc): anon-w-seq of 1 TiB on a 16 TiB node; a size larger
        // than the machine is kept.
        let mut t: Table = "[machine]\nname = \"m\"\nnodes = 1\ncpus_per_node = 4\n\
             memory_per_node = \"16TiB\"\n[[workload]]\nname = \"w0\"\n\
             type = \"anon-w-seq\"\nparams = { size = \"2048KiB\" }\n[[workload]]\n\
             name = \"w1\"\ntype = \"anon-w-seq\"\nparams = { size = \"1TiB\" }\n\
             [[workload]]\nname = \"w2\"\ntype = \"anon-w-seq\"\n\
             params = { size = \"32TiB\" }\n"
            .parse()
            .unwrap();
        bound_big_sizes(&mut t);
        let sizes: Vec<&str> = t["workload"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["params"]["size"].as_str().unwrap())
            .collect();
        assert_eq!(sizes, ["2048KiB", BIG_SIZE, "32TiB"]);
    }

    #[test]
    fn input_5112339_no_longer_runs_1000_processes() {
        // Input 112339 of `--seed 5000000` at 3b2eac7: the built-in vmacache
        // experiment mutated to `cpus_per_node = 1000`; its malloc-dontneed
        // left `tasks` at the number of CPUs.
        let (bytes, _) = Experiments.make(5_112_339);
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.contains("cpus_per_node = 1000"), "{text}");
        let params = int_params(&bytes);
        let tasks = params
            .iter()
            .find(|(kind, k, _)| kind == "malloc-dontneed" && k == "tasks")
            .map(|x| x.2);
        assert_eq!(tasks, Some(BIG_MACHINE_TASKS), "{params:?}");
    }

    #[test]
    fn big_machines_get_bounded_per_cpu_defaults() {
        let mut big = 0;
        for seed in 0..1500 {
            let v = generate(&mut Rng::new(seed));
            let text = toml::to_string(&v).unwrap();
            let m = &v["machine"];
            let cpus = m.get("nodes").and_then(Value::as_integer).unwrap_or(0)
                * m.get("cpus_per_node")
                    .and_then(Value::as_integer)
                    .unwrap_or(0);
            if cpus <= BIG_MACHINE_CPUS {
                continue;
            }
            for w in v["workload"].as_array().unwrap() {
                let def = workloads::WORKLOADS
                    .iter()
                    .find(|d| Some(d.name) == w["type"].as_str());
                for spec in def.map_or(&[][..], |d| d.params) {
                    if let ParamKind::Int {
                        default: Count::Of(_, what),
                        ..
                    } = spec.kind
                    {
                        if what.contains("number of CPUs") {
                            let n = int_params(text.as_bytes())
                                .into_iter()
                                .find(|(_, k, _)| k == spec.name)
                                .map(|x| x.2);
                            assert!(
                                n.is_some(),
                                "seed {seed}: {} unset on {cpus} CPUs",
                                spec.name
                            );
                            big += 1;
                        }
                    }
                }
            }
        }
        assert!(big > 5, "only {big} per-CPU parameters on big machines");
    }

    #[test]
    fn mutated_builtins_keep_accepted_counts_at_or_below_their_defaults() {
        let mut checked = 0;
        for seed in 0..3000 {
            let mut rng = Rng::new(seed);
            let v = mutate_builtin(&mut rng);
            let text = toml::to_string(&v).unwrap();
            for (kind, k, n) in int_params(text.as_bytes()) {
                let Some(def) = workloads::WORKLOADS.iter().find(|d| d.name == kind) else {
                    continue;
                };
                let Some(spec) = def.params.iter().find(|p| p.name == k) else {
                    continue;
                };
                if let ParamKind::Int { default, min, max } = spec.kind {
                    let in_range = n >= min && count(max).is_none_or(|m| n <= m);
                    let d = count(default).unwrap_or(BIG_MACHINE_TASKS);
                    if in_range {
                        assert!(n <= d, "seed {seed}: {kind}.{k} = {n} > default {d}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 1000, "only {checked} parameters checked");
    }
}
