#!/usr/bin/env bash
# Packaging CI: builds a real consumer through every way megacpp is consumed.
#
#   1. cmake --install to a prefix; every source header is installed (the CUDA backend's too,
#      with CUDA off); tests/consumer (find_package only) builds and trains.
#   2. The installed package's interface: versions, components mpi (+ cuda, nccl when nvcc exists),
#      unknown components (tests/consumer/components).
#   3. add_subdirectory and FetchContent (from a source archive) (tests/consumer/source_tree).
#   4. conan create, offline: eigen from the system through packaging/conan/recipes/eigen-system,
#      then test_package builds and runs the consumer.
#   5. The vcpkg port's own portfile run by packaging/vcpkg/run-port.cmake (vcpkg itself cannot
#      be installed here), then the consumer against the resulting vcpkg-style package.
#
# Work goes to build/packaging (MEGACPP_PACKAGING_DIR to change); it is wiped at the start.
# Needs: cmake, g++, ninja or make, the Debian packages of scripts/install-deps.sh, python3 with
# venv (conan is pip-installed into ~/.cache/megacpp-tools unless a conan 2 is on PATH).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${MEGACPP_PACKAGING_DIR:-$root/build/packaging}"
tools="${MEGACPP_TOOLS_DIR:-$HOME/.cache/megacpp-tools}"
rm -rf "$work"
mkdir -p "$work" "$tools"

# ccache for every compile of every consumer; paths under the checkout hash relative to it.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/megacpp-ccache}" CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
has_cuda=OFF
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null; then has_cuda=ON; fi

start_all=$SECONDS
timings=()
step() {  # step "name" command...: runs a step, prints and records its wall time
  local name="$1" start=$SECONDS
  shift
  echo "---- packaging: $name"
  "$@"
  timings+=("$(printf '%4ds  %s' $((SECONDS - start)) "$name")")
}

# configure + build + ctest of one consumer project: consume <name> <source dir> [cmake args...]
consume() {
  local name="$1" src="$2"
  shift 2
  cmake -S "$src" -B "$work/$name" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >"$work/$name.configure.log" 2>&1 ||
    { cat "$work/$name.configure.log"; echo "packaging: configuring $name failed"; return 1; }
  grep -E "package check|megacpp" "$work/$name.configure.log" || true
  cmake --build "$work/$name" --parallel 2
  ctest --test-dir "$work/$name" --output-on-failure
}

install_and_consume() {
  cmake -S "$root" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$work/prefix" \
        -DMEGACPP_BUILD_TESTS=OFF -DMEGACPP_BUILD_EXAMPLES=OFF -DMEGACPP_BUILD_BENCH=OFF -DMEGACPP_CUDA=OFF >/dev/null
  cmake --install "$work/build" >/dev/null
  # Every header of the source tree is installed, backends included (the CUDA one with CUDA off).
  (cd "$root" && for dir in include backends/*/include; do
     (cd "$dir" && find . -name '*.hpp' -o -name '*.cuh' -o -name '*.h'); done) | sort >"$work/headers.source"
  (cd "$work/prefix/include" && find . -type f) | sort >"$work/headers.installed"
  if ! diff -u "$work/headers.source" "$work/headers.installed"; then
    echo "packaging: the installed headers differ from the source tree's (diff above: - source, + installed)"
    return 1
  fi
  echo "installed $(wc -l <"$work/headers.installed") headers and $(cd "$work/prefix/share/cmake/megacpp" && echo *)"
  cmp "$root/LICENSE" "$work/prefix/share/doc/megacpp/LICENSE" || { echo "packaging: the license is not installed"; return 1; }
  consume consumer "$root/tests/consumer" -DCMAKE_PREFIX_PATH="$work/prefix"
}

source_tree() {
  consume add_subdirectory "$root/tests/consumer/source_tree" -DMEGACPP_CONSUMER_VIA=add_subdirectory \
          -DMEGACPP_SOURCE="$root" -DMEGACPP_MPI=ON
  tar -czf "$work/megacpp-src.tar.gz" -C "$root" --exclude=./build --exclude=./.git \
      --exclude=./test_package/build --exclude=./test_package/CMakeUserPresets.json .
  consume fetchcontent "$root/tests/consumer/source_tree" -DMEGACPP_CONSUMER_VIA=FetchContent \
          -DMEGACPP_SOURCE="file://$work/megacpp-src.tar.gz" -DMEGACPP_CUDA=OFF
}

conan_create() {
  local conan=conan
  if ! command -v conan >/dev/null || ! conan --version | grep -q "version 2\."; then
    if [ ! -x "$tools/conan-venv/bin/conan" ]; then
      python3 -m venv "$tools/conan-venv"
      "$tools/conan-venv/bin/pip" install --quiet "conan>=2,<3"
    fi
    conan="$tools/conan-venv/bin/conan"
  fi
  "$conan" --version
  export CONAN_HOME="$work/conan-home"  # a private cache: nothing from earlier runs
  "$conan" profile detect --force >/dev/null 2>&1
  # From here on, the commands of docs/getting-started.md ("Conan 2") verbatim: -nr never asks a
  # remote (this machine has none), the eigen recipe takes Debian's headers.
  local options=(-o "&:mpi=True")
  if [ "$has_cuda" = ON ]; then options+=(-o "&:cuda=True"); fi
  (cd "$root" && "$conan" export packaging/conan/recipes/eigen-system -nr 2>&1 | grep "^Exported:")
  (cd "$root" && "$conan" create . -nr --build=missing -pr:a packaging/conan/profiles/cpp20 "${options[@]}" \
     >"$work/conan-create.log" 2>&1) ||
    { tail -n 80 "$work/conan-create.log"; echo "packaging: conan create failed (log: $work/conan-create.log)"; return 1; }
  grep -E "RUN: \./|train_tiny_mlp|component_check|Resolved|eigen/.*: eigen" "$work/conan-create.log"
  # The package carries the license where Conan expects it (licenses/) as well as share/doc.
  local licenses
  licenses="$(find "$CONAN_HOME/p" -path '*/p/licenses/LICENSE' -exec grep -l "the megacpp authors" {} + || true)"
  [ -n "$licenses" ] && cmp "$root/LICENSE" "${licenses%%$'\n'*}" ||
    { echo "packaging: the conan package has no licenses/LICENSE"; return 1; }
}

vcpkg_port() {
  local features="core;mpi"
  if [ "$has_cuda" = ON ]; then features="core;cuda;mpi"; fi
  cmake -DPORT_DIR="$root/ports/megacpp" -DFEATURES="$features" -DWORK_DIR="$work/vcpkg" \
        -P "$root/packaging/vcpkg/run-port.cmake" 2>&1 | grep -v "^-- vcpkg_cmake_configure: \|^-- Install\|^-- Up-to-date"
  test -f "$work/vcpkg/packages/megacpp_x64-linux/share/megacpp/megacppConfig.cmake"
  consume vcpkg-consumer "$root/tests/consumer" -DCMAKE_PREFIX_PATH="$work/vcpkg/packages/megacpp_x64-linux"
}

step "cmake --install + tests/consumer (find_package)" install_and_consume
step "installed package interface: versions, components (cuda/nccl: $has_cuda)" \
     consume components "$root/tests/consumer/components" -DCMAKE_PREFIX_PATH="$work/prefix" \
     -DMEGACPP_CONSUMER_CUDA="$has_cuda"
step "add_subdirectory + FetchContent" source_tree
step "conan create + test_package (offline)" conan_create
step "vcpkg port steps by hand + consumer" vcpkg_port

echo "---- packaging: all consumption paths passed in $((SECONDS - start_all))s"
printf '%s\n' "${timings[@]}"
