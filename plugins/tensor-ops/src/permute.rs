//! FastEstimator's `Permute` TensorOp (`fe.op.tensorop.Permute`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// `Permute` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct PermuteConfig {
    /// The new order of the input's dimensions, batch dimension included: output dimension `i`
    /// is input dimension `permutation[i]`. Must list each of `0..rank` once. Default
    /// `[0, 3, 1, 2]` (FastEstimator's: channels-last `[B, H, W, C]` to channels-first
    /// `[B, C, H, W]`).
    #[serde(default = "nhwc_to_nchw")]
    pub permutation: Vec<i64>,
}

fn nhwc_to_nchw() -> Vec<i64> {
    vec![0, 3, 1, 2]
}

/// Input: one tensor of rank `permutation.len()`; output: the same tensor with its dimensions
/// reordered (a view sharing storage).
pub struct Permute {
    permutation: Vec<i64>,
}

impl FromConfig for Permute {
    type Config = PermuteConfig;
    fn from_config(config: PermuteConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), Some(1))?;
        let mut sorted = config.permutation.clone();
        sorted.sort_unstable();
        if !sorted.iter().copied().eq(0..sorted.len() as i64) {
            return Err(Error::config(
                "permutation",
                format!(
                    "must list each dimension 0..{} exactly once, got {:?}",
                    sorted.len(),
                    config.permutation
                ),
            ));
        }
        Ok(Self {
            permutation: config.permutation,
        })
    }
}

impl TensorOp for Permute {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let [input] = inputs else {
            return Err(Error::msg(format!(
                "Permute takes one input, got {}",
                inputs.len()
            )));
        };
        if input.dim() != self.permutation.len() {
            return Err(Error::msg(format!(
                "permutation {:?} needs a rank-{} input (batch dimension included), got shape {:?}",
                self.permutation,
                self.permutation.len(),
                input.size()
            )));
        }
        Ok(vec![input.f_permute(self.permutation.as_slice())?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::testing;

    fn permute(config: &str, input: &Tensor) -> Result<Tensor, fe_plugin_api::PluginError> {
        let mut op = testing::tensor_op("Permute", config, &["x"], &["y"])?;
        Ok(op.forward(&[input])?.remove(0))
    }

    fn values(t: &Tensor) -> Vec<i64> {
        Vec::try_from(t.contiguous().flatten(0, -1)).unwrap()
    }

    #[test]
    fn fastestimator_backend_examples() {
        // fastestimator/backend/_permute.py docstring: a [3, 2, 2] tensor 0..11.
        let x = Tensor::arange(12, (Kind::Int64, Device::Cpu)).reshape([3, 2, 2]);
        let y = permute("permutation = [2, 0, 1]", &x).unwrap();
        assert_eq!(y.size(), [2, 3, 2]);
        assert_eq!(values(&y), [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11]);
        let y = permute("permutation = [0, 2, 1]", &x).unwrap();
        assert_eq!(values(&y), [0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11]);
    }

    #[test]
    fn default_turns_channels_last_into_channels_first() {
        // [B=2, H=3, W=4, C=5] -> [2, 5, 3, 4]; element (b, h, w, c) lands at (b, c, h, w).
        let x = Tensor::arange(120, (Kind::Int64, Device::Cpu)).reshape([2, 3, 4, 5]);
        let y = permute("", &x).unwrap();
        assert_eq!(y.size(), [2, 5, 3, 4]);
        assert_eq!(y.int64_value(&[1, 4, 2, 3]), x.int64_value(&[1, 2, 3, 4]));
    }

    #[test]
    fn gradient_flows() {
        let x = Tensor::ones([2, 3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let y = permute("permutation = [1, 0]", &x).unwrap();
        y.sum(Kind::Float).backward();
        assert_eq!(x.grad().size(), [2, 3]);
    }

    #[test]
    fn rank_mismatch_is_an_error() {
        let x = Tensor::ones([2, 3, 4], (Kind::Float, Device::Cpu));
        let err = permute("", &x).unwrap_err();
        assert!(err.message.contains("rank-4"), "{err:?}");
    }

    #[test]
    fn config_errors() {
        for config in [
            "permutation = [0, 1, 1]",
            "permutation = [1, 2]",
            "permutation = [0, -1]",
        ] {
            let err = testing::tensor_op("Permute", config, &["x"], &["y"])
                .err()
                .unwrap();
            assert_eq!(err.field.as_str(), "permutation", "{config}: {err:?}");
        }
        let err = testing::tensor_op("Permute", "perm = [1, 0]", &["x"], &["y"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "perm");
        let err = testing::tensor_op("Permute", "", &["x"], &["y", "z"])
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "outputs");
    }
}
