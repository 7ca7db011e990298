//! `topdown-bpf plot`'s picture: the model's timelines ([`crate::model::timelines`]) laid out
//! with plotters as SVG (PNG is the SVG rasterized, [`super::write`]).

use anyhow::Result;
use plotters::prelude::*;

use crate::model::timelines::Timelines;

/// Width of the picture, in pixels.
const WIDTH: u32 = 1100;
/// Height of one panel.
const PANEL: u32 = 380;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        attrib::Window,
        model::timelines::timelines,
        recording::{fixtures::*, reader::Recording},
    };

    #[test]
    fn plot_timelines_rank_rows_and_stack_level_1() {
        let mut recording = topdown_recording();
        let data = timelines(&mut recording, None, "cpu", 1).unwrap();
        assert_eq!(data.times.len(), 5);
        assert_eq!(data.lines.len(), 1, "--top 1");
        assert_eq!(data.lines[0].label, "alpha (1)");
        for value in &data.lines[0].values {
            assert!(
                (value.unwrap() - 50.0).abs() < 1e-9,
                "50 ms of 100, in %CPU: {value:?}"
            );
        }
        let level1: Vec<(&str, f64)> = data
            .level1
            .iter()
            .map(|s| (s.label.as_str(), s.values[0].unwrap()))
            .collect();
        // Percent of slots.
        let expected = [
            ("tma_frontend_bound", 10.0),
            ("tma_bad_speculation", 5.0),
            ("tma_backend_bound", 60.0),
            ("tma_retiring", 25.0),
        ];
        assert_eq!(level1.len(), 4, "{level1:?}");
        for (name, percent) in expected {
            let got = level1.iter().find(|(n, _)| *n == name).unwrap().1;
            assert!((got - percent).abs() < 1e-9, "{name}: {got}");
        }
        let node = timelines(&mut recording, None, "tma_backend_bound", 2).unwrap();
        assert_eq!(node.lines.len(), 2);
        assert!((node.lines[1].values[3].unwrap() - 60.0).abs() < 1e-9);
        let error = timelines(&mut recording, None, "tma_nope", 2).unwrap_err();
        assert!(
            error.to_string().contains("unknown metric `tma_nope`"),
            "{error}"
        );

        let svg = svg(&data).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        for name in ["alpha (1)", "tma_backend_bound", "tma_retiring", "%CPU"] {
            assert!(
                texts.iter().any(|t| t.contains(name)),
                "{name} in {texts:?}"
            );
        }
        assert!(
            !texts.iter().any(|t| t.contains("beta")),
            "only the top row: {texts:?}"
        );
    }

    #[test]
    fn software_recordings_plot_cpu_only() {
        let windows: Vec<Window> = (1..=3).map(window).collect();
        let (_dir, path) = recorded(&windows, None);
        let mut read = Recording::read(&path).unwrap();
        read.topdown = None;
        let error = timelines(&mut read, None, "tma_retiring", 3).unwrap_err();
        assert!(error.to_string().contains("measured no TopDown"), "{error}");
        let data = timelines(&mut read, None, "cpu", 3).unwrap();
        assert!(data.level1.is_empty());
        assert_eq!(data.lines.len(), 2);
    }

    /// Any value column of the rows is a metric, in the unit its axis says: switches as
    /// counted, waits in milliseconds (the fixture's alpha waits 250 x i + 1 ns in window i);
    /// a column thread rows do not have is refused with the ones they do.
    #[test]
    fn any_value_column_of_the_rows_is_a_metric_in_its_unit() {
        let windows: Vec<Window> = (1..=3).map(window).collect();
        let (_dir, path) = recorded(&windows, None);
        let mut read = Recording::read(&path).unwrap();
        let alpha = |data: &Timelines| {
            data.lines
                .iter()
                .find(|s| s.label == "alpha (1)")
                .expect("alpha's line")
                .values
                .clone()
        };
        let switches = timelines(&mut read, None, "switches", 3).unwrap();
        assert_eq!(alpha(&switches), [Some(1.0); 3], "{switches:?}");
        let waits = timelines(&mut read, None, "run_delay_ns", 3).unwrap();
        assert_eq!(waits.metric, "WAIT ms");
        for (i, value) in alpha(&waits).iter().enumerate() {
            let ns = 250.0 * (i as f64 + 1.0) + 1.0;
            assert!((value.unwrap() - ns / 1e6).abs() < 1e-12, "{value:?}");
        }
        let error = timelines(&mut read, None, "throttled_ns", 3)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("unknown metric `throttled_ns`") && error.contains("run_delay_ns"),
            "{error}"
        );
    }
}
