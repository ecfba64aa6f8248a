//! Config semantics on a small hand-written WordLevel tokenizer (lower-casing, whitespace
//! split, BERT's `[CLS] A [SEP]` template). Equality with the Python package on trained BPE,
//! WordPiece and Unigram files is `tests/tokenize.rs`'s job.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::testing::{self, TestNumpyOp};
use fe_plugin_api::{text_tensor, PluginError};

const TOKENIZER: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
  "normalizer": {"type": "Lowercase"},
  "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
    "special_tokens": {
      "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
      "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}
    }
  },
  "decoder": null,
  "model": {"type": "WordLevel", "unk_token": "[UNK]",
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "the": 4, "cat": 5, "sat": 6,
                      "on": 7, "mat": 8}}
}"#;

struct Fixture {
    _dir: tempfile::TempDir,
    path: String,
}

fn fixture(json: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, json).unwrap();
    Fixture {
        path: path.to_string_lossy().into_owned(),
        _dir: dir,
    }
}

fn build(f: &Fixture, extra: &str, inputs: &[&str], outputs: &[&str]) -> TestNumpyOp {
    let config = format!("tokenizer = {:?}\n{extra}", f.path);
    testing::numpy_op("Tokenize", &config, inputs, outputs)
        .unwrap_or_else(|e| panic!("building Tokenize from `{config}`: {e}"))
}

fn build_error(f: &Fixture, extra: &str, outputs: &[&str]) -> PluginError {
    let config = format!("tokenizer = {:?}\n{extra}", f.path);
    match testing::numpy_op("Tokenize", &config, &["text"], outputs) {
        Ok(_) => panic!("Tokenize accepted `{config}`"),
        Err(e) => e,
    }
}

fn ids(t: &Tensor) -> Vec<i64> {
    assert_eq!(t.kind(), fe_plugin_api::tch::Kind::Int64);
    Vec::try_from(t).unwrap()
}

fn run(op: &TestNumpyOp, texts: &[&str]) -> Vec<Vec<i64>> {
    let tensors: Vec<Tensor> = texts.iter().map(|t| text_tensor(t)).collect();
    let refs: Vec<&Tensor> = tensors.iter().collect();
    op.forward(&refs).unwrap().iter().map(ids).collect()
}

#[test]
fn encodes_with_special_tokens_and_pads_to_max_length() {
    let f = fixture(TOKENIZER);
    let op = build(&f, "max_length = 7", &["text"], &["ids", "mask", "types"]);
    let out = run(&op, &["The CAT sat"]);
    assert_eq!(out[0], [2, 4, 5, 6, 3, 0, 0]);
    assert_eq!(out[1], [1, 1, 1, 1, 1, 0, 0]);
    assert_eq!(out[2], [0; 7]);
}

#[test]
fn truncation_keeps_the_special_tokens() {
    let f = fixture(TOKENIZER);
    let op = build(&f, "max_length = 4", &["text"], &["ids"]);
    assert_eq!(run(&op, &["the cat sat on the mat"]), [[2, 4, 5, 3]]);
    let left = build(
        &f,
        "max_length = 4\ntruncation_side = \"left\"",
        &["text"],
        &["ids"],
    );
    assert_eq!(run(&left, &["the cat sat on the mat"]), [[2, 4, 8, 3]]);
}

#[test]
fn empty_and_unknown_text() {
    let f = fixture(TOKENIZER);
    let op = build(&f, "max_length = 4", &["text"], &["ids", "mask"]);
    assert_eq!(run(&op, &[""]), [vec![2, 3, 0, 0], vec![1, 1, 0, 0]]);
    assert_eq!(run(&op, &["dog"])[0], [2, 1, 3, 0]);
}

#[test]
fn without_max_length_the_files_settings_apply() {
    let f = fixture(TOKENIZER);
    let op = build(&f, "add_special_tokens = false", &["text"], &["ids"]);
    assert_eq!(run(&op, &["the mat"]), [[4, 8]]);
    assert_eq!(run(&op, &["on the mat"]), [[7, 4, 8]]);
    let with_file_padding = TOKENIZER.replace(
        r#""padding": null"#,
        r#""padding": {"strategy": {"Fixed": 5}, "direction": "Left", "pad_to_multiple_of": null,
                       "pad_id": 1, "pad_type_id": 0, "pad_token": "[UNK]"}"#,
    );
    let g = fixture(&with_file_padding);
    let op = build(&g, "", &["text"], &["ids"]);
    assert_eq!(run(&op, &["cat"]), [[1, 1, 2, 5, 3]]);
    let off = build(&g, "padding = false", &["text"], &["ids"]);
    assert_eq!(run(&off, &["cat"]), [[2, 5, 3]]);
}

#[test]
fn options_override_padding_and_truncation() {
    let f = fixture(TOKENIZER);
    let op = build(
        &f,
        "max_length = 5\npadding = \"do_not_pad\"\npad_id = 8\npadding_side = \"left\"",
        &["text"],
        &["ids"],
    );
    assert_eq!(run(&op, &["cat"]), [[2, 5, 3]]);
    let padded = build(
        &f,
        "max_length = 5\npad_id = 8\npadding_side = \"left\"\ntruncation = false",
        &["text"],
        &["ids", "mask"],
    );
    assert_eq!(
        run(&padded, &["cat"]),
        [vec![8, 8, 2, 5, 3], vec![0, 0, 1, 1, 1]]
    );
    assert_eq!(run(&padded, &["the cat sat on"])[0], [2, 4, 5, 6, 7, 3]);
}

#[test]
fn a_pair_gives_type_ids() {
    let f = fixture(TOKENIZER);
    let op = build(
        &f,
        "max_length = 8\ntruncation = \"only_second\"",
        &["a", "b"],
        &["ids", "mask", "types"],
    );
    let out = run(&op, &["the cat", "sat on the mat"]);
    assert_eq!(out[0], [2, 4, 5, 3, 6, 7, 4, 3]);
    assert_eq!(out[2], [0, 0, 0, 0, 1, 1, 1, 1]);
}

#[test]
fn a_batch_of_padded_rows_equals_the_samples() {
    let f = fixture(TOKENIZER);
    let op = build(&f, "max_length = 6", &["text"], &["ids", "mask"]);
    // The host stacks ragged text rows with zero bytes at their end.
    let rows = Tensor::from_slice(b"the cat\0\0\0\0on the mat\0")
        .reshape([2, 11])
        .narrow(1, 0, 11);
    let out = op.forward_batch(&[&rows]).unwrap();
    assert_eq!(out[0].size(), [2, 6]);
    assert_eq!(ids(&out[0].get(0)), run(&op, &["the cat"])[0]);
    assert_eq!(ids(&out[0].get(1)), run(&op, &["on the mat"])[0]);
    let ragged = build(&f, "", &["text"], &["ids"]);
    let err = ragged.forward_batch(&[&rows]).unwrap_err();
    assert!(err.to_string().contains("set max_length"), "{err}");
}

#[test]
fn bad_files_and_values_are_named() {
    let missing = Fixture {
        path: "/nonexistent/tokenizer.json".to_owned(),
        _dir: tempfile::tempdir().unwrap(),
    };
    let err = build_error(&missing, "", &["ids"]);
    assert_eq!(err.field.as_str(), "tokenizer");
    assert!(
        err.to_string()
            .contains("cannot read /nonexistent/tokenizer.json"),
        "{err}"
    );
    let broken = fixture("{\"model\": 3}");
    let err = build_error(&broken, "", &["ids"]);
    assert!(
        err.to_string().contains("is not a valid tokenizer.json"),
        "{err}"
    );
    assert!(err.to_string().contains(&broken.path), "{err}");

    let f = fixture(TOKENIZER);
    let err = build_error(&f, "max_length = 8\npadding = \"longest\"", &["ids"]);
    assert!(err.to_string().contains("Batch op a pad_value"), "{err}");
    let err = build_error(&f, "truncation = true", &["ids"]);
    assert!(err.to_string().contains("set max_length"), "{err}");
    let err = build_error(&f, "max_length = 0", &["ids"]);
    assert_eq!(err.field.as_str(), "max_length");
    let err = build_error(&f, "", &["a", "b", "c", "d"]);
    assert_eq!(err.field.as_str(), "outputs");
    let no_pad = fixture(&TOKENIZER.replace("[PAD]", "[NOPE]"));
    let err = build_error(&no_pad, "max_length = 8", &["ids"]);
    assert!(err.to_string().contains("set pad_id"), "{err}");
}

#[test]
fn a_non_text_input_is_refused() {
    let f = fixture(TOKENIZER);
    let op = build(&f, "max_length = 4", &["text"], &["ids"]);
    let err = op.forward(&[&Tensor::from_slice(&[1.0f32])]).unwrap_err();
    assert!(err.to_string().contains("expected text"), "{err}");
}
