//! What a run tells the person who started it: the closing summary (best value, what it
//! wrote, what to run next), speeds that count only the steps run, and the end-of-run plot,
//! which shows the values a person watches and leaves bookkeeping to `fe-host logs --all-keys`.

use fe_host::estimator::data::format_number;

use crate::util::{copy_example, fe_host, small_digits, Run, TempDir};

/// Runs `examples/lenet.toml` (96 training samples: 3 steps an epoch) in `dir` with `args`.
fn lenet(dir: &TempDir, args: &[&str]) -> Run {
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args(["run", "examples/lenet.toml"])
        .args(args)
        .output()
        .expect("run")
        .into();
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    out
}

/// The lines from `fe-host finish:` on.
fn closing(out: &Run) -> Vec<&str> {
    out.stdout
        .lines()
        .skip_while(|l| !l.starts_with("fe-host finish:"))
        .collect()
}

/// The lowest evaluation `ce` of a `--summary` file: (step, value).
fn lowest_eval_ce(summary: &std::path::Path) -> (u64, f64) {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(summary).expect("summary")).expect("json");
    json["history"]["eval"]["ce"]
        .as_object()
        .expect("eval ce")
        .iter()
        .map(|(step, v)| (step.parse().expect("step"), v.as_f64().expect("value")))
        .fold(None, |best: Option<(u64, f64)>, (step, v)| match best {
            Some((_, b)) if b <= v => best,
            _ => Some((step, v)),
        })
        .expect("an evaluation")
}

#[test]
fn a_finished_run_ends_with_its_best_value_what_it_wrote_and_the_commands_to_go_on() {
    let dir = TempDir::new("console-summary");
    copy_example(&dir, "lenet");
    small_digits(&dir);
    let out = lenet(
        &dir,
        &[
            "--epochs",
            "2",
            "--summary",
            "summary.json",
            "--set",
            "run.seed=5",
            "--save-weights",
            "weights",
            "--export",
            "exported",
        ],
    );
    let (step, value) = lowest_eval_ce(&dir.path().join("summary.json"));
    let lines = closing(&out);
    assert!(
        lines[0].starts_with("fe-host finish: step: 6;") && lines[0].ends_with("(6 steps run);"),
        "{}",
        lines[0]
    );
    assert_eq!(
        lines[1..],
        [
            format!(
                "fe-host best: ce {} (lowest) at epoch {}, step {step};",
                format_number(value),
                step / 3
            )
            .as_str(),
            "fe-host saved: model runs/lenet/version_0/best/lenet_best_ce.safetensors;",
            "fe-host saved: weights weights;",
            "fe-host saved: export exported;",
            "fe-host saved: checkpoint runs/lenet/version_0/checkpoints/ckpt-6;",
            "fe-host saved: logs runs/lenet/version_0/log.jsonl; plot runs/lenet/version_0/metrics.svg;",
            // The overrides again: a resume compares them with the checkpoint's.
            "fe-host next: train longer: fe-host run examples/lenet.toml --set run.seed=5 --resume --epochs N;",
            "fe-host next: predict: fe-host predict examples/lenet.toml --set run.seed=5 --checkpoint runs/lenet/version_0/checkpoints/ckpt-6 --input FILE;",
        ]
    );
    for file in [
        "runs/lenet/version_0/best/lenet_best_ce.safetensors",
        "runs/lenet/version_0/checkpoints/ckpt-6/MANIFEST.json",
        "runs/lenet/version_0/log.jsonl",
        "runs/lenet/version_0/metrics.svg",
        "weights/lenet.safetensors",
        "exported/lenet.safetensors",
    ] {
        assert!(dir.path().join(file).is_file(), "{file}");
    }

    // Resumed for one more epoch: the speed is over the 3 steps this process ran, not the 9
    // the run has done.
    let out = lenet(&dir, &["--set", "run.seed=5", "--resume", "--epochs", "3"]);
    let lines = closing(&out);
    assert_contains!(lines[0], "fe-host finish: step: 9;");
    assert!(lines[0].ends_with("(3 steps run);"), "{}", lines[0]);
    assert_contains!(
        out.stdout,
        "fe-host saved: checkpoint runs/lenet/version_0/checkpoints/ckpt-9;"
    );
}

#[test]
fn an_export_into_an_existing_directory_is_refused_before_training() {
    let dir = TempDir::new("console-export-exists");
    copy_example(&dir, "lenet");
    small_digits(&dir);
    std::fs::create_dir_all(dir.path().join("exported")).unwrap();
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args(["run", "examples/lenet.toml", "--export", "exported"])
        .output()
        .expect("run")
        .into();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_contains!(
        out.stderr,
        "--export exported: already exists; export into a new directory"
    );
    assert!(!out.stdout.contains("fe-host train:"), "{}", out.stdout);
    assert!(
        !dir.path().join("runs").exists(),
        "a refused run made a run directory"
    );
}

/// The panel titles of a plot written as SVG.
fn panels(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| t.split('\n').nth(1))
        .map(|t| t.trim_end_matches(" (log scale)").to_owned())
        .collect()
}

#[test]
fn the_run_plot_shows_losses_metrics_and_learning_rates_and_all_keys_on_request() {
    let dir = TempDir::new("console-plot");
    copy_example(&dir, "lenet");
    small_digits(&dir);
    lenet(&dir, &["--epochs", "2"]);
    let svg =
        std::fs::read_to_string(dir.path().join("runs/lenet/version_0/metrics.svg")).expect("plot");
    let texts = panels(&svg);
    for watched in ["ce", "accuracy", "lenet_lr"] {
        assert!(texts.iter().any(|t| t == watched), "{watched}: {texts:?}");
    }
    let bookkeeping = [
        "epoch_time(sec)",
        "steps/sec",
        "min_ce",
        "since_best_ce",
        "steps/sec (overall)",
    ];
    for key in bookkeeping {
        assert!(!texts.iter().any(|t| t == key), "{key}: {texts:?}");
    }
    // The log has everything; `fe-host logs --all-keys` plots it.
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args(["logs", "runs/lenet", "--all-keys", "--out", "all.svg"])
        .output()
        .expect("logs")
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let all = panels(&std::fs::read_to_string(dir.path().join("all.svg")).expect("all.svg"));
    for key in [
        "ce",
        "accuracy",
        "epoch_time(sec)",
        "min_ce",
        "since_best_ce",
    ] {
        assert!(all.iter().any(|t| t == key), "{key}: {all:?}");
    }
}
