//! `topdown-bpf decode`: the fractions of raw readings a program logged, printed as a tree or as
//! JSON keyed by perf's metric names.

use anyhow::{Result, bail};

use crate::{
    cli::DecodeArgs,
    region::decode::{self, Fractions, MetricsReading},
    tma::node::Node,
};

/// Runs `decode`.
pub fn run(args: &DecodeArgs) -> Result<()> {
    let fractions = decoded(args)?;
    if args.json {
        let object: serde_json::Map<String, serde_json::Value> = fractions
            .values
            .iter()
            .map(|(metric, value)| ((*metric).to_owned(), serde_json::json!(value)))
            .collect();
        println!("{}", serde_json::Value::Object(object));
        return Ok(());
    }
    print!("{}", render(&fractions));
    Ok(())
}

/// The fractions the arguments give.
pub fn decoded(args: &DecodeArgs) -> Result<Fractions> {
    if args.slots.len() != args.metrics.len() {
        bail!(
            "{} --slots but {} --metrics: give one of each per reading",
            args.slots.len(),
            args.metrics.len()
        );
    }
    let readings: Vec<MetricsReading> = args
        .slots
        .iter()
        .zip(&args.metrics)
        .map(|(&slots, &metrics)| MetricsReading { slots, metrics })
        .collect();
    match readings.as_slice() {
        [one] => decode::since_reset(*one, args.level),
        [a, b] => decode::region(*a, *b, args.pmc_width, args.level),
        more => bail!(
            "{} readings: give one (since the last reset) or two (the region between them)",
            more.len()
        ),
    }
}

/// One line per metric in tree order, Level 2 indented under its parent.
fn render(fractions: &Fractions) -> String {
    let mut rows: Vec<(u16, String)> = fractions
        .values
        .iter()
        .map(|&(metric, value)| {
            let node = Node::named(metric);
            let indent = if node.is_some_and(|n| n.level > 1) {
                "  "
            } else {
                ""
            };
            (
                node.map_or(u16::MAX, |n| n.order),
                format!("{indent}{metric:<26} {:5.1} %\n", value * 100.0),
            )
        })
        .collect();
    rows.sort_by_key(|(order, _)| *order);
    let mut out = format!(
        "TopDown of {} slots (each value ±{:.1} % from the 8-bit fractions)\n",
        fractions.slots,
        fractions.uncertainty * 100.0
    );
    out.extend(rows.into_iter().map(|(_, line)| line));
    out
}
