//! FastEstimator's `LabelTracker`: a per-sample value (a loss computed without reduction, a
//! per-sample score) grouped by label, summarised per epoch — mean, and optionally mean ± std
//! and min/max — and kept as one summary graph per label over the epochs.
//!
//! A metric rather than a plain trace so that data parallelism gathers every rank's samples
//! before grouping (the mean of rank means is not the mean). The partial state is every
//! sample's (label, value); the reduction sorts each label's values before summing, so the
//! result is bit-for-bit the same for any split of the batches.
//!
//! Graphs: FastEstimator files one `Summary` per label, named by the label, under the trace's
//! output; a graph here has no name, so each label's graph is filed under
//! `<output>/<label name>` (label name = the `label_mapping` key, else the label's value).
//! The graphs are the metric's kept state ([`Metric::state`]): a checkpoint carries them, so
//! a resumed run's graphs go on from where the checkpoint left them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use fe_plugin_api::tch::{Device, Kind, Tensor};
use fe_plugin_api::{
    CreateContext, Error, FromConfig, Graph, Metric, Mode, Result, State, TraceContext, Value,
};
use serde::Deserialize;

/// Which bounds accompany each label's mean.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum Bounds {
    /// `"std"`, `"range"` or `"none"`.
    One(String),
    /// Any of `"std"` and `"range"`.
    Many(Vec<String>),
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds::One("std".to_owned())
    }
}

/// Configuration of `LabelTracker`.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct LabelTrackerConfig {
    /// `{display name = label value}`: only these labels are tracked, under these names.
    #[serde(default)]
    pub label_mapping: Option<BTreeMap<String, i64>>,
    /// `"std"` (default: mean ± population std), `"range"` (min and max), both, or `"none"`.
    #[serde(default)]
    pub bounds: Bounds,
}

/// Inputs `[metric, label]`: per-sample values and integer (or one-hot) labels. Output: the
/// per-label means as a Float64 tensor, in ascending label value (with a `label_mapping`, its
/// labels only; a mapped label without samples is NaN).
pub struct LabelTracker {
    metric_key: String,
    output: String,
    names: Option<BTreeMap<i64, String>>,
    std: bool,
    range: bool,
    labels: Vec<Tensor>,
    values: Vec<Tensor>,
    at: Option<(Mode, u64)>,
    graphs: Mutex<BTreeMap<i64, Graph>>,
}

impl FromConfig for LabelTracker {
    type Config = LabelTrackerConfig;
    fn from_config(config: LabelTrackerConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        let bounds = match config.bounds {
            Bounds::One(one) if one == "none" => Vec::new(),
            Bounds::One(one) => vec![one],
            Bounds::Many(many) => many,
        };
        if let Some(bad) = bounds.iter().find(|b| *b != "std" && *b != "range") {
            return Err(Error::config(
                "bounds",
                format!("unknown bound `{bad}` (expected \"std\", \"range\" or \"none\")"),
            ));
        }
        let names = match config.label_mapping {
            Some(mapping) => {
                let mut names = BTreeMap::new();
                for (name, label) in mapping {
                    if let Some(other) = names.insert(label, name.clone()) {
                        return Err(Error::config(
                            "label_mapping",
                            format!("`{other}` and `{name}` both map to label {label}"),
                        ));
                    }
                }
                Some(names)
            }
            None => None,
        };
        Ok(Self {
            metric_key: ctx.inputs[0].to_string(),
            output: ctx.outputs[0].to_string(),
            names,
            std: bounds.iter().any(|b| b == "std"),
            range: bounds.iter().any(|b| b == "range"),
            labels: Vec::new(),
            values: Vec::new(),
            at: None,
            graphs: Mutex::new(BTreeMap::new()),
        })
    }
}

/// A label's values summarised: mean, population std, min, max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stats {
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
}

/// Summarises `values` after sorting them, so any order of arrival sums alike.
pub(crate) fn stats(mut values: Vec<f64>) -> Stats {
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    Stats {
        mean,
        std: variance.sqrt(),
        min: values.first().copied().unwrap_or(f64::NAN),
        max: values.last().copied().unwrap_or(f64::NAN),
    }
}

impl LabelTracker {
    fn name(&self, label: i64) -> String {
        self.names
            .as_ref()
            .and_then(|names| names.get(&label).cloned())
            .unwrap_or_else(|| label.to_string())
    }

    /// Every gathered sample's values, by tracked label.
    fn grouped(&self, partials: &[State]) -> Result<BTreeMap<i64, Vec<f64>>> {
        let mut groups: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
        if let Some(names) = &self.names {
            for &label in names.keys() {
                groups.insert(label, Vec::new());
            }
        }
        for partial in partials {
            let (Some(labels), Some(values)) = (partial.tensor("labels"), partial.tensor("values"))
            else {
                continue;
            };
            let labels = Vec::<i64>::try_from(labels)?;
            let values = Vec::<f64>::try_from(values)?;
            for (label, value) in labels.into_iter().zip(values) {
                match &self.names {
                    Some(names) if !names.contains_key(&label) => {}
                    _ => groups.entry(label).or_default().push(value),
                }
            }
        }
        Ok(groups)
    }
}

impl Metric for LabelTracker {
    fn reset(&mut self) {
        self.labels.clear();
        self.values.clear();
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let (values, labels) = (inputs[0], inputs[1]);
        let values = values
            .f_reshape([-1])?
            .f_to_kind(Kind::Double)?
            .f_to_device(Device::Cpu)?;
        let count = values.size()[0];
        let size = labels.size();
        let one_hot = size.len() > 1 && labels.numel() as i64 != count;
        let labels = if one_hot {
            labels.f_argmax(-1, false)?
        } else if labels.f_is_floating_point()? {
            labels.f_round()?
        } else {
            labels.shallow_clone()
        };
        let labels = labels
            .f_reshape([-1])?
            .f_to_kind(Kind::Int64)?
            .f_to_device(Device::Cpu)?;
        if labels.size()[0] != count {
            return Err(Error::msg(format!(
                "LabelTracker: {} label(s) for {count} value(s) of `{}` (labels {size:?})",
                labels.size()[0],
                self.metric_key
            )));
        }
        self.labels.push(labels);
        self.values.push(values);
        Ok(())
    }

    fn partial(&self) -> Result<State> {
        if self.labels.is_empty() {
            return Ok(State::empty());
        }
        Ok(State::empty()
            .with_tensor("labels", Tensor::f_cat(&self.labels, 0)?)
            .with_tensor("values", Tensor::f_cat(&self.values, 0)?))
    }

    fn state(&self) -> Result<State> {
        let graphs = self
            .graphs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Each line's steps and values as tensors (JSON has no NaN, and a loss can be one);
        // the JSON lists which label, mode and key each line belongs to.
        let mut lines = Vec::new();
        let mut tensors = Vec::new();
        for (&label, graph) in graphs.iter() {
            for (mode, keys) in &graph.history {
                for (key, points) in keys {
                    let at = lines.len();
                    let steps: Vec<i64> = points.keys().map(|&s| s as i64).collect();
                    let values: Vec<f64> = points.values().copied().collect();
                    tensors.push((format!("{at}/steps"), Tensor::from_slice(&steps)));
                    tensors.push((format!("{at}/values"), Tensor::from_slice(&values)));
                    lines.push((label, mode.clone(), key.clone()));
                }
            }
        }
        if lines.is_empty() {
            return Ok(State::empty());
        }
        let (json, _) = State::from_json(&lines)?.into_parts();
        Ok(State::from_parts(json, tensors))
    }

    fn load_state(&mut self, state: State) -> Result<()> {
        let lines: Vec<(i64, String, String)> = state.json()?;
        let mut graphs: BTreeMap<i64, Graph> = BTreeMap::new();
        for (at, (label, mode, key)) in lines.into_iter().enumerate() {
            let line = |part: &str| {
                state
                    .tensor(&format!("{at}/{part}"))
                    .ok_or_else(|| Error::msg(format!("LabelTracker state lacks `{at}/{part}`")))
            };
            let steps = Vec::<i64>::try_from(line("steps")?)?;
            let values = Vec::<f64>::try_from(line("values")?)?;
            let points = graphs
                .entry(label)
                .or_default()
                .history
                .entry(mode)
                .or_default()
                .entry(key)
                .or_default();
            points.extend(steps.into_iter().map(|s| s as u64).zip(values));
        }
        *self
            .graphs
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = graphs;
        Ok(())
    }

    fn on_epoch_end(&mut self, ctx: &TraceContext<'_>) -> Result<()> {
        self.at = (!ctx.step.warmup).then_some((ctx.step.mode, ctx.step.global_step));
        Ok(())
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let groups = self.grouped(partials)?;
        let mut means = Vec::with_capacity(groups.len());
        let mut graphs = self
            .graphs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = &self.metric_key;
        for (&label, values) in &groups {
            if values.is_empty() {
                means.push(f64::NAN);
                continue;
            }
            let s = stats(values.clone());
            means.push(s.mean);
            let Some((mode, step)) = self.at else {
                continue;
            };
            let graph = graphs.entry(label).or_default();
            graph.record(mode, key, step, s.mean);
            if self.std {
                graph.record(mode, &format!("{key}_-std"), step, s.mean - s.std);
                graph.record(mode, &format!("{key}_+std"), step, s.mean + s.std);
            }
            if self.range {
                graph.record(mode, &format!("{key}_min"), step, s.min);
                graph.record(mode, &format!("{key}_max"), step, s.max);
            }
        }
        if self.at.is_some() {
            for (&label, graph) in graphs.iter() {
                let name = format!("{}/{}", self.output, self.name(label));
                fe_plugin_api::host_link::add_graph(&name, std::slice::from_ref(graph))?;
            }
        }
        Ok(vec![Value::from(Tensor::from_slice(&means))])
    }
}

#[cfg(test)]
mod tests;
