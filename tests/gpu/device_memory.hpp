// Test helper: a typed buffer in device memory (a GPU build) or in host memory (the host
// kernels-only simulator build, PF_HOST_SIM), so one test source checks the kernels both ways.
#pragma once

#include <cuda_runtime.h>

// The kernel checks under the host simulator have no runtime: their "device memory" is host
// memory. The simulated runtime (PF_RUNTIME_SIM) has one, so its tests use the real calls.
#if defined(PF_HOST_SIM) && !defined(PF_RUNTIME_SIM)
#define PF_KERNELS_ONLY_SIM 1
#else
#define PF_KERNELS_ONLY_SIM 0
#endif

#include <string>
#include <vector>

namespace pf::test {

// Empty when a device is usable (or in the simulator); else why not.
inline std::string no_device_reason() {
#if PF_KERNELS_ONLY_SIM
  return "";
#else
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device visible";
  return "";
#endif
}

// Waits for the device and turns an error into a test failure message ("" when fine).
inline std::string sync_device() {
#if PF_KERNELS_ONLY_SIM
  return "";
#else
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) status = cudaDeviceSynchronize();
  return status == cudaSuccess ? "" : cudaGetErrorString(status);
#endif
}

template <typename T>
class DeviceMemory {
 public:
  explicit DeviceMemory(size_t count) : count_(count) {
#if PF_KERNELS_ONLY_SIM
    host_.resize(count);
    ptr_ = host_.data();
#else
    if (cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
#endif
  }
  explicit DeviceMemory(const std::vector<T>& values) : DeviceMemory(values.size()) { put(values); }
  ~DeviceMemory() {
#if !PF_KERNELS_ONLY_SIM
    if (ptr_) cudaFree(ptr_);
#endif
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  T* get() { return ptr_; }
  void put(const std::vector<T>& values) {
#if PF_KERNELS_ONLY_SIM
    host_ = values;
    host_.resize(count_);
    ptr_ = host_.data();
#else
    cudaMemcpy(ptr_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice);
#endif
  }
  std::vector<T> read() const {
#if PF_KERNELS_ONLY_SIM
    return host_;
#else
    std::vector<T> out(count_);
    cudaMemcpy(out.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost);
    return out;
#endif
  }

 private:
  size_t count_;
  T* ptr_ = nullptr;
#if PF_KERNELS_ONLY_SIM
  std::vector<T> host_;
#endif
};

}  // namespace pf::test
