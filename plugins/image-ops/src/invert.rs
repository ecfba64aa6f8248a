//! `InvertImg`: every value `v` becomes `max - v` (255 for uint8, 1 for floats).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use rand_chacha::ChaCha8Rng;

use crate::color::{max_value, Pixels};
use crate::color_ops::PlainConfig;
use crate::layout::Spatial;

/// The negative of an image.
pub(crate) struct InvertMap;

impl TryFrom<PlainConfig> for InvertMap {
    type Error = Error;
    fn try_from(_: PlainConfig) -> Result<Self> {
        Ok(InvertMap)
    }
}

impl Pixels for InvertMap {
    fn draw(&self, _: &mut ChaCha8Rng, _: &Tensor, _: &Spatial) -> Result<Vec<f64>> {
        Ok(Vec::new())
    }

    /// No clipping: albumentations' `invert` is a bare `MAX - img`, so float values outside
    /// [0, 1] stay outside it (mirrored), as there.
    fn apply(&self, _: &[f64], x: &Tensor, _: &Spatial) -> Result<Tensor> {
        let max = max_value(x.kind())?;
        Ok(x.f_rsub_scalar(max)?.f_to_kind(x.kind())?)
    }
}

photometric!(
    InvertImg,
    PlainConfig,
    InvertMap,
    "Inverts images: `max - x`, 255 for uint8 and 1 for floats."
);
