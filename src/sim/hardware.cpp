// Hardware description loading.
#include "sim/hardware.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "errors.hpp"

namespace pf::sim {

HardwareSpec load_hardware(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::string path = name_or_path;
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".json") == std::string::npos) {
    const char* dir = std::getenv("PIPEFILL_HARDWARE_DIR");
    path = (fs::path(dir ? dir : PIPEFILL_HARDWARE_DIR) / (name_or_path + ".json")).string();
  }
  std::ifstream in(path);
  if (!in) throw UserError("no hardware description " + path + " (known: h20, h100, h200, cpu in hardware/)");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) throw UserError(path + ": malformed JSON");
  try {
    HardwareSpec h;
    h.path = path;
    h.name = j.at("name").get<std::string>();
    h.peak_bf16_flops = j.at("peak_tflops").at("bf16").get<double>() * 1e12;
    h.peak_fp8_flops = j.at("peak_tflops").value("fp8", j.at("peak_tflops").at("bf16").get<double>()) * 1e12;
    h.matmul_efficiency = j.at("matmul_efficiency").get<double>();
    h.attention_efficiency = j.at("attention_efficiency").get<double>();
    h.devices_per_node = j.value("gpus_per_node", 8);
    for (auto [key, link] : {std::pair{"intra_node", &h.intra_node}, {"inter_node", &h.inter_node}}) {
      link->bandwidth_Bps = j.at(key).at("bandwidth_GBps").get<double>() * 1e9;
      link->latency_s = j.at(key).at("latency_us").get<double>() * 1e-6;
    }
    if (h.peak_bf16_flops <= 0 || h.matmul_efficiency <= 0 || h.attention_efficiency <= 0)
      throw UserError(path + ": peak rates and efficiencies must be positive");
    return h;
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": " + e.what());
  }
}

}  // namespace pf::sim
