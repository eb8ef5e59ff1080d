// The CUDA runtime calls pipefill makes, on the simulated device (sim_device.hpp), with the
// runtime's documented semantics: asynchronous calls queue on their stream; a synchronous
// cudaMemcpy is ordered on the legacy default stream (which, like a GPU's, does not order
// non-blocking streams); cudaFree and cudaFreeHost wait for the whole device; an event
// query or synchronize is the host waiting, so it runs what the event covers. One device.
// The functions are the toolkit header's declarations (C linkage), defined here instead of
// by libcudart, so the product's sources build unchanged against this library.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime_sim/sim_device.hpp"

using pf::sim::SimDevice;
using pf::sim::SimEvent;

namespace {

thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t fail(cudaError_t error) {
  t_last_error = error;
  return error;
}

std::unique_lock<std::recursive_mutex> hold() {
  return std::unique_lock<std::recursive_mutex>(SimDevice::get().lock());
}

SimEvent* event_of(cudaEvent_t event) {
  return reinterpret_cast<SimEvent*>(event);
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "pipefill host simulator", sizeof(prop->name) - 1);
  prop->totalGlobalMem = SimDevice::get().capacity();
  prop->major = 9;  // the kernels' target, sm_90
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = 227 << 10;  // sm_90's
  // A smaller GPU's limit (sm_86: 99), for the backend's set-up check (shared_memory_limit.sh).
  if (const char* kib = std::getenv("PIPEFILL_SIM_SHARED_OPTIN_KB"))
    prop->sharedMemPerBlockOptin = std::atoi(kib) << 10;
  // Each process its own device (the ranks of a test all run on one host): NCCL's one GPU a rank.
  const pid_t pid = getpid();
  std::memcpy(prop->uuid.bytes, &pid, sizeof pid);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  auto lock = hold();
  *total = SimDevice::get().capacity();
  *free_bytes = *total - SimDevice::get().allocated();
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  auto lock = hold();
  *pointer = SimDevice::get().allocate(bytes);
  return *pointer ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* pointer) {
  if (!pointer) return cudaSuccess;
  auto lock = hold();
  SimDevice::get().run_all();  // cudaFree synchronizes the device
  return SimDevice::get().release(pointer) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaMallocHost(void** pointer, size_t bytes) {
  *pointer = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  return *pointer ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* pointer) {
  auto lock = hold();
  SimDevice::get().run_all();  // as cudaFree
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  auto lock = hold();
  SimDevice& device = SimDevice::get();
  device.enqueue(device.stream(stream), [=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                              size_t height, cudaMemcpyKind, cudaStream_t stream) {
  auto lock = hold();
  SimDevice& device = SimDevice::get();
  device.enqueue(device.stream(stream), [=] {
    for (size_t row = 0; row < height; ++row)
      std::memmove(static_cast<char*>(dst) + row * dst_pitch, static_cast<const char*>(src) + row * src_pitch, width);
  });
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  auto lock = hold();
  SimDevice& device = SimDevice::get();
  cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  device.run_stream(device.stream(nullptr));  // returns when the copy (and the default stream before it) is done
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  auto lock = hold();
  SimDevice& device = SimDevice::get();
  device.enqueue(device.stream(stream), [=] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  auto lock = hold();
  SimDevice& device = SimDevice::get();
  cudaMemsetAsync(dst, value, bytes, nullptr);
  device.run_stream(device.stream(nullptr));  // synchronous with the host, as cudaMemcpy
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  // Only non-blocking streams: the legacy default stream's implicit ordering with blocking
  // streams is not simulated, so such a stream is refused rather than misrepresented.
  if (!(flags & cudaStreamNonBlocking)) return fail(cudaErrorNotSupported);
  auto lock = hold();
  *stream = reinterpret_cast<cudaStream_t>(SimDevice::get().create_stream());
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto lock = hold();
  SimDevice::get().destroy_stream(SimDevice::get().stream(stream));
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  auto lock = hold();
  SimDevice::get().run_stream(SimDevice::get().stream(stream));
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  auto lock = hold();
  SimDevice::get().enqueue_wait(SimDevice::get().stream(stream), *event_of(event));
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  auto lock = hold();
  SimDevice::get().run_all();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  auto* created = new SimEvent;
  created->timing = !(flags & cudaEventDisableTiming);
  *event = reinterpret_cast<cudaEvent_t>(created);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event_of(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto lock = hold();
  SimDevice::get().record(event_of(event), SimDevice::get().stream(stream));
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  auto lock = hold();
  SimDevice::get().run_event(*event_of(event));  // the host asks: the device gets there
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return cudaEventQuery(event);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  auto lock = hold();
  const SimEvent &a = *event_of(start), &b = *event_of(end);
  if (!a.timing || !b.timing) return fail(cudaErrorInvalidResourceHandle);
  if (!a.stream || !b.stream || !SimDevice::get().event_complete(a) || !SimDevice::get().event_complete(b))
    return fail(cudaErrorNotReady);
  *ms = static_cast<float>(b.time_ms - a.time_ms);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t error = t_last_error;
  t_last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() {
  return t_last_error;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory (simulated device)";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorNotSupported:
      return "operation not supported (by the host simulator)";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    default:
      return "unknown error (simulated device)";
  }
}

const char* cudaGetErrorName(cudaError_t error) {
  return cudaGetErrorString(error);
}

}  // extern "C"
