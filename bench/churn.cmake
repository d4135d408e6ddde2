add_executable(bench_churn ${CMAKE_CURRENT_LIST_DIR}/bench_churn.cpp)
target_link_libraries(bench_churn PRIVATE tidemark_core)
