//! Which lines a c2c report shows, in which order, and the count their shares are of: computed
//! once per report, for every table, the JSON document and the browser.

use super::{
    lines::{C2cData, CacheLine},
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

/// The lines of `data` as `options` rank them.
pub fn rank(data: &C2cData, options: ReportOptions) -> Ranking<'_> {
    let metric = |l: &CacheLine| options.display.line_metric(&l.contended);
    let total: u64 = data.lines.iter().map(|(_, l)| metric(l)).sum();
    let mut lines: Vec<_> = data
        .lines
        .iter()
        .filter(|(_, l)| {
            options.show_all || (total > 0 && metric(l) as f64 / total as f64 >= 0.001)
        })
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
    Ranking { lines, total }
}
