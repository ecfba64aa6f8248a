//! FastEstimator's `DiceLoss` TensorOp (`fe.op.tensorop.loss.DiceLoss`), ported from the
//! PyTorch branch of `fe.backend.dice_score`.

use std::collections::BTreeMap;

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// `DiceLoss` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct DiceLossConfig {
    /// `true`: square predictions and labels in the denominator (`Σp² + Σy²`, the "soft" Dice of
    /// V-Net); `false` (default): `Σp + Σy`.
    #[serde(default)]
    pub soft_dice: bool,
    /// `true` (default): average over the batch. `false`: one value per sample.
    #[serde(default = "super::yes")]
    pub average_loss: bool,
    /// `true` (default): average over the channels (classes). `false`: one value per channel.
    #[serde(default = "super::yes")]
    pub channel_average: bool,
    /// Weight of each channel's Dice score before averaging, as a table
    /// `{ channel index = weight }`; unlisted channels weigh 1. Default: no weighting.
    #[serde(default)]
    pub channel_weights: Option<BTreeMap<String, f64>>,
    /// Added to the denominator against division by zero (an empty mask predicted empty scores
    /// 0); must be >= 0. Default 1e-6.
    #[serde(default = "epsilon")]
    pub epsilon: f64,
}

fn epsilon() -> f64 {
    1e-6
}

/// Inputs `[y_pred, y_true]`, both channels first `[B, C, spatial...]` (at least one spatial
/// dimension), output `[loss]`: minus the Dice score `2 Σ p y / (Σ p + Σ y + epsilon)` per sample
/// and channel (sums over the spatial dimensions), optionally weighted and averaged.
pub struct DiceLoss {
    soft: bool,
    sample_average: bool,
    channel_average: bool,
    channel_weights: Vec<(i64, f64)>,
    epsilon: f64,
}

impl FromConfig for DiceLoss {
    type Config = DiceLossConfig;
    fn from_config(config: DiceLossConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        let channel_weights = match config.channel_weights {
            Some(map) => super::index_weights("channel_weights", map)?,
            None => Vec::new(),
        };
        if let Some(&(channel, _)) = channel_weights.iter().find(|(c, _)| *c < 0) {
            return Err(Error::config(
                format!("channel_weights.{channel}"),
                "channel indices must be >= 0",
            ));
        }
        if !(config.epsilon >= 0.0 && config.epsilon.is_finite()) {
            return Err(Error::config(
                "epsilon",
                format!("must be a finite number >= 0, got {}", config.epsilon),
            ));
        }
        Ok(Self {
            soft: config.soft_dice,
            sample_average: config.average_loss,
            channel_average: config.channel_average,
            channel_weights,
            epsilon: config.epsilon,
        })
    }
}

impl DiceLoss {
    /// `[1, C]` weights for `channels` channels.
    fn weights(&self, channels: i64, like: &Tensor) -> Result<Option<Tensor>> {
        if self.channel_weights.is_empty() {
            return Ok(None);
        }
        let mut values = vec![1.0f64; channels.max(0) as usize];
        for &(channel, weight) in &self.channel_weights {
            match values.get_mut(channel as usize) {
                Some(value) => *value = weight,
                None => {
                    return Err(Error::msg(format!(
                        "channel_weights names channel {channel}, but y_pred has {channels} \
                         channel(s) (dimension 1)"
                    )))
                }
            }
        }
        Ok(Some(
            Tensor::from_slice(&values)
                .f_to_device(like.device())?
                .f_to_kind(like.kind())?
                .f_reshape([1, channels])?,
        ))
    }
}

impl TensorOp for DiceLoss {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let (y_pred, y_true) = super::pair(inputs)?;
        if y_pred.dim() < 3 {
            return Err(Error::msg(format!(
                "DiceLoss needs channels-first y_pred [batch, channels, spatial...], got shape {:?}",
                y_pred.size()
            )));
        }
        let y = super::align_target(y_pred, y_true)?;
        let kind = y_pred.kind();
        let spatial: Vec<i64> = (2..y_pred.dim() as i64).collect();
        // Like FastEstimator under mixed precision: half-precision sums over large masks
        // overflow, so use means in numerator and denominator alike ((x/N) / (y/N) = x / y).
        let reduce = |t: &Tensor| -> Result<Tensor> {
            Ok(if kind == Kind::Half {
                t.f_mean_dim(spatial.as_slice(), false, kind)?
            } else {
                t.f_sum_dim_intlist(spatial.as_slice(), false, kind)?
            })
        };
        let numerator = reduce(&y_pred.f_mul(&y)?)?;
        let denominator = if self.soft {
            reduce(&y_pred.f_square()?)?.f_add(&reduce(&y.f_square()?)?)?
        } else {
            reduce(y_pred)?.f_add(&reduce(&y)?)?
        };
        // [B, C]
        let mut dice = numerator
            .f_mul_scalar(2.0)?
            .f_div(&denominator.f_add_scalar(self.epsilon)?)?;
        if let Some(weights) = self.weights(y_pred.size()[1], &dice)? {
            dice = dice.f_mul(&weights)?;
        }
        if self.channel_average {
            dice = dice.f_mean_dim(1, false, kind)?;
        }
        if self.sample_average {
            dice = dice.f_mean_dim(0, false, kind)?;
        }
        Ok(vec![dice.f_neg()?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::testing;

    fn run(config: &str, y_pred: &Tensor, y_true: &Tensor) -> Tensor {
        let mut op = testing::tensor_op("DiceLoss", config, &["y_pred", "y"], &["dice"]).unwrap();
        op.forward(&[y_pred, y_true]).unwrap().remove(0)
    }

    fn values(t: &Tensor) -> Vec<f64> {
        Vec::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap()
    }

    fn assert_close(got: &Tensor, expected: &[f64], tolerance: f64) {
        let got = values(got);
        assert_eq!(got.len(), expected.len(), "{got:?}");
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < tolerance, "{got:?} vs {expected:?}");
        }
    }

    /// Fills `t[sample, channel, rows, cols]` with `value`.
    fn fill(t: &Tensor, sample: i64, channel: i64, rows: (i64, i64), cols: (i64, i64), value: f64) {
        let mut window = t
            .get(sample)
            .get(channel)
            .narrow(0, rows.0, rows.1 - rows.0)
            .narrow(1, cols.0, cols.1 - cols.0);
        let _ = window.fill_(value);
    }

    /// test/PR_test/unit_test/backend/test_dice_score.py, channels first: sample 0 blank,
    /// 1 all false negatives, 2 all false positives, 3 a partial match, 4 a perfect match.
    fn fe_data() -> (Tensor, Tensor) {
        let y_true = Tensor::zeros([5, 3, 20, 20], (Kind::Float, Device::Cpu));
        let y_pred = Tensor::zeros([5, 3, 20, 20], (Kind::Float, Device::Cpu));
        for sample in [1, 3, 4] {
            fill(&y_true, sample, 0, (5, 10), (5, 10), 1.0);
            fill(&y_true, sample, 1, (7, 10), (0, 20), 1.0);
            fill(&y_true, sample, 2, (2, 4), (3, 6), 1.0);
        }
        for sample in [2, 4] {
            fill(&y_pred, sample, 0, (5, 10), (5, 10), 1.0);
            fill(&y_pred, sample, 1, (7, 10), (0, 20), 1.0);
            fill(&y_pred, sample, 2, (2, 4), (3, 6), 1.0);
        }
        fill(&y_pred, 3, 0, (3, 10), (5, 10), 0.8);
        fill(&y_pred, 3, 1, (7, 10), (0, 20), 0.7);
        fill(&y_pred, 3, 2, (3, 8), (3, 6), 0.6);
        (y_pred, y_true)
    }

    const PER_CHANNEL: [f64; 15] = [
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.754_72, 0.823_53, 0.24, 1.0, 1.0, 1.0,
    ];

    fn negated(values: &[f64]) -> Vec<f64> {
        values.iter().map(|v| -v).collect()
    }

    #[test]
    fn fastestimator_dice_scores() {
        // test_dice_score.py: the loss is minus FastEstimator's dice_score.
        let (y_pred, y_true) = fe_data();
        let config = "average_loss = false\nchannel_average = false";
        let out = run(config, &y_pred, &y_true);
        assert_eq!(out.size(), [5, 3]);
        assert_close(&out, &negated(&PER_CHANNEL), 1e-4);
        // Partial match, channel 0 by hand: Σpy = 25 * 0.8 = 20, Σp = 35 * 0.8 = 28, Σy = 25.
        assert!((out.double_value(&[3, 0]) + 40.0 / (53.0 + 1e-6)).abs() < 1e-6);
        // Soft Dice: [0.84388, 0.93960, 0.31579] for the partial match.
        let soft = run(&format!("{config}\nsoft_dice = true"), &y_pred, &y_true);
        assert_close(&soft.get(3), &[-0.843_88, -0.939_60, -0.315_79], 1e-4);
    }

    #[test]
    fn fastestimator_averages_and_weights() {
        let (y_pred, y_true) = fe_data();
        // channel_average: [0, 0, 0, 0.606083, 1]
        let out = run("average_loss = false", &y_pred, &y_true);
        assert_close(&out, &negated(&[0.0, 0.0, 0.0, 0.606_083, 1.0]), 1e-4);
        // sample average only: [0.350944, 0.364706, 0.248]
        let out = run("channel_average = false", &y_pred, &y_true);
        assert_close(&out, &negated(&[0.350_944, 0.364_706, 0.248]), 1e-4);
        // both (the defaults): 0.3212166
        let out = run("", &y_pred, &y_true);
        assert_eq!(out.size(), Vec::<i64>::new());
        assert!((out.double_value(&[]) + 0.321_216_6).abs() < 1e-4);
        // channel weights [1, 2, 0.5]
        let out = run(
            "average_loss = false\nchannel_average = false\nchannel_weights = { 1 = 2.0, 2 = 0.5 }",
            &y_pred,
            &y_true,
        );
        assert_close(
            &out.get(3),
            &[-0.754_72, -0.823_53 * 2.0, -0.24 * 0.5],
            1e-4,
        );
        assert_close(&out.get(4), &[-1.0, -2.0, -0.5], 1e-4);
    }

    #[test]
    fn small_case_by_hand() {
        // One sample, one channel, 2x2: Σpy = 1.5, Σp = 1.5, Σy = 2 → 3 / 3.5; soft: Σp² = 1.25.
        let y_pred = Tensor::from_slice(&[0.5f32, 1.0, 0.0, 0.0]).reshape([1, 1, 2, 2]);
        let y_true = Tensor::from_slice(&[1i64, 1, 0, 0]).reshape([1, 1, 2, 2]);
        let out = run("", &y_pred, &y_true).double_value(&[]);
        assert!((out + 3.0 / 3.5).abs() < 1e-5, "{out}");
        let soft = run("soft_dice = true", &y_pred, &y_true).double_value(&[]);
        assert!((soft + 3.0 / 3.25).abs() < 1e-5, "{soft}");
    }

    #[test]
    fn half_precision_averages_instead_of_summing() {
        // 65 536 ones overflow a half-precision sum (max 65 504); means do not.
        let ones = Tensor::ones([1, 1, 256, 256], (Kind::Half, Device::Cpu));
        let out = run("", &ones, &ones);
        assert_eq!(out.kind(), Kind::Half);
        assert!((out.double_value(&[]) + 1.0).abs() < 1e-3, "{out:?}");
    }

    #[test]
    fn gradient_flows() {
        let (y_pred, y_true) = fe_data();
        let p = y_pred.set_requires_grad(true);
        run("soft_dice = true", &p, &y_true).backward();
        let grad = p.grad();
        assert!(grad.abs().sum(Kind::Float).double_value(&[]) > 0.0);
        assert_eq!(grad.isfinite().all().int64_value(&[]), 1);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut op = testing::tensor_op("DiceLoss", "", &["p", "y"], &["d"]).unwrap();
        let flat = Tensor::ones([2, 3], (Kind::Float, Device::Cpu));
        let err = op.forward(&[&flat, &flat]).unwrap_err();
        assert!(err.message.contains("channels-first"), "{err:?}");
        let mut op = testing::tensor_op(
            "DiceLoss",
            "channel_weights = { 3 = 2.0 }",
            &["p", "y"],
            &["d"],
        )
        .unwrap();
        let masks = Tensor::ones([1, 2, 2, 2], (Kind::Float, Device::Cpu));
        let err = op.forward(&[&masks, &masks]).unwrap_err();
        assert!(err.message.contains("channel 3"), "{err:?}");
    }

    #[test]
    fn config_errors() {
        for (config, field) in [
            ("channel_weights = { -1 = 2.0 }", "channel_weights.-1"),
            ("channel_weights = { red = 2.0 }", "channel_weights.red"),
            ("epsilon = -1e-6", "epsilon"),
            ("log_loss = true", "log_loss"),
        ] {
            let err = testing::tensor_op("DiceLoss", config, &["p", "y"], &["d"])
                .err()
                .unwrap();
            assert_eq!(err.field.as_str(), field, "{config}: {err:?}");
        }
    }
}
