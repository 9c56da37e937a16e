//! Replay mode (b) in `mmlab replay` and `mmlab validate`: the address-space
//! stream through the fault path (`trace::aspace`), its table, its part of
//! the results document, its validation against the recorded counters, and
//! the warnings about what the recorded configuration hides.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use mm::knobs::KernelConfig;
use mm::memory::{AnonFolioPolicy, MthpEnabled, ThpEnabled};
use mm::vma::MmapLayout;
use mm::vmstat::{VmEvent, VmStat};
use serde_json::{json, Value};
use trace::aspace::{replay_aspace, AspaceModel, AspaceReplay};
use trace::event::{Counters, Header};
use trace::replay::ReplayError;

use crate::experiment::Experiment;
use crate::replay::err_pct;
use crate::report::{self, Format};

/// The anonymous folio sizes with per-size statistics, KiB.
const SIZES_KB: [u64; 8] = [16, 32, 64, 128, 256, 512, 1024, 2048];

/// Runs mode (b) for every kernel of `exp`. `Ok(None)` when the trace has
/// no address-space events and the mode was not asked for by name.
pub fn run(trace: &Path, exp: &Experiment, required: bool) -> Result<Option<AspaceReplay>> {
    let kernels: Vec<KernelConfig> = exp.kernels.iter().map(|k| k.config).collect();
    match replay_aspace(
        trace,
        &exp.machine.memory_layout(),
        &exp.profile.table(),
        &kernels,
    ) {
        Ok(r) => Ok(Some(r)),
        Err(ReplayError::NoAspaceEvents { .. }) if !required => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn anon_fault_alloc(v: &VmStat, kb: u64) -> u64 {
    v.mthp_stat(kb, "anon_fault_alloc")
}

fn hit_pct(v: &VmStat) -> Option<f64> {
    let calls = v.get(VmEvent::VMACACHE_FIND_CALLS);
    (calls > 0).then(|| 100.0 * v.get(VmEvent::VMACACHE_FIND_HITS) as f64 / calls as f64)
}

/// Sizes with a non-zero `anon_fault_alloc` under some kernel.
fn sizes_used(a: &AspaceReplay) -> Vec<u64> {
    SIZES_KB
        .iter()
        .copied()
        .filter(|&kb| a.models.iter().any(|m| anon_fault_alloc(&m.vmstat, kb) > 0))
        .collect()
}

/// The mode (b) table: one row per kernel.
pub fn table(exp: &Experiment, a: &AspaceReplay, format: Format) -> String {
    let sizes = sizes_used(a);
    let mut header: Vec<String> = [
        "kernel",
        "pgfault",
        "faults_absorbed",
        "faults_passthrough",
        "thp_fault_alloc",
        "thp_fault_fallback",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for kb in &sizes {
        header.push(format!("anon_fault_alloc_{kb}kB"));
    }
    header.push("vmacache_hit_pct".to_string());
    header.push("fault_ms".to_string());
    let body: Vec<Vec<String>> = exp
        .kernels
        .iter()
        .zip(&a.models)
        .map(|(k, m)| {
            let mut row = vec![
                k.name.clone(),
                m.predicted_pgfault().to_string(),
                m.faults_absorbed.to_string(),
                m.faults_passthrough.to_string(),
                m.vmstat.get(VmEvent::THP_FAULT_ALLOC).to_string(),
                m.vmstat.get(VmEvent::THP_FAULT_FALLBACK).to_string(),
            ];
            for kb in &sizes {
                row.push(anon_fault_alloc(&m.vmstat, *kb).to_string());
            }
            row.push(hit_pct(&m.vmstat).map_or("-".to_string(), |p| format!("{p:.1}")));
            row.push(format!("{:.1}", m.fault_ns as f64 / 1e6));
            row
        })
        .collect();
    let r = &a.recorded;
    let mut out = String::new();
    report::render(
        &mut out,
        format,
        &format!(
            "replay (b), the address-space stream: {} recorded page faults ({} writes, {} by the kernel on user memory), {} forks, {} execs; \
             pgfault = faults the model takes + faults outside modelled anonymous memory (passthrough, the same \
             for every kernel); fault_ms is the model's virtual time in the faults it takes",
            r.faults + r.kernel_faults, r.write_faults, r.kernel_faults, r.forks, r.execs
        ),
        &header,
        &body,
    );
    if format != Format::Csv {
        if let Some(m) = a.models.first() {
            let notes: Vec<String> = m.notes.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            if !notes.is_empty() {
                let _ = writeln!(
                    out,
                    "replayed approximately or skipped: {}\n",
                    notes.join("; ")
                );
            }
        }
        for k in [kernel_fault_text(exp, a), unmapped_text(exp, a)] {
            if !k.is_empty() {
                let _ = writeln!(out, "{k}");
            }
        }
    }
    out
}

/// The tracepoint whose absence [`trace::kfault`] stands in for.
const KERNEL_FAULT_EVENT: &str = "exceptions:page_fault_kernel";

/// True when the trace says it was recorded without
/// `exceptions:page_fault_kernel`.
pub fn lacks_kernel_faults(a: &AspaceReplay) -> bool {
    a.trailer.as_ref().is_some_and(|t| {
        t.missing_event_kinds
            .iter()
            .any(|k| k == KERNEL_FAULT_EVENT)
    })
}

/// True when the trace says it was recorded without `kmem:mm_page_alloc`,
/// the estimate's evidence.
fn lacks_allocs(a: &AspaceReplay) -> bool {
    a.trailer.as_ref().is_some_and(|t| {
        t.missing_event_kinds
            .iter()
            .any(|k| k == "kmem:mm_page_alloc")
    })
}

/// What each kernel of `exp` makes of the kernel faults the trace lacks,
/// added to its `pgfault`, as (central, low, high). Central: the estimate
/// shrunk as much as the replayed anonymous faults shrink under that
/// kernel against the kernel that takes the most of them (as if the
/// kernel's faults were in memory like the user's, which a `read()` into a
/// fresh buffer is, but they need not be: a buffer in a mapping smaller
/// than a large folio keeps its faults). Low: the estimate's bottom with
/// every fault absorbed as far as the kernel's largest anonymous folio
/// allows ([`fewest_faults`]), the bound, since their addresses are
/// unknown. High: the estimate's top, unchanged by the kernel's folio
/// sizes (as if every one were still taken).
fn with_kernel_faults(exp: &Experiment, a: &AspaceReplay) -> Vec<(u64, u64, u64)> {
    let r = &a.recorded;
    let e = r.kernel_fault_estimate.kernel_faults;
    let (lo, hi) = r.kernel_fault_estimate.band(r.faults + r.kernel_faults);
    let most = a.models.iter().map(|m| m.faults_taken).max().unwrap_or(0);
    exp.kernels
        .iter()
        .zip(&a.models)
        .map(|(k, m)| {
            let p = m.predicted_pgfault();
            let shrunk = |n: u64| {
                if most == 0 {
                    n
                } else {
                    (n as u128 * m.faults_taken as u128 / most as u128) as u64
                }
            };
            let c = p + shrunk(e);
            let low = p + fewest_faults(lo, largest_folio_pages(&k.config));
            (c, low.min(c), (p + hi).max(c))
        })
        .collect()
}

/// The fewest faults `n` first touches of distinct pages can take under a
/// kernel whose largest anonymous folio is `folio_pages` pages: one folio
/// answers at most that many of them.
fn fewest_faults(n: u64, folio_pages: u64) -> u64 {
    n.div_ceil(folio_pages.max(1))
}

/// Pages of the largest folio kernel `c` may give an anonymous fault (1
/// when it gives only order-0 pages).
fn largest_folio_pages(c: &KernelConfig) -> u64 {
    possible_orders(c).last().map_or(1, |&o| 1u64 << o)
}

/// The `mremap()` tracepoint whose absence hides moved and grown mappings.
const MREMAP_EVENT: &str = "syscalls:sys_enter_mremap";

/// True when the trace says it was recorded without `sys_enter_mremap`.
fn lacks_mremap(a: &AspaceReplay) -> bool {
    a.trailer
        .as_ref()
        .is_some_and(|t| t.missing_event_kinds.iter().any(|k| k == MREMAP_EVENT))
}

/// The kernel's share of all faults in the 4 KiB `mmlab record` traces of
/// the corpus programs (`scripts/corpus/`, which hold
/// `page_fault_kernel`), lowest and highest, in percent (the highest is
/// `sort`'s, 5 451 of 30 809; docs/ARCHITECTURE.md, "Kernel faults a
/// recording lacks"). The band of a recording that can neither show nor
/// estimate them: a range of what real programs did, not a bound (a
/// program that reads more into fresh buffers has more).
const CORPUS_KERNEL_FAULT_SHARE_PCT: (f64, f64) = (0.1, 17.7);

/// The kernel faults beside `user` recorded user faults if they were
/// `pct` percent of all faults.
fn kernel_faults_at_share(user: u64, pct: f64) -> u64 {
    (user as f64 * pct / (100.0 - pct)).round() as u64
}

/// Each kernel's `pgfault` with everything the recording cannot show, as
/// (central, low, high), or `None` when the recording shows it all: the
/// kernel faults it lacks ([`with_kernel_faults`]; without the allocator
/// events they are not estimated: central and low none, high the corpus
/// programs' most, [`CORPUS_KERNEL_FAULT_SHARE_PCT`], unchanged by the
/// kernel's folio sizes), and, without
/// `mremap()`, the recorded faults in the mappings the replay inferred
/// for them (`trace::aspace`, `moved_from_fault`: central as replayed,
/// high as if each were still taken) and those outside every mapping even
/// so (central and high: carried over unchanged); low: each of either
/// absorbed as far as the kernel's largest anonymous folio allows.
pub fn pgfault_bands(exp: &Experiment, a: &AspaceReplay) -> Option<Vec<(u64, u64, u64)>> {
    let kf = lacks_kernel_faults(a) && !lacks_allocs(a);
    let kf_unknown = lacks_kernel_faults(a) && lacks_allocs(a);
    let unmapped = |m: &AspaceModel| {
        if lacks_mremap(a) {
            m.faults_passthrough - m.faults_passthrough_file
        } else {
            0
        }
    };
    if !kf
        && !kf_unknown
        && a.models
            .iter()
            .all(|m| unmapped(m) + m.faults_inferred == 0)
    {
        return None;
    }
    let user = a.recorded.faults;
    let share_hi = CORPUS_KERNEL_FAULT_SHARE_PCT.1;
    let kernel = if kf {
        with_kernel_faults(exp, a)
    } else {
        a.models
            .iter()
            .map(|m| {
                let p = m.predicted_pgfault();
                if !kf_unknown {
                    return (p, p, p);
                }
                (p, p, p + kernel_faults_at_share(user, share_hi))
            })
            .collect()
    };
    let bands = exp
        .kernels
        .iter()
        .zip(&a.models)
        .zip(kernel)
        .map(|((k, m), (c, lo, hi))| {
            let f = largest_folio_pages(&k.config);
            let n = unmapped(m);
            let (inf, taken) = (m.faults_inferred, m.faults_inferred_taken);
            let gain = n - fewest_faults(n, f) + taken.saturating_sub(fewest_faults(inf, f));
            (c, lo - gain.min(lo), hi + (inf - taken))
        })
        .collect();
    Some(bands)
}

/// The lines that say what the faults outside every recorded mapping of a
/// trace without `mremap()` leave open (empty otherwise).
fn unmapped_text(exp: &Experiment, a: &AspaceReplay) -> String {
    let (n, inferred) = a.models.first().map_or((0, 0), |m| {
        (
            m.faults_passthrough - m.faults_passthrough_file,
            m.faults_inferred,
        )
    });
    if !lacks_mremap(a) || n + inferred == 0 {
        return String::new();
    }
    let Some(bands) = pgfault_bands(exp, a) else {
        return String::new();
    };
    let listed = lacks_kernel_faults(a) && lacks_allocs(a);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "INFERRED: {MREMAP_EVENT} was not recorded, so mappings that mremap() moved or grew (glibc's realloc() of \
         a large block) are not in the trace. Where a recorded fault fell outside every mapping, the replay took \
         the mapping to run from its page up to the next mapping above (where the kernel places a moved one); \
         {inferred} recorded faults (under the first kernel) are in such inferred mappings, and {n} are outside \
         every mapping even so (carried over unchanged). A mapping grown in place may end lower than inferred, \
         which decides which folios fit. {}",
        if listed {
            "The bands above include them [low: each absorbed as far as the kernel's largest anonymous folio \
             allows .. high: each still taken]."
        } else {
            "pgfault per kernel with its band [low: each absorbed as far as the kernel's largest anonymous folio \
             allows .. high: each still taken]:"
        }
    );
    if listed {
        return s;
    }
    for (k, (c, l, h)) in exp.kernels.iter().zip(bands) {
        let _ = writeln!(s, "  {}: {c} [{l}..{h}]", k.name);
    }
    s
}

/// The lines that say what the missing `page_fault_kernel` costs and how
/// it is estimated, with each kernel's `pgfault` including the estimate
/// (empty when the trace has the tracepoint).
pub fn kernel_fault_text(exp: &Experiment, a: &AspaceReplay) -> String {
    if !lacks_kernel_faults(a) {
        return String::new();
    }
    let r = &a.recorded;
    let e = &r.kernel_fault_estimate;
    let (lo, hi) = e.band(r.faults + r.kernel_faults);
    let (elo, ehi) = trace::kfault::ERROR_PCT;
    let mut s = String::new();
    if lacks_allocs(a) {
        let _ = writeln!(
            s,
            "NOT ESTIMATED: {KERNEL_FAULT_EVENT} was not recorded, so the kernel's own faults on user memory \
             (read() into fresh buffers, the ELF loader's .bss) are in neither the trace nor the pgfault above, \
             and without kmem:mm_page_alloc they cannot be estimated: every pgfault above is short by them \
             ({lo:.1} % to {hi:.1} % of the faults of the programs in scripts/corpus/, 4 KiB recordings). pgfault per \
             kernel [band: none of them .. the corpus programs' most ({hi:.1} % of all faults), unchanged by the kernel's \
             folio sizes; what real programs did, not a bound]:",
            lo = CORPUS_KERNEL_FAULT_SHARE_PCT.0,
            hi = CORPUS_KERNEL_FAULT_SHARE_PCT.1,
        );
        if let Some(bands) = pgfault_bands(exp, a) {
            for (k, (c, l, h)) in exp.kernels.iter().zip(bands) {
                let _ = writeln!(s, "  {}: {c} [{l}..{h}]", k.name);
            }
        }
        return s;
    }
    let _ = writeln!(
        s,
        "ESTIMATE: {KERNEL_FAULT_EVENT} was not recorded, so the kernel's own faults on user memory (read() into \
         fresh buffers, the ELF loader's .bss) are in neither the trace nor the pgfault above. From the allocator \
         events: {} zeroed movable pages allocated in the processes' context, {} of them explained by recorded user \
         faults, leaving about {} kernel faults (band {}..{}: the estimate's error on recordings that hold both, \
         {elo:+.0} % to {ehi:+.0} % of all faults). Their addresses are unknown, so they are not replayed. pgfault \
         with them, per kernel: ESTIMATE (the estimate shrunk as the replayed anonymous faults shrink under that \
         kernel) [band: the estimate's bottom with every fault absorbed as far as the kernel's largest anonymous \
         folio allows .. its top, unchanged]:",
        e.zeroed_allocs, e.explained, e.kernel_faults, lo, hi
    );
    for (k, (c, l, h)) in exp.kernels.iter().zip(with_kernel_faults(exp, a)) {
        let _ = writeln!(s, "  {}: {c} [{l}..{h}]", k.name);
    }
    s
}

/// The estimate's part of the results document.
fn kernel_fault_json(exp: &Experiment, a: &AspaceReplay) -> Value {
    let r = &a.recorded;
    let e = &r.kernel_fault_estimate;
    let (lo, hi) = e.band(r.faults + r.kernel_faults);
    let per_kernel: serde_json::Map<String, Value> = exp
        .kernels
        .iter()
        .zip(with_kernel_faults(exp, a))
        .map(|(k, (c, l, h))| (k.name.clone(), json!({ "estimate": c, "band": [l, h] })))
        .collect();
    json!({
        "estimate": true,
        "page_fault_kernel_recorded": !lacks_kernel_faults(a),
        "estimable": !lacks_allocs(a),
        "zeroed_movable_allocs": e.zeroed_allocs,
        "explained_by_user_faults": e.explained,
        "kernel_faults": e.kernel_faults,
        "band": [lo, hi],
        "error_pct_of_faults": [trace::kfault::ERROR_PCT.0, trace::kfault::ERROR_PCT.1],
        "pgfault_with_estimate": if lacks_kernel_faults(a) && !lacks_allocs(a) {
            Value::Object(per_kernel)
        } else {
            Value::Null
        },
    })
}

fn model_json(name: &str, m: &AspaceModel) -> Value {
    let per_size = |stat: &str| {
        let mut o = serde_json::Map::new();
        for kb in SIZES_KB {
            o.insert(format!("{kb}kB"), json!(m.vmstat.mthp_stat(kb, stat)));
        }
        Value::Object(o)
    };
    json!({
        "kernel": name,
        "pgfault": m.predicted_pgfault(),
        "faults_replayed": m.faults_replayed,
        "faults_taken": m.faults_taken,
        "faults_absorbed": m.faults_absorbed,
        "faults_passthrough": m.faults_passthrough,
        "faults_passthrough_file": m.faults_passthrough_file,
        "faults_failed": m.faults_failed,
        "faults_sigsegv": m.faults_sigsegv,
        "faults_exec_args": m.faults_exec_args,
        "faults_inferred": m.faults_inferred,
        "faults_inferred_taken": m.faults_inferred_taken,
        "thp_fault_alloc": m.vmstat.get(VmEvent::THP_FAULT_ALLOC),
        "thp_fault_fallback": m.vmstat.get(VmEvent::THP_FAULT_FALLBACK),
        "anon_fault_alloc": per_size("anon_fault_alloc"),
        "anon_fault_fallback": per_size("anon_fault_fallback"),
        "vmacache_find_calls": m.vmstat.get(VmEvent::VMACACHE_FIND_CALLS),
        "vmacache_find_hits": m.vmstat.get(VmEvent::VMACACHE_FIND_HITS),
        "vmacache_first_slot_hits": m.vmstat.get(VmEvent::VMACACHE_FIRST_SLOT_HITS),
        "vmacache_hit_pct": hit_pct(&m.vmstat),
        "fault_ns": m.fault_ns,
        "peak_processes": m.peak_procs,
        "notes": m.notes,
    })
}

/// The `aspace` part of the results document.
pub fn json(exp: &Experiment, a: &AspaceReplay) -> Value {
    let r = &a.recorded;
    json!({
        "recorded": {
            "events": r.nr_events,
            "page_fault_user": r.faults,
            "page_fault_kernel": r.kernel_faults,
            "write_faults": r.write_faults,
            "syscalls": r.syscalls,
            "forks": r.forks,
            "execs": r.execs,
            "exec_layouts": r.exec_layouts,
            "exits": r.exits,
            "threads": r.threads,
            "processes_without_fork": r.procs_without_fork,
            "span_ns": r.span_ns,
            "page_fault_kernel_estimate": kernel_fault_json(exp, a),
        },
        "kernels": exp.kernels.iter().zip(&a.models).map(|(k, m)| model_json(&k.name, m)).collect::<Vec<_>>(),
        "pgfault_band": pgfault_band_json(exp, a),
    })
}

/// Each kernel's `pgfault` with what the recording cannot show and its
/// band ([`pgfault_bands`]); null when the recording shows it all.
fn pgfault_band_json(exp: &Experiment, a: &AspaceReplay) -> Value {
    let Some(bands) = pgfault_bands(exp, a) else {
        return Value::Null;
    };
    let mut unknown = Vec::new();
    if lacks_kernel_faults(a) {
        unknown.push(if lacks_allocs(a) {
            "page_fault_kernel (not estimated: no kmem:mm_page_alloc; not in the band)"
        } else {
            "page_fault_kernel (estimated)"
        });
    }
    if lacks_mremap(a) {
        unknown.push("mremap (mappings inferred from faults outside every recorded mapping)");
    }
    let per_kernel: serde_json::Map<String, Value> = exp
        .kernels
        .iter()
        .zip(bands)
        .map(|(k, (c, l, h))| (k.name.clone(), json!({ "pgfault": c, "band": [l, h] })))
        .collect();
    json!({ "estimate": true, "unknown": unknown, "kernels": per_kernel })
}

fn delta(before: Option<&Counters>, after: Option<&Counters>, name: &str) -> Option<u64> {
    let b = before?.vmstat.get(name)?;
    let a = after?.vmstat.get(name)?;
    Some(a.saturating_sub(*b))
}

fn thp_delta(
    before: Option<&Counters>,
    after: Option<&Counters>,
    kb: u64,
    name: &str,
) -> Option<u64> {
    let dir = format!("hugepages-{kb}kB");
    let b = before?.thp_stats.get(&dir)?.get(name)?;
    let a = after?.thp_stats.get(&dir)?.get(name)?;
    Some(a.saturating_sub(*b))
}

/// Mode (b)'s rows of `mmlab validate`: (counter, recorded, model), the
/// model under the recorded configuration (the first kernel); recorded
/// `None` where the recording has no such count.
pub fn validate_rows(a: &AspaceReplay) -> Vec<(String, Option<u64>, u64)> {
    let m = &a.models[0];
    let r = &a.recorded;
    let before = a.header.counters_before.as_ref();
    let after = a.trailer.as_ref().and_then(|t| t.counters_after.as_ref());
    let mut rows: Vec<(String, Option<u64>, u64)> = Vec::new();
    let pred = m.predicted_pgfault();
    rows.push((
        "page faults in the trace (page_fault_user + _kernel)".into(),
        Some(r.faults + r.kernel_faults),
        pred - m.faults_exec_args,
    ));
    let ru = a.trailer.as_ref().and_then(|t| {
        t.workload_minflt
            .map(|mn| mn + t.workload_majflt.unwrap_or(0))
    });
    rows.push((
        "page faults of the workload (ru_minflt+ru_majflt)".into(),
        ru,
        pred,
    ));
    if lacks_kernel_faults(a) && !lacks_allocs(a) {
        let est = r.kernel_fault_estimate.kernel_faults;
        rows.push((
            "  the same, model + ESTIMATED kernel faults (see below)".into(),
            ru,
            pred + est,
        ));
    }
    rows.push((
        "pgfault (/proc/vmstat, whole system)".into(),
        delta(before, after, "pgfault"),
        pred,
    ));
    rows.push((
        "thp_fault_alloc (/proc/vmstat, whole system)".into(),
        delta(before, after, "thp_fault_alloc"),
        m.vmstat.get(VmEvent::THP_FAULT_ALLOC),
    ));
    for kb in SIZES_KB {
        let live = thp_delta(before, after, kb, "anon_fault_alloc");
        let model = anon_fault_alloc(&m.vmstat, kb);
        if live.unwrap_or(0) > 0 || model > 0 || kb == 2048 {
            rows.push((
                format!("anon_fault_alloc {kb}kB (hugepages-{kb}kB/stats, whole system)"),
                live,
                model,
            ));
        }
    }
    // khugepaged's collapses are not modelled: shown where the recording
    // saw some, so that a workload whose heap khugepaged collapsed (and
    // whose faults there then vanish) is not taken for a model error.
    if let Some(n) = delta(before, after, "thp_collapse_alloc").filter(|&n| n > 0) {
        rows.push((
            "thp_collapse_alloc (khugepaged, whole system: NOT MODELLED)".into(),
            Some(n),
            0,
        ));
    }
    rows
}

/// The `mmlab validate` table of mode (b): the recorded counters beside the
/// model's prediction under the recorded configuration (the first kernel).
pub fn validate_text(trace: &Path, exp: &Experiment, a: &AspaceReplay) -> String {
    let m = &a.models[0];
    let r = &a.recorded;
    let rows = validate_rows(a);
    let k = &exp.kernels[0];
    let knobs: Vec<String> = k.knobs.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "validate {} (replay b, the address-space stream): kernel {} recorded; model {} ({})",
        trace.display(),
        a.header.kernel_release.as_deref().unwrap_or("unknown"),
        k.config.preset.name(),
        if knobs.is_empty() {
            "default knobs".to_string()
        } else {
            knobs.join(", ")
        },
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<62} {:>10} {:>10} {:>8}",
        "counter", "recorded", "model", "error"
    );
    for (name, live, model) in rows {
        let (l, e) = match live {
            Some(l) => (l.to_string(), err_pct(l, model)),
            None => ("-".to_string(), "n/a".to_string()),
        };
        let _ = writeln!(s, "{name:<62} {l:>10} {model:>10} {e:>8}");
    }
    let _ = writeln!(s);
    let all = r.faults + r.kernel_faults;
    let share = |n: u64| {
        if all == 0 {
            0.0
        } else {
            100.0 * n as f64 / all as f64
        }
    };
    let _ = writeln!(
        s,
        "of the {} recorded faults ({} of them the kernel's on user memory): {} in modelled anonymous memory ({:.1}%: {} taken by the model, {} absorbed, {} refused by the VMA's protection (SIGSEGV, as in the kernel: not in pgfault), {} failed for want of memory); \
         {} carried over unmodelled ({:.1}%: {} in file-backed, shared, hugetlb or vDSO mappings, {} outside every recorded mapping); \
         {} execs of {} with their mappings recorded, whose argument pages are {} more faults (no tracepoint fires for them)",
        r.faults + r.kernel_faults,
        r.kernel_faults,
        m.faults_replayed,
        share(m.faults_replayed),
        m.faults_taken,
        m.faults_absorbed,
        m.faults_sigsegv,
        m.faults_failed - m.faults_sigsegv,
        m.faults_passthrough,
        share(m.faults_passthrough),
        m.faults_passthrough_file,
        m.faults_passthrough - m.faults_passthrough_file,
        r.exec_layouts,
        r.execs,
        m.faults_exec_args,
    );
    let _ = writeln!(
        s,
        "the /proc/vmstat and hugepages-*/stats deltas count every process of the machine during the recording; \
         ru_minflt counts the workload's tasks only (the descendants the command waited for)"
    );
    let notes: Vec<String> = m.notes.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    if !notes.is_empty() {
        let _ = writeln!(s, "replayed approximately or skipped: {}", notes.join("; "));
    }
    s.push_str(&kernel_fault_text(exp, a));
    s.push_str(&unmapped_text(exp, a));
    s
}

/// The folio orders a kernel may give an anonymous fault in a VMA with
/// `MADV_HUGEPAGE` (the widest case), the PMD order included.
fn possible_orders(c: &KernelConfig) -> BTreeSet<u8> {
    let top_on = c.mm.thp_enabled != ThpEnabled::Never;
    let mut o = BTreeSet::new();
    match c.mm.anon_folio {
        AnonFolioPolicy::Mthp => {
            for (order, e) in c.mm.mthp_enabled.iter().enumerate().skip(2) {
                let on = match e {
                    MthpEnabled::Always | MthpEnabled::Madvise => true,
                    MthpEnabled::Inherit => top_on,
                    MthpEnabled::Never => false,
                };
                if on {
                    o.insert(order as u8);
                }
            }
        }
        AnonFolioPolicy::Off => {
            if top_on {
                o.insert(mm::HPAGE_PMD_ORDER);
            }
        }
        AnonFolioPolicy::V1 | AnonFolioPolicy::V2 | AnonFolioPolicy::Simple => {
            if top_on {
                o.insert(mm::HPAGE_PMD_ORDER);
            }
            for order in 2..=c.mm.arch_pte_order {
                o.insert(order);
            }
        }
    }
    o
}

/// `(major, minor)` of a kernel release such as `6.18.44-fc`.
fn release_version(r: &str) -> Option<(u32, u32)> {
    let mut it = r.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// What the recorded configuration hides from a replay under `exp`'s
/// kernels, in words (see docs/ARCHITECTURE.md, "What a recording can
/// predict").
pub fn warnings(h: &Header, exp: &Experiment, a: Option<&AspaceReplay>) -> Vec<String> {
    let mut w = Vec::new();
    let Some(a) = a else {
        return w;
    };
    if let Some(t) = &a.trailer {
        if t.nr_lost_events > 0 {
            w.push(format!(
                "the trace lost {} events: faults and mappings among them are missing from the replay",
                t.nr_lost_events
            ));
        }
        if !t.missing_event_kinds.is_empty() {
            w.push(format!(
                "the trace has no {} events (`mmlab import` said what each costs; a system call \
                 without its exit is replayed at its entry with the model's result, counted below)",
                t.missing_event_kinds.join(", ")
            ));
        }
        if t.interrupted {
            w.push(
                "the recording was interrupted: processes alive at its end are not torn down"
                    .to_string(),
            );
        }
    }
    w.extend(large_folio_warning(h, exp, a));
    w.extend(layout_warning(h, exp));
    if let Some(m) = a.models.first() {
        let r = &a.recorded;
        let all = r.faults + r.kernel_faults;
        if all > 0 && m.faults_passthrough * 2 > all {
            w.push(format!(
                "{} of the {} recorded faults ({:.0}%) are outside modelled anonymous memory and are carried over \
                 unchanged under every kernel",
                m.faults_passthrough,
                all,
                100.0 * m.faults_passthrough as f64 / all as f64
            ));
        }
    }
    w
}

/// The warning for large folios the recording's kernel mapped where some of
/// `exp`'s kernels map other sizes: a folio of 2^k pages answers the first
/// touch of each of its pages with one fault, so the other touches are not
/// in the trace.
fn large_folio_warning(h: &Header, exp: &Experiment, a: &AspaceReplay) -> Option<String> {
    let before = h.counters_before.as_ref();
    let after = a.trailer.as_ref().and_then(|t| t.counters_after.as_ref());
    let mut recorded_large: Vec<String> = Vec::new();
    if before.is_some() && after.is_some() {
        for kb in SIZES_KB {
            let n = if kb == 2048 {
                delta(before, after, "thp_fault_alloc")
                    .unwrap_or(0)
                    .max(thp_delta(before, after, kb, "anon_fault_alloc").unwrap_or(0))
            } else {
                thp_delta(before, after, kb, "anon_fault_alloc").unwrap_or(0)
            };
            if n > 0 {
                recorded_large.push(format!("{kb}kB ({n} faults, whole system)"));
            }
        }
    } else if let Ok(rk) = crate::replay::recorded_kernel(h) {
        for o in possible_orders(&rk.config) {
            recorded_large.push(format!("{}kB (enabled)", 4u64 << o));
        }
    }
    let recorded_orders = crate::replay::recorded_kernel(h)
        .map(|k| possible_orders(&k.config))
        .unwrap_or_default();
    if !recorded_large.is_empty() {
        let others: Vec<&str> = exp
            .kernels
            .iter()
            .filter(|k| possible_orders(&k.config) != recorded_orders)
            .map(|k| k.name.as_str())
            .collect();
        if !others.is_empty() {
            return Some(format!(
                "the recording's kernel mapped large anonymous folios of {}: touches of a folio's other pages did not \
                 fault and are not in the trace, so kernel(s) {} that map smaller folios there under-predict faults; \
                 record with the large sizes off (transparent_hugepage/enabled=never, every hugepages-*/enabled=never) \
                 to predict every folio size",
                recorded_large.join(", "),
                others.join(", ")
            ));
        }
    }
    None
}

/// The warning for kernels of `exp` that place anonymous mappings otherwise
/// than the recording's kernel (the 2 MiB alignment of 6.7+).
fn layout_warning(h: &Header, exp: &Experiment) -> Option<String> {
    let recorded_layout = match h.kernel_release.as_deref().and_then(release_version) {
        Some(v) if v >= (6, 7) => Some(MmapLayout::ThpAligned),
        Some(_) => Some(MmapLayout::PageAligned),
        None => None,
    };
    if let Some(rl) = recorded_layout {
        let differ: Vec<&str> = exp
            .kernels
            .iter()
            .filter(|k| k.config.mm.mmap_layout != rl)
            .map(|k| k.name.as_str())
            .collect();
        if !differ.is_empty() {
            return Some(format!(
                "kernel(s) {} place anonymous mappings {} the recording's kernel; the replay keeps the recorded \
                 addresses, so their THP counts follow the recorded placement",
                differ.join(", "),
                if rl == MmapLayout::ThpAligned {
                    "without the 2 MiB alignment of"
                } else {
                    "with a 2 MiB alignment that did not exist in"
                }
            ));
        }
    }
    None
}
