//! `Tokenize` (fe-text-ops) against the Python `tokenizers` package: the same tokenizer.json
//! files and texts must give the same ids and attention masks. The tokenizers are trained by
//! the Python package (BPE byte-level, BERT WordPiece, Unigram with Metaspace), the texts go
//! through a CSV file and the real host (`fe-host transform` writes the pipeline's keys).

use crate::util::{fe_host, run_python_helper, TempDir};

/// Trains the three tokenizers, writes the texts as a CSV, and the Python package's
/// `encode_batch` of them (truncated and padded to 16) as JSON.
const REFERENCE: &str = r#"
import csv, json
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, processors, trainers

corpus = [f"the {a} {b} sat on the {c} near {d}, didn't it? {n}"
          for n, (a, b, c, d) in enumerate(
              (a, b, c, d) for a in ["quick", "lazy", "brown", "big"] for b in ["cat", "dog", "fox"]
              for c in ["mat", "hat", "rug"] for d in ["Paris", "Zürich", "東京", "the river"])]

bpe = Tokenizer(models.BPE(unk_token="<unk>"))
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.decoder = decoders.ByteLevel()
bpe.post_processor = processors.TemplateProcessing(
    single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
bpe.train_from_iterator(corpus, trainers.BpeTrainer(
    vocab_size=400, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))

wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
wp.normalizer = normalizers.BertNormalizer(lowercase=True)
wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
wp.decoder = decoders.WordPiece()
wp.post_processor = processors.TemplateProcessing(
    single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
    special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
wp.train_from_iterator(corpus, trainers.WordPieceTrainer(
    vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))

uni = Tokenizer(models.Unigram())
uni.normalizer = normalizers.NFKC()
uni.pre_tokenizer = pre_tokenizers.Metaspace()
uni.decoder = decoders.Metaspace()
uni.train_from_iterator(corpus, trainers.UnigramTrainer(
    vocab_size=120, special_tokens=["<pad>", "<unk>"], unk_token="<unk>", show_progress=False))

texts = [
    "the quick cat sat on the mat",
    "",
    "The LAZY Dog didn't sit near Zürich",
    "naïve café, 東京は日本の首都です 👍🏽 مرحبا",
    "  spaces   inside\tand a tab\nand a line break  ",
    " ".join(corpus) * 3,
    "e\u0301 (combining) vs é, ﬁ ligature, ＦＵＬＬ width",
]
with open("texts.csv", "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f)
    w.writerow(["text", "n"])
    for n, t in enumerate(texts):
        w.writerow([t, n])

expected = {}
for name, tok, pad in [("bpe", bpe, "<pad>"), ("wp", wp, "[PAD]"), ("uni", uni, "<pad>")]:
    tok.save(f"{name}.json")
    tok = Tokenizer.from_file(f"{name}.json")
    tok.enable_truncation(max_length=16)
    tok.enable_padding(length=16, pad_id=tok.token_to_id(pad), pad_token=pad)
    encodings = tok.encode_batch(texts)
    expected[name] = {"ids": [e.ids for e in encodings],
                      "mask": [e.attention_mask for e in encodings],
                      "types": [e.type_ids for e in encodings]}
    # Unpadded, untruncated: the whole long text must match too (one sample per batch).
    tok.no_padding(); tok.no_truncation()
    expected[name]["full"] = [e.ids for e in tok.encode_batch(texts)]
json.dump(expected, open("expected.json", "w"))
"#;

const MANIFEST: &str = r#"
[pipeline]
batch_size = 4

[pipeline.data.infer]
type = "csv"
file = "texts.csv"

[[pipeline.ops]]
op = "Tokenize"
inputs = "text"
outputs = ["bpe_ids", "bpe_mask"]
tokenizer = "bpe.json"
max_length = 16

[[pipeline.ops]]
op = "Tokenize"
inputs = "text"
outputs = ["wp_ids", "wp_mask", "wp_types"]
tokenizer = "wp.json"
max_length = 16

[[pipeline.ops]]
op = "Tokenize"
inputs = "text"
outputs = ["uni_ids", "uni_mask"]
tokenizer = "uni.json"
max_length = 16
"#;

/// `fe-host transform` of `manifest` writing `keys`; the tensors by name, as nested rows.
fn transform(dir: &TempDir, manifest: &str, keys: &[&str]) -> Vec<(String, tch::Tensor)> {
    let path = dir.write("m.toml", manifest);
    let out = dir.path().join("out.safetensors");
    let _ = std::fs::remove_file(&out);
    let mut args = vec![
        "transform".to_owned(),
        path.to_string_lossy().into_owned(),
        "--out".to_owned(),
        out.to_string_lossy().into_owned(),
    ];
    for key in keys {
        args.extend(["--key".to_owned(), (*key).to_owned()]);
    }
    let run = fe_host().args(&args).output().expect("transform");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    fe_host::system::tensors::read(&out).unwrap()
}

fn rows(tensors: &[(String, tch::Tensor)], key: &str) -> Vec<Vec<i64>> {
    let (_, t) = tensors
        .iter()
        .find(|(n, _)| n == key)
        .unwrap_or_else(|| panic!("no {key} in the output"));
    assert_eq!(t.kind(), tch::Kind::Int64, "{key}");
    (0..t.size()[0])
        .map(|i| Vec::<i64>::try_from(t.get(i)).unwrap())
        .collect()
}

fn expected(json: &serde_json::Value, name: &str, what: &str) -> Vec<Vec<i64>> {
    serde_json::from_value(json[name][what].clone()).unwrap()
}

#[test]
fn tokenize_equals_the_python_package_for_bpe_wordpiece_and_unigram() {
    let dir = TempDir::new("tokenize-python");
    run_python_helper(dir.path(), REFERENCE, &[]);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("expected.json")).unwrap()).unwrap();
    let keys = [
        "bpe_ids", "bpe_mask", "wp_ids", "wp_mask", "wp_types", "uni_ids", "uni_mask",
    ];
    let out = transform(&dir, MANIFEST, &keys);
    for name in ["bpe", "wp", "uni"] {
        let ids = rows(&out, &format!("{name}_ids"));
        assert_eq!(ids.len(), 7, "{name}: every text, in order");
        assert_eq!(ids, expected(&json, name, "ids"), "{name} ids");
        let mask = rows(&out, &format!("{name}_mask"));
        assert_eq!(mask, expected(&json, name, "mask"), "{name} attention mask");
    }
    assert_eq!(rows(&out, "wp_types"), expected(&json, "wp", "types"));
    // The test is only as good as its texts: the long one was cut, the empty one padded.
    let wp = expected(&json, "wp", "ids");
    assert_eq!(wp[1][..3], [2, 3, 0], "empty text: [CLS] [SEP] [PAD]...");
    assert_eq!(wp[5][15], 3, "the long text is truncated to end with [SEP]");

    // Without truncation or padding: the whole sequences, the long one included, padded to
    // the batch's longest by the Batch op (with -1, which no tokenizer id is).
    let unpadded = MANIFEST.replace("max_length = 16\n", "")
        + "\n[[pipeline.ops]]\nop = \"Batch\"\nbatch_size = 7\npad_value = -1\n";
    let out = transform(&dir, &unpadded, &["bpe_ids", "wp_ids", "uni_ids"]);
    for name in ["bpe", "wp", "uni"] {
        let full = expected(&json, name, "full");
        assert!(full[5].len() > 1000, "{name}: the long text is long");
        let got: Vec<Vec<i64>> = rows(&out, &format!("{name}_ids"))
            .into_iter()
            .map(|r| r.into_iter().filter(|&id| id != -1).collect())
            .collect();
        assert_eq!(got, full, "{name} ids without truncation");
    }
}
