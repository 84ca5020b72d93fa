// The L2 norm of all of a model's gradients at once, for the update's finiteness check, clipping
// and log line.
//
// `torch.nn.utils.get_total_norm` on a CPU takes one `linalg_vector_norm` per tensor (base: 253,
// from 512-element biases to the 37,000 × 512 embedding), each split among the threads on its
// own, then the norm of those norms: 24 ms for base's 63M fp32 values on two threads, where reading
// them takes ~10. Here every tensor is cut into chunks of 64k values, the chunks of all tensors are
// shared among the threads at once, each chunk's squares are summed in fp32 lanes and the chunks'
// sums in fp64 (PyTorch's fp32 norm of random base-shaped gradients came out 2.8e-4 off fp64's,
// this one 5e-9).
#include "kernels.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace attnlab {
namespace {

constexpr int64_t CHUNK = 1 << 16;  // values a chunk: 256 KB of fp32, a thread's share of work at a time

struct Chunk {
  const float* data;
  int64_t size;
};

double squares(const Chunk& chunk) {
  fvec a = {}, b = {};  // two sums, so that one addition need not wait on the last
  int64_t i = 0;
  for (; i + 2 * W <= chunk.size; i += 2 * W) {
    const fvec x = load(chunk.data + i), y = load(chunk.data + i + W);
    a += x * x;
    b += y * y;
  }
  double total = static_cast<double>(sum(a)) + sum(b);
  for (; i < chunk.size; ++i) total += static_cast<double>(chunk.data[i]) * chunk.data[i];
  return total;
}

}  // namespace

torch::Tensor grad_norm(const std::vector<torch::Tensor>& tensors) {
  std::vector<Chunk> chunks;
  for (const auto& x : tensors) {
    TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous() && x.device().is_cpu(),
                "grad_norm: contiguous fp32 tensors on the CPU");
    const float* data = x.data_ptr<float>();
    for (int64_t start = 0; start < x.numel(); start += CHUNK)
      chunks.push_back({data + start, std::min(CHUNK, x.numel() - start)});
  }
  std::vector<double> sums(chunks.size());
  at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) sums[i] = squares(chunks[i]);
  });
  double total = 0.0;
  for (double s : sums) total += s;  // in chunk order: the same sum whatever the threads
  return torch::tensor(static_cast<float>(std::sqrt(total)), torch::dtype(torch::kFloat));
}

}  // namespace attnlab
