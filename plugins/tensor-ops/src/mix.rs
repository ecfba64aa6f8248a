//! FastEstimator's batch-mixing TensorOps, `MixUpBatch` and `CutMixBatch` (PyTorch backend:
//! images channels first, `[B, C, H, W]`), each sample mixed with its neighbour
//! `roll(batch, 1, 0)`.
//!
//! FastEstimator ≥ 1.5 mixes the labels with λ as drawn, the images with `max(λ, 1 − λ)`, so the
//! two disagree whenever the draw is below 0.5. Here every input is mixed with the one weight
//! the images get, and that weight can be output for `MixLoss` (FastEstimator ≤ 1.4's pairing).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

use crate::beta::{beta, generator, uniform};

fn one() -> f64 {
    1.0
}

/// Configuration of `MixUpBatch`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct MixUpConfig {
    /// λ ~ Beta(alpha, alpha) (default 1: uniform).
    #[serde(default = "one")]
    pub alpha: f64,
    /// `true`: one λ for the whole batch; `false` (default, as FastEstimator): one per sample.
    #[serde(default)]
    pub shared_beta: bool,
}

/// Configuration of `CutMixBatch`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct CutMixConfig {
    /// λ ~ Beta(alpha, alpha) (default 1).
    #[serde(default = "one")]
    pub alpha: f64,
}

/// Checks `alpha` and the key counts: `n` inputs, then `n` mixed outputs and optionally λ.
fn check(alpha: f64, ctx: &CreateContext<'_>) -> Result<bool> {
    if !(alpha.is_finite() && alpha > 0.0) {
        return Err(Error::config("alpha", "must be a finite number above 0"));
    }
    let (inputs, outputs) = (ctx.inputs.len(), ctx.outputs.len());
    if inputs == 0 || !(outputs == inputs || outputs == inputs + 1) {
        return Err(Error::config(
            "outputs",
            format!(
                "expected one output per input ({inputs}), optionally followed by the mixing \
                 weight λ, got {outputs}"
            ),
        ));
    }
    Ok(outputs == inputs + 1)
}

/// `lam · t + (1 − lam) · roll(t, 1, 0)`, `lam` of shape `[B]` broadcast over the rest.
fn mix(t: &Tensor, lam: &Tensor, key: usize) -> Result<Tensor> {
    let size = t.size();
    if size.first() != lam.size().first() {
        return Err(Error::msg(format!(
            "input {key} has shape {size:?}: every input needs the batch size {:?} first",
            lam.size()
        )));
    }
    if !t.f_is_floating_point()? {
        return Err(Error::msg(format!(
            "input {key} is {:?}: mixing needs floating values (one-hot encode labels first)",
            t.kind()
        )));
    }
    let mut shape = vec![-1i64];
    shape.resize(size.len().max(1), 1);
    let lam = lam.f_to_kind(t.kind())?.f_reshape(&shape)?;
    let rolled = t
        .f_roll([1], [0])?
        .f_mul(&lam.f_neg()?.f_add_scalar(1.0)?)?;
    Ok(t.f_mul(&lam)?.f_add(&rolled)?)
}

/// A `[B]` Float32 tensor of `values` on `like`'s device.
fn weights(values: &[f32], like: &Tensor) -> Result<Tensor> {
    Ok(Tensor::from_slice(values).f_to_device(like.device())?)
}

/// MixUp: every input becomes `λ · x + (1 − λ) · roll(x)` with `λ = max(λ₀, 1 − λ₀)`,
/// `λ₀ ~ Beta(α, α)`; the same λ for every input of a sample.
pub struct MixUpBatch {
    config: MixUpConfig,
    emit_lambda: bool,
}

impl FromConfig for MixUpBatch {
    type Config = MixUpConfig;
    fn from_config(config: MixUpConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let emit_lambda = check(config.alpha, ctx)?;
        Ok(Self {
            config,
            emit_lambda,
        })
    }
}

/// The raw draws λ₀ of one call: one for the batch (`shared`) or one per sample.
pub(crate) fn mixup_draws(seed: u64, alpha: f64, shared: bool, batch: usize) -> Vec<f64> {
    let mut rng = generator(seed);
    if shared {
        vec![beta(&mut rng, alpha); batch]
    } else {
        (0..batch).map(|_| beta(&mut rng, alpha)).collect()
    }
}

impl TensorOp for MixUpBatch {
    fn forward(&mut self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let batch = inputs[0].size().first().copied().unwrap_or(0);
        let lam: Vec<f32> = mixup_draws(
            ctx.seed,
            self.config.alpha,
            self.config.shared_beta,
            batch as usize,
        )
        .into_iter()
        .map(|l| l.max(1.0 - l) as f32)
        .collect();
        let lam = weights(&lam, inputs[0])?;
        let mut outputs = inputs
            .iter()
            .enumerate()
            .map(|(key, t)| mix(t, &lam, key))
            .collect::<Result<Vec<_>>>()?;
        if self.emit_lambda {
            outputs.push(lam);
        }
        Ok(outputs)
    }
}

/// The patch `(x1, x2, y1, y2)` FastEstimator's `_get_patch_coordinates` cuts for `lam` and the
/// uniform draws `(cut_x, cut_y)` from an image `width × height` (`torch.round`: ties to even).
pub(crate) fn patch(width: i64, height: i64, lam: f64, cut_x: f64, cut_y: f64) -> [i64; 4] {
    let (w, h) = (width as f64, height as f64);
    let (cx, cy) = (w * cut_x, h * cut_y);
    let (cw, ch) = (w * (1.0 - lam).sqrt(), h * (1.0 - lam).sqrt());
    [
        (cx - cw / 2.0).max(0.0).round_ties_even() as i64,
        (cx + cw / 2.0).min(w).round_ties_even() as i64,
        (cy - ch / 2.0).max(0.0).round_ties_even() as i64,
        (cy + ch / 2.0).min(h).round_ties_even() as i64,
    ]
}

/// The draws of one call: `(λ₀, cut_x, cut_y)`.
pub(crate) fn cutmix_draws(seed: u64, alpha: f64) -> (f64, f64, f64) {
    let mut rng = generator(seed);
    let lam = beta(&mut rng, alpha);
    (lam, uniform(&mut rng), uniform(&mut rng))
}

/// CutMix: a patch of the first input (images `[B, C, H, W]`) is replaced by the same patch of
/// its neighbour; the other inputs (one-hot labels) are mixed with the share of pixels kept.
pub struct CutMixBatch {
    config: CutMixConfig,
    emit_lambda: bool,
}

impl FromConfig for CutMixBatch {
    type Config = CutMixConfig;
    fn from_config(config: CutMixConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let emit_lambda = check(config.alpha, ctx)?;
        Ok(Self {
            config,
            emit_lambda,
        })
    }
}

impl TensorOp for CutMixBatch {
    fn forward(&mut self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let image = inputs[0];
        let size = image.size();
        let [batch, _, height, width] = size[..] else {
            return Err(Error::msg(format!(
                "CutMixBatch needs images [B, C, H, W] first, got shape {size:?}"
            )));
        };
        let (lam, cut_x, cut_y) = cutmix_draws(ctx.seed, self.config.alpha);
        let [x1, x2, y1, y2] = patch(width, height, lam.max(1.0 - lam), cut_x, cut_y);
        let mut mixed = image.f_zeros_like()?;
        mixed.f_copy_(image)?;
        if x2 > x1 && y2 > y1 {
            let source =
                image
                    .f_roll([1], [0])?
                    .f_narrow(2, y1, y2 - y1)?
                    .f_narrow(3, x1, x2 - x1)?;
            let mut region = mixed.f_narrow(2, y1, y2 - y1)?.f_narrow(3, x1, x2 - x1)?;
            region.f_copy_(&source)?;
        }
        let kept = 1.0 - ((x2 - x1) * (y2 - y1)) as f32 / (width * height) as f32;
        let lam = weights(&vec![kept; batch as usize], image)?;
        let mut outputs = vec![mixed];
        for (key, t) in inputs.iter().enumerate().skip(1) {
            outputs.push(mix(t, &lam, key)?);
        }
        if self.emit_lambda {
            outputs.push(lam.f_to_kind(Kind::Float)?);
        }
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests;
