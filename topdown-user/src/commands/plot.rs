//! `topdown-bpf plot`: a recording's timelines as a picture.

use anyhow::Result;

use crate::{
    attrib::groups::{GroupBy, GroupOptions},
    cli::PlotArgs,
    commands::report::read_input,
    model::timelines::timelines,
    picture::{self, timelines::svg},
};

/// Draws the recording `args` names.
pub fn run(args: &PlotArgs) -> Result<()> {
    // The format first: a bad name is said before the recording is read.
    picture::is_png(&args.output)?;
    let budget = args
        .max_memory
        .map_or_else(crate::recording::reader::default_memory_budget, |mib| {
            mib << 20
        });
    let mut recording = read_input(&args.input, &args.range, budget)?;
    let by = if args.per_container {
        Some(GroupBy::Container)
    } else if args.per_cgroup {
        Some(GroupBy::Cgroup)
    } else {
        None
    };
    let grouping = by.map(|by| GroupOptions {
        by,
        rollup: false,
        keep: Vec::new(),
    });
    let data = timelines(&mut recording, grouping.as_ref(), &args.metric, args.top)?;
    picture::write(&svg(&data)?, &args.output, &[&args.input], args.force)
}
