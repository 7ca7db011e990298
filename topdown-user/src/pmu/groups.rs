//! Counter groups the kernel can schedule, as perf's metric groups make them: a TopDown level
//! needs more events than a core has general counters, so its events are split into groups that
//! each fit (the data says which counters each event may use: `0-3`, `0-7`, `fixed1`), the
//! kernel multiplexes the groups, and each count is scaled by its own enabled/running time.
//!
//! Rules. PERF_METRICS events are one pinned group led by `slots` (built by the caller); events
//! on fixed counters count all the time and stand alone. General-counter events are placed node
//! by node in tree order: a node's events join the group that already holds its other events,
//! or the first group they fit in with it, or a new group, so that a node's inputs are counted
//! together (the same time, the same code) wherever the counters allow. A node whose inputs
//! could not be kept in one group is listed in [`GroupPlan::split`]: its inputs were multiplexed
//! apart, and reports say so (`tma::view`). Events no node reads directly (thresholds) come
//! last. "Fits" is a matching of the group's events to distinct allowed counters.

use std::collections::HashMap;

/// Where an event may count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Fixed counter N: counts all the time, needs no general counter.
    Fixed(u8),
    /// General counters, as a bit mask (bit i: counter i).
    General(u32),
}

impl Place {
    /// From the event table's counters column (`0-3,5`, `fixed1`); `None` for what it cannot
    /// read.
    pub fn parse(text: &str) -> Option<Self> {
        if let Some(n) = text.strip_prefix("fixed") {
            return n.parse().ok().map(Self::Fixed);
        }
        let mut mask = 0u32;
        for part in text.split(',') {
            let (low, high) = match part.split_once('-') {
                Some((low, high)) => (low.parse::<u32>().ok()?, high.parse::<u32>().ok()?),
                None => {
                    let n = part.parse::<u32>().ok()?;
                    (n, n)
                }
            };
            if low > high || high >= 32 {
                return None;
            }
            for counter in low..=high {
                mask |= 1 << counter;
            }
        }
        (mask != 0).then_some(Self::General(mask))
    }
}

/// Whether events allowed on counters `masks` can all count at once: each on its own counter.
pub fn fits(masks: &[u32]) -> bool {
    // Kuhn's augmenting paths: `owner[c]` is the event on counter c.
    fn place(event: usize, masks: &[u32], owner: &mut [Option<usize>; 32], seen: &mut u32) -> bool {
        for counter in 0..32 {
            if masks[event] & (1 << counter) == 0 || *seen & (1 << counter) != 0 {
                continue;
            }
            *seen |= 1 << counter;
            let free = match owner[counter] {
                None => true,
                Some(other) => place(other, masks, owner, seen),
            };
            if free {
                owner[counter] = Some(event);
                return true;
            }
        }
        false
    }
    let mut owner = [None; 32];
    (0..masks.len()).all(|event| place(event, masks, &mut owner, &mut 0))
}

/// The general-counter groups of a level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupPlan {
    /// Each group's events, the first its leader.
    pub groups: Vec<Vec<&'static str>>,
    /// Nodes whose general-counter inputs are in more than one group.
    pub split: Vec<&'static str>,
}

/// Plans the groups of `nodes` (name, events it reads; tree order) and then of `others`,
/// for the events `general` says use general counters (with their masks; `None`: fixed or
/// PERF_METRICS, placed by the caller).
pub fn plan(
    nodes: &[(&'static str, Vec<&'static str>)],
    others: &[&'static str],
    general: impl Fn(&str) -> Option<u32>,
) -> GroupPlan {
    let mut plan = GroupPlan::default();
    let mut masks: Vec<Vec<u32>> = Vec::new();
    let mut home: HashMap<&'static str, usize> = HashMap::new();
    let with = |group: &[u32], more: &[u32]| -> bool {
        let all: Vec<u32> = group.iter().chain(more).copied().collect();
        fits(&all)
    };
    // The events no node reads come last, as a node without a name.
    let named = nodes
        .iter()
        .map(|(node, events)| (Some(*node), events.clone()));
    for (node, events) in named.chain(std::iter::once((None, others.to_vec()))) {
        let mut new: Vec<(&'static str, u32)> = Vec::new();
        let mut homes: Vec<usize> = Vec::new();
        for event in events {
            let Some(mask) = general(event) else { continue };
            match home.get(event) {
                Some(&g) if !homes.contains(&g) => homes.push(g),
                Some(_) => {}
                None if new.iter().all(|(e, _)| *e != event) => new.push((event, mask)),
                None => {}
            }
        }
        let new_masks: Vec<u32> = new.iter().map(|(_, m)| *m).collect();
        let target = match homes.as_slice() {
            [g] if with(&masks[*g], &new_masks) => Some(*g),
            [] if new.is_empty() => None,
            [] => (0..masks.len())
                .find(|&g| with(&masks[g], &new_masks))
                .or_else(|| {
                    fits(&new_masks).then(|| {
                        plan.groups.push(Vec::new());
                        masks.push(Vec::new());
                        masks.len() - 1
                    })
                }),
            _ => None,
        };
        let mut used = homes;
        // The node's new events: all into `target`, or else each wherever it fits (existing
        // groups first, a new group when none takes it).
        for (event, mask) in new {
            let g = target
                .or_else(|| (0..masks.len()).find(|&g| with(&masks[g], &[mask])))
                .unwrap_or_else(|| {
                    plan.groups.push(Vec::new());
                    masks.push(Vec::new());
                    masks.len() - 1
                });
            plan.groups[g].push(event);
            masks[g].push(mask);
            home.insert(event, g);
            if !used.contains(&g) {
                used.push(g);
            }
        }
        if let (true, Some(node)) = (used.len() > 1, node) {
            plan.split.push(node);
        }
    }
    plan.groups.retain(|g| !g.is_empty());
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_lists_parse_as_the_data_writes_them() {
        assert_eq!(Place::parse("0-3"), Some(Place::General(0b1111)));
        assert_eq!(Place::parse("0,2-3"), Some(Place::General(0b1101)));
        assert_eq!(Place::parse("fixed1"), Some(Place::Fixed(1)));
        assert_eq!(Place::parse("3"), Some(Place::General(0b1000)));
        assert_eq!(Place::parse("x"), None);
        assert_eq!(Place::parse("5-2"), None);
    }

    #[test]
    fn a_group_fits_when_every_event_gets_its_own_allowed_counter() {
        // Two events that only counter 3 takes cannot count together.
        assert!(!fits(&[0b1000, 0b1000]));
        // 0-3, 0-3, 3, 2: 3 and 2 are taken by the narrow ones, 0 and 1 by the others.
        assert!(fits(&[0b1111, 0b1111, 0b1000, 0b0100]));
        // Five events on four counters never fit.
        assert!(!fits(&[0b1111; 5]));
        assert!(fits(&[]));
    }

    #[test]
    fn nodes_keep_their_inputs_in_one_group_where_the_counters_allow() {
        let any4 = |_: &str| Some(0b1111u32);
        // a, b read by n1; b, c by n2 (joins n1's group); d, e, f by n3 (no room: a new group).
        let nodes = vec![
            ("n1", vec!["a", "b"]),
            ("n2", vec!["b", "c"]),
            ("n3", vec!["d", "e", "f"]),
        ];
        let plan = plan(&nodes, &["g"], any4);
        assert_eq!(
            plan.groups,
            vec![vec!["a", "b", "c", "g"], vec!["d", "e", "f"]]
        );
        assert!(plan.split.is_empty());
        // A node reading events already in two groups is split, and said so.
        let nodes = vec![
            ("n1", vec!["a", "b", "c", "d"]),
            ("n2", vec!["e", "f", "g", "h"]),
            ("n3", vec!["a", "e"]),
        ];
        let split = super::plan(&nodes, &[], any4);
        assert_eq!(split.groups.len(), 2);
        assert_eq!(split.split, vec!["n3"]);
        // Fixed-counter and PERF_METRICS events are the caller's: not placed here.
        let only_general = |e: &str| (e != "clock").then_some(0b11u32);
        let small = super::plan(&[("n", vec!["clock", "x", "y", "z"])], &[], only_general);
        assert_eq!(small.groups, vec![vec!["x", "y"], vec!["z"]]);
        assert_eq!(small.split, vec!["n"], "three events on two counters");
    }
}
