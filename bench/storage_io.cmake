if(TARGET tidemark_firmware)
  add_executable(bench_storage_io ${CMAKE_CURRENT_LIST_DIR}/bench_storage_io.cpp)
  target_link_libraries(bench_storage_io PRIVATE tidemark_firmware)
endif()
