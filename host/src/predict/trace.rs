//! TorchScript for plugin architectures: the model's `forward` (run across the plugin boundary
//! on this process's libtorch) is traced into a TorchScript module in evaluation mode, so that
//! `torch.jit.load` in plain PyTorch (or LibTorch) runs it without fe-host's code.
//!
//! Tracing records the operations one forward ran, not the code: the trained weights become
//! constants of the graph (the module has no `parameters()`; the safetensors file beside it
//! keeps them by name), and whatever the forward read from its input's shape as a plain number
//! is fixed in the graph. The export is therefore checked before it is written: the traced
//! module must reproduce the model on the batch it was traced with and on one of another size,
//! or the model is refused rather than exported as a file that is silently wrong.

use std::path::Path;

use tch::{CModule, Device, IValue, Kind, Tensor};

use crate::error::{Error, Result};
use crate::network::ModelSlot;

/// The batch size traced with, and the other one the traced module is checked at.
pub const TRACE_BATCH: i64 = 2;
const CHECK_BATCH: i64 = 3;

/// Largest absolute difference allowed between the traced module and the model.
pub const TOLERANCE: f64 = 1e-5;

/// A batch of `batch` different samples made from `sample` (a batch of one): floating-point
/// rows are scaled a little, integer rows (token ids) rotated along their first axis, so
/// that every value stays one the model accepts while the rows differ.
pub fn example_batch(sample: &Tensor, batch: i64) -> std::result::Result<Tensor, String> {
    let rows = (0..batch)
        .map(|i| {
            if sample.is_floating_point() {
                sample.f_mul_scalar(1.0 - 0.1 * i as f64)
            } else if sample.dim() >= 2 && i > 0 {
                sample.f_roll([i], [1])
            } else {
                Ok(sample.shallow_clone())
            }
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(crate::tch_message)?;
    Tensor::f_cat(&rows, 0).map_err(crate::tch_message)
}

/// Traces the plugin architecture of `model` (in evaluation mode) on batches made from
/// `samples`, one per input, checks the module and saves it to `path`. It is traced on the
/// device the model is on.
pub fn save_model(model: &mut ModelSlot, samples: &[Tensor], path: &Path) -> Result<()> {
    let device = model
        .named_variables()
        .next()
        .map_or(Device::Cpu, |(_, t)| t.device());
    let samples = samples
        .iter()
        .map(|s| s.f_to_device(device))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Run(crate::tch_message(e)))?;
    let (name, architecture) = (model.name.clone(), model.architecture.clone());
    // The tracer keeps the weights as constants (the very tensors), which must not require
    // gradients when traced nor when saved; the flags come back after, for a `run --export`
    // whose models live on.
    let mut params: Vec<Tensor> = model.params.iter().map(Tensor::shallow_clone).collect();
    for param in &mut params {
        let _ = param.set_requires_grad(false);
    }
    let handle = &mut model.handle;
    let traced = trace(&name, &samples, |inputs| {
        handle
            .forward(inputs, false, &[])
            .map_err(|e| e.to_string())
    });
    let saved = match traced {
        Ok(module) => module
            .save(path)
            .map_err(|e| Error::io(path, std::io::Error::other(e))),
        Err(problem) => Err(Error::Run(format!(
            "`{name}` ({architecture}): cannot export it as TorchScript: {problem}; --format safetensors exports its weights alone"
        ))),
    };
    for param in &mut params {
        let _ = param.set_requires_grad(true);
    }
    saved
}

/// Traces `forward` (the model in evaluation mode) on batches made from `samples` (one
/// tensor per input, each a batch of one) into a module named `name`, and checks it.
pub fn trace<F>(
    name: &str,
    samples: &[Tensor],
    mut forward: F,
) -> std::result::Result<CModule, String>
where
    F: FnMut(&[&Tensor]) -> std::result::Result<Vec<Tensor>, String>,
{
    let _guard = tch::no_grad_guard();
    let examples = samples
        .iter()
        .map(|s| example_batch(s, TRACE_BATCH))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut failure = None;
    let mut traced = |inputs: &[Tensor]| {
        let inputs: Vec<&Tensor> = inputs.iter().collect();
        match forward(&inputs) {
            Ok(outputs) => outputs,
            Err(error) => {
                // The tracer must still be ended (with no outputs) before the error goes up:
                // it is per thread, and a tracer left running refuses the next trace.
                failure = Some(error);
                Vec::new()
            }
        }
    };
    let module = CModule::create_by_tracing(name, "forward", &examples, &mut traced)
        .map_err(crate::tch_message);
    if let Some(error) = failure {
        return Err(error);
    }
    let mut module = module?;
    module.set_eval();
    for batch in [TRACE_BATCH, CHECK_BATCH] {
        let inputs = samples
            .iter()
            .map(|s| example_batch(s, batch))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let expected = forward(&refs)?;
        let actual = run(&module, &inputs).map_err(|e| {
            format!("its traced TorchScript fails on a batch of {batch} ({e}): tracing fixed something the model reads from its input's shape")
        })?;
        let difference = max_difference(&expected, &actual).map_err(|e| {
            format!("its traced TorchScript gives other outputs on a batch of {batch} ({e})")
        })?;
        if difference > TOLERANCE {
            return Err(format!(
                "its traced TorchScript differs from the model by {difference:.3e} on a batch of {batch} (at most {TOLERANCE:e} allowed): the forward takes a path tracing cannot record"
            ));
        }
    }
    Ok(module)
}

/// Runs a traced `module` on `inputs`; its outputs as a list (one tensor, or a tuple's).
pub fn run(module: &CModule, inputs: &[Tensor]) -> std::result::Result<Vec<Tensor>, String> {
    let inputs: Vec<IValue> = inputs
        .iter()
        .map(|t| IValue::Tensor(t.shallow_clone()))
        .collect();
    match module.forward_is(&inputs).map_err(crate::tch_message)? {
        IValue::Tensor(t) => Ok(vec![t]),
        IValue::Tuple(items) | IValue::GenericList(items) => items
            .into_iter()
            .map(|item| match item {
                IValue::Tensor(t) => Ok(t),
                other => Err(format!("returned {other:?} among its outputs")),
            })
            .collect(),
        other => Err(format!("returned {other:?}")),
    }
}

/// The largest absolute difference between two lists of outputs of the same shapes.
fn max_difference(expected: &[Tensor], actual: &[Tensor]) -> std::result::Result<f64, String> {
    if expected.len() != actual.len() {
        return Err(format!(
            "{} outputs instead of {}",
            actual.len(),
            expected.len()
        ));
    }
    let mut largest = 0.0f64;
    for (index, (e, a)) in expected.iter().zip(actual).enumerate() {
        if e.size() != a.size() {
            return Err(format!(
                "output {index} shaped {:?} instead of {:?}",
                a.size(),
                e.size()
            ));
        }
        if e.numel() == 0 {
            continue;
        }
        let difference = (e.to_kind(Kind::Double) - a.to_kind(Kind::Double))
            .abs()
            .max()
            .double_value(&[]);
        largest = largest.max(if difference.is_nan() {
            f64::INFINITY
        } else {
            difference
        });
    }
    Ok(largest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    fn sample() -> Tensor {
        Tensor::arange(6, (Kind::Float, Device::Cpu)).reshape([1, 2, 3])
    }

    #[test]
    fn a_traced_forward_reproduces_the_model_at_another_batch_size() {
        let weight = Tensor::ones([3, 4], (Kind::Float, Device::Cpu));
        let module = trace("m", &[sample()], |inputs| {
            Ok(vec![inputs[0]
                .flatten(1, 2)
                .matmul(&weight.reshape([6, 2]))])
        })
        .unwrap();
        let batch = example_batch(&sample(), 5).unwrap();
        let out = run(&module, &[batch.shallow_clone()]).unwrap();
        let expected = batch.flatten(1, 2).matmul(&weight.reshape([6, 2]));
        assert_eq!(out[0].size(), [5, 2]);
        assert!(out[0].allclose(&expected, 0.0, 0.0, false));
    }

    #[test]
    fn a_forward_that_fixes_the_batch_size_is_refused() {
        // `reshape([batch, 6])` from the shape read as numbers: the trace keeps 2 for ever.
        let error = trace("m", &[sample()], |inputs| {
            let batch = inputs[0].size()[0];
            Ok(vec![inputs[0].reshape([batch, 6])])
        })
        .err()
        .unwrap();
        assert!(error.contains("fails on a batch of 3"), "{error}");
    }

    #[test]
    fn a_failing_forward_ends_the_trace_and_the_next_one_works() {
        let error = trace("m", &[sample()], |_| Err("boom".to_owned()))
            .err()
            .unwrap();
        assert_eq!(error, "boom");
        trace("m", &[sample()], |inputs| Ok(vec![inputs[0].relu()])).unwrap();
    }

    #[test]
    fn integer_rows_are_rotated_and_float_rows_scaled() {
        let ids = Tensor::from_slice(&[1i64, 2, 3]).reshape([1, 3]);
        let batch = example_batch(&ids, 3).unwrap();
        assert_eq!(
            Vec::<i64>::try_from(batch.flatten(0, 1)).unwrap(),
            [1, 2, 3, 3, 1, 2, 2, 3, 1]
        );
        let floats = example_batch(&sample(), 2).unwrap();
        assert_eq!(floats.size(), [2, 2, 3]);
        assert!(floats
            .get(1)
            .allclose(&(sample().get(0) * 0.9), 1e-6, 0.0, false));
    }
}
