#!/usr/bin/env bash
# Installs fe-host under PREFIX (default: ~/.local) so that it works without this checkout:
#   PREFIX/bin/fe-host
#   PREFIX/lib/fe-host/plugins/lib*.so     the plugin root fe-host searches next to itself
#   PREFIX/lib/fe-host/torch/{lib,include,version.py}
#                                          the libtorch fe-host was built with (the binary's
#                                          rpath $ORIGIN/../lib/fe-host/torch/lib finds it; new
#                                          plugins compile against its headers)
#   PREFIX/lib/fe-host/nvidia/*/lib        the CUDA libraries a CUDA wheel's libtorch loads
#                                          (its own rpath, $ORIGIN/../../nvidia/*/lib)
#   PREFIX/share/fe-host/plugin-api/       fe-plugin-api's sources, for `fe-host new plugin`
# libtorch is copied as hard links where PREFIX is on the same file system as .venv (no extra
# space), else as files: about 1 GB for a CPU wheel, 3.7 GB for a CUDA one. With
# FE_LIBTORCH_LINK=1 the prefix links to the torch package instead (it must then outlive the
# checkout: point FE_LIBTORCH at a torch 2.11.0 installed elsewhere).
# Environment: FE_LIBTORCH (a torch package directory; default this checkout's .libtorch),
# FE_LIBTORCH_LINK=1 (link, don't copy), FE_INSTALL_FROM (a cargo output directory holding an
# fe-host and the plugins already built; default: build here, into target/debug).
# The test fixture plugin (tests/fixtures/faulty-plugin) is not a sample plugin and is never
# installed.
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
if [ -n "${FE_INSTALL_FROM:-}" ]; then
    built="$FE_INSTALL_FROM"
else
    bash scripts/env.sh
    cargo build --workspace --quiet
    built=target/debug
fi
torch_src="$(cd "${FE_LIBTORCH:-$root/.libtorch}" && pwd -P)"
if [ ! -f "$torch_src/lib/libtorch_cpu.so" ] || [ ! -d "$torch_src/include/torch" ]; then
    echo "fe-host install: $torch_src is not a torch package (no lib/libtorch_cpu.so and include/torch); set FE_LIBTORCH" >&2
    exit 1
fi

bin="$prefix/bin"
plugins="$prefix/lib/fe-host/plugins"
mkdir -p "$bin" "$plugins"
# A copy written next to the old file and renamed over it: a running fe-host keeps its file.
install -m 755 "$built/fe-host" "$bin/.fe-host.new"
mv -f "$bin/.fe-host.new" "$bin/fe-host"
for manifest in plugins/*/Cargo.toml; do
    name="$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -n 1)"
    library="$built/lib${name//-/_}.so"
    if [ ! -f "$library" ]; then
        echo "fe-host install: $library is missing after the build" >&2
        exit 1
    fi
    install -m 755 "$library" "$plugins/.new-$(basename "$library")"
    mv -f "$plugins/.new-$(basename "$library")" "$plugins/$(basename "$library")"
done

# Hard links where the file system allows (a later pip upgrade replaces .venv's files, so the
# links keep the old, matching ones), else copies.
copy_tree() {
    rm -rf "$2"
    mkdir -p "$(dirname "$2")"
    cp -al "$1" "$2" 2>/dev/null || { rm -rf "$2"; cp -a "$1" "$2"; }
}
home="$prefix/lib/fe-host"
rm -rf "$home/torch" "$home/nvidia"
if [ "${FE_LIBTORCH_LINK:-0}" = 1 ]; then
    case "$torch_src/" in
        "$root"/*) echo "fe-host install: warning: $torch_src is inside this checkout; the prefix stops working when it is deleted" >&2 ;;
    esac
    ln -s "$torch_src" "$home/torch"
    # libtorch's rpath looks for the CUDA libraries at $ORIGIN/../../nvidia.
    if [ -d "$torch_src/../nvidia" ]; then
        ln -s "$(cd "$torch_src/../nvidia" && pwd -P)" "$home/nvidia"
    fi
    libtorch_note="linked to $torch_src"
else
    mkdir -p "$home/torch"
    copy_tree "$torch_src/lib" "$home/torch/lib"
    copy_tree "$torch_src/include" "$home/torch/include"
    # plugin-api's build stamps the libtorch version it reads here into every plugin.
    cp "$torch_src/version.py" "$home/torch/version.py" 2>/dev/null || true
    if [ -d "$torch_src/../nvidia" ]; then
        for lib in "$torch_src"/../nvidia/*/lib; do
            package="$(basename "$(dirname "$lib")")"
            copy_tree "$lib" "$home/nvidia/$package/lib"
        done
    fi
    if [ "$(stat -c %h "$home/torch/lib/libtorch_cpu.so")" -gt 1 ]; then
        libtorch_note="hard-linked from $torch_src, no extra space"
    else
        libtorch_note="copied, $(du -sch "$home/torch" "$home/nvidia" 2>/dev/null | tail -n 1 | cut -f 1)"
    fi
fi

share="$prefix/share/fe-host"
rm -rf "$share/plugin-api"
mkdir -p "$share/plugin-api"
cp -R plugin-api/Cargo.toml plugin-api/build.rs plugin-api/README.md plugin-api/src "$share/plugin-api/"

echo "fe-host install: $bin/fe-host, sample plugins in $plugins, libtorch in $home/torch ($libtorch_note), fe-plugin-api in $share/plugin-api"
case ":$PATH:" in
    *":$bin:"*) ;;
    *) echo "fe-host install: to run fe-host from anywhere, add this line to your shell's profile: export PATH=\"$bin:\$PATH\"" ;;
esac
