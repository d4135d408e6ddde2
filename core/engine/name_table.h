// The engine's name table (internal): keys or partitions of one pipeline by name, and the hash
// it probes with.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/engine/types.h"
#include "core/result.h"

namespace tidemark::core::detail {

// The hash: not stable across releases (nothing stored or emitted depends on it, see NameTable),
// so it is tuned for speed, unlike core/hash.h.
// Keys and partition names are short (device ids, topics): read them 8 bytes at a time with
// overlapping loads instead of a byte loop, and compare them the same way before memcmp.
TM_HOT uint64_t load_u64(const char* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
TM_HOT uint64_t load_u32(const char* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The full 128-bit product of two 64-bit words, as its halves.
struct Product128 {
    uint64_t lo;
    uint64_t hi;
};

// For targets without a 128-bit integer type (armhf): four 32x32->64 multiplies. Defined on
// every target, so that a test compares it with the __int128 product where there is one.
// The middle sum cannot overflow: (2^32-1) + (2^32-1) + (2^32-1)^2 = 2^64 - 1.
constexpr Product128 mul_64x64_portable(uint64_t a, uint64_t b) {
    const uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32;
    const uint64_t b_lo = b & 0xffffffffu, b_hi = b >> 32;
    const uint64_t lo_lo = a_lo * b_lo;
    const uint64_t lo_hi = a_lo * b_hi;
    const uint64_t hi_lo = a_hi * b_lo;
    const uint64_t hi_hi = a_hi * b_hi;
    const uint64_t middle = (lo_lo >> 32) + (lo_hi & 0xffffffffu) + hi_lo;
    return {(middle << 32) | (lo_lo & 0xffffffffu), hi_hi + (lo_hi >> 32) + (middle >> 32)};
}

#if defined(__SIZEOF_INT128__)
__extension__ using uint128 = unsigned __int128;

// The 64x64->128 multiply-and-fold of wyhash: one multiply mixes two words.
TM_HOT uint64_t mum(uint64_t a, uint64_t b) {
    const uint128 r = static_cast<uint128>(a) * b;
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}
#else
// The same fold from the portable product: the same hash values as on 64-bit targets.
TM_HOT uint64_t mum(uint64_t a, uint64_t b) {
    const Product128 r = mul_64x64_portable(a, b);
    return r.lo ^ r.hi;
}
#endif

TM_HOT uint64_t hash_name(std::string_view s) {
    constexpr uint64_t k0 = 0xa0761d6478bd642fULL, k1 = 0xe7037ed1a0b428dbULL,
                       k2 = 0x8ebc6af09c88c6e3ULL;
    const char* p = s.data();
    const size_t n = s.size();
    uint64_t seed = k0 ^ n;
    uint64_t a = 0, b = 0;
    if (n > 16) {
        size_t i = 0;
        for (; n - i > 16; i += 16)
            seed = mum(load_u64(p + i) ^ k1, load_u64(p + i + 8) ^ seed);
        a = load_u64(p + n - 16);
        b = load_u64(p + n - 8);
    } else if (n >= 8) {
        a = load_u64(p);
        b = load_u64(p + n - 8);
    } else if (n >= 4) {
        a = load_u32(p);
        b = load_u32(p + n - 4);
    } else if (n > 0) {
        const auto byte = [&](size_t i) {
            return static_cast<uint64_t>(static_cast<uint8_t>(p[i]));
        };
        a = (byte(0) << 16) | (byte(n / 2) << 8) | byte(n - 1);
    }
    return mum(k1 ^ n, mum(a ^ k1, b ^ seed ^ k2));
}

TM_HOT bool same_name(std::string_view a, std::string_view b) {
    const size_t n = a.size();
    if (n != b.size()) return false;
    if (n >= 8 && n <= 16)
        return load_u64(a.data()) == load_u64(b.data()) &&
               load_u64(a.data() + n - 8) == load_u64(b.data() + n - 8);
    return std::memcmp(a.data(), b.data(), n) == 0;
}

// The keys or partitions of one pipeline by name: open addressing with linear probing over
// (hash, pointer), so a lookup is one probe of a flat array and, on a hash match, one compare.
// Erasing shifts the following entries back, so no tombstones accumulate.
// Limits: at most half full (it doubles); holds what the pipeline bounds by keys_max. The
// table does not own the items. Its order is arbitrary: nothing that reaches output may
// depend on it.
template <class T>
class NameTable {
  public:
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

    TM_HOT T* find(std::string_view name, uint64_t hash) const {
        if (slots_.empty()) return nullptr;
        for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (!s.item) return nullptr;
            if (s.hash == hash && same_name(name_of(*s.item), name)) return s.item;
        }
    }

    // Engine::prefetch's hints, no effect on results: the slot a lookup of `hash` probes
    // first, and the first item stored under `hash` (not compared by name: a wrong guess only
    // costs a wasted prefetch).
    TM_HOT void prefetch_slot(uint64_t hash) const {
        if (!slots_.empty()) __builtin_prefetch(&slots_[hash & mask_]);
    }
    TM_HOT T* probe_hash(uint64_t hash) const {
        if (slots_.empty()) return nullptr;
        for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (!s.item || s.hash == hash) return s.item;
        }
    }

    // `item->name` must not be in the table yet.
    void insert(T* item, uint64_t hash) {
        if (2 * (size_ + 1) > slots_.size()) grow();
        size_t i = hash & mask_;
        while (slots_[i].item)
            i = (i + 1) & mask_;
        slots_[i] = {hash, item};
        ++size_;
    }

    void erase(std::string_view name, uint64_t hash) {
        TM_ASSERT(!slots_.empty());
        size_t i = hash & mask_;
        while (!(slots_[i].hash == hash && same_name(name_of(*slots_[i].item), name))) {
            TM_ASSERT(slots_[i].item != nullptr);
            i = (i + 1) & mask_;
        }
        // Backward shift: move up every following entry whose home is at or before the hole.
        for (size_t j = (i + 1) & mask_; slots_[j].item; j = (j + 1) & mask_) {
            const size_t home = slots_[j].hash & mask_;
            if (((j - home) & mask_) >= ((j - i) & mask_)) {
                slots_[i] = slots_[j];
                i = j;
            }
        }
        slots_[i] = {};
        --size_;
    }

    template <class F>
    void for_each(F&& f) const {
        for (const Slot& s : slots_)
            if (s.item) f(*s.item);
    }

  private:
    struct Slot {
        uint64_t hash = 0;
        T* item = nullptr;
    };

    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(std::max<size_t>(16, 2 * old.size()), Slot{});
        mask_ = slots_.size() - 1;
        for (const Slot& s : old) {
            if (!s.item) continue;
            size_t i = s.hash & mask_;
            while (slots_[i].item)
                i = (i + 1) & mask_;
            slots_[i] = s;
        }
    }

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t size_ = 0;
};

}  // namespace tidemark::core::detail
