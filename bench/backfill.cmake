# bench_backfill: a new pipeline backfills the log's history beside live ingest (issue 13): its
# rate against `tidemark replay`'s, and how much later live results leave meanwhile.
add_executable(bench_backfill ${CMAKE_CURRENT_LIST_DIR}/bench_backfill.cpp)
target_link_libraries(bench_backfill PRIVATE tidemark_firmware)
