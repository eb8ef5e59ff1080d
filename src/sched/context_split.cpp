// The zigzag token split of context parallelism (see context_split.hpp).
#include "sched/context_split.hpp"

#include <algorithm>
#include <stdexcept>

#include "errors.hpp"

namespace pf::sched {

CpShare cp_share(int64_t start, int length, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks || length < 0) throw std::invalid_argument("cp_share: bad rank or length");
  const int pieces = 2 * ranks;
  const int base = length / pieces, extra = length % pieces;
  // Piece p's extra token: the first pieces (p < ranks) take them first, in rank order, then
  // the second pieces (p = pieces - 1 - r for rank r), in rank order.
  auto size = [&](int p) {
    const int order = p < ranks ? p : ranks + (pieces - 1 - p);
    return base + (order < extra ? 1 : 0);
  };
  int64_t at = start;
  CpShare share;
  for (int p = 0; p < pieces; ++p) {
    const int n = size(p);
    if (p == rank) share.first = {at, n};
    if (p == pieces - 1 - rank) share.second = {at, n};
    at += n;
  }
  return share;
}

std::vector<int64_t> cp_rows_from(int64_t start, int length, int ranks, int64_t first) {
  std::vector<int64_t> rows(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) rows[static_cast<size_t>(r)] = cp_share(start, length, ranks, r).from(first).rows();
  return rows;
}

int cp_most_rows(int length, int ranks) {
  int most = 0;
  for (int rank = 0; rank < ranks; ++rank) most = std::max(most, cp_share(0, length, ranks, rank).rows());
  return most;
}

int64_t rows_in(const std::vector<RowRun>& runs) {
  int64_t n = 0;
  for (const RowRun& run : runs) n += run.count;
  return n;
}

void append_shares(std::vector<std::vector<RowRun>>& runs, int64_t start, int length) {
  const int ranks = static_cast<int>(runs.size());
  for (int j = 0; j < ranks; ++j) {
    const CpShare share = cp_share(start, length, ranks, j);
    for (const RowRun& run : {share.first, share.second})
      if (run.count > 0) runs[static_cast<size_t>(j)].push_back(run);
  }
}

int64_t cp_shard_tokens(int64_t length, int chunk, int ranks, int rank) {
  if (chunk < 1) throw std::invalid_argument("cp_shard_tokens: chunk must be positive");
  int64_t held = 0;
  for (int64_t start = 0; start < length; start += chunk)
    held += cp_share(start, static_cast<int>(std::min<int64_t>(chunk, length - start)), ranks, rank).rows();
  return held;
}

int64_t cp_max_shard_tokens(int64_t length, int chunk, int ranks) {
  int64_t most = 0;
  for (int rank = 0; rank < ranks; ++rank) most = std::max(most, cp_shard_tokens(length, chunk, ranks, rank));
  return most;
}

std::vector<int64_t> cp_shard_lengths(const std::vector<int64_t>& lengths, int chunk, int ranks) {
  if (ranks == 1) return lengths;
  std::vector<int64_t> shards;
  shards.reserve(lengths.size());
  for (int64_t length : lengths) {
    // A prompt that takes over another's prefix has its chunks cut from there and the
    // prefix's as the other's were: each chunk (at most two more: the prefix's last and the
    // prompt's first) adds at most two rows to the rank's even share.
    shards.push_back(std::max(cp_max_shard_tokens(length, chunk, ranks), cp_shard_bound(length, chunk, ranks)));
  }
  return shards;
}

int64_t cp_shard_bound(int64_t length, int chunk, int ranks) {
  if (ranks == 1) return length;
  const int64_t chunks = (length + chunk - 1) / chunk + 2;
  return std::min(length, (length + ranks - 1) / ranks + 2 * chunks);
}

void align_reuse_to_chunks(PrefixPlan& plan, int chunk, bool dynamic) {
  for (PrefixReuse& reuse : plan.reuse) {
    if (reuse.source < 0) continue;  // (from outside the batch: loaded in even pieces)
    reuse.tokens = dynamic ? 0 : reuse.tokens / chunk * chunk;
    if (reuse.tokens == 0) reuse = {};
  }
}

void drop_reuse_from_loaded(PrefixPlan& plan, const std::vector<PrefixReuse>& outside) {
  const int n = static_cast<int>(plan.reuse.size());
  std::vector<char> loaded(static_cast<size_t>(n), 0);  // its rows were split as loaded, not as chunks
  std::vector<int> order = plan.order;
  if (order.empty())
    for (int p = 0; p < n; ++p) order.push_back(p);
  for (int p : order) {  // (a source runs before the prompts that take from it)
    PrefixReuse& reuse = plan.reuse[static_cast<size_t>(p)];
    if (reuse.source >= 0 && loaded[static_cast<size_t>(reuse.source)]) {
      // The store's own offer for this prompt, if it has one (it was no longer than the
      // batch's, so the batch's was kept): loaded in pieces, it needs no source.
      reuse = store_offer(outside, p);
    }
    loaded[static_cast<size_t>(p)] = reuse.store_entry >= 0 || reuse.restored;
  }
}

CpAttention parse_cp_attention(const std::string& text) {
  if (text == "auto") return CpAttention::kAuto;
  if (text == "pass-kv") return CpAttention::kPassKv;
  if (text == "pass-q") return CpAttention::kPassQ;
  throw UserError("--cp-attention " + text + " is unknown (auto, pass-kv or pass-q)");
}

const char* cp_attention_name(CpAttention mode) {
  switch (mode) {
    case CpAttention::kAuto:
      return "auto";
    case CpAttention::kPassKv:
      return "pass-KV";
    case CpAttention::kPassQ:
      return "pass-Q";
  }
  return "?";
}

bool meta_rule_prefers_pass_q(double prefix, double tokens, int kv_heads, int heads) {
  return tokens / (tokens + prefix) <= 2.0 * kv_heads / heads;
}

CpWidths CpWidths::grouped_query(int heads, int kv_heads, int head_dim, int kv_bytes) {
  return {2 * kv_heads * head_dim * kv_bytes / 4, heads * head_dim, head_dim, heads};
}

CpWidths CpWidths::latent(int heads, int latent_width, int qk_head_dim, int v_head_dim) {
  return {latent_width, heads * qk_head_dim, v_head_dim, heads};
}

CpWidths CpWidths::absorbed_latent(int heads, int latent_width, int kv_lora_rank) {
  return {(latent_width + 1) / 2, heads * latent_width, kv_lora_rank, heads};
}

double cp_pass_kv_floats(double prefix, double tokens, int ranks, const CpWidths& widths) {
  return (ranks - 1) * (prefix + tokens) / ranks * widths.shard;
}

double cp_pass_q_floats(double tokens, int ranks, const CpWidths& widths) {
  return (ranks - 1) * tokens / ranks * (widths.query + widths.heads * (widths.head_out + 1.0));
}

CpAttention cp_attention_for_chunk(CpAttention mode, int64_t prefix, int tokens, int ranks, const CpWidths& widths) {
  if (mode != CpAttention::kAuto) return mode;
  return cp_pass_q_floats(tokens, ranks, widths) < cp_pass_kv_floats(static_cast<double>(prefix), tokens, ranks, widths)
             ? CpAttention::kPassQ
             : CpAttention::kPassKv;
}

std::vector<std::vector<RowRun>> runs_before(const std::vector<std::vector<RowRun>>& runs, int64_t tokens) {
  std::vector<std::vector<RowRun>> cut(runs.size());
  for (size_t j = 0; j < runs.size(); ++j)
    for (const RowRun& run : runs[j])
      if (run.pos < tokens)
        cut[j].push_back({run.pos, static_cast<int>(std::min<int64_t>(run.count, tokens - run.pos))});
  return cut;
}

int32_t rows_seen(const std::vector<RowRun>& runs, int64_t pos) {
  int64_t n = 0;
  for (const RowRun& run : runs) {
    if (run.pos > pos) break;
    n += std::min<int64_t>(run.count, pos + 1 - run.pos);
  }
  return static_cast<int32_t>(n);
}

int cp_load_piece(int piece, int ranks) {
  const int step = 2 * ranks;
  return ranks == 1 ? piece : std::max(step, piece / step * step);
}

}  // namespace pf::sched
