//! Per-core usage: per-CPU counter readings summed over each physical core's CPUs, as deltas
//! between readings (`perf stat --per-core`). Used where inputs count per core (Skylake-class
//! TopDown with SMT on), so per-thread numbers would be wrong.

use std::collections::{BTreeMap, HashMap};
use topdown_common::reading::Reading;

use super::{silence::Silence, usage::CounterValue};
use crate::pmu::topology::CoreId;

/// One core's counters over a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreUsage {
    /// The core.
    pub core: CoreId,
    /// Its CPUs.
    pub cpus: Vec<u32>,
    /// One value per counter of the set, summed over the core's CPUs.
    pub counters: Vec<CounterValue>,
}

/// Turns cumulative per-CPU readings into per-core deltas.
#[derive(Debug)]
pub struct CoreAggregator {
    cores: BTreeMap<CoreId, Vec<u32>>,
    nr_counters: usize,
    last: HashMap<(u32, usize), Reading>,
    first: HashMap<(u32, usize), Reading>,
    silence: Silence,
}

impl CoreAggregator {
    /// Sums `nr_counters` counters over the CPUs of each of `cores`.
    pub fn new(cores: BTreeMap<CoreId, Vec<u32>>, nr_counters: usize) -> Self {
        Self {
            cores,
            nr_counters,
            last: HashMap::new(),
            first: HashMap::new(),
            silence: Silence::new(nr_counters),
        }
    }

    /// Marks the events in `slots` silent (see [`Silence`]): not counted until a core counts
    /// one.
    pub fn set_silent(&mut self, slots: &[usize]) {
        self.silence.set(slots);
    }

    /// Usage per core since the previous call (or since the first readings).
    pub fn window(&mut self, readings: &[(u32, usize, Reading)]) -> Vec<CoreUsage> {
        let now: HashMap<(u32, usize), Reading> =
            readings.iter().map(|&(cpu, i, v)| ((cpu, i), v)).collect();
        if self.first.is_empty() {
            self.first.clone_from(&now);
        }
        let mut usage = self.between(&self.last, &now);
        self.last = now;
        self.silence.judge(&mut counters_of(&mut usage));
        usage
    }

    /// Usage per core over everything read so far.
    pub fn totals(&self) -> Vec<CoreUsage> {
        let mut usage = self.between(&HashMap::new(), &self.last);
        self.silence.mark(&mut counters_of(&mut usage));
        usage
    }

    fn between(
        &self,
        before: &HashMap<(u32, usize), Reading>,
        now: &HashMap<(u32, usize), Reading>,
    ) -> Vec<CoreUsage> {
        self.cores
            .iter()
            .map(|(&core, cpus)| {
                let counters = (0..self.nr_counters)
                    .map(|i| {
                        cpus.iter().fold(CounterValue::default(), |sum, &cpu| {
                            let Some(now) = now.get(&(cpu, i)) else {
                                return sum;
                            };
                            let old = before.get(&(cpu, i)).copied().unwrap_or(Reading::ZERO);
                            CounterValue::of(sum.reading.plus(now.since(old)))
                        })
                    })
                    .collect();
                CoreUsage {
                    core,
                    cpus: cpus.clone(),
                    counters,
                }
            })
            .collect()
    }
}

fn counters_of(usage: &mut [CoreUsage]) -> Vec<&mut [CounterValue]> {
    usage
        .iter_mut()
        .map(|core| core.counters.as_mut_slice())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_are_summed_and_windows_are_deltas() {
        let core = |core| CoreId { package: 0, core };
        let cores = BTreeMap::from([(core(0), vec![0, 2]), (core(1), vec![1, 3])]);
        let mut aggregator = CoreAggregator::new(cores, 1);
        let read = |scale: u64| -> Vec<(u32, usize, Reading)> {
            (0..4)
                .map(|cpu| {
                    (
                        cpu,
                        0,
                        Reading::from_values([
                            scale * (u64::from(cpu) + 1),
                            scale * 10,
                            scale * 10,
                        ]),
                    )
                })
                .collect()
        };
        let first = aggregator.window(&read(1));
        assert_eq!(first[0].counters[0].reading.count, 1 + 3, "CPUs 0 and 2");
        assert_eq!(first[1].counters[0].reading.count, 2 + 4, "CPUs 1 and 3");
        let second = aggregator.window(&read(3));
        assert_eq!(second[0].counters[0].reading.count, 2 * (1 + 3));
        assert_eq!(second[0].counters[0].reading.enabled_ns, 2 * 20);
        assert_eq!(
            aggregator.totals()[1].counters[0].reading.count,
            3 * (2 + 4)
        );
    }
}
