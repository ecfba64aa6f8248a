//! The traces fe-host implements itself — they need the run's models, optimizers or files —
//! and how each is built from its manifest table.

use std::path::PathBuf;

use fe_plugin_api::ComponentKind;

use super::adapt::{
    EarlyStopping, EarlyStoppingConfig, TerminateOnNaN, TerminateOnNaNConfig, Timer,
};
use super::io_traces::{EpochLogger, LogFile, LoggerConfig, TensorBoard, TensorBoardConfig};
use super::lr_traces::{LrScheduler, LrSchedulerConfig, ReduceLrConfig, ReduceLrOnPlateau};
use super::saver_traces::{BestModelSaver, BestModelSaverConfig, ModelSaver, ModelSaverConfig};
use super::traces::{HostTrace, TraceSlot};
use crate::error::{Error, Result};
use crate::manifest::{ComponentSpec, Manifest};
use crate::network::{Keys, Network};
use crate::schedule::ModeFilter;

/// A built-in trace: its name, the modes it runs in by default, and what it does.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// The name in `trace = "..."`.
    pub name: &'static str,
    /// Default modes (`""`: all).
    pub default_mode: &'static str,
    /// One line for `fe-host plugins list`.
    pub doc: &'static str,
}

/// Every built-in trace.
pub const BUILTINS: [Builtin; 10] = [
    Builtin {
        name: "LRScheduler",
        default_mode: "train",
        doc: "Sets a model's learning rate from a schedule each step or epoch; logs <model>_lr",
    },
    Builtin {
        name: "ReduceLROnPlateau",
        default_mode: "eval",
        doc: "Multiplies a model's learning rate by `factor` when `metric` stops improving",
    },
    Builtin {
        name: "EarlyStopping",
        default_mode: "eval",
        doc: "Stops training when `monitor` has not improved for `patience` epochs",
    },
    Builtin {
        name: "TerminateOnNaN",
        default_mode: "",
        doc: "Stops training as soon as a loss (or a monitored value) is NaN or infinite",
    },
    Builtin {
        name: "Timer",
        default_mode: "",
        doc: "Logs each mode's epoch time and samples/s, and the total time",
    },
    Builtin {
        name: "BestModelSaver",
        default_mode: "eval",
        doc: "Keeps <model>_best_<metric>.safetensors from the best epoch; can load it at the end",
    },
    Builtin {
        name: "ModelSaver",
        default_mode: "train",
        doc: "Saves <model>_epoch_<N>.safetensors every `frequency` epochs, keeping `max_to_keep`",
    },
    Builtin {
        name: "CSVLogger",
        default_mode: "eval,test",
        doc: "One CSV row per epoch and mode with every logged value",
    },
    Builtin {
        name: "JSONLLogger",
        default_mode: "",
        doc: "One JSON line per epoch and mode, optionally per sample",
    },
    Builtin {
        name: "TensorBoard",
        default_mode: "",
        doc: "Writes every logged value as TensorBoard events, one directory per mode",
    },
];

/// The built-in trace called `name`.
pub fn builtin(name: &str) -> Option<Builtin> {
    BUILTINS.iter().copied().find(|b| b.name == name)
}

/// Registry entries for the built-in traces.
pub fn registry_entries() -> Vec<fe_plugin_api::ComponentInfo> {
    BUILTINS
        .iter()
        .map(|b| fe_plugin_api::ComponentInfo {
            kind: ComponentKind::Trace,
            name: b.name.into(),
            doc: b.doc.into(),
            default_mode: b.default_mode.into(),
            is_metric: false,
        })
        .collect()
}

/// Builds the built-in trace `builtin` from `spec`.
pub fn build(
    builtin: Builtin,
    manifest: &Manifest,
    network: &Network,
    keys: &mut Keys,
    spec: &ComponentSpec,
) -> Result<TraceSlot> {
    let cx = BuildCx {
        manifest,
        network,
        spec,
    };
    if !spec.inputs.is_empty() || !spec.outputs.is_empty() {
        return Err(cx.error(
            &spec.path,
            format!("{} takes no `inputs` or `outputs`", spec.name),
        ));
    }
    let trace: Box<dyn HostTrace> = match builtin.name {
        "LRScheduler" => {
            let config: LrSchedulerConfig = cx.config()?;
            config
                .lr
                .validate()
                .map_err(|(field, message)| cx.error(&spec.path.key("lr").key(field), message))?;
            let model = cx.model(&config.model)?;
            Box::new(LrScheduler::new(network, model, Some(config.lr)))
        }
        "ReduceLROnPlateau" => {
            let config: ReduceLrConfig = cx.config()?;
            let model = cx.model(&config.model)?;
            if !(config.factor > 0.0 && config.factor < 1.0) {
                return Err(cx.error(&spec.path.key("factor"), "must be between 0 and 1"));
            }
            let metric = cx.metric(config.metric.clone(), model)?;
            Box::new(ReduceLrOnPlateau::new(network, model, metric, config))
        }
        "EarlyStopping" => {
            let config: EarlyStoppingConfig = cx.config()?;
            let monitor = match &config.monitor {
                Some(monitor) => monitor.clone(),
                None => cx.network_loss()?,
            };
            Box::new(EarlyStopping::new(config, monitor))
        }
        "TerminateOnNaN" => {
            let config: TerminateOnNaNConfig = cx.config()?;
            let losses: Vec<String> = network
                .loss_keys()
                .into_iter()
                .map(|k| network.keys.name(k).to_owned())
                .collect();
            let names = config.monitor_names.unwrap_or_else(|| losses.clone());
            // Losses are read from the batch after every step; other names from what traces log.
            let (batch, logged): (Vec<String>, Vec<String>) =
                names.into_iter().partition(|n| losses.contains(n));
            let batch = batch.into_iter().map(|n| (keys.intern(&n), n)).collect();
            Box::new(TerminateOnNaN::new(batch, logged))
        }
        "Timer" => {
            cx.config::<fe_plugin_api::NoConfig>()?;
            Box::new(Timer::new())
        }
        "BestModelSaver" => {
            let config: BestModelSaverConfig = cx.config()?;
            let model = cx.model(&config.model)?;
            let metric = cx.metric(config.metric.clone(), model)?;
            let dir = cx.output("save_dir", &config.save_dir, true)?;
            let name = network.models[model].name.as_str();
            Box::new(BestModelSaver::new((model, name), metric, &dir, &config))
        }
        "ModelSaver" => {
            let config: ModelSaverConfig = cx.config()?;
            let model = cx.model(&config.model)?;
            if config.frequency == 0 {
                return Err(cx.error(&spec.path.key("frequency"), "must be at least 1"));
            }
            let dir = cx.output("save_dir", &config.save_dir, true)?;
            Box::new(ModelSaver::new(
                spec.label(),
                (model, network.models[model].name.clone()),
                dir,
                &config,
            ))
        }
        "CSVLogger" | "JSONLLogger" => {
            let config: LoggerConfig = cx.config()?;
            let path = cx.output("filename", &config.filename, false)?;
            let csv = builtin.name == "CSVLogger";
            if csv && (config.instance_id_key.is_some() || !config.instance_keys.is_empty()) {
                return Err(cx.error(
                    &spec.path.key("instance_id_key"),
                    "per-instance rows are written by JSONLLogger only",
                ));
            }
            let file = if csv {
                LogFile::Csv(path)
            } else {
                LogFile::Jsonl(path)
            };
            let instances = match &config.instance_id_key {
                Some(id) => Some((
                    keys.intern(id),
                    config
                        .instance_keys
                        .iter()
                        .map(|k| (keys.intern(k), k.clone()))
                        .collect(),
                )),
                None if !config.instance_keys.is_empty() => {
                    return Err(cx.error(
                        &spec.path.key("instance_keys"),
                        "needs `instance_id_key`: the batch key naming each sample",
                    ))
                }
                None => None,
            };
            Box::new(EpochLogger::new(
                file,
                config.monitor_names.clone(),
                instances,
            ))
        }
        "TensorBoard" => {
            let config: TensorBoardConfig = cx.config()?;
            Box::new(TensorBoard::new(cx.output(
                "log_dir",
                &config.log_dir,
                true,
            )?))
        }
        other => {
            return Err(Error::Internal(format!(
                "no builder for the built-in trace {other}"
            )))
        }
    };
    let modes = match spec.mode {
        Some(modes) => modes,
        None => {
            ModeFilter::parse_default(builtin.default_mode).map_err(|e| cx.error(&spec.path, e))?
        }
    };
    let mut slot = TraceSlot::host(&spec.label(), modes, trace);
    slot.ds_ids = spec.ds_id.clone();
    slot.path = Some(spec.path.clone());
    Ok(slot)
}

struct BuildCx<'a> {
    manifest: &'a Manifest,
    network: &'a Network,
    spec: &'a ComponentSpec,
}

impl BuildCx<'_> {
    fn error(&self, path: &crate::manifest::KeyPath, message: impl Into<String>) -> Error {
        self.manifest.error_at(path, message)
    }

    fn config<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        fe_plugin_api::parse_config(&self.spec.config_text()).map_err(|e| {
            self.error(
                &self.spec.path.join_dotted(e.field()),
                format!("{} ({})", e.message(), self.spec.name),
            )
        })
    }

    /// Where the output `configured` (the value of `key`) is written, refused at its key when
    /// what is there stands in the way: a file where a directory goes (the output itself for a
    /// directory, a parent for both), a directory where a file goes. Found now, the run does
    /// not train first and fail writing it.
    fn output(&self, key: &str, configured: &std::path::Path, is_dir: bool) -> Result<PathBuf> {
        let resolved = self.manifest.output_path(configured);
        let at = self.spec.path.key(key);
        if !is_dir && resolved.is_dir() {
            return Err(self.error(
                &at,
                format!("{} is a directory; name a file", resolved.display()),
            ));
        }
        if let Some(why) = crate::overwrite::Reads::of_manifest(self.manifest).problem(&resolved) {
            return Err(self.error(&at, format!("{} {why}", resolved.display())));
        }
        let skip = usize::from(!is_dir);
        if let Some(file) = resolved.ancestors().skip(skip).find(|a| a.is_file()) {
            return Err(self.error(
                &at,
                format!("{} is a file, not a directory", file.display()),
            ));
        }
        Ok(resolved)
    }

    fn model(&self, name: &str) -> Result<usize> {
        self.network
            .models
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self
                    .network
                    .models
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect();
                self.error(
                    &self.spec.path.key("model"),
                    format!("unknown model `{name}` (models: {})", known.join(", ")),
                )
            })
    }

    /// The one loss the network's UpdateOps train on: what EarlyStopping watches unless told
    /// (the README's "the eval loss"; FastEstimator's literal `"loss"` key rarely exists).
    fn network_loss(&self) -> Result<String> {
        let mut losses: Vec<String> = self
            .network
            .loss_keys()
            .into_iter()
            .map(|k| self.network.keys.name(k).to_owned())
            .collect();
        losses.sort();
        losses.dedup();
        match losses.len() {
            1 => Ok(losses.remove(0)),
            0 => Err(self.error(
                &self.spec.path,
                "no UpdateOp trains on a loss; say which `monitor` to watch",
            )),
            _ => Err(self.error(
                &self.spec.path,
                format!(
                    "the network trains on several losses ({}); say which `monitor` to watch",
                    losses.join(", ")
                ),
            )),
        }
    }

    /// `metric`, or else the loss `model` is trained on; a model trained on several losses
    /// must be told which to watch (FastEstimator's BestModelSaver and ReduceLROnPlateau assert).
    fn metric(&self, metric: Option<String>, model: usize) -> Result<String> {
        if let Some(metric) = metric {
            return Ok(metric);
        }
        let name = &self.network.models[model].name;
        let mut losses = self.network.model_loss_keys(model);
        match losses.len() {
            1 => Ok(losses.remove(0)),
            0 => Err(self.error(
                &self.spec.path,
                format!("model `{name}` is not trained with a loss; say which `metric` to watch"),
            )),
            _ => Err(self.error(
                &self.spec.path,
                format!(
                    "model `{name}` is trained on several losses ({}); say which `metric` to watch",
                    losses.join(", ")
                ),
            )),
        }
    }
}
