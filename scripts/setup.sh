#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the host and the sample
# plugins, generates the examples' datasets (once, deterministically) and trains LeNet.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/env.sh

cargo build --workspace
# Builds from before the test-fixture plugin became a cargo example left it next to fe-host,
# where every run would find it (tests load it from target/debug/examples/).
rm -f target/debug/libfe_faulty.so

# The target directory every scaffolded plugin shares (`fe-host new plugin` points its
# .cargo/config.toml there; `fe-host plugins build` uses it): tch and libtorch's C++ wrapper
# compile once here, so a new plugin's first build compiles only itself. The warm-up crate
# lies outside the checkout, as authors' crates do: the checkout's rustflags would make
# different artifacts.
warm_up="$(mktemp -d)"
target/debug/fe-host new plugin fe-warm-up --dir "$warm_up/fe-warm-up" >/dev/null
target/debug/fe-host plugins build "$warm_up/fe-warm-up" --into "$warm_up/installed" >/dev/null
rm -rf "$warm_up"

# Every example's data (once, deterministically; a dataset is complete when its MANIFEST is
# there): digits for lenet, curriculum and mixup, cifar for the ResNets, WideResNet,
# cifar10_fast and fgsm, masks for UNet, tokens for the LSTM and the transformer, text for the
# text classifier. The tabular example's table is bundled (examples/data/breast_cancer).
for dataset in digits cifar masks tokens text; do
    if [ ! -f "data/$dataset/MANIFEST" ]; then
        target/debug/fe-host datagen "$dataset" --out "data/$dataset"
    fi
done

# Each run writes into runs/lenet/version_N of its own (a second run never touches the first);
# `bash scripts/setup.sh --resume` continues the latest one. The run's last lines say where
# its best model and checkpoint are, and how to go on from them.
target/debug/fe-host run examples/lenet.toml "$@"

case ":$PATH:" in
    *":$root/target/debug:"*) ;;
    *) echo "fe-host setup: to run fe-host from anywhere: export PATH=\"$root/target/debug:\$PATH\"   (or install it: bash scripts/install.sh ~/.local)" ;;
esac
