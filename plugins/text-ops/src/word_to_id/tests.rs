//! FastEstimator's test_word_to_id.py cases, plus the vocabulary file and `unk`.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::testing::{self, TestNumpyOp};
use fe_plugin_api::{text_tensor, PluginError};

const MAPPING: &str =
    "mapping = { a = 0, b = 11, test = 90, op = 25, c = 100, id = 10, word = 55, to = 5 }";

fn op(config: &str, inputs: &[&str]) -> TestNumpyOp {
    testing::numpy_op("WordtoId", config, inputs, inputs)
        .unwrap_or_else(|e| panic!("building WordtoId from `{config}`: {e}"))
}

fn build_error(config: &str, inputs: &[&str], outputs: &[&str]) -> PluginError {
    match testing::numpy_op("WordtoId", config, inputs, outputs) {
        Ok(_) => panic!("WordtoId accepted `{config}`"),
        Err(e) => e,
    }
}

fn run(op: &TestNumpyOp, texts: &[&str]) -> Result<Vec<Vec<i64>>, PluginError> {
    let tensors: Vec<Tensor> = texts.iter().map(|t| text_tensor(t)).collect();
    let refs: Vec<&Tensor> = tensors.iter().collect();
    Ok(op
        .forward(&refs)?
        .iter()
        .map(|t| {
            assert_eq!(t.kind(), Kind::Int64);
            Vec::try_from(t).unwrap()
        })
        .collect())
}

#[test]
fn single_and_multiple_inputs_map_word_by_word() {
    let single = op(MAPPING, &["x"]);
    assert_eq!(run(&single, &["a b test op"]).unwrap(), [[0, 11, 90, 25]]);
    let multi = op(MAPPING, &["x", "y"]);
    assert_eq!(
        run(&multi, &["test op\tc", " word  to\nid "]).unwrap(),
        [[90, 25, 100], [55, 5, 10]]
    );
    assert_eq!(run(&single, &[""]).unwrap(), [Vec::<i64>::new()]);
}

#[test]
fn unknown_words_are_an_error_unless_unk_is_given() {
    let strict = op(MAPPING, &["x"]);
    let err = run(&strict, &["a zebra"]).unwrap_err();
    assert!(
        err.to_string()
            .contains("\"zebra\" is not in the vocabulary (mapping)"),
        "{err}"
    );
    let lenient = op(&format!("{MAPPING}\nunk = -1"), &["x"]);
    assert_eq!(run(&lenient, &["a zebra"]).unwrap(), [[0, -1]]);
    let by_word = op(&format!("{MAPPING}\nunk = \"c\""), &["x"]);
    assert_eq!(run(&by_word, &["zebra b"]).unwrap(), [[100, 11]]);
}

#[test]
fn a_vocabulary_file_numbers_its_lines_from_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.txt");
    std::fs::write(&path, "[PAD]\n[UNK]\nthe\ncat\nmäuse\n").unwrap();
    let config = format!(
        "vocab = {:?}\nunk = \"[UNK]\"\nlowercase = true",
        path.display().to_string()
    );
    let op = op(&config, &["x"]);
    assert_eq!(run(&op, &["The cat MÄUSE dog"]).unwrap(), [[2, 3, 4, 1]]);

    std::fs::write(&path, "a\nb\na\n").unwrap();
    let err = build_error(
        &format!("vocab = {:?}", path.display().to_string()),
        &["x"],
        &["x"],
    );
    assert!(
        err.to_string().contains("line 3 repeats \"a\" of line 1"),
        "{err}"
    );
    std::fs::write(&path, "a\n\nb\n").unwrap();
    let err = build_error(
        &format!("vocab = {:?}", path.display().to_string()),
        &["x"],
        &["x"],
    );
    assert!(
        err.to_string().contains("line 2 holds \"\", not one word"),
        "{err}"
    );
}

#[test]
fn configuration_mistakes_are_named() {
    let err = build_error("", &["x"], &["x"]);
    assert!(err.to_string().contains("exactly one of vocab"), "{err}");
    let err = build_error("vocab = \"/nonexistent/vocab.txt\"", &["x"], &["x"]);
    assert_eq!(err.field.as_str(), "vocab");
    assert!(
        err.to_string()
            .contains("/nonexistent/vocab.txt: cannot read it"),
        "{err}"
    );
    let err = build_error(&format!("{MAPPING}\nunk = \"zebra\""), &["x"], &["x"]);
    assert_eq!(err.field.as_str(), "unk");
    let err = build_error(MAPPING, &["x", "y"], &["x"]);
    assert_eq!(err.field.as_str(), "outputs");
}

#[test]
fn a_batch_of_equal_length_texts_stacks() {
    let op = op(MAPPING, &["x"]);
    let rows = Tensor::from_slice(b"a b\0\0c id\0").reshape([2, 5]);
    let out = op.forward_batch(&[&rows]).unwrap();
    assert_eq!(
        Vec::<i64>::try_from(out[0].reshape([-1])).unwrap(),
        [0, 11, 100, 10]
    );
    let ragged = Tensor::from_slice(b"a b c\0c id\0\0").reshape([2, 6]);
    let err = op.forward_batch(&[&ragged]).unwrap_err();
    assert!(err.to_string().contains("different lengths"), "{err}");
}
