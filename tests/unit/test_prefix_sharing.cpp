// Prefix reuse: the block trie's order and reused lengths (sched/prefix_sharing.hpp), the
// plan that starts prompts after their reused prefix, and pages shared between prompts.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kvcache/page_table.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "sched/batch_plan.hpp"
#include "sched/prefix_sharing.hpp"

using namespace pf;

namespace {

struct Prompts {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets{0};
  int add(const std::vector<int32_t>& prompt) {
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    offsets.push_back(static_cast<int64_t>(tokens.size()));
    return static_cast<int>(offsets.size()) - 2;
  }
  std::vector<int32_t> prompt(int p) const { return {tokens.begin() + offsets[p], tokens.begin() + offsets[p + 1]}; }
};

std::vector<int32_t> random_tokens(std::mt19937& rng, int count) {
  std::uniform_int_distribution<int32_t> id(0, 999);
  std::vector<int32_t> out(count);
  for (auto& t : out) t = id(rng);
  return out;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  return std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first - a.begin();
}

// What every prefix plan must satisfy, whatever the prompts: the order lists every prompt
// once, a prompt reuses a page-aligned prefix it really shares with a prompt before it, and
// leaves at least one shared token and its own last token to compute.
void expect_valid(const Prompts& prompts, const sched::PrefixPlan& plan, int page) {
  const int n = static_cast<int>(prompts.offsets.size()) - 1;
  std::vector<int> sorted = plan.order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(n);
  for (int p = 0; p < n; ++p) all[p] = p;
  ASSERT_EQ(sorted, all);
  std::vector<int> position(n);
  for (int i = 0; i < n; ++i) position[plan.order[i]] = i;
  for (int p = 0; p < n; ++p) {
    const sched::PrefixReuse& r = plan.reuse[p];
    if (r.tokens == 0) continue;
    ASSERT_GE(r.source, 0);
    EXPECT_LT(position[r.source], position[p]);
    EXPECT_EQ(r.tokens % page, 0);
    const auto mine = prompts.prompt(p);
    EXPECT_LT(r.tokens, static_cast<int64_t>(mine.size()));
    EXPECT_LT(r.tokens, common_prefix(mine, prompts.prompt(r.source))) << "prompt " << p;
  }
}

}  // namespace

TEST(PrefixSharing, NothingSharedKeepsTheInputOrder) {
  std::mt19937 rng(1);
  Prompts prompts;
  for (int len : {40, 5, 17, 16, 100}) prompts.add(random_tokens(rng, len));  // 5 < one page of 16
  const auto plan = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, 16);
  EXPECT_EQ(plan.order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (const auto& r : plan.reuse) EXPECT_EQ(r.tokens, 0);
}

TEST(PrefixSharing, OneDocumentManyQuestions) {
  std::mt19937 rng(2);
  const auto doc = random_tokens(rng, 200);
  Prompts prompts;
  const int other = prompts.add(random_tokens(rng, 50));
  const int q1 = prompts.add(cat(doc, random_tokens(rng, 30)));
  const int unrelated = prompts.add(random_tokens(rng, 70));
  const int q2 = prompts.add(cat(doc, random_tokens(rng, 9)));
  const int alone = prompts.add(doc);
  const int q1_again = prompts.add(prompts.prompt(q1));                            // an exact duplicate
  const int turn2 = prompts.add(cat(prompts.prompt(q1), random_tokens(rng, 40)));  // a multi-turn history
  const auto plan = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, 16);
  expect_valid(prompts, plan, 16);
  // The document's prompts run together, where the first of them was; the others keep their places.
  EXPECT_EQ(plan.order.front(), other);
  EXPECT_EQ(plan.order.back(), unrelated);
  EXPECT_EQ(plan.reuse[other].tokens, 0);
  EXPECT_EQ(plan.reuse[unrelated].tokens, 0);
  EXPECT_EQ(plan.reuse[q1].tokens, 0);  // the first of them computes the document
  // 200 shared tokens: 192 reused (12 pages), 8 computed again with the question.
  for (int p : {q2, alone}) EXPECT_EQ(plan.reuse[p].tokens, 192) << p;
  EXPECT_EQ(plan.reuse[q1_again].tokens, 224);  // 230 tokens all shared: the last page is computed
  EXPECT_EQ(plan.reuse[turn2].tokens, 224);     // after q1 (or its duplicate): 230 shared
  int64_t reused = 0;
  for (const auto& r : plan.reuse) reused += r.tokens;
  EXPECT_EQ(reused, 192 * 2 + 224 * 2);
}

// Prompts that share every whole page and part of the next run next to each other, so a prompt
// reuses all but the page it diverges in (the review's case: C shares 35 tokens with A, but
// in input order it follows B, which shares 32).
TEST(PrefixSharing, PromptsSharingPartOfTheirLastPageAreNeighbours) {
  std::mt19937 rng(6);
  const auto x = random_tokens(rng, 32);
  Prompts prompts;
  const int a = prompts.add(cat(x, {1, 2, 3, 11, 12}));
  const int b = prompts.add(cat(x, {9, 9}));
  const int c = prompts.add(cat(x, {1, 2, 3, 4}));
  const int other = prompts.add(random_tokens(rng, 5));  // shorter than a page: at the root, in input order
  const auto plan = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, 16);
  expect_valid(prompts, plan, 16);
  EXPECT_EQ(plan.order, (std::vector<int>{c, a, b, other}));  // by their tails: {1,2,3,4} < {1,2,3,11,..} < {9,9}
  EXPECT_EQ(plan.reuse[a].tokens, 32);
  EXPECT_EQ(plan.reuse[b].tokens, 16);  // shares exactly the 32 page-aligned tokens: its last page is computed
}

// A hash that files every block under the same key: prompts must still share only what
// their tokens share, with the same plan as the real hash.
TEST(PrefixSharing, HashCollisionsAreResolvedByTokens) {
  std::mt19937 rng(3);
  const auto doc = random_tokens(rng, 64);
  Prompts prompts;
  for (int i = 0; i < 6; ++i) prompts.add(cat(i % 2 ? doc : random_tokens(rng, 64), random_tokens(rng, 20 + i)));
  const auto colliding = [](const int32_t*, int) { return uint64_t{42}; };
  const auto with_collisions = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, 8, {}, {}, colliding);
  const auto plan = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, 8);
  expect_valid(prompts, with_collisions, 8);
  EXPECT_EQ(with_collisions.order, plan.order);
  for (size_t p = 0; p < plan.reuse.size(); ++p) {
    EXPECT_EQ(with_collisions.reuse[p].tokens, plan.reuse[p].tokens);
    EXPECT_EQ(with_collisions.reuse[p].source, plan.reuse[p].source);
  }
  EXPECT_EQ(plan.reuse[3].tokens, 56);  // after prompt 1: 64 shared tokens, the last page computed again
}

TEST(PrefixSharing, PromptsDoneBeforeAResumeNeitherRunNorLend) {
  std::mt19937 rng(4);
  const auto doc = random_tokens(rng, 64);
  Prompts prompts;
  for (int i = 0; i < 3; ++i) prompts.add(cat(doc, random_tokens(rng, 10)));
  const auto plan = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, 16, {1, 0, 0});
  EXPECT_EQ(plan.order, (std::vector<int>{1, 2}));
  EXPECT_EQ(plan.reuse[1].tokens, 0);
  EXPECT_EQ(plan.reuse[2].tokens, 48);  // 64 shared: a page-aligned prefix leaves its last page to compute
  EXPECT_EQ(plan.reuse[2].source, 1);
}

// Questions over one document scored from where each question starts: a prompt never takes
// rows from a source that scored from later than it does (they would be missing).
TEST(PrefixSharing, APromptTakesNoRowsASourceDidNotScore) {
  std::mt19937 rng(5);
  const auto doc = random_tokens(rng, 64);
  Prompts prompts;
  for (int i = 0; i < 3; ++i) prompts.add(cat(doc, random_tokens(rng, 10)));
  // Prompt 0 scores from 70, prompt 1 from 20, prompt 2 from 64: the depth-first order is by
  // the tokens after the document, so check every pair the plan made against its source.
  const std::vector<int64_t> starts = {70, 20, 64};
  const auto plan = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, 16, {}, starts);
  for (int p = 0; p < 3; ++p) {
    const sched::PrefixReuse& reuse = plan.reuse[p];
    if (reuse.tokens == 0) continue;
    if (starts[reuse.source] > starts[p])
      EXPECT_LT(reuse.tokens, starts[p]) << "prompt " << p << " would copy unscored rows of " << reuse.source;
    else
      EXPECT_EQ(reuse.tokens, 48) << "prompt " << p;
  }
  // Without spans all three share the document's first 48 tokens.
  const auto all = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, 16);
  int sharing = 0;
  for (int p = 0; p < 3; ++p) sharing += all.reuse[p].tokens == 48;
  EXPECT_EQ(sharing, 2);
}

// Random prompts made of a few shared pieces (documents, turns) at random lengths: every plan
// is valid, and reuses within one page of the longest page-aligned prefix any earlier prompt shares.
TEST(PrefixSharing, RandomBatchesAreValidAndReuseAlmostTheMost) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int page = 1 << std::uniform_int_distribution<int>(0, 4)(rng);
    std::vector<std::vector<int32_t>> pieces;
    for (int i = 0; i < 3; ++i) pieces.push_back(random_tokens(rng, std::uniform_int_distribution<int>(1, 60)(rng)));
    Prompts prompts;
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    for (int p = 0; p < n; ++p) {
      std::vector<int32_t> prompt;
      const int parts = std::uniform_int_distribution<int>(0, 3)(rng);
      for (int k = 0; k < parts; ++k) prompt = cat(prompt, pieces[std::uniform_int_distribution<int>(0, 2)(rng)]);
      prompt = cat(prompt, random_tokens(rng, std::uniform_int_distribution<int>(1, 20)(rng)));
      prompts.add(prompt);
    }
    const auto plan = sched::find_shared_prefixes(prompts.tokens, prompts.offsets, page);
    expect_valid(prompts, plan, page);
    for (int i = 0; i < n; ++i) {
      const int p = plan.order[i];
      int64_t best = 0;  // the most any earlier prompt would allow
      for (int j = 0; j < i; ++j) {
        const int64_t common = std::min(common_prefix(prompts.prompt(p), prompts.prompt(plan.order[j])),
                                        static_cast<int64_t>(prompts.prompt(p).size()));
        best = std::max(best, common > 0 ? (common - 1) / page * page : 0);
      }
      EXPECT_GE(plan.reuse[p].tokens, best - page) << "trial " << trial << " prompt " << p;
    }
  }
}

TEST(PrefixSharing, ThePlanStartsReusingPromptsAfterTheirPrefix) {
  sched::PrefixPlan prefixes;
  prefixes.order = {2, 0, 1};
  prefixes.reuse = {{64, 2}, {96, 0}, {}};
  const auto plan = sched::make_plan({100, 130, 80}, sched::FixedChunkPolicy(32), {}, prefixes);
  std::vector<std::tuple<int, int64_t, int, bool, bool>> got;
  for (const auto& mb : plan.micro_batches) got.emplace_back(mb.prompt, mb.start, mb.length, mb.is_first, mb.is_last);
  using T = std::tuple<int, int64_t, int, bool, bool>;
  EXPECT_EQ(got, (std::vector<T>{T{2, 0, 32, true, false}, T{2, 32, 32, false, false}, T{2, 64, 16, false, true},
                                 T{0, 64, 32, true, false}, T{0, 96, 4, false, true}, T{1, 96, 32, true, false},
                                 T{1, 128, 2, false, true}}));
  EXPECT_EQ(plan.total_tokens(), 80 + 36 + 34);
  EXPECT_EQ(plan.reused_tokens(), 64 + 96);
  const auto back = sched::deserialize(sched::serialize(plan));
  ASSERT_EQ(back.reuse.size(), 3u);
  EXPECT_EQ(back.reuse[1].tokens, 96);
  EXPECT_EQ(back.reuse[1].source, 0);
  for (size_t i = 0; i < plan.micro_batches.size(); ++i) {
    EXPECT_EQ(back.micro_batches[i].is_first, plan.micro_batches[i].is_first);
    EXPECT_EQ(back.micro_batches[i].is_last, plan.micro_batches[i].is_last);
  }
  // A source that runs after its heir, or is skipped, is a bug.
  prefixes.order = {0, 2, 1};
  EXPECT_THROW(sched::make_plan({100, 130, 80}, sched::FixedChunkPolicy(32), {}, prefixes), std::logic_error);
  prefixes.order = {2, 0, 1};
  EXPECT_THROW(sched::make_plan({100, 130, 80}, sched::FixedChunkPolicy(32), {0, 0, 1}, prefixes), std::logic_error);
}

// Pages pass from a prompt to its heir: counted once, freed when the last holder is released.
TEST(PageTable, SharedPagesLiveUntilTheirLastHolderIsReleased) {
  kv::PageTable table(10, 4);
  table.reserve(0, 22);  // 6 pages
  table.share(0, 1, 16);
  EXPECT_EQ(table.free_pages(), 4);
  EXPECT_EQ(std::vector<int>(table.pages(1).begin(), table.pages(1).end()),
            std::vector<int>(table.pages(0).begin(), table.pages(0).begin() + 4));
  EXPECT_EQ(table.holders(table.pages(0)[0]), 2);
  table.share(1, 2, 8);  // a chain: prompt 2 from prompt 1's inherited pages
  table.release(0);
  EXPECT_EQ(table.free_pages(), 6);  // only prompt 0's two own pages came back
  table.reserve(1, 40);              // 16 shared tokens + 24 of its own: 6 more pages
  EXPECT_EQ(table.free_pages(), 0);
  EXPECT_EQ(table.peak_pages_in_use(), 10);
  EXPECT_THROW(table.reserve(2, 12), std::logic_error);  // a third page for prompt 2: none left
  table.release(1);
  EXPECT_EQ(table.free_pages(), 8);  // prompt 2 still holds the first two pages
  EXPECT_EQ(table.holders(table.pages(2)[0]), 1);
  table.release(2);
  EXPECT_EQ(table.free_pages(), 10);
  EXPECT_THROW(table.share(2, 3, 4), std::logic_error);  // the source holds nothing any more
  table.reserve(4, 8);
  EXPECT_THROW(table.share(4, 5, 6), std::logic_error);  // not a page boundary
}

// Context parallelism: a rank's rows of a shared prefix may end inside a page; the heir copies
// that page before it writes there, and the other holders keep the original.
TEST(PageTable, PrivatizeGivesAPromptItsOwnCopyOfASharedPage) {
  kv::PagedKvPool pool({/*layers=*/2, /*kv_heads=*/1, /*head_dim=*/2, /*page_size=*/4}, 6);
  pool.reserve(0, 6);  // 2 pages, the second half full
  const float k[12] = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6};
  for (int layer = 0; layer < 2; ++layer) pool.write(layer, 0, 0, 6, k, 2, k, 2);
  pool.share(0, 1, 8);
  pool.share(0, 2, 8);
  const int shared = pool.pages(1)[1];
  pool.privatize_page_of(1, 6);  // prompt 1 writes its own rows from row 6 on
  const int own = pool.pages(1)[1];
  EXPECT_NE(own, shared);
  EXPECT_EQ(pool.pages(1)[0], pool.pages(0)[0]);  // the full page stays shared
  EXPECT_EQ(pool.pages(2)[1], shared);            // the other heir keeps the original
  float copied[4], original[4];
  pool.load_rows(1, own, 0, true, 0, 4, copied);
  pool.load_rows(1, shared, 0, true, 0, 4, original);
  EXPECT_EQ(std::vector<float>(copied, copied + 4), (std::vector<float>{5, 5, 6, 6}));
  EXPECT_EQ(std::vector<float>(original, original + 4), (std::vector<float>{5, 5, 6, 6}));
  const float mine[2] = {9, 9};
  pool.write(1, 1, 6, 1, mine, 2, mine, 2);
  pool.load_rows(1, shared, 0, false, 4, 2, original);  // the original's row 6 is untouched
  EXPECT_EQ(original[0], 0.0f);
  pool.privatize_page_of(1, 7);  // already its own: nothing changes
  EXPECT_EQ(pool.pages(1)[1], own);
}
