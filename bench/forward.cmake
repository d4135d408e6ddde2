# bench_forward: drain an outbox after an outage through the forwarder to a local mosquitto.
if(TARGET tidemark_mqtt)
  add_executable(bench_forward ${CMAKE_CURRENT_LIST_DIR}/bench_forward.cpp)
  target_link_libraries(bench_forward PRIVATE tidemark_mqtt tidemark_lmdb tidemark_firmware)
endif()
