// attnlab's hand-written kernels, one file each, bound to Python in module.cpp.
#pragma once

#include <torch/extension.h>

#include <tuple>
#include <vector>

namespace attnlab {

// cached_attention.cpp: Eq. (1) for one query per row over a slot-indexed key/value store.
torch::Tensor cached_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor slots,
                               torch::Tensor lengths, int64_t first, int64_t length);

// top_k.cpp: each row's k largest values and their columns, in one pass.
std::tuple<torch::Tensor, torch::Tensor> top_k(torch::Tensor x, int64_t k);

// top_k.cpp: each row's k most likely columns under log_softmax (never those in `skip`), their
// log-probabilities, and column `column`'s, without writing the log-softmax.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> log_softmax_top_k(torch::Tensor logits, int64_t k,
                                                                          torch::Tensor skip, int64_t column);

// few_rows.cpp: x · Wᵀ + b for a few rows, W given as column tiles (N / 64, K, 64).
torch::Tensor few_rows_linear(torch::Tensor x, torch::Tensor tiles, c10::optional<torch::Tensor> bias,
                              int64_t out_features);

// dropout_mask.cpp: dropout's 0/1 keep mask in x's dtype, from a counter-based generator.
torch::Tensor dropout_keep(const torch::Tensor& like, int64_t seed, int64_t threshold);

// smoothed_loss.cpp: each row's label-smoothed loss and NLL, and the loss's gradient (softmax − q),
// in one pass over the logits; `scale_`: x times a factor, in place (the loss's backward).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> smoothed_loss(torch::Tensor logits, torch::Tensor target,
                                                                      double eps, int64_t pad_id);
void scale_(torch::Tensor x, torch::Tensor by);

// grad_norm.cpp: the L2 norm of all the tensors' values together, chunks of all shared among threads.
torch::Tensor grad_norm(const std::vector<torch::Tensor>& tensors);

}  // namespace attnlab
