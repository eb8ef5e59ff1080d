// Command-line options of every subcommand. The defaults are the member initializers below;
// everything else about an option (flag, help, checks, echo and identity keys) is its one
// descriptor in options.cpp, from which parsing, --help and the echoed JSON are generated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/backend_kind.hpp"
#include "compute/hidden_states.hpp"
#include "dist/activation_wire.hpp"
#include "io/safetensors.hpp"
#include "io/token_rows.hpp"
#include "model/weights.hpp"
#include "sched/chunking_options.hpp"

namespace pf::cli {

// Where the model lives and how it is split over the ranks (run and profile share these).
struct PlacementOptions {
  std::string model;  // directory, or synthetic:PRESET
  uint64_t seed = 0;  // synthetic weights
  int pp = 1;
  int tp = 1;
  std::string layer_partition;                                   // empty: SGLang default
  model::ExpertSplit expert_split = model::ExpertSplit::kWidth;  // MoE: how a TP group splits the experts
  int64_t kv_memory_mb = 8192;                                   // KV pool budget per rank
  int threads = 0;                                               // cpu: threads a rank; 0: its share of the node's CPUs
  compute::BackendKind backend = compute::BackendKind::kCpu;
  io::Dtype dtype = io::Dtype::kF32;  // cpu: --dtype (the cuda backend is bf16 always)
  std::string transport = "nccl";     // cuda: nccl | mpi (staged through host memory)
  double kv_memory_fraction = 0.85;   // cuda: of the device memory left after weights + workspace
};

constexpr int kMaxTopK = 1024;  // --top-k: candidates stored per token
// run and simulate: receives posted ahead / sends in flight per rank
constexpr int kDefaultRingDepth = 4;

struct RunOptions {
  PlacementOptions placement;
  sched::ChunkingOptions chunking;  // --chunk-size is chunking.initial_chunk
  std::string input;
  std::string output;
  std::string trace;  // Chrome trace path, empty: none
  // Context parallelism: CP ranks a stage (world = pp x cp x tp) and how they attend
  // (sched/context_split.hpp).
  int cp = 1;
  std::string cp_attention = "auto";  // auto | pass-kv | pass-q
  int ring_depth = kDefaultRingDepth;
  bool quiet = false;
  double watchdog_timeout_s = 1800;  // a wait this long means a peer died or hung: abort the job
  double progress_interval_s = 10;   // 0: no progress lines
  bool allow_long_prompts = false;   // prompts beyond max_position_embeddings
  bool resume = false;               // continue OUTPUT.partial, skipping prompts it holds
  bool overwrite = false;            // replace an existing OUTPUT (refused without it: runs cost hours)
  compute::HiddenStatesKind hidden_states = compute::HiddenStatesKind::kNone;  // /hidden_states per prompt
  bool logprobs = false;                 // /token_logprobs per token, /perplexity and /nll_sum per prompt
  int top_k = 0;                         // /topk_ids and /topk_logprobs [T, top_k]; 0: none
  std::string save_kv;                   // directory of the KV export (kvcache/kv_export.hpp); empty: none
  io::Dtype kv_dtype = io::Dtype::kF32;  // the export's files: F32 or BF16
  std::string token_ids;                 // --token-ids FILE; empty: none
  std::vector<int32_t> token_set;        // its ids, read when options are parsed (io/token_ids_file.hpp)
  // Outputs that need every position's scores on the last stage.
  io::TokenRowShape token_row_shape() const { return {logprobs, top_k, static_cast<int>(token_set.size())}; }
  bool token_rows_wanted() const { return token_row_shape().any(); }
  std::string kv_store;               // directory of the KV store (kvcache/kv_store.hpp); empty: none
  std::string kv_store_limit;         // --kv-store-limit as given; empty: none
  uint64_t kv_store_limit_bytes = 0;  // parsed; 0: no limit
  bool no_prefix_cache = false;       // compute every prompt in full, in input order (sched/prefix_sharing.hpp)
  // Checkpoints inside a prompt (pipeline/checkpoint_run.hpp): --checkpoint-every as given
  // ("": only when stopped, "auto", or a duration), parsed into the interval (0: none, -1:
  // auto), and --mtbf for auto.
  std::string checkpoint_every;
  double checkpoint_interval_s = 0;
  std::string mtbf = "24h";
  double mtbf_s = 24 * 3600;
};
// The echoed configuration: every option with a key (rank 0's command-line check, the output's
// attributes).
nlohmann::json to_json(const RunOptions& options);
// The options that are part of the run identity, and of the placement identity (the keys the
// options do not decide are added by run_record.hpp).
nlohmann::json run_identity_options(const RunOptions& options);
nlohmann::json placement_identity_options(const PlacementOptions& options);

struct ProfileOptions {
  PlacementOptions placement;
  int chunk_size = sched::kDefaultChunkSize;
  int page_size = sched::kDefaultPageSize;
  int points = 16;
  int64_t max_prefix = 0;  // longest prefix profiled; 0: 4 x chunk size
  bool logprobs = false;   // profile the layout of runs that score every token (--logprobs, --top-k)
  std::string out;
};

struct SimulateOptions {
  std::string model_config;        // config.json path, or synthetic:PRESET
  std::string hardware;            // hardware/NAME.json
  std::string fp8 = "dequantize";  // an FP8 checkpoint: dequantize (what run does) | keep (FP8 matmuls)
  int pp = 1;
  int tp = 1;
  int cp = 1;                         // context parallelism: CP ranks a stage (sim/context_parallel.hpp)
  std::string cp_attention = "auto";  // auto | pass-kv | pass-q
  std::string layer_partition;
  sched::ChunkingOptions chunking;  // --cost-model: a profile replaces the analytic stage costs
  std::vector<int64_t> lengths;
  // Tokens of each prompt's prefix already in the KV cache (prefix reuse): one per --length,
  // or one for all, or none (nothing cached). Filled to one per prompt when parsed.
  std::vector<int64_t> cached_tokens;
  int ring_depth = kDefaultRingDepth;
  double matmul_efficiency = 0;  // 0: the hardware file's
  double attention_efficiency = 0;
  static constexpr double kFromHardware = -1;
  double matmul_half_rows = kFromHardware;      // or the hardware file's
  int wire_bytes = dist::kActivationWireBytes;  // 2: model a bf16 sender (SGLang)
  bool logprobs = false;                        // model per-token scores (SimSetup::scores)
  std::string timeline;                         // write the timeline format to this HDF5 file
  bool json = false;
};

struct AdviseOptions {
  std::string model_config;  // config.json path, or synthetic:PRESET
  std::string hardware;      // hardware/NAME.json
  int nodes = 1;
  static constexpr int kHardwareFile = -1;
  int gpus_per_node = kHardwareFile;  // or the hardware file's gpus_per_node
  std::vector<int64_t> lengths;
  std::string input;               // or the prompt lengths of an HDF5 input
  std::string cost_model;          // a `pipefill profile`: the rates of the machine it measured
  int chunk_size = 0;              // 0: searched; else fixed chunks of this size only
  std::string fp8 = "dequantize";  // dequantize (what the cuda backend does) | keep (FP8 matmuls)
  int wire_bytes = dist::kActivationWireBytes;
  bool logprobs = false;  // model per-token scores (SimSetup::scores); the job line asks for them
  int ring_depth = kDefaultRingDepth;
  int page_size = sched::kDefaultPageSize;
  int top = 12;
  std::string model;  // the model directory the printed job line names
  std::string plot;   // PNG: TTFT against GPUs (scripts/plot_advice.py)
  bool json = false;
};

struct MakeModelOptions {
  std::string preset;
  std::string out;
  uint64_t seed = 0;
  std::string dtype = "f32";
  int64_t max_shard_mb = 4096;
  bool overwrite = false;
};

struct MakePromptsOptions {
  std::string out;
  int num = 0;
  int64_t min_len = 0;
  int64_t max_len = 0;
  int vocab = 0;
  uint64_t seed = 0;
};

struct PlanOptions {
  std::vector<int64_t> lengths;
  sched::ChunkingOptions chunking;
  std::vector<double> coefficients;  // a,b[,c[,gamma]] instead of a cost model file
  int pp = 1;                        // chunking.stages
  bool json = false;
};

// Each parser throws UserError for unknown flags, bad values and missing required options.
// They return false when --help was asked for (the help text is already printed).
// UserError when a chunk's token rows (--logprobs, --top-k, a --token-ids set of `set_size`)
// would make a message of more than 2^30 floats.
void check_token_rows_fit(const RunOptions& options, int set_size);
bool parse_run(int argc, char** argv, RunOptions& options);
bool parse_profile(int argc, char** argv, ProfileOptions& options);
bool parse_simulate(int argc, char** argv, SimulateOptions& options);
bool parse_advise(int argc, char** argv, AdviseOptions& options);
bool parse_make_model(int argc, char** argv, MakeModelOptions& options);
bool parse_make_prompts(int argc, char** argv, MakePromptsOptions& options);
bool parse_plan(int argc, char** argv, PlanOptions& options);

std::string usage();  // the top-level help: subcommands and what they do

}  // namespace pf::cli
