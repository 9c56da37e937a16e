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
        let k = kernel_fault_text(exp, a);
        if !k.is_empty() {
            let _ = writeln!(out, "{k}");
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

/// What each kernel's `pgfault` becomes with the kernel faults the trace
/// lacks, as (central, low, high). Central: the estimate shrunk as much as
/// the replayed anonymous faults shrink under that kernel against the
/// kernel that takes the most of them (as if the kernel's faults were in
/// memory like the user's, which a `read()` into a fresh buffer is); low:
/// the estimate's bottom, shrunk likewise; high: the estimate's top,
/// unchanged by the kernel's folio sizes (as if every one were still
/// taken).
fn with_kernel_faults(a: &AspaceReplay) -> Vec<(u64, u64, u64)> {
    let r = &a.recorded;
    let e = r.kernel_fault_estimate.kernel_faults;
    let (lo, hi) = r.kernel_fault_estimate.band(r.faults + r.kernel_faults);
    let most = a.models.iter().map(|m| m.faults_taken).max().unwrap_or(0);
    a.models
        .iter()
        .map(|m| {
            let p = m.predicted_pgfault();
            let shrunk = |n: u64| {
                if most == 0 {
                    n
                } else {
                    (n as u128 * m.faults_taken as u128 / most as u128) as u64
                }
            };
            (p + shrunk(e), p + shrunk(lo), p + hi)
        })
        .collect()
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
             (0.1 % to 17.7 % of the faults of the programs in scripts/corpus/, 4 KiB recordings)"
        );
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
         kernel) [band: the estimate's bottom shrunk likewise .. its top, unchanged]:",
        e.zeroed_allocs, e.explained, e.kernel_faults, lo, hi
    );
    for (k, (c, l, h)) in exp.kernels.iter().zip(with_kernel_faults(a)) {
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
        .zip(with_kernel_faults(a))
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
    })
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
