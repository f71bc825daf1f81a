# The two commands: `make run` (install, build, run the default scenario) and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The clang tree with ASan, UBSan and libFuzzer (make fuzz, make test-asan, and the fuzz smoke of make test).
# NDEBUG as in Release: Boost.Graph's push-relabel asserts exact flow conservation, which doubles miss by rounding.
SANITIZE_DIR ?= $(BUILD_DIR)/sanitize
FUZZ_SECONDS ?= 600

.PHONY: run test test-quick test-slow test-asan fuzz fuzz-build bench golden deps configure build format clean

deps:
	@./scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	@./scripts/install-deps.sh
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPANSIM_FUZZ_TREE=$(abspath $(SANITIZE_DIR)) $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The binary and the Python module only: a first run does not wait for the test suite's objects.
run: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target spansim spansim_python
	@./scripts/default-scenario.sh $(BUILD_DIR)/spansim

# Install, Release build, the clang tree's libFuzzer targets, ctest; prints the phase times (scripts/test.sh).
test:
	@BUILD_DIR=$(BUILD_DIR) SANITIZE_DIR=$(SANITIZE_DIR) JOBS=$(JOBS) ./scripts/test.sh

test-quick: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L quick

test-slow: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L slow

$(SANITIZE_DIR)/build.ninja:
	@./scripts/install-deps.sh
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" -DSPANSIM_FUZZ=ON > /dev/null

fuzz-build: $(SANITIZE_DIR)/build.ninja
	cmake --build $(SANITIZE_DIR) --target fuzz_libfuzzer_targets -j $(JOBS)

# Every parser's fuzz target for FUZZ_SECONDS each; prints executions and corpus size per target.
fuzz: fuzz-build
	./scripts/fuzz.sh run $(SANITIZE_DIR) $(FUZZ_SECONDS)

# The quick suite built with ASan and UBSan.
test-asan: $(SANITIZE_DIR)/build.ninja
	cmake --build $(SANITIZE_DIR) -j $(JOBS)
	cd $(SANITIZE_DIR) && ctest --output-on-failure -j $(JOBS) -L quick

bench: build
	cmake --build $(BUILD_DIR) --target bench
	$(BUILD_DIR)/bench/spansim_bench $(BENCH_ARGS)

# Re-pin the golden scenarios and regenerate the README examples after a deliberate model change.
golden: build
	cmake --build $(BUILD_DIR) --target golden

format:
	find common topology workload placement netsim reliability sync traces scenario report sharing calibration optimizer experiments cli fuzz python tests bench -name '*.cpp' -o -name '*.hpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
