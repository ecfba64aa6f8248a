#!/usr/bin/env bash
# The README's second command: the whole test suite (formatting, lints, unit, integration
# and doc tests). Installs libtorch first when it is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh
# Test-only: tests/exports.rs converts exports to ONNX (onnx) and runs them (onnxruntime).
.venv/bin/python -m pip install --disable-pip-version-check --quiet "onnx==1.23.2" "onnxruntime==1.31.1"
# Test-only: fe-image-ops compares its augmentations with albumentations (and its OpenCV).
.venv/bin/python -m pip install --disable-pip-version-check --quiet "albumentations==2.0.8" "opencv-python-headless==5.0.0.93"
# Test-only: tests/metrics.rs compares ROCAUC with scikit-learn's roc_auc_score.
.venv/bin/python -m pip install --disable-pip-version-check --quiet "scikit-learn==1.7.2"
# Test-only: tests/bleu.rs compares BleuScore with NLTK's corpus_bleu (FastEstimator's reference);
# tests/super_loss.rs uses scipy's lambertw (scipy comes with scikit-learn).
.venv/bin/python -m pip install --disable-pip-version-check --quiet "nltk==3.10.4"
# Test-only: tests/tokenize.rs compares Tokenize with the Python tokenizers package (the version
# of the Rust crate fe-text-ops encodes with).
.venv/bin/python -m pip install --disable-pip-version-check --quiet "tokenizers==0.22.2"
# Test-only: tests/parquet.rs writes its Parquet and Arrow IPC tables with pyarrow.
.venv/bin/python -m pip install --disable-pip-version-check --quiet "pyarrow==26.0.1"
# Test-only: tests/torchvision.rs and the torchscript bench script torchvision's resnet18. The
# build matching torch 2.11, without its dependencies so that .venv's torch stays; pillow is
# what torchvision imports at start-up.
.venv/bin/python -m pip install --disable-pip-version-check --quiet --no-deps "torchvision==0.26.0" "pillow==13.0.0"
# Bench-only: host/benches/streaming.rs reads the same shards with the webdataset package.
.venv/bin/python -m pip install --disable-pip-version-check --quiet "webdataset==1.0.2"
# Test-only: tests/detection.rs compares MeanAveragePrecision with pycocotools' COCOeval.
.venv/bin/python -m pip install --disable-pip-version-check --quiet "pycocotools==2.0.10"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace "$@"
