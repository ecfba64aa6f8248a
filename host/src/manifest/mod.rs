//! The manifest: TOML → typed and validated, in two stages (serde, then checks that know what
//! the fields mean). Every error points at file, line, column and key.

pub mod component;
pub mod location;
pub mod overrides;
pub mod reference;
pub mod schema;
mod syntax;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fe_plugin_api::Mode;
use toml::Table;

pub use crate::key_path::{KeyPath, Problem};
pub use component::ComponentSpec;
pub use overrides::Override;
use schema::RawManifest;
pub use schema::Resume;

use crate::error::{Error, Result};
use crate::schedule::{signature_epochs, Schedule, Scheduled};

/// A validated manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The file it was read from.
    pub file: PathBuf,
    /// Its text (kept to point at lines in later errors).
    pub source: String,
    /// The `--set` overrides applied on top of the text, each with the key path it set.
    pub overrides: Vec<(Override, KeyPath)>,
    /// `[run]`
    pub run: RunConfig,
    /// `[plugins]`
    pub plugins: PluginsConfig,
    /// `[pipeline]`
    pub pipeline: PipelineConfig,
    /// `[[models]]`
    pub models: Vec<ModelConfig>,
    /// `[[network.ops]]`
    pub ops: Vec<Scheduled<ComponentSpec>>,
    /// `[[network.postprocessing]]`
    pub postprocessing: Vec<Scheduled<ComponentSpec>>,
    /// `[[network.slicers]]`
    pub slicers: Vec<Scheduled<ComponentSpec>>,
    /// `[[traces]]`
    pub traces: Vec<Scheduled<ComponentSpec>>,
    /// `[checkpoint]`, when the manifest asks for checkpoints.
    pub checkpoint: Option<CheckpointConfig>,
    /// Where every file a trace writes goes instead of the paths the manifest names (a smoke
    /// run's temporary directory); `None`: where the manifest says.
    pub outputs_into: Option<PathBuf>,
    /// The run's version directory and the root it versions (see [`crate::run_dir`]): every
    /// output named under the root is written at the same place under the version instead.
    pub outputs_moved: Option<(PathBuf, PathBuf)>,
}

/// `[checkpoint]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointConfig {
    /// The checkpoint root, resolved against the manifest's directory.
    pub dir: PathBuf,
    /// Whether the manifest names `dir`: an unnamed one is `checkpoints` wherever the run
    /// writes (its version directory in a versioned run), like a run without the table.
    pub dir_named: bool,
    /// Save at the end of every N-th epoch (and of the last).
    pub every_epochs: Option<u32>,
    /// Save after every N-th training step.
    pub every_steps: Option<u64>,
    /// Keep the N newest.
    pub keep_last: Option<usize>,
    /// Keep the N best by `monitor`.
    pub keep_best: Option<usize>,
    /// What `keep_best` ranks by.
    pub monitor: Option<String>,
    /// Whether larger `monitor` values are better.
    pub maximize: bool,
    /// Whether checkpoints are written on a background thread while training continues.
    pub background: bool,
}

/// `[run]`, validated.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Training epochs.
    pub epochs: u32,
    /// Run seed.
    pub seed: u64,
    /// Device request (`auto` when absent).
    pub device: Option<String>,
    /// libtorch intra-op threads (`None`: one per core).
    pub threads: Option<u32>,
    /// Training log interval in steps (0: off).
    pub log_steps: u64,
    /// Fixed training steps per epoch.
    pub train_steps_per_epoch: Option<u64>,
    /// Fixed evaluation steps per epoch.
    pub eval_steps_per_epoch: Option<u64>,
    /// Run the warm-up check before training.
    pub warmup: bool,
    /// Deterministic algorithms.
    pub deterministic: bool,
    /// cuDNN autotuning.
    pub cudnn_benchmark: bool,
    /// Evaluation batches after which progress is printed.
    pub eval_log_steps: Vec<u64>,
    /// Where the run log and the end-of-run plot go.
    pub log_dir: Option<PathBuf>,
    /// How evaluation losses are averaged.
    pub eval_loss: schema::EvalLoss,
    /// Network keys logged with the losses.
    pub monitor_names: Vec<String>,
    /// How long a data-parallel rank waits for the others.
    pub process_group_timeout: std::time::Duration,
    /// Whether the ranks compare every collective before issuing it.
    pub check_collectives: bool,
    /// Whether the run continues from its newest checkpoint by itself.
    pub resume: schema::Resume,
}

/// `[plugins]`, with paths resolved against the manifest's directory.
#[derive(Debug, Clone, Default)]
pub struct PluginsConfig {
    /// Files or directories to search first.
    pub paths: Vec<PathBuf>,
    /// Pinned sha256 by file name (lowercase hex).
    pub sha256: BTreeMap<String, String>,
}

/// `[pipeline]`, validated.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Samples per batch.
    pub batch_size: Scheduled<u32>,
    /// Shuffle training data.
    pub shuffle: bool,
    /// Drop incomplete last batches.
    pub drop_last: bool,
    /// Worker threads (`None`: one per core).
    pub workers: Option<usize>,
    /// Batches prepared ahead, per worker.
    pub prefetch: usize,
    /// Page-locked batches on CUDA (`None`: yes on CUDA).
    pub pin_memory: Option<bool>,
    /// `[pipeline] cache`: the directory of the pipeline cache (`None`: no cache).
    pub cache: Option<PathBuf>,
    /// Datasets, in mode then ds_id order.
    pub data: Vec<DatasetEntry>,
    /// Per-sample ops.
    pub ops: Vec<Scheduled<ComponentSpec>>,
}

/// The dataset (or datasets, by epoch) of one mode and dataset id.
#[derive(Debug, Clone)]
pub struct DatasetEntry {
    /// Where it is declared.
    pub path: KeyPath,
    /// The mode it feeds.
    pub mode: Mode,
    /// Its dataset id (`""` when the mode has one dataset).
    pub ds_id: String,
    /// The dataset in force each epoch.
    pub datasets: Scheduled<DatasetConfig>,
}

/// One dataset.
#[derive(Debug, Clone)]
pub struct DatasetConfig {
    /// Where it is declared.
    pub path: KeyPath,
    /// The reader: a built-in (`idx`) or a dataset plugin's name; empty with `split_from`.
    pub kind: String,
    /// `split_from = "train"` (or `"train:ds_id"`): the dataset is samples taken out of that
    /// one; the rest of the table says which (see `pipeline::split`).
    pub split_from: Option<String>,
    /// The rest of the table (reader configuration).
    pub config: Table,
}

/// `[[models]]`, validated.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Where it is declared.
    pub path: KeyPath,
    /// Unique (case-insensitively) model name.
    pub name: String,
    /// The model component (`architecture = "LeNet"`).
    pub architecture: String,
    /// Optimizer settings by epoch, if the model is trained.
    pub optimizer: Option<Scheduled<Table>>,
    /// `false` freezes the model's parameters.
    pub trainable: bool,
    /// Run under autocast (bfloat16 on the CPU, float16 with loss scaling on CUDA).
    pub mixed_precision: bool,
    /// The architecture's own configuration.
    pub config: Table,
}

impl Manifest {
    /// Reads and validates the manifest at `file`.
    pub fn load(file: &Path) -> Result<Self> {
        Self::load_with(file, &[])
    }

    /// Reads the manifest at `file`, applies `--set` overrides and validates the result.
    pub fn load_with(file: &Path, overrides: &[Override]) -> Result<Self> {
        let source = std::fs::read_to_string(file).map_err(|e| {
            Error::Manifest(format!("{}: cannot read the manifest: {e}", file.display()))
        })?;
        Self::parse_with(file, source, overrides)
    }

    /// Validates manifest text as if read from `file` (relative paths resolve against its
    /// directory).
    pub fn parse(file: &Path, source: String) -> Result<Self> {
        Self::parse_with(file, source, &[])
    }

    /// Validates manifest text with `--set` overrides applied on top.
    pub fn parse_with(file: &Path, source: String, overrides: &[Override]) -> Result<Self> {
        let (raw, applied) = if overrides.is_empty() {
            (parse_raw(file, &source)?, Vec::new())
        } else {
            parse_overridden(file, &source, overrides)?
        };
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut problems = Vec::new();
        let manifest = validate::validate(file, &dir, &source, raw, &mut problems);
        let locate = |p: &Problem| report(file, &source, &applied, p);
        match (problems.is_empty(), manifest) {
            (true, Some(mut manifest)) => {
                manifest.overrides = applied;
                Ok(manifest)
            }
            _ => Err(Error::Manifest(
                problems.iter().map(locate).collect::<Vec<_>>().join("\n"),
            )),
        }
    }

    /// The manifest as this run reads it: the file's text, or with `--set` overrides the
    /// document they produced. Checkpoints keep this, so a resume compares overrides like edits.
    pub fn effective_text(&self) -> String {
        if self.overrides.is_empty() {
            return self.source.clone();
        }
        let mut document: Table = match self.source.parse() {
            Ok(document) => document,
            Err(_) => return self.source.clone(),
        };
        for (o, _) in &self.overrides {
            // Applied once already while loading, so it applies again.
            let _ = o.apply(&mut document);
        }
        toml::to_string(&document).unwrap_or_else(|_| self.source.clone())
    }

    /// An error pointing at `path` in this manifest.
    pub fn error_at(&self, path: &KeyPath, message: impl Into<String>) -> Error {
        let problem = Problem::new(path.clone(), message);
        Error::Manifest(report(&self.file, &self.source, &self.overrides, &problem))
    }

    /// Every schedule of the manifest (fixed items included), in a stable order: network ops,
    /// post-processing, slicers, traces, pipeline ops, batch size, datasets, optimizers.
    pub fn schedules(&self) -> Vec<&Schedule> {
        let components = [
            &self.ops,
            &self.postprocessing,
            &self.slicers,
            &self.traces,
            &self.pipeline.ops,
        ];
        let mut all: Vec<&Schedule> = components
            .into_iter()
            .flat_map(|items| items.iter().map(|s| &s.schedule))
            .collect();
        all.push(&self.pipeline.batch_size.schedule);
        all.extend(self.pipeline.data.iter().map(|d| &d.datasets.schedule));
        all.extend(
            self.models
                .iter()
                .filter_map(|m| m.optimizer.as_ref().map(|o| &o.schedule)),
        );
        all
    }

    /// FastEstimator's signature epochs over every schedule of the manifest: the first epoch
    /// of each distinct combination of values in force. Checks and warm-up visit these.
    pub fn signature_epochs(&self) -> Vec<u32> {
        let schedules = self.schedules();
        signature_epochs(self.run.epochs, |epoch| {
            schedules
                .iter()
                .map(|s| s.index_at(epoch))
                .collect::<Vec<_>>()
        })
    }

    /// The directory relative paths are resolved against.
    pub fn dir(&self) -> PathBuf {
        self.file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// Where a trace writes the output `configured` names (a file or directory, relative to
    /// the manifest): there, or with [`Manifest::outputs_into`] set, at the same relative
    /// place inside that directory.
    pub fn output_path(&self, configured: &Path) -> PathBuf {
        let named = normalized(&self.dir().join(configured));
        match (&self.outputs_into, &self.outputs_moved) {
            (Some(root), _) => root.join(redirected(configured)),
            (None, Some((from, to))) => crate::run_dir::relocate(&named, from, to).unwrap_or(named),
            (None, None) => named,
        }
    }

    /// Makes `version` (a directory of the versioned root `root`) where this run writes: the
    /// run log, and every output and the checkpoint folder named under `root`, move into it.
    pub fn move_outputs(&mut self, root: &Path, version: &Path) {
        if let Some(checkpoint) = &mut self.checkpoint {
            if !checkpoint.dir_named {
                checkpoint.dir = version.join("checkpoints");
            } else if let Some(moved) = crate::run_dir::relocate(&checkpoint.dir, root, version) {
                checkpoint.dir = moved;
            }
        }
        self.run.log_dir = Some(version.to_path_buf());
        self.outputs_moved = Some((root.to_path_buf(), version.to_path_buf()));
    }
}

/// `path` with `.` dropped and each `..` taking away the name before it, so that outputs are
/// named as people would write them (`runs/lenet`, not `examples/../runs/lenet`). Lexical:
/// a `..` after a symbolic link means the same place only when the link is not followed,
/// which is how manifests' relative paths are meant. A leading `..` stays.
pub fn normalized(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// `configured` as a relative path that stays inside the directory it is joined to: `..`
/// becomes `up`, a root or prefix is dropped.
fn redirected(configured: &Path) -> PathBuf {
    use std::path::Component;
    configured
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_os_string()),
            Component::ParentDir => Some("up".into()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod output_tests {
    use super::*;

    #[test]
    fn redirected_outputs_stay_inside_the_redirect() {
        assert_eq!(
            redirected(Path::new("../models/x")),
            Path::new("up/models/x")
        );
        assert_eq!(
            redirected(Path::new("/abs/log.csv")),
            Path::new("abs/log.csv")
        );
        assert_eq!(redirected(Path::new("./tb")), Path::new("tb"));
    }

    #[test]
    fn output_paths_are_named_as_people_write_them() {
        let n = |p: &str| normalized(Path::new(p));
        assert_eq!(n("examples/../runs/lenet"), Path::new("runs/lenet"));
        assert_eq!(n("./examples/./x/../y"), Path::new("examples/y"));
        assert_eq!(n("../data/x"), Path::new("../data/x"));
        assert_eq!(n("a/../../b"), Path::new("../b"));
        assert_eq!(n("/work/x/../y"), Path::new("/work/y"));
        assert_eq!(n("/.."), Path::new("/"));
        assert_eq!(n("a/.."), Path::new("."));
    }
}

/// A problem as the user meets it: against the `--set` that wrote the value, else against the
/// file (see [`locate_problem`]).
fn report(file: &Path, source: &str, applied: &[(Override, KeyPath)], problem: &Problem) -> String {
    match overrides::covering(applied, &problem.path) {
        Some(o) => format!("--set {}: {}: {}", o.spec, problem.path, problem.message),
        None => locate_problem(file, source, problem),
    }
}

/// `file:line:col: key: message`, or `file: key: message` when the key cannot be found.
pub fn locate_problem(file: &Path, source: &str, problem: &Problem) -> String {
    let key = if problem.path.0.is_empty() {
        String::new()
    } else {
        format!("{}: ", problem.path)
    };
    match location::locate(source, &problem.path) {
        Some((line, column)) => format!(
            "{}:{line}:{column}: {key}{}",
            file.display(),
            problem.message
        ),
        None => format!("{}: {key}{}", file.display(), problem.message),
    }
}

fn parse_raw(file: &Path, source: &str) -> Result<RawManifest> {
    let deserializer =
        toml::Deserializer::parse(source).map_err(|e| toml_error(file, source, &e, ""))?;
    // Tracking the key path lets schema errors name the key as well as the line.
    serde_path_to_error::deserialize(deserializer)
        .map_err(|e| toml_error(file, source, e.inner(), &e.path().to_string()))
}

/// The file's document with `overrides` applied, deserialized; returns where each landed.
fn parse_overridden(
    file: &Path,
    source: &str,
    overrides: &[Override],
) -> Result<(RawManifest, Vec<(Override, KeyPath)>)> {
    let mut document: Table = source
        .parse()
        .map_err(|e| toml_error(file, source, &e, ""))?;
    let mut applied = Vec::with_capacity(overrides.len());
    for o in overrides {
        let at = o.apply(&mut document).map_err(Error::Usage)?;
        applied.push((o.clone(), at));
    }
    let raw = serde_path_to_error::deserialize(toml::Value::Table(document)).map_err(|e| {
        let path = KeyPath::default().join_dotted(&e.path().to_string());
        let problem = Problem::new(path, e.inner().message().trim_end().replace('\n', "; "));
        Error::Manifest(report(file, source, &applied, &problem))
    })?;
    Ok((raw, applied))
}

fn toml_error(file: &Path, source: &str, error: &toml::de::Error, path: &str) -> Error {
    let position = error
        .span()
        .map(|span| location::line_col(source, span.start))
        .map(|(line, column)| format!(":{line}:{column}"))
        .unwrap_or_default();
    let key = if path.is_empty() || path == "." {
        // A syntax error has no key path: name the key written on the line.
        error
            .span()
            .and_then(|span| location::key_at(source, span.start))
            .map(|key| format!("{key}: "))
            .unwrap_or_default()
    } else {
        format!("{path}: ")
    };
    let message = error.message().trim_end().replace('\n', "; ");
    let message = match (path.is_empty() || path == ".", error.span()) {
        (true, Some(span)) => syntax::explain(&message, source, span.start),
        _ => syntax::explain_schema(&message),
    };
    Error::Manifest(format!("{}{position}: {key}{message}", file.display()))
}

#[cfg(test)]
mod tests;
