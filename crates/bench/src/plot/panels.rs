//! The four panels of a bench plot, drawn on any plotters backend (SVG or bitmap).

use plotters::coord::Shift;
use plotters::prelude::*;

use super::cdf;
use super::font::FAMILY as FONT;
use crate::samples::Samples;

/// Draws the title and the four panels on `root` and presents it.
pub(super) fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    samples: &Samples,
    title: &str,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root.titled(title, (FONT, 22)).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((2, 2));
    cdf_panel(
        &panels[0],
        "Time to first token",
        &[("TTFT", &samples.ttft_ms, BLUE)],
    )?;
    cdf_panel(
        &panels[1],
        "Time per output token / inter-token latency",
        &[
            ("TPOT", &samples.tpot_ms, RED),
            ("ITL", &samples.itl_ms, GREEN),
        ],
    )?;
    cdf_panel(
        &panels[2],
        "End-to-end latency",
        &[("E2E", &samples.e2el_ms, MAGENTA)],
    )?;
    throughput_panel(&panels[3], &samples.throughput_per_second())?;
    root.present().map_err(|e| e.to_string())
}

fn cdf_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    series: &[(&str, &[f64], RGBColor)],
) -> Result<(), String> {
    let x_max = series
        .iter()
        .flat_map(|(_, v, _)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..1.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("milliseconds")
        .y_desc("fraction of requests")
        .draw()
        .map_err(|e| e.to_string())?;
    for &(name, values, color) in series {
        let points = cdf(values);
        let label = format!("{name} ({} samples)", points.len());
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

fn throughput_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    per_second: &[f64],
) -> Result<(), String> {
    let y_max = per_second.iter().copied().fold(0.0, f64::max).max(1.0) * 1.1;
    let x_max = per_second.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption("Output throughput over time", (FONT, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds since the start of the run")
        .y_desc("output tokens/s")
        .draw()
        .map_err(|e| e.to_string())?;
    let steps = per_second
        .iter()
        .enumerate()
        .flat_map(|(i, &v)| [(i as f64, v), (i as f64 + 1.0, v)]);
    chart
        .draw_series(LineSeries::new(steps, BLUE.stroke_width(2)))
        .map_err(|e| e.to_string())?
        .label("output tokens/s")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
