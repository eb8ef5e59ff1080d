// The block trie behind prefix reuse (see prefix_sharing.hpp).
#include "sched/prefix_sharing.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace pf::sched {

namespace {

class BlockTrie {
 public:
  BlockTrie(const std::vector<int32_t>& tokens, int page_size, const BlockHash& hash)
      : tokens_(tokens), page_size_(page_size), hash_(hash), nodes_(1) {}

  // Files prompt `p` (tokens from `begin`, `length` of them) under the node of its last full
  // block. Prompts must come in input order.
  void insert(int p, int64_t begin, int64_t length) {
    if (static_cast<size_t>(p) >= spans_.size()) spans_.resize(static_cast<size_t>(p) + 1);
    spans_[p] = {begin, length};
    int node = 0;
    for (int64_t at = begin; at + page_size_ <= begin + length; at += page_size_) node = child(node, at, p);
    nodes_[node].prompts.push_back(p);
  }

  // Prompts depth first. At each node its own prompts and its children's subtrees go in the
  // order of their first prompt in the input, so the order is the input order wherever no
  // prefix is shared, and prompts sharing one run where the first of them would have. Below
  // the root a node's own prompts (which share all its blocks) run together, ordered by the
  // tokens after them, so that prompts sharing part of their last page are neighbours too.
  std::vector<int> depth_first() const {
    std::vector<int> order;
    std::vector<int> stack{~0};  // x >= 0: emit prompt x; ~n: expand node n
    std::vector<int> items;
    while (!stack.empty()) {
      const int item = stack.back();
      stack.pop_back();
      if (item >= 0) {
        order.push_back(item);
        continue;
      }
      const Node& node = nodes_[~item];
      std::vector<int> own = node.prompts;  // in input order
      if (~item != 0) std::stable_sort(own.begin(), own.end(), [&](int a, int b) { return tail_less(a, b, node); });
      const int own_first = node.prompts.empty() ? 0 : node.prompts.front();
      // Children were created by their first prompt in input order: they ascend by it.
      items.clear();
      size_t a = 0, b = 0;
      while (a < own.size() || b < node.children.size()) {
        const bool take_prompt =
            b == node.children.size() ||
            (a < own.size() && (~item != 0 ? own_first : own[a]) < nodes_[node.children[b]].first_prompt);
        if (take_prompt && ~item != 0) {  // the whole group at once
          items.insert(items.end(), own.begin(), own.end());
          a = own.size();
        } else {
          items.push_back(take_prompt ? own[a++] : ~node.children[b++]);
        }
      }
      stack.insert(stack.end(), items.rbegin(), items.rend());
    }
    return order;
  }

 private:
  struct Node {
    int64_t block = -1;  // where this node's block starts in tokens_ (in its first prompt)
    int parent = -1;
    int first_prompt = -1;  // the first prompt (in input order) through it
    int depth = 0;          // blocks from the root
    std::vector<int> children;
    std::vector<int> prompts;  // prompts whose last full block is this node's
  };

  // Compares two prompts filed at `node` by their tokens after its blocks.
  bool tail_less(int a, int b, const Node& node) const {
    const int64_t skip = static_cast<int64_t>(node.depth) * page_size_;
    const int32_t* ta = tokens_.data() + spans_[a].first + skip;
    const int32_t* tb = tokens_.data() + spans_[b].first + skip;
    return std::lexicographical_compare(ta, ta + (spans_[a].second - skip), tb, tb + (spans_[b].second - skip));
  }

  // The child of `parent` for the block at tokens_[at..]: found by hash, confirmed by tokens.
  int child(int parent, int64_t at, int prompt) {
    const int32_t* block = tokens_.data() + at;
    const uint64_t key = hash_(block, page_size_) ^ (static_cast<uint64_t>(parent) * 0x9e3779b97f4a7c15ull);
    std::vector<int>& candidates = by_key_[key];
    for (int c : candidates)
      if (nodes_[c].parent == parent &&
          std::memcmp(tokens_.data() + nodes_[c].block, block, sizeof(int32_t) * page_size_) == 0)
        return c;
    const int id = static_cast<int>(nodes_.size());
    Node node;
    node.block = at;
    node.parent = parent;
    node.first_prompt = prompt;
    node.depth = nodes_[parent].depth + 1;
    nodes_.push_back(std::move(node));
    nodes_[parent].children.push_back(id);
    candidates.push_back(id);
    return id;
  }

  const std::vector<int32_t>& tokens_;
  const int page_size_;
  const BlockHash& hash_;
  std::vector<Node> nodes_;
  std::vector<std::pair<int64_t, int64_t>> spans_;         // per prompt: first token, length
  std::unordered_map<uint64_t, std::vector<int>> by_key_;  // (parent, block hash) -> candidate children
};

}  // namespace

uint64_t fnv1a_block_hash(const int32_t* tokens, int count) {
  uint64_t value = 0xcbf29ce484222325ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(tokens);
  for (size_t i = 0; i < sizeof(int32_t) * static_cast<size_t>(count); ++i)
    value = (value ^ bytes[i]) * 0x100000001b3ull;
  return value;
}

PrefixPlan find_shared_prefixes(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets, int page_size,
                                const std::vector<char>& skip, const std::vector<int64_t>& score_start,
                                const BlockHash& hash) {
  if (page_size <= 0 || offsets.empty()) throw std::logic_error("find_shared_prefixes: no pages or no offsets");
  const int n = static_cast<int>(offsets.size()) - 1;
  BlockTrie trie(tokens, page_size, hash);
  for (int p = 0; p < n; ++p)
    if (!(p < static_cast<int>(skip.size()) && skip[p])) trie.insert(p, offsets[p], offsets[p + 1] - offsets[p]);
  PrefixPlan plan;
  plan.order = trie.depth_first();
  plan.reuse.assign(static_cast<size_t>(n), PrefixReuse{});
  // Each prompt reuses what it shares with the one before it (prefix_sharing.hpp says why).
  for (size_t i = 1; i < plan.order.size(); ++i) {
    const int p = plan.order[i], source = plan.order[i - 1];
    const int32_t* a = tokens.data() + offsets[p];
    const int32_t* b = tokens.data() + offsets[source];
    const int64_t limit = std::min(offsets[p + 1] - offsets[p], offsets[source + 1] - offsets[source]);
    int64_t common = std::mismatch(a, a + limit, b).first - a;
    // The source's token rows are copied up to the reuse length: where the source scores
    // from a later position than the prompt, rows the prompt scores would be missing.
    if (!score_start.empty() && score_start[source] > score_start[p]) common = std::min(common, score_start[p]);
    const int64_t reused = reusable_prefix(common, page_size);
    if (reused > 0) plan.reuse[p] = {reused, source};
  }
  return plan;
}

void prefer_longer_outside(PrefixPlan& plan, const std::vector<PrefixReuse>& outside) {
  if (plan.reuse.size() < outside.size()) plan.reuse.resize(outside.size());
  for (size_t p = 0; p < outside.size(); ++p)
    if (outside[p].tokens > plan.reuse[p].tokens) plan.reuse[p] = outside[p];
}

}  // namespace pf::sched
