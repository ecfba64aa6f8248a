//! What a component may ask of the host while the run goes on (since 0.1.2): today, adding a
//! graph to the run's summary (FastEstimator's `system.add_graph`).
//!
//! The host hands each plugin an [`FfiHost`] once, before creating anything, through a module
//! of its own under [`PLUGIN_HOST_LINK_SYMBOL`] ([`PluginHostLink`]). Not a new field of
//! [`PluginExt`](crate::ffi::PluginExt) or of [`FfiRunInfo`](crate::run::FfiRunInfo): a
//! prefix type with fewer fields than the host's fails abi_stable's layout check, so either
//! would lock 0.1.1 plugins out (see the evolution rules in [`crate::ffi`]). A host older than
//! 0.1.2 never links, and [`TraceContext::add_graph`](crate::TraceContext::add_graph) then
//! says so instead of dropping the graph.

use std::collections::BTreeMap;
use std::sync::RwLock;

use abi_stable::std_types::{RResult, RStr, RString};
use abi_stable::StableAbi;
use serde::{Deserialize, Serialize};

use crate::context::Mode;
use crate::{Error, Result};

/// Name of the exported static that holds a plugin's [`HostLinkHeader`] (since 0.1.2).
pub const PLUGIN_HOST_LINK_SYMBOL: &[u8] = b"FE_PLUGIN_HOST_LINK_V1\0";

/// What the host offers components. Frozen: a host whose `FfiHost` had more fields than a
/// plugin's would fail that plugin's layout check, so a new service comes in a new type
/// handed over by a new module (the evolution rules in [`crate::ffi`]).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = FfiHostRef)))]
#[sabi(missing_field(option))]
pub struct FfiHost {
    /// Adds (or replaces) the summary graph named by the first argument; the second is the
    /// graphs as JSON, `[{"history": {mode: {key: {step: value}}}}, ...]`. An error is a
    /// one-line message.
    #[sabi(last_prefix_field)]
    pub add_graph: extern "C" fn(RStr<'_>, RStr<'_>) -> RResult<(), RString>,
}

/// The module a plugin exports under [`PLUGIN_HOST_LINK_SYMBOL`].
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginHostLinkRef)))]
#[sabi(missing_field(option))]
pub struct PluginHostLink {
    /// Gives the plugin the host's functions, before any component is created.
    #[sabi(last_prefix_field)]
    pub set_host: extern "C" fn(FfiHostRef),
}

/// The static a plugin exports under [`PLUGIN_HOST_LINK_SYMBOL`]: the layout of its
/// [`PluginHostLink`], checked by the host before it calls `module`. Frozen: two pointers.
#[repr(C)]
pub struct HostLinkHeader {
    /// abi_stable's layout of the plugin's `PluginHostLinkRef`.
    pub layout: &'static abi_stable::type_layout::TypeLayout,
    /// Returns the plugin's host-link module.
    pub module: extern "C" fn() -> PluginHostLinkRef,
}

/// One graph of a summary entry: values by mode, key and step, as the run's own summary
/// keeps them (FastEstimator's `Summary.history`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// `{mode: {key: {step: value}}}`.
    pub history: BTreeMap<String, BTreeMap<String, BTreeMap<u64, f64>>>,
}

impl Graph {
    /// Records `value` for `key` in `mode` at `step`.
    pub fn record(&mut self, mode: Mode, key: &str, step: u64, value: f64) {
        self.history
            .entry(mode.as_str().to_owned())
            .or_default()
            .entry(key.to_owned())
            .or_default()
            .insert(step, value);
    }
}

static HOST: RwLock<Option<FfiHostRef>> = RwLock::new(None);

/// Records the host's functions for every component of this binary (the host calls it through
/// each plugin's [`PluginHostLink`], and directly for its own copy of this crate).
pub fn set_host(host: FfiHostRef) {
    let mut guard = HOST
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *guard = Some(host);
}

pub(crate) extern "C" fn set_host_ffi(host: FfiHostRef) {
    set_host(host);
}

/// Sends `graphs` to the host as the summary graph `name`, as
/// [`TraceContext::add_graph`](crate::TraceContext::add_graph) does, for code that runs in a
/// hook but holds no context: a [`Metric`](crate::Metric)'s `reduce`.
pub fn add_graph(name: &str, graphs: &[Graph]) -> Result<()> {
    let host = *HOST.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let add = host.map(|h| h.add_graph()).ok_or_else(|| {
        Error::msg(format!(
            "cannot add graph `{name}`: this fe-host does not take graphs from plugins (it predates fe-plugin-api 0.1.2)"
        ))
    })?;
    let json = serde_json::to_string(graphs)
        .map_err(|e| Error::msg(format!("cannot add graph `{name}`: {e}")))?;
    add(RStr::from_str(name), RStr::from_str(&json))
        .into_result()
        .map_err(|e| Error::msg(format!("cannot add graph `{name}`: {e}")))
}
