// The batch plan (fixed chunks, wire format) and the paged KV pool and its capacity check.
#include <gtest/gtest.h>

#include <numeric>

#include "errors.hpp"
#include "kvcache/kv_capacity.hpp"
#include "kvcache/paged_kv_pool.hpp"
#include "sched/batch_plan.hpp"

using namespace pf;

TEST(BatchPlan, FixedChunksCoverEveryPromptInOrder) {
  const sched::FixedChunkPolicy policy(64);
  EXPECT_EQ(sched::chunk_sizes(200, policy), (std::vector<int>{64, 64, 64, 8}));
  EXPECT_EQ(sched::chunk_sizes(64, policy), (std::vector<int>{64}));
  EXPECT_EQ(sched::chunk_sizes(1, policy), (std::vector<int>{1}));
  const auto plan = sched::make_plan({200, 10, 128}, policy);
  ASSERT_EQ(plan.micro_batches.size(), 4u + 1u + 2u);
  EXPECT_EQ(plan.max_chunk(), 64);
  EXPECT_EQ(plan.total_tokens(), 338);
  int64_t expected_start = 0;
  int prompt = 0;
  for (const auto& mb : plan.micro_batches) {
    if (mb.prompt != prompt) {
      prompt = mb.prompt;
      expected_start = 0;
    }
    EXPECT_EQ(mb.start, expected_start);
    expected_start += mb.length;
    EXPECT_EQ(mb.is_last, expected_start == plan.prompt_lengths[mb.prompt]);
  }
}

TEST(BatchPlan, ACachedPrefixIsNotComputed) {
  const sched::FixedChunkPolicy policy(64);
  EXPECT_EQ(sched::chunk_sizes(200, policy, 128), (std::vector<int>{64, 8}));
  const auto plan = sched::make_plan({200, 150}, policy, {}, sched::PrefixPlan::from_outside({0, 128}));
  ASSERT_EQ(plan.micro_batches.size(), 4u + 1u);
  EXPECT_EQ(plan.total_tokens(), 200 + 22);
  EXPECT_EQ(plan.micro_batches[4].prompt, 1);
  EXPECT_EQ(plan.micro_batches[4].start, 128);  // the chunk sees the cached 128 tokens as its prefix
  EXPECT_EQ(plan.micro_batches[4].length, 22);
  EXPECT_TRUE(plan.micro_batches[4].is_last);
  EXPECT_THROW(sched::make_plan({100}, policy, {}, sched::PrefixPlan::from_outside({100})),
               std::logic_error);  // the last token is computed
}

TEST(BatchPlan, SerializeRoundTrip) {
  const auto plan = sched::make_plan({5000, 3, 4097}, sched::FixedChunkPolicy(4096));
  const auto back = sched::deserialize(sched::serialize(plan));
  EXPECT_EQ(back.prompt_lengths, plan.prompt_lengths);
  ASSERT_EQ(back.micro_batches.size(), plan.micro_batches.size());
  for (size_t i = 0; i < back.micro_batches.size(); ++i) {
    EXPECT_EQ(back.micro_batches[i].index, static_cast<int>(i));
    EXPECT_EQ(back.micro_batches[i].prompt, plan.micro_batches[i].prompt);
    EXPECT_EQ(back.micro_batches[i].start, plan.micro_batches[i].start);
    EXPECT_EQ(back.micro_batches[i].length, plan.micro_batches[i].length);
    EXPECT_EQ(back.micro_batches[i].is_last, plan.micro_batches[i].is_last);
  }
}

TEST(KvPool, PagesGrowAndReturn) {
  kv::PagedKvPool pool({2, 2, 4, 16}, 5);
  pool.reserve(7, 20);  // 2 pages
  EXPECT_EQ(pool.pages(7).size(), 2u);
  pool.reserve(7, 48);  // grows to 3
  EXPECT_EQ(pool.pages(7).size(), 3u);
  EXPECT_EQ(pool.free_pages(), 2);
  EXPECT_THROW(pool.reserve(8, 48), std::logic_error);  // only 2 left: takes none
  EXPECT_EQ(pool.free_pages(), 2);
  pool.release(7);
  EXPECT_EQ(pool.free_pages(), 5);
  EXPECT_EQ(pool.peak_pages_in_use(), 3);
}

TEST(KvPool, WriteLandsInPageLayout) {
  const kv::KvShape shape{1, 2, 4, 8};  // 1 layer, 2 KV heads, head_dim 4, 8 tokens per page
  kv::PagedKvPool pool(shape, 4);
  pool.reserve(0, 12);
  std::vector<float> k(12 * 8), v(12 * 8);
  std::iota(k.begin(), k.end(), 0.0f);
  std::iota(v.begin(), v.end(), 1000.0f);
  pool.write(0, 0, 0, 12, k.data(), 8, v.data(), 8);
  // token 10, head 1 -> page 1, slot 2
  const float* key = pool.key_page(0, pool.pages(0)[1], 1) + 2 * 4;
  const float* value = pool.value_page(0, pool.pages(0)[1], 1) + 2 * 4;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(key[i], k[10 * 8 + 4 + i]);
    EXPECT_EQ(value[i], v[10 * 8 + 4 + i]);
  }
}

TEST(KvCapacity, LargestPromptSetsThePoolAndTooLargeIsAUserError) {
  const kv::KvShape shape{4, 2, 32, 64};  // 4 layers x (K + V) x 2 heads x 64 tokens x 32 dims x 4 B
  EXPECT_EQ(shape.bytes_per_page(), 128 * 1024);
  EXPECT_EQ(kv::pool_pages_for(shape, {100, 1000, 65}, 2, 0), 16);  // 1000 tokens -> 16 pages = 2 MiB
  try {
    kv::pool_pages_for(shape, {100, 1025}, 2, 3);  // 17 pages
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 1"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("stage 3 (its 4 layers)"), std::string::npos) << e.what();
  }
  try {  // --cp: the whole prompt and the share a rank holds
    kv::pool_pages_for(shape, {100, 1025}, 2, 0, {150, 2040});
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 1 (2040 tokens, 1025 of them in each CP rank's pool)"),
              std::string::npos)
        << e.what();
  }
}
