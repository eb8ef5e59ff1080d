// The output's datasets (see output_format.hpp). The only place their names are spelled.
#include "io/output_format.hpp"

#include <stdexcept>

namespace pf::io {
namespace {

using D = Dataset;
using E = Element;
using R = Rows;
using W = Width;
using P = Presence;
using I = Initial;

const std::array<DatasetSpec, kNumDatasets> kDatasets = {{
    {D::kLogits, "logits", E::kFloat32, R::kPrompts, W::kVocab, P::kWithLogits, I::kNone, false,
     "logits of each prompt's last position, input order"},
    {D::kHiddenStates, "hidden_states", E::kFloat32, R::kPrompts, W::kHidden, P::kWithHiddenStates, I::kNone, false,
     "each prompt's final-norm output (the model's last RMSNorm applied, what Hugging Face calls "
     "`last_hidden_state`) at its last position (`last`), or its mean over all the prompt's positions (`mean`); "
     "see below"},
    {D::kTokenLogprobs, "token_logprobs", E::kFloat32, R::kTokens, W::kNone, P::kWithLogprobs, I::kNone, false,
     "aligned with the input's `/tokens`; entry j is log p(tokens[j] \\| the prompt's tokens before j), natural "
     "log; NaN at each prompt's first token (nothing precedes it) and before its `/score_start`; see below"},
    {D::kNllSum, "nll_sum", E::kFloat64, R::kPrompts, W::kNone, P::kWithLogprobs, I::kNone, false,
     "minus the sum of the prompt's `/token_logprobs` over its scored positions, `/score_start` .. length − 1 "
     "(float64, in position order): minus the log-likelihood of a continuation"},
    {D::kPerplexity, "perplexity", E::kFloat64, R::kPrompts, W::kNone, P::kWithLogprobs, I::kNone, false,
     "exp(`/nll_sum` / (length − `/score_start`)); NaN for a one-token prompt"},
    {D::kScoreStart, "score_start", E::kInt64, R::kPrompts, W::kNone, P::kWithTokenRows, I::kFromInput, true,
     "the first position the prompt's token scores cover: the input's `/score_start`, 1 where it has none. Before "
     "it `/token_logprobs` is NaN, and `/topk_*` and `/token_set_logprobs` rows before `score_start − 1` are NaN "
     "and -1 (never computed)"},
    {D::kIsGreedy, "is_greedy", E::kUint8, R::kPrompts, W::kNone, P::kWithGreedy, I::kZero, true,
     "1 when every scored token was the model's most likely one (`/topk_ids[j − 1, 0] == tokens[j]` for each "
     "scored position j; ties go to the smaller id, as `torch.argmax`), else 0; 0 until done"},
    {D::kTopkIds, "topk_ids", E::kInt32, R::kTokens, W::kTopK, P::kWithTopK, I::kNone, false,
     "row j holds the K most likely tokens *after* tokens[..j] (the prediction made at position j), most likely "
     "first, ties to the smaller id; -1 in rows before `/score_start` − 1 (never computed)"},
    {D::kTopkLogprobs, "topk_logprobs", E::kFloat32, R::kTokens, W::kTopK, P::kWithTopK, I::kNone, false,
     "their log-probs, descending; NaN where the id is -1"},
    {D::kTokenSetIds, "token_set_ids", E::kInt32, R::kTokenSet, W::kNone, P::kWithTokenSet, I::kFromInput, false,
     "the set's token ids, in the file's order: the columns of `/token_set_logprobs`"},
    {D::kTokenSetLogprobs, "token_set_logprobs", E::kFloat32, R::kTokens, W::kTokenSet, P::kWithTokenSet, I::kNone,
     false,
     "row j, column i: log p(`/token_set_ids[i]` \\| tokens[..j]), the prediction made at position j as in "
     "`/topk_*` (the full vocabulary's log-softmax, not renormalized over the set); NaN in rows before "
     "`/score_start` − 1"},
    {D::kCompleted, "completed", E::kUint8, R::kPrompts, W::kNone, P::kAlways, I::kZero, false,
     "1 once the prompt's row, TTFT and checksum are written and flushed; a finished file is all ones"},
    {D::kRowChecksum, "row_checksum", E::kUint64, R::kPrompts, W::kNone, P::kAlways, I::kZero, false,
     "FNV-1a of the prompt's `/logits` row bytes, then its `/hidden_states` row bytes (when stored), then (with "
     "`--logprobs`, `--top-k` or `--token-ids`) the 64-bit FNV-1a of its `/token_logprobs` slice, of its "
     "`/topk_ids` slice and of its `/topk_logprobs` slice (each 0xcbf29ce484222325, FNV's empty hash, when not "
     "stored), its `/nll_sum` and its `/perplexity` (0 when not stored), its `/is_greedy` byte (only when stored), "
     "the FNV-1a of its `/token_set_logprobs` slice (only when stored), then its `/ttft_s` bytes (all "
     "little-endian); 0 until done"},
    {D::kTtft, "ttft_s", E::kFloat64, R::kPrompts, W::kNone, P::kAlways, I::kNaN, false,
     "seconds from the run's start (t = 0 on rank 0, after set-up) until the last stage had the prompt's logits "
     "gathered; NaN until done. A resumed prompt's value is relative to the start of the run that computed it"},
    {D::kReusedTokens, "reused_tokens", E::kInt64, R::kPrompts, W::kNone, P::kAlways, I::kMinusOne, true,
     "tokens at the start of the prompt that this run did not compute but took from an earlier prompt of the "
     "batch with the same tokens (prefix reuse, on unless `--no-prefix-cache`; see below); 0 for a prompt computed "
     "in full, -1 until done. Not in the checksum: reuse changes no result beyond float32 rounding"},
    {D::kRestoredTokens, "restored_tokens", E::kInt64, R::kPrompts, W::kNone, P::kAlways, I::kMinusOne, true,
     "tokens at the start of the prompt that this run restored from a checkpoint of an interrupted run "
     "(`--resume`; see docs/checkpoints.md) instead of computing; 0 for a prompt computed in one run, -1 until "
     "done. Not in the checksum: a restored prompt's results are those of an uninterrupted run"},
    {D::kIds, "ids", E::kString, R::kPrompts, W::kNone, P::kWithIds, I::kAtFinish, false,
     "each prompt's id, copied from the input's `/ids` (variable-length UTF-8 strings), written when every prompt "
     "is done"},
    {D::kTimeline, "timeline", E::kCompound, R::kEvents, W::kNone, P::kAlways, I::kAtFinish, false,
     "one record per event of every rank, written when every prompt is done; see below"},
}};

const char* presence_note(Presence presence) {
  switch (presence) {
    case P::kAlways:
      return "";
    case P::kWithLogits:
      return "absent with `--backend emulate` (it computes none): ";
    case P::kWithHiddenStates:
      return "only with `--hidden-states last\\|mean`: ";
    case P::kWithLogprobs:
      return "only with `--logprobs`: ";
    case P::kWithTopK:
      return "only with `--top-k K`: ";
    case P::kWithTokenSet:
      return "only with `--token-ids FILE`: ";
    case P::kWithTokenRows:
      return "only with `--logprobs`, `--top-k` or `--token-ids`: ";
    case P::kWithGreedy:
      return "only with `--logprobs` and `--top-k K`: ";
    case P::kWithIds:
      return "only when the input has `/ids`: ";
  }
  return "";
}

const char* element_name(Element element) {
  switch (element) {
    case E::kFloat32:
      return "float32";
    case E::kFloat64:
      return "float64";
    case E::kInt32:
      return "int32";
    case E::kInt64:
      return "int64";
    case E::kUint8:
      return "uint8";
    case E::kUint64:
      return "uint64";
    case E::kCompound:
      return "compound";
    case E::kString:
      return "UTF-8 string";
  }
  return "";
}

std::string shape_text(const DatasetSpec& spec) {
  std::string shape = spec.rows == R::kPrompts    ? "n"
                      : spec.rows == R::kTokens   ? "T"
                      : spec.rows == R::kTokenSet ? "S"
                                                  : "events";
  switch (spec.width) {
    case W::kNone:
      break;
    case W::kVocab:
      shape += ", vocab";
      break;
    case W::kHidden:
      shape += ", hidden";
      break;
    case W::kTopK:
      shape += ", K";
      break;
    case W::kTokenSet:
      shape += ", S";
      break;
  }
  return "`[" + shape + "]`";
}

}  // namespace

const std::array<DatasetSpec, kNumDatasets>& output_datasets() {
  return kDatasets;
}

const DatasetSpec& dataset_spec(Dataset id) {
  return kDatasets.at(static_cast<size_t>(id));
}

bool present_in(const DatasetSpec& spec, const OutputLayout& layout) {
  switch (spec.presence) {
    case P::kAlways:
      return true;
    case P::kWithLogits:
      return layout.with_logits;
    case P::kWithHiddenStates:
      return layout.hidden_size > 0;
    case P::kWithLogprobs:
      return layout.token_logprobs;
    case P::kWithTopK:
      return layout.top_k > 0;
    case P::kWithTokenSet:
      return !layout.token_set.empty();
    case P::kWithTokenRows:
      return layout.token_rows();
    case P::kWithGreedy:
      return layout.is_greedy();
    case P::kWithIds:
      return !layout.ids.empty();
  }
  return false;
}

bool held_while_partial(const DatasetSpec& spec, const OutputLayout& layout) {
  return spec.initial != Initial::kAtFinish && present_in(spec, layout);
}

std::vector<hsize_t> dataset_dims(const DatasetSpec& spec, const OutputLayout& layout) {
  if (spec.rows == R::kEvents) throw std::logic_error("dataset_dims: /timeline's size is its events'");
  const int64_t rows = spec.rows == R::kPrompts    ? layout.num_prompts
                       : spec.rows == R::kTokenSet ? static_cast<int64_t>(layout.token_set.size())
                                                   : layout.total_tokens();
  std::vector<hsize_t> dims{static_cast<hsize_t>(rows)};
  switch (spec.width) {
    case W::kNone:
      break;
    case W::kVocab:
      dims.push_back(static_cast<hsize_t>(layout.vocab_size));
      break;
    case W::kHidden:
      dims.push_back(static_cast<hsize_t>(layout.hidden_size));
      break;
    case W::kTopK:
      dims.push_back(static_cast<hsize_t>(layout.top_k));
      break;
    case W::kTokenSet:
      dims.push_back(layout.token_set.size());
      break;
  }
  return dims;
}

hid_t file_type(Element element) {
  switch (element) {
    case E::kFloat32:
      return H5T_IEEE_F32LE;
    case E::kFloat64:
      return H5T_IEEE_F64LE;
    case E::kInt32:
      return H5T_STD_I32LE;
    case E::kInt64:
      return H5T_STD_I64LE;
    case E::kUint8:
      return H5T_STD_U8LE;
    case E::kUint64:
      return H5T_STD_U64LE;
    case E::kCompound:
    case E::kString:
      break;
  }
  throw std::logic_error("file_type: a compound type is built by its writer");
}

hid_t memory_type(Element element) {
  switch (element) {
    case E::kFloat32:
      return H5T_NATIVE_FLOAT;
    case E::kFloat64:
      return H5T_NATIVE_DOUBLE;
    case E::kInt32:
      return H5T_NATIVE_INT32;
    case E::kInt64:
      return H5T_NATIVE_INT64;
    case E::kUint8:
      return H5T_NATIVE_UCHAR;
    case E::kUint64:
      return H5T_NATIVE_UINT64;
    case E::kCompound:
    case E::kString:
      break;
  }
  throw std::logic_error("memory_type: a compound type is built by its writer");
}

H5T_class_t type_class(Element element) {
  switch (element) {
    case E::kFloat32:
    case E::kFloat64:
      return H5T_FLOAT;
    case E::kInt32:
    case E::kInt64:
    case E::kUint8:
    case E::kUint64:
      return H5T_INTEGER;
    case E::kCompound:
      return H5T_COMPOUND;
    case E::kString:
      return H5T_STRING;
  }
  return H5T_NO_CLASS;
}

size_t element_size(Element element) {
  switch (element) {
    case E::kUint8:
      return 1;
    case E::kFloat32:
    case E::kInt32:
      return 4;
    case E::kFloat64:
    case E::kInt64:
    case E::kUint64:
      return 8;
    case E::kCompound:
    case E::kString:
      break;
  }
  throw std::logic_error("element_size: a compound type's size is its writer's");
}

std::string output_format_table() {
  std::string table = "| dataset | type | shape | meaning |\n|---|---|---|---|\n";
  for (const DatasetSpec& spec : kDatasets)
    table += std::string("| `/") + spec.name + "` | " + element_name(spec.element) + " | " + shape_text(spec) + " | " +
             presence_note(spec.presence) + spec.meaning + " |\n";
  return table;
}

}  // namespace pf::io
