//! Which lines a c2c report shows, in which order, and the count their shares are of: computed
//! once per report, for every table, the JSON document and the browser.

use super::{
    lines::{C2cData, CacheLine, Contended},
    options::ReportOptions,
    sharing,
};

/// The ranked lines and the total of the display's count.
pub struct Ranking<'a> {
    /// The lines the reports show, in their order (their indexes): those with at least 0.1 % of
    /// the display's count (all with `--show-all`), most first (or, with `--by-gain`, the most
    /// worth fixing first).
    pub lines: Vec<&'a CacheLine>,
    /// The display's count over every line, shown or not (perf's `percent_costly_snoop`
    /// divides by it).
    pub total: u64,
}

/// Which lines a report shows, by their contended counts: every line with `--show-all`, else
/// those with at least 0.1 % of the display's count over all lines.
pub struct Shown {
    options: ReportOptions,
    total: u64,
}

impl Shown {
    /// For the lines whose contended counts are `lines`.
    pub fn new<'a>(lines: impl Iterator<Item = &'a Contended>, options: ReportOptions) -> Self {
        let total = lines.map(|c| options.display.line_metric(c)).sum();
        Self { options, total }
    }

    /// Whether a line with `contended` counts is shown.
    pub fn line(&self, contended: &Contended) -> bool {
        let metric = self.options.display.line_metric(contended);
        self.options.show_all || (self.total > 0 && metric as f64 / self.total as f64 >= 0.001)
    }
}

/// The lines of `data` as `options` rank them.
pub fn rank(data: &C2cData, options: ReportOptions) -> Ranking<'_> {
    let metric = |l: &CacheLine| options.display.line_metric(&l.contended);
    let shown = Shown::new(data.lines.iter().map(|(_, l)| &l.contended), options);
    let mut lines: Vec<_> = data
        .lines
        .iter()
        .filter(|(_, l)| shown.line(&l.contended))
        .collect();
    lines.sort_by(|(ka, a), (kb, b)| {
        metric(b)
            .cmp(&metric(a))
            .then(ka.perf_order().cmp(&kb.perf_order()))
    });
    let lines = if options.by_gain {
        // Stable: lines of equal gain keep perf's order.
        let mut by_gain: Vec<(f64, &CacheLine)> = lines
            .into_iter()
            .map(|(_, line)| (sharing::gain(data, line).estimate, line))
            .collect();
        by_gain.sort_by(|a, b| b.0.total_cmp(&a.0));
        by_gain.into_iter().map(|(_, line)| line).collect()
    } else {
        lines.into_iter().map(|(_, line)| line).collect()
    };
    Ranking {
        lines,
        total: shown.total,
    }
}
