// Per-row summaries of a vocabulary slice's logits (--logprobs, --top-k), made where the
// logits are: one block per row writes the record compute/vocab_scores.hpp defines (max,
// sum of exp(x - max) in double, the target's logit, the k best), so a row leaves the device
// as 24 + 8k bytes (plus 4 a token of a --token-ids set) instead of vocab / tp floats. Same rules as the host's
// summarize_row_slice: NaN logits are never the max, a NaN or infinite logit makes the sum
// NaN and the row gets no candidates, ties between equal logits go to the smaller token id.
//
// The k best without sorting the slice: a radix select over the logits' order-preserving
// 32-bit keys (four passes of an 8-bit histogram) finds the k-th best key T; then every
// key above T and the first (by token id) of the keys equal to T fill the k slots. Counting
// uses shared-memory atomics on integers, so the result does not depend on timing.
#include <cstring>

#include "common.cuh"
#include "compute/vocab_scores.hpp"
#include "kernels.hpp"

namespace pf::kernels {
namespace {

constexpr int kThreads = 256;  // also the histogram's bins: one per thread to clear

__device__ __forceinline__ uint32_t float_bits(float x) {
#ifdef PF_HOST_SIM
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#else
  return __float_as_uint(x);
#endif
}

// A larger key is a larger float; -0 and +0 (equal logits) share a key.
__device__ __forceinline__ uint32_t order_key(float x) {
  uint32_t u = float_bits(x);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ bool finite(float x) {
  return (float_bits(x) & 0x7f800000u) != 0x7f800000u;
}

__global__ void vocab_summary_kernel(const float* logits, int count, int vocab_begin, const int32_t* targets, int k,
                                     const int32_t* token_set, int set_size, unsigned char* records,
                                     int64_t record_bytes, int64_t set_offset) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * count;
  auto* header = reinterpret_cast<compute::RowSummaryHeader*>(records + blockIdx.x * record_bytes);
  auto* slots = reinterpret_cast<compute::RowCandidate*>(header + 1);
  const int t = threadIdx.x;
  __shared__ float max_part[kThreads];
  __shared__ double sum_part[kThreads];
  __shared__ int hist[kThreads], above_part[kThreads], tie_part[kThreads];
  __shared__ float row_max;
  __shared__ double row_sum;
  __shared__ uint32_t select_digit;
  __shared__ int select_need;

  // The maximum (a NaN is never larger), then sum exp(x - max) in double: both folded by
  // thread 0 in thread order, the same sum on every run.
  float m = -INFINITY;
  for (int i = t; i < count; i += kThreads) m = row[i] > m ? row[i] : m;
  max_part[t] = m;
  __syncthreads();
  if (t == 0) {
    for (int j = 1; j < kThreads; ++j) m = max_part[j] > m ? max_part[j] : m;
    row_max = m;
  }
  __syncthreads();
  const float max = row_max;
  double s = 0;
  for (int i = t; i < count; i += kThreads) s += exp(static_cast<double>(row[i]) - max);
  sum_part[t] = s;
  __syncthreads();
  if (t == 0) {
    for (int j = 1; j < kThreads; ++j) s += sum_part[j];
    row_sum = count > 0 && finite(max) ? s : NAN;
  }
  __syncthreads();
  const double sum = row_sum;
  const bool ranked = sum - sum == 0.0;  // finite: no NaN or infinite logit in the row
  const int kept = ranked ? (k < count ? k : count) : 0;

  if (kept > 0 && kept < count) {
    // The k-th best key, eight bits at a time from the top: the digit whose bin holds it,
    // among the keys that share the digits chosen so far. `need` ends as how many keys equal
    // to T the k best take.
    uint32_t prefix = 0, mask = 0;
    int need = kept;
    for (int shift = 24; shift >= 0; shift -= 8) {
      hist[t] = 0;
      __syncthreads();
      for (int i = t; i < count; i += kThreads) {
        const uint32_t key = order_key(row[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xff], 1);
      }
      __syncthreads();
      if (t == 0) {
        int digit = 255;
        for (; digit > 0 && hist[digit] < need; --digit) need -= hist[digit];
        select_digit = static_cast<uint32_t>(digit);
        select_need = need;
      }
      __syncthreads();
      prefix |= select_digit << shift;
      mask |= 0xffu << shift;
      need = select_need;
    }
    // Slots: every key above T, then the first `need` keys equal to T in token order. Each
    // thread takes a contiguous run of the slice; thread 0 turns the per-thread counts into
    // offsets.
    const int run = (count + kThreads - 1) / kThreads;
    const int begin = t * run < count ? t * run : count, end = begin + run < count ? begin + run : count;
    int above = 0, ties = 0;
    for (int i = begin; i < end; ++i) {
      const uint32_t key = order_key(row[i]);
      above += key > prefix;
      ties += key == prefix;
    }
    above_part[t] = above;
    tie_part[t] = ties;
    __syncthreads();
    if (t == 0) {
      int a = 0, e = 0;
      for (int j = 0; j < kThreads; ++j) {
        const int aj = above_part[j], ej = tie_part[j];
        above_part[j] = a;
        tie_part[j] = e;
        a += aj;
        e += ej;
      }
    }
    __syncthreads();
    const int above_total = kept - need;
    int a = above_part[t], e = tie_part[t];
    for (int i = begin; i < end; ++i) {
      const uint32_t key = order_key(row[i]);
      if (key > prefix) slots[a++] = {row[i], vocab_begin + i};
      if (key == prefix && e < need) slots[above_total + e++] = {row[i], vocab_begin + i};
    }
  } else if (kept > 0) {  // the whole slice fits in the k slots
    for (int i = t; i < count; i += kThreads) slots[i] = {row[i], vocab_begin + i};
  }

  // The token set's logits held by this slice; NaN for the others (another slice has them).
  float* set_slots = reinterpret_cast<float*>(records + blockIdx.x * record_bytes + set_offset);
  for (int j = t; j < set_size; j += kThreads) {
    const int id = token_set[j];
    set_slots[j] = id >= vocab_begin && id < vocab_begin + count ? row[id - vocab_begin] : NAN;
  }
  if (t == 0) {
    const int target = targets ? targets[blockIdx.x] : -1;
    const bool held = target >= vocab_begin && target < vocab_begin + count;
    *header = {max, held ? row[target - vocab_begin] : 0.0f, held ? 1 : 0, kept, sum};
  }
}

}  // namespace

void vocab_summaries(const float* logits, int rows, int count, int vocab_begin, const int32_t* targets, int k,
                     const int32_t* token_set, int set_size, void* records, cudaStream_t stream) {
  if (rows <= 0) return;
  const auto record_bytes =
      static_cast<int64_t>(compute::row_summary_bytes(compute::SummaryShape{k, token_set, set_size}));
  PF_LAUNCH(vocab_summary_kernel, rows, kThreads, 0, stream, logits, count, vocab_begin, targets, k, token_set,
            set_size, static_cast<unsigned char*>(records), record_bytes,
            static_cast<int64_t>(compute::set_slots_offset(k)));
}

}  // namespace pf::kernels
