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
LONG_CASES := handout: *,readme: *,identical: *,browser: *
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
	@set -e; top=$$(pwd); tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	now() { date +%s.%N; }; \
	secs() { awk -v a="$$1" -v b="$$(now)" 'BEGIN { printf "%6.1f s", b - a }'; }; \
	fresh() { rm -rf "$$tmp/$$1"; mkdir -p "$$tmp/$$1"; cd "$$top"; \
	  tar -cf - transformer.hpp transformer.cpp main.cpp tests.cpp Makefile README.md .gitignore gdb_tensor.py .vscode .ci docs tools | tar -xf - -C "$$tmp/$$1"; }; \
	quiet() { log="$$tmp/log"; if ! "$$@" > "$$log" 2>&1; then tail -n 20 "$$log"; echo "make build-times: failed: $$*" >&2; exit 1; fi; }; \
	row() { printf '%-58s %s\n' "$$1" "$$2"; }; \
	echo "build times on $$(nproc) cores, $$($(CXX) --version | head -n 1), $$(date +%Y-%m-%d)"; \
	echo "one object at a time (one core):"; \
	fresh o; cd "$$tmp/o"; mkdir -p build; \
	for o in "transformer.o:transformer.cpp:$(OPT)" "transformer-checked.o:transformer.cpp:$(OPT) $(CHECKED)" \
	         "tests.o:tests.cpp:$(TESTS_OPT) $(CHECKED)" "main.o:main.cpp:$(OPT)" \
	         "check's mathematics.o:transformer.cpp:$(FAST_OPT) -DTF_ONLY_MATHEMATICS" \
	         "check's machinery.o:transformer.cpp:$(FAST_OPT) -DTF_ONLY_MACHINERY"; do \
	  name=$${o%%:*}; rest=$${o#*:}; src=$${rest%%:*}; flags=$${rest#*:}; t=$$(now); \
	  quiet $(CXX) $(STD) $(WARN) $$flags $(GCFLAGS) -c -o build/x.o $$src; \
	  row "  $$name ($$src, $$flags)" "$$(secs $$t)"; \
	done; \
	echo "the commands (as many jobs as cores):"; \
	fresh a; cd "$$tmp/a"; t=$$(now); quiet $(MAKE) --no-print-directory transformer; row "  make" "$$(secs $$t)  (target 30 s)"; \
	fresh b; cd "$$tmp/b"; t=$$(now); quiet $(MAKE) --no-print-directory tests transformer; build=$$(secs $$t); \
	t2=$$(now); quiet ./tests -tce='$(LONG_CASES)'; run=$$(secs $$t2); \
	row "  make test" "$$(secs $$t)  (target 120 s)"; row "    its build" "$$build"; row "    its run of the cases" "$$run  (target 30 s)"; \
	quiet $(MAKE) --no-print-directory check TESTS='$(BT_CHECK)'; touch transformer.cpp; t=$$(now); \
	quiet $(MAKE) --no-print-directory check TESTS='$(BT_CHECK)'; \
	row "  a student round: make check TESTS=\"$(BT_CHECK)\"" "$$(secs $$t)  (target 10 s)"; \
	quiet $(MAKE) --no-print-directory handout ASSIGNMENT=2 DIR="$$tmp/h2"; cd "$$tmp/h2"; \
	$(MAKE) --no-print-directory check > "$$tmp/log" 2>&1 || true; touch transformer.cpp; t=$$(now); \
	$(MAKE) --no-print-directory check > "$$tmp/log" 2>&1 || true; \
	grep -q '^\[doctest\] test cases:' "$$tmp/log" || { tail -n 20 "$$tmp/log"; exit 1; }; \
	row "  a student round in handout-2: make check" "$$(secs $$t)  (target 10 s)"; \
	fresh d; cd "$$tmp/d"; t=$$(now); quiet $(MAKE) --no-print-directory debug; row "  make debug" "$$(secs $$t)  (target 60 s)"; \
	t=$$(now); quiet $(MAKE) --no-print-directory test-sanitized; row "  the sanitized run of the formula cases (make test-sanitized)" "$$(secs $$t)"; \
	fresh m; cd "$$tmp/m"; \
	mut() { quiet $(MAKE) --no-print-directory mutants FUNC=LayerNorm_backward TESTS='LayerNorm*' MAX=$$1 MUT_LOG="$$tmp/m.log"; }; \
	mut 1; t=$$(now); mut 1; t1=$$(awk -v a="$$t" -v b="$$(now)" 'BEGIN { print b - a }'); \
	t=$$(now); mut 5; t5=$$(awk -v a="$$t" -v b="$$(now)" 'BEGIN { print b - a }'); \
	row "  make mutants: one mutant more (MAX=5 against MAX=1)" "$$(awk -v a=$$t1 -v b=$$t5 'BEGIN { printf "%6.1f s", (b - a) / 4 }')  (target 15 s)"

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
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	hints=$$(awk '/^\/\/ PART I\. THE MATHEMATICS/ { on = 1 } /^\/\/ PART II\. THE MACHINERY/ { on = 0 } on { print FNR ": " $$0 }' transformer.cpp \
	  | grep -E 'TF_[A-Z_]+|vexp|lane_|ExpParts|PoolAllocator|pool_|ArenaScope' || true); \
	if [ -n "$$hints" ]; then echo "make part-one-check: machinery between the PART I and PART II banners of transformer.cpp:" >&2; echo "$$hints" >&2; exit 1; fi; \
	$(CXX) $(STD) -O0 -w -DTF_PART_I_ALONE -c -o "$$tmp/part1.o" transformer.cpp; \
	nm -C --undefined-only "$$tmp/part1.o" | sed -nE 's/^ *U //p' | grep 'tf::' | sed -E 's/\(.*//' \
	  | sed -E -e ':a' -e 's/<[^<>]*>//g' -e 'ta' | sed -E 's/.* //; s/^tf:://' | sort -u > "$$tmp/calls"; \
	bad=$$(for f in $$(cat "$$tmp/calls"); do case " $(strip $(PART_ONE_CALLS)) " in *" $$f "*) ;; *) printf ' %s' "$$f";; esac; done); \
	if [ -n "$$bad" ]; then echo "make part-one-check: Part I calls what Part II defines:$$bad (define it in Part I, or declare it at Part I's top and add it to PART_ONE_CALLS)" >&2; exit 1; fi; \
	echo "make part-one-check: Part I calls only itself and $$(tr '\n' ' ' < "$$tmp/calls")"

# ---- make handout: a student copy with chosen function bodies replaced by a stub -----------------
# make handout [DIR=handout] [FUNCS="LayerNorm_backward ..."] copies the project into DIR (not .git)
# with the body of every function named in FUNCS, a definition in transformer.cpp (found by its
# name on a line starting in column 0, body up to the closing brace in column 0), replaced by
#     (void)param; ...
#     throw tf::Error("not implemented: NAME");
# The test cases "handout: ..." (they make handouts from the solution) are left out of its tests.cpp,
# and HANDOUT.md lists the functions to write. An unknown name is an error; a DIR that exists and
# holds something other than an earlier handout is left alone. The default FUNCS: the backward of
# every seed module, with the helpers that hold the answer (softmax_backward_row; FFN_backward and
# activation_derivative, which FFN_ReLU_backward and FFN_GELU_backward call).
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

# awk -v funcs="A B": transformer.cpp with the bodies of A and B blanked; exit 1 if a name has no body.
define HANDOUT_BLANK
function pname(p,    nm) {  # the name of one parameter declaration, "" if it has none
    sub(/=.*/, "", p); gsub(/^[ \t]+|[ \t]+$/, "", p)
    if (!match(p, /[A-Za-z_][A-Za-z0-9_]*$/) || RSTART == 1) return ""
    nm = substr(p, RSTART, RLENGTH)
    return (nm in keyword) ? "" : nm
}
function pnames(s,    i, c, depth, cur, out, nm) {  # the names in a parameter list
    depth = 0; cur = ""; out = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "(" || c == "<" || c == "[") depth++
        if (c == ")" || c == ">" || c == "]") depth--
        if (c == "," && depth == 0) {
            if ((nm = pname(cur)) != "") out = out " " nm
            cur = ""
        } else cur = cur c
    }
    if ((nm = pname(cur)) != "") out = out " " nm
    return out
}
function candidate(line,    k, p, before) {  # a wanted name followed by "(" in this line, or ""
    for (k = 1; k <= nwant; k++) {
        p = index(line, want[k] "(")
        if (p == 0) continue
        before = p == 1 ? " " : substr(line, p - 1, 1)
        if (before == " " || before == "*" || before == "&") return want[k]
    }
    return ""
}
# sig: the signature so far, from its first line. Returns 0 (not complete yet), 1 (a declaration or
# not a function), 2 (a definition whose "{" ends the last line).
function decide(    p, i, c, depth, rest, names, line, k, n) {
    p = index(sig, name "(") + length(name) + 1
    depth = 1
    for (i = p; i <= length(sig) && depth > 0; i++) {
        c = substr(sig, i, 1)
        if (c == "(") depth++
        if (c == ")") depth--
    }
    if (depth > 0) return nlines > 12 ? 1 : 0
    rest = substr(sig, i)
    if (rest ~ /;/ && !(rest ~ /^[^;]*\{/)) return 1
    if (!(rest ~ /\{/)) return nlines > 12 ? 1 : 0
    if (!(rest ~ /\{[ \t]*$/)) {
        printf("make handout: %s: the body of %s does not start on a line of its own\n", FILENAME, name) > "/dev/stderr"
        failed = 1; exit 1
    }
    names = pnames(substr(sig, p, i - 1 - p)); n = split(names, arg, " ")
    stub = ""; line = "   "
    for (k = 1; k <= n; k++) {
        if (length(line) + length(arg[k]) > 100) { stub = stub line "\n"; line = "   " }
        line = line " (void)" arg[k] ";"
    }
    if (n > 0) stub = stub line "\n"
    stub = stub "    throw tf::Error(\"not implemented: " name ((name in label) ? " (" label[name] ")" : "") "\");"
    return 2
}
BEGIN {
    nwant = split(funcs, want, " ")
    nl = split(labels, lab, " ")  # NAME=assignment+N: the stub of NAME says "(assignment N)"
    for (k = 1; k <= nl; k++) { eq = index(lab[k], "="); l = substr(lab[k], eq + 1); gsub(/\+/, " ", l); label[substr(lab[k], 1, eq - 1)] = l }
    nkw = split("const volatile unsigned signed int long short char bool float double void auto typename", kw, " ")
    for (k = 1; k <= nkw; k++) keyword[kw[k]] = 1
    state = 0
}
state == 2 { if ($0 == "}") { print; if (!(name in to)) to[name] = NR - 1; state = 0 }; next }
state == 1 || (state == 0 && /^[A-Za-z_]/ && (name = candidate($0)) != "") {
    if (state == 0) { buf = $0; sig = $0; nlines = 1; state = 1 }
    else { buf = buf "\n" $0; sig = sig " " $0; nlines++ }
    d = decide()
    if (d == 1) { print buf; state = 0 }
    if (d == 2) { print buf; print stub; blanked[name]++; if (!(name in from)) from[name] = NR + 1; state = 2 }
    next
}
{ print }
END {
    if (failed) exit 1
    if (state != 0) {
        printf("make handout: %s: the body of %s has no closing brace in column 0\n", FILENAME, name) > "/dev/stderr"
        exit 1
    }
    for (k = 1; k <= nwant; k++)
        if (!(want[k] in blanked)) {
            printf("make handout: %s defines no function %s\n", FILENAME, want[k]) > "/dev/stderr"
            failed = 1
        }
    if (failed) exit 1
    if (ranges != "") for (k = 1; k <= nwant; k++) print want[k], from[want[k]], to[want[k]] > ranges
}
endef

# awk: tests.cpp without the TEST_CASEs named "handout: ..." (and the empty line after each).
define HANDOUT_TESTS
skip == 2 { skip = 0; if ($0 == "") next }
skip == 1 { if ($0 == "}") skip = 2; next }
/^TEST_CASE\("handout: / { skip = 1; next }
{ skip = 0; print }
endef

# awk -v n=N: the section "## Assignment N: ..." of docs/assignments.md (its reading list, the
# functions, the rules the cases grade, the counts), its links made to work from the handout's root;
# exit 1 if there is none.
define HANDOUT_SECTION
/^## / { on = index($0, "## Assignment " n ":") == 1; found += on }
on {
    gsub(/[]][(]/, "](docs/")
    gsub(/[]][(]docs\/#/, "](docs/assignments.md#")
    gsub(/[]][(]docs\/http/, "](http")
    print
}
END { if (!found) exit 1 }
endef

handout: export HANDOUT_BLANK_AWK := $(value HANDOUT_BLANK)
handout: export HANDOUT_TESTS_AWK := $(value HANDOUT_TESTS)
handout: export HANDOUT_SECTION_AWK := $(value HANDOUT_SECTION)
handout:
	@set -e; dir='$(DIR)'; funcs='$(strip $(FUNCS))'; n='$(strip $(ASSIGNMENT))'; suites='$(if $(strip $(ASSIGNMENT)),$(call SUITES_OF,$(ASSIGNMENT)))'; \
	later='$(strip $(filter-out $(FUNCS),$(LATER_FUNCS)))'; \
	case "$$dir" in ''|.|./|/|..|../) echo "make handout: DIR=$$dir: give a new directory" >&2; exit 1;; esac; \
	case " $$funcs " in "  ") echo "make handout: FUNCS is empty" >&2; exit 1;; esac; \
	if [ -e "$$dir" ] && [ ! -f "$$dir/HANDOUT.md" ] && [ -n "$$(ls -A "$$dir" 2>/dev/null)" ]; then \
	  echo "make handout: $$dir exists and is not a handout; remove it or choose another DIR" >&2; exit 1; fi; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	awk -v funcs="$$funcs $$later" -v labels='$(strip $(LATER_LABELS))' "$$HANDOUT_BLANK_AWK" transformer.cpp > "$$tmp/transformer.cpp"; \
	awk "$$HANDOUT_TESTS_AWK" tests.cpp > "$$tmp/tests.cpp"; \
	{ echo "# Handout"; echo; \
	  echo "Write the bodies of these functions in \`transformer.cpp\`; each one now throws"; \
	  echo "\`tf::Error(\"not implemented: NAME\")\`:"; echo; \
	  for f in $$funcs; do echo "- \`$$f\`"; done; echo; \
	  if [ -n "$$later" ]; then \
	    echo "The functions of the later assignments are stubs too (their message names the assignment):"; \
	    echo "$$later." | sed 's/[^ .][^ .]*/`&`/g; s/ /, /g' | fold -s -w 96 | sed 's/ *$$//'; \
	    echo "The cases that need them fail until then, and so does \`make run\` (it trains: assignments 4 and 6);"; \
	    echo "docs/assignments.md says what works in which handout."; echo; fi; \
	  echo "\`make test\` builds the program and the tests and runs them: every failing test case shows"; \
	  echo "the \"not implemented: NAME\" of the function it still needs. Test cases are named by module,"; \
	  echo "so \`./tests -tc=\"LayerNorm*\"\` runs the LayerNorm tests alone (\`./tests -ltc\` lists them all)."; \
	  echo "The formula sheet docs/formulas.md gives each formula with the functions that compute it and"; \
	  echo "the test cases that check it."; \
	  if [ -n "$$n" ]; then echo; \
	    echo "This is assignment $$n of docs/assignments.md. \`make check\` builds fast (-Og) and runs its test"; \
	    echo "cases alone, those of its test suites (\"assignment $$n\", and \"assignment $$n (0 points)\" if any):"; \
	    echo "./$(FAST_BUILD)/tests -ts=\"$$suites\"."; \
	    echo "\`make grade\` runs them one by one and prints the points each is worth, as the course's"; \
	    echo "autograder counts them. The assignment's text follows: what to read first, what to write and"; \
	    echo "the rules the cases grade besides the formulas."; \
	    echo; awk -v n="$$n" "$$HANDOUT_SECTION_AWK" $(ASSIGN_DOC) || { echo "make handout: $(ASSIGN_DOC) has no section \"## Assignment $$n: ...\"" >&2; exit 1; }; fi; \
	  echo; echo "## The commands"; echo; \
	  if [ -n "$$n" ]; then \
	    echo "- \`make check\`: builds fast and runs this assignment's cases; it ends with doctest's line"; \
	    echo "  \`[doctest] test cases: N | N passed | N failed | ...\`, and each failing check above it names the"; \
	    echo "  function, the entry, what was expected (with its source: formulas §N, a hand value, a finite"; \
	    echo "  difference) and what it got."; \
	    echo "- \`make grade\`: each case on its own with its points, the score, results.json and results.xml."; fi; \
	  echo "- \`make check TESTS=\"LayerNorm*\"\`: the cases whose names match, the same way (\`./tests -ltc\`"; \
	  echo "  after \`make tests\` lists every case)."; \
	  echo "- \`make debug\`: builds \`tests-debug\` and \`transformer-debug\` (-O0 -g, sanitizers), then step"; \
	  echo "  through a case with the tensor printer: \`gdb -x gdb_tensor.py --args ./tests-debug"; \
	  echo "  -tc=\"LayerNorm*\"\`, \`break tf::LayerNorm_backward<double>\`, \`run\`, \`p dY\` prints the tensor"; \
	  echo "  with its shape (the gradient checks run in double)."; \
	  echo "- \`./transformer explain --preset tiny-gpt2 --tokens 3,1,4\` (after \`make transformer\`): one"; \
	  echo "  example through every formula box with its formula, function, shapes and first values; it"; \
	  echo "  stops with \"not implemented: NAME\" at the first function still to be written."; \
	  echo "- \`./transformer explain --preset tiny-gpt2 --tokens 3,1,4 --html explain.html\` (once every function runs): the same as one page that checks each backward box against finite differences of its own forward, so it shows which formula is wrong."; \
	} > "$$tmp/HANDOUT.md"; \
	rm -rf "$$dir"; mkdir -p "$$dir/.ci" "$$dir/.vscode" "$$dir/tools"; \
	cp transformer.hpp main.cpp Makefile README.md .gitignore gdb_tensor.py "$$dir/"; cp .ci/run "$$dir/.ci/"; \
	cp tools/finetune-demo "$$dir/tools/"; \
	cp .vscode/launch.json "$$dir/.vscode/"; cp -R docs "$$dir/"; \
	cp "$$tmp/transformer.cpp" "$$tmp/tests.cpp" "$$tmp/HANDOUT.md" "$$dir/"; \
	if [ -n "$$n" ]; then echo "ASSIGNMENT := $$n" > "$$dir/handout.mk"; fi; \
	if [ '$(HANDOUT_OBJECTS)' != 0 ]; then \
	  echo "make handout: compiling $$dir's tests and machinery, so that a first make check compiles the mathematics alone"; \
	  $(MAKE) --no-print-directory -s -C "$$dir" $(BUILD)/tests.o $(FAST_BUILD)/machinery.o; fi; \
	echo "make handout: wrote $$dir with these bodies replaced by a stub: $$funcs"; \
	if [ -n "$$later" ]; then echo "and those of the later assignments: $$later"; fi; \
	if [ -n "$$n" ]; then echo "check it: make -C $$dir check (assignment $$n's cases, fast build)"; \
	else echo "check it: make -C $$dir test (the cases that need them fail, naming them)"; fi

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

# sh -c "$GRADE_SH" grade TESTS SUITES DIR TIMEOUT TITLE [BUILD_LOG]: the runner (exit status 0:
# graded; 1: the build failed, BUILD_LOG reported; 2: no grading). SUITES is a doctest -ts filter
# (SUITES_OF); the cases are those its suites hold (-ltc), in doctest's order, each worth the points
# its suite's name gives: 1 for "assignment N", P for "assignment N (P points)" (-lts lists the
# suites; a suite of the filter that names no points is an error).
# One process per test case, because a case that aborts (an index check) or is stopped after TIMEOUT
# seconds then costs only its own points, where in a single run it would end the cases after it.
# The case is chosen by -cs -tc=NAME with each character that -tc treats specially (* ? , \)
# replaced by ?, which matches any one character: that works with every doctest version (older
# ones cannot escape a comma or a backslash) and picks that name alone (a second match would show
# in doctest's count of cases: the case then fails, saying so). Each case runs twice: with the
# console reporter, whose text (what make check shows) is its "output" and whose exit status and
# count decide pass or fail, and with -r=junit for the JUnit file (skipped after a timeout: the
# report has an <error> instead). A process starts in a few milliseconds; grading assignment 6,
# the slowest, takes about 5 s. With BUILD_LOG (the build failed) no case runs and the reports
# carry the log.
define GRADE_RUN
set -u
bin=$1 suites=$2 dir=$3 limit=$4 title=$5 build_log=${6-}
case "$limit" in ''|*[!0-9]*) echo "make grade: GRADE_TIMEOUT=$limit: give whole seconds (0: no limit)" >&2; exit 2;; esac
case "$dir" in '') echo "make grade: GRADE_DIR is empty" >&2; exit 2;; esac
case "${GRADE_VISIBILITY-}" in ''|visible|hidden|after_due_date|after_published) ;;
  *) echo "make grade: GRADE_VISIBILITY=$GRADE_VISIBILITY: give visible, hidden, after_due_date or after_published (or nothing)" >&2; exit 2;; esac
mkdir -p "$dir" || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 2' INT TERM
to=
if [ "$limit" -gt 0 ]; then
  if command -v timeout >/dev/null 2>&1; then to="timeout -k 5 $limit"
  else echo "make grade: no timeout command (GNU coreutils): a case that never ends is not stopped" >&2; fi
fi
n=0
if [ -z "$build_log" ]; then
  listed() {  # the names doctest lists with these options
    "$bin" -nc "$@" < /dev/null > "$tmp/list" 2>&1 || { cat "$tmp/list" >&2; echo "make grade: $bin $* failed" >&2; return 1; }
    awk '/^=====*$/ { part++; next } part == 1' "$tmp/list"
  }
  listed -ltc -ts="$suites" > "$tmp/names" || exit 2
  [ -s "$tmp/names" ] || { echo "make grade: no test case is in the test suites $suites" >&2; exit 2; }
  listed -lts -ts="$suites" > "$tmp/suites" || exit 2
  : > "$tmp/points"
  while IFS= read -r s; do  # "POINTS<TAB>NAME" for every case of every suite
    case "$s" in
      *" ("*" points)"|*" ("*" point)") p=${s##* (}; p=${p%% point*};;
      *" ("*) p=;;
      *) p=1;;
    esac
    case "$p" in ''|.*|*.|*[!0-9.]*|*.*.*) echo "make grade: the test suite \"$s\" gives no points: name it \"${s%% (*}\" (1 point a case) or \"${s%% (*} (P points)\"" >&2; exit 2;; esac
    listed -ltc -ts="$(printf '%s\n' "$s" | sed 's/[\\*?,]/?/g')" > "$tmp/of-suite" || exit 2
    awk -v p="$p" '{ print p "\t" $0 }' "$tmp/of-suite" >> "$tmp/points"
  done < "$tmp/suites"
  echo "make grade: $title, $(wc -l < "$tmp/names" | tr -d ' ') test cases, each in its own process${to:+ (at most $limit s)}"
  while IFS= read -r name; do
    n=$((n + 1))
    printf '%s\n' "$name" > "$tmp/$n.name"
    pat=$(printf '%s\n' "$name" | sed 's/[\\*?,]/?/g')
    $to "$bin" -nc -ni -cs -ts="$suites" -tc="$pat" < /dev/null > "$tmp/$n.raw" 2>&1
    st=$?
    tr -d '\000' < "$tmp/$n.raw" > "$tmp/$n.out"
    count=$(sed -n 's/^\[doctest\] test cases: *\([0-9]*\) | *\([0-9]*\) passed.*/\1 \2/p' "$tmp/$n.out" | tail -n 1)
    : > "$tmp/$n.note"
    if [ "$st" -eq 0 ] && [ "$count" = "1 1" ]; then v=passed
    elif [ -n "$to" ] && { [ "$st" -eq 124 ] || [ "$st" -eq 137 ]; }; then v=timeout  # 137: timeout's KILL, 5 s after its TERM
      echo "make grade: stopped after $limit s (GRADE_TIMEOUT): the case did not end" > "$tmp/$n.note"
    elif [ "$st" -gt 128 ]; then v=failed
      echo "make grade: the test program was ended by signal $((st - 128)) (6: abort, e.g. an index past the end of a tensor; 11: segmentation fault)" > "$tmp/$n.note"
    elif [ -n "$count" ] && [ "${count% *}" != 1 ]; then v=failed
      echo "make grade: the name matched ${count% *} test cases, not 1: rename one of them" > "$tmp/$n.note"
    else v=failed; fi
    echo "$v" > "$tmp/$n.verdict"
    if [ "$v" != timeout ]; then
      $to "$bin" -nc -cs -ts="$suites" -tc="$pat" -r=junit -o="$tmp/$n.xml" < /dev/null > /dev/null 2>&1
    fi
  done < "$tmp/names"
fi
GRADE_TMP=$tmp GRADE_N=$n GRADE_TITLE=$title GRADE_BUILD_LOG=$build_log \
  GRADE_JSON=$dir/results.json GRADE_XML=$dir/results.xml LC_ALL=C awk "$GRADE_AWK" || exit 2
mv -f "$dir/results.json.tmp" "$dir/results.json" && mv -f "$dir/results.xml.tmp" "$dir/results.xml" || exit 2
[ -z "$build_log" ]
endef

# awk (environment: GRADE_TMP, GRADE_N, ...): the reports of the runner's files K.name, K.verdict,
# K.note, K.out, K.xml for the K-th case and "points" (POINTS<TAB>NAME of every case). results.json:
# {"score", "output", "tests": [{"name", "score", "max_score", "status", "output"}]}, strings
# escaped for JSON (a byte that is not UTF-8 becomes U+FFFD), a failed case's output its console
# text (its first 200 lines).
# results.xml: the <testcase> elements of every K.xml in one <testsuite>, an <error> for a case
# without a complete report. Prints one line per case and the score.
define GRADE_REPORT
function num(x) { return sprintf("%.10g", x) }
function jbody(s,    out, i, n, c, b, need, lo, hi, ok, k, b2) {  # s escaped for a JSON string
    if (s !~ /[^ -~]/ && index(s, "\"") == 0 && index(s, "\\") == 0) return s
    out = ""; n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1); b = ord[c]
        if (c == "\"") out = out "\\\""
        else if (c == "\\") out = out "\\\\"
        else if (c == "\t") out = out "\\t"
        else if (c == "\r") out = out "\\r"
        else if (b < 32) out = out sprintf("\\u%04x", b)
        else if (b < 128) out = out c
        else {  # a UTF-8 sequence (Unicode's table of well-formed byte sequences), else U+FFFD
            need = (b >= 194 && b <= 223) ? 1 : (b >= 224 && b <= 239) ? 2 : (b >= 240 && b <= 244) ? 3 : 0
            lo = (b == 224) ? 160 : (b == 240) ? 144 : 128
            hi = (b == 237) ? 159 : (b == 244) ? 143 : 191
            ok = need > 0 && i + need <= n
            for (k = 1; ok && k <= need; k++) {
                b2 = ord[substr(s, i + k, 1)]
                if (b2 < (k == 1 ? lo : 128) || b2 > (k == 1 ? hi : 191)) ok = 0
            }
            if (ok) { out = out substr(s, i, need + 1); i += need }
            else out = out "\\ufffd"
        }
    }
    return out
}
function jstr(s) { return "\"" jbody(s) "\"" }
function jfile(f, from, maxl,    line, out, k, more, blank) {  # from, then the lines of f, as JSON text
    out = from; k = 0; more = 0; blank = 0
    while ((getline line < f) > 0) {
        if (line ~ /^\[doctest\] / || line ~ /^=====*$/) continue  # doctest's summary, its separators
        if (line == "") { blank++; continue }  # empty lines are kept between lines only
        if (k < maxl) {
            if (out != "") { for (; blank > 0; blank--) out = out "\\n"; out = out "\\n" }
            out = out jbody(line)
        } else more++
        blank = 0; k++
    }
    close(f)
    if (more) out = out "\\n... and " more " more lines (make check shows them all)"
    return out
}
function xesc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); gsub(/"/, "\\&quot;", s); return s }
function xml_case(f, name, why,    line, part, lines, cnt, suite, t) {  # the <testcase> elements of f, or an <error>
    part = 0; lines = ""; cnt = 0
    while ((getline line < f) > 0) {
        if (part == 0 && line ~ /^  <testsuite /) { part = 1; suite = line; continue }
        if (part == 1 && line == "  </testsuite>") { part = 2; continue }
        if (part == 1) { lines = lines line "\n"; if (line ~ /^    <testcase /) cnt++ }
        if (part == 2 && line == "</testsuites>") part = 3
    }
    close(f)
    if (part == 3 && cnt > 0) {
        t = suite; if (match(t, / failures="[0-9]+"/)) xfail += substr(t, RSTART + 11, RLENGTH - 12)
        t = suite; if (match(t, / errors="[0-9]+"/)) xerr += substr(t, RSTART + 9, RLENGTH - 10)
        xcases += cnt
        return lines
    }
    xerr++; xcases++
    return "    <testcase classname=\"tests.cpp\" name=\"" xesc(name) "\" status=\"run\">\n" \
           "      <error message=\"" xesc(why) "\">" xesc(why) "</error>\n    </testcase>\n"
}
BEGIN {
    for (k = 1; k < 256; k++) ord[sprintf("%c", k)] = k
    tmp = ENVIRON["GRADE_TMP"]; n = ENVIRON["GRADE_N"] + 0; title = ENVIRON["GRADE_TITLE"]
    build_log = ENVIRON["GRADE_BUILD_LOG"]; json = ENVIRON["GRADE_JSON"]; xml = ENVIRON["GRADE_XML"]
    maxl = 200
    while ((getline line < (tmp "/points")) > 0) {  # POINTS<TAB>NAME: the points of each case, from its suite
        k = index(line, "\t"); pts[substr(line, k + 1)] = substr(line, 1, k - 1) + 0
    }
    close(tmp "/points")
    score = 0; total = 0; passed = 0; tests = ""; cases = ""; xfail = 0; xerr = 0; xcases = 0
    for (k = 1; k <= n; k++) {
        f = tmp "/" k
        name = ""; v = ""; note = ""
        getline name < (f ".name"); close(f ".name")
        getline v < (f ".verdict"); close(f ".verdict")
        getline note < (f ".note"); close(f ".note")
        if (!(name in pts)) { printf("make grade: the case \"%s\" is in no test suite that gives points\n", name) > "/dev/stderr"; exit 2 }
        max = pts[name]; ok = v == "passed"; got = ok ? max : 0
        score += got; total += max; passed += ok
        printf("  %5s/%-5s %s  %s\n", num(got), num(max), ok ? "passed" : "FAILED", name)
        tests = tests (k > 1 ? ",\n" : "") "    {\"name\": " jstr(name) ", \"score\": " num(got) ", \"max_score\": " num(max) \
                ", \"status\": \"" (ok ? "passed" : "failed") "\", \"output\": \"" (ok ? "passed" : jfile(f ".out", jbody(note), maxl)) "\"}"
        cases = cases xml_case(f ".xml", name, v == "timeout" ? note : "no complete JUnit report (the program was stopped)")
    }
    if (build_log != "") {
        summary = title ": the build failed (make check shows the same errors), 0 points"
        out = jfile(build_log, jbody(summary), maxl)
        cases = "    <testcase classname=\"make\" name=\"build\" status=\"run\">\n      <error message=\"the build failed\">" \
                xesc(summary) "</error>\n    </testcase>\n"
        xerr = 1; xcases = 1
    } else {
        summary = title ": " num(score) " of " num(total) " points, " passed " of " n " test cases pass"
        out = jbody(summary)
    }
    visibility = ENVIRON["GRADE_VISIBILITY"] == "" ? "" : "  \"visibility\": \"" ENVIRON["GRADE_VISIBILITY"] "\",\n"
    printf("{\n  \"score\": %s,\n%s  \"output\": \"%s\",\n  \"tests\": [\n%s%s  ]\n}\n", num(score), visibility, out, tests, tests == "" ? "" : "\n") > (json ".tmp")
    printf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"%s\" errors=\"%d\" failures=\"%d\" tests=\"%d\">\n%s  </testsuite>\n</testsuites>\n", \
           xesc(title), xerr, xfail, xcases, cases) > (xml ".tmp")
    close(json ".tmp"); close(xml ".tmp")
    print "make grade: " summary " (" json ", " xml ")"
}
endef

grade: export GRADE_SH := $(value GRADE_RUN)
grade: export GRADE_AWK := $(value GRADE_REPORT)
grade: export GRADE_VISIBILITY := $(GRADE_VISIBILITY)
grade: | doctest
	@if [ -z '$(strip $(ASSIGNMENT))' ]; then \
	  echo "make grade: give ASSIGNMENT=N (N in $(ASSIGNMENTS)); a handout knows its own" >&2; exit 1; fi
	@log=$$(mktemp); trap 'rm -f "$$log"' EXIT; failed=; \
	$(MAKE) --no-print-directory $(FAST_BUILD)/tests > "$$log" 2>&1 || failed="$$log"; cat "$$log"; \
	sh -c "$$GRADE_SH" grade ./$(FAST_BUILD)/tests '$(call SUITES_OF,$(ASSIGNMENT))' \
	  '$(GRADE_DIR)' '$(GRADE_TIMEOUT)' 'assignment $(strip $(ASSIGNMENT))' "$$failed"

# ---- make assignments-text-check: each assignment's text against its graded cases --------------
# awk -v assignments="1 2 ..." -v funcs="1:f g;2:h;..." -v tests=tests.cpp -v sheet=docs/formulas.md
# -v doc=docs/assignments.md [-v totals="1:10 ..."] [-v logs="1:FILE ..."], over those three files:
# for each assignment N, its graded cases (those of tests.cpp whose doctest test suite is
# "assignment N" or "assignment N (...)") against the section "## Assignment N: ..." of doc.
# - Every § a case needs is in the section's Read paragraph (the lines from "Read " to a blank
#   line): each "§N" (or range "§N-§M") in the source text of the case (its TEST_CASE line and body)
#   and of the helpers of tests.cpp it calls, and those they call; and each § under which the code
#   map of the formula sheet (§33, rows "| [§N](#sN) ... | ... | `case name` ... |", names matched
#   as doctest matches -tc) lists the case. The table row "| N | ..." of doc reads the same sections.
# - Every function of ASSIGNMENT_N_FUNCS whose argument checks a case grades is named (as
#   `name` before the item's first ": ") in an item "- ..." of the section's list after the line
#   "Rules ...": one that a throw check of the case or its helpers calls (M_CHECK_TF_ERROR,
#   CHECK_THROWS*, REQUIRE_THROWS*: a name followed by "(" or "<" in its arguments, string
#   literals and comments left out), or, given the fresh handout's output in logs, whose stub a
#   throw check there reached ("not implemented: NAME" on a failed THROWS line or a logged
#   "message:" line).
# - With totals, the case count of this scan is the one ./tests lists.
# The scan reads the text: a helper is a function or macro defined from column 0 with its body up
# to a "}" in column 0 (a comment above it is not its text); a call is a name followed by "(" or
# "<", so a lambda defined before the check that calls it, a helper passed by name, a raw string
# literal's parentheses or a function of transformer.cpp that calls the assignment's are not seen
# through (the fresh handout's run covers the stubs a throw check reaches). Prints a line per
# assignment that agrees, one per missing § or rule otherwise; exits 1 then.
define ASSIGN_TEXT
function add(unit, line) { text[unit] = (unit in text) ? text[unit] "\n" line : line }
# s without its string and character literals and its comments
function code_of(s,    out, i, n, c, q) {
    out = ""; n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (c == "/" && substr(s, i + 1, 1) == "/") { while (i <= n && substr(s, i, 1) != "\n") i++; out = out "\n"; continue }
        if (c == "/" && substr(s, i + 1, 1) == "*") { i += 2; while (i <= n && substr(s, i, 2) != "*/") i++; i++; continue }
        if (c == "\"" || c == "'") {
            q = c
            for (i++; i <= n && substr(s, i, 1) != q; i++) if (substr(s, i, 1) == "\\") i++
            continue
        }
        out = out c
    }
    return out
}
# the names in s (code) followed by "(" or "<", as " name1 name2 ... "
function called(s,    out, rest, nm) {
    out = " "; rest = s
    while (match(rest, /[A-Za-z_][A-Za-z0-9_]*[ \t]*[(<]/)) {
        nm = substr(rest, RSTART, RLENGTH); sub(/[ \t]*[(<]$/, "", nm)
        if (RSTART == 1 || substr(rest, RSTART - 1, 1) !~ /[A-Za-z0-9_]/) out = out nm " "
        rest = substr(rest, RSTART + RLENGTH)
    }
    return out
}
# the argument texts of the throw checks in s (code), each followed by "\001"
function throw_args(s,    out, rest, p, d, c, start) {
    out = ""; rest = s
    while (match(rest, /(M_CHECK_TF_ERROR|(CHECK|REQUIRE|WARN)_THROWS[A-Z_]*)[ \t]*\(/)) {
        if (RSTART > 1 && substr(rest, RSTART - 1, 1) ~ /[A-Za-z0-9_]/) { rest = substr(rest, RSTART + RLENGTH); continue }
        start = RSTART + RLENGTH; d = 1
        for (p = start; p <= length(rest) && d > 0; p++) {
            c = substr(rest, p, 1)
            if (c == "(") d++
            else if (c == ")") d--
        }
        out = out substr(rest, start, p - 1 - start) "\001"
        rest = substr(rest, p)
    }
    return out
}
# the sections s cites, "§N" or a range "§N-§M", as " N M ... "
function sections(s,    out, rest, t, a, b, k) {
    out = " "; rest = s
    while (match(rest, /§[0-9]+(-§[0-9]+)?/)) {
        t = substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
        gsub(/[^0-9-]/, "", t); a = t; sub(/-.*/, "", a); b = t; sub(/.*-/, "", b)
        for (k = a + 0; k <= b + 0 && k <= a + 99; k++) out = out k " "
    }
    return out
}
# doctest's wildcard match: * any run, ? one character (s and p in lower case)
function wild(s, p,    si, pi, ns, np, star, mark) {
    si = 1; pi = 1; ns = length(s); np = length(p); star = 0
    while (si <= ns) {
        if (pi <= np && substr(p, pi, 1) == "*") { star = ++pi; mark = si; continue }
        if (pi <= np && (substr(p, pi, 1) == "?" || substr(p, pi, 1) == substr(s, si, 1))) { pi++; si++; continue }
        if (!star) return 0
        pi = star; si = ++mark
    }
    while (pi <= np && substr(p, pi, 1) == "*") pi++
    return pi > np
}
function where(a) { return doc ", section \"Assignment " a "\"" }
BEGIN {
    n_assign = split(assignments, A, " ")
    nf = split(funcs, F, ";")
    for (k = 1; k <= nf; k++) {
        if (F[k] !~ /:/) continue
        c = index(F[k], ":"); a = substr(F[k], 1, c - 1); gsub(/ /, "", a); blanked[a] = " " substr(F[k], c + 1) " "
    }
    nt = split(totals, T, " ")
    for (k = 1; k <= nt; k++) { c = index(T[k], ":"); total[substr(T[k], 1, c - 1)] = substr(T[k], c + 1) }
    nl = split(logs, L, " ")
    for (k = 1; k <= nl; k++) { c = index(L[k], ":"); log_of[substr(L[k], 1, c - 1)] = substr(L[k], c + 1) }
    state = ""
}
# ---- tests.cpp: the test cases and the helpers (functions and macros defined in column 0)
FILENAME == tests && state == "body" { add(unit, $0); if ($0 ~ /^}/) state = ""; next }
FILENAME == tests && state == "macro" { add(unit, $0); if ($0 !~ /\\$/) state = ""; next }
FILENAME == tests && state == "sig" {
    add(unit, $0)
    if ($0 ~ /\{/) state = ($0 ~ /}[ \t]*$/ && $0 !~ /\{[ \t]*$/) ? "" : "body"
    else if ($0 ~ /;[ \t]*$/) { delete text[unit]; delete helper[nm]; state = "" }
    next
}
FILENAME == tests && /^TEST_CASE\(/ {
    ncase++; unit = "case " ncase
    match($0, /^TEST_CASE\("([^"\\]|\\.)*"/); nm = substr($0, 12, RLENGTH - 12)
    gsub(/\\"/, "\"", nm); gsub(/\\\\/, "\\", nm)
    case_name[ncase] = nm; case_line[ncase] = FNR; suite = ""
    if (match($0, /doctest::test_suite\("[^"]*"\)/)) suite = substr($0, RSTART + 21, RLENGTH - 23)
    if (suite ~ /^assignment [0-9]+( \(.*\))?$/) {
        a = suite; sub(/^assignment /, "", a); sub(/ .*/, "", a)
        case_of[a] = case_of[a] " " ncase; ncases[a]++
    }
    add(unit, $0)
    state = ($0 ~ /\{[ \t]*$/) ? "body" : ""
    next
}
FILENAME == tests && /^#define [A-Za-z_][A-Za-z0-9_]*\(/ {
    nm = $2; sub(/\(.*/, "", nm); unit = "helper " nm; helper[nm] = 1
    add(unit, $0); if ($0 ~ /\\$/) state = "macro"
    next
}
FILENAME == tests && /^[A-Za-z_]/ && !/^(namespace|struct|class|union|enum|using|typedef|static_assert|template|extern)[^A-Za-z0-9_]/ {
    if (!match($0, /[A-Za-z_][A-Za-z0-9_]*\(/)) next
    nm = substr($0, RSTART, RLENGTH - 1)
    if (nm ~ /^(if|for|while|switch|return|sizeof|decltype|alignof|operator)$/) next
    unit = "helper " nm
    if ($0 ~ /\{/) {
        helper[nm] = 1; add(unit, $0)
        state = ($0 ~ /}[ \t]*;?[ \t]*$/ && $0 !~ /\{[ \t]*$/) ? "" : "body"
    } else if ($0 !~ /;[ \t]*$/) { helper[nm] = 1; add(unit, $0); state = "sig" }
    next
}
FILENAME == tests { next }
# ---- docs/formulas.md: the code map's rows "| [§N](#sN) title | functions | test cases |"
FILENAME == sheet && /^\| \[§[0-9]+\]/ {
    s = $0; sub(/^\| \[§/, "", s); sub(/[^0-9].*/, "", s)
    cell = $0; sub(/[ \t]*\|[ \t]*$/, "", cell)
    while ((p = index(cell, " | ")) > 0) cell = substr(cell, p + 3)
    while (match(cell, /`[^`]+`/)) { nmap++; map_sec[nmap] = s; map_pat[nmap] = tolower(substr(cell, RSTART + 1, RLENGTH - 2)); cell = substr(cell, RSTART + RLENGTH) }
    next
}
FILENAME == sheet { next }
# ---- docs/assignments.md: the table's rows, and each section's Read paragraph and Rules list
FILENAME == doc && /^\| [0-9]+ \|/ {
    a = $0; sub(/^\| /, "", a); sub(/ .*/, "", a); nc = split($0, cells, "|"); row_reads[a] = sections(cells[4])
    next
}
FILENAME == doc && /^## / { sec = ""; part = ""; if (match($0, /^## Assignment [0-9]+:/)) { sec = substr($0, 15, RLENGTH - 15); seen_sec[sec] = 1 }; next }
FILENAME == doc && sec == "" { next }
FILENAME == doc && part == "rules-head" { if ($0 ~ /^[ \t]*$/) { part = "rules"; next }; if ($0 !~ /^- /) next; part = "rules" }
FILENAME == doc && part == "rules" && ($0 ~ /^[ \t]*$/ || $0 ~ /^  /) { next }  # between items, an item's next lines
FILENAME == doc && part == "rules" && !/^- / { part = "" }
FILENAME == doc && /^[ \t]*$/ { part = ""; next }
FILENAME == doc && /^Read / { part = "read" }
FILENAME == doc && /^Rules/ { part = "rules-head"; seen_rules[sec] = 1; next }
FILENAME == doc && part == "read" {
    ns = split(sections($0), S, " ")
    for (k = 1; k <= ns; k++) { reads[sec, S[k]] = 1; read_list[sec] = read_list[sec] " " S[k] }
    next
}
FILENAME == doc && part == "rules" && /^- / {
    item = $0; sub(/^- /, "", item)
    head = ""; inq = 0  # the names before the item's first ": " outside backquotes
    for (i = 1; i <= length(item); i++) {
        c = substr(item, i, 1); if (c == "`") inq = !inq
        if (!inq && substr(item, i, 2) == ": ") break
        head = head c
    }
    while (match(head, /`[A-Za-z_][A-Za-z0-9_:]*`/)) { rules[sec, substr(head, RSTART + 1, RLENGTH - 2)] = 1; head = substr(head, RSTART + RLENGTH) }
    next
}
function fail(msg) { print msg; fails++ }
function need_read(a, s, i, why) {
    cited[s] = 1
    if ((a, s) in reads || (a, s, i) in told) return
    told[a, s, i] = 1
    fail("assignment " a ": the case \"" case_name[i] "\" (tests.cpp:" case_line[i] ") " why " §" s ", which the Read list of " where(a) " lacks")
}
function need_rule(a, f, i, why) {
    graded[f] = 1
    if ((a, f) in rules || (a, f, i) in told) return
    told[a, f, i] = 1
    fail("assignment " a ": the case \"" case_name[i] "\" (tests.cpp:" case_line[i] ") grades the argument checks of " f " (" why "), which the Rules list of " where(a) " does not name")
}
END {
    bad = 0
    for (k = 1; k <= n_assign; k++) {
        a = A[k]; fails = 0
        split("", cited); split("", graded); split("", by_name); nb = split(blanked[a], B, " ")
        if (!(a in seen_sec)) { print "assignment " a ": " doc " has no section \"## Assignment " a ": ...\""; bad = 1; continue }
        if (!(a in ncases)) { print "assignment " a ": no test case of " tests " is in the test suite \"assignment " a "\""; bad = 1; continue }
        if (!(a in seen_rules)) fail("assignment " a ": " where(a) " has no Rules list (a line \"Rules ...\", then \"- `function`: ...\" items)")
        if ((a in total) && total[a] != ncases[a])
            fail("assignment " a ": tests.cpp holds " ncases[a] " cases of its test suites as this scan reads them, the tests list " total[a])
        m = split(case_of[a], C, " ")
        for (j = 1; j <= m; j++) {
            i = C[j]; by_name[case_name[i]] = i
            # the case, and the helpers of tests.cpp it calls, and those they call
            split("", use); list = ""; todo = called(code_of(text["case " i]))
            while (todo ~ /[^ ]/) {
                sub(/^ +/, "", todo); h = todo; sub(/ .*/, "", h); todo = substr(todo, length(h) + 1)
                if (!(h in helper) || (h in use)) continue
                use[h] = 1; list = list " " h; todo = todo called(code_of(text["helper " h]))
            }
            src = text["case " i]; hn = split(list, H, " ")
            for (q = 1; q <= hn; q++) src = src "\n" text["helper " H[q]]
            ns = split(sections(src), S, " ")
            for (q = 1; q <= ns; q++) need_read(a, S[q], i, "cites")
            lc = tolower(case_name[i])
            for (q = 1; q <= nmap; q++) if (wild(lc, map_pat[q])) need_read(a, map_sec[q], i, "is listed in the code map of " sheet " (§33) under")
            na = split(throw_args(code_of(src)), TA, "\001"); nb = split(blanked[a], B, " ")
            for (t = 1; t <= na; t++) {
                cl = called(TA[t])
                for (b = 1; b <= nb; b++) if (index(cl, " " B[b] " ")) need_rule(a, B[b], i, "a throw check calls it")
            }
        }
        # the fresh handout's run: a throw check whose exception is the stub of this assignment's function
        if (a in log_of) {
            lf = log_of[a]; cur = ""
            while ((getline line < lf) > 0) {
                if (line ~ /^TEST CASE: /) { cur = line; sub(/^TEST CASE: +/, "", cur); continue }
                if (!(line ~ /(CHECK|REQUIRE|WARN)_THROWS.*not implemented: / || line ~ /message: .*not implemented: /)) continue
                f = line; sub(/.*not implemented: /, "", f); sub(/[^A-Za-z0-9_].*/, "", f)
                if (!(cur in by_name) || index(blanked[a], " " f " ") == 0) continue
                need_rule(a, f, by_name[cur], "in the fresh handout a throw check reaches its stub")
            }
            close(lf)
        }
        # the table's read column and the Read list name the same sections
        split("", in_row); split("", in_list); nr = split(row_reads[a], R, " "); nq = split(read_list[a], Q, " ")
        for (q = 1; q <= nr; q++) in_row[R[q]] = 1
        for (q = 1; q <= nq; q++) in_list[Q[q]] = 1
        for (q = 1; q <= nr; q++) if (!(R[q] in in_list)) fail("assignment " a ": the table of " doc " reads §" R[q] ", the section's Read list does not")
        for (q = 1; q <= nq; q++) if (!(Q[q] in in_row)) fail("assignment " a ": the Read list of " where(a) " reads §" Q[q] ", the table's row does not")
        out = ""
        for (s = 1; s <= 99; s++) if (s in cited) out = out " §" s
        rl = ""
        for (b = 1; b <= nb; b++) if (B[b] in graded) rl = rl (rl == "" ? "" : ", ") B[b]
        if (fails) bad = 1
        else printf("assignment %s: %d cases, reads%s, rules: %s: text and cases agree\n", a, ncases[a], out == "" ? " nothing" : out, rl == "" ? "none" : rl)
    }
    exit bad
}
endef
ASSIGN_SHEET := docs/formulas.md
ASSIGN_TEXT_RUN = LC_ALL=C awk -v assignments='$(ASSIGNMENTS)' \
  -v funcs='$(foreach n,$(ASSIGNMENTS),$(n):$(strip $(ASSIGNMENT_$(n)_FUNCS));)' -v tests=tests.cpp \
  -v sheet=$(ASSIGN_SHEET) -v doc=$(ASSIGN_DOC) -v totals="$$totals" -v logs="$$logs" "$$ASSIGN_TEXT_AWK" \
  tests.cpp $(ASSIGN_SHEET) $(ASSIGN_DOC)
assignments-text-check: export ASSIGN_TEXT_AWK := $(value ASSIGN_TEXT)
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
assignments-check: export HANDOUT_BLANK_AWK := $(value HANDOUT_BLANK)
assignments-check: export ASSIGN_TEXT_AWK := $(value ASSIGN_TEXT)
assignments-check: export GRADE_SH := $(value GRADE_RUN)
assignments-check: export GRADE_AWK := $(value GRADE_REPORT)
assignments-check:
	@set -e; for f in $(ASSIGN_TESTS_O) $(ASSIGN_TESTS); do [ -e "$$f" ] || { echo "make assignments-check: $$f is missing (make tests builds it)" >&2; exit 1; }; done; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; bad=0; totals=; logs=; \
	listed() { "$$@" < /dev/null 2>&1 | awk '/^=====*$$/ { part++; next } part == 1'; }; \
	counts() { sed 's/\x1b\[[0-9;]*m//g' "$$1" | sed -n 's/^\[doctest\] test cases: *\([0-9]*\) | *\([0-9]*\) passed | *\([0-9]*\) failed.*/test cases: \1 | \2 passed | \3 failed/p'; }; \
	score() { sed -n 's/^make grade: assignment [0-9]*: \([0-9.]*\) of \([0-9.]*\) points,.*/\1 of \2/p' "$$1"; }; \
	key() { $(CXX) $(STD) $(FAST_OPT) -DTF_ONLY_MACHINERY -E -P "$$1" | cksum; }; \
	mach="$$tmp/machinery.o"; \
	$(CXX) $(STD) $(WARN) $(FAST_OPT) $(GCFLAGS) -DTF_ONLY_MACHINERY -c -o "$$mach" transformer.cpp; \
	solution_key=$$(key transformer.cpp); \
	build() { \
	  src=$$1; out=$$2; \
	  [ "$$(key "$$src")" = "$$solution_key" ] || { echo "$$src: a stub outside the mathematics (TF_ONLY_MATHEMATICS)"; return 1; }; \
	  $(CXX) $(STD) $(WARN) $(FAST_OPT) $(GCFLAGS) -DTF_ONLY_MATHEMATICS -c -o "$$out.o" "$$src" > "$$out.cc.log" 2>&1 || { cat "$$out.cc.log"; return 1; }; \
	  if [ -s "$$out.cc.log" ]; then echo "$$src compiles with warnings:"; cat "$$out.cc.log"; return 1; fi; \
	  $(CXX) $(FAST_OPT) -o "$$out" "$$out.o" "$$mach" $(ASSIGN_TESTS_O); \
	}; \
	one() { \
	  n=$$1; suites=$$2; later=$$3; upto=$$4; d="$$tmp/handout-$$n"; \
	  $(MAKE) --no-print-directory -s handout ASSIGNMENT=$$n DIR="$$d" HANDOUT_OBJECTS=0 > "$$d.log" 2>&1 || { cat "$$d.log"; return 1; }; \
	  for f in $$later; do grep -q "not implemented: $$f (assignment " "$$d/transformer.cpp" || \
	    { echo "assignment $$n: the handout holds the solution of $$f, a later assignment's function"; return 1; }; done; \
	  build "$$d/transformer.cpp" "$$d/tests" || { echo "assignment $$n: the handout does not build"; return 1; }; \
	  (cd "$$d" && ./tests -nc -ts="$$suites") > "$$d.run.log" 2>&1 || true; \
	  $(ASSIGN_TESTS) -nc -ts="$$suites" > "$$d.sol.log" 2>&1 || true; \
	  before=$$(counts "$$d.run.log"); after=$$(counts "$$d.sol.log"); \
	  total=$$(echo "$$after" | sed 's/test cases: \([0-9]*\) .*/\1/'); \
	  echo "assignment $$n: fresh handout $$before; solution $$after"; \
	  if [ -z "$$before" ] || [ -z "$$after" ]; then echo "assignment $$n: no doctest summary"; cat "$$d.run.log" "$$d.sol.log"; return 1; fi; \
	  if [ "$$after" != "test cases: $$total | $$total passed | 0 failed" ]; then echo "assignment $$n: the solution fails:"; cat "$$d.sol.log"; return 1; fi; \
	  if echo "$$before" | grep -q '| 0 failed'; then echo "assignment $$n: the fresh handout fails no case"; return 1; fi; \
	  if grep -q "not implemented: " "$$d.sol.log"; then echo "assignment $$n: the solution is a handout?"; return 1; fi; \
	  if [ -n "$$later" ]; then \
	    awk -v funcs="$$later" "$$HANDOUT_BLANK_AWK" transformer.cpp > "$$d/solved.cpp"; \
	    build "$$d/solved.cpp" "$$d/solved-tests" || { echo "assignment $$n: the solved handout does not build"; return 1; }; \
	    (cd "$$d" && ./solved-tests -nc -ts="$$upto") > "$$d.solved.log" 2>&1 || { \
	      echo "assignment $$n: solved, with the later assignments' stubs ($$later), these cases of assignments 1..$$n fail:"; \
	      grep -B 3 -E "ERROR|not implemented" "$$d.solved.log" | head -n 40; return 1; }; \
	  fi; \
	  sec=$$(awk -v h="## Assignment $$n:" 'index($$0, h) == 1 { on = 1; print; next } /^## / { on = 0 } on' $(ASSIGN_DOC)); \
	  row=$$(grep "^| $$n |" $(ASSIGN_DOC) || true); \
	  listed $(ASSIGN_TESTS) -nc -lts -ts="$$suites" > "$$d.suites"; \
	  { grep -x "assignment $$n" "$$d.suites" || true; grep -vx "assignment $$n" "$$d.suites" | LC_ALL=C sort; } > "$$d.suites.sorted"; \
	  k=0; ns=$$(wc -l < "$$d.suites.sorted" | tr -d ' '); tl="Tests: the suite"; [ "$$ns" = 1 ] || tl="Tests: the suites"; \
	  while IFS= read -r s; do \
	    k=$$((k + 1)); c=$$(listed $(ASSIGN_TESTS) -nc -ltc -ts="$$(printf '%s\n' "$$s" | sed 's/[\\*?,]/?/g')" | wc -l | tr -d ' '); \
	    [ "$$c" = 1 ] && c="1 case" || c="$$c cases"; \
	    if [ $$k -eq 1 ]; then sep=" "; elif [ $$k -eq "$$ns" ]; then sep=" and "; else sep=", "; fi; \
	    tl="$$tl$$sep\`$$s\` ($$c)"; \
	  done < "$$d.suites.sorted"; \
	  totals="$$totals $$n:$$total"; logs="$$logs $$n:$$d.run.log"; \
	  for want in "Fresh handout: \`$$before\`" "Solved: \`$$after\`" "$$tl"; do \
	    case "$$sec" in *"$$want"*) ;; *) echo "$(ASSIGN_DOC), section \"Assignment $$n\", should say: $$want"; return 1;; esac; done; \
	  f=$$(echo "$$before" | sed 's/.*| \([0-9]*\) failed/\1/'); \
	  case "$$row" in *"| $$f of $$total fail | $$total of $$total pass |"*) ;; *) echo "$(ASSIGN_DOC), table row of assignment $$n should say: | $$f of $$total fail | $$total of $$total pass |"; return 1;; esac; \
	  (cd "$$d" && sh -c "$$GRADE_SH" grade ./tests "$$suites" graded $(GRADE_TIMEOUT) "assignment $$n") > "$$d.grade.log" 2>&1 || { cat "$$d.grade.log"; return 1; }; \
	  sh -c "$$GRADE_SH" grade $(ASSIGN_TESTS) "$$suites" "$$d.graded" $(GRADE_TIMEOUT) "assignment $$n" > "$$d.sol-grade.log" 2>&1 || { cat "$$d.sol-grade.log"; return 1; }; \
	  got=$$(score "$$d.grade.log"); sol=$$(score "$$d.sol-grade.log"); \
	  echo "assignment $$n: make grade: fresh handout $$got points; solution $$sol points"; \
	  case "$$got" in "0 of "*) ;; *) echo "assignment $$n: make grade gives a fresh handout $$got points, not 0: the cases it passes belong in the test suite \"assignment $$n (0 points)\""; cat "$$d.grade.log"; return 1;; esac; \
	  if [ -z "$$sol" ] || [ "$${sol% of *}" != "$${sol#* of }" ]; then echo "assignment $$n: make grade gives the solution $$sol points, not full marks"; cat "$$d.sol-grade.log"; return 1; fi; \
	}; \
	$(foreach n,$(ASSIGNMENTS),one $(n) "$(call SUITES_OF,$(n))" \
	  "$(strip $(foreach m,$(wordlist 2,99,$(wordlist $(n),99,$(ASSIGNMENTS))),$(ASSIGNMENT_$(m)_FUNCS)))" \
	  "$(call SUITES_UPTO,$(n))" || bad=1;) \
	$(ASSIGN_TEXT_RUN) || bad=1; \
	[ $$bad = 0 ] && echo "make assignments-check: docs/assignments.md states every assignment's counts, suites, reading list and rules; make grade scores each fresh handout 0, the solution full marks" || { echo "make assignments-check: failed" >&2; exit 1; }

# ---- make mutants: mutation testing of the formula functions -----------------------------------
# make mutants FUNC=LayerNorm_backward [TESTS="LayerNorm*"] [MAX=n] [TIMEOUT=seconds]
# make mutants-all [FUNCS="name[:tests-pattern] ..."] [MAX=25]   (default FUNCS: MUTANT_FUNCS, Part I;
#   a tests-pattern "-ts=FILTER" selects test suites instead of case names)
# make mutants-assignments [MAX=3]   (each assignment's functions against its own test suites)
# Copies the project into a temporary directory, finds the body of FUNC in transformer.cpp as
# `make handout` does (its definition on a line starting in column 0, body up to the closing brace
# in column 0), and makes, one at a time, the mistakes a student makes inside that body only:
# + <-> -, < <-> <=, > <-> >=, == <-> !=, && <-> ||, * -> /, a unary minus dropped, a term, factor
# or divisor dropped (a + b -> a), loop bounds one past the end (< n -> < n + 1) or one late
# (= 0 -> = 1), constants (0.5 -> 1.0, 2 -> 1, 1 -> 0, other decimals doubled, other integers + 1),
# a statement dropped, the two indices of X(i, j) swapped. Each mutant: the part of transformer.cpp it
# is in (-DTF_ONLY_MATHEMATICS or -DTF_ONLY_MACHINERY, as make check builds it) recompiled at MUT_OPT
# with the standard library's index checks (as make test builds it), linked with the other part
# compiled once from the unmutated file and with a tests.o
# built once (in MUT_BUILD, build-mutants/), the test cases matching TESTS (doctest -tc, default all) run
# under `timeout TIMEOUT` (default: ten times the unmutated run of those cases plus 10 s; a `date`
# without nanoseconds, as BSD's, measures whole seconds), stopping at the first failed check
# (doctest -aa=1). A mutant is KILLED when a test fails (or times out), SURVIVED when all pass; one
# that does not compile counts as neither. MAX keeps at most MAX mutants, evenly spread.
# JOBS=n tries n mutants at once (each in its own copy of the project); the verdicts do not depend on it.
# BEFORE=path/tests.o (built at MUT_OPT from other tests) runs each mutant against those tests too.
# SAN=1 builds each mutant with AddressSanitizer, UBSan and -D_GLIBCXX_ASSERTIONS (make debug's checks):
# an index one past the end of a tensor then kills. The mutated part comes first on the link line, so
# the checked copies of the header's inline functions are the ones linked.
# docs/mutation.md explains the output and gives the figure for the suite.
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
# The formula functions of Part I and the reductions and transposed products they call, each with the
# test cases of its module (docs/mutation.md).
MUTANT_FUNCS := sample_logits:sample:?sample_logits* dropout_mask:dropout* multiply_inplace:dropout* \
                next_token_targets:objective* mlm_corrupt:objective* \
                gpt1_classify_input:finetune:?GPT-1*,finetune:?padding* \
                gpt1_entailment_input:finetune:?GPT-1*,finetune:?padding* \
                gpt1_similarity_inputs:finetune:?GPT-1*,finetune:?gradient* \
                gpt1_multiple_choice_inputs:finetune:?GPT-1*,finetune:?multiple* \
                gpt1_batch:finetune:?GPT-1*,finetune:?padding* \
                extract_rows:finetune:?GPT-1*,finetune:?gradient*,finetune:?padding*,finetune:?BERT* \
                head_logits:finetune:?gradient*,finetune:?BERT*,finetune:?padding*,finetune:?the?head* \
                finetune_loss:finetune* \
                permutation_ranks:xlnet:?Mask*,xlnet:?the*,xlnet:?predicting* Mask_XL:xlnet:?Mask*,xlnet:?the* \
                xlnet_forward:xlnet:?gradient*,xlnet:?one*,xlnet:?sequences*,xlnet:?the*,xlnet:?predicting* \
                xlnet_loss:xlnet:?gradient*,xlnet:?one*,xlnet:?sequences*,xlnet:?predicting* clip_grad_norm:AdamW*,train_step* \
                adamw_step:AdamW*,train_step* decays:AdamW* train_step:train_step* position_rows:RoBERTa*,GPT:* \
                layer_mask:GPT-3* Mask_ST:Mask_*,GPT-3* activation:FFN* \
                activation_derivative:FFN* activation_array:FFN* \
                activation_derivative_array:FFN* vexp:Softmax* softmax_row:Softmax*,Reductions* \
                softmax_backward_row:Softmax* lanes_sum:LayerNorm*,Reductions* LayerNorm:LayerNorm*,Reductions* \
                MLMHead:BERT*,RoBERTa*,model_loss*,MLMHead* MLMHead_backward:BERT*,RoBERTa*,model_loss*,MLMHead* \
                head_bias:MultiHeadSA*,GPT-2:?whole* MultiHeadSA:MultiHeadSA* CrossEntropy_logits:CrossEntropy*,Reductions* \
                init_params:parameters* scale_residual_init:parameters* diag:diag* Stack:Stack* OneHot:OneHot* \
                Embedding:Embedding* Embedding_backward:Embedding* Softmax:Softmax* Softmax_backward:Softmax* \
                Mask_BD:Mask_* Mask_AR:Mask_* apply_mask:apply_mask*,Attention* Attention:Attention* \
                Attention_backward:Attention* Concat:Concat* Concat_backward:Concat* \
                MultiHeadSA_backward:MultiHeadSA* FFN:FFN* FFN_backward:FFN* LayerNorm_backward:LayerNorm* \
                CrossEntropy:CrossEntropy* CrossEntropy_backward:CrossEntropy* \
                embed_forward:GPT*,BERT*,RoBERTa*,embed_backward*,sample:?model_step* embed_backward:BERT*,GPT:*,embed_backward* \
                key_padding_mask:key_padding_mask*,finetune:?BERT* pre_ln_block_forward:GPT-2*,GPT-3*,dropout*,explain* \
                pre_ln_block_backward:GPT-2*,GPT-3*,dropout* post_ln_block_forward:GPT:*,BERT*,dropout*,explain* \
                post_ln_block_backward:GPT:*,BERT*,dropout* model_backward:GPT-2*,BERT*,model_loss*,model_forward* \
                model_loss:model_loss*,objective* gather_rows:model_loss*,BERT* \
                xlnet_query_probs:xlnet:?gradient*,xlnet:?one*,xlnet:?sequences*,xlnet:?predicting* lr_linear:lr_* \
                lr_schedule:lr_* \
                gemm_reference:gemm*,matmul* matmul:matmul* transpose:matmul*,gemm* add_inplace:MultiHeadSA*,GPT:* \
                colsum_acc:FFN*,MultiHeadSA* Linear:FFN*,MultiHeadSA*,MLMHead* Linear_backward:FFN*,MultiHeadSA* \
                diag_backward:diag* Stack_backward:Stack* inv_factorials:Softmax* softmax_row_reference:Softmax* \
                rows_of:MultiHeadSA* Rng::normal:Rng*,parameters* Rng::below:Rng*,dropout*,objective* \
                FFN_GELU:FFN* FFN_GELU_backward:FFN* make_params:parameters* count_params:parameters* \
                position_vector:RoBERTa* blocks_forward:GPT*,BERT*,RoBERTa* blocks_backward:GPT*,BERT*,RoBERTa* \
                mlm_head_activation:RoBERTa*,MLMHead* scatter_rows:model_loss*,BERT*,RoBERTa* \
                model_forward:model_forward*,GPT*,BERT*,RoBERTa*,dropout*,finetune:?BERT* target_rows:model_loss*,objective* \
                output_row:GPT*,BERT*,RoBERTa* bert_pair:BERT* finetune_probs:finetune* adamw_init:AdamW*,train_step* \
                matmul_acc:matmul* matmul_nt:matmul*,Attention*,Reductions* matmul_tn:matmul* matmul_tn_acc:matmul* \
                lane_sum:Softmax*,CrossEntropy*,Reductions* lane_max:Softmax*,CrossEntropy*,Reductions* \
                lane_dot:gemm*,matmul*,Reductions* named_tensors:parameters*,GPT*,BERT* GPT:GPT* BERT:BERT* \
                RoBERTa:RoBERTa* zero_params:AdamW*,train_step*,parameters* first_nonfinite:files:?a?NaN?parameter* \
                make_config:parameters*,GPT* add:MultiHeadSA*,GPT*,Tensor:* block_forward:GPT*,BERT*,explain* \
                block_backward:GPT*,BERT*,explain* kv_init:sample* append_rows:sample* MultiHeadSA_cached:sample* \
                model_step:sample*
# Each assignment's functions against that assignment's own test cases, its test suites (an entry's
# tests "-ts=FILTER" select by suite; a space of the suites' names is matched by ?).
space := $(subst ,, )
MUTANT_ASSIGNMENT_FUNCS := $(foreach n,$(ASSIGNMENTS),$(foreach f,$(ASSIGNMENT_$(n)_FUNCS),$(f):-ts=$(subst $(space),?,$(call SUITES_OF,$(n)))))

# awk -v from=A -v to=B: one line per mutant of lines A..B of transformer.cpp:
#     line <TAB> operator <TAB> the mutated line
define MUTANT_GEN
function emit(op, newcode) { if (newcode != code) printf "%d\t%s\t%s%s\n", FNR, op, newcode, comment }
# every occurrence of s (outside string literals, and not next to one) replaced by r, one mutant each
function each(s, r, op,    off, p, pos) {
    off = 0
    while ((p = index(substr(mask, off + 1), s)) > 0) {
        pos = off + p
        off = pos
        if (substr(mask, pos - 1, 1) == "#" || substr(mask, pos + length(s), 1) == "#") continue  # joins strings
        emit(op, substr(code, 1, pos - 1) r substr(code, pos + length(s)))
    }
}
function isid(c) { return c ~ /[A-Za-z0-9_.]/ }
# the end (one past) of the operand that starts at p: up to a ) ] } ; , of its own level, or the next
# binary operator of its level (for a term: one of lower precedence than * and /; for a factor: any)
function operand_end(p, factor,    d, q, c, rest) {
    d = 0
    for (q = p; q <= length(mask); q++) {
        c = substr(mask, q, 1)
        if (c ~ /[(\[{]/) d++
        else if (c ~ /[)\]}]/) { if (d == 0) return q; d-- }
        else if (d == 0 && (c == ";" || c == ",")) return q
        else if (d == 0 && c == " ") {
            rest = substr(mask, q, 4)
            if (rest ~ /^ ([-+?:<>]|[<>=!]=|&&|\|\|) /) return q
            if (factor && rest ~ /^ [*\/%] /) return q
        }
    }
    return q
}
# every binary s (" + ", " - ", " * ", " / ") with the operand after it dropped: a + b -> a
function drop_operand(s, op, factor,    off, p, pos, e) {
    off = 0
    while ((p = index(substr(mask, off + 1), s)) > 0) {
        pos = off + p
        off = pos
        if (substr(mask, pos - 1, 1) == "#" || substr(mask, pos + length(s), 1) == "#") continue  # joins strings
        if (substr(mask, 1, pos) ~ /(^|[^A-Za-z0-9_])throw /) continue  # builds an error message
        e = operand_end(pos + length(s), factor)
        if (e > pos + length(s)) emit(op, substr(code, 1, pos - 1) substr(code, e))
    }
}
# a unary minus dropped: -x -> x (after ( = , ? : return, not --, -=, ->)
function unary_minus(    i, c, before) {
    for (i = 1; i <= length(mask); i++) {
        if (substr(mask, i, 1) != "-") continue
        c = substr(mask, i + 1, 1)
        if (c == "" || c ~ /[- =>]/) continue
        before = substr(mask, 1, i - 1); sub(/[ \t]+$/, "", before)
        if (before ~ /[(=,?:]$/ || before ~ /(^|[^A-Za-z0-9_])return$/ || before == "")
            emit("unary - dropped", substr(code, 1, i - 1) substr(code, i + 1))
    }
}
function constants(    i, j, c, t, r, e) {
    for (i = 1; i <= length(mask); i++) {
        c = substr(mask, i, 1)
        if (c !~ /[0-9]/ || (i > 1 && isid(substr(mask, i - 1, 1)))) continue
        j = i
        while (j <= length(mask) && substr(mask, j, 1) ~ /[0-9.]/) j++
        t = substr(mask, i, j - i)
        e = j
        while (e <= length(mask) && substr(mask, e, 1) ~ /[A-Za-z_0-9]/) e++
        if (substr(mask, j, e - j) !~ /^(f|L|LL|u|U|ul|UL|ULL)?$/) { i = e; continue }  # 1e-5 and the like
        r = ""
        if (t + 0 == 0.5 && t ~ /\./) r = "1.0"
        else if (t == "2") r = "1"
        else if (t == "2.0") r = "1.0"
        else if (t == "1") r = "0"
        else if (t == "1.0") r = "0.0"
        else if (t ~ /\./ && t + 0 != 0 && t + 0 != 1) r = sprintf("%.6g", 2 * t) (sprintf("%.6g", 2 * t) ~ /\./ ? "" : ".0")
        else if (t ~ /^[0-9]+$/ && t + 0 > 2) r = t + 1
        if (r != "") emit("constant " t " -> " r, substr(code, 1, i - 1) r substr(code, j))
        i = e
    }
}
function swaps(    rest, off, m, pre, inner, a, b, nm, k, start) {
    off = 0
    while (match(substr(mask, off + 1), /[A-Za-z_][A-Za-z0-9_]*\([^(),]+, [^(),]+\)/)) {
        start = off + RSTART
        m = substr(mask, start, RLENGTH)
        off = start + RLENGTH - 1
        pre = start > 1 ? substr(mask, start - 1, 1) : " "
        k = index(m, "(")
        nm = substr(m, 1, k - 1)
        if (pre == ":" || pre == ">" || nm ~ /^(max|min|pow|swap|fmax|fmin|if|for|while|switch|return)$/) continue
        inner = substr(m, k + 1, length(m) - k - 1)
        a = substr(inner, 1, index(inner, ", ") - 1); b = substr(inner, index(inner, ", ") + 2)
        if (a == b || a ~ /[\[\]"]/ || b ~ /[\[\]"]/) continue
        emit("indices swapped", substr(code, 1, start + k - 1) b ", " a substr(code, start + length(m) - 1))
    }
}
function droppable(t) {
    if (t !~ /;$/ || t ~ /^(return|throw|for|if|else|break|continue|case|default)\b/) return 0
    if (t ~ /^(const |static |constexpr )*[A-Za-z_][A-Za-z0-9_:<>,]*[*&]* +[*&]*[A-Za-z_][A-Za-z0-9_]* *(=|\(|\{|;)/) return 0
    if (gsub(/\(/, "(", t) != gsub(/\)/, ")", t)) return 0
    return t ~ /[^=!<>]=[^=]/ || t ~ /^[A-Za-z_][A-Za-z0-9_:.]*(<[^;]*>)?\(/
}
FNR >= from && FNR <= to {
    code = $0; comment = ""
    mask = ""; inq = 0
    for (i = 1; i <= length(code); i++) {  # code with string literals blanked, and the // comment split off
        c = substr(code, i, 1)
        if (!inq && substr(code, i, 2) == "//") { comment = substr(code, i); code = substr(code, 1, i - 1); break }
        if (c == "\"" && substr(code, i - 1, 1) != "\\") inq = !inq
        mask = mask (inq || c == "\"" ? "#" : c)
    }
    t = code; gsub(/^[ \t]+|[ \t]+$/, "", t)
    if (t == "") { prev = prev; next }
    each(" + ", " - ", "+ -> -"); each(" - ", " + ", "- -> +")
    each(" += ", " -= ", "+= -> -="); each(" -= ", " += ", "-= -> +=")
    each(" < ", " <= ", "< -> <="); each(" <= ", " < ", "<= -> <")
    each(" > ", " >= ", "> -> >="); each(" >= ", " > ", ">= -> >")
    each(" * ", " / ", "* -> /"); each(" *= ", " /= ", "*= -> /=")
    each(" == ", " != ", "== -> !="); each(" != ", " == ", "!= -> ==")
    each(" && ", " || ", "&& -> ||"); each(" || ", " && ", "|| -> &&")
    drop_operand(" + ", "term dropped", 0); drop_operand(" - ", "term dropped", 0)
    drop_operand(" * ", "factor dropped", 1); drop_operand(" / ", "divisor dropped", 1)
    unary_minus()
    if (mask ~ /for \(/) {
        each(" = 0;", " = 1;", "loop start 0 -> 1")
        if (match(mask, / < [^;]+;/)) emit("loop bound one past the end", substr(code, 1, RSTART + RLENGTH - 2) " + 1" substr(code, RSTART + RLENGTH - 1))
    }
    constants()
    swaps()
    if (droppable(t) && (prev ~ /[;{})]$/ || prev ~ /else$/)) {
        ind = code; sub(/[^ \t].*/, "", ind)
        emit("statement dropped", ind ";")
    }
    prev = t
}
endef

.PHONY: mutants mutants-all mutants-assignments
mutants: export MUTANT_GEN_AWK := $(value MUTANT_GEN)
mutants: export HANDOUT_BLANK_AWK := $(value HANDOUT_BLANK)
mutants-all: export MUTANT_GEN_AWK := $(value MUTANT_GEN)
mutants-all: export HANDOUT_BLANK_AWK := $(value HANDOUT_BLANK)
# make mutants-assignments [MAX=3]: make mutants-all over MUTANT_ASSIGNMENT_FUNCS.
mutants-assignments:
	@$(MAKE) --no-print-directory mutants-all FUNCS='$(MUTANT_ASSIGNMENT_FUNCS)' MAX='$(if $(filter-out 0,$(MAX)),$(MAX),3)'
mutants mutants-all: | doctest
	@$(MAKE) --no-print-directory BUILD=$(MUT_BUILD) OPT="$(MUT_OPT)" $(MUT_BUILD)/tests.o >/dev/null
	@set -ef; \
	if [ "$@" = mutants ]; then \
	  [ -n "$(FUNC)" ] || { echo "make mutants: give FUNC=name (a function defined in transformer.cpp)" >&2; exit 1; }; \
	  list='$(FUNC):$(TESTS)'; max='$(MAX)'; \
	else \
	  list='$(if $(filter command line environment,$(origin FUNCS)),$(FUNCS),$(MUTANT_FUNCS))'; max='$(MAX)'; \
	  [ "$$max" != 0 ] || max=25; \
	fi; \
	top=$$(pwd); tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; trap 'exit 1' INT TERM; \
	now_ns() { t=$$(date +%s%N); case "$$t" in *[!0-9]*) echo $$(( $$(date +%s) * 1000000000 ));; *) echo "$$t";; esac; }; \
	case '$(TIMEOUT)' in auto) auto=1; cap=600;; ''|*[!0-9]*|0) echo "make mutants: TIMEOUT=$(TIMEOUT): give seconds (1 or more) or auto" >&2; exit 1;; *) auto=0; cap='$(TIMEOUT)';; esac; \
	jobs='$(JOBS)'; case "$$jobs" in ''|*[!0-9]*|0) echo "make mutants: JOBS=$$jobs: give a number of runs at once, 1 or more" >&2; exit 1;; esac; \
	tar -cf - --exclude=./.git --exclude='./build*' --exclude=./demo --exclude=./runs . > "$$tmp/tree.tar"; \
	j=0; while [ "$$j" -lt "$$jobs" ]; do mkdir "$$tmp/s$$j"; tar -xf "$$tmp/tree.tar" -C "$$tmp/s$$j"; j=$$((j + 1)); done; \
	case "$(MUT_LOG)" in /*) log="$(MUT_LOG)";; *) log="$$top/$(MUT_LOG)";; esac; : > "$$log"; \
	say() { echo "$$*" | tee -a "$$log"; }; \
	all_k=0; all_s=0; all_n=0; all_g=0; bk=0; bs=0; \
	cc_part() { $(CXX) $(STD) -w $(MUT_OPT) $(CHECKED) $(MUT_SAN) $(GCFLAGS) -DTF_ONLY_$$1 -c -o "$$2" "$$3"; }; \
	cc_part MATHEMATICS "$$tmp/MATHEMATICS.o" transformer.cpp & cc_part MACHINERY "$$tmp/MACHINERY.o" transformer.cpp; wait $$!; \
	$(CXX) $(MUT_OPT) $(MUT_SAN) -o "$$tmp/base-tests" "$$tmp/MATHEMATICS.o" "$$tmp/MACHINERY.o" $(MUT_BUILD)/tests.o; \
	machinery_from=$$(grep -n '^#if !defined(TF_ONLY_MATHEMATICS)' transformer.cpp | head -n 1 | cut -d: -f1); \
	mutant() { \
	  d="$$tmp/s$$1"; \
	  MUT_TEXT="$$text" awk -v l="$$line" 'FNR == l { print ENVIRON["MUT_TEXT"]; next } { print }' transformer.cpp > "$$d/transformer.cpp"; \
	  before=$$(sed -n "$${line}p" transformer.cpp | sed -E 's/^[ \t]+//'); after=$$(printf '%s' "$$text" | sed -E 's/^[ \t]+//'); \
	  if [ "$$line" -lt "$$machinery_from" ]; then part=MATHEMATICS; other="$$tmp/MACHINERY.o"; else part=MACHINERY; other="$$tmp/MATHEMATICS.o"; fi; \
	  if ! cc_part $$part "$$d/transformer.o" "$$d/transformer.cpp" 2>/dev/null || \
	     ! $(CXX) $(MUT_OPT) $(MUT_SAN) -o "$$d/tests" "$$d/transformer.o" "$$other" $(MUT_BUILD)/tests.o 2>/dev/null; then \
	    verdict="not compiled"; \
	  elif (cd "$$d" && timeout $$lim ./tests -aa=1 $$tc </dev/null) >/dev/null 2>&1; then verdict=SURVIVED; \
	  else verdict=KILLED; fi; \
	  was=; \
	  if [ -n "$(BEFORE)" ] && [ "$$verdict" != "not compiled" ]; then \
	    $(CXX) $(MUT_OPT) $(MUT_SAN) -o "$$d/tests" "$$d/transformer.o" "$$other" "$(BEFORE)"; \
	    if (cd "$$d" && timeout $$lim ./tests -aa=1 $$tc </dev/null) >/dev/null 2>&1; then was=" (before: SURVIVED)"; \
	    else was=" (before: KILLED)"; fi; \
	  fi; \
	  printf '%-12s %s:%s [%s]  %s  ->  %s%s\n' "$$verdict" "$$func" "$$line" "$$op" "$$before" "$$after" "$$was"; \
	}; \
	report() { \
	  while [ "$$done_to" -lt "$$i" ]; do \
	    done_to=$$((done_to + 1)); r=$$(cat "$$tmp/r$$done_to"); say "$$r"; \
	    case "$$r" in KILLED*) k=$$((k + 1));; SURVIVED*) s=$$((s + 1));; *) nc=$$((nc + 1));; esac; \
	    case "$$r" in *"(before: KILLED)") bk=$$((bk + 1));; *"(before: SURVIVED)") bs=$$((bs + 1));; esac; \
	  done; \
	}; \
	for entry in $$list; do \
	  func=$$(printf '%s' "$$entry" | sed -E 's/^(([^:]|::)*).*/\1/'); pat=$${entry#"$$func"}; pat=$${pat#:}; \
	  case "$$pat" in -ts=*) tc=$$pat;; *) tc=$${pat:+-tc=$$pat};; esac; \
	  awk -v funcs="$$func" -v ranges="$$tmp/range" "$$HANDOUT_BLANK_AWK" transformer.cpp >/dev/null \
	    || { echo "make mutants: no function $$func in transformer.cpp" >&2; exit 1; }; \
	  read -r _ from to < "$$tmp/range"; \
	  awk -v from="$$from" -v to="$$to" "$$MUTANT_GEN_AWK" transformer.cpp > "$$tmp/all"; \
	  n=$$(wc -l < "$$tmp/all"); \
	  if [ "$$max" -gt 0 ] && [ "$$n" -gt "$$max" ]; then \
	    awk -v n="$$n" -v m="$$max" '{ i = NR - 1; if (int(i * m / n) != int((i - 1) * m / n) || i == 0) print }' "$$tmp/all" > "$$tmp/list"; \
	  else cp "$$tmp/all" "$$tmp/list"; fi; \
	  g=$$(wc -l < "$$tmp/list"); \
	  say "== $$func (transformer.cpp lines $$from-$$to): $$g mutants of $$n, tests: $${pat:-all}"; \
	  t0=$$(now_ns); \
	  (cd "$$tmp/s0" && timeout $$cap ../base-tests $$tc </dev/null) >/dev/null 2>&1 || { say "   the unmutated suite fails or times out on $$func's tests: skipped"; continue; }; \
	  if [ "$$auto" = 1 ]; then lim=$$(( ($$(now_ns) - t0) / 100000000 + 10 )); else lim=$$cap; fi; \
	  k=0; s=0; nc=0; i=0; done_to=0; \
	  while IFS="$$(printf '\t')" read -r line op text; do \
	    i=$$((i + 1)); \
	    mutant $$(((i - 1) % jobs)) > "$$tmp/r$$i" 2>/dev/null </dev/null & \
	    if [ $$((i % jobs)) -eq 0 ]; then wait; report; fi; \
	  done < "$$tmp/list"; \
	  wait; report; \
	  say "   $$func: $$k killed, $$s survived, $$nc not compiled; killed $$k of $$((k + s)) compiled mutants"; \
	  all_k=$$((all_k + k)); all_s=$$((all_s + s)); all_n=$$((all_n + nc)); all_g=$$((all_g + g)); \
	done; \
	say "mutants: $$all_g generated, $$all_n not compiled, $$all_k killed, $$all_s survived:" \
	    "$$all_k/$$((all_k + all_s)) killed$$(awk -v k=$$all_k -v t=$$((all_k + all_s)) 'BEGIN { if (t) printf " (%.1f%%)", 100 * k / t }')"; \
	if [ -n "$(BEFORE)" ]; then say "with the tests of $(BEFORE) instead: $$bk/$$((bk + bs)) killed"; fi; \
	echo "(all lines also in $(MUT_LOG))"
