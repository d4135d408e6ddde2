#include "adapters/mqtt/default_clock.h"

#include <chrono>

namespace tidemark::mqtt {
namespace {

class HostClock final : public core::Clock {
  public:
    int64_t wall_ms() const override { return since_epoch_ms(std::chrono::system_clock::now()); }
    int64_t steady_ms() const override { return since_epoch_ms(std::chrono::steady_clock::now()); }

  private:
    template <typename TimePoint>
    static int64_t since_epoch_ms(TimePoint t) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
    }
};

}  // namespace

const core::Clock& default_clock() {
    static const HostClock clock;
    return clock;
}

}  // namespace tidemark::mqtt
