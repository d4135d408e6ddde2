// docs/SINK.md shows the DDL the sink runs, word for word: a SQL user reads the schema there.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "adapters/postgres/schema.h"

using namespace tidemark;

TEST_CASE("docs/SINK.md holds every migration's DDL as the sink runs it", "[postgres][docs]") {
    const char* source = std::getenv("TIDEMARK_SOURCE_DIR");
    REQUIRE(source != nullptr);
    std::ifstream in(std::string(source) + "/docs/SINK.md");
    REQUIRE(in.good());
    std::stringstream doc;
    doc << in.rdbuf();
    for (const auto& m : postgres::migrations("tidemark")) {
        std::string sql = m.sql;
        while (!sql.empty() && (sql.front() == '\n' || sql.front() == ' '))
            sql.erase(0, 1);
        while (!sql.empty() && (sql.back() == '\n' || sql.back() == ' '))
            sql.pop_back();
        INFO("migration " << m.version << " as docs/SINK.md should show it:\n" << sql);
        CHECK(doc.str().find(sql) != std::string::npos);
    }
}
