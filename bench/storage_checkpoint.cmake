# storage.checkpoint_ms at 1k, 100k and 1M windows with 1% dirty (issue 3).
add_executable(bench_storage_checkpoint ${CMAKE_CURRENT_LIST_DIR}/storage_checkpoint.cpp)
target_link_libraries(bench_storage_checkpoint PRIVATE tidemark_lmdb)
