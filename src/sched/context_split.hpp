// Context parallelism's token split (the third cut: CP slices the sequence). Each chunk of a
// prompt is cut into 2 * ranks pieces, and CP rank r computes pieces r and 2 * ranks - 1 - r
// (the zigzag of Meta's CP and ring-flash-attention): under the causal mask an early piece
// is cheap and a late one dear, so every rank gets one of each and the same attention work.
//
// A chunk not divisible by 2 * ranks: its `length % (2 * ranks)` extra tokens go one to each
// rank's first piece (ranks 0, 1, ...), then one to each rank's second piece, so that no two
// ranks' rows differ by more than one. A chunk shorter than 2 * ranks leaves some pieces
// empty (a 1-token prompt: rank 0 computes it, the others attend with no rows of their own).
//
// Every rank of every stage splits a micro-batch the same way: the hidden states of rank r
// go to rank r of the next stage, never re-sharded. A rank's rows are its two pieces in
// order, so its share of a prompt's KV cache is sorted by position.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sched/batch_plan.hpp"

namespace pf::sched {

// `count` consecutive positions from `pos`.
struct RowRun {
  int64_t pos = 0;
  int count = 0;
};

// One CP rank's rows of a chunk: its two pieces (either may be empty), in position order.
struct CpShare {
  RowRun first, second;
  int rows() const { return first.count + second.count; }
  // Position of the rank's i-th row (0 <= i < rows()).
  int64_t position(int i) const { return i < first.count ? first.pos + i : second.pos + (i - first.count); }
  // The rank's rows at or after position `pos`: the last of its rows, as they are in position order.
  CpShare from(int64_t pos) const { return {from(first, pos), from(second, pos)}; }

 private:
  static RowRun from(RowRun run, int64_t pos) {
    const int64_t drop = std::min<int64_t>(run.count, std::max<int64_t>(0, pos - run.pos));
    return {run.pos + drop, run.count - static_cast<int>(drop)};
  }
};

// The rows CP rank `rank` of `ranks` computes of the chunk [start, start + length).
CpShare cp_share(int64_t start, int length, int ranks, int rank);
// What each of `ranks` CP ranks sends when the chunk's rows from position `first` on are
// gathered (the last of each rank's rows: CpShare::from), in rows.
std::vector<int64_t> cp_rows_from(int64_t start, int length, int ranks, int64_t first);
// The most rows any rank computes of a chunk of `length` tokens (rank 0's: the first of the
// uneven pieces go to the first ranks): what a CP rank's per-chunk buffers must hold.
int cp_most_rows(int length, int ranks);

// A rank's rows of a prompt as runs of positions (its shares of each chunk, in order): how
// many, and each rank's (runs.size() of them) with the chunk [start, start + length) added.
int64_t rows_in(const std::vector<RowRun>& runs);
// Every rank's runs cut at position `tokens`: what a prompt reusing that prefix holds of it.
std::vector<std::vector<RowRun>> runs_before(const std::vector<std::vector<RowRun>>& runs, int64_t tokens);
// How many of a rank's rows (runs sorted by position) a query at `pos` sees under the causal
// mask: a prefix of them, as a rank's keys are sorted by position.
int32_t rows_seen(const std::vector<RowRun>& runs, int64_t pos);
void append_shares(std::vector<std::vector<RowRun>>& runs, int64_t start, int length);

// Tokens of a prompt of `length` tokens that CP rank `rank` holds in its KV cache when the
// prompt is cut into chunks of `chunk` tokens from position 0 (the last one shorter), and the
// most any rank of `ranks` holds.
int64_t cp_shard_tokens(int64_t length, int chunk, int ranks, int rank);
int64_t cp_max_shard_tokens(int64_t length, int chunk, int ranks);
// What each rank's KV pool must fit of each prompt (`ranks` 1: the lengths themselves) when no
// chunk but a prompt's last is shorter than `chunk`: at most ceil(length / ranks) + 2 rows a
// chunk, however the chunks fall (a prompt that reuses another's prefix has the other's
// chunks before its own).
std::vector<int64_t> cp_shard_lengths(const std::vector<int64_t>& lengths, int chunk, int ranks);
// That bound alone, without walking the chunks: what cp_shard_lengths gives whenever a chunk
// has at least one token for each of the 2 x ranks pieces (chunk >= 2 ranks), in O(1).
int64_t cp_shard_bound(int64_t length, int chunk, int ranks);

// Rows of a range loaded into the KV cache (a --kv-store prefix) handed to each CP rank at a
// time: about `piece`, a multiple of 2 * ranks, so that each piece splits evenly and the
// ranks' shares of a long prefix differ by at most one row (`ranks` 1: `piece`).
int cp_load_piece(int piece, int ranks);
// Prefix reuse inside a batch with CP: a prompt takes over each rank's rows of the shared
// prefix as the source computed them. Cut inside a chunk, the zigzag's balance is lost (a rank
// may hold both its pieces of the cut chunk, up to chunk / ranks rows over its share, and a
// chain of reuses adds that up), so each reuse is rounded down to the source's chunk
// boundaries: multiples of `chunk` with fixed chunks (every prompt's chunks then start on
// one), none with a dynamic policy, whose boundaries are not known when the pools are sized.
// A reuse rounded to nothing is dropped.
void align_reuse_to_chunks(PrefixPlan& plan, int chunk, bool dynamic);
// With CP, and once the store's offers and a restored prompt are in the plan: a prompt does not
// take a prefix in the batch from one whose own prefix was loaded (from the store or a
// checkpoint), whose rows are split in load pieces, not at its chunk boundaries: it loads the
// store's offer for it in `outside` (per prompt; the KV store's offers) where there is one,
// else it computes the prefix.
void drop_reuse_from_loaded(PrefixPlan& plan, const std::vector<PrefixReuse>& outside = {});

// How a CP rank attends to the keys the others hold:
//   pass-KV: every rank's KV shard of the prompt goes around the ring, overlapped with
//            attention on the shard already there;
//   pass-Q:  the chunk's queries are gathered, each rank attends them to its own shard, and
//            the partial outputs with their log-sum-exp go back to the queries' owners,
//            which merge them: far fewer bytes when the cached prefix is much longer than
//            the chunk (deep in a long prompt);
//   auto:    per chunk, the one that moves fewer bytes (cp_moves_fewer_with_pass_q).
enum class CpAttention { kAuto, kPassKv, kPassQ };
CpAttention parse_cp_attention(const std::string& text);  // auto | pass-kv | pass-q; UserError otherwise
const char* cp_attention_name(CpAttention mode);

// Meta's rule of thumb, for the header and docs: pass-Q when x / (x + L) <= 2 N_kv / N_h.
bool meta_rule_prefers_pass_q(double prefix, double tokens, int kv_heads, int heads);

// What a CP exchange moves a token, in floats (one TP rank's heads): a cached token's row of
// a rank's shard (K and V, 2 kv_heads head_dim; MLA's latent row, kv_lora + rope, which each
// rank expands where it attends), a query row, a query head's output row, and the query
// heads (each partial output row carries one log-sum-exp a head).
struct CpWidths {
  int shard = 0, query = 0, head_out = 0, heads = 0;
  // `kv_bytes`: of a cached element (4, or 2 where the ring moves a bf16 cache: cuda).
  static CpWidths grouped_query(int heads, int kv_heads, int head_dim, int kv_bytes = 4);
  static CpWidths latent(int heads, int latent_width, int qk_head_dim, int v_head_dim);
  // MLA as the cuda backend attends it, absorbed: bf16 latent rows round the ring, float
  // queries latent_width wide a head, float outputs kv_lora_rank wide.
  static CpWidths absorbed_latent(int heads, int latent_width, int kv_lora_rank);
};
// Floats one rank sends for one layer of a chunk of `tokens` after `prefix` cached tokens,
// spread over `ranks` ranks: pass-KV, its shard to each of the ranks - 1 others; pass-Q, its
// queries to each other rank and their partial outputs back.
double cp_pass_kv_floats(double prefix, double tokens, int ranks, const CpWidths& widths);
double cp_pass_q_floats(double tokens, int ranks, const CpWidths& widths);
// The run's choice for one chunk: `mode` unless auto, else the variant that moves fewer
// bytes (Meta's rule, with this implementation's exact sizes in place of its constant).
CpAttention cp_attention_for_chunk(CpAttention mode, int64_t prefix, int tokens, int ranks, const CpWidths& widths);

}  // namespace pf::sched
