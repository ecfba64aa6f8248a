//! FastEstimator's `Normalize` TensorOp (`fe.op.tensorop.Normalize`), ported from the PyTorch
//! branch of `fe.backend.normalize` (torchvision's `Normalize`).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// Added to the scaled standard deviation, as FastEstimator does.
const EPSILON: f64 = 1e-7;

/// A statistic: one value for every element, or one per channel.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum Stat {
    /// The same value for every channel.
    One(f64),
    /// One value per channel (dimension -3 of the input).
    PerChannel(Vec<f64>),
}

impl Stat {
    fn values(&self) -> Vec<f64> {
        match self {
            Stat::One(value) => vec![*value],
            Stat::PerChannel(values) => values.clone(),
        }
    }
}

/// `Normalize` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct NormalizeConfig {
    /// Mean in units of `max_pixel_value`: one number, or one per channel. Default
    /// `[0.485, 0.456, 0.406]` (ImageNet).
    #[serde(default = "imagenet_mean")]
    pub mean: Stat,
    /// Standard deviation in units of `max_pixel_value`: one number, or one per channel.
    /// Default `[0.229, 0.224, 0.225]` (ImageNet).
    #[serde(default = "imagenet_std")]
    pub std: Stat,
    /// The value `mean` and `std` are multiplied by (the input's full scale, e.g. 255 for 8-bit
    /// images); use 1.0 to give `mean` and `std` in the input's own units. Must be finite and
    /// greater than 0. Default 255.0.
    #[serde(default = "byte_max")]
    pub max_pixel_value: f64,
}

fn imagenet_mean() -> Stat {
    Stat::PerChannel(vec![0.485, 0.456, 0.406])
}

fn imagenet_std() -> Stat {
    Stat::PerChannel(vec![0.229, 0.224, 0.225])
}

fn byte_max() -> f64 {
    255.0
}

/// Inputs: one or more tensors; outputs: as many tensors
/// `(x - mean * max_pixel_value) / (std * max_pixel_value + 1e-7)`. Per-channel statistics apply
/// along dimension -3, i.e. channels-first images `[C, H, W]` or batches `[B, C, H, W]`;
/// integer inputs give `float32`, floating inputs keep their precision.
pub struct Normalize {
    /// Scaled means, one or one per channel.
    mean: Vec<f64>,
    /// Scaled standard deviations plus epsilon, one or one per channel.
    std: Vec<f64>,
}

impl FromConfig for Normalize {
    type Config = NormalizeConfig;
    fn from_config(config: NormalizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        super::expect_paired_keys(ctx)?;
        let scale = config.max_pixel_value;
        if !(scale > 0.0 && scale.is_finite()) {
            return Err(Error::config(
                "max_pixel_value",
                format!("must be a finite number greater than 0, got {scale}"),
            ));
        }
        let (mean, std) = (config.mean.values(), config.std.values());
        for (field, values) in [("mean", &mean), ("std", &std)] {
            if values.is_empty() {
                return Err(Error::config(field, "needs at least one value"));
            }
            if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
                return Err(Error::config(
                    field,
                    format!("values must be finite, got {bad}"),
                ));
            }
        }
        if mean.len() > 1 && std.len() > 1 && mean.len() != std.len() {
            return Err(Error::config(
                "std",
                format!(
                    "has {} channel values but mean has {}",
                    std.len(),
                    mean.len()
                ),
            ));
        }
        let mean: Vec<f64> = mean.iter().map(|m| m * scale).collect();
        let std: Vec<f64> = std.iter().map(|s| s * scale + EPSILON).collect();
        if std.contains(&0.0) {
            return Err(Error::config(
                "std",
                "a standard deviation evaluates to zero, which would divide by zero",
            ));
        }
        Ok(Self { mean, std })
    }
}

impl Normalize {
    /// `values` as a scalar or a `[C, 1, 1]` tensor for `input`.
    fn apply(
        input: &Tensor,
        values: &[f64],
        op: fn(&Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let channels = values.len() as i64;
        let stat = Tensor::from_slice(values)
            .f_to_kind(input.kind())?
            .f_to_device(input.device())?;
        let stat = if channels > 1 {
            stat.f_reshape([channels, 1, 1])?
        } else {
            stat.f_reshape([] as [i64; 0])?
        };
        op(input, &stat)
    }

    fn normalize(&self, input: &Tensor) -> Result<Tensor> {
        let channels = self.mean.len().max(self.std.len());
        if channels > 1 {
            let size = input.size();
            let found = (size.len() >= 3).then(|| size[size.len() - 3]);
            if found != Some(channels as i64) {
                return Err(Error::msg(format!(
                    "per-channel mean/std have {channels} values, so the input must be \
                     channels-first [..., {channels}, H, W]; got shape {size:?}"
                )));
            }
        }
        let x = if input.is_floating_point() {
            input.shallow_clone()
        } else {
            input.f_to_kind(Kind::Float)?
        };
        let centered = Self::apply(&x, &self.mean, |a, b| Ok(a.f_sub(b)?))?;
        Self::apply(&centered, &self.std, |a, b| Ok(a.f_div(b)?))
    }
}

impl TensorOp for Normalize {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        inputs.iter().map(|input| self.normalize(input)).collect()
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::testing;

    fn run(config: &str, input: &Tensor) -> Tensor {
        let mut op = testing::tensor_op("Normalize", config, &["x"], &["y"]).unwrap();
        op.forward(&[input]).unwrap().remove(0)
    }

    /// test/PR_test/unit_test/op/tensorop/test_normalize.py: 0..26 as a channels-last
    /// [1, 3, 3, 3] image, moved to channels first for torch.
    fn fe_image(kind: Kind) -> Tensor {
        Tensor::arange(27, (kind, Device::Cpu))
            .reshape([1, 3, 3, 3])
            .permute([0, 3, 1, 2])
    }

    #[test]
    fn fastestimator_single_statistic() {
        // test_normalize_torch / _float: expected[0, 0, 0, 0] = -1.6688062 and
        // expected[0, 2, 2, 2] = 1.6688062, both to 2 decimals (FastEstimator's tolerance).
        // By hand: (x - 0.482 * 27) / (0.289 * 27 + 1e-7).
        let config = "mean = 0.482\nstd = 0.289\nmax_pixel_value = 27.0";
        for kind in [Kind::Int64, Kind::Float] {
            let out = run(config, &fe_image(kind));
            assert_eq!(out.kind(), Kind::Float);
            assert_eq!(out.size(), [1, 3, 3, 3]);
            assert!((out.double_value(&[0, 0, 0, 0]) + 1.668_806_2).abs() < 0.005);
            assert!((out.double_value(&[0, 2, 2, 2]) - 1.668_806_2).abs() < 0.005);
            let by_hand = (26.0 - 0.482 * 27.0) / (0.289 * 27.0 + 1e-7);
            assert!((out.double_value(&[0, 2, 2, 2]) - by_hand).abs() < 1e-5);
        }
    }

    #[test]
    fn fastestimator_per_channel_statistics() {
        // test_normalize_torch_multi: channel c uses mean[c] * 27 and std[c] * 27.
        // expected_multi (channels last) [0,0,0,0] = -1.5331011, [0,0,0,1] = -1.543425,
        // [0,2,2,2] = 1.5434251.
        let config = "mean = [0.44, 0.48, 0.52]\nstd = [0.287, 0.287, 0.287]\nmax_pixel_value = 27";
        let out = run(config, &fe_image(Kind::Float));
        assert!((out.double_value(&[0, 0, 0, 0]) + 1.533_101_1).abs() < 1e-4);
        assert!((out.double_value(&[0, 1, 0, 0]) + 1.543_425).abs() < 1e-4);
        assert!((out.double_value(&[0, 2, 2, 2]) - 1.543_425_1).abs() < 1e-4);
        // Every element by hand: element (c, h, w) holds 9h + 3w + c.
        for c in 0..3i64 {
            for h in 0..3i64 {
                for w in 0..3i64 {
                    let x = (9 * h + 3 * w + c) as f64;
                    let mean = [0.44, 0.48, 0.52][c as usize] * 27.0;
                    let want = (x - mean) / (0.287 * 27.0 + 1e-7);
                    let got = out.double_value(&[0, c, h, w]);
                    assert!((got - want).abs() < 1e-5, "({c},{h},{w}) {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn defaults_are_imagenet_over_255_and_work_without_a_batch_dimension() {
        let image = Tensor::full([3, 1, 1], 255.0, (Kind::Float, Device::Cpu));
        let out = run("", &image);
        for (c, (m, s)) in [(0.485, 0.229), (0.456, 0.224), (0.406, 0.225)]
            .into_iter()
            .enumerate()
        {
            let want = (255.0 - m * 255.0) / (s * 255.0 + 1e-7);
            assert!((out.double_value(&[c as i64, 0, 0]) - want).abs() < 1e-4);
        }
    }

    #[test]
    fn several_inputs_double_precision_and_gradients() {
        let a = Tensor::from_slice(&[2.0f64, 4.0]).set_requires_grad(true);
        let b = Tensor::from_slice(&[0u8, 10]);
        let mut op = testing::tensor_op(
            "Normalize",
            "mean = 1.0\nstd = 2.0\nmax_pixel_value = 1.0",
            &["a", "b"],
            &["na", "nb"],
        )
        .unwrap();
        let out = op.forward(&[&a, &b]).unwrap();
        assert_eq!(out[0].kind(), Kind::Double);
        assert_eq!(out[1].kind(), Kind::Float);
        assert!((out[0].double_value(&[1]) - 1.5).abs() < 1e-6);
        assert!((out[1].double_value(&[0]) + 0.5).abs() < 1e-6);
        out[0].sum(Kind::Double).backward();
        assert!((a.grad().double_value(&[0]) - 0.5).abs() < 1e-6);
    }

    #[test]
    fn per_channel_statistics_need_matching_channels() {
        let mut op = testing::tensor_op("Normalize", "", &["x"], &["y"]).unwrap();
        let channels_last = Tensor::zeros([2, 4, 4, 3], (Kind::Float, Device::Cpu));
        let err = op.forward(&[&channels_last]).unwrap_err();
        assert!(err.message.contains("channels-first"), "{err:?}");
        let flat = Tensor::zeros([3], (Kind::Float, Device::Cpu));
        assert!(op.forward(&[&flat]).is_err());
    }

    #[test]
    fn config_errors() {
        for (config, field) in [
            ("max_pixel_value = 0.0", "max_pixel_value"),
            ("mean = []", "mean"),
            ("std = [0.1, 0.2]", "std"),
            ("std = -1e-7\nmax_pixel_value = 1.0", "std"),
            ("mean = 'imagenet'", "mean"),
            ("epsilon = 1e-3", "epsilon"),
        ] {
            let err = testing::tensor_op("Normalize", config, &["x"], &["y"])
                .err()
                .unwrap();
            assert_eq!(err.field.as_str(), field, "{config}: {err:?}");
        }
        let err = testing::tensor_op("Normalize", "", &["x", "z"], &["y"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "outputs");
    }
}
