//! One epoch of batches, prepared on worker threads ahead of the network.
//!
//! Without filters, batch `b` is the samples at positions `b * batch_size ..` of the epoch's
//! sample stream and is built entirely by worker `b % W`, which hands it over through its own
//! bounded queue; the consumer reads the queues in turn. With filters, which samples make up a
//! batch depends on the ones before it, so workers process the stream in chunks and the
//! consumer fills batches in order ([`super::stream`]). Either way batches come out in order
//! and identical for any number of workers: every random choice is seeded by the sample index,
//! never by which thread did the work.

use std::sync::Arc;

use super::pool::OrderedPool;
use super::stream::Assembler;
pub use super::work::EpochWork;
use crate::batch::Batch;
use crate::error::Result;

/// Iterates over the batches of one epoch while workers prepare the next ones.
pub struct EpochLoader {
    kind: Kind,
    len: usize,
    shortened_by_data: bool,
}

enum Kind {
    Fixed(OrderedPool<Batch>),
    Stream(Box<Assembler>),
}

impl EpochLoader {
    /// Starts `workers` threads, each keeping up to `prefetch` batches (or chunks) ready.
    pub fn start(work: EpochWork, workers: usize, prefetch: usize) -> Result<Self> {
        let first = work.first_batch.min(work.batches);
        let shortened_by_data = work.shortens();
        let len = work.batches - first;
        let kind = if work.filters() {
            Kind::Stream(Box::new(Assembler::start(work, workers, prefetch)?))
        } else {
            let batches = work.batches;
            let work = Arc::new(work);
            let job = Arc::new(move |b: usize| work.fixed_batch(b).map(Some));
            Kind::Fixed(OrderedPool::start(
                "fe-pipeline",
                first,
                Some(batches),
                workers,
                prefetch,
                job,
            )?)
        };
        Ok(Self {
            kind,
            len,
            shortened_by_data,
        })
    }

    /// Batches this loader yields: exact without filters; with filters that shorten the
    /// epoch (`replacement = false`), at most this many.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when it yields no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `true` when filters without replacement decide how many batches it yields, so that
    /// another rank's loader of the same epoch may yield more or fewer (see
    /// `estimator::uneven`).
    pub fn length_depends_on_data(&self) -> bool {
        self.shortened_by_data
    }
}

impl Iterator for EpochLoader {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        match &mut self.kind {
            Kind::Fixed(pool) => pool.next_result(),
            Kind::Stream(assembler) => assembler.next_batch(),
        }
    }
}
