//! What the generated formulas read and return.

use std::{
    cell::RefCell,
    collections::{BTreeSet, HashMap},
};

/// Counts by perf event name, and the literals perf resolves at run time (`#slots`, `#smt_on`).
pub trait Inputs {
    /// The count of event `name` (perf's spelling, e.g. `topdown-fe-bound`,
    /// `INT_MISC.UOP_DROPPING`, `cpu@INT_MISC.RECOVERY_CYCLES,cmask=1,edge@`).
    fn event(&self, name: &str) -> f64;
    /// The value of literal `name` (with its `#`).
    fn literal(&self, name: &str) -> f64;
}

/// A model's formula values (fractions of slots) and threshold verdicts, by perf metric name.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// `(metric name, value)` for every Level 1 and Level 2 node the model has.
    pub values: Vec<(&'static str, f64)>,
    /// `(metric name, over its MetricThreshold)` for nodes whose data gives a threshold.
    pub over_threshold: Vec<(&'static str, bool)>,
}

/// perf's `d_ratio`: a division that is 0 when the divisor is 0.
pub fn d_ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator == 0.0 {
        0.0
    } else {
        numerator / denominator
    }
}

/// perf's `max`, except that an unmeasured (NaN) input makes the result unmeasured too:
/// `f64::max` would quietly pick the other side and print a number nobody measured.
pub fn max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// perf's `min`, NaN-propagating like [`max`].
pub fn min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// perf's truth values: comparisons and logic yield 1 or 0.
pub fn truth(condition: bool) -> f64 {
    if condition { 1.0 } else { 0.0 }
}

/// Counts by formula name and the literals perf resolves at run time. An event it lacks reads
/// as NaN and is remembered, so every node that needs it comes out unmeasured, never guessed.
#[derive(Debug, Default)]
pub struct NamedCounts {
    counts: HashMap<String, f64>,
    literals: Literals,
    missing: RefCell<BTreeSet<String>>,
}

/// The literals perf's formulas take from the measured machine and the way it was counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Literals {
    /// `#slots`: the pipeline's width (issue slots per cycle).
    pub slots: u32,
    /// `#smt_on`: SMT siblings were active.
    pub smt_on: bool,
    /// `#core_wide` is perf's: the counts cover every thread of each core they count
    /// (system-wide, all CPUs, or SMT off); per-thread counts with SMT on are not, and perf's
    /// Haswell to Cascade Lake formulas then estimate the core's clocks (`#core_wide < 1`).
    pub core_wide: bool,
    /// `#has_pmem`: the measured machine has persistent memory, which some Level 3 memory
    /// nodes account apart (perf decides it from whether the machine's ACPI has an NFIT table:
    /// [`crate::pmu::machine::Machine::has_pmem`]).
    pub has_pmem: bool,
}

impl Literals {
    /// The literal `name` (with its `#`, as the generated formulas spell it); NaN for one
    /// the formulas do not take from the machine.
    pub fn get(&self, name: &str) -> f64 {
        match name {
            "#slots" => f64::from(self.slots),
            "#smt_on" => truth(self.smt_on),
            "#core_wide" => truth(self.core_wide),
            "#has_pmem" => truth(self.has_pmem),
            _ => f64::NAN,
        }
    }
}

/// A row's counts by formula name without a map of its own: the names bound to slots once
/// per counter set (`index`), the row's scaled values by slot (`None`: not counted). An event
/// the set lacks, or that did not count, reads as NaN.
pub struct SlotCounts<'a> {
    /// Formula name to slot.
    pub index: &'a HashMap<&'a str, usize>,
    /// Each slot's scaled count.
    pub values: &'a [Option<f64>],
    /// The machine's literals.
    pub literals: Literals,
}

impl SlotCounts<'_> {
    /// The count of event `name`, if the set has it and it counted.
    pub fn count(&self, name: &str) -> Option<f64> {
        self.index
            .get(name)
            .and_then(|&slot| self.values.get(slot).copied().flatten())
    }
}

impl Inputs for SlotCounts<'_> {
    fn event(&self, name: &str) -> f64 {
        self.count(name).unwrap_or(f64::NAN)
    }

    fn literal(&self, name: &str) -> f64 {
        self.literals.get(name)
    }
}

impl NamedCounts {
    /// Counts from `(formula name, value)` pairs, with the machine's `literals`. Reads
    /// nothing from the system: the literals say what was measured where.
    pub fn new(counts: impl IntoIterator<Item = (String, f64)>, literals: Literals) -> Self {
        Self {
            counts: counts.into_iter().collect(),
            literals,
            missing: RefCell::default(),
        }
    }

    /// The count of event `name`, if it is there.
    pub fn count(&self, name: &str) -> Option<f64> {
        self.counts.get(name).copied()
    }

    /// Events the formulas asked for that were not there.
    pub fn missing(&self) -> Vec<String> {
        self.missing.borrow().iter().cloned().collect()
    }
}

impl Inputs for NamedCounts {
    fn event(&self, name: &str) -> f64 {
        self.counts.get(name).copied().unwrap_or_else(|| {
            self.missing.borrow_mut().insert(name.to_owned());
            f64::NAN
        })
    }

    /// `name` in lower case, as the generated formulas spell every literal.
    fn literal(&self, name: &str) -> f64 {
        self.literals.get(name)
    }
}
