// megacpp/eval.hpp: execution-free parts of code evaluation: the pass@k estimator and the n-gram
// components of CodeBLEU for C++. The sandbox that compiles and runs candidates is POSIX process
// code and lives with the megacpp-eval tool (examples/eval/), not in the library.
#pragma once

#include "megacpp/eval/code_bleu.hpp"
#include "megacpp/eval/pass_at_k.hpp"
