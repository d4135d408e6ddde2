# bench_fleet: a failover of ten forwarders against a bare QoS1 client on a three-node
# nats-server cluster of its own (tests/support), so it needs the tests' tree (issue 28).
if(TARGET tidemark_test_nats AND TARGET tidemark_mqtt)
  add_executable(bench_fleet ${CMAKE_CURRENT_LIST_DIR}/bench_fleet.cpp)
  target_link_libraries(bench_fleet PRIVATE tidemark_mqtt tidemark_firmware tidemark_test_nats)
endif()
