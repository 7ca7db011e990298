//! `perf stat -x SEP` output: `value,unit,event,run time,run %[,metric value,metric unit]`, with
//! an interval timestamp first under `-I`. Event names may hold the separator
//! (`cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/` in a comma-separated file), so the fixed fields
//! are taken from both ends and the event is what lies between.

use std::collections::BTreeMap;

use anyhow::{Result, bail};

/// One event's count over the whole recording (summed over intervals).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EventCount {
    /// The count, as perf scaled it.
    pub value: f64,
    /// The lowest share of time the event was counting, in percent (100 when never
    /// multiplexed).
    pub min_run_percent: f64,
}

/// Counts by event name, as perf wrote the name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerfStatCounts {
    /// Event name -> count.
    pub events: BTreeMap<String, EventCount>,
    /// Events perf could not count (`<not counted>`, `<not supported>`).
    pub not_counted: Vec<String>,
    /// Number of interval timestamps seen (0 without `-I`).
    pub intervals: usize,
}

/// Parses `text` written by `perf stat -x sep`. Errors name the line.
pub fn parse(text: &str, sep: &str) -> Result<PerfStatCounts> {
    let mut out = PerfStatCounts::default();
    let mut last_time: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(sep).collect();
        let Some(row) = row(&fields, sep) else {
            bail!(
                "line {number}: not `perf stat -x{sep}` output (expected value{sep}unit{sep}event\
                 {sep}run time{sep}run %[{sep}metric{sep}unit], optionally after an interval \
                 time): {}",
                excerpt(line)
            );
        };
        if !(0.0..=100.0).contains(&row.run_percent) {
            bail!(
                "line {number}: run percentage {} is not within 0 to 100",
                row.run_percent
            );
        }
        if let Some(time) = row.time
            && last_time.as_deref() != Some(time)
        {
            out.intervals += 1;
            last_time = Some(time.to_owned());
        }
        match row.value.trim().parse::<f64>() {
            Ok(value) if value.is_finite() && value >= 0.0 => {
                let entry = out.events.entry(row.event).or_insert(EventCount {
                    value: 0.0,
                    min_run_percent: 100.0,
                });
                entry.value += value;
                if !entry.value.is_finite() {
                    bail!("line {number}: the counts of one event add up past any count");
                }
                entry.min_run_percent = entry.min_run_percent.min(row.run_percent);
            }
            Ok(value) => {
                bail!("line {number}: {value} is not a count (counts are finite and not negative)")
            }
            Err(_) if row.value.starts_with("<not") => out.not_counted.push(row.event),
            Err(_) => bail!("line {number}: `{}` is not a count", excerpt(row.value)),
        }
    }
    if out.events.is_empty() && out.not_counted.is_empty() {
        bail!("no counts found: is this `perf stat -x{sep}` output?");
    }
    Ok(out)
}

/// At most about 100 characters of `text`, for quoting bad input in one line.
fn excerpt(text: &str) -> String {
    const MAX: usize = 100;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}... ({} bytes)", &text[..end], text.len()),
        None => text.to_owned(),
    }
}

struct Row<'a> {
    time: Option<&'a str>,
    value: &'a str,
    event: String,
    run_percent: f64,
}

/// Splits one line, trying the layouts perf writes: with or without an interval time first,
/// with or without the two metric fields last.
fn row<'a>(fields: &[&'a str], sep: &str) -> Option<Row<'a>> {
    for lead in [0, 1] {
        if lead == 1 && fields.first()?.trim().parse::<f64>().is_err() {
            continue;
        }
        for tail in [4, 2] {
            if fields.len() < lead + 2 + 1 + tail {
                continue;
            }
            let end = fields.len() - tail;
            let (run_time, run_percent) = (fields[end], fields[end + 1]);
            let time_ok = run_time.trim().parse::<u64>().is_ok();
            let Ok(run_percent) = run_percent.trim().parse::<f64>() else {
                continue;
            };
            // A unit is never a number and an event never starts empty: that rules out reading
            // an interval line as a plain one.
            let unit_ok = fields[lead + 1].trim().parse::<f64>().is_err();
            let event = fields[lead + 2..end].join(sep);
            if !time_ok || !unit_ok || fields[lead + 2].trim().is_empty() {
                continue;
            }
            return Some(Row {
                time: (lead == 1).then(|| fields[0]),
                value: fields[lead],
                event: event.trim().to_owned(),
                run_percent,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_that_are_no_counts_are_refused_with_their_line() {
        let line = |value: &str| format!("{value},,cycles,1000,100.00,,\n");
        for bad in ["inf", "1e309", "-1", "NaN"] {
            let error = parse(
                &format!("1,,instructions,1000,100.00,,\n{}", line(bad)),
                ",",
            )
            .unwrap_err()
            .to_string();
            assert!(error.starts_with("line 2:"), "{bad}: {error}");
        }
        let twice = format!("{}{}", line("1.7e308"), line("1.7e308"));
        let error = parse(&twice, ",").unwrap_err().to_string();
        assert!(
            error.contains("line 2") && error.contains("add up"),
            "{error}"
        );
        let error = parse("5,,cycles,1000,150.00,,\n", ",")
            .unwrap_err()
            .to_string();
        assert!(error.contains("not within 0 to 100"), "{error}");
        let long = "x".repeat(5_000_000);
        let error = parse(&long, ",").unwrap_err().to_string();
        assert!(
            error.len() < 400,
            "a bad line is quoted short: {} bytes",
            error.len()
        );
        assert!(error.contains("5000000 bytes"), "{}", &error[..200]);
    }

    #[test]
    fn reads_names_holding_the_separator_and_metric_fields() {
        let text = "# started on Sun Nov 22 2026\n\n\
            1000000,,slots,2000000,100.00,,\n\
            300000,,topdown-fe-bound,2000000,100.00,30.0,%  tma_frontend_bound\n\
            42,,cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/,1000000,50.00,,\n\
            <not counted>,,INT_MISC.UOP_DROPPING,0,0.00,,\n";
        let counts = parse(text, ",").unwrap();
        assert_eq!(counts.events["slots"].value, 1e6);
        assert_eq!(counts.events["topdown-fe-bound"].value, 3e5);
        let recovery = counts.events["cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/"];
        assert_eq!(recovery.value, 42.0);
        assert_eq!(recovery.min_run_percent, 50.0);
        assert_eq!(counts.not_counted, ["INT_MISC.UOP_DROPPING"]);
        assert_eq!(counts.intervals, 0);
    }

    #[test]
    fn sums_intervals_and_reads_old_layouts() {
        let text = "1.001,100,,cycles,1000,100.00\n1.001,5,,instructions,1000,100.00\n\
                    2.002,150,,cycles,1000,80.00\n";
        let counts = parse(text, ",").unwrap();
        assert_eq!(counts.intervals, 2);
        assert_eq!(counts.events["cycles"].value, 250.0);
        assert_eq!(counts.events["cycles"].min_run_percent, 80.0);
        let semicolons = parse("7;;a,b;10;100.00;;\n", ";").unwrap();
        assert_eq!(semicolons.events["a,b"].value, 7.0);
    }

    #[test]
    fn malformed_lines_are_named_by_number() {
        let error = parse("1,,cycles,10,100.00,,\nnonsense\n", ",")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("line 2:"), "{error}");
        let error = parse("abc,,cycles,10,100.00,,\n", ",")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("line 1:") && error.contains("abc"),
            "{error}"
        );
        assert!(parse("# only a comment\n", ",").is_err());
    }
}
