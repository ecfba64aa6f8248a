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

# A new run never writes into a finished one (fe-host refuses another run's checkpoint folder):
# when this command ran before, its results are kept under the next free runs/lenet.N.
if [ -d runs/lenet ] && [[ " $* " != *" --resume "* ]]; then
    n=1
    while [ -e "runs/lenet.$n" ]; do n=$((n + 1)); done
    mv runs/lenet "runs/lenet.$n"
    echo "fe-host setup: kept the previous run's results in runs/lenet.$n"
fi

target/debug/fe-host run examples/lenet.toml "$@"
