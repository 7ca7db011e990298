//! `topdown-bpf analyze`: TopDown from `perf stat -x` output recorded on any machine (toplev's
//! `--import`), and the `perf stat` command that records what a CPU's model needs.

use std::{collections::HashMap, fmt::Write as _, io::Read, path::Path};

use anyhow::{Context as _, Result, bail};
use serde_json::json;

use crate::{
    cli::AnalyzeArgs,
    import::perf_stat_csv::{self, PerfStatCounts},
    pmu::{
        event_key::EventKey,
        event_table::EventTable,
        machine::{CpuId, Machine},
        sysfs::SysRoot,
        topdown_model::{Selection, select},
    },
    report::topdown,
    tma::{
        ESTIMATE_ASSUMES, Model, OutOfRange, TopDown,
        inputs::{Literals, NamedCounts},
        plan::level_groups,
        spelling::{formula_name, perf_event_list, perf_event_names},
    },
};

/// Runs `analyze` as the arguments say.
pub fn run(args: &AnalyzeArgs, verbose: bool) -> Result<()> {
    let cpu: CpuId = match &args.cpu {
        Some(text) => text.parse()?,
        None => Machine::read(&SysRoot::host())?.cpu,
    };
    let model = model_for(&cpu, &args.pmu, args.smt)?;
    if !args.nodes.is_empty() && args.td_level != 3 {
        bail!("--nodes picks where Level 3 drills down: it needs --td-level 3");
    }
    if args.events {
        events_command(args, &cpu, &model)
    } else {
        analysis(args, &cpu, &model, verbose)
    }
}

/// `--events`: the `perf stat` command that records what the level needs, and the `analyze`
/// command for its output (or, with `--json`, the events as perf names them).
fn events_command(args: &AnalyzeArgs, cpu: &CpuId, model: &Model) -> Result<()> {
    let expand = drill_nodes(args, cpu, model)?;
    // What the level asked for reads, the general-counter events in the groups the kernel can
    // schedule (as live runs open them).
    let chosen;
    let events: &[&'static str] = if expand.is_empty() {
        model.events_for_level(args.td_level)
    } else {
        chosen = model.drilldown_events(&expand)?;
        &chosen
    };
    let rest: Vec<&'static str> = events
        .iter()
        .copied()
        .filter(|e| !e.starts_with("topdown-") && *e != "TOPDOWN.SLOTS")
        .collect();
    let plan = level_groups(model, args.td_level, &rest);
    if args.json {
        println!("{}", serde_json::to_string(&perf_event_names(events))?);
        return Ok(());
    }
    let separator = match args.separator.as_str() {
        "," => "-x,".to_owned(),
        other => format!("-x '{other}'"),
    };
    println!(
        "perf stat {separator} -o stat.csv -e '{}' -a -- sleep 10",
        perf_event_list(events, &plan.groups)
    );
    // The analysis of that file, with every option given here.
    let mut analyze = format!("topdown-bpf analyze stat.csv --cpu {cpu}");
    if args.pmu != "cpu_core" {
        analyze.push_str(&format!(" --pmu {}", args.pmu));
    }
    for (given, flag) in [(args.smt, " --smt"), (args.pmem, " --pmem")] {
        if given {
            analyze.push_str(flag);
        }
    }
    if let Some(slots) = args.slots {
        analyze.push_str(&format!(" --slots {slots}"));
    }
    analyze.push_str(&format!(" --td-level {}", args.td_level));
    if !expand.is_empty() {
        analyze.push_str(&format!(" --nodes {}", expand.join(",")));
    }
    if args.separator != "," {
        analyze.push_str(&format!(" -x '{}'", args.separator));
    }
    println!("{analyze}   # model {}: {}", model.name, model.description);
    Ok(())
}

/// The Level 2 nodes Level 3 is recorded under: named (`--nodes`), or those over their
/// thresholds in a Level 2 recording (`--drilldown FILE`, toplev's drilldown).
fn drill_nodes(args: &AnalyzeArgs, cpu: &CpuId, model: &Model) -> Result<Vec<String>> {
    let Some(file) = &args.drilldown else {
        return Ok(args.nodes.clone());
    };
    if args.td_level != 3 {
        bail!("--drilldown picks the Level 3 nodes to record: use --td-level 3");
    }
    let counts = perf_stat_csv::parse(&read_input(file, input_limit(args))?, &args.separator)
        .with_context(|| format!("{}", file.display()))?;
    let td = model.evaluate(&named_counts(&counts, cpu, model, args), 2);
    let over: Vec<String> = model
        .drill_targets(&td)
        .into_iter()
        .map(str::to_owned)
        .collect();
    if over.is_empty() {
        bail!(
            "no Level 2 node with Level 3 nodes under it is over its threshold in {}: nothing \
             to drill into (Level 2 is the answer)",
            file.display()
        );
    }
    eprintln!("drilling down under {}", over.join(", "));
    Ok(over)
}

/// TopDown of a `perf stat -x` file, as JSON or as a tree with what it could not compute.
fn analysis(args: &AnalyzeArgs, cpu: &CpuId, model: &Model, verbose: bool) -> Result<()> {
    let path = args
        .file
        .as_deref()
        .context("name the perf stat -x output to analyze")?;
    let text = read_input(path, input_limit(args))?;
    let counts = perf_stat_csv::parse(&text, &args.separator)
        .with_context(|| format!("{}", path.display()))?;
    let found = Analysis::of(&counts, cpu, model, args)?;
    if found.td.nodes.is_empty() {
        bail!(
            "no Level {} node can be computed from {}: missing events {}; record them with the \
             command `topdown-bpf analyze --events --cpu {cpu}` prints",
            args.td_level,
            path.display(),
            found.missing.join(", ")
        );
    }
    if args.json {
        println!("{}", found.json(cpu, model, args.td_level));
    } else {
        println!(
            "TopDown of {} (CPU {cpu}, model {}: {})",
            path.display(),
            model.name,
            model.description
        );
        print!("{}", found.text(verbose));
    }
    Ok(())
}

/// What `analyze FILE` found in a file's counts: TopDown where it could be computed, and why
/// not elsewhere.
struct Analysis {
    /// The nodes computed (finite values only).
    td: TopDown,
    /// Events the nodes asked for (under `--nodes`, only theirs) that the file lacks.
    missing: Vec<String>,
    /// Nodes outside 0..100 %: their inputs contradict each other.
    out_of_range: Vec<OutOfRange>,
    /// The least share of the time any event counted (perf's multiplexing).
    min_run: f64,
    /// Whether the values are a per-thread estimate (SMT on, no -a).
    estimate: bool,
    /// Level 3 nodes no counting can measure.
    unmeasurable: &'static [&'static str],
}

impl Analysis {
    fn of(counts: &PerfStatCounts, cpu: &CpuId, model: &Model, args: &AnalyzeArgs) -> Result<Self> {
        let inputs = named_counts(counts, cpu, model, args);
        let mut td = model.evaluate(&inputs, args.td_level);
        // With --nodes, events of Level 3 nodes not asked for are not missing.
        let asked = if args.nodes.is_empty() {
            None
        } else {
            Some(model.drilldown_events(&args.nodes)?)
        };
        let missing: Vec<String> = inputs
            .missing()
            .into_iter()
            .filter(|e| asked.as_ref().is_none_or(|a| a.contains(&e.as_str())))
            .collect();
        let finite: Vec<_> = td
            .nodes
            .iter()
            .filter(|n| n.value.is_finite())
            .copied()
            .collect();
        td.nodes = finite.into();
        let reads = model.node_inputs(args.smt, args.system_wide);
        let out_of_range = Model::out_of_range(&td.nodes, &reads, |event| inputs.count(event));
        Ok(Self {
            td,
            missing,
            out_of_range,
            min_run: counts
                .events
                .values()
                .map(|c| c.min_run_percent)
                .fold(100.0, f64::min),
            estimate: model.is_estimate(args.smt, args.system_wide),
            unmeasurable: if args.td_level >= 3 {
                model.unmeasurable
            } else {
                &[]
            },
        })
    }

    /// The analysis as one JSON document.
    fn json(&self, cpu: &CpuId, model: &Model, td_level: u8) -> serde_json::Value {
        let td = &self.td;
        json!({
            "cpu": cpu.to_string(),
            "model": model.name,
            "td_level": td_level,
            "estimate": self.estimate,
            "nodes": topdown::values_json(td),
            "bottleneck": td.bottleneck,
            "over_threshold": td.nodes.iter().filter(|n| n.over_threshold).map(|n| n.node.name).collect::<Vec<_>>(),
            "missing_events": self.missing,
            "not_measurable": self.unmeasurable,
            "min_run_percent": self.min_run,
            "out_of_range": self.out_of_range.iter().map(|o| json!({
                "node": o.node,
                "value": o.value,
                "inputs": o.inputs.iter().map(|(name, value)| (name.clone(), json!(value))).collect::<serde_json::Map<_, _>>(),
            })).collect::<Vec<_>>(),
        })
    }

    /// The tree and what it could not compute, for people.
    fn text(&self, verbose: bool) -> String {
        let mut out = topdown::tree(&self.td, verbose);
        if self.estimate {
            let _ = writeln!(
                out,
                "per-thread estimate (SMT on, no -a): {ESTIMATE_ASSUMES}"
            );
        }
        if self.min_run < 100.0 {
            let _ = writeln!(
                out,
                "some events counted only {:.1} % of the time (multiplexed; perf scaled them)",
                self.min_run
            );
        }
        if !self.missing.is_empty() {
            let _ = writeln!(
                out,
                "not computed: nodes that need {}",
                self.missing.join(", ")
            );
        }
        if !self.unmeasurable.is_empty() {
            let _ = writeln!(
                out,
                "not measurable by counting (they read a sampled retirement latency): {}",
                self.unmeasurable.join(", ")
            );
        }
        for o in &self.out_of_range {
            let inputs: Vec<String> = o
                .inputs
                .iter()
                .map(|(name, value)| format!("{name} = {value}"))
                .collect();
            let _ = writeln!(
                out,
                "{} is {:.1} %, outside 0..100 %: the counts it is computed from contradict each \
                 other ({})",
                o.node,
                o.value * 100.0,
                inputs.join(", ")
            );
        }
        out
    }
}

fn model_for(cpu: &CpuId, pmu: &str, smt: bool) -> Result<Model> {
    match select(cpu, pmu, smt) {
        Selection::Model(name) => Model::named(name),
        Selection::PerCoreOnly(name) => Model::named(name),
        Selection::Unsupported(why) => bail!("{why}"),
    }
}

/// The file's counts by formula name, with the literals this CPU and the arguments give.
/// The file's counts under the names `model`'s formulas read: each event the model needs that
/// the file does not spell the same way is found by what it is ([`EventKey`]: its encoding in
/// the CPU's event table, numbers in hex or decimal, perf's and perfmon's modifiers, any PMU
/// prefix), so a file recorded by `perf stat -M` counts for every node perf computes from it.
fn named_counts(
    file: &PerfStatCounts,
    cpu: &CpuId,
    model: &Model,
    args: &AnalyzeArgs,
) -> NamedCounts {
    let arm = matches!(cpu, CpuId::Arm { .. });
    let default_slots = match cpu {
        CpuId::Arm { part: 0xd49, .. } => 5,
        _ => 8,
    };
    let mut counts: Vec<(String, f64)> = file
        .events
        .iter()
        .map(|(name, count)| (formula_name(name, arm), count.value))
        .collect();
    let table = EventTable::for_model(model.name);
    let mut by_key: HashMap<EventKey, f64> = HashMap::new();
    for (name, count) in &file.events {
        by_key
            .entry(EventKey::of(name, table.as_ref()))
            .or_insert(count.value);
    }
    for event in model.events {
        if counts.iter().any(|(name, _)| name == event) {
            continue;
        }
        if let Some(&value) = by_key.get(&EventKey::of(event, table.as_ref())) {
            counts.push(((*event).to_owned(), value));
        }
    }
    NamedCounts::new(
        counts,
        Literals {
            slots: args.slots.unwrap_or(default_slots),
            smt_on: args.smt,
            core_wide: args.system_wide,
            has_pmem: args.pmem,
        },
    )
}

/// Most bytes an input may hold: `--max-memory`, else 1 GiB or half of what is available.
fn input_limit(args: &AnalyzeArgs) -> u64 {
    args.max_memory.map_or_else(
        || crate::recording::reader::default_memory_budget().min(1 << 30),
        |mib| mib << 20,
    )
}

/// The text of `path`, or of standard input for `-`: read a chunk at a time, refused at the
/// first NUL byte (`perf stat -x` writes text) or past `limit` bytes, never read whole first
/// (`analyze /dev/zero` held 12.5 GB at 30 s).
fn read_input(path: &Path, limit: u64) -> Result<String> {
    let shown = if path.as_os_str() == "-" {
        "standard input".to_owned()
    } else {
        path.display().to_string()
    };
    let mut reader: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("reading {shown}"))?)
    };
    let mut bytes = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error).with_context(|| format!("reading {shown}")),
        };
        if let Some(at) = chunk[..n].iter().position(|&b| b == 0) {
            bail!(
                "{shown} is not `perf stat -x` text (a NUL byte at offset {})",
                bytes.len() + at
            );
        }
        if (bytes.len() + n) as u64 > limit {
            bail!(
                "{shown} is over {} MiB: not a `perf stat -x` output this command reads (raise \
                 --max-memory if it is one)",
                limit >> 20
            );
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(bytes).map_err(|error| {
        anyhow::anyhow!(
            "{shown} is not `perf stat -x` text (not UTF-8 at offset {})",
            error.utf8_error().valid_up_to()
        )
    })
}
