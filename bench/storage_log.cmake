# bench_storage_log: log appends per second beside a bare write() loop of the same bytes.
add_executable(bench_storage_log ${CMAKE_CURRENT_LIST_DIR}/storage_log.cpp)
target_link_libraries(bench_storage_log PRIVATE tidemark_log)
