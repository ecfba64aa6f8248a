//! Which dataset sample sits at each position of an epoch's sample stream.
//!
//! An epoch reads an endless stream of passes over the dataset, each pass a fresh seeded
//! permutation when shuffling (FastEstimator's infinite sampler: the data is exhausted before
//! it is resampled). Position `p` holds sample `perm(pass = p / n)[p % n]`, so any position can
//! be found without reading the ones before it.

use std::sync::{Arc, Mutex};

use fe_plugin_api::Mode;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// Fisher–Yates with a ChaCha stream: the same seed gives the same order on every platform.
pub(crate) fn shuffle_in_place(values: &mut [u64], seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for i in (1..values.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        values.swap(i, j);
    }
}

/// The seed of pass `pass` over dataset `ds_id` of `mode` in `epoch`.
pub(crate) fn pass_seed(run_seed: u64, mode: Mode, ds_id: &str, epoch: u32, pass: u64) -> u64 {
    crate::rng::mix(
        crate::rng::mix(run_seed, crate::rng::hash_str(ds_id) ^ mode as u64),
        crate::rng::mix(epoch as u64, pass),
    )
}

/// Where an epoch's samples come from, position by position.
pub enum Positions {
    /// Exactly these dataset indices, then nothing (`transform`, and tests).
    List(Arc<Vec<u64>>),
    /// Endless passes over `n` samples.
    Passes(Passes),
    /// One rank's share of a data-parallel run's stream: its position `p` is position
    /// `p * world + rank` of the whole stream, so the ranks' step-`s` batches together are the
    /// whole stream's batch `s` (DistributedSampler's interleaving).
    Sharded(Box<Positions>, Shard),
}

/// Which share of the sample stream a rank reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// The rank.
    pub rank: usize,
    /// How many ranks share the stream.
    pub world: usize,
}

impl Shard {
    /// How many of the first `total` positions of the whole stream this rank reads: exactly
    /// its interleaved share, or — with `equal` (training, where every step is a collective) —
    /// the largest share, so that every rank runs the same number of steps (the shorter ones
    /// read on into the next pass, as DistributedSampler pads with the first samples).
    pub fn share(self, total: u64, equal: bool) -> u64 {
        let world = self.world.max(1) as u64;
        if equal {
            total.div_ceil(world)
        } else {
            (total + world - 1 - self.rank as u64) / world
        }
    }
}

impl Positions {
    /// Dataset indices of positions `start..start + len`, fewer where a list ends.
    pub fn indices(&self, start: u64, len: usize) -> Vec<u64> {
        match self {
            Positions::List(list) => {
                let from = (start as usize).min(list.len());
                let to = from.saturating_add(len).min(list.len());
                list[from..to].to_vec()
            }
            Positions::Passes(passes) => passes.indices(start, len),
            Positions::Sharded(whole, shard) => {
                let world = shard.world.max(1);
                let first = start * world as u64;
                let mut indices = whole.indices(first, len * world);
                let mut mine = Vec::with_capacity(len);
                for (offset, index) in indices.drain(..).enumerate() {
                    if offset % world == shard.rank {
                        mine.push(index);
                    }
                }
                mine
            }
        }
    }

    /// Positions there are (`None`: endless).
    pub fn end(&self) -> Option<u64> {
        match self {
            Positions::List(list) => Some(list.len() as u64),
            Positions::Passes(_) => None,
            Positions::Sharded(whole, shard) => whole.end().map(|n| shard.share(n, false)),
        }
    }

    /// Samples in one pass over the data.
    pub fn pass_len(&self) -> u64 {
        match self {
            Positions::List(list) => list.len() as u64,
            Positions::Passes(passes) => passes.n,
            Positions::Sharded(whole, shard) => shard.share(whole.pass_len(), false),
        }
    }
}

/// Endless passes over a dataset, shuffled per pass or in order.
pub struct Passes {
    n: u64,
    shuffle: Option<PassSeeds>,
    /// The last few permutations: workers read neighbouring positions, so a short cache
    /// spares recomputing an O(n) permutation per chunk.
    cache: Mutex<Vec<(u64, Arc<Vec<u64>>)>>,
}

struct PassSeeds {
    run_seed: u64,
    mode: Mode,
    ds_id: String,
    epoch: u32,
    /// A dataset with an order of its own (shards): asked for each pass's order instead.
    streamed: Option<Arc<dyn crate::pipeline::Source>>,
}

impl Passes {
    /// Passes over `n` samples in dataset order.
    pub fn in_order(n: u64) -> Self {
        Self {
            n,
            shuffle: None,
            cache: Mutex::new(Vec::new()),
        }
    }

    /// Passes over `n` samples, each a permutation seeded by the run seed, mode, dataset,
    /// epoch and pass.
    pub fn shuffled(n: u64, run_seed: u64, mode: Mode, ds_id: &str, epoch: u32) -> Self {
        Self {
            n,
            shuffle: Some(PassSeeds {
                run_seed,
                mode,
                ds_id: ds_id.to_owned(),
                epoch,
                streamed: None,
            }),
            cache: Mutex::new(Vec::new()),
        }
    }

    /// Like [`Passes::shuffled`], each pass in the order `source` gives for the pass's seed
    /// (see [`crate::pipeline::Source::stream_order`]), where it has one.
    pub fn shuffled_as(
        source: Arc<dyn crate::pipeline::Source>,
        run_seed: u64,
        mode: Mode,
        ds_id: &str,
        epoch: u32,
    ) -> Self {
        let mut passes = Self::shuffled(source.len(), run_seed, mode, ds_id, epoch);
        if let Some(seeds) = &mut passes.shuffle {
            seeds.streamed = Some(source);
        }
        passes
    }

    /// Dataset indices of positions `start..start + len`.
    pub fn indices(&self, start: u64, len: usize) -> Vec<u64> {
        if self.n == 0 {
            return Vec::new();
        }
        let Some(seeds) = &self.shuffle else {
            return (start..start + len as u64).map(|p| p % self.n).collect();
        };
        let mut out = Vec::with_capacity(len);
        let mut position = start;
        while out.len() < len {
            let pass = position / self.n;
            let offset = (position % self.n) as usize;
            let permutation = self.permutation(pass, seeds);
            let take = (len - out.len()).min(permutation.len() - offset);
            out.extend_from_slice(&permutation[offset..offset + take]);
            position += take as u64;
        }
        out
    }

    fn permutation(&self, pass: u64, seeds: &PassSeeds) -> Arc<Vec<u64>> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, found)) = cache.iter().find(|(p, _)| *p == pass) {
            return Arc::clone(found);
        }
        let seed = pass_seed(seeds.run_seed, seeds.mode, &seeds.ds_id, seeds.epoch, pass);
        let streamed = seeds.streamed.as_ref().and_then(|s| s.stream_order(seed));
        let indices = match streamed {
            Some(order) if order.len() as u64 == self.n => order,
            _ => {
                let mut indices: Vec<u64> = (0..self.n).collect();
                shuffle_in_place(&mut indices, seed);
                indices
            }
        };
        let permutation = Arc::new(indices);
        if cache.len() >= 4 {
            cache.remove(0);
        }
        cache.push((pass, Arc::clone(&permutation)));
        permutation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut a: Vec<u64> = (0..100).collect();
        let mut b = a.clone();
        shuffle_in_place(&mut a, 7);
        shuffle_in_place(&mut b, 7);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        let mut c: Vec<u64> = (0..100).collect();
        shuffle_in_place(&mut c, 8);
        assert_ne!(a, c);
    }

    #[test]
    fn passes_exhaust_the_data_before_resampling() {
        let passes = Passes::shuffled(23, 5, Mode::Train, "", 1);
        let stream = passes.indices(0, 23 * 3);
        for pass in stream.chunks(23) {
            let mut sorted = pass.to_vec();
            sorted.sort();
            assert_eq!(sorted, (0..23).collect::<Vec<_>>());
        }
        assert_ne!(stream[..23], stream[23..46], "each pass is reshuffled");
        // Any window reads the same as the whole stream there.
        assert_eq!(passes.indices(20, 10), stream[20..30]);
        assert_eq!(Passes::in_order(4).indices(3, 6), [3, 0, 1, 2, 3, 0]);
    }

    #[test]
    fn shards_interleave_and_together_cover_the_stream() {
        let whole = || Positions::Passes(Passes::shuffled(10, 3, Mode::Train, "", 1));
        let stream = whole().indices(0, 10);
        let shard = |rank| Shard { rank, world: 2 };
        let zero = Positions::Sharded(Box::new(whole()), shard(0));
        let one = Positions::Sharded(Box::new(whole()), shard(1));
        // Step s of batch 2 per rank: the whole stream's batch s of 4.
        for step in 0..2u64 {
            let mut together = zero.indices(step * 2, 2);
            together.extend(one.indices(step * 2, 2));
            together.sort();
            let mut expected = stream[step as usize * 4..step as usize * 4 + 4].to_vec();
            expected.sort();
            assert_eq!(together, expected);
        }
        assert_eq!(zero.indices(1, 2), [stream[2], stream[4]]);
    }

    #[test]
    fn shares_are_exact_or_equal() {
        let shard = |rank| Shard { rank, world: 3 };
        let exact: Vec<u64> = (0..3).map(|r| shard(r).share(10, false)).collect();
        assert_eq!(exact, [4, 3, 3]);
        assert_eq!(exact.iter().sum::<u64>(), 10);
        assert!((0..3).all(|r| shard(r).share(10, true) == 4));
        let list = Positions::Sharded(
            Box::new(Positions::List(Arc::new((0..5).collect()))),
            shard(1),
        );
        assert_eq!(list.indices(0, 9), [1, 4]);
        assert_eq!(list.end(), Some(2));
    }

    #[test]
    fn lists_end() {
        let list = Positions::List(Arc::new(vec![5, 6, 7]));
        assert_eq!(list.indices(1, 5), [6, 7]);
        assert!(list.indices(4, 2).is_empty());
        assert_eq!(list.end(), Some(3));
    }
}
