//! FastEstimator's `MeanUnslicer`.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NoConfig, Result, Slicer};

use crate::{no_slices, same_shapes};

/// Slices nothing; joins the per-minibatch values of each `unslice` key by averaging them
/// (e.g. a loss computed once per minibatch becomes one loss for the batch).
///
/// Every minibatch weighs the same, whatever its size, as in FastEstimator. Floating-point
/// values keep their kind; integer and boolean values are averaged as `float32` (FastEstimator
/// fails on them).
#[derive(Debug)]
pub struct MeanUnslicer;

impl FromConfig for MeanUnslicer {
    type Config = NoConfig;

    fn from_config(_config: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if !ctx.inputs.is_empty() {
            return Err(Error::config(
                "slice",
                "MeanUnslicer does not slice; list its keys under `unslice` only",
            ));
        }
        if ctx.outputs.is_empty() {
            return Err(Error::config(
                "unslice",
                "MeanUnslicer needs at least one key to unslice",
            ));
        }
        Ok(MeanUnslicer)
    }
}

impl Slicer for MeanUnslicer {
    fn slice(&mut self, key: &str, _batch: &Tensor) -> Result<Vec<Tensor>> {
        Err(Error::unsupported(format!(
            "MeanUnslicer only unslices; it cannot slice `{key}`"
        )))
    }

    fn unslice(&mut self, key: &str, slices: &[&Tensor]) -> Result<Tensor> {
        let Some(first) = slices.first() else {
            return Err(no_slices("MeanUnslicer", key));
        };
        same_shapes(key, slices)?;
        let kind = if first.is_floating_point() {
            first.kind()
        } else {
            Kind::Float
        };
        let mut sum = first.f_to_kind(kind)?;
        for slice in &slices[1..] {
            sum = sum.f_add(&slice.f_to_kind(kind)?)?;
        }
        Ok(sum.f_div_scalar(slices.len() as f64)?)
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::{testing, ErrorKind};

    fn unslicer() -> testing::TestSlicer {
        testing::slicer("MeanUnslicer", "", &[], &["loss"]).unwrap()
    }

    #[test]
    fn averages_scalar_losses() {
        let losses = [1.0f32, 2.0, 6.0].map(Tensor::from);
        let refs: Vec<&Tensor> = losses.iter().collect();
        let mean = unslicer().unslice("loss", &refs).unwrap();
        assert_eq!(mean.dim(), 0);
        assert_eq!(mean.kind(), Kind::Float);
        assert_eq!(mean.double_value(&[]), 3.0);
    }

    #[test]
    fn averages_elementwise_and_keeps_double() {
        let a = Tensor::from_slice(&[1.0f64, 10.0]);
        let b = Tensor::from_slice(&[2.0f64, 20.0]);
        let mean = unslicer().unslice("loss", &[&a, &b]).unwrap();
        assert_eq!(mean.kind(), Kind::Double);
        assert!(mean.equal(&Tensor::from_slice(&[1.5f64, 15.0])));
    }

    #[test]
    fn integers_average_as_float() {
        let a = Tensor::from_slice(&[1i64, 2]);
        let b = Tensor::from_slice(&[2i64, 2]);
        let mean = unslicer().unslice("count", &[&a, &b]).unwrap();
        assert_eq!(mean.kind(), Kind::Float);
        assert!(mean.equal(&Tensor::from_slice(&[1.5f32, 2.0])));
    }

    #[test]
    fn a_single_minibatch_is_returned_unchanged() {
        let a = Tensor::from(0.25f32);
        let mean = unslicer().unslice("loss", &[&a]).unwrap();
        assert_eq!(mean.double_value(&[]), 0.25);
    }

    #[test]
    fn gradients_flow_through_the_mean() {
        let a = Tensor::from(1.0f32).set_requires_grad(true);
        let b = Tensor::from(3.0f32).set_requires_grad(true);
        let mean = unslicer().unslice("loss", &[&a, &b]).unwrap();
        mean.backward();
        assert_eq!(a.grad().double_value(&[]), 0.5);
    }

    #[test]
    fn slicing_and_bad_minibatches_are_errors() {
        let x = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let err = unslicer().slice("loss", &x).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unsupported);
        let err = unslicer().unslice("loss", &[]).unwrap_err();
        assert!(err.message.contains("no minibatches"), "{err}");
        let y = Tensor::zeros([3], (Kind::Float, Device::Cpu));
        let err = unslicer().unslice("loss", &[&x, &y]).unwrap_err();
        assert!(err.message.contains("minibatch 1"), "{err}");
    }

    #[test]
    fn config_errors() {
        let err = testing::slicer("MeanUnslicer", "", &["x"], &["loss"]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config);
        assert_eq!(err.field.as_str(), "slice");
        let err = testing::slicer("MeanUnslicer", "", &[], &[]).unwrap_err();
        assert_eq!(err.field.as_str(), "unslice");
        let err = testing::slicer("MeanUnslicer", "axis = 0", &[], &["loss"]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config);
        assert_eq!(err.field.as_str(), "axis");
    }
}
