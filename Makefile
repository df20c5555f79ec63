# The transformer: `make` builds the program, `make test` runs the doctest suite,
# `make run` trains the default model, `make debug` builds both with sanitizers.
CXX      ?= g++
STD      := -std=c++17
WARN     := -Wall -Wextra -Wpedantic
OPT      := -O3 -march=native -fno-math-errno
DBG      := -O0 -g3 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
DOCTEST_CHECK := printf '\043include <doctest/doctest.h>\n' | $(CXX) $(STD) -fsyntax-only -x c++ - 2>/dev/null

.PHONY: all test run bench debug clean doctest
all: transformer

build/%.o: %.cpp transformer.hpp | build
	$(CXX) $(STD) $(WARN) $(OPT) -c -o $@ $<
build/debug-%.o: %.cpp transformer.hpp | build
	$(CXX) $(STD) $(WARN) $(DBG) -c -o $@ $<
build:
	mkdir -p build

transformer: build/main.o build/transformer.o
	$(CXX) $(OPT) -o $@ $^
tests: build/tests.o build/transformer.o
	$(CXX) $(OPT) -o $@ $^
build/tests.o build/debug-tests.o: | doctest

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

debug: transformer-debug tests-debug
transformer-debug: build/debug-main.o build/debug-transformer.o
	$(CXX) $(DBG) -o $@ $^
tests-debug: build/debug-tests.o build/debug-transformer.o
	$(CXX) $(DBG) -o $@ $^

clean:
	rm -rf build transformer tests transformer-debug tests-debug
