//! Image transforms and augmentations for fe-host pipelines.

fe_plugin_api::export_plugin!();
