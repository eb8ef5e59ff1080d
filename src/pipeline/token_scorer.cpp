// Per-token scores on the last stage (see token_scorer.hpp).
#include "pipeline/token_scorer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "compute/vocab_scores.hpp"
#include "dist/wait.hpp"
#include "errors.hpp"
#include "io/output_format.hpp"

namespace pf::pipeline {

namespace {

// A block's logits stay under 64 MiB per rank (SmolLM2's 49K vocabulary: 341 rows; a
// 152K one at tp 1: 110), the summaries TP rank 0 gathers under 256 MiB, and a block is at
// least 16 rows, so the LM head stays a GEMM. Every TP rank must cut a chunk into the same
// blocks (one gather each), so the size comes from the largest slice, not from this rank's.
constexpr size_t kBlockLogitFloats = size_t{16} << 20;
constexpr size_t kBlockSummaryBytes = size_t{256} << 20;
constexpr int kMinBlockRows = 16;

int block_rows_for(int vocab_size, int tp, size_t record_bytes) {
  // Test hook: PIPEFILL_TEST_SCORE_BLOCK_ROWS=n cuts chunks into blocks of n rows, so that
  // small test models exercise several blocks per chunk.
  if (const char* forced = std::getenv("PIPEFILL_TEST_SCORE_BLOCK_ROWS")) return std::max(1, std::atoi(forced));
  const size_t largest_slice = static_cast<size_t>((vocab_size + tp - 1) / tp);
  const size_t by_logits = kBlockLogitFloats / std::max<size_t>(largest_slice, 1);
  const size_t by_summaries = kBlockSummaryBytes / (record_bytes * static_cast<size_t>(tp));
  return static_cast<int>(std::max<size_t>(kMinBlockRows, std::min(by_logits, by_summaries)));
}

}  // namespace

TokenScorer::TokenScorer(const dist::Topology& topology, compute::StageCompute& compute, const io::PromptSet& prompts,
                         int vocab_size, TokenRowLayout layout, std::vector<int32_t> token_set)
    : topology_(topology),
      compute_(compute),
      prompts_(prompts),
      layout_(layout),
      token_set_(std::move(token_set)),
      summary_shape_{layout.top_k, token_set_.data(), static_cast<int>(token_set_.size())},
      record_bytes_(compute::row_summary_bytes(summary_shape_)) {
  if (static_cast<int>(token_set_.size()) != layout.set_size)
    throw std::logic_error("TokenScorer: the token set does not have the layout's size");
  block_rows_ = block_rows_for(vocab_size, topology.tp, record_bytes_);
}

const std::vector<float>& TokenScorer::score(const sched::MicroBatch& mb, const float* hidden, int hidden_size) {
  next_logprob_.assign(mb.length, std::numeric_limits<float>::quiet_NaN());
  // Rows before the prompt's scored span (/score_start s) predict tokens nobody asked about:
  // they skip the LM head. Row r predicts position start + r + 1, so rows from s - 1 run
  // (and the last row, whose top-k is the prediction after the prompt, is always at or past it).
  const int skipped = io::scored_rows(prompts_.first_scored(mb.prompt), mb.start, mb.length).topk_from;
  if (topology_.tp_rank == 0) {
    part_.assign(static_cast<size_t>(mb.length) * layout_.floats_per_token(), 0.0f);
    // Unscored rows' top-k and token set: NaN log-probs and id -1, as the output holds them.
    const size_t k = static_cast<size_t>(layout_.top_k), set = static_cast<size_t>(layout_.set_size);
    float* topk_logprobs = part_.data() + (layout_.logprobs ? mb.length : 0);
    std::fill(topk_logprobs, topk_logprobs + skipped * k, std::numeric_limits<float>::quiet_NaN());
    const std::vector<int32_t> none(skipped * k, -1);  // int32 bits in the float message
    if (!none.empty())
      std::memcpy(topk_logprobs + static_cast<size_t>(mb.length) * k, none.data(), sizeof(int32_t) * none.size());
    float* set_logprobs = topk_logprobs + 2 * static_cast<size_t>(mb.length) * k;
    std::fill(set_logprobs, set_logprobs + skipped * set, std::numeric_limits<float>::quiet_NaN());
  }
  for (int first = skipped; first < mb.length; first += block_rows_) {
    const int rows = std::min(block_rows_, mb.length - first);
    score_block(mb, first, rows, hidden + static_cast<int64_t>(first) * hidden_size);
  }
  if (topology_.tp_rank != 0) return part_;
  if (layout_.logprobs) {  // shift predictions onto the positions of the tokens they score
    // A prompt's first chunk has no earlier prediction here: at position 0 none exists (NaN);
    // after a reused prefix it is the source prompt's, which rank 0 copies (StoredResults).
    part_[0] = mb.is_first ? std::numeric_limits<float>::quiet_NaN() : carried_;
    std::copy(next_logprob_.begin(), next_logprob_.end() - 1, part_.begin() + 1);
    carried_ = next_logprob_.back();
  }
  return part_;
}

void TokenScorer::score_block(const sched::MicroBatch& mb, int first_row, int rows, const float* hidden) {
  const int k = layout_.top_k;
  // The token each row predicts: the prompt's next one (none after its last token).
  const int64_t* offsets = layout_.logprobs ? &prompts_.offsets.at(mb.prompt) : nullptr;
  targets_.assign(rows, -1);
  for (int r = 0; r < rows; ++r) {
    const int64_t next = offsets ? offsets[0] + mb.start + first_row + r + 1 : 0;
    if (offsets && next < offsets[1]) targets_[r] = prompts_.tokens[next];
  }
  summaries_.resize(rows * record_bytes_);
  compute_.summarize_vocab_rows(hidden, rows, targets_.data(), summary_shape_, summaries_.data());
  // TP rank 0 gathers every rank's summaries of the block: [rank][row] records.
  const std::byte* merged_from = summaries_.data();
  if (topology_.tp > 1) {
    if (topology_.tp_rank == 0) gathered_.resize(summaries_.size() * topology_.tp);
    dist::WaitLabel label("stage " + std::to_string(topology_.stage) + " gathering token scores of micro-batch " +
                          std::to_string(mb.index) + " over its TP group");
    MPI_Request request;
    MPI_CHECK(MPI_Igather(summaries_.data(), static_cast<int>(summaries_.size()), MPI_BYTE, gathered_.data(),
                          static_cast<int>(summaries_.size()), MPI_BYTE, 0, topology_.tp_comm, &request));
    dist::wait_polling(&request);
    merged_from = gathered_.data();
  }
  if (topology_.tp_rank != 0) return;
  const size_t rank_stride = summaries_.size();  // between ranks' blocks in gathered_
  float* topk_logprobs = part_.data() + (layout_.logprobs ? mb.length : 0);
  float* topk_ids = topk_logprobs + static_cast<size_t>(mb.length) * k;  // int32 bits in the float message
  float* set_logprobs = topk_ids + static_cast<size_t>(mb.length) * k;
  const size_t set = static_cast<size_t>(layout_.set_size);
  ids_.resize(k);
  for (int r = 0; r < rows; ++r) {
    const size_t row = first_row + r;
    compute::merge_row_summaries(merged_from + r * record_bytes_, topology_.tp, rank_stride, summary_shape_,
                                 {layout_.logprobs ? &next_logprob_[row] : nullptr, topk_logprobs + row * k,
                                  ids_.data(), set > 0 ? set_logprobs + row * set : nullptr});
    if (k > 0) std::memcpy(topk_ids + row * k, ids_.data(), sizeof(int32_t) * k);
  }
}

}  // namespace pf::pipeline
