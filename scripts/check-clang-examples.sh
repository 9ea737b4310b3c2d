#!/usr/bin/env bash
# Checks that the examples (megacpp-train, -generate, -eval, -prepare, train_mlp) compile with
# clang++: every C++ translation unit under examples/ goes through clang's front end
# (-fsyntax-only: parsing and every template instantiation, no code generation), with the clang
# preset's flags (-Wall -Wextra -Werror included).
#
# CI runs this instead of building the whole clang preset: the asan preset compiles and runs the test
# suite with clang++, but builds no examples (their end-to-end tests would run the trainer under
# ASan), and a clang -O2 build of the examples alone costs 10+ minutes on 2 cores where this costs
# about 2 (the trainer's heaviest unit: clang -O2 175 s, -fsyntax-only 21 s).
#
#   scripts/check-clang-examples.sh          configures build/clang (the clang preset) if needed
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
    out = []
    skip = False
    for a in args:  # drop the launcher (ccache), the object output and -c
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or os.path.basename(a) == "ccache":
            continue
        out.append(a)
    out.append("-fsyntax-only")
    name = os.path.relpath(u["file"])
    print(f"clang++ -fsyntax-only {name}", flush=True)
    if subprocess.run(out, cwd=u["directory"]).returncode != 0:
        failed.append(name)
if failed:
    sys.exit("check-clang-examples: clang++ rejects " + ", ".join(failed))
print(f"check-clang-examples: {len(units)} example units compile with clang++")
EOF
