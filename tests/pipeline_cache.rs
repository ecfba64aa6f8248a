//! `[pipeline] cache`: the leading deterministic ops run once and later runs read their
//! outputs; the cached run trains bit for bit like an uncached one (resumed mid-epoch too);
//! changed data or op configuration fills a new cache; an unwritable cache costs a warning.

use std::path::{Path, PathBuf};

use crate::checkpoints::{manifest, run_in};
use crate::util::{digits, Run, TempDir};

/// The checkpoints tests' LeNet run (Minmax and ExpandDims, both cacheable, then the random
/// Noise, which is not) reading `data`'s copies of the digits, cached in `cache` (`None`: no
/// cache).
fn cached_manifest(data: &Path, cache: Option<&Path>) -> String {
    let mut text = manifest("");
    for file in digits() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        text = text.replace(
            &file.display().to_string(),
            &data.join(name).display().to_string(),
        );
    }
    match cache {
        Some(cache) => text.replacen(
            "batch_size = 32\n",
            &format!("batch_size = 32\ncache = \"{}\"\n", cache.display()),
            1,
        ),
        None => text,
    }
}

fn copy_digits(dir: &TempDir) -> PathBuf {
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for file in digits() {
        std::fs::copy(file, data.join(file.file_name().unwrap())).unwrap();
    }
    data
}

/// Runs `text` in `dir/name` with weights and summary saved (`args` added).
fn run_named(dir: &TempDir, name: &str, text: &str, args: &[&str]) -> (PathBuf, Run) {
    let run_dir = dir.path().join(name);
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::write(run_dir.join("m.toml"), text).unwrap();
    let mut all = vec!["--save-weights", "weights", "--summary", "summary.json"];
    all.extend_from_slice(args);
    let out = run_in(&run_dir, &all);
    assert_eq!(out.code, 0, "{name}: {}{}", out.stdout, out.stderr);
    (run_dir, out)
}

fn weights(run: &Path) -> Vec<u8> {
    std::fs::read(run.join("weights/lenet.safetensors")).unwrap()
}

fn history(run: &Path) -> serde_json::Value {
    let summary = std::fs::read_to_string(run.join("summary.json")).unwrap();
    crate::util::history_without_timings(serde_json::from_str(&summary).unwrap())
}

fn assert_same(a: &Path, b: &Path) {
    assert!(
        weights(a) == weights(b),
        "weights differ: {} {}",
        a.display(),
        b.display()
    );
    assert_eq!(history(a), history(b), "{} {}", a.display(), b.display());
}

fn cache_files(cache: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cache)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_second_run_reads_the_cache_and_trains_bit_for_bit_like_an_uncached_one() {
    let dir = TempDir::new("pipeline-cache");
    let data = copy_digits(&dir);
    let cache = dir.path().join("cache");
    let (plain, _) = run_named(&dir, "plain", &cached_manifest(&data, None), &[]);
    let text = cached_manifest(&data, Some(&cache));

    let (first, out) = run_named(&dir, "first", &text, &[]);
    assert_contains!(out.stderr, "pipeline cache: train epoch 1 (2 op(s)) filled");
    assert_contains!(out.stderr, "pipeline cache: eval epoch 1 (2 op(s)) filled");
    assert!(!out.stderr.contains("reads"), "{}", out.stderr);
    // One complete file per mode; no temporary is left behind.
    let files = cache_files(&cache);
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().all(|f| f.ends_with(".fecache")), "{files:?}");
    assert_same(&plain, &first);

    let (second, out) = run_named(&dir, "second", &text, &[]);
    assert_contains!(out.stderr, "pipeline cache: train epoch 1 (2 op(s)) reads");
    assert_contains!(out.stderr, "pipeline cache: eval epoch 1 (2 op(s)) reads");
    assert!(!out.stderr.contains("filled"), "{}", out.stderr);
    assert_eq!(cache_files(&cache), files);
    assert_same(&plain, &second);

    // Resumed mid-epoch from the uncached run's checkpoint, reading the cache: the random op
    // after the cached ones keeps its draws, so the run ends as the uninterrupted one.
    let from = plain.join("ckpt/ckpt-8");
    let (resumed, out) = run_named(
        &dir,
        "resumed",
        &text,
        &["--resume", &from.to_string_lossy()],
    );
    assert_contains!(out.stderr, "reads");
    assert_same(&plain, &resumed);

    // The comparisons can fail, and the runs above did read the files: a pixel of sample 0
    // (which evaluation reads) changed in the cache changes the run.
    for name in &files {
        let damaged = cache.join(name);
        let mut bytes = std::fs::read(&damaged).unwrap();
        // Four bytes: one of them is a float's exponent, whatever the keys' order.
        for byte in &mut bytes[100..104] {
            *byte ^= 0x40;
        }
        std::fs::write(&damaged, bytes).unwrap();
    }
    let (changed, _) = run_named(&dir, "changed", &text, &[]);
    assert!(weights(&changed) != weights(&plain) || history(&changed) != history(&plain));
}

#[test]
fn changed_op_configuration_or_touched_data_fills_a_new_cache() {
    let dir = TempDir::new("pipeline-cache-invalidation");
    let data = copy_digits(&dir);
    let cache = dir.path().join("cache");
    let text = cached_manifest(&data, Some(&cache));
    let (_, out) = run_named(&dir, "first", &text, &["--epochs", "1"]);
    assert_contains!(out.stderr, "train epoch 1 (2 op(s)) filled");
    let before = cache_files(&cache);

    // Another configuration of a cached op (the same axis, written as a negative index):
    // another key.
    let edited = text.replacen("axis = 0", "axis = -3", 1);
    assert_ne!(edited, text);
    let (_, out) = run_named(&dir, "edited", &edited, &["--epochs", "1"]);
    assert_contains!(out.stderr, "train epoch 1 (2 op(s)) filled");
    let after_edit = cache_files(&cache);
    assert_eq!(after_edit.len(), before.len() + 2, "{after_edit:?}");

    // The original configuration reads its file again.
    let (_, out) = run_named(&dir, "again", &text, &["--epochs", "1"]);
    assert_contains!(out.stderr, "train epoch 1 (2 op(s)) reads");

    // Touched data: one pixel of the training images changes, and so does every key.
    let images = data.join("train-images-idx3-ubyte");
    let mut bytes = std::fs::read(&images).unwrap();
    let last = bytes.len() - 1;
    bytes[last] = bytes[last].wrapping_add(1);
    std::fs::write(&images, bytes).unwrap();
    let (_, out) = run_named(&dir, "touched", &text, &["--epochs", "1"]);
    assert_contains!(out.stderr, "train epoch 1 (2 op(s)) filled");
    assert_contains!(out.stderr, "eval epoch 1 (2 op(s)) filled");
    assert_eq!(cache_files(&cache).len(), after_edit.len() + 2);
}

#[test]
fn an_unwritable_cache_warns_once_and_the_run_goes_on_uncached() {
    let dir = TempDir::new("pipeline-cache-read-only");
    let data = copy_digits(&dir);
    let cache = dir.path().join("read-only");
    std::fs::create_dir_all(&cache).unwrap();
    let mut permissions = std::fs::metadata(&cache).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o555);
    std::fs::set_permissions(&cache, permissions).unwrap();
    // Root writes into read-only directories: there, a path under a regular file stands in
    // for a cache nobody can write.
    let cache = if std::fs::write(cache.join("probe"), b"").is_ok() {
        let blocker = dir.path().join("blocker");
        std::fs::write(&blocker, b"").unwrap();
        blocker.join("cache")
    } else {
        cache
    };
    let (plain, _) = run_named(&dir, "plain", &cached_manifest(&data, None), &[]);
    let (cached, out) = run_named(&dir, "cached", &cached_manifest(&data, Some(&cache)), &[]);
    assert_eq!(
        out.stderr.matches("warning: pipeline cache:").count(),
        1,
        "{}",
        out.stderr
    );
    assert_contains!(out.stderr, "the run goes on without the cache");
    assert!(!out.stderr.contains("filled"), "{}", out.stderr);
    assert_same(&plain, &cached);
}

/// Two ranks on one machine sharing the cache directory fill each file once: the first to
/// take the file's lock fills it, the other waits and reads it (instead of both decoding the
/// whole dataset); the run trains bit for bit like the same 2 ranks without the cache.
#[test]
fn ranks_sharing_a_cache_fill_it_once_and_train_like_uncached_ranks() {
    use crate::dist::{spawn_ranks, wait_all};
    let dir = TempDir::new("pipeline-cache-ranks");
    let data = copy_digits(&dir);
    let cache = dir.path().join("cache");
    let train_ranks = |name: &str, text: &str| {
        let at = TempDir::new(name);
        at.write("m.toml", text);
        let args = [
            "run",
            "m.toml",
            "--save-weights",
            "weights",
            "--summary",
            "summary.json",
        ];
        let runs = wait_all(spawn_ranks(&at, 2, &args, &[]));
        for (rank, run) in runs.iter().enumerate() {
            assert_eq!(run.code, 0, "{name} rank {rank}: {}", run.stderr);
        }
        (at, runs)
    };
    let (plain, _) = train_ranks("cache-ranks-plain", &cached_manifest(&data, None));
    let (cached, runs) = train_ranks("cache-ranks-cached", &cached_manifest(&data, Some(&cache)));
    for mode in ["train", "eval"] {
        let said = |what: &str| {
            let line = format!("pipeline cache: {mode} epoch 1 (2 op(s)) {what}");
            runs.iter().filter(|run| run.stderr.contains(&line)).count()
        };
        let all = format!("{}\n{}", runs[0].stderr, runs[1].stderr);
        assert_eq!((said("filled"), said("reads")), (1, 1), "{mode}:\n{all}");
    }
    assert_eq!(cache_files(&cache).len(), 2, "{:?}", cache_files(&cache));
    assert_same(plain.path(), cached.path());
}
