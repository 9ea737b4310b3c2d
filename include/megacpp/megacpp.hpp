// megacpp/megacpp.hpp: everything that runs on the CPU: tensors and the kernel contracts (core),
// autograd, the CPU backend with all its kernels, every layer and whole models (nn), optimizers,
// communicators (dist), data, file formats and checkpoints (io), and training policies (train).
// Not included: the CUDA backend (<megacpp/backends/cuda.cuh>, nvcc translation units only) and
// megacpp/data/bpe_tokenizer.hpp (needs nlohmann_json).
#pragma once

#include "megacpp/autograd.hpp"
#include "megacpp/backends/cpu.hpp"
#include "megacpp/core.hpp"
#include "megacpp/data.hpp"
#include "megacpp/dist.hpp"
#include "megacpp/eval.hpp"
#include "megacpp/io.hpp"
#include "megacpp/nn.hpp"
#include "megacpp/optim.hpp"
#include "megacpp/plasticity.hpp"
#include "megacpp/train.hpp"
