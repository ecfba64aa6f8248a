//! Raw TOML → validated [`Manifest`]: every problem found is collected with its key path, so
//! one run of `fe-host` reports them all.

use std::collections::BTreeMap;
use std::path::Path;

use fe_plugin_api::Mode;
use toml::{Table, Value};

use super::schema::RawManifest;
use super::*;
use crate::schedule::{parse_scheduled, validate_ds_id, Scheduled};

pub(super) fn validate(
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
    let checkpoint = checkpoint_config(raw.checkpoint, dir, problems);
    Some(Manifest {
        file: file.to_path_buf(),
        source: source.to_owned(),
        overrides: Vec::new(),
        run: RunConfig {
            epochs: raw.run.epochs,
            seed: raw.run.seed,
            device: raw.run.device,
            threads: raw.run.threads.filter(|&t| t > 0),
            log_steps: raw.run.log_steps,
            train_steps_per_epoch: raw.run.train_steps_per_epoch,
            eval_steps_per_epoch: raw.run.eval_steps_per_epoch,
            warmup: raw.run.warmup,
            deterministic: raw.run.deterministic,
            cudnn_benchmark: raw.run.cudnn_benchmark,
            eval_log_steps: raw.run.eval_log_steps.clone(),
            log_dir: raw
                .run
                .log_dir
                .as_ref()
                .map(|d| super::normalized(&dir.join(d))),
            eval_loss: raw.run.eval_loss,
            monitor_names: raw.run.monitor_names.clone(),
            process_group_timeout: process_group_timeout(raw.run.process_group_timeout, problems),
            check_collectives: raw.run.check_collectives,
            resume: raw.run.resume,
        },
        plugins,
        pipeline: PipelineConfig {
            batch_size,
            shuffle: raw.pipeline.shuffle,
            drop_last: raw.pipeline.drop_last,
            workers: raw.pipeline.workers.filter(|&w| w > 0),
            prefetch: raw.pipeline.prefetch.max(1),
            pin_memory: raw.pipeline.pin_memory,
            cache: cache_dir(raw.pipeline.cache.as_ref(), dir, problems),
            data,
            ops: pipeline_ops,
        },
        models,
        ops,
        postprocessing,
        slicers,
        traces,
        checkpoint,
        outputs_into: None,
        outputs_moved: None,
    })
}

fn checkpoint_config(
    raw: Option<super::schema::RawCheckpoint>,
    dir: &Path,
    problems: &mut Vec<Problem>,
) -> Option<CheckpointConfig> {
    let raw = raw?;
    let path = KeyPath::root("checkpoint");
    let mut positive = |key: &str, value: Option<u64>| {
        if value == Some(0) {
            problems.push(Problem::new(path.key(key), "must be at least 1"));
        }
    };
    positive("every_epochs", raw.every_epochs.map(u64::from));
    positive("every_steps", raw.every_steps);
    positive("keep_last", raw.keep_last.map(u64::from));
    positive("keep_best", raw.keep_best.map(u64::from));
    if raw.every_epochs.is_none() && raw.every_steps.is_none() {
        problems.push(Problem::new(
            path.clone(),
            "say when to save: `every_epochs = N` and/or `every_steps = N`",
        ));
    }
    let maximize = match raw.best_mode.as_deref() {
        None | Some("min") => false,
        Some("max") => true,
        Some(other) => {
            problems.push(Problem::new(
                path.key("best_mode"),
                format!("must be \"min\" or \"max\", not \"{other}\""),
            ));
            false
        }
    };
    if raw.keep_best.is_some() && raw.monitor.is_none() {
        problems.push(Problem::new(
            path.key("keep_best"),
            "needs `monitor`: the logged evaluation value to rank checkpoints by",
        ));
    }
    Some(CheckpointConfig {
        // Absolute, so traces are told where checkpoints are whatever their working directory.
        dir: super::normalized(
            &std::path::absolute(dir.join(raw.dir.as_deref().unwrap_or("checkpoints")))
                .unwrap_or_else(|_| dir.join(raw.dir.as_deref().unwrap_or("checkpoints"))),
        ),
        dir_named: raw.dir.is_some(),
        every_epochs: raw.every_epochs,
        every_steps: raw.every_steps,
        keep_last: raw.keep_last.map(|n| n as usize),
        keep_best: raw.keep_best.map(|n| n as usize),
        monitor: raw.monitor,
        maximize,
        background: raw.background.unwrap_or(true),
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
                |t| t.contains_key("type") || t.contains_key("split_from"),
                |value, at| {
                    let Value::Table(mut table) = value else {
                        return Err(Problem::new(
                            at,
                            "must be a dataset table (with `type`), or \"none\"",
                        ));
                    };
                    match (table.remove("type"), table.remove("split_from")) {
                        (Some(Value::String(kind)), None) => Ok(DatasetConfig {
                            path: at,
                            kind,
                            split_from: None,
                            config: table,
                        }),
                        (None, Some(Value::String(from))) => Ok(DatasetConfig {
                            path: at,
                            kind: String::new(),
                            split_from: Some(from),
                            config: table,
                        }),
                        (Some(_), Some(_)) => Err(Problem::new(
                            at.key("split_from"),
                            "a dataset split from another has no `type` of its own",
                        )),
                        (None, Some(_)) => Err(Problem::new(
                            at.key("split_from"),
                            "must name a mode, optionally with a dataset id: \"train\" or \"train:ds_id\"",
                        )),
                        _ => Err(Problem::new(
                            at,
                            "missing `type`: the dataset reader (e.g. \"idx\"), or `split_from`: the dataset to take samples from",
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

/// `run.process_group_timeout` in seconds: at least one (a zero timeout would fail every
/// collective at once); torch.distributed's default when absent.
fn process_group_timeout(seconds: Option<u64>, problems: &mut Vec<Problem>) -> std::time::Duration {
    match seconds {
        None => crate::dist::env::DEFAULT_TIMEOUT,
        Some(0) => {
            problems.push(Problem::new(
                KeyPath::root("run").key("process_group_timeout"),
                "must be at least 1 (seconds)",
            ));
            crate::dist::env::DEFAULT_TIMEOUT
        }
        // c10d adds the timeout to clock readings in milliseconds: far beyond any wait a run
        // could mean, that overflows and fails at once (or never times out).
        Some(seconds) if seconds > MAX_PROCESS_GROUP_TIMEOUT => {
            problems.push(Problem::new(
                KeyPath::root("run").key("process_group_timeout"),
                format!("must be at most {MAX_PROCESS_GROUP_TIMEOUT} (a week, in seconds)"),
            ));
            crate::dist::env::DEFAULT_TIMEOUT
        }
        Some(seconds) => std::time::Duration::from_secs(seconds),
    }
}

/// The longest `run.process_group_timeout`, in seconds.
const MAX_PROCESS_GROUP_TIMEOUT: u64 = 7 * 24 * 3600;

/// `[pipeline] cache`: `true` is the user's cache directory (`$XDG_CACHE_HOME/fe-host/pipeline`,
/// else `~/.cache/fe-host/pipeline`), a string a directory relative to the manifest.
fn cache_dir(
    value: Option<&toml::Value>,
    dir: &Path,
    problems: &mut Vec<Problem>,
) -> Option<PathBuf> {
    let path = || KeyPath::root("pipeline").key("cache");
    match value? {
        toml::Value::Boolean(false) => None,
        toml::Value::Boolean(true) => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
            match base {
                Some(base) => Some(base.join("fe-host").join("pipeline")),
                None => {
                    problems.push(Problem::new(
                        path(),
                        "no cache directory: neither XDG_CACHE_HOME nor HOME is set; name a directory",
                    ));
                    None
                }
            }
        }
        toml::Value::String(text) if !text.is_empty() => Some(super::normalized(&dir.join(text))),
        _ => {
            problems.push(Problem::new(
                path(),
                "must be true, false or a directory (relative to the manifest)",
            ));
            None
        }
    }
}
