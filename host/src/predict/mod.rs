//! Using a trained model: `fe-host predict` (the network in `infer` mode over data in any
//! format the pipeline reads, predictions written as CSV, NPY or safetensors) and
//! `fe-host export` (TorchScript and safetensors with a JSON model card).

pub mod best;
pub mod card;
pub mod export;
pub mod from_card;
pub mod input;
pub mod onnx;
pub mod output;
pub mod trace;
pub mod transform;

use std::path::{Path, PathBuf};

use fe_plugin_api::Mode;
use tch::Device;

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::plugins::Registry;
use transform::Request;

/// Where trained weights come from.
#[derive(Debug, Clone)]
pub enum Weights {
    /// A directory of `<model>.safetensors` (what `run --save-weights` and `export` write),
    /// or one file for a single model.
    Files(PathBuf),
    /// A checkpoint directory, or a checkpoint root (its `latest`).
    Checkpoint(PathBuf),
    /// None: run the models as they are created (asked for explicitly).
    Random,
    /// What the manifest's `BestModelSaver`s kept in its newest run (`--best`); becomes
    /// [`Weights::Files`] once the manifest is read ([`best::best_weights_dir`]).
    Best,
}

impl Weights {
    /// From the `--weights`, `--checkpoint`, `--best` and `--random-weights` flags (at most
    /// one).
    pub fn from_flags(
        weights: Option<PathBuf>,
        checkpoint: Option<PathBuf>,
        best: bool,
        random: bool,
    ) -> Result<Option<Self>> {
        Ok(match (weights, checkpoint, best, random) {
            (Some(path), None, false, false) => Some(Weights::Files(path)),
            (None, Some(path), false, false) => Some(Weights::Checkpoint(path)),
            (None, None, true, false) => Some(Weights::Best),
            (None, None, false, true) => Some(Weights::Random),
            (None, None, false, false) => None,
            _ => {
                return Err(Error::Usage(
                    "give one of --weights, --checkpoint, --best and --random-weights".into(),
                ))
            }
        })
    }

    /// The path to load weights from (a checkpoint resolved to its directory), if any.
    pub fn path(&self) -> Result<Option<PathBuf>> {
        match self {
            Weights::Files(path) => Ok(Some(path.clone())),
            Weights::Checkpoint(path) => crate::checkpoint::resolve(path).map(Some),
            Weights::Random => Ok(None),
            Weights::Best => Err(Error::Usage(
                "--best names no weights before the manifest is read".into(),
            )),
        }
    }
}

/// What to predict on and where the predictions go.
pub struct Prediction {
    /// Trained weights (`None` is refused when the network has models).
    pub weights: Option<Weights>,
    /// `--input` specs.
    pub inputs: Vec<String>,
    /// Keys to write; default: the outputs of the ModelOps.
    pub keys: Vec<String>,
    /// The file to write (`.csv`, `.npy` or `.safetensors`).
    pub out: PathBuf,
    /// For CSV: the k best classes per sample instead of every score.
    pub top_k: Option<usize>,
    /// At most this many samples.
    pub limit: Option<usize>,
}

/// Runs the prediction; returns the number of samples and the keys written with their shapes.
pub fn run(
    manifest: &Manifest,
    registry: &Registry,
    device: Device,
    prediction: &Prediction,
) -> Result<transform::Written> {
    let format = output::OutputFormat::of(&prediction.out)?;
    if prediction.inputs.is_empty() {
        return Err(Error::Usage("predict needs --input FILE|DIR".into()));
    }
    let weights = match &prediction.weights {
        Some(weights) => weights.path()?,
        None => None,
    };
    let keys = if prediction.keys.is_empty() {
        model_outputs(manifest)
    } else {
        prediction.keys.clone()
    };
    let request = Request {
        mode: Mode::Infer,
        epoch: 1,
        inputs: prediction.inputs.clone(),
        weights,
        random_weights: matches!(prediction.weights, Some(Weights::Random)),
        keys,
        limit: prediction.limit,
        out: prediction.out.clone(),
    };
    let (samples, columns) = transform::collect(manifest, registry, device, &request)?;
    output::write(&prediction.out, format, &columns, prediction.top_k)?;
    Ok(transform::Written {
        samples,
        keys: columns.iter().map(|(k, t)| (k.clone(), t.size())).collect(),
    })
}

/// The manifest sections a prediction or an export uses: how inputs are prepared, the models
/// and the network ops.
pub const SECTIONS_USED: [&str; 3] = ["pipeline", "models", "network"];

/// The manifest a checkpoint was trained with, and how the one given differs from it.
pub struct CheckpointManifest {
    /// The checkpoint's saved `manifest.toml` (with the run's `--set` overrides), read as if it
    /// were the given manifest, so relative paths (plugins, a TorchScript file) resolve from
    /// the same directory.
    pub manifest: Manifest,
    /// The file it was read from.
    pub saved: PathBuf,
    /// How the given manifest differs from it in [`SECTIONS_USED`] (`key: saved -> given`).
    pub differences: Vec<String>,
}

/// Reads the manifest saved in `checkpoint` (a checkpoint or a checkpoint root) and compares
/// `given` with it as `--resume` compares manifests.
pub fn checkpoint_manifest(given: &Manifest, checkpoint: &Path) -> Result<CheckpointManifest> {
    let dir = crate::checkpoint::resolve(checkpoint)?;
    let saved = dir.join("manifest.toml");
    let problem = |message: String| Error::Checkpoint {
        path: saved.clone(),
        message,
    };
    let text = std::fs::read_to_string(&saved)
        .map_err(|e| problem(format!("cannot read the manifest training ran with: {e}")))?;
    let differences = crate::checkpoint::compat::differences_under(
        &text,
        &given.effective_text(),
        &SECTIONS_USED,
    )
    .map_err(problem)?;
    let manifest = Manifest::parse(&given.file, text).map_err(|error| match error {
        Error::Manifest(message) => problem(format!(
            "the manifest training ran with is no longer valid: {}",
            message.lines().next().unwrap_or_default()
        )),
        other => other,
    })?;
    Ok(CheckpointManifest {
        manifest,
        saved,
        differences,
    })
}

/// The keys the manifest's ModelOps write, in order: what a prediction is.
pub fn model_outputs(manifest: &Manifest) -> Vec<String> {
    let mut keys = Vec::new();
    for (spec, _) in manifest
        .ops
        .iter()
        .flat_map(crate::schedule::Scheduled::variants)
    {
        if spec.name == "ModelOp" {
            for key in &spec.outputs {
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
            }
        }
    }
    keys
}
