//! Manifest validation: what is accepted, and where errors point.

use super::*;

const MINIMAL: &str = r#"
[pipeline]
batch_size = 4
[pipeline.data.train]
type = "idx"
files = { x = "x.idx" }

[[models]]
name = "net"
architecture = "LeNet"
optimizer = "adam"

[[network.ops]]
op = "ModelOp"
model = "net"
inputs = "x"
outputs = "y_pred"
"#;

fn parse(text: &str) -> Result<Manifest> {
    Manifest::parse(Path::new("m.toml"), text.to_owned())
}

fn message(text: &str) -> String {
    match parse(text) {
        Err(Error::Manifest(m)) => m,
        other => panic!("expected a manifest error, got {other:?}"),
    }
}

#[test]
fn minimal_manifest_validates() {
    let m = parse(MINIMAL).unwrap();
    assert_eq!(m.run.epochs, 1);
    assert_eq!(
        m.models[0].optimizer.as_ref().unwrap().values[0]["type"].as_str(),
        Some("adam")
    );
    assert_eq!(m.ops[0].values[0].config["model"].as_str(), Some("net"));
    assert_eq!(m.pipeline.data[0].mode, Mode::Train);
}

#[test]
fn syntax_error_has_line_and_column() {
    let msg = message("[pipeline]\nbatch_size = = 4\n");
    assert!(msg.starts_with("m.toml:2:"), "{msg}");
}

#[test]
fn unknown_key_names_key_line_and_column() {
    let msg = message(&format!("[run]\nepoch = 2\n{MINIMAL}"));
    assert!(
        msg.starts_with("m.toml:2:1: run.epoch: unknown field `epoch`"),
        "{msg}"
    );
}

#[test]
fn wrong_type_names_the_key() {
    let msg = message(&format!("[run]\nepochs = \"two\"\n{MINIMAL}"));
    assert!(
        msg.starts_with("m.toml:2:10: run.epochs: must be a whole number, not string \"two\""),
        "{msg}"
    );
}

#[test]
fn validation_errors_point_at_the_key() {
    let bad = MINIMAL.replace("inputs = \"x\"", "inputs = \"x;y\"");
    let msg = message(&bad);
    assert!(
        msg.contains("network.ops[0].inputs[0]: key `x;y` contains `;`"),
        "{msg}"
    );
    assert!(msg.starts_with("m.toml:16:1: "), "{msg}");
}

#[test]
fn duplicate_model_names_ignoring_case() {
    let text = format!("{MINIMAL}\n[[models]]\nname = \"NET\"\narchitecture = \"MLP\"\n");
    let msg = message(&text);
    assert!(
        msg.contains("models[1].name: model name `NET` is already used by models[0]"),
        "{msg}"
    );
}

#[test]
fn scheduled_components_and_batch_sizes_are_checked() {
    let scheduled = MINIMAL.replace("batch_size = 4", "batch_size = { repeat = [4, 8] }");
    let m = parse(&scheduled).unwrap();
    assert_eq!(
        (m.pipeline.batch_size.at(1), m.pipeline.batch_size.at(2)),
        (Some(&4), Some(&8))
    );
    let late = MINIMAL.replace("batch_size = 4", "batch_size = { epoch = { 2 = 8 } }");
    let msg = message(&late);
    assert!(
        msg.contains("pipeline.batch_size: every epoch needs a batch size"),
        "{msg}"
    );
    let skipping = format!(
        "[run]\nepochs = 2\n{}",
        MINIMAL.replace("batch_size = 4", "batch_size = { repeat = [4, \"none\"] }")
    );
    assert!(message(&skipping).contains("every epoch needs a batch size"));
}

#[test]
fn process_group_timeout_is_seconds_and_at_least_one() {
    assert_eq!(
        parse(MINIMAL).unwrap().run.process_group_timeout,
        crate::dist::env::DEFAULT_TIMEOUT
    );
    let m = parse(&format!("[run]\nprocess_group_timeout = 30\n{MINIMAL}")).unwrap();
    assert_eq!(
        m.run.process_group_timeout,
        std::time::Duration::from_secs(30)
    );
    let msg = message(&format!("[run]\nprocess_group_timeout = 0\n{MINIMAL}"));
    assert!(
        msg.starts_with("m.toml:2:")
            && msg.contains("run.process_group_timeout: must be at least 1"),
        "{msg}"
    );
    let msg = message(&format!(
        "[run]\nprocess_group_timeout = 99999999999\n{MINIMAL}"
    ));
    assert!(
        msg.contains("run.process_group_timeout: must be at most 604800"),
        "{msg}"
    );
}

#[test]
fn resume_is_never_auto_or_an_error_at_its_line() {
    assert_eq!(parse(MINIMAL).unwrap().run.resume, Resume::Never);
    let m = parse(&format!("[run]\nresume = \"auto\"\n{MINIMAL}")).unwrap();
    assert_eq!(m.run.resume, Resume::Auto);
    let msg = message(&format!("[run]\nresume = \"always\"\n{MINIMAL}"));
    assert!(
        msg.starts_with("m.toml:2:10: run.resume:")
            && msg.contains("`auto`")
            && msg.contains("`never`"),
        "{msg}"
    );
}
