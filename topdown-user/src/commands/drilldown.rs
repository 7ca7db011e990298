//! Live drilldown (`--td-level 3 --drilldown`): before the run, Level 2 is counted on every CPU
//! for [`PROBE`] (read from user space, as `--per-core` reads, no BPF), summed over the CPUs,
//! and the Level 2 nodes over their thresholds with Level 3 nodes under them
//! ([`crate::tma::Model::drill_targets`], per core type on hybrid parts) are the ones the run
//! measures Level 3 under. The choice is made
//! once, from the whole machine, at the start (toplev reruns the workload per level; re-planning
//! the counters per interval would need the collector to swap sets mid-run).

use std::time::Duration;
use topdown_common::reading::Reading;

use anyhow::{Result, bail};

use crate::{
    attrib::usage::CounterValue,
    collect::{self, perf_open::OpenCounters},
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// How long Level 2 is counted before the run.
pub const PROBE: Duration = Duration::from_secs(1);

/// The Level 2 nodes to drill into, from a [`PROBE`] of `set`, a Level 2 set, read through
/// `view` (one part per core type: each part's nodes over their thresholds count).
pub fn probe(set: &CounterSet, view: &TopdownView) -> Result<Vec<String>> {
    let cpus = collect::online_cpus()?;
    let counters = OpenCounters::open(set, &cpus)?;
    counters.enable()?;
    std::thread::sleep(PROBE);
    let summed = sum_over_cpus(&counters.read()?, set.counters.len());
    let mut targets: Vec<&'static str> = Vec::new();
    for (part, td) in view.parts.iter().zip(&view.of(set, &summed)) {
        let Some(td) = td else { continue };
        for node in part.model.drill_targets(td) {
            if !targets.contains(&node) {
                targets.push(node);
            }
        }
    }
    if targets.is_empty() {
        bail!(
            "--drilldown: no Level 2 node with Level 3 nodes under it was over its threshold in \
             the {} s probe: run --td-level 2, or name the nodes with --nodes",
            PROBE.as_secs()
        );
    }
    eprintln!("topdown-bpf: drilling down under {}", targets.join(", "));
    Ok(targets.into_iter().map(str::to_owned).collect())
}

/// Each counter's value, enabled and running times summed over the CPUs it was read on.
pub fn sum_over_cpus(readings: &[(u32, usize, Reading)], counters: usize) -> Vec<CounterValue> {
    let mut summed = vec![CounterValue::default(); counters];
    for &(_, index, reading) in readings {
        if let Some(value) = summed.get_mut(index) {
            *value = CounterValue::of(value.reading.plus(reading));
        }
    }
    summed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_sum_per_counter_over_cpus() {
        let readings = [
            (0, 0, [10, 100, 100]),
            (1, 0, [20, 100, 50]),
            (0, 1, [5, 100, 100]),
            (1, 7, [1, 1, 1]),
        ]
        .map(|(cpu, index, values)| (cpu, index, Reading::from_values(values)));
        let summed = sum_over_cpus(&readings, 2);
        assert_eq!(
            (
                summed[0].reading.count,
                summed[0].reading.enabled_ns,
                summed[0].reading.running_ns
            ),
            (30, 200, 150)
        );
        assert_eq!(summed[1].reading.count, 5);
        assert_eq!(summed.len(), 2, "an index past the set is ignored");
    }
}
