//! Phase 1 of loading: read a plugin's build info straight from the file.
//!
//! Nothing is mapped or executed: the file is parsed as an object file and the bytes of the
//! exported `FE_PLUGIN_BUILD_INFO` static are read from its section. A plugin built against a
//! different libtorch would fail inside `dlopen` with an undefined-symbol error; reading first
//! lets us refuse it with the versions that differ instead.

use std::fs::File;
use std::path::Path;

use fe_plugin_api::build_info::{BuildInfo, BUILD_INFO_SIZE, BUILD_INFO_SYMBOL};
use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSymbol};

/// What the file turned out to be.
#[derive(Debug)]
pub enum Probe {
    /// An fe-host plugin, built as described.
    Plugin(Box<BuildInfo>),
    /// Not an fe-host plugin, and why.
    NotAPlugin(String),
}

/// Reads the build info of the plugin at `path` without loading it.
pub fn probe(path: &Path) -> std::io::Result<Probe> {
    let file = File::open(path)?;
    let cache = ReadCache::new(file);
    let object = match object::File::parse(&cache) {
        Ok(object) => object,
        Err(e) => return Ok(Probe::NotAPlugin(format!("not a shared library ({e})"))),
    };
    if object.kind() != object::ObjectKind::Dynamic {
        return Ok(Probe::NotAPlugin(format!(
            "not a shared library (a {:?} object file)",
            object.kind()
        )));
    }
    let symbol = object.dynamic_symbols().chain(object.symbols()).find(
        |s| matches!(s.name(), Ok(name) if name.trim_start_matches('_') == BUILD_INFO_SYMBOL),
    );
    let Some(symbol) = symbol else {
        return Ok(Probe::NotAPlugin(format!(
            "a shared library but not an fe-host plugin (no `{BUILD_INFO_SYMBOL}`; plugins call fe_plugin_api::export_plugin!())"
        )));
    };
    let bytes = symbol
        .section_index()
        .and_then(|index| object.section_by_index(index).ok())
        .and_then(|section| {
            section
                .data_range(symbol.address(), BUILD_INFO_SIZE as u64)
                .ok()
                .flatten()
        });
    Ok(match bytes.and_then(BuildInfo::from_le_bytes) {
        Some(info) => Probe::Plugin(Box::new(info)),
        None => Probe::NotAPlugin(format!(
            "its `{BUILD_INFO_SYMBOL}` is unreadable or from an unknown fe-plugin-api layout"
        )),
    })
}
