#!/usr/bin/env bash
# Checks the include rules between megacpp's layers (docs/architecture.md, "Rules between the
# layers") and the header size rule, over the tree at $1 (default: the repository root).
# Prints every violation as file:line and exits 1 if there is any. Run by CTest (tests/CMakeLists.txt).
#
# A file under <folder> may include megacpp headers only from the folders listed for it:
#   include/megacpp/core        core
#   backends/<name>             core, the backend itself            (never a layer: no autograd, nn, ...)
#   include/megacpp/autograd    core, autograd
#   include/megacpp/dist        core, autograd, dist
#   include/megacpp/nn          core, autograd, nn                  (never a backend)
#   include/megacpp/optim       core, autograd, dist, optim
#   include/megacpp/plasticity  core, autograd, dist, optim, plasticity
#   include/megacpp/io          core, autograd, io
#   include/megacpp/data        core, io, data
#   include/megacpp/eval        core, eval
#   include/megacpp/train       every folder under include/megacpp (never a backend)
# The umbrella header include/megacpp/<folder>.hpp follows its folder's rule; megacpp.hpp may
# include everything, the CPU backend included (it is "everything that runs on the CPU").
# A header or source file over 500 lines must say why in a line containing "megacpp-long-file:".
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || { echo "check-layering: no such directory: $root"; exit 2; }

allowed_for() {  # the folders (relative to megacpp/) a file may include from
  case "$1" in
    include/megacpp/core/*|include/megacpp/core.hpp) echo "core" ;;
    backends/*)
      local backend=${1#backends/}; backend=${backend%%/*}
      echo "core backends/$backend" ;;
    include/megacpp/autograd/*|include/megacpp/autograd.hpp) echo "core autograd" ;;
    include/megacpp/dist/*|include/megacpp/dist.hpp) echo "core autograd dist" ;;
    include/megacpp/nn/*|include/megacpp/nn.hpp) echo "core autograd nn" ;;
    include/megacpp/optim/*|include/megacpp/optim.hpp) echo "core autograd dist optim" ;;
    include/megacpp/plasticity/*|include/megacpp/plasticity.hpp) echo "core autograd dist optim plasticity" ;;
    include/megacpp/io/*|include/megacpp/io.hpp) echo "core autograd io" ;;
    include/megacpp/data/*|include/megacpp/data.hpp) echo "core io data" ;;
    include/megacpp/eval/*|include/megacpp/eval.hpp) echo "core eval" ;;
    include/megacpp/train/*|include/megacpp/train.hpp) echo "core autograd dist nn optim plasticity io data eval train" ;;
    include/megacpp/megacpp.hpp) echo "*" ;;
    *) echo "" ;;
  esac
}

violations=0
report() {
  echo "$1"
  violations=$((violations + 1))
}

files=$(find include backends -type f \( -name '*.hpp' -o -name '*.cuh' -o -name '*.h' \) 2>/dev/null | sort)
for f in $files; do
  allowed=$(allowed_for "$f")
  if [ -z "$allowed" ]; then
    report "$f: not under a known layer (add its folder to scripts/check-layering.sh and docs/architecture.md)"
    continue
  fi
  [ "$allowed" = "*" ] && continue
  # every megacpp include, as "line:folder"
  while IFS=: read -r line target; do
    folder=${target#megacpp/}
    case "$folder" in
      backends/*) folder=$(echo "$folder" | cut -d/ -f1-2); folder=${folder%.hpp}; folder=${folder%.cuh} ;;
      *) folder=${folder%%/*}; folder=${folder%.hpp} ;;
    esac
    ok=0
    for a in $allowed; do [ "$folder" = "$a" ] && ok=1; done
    [ $ok = 1 ] || report "$f:$line: includes <$target>, but files here may include only from: $allowed"
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]megacpp/' "$f" |
           sed -E 's/^([0-9]+):[^<"]*[<"]([^>"]+)[>"].*/\1:\2/')
done

# Size rule: project sources (not third-party, not generated) over 500 lines need a stated reason.
long_files=$(find include backends examples bench tests scripts -type f \( -name '*.hpp' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.cu' -o -name '*.sh' \) 2>/dev/null | sort)
for f in $long_files; do
  lines=$(wc -l < "$f")
  if [ "$lines" -gt 500 ] && ! grep -q "megacpp-long-file:" "$f"; then
    report "$f: $lines lines; split it by concern, or state why it is one file in a comment containing \"megacpp-long-file:\""
  fi
done

if [ $violations -gt 0 ]; then
  echo "check-layering: $violations violation(s)"
  exit 1
fi
echo "check-layering: every include points down and every file is within its size rule"
