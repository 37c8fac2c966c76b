# System libraries from Debian's packages (scripts/install-deps installs them).
# Each becomes an imported target; only the folder that wraps a library links it.
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)
find_library(ROCKSDB_LIB rocksdb REQUIRED)
find_path(ROCKSDB_INCLUDE rocksdb/db.h REQUIRED)
add_library(rfos_rocksdb INTERFACE)
target_link_libraries(rfos_rocksdb INTERFACE ${ROCKSDB_LIB})
target_include_directories(rfos_rocksdb INTERFACE ${ROCKSDB_INCLUDE})
find_package(Threads REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
