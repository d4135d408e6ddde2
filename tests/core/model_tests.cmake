# The reference model of the engine and the randomized properties that compare the engine with
# it (issue 11). Included from tests/core/CMakeLists.txt.
add_library(tidemark_reference_model STATIC ${CMAKE_CURRENT_SOURCE_DIR}/reference_model.cpp
                                            ${CMAKE_CURRENT_SOURCE_DIR}/scenario.cpp)
target_link_libraries(tidemark_reference_model PUBLIC tidemark_core)

tm_test(core_differential_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/differential_test.cpp
        LIBS tidemark_reference_model LABELS fast TIMEOUT 300)
tm_test(core_restore_property_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/restore_property_test.cpp
        LIBS tidemark_reference_model LABELS fast TIMEOUT 300)

# scripts/soak runs this with fresh seeds for as long as asked; not a ctest test.
add_executable(core_soak ${CMAKE_CURRENT_SOURCE_DIR}/soak_main.cpp)
target_link_libraries(core_soak PRIVATE tidemark_reference_model)
# Sessions at the edges of the per-event fast path (issue 31), against the model too.
tm_test(core_session_fast_path_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/session_fast_path_test.cpp
        LIBS tidemark_reference_model LABELS fast)
