# The transformer: the README's table lists the targets; programs of more than a few lines are in tools/
# (docs/code.md, "Tools"). Another compiler: make test CXX=clang++ BUILD=build-clang (its objects apart;
# ./tests and ./transformer are linked from them); CXX="clang++ -stdlib=libc++" for LLVM's library, macOS's.
CXX      ?= g++
STD      := -std=c++17
WARN     := -Wall -Wextra -Wpedantic
# g++ -O2 with the vectoriser's full cost model, -O1 where no hot loop runs (-DTF_COLD_O1); clang -O2, those regions
# for size. As fast as -O3 in a third of the build (docs/performance.md).
IS_CLANG := $(findstring clang,$(shell $(CXX) --version 2>/dev/null | head -n 1))
LEVEL    := $(strip -O2 $(if $(IS_CLANG),,-fvect-cost-model=dynamic) -DTF_COLD_O1)
# The CPU's own instructions: -march=native on x86-64; -mcpu=apple-m1 with Apple's clang (up to 14 it refuses native),
# -mcpu=native on aarch64 Linux; none for another machine (--target, a cross g++, MinGW-w64's on Linux); ARCH= chooses.
MACHINE  := $(shell $(CXX) -dumpmachine 2>/dev/null)
HOST_CPU := $(subst amd64,x86_64,$(subst arm64,aarch64,$(shell uname -m 2>/dev/null)))
TARGET_CPU := $(subst amd64,x86_64,$(subst arm64,aarch64,$(firstword $(subst -, ,$(MACHINE)))))
APPLE_ARM := $(and $(findstring -apple-darwin,$(MACHINE)),$(filter aarch64,$(TARGET_CPU)))
# EXE: .exe when the compiler makes Windows programs (MinGW-w64; MSYS2): their flags and g++ as docs/windows.md says.
EXE      := $(if $(or $(findstring mingw,$(MACHINE)),$(findstring windows,$(MACHINE)),$(filter Windows_NT,$(OS))),.exe)
OS_FLAGS := $(if $(EXE),-Xassembler -mbig-obj -static -Xlinker --stack=16777216)
$(if $(findstring Thread model: win32,$(if $(EXE),$(shell $(CXX) -v 2>&1))),$(eval override CXX := $(strip $(firstword $(CXX))$(if $(shell command -v $(firstword $(CXX))-posix),-posix) $(wordlist 2,99,$(CXX)))))
NATIVE   := $(if $(filter $(HOST_CPU),$(TARGET_CPU)),$(if $(filter x86_64,$(TARGET_CPU)),-march=native,$(if $(filter aarch64,$(TARGET_CPU)),-mcpu=native)))
ARCH     ?= $(if $(APPLE_ARM),$(if $(IS_CLANG),-mcpu=apple-m1),$(if $(filter Windows_NT,$(OS))$(if $(EXE),,not-windows),$(NATIVE)))
# a*b + c is rounded twice unless the source calls std::fma: every x86-64 build with AVX2 and FMA gives the same bits
# (docs/performance.md, "The same numbers on every machine"). -fno-trapping-math: g++ vectorises vexp's clamps.
FP       := -ffp-contract=off -fno-trapping-math -fno-math-errno
OPT      := $(strip $(LEVEL) $(ARCH) $(FP) $(OS_FLAGS))
TESTS_LEVEL ?= -O0
BUILD    ?= build$(if $(EXE),-windows)
# GCFLAGS: g++'s garbage collector runs less often (less time, about 1 GB more memory). DBG's -D_GLIBCXX_ASSERTIONS:
# an index past a tensor's end aborts (AddressSanitizer misses it inside a pool block).
GCFLAGS  := $(if $(IS_CLANG),,--param ggc-min-expand=100 --param ggc-min-heapsize=1048576)
DBG      := -O0 -g3 -ffp-contract=off -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -D_GLIBCXX_ASSERTIONS
# doctest: on the compiler's include path (Debian's doctest-dev), else DOCTEST_INCLUDE=DIR (holding doctest/doctest.h),
# else Homebrew's (brew install doctest: /opt/homebrew on arm64, /usr/local on x86-64, or where `brew --prefix` says).
DOCTEST_INCLUDE ?= $(patsubst %/doctest/doctest.h,%,$(firstword $(wildcard $(addsuffix /include/doctest/doctest.h,\
                   /opt/homebrew /usr/local $(shell command -v brew >/dev/null 2>&1 && brew --prefix 2>/dev/null)))))
DOCTEST_CFLAGS = $(if $(strip $(DOCTEST_INCLUDE)),-I$(strip $(DOCTEST_INCLUDE)))
# As many jobs as cores unless -j is given; a short line per object (V=1: the commands). GNU make before 4.3 (macOS's
# 3.81) hides the command line's -j from the makefile and lets ours override it: it is looked for with ps.
ifeq ($(MAKELEVEL),0)
  ifneq ($(filter 3.% 4.0% 4.1% 4.2%,$(MAKE_VERSION)),)
    GIVEN_JOBS := $(filter -j% --jobs%,$(shell echo "$$MAKEFLAGS"; ps -o args= -p $$PPID 2>/dev/null))
  endif
  ifeq ($(filter -j% --jobs%,$(MAKEFLAGS))$(GIVEN_JOBS),)
    MAKEFLAGS += -j$(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 1)
  endif
endif
Q        := $(if $(filter 1,$(V)),,@)
say       = $(if $(filter 1,$(V)),:,printf '  %-5s %s\n')

.PHONY: FORCE fuzz part-one-check all test test-long test-sanitized test-windows run bench bench-portable build-times finetune-demo \
        debug clean doctest handout check assignments-check assignments-text-check grade mutants mutants-all mutants-assignments
all: transformer

$(BUILD)/%.o: %.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(OPT) $(GCFLAGS) -c -o $@ $<
# transformer.cpp is compiled as two objects side by side, its mathematics (Part I, the fast product) and its
# machinery (-DTF_ONLY_MACHINERY): the same code and flags, bits and speed, in half the wait (docs/performance.md).
PART_FLAG = $(if $(filter %-machinery.o,$@),-DTF_ONLY_MACHINERY,-DTF_ONLY_MATHEMATICS)
$(BUILD)/transformer-mathematics.o $(BUILD)/transformer-machinery.o: transformer.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(OPT) $(GCFLAGS) $(PART_FLAG) -c -o $@ transformer.cpp
TRANSFORMER_O := $(BUILD)/transformer-machinery.o $(BUILD)/transformer-mathematics.o
$(BUILD)/debug-%.o: %.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(DBG) $(GCFLAGS) -c -o $@ $<
# The tests run on a build of transformer.cpp with the index checks (docs/mutation.md); tests.cpp at -O0 without
# -march, one object for every CPU (a handout carries it), rebuilt when toolchain.key (compiler, flags) changes.
CHECKED   := -D_GLIBCXX_ASSERTIONS
TESTS_OPT := $(strip $(TESTS_LEVEL) $(FP) $(OS_FLAGS))
$(BUILD)/toolchain.key: FORCE | $(BUILD)
	$(Q){ $(CXX) --version; $(CXX) -dumpmachine; echo '$(STD) $(WARN) $(TESTS_OPT) $(CHECKED) $(DOCTEST_CFLAGS)'; } | cksum > $@.new
	$(Q)if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi
$(BUILD)/tests.o: tests.cpp transformer.hpp $(BUILD)/toolchain.key | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(TESTS_OPT) $(GCFLAGS) $(CHECKED) $(DOCTEST_CFLAGS) -c -o $@ $<
$(BUILD)/checked-mathematics.o $(BUILD)/checked-machinery.o: transformer.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(OPT) $(GCFLAGS) $(CHECKED) $(PART_FLAG) -c -o $@ transformer.cpp
CHECKED_O := $(BUILD)/checked-machinery.o $(BUILD)/checked-mathematics.o
$(if $(EXE),transformer tests): %: %$(EXE) ;
transformer$(EXE) $(BUILD)/transformer$(EXE): $(BUILD)/main.o $(TRANSFORMER_O)
tests$(EXE) $(BUILD)/tests$(EXE): $(BUILD)/tests.o $(CHECKED_O)
transformer$(EXE) $(BUILD)/transformer$(EXE) tests$(EXE) $(BUILD)/tests$(EXE):
	@$(say) LINK $@
	$(Q)$(CXX) $(OPT) -o $@ $^
$(BUILD)/tests.o $(BUILD)/debug-tests.o: | doctest

# doctest (DOCTEST_INCLUDE above): found, else installed as Debian's doctest-dev when root, else how (tools/doctest-check).
doctest:
	@sh tools/doctest-check '$(CXX) $(STD) $(DOCTEST_CFLAGS)' '$(strip $(DOCTEST_INCLUDE))'

# The CLI tests call ./transformer, so it is built too (the objects longest build first: the cores finish together).
# Every case is in its topic's doctest suite; the long ones, in "... (long)", run with make test-long.
test: $(BUILD)/tests.o $(BUILD)/checked-machinery.o $(BUILD)/transformer-machinery.o $(CHECKED_O) $(TRANSFORMER_O) $(BUILD)/main.o tests transformer
	./tests
test-long: tests transformer
	./tests --no-skip -ts='*(long)'
# Part I's cases under AddressSanitizer and UBSan (make debug's flags).
SANITIZED_SUITES := tensor,matrix products,modules,models,objectives,training,assignment*
test-sanitized: tests-debug
	./tests-debug -ts='$(SANITIZED_SUITES)'
# The MinGW-w64 build under wine: tests.exe, and a training run byte for byte this build's (tools/windows-check).
test-windows: transformer
	@MAKE='$(MAKE)' sh tools/windows-check

# The main job: train a small GPT-2 on 3-digit addition, then answer a few unseen problems.
run: transformer
	./transformer train --dropout 0 --out addition.safetensors
	@echo "greedy answers to held-out problems (the sum is written least significant digit first: 106+752=8580 means 858):"
	@for p in 106+752= 439+039= 866+363= 539+585=; do ./transformer sample --checkpoint addition.safetensors --prompt $$p --tokens 4 --temperature 0; done

bench: transformer
	./transformer bench
# GPT-1's workflow and the paper's ablation over five seeds (tools/finetune-demo --help); QUICK=1: a minute.
finetune-demo: transformer
	tools/finetune-demo --program ./transformer --out demo$(if $(filter-out 0,$(QUICK)), --quick)

# One `bench --json` line per build (its name on standard error): this one, g++ for AVX2 + FMA
# (x86-64-v3: most laptops), clang++ native and AVX2 (elsewhere than x86-64: clang++ native).
PORTABLE_ARCH := -march=x86-64-v3
PORTABLE_BUILDS := $(if $(filter x86_64,$(TARGET_CPU)),"build-avx2 g++ $(PORTABLE_ARCH)") "build-clang clang++ $(ARCH)" \
                   $(if $(filter x86_64,$(TARGET_CPU)),"build-clang-avx2 clang++ $(PORTABLE_ARCH)")
bench-portable: transformer
	@echo "$(CXX) $(OPT):" >&2; ./transformer bench --json
	@for b in $(PORTABLE_BUILDS); do set -- $$b; \
	  $(MAKE) --no-print-directory BUILD=$$1 CXX=$$2 ARCH="$$3" $$1/transformer >/dev/null || exit 1; \
	  echo "$$2 $$([ $$2 = clang++ ] && echo '-O2 ')$$3$$([ $$2 = clang++ ] && [ "$$3" = '$(ARCH)' ] && echo ' $(FP)'):" >&2; $$1/transformer bench --json; done

# The sanitizers watch the library and the program, not tests.cpp (three times the build);
# transformer.o is linked first, so the header's inline functions are its instrumented copies.
debug: transformer-debug tests-debug
DBG_TESTS := -O0 -g -D_GLIBCXX_ASSERTIONS -DTF_TESTS_DEBUG
$(BUILD)/debug-tests.o: tests.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(DBG_TESTS) $(GCFLAGS) $(DOCTEST_CFLAGS) -c -o $@ $<
transformer-debug: $(BUILD)/debug-transformer.o $(BUILD)/debug-main.o
tests-debug: $(BUILD)/debug-transformer.o $(BUILD)/debug-tests.o
transformer-debug tests-debug:
	@$(say) LINK $@
	$(Q)$(CXX) $(DBG) -o $@ $^

# make build-times [CHECK=1]: tools/build-times, docs/performance.md's "Build time" (CHECK=1: make, make test vs targets).
BT_CHECK := LayerNorm*
build-times: | doctest
	@CXX='$(CXX)' STD='$(STD)' WARN='$(WARN)' OPT='$(OPT)' CHECKED='$(CHECKED)' TESTS_OPT='$(TESTS_OPT) $(DOCTEST_CFLAGS)' FAST_OPT='$(FAST_OPT)' \
	  FAST_MACHINERY_OPT='$(FAST_MACHINERY_OPT)' GCFLAGS='$(GCFLAGS)' MAKE='$(MAKE)' BT_CHECK='$(BT_CHECK)' \
	  sh tools/build-times $(if $(filter 1,$(CHECK)),--check)

# What the targets write, and masks.svg (masks' help example); never a path git tracks, DIR only if a handout.
GENERATED := transformer tests transformer.exe tests.exe transformer-debug tests-debug build build-windows build-avx2 build-clang build-clang-avx2 \
             build-v4 build-libcxx build-aarch64 build-aarch64-clang build-aarch64-tests addition.safetensors addition.csv addition.svg demo \
             masks.svg build-fast build-mutants build-fuzz mutants.log results.json results.xml
clean:
	@for f in $(GENERATED) $$(for d in '$(DIR)' handout-*; do [ -f "$$d/HANDOUT.md" ] && echo "$$d"; done); do \
	  if git ls-files --error-unmatch "$$f" >/dev/null 2>&1; then echo "make clean: keeping $$f (tracked by git)"; \
	  elif [ -e "$$f" ] || [ -L "$$f" ]; then echo "rm -rf $$f"; rm -rf "$$f"; fi; \
	done

# make part-one-check: Part I calls nothing of Part II but these entry points (tools/part-one-check).
PART_ONE_CALLS := gemm softmax_row softmax_numerators activation_array activation_derivative_array \
                  allocate_params pool_allocate pool_deallocate math::exp math::log math::cos_pi math::pow_int
part-one-check:
	@CXX='$(CXX)' STD='$(STD)' PART_ONE_CALLS='$(strip $(PART_ONE_CALLS))' sh tools/part-one-check

# ---- make handout [DIR=handout] [FUNCS="..."] [ASSIGNMENT=N]: a student copy, FUNCS stubs (tools/handout).
# The default FUNCS: every seed module's backward, with the helpers that hold the answer.
HANDOUT_FUNCS := diag_backward Stack_backward Embedding_backward Softmax_backward softmax_backward_row \
                 Attention_backward Concat_backward MultiHeadSA_backward FFN_backward activation_derivative \
                 LayerNorm_backward CrossEntropy_backward
# The handout carries its compiled tests.o and machinery.o (a first make check compiles the
# mathematics alone); HANDOUT_OBJECTS=0 leaves them out.
HANDOUT_OBJECTS ?= 1

# ---- The assignments of docs/assignments.md: N blanks ASSIGNMENT_N_FUNCS; its graded cases are in the
# doctest suite "assignment N" (1 point each) or "assignment N (P points)", the filter SUITES_OF.
ASSIGNMENTS := 1 2 3 4 5 6
ASSIGNMENT_1_FUNCS := diag_backward Stack_backward Embedding_backward
ASSIGNMENT_2_FUNCS := Softmax_backward softmax_backward_row activation_derivative activation_derivative_array FFN_backward LayerNorm_backward
ASSIGNMENT_3_FUNCS := Mask_BD Mask_AR Mask_ST apply_mask Attention_backward Concat_backward MultiHeadSA_backward
ASSIGNMENT_4_FUNCS := CrossEntropy_backward embed_backward post_ln_block_backward pre_ln_block_backward blocks_backward model_backward
ASSIGNMENT_5_FUNCS := mlm_corrupt Mask_XL xlnet_loss
ASSIGNMENT_6_FUNCS := adamw_step lr_schedule clip_grad_norm
# make check's fast build: -Og compiles in a fraction of -O2's time and runs an assignment's cases
# fast enough (docs/assignments.md has the times), with the index checks.
FAST_OPT   := $(strip -Og $(ARCH) $(FP) $(OS_FLAGS) -D_GLIBCXX_ASSERTIONS -DTF_COLD_O0)
FAST_MACHINERY_OPT := $(strip -Og $(FP) $(OS_FLAGS) -D_GLIBCXX_ASSERTIONS -DTF_COLD_O0)
FAST_BUILD := build-fast
-include handout.mk
ifneq ($(strip $(ASSIGNMENT)),)
  ifeq ($(strip $(ASSIGNMENT_$(strip $(ASSIGNMENT))_FUNCS)),)
    $(error ASSIGNMENT=$(ASSIGNMENT): no such assignment (they are $(ASSIGNMENTS)))
  endif
  FUNCS ?= $(ASSIGNMENT_$(strip $(ASSIGNMENT))_FUNCS)
  # Handout N holds the solutions of 1..N-1; the later assignments' functions are stubs naming theirs.
  LATER_ASSIGNMENTS := $(wordlist 2,99,$(wordlist $(strip $(ASSIGNMENT)),99,$(ASSIGNMENTS)))
  LATER_FUNCS       := $(foreach m,$(LATER_ASSIGNMENTS),$(ASSIGNMENT_$(m)_FUNCS))
  LATER_LABELS      := $(foreach m,$(LATER_ASSIGNMENTS),$(foreach f,$(ASSIGNMENT_$(m)_FUNCS),$(f)=assignment+$(m)))
  DIR   ?= handout-$(strip $(ASSIGNMENT))
endif
comma := ,
# The doctest -ts filter of assignment N's cases, and of those of assignments 1..N.
SUITES_OF = assignment $(strip $(1)),assignment $(strip $(1)) (*)
SUITES_UPTO = $(subst $(space)$(comma),$(comma),$(strip $(foreach m,$(wordlist 1,$(1),$(ASSIGNMENTS)),$(if $(filter-out 1,$(m)),$(comma))$(call SUITES_OF,$(m)))))
DIR   ?= handout
FUNCS ?= $(HANDOUT_FUNCS)

handout:
	@MAKE='$(MAKE)' sh tools/handout --dir '$(DIR)' --funcs '$(strip $(FUNCS))' --later '$(strip $(filter-out $(FUNCS),$(LATER_FUNCS)))' \
	  --labels '$(strip $(LATER_LABELS))' $(if $(strip $(ASSIGNMENT)),--assignment '$(strip $(ASSIGNMENT))' --suites '$(call SUITES_OF,$(ASSIGNMENT))') \
	  $(if $(filter-out 0,$(HANDOUT_OBJECTS)),--objects)

# make check ASSIGNMENT=N (a handout knows its own) or TESTS="pattern": one student round. mathematics.o is compiled
# after every edit; machinery.o (no -march: a handout carries it) when machinery.key (its preprocessed text) changes.
$(BUILD) $(FAST_BUILD):
	$(Q)mkdir -p $@
$(FAST_BUILD)/mathematics.o: transformer.cpp transformer.hpp | $(FAST_BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(FAST_OPT) $(GCFLAGS) -DTF_ONLY_MATHEMATICS -c -o $@ $<
$(FAST_BUILD)/machinery.key: FORCE | $(FAST_BUILD)
	$(Q){ $(CXX) --version; $(CXX) -dumpmachine; echo '$(FAST_MACHINERY_OPT)'; \
	  $(CXX) $(STD) $(FAST_MACHINERY_OPT) -DTF_ONLY_MACHINERY -E -P transformer.cpp; } | cksum > $@.new
	$(Q)if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi
$(FAST_BUILD)/machinery.o: $(FAST_BUILD)/machinery.key
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(FAST_MACHINERY_OPT) $(GCFLAGS) -DTF_ONLY_MACHINERY -c -o $@ transformer.cpp
$(FAST_BUILD)/tests: $(FAST_BUILD)/mathematics.o $(FAST_BUILD)/machinery.o $(BUILD)/tests.o
	@$(say) LINK $@
	$(Q)$(CXX) $(FAST_OPT) -o $@ $^
FORCE:
check: | doctest
	@if [ -z '$(strip $(TESTS))$(strip $(ASSIGNMENT))' ]; then \
	  echo "make check: give TESTS=\"pattern\" (a doctest -tc pattern) or ASSIGNMENT=N (N in $(ASSIGNMENTS))" >&2; exit 1; fi
	@$(MAKE) --no-print-directory $(FAST_BUILD)/tests
	./$(FAST_BUILD)/tests -r=student $(if $(strip $(TESTS)),-tc="$(TESTS)",-ts="$(call SUITES_OF,$(ASSIGNMENT))")

# ---- make grade [ASSIGNMENT=N] [GRADE_DIR=.] [GRADE_TIMEOUT=30] [GRADE_VISIBILITY=...]: an autograder's score. It
# builds as make check does; tools/grade runs each case alone, writes results.json and results.xml (docs/assignments.md).
GRADE_DIR     ?= .
GRADE_TIMEOUT ?= 30
GRADE_VISIBILITY ?=
grade: export GRADE_VISIBILITY := $(GRADE_VISIBILITY)
grade: | doctest
	@if [ -z '$(strip $(ASSIGNMENT))' ]; then \
	  echo "make grade: give ASSIGNMENT=N (N in $(ASSIGNMENTS)); a handout knows its own" >&2; exit 1; fi
	@log=$$(mktemp "$${TMPDIR:-/tmp}/tf-grade-build.XXXXXX"); trap 'rm -f "$$log"' EXIT; failed=; \
	$(MAKE) --no-print-directory $(FAST_BUILD)/tests > "$$log" 2>&1 || failed="$$log"; cat "$$log"; \
	sh tools/grade ./$(FAST_BUILD)/tests '$(call SUITES_OF,$(ASSIGNMENT))' \
	  '$(GRADE_DIR)' '$(GRADE_TIMEOUT)' 'assignment $(strip $(ASSIGNMENT))' "$$failed"

# make assignments-text-check: the texts alone; make assignments-check: every assignment's handout
# and solution against what docs/assignments.md states, and graded (tools/assignments-check).
ASSIGN_TESTS_O ?= $(BUILD)/tests.o
ASSIGN_TESTS   ?= ./tests
ASSIGN_DOC     := docs/assignments.md
ASSIGN_ENV = ASSIGN_DOC='$(ASSIGN_DOC)' ASSIGNMENTS='$(ASSIGNMENTS)' ASSIGN_FUNCS='$(foreach n,$(ASSIGNMENTS),$(n):$(strip $(ASSIGNMENT_$(n)_FUNCS));)'
assignments-text-check:
	@$(ASSIGN_ENV) sh tools/assignments-check --text-only
assignments-check: export ASSIGN_LIST := $(foreach n,$(ASSIGNMENTS),$(n)|$(call SUITES_OF,$(n))|$(strip \
  $(foreach m,$(wordlist 2,99,$(wordlist $(n),99,$(ASSIGNMENTS))),$(ASSIGNMENT_$(m)_FUNCS)))|$(call SUITES_UPTO,$(n));)
assignments-check:
	@$(ASSIGN_ENV) CXX='$(CXX)' STD='$(STD)' WARN='$(WARN)' FAST_OPT='$(FAST_OPT)' GCFLAGS='$(GCFLAGS)' MAKE='$(MAKE)' \
	  ASSIGN_TESTS_O='$(ASSIGN_TESTS_O)' ASSIGN_TESTS='$(ASSIGN_TESTS)' GRADE_TIMEOUT='$(GRADE_TIMEOUT)' sh tools/assignments-check

# ---- make fuzz [SECONDS=60] [FUZZ="json ..."]: every reader under libFuzzer, tools/fuzz.cpp's targets built with
# clang++ (the sanitizers, the index checks), run by tools/fuzz from tools/fuzz-corpus (docs/files.md).
FUZZ_TARGETS := json safetensors hf_config gpt2_bpe gpt1_bpe wordpiece token_file labelled bpe_roundtrip subword_utf8
FUZZ         ?= $(FUZZ_TARGETS)
SECONDS      ?= 60
FUZZ_BUILD   := build-fuzz
FUZZ_FLAGS   := $(STD) -O1 -g -w -fsanitize=address,undefined -fno-sanitize-recover=undefined -D_GLIBCXX_ASSERTIONS
$(FUZZ_BUILD)/transformer.o: transformer.cpp transformer.hpp
	@mkdir -p $(FUZZ_BUILD); $(say) CXX $@
	$(Q)clang++ $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
$(FUZZ_BUILD)/fuzz-%: tools/fuzz.cpp $(FUZZ_BUILD)/transformer.o
	@$(say) LINK $@
	$(Q)clang++ $(FUZZ_FLAGS) -fsanitize=fuzzer -DFUZZ_TARGET_$* -o $@ $^
fuzz: $(addprefix $(FUZZ_BUILD)/fuzz-,$(FUZZ))
	@sh tools/fuzz --seconds '$(SECONDS)' --build $(FUZZ_BUILD) $(FUZZ)

# ---- make mutants FUNC=name [TESTS="pattern"] [MAX=n] [TIMEOUT=s] [JOBS=n] [BEFORE=tests.o] [SAN=1], mutants-all
# [FUNCS="name[:tests] ..."] [MAX=25], mutants-assignments [MAX=3]: mutation testing (tools/mutants, docs/mutation.md).
MUT_OPT   ?= -O0
MUT_BUILD ?= build-mutants
MUT_SAN    = $(if $(filter 1,$(SAN)),-fsanitize=address$(comma)undefined -fno-sanitize-recover=undefined -D_GLIBCXX_ASSERTIONS)
MUTANT_FUNCS := $(shell grep '^[A-Za-z_]' tools/mutant-funcs.txt)
# Each assignment's functions against its own test suites (a space in a suite's name matched by ?).
space := $(subst ,, )
MUTANT_ASSIGNMENT_FUNCS := $(foreach n,$(ASSIGNMENTS),$(foreach f,$(ASSIGNMENT_$(n)_FUNCS),$(f):-ts=$(subst $(space),?,$(call SUITES_OF,$(n)))))
mutants-assignments:
	@$(MAKE) --no-print-directory mutants-all FUNCS='$(MUTANT_ASSIGNMENT_FUNCS)' MAX='$(if $(filter-out 0,$(MAX)),$(MAX),3)'
mutants mutants-all: transformer | doctest
	@$(MAKE) --no-print-directory BUILD=$(MUT_BUILD) OPT="$(MUT_OPT)" $(MUT_BUILD)/tests.o >/dev/null
	@if [ $@ = mutants ] && [ -z '$(FUNC)' ]; then echo "make mutants: give FUNC=name (a function defined in transformer.cpp)" >&2; exit 1; fi
	@sh tools/mutants --tests-o $(MUT_BUILD)/tests.o --timeout '$(or $(TIMEOUT),auto)' --jobs '$(or $(JOBS),1)' \
	  --log '$(or $(MUT_LOG),mutants.log)' $(if $(BEFORE),--before '$(BEFORE)') \
	  --cxx '$(CXX)' --cflags '$(STD) -w $(MUT_OPT) $(CHECKED) $(MUT_SAN) $(GCFLAGS)' --ldflags '$(MUT_OPT) $(MUT_SAN)' \
	  --max '$(if $(filter mutants,$@),$(or $(MAX),0),$(if $(filter-out 0,$(MAX)),$(MAX),25))' \
	  --list '$(if $(filter mutants,$@),$(FUNC):$(TESTS),$(if $(filter command line environment,$(origin FUNCS)),$(FUNCS),$(MUTANT_FUNCS)))'
