//! A second third-party plugin, written from plugin-api's README and rustdoc alone: a
//! `Dataset` and a `Metric` whose `reduce` (Determined's `cross_slot_reduce`) combines every
//! worker's partial state. Built outside the workspace, loaded by the real host from a
//! manifest, and its value checked against one computed here by hand, in one process and
//! with `--nproc 2`, where 101 evaluation samples in batches of 8 leave the ranks unequal
//! shares.

use std::sync::OnceLock;

use crate::dist::{last, summary};
use crate::util::{build_out_of_tree, fe_host, root, OutputWithin, Run, TempDir};

const CARGO: &str = r#"[package]
name = "ramp-metrics"
version = "0.3.0"
edition = "2021"

[lib]
crate-type = ["cdylib"]

[dependencies]
fe-plugin-api = { path = "PLUGIN_API" }
"#;

const LIB: &str = r#"//! `Ramp`: generated samples; `Rmse`: root mean squared error and the sample count.
use fe_plugin_api::serde::Deserialize;
use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{
    inventory, CreateContext, Dataset, Error, FromConfig, Metric, NoConfig, Registration, Result,
    State, Value,
};

#[derive(Deserialize)]
#[serde(crate = "fe_plugin_api::serde", deny_unknown_fields)]
pub struct RampConfig {
    samples: u64,
}

/// Sample i: x = (i mod 7) / 2, y = (3i mod 11) / 4.
pub struct Ramp {
    samples: u64,
}

impl FromConfig for Ramp {
    type Config = RampConfig;
    fn from_config(config: RampConfig, _ctx: &CreateContext<'_>) -> Result<Self> {
        if config.samples == 0 {
            return Err(Error::config("samples", "must be at least 1"));
        }
        Ok(Ramp { samples: config.samples })
    }
}

impl Dataset for Ramp {
    fn len(&self) -> u64 {
        self.samples
    }
    fn keys(&self) -> Vec<String> {
        vec!["x".into(), "y".into()]
    }
    fn get(&self, index: u64) -> Result<Vec<Tensor>> {
        let x = (index % 7) as f32 / 2.0;
        let y = ((3 * index) % 11) as f32 / 4.0;
        Ok(vec![Tensor::from_slice(&[x]), Tensor::from_slice(&[y])])
    }
}

/// Root mean squared error of its two inputs, and how many elements it saw.
#[derive(Default)]
pub struct Rmse {
    sum_sq: f64,
    count: i64,
}

impl FromConfig for Rmse {
    type Config = NoConfig;
    fn from_config(_: NoConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(2))?;
        Ok(Rmse::default())
    }
}

impl Metric for Rmse {
    fn reset(&mut self) {
        *self = Rmse::default();
    }
    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let diff = inputs[0].f_to_kind(Kind::Double)?.f_sub(&inputs[1].f_to_kind(Kind::Double)?)?;
        self.sum_sq += diff.f_square()?.f_sum(Kind::Double)?.double_value(&[]);
        self.count += diff.numel() as i64;
        Ok(())
    }
    fn partial(&self) -> Result<State> {
        State::from_json(&(self.sum_sq, self.count))
    }
    // An RMSE is not the mean of the workers' RMSEs: the sums are combined first.
    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let (mut sum_sq, mut count) = (0.0, 0i64);
        for partial in partials {
            let (s, c): (f64, i64) = partial.json()?;
            sum_sq += s;
            count += c;
        }
        Ok(vec![Value::Float((sum_sq / count as f64).sqrt()), Value::Int(count)])
    }
}

inventory::submit! { Registration::dataset::<Ramp>("Ramp", "x = (i mod 7) / 2, y = (3i mod 11) / 4") }
inventory::submit! {
    Registration::metric::<Rmse>("Rmse", "Root mean squared error and the element count")
        .default_mode("eval,test")
}

fe_plugin_api::export_plugin!();
"#;

fn plugin() -> &'static std::path::PathBuf {
    static BUILT: OnceLock<std::path::PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = CARGO.replace("PLUGIN_API", &root().join("plugin-api").to_string_lossy());
        let dir = build_out_of_tree(
            "third-party",
            &[(
                "ramp-metrics",
                vec![("Cargo.toml", cargo), ("src/lib.rs", LIB.to_owned())],
            )],
        );
        dir.join("libramp_metrics.so")
    })
}

const EVAL_SAMPLES: u64 = 101;

fn manifest() -> String {
    format!(
        r#"[plugins]
paths = ["{plugin}"]

[run]
epochs = 1
seed = 1
process_group_timeout = 60
train_steps_per_epoch = 1

[pipeline]
batch_size = 8

[pipeline.data.train]
type = "Ramp"
samples = 16

[pipeline.data.eval]
type = "Ramp"
samples = {EVAL_SAMPLES}

[[traces]]
trace = "Rmse"
inputs = ["x", "y"]
outputs = ["rmse", "n"]
"#,
        plugin = plugin().display()
    )
}

/// The same formulas, in f64, without the host or the plugin.
fn by_hand() -> f64 {
    let sum_sq: f64 = (0..EVAL_SAMPLES)
        .map(|i| (i % 7) as f64 / 2.0 - ((3 * i) % 11) as f64 / 4.0)
        .map(|d| d * d)
        .sum();
    (sum_sq / EVAL_SAMPLES as f64).sqrt()
}

#[test]
fn a_third_party_dataset_and_metric_equal_the_value_by_hand_in_one_process_and_on_two_ranks() {
    let want = by_hand();
    for nproc in ["1", "2"] {
        let dir = TempDir::new(&format!("third-party-{nproc}"));
        let path = dir.write("m.toml", &manifest());
        let mut command = fe_host();
        command
            .current_dir(dir.path())
            .arg("run")
            .arg(&path)
            .args(["--summary", "summary.json"]);
        if nproc != "1" {
            command.args(["--nproc", nproc]);
        }
        let out: Run = command.output_within();
        assert_eq!(
            out.code, 0,
            "--nproc {nproc}:\n{}\n{}",
            out.stdout, out.stderr
        );
        let summary = summary(dir.path());
        let rmse = last(&summary, "eval", "rmse");
        // The inputs are exact in f32 and summed in f64: only the order of the sum differs.
        assert!(
            (rmse - want).abs() < 1e-12,
            "--nproc {nproc}: fe-host {rmse}, by hand {want}"
        );
        // Every sample once: each rank's partial reached the reduce, none twice.
        assert_eq!(
            last(&summary, "eval", "n"),
            EVAL_SAMPLES as f64,
            "--nproc {nproc}"
        );
    }
}
