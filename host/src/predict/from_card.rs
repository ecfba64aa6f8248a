//! `fe-host predict CARD.json|EXPORT_DIR`: a model used from what `export` wrote, without the
//! training manifest or checkpoint. The card carries the manifest the model was trained with;
//! from it the prediction keeps the pipeline's ops (so inputs are prepared as in training) and
//! the network ops that do not involve other models, and runs the card's model with the
//! card's weights (and, for a TorchScript architecture, the exported module).

use std::path::{Path, PathBuf};

use fe_plugin_api::ComponentKind;
use toml::{Table, Value};

use super::card::{self, ModelCard};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::plugins::Registry;

/// A model card opened and checked against the files it names.
pub struct CardModel {
    /// The card file.
    pub path: PathBuf,
    /// Its contents.
    pub card: ModelCard,
    /// The manifest to predict with: the card's, reduced to this model.
    pub manifest: Manifest,
    /// The safetensors file with the trained weights.
    pub weights: PathBuf,
}

/// `true` when `path` names what `export` wrote (a card or its directory) rather than a
/// manifest.
pub fn is_card(path: &Path) -> bool {
    path.is_dir()
        || path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// Opens the card at `path` (a card file, or an export directory holding exactly one).
pub fn open(path: &Path) -> Result<CardModel> {
    let path = if path.is_dir() {
        only_card_in(path)?
    } else {
        path.to_path_buf()
    };
    let card = read_card(&path)?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let weights = dir.join(&card.weights);
    check_sha256(&path, &weights, &card.weights_sha256, "weights")?;
    let torchscript = match &card.torchscript {
        Some(name) => {
            let file = dir.join(name);
            if !file.is_file() {
                return Err(Error::data(
                    &file,
                    format!(
                        "missing: {} names it as the model's TorchScript",
                        path.display()
                    ),
                ));
            }
            // Cards written before the TorchScript file's sha256 was recorded have none to
            // compare with; they load as they always did.
            if let Some(recorded) = &card.torchscript_sha256 {
                check_sha256(&path, &file, recorded, "TorchScript file")?;
            }
            Some(std::path::absolute(&file).map_err(|e| Error::io(&file, e))?)
        }
        None => None,
    };
    // A plugin architecture's traced `.pt` is for other tools; predicting builds the plugin.
    let torchscript =
        torchscript.filter(|_| card.architecture == crate::network::torchscript::ARCHITECTURE);
    let text = reduced_manifest(&card, torchscript.as_deref())
        .map_err(|message| Error::data(&path, format!("manifest: {message}")))?;
    let manifest = Manifest::parse(&path, text)?;
    Ok(CardModel {
        path,
        card,
        manifest,
        weights,
    })
}

impl CardModel {
    /// Where to look for the architecture's plugin beyond the usual search path: the
    /// directory it was loaded from when the model was exported.
    pub fn plugin_dirs(&self) -> Vec<PathBuf> {
        self.card
            .plugin
            .iter()
            .filter_map(|plugin| Path::new(&plugin.file).parent().map(Path::to_path_buf))
            .filter(|dir| dir.is_dir())
            .collect()
    }

    /// Refuses a card whose architecture no loaded plugin provides, naming the plugin the card
    /// was exported with, before the manifest's own error would point inside the card.
    pub fn check_architecture(&self, registry: &Registry) -> Result<()> {
        let architecture = &self.card.architecture;
        if architecture == crate::network::torchscript::ARCHITECTURE
            || registry.get(ComponentKind::Model, architecture).is_some()
        {
            return Ok(());
        }
        let from = self.card.plugin.as_ref().map_or(String::new(), |p| {
            format!(
                " (exported with plugin {} {}, {})",
                p.name, p.version, p.file
            )
        });
        Err(Error::Plugins(vec![format!(
            "{}: no plugin found provides the model architecture `{architecture}`{from}; pass --plugin-dir DIR with the plugin",
            self.path.display()
        )]))
    }
}

/// Refuses `file` (exit code 5, naming it) unless its sha256 is `recorded`, what the card at
/// `card` records for it.
fn check_sha256(card: &Path, file: &Path, recorded: &str, what: &str) -> Result<()> {
    let sha256 = crate::plugins::sha256_file(file).map_err(|e| {
        Error::data(
            file,
            format!("cannot read the {what} {} names: {e}", card.display()),
        )
    })?;
    if sha256 != recorded {
        return Err(Error::data(
            file,
            format!(
                "sha256 {sha256} is not the {recorded} that {} records: the file was changed or is corrupt",
                card.display()
            ),
        ));
    }
    Ok(())
}

/// When the weights file `weights` lies next to the model card `export` wrote with it
/// (`<model>.json` beside `<model>.safetensors`), refuses it unless its sha256 is the card's:
/// an export directory is also a weights directory (`--weights DIR`), and changed weights must
/// not predict there either. Weights without a card beside them (`run --save-weights`, a
/// checkpoint's) have no recorded sha256 to compare with and pass.
pub fn check_weights_beside_card(weights: &Path) -> Result<()> {
    let card_path = weights.with_extension("json");
    let Ok(text) = std::fs::read_to_string(&card_path) else {
        return Ok(());
    };
    // Another JSON file of that name is not a card and says nothing about the weights.
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(_) => return Ok(()),
    };
    if value["format"].as_str() != Some(card::FORMAT) {
        return Ok(());
    }
    let card: ModelCard = serde_json::from_value(value)
        .map_err(|e| Error::data(&card_path, format!("model card: {e}")))?;
    let names_it = weights
        .file_name()
        .is_some_and(|name| name.to_string_lossy() == card.weights);
    if !names_it {
        return Ok(());
    }
    check_sha256(&card_path, weights, &card.weights_sha256, "weights")
}

/// The one model card in an export directory.
fn only_card_in(dir: &Path) -> Result<PathBuf> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut cards: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    cards.sort();
    match cards.len() {
        1 => Ok(cards.remove(0)),
        0 => Err(Error::data(
            dir,
            "holds no model card (<model>.json): give the directory `fe-host export` wrote, or a manifest",
        )),
        _ => {
            let names: Vec<String> = cards
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            Err(Error::Usage(format!(
                "{} holds {} model cards ({}): name one",
                dir.display(),
                cards.len(),
                names.join(", ")
            )))
        }
    }
}

fn read_card(path: &Path) -> Result<ModelCard> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::data(path, format!("{e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::data(path, format!("{}:{}: not JSON: {e}", e.line(), e.column())))?;
    if value["format"].as_str() != Some(card::FORMAT) {
        return Err(Error::data(
            path,
            format!(
                "not a model card (its `format` is not \"{}\"): give a card `fe-host export` wrote, or a manifest",
                card::FORMAT
            ),
        ));
    }
    serde_json::from_value(value).map_err(|e| Error::data(path, format!("model card: {e}")))
}

/// The card's manifest text with only what predicting needs: its model alone (with the
/// exported TorchScript file), no network op of another model, no traces, no checkpoints or
/// logs; plugin paths made absolute so they are found from anywhere.
fn reduced_manifest(
    card: &ModelCard,
    torchscript: Option<&Path>,
) -> std::result::Result<String, String> {
    let mut document: Table = card
        .manifest
        .text
        .parse()
        .map_err(|e: toml::de::Error| e.message().to_owned())?;
    let mut models = match document.remove("models") {
        Some(Value::Array(models)) => models,
        _ => Vec::new(),
    };
    models.retain(|m| m.get("name").and_then(Value::as_str) == Some(&card.name));
    let Some(Value::Table(model)) = models.first_mut() else {
        return Err(format!("has no model `{}`", card.name));
    };
    if let Some(file) = torchscript {
        model.insert(
            "file".into(),
            Value::String(file.to_string_lossy().into_owned()),
        );
    }
    document.insert("models".into(), Value::Array(models));
    if let Some(Value::Table(network)) = document.get_mut("network") {
        if let Some(Value::Array(ops)) = network.get_mut("ops") {
            ops.retain(|op| {
                op.get("model")
                    .and_then(Value::as_str)
                    .is_none_or(|m| m == card.name)
            });
        }
    }
    document.remove("traces");
    document.remove("checkpoint");
    if let Some(Value::Table(run)) = document.get_mut("run") {
        run.remove("log_dir");
    }
    let trained_in = Path::new(&card.manifest.path)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    if let Some(Value::Table(plugins)) = document.get_mut("plugins") {
        if let Some(Value::Array(paths)) = plugins.get_mut("paths") {
            for path in paths.iter_mut() {
                if let Value::String(p) = path {
                    *p = trained_in.join(&*p).to_string_lossy().into_owned();
                }
            }
        }
    }
    toml::to_string(&document).map_err(|e| e.to_string())
}
