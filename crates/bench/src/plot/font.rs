//! The one font of every plot: Ubuntu Light, compiled into the binary from
//! `epaint_default_fonts`. The bitmap backend rasterises it, and both backends measure text
//! with it to lay the panels out, so no system font is ever looked up.

use std::sync::OnceLock;

use plotters::style::{register_font, FontStyle};

/// Font family of every text in the plot.
pub(super) const FAMILY: &str = "sans-serif";

/// Registers the bundled font under [`FAMILY`], once per process.
pub(super) fn register() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font(
                FAMILY,
                FontStyle::Normal,
                epaint_default_fonts::UBUNTU_LIGHT,
            )
            .map_err(|_| "the bundled font cannot be parsed".to_string())
        })
        .clone()
}
