// megacpp/data.hpp: token shards, the packed-row loader, FIM, the byte tokenizer and the JSON-free
// parts of byte-level BPE.
// Not included: megacpp/data/bpe_tokenizer.hpp, which needs the optional nlohmann_json dependency
// (find_package(nlohmann_json 3) and link nlohmann_json::nlohmann_json); include it directly.
#pragma once

#include "megacpp/data/bpe_pieces.hpp"
#include "megacpp/data/fim.hpp"
#include "megacpp/data/fim_spans.hpp"
#include "megacpp/data/loader.hpp"
#include "megacpp/data/mixture.hpp"
#include "megacpp/data/shard.hpp"
#include "megacpp/data/shard_meta.hpp"
#include "megacpp/data/tokenizer.hpp"
