#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the host and the sample
# plugins, generates the digits dataset (once, deterministically) and trains LeNet on it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh

cargo build --workspace
# Builds from before the test-fixture plugin became a cargo example left it next to fe-host,
# where every run would find it (tests load it from target/debug/examples/).
rm -f target/debug/libfe_faulty.so

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

case ":$PATH:" in
    *":$root/target/debug:"*) ;;
    *) echo "fe-host setup: to run fe-host from anywhere: export PATH=\"$root/target/debug:\$PATH\"   (or install it: bash scripts/install.sh ~/.local)" ;;
esac
