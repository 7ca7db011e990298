//! `topdown-bpf plot`: a recording's timelines as a picture. [`timelines`] computes what is
//! drawn (the rows with the most of the metric over the run, one value per window, and TopDown
//! Level 1 over every row where it was measured); [`svg`] only lays it out with plotters; PNG is
//! the SVG rasterized ([`crate::picture`]).

use std::collections::HashMap;

use anyhow::{Result, bail};
use plotters::prelude::*;

use super::reader::Recording;
use crate::{
    attrib::{
        groups::{GroupBy, GroupOptions},
        named,
        usage::{CounterValue, add_counters},
    },
    cli::PlotArgs,
    report::rows::{Row, RowOptions, SortKey, Who, rows},
};

/// Width of the picture, in pixels.
const WIDTH: u32 = 1100;
/// Height of one panel.
const PANEL: u32 = 380;

/// One line: whose, and its value in each window (`None`: not measured there).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// What the legend calls it.
    pub label: String,
    /// One value per window.
    pub values: Vec<Option<f64>>,
}

/// What a plot shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Timelines {
    /// The title.
    pub title: String,
    /// Each window's end, in seconds from the start of the recording.
    pub times: Vec<f64>,
    /// What the lines' values are (the y axis).
    pub metric: String,
    /// The rows with the most of the metric over the run, most first.
    pub lines: Vec<Series>,
    /// TopDown Level 1 over every row, in percent of slots, one series per node in tree
    /// order (stacked); empty when the recording has no TopDown.
    pub level1: Vec<Series>,
}

/// Draws the recording `args` names.
pub fn run(args: &PlotArgs) -> Result<()> {
    // The format first: a bad name is said before the recording is read.
    crate::picture::is_png(&args.output)?;
    let mut recording = Recording::read(&args.input)?;
    let by = if args.per_container {
        Some(GroupBy::Container)
    } else if args.per_cgroup {
        Some(GroupBy::Cgroup)
    } else {
        None
    };
    let grouping = by.map(|by| GroupOptions {
        by,
        rollup: false,
        keep: Vec::new(),
    });
    let data = timelines(&mut recording, grouping.as_ref(), &args.metric, args.top)?;
    crate::picture::write(&svg(&data)?, &args.output)
}

/// The timelines of `recording`: the `top` rows (threads, or the groups `grouping` asks for)
/// with the most of `metric` (`cpu`, or a TopDown node's name) summed over the windows.
pub fn timelines(
    recording: &mut Recording,
    grouping: Option<&GroupOptions>,
    metric: &str,
    top: usize,
) -> Result<Timelines> {
    let nodes = recording
        .topdown
        .as_ref()
        .map(|v| v.node_names())
        .unwrap_or_default();
    let node = match metric {
        "cpu" => None,
        name if nodes.contains(&name) => Some(name.to_owned()),
        name if recording.topdown.is_none() => bail!(
            "`{name}`: this recording measured no TopDown (counter set `{}`), only --metric cpu",
            recording.set.name
        ),
        name => bail!(
            "unknown metric `{name}`: use cpu or a node the recording measured ({})",
            nodes.join(", ")
        ),
    };
    if recording.windows.is_empty() {
        bail!("the recording holds no window: nothing to plot");
    }
    let options = RowOptions {
        sort: SortKey::OnCpu,
        top: None,
        topdown: recording.topdown.clone(),
        verbose: false,
        group: grouping.cloned(),
    };
    let count = recording.windows.len();
    let mut by_row: HashMap<String, (Series, f64)> = HashMap::new();
    let mut level1: Vec<Series> = Vec::new();
    let mut times = Vec::with_capacity(count);
    for (i, window) in recording.windows.iter().enumerate() {
        times.push((window.start + window.length).as_secs_f64());
        let named = named::name(window, &mut recording.names, grouping);
        let (all, _) = rows(window, named, &recording.set, &options);
        for row in &all {
            let Some(value) = row_value(row, node.as_deref()) else {
                continue;
            };
            let key = row.who.key_values(false).join("\u{1f}");
            let (series, sum) = by_row.entry(key).or_insert_with(|| {
                (
                    Series {
                        label: label(&row.who),
                        values: vec![None; count],
                    },
                    0.0,
                )
            });
            series.values[i] = Some(value);
            *sum += value;
        }
        if let Some(view) = &recording.topdown {
            let mut sum: Vec<CounterValue> = Vec::new();
            for thread in &window.threads {
                add_counters(&mut sum, &thread.counters);
            }
            let td = view.of(&recording.set, &sum).into_iter().flatten().next();
            for node in td
                .iter()
                .flat_map(|td| &td.nodes)
                .filter(|n| n.node.level == 1)
            {
                let at = level1
                    .iter()
                    .position(|s| s.label == node.node.name)
                    .unwrap_or_else(|| {
                        level1.push(Series {
                            label: node.node.name.to_owned(),
                            values: vec![None; count],
                        });
                        level1.len() - 1
                    });
                level1[at].values[i] = Some(node.value * 100.0);
            }
        }
    }
    // Between its first and last window, a row that did not run in one used no CPU there.
    if node.is_none() {
        for (series, _) in by_row.values_mut() {
            let first = series.values.iter().position(Option::is_some);
            let last = series.values.iter().rposition(Option::is_some);
            if let (Some(first), Some(last)) = (first, last) {
                for value in &mut series.values[first..=last] {
                    value.get_or_insert(0.0);
                }
            }
        }
    }
    let mut ranked: Vec<(Series, f64)> = by_row.into_values().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.label.cmp(&b.0.label)));
    ranked.truncate(top);
    let noun = match grouping.map(|g| g.by) {
        None => "thread",
        Some(GroupBy::Cgroup) => "cgroup",
        Some(GroupBy::Container) => "container",
    };
    let metric = node.map_or_else(|| "%CPU".to_owned(), |n| format!("{n} %"));
    let machine = &recording.header.machine;
    Ok(Timelines {
        title: format!(
            "{metric} per {noun}, top {} - {} ({}, {} CPUs)",
            ranked.len(),
            machine.hostname,
            machine.kernel,
            machine.cpus
        ),
        times,
        metric,
        lines: ranked.into_iter().map(|(series, _)| series).collect(),
        level1,
    })
}

/// The row's value of the metric: %CPU, or a node's share in percent (the first core type
/// that measured it).
fn row_value(row: &Row, node: Option<&str>) -> Option<f64> {
    match node {
        None => Some(row.cpu_percent),
        Some(name) => row
            .topdown
            .iter()
            .flatten()
            .find_map(|td| td.value(name))
            .map(|v| v * 100.0),
    }
}

/// A row's name in the legend: `comm (tid)`, or the group's label.
fn label(who: &Who) -> String {
    match who {
        Who::Thread(t) if t.folded > 0 => t.comm.clone(),
        Who::Thread(t) => format!("{} ({})", t.comm, t.tid),
        Who::Group { group, .. } => group.label.clone(),
    }
}

/// Colours of the lines (Tableau 10), in rank order.
const LINE_COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Colour of a Level 1 node, as TopDown diagrams colour them.
fn node_colour(name: &str) -> RGBColor {
    match name {
        "tma_frontend_bound" => RGBColor(148, 103, 189),
        "tma_bad_speculation" => RGBColor(214, 39, 40),
        "tma_backend_bound" => RGBColor(31, 119, 180),
        "tma_retiring" => RGBColor(44, 160, 44),
        _ => RGBColor(127, 127, 127),
    }
}

/// `data` as an SVG document.
pub fn svg(data: &Timelines) -> Result<String> {
    let panels = if data.level1.is_empty() { 1 } else { 2 };
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (WIDTH, PANEL * panels)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let areas = root.split_evenly((usize::try_from(panels).unwrap_or(1), 1));
        draw_lines(&areas[0], data)?;
        if let Some(area) = areas.get(1) {
            draw_level1(area, data)?;
        }
        root.present().map_err(draw_error)?;
    }
    Ok(text)
}

fn draw_error<E: std::error::Error + Send + Sync + 'static>(
    error: DrawingAreaErrorKind<E>,
) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {error}")
}

fn x_range(data: &Timelines) -> std::ops::Range<f64> {
    0.0..data.times.last().copied().unwrap_or(1.0).max(1e-3)
}

fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    data: &Timelines,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let top = data
        .lines
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b));
    let mut chart = ChartBuilder::on(area)
        .caption(&data.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x_range(data), 0.0..(top * 1.1).max(1.0))
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(data.metric.as_str())
        .draw()
        .map_err(draw_error)?;
    for (i, series) in data.lines.iter().enumerate() {
        let colour = LINE_COLOURS[i % LINE_COLOURS.len()];
        let mut legend = true;
        for segment in segments(&data.times, &series.values) {
            let drawn = chart
                .draw_series(LineSeries::new(segment, colour.stroke_width(2)))
                .map_err(draw_error)?;
            if std::mem::take(&mut legend) {
                drawn.label(series.label.as_str()).legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2))
                });
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(draw_error)?;
    Ok(())
}

fn draw_level1<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    data: &Timelines,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .caption(
            "TopDown Level 1 over all rows (% of slots)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x_range(data), 0.0..100.0)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("% of slots")
        .draw()
        .map_err(draw_error)?;
    // Stacked: each node's area runs from the sum below it to the sum with it; drawn top
    // down so each lower area covers the one above only where it belongs.
    let count = data.times.len();
    let mut cumulative: Vec<Vec<f64>> = Vec::new();
    let mut below = vec![0.0; count];
    for series in &data.level1 {
        for (sum, value) in below.iter_mut().zip(&series.values) {
            *sum += value.unwrap_or(0.0);
        }
        cumulative.push(below.clone());
    }
    for (series, upper) in data.level1.iter().zip(&cumulative).rev() {
        let colour = node_colour(&series.label);
        chart
            .draw_series(AreaSeries::new(
                data.times.iter().copied().zip(upper.iter().copied()),
                0.0,
                colour.mix(0.85),
            ))
            .map_err(draw_error)?
            .label(series.label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(draw_error)?;
    Ok(())
}

/// The runs of measured points of one series, as `(time, value)` lines. A value holds over its
/// window, so a run of one point is drawn across its window (from the previous window's end).
fn segments(times: &[f64], values: &[Option<f64>]) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (i, (&t, value)) in times.iter().zip(values).enumerate() {
        match value {
            Some(v) => {
                if let Some(run) = out.last_mut() {
                    if run.is_empty() && (i + 1 == times.len() || values[i + 1].is_none()) {
                        run.push((if i == 0 { 0.0 } else { times[i - 1] }, *v));
                    }
                    run.push((t, *v));
                }
            }
            None if out.last().is_some_and(|s| !s.is_empty()) => out.push(Vec::new()),
            None => {}
        }
    }
    out.retain(|s| !s.is_empty());
    out
}
