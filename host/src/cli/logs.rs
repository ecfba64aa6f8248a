//! `fe-host logs`: plot runs from their logs; a versioned root (`runs/lenet`) stands for its
//! latest version, or the one `--version` names, `--list` shows its versions and `--diff`
//! compares two recorded runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::{Error, Result};
use crate::report::jsonl::JsonlRow;
use crate::run_dir;

/// `fe-host logs`
#[derive(Args, Debug)]
pub struct LogsArgs {
    /// `.jsonl` or `.csv` logs, or directories holding them (a run's `run.log_dir`); a
    /// versioned root (`runs/lenet`, holding `version_N`) means its latest version.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The plot to write: `.svg` or `.png`.
    #[arg(long, value_name = "FILE", default_value = "logs.svg")]
    pub out: PathBuf,
    /// In a versioned root, this version instead of the latest.
    #[arg(long, value_name = "N")]
    pub version: Option<u32>,
    /// List the versions of each root (start, how far each got, its best value) and plot
    /// nothing.
    #[arg(long, conflicts_with = "version")]
    pub list: bool,
    /// Compare two recorded runs instead of plotting: settings, what they ran on and final
    /// metrics (`fe-host logs --diff runs/lenet/version_0 runs/lenet/version_1`; a root means
    /// its latest version).
    #[arg(long, conflicts_with_all = ["list", "version", "rates", "all_keys"])]
    pub diff: bool,
    /// Plot rates too (`steps/sec`); left out by default.
    #[arg(long)]
    pub rates: bool,
    /// Plot every logged key, bookkeeping included (times, speeds, `min_*`, `since_best_*`);
    /// by default only losses, metrics and learning rates.
    #[arg(long)]
    pub all_keys: bool,
}

/// Runs `fe-host logs`.
pub fn run(args: LogsArgs) -> Result<()> {
    if let Some(missing) = args.paths.iter().find(|p| !p.exists()) {
        return Err(Error::Usage(format!(
            "{}: no such log file or directory",
            missing.display()
        )));
    }
    if args.list {
        return list(&args.paths);
    }
    if args.diff {
        let [a, b] = args.paths.as_slice() else {
            return Err(Error::Usage(format!(
                "--diff compares two runs; {} given",
                args.paths.len()
            )));
        };
        return super::diff::run(&pick_version(a, None)?, &pick_version(b, None)?);
    }
    let paths = args
        .paths
        .iter()
        .map(|path| pick_version(path, args.version))
        .collect::<Result<Vec<_>>>()?;
    let mut runs = crate::report::load_runs(&paths)?;
    if !args.rates {
        for run in &mut runs {
            run.history = crate::report::without_rates(std::mem::take(&mut run.history));
        }
    }
    let logged = |run: &crate::report::RunHistory| {
        run.history
            .values()
            .flat_map(|keys| keys.values())
            .any(|steps| !steps.is_empty())
    };
    if !runs.iter().any(logged) {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(Error::Usage(format!(
            "nothing to plot: {} logged no values (a run stopped before it logged anything writes an empty log)",
            names.join(", ")
        )));
    }
    let options = crate::report::PlotOptions {
        all_keys: args.all_keys || args.rates,
    };
    crate::report::plot::write_plot_with(&runs, &args.out, options)?;
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    println!(
        "plotted {} run(s) ({}) to {}",
        runs.len(),
        names.join(", "),
        args.out.display()
    );
    Ok(())
}

/// `path` itself, or for a versioned root its version `requested` (default: the latest).
fn pick_version(path: &Path, requested: Option<u32>) -> Result<PathBuf> {
    let versions = if path.is_dir() {
        run_dir::versions(path)?
    } else {
        Vec::new()
    };
    if versions.is_empty() {
        return match requested {
            Some(_) => Err(Error::Usage(format!(
                "--version: {} is not a versioned run root (it has no version_N directories)",
                path.display()
            ))),
            None => Ok(path.to_path_buf()),
        };
    }
    match requested {
        Some(version) if versions.contains(&version) => {
            Ok(path.join(run_dir::version_name(version)))
        }
        Some(version) => Err(Error::Usage(format!(
            "--version {version}: {} has no version_{version}; it has {}",
            path.display(),
            names(&versions)
        ))),
        None => {
            let latest = run_dir::latest(path)?.unwrap_or_default();
            Ok(path.join(run_dir::version_name(latest)))
        }
    }
}

fn names(versions: &[u32]) -> String {
    let names: Vec<String> = versions.iter().map(|&v| run_dir::version_name(v)).collect();
    names.join(", ")
}

/// `--list`: a line per version of each root.
fn list(paths: &[PathBuf]) -> Result<()> {
    for root in paths {
        let versions = if root.is_dir() {
            run_dir::versions(root)?
        } else {
            Vec::new()
        };
        if versions.is_empty() {
            return Err(Error::Usage(format!(
                "--list: {} is not a versioned run root (it has no version_N directories)",
                root.display()
            )));
        }
        let latest = run_dir::latest(root)?;
        println!("{}:", root.display());
        for version in versions {
            let dir = root.join(run_dir::version_name(version));
            let mark = if latest == Some(version) {
                " (latest)"
            } else {
                ""
            };
            println!(
                "  {}{mark}: {}",
                run_dir::version_name(version),
                describe(&dir)?
            );
        }
    }
    Ok(())
}

/// `started 2026-11-25 12:01:02 UTC; reached epoch 3, step 1875; best ce 0.0612 (min)`.
fn describe(dir: &Path) -> Result<String> {
    let started = match run_dir::read_record(dir) {
        Some(record) => format!("started {}", readable_time(&record.started)),
        None => "start unknown".to_owned(),
    };
    let log = dir.join(crate::estimator::LOG_FILE);
    if !log.is_file() {
        return Ok(format!("{started}; no log"));
    }
    let rows = crate::report::jsonl::read_jsonl_rows(&log)?;
    let (mut epoch, mut step) = (0, 0);
    // BestModelSaver logs `min_<metric>` / `max_<metric>`: the best value so far.
    let mut tracked: BTreeMap<String, f64> = BTreeMap::new();
    let mut trained_on: BTreeSet<String> = BTreeSet::new();
    for row in &rows {
        let JsonlRow::Epoch(row) = row else { continue };
        if row.mode == "train" {
            epoch = epoch.max(row.epoch);
            trained_on.extend(row.values.keys().cloned());
        }
        step = step.max(row.step);
        for (key, value) in &row.values {
            if key.starts_with("min_") || key.starts_with("max_") {
                tracked.insert(key.clone(), *value);
            }
        }
    }
    // As the run's own "best:" line chooses: a tracked metric before a tracked loss (losses
    // are what training logs too), the first by name among equals.
    let best = tracked
        .iter()
        .find(|(key, _)| !trained_on.contains(&key[4..]))
        .or_else(|| tracked.iter().next())
        .map(|(key, value)| (key.clone(), *value));
    let best = match best {
        Some((key, value)) => {
            let (direction, metric) = key.split_at(3);
            format!(
                "best {} {} ({direction})",
                &metric[1..],
                crate::estimator::data::format_number(value)
            )
        }
        None => "best unknown (no BestModelSaver)".to_owned(),
    };
    Ok(format!(
        "{started}; reached epoch {epoch}, step {step}; {best}"
    ))
}

/// `20261125-120102` as `2026-11-25 12:01:02 UTC`; anything else as it is.
fn readable_time(stamp: &str) -> String {
    let b = stamp.as_bytes();
    if b.len() == 15 && b[8] == b'-' && stamp.is_ascii() {
        format!(
            "{}-{}-{} {}:{}:{} UTC",
            &stamp[0..4],
            &stamp[4..6],
            &stamp[6..8],
            &stamp[9..11],
            &stamp[11..13],
            &stamp[13..15]
        )
    } else {
        stamp.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_read_as_dates() {
        assert_eq!(readable_time("20261125-120102"), "2026-11-25 12:01:02 UTC");
        assert_eq!(readable_time("soon"), "soon");
    }

    #[test]
    fn the_best_listed_is_the_one_the_runs_own_best_line_names() {
        let dir = crate::report::test_dir::TestDir::new("logs-best");
        let log = [
            r#"{"mode":"train","epoch":1,"step":10,"values":{"ce":2.4}}"#,
            r#"{"mode":"eval","epoch":1,"step":10,"values":{"accuracy":0.1,"ce":2.3,"max_accuracy":0.1,"min_ce":2.3}}"#,
            r#"{"mode":"train","epoch":2,"step":20,"values":{"ce":2.2}}"#,
            r#"{"mode":"eval","epoch":2,"step":20,"values":{"accuracy":0.05,"ce":2.309,"max_accuracy":0.1,"min_ce":2.3}}"#,
        ];
        std::fs::write(
            dir.path().join(crate::estimator::LOG_FILE),
            log.join("\n") + "\n",
        )
        .unwrap();
        // Two BestModelSavers: the metric, not the loss (which training logs too), as the
        // run's "best: accuracy 0.1 (highest)" line says; a loss only when nothing else is.
        let listed = describe(dir.path()).unwrap();
        assert!(
            listed.ends_with("reached epoch 2, step 20; best accuracy 0.1 (max)"),
            "{listed}"
        );
        let only_loss = log.map(|row| row.replace(r#","max_accuracy":0.1"#, ""));
        std::fs::write(
            dir.path().join(crate::estimator::LOG_FILE),
            only_loss.join("\n") + "\n",
        )
        .unwrap();
        assert!(describe(dir.path()).unwrap().ends_with("best ce 2.3 (min)"));
    }
}
