//! Models brought from PyTorch and models taken back to it: a TorchScript file written by
//! `.venv`'s python at test time trains in fe-host, resumes exactly, is exported and gives in
//! `torch.jit.load` what `fe-host predict` gives; LeNet's exported safetensors load into a
//! PyTorch LeNet defined here; bad files and keys are refused naming the file and the key.

use std::path::{Path, PathBuf};

use crate::util::{digits, fe_host, run_failing, Run, TempDir};

/// The PyTorch side of these tests. `make OUT [SEED]`: a scripted conv net with batch norm and
/// dropout (so train/eval mode matters) ending in a softmax. `tied OUT`: an MLP whose second
/// layer shares the first one's weight; `train-only-failure OUT`: a module that raises in
/// training behaviour only; `steps BEFORE AFTER`: how far each variable moved
/// between two module files, and whether the second still ties the weight. `jit MODULE IDX CSV`: runs the
/// exported module on the first CSV-row-count images of an IDX file, min-max scaled as the
/// manifest's pipeline does, and prints the largest difference from the CSV's scores.
/// `lenet WEIGHTS IDX CSV`: the same through FastEstimator's LeNet defined here, its state
/// loaded from fe-host's safetensors (parsed by hand: the venv has no safetensors package).
const PYTHON: &str = r#"
import csv, json, struct, sys, torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, stride=2)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(8 * 13 * 13, 10)
    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.drop(x.flatten(1))
        return torch.softmax(self.fc(x), -1)

class Tied(nn.Module):
    # `out` shares `inp`'s weight (tied weights, as language models tie embeddings).
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(784, 784)
        self.out = nn.Linear(784, 784)
        self.out.weight = self.inp.weight
        self.head = nn.Linear(784, 10)
    def forward(self, x):
        h = torch.tanh(self.out(torch.tanh(self.inp(x.flatten(1)))))
        return torch.softmax(self.head(h), -1)

class TrainOnlyFailure(nn.Module):
    # Fails only in training behaviour: raises when `self.training`.
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)
    def forward(self, x):
        if self.training:
            raise RuntimeError('only in training')
        return torch.softmax(self.fc(x.flatten(1)), -1)

class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.conv3 = nn.Conv2d(64, 64, 3)
        self.fc1 = nn.Linear(3 * 3 * 64, 64)
        self.fc2 = nn.Linear(64, 10)
    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(self.conv3(x).flatten(1)))
        return torch.softmax(self.fc2(x), -1)

def safetensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    kinds = {'F32': torch.float32, 'I64': torch.int64}
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        start, end = info['data_offsets']
        data = bytearray(raw[8 + n + start:8 + n + end])
        out[name] = torch.frombuffer(data, dtype=kinds[info['dtype']]).reshape(info['shape'])
    return out

def compare(module, idx, table):
    rows = list(csv.reader(open(table)))[1:]
    raw = open(idx, 'rb').read()
    h, w = struct.unpack('>II', raw[8:16])
    x = torch.frombuffer(bytearray(raw[16:16 + len(rows) * h * w]), dtype=torch.uint8)
    x = x.reshape(len(rows), 1, h, w).float()
    low, high = x.amin(dim=(1, 2, 3), keepdim=True), x.amax(dim=(1, 2, 3), keepdim=True)
    x = (x - low) / (high - low)
    with torch.no_grad():
        ours = module(x)
    theirs = torch.tensor([[float(v) for v in r[1:]] for r in rows])
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    print('max-diff', (ours - theirs).abs().max().item())

torch.manual_seed(0)
if sys.argv[1] == 'make':
    torch.manual_seed(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    torch.jit.script(Net()).save(sys.argv[2])
elif sys.argv[1] == 'train-only-failure':
    torch.jit.script(TrainOnlyFailure()).save(sys.argv[2])
elif sys.argv[1] == 'tied':
    torch.jit.script(Tied()).save(sys.argv[2])
elif sys.argv[1] == 'steps':
    # The largest change of each variable from one module file to another, and whether the
    # second still ties `out.weight` to `inp.weight`.
    before = torch.jit.load(sys.argv[2]).state_dict()
    after = torch.jit.load(sys.argv[3])
    for name, value in after.state_dict().items():
        print('step', name, (value - before[name]).abs().max().item())
    print('tied', after.out.weight.data_ptr() == after.inp.weight.data_ptr())
elif sys.argv[1] == 'jit':
    compare(torch.jit.load(sys.argv[2]), sys.argv[3], sys.argv[4])
elif sys.argv[1] == 'lenet':
    net = LeNet()
    net.load_state_dict(safetensors(sys.argv[2]), strict=True)
    net.eval()
    compare(net, sys.argv[3], sys.argv[4])
"#;

/// Runs the python helper with `args` in `dir`; returns its stdout.
fn python(dir: &Path, args: &[&str]) -> String {
    crate::util::run_python_helper(dir, PYTHON, args)
}

/// The largest difference the helper printed.
fn max_diff(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("max-diff "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no max-diff in {stdout}"))
}

/// The small digits with the TorchScript net `net.pt` (next to the manifest) as the model,
/// `epochs` of 40 training steps, checkpoints every epoch.
fn manifest(epochs: u32) -> String {
    crate::util::lenet_manifest(epochs, "\n[checkpoint]\ndir = \"ckpt\"\nevery_epochs = 1\n")
        .replace(
            "architecture = \"LeNet\"",
            "architecture = \"TorchScript\"\nfile = \"net.pt\"",
        )
        .replace(
            "log_steps = 50",
            "log_steps = 10\ntrain_steps_per_epoch = 40\neval_steps_per_epoch = 10",
        )
}

fn fe_host_in(dir: &Path, args: &[&str]) -> Run {
    let out: Run = fe_host()
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{args:?}:\n{}{}", out.stdout, out.stderr);
    out
}

fn run_dir(parent: &TempDir, name: &str, text: &str) -> PathBuf {
    let dir = parent.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("m.toml"), text).unwrap();
    python(&dir, &["make", "net.pt"]);
    dir
}

fn summary_values(dir: &Path, mode: &str, key: &str) -> Vec<f64> {
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    crate::util::values(&summary, mode, key)
}

#[test]
fn a_torchscript_model_trains_resumes_exactly_and_exports_what_predict_gives() {
    let parent = TempDir::new("torchscript");
    let text = manifest(2);
    let whole = run_dir(&parent, "whole", &text);
    let common = [
        "--save-weights",
        "weights",
        "--summary",
        "summary.json",
        "-q",
    ];
    let mut args = vec!["run", "m.toml"];
    args.extend(common);
    fe_host_in(&whole, &args);
    let ce = summary_values(&whole, "train", "ce");
    let accuracy = summary_values(&whole, "eval", "accuracy");
    assert!(ce.len() >= 4 && ce.last() < ce.first(), "train ce {ce:?}");
    assert!(
        accuracy.last().is_some_and(|a| *a > 0.4),
        "eval accuracy {accuracy:?} (chance is 0.1)"
    );

    // Interrupted after epoch 1 and resumed: bit for bit the same weights (dropout draws
    // and batch-norm statistics included).
    let resumed = run_dir(&parent, "resumed", &text);
    fe_host_in(&resumed, &["run", "m.toml", "--epochs", "1", "-q"]);
    let mut args = vec![
        "run",
        "m.toml",
        "--resume",
        "--allow-changes",
        "--epochs",
        "2",
    ];
    args.extend(common);
    fe_host_in(&resumed, &args);
    let weights = |d: &Path| std::fs::read(d.join("weights/lenet.safetensors")).unwrap();
    assert!(
        weights(&whole) == weights(&resumed),
        "resumed weights differ"
    );
    let names = fe_host::system::tensors::read(&whole.join("weights/lenet.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect::<Vec<_>>();
    for buffer in [
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
    ] {
        assert!(names.iter().any(|n| n == buffer), "{buffer} in {names:?}");
    }
    // Another TorchScript file under the same name is another model: a resume is refused,
    // naming the file with both hashes, even with --allow-changes.
    let saved_sha = fe_host::plugins::sha256_file(&resumed.join("net.pt")).unwrap();
    python(&resumed, &["make", "net.pt", "1"]);
    let changed_sha = fe_host::plugins::sha256_file(&resumed.join("net.pt")).unwrap();
    assert_ne!(saved_sha, changed_sha);
    let refused: Run = fe_host()
        .current_dir(&resumed)
        .args([
            "run",
            "m.toml",
            "--resume",
            "--allow-changes",
            "--epochs",
            "3",
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(refused.code, 6, "{}{}", refused.stdout, refused.stderr);
    assert_contains!(
        refused.stderr,
        "the TorchScript file of model `lenet` changed"
    );
    assert_contains!(refused.stderr, "net.pt had sha256");
    assert_contains!(refused.stderr, saved_sha);
    assert_contains!(refused.stderr, changed_sha);
    // So are predicting and exporting from that checkpoint: the weights would load into the
    // new module (same parameter names) and give numbers nothing was trained for.
    let [_, _, images, _] = digits();
    let images = images.to_string_lossy();
    for (args, out) in [
        (
            vec![
                "predict",
                "m.toml",
                "--checkpoint",
                "ckpt",
                "--input",
                &images,
                "--out",
                "p.csv",
            ],
            "p.csv",
        ),
        (
            vec![
                "export",
                "m.toml",
                "--checkpoint",
                "ckpt",
                "--out",
                "exported",
            ],
            "exported",
        ),
    ] {
        let refused: Run = fe_host()
            .current_dir(&resumed)
            .args(&args)
            .output()
            .unwrap()
            .into();
        assert_eq!(
            refused.code, 6,
            "{args:?}: {}{}",
            refused.stdout, refused.stderr
        );
        assert_contains!(
            refused.stderr,
            "was trained with TorchScript file net.pt of sha256"
        );
        assert_contains!(refused.stderr, saved_sha);
        assert_contains!(refused.stderr, changed_sha);
        assert!(
            !resumed.join(out).exists(),
            "{out} written by a refused {}",
            args[0]
        );
    }

    // Exported from the checkpoint: TorchScript, safetensors and a card.
    fe_host_in(
        &whole,
        &[
            "export",
            "m.toml",
            "--checkpoint",
            "ckpt",
            "--out",
            "export",
        ],
    );
    let card: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(whole.join("export/lenet.json")).unwrap())
            .unwrap();
    assert_eq!(card["architecture"], "TorchScript");
    assert_eq!(card["torchscript"], "lenet.pt");
    assert_eq!(card["inputs"][0]["key"], "x");
    assert_eq!(card["inputs"][0]["shape"], serde_json::json!([1, 28, 28]));
    assert_eq!(card["outputs"][0]["shape"], serde_json::json!([10]));
    assert_eq!(card["step"], 80);
    assert_eq!(
        card["metrics"]["eval"]["accuracy"].as_f64(),
        accuracy.last().copied()
    );
    // The exported weights load back into fe-host and predict; torch.jit.load agrees.
    fe_host_in(
        &whole,
        &[
            "predict",
            "m.toml",
            "--weights",
            "export",
            "--input",
            &images,
            "--limit",
            "100",
            "--out",
            "pred.csv",
        ],
    );
    let diff = max_diff(&python(
        &whole,
        &["jit", "export/lenet.pt", &images, "pred.csv"],
    ));
    assert!(
        diff <= 1e-5,
        "torch.jit.load differs from fe-host predict by {diff}"
    );
    // Its weights into the manifest's module edited since: refused, as from a checkpoint.
    let trained_from = fe_host::plugins::sha256_file(&whole.join("net.pt")).unwrap();
    assert_eq!(card["torchscript_source_sha256"], trained_from.as_str());
    std::fs::copy(whole.join("net.pt"), whole.join("net.pt.trained")).unwrap();
    python(&whole, &["make", "net.pt", "1"]);
    let refused: Run = fe_host()
        .current_dir(&whole)
        .args([
            "predict",
            "m.toml",
            "--weights",
            "export",
            "--input",
            &images,
        ])
        .args(["--out", "edited.csv"])
        .output()
        .unwrap()
        .into();
    assert_eq!(refused.code, 6, "{}{}", refused.stdout, refused.stderr);
    assert_contains!(refused.stderr, "the architecture changed since");
    assert!(!whole.join("edited.csv").exists());
    std::fs::rename(whole.join("net.pt.trained"), whole.join("net.pt")).unwrap();
    // The export alone, moved away from the manifest and the architecture's file, predicts
    // the same through its card.
    let moved = parent.path().join("moved");
    std::fs::rename(whole.join("export"), &moved).unwrap();
    std::fs::remove_file(whole.join("net.pt")).unwrap();
    let card = moved.join("lenet.json");
    let card = card.to_string_lossy();
    fe_host_in(
        parent.path(),
        &[
            "predict", &card, "--input", &images, "--limit", "100", "--out", "card.csv",
        ],
    );
    assert_text_eq!(
        std::fs::read_to_string(parent.path().join("card.csv")).unwrap(),
        std::fs::read_to_string(whole.join("pred.csv")).unwrap()
    );
}

/// The exported module is code as well as weights: another module in its place (same
/// parameters, other values) is refused naming the file, as changed weights are; a card
/// written before the module's sha256 was recorded still predicts.
/// The warm-up runs a training forward in training behaviour: a module that fails only there
/// fails before the first step, and the message says which mode it ran in.
#[test]
fn a_module_failing_only_in_training_fails_in_the_warm_up() {
    let parent = TempDir::new("ts-train-only");
    let dir = parent.path().to_path_buf();
    std::fs::write(dir.join("m.toml"), manifest(1)).unwrap();
    python(&dir, &["train-only-failure", "net.pt"]);
    let out: Run = fe_host()
        .current_dir(&dir)
        .args(["run", "m.toml", "-q"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_contains!(out.stderr, "failed in forward (warm-up, train epoch 1");
    assert_contains!(out.stderr, "only in training");
    assert!(!out.stdout.contains("train: step:"), "{}", out.stdout);
}

/// A weight a module holds under two names is one parameter, stepped once per update as
/// PyTorch steps it (its `parameters()` list it once), and the export keeps the tie.
#[test]
fn a_tied_weight_is_stepped_once_per_update_and_stays_tied_in_the_export() {
    let parent = TempDir::new("ts-tied");
    let dir = parent.path().to_path_buf();
    let text = manifest(1)
        .replace("train_steps_per_epoch = 40", "train_steps_per_epoch = 1")
        .replace("lr = 0.001", "lr = 0.01");
    std::fs::write(dir.join("m.toml"), text).unwrap();
    python(&dir, &["tied", "net.pt"]);
    fe_host_in(&dir, &["run", "m.toml", "-q", "--export", "export"]);
    let out = python(&dir, &["steps", "net.pt", "export/lenet.pt"]);
    // Adam's first step moves each weight by at most its learning rate (0.01): a tied weight
    // stepped once per name would move by up to twice that.
    let steps: Vec<(&str, f64)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("step "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, step)| (name, step.parse().unwrap()))
        .collect();
    assert_eq!(steps.len(), 6, "{out}");
    for (name, step) in &steps {
        assert!(
            *step > 0.005 && *step <= 0.01 * 1.0001,
            "{name} moved {step}:\n{out}"
        );
    }
    assert!(out.contains("tied True"), "{out}");
}

#[test]
fn an_exported_torchscript_module_replaced_by_another_is_refused() {
    let parent = TempDir::new("torchscript-card");
    let dir = run_dir(
        &parent,
        "run",
        &manifest(1).replace("train_steps_per_epoch = 40", "train_steps_per_epoch = 10"),
    );
    fe_host_in(&dir, &["run", "m.toml", "-q", "--export", "export"]);
    let card_path = dir.join("export/lenet.json");
    let mut card: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&card_path).unwrap()).unwrap();
    let module = dir.join("export/lenet.pt");
    let sha = fe_host::plugins::sha256_file(&module).unwrap();
    assert_eq!(card["torchscript_sha256"], sha.as_str());
    let [_, _, images, _] = digits();
    let images = images.to_string_lossy();
    let predict = |out: &str| -> Run {
        fe_host()
            .current_dir(&dir)
            .args([
                "predict", "export", "--input", &images, "--limit", "20", "--out", out,
            ])
            .output()
            .unwrap()
            .into()
    };
    let run = predict("before.csv");
    assert_eq!(run.code, 0, "{}", run.stderr);

    python(&dir, &["make", "export/lenet.pt", "1"]);
    assert_ne!(fe_host::plugins::sha256_file(&module).unwrap(), sha);
    let run = predict("replaced.csv");
    assert_eq!(run.code, 5, "{}{}", run.stdout, run.stderr);
    assert_contains!(run.stderr, "lenet.pt: sha256 ");
    assert_contains!(run.stderr, &format!("is not the {sha} that "));
    assert_contains!(run.stderr, "the file was changed or is corrupt");
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(
        !dir.join("replaced.csv").exists(),
        "written by a refused predict"
    );

    // A card from before the hash was recorded has no `torchscript_sha256`: it still loads.
    card.as_object_mut().unwrap().remove("torchscript_sha256");
    std::fs::write(&card_path, serde_json::to_string_pretty(&card).unwrap()).unwrap();
    let run = predict("old-card.csv");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_contains!(run.stdout, "predicted 20 samples");
}

#[test]
fn lenet_exported_safetensors_load_into_the_pytorch_lenet_and_predict_the_same() {
    let dir = TempDir::new("lenet-export");
    let text = crate::util::lenet_manifest(1, "").replace(
        "log_steps = 50",
        "log_steps = 50\ntrain_steps_per_epoch = 20\neval_steps_per_epoch = 2",
    );
    dir.write("m.toml", &text);
    // The saver option: exported when training ends.
    fe_host_in(dir.path(), &["run", "m.toml", "-q", "--export", "export"]);
    let card: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("export/lenet.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(card["architecture"], "LeNet");
    assert_eq!(card["plugin"]["name"], "fe-models");
    // A zoo model's export carries its traced TorchScript module too (tests/exports.rs).
    assert_eq!(card["torchscript"], "lenet.pt");
    assert_eq!(card["step"], 20);
    assert!(card["metrics"]["eval"]["accuracy"].is_f64(), "{card}");
    assert_eq!(card["inputs"][0]["shape"], serde_json::json!([1, 28, 28]));
    let [_, _, images, _] = digits();
    let images = images.to_string_lossy();
    fe_host_in(
        dir.path(),
        &[
            "predict",
            "m.toml",
            "--weights",
            "export",
            "--input",
            &format!("x={images}"),
            "--limit",
            "50",
            "--out",
            "pred.csv",
        ],
    );
    let diff = max_diff(&python(
        dir.path(),
        &["lenet", "export/lenet.safetensors", &images, "pred.csv"],
    ));
    assert!(diff <= 1e-5, "PyTorch LeNet differs from fe-host by {diff}");
}

#[test]
fn files_that_are_not_torchscript_and_keys_forward_does_not_take_are_refused() {
    let dir = TempDir::new("torchscript-bad");
    let text = manifest(1);
    let path = dir.write("m.toml", &text);
    let path = path.to_string_lossy();
    let net = dir.path().join("net.pt");

    std::fs::write(&net, "not a model").unwrap();
    let out = run_failing(&["run", &path], 2);
    assert_contains!(out.stderr, "models[0].file");
    assert_contains!(
        out.stderr,
        &format!("{}: is not a TorchScript module", net.display())
    );
    // libtorch's advice about corrupted checkpoints does not fit a model file.
    assert!(!out.stderr.contains("miniz"), "{}", out.stderr);

    std::fs::remove_file(&net).unwrap();
    let out = run_failing(&["run", &path], 2);
    assert_contains!(out.stderr, &format!("{}: no such file", net.display()));

    python(dir.path(), &["make", "net.pt"]);
    let two_inputs = text.replace(
        "inputs = \"x\"\noutputs = \"y_pred\"",
        "inputs = [\"x\", \"y\"]\noutputs = \"y_pred\"",
    );
    let path = dir.write("two.toml", &two_inputs);
    let out = run_failing(&["run", &path.to_string_lossy()], 2);
    assert_contains!(out.stderr, "network.ops[0].inputs");
    assert_contains!(
        out.stderr,
        &format!(
            "{}: 2 input key(s) given, but forward(x: Tensor) -> Tensor takes 1",
            net.display()
        )
    );
    let two_outputs = text.replace("outputs = \"y_pred\"", "outputs = [\"y_pred\", \"extra\"]");
    let path = dir.write("out.toml", &two_outputs);
    let out = run_failing(&["run", &path.to_string_lossy()], 2);
    assert_contains!(out.stderr, "network.ops[0].outputs");
    assert_contains!(
        out.stderr,
        "2 output key(s) given, but forward(x: Tensor) -> Tensor gives 1"
    );
    // `outputs` in the model's table picks dict entries; beside a forward returning a Tensor
    // it was ignored without a word.
    let dict_names = text.replace("file = \"net.pt\"", "file = \"net.pt\"\noutputs = [\"a\"]");
    let path = dir.write("names.toml", &dict_names);
    let out = run_failing(&["run", &path.to_string_lossy()], 2);
    assert_contains!(out.stderr, "models[0].outputs");
    assert_contains!(
        out.stderr,
        "models[0].outputs: names entries of a dict or fields of a NamedTuple, but"
    );
    assert_contains!(
        out.stderr,
        "net.pt's forward returns a Tensor: drop `outputs`"
    );
}

#[test]
fn a_failure_inside_forward_says_what_the_module_raised_in_one_line() {
    let parent = TempDir::new("torchscript-forward-fails");
    let text = manifest(1);
    let expand =
        "[[pipeline.ops]]\nop = \"ExpandDims\"\ninputs = \"x\"\noutputs = \"x\"\naxis = 0\n";
    let minmax = "[[pipeline.ops]]\nop = \"Minmax\"\ninputs = \"x\"\noutputs = \"x\"\n";
    assert!(text.contains(expand) && text.contains(minmax));
    // Without the channel axis the conv net gets [32, 28, 28]; without the scaling, bytes.
    let cases = [
        (
            "shape",
            text.replace(expand, ""),
            "expected input[1, 32, 28, 28] to have 1 channels, but got 32 channels instead",
        ),
        (
            "dtype",
            text.replace(minmax, ""),
            "Input type (unsigned char) and bias type (float) should be the same",
        ),
    ];
    let one_line = |out: &Run, what: &str, cause: &str| {
        let error = out.stderr.trim();
        assert_eq!(error.lines().count(), 1, "{what}: {}", out.stderr);
        assert_contains!(error, "TorchScript(net.pt) failed in forward");
        assert_contains!(error, "the TorchScript interpreter raised RuntimeError: ");
        assert_contains!(error, cause);
        assert_contains!(
            error,
            "[model `lenet` (models[0]) run by ModelOp (network.ops[0])]"
        );
    };
    for (name, text, cause) in cases {
        let dir = run_dir(&parent, name, &text);
        let out: Run = fe_host()
            .current_dir(&dir)
            .args(["run", "m.toml", "-q"])
            .output()
            .unwrap()
            .into();
        assert_eq!(out.code, 1, "{name}: {}{}", out.stdout, out.stderr);
        one_line(&out, name, cause);
    }
    let x = digits()[2].to_string_lossy().into_owned();
    let out: Run = fe_host()
        .current_dir(parent.path().join("shape"))
        .args([
            "predict",
            "m.toml",
            "--random-weights",
            "--input",
            &x,
            "--out",
            "p.csv",
        ])
        .args(["--limit", "4"])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 1, "predict: {}{}", out.stdout, out.stderr);
    one_line(
        &out,
        "predict",
        "to have 1 channels, but got 4 channels instead",
    );
}

#[test]
fn predict_and_transform_refuse_untrained_models_unless_asked() {
    let dir = TempDir::new("untrained");
    let path = dir.write("m.toml", &crate::util::lenet_manifest(1, ""));
    let path = path.to_string_lossy();
    let [_, _, images, _] = digits();
    let images = images.to_string_lossy();
    let csv = dir.path().join("p.csv");
    let csv = csv.to_string_lossy();
    let out = run_failing(&["predict", &path, "--input", &images, "--out", &csv], 2);
    assert_contains!(out.stderr, "no trained weights for model(s) lenet");
    assert!(!dir.path().join("p.csv").exists());
    let st = dir.path().join("t.safetensors");
    let out = run_failing(
        &[
            "transform",
            &path,
            "--input",
            &format!("x={images}"),
            "--out",
            &st.to_string_lossy(),
        ],
        2,
    );
    assert_contains!(out.stderr, "--random-weights");
    let out: Run = fe_host()
        .args([
            "predict",
            &path,
            "--random-weights",
            "--input",
            &images,
            "--limit",
            "3",
            "--top-k",
            "2",
            "--out",
            &csv,
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = std::fs::read_to_string(dir.path().join("p.csv")).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(
        text.starts_with("index,class_1,score_1,class_2,score_2\n0,"),
        "{text}"
    );
}
