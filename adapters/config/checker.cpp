#include "adapters/config/checker.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/duration.h"

namespace tidemark::config::detail {
namespace {

constexpr size_t name_bytes_max = 64;

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j)
        row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = above;
        }
    }
    return row[b.size()];
}

}  // namespace

std::string escape_pointer_token(std::string_view token) {
    std::string out;
    for (char c : token) {
        if (c == '~') {
            out += "~0";
        } else if (c == '/') {
            out += "~1";
        } else {
            out += c;
        }
    }
    return out;
}

std::string child(const std::string& pointer, std::string_view key) {
    return pointer + "/" + escape_pointer_token(key);
}
std::string child(const std::string& pointer, size_t index) {
    return pointer + "/" + std::to_string(index);
}

// Appended in order rather than `"\"" + std::string(s)`: prepending to a string makes GCC 12
// at -O3 report a false -Wrestrict inside char_traits::copy (as in core/duration.cpp).
std::string in_quotes(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    out.append(s);
    out += '"';
    return out;
}

std::string show(const Json& j) {
    std::string text = j.dump();
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return text;
}

std::string type_phrase(const Json& j) {
    switch (j.type()) {
        case Json::value_t::null:
            return "null";
        case Json::value_t::boolean:
            return "the boolean " + show(j);
        case Json::value_t::string:
            return "the string " + show(j);
        case Json::value_t::object:
            return "an object";
        case Json::value_t::array:
            return "an array";
        default:
            return "the number " + show(j);
    }
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += separator;
        out += items[i];
    }
    return out;
}

std::string approx_size(uint64_t bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024 && unit < 6) {
        value /= 1024;
        ++unit;
    }
    char buffer[32];
    if (unit == 0 || std::fmod(value, 1.0) == 0) {
        std::snprintf(buffer, sizeof buffer, "%.0f%s", value, units[unit]);
    } else {
        std::snprintf(buffer, sizeof buffer, "%.1f%s", value, units[unit]);
    }
    return buffer;
}

bool is_name(std::string_view s) {
    if (s.empty() || s.size() > name_bytes_max) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    });
}

const Json* Checker::member(const Json& object, std::string_view key) {
    auto it = object.find(std::string(key));
    return it == object.end() ? nullptr : &*it;
}

const Json* Checker::field(const Json& object, const std::string& pointer, std::string_view key,
                           bool (Json::*is_type)() const noexcept, std::string_view expected,
                           std::string_view required_hint) {
    const Json* j = member(object, key);
    if (!j) {
        if (!required_hint.empty()) missing(child(pointer, key), required_hint);
        return nullptr;
    }
    if (is_type && !((*j).*is_type)()) {
        error(child(pointer, key),
              "expected " + std::string(expected) + ", found " + type_phrase(*j));
        return nullptr;
    }
    return j;
}

bool Checker::expect_object(const Json& j, const std::string& pointer, std::string_view example) {
    if (j.is_object()) return true;
    error(pointer,
          "expected an object such as " + std::string(example) + ", found " + type_phrase(j));
    return false;
}

Section Checker::section(const Json& parent, const std::string& parent_pointer,
                         std::string_view key, std::string_view example,
                         std::initializer_list<std::string_view> allowed,
                         std::string_view required_hint) {
    Section s;
    s.pointer = child(parent_pointer, key);
    const Json* j = member(parent, key);
    if (!j) {
        if (!required_hint.empty()) missing(s.pointer, required_hint);
        return s;
    }
    if (!expect_object(*j, s.pointer, example)) return s;
    if (allowed.size() != 0) check_keys(*j, s.pointer, allowed);
    s.json = j;
    return s;
}

void Checker::check_keys(const Json& object, const std::string& pointer,
                         std::initializer_list<std::string_view> allowed,
                         std::string_view context) {
    std::vector<std::string> names(allowed.begin(), allowed.end());
    for (const auto& [key, value] : object.items()) {
        if (std::find(names.begin(), names.end(), key) != names.end()) continue;
        // Known, refused with its own sentence by read_credentials.
        if (key == "password" &&
            std::find(names.begin(), names.end(), "password_file") != names.end()) {
            continue;
        }
        std::string message = "unknown key ";  // appended, not prepended: see in_quotes
        message.append(in_quotes(key));
        if (!context.empty()) message.append(" ").append(context);
        message.append(": allowed keys are ").append(join(names, ", "));
        size_t best = 3;
        std::string suggestion;
        for (const auto& name : names) {
            size_t d = edit_distance(key, name);
            if (d < best) {
                best = d;
                suggestion = name;
            }
        }
        if (!suggestion.empty()) {
            message.append(" (did you mean ").append(in_quotes(suggestion)).append("?)");
        }
        error(child(pointer, key), message);
    }
}

bool Checker::read_string(const Json& object, const std::string& pointer, std::string_view key,
                          std::string& out, std::string_view required_hint) {
    const Json* j = field(object, pointer, key, &Json::is_string, "a string", required_hint);
    if (!j) return false;
    out = j->get<std::string>();
    return true;
}

bool Checker::read_duration(const Json& object, const std::string& pointer, std::string_view key,
                            int64_t& out, bool positive, std::string_view required_hint) {
    const Json* j = field(object, pointer, key, &Json::is_string,
                          "a duration string such as \"5s\"", required_hint);
    if (!j) return false;
    auto text = j->get<std::string>();
    auto parsed = core::parse_duration_ms(text);
    if (!parsed) {
        error(child(pointer, key),
              in_quotes(text) + " is not a duration: use a number followed by ms, s, m, h or d");
        return false;
    }
    if (*parsed < 0 || (positive && *parsed == 0)) {
        error(child(pointer, key),
              in_quotes(text) + " must be " + (positive ? "more than 0" : "0 or more"));
        return false;
    }
    out = *parsed;
    return true;
}

bool Checker::read_size(const Json& object, const std::string& pointer, std::string_view key,
                        uint64_t& out, uint64_t min_bytes, uint64_t max_bytes,
                        std::string_view required_hint) {
    const Json* j = field(object, pointer, key, &Json::is_string, "a size string such as \"64MiB\"",
                          required_hint);
    if (!j) return false;
    auto text = j->get<std::string>();
    auto parsed = core::parse_size_bytes(text);
    if (!parsed) {
        error(child(pointer, key),
              in_quotes(text) + " is not a size: use a number followed by B, KiB, MiB, GiB or TiB");
        return false;
    }
    if (*parsed < min_bytes || *parsed > max_bytes) {
        error(child(pointer, key), in_quotes(text) + " is out of range: use between " +
                                       core::format_size(min_bytes) + " and " +
                                       core::format_size(max_bytes));
        return false;
    }
    out = *parsed;
    return true;
}

bool Checker::read_uint(const Json& object, const std::string& pointer, std::string_view key,
                        uint64_t& out, uint64_t min, uint64_t max, std::string_view required_hint) {
    const Json* j =
        field(object, pointer, key, &Json::is_number_integer, "an integer", required_hint);
    if (!j) return false;
    if (!j->is_number_unsigned() || j->get<uint64_t>() < min || j->get<uint64_t>() > max) {
        error(child(pointer, key), "must be between " + std::to_string(min) + " and " +
                                       std::to_string(max) + ", not " + show(*j));
        return false;
    }
    out = j->get<uint64_t>();
    return true;
}

bool Checker::read_bool(const Json& object, const std::string& pointer, std::string_view key,
                        bool& out) {
    const Json* j = field(object, pointer, key, &Json::is_boolean, "true or false");
    if (!j) return false;
    out = j->get<bool>();
    return true;
}

bool Checker::read_fraction(const Json& object, const std::string& pointer, std::string_view key,
                            double& out, double low, double high, bool high_inclusive,
                            std::string_view required_hint) {
    const Json* j = field(object, pointer, key, &Json::is_number, "a number", required_hint);
    if (!j) return false;
    double v = j->get<double>();
    bool ok = v > low && (high_inclusive ? v <= high : v < high);
    if (!ok) {
        std::ostringstream range;
        range << "must be more than " << low << " and "
              << (high_inclusive ? "at most " : "less than ") << high << ", not " << show(*j);
        error(child(pointer, key), range.str());
        return false;
    }
    out = v;
    return true;
}

std::string Checker::resolve_path(const std::string& path) const {
    std::filesystem::path p(path);
    if (p.is_relative() && !base_dir_.empty()) p = std::filesystem::path(base_dir_) / p;
    return p.lexically_normal().string();
}

bool Checker::readable_file(const std::string& pointer, const std::string& path,
                            std::string_view what, std::string* contents, size_t bytes_max) {
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        error(pointer, "cannot read the " + std::string(what) + " " + in_quotes(path) + ": " +
                           std::strerror(errno ? errno : ENOENT));
        return false;
    }
    if (std::filesystem::is_directory(path)) {
        error(pointer, "the " + std::string(what) + " " + in_quotes(path) + " is a directory");
        return false;
    }
    if (contents) {
        std::string data(bytes_max + 1, '\0');
        in.read(data.data(), static_cast<std::streamsize>(data.size()));
        data.resize(static_cast<size_t>(in.gcount()));
        if (data.size() > bytes_max) {
            error(pointer, "the " + std::string(what) + " " + in_quotes(path) + " is longer than " +
                               std::to_string(bytes_max) + " bytes");
            return false;
        }
        *contents = std::move(data);
    }
    return true;
}

}  // namespace tidemark::config::detail
