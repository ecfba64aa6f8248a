//! Epoch and repeat schedules, learning-rate schedules and `fe-host render`, through the
//! binary with the real plugins.

use crate::util::{digits, run_failing, run_with_summary, steps, summary, TempDir};

/// A LeNet run on the small digits set with `schedule_parts` spliced in: the batch size, the
/// loss ops, the optimizer and any extra sections.
fn manifest(run: &str, batch_size: &str, optimizer: &str, ops: &str, extra: &str) -> String {
    let [x, y, ex, ey] = digits();
    format!(
        r#"[run]
seed = 3
{run}

[pipeline]
batch_size = {batch_size}

[pipeline.data.train]
type = "idx"
files = {{ x = "{x}", y = "{y}" }}

[pipeline.data.eval]
type = "idx"
files = {{ x = "{ex}", y = "{ey}" }}

[[pipeline.ops]]
op = "Minmax"
inputs = "x"
outputs = "x"

[[pipeline.ops]]
op = "ExpandDims"
inputs = "x"
outputs = "x"
axis = 0

[[models]]
name = "lenet"
architecture = "LeNet"
input_shape = [1, 28, 28]
classes = 10
optimizer = {optimizer}

[[network.ops]]
op = "ModelOp"
model = "lenet"
inputs = "x"
outputs = "y_pred"
{ops}
{extra}"#,
        x = x.display(),
        y = y.display(),
        ex = ex.display(),
        ey = ey.display(),
    )
}

const CROSS_ENTROPY: &str = r#"
[[network.ops]]
op = "CrossEntropy"
inputs = ["y_pred", "y"]
outputs = "ce"

[[network.ops]]
op = "UpdateOp"
model = "lenet"
loss = "ce"
"#;

const ACCURACY: &str = r#"
[[traces]]
trace = "Accuracy"
inputs = ["y", "y_pred"]
outputs = "accuracy"
"#;

#[test]
fn a_curriculum_switches_loss_at_epoch_3_and_doubles_the_batch_at_epoch_2() {
    let ops = r#"
[[pipeline.ops]]
[pipeline.ops.epoch.3]
op = "Onehot"
inputs = "y"
outputs = "y_onehot"
num_classes = 10

[[network.ops]]
[network.ops.epoch.1]
op = "CrossEntropy"
inputs = ["y_pred", "y"]
outputs = "ce"
[network.ops.epoch.3]
op = "FocalLoss"
inputs = ["y_pred", "y_onehot"]
outputs = "focal"

[[network.ops]]
[network.ops.epoch.1]
op = "UpdateOp"
model = "lenet"
loss = "ce"
[network.ops.epoch.3]
op = "UpdateOp"
model = "lenet"
loss = "focal"
"#;
    let text = manifest(
        "epochs = 4\nlog_steps = 25",
        "{ epoch = { 1 = 32, 2 = 64 } }",
        "\"adam\"",
        ops,
        ACCURACY,
    );
    let dir = TempDir::new("curriculum");
    let (out, summary) = run_with_summary(&dir, &text);
    let schedule_lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("fe-host schedule:"))
        .collect();
    assert_eq!(
        schedule_lines,
        [
            "fe-host schedule: epoch 2: pipeline.batch_size: 32 => 64;",
            "fe-host schedule: epoch 3: pipeline.ops[2]: none => Onehot(y -> y_onehot); \
             network.ops[1]: CrossEntropy(y_pred, y -> ce) => FocalLoss(y_pred, y_onehot -> focal); \
             network.ops[2]: UpdateOp { loss = \"ce\", model = \"lenet\" } => UpdateOp { loss = \"focal\", model = \"lenet\" };",
        ]
    );
    // 4000 samples: 125 batches of 32 in epoch 1, then 63 of 64 (the last one short).
    let eval_steps: Vec<u64> = steps(&summary, "eval", "accuracy")
        .iter()
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(eval_steps, [125, 188, 251, 314]);
    // The cross-entropy trains epochs 1-2 and the focal loss epochs 3-4.
    let ce = steps(&summary, "train", "ce");
    let focal = steps(&summary, "train", "focal");
    assert!(
        !ce.is_empty() && ce.iter().all(|(s, _)| *s <= 188),
        "{ce:?}"
    );
    assert!(
        !focal.is_empty() && focal.iter().all(|(s, _)| *s > 188),
        "{focal:?}"
    );
    let eval_ce = steps(&summary, "eval", "ce");
    let eval_focal = steps(&summary, "eval", "focal");
    assert_eq!(
        eval_ce.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [125, 188]
    );
    assert_eq!(
        eval_focal.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [251, 314]
    );
    let accuracy = steps(&summary, "eval", "accuracy");
    assert!(
        accuracy[3].1 > 0.8,
        "the curriculum still learns: {accuracy:?}"
    );
}

#[test]
fn an_epoch_4_op_that_needs_a_missing_key_fails_before_epoch_1() {
    let ops = r#"
[[network.ops]]
op = "CrossEntropy"
inputs = ["y_pred", "y"]
outputs = "ce"

[[network.ops]]
[network.ops.epoch.4]
op = "CrossEntropy"
inputs = ["y_pred", "y_smooth"]
outputs = "ce_smooth"

[[network.ops]]
op = "UpdateOp"
model = "lenet"
loss = "ce"
"#;
    let dir = TempDir::new("epoch4");
    let path = dir.write("m.toml", &manifest("epochs = 5", "32", "\"adam\"", ops, ""));
    let out = run_failing(&["run", &path.to_string_lossy()], 2);
    assert_contains!(
        out.stderr,
        "CrossEntropy (network.ops[2].epoch.4) needs key `y_smooth` in train (epoch 4)"
    );
    assert_eq!(out.stdout, "", "nothing may run before the check");
}

#[test]
fn a_scheduled_trace_comes_back_with_its_state() {
    let traces = r#"
[[traces]]
repeat = [{ trace = "CountBatches", mode = "train" }, "none"]
"#;
    let text = manifest(
        "epochs = 3\ntrain_steps_per_epoch = 3\neval_steps_per_epoch = 1",
        "32",
        "\"adam\"",
        CROSS_ENTROPY,
        traces,
    );
    let dir = TempDir::new("trace-state");
    let summary = summary(&dir, &text);
    // The same instance runs in epochs 1 and 3: it has seen 3 batches, then 6.
    assert_eq!(
        steps(&summary, "train", "batches_seen"),
        [(3, 3.0), (9, 6.0)]
    );
}

#[test]
fn an_lr_schedule_in_the_optimizer_sets_the_rate_each_epoch() {
    let optimizer =
        "{ type = \"sgd\", lr = { schedule = \"step_decay\", init_lr = 0.04, step_size = 1, gamma = 0.5, by = \"epoch\" } }";
    let text = manifest(
        "epochs = 3\ntrain_steps_per_epoch = 4\neval_steps_per_epoch = 1",
        "32",
        optimizer,
        CROSS_ENTROPY,
        "",
    );
    let dir = TempDir::new("lr-epoch");
    let summary = summary(&dir, &text);
    assert_eq!(
        steps(&summary, "train", "lenet_lr"),
        [(1, 0.04), (4, 0.04), (8, 0.02), (12, 0.01)]
    );
}

#[test]
fn the_lr_scheduler_trace_follows_cosine_decay_per_step() {
    let trace = r#"
[[traces]]
trace = "LRScheduler"
model = "lenet"
lr = { schedule = "cosine_decay", init_lr = 0.01, cycle_length = 10, min_lr = 0.0 }
"#;
    let text = manifest(
        "epochs = 1\ntrain_steps_per_epoch = 10\neval_steps_per_epoch = 1\nlog_steps = 5",
        "32",
        "\"adam\"",
        CROSS_ENTROPY,
        trace,
    );
    let dir = TempDir::new("lr-cosine");
    let summary = summary(&dir, &text);
    let lr = steps(&summary, "train", "lenet_lr");
    let at = |step: u64| {
        lr.iter()
            .find(|(s, _)| *s == step)
            .map(|(_, v)| *v)
            .unwrap()
    };
    // FastEstimator's cosine_decay(t, 10, 0.01, 0): half-way is 0.005, the end is 0.
    assert!((at(5) - 0.005).abs() < 1e-9, "{lr:?}");
    assert!((at(1) - 0.01 * (1.0 + (0.1f64 * std::f64::consts::PI).cos()) / 2.0).abs() < 1e-9);
    assert!(at(10).abs() < 1e-9, "{lr:?}");
}

#[test]
fn reduce_lr_on_plateau_halves_the_rate_when_the_metric_stalls() {
    // No accuracy can beat the best by 1.0, so every epoch after the first is a plateau.
    let trace = r#"
[[traces]]
trace = "Accuracy"
inputs = ["y", "y_pred"]
outputs = "accuracy"

[[traces]]
trace = "ReduceLROnPlateau"
model = "lenet"
metric = "accuracy"
best_mode = "max"
min_delta = 1.0
patience = 1
factor = 0.5
"#;
    let text = manifest(
        "epochs = 3\ntrain_steps_per_epoch = 5\neval_steps_per_epoch = 2",
        "32",
        "{ type = \"adam\", lr = 0.001 }",
        CROSS_ENTROPY,
        trace,
    );
    let dir = TempDir::new("plateau");
    let summary = summary(&dir, &text);
    assert_eq!(
        steps(&summary, "eval", "lenet_lr"),
        [(10, 0.0005), (15, 0.00025)]
    );
    assert_eq!(
        steps(&summary, "train", "lenet_lr"),
        [(5, 0.001), (10, 0.001), (15, 0.0005)]
    );
}

#[test]
fn a_scheduled_optimizer_switches_at_its_epoch_and_is_logged() {
    let optimizer =
        "{ epoch = { 1 = { type = \"adam\", lr = 0.001 }, 3 = { type = \"sgd\", lr = 0.05 } } }";
    let text = manifest(
        "epochs = 3\ntrain_steps_per_epoch = 5\neval_steps_per_epoch = 1",
        "32",
        optimizer,
        CROSS_ENTROPY,
        "",
    );
    let dir = TempDir::new("optimizer-switch");
    let (out, summary) = run_with_summary(&dir, &text);
    assert_contains!(
        out.stdout,
        "fe-host schedule: epoch 3: models.lenet.optimizer: adam { lr = 0.001 } => sgd { lr = 0.05 };"
    );
    assert_eq!(
        steps(&summary, "train", "lenet_lr"),
        [(5, 0.001), (10, 0.001), (15, 0.05)]
    );
}

#[test]
fn a_scheduled_dataset_evaluates_only_from_its_first_epoch() {
    let text = manifest(
        "epochs = 3\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1",
        "32",
        "\"adam\"",
        CROSS_ENTROPY,
        ACCURACY,
    );
    // `[pipeline.data.eval]` becomes `{ epoch = { 2 = <the same dataset> } }`.
    let start = text.find("[pipeline.data.eval]").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    let files = text[start..end].lines().nth(2).unwrap();
    let scheduled = format!("[pipeline.data.eval.epoch.2]\ntype = \"idx\"\n{files}");
    let text = format!("{}{scheduled}{}", &text[..start], &text[end..]);
    let dir = TempDir::new("scheduled-data");
    let summary = summary(&dir, &text);
    let evaluated: Vec<u64> = steps(&summary, "eval", "accuracy")
        .iter()
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(evaluated, [4, 6]);
}

/// Runs `manifest` from a file in `dir`, expecting a refusal at start (exit 2).
fn refused(dir: &TempDir, manifest: &str) -> String {
    let path = dir.write("m.toml", manifest);
    run_failing(&["run", &path.to_string_lossy()], 2).stderr
}

const LR_SCHEDULER: &str = r#"
[[traces]]
trace = "LRScheduler"
model = "lenet"
lr = { schedule = "exponential", init_lr = 0.2, gamma = 0.5, by = "epoch" }
"#;

const PLATEAU: &str = r#"
[[traces]]
trace = "ReduceLROnPlateau"
model = "lenet"
patience = 1
"#;

const SCHEDULED_LR: &str =
    "{ type = \"sgd\", lr = { schedule = \"exponential\", init_lr = 0.1, gamma = 0.9 } }";

#[test]
fn two_sources_of_one_models_learning_rate_are_refused_naming_both() {
    // Each source sets the optimizer's rate itself: the later overwrites the earlier, so one
    // of them was silently ignored (an LRScheduler trace beside an optimizer schedule).
    let run = "epochs = 2\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1";
    let dir = TempDir::new("lr-sources");
    let err = refused(
        &dir,
        &manifest(run, "32", SCHEDULED_LR, CROSS_ENTROPY, LR_SCHEDULER),
    );
    assert_contains!(
        err,
        "traces[0]: model `lenet` would take its learning rate from both the schedule in models[0].optimizer.lr and LRScheduler (traces[0]) in epoch 1"
    );
    let two = format!("{LR_SCHEDULER}{LR_SCHEDULER}");
    let err = refused(&dir, &manifest(run, "32", "\"sgd\"", CROSS_ENTROPY, &two));
    assert_contains!(
        err,
        "traces[1]: model `lenet` would take its learning rate from both LRScheduler (traces[0]) and LRScheduler (traces[1]) in epoch 1"
    );
    // Apart in time, they do not meet: the trace from epoch 2, the fixed rate before.
    let later = LR_SCHEDULER.replace(
        "trace = \"LRScheduler\"",
        "[traces.epoch.2]\ntrace = \"LRScheduler\"",
    );
    let optimizer = "{ epoch = { 1 = { type = \"sgd\", lr = { schedule = \"exponential\", init_lr = 0.1, gamma = 0.9 } }, 2 = { type = \"sgd\", lr = 0.1 } } }";
    summary(&dir, &manifest(run, "32", optimizer, CROSS_ENTROPY, &later));
}

#[test]
fn reduce_lr_on_plateau_over_a_schedule_is_refused() {
    // The schedule sets the rate again before the next step: the reduced rate would be
    // logged, never applied, and the finish line would show a rate never used.
    let run = "epochs = 2\ntrain_steps_per_epoch = 2\neval_steps_per_epoch = 1";
    let dir = TempDir::new("lr-plateau-schedule");
    let err = refused(
        &dir,
        &manifest(run, "32", SCHEDULED_LR, CROSS_ENTROPY, PLATEAU),
    );
    assert_contains!(
        err,
        "traces[0]: ReduceLROnPlateau (traces[0]) cannot reduce the learning rate of model `lenet`: in epoch 1 it follows the schedule in models[0].optimizer.lr, which sets it again before every step"
    );
    let both = format!("{LR_SCHEDULER}{PLATEAU}");
    let err = refused(&dir, &manifest(run, "32", "\"sgd\"", CROSS_ENTROPY, &both));
    assert_contains!(
        err,
        "ReduceLROnPlateau (traces[1]) cannot reduce the learning rate of model `lenet`: in epoch 1 it follows LRScheduler (traces[0]), which sets it again before every epoch"
    );
}
