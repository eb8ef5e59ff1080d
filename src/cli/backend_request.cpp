// The backend request builder (see backend_request.hpp).
#include "cli/backend_request.hpp"

namespace pf::cli {

pipeline::BackendRequest backend_request(const PlacementOptions& p, int page_size, int max_chunk_tokens) {
  pipeline::BackendRequest request;
  request.backend = p.backend;
  request.page_size = page_size;
  request.kv_memory_mb = p.kv_memory_mb;
  request.cpu_threads = p.threads;
  request.cpu_dtype = p.dtype;
  request.transport = p.transport;
  request.kv_memory_fraction = p.kv_memory_fraction;
  request.max_chunk_tokens = max_chunk_tokens;
  return request;
}

}  // namespace pf::cli
