//! `topdown-bpf c2c ...`: what each subcommand does with its arguments.

use anyhow::{Result, bail};

use super::{
    by_group,
    display::{Coalesce, ReportOptions},
    json_report, line_table,
    lines::C2cData,
    pareto, perf_data, stats_report,
};
use crate::{
    attrib::groups::GroupBy,
    cli::{C2cArgs, C2cCommand},
    pmu::sysfs::SysRoot,
};

/// Runs a `c2c` subcommand, or live recording without one.
pub fn run(args: &C2cArgs) -> Result<()> {
    match &args.command {
        None => live(&SysRoot::host(), args.threshold),
        Some(C2cCommand::Report(report)) => {
            let coalesce = Coalesce::parse(&report.coalesce)?;
            let recording = perf_data::read(&report.input)?;
            let options = ReportOptions {
                coalesce,
                double_cl: report.double_cl,
                display: report.display,
                show_all: report.show_all,
                node_info: report.node_info.min(2),
                full_symbols: report.full_symbols,
                no_source: report.no_source,
            };
            let data = C2cData::from_recording(&recording, options.line_size(), coalesce);
            if report.json {
                print!("{}", json_report::render(&data, &recording, options));
                return Ok(());
            }
            let by = if report.per_container {
                Some(GroupBy::Container)
            } else {
                report.per_cgroup.then_some(GroupBy::Cgroup)
            };
            // Checked before anything is printed: one line when the recording cannot do it.
            let groups = by
                .map(|by| by_group::render(&data, &recording, by, options))
                .transpose()?;
            print!(
                "{}",
                stats_report::render(&data, &recording.events, options)
            );
            if !report.stats {
                print!("\n{}", line_table::render(&data, options));
                print!("{}", pareto::render(&data, &recording, options));
                if let Some(groups) = groups {
                    print!("\n{groups}");
                }
            }
            Ok(())
        }
    }
}

/// The memory-sampling PMU of this machine, if any: Intel `mem-loads`, AMD IBS, Arm SPE.
pub fn memory_sampling_pmu(sys: &SysRoot) -> Result<Option<String>> {
    for core in ["cpu", "cpu_core"] {
        if let Some(pmu) = sys.pmu(core)?
            && pmu.event_terms("mem-loads")?.is_some()
        {
            return Ok(Some(format!("{core}/mem-loads/")));
        }
    }
    let names = sys.pmu_names()?;
    Ok(names
        .into_iter()
        .find(|n| n == "ibs_op" || n.starts_with("arm_spe")))
}

fn live(sys: &SysRoot, threshold: u64) -> Result<()> {
    match memory_sampling_pmu(sys)? {
        None => bail!(
            "this machine has no memory-sampling PMU (Intel mem-loads, AMD IBS, Arm SPE): record \
             with `perf c2c record` where there is one and read it with `topdown-bpf c2c report \
             -i FILE --stats`"
        ),
        Some(pmu) => bail!(
            "live c2c recording on {pmu} (ldlat {threshold}) is not built yet: record with `perf \
             c2c record` and read it with `topdown-bpf c2c report -i FILE --stats`"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sampling_pmus_are_found_by_what_sysfs_offers() {
        assert_eq!(
            memory_sampling_pmu(&SysRoot::fixture("vm-no-pmu")).unwrap(),
            None
        );
        assert_eq!(
            memory_sampling_pmu(&SysRoot::fixture("zen4")).unwrap(),
            None,
            "no ibs_op in the fixture"
        );
        let error = live(&SysRoot::fixture("vm-no-pmu"), 30)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("no memory-sampling PMU") && error.contains("c2c report -i"),
            "{error}"
        );
    }
}
