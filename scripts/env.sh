#!/usr/bin/env bash
# Makes sure the project-local libtorch exists: PyTorch 2.11.0 from PyPI in .venv/, with
# `.libtorch` linked to its torch package (what .cargo/config.toml points LIBTORCH at).
# Idempotent and quiet when everything is already there. Run it; sourcing it does the same
# and leaves the calling shell's options alone (the body runs in a subshell).

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

ensure_libtorch() (
set -euo pipefail
venv="$root/.venv"
want="2.11.0"
python="${PYTHON:-python3}"

installed_torch() {
    [ -x "$venv/bin/python" ] || return 0
    "$venv/bin/python" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
print(m.version("torch"))
PY
}

have="$(installed_torch)"
if [ "${have%%+*}" != "$want" ]; then
    echo "fe-host setup: installing torch==$want from PyPI into $venv (one time; the wheel carries libtorch and its CUDA libraries)"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check --quiet "torch==$want"
fi

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ ! -f "$site/torch/lib/libtorch_cpu.so" ]; then
    echo "fe-host setup: $site/torch/lib/libtorch_cpu.so is missing; remove $venv and run again" >&2
    exit 1
fi
ln -sfn "$site/torch" "$root/.libtorch"

if ! command -v cargo >/dev/null 2>&1; then
    echo "fe-host setup: cargo is not on PATH; install Rust with rustup (https://rustup.rs)" >&2
    exit 1
fi
)

# c10d's ProcessGroupGloo.hpp (host/csrc/dist.cpp) includes gloo's headers, which the torch
# wheel does not ship; Debian's libgloo-dev has them (the implementation is in libtorch_cpu.so).
ensure_gloo_headers() (
set -euo pipefail
[ -f /usr/include/gloo/config.h ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "fe-host setup: installing libgloo-dev (gloo's headers, for the c10d process group) with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq libgloo-dev >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq libgloo-dev >/dev/null; }
else
    echo "fe-host setup: gloo's headers (/usr/include/gloo) are missing; install Debian's libgloo-dev as root (apt-get install libgloo-dev)" >&2
    exit 1
fi
)

# c10d's ProcessGroupNCCL.hpp (host/csrc/nccl.cpp: data parallel on GPUs) includes CUDA's
# runtime headers, which the torch wheel's nvidia packages carry except for two header-only
# parts (crt/, and CCCL's nv/target). Installed to match the wheel's CUDA runtime; without them
# fe-host builds without NCCL and says so (`fe-host devices`). Never fatal.
ensure_cuda_headers() (
set -uo pipefail
venv="$root/.venv"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
runtime="$("$venv/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
for dist in m.distributions():
    if dist.metadata["Name"] in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13"):
        print(dist.version)
        break
PY
)"
[ -n "$runtime" ] || exit 0
include="$(ls -d "$site"/nvidia/cu*/include 2>/dev/null | head -n 1)"
[ -n "$include" ] && [ -f "$include/crt/host_config.h" ] && [ -d "$include/nv" ] && exit 0
series="$(echo "$runtime" | cut -d. -f1-2)"
echo "fe-host setup: installing CUDA $series's header-only packages (nvidia-cuda-crt, nvidia-cuda-cccl) for the NCCL process group"
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet --no-deps \
    "nvidia-cuda-crt==$series.*" "nvidia-cuda-cccl==$series.*" \
    || echo "fe-host setup: could not install them; fe-host builds without NCCL (Gloo only)" >&2
)

ensure_libtorch
ensure_gloo_headers
ensure_cuda_headers
