//! Opening the manifest's datasets: built-in readers, plugin datasets, and datasets split
//! from others (`split_from`).

use std::sync::Arc;

use fe_plugin_api::{ComponentKind, DeviceSpec, Mode};

use super::split::{Pool, SplitConfig};
use super::{IdxConfig, IdxSource, PluginSource, Source};
use crate::error::Result;
use crate::manifest::{DatasetConfig, DatasetEntry, Manifest};
use crate::plugins::create::{creation_error, unknown_component, Creation};
use crate::plugins::Registry;
use crate::schedule::InForce;

/// One dataset of one mode, opened: `(mode, ds_id, epochs in force, source)`.
pub type Opened = (Mode, String, InForce, Arc<dyn Source>);

/// Opens every dataset of the manifest, in the manifest's order (mode, then ds_id; a
/// scheduled entry once per value). Datasets with `split_from` are cut out of theirs after
/// every other dataset is open, each from what the splits before it left.
pub fn open_all(manifest: &Manifest, registry: &Registry) -> Result<Vec<Opened>> {
    let mut openings: Vec<(usize, &DatasetConfig, InForce, Option<Pool>)> = Vec::new();
    for (entry_index, entry) in manifest.pipeline.data.iter().enumerate() {
        for (config, epochs) in entry.datasets.variants() {
            let pool = match &config.split_from {
                Some(_) if entry.datasets.schedule.is_scheduled() => {
                    return Err(manifest.error_at(
                        &config.path.key("split_from"),
                        "a split dataset cannot be scheduled: split in a fixed entry and schedule the datasets that use it",
                    ))
                }
                Some(_) => None,
                None => Some(Pool::whole(open(manifest, registry, config)?)),
            };
            openings.push((entry_index, config, epochs, pool));
        }
    }
    split_all(manifest, &mut openings)?;
    let data = &manifest.pipeline.data;
    openings
        .into_iter()
        .map(|(entry, config, epochs, pool)| {
            let entry = &data[entry];
            let source = pool.map(|p| p.source()).ok_or_else(|| {
                manifest.error_at(
                    &config.path,
                    "internal: a split dataset was left unresolved",
                )
            })?;
            if source.is_empty() {
                return Err(manifest.error_at(
                    &config.path,
                    format!("the {} dataset has no samples", entry.mode),
                ));
            }
            Ok((entry.mode, entry.ds_id.clone(), epochs, source))
        })
        .collect()
}

type Opening<'a> = (usize, &'a DatasetConfig, InForce, Option<Pool>);

/// Resolves `split_from` entries in manifest order, each once its source is resolved.
fn split_all(manifest: &Manifest, openings: &mut [Opening<'_>]) -> Result<()> {
    let data = &manifest.pipeline.data;
    loop {
        let pending: Vec<usize> = (0..openings.len())
            .filter(|&i| openings[i].3.is_none())
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let mut progressed = false;
        for i in pending {
            let config = openings[i].1;
            let from = config.split_from.clone().unwrap_or_default();
            let target = find_source(manifest, data, openings, &from, config)?;
            if openings[target].3.is_none() {
                continue;
            }
            let split: SplitConfig = fe_plugin_api::parse_config(
                &toml::to_string(&config.config).unwrap_or_default(),
            )
            .map_err(|e| manifest.error_at(&config.path.join_dotted(e.field()), e.message()))?;
            let taken = match openings[target].3.as_mut() {
                Some(pool) => {
                    pool.take(&split, manifest.run.seed)
                        .map_err(|(field, message)| {
                            let at = if field.is_empty() {
                                config.path.clone()
                            } else {
                                config.path.join_dotted(&field)
                            };
                            manifest.error_at(&at, format!("{message} (splitting `{from}`)"))
                        })?
                }
                None => continue,
            };
            openings[i].3 = Some(taken);
            progressed = true;
        }
        if !progressed {
            let stuck = openings.iter().find(|s| s.3.is_none()).map(|s| s.1);
            return Err(match stuck {
                Some(config) => manifest.error_at(
                    &config.path.key("split_from"),
                    "these splits take samples from each other in a circle",
                ),
                None => crate::error::Error::Internal("split resolution stalled".into()),
            });
        }
    }
}

/// The dataset `split_from` names: `mode` or `mode:ds_id`, a fixed (unscheduled) entry.
fn find_source(
    manifest: &Manifest,
    data: &[DatasetEntry],
    openings: &[Opening<'_>],
    from: &str,
    config: &DatasetConfig,
) -> Result<usize> {
    let (mode, ds_id) = from.split_once(':').unwrap_or((from, ""));
    let at = config.path.key("split_from");
    let mode: Mode = mode
        .parse()
        .map_err(|e: String| manifest.error_at(&at, e))?;
    let found = openings
        .iter()
        .position(|(entry, ..)| data[*entry].mode == mode && data[*entry].ds_id == ds_id);
    match found {
        Some(index) if data[openings[index].0].datasets.schedule.is_scheduled() => Err(manifest
            .error_at(
                &at,
                format!("`{from}` is scheduled; split only from a dataset used in every epoch"),
            )),
        Some(index) if std::ptr::eq(openings[index].1, config) => {
            Err(manifest.error_at(&at, "a dataset cannot be split from itself"))
        }
        Some(index) => Ok(index),
        None => {
            let known: Vec<String> = data
                .iter()
                .map(|d| {
                    if d.ds_id.is_empty() {
                        d.mode.to_string()
                    } else {
                        format!("{}:{}", d.mode, d.ds_id)
                    }
                })
                .collect();
            Err(manifest.error_at(
                &at,
                format!("no dataset `{from}` (datasets: {})", known.join(", ")),
            ))
        }
    }
}

/// Opens one dataset that is not a split.
pub fn open(
    manifest: &Manifest,
    registry: &Registry,
    config: &DatasetConfig,
) -> Result<Arc<dyn Source>> {
    let text = toml::to_string(&config.config).unwrap_or_default();
    if config.kind == "idx" {
        let idx: IdxConfig = fe_plugin_api::parse_config(&text)
            .map_err(|e| manifest.error_at(&config.path.join_dotted(e.field()), e.message()))?;
        return Ok(Arc::new(IdxSource::open(&idx, &manifest.dir())?));
    }
    if let Some(opened) = super::formats::open(&config.kind, &text, &manifest.dir()) {
        return opened.map_err(|error| match error {
            super::formats::OpenError::Config(e) => {
                manifest.error_at(&config.path.join_dotted(e.field()), e.message())
            }
            super::formats::OpenError::Data(e) => e,
        });
    }
    let creation = Creation::new(&config.path, &[], &[], DeviceSpec::CPU, manifest.run.seed);
    match registry.create_dataset(&config.kind, &text, &creation.context()) {
        Some(Ok(object)) => Ok(Arc::new(PluginSource::new(object))),
        Some(Err(error)) => Err(creation_error(manifest, &config.path, error)),
        None => Err(unknown_component(
            manifest,
            registry,
            &config.path.key("type"),
            ComponentKind::Dataset,
            &config.kind,
        )),
    }
}
