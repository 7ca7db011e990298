//! How rows are ordered: by any value column of the set ([`columns`]: on-CPU time, waits, IPC,
//! throttling, whatever is added there), a counter, a TopDown node, the verdict, an id or a
//! name. `--sort`, the full-screen view's sort cycle and its title all come from here, so a new
//! column sorts with no other change.

use std::{borrow::Cow, cmp::Ordering, str::FromStr};

use anyhow::{Result, bail};

use crate::{
    attrib::usage::CounterValue,
    model::{
        columns::{Column, Kind, Number, columns},
        rows::Row,
    },
    pmu::counter_set::CounterSet,
    tma::node::Node,
};

/// What to sort rows by: numbers largest first (rows without the value last), ids and names
/// smallest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// A value column by its key ([`columns`]: `on_cpu_ns`, `run_delay_ns`, `ipc`,
    /// `throttled_ns`, ...), else a counter of the set, else a TopDown node
    /// (`tma_backend_bound`), by name.
    Field(Cow<'static, str>),
    /// The verdict: throttled rows first, then those waiting for a CPU, then the rest, each by
    /// TopDown's bottleneck.
    Verdict,
    /// Thread id (a group's cgroup id).
    Tid,
    /// Process id.
    Pid,
    /// Thread (or group) name.
    Comm,
}

impl SortKey {
    /// On-CPU time (the default).
    pub const ON_CPU: Self = Self::Field(Cow::Borrowed("on_cpu_ns"));
    /// Switches out.
    pub const SWITCHES: Self = Self::Field(Cow::Borrowed("switches"));
    /// Time waiting in a run queue.
    pub const WAIT: Self = Self::Field(Cow::Borrowed("run_delay_ns"));

    /// Checks the key against `set`: a value column, a counter or a TopDown node; the error
    /// lists what this set sorts by.
    pub fn validate(&self, set: &CounterSet) -> Result<()> {
        let Self::Field(name) = self else {
            return Ok(());
        };
        let columns = columns(set);
        if columns.iter().any(|c| c.key == name)
            || set.names().any(|n| n == name)
            || Node::named(name).is_some()
        {
            return Ok(());
        }
        let keys: Vec<&str> = columns.iter().map(|c| c.key).collect();
        let counters: Vec<&str> = set.names().collect();
        let counters = if counters.is_empty() {
            "this set has none".to_owned()
        } else {
            counters.join(", ")
        };
        bail!(
            "unknown sort field `{name}`: use a column ({}), bottleneck, tid, pid, comm, a \
             TopDown node (tma_backend_bound, ...) or a counter ({counters})",
            keys.join(", ")
        );
    }
}

impl Default for SortKey {
    fn default() -> Self {
        Self::ON_CPU
    }
}

impl FromStr for SortKey {
    type Err = std::convert::Infallible;

    /// A column's key or a name; also the short names `--sort` has always taken (`oncpu`,
    /// `wait`, `bottleneck`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "oncpu" | "on-cpu" | "cpu" | "time" => Self::ON_CPU,
            "wait" | "run-delay" | "rundelay" => Self::WAIT,
            "verdict" | "bottleneck" => Self::Verdict,
            "tid" => Self::Tid,
            "pid" => Self::Pid,
            "comm" => Self::Comm,
            other => Self::Field(Cow::Owned(other.to_owned())),
        })
    }
}

/// One stop of the full-screen view's sort cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct SortChoice {
    /// What it sorts by.
    pub key: SortKey,
    /// How the view's title names it: the column's header, or the key's name.
    pub name: String,
    /// Only rows of groups have the value (skipped while the view shows threads).
    pub groups_only: bool,
}

/// The sort cycle for rows of `set` with TopDown `nodes`: every value column (but shares of the
/// window, which order as the time they share), the verdict, ids and name, then each node.
pub fn choices(set: &CounterSet, nodes: &[&'static str]) -> Vec<SortChoice> {
    let named = |key: SortKey, name: &str| SortChoice {
        key,
        name: name.to_owned(),
        groups_only: false,
    };
    columns(set)
        .into_iter()
        .filter(|c| c.kind != Kind::Percent)
        .map(|c| SortChoice {
            key: SortKey::Field(Cow::Borrowed(c.key)),
            name: c.header.to_owned(),
            groups_only: c.groups_only,
        })
        .chain([
            named(SortKey::Verdict, "bottleneck"),
            named(SortKey::Tid, "tid"),
            named(SortKey::Pid, "pid"),
            named(SortKey::Comm, "comm"),
        ])
        .chain(
            nodes
                .iter()
                .map(|n| named(SortKey::Field(Cow::Borrowed(n)), n)),
        )
        .collect()
}

/// A key resolved against a set once per sort.
enum By<'k> {
    Column(Column),
    Counter(usize),
    Node(&'k str),
    Verdict,
    Tid,
    Pid,
    Comm,
}

impl<'k> By<'k> {
    fn of(set: &CounterSet, key: &'k SortKey) -> Self {
        match key {
            SortKey::Field(name) => {
                if let Some(column) = columns(set).into_iter().find(|c| c.key == name) {
                    Self::Column(column)
                } else if let Some(slot) = set.names().position(|n| n == name) {
                    Self::Counter(slot)
                } else {
                    Self::Node(name)
                }
            }
            SortKey::Verdict => Self::Verdict,
            SortKey::Tid => Self::Tid,
            SortKey::Pid => Self::Pid,
            SortKey::Comm => Self::Comm,
        }
    }

    /// A number a row sorts by, largest first; `None` where it has none (sorted last).
    fn number(&self, row: &Row) -> Option<Number> {
        match self {
            Self::Column(column) => column.value(row),
            Self::Counter(slot) => row
                .counters
                .get(*slot)
                .and_then(CounterValue::scaled)
                .map(Number::Float),
            // The node's largest over the row's core types.
            Self::Node(name) => row
                .topdown
                .iter()
                .flatten()
                .filter_map(|td| td.value(name))
                .reduce(f64::max)
                .map(Number::Float),
            _ => None,
        }
    }

    /// `row`'s place in this order as one number, smaller first, as [`Self::compare`] orders
    /// rows; `None` for keys that are not one number (the verdict, the name).
    fn rank(&self, row: &Row) -> Option<i64> {
        Some(match self {
            // A cgroup id past i64 ranks as its largest; the id itself then orders it.
            Self::Tid => i64::try_from(row.who.id(false)).unwrap_or(i64::MAX),
            Self::Pid => i64::try_from(row.who.id(true)).unwrap_or(i64::MAX),
            Self::Verdict | Self::Comm => return None,
            Self::Column(_) | Self::Counter(_) | Self::Node(_) => match self.number(row) {
                None => i64::MAX,
                // Counts and nanoseconds past i64 (292 years of them) rank as its largest.
                Some(Number::Int(n)) => -i64::try_from(n).unwrap_or(i64::MAX),
                // `!` reverses the order without overflow.
                Some(Number::Float(x)) => !total_order(x),
            },
        })
    }

    fn compare(&self, a: &Row, b: &Row) -> Ordering {
        match self {
            Self::Verdict => a.verdict.cmp(&b.verdict).then_with(|| {
                let bottleneck = |r: &Row| r.topdown.iter().flatten().find_map(|td| td.bottleneck);
                bottleneck(a).cmp(&bottleneck(b))
            }),
            Self::Tid => a.who.id(false).cmp(&b.who.id(false)),
            Self::Pid => a.who.id(true).cmp(&b.who.id(true)),
            Self::Comm => a.who.name().cmp(b.who.name()),
            Self::Column(_) | Self::Counter(_) | Self::Node(_) => {
                match (self.number(a), self.number(b)) {
                    (Some(Number::Int(a)), Some(Number::Int(b))) => b.cmp(&a),
                    (Some(a), Some(b)) => b.as_f64().total_cmp(&a.as_f64()),
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (None, None) => Ordering::Equal,
                }
            }
        }
    }
}

/// Sorts `rows` by `key` (a column, a counter of `set`, or a node), then by id and name, as
/// [`order`] orders them. Where the key is a number, each row's place is computed once and the
/// places are sorted, then the rows moved once each: sorting the rows themselves moved each
/// several hundred bytes a row about `log2(n)` times and read two scattered rows at every
/// comparison (2.5 % of the tool's time writing `--json` for 20,000 busy threads, which come
/// out of the attributor in no tid order: BENCHMARKS.md, session 40).
pub fn sort(rows: &mut [Row], set: &CounterSet, key: &SortKey) {
    // Rows made in their order already (a window's threads by tid: `name_threads`) are
    // found so a pair at a time, neighbours in memory, with nothing keyed or moved.
    if rows.is_sorted_by(order_ok(set, key)) {
        return;
    }
    let mut from = places(rows, set, key);
    permute(rows, &mut from);
}

/// Whether `a` may come before `b` in [`order`].
fn order_ok<'a>(set: &CounterSet, key: &'a SortKey) -> impl Fn(&Row, &Row) -> bool + 'a {
    let order = order(set, key);
    move |a, b| order(a, b) != Ordering::Greater
}

/// The places of `rows` in [`order`] (the first is the place of the row that sorts first),
/// each row's place computed once where the key is a number (as [`sort_refs`] does); the rows
/// stay where they are.
pub fn places(rows: &[Row], set: &CounterSet, key: &SortKey) -> Vec<usize> {
    let by = By::of(set, key);
    let Some(mut keyed) = keyed(&by, rows.iter().enumerate()) else {
        let mut places: Vec<usize> = (0..rows.len()).collect();
        places.sort_by(|&a, &b| then_by_id(&by, &rows[a], &rows[b]));
        return places;
    };
    sort_keyed(&mut keyed, |&at| &rows[at]);
    keyed.into_iter().map(|(_, at)| at).collect()
}

/// Moves `rows` into their new order in place, `from[k]` the place of the row that goes to
/// place `k` (a permutation), a cycle at a time: the cycle's first row is held aside and each
/// row then moves once into the place the previous one left, so a row is copied once, not
/// three times as a swap copies it (a busy window's 20,000 rows are megabytes; the swaps were
/// a twentieth of its time), and no second copy of the rows is made. `from` is used up.
///
/// # Panics
///
/// When `from` is not a permutation of `rows`' places (checked before anything moves).
fn permute<T>(rows: &mut [T], from: &mut [usize]) {
    assert_eq!(rows.len(), from.len(), "a place for every row");
    let mut seen = vec![false; from.len()];
    for &at in from.iter() {
        assert!(
            at < seen.len() && !std::mem::replace(&mut seen[at], true),
            "each row's place once"
        );
    }
    let base = rows.as_mut_ptr();
    for start in 0..from.len() {
        // In place already, or moved with an earlier cycle.
        if from[start] == start {
            continue;
        }
        // SAFETY: `from` is a permutation of 0..len (checked above), so every index below is
        // in bounds, the cycle from `start` returns to `start`, and each place of it is
        // written exactly once after its row was read out: the row held aside is written back
        // into the cycle's last place, so no row is dropped twice or lost. Nothing in the loop
        // can panic, so no row is ever left in two places.
        unsafe {
            let held = std::ptr::read(base.add(start));
            let mut hole = start;
            loop {
                let source = *from.get_unchecked(hole);
                *from.get_unchecked_mut(hole) = hole;
                if source == start {
                    std::ptr::write(base.add(hole), held);
                    break;
                }
                std::ptr::copy_nonoverlapping(base.add(source), base.add(hole), 1);
                hole = source;
            }
        }
    }
}

/// Sorts `rows` in [`order`], each row's place computed once where the key is a number: the
/// sort then compares keys lying side by side, not rows scattered over memory (sorting 6,000
/// rows by reading them at every comparison was a tenth of a live read's time: BENCHMARKS.md).
pub fn sort_refs(rows: &mut Vec<&Row>, set: &CounterSet, key: &SortKey) {
    let by = By::of(set, key);
    let Some(mut keyed) = keyed(&by, rows.iter().map(|&row| (row, row))) else {
        rows.sort_by(|a, b| then_by_id(&by, a, b));
        return;
    };
    sort_keyed(&mut keyed, |&row| row);
    rows.clear();
    rows.extend(keyed.into_iter().map(|(_, row)| row));
}

/// Each row's place in `by`'s order as one number, beside what it goes with (the row, or its
/// index): the rank in the high half, the id (the first tie-breaker) in the low; the name
/// breaks what ties remain. `None` for a key that is not one number.
fn keyed<'r, T>(by: &By<'_>, rows: impl Iterator<Item = (T, &'r Row)>) -> Option<Vec<(u128, T)>> {
    // Made at its length: collected into an `Option`, the vector knew no length and grew by
    // doubling (fifteen reallocations a window at 20,000 rows, each a copy).
    let mut keyed = Vec::with_capacity(rows.size_hint().0);
    for (with, row) in rows {
        let rank = u128::from((by.rank(row)? as u64) ^ (1 << 63));
        keyed.push((rank << 64 | u128::from(row.who.id(false)), with));
    }
    Some(keyed)
}

/// Sorts [`keyed`] rows by their numbers, ties broken by the name of the row each goes with.
fn sort_keyed<'r, T>(keyed: &mut [(u128, T)], row: impl Fn(&T) -> &'r Row) {
    keyed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| row(&a.1).who.name().cmp(row(&b.1).who.name()))
    });
}

/// `x` as an integer ordered as [`f64::total_cmp`] orders floats (its own bit trick).
const fn total_order(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// The order [`sort`] sorts in.
pub fn order<'a>(set: &CounterSet, key: &'a SortKey) -> impl Fn(&Row, &Row) -> Ordering + 'a {
    let by = By::of(set, key);
    move |a: &Row, b: &Row| then_by_id(&by, a, b)
}

fn then_by_id(by: &By<'_>, a: &Row, b: &Row) -> Ordering {
    by.compare(a, b)
        .then_with(|| a.who.id(false).cmp(&b.who.id(false)))
        .then_with(|| a.who.name().cmp(b.who.name()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use topdown_common::cgroup::CgroupId;

    use super::*;
    use crate::{
        attrib::{Window, cgroups::CgroupNames, named::name, usage::ThreadUsage},
        model::rows::{RowOptions, rows},
        pmu::counter_set::Counter,
    };

    /// Every key's computed ranks sort rows exactly as the comparator does, ties (run time,
    /// switches, waits, process, tid) broken alike, whether the rows or references to them are
    /// sorted.
    #[test]
    fn sorting_by_computed_ranks_keeps_the_comparators_order() {
        let mut threads = (0..300u32)
            .map(|i| {
                let mut t = ThreadUsage::clocked(
                    1 + i % 150,
                    1 + i % 5,
                    CgroupId(1),
                    u64::from(i % 7) * 1_000,
                    u64::from(i % 3),
                );
                t.comm = ["b", "a", "c"][i as usize % 3].into();
                t.waited = Duration::from_nanos(u64::from(i % 4) * 10);
                t
            })
            .collect();
        let set = CounterSet::software(String::new());
        for waits_measured in [true, false] {
            let window = Window {
                length: Duration::from_secs(1),
                threads,
                waits_measured,
                ..Window::default()
            };
            let mut names = CgroupNames::at(None);
            let (mut all, _) = rows(
                &window,
                name(&window, &mut names, None),
                &set,
                &RowOptions::default(),
            );
            all.reverse();
            let keys = columns(&set).into_iter().map(|c| c.key);
            for key in ["oncpu", "wait", "tid", "pid", "comm", "verdict"]
                .into_iter()
                .chain(keys)
                .chain(["tma_backend_bound"])
            {
                let key: SortKey = key.parse().unwrap();
                let mut expected: Vec<&Row> = all.iter().collect();
                let by = order(&set, &key);
                expected.sort_by(|a, b| by(a, b));
                let mut sorted: Vec<&Row> = all.iter().collect();
                sort_refs(&mut sorted, &set, &key);
                assert!(
                    sorted
                        .iter()
                        .zip(&expected)
                        .all(|(a, b)| std::ptr::eq(*a, *b)),
                    "{key:?}, waits measured: {waits_measured}"
                );
                assert_eq!(sorted.len(), expected.len());
                // The rows themselves, moved into that order: the same rows, once each.
                let mut owned = all.clone();
                sort(&mut owned, &set, &key);
                let who = |r: &Row| (r.who.id(false), r.who.id(true), r.on_cpu, r.switches);
                assert!(
                    owned.iter().map(who).eq(expected.iter().map(|r| who(r))),
                    "{key:?}, waits measured: {waits_measured}"
                );
            }
            threads = window.threads;
        }
    }

    #[test]
    fn a_permutation_moves_every_row_to_its_place() {
        let mut rng = 0x5eed_u64;
        for n in [0, 1, 2, 7, 100] {
            let mut from: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                from.swap(i, (rng >> 33) as usize % (i + 1));
            }
            let rows: Vec<String> = (0..n).map(|i| format!("row {i}")).collect();
            let expected: Vec<String> = from.iter().map(|&at| rows[at].clone()).collect();
            let mut moved = rows.clone();
            permute(&mut moved, &mut from.clone());
            assert_eq!(moved, expected, "{n} rows");
        }
    }

    /// A list that is not a permutation is refused before a row moves (the move copies rows
    /// without dropping them: a place named twice would drop one row twice).
    #[test]
    fn a_place_named_twice_is_refused_before_a_row_moves() {
        for from in [vec![0, 0, 2], vec![0, 1, 3], vec![0, 1]] {
            let mut rows: Vec<String> = (0..3).map(|i| format!("row {i}")).collect();
            let moved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                permute(&mut rows, &mut from.clone());
            }));
            assert!(moved.is_err(), "{from:?}");
            assert_eq!(rows, ["row 0", "row 1", "row 2"], "{from:?}");
        }
    }

    #[test]
    fn total_order_ranks_floats_as_total_cmp_does() {
        let values = [
            f64::NEG_INFINITY,
            -2.5,
            -0.0,
            0.0,
            1e-300,
            3.0,
            f64::INFINITY,
            f64::NAN,
        ];
        for a in values {
            for b in values {
                assert_eq!(
                    total_order(a).cmp(&total_order(b)),
                    a.total_cmp(&b),
                    "{a} {b}"
                );
            }
        }
    }

    /// A set counting cycles and instructions, and threads 1-4 with IPC 0.5, 3, none (no
    /// cycle ran) and 1.
    fn counted() -> (CounterSet, Window) {
        let mut set = CounterSet::software(String::new());
        set.counters.extend([
            Counter::event("cycles", 0, 0),
            Counter::event("instructions", 0, 1),
        ]);
        let thread = |tid: u32, cycles: u64, instructions: u64| ThreadUsage {
            counters: vec![
                CounterValue::new(cycles, 1, 1),
                CounterValue::new(instructions, 1, 1),
            ],
            waited: Duration::from_nanos(u64::from(tid % 3) * 100),
            ..ThreadUsage::clocked(tid, 1, CgroupId(1), 1_000 * u64::from(tid), 1)
        };
        let window = Window {
            length: Duration::from_secs(1),
            threads: vec![
                thread(1, 100, 50),
                thread(2, 100, 300),
                thread(3, 0, 0),
                thread(4, 100, 100),
            ],
            waits_measured: true,
            ..Window::default()
        };
        (set, window)
    }

    /// `--sort ipc` with nothing written for IPC but its column: rows that counted none last.
    /// And every column of the set sorts by its key, largest first, rows without the value
    /// last, by both sorts.
    #[test]
    fn every_value_column_sorts_by_its_key() {
        let (set, window) = counted();
        let mut names = CgroupNames::at(None);
        let mut sorted = |key: &SortKey| {
            let options = RowOptions {
                sort: key.clone(),
                ..RowOptions::default()
            };
            rows(&window, name(&window, &mut names, None), &set, &options).0
        };
        let tids = |rows: &[&Row]| -> Vec<u32> {
            rows.iter().map(|r| r.who.thread().unwrap().tid.0).collect()
        };
        let ipc: SortKey = "ipc".parse().unwrap();
        ipc.validate(&set).unwrap();
        assert_eq!(tids(&sorted(&ipc).iter().collect::<Vec<_>>()), [2, 4, 1, 3]);
        let software = CounterSet::software(String::new());
        let error = ipc.validate(&software).unwrap_err().to_string();
        assert!(
            error.contains("run_delay_ns") && !error.contains("ipc,"),
            "{error}"
        );
        for column in columns(&set) {
            let key = SortKey::Field(column.key.into());
            key.validate(&set).unwrap();
            let rows = sorted(&key);
            let values: Vec<Option<f64>> = rows
                .iter()
                .map(|r| column.value(r).map(Number::as_f64))
                .collect();
            let mut expected = values.clone();
            expected.sort_by(|a, b| match (a, b) {
                (Some(a), Some(b)) => b.total_cmp(a),
                _ => b.is_some().cmp(&a.is_some()),
            });
            assert_eq!(values, expected, "{}", column.key);
            let mut refs: Vec<&Row> = rows.iter().rev().collect();
            sort_refs(&mut refs, &set, &key);
            assert!(
                refs.iter().zip(&rows).all(|(a, b)| std::ptr::eq(*a, b)),
                "{}",
                column.key
            );
        }
    }

    /// The view's sort cycle stops at every column but shares of the window, and every stop is
    /// a key `--sort` takes.
    #[test]
    fn the_sort_cycle_holds_every_column() {
        let (set, _) = counted();
        let stops = choices(&set, &["tma_retiring"]);
        for column in columns(&set) {
            let stop = stops
                .iter()
                .find(|c| c.key == SortKey::Field(column.key.into()));
            assert_eq!(
                stop.is_some(),
                column.kind != Kind::Percent,
                "{}",
                column.key
            );
            if let Some(stop) = stop {
                assert_eq!(stop.name, column.header);
                assert_eq!(stop.groups_only, column.groups_only);
            }
        }
        assert!(stops.iter().any(|c| c.name == "IPC"));
        for stop in &stops {
            stop.key.validate(&set).unwrap();
        }
    }
}
