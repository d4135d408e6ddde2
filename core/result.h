// Expected failures are values: a Result<T> holds either T or an Error a person can act on.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <expected>
#include <string>
#include <utility>

namespace tidemark {

/// What went wrong, in a sentence that names the bad input and says what to do.
struct Error {
    std::string message;
    int code = 0;  // 0: no particular kind; a caller that must tell kinds apart defines codes
};

template <typename T>
using Result = std::expected<T, Error>;

/// Shorthand for returning a failure: `return fail("...")`.
inline std::unexpected<Error> fail(std::string message) {
    return std::unexpected<Error>(Error{std::move(message)});
}

/// Assertion that stays on in release builds: programmer errors stop the process.
[[noreturn]] inline void assert_fail(const char* expr, const char* file, int line) {
    std::fprintf(stderr, "tidemark: assertion failed: %s at %s:%d\n", expr, file, line);
    std::abort();
}

}  // namespace tidemark

#define TM_ASSERT(expr) \
    ((expr) ? static_cast<void>(0) : ::tidemark::assert_fail(#expr, __FILE__, __LINE__))
