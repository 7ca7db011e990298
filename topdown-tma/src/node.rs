//! The TopDown tree: every node the models produce, with its level, parent and display order,
//! and the default thresholds for models whose data gives none (AMD, Arm, old Skylake files):
//! Intel's big-core thresholds from perf's metrics for the same nodes. Level 1 and 2 are listed
//! here; Level 3 nodes come from the data ([`super::generated::LEVEL3`]) and follow their parent.

use super::generated::LEVEL3;

/// One node of the tree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    /// perf's metric name, e.g. `tma_frontend_bound`.
    pub name: &'static str,
    /// 1, 2 or 3.
    pub level: u8,
    /// The node above (Level 1 above Level 2, Level 2 above Level 3).
    pub parent: Option<&'static str>,
    /// Position in tree order.
    pub order: u16,
    /// Over-threshold when the value exceeds this (used when the data has no threshold).
    pub default_threshold: f64,
}

macro_rules! nodes {
    ($(($name:literal, $level:literal, $parent:expr, $threshold:literal)),* $(,)?) => {
        &[$(($name, $level, $parent, $threshold)),*]
    };
}

/// Room in the order between two Level 1/2 nodes for the Level 3 children of the first.
const LEVEL3_SPACE: u16 = 64;

/// Over-threshold for a Level 3 node whose data gives no threshold (every model with Level 3
/// has thresholds; toplev's default for deeper nodes).
const DEFAULT_LEVEL3_THRESHOLD: f64 = 0.1;

/// Tree order: each Level 1 node, then its children.
const TREE: &[(&str, u8, Option<&str>, f64)] = nodes![
    ("tma_frontend_bound", 1, None, 0.15),
    ("tma_fetch_latency", 2, Some("tma_frontend_bound"), 0.1),
    ("tma_fetch_bandwidth", 2, Some("tma_frontend_bound"), 0.1),
    // Intel's E-cores (perf's Gracemont, Crestmont and Skymont files): instruction fetch.
    ("tma_ifetch_latency", 2, Some("tma_frontend_bound"), 0.15),
    ("tma_ifetch_bandwidth", 2, Some("tma_frontend_bound"), 0.1),
    ("tma_bad_speculation", 1, None, 0.15),
    (
        "tma_branch_mispredicts",
        2,
        Some("tma_bad_speculation"),
        0.1
    ),
    ("tma_machine_clears", 2, Some("tma_bad_speculation"), 0.1),
    ("tma_backend_bound", 1, None, 0.2),
    ("tma_memory_bound", 2, Some("tma_backend_bound"), 0.2),
    ("tma_core_bound", 2, Some("tma_backend_bound"), 0.1),
    ("tma_backend_bound_aux", 1, None, 0.2),
    ("tma_resource_bound", 2, Some("tma_backend_bound_aux"), 0.2),
    ("tma_smt_contention", 1, None, 0.1),
    ("tma_retiring", 1, None, 0.7),
    ("tma_light_operations", 2, Some("tma_retiring"), 0.6),
    ("tma_heavy_operations", 2, Some("tma_retiring"), 0.1),
    ("tma_base", 2, Some("tma_retiring"), 0.6),
    ("tma_ms_uops", 2, Some("tma_retiring"), 0.05),
];

impl Node {
    /// The node with perf metric name `name`.
    pub fn named(name: &str) -> Option<Self> {
        if let Some((at, &(name, level, parent, default_threshold))) =
            TREE.iter().enumerate().find(|(_, node)| node.0 == name)
        {
            return Some(Self {
                name,
                level,
                parent,
                order: at as u16 * LEVEL3_SPACE,
                default_threshold,
            });
        }
        // Level 3: after its parent, among its siblings by name.
        let (name, parent) = *LEVEL3.iter().find(|(node, _)| *node == name)?;
        let under = Self::named(parent)?;
        let rank = LEVEL3
            .iter()
            .filter(|(_, p)| *p == parent)
            .position(|(node, _)| *node == name)?;
        Some(Self {
            name,
            level: 3,
            parent: Some(parent),
            order: under.order + 1 + rank as u16,
            default_threshold: DEFAULT_LEVEL3_THRESHOLD,
        })
    }

    /// This node with its parent as a model that has the nodes `has` says it has: Intel's
    /// E-core TMA (v4, and the Sierra Forest / Grand Ridge files) puts Resource_Bound under
    /// Backend_Bound, having no Backend_Bound_Aux as Gracemont and Tremont do; perf's E-core
    /// files put `tma_icache_misses` and `tma_itlb_misses` under `tma_ifetch_latency`, the
    /// E-core's `tma_fetch_latency`.
    #[must_use]
    pub fn in_model(mut self, has: impl Fn(&str) -> bool) -> Self {
        if self.parent == Some("tma_backend_bound_aux") && !has("tma_backend_bound_aux") {
            self.parent = Some("tma_backend_bound");
        }
        if self.level == 3
            && self.parent == Some("tma_fetch_latency")
            && !has("tma_fetch_latency")
            && has("tma_ifetch_latency")
            && let Some(under) = Self::named("tma_ifetch_latency")
        {
            self.order = under.order + (self.order % LEVEL3_SPACE);
            self.parent = Some("tma_ifetch_latency");
        }
        self
    }

    /// Whether `value` is over this node's default threshold.
    pub fn default_over(&self, value: f64) -> bool {
        value > self.default_threshold
    }

    /// Short column title, e.g. `FE` or `FE.lat`.
    pub fn short(&self) -> &'static str {
        match self.name {
            "tma_frontend_bound" => "Frontend",
            "tma_fetch_latency" => "FE.latency",
            "tma_fetch_bandwidth" => "FE.bandwidth",
            "tma_ifetch_latency" => "FE.ifetch_lat",
            "tma_ifetch_bandwidth" => "FE.ifetch_bw",
            "tma_bad_speculation" => "BadSpec",
            "tma_branch_mispredicts" => "BS.mispredict",
            "tma_machine_clears" => "BS.clears",
            "tma_backend_bound" => "Backend",
            "tma_memory_bound" => "BE.memory",
            "tma_core_bound" => "BE.core",
            "tma_backend_bound_aux" => "BackendAux",
            "tma_resource_bound" => "BEA.resource",
            "tma_smt_contention" => "SMT",
            "tma_retiring" => "Retiring",
            "tma_light_operations" => "RET.light",
            "tma_heavy_operations" => "RET.heavy",
            "tma_base" => "RET.base",
            "tma_ms_uops" => "RET.ms",
            // Level 3: perf's name without its prefix (`l1_bound`, `ports_utilization`).
            other => other.strip_prefix("tma_").unwrap_or(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_two_node_hangs_under_a_level_one_node_listed_before_it() {
        for (order, &(name, level, parent, _)) in TREE.iter().enumerate() {
            let node = Node::named(name).unwrap();
            assert_eq!(node.order as usize, order * LEVEL3_SPACE as usize);
            match parent {
                None => assert_eq!(level, 1, "{name}"),
                Some(parent) => {
                    let parent = Node::named(parent).unwrap();
                    assert_eq!((level, parent.level), (2, 1), "{name}");
                    assert!(parent.order < node.order, "{name} after its parent");
                }
            }
        }
        assert!(Node::named("tma_nope").is_none());
    }

    #[test]
    fn level_three_nodes_follow_their_level_two_parent() {
        assert!(LEVEL3.len() > 40);
        for &(name, parent) in LEVEL3 {
            let node = Node::named(name).unwrap();
            let parent = Node::named(parent).unwrap();
            assert_eq!((node.level, parent.level), (3, 2), "{name}");
            assert!(parent.order < node.order, "{name}");
            let next = TREE
                .iter()
                .filter_map(|n| Node::named(n.0))
                .find(|n| n.order > parent.order)
                .map_or(u16::MAX, |n| n.order);
            assert!(node.order < next, "{name} before the node after its parent");
        }
        assert_eq!(Node::named("tma_l1_bound").unwrap().short(), "l1_bound");
    }
}
