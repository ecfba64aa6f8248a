//! What a resumed run must share with its checkpoint. Differences are split into compatible
//! ones (more epochs, log interval, threads, device, checkpoint policy, plugin search paths, a
//! rebuilt plugin of the same version), accepted only when the user says so, and the rest,
//! which are always refused: the run they describe is not the one that was saved.

use toml::{Table, Value};

use super::{CheckpointInfo, Cursor, PluginRecord};

/// Manifest keys a resumed run may change (`--allow-changes`); everything under `checkpoint`
/// too.
const COMPATIBLE: [&str; 10] = [
    "run.cudnn_benchmark",
    "run.epochs",
    "run.log_steps",
    "run.eval_log_steps",
    "run.log_dir",
    "run.threads",
    "run.device",
    "run.warmup",
    "plugins.paths",
    "plugins.sha256",
];

/// Manifest keys that say how a run starts or where it keeps work, not what it computes: a
/// resumed run may differ in them without consent (`run.resume = "auto"` is what restarts a
/// job, so asking for `--allow-changes` there would defeat it; the pipeline cache holds what
/// the ops would compute anyway, so turning it on or moving it changes no sample).
const IGNORED: [(&str, &str); 2] = [("run", "resume"), ("pipeline", "cache")];

/// How a resumed run differs from its checkpoint.
#[derive(Debug, Default, PartialEq)]
pub struct Differences {
    /// Changes a user may accept.
    pub compatible: Vec<String>,
    /// Changes that make resuming meaningless.
    pub incompatible: Vec<String>,
}

impl Differences {
    /// No difference at all.
    pub fn is_empty(&self) -> bool {
        self.compatible.is_empty() && self.incompatible.is_empty()
    }

    fn push(&mut self, path: &str, what: String) {
        let compatible = path.starts_with("checkpoint") || COMPATIBLE.contains(&path);
        if compatible {
            self.compatible.push(what);
        } else {
            self.incompatible.push(what);
        }
    }

    /// Merges `other` into these.
    pub fn extend(&mut self, other: Differences) {
        self.compatible.extend(other.compatible);
        self.incompatible.extend(other.incompatible);
    }

    /// `Ok` when resuming may go on: no difference, or only compatible ones and `allow`.
    pub fn verdict(&self, allow: bool) -> Result<(), String> {
        if !self.incompatible.is_empty() {
            return Err(format!(
                "cannot resume: the run differs from the checkpoint: {}",
                self.incompatible.join("; ")
            ));
        }
        if !self.compatible.is_empty() && !allow {
            return Err(format!(
                "the run differs from the checkpoint: {}; pass --allow-changes to resume with these changes",
                self.compatible.join("; ")
            ));
        }
        Ok(())
    }
}

/// Key-by-key differences between the saved manifest text and the current one. `epochs`
/// is the current run's epoch count when the command line overrides the manifest's.
pub fn manifest_differences(
    saved: &str,
    current: &str,
    epochs: Option<u32>,
) -> Result<Differences, String> {
    let parse = |text: &str, which: &str| {
        text.parse::<Table>()
            .map_err(|e| format!("the {which} manifest is not valid TOML: {}", e.message()))
    };
    let (mut saved, mut current) = (parse(saved, "saved")?, parse(current, "current")?);
    forget_ignored(&mut saved);
    forget_ignored(&mut current);
    if let Some(epochs) = epochs {
        let run = current
            .entry("run")
            .or_insert_with(|| Value::Table(Table::new()));
        if let Value::Table(run) = run {
            run.insert("epochs".into(), Value::Integer(epochs.into()));
        }
    }
    let mut differences = Differences::default();
    diff_tables(&saved, &current, "", &mut differences);
    Ok(differences)
}

/// The differences of [`manifest_differences`] under the top-level `sections` alone, compatible
/// or not: what a command that reads only those sections (predict, export) must not ignore.
pub fn differences_under(
    saved: &str,
    current: &str,
    sections: &[&str],
) -> Result<Vec<String>, String> {
    let all = manifest_differences(saved, current, None)?;
    let under = |difference: &String| {
        sections.iter().any(|section| {
            difference
                .strip_prefix(section)
                .is_some_and(|rest| rest.starts_with(['.', '[', ':']))
        })
    };
    Ok(all
        .incompatible
        .into_iter()
        .chain(all.compatible)
        .filter(under)
        .collect())
}

/// Removes the [`IGNORED`] keys, and a table they leave empty (a `[run]` holding only
/// `resume` is no difference from no `[run]`).
fn forget_ignored(manifest: &mut Table) {
    for (table, key) in IGNORED {
        if let Some(Value::Table(inner)) = manifest.get_mut(table) {
            if inner.remove(key).is_some() && inner.is_empty() {
                manifest.remove(table);
            }
        }
    }
}

fn diff_tables(saved: &Table, current: &Table, prefix: &str, out: &mut Differences) {
    let mut keys: Vec<&String> = saved.keys().chain(current.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        diff_values(saved.get(key), current.get(key), &path, out);
    }
}

/// Descends into tables and arrays so that each difference is reported at the deepest key
/// path where the values part (`models[0].optimizer.lr: 0.001 -> 0.002`), with both values
/// in full.
fn diff_values(saved: Option<&Value>, current: Option<&Value>, path: &str, out: &mut Differences) {
    match (saved, current) {
        (Some(a), Some(b)) if a == b => {}
        (Some(Value::Table(a)), Some(Value::Table(b))) => diff_tables(a, b, path, out),
        (Some(Value::Array(a)), Some(Value::Array(b)))
            if a.iter()
                .chain(b)
                .any(|v| matches!(v, Value::Table(_) | Value::Array(_))) =>
        {
            for i in 0..a.len().max(b.len()) {
                diff_values(a.get(i), b.get(i), &format!("{path}[{i}]"), out);
            }
        }
        (a, b) => {
            let show = |v: Option<&Value>| v.map_or("(absent)".to_owned(), show_value);
            out.push(path, format!("{path}: {} -> {}", show(a), show(b)));
        }
    }
}

/// A value as TOML would write it inline.
fn show_value(value: &Value) -> String {
    value.to_string()
}

/// Differences between the plugins a checkpoint was written with and the loaded ones. A
/// plugin that is gone or has another version is incompatible; one rebuilt at the same
/// version (another sha256) is a compatible change. Newly added plugins do not matter.
pub fn plugin_differences(saved: &[PluginRecord], current: &[PluginRecord]) -> Differences {
    let mut out = Differences::default();
    for old in saved {
        match current.iter().find(|p| p.name == old.name) {
            None => out.incompatible.push(format!(
                "plugin {} {} ({}) is not loaded",
                old.name, old.version, old.file
            )),
            Some(new)
                if new.version != old.version
                    || same_abi(&new.built_against) != same_abi(&old.built_against) =>
            {
                out.incompatible.push(format!(
                    "plugin {} was {} ({}) and is now {} ({})",
                    old.name, old.version, old.built_against, new.version, new.built_against
                ))
            }
            Some(new) if new.sha256 != old.sha256 => out.compatible.push(format!(
                "plugin {} {} was rebuilt ({} has another sha256)",
                new.name, new.version, new.file
            )),
            Some(_) => {}
        }
    }
    out
}

/// `built_against` without the fe-plugin-api patch number: a patch release keeps the ABI
/// and adds only what old plugins never see, so a plugin rebuilt against the next one runs
/// the same (its sha256 still changes, which is reported as compatible).
fn same_abi(built_against: &str) -> String {
    let Some(rest) = built_against.strip_prefix("fe-plugin-api ") else {
        return built_against.to_owned();
    };
    let (version, others) = rest.split_once(',').unwrap_or((rest, ""));
    format!(
        "fe-plugin-api {},{others}",
        fe_plugin_api::build_info::api_key(version)
    )
}

/// Refuses to resume `info` into a run of `total` epochs that ends before the checkpoint:
/// such a run used to train nothing and exit 0. A checkpoint at the end of the last epoch (a
/// finished run resumed as it was) is accepted: the run has nothing left but its test.
/// `from_flag` says whether `total` came from `--epochs` (else from `run.epochs`).
pub fn epochs_left(info: &CheckpointInfo, total: u32, from_flag: bool) -> Result<(), String> {
    let epoch = info.cursor.epoch();
    if epoch <= total {
        return Ok(());
    }
    let asked = if from_flag {
        format!("--epochs {total}")
    } else {
        format!("run.epochs = {total}")
    };
    let needed = match info.cursor {
        Cursor::InEpoch { .. } => format!("--epochs {epoch} or more"),
        Cursor::EpochEnd { .. } => format!(
            "--epochs {} or more to train further (--epochs {epoch} ends as the run did)",
            epoch + 1
        ),
    };
    Err(format!(
        "the checkpoint is at step {}, {}, and {asked} leaves nothing to train: pass {needed}",
        info.step,
        info.cursor.describe()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[run]\nepochs = 3\nseed = 1\n[pipeline]\nbatch_size = 32\n";

    #[test]
    fn identical_manifests_have_no_differences() {
        let d = manifest_differences(BASE, BASE, None).unwrap();
        assert!(d.is_empty());
        assert!(d.verdict(false).is_ok());
    }

    #[test]
    fn resume_mode_is_no_difference_at_all() {
        let auto = "[run]\nepochs = 3\nresume = \"auto\"\n";
        let d = manifest_differences("[run]\nepochs = 3\n", auto, None).unwrap();
        assert!(d.is_empty(), "{d:?}");
        let d = manifest_differences("", "[run]\nresume = \"auto\"\n", None).unwrap();
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn more_epochs_is_compatible_but_needs_consent() {
        let more = BASE.replace("epochs = 3", "epochs = 5");
        let d = manifest_differences(BASE, &more, None).unwrap();
        assert_eq!(d.compatible, ["run.epochs: 3 -> 5"]);
        let err = d.verdict(false).unwrap_err();
        assert!(err.contains("pass --allow-changes"), "{err}");
        assert!(d.verdict(true).is_ok());
        // The command line's --epochs is itself explicit consent only for the epoch count.
        let d = manifest_differences(BASE, BASE, Some(3)).unwrap();
        assert!(d.is_empty());
    }

    #[test]
    fn other_changes_are_refused_with_what_differs() {
        let changed = BASE
            .replace("batch_size = 32", "batch_size = 64")
            .replace("seed = 1", "seed = 1\nwarmup = false");
        let d = manifest_differences(BASE, &changed, None).unwrap();
        assert_eq!(d.incompatible, ["pipeline.batch_size: 32 -> 64"]);
        assert_eq!(d.compatible, ["run.warmup: (absent) -> false"]);
        let err = d.verdict(true).unwrap_err();
        assert!(err.contains("pipeline.batch_size: 32 -> 64"), "{err}");
    }

    #[test]
    fn differences_are_named_at_the_deepest_key_with_both_values() {
        let saved = "[[models]]\nname = \"a\"\noptimizer = { type = \"adam\", lr = 0.001 }\n";
        let current = saved.replace("lr = 0.001", "lr = 0.002");
        let d = manifest_differences(saved, &current, None).unwrap();
        assert_eq!(d.incompatible, ["models[0].optimizer.lr: 0.001 -> 0.002"]);
        let more = format!("{saved}[[models]]\nname = \"b\"\n");
        let d = manifest_differences(saved, &more, None).unwrap();
        assert_eq!(d.incompatible, ["models[1]: (absent) -> { name = \"b\" }"]);
    }

    #[test]
    fn differences_under_sections_keep_only_those_sections() {
        let saved = "[run]\nepochs = 3\n[pipeline]\nbatch_size = 32\n[[models]]\nname = \"a\"\n";
        let current = saved
            .replace("epochs = 3", "epochs = 5")
            .replace("batch_size = 32", "batch_size = 64")
            .replace("name = \"a\"", "name = \"a\"\nclasses = 12");
        let d = differences_under(saved, &current, &["pipeline", "models", "network"]).unwrap();
        assert_eq!(
            d,
            [
                "models[0].classes: (absent) -> 12",
                "pipeline.batch_size: 32 -> 64"
            ]
        );
        // A section is matched whole, not as a prefix of another key.
        let d = differences_under("[pipelines]\na = 1\n", "", &["pipeline"]).unwrap();
        assert!(d.is_empty(), "{d:?}");
    }

    fn plugin(name: &str, version: &str, sha: &str) -> PluginRecord {
        PluginRecord {
            name: name.into(),
            version: version.into(),
            file: format!("lib{name}.so"),
            sha256: sha.into(),
            built_against: "fe-plugin-api 0.1.0".into(),
        }
    }

    #[test]
    fn a_plugin_rebuilt_against_a_plugin_api_patch_release_is_compatible() {
        let saved = vec![plugin("a", "1.0", "x")];
        let mut rebuilt = plugin("a", "1.0", "y");
        rebuilt.built_against = "fe-plugin-api 0.1.1".into();
        let d = plugin_differences(&saved, &[rebuilt.clone()]);
        assert!(d.incompatible.is_empty(), "{:?}", d.incompatible);
        assert_eq!(d.compatible.len(), 1);
        rebuilt.built_against = "fe-plugin-api 0.2.0".into();
        let d = plugin_differences(&saved, &[rebuilt]);
        assert_eq!(d.incompatible.len(), 1);
    }

    #[test]
    fn plugin_changes() {
        let saved = vec![plugin("a", "1.0", "x"), plugin("b", "1.0", "y")];
        let current = vec![plugin("a", "1.1", "x"), plugin("c", "1.0", "z")];
        let d = plugin_differences(&saved, &current);
        assert_eq!(d.incompatible.len(), 2, "{d:?}");
        assert!(d.incompatible[0].contains("plugin a was 1.0"));
        assert!(d.incompatible[1].contains("plugin b 1.0 (libb.so) is not loaded"));
        let rebuilt = vec![plugin("a", "1.0", "new"), plugin("b", "1.0", "y")];
        let d = plugin_differences(&saved, &rebuilt);
        assert!(d.incompatible.is_empty());
        assert_eq!(d.compatible.len(), 1);
    }

    fn at(step: u64, cursor: Cursor) -> CheckpointInfo {
        CheckpointInfo {
            fe_host_version: String::new(),
            step,
            sequence: 0,
            cursor,
            monitor: None,
            created: String::new(),
            run_id: String::new(),
        }
    }

    #[test]
    fn a_run_that_ends_before_its_checkpoint_is_refused() {
        let inside = at(
            9,
            Cursor::InEpoch {
                epoch: 2,
                ds_index: 0,
                batches_done: 1,
            },
        );
        assert_eq!(epochs_left(&inside, 2, true), Ok(()));
        assert_eq!(
            epochs_left(&inside, 1, true).unwrap_err(),
            "the checkpoint is at step 9, inside epoch 2 (1 batches done), and --epochs 1 leaves nothing to train: pass --epochs 2 or more"
        );
        let finished = at(18, Cursor::EpochEnd { epoch: 3 });
        // A finished run resumed as it was: nothing to train, but nothing asked for either.
        assert_eq!(epochs_left(&finished, 3, false), Ok(()));
        assert_eq!(
            epochs_left(&finished, 2, false).unwrap_err(),
            "the checkpoint is at step 18, after epoch 3, and run.epochs = 2 leaves nothing to train: pass --epochs 4 or more to train further (--epochs 3 ends as the run did)"
        );
    }
}
