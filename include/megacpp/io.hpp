// megacpp/io.hpp: file formats (safetensors, model and optimizer checkpoints), memory maps and atomic file writes.
#pragma once

#include "megacpp/io/atomic_file.hpp"
#include "megacpp/io/checkpoint.hpp"
#include "megacpp/io/json_value.hpp"
#include "megacpp/io/mapped_file.hpp"
#include "megacpp/io/optimizer_shards.hpp"
#include "megacpp/io/safetensors.hpp"
#include "megacpp/io/utf8.hpp"
