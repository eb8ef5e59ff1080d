// The host simulator (see host_sim.hpp).
#include "host_sim/host_sim.hpp"

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace pf::sim {
namespace {

class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const long generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_;
  int arrived_ = 0;
  long generation_ = 0;
};

struct Warp {
  explicit Warp(int lanes) : barrier(lanes) {}
  Barrier barrier;
  float shuffle[32] = {};
  uint32_t a[32][4] = {}, b[32][2] = {};
  const void* rows[32] = {};
};

struct Block {
  Block(int threads, size_t shared_bytes) : barrier(threads), shared(shared_bytes + 16) {
    for (int w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<Warp>(std::min(32, threads - 32 * w)));
  }
  Barrier barrier;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<unsigned char> shared;
  dim3 grid, block, index;
};

thread_local Block* t_block = nullptr;
thread_local dim3 t_thread;
thread_local int t_linear = 0;

Warp& my_warp() { return *t_block->warps[t_linear / 32]; }

float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

// Element (row, k) of A (16x16) and (k, col) of B (16x8) from the lanes' packed registers,
// as the PTX ISA lays out mma.m16n8k16 with .bf16 operands: lane = 4 * groupID + tid.
float a_element(const Warp& w, int row, int k) {
  const int lane = 4 * (row % 8) + (k % 8) / 2;
  const int reg = (row < 8 ? 0 : 1) + (k < 8 ? 0 : 2);
  return bf16_to_float(static_cast<uint16_t>(w.a[lane][reg] >> (16 * (k % 2))));
}
float b_element(const Warp& w, int k, int col) {
  const int lane = 4 * col + (k % 8) / 2;
  const int reg = k < 8 ? 0 : 1;
  return bf16_to_float(static_cast<uint16_t>(w.b[lane][reg] >> (16 * (k % 2))));
}

}  // namespace

const dim3& thread_index() { return t_thread; }
const dim3& block_index() { return t_block->index; }
const dim3& block_dim() { return t_block->block; }
const dim3& grid_dim() { return t_block->grid; }
void sync_threads() { t_block->barrier.wait(); }
void* dynamic_shared() {
  const uintptr_t p = reinterpret_cast<uintptr_t>(t_block->shared.data());
  return reinterpret_cast<void*>((p + 15) & ~uintptr_t{15});  // 16-byte aligned, as on a GPU
}

float shfl_xor(float value, int lane_mask) {
  Warp& w = my_warp();
  const int lane = t_linear % 32;
  w.shuffle[lane] = value;
  w.barrier.wait();
  const float other = w.shuffle[lane ^ lane_mask];
  w.barrier.wait();
  return other;
}

void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Warp& w = my_warp();
  const int lane = t_linear % 32;
  for (int i = 0; i < 4; ++i) w.a[lane][i] = a[i];
  w.b[lane][0] = b0;
  w.b[lane][1] = b1;
  w.barrier.wait();
  const int group = lane / 4, tid = lane % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {  // C/D: {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}
    const int row = group + (e >= 2 ? 8 : 0), col = 2 * tid + (e & 1);
    float acc = d[e];
    for (int k = 0; k < 16; ++k) acc += a_element(w, row, k) * b_element(w, k, col);
    out[e] = acc;
  }
  w.barrier.wait();  // everyone has read the fragments before the next mma overwrites them
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}

void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool transpose) {
  Warp& w = my_warp();
  const int lane = t_linear % 32;
  w.rows[lane] = row;
  w.barrier.wait();
  uint32_t out[4];
  for (int i = 0; i < 4; ++i) {
    auto element = [&](int mrow, int mcol) { return static_cast<const uint16_t*>(w.rows[8 * i + mrow])[mcol]; };
    const int a = lane / 4, b = 2 * (lane % 4);
    const uint16_t lo = transpose ? element(b, a) : element(a, b);
    const uint16_t hi = transpose ? element(b + 1, a) : element(a, b + 1);
    out[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  w.barrier.wait();
  for (int i = 0; i < 4; ++i) r[i] = out[i];
}

void copy_16(void* dst, const void* src, bool valid) {
  if (valid)
    std::memcpy(dst, src, 16);
  else
    std::memset(dst, 0, 16);
}

void launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, const std::function<void()>& body) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  if (threads <= 0 || threads > 1024) throw std::invalid_argument("host_sim: bad block size");
  Block state(threads, dynamic_shared_bytes);
  state.grid = grid;
  state.block = block;
  // One host thread per GPU thread, kept for the whole grid; blocks run one after another.
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      t_block = &state;
      t_linear = t;
      t_thread = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
      for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
          for (unsigned x = 0; x < grid.x; ++x) {
            if (t == 0) state.index = dim3(x, y, z);
            state.barrier.wait();  // index set, previous block finished
            body();
            state.barrier.wait();
          }
      t_block = nullptr;
    });
  }
  for (auto& w : workers) w.join();
}

}  // namespace pf::sim
