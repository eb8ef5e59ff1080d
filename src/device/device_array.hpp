// An owning, move-only device allocation (cudaMalloc / cudaFree): weights, workspaces,
// the KV pool. Plain allocations, never managed memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "device/cuda_check.hpp"

namespace pf::cuda {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t count) { allocate(count); }
  DeviceArray(DeviceArray&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    if (this != &other) {
      release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { release(); }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }

  // Grows to at least `count` elements; the contents are not kept. Growing waits for the
  // device first: queued work may still use the old buffer (rare: a longer chunk than any
  // before it).
  void ensure(size_t count) {
    if (count <= size_) return;
    if (ptr_) CUDA_CHECK(cudaDeviceSynchronize());
    release();
    allocate(count);
  }
  void upload(const std::vector<T>& host) {
    ensure(host.size());
    if (!host.empty()) CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }

 private:
  void allocate(size_t count) {
    if (count == 0) return;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
    size_ = count;
  }
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pf::cuda
