// Memory the harness hands to the library: each buffer sits between guard bytes (poisoned for
// AddressSanitizer, so a touch faults at once, and compared after every call, so a stray write
// is caught without it), and keeps a snapshot of its contents to prove what a call did not write.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define FA_FUZZ_ASAN 1
#endif
#endif

namespace fa_fuzz {

class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xA5;

  GuardedBuffer() = default;
  explicit GuardedBuffer(size_t bytes) : size_(bytes) {
    base_ = static_cast<uint8_t*>(std::malloc(bytes + 2 * kGuard));
    std::memset(base_, kGuardByte, kGuard);
    std::memset(base_ + kGuard + bytes, kGuardByte, kGuard);
    poison_guards(true);
  }
  ~GuardedBuffer() {
    if (base_ == nullptr) return;
    poison_guards(false);
    std::free(base_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  uint8_t* data() const { return base_ + kGuard; }
  size_t size() const { return size_; }

  bool guards_intact() const {
    poison_guards(false);
    bool ok = true;
    for (size_t i = 0; i < kGuard; ++i)
      ok = ok && base_[i] == kGuardByte && base_[kGuard + size_ + i] == kGuardByte;
    poison_guards(true);
    return ok;
  }

  // Remember the current contents; unchanged() compares against them.
  void snapshot() { snap_.assign(data(), data() + size_); }
  bool unchanged() const { return size_ == 0 || std::memcmp(snap_.data(), data(), size_) == 0; }

 private:
  void poison_guards(bool on) const {
#ifdef FA_FUZZ_ASAN
    if (on) {
      ASAN_POISON_MEMORY_REGION(base_, kGuard);
      ASAN_POISON_MEMORY_REGION(base_ + kGuard + size_, kGuard);
    } else {
      ASAN_UNPOISON_MEMORY_REGION(base_, kGuard);
      ASAN_UNPOISON_MEMORY_REGION(base_ + kGuard + size_, kGuard);
    }
#else
    (void)on;
#endif
  }

  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::vector<uint8_t> snap_;
};

// fp16 / bf16 <-> float. Values the harness writes are exact in both 16-bit types (k * 2^e,
// |k| <= 255), so only the decoders must be general.
inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }
inline uint16_t float_to_bf16_exact(float f) { return uint16_t(float_to_bits(f) >> 16); }
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  if (exp == 0x1F) return bits_to_float(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
  const float sub = float(mant) * (1.f / 16777216.f);  // subnormal: mant * 2^-24
  return sign ? -sub : sub;
}
// Exact for the harness's values: normal fp16 numbers with at most 11 significant bits.
inline uint16_t float_to_fp16_exact(float f) {
  if (f == 0.f) return std::signbit(f) ? 0x8000 : 0;
  const uint32_t b = float_to_bits(f);
  const uint32_t sign = (b >> 16) & 0x8000, exp = (b >> 23) & 0xFF, mant = b & 0x7FFFFF;
  return uint16_t(sign | ((exp - 112) << 10) | (mant >> 13));
}

}  // namespace fa_fuzz
