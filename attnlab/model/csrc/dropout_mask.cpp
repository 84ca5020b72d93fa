// Dropout's keep mask (§5.4): element i is kept, 1, where its 16 random bits are at least
// `threshold` = round(P_drop · 2¹⁶), else dropped, 0; written in x's dtype, ready to multiply.
//
// PyTorch's CPU generator is a Mersenne Twister, one serial draw after another: 1.0-1.8 ms for
// the 261k words of one base-sized mask on two cores, 12% of a `small` bf16 forward pass. A
// counter-based generator has no state to thread through: word j of a mask is SplitMix64's
// output function of seed + (j + 1)·φ (Steele, Lea & Flood, 2014; it passes BigCrush), so any
// thread computes any word, eight at a time in one vector, and the mask costs ~80 µs. Element i
// reads the 16-bit field i % 4 of word i / 4, as attnlab's PyTorch path reads its int64 words.
// The seed is drawn from PyTorch's generator, so `torch.manual_seed` and a resumed run's saved
// generator state fix every mask, as before.
#include "kernels.h"

#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>

namespace {

typedef uint64_t u64x8 __attribute__((vector_size(64)));
typedef uint16_t u16x32 __attribute__((vector_size(64)));
typedef int16_t i16x16 __attribute__((vector_size(32)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
constexpr uint64_t GOLDEN = 0x9e3779b97f4a7c15ULL;  // 2⁶⁴/φ, SplitMix64's increment

template <typename V>
inline V mix(V z) {  // SplitMix64's output function, of one word or eight
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint16_t field(uint64_t seed, int64_t i) {  // element i's 16 random bits
  return static_cast<uint16_t>(mix(seed + static_cast<uint64_t>(i / 4 + 1) * GOLDEN) >> (16 * (i % 4)));
}

// 32 elements' keep flags (each all ones or 0) as the bits of 1 or 0 in the output's dtype
inline void store(uint16_t* out, u16x32 kept, uint16_t one) {  // bf16: the flags masked to 1's bits
  const u16x32 bits = kept & one;
  std::memcpy(out, &bits, sizeof(bits));
}

inline void store(uint32_t* out, u16x32 kept, uint32_t one) {  // fp32: sign-extended, 16 at a time
  for (int half = 0; half < 2; ++half) {
    i16x16 part;  // a flag of all ones is -1, which widens to 32 ones
    std::memcpy(&part, reinterpret_cast<const uint16_t*>(&kept) + 16 * half, sizeof(part));
    const i32x16 bits = __builtin_convertvector(part, i32x16) & static_cast<int32_t>(one);
    std::memcpy(out + 16 * half, &bits, sizeof(bits));
  }
}

template <typename U>
void fill(U* out, int64_t n, uint64_t seed, uint16_t threshold, U one) {
  const int64_t blocks = n / 32;  // 32 elements: 8 words, one vector
  at::parallel_for(0, blocks, 256, [&](int64_t begin, int64_t end) {
    const u64x8 lane = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int64_t b = begin; b < end; ++b) {
      const u64x8 z = mix(seed + (static_cast<uint64_t>(8 * b) + lane) * GOLDEN);
      // the 8 words read as 32 16-bit fields are elements 32b … 32b + 31, in order (little-endian)
      store(out + 32 * b, reinterpret_cast<u16x32>(reinterpret_cast<u16x32>(z) >= threshold), one);
    }
  });
  for (int64_t i = 32 * blocks; i < n; ++i) out[i] = field(seed, i) >= threshold ? one : U(0);
}

}  // namespace

namespace attnlab {

torch::Tensor dropout_keep(const torch::Tensor& like, int64_t seed, int64_t threshold) {
  TORCH_CHECK(0 <= threshold && threshold <= 0xFFFF, "dropout_keep: threshold must be in [0, 65535]");
  auto out = torch::empty(like.sizes(), like.options().memory_format(at::MemoryFormat::Contiguous));
  const auto u = static_cast<uint64_t>(seed);
  const auto t = static_cast<uint16_t>(threshold);
  if (out.scalar_type() == at::kFloat) {
    fill(reinterpret_cast<uint32_t*>(out.data_ptr()), out.numel(), u, t, uint32_t{0x3F800000});  // 1.0f
  } else {
    TORCH_CHECK(out.scalar_type() == at::kBFloat16, "dropout_keep: fp32 or bf16");
    fill(reinterpret_cast<uint16_t*>(out.data_ptr()), out.numel(), u, t, uint16_t{0x3F80});  // bf16's 1
  }
  return out;
}

}  // namespace attnlab
