// Hardware description loading.
#include "sim/hardware.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
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
  if (!j.is_object()) throw UserError(path + ": not a JSON object");
  // A misspelt optional key would silently take its default, and a key this version no longer
  // reads would silently stop mattering: both are refused by name.
  static const char* const kKnown[] = {"name",          "peak_tflops", "matmul_efficiency", "attention_efficiency",
                                       "gpus_per_node", "memory_GB",   "intra_node",        "inter_node",
                                       "sources",       "backend",     "matmul_half_rows"};
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (key == "activation_bytes")
      throw UserError(
          path +
          ": \"activation_bytes\" is no longer read: what goes on the wire is pipefill's choice "
          "(float32, docs/choices.md); remove it, and use `simulate --wire-bytes 2` to model a bf16 sender");
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      std::string known;
      for (const char* k : kKnown) known += (known.empty() ? "" : ", ") + std::string(k);
      throw UserError(path + ": unknown key \"" + key + "\" (known: " + known + ")");
    }
  }
  // fp32 (the vector units' rate) is read by scripts/calibrate_paper.py, not by the simulator.
  if (j.contains("peak_tflops") && j["peak_tflops"].is_object())
    for (const auto& item : j["peak_tflops"].items())
      if (item.key() != "bf16" && item.key() != "fp8" && item.key() != "fp32")
        throw UserError(path + ": unknown key \"peak_tflops." + item.key() + "\" (known: bf16, fp8, fp32)");
  try {
    HardwareSpec h;
    h.path = path;
    h.name = j.at("name").get<std::string>();
    h.peak_bf16_flops = j.at("peak_tflops").at("bf16").get<double>() * 1e12;
    h.peak_fp8_flops = j.at("peak_tflops").value("fp8", j.at("peak_tflops").at("bf16").get<double>()) * 1e12;
    h.matmul_efficiency = j.at("matmul_efficiency").get<double>();
    h.attention_efficiency = j.at("attention_efficiency").get<double>();
    if (j.contains("gpus_per_node") && !j["gpus_per_node"].is_number_integer())
      throw UserError(path + ": gpus_per_node must be a whole number");
    h.devices_per_node = j.value("gpus_per_node", 8);
    // A device's "GB" as sold is a little under a GiB: nvidia-smi gives an 80 GB H100 81,559
    // MiB and a 141 GB H200 143,771 MiB, both 0.9957 of the GiB figure.
    h.memory_bytes = j.value("memory_GB", 0.0) * 0.9957 * static_cast<double>(1ull << 30);
    h.matmul_half_rows = j.value("matmul_half_rows", 0.0);
    const std::string backend = j.value("backend", std::string("cuda"));
    if (backend != "cuda" && backend != "cpu") throw UserError(path + ": \"backend\" must be cuda or cpu");
    h.cpu = backend == "cpu";
    for (auto [key, link] : {std::pair{"intra_node", &h.intra_node}, {"inter_node", &h.inter_node}}) {
      link->bandwidth_Bps = j.at(key).at("bandwidth_GBps").get<double>() * 1e9;
      link->latency_s = j.at(key).at("latency_us").get<double>() * 1e-6;
    }
    if (h.devices_per_node < 1 || !(h.memory_bytes >= 0) || !(h.matmul_half_rows >= 0))
      throw UserError(path + ": gpus_per_node must be at least 1, memory_GB and matmul_half_rows not negative");
    if (!(h.peak_bf16_flops > 0) || !(h.peak_fp8_flops > 0)) throw UserError(path + ": peak rates must be positive");
    if (!(h.matmul_efficiency > 0 && h.matmul_efficiency <= 1) ||
        !(h.attention_efficiency > 0 && h.attention_efficiency <= 1))
      throw UserError(path + ": efficiencies must lie in (0, 1]");
    for (const LinkSpec* link : {&h.intra_node, &h.inter_node})
      if (!(link->bandwidth_Bps > 0) || !(link->latency_s >= 0))
        throw UserError(path + ": a link's bandwidth_GBps must be positive and its latency_us not negative");
    return h;
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": " + e.what());
  }
}

}  // namespace pf::sim
