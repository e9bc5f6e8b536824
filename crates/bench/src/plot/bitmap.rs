//! The PNG form of a bench plot: the figure drawn by plotters' bitmap backend into an RGB
//! buffer, with text rasterised from the bundled font ([`super::font`]), then encoded with
//! `png`. No system font or library is used.

use std::path::Path;

use plotters::prelude::*;

use super::{Figure, PlotError, SIZE};

/// Draws `figure` under `title` and writes it as a PNG to `path`.
pub(super) fn render(figure: Figure<'_>, title: &str, path: &Path) -> Result<(), PlotError> {
    let draw_error = |message| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    };
    let (width, height) = SIZE;
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
    figure.draw(root, title).map_err(draw_error)?;
    let bytes = encode(&rgb, SIZE).map_err(|e| draw_error(e.to_string()))?;
    std::fs::write(path, bytes).map_err(|source| PlotError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Encodes an 8-bit RGB buffer of `size` pixels as a PNG file's bytes.
fn encode(rgb: &[u8], (width, height): (u32, u32)) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(out)
}
