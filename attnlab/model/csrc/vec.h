// Vector helpers shared by attnlab's kernels: 16 floats as one value, loads from fp32 and bf16,
// and e^x for 16 values at once.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>

namespace attnlab {

// 16 floats as one value: GCC and Clang lower it to one AVX-512 register, two AVX2 ones or four
// SSE ones, whatever the machine (-march=native) has.
typedef float f16x __attribute__((vector_size(64)));
typedef uint16_t u16x __attribute__((vector_size(32)));
typedef uint32_t u32x __attribute__((vector_size(64)));
constexpr int64_t W = 16;

inline f16x load(const float* p) {
  f16x x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
inline f16x load(const c10::BFloat16* p) {  // bf16 is the top half of an fp32: widen and shift
  u16x half;
  std::memcpy(&half, p, sizeof half);
  u32x wide = __builtin_convertvector(half, u32x) << 16;
  f16x x;
  std::memcpy(&x, &wide, sizeof x);
  return x;
}
inline float widen(float x) { return x; }
inline float widen(c10::BFloat16 x) { return static_cast<float>(x); }

template <typename T>
inline void prefetch(const T* p, int64_t n) {  // the cache lines of n values
  const char* bytes = reinterpret_cast<const char*>(p);
  for (int64_t i = 0; i < n * static_cast<int64_t>(sizeof(T)); i += 64) __builtin_prefetch(bytes + i);
}

inline float sum(f16x x) {
  float s = 0.f;
  for (int64_t i = 0; i < W; ++i) s += x[i];
  return s;
}

typedef int32_t i32x __attribute__((vector_size(64)));

// The largest of 16 values, in four halvings (a scalar loop over the lanes is 15 dependent steps).
inline float largest(f16x x) {
  f16x y = __builtin_shuffle(x, i32x{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
  x = y > x ? y : x;
  y = __builtin_shuffle(x, i32x{4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
  x = y > x ? y : x;
  y = __builtin_shuffle(x, i32x{2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
  x = y > x ? y : x;
  y = __builtin_shuffle(x, i32x{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
  x = y > x ? y : x;
  return x[0];
}

// Bit i set where x[i] > bound (one mask register's worth on AVX-512).
inline uint32_t above(f16x x, float bound) {
  const i32x beats = x > bound;
  uint32_t bits = 0;
  for (int64_t i = 0; i < W; ++i) bits |= static_cast<uint32_t>(beats[i] & 1) << i;
  return bits;
}

// e^x for 16 values, Cephes' expf (within 2 ulp of libm's): x = n·ln 2 + r with |r| ≤ ln 2 / 2,
// e^r by a degree-6 polynomial, 2^n built in the exponent bits. Inputs below -87.3 give e^-87.3
// (~1e-38) instead of underflowing: a softmax's sum of 8,000 terms does not see the difference.
inline f16x exp(f16x x) {
  const f16x lowest = f16x{} - 87.3365448f, highest = f16x{} + 88.7228394f;
  x = x < lowest ? lowest : x;
  x = x > highest ? highest : x;
  const f16x magic = f16x{} + 12582912.f;  // 1.5 · 2²³: adding it rounds to the nearest integer
  const f16x n = (x * 1.44269504f + magic) - magic;
  const f16x r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln 2 in two parts, exactly
  f16x p = f16x{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const f16x y = p * r * r + r + 1.f;
  const i32x bits = (__builtin_convertvector(n, i32x) + 127) << 23;  // 2^n
  f16x scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

}  // namespace attnlab
