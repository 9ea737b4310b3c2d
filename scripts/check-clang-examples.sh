#!/usr/bin/env bash
# Checks that the examples (megacpp-train, -generate, -eval, -prepare, train_mlp) compile with
# clang++: every C++ translation unit under examples/ goes through clang's front end
# (-fsyntax-only: parsing and every template instantiation, no code generation), with the clang
# preset's flags (-Wall -Wextra -Werror included).
#
# CI runs this instead of building the whole clang preset: the asan preset compiles and runs the test
# suite with clang++, but builds no examples (their end-to-end tests would run the trainer under
# ASan), and clang's code generation is most of its compile time: tests/model/test_model.cpp took
# 175 s at -O2 and 21 s with -fsyntax-only; the 8 example units take about 2 minutes on 2 cores.
#
#   scripts/check-clang-examples.sh          configures build/clang (the clang preset), compiles nothing
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --preset clang -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
python3 - build/clang/compile_commands.json <<'EOF'
import json, os, shlex, subprocess, sys

units = [u for u in json.load(open(sys.argv[1])) if "/examples/" in u["file"] and u["file"].endswith(".cpp")]
if not units:
    sys.exit("check-clang-examples: build/clang/compile_commands.json lists no examples/ unit "
             "(is MEGACPP_BUILD_EXAMPLES off?)")
failed = []
for u in units:
    args = shlex.split(u["command"]) if "command" in u else list(u["arguments"])
    if os.path.basename(args[0]) == "ccache":  # the launcher: nothing to cache without an object
        args = args[1:]
    out_at = args.index("-o")  # the object file: none is written
    out = [a for a in args[:out_at] + args[out_at + 2:] if a != "-c"] + ["-fsyntax-only"]
    name = os.path.relpath(u["file"])
    print(f"clang++ -fsyntax-only {name}", flush=True)
    if subprocess.run(out, cwd=u["directory"]).returncode != 0:
        failed.append(name)
if failed:
    sys.exit("check-clang-examples: clang++ rejects " + ", ".join(failed))
print(f"check-clang-examples: {len(units)} example units compile with clang++")
EOF
