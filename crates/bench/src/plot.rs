//! `kestrel bench --plot out.svg`: one SVG with four panels drawn with `plotters`:
//!
//! ```text
//! +-------------------------+-------------------------+
//! | TTFT: CDF (ms)          | TPOT and ITL: CDFs (ms) |
//! +-------------------------+-------------------------+
//! | E2E latency: CDF (ms)   | output tokens/s, per    |
//! |                         | second of the run       |
//! +-------------------------+-------------------------+
//! ```
//!
//! Only SVG is written: plotters' SVG backend emits text as `<text>` elements, so no font file
//! or system library is needed. Its bitmap (PNG) backend would need a font rasteriser (the
//! `ttf` feature links fontconfig and freetype, `ab_glyph` needs a font file shipped with the
//! binary), so a `.png` path is refused with [`PlotError::UnsupportedFormat`] before the run.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::samples::Samples;

/// Size of the whole image in pixels.
const SIZE: (u32, u32) = (1200, 900);

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The path does not end in `.svg`.
    #[error(
        "--plot {0}: only .svg is supported (PNG needs a font rasteriser with system \
         libraries; convert the SVG if a bitmap is needed)"
    )]
    UnsupportedFormat(PathBuf),
    /// Drawing or writing the file failed.
    #[error("cannot draw the plot to {path}: {message}")]
    Draw {
        /// The `--plot` file.
        path: PathBuf,
        /// What plotters reported.
        message: String,
    },
}

/// Checks that `path` names a format [`render`] writes.
pub fn check_path(path: &Path) -> Result<(), PlotError> {
    let svg = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if svg {
        Ok(())
    } else {
        Err(PlotError::UnsupportedFormat(path.to_path_buf()))
    }
}

/// Draws `samples` to the SVG file `path`, under `title`.
pub fn render(samples: &Samples, title: &str, path: &Path) -> Result<(), PlotError> {
    check_path(path)?;
    draw(samples, title, path).map_err(|message| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    })
}

fn draw(samples: &Samples, title: &str, path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
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

/// The empirical CDF of `values`: `(value, fraction of samples at or below it)`.
pub fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as f64;
    sorted
        .into_iter()
        .enumerate()
        .map(|(i, v)| (v, (i + 1) as f64 / n))
        .collect()
}

fn cdf_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
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
        .caption(title, ("sans-serif", 18))
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

fn throughput_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    per_second: &[f64],
) -> Result<(), String> {
    let y_max = per_second.iter().copied().fold(0.0, f64::max).max(1.0) * 1.1;
    let x_max = per_second.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption("Output throughput over time", ("sans-serif", 18))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic run: 50 requests, TTFT 100..590 ms, 8 tokens each over 4 seconds.
    fn samples() -> Samples {
        let mut s = Samples::default();
        for i in 0..50 {
            let i = i as f64;
            s.ttft_ms.push(100.0 + 10.0 * i);
            s.tpot_ms.push(20.0 + i / 10.0);
            s.itl_ms.extend([18.0 + i / 5.0, 22.0]);
            s.e2el_ms.push(400.0 + 10.0 * i);
            s.token_times.push((i / 12.5, 8.0));
        }
        s
    }

    /// Checks that every element opened in `svg` is closed in order (self-closing ones aside):
    /// the document is well-formed as far as its element structure goes.
    fn assert_balanced(svg: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            rest = &rest[open + 1..];
            let close = rest.find('>').expect("an unterminated tag");
            let tag = &rest[..close];
            rest = &rest[close + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name.trim()),
                    "mismatched </{name}>"
                );
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().expect("a tag name");
                stack.push(name.to_string());
            }
        }
        assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    }

    #[test]
    fn renders_every_panel_to_a_well_formed_svg() {
        let dir = std::env::temp_dir().join(format!("kestrel-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.svg");
        render(&samples(), "synthetic run", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.trim_start().starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_balanced(&svg);
        for text in [
            "synthetic run",
            "Time to first token",
            "TTFT (50 samples)",
            "TPOT (50 samples)",
            "ITL (100 samples)",
            "E2E (50 samples)",
            "Output throughput over time",
        ] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
        // Each CDF is one polyline, plus the throughput steps and the legend swatches.
        assert!(svg.matches("<polyline").count() >= 5, "series missing");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn only_svg_paths_are_accepted() {
        assert!(check_path(Path::new("out.svg")).is_ok());
        assert!(check_path(Path::new("OUT.SVG")).is_ok());
        let e = check_path(Path::new("out.png")).unwrap_err();
        assert!(e.to_string().contains("only .svg"), "{e}");
        assert!(check_path(Path::new("out")).is_err());
    }

    #[test]
    fn cdf_is_sorted_and_ends_at_one() {
        let c = cdf(&[3.0, 1.0, f64::NAN, 2.0]);
        assert_eq!(c, vec![(1.0, 1.0 / 3.0), (2.0, 2.0 / 3.0), (3.0, 1.0)]);
        assert!(cdf(&[]).is_empty());
    }
}
