//! Every way a run can be refused or fail: one clear line, the documented exit code, no
//! panic message and no backtrace (RUST_BACKTRACE is set to prove it).

use crate::util::{lenet_manifest, line_of, run_failing, TempDir};

fn manifest(dir: &TempDir, text: &str) -> String {
    dir.write("m.toml", text).to_string_lossy().into_owned()
}

#[test]
fn malformed_manifest_points_at_line_and_column() {
    let dir = TempDir::new("malformed");
    let path = manifest(&dir, "[run]\nepochs = 2\nseed = = 3\n");
    let out = run_failing(&["run", &path], 2);
    assert_text_eq!(
        out.stderr,
        format!("error: {path}:3:8: run.seed: extra `=`, expected nothing\n")
    );
}

#[test]
fn unknown_manifest_key_names_line_column_and_key() {
    let dir = TempDir::new("unknown-key");
    let text = lenet_manifest(1, "").replace("seed = 7", "seed = 7\nepoch = 3");
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    let line = line_of(&text, "epoch = 3");
    assert!(
        out.stderr.starts_with(&format!(
            "error: {path}:{line}:1: run.epoch: unknown field `epoch`, expected one of"
        )),
        "{}",
        out.stderr
    );
}

#[test]
fn unknown_op_name_suggests_the_close_one() {
    let dir = TempDir::new("unknown-op");
    let text = lenet_manifest(1, "").replace("op = \"CrossEntropy\"", "op = \"CrossEntropyy\"");
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    let line = line_of(&text, "CrossEntropyy");
    assert_text_eq!(
        out.stderr,
        format!("error: {path}:{line}:1: network.ops[1].op: unknown tensor-op `CrossEntropyy`; did you mean `CrossEntropy`?\n")
    );
}

#[test]
fn unknown_config_field_names_the_field_and_the_plugin() {
    let dir = TempDir::new("unknown-field");
    let text =
        lenet_manifest(1, "").replace("outputs = \"ce\"", "outputs = \"ce\"\nfrom_logit = true");
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    let line = line_of(&text, "from_logit = true");
    assert!(
        out.stderr.starts_with(&format!(
            "error: {path}:{line}:1: network.ops[1].from_logit: unknown field `from_logit`, expected one of `from_logits`"
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.trim_end().ends_with("(fe-losses::CrossEntropy)"),
        "{}",
        out.stderr
    );
}

#[test]
fn model_config_errors_point_into_the_model_table() {
    let dir = TempDir::new("model-config");
    let text = lenet_manifest(1, "").replace(
        "architecture = \"LeNet\"",
        "architecture = \"LeNet\"\nclases = 10",
    );
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    let line = line_of(&text, "clases = 10");
    assert!(
        out.stderr.starts_with(&format!(
            "error: {path}:{line}:1: models[0].clases: unknown field `clases`"
        )),
        "{}",
        out.stderr
    );
}

#[test]
fn optimizer_errors_point_at_the_optimizer() {
    let dir = TempDir::new("optimizer");
    let text =
        lenet_manifest(1, "").replace("{ type = \"adam\", lr = 0.001 }", "{ type = \"adamax\" }");
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    assert_contains!(
        out.stderr,
        "models[0].optimizer.type: unknown optimizer `adamax` (adam, adamw, sgd, rmsprop)"
    );
}

#[test]
fn requesting_cuda_without_a_gpu_says_what_exists() {
    if tch::Cuda::is_available() {
        return; // This machine has a GPU: nothing to refuse.
    }
    let dir = TempDir::new("cuda");
    let path = manifest(&dir, &lenet_manifest(1, ""));
    let out = run_failing(&["run", &path, "--device", "cuda:0"], 4);
    assert_text_eq!(
        out.stderr,
        "error: device cuda:0 was requested but libtorch sees 0 CUDA device(s); libtorch_cuda is loaded; use --device cpu (or auto)\n"
    );
    let out = run_failing(&["run", &path, "--device", "cuda:3"], 4);
    assert_contains!(
        out.stderr,
        "device cuda:3 was requested but libtorch sees 0 CUDA device(s)"
    );
}

#[test]
fn bad_device_name_is_a_usage_error() {
    let dir = TempDir::new("device-name");
    let path = manifest(&dir, &lenet_manifest(1, ""));
    let out = run_failing(&["run", &path, "--device", "gpu"], 2);
    assert_text_eq!(
        out.stderr,
        "error: unknown device `gpu` (expected auto, cpu, cuda or cuda:N)\n"
    );
}

#[test]
fn plugin_op_that_panics_names_plugin_op_and_step() {
    let dir = TempDir::new("panic-op");
    let text = lenet_manifest(1, "").replace(
        "[[network.ops]]\nop = \"UpdateOp\"",
        "[[network.ops]]\nop = \"Panic\"\ninputs = \"ce\"\noutputs = \"ce\"\nat_step = 3\n\n[[network.ops]]\nop = \"UpdateOp\"",
    );
    // Without the warm-up pass, the op's third call is the third training step.
    let path = manifest(&dir, &text.replace("[run]\n", "[run]\nwarmup = false\n"));
    let out = run_failing(&["run", &path], 1);
    assert!(
        out.stderr.starts_with(
            "error: fe-faulty::Panic panicked in forward (train epoch 1, step 3, batch 3): deliberate panic in forward (at tests/fixtures/faulty-plugin/src/lib.rs:"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn warmup_catches_a_failing_op_before_the_first_step() {
    let dir = TempDir::new("warmup-panic");
    let text = lenet_manifest(1, "").replace(
        "[[network.ops]]\nop = \"UpdateOp\"",
        "[[network.ops]]\nop = \"Panic\"\ninputs = \"ce\"\noutputs = \"ce\"\nmode = \"eval\"\n\n[[network.ops]]\nop = \"UpdateOp\"",
    );
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 1);
    assert!(
        out.stderr.starts_with("error: fe-faulty::Panic panicked in forward (warm-up, eval epoch 1): deliberate panic in forward"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stdout.contains("fe-host train: step: 1;"),
        "training must not have started:\n{}",
        out.stdout
    );
}

#[test]
fn op_whose_libtorch_call_fails_names_the_libtorch_error() {
    // MeanSquaredError between [32, 10] probabilities and [32] labels: a broadcast error
    // returned by libtorch (an error, not a panic).
    let dir = TempDir::new("shape-error");
    let text = lenet_manifest(1, "").replace("op = \"CrossEntropy\"", "op = \"MeanSquaredError\"");
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 1);
    assert_text_eq!(
        out.stderr,
        "error: fe-losses::MeanSquaredError failed in forward (warm-up, train epoch 1): The size of tensor a (10) must match the size of tensor b (32) at non-singleton dimension 1 [MeanSquaredError (network.ops[1])]\n"
    );
}

#[test]
fn libtorch_exception_inside_a_plugin_is_caught_and_cut_to_one_line() {
    let dir = TempDir::new("libtorch-panic");
    let text = lenet_manifest(1, "").replace(
        "[[network.ops]]\nop = \"CrossEntropy\"",
        "[[network.ops]]\nop = \"BadMatmul\"\ninputs = \"y_pred\"\noutputs = \"z\"\n\n[[network.ops]]\nop = \"CrossEntropy\"",
    );
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 1);
    assert_text_eq!(
        out.stderr,
        "error: fe-faulty::BadMatmul panicked in forward (warm-up, train epoch 1): mat1 and mat2 shapes cannot be multiplied (32x10 and 3x3) [BadMatmul (network.ops[1])]\n"
    );
}

#[test]
fn failing_trace_names_trace_hook_and_epoch() {
    let dir = TempDir::new("failing-trace");
    let text = lenet_manifest(2, "\n[[traces]]\ntrace = \"FailingTrace\"\nepoch = 1\n").replace(
        "[run]\n",
        "[run]\ntrain_steps_per_epoch = 5\neval_steps_per_epoch = 2\n",
    );
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 1);
    assert_contains!(out.stderr, "error: fe-faulty::FailingTrace failed in on_epoch_end (train epoch 1, step 5, batch 5): deliberate failure at the end of epoch 1");
}

#[test]
fn missing_key_fails_before_training_naming_key_and_mode() {
    let dir = TempDir::new("missing-key");
    let text = lenet_manifest(1, "").replace(
        "inputs = [\"y_pred\", \"y\"]\noutputs = \"ce\"",
        "inputs = [\"y_pred\", \"label\"]\noutputs = \"ce\"",
    );
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    // Pointed at the line naming the key; what earlier ops wrote is listed with the batch's
    // keys (a typo in either shows next to the name meant).
    let line = line_of(&text, "inputs = [\"y_pred\", \"label\"]");
    assert_text_eq!(
        out.stderr,
        format!(
            "error: {path}:{line}:1: network.ops[1].inputs: CrossEntropy (network.ops[1]) needs key `label` in train (epoch 1), but no dataset key or earlier op provides it (available: x, y, y_pred)\n"
        )
    );
}

#[test]
fn a_trace_input_nothing_provides_points_at_its_line() {
    let dir = TempDir::new("missing-trace-key");
    let text = lenet_manifest(
        1,
        "\n[[traces]]\ntrace = \"Accuracy\"\ninputs = [\"y\", \"y_prd\"]\noutputs = \"acc\"\n",
    );
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    let line = line_of(&text, "inputs = [\"y\", \"y_prd\"]");
    assert_contains!(
        out.stderr,
        format!("error: {path}:{line}:1: traces[1].inputs: Accuracy (traces[1]) needs `y_prd` in eval (epoch 1)")
    );
}

#[test]
fn a_watched_metric_nothing_logs_points_at_the_key_that_names_it() {
    let dir = TempDir::new("missing-watched-key");
    let saver = "\n[[traces]]\ntrace = \"BestModelSaver\"\nmodel = \"lenet\"\nsave_dir = \"best\"\nmetric = \"accurcy\"\n";
    let text = lenet_manifest(1, saver);
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    let line = line_of(&text, "metric = \"accurcy\"");
    assert_contains!(
        out.stderr,
        format!(
            "error: {path}:{line}:1: traces[1].metric: BestModelSaver (traces[1]) needs `accurcy`"
        )
    );
}

#[test]
fn a_trace_output_something_stands_in_the_way_of_is_refused_at_its_key_before_training() {
    let dir = TempDir::new("trace-output-blocked");
    std::fs::write(dir.path().join("taken"), "a file").unwrap();
    std::fs::create_dir_all(dir.path().join("logs.csv")).unwrap();
    for (trace, key, expected) in [
        (
            "trace = \"BestModelSaver\"\nmodel = \"lenet\"\nsave_dir = \"taken\"",
            "save_dir",
            "taken is a file, not a directory",
        ),
        (
            "trace = \"CSVLogger\"\nfilename = \"taken/log.csv\"",
            "filename",
            "taken is a file, not a directory",
        ),
        (
            "trace = \"CSVLogger\"\nfilename = \"logs.csv\"",
            "filename",
            "logs.csv is a directory; name a file",
        ),
    ] {
        let text = lenet_manifest(1, &format!("\n[[traces]]\n{trace}\n"));
        let path = manifest(&dir, &text);
        let out = run_failing(&["run", &path], 2);
        let line = line_of(&text, &format!("{key} = "));
        assert_contains!(
            out.stderr,
            format!("error: {path}:{line}:1: traces[1].{key}: ")
        );
        assert_contains!(out.stderr, expected);
        assert!(!out.stdout.contains("fe-host train:"), "{}", out.stdout);
    }
}

/// A checkpoint monitor nothing logs in evaluation would rank no checkpoint: `keep_best` would
/// keep none by it and the run end without its best value, with exit 0.
#[test]
fn a_checkpoint_monitor_evaluation_never_logs_is_refused_at_its_line() {
    let dir = TempDir::new("monitor-typo");
    let accuracy = "\n[[traces]]\ntrace = \"Accuracy\"\ninputs = [\"y\", \"y_pred\"]\noutputs = \"accuracy\"\n";
    let checkpoint = "\n[checkpoint]\nevery_epochs = 1\nkeep_best = 1\nmonitor = \"accurcy\"\nbest_mode = \"max\"\n";
    let text = lenet_manifest(1, &format!("{accuracy}{checkpoint}"));
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    let line = line_of(&text, "monitor = \"accurcy\"");
    assert_contains!(
        out.stderr,
        format!("error: {path}:{line}:1: checkpoint.monitor: `accurcy` is not a value evaluation logs (it logs: accuracy, ce,")
    );
    // Spelt right, it runs (`render` checks the same way without training).
    let text = text.replace("\"accurcy\"", "\"accuracy\"");
    let path = manifest(&dir, &text);
    let out = crate::util::run(&["render", &path]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// Targets written after training are checked before it: a run whose `--summary` or
/// `--save-weights` could not be written would train, then fail.
#[test]
fn output_targets_that_cannot_be_written_are_refused_before_training() {
    let dir = TempDir::new("output-targets");
    let path = manifest(&dir, &lenet_manifest(1, ""));
    let nowhere = dir.path().join("no/such/dir/summary.json");
    let out = run_failing(&["run", &path, "--summary", &nowhere.to_string_lossy()], 2);
    assert_contains!(out.stderr, "the directory");
    assert!(!out.stdout.contains("fe-host start"), "{}", out.stdout);
    let file = dir.write("taken", "x");
    let out = run_failing(
        &["run", &path, "--save-weights", &file.to_string_lossy()],
        2,
    );
    assert_contains!(out.stderr, "is an existing file, not a directory");
    assert!(!out.stdout.contains("fe-host start"), "{}", out.stdout);
    // A checkpoint folder that is a file: at its key, not a bare OS error after training.
    let set = format!("checkpoint.dir={}", file.display());
    let text = lenet_manifest(1, "\n[checkpoint]\ndir = \"ckpt\"\nevery_epochs = 1\n");
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path, "--set", &set], 2);
    assert_contains!(out.stderr, "checkpoint.dir: ");
    assert_contains!(out.stderr, "is an existing file, not a directory");
}

#[test]
fn missing_key_in_one_dataset_names_its_ds_id() {
    let dir = TempDir::new("missing-key-ds");
    let extra = "\n[[network.ops]]\nop = \"MeanSquaredError\"\ninputs = [\"y_pred\", \"label\"]\noutputs = \"extra\"\nmode = \"eval\"\nds_id = \"holdout\"\n";
    let text = lenet_manifest(1, extra).replace(
        "[pipeline.data.eval]\n",
        "[[pipeline.data.eval]]\nds_id = \"holdout\"\n",
    );
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 2);
    assert_contains!(
        out.stderr,
        "MeanSquaredError (network.ops[3]) needs key `label` in eval (epoch 1, ds_id holdout)"
    );
}

#[test]
fn missing_dataset_file_is_a_data_error() {
    let dir = TempDir::new("missing-data");
    let text = lenet_manifest(1, "").replace("train-images-idx3-ubyte", "no-such-file");
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 5);
    assert_contains!(
        out.stderr,
        "no-such-file: cannot read: No such file or directory"
    );
}

#[test]
fn truncated_dataset_file_says_which_and_why() {
    let dir = TempDir::new("truncated-data");
    let [x, ..] = crate::util::digits();
    let bytes = std::fs::read(x).expect("read images");
    let cut = dir.path().join("cut-images");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let text =
        lenet_manifest(1, "").replacen(&x.display().to_string(), &cut.display().to_string(), 1);
    let path = manifest(&dir, &text);
    let out = run_failing(&["run", &path], 5);
    assert_contains!(out.stderr, format!("error: {}: truncated: header says 4000x28x28 u8 values (3136000 bytes of data) but the file has 1567992 bytes after the header", cut.display()));
}

#[test]
fn filtering_or_batching_in_post_processing_is_refused_at_the_op() {
    let dir = TempDir::new("post-filter");
    let filter = "\n[[network.postprocessing]]\nop = \"RemoveIf\"\ninputs = \"y\"\ncompare = \"eq\"\nvalue = 3\n";
    let path = manifest(&dir, &lenet_manifest(1, filter));
    let out = run_failing(&["run", &path], 2);
    assert_contains!(
        out.stderr,
        "network.postprocessing[0].op: filtering is not supported in network post-processing"
    );
    let batch = "\n[[network.postprocessing]]\nop = \"Batch\"\nbatch_size = 4\n";
    let path = manifest(&dir, &lenet_manifest(1, batch));
    let out = run_failing(&["run", &path], 2);
    assert_contains!(
        out.stderr,
        "network.postprocessing[0].op: post-processing data is already batched"
    );
}

#[test]
fn a_closed_stdout_is_a_normal_end() {
    use std::os::fd::{FromRawFd, OwnedFd};
    // A pipe whose reading end is closed before fe-host starts: every write to stdout fails
    // with EPIPE, as in `fe-host ... | head` once head has exited.
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    unsafe { libc::close(fds[0]) };
    let write_end = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    let dir = TempDir::new("closed-stdout");
    let out = crate::util::fe_host()
        .args(["datagen", "digits", "--out"])
        .arg(dir.path().join("d"))
        .args(["--train", "4", "--eval", "4", "--test", "0"])
        .stdout(std::process::Stdio::from(write_end))
        .output()
        .expect("run fe-host");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "", "nothing is reported for a closed stdout");
}

#[test]
fn quiet_resume_prints_nothing() {
    let dir = TempDir::new("quiet-resume");
    let text = lenet_manifest(1, "\n[checkpoint]\ndir = \"ck\"\nevery_epochs = 1\n").replace(
        "[run]\n",
        "[run]\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1\n",
    );
    let path = manifest(&dir, &text);
    let first = crate::util::run(&["run", &path, "--quiet"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let resumed = crate::util::run(&["run", &path, "--quiet", "--resume", "--epochs", "2"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(
        resumed.stdout, "",
        "--quiet prints nothing, the resume line included"
    );
}

#[test]
fn a_zero_limit_or_top_k_is_refused_before_any_model_runs() {
    let dir = TempDir::new("zero-counts");
    let path = manifest(&dir, &lenet_manifest(1, ""));
    for flag in ["--limit", "--top-k"] {
        let out = run_failing(
            &[
                "predict",
                &path,
                "--random-weights",
                "--input",
                "missing.npy",
                "--out",
                "p.csv",
                flag,
                "0",
            ],
            2,
        );
        assert_contains!(out.stderr, &format!("invalid value '0' for '{flag} "));
        assert_contains!(out.stderr, "must be at least 1");
    }
}

#[test]
fn transform_with_nothing_to_write_is_a_usage_error_not_an_empty_file() {
    let dir = TempDir::new("transform-nothing");
    let [x, y, _, _] = crate::util::digits();
    let path = manifest(
        &dir,
        &format!(
            "[pipeline]\nbatch_size = 4\n\n[pipeline.data.infer]\ntype = \"idx\"\nfiles = {{ x = \"{}\", y = \"{}\" }}\n\n[[pipeline.ops]]\nop = \"Minmax\"\ninputs = \"x\"\noutputs = \"scaled\"\n",
            x.display(),
            y.display()
        ),
    );
    let out = dir.path().join("out.safetensors");
    let run = run_failing(
        &[
            "transform",
            &path,
            "--out",
            &out.to_string_lossy(),
            "--limit",
            "8",
        ],
        2,
    );
    assert_contains!(
        run.stderr,
        "the network produces no keys in infer mode; choose what to write with --key (the batch has: x, y, scaled)"
    );
    assert!(!out.exists(), "an empty file was written");
}
