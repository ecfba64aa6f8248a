//! How long a rank waited for its averaged gradients once backward was done: the part of each
//! gradient all-reduce that backward did not hide (DDP logs the same as
//! `avg_backward_comm_time`). On a busy machine it is what separates N ranks from one process
//! with N times the threads, and its tail (a rare wait of a few milliseconds) can cost as much
//! as all the typical ones together, so the summary gives quantiles, not just the mean.

use std::time::Duration;

/// Smallest wait the histogram tells apart (shorter ones share its first bin).
const FLOOR_NANOS: f64 = 1_000.0;
/// Each bin's upper edge is this factor above its lower one: quantiles are exact to 10 %.
const GROWTH: f64 = 1.1;
/// Bins from 1 µs to 1.1^BINS µs (about 190 s); longer waits share the last one.
const BINS: usize = 200;

/// A log-spaced histogram of waits, with their count, total and longest.
#[derive(Debug, Clone)]
pub struct WaitTimes {
    counts: Vec<u64>,
    count: u64,
    total: Duration,
    longest: Duration,
}

/// What [`WaitTimes`] reports, in a run's `--summary` file.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize)]
pub struct WaitSummary {
    /// Gradient all-reduces waited for.
    pub updates: u64,
    /// Seconds spent waiting, in all.
    pub total_seconds: f64,
    /// The median wait, in milliseconds (to 10 %).
    pub median_ms: f64,
    /// The 95th percentile, in milliseconds (to 10 %).
    pub p95_ms: f64,
    /// The longest wait, in milliseconds.
    pub max_ms: f64,
}

impl Default for WaitTimes {
    fn default() -> Self {
        Self {
            counts: vec![0; BINS],
            count: 0,
            total: Duration::ZERO,
            longest: Duration::ZERO,
        }
    }
}

impl WaitTimes {
    /// Counts one wait.
    pub fn record(&mut self, wait: Duration) {
        self.counts[bin_of(wait)] += 1;
        self.count += 1;
        self.total += wait;
        self.longest = self.longest.max(wait);
    }

    /// The wait that a fraction `q` (0 to 1) of the waits do not exceed: the upper edge of
    /// its bin, never above the longest wait. `None` before any wait.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        // The rank (1-based) of the wait that q of them do not exceed.
        let wanted = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bin, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= wanted {
                // The last bin has no upper edge: it holds everything past the one before.
                let edge = if bin + 1 == BINS {
                    self.longest
                } else {
                    upper_edge(bin)
                };
                return Some(edge.min(self.longest));
            }
        }
        Some(self.longest)
    }

    /// The counts, total and quantiles, for the summary.
    pub fn summary(&self) -> WaitSummary {
        let ms = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e3);
        WaitSummary {
            updates: self.count,
            total_seconds: self.total.as_secs_f64(),
            median_ms: ms(self.quantile(0.5)),
            p95_ms: ms(self.quantile(0.95)),
            max_ms: ms(Some(self.longest)),
        }
    }
}

fn bin_of(wait: Duration) -> usize {
    let nanos = wait.as_nanos() as f64;
    if nanos <= FLOOR_NANOS {
        return 0;
    }
    (((nanos / FLOOR_NANOS).ln() / GROWTH.ln()) as usize).min(BINS - 1)
}

fn upper_edge(bin: usize) -> Duration {
    Duration::from_nanos((FLOOR_NANOS * GROWTH.powi(bin as i32 + 1)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(us: u64) -> Duration {
        Duration::from_micros(us)
    }

    #[test]
    fn nothing_recorded_has_no_quantiles_and_a_zero_summary() {
        let waits = WaitTimes::default();
        assert_eq!(waits.quantile(0.5), None);
        assert_eq!(waits.summary(), WaitSummary::default());
    }

    #[test]
    fn quantiles_are_within_ten_percent_and_see_the_tail() {
        let mut waits = WaitTimes::default();
        // 95 typical waits of 500 µs and a tail of 5 at 5 ms: the median is the typical one,
        // the 95th percentile still typical, the 96th in the tail.
        for _ in 0..95 {
            waits.record(micros(500));
        }
        for _ in 0..5 {
            waits.record(micros(5_000));
        }
        let median = waits.quantile(0.5).unwrap();
        assert!(median >= micros(500) && median <= micros(550), "{median:?}");
        let p95 = waits.quantile(0.95).unwrap();
        assert!(p95 >= micros(500) && p95 <= micros(550), "{p95:?}");
        assert_eq!(waits.quantile(0.96), Some(micros(5_000)));
        let summary = waits.summary();
        assert_eq!(summary.updates, 100);
        assert!((summary.total_seconds - 0.0725).abs() < 1e-9);
        assert!((summary.max_ms - 5.0).abs() < 1e-9);
    }

    #[test]
    fn a_quantile_never_exceeds_the_longest_wait() {
        let mut waits = WaitTimes::default();
        waits.record(micros(1_001));
        assert_eq!(waits.quantile(1.0), Some(micros(1_001)));
        assert_eq!(waits.quantile(0.0), Some(micros(1_001)));
    }

    #[test]
    fn waits_below_a_microsecond_and_past_the_last_bin_are_kept() {
        let mut waits = WaitTimes::default();
        waits.record(Duration::from_nanos(10));
        waits.record(Duration::from_secs(1_000));
        assert_eq!(waits.quantile(0.5), Some(micros(1).mul_f64(GROWTH)));
        assert_eq!(waits.quantile(1.0), Some(Duration::from_secs(1_000)));
        assert_eq!(waits.summary().updates, 2);
    }
}
