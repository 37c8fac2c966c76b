# rfos: the two commands a newcomer needs.
#   make run    install dependencies, build, and start the system on embedded defaults
#   make test   install dependencies, build, and pass the tests
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all deps build test test-asan fuzz run bench-engine bench-engine-quick bench-matrix bench-matrix-full format clean

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
	cmake --build build-fuzz -j $(JOBS) --target fuzzers
	cd build-fuzz && ctest --output-on-failure -L fuzz

# A single-node server on embedded defaults (data in /var/lib/rfos, control plane on the local socket
# /run/rfos/control.sock, ucx+tcp pinned to loopback), with a pool and a container labelled 'default'; Ctrl-C
# stops it.
run: build
	UCX_NET_DEVICES=$${UCX_NET_DEVICES:-lo} $(BUILD)/bin/rfos server --create-defaults

# The engine alone, beside fio (a one-rep quick matrix; bench-engine for the full one).
bench-engine-quick: build
	python3 bench/engine_bench.py --quick --build $(BUILD)

bench-engine: build
	python3 bench/engine_bench.py --build $(BUILD) --markdown $(BUILD)/engine-bench.md --json $(BUILD)/engine-bench.json

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-fuzz

# The evaluation matrix (media, transport, end to end; heatmaps and a report in matrix-out/): about 15 minutes.
bench-matrix: build
	/usr/bin/python3 bench/matrix.py --quick --build $(BUILD) --out matrix-out

bench-matrix-full: build
	/usr/bin/python3 bench/matrix.py --full --build $(BUILD) --out matrix-out
