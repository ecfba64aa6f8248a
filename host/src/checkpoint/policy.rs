//! When to write checkpoints and which to keep: pure functions over numbers, so every rule is
//! unit-tested without touching a file.

use crate::manifest::CheckpointConfig;

/// A checkpoint that exists, as the retention rule sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// Its directory name.
    pub name: String,
    /// Global step it was taken at.
    pub step: u64,
    /// Order of writing (higher is newer; breaks ties between equal steps).
    pub sequence: u64,
    /// The monitored value it was taken with, for `keep_best` (epoch-end checkpoints only).
    pub metric: Option<f64>,
    /// The run that wrote it.
    pub run_id: String,
}

/// Whether a checkpoint is due after training step `global_step`.
pub fn due_after_step(config: &CheckpointConfig, global_step: u64) -> bool {
    config
        .every_steps
        .is_some_and(|n| global_step > 0 && global_step % n == 0)
}

/// Whether a checkpoint is due at the end of `epoch` (after its evaluation): every N-th epoch,
/// and the last one, so a finished run can be continued.
pub fn due_at_epoch_end(config: &CheckpointConfig, epoch: u32, last_epoch: bool) -> bool {
    match config.every_epochs {
        Some(n) => epoch % n == 0 || last_epoch,
        None => last_epoch,
    }
}

/// Whether a newer checkpoint of the same run holds the same training step: a step
/// checkpoint (`every_steps`) that fell on an epoch's last step, followed by that epoch's own
/// checkpoint, which adds the evaluation to it. The older adds nothing a resume could want.
fn superseded(checkpoint: &Saved, saved: &[Saved]) -> bool {
    saved.iter().any(|other| {
        other.step == checkpoint.step
            && other.sequence > checkpoint.sequence
            && other.run_id == checkpoint.run_id
    })
}

/// The checkpoints to delete once `saved` (newest included) exist: those superseded by a newer
/// one at the same step, then of the rest all but the newest `keep_last`, the best `keep_best`
/// by metric, and always the newest. Without either limit only superseded ones go.
pub fn to_delete(saved: &[Saved], config: &CheckpointConfig) -> Vec<String> {
    let (superseded, current): (Vec<&Saved>, Vec<&Saved>) =
        saved.iter().partition(|s| superseded(s, saved));
    let mut delete: Vec<String> = superseded.iter().map(|s| s.name.clone()).collect();
    if config.keep_last.is_none() && config.keep_best.is_none() {
        delete.sort();
        return delete;
    }
    let mut by_age: Vec<&Saved> = current;
    by_age.sort_by_key(|s| std::cmp::Reverse((s.step, s.sequence)));
    let mut keep: Vec<&str> = Vec::new();
    if let Some(newest) = by_age.first() {
        keep.push(&newest.name);
    }
    if let Some(n) = config.keep_last {
        keep.extend(by_age.iter().take(n).map(|s| s.name.as_str()));
    }
    if let Some(n) = config.keep_best {
        let mut ranked: Vec<&Saved> = by_age
            .iter()
            .copied()
            .filter(|s| s.metric.is_some())
            .collect();
        // Stable sort on the newest-first list: among equal values the newer wins.
        ranked.sort_by(|a, b| {
            let (a, b) = (a.metric.unwrap_or(f64::NAN), b.metric.unwrap_or(f64::NAN));
            let order = a.total_cmp(&b);
            if config.maximize {
                order.reverse()
            } else {
                order
            }
        });
        keep.extend(ranked.iter().take(n).map(|s| s.name.as_str()));
    }
    delete.extend(
        by_age
            .iter()
            .filter(|s| !keep.contains(&s.name.as_str()))
            .map(|s| s.name.clone()),
    );
    delete.sort();
    delete
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn config(every_epochs: Option<u32>, every_steps: Option<u64>) -> CheckpointConfig {
        CheckpointConfig {
            dir: PathBuf::from("ckpt"),
            dir_named: true,
            every_epochs,
            every_steps,
            keep_last: None,
            keep_best: None,
            monitor: None,
            maximize: false,
            background: true,
        }
    }

    fn saved(step: u64, metric: Option<f64>) -> Saved {
        Saved {
            name: format!("ckpt-{step}"),
            step,
            sequence: step,
            metric,
            run_id: String::new(),
        }
    }

    #[test]
    fn steps_and_epochs_due() {
        let c = config(Some(2), Some(100));
        let steps: Vec<u64> = (0..=450).filter(|&s| due_after_step(&c, s)).collect();
        assert_eq!(steps, [100, 200, 300, 400]);
        let epochs: Vec<u32> = (1..=5)
            .filter(|&e| due_at_epoch_end(&c, e, e == 5))
            .collect();
        assert_eq!(epochs, [2, 4, 5]);
        let only_steps = config(None, Some(10));
        assert!(!due_at_epoch_end(&only_steps, 1, false));
        assert!(
            due_at_epoch_end(&only_steps, 3, true),
            "the last epoch always saves"
        );
    }

    #[test]
    fn keep_last_keeps_the_newest() {
        let mut c = config(Some(1), None);
        c.keep_last = Some(2);
        let all: Vec<Saved> = [10, 20, 30, 40].iter().map(|&s| saved(s, None)).collect();
        assert_eq!(to_delete(&all, &c), ["ckpt-10", "ckpt-20"]);
    }

    #[test]
    fn keep_best_keeps_the_best_and_the_newest() {
        let mut c = config(Some(1), None);
        c.keep_best = Some(2);
        let all = vec![
            saved(10, Some(0.5)),
            saved(20, Some(0.2)),
            saved(30, Some(0.9)),
            saved(40, Some(0.3)),
            saved(50, Some(0.8)),
        ];
        // min: 0.2 (20) and 0.3 (40) are best; 50 is the newest.
        assert_eq!(to_delete(&all, &c), ["ckpt-10", "ckpt-30"]);
        c.maximize = true;
        // max: 0.9 (30) and 0.8 (50, also newest).
        assert_eq!(to_delete(&all, &c), ["ckpt-10", "ckpt-20", "ckpt-40"]);
    }

    #[test]
    fn keep_last_and_best_keep_the_union_and_mid_epoch_checkpoints_rank_nowhere() {
        let mut c = config(Some(1), Some(5));
        c.keep_last = Some(1);
        c.keep_best = Some(1);
        let all = vec![
            saved(10, Some(0.1)),
            saved(15, None),
            saved(20, Some(0.4)),
            saved(25, None),
        ];
        assert_eq!(to_delete(&all, &c), ["ckpt-15", "ckpt-20"]);
    }

    #[test]
    fn a_step_checkpoint_the_epochs_own_checkpoint_repeats_goes_and_takes_no_place() {
        let mut epoch_end = saved(20, Some(0.4));
        epoch_end.name = "ckpt-20.1".into();
        epoch_end.sequence = 21;
        let all = vec![saved(10, None), saved(20, None), epoch_end.clone()];
        let c = config(Some(1), Some(10));
        assert_eq!(to_delete(&all, &c), ["ckpt-20"]);
        let mut c = config(Some(1), Some(10));
        c.keep_last = Some(2);
        // ckpt-20 does not count towards keep_last: ckpt-10 stays.
        assert_eq!(to_delete(&all, &c), ["ckpt-20"]);
        // Another run's checkpoint at the same step is not superseded by this one's.
        let mut other_run = saved(20, None);
        other_run.run_id = "other".into();
        let all = vec![other_run, epoch_end];
        assert!(to_delete(&all, &config(Some(1), Some(10))).is_empty());
    }

    #[test]
    fn no_limits_keep_everything_and_ties_prefer_the_newer() {
        let c = config(Some(1), None);
        let all = vec![saved(1, None), saved(2, None)];
        assert!(to_delete(&all, &c).is_empty());
        let mut c = config(Some(1), None);
        c.keep_best = Some(1);
        c.keep_last = Some(1);
        let all = vec![
            saved(1, Some(0.5)),
            saved(2, Some(0.5)),
            saved(3, Some(0.7)),
        ];
        assert_eq!(to_delete(&all, &c), ["ckpt-1"]);
    }
}
