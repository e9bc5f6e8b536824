//! [`LayerWindow`]: a sliding-window attention size and the layers it applies to, and the
//! `config.json` readers families share for it.

use super::from_hf::{bad, opt_bool, opt_usize, present, Obj};
use super::ConfigError;

/// The sliding window and the layers it applies to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LayerWindow {
    pub size: Option<usize>,
    /// One flag per layer; `None`: every layer.
    pub layers: Option<Vec<bool>>,
}

impl LayerWindow {
    /// No sliding window.
    pub const NONE: LayerWindow = LayerWindow {
        size: None,
        layers: None,
    };

    /// `size` (if any) on every layer.
    pub fn every_layer(size: Option<usize>) -> LayerWindow {
        LayerWindow { size, layers: None }
    }
}

/// A window that must be switched on (`use_sliding_window`, as transformers' config classes
/// with that key): `sliding_window` on the layers `layer_types` marks `sliding_attention`,
/// or else layers `max_window_layers..` (default 28).
pub(crate) fn opt_in_window(obj: &Obj, n_layers: usize) -> Result<LayerWindow, ConfigError> {
    if !opt_bool(obj, "use_sliding_window")?.unwrap_or(false) {
        return Ok(LayerWindow::NONE);
    }
    let Some(size) = window_size(obj)? else {
        return Ok(LayerWindow::NONE);
    };
    let flags = match layer_types(obj)? {
        Some(flags) => flags,
        None => {
            let first = opt_usize(obj, "max_window_layers")?.unwrap_or(28);
            (0..n_layers).map(|i| i >= first).collect()
        }
    };
    let layers = if !flags.contains(&true) {
        return Ok(LayerWindow::NONE);
    } else if flags.len() == n_layers && !flags.contains(&false) {
        None
    } else {
        Some(flags) // a wrong length is reported by `validate`
    };
    Ok(LayerWindow {
        size: Some(size),
        layers,
    })
}

/// `sliding_window`: absent = 4096 (the transformers default), null = none.
pub(crate) fn window_size(obj: &Obj) -> Result<Option<usize>, ConfigError> {
    match obj.get("sliding_window") {
        None => Ok(Some(4096)),
        Some(_) => opt_usize(obj, "sliding_window"),
    }
}

/// `layer_types` (transformers ≥ 4.53): `true` for each `sliding_attention` layer.
pub(crate) fn layer_types(obj: &Obj) -> Result<Option<Vec<bool>>, ConfigError> {
    let Some(value) = present(obj, "layer_types") else {
        return Ok(None);
    };
    let items = value
        .as_array()
        .ok_or_else(|| bad("layer_types", "expected a list"))?;
    items
        .iter()
        .map(|v| match v.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(bad(
                "layer_types",
                &format!("expected full_attention or sliding_attention, got {v}"),
            )),
        })
        .collect::<Result<Vec<bool>, _>>()
        .map(Some)
}
