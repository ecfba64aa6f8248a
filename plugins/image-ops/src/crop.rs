//! `RandomCrop` and `CenterCrop`: a `height × width` window of every input.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::layout::{check_count, paired_keys, positive, rng, Spatial};

/// `RandomCrop` / `CenterCrop` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct CropConfig {
    /// Height of the window in pixels; at most the image height.
    pub height: i64,
    /// Width of the window in pixels; at most the image width.
    pub width: i64,
}

/// The checked window size and input keys both crops share.
struct Window {
    keys: Vec<String>,
    height: i64,
    width: i64,
}

impl Window {
    fn new(config: CropConfig, ctx: &CreateContext<'_>) -> Result<Window> {
        Ok(Window {
            keys: paired_keys(ctx)?,
            height: positive("height", config.height)?,
            width: positive("width", config.width)?,
        })
    }

    /// The layout of the inputs, which must all have the same height and width, at least
    /// the window's.
    fn layouts(&self, inputs: &[&Tensor], batched: bool) -> Result<Vec<Spatial>> {
        check_count(&self.keys, inputs)?;
        let layouts = self
            .keys
            .iter()
            .zip(inputs)
            .map(|(key, x)| Spatial::of(key, x, batched))
            .collect::<Result<Vec<_>>>()?;
        let first = layouts[0];
        for (key, layout) in self.keys.iter().zip(&layouts) {
            if (layout.height, layout.width) != (first.height, first.width) {
                return Err(Error::msg(format!(
                    "input `{key}` is {}x{} but `{}` is {}x{}: inputs cropped together must have the same size",
                    layout.height, layout.width, self.keys[0], first.height, first.width
                )));
            }
        }
        if self.height > first.height || self.width > first.width {
            return Err(Error::msg(format!(
                "crop {}x{} is larger than input `{}` ({}x{})",
                self.height, self.width, self.keys[0], first.height, first.width
            )));
        }
        Ok(layouts)
    }

    /// Cuts the window whose top-left corner is `(top, left)` out of every input.
    fn cut(
        &self,
        inputs: &[&Tensor],
        layouts: &[Spatial],
        top: i64,
        left: i64,
    ) -> Result<Vec<Tensor>> {
        inputs
            .iter()
            .zip(layouts)
            .map(|(x, layout)| {
                Ok(x.f_narrow(layout.h_axis, top, self.height)?
                    .f_narrow(layout.w_axis(), left, self.width)?
                    .f_contiguous()?)
            })
            .collect()
    }
}

/// Crops a `height × width` window at a uniformly random position (the same for every
/// input of the call).
pub struct RandomCrop(Window);

impl FromConfig for RandomCrop {
    type Config = CropConfig;
    fn from_config(config: CropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        Window::new(config, ctx).map(RandomCrop)
    }
}

impl NumpyOp for RandomCrop {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let window = &self.0;
        let layouts = window.layouts(inputs, false)?;
        let mut rng = rng(ctx.seed);
        let top = rng.random_range(0..=layouts[0].height - window.height);
        let left = rng.random_range(0..=layouts[0].width - window.width);
        window.cut(inputs, &layouts, top, left)
    }
}

/// Crops the central `height × width` window; when the margin is odd the extra pixel is
/// left on the bottom / right, as albumentations does.
pub struct CenterCrop(Window);

impl FromConfig for CenterCrop {
    type Config = CropConfig;
    fn from_config(config: CropConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        Window::new(config, ctx).map(CenterCrop)
    }
}

impl CenterCrop {
    fn crop(&self, inputs: &[&Tensor], batched: bool) -> Result<Vec<Tensor>> {
        let window = &self.0;
        let layouts = window.layouts(inputs, batched)?;
        let top = (layouts[0].height - window.height) / 2;
        let left = (layouts[0].width - window.width) / 2;
        window.cut(inputs, &layouts, top, left)
    }
}

impl NumpyOp for CenterCrop {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.crop(inputs, false)
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        self.crop(inputs, true)
    }

    fn batchable(&self) -> bool {
        true
    }
}
