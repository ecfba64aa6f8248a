//! What the window crops share: a window's coordinates, cutting it out of an input, placing
//! it as albumentations does, and the cut-and-resize of the random resized crops.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Result};

use crate::geometry::Geometry;
use crate::layout::{mask_flags, paired_keys, positive, resize, same_size, Interpolation, Spatial};
use crate::targets::Targets;

/// A window `(x_min, y_min, x_max, y_max)`, half-open, albumentations' `crop_coords`.
pub(crate) type Coords = [i64; 4];

/// `x` (in `layout`) cut to the window, contiguous: what every crop does to pixels.
pub(crate) fn cut(x: &Tensor, layout: &Spatial, [x0, y0, x1, y1]: Coords) -> Result<Tensor> {
    Ok(x.f_narrow(layout.h_axis, y0, y1 - y0)?
        .f_narrow(layout.w_axis(), x0, x1 - x0)?
        .f_contiguous()?)
}

/// Every pixel input of the call cut to the window `window` picks for their `(height,
/// width)` (the whole image for `None`), boxes and keypoints following: the crops whose
/// window depends on the sample.
pub(crate) fn crop_with_targets(
    targets: &Targets,
    keys: &[String],
    inputs: &[&Tensor],
    window: impl FnOnce((i64, i64)) -> Result<Option<Coords>>,
) -> Result<Vec<Tensor>> {
    let pixels = targets.pixels(keys, inputs)?;
    let layouts = same_size(&pixels.keys, &pixels.inputs)?;
    let size = (layouts[0].height, layouts[0].width);
    let window @ [x0, y0, x1, y1] = window(size)?.unwrap_or([0, 0, size.1, size.0]);
    let out = pixels
        .inputs
        .iter()
        .zip(&layouts)
        .map(|(x, layout)| cut(x, layout, window))
        .collect::<Result<Vec<_>>>()?;
    let g = Geometry::Crop {
        window,
        out: (y1 - y0, x1 - x0),
    };
    targets.merge(keys, inputs, out, &g, size)
}

/// albumentations' `get_crop_coords`: `start` in [0, 1) maps onto every valid offset.
pub(crate) fn place(
    height: i64,
    width: i64,
    crop: (i64, i64),
    h_start: f64,
    w_start: f64,
) -> Coords {
    let y0 = ((height - crop.0 + 1) as f64 * h_start) as i64;
    let x0 = ((width - crop.1 + 1) as f64 * w_start) as i64;
    [x0, y0, x0 + crop.1, y0 + crop.0]
}

/// What the random resized crops share: output size, sampling, which inputs are masks.
pub(crate) struct Output {
    pub(crate) keys: Vec<String>,
    masks: Vec<bool>,
    pub(crate) targets: Targets,
    height: i64,
    width: i64,
    interpolation: Interpolation,
    mask_interpolation: Interpolation,
}

impl Output {
    pub(crate) fn new(
        ctx: &CreateContext<'_>,
        masks: &[String],
        targets: impl FnOnce(&[String]) -> Result<Targets>,
        (height, width): (i64, i64),
        interpolation: Interpolation,
    ) -> Result<Output> {
        let keys = paired_keys(ctx)?;
        Ok(Output {
            targets: targets(&keys)?,
            masks: mask_flags(&keys, masks)?,
            keys,
            height: positive("height", height)?,
            width: positive("width", width)?,
            interpolation,
            mask_interpolation: Interpolation::Nearest,
        })
    }

    /// The same, sampling masks with `mask_interpolation` (albumentations' own parameter
    /// in the ops that have it) rather than nearest.
    pub(crate) fn with_mask_interpolation(self, mask_interpolation: Interpolation) -> Output {
        Output {
            mask_interpolation,
            ..self
        }
    }

    /// Every input cut to the window `coords` picks for the inputs' `(height, width)` and
    /// resized; `None` from `coords` (the `p` draw said skip) leaves them as they are.
    pub(crate) fn apply(
        &self,
        inputs: &[&Tensor],
        coords: impl FnOnce(i64, i64) -> Result<Option<Coords>>,
    ) -> Result<Vec<Tensor>> {
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        let layouts = same_size(&pixels.keys, &pixels.inputs)?;
        let size = (layouts[0].height, layouts[0].width);
        let Some(window) = coords(size.0, size.1)? else {
            let kept = pixels.inputs.iter().map(|x| x.shallow_clone()).collect();
            let g = Geometry::Crop {
                window: [0, 0, size.1, size.0],
                out: size,
            };
            return self.targets.merge(&self.keys, inputs, kept, &g, size);
        };
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .zip(pixels.index.iter().map(|&i| self.masks[i]))
            .map(|((x, layout), mask)| {
                let crop = cut(x, layout, window)?;
                let cropped = Spatial::of("crop", &crop, false)?;
                let interpolation = if mask {
                    self.mask_interpolation
                } else {
                    self.interpolation
                };
                resize(&cropped, &crop, self.height, self.width, interpolation)
            })
            .collect::<Result<Vec<_>>>()?;
        let g = Geometry::Crop {
            window,
            out: (self.height, self.width),
        };
        self.targets.merge(&self.keys, inputs, out, &g, size)
    }
}
