find_package(CLI11 CONFIG QUIET)
find_package(spdlog REQUIRED)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET GLOBAL libsystemd)

# sd_notify, on its own so that tests of the protocol need nothing else.
add_library(tidemark_notify STATIC ${CMAKE_CURRENT_LIST_DIR}/notify.cpp)
target_link_libraries(tidemark_notify PUBLIC PkgConfig::SYSTEMD)

# Everything but main(), so that tests can drive the runtime and the commands in-process.
add_library(tidemark_firmware STATIC
  ${CMAKE_CURRENT_LIST_DIR}/alarms.cpp
  ${CMAKE_CURRENT_LIST_DIR}/backfill.cpp
  ${CMAKE_CURRENT_LIST_DIR}/build_info.cpp
  ${CMAKE_CURRENT_LIST_DIR}/clock.cpp
  ${CMAKE_CURRENT_LIST_DIR}/engine_host.cpp
  ${CMAKE_CURRENT_LIST_DIR}/engine_host_versions.cpp
  ${CMAKE_CURRENT_LIST_DIR}/health_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/human_units.cpp
  ${CMAKE_CURRENT_LIST_DIR}/status_text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/status_view.cpp
  ${CMAKE_CURRENT_LIST_DIR}/log_appender.cpp
  ${CMAKE_CURRENT_LIST_DIR}/processor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prometheus_text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/replay.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/adapter_options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/result_sinks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/service_parts.cpp
  ${CMAKE_CURRENT_LIST_DIR}/too_late_alarm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/upstream_health.cpp
  ${CMAKE_CURRENT_LIST_DIR}/version_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/versions.cpp
)
file(GLOB tidemark_firmware_commands ${CMAKE_CURRENT_LIST_DIR}/command_*.cpp)
target_sources(tidemark_firmware PRIVATE ${tidemark_firmware_commands})
# The sink (issue 27): its service pieces in sink/, its command in commands/ (issue 26's layout).
file(GLOB tidemark_firmware_sink CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/sink/*.cpp
     ${CMAKE_CURRENT_LIST_DIR}/commands/*.cpp)
target_sources(tidemark_firmware PRIVATE ${tidemark_firmware_sink})
target_link_libraries(tidemark_firmware PUBLIC tidemark_core tidemark_config tidemark_codec
  tidemark_log tidemark_lmdb tidemark_mqtt tidemark_postgres tidemark_notify spdlog::spdlog
  Threads::Threads)
find_package(nlohmann_json REQUIRED)
target_link_libraries(tidemark_firmware PRIVATE nlohmann_json::nlohmann_json)

add_executable(tidemark ${CMAKE_CURRENT_LIST_DIR}/main.cpp)
target_compile_definitions(tidemark PRIVATE TIDEMARK_VERSION="${PROJECT_VERSION}")
target_link_libraries(tidemark PRIVATE tidemark_firmware)
