// The label-smoothed loss of §5.4 and its gradient, in one pass over each row of logits.
//
// Training's loss reads (rows, V) logits, 1,936 × 37,000 for base's batch, and its backward
// writes a gradient of the same size. Compiled by Inductor, the forward reads the logits to take
// log Z, and the backward reads them again to take e^x a second time and write the gradient:
// 57-61 ms on two threads of the Intel Xeon. The gradient of this loss needs nothing the forward
// does not know (softmax(x) − q, q = (1 − ε)·one_hot + ε/V, times the loss's incoming gradient),
// so here the forward writes it while the row is in cache: the row's maximum and Σx, then e^(x −
// max) into a row buffer and its sum, then (e / Σe − ε/V) in the logits' dtype and, at the
// target, − (1 − ε) more: e^x once a logit, one read of the logits and one write of the
// gradient. The backward is then `scale_`: that table times the incoming scalar, in place.
#include "kernels.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace attnlab {
namespace {

// Σ over a row's whole vectors of `part(c)`, c = 0, W, 2W, …: sixteen vectors at a time in fp32,
// each block's sum then added in fp64. One fp32 running sum a lane would add ~2,300 terms of
// e^(x − max) to a sum near 1 (base's 37,000 words), and its rounding put a probability of 0.718
// 6e-6 off (ten times PyTorch's error); this way a lane adds sixteen.
template <typename Part>
double blocked_sum(int64_t V, Part part) {
  constexpr int64_t BLOCK = 16 * W;
  const int64_t whole = V / W * W;
  double total = 0.0;
  for (int64_t start = 0; start < whole; start += BLOCK) {
    const int64_t stop = std::min(start + BLOCK, whole);
    fvec block = {};
    for (int64_t c = start; c < stop; c += W) block += part(c);
    total += sum(block);
  }
  return total;
}

template <typename T>
void smoothed_rows(const T* logits, const int64_t* target, int64_t rows, int64_t V, float eps, int64_t pad_id,
                   float* loss, float* nll, T* grad) {
  at::parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> e(V);  // one row's e^(x − max), kept for the gradient
    for (int64_t row = begin; row < end; ++row) {
      const T* x = logits + row * V;
      T* g = grad + row * V;
      const int64_t t = target[row];
      if (t == pad_id) {  // a padded position: no loss, no gradient
        loss[row] = nll[row] = 0.f;
        std::memset(static_cast<void*>(g), 0, V * sizeof(T));
        continue;
      }
      fvec top = fvec{} - std::numeric_limits<float>::infinity();
      const double total_x = blocked_sum(V, [&](int64_t c) {
        const fvec v = load(x + c);
        top = v > top ? v : top;
        return v;
      });
      float peak = largest(top);
      for (int64_t c = V / W * W; c < V; ++c) peak = widen(x[c]) > peak ? widen(x[c]) : peak;
      double total = blocked_sum(V, [&](int64_t c) {
        const fvec v = exp(load(x + c) - peak);
        std::memcpy(e.data() + c, &v, sizeof v);
        return v;
      });
      for (int64_t c = V / W * W; c < V; ++c) total += e[c] = std::exp(widen(x[c]) - peak);
      double tail_x = 0.0;
      for (int64_t c = V / W * W; c < V; ++c) tail_x += widen(x[c]);
      const float log_z = peak + static_cast<float>(std::log(total));
      nll[row] = log_z - widen(x[t]);                                                     // −log p(target)
      loss[row] = (1.f - eps) * nll[row] + eps * (log_z - static_cast<float>((total_x + tail_x) / V));  // ε × mean
      const float inv = static_cast<float>(1.0 / total), smooth = eps / V;
      int64_t c = 0;
      for (; c + W <= V; c += W) store(g + c, load(e.data() + c) * inv - smooth);
      for (; c < V; ++c) store(g + c, e[c] * inv - smooth);
      store(g + t, e[t] * inv - smooth - (1.f - eps));
    }
  });
}

template <typename T>
void scale_into(const T* in, T* out, int64_t n, float factor) {
  const int64_t vectors = n / W;
  at::parallel_for(0, vectors, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) store(out + i * W, load(in + i * W) * factor);
  });
  for (int64_t i = vectors * W; i < n; ++i) store(out + i, widen(in[i]) * factor);
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> smoothed_loss(torch::Tensor logits, torch::Tensor target,
                                                                      double eps, int64_t pad_id) {
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous() &&
                  (logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16),
              "smoothed_loss: (rows, V) fp32 or bf16 logits, contiguous");
  TORCH_CHECK(target.dim() == 1 && target.size(0) == logits.size(0) && target.scalar_type() == at::kLong &&
                  target.is_contiguous(),
              "smoothed_loss: (rows,) int64 targets");
  const int64_t rows = logits.size(0), V = logits.size(1);
  const int64_t* t = target.data_ptr<int64_t>();
  for (int64_t row = 0; row < rows; ++row)
    TORCH_CHECK(t[row] == pad_id || (0 <= t[row] && t[row] < V), "smoothed_loss: a target id is out of range");
  auto options = logits.options().dtype(at::kFloat);
  auto loss = torch::empty({rows}, options), nll = torch::empty({rows}, options);
  auto grad = torch::empty_like(logits);
  AT_DISPATCH_SWITCH(logits.scalar_type(), "smoothed_loss",
                     AT_DISPATCH_CASE(at::kFloat, [&] {
                       smoothed_rows<float>(logits.data_ptr<float>(), t, rows, V, eps, pad_id,
                                            loss.data_ptr<float>(), nll.data_ptr<float>(), grad.data_ptr<float>());
                     }) AT_DISPATCH_CASE(at::kBFloat16, [&] {
                       using T = c10::BFloat16;
                       smoothed_rows<T>(logits.data_ptr<T>(), t, rows, V, eps, pad_id, loss.data_ptr<float>(),
                                        nll.data_ptr<float>(), grad.data_ptr<T>());
                     }));
  return {loss, nll, grad};
}

void scale_(torch::Tensor x, torch::Tensor by) {
  TORCH_CHECK(x.is_contiguous() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16),
              "scale_: fp32 or bf16, contiguous");
  TORCH_CHECK(by.numel() == 1 && by.device().is_cpu(), "scale_: one factor, on the CPU");
  const float factor = by.item<float>();
  AT_DISPATCH_SWITCH(x.scalar_type(), "scale_",
                     AT_DISPATCH_CASE(at::kFloat, [&] {
                       scale_into<float>(x.data_ptr<float>(), x.data_ptr<float>(), x.numel(), factor);
                     }) AT_DISPATCH_CASE(at::kBFloat16, [&] {
                       using T = c10::BFloat16;
                       scale_into<T>(x.data_ptr<T>(), x.data_ptr<T>(), x.numel(), factor);
                     }));
}

}  // namespace attnlab
