#!/usr/bin/env bash
# Fill .whl/ (ignored by git) with what benchmarks/gpu_check.sh needs on a GPU machine
# that has no network: the gast and astor wheels (pure Python, for Python 3.12; the
# versions installed here) and, as a fallback only, NVIDIA's NVVM for CUDA 13.0
# (libnvvm and libdevice, 20 MB as .tar.xz: used when numba finds no NVVM there).
#
#   bash benchmarks/gpu_wheels.sh          # then carry ".whl" with the run
#
# NVVM_VERSION=13.0.88 picks the NVVM (match the driver's CUDA version: a newer NVVM
# writes PTX an older driver cannot load); NVVM_VERSION=none leaves it out.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux2010_x86_64)
pins=()
for pkg in gast astor; do
    ver=$($PY -c "from importlib.metadata import version; print(version('$pkg'))")
    pins+=("$pkg==$ver")
done
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d .whl "${pins[@]}"
for w in .whl/gast-*.whl .whl/astor-*.whl; do
    if unzip -l "$w" | awk 'NR > 3 {print $4}' | grep -E '\.(so|pyd|dylib)$'; then
        echo "$w is not pure Python" >&2
        exit 1
    fi
done

NVVM_VERSION=${NVVM_VERSION:-13.0.88}
if [ "$NVVM_VERSION" != none ] && [ ! -f ".whl/nvvm-$NVVM_VERSION.tar.xz" ]; then
    tmp=$(mktemp -d)
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${PLATFORMS[@]}" --platform manylinux_2_12_x86_64 -d "$tmp" "nvidia-nvvm==$NVVM_VERSION"
    (cd "$tmp" && unzip -q nvidia_nvvm-*.whl 'nvidia/cu13/lib/libnvvm.so.4' \
                                          'nvidia/cu13/nvvm/libdevice/libdevice.10.bc')
    # the layout numba looks for under CUDA_HOME: nvvm/lib64 and nvvm/libdevice
    mkdir -p "$tmp/fb/nvvm/lib64" "$tmp/fb/nvvm/libdevice"
    mv "$tmp/nvidia/cu13/lib/libnvvm.so.4" "$tmp/fb/nvvm/lib64/"
    ln -s libnvvm.so.4 "$tmp/fb/nvvm/lib64/libnvvm.so"
    mv "$tmp/nvidia/cu13/nvvm/libdevice/libdevice.10.bc" "$tmp/fb/nvvm/libdevice/"
    tar -C "$tmp/fb" -cf - nvvm | xz -6 > ".whl/nvvm-$NVVM_VERSION.tar.xz"
    rm -rf "$tmp"
fi
ls -la .whl
du -sh .whl
