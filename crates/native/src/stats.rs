//! Order statistics of repeated measurements: median and spread.

/// Median and spread of a sample. Percentiles use the nearest-rank method on the
/// sorted sample, so every reported value is one that was actually measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub nr_samples: usize,
    /// Smallest sample.
    pub min: f64,
    /// 10th percentile.
    pub p10: f64,
    /// Median (50th percentile).
    pub median: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Largest sample.
    pub max: f64,
}

impl Summary {
    /// Summarizes `samples`; `None` if there are none or one is NaN.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| x.is_nan()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |p: f64| -> f64 {
            // Nearest rank: ceil(p * n), 1-based.
            let n = sorted.len();
            let r = ((p * n as f64).ceil() as usize).clamp(1, n);
            sorted[r - 1]
        };
        Some(Summary {
            nr_samples: sorted.len(),
            min: sorted[0],
            p10: rank(0.10),
            median: rank(0.50),
            p90: rank(0.90),
            max: sorted[sorted.len() - 1],
        })
    }
}

/// The samples split into modes: sorted, and cut wherever one sample is
/// more than `ratio` times the one before it. One mode (all the samples)
/// when no gap is that wide; none for no samples.
///
/// For a measurement whose figure jumps between a few levels rather than
/// scattering around one (a cache line bounced between two vCPUs whose
/// host cores the hypervisor picks: ~20, ~45 or ~190 ns here, minutes
/// apart), the median of all samples is a figure no run measured and a
/// p10-p90 range across modes says nothing about either.
pub fn modes(samples: &[f64], ratio: f64) -> Vec<Vec<f64>> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut out: Vec<Vec<f64>> = Vec::new();
    for x in sorted {
        match out.last_mut() {
            Some(m) if x <= m[m.len() - 1] * ratio => m.push(x),
            _ => out.push(vec![x]),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = Summary::of(&xs).unwrap();
        assert_eq!(
            (s.min, s.p10, s.median, s.p90, s.max),
            (1.0, 1.0, 5.0, 9.0, 10.0)
        );
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[3.0]).unwrap().median, 3.0);
    }

    #[test]
    fn modes_split_at_wide_gaps_only() {
        let xs = [190.0, 21.0, 45.0, 20.0, 200.0, 22.0];
        assert_eq!(
            modes(&xs, 1.5),
            vec![vec![20.0, 21.0, 22.0], vec![45.0], vec![190.0, 200.0]]
        );
        assert_eq!(modes(&xs, 10.0).len(), 1);
        assert!(modes(&[], 1.5).is_empty());
    }
}
