//! c2c's renderers: perf c2c's tables (statistics, the Shared Data Cache Line Table, the Pareto
//! rows), the sharing fixes, the per-cgroup split and the JSON document, from the model's ranked
//! and named lines (`crate::c2c`).

pub mod by_group;
pub mod json;
pub mod line_table;
pub mod pareto;
pub mod sharing;
pub mod stats;

/// perf's `fill_line`: `text` centred in dashes, `len` wide.
pub fn fill_line(text: &str, len: usize) -> String {
    let start = (len / 2).saturating_sub(text.len() / 2);
    let mut out = "-".repeat(start.saturating_sub(1));
    out.push(' ');
    out.push_str(text);
    out.push(' ');
    while out.len() < len {
        out.push('-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_line_centres_like_perf() {
        assert_eq!(
            fill_line("Data address", 32),
            "--------- Data address ---------"
        );
        assert_eq!(
            fill_line("Cacheline", 32),
            "----------- Cacheline ----------"
        );
    }
}
