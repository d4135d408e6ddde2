# bench_sink: `tidemark sink` against a bare batched libpq upsert of the same rows (issue 27),
# with a real mosquitto and PostgreSQL 15 of its own (tests/support), so it needs the tests' tree.
if(TARGET tidemark_test_postgres AND TARGET tidemark_test_nats AND TARGET tidemark)
  add_executable(bench_sink ${CMAKE_CURRENT_LIST_DIR}/bench_sink.cpp
                            ${CMAKE_CURRENT_LIST_DIR}/sink_baselines.cpp)
  target_link_libraries(bench_sink PRIVATE tidemark_codec tidemark_postgres tidemark_test_postgres
                                         tidemark_test_nats)
  target_compile_definitions(bench_sink PRIVATE TIDEMARK_BINARY="$<TARGET_FILE:tidemark>")
  add_dependencies(bench_sink tidemark)
endif()
