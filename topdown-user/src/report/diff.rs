//! `diff`'s outputs: a table (what changed first, then the largest changes that did not stand
//! out, then rows seen on one side only) and one JSON document for scripts. Formatting only:
//! the changes, their tests and their order come from [`crate::model::diff`].

use std::io::Write;

use anyhow::Result;
use serde_json::json;

use crate::model::diff::{Change, Diff};

/// What was compared, for the first line and the JSON.
pub struct DiffMeta {
    /// What the rows are (`thread`, `process`, `cgroup`, `container`).
    pub rows: &'static str,
    /// The before side, as given, and its windows.
    pub before: (String, usize),
    /// The after side.
    pub after: (String, usize),
}

/// The table: every flagged change, then up to `others` of the largest changes that did not
/// stand out, then up to `others` rows of each side seen on that side only.
pub fn table(out: &mut dyn Write, diff: &Diff, meta: &DiffMeta, others: usize) -> Result<()> {
    let flagged = diff.changes.iter().filter(|c| c.significant).count();
    writeln!(
        out,
        "# before: {} ({} windows); after: {} ({} windows)",
        meta.before.0, meta.before.1, meta.after.0, meta.after.1
    )?;
    writeln!(
        out,
        "# per {} and field, Welch's t over the windows, p adjusted over {} comparisons \
         (Holm); changed: p < {} and a change of at least {}% of the larger mean",
        meta.rows,
        diff.changes.len(),
        diff.test.alpha,
        diff.test.min_change * 100.0
    )?;
    let header: Vec<String> = vec![
        meta.rows.to_uppercase(),
        "FIELD".into(),
        "BEFORE".into(),
        "AFTER".into(),
        "CHANGE".into(),
        "p".into(),
        String::new(),
    ];
    let mut lines = vec![header];
    let shown = diff
        .changes
        .iter()
        .filter(|c| c.significant)
        .chain(diff.changes.iter().filter(|c| !c.significant).take(others));
    for change in shown {
        lines.push(vec![
            change.key.clone(),
            change.field.clone(),
            format!("{:.3}", change.before),
            format!("{:.3}", change.after),
            relative(change),
            p_value(change.p_adjusted),
            if change.significant {
                "changed".into()
            } else {
                String::new()
            },
        ]);
    }
    if flagged == 0 {
        writeln!(out, "# nothing changed beyond the windows' own variation")?;
    }
    write_aligned(out, &lines)?;
    for (side, rows) in [("before", &diff.only_before), ("after", &diff.only_after)] {
        if rows.is_empty() {
            continue;
        }
        let listed: Vec<String> = rows
            .iter()
            .take(others)
            .map(|r| format!("{} ({:.1} %CPU)", r.key, r.cpu_percent))
            .collect();
        let more = rows.len().saturating_sub(others);
        writeln!(
            out,
            "only {side}: {}{}",
            listed.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )?;
    }
    Ok(())
}

/// One JSON document: the test, every change, the rows of one side only.
pub fn json(out: &mut dyn Write, diff: &Diff, meta: &DiffMeta) -> Result<()> {
    let changes: Vec<_> = diff
        .changes
        .iter()
        .map(|c| {
            json!({
                "key": c.key,
                "field": c.field,
                "before": c.before,
                "after": c.after,
                "change": c.delta(),
                "relative_change": c.relative(),
                "t": c.t,
                "p": c.p,
                "p_adjusted": c.p_adjusted,
                "significant": c.significant,
                "windows": [c.before_windows, c.after_windows],
            })
        })
        .collect();
    let one_sided = |rows: &[crate::model::diff::OneSided]| -> Vec<_> {
        rows.iter()
            .map(|r| json!({"key": r.key, "cpu_percent": r.cpu_percent}))
            .collect()
    };
    let document = json!({
        "schema": "topdown-bpf/diff/v1",
        "rows": meta.rows,
        "before": {"source": meta.before.0, "windows": meta.before.1},
        "after": {"source": meta.after.0, "windows": meta.after.1},
        "test": {
            "name": "welch",
            "correction": "holm",
            "alpha": diff.test.alpha,
            "min_change": diff.test.min_change,
        },
        "changes": changes,
        "only_before": one_sided(&diff.only_before),
        "only_after": one_sided(&diff.only_after),
    });
    writeln!(out, "{document}")?;
    Ok(())
}

/// The change as a percentage of before, or the absolute change from 0.
fn relative(change: &Change) -> String {
    match change.relative() {
        Some(r) => format!("{:+.1}%", r * 100.0),
        None => format!("{:+.3}", change.delta()),
    }
}

fn p_value(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.0e}")
    } else {
        format!("{p:.4}")
    }
}

/// Left-aligns the first two columns and right-aligns the rest.
fn write_aligned(out: &mut dyn Write, lines: &[Vec<String>]) -> Result<()> {
    let columns = lines.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for line in lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            if i < 2 || i + 1 == columns {
                text.push_str(cell);
                text.push_str(&" ".repeat(pad));
            } else {
                text.push_str(&" ".repeat(pad));
                text.push_str(cell);
            }
            text.push_str("  ");
        }
        writeln!(out, "{}", text.trim_end())?;
    }
    Ok(())
}
