// megacpp/data.hpp: token shards and the packed-row loader.
#pragma once

#include "megacpp/data/loader.hpp"
#include "megacpp/data/shard.hpp"
#include "megacpp/data/fim.hpp"
#include "megacpp/data/tokenizer.hpp"
