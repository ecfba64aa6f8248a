//! What changes from one epoch to the next: the lines a run logs when a schedule switches.

use crate::manifest::Manifest;
use crate::network::build::describe_table;
use crate::schedule::Scheduled;

/// One schedulable entry of the manifest: where it is written and each value described.
pub struct Entry<'a> {
    /// Its manifest path, e.g. `network.ops[1]` or `pipeline.batch_size`.
    pub label: String,
    /// Each value, described in one line.
    pub values: Vec<String>,
    /// When each value is in force.
    pub schedule: &'a crate::schedule::Schedule,
}

impl Entry<'_> {
    /// The description of the value in force in `epoch`, or `none`.
    pub fn at(&self, epoch: u32) -> String {
        match self.schedule.index_at(epoch) {
            Some(i) => self.values[i].clone(),
            None => "none".to_owned(),
        }
    }
}

/// Every entry of the manifest that is actually scheduled.
pub fn scheduled_entries(manifest: &Manifest) -> Vec<Entry<'_>> {
    fn specs<'a>(
        out: &mut Vec<Entry<'a>>,
        items: &'a [Scheduled<crate::manifest::ComponentSpec>],
        path: &str,
    ) {
        for (i, item) in items.iter().enumerate() {
            out.push(Entry {
                label: format!("{path}[{i}]"),
                values: item.values.iter().map(|s| s.describe()).collect(),
                schedule: &item.schedule,
            });
        }
    }
    let mut out = Vec::new();
    specs(&mut out, &manifest.pipeline.ops, "pipeline.ops");
    specs(&mut out, &manifest.ops, "network.ops");
    specs(&mut out, &manifest.postprocessing, "network.postprocessing");
    specs(&mut out, &manifest.slicers, "network.slicers");
    specs(&mut out, &manifest.traces, "traces");
    out.push(Entry {
        label: "pipeline.batch_size".to_owned(),
        values: manifest
            .pipeline
            .batch_size
            .values
            .iter()
            .map(u32::to_string)
            .collect(),
        schedule: &manifest.pipeline.batch_size.schedule,
    });
    for entry in &manifest.pipeline.data {
        out.push(Entry {
            label: entry.path.to_string(),
            values: entry
                .datasets
                .values
                .iter()
                .map(|d| format!("{} {}", d.kind, toml::Value::Table(d.config.clone())))
                .collect(),
            schedule: &entry.datasets.schedule,
        });
    }
    for model in &manifest.models {
        if let Some(optimizer) = &model.optimizer {
            out.push(Entry {
                label: format!("models.{}.optimizer", model.name),
                values: optimizer.values.iter().map(describe_table).collect(),
                schedule: &optimizer.schedule,
            });
        }
    }
    out.retain(|e| e.schedule.is_scheduled());
    out
}

/// `entry: old => new` for every scheduled entry whose value differs between `epoch - 1` and
/// `epoch`.
pub fn changes_at(entries: &[Entry<'_>], epoch: u32) -> Vec<String> {
    if epoch <= 1 {
        return Vec::new();
    }
    entries
        .iter()
        .filter(|e| e.schedule.index_at(epoch - 1) != e.schedule.index_at(epoch))
        .map(|e| format!("{}: {} => {}", e.label, e.at(epoch - 1), e.at(epoch)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const CURRICULUM: &str = r#"
[run]
epochs = 4

[pipeline]
batch_size = { epoch = { 1 = 16, 2 = 32 } }

[pipeline.data.train]
type = "idx"
files = { x = "x.idx" }

[[network.ops]]
[network.ops.epoch.1]
op = "CrossEntropy"
inputs = ["y_pred", "y"]
outputs = "loss"
[network.ops.epoch.3]
op = "FocalLoss"
inputs = ["y_pred", "y"]
outputs = "loss"
"#;

    #[test]
    fn changes_name_the_entry_and_both_values() {
        let manifest = Manifest::parse(Path::new("m.toml"), CURRICULUM.to_owned()).unwrap();
        let entries = scheduled_entries(&manifest);
        assert_eq!(entries.len(), 2);
        assert!(changes_at(&entries, 1).is_empty());
        assert_eq!(changes_at(&entries, 2), ["pipeline.batch_size: 16 => 32"]);
        assert_eq!(
            changes_at(&entries, 3),
            ["network.ops[0]: CrossEntropy(y_pred, y -> loss) => FocalLoss(y_pred, y -> loss)"]
        );
        assert!(changes_at(&entries, 4).is_empty());
        assert_eq!(manifest.signature_epochs(), [1, 2, 3]);
    }
}
