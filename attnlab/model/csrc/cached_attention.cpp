// Eq. (1) for one new query per row over a beam search's key/value store, read in place.
//
// Beam search reorders its rows every step: row i continues some old row. Copying every layer's
// keys and values into the new order (what a plain cache does) reads and writes the whole prefix
// each step. Here nothing moves: position t of every row was written once, at store[t, slot], and
// slots[i, t] says which slot holds position t of row i's history, so a reorder only reorders the
// small (rows, length) table of slots. The kernel gathers while it reads (FasterTransformer's
// "cache indirection"), in one pass: scores, softmax and the weighted sum of values.
#include "kernels.h"
#include "vec.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace attnlab {

// Where everything is, in elements: position t of slot s of head h starts at
// k + t * k_t + s * k_s + h * d_k (v likewise); row i's slot for position t is
// slots[i * slot_row + t * slot_t] (slot_t = 0: one slot for every position, as the
// encoder-decoder attention's sentence); row i sees positions [first, min(length, lengths[i])).
struct Layout {
  int64_t rows, heads, dk, dv, first, length, k_t, k_s, v_t, v_s, slot_row, slot_t;
  const int32_t* lengths;  // nullptr: every row sees [first, length)
  float scale;
};

inline float dot(const float* a, const float* b, int64_t n, int64_t n_w) {
  fvec partial = {};
  for (int64_t d = 0; d < n_w; d += W) partial += load(a + d) * load(b + d);
  float s = sum(partial);
  for (int64_t d = n_w; d < n; ++d) s += a[d] * b[d];
  return s;
}
inline float dot(const float* a, const c10::BFloat16* b, int64_t n, int64_t n_w) {
  fvec partial = {};
  for (int64_t d = 0; d < n_w; d += W) partial += load(a + d) * load(b + d);
  float s = sum(partial);
  for (int64_t d = n_w; d < n; ++d) s += a[d] * widen(b[d]);
  return s;
}
template <typename T>
inline void axpy(float p, const T* x, float* y, int64_t n, int64_t n_w) {  // y += p * x
  for (int64_t d = 0; d < n_w; d += W) {
    fvec a = load(y + d) + p * load(x + d);
    std::memcpy(y + d, &a, sizeof a);
  }
  for (int64_t d = n_w; d < n; ++d) y[d] += p * widen(x[d]);
}

// One row at a time, all its heads together: a position's heads lie side by side in the store
// (h · d values in a row), so each is read as one contiguous block, the next one prefetched.
template <typename T>
void attend(const T* q, const T* k, const T* v, const int32_t* slots, T* out, const Layout& lay) {
  const int64_t heads = lay.heads, dk = lay.dk, dv = lay.dv, span = lay.length;
  const int64_t dk_w = dk / W * W, dv_w = dv / W * W;  // vector part; the rest (if any) one by one
  at::parallel_for(0, lay.rows, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(heads * span), query(heads * dk), acc(heads * dv), top(heads), total(heads);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t last = lay.lengths ? std::min<int64_t>(span, lay.lengths[row]) : span;
      for (int64_t d = 0; d < heads * dk; ++d) query[d] = widen(q[row * heads * dk + d]) * lay.scale;
      const int32_t* where = slots + row * lay.slot_row;
      auto key = [&](int64_t t) { return k + t * lay.k_t + where[t * lay.slot_t] * lay.k_s; };
      auto value = [&](int64_t t) { return v + t * lay.v_t + where[t * lay.slot_t] * lay.v_s; };
      std::fill(top.begin(), top.end(), -INFINITY);
      for (int64_t t = lay.first; t < last; ++t) {
        if (t + 1 < last) prefetch(key(t + 1), heads * dk);
        const T* kt = key(t);
        for (int64_t h = 0; h < heads; ++h) {
          const float s = dot(query.data() + h * dk, kt + h * dk, dk, dk_w);
          scores[h * span + t] = s;
          top[h] = std::max(top[h], s);
        }
      }
      std::fill(total.begin(), total.end(), 0.f);
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t t = lay.first; t < last; ++t) {
          scores[h * span + t] = std::exp(scores[h * span + t] - top[h]);
          total[h] += scores[h * span + t];
        }
      }
      std::fill(acc.begin(), acc.end(), 0.f);  // a row that sees nothing gets zeros, as `attention` gives
      for (int64_t t = lay.first; t < last; ++t) {
        if (t + 1 < last) prefetch(value(t + 1), heads * dv);
        const T* vt = value(t);
        for (int64_t h = 0; h < heads; ++h)
          axpy(scores[h * span + t] / total[h], vt + h * dv, acc.data() + h * dv, dv, dv_w);
      }
      for (int64_t d = 0; d < heads * dv; ++d) out[row * heads * dv + d] = static_cast<T>(acc[d]);
    }
  });
}

// q (rows, heads, d_k); k (positions, slots, heads, d_k) and v (positions, slots, heads, d_v), the
// last two dimensions contiguous; slots (rows, >= length) int32, any strides; lengths: (rows,)
// int32 or empty. -> (rows, heads, d_v).
torch::Tensor cached_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor slots,
                               torch::Tensor lengths, int64_t first, int64_t length) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 4 && v.dim() == 4 && slots.dim() == 2, "cached_attention: bad ranks");
  TORCH_CHECK(q.is_contiguous() && k.stride(3) == 1 && k.stride(2) == k.size(3) && v.stride(3) == 1 &&
                  v.stride(2) == v.size(3),
              "cached_attention: q contiguous, and each position's heads contiguous in k and v");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(), "cached_attention: dtypes differ");
  TORCH_CHECK(slots.scalar_type() == at::kInt && slots.size(0) == q.size(0) && slots.size(1) >= length,
              "cached_attention: slots must be (rows, >= length) int32");
  TORCH_CHECK(lengths.numel() == 0 || (lengths.scalar_type() == at::kInt && lengths.is_contiguous() &&
                                       lengths.numel() == q.size(0)),
              "cached_attention: lengths must be empty or (rows,) int32");
  TORCH_CHECK(0 <= first && first < length && length <= k.size(0) && length <= v.size(0),
              "cached_attention: positions out of range");
  auto out = torch::empty({q.size(0), q.size(1), v.size(3)}, q.options());
  const Layout lay{q.size(0),   q.size(1),   q.size(2),      v.size(3),      first,
                  length,      k.stride(0), k.stride(1),    v.stride(0),    v.stride(1),
                  slots.stride(0), slots.stride(1), lengths.numel() ? lengths.data_ptr<int32_t>() : nullptr,
                  1.0f / std::sqrt(static_cast<float>(q.size(2)))};
  AT_DISPATCH_SWITCH(q.scalar_type(), "cached_attention",
                     AT_DISPATCH_CASE(at::kFloat, [&] {
                       attend<float>(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                                     slots.data_ptr<int32_t>(), out.data_ptr<float>(), lay);
                     }) AT_DISPATCH_CASE(at::kBFloat16, [&] {
                       using T = c10::BFloat16;
                       attend<T>(q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), slots.data_ptr<int32_t>(),
                                 out.data_ptr<T>(), lay);
                     }));
  return out;
}

}  // namespace attnlab
