#!/usr/bin/env python3
"""Checks the supervised fine-tuning data of examples/sft/ (format in examples/sft/README.md).

Every line must be one JSON object of one of two shapes:
  completion  {"prompt": P, "response": R, "test": T}   len(P) + len(R) <= 230 bytes
  edit        {"instruction": I, "before": B, "after": A}  len(I) + len(B) + len(A) <= 200 bytes
The budgets come from the demonstration model: byte-level, 256-token context. A completion's prompt
is written like the evaluation problems (examples/eval/problems/megacpp_cpp20.jsonl): #include
lines, one "// " comment line, the signature up to " {"; its test is a main() with asserts that
starts with "auto candidate = NAME;". No record may repeat another, and no completion may be one of
the evaluation problems (same function name, prompt or reference body): training on the test set
would make pass@k meaningless.

--compile also builds and runs every completion (prompt + response + "\\n" + test, the program
megacpp-eval builds) with -std=c++20 -Wall -Wextra -Werror, and checks that both sides of every
edit compile (-fsyntax-only; the "after" side with -Werror too, the "before" side may warn since
the edit can be the fix of that warning). Compilers run under `nice -n 19`, --jobs at a time.

Exit status: 0 when every check passed, 1 on any failure (each one is printed with its line
number), 2 for bad arguments. Python 3 standard library only:

  python3 scripts/check-sft-data.py examples/sft/cpp_functions.jsonl --compile
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

COMPLETION_KEYS = ("prompt", "response", "test")
EDIT_KEYS = ("instruction", "before", "after")
COMPLETION_BUDGET = 230  # bytes of prompt + response
EDIT_BUDGET = 200  # bytes of instruction + before + after
TEST_HEAD = "#undef NDEBUG\n#include <cassert>\nint main() {\n"
CXXFLAGS = ["-std=c++20", "-O0", "-Wall", "-Wextra"]
REPO = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_EVAL = REPO / "examples" / "eval" / "problems" / "megacpp_cpp20.jsonl"

SIGNATURE = re.compile(r"^[A-Za-z_][\w:<>,&* ]*?[\s&*]([A-Za-z_]\w*)\(.*\) \{$")


def byte_len(*texts):
    return sum(len(t.encode("utf-8")) for t in texts)


def entry_point(prompt):
    """The function name of a completion prompt, or an error message."""
    lines = prompt.split("\n")
    if lines[-1] != "" or len(lines) < 3:
        return None, "prompt must be [#include lines], one '// ' comment line and the signature, ending in ' {\\n'"
    body = lines[:-1]
    i = 0
    while i < len(body) and body[i].startswith("#include <") and body[i].endswith(">"):
        i += 1
    rest = body[i:]
    if len(rest) != 2:
        return None, f"prompt must have exactly one comment line and one signature line after its includes, found {len(rest)} lines"
    if not rest[0].startswith("// ") or len(rest[0]) <= 3:
        return None, f"prompt's comment line must start with '// ': {rest[0]!r}"
    m = SIGNATURE.match(rest[1])
    if not m:
        return None, f"prompt's last line is not a function signature ending in ' {{': {rest[1]!r}"
    return m.group(1), None


def check_completion(rec):
    errors = []
    prompt, response, test = rec["prompt"], rec["response"], rec["test"]
    name, err = entry_point(prompt)
    if err:
        errors.append(err)
    if not response.endswith("}\n"):
        errors.append("response must end with the function's closing '}\\n'")
    for ln in response.split("\n")[:-2]:
        if ln and not ln.startswith("  "):
            errors.append(f"response line not indented by two spaces: {ln!r}")
            break
    if "\t" in prompt + response + test:
        errors.append("tab character (indent with spaces)")
    if not test.startswith(TEST_HEAD) or not test.endswith("}\n"):
        errors.append("test must start with '#undef NDEBUG\\n#include <cassert>\\nint main() {\\n' and end with '}\\n'")
    if name and f"  auto candidate = {name};\n" not in test:
        errors.append(f"test must contain 'auto candidate = {name};'")
    if "assert(" not in test:
        errors.append("test has no assert")
    size = byte_len(prompt, response)
    if size > COMPLETION_BUDGET:
        errors.append(f"prompt + response is {size} bytes, over the budget of {COMPLETION_BUDGET}")
    return name, errors


def check_edit(rec):
    errors = []
    ins, before, after = rec["instruction"], rec["before"], rec["after"]
    if "\n" in ins:
        errors.append("instruction must be one line")
    if before == after:
        errors.append("before and after are identical")
    for key in ("before", "after"):
        if not rec[key].endswith("\n"):
            errors.append(f"{key} must end with a newline")
    if "\t" in ins + before + after:
        errors.append("tab character (indent with spaces)")
    size = byte_len(ins, before, after)
    if size > EDIT_BUDGET:
        errors.append(f"instruction + before + after is {size} bytes, over the budget of {EDIT_BUDGET}")
    return errors


def load_eval(path):
    """Function names, prompts and reference bodies of the evaluation problems."""
    names, prompts, bodies = set(), set(), set()
    if path is None:
        return names, prompts, bodies
    with open(path, encoding="utf-8") as f:
        for ln in f:
            if not ln.strip():
                continue
            p = json.loads(ln)
            prompts.add(p["prompt"])
            if p.get("canonical_solution"):
                bodies.add(p["canonical_solution"])
            name, _ = entry_point(p["prompt"])
            if p.get("entry_point"):
                names.add(p["entry_point"])
            elif name:
                names.add(name)
    return names, prompts, bodies


def check_file(path, eval_path):
    """Parses and checks every line; returns (records as (lineno, kind, rec, name), errors)."""
    errors = []
    records = []
    eval_names, eval_prompts, eval_bodies = load_eval(eval_path)
    seen_prompt, seen_name, seen_edit = {}, {}, {}
    with open(path, "rb") as f:
        raw_lines = f.read().split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    for lineno, raw in enumerate(raw_lines, 1):
        def bad(msg):
            errors.append(f"{path}:{lineno}: {msg}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad(f"not UTF-8 ({e})")
            continue
        if not text.strip():
            bad("empty line")
            continue
        if not text.isascii():
            bad("non-ASCII character (the demo model is byte-level: keep records ASCII)")
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            bad(f"not valid JSON: {e}")
            continue
        if not isinstance(rec, dict):
            bad(f"not a JSON object but a {type(rec).__name__}")
            continue
        keys = set(rec)
        if keys == set(COMPLETION_KEYS):
            kind = "completion"
        elif keys == set(EDIT_KEYS):
            kind = "edit"
        else:
            shape = COMPLETION_KEYS if keys & set(COMPLETION_KEYS) else EDIT_KEYS
            unknown = sorted(keys - set(shape))
            missing = sorted(set(shape) - keys)
            detail = []
            if unknown:
                detail.append(f"unknown key(s) {unknown}")
            if missing:
                detail.append(f"missing key(s) {missing}")
            bad(f"keys {sorted(keys)} match neither shape {list(COMPLETION_KEYS)} nor {list(EDIT_KEYS)}: " + ", ".join(detail))
            continue
        non_str = [k for k in sorted(keys) if not isinstance(rec[k], str) or not rec[k]]
        if non_str:
            bad(f"field(s) {non_str} must be non-empty strings")
            continue
        if kind == "completion":
            name, errs = check_completion(rec)
            for e in errs:
                bad(e)
            if rec["prompt"] in seen_prompt:
                bad(f"duplicate prompt (first on line {seen_prompt[rec['prompt']]})")
            else:
                seen_prompt[rec["prompt"]] = lineno
            if name:
                if name in seen_name:
                    bad(f"duplicate function name {name} (first on line {seen_name[name]})")
                else:
                    seen_name[name] = lineno
                if name in eval_names:
                    bad(f"function {name} is an evaluation problem (examples/eval/problems): keep it out of training data")
            if rec["prompt"] in eval_prompts:
                bad("prompt is an evaluation problem's prompt")
            if rec["response"] in eval_bodies:
                bad("response is an evaluation problem's reference solution")
        else:
            name = None
            for e in check_edit(rec):
                bad(e)
            key = (rec["instruction"], rec["before"])
            if key in seen_edit:
                bad(f"duplicate edit: same instruction and before as line {seen_edit[key]}")
            else:
                seen_edit[key] = lineno
        records.append((lineno, kind, rec, name))
    return records, errors


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    return p.returncode, (p.stderr or p.stdout).strip()


def first_lines(text, n=4):
    return " | ".join(text.splitlines()[:n])


def compile_record(path, item, cxx, tmp, timeouts):
    """Returns None when the record builds (and, for a completion, passes its test), else the reason."""
    lineno, kind, rec, name = item
    nice = ["nice", "-n", "19"]
    where = f"{path}:{lineno}" + (f" ({name})" if name else "")
    if kind == "completion":
        src = os.path.join(tmp, f"c{lineno}.cpp")
        exe = os.path.join(tmp, f"c{lineno}")
        with open(src, "w", encoding="utf-8") as f:
            f.write(rec["prompt"] + rec["response"] + "\n" + rec["test"])
        rc, out = run(nice + [cxx] + CXXFLAGS + ["-Werror", src, "-o", exe], timeouts[0])
        if rc != 0:
            return f"{where}: compile failed: {first_lines(out)}"
        rc, out = run([exe], timeouts[1])
        if rc != 0:
            why = out and first_lines(out) or ""
            return f"{where}: test failed (exit {rc}): {why}"
        return None
    for side, strict in (("before", False), ("after", True)):
        src = os.path.join(tmp, f"e{lineno}_{side}.cpp")
        with open(src, "w", encoding="utf-8") as f:
            f.write(rec[side])
        rc, out = run(nice + [cxx] + CXXFLAGS + (["-Werror"] if strict else []) + ["-fsyntax-only", src], timeouts[0])
        if rc != 0:
            return f"{where}: '{side}' does not compile: {first_lines(out)}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", help="the JSONL file (examples/sft/cpp_functions.jsonl)")
    ap.add_argument("--compile", action="store_true", help="compile and run every completion with its test, compile both sides of every edit")
    ap.add_argument("--cxx", default="/usr/bin/g++" if os.path.exists("/usr/bin/g++") else "g++", help="C++20 compiler (default %(default)s)")
    ap.add_argument("--jobs", type=int, default=2, help="compilers run at once (default %(default)s)")
    ap.add_argument("--eval", default=str(DEFAULT_EVAL) if DEFAULT_EVAL.exists() else None,
                    help="evaluation problems that must not appear in the data (default %(default)s)")
    ap.add_argument("--compile_timeout", type=float, default=60.0)
    ap.add_argument("--run_timeout", type=float, default=10.0)
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")
    if not os.path.isfile(args.file):
        ap.error(f"no such file: {args.file}")

    records, errors = check_file(args.file, args.eval)
    n_comp = sum(1 for r in records if r[1] == "completion")
    n_edit = len(records) - n_comp
    for e in errors:
        print(e)
    print(f"{args.file}: {len(records)} records parsed ({n_comp} completion, {n_edit} edit), {len(errors)} format problem(s)"
          + ("" if args.eval else "; no evaluation problems file, contamination not checked"))

    failures = []
    if args.compile:
        if shutil.which(args.cxx) is None:
            print(f"compiler {args.cxx} not found (pass --cxx)")
            return 1
        with tempfile.TemporaryDirectory(prefix="check-sft-") as tmp:
            with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
                results = list(pool.map(lambda item: compile_record(args.file, item, args.cxx, tmp,
                                                                    (args.compile_timeout, args.run_timeout)), records))
        failures = [r for r in results if r]
        for f in failures:
            print(f)
        comp_fail = sum(1 for r, item in zip(results, records) if r and item[1] == "completion")
        edit_fail = sum(1 for r, item in zip(results, records) if r and item[1] == "edit")
        print(f"--compile with {args.cxx} {' '.join(CXXFLAGS)} (-Werror but for edits' before side): completions {n_comp - comp_fail}/{n_comp} compiled and passed "
              f"their tests, edits {n_edit - edit_fail}/{n_edit} compiled on both sides")
    ok = not errors and not failures
    print("OK" if ok else f"FAILED: {len(errors)} format problem(s), {len(failures)} compile/test failure(s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
