// Vector helpers shared by attnlab's kernels: W floats as one value, loads from and stores to
// fp32 and bf16, and e^x for W values at once.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>

// W, the lanes of one vector: one AVX-512 register (16 floats), else one AVX2 register (8).
// GCC lowers arithmetic on a vector wider than the machine's to two registers, but a comparison
// or a select (`x < y ? a : b`) it expands lane by lane: on an AVX2-only CPU (an AMD EPYC of the
// Zen 3 family), 16-lane vectors made e^x scalar, and `log_softmax_top_k` over 1,000 × 8,000
// logits took 36 ms instead of 9.6 (one thread; docs/BENCHMARKS.md, decoding round fifteen).
#ifdef __AVX512F__
#define ATTNLAB_LANES 16
#else
#define ATTNLAB_LANES 8
#endif

namespace attnlab {

constexpr int64_t W = ATTNLAB_LANES;
typedef float fvec __attribute__((vector_size(4 * W)));
typedef uint16_t u16x __attribute__((vector_size(2 * W)));
typedef uint32_t u32x __attribute__((vector_size(4 * W)));
typedef int32_t i32x __attribute__((vector_size(4 * W)));

inline fvec load(const float* p) {
  fvec x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
inline fvec load(const c10::BFloat16* p) {  // bf16 is the top half of an fp32: widen and shift
  u16x half;
  std::memcpy(&half, p, sizeof half);
  u32x wide = __builtin_convertvector(half, u32x) << 16;
  fvec x;
  std::memcpy(&x, &wide, sizeof x);
  return x;
}
inline void store(float* p, fvec x) { std::memcpy(p, &x, sizeof x); }
inline void store(c10::BFloat16* p, fvec x) {  // rounded to nearest even, as c10 rounds one value
  u32x bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
  const i32x nan = x != x;  // a NaN stays a NaN (rounding could carry its payload into the sign)
  bits = nan ? 0x7FC0 : bits;
  const u16x half = __builtin_convertvector(bits, u16x);
  std::memcpy(p, &half, sizeof half);
}
inline float widen(float x) { return x; }
inline float widen(c10::BFloat16 x) { return static_cast<float>(x); }
inline void store(float* p, float x) { *p = x; }  // one value, as `store` writes W
inline void store(c10::BFloat16* p, float x) { *p = c10::BFloat16(x); }  // rounded to nearest even

template <typename T>
inline void prefetch(const T* p, int64_t n) {  // the cache lines of n values
  const char* bytes = reinterpret_cast<const char*>(p);
  for (int64_t i = 0; i < n * static_cast<int64_t>(sizeof(T)); i += 64) __builtin_prefetch(bytes + i);
}

inline float sum(fvec x) {
  float s = 0.f;
  for (int64_t i = 0; i < W; ++i) s += x[i];
  return s;
}

// The largest of W values, in log2(W) halvings (a scalar loop over the lanes is W - 1 dependent steps).
inline float largest(fvec x) {
#if ATTNLAB_LANES == 16
  fvec y = __builtin_shuffle(x, i32x{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
  x = y > x ? y : x;
  y = __builtin_shuffle(x, i32x{4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
  x = y > x ? y : x;
  y = __builtin_shuffle(x, i32x{2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
  x = y > x ? y : x;
  y = __builtin_shuffle(x, i32x{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
#else
  fvec y = __builtin_shuffle(x, i32x{4, 5, 6, 7, 0, 1, 2, 3});
  x = y > x ? y : x;
  y = __builtin_shuffle(x, i32x{2, 3, 0, 1, 6, 7, 4, 5});
  x = y > x ? y : x;
  y = __builtin_shuffle(x, i32x{1, 0, 3, 2, 5, 4, 7, 6});
#endif
  x = y > x ? y : x;
  return x[0];
}

// Bit i set where x[i] > bound (one mask register's worth on AVX-512, a movmskps on AVX2).
inline uint32_t above(fvec x, float bound) {
  const i32x beats = x > bound;
  uint32_t bits = 0;
  for (int64_t i = 0; i < W; ++i) bits |= static_cast<uint32_t>(beats[i] & 1) << i;
  return bits;
}

// e^x for W values, Cephes' expf (within 2 ulp of libm's): x = n·ln 2 + r with |r| ≤ ln 2 / 2,
// e^r by a degree-6 polynomial, 2^n built in the exponent bits. Inputs below -87.3 give e^-87.3
// (~1e-38) instead of underflowing: a softmax's sum of 8,000 terms does not see the difference.
inline fvec exp(fvec x) {
  const fvec lowest = fvec{} - 87.3365448f, highest = fvec{} + 88.7228394f;
  x = x < lowest ? lowest : x;
  x = x > highest ? highest : x;
  const fvec magic = fvec{} + 12582912.f;  // 1.5 · 2²³: adding it rounds to the nearest integer
  const fvec n = (x * 1.44269504f + magic) - magic;
  const fvec r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln 2 in two parts, exactly
  fvec p = fvec{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const fvec y = p * r * r + r + 1.f;
  const i32x bits = (__builtin_convertvector(n, i32x) + 127) << 23;  // 2^n
  fvec scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

}  // namespace attnlab
