// A hardware description (hardware/NAME.json): peak matrix rates, the efficiencies that
// turn FLOPs into time, and the links within and across nodes. Each file says where its
// numbers come from.
#pragma once

#include <string>

namespace pf::sim {

struct LinkSpec {
  double bandwidth_Bps = 1e10;
  double latency_s = 1e-5;
  double transfer_s(double bytes) const { return latency_s + bytes / bandwidth_Bps; }
};

struct HardwareSpec {
  std::string name;
  std::string path;
  double peak_bf16_flops = 0;  // dense, per device
  double peak_fp8_flops = 0;
  double matmul_efficiency = 0.6;
  double attention_efficiency = 0.5;
  int devices_per_node = 8;
  LinkSpec intra_node, inter_node;
};

// NAME (a file hardware/NAME.json, looked up in $PIPEFILL_HARDWARE_DIR, then the source
// tree's hardware/) or a path to a JSON file. UserError when missing or malformed.
HardwareSpec load_hardware(const std::string& name_or_path);

}  // namespace pf::sim
