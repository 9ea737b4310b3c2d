#!/usr/bin/env bash
# Installs megacpp's build and test dependencies from Debian 12 packages (idempotent).
# Runs apt-get directly as root, through sudo otherwise. CUDA is optional and not installed here:
# the CUDA backend is built when /usr/local/cuda/bin/nvcc (CUDA >= 12, C++20) exists.
set -euo pipefail

packages=(
  cmake g++ make ccache                  # toolchain (CMake >= 3.25 for workflow presets)
  clang libomp-dev                       # the clang preset and the fuzzers (clang 14; its OpenMP runtime)
  libeigen3-dev                          # core: CPU backend GEMM
  catch2                                 # tests (Catch2 v2.13)
  libboost-program-options-dev           # trainer CLI
  libopenmpi-dev openmpi-bin             # MPI communicator component
  nlohmann-json3-dev                     # checkpoint metadata, tokenizer.json
  libpcre2-dev pkg-config                # the BPE tokenizer's pre_tokenizer regexes (PCRE2)
  libbenchmark-dev                       # benches
  libdnnl-dev                            # bench/onednn only: oneDNN's matmul, the GEMM comparison
  doxygen                                # API docs
  python3-venv                           # packaging CI: the conan client is pip-installed into a venv
  python3-torch                          # the torch_loader test (scripts/megacpp_torch.py; PyTorch 1.13, ~85 MB download)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
