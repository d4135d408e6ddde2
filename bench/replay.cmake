# bench_replay: log records through decode and a tumbling pipeline on one core (tidemark replay's
# loop), and what that means for thirty days of a 100-message/s gateway.
add_executable(bench_replay ${CMAKE_CURRENT_LIST_DIR}/bench_replay.cpp)
target_link_libraries(bench_replay PRIVATE tidemark_firmware)
