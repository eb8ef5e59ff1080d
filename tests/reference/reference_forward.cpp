// Float64 reference forward: plain loops, one process, the whole prompt at once (no
// chunks, no pages, no TP). Shares only the weight *reader* with pipefill; every piece of
// math is written again here, as directly as possible, in double precision.
//
// usage: pipefill_reference --model DIR|synthetic:PRESET --input IN.h5 --output REF.h5 [--seed N]
// writes /logits float64 [n, vocab] (last position of each prompt).
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "errors.hpp"
#include "io/prompts_h5.hpp"
#include "model/model_source.hpp"

using namespace pf;
using Matrix = std::vector<double>;

namespace {

Matrix load(const model::TensorSource& source, const std::string& name) {
  const auto shape = source.shape(name);
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  std::vector<float> f(rows * cols);
  source.read_block(name, 0, rows, 0, cols, f.data());
  return Matrix(f.begin(), f.end());
}

// y[t, o] = sum_i x[t, i] * w[o, i] (+ b[o])
Matrix linear(const Matrix& x, int tokens, int in, const Matrix& w, int out, const Matrix* bias = nullptr) {
  Matrix y(static_cast<size_t>(tokens) * out, 0.0);
  for (int t = 0; t < tokens; ++t)
    for (int o = 0; o < out; ++o) {
      double sum = bias ? (*bias)[o] : 0.0;
      for (int i = 0; i < in; ++i) sum += x[t * in + i] * w[static_cast<size_t>(o) * in + i];
      y[t * out + o] = sum;
    }
  return y;
}

void rms_norm_rows(Matrix& x, int rows, int width, const Matrix& weight, double eps) {
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int i = 0; i < width; ++i) sum += x[r * width + i] * x[r * width + i];
    const double scale = 1.0 / std::sqrt(sum / width + eps);
    for (int i = 0; i < width; ++i) x[r * width + i] *= scale * weight[i];
  }
}

std::vector<double> inv_freq(const model::ModelConfig& c) {
  std::vector<double> f(c.head_dim / 2);
  for (int i = 0; i < c.head_dim / 2; ++i) f[i] = std::pow(c.rope_theta, -2.0 * i / c.head_dim);
  if (!c.rope_scaling.llama3) return f;
  const auto& s = c.rope_scaling;
  for (double& v : f) {
    const double wavelen = 2 * M_PI / v;
    if (wavelen > s.original_max_position_embeddings / s.low_freq_factor) {
      v /= s.factor;
    } else if (wavelen >= s.original_max_position_embeddings / s.high_freq_factor) {
      const double smooth =
          (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      v = (1 - smooth) * v / s.factor + smooth * v;
    }
  }
  return f;
}

// Rotate-half RoPE on head vector v (length d) at position pos.
void rope(double* v, int d, int pos, const std::vector<double>& freq) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = v[i], b = v[i + d / 2], angle = pos * freq[i];
    v[i] = a * std::cos(angle) - b * std::sin(angle);
    v[i + d / 2] = b * std::cos(angle) + a * std::sin(angle);
  }
}

std::vector<double> forward(const model::ModelConfig& c, const model::TensorSource& src, const int32_t* ids, int n) {
  const int h = c.hidden_size, d = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads, inter = c.intermediate_size;
  const double eps = c.rms_norm_eps;
  const auto freq = inv_freq(c);
  const Matrix embedding = load(src, "model.embed_tokens.weight");
  Matrix x(static_cast<size_t>(n) * h);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < h; ++i) x[t * h + i] = embedding[static_cast<size_t>(ids[t]) * h + i];

  for (int layer = 0; layer < c.num_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    Matrix normed = x;
    rms_norm_rows(normed, n, h, load(src, p + "input_layernorm.weight"), eps);
    Matrix qb, kb, vb;
    if (c.attention_bias) {
      qb = load(src, p + "self_attn.q_proj.bias");
      kb = load(src, p + "self_attn.k_proj.bias");
      vb = load(src, p + "self_attn.v_proj.bias");
    }
    Matrix q = linear(normed, n, h, load(src, p + "self_attn.q_proj.weight"), nh * d, c.attention_bias ? &qb : nullptr);
    Matrix k =
        linear(normed, n, h, load(src, p + "self_attn.k_proj.weight"), nkv * d, c.attention_bias ? &kb : nullptr);
    Matrix v =
        linear(normed, n, h, load(src, p + "self_attn.v_proj.weight"), nkv * d, c.attention_bias ? &vb : nullptr);
    if (c.qk_norm) {
      rms_norm_rows(q, n * nh, d, load(src, p + "self_attn.q_norm.weight"), eps);
      rms_norm_rows(k, n * nkv, d, load(src, p + "self_attn.k_norm.weight"), eps);
    }
    for (int t = 0; t < n; ++t) {
      for (int head = 0; head < nh; ++head) rope(&q[(t * nh + head) * d], d, t, freq);
      for (int head = 0; head < nkv; ++head) rope(&k[(t * nkv + head) * d], d, t, freq);
    }
    Matrix attn(static_cast<size_t>(n) * nh * d, 0.0);
    std::vector<double> scores(n);
    for (int head = 0; head < nh; ++head) {
      const int kv_head = head / (nh / nkv);
      for (int t = 0; t < n; ++t) {
        double max_score = -1e300;
        for (int s = 0; s <= t; ++s) {
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += q[(t * nh + head) * d + i] * k[(s * nkv + kv_head) * d + i];
          scores[s] = dot / std::sqrt(static_cast<double>(d));
          max_score = std::max(max_score, scores[s]);
        }
        double total = 0;
        for (int s = 0; s <= t; ++s) total += (scores[s] = std::exp(scores[s] - max_score));
        for (int s = 0; s <= t; ++s)
          for (int i = 0; i < d; ++i)
            attn[(t * nh + head) * d + i] += scores[s] / total * v[(s * nkv + kv_head) * d + i];
      }
    }
    Matrix o = linear(attn, n, nh * d, load(src, p + "self_attn.o_proj.weight"), h);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

    normed = x;
    rms_norm_rows(normed, n, h, load(src, p + "post_attention_layernorm.weight"), eps);
    Matrix gate = linear(normed, n, h, load(src, p + "mlp.gate_proj.weight"), inter);
    Matrix up = linear(normed, n, h, load(src, p + "mlp.up_proj.weight"), inter);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    Matrix down = linear(gate, n, inter, load(src, p + "mlp.down_proj.weight"), h);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  Matrix last(x.end() - h, x.end());
  rms_norm_rows(last, 1, h, load(src, "model.norm.weight"), eps);
  const Matrix head = load(src, c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  return linear(last, 1, h, head, c.vocab_size);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_flag, input, output;
  uint64_t seed = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model")
      model_flag = argv[i + 1];
    else if (flag == "--input")
      input = argv[i + 1];
    else if (flag == "--output")
      output = argv[i + 1];
    else if (flag == "--seed")
      seed = std::stoull(argv[i + 1]);
  }
  if (model_flag.empty() || input.empty() || output.empty()) {
    std::fprintf(stderr, "usage: pipefill_reference --model M --input IN.h5 --output REF.h5 [--seed N]\n");
    return 2;
  }
  try {
    const model::ModelSource model = model::open_model(model_flag, seed);
    const io::PromptSet prompts = io::read_prompts(input, model.config.vocab_size);
    const int n = prompts.num_prompts(), vocab = model.config.vocab_size;
    std::vector<double> logits;
    for (int p = 0; p < n; ++p) {
      const auto row = forward(model.config, *model.tensors, prompts.tokens.data() + prompts.offsets[p],
                               static_cast<int>(prompts.offsets[p + 1] - prompts.offsets[p]));
      logits.insert(logits.end(), row.begin(), row.end());
    }
    hid_t file = H5Fcreate(output.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(vocab)};
    hid_t space = H5Screate_simple(2, dims, nullptr);
    hid_t dataset = H5Dcreate2(file, "logits", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, logits.data()));
    H5Dclose(dataset);
    H5Sclose(space);
    H5Fclose(file);
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
