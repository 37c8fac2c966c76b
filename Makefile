# rfos: the two commands a newcomer needs.
#   make run    install dependencies, build, and start the system on embedded defaults
#   make test   install dependencies, build, and pass the tests
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all deps build test test-asan fuzz run bench-engine format clean

all: build

deps:
	./scripts/install-deps

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The tests under AddressSanitizer + UndefinedBehaviorSanitizer (CI runs this too).
test-asan: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRFOS_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -L 'unit|model|crash|fuzz|integration'

# The fuzz targets with libFuzzer (clang), each for a bounded time.
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRFOS_FUZZ=ON -DRFOS_SANITIZE=ON
	cmake --build build-fuzz -j $(JOBS) --target engine_record_fuzz capability_fuzz data_plane_fuzz
	cd build-fuzz && ctest --output-on-failure -L fuzz

# Until the server exists, `make run` runs the engine on embedded defaults: the quick engine benchmark
# (update and fetch through io_uring and RocksDB, beside fio's ceiling on the same file system).
run: build
	python3 bench/engine_bench.py --quick --build $(BUILD)

bench-engine: build
	python3 bench/engine_bench.py --build $(BUILD) --markdown $(BUILD)/engine-bench.md --json $(BUILD)/engine-bench.json

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-fuzz
