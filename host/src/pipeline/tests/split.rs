//! `split_from`: FastEstimator's `dataset.split` by fraction, count and indices, seeded, with
//! stratification; the source keeps what was not taken.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::split::{Pool, SplitConfig};
use super::{ints, Numbers, Source};

fn config() -> SplitConfig {
    SplitConfig {
        fraction: None,
        count: None,
        indices: None,
        seed: None,
        stratify: None,
    }
}

fn fraction(f: f64) -> SplitConfig {
    SplitConfig {
        fraction: Some(f),
        ..config()
    }
}

fn pool(n: u64) -> Pool {
    Pool::whole(Arc::new(Numbers::new(n)))
}

/// The `idx` of every sample a pool's dataset holds, in its order.
fn idx_of(pool: &Pool) -> Vec<i64> {
    let source = pool.source();
    (0..source.len())
        .flat_map(|i| ints(&source.get(i).unwrap()[0]))
        .collect()
}

fn assert_partition(source: &Pool, taken: &[&Pool], n: i64) {
    let mut all: Vec<i64> = idx_of(source);
    for pool in taken {
        all.extend(idx_of(pool));
    }
    all.sort();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "disjoint and complete");
}

fn ascending(list: &[i64]) -> bool {
    list.windows(2).all(|w| w[0] < w[1])
}

#[test]
fn a_fraction_takes_that_share_and_the_source_keeps_the_rest() {
    let mut source = pool(100);
    let taken = source.take(&fraction(0.2), 1).unwrap();
    assert_eq!(taken.source().len(), 20);
    assert_eq!(source.source().len(), 80);
    assert!(ascending(&idx_of(&taken)) && ascending(&idx_of(&source)));
    assert_partition(&source, &[&taken], 100);
    // Fractions are of the size before any split: a second 0.2 takes 20 more, not 16.
    let again = source.take(&fraction(0.2), 1).unwrap();
    assert_eq!(again.source().len(), 20);
    assert_eq!(source.source().len(), 60);
    assert_partition(&source, &[&taken, &again], 100);
}

#[test]
fn a_count_takes_that_many() {
    let mut source = pool(50);
    let taken = source
        .take(
            &SplitConfig {
                count: Some(7),
                ..config()
            },
            3,
        )
        .unwrap();
    assert_eq!(idx_of(&taken).len(), 7);
    assert_eq!(idx_of(&source).len(), 43);
    assert_partition(&source, &[&taken], 50);
}

#[test]
fn indices_take_exactly_those_samples() {
    let mut source = pool(10);
    let taken = source
        .take(
            &SplitConfig {
                indices: Some(vec![5, 2, 9]),
                ..config()
            },
            0,
        )
        .unwrap();
    assert_eq!(idx_of(&taken), [2, 5, 9]);
    assert_eq!(idx_of(&source), [0, 1, 3, 4, 6, 7, 8]);
    let indices = |list: Vec<u64>| SplitConfig {
        indices: Some(list),
        ..config()
    };
    let (field, message) = source.take(&indices(vec![1, 1]), 0).err().unwrap();
    assert_eq!(
        (field.as_str(), message.as_str()),
        ("indices[1]", "sample 1 is listed twice")
    );
    let (field, message) = source.take(&indices(vec![0, 5]), 0).err().unwrap();
    assert_eq!(field, "indices[1]");
    assert!(message.contains("already split off"), "{message}");
    let (field, message) = source.take(&indices(vec![10]), 0).err().unwrap();
    assert_eq!(field, "indices[0]");
    assert!(message.contains("does not exist"), "{message}");
}

#[test]
fn the_same_seed_gives_the_same_split() {
    let split = |seed: Option<u64>, run_seed: u64| {
        let mut source = pool(200);
        let config = SplitConfig {
            seed,
            ..fraction(0.25)
        };
        idx_of(&source.take(&config, run_seed).unwrap())
    };
    assert_eq!(
        split(Some(5), 1),
        split(Some(5), 2),
        "the split's seed wins"
    );
    assert_ne!(split(Some(5), 1), split(Some(6), 1));
    assert_eq!(split(None, 9), split(None, 9), "the run seed by default");
    assert_ne!(split(None, 9), split(None, 10));
}

#[test]
fn stratify_keeps_each_class_proportion() {
    // Classes 0, 1, 2 cycle, so 90 samples hold 30 of each; a fraction of 0.2 takes 6 of each.
    let mut source = Pool::whole(Arc::new(Numbers::with_classes(90, 3)));
    let config = SplitConfig {
        stratify: Some("label".into()),
        ..fraction(0.2)
    };
    let taken = source.take(&config, 11).unwrap();
    let classes = |pool: &Pool| {
        let mut counts = BTreeMap::new();
        for i in idx_of(pool) {
            *counts.entry(i % 3).or_insert(0) += 1;
        }
        counts
    };
    assert_eq!(classes(&taken), BTreeMap::from([(0, 6), (1, 6), (2, 6)]));
    assert_eq!(
        classes(&source),
        BTreeMap::from([(0, 24), (1, 24), (2, 24)])
    );
    assert_partition(&source, &[&taken], 90);
    let unknown = SplitConfig {
        stratify: Some("colour".into()),
        ..fraction(0.2)
    };
    let (field, message) = source.take(&unknown, 11).err().unwrap();
    assert_eq!(field, "stratify");
    assert!(message.contains("no key `colour`"), "{message}");
}

/// Samples whose `label` is given: `idx` is the index.
struct Labelled(Vec<i64>, Vec<String>);

impl Source for Labelled {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn keys(&self) -> &[String] {
        &self.1
    }

    fn get(&self, index: u64) -> Result<Vec<tch::Tensor>, String> {
        let scalar = |v: i64| tch::Tensor::scalar_tensor(v, (tch::Kind::Int64, tch::Device::Cpu));
        Ok(vec![scalar(index as i64), scalar(self.0[index as usize])])
    }
}

#[test]
fn stratify_rounds_by_largest_remainder() {
    // 7 samples of class 0 and 3 of class 1: a count of 5 is 3.5 + 1.5, rounded to 4 + 1
    // (equal remainders go to the first class) so the total is exact.
    let labels = [vec![0; 7], vec![1; 3]].concat();
    let data = Labelled(labels.clone(), vec!["idx".into(), "label".into()]);
    let mut source = Pool::whole(Arc::new(data));
    let config = SplitConfig {
        count: Some(5),
        stratify: Some("label".into()),
        ..config()
    };
    let taken = source.take(&config, 2).unwrap();
    let classes = |pool: &Pool| {
        let mut counts = BTreeMap::new();
        for i in idx_of(pool) {
            *counts.entry(labels[i as usize]).or_insert(0) += 1;
        }
        counts
    };
    assert_eq!(classes(&taken), BTreeMap::from([(0, 4), (1, 1)]));
    assert_eq!(classes(&source), BTreeMap::from([(0, 3), (1, 2)]));
    assert_partition(&source, &[&taken], 10);
}

#[test]
fn bad_requests_name_their_field() {
    let mut source = pool(10);
    for (config, field) in [
        (fraction(0.0), "fraction"),
        (fraction(1.0), "fraction"),
        (fraction(0.01), "fraction"),
        (
            SplitConfig {
                count: Some(11),
                ..config()
            },
            "count",
        ),
        (
            SplitConfig {
                count: Some(0),
                ..config()
            },
            "count",
        ),
        (
            SplitConfig {
                count: Some(1),
                fraction: Some(0.5),
                ..config()
            },
            "",
        ),
        (config(), ""),
    ] {
        let (got, message) = source.take(&config, 0).err().unwrap();
        assert_eq!(got, field, "{message}");
    }
    assert_eq!(idx_of(&source).len(), 10, "a failed split takes nothing");
}
