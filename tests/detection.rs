//! `MeanAveragePrecision` against pycocotools' `COCOeval` (bbox) in one process and on two
//! ranks, all six of its AP stats (crowd ground truth, the three area ranges): random boxes
//! with padding rows (tests/fixtures/detection_reference.py) go through an
//! `npy` dataset; 61 evaluation images in batches of 8 leave the ranks different shares, and the
//! reduction must evaluate the gathered detections, not average the ranks' mAPs.

use crate::dist::last;
use crate::metrics::run;
use crate::util::TempDir;

#[test]
fn mean_average_precision_equals_pycocotools_in_one_process_and_on_two_ranks() {
    let data = TempDir::new("detection-data");
    let want = crate::util::python_fixture_json(
        "detection_reference.py",
        &[data.path().as_os_str(), "3".as_ref()],
    );
    let d = data.path().display();
    let files = format!("{{ gt = \"{d}/gt.npy\", pred = \"{d}/pred.npy\" }}");
    let manifest = format!(
        "[run]\nepochs = 1\nseed = 1\nprocess_group_timeout = 60\ntrain_steps_per_epoch = 1\n\n\
         [pipeline]\nbatch_size = 8\n\n\
         [pipeline.data.train]\ntype = \"npy\"\nfiles = {files}\n\n\
         [pipeline.data.eval]\ntype = \"npy\"\nfiles = {files}\n\n\
         [[traces]]\ntrace = \"MeanAveragePrecision\"\ninputs = [\"gt\", \"pred\"]\n\
         outputs = [\"mAP\", \"AP50\", \"AP75\", \"APs\", \"APm\", \"APl\"]\n"
    );
    let mut bits = Vec::new();
    for world in [1, 2] {
        let dir = TempDir::new(&format!("detection-{world}"));
        let summary = run(&dir, world, &manifest);
        let mut got = Vec::new();
        for (key, reference) in [
            ("mAP", "map"),
            ("AP50", "ap50"),
            ("AP75", "ap75"),
            ("APs", "aps"),
            ("APm", "apm"),
            ("APl", "apl"),
        ] {
            let value = last(&summary, "eval", key);
            let reference = want[reference].as_f64().unwrap();
            // The references must exercise every area range.
            assert!(reference > 0.0, "{key}: pycocotools {reference}");
            assert!(
                (value - reference).abs() < 1e-12,
                "{world} rank(s) {key}: fe-host {value}, pycocotools {reference}"
            );
            got.push(value.to_bits());
        }
        bits.push(got);
    }
    assert_eq!(bits[0], bits[1], "two ranks reduce the same detections");
}
