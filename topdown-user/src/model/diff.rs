//! Before and after (`topdown-bpf diff`): per row and field, the windows of two runs compared
//! with Welch's t-test, which does not assume the two runs vary alike, and the p-values
//! adjusted over every comparison of the diff with Holm's method, so a diff of two runs of the
//! same workload does not flag a change by chance among hundreds of comparisons. A change is
//! flagged when its adjusted p-value is under `alpha` and it is at least `min_change` of the
//! larger mean: never from two totals alone, and never a change too small to matter because the
//! windows happen to be steady.

use std::collections::BTreeMap;

/// How a diff decides what changed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Test {
    /// Family-wise error rate: flagged when Holm's adjusted p-value is under it.
    pub alpha: f64,
    /// Smallest change flagged, as a fraction of the larger of the two means.
    pub min_change: f64,
}

impl Test {
    /// 1 % family-wise, changes of at least 5 %.
    pub const DEFAULT: Self = Self {
        alpha: 0.01,
        min_change: 0.05,
    };
}

/// One field of one row, compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The row's key (`process/thread`, a cgroup's path, a container).
    pub key: String,
    /// The field (`cpu_percent`, `ipc`, a TopDown node).
    pub field: String,
    /// Mean per window before, and how many windows.
    pub before: f64,
    /// Windows before.
    pub before_windows: usize,
    /// Mean per window after.
    pub after: f64,
    /// Windows after.
    pub after_windows: usize,
    /// Welch's t (after minus before); `None` where both sides are constant.
    pub t: Option<f64>,
    /// Its two-sided p-value, before adjustment.
    pub p: f64,
    /// Holm's adjusted p-value over every comparison of the diff.
    pub p_adjusted: f64,
    /// Flagged: adjusted p under alpha and a change of at least min_change.
    pub significant: bool,
}

impl Change {
    /// After minus before.
    pub fn delta(&self) -> f64 {
        self.after - self.before
    }

    /// The change over the before value (`None` from 0).
    pub fn relative(&self) -> Option<f64> {
        (self.before != 0.0).then(|| self.delta() / self.before.abs())
    }
}

/// A row seen on one side only, with its mean %CPU there.
#[derive(Clone, Debug, PartialEq)]
pub struct OneSided {
    /// The row's key.
    pub key: String,
    /// Its mean %CPU over that side's windows.
    pub cpu_percent: f64,
}

/// A diff: the changes, flagged ones first (by |t|, largest first), then the rest by the size
/// of their relative change; rows on one side only.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// Every field of every row seen on both sides.
    pub changes: Vec<Change>,
    /// Rows seen only before.
    pub only_before: Vec<OneSided>,
    /// Rows seen only after.
    pub only_after: Vec<OneSided>,
    /// How it decided.
    pub test: Test,
}

/// Per row, per field, one value per window (a window where the row did not run is a 0 for
/// time fields and no value for ratios: the caller says which by what it puts in).
pub type Samples = BTreeMap<String, BTreeMap<String, Vec<f64>>>;

/// The field that says how busy a row was, for rows seen on one side only.
pub const CPU_FIELD: &str = "cpu_percent";

/// Compares `before` with `after` under `test`.
pub fn diff(before: &Samples, after: &Samples, test: Test) -> Diff {
    let mut changes = Vec::new();
    for (key, fields) in before {
        let Some(after_fields) = after.get(key) else {
            continue;
        };
        for (field, a) in fields {
            let Some(b) = after_fields.get(field) else {
                continue;
            };
            if a.is_empty() || b.is_empty() {
                continue;
            }
            let (t, p) = welch(a, b);
            changes.push(Change {
                key: key.clone(),
                field: field.clone(),
                before: mean(a),
                before_windows: a.len(),
                after: mean(b),
                after_windows: b.len(),
                t,
                p,
                p_adjusted: p,
                significant: false,
            });
        }
    }
    holm(&mut changes);
    for change in &mut changes {
        let larger = change.before.abs().max(change.after.abs());
        let big_enough = larger > 0.0 && change.delta().abs() >= test.min_change * larger;
        change.significant = change.p_adjusted < test.alpha && big_enough;
    }
    changes.sort_by(|x, y| {
        y.significant.cmp(&x.significant).then_with(|| {
            let size = |c: &Change| match (c.significant, c.t) {
                (true, Some(t)) => t.abs(),
                _ => c.relative().map_or(0.0, f64::abs),
            };
            size(y).total_cmp(&size(x))
        })
    });
    let one_sided = |from: &Samples, other: &Samples| {
        let mut rows: Vec<OneSided> = from
            .iter()
            .filter(|(key, _)| !other.contains_key(*key))
            .map(|(key, fields)| OneSided {
                key: key.clone(),
                cpu_percent: fields.get(CPU_FIELD).map_or(0.0, |v| mean(v)),
            })
            .collect();
        rows.sort_by(|x, y| y.cpu_percent.total_cmp(&x.cpu_percent));
        rows
    };
    Diff {
        changes,
        only_before: one_sided(before, after),
        only_after: one_sided(after, before),
        test,
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// Sample variance (n - 1); 0 for a single value.
fn variance(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = mean(values);
    values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64
}

/// Welch's t of `b` against `a` and its two-sided p-value. Both sides constant: no t, p 1 when
/// they are equal and 0 when not (no window varies, so any difference stands out). Fewer than
/// two windows on a side: no t, p 1 (nothing to say).
pub fn welch(a: &[f64], b: &[f64]) -> (Option<f64>, f64) {
    if a.len() < 2 || b.len() < 2 {
        return (None, 1.0);
    }
    let (va, vb) = (variance(a) / a.len() as f64, variance(b) / b.len() as f64);
    let delta = mean(b) - mean(a);
    let se2 = va + vb;
    if se2 <= 0.0 {
        return (None, if delta == 0.0 { 1.0 } else { 0.0 });
    }
    let t = delta / se2.sqrt();
    // Welch-Satterthwaite degrees of freedom.
    let df = se2 * se2 / (va * va / (a.len() - 1) as f64 + vb * vb / (b.len() - 1) as f64);
    (Some(t), student_t_two_sided(t, df))
}

/// The two-sided p-value of Student's t with `df` degrees of freedom:
/// `I_{df / (df + t^2)}(df / 2, 1 / 2)`.
pub fn student_t_two_sided(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return 0.0;
    }
    let x = df / (df + t * t);
    incomplete_beta(x, df / 2.0, 0.5).clamp(0.0, 1.0)
}

/// Holm's step-down adjustment of every change's p-value, in place.
fn holm(changes: &mut [Change]) {
    let m = changes.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| changes[i].p.total_cmp(&changes[j].p));
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        let adjusted = ((m - rank) as f64 * changes[i].p).min(1.0);
        running = running.max(adjusted);
        changes[i].p_adjusted = running;
    }
}

/// The regularized incomplete beta function `I_x(a, b)`, by its continued fraction (modified
/// Lentz), from the side where it converges fast.
fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(x, a, b) / a
    } else {
        1.0 - front * beta_fraction(1.0 - x, b, a) / b
    }
}

fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut c = 1.0;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let even = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        for step in [
            even,
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
        ] {
            d = 1.0 + step * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + step / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            h *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, nine terms: ~1e-15 relative).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = G[0];
    for (i, g) in G.iter().enumerate().skip(1) {
        sum += g / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reproducible stream of noise in [-1, 1).
    fn noise(seed: &mut u64) -> f64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed % 2_000_000) as f64 / 1_000_000.0 - 1.0
    }

    #[test]
    fn student_t_p_values_match_the_tables() {
        // Two-sided p of t with df degrees of freedom, from standard tables.
        for (t, df, p) in [
            (2.228, 10.0, 0.05),
            (3.169, 10.0, 0.01),
            (1.96, 1e6, 0.05),
            (2.576, 1e6, 0.01),
            (12.706, 1.0, 0.05),
            (0.0, 5.0, 1.0),
        ] {
            let got = student_t_two_sided(t, df);
            assert!((got - p).abs() < 5e-4, "t {t} df {df}: {got} vs {p}");
        }
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    }

    /// Rows `r0`..`r{rows}`, fields cpu_percent and ipc, `windows` noisy windows each around
    /// a row's own level; `change` multiplies one row's field.
    fn run(seed: u64, rows: usize, windows: usize, change: Option<(&str, &str, f64)>) -> Samples {
        let mut seed = seed;
        let mut samples = Samples::new();
        for r in 0..rows {
            let key = format!("r{r}");
            for (field, level, spread) in [(CPU_FIELD, 10.0 + r as f64, 1.0), ("ipc", 1.5, 0.05)] {
                let factor = match change {
                    Some((k, f, by)) if k == key && f == field => by,
                    _ => 1.0,
                };
                let values = (0..windows)
                    .map(|_| (level + spread * noise(&mut seed)) * factor)
                    .collect();
                samples
                    .entry(key.clone())
                    .or_default()
                    .insert(field.into(), values);
            }
        }
        samples
    }

    #[test]
    fn the_same_workload_twice_flags_nothing() {
        // Forty rows, two fields, sixty windows: 80 comparisons of two noisy runs alike.
        for seed in [1u64, 2, 3, 4, 5] {
            let before = run(seed * 7919, 40, 60, None);
            let after = run(seed * 104_729, 40, 60, None);
            let compared = diff(&before, &after, Test::DEFAULT);
            assert_eq!(compared.changes.len(), 80);
            let flagged: Vec<_> = compared.changes.iter().filter(|c| c.significant).collect();
            assert!(flagged.is_empty(), "seed {seed}: {flagged:?}");
        }
    }

    #[test]
    fn a_known_change_is_flagged_alone_and_first() {
        let before = run(11, 40, 60, None);
        let after = run(13, 40, 60, Some(("r7", CPU_FIELD, 2.0)));
        let compared = diff(&before, &after, Test::DEFAULT);
        let flagged: Vec<(&str, &str)> = compared
            .changes
            .iter()
            .filter(|c| c.significant)
            .map(|c| (c.key.as_str(), c.field.as_str()))
            .collect();
        assert_eq!(flagged, [("r7", CPU_FIELD)]);
        let first = &compared.changes[0];
        assert!((first.relative().unwrap() - 1.0).abs() < 0.05, "{first:?}");
        assert!(first.p_adjusted < 1e-6);
        // A 2 % drift in IPC with steady windows is real but under min_change: not flagged.
        let after = run(13, 40, 60, Some(("r3", "ipc", 1.02)));
        let compared = diff(&before, &after, Test::DEFAULT);
        assert!(compared.changes.iter().all(|c| !c.significant));
    }

    #[test]
    fn rows_on_one_side_are_listed_and_constant_fields_compare_exactly() {
        let mut before = Samples::new();
        let mut after = Samples::new();
        let cpu = |v: f64| BTreeMap::from([(CPU_FIELD.to_owned(), vec![v; 10])]);
        before.insert("gone".into(), cpu(30.0));
        before.insert("same".into(), cpu(5.0));
        after.insert("same".into(), cpu(5.0));
        after.insert("new".into(), cpu(12.0));
        let throttled = |v: f64| BTreeMap::from([("throttled_percent".to_owned(), vec![v; 10])]);
        before.insert("/batch".into(), throttled(0.0));
        after.insert("/batch".into(), throttled(40.0));
        let compared = diff(&before, &after, Test::DEFAULT);
        assert_eq!(
            compared.only_before,
            [OneSided {
                key: "gone".into(),
                cpu_percent: 30.0
            }]
        );
        assert_eq!(
            compared.only_after,
            [OneSided {
                key: "new".into(),
                cpu_percent: 12.0
            }]
        );
        let flagged: Vec<&str> = compared
            .changes
            .iter()
            .filter(|c| c.significant)
            .map(|c| c.key.as_str())
            .collect();
        assert_eq!(
            flagged,
            ["/batch"],
            "a throttle that appears in every window"
        );
        // Too few windows to say anything: never flagged.
        assert_eq!(welch(&[1.0], &[2.0, 3.0]), (None, 1.0));
    }
}
