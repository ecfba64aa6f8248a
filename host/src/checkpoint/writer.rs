//! Writing checkpoints off the training thread.
//!
//! Taking a checkpoint has two parts. The snapshot (every tensor and state turned into bytes)
//! must happen between two steps, on the training thread. Writing those bytes durably — files,
//! hashes, flushes, renames, `latest`, removing what the policy no longer keeps — does not
//! touch the run, so it goes to a background thread while training continues. One write is in
//! flight at a time: the next snapshot, and the end of the run, wait for it first. That bounds
//! memory to one snapshot and makes the moments the run waits (and hooks fire) the same in
//! every run, whatever the disk's speed.

use std::path::PathBuf;
use std::thread::JoinHandle;

use super::{existing, policy, store};
use crate::error::{Error, Result};
use crate::manifest::CheckpointConfig;

/// One checkpoint to write: the snapshot's files and where they go.
pub struct Job {
    /// The checkpoint's directory name in `config.dir`.
    pub name: String,
    /// The files, by path relative to the checkpoint directory.
    pub files: Vec<(String, Vec<u8>)>,
    /// Where checkpoints go and which to keep.
    pub config: CheckpointConfig,
    /// The run writing it: retention considers this run's checkpoints only.
    pub run_id: String,
}

impl Job {
    /// Writes the checkpoint, points `latest` at it, then deletes the checkpoints the policy
    /// no longer keeps. Returns the checkpoint directory.
    pub fn run(self) -> Result<PathBuf> {
        let root = &self.config.dir;
        let dir = store::write(root, &self.name, &self.files)?;
        // Only this run's checkpoints are ranked: another run's are never deleted.
        let own: Vec<policy::Saved> = existing(root)?
            .into_iter()
            .filter(|s| s.run_id == self.run_id)
            .collect();
        for old in policy::to_delete(&own, &self.config) {
            store::delete(root, &old)?;
        }
        Ok(dir)
    }
}

/// The background writer: at most one [`Job`] in flight.
#[derive(Default)]
pub struct Writer {
    in_flight: Option<JoinHandle<Result<PathBuf>>>,
}

impl Writer {
    /// Starts writing `job` on its own thread, after the write in flight (if any) finished.
    /// Returns the directory of that earlier write.
    pub fn start(&mut self, job: Job) -> Result<Option<PathBuf>> {
        let earlier = self.wait()?;
        let handle = std::thread::Builder::new()
            .name("fe-checkpoint".into())
            .spawn(move || job.run())
            .map_err(|e| Error::Run(format!("cannot start the checkpoint writer: {e}")))?;
        self.in_flight = Some(handle);
        Ok(earlier)
    }

    /// Waits for the write in flight; returns its directory, or `None` when nothing was being
    /// written. A failed write returns its error (naming the file).
    pub fn wait(&mut self) -> Result<Option<PathBuf>> {
        let Some(handle) = self.in_flight.take() else {
            return Ok(None);
        };
        match handle.join() {
            Ok(written) => written.map(Some),
            Err(_) => Err(Error::Internal(
                "the checkpoint writer thread panicked".into(),
            )),
        }
    }
}

impl Drop for Writer {
    /// However the run ends, a write in flight finishes rather than being cut off by the
    /// process exiting (which would leave a temporary directory for the next run to remove).
    fn drop(&mut self) {
        if let Err(e) = self.wait() {
            eprintln!("warning: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: PathBuf) -> CheckpointConfig {
        CheckpointConfig {
            dir,
            dir_named: true,
            every_epochs: Some(1),
            every_steps: None,
            keep_last: Some(1),
            keep_best: None,
            monitor: None,
            maximize: false,
            background: true,
        }
    }

    fn job(config: &CheckpointConfig, name: &str, step: u64) -> Job {
        let info = super::super::CheckpointInfo {
            fe_host_version: "test".into(),
            step,
            sequence: step,
            cursor: super::super::Cursor::EpochEnd { epoch: 1 },
            monitor: None,
            created: String::new(),
            run_id: String::new(),
        };
        Job {
            name: name.into(),
            files: vec![("checkpoint.json".into(), serde_json::to_vec(&info).unwrap())],
            config: config.clone(),
            run_id: String::new(),
        }
    }

    #[test]
    fn writes_finish_in_order_and_the_policy_applies_after_each() {
        let root = std::env::temp_dir().join(format!("fe-writer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let config = config(root.clone());
        let mut writer = Writer::default();
        assert_eq!(writer.start(job(&config, "ckpt-1", 1)).unwrap(), None);
        assert_eq!(
            writer.start(job(&config, "ckpt-2", 2)).unwrap(),
            Some(root.join("ckpt-1"))
        );
        assert_eq!(writer.wait().unwrap(), Some(root.join("ckpt-2")));
        assert_eq!(writer.wait().unwrap(), None, "nothing left in flight");
        // keep_last = 1: the first was removed once the second was complete.
        assert_eq!(store::list(&root).unwrap(), ["ckpt-2"]);
        assert_eq!(store::latest(&root).unwrap(), Some(root.join("ckpt-2")));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_failed_write_reports_its_path_when_waited_for() {
        let file = std::env::temp_dir().join(format!("fe-writer-file-{}", std::process::id()));
        std::fs::write(&file, "not a directory").unwrap();
        let mut writer = Writer::default();
        writer
            .start(job(&config(file.clone()), "ckpt-1", 1))
            .unwrap();
        let err = writer.wait().unwrap_err().to_string();
        assert!(err.starts_with(&file.display().to_string()), "{err}");
        let _ = std::fs::remove_file(&file);
    }
}
