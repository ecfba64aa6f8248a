//! Test helpers: build ops the way the host does and compare tensors.

use fe_plugin_api::abi_stable::std_types::{RSlice, RString};
use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::testing::{self, TestNumpyOp};
use fe_plugin_api::{
    find_registration, ComponentKind, CreateContext, Factory, NumpyOp, PluginError, Result,
    StepContext,
};

/// Builds `name` through the adapter (config parsing and error wrapping as in a real run).
pub fn op(name: &str, config: &str, inputs: &[&str], outputs: &[&str]) -> TestNumpyOp {
    testing::numpy_op(name, config, inputs, outputs)
        .unwrap_or_else(|e| panic!("building {name} from `{config}`: {e} ({})", e.field))
}

/// The error building `name` gives.
pub fn build_error(name: &str, config: &str, inputs: &[&str], outputs: &[&str]) -> PluginError {
    match testing::numpy_op(name, config, inputs, outputs) {
        Ok(_) => panic!("{name} accepted `{config}`"),
        Err(e) => e,
    }
}

/// Builds `name` as the plain trait object, through its registered factory (which parses the
/// config exactly as the adapter does), to reach `batchable`, `is_filter` and `remove`.
pub fn native(
    name: &str,
    config: &str,
    inputs: &[&str],
    outputs: &[&str],
) -> Result<Box<dyn NumpyOp>> {
    let registration = find_registration(ComponentKind::NumpyOp, name)
        .unwrap_or_else(|| panic!("{name} is not registered"));
    let Factory::NumpyOp(make) = registration.factory() else {
        panic!("{name} is not a numpy op");
    };
    let inputs: Vec<RString> = inputs.iter().map(|k| RString::from(*k)).collect();
    let outputs: Vec<RString> = outputs.iter().map(|k| RString::from(*k)).collect();
    let ctx = CreateContext {
        inputs: RSlice::from_slice(&inputs),
        outputs: RSlice::from_slice(&outputs),
        ..CreateContext::detached("test")
    };
    make(config, &ctx)
}

/// `remove` of a filter op on one sample.
pub fn removes(op: &dyn NumpyOp, inputs: &[&Tensor]) -> bool {
    op.remove(inputs, &StepContext::for_tests()).unwrap()
}

/// A float32 tensor of `shape` holding `values`.
pub fn f32s(values: &[f32], shape: &[i64]) -> Tensor {
    Tensor::from_slice(values).reshape(shape)
}

/// Asserts `actual` has `kind` and `shape` and is within `tol` of `expected` everywhere.
pub fn assert_close(actual: &Tensor, kind: Kind, shape: &[i64], expected: &[f64], tol: f64) {
    assert_eq!(actual.kind(), kind, "kind of {actual:?}");
    assert_eq!(actual.size(), shape, "shape");
    let got: Vec<f64> = Vec::try_from(
        actual
            .to_kind(Kind::Double)
            .to_device(Device::Cpu)
            .reshape([-1]),
    )
    .unwrap();
    assert_eq!(got.len(), expected.len(), "{got:?} vs {expected:?}");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - e).abs() <= tol || (g.is_nan() && e.is_nan()),
            "element {i}: got {g}, expected {e} (all: {got:?})"
        );
    }
}

/// Asserts two tensors have the same kind, shape and elements (NaN equal to NaN).
pub fn assert_identical(actual: &Tensor, expected: &Tensor) {
    assert_eq!(actual.kind(), expected.kind(), "kind");
    assert_eq!(actual.size(), expected.size(), "shape");
    if actual.numel() > 0 {
        let same = if actual.is_floating_point() {
            actual.allclose(expected, 0.0, 0.0, true)
        } else {
            actual.equal(expected)
        };
        assert!(same, "{actual:?} differs from {expected:?}");
    }
}

/// Runs `forward` on every sample and `forward_batch` on the samples stacked, and asserts the
/// batch result equals the per-sample results stacked. `samples[i][k]` is input `k` of sample
/// `i`.
pub fn assert_batch_matches_samples(op: &TestNumpyOp, samples: &[Vec<Tensor>]) {
    let width = samples[0].len();
    let stacked: Vec<Tensor> = (0..width)
        .map(|k| {
            let column: Vec<&Tensor> = samples.iter().map(|s| &s[k]).collect();
            Tensor::stack(&column, 0)
        })
        .collect();
    let refs: Vec<&Tensor> = stacked.iter().collect();
    let batched = op.forward_batch(&refs).unwrap();
    let per_sample: Vec<Vec<Tensor>> = samples
        .iter()
        .map(|s| op.forward(&s.iter().collect::<Vec<_>>()).unwrap())
        .collect();
    assert_eq!(batched.len(), per_sample[0].len(), "number of outputs");
    for (k, out) in batched.iter().enumerate() {
        let column: Vec<&Tensor> = per_sample.iter().map(|s| &s[k]).collect();
        assert_identical(out, &Tensor::stack(&column, 0));
    }
}
