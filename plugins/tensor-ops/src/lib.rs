//! Tensor utilities for fe-host networks.

fe_plugin_api::export_plugin!();
