//! Per-cgroup metrics in the Prometheus / OpenMetrics text format: counters as monotonic totals
//! since the exporter started, TopDown nodes as gauges over the latest window, labels bounded
//! (removed cgroups dropped after a grace period, a cap on exported cgroups that is counted when
//! it bites).

use std::{
    collections::{HashMap, HashSet},
    sync::atomic::AtomicU64,
    time::{Duration, Instant},
};
use topdown_common::cgroup::CgroupId;

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};
use topdown_common::stats::Stat;

use crate::{
    attrib::{containers::Owner, neighbours::TOP_CULPRITS},
    c2c::forwarded::ForwardedSample,
    collect::c2c::C2cCounts,
    model::{
        columns::{self, Column, Kind, Number},
        frame::Frame,
        rows::Row,
        sink::WindowSink,
        suspects::{
            self, MAX_P, MIN_CORRELATION, MIN_CPI_VARIATION, MIN_WINDOWS, Suspect, Suspects,
            WINDOWS,
        },
    },
    pmu::counter_set::{CounterSet, Unit as CounterUnit},
    tma::view::TopdownView,
};

/// A label set: `[(name, value)]`.
type Labels = Vec<(String, String)>;
type FloatCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// How long a removed cgroup's series stay, and how many cgroups are exported at most.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Removed cgroups' series stay this long after the removal was seen.
    pub grace: Duration,
    /// At most this many cgroups have series.
    pub max_cgroups: usize,
}

/// One exported cgroup: the series of a cgroup path.
#[derive(Debug)]
struct Exported {
    /// The id of the cgroup now at the path (the newest, when one was created again there).
    id: CgroupId,
    labels: Labels,
    /// Label sets it has in the c2c family.
    c2c_labels: Vec<Labels>,
    /// The culprits it has a `behind` series of its own for (at most [`TOP_CULPRITS`], first
    /// come: any other is `behind="other"`).
    culprits: Vec<String>,
    /// Label sets it has in the suspects family (at most [`TOP_SUSPECTS`], the latest ranking).
    suspect_labels: Vec<Labels>,
    removed_at: Option<Instant>,
    /// Its per-column, per-event, per-culprit and per-node series, held with their label sets
    /// (which remove them): a window adds to them without hashing their labels again.
    held: Held,
}

/// A cgroup's series held once made (a metric shares its value with its family's, so adding to
/// it is adding to the series): each window's update of a cgroup adds to these, where finding
/// each series in its family by its label set (hashing and comparing ~200 bytes of labels per
/// series per window) cost a fifth of `serve` at 20,000 cgroups. They go with the cgroup.
#[derive(Debug, Default)]
struct Held {
    /// By value column, in the exporter's order.
    values: Vec<Option<ValueSeries>>,
    /// By counter of the set.
    events: Vec<Option<(Labels, FloatCounter)>>,
    /// By culprit (`other`, `idle` and `unattributed` among them).
    behind: Vec<(String, Labels, FloatCounter)>,
    /// By part of the view and node.
    nodes: Vec<((usize, &'static str), Labels, FloatGauge)>,
}

/// One value column's series of one cgroup.
#[derive(Debug)]
enum ValueSeries {
    Seconds(FloatCounter),
    Count(Counter),
    Latest(FloatGauge),
}

impl ValueSeries {
    /// Adds a window's `value` (sets it, for the latest value).
    fn add(&self, value: Number) {
        match self {
            Self::Seconds(counter) => {
                counter.inc_by(value.as_f64() / 1e9);
            }
            Self::Count(counter) => {
                let count = match value {
                    Number::Int(n) => n,
                    Number::Float(x) => x as u64,
                };
                counter.inc_by(count);
            }
            Self::Latest(gauge) => {
                gauge.set(value.as_f64());
            }
        }
    }
}

/// The suspects each cgroup has series for, the most correlated first: a host of 500 cgroups
/// has at most 1,500 `topdown_cgroup_suspect_correlation` series.
pub const TOP_SUSPECTS: usize = 3;

/// The family of a value column ([`columns::Metric`]).
enum ValueFamily {
    /// A total of nanoseconds, in seconds.
    Seconds(Family<Labels, FloatCounter>),
    /// A total of a count.
    Count(Family<Labels, Counter>),
    /// The latest window's value.
    Latest(Family<Labels, FloatGauge>),
}

impl ValueFamily {
    /// The series `labels`, made where it is not yet.
    fn series(&self, labels: &Labels) -> ValueSeries {
        match self {
            Self::Seconds(family) => ValueSeries::Seconds(family.get_or_create_owned(labels)),
            Self::Count(family) => ValueSeries::Count(family.get_or_create_owned(labels)),
            Self::Latest(family) => ValueSeries::Latest(family.get_or_create_owned(labels)),
        }
    }

    /// Drops the series `labels`.
    fn remove(&self, labels: &Labels) {
        match self {
            Self::Seconds(family) => family.remove(labels),
            Self::Count(family) => family.remove(labels),
            Self::Latest(family) => family.remove(labels),
        };
    }
}

/// The metric families and what has been exported into them.
pub struct Exporter {
    registry: Registry,
    /// The value columns that have a family ([`Column::metric`]), with it.
    values: Vec<(Column, ValueFamily)>,
    events: Family<Labels, FloatCounter>,
    cycles: Family<Labels, FloatCounter>,
    event_seconds: Family<Labels, FloatCounter>,
    tma: Family<Labels, FloatGauge>,
    not_counting: Family<Labels, Gauge>,
    losses: Family<Labels, Counter>,
    c2c: Family<Labels, Counter>,
    wait_behind: Family<Labels, FloatCounter>,
    suspect_correlation: Family<Labels, FloatGauge>,
    /// The IPC column of the set, where it has one: what suspects are found from.
    ipc: Vec<Column>,
    /// The latest windows' cgroups by path, for suspects.
    suspects: Suspects,
    c2c_classified: Counter,
    refused: Counter,
    connections_refused: Counter,
    exported_gauge: Gauge,
    set: CounterSet,
    view: Option<TopdownView>,
    limits: Limits,
    /// Exported cgroups by path: a series is a path's, as its labels are.
    exported: HashMap<String, Exported>,
    /// Paths refused because of the cap (each counted once).
    refused_paths: HashSet<String>,
    /// Removed cgroups whose series were dropped: a late charge of theirs adds nothing.
    dropped: HashSet<CgroupId>,
}

impl Exporter {
    /// Families for `set` (and TopDown nodes when `view` is given).
    pub fn new(set: &CounterSet, view: Option<TopdownView>, limits: Limits) -> Self {
        let mut registry = Registry::default();
        let info: Family<Labels, Gauge> = Family::default();
        info.get_or_create(&vec![
            ("counter_set".into(), set.name.into()),
            ("reason".into(), set.reason.clone()),
        ])
        .set(1);
        registry.register(
            "topdown_info",
            "The counter set topdown-bpf runs and why (no hardware PMU: software counters only)",
            info,
        );
        let values = columns::columns(set)
            .into_iter()
            .filter_map(|column| {
                let metric = column.metric?;
                let family = match (metric.total, column.kind) {
                    (true, Kind::Nanoseconds) => ValueFamily::Seconds(Family::default()),
                    (true, _) => ValueFamily::Count(Family::default()),
                    (false, _) => ValueFamily::Latest(Family::default()),
                };
                Some((column, family))
            })
            .collect();
        let exporter = Self {
            values,
            events: Family::default(),
            cycles: Family::default(),
            event_seconds: Family::default(),
            tma: Family::default(),
            not_counting: Family::default(),
            losses: Family::default(),
            c2c: Family::default(),
            wait_behind: Family::default(),
            suspect_correlation: Family::default(),
            ipc: columns::columns(set)
                .into_iter()
                .filter(|c| c.key == "ipc")
                .collect(),
            suspects: Suspects::default(),
            c2c_classified: Counter::default(),
            refused: Counter::default(),
            connections_refused: Counter::default(),
            exported_gauge: Gauge::default(),
            registry,
            set: set.clone(),
            view,
            limits,
            exported: HashMap::new(),
            refused_paths: HashSet::new(),
            dropped: HashSet::new(),
        };
        exporter.register()
    }

    /// The count of scrape connections closed at once because too many were open (the HTTP
    /// side adds to it; it is in every exposition).
    pub fn connections_refused(&self) -> Counter {
        self.connections_refused.clone()
    }

    fn register(mut self) -> Self {
        let r = &mut self.registry;
        r.register(
            "topdown_scrape_connections_refused",
            "Scrape connections closed at once because --max-connections were already open",
            self.connections_refused.clone(),
        );
        for (column, family) in &self.values {
            let Some(metric) = column.metric else {
                continue;
            };
            match family {
                ValueFamily::Seconds(family) => {
                    r.register_with_unit(metric.name, metric.help, Unit::Seconds, family.clone());
                }
                ValueFamily::Count(family) => r.register(metric.name, metric.help, family.clone()),
                ValueFamily::Latest(family) => r.register(metric.name, metric.help, family.clone()),
            }
        }
        r.register_with_unit(
            "topdown_cgroup_wait_behind",
            "Time the cgroup's threads waited in a run queue, by whose threads held the CPU \
             meanwhile (behind: a cgroup path; at most 3 per cgroup, first come, then \
             \"other\"; \"idle\": the CPU was idle or waking; \"unattributed\": before the \
             CPU's remembered slices, or on a CPU left at a migration). The series of a cgroup \
             add up to its topdown_cgroup_run_delay_seconds_total",
            Unit::Seconds,
            self.wait_behind.clone(),
        );
        r.register(
            "topdown_cgroup_suspect_correlation",
            format!(
                "Suspects of slowing the cgroup down: Pearson's r of its cycles per instruction \
                 with the suspect cgroup's CPU use over the latest {WINDOWS} windows (at least \
                 {MIN_WINDOWS} with its IPC measured, a coefficient of variation of its CPI of \
                 at least {MIN_CPI_VARIATION}, r >= {MIN_CORRELATION}, p times the cgroups \
                 tried < {MAX_P:e}; at most {TOP_SUSPECTS} suspects per cgroup, the most \
                 correlated; a correlation, not a verdict). Only where IPC is measured"
            ),
            self.suspect_correlation.clone(),
        );
        r.register(
            "topdown_cgroup_events",
            "Events counted while the cgroup's threads ran, per counter of the set (scaled when \
             multiplexed)",
            self.events.clone(),
        );
        r.register(
            "topdown_cgroup_cycles",
            "Cycles counted while the cgroup's threads ran, per counter of the set",
            self.cycles.clone(),
        );
        r.register_with_unit(
            "topdown_cgroup_event",
            "Time-valued counters of the set while the cgroup's threads ran",
            Unit::Seconds,
            self.event_seconds.clone(),
        );
        r.register(
            "topdown_cgroup_tma_ratio",
            "TopDown (TMA) node as a fraction of pipeline slots over the latest window; only \
             measured nodes, never with software counters",
            self.tma.clone(),
        );
        r.register(
            "topdown_event_not_counting",
            "1 while this PMU does not count the event (it read 0 while others counted: a \
             virtual machine's or an emulator's PMU): its series and the TopDown nodes built on \
             it are left out; 0 once it counted",
            self.not_counting.clone(),
        );
        r.register(
            "topdown_kernel_losses",
            "Data the kernel side could not charge or send, by cause",
            self.losses.clone(),
        );
        r.register(
            "topdown_cgroup_c2c_samples",
            "Memory samples the c2c filter forwarded, by cgroup and class: lcl_hitm and rmt_hitm \
             loads (a line modified in another core's cache), peer loads, stores (with --c2c)",
            self.c2c.clone(),
        );
        r.register(
            "topdown_c2c_classified",
            "Memory samples the c2c filter classified in the kernel, forwarded or not",
            self.c2c_classified.clone(),
        );
        r.register(
            "topdown_cgroups_refused",
            "cgroups not exported because --max-series was reached",
            self.refused.clone(),
        );
        r.register(
            "topdown_cgroups_exported",
            "cgroups with series now",
            self.exported_gauge.clone(),
        );
        self
    }

    /// Takes one window's frame at `now`: its cgroups (each for itself: deltas since the
    /// previous window), the kernel side's counts so far, and the cgroups removed since the
    /// previous window, whose series go once the grace period is over.
    pub fn update(&mut self, frame: &Frame<'_>, now: Instant) {
        let window = frame.window();
        for row in frame.cgroups() {
            let Some(group) = row.who.group() else {
                continue;
            };
            if self.export(group.id, &group.path) {
                self.charge(&group.path, row);
            }
        }
        self.suspect(frame);
        for (i, counter) in self.set.counters.iter().enumerate() {
            let silent = frame
                .cgroups()
                .iter()
                .any(|row| row.counters.get(i).is_some_and(|value| value.silent));
            let labels = vec![("event".into(), counter.name.clone())];
            // Said for every event that was ever silent, once it counts too (0).
            if silent || self.not_counting.get(&labels).is_some() {
                self.not_counting
                    .get_or_create(&labels)
                    .set(i64::from(silent));
            }
        }
        for stat in Stat::ALL.into_iter().filter(|s| s.is_loss()) {
            let counter = self
                .losses
                .get_or_create_owned(&vec![("cause".into(), stat.name().replace(' ', "_"))]);
            let total = window.stats.get(stat);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        for id in &window.removed_cgroups {
            let path = frame.names().name(*id);
            // Only the cgroup now at the path: one created again there keeps the series.
            if let Some(entry) = self.exported.get_mut(&*path)
                && entry.id == *id
            {
                entry.removed_at.get_or_insert(now);
            }
        }
        self.drop_removed(now);
    }

    /// Adds the window's cgroups to the windows suspects are found from, and gives each
    /// exported cgroup the series of its latest suspects (and none of those it no longer has).
    fn suspect(&mut self, frame: &Frame<'_>) {
        if self.ipc.is_empty() {
            return;
        }
        let cgroups = frame
            .cgroups()
            .iter()
            .filter(|row| row.who.group().is_some());
        self.suspects
            .push(suspects::samples(cgroups, &self.ipc, |row| {
                row.who.group().map(|g| g.path.clone()).unwrap_or_default()
            }));
        let ranked: HashMap<String, Vec<Suspect>> = self
            .suspects
            .rank()
            .into_iter()
            .map(|victim| (victim.name, victim.suspects))
            .collect();
        for (path, entry) in &mut self.exported {
            let mut now: Vec<Labels> = Vec::new();
            for suspect in ranked.get(path).into_iter().flatten().take(TOP_SUSPECTS) {
                let mut labels = entry.labels.clone();
                labels.push(("suspect".into(), suspect.name.clone()));
                self.suspect_correlation
                    .get_or_create(&labels)
                    .set(suspect.correlation);
                now.push(labels);
            }
            for gone in entry.suspect_labels.iter().filter(|l| !now.contains(l)) {
                self.suspect_correlation.remove(gone);
            }
            entry.suspect_labels = now;
        }
    }

    /// Makes sure cgroup `id` at `path` has series, unless it was dropped or the cap bites
    /// (counted once per path); whether it has them. A newer id at an exported path is the
    /// cgroup created again there: the series go on, no longer removed.
    fn export(&mut self, id: CgroupId, path: &str) -> bool {
        if self.dropped.contains(&id) {
            return false;
        }
        if let Some(entry) = self.exported.get_mut(path) {
            if id > entry.id {
                entry.id = id;
                entry.removed_at = None;
            }
            return true;
        }
        if self.exported.len() >= self.limits.max_cgroups {
            if self.refused_paths.insert(path.to_owned()) {
                self.refused.inc();
            }
            return false;
        }
        self.exported.insert(
            path.to_owned(),
            Exported {
                id,
                labels: labels_of(path),
                c2c_labels: Vec::new(),
                culprits: Vec::new(),
                suspect_labels: Vec::new(),
                removed_at: None,
                held: Held::default(),
            },
        );
        true
    }

    /// Takes the samples the c2c filter forwarded since the previous call (classified and
    /// named: [`crate::c2c::forwarded::classify`]), and its counts.
    pub fn update_c2c(&mut self, samples: &[ForwardedSample], counts: &C2cCounts) {
        for sample in samples {
            if !self.export(CgroupId(sample.cgroup_id), &sample.path) {
                continue;
            }
            let Some(entry) = self.exported.get_mut(&sample.path) else {
                continue;
            };
            let mut labels = entry.labels.clone();
            labels.push(("class".into(), sample.class.name().into()));
            self.c2c.get_or_create(&labels).inc();
            if !entry.c2c_labels.contains(&labels) {
                entry.c2c_labels.push(labels);
            }
        }
        let total = counts.stats.nr_entries;
        self.c2c_classified
            .inc_by(total.saturating_sub(self.c2c_classified.get()));
        for (cause, value) in [
            ("c2c_ring_full", counts.ring_full),
            ("c2c_unreadable_samples", counts.read_errors),
        ] {
            let counter = self
                .losses
                .get_or_create_owned(&vec![("cause".into(), cause.into())]);
            counter.inc_by(value.saturating_sub(counter.get()));
        }
    }

    /// Adds a window's row to the series of `path`.
    fn charge(&mut self, path: &str, row: &Row) {
        let Some(entry) = self.exported.get_mut(path) else {
            return;
        };
        let (labels, held) = (&entry.labels, &mut entry.held);
        held.values.resize_with(self.values.len(), || None);
        for ((column, family), series) in self.values.iter().zip(&mut held.values) {
            // A value not measured (IPC where cycles did not run) leaves the series as it was.
            if let Some(value) = column.value(row) {
                series
                    .get_or_insert_with(|| family.series(labels))
                    .add(value);
            }
        }
        held.events.resize_with(self.set.counters.len(), || None);
        let counters = self.set.counters.iter().zip(row.counters.iter());
        for ((counter, value), series) in counters.zip(&mut held.events) {
            // An event this PMU does not count has no series: its zeros are no counts.
            if value.silent {
                continue;
            }
            let (_, series) = series.get_or_insert_with(|| {
                let mut event = labels.clone();
                event.push(("event".into(), counter.name.clone()));
                let family = match counter.unit {
                    CounterUnit::Events => &self.events,
                    CounterUnit::Cycles => &self.cycles,
                    CounterUnit::Nanoseconds => &self.event_seconds,
                };
                let series = family.get_or_create_owned(&event);
                (event, series)
            });
            // A counter that did not run adds nothing: the series stays where it was.
            let scaled = value.scaled().unwrap_or(0.0);
            match counter.unit {
                CounterUnit::Nanoseconds => series.inc_by(scaled / 1e9),
                CounterUnit::Events | CounterUnit::Cycles => series.inc_by(scaled),
            };
        }
        if let Some(behind) = &row.behind {
            let mut parts: Vec<(&str, u64)> = Vec::with_capacity(TOP_CULPRITS + 3);
            for (culprit, ns) in &behind.top {
                let named = if entry.culprits.iter().any(|c| **c == **culprit) {
                    true
                } else if entry.culprits.len() < TOP_CULPRITS {
                    entry.culprits.push(culprit.to_string());
                    true
                } else {
                    false
                };
                parts.push((if named { culprit } else { "other" }, *ns));
            }
            parts.push(("other", behind.other_ns));
            parts.push(("idle", behind.idle_ns));
            parts.push(("unattributed", behind.unattributed_ns));
            for (culprit, ns) in parts.into_iter().filter(|&(_, ns)| ns > 0) {
                let at = match held.behind.iter().position(|(c, ..)| c == culprit) {
                    Some(at) => at,
                    None => {
                        let mut behind_labels = labels.clone();
                        behind_labels.push(("behind".into(), culprit.to_owned()));
                        let series = self.wait_behind.get_or_create_owned(&behind_labels);
                        held.behind
                            .push((culprit.to_owned(), behind_labels, series));
                        held.behind.len() - 1
                    }
                };
                held.behind[at].2.inc_by(ns as f64 / 1e9);
            }
        }
        if let Some(view) = &self.view {
            for (at, (part, td)) in view.parts.iter().zip(&row.topdown).enumerate() {
                for node in td.iter().flat_map(|td| &td.nodes) {
                    let key = (at, node.node.name);
                    let at = match held.nodes.iter().position(|(k, ..)| *k == key) {
                        Some(at) => at,
                        None => {
                            let mut node_labels = labels.clone();
                            node_labels.push(("node".into(), node.node.name.to_owned()));
                            if !part.prefix.is_empty() {
                                let pmu = part.prefix.trim_end_matches('/');
                                node_labels.push(("pmu".into(), pmu.into()));
                            }
                            let series = self.tma.get_or_create_owned(&node_labels);
                            held.nodes.push((key, node_labels, series));
                            held.nodes.len() - 1
                        }
                    };
                    held.nodes[at].2.set(node.value);
                }
            }
        }
    }

    /// Drops the series of cgroups removed for longer than the grace period.
    fn drop_removed(&mut self, now: Instant) {
        let dropped: Vec<String> = self
            .exported
            .iter()
            .filter(|(_, entry)| {
                entry
                    .removed_at
                    .is_some_and(|at| now.duration_since(at) >= self.limits.grace)
            })
            .map(|(path, _)| path.clone())
            .collect();
        for path in &dropped {
            if let Some(entry) = self.exported.remove(path) {
                for (_, family) in &self.values {
                    family.remove(&entry.labels);
                }
                for (labels, _) in entry.held.events.iter().flatten() {
                    self.events.remove(labels);
                    self.cycles.remove(labels);
                    self.event_seconds.remove(labels);
                }
                for (_, labels, _) in &entry.held.nodes {
                    self.tma.remove(labels);
                }
                for labels in &entry.c2c_labels {
                    self.c2c.remove(labels);
                }
                for (_, labels, _) in &entry.held.behind {
                    self.wait_behind.remove(labels);
                }
                for labels in &entry.suspect_labels {
                    self.suspect_correlation.remove(labels);
                }
                self.dropped.insert(entry.id);
            }
        }
        self.exported_gauge.set(self.exported.len() as i64);
    }

    /// The exposition, in the OpenMetrics text format (ends with `# EOF`).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// The exporter takes each window as it comes; it writes nothing at the end (the series are
/// served until then).
impl WindowSink for Exporter {
    fn window(&mut self, frame: &Frame<'_>) -> anyhow::Result<()> {
        self.update(frame, Instant::now());
        Ok(())
    }

    fn finish(self: Box<Self>, _totals: &Frame<'_>) -> anyhow::Result<Option<String>> {
        Ok(None)
    }
}

/// The classic Prometheus text format (0.0.4) of an OpenMetrics exposition, for scrapers and
/// tools (`promtool check metrics`) that do not speak OpenMetrics: counter families are named
/// by their `_total` samples, and there are no `# UNIT` and `# EOF` lines.
pub fn classic_text(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// `cgroup`, and where the path says so `container`, `runtime`, `pod_uid` and `qos`.
fn labels_of(path: &str) -> Labels {
    let owner = Owner::of(path);
    let mut labels = vec![("cgroup".to_owned(), path.to_owned())];
    if let Some(key) = owner.key() {
        labels.push(("container".into(), key));
    }
    if let Owner::Container { runtime, .. } = &owner {
        labels.push(("runtime".into(), (*runtime).into()));
    }
    if let Some(pod) = owner.pod() {
        labels.push(("pod_uid".into(), pod.uid.clone()));
        labels.push(("qos".into(), pod.qos.name().into()));
    }
    labels
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::MetadataExt as _};

    use super::*;
    use topdown_common::{
        c2c::C2cRecord,
        data_src::{self, DataSrc},
        neighbours::WaitRest,
    };

    use crate::{
        attrib::{
            Window,
            cgroups::CgroupNames,
            neighbours::{Behind, BehindParts},
            usage::{CgroupUsage, CounterValue},
        },
        c2c::forwarded::classify,
        pmu::counter_set::{Counter, EventAttr},
    };

    /// A window's usage of one cgroup: `ns` on CPU, `tsc` TSC cycles.
    fn usage(id: u64, ns: u64, tsc: u64) -> CgroupUsage {
        let value = |raw| CounterValue::new(raw, ns, ns);
        CgroupUsage {
            id: CgroupId(id),
            switches: 2,
            on_cpu: Duration::from_nanos(ns),
            waited: std::time::Duration::ZERO,
            behind: Default::default(),
            counters: vec![value(tsc)],
        }
    }

    fn window(cgroups: Vec<CgroupUsage>) -> Window {
        Window {
            length: Duration::from_secs(1),
            threads: vec![],
            cgroups,
            ..Window::default()
        }
    }

    /// Cgroup directories `leaves` in a temporary mount, their ids, and its names.
    fn cgroups<const N: usize>(
        leaves: [&str; N],
    ) -> (tempfile::TempDir, [CgroupId; N], CgroupNames) {
        let dir = tempfile::tempdir().unwrap();
        let ids = leaves.map(|leaf| {
            fs::create_dir(dir.path().join(leaf)).unwrap();
            CgroupId(fs::metadata(dir.path().join(leaf)).unwrap().ino())
        });
        let names = CgroupNames::at(Some(dir.path().to_path_buf()));
        (dir, ids, names)
    }

    /// Limits that never bite in a test of a few cgroups.
    const ROOMY: Limits = Limits {
        grace: Duration::from_secs(10),
        max_cgroups: 10,
    };

    /// The window's frame, as the session builds it, to the exporter now.
    fn update(exporter: &mut Exporter, window: &Window, names: &mut CgroupNames, set: &CounterSet) {
        exporter.update(&Frame::new(window, names, set, None), Instant::now());
    }

    fn line<'a>(text: &'a str, start: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(start))
    }

    /// The software set with cycles and instructions (generic events) added: IPC measured.
    fn cycles_and_instructions() -> CounterSet {
        let generic = |name: &str, config: u64| Counter {
            name: name.into(),
            unit: CounterUnit::Events,
            attr: EventAttr {
                pmu_type: 0,
                config,
                ..EventAttr::default()
            },
            cpus: None,
        };
        let mut set = CounterSet::software("test".into());
        set.counters
            .extend([generic("cycles", 0), generic("instructions", 1)]);
        set
    }

    /// With cycles and instructions in the set, each cgroup has an IPC gauge over the latest
    /// window in which both counted; without them, the family has no series.
    #[test]
    fn ipc_is_a_gauge_per_cgroup_where_the_set_counts_both() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("a")).unwrap();
        let a = fs::metadata(dir.path().join("a")).unwrap().ino();
        let mut names = CgroupNames::at(Some(dir.path().to_path_buf()));
        let limits = Limits {
            grace: Duration::from_secs(10),
            max_cgroups: 10,
        };
        let set = cycles_and_instructions();
        let counted = |raw| CounterValue::new(raw, 10, 10);
        let usage = CgroupUsage {
            id: CgroupId(a),
            switches: 1,
            on_cpu: Duration::from_nanos(10),
            waited: std::time::Duration::ZERO,
            behind: Default::default(),
            counters: vec![counted(4_000), counted(6_000)],
        };
        let mut exporter = Exporter::new(&set, None, limits);
        update(
            &mut exporter,
            &window(vec![usage.clone()]),
            &mut names,
            &set,
        );
        let text = exporter.encode();
        assert_eq!(
            line(&text, "topdown_cgroup_ipc{"),
            Some("topdown_cgroup_ipc{cgroup=\"/a\"} 1.5"),
            "{text}"
        );

        let software = CounterSet::software("test".into());
        let mut exporter = Exporter::new(&software, None, limits);
        let plain = CgroupUsage {
            counters: vec![counted(10)],
            ..usage
        };
        update(&mut exporter, &window(vec![plain]), &mut names, &software);
        assert_eq!(line(&exporter.encode(), "topdown_cgroup_ipc{"), None);
    }

    /// A cgroup whose CPI rises with another's CPU use has that one as a suspect, with its
    /// correlation, and no series for a bystander whose CPU use moves on its own; once its CPI
    /// stops moving with the suspect (the latest windows are steady), the series goes.
    #[test]
    fn a_planted_antagonist_is_a_suspect_series_until_the_victim_is_steady() {
        let (_dir, [a, b, c], mut names) = cgroups(["a", "b", "c"]);
        let set = cycles_and_instructions();
        // Deterministic noise in [0, 1).
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut noise = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        // `cpus` of a second on CPU, at `cpi` cycles per instruction.
        let usage = |id: CgroupId, cpus: f64, cpi: f64| {
            let ns = (cpus * 1e9) as u64;
            let cycles = ns;
            let counted = |raw| CounterValue::new(raw, ns, ns);
            CgroupUsage {
                id,
                switches: 10,
                on_cpu: Duration::from_nanos(ns),
                waited: Duration::ZERO,
                behind: Default::default(),
                counters: vec![counted(cycles), counted((cycles as f64 / cpi) as u64)],
            }
        };
        let mut exporter = Exporter::new(&set, None, ROOMY);
        for _ in 0..suspects::WINDOWS {
            let antagonist = 0.2 + 0.7 * noise();
            let bystander = 0.2 + 0.7 * noise();
            let victim_cpi = 1.0 + antagonist + 0.05 * noise();
            let cgroups = vec![
                usage(a, 0.5, victim_cpi),
                usage(b, antagonist, 1.0),
                usage(c, bystander, 1.0),
            ];
            update(&mut exporter, &window(cgroups), &mut names, &set);
        }
        let text = exporter.encode();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("topdown_cgroup_suspect_correlation{"))
            .collect();
        assert_eq!(series.len(), 1, "{text}");
        assert!(
            text.contains("# HELP topdown_cgroup_suspect_correlation Suspects of slowing"),
            "{text}"
        );
        let (labels, r) = series[0].rsplit_once(' ').unwrap();
        assert_eq!(
            labels,
            "topdown_cgroup_suspect_correlation{cgroup=\"/a\",suspect=\"/b\"}"
        );
        let r: f64 = r.parse().unwrap();
        assert!(r > 0.9 && r <= 1.0, "{r}");
        // Steady from now on: the victim's CPI stops moving over the latest windows.
        for _ in 0..suspects::WINDOWS {
            let cgroups = vec![
                usage(a, 0.5, 1.5),
                usage(b, 0.2 + 0.7 * noise(), 1.0),
                usage(c, 0.2 + 0.7 * noise(), 1.0),
            ];
            update(&mut exporter, &window(cgroups), &mut names, &set);
        }
        let text = exporter.encode();
        assert_eq!(
            line(&text, "topdown_cgroup_suspect_correlation{"),
            None,
            "{text}"
        );
    }

    /// Whom a cgroup waited behind: a series per culprit cgroup, at most three per cgroup (the
    /// first that came), the rest under `behind="other"`, with `idle` and `unattributed`; every
    /// series of a cgroup adds up to its run-queue wait.
    #[test]
    fn waits_behind_have_at_most_three_culprits_per_cgroup_and_add_up_to_the_wait() {
        let (_dir, [a, b, c, d, e, f], mut names) = cgroups(["a", "b", "c", "d", "e", "f"]);
        let set = CounterSet::software("test".into());
        let mut exporter = Exporter::new(&set, None, ROOMY);
        let ms = |ms: u64| ms * 1_000_000;
        let windows = [
            (vec![(b, ms(10)), (c, ms(5))], 0, ms(1), 0),
            // e is cut from this window's top three (with its other 1 ms).
            (
                vec![(d, ms(4)), (e, ms(3)), (b, ms(3)), (c, ms(3))],
                ms(1),
                0,
                ms(2),
            ),
            (vec![(f, ms(2))], 0, 0, 0),
        ];
        for (by, other_ns, idle_ns, unknown_ns) in windows {
            let behind = Behind::from(BehindParts {
                by: by.into_iter().collect(),
                rest: WaitRest {
                    other_ns,
                    idle_ns,
                    unknown_ns,
                    ..WaitRest::ZERO
                },
                ..BehindParts::default()
            });
            let mut w = window(vec![CgroupUsage {
                waited: Duration::from_nanos(behind.total_ns()),
                behind,
                ..usage(a.0, 1_000_000, 0)
            }]);
            w.waits_measured = true;
            w.neighbours_measured = true;
            update(&mut exporter, &w, &mut names, &set);
        }
        let text = exporter.encode();
        let series: Vec<(&str, f64)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("topdown_cgroup_wait_behind_seconds_total{"))
            .filter_map(|l| {
                let (labels, value) = l.split_once("} ")?;
                Some((labels, value.parse().ok()?))
            })
            .collect();
        let of = |behind: &str| {
            series
                .iter()
                .find(|(labels, _)| *labels == format!("cgroup=\"/a\",behind=\"{behind}\""))
                .map(|&(_, v)| v)
        };
        assert_eq!(series.len(), 6, "{text}");
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-12);
        assert!(close(of("/b"), 0.013), "{text}");
        assert!(close(of("/c"), 0.008), "{text}");
        assert!(close(of("/d"), 0.004), "{text}");
        assert!(close(of("other"), 0.001 + 0.003 + 0.002), "e and f: {text}");
        assert!(
            close(of("idle"), 0.001) && close(of("unattributed"), 0.002),
            "{text}"
        );
        assert_eq!(of("/e"), None);
        let sum: f64 = series.iter().map(|(_, v)| v).sum();
        let run_delay = line(&text, "topdown_cgroup_run_delay_seconds_total{")
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap();
        assert!(
            (sum - run_delay).abs() < 1e-9,
            "{sum} vs {run_delay}: {text}"
        );
    }

    /// Waits, throttling and pressure are counters per cgroup that add each window's growth;
    /// what the kernel did not provide (`full` pressure before 5.13) has no series, never a 0.
    #[test]
    fn waits_and_stalls_add_up_per_cgroup_and_what_is_not_provided_has_no_series() {
        let (_dir, [CgroupId(a)], mut names) = cgroups(["a"]);
        let set = CounterSet::software("test".into());
        let mut exporter = Exporter::new(&set, None, ROOMY);
        let stalls = crate::attrib::stalls::CpuStalls {
            nr_throttled: Some(3),
            throttled: Some(Duration::from_millis(250)),
            pressure_some: Some(Duration::from_millis(100)),
            pressure_full: None,
        };
        for _ in 0..2 {
            let mut w = window(vec![CgroupUsage {
                waited: Duration::from_millis(40),
                ..usage(a, 1_000_000, 0)
            }]);
            w.waits_measured = true;
            w.stalls.insert("/a".into(), stalls);
            update(&mut exporter, &w, &mut names, &set);
        }
        let text = exporter.encode();
        for (family, value) in [
            ("topdown_cgroup_run_delay_seconds_total", "0.08"),
            ("topdown_cgroup_throttled_seconds_total", "0.5"),
            ("topdown_cgroup_throttled_periods_total", "6"),
            ("topdown_cgroup_cpu_pressure_some_seconds_total", "0.2"),
        ] {
            assert_eq!(
                line(&text, &format!("{family}{{")),
                Some(format!("{family}{{cgroup=\"/a\"}} {value}").as_str()),
                "{text}"
            );
        }
        assert_eq!(
            line(&text, "topdown_cgroup_cpu_pressure_full_seconds_total{"),
            None,
            "{text}"
        );
    }

    /// A docker scope, `b` and `c` under a cgroup root of a temporary directory (the scope also
    /// as it will be once removed and made again: a newer id), and an exporter of the software
    /// set and `msr/tsc`, holding two cgroups at most and keeping removed ones for 10 s.
    struct Scene {
        dir: tempfile::TempDir,
        scope: String,
        docker: u64,
        b: u64,
        c: u64,
        again: CgroupId,
        names: CgroupNames,
        set: CounterSet,
        exporter: Exporter,
        t0: Instant,
    }

    impl Scene {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let scope = format!("docker-{}.scope", "0f".repeat(32));
            for path in [scope.as_str(), "b", "c"] {
                fs::create_dir(dir.path().join(path)).unwrap();
            }
            let id = |p: &str| fs::metadata(dir.path().join(p)).unwrap().ino();
            let (docker, b, c) = (id(&scope), id("b"), id("c"));
            let mut names = CgroupNames::at(Some(dir.path().to_path_buf()));
            let again = CgroupId(docker + (1 << 32));
            names.learn(again, format!("/{scope}"));
            let mut set = CounterSet::software("test".into());
            set.counters.push(Counter {
                name: "msr/tsc".into(),
                unit: CounterUnit::Cycles,
                attr: EventAttr::default(),
                cpus: None,
            });
            let limits = Limits {
                grace: Duration::from_secs(10),
                max_cgroups: 2,
            };
            let exporter = Exporter::new(&set, None, limits);
            Self {
                dir,
                scope,
                docker,
                b,
                c,
                again,
                names,
                set,
                exporter,
                t0: Instant::now(),
            }
        }

        /// A window's frame (the cgroups the kernel removed since the previous one in it)
        /// handed to the exporter at `now`.
        fn update(&mut self, mut window: Window, removed: &[CgroupId], now: Instant) {
            window.removed_cgroups = removed.to_vec();
            let frame = Frame::new(&window, &mut self.names, &self.set, None);
            self.exporter.update(&frame, now);
        }

        /// The docker scope charged twice (2 s in all), then `b` and `c` (`c` over the cap).
        fn charged(mut self) -> Self {
            let (docker, b, c, t0) = (self.docker, self.b, self.c, self.t0);
            self.update(window(vec![usage(docker, 1_500_000_000, 7)]), &[], t0);
            self.update(
                window(vec![
                    usage(docker, 500_000_000, 3),
                    usage(b, 1_000_000, 1),
                    usage(c, 1, 1),
                ]),
                &[],
                t0,
            );
            self
        }

        /// The docker scope's on-CPU series line, with its value.
        fn docker_cpu(&self, seconds: &str) -> String {
            format!(
                "topdown_cgroup_cpu_seconds_total{{cgroup=\"/{}\",container=\"docker:0f0f0f0f0f0f\",runtime=\"docker\"}} {seconds}",
                self.scope
            )
        }
    }

    #[test]
    fn totals_accumulate_and_the_cap_is_counted() {
        let scene = Scene::new().charged();
        let text = scene.exporter.encode();
        let cpu = scene.docker_cpu("2.0");
        assert!(text.contains(&cpu), "{cpu} in\n{text}");
        assert!(
            text.contains("# TYPE topdown_cgroup_cpu_seconds counter"),
            "{text}"
        );
        assert!(
            text.contains("# UNIT topdown_cgroup_cpu_seconds seconds"),
            "{text}"
        );
        assert!(
            line(
                &text,
                "topdown_cgroup_context_switches_total{cgroup=\"/b\"}"
            )
            .is_some(),
            "{text}"
        );
        assert!(
            text.contains("topdown_cgroups_refused_total 1"),
            "c is over the cap: {text}"
        );
        assert!(text.contains("topdown_cgroups_exported 2"));
        assert!(text.ends_with("# EOF\n"));
        let classic = classic_text(&text);
        assert!(classic.contains("# TYPE topdown_cgroup_cpu_seconds_total counter\n"));
        assert!(classic.contains("# HELP topdown_cgroup_cpu_seconds_total On-CPU"));
        assert!(classic.contains("# TYPE topdown_cgroups_exported gauge\n"));
        assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"));
        let tsc = line(
            &text,
            "topdown_cgroup_cycles_total{cgroup=\"/b\",event=\"msr/tsc\"}",
        );
        assert_eq!(tsc.and_then(|l| l.split(' ').nth(1)), Some("1.0"), "{text}");
        assert!(!text.contains("tma_ratio{"), "no TopDown without a PMU");
    }

    #[test]
    fn removed_cgroups_go_after_the_grace() {
        let mut scene = Scene::new().charged();
        // The kernel's rmdir record names b: its series stay for the grace period.
        scene.update(window(vec![]), &[CgroupId(scene.b)], scene.t0);
        assert!(
            scene.exporter.encode().contains("cgroup=\"/b\""),
            "kept during the grace period"
        );
        scene.update(window(vec![]), &[], scene.t0 + Duration::from_secs(11));
        let text = scene.exporter.encode();
        assert!(!text.contains("cgroup=\"/b\""), "{text}");
        assert!(text.contains("topdown_cgroups_exported 1"));
        // A late charge of the dropped cgroup adds nothing.
        scene.update(
            window(vec![usage(scene.b, 1_000_000, 1)]),
            &[],
            scene.t0 + Duration::from_secs(12),
        );
        assert!(!scene.exporter.encode().contains("cgroup=\"/b\""));
    }

    #[test]
    fn a_cgroup_made_again_at_its_path_goes_on() {
        let mut scene = Scene::new().charged();
        // The docker scope removed and created again at its path (a newer id, as cgroup2
        // gives): the series go on, and the old one's removal drops nothing.
        scene.update(window(vec![]), &[CgroupId(scene.docker)], scene.t0);
        scene.update(
            window(vec![usage(scene.again.0, 500_000_000, 1)]),
            &[],
            scene.t0 + Duration::from_secs(1),
        );
        // The old cgroup's removal seen again (a late record) is not the new one's.
        scene.update(
            window(vec![]),
            &[CgroupId(scene.docker)],
            scene.t0 + Duration::from_secs(2),
        );
        scene.update(window(vec![]), &[], scene.t0 + Duration::from_secs(40));
        let text = scene.exporter.encode();
        let cpu = scene.docker_cpu("2.5");
        assert!(text.contains(&cpu), "{cpu} in\n{text}");
    }

    #[test]
    fn c2c_samples_are_counted_by_cgroup_and_class() {
        let mut scene = Scene::new().charged();
        // c2c: forwarded samples by cgroup and class, the kernel's count and losses.
        let record = |cgroup_id, data_src| C2cRecord {
            cgroup_id,
            data_src,
            addr: 0x1000,
            ..C2cRecord::default()
        };
        let hitm = |remote: bool| {
            let mut src = DataSrc::decode(0);
            src.op = data_src::op::LOAD;
            src.lvl = data_src::lvl::HIT | data_src::lvl::L3;
            src.snoop = data_src::snoop::HITM;
            if remote {
                src.lvl = data_src::lvl::MISS | data_src::lvl::REM_CCE1;
                src.remote = true;
            }
            src.encode()
        };
        let records = [
            record(scene.docker, hitm(false)),
            record(scene.docker, hitm(false)),
            record(scene.docker, hitm(true)),
        ];
        let counts = C2cCounts {
            forwarded: 3,
            ring_full: 2,
            ..C2cCounts::default()
        };
        let mut counts = counts;
        counts.stats.nr_entries = 50;
        let mut names = CgroupNames::at(Some(scene.dir.path().to_path_buf()));
        let samples = classify(&records, |id| names.name(CgroupId(id)).to_string());
        assert_eq!(samples.len(), 3, "every HITM is in a class");
        scene.exporter.update_c2c(&samples, &counts);
        let text = scene.exporter.encode();
        let c2c = |class: &str| {
            line(&text, &format!("topdown_cgroup_c2c_samples_total{{cgroup=\"/{}\",container=\"docker:0f0f0f0f0f0f\",runtime=\"docker\",class=\"{class}\"}}", scene.scope))
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(c2c("lcl_hitm").as_deref(), Some("2"), "{text}");
        assert_eq!(c2c("rmt_hitm").as_deref(), Some("1"), "{text}");
        assert!(text.contains("topdown_c2c_classified_total 50"), "{text}");
        assert!(
            text.contains("topdown_kernel_losses_total{cause=\"c2c_ring_full\"} 2"),
            "{text}"
        );
    }

    /// An event this PMU does not count has no series (its zeros are no counts) and is named
    /// in `topdown_event_not_counting` with 1; once it counts, its series appear and the gauge
    /// reads 0.
    #[test]
    fn events_the_pmu_does_not_count_have_no_series_until_they_count() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("a")).unwrap();
        let a = fs::metadata(dir.path().join("a")).unwrap().ino();
        let mut names = CgroupNames::at(Some(dir.path().to_path_buf()));
        let mut set = CounterSet::software("test".into());
        set.counters.push(Counter {
            name: "STALL_SLOT".into(),
            unit: CounterUnit::Events,
            attr: EventAttr::default(),
            cpus: None,
        });
        let limits = Limits {
            grace: Duration::from_secs(10),
            max_cgroups: 10,
        };
        let mut exporter = Exporter::new(&set, None, limits);
        let mut silent = usage(a, 1_000_000, 0);
        silent.counters[0].silent = true;
        update(&mut exporter, &window(vec![silent]), &mut names, &set);
        let text = exporter.encode();
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("topdown_cgroup_") && l.contains("STALL_SLOT")),
            "{text}"
        );
        assert!(
            text.contains("topdown_event_not_counting{event=\"STALL_SLOT\"} 1"),
            "{text}"
        );
        update(
            &mut exporter,
            &window(vec![usage(a, 1_000_000, 5)]),
            &mut names,
            &set,
        );
        let text = exporter.encode();
        assert!(
            line(
                &text,
                "topdown_cgroup_events_total{cgroup=\"/a\",event=\"STALL_SLOT\"} 5"
            )
            .is_some(),
            "{text}"
        );
        assert!(
            text.contains("topdown_event_not_counting{event=\"STALL_SLOT\"} 0"),
            "{text}"
        );
    }
}
