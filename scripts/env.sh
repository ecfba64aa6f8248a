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

ensure_libtorch
