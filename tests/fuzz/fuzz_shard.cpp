// libFuzzer harness: the token shard reader and the loader over it (megacpp/data/shard.hpp,
// loader.hpp), on a file holding the input.
//
// The shard header has 256 int32 slots and the format uses three; the harness takes the loader's
// settings from the next four, so one input is both a shard and a loader configuration and the
// fuzzer mutates both (the seeds, written by write_shard, have zeros there: the defaults below).
//   header[3]: batch - 1 (mod 4)   header[4]: seq - 1 (mod 32)   header[5]: steps - 1 (mod 8)
//   header[6]: vocab (0: 65,536; else its value mod 2^20, at least 1)   header[7] bit 0: FIM mask on
// An accepted shard reads back token by token the same through read() and token(); every step the
// loader yields has the advertised shape, ids below vocab, targets shifted by one from the inputs
// and a 0/1 loss mask.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_input.hpp"
#include "megacpp/backends/cpu.hpp"
#include "megacpp/data/loader.hpp"
#include "megacpp/data/shard.hpp"
#include "megacpp/data/tokenizer.hpp"

namespace {

std::uint32_t header_slot(const std::uint8_t* data, std::size_t size, std::size_t slot) {
  std::uint32_t v = 0;
  if (size >= (slot + 1) * 4) std::memcpy(&v, data + slot * 4, 4);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static megacpp::fuzz::InputFile input(".bin");
  using megacpp::index_t;
  using megacpp::fuzz::require;
  namespace data_ns = megacpp::data;
  const index_t batch = 1 + header_slot(data, size, 3) % 4, seq = 1 + header_slot(data, size, 4) % 32;
  const int steps = 1 + static_cast<int>(header_slot(data, size, 5) % 8);
  const std::uint32_t vocab_slot = header_slot(data, size, 6) % (1u << 20);
  const std::uint32_t vocab = vocab_slot == 0 ? 65536 : vocab_slot;
  const bool fim = (header_slot(data, size, 7) & 1) != 0;
  try {
    const auto& path = input.write(data, size);
    {
      const data_ns::TokenShard shard(path);
      std::vector<std::int32_t> all(static_cast<std::size_t>(shard.size()));
      shard.read(0, all, UINT32_MAX);
      for (index_t i = 0; i < shard.size(); ++i)
        require(static_cast<std::uint32_t>(all[static_cast<std::size_t>(i)]) == shard.token(i),
                "read() and token() disagree");
    }
    data_ns::ShardLoader loader({path}, batch, seq, vocab);
    if (fim) loader.enable_fim_mask(data_ns::ByteTokenizer().special());
    for (int s = 0; s < steps; ++s) {
      // The host rows only: next()'s upload checks every id again, and its error would be taken
      // here for an expected rejection where the loader's own check must hold.
      data_ns::PackedBatch<float, megacpp::Cpu> step;
      loader.next_host(step);
      const auto n = static_cast<std::size_t>(batch * seq);
      require(step.batch == batch && step.seq == seq && step.input_ids_host.size() == n &&
                  step.target_ids_host.size() == n && step.loss_mask_host.size() == n,
              "a step's rows have the wrong size");
      for (std::size_t i = 0; i < n; ++i) {
        require(step.input_ids_host[i] >= 0 && static_cast<std::uint32_t>(step.input_ids_host[i]) < vocab &&
                    step.target_ids_host[i] >= 0 && static_cast<std::uint32_t>(step.target_ids_host[i]) < vocab,
                "a step holds an id outside the vocabulary");
        require(step.loss_mask_host[i] == 0.0f || step.loss_mask_host[i] == 1.0f, "a loss mask value is not 0 or 1");
        if ((i + 1) % static_cast<std::size_t>(seq) != 0)
          require(step.target_ids_host[i] == step.input_ids_host[i + 1], "targets are not the inputs shifted by one");
      }
    }
  } catch (const megacpp::Error&) {
    // rejected with a message: the expected outcome for most inputs
  }
  return 0;
}
