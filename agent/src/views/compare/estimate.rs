//! A figure and its standard error, from what it is made of (a count, a sample of CPU split
//! samples, a histogram of timed handshakes), and the change between two of them with its
//! 95% interval: the arithmetic behind "−50% ± 4%". Nothing here knows what a figure means.

/// The two-sided 95% point of the normal distribution.
pub const Z95: f64 = 1.96;

/// A figure and its standard error (same unit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub value: f64,
    pub se: f64,
}

impl Estimate {
    /// `n` events in `seconds`: a rate, with a Poisson count's error (√n; √1 for none, so
    /// that no event is not taken for certainty).
    pub fn rate(n: f64, seconds: f64) -> Estimate {
        Estimate {
            value: n / seconds,
            se: n.max(1.0).sqrt() / seconds,
        }
    }

    /// `k` of `n`: a share, with a binomial error as Agresti and Coull give it (two
    /// successes and two failures added), which stays honest at 0%, at 100% and on few.
    pub fn share(k: f64, n: f64) -> Option<Estimate> {
        (n > 0.0).then(|| {
            let p = (k / n).clamp(0.0, 1.0);
            let q = (k.clamp(0.0, n) + 2.0) / (n + 4.0);
            Estimate {
                value: p,
                se: (q * (1.0 - q) / (n + 4.0)).sqrt(),
            }
        })
    }

    /// An exact total spread over `n` events (CPU seconds per exchange), the events' costs
    /// varying with a coefficient of variation `cv` (their standard deviation over their
    /// mean): the mean's relative error is cv/√n.
    pub fn per_event(total: f64, n: f64, cv: f64) -> Option<Estimate> {
        (n > 0.0).then(|| Estimate {
            value: total / n,
            se: total / n * cv / n.sqrt(),
        })
    }

    /// The coefficient of variation of the observations behind a mean (None at 0).
    pub fn cv(&self, n: f64) -> Option<f64> {
        (self.value > 0.0 && n > 0.0).then(|| self.se * n.sqrt() / self.value)
    }

    /// The mean of `n` observations summing to `sum`, their spread read from a histogram:
    /// (upper bound, observations in that bucket alone), those above the last bound the
    /// rest. Each bucket's observations are taken as spread evenly over it, the last
    /// bucket's above its bound up to twice it; over its whole numbers where the
    /// observations are counts (`discrete`: a bucket (4, 5] holds 5 alone).
    pub fn mean(sum: f64, n: f64, buckets: &[[f64; 2]], discrete: bool) -> Option<Estimate> {
        if n <= 0.0 {
            return None;
        }
        let mean = sum / n;
        let mut var = 0.0;
        let mut lower = 0.0;
        let mut seen = 0.0;
        let mut spread = |lo: f64, hi: f64, k: f64| {
            let (mid, within) = if discrete {
                // the whole numbers lo+1 ..= hi, evenly
                let (a, b) = (lo.floor() + 1.0, hi.floor().max(lo.floor() + 1.0));
                ((a + b) / 2.0, ((b - a + 1.0).powi(2) - 1.0) / 12.0)
            } else {
                ((lo + hi) / 2.0, (hi - lo).powi(2) / 12.0)
            };
            var += k * ((mid - mean).powi(2) + within);
        };
        for (i, &[upper, k]) in buckets.iter().enumerate() {
            if k > 0.0 {
                // the first bucket of counts holds 0 too
                spread(if discrete && i == 0 { -1.0 } else { lower }, upper, k);
            }
            seen += k;
            lower = upper;
        }
        let above = (n - seen).max(0.0);
        if above > 0.0 {
            spread(lower, (2.0 * lower).max(mean), above);
        }
        if buckets.is_empty() {
            // No spread known (an older report): that of a coefficient of variation of 1.
            var = mean * mean * n;
        }
        Some(Estimate {
            value: mean,
            se: (var / n).sqrt() / n.sqrt(),
        })
    }

    /// The product with a figure of its own error (independent errors, the delta method:
    /// a factor at zero keeps the other's error times its own).
    pub fn times(self, o: Estimate) -> Estimate {
        Estimate {
            value: self.value * o.value,
            se: ((self.value * o.se).powi(2) + (o.value * self.se).powi(2)).sqrt(),
        }
    }
}

/// How a change is said: relative to the figure before, or (a share) as a difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Relative,
    Points,
}

/// What became of a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Up,
    Down,
    /// Within its 95% interval.
    NoChange,
    /// Beyond its interval, but smaller than the smallest change called one.
    Small,
    /// Seen on one side only.
    NotComparable,
    /// A rate of the load (handshakes or connections per second) that moved beyond its
    /// noise: what the clients did, not a change of the server's.
    Load,
    /// An interval wider than the figure on both sides (the larger of the two): too little
    /// behind it to say anything.
    TooLittle,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Up => "up",
            Verdict::Down => "down",
            Verdict::NoChange => "no_change",
            Verdict::Small => "small",
            Verdict::NotComparable => "not_comparable",
            Verdict::Load => "load",
            Verdict::TooLittle => "too_little",
        }
    }
}

/// A change: after less before (Points) or after over before less one (Relative), its 95%
/// half-width, and the verdict with `min_change` (a fraction, or points as a fraction).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    pub change: Option<f64>,
    pub interval: Option<f64>,
    pub verdict: Verdict,
}

/// A figure over repeated runs of one configuration: the mean of the runs' values (with the
/// windows' own errors, combined), how many runs, and their values' sum of squared
/// deviations from the mean: the spread from one run to the next, which no single window
/// shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Runs {
    pub mean: Estimate,
    pub k: f64,
    pub ss: f64,
}

impl Runs {
    pub fn of(runs: &[Estimate]) -> Option<Runs> {
        if runs.is_empty() {
            return None;
        }
        let k = runs.len() as f64;
        let value = runs.iter().map(|e| e.value).sum::<f64>() / k;
        let se = runs.iter().map(|e| e.se.powi(2)).sum::<f64>().sqrt() / k;
        let ss = runs.iter().map(|e| (e.value - value).powi(2)).sum();
        Some(Runs {
            mean: Estimate { value, se },
            k,
            ss,
        })
    }

    #[cfg(test)]
    pub fn one(e: Estimate) -> Runs {
        Runs {
            mean: e,
            k: 1.0,
            ss: 0.0,
        }
    }
}

/// The two-sided 95% point of Student's t with `df` degrees of freedom.
pub fn t95(df: f64) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df as usize {
        0 => f64::INFINITY,
        d @ 1..=30 => T[d - 1],
        // Cornish-Fisher's first two terms: within 0.05% from 31 on
        _ => {
            let z = Z95;
            z + (z.powi(3) + z) / (4.0 * df) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * df * df)
        }
    }
}

/// A change between two single windows.
#[cfg(test)]
pub fn change(before: Option<Estimate>, after: Option<Estimate>, scale: Scale, min_change: f64) -> Change {
    change_runs(before.map(Runs::one), after.map(Runs::one), scale, min_change)
}

/// A change between two sides of one run or more each. Its interval is the wider of the
/// windows' own (their errors, 1.96 standard errors of the difference) and, with repeated
/// runs, the runs' spread (their pooled variance, Student's t on its degrees of freedom).
pub fn change_runs(before: Option<Runs>, after: Option<Runs>, scale: Scale, min_change: f64) -> Change {
    let (Some(ra), Some(rb)) = (before, after) else {
        return Change {
            change: None,
            interval: None,
            verdict: Verdict::NotComparable,
        };
    };
    let (a, b) = (ra.mean, rb.mean);
    let diff_se = (a.se.powi(2) + b.se.powi(2)).sqrt();
    let df = ra.k + rb.k - 2.0;
    let between = (df >= 1.0).then(|| t95(df) * ((ra.ss + rb.ss) / df * (1.0 / ra.k + 1.0 / rb.k)).sqrt());
    // The half-width of the difference, said relative to the value before for a relative
    // change: the one interval printed and judged by.
    let half = (Z95 * diff_se).max(between.unwrap_or(0.0));
    let (change, interval) = match scale {
        Scale::Points => (Some(b.value - a.value), Some(half)),
        Scale::Relative if a.value > 0.0 => (Some(b.value / a.value - 1.0), Some(half / a.value)),
        // From nothing: no ratio, only whether the difference is beyond its noise.
        Scale::Relative => (None, None),
    };
    // An interval wider than the figure on either side reaches past what is possible (a
    // cost, a count or a share below nothing): too little behind it to say anything.
    if half > a.value.abs().max(b.value.abs()) {
        return Change {
            change,
            interval,
            verdict: Verdict::TooLittle,
        };
    }
    let beyond = (b.value - a.value).abs() > half;
    let large = change.is_none_or(|c| c.abs() >= min_change);
    let verdict = match (beyond && large, b.value > a.value) {
        (false, _) if beyond => Verdict::Small,
        (false, _) => Verdict::NoChange,
        (true, true) => Verdict::Up,
        (true, false) => Verdict::Down,
    };
    Change {
        change,
        interval,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mean_carries_its_histograms_spread() {
        // 100 handshakes all in (0.25, 0.5] ms, mean 0.3 ms: the bucket's width is the spread
        let e = Estimate::mean(0.03, 100.0, &[[0.25e-3, 0.0], [0.5e-3, 100.0]], false).unwrap();
        assert!((e.value - 0.3e-3).abs() < 1e-15);
        let var = (0.375e-3f64 - 0.3e-3).powi(2) + (0.25e-3f64).powi(2) / 12.0;
        assert!((e.se - var.sqrt() / 10.0).abs() < 1e-12, "{e:?}");
        // above the last bound: spread up to twice it
        let e = Estimate::mean(300.0, 100.0, &[[1.0, 0.0]], false).unwrap();
        assert!(e.se > 0.0 && e.value == 3.0);
        assert_eq!(Estimate::mean(0.0, 0.0, &[], false), None);
        // counts: every connection carried exactly one request, or five: no spread at all
        let ones = Estimate::mean(100.0, 100.0, &[[0.0, 0.0], [1.0, 100.0], [2.0, 0.0]], true).unwrap();
        assert_eq!((ones.value, ones.se), (1.0, 0.0));
        let fives = Estimate::mean(500.0, 100.0, &[[4.0, 0.0], [5.0, 100.0]], true).unwrap();
        assert_eq!((fives.value, fives.se), (5.0, 0.0));
        // (10, 20]: 11..=20 evenly
        let wide = Estimate::mean(1550.0, 100.0, &[[10.0, 0.0], [20.0, 100.0]], true).unwrap();
        assert!((wide.se - (99.0f64 / 12.0).sqrt() / 10.0).abs() < 1e-12, "{wide:?}");
    }

    #[test]
    fn changes_are_called_beyond_their_noise_and_the_smallest_change() {
        let a = Estimate { value: 1.0, se: 0.01 };
        let half = Estimate { value: 0.5, se: 0.01 };
        let c = change(Some(a), Some(half), Scale::Relative, 0.05);
        assert_eq!(c.verdict, Verdict::Down);
        assert!((c.change.unwrap() + 0.5).abs() < 1e-12);
        // 1.96 × √(0.01² + 0.01²), over the value before
        assert!((c.interval.unwrap() - 1.96 * 0.0002f64.sqrt()).abs() < 1e-12);
        // a fall to nothing keeps the error of what it fell from
        let c = change(Some(a), Some(Estimate { value: 0.0, se: 0.0 }), Scale::Relative, 0.05);
        assert!((c.interval.unwrap() - 1.96 * 0.01).abs() < 1e-12 && c.verdict == Verdict::Down);
        // 3% with a 1% error each: beyond the noise, below the smallest change asked for
        let near = Estimate {
            value: 1.03,
            se: 0.0103,
        };
        assert_eq!(
            change(Some(a), Some(near), Scale::Relative, 0.05).verdict,
            Verdict::Small
        );
        assert_eq!(change(Some(a), Some(near), Scale::Relative, 0.0).verdict, Verdict::Up);
        // 10% with a 10% error each: within the noise
        let noisy = Estimate { value: 1.0, se: 0.1 };
        let up = Estimate { value: 1.1, se: 0.11 };
        assert_eq!(
            change(Some(noisy), Some(up), Scale::Relative, 0.0).verdict,
            Verdict::NoChange
        );
        assert_eq!(
            change(None, Some(a), Scale::Relative, 0.0).verdict,
            Verdict::NotComparable
        );
        // shares in points
        let s0 = Estimate::share(0.0, 100.0).unwrap();
        assert!((s0.se - (2.0f64 / 104.0 * (102.0 / 104.0) / 104.0).sqrt()).abs() < 1e-12);
        let s1 = Estimate::share(95.0, 100.0).unwrap();
        let c = change(Some(s0), Some(s1), Scale::Points, 0.05);
        assert_eq!((c.verdict, c.change), (Verdict::Up, Some(0.95)));
        // from nothing: up when beyond the noise, with no ratio
        let c = change(
            Some(Estimate::rate(0.0, 10.0)),
            Some(Estimate::rate(100.0, 10.0)),
            Scale::Relative,
            0.05,
        );
        assert_eq!((c.verdict, c.change), (Verdict::Up, None));
        // from nothing to one: too little to say
        let c = change(
            Some(Estimate::rate(0.0, 10.0)),
            Some(Estimate::rate(1.0, 10.0)),
            Scale::Relative,
            0.05,
        );
        assert_eq!(c.verdict, Verdict::TooLittle);
    }

    #[test]
    fn repeated_runs_carry_their_spread() {
        let e = |v: f64| Estimate { value: v, se: 0.01 };
        // two runs before at 1.0 and 1.2 (the host's drift), one after at 1.3: 18% up, each
        // window precise to 1%, but the runs spread by 0.2
        let a = Runs::of(&[e(1.0), e(1.2)]).unwrap();
        assert_eq!((a.mean.value, a.k), (1.1, 2.0));
        assert!((a.ss - 0.02).abs() < 1e-12 && (a.mean.se - 0.01 / 2f64.sqrt()).abs() < 1e-12);
        let b = Runs::one(e(1.3));
        let c = change_runs(Some(a), Some(b), Scale::Relative, 0.0);
        // two runs that far apart leave an interval of ±200%: too little to say anything
        assert_eq!(c.verdict, Verdict::TooLittle);
        // t(1) × √(0.02 × 1.5) ÷ 1.1
        assert!(
            (c.interval.unwrap() - 12.706 * 0.03f64.sqrt() / 1.1).abs() < 1e-9,
            "{c:?}"
        );
        assert!((t95(31.0) - 2.040).abs() < 0.001 && (t95(60.0) - 2.000).abs() < 0.001);
        // runs that agree: the same 18% is a change
        let a = Runs::of(&[e(1.1), e(1.1), e(1.1)]).unwrap();
        assert_eq!(change_runs(Some(a), Some(b), Scale::Relative, 0.0).verdict, Verdict::Up);
        assert!((t95(30.0) - 2.042).abs() < 0.01 && t95(0.0).is_infinite());
        // three runs each side, spread by 5%: an 18% rise within ±20% is no change
        let a = Runs::of(&[e(1.05), e(1.1), e(1.15)]).unwrap();
        let b = Runs::of(&[e(1.25), e(1.3), e(1.35)]).unwrap();
        let c = change_runs(Some(a), Some(b), Scale::Relative, 0.0);
        assert_eq!(c.verdict, Verdict::Up, "{c:?}");
    }

    #[test]
    fn no_interval_past_what_is_possible() {
        // 24.6 → 12.5 µs with errors of 60% each side: ±100% and more is too little to say
        let a = Estimate { value: 24.6, se: 14.0 };
        let b = Estimate { value: 12.5, se: 7.0 };
        let c = change(Some(a), Some(b), Scale::Relative, 0.1);
        assert_eq!(c.verdict, Verdict::TooLittle, "{c:?}");
        assert!(c.interval.unwrap() > 1.0);
        // the same with errors of 10%: a fall
        let c = change(
            Some(Estimate { se: 2.46, ..a }),
            Some(Estimate { se: 1.25, ..b }),
            Scale::Relative,
            0.1,
        );
        assert_eq!(c.verdict, Verdict::Down, "{c:?}");
        // a share on 3 samples a side, 0% then 33%: an interval of ±50 points
        let few = change(Estimate::share(0.0, 3.0), Estimate::share(1.0, 3.0), Scale::Points, 0.1);
        assert_eq!(few.verdict, Verdict::TooLittle, "{few:?}");
        // a count that rose twentyfold, its interval ±320% of the figure before but well
        // within the figure after: a rise
        let a = Estimate { value: 5.0, se: 0.0 };
        let b = Estimate { value: 100.0, se: 8.2 };
        assert_eq!(change(Some(a), Some(b), Scale::Relative, 0.1).verdict, Verdict::Up);
    }
}
