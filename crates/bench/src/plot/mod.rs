//! `kestrel bench --plot out.svg|out.png`: one image with four panels drawn with `plotters`:
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
//! The panels ([`panels`]) are drawn once for any backend. SVG text is written as `<text>`
//! elements that the viewer renders; PNG text is rasterised from a font compiled into the
//! binary ([`font`]), which also measures text for the layout, so neither format needs a system
//! font. Any other extension is refused with [`PlotError::UnsupportedFormat`] before the run.
//!
//! `kestrel bench --multi-turn --plot` draws another figure the same ways: TTFT and prefix-cache
//! hit rate per turn index ([`per_turn`], from [`TurnPoint`]s).

mod bitmap;
mod font;
mod panels;
pub mod per_turn;

pub use per_turn::TurnPoint;

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::samples::Samples;

/// Size of the whole image in pixels.
pub const SIZE: (u32, u32) = (1200, 900);

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The path ends in neither `.svg` nor `.png`.
    #[error("--plot {0}: the file name must end in .svg or .png")]
    UnsupportedFormat(PathBuf),
    /// Drawing the plot failed.
    #[error("cannot draw the plot to {path}: {message}")]
    Draw {
        /// The `--plot` file.
        path: PathBuf,
        /// What plotters or the PNG encoder reported.
        message: String,
    },
    /// The PNG could not be written.
    #[error("cannot write the plot to {path}: {source}")]
    Write {
        /// The `--plot` file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The image formats [`render`] writes, chosen by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics, text as `<text>` elements.
    Svg,
    /// A 1200x900 RGB bitmap with text drawn from the bundled font.
    Png,
}

/// The format `path` names, or [`PlotError::UnsupportedFormat`].
pub fn check_path(path: &Path) -> Result<Format, PlotError> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext.eq_ignore_ascii_case("svg") {
        Ok(Format::Svg)
    } else if ext.eq_ignore_ascii_case("png") {
        Ok(Format::Png)
    } else {
        Err(PlotError::UnsupportedFormat(path.to_path_buf()))
    }
}

/// What a plot shows.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Figure<'a> {
    /// The four panels of a `kestrel bench` run.
    Run(&'a Samples),
    /// TTFT and hit rate per turn of a `--multi-turn` run.
    PerTurn(&'a [TurnPoint]),
}

impl Figure<'_> {
    /// Draws the figure under `title` on any backend.
    pub(crate) fn draw<DB: DrawingBackend>(
        &self,
        root: DrawingArea<DB, plotters::coord::Shift>,
        title: &str,
    ) -> Result<(), String> {
        match self {
            Self::Run(samples) => panels::draw(root, samples, title),
            Self::PerTurn(points) => per_turn::draw(root, points, title),
        }
    }
}

/// Draws `samples` under `title` to `path`, as SVG or PNG by its extension.
pub fn render(samples: &Samples, title: &str, path: &Path) -> Result<(), PlotError> {
    render_figure(Figure::Run(samples), title, path)
}

/// Draws TTFT and hit rate per turn under `title` to `path`, as SVG or PNG by its extension.
pub fn render_per_turn(points: &[TurnPoint], title: &str, path: &Path) -> Result<(), PlotError> {
    render_figure(Figure::PerTurn(points), title, path)
}

fn render_figure(figure: Figure<'_>, title: &str, path: &Path) -> Result<(), PlotError> {
    let format = check_path(path)?;
    font::register().map_err(|message| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    })?;
    match format {
        Format::Svg => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            figure.draw(root, title).map_err(|message| PlotError::Draw {
                path: path.to_path_buf(),
                message,
            })
        }
        Format::Png => bitmap::render(figure, title, path),
    }
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
    fn per_turn_plot_draws_both_panels() {
        let dir = std::env::temp_dir().join(format!("kestrel-plot-turns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let points: Vec<TurnPoint> = (1..=4)
            .map(|turn| TurnPoint {
                turn,
                ttft_p50_ms: Some(100.0 / turn as f64),
                ttft_p90_ms: Some(150.0 / turn as f64),
                ttft_mean_ms: Some(120.0 / turn as f64),
                hit_rate: (turn > 1).then_some(0.9),
            })
            .collect();
        let svg_path = dir.join("turns.svg");
        render_per_turn(&points, "turns", &svg_path).unwrap();
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        assert_balanced(&svg);
        for text in [
            "Time to first token per turn",
            "Prefix-cache hit rate",
            "TTFT p90",
        ] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
        let png_path = dir.join("turns.png");
        render_per_turn(&points, "turns", &png_path).unwrap();
        let png = std::fs::read(&png_path).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn svg_and_png_paths_are_accepted_and_others_refused() {
        assert_eq!(check_path(Path::new("out.svg")).unwrap(), Format::Svg);
        assert_eq!(check_path(Path::new("OUT.SVG")).unwrap(), Format::Svg);
        assert_eq!(check_path(Path::new("out.png")).unwrap(), Format::Png);
        assert_eq!(check_path(Path::new("a/b.PNG")).unwrap(), Format::Png);
        for bad in ["out.jpg", "out", "out.svg.gz", "png"] {
            let e = check_path(Path::new(bad)).unwrap_err();
            assert!(e.to_string().contains("must end in .svg or .png"), "{e}");
        }
    }

    #[test]
    fn cdf_is_sorted_and_ends_at_one() {
        let c = cdf(&[3.0, 1.0, f64::NAN, 2.0]);
        assert_eq!(c, vec![(1.0, 1.0 / 3.0), (2.0, 2.0 / 3.0), (3.0, 1.0)]);
        assert!(cdf(&[]).is_empty());
    }
}
