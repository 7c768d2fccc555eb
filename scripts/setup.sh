#!/usr/bin/env bash
# Sets attnlab up on a Debian (bookworm) machine: installs the Debian packages it needs when any is
# missing (as root, or through sudo; otherwise says what to install), then configures and builds a
# Release build into build/ on all cores. Running it again when everything is present only rebuilds
# what changed. Arguments name further packages to install the same way (scripts/test_clang.sh: clang).
set -euo pipefail
cd "$(dirname "$0")/.."

for extra in "$@"; do
  if ! [[ "$extra" =~ ^[a-z0-9][a-z0-9+.-]+$ ]]; then
    echo "setup: '$extra' is not a Debian package name; its arguments name further packages to install" >&2
    exit 2
  fi
done

packages=(
  g++ make cmake                      # compiler and build
  libopenblas-dev                     # BLAS (dgemm, trsm; sgemm where oneDNN and libxsmm take no call)
  libdnnl-dev                         # oneDNN: float products (sgemm)
  libxtensor-dev libxtensor-blas-dev xtl-dev libxsimd-dev
  libyaml-cpp-dev                     # experiment configs
  nlohmann-json3-dev                  # JSON files (weights folders' index.json)
  libcli11-dev                        # the attnlab command line
  zlib1g-dev                          # gzipped IDX image files
  libstb-dev                          # PNG heatmaps (stb_image_write)
  dataset-fashion-mnist               # Fashion-MNIST (IDX files in /usr/share/datasets/fashion-mnist)
  libgtest-dev                        # tests
  libbenchmark-dev                    # op benchmarks
  libxsmm-dev                         # libxsmm: small float products (the recurrent kernels' chunk blocks)
  libblis-dev                         # bench_gemm: BLIS beside OpenBLAS, oneDNN and libxsmm
  python3-matplotlib python3-numpy    # scripts/plot_run.py figures, the Python module's arrays
  python3-dev pybind11-dev            # the Python module (build/python/attnlab*.so)
  python3-pytest                      # the Python module's tests
  chromium chromium-driver python3-selenium  # the reports opened in a real browser (tests/report)
  python3-torch                       # the PyTorch side of scripts/bench/compare.py
  libopenmpi-dev openmpi-bin          # data-parallel training, distributed comparisons (mpirun)
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing missing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "setup: not root and no sudo; as root, run:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"

# The Python module: build/python/attnlab*.so, made importable by Debian's python3 through a .pth file in
# this user's site-packages that names build/python (remove that file to undo it).
if compgen -G "build/python/attnlab*.so" > /dev/null; then
  site=$(/usr/bin/python3 -c "import site; print(site.getusersitepackages())")
  mkdir -p "$site" && echo "$PWD/build/python" > "$site/attnlab-build.pth"
  echo "setup: python3 -c 'import attnlab' works ($site/attnlab-build.pth names $PWD/build/python)"
fi
