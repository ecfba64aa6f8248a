//! FastEstimator's `SuperLoss` (Castells et al., "SuperLoss: A Generic Loss for Robust
//! Curriculum Learning", NeurIPS 2020): each sample's loss `l` becomes
//! `(l − τ)·σ + λ·(ln σ)²` with the confidence `σ = exp(−W(½·max(−2/e, (l − τ)/λ)))`, the
//! minimiser of that expression in σ (`W` the principal branch of Lambert W). Samples with a
//! loss above the threshold τ (likely hard or mislabelled) are down-weighted.
//!
//! FastEstimator wraps a loss op; a manifest cannot pass an op as a value, so this one reads
//! the per-sample loss of any loss op run with `average_loss = false`. τ is a constant or, with
//! `threshold = "exp"` (the default), an exponential moving average of the batch-mean loss,
//! one per mode, as FastEstimator keeps it: the first batch sets it, then
//! `τ ← τ − 0.1·(τ − mean(l))`; the warm-up pass does not count as that first batch.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Mode, Result, State, StepContext, TensorOp};
use serde::{Deserialize, Serialize};

/// `threshold = "exp"` or a number.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(untagged)]
pub enum Threshold {
    /// A fixed average loss, e.g. `ln(classes)` for cross-entropy.
    Fixed(f64),
    /// `"exp"`: an exponential moving average of the loss.
    Named(ExpName),
}

/// The one accepted name.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
pub enum ExpName {
    /// Exponential moving average.
    #[serde(rename = "exp")]
    Exp,
}

/// Configuration of `SuperLoss`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SuperLossConfig {
    /// τ: `"exp"` (moving average, the default) or a constant.
    #[serde(default = "exp")]
    pub threshold: Threshold,
    /// λ > 0; as it grows, SuperLoss tends to the plain loss minus τ.
    #[serde(default = "one")]
    pub regularization: f64,
    /// Mean over the batch; false: one value per sample.
    #[serde(default = "yes")]
    pub average_loss: bool,
}

fn exp() -> Threshold {
    Threshold::Named(ExpName::Exp)
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

/// FastEstimator's cap on `(l − τ)/λ`: slightly above −2/e, where `W(½·x)` reaches −1.
const CAP: f64 = -1.999_999_8 / std::f64::consts::E;

/// Halley steps from the starting guess. FastEstimator stops once every element moved by at
/// most 1e-6 relative (usually after 2); a fixed count avoids a device sync per step, and 8
/// reach float64 precision from these guesses everywhere in the capped domain.
const HALLEY_STEPS: usize = 8;

/// Inputs `[per_sample_loss]`, outputs `[loss]` or `[loss, confidence]`.
pub struct SuperLoss {
    config: SuperLossConfig,
    /// τ of each mode (indexed by `Mode as usize`) once a real (not warm-up) batch set it.
    tau: [Option<Tensor>; 4],
    confidence: bool,
}

impl FromConfig for SuperLoss {
    type Config = SuperLossConfig;
    fn from_config(config: SuperLossConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), None)?;
        if !matches!(ctx.outputs.len(), 1 | 2) {
            return Err(Error::config(
                "outputs",
                format!(
                    "expected the loss key, optionally followed by a confidence key; got {} keys",
                    ctx.outputs.len()
                ),
            ));
        }
        if !(config.regularization > 0.0 && config.regularization.is_finite()) {
            return Err(Error::config(
                "regularization",
                format!("must be a finite number > 0, got {}", config.regularization),
            ));
        }
        if let Threshold::Fixed(tau) = config.threshold {
            if !tau.is_finite() {
                return Err(Error::config(
                    "threshold",
                    "must be \"exp\" or a finite number",
                ));
            }
        }
        Ok(Self {
            config,
            tau: [None, None, None, None],
            confidence: ctx.outputs.len() == 2,
        })
    }
}

impl SuperLoss {
    /// τ for this batch of per-sample losses, updating the moving average.
    fn tau(&mut self, loss: &Tensor, ctx: &StepContext<'_>) -> Result<Tensor> {
        let mean = match self.config.threshold {
            Threshold::Fixed(tau) => {
                return Ok(Tensor::f_scalar_tensor(tau, (Kind::Double, loss.device()))?)
            }
            Threshold::Named(ExpName::Exp) => loss.f_detach()?.f_mean(Kind::Double)?,
        };
        let slot = &mut self.tau[ctx.mode as usize];
        let tau = match slot.take() {
            Some(tau) => tau.f_sub(&tau.f_sub(&mean)?.f_mul_scalar(0.1)?)?,
            None => mean,
        };
        // FastEstimator assigns τ during warm-up too but leaves it uninitialised, so the first
        // real batch starts the average afresh.
        if !ctx.warmup {
            *slot = Some(tau.shallow_clone());
        }
        Ok(tau)
    }
}

impl TensorOp for SuperLoss {
    fn forward(&mut self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let [loss] = inputs else {
            return Err(Error::msg("expected one input: the per-sample loss"));
        };
        if !loss.is_floating_point() {
            return Err(Error::msg(format!(
                "the loss must be floating point, got {:?}",
                loss.kind()
            )));
        }
        let tau = self.tau(loss, ctx)?;
        let lam = self.config.regularization;
        let centred = loss.f_sub(&tau.f_to_kind(loss.kind())?)?;
        // σ is the minimiser of the loss in σ, so by the envelope theorem its own gradient
        // contributes nothing: compute it without a graph (the paper's authors say to remove
        // the gradients; FastEstimator differentiates through its Halley iteration).
        let ln_sigma = {
            let _guard = fe_plugin_api::tch::no_grad_guard();
            let beta = loss
                .f_to_kind(Kind::Double)?
                .f_sub(&tau)?
                .f_div_scalar(lam)?
                .f_clamp_min(CAP)?;
            lambert_w(&beta.f_mul_scalar(0.5)?)?
                .f_neg()?
                .f_to_kind(loss.kind())?
        };
        let sigma = ln_sigma.f_exp()?;
        let super_loss = centred
            .f_mul(&sigma)?
            .f_add(&ln_sigma.f_square()?.f_mul_scalar(lam)?)?;
        let super_loss = if self.config.average_loss {
            super_loss.f_mean(super_loss.kind())?
        } else {
            super_loss
        };
        let mut outputs = vec![super_loss];
        if self.confidence {
            outputs.push(sigma);
        }
        Ok(outputs)
    }

    fn state(&self) -> Result<State> {
        let mut taus = Vec::new();
        for mode in Mode::ALL {
            if let Some(tau) = &self.tau[mode as usize] {
                taus.push(SavedTau {
                    mode,
                    tau: tau.f_double_value(&[])?,
                });
            }
        }
        State::from_json(&taus)
    }

    fn load_state(&mut self, state: State) -> Result<()> {
        if state.is_empty() {
            return Ok(());
        }
        let taus: Vec<SavedTau> = state.json()?;
        self.tau = [None, None, None, None];
        for saved in taus {
            // The device is the loss's, known at the next call; a CPU scalar combines with it.
            self.tau[saved.mode as usize] = Some(Tensor::f_scalar_tensor(
                saved.tau,
                (Kind::Double, fe_plugin_api::tch::Device::Cpu),
            )?);
        }
        Ok(())
    }
}

/// τ of one mode in a checkpoint.
#[derive(Serialize, Deserialize)]
struct SavedTau {
    mode: Mode,
    tau: f64,
}

/// The principal branch of Lambert W on `z ≥ −1/e` (float64): FastEstimator's starting guesses
/// (a series at the branch point below −0.2649, Winitzki's approximation above) refined by
/// Halley's method, with its guard against dividing by zero at W = −1.
pub fn lambert_w(z: &Tensor) -> Result<Tensor> {
    let e = std::f64::consts::E;
    let p2 = z
        .f_mul_scalar(e)?
        .f_add_scalar(1.0)?
        .f_mul_scalar(2.0)?
        .f_clamp_min(0.0)?;
    let p = p2.f_sqrt()?;
    let taylor = p
        .f_sub(&p2.f_div_scalar(3.0)?)?
        .f_add(&p2.f_mul(&p)?.f_mul_scalar(0.152_777_777_7)?)?
        .f_add_scalar(-1.0)?;
    let log1pz = z.f_log1p()?;
    let winitzki = log1pz.f_mul(
        &log1pz
            .f_log1p()?
            .f_div(&log1pz.f_add_scalar(2.0)?)?
            .f_neg()?
            .f_add_scalar(1.0)?,
    )?;
    let below = z.f_lt(-0.2649)?;
    let mut w = taylor.f_where_self(&below, &winitzki)?;
    for _ in 0..HALLEY_STEPS {
        let f = w.f_sub(&z.f_mul(&w.f_neg()?.f_exp()?)?)?;
        let w1 = w.f_add_scalar(1.000_000_1)?;
        let delta = f.f_div(
            &w1.f_sub(
                &w.f_add_scalar(2.0)?
                    .f_mul(&f)?
                    .f_div(&w1.f_mul_scalar(2.0)?)?,
            )?,
        )?;
        w = w.f_sub(&delta)?;
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Kind, Tensor};
    use fe_plugin_api::{testing, Mode, StepContext};

    #[test]
    fn lambert_w_matches_fastestimators_documented_values() {
        // fe.backend.lambertw's docstring (3 decimals), and W(x)·e^W(x) = x to float64 precision.
        let z = [
            -1.0 / std::f64::consts::E,
            -0.34,
            -0.32,
            -0.2,
            0.0,
            0.12,
            0.15,
            1.0,
            5.0,
            100.0,
        ];
        let want = [
            -1.0, -0.654, -0.560, -0.259, 0.0, 0.108, 0.132, 0.567, 1.327, 3.386,
        ];
        let w = Vec::<f64>::try_from(&super::lambert_w(&Tensor::from_slice(&z)).unwrap()).unwrap();
        for ((w, want), z) in w.iter().zip(want).zip(z) {
            assert!((w - want).abs() < 5e-4, "W({z}) = {w}, want {want}");
            if z > -0.36 {
                assert!((w * w.exp() - z).abs() < 1e-12, "W({z}) = {w}");
            }
        }
    }

    #[test]
    fn the_moving_threshold_is_kept_per_mode_and_restored_from_its_state() {
        let loss = |s: f64| Tensor::from_slice(&[0.5 + s, 1.5, 2.5 * s]).to_kind(Kind::Double);
        let train = |s| StepContext {
            global_step: s,
            ..StepContext::for_tests()
        };
        let eval = StepContext {
            mode: Mode::Eval,
            ..StepContext::for_tests()
        };
        let mut a = testing::tensor_op("SuperLoss", "", &["l"], &["sl"]).unwrap();
        a.forward_with(&[&loss(1.0)], &train(1)).unwrap();
        a.forward_with(&[&loss(2.0)], &train(2)).unwrap();
        // An eval batch starts its own average and leaves training's alone.
        a.forward_with(&[&loss(9.0)], &eval).unwrap();
        let mut b = testing::tensor_op("SuperLoss", "", &["l"], &["sl"]).unwrap();
        b.load_state(a.state().unwrap()).unwrap();
        let next = loss(3.0);
        let from_a = a.forward_with(&[&next], &train(3)).unwrap().remove(0);
        let from_b = b.forward_with(&[&next], &train(3)).unwrap().remove(0);
        assert_eq!(from_a.double_value(&[]), from_b.double_value(&[]));
        let fresh = testing::tensor_op("SuperLoss", "", &["l"], &["sl"])
            .unwrap()
            .forward_with(&[&next], &train(3))
            .unwrap()
            .remove(0);
        assert_ne!(from_a.double_value(&[]), fresh.double_value(&[]));
    }

    #[test]
    fn bad_settings_are_refused() {
        let error = testing::tensor_op("SuperLoss", "regularization = 0", &["l"], &["sl"])
            .err()
            .unwrap();
        assert!(format!("{error:?}").contains("regularization"), "{error:?}");
        let error = testing::tensor_op("SuperLoss", "threshold = \"mean\"", &["l"], &["sl"])
            .err()
            .unwrap();
        assert!(format!("{error:?}").contains("threshold"), "{error:?}");
        let error = testing::tensor_op("SuperLoss", "", &["l"], &["a", "b", "c"])
            .err()
            .unwrap();
        assert!(format!("{error:?}").contains("outputs"), "{error:?}");
    }
}
