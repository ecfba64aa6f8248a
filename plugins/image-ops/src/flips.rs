//! `VerticalFlip`, `Flip`, `Transpose` and `RandomRotate90`: the dihedral moves, which only
//! permute pixels, so they take any dtype and keep masks exact.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use serde::Deserialize;

use crate::boxes::BboxParamsConfig;
use crate::geometry::Geometry;
use crate::keypoints::KeypointParamsConfig;
use crate::layout::{paired_keys, probability, rng, Spatial};
use crate::targets::Targets;

/// Configuration of the dihedral ops: only the probability of applying them.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct DihedralConfig {
    /// Probability of transforming a sample, in [0, 1] (default 0.5, albumentations').
    #[serde(default = "half")]
    pub p: f64,
    /// Inputs that are bounding boxes: `[N, 4 + k]` rows in `bbox_params`' format.
    #[serde(default)]
    pub bboxes: Vec<String>,
    /// Box format and filter thresholds (albumentations' `BboxParams`); required with `bboxes`.
    pub bbox_params: Option<BboxParamsConfig>,
    /// Inputs that are keypoints: `[N, 2 + k]` rows `x, y, ...` in pixels.
    #[serde(default)]
    pub keypoints: Vec<String>,
    /// Keypoint format and filter (albumentations' `KeypointParams`, default `"xy"`).
    pub keypoint_params: Option<KeypointParamsConfig>,
}

fn half() -> f64 {
    0.5
}

/// Which dihedral move an op draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Vertical,
    /// `cv2.flip` codes: 0 vertical, 1 horizontal, -1 both, drawn uniformly.
    Flip,
    Transpose,
    /// `np.rot90` by 0, 1, 2 or 3 quarter turns, drawn uniformly.
    Rot90,
}

/// The move one call applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Move {
    /// The input unchanged (the `1 - p` case).
    Keep,
    /// `cv2.flip(x, code)`.
    Flip(i64),
    /// Rows and columns swapped.
    Transpose,
    /// `np.rot90(x, k)`: `k` counter-clockwise quarter turns.
    Rot90(i64),
}

/// A dihedral op: one draw per call, the same move for every input.
pub struct Dihedral {
    keys: Vec<String>,
    p: f64,
    family: Family,
    targets: Targets,
}

impl Dihedral {
    fn new(config: DihedralConfig, ctx: &CreateContext<'_>, family: Family) -> Result<Self> {
        let keys = paired_keys(ctx)?;
        Ok(Dihedral {
            targets: Targets::new(
                &keys,
                &config.bboxes,
                config.bbox_params,
                &config.keypoints,
                config.keypoint_params,
            )?,
            keys,
            p: probability("p", config.p)?,
            family,
        })
    }

    /// The move the call seeded with `seed` makes.
    pub(crate) fn draw(&self, seed: u64) -> Move {
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return Move::Keep;
        }
        match self.family {
            Family::Vertical => Move::Flip(0),
            Family::Flip => Move::Flip(rng.random_range(-1..=1)),
            Family::Transpose => Move::Transpose,
            Family::Rot90 => Move::Rot90(rng.random_range(0..=3)),
        }
    }
}

/// Applies `m` to `x`.
pub(crate) fn apply(m: Move, layout: &Spatial, x: &Tensor) -> Result<Tensor> {
    let (h, w) = (layout.h_axis, layout.w_axis());
    Ok(match m {
        Move::Keep => x.shallow_clone(),
        Move::Flip(0) => x.f_flip([h])?,
        Move::Flip(1) => x.f_flip([w])?,
        Move::Flip(_) => x.f_flip([h, w])?,
        Move::Transpose => x.f_transpose(h, w)?.f_contiguous()?,
        Move::Rot90(k) => x.f_rot90(k, [h, w])?.f_contiguous()?,
    })
}

impl NumpyOp for Dihedral {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let m = self.draw(ctx.seed);
        let pixels = self.targets.pixels(&self.keys, inputs)?;
        // Pixel inputs may differ in size (each moves on its own); boxes and keypoints
        // belong to the first.
        let layouts = pixels
            .keys
            .iter()
            .zip(&pixels.inputs)
            .map(|(key, x)| Spatial::of(key, x, false))
            .collect::<Result<Vec<_>>>()?;
        let out = pixels
            .inputs
            .iter()
            .zip(&layouts)
            .map(|(x, layout)| apply(m, layout, x))
            .collect::<Result<Vec<_>>>()?;
        let size = (layouts[0].height, layouts[0].width);
        self.targets
            .merge(&self.keys, inputs, out, &Geometry::Dihedral(m), size)
    }
}

macro_rules! dihedral {
    ($name:ident, $family:expr, $doc:literal) => {
        #[doc = $doc]
        pub struct $name(pub(crate) Dihedral);

        impl FromConfig for $name {
            type Config = DihedralConfig;
            fn from_config(config: DihedralConfig, ctx: &CreateContext<'_>) -> Result<Self> {
                Dihedral::new(config, ctx, $family).map($name)
            }
        }

        impl NumpyOp for $name {
            fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
                self.0.forward(inputs, ctx)
            }
        }
    };
}

dihedral!(
    VerticalFlip,
    Family::Vertical,
    "Mirrors every input top-bottom with probability `p`."
);
dihedral!(
    Flip,
    Family::Flip,
    "With probability `p`, flips vertically, horizontally or both (one chosen uniformly)."
);
dihedral!(
    Transpose,
    Family::Transpose,
    "With probability `p`, swaps rows and columns (an `(H, W)` image becomes `(W, H)`)."
);
dihedral!(
    RandomRotate90,
    Family::Rot90,
    "With probability `p`, rotates by 0, 90, 180 or 270 degrees counter-clockwise (uniformly)."
);
