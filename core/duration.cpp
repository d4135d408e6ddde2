#include "core/duration.h"

#include <charconv>
#include <limits>
#include <span>
#include <system_error>

namespace tidemark::core {

namespace {

struct Unit {
    std::string_view name;
    uint64_t factor;
};

// Largest first, so that formatting picks the largest unit that divides exactly.
constexpr Unit duration_units[] = {
    {"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1'000}, {"ms", 1}};
constexpr std::string_view duration_units_list = "ms, s, m, h, d";

constexpr uint64_t kibi = 1024;
constexpr Unit size_units_binary[] = {{"TiB", kibi* kibi* kibi* kibi},
                                      {"GiB", kibi* kibi* kibi},
                                      {"MiB", kibi* kibi},
                                      {"KiB", kibi},
                                      {"B", 1}};
constexpr Unit size_units_decimal[] = {
    {"TB", 1'000'000'000'000}, {"GB", 1'000'000'000}, {"MB", 1'000'000}, {"KB", 1'000}};
constexpr std::string_view size_units_list = "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB";

std::string quoted(std::string_view text) {
    std::string out = "\"";
    out.append(text);
    out.push_back('"');
    return out;
}

const Unit* find_unit(std::span<const Unit> units, std::string_view name) {
    for (const Unit& unit : units) {
        if (unit.name == name) return &unit;
    }
    return nullptr;
}

struct Quantity {
    uint64_t number = 0;
    uint64_t factor = 0;
};

// Shared grammar of durations and sizes: digits, then a unit, nothing else. `what` names the
// kind of value in messages; `hint` is appended to every error so that it says what to write.
Result<Quantity> parse_quantity(std::string_view text, std::string_view what,
                                std::span<const Unit> units_a, std::span<const Unit> units_b,
                                std::string_view hint) {
    const std::string head = std::string(what) + " " + quoted(text);
    if (text.empty()) return fail(std::string(what) + " is empty: " + std::string(hint));
    if (text.front() == '-') return fail(head + " is negative: " + std::string(hint));
    size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
        ++digits;
    if (digits == 0) {
        return fail(head + " does not start with a whole number: " + std::string(hint));
    }
    Quantity quantity;
    const char* first = text.data();
    auto [end, errc] = std::from_chars(first, first + digits, quantity.number);
    if (errc == std::errc::result_out_of_range) {
        return fail(head + " is too large: " + std::string(hint));
    }
    TM_ASSERT(errc == std::errc() && end == first + digits);
    const std::string_view unit_name = text.substr(digits);
    if (unit_name.empty()) return fail(head + " has no unit: " + std::string(hint));
    if (unit_name.front() == '.' || unit_name.front() == ',') {
        return fail(head + " is not a whole number (use a smaller unit): " + std::string(hint));
    }
    const Unit* unit = find_unit(units_a, unit_name);
    if (unit == nullptr) unit = find_unit(units_b, unit_name);
    if (unit == nullptr) {
        return fail(head + " has an unknown unit " + quoted(unit_name) + ": " + std::string(hint));
    }
    quantity.factor = unit->factor;
    return quantity;
}

std::string spell(uint64_t number, std::string_view unit) {
    std::string out = std::to_string(number);
    out.append(unit);
    return out;
}

}  // namespace

Result<int64_t> parse_duration_ms(std::string_view text) {
    const std::string hint = "write a whole number followed by one of " +
                             std::string(duration_units_list) +
                             ", with no space (e.g. \"250ms\", \"5s\", \"1h\")";
    auto quantity = parse_quantity(text, "duration", duration_units, {}, hint);
    if (!quantity) return std::unexpected(quantity.error());
    constexpr auto max_ms = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (quantity->number > max_ms / quantity->factor) {
        return fail("duration " + quoted(text) + " is too large: the longest is " +
                    std::to_string(max_ms / duration_units[0].factor) + "d");
    }
    return static_cast<int64_t>(quantity->number * quantity->factor);
}

Result<uint64_t> parse_size_bytes(std::string_view text) {
    const std::string hint = "write a whole number followed by one of " +
                             std::string(size_units_list) +
                             ", with no space (e.g. \"64KiB\", \"1GiB\")";
    auto quantity = parse_quantity(text, "size", size_units_binary, size_units_decimal, hint);
    if (!quantity) return std::unexpected(quantity.error());
    constexpr uint64_t max_bytes = std::numeric_limits<uint64_t>::max();
    if (quantity->number > max_bytes / quantity->factor) {
        return fail("size " + quoted(text) + " is too large: the largest is " +
                    std::to_string(max_bytes / size_units_binary[0].factor) + "TiB");
    }
    return quantity->number * quantity->factor;
}

std::string format_duration(int64_t duration_ms) {
    // "0s" rather than "0d": the largest-unit rule reads oddly for zero.
    if (duration_ms == 0) return "0s";
    // The magnitude as unsigned, so that INT64_MIN is spelled too.
    const bool negative = duration_ms < 0;
    const uint64_t magnitude = negative ? uint64_t{0} - static_cast<uint64_t>(duration_ms)
                                        : static_cast<uint64_t>(duration_ms);
    for (const Unit& unit : duration_units) {
        if (magnitude % unit.factor == 0) {
            // Appended in order rather than `"-" + spell(...)`: prepending to a string makes
            // GCC 12 at -O3 report a false -Wrestrict inside char_traits::copy.
            std::string out = negative ? "-" : "";
            out.append(spell(magnitude / unit.factor, unit.name));
            return out;
        }
    }
    TM_ASSERT(false);  // "ms" divides everything
    return {};
}

std::string format_size(uint64_t size_bytes) {
    if (size_bytes == 0) return "0B";
    for (const Unit& unit : size_units_binary) {
        if (unit.factor == 1) break;
        if (size_bytes % unit.factor == 0) return spell(size_bytes / unit.factor, unit.name);
    }
    // Not a whole number of KiB: a power of ten spelling is still easier to read than bytes.
    for (const Unit& unit : size_units_decimal) {
        if (size_bytes % unit.factor == 0) return spell(size_bytes / unit.factor, unit.name);
    }
    return spell(size_bytes, "B");
}

}  // namespace tidemark::core
