//! `Concat`: several keys joined into one vector per sample — a table's feature columns (one
//! scalar key each, as the CSV dataset reads them) become the feature vector a model takes,
//! which FastEstimator gets by building its dataset from a NumPy matrix instead.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NoConfig, NumpyOp, Result, StepContext};

/// Flattens every input and joins them in input order; the dtype is their promoted one
/// (`torch.cat`'s rule: int64 and float32 columns give float32).
pub struct Concat;

impl FromConfig for Concat {
    type Config = NoConfig;
    fn from_config(_: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if ctx.inputs.is_empty() || ctx.outputs.len() != 1 {
            return Err(Error::config(
                "outputs",
                format!(
                    "Concat reads one or more inputs and writes one output, got {} inputs and {} outputs",
                    ctx.inputs.len(),
                    ctx.outputs.len()
                ),
            ));
        }
        Ok(Concat)
    }
}

impl Concat {
    /// Per sample each input becomes `[-1]`; in a batch `[batch, -1]`, so the batch axis stays.
    fn join(inputs: &[&Tensor], batched: bool) -> Result<Vec<Tensor>> {
        let parts = inputs
            .iter()
            .map(|x| {
                if batched {
                    let rows = x.size().first().copied().unwrap_or(0);
                    Ok(x.f_reshape([rows, -1])?)
                } else {
                    Ok(x.f_reshape([-1])?)
                }
            })
            .collect::<Result<Vec<Tensor>>>()?;
        Ok(vec![Tensor::f_cat(&parts, if batched { 1 } else { 0 })?])
    }
}

impl NumpyOp for Concat {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        Self::join(inputs, false)
    }

    fn batchable(&self) -> bool {
        true
    }

    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        Self::join(inputs, true)
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};

    use crate::test_util::{assert_batch_matches_samples, build_error, op};

    #[test]
    fn scalar_columns_become_one_vector_in_input_order_with_the_promoted_dtype() {
        let op = op("Concat", "", &["a", "b", "c"], &["x"]);
        let a = Tensor::from(1.5f32);
        let b = Tensor::from(7i64);
        let c = Tensor::from_slice(&[2.0f32, 3.0]);
        let out = op.forward(&[&a, &b, &c]).unwrap();
        assert_eq!(out[0].kind(), Kind::Float);
        assert_eq!(Vec::<f32>::try_from(&out[0]).unwrap(), [1.5, 7.0, 2.0, 3.0]);
    }

    #[test]
    fn a_batch_keeps_its_axis_and_matches_the_samples() {
        let op = op("Concat", "", &["a", "b"], &["x"]);
        let samples: Vec<Vec<Tensor>> = (0..4)
            .map(|i| {
                vec![
                    Tensor::from(i as f32),
                    Tensor::full([2, 1], -(i as f64), (Kind::Float, Device::Cpu)),
                ]
            })
            .collect();
        assert_batch_matches_samples(&op, &samples);
        let a = Tensor::zeros([4], (Kind::Float, Device::Cpu));
        let b = Tensor::zeros([4, 2, 1], (Kind::Float, Device::Cpu));
        assert_eq!(op.forward_batch(&[&a, &b]).unwrap()[0].size(), [4, 3]);
    }

    #[test]
    fn needs_inputs_and_exactly_one_output() {
        let e = build_error("Concat", "", &["a", "b"], &["x", "y"]);
        assert!(e.message.contains("one output"), "{}", e.message);
        let e = build_error("Concat", "", &[], &["x"]);
        assert!(e.message.contains("one or more inputs"), "{}", e.message);
        let e = build_error("Concat", "axis = 0", &["a"], &["x"]);
        assert!(e.message.contains("axis"), "{}", e.message);
    }
}
