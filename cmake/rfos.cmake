# Small helpers so each src/ folder reads as a list of sources and dependencies.

# rfos_library(NAME SOURCES a.cc b.cc DEPS x y [PRIVATE_DEPS z])
# One static library per src/ folder; the repository root's src/ and include/ are on its include path.
function(rfos_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# rfos_test(NAME SOURCES a_test.cc DEPS lib LABELS unit [TIMEOUT s] [ARGS ...])
# A GoogleTest binary registered with ctest under the given labels (unit, model, crash, fuzz, integration, mount).
function(rfos_test name)
  if(NOT RFOS_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
endfunction()

# rfos_fuzzer(NAME SOURCES f.cc DEPS lib [SECONDS n])
# With RFOS_FUZZ (clang): a libFuzzer binary run by ctest for a bounded time.
# Without it: the same LLVMFuzzerTestOneInput driven by seeded mutations of the checked-in corpus
# (tests/fuzz_main.cc), so every build still exercises the decoders past their first checks.
function(rfos_fuzzer name)
  if(NOT RFOS_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "SECONDS" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_SECONDS)
    set(ARG_SECONDS 20)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # `make fuzz` builds the one target 'fuzzers', so a new fuzzer needs no second list to be built.
  if(NOT TARGET fuzzers)
    add_custom_target(fuzzers)
  endif()
  add_dependencies(fuzzers ${name})
  # The checked-in corpus of valid inputs (tests/fuzz/corpus/NAME, written by the stand-in's --write-corpus).
  set(corpus ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
  if(RFOS_FUZZ)
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    # libFuzzer adds what it finds to the first directory: a scratch one in the build tree, never the source.
    file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz-corpus/${name})
    add_test(NAME ${name} COMMAND ${name} -max_total_time=${ARG_SECONDS} -rss_limit_mb=2048
             ${CMAKE_BINARY_DIR}/fuzz-corpus/${name} ${corpus})
  else()
    target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/fuzz_main.cc)
    add_test(NAME ${name} COMMAND ${name} 200000 ${corpus})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "fuzz" TIMEOUT 300)
endfunction()
