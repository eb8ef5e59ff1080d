// A hardware description (hardware/NAME.json): peak matrix rates, the efficiencies that
// turn FLOPs into time, and the links within and across nodes. Each file says where its
// numbers come from.
#pragma once

#include <string>
#include <vector>

namespace pf::sim {

constexpr int kMaxDevicesPerNode = 64;  // a hardware file's, and advise's --gpus-per-node

struct LinkSpec {
  double bandwidth_Bps = 1e10;
  double latency_s = 1e-5;
  double transfer_s(double bytes) const { return latency_s + bytes / bandwidth_Bps; }
};

// The lowest efficiency a hardware file or an override may give: below a thousandth of the peak
// no device is meant, and a prediction would run to hundreds of digits.
constexpr double kMinEfficiency = 1e-3;

struct HardwareSpec {
  std::string name;
  std::string path;
  double peak_bf16_flops = 0;  // dense, per device
  double peak_fp8_flops = 0;   // the bf16 peak where the file gives no fp8 rate
  bool fp8_rate_given = false;
  double matmul_efficiency = 0.6;
  double attention_efficiency = 0.5;
  // Rows at which a GEMM runs at half its efficiency: one with m rows runs at m / (m + half)
  // of matmul_efficiency (a tile of rows is computed whole however few are used). An MoE
  // expert's GEMM has a chunk's rows x experts_per_token / experts: small chunks are dear.
  double matmul_half_rows = 0;
  int devices_per_node = 8;
  double memory_bytes = 0;  // per device; 0: not given (layouts are then not checked against it)
  bool cpu = false;         // "backend": "cpu": ranks of the cpu backend (whose --cp covers MLA too)
  LinkSpec intra_node, inter_node;
};

// NAME (a file hardware/NAME.json, looked up in $PIPEFILL_HARDWARE_DIR, then the source
// tree's hardware/) or a path to a JSON file. UserError when missing or malformed.
HardwareSpec load_hardware(const std::string& name_or_path);

// The warning of a study that keeps FP8 matmuls (--fp8 keep) on a file without their rate.
void warn_if_no_fp8_rate(const HardwareSpec& hw);

// The names load_hardware finds by name (the .json files of that directory), sorted.
std::vector<std::string> known_hardware();

}  // namespace pf::sim
