//! FastEstimator's `TestPipelineFilter`, case by case: `idx = 0..23`, batch size 5, a
//! `RemoveIf` dropping `[2, 6, 9, 10, 11]` (or the case's own list), with and without
//! replacement, `drop_last`, and `steps_per_epoch` expanding or contracting the epoch. Every
//! case runs with 0, 1 and 7 workers (FastEstimator's `num_process` values plus one), shuffled
//! and not.

use std::collections::BTreeSet;

use super::{filter_op, kept_of_23, Behaviour, Setup};

const REMOVED: [i64; 5] = [2, 6, 9, 10, 11];

/// The pipeline of a case: 23 samples, batch 5, optionally a filter of `removed`.
fn case(workers: usize, removed: Option<(&[i64], bool)>, drop_last: bool) -> Setup {
    let mut setup = Setup::new(23, 5, |idx, _| match removed {
        Some((values, replacement)) => vec![filter_op(
            Behaviour::RemoveIf(values.to_vec()),
            idx,
            replacement,
        )],
        None => Vec::new(),
    });
    setup.pipeline.workers = workers;
    setup.pipeline.drop_last = drop_last;
    setup
}

fn shuffled(mut setup: Setup) -> Setup {
    setup.pipeline.shuffle = true;
    setup
}

fn count(list: &[i64], value: i64) -> usize {
    list.iter().filter(|&&v| v == value).count()
}

fn set(list: &[i64]) -> BTreeSet<i64> {
    list.iter().copied().collect()
}

const WORKERS: [usize; 3] = [0, 1, 7];

#[test]
fn unbatched_nodrop_nofilter() {
    for workers in WORKERS {
        let all: Vec<i64> = (0..23).collect();
        assert_eq!(case(workers, None, false).idx(None), all);
        let got = shuffled(case(workers, None, false)).idx(None);
        assert_eq!(got.len(), 23);
        assert_eq!(set(&got), set(&all));
    }
}

#[test]
fn unbatched_nodrop_replacement_filter_refills_from_the_start() {
    let target: Vec<i64> = [kept_of_23(), vec![0, 1, 3, 4, 5]].concat();
    assert_eq!(
        target,
        [0, 1, 3, 4, 5, 7, 8, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 0, 1, 3, 4, 5]
    );
    for workers in WORKERS {
        let setup = case(workers, Some((&REMOVED[..], true)), false);
        assert_eq!(setup.idx(None), target, "{workers} workers");
        // Batches stay full: the epoch still delivers 23 samples.
        let sizes: Vec<usize> = setup.idx_batches(None).iter().map(Vec::len).collect();
        assert_eq!(sizes, [5, 5, 5, 5, 3]);
        let got = shuffled(case(workers, Some((&REMOVED[..], true)), false)).idx(None);
        assert_eq!(got.len(), 23);
        assert_eq!(set(&got), set(&target), "every kept sample is visited");
    }
}

#[test]
fn unbatched_nodrop_cut_filter_shortens_the_epoch() {
    for workers in WORKERS {
        let setup = case(workers, Some((&REMOVED[..], false)), false);
        assert_eq!(setup.idx(None), kept_of_23(), "{workers} workers");
        let sizes: Vec<usize> = setup.idx_batches(None).iter().map(Vec::len).collect();
        assert_eq!(sizes, [5, 5, 5, 3]);
        let got = shuffled(case(workers, Some((&REMOVED[..], false)), false)).idx(None);
        assert_eq!(got.len(), 18);
        assert_eq!(set(&got), set(&kept_of_23()));
    }
}

#[test]
fn unbatched_drop_nofilter() {
    for workers in WORKERS {
        let setup = case(workers, None, true);
        assert_eq!(setup.idx(None), (0..20).collect::<Vec<i64>>());
        let sizes: Vec<usize> = setup.idx_batches(None).iter().map(Vec::len).collect();
        assert_eq!(sizes, [5, 5, 5, 5]);
        assert_eq!(shuffled(case(workers, None, true)).idx(None).len(), 20);
    }
}

#[test]
fn unbatched_drop_replacement_filter() {
    let target: Vec<i64> = [kept_of_23(), vec![0, 1]].concat();
    for workers in WORKERS {
        assert_eq!(
            case(workers, Some((&REMOVED[..], true)), true).idx(None),
            target
        );
        let got = shuffled(case(workers, Some((&REMOVED[..], true)), true)).idx(None);
        assert_eq!(got.len(), 20);
        assert_eq!(set(&got), set(&target));
    }
}

#[test]
fn unbatched_drop_cut_filter() {
    let target: Vec<i64> = [0, 1, 3, 4, 5, 7, 8, 12, 13, 14, 15, 16, 17, 18, 19].to_vec();
    for workers in WORKERS {
        assert_eq!(
            case(workers, Some((&REMOVED[..], false)), true).idx(None),
            target
        );
        let got = shuffled(case(workers, Some((&REMOVED[..], false)), true)).idx(None);
        assert_eq!(got.len(), 15);
        assert_eq!(set(&got).len(), 15, "no repeats");
    }
}

#[test]
fn steps_per_epoch_11_repeats_the_data_in_order() {
    let target: Vec<i64> = (0..23).chain(0..23).chain(0..9).collect();
    assert_eq!(target.len(), 55);
    for workers in WORKERS {
        let setup = case(workers, None, false);
        assert_eq!(setup.idx(Some(11)), target, "{workers} workers");
        assert_eq!(setup.idx_batches(Some(11)).len(), 11);
        let got = shuffled(case(workers, None, false)).idx(Some(11));
        assert_eq!(got.len(), 55);
        for i in 0..23 {
            assert!(count(&got, i) >= 2, "{i} appears {} times", count(&got, i));
        }
    }
}

#[test]
fn steps_per_epoch_2_contracts_the_epoch() {
    for workers in WORKERS {
        assert_eq!(
            case(workers, None, false).idx(Some(2)),
            (0..10).collect::<Vec<i64>>()
        );
        let got = shuffled(case(workers, None, false)).idx(Some(2));
        assert_eq!(set(&got).len(), 10, "all unique");
    }
}

#[test]
fn replacement_filter_expanded_by_steps() {
    let target: Vec<i64> = [kept_of_23(), kept_of_23(), kept_of_23(), vec![0]].concat();
    for workers in WORKERS {
        assert_eq!(
            case(workers, Some((&REMOVED[..], true)), false).idx(Some(11)),
            target
        );
        let got = shuffled(case(workers, Some((&REMOVED[..], true)), false)).idx(Some(11));
        assert_eq!(got.len(), 55);
        for i in kept_of_23() {
            assert!(count(&got, i) >= 3, "{i} appears {} times", count(&got, i));
        }
    }
}

#[test]
fn replacement_filter_contracted_by_steps() {
    let removed = [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13];
    // FastEstimator's multi-process loader gives [15, 16, 17, 18, 19, 0, 8, 9, 14, 20]: it
    // defers the first, partial batch. Ours fills batches in stream order: the same samples,
    // in dataset order.
    let target = [0, 8, 9, 14, 15, 16, 17, 18, 19, 20];
    for workers in WORKERS {
        let got = case(workers, Some((&removed[..], true)), false).idx(Some(2));
        assert_eq!(got, target);
        assert_eq!(set(&got), set(&[15, 16, 17, 18, 19, 0, 8, 9, 14, 20]));
        let got = shuffled(case(workers, Some((&removed[..], true)), false)).idx(Some(2));
        assert_eq!(set(&got).len(), 10, "all unique");
    }
}

#[test]
fn cut_filter_expanded_by_steps() {
    let target: Vec<i64> = [kept_of_23(), kept_of_23(), kept_of_23()].concat()[..43].to_vec();
    for workers in WORKERS {
        assert_eq!(
            case(workers, Some((&REMOVED[..], false)), false).idx(Some(11)),
            target
        );
        let got = shuffled(case(workers, Some((&REMOVED[..], false)), false)).idx(Some(11));
        assert!((40..=45).contains(&got.len()), "{}", got.len());
        for i in kept_of_23() {
            assert!(count(&got, i) >= 2, "{i} appears {} times", count(&got, i));
        }
    }
}

#[test]
fn cut_filter_contracted_by_steps() {
    let removed = [1, 2, 3, 4, 5, 6, 7, 10];
    for workers in WORKERS {
        assert_eq!(
            case(workers, Some((&removed[..], false)), false).idx(Some(2)),
            [0, 8, 9]
        );
        let got = shuffled(case(workers, Some((&removed[..], false)), false)).idx(Some(2));
        assert!(set(&got).len() >= 2);
    }
}

#[test]
fn a_filter_that_drops_everything_with_replacement_is_an_error_not_a_hang() {
    let all: Vec<i64> = (0..23).collect();
    let setup = Setup::new(23, 5, |idx, _| {
        vec![filter_op(Behaviour::RemoveIf(all), idx, true)]
    });
    let message = setup.epoch_error();
    assert!(message.contains("can never be filled"), "{message}");
}
