#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the host and the sample
# plugins, generates the digits dataset (once, deterministically) and trains LeNet on it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh

cargo build --workspace

if [ ! -f data/digits/MANIFEST ]; then
    target/debug/fe-host datagen digits --out data/digits
fi

# Each run writes into runs/lenet/version_N of its own (a second run never touches the first);
# `bash scripts/setup.sh --resume` continues the latest one. The run's last lines say where
# its best model and checkpoint are, and how to go on from them.
target/debug/fe-host run examples/lenet.toml "$@"
