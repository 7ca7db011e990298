//! perf's spellings of one event, as the model formulas name it and as `perf stat -e` takes it.
//!
//! The formulas use pmu-events spelling: `topdown-fe-bound`, `TOPDOWN.SLOTS`,
//! `INT_MISC.UOP_DROPPING`, `cpu@INT_MISC.RECOVERY_CYCLES,cmask=1,edge@`. On a command line and
//! in `perf stat -x` output the same events read `slots`, `cpu/INT_MISC...,cmask=1,edge/`,
//! `cpu_core/topdown-fe-bound/`, `cycles:u`.

/// The formula spelling of an event perf wrote as `perf_name`; Arm names are lower-cased.
pub fn formula_name(perf_name: &str, arm: bool) -> String {
    let mut name = perf_name.trim().to_owned();
    if let Some((pmu, rest)) = name.split_once('/')
        && let Some((inner, _modifiers)) = rest.rsplit_once('/')
    {
        name = if inner.contains(',') {
            format!("{pmu}@{inner}@")
        } else {
            inner.to_owned()
        };
    } else if let Some((event, modifiers)) = name.rsplit_once(':')
        && !event.contains('@')
        && modifiers.chars().all(|c| c.is_ascii_alphabetic())
    {
        name = event.to_owned();
    }
    if name == "slots" {
        name = "TOPDOWN.SLOTS".to_owned();
    }
    if arm { name.to_lowercase() } else { name }
}

/// The `perf stat -e` list that records `events` (formula spellings): PERF_METRICS events in
/// one group led by `slots`, the general-counter events in `groups` (weak groups, `{a,b}:W`,
/// which perf splits if the kernel cannot schedule them whole), the rest one by one.
pub fn perf_event_list(events: &[&str], groups: &[Vec<&'static str>]) -> String {
    let spelled = |event: &str| -> String {
        perf_event_names(&[event])
            .pop()
            .unwrap_or_else(|| event.to_owned())
    };
    let names = perf_event_names(events);
    let (metrics, _): (Vec<&String>, Vec<&String>) = names
        .iter()
        .partition(|n| *n == "slots" || n.starts_with("topdown-"));
    let mut list: Vec<String> = Vec::new();
    if metrics.iter().any(|n| n.starts_with("topdown-")) {
        list.push(format!(
            "{{{}}}",
            metrics
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ));
    } else {
        list.extend(metrics.into_iter().cloned());
    }
    for group in groups.iter().filter(|g| !g.is_empty()) {
        let members: Vec<String> = group.iter().map(|e| spelled(e)).collect();
        list.push(if members.len() > 1 {
            format!("{{{}}}:W", members.join(","))
        } else {
            members.join(",")
        });
    }
    let grouped = |event: &&str| groups.iter().flatten().any(|g| g == event);
    let with_metrics = names.iter().any(|n| n.starts_with("topdown-"));
    for event in events.iter().filter(|e| !grouped(e)) {
        if event.starts_with("topdown-") || (*event == "TOPDOWN.SLOTS" && with_metrics) {
            continue;
        }
        list.push(spelled(event));
    }
    list.join(",")
}

/// The names perf writes in `perf stat -x` output for `events` (formula spellings): `slots` and
/// the `topdown-*` metrics (recorded as one group, slots first), then the others, PMU events as
/// `pmu/event/`.
pub fn perf_event_names(events: &[&str]) -> Vec<String> {
    let metrics: Vec<&str> = events
        .iter()
        .copied()
        .filter(|e| e.starts_with("topdown-"))
        .collect();
    let mut names = Vec::new();
    if !metrics.is_empty() {
        names.push("slots".to_owned());
        names.extend(metrics.iter().map(|m| (*m).to_owned()));
    }
    for event in events {
        if event.starts_with("topdown-") || (*event == "TOPDOWN.SLOTS" && !metrics.is_empty()) {
            continue;
        }
        names.push(match event.split_once('@') {
            Some((pmu, rest)) => format!("{pmu}/{}/", rest.trim_end_matches('@')),
            None => (*event).to_owned(),
        });
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_spellings_map_to_formula_names() {
        assert_eq!(formula_name("slots", false), "TOPDOWN.SLOTS");
        assert_eq!(
            formula_name("cpu_core/topdown-fe-bound/", false),
            "topdown-fe-bound"
        );
        assert_eq!(
            formula_name("cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/", false),
            "cpu@INT_MISC.RECOVERY_CYCLES,cmask=1,edge@"
        );
        assert_eq!(formula_name("cycles:u", false), "cycles");
        assert_eq!(
            formula_name("INT_MISC.UOP_DROPPING", false),
            "INT_MISC.UOP_DROPPING"
        );
        assert_eq!(
            formula_name("armv8_pmuv3_0/STALL_SLOT/", true),
            "stall_slot"
        );
    }

    #[test]
    fn event_lists_group_perf_metrics_under_slots() {
        let events = [
            "INT_MISC.UOP_DROPPING",
            "TOPDOWN.SLOTS",
            "cpu@INT_MISC.RECOVERY_CYCLES,cmask=1,edge@",
            "topdown-bad-spec",
            "topdown-fe-bound",
        ];
        assert_eq!(
            perf_event_list(&events, &[]),
            "{slots,topdown-bad-spec,topdown-fe-bound},INT_MISC.UOP_DROPPING,\
             cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/"
        );
        // A planned group of general-counter events is a weak group.
        let groups = [vec![
            "INT_MISC.UOP_DROPPING",
            "cpu@INT_MISC.RECOVERY_CYCLES,cmask=1,edge@",
        ]];
        assert_eq!(
            perf_event_list(&events, &groups),
            "{slots,topdown-bad-spec,topdown-fe-bound},\
             {INT_MISC.UOP_DROPPING,cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/}:W"
        );
        // Every listed event reads back to the formula name it came from.
        for perf in [
            "slots",
            "INT_MISC.UOP_DROPPING",
            "cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/",
        ] {
            assert!(!formula_name(perf, false).contains('/'));
        }
    }
}
