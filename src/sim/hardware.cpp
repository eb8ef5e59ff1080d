// Hardware description loading.
#include "sim/hardware.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/file_checks.hpp"

namespace pf::sim {

namespace {

std::string hardware_dir() {
  const char* dir = std::getenv("PIPEFILL_HARDWARE_DIR");
  return dir ? dir : PIPEFILL_HARDWARE_DIR;
}

}  // namespace

void warn_if_no_fp8_rate(const HardwareSpec& hw) {
  if (!hw.fp8_rate_given)
    std::fprintf(stderr, "warning: %s gives no peak_tflops.fp8: --fp8 keep models FP8 matmuls at the bf16 rate\n",
                 hw.path.c_str());
}

std::vector<std::string> known_hardware() {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(hardware_dir(), ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

HardwareSpec load_hardware(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::string path = name_or_path;
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".json") == std::string::npos)
    path = (fs::path(hardware_dir()) / (name_or_path + ".json")).string();
  io::require_regular_if_present(path, "hardware description");  // a directory would read as an I/O fault
  std::ifstream in(path);
  if (!in) {
    std::string known;
    for (const std::string& name : known_hardware()) known += (known.empty() ? "" : ", ") + name;
    throw UserError("no hardware description " + path + " (known: " + (known.empty() ? "none" : known) + " in " +
                    hardware_dir() + ")");
  }
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
  for (const char* link : {"intra_node", "inter_node"})
    if (j.contains(link) && j[link].is_object())
      for (const auto& item : j[link].items())
        if (item.key() != "bandwidth_GBps" && item.key() != "latency_us")
          throw UserError(path + ": unknown key \"" + link + "." + item.key() +
                          "\" (known: bandwidth_GBps, latency_us)");
  // Each number within what a device or link of this century can be (so no time is inf, NaN or
  // 200 digits long), its name in the error.
  auto number = [&](const nlohmann::json& value, const std::string& key, double low, double high, bool low_open) {
    if (!value.is_number()) throw UserError(path + ": " + key + " must be a number");
    const double x = value.get<double>();
    if (!(low_open ? x > low : x >= low) || !(x <= high))
      throw UserError(path + ": " + key + " " + value.dump() + " lies outside " + (low_open ? "(" : "[") +
                      nlohmann::json(low).dump() + ", " + nlohmann::json(high).dump() + "]");
    return x;
  };
  // A required key, by its dotted name in the error.
  auto field = [&](const nlohmann::json& object, const char* key, const std::string& name) -> const nlohmann::json& {
    if (!object.is_object()) throw UserError(path + ": " + name.substr(0, name.rfind('.')) + " must be an object");
    if (!object.contains(key)) throw UserError(path + ": \"" + name + "\" is missing");
    return object[key];
  };
  try {
    HardwareSpec h;
    h.path = path;
    if (!j.contains("name") || !j["name"].is_string()) throw UserError(path + ": \"name\" must be a string");
    h.name = j["name"].get<std::string>();
    const nlohmann::json& peak = field(j, "peak_tflops", "peak_tflops");
    const nlohmann::json& bf16 = field(peak, "bf16", "peak_tflops.bf16");
    h.peak_bf16_flops = number(bf16, "peak_tflops.bf16", 1e-3, 1e6, false) * 1e12;
    h.peak_fp8_flops = number(peak.contains("fp8") ? peak["fp8"] : bf16, "peak_tflops.fp8", 1e-3, 1e6, false) * 1e12;
    h.fp8_rate_given = peak.contains("fp8");
    h.matmul_efficiency =
        number(field(j, "matmul_efficiency", "matmul_efficiency"), "matmul_efficiency", kMinEfficiency, 1, false);
    h.attention_efficiency = number(field(j, "attention_efficiency", "attention_efficiency"), "attention_efficiency",
                                    kMinEfficiency, 1, false);
    if (j.contains("gpus_per_node") && !j["gpus_per_node"].is_number_integer())
      throw UserError(path + ": gpus_per_node must be a whole number");
    h.devices_per_node = static_cast<int>(
        number(j.value("gpus_per_node", nlohmann::json(8)), "gpus_per_node", 1, kMaxDevicesPerNode, false));
    // A device's "GB" as sold is a little under a GiB: nvidia-smi gives an 80 GB H100 81,559
    // MiB and a 141 GB H200 143,771 MiB, both 0.9957 of the GiB figure.
    // Required: without it no layout could be checked against the device's memory.
    if (!j.contains("memory_GB"))
      throw UserError(path + ": \"memory_GB\" is missing (each device's memory, as sold: 80 for an H100)");
    h.memory_bytes = number(j["memory_GB"], "memory_GB", 1e-3, 1e6, false) * 0.9957 * static_cast<double>(1ull << 30);
    h.matmul_half_rows = number(j.value("matmul_half_rows", nlohmann::json(0.0)), "matmul_half_rows", 0, 1e6, false);
    if (j.contains("backend") && !j["backend"].is_string()) throw UserError(path + ": \"backend\" must be cuda or cpu");
    const std::string backend = j.value("backend", std::string("cuda"));
    if (backend != "cuda" && backend != "cpu") throw UserError(path + ": \"backend\" must be cuda or cpu");
    h.cpu = backend == "cpu";
    for (auto [key, link] : {std::pair{"intra_node", &h.intra_node}, {"inter_node", &h.inter_node}}) {
      const nlohmann::json& spec = field(j, key, key);
      const std::string bandwidth = std::string(key) + ".bandwidth_GBps", latency = std::string(key) + ".latency_us";
      link->bandwidth_Bps = number(field(spec, "bandwidth_GBps", bandwidth), bandwidth, 1e-3, 1e6, false) * 1e9;
      link->latency_s = number(field(spec, "latency_us", latency), latency, 0, 1e6, false) * 1e-6;
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
