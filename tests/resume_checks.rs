//! What a resume checks before it trains: optimizer and random state that fit the run they
//! are loaded into, and an epoch count that leaves something to train.

use std::path::Path;

use tch::Tensor;

use crate::checkpoints::{full_run, manifest, rehash, run_in};
use crate::util::copy_dir;
use crate::util::{Run, TempDir};

type Edit = fn(&mut Vec<(String, Tensor)>);

/// Edits the tensors of `file` in a copy of `source`'s checkpoint `ckpt-6`, rehashes it (so
/// only the check under test can catch the edit) and resumes from it: refused with exit 6
/// before anything trains, on one line containing `needle`.
fn refused(dir: &TempDir, source: &Path, name: &str, file: &str, edit: Edit, needle: &str) {
    let target = dir.path().join(name);
    std::fs::create_dir_all(target.join("ckpt-6")).unwrap();
    copy_dir(&source.join("ckpt/ckpt-6"), &target.join("ckpt-6"));
    std::fs::copy(source.join("m.toml"), target.join("m.toml")).unwrap();
    let path = target.join("ckpt-6").join(file);
    let mut tensors = fe_host::system::tensors::read(&path).unwrap();
    edit(&mut tensors);
    fe_host::system::tensors::write(&path, &tensors).unwrap();
    rehash(&target.join("ckpt-6"));
    let out: Run = run_in(&target, &["--resume", "ckpt-6"]);
    assert_eq!(out.code, 6, "{name}: {}{}", out.stdout, out.stderr);
    assert_contains!(out.stderr, needle);
    assert_eq!(out.stderr.lines().count(), 1, "{name}: {}", out.stderr);
    assert!(
        !out.stdout.contains("fe-host train"),
        "{name}: nothing may train"
    );
}

fn position(tensors: &[(String, Tensor)], name: &str) -> usize {
    tensors.iter().position(|(n, _)| n == name).unwrap()
}

#[test]
fn optimizer_and_random_state_that_do_not_fit_the_run_are_refused_naming_the_tensor() {
    let dir = TempDir::new("state-fit");
    let source = full_run(&dir, "source", &manifest(""), &[]);
    let optim = "optim/lenet.0.safetensors";
    let moment = |tensors: &[(String, Tensor)]| {
        let (_, t) = &tensors[position(tensors, "exp_avg_sq/0")];
        format!("is Float {:?}", t.size())
    };
    let saved = fe_host::system::tensors::read(&source.join("ckpt/ckpt-6").join(optim)).unwrap();
    let full = moment(&saved);
    let mut half = saved
        .iter()
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect::<Vec<_>>();
    let i = position(&half, "exp_avg_sq/0");
    half[i].1 = half[i].1.narrow(0, 0, half[i].1.size()[0] / 2);
    let halved = moment(&half);

    // Half the moment's rows: the fused Adam kernel read past it (a segfault, exit 139).
    refused(
        &dir,
        &source,
        "shape",
        optim,
        |t| {
            let i = position(t, "exp_avg_sq/0");
            t[i].1 = t[i].1.narrow(0, 0, t[i].1.size()[0] / 2);
        },
        &format!("ckpt-6/{optim}: `exp_avg_sq/0` {halved} but parameter 0 of model `lenet` (`"),
    );
    assert_ne!(full, halved);
    // Without it the moment restarted from zero, silently.
    refused(
        &dir,
        &source,
        "missing",
        optim,
        |t| {
            let _ = t.remove(position(t, "exp_avg_sq/0"));
        },
        &format!("ckpt-6/{optim}: is missing `exp_avg_sq/0` for parameter 0 of model `lenet`"),
    );
    // As float64 it failed a step later (exit 1).
    refused(
        &dir,
        &source,
        "dtype",
        optim,
        |t| {
            let i = position(t, "exp_avg_sq/0");
            t[i].1 = t[i].1.to_kind(tch::Kind::Double);
        },
        "`exp_avg_sq/0` is Double [",
    );
    refused(
        &dir,
        &source,
        "extra",
        optim,
        |t| {
            let copy = t[0].1.copy();
            t.push(("velocity/0".into(), copy));
        },
        &format!("ckpt-6/{optim}: has `velocity/0`, which is no state of this optimizer"),
    );
    // Without the CPU generator state the run resumed on a fresh stream, silently.
    refused(
        &dir,
        &source,
        "rng",
        "rng.safetensors",
        |t| {
            let _ = t.remove(position(t, "cpu"));
        },
        "ckpt-6/rng.safetensors: is missing `cpu`, the CPU random state",
    );
}

#[test]
fn an_epoch_count_that_ends_before_the_checkpoint_is_a_usage_error() {
    let dir = TempDir::new("epochs-left");
    let source = full_run(&dir, "source", &manifest(""), &[]);
    // ckpt-8 is inside epoch 2: one epoch leaves nothing to train (it used to exit 0).
    let out = run_in(&source, &["--resume", "ckpt/ckpt-8", "--epochs", "1"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_contains!(
        out.stderr,
        "ckpt-8: the checkpoint is at step 8, inside epoch 2 (2 batches done), and --epochs 1 leaves nothing to train: pass --epochs 2 or more"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    let out = run_in(&source, &["--resume", "--epochs", "2"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_contains!(
        out.stderr,
        "after epoch 3, and --epochs 2 leaves nothing to train: pass --epochs 4 or more to train further"
    );
    // The finished run resumed as it ended still ends at once, successfully.
    let out = run_in(&source, &["--resume", "-q"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
}
