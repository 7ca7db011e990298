//! The memory-sampling events a c2c recording opens on this machine, as `perf c2c record` picks
//! them: Intel `mem-loads` (latency threshold in `ldlat`) and `mem-stores`, led by
//! `mem-loads-aux` where the PMU has it (Sapphire Rapids and later); AMD `ibs_op`. Read from the
//! sysfs event and format files, never from a table of our own.

use anyhow::{Context as _, Result, bail};

use super::sysfs::SysRoot;

/// `PERF_TYPE_SOFTWARE`.
const PERF_TYPE_SOFTWARE: u32 = 1;

/// How often an event samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// About this many samples per second (`perf record -F`; perf's default is 4000).
    Frequency(u64),
    /// One sample every this many events.
    Period(u64),
}

/// One sampling event of a c2c recording, opened on every CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryEvent {
    /// perf's spelling, for the report (`cpu/mem-loads,ldlat=30/P`).
    pub name: String,
    /// `perf_event_attr.type`.
    pub pmu_type: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1` (Intel: the load latency threshold).
    pub config1: u64,
    /// `perf_event_attr.precise_ip` (PEBS needs at least 1; perf's `:P` asks for the most).
    pub precise_ip: u8,
    /// Index (in the list) of this event's group leader.
    pub leader: Option<usize>,
    /// Whether its samples go to the filter (a group's auxiliary leader does not sample).
    pub samples: bool,
    /// How often it samples.
    pub rate: Rate,
}

/// The memory events of this machine with latency threshold `ldlat`, or `None` when it has no
/// memory-sampling PMU (a VM, or a CPU perf c2c does not support).
pub fn for_machine(sys: &SysRoot, ldlat: u64, rate: Rate) -> Result<Option<Vec<MemoryEvent>>> {
    for core in ["cpu", "cpu_core"] {
        let Some(pmu) = sys.pmu(core)? else { continue };
        let Some(loads) = pmu.event_terms("mem-loads")? else {
            continue;
        };
        let event = |name: &str, terms: &str, leader, samples| -> Result<MemoryEvent> {
            let encoded = pmu
                .encode(terms)
                .with_context(|| format!("encoding {core}/{name}/ from sysfs"))?;
            Ok(MemoryEvent {
                name: name.to_owned(),
                pmu_type: pmu.pmu_type,
                config: encoded.config,
                config1: encoded.config1,
                precise_ip: 3,
                leader,
                samples,
                rate,
            })
        };
        let loads_terms = format!("{loads},ldlat={ldlat}");
        let loads_name = format!("{core}/mem-loads,ldlat={ldlat}/P");
        let stores_name = format!("{core}/mem-stores/P");
        let stores = pmu
            .event_terms("mem-stores")?
            .with_context(|| format!("{core} has mem-loads but no mem-stores in sysfs"))?;
        let mut events = Vec::new();
        if let Some(aux) = pmu.event_terms("mem-loads-aux")? {
            events.push(event(&format!("{core}/mem-loads-aux/"), &aux, None, false)?);
            events.push(event(&loads_name, &loads_terms, Some(0), true)?);
        } else {
            events.push(event(&loads_name, &loads_terms, None, true)?);
        }
        events.push(event(&stores_name, &stores, None, true)?);
        return Ok(Some(events));
    }
    if let Some(ibs) = sys.pmu("ibs_op")? {
        return Ok(Some(vec![MemoryEvent {
            name: "ibs_op//".into(),
            pmu_type: ibs.pmu_type,
            config: 0,
            config1: 0,
            precise_ip: 0,
            leader: None,
            samples: true,
            rate,
        }]));
    }
    Ok(None)
}

/// The events a c2c recording opens: `event` when given (a software stand-in), else this
/// machine's memory events; one clear line when it has none.
pub fn choose(
    sys: &SysRoot,
    event: Option<&str>,
    ldlat: u64,
    rate: Rate,
) -> Result<Vec<MemoryEvent>> {
    if let Some(name) = event {
        return Ok(vec![software(name, rate)?]);
    }
    match for_machine(sys, ldlat, rate)? {
        Some(events) => Ok(events),
        None if sys.pmu_names()?.iter().any(|n| n.starts_with("arm_spe")) => bail!(
            "Arm SPE is not supported yet for live c2c: record with `perf c2c record` and read it \
             with `topdown-bpf c2c report -i FILE`"
        ),
        None => bail!(
            "this machine has no memory-sampling PMU (Intel mem-loads, AMD IBS, Arm SPE): record \
             with `perf c2c record` where there is one and read it with `topdown-bpf c2c report \
             -i FILE --stats` (or try the live path on a software event: `c2c -e cpu-clock`, \
             `serve --c2c --c2c-event cpu-clock`)"
        ),
    }
}

/// A software event standing in for memory sampling (`-e cpu-clock`): its samples carry no
/// data source, so the filter counts them all as unparsable. Lets the whole live path run on
/// machines without a memory-sampling PMU.
pub fn software(name: &str, rate: Rate) -> Result<MemoryEvent> {
    let config = match name {
        "cpu-clock" => 0,
        "task-clock" => 1,
        other => bail!(
            "c2c -e {other}: give no -e for this machine's memory events, or cpu-clock / \
             task-clock to try the live path without a memory-sampling PMU"
        ),
    };
    Ok(MemoryEvent {
        name: name.to_owned(),
        pmu_type: PERF_TYPE_SOFTWARE,
        config,
        config1: 0,
        precise_ip: 0,
        leader: None,
        samples: true,
        rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intel_memory_events_come_from_sysfs_with_the_threshold_in_ldlat() {
        let rate = Rate::Frequency(4000);
        let icl = for_machine(&SysRoot::fixture("icelake"), 30, rate)
            .unwrap()
            .unwrap();
        assert_eq!(icl.len(), 2);
        assert_eq!(icl[0].name, "cpu/mem-loads,ldlat=30/P");
        assert_eq!((icl[0].config, icl[0].config1), (0x01cd, 30));
        assert_eq!((icl[1].config, icl[1].config1), (0x82d0, 0));
        assert!(
            icl.iter()
                .all(|e| e.leader.is_none() && e.samples && e.precise_ip == 3)
        );

        let spr = for_machine(&SysRoot::fixture("sapphirerapids"), 50, rate)
            .unwrap()
            .unwrap();
        assert_eq!(spr.len(), 3, "{spr:?}");
        assert_eq!(
            (spr[0].config, spr[0].samples),
            (0x8203, false),
            "aux leads"
        );
        assert_eq!((spr[1].leader, spr[1].config1), (Some(0), 50));
        assert_eq!(spr[2].config, 0x02cd, "SPR stores are event 0xcd umask 2");

        assert_eq!(
            for_machine(&SysRoot::fixture("vm-no-pmu"), 30, rate).unwrap(),
            None
        );
        assert!(software("cycles", rate).is_err());
        assert_eq!(software("cpu-clock", rate).unwrap().pmu_type, 1);
    }
}
