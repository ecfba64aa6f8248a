//! `BleuScore` (fe-metrics) against NLTK's `corpus_bleu` with smoothing method 4, the
//! reference FastEstimator's BleuScore uses, through the real binary on random token sequences
//! (tests/fixtures/bleu_reference.py), in one process and on two ranks: 157 evaluation
//! sentences in batches of 16 leave the ranks different shares, and the n-gram counts they
//! sum must give the single-process score.

use crate::dist::last;
use crate::metrics::run;
use crate::util::TempDir;

fn reference(dir: &TempDir, seed: u32) -> serde_json::Value {
    crate::util::python_fixture_json(
        "bleu_reference.py",
        &[dir.path().as_os_str(), seed.to_string().as_ref()],
    )
}

fn manifest(dir: &TempDir) -> String {
    let d = dir.path().display();
    let files = format!(
        "{{ y_small = \"{d}/y_small.npy\", p_small = \"{d}/p_small.npy\", \
         y_large = \"{d}/y_large.npy\", p_large = \"{d}/p_large.npy\" }}"
    );
    let mut text = format!(
        "[run]\nepochs = 1\nseed = 1\nprocess_group_timeout = 60\ntrain_steps_per_epoch = 1\n\n\
         [pipeline]\nbatch_size = 16\n\n[pipeline.data.train]\ntype = \"npy\"\nfiles = {files}\n\n\
         [pipeline.data.eval]\ntype = \"npy\"\nfiles = {files}\n"
    );
    for name in ["small", "large"] {
        for (output, n) in [("bleu4", 4), ("bleu2", 2)] {
            text.push_str(&format!(
                "\n[[traces]]\ntrace = \"BleuScore\"\ninputs = [\"y_{name}\", \"p_{name}\"]\noutputs = \"{output}_{name}\"\nn_gram = {n}\n"
            ));
        }
    }
    text
}

#[test]
fn bleu_equals_nltk_corpus_bleu_in_one_process_and_on_two_ranks() {
    let data = TempDir::new("bleu-data");
    let want = reference(&data, 11);
    let text = manifest(&data);
    let mut runs = Vec::new();
    for world in [1, 2] {
        let dir = TempDir::new(&format!("bleu-{world}"));
        let summary = run(&dir, world, &text);
        for name in ["small", "large"] {
            for order in ["bleu4", "bleu2"] {
                let got = last(&summary, "eval", &format!("{order}_{name}"));
                let reference = want[name][order].as_f64().unwrap();
                assert!(
                    (got - reference).abs() < 1e-12,
                    "{order} {name}, {world} rank(s): fe-host {got}, NLTK {reference}"
                );
            }
        }
        runs.push(summary);
    }
    // The large vocabulary has no matching 4-gram: its BLEU-4 rests on the smoothing.
    assert!(last(&runs[0], "eval", "bleu4_large") > 0.0);
    for key in ["bleu4_small", "bleu2_small", "bleu4_large", "bleu2_large"] {
        assert_eq!(
            last(&runs[0], "eval", key).to_bits(),
            last(&runs[1], "eval", key).to_bits(),
            "{key}"
        );
    }
}
