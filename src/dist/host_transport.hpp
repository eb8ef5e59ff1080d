// The MPI transport of host buffers (cpu and emulate backends). See transport.hpp.
#pragma once

#include <map>
#include <vector>

#include "dist/p2p.hpp"
#include "dist/transport.hpp"

namespace pf::dist {

class HostTransport final : public Transport {
 public:
  HostTransport(size_t floats_per_slot, int prev_rank, int next_rank, MPI_Comm comm);

 private:
  friend class StagedTransport;  // stages device slots through these host slots, one for one

  int acquire_slot() override;
  void release_slot(int slot) override { free_.push_back(slot); }
  float* slot_data(int slot) override { return buffers_[slot].data(); }
  void start_recv(int slot, int floats, int tag) override;
  bool wait_recv(int slot, WaitInterrupt* interrupt) override;
  void cancel_recv(int slot) override;
  void start_send(int slot, int floats, int tag) override;
  bool send_done(int slot) override { return sends_.at(slot).test(); }
  void finish_send(int slot) override;

  size_t floats_per_slot_;
  int prev_, next_;
  MPI_Comm comm_;
  std::vector<Buffer> buffers_;  // a slot's buffer, while no receive or send holds it
  std::vector<int> free_;
  std::map<int, PostedRecv> recvs_;
  std::map<int, PendingSend> sends_;
};

}  // namespace pf::dist
