// Each class of config error, through the binary as an operator meets it: `tidemark
// check-config` exits non-zero and names the JSON pointer of every mistake; `tidemark run`
// refuses the file with exit 2 and the same message (DESIGN.md section 6, docs/CONFIG.md).
#include <catch2/catch.hpp>

#include "tests/integration/daemon.h"

namespace tidemark::test {

namespace {

// A config that check-config accepts; every case below breaks one thing in it.
nlohmann::json valid_config(const std::string& data_dir) {
    auto c = base_config("cfg", data_dir, "tcp://127.0.0.1:1", "tcp://127.0.0.1:2");
    c["pipelines"] = {{
        {"name", "p"},
        {"topic", "sensors/+/telemetry"},
        {"key", "topic:1"},
        {"timestamp", {{"pointer", "/ts"}, {"format", "epoch_ms"}}},
        {"fields", {{"v", "/v"}}},
        {"window", {{"type", "tumbling"}, {"size", "10s"}}},
        {"watermark", {{"delay", "1s"}, {"idle_timeout", "2s"}}},
        {"aggregates", {{"n", {{"fn", "count"}}}, {"s", {{"fn", "sum"}, {"field", "v"}}}}},
        {"limits", {{"max_keys", 100}, {"max_open_windows", 10000}}},
    }};
    return c;
}

struct Broken {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> pointers;  // each must appear at the start of an error line
};

bool has_line_starting(const std::string& text, const std::string& prefix) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        if (text.compare(pos, prefix.size(), prefix) == 0) return true;
        pos = end + 1;
    }
    return false;
}

}  // namespace

TEST_CASE("check-config names the JSON pointer of each error; run refuses with exit 2",
          "[integration]") {
    TempDir dir("tidemark-cfg");
    const std::string data_dir = dir.path() + "/data";

    SECTION("the valid base config passes") {
        const auto path = write_config(dir.path(), "ok.json", valid_config(data_dir));
        const auto r = run_tidemark({"check-config", path});
        INFO(r.out << r.err);
        CHECK(r.exit_code == 0);
    }

    const std::vector<Broken> cases = {
        {"unknown key in a pipeline",
         [](nlohmann::json& c) {
             c["pipelines"][0]["windw"] = {{"type", "tumbling"}};
         },
         {"/pipelines/0/windw: "}},
        {"unknown top-level key", [](nlohmann::json& c) { c["colour"] = "blue"; }, {"/colour: "}},
        {"bad duration",
         [](nlohmann::json& c) { c["checkpoint"]["interval"] = "5 parsecs"; },
         {"/checkpoint/interval: "}},
        {"impossible window: hopping advance longer than the window",
         [](nlohmann::json& c) {
             c["pipelines"][0]["window"] = {
                 {"type", "hopping"}, {"size", "10s"}, {"advance", "20s"}};
         },
         {"/pipelines/0/window"}},
        {"impossible window: zero size",
         [](nlohmann::json& c) { c["pipelines"][0]["window"]["size"] = "0s"; },
         {"/pipelines/0/window"}},
        {"key budget: max_keys x windows per key over max_open_windows",
         [](nlohmann::json& c) {
             c["pipelines"][0]["limits"] = {{"max_keys", 100000}, {"max_open_windows", 10}};
         },
         {"/pipelines/0/limits: "}},
        {"state budget over half the map",
         [](nlohmann::json& c) {
             c["storage"]["map_size"] = "1MiB";
             c["pipelines"][0]["limits"] = {{"max_keys", 1000}, {"max_open_windows", 10000000}};
         },
         {"/storage/map_size: "}},
        // Issue 25, finding 7: this used to load as 2025-03-02; the payload codec and replay
        // --from refused it.
        {"backfill.from on a day the calendar does not have",
         [](nlohmann::json& c) {
             c["pipelines"][0]["backfill"] = {{"from", "2025-02-30T00:00:00Z"}};
         },
         {"/pipelines/0/backfill/from: "}},
        {"several mistakes at once are all listed",
         [](nlohmann::json& c) {
             c["pipelines"][0]["windw"] = 1;
             c["checkpoint"]["interval"] = "soon";
             c["pipelines"][0]["aggregates"]["m"] = {{"fn", "mean"}, {"field", "nope"}};
         },
         {"/pipelines/0/windw: ", "/checkpoint/interval: ", "/pipelines/0/aggregates/m"}},
    };

    for (const auto& broken : cases) {
        SECTION(broken.what) {
            auto cfg = valid_config(data_dir);
            broken.edit(cfg);
            const auto path = write_config(dir.path(), "broken.json", cfg);

            const auto check = run_tidemark({"check-config", path});
            INFO("check-config stdout:\n" << check.out << "stderr:\n" << check.err);
            CHECK(check.exit_code != 0);
            for (const auto& p : broken.pointers) {
                INFO("expected an error line starting with " << p);
                CHECK(has_line_starting(check.err + check.out, p));
            }

            const auto run = run_tidemark({"run", "--config", path}, std::chrono::seconds(20));
            INFO("run stdout:\n" << run.out << "stderr:\n" << run.err);
            CHECK(run.exit_code == 2);
            for (const auto& p : broken.pointers)
                CHECK(has_line_starting(run.err, p));
        }
    }

    SECTION("invalid JSON is refused with its position") {
        const std::string path = dir.path() + "/bad.json";
        write_file(path, "{\"node_id\": \"x\",\n  \"pipelines\": [\n");
        const auto check = run_tidemark({"check-config", path});
        INFO(check.out << check.err);
        CHECK(check.exit_code != 0);
        CHECK(!check.err.empty());
        const auto run = run_tidemark({"run", "--config", path}, std::chrono::seconds(20));
        INFO(run.out << run.err);
        CHECK(run.exit_code == 2);
    }

    SECTION("a missing file is refused") {
        const auto run = run_tidemark({"run", "--config", dir.path() + "/absent.json"},
                                      std::chrono::seconds(20));
        INFO(run.out << run.err);
        CHECK(run.exit_code == 2);
        CHECK(run.err.find("absent.json") != std::string::npos);
    }
}

}  // namespace tidemark::test
