// A product of a few rows by a weight (x · Wᵀ + b): one sentence's beam, four rows a step.
//
// With four rows the product is a matrix-vector product in all but name: it reads the whole
// weight to do four multiply-adds per element, and oneDNN's call costs ~20 µs before it starts
// (a 256 × 256 layer of four rows: 22-25 µs on the EPYC, two threads, where the arithmetic is
// under 3). Here the weight is read once, in column tiles laid out for this loop (`column_tiles`
// in attnlab/model/kernels.py: (N / 64, K, 64), each tile contiguous), and each tile's 64 outputs
// for up to four rows stay in registers while it streams by (sixteen AVX-512 ones): 5 µs for that layer.
// Tiles are shared among threads once a thread's share is at least 64 KB of weight.
#include "kernels.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace attnlab {
namespace {

constexpr int64_t TILE = 64;                   // output columns per tile (kernels.TILE)
constexpr int64_t V = TILE / W;                // vectors per tile row
constexpr int64_t SHARE_BYTES = 64 * 1024;     // the least weight worth handing to another thread

// Rows [0, R) of x (row stride K) times one tile (K × TILE) plus bias, into y's columns
// [n0, n0 + n) (row stride N).
template <int R, typename T>
void tile_rows(const T* x, int64_t K, const T* w, const T* bias, T* y, int64_t N, int64_t n0, int64_t n) {
  fvec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < V; ++j) acc[r][j] = fvec{};
  for (int64_t k = 0; k < K; ++k) {
    const T* wk = w + k * TILE;
    fvec wv[V];
    for (int j = 0; j < V; ++j) wv[j] = load(wk + j * W);
    for (int r = 0; r < R; ++r) {
      const float xv = widen(x[r * K + k]);
      for (int j = 0; j < V; ++j) acc[r][j] += xv * wv[j];
    }
  }
  for (int r = 0; r < R; ++r) {
    float sums[TILE];
    std::memcpy(sums, acc[r], sizeof sums);
    T* out = y + r * N + n0;
    for (int64_t j = 0; j < n; ++j) store(out + j, sums[j] + (bias ? widen(bias[n0 + j]) : 0.f));
  }
}

template <typename T>
void few_rows_typed(const torch::Tensor& x, const torch::Tensor& tiles, const T* bias, torch::Tensor& y) {
  const int64_t M = x.size(0), K = x.size(1), N = y.size(1), count = tiles.size(0);
  const T* xp = x.data_ptr<T>();
  const T* wp = tiles.data_ptr<T>();
  T* yp = y.data_ptr<T>();
  const int64_t grain = std::max<int64_t>(1, SHARE_BYTES / (K * TILE * static_cast<int64_t>(sizeof(T))));
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * TILE, n = std::min(TILE, N - n0);
      const T* w = wp + t * K * TILE;
      int64_t r = 0;
      for (; r + 4 <= M; r += 4) tile_rows<4>(xp + r * K, K, w, bias, yp + r * N, N, n0, n);
      for (; r < M; ++r) tile_rows<1>(xp + r * K, K, w, bias, yp + r * N, N, n0, n);
    }
  });
}

}  // namespace

torch::Tensor few_rows_linear(torch::Tensor x, torch::Tensor tiles, c10::optional<torch::Tensor> bias,
                              int64_t out_features) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && tiles.dim() == 3 && tiles.is_contiguous(),
              "few_rows_linear: x (M, K) and tiles (N / 64, K, 64), both contiguous");
  TORCH_CHECK(tiles.size(1) == x.size(1) && tiles.size(2) == TILE && tiles.size(0) * TILE >= out_features,
              "few_rows_linear: the tiles do not match x or out_features");
  TORCH_CHECK(x.scalar_type() == tiles.scalar_type(), "few_rows_linear: x and tiles differ in dtype");
  const bool with_bias = bias.has_value() && bias->defined();
  TORCH_CHECK(!with_bias || (bias->is_contiguous() && bias->numel() == out_features &&
                             bias->scalar_type() == x.scalar_type()),
              "few_rows_linear: bias must be (out_features,) in x's dtype");
  auto y = torch::empty({x.size(0), out_features}, x.options());
  if (x.scalar_type() == torch::kFloat32) {
    few_rows_typed<float>(x, tiles, with_bias ? bias->data_ptr<float>() : nullptr, y);
  } else {
    TORCH_CHECK(x.scalar_type() == torch::kBFloat16, "few_rows_linear: fp32 or bf16 only");
    few_rows_typed<c10::BFloat16>(x, tiles, with_bias ? bias->data_ptr<c10::BFloat16>() : nullptr, y);
  }
  return y;
}

}  // namespace attnlab
