// The host simulator (see host_sim.hpp).
#include "host_sim/host_sim.hpp"

#include <setjmp.h>
#include <ucontext.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace pf::sim {
namespace {

// The threads of a block are fibers on the launching host thread: a barrier yields to the
// next fiber until every thread has arrived. A fiber is started once with ucontext (its own
// stack), and every switch after that is a _setjmp / _longjmp pair: swapcontext saves and
// restores the signal mask, two system calls a switch, which were most of a simulated run's
// time. (An OS thread per GPU thread, before fibers, cost a futex wake-up a switch: 10x slower.)
struct Jump {
  jmp_buf at;
};
struct Fibers {
  ucontext_t scheduler;
  Jump scheduler_jump;
  std::vector<ucontext_t> contexts;
  std::vector<Jump> jumps;     // where each started fiber resumes
  std::vector<char> started;
  int current = 0;
};
thread_local Fibers* t_fibers = nullptr;

void yield_fiber() {
  if (_setjmp(t_fibers->jumps[t_fibers->current].at) == 0) _longjmp(t_fibers->scheduler_jump.at, 1);
}

class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      return;
    }
    const long generation = generation_;
    while (generation_ == generation) yield_fiber();
  }

 private:
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

namespace {
StreamExecutor g_executor = nullptr;
}  // namespace

void set_stream_executor(StreamExecutor executor) { g_executor = executor; }

void launch_on_stream(void* stream, std::function<void()> work) {
  if (g_executor)
    g_executor(stream, std::move(work));
  else
    work();
}

namespace {

// Stacks kept across launches (allocated lazily by malloc: untouched pages cost nothing).
constexpr size_t kStackBytes = 256 << 10;
thread_local std::vector<std::unique_ptr<char[]>> t_stacks;

struct FiberStart {
  Block* block;
  const std::function<void()>* body;
  std::vector<char>* finished;
};
thread_local FiberStart t_start;

// A fiber: one GPU thread, running `body` for every block of the grid in turn.
void fiber_main() {
  Block& state = *t_start.block;
  const std::function<void()>& body = *t_start.body;
  const dim3 grid = state.grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        if (t_linear == 0) state.index = dim3(x, y, z);
        state.barrier.wait();  // index set, previous block finished
        body();
        state.barrier.wait();
      }
  (*t_start.finished)[t_linear] = 1;
  _longjmp(t_fibers->scheduler_jump.at, 1);  // never returns: its stack is simply not resumed
}

// Runs fiber t until its next barrier, or until it has finished. (A function of its own: no
// local of the scheduler's loop lives across the _setjmp.)
__attribute__((noinline)) void run_until_it_waits(Fibers& fibers, int t) {
  if (_setjmp(fibers.scheduler_jump.at) != 0) return;  // back from the fiber
  if (!fibers.started[t]) {
    fibers.started[t] = 1;
    swapcontext(&fibers.scheduler, &fibers.contexts[t]);
  } else {
    _longjmp(fibers.jumps[t].at, 1);
  }
}

}  // namespace

void launch(dim3 grid, dim3 block, size_t dynamic_shared_bytes, const std::function<void()>& body) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  if (threads <= 0 || threads > 1024) throw std::invalid_argument("host_sim: bad block size");
  Block state(threads, dynamic_shared_bytes);
  state.grid = grid;
  state.block = block;
  Fibers fibers;
  fibers.contexts.resize(threads);
  fibers.jumps.resize(threads);
  fibers.started.assign(threads, 0);
  while (t_stacks.size() < static_cast<size_t>(threads)) t_stacks.emplace_back(new char[kStackBytes]);
  std::vector<char> finished(threads, 0);
  Fibers* outer = t_fibers;
  t_fibers = &fibers;
  t_block = &state;
  for (int t = 0; t < threads; ++t) {
    getcontext(&fibers.contexts[t]);
    fibers.contexts[t].uc_stack.ss_sp = t_stacks[t].get();
    fibers.contexts[t].uc_stack.ss_size = kStackBytes;
    fibers.contexts[t].uc_link = &fibers.scheduler;  // (fiber_main ends with a jump instead)
    makecontext(&fibers.contexts[t], fiber_main, 0);
  }
  // Round robin until every fiber has returned; each runs until it waits at a barrier.
  t_start = {&state, &body, &finished};
  for (int left = threads; left > 0;) {
    for (int t = 0; t < threads; ++t) {
      if (finished[t]) continue;
      fibers.current = t;
      t_linear = t;
      t_thread = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
      run_until_it_waits(fibers, t);
    }
    left = 0;
    for (int t = 0; t < threads; ++t) left += finished[t] ? 0 : 1;
  }
  t_block = nullptr;
  t_fibers = outer;
}

}  // namespace pf::sim
