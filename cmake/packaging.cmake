# Install layout and the Debian package. Included from the top-level CMakeLists.txt after the
# targets exist: `include(cmake/packaging.cmake)`.
#
#   cmake --install BUILD --prefix /usr      the layout below, under DESTDIR if set
#   cpack -G DEB --config BUILD/CPackConfig.cmake    tidemark_<version>_<arch>.deb
#
# Paths are relative to the prefix (/usr for the package) except /etc, which is absolute: the
# config lives in /etc whatever the prefix. Units, sysusers and tmpfiles go under /usr/lib, which
# systemd always reads (on Debian 12 /lib is a link to it).

# `cmake --install` and cpack install what is built instead of building every target first: the
# package needs the binary only, and its test should not wait for (or fail on) the benchmarks.
# Build before installing, as usual: `cmake --build BUILD --target tidemark`.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

set(_tm_systemd_dir ${CMAKE_CURRENT_LIST_DIR}/../systemd)
cmake_path(NORMAL_PATH _tm_systemd_dir)

# The config installed as /etc/tidemark/tidemark.json: the example config, one file for the docs,
# the tests and the package, so they cannot drift apart.
set(TIDEMARK_SERVICE_CONFIG "${PROJECT_SOURCE_DIR}/examples/tidemark.json"
    CACHE FILEPATH "Config installed as /etc/tidemark/tidemark.json (a dpkg conffile)")

if(TARGET tidemark)
  install(TARGETS tidemark RUNTIME DESTINATION bin)
else()
  message(STATUS "packaging: no tidemark target yet; the package will not hold the binary")
endif()

if(EXISTS "${TIDEMARK_SERVICE_CONFIG}")
  install(FILES "${TIDEMARK_SERVICE_CONFIG}" DESTINATION /etc/tidemark RENAME tidemark.json
          PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
else()
  message(WARNING "packaging: ${TIDEMARK_SERVICE_CONFIG} does not exist; the package will have "
                  "no /etc/tidemark/tidemark.json. Set TIDEMARK_SERVICE_CONFIG to the config to ship.")
endif()

# systemd reads only *.conf in sysusers.d and tmpfiles.d.
install(FILES ${_tm_systemd_dir}/tidemark.service DESTINATION lib/systemd/system
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
install(FILES ${_tm_systemd_dir}/tidemark.sysusers DESTINATION lib/sysusers.d
        RENAME tidemark.conf PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
install(FILES ${_tm_systemd_dir}/tidemark.tmpfiles DESTINATION lib/tmpfiles.d
        RENAME tidemark.conf PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
install(FILES ${_tm_systemd_dir}/../docs/OPERATIONS.md DESTINATION share/doc/tidemark
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
# The sink (docs/SINK.md): its unit, not enabled by the package, its guide and an example config.
install(FILES ${_tm_systemd_dir}/tidemark-sink.service DESTINATION lib/systemd/system
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
install(FILES ${_tm_systemd_dir}/../docs/SINK.md ${_tm_systemd_dir}/../examples/sink.json
        DESTINATION share/doc/tidemark PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

# --- Debian package ---
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tidemark)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "tidemark maintainers <tidemark@localhost>")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "edge time-series aggregator for MQTT gateways")
# The summary is the synopsis line; this is the extended description below it.
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
       "Reads telemetry from the gateway's MQTT broker into a durable log, aggregates\n"
       "event-time windows with bounded state kept in LMDB and forwards finalized or\n"
       "corrected window results to an upstream MQTT broker. Runs as the systemd\n"
       "service tidemark.service; the operator's guide is\n"
       "/usr/share/doc/tidemark/OPERATIONS.md.")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Architecture: a cross build's toolchain file names it (TIDEMARK_DEB_ARCH); otherwise dpkg's,
# so a build on the ARM gateway itself gives an arm64/armhf package.
if(TIDEMARK_DEB_ARCH)
  set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${TIDEMARK_DEB_ARCH})
endif()

# Runtime dependencies: dpkg-shlibdeps (package dpkg-dev) reads the binary's NEEDED entries and
# names the Debian packages with their minimum versions. Without it, the list for Debian 12.
# systemd is named because the maintainer scripts run systemd-sysusers and systemd-tmpfiles.
# A cross build cannot let CPack run dpkg-shlibdeps (it asks the host's dpkg database, which
# does not hold the target's libraries): scripts/package runs it against the target root and
# passes the result as TIDEMARK_DEB_DEPENDS.
set(TIDEMARK_DEB_DEPENDS "" CACHE STRING
    "Depends computed outside CPack (scripts/package); empty: CPack runs dpkg-shlibdeps")
find_program(TIDEMARK_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(TIDEMARK_DEB_DEPENDS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd, ${TIDEMARK_DEB_DEPENDS}")
elseif(TIDEMARK_DPKG_SHLIBDEPS AND NOT CMAKE_CROSSCOMPILING)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd")
else()
  message(STATUS "packaging: dpkg-shlibdeps not found (apt-get install dpkg-dev) or a cross "
                 "build without TIDEMARK_DEB_DEPENDS (use scripts/package); "
                 "using the Debian 12 dependency list")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "systemd, libc6 (>= 2.36), libstdc++6 (>= 12), libgcc-s1, liblmdb0 (>= 0.9.24), "
      "libpaho-mqtt1.3 (>= 1.3.12), libmosquitto1, libspdlog1.10-fmt9, libfmt9, "
      "libsimdjson14, libsystemd0, libssl3, libpq5")
endif()
# The gateway broker usually runs on the same host.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "mosquitto, mosquitto-clients, lmdb-utils, postgresql")

# Maintainer scripts and conffiles. dpkg keeps an operator's edits to a conffile across upgrades
# (and asks before replacing them); CPack does not list /etc files by itself.
set(_tm_debian_dir ${PROJECT_BINARY_DIR}/packaging/debian)
file(MAKE_DIRECTORY ${_tm_debian_dir})
file(WRITE ${_tm_debian_dir}/conffiles "/etc/tidemark/tidemark.json\n")
foreach(script postinst prerm postrm)
  configure_file(${_tm_systemd_dir}/debian/${script} ${_tm_debian_dir}/${script}
                 COPYONLY)
endforeach()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${_tm_debian_dir}/postinst ${_tm_debian_dir}/prerm ${_tm_debian_dir}/postrm)
if(EXISTS "${TIDEMARK_SERVICE_CONFIG}")
  list(APPEND CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${_tm_debian_dir}/conffiles)
endif()
# Scripts 0755, conffiles 0644, whatever the source tree's modes.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Stripped, as Debian policy asks of a package's binaries (dh_strip's job in a debian/ build):
# the symbol table is 14-20% of the Release binary (armhf 1.67 -> 1.34 MB), and gateways have
# little flash. CMAKE_STRIP is the target's strip in a cross build (arm-linux-gnueabihf-strip),
# found from the compiler's prefix.
set(CPACK_STRIP_FILES ON)

include(CPack)
