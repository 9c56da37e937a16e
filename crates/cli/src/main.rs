//! `mmlab`: a laboratory for Linux memory-management policies.
//!
//! This file only dispatches the command line (`mmlab::args`) to the
//! library; everything that reads, runs, prints or writes is in `lib.rs`'s
//! modules, shared with the tests and the Python binding.

use anyhow::{anyhow, Result};
use clap::{CommandFactory, Parser};
use mmlab::api::{self, RunOptions, Source};
use mmlab::args::{
    BenchWhat, Cli, Cmd, CompareFormat, InfoFormat, NativeCmd, ReplayArgs, ReportFormat, RunArgs,
};
use mmlab::experiment::Experiment;
use mmlab::report::Format;
use mmlab::results::ResultsDoc;
use mmlab::{bench, compare, experiment, import, info, output, replay, timeline_out};
use std::io::Write;
use std::path::{Path, PathBuf};

fn main() {
    // Before anything can change the system: SIGINT, SIGTERM, SIGHUP and
    // SIGQUIT undo every journalled change and end mmlab by the same signal.
    if let Err(e) = host::signals::install() {
        eprintln!("mmlab: warning: cannot handle termination signals: {e}");
    }
    recover_stale_state();
    match real_main() {
        Ok(code) => std::process::exit(code),
        Err(e) if output::is_broken_pipe(&e) => {
            // The reader went away (`mmlab ... | head`): not an error.
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("mmlab: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Restores what an mmlab process that was killed (SIGKILL, a crash) left
/// changed: knobs, hugetlb pools, tracefs instances and mounts, a workload's
/// process group, temporary files (`host::journal`). Cheap when there is
/// nothing: three directory listings; the live-kernel lock is taken only when
/// something is found, and taking it does the restoring and reports it.
fn recover_stale_state() {
    let Some(dir) = host::journal::default_dir() else {
        return;
    };
    let (journals, instances) = host::journal::find_stale(&dir);
    if journals.is_empty()
        && instances.is_empty()
        && host::journal::stale_journal_rewrites(&dir).is_empty()
    {
        return;
    }
    if let Err(e) = host::lock::LiveLock::acquire() {
        eprintln!("mmlab: warning: cannot take the live-kernel lock to restore state left by a killed mmlab: {e}");
    }
}

/// Runs the command; `Ok` holds the exit status (0, or `mmlab record`'s
/// workload's status).
fn real_main() -> Result<i32> {
    output::quiet_broken_pipe_panics();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Record {
            out,
            mount_tracefs,
            kmem_system_wide,
            quiet,
            cmd,
        } => record_cmd(&out, mount_tracefs, kmem_system_wide, quiet, &cmd),
        Cmd::Fuzz(a) => mmlab::fuzz::cmd(&a),
        other => run_command(other).map(|()| 0),
    }
}

/// Every command but `record` (whose status is its workload's).
fn run_command(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Reproduce { name, bands, run } => {
            let source = match &name {
                Some(n) => Source::Builtin(n),
                None => Source::AllBuiltin,
            };
            let h = if bands {
                Headlines::Bands
            } else {
                Headlines::Central
            };
            run_cmd(source, &run, h)
        }
        Cmd::Run { file, run } => run_cmd(Source::Path(&file), &run, Headlines::None),
        Cmd::Compare {
            files,
            metrics,
            changed,
            format,
            out,
        } => compare_cmd(&files, &metrics, changed, format, out.as_deref()),
        Cmd::Report { file, out, format } => report_cmd(&file, out.as_deref(), format),
        c @ (Cmd::Zoneinfo { .. } | Cmd::List { .. } | Cmd::TraceStats { .. }) => info_cmd(c),
        c @ (Cmd::Bench { .. } | Cmd::BenchPoint { .. }) => bench_cmd(c),
        Cmd::Native { what, format, out } => {
            output::check_out(out.as_deref())?;
            native_cmd(what, format, out.as_deref())
        }
        Cmd::Record { .. } | Cmd::Fuzz(_) => unreachable!("run by real_main"),
        Cmd::Import(args) => import::import_cmd(&args),
        c @ Cmd::Calibrate { .. } => calibrate_cmd(c),
        Cmd::Replay { file, args } => replay_cmd(&file, &args),
        c @ Cmd::Validate { .. } => info_cmd(c),
        Cmd::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "mmlab", &mut buf);
            std::io::stdout().lock().write_all(&buf)?;
            Ok(())
        }
        Cmd::Man { out } => man_cmd(out.as_deref()),
    }
}

/// The informational commands: `zoneinfo`, `list`, `trace-stats`, `validate`
/// (text, or JSON with `--format json`).
fn info_cmd(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Zoneinfo { file, format, out } => {
            let exp = Experiment::load(&file)?;
            output::check_out(out.as_deref())?;
            let text = match format {
                InfoFormat::Text => info::zoneinfo_text(&exp),
                InfoFormat::Json => json_text(&info::zoneinfo_json(&exp)),
            };
            output::emit(out.as_deref(), &text)
        }
        Cmd::List { format, out } => {
            let text = match format {
                InfoFormat::Text => info::list_text(),
                InfoFormat::Json => json_text(&info::list_json()),
            };
            output::emit(out.as_deref(), &text)
        }
        Cmd::TraceStats { file, format, out } => {
            output::check_out(out.as_deref())?;
            let st = info::trace_stats(&file)?;
            let text = match format {
                InfoFormat::Text => st.text(),
                InfoFormat::Json => json_text(&st.json()),
            };
            output::emit(out.as_deref(), &text)?;
            st.damage_error().map_or(Ok(()), Err)
        }
        Cmd::Validate {
            file,
            seed,
            warm_pcp,
            mode,
            vmstat_work,
            format,
            out,
        } => {
            output::check_out(out.as_deref())?;
            let recorded = vmstat_work == replay::VmstatWork::Recorded;
            let v = replay::validate_with(&file, seed, warm_pcp, mode, recorded)?;
            for w in &v.warnings {
                eprintln!("warning: {w}");
            }
            let text = match format {
                InfoFormat::Text => v.text(&file),
                InfoFormat::Json => json_text(&v.json(&file)),
            };
            output::emit(out.as_deref(), &text)
        }
        _ => unreachable!("not an informational command"),
    }
}

/// `mmlab bench` (and its hidden `bench-point`).
fn bench_cmd(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Bench {
            what,
            ops,
            cache_lines,
            fault_mib,
            no_live,
            fault_runs,
            scale_memory,
            scale_cpus,
            churn_memory,
            churn_iterations,
            traces,
            replay_runs,
        } => {
            if what.is_none_or(|w| w == BenchWhat::Pcp) {
                bench::pcp(ops);
            }
            if what.is_none_or(|w| w == BenchWhat::Cache) {
                bench::cache(cache_lines);
            }
            if what.is_none_or(|w| w == BenchWhat::Faults) {
                bench::faults(fault_mib, !no_live, fault_runs)?;
            }
            if what == Some(BenchWhat::Scale) {
                let o = bench::scale::ScaleOptions {
                    memory: scale_memory,
                    cpus: scale_cpus,
                    churn_memory,
                    churn_iterations,
                };
                bench::scale::scale(&o, false)?;
            }
            if what == Some(BenchWhat::Replay) {
                bench::replay::replay(&traces, replay_runs)?;
            }
            Ok(())
        }
        Cmd::BenchPoint {
            memory_bytes,
            cpus,
            tasks,
            iterations,
        } => {
            let p = bench::scale::Point {
                memory_bytes,
                cpus,
                tasks,
                iterations,
            };
            println!("{}", bench::scale::run_point(&p)?.to_line());
            Ok(())
        }
        _ => unreachable!("not bench"),
    }
}

/// `mmlab calibrate`.
fn calibrate_cmd(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Calibrate {
            compare: Some(files),
            ..
        } => {
            print!("{}", mmlab::calibrate::compare(&files[0], &files[1])?);
            Ok(())
        }
        Cmd::Calibrate {
            compare: None,
            out,
            name,
            base,
            rounds,
            fit_mib,
            check_mib,
            check_runs,
            quick,
            quiet,
        } => {
            let base = experiment::BUILTIN_PROFILES
                .iter()
                .find(|(n, _)| *n == base)
                .ok_or_else(|| anyhow!("no built-in profile \"{base}\""))?;
            let (rounds, fit_mib, check_mib, check_reps) = if quick {
                (2, 16, 64, 1)
            } else {
                (rounds, fit_mib, check_mib, check_runs)
            };
            mmlab::calibrate::run(&mmlab::calibrate::Opts {
                rounds: rounds as usize,
                fit_mib: fit_mib as usize,
                check_mib: check_mib as usize,
                check_reps: check_reps as usize,
                base: experiment::parse_profile(base.1, base.0)?,
                name,
                out,
                quiet,
                host_sized_model: !quick,
                quick,
            })
        }
        _ => unreachable!("not calibrate"),
    }
}

fn json_text(v: &serde_json::Value) -> String {
    mmlab::results::to_json_pretty(v) + "\n"
}

/// Runs the experiments of `source`, printing each one's tables (or its JSON
/// Lines record) as it finishes, then the whole document for the other data
/// formats; writes `--out` and `--report`.
fn run_cmd(source: Source, a: &RunArgs, headlines: Headlines) -> Result<()> {
    let exps = api::load(source)?;
    output::check_out(a.out.as_deref())?;
    output::check_out(a.timeline.timeline.as_deref())?;
    let report_dir = a.report.as_deref().map(output::report_dir).transpose()?;
    let mut timelines = Vec::new();
    let mut stdout = std::io::stdout().lock();
    if a.format == Format::Jsonl {
        writeln!(stdout, "{}", ResultsDoc::new(Vec::new()).header_json())?;
    }
    let mut heads = Vec::new();
    let mut doc = api::run_loaded(exps, &RunOptions::from(a), |run| {
        if headlines != Headlines::None {
            heads.extend(mmlab::bands::central(&run.experiment.name, &run.results));
        }
        timelines.extend(timeline_out::of_results(&run.experiment.name, &run.results));
        match a.format {
            Format::Text | Format::Markdown => stdout.write_all(run.tables(a.format).as_bytes())?,
            Format::Jsonl => writeln!(
                stdout,
                "{}",
                ResultsDoc::experiment_record(&run.to_results())
            )?,
            _ => {}
        }
        stdout.flush()?;
        Ok(())
    })?;
    doc.headlines = headlines_of(heads, headlines, a)?;
    if !doc.headlines.is_empty() {
        match a.format {
            Format::Text | Format::Markdown => {
                writeln!(stdout, "{}", mmlab::bands::table(&doc.headlines))?
            }
            Format::Jsonl => writeln!(stdout, "{}", doc.headlines_record())?,
            _ => {}
        }
    }
    if matches!(a.format, Format::Json | Format::Csv | Format::CsvWide) {
        output::write_document(&doc, a.format, &mut stdout)?;
    }
    stdout.flush()?;
    finish_outputs(&doc, a.out.as_deref(), report_dir.as_deref())?;
    write_timeline(a.timeline.timeline.as_deref(), &timelines, a.quiet)
}

/// What `run_cmd` adds after the experiments.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Headlines {
    /// Nothing (`mmlab run`).
    None,
    /// The seeds' headline figures of the experiments that ran, beside the
    /// model's (`mmlab reproduce`).
    Central,
    /// The same with their bands (`mmlab reproduce --bands`).
    Bands,
}

/// The headline figures, with their bands when asked for (`--bands`).
fn headlines_of(
    mut heads: Vec<mmlab::bands::HeadlineResult>,
    h: Headlines,
    a: &RunArgs,
) -> Result<Vec<mmlab::bands::HeadlineResult>> {
    if h == Headlines::Bands {
        let jobs = a.jobs.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |j| j as usize,
        );
        mmlab::bands::fill_bands(&mut heads, jobs, a.quiet)?;
    }
    Ok(heads)
}

/// Writes `--timeline FILE` (atomically), and says what it holds.
fn write_timeline(
    path: Option<&Path>,
    runs: &[timeline_out::RunTimeline],
    quiet: bool,
) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    let mut n = timeline_out::Written::default();
    output::write_with(path, |w| {
        n = timeline_out::write(runs, w)?;
        Ok(())
    })?;
    if !quiet {
        eprintln!(
            "mmlab: timeline {}: {} runs, {} slices, {} counter values, {} bytes{} (open it at ui.perfetto.dev)",
            path.display(),
            runs.len(),
            n.slices,
            n.counters,
            n.bytes,
            if n.truncated_runs > 0 {
                format!("; {} runs cut at the record limit (--timeline-max)", n.truncated_runs)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// Writes `--out` (in the form its extension names) and `--report DIR`.
fn finish_outputs(doc: &ResultsDoc, out: Option<&Path>, report: Option<&Path>) -> Result<()> {
    if let Some(path) = out {
        output::write_results_as(path, doc)?;
    }
    if let Some(dir) = report {
        output::write_results(&dir.join("results.json"), doc)?;
        let html = mmlab::html::render(doc, "results.json");
        output::write_atomically(&dir.join("report.html"), html.as_bytes())?;
    }
    Ok(())
}

fn replay_cmd(file: &Path, a: &ReplayArgs) -> Result<()> {
    output::check_out(a.out.as_deref())?;
    output::check_out(a.timeline.timeline.as_deref())?;
    let r = replay::replay_cmd(file, a)?;
    finish_outputs(&r.doc, a.out.as_deref(), None)?;
    let name = r
        .doc
        .experiments
        .first()
        .map_or("replay", |e| e.name.as_str());
    write_timeline(
        a.timeline.timeline.as_deref(),
        &timeline_out::of_results(name, &r.results),
        a.quiet,
    )
}

fn compare_cmd(
    files: &[PathBuf],
    metrics: &str,
    changed: bool,
    format: CompareFormat,
    out: Option<&Path>,
) -> Result<()> {
    let docs = files
        .iter()
        .map(|f| api::read_results(f))
        .collect::<Result<Vec<_>>>()?;
    output::check_out(out)?;
    let sel = match metrics {
        "report" => compare::MetricSel::Report,
        "all" => compare::MetricSel::All,
        list => {
            let names: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
            if let Some(bad) = names.iter().find(|n| !mmlab::metrics::is_metric(n)) {
                return Err(anyhow!(
                    "--metrics: unknown metric \"{bad}\"; expected report, all, or names from `mmlab list`"
                ));
            }
            compare::MetricSel::Named(names)
        }
    };
    let rows = compare::compare(&docs, &sel);
    let labels = compare::labels(files, &docs);
    let text = match format {
        CompareFormat::Text => compare::render(&rows, &labels, Format::Text, changed),
        CompareFormat::Markdown => compare::render(&rows, &labels, Format::Markdown, changed),
        CompareFormat::Json => json_text(&compare::json(&rows, &labels, changed)),
        CompareFormat::Csv => compare::csv(&rows, &labels, changed)?,
    };
    output::emit(out, &text)
}

fn report_cmd(file: &Path, out: Option<&Path>, format: ReportFormat) -> Result<()> {
    let doc = api::read_results(file)?;
    output::check_out(out)?;
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let data = |f: Format| -> Result<String> {
        let mut buf = Vec::new();
        output::write_document(&doc, f, &mut buf)?;
        Ok(String::from_utf8(buf)?)
    };
    let text = match format {
        ReportFormat::Html => mmlab::html::render(&doc, &name),
        ReportFormat::Text => mmlab::report::tables_from_doc(&doc, Format::Text),
        ReportFormat::Markdown => mmlab::report::tables_from_doc(&doc, Format::Markdown),
        ReportFormat::Json => data(Format::Json)?,
        ReportFormat::Jsonl => data(Format::Jsonl)?,
        ReportFormat::Csv => data(Format::Csv)?,
        ReportFormat::CsvWide => data(Format::CsvWide)?,
    };
    output::emit(out, &text)
}

/// `mmlab record`; returns the workload's exit status.
fn record_cmd(
    out: &Path,
    mount_tracefs: bool,
    kmem_system_wide: bool,
    quiet: bool,
    cmd: &[String],
) -> Result<i32> {
    let opts = trace::record::RecordOptions {
        mount_tracefs,
        kmem_system_wide,
        ..Default::default()
    };
    // A tracefs instance is system-wide state: one user at a time.
    let _lock = host::lock::LiveLock::acquire()?;
    let sum = trace::record::record(out, &cmd[0], &cmd[1..], &opts)?;
    if !quiet {
        eprintln!(
            "mmlab record: {} events ({} lost, {} unpaired syscalls) in {} bytes; command {} after {:.2}s",
            sum.nr_events,
            sum.nr_lost_events,
            sum.nr_unpaired_syscalls,
            sum.nr_trace_bytes,
            sum.exit_status,
            sum.command_wall.as_secs_f64()
        );
        for (k, n) in &sum.nr_events_by_kind {
            eprintln!("  {k:<28} {n}");
        }
    }
    Ok(sum.shell_status())
}

/// `mmlab man`: the top page to stdout, or every page into a directory.
fn man_cmd(dir: Option<&Path>) -> Result<()> {
    let cmd = Cli::command();
    let Some(dir) = dir else {
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut buf)?;
        std::io::stdout().lock().write_all(&buf)?;
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    let mut pages = vec![("mmlab".to_string(), cmd.clone())];
    for s in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("mmlab-{}", s.get_name());
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        pages.push((name, s.clone().name(leaked)));
    }
    for (name, c) in pages {
        let mut buf = Vec::new();
        clap_mangen::Man::new(c).render(&mut buf)?;
        output::write_atomically(&dir.join(format!("{name}.1")), &buf)?;
    }
    Ok(())
}

fn native_cmd(what: NativeCmd, format: InfoFormat, out: Option<&Path>) -> Result<()> {
    let json = format == InfoFormat::Json;
    let table = match what {
        NativeCmd::CopyOrder {
            trials,
            seed,
            method,
            repeats,
        } => {
            let method = native::copy_order::CopyMethod::from_name(&method).ok_or_else(|| {
                anyhow!("unknown copy method \"{method}\"; valid: rep-movsq, memcpy")
            })?;
            let cfg = native::copy_order::Config {
                nr_trials: trials,
                seed,
                method,
                repeats,
                ..Default::default()
            };
            let r = native::copy_order::run(&cfg)?;
            if json {
                json_text(&mmlab::native_json::copy_order(&r))
            } else {
                r.table()
            }
        }
        NativeCmd::ParallelCopy => {
            let r = native::parallel_copy::run(&native::parallel_copy::Config::default())?;
            if json {
                json_text(&mmlab::native_json::parallel_copy(&r))
            } else {
                r.table()
            }
        }
        NativeCmd::Faults => {
            let mut runs = Vec::new();
            for (p, expected) in native::faults::reference_patterns() {
                eprintln!("running {} ...", p.name);
                runs.push((native::faults::run(&p)?, expected));
            }
            if json {
                json_text(&mmlab::native_json::faults(&runs))
            } else {
                let mut out = String::new();
                for (r, expected) in &runs {
                    out += &r.table();
                    out += &format!(
                        "expected (LIVE-KERNEL.md): {expected} faults; measured {}\n\n",
                        r.touch.nr_minflt
                    );
                }
                out
            }
        }
    };
    output::emit(out, &table)
}
