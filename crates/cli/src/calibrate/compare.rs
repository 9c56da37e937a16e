//! `mmlab calibrate --compare A.toml B.toml`: do two calibrations agree?
//!
//! Each measured or fitted cost of a calibrated profile records its
//! spread (half the p10-p90 range of its samples, or of the fits over the
//! rounds, as a share of the figure: `; spread +-X %` at the end of its
//! source). Two runs agree on a cost when their figures differ by no more
//! than the two half-ranges together, that is when the two p10-p90 ranges
//! overlap. Estimates are the base profile's figures and only have to be
//! equal.

use crate::experiment::parse_profile;
use anyhow::{Context, Result};
use std::path::Path;

/// The marker of a recorded spread in a cost's source.
pub const SPREAD_MARK: &str = "; spread +-";

/// A cost's figure, kind word and recorded relative spread.
struct Side {
    ns: u64,
    kind: String,
    spread: Option<f64>,
}

fn side(ns: u64, source: &str) -> Side {
    let kind = source.split([' ', '(']).next().unwrap_or("?").to_string();
    let spread = source.rfind(SPREAD_MARK).and_then(|i| {
        let rest = &source[i + SPREAD_MARK.len()..];
        rest.split(' ')
            .next()?
            .parse::<f64>()
            .ok()
            .map(|p| p / 100.0)
    });
    Side { ns, kind, spread }
}

/// The comparison table of two calibrated profiles, and its summary line.
pub fn compare(a: &Path, b: &Path) -> Result<String> {
    let read = |p: &Path| -> Result<sim::profile::Profile> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        parse_profile(&text, &p.display().to_string())
    };
    let (pa, pb) = (read(a)?, read(b)?);
    Ok(compare_profiles(
        &a.display().to_string(),
        &pa,
        &b.display().to_string(),
        &pb,
    ))
}

/// [`compare`] of two parsed profiles named `a` and `b`.
pub fn compare_profiles(
    a: &str,
    pa: &sim::profile::Profile,
    b: &str,
    pb: &sim::profile::Profile,
) -> String {
    let mut rows = vec![vec![
        "cost".to_string(),
        "A ns".into(),
        "B ns".into(),
        "B-A".into(),
        "spread A".into(),
        "spread B".into(),
        "kind".into(),
        "agree".into(),
    ]];
    let (mut n, mut within_spread, mut within_10) = (0, 0, 0);
    let pct = |s: Option<f64>| s.map_or("-".to_string(), |x| format!("+-{:.1} %", x * 100.0));
    for (key, ea) in &pa.entries {
        let Some(eb) = pb.entries.get(key) else {
            rows.push(vec![
                key.clone(),
                ea.ns.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "only in A".into(),
            ]);
            continue;
        };
        let (sa, sb) = (side(ea.ns, &ea.source), side(eb.ns, &eb.source));
        let diff = (sb.ns as f64 - sa.ns as f64) / (sa.ns.max(1) as f64);
        let estimate = sa.kind == "estimate" && sb.kind == "estimate";
        let verdict = if estimate {
            if sa.ns == sb.ns {
                "estimate, equal"
            } else {
                "estimate, differs"
            }
            .to_string()
        } else {
            n += 1;
            let room =
                sa.spread.unwrap_or(0.0) * sa.ns as f64 + sb.spread.unwrap_or(0.0) * sb.ns as f64;
            let in_spread = (sb.ns as f64 - sa.ns as f64).abs() <= room.max(1.0);
            within_spread += usize::from(in_spread);
            within_10 += usize::from(diff.abs() <= 0.10);
            match (in_spread, diff.abs() <= 0.10) {
                (true, true) => "yes",
                (true, false) => "within spread",
                (false, true) => "within 10 %",
                (false, false) => "NO",
            }
            .to_string()
        };
        let kind = if sa.kind == sb.kind {
            sa.kind.clone()
        } else {
            format!("{}/{}", sa.kind, sb.kind)
        };
        rows.push(vec![
            key.clone(),
            sa.ns.to_string(),
            sb.ns.to_string(),
            format!("{:+.1} %", diff * 100.0),
            pct(sa.spread),
            pct(sb.spread),
            kind,
            verdict,
        ]);
    }
    let mut s = format!("A: {a}\nB: {b}\n");
    s += &native::table::format(&rows);
    s += &format!(
        "run-to-run: {within_spread}/{n} measured or fitted costs agree within their recorded spreads (p10-p90 ranges overlap), {within_10}/{n} within 10 %\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gives_its_kind_and_spread() {
        let s = side(10, "measured (mmlab calibrate, ...): x; spread +-4.5 %");
        assert_eq!((s.kind.as_str(), s.spread), ("measured", Some(0.045)));
        let e = side(7, "estimate (mmlab calibrate cannot measure it here: y): z");
        assert_eq!((e.kind.as_str(), e.spread), ("estimate", None));
    }

    #[test]
    fn a_profile_agrees_with_itself_and_a_moved_cost_shows() {
        let (name, text) = crate::experiment::BUILTIN_PROFILES
            .iter()
            .find(|(n, _)| *n == "host-epyc-zen3")
            .expect("the host profile");
        let p = parse_profile(text, name).unwrap();
        let same = compare_profiles("a", &p, "b", &p);
        let last = same.lines().last().unwrap();
        let n = p
            .entries
            .values()
            .filter(|e| !e.source.starts_with("estimate"))
            .count();
        assert_eq!(
            last,
            format!("run-to-run: {n}/{n} measured or fitted costs agree within their recorded spreads (p10-p90 ranges overlap), {n}/{n} within 10 %")
        );
        let mut q = p.clone();
        let e = q.entries.get_mut("syscall_entry_ns").unwrap();
        e.ns *= 2;
        let moved = compare_profiles("a", &p, "b", &q);
        let row = moved
            .lines()
            .find(|l| l.starts_with("syscall_entry_ns"))
            .unwrap();
        assert!(row.ends_with("NO") && row.contains("+100.0 %"), "{row}");
    }
}
