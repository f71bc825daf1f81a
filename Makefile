# The two commands: `make run` (install, build, run the default scenario) and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: run test test-quick test-slow bench golden deps configure build format clean

deps:
	@./scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	@./scripts/install-deps.sh
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	@./scripts/default-scenario.sh $(BUILD_DIR)/spansim

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

test-quick: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L quick

test-slow: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L slow

bench: build
	cmake --build $(BUILD_DIR) --target bench
	$(BUILD_DIR)/bench/spansim_bench $(BENCH_ARGS)

# Re-pin the golden scenarios and regenerate the README examples after a deliberate model change.
golden: build
	cmake --build $(BUILD_DIR) --target golden

format:
	find common topology workload placement netsim scenario report calibration optimizer experiments cli tests bench -name '*.cpp' -o -name '*.hpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
