//! Slicers for fe-host networks: cut batches into minibatches and join the results.

fe_plugin_api::export_plugin!();
