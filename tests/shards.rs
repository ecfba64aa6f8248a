//! `fe-host datagen shards`: a dataset cut into WebDataset shards reads back, through
//! `type = "webdataset"`, as the same samples (keys, dtypes, shapes and values).

use fe_host::manifest::Manifest;
use fe_host::network::Keys;
use fe_host::pipeline::Pipeline;

use crate::util::{fe_host, small_digits, Run, TempDir};

fn samples(dir: &TempDir, name: &str, data: &str) -> Vec<Vec<(String, tch::Tensor)>> {
    let text = format!("[run]\nepochs = 1\n\n[pipeline]\nbatch_size = 8\n\n{data}");
    let manifest = Manifest::load(&dir.write(name, &text)).unwrap();
    let registry = crate::network::registry();
    let pipeline = Pipeline::build(&manifest, &registry, &mut Keys::default()).unwrap();
    let source = &pipeline.datasets[0].source;
    (0..source.len())
        .map(|i| {
            let mut sample: Vec<(String, tch::Tensor)> = source
                .keys()
                .iter()
                .cloned()
                .zip(source.get(i).unwrap())
                .filter(|(k, _)| k == "x" || k == "y")
                .collect();
            sample.sort_by(|a, b| a.0.cmp(&b.0));
            sample
        })
        .collect()
}

#[test]
fn idx_digits_cut_into_shards_read_back_as_the_same_samples() {
    let dir = TempDir::new("shards");
    small_digits(&dir);
    let idx = "[pipeline.data.train]\ntype = \"idx\"\nfiles = { x = \"data/digits/train-images-idx3-ubyte\", y = \"data/digits/train-labels-idx1-ubyte\" }\n";
    dir.write(
        "idx.toml",
        &format!("[run]\nepochs = 1\n\n[pipeline]\nbatch_size = 8\n\n{idx}"),
    );
    let out: Run = fe_host()
        .current_dir(dir.path())
        .args([
            "datagen",
            "shards",
            "idx.toml",
            "--out",
            "shards",
            "--samples-per-shard",
            "40",
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_contains!(out.stdout, "wrote 96 samples into 3 shards");
    assert_contains!(out.stdout, "urls = \"shards/train-{000000..000002}.tar\"");
    assert_contains!(
        out.stdout,
        "keys = { \"x.npy\" = \"x\", \"y.npy\" = \"y\" }"
    );

    let source = samples(&dir, "idx.toml", idx);
    let shards = samples(
        &dir,
        "shards.toml",
        "[pipeline.data.train]\ntype = \"webdataset\"\nurls = \"shards/train-{000000..000002}.tar\"\nkeys = { \"x.npy\" = \"x\", \"y.npy\" = \"y\" }\n",
    );
    assert_eq!(source.len(), 96);
    assert_eq!(shards.len(), source.len());
    for (i, (a, b)) in source.iter().zip(&shards).enumerate() {
        assert_eq!(a.len(), 2, "sample {i}: {a:?}");
        for ((ka, ta), (kb, tb)) in a.iter().zip(b) {
            assert_eq!(ka, kb);
            assert_eq!(
                (ta.kind(), ta.size()),
                (tb.kind(), tb.size()),
                "sample {i} key {ka}"
            );
            assert!(ta.equal(tb), "sample {i} key {ka}");
        }
    }
    // The comparison can fail: neighbouring samples differ.
    assert!(!source[0][0].1.equal(&source[1][0].1));

    // The same data gives the same shards, byte for byte.
    let first = std::fs::read(dir.path().join("shards/train-000000.tar")).unwrap();
    let again: Run = fe_host()
        .current_dir(dir.path())
        .args([
            "datagen",
            "shards",
            "idx.toml",
            "--out",
            "again",
            "--samples-per-shard",
            "40",
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(first == std::fs::read(dir.path().join("again/train-000000.tar")).unwrap());
}
