#!/usr/bin/env bash
# Installs fe-host and the sample plugins under PREFIX (default: ~/.local):
#   PREFIX/bin/fe-host
#   PREFIX/lib/fe-host/plugins/lib*.so     the plugin root fe-host searches next to itself
# Builds first when needed. The test fixture plugin (tests/fixtures/faulty-plugin) is not a
# sample plugin and is never installed. The binary keeps finding libtorch in this checkout's
# .venv (an absolute rpath), so keep the checkout, or set LD_LIBRARY_PATH (README: FAQ).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:-$HOME/.local}"
case "$prefix" in
    -h|--help)
        echo "usage: bash scripts/install.sh [PREFIX]   (default PREFIX: ~/.local)"
        exit 0
        ;;
esac
cd "$root"
bash scripts/env.sh
cargo build --workspace --quiet

bin="$prefix/bin"
plugins="$prefix/lib/fe-host/plugins"
mkdir -p "$bin" "$plugins"
# A copy written next to the old file and renamed over it: a running fe-host keeps its file.
install -m 755 target/debug/fe-host "$bin/.fe-host.new"
mv -f "$bin/.fe-host.new" "$bin/fe-host"
for manifest in plugins/*/Cargo.toml; do
    name="$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -n 1)"
    library="target/debug/lib${name//-/_}.so"
    if [ ! -f "$library" ]; then
        echo "fe-host install: $library is missing after the build" >&2
        exit 1
    fi
    install -m 755 "$library" "$plugins/.new-$(basename "$library")"
    mv -f "$plugins/.new-$(basename "$library")" "$plugins/$(basename "$library")"
done

echo "fe-host install: $bin/fe-host, sample plugins in $plugins"
case ":$PATH:" in
    *":$bin:"*) ;;
    *) echo "fe-host install: to run fe-host from anywhere, add this line to your shell's profile: export PATH=\"$bin:\$PATH\"" ;;
esac
