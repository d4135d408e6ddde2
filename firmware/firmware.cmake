find_package(CLI11 CONFIG QUIET)
find_package(spdlog REQUIRED)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET GLOBAL libsystemd)

# sd_notify, on its own so that tests of the protocol need nothing else.
add_library(tidemark_notify STATIC ${CMAKE_CURRENT_LIST_DIR}/notify.cpp)
target_link_libraries(tidemark_notify PUBLIC PkgConfig::SYSTEMD)

# Everything but main(), so that tests can drive the runtime and the commands in-process:
# the pieces the three share at the top (adapter options, build info, clocks, units), the
# appliance's daemon in service/, the sink's in sink/, and one command_<name> per command in
# commands/ (docs/ARCHITECTURE.md lists them).
add_library(tidemark_firmware STATIC
  ${CMAKE_CURRENT_LIST_DIR}/adapter_options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/build_info.cpp
  ${CMAKE_CURRENT_LIST_DIR}/clock.cpp
  ${CMAKE_CURRENT_LIST_DIR}/human_units.cpp
)
file(GLOB tidemark_firmware_parts CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/service/*.cpp
     ${CMAKE_CURRENT_LIST_DIR}/sink/*.cpp ${CMAKE_CURRENT_LIST_DIR}/commands/*.cpp)
target_sources(tidemark_firmware PRIVATE ${tidemark_firmware_parts})
target_link_libraries(tidemark_firmware PUBLIC tidemark_core tidemark_config tidemark_codec
  tidemark_log tidemark_lmdb tidemark_mqtt tidemark_postgres tidemark_notify spdlog::spdlog
  Threads::Threads)
find_package(nlohmann_json REQUIRED)
target_link_libraries(tidemark_firmware PRIVATE nlohmann_json::nlohmann_json)

add_executable(tidemark ${CMAKE_CURRENT_LIST_DIR}/main.cpp)
target_compile_definitions(tidemark PRIVATE TIDEMARK_VERSION="${PROJECT_VERSION}")
target_link_libraries(tidemark PRIVATE tidemark_firmware)
