//! Separated values (`--csv`, `-x SEP`), one line per thread (or group) per window.

use super::Shown;
use crate::{
    attrib::Window,
    model::{
        columns::{NodeColumn, view_nodes},
        rows::{Row, RowOptions, Who},
    },
};

/// Every part's node columns; empty without TopDown.
fn nodes(options: &RowOptions) -> Vec<NodeColumn> {
    options.topdown.as_ref().map_or_else(Vec::new, view_nodes)
}

/// The header line.
pub fn header(shown: &Shown<'_>, sep: u8) -> String {
    let Shown {
        set,
        columns,
        options,
    } = *shown;
    let mut fields: Vec<String> = std::iter::once("time_s")
        .chain(Who::key_names(options.group_by()).iter().copied())
        .chain(columns.iter().map(|c| c.key))
        .map(String::from)
        .collect();
    for name in set.names() {
        fields.push(name.to_owned());
        fields.push(format!("{name}:run_percent"));
    }
    fields.extend(
        nodes(options)
            .into_iter()
            .map(|c| format!("{}{}", c.prefix, c.node.name)),
    );
    if let Some(view) = &options.topdown {
        fields.extend(view.parts.iter().map(|p| format!("{}bottleneck", p.prefix)));
    }
    fields.push("verdict".into());
    if options.group.is_none() {
        fields.push("exited".into());
    }
    records(sep, std::iter::once(fields))
}

/// One line per row; the time field is the window's end, or `total` for the run summary.
pub fn lines(window: &Window, rows: &[&Row], shown: &Shown<'_>, sep: u8, is_final: bool) -> String {
    let Shown {
        set,
        columns,
        options,
    } = *shown;
    let nodes = nodes(options);
    let time = if is_final {
        "total".to_owned()
    } else {
        format!("{:.6}", (window.start + window.length).as_secs_f64())
    };
    records(
        sep,
        rows.iter().map(|row| {
            let mut fields = vec![time.clone()];
            fields.extend(row.who.key_values(false));
            fields.extend(columns.iter().map(|c| c.field(row)));
            for value in row.counters.iter().take(set.counters.len()) {
                fields.push(super::count_cell(value.scaled()));
                fields.push(format!("{:.2}", value.reading.running_fraction() * 100.0));
            }
            for column in &nodes {
                let value = column.of(row).map(|n| n.value);
                fields.push(value.map_or_else(String::new, |v| format!("{v:.6}")));
            }
            for td in &row.topdown {
                let bottleneck = td.as_ref().and_then(|td| td.bottleneck);
                fields.push(bottleneck.unwrap_or_default().to_owned());
            }
            fields.push(row.verdict.words().unwrap_or_default().to_owned());
            if let Some(thread) = row.who.thread() {
                fields.push(u8::from(thread.exited).to_string());
            }
            fields
        }),
    )
}

/// `records` written with separator `sep`, fields quoted where CSV needs it (the separator, a
/// quote or a line break in them: event names such as `cpu/event=0xc2,umask=0x2/u`, comms).
fn records(sep: u8, records: impl Iterator<Item = Vec<String>>) -> String {
    let mut writer = csv::WriterBuilder::new()
        .delimiter(sep)
        .from_writer(Vec::new());
    for record in records {
        // Writing to memory cannot fail.
        let _ = writer.write_record(&record);
    }
    let bytes = writer.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_holding_the_separator_or_quotes_are_quoted() {
        let text = records(
            b',',
            [
                vec!["cpu/event=0xc2,umask=0x2/u".into(), "plain".into()],
                vec!["say \"x\"".into(), "two\nlines".into()],
            ]
            .into_iter(),
        );
        assert_eq!(
            text,
            "\"cpu/event=0xc2,umask=0x2/u\",plain\n\"say \"\"x\"\"\",\"two\nlines\"\n"
        );
        let parsed: Vec<csv::StringRecord> = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.as_bytes())
            .records()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(parsed[0].get(0), Some("cpu/event=0xc2,umask=0x2/u"));
        assert_eq!(parsed[1].get(1), Some("two\nlines"));
        assert_eq!(records(b';', [vec!["a,b".into()]].into_iter()), "a,b\n");
    }
}
