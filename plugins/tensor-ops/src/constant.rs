//! `Constant`: FastEstimator's op that introduces a constant tensor shaped like another key.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Result, StepContext, TensorOp};
use serde::Deserialize;

/// `Constant` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ConstantConfig {
    /// The value every element takes.
    #[serde(default)]
    pub constant: f64,
}

/// One input (`shape_like`), one output: a float tensor of the input's shape, on its device,
/// filled with `constant` (e.g. the all-ones target of a GAN's generator loss).
pub struct Constant {
    value: f64,
}

impl FromConfig for Constant {
    type Config = ConstantConfig;
    fn from_config(config: ConstantConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(1), Some(1))?;
        if !config.constant.is_finite() {
            return Err(Error::config("constant", "must be a finite number"));
        }
        Ok(Constant {
            value: config.constant,
        })
    }
}

impl TensorOp for Constant {
    fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let like = inputs[0];
        let kind = if like.is_floating_point() {
            like.kind()
        } else {
            Kind::Float
        };
        Ok(vec![Tensor::f_full(
            like.size(),
            self.value,
            (kind, like.device()),
        )?])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::testing;

    #[test]
    fn fills_the_shape_of_its_input() {
        let mut op = testing::tensor_op("Constant", "constant = 1.5", &["x"], &["ones"]).unwrap();
        let like = Tensor::zeros([3, 1], (Kind::Int64, Device::Cpu));
        let out = op.forward(&[&like]).unwrap().remove(0);
        assert_eq!((out.size(), out.kind()), (vec![3, 1], Kind::Float));
        assert!(out.equal(&Tensor::full([3, 1], 1.5, (Kind::Float, Device::Cpu))));
    }

    #[test]
    fn default_is_zero_and_no_gradient_flows() {
        let mut op = testing::tensor_op("Constant", "", &["x"], &["zeros"]).unwrap();
        let like = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let out = op.forward(&[&like]).unwrap().remove(0);
        assert_eq!(out.sum(Kind::Float).double_value(&[]), 0.0);
        assert!(!out.requires_grad());
    }
}
