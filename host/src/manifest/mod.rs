//! The manifest: TOML → typed and validated, in two stages (serde, then checks that know what
//! the fields mean). Every error points at file, line, column and key.

pub mod component;
pub mod location;
pub mod schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fe_plugin_api::Mode;
use toml::{Table, Value};

pub use component::{ComponentSpec, Problem};
pub use location::KeyPath;
use schema::RawManifest;

use crate::error::{Error, Result};
use crate::schedule::{parse_scheduled, signature_epochs, validate_ds_id, Schedule, Scheduled};

/// A validated manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The file it was read from.
    pub file: PathBuf,
    /// Its text (kept to point at lines in later errors).
    pub source: String,
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
    /// The reader: a built-in (`idx`) or a dataset plugin's name.
    pub kind: String,
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
        let source = std::fs::read_to_string(file).map_err(|e| {
            Error::Manifest(format!("{}: cannot read the manifest: {e}", file.display()))
        })?;
        Self::parse(file, source)
    }

    /// Validates manifest text as if read from `file` (relative paths resolve against its
    /// directory).
    pub fn parse(file: &Path, source: String) -> Result<Self> {
        let raw = parse_raw(file, &source)?;
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut problems = Vec::new();
        let manifest = validate(file, &dir, &source, raw, &mut problems);
        match (problems.is_empty(), manifest) {
            (true, Some(manifest)) => Ok(manifest),
            _ => Err(Error::Manifest(
                problems
                    .iter()
                    .map(|p| locate_problem(file, &source, p))
                    .collect::<Vec<_>>()
                    .join("\n"),
            )),
        }
    }

    /// An error pointing at `path` in this manifest.
    pub fn error_at(&self, path: &KeyPath, message: impl Into<String>) -> Error {
        Error::Manifest(locate_problem(
            &self.file,
            &self.source,
            &Problem::new(path.clone(), message),
        ))
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

fn toml_error(file: &Path, source: &str, error: &toml::de::Error, path: &str) -> Error {
    let position = error
        .span()
        .map(|span| location::line_col(source, span.start))
        .map(|(line, column)| format!(":{line}:{column}"))
        .unwrap_or_default();
    let key = if path.is_empty() || path == "." {
        String::new()
    } else {
        format!("{path}: ")
    };
    let message = error.message().trim_end().replace('\n', "; ");
    Error::Manifest(format!("{}{position}: {key}{message}", file.display()))
}

fn validate(
    file: &Path,
    dir: &Path,
    source: &str,
    raw: RawManifest,
    problems: &mut Vec<Problem>,
) -> Option<Manifest> {
    let run = &raw.run;
    if run.epochs == 0 {
        problems.push(Problem::new(
            KeyPath::root("run").key("epochs"),
            "must be at least 1",
        ));
    }
    let batch_path = KeyPath::root("pipeline").key("batch_size");
    let batch_size = match parse_scheduled(
        raw.pipeline.batch_size.clone(),
        &batch_path,
        |_| false,
        |value, at| match value.as_integer() {
            Some(n) if n >= 1 && n <= u32::MAX as i64 => Ok(n as u32),
            _ => Err(Problem::new(
                at,
                "must be a whole number of samples, at least 1",
            )),
        },
    ) {
        Ok(batch_size) => batch_size,
        Err(problem) => {
            problems.push(problem);
            Scheduled::fixed(1)
        }
    };
    if !batch_size.covers(run.epochs) {
        problems.push(Problem::new(
            batch_path.clone(),
            "every epoch needs a batch size: start the schedule at epoch 1 and leave out \"none\"",
        ));
    }
    for (field, steps) in [
        ("train_steps_per_epoch", run.train_steps_per_epoch),
        ("eval_steps_per_epoch", run.eval_steps_per_epoch),
    ] {
        if steps == Some(0) {
            problems.push(Problem::new(
                KeyPath::root("run").key(field),
                "must be at least 1",
            ));
        }
    }
    let mut components = |tables: Vec<Table>, path: KeyPath, name_key: &str, io: [&str; 2]| {
        tables
            .into_iter()
            .enumerate()
            .filter_map(|(i, table)| {
                let parsed = parse_scheduled(
                    Value::Table(table),
                    &path.index(i),
                    |t| t.contains_key(name_key),
                    |value, at| match value {
                        Value::Table(table) => ComponentSpec::parse(at, table, name_key, io),
                        _ => Err(Problem::new(
                            at,
                            format!("must be a table with `{name_key}`, or \"none\""),
                        )),
                    },
                );
                match parsed {
                    Ok(spec) => Some(spec),
                    Err(problem) => {
                        problems.push(problem);
                        None
                    }
                }
            })
            .collect::<Vec<_>>()
    };
    let network = KeyPath::root("network");
    let ops = components(
        raw.network.ops,
        network.key("ops"),
        "op",
        ["inputs", "outputs"],
    );
    let postprocessing = components(
        raw.network.postprocessing,
        network.key("postprocessing"),
        "op",
        ["inputs", "outputs"],
    );
    let slicers = components(
        raw.network.slicers,
        network.key("slicers"),
        "slicer",
        ["slice", "unslice"],
    );
    let traces = components(
        raw.traces,
        KeyPath::root("traces"),
        "trace",
        ["inputs", "outputs"],
    );
    let pipeline_ops = components(
        raw.pipeline.ops,
        KeyPath::root("pipeline").key("ops"),
        "op",
        ["inputs", "outputs"],
    );
    let models = raw
        .models
        .into_iter()
        .enumerate()
        .filter_map(
            |(i, table)| match model_config(KeyPath::root("models").index(i), table) {
                Ok(model) => Some(model),
                Err(problem) => {
                    problems.push(problem);
                    None
                }
            },
        )
        .collect::<Vec<ModelConfig>>();
    check_model_names(&models, problems);
    let data = datasets(raw.pipeline.data, problems);
    let plugins = PluginsConfig {
        paths: raw.plugins.paths.iter().map(|p| dir.join(p)).collect(),
        sha256: raw
            .plugins
            .sha256
            .into_iter()
            .map(|(name, hash)| (name, hash.to_ascii_lowercase()))
            .collect(),
    };
    for (name, hash) in &plugins.sha256 {
        if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            problems.push(Problem::new(
                KeyPath::root("plugins").key("sha256").key(name),
                "must be 64 hexadecimal digits",
            ));
        }
    }
    Some(Manifest {
        file: file.to_path_buf(),
        source: source.to_owned(),
        run: RunConfig {
            epochs: raw.run.epochs,
            seed: raw.run.seed,
            device: raw.run.device,
            threads: raw.run.threads.filter(|&t| t > 0),
            log_steps: raw.run.log_steps,
            train_steps_per_epoch: raw.run.train_steps_per_epoch,
            eval_steps_per_epoch: raw.run.eval_steps_per_epoch,
            warmup: raw.run.warmup,
        },
        plugins,
        pipeline: PipelineConfig {
            batch_size,
            shuffle: raw.pipeline.shuffle,
            drop_last: raw.pipeline.drop_last,
            workers: raw.pipeline.workers.filter(|&w| w > 0),
            prefetch: raw.pipeline.prefetch.max(1),
            data,
            ops: pipeline_ops,
        },
        models,
        ops,
        postprocessing,
        slicers,
        traces,
    })
}

fn model_config(path: KeyPath, mut table: Table) -> std::result::Result<ModelConfig, Problem> {
    let mut string = |key: &str, required: bool| match table.remove(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
        Some(_) => Err(Problem::new(path.key(key), "must be a non-empty string")),
        None if required => Err(Problem::new(path.clone(), format!("missing `{key}`"))),
        None => Ok(None),
    };
    let name = string("name", true)?.unwrap_or_default();
    let architecture = string("architecture", true)?.unwrap_or_default();
    let optimizer = match table.remove("optimizer") {
        None => None,
        Some(value) => Some(parse_scheduled(
            value,
            &path.key("optimizer"),
            |t| t.contains_key("type"),
            |value, at| match value {
                Value::String(kind) => {
                    let mut t = Table::new();
                    t.insert("type".into(), Value::String(kind));
                    Ok(t)
                }
                Value::Table(t) => Ok(t),
                _ => Err(Problem::new(
                    at,
                    "must be a name (\"adam\") or a table ({ type = \"adam\", lr = 1e-3 })",
                )),
            },
        )?),
    };
    let mut flag = |key: &str, default: bool| match table.remove(key) {
        None => Ok(default),
        Some(Value::Boolean(b)) => Ok(b),
        Some(_) => Err(Problem::new(path.key(key), "must be true or false")),
    };
    let trainable = flag("trainable", true)?;
    let mixed_precision = flag("mixed_precision", false)?;
    Ok(ModelConfig {
        path,
        name,
        architecture,
        optimizer,
        trainable,
        mixed_precision,
        config: table,
    })
}

fn check_model_names(models: &[ModelConfig], problems: &mut Vec<Problem>) {
    for (i, model) in models.iter().enumerate() {
        // Names become file names in checkpoints; case-insensitive file systems would merge
        // `Gen` and `gen`.
        if let Some(first) = models[..i]
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(&model.name))
        {
            problems.push(Problem::new(
                model.path.key("name"),
                format!(
                    "model name `{}` is already used by {} (names must differ ignoring case)",
                    model.name, first.path
                ),
            ));
        }
    }
}

fn datasets(data: BTreeMap<String, Value>, problems: &mut Vec<Problem>) -> Vec<DatasetEntry> {
    let root = KeyPath::root("pipeline").key("data");
    let mut out: Vec<DatasetEntry> = Vec::new();
    for (mode_name, value) in data {
        let path = root.key(&mode_name);
        let mode: Mode = match mode_name.parse() {
            Ok(mode) => mode,
            Err(e) => {
                problems.push(Problem::new(path, e));
                continue;
            }
        };
        let entries: Vec<(KeyPath, Table, bool)> = match value {
            Value::Table(table) => vec![(path.clone(), table, false)],
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .filter_map(|(i, item)| match item {
                    Value::Table(table) => Some((path.index(i), table, true)),
                    _ => {
                        problems.push(Problem::new(path.index(i), "must be a table"));
                        None
                    }
                })
                .collect(),
            _ => {
                problems.push(Problem::new(path, "must be a table or an array of tables"));
                continue;
            }
        };
        for (path, mut table, several) in entries {
            let ds_id = match table.remove("ds_id") {
                Some(Value::String(id)) => id,
                None if !several => String::new(),
                None => {
                    problems.push(Problem::new(
                        path.clone(),
                        "each dataset of a mode with several needs a `ds_id`",
                    ));
                    continue;
                }
                Some(_) => {
                    problems.push(Problem::new(path.key("ds_id"), "must be a string"));
                    continue;
                }
            };
            if !ds_id.is_empty() {
                if let Err(e) = validate_ds_id(&ds_id) {
                    problems.push(Problem::new(path.key("ds_id"), e));
                }
            }
            if out.iter().any(|d| d.mode == mode && d.ds_id == ds_id) {
                problems.push(Problem::new(
                    path.key("ds_id"),
                    format!("{mode} already has a dataset `{ds_id}`"),
                ));
                continue;
            }
            let parsed = parse_scheduled(
                Value::Table(table),
                &path,
                |t| t.contains_key("type"),
                |value, at| {
                    let Value::Table(mut table) = value else {
                        return Err(Problem::new(
                            at,
                            "must be a dataset table (with `type`), or \"none\"",
                        ));
                    };
                    match table.remove("type") {
                        Some(Value::String(kind)) => Ok(DatasetConfig {
                            path: at,
                            kind,
                            config: table,
                        }),
                        _ => Err(Problem::new(
                            at,
                            "missing `type`: the dataset reader (e.g. \"idx\")",
                        )),
                    }
                },
            );
            match parsed {
                Ok(datasets) => out.push(DatasetEntry {
                    path,
                    mode,
                    ds_id,
                    datasets,
                }),
                Err(problem) => problems.push(problem),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[pipeline]
batch_size = 4
[pipeline.data.train]
type = "idx"
files = { x = "x.idx" }

[[models]]
name = "net"
architecture = "LeNet"
optimizer = "adam"

[[network.ops]]
op = "ModelOp"
model = "net"
inputs = "x"
outputs = "y_pred"
"#;

    fn parse(text: &str) -> Result<Manifest> {
        Manifest::parse(Path::new("m.toml"), text.to_owned())
    }

    fn message(text: &str) -> String {
        match parse(text) {
            Err(Error::Manifest(m)) => m,
            other => panic!("expected a manifest error, got {other:?}"),
        }
    }

    #[test]
    fn minimal_manifest_validates() {
        let m = parse(MINIMAL).unwrap();
        assert_eq!(m.run.epochs, 1);
        assert_eq!(
            m.models[0].optimizer.as_ref().unwrap().values[0]["type"].as_str(),
            Some("adam")
        );
        assert_eq!(m.ops[0].values[0].config["model"].as_str(), Some("net"));
        assert_eq!(m.pipeline.data[0].mode, Mode::Train);
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let msg = message("[pipeline]\nbatch_size = = 4\n");
        assert!(msg.starts_with("m.toml:2:"), "{msg}");
    }

    #[test]
    fn unknown_key_names_key_line_and_column() {
        let msg = message(&format!("[run]\nepoch = 2\n{MINIMAL}"));
        assert!(
            msg.starts_with("m.toml:2:1: run.epoch: unknown field `epoch`"),
            "{msg}"
        );
    }

    #[test]
    fn wrong_type_names_the_key() {
        let msg = message(&format!("[run]\nepochs = \"two\"\n{MINIMAL}"));
        assert!(
            msg.starts_with("m.toml:2:10: run.epochs: invalid type"),
            "{msg}"
        );
    }

    #[test]
    fn validation_errors_point_at_the_key() {
        let bad = MINIMAL.replace("inputs = \"x\"", "inputs = \"x;y\"");
        let msg = message(&bad);
        assert!(
            msg.contains("network.ops[0].inputs[0]: key `x;y` contains `;`"),
            "{msg}"
        );
        assert!(msg.starts_with("m.toml:16:1: "), "{msg}");
    }

    #[test]
    fn duplicate_model_names_ignoring_case() {
        let text = format!("{MINIMAL}\n[[models]]\nname = \"NET\"\narchitecture = \"MLP\"\n");
        let msg = message(&text);
        assert!(
            msg.contains("models[1].name: model name `NET` is already used by models[0]"),
            "{msg}"
        );
    }

    #[test]
    fn scheduled_components_and_batch_sizes_are_checked() {
        let scheduled = MINIMAL.replace("batch_size = 4", "batch_size = { repeat = [4, 8] }");
        let m = parse(&scheduled).unwrap();
        assert_eq!(
            (m.pipeline.batch_size.at(1), m.pipeline.batch_size.at(2)),
            (Some(&4), Some(&8))
        );
        let late = MINIMAL.replace("batch_size = 4", "batch_size = { epoch = { 2 = 8 } }");
        let msg = message(&late);
        assert!(
            msg.contains("pipeline.batch_size: every epoch needs a batch size"),
            "{msg}"
        );
        let skipping = format!(
            "[run]\nepochs = 2\n{}",
            MINIMAL.replace("batch_size = 4", "batch_size = { repeat = [4, \"none\"] }")
        );
        assert!(message(&skipping).contains("every epoch needs a batch size"));
    }
}
