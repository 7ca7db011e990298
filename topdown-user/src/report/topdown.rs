//! TopDown nodes as a tree (toplev style, `<==` on the bottleneck) and as JSON.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::tma::TopDown;

/// One line per node, children indented under their parent. Level 2 nodes under their
/// threshold are left out unless `verbose`.
pub fn tree(td: &TopDown, verbose: bool) -> String {
    let mut out = String::new();
    for node in &td.nodes {
        if node.node.level > 1 && !node.over_threshold && !verbose {
            continue;
        }
        let indent = "  ".repeat(usize::from(node.node.level));
        let name = format!("{indent}{}", node.node.name);
        let mark = if td.bottleneck == Some(node.node.name) {
            "  <=="
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{name:<30} {:>6.1} % of slots{mark}",
            node.value * 100.0
        );
    }
    out
}

/// `{metric name: fraction}`, in tree order.
pub fn values_json(td: &TopDown) -> Value {
    let nodes: Map<String, Value> = td
        .nodes
        .iter()
        .map(|n| (n.node.name.to_owned(), json!(n.value)))
        .collect();
    Value::Object(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tma::{NodeValue, node::Node};

    fn td() -> TopDown {
        let node = |name, value, over| NodeValue {
            node: Node::named(name).unwrap(),
            value,
            over_threshold: over,
            run_fraction: 1.0,
            multiplexed_apart: false,
        };
        TopDown {
            nodes: vec![
                node("tma_frontend_bound", 0.1, false),
                node("tma_fetch_latency", 0.05, false),
                node("tma_backend_bound", 0.6, true),
                node("tma_memory_bound", 0.5, true),
            ]
            .into(),
            bottleneck: Some("tma_memory_bound"),
            out_of_range: Vec::new(),
        }
    }

    #[test]
    fn tree_marks_the_bottleneck_and_hides_quiet_children() {
        let text = tree(&td(), false);
        assert!(text.contains("tma_frontend_bound"), "{text}");
        assert!(!text.contains("tma_fetch_latency"), "{text}");
        let memory = text
            .lines()
            .find(|l| l.contains("tma_memory_bound"))
            .unwrap();
        assert!(
            memory.ends_with("<==") && memory.contains("50.0 %"),
            "{memory}"
        );
        assert!(tree(&td(), true).contains("tma_fetch_latency"));
        assert_eq!(values_json(&td())["tma_backend_bound"], 0.6);
    }
}
