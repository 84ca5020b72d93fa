// Beam search's per-row ranking: each row's k best columns, in one pass over the row.
//
// A step's scores are (rows, vocabulary): 1,000 rows × 8,000 pieces on test2016. `torch.topk`
// sorts far more than the 2·beam entries a row can contribute; here a short sorted list keeps
// the k best so far, and a block of 4·W values (64 with AVX-512, 32 with AVX2) is looked at one by one only if its maximum beats
// the list's last. `log_softmax_top_k` also normalises, in the same pass: the search needs the
// log-probabilities of those k columns only (and of </s>), so the (rows, vocabulary) log-softmax
// is never written, and the logits are read in their own dtype (bf16 models: no fp32 copy).
// Among equal values the earlier column is kept, where `torch.topk` promises no order.
#include "kernels.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace attnlab {
namespace {

// The k best (value, column) of a row, best first, written to vals/idx; columns where `skip` is
// set are never chosen. `visit(block, c)` sees every whole block of 4·W values, columns [c, c + 4·W),
// from column 0 on; the columns after the last whole block it does not see.
template <typename T, typename Visit>
void rank_row(const T* r, int64_t columns, int64_t k, const uint8_t* skip, float* vals, int64_t* idx,
              Visit visit) {
  int64_t filled = 0;
  auto offer = [&](int64_t c) {  // insert column c if it beats the k-th (or the list is short)
    const float value = widen(r[c]);
    if ((filled == k && !(value > vals[k - 1])) || (skip && skip[c])) return;
    int64_t place = filled < k ? filled++ : k - 1;
    while (place > 0 && value > vals[place - 1]) {
      vals[place] = vals[place - 1];
      idx[place] = idx[place - 1];
      --place;
    }
    vals[place] = value;
    idx[place] = c;
  };
  int64_t c = 0;
  for (; c + 4 * W <= columns; c += 4 * W) {
    fvec block[4];
    for (int64_t b = 0; b < 4; ++b) block[b] = load(r + c + b * W);
    visit(block, c);
    fvec top = block[0];
    for (int64_t b = 1; b < 4; ++b) top = block[b] > top ? block[b] : top;
    if (filled < k) {
      for (int64_t i = 0; i < 4 * W; ++i) offer(c + i);
    } else if (largest(top) > vals[k - 1]) {
      for (int64_t b = 0; b < 4; ++b)  // only the lanes above the k-th, one by one
        for (uint32_t lanes = above(block[b], vals[k - 1]); lanes; lanes &= lanes - 1)
          offer(c + b * W + __builtin_ctz(lanes));
    }
  }
  for (; c < columns; ++c) offer(c);
  for (; filled < k; ++filled) {  // fewer than k columns may be chosen: pad with -inf
    vals[filled] = -std::numeric_limits<float>::infinity();
    idx[filled] = 0;
  }
}

template <typename T>
void log_softmax_rank(const T* data, int64_t rows, int64_t columns, int64_t k, const uint8_t* skip,
                      int64_t column, float* best, int64_t* where, float* picked) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* r = data + row * columns;
      float peak = -std::numeric_limits<float>::infinity();  // pass 1: the row's maximum
      int64_t c = 0;
      if (columns >= W) {
        fvec top = load(r);
        for (c = W; c + W <= columns; c += W) top = load(r + c) > top ? load(r + c) : top;
        for (int64_t i = 0; i < W; ++i) peak = top[i] > peak ? top[i] : peak;
      }
      for (; c < columns; ++c) peak = widen(r[c]) > peak ? widen(r[c]) : peak;
      fvec partial = {};  // pass 2: Σ e^(x - peak), while ranking
      rank_row(r, columns, k, skip, best + row * k, where + row * k, [&](const fvec* block, int64_t) {
        for (int64_t b = 0; b < 4; ++b) partial += exp(block[b] - peak);
      });
      float total = sum(partial);
      for (int64_t i = columns / (4 * W) * (4 * W); i < columns; ++i) total += std::exp(widen(r[i]) - peak);
      const float logsum = std::log(total);  // log_softmax(x) = (x - peak) - log Σ e^(x - peak)
      for (int64_t j = 0; j < k; ++j) best[row * k + j] = (best[row * k + j] - peak) - logsum;
      picked[row] = (widen(r[column]) - peak) - logsum;
    }
  });
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> top_k(torch::Tensor x, int64_t k) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat, "top_k: (rows, columns) fp32");
  TORCH_CHECK(0 < k && k <= x.size(1), "top_k: k must be in [1, columns]");
  const int64_t rows = x.size(0), columns = x.size(1);
  auto values = torch::empty({rows, k}, x.options());
  auto indices = torch::empty({rows, k}, x.options().dtype(at::kLong));
  const float* data = x.data_ptr<float>();
  float* best = values.data_ptr<float>();
  int64_t* where = indices.data_ptr<int64_t>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row)
      rank_row(data + row * columns, columns, k, nullptr, best + row * k, where + row * k,
               [](const fvec*, int64_t) {});
  });
  return {values, indices};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> log_softmax_top_k(torch::Tensor logits, int64_t k,
                                                                          torch::Tensor skip, int64_t column) {
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous() &&
                  (logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16),
              "log_softmax_top_k: (rows, columns) fp32 or bf16, contiguous");
  const int64_t rows = logits.size(0), columns = logits.size(1);
  TORCH_CHECK(0 < k && k <= columns && 0 <= column && column < columns, "log_softmax_top_k: k or column out of range");
  TORCH_CHECK(skip.dim() == 1 && skip.scalar_type() == at::kLong, "log_softmax_top_k: skip must be (n,) int64");
  std::vector<uint8_t> skipped(columns, 0);
  const int64_t* skip_at = skip.data_ptr<int64_t>();
  for (int64_t i = 0; i < skip.numel(); ++i) {
    TORCH_CHECK(0 <= skip_at[i] && skip_at[i] < columns, "log_softmax_top_k: skip out of range");
    skipped[skip_at[i]] = 1;
  }
  auto options = logits.options().dtype(at::kFloat);
  auto values = torch::empty({rows, k}, options);
  auto indices = torch::empty({rows, k}, options.dtype(at::kLong));
  auto picked = torch::empty({rows}, options);
  AT_DISPATCH_SWITCH(logits.scalar_type(), "log_softmax_top_k",
                     AT_DISPATCH_CASE(at::kFloat, [&] {
                       log_softmax_rank<float>(logits.data_ptr<float>(), rows, columns, k, skipped.data(), column,
                                               values.data_ptr<float>(), indices.data_ptr<int64_t>(),
                                               picked.data_ptr<float>());
                     }) AT_DISPATCH_CASE(at::kBFloat16, [&] {
                       using T = c10::BFloat16;
                       log_softmax_rank<T>(logits.data_ptr<T>(), rows, columns, k, skipped.data(), column,
                                           values.data_ptr<float>(), indices.data_ptr<int64_t>(),
                                           picked.data_ptr<float>());
                     }));
  return {values, indices, picked};
}

}  // namespace attnlab
