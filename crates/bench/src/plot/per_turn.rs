//! The plot of `kestrel bench --multi-turn`: two panels over the turn index.
//!
//! ```text
//! +------------------------------+------------------------------+
//! | TTFT per turn (ms):          | prefix-cache hit rate per    |
//! | p50, p90, mean               | turn (%)                     |
//! +------------------------------+------------------------------+
//! ```

use plotters::coord::Shift;
use plotters::prelude::*;

use super::font::FAMILY as FONT;

/// The figures of one turn index that the plot draws; `None` where the turn has no sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnPoint {
    /// The turn, from 1.
    pub turn: usize,
    /// Median time to first token.
    pub ttft_p50_ms: Option<f64>,
    /// 90th percentile time to first token.
    pub ttft_p90_ms: Option<f64>,
    /// Mean time to first token.
    pub ttft_mean_ms: Option<f64>,
    /// Cached / prompt tokens, 0..=1.
    pub hit_rate: Option<f64>,
}

type Series<'a> = (&'a str, Vec<(f64, f64)>, RGBColor);

/// Draws the title and both panels on `root` and presents it.
pub(super) fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    points: &[TurnPoint],
    title: &str,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root.titled(title, (FONT, 20)).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((1, 2));
    let pick = |f: fn(&TurnPoint) -> Option<f64>, scale: f64| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|p| f(p).map(|v| (p.turn as f64, v * scale)))
            .collect()
    };
    let ttft = [
        ("TTFT p50", pick(|p| p.ttft_p50_ms, 1.0), BLUE),
        ("TTFT p90", pick(|p| p.ttft_p90_ms, 1.0), RED),
        ("TTFT mean", pick(|p| p.ttft_mean_ms, 1.0), GREEN),
    ];
    let turns = points.len().max(1);
    let ttft_max = ttft
        .iter()
        .flat_map(|(_, v, _)| v.iter().map(|&(_, y)| y))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let panel = Panel {
        title: "Time to first token per turn",
        y_desc: "milliseconds",
        y_max: ttft_max,
        turns,
    };
    panel.draw(&panels[0], &ttft)?;
    let hits = [("prefix hit rate", pick(|p| p.hit_rate, 100.0), MAGENTA)];
    let panel = Panel {
        title: "Prefix-cache hit rate per turn",
        y_desc: "cached / prompt tokens (%)",
        y_max: 100.0,
        turns,
    };
    panel.draw(&panels[1], &hits)?;
    root.present().map_err(|e| e.to_string())
}

/// One panel: line series with markers over turns 1..=turns.
struct Panel<'a> {
    title: &'a str,
    y_desc: &'a str,
    y_max: f64,
    turns: usize,
}

impl Panel<'_> {
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        series: &[Series<'_>],
    ) -> Result<(), String> {
        let mut chart = ChartBuilder::on(area)
            .caption(self.title, (FONT, 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(0.5..self.turns as f64 + 0.5, 0.0..self.y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("turn")
            .x_labels(self.turns.min(20))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc(self.y_desc)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(|e| e.to_string())?;
        for (name, points, color) in series {
            let color = *color;
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())
    }
}
