# bench_codec: zstd and LZ4 over the log's own bytes, and the flash bytes of the write pattern
# a compressed log would use (issue 30). Built only where both libraries are found.
find_path(TIDEMARK_ZSTD_INCLUDE zstd.h)
find_library(TIDEMARK_ZSTD_LIB zstd)
find_path(TIDEMARK_LZ4_INCLUDE lz4.h)
find_library(TIDEMARK_LZ4_LIB lz4)
if(TIDEMARK_ZSTD_INCLUDE AND TIDEMARK_ZSTD_LIB AND TIDEMARK_LZ4_INCLUDE AND TIDEMARK_LZ4_LIB)
  add_executable(bench_codec ${CMAKE_CURRENT_LIST_DIR}/bench_codec.cpp)
  target_compile_definitions(bench_codec PRIVATE TIDEMARK_CODEC_WITH_LOG)
  target_include_directories(bench_codec PRIVATE ${TIDEMARK_ZSTD_INCLUDE} ${TIDEMARK_LZ4_INCLUDE})
  target_link_libraries(bench_codec PRIVATE tidemark_log ${TIDEMARK_ZSTD_LIB} ${TIDEMARK_LZ4_LIB})
endif()
