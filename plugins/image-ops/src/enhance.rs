//! FastEstimator's PIL-based augmentations: `Brightness`, `Color`, `Contrast`, `Sharpness`
//! (`ImageEnhance` with a random factor `1 + U(limit)`), `ShearX`, `ShearY` (a random shear
//! coefficient `U(shear_coef)`) and `TranslateX`, `TranslateY` (a random fraction
//! `U(shift_limit)` of the side). Like FastEstimator's, they have no `p`: every call draws one
//! value and applies it to every input.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::color::uniform;
use crate::layout::{check_count, paired_keys, rng};
use crate::pil::{self, Raster};
use crate::pil_geometry;
use crate::Limit;

/// One of the PIL transforms, applied with a drawn value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PilTransform {
    Brightness,
    Color,
    Contrast,
    Sharpness,
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
}

impl PilTransform {
    /// What FastEstimator adds to the uniform draw: the enhancers' factor is `1 + U`.
    pub(crate) fn base(self) -> f64 {
        match self {
            Self::Brightness | Self::Color | Self::Contrast | Self::Sharpness => 1.0,
            _ => 0.0,
        }
    }

    /// `img` transformed with the drawn `value` (factor, shear coefficient or shift).
    pub(crate) fn apply(self, img: &Raster, value: f64) -> Raster {
        match self {
            Self::Brightness => pil::brightness(img, value),
            Self::Color => pil::color(img, value),
            Self::Contrast => pil::contrast(img, value),
            Self::Sharpness => pil::sharpness(img, value),
            Self::ShearX => pil_geometry::shear_x(img, value),
            Self::ShearY => pil_geometry::shear_y(img, value),
            Self::TranslateX => pil_geometry::translate_x(img, value),
            Self::TranslateY => pil_geometry::translate_y(img, value),
        }
    }
}

/// FastEstimator's `param_to_range`: `l` means `(-|l|, |l|)`, a pair is taken as it is
/// (`random.uniform` accepts either order).
pub(crate) fn fe_range(field: &str, limit: Limit) -> Result<[f64; 2]> {
    let r = match limit {
        Limit::Symmetric(l) => [-l.abs(), l.abs()],
        Limit::Range(r) => r,
    };
    if r.iter().all(|v| v.is_finite()) {
        Ok(r)
    } else {
        Err(Error::config(
            field,
            format!("needs finite values, got {limit:?}"),
        ))
    }
}

/// Applies `transform` to every input with `value`, each input as its own PIL image.
pub(crate) fn apply_all(
    keys: &[String],
    inputs: &[&Tensor],
    mut transform: impl FnMut(&Raster) -> Raster,
) -> Result<Vec<Tensor>> {
    check_count(keys, inputs)?;
    keys.iter()
        .zip(inputs)
        .map(|(key, x)| transform(&Raster::of(key, x)?).tensor_like(x))
        .collect()
}

/// The plumbing the eight ops share: keys, the range drawn from and the transform.
pub(crate) struct PilOp {
    keys: Vec<String>,
    range: [f64; 2],
    transform: PilTransform,
}

impl PilOp {
    fn new(ctx: &CreateContext<'_>, field: &str, limit: Limit, t: PilTransform) -> Result<Self> {
        Ok(PilOp {
            keys: paired_keys(ctx)?,
            range: fe_range(field, limit)?,
            transform: t,
        })
    }

    /// The value the call seeded `seed` applies: FastEstimator's `base + uniform(lo, hi)`.
    pub(crate) fn value(&self, seed: u64) -> f64 {
        self.transform.base() + uniform(&mut rng(seed), self.range)
    }
}

impl NumpyOp for PilOp {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let value = self.value(ctx.seed);
        apply_all(&self.keys, inputs, |img| self.transform.apply(img, value))
    }
}

fn enhance_limit() -> Limit {
    Limit::Symmetric(0.54)
}

fn shear_coef() -> Limit {
    Limit::Symmetric(0.3)
}

fn shift_limit() -> Limit {
    Limit::Symmetric(0.2)
}

/// Configuration of `Brightness`, `Color`, `Contrast` and `Sharpness`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct EnhanceConfig {
    /// Range of the factor's offset from 1: `l` for [-l, l] (factor in [1 - l, 1 + l]) or
    /// `[lo, hi]` (default 0.54). Factor 0 is the degenerate image, 1 the original.
    #[serde(default = "enhance_limit")]
    pub limit: Limit,
}

/// `ShearX` / `ShearY` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ShearConfig {
    /// Range of the shear coefficient: `s` for [-s, s] or `[lo, hi]` (default 0.3).
    #[serde(default = "shear_coef")]
    pub shear_coef: Limit,
}

/// `TranslateX` / `TranslateY` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct TranslateConfig {
    /// Range of the shift as a fraction of the width (height): `l` for [-l, l] or `[lo, hi]`
    /// (default 0.2). A positive shift moves the picture left (up).
    #[serde(default = "shift_limit")]
    pub shift_limit: Limit,
}

/// Declares op `$name`, a [`PilOp`] applying `$transform` with the range in `$config.$field`.
macro_rules! pil_op {
    ($name:ident, $config:ident, $field:ident, $transform:ident, $doc:literal) => {
        #[doc = $doc]
        pub struct $name(pub(crate) PilOp);

        impl FromConfig for $name {
            type Config = $config;
            fn from_config(config: $config, ctx: &CreateContext<'_>) -> Result<Self> {
                let field = stringify!($field);
                PilOp::new(ctx, field, config.$field, PilTransform::$transform).map($name)
            }
        }

        impl NumpyOp for $name {
            fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
                self.0.forward(inputs, ctx)
            }
        }
    };
}

pil_op!(
    Brightness,
    EnhanceConfig,
    limit,
    Brightness,
    "PIL `ImageEnhance.Brightness` with a random factor."
);
pil_op!(
    Color,
    EnhanceConfig,
    limit,
    Color,
    "PIL `ImageEnhance.Color` with a random factor."
);
pil_op!(
    Contrast,
    EnhanceConfig,
    limit,
    Contrast,
    "PIL `ImageEnhance.Contrast` with a random factor."
);
pil_op!(
    Sharpness,
    EnhanceConfig,
    limit,
    Sharpness,
    "PIL `ImageEnhance.Sharpness` with a random factor."
);
pil_op!(
    ShearX,
    ShearConfig,
    shear_coef,
    ShearX,
    "PIL shear along the width by a random coefficient."
);
pil_op!(
    ShearY,
    ShearConfig,
    shear_coef,
    ShearY,
    "PIL shear along the height by a random coefficient."
);
pil_op!(
    TranslateX,
    TranslateConfig,
    shift_limit,
    TranslateX,
    "PIL shift along the width by a random fraction of it."
);
pil_op!(
    TranslateY,
    TranslateConfig,
    shift_limit,
    TranslateY,
    "PIL shift along the height by a random fraction of it."
);
