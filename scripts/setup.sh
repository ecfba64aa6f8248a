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

target/debug/fe-host run examples/lenet.toml "$@"
