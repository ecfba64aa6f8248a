//! Tensor resizing: FastEstimator's `Resize3D` TensorOp (`fe.op.tensorop.Resize3D`, whose
//! PyTorch branch is `torch.nn.functional.interpolate(x, output_shape, mode)`), and `Resize`,
//! the same call for 1-, 2- and 3-D spatial data with every `interpolate` mode that takes an
//! output size. FastEstimator has no 2-D tensor `Resize` (its `Resize` is a numpy-op on one
//! image); `Resize` is what its `Resize3D` would be for images.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

#[cfg(test)]
mod tests;

/// An `interpolate` mode. The linear ones use `align_corners = False` and no antialiasing,
/// `interpolate`'s defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Bilinear,
    Bicubic,
    Trilinear,
    Area,
}

impl Mode {
    fn parse(name: &str, key: &str) -> Result<Self> {
        Ok(match name {
            "nearest" => Mode::Nearest,
            "linear" => Mode::Linear,
            "bilinear" => Mode::Bilinear,
            "bicubic" => Mode::Bicubic,
            "trilinear" => Mode::Trilinear,
            "area" => Mode::Area,
            other => {
                return Err(Error::config(
                    key,
                    format!(
                        "unknown mode {other:?}; expected nearest, linear, bilinear, bicubic, \
                         trilinear or area"
                    ),
                ))
            }
        })
    }

    /// The number of spatial dimensions the mode works on, if it works on one only (as in
    /// `interpolate`, which rejects e.g. bilinear on 5-D input).
    fn spatial_dims(self) -> Option<usize> {
        match self {
            Mode::Linear => Some(1),
            Mode::Bilinear | Mode::Bicubic => Some(2),
            Mode::Trilinear => Some(3),
            Mode::Nearest | Mode::Area => None,
        }
    }
}

/// `Resize` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ResizeConfig {
    /// The output's spatial size, batch and channels excluded: `[L]`, `[H, W]` or `[H, W, D]`
    /// for `[B, C, L]`, `[B, C, H, W]` or `[B, C, H, W, D]` inputs.
    pub size: Vec<i64>,
    /// `nearest` (default), `linear`, `bilinear`, `bicubic`, `trilinear` or `area`.
    #[serde(default = "nearest")]
    pub resize_mode: String,
}

/// `Resize3D` configuration (FastEstimator's arguments).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Resize3dConfig {
    /// `[H, W, D]`, batch and channels excluded.
    pub output_shape: Vec<i64>,
    /// `nearest` (default) or `area`, the two FastEstimator allows.
    #[serde(default = "nearest")]
    pub resize_mode: String,
}

fn nearest() -> String {
    "nearest".to_owned()
}

/// Inputs: one or more channels-first batches `[B, C, *spatial]`; outputs: as many, each
/// resized to `size` with `torch.nn.functional.interpolate(x, size, mode=resize_mode)`.
pub struct Resize {
    size: Vec<i64>,
    mode: Mode,
}

/// `Resize` restricted as FastEstimator's `Resize3D` is: three sizes, nearest or area.
pub struct Resize3d(Resize);

impl Resize {
    fn new(size: Vec<i64>, size_key: &str, mode: &str, mode_key: &str) -> Result<Self> {
        if size.is_empty() || size.len() > 3 {
            return Err(Error::config(
                size_key,
                format!(
                    "needs 1, 2 or 3 spatial sizes (batch and channels excluded), got {size:?}"
                ),
            ));
        }
        if let Some(bad) = size.iter().find(|s| **s <= 0) {
            return Err(Error::config(
                size_key,
                format!("sizes must be positive, got {bad}"),
            ));
        }
        let mode = Mode::parse(mode, mode_key)?;
        if let Some(dims) = mode.spatial_dims() {
            if dims != size.len() {
                return Err(Error::config(
                    mode_key,
                    format!(
                        "{mode:?} resizes {dims} spatial dimension(s), but {size_key} has {}",
                        size.len()
                    ),
                ));
            }
        }
        Ok(Self { size, mode })
    }

    fn resize(&self, input: &Tensor) -> Result<Tensor> {
        let rank = input.dim();
        if rank != self.size.len() + 2 {
            return Err(Error::msg(format!(
                "Resize to {:?} needs channels-first [B, C, {}] input of rank {}, got shape {:?}",
                self.size,
                ["L", "H, W", "H, W, D"][self.size.len() - 1],
                self.size.len() + 2,
                input.size()
            )));
        }
        let size = self.size.as_slice();
        // `interpolate` with a size passes no scale factors, so neither do these calls.
        Ok(match (self.mode, size.len()) {
            (Mode::Nearest, 1) => input.f_upsample_nearest1d(size, None)?,
            (Mode::Nearest, 2) => input.f_upsample_nearest2d(size, None, None)?,
            (Mode::Nearest, _) => input.f_upsample_nearest3d(size, None, None, None)?,
            (Mode::Area, 1) => input.f_adaptive_avg_pool1d(size)?,
            (Mode::Area, 2) => input.f_adaptive_avg_pool2d(size)?,
            (Mode::Area, _) => input.f_adaptive_avg_pool3d(size)?,
            (Mode::Linear, _) => input.f_upsample_linear1d(size, false, None)?,
            (Mode::Bilinear, _) => input.f_upsample_bilinear2d(size, false, None, None)?,
            (Mode::Bicubic, _) => input.f_upsample_bicubic2d(size, false, None, None)?,
            (Mode::Trilinear, _) => input.f_upsample_trilinear3d(size, false, None, None, None)?,
        })
    }
}

impl FromConfig for Resize {
    type Config = ResizeConfig;
    fn from_config(config: ResizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        super::expect_paired_keys(ctx)?;
        Self::new(config.size, "size", &config.resize_mode, "resize_mode")
    }
}

impl FromConfig for Resize3d {
    type Config = Resize3dConfig;
    fn from_config(config: Resize3dConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        super::expect_paired_keys(ctx)?;
        // FastEstimator: "The output shape is expected to be (H, W, D) excluding batch size and
        // channels", and an assertion that the mode is nearest or area.
        if config.output_shape.len() != 3 {
            return Err(Error::config(
                "output_shape",
                format!(
                    "expected [H, W, D], batch and channels excluded, got {:?}",
                    config.output_shape
                ),
            ));
        }
        if !matches!(config.resize_mode.as_str(), "nearest" | "area") {
            return Err(Error::config(
                "resize_mode",
                format!(
                    "Resize3D supports nearest or area, got {:?}",
                    config.resize_mode
                ),
            ));
        }
        let resize = Resize::new(
            config.output_shape,
            "output_shape",
            &config.resize_mode,
            "resize_mode",
        )?;
        Ok(Self(resize))
    }
}

impl TensorOp for Resize {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        inputs.iter().map(|input| self.resize(input)).collect()
    }
}

impl TensorOp for Resize3d {
    fn forward(&mut self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.0.forward(inputs, ctx)
    }
}
