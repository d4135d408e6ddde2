# bench_outbox_append: what outbox_append writes and costs per row of a backfill's results
# (issue 31); instructions per row under callgrind (see its header).
add_executable(bench_outbox_append ${CMAKE_CURRENT_LIST_DIR}/bench_outbox_append.cpp)
target_link_libraries(bench_outbox_append PRIVATE tidemark_lmdb)
