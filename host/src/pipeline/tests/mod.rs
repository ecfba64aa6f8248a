//! Unit tests of the pipeline: in-memory datasets and ops written here, driven through the
//! real loader.
//!
//! The ops are host-side implementations of the plugin boundary's `FfiNumpyOp`, so they reach
//! the loader through exactly the handle type plugin ops do; only the shared library is
//! missing. Most behaviours are FastEstimator's `test_pipeline.py` (`TestPipelineFilter`):
//! a dataset of `idx = 0..23`, batch size 5, shuffling off, and the `idx` values each batch
//! delivers.

mod filters;
mod loader;
mod split;

use std::collections::BTreeSet;
use std::sync::Arc;

use fe_plugin_api::abi_stable::sabi_trait::TD_Opaque;
use fe_plugin_api::abi_stable::std_types::{RResult, RSlice, RVec};
use fe_plugin_api::ffi::{FfiNumpyOp, FfiNumpyOp_TO};
use fe_plugin_api::{ComponentState, Mode, PluginError, RTensor, State, StepContext, TensorRef};
use rand::{Rng, SeedableRng};
use tch::{Kind, Tensor};

use super::{BatchSpec, Dataset, OpKind, Pipeline, PipelineOp, Source};
use crate::batch::{Batch, KeyId, Keys};
use crate::manifest::KeyPath;
use crate::plugins::handles::NumpyOpHandle;
use crate::schedule::{DsFilter, InForce, ModeFilter, Scheduled};

/// Samples `0..n`: `idx` is the index (an int64 scalar), `x` three floats made from it, and
/// `label` the index modulo `classes` (for stratification).
pub(super) struct Numbers {
    n: u64,
    classes: i64,
    keys: Vec<String>,
}

impl Numbers {
    pub(super) fn new(n: u64) -> Self {
        Self::with_classes(n, 1)
    }

    pub(super) fn with_classes(n: u64, classes: i64) -> Self {
        Self {
            n,
            classes,
            keys: vec!["idx".into(), "x".into(), "label".into()],
        }
    }
}

impl Source for Numbers {
    fn len(&self) -> u64 {
        self.n
    }

    fn keys(&self) -> &[String] {
        &self.keys
    }

    fn get(&self, index: u64) -> Result<Vec<Tensor>, String> {
        if index >= self.n {
            return Err(format!("sample {index} of {}", self.n));
        }
        let i = index as i64;
        let f = index as f32;
        Ok(vec![
            Tensor::scalar_tensor(i, (Kind::Int64, tch::Device::Cpu)),
            Tensor::from_slice(&[f, f * 0.5, -f]),
            Tensor::scalar_tensor(i % self.classes, (Kind::Int64, tch::Device::Cpu)),
        ])
    }
}

/// What a test op does.
#[derive(Clone)]
pub(super) enum Behaviour {
    /// A filter: drops samples (or batches) whose first input holds any of these values.
    RemoveIf(Vec<i64>),
    /// A random augmentation: adds noise drawn from the op's seed (never batchable).
    Noise,
    /// Multiplies by a constant; batchable (deterministic, element-wise).
    Scale(f64),
}

struct TestOp(Behaviour);

fn views<T>(inputs: RSlice<'_, TensorRef<'_>>, f: impl FnOnce(&[&Tensor]) -> T) -> T {
    let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
    let refs: Vec<&Tensor> = views.iter().map(|v| &**v).collect();
    f(&refs)
}

impl TestOp {
    fn apply(&self, x: &Tensor, seed: u64) -> Tensor {
        match &self.0 {
            Behaviour::Noise => {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
                let noise: Vec<f32> = (0..x.numel()).map(|_| rng.random::<f32>()).collect();
                x + Tensor::from_slice(&noise).reshape(x.size())
            }
            Behaviour::Scale(factor) => x * *factor,
            Behaviour::RemoveIf(_) => x.shallow_clone(),
        }
    }
}

impl FfiNumpyOp for TestOp {
    fn forward(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<RVec<RTensor>, PluginError> {
        views(inputs, |x| {
            RResult::ROk(
                x.iter()
                    .map(|t| RTensor::new(self.apply(t, ctx.seed)))
                    .collect(),
            )
        })
    }

    fn forward_batch(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        ctx: &StepContext<'_>,
    ) -> RResult<RVec<RTensor>, PluginError> {
        self.forward(inputs, ctx)
    }

    fn batchable(&self) -> bool {
        matches!(self.0, Behaviour::Scale(_))
    }

    fn is_filter(&self) -> bool {
        matches!(self.0, Behaviour::RemoveIf(_))
    }

    fn remove(
        &self,
        inputs: RSlice<'_, TensorRef<'_>>,
        _ctx: &StepContext<'_>,
    ) -> RResult<bool, PluginError> {
        let Behaviour::RemoveIf(values) = &self.0 else {
            return RResult::ROk(false);
        };
        views(inputs, |x| {
            let found: Vec<i64> = Vec::try_from(x[0].flatten(0, -1)).unwrap_or_default();
            RResult::ROk(found.iter().any(|v| values.contains(v)))
        })
    }

    fn state(&self) -> RResult<ComponentState, PluginError> {
        RResult::ROk(State::empty().into_ffi())
    }

    fn load_state(&self, _state: ComponentState) -> RResult<(), PluginError> {
        RResult::ROk(())
    }
}

fn node(label: &str, handle: OpKind, inputs: Vec<KeyId>, outputs: Vec<KeyId>) -> PipelineOp {
    PipelineOp {
        label: label.to_owned(),
        provider: "fe-host".to_owned(),
        path: KeyPath::root("pipeline"),
        inputs,
        outputs,
        modes: ModeFilter::ALL,
        ds_ids: DsFilter::Any,
        epochs: InForce::always(),
        handle,
        cache: None,
    }
}

/// A test op reading `key` (and, unless it filters, writing it back).
pub(super) fn op(behaviour: Behaviour, key: KeyId) -> PipelineOp {
    filter_op(behaviour, key, true)
}

/// Like [`op`], with FastEstimator's `replacement` for filters.
pub(super) fn filter_op(behaviour: Behaviour, key: KeyId, replacement: bool) -> PipelineOp {
    let filter = matches!(behaviour, Behaviour::RemoveIf(_));
    let label = match &behaviour {
        Behaviour::RemoveIf(_) => "RemoveIf",
        Behaviour::Noise => "Noise",
        Behaviour::Scale(_) => "Scale",
    };
    let handle = OpKind::Plugin {
        batchable: !filter && matches!(behaviour, Behaviour::Scale(_)),
        op: NumpyOpHandle(FfiNumpyOp_TO::from_value(TestOp(behaviour), TD_Opaque)),
        filter,
        replacement,
    };
    let outputs = if filter { Vec::new() } else { vec![key] };
    node(label, handle, vec![key], outputs)
}

/// The built-in `Batch` op.
pub(super) fn batch_op(spec: BatchSpec) -> PipelineOp {
    node("Batch", OpKind::Batch(spec), Vec::new(), Vec::new())
}

/// A pipeline over [`Numbers`] for training, shuffling off, and the keys.
pub(super) struct Setup {
    pub pipeline: Pipeline,
    pub keys: Arc<Keys>,
    pub idx: KeyId,
    pub x: KeyId,
}

impl Setup {
    /// `n` samples, batches of `batch_size`; `ops` makes the ops from the key ids of `idx`
    /// and `x`.
    pub(super) fn new(
        n: u64,
        batch_size: u32,
        ops: impl FnOnce(KeyId, KeyId) -> Vec<PipelineOp>,
    ) -> Self {
        Self::over(Arc::new(Numbers::new(n)), batch_size, ops)
    }

    pub(super) fn over(
        source: Arc<dyn Source>,
        batch_size: u32,
        ops: impl FnOnce(KeyId, KeyId) -> Vec<PipelineOp>,
    ) -> Self {
        let mut keys = Keys::default();
        let source_keys = keys.intern_all(source.keys());
        let (idx, x) = (keys.intern("idx"), keys.intern("x"));
        let ops = ops(idx, x).into_iter().map(Arc::new).collect();
        let pipeline = Pipeline {
            datasets: vec![Dataset {
                mode: Mode::Train,
                ds_id: String::new(),
                epochs: InForce::always(),
                source,
                keys: source_keys,
            }],
            ops,
            batch_size: Scheduled::fixed(batch_size),
            shuffle: false,
            drop_last: false,
            workers: 1,
            prefetch: 2,
            seed: 7,
            pin_memory: None,
            pin: None,
            pad_text: false,
            shard: None,
            cache: None,
        };
        Self {
            pipeline,
            keys: Arc::new(keys),
            idx,
            x,
        }
    }

    /// Every key of every sample.
    pub(super) fn wanted(&self) -> BTreeSet<KeyId> {
        (0..self.keys.len() as u32).map(KeyId).collect()
    }

    /// The batches of training epoch `epoch` from batch `skip` on (`steps` per epoch when
    /// given).
    pub(super) fn batches_from(&self, epoch: u32, steps: Option<u64>, skip: usize) -> Vec<Batch> {
        self.epoch_from(epoch, steps, skip).unwrap()
    }

    fn epoch_from(
        &self,
        epoch: u32,
        steps: Option<u64>,
        skip: usize,
    ) -> crate::error::Result<Vec<Batch>> {
        let wanted = self.wanted();
        self.pipeline
            .epoch_from(Mode::Train, epoch, "", &wanted, steps, &self.keys, skip)
            .unwrap()
            .collect()
    }

    /// The error that ends training epoch 1 (empty when it ends well).
    pub(super) fn epoch_error(&self) -> String {
        self.epoch_from(1, None, 0)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    /// The batches of training epoch 1.
    pub(super) fn batches(&self, steps: Option<u64>) -> Vec<Batch> {
        self.batches_from(1, steps, 0)
    }

    /// `idx` of each batch of training epoch 1.
    pub(super) fn idx_batches(&self, steps: Option<u64>) -> Vec<Vec<i64>> {
        self.batches(steps)
            .iter()
            .map(|b| ints(b.get(self.idx).unwrap()))
            .collect()
    }

    /// `idx` of every sample of training epoch 1, batches joined (FastEstimator's
    /// `composite_list`).
    pub(super) fn idx(&self, steps: Option<u64>) -> Vec<i64> {
        self.idx_batches(steps).concat()
    }
}

/// The values of an integer tensor.
pub(super) fn ints(t: &Tensor) -> Vec<i64> {
    Vec::try_from(t.to_kind(Kind::Int64).flatten(0, -1)).unwrap()
}

/// One key of a batch: its id, shape, kind and the bits of its values.
pub(super) type KeyPrint = (KeyId, Vec<i64>, Kind, Vec<u64>);

/// Every key of a batch as (key, shape, kind, value bits): equal fingerprints mean bitwise
/// equal batches (float32 widens to float64 exactly, so no bit is lost).
pub(super) fn fingerprint(batch: &Batch) -> Vec<KeyPrint> {
    batch
        .present()
        .map(|key| {
            let t = batch.get(key).unwrap();
            let bits = if t.is_floating_point() {
                Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1))
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            } else {
                ints(t).iter().map(|v| *v as u64).collect()
            };
            (key, t.size(), t.kind(), bits)
        })
        .collect()
}

/// Fingerprints of a list of batches.
pub(super) fn fingerprints(batches: &[Batch]) -> Vec<Vec<KeyPrint>> {
    batches.iter().map(fingerprint).collect()
}

/// FastEstimator's kept samples of `0..23` when `[2, 6, 9, 10, 11]` are removed.
pub(super) fn kept_of_23() -> Vec<i64> {
    [0, 1, 3, 4, 5, 7, 8]
        .into_iter()
        .chain(12..23)
        .collect::<Vec<i64>>()
}
