//! Printing a calibration and writing its profile.

use super::{Calibration, Kind};
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
    let est = c
        .derived
        .iter()
        .filter(|d| d.kind == Kind::Estimate)
        .count();
    s += &format!(
        "{} of {} costs measured or fitted, {est} estimates ({:.0} %)\n",
        c.derived.len() - est,
        c.derived.len(),
        100.0 * est as f64 / c.derived.len().max(1) as f64
    );
    s += "\nclosing check: the calibrated model's CPU time against the live kernel's (medians)\n";
    s += &native::table::format(&c.check_rows);
    s += &format!(
        "calibration took {:.0} s, of which {:.0} s waiting for the live-kernel lock\n",
        c.secs,
        super::live::LOCK_WAIT_NS.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e9
    );
    s += &format!(
        "calibration check: {}/{} within 10 %\n",
        c.check_pass.0, c.check_pass.1
    );
    s
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

/// The profile file: a header saying how it was made, then every cost.
pub fn profile_toml(c: &Calibration, name: &str, check_mib: usize) -> String {
    let est = c
        .derived
        .iter()
        .filter(|d| d.kind == Kind::Estimate)
        .count();
    let mut s = format!(
        "# Cost profile made by `mmlab calibrate --name {name} -o <this file>` on {}\n\
         # (Linux {}, {}, {} CPUs, {} GiB; load average {} at the start; {:.0} s).\n\
         #\n\
         # \"measured\": a micro-benchmark timed the same instructions or kernel\n\
         # operation the model charges as this cost. \"fitted\": the weighted\n\
         # least-squares solution of the model's own charges against live\n\
         # measurements (fault patterns per folio size, zero-page reads, a PCP\n\
         # fault storm with small lists, munmap/mprotect/fork per page).\n\
         # \"estimate\": not measurable on this host, kept from the base profile\n\
         # with the reason. Each source gives the median and spread of its\n\
         # measurement; a re-run should agree within them.\n\
         # {} of {} costs are measured or fitted, {est} remain estimates.\n\
         # Closing check ({check_mib} MiB patterns the fit did not use):\n\
         # calibration check: {}/{} within 10 %.\n",
        today(),
        c.host.kernel,
        c.host.cpu,
        c.host.nr_cpus,
        c.host.mem_bytes >> 30,
        c.host.loadavg,
        c.secs,
        c.derived.len() - est,
        c.derived.len(),
        c.check_pass.0,
        c.check_pass.1,
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
        s += &format!(
            "\n[costs.{}]\nns = {}\nsource = {}\n",
            d.cost.key(),
            d.ns,
            toml_str(&d.source)
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
