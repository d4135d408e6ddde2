// Reading structured choices out of a fuzzer's bytes (what FuzzedDataProvider does, without a
// dependency on clang's headers, so the corpus tests build with GCC too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace tidemark::fuzz {

/// Consumes from the front; once the bytes run out every read returns zeros / empty, so a
/// target never reads past its input.
class Input {
  public:
    Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}

    uint8_t byte() { return size_ > 0 ? (--size_, *data_++) : 0; }
    uint32_t u32() {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i)
            v = (v << 8) | byte();
        return v;
    }
    /// A value in [0, n) (n > 0).
    uint32_t below(uint32_t n) { return n == 0 ? 0 : u32() % n; }
    bool flag() { return (byte() & 1) != 0; }
    /// Up to max_bytes bytes, length chosen by the input.
    std::string bytes(size_t max_bytes) {
        size_t n = below(static_cast<uint32_t>(max_bytes + 1));
        if (n > size_) n = size_;
        std::string out(reinterpret_cast<const char*>(data_), n);
        data_ += n;
        size_ -= n;
        return out;
    }
    std::string_view rest() const { return {reinterpret_cast<const char*>(data_), size_}; }
    bool empty() const { return size_ == 0; }

  private:
    const uint8_t* data_;
    size_t size_;
};

/// An invariant of the code under test failed: abort so the fuzzer keeps the input.
[[noreturn]] inline void violated(const char* what) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    std::abort();
}

}  // namespace tidemark::fuzz

#define TM_FUZZ_CHECK(cond)                             \
    do {                                                \
        if (!(cond)) ::tidemark::fuzz::violated(#cond); \
    } while (0)
