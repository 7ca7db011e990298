//! Separated values (`--csv`, `-x SEP`), one line per thread per window.

use std::fmt::Write as _;

use super::rows::Row;
use crate::{attrib::Window, pmu::counter_set::CounterSet};

/// The header line.
pub fn header(set: &CounterSet, sep: &str) -> String {
    let mut fields: Vec<String> = [
        "time_s",
        "tid",
        "pid",
        "comm",
        "cgroup",
        "on_cpu_ns",
        "cpu_percent",
        "switches",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for name in set.names() {
        fields.push(name.to_owned());
        fields.push(format!("{name}:run_percent"));
    }
    fields.push("exited".into());
    fields.join(sep) + "\n"
}

/// One line per row; the time field is the window's end, or `total` for the run summary.
pub fn lines(window: &Window, rows: &[Row], set: &CounterSet, sep: &str, is_final: bool) -> String {
    let time = if is_final {
        "total".to_owned()
    } else {
        format!("{:.6}", (window.start + window.length).as_secs_f64())
    };
    let mut out = String::new();
    for row in rows {
        let mut fields = vec![
            time.clone(),
            row.tid.to_string(),
            row.pid.to_string(),
            quote(&row.comm, sep),
            quote(&row.cgroup, sep),
            row.on_cpu_ns.to_string(),
            format!("{:.2}", row.cpu_percent),
            row.switches.to_string(),
        ];
        for value in row.counters.iter().take(set.counters.len()) {
            fields.push(format!("{:.0}", value.scaled()));
            fields.push(format!("{:.2}", value.running_fraction() * 100.0));
        }
        fields.push(u8::from(row.exited).to_string());
        let _ = writeln!(out, "{}", fields.join(sep));
    }
    out
}

fn quote(field: &str, sep: &str) -> String {
    if field.contains(sep) || field.contains('"') || field.contains('\n') {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_holding_the_separator_are_quoted() {
        assert_eq!(quote("a,b", ","), "\"a,b\"");
        assert_eq!(quote("say \"x\"", ";"), "\"say \"\"x\"\"\"");
        assert_eq!(quote("plain", ","), "plain");
    }
}
