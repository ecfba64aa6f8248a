//! What every image op shares: key checks, the HWC / HW layouts, dtype round trips, and the
//! seeded random number generator.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

/// How output pixels that fall between input pixels are computed.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Interpolation {
    /// Nearest neighbour (OpenCV `INTER_NEAREST`); keeps label values of masks intact.
    Nearest,
    /// Bilinear (OpenCV `INTER_LINEAR`, FastEstimator's default). `"linear"` also works.
    #[serde(alias = "linear")]
    Bilinear,
    /// Bicubic with a = -0.75 (OpenCV `INTER_CUBIC`). `"cubic"` also works.
    #[serde(alias = "cubic")]
    Bicubic,
}

/// The names of the op's input keys, after checking there is at least one and one output
/// per input.
pub(crate) fn paired_keys(ctx: &CreateContext<'_>) -> Result<Vec<String>> {
    if ctx.inputs.is_empty() {
        return Err(Error::config("inputs", "expected at least 1 key, got 0"));
    }
    ctx.expect_arity(Some(ctx.inputs.len()), Some(ctx.inputs.len()))?;
    Ok(ctx.inputs.iter().map(|key| key.to_string()).collect())
}

/// Fails unless the call brought one tensor per declared input key.
pub(crate) fn check_count(keys: &[String], inputs: &[&Tensor]) -> Result<()> {
    if keys.len() == inputs.len() {
        Ok(())
    } else {
        Err(Error::msg(format!(
            "expected {} input(s) ({}), got {}",
            keys.len(),
            keys.join(", "),
            inputs.len()
        )))
    }
}

/// A positive pixel count from the config, or an error naming the field.
pub(crate) fn positive(field: &str, value: i64) -> Result<i64> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(Error::config(
            field,
            format!("must be at least 1, got {value}"),
        ))
    }
}

/// Where the spatial axes of one input (a sample or a batch) are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spatial {
    /// `true` for a batch (leading `N` axis).
    pub batched: bool,
    /// `true` for `(H, W)` samples, `false` for `(H, W, C)`.
    pub plain: bool,
    /// Axis of the height; the width follows it.
    pub h_axis: i64,
    /// Image height.
    pub height: i64,
    /// Image width.
    pub width: i64,
}

impl Spatial {
    /// Reads the layout of input `key`: `(H, W)` or `(H, W, C)`, with a leading `N` in a batch.
    pub(crate) fn of(key: &str, x: &Tensor, batched: bool) -> Result<Spatial> {
        let size = x.size();
        let lead = usize::from(batched);
        let plain = match size.len().checked_sub(lead) {
            Some(2) => true,
            Some(3) => false,
            _ => {
                let expected = if batched {
                    "a batch of shape (N, H, W) or (N, H, W, C)"
                } else {
                    "an image of shape (H, W) or (H, W, C)"
                };
                return Err(Error::msg(format!(
                    "input `{key}`: expected {expected}, got shape {size:?}"
                )));
            }
        };
        Ok(Spatial {
            batched,
            plain,
            h_axis: lead as i64,
            height: size[lead],
            width: size[lead + 1],
        })
    }

    /// Index of the width axis.
    pub(crate) fn w_axis(&self) -> i64 {
        self.h_axis + 1
    }

    /// The input as `(N, C, H, W)` in a floating kind fit for interpolation.
    pub(crate) fn as_nchw(self, x: &Tensor) -> Result<Tensor> {
        let nchw = match (self.batched, self.plain) {
            (false, true) => x.f_unsqueeze(0)?.f_unsqueeze(0)?,
            (false, false) => x.f_permute([2, 0, 1])?.f_unsqueeze(0)?,
            (true, true) => x.f_unsqueeze(1)?,
            (true, false) => x.f_permute([0, 3, 1, 2])?,
        };
        Ok(nchw.f_to_kind(compute_kind(x.kind())?)?)
    }

    /// Undoes [`Spatial::as_nchw`]: back to the input's layout and `kind`, integers rounded
    /// (half up) and clamped to their range.
    pub(crate) fn restore_layout(self, y: &Tensor, kind: Kind) -> Result<Tensor> {
        let back = match (self.batched, self.plain) {
            (false, true) => y.f_squeeze_dim(0)?.f_squeeze_dim(0)?,
            (false, false) => y.f_squeeze_dim(0)?.f_permute([1, 2, 0])?,
            (true, true) => y.f_squeeze_dim(1)?,
            (true, false) => y.f_permute([0, 2, 3, 1])?,
        };
        Ok(restore_kind(&back, kind)?.f_contiguous()?)
    }
}

/// The kind interpolation runs in: `Double` where `Float` could lose integer values.
fn compute_kind(kind: Kind) -> Result<Kind> {
    match kind {
        Kind::Double | Kind::Int | Kind::Int64 => Ok(Kind::Double),
        Kind::Float | Kind::Half | Kind::BFloat16 | Kind::Uint8 | Kind::Int8 | Kind::Int16 => {
            Ok(Kind::Float)
        }
        other => Err(Error::unsupported(format!(
            "images of dtype {other:?} are not supported (use uint8, an integer or a float type)"
        ))),
    }
}

/// Converts interpolated values back to `kind`. Integer kinds are rounded half up, as
/// OpenCV's fixed-point interpolation of uint8 images does, and saturated to their range.
fn restore_kind(y: &Tensor, kind: Kind) -> Result<Tensor> {
    let (low, high) = match kind {
        Kind::Uint8 => (0.0, 255.0),
        Kind::Int8 => (-128.0, 127.0),
        Kind::Int16 => (-32768.0, 32767.0),
        Kind::Int => (-2147483648.0, 2147483647.0),
        // Int64 images hold labels far inside the range; Double keeps them exact.
        Kind::Int64 => return Ok(round_half_up(y)?.f_to_kind(kind)?),
        _ => return Ok(y.f_to_kind(kind)?),
    };
    Ok(round_half_up(y)?.f_clamp(low, high)?.f_to_kind(kind)?)
}

fn round_half_up(y: &Tensor) -> Result<Tensor> {
    Ok(y.f_add_scalar(0.5)?.f_floor()?)
}

/// The random number generator of one call: ChaCha8 seeded with `ctx.seed`, so the same
/// seed gives the same draws on every platform and any number of workers.
pub(crate) fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A probability from the config, or an error naming the field.
pub(crate) fn probability(field: &str, p: f64) -> Result<f64> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(Error::config(field, format!("must be in [0, 1], got {p}")))
    }
}

/// For each input key, whether the config's `masks` lists it. Masks are label maps: ops
/// that interpolate sample them with nearest neighbour, constant fills use the mask fill,
/// and photometric ops leave them alone, as albumentations treats its `mask` targets.
pub(crate) fn mask_flags(keys: &[String], masks: &[String]) -> Result<Vec<bool>> {
    if let Some(stray) = masks.iter().find(|m| !keys.contains(m)) {
        return Err(Error::config(
            "masks",
            format!(
                "`{stray}` is not one of the op's inputs ({})",
                keys.join(", ")
            ),
        ));
    }
    Ok(keys.iter().map(|k| masks.contains(k)).collect())
}

/// The layouts of inputs transformed together, which must share height and width.
pub(crate) fn same_size(keys: &[String], inputs: &[&Tensor]) -> Result<Vec<Spatial>> {
    check_count(keys, inputs)?;
    let layouts = keys
        .iter()
        .zip(inputs)
        .map(|(key, x)| Spatial::of(key, x, false))
        .collect::<Result<Vec<_>>>()?;
    let first = layouts[0];
    for (key, layout) in keys.iter().zip(&layouts) {
        if (layout.height, layout.width) != (first.height, first.width) {
            return Err(Error::msg(format!(
                "input `{key}` is {}x{} but `{}` is {}x{}: inputs transformed together must have the same size",
                layout.height, layout.width, keys[0], first.height, first.width
            )));
        }
    }
    Ok(layouts)
}

/// `x` (in `layout`) resized to `(height, width)` like `cv2.resize`: pixel centres, no
/// antialiasing; dtype and layout kept.
pub(crate) fn resize(
    layout: &Spatial,
    x: &Tensor,
    height: i64,
    width: i64,
    interpolation: Interpolation,
) -> Result<Tensor> {
    if (layout.height, layout.width) == (height, width) {
        return Ok(x.shallow_clone());
    }
    let nchw = layout.as_nchw(x)?;
    let size = [height, width];
    let resized = match interpolation {
        Interpolation::Nearest => nchw.f_upsample_nearest2d(size, None, None)?,
        Interpolation::Bilinear => nchw.f_upsample_bilinear2d(size, false, None, None)?,
        Interpolation::Bicubic => nchw.f_upsample_bicubic2d(size, false, None, None)?,
    };
    layout.restore_layout(&resized, x.kind())
}
