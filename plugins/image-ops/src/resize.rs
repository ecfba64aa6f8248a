//! `Resize`: images to a fixed height and width.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::layout::{check_count, paired_keys, positive, resize, Interpolation, Spatial};

/// `Resize` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ResizeConfig {
    /// Output height in pixels.
    pub height: i64,
    /// Output width in pixels.
    pub width: i64,
    /// `"bilinear"` (default, alias `"linear"`), `"nearest"` or `"bicubic"` (alias `"cubic"`).
    #[serde(default = "bilinear")]
    pub interpolation: Interpolation,
}

fn bilinear() -> Interpolation {
    Interpolation::Bilinear
}

/// Resizes every input to `(height, width)` (channels and dtype kept), with OpenCV's
/// pixel-centre convention and no antialiasing, as `cv2.resize` does.
pub struct Resize {
    keys: Vec<String>,
    height: i64,
    width: i64,
    interpolation: Interpolation,
}

impl FromConfig for Resize {
    type Config = ResizeConfig;
    fn from_config(config: ResizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        Ok(Resize {
            keys: paired_keys(ctx)?,
            height: positive("height", config.height)?,
            width: positive("width", config.width)?,
            interpolation: config.interpolation,
        })
    }
}

impl Resize {
    fn resize_all(&self, inputs: &[&Tensor], batched: bool) -> Result<Vec<Tensor>> {
        check_count(&self.keys, inputs)?;
        self.keys
            .iter()
            .zip(inputs)
            .map(|(key, x)| {
                let spatial = Spatial::of(key, x, batched)?;
                resize(&spatial, x, self.height, self.width, self.interpolation)
            })
            .collect()
    }
}

impl NumpyOp for Resize {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.resize_all(inputs, false)
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.resize_all(inputs, true)
    }

    fn batchable(&self) -> bool {
        true
    }
}
