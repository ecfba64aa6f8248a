//! Photometric ops after albumentations: per-pixel value maps that leave geometry (and the
//! inputs listed in `masks`) alone. uint8 images are taken as 0..=255, float images as
//! 0..=1, and results are clipped to that range, as albumentations does.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, NumpyOp, Result, StepContext};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::layout::{mask_flags, paired_keys, probability, rng, same_size, Spatial};

/// Declares photometric op `$name` (a newtype over [`Photometric`]) whose config
/// `$config` (with `masks` and `p`) converts into its value map `$pixels`.
macro_rules! photometric {
    ($name:ident, $config:ident, $pixels:ty, $doc:literal) => {
        #[doc = $doc]
        pub struct $name(pub(crate) $crate::color::Photometric<$pixels>);

        impl fe_plugin_api::FromConfig for $name {
            type Config = $config;
            fn from_config(
                config: $config,
                ctx: &fe_plugin_api::CreateContext<'_>,
            ) -> fe_plugin_api::Result<Self> {
                let (p, masks) = (config.p, config.masks.clone());
                let pixels = <$pixels>::try_from(config)?;
                $crate::color::Photometric::new(ctx, &masks, p, pixels).map($name)
            }
        }

        impl fe_plugin_api::NumpyOp for $name {
            fn forward(
                &self,
                inputs: &[&fe_plugin_api::tch::Tensor],
                ctx: &fe_plugin_api::StepContext<'_>,
            ) -> fe_plugin_api::Result<Vec<fe_plugin_api::tch::Tensor>> {
                fe_plugin_api::NumpyOp::forward(&self.0, inputs, ctx)
            }
        }
    };
}

/// One photometric transform: what it draws per call and how it maps pixel values.
pub(crate) trait Pixels: Send + Sync + 'static {
    /// The call's parameters, drawn after the `p` draw; `image` is the first non-mask input.
    fn draw(&self, rng: &mut ChaCha8Rng, image: &Tensor, layout: &Spatial) -> Result<Vec<f64>>;
    /// `x` (an image, never a mask) transformed with `params`.
    fn apply(&self, params: &[f64], x: &Tensor, layout: &Spatial) -> Result<Tensor>;
}

/// The plumbing every photometric op shares: keys, masks and the probability.
pub(crate) struct Photometric<T> {
    keys: Vec<String>,
    masks: Vec<bool>,
    p: f64,
    pub(crate) op: T,
}

impl<T: Pixels> Photometric<T> {
    pub(crate) fn new(ctx: &CreateContext<'_>, masks: &[String], p: f64, op: T) -> Result<Self> {
        let keys = paired_keys(ctx)?;
        Ok(Photometric {
            masks: mask_flags(&keys, masks)?,
            keys,
            p: probability("p", p)?,
            op,
        })
    }

    /// The parameters of the call seeded `seed` on `inputs`; `None` when `p` says skip.
    pub(crate) fn params(&self, inputs: &[&Tensor], seed: u64) -> Result<Option<Vec<f64>>> {
        let layouts = same_size(&self.keys, inputs)?;
        let Some(i) = self.masks.iter().position(|m| !m) else {
            return Ok(None);
        };
        let mut rng = rng(seed);
        if rng.random::<f64>() >= self.p {
            return Ok(None);
        }
        self.op.draw(&mut rng, inputs[i], &layouts[i]).map(Some)
    }
}

impl<T: Pixels> NumpyOp for Photometric<T> {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let params = self.params(inputs, ctx.seed)?;
        inputs
            .iter()
            .zip(&self.keys)
            .zip(&self.masks)
            .map(|((x, key), &mask)| match (&params, mask) {
                (Some(params), false) => self.op.apply(params, x, &Spatial::of(key, x, false)?),
                _ => Ok(x.shallow_clone()),
            })
            .collect()
    }
}

/// The largest pixel value of an image of `kind`: 255 for uint8, 1 for floats.
pub(crate) fn max_value(kind: Kind) -> Result<f64> {
    match kind {
        Kind::Uint8 => Ok(255.0),
        Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16 => Ok(1.0),
        other => Err(Error::unsupported(format!(
            "photometric ops take uint8 (0..=255) or float (0..=1) images, got {other:?}"
        ))),
    }
}

/// How float results become uint8.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToUint8 {
    /// Truncation, as albumentations' lookup tables (`astype(np.uint8)`) do.
    Truncate,
    /// Round half to even, as OpenCV's `saturate_cast` does.
    Round,
}

/// `y` (float, in the image's value scale) clipped to the range and back to `kind`.
pub(crate) fn restore(y: &Tensor, kind: Kind, to_uint8: ToUint8) -> Result<Tensor> {
    let max = max_value(kind)?;
    let clipped = y.f_clamp(0.0, max)?;
    let y = if kind == Kind::Uint8 && to_uint8 == ToUint8::Round {
        clipped.f_round()?
    } else {
        clipped
    };
    Ok(y.f_to_kind(kind)?.f_contiguous()?)
}

/// The image as float32 (float64 stays float64) in its own value scale.
pub(crate) fn values(x: &Tensor) -> Result<Tensor> {
    max_value(x.kind())?;
    Ok(match x.kind() {
        Kind::Double => x.shallow_clone(),
        _ => x.f_to_kind(Kind::Float)?,
    })
}

/// The channel axis of an `(H, W, C)` image, or an error naming `what` needs channels.
pub(crate) fn channels(layout: &Spatial, x: &Tensor, what: &str) -> Result<(i64, i64)> {
    if layout.plain {
        return Err(Error::msg(format!(
            "{what} needs an (H, W, C) image, got shape {:?}",
            x.size()
        )));
    }
    let axis = layout.w_axis() + 1;
    Ok((axis, x.size()[axis as usize]))
}

/// `x` mapped through the 256-entry table `lut` (uint8 images only).
pub(crate) fn lookup(x: &Tensor, lut: &[f64]) -> Result<Tensor> {
    if let Some((mut data, shape)) = crate::bytes::bytes_of(x)? {
        let table: Vec<u8> = lut.iter().map(|&v| v as u8).collect();
        for byte in &mut data {
            *byte = table[usize::from(*byte)];
        }
        return crate::bytes::tensor_of(&data, &shape);
    }
    let table = Tensor::f_from_slice(lut)?
        .f_to_device(x.device())?
        .f_to_kind(Kind::Uint8)?;
    let index = x.f_to_kind(Kind::Int64)?.f_flatten(0, -1)?;
    Ok(table.f_index_select(0, &index)?.f_reshape(x.size())?)
}

/// `x + delta`, clipped. For uint8 images the delta is truncated toward zero first, as
/// albucore's `add_array` does (it adds the noise in the image's integer type).
pub(crate) fn add(x: &Tensor, delta: &Tensor) -> Result<Tensor> {
    let delta = if x.kind() == Kind::Uint8 {
        delta.f_trunc()?
    } else {
        delta.shallow_clone()
    };
    restore(&values(x)?.f_add(&delta)?, x.kind(), ToUint8::Truncate)
}

/// Python's `random.uniform(a, b)`.
pub(crate) fn uniform(rng: &mut ChaCha8Rng, [a, b]: [f64; 2]) -> f64 {
    a + (b - a) * rng.random::<f64>()
}

/// A range from a config value: `l` means `[-l, l]` (or `[base - l, base + l]`).
pub(crate) fn range(field: &str, value: crate::Limit) -> Result<[f64; 2]> {
    let [lo, hi] = match value {
        crate::Limit::Symmetric(l) => [-l, l],
        crate::Limit::Range(r) => r,
    };
    if lo <= hi && lo.is_finite() && hi.is_finite() {
        Ok([lo, hi])
    } else {
        Err(Error::config(
            field,
            format!("needs finite lo <= hi, got [{lo}, {hi}]"),
        ))
    }
}
