// Prefix reuse inside a batch: prompts that start with the same tokens (one document with
// many questions, multi-turn histories) compute that prefix once.
//
// Rank 0 builds a trie whose edges are page-aligned token blocks (a page is the unit a KV
// cache shares). Children are found by a hash of the block but accepted only when the tokens
// are equal, so a hash collision costs a comparison, never a wrong prefix. The plan runs
// prompts in the trie's depth-first order, so prompts sharing a prefix run one after
// another, and each prompt takes its prefix from the prompt just before it: in depth-first
// order that neighbour shares the deepest whole block with it of all earlier prompts (and the
// prompts filed under one node are ordered by the tokens after it, so those sharing part of
// the next page are neighbours too). The shared
// pages pass from one prompt to the next as the first is released, so reuse never holds a
// page longer than the prompt that wrote it: a stage's KV pool needs no more pages than
// without reuse (the longest prompt), and no prefix ever has to be evicted.
//
// How much is reused: the largest multiple of the page size strictly below the common
// prefix's length, and below the prompt's length. Strictly below, so that the position where
// the prompt's own tokens start is still one both prompts share: the entry of /token_logprobs
// there (the score of a token both prompts have, after the same prefix) and every row before
// it come from the source unchanged, and the prompt computes every row it needs itself.
// The price: the page a prompt diverges in is computed again, and one page more when the
// shared length is a page multiple (or when an earlier prompt that is not its neighbour
// shares part of that page: across a node's children).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sched/batch_plan.hpp"

namespace pf::sched {

// The tokens a prompt reuses when it shares its first `common` tokens with a prompt whose KV
// cache holds them (the rule above; `common` already at most the prompt's length).
inline int64_t reusable_prefix(int64_t common, int page_size) {
  return common > 0 ? (common - 1) / page_size * page_size : 0;
}

// The hash that files a block of tokens under its parent; a test may pass a poor one to
// prove that only equal tokens share.
using BlockHash = std::function<uint64_t(const int32_t* tokens, int count)>;
uint64_t fnv1a_block_hash(const int32_t* tokens, int count);

// Prompt p is tokens[offsets[p], offsets[p + 1]). Prompts with skip[p] != 0 (done before a
// resume) take no part: they neither run nor lend their prefix. The result's order lists
// the other prompts. With `score_start` (the input's /score_start; empty: all 1), a prompt
// takes no rows from a source that scores from a later position than it does.
PrefixPlan find_shared_prefixes(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets, int page_size,
                                const std::vector<char>& skip = {}, const std::vector<int64_t>& score_start = {},
                                const BlockHash& hash = fnv1a_block_hash);

// Where `outside` (per prompt, e.g. the KV store's offers) holds a longer prefix than the batch
// gives a prompt, the prompt loads that instead; the order stays.
void prefer_longer_outside(PrefixPlan& plan, const std::vector<PrefixReuse>& outside);

}  // namespace pf::sched
