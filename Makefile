# The transformer: `make` builds the program, `make test` runs the doctest suite,
# `make run` trains the default model, `make debug` builds both with sanitizers,
# `make bench-portable` benchmarks the other targets and compilers (each in its own build-* directory).
CXX      ?= g++
STD      := -std=c++17
WARN     := -Wall -Wextra -Wpedantic
OPT      := -O3 -march=native -fno-math-errno
BUILD    ?= build
DBG      := -O0 -g3 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
DOCTEST_CHECK := printf '\043include <doctest/doctest.h>\n' | $(CXX) $(STD) -fsyntax-only -x c++ - 2>/dev/null

.PHONY: all test run bench bench-portable debug clean doctest
all: transformer

$(BUILD)/%.o: %.cpp transformer.hpp | $(BUILD)
	$(CXX) $(STD) $(WARN) $(OPT) -c -o $@ $<
$(BUILD)/debug-%.o: %.cpp transformer.hpp | $(BUILD)
	$(CXX) $(STD) $(WARN) $(DBG) -c -o $@ $<
$(BUILD):
	mkdir -p $@

transformer $(BUILD)/transformer: $(BUILD)/main.o $(BUILD)/transformer.o
	$(CXX) $(OPT) -o $@ $^
tests: $(BUILD)/tests.o $(BUILD)/transformer.o
	$(CXX) $(OPT) -o $@ $^
$(BUILD)/tests.o $(BUILD)/debug-tests.o: | doctest

# doctest comes from Debian's doctest-dev; install it when missing and we are root.
doctest:
	@if ! $(DOCTEST_CHECK); then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "doctest missing: installing Debian package doctest-dev"; \
	    (apt-get install -y doctest-dev || (apt-get update && apt-get install -y doctest-dev)) >/dev/null; \
	  fi; \
	  $(DOCTEST_CHECK) || { echo "error: <doctest/doctest.h> not found; install the Debian package doctest-dev (apt-get install doctest-dev)"; exit 1; }; \
	fi

# The CLI tests call ./transformer, so it is built too.
test: tests transformer
	./tests

# The main job: train a small GPT-2 on 3-digit addition, then answer a few unseen problems.
run: transformer
	./transformer train --dropout 0 --out addition.safetensors
	@echo "greedy answers to held-out problems (the sum is written least significant digit first: 106+752=8580 means 858):"
	@for p in 106+752= 439+039= 866+363= 539+585=; do ./transformer sample --checkpoint addition.safetensors --prompt $$p --tokens 4 --temperature 0; done

bench: transformer
	./transformer bench

# One `bench --json` line per build (the build on standard error): this one (g++ -march=native by
# default), g++ for AVX2 + FMA (x86-64-v3: most laptops and desktops), clang++ native and AVX2.
PORTABLE_OPT := -O3 -march=x86-64-v3 -fno-math-errno
bench-portable: transformer
	@$(MAKE) --no-print-directory BUILD=build-avx2 CXX=g++ OPT="$(PORTABLE_OPT)" build-avx2/transformer >/dev/null
	@$(MAKE) --no-print-directory BUILD=build-clang CXX=clang++ build-clang/transformer >/dev/null
	@$(MAKE) --no-print-directory BUILD=build-clang-avx2 CXX=clang++ OPT="$(PORTABLE_OPT)" build-clang-avx2/transformer >/dev/null
	@echo "$(CXX) $(OPT):" >&2; ./transformer bench --json
	@echo "g++ $(PORTABLE_OPT):" >&2; build-avx2/transformer bench --json
	@echo "clang++ $(OPT):" >&2; build-clang/transformer bench --json
	@echo "clang++ $(PORTABLE_OPT):" >&2; build-clang-avx2/transformer bench --json

debug: transformer-debug tests-debug
transformer-debug: $(BUILD)/debug-main.o $(BUILD)/debug-transformer.o
	$(CXX) $(DBG) -o $@ $^
tests-debug: $(BUILD)/debug-tests.o $(BUILD)/debug-transformer.o
	$(CXX) $(DBG) -o $@ $^

clean:
	rm -rf build build-avx2 build-clang build-clang-avx2 transformer tests transformer-debug tests-debug
