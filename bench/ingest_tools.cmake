# Building blocks of `scripts/bench ingest`: a QoS1 telemetry publisher with a bounded
# in-flight window, and the bare Paho subscriber that is the floor tidemark is compared with.
find_package(PahoMqttCpp REQUIRED)  # brings PahoMqttC::PahoMqttC (paho-mqtt3as)

add_executable(bench_publisher ${CMAKE_CURRENT_LIST_DIR}/bench_publisher.cpp)
target_link_libraries(bench_publisher PRIVATE PahoMqttC::PahoMqttC Threads::Threads)

add_executable(bench_bare_subscriber ${CMAKE_CURRENT_LIST_DIR}/bench_bare_subscriber.cpp)
target_link_libraries(bench_bare_subscriber PRIVATE PahoMqttC::PahoMqttC Threads::Threads)
