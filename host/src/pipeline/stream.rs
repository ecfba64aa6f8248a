//! Epochs with filters: FastEstimator's filtering loader, deterministic.
//!
//! Workers process the epoch's sample stream in chunks of positions (chunk `k` on worker
//! `k % W`), running the per-sample ops and reporting each sample kept or dropped. The
//! consumer reads the chunks in order and fills batches exactly as FastEstimator's
//! `FEDataLoader` does: a kept sample goes into the next batch; a sample dropped *with*
//! replacement does not count, so the stream runs on (into the next, reshuffled pass if need
//! be) until the epoch has its `to_yield` samples; one dropped *without* replacement counts as
//! delivered, so the epoch ends early. A batch a filter after the `Batch` op drops counts the
//! same way. The result depends only on the stream, never on chunking or the worker count.
//!
//! Skipping the first `skip` batches (resuming mid-epoch) replays only the ops that decide
//! which samples are kept, over the skipped part of the stream, then starts from the exact
//! position batch `skip` starts at. With a filter after the `Batch` op, whether a batch is kept
//! depends on all of its ops, so the skipped batches are built and discarded.

use std::collections::VecDeque;
use std::sync::Arc;

use super::pool::OrderedPool;
use super::work::{EpochWork, Finished, Outcome};
use crate::batch::Batch;
use crate::error::{Error, Result};

/// The epoch's per-sample outcomes in stream order, computed ahead by workers.
struct ChunkStream {
    pool: OrderedPool<Vec<Outcome>>,
    current: VecDeque<Outcome>,
    /// Stream position of the next outcome.
    position: u64,
}

impl ChunkStream {
    fn start(
        work: &Arc<EpochWork>,
        start: u64,
        scan: bool,
        workers: usize,
        prefetch: usize,
    ) -> Result<Self> {
        // Scanning is cheap per sample, so larger chunks keep the workers busy.
        let chunk = (work.batch_size * if scan { 8 } else { 1 }).max(1) as u64;
        let shared = Arc::clone(work);
        let job = Arc::new(move |k: usize| {
            let from = start + k as u64 * chunk;
            let indices = shared.positions.indices(from, chunk as usize);
            if indices.is_empty() {
                return Ok(None);
            }
            indices
                .into_iter()
                .map(|index| shared.sample(index, scan))
                .collect::<Result<Vec<_>>>()
                .map(Some)
        });
        let pool = OrderedPool::start("fe-pipeline", 0, None, workers, prefetch, job)?;
        Ok(Self {
            pool,
            current: VecDeque::new(),
            position: start,
        })
    }

    /// The next outcome; `None` where a finite order ends.
    fn next_outcome(&mut self) -> Option<Result<Outcome>> {
        while self.current.is_empty() {
            match self.pool.next_result()? {
                Ok(chunk) => self.current.extend(chunk),
                Err(e) => return Some(Err(e)),
            }
        }
        self.position += 1;
        self.current.pop_front().map(Ok)
    }
}

/// FastEstimator's batch-filling loop over a [`ChunkStream`].
pub struct Assembler {
    work: Arc<EpochWork>,
    stream: ChunkStream,
    scanning: bool,
    /// Samples delivered or dropped without replacement (FastEstimator's `samples_yielded`).
    yielded: u64,
    pending: Vec<(u64, Option<Batch>)>,
    /// Batches produced (delivered or skipped).
    produced: usize,
    /// Positions since a sample was last kept, and batches dropped in a row: an epoch whose
    /// filters drop everything with replacement would otherwise never end.
    since_kept: u64,
    dropped_in_a_row: u64,
    done: bool,
}

impl Assembler {
    /// Starts the epoch of `work`, positioned at batch `work.first_batch`.
    pub fn start(work: EpochWork, workers: usize, prefetch: usize) -> Result<Self> {
        let work = Arc::new(work);
        let skip = work.first_batch;
        let scanning = skip > 0 && !work.filters_batches();
        let stream = ChunkStream::start(&work, 0, scanning, workers, prefetch)?;
        let mut assembler = Self {
            work,
            stream,
            scanning,
            yielded: 0,
            pending: Vec::new(),
            produced: 0,
            since_kept: 0,
            dropped_in_a_row: 0,
            done: false,
        };
        while assembler.produced < skip {
            match assembler.next_batch() {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        if assembler.scanning {
            // Batches fill exactly, so nothing is pending: carry on at this position.
            assembler.scanning = false;
            let at = assembler.stream.position;
            assembler.stream = ChunkStream::start(&assembler.work, at, false, workers, prefetch)?;
        }
        Ok(assembler)
    }

    /// The next batch (an empty placeholder while scanning); `None` when the epoch is over.
    pub fn next_batch(&mut self) -> Option<Result<Batch>> {
        match self.fill() {
            Ok(batch) => batch.map(Ok),
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    fn fill(&mut self) -> Result<Option<Batch>> {
        let batch_size = self.work.batch_size;
        let to_yield = self.work.to_yield;
        loop {
            if self.done || self.yielded >= to_yield {
                return Ok(None);
            }
            while self.pending.len() < batch_size
                && self.yielded + (self.pending.len() as u64) < to_yield
            {
                let Some(outcome) = self.stream.next_outcome() else {
                    break;
                };
                match outcome? {
                    Outcome::Kept(index, sample) => {
                        self.since_kept = 0;
                        self.pending.push((index, sample));
                    }
                    Outcome::Removed { replacement } => {
                        self.since_kept += 1;
                        if !replacement {
                            self.yielded += 1;
                        }
                        self.check_progress()?;
                    }
                }
            }
            if self.pending.is_empty() || (self.work.drop_last && self.pending.len() < batch_size) {
                self.done = true;
                return Ok(None);
            }
            let taken: Vec<(u64, Option<Batch>)> = std::mem::take(&mut self.pending);
            let count = taken.len() as u64;
            self.yielded += count;
            let number = self.produced + 1;
            if self.scanning {
                self.produced += 1;
                return Ok(Some(Batch::with_keys(0)));
            }
            let indices: Vec<u64> = taken.iter().map(|(i, _)| *i).collect();
            let samples = taken
                .into_iter()
                .map(|(_, s)| {
                    s.ok_or_else(|| Error::Internal("a scanned sample reached a batch".into()))
                })
                .collect::<Result<Vec<_>>>()?;
            match self.work.finish(samples, &indices, number)? {
                Finished::Batch(batch) => {
                    self.produced += 1;
                    self.dropped_in_a_row = 0;
                    return Ok(Some(batch));
                }
                Finished::Removed { replacement } => {
                    if replacement {
                        self.yielded -= count;
                    }
                    self.dropped_in_a_row += 1;
                    self.check_progress()?;
                }
            }
        }
    }

    /// Every sample recurs within two passes (a pass is a permutation), so two passes without
    /// a kept sample mean none ever will be; batches dropped with replacement get a generous
    /// bound of their own.
    fn check_progress(&self) -> Result<()> {
        let pass = self.work.positions.pass_len().max(1);
        let batches = (pass / self.work.batch_size.max(1) as u64).max(1) * 4 + 1000;
        if self.since_kept >= 2 * pass || self.dropped_in_a_row >= batches {
            let what = if self.since_kept >= 2 * pass {
                format!("the filters dropped {} samples in a row", self.since_kept)
            } else {
                format!(
                    "filters after the Batch op dropped {} batches in a row",
                    self.dropped_in_a_row
                )
            };
            return Err(Error::Run(format!(
                "pipeline ({}): {what} with replacement, so the epoch can never be filled; check the filter's condition",
                self.work.context_text()
            )));
        }
        Ok(())
    }
}
