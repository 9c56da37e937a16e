//! Printing a calibration and writing its profile.

use super::{Calibration, Derived, Kind};
use anyhow::{Context, Result};
use native::calibrate::Outcome;
use std::path::Path;

/// Today's date (UTC), `YYYY-MM-DD`, from the system clock (days since the
/// epoch to a civil date: H. Hinnant's `civil_from_days`).
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The text report: every micro-benchmark, the fit's equations, every
/// cost with its kind, the check, and the last line
/// `calibration check: N/M within 10 %`.
pub fn report(c: &Calibration) -> String {
    let mut s = format!(
        "mmlab calibrate: Linux {}, {}, {} CPUs, {} GiB; load average {} at start, {} at end\n\n",
        c.host.kernel,
        c.host.cpu,
        c.host.nr_cpus,
        c.host.mem_bytes >> 30,
        c.host.loadavg,
        native::calibrate::load_average()
    );
    let mut rows = vec![vec![
        "micro-benchmark".to_string(),
        "median".into(),
        "p10-p90".into(),
        "n".into(),
    ]];
    for o in &c.micro.outcomes {
        match o {
            Outcome::Measured(m) => rows.push(vec![
                m.name.clone(),
                format!("{} {}", native::calibrate::fmt_num(m.median()), m.unit),
                format!(
                    "{}-{}",
                    native::calibrate::fmt_num(m.summary.p10),
                    native::calibrate::fmt_num(m.summary.p90)
                ),
                m.summary.nr_samples.to_string(),
            ]),
            Outcome::Skipped { name, why } => rows.push(vec![
                name.clone(),
                "SKIPPED".into(),
                why.clone(),
                "-".into(),
            ]),
        }
    }
    s += &native::table::format(&rows);
    s += "\nfit equations (live CPU time of the timed phases; faults must agree):\n";
    s += &native::table::format(&c.fit_rows);
    if let Some(r) = &c.regression {
        s += &format!("size regression: {r}\n");
    }
    s += "\ncosts:\n";
    let mut rows = vec![vec![
        "cost".to_string(),
        "ns".into(),
        "kind".into(),
        "spread".into(),
    ]];
    for d in &c.derived {
        rows.push(vec![
            d.cost.key().to_string(),
            d.ns.to_string(),
            d.kind.word().into(),
            d.spread
                .map_or("-".into(), |x| format!("+-{:.0} %", x * 100.0)),
        ]);
    }
    s += &native::table::format(&rows);
    s += &estimates_line(&c.derived);
    s += "\n";
    s += "\nclosing check: the calibrated model's CPU time against the live kernel's. Each repetition\n\
          warms the memory, then runs the pattern twice back to back; \"live\" is the median over the\n\
          repetitions of the faster of the two (a run on memory the host's free page reporting took\n\
          back faults in the host too, which only slows it). First runs and re-runs: median (min-max).\n\
          Slow runs: those 1.5x the pattern's fastest or more, and in how many of them the guest's free\n\
          page reporting had handed memory back to the host since the warm-up or the run before (its\n\
          first touch then faults in the host too: the host's cost, not the model's).\n\
          A repetition during which the guest reported memory to the host (its counter moved between\n\
          the warm-up's end and the second run's end) is set aside and run again, up to twice, for the\n\
          fit's patterns and the check's alike; the counter decides, not the run's time.\n";
    s += &native::table::format(&c.check_rows);
    s += &format!(
        "free page reporting: {}; {}; {}\n",
        c.reporting.fit.describe("fit"),
        c.reporting.check.describe("check"),
        c.reporting.window.describe()
    );
    s += &format!("{}\n", c.llc);
    s += "time by phase (wall):\n";
    s += &native::table::format(&c.phases.rows());
    s += &format!(
        "calibration took {:.0} s, of which {:.0} s waiting for the live-kernel lock\n",
        c.secs,
        super::live::LOCK_WAIT_NS.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e9
    );
    s += &format!(
        "judged on the first runs' medians: {}/{} within 10 %; on the re-runs' medians: {}/{}\n",
        c.check_pass_first.0, c.check_pass_first.1, c.check_pass_rerun.0, c.check_pass_rerun.1
    );
    s += &last_lines(c.quick, c.check_pass);
    s
}

/// The report's last lines: for a `--quick` run what its count means,
/// then the count, always last (CI's smoke test reads the last line).
fn last_lines(quick: bool, (pass, of): (usize, usize)) -> String {
    let note = if quick { QUICK_NOTE } else { "" };
    format!("{note}calibration check: {pass}/{of} within 10 %\n")
}

/// The line a `--quick` run prints before its check's count: what the
/// count of a smoke run means.
pub const QUICK_NOTE: &str = "--quick is a smoke run (2 rounds, 16 MiB fit patterns, 64 MiB checks run once, the model on a machine sized to each pattern): it shows that calibrate runs and puts the knobs back, not how well the model predicts this host (its count moves between 4/9 and 8/9 run to run); a full run (no --quick) measures that\n";

/// `text` broken into comment lines of at most ~76 characters (the first
/// without its `# `).
fn wrap_comment(text: &str) -> String {
    let mut lines = vec![String::new()];
    for w in text.split(' ') {
        let last = lines.last_mut().expect("one line");
        if !last.is_empty() && last.len() + w.len() > 75 {
            lines.push(w.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(w);
        }
    }
    lines.join("\n# ")
}

fn toml_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `N of M costs measured or fitted, E estimates (P %): H cannot be
/// measured here (costs), Y not yet measured (costs)`.
pub fn estimates_line(derived: &[Derived]) -> String {
    let of = |k: Kind| -> Vec<&str> {
        derived
            .iter()
            .filter(|d| d.kind == k)
            .map(|d| d.cost.key())
            .collect()
    };
    let (here, yet) = (of(Kind::NotHere), of(Kind::Estimate));
    let est = here.len() + yet.len();
    let list = |v: &[&str]| {
        if v.is_empty() {
            String::new()
        } else {
            format!(" ({})", v.join(", "))
        }
    };
    format!(
        "{} of {} costs measured or fitted, {est} estimates ({:.0} %): {} cannot be measured here{}, {} not yet measured{}",
        derived.len() - est,
        derived.len(),
        100.0 * est as f64 / derived.len().max(1) as f64,
        here.len(),
        list(&here),
        yet.len(),
        list(&yet)
    )
}

/// The profile file: a header saying how it was made, then every cost.
pub fn profile_toml(c: &Calibration, name: &str, check_mib: usize) -> String {
    let mut s = format!(
        "# Cost profile made by `mmlab calibrate --name {name} -o <this file>` on {}\n\
         # (Linux {}, {}, {} CPUs, {} GiB; load average {} at the start; {:.0} s).\n\
         #\n\
         # \"measured\": a micro-benchmark timed the same instructions or kernel\n\
         # operation the model charges as this cost. \"fitted\": the weighted\n\
         # least-squares solution of the model's own charges against live\n\
         # measurements (fault patterns per folio size, zero-page reads, a PCP\n\
         # fault storm with small lists, munmap/mprotect/fork per page; the\n\
         # buddy steps from the storm with small lists less with large ones).\n\
         # \"estimate\": kept from the base profile with the reason, either\n\
         # \"cannot measure it here\" or \"not yet measured\". Each source gives\n\
         # the median and spread of its measurement and ends with the figure's\n\
         # spread; `mmlab calibrate --compare` tells whether a re-run agrees.\n\
         # {}.\n\
         # Closing check ({check_mib} MiB patterns the fit did not use):\n\
         # calibration check: {}/{} within 10 % (median of each repetition's faster\n\
         # of two back-to-back runs; on the first runs' medians {}/{}, the re-runs' {}/{}).\n\
         # Columns: pattern | live ms | p10-p90 | first runs ms | re-runs ms |\n\
         # model ms | error | vs first | vs re-run | faults live/model.\n\
         # {}.\n\
         # {}.\n",
        today(),
        c.host.kernel,
        c.host.cpu,
        c.host.nr_cpus,
        c.host.mem_bytes >> 30,
        c.host.loadavg,
        c.secs,
        wrap_comment(&estimates_line(&c.derived)),
        c.check_pass.0,
        c.check_pass.1,
        c.check_pass_first.0,
        c.check_pass_first.1,
        c.check_pass_rerun.0,
        c.check_pass_rerun.1,
        wrap_comment(&c.llc),
        wrap_comment(&format!(
            "Free page reporting (a repetition the guest reported memory during is run again, up to twice, fit and check alike): {}; {}",
            c.reporting.fit.describe("fit"),
            c.reporting.check.describe("check")
        )),
    );
    for row in c.check_rows.iter().skip(1) {
        s += &format!("#   {}\n", row.join(" | "));
    }
    s += &format!("name = {}\n", toml_str(name));
    s += &format!(
        "description = {}\n",
        toml_str(&format!(
            "{}, {} CPUs, {} GiB, Linux {} (calibrated)",
            c.host.cpu,
            c.host.nr_cpus,
            c.host.mem_bytes >> 30,
            c.host.kernel
        ))
    );
    for d in &c.derived {
        let band = d
            .band
            .map_or(String::new(), |(lo, hi)| format!("band = [{lo}, {hi}]\n"));
        s += &format!(
            "\n[costs.{}]\nns = {}\n{band}source = {}\n",
            d.cost.key(),
            d.ns,
            toml_str(&match d.spread {
                Some(x) => format!(
                    "{}{}{:.1} %",
                    d.source,
                    super::compare::SPREAD_MARK,
                    x * 100.0
                ),
                None => d.source.clone(),
            })
        );
    }
    s
}

/// Writes `text` to `path` whole or not at all (`host::output`: an
/// unpredictable temporary beside it, synced, renamed over it).
pub fn write_atomically(path: &Path, text: &str) -> Result<()> {
    host::output::write_atomic(path, text.as_bytes(), host::output::Mode::Shared)
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_run_says_what_its_count_shows_and_ends_with_the_count() {
        let quick = last_lines(true, (5, 9));
        let full = last_lines(false, (9, 9));
        assert_eq!(full, "calibration check: 9/9 within 10 %\n");
        let lines: Vec<&str> = quick.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with("--quick is a smoke run") && lines[0].contains("not how well")
        );
        assert_eq!(lines[1], "calibration check: 5/9 within 10 %");
    }

    #[test]
    fn toml_strings_escape() {
        assert_eq!(toml_str(r#"a "b" \c"#), r#""a \"b\" \\c""#);
    }

    #[test]
    fn today_is_a_date() {
        let t = today();
        assert_eq!(t.len(), 10);
        assert!(t.starts_with("20"));
    }

    #[test]
    fn atomic_write_replaces_whole() {
        let dir = host::scratch::ScratchDir::new("cal").unwrap();
        let p = dir.join("p.toml");
        write_atomically(&p, "one").unwrap();
        write_atomically(&p, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary left"
        );
    }
}
