// Every (backend, product option) pair through the option parser: a product the backend's
// table declares (compute/backend_capabilities.hpp) is accepted, any other is one UserError
// naming the flag, never something that reaches a StageCompute method the backend leaves
// unimplemented. And the model-dependent refusals asked at set-up.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "compute/backend_capabilities.hpp"
#include "errors.hpp"
#include "model/presets.hpp"

using namespace pf;

namespace {

// `run` for `backend` with `flags`; "" when accepted, else the UserError's text.
std::string parse_error(compute::BackendKind backend, const std::string& flags) {
  std::vector<std::string> args = {
      "run", "--model", "m", "--input", "in.h5", "--output", "out.h5", "--backend", compute::backend_name(backend)};
  if (backend == compute::BackendKind::kEmulate) args.insert(args.end(), {"--cost-model", "analytic:h20"});
  std::istringstream words(flags);
  for (std::string word; words >> word;) args.push_back(word);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  cli::RunOptions options;
  try {
    cli::parse_run(static_cast<int>(argv.size()), argv.data(), options);
    return "";
  } catch (const UserError& e) {
    return e.what();
  }
}

struct ProductFlag {
  compute::Product product;
  const char* flags;
  const char* named;  // what the error line must start with
};

const ProductFlag kProductFlags[] = {
    {compute::Product::kHiddenStates, "--hidden-states last", "--hidden-states"},
    {compute::Product::kHiddenStates, "--hidden-states mean", "--hidden-states"},
    {compute::Product::kTokenScores, "--logprobs", "--logprobs"},
    {compute::Product::kTokenScores, "--top-k 3", "--top-k"},
    {compute::Product::kKvExport, "--save-kv kv", "--save-kv"},
    {compute::Product::kKvExport, "--save-kv kv --kv-dtype bf16", "--save-kv"},
    {compute::Product::kKvStore, "--kv-store store", "--kv-store"},
    {compute::Product::kBf16Choice, "--dtype bf16", "--dtype bf16"},
};

std::vector<compute::BackendKind> parseable_backends() {
  std::vector<compute::BackendKind> kinds = {compute::BackendKind::kCpu, compute::BackendKind::kEmulate};
#ifdef PIPEFILL_HAVE_CUDA
  kinds.push_back(compute::BackendKind::kCuda);  // --backend cuda exists in this build
#endif
  return kinds;
}

}  // namespace

TEST(BackendCapabilities, EveryProductOptionIsServedOrRefusedWhenParsed) {
  for (compute::BackendKind backend : parseable_backends())
    for (const ProductFlag& p : kProductFlags) {
      const std::string error = parse_error(backend, p.flags);
      const std::string pair = std::string(compute::backend_name(backend)) + " with " + p.flags;
      if (compute::supports(backend, p.product)) {
        EXPECT_EQ(error, "") << pair;
      } else {
        EXPECT_EQ(error.rfind(p.named, 0), 0u) << pair << ": " << error;
        EXPECT_EQ(error, compute::refusal(backend, p.product, p.named)) << pair;
      }
    }
}

TEST(BackendCapabilities, TheTableIsWhatTheBackendsImplement) {
  // The cpu and cuda backends override every optional StageCompute method; the emulator none.
  // cuda's precision is bf16 always: it offers no --dtype.
  for (compute::Product product : compute::kProducts) {
    EXPECT_TRUE(compute::supports(compute::BackendKind::kCpu, product));
    EXPECT_EQ(compute::supports(compute::BackendKind::kCuda, product), product != compute::Product::kBf16Choice);
    EXPECT_FALSE(compute::supports(compute::BackendKind::kEmulate, product));
    EXPECT_EQ(compute::refusal(compute::BackendKind::kCpu, product, "--flag"), "");
    EXPECT_NE(compute::refusal(compute::BackendKind::kEmulate, product, "--flag"), "");
  }
}

TEST(BackendCapabilities, Bf16OnTheCpuCoversDenseModels) {
  using compute::BackendKind;
  const model::ModelShape dense = model::shape_from_config(model::preset_config("tiny")),
                          moe = model::shape_from_config(model::preset_config("tiny-moe")),
                          mla = model::shape_from_config(model::preset_config("tiny-mla"));
  EXPECT_EQ(compute::refusal_for_model(BackendKind::kCpu, true, dense), "");
  EXPECT_NE(compute::refusal_for_model(BackendKind::kCpu, true, moe).find("experts"), std::string::npos);
  EXPECT_NE(compute::refusal_for_model(BackendKind::kCpu, true, mla), "");   // (tiny-mla has experts too)
  EXPECT_EQ(compute::refusal_for_model(BackendKind::kCpu, false, moe), "");  // float32: every model
  EXPECT_EQ(compute::refusal_for_model(BackendKind::kCuda, true, moe), "");  // cuda is bf16 for every model
}
