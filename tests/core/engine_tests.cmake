# The engine's tests (owned with core/engine.cpp). Included from tests/core/CMakeLists.txt.
tm_test(core_engine_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/engine_test.cpp LIBS tidemark_core LABELS fast)
tm_test(core_engine_property_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/engine_property_test.cpp
        LIBS tidemark_core LABELS fast TIMEOUT 300)
tm_test(core_engine_lifecycle_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/engine_lifecycle_test.cpp
        LIBS tidemark_core LABELS fast)
tm_test(core_state_codec_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/state_codec_test.cpp
        LIBS tidemark_core LABELS fast)
tm_test(core_engine_crossings_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/engine_crossings_test.cpp
        LIBS tidemark_core LABELS fast)
tm_test(core_too_late_windows_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/too_late_windows_test.cpp
        LIBS tidemark_core LABELS fast)
# late.report: per-window too-late tallies for the consumer (issue 29).
tm_test(core_late_report_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/late_report_test.cpp
        LIBS tidemark_core LABELS fast)
