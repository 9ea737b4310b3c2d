// Must not compile: the feed-forward and the mixer are swapped. Block<Mixer, FeedForward> checks
// each part against its concept, so the mistake reads as two messages that say which goes where.
// Expected diagnostics: megacpp_block_needs_a_mixer and megacpp_block_needs_a_feed_forward.
#include "extending/toy_blocks.hpp"
#include "megacpp/megacpp.hpp"

int main() {
  using megacpp::Cpu;
  megacpp::Block<megacpp::toy::ToyGatedMlp<float, Cpu>, megacpp::toy::ToyEma<float, Cpu>> block;
  return static_cast<int>(block.norm_eps);
}
