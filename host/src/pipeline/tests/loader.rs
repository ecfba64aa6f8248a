//! The loader: batch sizes, `drop_last`, the `Batch` op, determinism across worker counts,
//! and resuming mid-epoch with `epoch_from`.

use std::sync::Arc;

use tch::{Kind, Tensor};

use super::{
    batch_op, filter_op, fingerprints, ints, op, BatchSpec, Behaviour, Numbers, Setup, Source,
};
use crate::batch::Batch;

fn sizes(batches: &[Batch]) -> Vec<i64> {
    batches.iter().map(|b| b.size).collect()
}

#[test]
fn drop_last_decides_the_last_partial_batch() {
    let mut setup = Setup::new(23, 5, |_, _| Vec::new());
    let batches = setup.batches(None);
    assert_eq!(sizes(&batches), [5, 5, 5, 5, 3]);
    assert_eq!(
        ints(batches[4].get(setup.idx).unwrap()),
        [20, 21, 22],
        "the partial batch holds the last samples"
    );
    assert_eq!(
        setup
            .pipeline
            .batches(fe_plugin_api::Mode::Train, 1, "", None),
        5
    );

    setup.pipeline.drop_last = true;
    let batches = setup.batches(None);
    assert_eq!(sizes(&batches), [5, 5, 5, 5]);
    assert_eq!(
        setup
            .pipeline
            .batches(fe_plugin_api::Mode::Train, 1, "", None),
        4
    );

    // An exact multiple loses nothing either way.
    let exact = Setup::new(20, 5, |_, _| Vec::new());
    assert_eq!(sizes(&exact.batches(None)), [5, 5, 5, 5]);
}

#[test]
fn a_dataset_short_of_one_batch_with_drop_last_is_named() {
    use fe_plugin_api::Mode;
    let mut setup = Setup::new(3, 5, |_, _| Vec::new());
    // Without drop_last the 3 samples are one partial batch.
    assert_eq!(
        setup
            .pipeline
            .epoch_without_batches(Mode::Train, 1..=2, None),
        None
    );
    setup.pipeline.drop_last = true;
    assert_eq!(
        setup.pipeline.epoch_without_batches(Mode::Train, 1..=2, None).unwrap(),
        "the train dataset has 3 samples, fewer than one batch of 5 with drop_last = true: epoch 1 would run no train step (its metrics would be NaN); use a batch size of at most 3, drop_last = false, or set run.train_steps_per_epoch"
    );
    // Steps per epoch repeat the data until the batches are full.
    assert_eq!(
        setup
            .pipeline
            .epoch_without_batches(Mode::Train, 1..=2, Some(4)),
        None
    );
    // A mode without data has no empty epoch.
    assert_eq!(
        setup
            .pipeline
            .epoch_without_batches(Mode::Eval, 1..=2, None),
        None
    );
}

#[test]
fn a_batch_op_overrides_batch_size_and_drop_last() {
    let spec = BatchSpec {
        batch_size: Some(4),
        drop_last: Some(true),
        pad_value: None,
    };
    let setup = Setup::new(23, 5, |_, _| vec![batch_op(spec)]);
    let batches = setup.batches(None);
    assert_eq!(sizes(&batches), [4, 4, 4, 4, 4]);
    assert_eq!(ints(batches[4].get(setup.idx).unwrap()), [16, 17, 18, 19]);

    let keep = BatchSpec {
        drop_last: Some(false),
        ..spec
    };
    let mut setup = Setup::new(23, 5, |_, _| vec![batch_op(keep)]);
    setup.pipeline.drop_last = true;
    assert_eq!(sizes(&setup.batches(None)), [4, 4, 4, 4, 4, 3]);
}

#[test]
fn ops_after_the_batch_op_run_on_batches() {
    let spec = BatchSpec {
        batch_size: Some(4),
        ..BatchSpec::default()
    };
    let setup = Setup::new(8, 5, |_, x| {
        vec![
            op(Behaviour::Scale(2.0), x),
            batch_op(spec),
            op(Behaviour::Scale(-1.0), x),
        ]
    });
    let batches = setup.batches(None);
    assert_eq!(sizes(&batches), [4, 4]);
    let x = batches[1].get(setup.x).unwrap();
    assert_eq!(x.size(), [4, 3]);
    let expected: Vec<f32> = (4..8)
        .flat_map(|i| {
            let f = i as f32;
            [-2.0 * f, -f, 2.0 * f]
        })
        .collect();
    assert_eq!(
        Vec::<f32>::try_from(x.flatten(0, -1)).unwrap(),
        expected,
        "x * 2 per sample, then * -1 on the batch"
    );
}

/// Samples whose `x` grows with the index: 1, 2 or 3 values, all `index + 1`.
struct Ragged(Vec<String>);

impl Source for Ragged {
    fn len(&self) -> u64 {
        6
    }

    fn keys(&self) -> &[String] {
        &self.0
    }

    fn get(&self, index: u64) -> Result<Vec<Tensor>, String> {
        let len = (index % 3 + 1) as i64;
        Ok(vec![
            Tensor::scalar_tensor(index as i64, (Kind::Int64, tch::Device::Cpu)),
            Tensor::full([len], index as f64 + 1.0, (Kind::Float, tch::Device::Cpu)),
        ])
    }
}

#[test]
fn the_batch_op_pads_ragged_samples_with_its_pad_value() {
    let spec = BatchSpec {
        batch_size: Some(3),
        drop_last: None,
        pad_value: Some(-1.0),
    };
    let source = Arc::new(Ragged(vec!["idx".into(), "x".into()]));
    let setup = Setup::over(source, 5, |_, _| vec![batch_op(spec)]);
    let batches = setup.batches(None);
    assert_eq!(sizes(&batches), [3, 3]);
    let x = batches[0].get(setup.x).unwrap();
    assert_eq!(x.size(), [3, 3]);
    assert_eq!(
        Vec::<f32>::try_from(x.flatten(0, -1)).unwrap(),
        [1.0, -1.0, -1.0, 2.0, 2.0, -1.0, 3.0, 3.0, 3.0]
    );

    // Without a pad value, ragged samples are an error naming the key and the batch.
    let source = Arc::new(Ragged(vec!["idx".into(), "x".into()]));
    let setup = Setup::over(source, 3, |_, _| Vec::new());
    let message = setup.epoch_error();
    assert!(message.contains("`x`"), "{message}");
}

/// A shuffled pipeline with a random augmentation per sample, a deterministic batchable op
/// (deferred to the batch), optionally a filter, and a random op after a `Batch` op.
fn augmented(workers: usize, filter: Option<bool>, batch_filter: bool) -> Setup {
    let mut setup = Setup::new(37, 4, |idx, x| {
        let mut ops = vec![op(Behaviour::Noise, x)];
        if let Some(replacement) = filter {
            ops.push(filter_op(
                Behaviour::RemoveIf(vec![3, 4, 5, 17, 30]),
                idx,
                replacement,
            ));
        }
        ops.push(op(Behaviour::Scale(3.0), x));
        ops.push(batch_op(BatchSpec::default()));
        ops.push(op(Behaviour::Noise, x));
        if batch_filter {
            // Drops every batch holding sample 11 or 12.
            ops.push(filter_op(Behaviour::RemoveIf(vec![11, 12]), idx, true));
        }
        ops
    });
    setup.pipeline.shuffle = true;
    setup.pipeline.workers = workers;
    setup.pipeline.prefetch = 1;
    setup
}

#[test]
fn batches_are_bitwise_identical_for_any_worker_count() {
    for (filter, batch_filter) in [(None, false), (Some(true), false), (Some(false), true)] {
        for steps in [None, Some(13)] {
            let reference = fingerprints(&augmented(0, filter, batch_filter).batches(steps));
            assert!(!reference.is_empty());
            for workers in [1, 2, 5] {
                let got = fingerprints(&augmented(workers, filter, batch_filter).batches(steps));
                assert!(
                    got == reference,
                    "{workers} workers differ from 0 (filter {filter:?}, batch filter {batch_filter}, steps {steps:?})"
                );
            }
        }
    }
}

#[test]
fn augmentation_and_shuffling_depend_on_the_epoch_and_seed() {
    let setup = augmented(2, None, false);
    let first = fingerprints(&setup.batches_from(1, None, 0));
    assert!(first == fingerprints(&setup.batches_from(1, None, 0)));
    assert!(first != fingerprints(&setup.batches_from(2, None, 0)));
    let mut other = augmented(2, None, false);
    other.pipeline.seed = 8;
    assert!(first != fingerprints(&other.batches(None)));
    // Noise was really added: x is no longer 3 * (i, i/2, -i).
    let batch = &setup.batches(None)[0];
    let idx = ints(batch.get(setup.idx).unwrap());
    let x = Vec::<f32>::try_from(batch.get(setup.x).unwrap().flatten(0, -1)).unwrap();
    assert_ne!(x[0], 3.0 * idx[0] as f32);
}

#[test]
fn augmentation_depends_on_the_mode_and_the_ds_id() {
    // The README's promise: a sample's randomness derives from (seed, mode, ds_id, epoch,
    // index). The same dataset read in another mode or under another ds_id, in the same order,
    // must get other noise.
    use fe_plugin_api::Mode;
    let mut setup = augmented(0, None, false);
    setup.pipeline.shuffle = false;
    let first = &setup.pipeline.datasets[0];
    let (source, keys) = (first.source.clone(), first.keys.clone());
    for (mode, ds_id) in [(Mode::Eval, "a"), (Mode::Eval, "b"), (Mode::Test, "a")] {
        setup.pipeline.datasets.push(super::Dataset {
            mode,
            ds_id: ds_id.to_owned(),
            epochs: crate::schedule::InForce::always(),
            source: source.clone(),
            keys: keys.clone(),
        });
    }
    let wanted = setup.wanted();
    let prints = |mode: Mode, ds_id: &str| {
        let batches: Vec<Batch> = setup
            .pipeline
            .epoch_from(mode, 1, ds_id, &wanted, None, &setup.keys, 0)
            .unwrap()
            .collect::<crate::error::Result<_>>()
            .unwrap();
        fingerprints(&batches)
    };
    let runs = [
        ("train", prints(Mode::Train, "")),
        ("eval a", prints(Mode::Eval, "a")),
        ("eval b", prints(Mode::Eval, "b")),
        ("test a", prints(Mode::Test, "a")),
    ];
    assert!(runs[1].1 == prints(Mode::Eval, "a"), "still deterministic");
    for (i, (name, a)) in runs.iter().enumerate() {
        for (other, b) in &runs[i + 1..] {
            assert!(a != b, "{name} and {other} got the same noise");
        }
    }
}

#[test]
fn epoch_from_yields_exactly_the_tail_of_the_epoch() {
    for (filter, batch_filter) in [
        (None, false),
        (Some(true), false),
        (Some(false), false),
        (Some(true), true),
    ] {
        for steps in [None, Some(15)] {
            let setup = augmented(3, filter, batch_filter);
            let whole = fingerprints(&setup.batches(steps));
            for skip in 0..=whole.len() + 1 {
                let tail = fingerprints(&setup.batches_from(1, steps, skip));
                assert!(
                    tail[..] == whole[skip.min(whole.len())..],
                    "skip {skip} of {} (filter {filter:?}, batch filter {batch_filter}, steps {steps:?})",
                    whole.len()
                );
            }
        }
    }
}

#[test]
fn loader_len_counts_the_batches_left() {
    let setup = Setup::new(23, 5, |_, _| Vec::new());
    let wanted = setup.wanted();
    let loader = setup
        .pipeline
        .epoch_from(
            fe_plugin_api::Mode::Train,
            1,
            "",
            &wanted,
            Some(11),
            &setup.keys,
            4,
        )
        .unwrap();
    assert_eq!(loader.len(), 7);
    assert_eq!(loader.count(), 7);
}

#[test]
fn the_order_without_filters_matches_what_the_loader_delivers() {
    let mut setup = Setup::over(Arc::new(Numbers::new(23)), 5, |_, _| Vec::new());
    setup.pipeline.shuffle = true;
    let order: Vec<i64> = setup
        .pipeline
        .order(fe_plugin_api::Mode::Train, 1, "", Some(11))
        .iter()
        .map(|&i| i as i64)
        .collect();
    assert_eq!(order, setup.idx(Some(11)));
    // Each pass over the data is a permutation (the data is exhausted before resampling).
    for pass in order.chunks(23).filter(|p| p.len() == 23) {
        let mut sorted = pass.to_vec();
        sorted.sort();
        assert_eq!(sorted, (0..23).collect::<Vec<i64>>());
    }
}
