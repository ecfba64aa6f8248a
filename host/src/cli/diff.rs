//! `fe-host logs --diff A B`: what differs between two recorded runs — their settings (the
//! recorded manifests, key by key), what they ran on (fe-host and plugin files, device, world
//! size, threads, seed, data) and their final metrics. Timings, which differ between any two
//! runs, are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::Path;

use crate::error::{Error, Result};
use crate::record::{self, Record};

/// Prints the differences between the runs recorded in version directories `a` and `b`.
pub fn run(a: &Path, b: &Path) -> Result<()> {
    let (ra, rb) = (read(a)?, read(b)?);
    println!("A: {} (started {})", a.display(), ra.0.started);
    println!("B: {} (started {})", b.display(), rb.0.started);
    for line in lines(&ra, &rb) {
        println!("{line}");
    }
    Ok(())
}

fn read(dir: &Path) -> Result<(Record, String)> {
    if !dir.join(record::RECORD_FILE).is_file() {
        return Err(Error::Usage(format!(
            "--diff: {} holds no {} (a run recorded by an older fe-host, or not a run's version directory)",
            dir.display(),
            record::RECORD_FILE
        )));
    }
    let path = dir.join(record::MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    Ok((record::read(dir)?, text))
}

/// The report: a section each for settings, environment and final metrics, each `equal` or
/// a line per difference (`key: A | B`).
fn lines((a, a_text): &(Record, String), (b, b_text): &(Record, String)) -> Vec<String> {
    let mut out = Vec::new();
    let (sa, sb) = (
        record::resolved::flatten(a_text),
        record::resolved::flatten(b_text),
    );
    section(
        &mut out,
        "settings",
        sa.len().max(sb.len()),
        differences(&sa, &sb),
    );
    let (ea, eb) = (environment(a), environment(b));
    section(
        &mut out,
        "environment",
        ea.len().max(eb.len()),
        differences(&ea, &eb),
    );
    let (ma, mb) = (metrics(a), metrics(b));
    let count = ma.len().max(mb.len());
    if count == 0 {
        out.push("final metrics: none recorded (a run that has not ended)".to_owned());
    } else {
        section(&mut out, "final metrics", count, differences(&ma, &mb));
    }
    out
}

fn section(out: &mut Vec<String>, name: &str, count: usize, differing: Vec<String>) {
    if differing.is_empty() {
        out.push(format!("{name}: equal ({count} compared)"));
    } else {
        out.push(format!("{name}: {} of {count} differ", differing.len()));
        out.extend(differing.into_iter().map(|line| format!("  {line}")));
    }
}

fn differences<V: PartialEq + Display>(
    a: &BTreeMap<String, V>,
    b: &BTreeMap<String, V>,
) -> Vec<String> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let show = |v: Option<&V>| v.map_or("(absent)".to_owned(), ToString::to_string);
    keys.into_iter()
        .filter(|key| a.get(*key) != b.get(*key))
        .map(|key| format!("{key}: {} | {}", show(a.get(key)), show(b.get(key))))
        .collect()
}

/// What a run ran on, by name.
fn environment(record: &Record) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("fe-host".to_owned(), binary(&record.fe_host));
    for plugin in &record.plugins {
        out.insert(format!("plugin {}", plugin.name), binary(plugin));
    }
    out.insert("device".to_owned(), record.device.clone());
    out.insert("world size".to_owned(), record.world_size.to_string());
    out.insert("threads".to_owned(), record.threads.to_string());
    out.insert("seed".to_owned(), record.seed.to_string());
    for file in &record.data {
        out.insert(
            format!("data {}", file.path.display()),
            format!("{} bytes, {} {}", file.size, file.method, file.sha256),
        );
    }
    out
}

fn binary(binary: &record::Binary) -> String {
    format!("{} sha256 {}", binary.version, binary.sha256)
}

/// The final value of every key but timings, as `mode key`.
fn metrics(record: &Record) -> BTreeMap<String, f64> {
    let timing = |key: &str| crate::report::is_rate(key) || key.contains("(sec)");
    record
        .end
        .iter()
        .flat_map(|end| &end.metrics)
        .flat_map(|(mode, keys)| {
            keys.iter()
                .filter(|(key, _)| !timing(key))
                .map(move |(key, value)| (format!("{mode} {key}"), *value))
        })
        .collect()
}
