# The transformer: `make` builds the program, `make test` runs the doctest suite,
# `make run` trains the default model, `make debug` builds both with sanitizers and -g,
# `make bench-portable` benchmarks the other targets and compilers (each in its own build-* directory),
# `make build-times` measures how long the builds take (docs/performance.md, "Build time").
# `make handout ASSIGNMENT=N` writes handout-N/ of docs/assignments.md, `make check` in it runs that assignment's cases,
# `make grade` scores them for a course platform (results.json in Gradescope's format, results.xml).
CXX      ?= g++
STD      := -std=c++17
WARN     := -Wall -Wextra -Wpedantic
# The optimisation level. g++: -O2 with the loop vectoriser's full cost model (-O3's vectorisation
# without its loop cloning and unswitching), and -O1 in the regions of transformer.cpp that run no
# hot loop (-DTF_COLD_O1: files, tokenizers, drivers, teaching tools, the double instantiations).
# clang: -O2, those regions optimised for size. The program runs as fast as with -O3 and builds in
# a third of the time (docs/performance.md, "Build time").
IS_CLANG := $(findstring clang,$(shell $(CXX) --version 2>/dev/null | head -n 1))
ifeq ($(IS_CLANG),)
  LEVEL  := -O2 -fvect-cost-model=dynamic -DTF_COLD_O1
else
  LEVEL  := -O2 -DTF_COLD_O1
endif
ARCH     ?= -march=native
# The rounding of every result is the source's: a*b + c is a product and a sum, each rounded, unless
# the source calls std::fma (madd). Left to the compiler (g++'s default -ffp-contract=fast), whether
# a product is fused into the sum that follows depends on the optimisation level, the target's tuning
# and the vector width, so one source could train to other losses from build to build. With this, every build for
# x86-64 with AVX2 and FMA (-march=x86-64-v3, v4, native) and both compilers give the same bits
# (docs/performance.md, "The same numbers on every machine"). -fno-trapping-math: no program here
# reads the floating-point exception flags, and without it g++ keeps the arithmetic of vexp's
# clamped branches out of AVX2 loops (only AVX-512's masks may run it on every lane); the values
# are IEEE's either way.
FP       := -ffp-contract=off -fno-trapping-math -fno-math-errno
OPT      := $(LEVEL) $(ARCH) $(FP)
TESTS_LEVEL ?= -O0
BUILD    ?= build
# g++'s garbage collector runs less often with a larger heap threshold: less time, more memory (about 1 GB).
ifeq ($(IS_CLANG),)
  GCFLAGS := --param ggc-min-expand=100 --param ggc-min-heapsize=1048576
endif
# -D_GLIBCXX_ASSERTIONS: an index past the end of a tensor (its std::vector) aborts. AddressSanitizer
# alone misses it: the pool hands out blocks of 256 bytes or more (size classes), so the element after
# the last is inside the block.
DBG      := -O0 -g3 -ffp-contract=off -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -D_GLIBCXX_ASSERTIONS
DOCTEST_CHECK := printf '\043include <doctest/doctest.h>\n' | $(CXX) $(STD) -fsyntax-only -x c++ - 2>/dev/null
# As many compile jobs as there are cores (a -j on the command line takes precedence; a make run
# by a recipe shares its parent's jobs); one short line per object built (V=1 shows the commands).
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS)),0)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
endif
ifeq ($(V),1)
  Q :=
  say = :
else
  Q := @
  say = printf '  %-5s %s\n'
endif

.PHONY: FORCE part-one-check all test test-long test-sanitized run bench bench-portable build-times finetune-demo debug clean doctest handout check assignments-check assignments-text-check grade
all: transformer

$(BUILD)/%.o: %.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(OPT) $(GCFLAGS) -c -o $@ $<
$(BUILD)/debug-%.o: %.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(DBG) $(GCFLAGS) -c -o $@ $<
$(BUILD):
	$(Q)mkdir -p $@

transformer $(BUILD)/transformer: $(BUILD)/main.o $(BUILD)/transformer.o
	@$(say) LINK $@
	$(Q)$(CXX) $(OPT) -o $@ $^
# The tests run on their own build of transformer.cpp with the standard library's index checks
# (-D_GLIBCXX_ASSERTIONS): an index one past a tensor's end (Tensor's operator[] and operator())
# aborts there, even where reading that element would change no value (docs/mutation.md). The
# program `transformer` is built without them. tests.cpp holds no hot loop: -O0 builds it in an
# eighth of -O3's time and runs the suite as fast (the CLI cases run ./transformer, the program).
# Without -march, tests.o is the same object on every CPU of its architecture, so a handout can
# carry it (make handout compiles it there). toolchain.key holds the checksum of the compiler's
# version, its target and these flags, rewritten only when it differs: another compiler or
# another machine rebuilds tests.o, a copied handout does not.
CHECKED   := -D_GLIBCXX_ASSERTIONS
TESTS_OPT := $(TESTS_LEVEL) $(FP)
$(BUILD)/toolchain.key: FORCE | $(BUILD)
	$(Q){ $(CXX) --version; $(CXX) -dumpmachine; echo '$(STD) $(WARN) $(TESTS_OPT) $(CHECKED)'; } | cksum > $@.new
	$(Q)if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi
$(BUILD)/tests.o: tests.cpp transformer.hpp $(BUILD)/toolchain.key | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(TESTS_OPT) $(GCFLAGS) $(CHECKED) -c -o $@ $<
$(BUILD)/transformer-checked.o: transformer.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(OPT) $(GCFLAGS) $(CHECKED) -c -o $@ $<
tests $(BUILD)/tests: $(BUILD)/tests.o $(BUILD)/transformer-checked.o
	@$(say) LINK $@
	$(Q)$(CXX) $(OPT) -o $@ $^
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

# The CLI tests call ./transformer, so it is built too. The long cases run in `make test-long`:
# those that make handouts and compile transformer.cpp again ("handout: ..."), and those that run
# what the README quotes ("readme: ..."), and the builds for other targets that must compute the same
# bytes ("identical: ..."); .ci/run runs both targets, and the formula cases again
# under the sanitizers (`make test-sanitized`).
LONG_CASES := handout: *,readme: *,identical: *,shellcheck: *,browser: *
# The objects are listed longest build first, so that the two cores finish together.
test: $(BUILD)/transformer-checked.o $(BUILD)/transformer.o $(BUILD)/tests.o $(BUILD)/main.o tests transformer
	./tests -tce='$(LONG_CASES)'
test-long: tests transformer
	./tests -tc='$(LONG_CASES)'
# The formula and module cases built with AddressSanitizer and UBSan (make debug's flags): an index
# one past the end of a tensor, which the optimised build may read without failing, stops them here.
SANITIZED_CASES := diag:*,Stack:*,Embedding:*,Softmax:*,Mask_*,apply_mask:*,Attention:*,Concat:*,MultiHeadSA:*,\
                   FFN_*,LayerNorm:*,OneHot:*,CrossEntropy*,lr_schedule:*,AdamW:*,dropout*,embed_backward:*,\
                   key_padding_mask:*,model_loss:*,sample: model_step equals*,BERT: rows with*,Tensor:*,matmul*,gemm:*
test-sanitized: tests-debug
	./tests-debug -tc='$(subst $(comma) ,$(comma),$(strip $(SANITIZED_CASES)))'

# The main job: train a small GPT-2 on 3-digit addition, then answer a few unseen problems.
run: transformer
	./transformer train --dropout 0 --out addition.safetensors
	@echo "greedy answers to held-out problems (the sum is written least significant digit first: 106+752=8580 means 858):"
	@for p in 106+752= 439+039= 866+363= 539+585=; do ./transformer sample --checkpoint addition.safetensors --prompt $$p --tokens 4 --temperature 0; done

bench: transformer
	./transformer bench

# GPT-1's workflow in miniature (docs/formulas.md §28) with no data file, and the GPT-1 paper's
# ablation over five fine-tuning seeds: tools/finetune-demo (its --help). Files go to demo/;
# QUICK=1 is a short run that checks the demo works (about a minute; its accuracies are near chance).
finetune-demo: transformer
	tools/finetune-demo --program ./transformer --out demo$(if $(filter-out 0,$(QUICK)), --quick)

# One `bench --json` line per build (the build on standard error): this one (g++ -march=native by
# default), g++ for AVX2 + FMA (x86-64-v3: most laptops and desktops), clang++ native and AVX2.
PORTABLE_ARCH := -march=x86-64-v3
bench-portable: transformer
	@$(MAKE) --no-print-directory BUILD=build-avx2 CXX=g++ ARCH="$(PORTABLE_ARCH)" build-avx2/transformer >/dev/null
	@$(MAKE) --no-print-directory BUILD=build-clang CXX=clang++ build-clang/transformer >/dev/null
	@$(MAKE) --no-print-directory BUILD=build-clang-avx2 CXX=clang++ ARCH="$(PORTABLE_ARCH)" build-clang-avx2/transformer >/dev/null
	@echo "$(CXX) $(OPT):" >&2; ./transformer bench --json
	@echo "g++ $(PORTABLE_ARCH):" >&2; build-avx2/transformer bench --json
	@echo "clang++ -O2 $(ARCH) $(FP):" >&2; build-clang/transformer bench --json
	@echo "clang++ $(PORTABLE_ARCH):" >&2; build-clang-avx2/transformer bench --json

# tests-debug runs the CLI tests on ./transformer-debug (TF_TESTS_DEBUG), so both are built. The
# sanitizers watch the library and the program; the tests' own code is built with -O0 -g and the
# index checks but without them (instrumenting tests.cpp tripled its build for no check of the
# library). transformer.o comes first on the link line, so the header's inline functions linked
# are its instrumented copies.
debug: transformer-debug tests-debug
DBG_TESTS := -O0 -g -D_GLIBCXX_ASSERTIONS -DTF_TESTS_DEBUG
$(BUILD)/debug-tests.o: tests.cpp transformer.hpp | $(BUILD)
	@$(say) CXX $@
	$(Q)$(CXX) $(STD) $(WARN) $(DBG_TESTS) $(GCFLAGS) -c -o $@ $<
transformer-debug: $(BUILD)/debug-transformer.o $(BUILD)/debug-main.o
	@$(say) LINK $@
	$(Q)$(CXX) $(DBG) -o $@ $^
tests-debug: $(BUILD)/debug-transformer.o $(BUILD)/debug-tests.o
	@$(say) LINK $@
	$(Q)$(CXX) $(DBG) -o $@ $^

# make build-times: how long the builds take on the computer it runs on, each in a fresh copy of the sources
# in a temporary directory (this directory's builds are left alone): the compile of each object,
# `make`, `make test` (its build and its run), one student round (`make check TESTS=...` after an
# edit of transformer.cpp, here and in a handout), `make debug`, the sanitized run of .ci/run, and
# one mutant of `make mutants`. docs/performance.md ("Build time") states the figures to reach.
BT_CHECK := LayerNorm*
build-times: | doctest
	@CXX='$(CXX)' STD='$(STD)' WARN='$(WARN)' OPT='$(OPT)' CHECKED='$(CHECKED)' TESTS_OPT='$(TESTS_OPT)' FAST_OPT='$(FAST_OPT)' \
	  FAST_MACHINERY_OPT='$(FAST_MACHINERY_OPT)' GCFLAGS='$(GCFLAGS)' MAKE='$(MAKE)' LONG_CASES='$(LONG_CASES)' BT_CHECK='$(BT_CHECK)' \
	  sh tools/build-times

# What the targets here write (builds, make run, finetune-demo, handout, grade) and masks.svg, the name in
# masks' help example; a path git tracks is never removed, DIR only when it holds a handout (HANDOUT.md).
GENERATED := transformer tests transformer-debug tests-debug build build-avx2 build-clang build-clang-avx2 \
             addition.safetensors addition.csv addition.svg demo masks.svg build-fast build-mutants mutants.log \
             results.json results.xml
clean:
	@for f in $(GENERATED) $$(for d in '$(DIR)' handout-*; do [ -f "$$d/HANDOUT.md" ] && echo "$$d"; done); do \
	  if git ls-files --error-unmatch "$$f" >/dev/null 2>&1; then echo "make clean: keeping $$f (tracked by git)"; \
	  elif [ -e "$$f" ] || [ -L "$$f" ]; then echo "rm -rf $$f"; rm -rf "$$f"; fi; \
	done

# make part-one-check: Part I of transformer.cpp calls nothing of Part II but the entry points
# declared at its top (the reader who steps through a formula stays in Part I down to those), and
# its text names no loop-hint macro, exp kernel, lane reduction or allocator.
# transformer.cpp compiled with -DTF_PART_I_ALONE (Part I and its instances, without Part II) leaves
# undefined exactly the functions Part I calls without defining them; each must be one of these.
PART_ONE_CALLS := gemm softmax_row softmax_numerators activation_array activation_derivative_array \
                  allocate_params pool_allocate pool_deallocate
part-one-check:
	@CXX='$(CXX)' STD='$(STD)' PART_ONE_CALLS='$(strip $(PART_ONE_CALLS))' sh tools/part-one-check

# ---- make handout: a student copy with chosen function bodies replaced by a stub -----------------
# make handout [DIR=handout] [FUNCS="LayerNorm_backward ..."] [ASSIGNMENT=N]: tools/handout copies
# the project into DIR with the bodies of FUNCS (and of the later assignments' functions) replaced
# by a stub throwing tf::Error("not implemented: NAME"); tools/handout --help. The default FUNCS:
# the backward of every seed module, with the helpers that hold the answer (softmax_backward_row;
# FFN_backward and activation_derivative, which FFN_ReLU_backward and FFN_GELU_backward call).
HANDOUT_FUNCS := diag_backward Stack_backward Embedding_backward Softmax_backward softmax_backward_row \
                 Attention_backward Concat_backward MultiHeadSA_backward FFN_backward activation_derivative \
                 LayerNorm_backward CrossEntropy_backward
# The handout also carries build/tests.o and build-fast/machinery.o, compiled in it (about 35 s on
# 2 cores): a student's first make check then compiles only mathematics.o. HANDOUT_OBJECTS=0 leaves
# them out (a handout given through git, whose .gitignore leaves build/ out, compiles them itself).
HANDOUT_OBJECTS ?= 1

# ---- The assignments of docs/assignments.md ------------------------------------------------------
# Assignment N blanks ASSIGNMENT_N_FUNCS (the solutions of the others stay). Its graded test cases
# carry their assignment in tests.cpp, as a doctest test suite: TEST_CASE("..." *
# doctest::test_suite("assignment N")) is worth 1 point in `make grade`, a case of the suite
# "assignment N (P points)" P points ("assignment 2 (0 points)": the cases a fresh handout already
# passes, which check code it keeps). A case has one suite, so the suites of N are those two names,
# the filter SUITES_OF (./tests -ts="assignment N,assignment N (*)"; -lts lists the suites, -ltc the
# cases). This Makefile keeps the functions, tests.cpp the cases: `make handout ASSIGNMENT=N` writes
# handout-N/, `make check` in it (or `make check ASSIGNMENT=N` here, on the solution) builds fast and
# runs those cases, `make grade` scores them, and `make assignments-check` (run by the test case
# "handout: every assignment's handout fails the cases ...") checks the counts docs/assignments.md
# states and, with `make assignments-text-check`, that each assignment's text there reads every §
# and names every rule its cases grade.
ASSIGNMENTS := 1 2 3 4 5 6
ASSIGNMENT_1_FUNCS := diag_backward Stack_backward Embedding_backward
ASSIGNMENT_2_FUNCS := Softmax_backward softmax_backward_row activation_derivative activation_derivative_array \
                      FFN_backward LayerNorm_backward
ASSIGNMENT_3_FUNCS := Mask_BD Mask_AR Mask_ST apply_mask Attention_backward Concat_backward MultiHeadSA_backward
ASSIGNMENT_4_FUNCS := CrossEntropy_backward embed_backward post_ln_block_backward pre_ln_block_backward \
                      blocks_backward model_backward
ASSIGNMENT_5_FUNCS := mlm_corrupt Mask_XL xlnet_loss
ASSIGNMENT_6_FUNCS := adamw_step lr_schedule clip_grad_norm
# The fast build of `make check`: -Og compiles transformer.cpp in a fraction of -O3's time (and
# faster than -O1), and its code runs an assignment's cases fast enough for an edit-compile-test
# round under 30 s of one core (docs/assignments.md has the times). -D_GLIBCXX_ASSERTIONS: an index
# past a tensor's end (Tensor's operator[] and operator()) aborts, so a loop one element too long
# fails the assignment's tests even where reading that element changes no value.
FAST_OPT   := -Og $(ARCH) $(FP) -D_GLIBCXX_ASSERTIONS -DTF_COLD_O0
FAST_MACHINERY_OPT := -Og $(FP) -D_GLIBCXX_ASSERTIONS -DTF_COLD_O0
FAST_BUILD := build-fast
# A handout records its assignment in handout.mk (ASSIGNMENT := N).
-include handout.mk
ifneq ($(strip $(ASSIGNMENT)),)
  ifeq ($(strip $(ASSIGNMENT_$(strip $(ASSIGNMENT))_FUNCS)),)
    $(error ASSIGNMENT=$(ASSIGNMENT): no such assignment (they are $(ASSIGNMENTS)))
  endif
  FUNCS ?= $(ASSIGNMENT_$(strip $(ASSIGNMENT))_FUNCS)
  # Handout N holds the solutions of assignments 1..N-1 and none of N or later: the functions of
  # the later assignments are stubs as well, each naming its assignment.
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

# make check ASSIGNMENT=N (in a handout-N directory ASSIGNMENT comes from its handout.mk), or
# make check TESTS="LayerNorm*" (any doctest -tc pattern): one student round. transformer.cpp is
# compiled with $(FAST_OPT) into $(FAST_BUILD)/ as two objects, linked with the tests' own tests.o
# (built once, it does not depend on transformer.cpp); then the cases run: those of TESTS, else
# assignment N's (its test suites, -ts="assignment N,assignment N (*)"). mathematics.o
# (-DTF_ONLY_MATHEMATICS: Part I and the fast product it calls) is compiled after every edit of the
# file; machinery.o (-DTF_ONLY_MACHINERY: the rest of Part II,
# which sees Part I through declarations only) is compiled when the preprocessed text it is made
# of changes: machinery.key holds that text's checksum (with the compiler's version, target and
# flags), rewritten only when it differs. An edit of a formula function recompiles a third of the
# file. machinery.o is compiled without -march (nothing in it is hot in a round), so like tests.o
# it is the same object on every CPU and a handout carries it: a student's first round compiles
# mathematics.o alone.
$(FAST_BUILD):
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
	./$(FAST_BUILD)/tests $(if $(strip $(TESTS)),-tc="$(TESTS)",-ts="$(call SUITES_OF,$(ASSIGNMENT))")

# ---- make grade: the score of a course platform's autograder -------------------------------------
# make grade [ASSIGNMENT=N] [GRADE_DIR=.] [GRADE_TIMEOUT=30] [GRADE_VISIBILITY=...]: builds $(FAST_BUILD)/tests as make
# check does, runs each test case of assignment N's test suites on its own, prints the points of
# each (1, or P for a case of the suite "assignment N (P points)") and the score, and writes
# GRADE_DIR/results.json (Gradescope's autograder format) and GRADE_DIR/results.xml (JUnit,
# doctest's -r=junit of each case in one file). In a
# handout ASSIGNMENT comes from its handout.mk. It needs make, sh, awk, sed and the tests alone (and
# timeout, GNU coreutils, to stop a case that hangs). It succeeds when the cases ran, whatever they
# scored, and fails when the build failed (both files are written all the same: score 0, the
# compiler's output) or grading could not run. docs/assignments.md ("Grading") has the Gradescope
# setup.
GRADE_DIR     ?= .
GRADE_TIMEOUT ?= 30
# Gradescope's "visibility" of the results: visible, hidden, after_due_date or after_published;
# empty writes none (Gradescope's default: visible).
GRADE_VISIBILITY ?=

grade: export GRADE_VISIBILITY := $(GRADE_VISIBILITY)
grade: | doctest
	@if [ -z '$(strip $(ASSIGNMENT))' ]; then \
	  echo "make grade: give ASSIGNMENT=N (N in $(ASSIGNMENTS)); a handout knows its own" >&2; exit 1; fi
	@log=$$(mktemp); trap 'rm -f "$$log"' EXIT; failed=; \
	$(MAKE) --no-print-directory $(FAST_BUILD)/tests > "$$log" 2>&1 || failed="$$log"; cat "$$log"; \
	sh tools/grade ./$(FAST_BUILD)/tests '$(call SUITES_OF,$(ASSIGNMENT))' \
	  '$(GRADE_DIR)' '$(GRADE_TIMEOUT)' 'assignment $(strip $(ASSIGNMENT))' "$$failed"

ASSIGN_SHEET := docs/formulas.md
ASSIGN_TEXT_RUN = LC_ALL=C awk -v assignments='$(ASSIGNMENTS)' \
  -v funcs='$(foreach n,$(ASSIGNMENTS),$(n):$(strip $(ASSIGNMENT_$(n)_FUNCS));)' -v tests=tests.cpp \
  -v sheet=$(ASSIGN_SHEET) -v doc=$(ASSIGN_DOC) -v totals="$$totals" -v logs="$$logs" -f tools/assignments-text.awk \
  tests.cpp $(ASSIGN_SHEET) $(ASSIGN_DOC)
assignments-text-check:
	@totals=; logs=; $(ASSIGN_TEXT_RUN) || { echo "make assignments-text-check: $(ASSIGN_DOC) and the graded cases disagree" >&2; exit 1; }

# make assignments-check: for every assignment N, its handout (the mathematics of transformer.cpp
# compiled with $(FAST_OPT), no warning allowed, linked with the solution's machinery and
# ASSIGN_TESTS_O) and the solution (ASSIGN_TESTS) run its test suites; docs/assignments.md must
# state the counts they print, and the suites with the count of each ("Tests: the suite
# `assignment 1` (10 cases)", "Tests: the suites `assignment 2` (18 cases) and `assignment 2 (0
# points)` (6 cases)"). The handout must hold a stub of every later assignment's function, and
# solved (only those stubs left) pass the cases of assignments 1..N: a case of N or earlier must
# not need a later assignment's function. make grade's runner then grades the fresh handout and
# the solution: the one must score 0, the other full marks. Last, ASSIGN_TEXT holds each
# section's reading list and rules to the cases, with the fresh handouts' output. Prints a line
# or two per assignment; the test case that runs it shows them when it fails.
ASSIGN_TESTS_O ?= $(BUILD)/tests.o
ASSIGN_TESTS   ?= ./tests
ASSIGN_DOC     := docs/assignments.md
define newline


endef
assignments-check: export ASSIGN_LIST := $(foreach n,$(ASSIGNMENTS),$(n)|$(call SUITES_OF,$(n))|$(strip \
  $(foreach m,$(wordlist 2,99,$(wordlist $(n),99,$(ASSIGNMENTS))),$(ASSIGNMENT_$(m)_FUNCS)))|$(call SUITES_UPTO,$(n))$(newline))
assignments-check:
	@CXX='$(CXX)' STD='$(STD)' WARN='$(WARN)' FAST_OPT='$(FAST_OPT)' GCFLAGS='$(GCFLAGS)' MAKE='$(MAKE)' \
	  ASSIGN_TESTS_O='$(ASSIGN_TESTS_O)' ASSIGN_TESTS='$(ASSIGN_TESTS)' ASSIGN_DOC='$(ASSIGN_DOC)' GRADE_TIMEOUT='$(GRADE_TIMEOUT)' \
	  ASSIGNMENTS='$(ASSIGNMENTS)' ASSIGN_FUNCS='$(foreach n,$(ASSIGNMENTS),$(n):$(strip $(ASSIGNMENT_$(n)_FUNCS));)' \
	  sh tools/assignments-check

# ---- make mutants: mutation testing of the formula functions -----------------------------------
# make mutants FUNC=LayerNorm_backward [TESTS="LayerNorm*"] [MAX=n] [TIMEOUT=seconds]
# make mutants-all [FUNCS="name[:tests-pattern] ..."] [MAX=25]   (default FUNCS: MUTANT_FUNCS, Part I;
#   a tests-pattern "-ts=FILTER" selects test suites instead of case names)
# make mutants-assignments [MAX=3]   (each assignment's functions against its own test suites)
# tools/mutants does the work (tools/mutants --help): each mutant of FUNC's body is compiled at
# MUT_OPT with the index checks, linked with the other part of transformer.cpp and a tests.o built
# once in MUT_BUILD, and the cases of TESTS (doctest -tc, default all) run under TIMEOUT (auto: ten
# times the unmutated run plus 10 s). MAX keeps at most MAX mutants, evenly spread; JOBS=n tries n
# at once; BEFORE=path/tests.o runs each against other tests too; SAN=1 builds each with
# AddressSanitizer and UBSan (an index one past the end of a tensor then kills). docs/mutation.md
# explains the output and gives the figure for the suite.
MUT_OPT     ?= -O0
MUT_BUILD   ?= build-mutants
TIMEOUT     ?= auto
MAX         ?= 0
MUT_LOG     ?= mutants.log
JOBS        ?= 1
SAN         ?= 0
mut_comma   := ,
MUT_SAN     := $(if $(filter 1,$(SAN)),-fsanitize=address$(mut_comma)undefined -fno-sanitize-recover=undefined -D_GLIBCXX_ASSERTIONS)
TESTS       ?=
MUTANT_FUNCS := $(shell grep -v '^\#' tools/mutant-funcs.txt)
# Each assignment's functions against that assignment's own test cases, its test suites (an entry's
# tests "-ts=FILTER" select by suite; a space of the suites' names is matched by ?).
space := $(subst ,, )
MUTANT_ASSIGNMENT_FUNCS := $(foreach n,$(ASSIGNMENTS),$(foreach f,$(ASSIGNMENT_$(n)_FUNCS),$(f):-ts=$(subst $(space),?,$(call SUITES_OF,$(n)))))

.PHONY: mutants mutants-all mutants-assignments
# make mutants-assignments [MAX=3]: make mutants-all over MUTANT_ASSIGNMENT_FUNCS.
mutants-assignments:
	@$(MAKE) --no-print-directory mutants-all FUNCS='$(MUTANT_ASSIGNMENT_FUNCS)' MAX='$(if $(filter-out 0,$(MAX)),$(MAX),3)'
mutants mutants-all: | doctest
	@$(MAKE) --no-print-directory BUILD=$(MUT_BUILD) OPT="$(MUT_OPT)" $(MUT_BUILD)/tests.o >/dev/null
	@if [ $@ = mutants ] && [ -z '$(FUNC)' ]; then echo "make mutants: give FUNC=name (a function defined in transformer.cpp)" >&2; exit 1; fi
	@sh tools/mutants --tests-o $(MUT_BUILD)/tests.o --timeout '$(TIMEOUT)' --jobs '$(JOBS)' --log '$(MUT_LOG)' $(if $(BEFORE),--before '$(BEFORE)') \
	  --cxx '$(CXX)' --cflags '$(STD) -w $(MUT_OPT) $(CHECKED) $(MUT_SAN) $(GCFLAGS)' --ldflags '$(MUT_OPT) $(MUT_SAN)' \
	  --max '$(if $(filter mutants,$@),$(MAX),$(if $(filter-out 0,$(MAX)),$(MAX),25))' \
	  --list '$(if $(filter mutants,$@),$(FUNC):$(TESTS),$(if $(filter command line environment,$(origin FUNCS)),$(FUNCS),$(MUTANT_FUNCS)))'
