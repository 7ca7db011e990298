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

/// A literal perf's formulas take from the measured machine ([`Literals`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Literal {
    /// `#slots`.
    Slots,
    /// `#smt_on`.
    SmtOn,
    /// `#core_wide`.
    CoreWide,
    /// `#has_pmem`.
    HasPmem,
}

impl Literal {
    /// The name the formulas write (with its `#`, in lower case).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Slots => "#slots",
            Self::SmtOn => "#smt_on",
            Self::CoreWide => "#core_wide",
            Self::HasPmem => "#has_pmem",
        }
    }
}

/// What the generated formulas read: the count of a model's event by its index in the model's
/// event list ([`crate::Model::events`]), and the machine's literals. A set bound once
/// ([`Model::evaluate_into`](crate::Model::evaluate_into)) reads a slot per index, with
/// no name looked up per row.
pub trait Counts {
    /// The count of the model's event `index`; NaN when it was not counted.
    fn event(&self, index: usize) -> f64;
    /// The value of `literal`.
    fn literal(&self, literal: Literal) -> f64;
}

/// [`Inputs`] read by index: a model's event list names each index.
pub struct ByName<'a> {
    /// The model's events, in the order its formulas index them.
    pub events: &'a [&'static str],
    /// Counts and literals by name.
    pub inputs: &'a dyn Inputs,
}

impl Counts for ByName<'_> {
    fn event(&self, index: usize) -> f64 {
        self.events
            .get(index)
            .map_or(f64::NAN, |name| self.inputs.event(name))
    }

    fn literal(&self, literal: Literal) -> f64 {
        self.inputs.literal(literal.name())
    }
}

/// A row's counts through a binding made once per counter set: the slot of each of the model's
/// events (`None`: the set does not count it), the row's scaled values by slot (`None`: did
/// not count).
pub struct BoundCounts<'a> {
    /// The slot of each of the model's events.
    pub slots: &'a [Option<usize>],
    /// Each slot's scaled count.
    pub values: &'a [Option<f64>],
    /// The machine's literals.
    pub literals: Literals,
}

impl Counts for BoundCounts<'_> {
    fn event(&self, index: usize) -> f64 {
        self.slots
            .get(index)
            .copied()
            .flatten()
            .and_then(|slot| self.values.get(slot).copied().flatten())
            .unwrap_or(f64::NAN)
    }

    fn literal(&self, literal: Literal) -> f64 {
        self.literals.value(literal)
    }
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
    /// `topdown-user`'s `Machine::has_pmem`).
    pub has_pmem: bool,
}

impl Literals {
    /// The literal `name` (with its `#`, as the generated formulas spell it); NaN for one
    /// the formulas do not take from the machine.
    pub fn get(&self, name: &str) -> f64 {
        [
            Literal::Slots,
            Literal::SmtOn,
            Literal::CoreWide,
            Literal::HasPmem,
        ]
        .into_iter()
        .find(|l| l.name() == name)
        .map_or(f64::NAN, |l| self.value(l))
    }

    /// The value of `literal`.
    pub fn value(&self, literal: Literal) -> f64 {
        match literal {
            Literal::Slots => f64::from(self.slots),
            Literal::SmtOn => truth(self.smt_on),
            Literal::CoreWide => truth(self.core_wide),
            Literal::HasPmem => truth(self.has_pmem),
        }
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
