// transformer.cpp - the implementation. Part I is the mathematics in the order of the formula
// sheet (docs/formulas.md, cited as "formulas §N"); Part II is what makes it fast and connects it to
// files, tokenizers and commands. Every forward has its backward right after it, with the
// derivation in a few comment lines. Search for a banner's title to jump to it:
//
//   PART I. THE MATHEMATICS
//     Tensor                         errors, the n x H matrices everything is written in
//     Matrix products                gemm_reference (the plain loop), matmul and its transposes over gemm
//     MODULES                        diag, Stack, OneHot, Softmax, masks, attention, FFN, LayerNorm, CE
//     MODELS                         theta, the embedding, the blocks, GPT / GPT-2 / GPT-3 / BERT / RoBERTa
//     OBJECTIVES                     L1, MLM, GPT-1 fine-tuning (L2, L3), XLNet
//     TRAINING                       AdamW, the schedules, clipping, train_step, sampling, generation
//   PART II. THE MACHINERY
//     THE FAST MATRIX PRODUCT        the memory pool, gemm (packed, blocked), reductions, row kernels
//     TEXT                           numbers, UTF-8, JSON, the character vocabulary, every tokenizer, tokenizer files
//     MODEL FILES                    whose file, safetensors, checkpoints, Hugging Face import, load_model, export
//     RUNS                           the built-in tasks, the run's memory, the plot, the training loop, fine-tuning, bench
//     TEACHING                       heat maps, attention pictures, explain
//     PLATFORM                       every call to the operating system: files, signals, memory
//     GENERATED TABLES               Unicode classes
#include "transformer.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>

// The operating system's headers, for the PLATFORM section alone: Windows' (windows.h without its
// min and max macros, which would break std::min and std::max) or POSIX's.
#if defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <fcntl.h>
#include <io.h>
#include <psapi.h>
#include <shellapi.h>
#include <sys/stat.h>
#if defined(_MSC_VER)
#pragma comment(lib, "shell32.lib")  // CommandLineToArgvW; MinGW links both by default
#pragma comment(lib, "user32.lib")   // CharLowerBuffW
#endif
#else
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <mach-o/dyld.h>  // _NSGetExecutablePath
#endif
#endif

// Every a*b + c is rounded twice (a product, then a sum) unless the code calls std::fma: the
// rounding of a result is the source's, not the compiler's choice, so builds for other targets give
// the same bits (docs/performance.md, "The same numbers on every machine"). clang takes that from
// this pragma; g++ ignores it in C++ and needs the Makefile's -ffp-contract=off
// (products_fused_by_compiler() below tells whether a build has it).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

// Loop hints. GCC and clang each warn about the other's loop pragmas, so they are spelled per
// compiler here; other compilers get none (every loop is correct without them).
//   TF_IVDEP      the loop has no dependences between iterations (the pointers are __restrict)
//   TF_UNROLL(n)  unroll the next loop n times (fully when it has at most n iterations)
#define TF_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define TF_IVDEP TF_PRAGMA(clang loop vectorize(assume_safety))
#define TF_UNROLL(n) TF_PRAGMA(unroll n)
#elif defined(__GNUC__)
#define TF_IVDEP TF_PRAGMA(GCC ivdep)
#define TF_UNROLL(n) TF_PRAGMA(GCC unroll n)
#else
#define TF_IVDEP
#define TF_UNROLL(n)
#endif
// The hints are hints: when clang cannot vectorise a loop it was told to (say adamw_step's, with
// its sqrt and division, in some inlining contexts), that is not a defect of the code, so its
// -Wpass-failed report is off.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif
// TF_IVDEP_VEXP: TF_IVDEP for a loop that calls vexp. clang does not vectorise every instantiation
// of those loops and, told to (vectorize(assume_safety)), warns that it could not; it gets no hint.
#if defined(__clang__)
#define TF_IVDEP_VEXP
#else
#define TF_IVDEP_VEXP TF_IVDEP
#endif
// TF_ALWAYS_INLINE: a function whose body must be inlined into the loops that call it for them to
// vectorise (verf: g++'s -O2 size limits keep it a call otherwise).
#if defined(__GNUC__)
#define TF_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define TF_ALWAYS_INLINE inline
#endif
// TF_STREAM_WIDTH: on a function whose loops only stream memory (one token's x W), g++'s AVX-512
// builds vectorise with 256-bit registers there. Such a loop is bound by memory bandwidth, not by the
// FMA units; on the Zen 4 this was measured on, the same loops with 512-bit registers took 5-15%
// longer per token. The compute-bound micro-kernel keeps the full width.
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define TF_STREAM_WIDTH __attribute__((target("prefer-vector-width=256")))
#else
#define TF_STREAM_WIDTH
#endif
// TF_KERNEL_SCHEDULE: on the matrix product's micro-kernel, g++ schedules instructions before
// register allocation with an eye on register pressure (-fschedule-insns -fsched-pressure). Without
// it, g++ 12 with Zen's tuning (-march=native on a Zen 3 laptop: -mtune=znver3) folds the loads of B
// into the FMAs, loading each B vector MR times a step instead of once: the kernel is then bound by
// loads, at 78 GFLOP/s against 99 with -mtune=generic on the same AVX2 code (an AMD EPYC, one core,
// docs/performance.md). Scheduled first, every tuning keeps B in registers (101-103 GFLOP/s), and the
// AVX-512 kernel is as fast as before. The attribute changes only the order of instructions, never
// a result.
#if defined(__GNUC__) && !defined(__clang__)
#define TF_KERNEL_SCHEDULE __attribute__((optimize("schedule-insns", "sched-pressure")))
#else
#define TF_KERNEL_SCHEDULE
#endif
// TF_COLD_BEGIN ... TF_COLD_END: code that runs no hot loop (files, JSON, Hugging Face import and
// export, the drivers, tokenizers, teaching tools, tables). With -DTF_COLD_O1 (the Makefile's builds
// of the program and the tests) g++ compiles those regions at -O1 and clang optimises them for size
// (minsize); with -DTF_COLD_O0 (the fast build of `make check`) g++ compiles them at -O0. The build
// takes a fraction of the time, the program runs as fast (docs/performance.md, "Build time"). A
// template's implicit instantiations take the level in force at the end of the file (the command
// line's). TF_COLD_INSTANCES_BEGIN ... END: the same for explicit instantiations, which take the
// level where they stand with g++ (clang's attribute does not reach them): the double instances of
// the models and generation, which serve the gradient checks (exact formulas, not speed).
#if defined(__clang__) && defined(TF_COLD_O1)
#define TF_COLD_BEGIN TF_PRAGMA(clang attribute push(__attribute__((minsize)), apply_to = function))
#define TF_COLD_END TF_PRAGMA(clang attribute pop)
#define TF_COLD_INSTANCES_BEGIN
#define TF_COLD_INSTANCES_END
#elif defined(__GNUC__) && !defined(__clang__) && (defined(TF_COLD_O1) || defined(TF_COLD_O0))
#define TF_COLD_BEGIN TF_PRAGMA(GCC push_options) TF_COLD_LEVEL
#define TF_COLD_END TF_PRAGMA(GCC pop_options)
#if defined(TF_COLD_O0)
#define TF_COLD_LEVEL TF_PRAGMA(GCC optimize("O0"))
#else
#define TF_COLD_LEVEL TF_PRAGMA(GCC optimize("O1"))
#endif
#define TF_COLD_INSTANCES_BEGIN TF_COLD_BEGIN
#define TF_COLD_INSTANCES_END TF_COLD_END
#else
#define TF_COLD_BEGIN
#define TF_COLD_END
#define TF_COLD_INSTANCES_BEGIN
#define TF_COLD_INSTANCES_END
#endif

namespace tf {

#if !defined(TF_ONLY_MACHINERY)
// ################################################################################################
// PART I. THE MATHEMATICS, in the order of docs/formulas.md
// The tensor, the reference matrix product, every module with its backward, the models, the
// objectives, the optimiser, the schedules, clipping, one training step, sampling. The speed
// (Part II: the packed matrix product, the memory pool) stays behind gemm and Tensor's allocator.
// ################################################################################################

// What Part I calls of Part II, one call each: gemm (transformer.hpp), the product below
// gemm_reference computes; the row kernels, in loops the compiler vectorises, each tested against
// the formula written here (softmax_row_reference, activation, activation_derivative); the
// block of memory the parameters live in; and math::exp, log, cos_pi, pow_int (transformer.hpp),
// the C library's functions computed the same way on every platform.
template <typename T>
void softmax_row(const T* x, T* y, int H);
template <typename T>
double softmax_numerators(const T* z, T* e, int V, T& m);  // e_j = exp(z_j - m), m = max_j z_j; sum_j e_j
template <typename T>
void allocate_params(const Config& c, Params<T>& p);

// ================================================================================================
// Tensor
// ================================================================================================

std::string shape_str(const std::vector<int>& shape) {
    if (shape.empty()) return "(empty)";
    std::string s;
    for (std::size_t k = 0; k < shape.size(); k++) s += (k ? "x" : "") + std::to_string(shape[k]);
    return s;
}

static std::size_t shape_count(const std::vector<int>& shape) {
    std::size_t n = 1;
    for (int d : shape) {
        if (d < 0) throw ShapeError("Tensor: negative dimension in shape " + shape_str(shape));
        n *= (std::size_t)d;
    }
    return n;
}

template <typename T>
Tensor<T>::Tensor(std::vector<int> shape_, T fill) : shape(std::move(shape_)) {
    data.assign(shape_count(shape), fill);
}

template <typename T>
Tensor<T> Tensor<T>::uninit(std::vector<int> shape) {
    Tensor t;
    t.data.resize(shape_count(shape));  // the storage leaves the numbers unwritten (transformer.hpp)
    t.shape = std::move(shape);
#if !defined(__OPTIMIZE__)
    std::fill(t.data.begin(), t.data.end(), std::numeric_limits<T>::quiet_NaN());
#endif
    return t;
}

template <typename T>
Tensor<T> Tensor<T>::from(int rows, int cols, std::vector<T> values) {
    if (rows < 0 || cols < 0 || values.size() != (std::size_t)rows * cols)
        throw ShapeError("Tensor::from: " + std::to_string(values.size()) + " values for a " +
                         shape_str({rows, cols}) + " matrix");
    Tensor t;
    t.shape = {rows, cols};
    t.data.assign(values.begin(), values.end());
    return t;
}

template <typename T>
Tensor<T> Tensor<T>::vector(std::vector<T> values) {
    Tensor t;
    t.shape = {(int)values.size()};
    t.data.assign(values.begin(), values.end());
    return t;
}

template <typename T>
void Tensor<T>::zero() {
    std::fill(data.begin(), data.end(), T(0));
}

template <typename T>
void require_shape(const Tensor<T>& t, const std::vector<int>& shape, const char* where, const char* name) {
    if (t.shape != shape)
        throw ShapeError(std::string(where) + ": " + name + " is " + shape_str(t.shape) + ", expected " +
                         shape_str(shape));
}

template <typename T, typename U>
void require_same_shape(const Tensor<T>& a, const Tensor<U>& b, const char* where, const char* a_name,
                        const char* b_name) {
    if (a.shape != b.shape)
        throw ShapeError(std::string(where) + ": " + a_name + " is " + shape_str(a.shape) + " but " + b_name +
                         " is " + shape_str(b.shape));
}

// A matrix argument must be two-dimensional; say which and what it was.
template <typename T>
static void require_matrix(const Tensor<T>& t, const char* where, const char* name) {
    if (t.shape.size() != 2)
        throw ShapeError(std::string(where) + ": " + name + " must be a matrix, got shape " + shape_str(t.shape));
}

template <typename T>
Tensor<T> add(const Tensor<T>& A, const Tensor<T>& B) {
    Tensor<T> C = A;
    add_inplace(C, B);
    return C;
}

template <typename T>
void add_inplace(Tensor<T>& A, const Tensor<T>& B) {
    require_same_shape(A, B, "add", "A", "B");
    T* __restrict a = A.ptr();
    const T* __restrict b = B.ptr();
    const std::size_t n = A.size();
    for (std::size_t k = 0; k < n; k++) a[k] += b[k];
}

template <typename T>
Tensor<T> transpose(const Tensor<T>& A) {
    require_matrix(A, "transpose", "A");
    Tensor<T> B = Tensor<T>::uninit(A.cols(), A.rows());
    for (int i = 0; i < A.rows(); i++)
        for (int j = 0; j < A.cols(); j++) B(j, i) = A(i, j);
    return B;
}

// ================================================================================================
// Matrix products
// ================================================================================================

// The plain reference: for each row i of C, for each k, add A(i,k) * row k of B (i-k-j order,
// so the innermost loop streams through a row of B and a row of C).
template <typename T>
void gemm_reference(int M, int N, int K, const T* A, long rsA, long csA, const T* B, long rsB, long csB,
                    T* C, long ldc, bool accumulate) {
    for (int i = 0; i < M; i++) {
        T* c = C + (long)i * ldc;
        if (!accumulate)
            for (int j = 0; j < N; j++) c[j] = T(0);
        for (int k = 0; k < K; k++) {
            const T a = A[(long)i * rsA + (long)k * csA];
            const T* b = B + (long)k * rsB;
            for (int j = 0; j < N; j++) c[j] += a * b[(long)j * csB];
        }
    }
}

// matmul and its variants are what the modules call; each is one call of gemm (Part II, "The fast
// kernel"), which computes exactly what gemm_reference above computes, up to rounding.

template <typename T>
Tensor<T> matmul(const Tensor<T>& A, const Tensor<T>& B) {
    require_matrix(A, "matmul", "A");
    require_matrix(B, "matmul", "B");
    if (A.cols() != B.rows())
        throw ShapeError("matmul: A is " + shape_str(A) + " but B is " + shape_str(B) + " (A B needs A.cols == B.rows)");
    Tensor<T> C = Tensor<T>::uninit(A.rows(), B.cols());  // gemm overwrites every entry
    gemm(A.rows(), B.cols(), A.cols(), A.ptr(), A.cols(), 1, B.ptr(), B.cols(), 1, C.ptr(), C.cols(), false);
    return C;
}

// matmul_acc (C += A B), matmul_nt (A B^T), matmul_tn (A^T B) and matmul_tn_acc (C += A^T B): the
// same product with transposes by strides, one gemm call each.
template <typename T>
void matmul_acc(const Tensor<T>& A, const Tensor<T>& B, Tensor<T>& C) {
    require_matrix(A, "matmul_acc", "A");
    require_matrix(B, "matmul_acc", "B");
    if (A.cols() != B.rows() || C.shape != std::vector<int>{A.rows(), B.cols()})
        throw ShapeError("matmul_acc: A is " + shape_str(A) + ", B is " + shape_str(B) + ", C is " + shape_str(C));
    gemm(A.rows(), B.cols(), A.cols(), A.ptr(), A.cols(), 1, B.ptr(), B.cols(), 1, C.ptr(), C.cols(), true);
}

template <typename T>
Tensor<T> matmul_nt(const Tensor<T>& A, const Tensor<T>& B) {
    require_matrix(A, "matmul_nt", "A");
    require_matrix(B, "matmul_nt", "B");
    if (A.cols() != B.cols())
        throw ShapeError("matmul_nt: A is " + shape_str(A) + " but B is " + shape_str(B) +
                         " (A B^T needs A.cols == B.cols)");
    Tensor<T> C = Tensor<T>::uninit(A.rows(), B.rows());  // gemm overwrites every entry
    // B^T(k, j) = B(j, k) = B[j*cols + k]: row stride 1, column stride B.cols().
    gemm(A.rows(), B.rows(), A.cols(), A.ptr(), A.cols(), 1, B.ptr(), 1, B.cols(), C.ptr(), C.cols(), false);
    return C;
}

template <typename T>
Tensor<T> matmul_tn(const Tensor<T>& A, const Tensor<T>& B) {
    require_matrix(A, "matmul_tn", "A");
    Tensor<T> C(A.cols(), B.shape.size() == 2 ? B.cols() : 0);
    matmul_tn_acc(A, B, C);
    return C;
}

template <typename T>
void matmul_tn_acc(const Tensor<T>& A, const Tensor<T>& B, Tensor<T>& C) {
    require_matrix(A, "matmul_tn", "A");
    require_matrix(B, "matmul_tn", "B");
    if (A.rows() != B.rows() || C.shape != std::vector<int>{A.cols(), B.cols()})
        throw ShapeError("matmul_tn: A is " + shape_str(A) + ", B is " + shape_str(B) + ", C is " + shape_str(C) +
                         " (C += A^T B needs A.rows == B.rows, C = A.cols x B.cols)");
    // A^T(i, k) = A(k, i) = A[k*cols + i]: row stride 1, column stride A.cols().
    gemm(A.cols(), B.cols(), A.rows(), A.ptr(), 1, A.cols(), B.ptr(), B.cols(), 1, C.ptr(), C.cols(), true);
}

// Column sums of a matrix, added into a vector: b += colsum(dY). The gradient of a bias row.
template <typename T>
static void colsum_acc(const Tensor<T>& dY, Tensor<T>& db) {
    require_shape(db, {dY.cols()}, "colsum", "bias gradient");
    const int m = dY.rows(), n = dY.cols();
    for (int i = 0; i < m; i++) {
        const T* __restrict d = dY.row(i);
        T* __restrict b = db.ptr();
        for (int j = 0; j < n; j++) b[j] += d[j];
    }
}

// Y (n x F) = X W + Stack_n(b): a linear layer. b may be empty (no bias).
template <typename T>
static Tensor<T> Linear(const Tensor<T>& X, const Tensor<T>& W, const Tensor<T>& b) {
    Tensor<T> Y = matmul(X, W);
    if (!b.empty()) {
        require_shape(b, {W.cols()}, "Linear", "bias");
        const int m = Y.rows(), n = Y.cols();
        for (int i = 0; i < m; i++) {
            T* __restrict y = Y.row(i);
            const T* __restrict bb = b.ptr();
            for (int j = 0; j < n; j++) y[j] += bb[j];
        }
    }
    return Y;
}
// dW += X^T dY, db += colsum(dY), returns dX = dY W^T.
template <typename T>
static Tensor<T> Linear_backward(const Tensor<T>& X, const Tensor<T>& W, const Tensor<T>& dY, Tensor<T>& dW,
                                 Tensor<T>* db) {
    matmul_tn_acc(X, dY, dW);
    if (db && !db->empty()) colsum_acc(dY, *db);
    return matmul_nt(dY, W);
}

// ================================================================================================
// MODULES
// ================================================================================================

// ---- Diagonal Matrix -------------------------------------------------------------------------
// diag(x)_{i,j} = x_i if i = j else 0;   x: n -> n x n. (Formula i, j = code i+1, j+1.)
template <typename T>
Tensor<T> diag(const Tensor<T>& x) {
    if (x.shape.size() != 1) throw ShapeError("diag: x must be a vector, got shape " + shape_str(x));
    const int n = x.cols();
    Tensor<T> Y(n, n);
    for (int i = 0; i < n; i++) Y(i, i) = x[i];
    return Y;
}
// Only the diagonal of Y depends on x, each entry on one x_i: dx_i = dY_{i,i}.
template <typename T>
Tensor<T> diag_backward(const Tensor<T>& dY) {
    require_matrix(dY, "diag_backward", "dY");
    if (dY.rows() != dY.cols()) throw ShapeError("diag_backward: dY must be square, got " + shape_str(dY));
    Tensor<T> dx = Tensor<T>::uninit({dY.rows()});
    for (int i = 0; i < dY.rows(); i++) dx[i] = dY(i, i);
    return dx;
}

// ---- Stack -----------------------------------------------------------------------------------
// Stack_n(x)_{i,j} = x_j;   x: H -> n x H.
template <typename T>
Tensor<T> Stack(const Tensor<T>& x, int n) {
    if (x.shape.size() != 1) throw ShapeError("Stack: x must be a vector, got shape " + shape_str(x));
    Tensor<T> Y = Tensor<T>::uninit(n, x.cols());
    for (int i = 0; i < n; i++) std::copy(x.data.begin(), x.data.end(), Y.row(i));
    return Y;
}
// x_j appears in every row: dx_j = sum_i dY_{i,j}.
template <typename T>
Tensor<T> Stack_backward(const Tensor<T>& dY) {
    require_matrix(dY, "Stack_backward", "dY");
    Tensor<T> dx({dY.cols()});
    colsum_acc(dY, dx);
    return dx;
}

// ---- One-Hot Encoding ------------------------------------------------------------------------
static void check_token_ids(const std::vector<int>& x, int V, const char* where) {
    for (std::size_t i = 0; i < x.size(); i++)
        if (x[i] < 0 || x[i] >= V)
            throw Error(std::string(where) + ": token id " + std::to_string(x[i]) + " at position " +
                        std::to_string(i) + " is outside the vocabulary 0.." + std::to_string(V - 1));
}

// OneHot(x)_{i,j} = 1 if j = x_i;  x: n ids -> n x V. Formula id x_i in 1..V is code id x[i] in 0..V-1.
template <typename T>
Tensor<T> OneHot(const std::vector<int>& x, int V) {
    check_token_ids(x, V, "OneHot");
    Tensor<T> Y((int)x.size(), V);
    for (std::size_t i = 0; i < x.size(); i++) Y((int)i, x[i]) = T(1);
    return Y;
}

// ---- Embedding: OneHot(x) W_e as a row lookup -------------------------------------------------
// Row i of OneHot(x) W_e is sum_v OneHot(x)_{i,v} W_e[v,:] = W_e[x_i, :].  n ids, V x H -> n x H.
template <typename T>
Tensor<T> Embedding(const std::vector<int>& x, const Tensor<T>& W_e) {
    require_matrix(W_e, "Embedding", "W_e");
    check_token_ids(x, W_e.rows(), "Embedding");
    const int H = W_e.cols();
    Tensor<T> Y = Tensor<T>::uninit((int)x.size(), H);
    for (std::size_t i = 0; i < x.size(); i++) std::copy(W_e.row(x[i]), W_e.row(x[i]) + H, Y.row((int)i));
    return Y;
}
// dW_e = OneHot(x)^T dY: row x_i of W_e receives row i of dY (repeated ids add up).
template <typename T>
void Embedding_backward(const std::vector<int>& x, const Tensor<T>& dY, Tensor<T>& dW_e) {
    require_matrix(dW_e, "Embedding_backward", "dW_e");
    require_shape(dY, {(int)x.size(), dW_e.cols()}, "Embedding_backward", "dY");
    check_token_ids(x, dW_e.rows(), "Embedding_backward");
    const int H = dW_e.cols();
    for (std::size_t i = 0; i < x.size(); i++) {
        T* __restrict w = dW_e.row(x[i]);
        const T* __restrict d = dY.row((int)i);
        for (int j = 0; j < H; j++) w[j] += d[j];
    }
}

// ---- Softmax ---------------------------------------------------------------------------------
// Y_{i,j} = exp(X_{i,j} - m_i) / sum_k exp(X_{i,k} - m_i), m_i = max_k X_{i,k} (same value, no
// overflow). exp(-inf - m) = 0 exactly, so masked entries get probability 0.
// The plain loop, the reference for the one below:
template <typename T>
void softmax_row_reference(const T* x, T* y, int H) {
    T m = -std::numeric_limits<T>::infinity();
    for (int j = 0; j < H; j++) m = std::max(m, x[j]);
    if (m == -std::numeric_limits<T>::infinity()) {  // nothing to attend to: all zeros, not NaN
        for (int j = 0; j < H; j++) y[j] = T(0);
        return;
    }
    T sum = 0;
    for (int j = 0; j < H; j++) {
        y[j] = std::exp(x[j] - m);
        sum += y[j];
    }
    const T inv = T(1) / sum;
    for (int j = 0; j < H; j++) y[j] *= inv;
}

template <typename T>
Tensor<T> Softmax(const Tensor<T>& X) {
    require_matrix(X, "Softmax", "X");
    Tensor<T> Y = Tensor<T>::uninit(X.rows(), X.cols());
    for (int i = 0; i < X.rows(); i++) softmax_row(X.row(i), Y.row(i), X.cols());
    return Y;
}

// dY_i . dY_i/dX_{i,j} with dY_{i,k}/dX_{i,j} = Y_{i,k} (delta_{kj} - Y_{i,j}) gives
//   dX_{i,j} = Y_{i,j} (dY_{i,j} - sum_k dY_{i,k} Y_{i,k}).
template <typename T>
static void softmax_backward_row(const T* y, const T* dy, T* dx, int H) {
    T dot = 0;
    for (int k = 0; k < H; k++) dot += dy[k] * y[k];
    for (int j = 0; j < H; j++) dx[j] = y[j] * (dy[j] - dot);
}

template <typename T>
Tensor<T> Softmax_backward(const Tensor<T>& Y, const Tensor<T>& dY) {
    require_matrix(Y, "Softmax_backward", "Y");
    require_same_shape(Y, dY, "Softmax_backward", "Y", "dY");
    Tensor<T> dX = Tensor<T>::uninit(Y.rows(), Y.cols());
    for (int i = 0; i < Y.rows(); i++) softmax_backward_row(Y.row(i), dY.row(i), dX.row(i), Y.cols());
    return dX;
}

// ---- Attention masks -------------------------------------------------------------------------
// Entries are 1 (keep) or -inf (drop), as formulas §6 writes them. Formula (i, j) = code (i+1, j+1);
// "j > i" is the same comparison in both.
template <typename T>
Tensor<T> Mask_BD(int n) {
    return Tensor<T>(n, n, T(1));
}

template <typename T>
Tensor<T> Mask_AR(int n) {
    Tensor<T> M(n, n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) M(i, j) = j > i ? -std::numeric_limits<T>::infinity() : T(1);
    return M;
}

template <typename T>
Tensor<T> Mask_ST(int n, int window, int stride) {
    if (window < 1 || stride < 0)
        throw Error("Mask_ST: window must be >= 1 and stride >= 0 (got window " + std::to_string(window) +
                    ", stride " + std::to_string(stride) + ")");
    Tensor<T> M(n, n, -std::numeric_limits<T>::infinity());
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++)
            if (i - j < window || (stride > 0 && (i - j) % stride == 0)) M(i, j) = T(1);
    return M;
}

// (Mask (.) S)_{i,j} := S_{i,j} where Mask_{i,j} = 1, -inf where Mask_{i,j} = -inf.
template <typename T>
Tensor<T> apply_mask(const Tensor<T>& Mask, const Tensor<T>& S) {
    require_same_shape(Mask, S, "apply_mask", "Mask", "S");
    Tensor<T> R = S;
    for (std::size_t k = 0; k < R.size(); k++)
        if (Mask[k] == -std::numeric_limits<T>::infinity()) R[k] = -std::numeric_limits<T>::infinity();
    return R;
}

// ---- Masked Scaled Dot-Product Attention -----------------------------------------------------
// Q, K, V: n x D; Mask: n x n; P = Softmax(Mask (.) Q K^T / sqrt(D)) (n x n); O = P V (n x D).
// (Q may also have m != n rows, with Mask m x n: generation with a key/value cache uses m = 1.)
template <typename T>
Tensor<T> Attention(const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V, const Tensor<T>& Mask,
                    AttentionCache<T>* cache, const Tensor<T>* dropout_scale) {
    require_matrix(Q, "Attention", "Q");
    require_matrix(K, "Attention", "K");
    if (K.cols() != Q.cols()) throw ShapeError("Attention: Q is " + shape_str(Q) + " but K is " + shape_str(K));
    require_same_shape(K, V, "Attention", "K", "V");
    const int m = Q.rows(), n = K.rows(), D = Q.cols();
    require_shape(Mask, {m, n}, "Attention", "Mask");
    Tensor<T> S = matmul_nt(Q, K);  // m x n, S_{i,j} = q_i . k_j
    const T scale = T(1) / std::sqrt(T(D));
    for (auto& s : S.data) s *= scale;
    Tensor<T> P = Softmax(apply_mask(Mask, S));
    Tensor<T> O;
    if (dropout_scale && !dropout_scale->empty()) {
        require_same_shape(P, *dropout_scale, "Attention", "P", "dropout_scale");
        Tensor<T> Pd = P;
        multiply_inplace(Pd, *dropout_scale);
        O = matmul(Pd, V);
    } else {
        O = matmul(P, V);
    }
    if (cache) cache->P = std::move(P);
    return O;
}

// With Pd = P (.) drop (drop = 1 without dropout): O = Pd V, so dV = Pd^T dO and dPd = dO V^T,
// dP = dPd (.) drop; Softmax backward dS = P (dP - rowsum(dP P)); S = QK^T/sqrt(D) gives
// dQ = dS K / sqrt(D) and dK = dS^T Q / sqrt(D). The mask only selected entries, whose P = 0.
template <typename T>
void Attention_backward(const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V, const AttentionCache<T>& cache,
                        const Tensor<T>& dO, Tensor<T>& dQ, Tensor<T>& dK, Tensor<T>& dV,
                        const Tensor<T>* dropout_scale) {
    require_same_shape(Q, dO, "Attention_backward", "Q", "dO");
    const int D = Q.cols();
    const bool drop = dropout_scale && !dropout_scale->empty();
    Tensor<T> Pd = cache.P;
    if (drop) multiply_inplace(Pd, *dropout_scale);
    dV = matmul_tn(Pd, dO);
    Tensor<T> dP = matmul_nt(dO, V);
    if (drop) multiply_inplace(dP, *dropout_scale);
    Tensor<T> dS = Softmax_backward(cache.P, dP);
    const T scale = T(1) / std::sqrt(T(D));
    for (auto& s : dS.data) s *= scale;
    dQ = matmul(dS, K);
    dK = matmul_tn(dS, Q);
}

// ---- Concatenation ---------------------------------------------------------------------------
// Formula columns (k-1)D+1 .. kD hold X_k: code columns k*D .. k*D+D-1 hold X[k], k = 0..A-1.
template <typename T>
Tensor<T> Concat(const std::vector<Tensor<T>>& X) {
    if (X.empty()) throw ShapeError("Concat: no matrices given");
    const int n = X[0].rows(), D = X[0].cols(), A = (int)X.size();
    for (int k = 0; k < A; k++) {
        require_matrix(X[k], "Concat", "X_k");
        require_same_shape(X[0], X[k], "Concat", "X_1", "X_k");
    }
    Tensor<T> Y = Tensor<T>::uninit(n, A * D);
    for (int k = 0; k < A; k++)
        for (int i = 0; i < n; i++) std::copy(X[k].row(i), X[k].row(i) + D, Y.row(i) + k * D);
    return Y;
}

// Each output column comes from one input column: dX_k = dY[:, kD : kD+D].
template <typename T>
std::vector<Tensor<T>> Concat_backward(const Tensor<T>& dY, int A) {
    require_matrix(dY, "Concat_backward", "dY");
    if (A <= 0 || dY.cols() % A != 0)
        throw ShapeError("Concat_backward: dY is " + shape_str(dY) + ", not divisible into " + std::to_string(A) +
                         " blocks");
    const int n = dY.rows(), D = dY.cols() / A;
    std::vector<Tensor<T>> dX(A);
    for (int k = 0; k < A; k++) {
        dX[k] = Tensor<T>::uninit(n, D);
        for (int i = 0; i < n; i++) std::copy(dY.row(i) + k * D, dY.row(i) + (k + 1) * D, dX[k].row(i));
    }
    return dX;
}

// ---- Masked Multi-Head Self-Attention --------------------------------------------------------
// Rows b*n .. b*n+n-1 of a (B*n) x C matrix: sequence b.
template <typename T>
Tensor<T> rows_of(const Tensor<T>& X, int first, int count) {
    Tensor<T> Y = Tensor<T>::uninit(count, X.cols());
    std::copy(X.row(first), X.row(first) + (std::size_t)count * X.cols(), Y.ptr());
    return Y;
}
template <typename T>
static void set_rows(Tensor<T>& X, int first, const Tensor<T>& Y) {
    std::copy(Y.data.begin(), Y.data.end(), X.row(first));
}

template <typename T>
static void check_mhsa_params(const Tensor<T>& X, const MultiHeadSAParams<T>& p, const char* where) {
    require_matrix(X, where, "X");
    const int A = (int)p.W_Q.size();
    if (A == 0 || (int)p.W_K.size() != A || (int)p.W_V.size() != A)
        throw ShapeError(std::string(where) + ": W_Q, W_K, W_V need one matrix per head (got " +
                         std::to_string(p.W_Q.size()) + ", " + std::to_string(p.W_K.size()) + ", " +
                         std::to_string(p.W_V.size()) + ")");
    const int H = X.cols(), D = p.W_Q[0].cols();
    for (int i = 0; i < A; i++) {
        require_shape(p.W_Q[i], {H, D}, where, "W_Q[i]");
        require_shape(p.W_K[i], {H, D}, where, "W_K[i]");
        require_shape(p.W_V[i], {H, D}, where, "W_V[i]");
    }
    require_shape(p.W_O, {A * D, H}, where, "W_O");
    if (p.b_Q.empty() && p.b_K.empty() && p.b_V.empty() && p.b_O.empty()) return;  // no biases
    if ((int)p.b_Q.size() != A || (int)p.b_K.size() != A || (int)p.b_V.size() != A)
        throw ShapeError(std::string(where) + ": b_Q, b_K, b_V need one vector per head, or none (got " +
                         std::to_string(p.b_Q.size()) + ", " + std::to_string(p.b_K.size()) + ", " +
                         std::to_string(p.b_V.size()) + ")");
    for (int i = 0; i < A; i++) {
        require_shape(p.b_Q[i], {D}, where, "b_Q[i]");
        require_shape(p.b_K[i], {D}, where, "b_K[i]");
        require_shape(p.b_V[i], {D}, where, "b_V[i]");
    }
    require_shape(p.b_O, {H}, where, "b_O");
}

// Head i's bias, or an empty tensor (no bias) when the attention has none.
template <typename T>
static const Tensor<T>& head_bias(const std::vector<Tensor<T>>& b, int i) {
    static const Tensor<T> none;
    return b.empty() ? none : b[i];
}
template <typename T>
static Tensor<T>* head_bias(std::vector<Tensor<T>>& b, int i) {
    return b.empty() ? nullptr : &b[i];
}

// X: (B*n) x H, Mask: n x n (or (B*n) x n, one per sequence: key_padding_mask), W_i^Q, W_i^K, W_i^V: H x D, W^O: AD x H -> (B*n) x H
// (biases, if any: b_i^Q, b_i^K, b_i^V: D, b^O: H).
template <typename T>
Tensor<T> MultiHeadSA(const Tensor<T>& X, const Tensor<T>& Mask, const MultiHeadSAParams<T>& p,
                      MultiHeadSACache<T>* cache_out, double attn_dropout, Rng* rng) {
    check_mhsa_params(X, p, "MultiHeadSA");
    require_matrix(Mask, "MultiHeadSA", "Mask");
    const int n = Mask.cols(), A = (int)p.W_Q.size(), D = p.W_Q[0].cols();
    const bool per_sequence = Mask.rows() != n;  // (B*n) x n: one n x n mask per sequence
    if (n == 0 || X.rows() % n != 0 || (per_sequence && Mask.rows() != X.rows()))
        throw ShapeError("MultiHeadSA: X is " + shape_str(X) + " but Mask is " + shape_str(Mask) +
                         " (X needs a multiple of n rows, Mask n x n or one n x n per sequence)");
    if (attn_dropout > 0 && !rng) throw Error("MultiHeadSA: attention dropout " + std::to_string(attn_dropout) + " needs a random generator");
    const int B = X.rows() / n;
    MultiHeadSACache<T> local;
    MultiHeadSACache<T>& cache = cache_out ? *cache_out : local;
    cache.Q.assign(A, {});
    cache.K.assign(A, {});
    cache.V.assign(A, {});
    cache.head.assign(A, Tensor<T>::uninit(B * n, D));
    cache.att.assign(A, std::vector<AttentionCache<T>>(B));
    cache.dropout.assign(A, std::vector<Tensor<T>>(B));
    for (int i = 0; i < A; i++) {
        cache.Q[i] = Linear(X, p.W_Q[i], head_bias(p.b_Q, i));  // (B*n) x D: X W_i^Q (+ b_i^Q)
        cache.K[i] = Linear(X, p.W_K[i], head_bias(p.b_K, i));
        cache.V[i] = Linear(X, p.W_V[i], head_bias(p.b_V, i));
        for (int b = 0; b < B; b++) {
            cache.dropout[i][b] = dropout_mask<T>({n, n}, attn_dropout, rng);
            Tensor<T> O = Attention(rows_of(cache.Q[i], b * n, n), rows_of(cache.K[i], b * n, n), rows_of(cache.V[i], b * n, n),
                                    per_sequence ? rows_of(Mask, b * n, n) : Mask, &cache.att[i][b], &cache.dropout[i][b]);
            set_rows(cache.head[i], b * n, O);
        }
    }
    cache.concat = Concat(cache.head);  // (B*n) x AD
    return Linear(cache.concat, p.W_O, p.b_O);
}

// Y = C W^O with C = Concat(head_i): dW^O += C^T dY, dC = dY W^O^T, dhead_i = dC[:, iD:(i+1)D];
// per head Attention_backward gives dQ_i, dK_i, dV_i; Q_i = X W_i^Q gives dW_i^Q += X^T dQ_i and
// dX = sum_i (dQ_i W_i^Q^T + dK_i W_i^K^T + dV_i W_i^V^T). A bias added to every row gets the
// column sums: db^O += colsum(dY), db_i^Q += colsum(dQ_i), ...
template <typename T>
Tensor<T> MultiHeadSA_backward(const Tensor<T>& X, const MultiHeadSAParams<T>& p, const MultiHeadSACache<T>& cache,
                               const Tensor<T>& dY, MultiHeadSAParams<T>& g) {
    check_mhsa_params(X, p, "MultiHeadSA_backward");
    require_same_shape(X, dY, "MultiHeadSA_backward", "X", "dY");
    const int A = (int)p.W_Q.size(), D = p.W_Q[0].cols();
    if ((int)cache.att.size() != A || cache.att[0].empty() || cache.concat.rows() != X.rows())
        throw ShapeError("MultiHeadSA_backward: the cache does not come from a forward pass on X (" + shape_str(X) +
                         "), concat is " + shape_str(cache.concat));
    const int B = (int)cache.att[0].size(), n = X.rows() / B;
    if (g.b_Q.size() != p.b_Q.size() || g.b_K.size() != p.b_K.size() || g.b_V.size() != p.b_V.size() ||
        g.b_O.empty() != p.b_O.empty())
        throw ShapeError("MultiHeadSA_backward: the gradient g needs biases exactly when the parameters have them");
    std::vector<Tensor<T>> dhead = Concat_backward(Linear_backward(cache.concat, p.W_O, dY, g.W_O, &g.b_O), A);
    Tensor<T> dX(X.rows(), X.cols());
    for (int i = 0; i < A; i++) {
        Tensor<T> dQ = Tensor<T>::uninit(B * n, D), dK = Tensor<T>::uninit(B * n, D), dV = Tensor<T>::uninit(B * n, D);
        for (int b = 0; b < B; b++) {
            Tensor<T> dq, dk, dv;
            Attention_backward(rows_of(cache.Q[i], b * n, n), rows_of(cache.K[i], b * n, n), rows_of(cache.V[i], b * n, n),
                               cache.att[i][b], rows_of(dhead[i], b * n, n), dq, dk, dv, &cache.dropout[i][b]);
            set_rows(dQ, b * n, dq);
            set_rows(dK, b * n, dk);
            set_rows(dV, b * n, dv);
        }
        add_inplace(dX, Linear_backward(X, p.W_Q[i], dQ, g.W_Q[i], head_bias(g.b_Q, i)));
        add_inplace(dX, Linear_backward(X, p.W_K[i], dK, g.W_K[i], head_bias(g.b_K, i)));
        add_inplace(dX, Linear_backward(X, p.W_V[i], dV, g.W_V[i], head_bias(g.b_V, i)));
    }
    return dX;
}

// ---- Activations -----------------------------------------------------------------------------
const char* activation_name(Activation a) {
    switch (a) {
        case Activation::relu: return "relu";
        case Activation::gelu_sigmoid: return "gelu_sigmoid";
        case Activation::gelu_tanh: return "gelu_tanh";
        case Activation::gelu_erf: return "gelu_erf";
    }
    return "?";
}

Activation activation_from_name(const std::string& s) {
    return enum_from_name(s, {Activation::relu, Activation::gelu_sigmoid, Activation::gelu_tanh, Activation::gelu_erf}, activation_name,
                          "activation");
}

template <typename T>
T activation(Activation a, T x) {
    switch (a) {
        case Activation::relu: return x > T(0) ? x : T(0);
        case Activation::gelu_sigmoid: return x / (T(1) + std::exp(T(-1.702) * x));
        case Activation::gelu_tanh: {
            const T sqrt_2_over_pi = T(0.7978845608028654);  // sqrt(2/pi)
            return T(0.5) * x * (T(1) + std::tanh(sqrt_2_over_pi * (x + T(0.044715) * x * x * x)));
        }
        case Activation::gelu_erf: return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
    }
    return x;
}

// relu' = [x > 0];  (x s(ax))' = s + a x s (1 - s) with s = sigmoid(ax), a = 1.702;
// tanh form: with u = c (x + 0.044715 x^3), t = tanh u: 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3*0.044715 x^2);
// erf form: Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
template <typename T>
T activation_derivative(Activation a, T x) {
    switch (a) {
        case Activation::relu: return x > T(0) ? T(1) : T(0);
        case Activation::gelu_sigmoid: {
            const T s = T(1) / (T(1) + std::exp(T(-1.702) * x));
            return s + T(1.702) * x * s * (T(1) - s);
        }
        case Activation::gelu_tanh: {
            if (std::fabs(x) > T(20)) return x > T(0) ? T(1) : T(0);  // saturated; avoids inf * 0
            const T sqrt_2_over_pi = T(0.7978845608028654);
            const T t = std::tanh(sqrt_2_over_pi * (x + T(0.044715) * x * x * x));
            return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * sqrt_2_over_pi * (T(1) + T(3 * 0.044715) * x * x);
        }
        case Activation::gelu_erf:
            return T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476))) +
                   x * std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
    }
    return T(1);
}

// ---- Feed-Forward Networks -------------------------------------------------------------------
template <typename T>
static void check_ffn_params(const Tensor<T>& X, const FFNParams<T>& p, const char* where) {
    require_matrix(X, where, "X");
    require_matrix(p.W_1, where, "W_1");
    const int H = X.cols(), F = p.W_1.cols();
    require_shape(p.W_1, {H, F}, where, "W_1");
    require_shape(p.b_1, {F}, where, "b_1");
    require_shape(p.W_2, {F, H}, where, "W_2");
    require_shape(p.b_2, {H}, where, "b_2");
}

// X: n x H -> Z = X W_1 + b_1 (n x F) -> A = act(Z) (n x F) -> Y = A W_2 + b_2 (n x H).
template <typename T>
Tensor<T> FFN(const Tensor<T>& X, const FFNParams<T>& p, Activation act, FFNCache<T>* cache_out) {
    check_ffn_params(X, p, "FFN");
    FFNCache<T> local;
    FFNCache<T>& cache = cache_out ? *cache_out : local;
    cache.Z = Linear(X, p.W_1, p.b_1);
    cache.A = Tensor<T>::uninit(cache.Z.shape);
    activation_array(act, cache.Z.ptr(), cache.A.ptr(), cache.Z.size());  // A = act(Z), entry by entry
    return Linear(cache.A, p.W_2, p.b_2);
}

template <typename T>
Tensor<T> FFN_backward(const Tensor<T>& X, const FFNParams<T>& p, Activation act, const FFNCache<T>& cache,
                       const Tensor<T>& dY, FFNParams<T>& g) {
    check_ffn_params(X, p, "FFN_backward");
    require_same_shape(X, dY, "FFN_backward", "X", "dY");
    Tensor<T> dA = Linear_backward(cache.A, p.W_2, dY, g.W_2, &g.b_2);  // n x F
    Tensor<T> dZ = std::move(dA);
    activation_derivative_array(act, cache.Z.ptr(), dZ.ptr(), dZ.size());  // dZ = dA * act'(Z), entry by entry
    return Linear_backward(X, p.W_1, dZ, g.W_1, &g.b_1);
}

template <typename T>
Tensor<T> FFN_ReLU(const Tensor<T>& X, const FFNParams<T>& p, FFNCache<T>* cache) {
    return FFN(X, p, Activation::relu, cache);
}
template <typename T>
Tensor<T> FFN_ReLU_backward(const Tensor<T>& X, const FFNParams<T>& p, const FFNCache<T>& cache, const Tensor<T>& dY,
                            FFNParams<T>& g) {
    return FFN_backward(X, p, Activation::relu, cache, dY, g);
}

static void require_gelu(Activation a, const char* where) {
    if (a == Activation::relu) throw Error(std::string(where) + ": relu is not a GELU (use FFN_ReLU)");
}
template <typename T>
Tensor<T> FFN_GELU(const Tensor<T>& X, const FFNParams<T>& p, FFNCache<T>* cache, Activation gelu) {
    require_gelu(gelu, "FFN_GELU");
    return FFN(X, p, gelu, cache);
}
template <typename T>
Tensor<T> FFN_GELU_backward(const Tensor<T>& X, const FFNParams<T>& p, const FFNCache<T>& cache, const Tensor<T>& dY,
                            FFNParams<T>& g, Activation gelu) {
    require_gelu(gelu, "FFN_GELU_backward");
    return FFN_backward(X, p, gelu, cache, dY, g);
}

// ---- Layer normalization ---------------------------------------------------------------------
// X: n x H; gamma, beta: H. Row i: mu_i, sigma_i^2 over its H entries (formula j = 1..H is code
// j = 0..H-1), Xhat = (X - mu) * rstd with rstd = 1/sqrt(sigma^2 + eps), Y = gamma * Xhat + beta.
// sum_{j<H} term(j) in double, kept as 8 partial sums (lanes) added at the end: a loop the compiler
// vectorises, where one running sum is a serial chain of dependent adds.
template <class F>
static double lanes_sum(int H, F term) {
    constexpr int W = 8;
    std::array<double, W> part{};  // std::array: the tests' build checks every index
    int j = 0;
    for (; j + W <= H; j += W)
        for (int l = 0; l < W; l++) part[l] += term(j + l);
    double s = 0;
    for (int l = 0; l < W; l++) s += part[l];
    for (; j < H; j++) s += term(j);
    return s;
}

template <typename T>
Tensor<T> LayerNorm(const Tensor<T>& X, const Tensor<T>& gamma, const Tensor<T>& beta, double eps,
                    LayerNormCache<T>* cache_out) {
    require_matrix(X, "LayerNorm", "X");
    const int n = X.rows(), H = X.cols();
    require_shape(gamma, {H}, "LayerNorm", "gamma");
    require_shape(beta, {H}, "LayerNorm", "beta");
    LayerNormCache<T> local;
    LayerNormCache<T>& cache = cache_out ? *cache_out : local;
    cache.Xhat = Tensor<T>::uninit(n, H);  // every row is written below
    cache.rstd = Tensor<T>::uninit({n});
    Tensor<T> Y = Tensor<T>::uninit(n, H);
    // The statistics are summed in double around a shift K = x_0 (shifted two-pass): a constant
    // row gives mu = K and x_j - mu = 0 exactly (so Y = beta), and a large common offset (rows of
    // 1000 +- 0.5) costs no precision, whatever T is.
    for (int i = 0; i < n; i++) {
        const T* x = X.row(i);
        const double K = (double)x[0];
        const double s = lanes_sum(H, [&](int j) { return (double)x[j] - K; });
        const double mu = K + s / H;
        const double var = lanes_sum(H, [&](int j) { return ((double)x[j] - mu) * ((double)x[j] - mu); }) / H;
        const double rstd = 1.0 / std::sqrt(var + eps);
        cache.rstd[i] = T(rstd);
        T* xh = cache.Xhat.row(i);
        T* y = Y.row(i);
        for (int j = 0; j < H; j++) {
            xh[j] = T(((double)x[j] - mu) * rstd);
            y[j] = gamma[j] * xh[j] + beta[j];
        }
    }
    return Y;
}

// Y = gamma Xhat + beta: dgamma = colsum(dY Xhat), dbeta = colsum(dY), G = dY gamma = dL/dXhat.
// Xhat_j = (x_j - mu) rstd with mu, rstd functions of the whole row; differentiating gives
//   dX_j = rstd (G_j - mean_k G_k - Xhat_j mean_k(G_k Xhat_k)).
template <typename T>
Tensor<T> LayerNorm_backward(const Tensor<T>& gamma, const LayerNormCache<T>& cache, const Tensor<T>& dY,
                             Tensor<T>& dgamma, Tensor<T>& dbeta) {
    require_same_shape(cache.Xhat, dY, "LayerNorm_backward", "Xhat", "dY");
    const int n = dY.rows(), H = dY.cols();
    require_shape(gamma, {H}, "LayerNorm_backward", "gamma");
    require_shape(dgamma, {H}, "LayerNorm_backward", "dgamma");
    require_shape(dbeta, {H}, "LayerNorm_backward", "dbeta");
    Tensor<T> dX = Tensor<T>::uninit(n, H);
    for (int i = 0; i < n; i++) {
        const T* dy = dY.row(i);
        const T* xh = cache.Xhat.row(i);
        // row means summed in double, as in the forward
        const double sum_g = lanes_sum(H, [&](int j) { return (double)(dy[j] * gamma[j]); });
        const double sum_gx = lanes_sum(H, [&](int j) { return (double)(dy[j] * gamma[j]) * xh[j]; });
        for (int j = 0; j < H; j++) {
            dgamma[j] += dy[j] * xh[j];
            dbeta[j] += dy[j];
        }
        const T mean_g = T(sum_g / H), mean_gx = T(sum_gx / H);
        T* dx = dX.row(i);
        for (int j = 0; j < H; j++) dx[j] = cache.rstd[i] * (dy[j] * gamma[j] - mean_g - xh[j] * mean_gx);
    }
    return dX;
}

// ---- Cross Entropy ---------------------------------------------------------------------------
// CrossEntropy(y, yhat) = - sum_j y_j log(yhat_j); y, yhat: V. Terms with y_j = 0 contribute 0
// (0 log 0 := 0).
template <typename T>
T CrossEntropy(const Tensor<T>& y, const Tensor<T>& yhat) {
    require_same_shape(y, yhat, "CrossEntropy", "y", "yhat");
    T loss = 0;
    for (std::size_t j = 0; j < y.size(); j++)
        if (y[j] != T(0)) loss -= y[j] * math::log(yhat[j]);
    return loss;
}
// d/dyhat_j (- y_j log yhat_j) = - y_j / yhat_j.
template <typename T>
Tensor<T> CrossEntropy_backward(const Tensor<T>& y, const Tensor<T>& yhat) {
    require_same_shape(y, yhat, "CrossEntropy_backward", "y", "yhat");
    Tensor<T> d = Tensor<T>::uninit(yhat.shape);
    for (std::size_t j = 0; j < y.size(); j++) d[j] = y[j] != T(0) ? -y[j] / yhat[j] : T(0);
    return d;
}

// Fused with Softmax: - log Softmax(z)_t = logsumexp(z) - z_t, and its gradient in z is
// Softmax(z) - OneHot(t) (the Softmax Jacobian times -1/yhat_t collapses to this).
// Losses are summed in double so a long row of small terms loses nothing.
template <typename T>
double CrossEntropy_logits(const Tensor<T>& Z, const std::vector<int>& targets, Tensor<T>* dZ) {
    require_matrix(Z, "CrossEntropy_logits", "Z");
    const int m = Z.rows(), V = Z.cols();
    if ((int)targets.size() != m)
        throw ShapeError("CrossEntropy_logits: Z is " + shape_str(Z) + " but there are " +
                         std::to_string(targets.size()) + " targets");
    int count = 0;
    for (int t : targets) {
        if (t >= V || t < -1)
            throw Error("CrossEntropy_logits: target id " + std::to_string(t) + " is outside 0.." +
                        std::to_string(V - 1));
        count += t >= 0;
    }
    if (dZ) *dZ = Tensor<T>::uninit(m, V);  // rows without a target are zeroed below
    std::vector<T> row(dZ ? 0 : V);
    double loss = 0;
    for (int i = 0; i < m; i++) {
        if (targets[i] < 0) {
            if (dZ) std::fill(dZ->row(i), dZ->row(i) + V, T(0));
            continue;
        }
        const T* z = Z.row(i);
        T* e = dZ ? dZ->row(i) : row.data();
        T mx = 0;
        const double sum = softmax_numerators(z, e, V, mx);  // e_j = exp(z_j - mx), mx = max_j z_j
        const double lse = (double)mx + math::log(sum);
        loss += lse - (double)z[targets[i]];
        if (dZ) {
            const T inv = T(1.0 / (sum * count));
            for (int j = 0; j < V; j++) e[j] *= inv;
            e[targets[i]] -= T(1.0 / count);
        }
    }
    return count ? loss / count : 0.0;
}

// ---- Random numbers and dropout --------------------------------------------------------------
uint64_t Rng::next() {  // splitmix64 (Steele, Lea, Flood 2014)
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
double Rng::uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
double Rng::normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * math::log(u1)) * math::cos_pi(2.0 * u2);  // cos(2 pi u2)
}
int Rng::below(int n) {
    if (n <= 0) throw Error("Rng::below: empty range 0.." + std::to_string(n - 1));
    return (int)(uniform() * n);
}

// The generator by pointer, as the blocks hold it: p = 0 needs none and draws nothing (an empty
// mask, which multiply_inplace skips), so the callers need no test of their own for p > 0.
template <typename T>
Tensor<T> dropout_mask(const std::vector<int>& shape, double p, Rng* rng) {
    if (p <= 0) return Tensor<T>();
    if (!(p < 1)) throw Error("dropout: p must be below 1, got " + std::to_string(p));
    if (!rng) throw Error("dropout: p = " + std::to_string(p) + " needs a random generator");
    Tensor<T> m = Tensor<T>::uninit(shape);
    const T keep = T(1.0 / (1.0 - p));
    for (auto& v : m.data) v = rng->uniform() < p ? T(0) : keep;
    return m;
}
template <typename T>
Tensor<T> dropout_mask(const std::vector<int>& shape, double p, Rng& rng) {
    return dropout_mask<T>(shape, p, &rng);
}

template <typename T>
void multiply_inplace(Tensor<T>& X, const Tensor<T>& scale) {
    if (scale.empty()) return;
    require_same_shape(X, scale, "dropout", "X", "scale");
    T* __restrict x = X.ptr();
    const T* __restrict s = scale.ptr();
    const std::size_t n = X.size();
    for (std::size_t k = 0; k < n; k++) x[k] *= s[k];
}

// ================================================================================================
// MODELS
// ================================================================================================

const char* variant_name(Variant v) {
    switch (v) {
        case Variant::gpt: return "gpt";
        case Variant::gpt2: return "gpt2";
        case Variant::gpt3: return "gpt3";
        case Variant::bert: return "bert";
        case Variant::roberta: return "roberta";
    }
    return "?";
}

Variant variant_from_name(const std::string& s) {
    return enum_from_name(s, {Variant::gpt, Variant::gpt2, Variant::gpt3, Variant::bert, Variant::roberta}, variant_name, "model variant");
}

bool is_pre_ln(Variant v) { return v == Variant::gpt2 || v == Variant::gpt3; }
bool is_causal(Variant v) { return v == Variant::gpt || v == Variant::gpt2 || v == Variant::gpt3; }
bool has_segments(Variant v) { return v == Variant::bert; }

static Config make_config(Variant v, int V, int H, int F, int D, int L, int A, int n_ctx, Activation act,
                          double eps) {
    Config c;
    c.variant = v;
    c.V = V;
    c.H = H;
    c.F = F;
    c.D = D;
    c.L = L;
    c.A = A;
    c.n_ctx = n_ctx;
    c.activation = act;
    c.eps = eps;
    return c;
}

std::vector<std::string> preset_names() {
    return {"gpt1",     "gpt2-124m", "gpt3-125m", "bert-base",  "roberta-base",
            "tiny-gpt", "tiny-gpt2", "tiny-gpt3", "tiny-bert", "tiny-roberta"};
}

Config preset(const std::string& name) {
    Config c;
    if (name == "gpt1") {  // the published hyperparameters, formulas §24 (GPT-1 paper)
        c = make_config(Variant::gpt, 40478, 768, 3072, 64, 12, 12, 512, Activation::gelu_sigmoid, 1e-5);
    } else if (name == "gpt2-124m") {  // released GPT-2 small: tanh GELU, attention biases
        c = make_config(Variant::gpt2, 50257, 768, 3072, 64, 12, 12, 1024, Activation::gelu_tanh, 1e-5);
        c.attn_bias = true;
    } else if (name == "gpt3-125m") {  // GPT-3 Small (paper table 2.1), n_ctx 2048
        c = make_config(Variant::gpt3, 50257, 768, 3072, 64, 12, 12, 2048, Activation::gelu_tanh, 1e-5);
        c.st_window = 256;
        c.st_stride = 256;
    } else if (name == "bert-base") {  // BERT-base uncased: exact GELU, eps 1e-12
        c = make_config(Variant::bert, 30522, 768, 3072, 64, 12, 12, 512, Activation::gelu_erf, 1e-12);
        c.cls_id = 101;
        c.sep_id = 102;
        c.mask_id = 103;
        c.attn_bias = true;
    } else if (name == "roberta-base") {  // <s> = 0, </s> = 2, <mask> = 50264
        c = make_config(Variant::roberta, 50265, 768, 3072, 64, 12, 12, 514, Activation::gelu_erf, 1e-5);
        c.cls_id = 0;
        c.sep_id = 2;
        c.mask_id = 50264;
        c.attn_bias = true;
    } else if (name.rfind("tiny-", 0) == 0) {  // tiny: V 13, H 8, F 16, D 4, L 2, A 2, n_ctx 16
        const Variant v = variant_from_name(name.substr(5));
        c = make_config(v, 13, 8, 16, 4, 2, 2, 16, Activation::gelu_sigmoid, 1e-5);
        if (v == Variant::bert || v == Variant::roberta) {
            c.cls_id = 10;
            c.sep_id = 11;
            c.mask_id = 12;
        }
        if (v == Variant::bert) {
            c.activation = Activation::gelu_erf;
            c.eps = 1e-12;
        }
        if (v == Variant::gpt3) {
            c.st_window = 2;
            c.st_stride = 3;
        }
    } else {
        std::string all;
        for (auto& p : preset_names()) all += " " + p;
        throw Error("unknown preset '" + name + "' (presets:" + all + ")");
    }
    return c;
}

void validate(const Config& c) {
    auto positive = [](int v, const char* what) {
        if (v <= 0) throw Error(std::string("config: ") + what + " must be positive, got " + std::to_string(v));
    };
    positive(c.V, "V");
    positive(c.H, "H");
    positive(c.F, "F");
    positive(c.D, "D");
    positive(c.L, "L");
    positive(c.A, "A");
    positive(c.n_ctx, "n_ctx");
    if (!(c.eps > 0)) throw Error("config: eps must be positive");
    if (c.variant == Variant::gpt3 && (c.st_window < 1 || c.st_stride < 0))
        throw Error("config: gpt3 needs st_window >= 1 and st_stride >= 0");
    if (c.W_y_rows < 0 || c.W_y_cols < 0 || (c.W_y_rows == 0) != (c.W_y_cols == 0))
        throw Error("config: W_y needs both sizes positive (or both 0: no head)");
    if (c.xlnet && has_segments(c.variant)) throw Error("config: XLNet's objective does not apply to bert (segments)");
    if ((c.emb_ln || c.mlm_head || c.pooler) && (is_causal(c.variant) || c.xlnet))
        throw Error("config: emb_ln, mlm_head and pooler (the released BERT's additions) apply to bert and roberta only");
    if (c.variant == Variant::bert || c.variant == Variant::roberta) {
        for (int id : {c.cls_id, c.sep_id, c.mask_id})
            if (id < 0 || id >= c.V)
                throw Error("config: " + std::string(variant_name(c.variant)) +
                            " needs cls_id, sep_id and mask_id inside 0..V-1");
    }
    if (c.pad_id != -1 && (c.variant != Variant::roberta || c.pad_id < 0 || c.pad_id >= c.V))
        throw Error("config: pad_id (RoBERTa's <pad>) must be -1, or an id inside 0..V-1 of a roberta model");
    const double floats = (double)c.V * c.H + (double)c.n_ctx * c.H + (double)c.L * (4.0 * c.H * c.A * c.D + 2.0 * c.H * c.F);
    if (floats > 2e9) throw Error("config: the model would hold more than 2e9 parameters");
}

// ---- Parameters theta (formulas §24) ------ ----------------------------------------------------
template <typename T>
Params<T> make_params(const Config& c, bool allocate) {
    validate(c);
    auto tensor = [](std::vector<int> shape) {  // the shape alone; the numbers come below
        Tensor<T> t;
        t.shape = std::move(shape);
        return t;
    };
    const int H = c.H, D = c.D, A = c.A, F = c.F;
    Params<T> p;
    p.W_e = tensor({c.V, H});
    p.W_p = tensor({c.n_ctx, H});
    if (c.pad_id >= 0) p.w_pad = tensor({H});
    if (has_segments(c.variant)) {
        p.w_A = tensor({H});
        p.w_B = tensor({H});
    }
    p.layers.resize(c.L);
    for (auto& l : p.layers) {
        l.attn.W_Q.assign(A, tensor({H, D}));
        l.attn.W_K.assign(A, tensor({H, D}));
        l.attn.W_V.assign(A, tensor({H, D}));
        l.attn.W_O = tensor({A * D, H});
        if (c.attn_bias) {
            l.attn.b_Q.assign(A, tensor({D}));
            l.attn.b_K.assign(A, tensor({D}));
            l.attn.b_V.assign(A, tensor({D}));
            l.attn.b_O = tensor({H});
        }
        l.ffn = {tensor({H, F}), tensor({F}), tensor({F, H}), tensor({H})};
        l.ln_1_gamma = tensor({H});
        l.ln_1_beta = tensor({H});
        l.ln_2_gamma = tensor({H});
        l.ln_2_beta = tensor({H});
    }
    if (is_pre_ln(c.variant)) {
        p.ln_f_gamma = tensor({H});
        p.ln_f_beta = tensor({H});
    }
    if (c.W_y_rows > 0) p.W_y = tensor({c.W_y_rows, c.W_y_cols});
    if (c.xlnet) p.w = tensor({H});
    if (c.emb_ln) {
        p.gamma_e = tensor({H});
        p.beta_e = tensor({H});
    }
    if (c.mlm_head) {
        p.W_t = tensor({H, H});
        p.b_t = tensor({H});
        p.gamma_t = tensor({H});
        p.beta_t = tensor({H});
        p.b_z = tensor({c.V});
    }
    if (c.pooler) {
        p.W_pool = tensor({H, H});
        p.b_pool = tensor({H});
    }
    if (allocate) allocate_params(c, p);  // zeros, every tensor in one block of memory (Part II)
    return p;
}

template <typename T>
std::vector<Named<T>> named_tensors(const Config& c, Params<T>& p) {
    std::vector<Named<T>> out = {{"W_e", &p.W_e}, {"W_p", &p.W_p}};
    if (c.pad_id >= 0) out.push_back({"w_pad", &p.w_pad});
    if (has_segments(c.variant)) {
        out.push_back({"w_A", &p.w_A});
        out.push_back({"w_B", &p.w_B});
    }
    for (int l = 0; l < (int)p.layers.size(); l++) {
        Layer<T>& ly = p.layers[l];
        const std::string pre = "layers." + std::to_string(l) + ".";
        for (int i = 0; i < (int)ly.attn.W_Q.size(); i++) {
            out.push_back({pre + "attn.W_Q." + std::to_string(i), &ly.attn.W_Q[i]});
            out.push_back({pre + "attn.W_K." + std::to_string(i), &ly.attn.W_K[i]});
            out.push_back({pre + "attn.W_V." + std::to_string(i), &ly.attn.W_V[i]});
        }
        out.push_back({pre + "attn.W_O", &ly.attn.W_O});
        for (int i = 0; i < (int)ly.attn.b_Q.size(); i++) {
            out.push_back({pre + "attn.b_Q." + std::to_string(i), &ly.attn.b_Q[i]});
            out.push_back({pre + "attn.b_K." + std::to_string(i), &ly.attn.b_K[i]});
            out.push_back({pre + "attn.b_V." + std::to_string(i), &ly.attn.b_V[i]});
        }
        if (!ly.attn.b_O.shape.empty()) out.push_back({pre + "attn.b_O", &ly.attn.b_O});
        out.push_back({pre + "ffn.W_1", &ly.ffn.W_1});
        out.push_back({pre + "ffn.b_1", &ly.ffn.b_1});
        out.push_back({pre + "ffn.W_2", &ly.ffn.W_2});
        out.push_back({pre + "ffn.b_2", &ly.ffn.b_2});
        out.push_back({pre + "ln_1.gamma", &ly.ln_1_gamma});
        out.push_back({pre + "ln_1.beta", &ly.ln_1_beta});
        out.push_back({pre + "ln_2.gamma", &ly.ln_2_gamma});
        out.push_back({pre + "ln_2.beta", &ly.ln_2_beta});
    }
    if (is_pre_ln(c.variant)) {
        out.push_back({"ln_f.gamma", &p.ln_f_gamma});
        out.push_back({"ln_f.beta", &p.ln_f_beta});
    }
    if (c.W_y_rows > 0) out.push_back({"W_y", &p.W_y});
    if (c.xlnet) out.push_back({"w", &p.w});
    if (c.emb_ln) {
        out.push_back({"emb_ln.gamma", &p.gamma_e});
        out.push_back({"emb_ln.beta", &p.beta_e});
    }
    if (c.mlm_head) {
        out.push_back({"mlm.W_t", &p.W_t});
        out.push_back({"mlm.b_t", &p.b_t});
        out.push_back({"mlm.ln.gamma", &p.gamma_t});
        out.push_back({"mlm.ln.beta", &p.beta_t});
        out.push_back({"mlm.b_z", &p.b_z});
    }
    if (c.pooler) {
        out.push_back({"pooler.W", &p.W_pool});
        out.push_back({"pooler.b", &p.b_pool});
    }
    return out;
}

// Names with "gamma" (ln_1.gamma, ...) are LayerNorm gains (init 1); other vectors are biases (init
// 0), except the segment vectors, which are embeddings; matrices are N(0, 0.02). Drawn in
// named_tensors order. w_pad starts at 0, as Hugging Face's nn.Embedding zeroes its padding_idx row.
template <typename T>
void init_params(const Config& c, Params<T>& p, uint64_t seed) {
    Rng rng(seed);
    for (auto& nt : named_tensors(c, p)) {
        const std::string& name = nt.name;
        const bool gain = name.find("gamma") != std::string::npos;
        const bool random = nt.tensor->shape.size() == 2 || name == "w_A" || name == "w_B" || name == "w";
        for (auto& v : nt.tensor->data) v = random ? T(0.02 * rng.normal()) : gain ? T(1) : T(0);
    }
}

template <typename T>
void scale_residual_init(const Config& c, Params<T>& p) {
    const T s = T(1.0 / std::sqrt(2.0 * c.L));
    for (auto& l : p.layers) {
        for (auto& v : l.attn.W_O.data) v *= s;
        for (auto& v : l.ffn.W_2.data) v *= s;
    }
}

template <typename T>
void zero_params(const Config& c, Params<T>& p) {
    for (auto& nt : named_tensors(c, p)) nt.tensor->zero();
}

template <typename T>
std::string first_nonfinite(const Config& c, const Params<T>& p) {
    for (auto& nt : named_tensors(c, const_cast<Params<T>&>(p))) {
        bool finite = true;
        for (T v : nt.tensor->data) finite &= std::isfinite(v);  // no early exit: the loop vectorises
        if (!finite) return nt.name;
    }
    return "";
}

ParamCount count_params(const Config& c) {
    validate(c);
    const long long V = c.V, H = c.H, F = c.F, D = c.D, L = c.L, A = c.A, n = c.n_ctx;
    ParamCount k;
    k.embeddings = V * H + n * H;
    k.attention = L * (A * (H * D + H * D + H * D) + A * D * H);
    k.ffn = L * (H * F + F + F * H + H);
    k.layernorms = L * (H + H + H + H);
    k.seed_lambda = k.embeddings + k.attention + k.ffn + k.layernorms;
    k.segments = has_segments(c.variant) ? 2 * H : 0;
    k.final_ln = is_pre_ln(c.variant) ? 2 * H : 0;
    k.attn_biases = c.attn_bias ? L * (A * (D + D + D) + H) : 0;
    k.heads = (long long)c.W_y_rows * c.W_y_cols + (c.xlnet ? H : 0);
    k.emb_ln = c.emb_ln ? 2 * H : 0;
    k.mlm_head = c.mlm_head ? H * H + H + 2 * H + V : 0;
    k.pooler = c.pooler ? H * H + H : 0;
    k.pad_position = c.pad_id >= 0 ? H : 0;
    k.actual = k.seed_lambda + k.segments + k.final_ln + k.attn_biases + k.heads + k.emb_ln + k.mlm_head + k.pooler + k.pad_position;
    return k;
}

// ---- Embedding of a model ---------------------------------------------------------------------
// RoBERTa's <pad> (Config::pad_id) takes Hugging Face's position row padding_idx and leaves the
// count where it was, so that a model with released weights sees the positions it was trained with.
std::vector<int> position_rows(const Config& c, const std::vector<int>& tokens, int n) {
    if (n < 1 || tokens.size() % n != 0) throw Error("position_rows: " + std::to_string(tokens.size()) + " tokens are not sequences of n = " + std::to_string(n));
    std::vector<int> rows(tokens.size());
    int count = 0;  // non-pad tokens so far in this sequence
    for (std::size_t r = 0; r < tokens.size(); r++) {
        if (r % n == 0) count = 0;
        rows[r] = c.pad_id >= 0 && tokens[r] == c.pad_id ? -1 : count++;
    }
    return rows;
}
// Row `row` of position_rows: W_p[row], or w_pad for -1; of the parameters, or of their gradients.
template <typename T>
const T* position_vector(const Params<T>& p, int row) {
    return row < 0 ? p.w_pad.ptr() : p.W_p.row(row);
}
template <typename T>
T* position_vector(Params<T>& p, int row) {
    return row < 0 ? p.w_pad.ptr() : p.W_p.row(row);
}

//   X^(0) = OneHot(x) W_e + W_p[0:n, :]                                              (n x H)
//   BERT:  X^(0) += diag(1 - t) Stack_n(w_A) + diag(t) Stack_n(w_B)                  (n x H)
// (t_i = 0, the first part up to its [SEP], gets w_A: formulas §21.) RoBERTa with pad_id: the
// rows of position_rows in place of W_p[0:n, :]. first_position > 0 (model_step: one token of a
// causal model, so no <pad>) shifts the rows: W_p[first_position:first_position+n, :].
template <typename T>
Tensor<T> embed_forward(const Config& c, const Params<T>& p, const Batch& batch, int first_position) {
    const std::vector<int> pos = position_rows(c, batch.tokens, batch.n);
    Tensor<T> X = Embedding(batch.tokens, p.W_e);  // (B*n) x H
    for (int r = 0; r < X.rows(); r++) {
        const T* __restrict wp = position_vector(p, pos[r] < 0 ? pos[r] : first_position + pos[r]);
        T* __restrict x = X.row(r);
        for (int j = 0; j < c.H; j++) x[j] += wp[j];
        if (has_segments(c.variant)) {
            const int t = batch.segments.empty() ? 0 : batch.segments[r];
            const T* __restrict w = t == 0 ? p.w_A.ptr() : p.w_B.ptr();
            for (int j = 0; j < c.H; j++) x[j] += w[j];
        }
    }
    return X;
}
// dW_e += OneHot(x)^T dX, dW_p[i] += sum over sequences of dX row i (with pad_id: of the rows that
// read W_p[i], and dw_pad += the pads' rows), dw_A / dw_B += the rows of their part (the backward of
// diag(.) Stack(.)).
template <typename T>
void embed_backward(const Config& c, const Batch& batch, const Tensor<T>& dX, Params<T>& g) {
    Embedding_backward(batch.tokens, dX, g.W_e);
    const std::vector<int> pos = position_rows(c, batch.tokens, batch.n);
    for (int r = 0; r < dX.rows(); r++) {
        const T* d = dX.row(r);
        T* wp = position_vector(g, pos[r]);
        for (int j = 0; j < c.H; j++) wp[j] += d[j];
        if (has_segments(c.variant)) {
            const int t = batch.segments.empty() ? 0 : batch.segments[r];
            T* w = t == 0 ? g.w_A.ptr() : g.w_B.ptr();
            for (int j = 0; j < c.H; j++) w[j] += d[j];
        }
    }
}

template <typename T>
Tensor<T> layer_mask(const Config& c, int l, int n) {
    switch (c.variant) {
        case Variant::bert:
        case Variant::roberta: return Mask_BD<T>(n);
        case Variant::gpt3: return l % 2 == 1 ? Mask_AR<T>(n) : Mask_ST<T>(n, c.st_window, c.st_stride);  // formula l + 1 even
        default: return Mask_AR<T>(n);
    }
}

// A stage of the walk shown to the trace, if one was given (transformer.hpp, Trace): the forward's
// value (the trace may change it) or the gradient of the loss with respect to it.
template <typename T>
static void trace_forward(Trace* trace, Stage s, int l, Tensor<T>& value) {
    if (trace) trace->forward(s, l, value);
}
template <typename T>
static void trace_backward(Trace* trace, Stage s, int l, Tensor<T>& gradient) {
    if (trace) trace->backward(s, l, gradient);
}

// ---- Post-LN block (GPT, BERT, RoBERTa) --------------------------------------------------------
//   X'^(l) = LayerNorm(MultiHeadSA(X^(l-1), Mask) + X^(l-1))
//   X^(l)  = LayerNorm(FFN(X'^(l)) + X'^(l))
// Training adds dropout to each branch before the sum (formulas §16: "residual dropout").
template <typename T>
static Tensor<T> post_ln_block_forward(const Config& c, const Layer<T>& w, const Tensor<T>& X, const Tensor<T>& Mask,
                                       BlockCache<T>& k, const ForwardOptions& o, KVLayer<T>* kv) {
    k.attn_in = X;                           // X^(l-1)
    Tensor<T> a = kv ? MultiHeadSA_cached(X, Mask, w.attn, *kv) : MultiHeadSA(X, Mask, w.attn, &k.attn, o.dropout, o.rng);
    trace_forward(o.trace, Stage::attention, k.l, a);
    if (o.keep_sublayers) k.attn_out = a;
    k.drop_attn = dropout_mask<T>(a.shape, o.dropout, o.rng);
    multiply_inplace(a, k.drop_attn);
    add_inplace(a, X);  // a = S
    trace_forward(o.trace, Stage::attn_sum, k.l, a);
    k.ffn_in = LayerNorm(a, w.ln_1_gamma, w.ln_1_beta, c.eps, &k.ln_1);  // X'^(l)
    trace_forward(o.trace, Stage::X_mid, k.l, k.ffn_in);
    Tensor<T> f = FFN(k.ffn_in, w.ffn, c.activation, &k.ffn);
    trace_forward(o.trace, Stage::ffn, k.l, f);
    if (o.keep_sublayers) k.ffn_out = f;
    k.drop_ffn = dropout_mask<T>(f.shape, o.dropout, o.rng);
    multiply_inplace(f, k.drop_ffn);
    add_inplace(f, k.ffn_in);  // f = U
    trace_forward(o.trace, Stage::ffn_sum, k.l, f);
    return LayerNorm(f, w.ln_2_gamma, w.ln_2_beta, c.eps, &k.ln_2);
}
// Backward of u = LN(branch(x) + x): du = LN_backward(dy); dx = du + branch_backward(du).
template <typename T>
static Tensor<T> post_ln_block_backward(const Config& c, const Layer<T>& w, const BlockCache<T>& k, const Tensor<T>& dY,
                                        Layer<T>& g) {
    Tensor<T> du = LayerNorm_backward(w.ln_2_gamma, k.ln_2, dY, g.ln_2_gamma, g.ln_2_beta);
    trace_backward(k.trace, Stage::ffn_sum, k.l, du);
    Tensor<T> df = du;
    multiply_inplace(df, k.drop_ffn);
    trace_backward(k.trace, Stage::ffn, k.l, df);
    Tensor<T> dX_mid = FFN_backward(k.ffn_in, w.ffn, c.activation, k.ffn, df, g.ffn);
    add_inplace(dX_mid, du);
    trace_backward(k.trace, Stage::X_mid, k.l, dX_mid);
    Tensor<T> dv = LayerNorm_backward(w.ln_1_gamma, k.ln_1, dX_mid, g.ln_1_gamma, g.ln_1_beta);
    trace_backward(k.trace, Stage::attn_sum, k.l, dv);
    Tensor<T> da = dv;
    multiply_inplace(da, k.drop_attn);
    trace_backward(k.trace, Stage::attention, k.l, da);
    Tensor<T> dX = MultiHeadSA_backward(k.attn_in, w.attn, k.attn, da, g.attn);
    add_inplace(dX, dv);
    return dX;
}

// ---- Pre-LN block (GPT-2, GPT-3) ---------------------------------------------------------------
//   X'^(l) = MultiHeadSA(LayerNorm(X^(l-1)), Mask) + X^(l-1)
//   X^(l)  = FFN(LayerNorm(X'^(l))) + X'^(l)
template <typename T>
static Tensor<T> pre_ln_block_forward(const Config& c, const Layer<T>& w, const Tensor<T>& X, const Tensor<T>& Mask,
                                      BlockCache<T>& k, const ForwardOptions& o, KVLayer<T>* kv) {
    if (o.keep_sublayers) k.X = X;
    k.attn_in = LayerNorm(X, w.ln_1_gamma, w.ln_1_beta, c.eps, &k.ln_1);
    trace_forward(o.trace, Stage::ln_1, k.l, k.attn_in);
    Tensor<T> a = kv ? MultiHeadSA_cached(k.attn_in, Mask, w.attn, *kv) : MultiHeadSA(k.attn_in, Mask, w.attn, &k.attn, o.dropout, o.rng);
    trace_forward(o.trace, Stage::attention, k.l, a);
    if (o.keep_sublayers) k.attn_out = a;
    k.drop_attn = dropout_mask<T>(a.shape, o.dropout, o.rng);
    multiply_inplace(a, k.drop_attn);
    add_inplace(a, X);  // a = X'^(l)
    trace_forward(o.trace, Stage::X_mid, k.l, a);
    if (o.keep_sublayers) k.X_mid = a;
    k.ffn_in = LayerNorm(a, w.ln_2_gamma, w.ln_2_beta, c.eps, &k.ln_2);
    trace_forward(o.trace, Stage::ln_2, k.l, k.ffn_in);
    Tensor<T> f = FFN(k.ffn_in, w.ffn, c.activation, &k.ffn);
    trace_forward(o.trace, Stage::ffn, k.l, f);
    if (o.keep_sublayers) k.ffn_out = f;
    k.drop_ffn = dropout_mask<T>(f.shape, o.dropout, o.rng);
    multiply_inplace(f, k.drop_ffn);
    add_inplace(f, a);
    return f;
}
// Backward of y = branch(LN(x)) + x: dx = dy + LN_backward(branch_backward(dy)).
template <typename T>
static Tensor<T> pre_ln_block_backward(const Config& c, const Layer<T>& w, const BlockCache<T>& k, const Tensor<T>& dY,
                                       Layer<T>& g) {
    Tensor<T> df = dY;
    multiply_inplace(df, k.drop_ffn);
    trace_backward(k.trace, Stage::ffn, k.l, df);
    Tensor<T> d_ffn_in = FFN_backward(k.ffn_in, w.ffn, c.activation, k.ffn, df, g.ffn);
    trace_backward(k.trace, Stage::ln_2, k.l, d_ffn_in);
    Tensor<T> dX_mid = LayerNorm_backward(w.ln_2_gamma, k.ln_2, d_ffn_in, g.ln_2_gamma, g.ln_2_beta);
    add_inplace(dX_mid, dY);
    trace_backward(k.trace, Stage::X_mid, k.l, dX_mid);
    Tensor<T> da = dX_mid;
    multiply_inplace(da, k.drop_attn);
    trace_backward(k.trace, Stage::attention, k.l, da);
    Tensor<T> d_attn_in = MultiHeadSA_backward(k.attn_in, w.attn, k.attn, da, g.attn);
    trace_backward(k.trace, Stage::ln_1, k.l, d_attn_in);
    Tensor<T> dX = LayerNorm_backward(w.ln_1_gamma, k.ln_1, d_attn_in, g.ln_1_gamma, g.ln_1_beta);
    add_inplace(dX, dX_mid);
    return dX;
}

// One layer's block, pre-LN or post-LN by the variant: X^(l-1) -> X^(l) and dX^(l) -> dX^(l-1).
// In generation (kv given) a block's attention is MultiHeadSA_cached: X is the new row, Mask its
// row of the layer's mask, and the earlier rows' keys and values come from kv.
template <typename T>
Tensor<T> block_forward(const Config& c, const Layer<T>& w, const Tensor<T>& X, const Tensor<T>& Mask,
                        BlockCache<T>& k, const ForwardOptions& o, KVLayer<T>* kv) {
    return is_pre_ln(c.variant) ? pre_ln_block_forward(c, w, X, Mask, k, o, kv) : post_ln_block_forward(c, w, X, Mask, k, o, kv);
}
template <typename T>
Tensor<T> block_backward(const Config& c, const Layer<T>& w, const BlockCache<T>& k, const Tensor<T>& dY, Layer<T>& g) {
    return is_pre_ln(c.variant) ? pre_ln_block_backward(c, w, k, dY, g) : post_ln_block_backward(c, w, k, dY, g);
}

// The layers l = 1..L (code l-1) on X^(0) with the masks in k.masks, then ln_f (pre-LN variants):
// X^(L), the rows that are de-embedded. Shared by model_forward, xlnet_loss and model_step (which
// gives kv: its one new row attends to the cached keys and values, with k.masks its mask rows).
template <typename T>
static Tensor<T> blocks_forward(const Config& c, const Params<T>& p, Tensor<T> X, ForwardCache<T>& k,
                                const ForwardOptions& opt, KVCache<T>* kv = nullptr) {
    k.blocks.resize(c.L);
    for (int l = 0; l < c.L; l++) {
        k.blocks[l].trace = opt.trace;
        k.blocks[l].l = l + 1;
        X = block_forward(c, p.layers[l], X, k.masks[l], k.blocks[l], opt, kv ? &kv->layers[l] : nullptr);
        trace_forward(opt.trace, Stage::X, l + 1, X);
    }
    if (is_pre_ln(c.variant)) {
        k.X_L_in = std::move(X);
        X = LayerNorm(k.X_L_in, p.ln_f_gamma, p.ln_f_beta, c.eps, &k.ln_f);
        trace_forward(opt.trace, Stage::final_ln, c.L, X);
    }
    return X;
}
// dX^(L) -> dX^(0), accumulating every layer's gradients into g.
template <typename T>
Tensor<T> blocks_backward(const Config& c, const Params<T>& p, const ForwardCache<T>& k, Tensor<T> dX,
                          Params<T>& g) {
    if (is_pre_ln(c.variant)) {
        trace_backward(k.trace, Stage::final_ln, c.L, dX);
        dX = LayerNorm_backward(p.ln_f_gamma, k.ln_f, dX, g.ln_f_gamma, g.ln_f_beta);
    }
    for (int l = c.L - 1; l >= 0; l--) {
        trace_backward(k.trace, Stage::X, l + 1, dX);
        dX = block_backward(c, p.layers[l], k.blocks[l], dX, g.layers[l]);
    }
    trace_backward(k.trace, Stage::X, 0, dX);
    return dX;
}

void check_batch(const Config& c, const Batch& b) {
    if (b.B < 1 || b.n < 1) throw Error("batch: B and n must be positive");
    if (b.n > c.n_ctx)
        throw Error("sequence of " + std::to_string(b.n) + " tokens is longer than the context n_ctx = " +
                    std::to_string(c.n_ctx));
    if ((long long)b.tokens.size() != (long long)b.B * b.n)
        throw Error("batch: " + std::to_string(b.tokens.size()) + " tokens for B x n = " + std::to_string(b.B) + " x " +
                    std::to_string(b.n));
    check_token_ids(b.tokens, c.V, "input");
    if (!b.segments.empty()) {
        if (b.segments.size() != b.tokens.size())
            throw Error("batch: " + std::to_string(b.segments.size()) + " segment ids for " +
                        std::to_string(b.tokens.size()) + " tokens");
        for (int t : b.segments)
            if (t != 0 && t != 1) throw Error("segment ids must be 0 or 1, got " + std::to_string(t));
    }
    if (!b.targets.empty() && b.targets.size() != b.tokens.size())
        throw Error("batch: " + std::to_string(b.targets.size()) + " targets for " + std::to_string(b.tokens.size()) +
                    " tokens");
    if (!b.lengths.empty()) {
        if ((int)b.lengths.size() != b.B) throw Error("batch: " + std::to_string(b.lengths.size()) + " lengths for B = " + std::to_string(b.B));
        for (int len : b.lengths)
            if (len < 1 || len > b.n) throw Error("batch: a length of " + std::to_string(len) + " is outside 1..n = " + std::to_string(b.n));
    }
}

// Padded batches of a bidirectional model: sequence b's Mask^(l) with every key column j >=
// lengths[b] set to -inf (a key-padding mask), stacked into (B*n) x n, so no real token attends to
// the padding. (A causal mask needs none: padding comes after every real token.)
template <typename T>
Tensor<T> key_padding_mask(const Tensor<T>& Mask, const std::vector<int>& lengths) {
    require_matrix(Mask, "key_padding_mask", "Mask");
    const int n = Mask.cols(), B = (int)lengths.size();
    Tensor<T> M = Tensor<T>::uninit(B * n, n);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                M(b * n + i, j) = j < lengths[b] ? Mask(i, j) : -std::numeric_limits<T>::infinity();
    return M;
}

// Rows of X picked out (m x H), and back: a gradient dR of those rows into an R x H zero matrix.
template <typename T>
static Tensor<T> gather_rows(const Tensor<T>& X, const std::vector<int>& rows) {
    const int H = X.cols();
    Tensor<T> R = Tensor<T>::uninit((int)rows.size(), H);
    for (int r = 0; r < (int)rows.size(); r++) {
        if (rows[r] < 0 || rows[r] >= X.rows())
            throw Error("logit_rows: row " + std::to_string(rows[r]) + " is outside 0.." + std::to_string(X.rows() - 1));
        std::copy(X.row(rows[r]), X.row(rows[r]) + H, R.row(r));
    }
    return R;
}
template <typename T>
static Tensor<T> scatter_rows(const Tensor<T>& dR, const std::vector<int>& rows, int R) {
    Tensor<T> dX(R, dR.cols());
    for (int r = 0; r < (int)rows.size(); r++) {
        T* __restrict d = dX.row(rows[r]);
        const T* __restrict s = dR.row(r);
        for (int h = 0; h < dR.cols(); h++) d[h] += s[h];  // += : a row listed twice gets both gradients
    }
    return dX;
}

// ---- The released BERT's masked-LM head (Config::mlm_head; see transformer.hpp) -------------------
//   MLMHead(X) = LayerNorm(GELU(X W_t + Stack_n(b_t)); gamma_t, beta_t) W_e^T + Stack_n(b_z)   (n x H -> n x V)
// Its GELU: BERT's head applies the config's hidden_act (c.activation), as BertPredictionHeadTransform
// does; RoBERTa's the erf GELU whatever hidden_act says, as Hugging Face's RobertaLMHead does (it
// calls gelu, not hidden_act's function), so that a RoBERTa file with another hidden_act reads as
// its reference code reads it.
static Activation mlm_head_activation(const Config& c) {
    return c.variant == Variant::roberta ? Activation::gelu_erf : c.activation;
}
template <typename T>
Tensor<T> MLMHead(const Config& c, const Params<T>& p, const Tensor<T>& X, MLMHeadCache<T>* cache) {
    require_shape(X, {X.rows(), c.H}, "MLMHead", "X");
    MLMHeadCache<T> local;
    MLMHeadCache<T>& k = cache ? *cache : local;
    k.X = X;
    k.U = Linear(X, p.W_t, p.b_t);  // n x H
    Tensor<T> A = Tensor<T>::uninit(k.U.shape);
    activation_array(mlm_head_activation(c), k.U.ptr(), A.ptr(), A.size());
    k.X_t = LayerNorm(A, p.gamma_t, p.beta_t, c.eps, &k.ln);
    Tensor<T> Z = matmul_nt(k.X_t, p.W_e);  // n x V
    for (int i = 0; i < Z.rows(); i++) {
        T* __restrict z = Z.row(i);
        const T* __restrict b = p.b_z.ptr();
        for (int v = 0; v < c.V; v++) z[v] += b[v];
    }
    return Z;
}
// The chain rule through the four steps, from the logits back: the bias and the tied de-embedding
// (W_e gets its second gradient here), the LayerNorm, the GELU (element-wise), the dense layer.
template <typename T>
Tensor<T> MLMHead_backward(const Config& c, const Params<T>& p, const MLMHeadCache<T>& k, const Tensor<T>& dZ,
                           Params<T>& g) {
    require_shape(dZ, {k.X.rows(), c.V}, "MLMHead_backward", "dZ");
    colsum_acc(dZ, g.b_z);
    matmul_tn_acc(dZ, k.X_t, g.W_e);
    const Tensor<T> dX_t = matmul(dZ, p.W_e);
    Tensor<T> dU = LayerNorm_backward(p.gamma_t, k.ln, dX_t, g.gamma_t, g.beta_t);  // dA, then dU in place
    activation_derivative_array(mlm_head_activation(c), k.U.ptr(), dU.ptr(), dU.size());
    return Linear_backward(k.X, p.W_t, dU, g.W_t, &g.b_t);
}

// The five formula boxes in one pass (formula -> code):
//   Embedding   X^(0) = OneHot(x) W_e + W_p  [+ segments, BERT]     embed_forward
//   Layers      l = 1..L (code l-1): post-LN (GPT, BERT, RoBERTa) or pre-LN (GPT-2, GPT-3) block
//               with Mask^(l) = layer_mask
//   GPT-2/3     X^(L) = LayerNorm(X^(L))                               ln_f
//   De-embed    Z = X^(L) W_e^T, Y = Softmax(Z)                        (B*n) x V (m x V: logit_rows)
template <typename T>
Tensor<T> model_forward(const Config& c, const Params<T>& p, const Batch& batch, ForwardCache<T>* cache,
                        ForwardOptions opt) {
    check_batch(c, batch);
    if (opt.dropout > 0 && !opt.rng) throw Error("model_forward: dropout needs a random generator");
    ForwardCache<T> local;
    ForwardCache<T>& k = cache ? *cache : local;
    k.batch = batch;
    k.trace = opt.trace;
    Tensor<T> X = embed_forward(c, p, batch);
    if (c.emb_ln) {  // the released BERT's embedding LayerNorm
        trace_forward(opt.trace, Stage::embedding, 0, X);
        X = LayerNorm(X, p.gamma_e, p.beta_e, c.eps, &k.ln_e);
    }
    k.drop_emb = dropout_mask<T>(X.shape, opt.dropout, opt.rng);
    multiply_inplace(X, k.drop_emb);
    trace_forward(opt.trace, Stage::X, 0, X);
    k.masks.resize(c.L);
    const bool padded = !is_causal(c.variant) &&
                        std::any_of(batch.lengths.begin(), batch.lengths.end(), [&](int len) { return len < batch.n; });
    for (int l = 0; l < c.L; l++) {
        k.masks[l] = layer_mask<T>(c, l, batch.n);
        if (padded) k.masks[l] = key_padding_mask(k.masks[l], batch.lengths);
        trace_forward(opt.trace, Stage::mask, l + 1, k.masks[l]);
    }
    k.X_L = blocks_forward(c, p, std::move(X), k, opt);
    k.all_rows = !opt.logit_rows;
    k.logit_rows = opt.logit_rows ? *opt.logit_rows : std::vector<int>();
    k.X_L_rows = k.all_rows ? Tensor<T>() : gather_rows(k.X_L, k.logit_rows);  // m x H
    const Tensor<T>& X_L = k.all_rows ? k.X_L : k.X_L_rows;                     // (B*n) x H or m x H
    Tensor<T> Z = c.mlm_head ? MLMHead(c, p, X_L, &k.mlm)  // the released BERT's head, (B*n) x V (m x V)
                             : matmul_nt(X_L, p.W_e);       // Z = X^(L) W_e^T, (B*n) x V (m x V)
    trace_forward(opt.trace, Stage::logits, c.L, Z);
    return Z;
}

// Z = X^(L) W_e^T: dX^(L) = dZ W_e, dW_e += dZ^T X^(L) (W_e's second use; the first is the
// embedding, whose gradient embed_backward adds).
template <typename T>
void model_backward(const Config& c, const Params<T>& p, const ForwardCache<T>& k, const Tensor<T>& dZ, Params<T>& g,
                    const Tensor<T>* dX_L) {
    Tensor<T> dX;
    if (!dZ.empty()) {  // empty: no gradient through the logits (a fine-tuning head alone)
        const Tensor<T>& X_L = k.all_rows ? k.X_L : k.X_L_rows;  // the rows that were de-embedded
        require_shape(dZ, {X_L.rows(), c.V}, "model_backward", "dZ");
        if (c.mlm_head) {
            dX = MLMHead_backward(c, p, k.mlm, dZ, g);
        } else {
            matmul_tn_acc(dZ, X_L, g.W_e);
            dX = matmul(dZ, p.W_e);
        }
        if (!k.all_rows) dX = scatter_rows(dX, k.logit_rows, k.X_L.rows());  // the other rows' gradient is 0
    } else {
        dX = Tensor<T>(k.X_L.rows(), c.H);
    }
    if (dX_L) {
        require_same_shape(*dX_L, k.X_L, "model_backward", "dX_L", "X_L");
        add_inplace(dX, *dX_L);
    }
    dX = blocks_backward(c, p, k, std::move(dX), g);
    multiply_inplace(dX, k.drop_emb);
    if (c.emb_ln) {
        dX = LayerNorm_backward(p.gamma_e, k.ln_e, dX, g.gamma_e, g.beta_e);
        trace_backward(k.trace, Stage::embedding, 0, dX);
    }
    embed_backward(c, k.batch, dX, g);
}

// A masked LM's targets are a few rows: de-embed those only (rows without a target add nothing to
// the loss or the gradients). For BERT and RoBERTa (unless opt already names rows): the rows with a
// target and their targets, and opt.logit_rows pointing at rows; a GPT keeps every row.
static const std::vector<int>& target_rows(const Config& c, const Batch& batch, ForwardOptions& opt, std::vector<int>& rows,
                                           std::vector<int>& targets) {
    if (is_causal(c.variant) || opt.logit_rows) return batch.targets;
    for (int i = 0; i < (int)batch.targets.size(); i++)
        if (batch.targets[i] >= 0) {
            rows.push_back(i);
            targets.push_back(batch.targets[i]);
        }
    opt.logit_rows = &rows;
    return targets;
}

template <typename T>
double model_loss(const Config& c, const Params<T>& p, const Batch& batch, Params<T>* g, ForwardOptions opt,
                  ForwardCache<T>* kept) {
    if (batch.targets.empty()) throw Error("model_loss: the batch has no targets");
    std::vector<int> rows, gathered;
    const std::vector<int>& targets = target_rows(c, batch, opt, rows, gathered);  // the rows of Z below
    ForwardCache<T> local;
    ForwardCache<T>& cache = kept ? *kept : local;
    Tensor<T> Z = model_forward(c, p, batch, g || kept ? &cache : nullptr, opt);
    Tensor<T> dZ;
    const double loss = CrossEntropy_logits(Z, targets, g ? &dZ : nullptr);
    if (opt.trace) {
        Tensor<T> L = Tensor<T>::vector({(T)loss});
        opt.trace->forward(Stage::loss, c.L, L);
    }
    if (!g) return loss;
    trace_backward(opt.trace, Stage::logits, c.L, dZ);
    model_backward(c, p, cache, dZ, *g);
    return loss;
}

// One row of Softmax(Z): the formula's output distribution (V).
template <typename T>
static Tensor<T> output_row(const Config& c, const Params<T>& p, const Batch& b, int row) {
    Tensor<T> Z = model_forward(c, p, b);
    Tensor<T> y({c.V});
    softmax_row(Z.row(row), y.ptr(), c.V);
    return y;
}

template <typename T>
Tensor<T> GPT(const Config& c, const Params<T>& p, const std::vector<int>& x) {
    if (!is_causal(c.variant)) throw Error("GPT: the model is " + std::string(variant_name(c.variant)));
    Batch b;
    b.n = (int)x.size();
    b.tokens = x;
    return output_row(c, p, b, b.n - 1);  // formula row n = code row n-1
}

template <typename T>
Tensor<T> BERT(const Config& c, const Params<T>& p, const std::vector<int>& x, const std::vector<int>& t,
               int j_masked) {
    if (c.variant != Variant::bert) throw Error("BERT: the model is " + std::string(variant_name(c.variant)));
    if (j_masked < 0 || j_masked >= (int)x.size()) throw Error("BERT: j_masked outside the sequence");
    Batch b;
    b.n = (int)x.size();
    b.tokens = x;
    b.segments = t;
    return output_row(c, p, b, j_masked);
}

template <typename T>
Tensor<T> RoBERTa(const Config& c, const Params<T>& p, const std::vector<int>& x, int j_masked) {
    if (c.variant != Variant::roberta) throw Error("RoBERTa: the model is " + std::string(variant_name(c.variant)));
    if (j_masked < 0 || j_masked >= (int)x.size()) throw Error("RoBERTa: j_masked outside the sequence");
    Batch b;
    b.n = (int)x.size();
    b.tokens = x;
    return output_row(c, p, b, j_masked);
}

// ================================================================================================
// OBJECTIVES
// ================================================================================================

std::vector<int> next_token_targets(const std::vector<int>& x, int B, int n) {
    if ((long long)x.size() != (long long)B * n) throw Error("next_token_targets: size is not B x n");
    std::vector<int> t(x.size(), -1);
    for (int b = 0; b < B; b++)
        for (int i = 0; i + 1 < n; i++) t[b * n + i] = x[b * n + i + 1];
    return t;
}

// Masked-LM corruption (formulas §26): x (B*n ids, sequence b in x[b*n .. b*n+n-1]) -> the corrupted
// tokens x' and the targets (x_i at the chosen positions, -1 elsewhere). The random draws, in this
// order, are part of the function (a run with one seed is reproducible, and the tests rebuild the
// result draw by draw from a copy of rng): for each sequence, for each position in order that is
// not [CLS] or [SEP], one rng.uniform(), chosen when below p_select; a chosen position at once takes
// one more rng.uniform() u: [MASK] when u < 0.8, else rng.below(V) when u < 0.9, else kept. A
// sequence with nothing chosen then has candidate rng.below(#candidates) chosen, with its u drawn.
MLMExample mlm_corrupt(const std::vector<int>& x, int B, int n, const Config& c, Rng& rng, double p_select) {
    if ((long long)x.size() != (long long)B * n) throw Error("mlm_corrupt: size is not B x n");
    if (c.mask_id < 0) throw Error("mlm_corrupt: the config has no mask id");
    MLMExample e{x, std::vector<int>(x.size(), -1)};
    auto corrupt = [&](int i) {
        e.targets[i] = x[i];
        const double u = rng.uniform();
        if (u < 0.8) e.tokens[i] = c.mask_id;          // 80%: [MASK]
        else if (u < 0.9) e.tokens[i] = rng.below(c.V);  // 10%: a random token
        // else 10%: unchanged
    };
    for (int b = 0; b < B; b++) {
        std::vector<int> candidates;
        int chosen = 0;
        for (int i = b * n; i < (b + 1) * n; i++) {
            if (x[i] == c.cls_id || x[i] == c.sep_id) continue;
            candidates.push_back(i);
            if (rng.uniform() < p_select) {
                corrupt(i);
                chosen++;
            }
        }
        if (chosen == 0 && !candidates.empty()) corrupt(candidates[rng.below((int)candidates.size())]);
    }
    return e;
}

void bert_pair(const Config& c, const std::vector<int>& a, const std::vector<int>& b, std::vector<int>& x,
               std::vector<int>& t) {
    x.clear();
    t.clear();
    x.push_back(c.cls_id);
    x.insert(x.end(), a.begin(), a.end());
    x.push_back(c.sep_id);
    t.assign(x.size(), 0);  // formula: t_i = 0 for i <= n_A + 2
    x.insert(x.end(), b.begin(), b.end());
    x.push_back(c.sep_id);
    t.resize(x.size(), 1);
}

// ---- GPT-1 fine-tuning (formulas §28) ----------------------------------------------------------------
std::vector<int> gpt1_classify_input(const std::vector<int>& text, const GPT1Specials& s) {
    std::vector<int> x = {s.start};
    x.insert(x.end(), text.begin(), text.end());
    x.push_back(s.extract);
    return x;
}

std::vector<int> gpt1_entailment_input(const std::vector<int>& premise, const std::vector<int>& hypothesis,
                                       const GPT1Specials& s) {
    std::vector<int> x = {s.start};
    x.insert(x.end(), premise.begin(), premise.end());
    x.push_back(s.delim);
    x.insert(x.end(), hypothesis.begin(), hypothesis.end());
    x.push_back(s.extract);
    return x;
}

std::vector<std::vector<int>> gpt1_similarity_inputs(const std::vector<int>& a, const std::vector<int>& b,
                                                     const GPT1Specials& s) {
    return {gpt1_entailment_input(a, b, s), gpt1_entailment_input(b, a, s)};  // both orderings
}

std::vector<std::vector<int>> gpt1_multiple_choice_inputs(const std::vector<int>& context,
                                                          const std::vector<std::vector<int>>& answers,
                                                          const GPT1Specials& s) {
    std::vector<std::vector<int>> xs;
    for (const auto& a : answers) xs.push_back(gpt1_entailment_input(context, a, s));
    return xs;
}

Batch gpt1_batch(const std::vector<std::vector<int>>& sequences, int n, int pad, std::vector<int>& at) {
    Batch b;
    b.B = (int)sequences.size();
    b.n = n;
    at.clear();
    for (const auto& x : sequences) {
        if (x.empty() || (int)x.size() > n)
            throw Error("gpt1_batch: a sequence of " + std::to_string(x.size()) + " tokens does not fit n = " + std::to_string(n));
        const std::size_t first = b.tokens.size();
        b.tokens.insert(b.tokens.end(), x.begin(), x.end());
        b.tokens.resize(first + n, pad);
        b.targets.resize(first + n, -1);
        for (std::size_t i = 0; i + 1 < x.size(); i++) b.targets[first + i] = x[i + 1];  // x_{i+1} predicts x_{i+2}
        at.push_back((int)x.size() - 1);
    }
    return b;
}

// The head's rows h: row at[b] of sequence b in X^(L) ((B*n) x H) -> B x H.
template <typename T>
static Tensor<T> extract_rows(const Tensor<T>& X_L, int B, int n, const std::vector<int>& at) {
    if ((int)at.size() != B) throw Error("finetune: at has " + std::to_string(at.size()) + " rows for B = " + std::to_string(B));
    Tensor<T> h(B, X_L.cols());
    for (int b = 0; b < B; b++) {
        if (at[b] < 0 || at[b] >= n) throw Error("finetune: at[" + std::to_string(b) + "] is outside 0..n-1");
        std::copy(X_L.row(b * n + at[b]), X_L.row(b * n + at[b]) + X_L.cols(), h.row(b));
    }
    return h;
}

// The logits S of the E examples from h (B x H):
//   classify, similarity: F = the K rows of an example side by side (E x KH: [h_1, h_2] for
//     similarity, a row-major reshape), S = F W_y (E x C);
//   multiple choice: one score per sequence, s = h W_y (B x 1), S = s as E x K.
template <typename T>
static Tensor<T> head_logits(FinetuneTask task, int K, const Tensor<T>& h, const Tensor<T>& W_y) {
    const int B = h.rows(), H = h.cols();
    if (K < 1 || B % K != 0) throw Error("finetune: B = " + std::to_string(B) + " is not a multiple of K = " + std::to_string(K));
    const int E = B / K;
    Tensor<T> F = h;
    if (task == FinetuneTask::multiple_choice) {
        require_shape(W_y, {H, 1}, "finetune (multiple choice)", "W_y");
    } else {
        if (task == FinetuneTask::classify && K != 1) throw Error("finetune: classify takes K = 1 sequence per example");
        if (task == FinetuneTask::similarity && K != 2) throw Error("finetune: similarity takes K = 2 sequences per example");
        F.shape = {E, K * H};
        require_matrix(W_y, "finetune", "W_y");
        if (W_y.rows() != K * H) throw ShapeError("finetune: W_y is " + shape_str(W_y) + ", needs " + std::to_string(K * H) + " rows");
    }
    Tensor<T> S = matmul(F, W_y);
    if (task == FinetuneTask::multiple_choice) S.shape = {E, K};
    return S;
}

template <typename T>
Tensor<T> finetune_probs(const Config& c, const Params<T>& p, const Tensor<T>& W_y, FinetuneTask task, int K,
                         const Batch& batch, const std::vector<int>& at) {
    ForwardCache<T> cache;
    model_forward(c, p, batch, &cache);
    Tensor<T> S = head_logits(task, K, extract_rows(cache.X_L, batch.B, batch.n, at), W_y);
    for (int e = 0; e < S.rows(); e++) softmax_row(S.row(e), S.row(e), S.cols());
    return S;
}

// Backward: CrossEntropy_logits gives dS = (Softmax(S) - OneHot(y)) / E. Then
//   classify, similarity: dW_y += F^T dS, dF = dS W_y^T (E x KH), read back as dh (B x H);
//   multiple choice: ds = dS as B x 1, dW_y += h^T ds, dh = ds W_y^T;
// dh goes to row at[b] of dX^(L), and L1's dZ is scaled by lambda; model_backward takes both.
template <typename T>
FinetuneLoss finetune_loss(const Config& c, const Params<T>& p, const Tensor<T>& W_y, FinetuneTask task, int K,
                           const Batch& batch, const std::vector<int>& at, const std::vector<int>& labels,
                           double lambda, Params<T>* g, Tensor<T>* dW_y, ForwardOptions opt) {
    if ((g == nullptr) != (dW_y == nullptr)) throw Error("finetune: give both g and dW_y, or neither");
    if (!(lambda >= 0) || !std::isfinite(lambda)) throw Error("finetune: lambda must be a finite number >= 0");
    std::vector<int> rows, gathered;
    const std::vector<int>& targets = target_rows(c, batch, opt, rows, gathered);  // BERT: the masked rows only
    ForwardCache<T> cache;
    const Tensor<T> Z = model_forward(c, p, batch, &cache, opt);  // (B*n) x V (BERT: m x V)
    const Tensor<T> h = extract_rows(cache.X_L, batch.B, batch.n, at);
    const Tensor<T> S = head_logits(task, K, h, W_y);
    if ((int)labels.size() != S.rows()) throw Error("finetune: " + std::to_string(labels.size()) + " labels for " + std::to_string(S.rows()) + " examples");
    for (int y : labels)
        if (y < 0 || y >= S.cols()) throw Error("finetune: label " + std::to_string(y) + " outside 0.." + std::to_string(S.cols() - 1));
    FinetuneLoss r;
    Tensor<T> dS, dZ;
    r.L2 = CrossEntropy_logits(S, labels, g ? &dS : nullptr);
    const bool lm_targets = std::any_of(batch.targets.begin(), batch.targets.end(), [](int t) { return t >= 0; });
    if (lambda != 0 && !lm_targets)
        throw Error("finetune: lambda > 0 needs targets for L1 (next tokens from gpt1_batch, masked positions for BERT)");
    if (lm_targets) r.L1 = CrossEntropy_logits(Z, targets, g && lambda != 0 ? &dZ : nullptr);
    r.L3 = r.L2 + lambda * r.L1;
    if (!g) return r;
    for (T& v : dZ.data) v *= T(lambda);  // dZ stays empty when lambda = 0: model_backward skips it
    Tensor<T> dh;
    if (task == FinetuneTask::multiple_choice) {
        Tensor<T> ds = dS;
        ds.shape = {h.rows(), 1};
        matmul_tn_acc(h, ds, *dW_y);
        dh = matmul_nt(ds, W_y);
    } else {
        Tensor<T> F = h;
        F.shape = {S.rows(), W_y.rows()};
        matmul_tn_acc(F, dS, *dW_y);
        dh = matmul_nt(dS, W_y);
        dh.shape = h.shape;
    }
    Tensor<T> dX_L(cache.X_L.rows(), cache.X_L.cols());
    for (int b = 0; b < batch.B; b++)
        std::copy(dh.row(b), dh.row(b) + dh.cols(), dX_L.row(b * batch.n + at[b]));
    model_backward(c, p, cache, dZ, *g, &dX_L);
    return r;
}

// ---- XLNet: permutation objective, two-stream attention (see transformer.hpp) -------------------
std::vector<int> permutation_ranks(const std::vector<int>& z) {
    const int n = (int)z.size();
    std::vector<int> rank(n, -1);
    for (int t = 0; t < n; t++) {
        if (z[t] < 0 || z[t] >= n || rank[z[t]] >= 0) throw Error("xlnet: z is not a permutation of 0..n-1 (n = " + std::to_string(n) + ")");
        rank[z[t]] = t;
    }
    return rank;
}

template <typename T>
Tensor<T> Mask_XL(const std::vector<int>& z) {
    const std::vector<int> rank = permutation_ranks(z);
    const int n = (int)z.size();
    Tensor<T> M(2 * n, 2 * n, -std::numeric_limits<T>::infinity());
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (rank[j] <= rank[i]) M(i, j) = T(1);      // content i <- content j
            if (rank[j] < rank[i]) M(n + i, j) = T(1);   // query i <- content j
        }
    return M;
}

// The forward of both streams for B sequences: X^(0) ((B*2n) x H, sequence b in rows b*2n ..
// b*2n+2n-1, content first), the blocks with Mask^XL(z) in every layer; returns X^(L).
template <typename T>
Tensor<T> xlnet_forward(const Config& c, const Params<T>& p, const Tensor<T>& w, const std::vector<int>& tokens,
                        int B, const std::vector<int>& z, ForwardCache<T>& k) {
    if (has_segments(c.variant)) throw Error("xlnet: the bert variant's segment vectors have no place here; use another variant");
    const int n = (int)z.size();
    if (B < 1 || n < 1 || (long long)tokens.size() != (long long)B * n)
        throw Error("xlnet: " + std::to_string(tokens.size()) + " tokens for B = " + std::to_string(B) + " sequences of n = " + std::to_string(n));
    if (n > c.n_ctx) throw Error("xlnet: n = " + std::to_string(n) + " is longer than n_ctx = " + std::to_string(c.n_ctx));
    check_token_ids(tokens, c.V, "input");
    require_shape(w, {c.H}, "xlnet", "w");
    Batch batch;
    batch.B = B;
    batch.n = n;
    batch.tokens = tokens;
    const Tensor<T> content = embed_forward(c, p, batch);  // (B*n) x H: W_e[x_i] + W_p[i]
    const std::vector<int> pos = position_rows(c, tokens, n);  // W_p[i] but for RoBERTa's pads
    Tensor<T> X(B * 2 * n, c.H);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            std::copy(content.row(b * n + i), content.row(b * n + i) + c.H, X.row(b * 2 * n + i));
            T* q = X.row(b * 2 * n + n + i);
            const T* wp = position_vector(p, pos[b * n + i]);
            for (int j = 0; j < c.H; j++) q[j] = w[j] + wp[j];  // w + W_p[i]
        }
    k.masks.assign(c.L, Mask_XL<T>(z));
    return blocks_forward(c, p, std::move(X), k, ForwardOptions{});
}

// Backward: dZ -> dX^(L) = dZ W_e (W_e += dZ^T X^(L)), the blocks, then the embeddings: content
// rows into W_e (scatter) and W_p[i], query rows into w and W_p[i].
template <typename T>
double xlnet_loss(const Config& c, const Params<T>& p, const Tensor<T>& w, const std::vector<int>& tokens, int B,
                  const std::vector<int>& z, int predict, Params<T>* g, Tensor<T>* dw) {
    if ((g == nullptr) != (dw == nullptr)) throw Error("xlnet: give both g and dw, or neither");
    const int n = (int)z.size();
    if (predict < 1 || predict > n) throw Error("xlnet: predict must be in 1..n = " + std::to_string(n));
    ForwardCache<T> k;
    const Tensor<T> X_L = xlnet_forward(c, p, w, tokens, B, z, k);
    // Only the predicted query rows have targets: de-embed those, B * predict rows of the B * 2n.
    std::vector<int> rows, targets;
    for (int b = 0; b < B; b++)
        for (int t = n - predict; t < n; t++) {
            rows.push_back(b * 2 * n + n + z[t]);
            targets.push_back(tokens[b * n + z[t]]);
        }
    const Tensor<T> X_p = gather_rows(X_L, rows);  // (B*predict) x H
    const Tensor<T> Z = matmul_nt(X_p, p.W_e);     // (B*predict) x V
    Tensor<T> dZ;
    const double loss = CrossEntropy_logits(Z, targets, g ? &dZ : nullptr);
    if (!g) return loss;
    matmul_tn_acc(dZ, X_p, g->W_e);
    const Tensor<T> dX = blocks_backward(c, p, k, scatter_rows(matmul(dZ, p.W_e), rows, X_L.rows()), *g);
    Batch batch;
    batch.B = B;
    batch.n = n;
    batch.tokens = tokens;
    Tensor<T> d_content(B * n, c.H);
    const std::vector<int> pos = position_rows(c, tokens, n);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            std::copy(dX.row(b * 2 * n + i), dX.row(b * 2 * n + i) + c.H, d_content.row(b * n + i));
            const T* dq = dX.row(b * 2 * n + n + i);  // query row: into w and W_p[i]
            T* dwp = position_vector(*g, pos[b * n + i]);
            for (int j = 0; j < c.H; j++) {
                dwp[j] += dq[j];
                (*dw)[j] += dq[j];
            }
        }
    embed_backward(c, batch, d_content, *g);  // content rows: W_e (scatter) and W_p[i]
    return loss;
}

template <typename T>
Tensor<T> xlnet_query_probs(const Config& c, const Params<T>& p, const Tensor<T>& w, const std::vector<int>& tokens,
                            const std::vector<int>& z) {
    const int n = (int)z.size();
    ForwardCache<T> k;
    const Tensor<T> X_L = xlnet_forward(c, p, w, tokens, 1, z, k);
    Tensor<T> P(n, c.V);
    const Tensor<T> Z = matmul_nt(X_L, p.W_e);
    for (int i = 0; i < n; i++) softmax_row(Z.row(n + i), P.row(i), c.V);
    return P;
}

// ================================================================================================
// TRAINING: AdamW, the schedules, clipping, one training step, sampling
// ================================================================================================

// ---- AdamW -------------------------------------------------------------------------------------
bool decays(const std::string& name, const Tensor<float>& t) {
    return t.shape.size() == 2 && name != "w_A" && name != "w_B";
}

void adamw_init(const Config& c, AdamW& opt) {
    opt.m = make_params<float>(c);
    opt.v = make_params<float>(c);
    opt.t = 0;
}

void adamw_step(const Config& c, Params<float>& p, Params<float>& grad, AdamW& opt, double lr) {
    opt.t++;
    const float b1 = (float)opt.beta1;
    const float b2 = (float)opt.beta2;
    const float eps = (float)opt.eps;
    const float c1 = (float)(1.0 / (1.0 - math::pow_int(opt.beta1, opt.t)));  // bias corrections
    const float c2 = (float)(1.0 / (1.0 - math::pow_int(opt.beta2, opt.t)));
    const std::vector<Named<float>> P = named_tensors(c, p);
    const std::vector<Named<float>> G = named_tensors(c, grad);
    const std::vector<Named<float>> M = named_tensors(c, opt.m);
    const std::vector<Named<float>> V = named_tensors(c, opt.v);
    for (std::size_t k = 0; k < P.size(); k++) {
        const float lr_f = (float)lr;
        const float decay = decays(P[k].name, *P[k].tensor) ? (float)(lr * opt.weight_decay) : 0.f;
        float* __restrict theta = P[k].tensor->ptr();
        const float* __restrict g = G[k].tensor->ptr();
        float* __restrict m = M[k].tensor->ptr();
        float* __restrict v = V[k].tensor->ptr();
        const std::size_t n = P[k].tensor->size();
        for (std::size_t j = 0; j < n; j++) {
            m[j] = b1 * m[j] + (1 - b1) * g[j];
            v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
            const float mhat = m[j] * c1;
            const float vhat = v[j] * c2;
            theta[j] -= decay * theta[j];  // decoupled weight decay, as PyTorch's AdamW: before the Adam step
            theta[j] -= lr_f * mhat / (std::sqrt(vhat) + eps);
        }
    }
}

double lr_schedule(long long s, long long steps, long long warmup, double lr, double min_lr) {
    if (s < warmup) return lr * (double)(s + 1) / (double)warmup;
    const long long span = std::max(1LL, steps - 1 - warmup);
    const double ratio = std::min(1.0, (double)(s - warmup) / (double)span);
    return min_lr + 0.5 * (1.0 + math::cos_pi(ratio)) * (lr - min_lr);  // cos(pi ratio)
}

double lr_linear(long long s, long long steps, long long warmup, double lr, double min_lr) {
    if (s < warmup) return lr * (double)(s + 1) / (double)warmup;
    const long long span = std::max(1LL, steps - 1 - warmup);
    return lr - (lr - min_lr) * std::min(1.0, (double)(s - warmup) / (double)span);
}

double clip_grad_norm(const Config& c, Params<float>& g, double max_norm) {
    double sq = 0;
    auto G = named_tensors(c, g);
    for (auto& nt : G)
        for (float v : nt.tensor->data) sq += (double)v * v;
    const double norm = std::sqrt(sq);
    if (max_norm > 0 && norm > max_norm) {
        const float s = (float)(max_norm / norm);
        for (auto& nt : G)
            for (float& v : nt.tensor->data) v *= s;
    }
    return norm;
}

// One training step (formulas §29-§31): g = the mean over `accum` batches of each batch's
// gradient (loss_and_grad adds one batch's mean-loss gradient into g and returns that loss),
// clipped to global norm max_norm, then one AdamW update at rate lr. When the loss or the norm is
// not finite the parameters are left as they were (the caller stops the run).
StepResult train_step(const Config& c, Params<float>& p, Params<float>& g, AdamW& opt, double lr, double max_norm,
                      int accum, const std::function<double(Params<float>&)>& loss_and_grad) {
    zero_params(c, g);
    StepResult r;
    for (int a = 0; a < accum; a++) r.loss += loss_and_grad(g) / accum;
    if (accum > 1)
        for (auto& nt : named_tensors(c, g))
            for (float& v : nt.tensor->data) v *= 1.0f / (float)accum;
    if (!std::isfinite(r.loss)) return r;
    r.norm = clip_grad_norm(c, g, max_norm);
    if (!std::isfinite(r.norm)) return r;
    adamw_step(c, p, g, opt, lr);
    return r;
}

// ---- Sampling ------------------------------------------------------------------------------------
int sample_logits(const std::vector<float>& z, double temperature, int top_k, Rng& rng, double top_p) {
    if (z.empty()) throw Error("sample_logits: empty logits");
    const int V = (int)z.size();
    for (int j = 0; j < V; j++)
        if (!std::isfinite(z[j])) throw Error("the model's logits are not finite (token id " + std::to_string(j) + "): its numbers overflow");
    if (temperature <= 0) return (int)(std::max_element(z.begin(), z.end()) - z.begin());
    std::vector<int> order(V);
    for (int j = 0; j < V; j++) order[j] = j;
    int k = (top_k > 0 && top_k < V) ? top_k : V;
    if (k < V)  // the k largest first; with all V kept the order does not matter (no O(V log V) sort)
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });  // ties: lower id first
    float z_max = z[order[0]];
    for (int j = 1; j < k; j++) z_max = std::max(z_max, z[order[j]]);
    std::vector<double> w(k);
    double sum = 0;
    for (int j = 0; j < k; j++) sum += w[j] = math::exp((z[order[j]] - z_max) / temperature);
    if (top_p < 1) {  // the nucleus: the fewest most likely ids whose probabilities add up to top_p or more
        if (!(top_p > 0)) throw Error("sample_logits: top_p must be in (0, 1], got " + std::to_string(top_p));
        if (k == V)  // not sorted by partial_sort: sort now (ties: lower id first)
            std::sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
        for (int j = 0; j < k; j++) w[j] = math::exp((z[order[j]] - z_max) / temperature);
        double kept = 0;
        int m = 0;
        while (m < k && kept < top_p * sum) kept += w[m++];
        k = std::max(m, 1);
        sum = kept;
    }
    double u = rng.uniform() * sum;  // the first j whose cumulative weight passes u; the last if rounding leaves u beyond
    for (int j = 0; j + 1 < k; j++) {
        if (u < w[j]) return order[j];
        u -= w[j];
    }
    return order[k - 1];
}

// ---- Generation with a key/value cache (formulas §32) -------------------------------------------
template <typename T>
void kv_init(const Config& c, KVCache<T>& cache) {
    if (!is_causal(c.variant)) throw Error("kv_init: a " + std::string(variant_name(c.variant)) + " model is not causal");
    cache.t = 0;
    cache.layers.assign(c.L, KVLayer<T>());
    for (KVLayer<T>& layer : cache.layers)
        for (auto* KV : {&layer.K, &layer.V}) {
            KV->assign(c.A, Tensor<T>());
            for (Tensor<T>& M : *KV) {
                M.shape = {0, c.D};
                M.data.reserve((std::size_t)c.n_ctx * c.D);  // room for every row: appending never moves it
            }
        }
    cache.masks.resize(c.L);
    for (int l = 0; l < c.L; l++) cache.masks[l] = layer_mask<T>(c, l, c.n_ctx);
}

// M (r x D) gets the rows of R (m x D) after its own: [M; R].
template <typename T>
static void append_rows(Tensor<T>& M, const Tensor<T>& R) {
    M.data.insert(M.data.end(), R.data.begin(), R.data.end());
    M.shape[0] += R.rows();
}

// The formula box is MultiHeadSA's, with each head's keys and values those of every row so far.
// Every argument is checked before the cache grows, so an error leaves it as it was.
template <typename T>
Tensor<T> MultiHeadSA_cached(const Tensor<T>& X, const Tensor<T>& Mask, const MultiHeadSAParams<T>& p, KVLayer<T>& kv) {
    check_mhsa_params(X, p, "MultiHeadSA_cached");
    const int A = (int)p.W_Q.size();
    if ((int)kv.K.size() != A || (int)kv.V.size() != A)
        throw Error("MultiHeadSA_cached: the parameters have " + std::to_string(A) + " heads but the cache keys for " +
                    std::to_string(kv.K.size()) + " and values for " + std::to_string(kv.V.size()) + " (call kv_init with this model)");
    require_shape(Mask, {X.rows(), kv.K[0].rows() + X.rows()}, "MultiHeadSA_cached", "Mask");
    std::vector<Tensor<T>> head(A);
    for (int i = 0; i < A; i++) {
        append_rows(kv.K[i], Linear(X, p.W_K[i], head_bias(p.b_K, i)));  // [K_i; X W_i^K]: (t+m) x D
        append_rows(kv.V[i], Linear(X, p.W_V[i], head_bias(p.b_V, i)));
        head[i] = Attention(Linear(X, p.W_Q[i], head_bias(p.b_Q, i)), kv.K[i], kv.V[i], Mask);  // m x D
    }
    return Linear(Concat(head), p.W_O, p.b_O);
}

// The model for the single new row t (1 x H): the embedding of x at position t, the blocks of
// model_forward with each layer's mask row t (1 x (t+1)) and its cached keys and values, ln_f,
// and the de-embedding z = X^(L) W_e^T of that row.
template <typename T>
Tensor<T> model_step(const Config& c, const Params<T>& p, int x, KVCache<T>& kv) {
    const int t = kv.t;
    if ((int)kv.layers.size() != c.L) throw Error("model_step: call kv_init first");
    if (t >= c.n_ctx) throw Error("model_step: the cache is full (n_ctx = " + std::to_string(c.n_ctx) + " tokens)");
    Batch one;
    one.n = 1;
    one.tokens = {x};
    Tensor<T> X = embed_forward(c, p, one, t);  // 1 x H: OneHot(x) W_e + W_p[t]
    ForwardCache<T> scratch;                    // the blocks' caches and mask rows; no backward follows
    scratch.masks.resize(c.L);
    for (int l = 0; l < c.L; l++) {  // row t of layer l's mask, columns 0..t (-inf first: nothing uninitialised)
        scratch.masks[l] = Tensor<T>(1, t + 1, -std::numeric_limits<T>::infinity());
        std::copy(kv.masks[l].row(t), kv.masks[l].row(t) + t + 1, scratch.masks[l].ptr());
    }
    X = blocks_forward(c, p, std::move(X), scratch, ForwardOptions{}, &kv);
    kv.t++;
    Tensor<T> z = matmul_nt(X, p.W_e);  // 1 x V
    z.shape = {c.V};
    return z;
}

template <typename T>
std::vector<int> generate(const Config& c, const Params<T>& p, std::vector<int> x, int new_tokens, double temperature,
                          int top_k, Rng& rng, double top_p, const std::function<bool(const std::vector<int>&)>& stop) {
    if (!is_causal(c.variant)) throw Error("generate: a " + std::string(variant_name(c.variant)) + " model does not generate");
    if (x.empty()) throw Error("generate: the prompt is empty");
    check_token_ids(x, c.V, "prompt");
    KVCache<T> cache;
    std::vector<float> z;
    auto next_logits = [&]() {  // logits after the last token of x
        if ((int)x.size() <= c.n_ctx) {  // it fits: feed the tokens the cache has not seen
            if (cache.layers.empty()) kv_init(c, cache);
            Tensor<T> zt;
            while (cache.t < (int)x.size()) zt = model_step(c, p, x[cache.t], cache);
            z.assign(zt.data.begin(), zt.data.end());
        } else {  // the window slides: positions change, so the whole window is recomputed
            Batch b;
            b.tokens = std::vector<int>(x.end() - c.n_ctx, x.end());
            b.n = c.n_ctx;
            const Tensor<T> Z = model_forward(c, p, b);
            z.assign(Z.row(b.n - 1), Z.row(b.n - 1) + c.V);
        }
    };
    for (int s = 0; s < new_tokens; s++) {
        next_logits();
        x.push_back(sample_logits(z, temperature, top_k, rng, top_p));
        if (stop && stop(x)) break;
    }
    return x;
}

// The next token's distribution: z = row n of model_forward on the last n_ctx tokens of x (the
// logits generate draws from), P = Softmax(z) in double, the k most likely ids first.
template <typename T>
std::vector<TokenProb> next_token_probs(const Config& c, const Params<T>& p, const std::vector<int>& x, int k) {
    if (!is_causal(c.variant)) throw Error("next_token_probs: a " + std::string(variant_name(c.variant)) + " model does not predict the next token");
    if (x.empty()) throw Error("next_token_probs: the prompt is empty");
    if (k < 1) throw Error("next_token_probs: k must be positive, got " + std::to_string(k));
    check_token_ids(x, c.V, "prompt");
    Batch b;
    b.tokens = std::vector<int>(x.end() - std::min((int)x.size(), c.n_ctx), x.end());
    b.n = (int)b.tokens.size();
    const Tensor<T> Z = model_forward(c, p, b);
    const T* z = Z.row(b.n - 1);
    double m = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < c.V; j++) {
        if (!std::isfinite((double)z[j])) throw Error("the model's logits are not finite (token id " + std::to_string(j) + "): its numbers overflow");
        m = std::max(m, (double)z[j]);
    }
    std::vector<TokenProb> all(c.V);
    double sum = 0;
    for (int j = 0; j < c.V; j++) {
        all[j].p = math::exp((double)z[j] - m);
        all[j].id = j;
        sum += all[j].p;
    }
    for (TokenProb& t : all) t.p /= sum;
    const int kept = std::min(k, c.V);
    std::partial_sort(all.begin(), all.begin() + kept, all.end(),
                      [](const TokenProb& a, const TokenProb& b2) { return a.p > b2.p || (a.p == b2.p && a.id < b2.id); });
    all.resize(kept);
    return all;
}

// ################################################################################################
// PART II. THE MACHINERY
// The fast matrix product and its memory pool, files and checkpoints, Hugging Face import and
// export, the training drivers, tokenizers, the teaching tools; generated Unicode tables last.
// ################################################################################################
#if !defined(TF_PART_I_ALONE)

// ================================================================================================
// THE FAST MATRIX PRODUCT AND THE MEMORY POOL
// ================================================================================================

// Sums, maxima and dot products of n entries in 16 partial results, so that the compiler
// vectorises them without -ffast-math (defined below the packed product, which calls lane_dot).
template <typename S, typename T> static S lane_sum(const T* __restrict x, int n);
template <typename T> static T lane_max(const T* __restrict x, int n);
template <typename T> static T lane_dot(const T* __restrict x, const T* __restrict y, int n);

// ---- The pool behind Tensor's storage (see transformer.hpp) -----------------------------------
namespace {
struct Arena {  // one pool block carved into many (see ArenaScope)
    char* begin = nullptr;
    std::size_t size = 0, used = 0;
    long long live = 0;  // blocks handed out and not yet freed
    bool open = true;    // still handing out blocks (its ArenaScope is alive)
};
struct Pool {
    std::mutex lock;
    std::unordered_map<std::size_t, std::vector<void*>> free;  // size class -> blocks
    PoolStats stats;
    std::vector<Arena> arenas;  // a handful at most: one per live model, gradient or moment set
    int open_arena = -1;        // index into arenas, or -1
};
Pool& the_pool() {
    static Pool* pool = new Pool;  // never destroyed: static tensors may be freed after it
    return *pool;
}
// 256 bytes at least, then 4 classes per doubling (5/4, 6/4, 7/4, 8/4 of a power of 2), so a
// size that grows a little (one more token) mostly stays in its class; at most 25% is unused.
std::size_t size_class(std::size_t bytes) {
    std::size_t p = 256;
    if (bytes <= p) return p;
    while (p * 2 < bytes) p *= 2;
    const std::size_t step = p / 4;
    return (bytes + step - 1) / step * step;
}
constexpr std::align_val_t kBlockAlign{64};  // one cache line, a whole AVX-512 vector
// The guard: pool_guard_bytes after every block's last byte, 16 words of 4 bytes that are signalling
// NaNs: the even words 0x7F8000ss (a float NaN), the odd ones 0x7FF000ss (with the word before, a
// double NaN), the byte ss (never 0) from the block's address and the word. A loop that reads one
// element too far gets a NaN, which spoils every sum and product it enters (even a product with 0),
// and reads as an int id over 2.1e9; a loop that writes one too far changes the guard, even when it
// adds a number (arithmetic on a signalling NaN sets its quiet bit) or copies another block's guard
// (whose bytes ss differ). The guard is checked when the block is freed: the program stops there
// with a message instead of running on with memory that is not what it seems. This is how the
// tests see an off-by-one loop bound in an optimised build. (A comparison does not see a NaN: a
// maximum that reads one too far still needs the tests' index checks.)
uint32_t guard_word(const void* p, std::size_t k) {
    const uint64_t h = ((uint64_t)(std::uintptr_t)p + k) * 0x9E3779B97F4A7C15ull;
    return (k % 2 == 0 ? 0x7F800000u : 0x7FF00000u) | (uint32_t)(h >> 56) | 1u;
}
void write_guard(void* p, std::size_t bytes) {
    char* g = (char*)p + bytes;
    for (std::size_t k = 0; k < pool_guard_bytes / 4; k++) {
        const uint32_t w = guard_word(p, k);
        std::memcpy(g + 4 * k, &w, 4);
    }
}
void check_guard(const void* p, std::size_t bytes) noexcept {
    const char* g = (const char*)p + bytes;
    for (std::size_t k = 0; k < pool_guard_bytes / 4; k++) {
        uint32_t w;
        std::memcpy(&w, g + 4 * k, 4);
        if (w != guard_word(p, k)) {
            std::fprintf(stderr, "error: memory written past the end of a tensor of %zu bytes (within bytes %zu-%zu after its "
                         "end): a loop runs too far; stopping\n", bytes, 4 * k, 4 * k + 3);
            std::abort();
        }
    }
}
}  // namespace

void* pool_allocate(std::size_t bytes) {
    const std::size_t size = size_class(bytes + pool_guard_bytes);
    Pool& pool = the_pool();
    {
        std::lock_guard<std::mutex> g(pool.lock);
        if (pool.open_arena >= 0) {  // the next stretch of the open arena, if the block fits
            Arena& a = pool.arenas[pool.open_arena];
            const std::size_t need = (bytes + pool_guard_bytes + 63) / 64 * 64;
            if (need <= a.size - a.used) {
                void* p = a.begin + a.used;
                a.used += need;
                a.live++;
                write_guard(p, bytes);
                return p;
            }
        }
        auto it = pool.free.find(size);
        if (it != pool.free.end() && !it->second.empty()) {
            void* p = it->second.back();
            it->second.pop_back();
            pool.stats.cached_bytes -= size;
            pool.stats.reused++;
            write_guard(p, bytes);
            return p;
        }
        pool.stats.fresh++;
    }
    void* p = ::operator new(size, kBlockAlign);
    write_guard(p, bytes);
    return p;
}

// An arena whose stretches are all freed and which hands out no more is taken off the list; its
// block (returned, with its size, or nullptr) then goes back to the pool like any other block.
static std::pair<void*, std::size_t> retire_arena_if_done(Pool& pool, std::size_t k) {
    const Arena a = pool.arenas[k];
    if (a.open || a.live > 0) return {nullptr, 0};
    pool.arenas.erase(pool.arenas.begin() + (long)k);
    if (pool.open_arena > (int)k) pool.open_arena--;
    return {a.begin, a.size};
}

void pool_deallocate(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    check_guard(p, bytes);
    const std::size_t size = size_class(bytes + pool_guard_bytes);
    Pool& pool = the_pool();
    try {
        bool in_arena = false;
        std::pair<void*, std::size_t> retired{nullptr, 0};
        {
            std::lock_guard<std::mutex> g(pool.lock);
            for (std::size_t k = 0; k < pool.arenas.size() && !in_arena; k++) {
                Arena& a = pool.arenas[k];
                if ((char*)p >= a.begin && (char*)p < a.begin + a.size) {  // a stretch of an arena: not reused alone
                    in_arena = true;
                    a.live--;
                    retired = retire_arena_if_done(pool, k);
                }
            }
        }
        if (in_arena) {
            if (retired.first) pool_deallocate(retired.first, retired.second);
            return;
        }
        std::lock_guard<std::mutex> g(pool.lock);
        if (pool.stats.cached_bytes + size <= pool_limit) {
            pool.free[size].push_back(p);
            pool.stats.cached_bytes += size;
            return;
        }
    } catch (...) {  // no room for the list entry: give the block back instead
    }
    ::operator delete(p, kBlockAlign);
}

ArenaScope::ArenaScope(std::size_t bytes) {
    Pool& pool = the_pool();
    {
        std::lock_guard<std::mutex> g(pool.lock);
        if (!arenas_enabled || pool.open_arena >= 0 || bytes == 0) return;  // nested: the outer arena serves both
    }
    const std::size_t size = size_class(bytes);
    void* block = pool_allocate(size);  // a fresh or a cached block, like any other
    std::lock_guard<std::mutex> g(pool.lock);
    Arena a;
    a.begin = static_cast<char*>(block);
    a.size = size;
    pool.arenas.push_back(a);
    pool.open_arena = (int)pool.arenas.size() - 1;
    opened_ = true;
}

ArenaScope::~ArenaScope() {
    if (!opened_) return;
    Pool& pool = the_pool();
    std::pair<void*, std::size_t> retired;
    {
        std::lock_guard<std::mutex> g(pool.lock);
        const int k = pool.open_arena;
        pool.open_arena = -1;
        pool.arenas[k].open = false;
        retired = retire_arena_if_done(pool, (std::size_t)k);
    }
    if (retired.first) pool_deallocate(retired.first, retired.second);
}

PoolStats pool_stats() {
    Pool& pool = the_pool();
    std::lock_guard<std::mutex> g(pool.lock);
    return pool.stats;
}

void pool_trim() {
    Pool& pool = the_pool();
    std::lock_guard<std::mutex> g(pool.lock);
    for (auto& kv : pool.free)
        for (void* p : kv.second) ::operator delete(p, kBlockAlign);
    pool.free.clear();
    pool.stats.cached_bytes = 0;
}

// The fast kernel, blocked and packed (BLIS / Goto-style blocking).
// Loops, outermost first:
//
//   jc: columns of C, NC at a time
//     pc: the K dimension, KC at a time
//         pack B(pc.., jc..) (KC x NC) into micro-panels NR columns wide
//       ic: rows of C, MC at a time
//           pack A(ic.., pc..) (MC x KC) into micro-panels MR rows tall
//         jr: one B micro-panel (NR columns of C)
//           ir: one A micro-panel (MR rows of C)
//               micro-kernel: C(MR x NR) += Apanel(MR x KC) * Bpanel(KC x NR)
//
// * Micro-kernel. An MR x NR tile of C is accumulated in a local array `acc` that the compiler
//   keeps in vector registers: each step k loads NR/L vectors of B (L lanes per register),
//   broadcasts the MR values of A one at a time and does MR * NR/L vector FMAs. To keep the FMA
//   units busy the tile needs at least latency x FMA units (4 x 2 here) independent accumulators,
//   and accumulators + B vectors + broadcasts must fit in the register file, or the loop spills.
// * Tile per target, chosen from the compiler's predefined macros (registers of L floats):
//     AVX-512 (32 x 16):    6 x 64: 24 accumulators + 4 B + 1 broadcast = 29
//                          12 x 32 for N <= 32 (one head): 24 + 2 + 1, no zero-padded columns
//     AVX2 + FMA (16 x 8):  clang 6 x 16: 12 accumulators + 2 B + 1 broadcast = 15
//                          g++   4 x 24: 12 accumulators + 3 B + 1 broadcast = 16: 7 loads for
//                          12 FMAs (TF_KERNEL_SCHEDULE has g++ broadcast one row at a time;
//                          without it g++ loaded all MR broadcasts first and spilled). 3 x 24
//                          ran at 0.82-0.97 of OpenBLAS; 6 x 16 was level with 4 x 24 on the
//                          language-model head and a few percent slower on the weight shapes,
//                          so it is g++'s narrow tile: 32 columns (one head of the small
//                          models) take 2 of its micro-panels against 2 of 24 (48 columns)
//     ARM NEON (32 x 4):    6 x 16 and 12 x 8 as for AVX-512, with A read as vectors (fmla by
//                          element): 24 + 4 + 2 and 24 + 2 + 3 (not measured for speed)
//     other (16 x 4, SSE2): 4 x 8: 8 accumulators + 2 B + 4 broadcasts, multiply then add
//   double has half the lanes, so the same tiles in registers hold half the columns.
// * Packing copies B into exactly the order the micro-kernel reads it (sequential, unit stride),
//   whatever the original strides or transposes were; it costs O(KN) and each packed value is
//   reused about M/MR times. A is packed only when transposed (A^T B) with more than
//   kColumnPanels micro-panels of B, or for a last partial micro-panel: a row-major A is read in
//   place (MR rows of kc values, in L1 while the kernel runs over every micro-panel of B), and so
//   is a transposed A that feeds few micro-panels of B (MR adjacent values of each column). B
//   transposed with M < N and K > M/2 is done as C^T = B^T A^T, so the larger operand is read in
//   place and the smaller one packed.
// * Cache levels. The A block MC x KC (48 x 384 floats = 72 KiB) and the current B
//   micro-panel (at most 384 x 64 floats = 96 KiB) stay in L2 (1 MiB); the current A
//   micro-panel (MR x 384 floats, at most 18 KiB) is in L1. The packed B panel KC x NC
//   (384 x 4032 floats = 6 MiB) sits in L3 and is reused by all MC-blocks of rows. The sizes were
//   chosen by measurement: GFLOP/s are flat (within the noise, a few %) for KC in 192..512 and MC
//   in 48..144 on every target and compiler above, except g++ with AVX-512, 5-10% faster with
//   MC = 48 than 96.
// * Edges. The packing pads partial micro-panels with zeros (a partial A micro-panel is always
//   packed), so the micro-kernel always computes a full MR x NR tile; only its write-back to C is
//   clipped. Zeros do not change the result.
// * Rounding. Each C(i,j) is summed over k in increasing order within a KC chunk; the chunk sums
//   (and, with accumulate, the old C) are added to C one after another. With FMA hardware every
//   multiply-add is fused (std::fma), without it a product and a sum. So the result differs from
//   the reference loop only by rounding.
// * Two spellings of the micro-kernel's k step, because the two compilers vectorise it
//   differently. g++: both inner loops fully unrolled (#pragma GCC unroll), and the straight-line
//   code is vectorised into broadcasts + FMAs (std::fma, not `acc += a*b`: with the latter GCC 12
//   vectorises the k loop as reductions and shuffles every vector). clang: unrolled like that, its
//   SLP vectoriser mixes vector widths and spills (25-55 GFLOP/s); instead the j loop carries
//   `#pragma clang loop vectorize_width(L) interleave_count(NR/L)`, which turns it into NR/L
//   vector FMAs, and clang unrolls the i loop itself. Both are fragile: after changing the
//   micro-kernel, check the assembly (-S) of its k loop for MR * NR/L `vfmadd231ps` plus a few
//   loads and broadcasts, and no stack (%rsp) accesses.

namespace gemm_detail {

// What the target offers, from the compiler's predefined macros: bytes per vector register, and
// whether a fused multiply-add is one instruction (without it std::fma is a slow library call).
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;   // 32 zmm registers
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;   // 16 ymm registers (AVX2 + FMA on every CPU since 2013)
#else
constexpr int kVectorBytes = 16;   // NEON: 32 q registers; SSE2 and others: 16 xmm registers
#endif
#if defined(__FMA__) || defined(__aarch64__) || defined(__ARM_FEATURE_FMA) || (defined(_MSC_VER) && defined(__AVX2__))
template <typename T> inline T madd(T a, T b, T c) { return std::fma(a, b, c); }
#else
template <typename T> inline T madd(T a, T b, T c) { return a * b + c; }
#endif

// Block sizes per element type and target (see the comment above for the register budgets).
// MR x NR is the wide tile; for products whose N the narrow NR2 covers with at least a tenth
// fewer columns (one attention head, N = 32 with AVX2's NR = 24) the MR2 x NR2 tile wastes less
// work on zero padding (narrow_tile_pays).
template <typename T> struct Blocking {
    static constexpr int L = kVectorBytes / int(sizeof(T));   // lanes per vector register
#if defined(__AVX512F__) || defined(__ARM_NEON) || defined(__aarch64__)
    static constexpr int MR = 6, NR = 4 * L, MR2 = 12, NR2 = 2 * L;
#elif defined(__AVX__) && defined(__clang__)
    static constexpr int MR = 6, NR = 2 * L, MR2 = 6, NR2 = 2 * L;
#elif defined(__AVX__)
    static constexpr int MR = 4, NR = 3 * L, MR2 = 6, NR2 = 2 * L;
#else
    static constexpr int MR = 4, NR = 2 * L, MR2 = 4, NR2 = 2 * L;
#endif
    static constexpr int KC = sizeof(T) == 4 ? 384 : 256;   // depth of one packed panel
    static constexpr int MC = 48;                            // rows of packed A (a multiple of every MR)
    static constexpr int NC = 63 * 64 * 4 / int(sizeof(T));  // columns of packed B (a multiple of every NR)
};

// Columns of C that micro-panels w wide compute for n columns, the zero padding included.
constexpr long padded_columns(int n, int w) { return long(n + w - 1) / w * w; }
// Whether the narrow tile computes at least a tenth fewer columns of C than the wide one.
template <typename T> bool narrow_tile_pays(int N) {
    return padded_columns(N, Blocking<T>::NR2) * 10 <= padded_columns(N, Blocking<T>::NR) * 9;
}

// When to skip packing and use the simple i-k-j loop instead (measured):
//  * tiny products (below ~8x16x16), where packing overhead dominates;
//  * at most 3 rows of A with row-major B (e.g. one token at a time): each
//    B value is used <= 3 times, so packing B costs about as much as the
//    product; gemv_rows streams B's rows with vector FMAs instead.
//  * at most 3 rows of A with B given transposed (X W_e^T for one token): one dot product
//    (lane_dot) per column of B, reading B in its memory order.
constexpr long kSmallWork = 2048;
constexpr int kFewRows = 3;
// A column-major A (A^T X: a weight's gradient) is read in place, not packed, when B's block has
// at most this many micro-panels (see gemm_blocked).
constexpr int kColumnPanels = 2;

// Pack the kc x n block X(p, j) = X[p*rsK + j*csN] into micro-panels of W
// columns: panel q holds X(p, q*W + j) at dst[q*W*kc + p*W + j]. Columns
// past n are zero. Used for B (W = NR) and, on the transposed view, for A
// (W = MR; A(i,p) becomes X(p,i) with rsK = csA, csN = rsA).
template <typename T, int W>
void pack_panels(int kc, int n, const T* X, long rsK, long csN, T* __restrict dst)
{
    for (int j0 = 0; j0 < n; j0 += W) {
        const int w = std::min(W, n - j0);
        const T* x = X + j0 * csN;
        if (csN == 1 && w == W) {
            // The W values of one k are contiguous: copy row by row.
            for (int p = 0; p < kc; ++p) {
                TF_UNROLL(64)
                for (int j = 0; j < W; ++j) dst[p * W + j] = x[p * rsK + j];
            }
        } else {
            // Strided along the panel (typically contiguous along k, as for
            // B = W^T or a row-major A). Walk 8 values of k per column: one
            // short contiguous read, then 8 writes into a small L1-resident
            // window of dst. Measured ~1.5x faster than going row by row
            // (and faster than 16 values of k).
            // A whole panel (w == W) runs the j loop to the constant W. That loop is not unrolled:
            // fully unrolled (W x KB = 256 copies for double, 512 for float), g++ spent about 45 s
            // of a 100 s build on this function's clones, for no measured gain in `bench`.
            constexpr int KB = 8;
            int p0 = 0;
            if (w == W)
                for (; p0 + KB <= kc; p0 += KB) {
                    for (int j = 0; j < W; ++j) {
                        TF_UNROLL(8)
                        for (int p = p0; p < p0 + KB; ++p) dst[p * W + j] = x[p * rsK + j * csN];
                    }
                }
            for (; p0 + KB <= kc; p0 += KB) {
                for (int j = 0; j < w; ++j) {
                    TF_UNROLL(8)
                    for (int p = p0; p < p0 + KB; ++p) dst[p * W + j] = x[p * rsK + j * csN];
                }
                for (int j = w; j < W; ++j)
                    for (int p = p0; p < p0 + KB; ++p) dst[p * W + j] = T(0);
            }
            for (int p = p0; p < kc; ++p) {                 // k remainder
                for (int j = 0; j < w; ++j) dst[p * W + j] = x[p * rsK + j * csN];
                for (int j = w; j < W; ++j) dst[p * W + j] = T(0);
            }
        }
        dst += W * kc;
    }
}

// Micro-kernel: acc = Apanel * Bpanel over kc steps, where b[p*NR + j] = B(p,j) and
// A(i,p) = a[p*lda + i] (a packed micro-panel, lda = MR, or the columns of a column-major A read
// in place, lda its column stride) or, with DirectA, A(i,p) = a[i*lda + p]: the rows
// of a row-major A read in place (each A(i,p) is one broadcast either way, and MR rows of kc
// values stay in L1 while the kernel runs over every B micro-panel, so packing A buys nothing
// there; it costs a strided copy of A per product, as much as the product itself for one
// attention head's X W_i^Q). Then write the top-left mr x nr part of acc to C: C = acc
// (overwrite) or C += acc; with TransC, C is stored transposed (C(i, j) at C[j*ldc + i]).
template <typename T, int MR, int NR, bool DirectA, bool TransC>
TF_KERNEL_SCHEDULE void micro_kernel(int kc, const T* __restrict a, long lda, const T* __restrict b,
                  T* __restrict C, long ldc, int mr, int nr, bool overwrite)
{
    T acc[MR][NR] = {};
    for (int p = 0; p < kc; ++p) {
#if defined(__clang__)
        constexpr int L = Blocking<T>::L;
        for (int i = 0; i < MR; ++i) {
            const T ai = DirectA ? a[i * lda + p] : a[p * lda + i];
            TF_PRAGMA(clang loop vectorize_width(L) interleave_count(NR / L))
            for (int j = 0; j < NR; ++j) acc[i][j] = madd(ai, b[j], acc[i][j]);
        }
#else
        TF_UNROLL(64)
        for (int i = 0; i < MR; ++i) {
            const T ai = DirectA ? a[i * lda + p] : a[p * lda + i];   // hoisted: GCC's vectoriser needs this
            TF_UNROLL(64)
            for (int j = 0; j < NR; ++j) acc[i][j] = madd(ai, b[j], acc[i][j]);
        }
#endif
        b += NR;
    }

    // Write back. acc is first copied to a plain array with fully unrolled
    // loops: if acc itself were indexed by the runtime bounds mr, nr, GCC
    // would have to keep it in memory and the k loop above would spill.
    alignas(64) T tile[MR][NR];
    TF_UNROLL(64)
    for (int i = 0; i < MR; ++i) {
        TF_UNROLL(64)
        for (int j = 0; j < NR; ++j) tile[i][j] = acc[i][j];
    }
    if (TransC) {  // the tile of C^T: C(i, j) lives at C[j*ldc + i]
        for (int j = 0; j < nr; ++j) {
            T* c = C + j * ldc;
            if (overwrite)
                for (int i = 0; i < mr; ++i) c[i] = tile[i][j];
            else
                for (int i = 0; i < mr; ++i) c[i] += tile[i][j];
        }
        return;
    }
    if (nr == NR) {  // a full-width tile: constant-bound rows, stored by vector moves (not memcpy calls)
        for (int i = 0; i < mr; ++i) {
            T* __restrict c = C + i * ldc;
            if (overwrite) {
                TF_UNROLL(64)
                for (int j = 0; j < NR; ++j) c[j] = tile[i][j];
            } else {
                TF_UNROLL(64)
                for (int j = 0; j < NR; ++j) c[j] += tile[i][j];
            }
        }
        return;
    }
    for (int i = 0; i < mr; ++i) {       // only the part inside C (edge tiles)
        T* c = C + i * ldc;
        if (overwrite)
            for (int j = 0; j < nr; ++j) c[j] = tile[i][j];
        else
            for (int j = 0; j < nr; ++j) c[j] += tile[i][j];
    }
}

} // namespace gemm_detail

// ---------------------------------------------------------------------------
// Fast version.
// ---------------------------------------------------------------------------
// The blocked loops around the micro-kernel for one tile shape MR x NR. With TransC, C(i, j) is
// C[j*ldc + i] (gemm computes C^T = B^T A^T this way; see there).
template <typename T, int MR, int NR, bool TransC = false>
static void gemm_blocked(int M, int N, int K,
          const T* A, long rsA, long csA,
          const T* B, long rsB, long csB,
          T* C, long ldc, bool accumulate)
{
    using namespace gemm_detail;
    constexpr int MC = Blocking<T>::MC, KC = Blocking<T>::KC, NC = Blocking<T>::NC;
    static_assert(MC % MR == 0 && NC % NR == 0, "blocks must hold whole micro-panels");


    // Pack buffers: grown on demand, kept for the next call (per thread).
    static thread_local std::vector<T> bufA, bufB;
    const std::size_t needA = std::size_t(MC) * KC;
    const std::size_t needB = std::size_t(std::min(NC, (N + NR - 1) / NR * NR)) * KC;
    if (bufA.size() < needA) bufA.resize(needA);
    if (bufB.size() < needB) bufB.resize(needB);
    T* packA = bufA.data();
    T* packB = bufB.data();

    for (int jc = 0; jc < N; jc += NC) {
        const int nc = std::min(NC, N - jc);
        for (int pc = 0; pc < K; pc += KC) {
            const int kc = std::min(KC, K - pc);
            const bool overwrite = (pc == 0) && !accumulate;   // first K chunk sets C
            pack_panels<T, NR>(kc, nc, B + pc * rsB + jc * csB, rsB, csB, packB);

            for (int ic = 0; ic < M; ic += MC) {
                const int mc = std::min(MC, M - ic);
                // Row-major A (csA == 1) is read in place, and so is a column-major A (rsA == 1,
                // A^T X) when B's block has at most kColumnPanels micro-panels: each A micro-panel
                // then feeds that many kernel calls at most, and its packed copy saved less than it
                // cost (one head's X^T dQ_i, N = 64: 186 against 240 GFLOP/s with AVX-512). The
                // last, partial micro-panel is packed all the same (its missing rows must read as
                // zeros), and so is A otherwise.
                const bool direct = csA == 1;
                const bool columns = !direct && rsA == 1 && nc <= kColumnPanels * NR;
                const int packed_from = direct || columns ? mc / MR * MR : 0;
                pack_panels<T, MR>(kc, mc - packed_from, A + (ic + packed_from) * rsA + pc * csA, csA, rsA,
                                   packA + std::size_t(packed_from) * kc);

                for (int jr = 0; jr < nc; jr += NR) {
                    const T* b = packB + std::size_t(jr) * kc;   // B micro-panel jr/NR
                    for (int ir = 0; ir < mc; ir += MR) {
                        const long i = ic + ir, j = jc + jr;
                        T* c = TransC ? C + j * ldc + i : C + i * ldc + j;
                        const int mr = std::min(MR, mc - ir), nr = std::min(NR, nc - jr);
                        if (ir < packed_from && direct)
                            micro_kernel<T, MR, NR, true, TransC>(kc, A + i * rsA + pc, rsA, b, c, ldc, mr, nr, overwrite);
                        else if (ir < packed_from)   // A(i, p) at A[i + p*csA]: MR values of one p side by side
                            micro_kernel<T, MR, NR, false, TransC>(kc, A + i + pc * csA, csA, b, c, ldc, mr, nr, overwrite);
                        else   // A micro-panel ir/MR
                            micro_kernel<T, MR, NR, false, TransC>(kc, packA + std::size_t(ir) * kc, MR, b, c, ldc, mr, nr, overwrite);
                    }
                }
            }
        }
    }
}

// A few rows times a row-major B (generation: one token's x W for every weight matrix), C = A B.
// Such a product reads each value of B once: it is bound by memory bandwidth, not by the FMA
// units, and what slows the reference's k-j loop is that each row k of B reloads and stores the
// whole row of C (a store-to-load chain per element of C). Here:
//  * N == 64 (one head's W^Q, W^K, W^V in GPT-2): the 64 sums stay in registers for all of K
//    (4 registers of 16 floats with AVX-512, 8 of 8 with AVX2, 16 of 4 with NEON), added in the
//    reference's order k = 0, 1, ..., K-1 (bit for bit gemm_reference);
//  * otherwise 8 rows of B at a time: C(i, j) is loaded once, gets 8 multiply-adds and is stored
//    once. The 8 rows are k, k + S, ..., k + 7S with S = K/8 (then the last K - 8S rows one by
//    one), so B is read as 8 long sequential streams, one per eighth of B: the hardware
//    prefetchers keep up with those, where 8 adjacent rows (a jump every N values in each stream)
//    measured about 10% slower per token. Each C(i, j) is the reference's sum with its terms in
//    the order k = 0, S, ..., 7S, 1, S+1, ... (the tests check that order bit for bit).
template <typename T>
TF_STREAM_WIDTH static void gemv_rows(int M, int N, int K, const T* A, long rsA, long csA, const T* B, long rsB, T* C, long ldc,
                      bool accumulate) {
    constexpr int NB = 64, R = 8;
    for (int i = 0; i < M; i++) {
        const T* a = A + (long)i * rsA;
        T* __restrict c = C + (long)i * ldc;
        if (N == NB) {
            // Loops with constant bounds, fully unrolled (as in the micro-kernel): so g++ keeps
            // acc in registers; with a plain loop it kept acc on the stack with AVX-512, a store
            // and a reload per 16 sums and row of B.
            T acc[NB];
            TF_UNROLL(64)
            for (int j = 0; j < NB; j++) acc[j] = accumulate ? c[j] : T(0);
            for (int k = 0; k < K; k++) {
                const T x = a[(long)k * csA];
                const T* __restrict b = B + (long)k * rsB;
                TF_UNROLL(64)
                for (int j = 0; j < NB; j++) acc[j] += x * b[j];
            }
            TF_UNROLL(64)
            for (int j = 0; j < NB; j++) c[j] = acc[j];
            continue;
        }
        if (!accumulate)
            for (int j = 0; j < N; j++) c[j] = T(0);
        const int S = K / R;  // rows per stream
        for (int k = 0; k < S; k++) {
            T x[R];
            const T* b[R];
            for (int r = 0; r < R; r++) {
                x[r] = a[(long)(r * S + k) * csA];
                b[r] = B + (long)(r * S + k) * rsB;
            }
            const T *__restrict b0 = b[0], *__restrict b1 = b[1], *__restrict b2 = b[2], *__restrict b3 = b[3];
            const T *__restrict b4 = b[4], *__restrict b5 = b[5], *__restrict b6 = b[6], *__restrict b7 = b[7];
            TF_IVDEP
            for (int j = 0; j < N; j++) {
                T s = c[j];
                s += x[0] * b0[j];
                s += x[1] * b1[j];
                s += x[2] * b2[j];
                s += x[3] * b3[j];
                s += x[4] * b4[j];
                s += x[5] * b5[j];
                s += x[6] * b6[j];
                s += x[7] * b7[j];
                c[j] = s;
            }
        }
        for (int k = R * S; k < K; k++) {
            const T x = a[(long)k * csA];
            const T* __restrict b = B + (long)k * rsB;
            TF_IVDEP
            for (int j = 0; j < N; j++) c[j] += x * b[j];
        }
    }
}

template <typename T>
void gemm(int M, int N, int K, const T* A, long rsA, long csA, const T* B, long rsB, long csB, T* C, long ldc,
          bool accumulate) {
    using namespace gemm_detail;
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || long(M) * N * K < kSmallWork)
        gemm_reference(M, N, K, A, rsA, csA, B, rsB, csB, C, ldc, accumulate);
    else if (M <= kFewRows && csB == 1)
        gemv_rows(M, N, K, A, rsA, csA, B, rsB, C, ldc, accumulate);
    else if (M <= kFewRows && rsB == 1 && csA == 1)
        for (int j = 0; j < N; j++)  // column j of B is contiguous: B[j*csB .. j*csB + K)
            for (int i = 0; i < M; i++) {
                const T dot = lane_dot(A + (long)i * rsA, B + (long)j * csB, K);
                C[(long)i * ldc + j] = accumulate ? C[(long)i * ldc + j] + dot : dot;
            }
    else if (csA == 1 && rsB == 1 && csB != 1 && M < N && 2 * K > M)
        // B given transposed (X W_e^T, dY W^T) and fewer rows than columns: packing B would mean a
        // strided copy of all of it (a sixth of the time for X W_e^T). C^T = B^T A^T reads B's rows
        // in place as the A of the micro-kernel and packs the smaller A instead; the tiles are
        // written back transposed, one scalar per entry of C and chunk of K. Each C(i, j) is the
        // same sum in the same order. With K at most M / 2 (one head's dQ_i W_i^Q^T: K = 64, M = 256)
        // those scattered stores cost more than the strided copy of B (K N values) they save
        // (measured: 180 against 238 GFLOP/s at K = 64, 217 against 243 at K = 128, and the
        // transposed product ahead from K = 256 on).
        gemm_blocked<T, Blocking<T>::MR, Blocking<T>::NR, true>(N, M, K, B, csB, 1, A, 1, rsA, C, ldc, accumulate);
    else if (narrow_tile_pays<T>(N))
        gemm_blocked<T, Blocking<T>::MR2, Blocking<T>::NR2>(M, N, K, A, rsA, csA, B, rsB, csB, C, ldc, accumulate);
    else
        gemm_blocked<T, Blocking<T>::MR, Blocking<T>::NR>(M, N, K, A, rsA, csA, B, rsB, csB, C, ldc, accumulate);
}

// The register-only FMA peak of one core at the build's vector width, in GFLOP/s (2 per
// multiply-add): acc = acc * x + y on a K x L array spelled like the micro-kernel's acc (and with
// its pragmas), i.e. 6 x 4 (AVX-512) or 6 x 2 vector registers of independent chains, enough to
// cover the FMA latency on every FMA unit. The best of repeated 20 ms runs over about 0.2 s.
double fma_peak_gflops() {
    using namespace gemm_detail;
    constexpr int V = Blocking<float>::L, K = 6, L = kVectorBytes == 64 ? 4 * V : 2 * V;
    float acc[K][L];
    for (int k = 0; k < K; ++k)
        for (int j = 0; j < L; ++j) acc[k][j] = 1.0f + 0.001f * float(k * L + j);
    const float x = 0.9999f, y = 1e-4f;   // acc -> y / (1 - x) = 1: no overflow, no denormals
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    double best = 0;
    long steps = 1 << 14;
    for (;;) {
        const auto t = Clock::now();
        for (long s = 0; s < steps; ++s) {
#if defined(__clang__)
            for (int k = 0; k < K; ++k) {
                TF_PRAGMA(clang loop vectorize_width(V) interleave_count(L / V))
                for (int j = 0; j < L; ++j) acc[k][j] = madd(acc[k][j], x, y);
            }
#else
            TF_UNROLL(64)
            for (int k = 0; k < K; ++k) {
                TF_UNROLL(64)
                for (int j = 0; j < L; ++j) acc[k][j] = madd(acc[k][j], x, y);
            }
#endif
        }
        const double sec = std::chrono::duration<double>(Clock::now() - t).count();
        if (sec < 0.02) {
            steps *= 2;
            continue;
        }
        best = std::max(best, 2.0 * K * L * steps / sec * 1e-9);
        if (std::chrono::duration<double>(Clock::now() - start).count() > 0.2) break;
    }
    float sum = 0;   // the result is used (every acc stays near 1), so the loop is not optimised away
    for (int k = 0; k < K; ++k)
        for (int j = 0; j < L; ++j) sum += acc[k][j];
    return sum > 0 ? best : 0;
}

// Whether this file was compiled to fuse a product into the sum that follows it (g++ without
// -ffp-contract=off on a target with FMA). 1 + 2^-12 squared is 1 + 2^-11 + 2^-24, which a float
// rounds to 1 + 2^-11; subtracting that leaves 0 with two roundings and 2^-24 with one.
bool products_fused_by_compiler() {
    volatile float a = 1.0f + 0x1p-12f, c = -(1.0f + 0x1p-11f);  // volatile: not folded at compile time
    const float x = a;
    const float r = x * x + c;
    return r != 0.0f;
}

// Streaming read speed of one core: sum a buffer (written first, so its pages exist) with lane_sum;
// the best of 5 passes, in GB/s. The buffer holds 4x the model's weights, at least 32 MiB and at
// most 256 MiB: the yardstick of a token, which reads each weight once, from where a model of that
// size lives (GPT-2 124M's 498 MB: memory; a tiny model's few KB: the caches), in a fraction of a
// second.
// One pass of the streaming read over buf, in GB/s.
double read_pass_gbps(const std::vector<float>& buf) {
    using Clock = std::chrono::steady_clock;
    const auto t = Clock::now();
    const float sum = lane_sum<float>(buf.data(), (int)buf.size());
    const double sec = std::chrono::duration<double>(Clock::now() - t).count();
    return sum > 0 ? (double)buf.size() * sizeof(float) / sec * 1e-9 : 0;  // the sum is used: not optimised away
}
std::vector<float> read_buffer(double weight_bytes) {
    const double bytes = std::min(std::max(4 * weight_bytes, double(32 << 20)), double(256 << 20));
    return std::vector<float>((std::size_t)(bytes / sizeof(float)), 1.0f);
}

double mem_read_gbps(double weight_bytes) {
    const std::vector<float> buf = read_buffer(weight_bytes);
    double best = 0;
    for (int pass = 0; pass < 5; pass++) best = std::max(best, read_pass_gbps(buf));
    return best;
}

// Every tensor of p in one arena (ArenaScope), zeros, in named_tensors' order: make_params' memory.
// Bytes for an arena that holds every tensor of p (each with its guard, rounded up to 64 bytes), plus 1 MiB for
// the few temporaries the loaders make while it is open.
template <typename T>
std::size_t arena_bytes(const Config& c, Params<T>& p) {
    std::size_t bytes = std::size_t(1) << 20;
    for (auto& nt : named_tensors(c, p)) {
        std::size_t n = 1;
        for (int d : nt.tensor->shape) n *= (std::size_t)d;
        bytes += (n * sizeof(T) + pool_guard_bytes + 63) / 64 * 64;
    }
    return bytes;
}
template <typename T>
void allocate_params(const Config& c, Params<T>& p) {
    ArenaScope arena(arena_bytes(c, p));
    for (auto& nt : named_tensors(c, p)) *nt.tensor = Tensor<T>(nt.tensor->shape);
}

// ---- The vectorisable reductions (lane_sum, lane_max, lane_dot) -----------------------------------
// sum_j x_j in 16 partial sums (entry j goes to sum j mod 16), added up at the end: a loop the
// compiler vectorises without -ffast-math (one running sum is a chain it may not reorder).
// S: the type the sums are kept in.
template <typename S, typename T>
static S lane_sum(const T* __restrict x, int n) {
    constexpr int W = 16;
    std::array<S, W> part{};
    int j = 0;
    for (; j + W <= n; j += W)
        for (int l = 0; l < W; l++) part[l] += (S)x[j + l];
    S s = 0;
    for (int l = 0; l < W; l++) s += part[l];
    for (; j < n; j++) s += (S)x[j];
    return s;
}
// max_j x_j (-inf for n = 0) the same way; NaN entries are skipped, as std::max(m, x) does.
template <typename T>
static T lane_max(const T* __restrict x, int n) {
    constexpr int W = 16;
    std::array<T, W> part;
    for (int l = 0; l < W; l++) part[l] = -std::numeric_limits<T>::infinity();
    int j = 0;
    for (; j + W <= n; j += W)
        for (int l = 0; l < W; l++) part[l] = x[j + l] > part[l] ? x[j + l] : part[l];
    T m = -std::numeric_limits<T>::infinity();
    for (int l = 0; l < W; l++) m = part[l] > m ? part[l] : m;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}
// sum_j x_j y_j the same way.
template <typename T>
static T lane_dot(const T* __restrict x, const T* __restrict y, int n) {
    constexpr int W = 16;
    std::array<T, W> part{};
    int j = 0;
    for (; j + W <= n; j += W)
        for (int l = 0; l < W; l++) part[l] += x[j + l] * y[j + l];
    T s = 0;
    for (int l = 0; l < W; l++) s += part[l];
    for (; j < n; j++) s += x[j] * y[j];
    return s;
}

// ---- The row kernels of Part I, vectorised: exp, softmax, the activations ------------------------
// std::exp is a library call, so a loop that calls it runs one number at a time. vexp is plain
// arithmetic that the loop vectoriser turns into vector instructions (checked with
// -fopt-info-vec / -Rpass=loop-vectorize, g++ and clang++, AVX-512 and AVX2):
//   exp(x) = 2^k exp(r),  k = round(x / ln 2),  r = x - k ln 2 in [-ln2/2, ln2/2]
// (ln 2 in two parts, so k ln 2 is exact to the last bit of r), exp(r) by its Taylor series to
// degree 7 (float) or 13 (double), 2^k from its exponent bits (in two halves, so that every
// factor is a normal number). Accuracy, measured against long double std::exp over the whole range:
// relative error below 1.01e-7 for float (1.19 ulp), 1.76e-16 for double (1.16 ulp).
// Results below the smallest normal number are 0 (float: x < -87.3; std::exp gives < 1.2e-38
// there), above the largest finite one inf; exp(-inf) = 0 exactly and NaN stays NaN.
template <typename T> struct ExpParts;
template <typename T, int N>
struct InvFactorials {  // c[d] = 1/d! for d = 0..N, computed in double, then rounded to T once
    T c[N + 1];
};
template <typename T, int N>
constexpr InvFactorials<T, N> inv_factorials() {
    InvFactorials<T, N> r{};
    double f = 1;
    for (int d = 0; d <= N; d++) {
        if (d > 1) f *= d;
        r.c[d] = T(1.0 / f);
    }
    return r;
}
template <> struct ExpParts<float> {
    using Int = int32_t;
    static constexpr int mantissa = 23, bias = 127, degree = 7;
    static constexpr float lo = -87.3f, hi = 88.72f, round = 12582912.0f;  // round: 1.5 * 2^23
    static constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
};
template <> struct ExpParts<double> {
    using Int = int64_t;
    static constexpr int mantissa = 52, bias = 1023, degree = 13;
    static constexpr double lo = -708.0, hi = 709.78, round = 6755399441055744.0;  // 1.5 * 2^52
    static constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
};
template <typename T>
static inline T pow2i(typename ExpParts<T>::Int k) {  // 2^k for a k inside the normal exponents
    const typename ExpParts<T>::Int bits = (k + ExpParts<T>::bias) << ExpParts<T>::mantissa;
    T s;
    std::memcpy(&s, &bits, sizeof s);
    return s;
}
template <typename T>
inline T vexp(T x) {
    using C = ExpParts<T>;
    T xc = x > C::lo ? x : C::lo;  // also NaN -> lo; NaN is put back at the end
    xc = xc < C::hi ? xc : C::hi;
    const T k = (xc * T(1.4426950408889634) + C::round) - C::round;  // round(x / ln 2), no library call
    const T r = (xc - k * C::ln2_hi) - k * C::ln2_lo;
    // p = sum_{d=0..degree} r^d / d! by Horner's rule with the constants 1/d! (a multiply-add per
    // degree; dividing by d at each step instead costs a slow vector division per degree).
    static constexpr InvFactorials<T, C::degree> c = inv_factorials<T, C::degree>();
    T p = c.c[C::degree];
    TF_UNROLL(16)
    for (int d = C::degree - 1; d >= 0; --d) p = c.c[d] + r * p;
    const typename C::Int ki = (typename C::Int)k, k1 = ki / 2;
    T y = p * pow2i<T>(k1) * pow2i<T>(ki - k1);
    y = x < C::lo ? T(0) : y;
    y = x > C::hi ? std::numeric_limits<T>::infinity() : y;
    return x != x ? x : y;
}

// ---- The C library's functions, the program's own: exp, log, erf, cos(pi t), b^n ------------------
// The C libraries (glibc, macOS's, musl) round log, erf, cos, pow differently in the last bit of a
// few results, and a training run carries such a bit on through every later step. These are plain
// IEEE operations (+ - * /, exact splits of a number's bits) in an order the source fixes, so every
// platform computes the same bits (docs/performance.md, "The same numbers on every machine").
// float's log and erf are computed in double and rounded once (erf: verf above). The polynomials' coefficients are
// the Taylor series' (exact rationals of pi and sqrt(pi)) or, for erf's tail, Chebyshev fits,
// rounded from 60-digit arithmetic (mpmath's chebyfit on [a, b] in u = (x - c) / h, rewritten in
// powers of x - c). The tests measure each against the C library's long double function.
// erf as plain arithmetic that vectorises, for gelu_erf's loops (as vexp is for exp). float: in
// double, erf(x) = x sum_n (-1)^n 2 / (sqrt(pi) n! (2n + 1)) x^2n to x^22 for |x| < 1 (an error
// under 1e-10), and 1 - erfc(x) with erfc by a polynomial in |x| - 2.5 on [1, 4] (a Chebyshev fit
// of degree 17, error under 1.4e-10; float's erf is +-1 from |x| = 3.92), rounded to float once.
// Both forms are computed and one is kept: no branch, no table lookup, no exp (vexp<double> needs a
// conversion to 64-bit integers that AVX2 lacks). double: math::erf (the gradient checks' precision;
// no loop of doubles needs the speed).
static constexpr double erf_taylor_float[12] = {
    1.1283791670955126,     -0.37612638903183754,  0.11283791670955126,    -0.026866170645131252,
    0.005223977625442188,   -0.0008548327023450853, 0.00012055332981789664, -1.492565035840625e-05,
    1.6462114365889248e-06, -1.6365844691234924e-07, 1.4807192815879218e-08, -1.2290555301717928e-09};
static constexpr double erfc_1_to_4[18] = {
    0.00040695214860950527, -0.002178284230102943,  0.005445701119222516,   -0.008350089564336456,
    0.008622487928327666,   -0.006117348240709793,  0.002797968482814732,   -0.0005424081646991613,
    -0.00025945266908571307, 0.0002502743287885237, -8.041534432093938e-05, -5.108798022442378e-06,
    1.5359386286426237e-05, -4.730107063912276e-06, -7.9170270535196e-07,   6.732363791577049e-07,
    -1.0937593684177202e-08, -3.3670660638149515e-08};  // erfc(x) = sum_d c[d] (x - 2.5)^d on [1, 4]
static TF_ALWAYS_INLINE float verf(float x_float) {
    const double x = x_float;
    const double a_exact = x < 0 ? -x : x;
    const double a = a_exact < 4.0 ? a_exact : 4.0;  // NaN too: its NaN is put back at the end
    const double z = a * a;                           // exact: a has float's 24 bits
    double p = erf_taylor_float[11];
    TF_UNROLL(16)
    for (int n = 10; n >= 0; n--) p = erf_taylor_float[n] + z * p;
    const double s = a - 2.5;
    double q = erfc_1_to_4[17];
    TF_UNROLL(32)
    for (int d = 16; d >= 0; d--) q = erfc_1_to_4[d] + s * q;
    const double y = a_exact < 1.0 ? a * p : 1.0 - q;
    const float r = (float)(x < 0 ? -y : y);
    return x_float != x_float ? x_float : r;
}
namespace math {
double erf(double x);
}
static inline double verf(double x) { return math::erf(x); }

namespace math {
float exp(float x) { return vexp(x); }
double exp(double x) { return vexp(x); }

// a * b = p + e exactly (Dekker): p the rounded product, e its error, from a and b split into two
// 26-bit halves each (exact while a * b stays inside the normal range).
static void two_product(double a, double b, double& p, double& e) {
    p = a * b;
    const double sa = 134217729.0 * a, sb = 134217729.0 * b;  // 2^27 + 1
    const double a1 = sa - (sa - a), a2 = a - a1, b1 = sb - (sb - b), b2 = b - b1;
    e = ((a1 * b1 - p) + a1 * b2 + a2 * b1) + a2 * b2;
}

// x = 2^k m, m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f). Then
//   log(1 + f) = 2 atanh(s) = 2s + 2s^3/3 + 2s^5/5 + ... = f - s (f - R),  R = 2s^2/3 + 2s^4/5 + ...
// using 2s = f - s f; |s| <= 0.1716, so R to s^20 leaves a relative error under 1e-18. k ln 2 is
// ln2_hi k (exact: ln2_hi has 32 significant bits) + ln2_lo k.
double log(double x) {
    if (x != x) return x;
    if (x <= 0) return x == 0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    if (x == std::numeric_limits<double>::infinity()) return x;
    int k = 0;
    if (x < std::numeric_limits<double>::min()) {  // subnormal: scale by 2^54 (exact)
        x *= 18014398509481984.0;
        k = -54;
    }
    uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    k += (int)(bits >> 52) - 1023;
    bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
    double m;
    std::memcpy(&m, &bits, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        k++;
    }
    const double f = m - 1.0;
    const double s = f / (2.0 + f);
    const double z = s * s;
    double R = 2.0 / 21;
    for (int d = 19; d >= 3; d -= 2) R = 2.0 / d + z * R;  // 2/19, 2/17, ..., 2/3
    R *= z;
    const double kd = k;
    return kd * ExpParts<double>::ln2_hi + (f - (s * (f - R) - kd * ExpParts<double>::ln2_lo));
}
float log(float x) { return (float)math::log((double)x); }

// erf(x) = x sum_n (-1)^n 2 / (sqrt(pi) n! (2n + 1)) x^2n for |x| < 1; above, erf(x) = 1 - erfc(x)
// with erfc(x) = exp(-x^2) erfcx(x): erfcx (the scaled complementary function, smooth and slowly
// varying) by a polynomial in x - c on [1, 2), [2, 3), [3, 4), [4, 6), and x^2 = hi + lo exactly (x
// split into two 26-bit halves), exp(-x^2) = exp(-hi) (1 - lo). erf(x) rounds to 1 from x = 5.93.
static constexpr double erf_taylor[19] = {
    1.1283791670955126,     -0.37612638903183754,   0.11283791670955126,    -0.026866170645131252,
    0.005223977625442188,   -0.0008548327023450853, 0.00012055332981789664, -1.492565035840625e-05,
    1.6462114365889248e-06, -1.6365844691234924e-07, 1.4807192815879218e-08, -1.2290555301717928e-09,
    9.422759064650411e-11,  -6.7113668551641105e-12, 4.4632242632864775e-13, -2.7835162072109215e-14,
    1.6342614095367152e-15, -9.063970842808673e-17, 4.763348040515068e-18};
struct ErfcxPiece {
    double center;
    int degree;
    double c[16];  // erfcx(x) = sum_d c[d] (x - center)^d
};
static const ErfcxPiece erfcx_pieces[4] = {
    {1.5, 15, {0.3215854164543175, -0.16362291773256007, 0.07615103985548055, -0.03293090529956347,
               0.013377340952802835, -0.005145957547915988, 0.0018861348854630824, -0.0006619300686179933,
               0.00022330981211640024, -7.265888759557882e-05, 2.286543658874603e-05, -6.975285854904505e-06,
               2.061689065129881e-06, -5.946998373950516e-07, 1.8038197652346406e-07, -4.932844202000261e-08}},
    {2.5, 13, {0.21080636406114361, -0.07434734678979468, 0.024937997086645233, -0.008001569382098908,
               0.0024670368164479654, -0.0007335909373117802, 0.00021101980639242626, -5.886896055724396e-05,
               1.596205712687532e-05, -4.214343130963489e-06, 1.0840311055681113e-06, -2.726770726930534e-07,
               7.05750661898197e-08, -1.696411408635626e-08}},
    {3.5, 11, {0.15529365560889383, -0.0413235778332524, 0.010661133192643927, -0.002673074439670815,
               0.0006526863206603701, -0.00015546891696033679, 3.618181032990639e-05, -8.238008146585704e-06,
               1.8363727483095443e-06, -4.01573744038909e-07, 8.90999400567085e-08, -1.8763381407389433e-08}},
    {5.0, 9, {0.11070463774125715, -0.021332789766191164, 0.004040688499736073, -0.0007528967452212313,
              0.00013810568506979497, -2.49544276810777e-05, 4.435252862215888e-06, -7.791179192739018e-07,
              1.4552545520418797e-07, -2.4853846318629353e-08}}};
double erf(double x) {
    if (x != x) return x;
    const double a = x < 0 ? -x : x;
    if (a < 1) {  // x + x (c_0 - 1 + c_1 x^2 + ...): x itself is exact, the sum after it is small
        double z, z_lo;
        two_product(x, x, z, z_lo);  // x^2 = z + z_lo exactly
        double p = erf_taylor[18];
        for (int n = 17; n >= 1; n--) p = erf_taylor[n] + z * p;
        return x + x * (0.1283791670955126 + (z * p + z_lo * erf_taylor[1]));  // 0.128... = c_0 - 1 = 2 / sqrt(pi) - 1
    }
    if (a >= 6) return x > 0 ? 1.0 : -1.0;
    const ErfcxPiece& piece = erfcx_pieces[a < 2 ? 0 : a < 3 ? 1 : a < 4 ? 2 : 3];
    const double s = a - piece.center;  // exact
    double g = piece.c[piece.degree];
    for (int d = piece.degree - 1; d >= 0; d--) g = piece.c[d] + s * g;
    double hi, lo;
    two_product(a, a, hi, lo);  // a^2 = hi + lo exactly
    const double e = vexp(-hi);
    const double erfc = (e - e * lo) * g;
    return x > 0 ? 1.0 - erfc : erfc - 1.0;
}
float erf(float x) { return verf(x); }

// t - 2 round(t / 2) = r in [-1, 1] (exact); cos(pi r) = cos(pi |r|) = -cos(pi (1 - |r|)), so b in
// [0, 1/2]; cos(pi b) by its Taylor series for b <= 1/4, sin(pi (1/2 - b)) by its series above
// (both to a relative error under 1e-18 at |pi b| <= pi/4).
static const double cos_pi_taylor[10] = {1.0, -4.934802200544679, 4.0587121264167685, -1.3352627688545895,
                                         0.2353306303588932, -0.02580689139001406, 0.0019295743094039231,
                                         -0.0001046381049248457, 4.303069587032947e-06, -1.3878952462213771e-07};
static const double sin_pi_taylor[9] = {3.141592653589793, -5.16771278004997, 2.5501640398773455,
                                        -0.5992645293207921, 0.08214588661112823, -0.0073704309457143504,
                                        0.00046630280576761255, -2.1915353447830217e-05, 7.952054001475513e-07};
double cos_pi(double t) {
    double a = t < 0 ? -t : t;
    if (!(a < std::numeric_limits<double>::infinity())) return t - t;  // inf, NaN: NaN
    if (a >= 9007199254740992.0) return 1.0;                            // 2^53 and above: even integers
    const double half_round = (a * 0.5 + 6755399441055744.0) - 6755399441055744.0;  // round(a / 2), no library call
    double r = a - 2.0 * half_round;
    r = r < 0 ? -r : r;
    const double sign = r > 0.5 ? -1.0 : 1.0;
    if (r > 0.5) r = 1.0 - r;
    if (r <= 0.25) {  // 1 + c_1 r^2 + r^4 (c_2 + ...), with r^2 and c_1 r^2 exact as two doubles each
        double z, z_lo, q, q_lo;
        two_product(r, r, z, z_lo);
        two_product(cos_pi_taylor[1], z, q, q_lo);
        double p = cos_pi_taylor[9];
        for (int n = 8; n >= 2; n--) p = cos_pi_taylor[n] + z * p;
        const double tail = q_lo + (cos_pi_taylor[1] * z_lo + -3.1326477543698557e-16 * z) + z * z * p;  // -3.13e-16: -pi^2/2 - c_1
        const double one_plus_q = 1.0 + q, lost = (1.0 - one_plus_q) + q;                                 // 1 + q exactly
        return sign * (one_plus_q + (lost + tail));
    }
    const double b = 0.5 - r, z = b * b;  // sin(pi b) = b pi + b (pi^3 b^2 / 6 - ...), b pi = hi + lo exactly
    double p = sin_pi_taylor[8];
    for (int n = 7; n >= 1; n--) p = sin_pi_taylor[n] + z * p;
    double hi, lo;
    two_product(b, 3.141592653589793, hi, lo);
    return sign * (hi + (lo + b * (1.2246467991473532e-16 + z * p)));  // 1.22e-16 = pi - 3.141592653589793
}

// A double-double number hi + lo (|lo| <= ulp(hi) / 2) times another: the exact product of the two
// highs plus the cross terms, renormalised.
static void dd_mul(double& hi, double& lo, double y_hi, double y_lo) {
    double p, e;
    two_product(hi, y_hi, p, e);
    e = e + (hi * y_lo + lo * y_hi);
    hi = p + e;
    lo = e - (hi - p);
}
// b^n: squaring and multiplying in double-double (about 100 bits), rounded once at the end. Where an
// intermediate leaves the normal range (b = 0, inf, NaN, overflow, underflow), the plain double
// products give IEEE's answer instead.
double pow_int(double b, long long n) {
    unsigned long long m = n < 0 ? 0ull - (unsigned long long)n : (unsigned long long)n;
    double r_hi = 1, r_lo = 0, b_hi = b, b_lo = 0, plain = 1, b_plain = b;
    for (; m; m >>= 1) {
        if (m & 1) {
            dd_mul(r_hi, r_lo, b_hi, b_lo);
            plain *= b_plain;
        }
        if (m > 1) {
            dd_mul(b_hi, b_lo, b_hi, b_lo);
            b_plain *= b_plain;
        }
    }
    const double limit = 1e300, small = 1e-280;  // Dekker's splits stay exact well inside these
    const double mag = plain < 0 ? -plain : plain;
    const double r = mag < limit && mag > small && r_hi == r_hi ? r_hi : plain;
    return n < 0 ? 1.0 / r : r;
}
}  // namespace math

// softmax_row_reference in loops the compiler vectorises: lane_max, vexp, lane_sum.
template <typename T>
void softmax_row(const T* __restrict x, T* __restrict y, int H) {
    const T m = lane_max(x, H);
    if (m == -std::numeric_limits<T>::infinity()) {  // nothing to attend to: all zeros, not NaN
        for (int j = 0; j < H; j++) y[j] = T(0);
        return;
    }
TF_IVDEP_VEXP
    for (int j = 0; j < H; j++) y[j] = vexp(x[j] - m);
    const T inv = T(1) / lane_sum<T>(y, H);
TF_IVDEP
    for (int j = 0; j < H; j++) y[j] *= inv;
}

// The numerators of Softmax(z) and their sum in double (CrossEntropy_logits' row): m = max_j z_j,
// e_j = exp(z_j - m), returns sum_j e_j.
template <typename T>
double softmax_numerators(const T* __restrict z, T* __restrict e, int V, T& m) {
    m = lane_max(z, V);
TF_IVDEP_VEXP
    for (int j = 0; j < V; j++) e[j] = vexp(z[j] - m);
    return lane_sum<double>(e, V);
}

// activation and activation_derivative over a whole array, in loops the compiler vectorises: vexp instead of
// std::exp and std::tanh, with 0.5 (1 + tanh u) = sigmoid(2u) = 1 / (1 + exp(-2u)) for the tanh
// form (which also avoids the cancellation in 1 + tanh u for u << 0), and with 1 - t^2 =
// 4 s (1 - s) in its derivative; gelu_erf calls verf and vexp.
// Tests compare both with activation and activation_derivative.
template <typename T>
void activation_array(Activation a, const T* __restrict z, T* __restrict y, std::size_t n) {
    const T sqrt_2_over_pi = T(0.7978845608028654);  // sqrt(2/pi)
    switch (a) {
        case Activation::relu:
TF_IVDEP
            for (std::size_t k = 0; k < n; k++) y[k] = z[k] > T(0) ? z[k] : T(0);
            return;
        case Activation::gelu_sigmoid:
TF_IVDEP_VEXP
            for (std::size_t k = 0; k < n; k++) y[k] = z[k] / (T(1) + vexp(T(-1.702) * z[k]));
            return;
        case Activation::gelu_tanh:
TF_IVDEP_VEXP
            for (std::size_t k = 0; k < n; k++) {
                const T x = z[k], u = sqrt_2_over_pi * (x + T(0.044715) * x * x * x);
                y[k] = x / (T(1) + vexp(T(-2) * u));
            }
            return;
        case Activation::gelu_erf:
TF_IVDEP_VEXP
            for (std::size_t k = 0; k < n; k++) y[k] = T(0.5) * z[k] * (T(1) + verf(z[k] * T(0.7071067811865476)));
            return;
    }
}
// dz_k *= act'(z_k)
template <typename T>
void activation_derivative_array(Activation a, const T* __restrict z, T* __restrict dz, std::size_t n) {
    const T sqrt_2_over_pi = T(0.7978845608028654);
    switch (a) {
        case Activation::relu:
TF_IVDEP
            for (std::size_t k = 0; k < n; k++) dz[k] = z[k] > T(0) ? dz[k] : T(0);
            return;
        case Activation::gelu_sigmoid:
TF_IVDEP_VEXP
            for (std::size_t k = 0; k < n; k++) {
                const T x = z[k], s = T(1) / (T(1) + vexp(T(-1.702) * x));
                dz[k] *= s + T(1.702) * x * s * (T(1) - s);
            }
            return;
        case Activation::gelu_tanh:
TF_IVDEP_VEXP
            for (std::size_t k = 0; k < n; k++) {
                const T x = z[k], u = sqrt_2_over_pi * (x + T(0.044715) * x * x * x);
                const T s = T(1) / (T(1) + vexp(T(-2) * u));  // 0.5 (1 + tanh u)
                const T d = s + T(2) * x * s * (T(1) - s) * sqrt_2_over_pi * (T(1) + T(3 * 0.044715) * x * x);
                dz[k] *= (x > T(20) || x < T(-20)) ? (x > T(0) ? T(1) : T(0)) : d;  // saturated, as above
            }
            return;
        case Activation::gelu_erf:
TF_IVDEP_VEXP
            for (std::size_t k = 0; k < n; k++) {
                const T x = z[k];
                dz[k] *= T(0.5) * (T(1) + verf(x * T(0.7071067811865476))) + x * vexp(T(-0.5) * x * x) * T(0.3989422804014327);
            }
            return;
    }
}

// The kernels' instances for the two scalar types (gemm, the row kernels and the parameters' memory
// are what Part I calls).
#define TF_INSTANTIATE_KERNELS(T)                                                                          \
    template void gemm(int, int, int, const T*, long, long, const T*, long, long, T*, long, bool);         \
    template void activation_array(Activation, const T*, T*, std::size_t);                                  \
    template void activation_derivative_array(Activation, const T*, T*, std::size_t);                       \
    template T vexp(T);                                                                                    \
    template void softmax_row(const T*, T*, int);                                                          \
    template std::size_t arena_bytes(const Config&, Params<T>&);                                           \
    template void allocate_params(const Config&, Params<T>&);
TF_INSTANTIATE_KERNELS(float)
TF_INSTANTIATE_KERNELS(double)
#endif  // !defined(TF_PART_I_ALONE): the end of the fast product
#endif  // !defined(TF_ONLY_MACHINERY): the end of the mathematics and the fast product
#if !defined(TF_ONLY_MATHEMATICS) && !defined(TF_PART_I_ALONE)

// The functions of the part above that the machinery below calls besides those of transformer.hpp:
// declared here, so that the machinery compiles without the mathematics (TF_ONLY_MACHINERY).
template <typename T>
std::size_t arena_bytes(const Config& c, Params<T>& p);
void check_batch(const Config& c, const Batch& b);
template <typename T>
const T* position_vector(const Params<T>& p, int row);
template <typename T>
T* position_vector(Params<T>& p, int row);
template <typename T>
Tensor<T> rows_of(const Tensor<T>& X, int first, int count);
std::vector<int> permutation_ranks(const std::vector<int>& z);
template <typename T>
Tensor<T> xlnet_forward(const Config& c, const Params<T>& p, const Tensor<T>& w, const std::vector<int>& tokens,
                        int B, const std::vector<int>& z, ForwardCache<T>& k);
double read_pass_gbps(const std::vector<float>& buf);
std::vector<float> read_buffer(double weight_bytes);

TF_COLD_BEGIN
// ================================================================================================
// TEXT: UTF-8 and JSON, the character vocabulary, GPT-2's byte-level BPE and learning one, the
// tokenizers of the released GPT-1 and BERT, the tokenizer of a checkpoint, tokenizer files for
// Hugging Face (see transformer.hpp for each tokenizer's steps)
// ================================================================================================

// ---- Numbers, read from text and written as text ------------------------------------------------
// Every number the program reads from a flag, a metadata value or a file goes through these three:
// the whole text is the number (decimal; nothing may follow it), and the caller words the error.
NumberRead read_integer(const std::string& s, long long& v) {
    char* end = nullptr;
    errno = 0;
    v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0') return NumberRead::not_a_number;
    return errno == ERANGE ? NumberRead::out_of_range : NumberRead::ok;
}

NumberRead read_unsigned(const std::string& s, uint64_t& v) {
    v = 0;
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return NumberRead::not_a_number;
    char* end = nullptr;
    errno = 0;
    const unsigned long long u = std::strtoull(s.c_str(), &end, 10);
    if (errno == ERANGE) return NumberRead::out_of_range;
    v = (uint64_t)u;
    return NumberRead::ok;
}

NumberRead read_real(const std::string& s, double& v) {
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0') return NumberRead::not_a_number;
    return std::isfinite(v) ? NumberRead::ok : NumberRead::out_of_range;
}

// The same with the error every metadata value and file field gets: "WHAT: 'TEXT' is not ...".
int parse_int(const std::string& s, const std::string& what) {
    long long v = 0;
    if (read_integer(s, v) != NumberRead::ok || v < -2147483647LL || v > 2147483647LL)
        throw Error(what + ": '" + s + "' is not an integer");
    return (int)v;
}

long long parse_i64(const std::string& s, const std::string& what) {
    long long v = 0;
    if (read_integer(s, v) != NumberRead::ok) throw Error(what + ": '" + s + "' is not an integer");
    return v;
}

uint64_t parse_u64(const std::string& s, const std::string& what) {
    uint64_t v = 0;
    if (read_unsigned(s, v) != NumberRead::ok) throw Error(what + ": '" + s + "' is not an unsigned integer");
    return v;
}

double parse_double(const std::string& s, const std::string& what) {
    double v = 0;
    if (read_real(s, v) != NumberRead::ok) throw Error(what + ": '" + s + "' is not a number");
    return v;
}

// 17 significant digits: reads back as the same double on every platform (metadata, the loss log).
std::string full_digits(double v) {
    std::ostringstream o;
    o.precision(17);
    o << v;
    return o.str();
}

// The shortest form that reads back as the same double (1e-05, not 1.0000000000000001e-05).
std::string shortest_double(double v) {
    char buf[64];
    for (int digits = 1; digits <= 17; digits++) {
        std::snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
}

// A count read from a file, for an error message: whole digits up to 1e18, beyond that 3 digits and
// an exponent (a shape's product or an offset may be any number a JSON file can hold).
std::string whole_number(double v) {
    char text[64];
    std::snprintf(text, sizeof text, std::fabs(v) < 1e18 ? "%.0f" : "%.3g", v);
    return text;
}

// ---- UTF-8 -------------------------------------------------------------------------------------
// The length (1..4) of the valid UTF-8 sequence that starts at byte i, its code point in cp; 0 if
// the bytes there are not valid UTF-8 (overlong forms, surrogates and truncated sequences included).
int utf8_next(const std::string& text, std::size_t i, uint32_t& cp) {
    static const uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};  // per sequence length
    const unsigned char b0 = (unsigned char)text[i];
    const int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > text.size()) return 0;
    cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1Fu) : len == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
    for (int k = 1; k < len; k++) {
        const unsigned char b = (unsigned char)text[i + k];
        if ((b & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3Fu);
    }
    if (cp < smallest[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

// cp (at most 0x10FFFF, not a surrogate) appended to out as UTF-8: 1 to 4 bytes.
void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += (char)cp;
    } else if (cp < 0x800) {
        out += (char)(0xC0 | (cp >> 6));
        out += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += (char)(0xE0 | (cp >> 12));
        out += (char)(0x80 | ((cp >> 6) & 0x3F));
        out += (char)(0x80 | (cp & 0x3F));
    } else {
        out += (char)(0xF0 | (cp >> 18));
        out += (char)(0x80 | ((cp >> 12) & 0x3F));
        out += (char)(0x80 | ((cp >> 6) & 0x3F));
        out += (char)(0x80 | (cp & 0x3F));
    }
}

// The code points as UTF-8.
static std::string utf8_encode(const std::vector<uint32_t>& cps) {
    std::string s;
    for (uint32_t cp : cps) utf8_append(s, cp);
    return s;
}

// The code points of a UTF-8 text and the byte offset where each starts (plus text.size() at the
// end). Overlong forms, surrogates and truncated sequences are errors, as in a strict decoder.
static void utf8_decode(const std::string& text, std::vector<uint32_t>& cps, std::vector<std::size_t>& at) {
    for (std::size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        const int len = utf8_next(text, i, cp);
        if (len == 0) throw Error("text is not valid UTF-8 (at byte " + std::to_string(i) + ")");
        cps.push_back(cp), at.push_back(i);
        i += (std::size_t)len;
    }
    at.push_back(text.size());
}

// "character '€' (U+20AC) at byte 16 (line 1, column 17) of WHERE": the character that contains
// byte `offset` of text (a byte that is not UTF-8 is named as a byte), for every "not in the
// vocabulary" error of every command.
std::string describe_char_at(const std::string& text, std::size_t offset, const std::string& where) {
    std::size_t start = offset;  // back up to the lead byte of a multi-byte character
    while (start > 0 && offset - start < 3 && ((unsigned char)text[start] & 0xC0) == 0x80) start--;
    uint32_t cp = 0;
    int len = utf8_next(text, start, cp);
    if (len == 0 || start + len <= offset) start = offset, len = utf8_next(text, offset, cp);
    std::size_t line = 1, col = 1;
    for (std::size_t k = 0; k < start;) {
        uint32_t ignored;
        if (text[k] == '\n') line++, col = 1, k++;
        else col++, k += (std::size_t)std::max(1, utf8_next(text, k, ignored));
    }
    char buf[96];
    if (len == 0) std::snprintf(buf, sizeof buf, "byte 0x%02X (not UTF-8)", (unsigned char)text[offset]);
    else if (cp < 0x20 || cp == 0x7F) std::snprintf(buf, sizeof buf, "character U+%04X", (unsigned)cp);
    else std::snprintf(buf, sizeof buf, "character '%s' (U+%04X)", text.substr(start, (std::size_t)len).c_str(), (unsigned)cp);
    return std::string(buf) + " at byte " + std::to_string(start) + " (line " + std::to_string(line) + ", column " +
           std::to_string(col) + ") of " + where;
}

// ---- JSON --------------------------------------------------------------------------------------
const Json* Json::get(const std::string& key) const {
    if (type != object) return nullptr;
    for (auto& kv : obj)
        if (kv.first == key) return &kv.second;
    return nullptr;
}

namespace {
struct JsonParser {
    const std::string& s;
    std::size_t i = 0;
    int depth = 0;
    [[noreturn]] void fail(const std::string& what) const {
        throw Error("JSON: " + what + " at byte " + std::to_string(i));
    }
    void ws() {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    }
    bool eat(char ch) {
        ws();
        if (i < s.size() && s[i] == ch) return ++i, true;
        return false;
    }
    void expect(char ch) {
        if (!eat(ch)) fail(std::string("expected '") + ch + "'");
    }
    uint32_t hex4() {
        if (i + 4 > s.size()) fail("truncated \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            const char ch = s[i++];
            v <<= 4;
            if (ch >= '0' && ch <= '9') v |= ch - '0';
            else if (ch >= 'a' && ch <= 'f') v |= ch - 'a' + 10;
            else if (ch >= 'A' && ch <= 'F') v |= ch - 'A' + 10;
            else fail("bad \\u escape");
        }
        return v;
    }
    std::string string() {
        ws();
        if (i >= s.size() || s[i] != '"') fail("expected a string");
        i++;
        std::string out;
        while (true) {
            if (i >= s.size()) fail("unterminated string");
            const char ch = s[i++];
            if (ch == '"') return out;
            if ((unsigned char)ch < 0x20) fail("control character in string");
            if (ch != '\\') {
                out += ch;
                continue;
            }
            if (i >= s.size()) fail("unterminated escape");
            const char e = s[i++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
                        if (i + 2 > s.size() || s[i] != '\\' || s[i + 1] != 'u') fail("lone surrogate");
                        i += 2;
                        const uint32_t lo = hex4();
                        if (lo < 0xDC00 || lo > 0xDFFF) fail("bad surrogate pair");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    utf8_append(out, cp);
                    break;
                }
                default: fail("bad escape");
            }
        }
    }
    Json value() {
        if (++depth > 64) fail("nesting too deep");
        ws();
        if (i >= s.size()) fail("unexpected end");
        Json v;
        const char ch = s[i];
        if (ch == '{') {
            i++;
            v.type = Json::object;
            if (!eat('}')) {
                do {
                    std::string key = string();
                    expect(':');
                    v.obj.emplace_back(std::move(key), value());
                } while (eat(','));
                expect('}');
            }
        } else if (ch == '[') {
            i++;
            v.type = Json::array;
            if (!eat(']')) {
                do v.arr.push_back(value());
                while (eat(','));
                expect(']');
            }
        } else if (ch == '"') {
            v.type = Json::string;
            v.str = string();
        } else if (s.compare(i, 4, "true") == 0) {
            v.type = Json::boolean, v.b = true, i += 4;
        } else if (s.compare(i, 5, "false") == 0) {
            v.type = Json::boolean, i += 5;
        } else if (s.compare(i, 4, "null") == 0) {
            i += 4;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            const std::size_t start = i;
            i++;
            while (i < s.size() && (std::isdigit((unsigned char)s[i]) || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
                                    s[i] == '+' || s[i] == '-'))
                i++;
            const std::string num = s.substr(start, i - start);
            char* end = nullptr;
            v.type = Json::number;
            v.num = std::strtod(num.c_str(), &end);
            if (end != num.c_str() + num.size()) fail("bad number '" + num + "'");
        } else {
            fail(std::string("unexpected character '") + ch + "'");
        }
        depth--;
        return v;
    }
};
}  // namespace

Json parse_json(const std::string& text) {
    JsonParser p{text};
    Json v = p.value();
    p.ws();
    if (p.i != text.size()) p.fail("trailing characters");
    return v;
}

// Always valid JSON in UTF-8: a byte that is not part of valid UTF-8 becomes U+FFFD (the
// replacement character), so a file name in any encoding cannot break a safetensors header.
std::string json_escape(const std::string& s) {
    std::string out = "\"";
    for (std::size_t i = 0; i < s.size(); i++) {
        const unsigned char ch = (unsigned char)s[i];
        uint32_t cp;
        const int len = ch < 0x80 ? 1 : utf8_next(s, i, cp);
        if (len == 0) out += "\xEF\xBF\xBD";
        else if (len > 1) out.append(s, i, (std::size_t)len), i += (std::size_t)len - 1;
        else if (ch == '"') out += "\\\"";
        else if (ch == '\\') out += "\\\\";
        else if (ch == '\n') out += "\\n";
        else if (ch == '\r') out += "\\r";
        else if (ch == '\t') out += "\\t";
        else if (ch < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", ch);
            out += buf;
        } else out += (char)ch;
    }
    return out + "\"";
}

// ---- Character vocabulary ------------------------------------------------------------------------
CharVocab::CharVocab() {
    for (int& v : id) v = -1;
}

CharVocab CharVocab::from_text(const std::string& text) {
    bool seen[256] = {};
    for (unsigned char ch : text) seen[ch] = true;
    CharVocab v;
    for (int b = 0; b < 256; b++)
        if (seen[b]) v.id[b] = (int)v.chars.size(), v.chars.push_back((unsigned char)b);
    return v;
}

std::vector<int> CharVocab::encode(const std::string& text, const std::string& where) const {
    std::vector<int> ids;
    ids.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); i++) {
        const unsigned char ch = (unsigned char)text[i];
        if (id[ch] < 0) throw Error(describe_char_at(text, i, where) + " is not in the model's vocabulary");
        ids.push_back(id[ch]);
    }
    return ids;
}

std::string CharVocab::decode(const std::vector<int>& ids) const {
    std::string s;
    for (int t : ids) {
        if (t >= 0 && t < size()) s += (char)chars[t];
        else if (t == size()) s += "[CLS]";
        else if (t == size() + 1) s += "[SEP]";
        else s += "_";
    }
    return s;
}

std::string CharVocab::to_metadata() const {
    std::string s;
    for (std::size_t k = 0; k < chars.size(); k++) s += (k ? "," : "") + std::to_string(chars[k]);
    return s;
}

CharVocab CharVocab::from_metadata(const std::string& s) {
    CharVocab v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const int b = parse_int(item, "metadata 'vocab'");
        if (b < 0 || b > 255 || v.id[b] >= 0) throw Error("metadata 'vocab': bad or repeated byte " + item);
        v.id[b] = (int)v.chars.size();
        v.chars.push_back((unsigned char)b);
    }
    if (v.chars.empty()) throw Error("metadata 'vocab' is empty");
    return v;
}

// ---- GPT-2's byte-level BPE (see transformer.hpp for the three steps) ---------------------------

// ---- Unicode: the classes \p{L}, \p{N}, \s of GPT-2's pattern -----------------------------------
static bool unicode_letter(uint32_t cp);  // general category L* (tables at the end of this section)
static bool unicode_number(uint32_t cp);  // general category N*
static bool unicode_space(uint32_t cp) {  // the White_Space property
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// ---- Step 1: pre-tokenization ------------------------------------------------------------------
// The pattern's alternatives in order; c[i..j) is the piece found at position i (code points).
std::vector<std::string> gpt2_pretokenize(const std::string& text) {
    std::vector<uint32_t> c;
    std::vector<std::size_t> at;
    utf8_decode(text, c, at);
    enum Class { letter, number, space, other };
    auto cls = [&](std::size_t k) {
        return unicode_letter(c[k]) ? letter : unicode_number(c[k]) ? number : unicode_space(c[k]) ? space : other;
    };
    const std::size_t n = c.size();
    std::vector<std::string> pieces;
    for (std::size_t i = 0, j; i < n; i = j) {
        j = i;
        if (c[i] == '\'' && i + 1 < n) {  // 's|'t|'re|'ve|'m|'ll|'d
            const uint32_t a = c[i + 1], b = i + 2 < n ? c[i + 2] : 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd') j = i + 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) j = i + 3;
        }
        if (j == i) {  //  ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+ : an optional space, then one class's run
            const std::size_t k = c[i] == ' ' && i + 1 < n && cls(i + 1) != space ? i + 1 : i;
            const Class run = cls(k);
            if (run != space)
                for (j = k + 1; j < n && cls(j) == run;) j++;
        }
        if (j == i) {  // \s+(?!\S)|\s+ : white space; before more text its last character is left
            std::size_t e = i;  // to start the next piece (" word"), unless the run is one character
            while (e < n && cls(e) == space) e++;
            j = e < n && e - i >= 2 ? e - 1 : e;
        }
        pieces.push_back(text.substr(at[i], at[j] - at[i]));
    }
    return pieces;
}

// ---- Step 2: bytes as printable symbols --------------------------------------------------------
static const std::string& byte_symbol(unsigned char b) {
    static const std::vector<std::string> table = [] {
        auto printable = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF); };
        std::vector<std::string> t(256);
        for (int x = 0, next = 0x100; x < 256; x++) utf8_append(t[x], printable(x) ? (uint32_t)x : (uint32_t)next++);
        return t;
    }();
    return table[b];
}
std::string bytes_to_unicode(unsigned char b) { return byte_symbol(b); }

// ---- Step 3: merges ----------------------------------------------------------------------------
std::vector<MergeLine> read_merges(const std::string& text, const std::string& file) {
    std::vector<MergeLine> out;
    std::stringstream ss(text);
    std::string line;
    for (int line_no = 1; std::getline(ss, line); line_no++) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
        const std::size_t sp = line.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
            throw Error(file + ": line " + std::to_string(line_no) + " is not two symbols separated by one space");
        out.push_back({line.substr(0, sp), line.substr(sp + 1), line_no});
    }
    return out;
}

std::vector<std::string> read_encoder(const std::string& json, const std::string& file, const std::string& what,
                                      std::unordered_map<std::string, int>& encoder) {
    const Json j = parse_json(json);
    if (j.type != Json::object || j.obj.empty()) throw Error(file + ": expected an object {\"" + what + "\": id, ...}");
    const std::size_t N = j.obj.size();
    std::vector<std::string> symbols(N);
    std::vector<bool> seen(N, false);
    for (const auto& kv : j.obj) {
        const double v = kv.second.num;
        if (kv.second.type != Json::number || v != std::floor(v) || v < 0 || v >= (double)N)
            throw Error(file + ": the id of '" + kv.first + "' is not an integer in 0.." + std::to_string(N - 1));
        const int id = (int)v;
        if (seen[id]) throw Error(file + ": id " + std::to_string(id) + " is given twice");
        if (kv.first.empty() || !encoder.emplace(kv.first, id).second)
            throw Error(file + ": the " + what + " '" + kv.first + "' is empty or given twice");
        seen[id] = true;
        symbols[id] = kv.first;
    }
    return symbols;
}

// GPT-2's loop: find the adjacent pair with the lowest rank, merge every occurrence of it left to
// right, repeat until no pair has a rank. Rescanning the whole piece each time is O(n^2), which a
// long piece without spaces makes hours, so the same passes run on a linked list of symbols with
// a heap of candidate pairs (rank, left symbol): O(n log n). A merge never recreates the pair just
// merged (the new symbol is longer than both halves), and the pairs it does create are queued only
// after the pass, so the passes are exactly GPT-2's.
// Step 3 on a word's first symbols (GPT-2: one per byte; GPT-1: one per character, "</w>" on the
// last), shared by both BPEs: repeatedly merge every occurrence, left to right, of the adjacent
// pair with the lowest rank. A heap holds the candidate pairs (rank, left symbol), so a long word
// costs O(n log n), not O(n^2).
static std::vector<std::string> bpe_merges(std::vector<std::string> sym, const std::unordered_map<std::string, int>& ranks) {
    const int n = (int)sym.size();
    std::vector<int> prev(n), next(n);
    std::vector<char> alive(n, 1);
    for (int i = 0; i < n; i++) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    auto rank_of = [&](int i) {  // rank of the pair (sym[i], sym[next[i]]), -1 if none
        if (i < 0 || next[i] < 0) return -1;
        auto it = ranks.find(sym[i] + " " + sym[next[i]]);
        return it == ranks.end() ? -1 : it->second;
    };
    using Candidate = std::pair<int, int>;  // (rank, left symbol): the lowest rank, then leftmost, first
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto push = [&](int i) {
        const int r = rank_of(i);
        if (r >= 0) heap.push({r, i});
    };
    for (int i = 0; i < n; i++) push(i);
    std::vector<int> merged;
    while (!heap.empty()) {
        const int r = heap.top().first;  // one pass: every occurrence of the pair of rank r
        merged.clear();
        while (!heap.empty() && heap.top().first == r) {
            const int i = heap.top().second;
            heap.pop();
            if (!alive[i] || rank_of(i) != r) continue;  // out of date: a neighbour was merged
            const int j = next[i];
            sym[i] += sym[j], alive[j] = 0;
            next[i] = next[j];
            if (next[j] >= 0) prev[next[j]] = i;
            merged.push_back(i);
        }
        for (int i : merged)
            if (alive[i]) push(prev[i]), push(i);
    }
    std::vector<std::string> out;
    for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) out.push_back(std::move(sym[i]));
    return out;
}

std::vector<std::string> BPE::bpe(const std::string& piece) const {
    std::vector<std::string> sym(piece.size());
    for (std::size_t i = 0; i < piece.size(); i++) sym[i] = byte_symbol((unsigned char)piece[i]);
    return bpe_merges(std::move(sym), ranks);
}

std::vector<int> BPE::encode(const std::string& text, const std::function<void(std::size_t, std::size_t)>& progress) const {
    std::vector<int> ids;
    std::unordered_map<std::string, std::vector<int>> done;  // pieces repeat: merge each once
    std::size_t bytes = 0;
    for (const std::string& piece : gpt2_pretokenize(text)) {
        auto it = done.find(piece);
        if (it == done.end()) {
            std::vector<int> v;
            for (const std::string& sym : bpe(piece)) {
                auto e = encoder.find(sym);
                if (e == encoder.end()) throw Error("BPE: the symbol '" + sym + "' is not in the vocabulary");
                v.push_back(e->second);
            }
            it = done.emplace(piece, std::move(v)).first;
        }
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        bytes += piece.size();
        if (progress) progress(bytes, ids.size());
    }
    return ids;
}

std::string BPE::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids) {
        if (id < 0 || id >= size())
            throw Error("BPE: token id " + std::to_string(id) + " is outside 0.." + std::to_string(size() - 1));
        out += decoder[id];
    }
    return out;
}

// The tokens of a byte-level BPE vocabulary that no merge makes: GPT-2's "<|endoftext|>", RoBERTa's
// <s>, <pad>, </s>, <unk>, <mask> and the "madeupword0000".. that pad its vocabulary.
static bool is_bpe_special(const std::string& w) {
    if (w.size() > 4 && w.compare(0, 2, "<|") == 0 && w.compare(w.size() - 2, 2, "|>") == 0) return true;
    if (w == "<s>" || w == "<pad>" || w == "</s>" || w == "<unk>" || w == "<mask>") return true;
    return w.size() == 14 && w.compare(0, 10, "madeupword") == 0 && w.find_first_not_of("0123456789", 10) == std::string::npos;
}

// RoBERTa's tokenizer (roberta-bpe): GPT-2's byte-level BPE with RoBERTa's vocab.json and merges.txt.
// Its special tokens <s>, <pad>, </s>, <unk>, <mask> written in the text are those tokens, and
// <mask> takes the white space before it along (Hugging Face's lstrip): "Paris is <mask>." is
// "Paris" "Ġis" <mask> ".", where a plain BPE of " <mask>" would leave a token "Ġ" before it.
std::vector<int> roberta_encode(const BPE& bpe, const std::string& text) {
    static const char* const specials[] = {"<s>", "<pad>", "</s>", "<unk>", "<mask>"};
    std::vector<int> ids;
    std::size_t from = 0;  // the text before `from` is encoded
    for (std::size_t i = 0; i < text.size(); i++) {
        if (text[i] != '<') continue;
        for (const char* sp : specials) {
            const std::size_t len = std::strlen(sp);
            if (text.compare(i, len, sp) != 0) continue;
            std::size_t end = i;
            if (std::strcmp(sp, "<mask>") == 0)
                while (end > from && (text[end - 1] == ' ' || text[end - 1] == '\t' || text[end - 1] == '\n' || text[end - 1] == '\r')) end--;
            const std::vector<int> before = bpe.encode(text.substr(from, end - from));
            ids.insert(ids.end(), before.begin(), before.end());
            ids.push_back(bpe.encoder.at(sp));
            from = i + len, i = from - 1;
            break;
        }
    }
    const std::vector<int> rest = bpe.encode(text.substr(from));
    ids.insert(ids.end(), rest.begin(), rest.end());
    return ids;
}

BPE make_bpe(const std::string& encoder_json, const std::string& vocab_bpe) {
    BPE t;
    const std::vector<std::string> symbols = read_encoder(encoder_json, "encoder.json", "token", t.encoder);
    std::map<uint32_t, char> byte_of;  // symbol code point -> the byte it stands for
    for (int b = 0; b < 256; b++) {
        std::vector<uint32_t> cp;
        std::vector<std::size_t> at;
        utf8_decode(byte_symbol((unsigned char)b), cp, at);
        byte_of[cp[0]] = (char)b;
    }
    t.decoder.assign(symbols.size(), std::string());
    for (std::size_t id = 0; id < symbols.size(); id++) {
        std::vector<uint32_t> cps;
        std::vector<std::size_t> at;
        utf8_decode(symbols[id], cps, at);
        for (uint32_t cp : cps) {
            auto b = byte_of.find(cp);
            if (b == byte_of.end())
                throw Error("encoder.json: the token '" + symbols[id] + "' has a character outside the 256 byte symbols");
            t.decoder[id] += b->second;
        }
    }
    auto eot = t.encoder.find("<|endoftext|>");
    t.eot = eot == t.encoder.end() ? -1 : eot->second;
    for (const MergeLine& m : read_merges(vocab_bpe, "vocab.bpe")) t.ranks.emplace(m.a + " " + m.b, (int)t.ranks.size());
    if (t.ranks.empty()) throw Error("vocab.bpe: no merges");
    // Every token beyond the 256 byte symbols and the special ones ("<|endoftext|>") is made by one
    // merge, so fewer merges than those tokens means a cut file (GPT-2's: 50000 merges, 50257 tokens).
    long long made = (long long)t.encoder.size() - 256;
    for (const auto& kv : t.encoder) made -= is_bpe_special(kv.first);
    if ((long long)t.ranks.size() < made)
        throw Error("vocab.bpe: " + std::to_string(t.ranks.size()) + " merges, but encoder.json has " + std::to_string(made) +
                    " tokens made by merges (beyond the 256 byte symbols and the special ones): the file is cut short");
    return t;
}

// make(encoder, merges) on the two files' texts; an error names both files.
template <typename Make>
static auto load_encoder_and_merges(const std::string& encoder_path, const std::string& merges_path, Make make) {
    const std::string enc = read_file(encoder_path), merges = read_file(merges_path);
    try {
        return make(enc, merges);
    } catch (const Error& e) {
        throw Error("'" + encoder_path + "', '" + merges_path + "': " + e.what());
    }
}

BPE load_bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
    return load_encoder_and_merges(encoder_json_path, vocab_bpe_path, make_bpe);
}

// ---- Learning a byte-level BPE vocabulary (bpe) -------------------------------------------------
// See transformer.hpp for the rule. The trainer's state:
//   words   every distinct piece as its current symbol ids, in one array (start, length), with its count;
//   pairs   an open-addressing table (left << 32 | right) -> record: the pair's count over all words
//           and the list of words where it was formed in the current merge;
//   heap    entries (count, pair, list of words): the largest count first, then the smallest pair.
// A merge takes the top entry; if its count is out of date it goes back with the current one (it
// only ever overstates: a count that grows gets a fresh entry), else the pair is merged in the
// entry's words. Merging in a word changes its neighbours' pairs exactly as Hugging Face's
// Word::merge reports them: for each occurrence (x A B y) -> (x R y), pairs (x A) and (B y) lose the
// word's count, (x R) and (R y) gain it, and the words of the gained pairs become new entries.

std::string bpe_special_problem(const std::string& s) {
    if (s.empty()) return "it is empty";
    for (unsigned char ch : s)
        if (ch < 0x21 || ch > 0x7E) return "it must be printable ASCII without spaces";
    const bool bracketed = s.size() > 4 && s.compare(0, 2, "<|") == 0 && s.compare(s.size() - 2, 2, "|>") == 0;
    if (!bracketed && s != "<s>" && s != "<pad>" && s != "</s>" && s != "<unk>" && s != "<mask>")
        return "the GPT-2 loader keeps only <|NAME|> and RoBERTa's <s> <pad> </s> <unk> <mask> out of the merges";
    return "";
}

// The id of each byte: its symbol's rank in code-point order.
static const std::vector<int>& bpe_byte_ids() {
    static const std::vector<int> ids = [] {
        std::vector<std::pair<uint32_t, int>> by_cp;
        for (int b = 0; b < 256; b++) {
            uint32_t cp = 0;
            utf8_next(byte_symbol((unsigned char)b), 0, cp);
            by_cp.push_back({cp, b});
        }
        std::sort(by_cp.begin(), by_cp.end());
        std::vector<int> v(256);
        for (int k = 0; k < 256; k++) v[by_cp[k].second] = k;
        return v;
    }();
    return ids;
}

// One line (with its newline); `offset` is its first byte's offset in the file, line_no its number.
static void bpe_count_line(BpePieces& p, const std::string& line, const std::vector<std::string>& specials,
                           const std::string& where, long long line_no, long long offset) {
    for (std::size_t i = 0; i < line.size();) {
        uint32_t cp;
        const int len = (unsigned char)line[i] < 0x80 ? 1 : utf8_next(line, i, cp);
        if (len == 0) {
            char buf[128];
            std::snprintf(buf, sizeof buf, ": line %lld is not valid UTF-8: byte 0x%02X at byte offset %lld (byte %zu of the line)",
                          line_no, (unsigned)(unsigned char)line[i], offset + (long long)i, i + 1);
            throw Error(where + buf);
        }
        i += (std::size_t)len;
    }
    p.lines++, p.bytes += (long long)line.size();
    auto count = [&](std::size_t from, std::size_t to) {
        if (to <= from) return;
        for (std::string& piece : gpt2_pretokenize(line.substr(from, to - from))) p.count[std::move(piece)]++, p.pieces++;
    };
    std::size_t from = 0;
    while (!specials.empty()) {  // the leftmost special token, the longest of those starting there
        std::size_t at = std::string::npos, len = 0;
        for (const std::string& s : specials) {
            const std::size_t k = line.find(s, from);
            if (k != std::string::npos && (k < at || (k == at && s.size() > len))) at = k, len = s.size();
        }
        if (at == std::string::npos) break;
        count(from, at);
        from = at + len;
    }
    count(from, line.size());
}

void bpe_count_text(BpePieces& p, const std::string& text, const std::vector<std::string>& specials, const std::string& where) {
    long long line_no = 0;
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t nl = text.find('\n', i);
        const std::size_t end = nl == std::string::npos ? text.size() : nl + 1;
        bpe_count_line(p, text.substr(i, end - i), specials, where, ++line_no, (long long)i);
        i = end;
    }
}

void bpe_count_file(BpePieces& p, const std::string& path, const std::vector<std::string>& specials,
                    const std::function<void(long long)>& progress) {
    std::FILE* f = open_input(path);
    const std::string where = "--data '" + path + "'";
    std::vector<char> buf(1 << 20);
    std::string line;
    long long line_no = 0, offset = 0, read = 0, next_report = 16 << 20;
    try {
        std::size_t got;
        while ((got = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
            read += (long long)got;
            for (std::size_t i = 0; i < got;) {
                const char* nl = (const char*)std::memchr(buf.data() + i, '\n', got - i);
                const std::size_t end = nl ? (std::size_t)(nl - buf.data()) + 1 : got;
                line.append(buf.data() + i, end - i);
                i = end;
                if (nl) {
                    bpe_count_line(p, line, specials, where, ++line_no, offset);
                    offset += (long long)line.size();
                    line.clear();
                }
            }
            if (progress && read >= next_report) progress(read), next_report += 16 << 20;
        }
        if (std::ferror(f)) throw Error(where + ": read error: " + std::strerror(errno));
        if (!line.empty()) bpe_count_line(p, line, specials, where, ++line_no, offset);
    } catch (...) {
        std::fclose(f);
        throw;
    }
    std::fclose(f);
}

namespace {
// (left, right) -> index of the pair's record; linear probing in a power-of-two table.
struct BpePairIndex {
    std::vector<uint64_t> keys;  // EMPTY where free
    std::vector<int32_t> vals;
    std::size_t used = 0;
    static constexpr uint64_t EMPTY = ~0ull;
    BpePairIndex() : keys(1 << 16, EMPTY), vals(1 << 16, -1) {}
    static std::size_t slot(uint64_t key, std::size_t mask) { return (std::size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask; }
    // The value slot of key, inserted as -1 if absent.
    int32_t& at(uint64_t key) {
        if (2 * (used + 1) > keys.size()) grow();
        const std::size_t mask = keys.size() - 1;
        std::size_t k = slot(key, mask);
        while (keys[k] != key && keys[k] != EMPTY) k = (k + 1) & mask;
        if (keys[k] == EMPTY) keys[k] = key, vals[k] = -1, used++;
        return vals[k];
    }
    void grow() {
        std::vector<uint64_t> old_keys(keys.size() * 2, EMPTY);
        std::vector<int32_t> old_vals(keys.size() * 2, -1);
        old_keys.swap(keys), old_vals.swap(vals);
        const std::size_t mask = keys.size() - 1;
        for (std::size_t i = 0; i < old_keys.size(); i++) {
            if (old_keys[i] == EMPTY) continue;
            std::size_t k = slot(old_keys[i], mask);
            while (keys[k] != EMPTY) k = (k + 1) & mask;
            keys[k] = old_keys[i], vals[k] = old_vals[i];
        }
    }
};
struct BpePairRecord {
    uint64_t key;
    long long count = 0;
    int list = -1;       // the words where the pair was formed in merge `step`
    long long step = -1;
};
struct BpeHeapEntry {
    long long count;
    uint64_t key;
    int list;
    bool operator<(const BpeHeapEntry& o) const { return count != o.count ? count < o.count : key > o.key; }
};
}  // namespace

// bpe_learn's state: the words as symbol ids in one array, each pair's count and the words it occurs
// in (listed when its count grew since the pair was last taken from the heap), and the heap of pairs.
struct BpeLearner {
    std::vector<int32_t> sym;
    std::vector<std::size_t> start;
    std::vector<int32_t> len;
    std::vector<long long> wcount;
    BpePairIndex index;
    std::vector<BpePairRecord> rec;
    std::vector<std::vector<int32_t>> lists;
    std::vector<int> free_lists;
    std::vector<int> touched;  // records given a list in this step
    long long step = 0;
    std::priority_queue<BpeHeapEntry> heap;

    // The words of the pieces, each piece's bytes as the byte symbols' ids.
    BpeLearner(const BpePieces& pieces, const std::vector<int>& byte_id) {
        std::size_t total = 0;
        for (const auto& kv : pieces.count) total += kv.first.size();
        sym.reserve(total), start.reserve(pieces.count.size()), len.reserve(pieces.count.size()), wcount.reserve(pieces.count.size());
        for (const auto& kv : pieces.count) {
            start.push_back(sym.size()), len.push_back((int32_t)kv.first.size()), wcount.push_back(kv.second);
            for (unsigned char ch : kv.first) sym.push_back(byte_id[ch]);
        }
    }
    int new_list() {
        if (!free_lists.empty()) {
            const int l = free_lists.back();
            free_lists.pop_back();
            return l;
        }
        lists.emplace_back();
        return (int)lists.size() - 1;
    }
    void release(int l) {
        std::vector<int32_t>().swap(lists[l]);
        free_lists.push_back(l);
    }
    // The count of pair (x, y) changes by delta in word w; a gain lists w with the pair.
    void add(int32_t x, int32_t y, long long delta, int32_t w) {
        const uint64_t key = (uint64_t)(uint32_t)x << 32 | (uint32_t)y;
        int32_t& v = index.at(key);
        if (v < 0) {
            v = (int32_t)rec.size();
            rec.push_back(BpePairRecord{key});
        }
        BpePairRecord& r = rec[v];
        r.count += delta;
        if (delta <= 0) return;
        if (r.step != step) r.step = step, r.list = new_list(), touched.push_back(v);
        std::vector<int32_t>& l = lists[r.list];
        if (l.empty() || l.back() != w) l.push_back(w);
    }
    // The pairs whose count grew in this step onto the heap, with their lists of words.
    void push_touched() {
        for (int v : touched) {
            BpePairRecord& r = rec[v];
            if (r.count > 0) heap.push({r.count, r.key, r.list});
            else release(r.list);
            r.list = -1;
        }
        touched.clear();
    }
    // Every pair of every word counted once, then on the heap.
    void count_pairs() {
        for (int32_t w = 0; w < (int32_t)start.size(); w++)
            for (int32_t k = 0; k + 1 < len[w]; k++) add(sym[start[w] + k], sym[start[w] + k + 1], wcount[w], w);
        push_touched();
    }
    // The most frequent pair whose count is current, popped from the heap; false when none is left.
    bool pop_best(BpeHeapEntry& top) {
        while (!heap.empty()) {
            top = heap.top();
            heap.pop();
            const long long now = rec[index.at(top.key)].count;
            if (top.count == now) return true;
            if (now > 0) top.count = now, heap.push(top);  // out of date
            else release(top.list);                       // the pair is gone everywhere
        }
        return false;
    }
    // Pair (A, B) merged into R in word w, left to right without overlap; the counts of its neighbours' pairs follow.
    void merge_in_word(int32_t w, int32_t A, int32_t B, int32_t R) {
        int32_t* s = sym.data() + start[w];
        const int32_t n = len[w];
        const long long c = wcount[w];
        int32_t r = 0;
        while (r + 1 < n && !(s[r] == A && s[r + 1] == B)) r++;
        if (r + 1 >= n) return;  // merged already (a pair listed twice) or never here
        int32_t out = r;
        while (r < n) {
            if (r + 1 < n && s[r] == A && s[r + 1] == B) {
                if (out > 0) add(s[out - 1], A, -c, w), add(s[out - 1], R, c, w);
                if (r + 2 < n) add(B, s[r + 2], -c, w), add(R, s[r + 2], c, w);
                s[out++] = R, r += 2;
            } else {
                s[out++] = s[r++];
            }
        }
        len[w] = out;
    }
};

BpeLearnt bpe_learn(const BpePieces& pieces, const BpeLearnOptions& o) {
    if (o.merges < 1) throw Error("bpe: the number of merges must be positive, got " + std::to_string(o.merges));
    if (o.min_count < 1) throw Error("bpe: the minimum count must be at least 1, got " + std::to_string(o.min_count));
    BpeLearnt b;
    std::unordered_map<std::string, int> id_of;
    const std::vector<int>& byte_id = bpe_byte_ids();
    b.tokens.assign(256, std::string());
    for (int x = 0; x < 256; x++) b.tokens[byte_id[x]] = std::string(1, (char)x);
    for (int k = 0; k < 256; k++) id_of.emplace(b.tokens[k], k);
    BpeLearner m(pieces, byte_id);
    m.count_pairs();
    BpeHeapEntry top;
    while ((long long)b.merges.size() < o.merges && m.pop_best(top)) {
        if (top.count < o.min_count) break;
        const int32_t A = (int32_t)(top.key >> 32), B = (int32_t)(top.key & 0xFFFFFFFFu);
        const std::string made = b.tokens[A] + b.tokens[B];
        auto it = id_of.find(made);
        const int32_t R = it != id_of.end() ? it->second : (int32_t)b.tokens.size();
        if (it == id_of.end()) id_of.emplace(made, R), b.tokens.push_back(made);
        b.merges.push_back({A, B, R, top.count});
        m.step++;
        std::vector<int32_t> words;
        words.swap(m.lists[top.list]);
        m.release(top.list);
        for (int32_t w : words) m.merge_in_word(w, A, B, R);
        m.push_touched();
        if (o.progress) o.progress(b);
    }
    for (const std::string& s : o.specials) {
        if (id_of.count(s)) throw Error("bpe: the special token '" + s + "' is already a token");
        id_of.emplace(s, (int)b.tokens.size()), b.tokens.push_back(s), b.specials++;
    }
    return b;
}

const char* const BPE_VOCAB_HEADER = "#version: 0.2 written by transformer bpe";  // file_has_mark sees it

static std::string bpe_symbols(const std::string& bytes) {
    std::string s;
    for (unsigned char ch : bytes) s += byte_symbol(ch);
    return s;
}

std::string bpe_encoder_json(const BpeLearnt& b) {
    std::string out = "{";
    const int first_special = (int)b.tokens.size() - b.specials;
    for (std::size_t id = 0; id < b.tokens.size(); id++)
        out += (id ? ", " : "") + json_escape((int)id < first_special ? bpe_symbols(b.tokens[id]) : b.tokens[id]) + ": " + std::to_string(id);
    return out + "}\n";
}

std::string bpe_vocab_bpe(const BpeLearnt& b) {
    std::unordered_map<uint64_t, std::size_t> last;  // pair -> its last merge
    for (std::size_t k = 0; k < b.merges.size(); k++) last[(uint64_t)(uint32_t)b.merges[k].left << 32 | (uint32_t)b.merges[k].right] = k;
    std::string out = std::string(BPE_VOCAB_HEADER) + "\n";
    for (std::size_t k = 0; k < b.merges.size(); k++) {
        const BpeMerge& m = b.merges[k];
        if (last[(uint64_t)(uint32_t)m.left << 32 | (uint32_t)m.right] != k) continue;
        out += bpe_symbols(b.tokens[m.left]) + " " + bpe_symbols(b.tokens[m.right]) + "\n";
    }
    return out;
}

void bpe_check_out_dir(const std::string& dir, const std::vector<std::string>& inputs) {
    check_output_dir(dir, "--out", {"encoder.json", "vocab.bpe"}, "vocab.bpe");  // our vocab.bpe's first line is the mark
    if (path_kind(dir) == PathKind::missing) return;  // created later: holds nothing yet
    std::vector<InputFile> in;
    for (const std::string& i : inputs) in.push_back({i, "--data"});
    check_outputs({{path_in_dir(dir, "encoder.json"), "--out encoder.json", OutputKind::in_own_dir},
                   {path_in_dir(dir, "vocab.bpe"), "--out vocab.bpe", OutputKind::in_own_dir}},
                  in);
}

void bpe_write(const std::string& dir, const BpeLearnt& b, const std::vector<std::string>& inputs) {
    bpe_check_out_dir(dir, inputs);
    const std::string enc = bpe_encoder_json(b), voc = bpe_vocab_bpe(b);
    StagedDir staged(dir);  // both files or neither (and no new directory left behind)
    try {
        write_file_atomic(staged.stage("vocab.bpe"), voc);
        write_file_atomic(staged.stage("encoder.json"), enc);
        staged.commit();
    } catch (const Error& e) {
        throw Error(staged.failure(e.what()));
    }
}

// ---- The tokenizers of the released GPT-1 and BERT (see transformer.hpp) ------------------------

static bool unicode_mark_nonspacing(uint32_t cp);  // Mn (tables at the end of this section)
static bool unicode_punctuation(uint32_t cp);      // P*
static bool unicode_control(uint32_t cp);          // Cc, Cf, Co, Cs
static bool unicode_unassigned(uint32_t cp);       // Cn
static void unicode_lower(uint32_t cp, std::vector<uint32_t>& out);
static void unicode_strip_accents(uint32_t cp, std::vector<uint32_t>& out);

// BERT's _is_chinese_char: the CJK Unified Ideographs blocks and their extensions, and the CJK
// Compatibility Ideographs (not Hangul, Hiragana or Katakana).
static bool cjk_ideograph(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}
// BERT's punctuation: every ASCII character that is neither a letter, a digit nor a space (so $ + <
// = > ^ ` | ~, which Unicode calls symbols, count), and Unicode's P*.
static bool bert_punctuation(uint32_t cp) {
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126) ||
           unicode_punctuation(cp);
}
// Hangul syllable s = 0xAC00 + (L * 21 + V) * 28 + T -> the jamo 0x1100 + L, 0x1161 + V and, for
// T > 0, 0x11A7 + T (the Unicode standard's arithmetic decomposition; no jamo is a mark).
static bool hangul_nfd(uint32_t cp, std::vector<uint32_t>& out) {
    if (cp < 0xAC00 || cp > 0xD7A3) return false;
    const uint32_t s = cp - 0xAC00, T = s % 28;
    out.push_back(0x1100 + s / (21 * 28)), out.push_back(0x1161 + (s % (21 * 28)) / 28);
    if (T) out.push_back(0x11A7 + T);
    return true;
}

std::string bert_normalize(const std::string& text) {
    std::vector<uint32_t> cps, step;
    std::vector<std::size_t> at;
    utf8_decode(text, cps, at);
    for (uint32_t cp : cps) {  // 1. clean and 2. CJK
        const bool keep_control = cp == '\t' || cp == '\n' || cp == '\r';
        if (cp == 0 || cp == 0xFFFD || (!keep_control && (unicode_control(cp) || unicode_unassigned(cp)))) continue;
        if (unicode_space(cp)) step.push_back(' ');
        else if (cjk_ideograph(cp)) step.push_back(' '), step.push_back(cp), step.push_back(' ');
        else step.push_back(cp);
    }
    std::vector<uint32_t> stripped, out;
    for (uint32_t cp : step)  // 3. NFD without the nonspacing marks
        if (!hangul_nfd(cp, stripped)) unicode_strip_accents(cp, stripped);
    for (uint32_t cp : stripped) unicode_lower(cp, out);  // 4. lower case
    return utf8_encode(out);
}

std::vector<std::string> bert_pretokenize(const std::string& normalized) {
    std::vector<uint32_t> cps;
    std::vector<std::size_t> at;
    utf8_decode(normalized, cps, at);
    std::vector<std::string> words;
    std::size_t start = 0;  // byte offset where the current word began
    bool in_word = false;
    for (std::size_t i = 0; i < cps.size(); i++) {
        const bool space = unicode_space(cps[i]), punct = !space && bert_punctuation(cps[i]);
        if ((space || punct) && in_word) words.push_back(normalized.substr(start, at[i] - start)), in_word = false;
        if (punct) words.push_back(normalized.substr(at[i], at[i + 1] - at[i]));
        else if (!space && !in_word) start = at[i], in_word = true;
    }
    if (in_word) words.push_back(normalized.substr(start));
    return words;
}

std::vector<std::string> bert_words(const std::string& text) { return bert_pretokenize(bert_normalize(text)); }

// The text split at the special tokens written in it: (piece, -1) for ordinary text, ("", id) for
// a special token (the leftmost match first, the longest at one position).
static std::vector<std::pair<std::string, int>> split_specials(const std::string& text,
                                                               const std::vector<std::pair<std::string, int>>& specials) {
    std::vector<std::pair<std::string, int>> out;
    std::size_t from = 0, i = 0;
    while (i < text.size()) {
        int best = -1;
        for (int k = 0; k < (int)specials.size(); k++)
            if (specials[k].second >= 0 && text.compare(i, specials[k].first.size(), specials[k].first) == 0 &&
                (best < 0 || specials[k].first.size() > specials[best].first.size()))
                best = k;
        if (best < 0) {
            i++;
            continue;
        }
        if (i > from) out.push_back({text.substr(from, i - from), -1});
        out.push_back({"", specials[best].second});
        i += specials[best].first.size(), from = i;
    }
    if (from < text.size()) out.push_back({text.substr(from), -1});
    return out;
}

// ---- GPT-1's BPE -------------------------------------------------------------------------------
// The merges of bpe_merges, on the word's characters with "</w>" on the last one.
std::vector<std::string> GPT1BPE::bpe(const std::string& word) const {
    std::vector<uint32_t> cps;
    std::vector<std::size_t> at;
    utf8_decode(word, cps, at);
    const int n = (int)cps.size();
    std::vector<std::string> sym(n);
    for (int i = 0; i < n; i++) sym[i] = word.substr(at[i], at[i + 1] - at[i]) + (i == n - 1 ? "</w>" : "");
    return bpe_merges(std::move(sym), ranks);
}

std::vector<int> GPT1BPE::encode(const std::string& text) const {
    std::vector<int> ids;
    std::unordered_map<std::string, std::vector<int>> done;  // words repeat: merge each once
    for (const auto& part : split_specials(text, {{"<unk>", unk}})) {
        if (part.second >= 0) {
            ids.push_back(part.second);
            continue;
        }
        for (const std::string& word : bert_words(part.first)) {
            auto it = done.find(word);
            if (it == done.end()) {
                std::vector<int> v;
                for (const std::string& s : bpe(word)) {
                    auto e = encoder.find(s);
                    if (e != encoder.end()) v.push_back(e->second);
                    else if (unk >= 0) v.push_back(unk);
                    else throw Error("GPT-1 BPE: the symbol '" + s + "' is not in the vocabulary, which has no <unk>");
                }
                it = done.emplace(word, std::move(v)).first;
            }
            ids.insert(ids.end(), it->second.begin(), it->second.end());
        }
    }
    return ids;
}

std::string GPT1BPE::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids) {
        if (id < 0 || id >= size())
            throw Error("GPT-1 BPE: token id " + std::to_string(id) + " is outside 0.." + std::to_string(size() - 1));
        const std::string& s = decoder[id];
        for (std::size_t a = 0; a < s.size();) {  // s with every "</w>" written as " "
            const std::size_t k = s.find("</w>", a);
            if (k == std::string::npos) {
                out.append(s, a, std::string::npos);
                break;
            }
            out.append(s, a, k - a);
            out += ' ';
            a = k + 4;
        }
    }
    if (!out.empty() && out.back() == ' ' && !ids.empty() && decoder[ids.back()].size() >= 4 &&
        decoder[ids.back()].compare(decoder[ids.back()].size() - 4, 4, "</w>") == 0)
        out.pop_back();  // the last word's "</w>" becomes nothing
    return out;
}

GPT1BPE make_gpt1_bpe(const std::string& encoder_json, const std::string& vocab_bpe) {
    GPT1BPE t;
    t.decoder = read_encoder(encoder_json, "encoder", "symbol", t.encoder);
    for (std::size_t id = 0; id < t.decoder.size(); id++) {
        uint32_t cp;
        for (std::size_t i = 0; i < t.decoder[id].size();) {
            const int len = utf8_next(t.decoder[id], i, cp);
            if (!len) throw Error("encoder: the symbol of id " + std::to_string(id) + " is not valid UTF-8");
            i += (std::size_t)len;
        }
    }
    auto unk = t.encoder.find("<unk>");
    t.unk = unk == t.encoder.end() ? -1 : unk->second;
    for (const MergeLine& m : read_merges(vocab_bpe, "merges")) {
        const std::string line = m.a + " " + m.b;
        for (const std::string& s : {m.a, m.b, m.a + m.b})
            if (!t.encoder.count(s))
                throw Error("merges: line " + std::to_string(m.line_no) + " ('" + line + "'): '" + s + "' is not in the encoder");
        t.ranks.emplace(line, (int)t.ranks.size());
    }
    if (t.ranks.empty()) throw Error("merges: no merges");
    // Every symbol but one character (with or without "</w>") and "<unk>" is made by one merge, so
    // fewer merges than those symbols means a cut file (GPT-1's: 40000 merges, 40478 symbols).
    long long made = 0;
    for (const auto& kv : t.encoder) {
        const std::string& w = kv.first;
        const bool eow = w.size() > 4 && w.compare(w.size() - 4, 4, "</w>") == 0;
        uint32_t cp;
        const int first = utf8_next(w, 0, cp);  // valid UTF-8: checked above
        made += w != "<unk>" && (std::size_t)first != w.size() - (eow ? 4 : 0);
    }
    if ((long long)t.ranks.size() < made)
        throw Error("merges: " + std::to_string(t.ranks.size()) + " merges, but the encoder has " + std::to_string(made) +
                    " symbols made by merges (beyond the single characters and <unk>): the file is cut short");
    return t;
}

GPT1BPE load_gpt1_bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
    return load_encoder_and_merges(encoder_json_path, vocab_bpe_path, make_gpt1_bpe);
}

// ---- llm.c's token files ------------------------------------------------------------------------
static int32_t le_int32(const std::string& b, std::size_t at) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v |= (uint32_t)(unsigned char)b[at + k] << (8 * k);
    return (int32_t)v;
}

static const std::size_t TOKEN_FILE_HEADER = 256 * 4;  // bytes: 256 int32

static const char TOKEN_FILE_MARK[] = "written by transformer";
static const std::size_t TOKEN_FILE_MARK_AT = 64;

bool is_token_file(const std::string& bytes) { return bytes.size() >= 4 && le_int32(bytes, 0) == TOKEN_FILE_MAGIC; }
bool is_own_token_file(const std::string& bytes) {
    const std::size_t n = sizeof TOKEN_FILE_MARK - 1;
    return bytes.size() >= TOKEN_FILE_MARK_AT + n && bytes.compare(TOKEN_FILE_MARK_AT, n, TOKEN_FILE_MARK) == 0;
}

std::vector<int> parse_token_file(const std::string& bytes, const std::string& name, int V) {
    const std::size_t header = TOKEN_FILE_HEADER;
    if (!is_token_file(bytes)) throw Error(name + " is not a token file (no magic " + std::to_string(TOKEN_FILE_MAGIC) + ")");
    if (bytes.size() < header)
        throw Error(name + ": the token file's header is cut short (" + std::to_string(bytes.size()) + " of " + std::to_string(header) + " bytes)");
    const int32_t version = le_int32(bytes, 4), count = le_int32(bytes, 8);
    if (version != 1)
        throw Error(name + ": token file version " + std::to_string(version) + " is not supported (version 1: uint16 ids)");
    if (count < 0) throw Error(name + ": the header's token count is negative (" + std::to_string(count) + "): a damaged file");
    if (bytes.size() != header + 2 * (std::size_t)count)
        throw Error(name + ": the header says " + std::to_string(count) + " tokens (" + std::to_string(header + 2 * (std::size_t)count) +
                    " bytes) but the file has " + std::to_string(bytes.size()) + " bytes: cut short or damaged");
    std::vector<int> ids((std::size_t)count);
    for (std::size_t i = 0; i < ids.size(); i++) {
        ids[i] = (unsigned char)bytes[header + 2 * i] | (unsigned char)bytes[header + 2 * i + 1] << 8;
        if (ids[i] >= V)
            throw Error(name + ": token " + std::to_string(i) + " is " + std::to_string(ids[i]) + ", outside the tokenizer's " +
                        std::to_string(V) + " ids (a token file of another tokenizer?)");
    }
    return ids;
}

std::string token_file_bytes(const std::vector<int>& ids) {
    if (ids.size() > (std::size_t)INT32_MAX) throw Error("a token file holds at most 2^31 - 1 tokens");
    std::string b(TOKEN_FILE_HEADER + 2 * ids.size(), '\0');
    auto put32 = [&](std::size_t at, uint32_t v) {
        for (int k = 0; k < 4; k++) b[at + k] = (char)(v >> (8 * k) & 0xFF);
    };
    put32(0, (uint32_t)TOKEN_FILE_MAGIC), put32(4, 1), put32(8, (uint32_t)ids.size());
    b.replace(TOKEN_FILE_MARK_AT, sizeof TOKEN_FILE_MARK - 1, TOKEN_FILE_MARK);
    for (std::size_t i = 0; i < ids.size(); i++) {
        if (ids[i] < 0 || ids[i] > 65535) throw Error("token " + std::to_string(ids[i]) + " does not fit a token file's uint16");
        b[TOKEN_FILE_HEADER + 2 * i] = (char)(ids[i] & 0xFF), b[TOKEN_FILE_HEADER + 2 * i + 1] = (char)(ids[i] >> 8);
    }
    return b;
}

// ---- BERT's WordPiece ----------------------------------------------------------------------------
std::vector<int> WordPiece::wordpiece(const std::string& word) const {
    std::vector<uint32_t> cps;
    std::vector<std::size_t> at;
    utf8_decode(word, cps, at);
    const int n = (int)cps.size();
    if (n > max_chars) return {unk};
    std::vector<int> out;
    for (int start = 0; start < n;) {  // the longest piece from start, "##" after the first
        int end = n, id = -1;
        for (; end > start; end--) {
            const std::string piece = (start > 0 ? "##" : "") + word.substr(at[start], at[end] - at[start]);
            auto it = vocab.find(piece);
            if (it != vocab.end()) {
                id = it->second;
                break;
            }
        }
        if (id < 0) return {unk};
        out.push_back(id), start = end;
    }
    return out;
}

std::vector<int> WordPiece::encode(const std::string& text) const {
    std::vector<int> ids;
    for (const auto& part : split_specials(text, {{"[PAD]", pad}, {"[UNK]", unk}, {"[CLS]", cls}, {"[SEP]", sep}, {"[MASK]", mask}})) {
        if (part.second >= 0) {
            ids.push_back(part.second);
            continue;
        }
        for (const std::string& word : bert_words(part.first)) {
            const std::vector<int> v = wordpiece(word);
            ids.insert(ids.end(), v.begin(), v.end());
        }
    }
    return ids;
}

std::string WordPiece::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids) {
        if (id < 0 || id >= size())
            throw Error("WordPiece: token id " + std::to_string(id) + " is outside 0.." + std::to_string(size() - 1));
        const std::string& t = tokens[id];
        if (t.size() > 2 && t.compare(0, 2, "##") == 0 && !out.empty()) out += t.substr(2);
        else out += (out.empty() ? "" : " ") + t;
    }
    return out;
}

WordPiece make_wordpiece(const std::string& vocab_txt) {
    WordPiece w;
    std::size_t from = 0;
    int line_no = 0;
    while (from < vocab_txt.size()) {
        std::size_t end = vocab_txt.find('\n', from);
        if (end == std::string::npos) end = vocab_txt.size();
        std::string tok = vocab_txt.substr(from, end - from);
        from = end + 1, line_no++;
        if (!tok.empty() && tok.back() == '\r') tok.pop_back();
        const std::string where = "vocab.txt: line " + std::to_string(line_no);
        if (tok.empty()) throw Error(where + " is empty (one token per line)");
        uint32_t cp;
        for (std::size_t i = 0; i < tok.size();) {
            const int len = utf8_next(tok, i, cp);
            if (!len) throw Error(where + " is not valid UTF-8");
            i += (std::size_t)len;
        }
        if (!w.vocab.emplace(tok, (int)w.tokens.size()).second) throw Error(where + ": the token '" + tok + "' is given twice");
        w.tokens.push_back(tok);
    }
    auto id = [&](const char* s) {
        auto it = w.vocab.find(s);
        return it == w.vocab.end() ? -1 : it->second;
    };
    w.unk = id("[UNK]"), w.cls = id("[CLS]"), w.sep = id("[SEP]"), w.mask = id("[MASK]"), w.pad = id("[PAD]");
    if (w.tokens.empty()) throw Error("vocab.txt: no tokens");
    if (w.unk < 0) throw Error("vocab.txt: has no [UNK] token");
    return w;
}

WordPiece load_wordpiece(const std::string& vocab_txt_path) {
    const std::string text = read_file(vocab_txt_path);
    try {
        return make_wordpiece(text);
    } catch (const Error& e) {
        throw Error("'" + vocab_txt_path + "': " + e.what());
    }
}

// ---- One tokenizer for the commands (Tokenizer's methods: "The tokenizer of a checkpoint") ----
bool is_bidirectional_tokenizer(const std::string& kind) { return kind == "bert-wordpiece" || kind == "roberta-bpe"; }

void subword_special_ids(const Tokenizer& t, Config& c) {
    if (t.kind == "bert-wordpiece") {
        if (t.wordpiece.cls < 0 || t.wordpiece.sep < 0 || t.wordpiece.mask < 0) throw Error("the WordPiece vocabulary lacks [CLS], [SEP] or [MASK]");
        c.cls_id = t.wordpiece.cls, c.sep_id = t.wordpiece.sep, c.mask_id = t.wordpiece.mask;
        if (c.variant == Variant::roberta) c.pad_id = t.wordpiece.pad;  // -1 without [PAD]
    } else if (t.kind == "roberta-bpe") {
        c.cls_id = t.bpe.encoder.at("<s>"), c.sep_id = t.bpe.encoder.at("</s>"), c.mask_id = t.bpe.encoder.at("<mask>");
        if (c.variant == Variant::roberta) c.pad_id = t.bpe.encoder.at("<pad>");  // RoBERTa's positions skip it
    } else {
        throw Error("the tokenizer " + t.kind + " has no [CLS], [SEP], [MASK] (it goes with next-token models)");
    }
}

const char* tokenizer_title(const std::string& kind) {
    if (kind == "gpt2-bpe") return "GPT-2's byte-level BPE";
    if (kind == "gpt1-bpe") return "GPT-1's BPE";
    if (kind == "roberta-bpe") return "RoBERTa's byte-level BPE";
    if (kind == "bert-wordpiece") return "BERT's WordPiece";
    return "characters";
}
static const char* const SUBWORD_KINDS = "gpt2-bpe, gpt1-bpe, roberta-bpe or bert-wordpiece";
static bool is_subword_kind(const std::string& k) {
    return k == "gpt2-bpe" || k == "gpt1-bpe" || k == "roberta-bpe" || k == "bert-wordpiece";
}
std::string tokenizer_kind_of(const std::string& encoder_text, const std::string& vocab_text) {
    if (encoder_text.empty()) {
        if (vocab_text.compare(0, 1, "{") == 0) return "unknown (a JSON file where vocab.txt was expected)";
        return vocab_text.rfind("#version", 0) == 0 ? "unknown (a merge list where vocab.txt was expected)" : "bert-wordpiece";
    }
    if (encoder_text.find("</w>\"") != std::string::npos) return "gpt1-bpe";
    if (encoder_text.find("\"\\u0120") != std::string::npos || encoder_text.find("\"\xC4\xA0") != std::string::npos)
        return encoder_text.find("\"<mask>\"") != std::string::npos ? "roberta-bpe" : "gpt2-bpe";
    return "unknown (an encoder with neither \"</w>\" nor byte symbols)";
}

Tokenizer load_tokenizer(const std::string& kind, const std::string& encoder_path, const std::string& vocab_path) {
    if (vocab_path.empty()) throw Error("a tokenizer needs its vocabulary file");
    const std::string enc = encoder_path.empty() ? std::string() : read_file(encoder_path);
    const std::string voc = read_file(vocab_path);
    const std::string files = encoder_path.empty() ? "'" + vocab_path + "'" : "'" + encoder_path + "', '" + vocab_path + "'";
    const std::string found = tokenizer_kind_of(enc, voc);
    if (!kind.empty() && !is_subword_kind(kind)) throw Error("unknown tokenizer '" + kind + "' (expected " + SUBWORD_KINDS + ")");
    if (found.rfind("unknown", 0) == 0) throw Error(files + ": not a tokenizer this program knows: " + found);
    if (!kind.empty() && kind != found)
        throw Error(files + ": these are " + found + " files, not " + kind +
                    (kind == "bert-wordpiece" ? " (WordPiece takes vocab.txt alone, without an encoder)" : ""));
    return make_tokenizer(found, enc, voc, files);
}

// ---- The tokenizer of a checkpoint (see transformer.hpp) ----------------------------------------

int Tokenizer::size() const {
    if (kind == "gpt2-bpe" || kind == "roberta-bpe") return bpe.size();
    if (kind == "gpt1-bpe") return gpt1.size();
    if (kind == "bert-wordpiece") return wordpiece.size();
    return chars.size();
}

std::vector<int> Tokenizer::encode(const std::string& text, const std::string& where) const {
    if (kind == "gpt2-bpe") return bpe.encode(text);
    if (kind == "roberta-bpe") return roberta_encode(bpe, text);
    if (kind == "gpt1-bpe") return gpt1.encode(text);
    if (kind == "bert-wordpiece") return wordpiece.encode(text);
    if (kind == "char") return chars.encode(text, where);
    throw Error("no tokenizer to encode " + where + " with");
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
    if (kind == "gpt2-bpe" || kind == "roberta-bpe") return bpe.decode(ids);
    if (kind == "gpt1-bpe") return gpt1.decode(ids);
    if (kind == "bert-wordpiece") return wordpiece.decode(ids);
    if (kind == "char") return chars.decode(ids);
    throw Error("no tokenizer to decode with");
}

std::map<std::string, std::string> Tokenizer::metadata() const {
    if (kind == "gpt2-bpe" || kind == "gpt1-bpe" || kind == "roberta-bpe")
        return {{"tokenizer", kind}, {"tokenizer.encoder_json", encoder_json}, {"tokenizer.vocab_bpe", vocab}};
    if (kind == "bert-wordpiece") return {{"tokenizer", kind}, {"tokenizer.vocab_txt", vocab}};
    if (kind == "char") return {{"vocab", chars.to_metadata()}};  // a character vocabulary
    return {};
}

Tokenizer make_tokenizer(const std::string& kind, const std::string& encoder_text, const std::string& vocab_text,
                         const std::string& where) {
    Tokenizer t;
    t.kind = kind, t.encoder_json = encoder_text, t.vocab = vocab_text;
    try {
        if (kind == "gpt2-bpe" || kind == "roberta-bpe") t.bpe = make_bpe(encoder_text, vocab_text);
        else if (kind == "gpt1-bpe") t.gpt1 = make_gpt1_bpe(encoder_text, vocab_text);
        else if (kind == "bert-wordpiece") t.wordpiece = make_wordpiece(vocab_text);
        else throw Error("unknown tokenizer '" + kind + "' (expected " + SUBWORD_KINDS + ")");
        if (kind == "roberta-bpe")
            for (const char* special : {"<s>", "<pad>", "</s>", "<unk>", "<mask>"})
                if (!t.bpe.encoder.count(special)) throw Error(std::string("vocab.json lacks RoBERTa's special token ") + special);
    } catch (const Error& e) {
        throw Error(where + ": " + e.what());
    }
    return t;
}

Tokenizer gpt2_tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
    return make_tokenizer("gpt2-bpe", read_file(encoder_json_path), read_file(vocab_bpe_path),
                          "GPT-2's tokenizer from '" + encoder_json_path + "' and '" + vocab_bpe_path + "'");
}

Tokenizer tokenizer_of(const std::map<std::string, std::string>& m, const std::string& path) {
    Tokenizer t;
    const auto kind = m.find("tokenizer");
    if (kind == m.end()) {
        if (m.count("vocab")) t.kind = "char", t.chars = CharVocab::from_metadata(m.at("vocab"));
        return t;
    }
    const std::string& k = kind->second;
    if (!is_subword_kind(k))
        throw Error("'" + path + "' records the tokenizer '" + k + "', which this program does not know (it knows " +
                    SUBWORD_KINDS + " and characters)");
    const bool bpe = k != "bert-wordpiece";
    for (const char* key : bpe ? std::vector<const char*>{"tokenizer.encoder_json", "tokenizer.vocab_bpe"}
                               : std::vector<const char*>{"tokenizer.vocab_txt"})
        if (!m.count(key)) throw Error("'" + path + "': its tokenizer " + k + " lacks " + key);
    return make_tokenizer(k, bpe ? m.at("tokenizer.encoder_json") : "", m.at(bpe ? "tokenizer.vocab_bpe" : "tokenizer.vocab_txt"),
                          "'" + path + "': its recorded tokenizer");
}

// A text the tokenizer refused: the first byte that is not UTF-8, with the file (or flag) it is in
// (a quoted file name also gets the question whether it is a binary file).
static void check_utf8(const std::string& text, const std::string& where) {
    std::size_t line = 1, line_start = 0;
    for (std::size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        const int len = utf8_next(text, i, cp);
        if (len == 0) {
            char buf[160];
            std::snprintf(buf, sizeof buf, " is not UTF-8 text: byte 0x%02X at byte offset %zu (line %zu, byte %zu of the line)",
                          (unsigned)(unsigned char)text[i], i, line, i - line_start + 1);
            throw Error(where + buf + (where[0] == '\'' ? "; is it a binary file?" : ""));
        }
        if (text[i] == '\n') line++, line_start = i + 1;
        i += (std::size_t)len;
    }
}

static std::vector<int> encode_with_progress_unchecked(const Tokenizer& t, const std::string& text, const std::string& where,
                                                       bool quiet) {
    if (t.kind != "gpt2-bpe" || quiet || text.size() < (1u << 20)) return t.encode(text, where);
    // BPE::encode with a line every ~10% of the text.
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    // Each line names the bytes read so far; the count of the whole text comes once, at the end.
    const std::string what = "encoding " + where + " (a byte-level BPE of " + std::to_string(t.size()) + " tokens)";
    std::size_t next_report = text.size() / 10;
    std::vector<int> ids = t.bpe.encode(text, [&](std::size_t bytes, std::size_t ids) {
        if (bytes < next_report || bytes >= text.size()) return;
        std::fprintf(stderr, "%s: %3.0f%% of the bytes, %zu tokens so far, %.1f s\n", what.c_str(), 100.0 * (double)bytes / (double)text.size(),
                     ids, std::chrono::duration<double>(clock::now() - t0).count());
        next_report += text.size() / 10;
    });
    std::fprintf(stderr, "%s: done, %zu tokens in %.1f s\n", what.c_str(), ids.size(),
                 std::chrono::duration<double>(clock::now() - t0).count());
    return ids;
}

std::vector<int> encode_with_progress(const Tokenizer& t, const std::string& text, const std::string& where, bool quiet) {
    try {
        return encode_with_progress_unchecked(t, text, where, quiet);
    } catch (const Error&) {
        check_utf8(text, where);  // a binary file: say which file and where, not only "text"
        throw;
    }
}

const char* const HF_CHAR_OUTSIDE = "<a character outside this model's vocabulary>";

// ---- The tokenizer's files for Hugging Face (see hf_tokenizer_files in transformer.hpp) ----------
static bool is_bpe_special(const std::string& w);
namespace {
std::string tj_bool(bool b) { return b ? "true" : "false"; }
// One entry of tokenizer.json's added_tokens: a special token matched in the text before the model.
std::string tj_added(int id, const std::string& content, bool lstrip = false, bool normalized = false) {
    return "    {\"id\": " + std::to_string(id) + ", \"content\": " + json_escape(content) + ", \"single_word\": false, \"lstrip\": " +
           tj_bool(lstrip) + ", \"rstrip\": false, \"normalized\": " + tj_bool(normalized) + ", \"special\": true}";
}
// {"token": id, ...} in id order.
std::string tj_vocab(const std::vector<std::string>& by_id) {
    std::string v = "{";
    for (std::size_t i = 0; i < by_id.size(); i++) v += (i ? ",\n      " : "\n      ") + json_escape(by_id[i]) + ": " + std::to_string(i);
    return v + "\n    }";
}
// The merges of vocab.bpe / merges.txt in order, each "A B", as make_bpe and make_gpt1_bpe read them.
static std::vector<std::string> merge_lines(const std::string& vocab_bpe) {
    std::vector<std::string> out;
    for (const MergeLine& m : read_merges(vocab_bpe, "merges")) out.push_back(m.a + " " + m.b);
    return out;
}
// merges.txt as the slow classes read it: they drop the first line and the last (empty) one.
std::string merges_txt(const std::string& vocab_bpe) {
    std::string m = "#version: 0.2\n";
    for (const std::string& line : merge_lines(vocab_bpe)) m += line + "\n";
    return m;
}
std::string tj_bpe_model(const std::vector<std::string>& by_id, const std::vector<std::string>& merges, const std::string& unk,
                         const std::string& suffix) {
    std::string m = "{\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": " + (unk.empty() ? "null" : json_escape(unk)) +
                    ",\n    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": " + json_escape(suffix) +
                    ",\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"vocab\": " + tj_vocab(by_id) + ",\n    \"merges\": [";
    for (std::size_t i = 0; i < merges.size(); i++) m += (i ? ",\n      " : "\n      ") + json_escape(merges[i]);
    return m + (merges.empty() ? "]\n  }" : "\n    ]\n  }");
}
const char* const TJ_BYTE_LEVEL_PRE = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}";
const char* const TJ_BYTE_LEVEL_DEC = "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true}";
const char* const TJ_BERT_NORMALIZER =
    "{\"type\": \"BertNormalizer\", \"clean_text\": true, \"handle_chinese_chars\": true, \"strip_accents\": null, \"lowercase\": true}";
std::string tj_whole(const std::vector<std::string>& added, const std::string& normalizer, const std::string& pre,
                     const std::string& post, const std::string& decoder, const std::string& model) {
    std::string j = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
    for (std::size_t i = 0; i < added.size(); i++) j += (i ? ",\n" : "\n") + added[i];
    j += added.empty() ? "],\n" : "\n  ],\n";
    j += "  \"normalizer\": " + normalizer + ",\n  \"pre_tokenizer\": " + pre + ",\n  \"post_processor\": " + post +
         ",\n  \"decoder\": " + decoder + ",\n  \"model\": " + model + "\n}\n";
    return j;
}
// tokenizer_config.json: the class AutoTokenizer builds and the special tokens (null: none).
std::string tokenizer_config(const std::string& cls, int n_ctx, const std::vector<std::pair<std::string, std::string>>& fields) {
    std::string j = "{\n  \"tokenizer_class\": \"" + cls + "\",\n  \"model_max_length\": " + std::to_string(n_ctx) +
                    ",\n  \"clean_up_tokenization_spaces\": false";
    for (const auto& kv : fields) j += ",\n  \"" + kv.first + "\": " + kv.second;
    return j + "\n}\n";
}
std::string token_or_null(const std::unordered_map<std::string, int>& vocab, const std::string& token) {
    return vocab.count(token) ? json_escape(token) : "null";
}
}  // namespace

std::vector<std::pair<std::string, std::string>> hf_tokenizer_files(const Tokenizer& t, const Config& c) {
    std::vector<std::pair<std::string, std::string>> files;
    const bool masked = c.variant == Variant::bert || c.variant == Variant::roberta;
    if (t.kind == "gpt2-bpe" || t.kind == "roberta-bpe") {
        std::vector<std::string> by_id(t.bpe.size());
        for (const auto& kv : t.bpe.encoder) by_id[kv.second] = kv.first;
        const bool roberta = t.kind == "roberta-bpe";
        std::vector<std::string> added;
        for (int id = 0; id < (int)by_id.size(); id++)
            if (is_bpe_special(by_id[id])) added.push_back(tj_added(id, by_id[id], roberta && by_id[id] == "<mask>", !(roberta && by_id[id] == "<mask>")));
        std::string post = "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true}";
        if (roberta)
            post = "{\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", " + std::to_string(t.bpe.encoder.at("</s>")) + "], \"cls\": [\"<s>\", " +
                   std::to_string(t.bpe.encoder.at("<s>")) + "], \"trim_offsets\": true, \"add_prefix_space\": false}";
        files.push_back({"vocab.json", t.encoder_json});
        files.push_back({"merges.txt", merges_txt(t.vocab)});
        files.push_back({"tokenizer.json", tj_whole(added, "null", TJ_BYTE_LEVEL_PRE, post, TJ_BYTE_LEVEL_DEC,
                                                    tj_bpe_model(by_id, merge_lines(t.vocab), "", ""))});
        const std::string eot = token_or_null(t.bpe.encoder, "<|endoftext|>");
        if (roberta)
            files.push_back({"tokenizer_config.json",
                             tokenizer_config("RobertaTokenizer", c.n_ctx,
                                              {{"add_prefix_space", "false"}, {"trim_offsets", "true"}, {"bos_token", "\"<s>\""},
                                               {"cls_token", "\"<s>\""}, {"eos_token", "\"</s>\""}, {"sep_token", "\"</s>\""},
                                               {"unk_token", "\"<unk>\""}, {"pad_token", "\"<pad>\""}, {"mask_token", "\"<mask>\""}})});
        else
            files.push_back({"tokenizer_config.json",
                             tokenizer_config("GPT2Tokenizer", c.n_ctx,
                                              {{"add_prefix_space", "false"}, {"bos_token", eot}, {"eos_token", eot}, {"unk_token", eot}})});
    } else if (t.kind == "gpt1-bpe") {
        std::vector<std::string> added;
        if (t.gpt1.unk >= 0) added.push_back(tj_added(t.gpt1.unk, "<unk>"));
        files.push_back({"vocab.json", t.encoder_json});
        files.push_back({"merges.txt", merges_txt(t.vocab)});
        files.push_back({"tokenizer.json", tj_whole(added, TJ_BERT_NORMALIZER, "{\"type\": \"BertPreTokenizer\"}", "null",
                                                    "{\"type\": \"BPEDecoder\", \"suffix\": \"</w>\"}",
                                                    tj_bpe_model(t.gpt1.decoder, merge_lines(t.vocab), "<unk>", "</w>"))});
        files.push_back({"tokenizer_config.json", tokenizer_config("OpenAIGPTTokenizer", c.n_ctx, {{"unk_token", "\"<unk>\""}})});
    } else if (t.kind == "bert-wordpiece") {
        const WordPiece& w = t.wordpiece;
        std::vector<std::string> added;
        for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
            if (w.vocab.count(special)) added.push_back(tj_added(w.vocab.at(special), special));
        std::sort(added.begin(), added.end(), [](const std::string& a, const std::string& b) {  // by id, as the library keeps them
            return std::atoi(a.c_str() + a.find(':') + 1) < std::atoi(b.c_str() + b.find(':') + 1);
        });
        std::string post = "null";
        if (w.cls >= 0 && w.sep >= 0) {  // [CLS] A [SEP] and [CLS] A [SEP] B [SEP], B with token type 1 (w_B)
            auto tok = [](const char* k, const char* id, int type) {
                return std::string("{\"") + k + "\": {\"id\": \"" + id + "\", \"type_id\": " + std::to_string(type) + "}}";
            };
            post = "{\"type\": \"TemplateProcessing\", \"single\": [" + tok("SpecialToken", "[CLS]", 0) + ", " + tok("Sequence", "A", 0) +
                   ", " + tok("SpecialToken", "[SEP]", 0) + "], \"pair\": [" + tok("SpecialToken", "[CLS]", 0) + ", " +
                   tok("Sequence", "A", 0) + ", " + tok("SpecialToken", "[SEP]", 0) + ", " + tok("Sequence", "B", 1) + ", " +
                   tok("SpecialToken", "[SEP]", 1) + "], \"special_tokens\": {\"[CLS]\": {\"id\": \"[CLS]\", \"ids\": [" +
                   std::to_string(w.cls) + "], \"tokens\": [\"[CLS]\"]}, \"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [" + std::to_string(w.sep) +
                   "], \"tokens\": [\"[SEP]\"]}}}";
        }
        std::string vocab_txt;
        for (const std::string& token : w.tokens) vocab_txt += token + "\n";
        files.push_back({"vocab.txt", vocab_txt});
        files.push_back({"tokenizer.json",
                         tj_whole(added, TJ_BERT_NORMALIZER, "{\"type\": \"BertPreTokenizer\"}", post,
                                  "{\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true}",
                                  "{\n    \"type\": \"WordPiece\",\n    \"unk_token\": \"[UNK]\",\n    \"continuing_subword_prefix\": \"##\",\n"
                                  "    \"max_input_chars_per_word\": " + std::to_string(w.max_chars) + ",\n    \"vocab\": " + tj_vocab(w.tokens) + "\n  }")});
        files.push_back({"tokenizer_config.json",
                         tokenizer_config("BertTokenizer", c.n_ctx,
                                          {{"do_lower_case", "true"}, {"tokenize_chinese_chars", "true"}, {"strip_accents", "null"},
                                           {"unk_token", token_or_null(w.vocab, "[UNK]")}, {"sep_token", token_or_null(w.vocab, "[SEP]")},
                                           {"pad_token", token_or_null(w.vocab, "[PAD]")}, {"cls_token", token_or_null(w.vocab, "[CLS]")},
                                           {"mask_token", token_or_null(w.vocab, "[MASK]")}})});
    } else if (t.kind == "char") {
        // Each byte of the text is one id: a byte-level model without merges (each byte's symbol, as
        // GPT-2's bytes_to_unicode writes it, mapped to the byte's id) behind a ByteLevel pre-tokeniser
        // that does not split. BERT's and RoBERTa's three special ids follow the characters.
        std::vector<std::string> by_id;
        for (unsigned char ch : t.chars.chars) by_id.push_back(bytes_to_unicode(ch));
        std::vector<std::string> added;
        std::vector<std::pair<std::string, std::string>> fields;
        if (masked) {
            const bool roberta = c.variant == Variant::roberta;
            const std::string names[3] = {roberta ? "<s>" : "[CLS]", roberta ? "</s>" : "[SEP]", roberta ? "<mask>" : "[MASK]"};
            const int ids[3] = {c.cls_id, c.sep_id, c.mask_id};
            for (int k = 0; k < 3; k++) added.push_back(tj_added(ids[k], names[k]));
            fields = {{"cls_token", json_escape(names[0])}, {"sep_token", json_escape(names[1])}, {"mask_token", json_escape(names[2])}};
            if (roberta) fields.insert(fields.begin(), {{"bos_token", json_escape(names[0])}, {"eos_token", json_escape(names[1])}});
        }
        // A byte outside the vocabulary: `transformer tokenize` refuses the text, and so does the
        // tokenizers library, because the model's unk_token is a name that is not in its vocabulary
        // ("Unk token `...` not found in the vocabulary"); with no unk_token it would drop the byte.
        files.push_back({"tokenizer.json",
                         tj_whole(added, "null", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}",
                                  "null", TJ_BYTE_LEVEL_DEC, tj_bpe_model(by_id, {}, HF_CHAR_OUTSIDE, ""))});
        files.push_back({"tokenizer_config.json", tokenizer_config("PreTrainedTokenizerFast", c.n_ctx, fields)});
    }
    return files;
}

// ================================================================================================
// MODEL FILES: whose file a path is, safetensors, checkpoints, Hugging Face import, load_model,
// export to the Hugging Face classes
// ================================================================================================

// ---- Whose file is it? ---------------------------------------------------------------------------
// Every kind of file this program writes carries a mark it can recognise later: the key
// "written_by": "transformer" in a safetensors file's metadata and in an exported config.json, a
// comment in an SVG picture, the text below in a token file's header. Logs and task files are
// recognised by their format. Only such files (and empty ones) are ever replaced, so an --out that
// names a released model, a source file or somebody's picture fails before any work.
const char* const WRITTEN_BY_KEY = "written_by";
const char* const WRITTEN_BY = "transformer";
const char* const SVG_MARK = "<!-- written by transformer -->";

// The metadata of a safetensors file (empty if the header is not a JSON object of such a file).
static std::map<std::string, std::string> safetensors_metadata(const std::string& p) {
    std::map<std::string, std::string> m;
    std::FILE* f = open_file(p, "rb");
    if (!f) return m;
    unsigned char size_le[8];
    uint64_t n = 0;
    std::string header;
    if (std::fread(size_le, 1, 8, f) == 8) {
        for (int k = 0; k < 8; k++) n |= (uint64_t)size_le[k] << (8 * k);
        if (n > 0 && n <= ((uint64_t)1 << 27)) {
            header.resize((std::size_t)n);
            if (std::fread(&header[0], 1, header.size(), f) != header.size()) header.clear();
        }
    }
    std::fclose(f);
    if (header.empty() || header[0] != '{') return m;
    try {
        const Json j = parse_json(header);
        if (const Json* meta = j.get("__metadata__"))
            for (auto& kv : meta->obj)
                if (kv.second.type == Json::string) m[kv.first] = kv.second.str;
    } catch (const Error&) {
        m.clear();
    }
    return m;
}

// Every line of head (the complete lines of a file's start) is one of the built-in tasks' lines:
// "566+745=1131" (text) or a lower-case label or digit, then tab-separated digits and '+'
// ("big\t566+745", "3\t566+745\t3571\t8880\t5251\t1131").
static bool is_task_text(const std::string& head) {
    std::size_t lines = 0;
    for (std::size_t i = 0; i < head.size();) {
        std::size_t e = head.find('\n', i);
        if (e == std::string::npos) break;
        const std::string line = head.substr(i, e - i);
        i = e + 1, lines++;
        const std::size_t tab = line.find('\t');
        if (tab == std::string::npos) {  // a[+]b=c, digits only
            const std::size_t plus = line.find('+'), eq = line.find('=');
            if (plus == 0 || plus == std::string::npos || eq == std::string::npos || eq <= plus + 1 || eq + 1 == line.size()) return false;
            for (std::size_t k = 0; k < line.size(); k++)
                if (k != plus && k != eq && !std::isdigit((unsigned char)line[k])) return false;
            continue;
        }
        if (tab == 0) return false;
        for (std::size_t k = 0; k < tab; k++)
            if (!std::islower((unsigned char)line[k]) && !std::isdigit((unsigned char)line[k])) return false;
        for (std::size_t k = tab; k < line.size(); k++)
            if (line[k] != '\t' && line[k] != '+' && !std::isdigit((unsigned char)line[k])) return false;
        if (line.back() == '\t') return false;
    }
    return lines > 0;
}

// Does the existing regular file at p hold what this program writes as `kind`? (Only such files,
// and empty ones, are ever replaced.)
static bool holds_kind(const std::string& p, OutputKind kind) {
    std::FILE* f = open_file(p, "rb");
    if (!f) return false;
    std::string h(1 << 16, '\0');
    const std::size_t got = std::fread(&h[0], 1, h.size(), f);
    std::fclose(f);
    if (got == 0) return true;  // an empty file
    h.resize(got);
    switch (kind) {
        case OutputKind::checkpoint: {  // ours, or a checkpoint of this program from before the mark
            const std::map<std::string, std::string> m = safetensors_metadata(p);
            auto it = m.find(WRITTEN_BY_KEY);
            return (it != m.end() && it->second == WRITTEN_BY) || (m.count("variant") && m.count("V") && m.count("n_ctx"));
        }
        case OutputKind::csv_log: return h.rfind("step,train_loss,val_loss,lr", 0) == 0;
        case OutputKind::svg_plot: return h.find(SVG_MARK) < 512;
        case OutputKind::html_page: return h.find(SVG_MARK) < 512;
        case OutputKind::task_file: return is_task_text(h);
        case OutputKind::token_file: return is_token_file(h) && is_own_token_file(h);
        case OutputKind::in_own_dir: return true;  // check_output_dir recognised the directory
    }
    return false;
}
static const char* kind_name(OutputKind k) {
    switch (k) {
        case OutputKind::checkpoint: return "a checkpoint written by this program";
        case OutputKind::csv_log: return "a CSV log written by this program";
        case OutputKind::svg_plot: return "an SVG picture written by this program";
        case OutputKind::html_page: return "an HTML page written by this program";
        case OutputKind::task_file: return "a task file written by this program";
        case OutputKind::token_file: return "a token file written by this program";
        case OutputKind::in_own_dir: return "a file of a directory this program wrote";
    }
    return "?";
}

void check_outputs(const std::vector<OutputFile>& outputs, const std::vector<InputFile>& inputs) {
    std::vector<std::string> ids;
    for (const OutputFile& o : outputs) {
        const std::string what = o.role + " '" + o.path + "'";
        if (o.path.empty()) throw Error(o.role + " is empty");
        auto check_kind = [&](PathKind k) {
            if (k == PathKind::directory) throw Error("cannot write " + what + ": it is a directory");
            if (k == PathKind::fifo) throw Error("cannot write " + what + ": it is a FIFO or pipe, not a regular file");
            if (k == PathKind::device) throw Error("cannot write " + what + ": it is a device, not a regular file");
            if (k != PathKind::regular && k != PathKind::missing) throw Error("cannot write " + what + ": it is not a regular file");
        };
        // The kernel's own view first: on Linux /dev/stdout -> /proc/self/fd/1 -> "pipe:[...]" is a
        // link whose text names no file, so only stat through it sees the pipe or terminal; on macOS
        // /dev/stdout -> /dev/fd/1, whose stat is the open file's as well.
        check_kind(path_kind(o.path));
        const std::string p = resolve_output_path(o.path);
        const std::string dir = dir_of(p);
        const PathKind dir_kind = path_kind(dir);
        if (dir_kind == PathKind::missing) throw Error("cannot write " + what + ": directory '" + dir + "' does not exist");
        if (dir_kind != PathKind::directory) throw Error("cannot write " + what + ": '" + dir + "' is not a directory");
        if (!directory_writable(dir))
            throw Error("cannot write " + what + ": directory '" + dir + "' is not writable (" + std::strerror(errno) + ")");
        check_kind(path_kind(p));
        ids.push_back(file_identity(o.path));
        for (std::size_t j = 0; j + 1 < ids.size(); j++)
            if (ids[j] == ids.back())
                throw Error(outputs[j].role + " '" + outputs[j].path + "' and " + what + " are the same file; choose another --out");
    }
    for (const InputFile& in : inputs) {
        if (in.path.empty()) continue;
        const std::string id = file_identity(in.path);
        for (std::size_t j = 0; j < outputs.size(); j++)
            if (ids[j] == id && !(in.may_be_replaced && outputs[j].kind == OutputKind::checkpoint))
                throw Error(outputs[j].role + " '" + outputs[j].path + "' would overwrite " + in.role + " '" + in.path +
                            "', which this command reads; choose another --out");
    }
    for (const OutputFile& o : outputs) {  // last: an existing file must be one this program writes
        const std::string p = resolve_output_path(o.path);
        if (path_kind(p) != PathKind::missing && !holds_kind(p, o.kind))
            throw Error("refusing to replace " + o.role + " '" + o.path + "': it exists and is not " + kind_name(o.kind) +
                        " (only files this program wrote are replaced; remove it or choose another name)");
    }
}

std::FILE* open_input(const std::string& path) {
    std::FILE* f = open_file(path, "rb");
    if (!f) throw Error("cannot open '" + path + "': " + std::strerror(errno));
    if (is_directory(f)) {
        std::fclose(f);
        throw Error("cannot read '" + path + "': it is a directory, not a file");
    }
    return f;
}

void require_text(const std::string& text, const std::string& path) {
    std::size_t odd = 0, first = 0;
    for (std::size_t i = 0; i < text.size(); i++) {
        const unsigned char ch = (unsigned char)text[i];
        if (ch != 0 && (ch >= 32 || ch == '\n' || ch == '\r' || ch == '\t')) continue;
        if (odd++ == 0) first = i;  // a control byte: count it, and remember where the first one is
    }
    if (odd * 100 <= text.size()) return;
    char buf[160];
    std::snprintf(buf, sizeof buf, "' looks binary, not text: %zu control bytes, the first 0x%02X at byte offset %zu", odd,
                  (unsigned)(unsigned char)text[first], first);
    throw Error("'" + path + buf);
}

std::string line_end_warning(const std::string& text, const std::string& path) {
    const std::size_t cr = (std::size_t)std::count(text.begin(), text.end(), '\r');
    if (cr == 0) return "";
    return "warning: '" + path + "' has " + std::to_string(cr) + (cr == 1 ? " CR byte" : " CR bytes") +
           " (Windows ends its lines with CR LF): each CR is a character of the text like any other, with tokens of its own, "
           "so the vocabulary and every number differ from those of the same text with LF line ends; if that is not meant, "
           "convert it first: dos2unix '" + path + "' (or tr -d '\\r' < IN > OUT)";
}

std::string read_file(const std::string& path) {
    std::FILE* f = open_input(path);
    std::string out;
    char buf[1 << 16];
    std::size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, got);
    const bool bad = std::ferror(f);
    std::fclose(f);
    if (bad) throw Error("cannot read '" + path + "'");
    return out;
}

TF_COLD_END
// ---- safetensors ---------------------------------------------------------------------------------
const Tensor<float>* SafeTensors::find(const std::string& name) const {
    for (auto& kv : tensors)
        if (kv.first == name) return &kv.second;
    return nullptr;
}

// Layout: u64 little-endian N | N bytes JSON {"name": {"dtype": "F32", "shape": [...],
// "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}} | data. Offsets count
// from the start of the data. The header is padded with spaces to a multiple of 8 bytes.
void save_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                      const std::vector<std::pair<std::string, const Tensor<float>*>>& tensors) {
    std::string header = "{\"__metadata__\":{";
    bool first = true;
    std::map<std::string, std::string> marked = metadata;
    marked[WRITTEN_BY_KEY] = WRITTEN_BY;  // the mark check_outputs recognises
    for (auto& kv : marked) {
        header += (first ? "" : ",") + json_escape(kv.first) + ":" + json_escape(kv.second);
        first = false;
    }
    header += "}";
    std::size_t offset = 0;
    for (auto& nt : tensors) {
        std::string shape;
        for (std::size_t k = 0; k < nt.second->shape.size(); k++)
            shape += (k ? "," : "") + std::to_string(nt.second->shape[k]);
        const std::size_t bytes = nt.second->size() * 4;
        header += "," + json_escape(nt.first) + ":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
                  std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
        offset += bytes;
    }
    header += "}";
    while (header.size() % 8) header += ' ';
    AtomicFile f(path);  // streamed: no second copy of the model in memory
    unsigned char size_le[8];
    const uint64_t n = header.size();
    for (int k = 0; k < 8; k++) size_le[k] = (unsigned char)((n >> (8 * k)) & 0xFF);
    f.write(size_le, 8);
    f.write(header.data(), header.size());
    for (auto& nt : tensors) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        f.write(nt.second->data.data(), nt.second->size() * 4);  // floats are stored as they are in memory
#else
        for (float v : nt.second->data) {
            uint32_t u;
            std::memcpy(&u, &v, 4);
            const unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
            f.write(le, 4);
        }
#endif
    }
    f.commit();
}

// A safetensors file open for reading: the header is read and checked first (8 + N bytes), then
// each tensor is read on demand with fread straight into its own buffer. There is no copy of the
// whole file in memory and no second copy of a tensor.
class SafeTensorsReader {
public:
    struct Entry {
        std::string name;
        std::vector<int> shape;
        std::size_t begin = 0, end = 0;  // byte offsets in the data
    };
    std::map<std::string, std::string> metadata;
    std::vector<Entry> entries;  // in the header's order
    // Integer buffers Hugging Face may save beside the weights (I64 "....position_ids" or
    // "....token_type_ids"):
    // checked and listed by name, never read.
    std::vector<std::string> int_buffers;

    explicit SafeTensorsReader(const std::string& path);
    ~SafeTensorsReader() { std::fclose(f_); }
    SafeTensorsReader(const SafeTensorsReader&) = delete;
    SafeTensorsReader& operator=(const SafeTensorsReader&) = delete;
    const Entry* find(const std::string& name) const {
        for (auto& e : entries)
            if (e.name == name) return &e;
        return nullptr;
    }
    // count floats of the tensor from float index first on, into dst. Returns whether every one
    // is finite (checked chunk by chunk, while the chunk just read is in the cache).
    bool read(const Entry& e, float* dst, std::size_t first, std::size_t count) const;
    Tensor<float> read(const Entry& e) const {  // the whole tensor, into a new buffer
        Tensor<float> t = Tensor<float>::uninit(e.shape);
        read(e, t.ptr(), 0, t.size());
        return t;
    }

private:
    std::string path_;
    std::FILE* f_ = nullptr;
    std::size_t data_start_ = 0;
    Error bad(const std::string& what) const { return Error("'" + path_ + "' is not a valid safetensors file: " + what); }
};

SafeTensorsReader::SafeTensorsReader(const std::string& path) : path_(path) {
    f_ = open_input(path);
    try {
        const long long size = file_size(f_);
        if (size < 0) throw Error("cannot read '" + path + "': " + std::strerror(errno));
        const std::size_t file_size = (std::size_t)size;
        unsigned char size_le[8];
        if (file_size < 8 || std::fread(size_le, 1, 8, f_) != 8) throw bad("shorter than its 8-byte header size");
        uint64_t n = 0;
        for (int k = 0; k < 8; k++) n |= (uint64_t)size_le[k] << (8 * k);
        if (n > file_size - 8) throw bad("header size " + std::to_string(n) + " exceeds the file size");
        std::string header((std::size_t)n, '\0');
        if (n > 0 && std::fread(&header[0], 1, (std::size_t)n, f_) != n) throw Error("cannot read '" + path + "'");
        Json h;
        try {
            h = parse_json(header);
        } catch (const Error& e) {
            throw bad(std::string("header: ") + e.what());
        }
        if (h.type != Json::object) throw bad("header is not a JSON object");
        data_start_ = 8 + (std::size_t)n;
        const std::size_t data_size = file_size - data_start_;
        std::vector<std::pair<std::size_t, std::size_t>> ranges;
        for (auto& kv : h.obj) {
            const std::string& name = kv.first;
            const Json& t = kv.second;
            if (name == "__metadata__") {
                if (t.type != Json::object) throw bad("__metadata__ is not an object");
                for (auto& m : t.obj) {
                    if (m.second.type != Json::string) throw bad("metadata value of '" + m.first + "' is not a string");
                    metadata[m.first] = m.second.str;
                }
                continue;
            }
            const Json *dtype = t.get("dtype"), *shape = t.get("shape"), *offs = t.get("data_offsets");
            if (!dtype || dtype->type != Json::string || !shape || shape->type != Json::array || !offs ||
                offs->type != Json::array || offs->arr.size() != 2)
                throw bad("tensor '" + name + "' needs dtype, shape and data_offsets [begin, end]");
            auto ends_with = [&](const std::string& tail) {
                return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
            };
            const bool int_buffer = dtype->str == "I64" && (ends_with(".position_ids") || ends_with(".token_type_ids"));
            if (dtype->str != "F32" && !int_buffer) throw bad("tensor '" + name + "' has dtype " + dtype->str + "; only F32 is supported");
            std::vector<int> dims;
            double count = 1;
            for (auto& d : shape->arr) {
                if (d.type != Json::number || d.num < 0 || d.num != std::floor(d.num) || d.num > 2147483647.0)
                    throw bad("tensor '" + name + "' has a bad shape entry");
                dims.push_back((int)d.num);
                count *= d.num;
            }
            for (auto& o : offs->arr)
                if (o.type != Json::number || o.num < 0 || o.num != std::floor(o.num))
                    throw bad("tensor '" + name + "' has bad data_offsets");
            const double begin = offs->arr[0].num, end = offs->arr[1].num;
            const double width = int_buffer ? 8 : 4;
            if (end < begin || end - begin != count * width)
                throw bad("tensor '" + name + "' of shape " + shape_str(dims) + " needs " + whole_number(count * width) +
                          " bytes but data_offsets give " + whole_number(end - begin));
            if (end > (double)data_size)
                throw bad("truncated: tensor '" + name + "' ends at byte " + whole_number(end) + " of the data but the file holds " +
                          std::to_string(data_size));
            if (find(name) || std::count(int_buffers.begin(), int_buffers.end(), name)) throw bad("tensor '" + name + "' appears twice");
            ranges.push_back({(std::size_t)begin, (std::size_t)end});
            if (int_buffer) int_buffers.push_back(name);
            else entries.push_back({name, dims, (std::size_t)begin, (std::size_t)end});
        }
        std::sort(ranges.begin(), ranges.end());
        for (std::size_t k = 1; k < ranges.size(); k++)
            if (ranges[k].first < ranges[k - 1].second) throw bad("two tensors overlap in the data");
    } catch (...) {
        std::fclose(f_);
        throw;
    }
}

bool SafeTensorsReader::read(const Entry& e, float* dst, std::size_t first, std::size_t count) const {
    const std::size_t at = data_start_ + e.begin + 4 * first;
    if (count == 0) return true;
    if (4 * (first + count) > e.end - e.begin) throw Error("safetensors: read past the end of tensor '" + e.name + "'");
    if (!seek_to(f_, (long long)at)) throw bad("truncated while reading tensor '" + e.name + "'");
    // 256 Ki floats (1 MiB) at a time: each chunk goes straight into dst and is checked while it is
    // in the cache (a check after the whole model would read all of it from memory a second time).
    constexpr std::size_t chunk = std::size_t(1) << 18;
    bool finite = true;
    for (std::size_t k0 = 0; k0 < count; k0 += chunk) {
        float* __restrict d = dst + k0;
        const std::size_t m = std::min(chunk, count - k0);
        if (std::fread(d, 4, m, f_) != m) throw bad("truncated while reading tensor '" + e.name + "'");
#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
        for (std::size_t k = 0; k < m; k++) {  // the file is little-endian
            unsigned char b[4];
            std::memcpy(b, &d[k], 4);
            const uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
            std::memcpy(&d[k], &u, 4);
        }
#endif
        for (std::size_t k = 0; k < m; k++) finite &= std::isfinite(d[k]);  // no early exit: it vectorises
    }
    return finite;
}

SafeTensors load_safetensors(const std::string& path) {
    const SafeTensorsReader r(path);
    SafeTensors st;
    st.metadata = r.metadata;
    for (auto& e : r.entries) st.tensors.emplace_back(e.name, r.read(e));
    return st;
}

// ---- Model checkpoints ---------------------------------------------------------------------------
std::map<std::string, std::string> config_metadata(const Config& c) {
    std::map<std::string, std::string> m = {
        {"variant", variant_name(c.variant)}, {"V", std::to_string(c.V)}, {"H", std::to_string(c.H)},
        {"F", std::to_string(c.F)},           {"D", std::to_string(c.D)}, {"L", std::to_string(c.L)},
        {"A", std::to_string(c.A)},           {"n_ctx", std::to_string(c.n_ctx)},
        {"activation", activation_name(c.activation)}, {"eps", full_digits(c.eps)}};
    if (c.variant == Variant::bert || c.variant == Variant::roberta) {
        m["cls_id"] = std::to_string(c.cls_id);
        m["sep_id"] = std::to_string(c.sep_id);
        m["mask_id"] = std::to_string(c.mask_id);
    }
    if (c.pad_id >= 0) m["pad_id"] = std::to_string(c.pad_id);  // absent = -1, so checkpoints without w_pad are unchanged
    if (c.variant == Variant::gpt3) m["st_window"] = std::to_string(c.st_window), m["st_stride"] = std::to_string(c.st_stride);
    if (c.attn_bias) m["attn_bias"] = "1";  // absent = 0, so checkpoints without the biases are unchanged
    if (c.W_y_rows > 0) m["W_y_rows"] = std::to_string(c.W_y_rows), m["W_y_cols"] = std::to_string(c.W_y_cols);
    if (c.xlnet) m["xlnet"] = "1";
    if (c.emb_ln) m["emb_ln"] = "1";  // the released BERT's additions: absent = 0
    if (c.mlm_head) m["mlm_head"] = "1";
    if (c.pooler) m["pooler"] = "1";
    return m;
}

Config config_from_metadata(const std::map<std::string, std::string>& m) {
    auto need = [&](const char* key) -> const std::string& {
        auto it = m.find(key);
        if (it == m.end()) throw Error(std::string("checkpoint metadata lacks '") + key + "'");
        return it->second;
    };
    auto integer = [&](const char* key, int fallback) {
        auto it = m.find(key);
        return it == m.end() ? fallback : parse_int(it->second, std::string("metadata '") + key + "'");
    };
    Config c;
    c.variant = variant_from_name(need("variant"));
    c.V = parse_int(need("V"), "metadata 'V'"), c.H = parse_int(need("H"), "metadata 'H'");
    c.F = parse_int(need("F"), "metadata 'F'"), c.D = parse_int(need("D"), "metadata 'D'");
    c.L = parse_int(need("L"), "metadata 'L'"), c.A = parse_int(need("A"), "metadata 'A'");
    c.n_ctx = parse_int(need("n_ctx"), "metadata 'n_ctx'");
    if (m.count("activation")) c.activation = activation_from_name(m.at("activation"));
    if (m.count("eps")) {
        char* end = nullptr;
        c.eps = std::strtod(m.at("eps").c_str(), &end);
        if (*end != '\0') throw Error("metadata 'eps': '" + m.at("eps") + "' is not a number");
    }
    c.cls_id = integer("cls_id", -1), c.sep_id = integer("sep_id", -1), c.mask_id = integer("mask_id", -1);
    c.pad_id = integer("pad_id", -1);
    c.st_window = integer("st_window", 0), c.st_stride = integer("st_stride", 0);
    const int attn_bias = integer("attn_bias", 0);
    if (attn_bias != 0 && attn_bias != 1) throw Error("metadata 'attn_bias': expected 0 or 1, got " + m.at("attn_bias"));
    c.attn_bias = attn_bias == 1;
    c.W_y_rows = integer("W_y_rows", 0), c.W_y_cols = integer("W_y_cols", 0);
    const int xlnet = integer("xlnet", 0);
    if (xlnet != 0 && xlnet != 1) throw Error("metadata 'xlnet': expected 0 or 1, got " + m.at("xlnet"));
    c.xlnet = xlnet == 1;
    for (auto& opt : {std::make_pair("emb_ln", &c.emb_ln), std::make_pair("mlm_head", &c.mlm_head), std::make_pair("pooler", &c.pooler)}) {
        const int v = integer(opt.first, 0);
        if (v != 0 && v != 1) throw Error(std::string("metadata '") + opt.first + "': expected 0 or 1, got " + m.at(opt.first));
        *opt.second = v == 1;
    }
    validate(c);
    return c;
}

void save_model(const std::string& path, const Config& c, Params<float>& p,
                const std::map<std::string, std::string>& extra_metadata,
                const std::vector<std::pair<std::string, const Tensor<float>*>>& extra_tensors) {
    std::map<std::string, std::string> meta = config_metadata(c);
    for (auto& kv : extra_metadata) meta[kv.first] = kv.second;
    std::vector<std::pair<std::string, const Tensor<float>*>> list;
    for (auto& nt : named_tensors(c, p)) list.push_back({nt.name, nt.tensor});
    list.insert(list.end(), extra_tensors.begin(), extra_tensors.end());
    save_safetensors(path, meta, list);
}

TF_COLD_BEGIN
std::pair<long long, long long> strip_checkpoint(const std::string& in, const std::string& out) {
    check_outputs({{out, "--out", OutputKind::checkpoint}}, {{in, "--checkpoint"}});
    LoadedModel lm = load_model(in, {"adam."});
    std::map<std::string, std::string> meta = lm.file.metadata;
    meta.erase("adam.t");
    meta.erase("train.rng");
    meta["weights_only"] = "1";
    save_model(out, lm.config, lm.params, meta);
    const long long a = file_size(in), b = file_size(out);
    return a >= 0 && b >= 0 ? std::make_pair(a, b) : std::make_pair(-1LL, -1LL);
}

static Error nonfinite_error(const std::string& path, const std::string& tensor) {
    return Error("'" + path + "': tensor '" + tensor + "' holds a value that is not finite (NaN or infinity); the model is unusable");
}


namespace {
// ---- What the importers of Hugging Face files share ----------------------------------------------
// The file's tensors by name (a prefix dropped), taken one at a time with their shape checked, so
// that what is left at the end is unexpected; config.json beside the file, and its keys.
struct HfTensors {
    using Entry = SafeTensorsReader::Entry;
    const SafeTensorsReader& st;
    std::string path, what;              // what: "GPT-1 weights", for messages
    std::map<std::string, const Entry*> by;  // names without the prefix
    Error fail(const std::string& m) const { return Error("'" + path + "' (" + what + "): " + m); }
    HfTensors(const SafeTensorsReader& s, const std::string& p, const std::string& w, const std::string& prefix)
        : st(s), path(p), what(w) {
        for (auto& e : st.entries) {
            const std::string name = e.name.rfind(prefix, 0) == 0 ? e.name.substr(prefix.size()) : e.name;
            if (!by.emplace(name, &e).second) throw fail("tensor '" + name + "' appears twice");
        }
    }
    const Entry* peek(const std::string& name) const {
        auto it = by.find(name);
        return it == by.end() ? nullptr : it->second;
    }
    const Entry& take(const std::string& name, const std::vector<int>& shape) {
        auto it = by.find(name);
        if (it == by.end()) throw fail("missing tensor '" + name + "'");
        if (it->second->shape != shape)
            throw fail("tensor '" + name + "' is " + shape_str(it->second->shape) + ", expected " + shape_str(shape));
        const Entry& e = *it->second;
        by.erase(it);
        return e;
    }
    Tensor<float> grab(const std::string& name, const std::vector<int>& shape) { return st.read(take(name, shape)); }
    // A Linear layer's weight as PyTorch stores it, out x in, returned as our in x out.
    Tensor<float> grab_transposed(const std::string& name, int out, int in) { return transpose(grab(name, {out, in})); }
    // The first of the names that is present (LayerNorm.weight or the legacy LayerNorm.gamma).
    Tensor<float> grab_either(const std::string& a, const std::string& b, const std::vector<int>& shape) {
        return grab(peek(a) || !peek(b) ? a : b, shape);
    }
    // The number of layers: 1 + the largest l in names "<stem>l.".
    int count_layers(const std::string& stem) const {
        int L = 0;
        for (auto& kv : by) {
            if (kv.first.rfind(stem, 0) != 0) continue;
            const std::size_t dot = kv.first.find('.', stem.size());
            const std::string l = kv.first.substr(stem.size(), dot == std::string::npos ? std::string::npos : dot - stem.size());
            if (l.empty() || l.size() > 4 || l.find_first_not_of("0123456789") != std::string::npos)
                throw fail("unexpected tensor '" + kv.first + "'");
            L = std::max(L, std::stoi(l) + 1);
        }
        return L;
    }
    // A tied copy of W (lm_head, decoder) must hold W's numbers exactly; it is then dropped.
    void drop_tied(const std::string& name, const Tensor<float>& W, const std::string& of) {
        const Entry* e = peek(name);
        if (!e) return;
        if (e->shape != W.shape || !std::equal(W.data.begin(), W.data.end(), st.read(*e).data.begin()))
            throw fail(name + " differs from " + of + "; this model uses " + of + " there (tied)");
        by.erase(name);
    }
    void check_all_taken() const {
        if (!by.empty()) throw fail("unexpected tensor '" + by.begin()->first + "'");
    }
};

// config.json beside the model file, or a null Json if there is none.
Json hf_config_json(const std::string& path, std::string& config_path) {
    const std::size_t slash = last_separator(path);
    config_path = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "config.json";
    std::FILE* probe = open_file(config_path, "rb");
    if (!probe) return Json();
    std::fclose(probe);
    try {
        const Json j = parse_json(read_file(config_path));
        if (j.type != Json::object) throw Error("not a JSON object");
        return j;
    } catch (const Error& e) {
        throw Error("'" + config_path + "': " + e.what());
    }
}
// A whole number in 1..limit from config.json, or fallback when the key is absent.
int hf_config_int(const Json& j, const char* key, int fallback, const std::string& config_path) {
    const Json* v = j.get(key);
    if (!v) return fallback;
    if (v->type != Json::number || v->num < 1 || v->num != std::floor(v->num) || v->num > 2147483647.0)
        throw Error("'" + config_path + "': " + key + " must be a positive whole number");
    return (int)v->num;
}

// The keys of a config.json that set a Config, as one family of Hugging Face's classes names them
// (GPT2Config, OpenAIGPTConfig, BertConfig and RobertaConfig): the heads, which must divide the
// width; the LayerNorm epsilon; the activation, by the names the family takes (`listed`, in an
// error); the sizes, which must match the weights'.
struct HfConfigKeys {
    const char* heads;
    const char* width;
    const char* eps;
    const char* activation;
    std::vector<std::pair<std::string, Activation>> activations;
    const char* listed;
    std::vector<std::pair<const char*, int>> sizes;
};
static void read_hf_config(const Json& j, const std::string& cj, const HfConfigKeys& k, Config& c) {
    auto bad = [&](const std::string& what) { return Error("'" + cj + "': " + what); };
    c.A = hf_config_int(j, k.heads, c.A, cj);
    if (c.A == 0 || c.H % c.A != 0) throw bad(std::string(k.heads) + " must divide " + k.width + " = " + std::to_string(c.H));
    if (const Json* e = j.get(k.eps)) {
        if (e->type != Json::number || !(e->num > 0)) throw bad(std::string(k.eps) + " must be a positive number");
        c.eps = e->num;
    }
    if (const Json* a = j.get(k.activation)) {
        const std::string f = a->type == Json::string ? a->str : "";
        bool known = false;
        for (const auto& name : k.activations)
            if (f == name.first) {
                c.activation = name.second;
                known = true;
            }
        if (!known) throw bad(std::string(k.activation) + " '" + f + "' is not one of " + k.listed);
    }
    for (const auto& kv : k.sizes)
        if (const Json* v = j.get(kv.first); v && (v->type != Json::number || v->num != kv.second))
            throw bad(std::string(kv.first) + " does not match the weights (" + std::to_string(kv.second) + ")");
}

// The model a Hugging Face file holds, before its tensors are read: the heads known (else an
// error naming the config.json key that gives them), D = H / A, the Config validated, and
// make_params's shapes (every tensor is then read or split into place).
static LoadedModel hf_model_of(const HfTensors& t, Config& c, const char* heads_key) {
    if (c.A == 0)
        throw t.fail("cannot tell the number of heads: H = " + std::to_string(c.H) +
                     " is not a multiple of 64 and there is no config.json with " + heads_key + " beside the file");
    c.D = c.H / c.A;
    validate(c);
    LoadedModel lm;
    lm.config = c;
    lm.file.metadata = t.st.metadata;
    lm.params = make_params<float>(c, false);
    return lm;
}

// ---- Released GPT-2 weights (a Hugging Face model.safetensors) ---------------------------------
// GPT-2's names and layouts (its Conv1D computes y = x W + b with W stored in x out, as ours):
//   wte.weight (V x H) -> W_e            wpe.weight (n_ctx x H) -> W_p
//   h.l.ln_1.weight, .bias -> layers.l.ln_1.gamma, .beta   (ln_2 and ln_f likewise)
//   h.l.attn.c_attn.weight (H x 3H) = [W_Q^1 .. W_Q^A | W_K^1 .. W_K^A | W_V^1 .. W_V^A], head i in
//       columns i*D .. i*D+D-1 of each third; h.l.attn.c_attn.bias (3H) likewise for b_Q, b_K, b_V
//   h.l.attn.c_proj.weight (AD x H), .bias -> W_O, b_O;  h.l.mlp.c_fc -> W_1, b_1;  h.l.mlp.c_proj -> W_2, b_2
// Names may start with "transformer."; lm_head.weight must equal wte.weight (tied); the causal-mask
// buffers h.l.attn.bias and h.l.attn.masked_bias are ignored. The file does not say how many heads:
// they come from config.json beside it (n_head; also layer_norm_epsilon), else A = H / 64 (every
// GPT-2 size has heads of 64).
static bool is_hf_gpt2(const SafeTensorsReader& st) {
    return !st.metadata.count("variant") && (st.find("wte.weight") || st.find("transformer.wte.weight"));
}

// GPT-2's config.json beside the model file, if there is one: the heads (n_head), layer_norm_epsilon and
// the activation, and the sizes, which must match the weights'.
static void read_gpt2_config(const std::string& path, Config& c) {
    std::string cj;
    const Json j = hf_config_json(path, cj);
    if (j.type != Json::object) return;
    read_hf_config(j, cj,
                   {"n_head", "n_embd", "layer_norm_epsilon", "activation_function",
                    {{"gelu_new", Activation::gelu_tanh}, {"gelu_pytorch_tanh", Activation::gelu_tanh}, {"gelu_fast", Activation::gelu_tanh},
                     {"gelu", Activation::gelu_erf}, {"relu", Activation::relu},
                     {"quick_gelu", Activation::gelu_sigmoid}},  // x sigmoid(1.702 x): what export writes for it
                    "gelu_new, gelu, relu, quick_gelu",
                    {{"n_embd", c.H}, {"n_layer", c.L}, {"n_positions", c.n_ctx}, {"vocab_size", c.V}}},
                   c);
}

// GPT-2's c_attn (H x 3H, and its bias 3H) split into each head's W_Q, W_K, W_V (H x D) and biases:
// head i of Q, K, V is column block part*H + i*D. The weight is read one row at a time, never whole.
static void split_gpt2_c_attn(const SafeTensorsReader& st, const SafeTensorsReader::Entry& W, const Tensor<float>& b, const Config& c,
                              MultiHeadSAParams<float>& attn) {
    const int H = c.H, D = c.D, A = c.A;
    std::vector<Tensor<float>*> Wi, bi;  // Q, K, V: head i is column block part*H + i*D
    for (auto* heads : {&attn.W_Q, &attn.W_K, &attn.W_V})
        for (int i = 0; i < A; i++) Wi.push_back(&(*heads)[i]), *Wi.back() = Tensor<float>::uninit(H, D);
    for (auto* heads : {&attn.b_Q, &attn.b_K, &attn.b_V})
        for (int i = 0; i < A; i++) bi.push_back(&(*heads)[i]), *bi.back() = Tensor<float>::uninit({D});
    std::vector<float> row(3 * (std::size_t)H);  // one row of c_attn at a time: never the whole of it
    for (int r = 0; r < H; r++) {
        st.read(W, row.data(), (std::size_t)r * 3 * H, row.size());
        for (int k = 0; k < 3 * A; k++) std::copy(row.begin() + k * D, row.begin() + (k + 1) * D, Wi[k]->row(r));
    }
    for (int k = 0; k < 3 * A; k++) std::copy(b.data.begin() + k * D, b.data.begin() + (k + 1) * D, bi[k]->ptr());
}

// Each tensor is read from the file straight into its place; c_attn one row at a time.
static LoadedModel import_hf_gpt2(const std::string& path, const SafeTensorsReader& st) {
    using Entry = SafeTensorsReader::Entry;
    HfTensors t(st, path, "GPT-2 weights", "transformer.");
    const int L = t.count_layers("h.");
    const Entry* wte = t.peek("wte.weight");
    const Entry* wpe = t.peek("wpe.weight");
    if (!wte || wte->shape.size() != 2 || !wpe || wpe->shape.size() != 2 || L == 0)
        throw t.fail("needs wte.weight (V x H), wpe.weight (n_ctx x H) and layers h.0, h.1, ...");
    const Entry* fc = t.peek("h.0.mlp.c_fc.weight");
    if (!fc || fc->shape.size() != 2) throw t.fail("missing tensor 'h.0.mlp.c_fc.weight'");
    Config c;
    c.variant = Variant::gpt2, c.activation = Activation::gelu_tanh, c.eps = 1e-5, c.attn_bias = true;
    c.V = wte->shape[0], c.H = wte->shape[1], c.n_ctx = wpe->shape[0], c.F = fc->shape[1], c.L = L;
    c.A = c.H % 64 == 0 ? c.H / 64 : 0;
    read_gpt2_config(path, c);
    LoadedModel lm = hf_model_of(t, c, "n_head");
    ArenaScope arena(arena_bytes(c, lm.params));
    Params<float>& p = lm.params;
    const int H = c.H, D = c.D, A = c.A;
    p.W_e = t.grab("wte.weight", {c.V, H});
    p.W_p = t.grab("wpe.weight", {c.n_ctx, H});
    p.ln_f_gamma = t.grab("ln_f.weight", {H}), p.ln_f_beta = t.grab("ln_f.bias", {H});
    for (int l = 0; l < c.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        Layer<float>& y = p.layers[l];
        y.ln_1_gamma = t.grab(h + "ln_1.weight", {H}), y.ln_1_beta = t.grab(h + "ln_1.bias", {H});
        y.ln_2_gamma = t.grab(h + "ln_2.weight", {H}), y.ln_2_beta = t.grab(h + "ln_2.bias", {H});
        const Entry& W = t.take(h + "attn.c_attn.weight", {H, 3 * H});
        split_gpt2_c_attn(st, W, t.grab(h + "attn.c_attn.bias", {3 * H}), c, y.attn);
        y.attn.W_O = t.grab(h + "attn.c_proj.weight", {A * D, H}), y.attn.b_O = t.grab(h + "attn.c_proj.bias", {H});
        y.ffn.W_1 = t.grab(h + "mlp.c_fc.weight", {H, c.F}), y.ffn.b_1 = t.grab(h + "mlp.c_fc.bias", {c.F});
        y.ffn.W_2 = t.grab(h + "mlp.c_proj.weight", {c.F, H}), y.ffn.b_2 = t.grab(h + "mlp.c_proj.bias", {H});
        t.by.erase(h + "attn.bias"), t.by.erase(h + "attn.masked_bias");  // causal-mask buffers
    }
    if (t.by.count("lm_head.weight")) {  // compared with W_e a block of rows at a time
        const Entry& e = *t.by["lm_head.weight"];
        bool same = e.shape == p.W_e.shape;
        std::vector<float> block;
        for (int r0 = 0; same && r0 < c.V; r0 += 1024) {
            const std::size_t count = (std::size_t)std::min(1024, c.V - r0) * H;
            block.resize(count);
            st.read(e, block.data(), (std::size_t)r0 * H, count);
            same = std::equal(block.begin(), block.end(), p.W_e.row(r0));
        }
        if (!same) throw t.fail("lm_head.weight differs from wte.weight; this model de-embeds with W_e^T (tied)");
        t.by.erase("lm_head.weight");
    }
    t.check_all_taken();
    return lm;
}

// ---- Released GPT-1, BERT and RoBERTa weights (Hugging Face model.safetensors) ----------------

// One tensor of a Hugging Face layout that is one of ours as it is, or transposed (a Linear's
// weight, stored out x in): the one table of names that each importer reads and export_hf writes.
// The tensors that are joined or split on the way (c_attn, query/key/value, the position and
// token-type rows) are done by the pairs of functions below the tables.
struct HfSlot {
    std::string name;     // without the model's prefix ("transformer.", "bert.", "roberta.")
    Tensor<float>* ours;  // its shape is make_params's
    bool linear;          // stored out x in: ours transposed
    std::string legacy;   // an older name the importer also accepts (LayerNorm.gamma), "" = none
    HfSlot(std::string n, Tensor<float>* t, bool lin = false, std::string old = "")
        : name(std::move(n)), ours(t), linear(lin), legacy(std::move(old)) {}
};
// Reads every slot from the file, its shape checked (a Linear's as out x in).
void read_slots(HfTensors& t, const std::vector<HfSlot>& slots) {
    for (const HfSlot& s : slots) {
        const std::vector<int> shape = s.ours->shape;
        if (s.linear) *s.ours = t.grab_transposed(s.name, shape[1], shape[0]);
        else *s.ours = s.legacy.empty() ? t.grab(s.name, shape) : t.grab_either(s.name, s.legacy, shape);
    }
}

// GPT-1 (OpenAIGPTModel): Conv1D stores in x out, as ours, so nothing is transposed.
std::vector<HfSlot> openai_gpt_slots(const Config& c, Params<float>& p) {
    std::vector<HfSlot> s = {{"tokens_embed.weight", &p.W_e}, {"positions_embed.weight", &p.W_p}};
    for (int l = 0; l < c.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        Layer<float>& y = p.layers[l];
        s.insert(s.end(), {{h + "attn.c_proj.weight", &y.attn.W_O}, {h + "attn.c_proj.bias", &y.attn.b_O},
                           {h + "ln_1.weight", &y.ln_1_gamma},      {h + "ln_1.bias", &y.ln_1_beta},
                           {h + "mlp.c_fc.weight", &y.ffn.W_1},     {h + "mlp.c_fc.bias", &y.ffn.b_1},
                           {h + "mlp.c_proj.weight", &y.ffn.W_2},   {h + "mlp.c_proj.bias", &y.ffn.b_2},
                           {h + "ln_2.weight", &y.ln_2_gamma},      {h + "ln_2.bias", &y.ln_2_beta}});
    }
    return s;
}

// BERT and RoBERTa (BertModel / RobertaModel, and their masked-LM heads, whose names carry no
// prefix): every Linear transposed.
std::string hf_mlm_head_stem(Variant v) { return v == Variant::roberta ? "lm_head." : "cls.predictions."; }
std::vector<HfSlot> bert_slots(const Config& c, Params<float>& p) {
    std::vector<HfSlot> s = {{"embeddings.word_embeddings.weight", &p.W_e},
                             {"embeddings.LayerNorm.weight", &p.gamma_e, false, "embeddings.LayerNorm.gamma"},
                             {"embeddings.LayerNorm.bias", &p.beta_e, false, "embeddings.LayerNorm.beta"}};
    for (int l = 0; l < c.L; l++) {
        const std::string e = "encoder.layer." + std::to_string(l) + ".";
        Layer<float>& y = p.layers[l];
        s.insert(s.end(), {{e + "attention.output.dense.weight", &y.attn.W_O, true},
                           {e + "attention.output.dense.bias", &y.attn.b_O},
                           {e + "attention.output.LayerNorm.weight", &y.ln_1_gamma, false, e + "attention.output.LayerNorm.gamma"},
                           {e + "attention.output.LayerNorm.bias", &y.ln_1_beta, false, e + "attention.output.LayerNorm.beta"},
                           {e + "intermediate.dense.weight", &y.ffn.W_1, true},
                           {e + "intermediate.dense.bias", &y.ffn.b_1},
                           {e + "output.dense.weight", &y.ffn.W_2, true},
                           {e + "output.dense.bias", &y.ffn.b_2},
                           {e + "output.LayerNorm.weight", &y.ln_2_gamma, false, e + "output.LayerNorm.gamma"},
                           {e + "output.LayerNorm.bias", &y.ln_2_beta, false, e + "output.LayerNorm.beta"}});
    }
    if (c.mlm_head) {
        const bool roberta = c.variant == Variant::roberta;
        const std::string m = hf_mlm_head_stem(c.variant);
        const std::string d = m + (roberta ? "dense." : "transform.dense."), ln = m + (roberta ? "layer_norm." : "transform.LayerNorm.");
        s.insert(s.end(), {{d + "weight", &p.W_t, true},
                           {d + "bias", &p.b_t},
                           {ln + "weight", &p.gamma_t, false, ln + "gamma"},
                           {ln + "bias", &p.beta_t, false, ln + "beta"},
                           {m + "bias", &p.b_z}});
    }
    if (c.pooler) s.insert(s.end(), {{"pooler.dense.weight", &p.W_pool, true}, {"pooler.dense.bias", &p.b_pool}});
    return s;
}

// GPT-1's and GPT-2's c_attn (H x 3H and 3H) <-> the heads' W_Q^i, W_K^i, W_V^i (H x D) and biases:
// head i of part k (Q, K, V) is columns k*H + i*D .. k*H + i*D + D-1.
void split_c_attn(const Config& c, const Tensor<float>& W, const Tensor<float>& b, MultiHeadSAParams<float>& a) {
    const int H = c.H, D = c.D, A = c.A;
    std::vector<Tensor<float>>* Ws[3] = {&a.W_Q, &a.W_K, &a.W_V};
    std::vector<Tensor<float>>* bs[3] = {&a.b_Q, &a.b_K, &a.b_V};
    for (int part = 0; part < 3; part++)
        for (int i = 0; i < A; i++) {
            Tensor<float>& Wi = (*Ws[part])[i];
            Wi = Tensor<float>::uninit(H, D);
            for (int r = 0; r < H; r++) std::copy(W.row(r) + part * H + i * D, W.row(r) + part * H + (i + 1) * D, Wi.row(r));
            (*bs[part])[i] = Tensor<float>::uninit({D});
            std::copy(b.ptr() + part * H + i * D, b.ptr() + part * H + (i + 1) * D, (*bs[part])[i].ptr());
        }
}
void join_c_attn(const Config& c, const MultiHeadSAParams<float>& a, Tensor<float>& W, Tensor<float>& b) {
    const int H = c.H, D = c.D, A = c.A;
    W = Tensor<float>::uninit(H, 3 * H), b = Tensor<float>(std::vector<int>{3 * H});
    const std::vector<Tensor<float>>* Ws[3] = {&a.W_Q, &a.W_K, &a.W_V};
    const std::vector<Tensor<float>>* bs[3] = {&a.b_Q, &a.b_K, &a.b_V};
    for (int part = 0; part < 3; part++)
        for (int i = 0; i < A; i++) {
            const Tensor<float>& Wi = (*Ws[part])[i];
            for (int r = 0; r < H; r++) std::copy(Wi.row(r), Wi.row(r) + D, W.row(r) + part * H + i * D);
            if (!(*bs[part])[i].empty()) std::copy((*bs[part])[i].data.begin(), (*bs[part])[i].data.end(), b.ptr() + part * H + i * D);
        }
}
// BERT's attention.self.query (key, value): a Linear, AD x H, whose rows i*D .. i*D+D-1 are head
// i's W^i transposed, and its bias (AD) <-> the heads.
void split_linear_heads(const Config& c, const Tensor<float>& W, const Tensor<float>& b, std::vector<Tensor<float>>& Ws,
                        std::vector<Tensor<float>>& bs) {
    const int H = c.H, D = c.D;
    for (int i = 0; i < c.A; i++) {
        Ws[i] = Tensor<float>::uninit(H, D);
        for (int r = 0; r < H; r++)
            for (int d = 0; d < D; d++) Ws[i](r, d) = W(i * D + d, r);
        bs[i] = Tensor<float>::uninit({D});
        std::copy(b.ptr() + i * D, b.ptr() + (i + 1) * D, bs[i].ptr());
    }
}
void join_linear_heads(const Config& c, const std::vector<Tensor<float>>& Ws, const std::vector<Tensor<float>>& bs, Tensor<float>& W,
                       Tensor<float>& b) {
    const int H = c.H, D = c.D;
    W = Tensor<float>::uninit(c.A * D, H), b = Tensor<float>(std::vector<int>{c.A * D});
    for (int i = 0; i < c.A; i++) {
        for (int r = 0; r < H; r++)
            for (int d = 0; d < D; d++) W(i * D + d, r) = Ws[i](r, d);
        if (!bs[i].empty()) std::copy(bs[i].data.begin(), bs[i].data.end(), b.ptr() + i * D);
    }
}
}  // namespace

// GPT-1 (OpenAIGPTLMHeadModel / OpenAIGPTModel; names may start with "transformer."). Conv1D stores
// W as in x out, as ours; the block is post-LN, as the GPT of formulas §18:
//   tokens_embed.weight (V x H) -> W_e              positions_embed.weight (n_ctx x H) -> W_p
//   h.l.attn.c_attn.weight (H x 3H) = [W_Q^1..W_Q^A | W_K^1..W_K^A | W_V^1..W_V^A], .bias (3H) -> b_Q, b_K, b_V
//   h.l.attn.c_proj.weight (AD x H), .bias -> W_O, b_O
//   h.l.ln_1.weight, .bias (after attention) -> layers.l.ln_1.gamma, .beta
//   h.l.mlp.c_fc -> W_1, b_1;  h.l.mlp.c_proj -> W_2, b_2;  h.l.ln_2 -> ln_2.gamma, .beta
//   lm_head.weight: tied, must equal W_e; h.l.attn.bias (the causal-mask buffer) ignored.
// config.json: n_head (else H / 64), layer_norm_epsilon (else 1e-5), afn ("gelu" is the tanh form
// in Hugging Face's GPT-1 code: gelu_tanh; "relu").
static bool is_hf_openai_gpt(const SafeTensorsReader& st) {
    return !st.metadata.count("variant") && (st.find("tokens_embed.weight") || st.find("transformer.tokens_embed.weight"));
}

static LoadedModel import_hf_openai_gpt(const std::string& path, const SafeTensorsReader& st) {
    HfTensors t(st, path, "GPT-1 weights", "transformer.");
    const auto* wte = t.peek("tokens_embed.weight");
    const auto* wpe = t.peek("positions_embed.weight");
    const auto* fc = t.peek("h.0.mlp.c_fc.weight");
    const int L = t.count_layers("h.");
    if (!wte || wte->shape.size() != 2 || !wpe || wpe->shape.size() != 2 || L == 0)
        throw t.fail("needs tokens_embed.weight (V x H), positions_embed.weight (n_ctx x H) and layers h.0, h.1, ...");
    if (!fc || fc->shape.size() != 2) throw t.fail("missing tensor 'h.0.mlp.c_fc.weight'");
    Config c;
    c.variant = Variant::gpt, c.activation = Activation::gelu_tanh, c.eps = 1e-5, c.attn_bias = true;
    c.V = wte->shape[0], c.H = wte->shape[1], c.n_ctx = wpe->shape[0], c.F = fc->shape[1], c.L = L;
    c.A = c.H % 64 == 0 ? c.H / 64 : 0;
    std::string cj;
    const Json j = hf_config_json(path, cj);
    if (j.type == Json::object) {
        read_hf_config(j, cj,
                       {"n_head", "n_embd", "layer_norm_epsilon", "afn",
                        {{"gelu", Activation::gelu_tanh}, {"relu", Activation::relu}},  // Hugging Face's GPT-1 "gelu" is gelu_new
                        "gelu, relu",
                        {{"n_embd", c.H}, {"n_layer", c.L}, {"n_positions", c.n_ctx}, {"vocab_size", c.V}}},
                       c);
    }
    LoadedModel lm = hf_model_of(t, c, "n_head");
    ArenaScope arena(arena_bytes(c, lm.params));
    Params<float>& p = lm.params;
    const int H = c.H;
    read_slots(t, openai_gpt_slots(c, p));
    for (int l = 0; l < c.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        const Tensor<float> W = t.grab(h + "attn.c_attn.weight", {H, 3 * H});  // [Q heads | K heads | V heads]
        split_c_attn(c, W, t.grab(h + "attn.c_attn.bias", {3 * H}), p.layers[l].attn);
        t.by.erase(h + "attn.bias");  // the causal-mask buffer
    }
    t.drop_tied("lm_head.weight", p.W_e, "tokens_embed.weight");
    t.check_all_taken();
    return lm;
}

// BERT (BertForMaskedLM, BertForPreTraining or BertModel; names may start with "bert."). A Linear
// stores W as out x in: every weight is transposed into ours (in x out).
//   embeddings.word_embeddings.weight (V x H) -> W_e;  .position_embeddings.weight (n_ctx x H) -> W_p
//   embeddings.token_type_embeddings.weight (2 x H): row 0 -> w_A, row 1 -> w_B (the segment vectors of formulas §21)
//   embeddings.LayerNorm.weight, .bias (or .gamma, .beta) -> emb_ln.gamma, .beta       (Config::emb_ln)
//   encoder.layer.l.attention.self.query.weight (AD x H) -> W_Q^i = rows i*D .. i*D+D-1, transposed;
//       .bias -> b_Q^i;  key, value likewise
//   encoder.layer.l.attention.output.dense (H x AD) -> W_O, b_O;  .output.LayerNorm -> ln_1
//   encoder.layer.l.intermediate.dense (F x H) -> W_1, b_1;  encoder.layer.l.output.dense (H x F) -> W_2, b_2
//   encoder.layer.l.output.LayerNorm -> ln_2
//   cls.predictions.transform.dense (H x H) -> mlm.W_t, mlm.b_t;  .transform.LayerNorm -> mlm.ln
//   cls.predictions.bias (V) -> mlm.b_z          (Config::mlm_head; a file without cls.* has none)
//   cls.predictions.decoder.weight / .bias: tied, must equal W_e / cls.predictions.bias
//   pooler.dense (H x H) -> pooler.W, pooler.b   (Config::pooler: kept, unused)
//   cls.seq_relationship.weight, .bias (next-sentence head): kept with the file's other tensors, unused
//   embeddings.position_ids (an integer buffer): ignored
// config.json: num_attention_heads (else H / 64), layer_norm_eps (else 1e-12), hidden_act ("gelu" is
// the erf form here; "gelu_new", "relu"), type_vocab_size 2, position_embedding_type absolute.
// [CLS], [SEP], [MASK]: from vocab.txt beside the file, else bert-base-uncased's 101, 102, 103.
//
// RoBERTa (RobertaForMaskedLM or RobertaModel; names may start with "roberta."): BERT's layout and
// names, read as a roberta model (no segments), with these differences:
//   embeddings.position_embeddings.weight ((n_ctx + 2) x H): Hugging Face numbers the positions of
//       a sequence's tokens from padding_idx + 1 = 2, skipping the <pad> tokens, which get row
//       padding_idx = 1 (position_rows; row 0 is never read), so W_p = rows 2, 3, ... and w_pad = row 1
//   embeddings.token_type_embeddings.weight (1 x H): added at every position, so folded into W_p
//   lm_head.dense (H x H) -> mlm.W_t, mlm.b_t;  lm_head.layer_norm -> mlm.ln;  lm_head.bias -> mlm.b_z;
//       lm_head.decoder.weight / .bias: tied, must equal W_e / lm_head.bias
// config.json: as BERT's, with max_position_embeddings = n_ctx + 2, type_vocab_size 1,
// layer_norm_eps (else 1e-5) and pad_token_id (padding_idx, Config::pad_id; else 1: the rows above
// shift with it). hidden_act applies to the FFNs; the head's GELU is the erf form whatever it says.
// <s>, </s>, <mask> (the [CLS], [SEP], [MASK] of the code): from vocab.json beside the file, else
// roberta-base's 0, 2, 50264 (when V = 50265).
static bool is_hf_roberta(const SafeTensorsReader& st) {
    if (st.metadata.count("variant")) return false;
    if (st.find("roberta.embeddings.word_embeddings.weight")) return true;
    const auto* tt = st.find("embeddings.token_type_embeddings.weight");  // RobertaModel: one token type
    return st.find("embeddings.word_embeddings.weight") && tt && tt->shape.size() == 2 && tt->shape[0] == 1;
}
static bool is_hf_bert(const SafeTensorsReader& st) {
    return !st.metadata.count("variant") &&
           (st.find("bert.embeddings.word_embeddings.weight") || st.find("embeddings.word_embeddings.weight"));
}

// The ids of <s>, </s>, <mask> in RoBERTa's vocab.json ({"token": id, ...}), which must hold V tokens.
static void roberta_special_ids(const std::string& vocab_json_path, Config& c) {
    Json j;
    try {
        j = parse_json(read_file(vocab_json_path));
    } catch (const Error& e) {
        throw Error("'" + vocab_json_path + "': " + e.what());
    }
    const std::size_t size = j.type == Json::object ? j.obj.size() : 0;
    if ((long long)size != c.V)
        throw Error("'" + vocab_json_path + "' has " + std::to_string(size) + " tokens but the model's V = " + std::to_string(c.V));
    int* ids[3] = {&c.cls_id, &c.sep_id, &c.mask_id};
    const char* names[3] = {"<s>", "</s>", "<mask>"};
    for (int k = 0; k < 3; k++) {
        const Json* v = j.get(names[k]);
        if (!v || v->type != Json::number || v->num < 0 || v->num >= c.V || v->num != std::floor(v->num))
            throw Error("'" + vocab_json_path + "' lacks " + names[k] + " (an id in 0.." + std::to_string(c.V - 1) + ")");
        *ids[k] = (int)v->num;
    }
}

// BERT's or RoBERTa's config.json (j, read from cj): the heads, layer_norm_eps, hidden_act, and the
// sizes, which must match the weights' (skipped: the position rows before a sequence's first; types:
// the rows of token_type_embeddings).
static void read_bert_config(const Json& j, const std::string& cj, Config& c, int skipped, int types) {
    if (const Json* e = j.get("position_embedding_type"); e && !(e->type == Json::string && e->str == "absolute"))
        throw Error("'" + cj + "': position_embedding_type must be absolute (W_p of formulas §18)");
    read_hf_config(j, cj,
                   {"num_attention_heads", "hidden_size", "layer_norm_eps", "hidden_act",
                    {{"gelu", Activation::gelu_erf}, {"gelu_new", Activation::gelu_tanh}, {"gelu_pytorch_tanh", Activation::gelu_tanh},
                     {"relu", Activation::relu},
                     {"quick_gelu", Activation::gelu_sigmoid}},  // x sigmoid(1.702 x): what export writes for it
                    "gelu, gelu_new, relu, quick_gelu",
                    {{"hidden_size", c.H}, {"num_hidden_layers", c.L}, {"intermediate_size", c.F},
                     {"max_position_embeddings", c.n_ctx + skipped}, {"vocab_size", c.V}, {"type_vocab_size", types}}},
                   c);
}

// BERT's [CLS], [SEP], [MASK] (RoBERTa's <s>, </s>, <mask>): from the tokenizer the file's metadata
// records (export writes it there), else from vocab.txt (RoBERTa: vocab.json) beside the file, else
// the released vocabulary's ids.
static void bert_special_ids(const HfTensors& t, const std::string& path, const std::string& cj, bool roberta, Config& c) {
    const std::string vocab_path = cj.substr(0, cj.size() - std::strlen("config.json")) + (roberta ? "vocab.json" : "vocab.txt");
    const Tokenizer recorded = tokenizer_of(t.st.metadata, path);
    std::FILE* probe = recorded.kind.empty() ? open_file(vocab_path, "rb") : nullptr;
    if (probe) std::fclose(probe);
    if (recorded.kind == "char") {
        if (recorded.size() + 3 != c.V)
            throw t.fail("its recorded characters are " + std::to_string(recorded.size()) + ", and with the three special tokens " +
                         "after them they do not make the model's V = " + std::to_string(c.V));
        c.cls_id = recorded.size(), c.sep_id = recorded.size() + 1, c.mask_id = recorded.size() + 2;
    } else if (!recorded.kind.empty()) {
        if (recorded.size() != c.V)
            throw t.fail("its recorded tokenizer has " + std::to_string(recorded.size()) + " tokens but the model's V = " + std::to_string(c.V));
        const int pad = c.pad_id;  // config.json's: the positions were numbered with it
        subword_special_ids(recorded, c);
        c.pad_id = pad;
    } else if (roberta) {
        if (probe) roberta_special_ids(vocab_path, c);
        else if (c.V == 50265) c.cls_id = 0, c.sep_id = 2, c.mask_id = 50264;
        else throw t.fail("cannot tell the ids of <s>, </s>, <mask>: no vocab.json beside the file and V = " + std::to_string(c.V));
    } else if (probe) {
        const WordPiece w = load_wordpiece(vocab_path);
        if (w.size() != c.V)
            throw Error("'" + vocab_path + "' has " + std::to_string(w.size()) + " tokens but the model's V = " + std::to_string(c.V));
        c.cls_id = w.cls, c.sep_id = w.sep, c.mask_id = w.mask;
        if (c.cls_id < 0 || c.sep_id < 0 || c.mask_id < 0) throw Error("'" + vocab_path + "' lacks [CLS], [SEP] or [MASK]");
    } else if (c.V > 103) {
        c.cls_id = 101, c.sep_id = 102, c.mask_id = 103;
    } else {
        throw t.fail("cannot tell the ids of [CLS], [SEP], [MASK]: no vocab.txt beside the file and V = " + std::to_string(c.V));
    }
}

// BERT's position rows and its token-type rows w_A, w_B; RoBERTa's position rows from padding_idx + 1
// on and w_pad (row padding_idx), each plus its one token type.
static void read_bert_position_rows(HfTensors& t, const Config& c, Params<float>& p, bool roberta, int padding_idx, int skipped,
                                    int types) {
    const int H = c.H;
    const Tensor<float> wp = t.grab("embeddings.position_embeddings.weight", {c.n_ctx + skipped, H});
    const Tensor<float> tt = t.grab("embeddings.token_type_embeddings.weight", {types, H});
    if (roberta) {  // W_p[i] = position row i + padding_idx + 1, w_pad = row padding_idx, each plus the one token type
        p.W_p = Tensor<float>::uninit(c.n_ctx, H);
        for (int i = 0; i < c.n_ctx; i++)
            for (int h = 0; h < H; h++) p.W_p(i, h) = wp(i + skipped, h) + tt(0, h);
        if (padding_idx >= 0) {
            p.w_pad = Tensor<float>::uninit({H});
            for (int h = 0; h < H; h++) p.w_pad[h] = wp(padding_idx, h) + tt(0, h);
        }
    } else {
        p.W_p = wp;
        p.w_A = Tensor<float>::vector(std::vector<float>(tt.row(0), tt.row(0) + H));
        p.w_B = Tensor<float>::vector(std::vector<float>(tt.row(1), tt.row(1) + H));
    }
}

static LoadedModel import_hf_bert(const std::string& path, const SafeTensorsReader& st, bool roberta) {
    HfTensors t(st, path, roberta ? "RoBERTa weights" : "BERT weights", roberta ? "roberta." : "bert.");
    const auto* wte = t.peek("embeddings.word_embeddings.weight");
    const auto* wpe = t.peek("embeddings.position_embeddings.weight");
    const auto* fc = t.peek("encoder.layer.0.intermediate.dense.weight");
    const int L = t.count_layers("encoder.layer.");
    std::string cj;
    const Json j = hf_config_json(path, cj);
    // RoBERTa's padding_idx: config.json's pad_token_id, else RobertaConfig's default 1. -1 (what
    // export writes for a model without <pad>) is a padding_idx no id equals: positions from row 0.
    int padding_idx = roberta ? 1 : -1;
    if (roberta && j.type == Json::object)
        if (const Json* v = j.get("pad_token_id")) {
            if (v->type != Json::number || v->num < -1 || v->num != std::floor(v->num) || v->num > 2147483647.0)
                throw Error("'" + cj + "': pad_token_id must be a whole number >= -1");
            padding_idx = (int)v->num;
        }
    const int skipped = roberta ? padding_idx + 1 : 0;  // position rows before a sequence's first (padding_idx + 1)
    if (!wte || wte->shape.size() != 2 || !wpe || wpe->shape.size() != 2 || wpe->shape[0] <= skipped || L == 0)
        throw t.fail(std::string("needs embeddings.word_embeddings.weight (V x H), embeddings.position_embeddings.weight (") +
                     (roberta ? "(n_ctx + pad_token_id + 1)" : "n_ctx") + " x H) and layers encoder.layer.0, encoder.layer.1, ...");
    if (!fc || fc->shape.size() != 2) throw t.fail("missing tensor 'encoder.layer.0.intermediate.dense.weight'");
    const std::string m = roberta ? "lm_head." : "cls.predictions.";  // the masked-LM head
    Config c;
    c.variant = roberta ? Variant::roberta : Variant::bert, c.activation = Activation::gelu_erf;
    c.eps = roberta ? 1e-5 : 1e-12, c.attn_bias = true;
    c.V = wte->shape[0], c.H = wte->shape[1], c.n_ctx = wpe->shape[0] - skipped, c.F = fc->shape[0], c.L = L;
    c.A = c.H % 64 == 0 ? c.H / 64 : 0;
    c.emb_ln = true;
    c.mlm_head = t.peek(m + "bias") || t.peek(m + (roberta ? "dense.weight" : "transform.dense.weight"));
    c.pooler = t.peek("pooler.dense.weight") || t.peek("pooler.dense.bias");
    c.pad_id = padding_idx;
    const int types = roberta ? 1 : 2;  // rows of token_type_embeddings
    if (j.type == Json::object) read_bert_config(j, cj, c, skipped, types);
    bert_special_ids(t, path, cj, roberta, c);
    LoadedModel lm = hf_model_of(t, c, "num_attention_heads");
    ArenaScope arena(arena_bytes(c, lm.params));
    Params<float>& p = lm.params;
    const int H = c.H;
    read_slots(t, bert_slots(c, p));
    read_bert_position_rows(t, c, p, roberta, padding_idx, skipped, types);
    for (int l = 0; l < c.L; l++) {
        const std::string e = "encoder.layer." + std::to_string(l) + ".attention.self.";
        Layer<float>& y = p.layers[l];
        const char* names[3] = {"query", "key", "value"};
        std::vector<Tensor<float>>* Ws[3] = {&y.attn.W_Q, &y.attn.W_K, &y.attn.W_V};
        std::vector<Tensor<float>>* bs[3] = {&y.attn.b_Q, &y.attn.b_K, &y.attn.b_V};
        for (int part = 0; part < 3; part++) {
            const std::string s = e + names[part];
            split_linear_heads(c, t.grab(s + ".weight", {c.A * c.D, H}), t.grab(s + ".bias", {c.A * c.D}), *Ws[part], *bs[part]);
        }
    }
    if (c.mlm_head) {
        t.drop_tied(m + "decoder.weight", p.W_e, "embeddings.word_embeddings.weight");
        t.drop_tied(m + "decoder.bias", p.b_z, m + "bias");
    }
    for (const char* nsp : {"cls.seq_relationship.weight", "cls.seq_relationship.bias"})
        if (const auto* e = t.peek(nsp)) {
            if (e->shape != (std::string(nsp).back() == 't' ? std::vector<int>{2, H} : std::vector<int>{2}))
                throw t.fail(std::string("tensor '") + nsp + "' is " + shape_str(e->shape) + ", expected " +
                             (std::string(nsp).back() == 't' ? shape_str(std::vector<int>{2, H}) : std::string("2")));
            lm.file.tensors.emplace_back(nsp, st.read(*e));
            t.by.erase(nsp);
        }
    t.check_all_taken();
    return lm;
}

// A checkpoint of this program's own format; every parameter is checked to be finite as it is read.
static LoadedModel load_own_model(const std::string& path, const SafeTensorsReader& st,
                                  const std::vector<std::string>& allowed_extra_prefixes) {
    if (!st.int_buffers.empty()) throw Error("'" + path + "': unexpected tensor '" + st.int_buffers[0] + "' (integers)");
    LoadedModel lm;
    lm.file.metadata = st.metadata;
    try {
        lm.config = config_from_metadata(lm.file.metadata);
    } catch (const Error& e) {
        throw Error("'" + path + "': " + e.what());
    }
    lm.params = make_params<float>(lm.config, false);  // shapes only: each tensor is read into its place
    ArenaScope arena(arena_bytes(lm.config, lm.params));
    std::vector<Named<float>> named = named_tensors(lm.config, lm.params);
    std::map<std::string, Tensor<float>*> want;
    for (auto& nt : named) want[nt.name] = nt.tensor;
    for (auto& e : st.entries) {  // checked before anything is read
        auto it = want.find(e.name);
        if (it == want.end()) {
            bool allowed = false;
            for (auto& pre : allowed_extra_prefixes) allowed |= e.name.rfind(pre, 0) == 0;
            if (!allowed)
                throw Error("'" + path + "': unexpected tensor '" + e.name + "' for a " + variant_name(lm.config.variant) +
                            " model with L=" + std::to_string(lm.config.L) + ", A=" + std::to_string(lm.config.A));
        } else if (e.shape != it->second->shape) {
            throw Error("'" + path + "': tensor '" + e.name + "' is " + shape_str(e.shape) + ", expected " +
                        shape_str(it->second->shape));
        }
    }
    for (auto& kv : want)  // the first missing name in sorted order
        if (!st.find(kv.first)) throw Error("'" + path + "': missing tensor '" + kv.first + "'");
    for (auto& nt : named) *nt.tensor = Tensor<float>::uninit(nt.tensor->shape);  // in the arena, in this order
    for (auto& e : st.entries) {
        auto it = want.find(e.name);
        if (it == want.end()) lm.file.tensors.emplace_back(e.name, st.read(e));
        else if (!st.read(e, it->second->ptr(), 0, it->second->size())) throw nonfinite_error(path, e.name);
    }
    return lm;
}

LoadedModel load_model(const std::string& path, const std::vector<std::string>& allowed_extra_prefixes) {
    const SafeTensorsReader st(path);
    LoadedModel lm;
    if (is_hf_gpt2(st)) lm = import_hf_gpt2(path, st);
    else if (is_hf_openai_gpt(st)) lm = import_hf_openai_gpt(path, st);
    else if (is_hf_roberta(st)) lm = import_hf_bert(path, st, true);
    else if (is_hf_bert(st)) lm = import_hf_bert(path, st, false);
    else return load_own_model(path, st, allowed_extra_prefixes);
    // The imports convert (split, transpose) as they read: checked afterwards, named in our terms.
    const std::string bad = first_nonfinite(lm.config, lm.params);
    if (!bad.empty()) throw nonfinite_error(path, bad);
    return lm;
}

// ---- Export to the Hugging Face classes (see transformer.hpp) ------------------------------------
// The inverse of the imports above, through the same tables (openai_gpt_slots, bert_slots) and the
// inverse of each join or split; GPT-2's names are written here as import_hf_gpt2 reads them.
std::string hf_architecture(const Config& c) {
    switch (c.variant) {
        case Variant::gpt2: return "GPT2LMHeadModel";
        case Variant::gpt: return "OpenAIGPTLMHeadModel";
        case Variant::bert: return c.mlm_head ? "BertForMaskedLM" : "BertModel";
        case Variant::roberta: return c.mlm_head ? "RobertaForMaskedLM" : "RobertaModel";
        case Variant::gpt3: break;
    }
    return "";
}

std::string hf_export_problem(const Config& c) {
    if (c.variant == Variant::gpt3)
        return "gpt3 models have no Hugging Face class that holds them exactly: their Mask^ST layers attend to a band and to "
               "every stride-th earlier token, which no class has; the nearest, GPTNeoForCausalLM, has a band alone, scores "
               "without the 1/sqrt(D) scale, no biases on Q, K, V, and computes its attention in float32 even in a float64 "
               "model (docs/released-weights.md)";
    const std::string cls = hf_architecture(c);
    if (c.D * c.A != c.H)
        return cls + " needs D = H / A, but D = " + std::to_string(c.D) + ", A = " + std::to_string(c.A) + ", H = " + std::to_string(c.H);
    if (c.W_y_rows > 0) return "the model has a fine-tuning head W_y, which " + cls + " has no place for";
    if (c.xlnet) return "the model was trained with --objective xlnet (its query vector w has no place in " + cls + ")";
    if (c.variant == Variant::gpt) {
        if (c.activation != Activation::relu && c.activation != Activation::gelu_tanh)
            return std::string("OpenAIGPTLMHeadModel's activations (afn) are relu, silu and gelu (the tanh form, gelu_tanh here); "
                               "this model's is ") + activation_name(c.activation) + ": train it with --activation relu or gelu_tanh";
        if (c.F != 4 * c.H)
            return "OpenAIGPTLMHeadModel's feed-forward nets are 4 n_embd = " + std::to_string(4 * c.H) + " wide; this model's F = " +
                   std::to_string(c.F);
    }
    if ((c.variant == Variant::bert || c.variant == Variant::roberta) && !c.emb_ln)
        return cls + " normalises the embeddings (embeddings.LayerNorm) and this model has no such LayerNorm (the formulas' " +
               variant_name(c.variant) + "): train it with --mlm-head (the masked-LM head, which brings the LayerNorm along)";
    // Without the head the class is BertModel / RobertaModel, which always builds a pooler
    // (add_pooling_layer is a constructor argument, not a config key): without one in the file,
    // Hugging Face would fill pooler.dense with random numbers.
    if ((c.variant == Variant::bert || c.variant == Variant::roberta) && !c.mlm_head && !c.pooler)
        return cls + " has a pooler (pooler.dense) and this model has none, so Hugging Face would load it with random weights; "
               "train with --mlm-head (exported as " + (c.variant == Variant::bert ? "BertForMaskedLM" : "RobertaForMaskedLM") +
               ", which has no pooler), or start with --init-from from a released encoder, whose pooler is kept";
    return "";
}

static const char* hf_activation_name(Activation a) {
    switch (a) {
        case Activation::gelu_tanh: return "gelu_new";
        case Activation::gelu_erf: return "gelu";
        case Activation::relu: return "relu";
        case Activation::gelu_sigmoid: return "quick_gelu";  // x sigmoid(1.702 x), Hugging Face's QuickGELU
    }
    return "?";
}

std::string hf_gpt2_config_json(const Config& c, int eos_id) {
    std::string j = "{\n";
    j += "  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n";
    j += "  \"vocab_size\": " + std::to_string(c.V) + ",\n";
    j += "  \"n_positions\": " + std::to_string(c.n_ctx) + ",\n  \"n_ctx\": " + std::to_string(c.n_ctx) + ",\n";
    j += "  \"n_embd\": " + std::to_string(c.H) + ",\n  \"n_layer\": " + std::to_string(c.L) + ",\n";
    j += "  \"n_head\": " + std::to_string(c.A) + ",\n";
    j += "  \"n_inner\": " + (c.F == 4 * c.H ? std::string("null") : std::to_string(c.F)) + ",\n";  // null = 4 n_embd
    j += std::string("  \"activation_function\": \"") + hf_activation_name(c.activation) + "\",\n";
    j += "  \"layer_norm_epsilon\": " + shortest_double(c.eps) + ",\n";
    j += "  \"resid_pdrop\": 0.1,\n  \"embd_pdrop\": 0.1,\n  \"attn_pdrop\": 0.1,\n  \"initializer_range\": 0.02,\n";
    j += "  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n";
    if (eos_id >= 0) j += "  \"bos_token_id\": " + std::to_string(eos_id) + ",\n  \"eos_token_id\": " + std::to_string(eos_id) + ",\n";
    j += "  \"torch_dtype\": \"float32\",\n";
    j += std::string("  \"") + WRITTEN_BY_KEY + "\": \"" + WRITTEN_BY + "\"\n}\n";  // the mark check_output_dir looks for
    return j;
}

// RoBERTa's position rows before its first: rows 0..pad_id, the last of them w_pad's (none without <pad>).
static int roberta_skipped_rows(const Config& c) { return c.variant == Variant::roberta ? c.pad_id + 1 : 0; }

std::string hf_export_config_json(const Config& c, int eos_id, int bert_pad_id) {
    if (c.variant == Variant::gpt2) return hf_gpt2_config_json(c, eos_id);
    const std::string problem = hf_export_problem(c);
    if (!problem.empty()) throw Error("export: " + problem);
    auto num = [](long long v) { return std::to_string(v); };
    std::string j = "{\n  \"architectures\": [\"" + hf_architecture(c) + "\"],\n";
    if (c.variant == Variant::gpt) {
        j += "  \"model_type\": \"openai-gpt\",\n";
        j += "  \"vocab_size\": " + num(c.V) + ",\n  \"n_positions\": " + num(c.n_ctx) + ",\n";
        j += "  \"n_embd\": " + num(c.H) + ",\n  \"n_layer\": " + num(c.L) + ",\n  \"n_head\": " + num(c.A) + ",\n";
        j += std::string("  \"afn\": \"") + (c.activation == Activation::relu ? "relu" : "gelu") + "\",\n";  // its gelu is the tanh form
        j += "  \"layer_norm_epsilon\": " + shortest_double(c.eps) + ",\n";
        j += "  \"resid_pdrop\": 0.1,\n  \"embd_pdrop\": 0.1,\n  \"attn_pdrop\": 0.1,\n  \"initializer_range\": 0.02,\n";
    } else {  // bert, roberta
        const bool roberta = c.variant == Variant::roberta;
        j += std::string("  \"model_type\": \"") + (roberta ? "roberta" : "bert") + "\",\n";
        j += "  \"vocab_size\": " + num(c.V) + ",\n  \"hidden_size\": " + num(c.H) + ",\n";
        j += "  \"num_hidden_layers\": " + num(c.L) + ",\n  \"num_attention_heads\": " + num(c.A) + ",\n";
        j += "  \"intermediate_size\": " + num(c.F) + ",\n";
        j += std::string("  \"hidden_act\": \"") + hf_activation_name(c.activation) + "\",\n";
        j += "  \"max_position_embeddings\": " + num(c.n_ctx + roberta_skipped_rows(c)) + ",\n";
        j += "  \"type_vocab_size\": " + std::string(roberta ? "1" : "2") + ",\n";
        j += "  \"layer_norm_eps\": " + shortest_double(c.eps) + ",\n";
        j += "  \"pad_token_id\": " + num(roberta ? c.pad_id : bert_pad_id) + ",\n";
        if (roberta) j += "  \"bos_token_id\": " + num(c.cls_id) + ",\n  \"eos_token_id\": " + num(c.sep_id) + ",\n";
        j += "  \"position_embedding_type\": \"absolute\",\n";
        j += "  \"hidden_dropout_prob\": 0.1,\n  \"attention_probs_dropout_prob\": 0.1,\n  \"initializer_range\": 0.02,\n";
    }
    j += "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\",\n";
    j += std::string("  \"") + WRITTEN_BY_KEY + "\": \"" + WRITTEN_BY + "\"\n}\n";  // the mark check_output_dir looks for
    return j;
}

bool file_has_mark(const std::string& path) {
    std::FILE* f = open_file(path, "rb");
    if (!f) return false;
    char head[4096];
    const std::size_t got = std::fread(head, 1, sizeof head, f);
    std::fclose(f);
    const std::string h(head, got);
    return h.find(std::string("\"") + WRITTEN_BY_KEY + "\": \"" + WRITTEN_BY + "\"") != std::string::npos ||
           h.find(std::string("written by ") + WRITTEN_BY) != std::string::npos;
}

void check_output_dir(const std::string& dir, const std::string& role, const std::vector<std::string>& names,
                      const std::string& marker) {
    if (dir.empty()) throw Error(role + " is empty");
    const std::string what = role + " '" + dir + "'";
    const PathKind kind = path_kind(dir);
    if (kind != PathKind::missing) {
        if (kind != PathKind::directory) throw Error("cannot write " + what + ": it exists and is not a directory");
        if (!directory_writable(dir))
            throw Error("cannot write " + what + ": the directory is not writable (" + std::strerror(errno) + ")");
        std::vector<std::string> entries;
        if (!directory_entries(dir, entries)) throw Error("cannot read the directory " + what + ": " + std::strerror(errno));
        if (entries.empty()) return;
        std::sort(entries.begin(), entries.end());
        std::string list;
        for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
        for (const std::string& e : entries)
            if (std::find(names.begin(), names.end(), e) == names.end())
                throw Error("refusing to write into " + what + ": it holds '" + e + "', which this command does not write (it writes " +
                            list + "); choose a new or empty directory");
        if (!file_has_mark(path_in_dir(dir, marker)))
            throw Error("refusing to write into " + what + ": it is not empty and its " + marker +
                        " was not written by this program (only a directory an earlier run of this command wrote is replaced); "
                        "choose a new or empty directory");
        return;
    }
    const std::string d = trim_separators(dir);
    const std::string parent = dir_of(d);
    if (path_kind(parent) != PathKind::directory)
        throw Error("cannot write " + what + ": its parent directory '" + parent + "' does not exist");
    if (!directory_writable(parent))
        throw Error("cannot write " + what + ": cannot create it in '" + parent + "' (" + std::strerror(errno) + ")");
}

const std::vector<std::string> HF_EXPORT_FILES = {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
                                                   "vocab.json", "merges.txt", "vocab.txt"};

// The model as the layout holds it: with attention biases (zeros where the model has none).
static Params<float> with_attention_biases(const Config& c, const Params<float>& p, Config& e) {
    e = c;
    e.attn_bias = true;
    Params<float> q = make_params<float>(e);  // all zeros
    std::map<std::string, Tensor<float>*> into;
    for (auto& nt : named_tensors(e, q)) into[nt.name] = nt.tensor;
    for (auto& nt : named_tensors(c, const_cast<Params<float>&>(p))) *into.at(nt.name) = *nt.tensor;  // read only
    return q;
}

// The tensors an export writes, in order, by their Hugging Face names: ours in place, or made on the
// way (joined, split or transposed) and kept here until the file is written.
struct HfTensorList {
    std::deque<Tensor<float>> made;
    std::vector<std::pair<std::string, const Tensor<float>*>> list;
    void put(const std::string& name, Tensor<float> t) {
        made.push_back(std::move(t));
        list.push_back({name, &made.back()});
    }
    // A table's slots under prefix (the heads' names have none); a Linear's weight transposed to out x in.
    void put_slots(const std::vector<HfSlot>& slots, const std::string& prefix) {
        for (const HfSlot& s : slots) {
            const bool head = s.name.rfind("cls.", 0) == 0 || s.name.rfind("lm_head.", 0) == 0;  // the heads' names have no prefix
            const std::string name = (head ? "" : prefix) + s.name;
            if (s.linear) put(name, transpose(*s.ours));
            else list.push_back({name, s.ours});
        }
    }
};

// GPT-2's tensors as import_hf_gpt2 reads them: each layer's c_attn joined from the heads' W_Q, W_K, W_V.
static void gpt2_export_tensors(HfTensorList& out, const Config& e, Params<float>& q) {
    out.list = {{"wte.weight", &q.W_e}, {"wpe.weight", &q.W_p}};
    for (int l = 0; l < e.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        Layer<float>& y = q.layers[l];
        Tensor<float> W, b;
        join_c_attn(e, y.attn, W, b);
        out.list.insert(out.list.end(), {{h + "ln_1.weight", &y.ln_1_gamma}, {h + "ln_1.bias", &y.ln_1_beta}});
        out.put(h + "attn.c_attn.weight", std::move(W)), out.put(h + "attn.c_attn.bias", std::move(b));
        out.list.insert(out.list.end(), {{h + "attn.c_proj.weight", &y.attn.W_O},
                                         {h + "attn.c_proj.bias", &y.attn.b_O},
                                         {h + "ln_2.weight", &y.ln_2_gamma},
                                         {h + "ln_2.bias", &y.ln_2_beta},
                                         {h + "mlp.c_fc.weight", &y.ffn.W_1},
                                         {h + "mlp.c_fc.bias", &y.ffn.b_1},
                                         {h + "mlp.c_proj.weight", &y.ffn.W_2},
                                         {h + "mlp.c_proj.bias", &y.ffn.b_2}});
    }
    out.list.insert(out.list.end(), {{"ln_f.weight", &q.ln_f_gamma}, {"ln_f.bias", &q.ln_f_beta}});
}

// BERT's and RoBERTa's tensors: the body under "bert." / "roberta." beside a head, bare without one
// (BertModel); the position and token-type rows and each layer's query, key, value joined from the heads.
static void bert_export_tensors(HfTensorList& out, const Config& c, const Config& e, Params<float>& q) {
    const bool roberta = c.variant == Variant::roberta;
    const std::string prefix = c.mlm_head ? (roberta ? "roberta." : "bert.") : "";
    out.put_slots(bert_slots(e, q), prefix);
    const int H = c.H, skipped = roberta_skipped_rows(c);
    Tensor<float> wp(c.n_ctx + skipped, H);  // RoBERTa: zeros before <pad>'s row (never read), w_pad, then W_p
    for (int i = 0; i < c.n_ctx; i++) std::copy(q.W_p.row(i), q.W_p.row(i) + H, wp.row(i + skipped));
    if (roberta && c.pad_id >= 0) std::copy(q.w_pad.ptr(), q.w_pad.ptr() + H, wp.row(c.pad_id));
    out.put(prefix + "embeddings.position_embeddings.weight", std::move(wp));
    Tensor<float> tt(roberta ? 1 : 2, H);  // BERT: t_i = 0 -> w_A, 1 -> w_B; RoBERTa: one type, zeros
    if (!roberta) std::copy(q.w_A.ptr(), q.w_A.ptr() + H, tt.row(0)), std::copy(q.w_B.ptr(), q.w_B.ptr() + H, tt.row(1));
    out.put(prefix + "embeddings.token_type_embeddings.weight", std::move(tt));
    for (int l = 0; l < c.L; l++) {
        const std::string s = prefix + "encoder.layer." + std::to_string(l) + ".attention.self.";
        const MultiHeadSAParams<float>& a = q.layers[l].attn;
        const char* names[3] = {"query", "key", "value"};
        const std::vector<Tensor<float>>* Ws[3] = {&a.W_Q, &a.W_K, &a.W_V};
        const std::vector<Tensor<float>>* bs[3] = {&a.b_Q, &a.b_K, &a.b_V};
        for (int part = 0; part < 3; part++) {
            Tensor<float> W, b;
            join_linear_heads(e, *Ws[part], *bs[part], W, b);
            out.put(s + names[part] + ".weight", std::move(W)), out.put(s + names[part] + ".bias", std::move(b));
        }
    }
}

HfExport export_hf(const std::string& dir, const Config& c, const Params<float>& p,
                   const std::map<std::string, std::string>& extra_metadata, const std::string& input) {
    const std::string problem = hf_export_problem(c);
    if (!problem.empty()) throw Error("export: " + problem);
    check_output_dir(dir, "--out", HF_EXPORT_FILES, "config.json");
    const std::string model_path = path_in_dir(dir, "model.safetensors");
    const Tokenizer tok = tokenizer_of(extra_metadata, input.empty() ? model_path : input);  // kind "": none recorded
    const bool masked = c.variant == Variant::bert || c.variant == Variant::roberta;
    if (!tok.kind.empty() && tok.size() + (tok.kind == "char" && masked ? 3 : 0) != c.V)
        throw Error("export: the recorded tokenizer (" + std::string(tokenizer_title(tok.kind)) + ") has " + std::to_string(tok.size()) +
                    " tokens, which does not fit the model's V = " + std::to_string(c.V));
    const std::vector<std::pair<std::string, std::string>> tok_files = hf_tokenizer_files(tok, c);
    std::vector<OutputFile> outs;  // the directory is new, empty or ours: its files are ours to replace
    for (const std::string& name : HF_EXPORT_FILES) outs.push_back({path_in_dir(dir, name), "--out/" + name, OutputKind::in_own_dir});
    if (path_kind(dir) != PathKind::missing) check_outputs(outs, {{input, "--checkpoint"}});  // a new directory holds nothing to check
    // Every file is staged and renamed into place at the end: an error or a signal before that
    // leaves the directory as it was (a new one is removed again).
    StagedDir staged(dir);
    Config e;
    Params<float> q = with_attention_biases(c, p, e);
    HfTensorList out;
    if (c.variant == Variant::gpt2) {
        gpt2_export_tensors(out, e, q);
    } else if (c.variant == Variant::gpt) {  // OpenAIGPTLMHeadModel saves its body under "transformer."
        out.put_slots(openai_gpt_slots(e, q), "transformer.");
        for (int l = 0; l < c.L; l++) {
            Tensor<float> W, b;
            join_c_attn(e, q.layers[l].attn, W, b);
            const std::string h = "transformer.h." + std::to_string(l) + ".attn.c_attn.";
            out.put(h + "weight", std::move(W)), out.put(h + "bias", std::move(b));
        }
    } else {
        bert_export_tensors(out, c, e, q);
    }
    const std::vector<std::pair<std::string, const Tensor<float>*>>& list = out.list;
    std::map<std::string, std::string> meta = extra_metadata;
    meta["format"] = "pt";  // transformers refuses a safetensors file without it
    HfExport done;
    done.architecture = hf_architecture(c);
    done.model_type = c.variant == Variant::gpt ? "openai-gpt" : variant_name(c.variant);
    done.files = {"model.safetensors"};
    std::set<std::string> written = {"model.safetensors", "config.json"};
    try {
        save_safetensors(staged.stage("model.safetensors"), meta, list);
        for (const auto& f : tok_files)
            write_file_atomic(staged.stage(f.first), f.second), written.insert(f.first), done.files.push_back(f.first);
        const int eos = tok.kind == "gpt2-bpe" ? tok.bpe.eot : -1;
        const int bert_pad = tok.kind == "bert-wordpiece" && tok.wordpiece.pad >= 0 ? tok.wordpiece.pad : 0;
        write_file_atomic(staged.stage("config.json"), hf_export_config_json(c, eos, bert_pad));  // last: its mark makes the directory ours
        done.files.push_back("config.json");
        std::vector<std::string> stale;  // an earlier export's tokenizer does not belong to this model
        for (const std::string& name : HF_EXPORT_FILES)
            if (!written.count(name)) stale.push_back(name);
        staged.commit(stale);
    } catch (const Error& e) {  // the staged files go with `staged`; the message names the files the user asked for
        throw Error(staged.failure(e.what()));
    }
    return done;
}

// ================================================================================================
// RUNS: the built-in tasks, the memory a run needs, the plot, one training loop for every objective,
// starting from a checkpoint, fine-tuning (formulas §28), bench
// ================================================================================================

// ---- The built-in task: addition -----------------------------------------------------------------
const std::string AdditionTask::alphabet = "\n+0123456789=";

std::string AdditionTask::problem(int a, int b) {
    char buf[32];
    const int s = a + b;
    std::snprintf(buf, sizeof buf, "%03d+%03d=%d%d%d%d\n", a, b, s % 10, s / 10 % 10, s / 100 % 10, s / 1000);
    return buf;
}

bool AdditionTask::held_out(int a, int b) {
    Rng h((uint64_t)a * 1000 + (uint64_t)b);  // a hash of the pair, so the split has no pattern
    return h.next() % 10 == 0;
}

// One addition problem as a training sequence: x = its first 12 characters, targets = the next
// character only where it is part of the answer (the 4 digits and the newline).
static void addition_example(const CharVocab& vocab, int a, int b, std::vector<int>& x, std::vector<int>& y) {
    const std::vector<int> ids = vocab.encode(AdditionTask::problem(a, b));
    x = ids;
    x.pop_back();
    y.assign(x.size(), -1);
    for (std::size_t i = AdditionTask::prompt_len() - 1; i < x.size(); i++) y[i] = ids[i + 1];
}

// The built-in labelled tasks, one per input transformation, in the world of the addition task
// (operands and sums written as the pre-training text writes them: "123+456", sum "9750"):
//   classify    big|small: is the sum 1000 or more?          "big<TAB>623+456"
//   entailment  yes|no: is the hypothesis the sum?           "yes<TAB>123+456<TAB>9750"
//   similarity  same|different: do the two sums agree?       "same<TAB>123+456<TAB>300+279"
//   choice      which of 4 sums is the sum?                   "2<TAB>123+456<TAB>3850<TAB>0141<TAB>9750<TAB>6201"
// A wrong sum is any other sum 0..1998, so its units digit differs 9 times in 10: the tasks need
// the arithmetic, mostly of the digit the pre-training text states first. The premise stops before
// "=": with the start token in front and the delimiter in the place of "=", every digit sits where
// it sat in a pre-training line read with --line-windows.
// held_out: only pairs the pre-training never saw (AdditionTask::held_out), for validation files.
std::string addition_finetune_task(FinetuneKind kind, int examples, uint64_t seed, bool held_out) {
    if (examples < 1) throw Error("addition_finetune_task: examples must be >= 1");
    Rng rng(seed);
    auto pair = [&](int& a, int& b) {
        do a = rng.below(1000), b = rng.below(1000);
        while (AdditionTask::held_out(a, b) != held_out);
    };
    auto operands = [](int a, int b) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%03d+%03d", a, b);
        return std::string(buf);
    };
    auto sum_text = [](int s) {  // least significant digit first, 4 digits
        char buf[48];
        std::snprintf(buf, sizeof buf, "%d%d%d%d", s % 10, s / 10 % 10, s / 100 % 10, s / 1000);
        return std::string(buf);
    };
    auto other = [&](int s) {  // a different sum 0..1998
        int t;
        do t = rng.below(1999);
        while (t == s);
        return t;
    };
    std::string out;
    for (int k = 0; k < examples; k++) {
        int a, b;
        pair(a, b);
        const int s = a + b;
        switch (kind) {
            case FinetuneKind::classify: out += std::string(s >= 1000 ? "big" : "small") + "\t" + operands(a, b); break;
            case FinetuneKind::entailment: {
                const bool yes = rng.below(2) == 0;
                out += std::string(yes ? "yes" : "no") + "\t" + operands(a, b) + "\t" + sum_text(yes ? s : other(s));
                break;
            }
            case FinetuneKind::similarity: {
                const bool same = rng.below(2) == 0;
                const int t = same ? s : other(s);
                const int c = std::max(0, t - 999) + rng.below(std::min(t, 999) - std::max(0, t - 999) + 1);  // c + d = t
                out += std::string(same ? "same" : "different") + "\t" + operands(a, b) + "\t" + operands(c, t - c);
                break;
            }
            case FinetuneKind::choice: {
                const int answer = rng.below(4);
                std::vector<int> sums = {s};
                while (sums.size() < 4) {
                    const int t = other(s);
                    if (std::find(sums.begin(), sums.end(), t) == sums.end()) sums.push_back(t);
                }
                std::swap(sums[0], sums[answer]);
                out += std::to_string(answer) + "\t" + operands(a, b);
                for (int t : sums) out += "\t" + sum_text(t);
                break;
            }
        }
        out += "\n";
    }
    return out;
}

TF_COLD_END
double addition_accuracy(const Config& c, const Params<float>& p, const CharVocab& vocab, int problems, uint64_t seed) {
    Rng rng(seed);
    int right = 0, done = 0;
    while (done < problems) {
        const int a = rng.below(1000), b = rng.below(1000);
        if (!AdditionTask::held_out(a, b)) continue;
        const std::string full = AdditionTask::problem(a, b);
        std::vector<int> prompt = vocab.encode(full.substr(0, AdditionTask::prompt_len()));
        Rng unused(0);
        const std::vector<int> out = generate(c, p, prompt, AdditionTask::answer_len(), 0.0, 0, unused);
        right += vocab.decode(out) == full.substr(0, AdditionTask::prompt_len() + AdditionTask::answer_len());
        done++;
    }
    return (double)right / problems;
}

TF_COLD_BEGIN
// ---- Memory of a training run ----------------------------------------------------------------
// Activations per step (floats, B*n rows): per layer the caches of two LayerNorms, the inputs of
// both sub-blocks, Q K V and the concatenated heads (4 H), the attention probabilities (A n per
// row), the FFN's pre-activation and output (2 F) and two dropout masks: about 12 H + 2 F + A n;
// then the logits and their gradient (2 V per row). The backward pass holds a few more of the
// same size at a time, so this is the right order, not an exact count.
TrainMemory train_memory(const Config& c, long long B, int n) {
    TrainMemory m;
    const double floats = (double)count_params(c).actual;
    m.params = 4 * floats, m.grads = 4 * floats, m.adam = 8 * floats;
    const double rows = (double)B * n;
    const double logit_rows = is_causal(c.variant) ? rows : 0.15 * rows;  // a masked LM de-embeds its targets only
    m.activations = 4 * (rows * (double)c.L * (12.0 * c.H + 2.0 * c.F + (double)c.A * n) + logit_rows * 2.0 * c.V);
    return m;
}

void require_memory(const std::string& command, double need, const std::string& detail, const std::string& drivers,
                    const MemoryLimit& limit, bool check) {
    if (!check || limit.bytes <= 0 || need <= limit.bytes) return;
    char buf[96];
    std::snprintf(buf, sizeof buf, "about %.2f GB", need / (1024.0 * 1024.0 * 1024.0));
    std::string msg = command + ": this run needs " + buf + " (" + detail + "), more than the ";
    std::snprintf(buf, sizeof buf, "%.2f GB", limit.bytes / (1024.0 * 1024.0 * 1024.0));
    msg += std::string(buf) + " it can have (" + limit.source + "); make " + drivers +
           " smaller, or give --no-memory-check to start it anyway";
    throw Error(msg);
}

// ---- Plot ----------------------------------------------------------------------------------------
std::string loss_svg(const std::vector<std::pair<long long, double>>& train,
                     const std::vector<std::pair<long long, double>>& val, const std::string& title) {
    const double W = 720, Hh = 420, left = 72, right = 20, top = 40, bottom = 50;
    long long xmax = 1;
    double ymin = 1e300, ymax = -1e300;
    for (auto* s : {&train, &val})
        for (auto& pt : *s) xmax = std::max(xmax, pt.first), ymin = std::min(ymin, pt.second), ymax = std::max(ymax, pt.second);
    if (ymin > ymax) ymin = 0, ymax = 1;
    if (ymax - ymin < 1e-9) ymax = ymin + 1;
    auto X = [&](double s) { return left + (W - left - right) * s / (double)xmax; };
    auto Y = [&](double l) { return top + (Hh - top - bottom) * (ymax - l) / (ymax - ymin); };
    std::ostringstream o;
    o.precision(5);
    o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << Hh << "' font-family='sans-serif' font-size='12'>\n";
    o << SVG_MARK << "\n";
    o << "<rect width='100%' height='100%' fill='white'/>\n";
    std::string esc;
    for (char ch : title) esc += ch == '<' ? "&lt;" : ch == '&' ? "&amp;" : std::string(1, ch);
    o << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>" << esc << "</text>\n";
    for (int k = 0; k <= 5; k++) {  // grid and tick labels
        const double l = ymin + (ymax - ymin) * k / 5, s = (double)xmax * k / 5;
        o << "<line x1='" << left << "' x2='" << W - right << "' y1='" << Y(l) << "' y2='" << Y(l) << "' stroke='#ddd'/>\n";
        char label[32];
        std::snprintf(label, sizeof label, "%.3g", l);
        o << "<text x='" << left - 6 << "' y='" << Y(l) + 4 << "' text-anchor='end'>" << label << "</text>\n";
        o << "<text x='" << X(s) << "' y='" << Hh - bottom + 18 << "' text-anchor='middle'>" << (long long)s << "</text>\n";
    }
    o << "<text x='" << W / 2 << "' y='" << Hh - 10 << "' text-anchor='middle'>step</text>\n";
    o << "<text x='14' y='" << Hh / 2 << "' transform='rotate(-90 14 " << Hh / 2 << ")' text-anchor='middle'>loss (nats/token)</text>\n";
    auto polyline = [&](const std::vector<std::pair<long long, double>>& s, const char* color) {
        o << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
        for (auto& pt : s) o << X((double)pt.first) << "," << Y(pt.second) << " ";
        o << "'/>\n";
    };
    polyline(train, "#1f77b4");
    polyline(val, "#d62728");
    for (auto& pt : val) o << "<circle cx='" << X((double)pt.first) << "' cy='" << Y(pt.second) << "' r='3' fill='#d62728'/>\n";
    o << "<text x='" << W - right - 150 << "' y='" << top + 14 << "' fill='#1f77b4'>train loss</text>\n";
    o << "<text x='" << W - right - 70 << "' y='" << top + 14 << "' fill='#d62728'>val loss</text>\n";
    o << "</svg>\n";
    return o.str();
}

// ---- The training loop ---------------------------------------------------------------------------

// The hyperparameters travel in the checkpoint as "train.<flag>" metadata, so --resume continues
// the same run.
static std::map<std::string, std::string> options_metadata(const TrainOptions& o) {
    return {{"train.data", o.data},
            {"train.val_data", o.val_data},
            {"train.batch", std::to_string(o.batch)},
            {"train.accum", std::to_string(o.accum)},
            {"train.steps", std::to_string(o.steps)},
            {"train.warmup", std::to_string(o.warmup)},
            {"train.eval_every", std::to_string(o.eval_every)},
            {"train.eval_steps", std::to_string(o.eval_steps)},
            {"train.save_every", std::to_string(o.save_every)},
            {"train.log_every", std::to_string(o.log_every)},
            {"train.lr", full_digits(o.lr)},
            {"train.min_lr", full_digits(o.min_lr)},
            {"train.weight_decay", full_digits(o.weight_decay)},
            {"train.beta1", full_digits(o.beta1)},
            {"train.beta2", full_digits(o.beta2)},
            {"train.grad_clip", full_digits(o.grad_clip)},
            {"train.dropout", full_digits(o.dropout)},
            {"train.seed", std::to_string(o.seed)},
            {"train.schedule", o.schedule},
            {"train.objective", o.objective},
            {"train.predict", std::to_string(o.predict)},
            {"train.line_windows", o.line_windows ? "1" : "0"}};
}
static void options_from_metadata(const std::map<std::string, std::string>& m, TrainOptions& o) {
    auto get = [&](const char* k) -> const std::string& {
        auto it = m.find(k);
        if (it == m.end()) throw Error(std::string("not a training checkpoint: metadata lacks '") + k + "'");
        return it->second;
    };
    o.data = get("train.data");
    o.steps = parse_i64(get("train.steps"), "train.steps");
    o.batch = parse_int(get("train.batch"), "train.batch");
    o.warmup = parse_i64(get("train.warmup"), "train.warmup");
    o.eval_every = parse_i64(get("train.eval_every"), "train.eval_every");
    o.eval_steps = parse_i64(get("train.eval_steps"), "train.eval_steps");
    o.save_every = parse_i64(get("train.save_every"), "train.save_every");
    o.log_every = parse_i64(get("train.log_every"), "train.log_every");
    o.lr = parse_double(get("train.lr"), "train.lr");
    o.min_lr = parse_double(get("train.min_lr"), "train.min_lr");
    o.weight_decay = parse_double(get("train.weight_decay"), "train.weight_decay");
    o.beta1 = parse_double(get("train.beta1"), "train.beta1");
    o.beta2 = parse_double(get("train.beta2"), "train.beta2");
    o.grad_clip = parse_double(get("train.grad_clip"), "train.grad_clip");
    o.dropout = parse_double(get("train.dropout"), "train.dropout");
    o.seed = parse_u64(get("train.seed"), "train.seed");
    auto optional = [&](const char* k, const std::string& fallback) { return m.count(k) ? m.at(k) : fallback; };
    o.schedule = optional("train.schedule", "cosine");  // absent in older checkpoints
    o.objective = optional("train.objective", "lm");
    o.predict = parse_int(optional("train.predict", "0"), "train.predict");
    o.line_windows = optional("train.line_windows", "0") == "1";
    o.accum = parse_int(optional("train.accum", "1"), "train.accum");
    o.val_data = optional("train.val_data", "");
}

static void check_options(const TrainOptions& o) {
    auto fail = [](const std::string& s) { throw Error("train: " + s); };
    if (o.layers < 1 || o.heads < 1 || o.embd < 1 || o.ffn < 0 || o.block < 0 || o.batch < 1)
        fail("--layers, --heads, --embd, --batch must be positive (--ffn, --block >= 0)");
    if (o.accum < 1 || o.accum > 65536) fail("--accum must be 1..65536 (batches summed per step), got " + std::to_string(o.accum));
    if (o.embd % o.heads != 0) fail("--embd " + std::to_string(o.embd) + " is not divisible by --heads " + std::to_string(o.heads));
    if (o.steps < 1) fail("--steps must be at least 1");
    if ((long long)o.batch * std::max(o.block, 1) > (1 << 22)) fail("--batch x --block is too large (at most 4194304 tokens a step)");
    if (o.warmup < 0 || o.eval_every < 0 || o.eval_steps < 1 || o.save_every < 0 || o.log_every < 1 || o.stop_at < 0)
        fail("--warmup, --eval-every, --save-every, --stop-at must be >= 0, --eval-steps and --log-every >= 1");
    // Each number as the shortest form that reads back the same: -1, 0.0003, 1e-08.
    auto got = [](double v) { return ", got " + shortest_double(v); };
    if (!(o.lr > 0)) fail("--lr must be > 0" + got(o.lr));
    if (o.min_lr < 0 || o.min_lr > o.lr)
        fail("--min-lr must be in [0, --lr] = [0, " + shortest_double(o.lr) + "]" + got(o.min_lr));
    if (o.weight_decay < 0) fail("--weight-decay must be >= 0" + got(o.weight_decay));
    if (o.beta1 < 0 || o.beta1 >= 1) fail("--beta1 must be in [0, 1)" + got(o.beta1));
    if (o.beta2 < 0 || o.beta2 >= 1) fail("--beta2 must be in [0, 1)" + got(o.beta2));
    if (o.grad_clip < 0) fail("--grad-clip must be >= 0 (0 = off)" + got(o.grad_clip));
    if (o.dropout < 0 || o.dropout >= 1) fail("--dropout must be in [0, 1)" + got(o.dropout));
    if (o.data.empty() && o.line_windows) fail("--line-windows applies to a text (--data FILE), not to the built-in task");
    if (o.data.empty() && o.block != 0)
        fail("--block does not apply to the built-in addition task (its block is one problem, 12 or 13 tokens); give --data FILE to train on a text");
}

// The corpus of a training run: a text file's ids split 90% / 10%, or the built-in task.
struct Corpus {
    bool task = false;
    CharVocab vocab;
    std::vector<int> train, val;
    std::vector<int> train_starts, val_starts;  // --line-windows: the window starts (newlines) in each split
    bool cls_sep = false;   // windows of n - 2 tokens as [CLS] window [SEP] (BERT, RoBERTa on subword tokens)
    std::size_t bytes = 0;  // the text file's size and content hash (resume checks them)
    uint64_t hash = 0;
    std::size_t val_bytes = 0;  // the same for --val's file, if given
    uint64_t val_hash = 0;
    std::vector<std::string> warnings;  // about the text files (line_end_warning), printed with the run's other warnings
};

// FNV-1a, 64 bits: the content hash a checkpoint records for its training text.
static uint64_t fnv1a64(const std::string& bytes) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char b : bytes) h = (h ^ b) * 0x100000001b3ull;
    return h;
}

std::vector<int> line_window_starts(const std::vector<int>& ids, int newline, int n) {
    std::vector<int> starts;
    for (std::size_t i = 0; i + n + 1 <= ids.size(); i++)
        if (ids[i] == newline) starts.push_back((int)i);
    return starts;
}

// The ids of --data (and of --val, if given: then the training split is the whole of --data).
static Corpus load_corpus(const std::string& path, const CharVocab* vocab, int n, bool line_windows,
                          const Tokenizer* bpe = nullptr, bool quiet = true, const std::string& val_path = "") {
    Corpus k;
    if (path.empty()) {
        if (!val_path.empty()) throw Error("train: --val needs --data (the built-in task makes its own validation problems)");
        k.task = true;
        k.vocab = vocab ? *vocab : CharVocab::from_text(AdditionTask::alphabet);
        return k;
    }
    // One file's ids, its size and hash; the character vocabulary comes from --data's text.
    auto ids_of = [&](const std::string& file, std::size_t& bytes, uint64_t& hash) {
        const std::string text = read_file(file);
        if (text.empty()) throw Error("'" + file + "' is empty");
        bytes = text.size(), hash = fnv1a64(text);
        if (is_token_file(text)) {  // llm.c's .bin: GPT-2's ids, tokenized already
            if (!bpe)
                throw Error("'" + file + "' is a token file (llm.c's format, token ids, not text): give the tokenizer its ids "
                            "belong to, --encoder encoder.json --vocab vocab.bpe (GPT-2's)");
            return parse_token_file(text, "'" + file + "'", bpe->size());
        }
        require_text(text, file);
        const std::string line_ends = line_end_warning(text, file);
        if (!line_ends.empty()) k.warnings.push_back(line_ends);
        if (!bpe && file == path) k.vocab = vocab ? *vocab : CharVocab::from_text(text);
        return bpe ? encode_with_progress(*bpe, text, "'" + file + "'", quiet)  // BPE tokens
                   : k.vocab.encode(text, "'" + file + "'");
    };
    const std::vector<int> ids = ids_of(path, k.bytes, k.hash);
    if (val_path.empty()) {  // the last 10% of --data
        const std::size_t cut = ids.size() * 9 / 10;
        k.train.assign(ids.begin(), ids.begin() + cut);
        k.val.assign(ids.begin() + cut, ids.end());
    } else {
        k.train = ids;
        k.val = ids_of(val_path, k.val_bytes, k.val_hash);
        if ((long long)k.train.size() < n + 2)
            throw Error("'" + path + "' is too short: " + std::to_string(ids.size()) + " tokens, fewer than the block of " +
                        std::to_string(n + 1) + " the training windows need");
    }
    if ((long long)k.val.size() < n + 2)
        throw Error(val_path.empty() ? "'" + path + "' is too short: " + std::to_string(k.bytes) + " bytes (" + std::to_string(ids.size()) +
                                           " tokens), the 10% validation split needs more tokens than the block of " + std::to_string(n + 1)
                                     : "--val '" + val_path + "' is too short: " + std::to_string(k.val.size()) +
                                           " tokens, the validation windows need more than the block of " + std::to_string(n + 1));
    if (line_windows) {
        const int nl = k.vocab.id[(unsigned char)'\n'];  // -1 if the text has no newline
        auto starts = [&](const std::vector<int>& ids, std::vector<int>& out, const char* split) {
            out = line_window_starts(ids, nl, n);
            if (out.empty())
                throw Error("--line-windows: the " + std::string(split) + " split of '" + path +
                            "' has no newline followed by a whole block of " + std::to_string(n + 1) + " characters");
        };
        starts(k.train, k.train_starts, val_path.empty() ? "training (first 90%)" : "training");
        starts(k.val, k.val_starts, val_path.empty() ? "validation (last 10%)" : "validation (--val)");
    }
    return k;
}

// A data file a checkpoint records: --data under "train.data", --val under "train.val_data"; each
// KEY with KEY_path (absolute), KEY_bytes and KEY_fnv1a64 (content hash).
struct DataRecord {
    const char* key;   // "train.data"
    const char* flag;  // "--data"
    const char* what;  // "training data"
    const char* none;  // why a given flag cannot apply when nothing is recorded
};
static const DataRecord DATA_RECORD = {"train.data", "--data", "training data", "was trained on the built-in task, not on a file"};
static const DataRecord VAL_RECORD = {"train.val_data", "--val", "validation data",
                                      "was trained without --val (its validation split is the last 10% of --data)"};

// The file of a resumed run: the one given (a moved copy) or the one recorded, by its path as
// given or else its absolute path; its size and content hash must be the recorded ones.
static std::string resume_data_path(const std::map<std::string, std::string>& md, const std::string& given,
                                    const std::string& checkpoint, const DataRecord& r = DATA_RECORD) {
    const std::string key = r.key, recorded = md.count(key) ? md.at(key) : "";
    if (recorded.empty() && given.empty()) return "";  // the built-in task, or no --val
    if (recorded.empty()) throw Error(std::string(r.flag) + ": '" + checkpoint + "' " + r.none);
    std::string path = given;
    if (path.empty()) {
        const std::string abs = md.count(key + "_path") ? md.at(key + "_path") : "";
        path = path_kind(recorded) != PathKind::missing || abs.empty() || path_kind(abs) == PathKind::missing ? recorded : abs;
    }
    std::FILE* f = open_file(path, "rb");
    if (!f)
        throw Error("the " + std::string(r.what) + " '" + path + "' of '" + checkpoint + "' cannot be opened (" + std::strerror(errno) +
                    "); if it moved, give " + r.flag + " FILE with the same text");
    std::fclose(f);
    return path;
}
static void check_resume_data(const std::map<std::string, std::string>& md, std::size_t file_bytes, uint64_t file_hash,
                              const std::string& path, const std::string& checkpoint, const DataRecord& r = DATA_RECORD) {
    const std::string key = r.key;
    if (!md.count(key + "_bytes") || !md.count(key + "_fnv1a64")) {
        std::fprintf(stderr, "note: '%s' does not record its data's size and hash (an older checkpoint); '%s' is not checked\n",
                     checkpoint.c_str(), path.c_str());
        return;
    }
    const std::string bytes = std::to_string(file_bytes), hash = std::to_string(file_hash);
    std::string diff;
    if (md.at(key + "_bytes") != bytes) diff = "its size is " + bytes + " bytes, the checkpoint recorded " + md.at(key + "_bytes");
    else if (md.at(key + "_fnv1a64") != hash) diff = "same size, but its content hash (FNV-1a 64) differs from the recorded one";
    if (!diff.empty())
        throw Error("the " + std::string(r.what) + " '" + path + "' has changed since '" + checkpoint + "' was written: " + diff +
                    "; resume needs the same text (give " + r.flag + " FILE to point at a copy of it)");
}
// The data's record in a checkpoint's metadata (the path as given in KEY, set with the options).
static void record_data(std::map<std::string, std::string>& meta, const std::string& path, std::size_t bytes, uint64_t hash,
                        const DataRecord& r) {
    const std::string key = r.key;
    const std::string abs = real_path(path);
    meta[key + "_path"] = abs.empty() ? path : abs;
    meta[key + "_bytes"] = std::to_string(bytes);
    meta[key + "_fnv1a64"] = std::to_string(hash);
}

// B examples: random windows (text) or random problems (task). GPT variants predict the next
// character; BERT/RoBERTa their corrupted positions (mlm_corrupt).
static Batch make_batch(const Config& c, const Corpus& k, bool validation, int B, int n, Rng& rng) {
    Batch b;
    b.B = B, b.n = n;
    for (int s = 0; s < B; s++) {
        std::vector<int> x, y;
        if (k.task) {
            int a, bb;
            do a = rng.below(1000), bb = rng.below(1000);
            while (AdditionTask::held_out(a, bb) != validation);
            if (is_causal(c.variant)) addition_example(k.vocab, a, bb, x, y);
            else x = k.vocab.encode(AdditionTask::problem(a, bb)), y.assign(x.size(), -1);  // mlm_corrupt sets targets
        } else {
            const std::vector<int>& ids = validation ? k.val : k.train;
            const std::vector<int>& starts = validation ? k.val_starts : k.train_starts;  // empty: anywhere
            const int start = starts.empty() ? rng.below((int)ids.size() - n - 1) : starts[rng.below((int)starts.size())];
            if (k.cls_sep) {  // [CLS] x_1..x_{n-2} [SEP]; mlm_corrupt below sets the targets
                x = {c.cls_id};
                x.insert(x.end(), ids.begin() + start, ids.begin() + start + n - 2);
                x.push_back(c.sep_id);
                y.assign(n, -1);
            } else {
                x = std::vector<int>(ids.begin() + start, ids.begin() + start + n);
                y = std::vector<int>(ids.begin() + start + 1, ids.begin() + start + n + 1);
            }
        }
        b.tokens.insert(b.tokens.end(), x.begin(), x.end());
        b.targets.insert(b.targets.end(), y.begin(), y.end());
    }
    if (!is_causal(c.variant)) {
        MLMExample e = mlm_corrupt(b.tokens, B, n, c, rng);
        b.tokens = std::move(e.tokens), b.targets = std::move(e.targets);
    }
    return b;
}

// Mean validation loss over eval_steps batches drawn with a fixed seed (the same batches at every
// evaluation, and the training generator is not touched, so resuming changes nothing).
static double evaluate(const Config& c, const Params<float>& p, const Corpus& k, int B, int n, long long batches,
                       uint64_t seed) {
    Rng rng(seed ^ 0x5EED5EEDull);
    double sum = 0;
    for (long long s = 0; s < batches; s++) sum += model_loss(c, p, make_batch(c, k, true, B, n, rng));
    return sum / (double)batches;
}

template <typename T>
double corpus_loss(const Config& c, const Params<T>& p, const std::vector<int>& ids, uint64_t seed, long long* count,
                   int window, bool cls_sep, const CorpusProgress& progress) {
    if (ids.size() < 2) throw Error("corpus_loss: need at least 2 tokens, got " + std::to_string(ids.size()));
    const bool causal = is_causal(c.variant);
    if (cls_sep && (causal || c.cls_id < 0 || c.sep_id < 0)) throw Error("corpus_loss: [CLS] ... [SEP] windows need a bert or roberta model");
    const int n = (window > 0 ? std::min(window, c.n_ctx) : c.n_ctx) - (cls_sep ? 2 : 0);  // the text's ids per window
    if (n < 1) throw Error("corpus_loss: n_ctx = " + std::to_string(c.n_ctx) + " leaves no room between [CLS] and [SEP]");
    Rng rng(seed);
    double sum = 0;
    long long predicted = 0;
    const long long windows = ((long long)ids.size() - (causal ? 1 : 0) + n - 1) / n;
    long long windows_done = 0;
    for (std::size_t start = 0; start + (causal ? 1 : 0) < ids.size(); start += n) {
        const std::size_t end = std::min(ids.size(), start + n + (causal ? 1 : 0));
        Batch b;
        if (causal) {
            b.tokens = std::vector<int>(ids.begin() + start, ids.begin() + (end - 1));  // x_1..x_m
            b.targets = std::vector<int>(ids.begin() + (start + 1), ids.begin() + end);  // x_2..x_{m+1}
        } else {
            std::vector<int> w(ids.begin() + start, ids.begin() + end);
            if (cls_sep) w.insert(w.begin(), c.cls_id), w.push_back(c.sep_id);
            MLMExample e = mlm_corrupt(w, 1, (int)w.size(), c, rng);
            b.tokens = std::move(e.tokens), b.targets = std::move(e.targets);
        }
        b.n = (int)b.tokens.size();
        long long m = 0;
        for (int t : b.targets) m += t >= 0;
        if (m > 0) sum += model_loss(c, p, b) * (double)m;  // model_loss is the mean over the m targets
        predicted += m;
        windows_done++;
        if (progress) progress(windows_done, windows, predicted > 0 ? sum / (double)predicted : 0.0);
    }
    if (count) *count = predicted;
    if (predicted == 0) throw Error("corpus_loss: no position to predict (text too short for masking?)");
    return sum / (double)predicted;
}

static std::string hms(double seconds) {
    char buf[32];
    const long long s = (long long)(seconds + 0.5);
    if (s >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
    else std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
    return buf;
}

// The CSV log ("step,train_loss,val_loss,lr") back into points for the plot.
static void parse_log(const std::string& csv, std::vector<std::pair<long long, double>>& train,
                      std::vector<std::pair<long long, double>>& val) {
    train.clear(), val.clear();
    std::stringstream ss(csv);
    std::string line;
    std::getline(ss, line);
    while (std::getline(ss, line)) {
        std::stringstream ls(line);
        std::string f[4];
        for (auto& x : f) std::getline(ls, x, ',');
        const double step_read = parse_double(f[0], "train.log step");
        if (!(step_read >= 0 && step_read <= 9e15 && step_read == std::floor(step_read)))
            throw Error("train.log: step " + f[0] + " is not a whole number from 0 to 9e15");
        const long long step = (long long)step_read;
        train.push_back({step, parse_double(f[1], "train.log loss")});
        if (!f[2].empty()) val.push_back({step, parse_double(f[2], "train.log val loss")});
    }
}

static std::string strip_ext(const std::string& path) {
    const std::size_t dot = path.rfind('.'), slash = last_separator(path);
    return dot != std::string::npos && (slash == std::string::npos || dot > slash) ? path.substr(0, dot) : path;
}

// ---- One training loop for every objective ----------------------------------------------------
// " x K accumulated" for the progress header when a step sums K batches.
static std::string accumulated(int accum) { return accum > 1 ? " x " + std::to_string(accum) + " accumulated" : ""; }

// ---- The training loop's pieces, in the order the loop calls them -------------------------------
// The learning rate of step step_index (from 0): the cosine schedule, or the linear one (fine-tuning).
static double learning_rate(const TrainOptions& o, long long step_index) {
    if (o.schedule == "linear") return lr_linear(step_index, o.steps, o.warmup, o.lr, o.min_lr);
    return lr_schedule(step_index, o.steps, o.warmup, o.lr, o.min_lr);
}

// One line of the run's CSV log: step, train loss, validation loss (empty when not evaluated), the
// learning rate, and the objective's parts of the loss.
static std::string log_line(long long step, double loss, double val, double lr, const std::vector<double>& parts) {
    std::string line = std::to_string(step) + "," + full_digits(loss) + "," + (val >= 0 ? full_digits(val) : "") + "," + full_digits(lr);
    for (double v : parts) line += "," + full_digits(v);
    return line + "\n";
}

// The progress line: the mean loss (and its parts) over the steps since the last line, the rate,
// the time per step, tokens per second, the time left, and the validation loss when evaluated.
static void print_progress(const TrainOptions& o, const Objective& obj, long long step, long long last, double mean_loss,
                           const std::vector<double>& part_sums, long long since_log, double lr, double ms, double val,
                           const std::string& shown) {
    const double left = ms * (double)(last - step) / 1000.0;
    std::printf("step %5lld/%lld | loss %.4f", step, o.steps, mean_loss);
    for (std::size_t j = 0; j < part_sums.size(); j++)
        std::printf("%s%s %.4f%s", j ? ", " : " (", obj.part_names[j].c_str(), part_sums[j] / (double)since_log,
                    j + 1 == part_sums.size() ? ")" : "");
    std::printf(" | lr %.2e | %6.1f ms/step | %7.0f tok/s | left %s", lr, ms, 1000.0 * (double)(obj.tokens_per_step * o.accum) / ms,
                hms(left).c_str());
    if (val >= 0 && shown.empty()) std::printf(" | val %.4f", val);
    else if (val >= 0) std::printf(" | val %s", shown.c_str());
    std::printf("\n");
    std::fflush(stdout);
}

// The done line. Its train loss is the mean of the last --log-every steps (one batch's loss alone
// varies by several hundredths).
static void print_summary(const TrainOptions& o, const TrainResult& r, long long step0) {
    const std::size_t tail = std::min<std::size_t>(r.train_losses.size(), (std::size_t)std::max(1LL, o.log_every));
    double tail_sum = 0;
    for (std::size_t j = r.train_losses.size() - tail; j < r.train_losses.size(); j++) tail_sum += r.train_losses[j];
    const long long ran = r.steps_done - step0;  // this run's steps: step0 + 1 .. steps_done
    std::printf("done: steps %lld-%lld of %lld (%lld in this run) in %s (%.1f ms/step), train loss %.4f (mean of the last %zu steps)",
                step0 + 1, r.steps_done, o.steps, ran, hms(r.seconds).c_str(), 1000.0 * r.seconds / (double)ran, tail_sum / (double)tail,
                tail);
    if (r.val_loss >= 0) std::printf(", val loss %.4f", r.val_loss);
    if (r.val_loss >= 0 && r.val_step != r.steps_done) std::printf(" (at step %lld)", r.val_step);
    std::printf("\n");
}

// The one loop: for each step the learning rate, one training step of the objective, the checks
// that nothing diverged, the evaluation when due, the log line and the progress line, and the
// checkpoint when due; at the end the CSV, the plot and the done line.
TrainResult run_training(const TrainOptions& o, RunState& s, const Objective& obj) {
    using clock = std::chrono::steady_clock;
    const Config& c = s.c;
    Params<float>& p = s.p;
    Params<float> g = make_params<float>(c);
    const long long last = o.stop_at ? std::min(o.stop_at, o.steps) : o.steps;
    const std::string base = strip_ext(o.out);
    std::vector<std::pair<long long, double>> log_train, log_val;
    parse_log(s.log_csv, log_train, log_val);  // a damaged log fails now, not after the run
    long long saved_step = s.on_disk;           // the step the file at o.out holds, -1 = none of this run's
    auto save = [&](long long step) {
        std::map<std::string, std::string> meta = options_metadata(o);
        for (auto& kv : s.meta) meta[kv.first] = kv.second;
        meta["train.step"] = std::to_string(step);
        meta["train.rng"] = std::to_string(s.rng.state);
        meta["adam.t"] = std::to_string(s.adam.t);
        meta["train.log"] = s.log_csv;
        std::vector<std::pair<std::string, const Tensor<float>*>> extra;
        auto M = named_tensors(c, s.adam.m), S = named_tensors(c, s.adam.v);
        for (std::size_t j = 0; j < M.size(); j++) extra.push_back({"adam.m." + M[j].name, M[j].tensor});
        for (std::size_t j = 0; j < S.size(); j++) extra.push_back({"adam.v." + S[j].name, S[j].tensor});
        save_model(o.out, c, p, meta, extra);
        saved_step = step;
    };
    // A value that is not finite stops the run before anything is written over the last good checkpoint.
    auto diverged = [&](const std::string& what, double v, long long step) {
        const std::string kept = saved_step < 0 ? "no checkpoint was written"
                                                : "'" + o.out + "' still holds step " + std::to_string(saved_step);
        const std::string remedy = o.grad_clip > 0 ? "Lower --lr or --grad-clip?" : "Lower --lr, or clip the gradient (--grad-clip 1)?";
        return Error("train: " + what + " became " + full_digits(v) + " at step " + std::to_string(step) + "; stopped (" + kept + "). " +
                     remedy);
    };
    TrainResult r;
    const auto t_start = clock::now();
    auto t_last = t_start;
    long long since_log = 0;
    double loss_sum = 0;
    std::vector<double> parts, part_sums(obj.part_names.size(), 0.0);
    loop_stop_begin();  // SIGINT/SIGTERM: finish the step, save, return
    struct LoopEnd {  // the loop may also end by an exception
        ~LoopEnd() { loop_stop_end(); }
    } loop_end;
    for (long long step_index = s.step0; step_index < last; step_index++) {
        const long long step = step_index + 1;
        const double lr = learning_rate(o, step_index);
        parts.assign(obj.part_names.size(), 0.0);
        const StepResult st = train_step(c, p, g, s.adam, lr, o.grad_clip, o.accum, [&](Params<float>& grad) {
            std::vector<double> part(parts.size(), 0.0);
            const double l = obj.step(grad, s.rng, part);  // what differs: the batch, the loss, the gradient
            for (std::size_t j = 0; j < parts.size(); j++) parts[j] += part[j] / o.accum;
            return l;
        });
        const double loss = st.loss;
        if (!std::isfinite(loss)) throw diverged("the loss", loss, step);
        if (!std::isfinite(st.norm)) throw diverged("the gradient norm", st.norm, step);
        const std::string bad = first_nonfinite(c, p);
        if (!bad.empty()) throw diverged("parameter '" + bad + "' (after the update)", NAN, step);
        r.train_losses.push_back(loss);
        loss_sum += loss, since_log++;
        for (std::size_t j = 0; j < parts.size(); j++) part_sums[j] += parts[j];
        double val = -1;
        std::string shown;
        if (o.eval_every > 0 && (step % o.eval_every == 0 || step == last)) {  // 0: never
            val = obj.validate(p, shown);
            if (!std::isfinite(val)) throw diverged("the validation loss", val, step);
            r.val_loss = val;
            r.val_step = step;
        }
        s.log_csv += log_line(step, loss, val, lr, parts);
        if (!o.quiet && (step % o.log_every == 0 || val >= 0 || step == last)) {
            const auto now = clock::now();
            const double ms = std::chrono::duration<double, std::milli>(now - t_last).count() / (double)since_log;
            print_progress(o, obj, step, last, loss_sum / (double)since_log, part_sums, since_log, lr, ms, val, shown);
            t_last = now;
            since_log = 0;
            loss_sum = 0;
            std::fill(part_sums.begin(), part_sums.end(), 0.0);
        }
        if ((o.save_every > 0 && step % o.save_every == 0) || step == last || loop_stop_signal()) save(step);
        r.steps_done = step;
        if (loop_stop_signal()) {
            r.signal = loop_stop_signal();
            break;
        }
    }
    loop_stop_end();
    r.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
    if (r.steps_done == 0) throw Error("train: nothing to do (the checkpoint is already at step " + std::to_string(s.step0) + ")");
    write_file_atomic(base + ".csv", s.log_csv);
    parse_log(s.log_csv, log_train, log_val);  // the whole run, resumed parts included
    write_file_atomic(base + ".svg", loss_svg(log_train, log_val, obj.title));
    if (!o.quiet) print_summary(o, r, s.step0);
    return r;
}

// A uniformly random permutation of 0..n-1 (Fisher-Yates).
static std::vector<int> random_permutation(int n, Rng& rng) {
    std::vector<int> z(n);
    for (int i = 0; i < n; i++) z[i] = i;
    for (int i = n - 1; i > 0; i--) std::swap(z[i], z[rng.below(i + 1)]);
    return z;
}

// XLNet's loss over a text in consecutive windows of n_ctx ids: for each window of n ids, orders(n)
// gives the (z, k) pairs to score (k = how many of the last positions in z are predicted); the
// mean -log P per predicted token. Shared by the permutation and the left-to-right evaluation.
template <typename T, typename Orders>
static double xlnet_windows_loss(const Config& c, const Params<T>& p, const std::vector<int>& ids, Orders orders,
                                 long long* count, const char* who) {
    if (!c.xlnet) throw Error(std::string(who) + ": the model has no query vector w (not trained with --objective xlnet)");
    double sum = 0;
    long long predicted = 0;
    for (std::size_t start = 0; start + 1 < ids.size(); start += (std::size_t)c.n_ctx) {
        const std::vector<int> x(ids.begin() + start, ids.begin() + std::min(ids.size(), start + (std::size_t)c.n_ctx));
        for (const auto& zk : orders((int)x.size())) {
            sum += xlnet_loss(c, p, p.w, x, 1, zk.first, zk.second) * zk.second;
            predicted += zk.second;
        }
    }
    if (predicted == 0) throw Error(std::string(who) + ": the text is too short (2 tokens at least)");
    if (count) *count = predicted;
    return sum / (double)predicted;
}

template <typename T>
double xlnet_corpus_loss(const Config& c, const Params<T>& p, const std::vector<int>& ids, int predict, int perms,
                         uint64_t seed, long long* count) {
    if (perms < 1) throw Error("xlnet_corpus_loss: perms must be >= 1");
    Rng rng(seed);
    auto random_orders = [&](int n) {  // perms random permutations, the last min(predict, n) predicted
        std::vector<std::pair<std::vector<int>, int>> zk;
        for (int r = 0; r < perms; r++) zk.emplace_back(random_permutation(n, rng), std::min(predict, n));
        return zk;
    };
    return xlnet_windows_loss(c, p, ids, random_orders, count, "xlnet_corpus_loss");
}

template <typename T>
double xlnet_left_to_right_loss(const Config& c, const Params<T>& p, const std::vector<int>& ids, long long* count) {
    auto identity = [](int n) {  // z = 1..n: position t sees positions < t; all but the first predicted
        std::vector<int> z(n);
        for (int i = 0; i < n; i++) z[i] = i;
        return std::vector<std::pair<std::vector<int>, int>>{{z, n - 1}};
    };
    return xlnet_windows_loss(c, p, ids, identity, count, "xlnet_left_to_right_loss");
}

// ---- Starting from a checkpoint's weights, GPT-2's tokenizer -----------------------------------
// train --init-from FILE: the model (shape and weights) is FILE's, the optimiser starts fresh at
// step 0. o's model flags must agree with the file (0 / "" = not given); afterwards they hold the
// file's values. tok: the tokenizer of the run, from --encoder/--vocab or the one FILE records.
static void start_from_checkpoint(TrainOptions& o, RunState& s, Tokenizer& tok) {
    const std::string& path = o.init_from;
    auto fail = [&](const std::string& what) { return Error("train --init-from '" + path + "': " + what); };
    if (!o.resume.empty()) throw Error("train: --init-from and --resume exclude each other (--resume continues a run, optimiser included)");
    if (o.objective != "lm") throw Error("train: --init-from applies to --objective lm");
    LoadedModel lm = load_model(path, {"adam."});
    const Config& c = lm.config;
    const auto& md = lm.file.metadata;
    if (c.W_y_rows > 0 || md.count("finetune.task"))
        throw fail("it is a fine-tuned checkpoint with a head W_y; start from the pre-trained model it came from");
    if (c.xlnet) throw fail("it was trained with --objective xlnet; --init-from continues next-token / masked LM models");
    auto contradicts = [&](const std::string& flag, const std::string& given, const std::string& file) {
        return fail(flag + " " + given + " contradicts the file's " + file +
                    " (the model's shape comes from the file: leave the flag out)");
    };
    if (!o.model.empty() && variant_from_name(o.model) != c.variant) throw contradicts("--model", o.model, std::string("variant ") + variant_name(c.variant));
    if (o.layers && o.layers != c.L) throw contradicts("--layers", std::to_string(o.layers), "L = " + std::to_string(c.L));
    if (o.heads && o.heads != c.A) throw contradicts("--heads", std::to_string(o.heads), "A = " + std::to_string(c.A));
    if (o.embd && o.embd != c.H) throw contradicts("--embd", std::to_string(o.embd), "H = " + std::to_string(c.H));
    if (o.ffn && o.ffn != c.F) throw contradicts("--ffn", std::to_string(o.ffn), "F = " + std::to_string(c.F));
    if (!o.activation.empty() && activation_from_name(o.activation) != c.activation)
        throw contradicts("--activation", o.activation, std::string("activation ") + activation_name(c.activation));
    if (o.attn_bias && !c.attn_bias) throw fail("--attn-bias contradicts the file, whose model has no attention biases");
    if (o.gpt2_init) throw fail("--gpt2-init is an initialisation; the weights come from the file");
    if (o.mlm_head && !c.mlm_head) throw fail("--mlm-head contradicts the file, whose model has no masked-LM head");
    if (o.emb_ln && !c.emb_ln) throw fail("--emb-ln contradicts the file, whose model has no embedding LayerNorm");
    if (o.block > c.n_ctx)
        throw fail("--block " + std::to_string(o.block) + " is longer than the model's n_ctx = " + std::to_string(c.n_ctx) +
                   " (W_p has n_ctx rows)");
    const Tokenizer recorded = tokenizer_of(md, path);
    if (!o.bpe_vocab.empty()) {
        tok = load_tokenizer("", o.encoder, o.bpe_vocab);
        if (recorded.kind == "char")
            throw fail("it was trained on characters (its metadata 'vocab'); --encoder/--vocab (a subword tokenizer) contradict it");
        if (!recorded.kind.empty() && (recorded.kind != tok.kind || recorded.encoder_json != tok.encoder_json || recorded.vocab != tok.vocab))
            throw fail("--encoder/--vocab differ from the " + recorded.kind + " tokenizer the file records (leave them out to use that one)");
        if (tok.size() != c.V)
            throw fail("--encoder/--vocab: the tokenizer has " + std::to_string(tok.size()) + " tokens but the model's V = " +
                       std::to_string(c.V));
    } else if (recorded.kind.empty()) {
        throw fail("the file records no tokenizer (released weights): give its tokenizer's files, --encoder encoder.json --vocab "
                   "vocab.bpe (GPT-2), --encoder vocab.json --vocab merges.txt (GPT-1, RoBERTa) or --vocab vocab.txt (BERT)");
    } else {
        tok = recorded;
        const int expected = c.V - (is_causal(c.variant) || tok.kind != "char" ? 0 : 3);
        if (tok.size() != expected)
            throw fail("its tokenizer has " + std::to_string(tok.size()) + " tokens but V = " + std::to_string(c.V));
    }
    if (tok.kind != "char") {
        if (is_bidirectional_tokenizer(tok.kind) == is_causal(c.variant))
            throw fail("the tokenizer is " + tok.kind + " but the model is a " + variant_name(c.variant));
        Config want = c;
        if (!is_causal(c.variant)) subword_special_ids(tok, want);
        if (!is_causal(c.variant) && (want.cls_id != c.cls_id || want.sep_id != c.sep_id || want.mask_id != c.mask_id))
            throw fail("the tokenizer's [CLS], [SEP], [MASK] are ids " + std::to_string(want.cls_id) + ", " + std::to_string(want.sep_id) +
                       ", " + std::to_string(want.mask_id) + " but the model's are " + std::to_string(c.cls_id) + ", " +
                       std::to_string(c.sep_id) + ", " + std::to_string(c.mask_id));
    }
    if (tok.kind != "char" && o.data.empty()) throw fail("a model with a subword tokenizer needs --data FILE (a text)");
    if (tok.kind != "char" && o.line_windows) throw fail("--line-windows applies to character-level models");
    s.c = c;
    s.p = std::move(lm.params);
    adamw_init(s.c, s.adam);
    s.step0 = 0;
    o.model = variant_name(c.variant), o.layers = c.L, o.heads = c.A, o.embd = c.H, o.ffn = c.F;
    o.activation = activation_name(c.activation), o.attn_bias = c.attn_bias;
}

static double mb(double bytes) { return bytes / (1024.0 * 1024.0); }

// Warnings that say what a run will do. They come after every check has passed, so that a run that
// fails prints its error first.
static void warn_warmup(long long warmup, long long steps) {  // --warmup (given, or its default) longer than --steps
    if (steps > 0 && warmup > steps)
        std::fprintf(stderr, "warning: --warmup %lld is longer than --steps %lld: the learning rate rises through the whole run and ends "
                             "at about %.0f%% of --lr, never reaching it (and never decaying)\n", warmup, steps, 100.0 * (double)steps / (double)warmup);
}
static void warn_same_file(const std::string& val, const char* other_flag, const std::string& other, const char* consequence) {
    if (val.empty() || other.empty() || file_identity(val) != file_identity(other)) return;
    std::fprintf(stderr, "warning: --val '%s' is the same file as %s: %s, so it cannot show overfitting\n", val.c_str(), other_flag,
                 consequence);
}

// A training run of model c with o.batch sequences of n tokens must fit in memory_limit().
static void require_train_memory(const Config& c, const TrainOptions& o, int n) {
    const TrainMemory m = train_memory(c, o.batch, n);
    require_memory("train", m.params + m.grads + m.adam + m.activations,
                   "the model, its gradient and AdamW's m and v, and the activations of a step at B=" + std::to_string(o.batch) +
                       ", n=" + std::to_string(n),
                   o.resume.empty() ? "--batch, --block or the model (--layers, --embd, --ffn)"
                                    : "--batch or --block (a new run: a resumed one keeps its checkpoint's)",
                   memory_limit(), o.memory_check);
}

// train --resume: the checkpoint's model, AdamW's state, options, rng and tokenizer, with the flags a
// resumed run may give anew (--data, --val, --steps, --stop-at, --out, --quiet, --no-memory-check).
// False: the checkpoint is already at --steps, nothing to train.
static bool resume_from_checkpoint(TrainOptions& o, RunState& s, Tokenizer& tok, CharVocab& saved_vocab,
                                  std::map<std::string, std::string>& resume_md) {
    LoadedModel lm = load_model(o.resume, {"adam."});
    if (lm.file.metadata.count("weights_only"))
        throw Error("'" + o.resume + "' holds the weights only (written by strip, without AdamW's state): it cannot be resumed; "
                    "start a new run from its weights with --init-from " + o.resume);
    const std::string data_given = o.data, val_given = o.val_data;  // on resume: moved copies of the same texts
    s.c = lm.config;
    s.p = std::move(lm.params);
    const long long steps = o.steps, stop_at = o.stop_at;  // steps 0: keep the checkpoint's
    const std::string out = o.out.empty() ? o.resume : o.out;
    const bool quiet = o.quiet, memory_check = o.memory_check;
    try {
        options_from_metadata(lm.file.metadata, o);
    } catch (const Error& e) {
        throw Error("'" + o.resume + "': " + e.what());
    }
    if (steps > 0) o.steps = steps;
    o.stop_at = stop_at, o.out = out, o.quiet = quiet, o.memory_check = memory_check;
    o.data = resume_data_path(lm.file.metadata, data_given, o.resume);
    o.val_data = resume_data_path(lm.file.metadata, val_given, o.resume, VAL_RECORD);
    resume_md = lm.file.metadata;
    adamw_init(s.c, s.adam);
    auto M = named_tensors(s.c, s.adam.m), S = named_tensors(s.c, s.adam.v);
    for (std::size_t j = 0; j < M.size(); j++) {
        const Tensor<float>* m = lm.file.find("adam.m." + M[j].name);
        const Tensor<float>* v = lm.file.find("adam.v." + M[j].name);
        if (!m || !v || m->shape != M[j].tensor->shape || v->shape != S[j].tensor->shape)
            throw Error("'" + o.resume + "': optimiser state for '" + M[j].name + "' is missing or misshaped");
        *M[j].tensor = *m, *S[j].tensor = *v;
    }
    const auto& md = lm.file.metadata;
    if (!md.count("train.step") || !md.count("train.rng") || (!md.count("vocab") && !md.count("tokenizer")) || !md.count("adam.t"))
        throw Error("'" + o.resume + "' is not a training checkpoint (no train.step / train.rng / vocab / adam.t)");
    if (md.count("finetune.task")) throw Error("'" + o.resume + "' is a fine-tuned checkpoint: continue it with finetune --checkpoint");
    s.step0 = parse_i64(md.at("train.step"), "train.step");
    s.adam.t = parse_i64(md.at("adam.t"), "adam.t");
    if (s.step0 < 0 || s.adam.t != s.step0)
        throw Error("'" + o.resume + "': inconsistent train.step " + std::to_string(s.step0) + " and adam.t " + std::to_string(s.adam.t));
    if (s.step0 >= o.steps) {  // before any work: say so now, not after loading the data; nothing is written
        std::fprintf(stderr, "warning: '%s' is already at step %lld and --steps is %lld: nothing to train, no file written "
                             "(give --steps above %lld to train further)\n", o.resume.c_str(), (long long)s.step0, (long long)o.steps,
                     (long long)s.step0);
        return false;
    }
    if (o.stop_at > 0 && o.stop_at <= s.step0)  // before the plan is printed
        throw Error("train: --stop-at " + std::to_string(o.stop_at) + " is not after the checkpoint's step " + std::to_string(s.step0) +
                    ": nothing to do (give --stop-at above " + std::to_string(s.step0) + ")");
    s.rng.state = parse_u64(md.at("train.rng"), "train.rng");
    tok = tokenizer_of(md, o.resume);
    if (tok.kind == "char") saved_vocab = tok.chars;
    if (md.count("train.log")) s.log_csv = md.at("train.log");
    if (resolve_output_path(o.out) == resolve_output_path(o.resume)) s.on_disk = s.step0;
    return true;
}

// A new model of o's shape for the corpus k (n tokens a window): its Config, freshly initialised
// weights and AdamW's state.
static void start_fresh_model(const TrainOptions& o, RunState& s, const Tokenizer& tok, const Corpus& k, Variant variant, int n,
                              bool subword, bool xlnet) {
    Config& c = s.c;
    c.variant = variant;
    c.H = o.embd, c.A = o.heads, c.D = o.embd / o.heads, c.L = o.layers, c.F = o.ffn ? o.ffn : 4 * o.embd;
    c.n_ctx = n;
    c.V = subword ? tok.size() : k.vocab.size();
    if (subword && !is_causal(variant)) subword_special_ids(tok, c);  // in the vocabulary already
    else if (!is_causal(variant)) c.cls_id = c.V, c.sep_id = c.V + 1, c.mask_id = c.V + 2, c.V += 3;
    if (variant == Variant::bert) c.eps = 1e-12;
    if (variant == Variant::gpt3) c.st_window = std::max(1, (int)std::sqrt((double)n)), c.st_stride = c.st_window;
    if (!o.activation.empty()) c.activation = activation_from_name(o.activation);
    c.attn_bias = o.attn_bias;
    if ((o.emb_ln || o.mlm_head) && is_causal(variant))
        throw Error(std::string("train: --emb-ln and --mlm-head (the released BERT's additions) apply to bert and roberta, not ") +
                    variant_name(variant));
    c.emb_ln = o.emb_ln || o.mlm_head, c.mlm_head = o.mlm_head;
    c.xlnet = xlnet;
    require_train_memory(c, o, n);  // before the model is allocated
    s.p = make_params<float>(c);
    init_params(c, s.p, o.seed);
    if (o.gpt2_init) scale_residual_init(c, s.p);
    adamw_init(c, s.adam);
}

// What a step of train minimises and its validation estimate: XLNet's permutation LM (formulas §27),
// or the next token (GPT variants) / the masked tokens (BERT, RoBERTa).
static Objective train_objective(const TrainOptions& o, RunState& s, const Corpus& k, int n, int predict, bool xlnet) {
    const Config& c = s.c;
    Objective obj;
    obj.tokens_per_step = (long long)o.batch * n;
    obj.title = std::string(variant_name(c.variant)) + (xlnet ? " XLNet permutation loss" : " training loss");
    if (xlnet) {  // XLNet's permutation objective (formulas §27): one z per batch, the last `predict` ranks predicted
        obj.step = [&o, &s, &k, n, predict](Params<float>& g, Rng& rng, std::vector<double>&) {
            const Batch b = make_batch(s.c, k, false, o.batch, n, rng);
            return xlnet_loss(s.c, s.p, s.p.w, b.tokens, o.batch, random_permutation(n, rng), predict, &g, &g.w);
        };
        obj.validate = [&o, &s, &k, n, predict](const Params<float>& p, std::string&) {
            Rng rng(o.seed ^ 0x5EED5EEDull);
            double sum = 0;
            for (long long j = 0; j < o.eval_steps; j++) {
                const Batch b = make_batch(s.c, k, true, o.batch, n, rng);
                sum += xlnet_loss(s.c, p, p.w, b.tokens, o.batch, random_permutation(n, rng), predict);
            }
            return sum / (double)o.eval_steps;
        };
    } else {  // next token (GPT variants) or masked tokens (BERT, RoBERTa)
        obj.step = [&o, &s, &k, n](Params<float>& g, Rng& rng, std::vector<double>&) {
            const Batch b = make_batch(s.c, k, false, o.batch, n, rng);
            ForwardOptions fo;
            fo.dropout = o.dropout, fo.rng = &rng;
            return model_loss(s.c, s.p, b, &g, fo);
        };
        obj.validate = [&o, &s, &k, n](const Params<float>& p, std::string&) { return evaluate(s.c, p, k, o.batch, n, o.eval_steps, o.seed); };
    }
    return obj;
}

// The run's plan on stdout: the model, the data and its schedule, the objective, the memory it takes,
// the tokenizer and where the weights come from.
static void print_train_plan(const TrainOptions& o, const RunState& s, const Tokenizer& tok, const Corpus& k, int n, int predict,
                             bool xlnet, bool subword, long long last, const ParamCount& count, const TrainMemory& mem) {
    const Config& c = s.c;
    std::printf("model %s: L=%d H=%d A=%d D=%d F=%d n=%d V=%d, %lld parameters, %s\n", variant_name(c.variant), c.L, c.H,
                c.A, c.D, c.F, c.n_ctx, c.V, count.actual, activation_name(c.activation));
    std::printf("data: %s, batch %d x %d tokens%s, steps %lld..%lld of %lld, lr %g -> %g, warmup %lld, dropout %g\n",
                k.task ? "built-in task: 3-digit addition (answer digits reversed)" : o.data.c_str(), o.batch, n,
                accumulated(o.accum).c_str(), s.step0 + 1, last, o.steps, o.lr, o.min_lr, o.warmup, o.dropout);
    if (xlnet)
        std::printf("objective: XLNet's permutation language model, two-stream attention, one permutation z per batch, "
                    "the last %d of %d positions in z predicted\n", predict, n);
    const TrainMemory& m = mem;
    std::printf("memory: parameters %.1f MB, gradients %.1f MB, AdamW m and v %.1f MB, activations of a step ~%.1f MB "
                "(B=%d, n=%d): ~%.2f GB\n", mb(m.params), mb(m.grads), mb(m.adam), mb(m.activations), o.batch, n,
                (m.params + m.grads + m.adam + m.activations) / (1024.0 * 1024.0 * 1024.0));
    if (subword)
        std::printf("tokenizer: %s, %d tokens; the text is %zu + %zu tokens (train + validation)%s\n", tokenizer_title(tok.kind),
                    tok.size(), k.train.size(), k.val.size(),
                    k.cls_sep ? ("; windows of " + std::to_string(n - 2) + " tokens as [CLS] window [SEP]").c_str() : "");
    if (!o.init_from.empty()) std::printf("weights: from %s (optimiser state fresh)\n", o.init_from.c_str());
    std::fflush(stdout);
}

// After the loop: the addition task's held-out accuracy, the whole validation split's loss once, and
// what the run wrote.
static void finish_training(TrainResult& r, const TrainOptions& o, RunState& s, const Tokenizer& tok, const Corpus& k, int n,
                            int predict, bool xlnet, const std::string& base) {
    const Config& c = s.c;
    const bool subword = !tok.kind.empty() && tok.kind != "char";
    if (k.task && is_causal(c.variant) && !r.signal) r.accuracy = addition_accuracy(c, s.p, k.vocab, 500, 4242);
    // The whole validation split once at the end, unless --eval-every 0 (never validate).
    const bool whole_split = !k.task && !r.signal && o.eval_every > 0;
    if (whole_split)
        r.val_loss_split = xlnet ? xlnet_corpus_loss(c, s.p, k.val, predict, 4, 1234) : corpus_loss(c, s.p, k.val, 1234, nullptr, n, k.cls_sep);
    if (whole_split && !std::isfinite(r.val_loss_split)) throw Error("train: the validation loss over the whole split is not finite");
    if (!o.quiet) {
        if (r.accuracy >= 0) std::printf("held-out addition accuracy: %.1f%% of 500 unseen problems\n", 100.0 * r.accuracy);
        if (r.val_loss_split >= 0)
            std::printf("val loss over the whole validation split: %.4f (%zu %s%s%s; the %lld-batch estimate above: %.4f)\n",
                        r.val_loss_split, k.val.size(), subword ? "tokens" : "characters", xlnet ? ", 4 permutations per window" : "",
                        o.line_windows ? ", read in consecutive windows of the whole text, not starting at newlines as "
                                         "--line-windows' training and estimate windows do" : "",
                        o.eval_steps, r.val_loss);
        std::printf("wrote %s, %s.csv, %s.svg\n", o.out.c_str(), base.c_str(), base.c_str());
        const double peak = peak_memory_mib();
        if (peak >= 0) std::printf("peak memory (max resident set): %.1f MB\n", peak);
    }
}

TrainResult train(const TrainOptions& opt_in) {
    TrainOptions o = opt_in;
    RunState s;
    s.rng = Rng(o.seed);
    CharVocab saved_vocab;
    std::map<std::string, std::string> resume_md;  // the resumed checkpoint's metadata
    Tokenizer tok;  // kind "" = the characters of the data (as before), "char" = a given CharVocab, or a subword kind
    if (!o.encoder.empty() || !o.bpe_vocab.empty()) {
        if (o.bpe_vocab.empty())
            throw Error("train: --encoder and --vocab go together (GPT-2's encoder.json and vocab.bpe, RoBERTa's vocab.json and "
                        "merges.txt; BERT's vocab.txt is --vocab alone)");
        if (!o.resume.empty()) throw Error("train: a resumed run keeps the tokenizer its checkpoint records; leave out --encoder and --vocab");
    }
    if (!o.init_from.empty()) start_from_checkpoint(o, s, tok);
    else if (!o.bpe_vocab.empty()) tok = load_tokenizer("", o.encoder, o.bpe_vocab);
    if (!o.resume.empty() && !resume_from_checkpoint(o, s, tok, saved_vocab, resume_md)) return TrainResult{};
    const bool xlnet = o.objective == "xlnet";
    if (o.objective != "lm" && !xlnet) throw Error("train: --objective must be lm or xlnet, got '" + o.objective + "'");
    if (xlnet && o.data.empty()) throw Error("train: --objective xlnet needs --data (a text; the built-in task is for next-token models)");
    check_options(o);
    // Every output is checked before any work: a typo in --out must not cost the run.
    const std::string base = strip_ext(o.out);
    check_outputs({{o.out, "--out", OutputKind::checkpoint},
                   {base + ".csv", "the loss log", OutputKind::csv_log},
                   {base + ".svg", "the loss plot", OutputKind::svg_plot}},
                  {{o.data, "--data"}, {o.val_data, "--val"}, {o.resume, "--resume", true}, {o.init_from, "--init-from"}});
    Config& c = s.c;
    s.adam.beta1 = o.beta1, s.adam.beta2 = o.beta2, s.adam.weight_decay = o.weight_decay;
    const int n_default = o.data.empty() ? AdditionTask::prompt_len() + AdditionTask::answer_len() : 64;
    const Variant variant = o.resume.empty() ? variant_from_name(o.model) : c.variant;
    if (xlnet && has_segments(variant)) throw Error("train: --objective xlnet applies to gpt, gpt2, gpt3 and roberta, not bert (segments)");
    int n = o.resume.empty() ? (o.block ? o.block : n_default) : c.n_ctx;
    if (!o.init_from.empty()) n = o.block ? o.block : c.n_ctx;  // windows may be shorter than n_ctx
    const bool subword = !tok.kind.empty() && tok.kind != "char";  // GPT-2's BPE; BERT's WordPiece, RoBERTa's BPE
    if (subword && is_bidirectional_tokenizer(tok.kind) == is_causal(variant))
        throw Error("train: the tokenizer is " + tok.kind + ", which goes with " +
                    (is_causal(variant) ? "bert and roberta (masked-LM models)" : "gpt, gpt2 and gpt3 (next-token models)") +
                    ", not " + variant_name(variant));
    if (subword && o.data.empty()) throw Error("train: --encoder/--vocab need --data FILE (a text to encode)");
    if (subword && o.line_windows) throw Error("train: --line-windows applies to character-level models");
    if (subword && xlnet) throw Error("train: --objective xlnet trains on characters or GPT-2's BPE; " + tok.kind + " is for masked-LM models");
    if (o.data.empty()) n = is_causal(variant) ? 12 : 13;  // one addition problem
    const int predict = o.predict > 0 ? o.predict : std::max(1, n / 6);  // K = n/6: the XLNet paper's partial prediction
    if (xlnet && predict > n) throw Error("train: --predict " + std::to_string(predict) + " is more than the block of " + std::to_string(n));
    o.predict = xlnet ? predict : 0;
    if (tok.kind == "char") saved_vocab = tok.chars;
    Corpus k = load_corpus(o.data, tok.kind == "char" ? &saved_vocab : nullptr, n, o.line_windows, subword ? &tok : nullptr, o.quiet,
                           o.val_data);
    // BERT's and RoBERTa's subword tokenizers: windows of n - 2 tokens read as [CLS] window [SEP], as
    // the released models were pre-trained and as eval reads them.
    k.cls_sep = subword && !is_causal(variant);
    if (!o.resume.empty() && !k.task) check_resume_data(resume_md, k.bytes, k.hash, o.data, o.resume);
    if (!o.resume.empty() && !o.val_data.empty()) check_resume_data(resume_md, k.val_bytes, k.val_hash, o.val_data, o.resume, VAL_RECORD);
    const bool fresh = o.resume.empty() && o.init_from.empty();  // a new model, not one from a file
    if (fresh) start_fresh_model(o, s, tok, k, variant, n, subword, xlnet);
    // What the checkpoint records beyond the loop's state: the vocabulary and the data's identity.
    if (subword) s.meta = tok.metadata();
    else s.meta["vocab"] = k.vocab.to_metadata();
    if (!o.init_from.empty()) s.meta["train.init_from"] = o.init_from;
    if (!k.task) record_data(s.meta, o.data, k.bytes, k.hash, DATA_RECORD);
    if (!o.val_data.empty()) record_data(s.meta, o.val_data, k.val_bytes, k.val_hash, VAL_RECORD);
    const Objective obj = train_objective(o, s, k, n, predict, xlnet);
    const ParamCount count = count_params(c);
    const long long last = o.stop_at ? std::min(o.stop_at, o.steps) : o.steps;
    const TrainMemory mem = train_memory(c, o.batch, n);
    if (!fresh) require_train_memory(c, o, n);
    if (!o.quiet) print_train_plan(o, s, tok, k, n, predict, xlnet, subword, last, count, mem);
    double val_before = -1;
    if (!o.init_from.empty()) {  // where fine-tuning starts, on the same batches as every later evaluation
        std::string shown;
        val_before = obj.validate(s.p, shown);
        if (!o.quiet) std::printf("val loss before training (the --init-from weights): %.4f\n", val_before), std::fflush(stdout);
    }
    if (o.resume.empty()) warn_warmup(o.warmup, o.steps);  // a resumed run keeps its checkpoint's schedule
    for (const std::string& w : k.warnings) std::fprintf(stderr, "%s\n", w.c_str());
    if (!o.data.empty())
        warn_same_file(o.val_data, "--data", o.data, "the model trains on all of it and the validation loss is measured on text it trained on");
    TrainResult r = run_training(o, s, obj);
    r.val_loss_before = val_before;
    finish_training(r, o, s, tok, k, n, predict, xlnet, base);
    return r;
}

// ---- Fine-tuning (formulas §28): labelled files, the head on a pre-trained model ----------------

TrainOptions finetune_loop_defaults() {
    TrainOptions t;
    t.steps = 0;  // 3 epochs
    t.batch = 32;
    t.accum = 1;
    t.lr = 6.25e-5;  // the GPT-1 paper's fine-tuning rate
    t.min_lr = 0;
    t.schedule = "linear";
    t.warmup = -1;  // 0.2% of the steps
    t.dropout = 0.1;
    t.weight_decay = 0.01;
    t.grad_clip = 1.0;
    t.eval_every = -1;  // every epoch
    t.log_every = 50;
    t.seed = 1337;
    return t;
}

const char* finetune_kind_name(FinetuneKind k) {
    switch (k) {
        case FinetuneKind::classify: return "classify";
        case FinetuneKind::entailment: return "entailment";
        case FinetuneKind::similarity: return "similarity";
        case FinetuneKind::choice: return "choice";
    }
    return "?";
}
FinetuneKind finetune_kind_from_name(const std::string& s) {
    return enum_from_name(s, {FinetuneKind::classify, FinetuneKind::entailment, FinetuneKind::similarity, FinetuneKind::choice},
                          finetune_kind_name, "task");
}
static FinetuneTask head_task(FinetuneKind k) {
    return k == FinetuneKind::similarity ? FinetuneTask::similarity
           : k == FinetuneKind::choice   ? FinetuneTask::multiple_choice
                                         : FinetuneTask::classify;
}

// The lines of a file with the byte offset where each starts ("\r\n" endings allowed).
// The lines of a labelled file: LF or CRLF ends, the last line with or without one; blank lines
// (nothing but spaces and a CR) are skipped, as TSV readers do. Each keeps its 1-based number in
// the file and the offset of its first byte.
struct FileLine {
    std::string text;
    std::size_t at = 0;
    int number = 0;
};
static std::vector<FileLine> file_lines(const std::string& text) {
    std::vector<FileLine> out;
    int number = 0;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t end = text.find('\n', i);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(i, end - i);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        number++;
        if (line.find_first_not_of(' ') != std::string::npos) out.push_back({line, i, number});
        i = end + 1;
    }
    return out;
}
static std::vector<std::string> split_tabs(const std::string& line) {
    std::vector<std::string> f;
    std::size_t i = 0;
    for (;;) {
        const std::size_t t = line.find('\t', i);
        f.push_back(line.substr(i, t == std::string::npos ? std::string::npos : t - i));
        if (t == std::string::npos) return f;
        i = t + 1;
    }
}
static bool is_index(const std::string& s) {
    return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

bool has_label_column(const std::string& text, FinetuneKind kind) {
    const auto lines = file_lines(text);
    if (lines.empty()) return false;
    if (kind == FinetuneKind::choice) {  // ANSWER CONTEXT C_1..C_K: every first field an index into the choices
        for (auto& l : lines) {
            const std::vector<std::string> f = split_tabs(l.text);
            if (f.size() < 4 || !is_index(f[0]) || std::stoi(f[0]) > (int)f.size() - 3) return false;
        }
        return true;
    }
    const std::size_t with_label = kind == FinetuneKind::classify ? 2 : 3;
    return split_tabs(lines[0].text).size() == with_label;
}

std::vector<LabelledExample> parse_labelled(const std::string& text, const std::string& file, FinetuneKind kind,
                                            std::vector<std::string>& classes, bool learn_classes, bool labelled) {
    require_text(text, file);
    const auto lines = file_lines(text);
    if (lines.empty()) throw Error("'" + file + "' has no examples (it is empty or blank)");
    static const char* layout[] = {"LABEL<TAB>TEXT", "LABEL<TAB>PREMISE<TAB>HYPOTHESIS", "LABEL<TAB>TEXT_A<TAB>TEXT_B",
                                   "ANSWER<TAB>CONTEXT<TAB>CHOICE_1<TAB>...<TAB>CHOICE_K"};
    std::vector<LabelledExample> out;
    for (std::size_t ln = 0; ln < lines.size(); ln++) {
        const std::string where = "'" + file + "' line " + std::to_string(lines[ln].number) + ": ";
        std::vector<std::string> f = split_tabs(lines[ln].text);
        const int want = kind == FinetuneKind::classify ? 2 : kind == FinetuneKind::choice ? -1 : 3;
        const int have = (int)f.size() + (labelled ? 0 : 1);  // fields counted as if labelled
        if (want > 0 ? have != want : have < 4)
            throw Error(where + "expected " + (want > 0 ? std::to_string(want - (labelled ? 0 : 1)) : std::string("at least ") + std::to_string(labelled ? 4 : 3)) +
                        " tab-separated fields (" + layout[(int)kind] + (labelled ? "" : " without the first") + "), got " +
                        std::to_string(f.size()));
        LabelledExample e;
        e.line = lines[ln].number;
        std::size_t at = lines[ln].at;
        for (std::size_t k = 0; k < f.size(); k++) {
            if (f[k].empty()) throw Error(where + "field " + std::to_string(k + 1) + " is empty");
            if (k > 0 || !labelled) e.fields.push_back(f[k]), e.at.push_back(at);
            at += f[k].size() + 1;
        }
        if (labelled && kind == FinetuneKind::choice) {
            const int K = (int)f.size() - 2;
            if (!is_index(f[0]) || std::stoi(f[0]) >= K)
                throw Error(where + "the answer '" + f[0] + "' is not an index 0.." + std::to_string(K - 1) + " of the " + std::to_string(K) + " choices");
            e.label = std::stoi(f[0]);
        } else if (labelled) {
            auto it = std::find(classes.begin(), classes.end(), f[0]);
            if (it == classes.end()) {
                if (!learn_classes) throw Error(where + "the label '" + f[0] + "' was not in the training file");
                classes.push_back(f[0]);
                it = classes.end() - 1;
            }
            e.label = (int)(it - classes.begin());
        }
        out.push_back(std::move(e));
    }
    if (learn_classes && kind != FinetuneKind::choice && classes.size() < 2)
        throw Error("'" + file + "' has " + std::to_string(classes.size()) + " label(s); a classifier needs at least 2");
    return out;
}

static EncodedExample input_transformation(const Config& c, const FinetuneSpec& s, std::vector<std::vector<int>> f,
                                           const LabelledExample& e, const std::string& file, Truncation t);
EncodedExample encode_example(const Config& c, const FinetuneSpec& s, const CharVocab& v, const LabelledExample& e,
                              const std::string& text, const std::string& file, Truncation t) {
    std::vector<std::vector<int>> f;
    for (std::size_t k = 0; k < e.fields.size(); k++) {
        std::vector<int> ids;
        for (std::size_t i = 0; i < e.fields[k].size(); i++) {
            const int id = v.id[(unsigned char)e.fields[k][i]];
            if (id < 0) throw Error(describe_char_at(text, e.at[k] + i, "'" + file + "'") + " is not in the pre-trained model's vocabulary");
            ids.push_back(id);
        }
        f.push_back(std::move(ids));
    }
    return input_transformation(c, s, std::move(f), e, file, t);
}
EncodedExample encode_example(const Config& c, const FinetuneSpec& s, const Tokenizer& t, const LabelledExample& e,
                              const std::string& file, Truncation tr) {
    std::vector<std::vector<int>> f;
    for (const std::string& field : e.fields) {
        try {
            f.push_back(t.encode(field));
        } catch (const Error& err) {
            throw Error("'" + file + "' line " + std::to_string(e.line) + ": " + err.what());
        }
        if (f.back().empty())
            throw Error("'" + file + "' line " + std::to_string(e.line) + ": a field has no tokens after " + t.kind + " tokenization");
    }
    return input_transformation(c, s, std::move(f), e, file, tr);
}

Truncation truncation_from_name(const std::string& name) {
    if (name == "right") return Truncation::right;
    if (name == "left") return Truncation::left;
    throw Error("--truncate takes right or left (the end or the start of the longer text is dropped), got '" + name + "'");
}

std::string check_example_lengths(const std::vector<EncodedExample>& ex, const Config& c, const std::string& file, Truncation t) {
    std::vector<const EncodedExample*> long_ones;
    for (const EncodedExample& e : ex)
        if (e.length > c.n_ctx) long_ones.push_back(&e);
    if (long_ones.empty()) return "";
    const std::string count = std::to_string(long_ones.size()) + " of " + std::to_string(ex.size()) + " examples";
    if (t != Truncation::none)
        return "'" + file + "': " + count + " longer than n_ctx = " + std::to_string(c.n_ctx) + " tokens truncated to fit (--truncate " +
               (t == Truncation::right ? "right: the end" : "left: the start") + " of the longer text dropped)";
    std::string lines;
    for (std::size_t k = 0; k < long_ones.size() && k < 10; k++)
        lines += (k ? ", " : "") + std::to_string(long_ones[k]->line) + " (" + std::to_string(long_ones[k]->length) + " tokens)";
    if (long_ones.size() > 10) lines += ", ...";
    throw Error("'" + file + "': " + count + " are longer than n_ctx = " + std::to_string(c.n_ctx) +
                " tokens after the input transformation, at lines " + lines +
                "; give --truncate right or --truncate left to cut them to fit, or leave them out");
}
// The task's input transformation of the fields' ids (see transformer.hpp, "GPT-1 fine-tuning").
static EncodedExample input_transformation(const Config& c, const FinetuneSpec& s, std::vector<std::vector<int>> f,
                                           const LabelledExample& e, const std::string& file, Truncation t) {
    EncodedExample x;
    x.label = e.label, x.line = e.line;
    const bool gpt = is_causal(c.variant);
    // Every sequence is its texts plus 2 special tokens (one text) or 3 (two): [s] a [e], [CLS] a [SEP];
    // [s] a [$] b [e], [CLS] a [SEP] b [SEP].
    const std::size_t one = f[0].size() + 2;
    std::size_t longest = s.kind == FinetuneKind::classify ? one : 0;
    for (std::size_t k = 1; k < f.size(); k++) longest = std::max(longest, f[0].size() + f[k].size() + 3);
    x.length = (int)longest;
    // Truncation: drop one token at a time from the longer text (the given side) until a+b fits.
    auto cut = [&](std::vector<int>& v) {
        if (t == Truncation::right) v.pop_back();
        else v.erase(v.begin());
    };
    auto fit = [&](std::vector<int>& a, std::vector<int>* b) {
        const std::size_t room = (std::size_t)std::max(0, c.n_ctx - (b ? 3 : 2));
        while (a.size() + (b ? b->size() : 0) > room) {
            std::vector<int>& longer = b && b->size() > a.size() ? *b : a;
            if (longer.size() <= 1)
                throw Error("'" + file + "' line " + std::to_string(e.line) + ": n_ctx = " + std::to_string(c.n_ctx) +
                            " leaves no room for one token of each text");
            cut(longer);
            x.truncated = true;
        }
    };
    auto pair_fit = [&](const std::vector<int>& a0, const std::vector<int>& b0, std::vector<int>& a, std::vector<int>& b) {
        a = a0, b = b0;
        if (t != Truncation::none) fit(a, &b);
    };
    auto pair = [&](const std::vector<int>& a0, const std::vector<int>& b0) {  // GPT: [s] a [$] b [e]; BERT: [CLS] a [SEP] b [SEP]
        std::vector<int> a, b;
        pair_fit(a0, b0, a, b);
        std::vector<int> ids, seg;
        if (gpt) ids = gpt1_entailment_input(a, b, s.specials);
        else bert_pair(c, a, b, ids, seg);
        x.seqs.push_back(ids), x.segs.push_back(has_segments(c.variant) ? seg : std::vector<int>());
    };
    switch (s.kind) {
        case FinetuneKind::classify:
            if (t != Truncation::none) fit(f[0], nullptr);
            if (gpt) x.seqs.push_back(gpt1_classify_input(f[0], s.specials)), x.segs.push_back({});
            else {
                std::vector<int> ids = {c.cls_id};
                ids.insert(ids.end(), f[0].begin(), f[0].end());
                ids.push_back(c.sep_id);
                x.segs.push_back(has_segments(c.variant) ? std::vector<int>(ids.size(), 0) : std::vector<int>());
                x.seqs.push_back(ids);
            }
            break;
        case FinetuneKind::entailment: pair(f[0], f[1]); break;
        case FinetuneKind::similarity: pair(f[0], f[1]), pair(f[1], f[0]); break;  // both orderings (formulas §28)
        case FinetuneKind::choice:
            for (std::size_t k = 1; k < f.size(); k++) pair(f[0], f[k]);
            break;
    }
    return x;  // a sequence longer than n_ctx (Truncation::none): check_example_lengths names it
}

// BERT, RoBERTa: [CLS] A [SEP] B [SEP] padded with [SEP]; the head reads [CLS] (row 0), the
// padding is masked out; L1's targets from mlm_corrupt (every sequence corrupted alike, so the
// [MASK]s do not tell the right answer of a choice from the others).
static Batch bert_finetune_batch(const Config& c, const std::vector<const EncodedExample*>& examples, int n,
                                 std::vector<int>& at, Rng* mlm_rng) {
    Batch b;
    b.B = 0;
    for (const EncodedExample* e : examples) b.B += (int)e->seqs.size();
    b.n = n;
    at.assign(b.B, 0);
    int k = 0;
    for (const EncodedExample* e : examples)
        for (std::size_t j = 0; j < e->seqs.size(); j++, k++) {
            const std::vector<int>& x = e->seqs[j];
            std::vector<int> tokens = x, targets(x.size(), -1);
            if (mlm_rng) {  // L1: the masked-LM loss on the same input
                MLMExample m = mlm_corrupt(x, 1, (int)x.size(), c, *mlm_rng);
                tokens = std::move(m.tokens), targets = std::move(m.targets);
            }
            tokens.resize(n, c.sep_id), targets.resize(n, -1);
            b.tokens.insert(b.tokens.end(), tokens.begin(), tokens.end());
            b.targets.insert(b.targets.end(), targets.begin(), targets.end());
            if (has_segments(c.variant)) {
                std::vector<int> seg = e->segs[j];
                seg.resize(n, 1);
                b.segments.insert(b.segments.end(), seg.begin(), seg.end());
            }
            b.lengths.push_back((int)x.size());
        }
    return b;
}

Batch finetune_batch(const Config& c, const FinetuneSpec& s, const std::vector<const EncodedExample*>& examples,
                     std::vector<int>& at, std::vector<int>& labels, Rng* mlm_rng) {
    std::vector<std::vector<int>> seqs;
    labels.clear();
    for (const EncodedExample* e : examples) {
        if (e->seqs.size() != examples[0]->seqs.size()) throw Error("finetune_batch: examples with different numbers of sequences");
        seqs.insert(seqs.end(), e->seqs.begin(), e->seqs.end());
        labels.push_back(e->label);
    }
    int n = 0;
    for (auto& q : seqs) n = std::max(n, (int)q.size());
    Batch b;
    if (is_causal(c.variant)) b = gpt1_batch(seqs, n, s.specials.extract, at);  // next-token targets for L1
    else b = bert_finetune_batch(c, examples, n, at, mlm_rng);
    // Multiple choice: L1 is the likelihood of the labelled text, the context with its right answer;
    // the wrong answers are distractors, not text (formulas §28).
    if (s.kind == FinetuneKind::choice) {
        const std::size_t K = examples[0]->seqs.size();
        for (std::size_t e = 0; e < examples.size(); e++)
            for (std::size_t j = 0; j < K; j++)
                if (examples[e]->label >= 0 && (int)j != examples[e]->label)
                    std::fill_n(b.targets.begin() + (e * K + j) * n, n, -1);
    }
    return b;
}

std::vector<int> finetune_predict(const Config& c, const Params<float>& p, const FinetuneSpec& s,
                                  const std::vector<EncodedExample>& examples, double* mean_L2,
                                  std::vector<std::vector<double>>* probs) {
    std::vector<int> pred(examples.size(), -1);
    if (probs) probs->assign(examples.size(), {});
    double L2 = 0;
    int counted = 0;
    for (std::size_t i = 0; i < examples.size();) {  // batches of up to 16 consecutive examples with the same K
        std::vector<const EncodedExample*> chunk = {&examples[i]};
        std::size_t j = i + 1;
        while (j < examples.size() && chunk.size() < 16 && examples[j].seqs.size() == examples[i].seqs.size()) chunk.push_back(&examples[j++]);
        std::vector<int> at, labels;
        const Batch b = finetune_batch(c, s, chunk, at, labels, nullptr);
        const Tensor<float> P = finetune_probs(c, p, p.W_y, head_task(s.kind), (int)examples[i].seqs.size(), b, at);
        for (int e = 0; e < P.rows(); e++) {
            int best = 0;
            for (int y = 1; y < P.cols(); y++)
                if (P(e, y) > P(e, best)) best = y;
            pred[i + e] = best;
            if (probs)
                for (int y = 0; y < P.cols(); y++) (*probs)[i + e].push_back(P(e, y));
            if (labels[e] >= 0) L2 -= math::log(std::max(1e-30, (double)P(e, labels[e]))), counted++;
        }
        i = j;
    }
    if (mean_L2) *mean_L2 = counted ? L2 / counted : 0;
    return pred;
}

ClassReport class_report(const std::vector<int>& predicted, const std::vector<int>& gold, int C) {
    if (predicted.size() != gold.size()) throw Error("class_report: " + std::to_string(predicted.size()) + " predictions for " +
                                                     std::to_string(gold.size()) + " labels");
    ClassReport r;
    r.confusion.assign(C, std::vector<int>(C, 0));
    int right = 0;
    for (std::size_t i = 0; i < gold.size(); i++) {
        if (gold[i] < 0 || gold[i] >= C || predicted[i] < 0 || predicted[i] >= C)
            throw Error("class_report: a label outside 0.." + std::to_string(C - 1));
        r.confusion[gold[i]][predicted[i]]++;
        right += gold[i] == predicted[i];
    }
    for (int k = 0; k < C; k++) {
        int tp = r.confusion[k][k], as_k = 0, of_k = 0;
        for (int j = 0; j < C; j++) as_k += r.confusion[j][k], of_k += r.confusion[k][j];
        const double P = as_k ? (double)tp / as_k : 0.0, R = of_k ? (double)tp / of_k : 0.0;
        r.precision.push_back(P);
        r.recall.push_back(R);
        r.f1.push_back(P + R > 0 ? 2 * P * R / (P + R) : 0.0);
        r.support.push_back(of_k);
        r.macro_precision += P / C, r.macro_recall += R / C, r.macro_f1 += r.f1.back() / C;
    }
    r.accuracy = gold.empty() ? 0.0 : (double)right / (double)gold.size();
    return r;
}

std::string class_report_text(const ClassReport& r, const std::vector<std::string>& names) {
    std::size_t w = 9;
    for (const std::string& n : names) w = std::max(w, n.size());
    const int C = (int)names.size();
    char buf[256];
    std::string t = "confusion matrix (rows: the label given, columns: the label predicted):\n" + std::string(w + 2, ' ');
    for (int j = 0; j < C; j++) std::snprintf(buf, sizeof buf, " %*s", (int)w, names[j].c_str()), t += buf;
    t += "\n";
    for (int k = 0; k < C; k++) {
        std::snprintf(buf, sizeof buf, "  %-*s", (int)w, names[k].c_str());
        t += buf;
        for (int j = 0; j < C; j++) std::snprintf(buf, sizeof buf, " %*d", (int)w, r.confusion[k][j]), t += buf;
        t += "\n";
    }
    std::snprintf(buf, sizeof buf, "  %-*s %9s %9s %9s %9s\n", (int)w, "class", "precision", "recall", "F1", "support");
    t += buf;
    for (int k = 0; k < C; k++) {
        std::snprintf(buf, sizeof buf, "  %-*s %9.3f %9.3f %9.3f %9d\n", (int)w, names[k].c_str(), r.precision[k], r.recall[k], r.f1[k],
                      r.support[k]);
        t += buf;
    }
    std::snprintf(buf, sizeof buf, "  %-*s %9.3f %9.3f %9.3f\n", (int)w, "mean", r.macro_precision, r.macro_recall, r.macro_f1);
    return t + buf;
}

double majority_share(const std::vector<EncodedExample>& examples, int* label) {
    std::map<int, int> count;
    int best = -1;
    for (const EncodedExample& e : examples) {
        const int k = ++count[e.label];
        if (best < 0 || k > count[best]) best = e.label;
    }
    if (label) *label = best;
    return examples.empty() ? 0.0 : (double)count[best] / (double)examples.size();
}

// The checkpoint's fine-tuning metadata <-> FinetuneSpec.
static void spec_to_metadata(const FinetuneSpec& s, std::map<std::string, std::string>& m) {
    m["finetune.task"] = finetune_kind_name(s.kind);
    std::string classes = "[";
    for (std::size_t k = 0; k < s.classes.size(); k++) classes += (k ? "," : "") + json_escape(s.classes[k]);
    m["finetune.classes"] = classes + "]";
    m["finetune.start"] = std::to_string(s.specials.start);
    m["finetune.delim"] = std::to_string(s.specials.delim);
    m["finetune.extract"] = std::to_string(s.specials.extract);
}
FinetuneSpec finetune_spec_of(const LoadedModel& lm, const std::string& path) {
    const auto& m = lm.file.metadata;
    if (!m.count("finetune.task")) throw Error("'" + path + "' is not a fine-tuned checkpoint (no finetune.task; make one with `" + program_name() + " finetune`)");
    FinetuneSpec s;
    s.kind = finetune_kind_from_name(m.at("finetune.task"));
    const Json classes = parse_json(m.count("finetune.classes") ? m.at("finetune.classes") : "[]");
    for (const Json& j : classes.arr) {
        if (j.type != Json::string) throw Error("'" + path + "': finetune.classes must be a list of strings");
        s.classes.push_back(j.str);
    }
    auto id = [&](const char* k) { return m.count(k) ? parse_int(m.at(k), std::string("metadata '") + k + "'") : -1; };
    s.specials = {id("finetune.start"), id("finetune.delim"), id("finetune.extract")};
    const Config& c = lm.config;
    const int C = s.kind == FinetuneKind::choice ? 1 : (int)s.classes.size();
    const int rows = s.kind == FinetuneKind::similarity ? 2 * c.H : c.H;
    if (c.W_y_rows != rows || c.W_y_cols != C) throw Error("'" + path + "': W_y does not match its task and " + std::to_string(C) + " classes");
    if (is_causal(c.variant))
        for (int t : {s.specials.start, s.specials.delim, s.specials.extract})
            if (t < 0 || t >= c.V) throw Error("'" + path + "': the start, delimiter and extract ids must be inside 0..V-1");
    return s;
}

// finetune's tokenizer: the one the flags name (released GPT-1/GPT-2/BERT weights), else the one the
// checkpoint records (characters, then in vocab, or the BPE `train --encoder` used), checked against the model.
static Tokenizer finetune_tokenizer(const FinetuneOptions& fo, const LoadedModel& lm, CharVocab& vocab) {
    const Tokenizer recorded = tokenizer_of(lm.file.metadata, fo.checkpoint);
    const bool given = !fo.vocab.empty() || !fo.encoder.empty() || !fo.tokenizer.empty();
    Tokenizer tok = given ? load_tokenizer(fo.tokenizer, fo.encoder, fo.vocab) : recorded;
    const bool subword = !tok.kind.empty() && tok.kind != "char";
    if (given && !recorded.kind.empty() && (recorded.kind != tok.kind || recorded.vocab != tok.vocab || recorded.encoder_json != tok.encoder_json))
        throw Error("'" + fo.checkpoint + "' records its own tokenizer (" + (recorded.kind == "char" ? std::string("characters") : recorded.kind) +
                    "); the tokenizer flags name another one (leave them out)");
    if (subword) {
        const int V0 = lm.config.V - (lm.file.metadata.count("finetune.task") && is_causal(lm.config.variant) ? 3 : 0);
        if (tok.size() != V0)
            throw Error("the tokenizer has " + std::to_string(tok.size()) + " tokens but the model's V = " + std::to_string(V0));
        if (is_bidirectional_tokenizer(tok.kind) == is_causal(lm.config.variant))
            throw Error("the tokenizer is " + tok.kind + " but '" + fo.checkpoint + "' is a " + variant_name(lm.config.variant) + " model");
    } else {
        if (!lm.file.metadata.count("vocab"))
            throw Error("'" + fo.checkpoint + "' has no character vocabulary: finetune starts from a checkpoint written by `" + program_name() + " train`, "
                        "or give its tokenizer (--vocab, --encoder) for released weights");
        vocab = CharVocab::from_metadata(lm.file.metadata.at("vocab"));
    }
    if (lm.config.xlnet) throw Error("'" + fo.checkpoint + "' was trained with --objective xlnet; fine-tune a gpt, gpt2, gpt3, bert or roberta checkpoint");
    return tok;
}

// A model fine-tuned the first time: GPT's start, delimiter and extract tokens (new rows of W_e,
// formulas §28; BERT and RoBERTa reuse [CLS] and [SEP]) and the head W_y's shape for the task.
static void add_finetune_head(Config& c, FinetuneSpec& spec, FinetuneKind kind) {
    if (is_causal(c.variant)) {  // start, delimiter, extract: new rows of W_e (formulas §28), N(0, 0.02)
        spec.specials = {c.V, c.V + 1, c.V + 2};
        c.V += 3;
    } else {
        spec.specials = {c.cls_id, c.sep_id, c.sep_id};
    }
    c.W_y_rows = kind == FinetuneKind::similarity ? 2 * c.H : c.H;
    c.W_y_cols = kind == FinetuneKind::choice ? 1 : (int)spec.classes.size();
}

// The pre-trained weights into the fine-tuned model's: every tensor as it was, W_e's new rows and
// W_y drawn from N(0, 0.02).
static void carry_over_weights(LoadedModel& lm, const Config& c, Params<float>& p, Rng& init) {
    auto from = named_tensors(lm.config, lm.params);
    auto to = named_tensors(c, p);
    std::map<std::string, const Tensor<float>*> from_name;  // by name: W_y comes before the released BERT's tensors
    for (auto& nt : from) from_name[nt.name] = nt.tensor;
    for (std::size_t j = 0; j < to.size(); j++) {
        Tensor<float>& t = *to[j].tensor;
        const Tensor<float>* f = from_name.count(to[j].name) ? from_name[to[j].name] : nullptr;
        if (f && f->shape == t.shape) t = *f;
        else if (to[j].name == "W_e") {  // the pre-trained rows, then the new ones
            std::copy(f->data.begin(), f->data.end(), t.data.begin());
            for (std::size_t k = f->size(); k < t.size(); k++) t.data[k] = (float)(0.02 * init.normal());
        } else if (to[j].name == "W_y") {
            for (float& v : t.data) v = (float)(0.02 * init.normal());
        } else throw Error("finetune: cannot carry over '" + to[j].name + "'");
    }
}

// A labelled file's examples as token sequences through the input transformation (formulas §28).
static std::vector<EncodedExample> encode_examples(const Config& c, const FinetuneSpec& spec, const Tokenizer& tok, const CharVocab& vocab,
                                                   const std::vector<LabelledExample>& raw, const std::string& text,
                                                   const std::string& file, Truncation truncate) {
    const bool subword = !tok.kind.empty() && tok.kind != "char";
    std::vector<EncodedExample> ex;
    for (auto& e : raw)
        ex.push_back(subword ? encode_example(c, spec, tok, e, file, truncate) : encode_example(c, spec, vocab, e, text, file, truncate));
    return ex;
}

// finetune's defaults that depend on the data (3 epochs, 0.2% warm-up, a validation per epoch), the
// options' checks, and the memory a step of the largest examples takes.
static void plan_finetune_steps(TrainOptions& o, const Config& c, const std::vector<EncodedExample>& train_ex) {
    const long long N = (long long)train_ex.size();
    const long long per_step = (long long)o.batch * std::max(1, o.accum);  // examples a step sees
    if (o.steps <= 0) o.steps = std::max(1LL, (3 * N + per_step - 1) / per_step);  // 3 epochs, as the GPT-1 paper
    if (o.warmup < 0) o.warmup = (o.steps * 2 + 999) / 1000;                       // 0.2% of the steps
    if (o.eval_every < 0) o.eval_every = std::max(1LL, (N + per_step - 1) / per_step);  // every epoch
    check_options(o);
    // A batch holds o.batch examples of up to `seqs` sequences of up to `longest` tokens.
    int longest = 1, seqs = 1;
    for (const auto& e : train_ex) {
        seqs = std::max(seqs, (int)e.seqs.size());
        for (const auto& q : e.seqs) longest = std::max(longest, (int)q.size());
    }
    const TrainMemory m = train_memory(c, (long long)o.batch * seqs, longest);
    require_memory("finetune", m.params + m.grads + m.adam + m.activations,
                   "the model, its gradient and AdamW's m and v, and the activations of " + std::to_string(o.batch) +
                       " examples of up to " + std::to_string(seqs) + " x " + std::to_string(longest) + " tokens",
                   "--batch", memory_limit(), o.memory_check);
}

// What the fine-tuned checkpoint records beyond the loop's state: the tokenizer predict reads its
// input with, the task and its tokens, lambda, and where the model came from.
static void finetune_metadata(RunState& s, const FinetuneOptions& fo, const FinetuneSpec& spec, const Tokenizer& tok, const CharVocab& vocab) {
    const bool subword = !tok.kind.empty() && tok.kind != "char";
    if (subword) {  // what predict needs to read its input: the tokenizer, its files whole
        for (const auto& kv : tok.metadata()) s.meta[kv.first] = kv.second;
    } else {
        s.meta["vocab"] = vocab.to_metadata();
    }
    spec_to_metadata(spec, s.meta);
    s.meta["finetune.lambda"] = full_digits(fo.lambda);
    s.meta["finetune.from"] = fo.scratch ? "(scratch)" : fo.checkpoint;
    s.meta["finetune.train"] = fo.train_file;
    s.meta["train.data"] = "";
}

// The fine-tuning run's plan on stdout: the model, the task and its classes or answers, the data and schedule.
static void print_finetune_plan(const FinetuneOptions& fo, const TrainOptions& o, const Config& c, const FinetuneSpec& spec,
                                const std::map<std::size_t, std::vector<int>>& by_K, long long N, std::size_t val_count) {
    const FinetuneKind kind = spec.kind;
    std::string heads = std::to_string(spec.classes.size()) + " classes";
    if (kind == FinetuneKind::choice) {  // K answers per example, from the data
        heads = by_K.size() == 1 ? std::to_string(by_K.begin()->first) : std::to_string(by_K.begin()->first) + ".." + std::to_string(by_K.rbegin()->first);
        heads += " answers per example";
    }
    std::printf("fine-tune %s (%s%s): L=%d H=%d V=%d, task %s, %s, lambda %g\n", variant_name(c.variant),
                fo.scratch ? "from scratch, " : "pre-trained ", fo.scratch ? "same shapes" : fo.checkpoint.c_str(), c.L, c.H,
                c.V, fo.task.c_str(), heads.c_str(), fo.lambda);
    std::printf("data: %s (%lld examples), %s (%zu), batch %d%s, steps %lld, lr %g, %s, warmup %lld, dropout %g\n",
                fo.train_file.c_str(), N, fo.val_file.c_str(), val_count, o.batch, accumulated(o.accum).c_str(), o.steps,
                o.lr, o.schedule.c_str(), o.warmup, o.dropout);
    std::fflush(stdout);
}

// A run at chance is what a small model gets at the GPT-1 paper's rate and 3 epochs: a note says so.
static void note_chance_accuracy(FinetuneResult& r, const std::vector<EncodedExample>& val_ex, const FinetuneSpec& spec, const TrainOptions& o) {
    const FinetuneKind kind = spec.kind;
    r.chance = majority_share(val_ex, &r.majority);
    if (r.total > 0 && r.accuracy < r.chance + 2 * std::sqrt(r.chance * (1 - r.chance) / r.total)) {
        std::fflush(stdout);
        const std::string label = kind == FinetuneKind::choice ? std::to_string(r.majority) : spec.classes[r.majority];
        std::fprintf(stderr, "note: that is within two standard errors of always answering '%s' (%.1f%% of the validation examples): "
                             "the model has not learnt the task%s (docs/finetuning.md, \"Defaults\")\n", label.c_str(), 100.0 * r.chance,
                     o.lr < 2e-4 ? "; a small model needs a larger --lr than the GPT-1 paper's 6.25e-5 (about 1e-3) and more --steps"
                                 : "; try more --steps");
    }
}

FinetuneResult finetune(const FinetuneOptions& fo) {
    TrainOptions o = fo.loop;
    const FinetuneKind kind = finetune_kind_from_name(fo.task);
    if (!(fo.lambda >= 0) || !std::isfinite(fo.lambda)) throw Error("finetune: --lambda must be a number >= 0");
    const std::string base = strip_ext(o.out);
    check_outputs({{o.out, "--out", OutputKind::checkpoint},
                   {base + ".csv", "the loss log", OutputKind::csv_log},
                   {base + ".svg", "the loss plot", OutputKind::svg_plot}},
                  {{fo.checkpoint, "--checkpoint"}, {fo.train_file, "--train"}, {fo.val_file, "--val"}});
    LoadedModel lm = load_model(fo.checkpoint, {"adam."});
    CharVocab vocab;
    const Tokenizer tok = finetune_tokenizer(fo, lm, vocab);
    RunState s;
    s.rng = Rng(o.seed);
    FinetuneSpec spec;
    Config& c = s.c;
    const bool again = lm.file.metadata.count("finetune.task") > 0;  // fine-tuning a fine-tuned model further
    if (again) {
        spec = finetune_spec_of(lm, fo.checkpoint);
        if (spec.kind != kind) throw Error("'" + fo.checkpoint + "' was fine-tuned for " + finetune_kind_name(spec.kind) + ", not " + fo.task);
    }
    spec.kind = kind;
    const std::string train_text = read_file(fo.train_file), val_text = read_file(fo.val_file);
    const std::vector<LabelledExample> train_raw = parse_labelled(train_text, fo.train_file, kind, spec.classes, !again, true);
    const std::vector<LabelledExample> val_raw = parse_labelled(val_text, fo.val_file, kind, spec.classes, false, true);
    c = lm.config;
    Rng init(o.seed ^ 0xF17E7u);
    if (!again) add_finetune_head(c, spec, kind);
    s.p = make_params<float>(c);
    if (fo.scratch) {
        init_params(c, s.p, o.seed);  // the ablation's "no pre-training": same shapes, fresh numbers
    } else {
        carry_over_weights(lm, c, s.p, init);
    }
    adamw_init(c, s.adam);
    s.adam.beta1 = o.beta1, s.adam.beta2 = o.beta2, s.adam.weight_decay = o.weight_decay;
    const std::vector<EncodedExample> train_ex = encode_examples(c, spec, tok, vocab, train_raw, train_text, fo.train_file, fo.truncate);
    const std::vector<EncodedExample> val_ex = encode_examples(c, spec, tok, vocab, val_raw, val_text, fo.val_file, fo.truncate);
    for (const auto& file_ex : {std::make_pair(&fo.train_file, &train_ex), std::make_pair(&fo.val_file, &val_ex)}) {
        const std::string note = check_example_lengths(*file_ex.second, c, *file_ex.first, fo.truncate);
        if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
    }
    std::map<std::size_t, std::vector<int>> by_K;  // multiple choice: a batch holds examples with the same K
    for (std::size_t i = 0; i < train_ex.size(); i++) by_K[train_ex[i].seqs.size()].push_back((int)i);
    const long long N = (long long)train_ex.size();
    plan_finetune_steps(o, c, train_ex);
    finetune_metadata(s, fo, spec, tok, vocab);
    Objective obj;
    obj.part_names = {"L1", "L2"};
    obj.title = std::string(variant_name(c.variant)) + " fine-tuning (" + fo.task + "): L3 = L2 + " + full_digits(fo.lambda) + " L1";
    obj.step = [&](Params<float>& g, Rng& rng, std::vector<double>& parts) {
        std::vector<const EncodedExample*> chunk;
        const std::vector<int>& pool = by_K.size() == 1 ? by_K.begin()->second : by_K[train_ex[rng.below((int)N)].seqs.size()];
        for (int k = 0; k < o.batch; k++) chunk.push_back(&train_ex[pool[rng.below((int)pool.size())]]);
        std::vector<int> at, labels;
        const Batch b = finetune_batch(c, spec, chunk, at, labels, !is_causal(c.variant) && fo.lambda > 0 ? &rng : nullptr);
        ForwardOptions f;
        f.dropout = o.dropout, f.rng = &rng;
        const FinetuneLoss L = finetune_loss(c, s.p, s.p.W_y, head_task(kind), (int)chunk[0]->seqs.size(), b, at, labels,
                                             fo.lambda, &g, &g.W_y, f);
        parts[0] = L.L1, parts[1] = L.L2;
        obj.tokens_per_step = (long long)b.B * b.n;
        return L.L3;
    };
    FinetuneResult r;
    auto accuracy = [&](const Params<float>& p, double* L2) {
        const std::vector<int> pred = finetune_predict(c, p, spec, val_ex, L2);
        int right = 0;
        for (std::size_t i = 0; i < pred.size(); i++) right += pred[i] == val_ex[i].label;
        r.correct = right, r.total = (int)pred.size();
        return (double)right / (double)pred.size();
    };
    int validations = 0;  // run_training validates at its last step: that accuracy is the final one
    obj.validate = [&](const Params<float>& p, std::string& shown) {
        double L2 = 0;
        const double acc = accuracy(p, &L2);
        r.accuracy = acc, validations++;
        char buf[96];
        std::snprintf(buf, sizeof buf, "L2 %.4f, accuracy %.1f%%", L2, 100.0 * acc);
        shown = buf;
        return L2;
    };
    if (!o.quiet) print_finetune_plan(fo, o, c, spec, by_K, N, val_ex.size());
    warn_warmup(o.warmup, o.steps);
    warn_same_file(fo.val_file, "--train", fo.train_file, "the validation accuracy is measured on the examples the head trains on");
    const TrainResult tr = run_training(o, s, obj);
    r.signal = tr.signal, r.steps_done = tr.steps_done;
    if (validations == 0) r.accuracy = accuracy(s.p, nullptr);
    // The result line even with --quiet (which silences the progress): it is what the run is for.
    std::printf("val accuracy: %.1f%% (%d of %d)\n", 100.0 * r.accuracy, r.correct, r.total);
    note_chance_accuracy(r, val_ex, spec, o);
    if (!o.quiet) std::printf("wrote %s, %s.csv, %s.svg\n", o.out.c_str(), base.c_str(), base.c_str());
    return r;
}

TF_COLD_END
// ---- bench: the speed of a model (loading, generation) ------------------------------------------

ModelSpeed model_speed(const Config& c, Params<float>& p) {
    using Clock = std::chrono::steady_clock;
    auto ms_since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
    ModelSpeed r;
    const std::string path = temporary_directory() + "/transformer-bench-" + std::to_string(process_id()) + ".safetensors";
    struct Removed {
        std::string path;
        ~Removed() { remove_file(path); }
    } removed{path};
    save_model(path, c, p);
    r.load_ms = r.fread_ms = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        auto t = Clock::now();
        {
            std::FILE* f = open_file(path, "rb");
            if (!f) throw Error("bench: cannot read back '" + path + "': " + std::strerror(errno));
            const long long size = file_size(f);
            std::unique_ptr<char[]> fresh(new char[(std::size_t)std::max(size, 1LL)]);  // not written: fresh pages
            const std::size_t got = std::fread(fresh.get(), 1, (std::size_t)size, f);
            std::fclose(f);
            if (size < 0 || got != (std::size_t)size) throw Error("bench: reading '" + path + "' back failed");
            r.file_bytes = (double)size;
            r.fread_ms = std::min(r.fread_ms, ms_since(t));
        }
        pool_trim();  // load into fresh memory too, not into blocks the pool kept
        t = Clock::now();
        {
            const LoadedModel lm = load_model(path);
            r.load_ms = std::min(r.load_ms, ms_since(t));
        }
        pool_trim();
    }
    if (!is_causal(c.variant)) return r;
    r.context_to = std::min(128, c.n_ctx), r.context_from = r.context_to / 2;
    KVCache<float> k;
    Rng rng(11);
    r.token_ms = 1e30;
    // The yardstick's passes alternate with the tokens' passes, so both see the machine in the same
    // state (one core's read speed drifts by 10-15% from one second to the next on a shared host).
    const std::vector<float> buf = read_buffer(4.0 * (double)count_params(c).actual);
    for (int pass = 0; pass < 6; pass++) {  // the first warms the pool and the caches; then the best of 5
        kv_init(c, k);
        for (int t = 0; t < r.context_from; t++) model_step(c, p, rng.below(c.V), k);
        const auto t0 = Clock::now();
        for (int t = r.context_from; t < r.context_to; t++) model_step(c, p, rng.below(c.V), k);
        if (pass > 0) r.token_ms = std::min(r.token_ms, ms_since(t0) / std::max(1, r.context_to - r.context_from));
        if (pass > 0) r.mem_read_gbps = std::max(r.mem_read_gbps, read_pass_gbps(buf));
    }
    return r;
}

TF_COLD_BEGIN
// ================================================================================================
// TEACHING: pictures and explain
// ================================================================================================
// ---- Heat maps (SVG, written by hand as loss_svg is) ---------------------------------------------
// Text in SVG and HTML, as content or in an attribute quoted with ' or ": the five characters that
// could end either escaped.
static std::string markup_text(const std::string& s) {
    std::string o;
    for (char ch : s)
        o += ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '&' ? "&amp;" : ch == '\'' ? "&apos;" : ch == '"' ? "&quot;" : std::string(1, ch);
    return o;
}
static std::string num(double v, const char* format = "%.4g") {
    char b[32];
    std::snprintf(b, sizeof b, format, v);
    return b;
}
static std::size_t code_points(const std::string& s) {
    std::size_t k = 0;
    for (unsigned char ch : s) k += (ch & 0xC0) != 0x80;
    return k;
}

std::string token_label(const std::string& bytes) {
    std::string o;
    for (std::size_t i = 0; i < bytes.size();) {
        uint32_t cp = 0;
        const int len = utf8_next(bytes, i, cp);
        if (len > 0 && cp >= 0x20 && cp != 0x7F) {
            o += cp == ' ' ? "\u2423" : bytes.substr(i, (std::size_t)len);  // a space as an open box
            i += (std::size_t)len;
            continue;
        }
        char hex[8];  // a byte that is not printable UTF-8 (num() formats doubles, not a byte: not here)
        std::snprintf(hex, sizeof hex, "\\x%02X", (unsigned)(unsigned char)bytes[i]);
        o += bytes[i] == '\n' ? std::string("\u23CE") : std::string(hex);
        i++;
    }
    return o.empty() ? "\u2205" : o;
}

// The one colour ramp of every heat map: the colour t in [0, 1] of the way along `stops` (0xRRGGBB,
// evenly spaced), each channel linear between the two stops around t. BLUES is the probability
// scale, white (0) to dark blue (1); the page's signed values run from white to red or to blue.
static const std::vector<unsigned> BLUES = {0xffffff, 0xc6dbef, 0x6baed6, 0x2171b5, 0x08306b};
static unsigned ramp(const std::vector<unsigned>& stops, double t) {
    const double v = std::min(1.0, std::max(0.0, t)) * (double)(stops.size() - 1);
    const std::size_t k = std::min(stops.size() - 2, (std::size_t)v);
    const double f = v - (double)k;
    const unsigned a = stops[k], b = stops[k + 1];
    auto mix = [&](int shift) { return (unsigned)std::lround(((a >> shift) & 255) * (1 - f) + ((b >> shift) & 255) * f); };
    return mix(16) << 16 | mix(8) << 8 | mix(0);
}
static std::string hex_colour(unsigned rgb) {
    char o[8];
    std::snprintf(o, sizeof o, "#%06x", rgb & 0xffffff);
    return o;
}
static std::string blue(double v) { return hex_colour(ramp(BLUES, v)); }

// Room for a panel's labels: its row labels on the left, its column labels on top, upright when long.
struct HeatMargins {
    double lab, colh;  // room for the row labels on the left, the column labels on top
    bool upright;      // long column labels are written upwards
};
static HeatMargins heat_margins(const HeatPanel& q, double cs, double font) {
    std::size_t r = 1, c = 1;
    for (const std::string& s : q.rows) r = std::max(r, code_points(s));
    for (const std::string& s : q.cols) c = std::max(c, code_points(s));
    const bool up = (double)c * font * 0.62 > cs - 3;
    return HeatMargins{6 + font * 0.62 * (double)r, up ? 6 + font * 0.62 * (double)c : font + 6, up};
}

// One panel of heatmap_svg at (x0, y0): its title, the keys across the top, the queries down the side,
// a cell per entry (hatched where masked), and its notes below. cs: the cell size.
static void heat_panel_svg(std::ostringstream& o, const HeatPanel& q, double x0, double y0, double cs, double font, bool probability,
                           const std::string& ids) {
    const int R = (int)q.rows.size(), C = (int)q.cols.size();
    const HeatMargins m = heat_margins(q, cs, font);
    const double gx = m.lab, gy = 20 + m.colh;  // the grid's corner inside the panel
    o << "<g class='panel' transform='translate(" << x0 << "," << y0 << ")' font-size='" << font << "'>\n";
    o << "<text x='0' y='13' font-size='13' font-weight='bold'>" << markup_text(q.title) << "</text>\n";
    for (int j = 0; j < C; j++) {  // keys j across the top
        const double cx = gx + (j + 0.5) * cs;
        if (m.upright)
            o << "<text transform='translate(" << cx + font * 0.35 << "," << gy - 4 << ") rotate(-90)'>" << markup_text(q.cols[j]) << "</text>\n";
        else
            o << "<text x='" << cx << "' y='" << gy - 4 << "' text-anchor='middle'>" << markup_text(q.cols[j]) << "</text>\n";
    }
    for (int i = 0; i < R; i++)  // queries i down the side
        o << "<text x='" << gx - 4 << "' y='" << gy + (i + 0.5) * cs + font * 0.35 << "' text-anchor='end'>" << markup_text(q.rows[i]) << "</text>\n";
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            const std::size_t at = (std::size_t)i * C + j;
            o << "<rect x='" << gx + j * cs << "' y='" << gy + i * cs << "' width='" << cs << "' height='" << cs << "' ";
            if (q.masked[at])  // a picture of P: the probability, 0; of a mask: its entry
                o << "class='masked' fill='url(#" << ids << "hatch)'><title>" << (probability ? "0 (masked: Mask_ij = -inf)" : "-inf") << "</title></rect>\n";
            else o << "class='p' fill='" << blue(q.values[at]) << "'><title>" << num(q.values[at]) << "</title></rect>\n";
        }
    o << "<rect x='" << gx << "' y='" << gy << "' width='" << C * cs << "' height='" << R * cs << "' fill='none' stroke='#666'/>\n";
    for (std::size_t k2 = 0; k2 < q.notes.size(); k2++)
        o << "<text x='0' y='" << gy + R * cs + 18 + 14.0 * (double)k2 << "' font-size='11'>" << markup_text(q.notes[k2]) << "</text>\n";
    o << "</g>\n";
}

// heatmap_svg's legend at height ly: the colour scale of P (or a mask's kept entry) and the hatching of -inf.
static void heat_legend_svg(std::ostringstream& o, double margin, double ly, bool probability, const std::string& ids) {
    if (probability) {
        o << "<rect x='" << margin << "' y='" << ly << "' width='240' height='12' fill='url(#" << ids << "scale)' stroke='#666'/>\n";
        for (int k = 0; k <= 4; k++)
            o << "<text x='" << margin + 60 * k << "' y='" << ly + 26 << "' text-anchor='middle' font-size='11'>" << num(k / 4.0, "%.2f") << "</text>\n";
        o << "<text x='" << margin << "' y='" << ly - 6 << "' font-size='11'>attention probability P_ij (row i: query, column j: key; each row sums to 1)</text>\n";
    } else {
        o << "<rect x='" << margin << "' y='" << ly << "' width='14' height='14' fill='" << hex_colour(BLUES[4]) << "'/>\n";
        o << "<text x='" << margin + 20 << "' y='" << ly + 11 << "'>1: the score Q_i . K_j / sqrt(D) is kept</text>\n";
    }
    const double mx = margin + (probability ? 280 : 300);
    o << "<rect x='" << mx << "' y='" << ly << "' width='14' height='14' fill='url(#" << ids << "hatch)' stroke='#666'/>\n";
    o << "<text x='" << mx + 20 << "' y='" << ly + 11 << "'>"
      << (probability ? "hatched: masked (Mask_ij = -inf, so P_ij = 0)" : "hatched: -inf, masked (probability exactly 0)")
      << "</text>\n";
}

std::string heatmap_svg(const std::vector<HeatPanel>& panels, int per_row, const std::string& title,
                        const std::vector<std::string>& caption, bool probability, const std::string& ids) {
    if (panels.empty()) throw Error("heatmap_svg: no panels");
    int most = 1;
    for (const HeatPanel& q : panels) {
        const std::size_t cells = q.rows.size() * q.cols.size();
        if (q.values.size() != cells || q.masked.size() != cells) throw Error("heatmap_svg: a panel's values do not fit its labels");
        most = std::max(most, (int)std::max(q.rows.size(), q.cols.size()));
    }
    per_row = std::max(1, std::min(per_row, (int)panels.size()));
    const double cs = std::max(9.0, std::min(22.0, std::floor(264.0 / most)));  // cell size
    const double font = std::min(12.0, cs - 1);
    const double gap = 28, margin = 16, head = 34 + 16.0 * (double)caption.size();
    // Each grid column is as wide as its widest panel, each grid row as high as its highest.
    const int grid_rows = ((int)panels.size() + per_row - 1) / per_row;
    std::vector<double> colw(per_row, 0), rowh(grid_rows, 0);
    for (std::size_t k = 0; k < panels.size(); k++) {
        const HeatPanel& q = panels[k];
        std::size_t note = 0;
        for (const std::string& s : q.notes) note = std::max(note, code_points(s));
        const HeatMargins m = heat_margins(q, cs, font);
        const double w = std::max(m.lab + (double)q.cols.size() * cs, std::max(6.2 * (double)note, 8.4 * (double)code_points(q.title)));
        const double h = 20 + m.colh + (double)q.rows.size() * cs + 6 + 14.0 * (double)q.notes.size();
        colw[k % per_row] = std::max(colw[k % per_row], w);
        rowh[k / per_row] = std::max(rowh[k / per_row], h);
    }
    std::vector<double> col_x(per_row + 1, margin), row_y(grid_rows + 1, head);
    for (int k = 0; k < per_row; k++) col_x[k + 1] = col_x[k] + colw[k] + gap;
    for (int k = 0; k < grid_rows; k++) row_y[k + 1] = row_y[k] + rowh[k] + gap;
    std::size_t text = code_points(title);
    for (const std::string& s : caption) text = std::max(text, code_points(s));
    const double W = std::max(std::max(col_x[per_row] - gap + margin, 2 * margin + 6.6 * (double)text), 660.0);
    const double H = row_y[grid_rows] + 60;
    std::ostringstream o;
    o << "<?xml version='1.0' encoding='UTF-8'?>\n";
    o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H
      << "' font-family='sans-serif' font-size='12'>\n";
    o << SVG_MARK << "\n";
    o << "<defs><pattern id='" << ids << "hatch' width='4' height='4' patternUnits='userSpaceOnUse' patternTransform='rotate(45)'>"
         "<rect width='4' height='4' fill='#e4e4e4'/><line x1='0' y1='0' x2='0' y2='4' stroke='#a0a0a0' stroke-width='1.6'/></pattern>\n";
    o << "<linearGradient id='" << ids << "scale'>";
    for (int k = 0; k < 5; k++) o << "<stop offset='" << k * 25 << "%' stop-color='" << hex_colour(BLUES[k]) << "'/>";
    o << "</linearGradient></defs>\n<rect width='100%' height='100%' fill='white'/>\n";
    o << "<text x='" << margin << "' y='22' font-size='15'>" << markup_text(title) << "</text>\n";
    for (std::size_t k = 0; k < caption.size(); k++)
        o << "<text x='" << margin << "' y='" << 40 + 16 * k << "' fill='#444'>" << markup_text(caption[k]) << "</text>\n";
    for (std::size_t k = 0; k < panels.size(); k++) {
        heat_panel_svg(o, panels[k], col_x[k % per_row], row_y[k / per_row], cs, font, probability, ids);
    }
    heat_legend_svg(o, margin, H - 44, probability, ids);
    o << "</svg>\n";
    return o.str();
}

static HeatPanel mask_panel(const std::string& title, const Tensor<float>& M, const std::vector<std::string>& rows,
                            const std::vector<std::string>& cols, std::vector<std::string> notes) {
    HeatPanel q;
    q.title = title, q.rows = rows, q.cols = cols, q.notes = std::move(notes);
    for (std::size_t k = 0; k < M.size(); k++) {
        q.masked.push_back(M[k] == -std::numeric_limits<float>::infinity());
        q.values.push_back(q.masked.back() ? 0.0 : (double)M[k]);
    }
    return q;
}

std::string masks_svg(int n, int window, int stride, const std::vector<int>& z) {
    if (n < 1 || n > 64) throw Error("masks: n must be in 1..64, got " + std::to_string(n));
    if ((int)z.size() != n) throw Error("masks: the permutation has " + std::to_string(z.size()) + " positions, n = " + std::to_string(n));
    permutation_ranks(z);  // throws unless z is a permutation
    std::vector<std::string> pos, streams;
    for (int i = 1; i <= n; i++) pos.push_back(std::to_string(i));
    for (const char* s : {"h", "g"})
        for (int i = 1; i <= n; i++) streams.push_back(s + std::to_string(i));
    std::string zs;
    for (int t = 0; t < n; t++) zs += (t ? "," : "") + std::to_string(z[t] + 1);
    const std::string w = std::to_string(window), s = std::to_string(stride);
    const std::vector<HeatPanel> panels = {
        mask_panel("Mask^BD (BERT, RoBERTa)", Mask_BD<float>(n), pos, pos, {"(Mask^BD)_i,j = 1"}),
        mask_panel("Mask^AR (GPT, GPT-2; GPT-3 at even l)", Mask_AR<float>(n), pos, pos,
                   {"(Mask^AR)_i,j = -inf if j > i,", "1 otherwise"}),
        mask_panel("Mask^ST (GPT-3 at odd l)", Mask_ST<float>(n, window, stride), pos, pos,
                   {"(Mask^ST)_i,j = 1 if j <= i and (i - j < window", "or (i - j) mod stride = 0), -inf otherwise;",
                    "window = " + w + ", stride = " + s + " (formulas §7)"}),
        mask_panel("Mask^XL(z) (XLNet's two streams)", Mask_XL<float>(z), streams, streams,
                   {"rows and columns: content h_1..h_n, then query g_1..g_n;",
                    "(h_i, h_j) = 1 if rank(j) <= rank(i), (g_i, h_j) = 1 if rank(j) < rank(i),",
                    "-inf otherwise (no row sees the query stream); z = (" + zs + ")"})};
    return heatmap_svg(panels, 4, "The attention masks for n = " + std::to_string(n),
                       {"Row i: the query (position i), column j: the key (position j); positions count from 1 as in the formulas.",
                        "Masked attention: Softmax(Mask (.) Q K^T / sqrt(D)) V, where an entry -inf drops the score (apply_mask)."},
                       false);
}

// ---- Attention pictures: P from the caches of the model's own forward pass ------------------------
static std::string mask_name(const Config& c, int l) {  // l: code layer
    if (c.xlnet) return "Mask^XL";
    if (!is_causal(c.variant)) return "Mask^BD";
    return c.variant == Variant::gpt3 && (l + 1) % 2 == 1 ? "Mask^ST" : "Mask^AR";
}

std::vector<HeatPanel> attention_panels(const Config& c, const Params<float>& p, const std::vector<int>& x,
                                        const std::vector<std::string>& labels, int layer, int head,
                                        const std::vector<int>& z_in) {
    const int n = (int)x.size();
    if (n < 1) throw Error("attention: no tokens");
    if ((int)labels.size() != n) throw Error("attention: " + std::to_string(labels.size()) + " labels for " + std::to_string(n) + " tokens");
    if (layer < 0 || layer > c.L)
        throw Error("layer " + std::to_string(layer) + " is outside 1..L = " + std::to_string(c.L) + " (layers count from 1, as in the formulas)");
    if (head < 0 || head > c.A)
        throw Error("head " + std::to_string(head) + " is outside 1..A = " + std::to_string(c.A) + " (heads count from 1, as in the formulas)");
    if (!z_in.empty() && !c.xlnet) throw Error("a permutation applies only to XLNet checkpoints (trained with --objective xlnet)");
    ForwardCache<float> k;
    if (c.xlnet) {  // both streams: rows 0..n-1 content h, rows n..2n-1 query g
        std::vector<int> z = z_in;
        for (int i = 0; z_in.empty() && i < n; i++) z.push_back(i);
        if ((int)z.size() != n) throw Error("the permutation has " + std::to_string(z.size()) + " positions for " + std::to_string(n) + " tokens");
        xlnet_forward(c, p, p.w, x, 1, z, k);
    } else {
        Batch b;
        b.n = n, b.tokens = x;
        model_forward(c, p, b, &k);
    }
    std::vector<HeatPanel> panels;
    for (int l = 0; l < c.L; l++) {
        if (layer && l != layer - 1) continue;
        for (int s = 0; s < (c.xlnet ? 2 : 1); s++)
            for (int i = 0; i < c.A; i++) {
                if (head && i != head - 1) continue;
                const Tensor<float>& P = k.blocks[l].attn.att[i][0].P;
                const Tensor<float>& M = k.masks[l];
                HeatPanel q;
                q.title = "layer l=" + std::to_string(l + 1) + ", head i=" + std::to_string(i + 1) + " (" + mask_name(c, l) +
                          (c.xlnet ? s == 0 ? ", content h)" : ", query g)" : ")");
                q.rows = q.cols = labels;
                for (int r = s * n; r < s * n + n; r++)
                    for (int j = 0; j < n; j++) {
                        q.values.push_back(P(r, j));
                        q.masked.push_back(M(r, j) == -std::numeric_limits<float>::infinity());
                    }
                panels.push_back(std::move(q));
            }
    }
    return panels;
}

// ---- explain: one forward and backward pass, formula box by formula box ---------------------------
// explain computes no layer itself: its boxes are written as model_loss's one forward and backward
// report their stages through a Trace (ExplainRun), so each layer's values and gradients are shown
// as the model's own walk computes them.
// The size of one factor of a shape symbol ("n", "H", "AD", ...) in this model.
static int symbol_size(const std::string& s, const Config& c, int n) {
    const std::map<std::string, int> sizes = {{"n", n}, {"H", c.H}, {"D", c.D}, {"F", c.F}, {"V", c.V},
                                              {"AD", c.A * c.D}, {"1", 1}};
    const auto it = sizes.find(s);
    if (it == sizes.end()) throw Error("explain: unknown shape symbol '" + s + "'");
    return it->second;
}

// The rows (or columns) of `count` that a folded heat map keeps: all up to fold, else the first
// and the last fold/2.
static std::vector<int> kept_indices(int count, int fold) {
    std::vector<int> k;
    for (int i = 0; i < count; i++)
        if (count <= fold || i < fold / 2 || i >= count - fold / 2) k.push_back(i);
    return k;
}

template <typename T>
struct ExplainWalk {
    const Config& c;
    int n, values;
    std::vector<ExplainStep> steps;
    const ExplainDetail* detail = nullptr;
    bool mute = false;      // past a handout's stub: boxes without values
    bool backward = false;  // the walk is in the backward pass: the boxes from here on are its
    void step(int depth, const std::string& box, const std::string& formula, const std::string& function) {
        ExplainStep s;
        s.depth = depth, s.box = box, s.formula = formula, s.function = function;
        s.backward = backward;
        steps.push_back(s);
    }
    // A tensor with its symbol, checked against its real shape: the walk cannot print a shape that
    // is not the formula box's.
    ExplainTensor tensor(const std::string& name, const std::string& symbol, const std::vector<int>& shape,
                         const T* data, std::size_t size, std::size_t total, ExplainTensor::Scale scale) {
        std::vector<int> dims;
        std::stringstream ss(symbol);
        for (std::string f; ss >> f;)
            if (f != "x") dims.push_back(symbol_size(f, c, n));
        if (dims != shape) throw Error("explain: " + name + " is " + shape_str(shape) + " but its formula box says " + symbol);
        ExplainTensor t{name, symbol, shape_str(shape), {}, size > (std::size_t)values, {}, {}, {}, {}, scale};
        for (std::size_t k = 0; k < size && k < (std::size_t)values; k++) t.first.push_back((double)data[k]);
        if (detail) {
            const int R = shape.size() == 2 ? shape[0] : 1, C = shape.empty() ? 1 : shape.back();
            t.dims = shape, t.rows = kept_indices(R, detail->fold), t.cols = kept_indices(C, detail->fold);
            for (int i : t.rows)
                for (int j : t.cols) t.cells.push_back((double)data[(std::size_t)i * C + j]);
            (void)total;
        }
        return t;
    }
    void in(const std::string& name, const std::string& symbol, const Tensor<T>& t, ExplainTensor::Scale scale = ExplainTensor::Scale::values) {
        if (mute) return;
        steps.back().in.push_back(tensor(name, symbol, t.shape, t.ptr(), 0, t.size(), scale));
    }
    void out(const std::string& name, const std::string& symbol, const Tensor<T>& t, ExplainTensor::Scale scale = ExplainTensor::Scale::values) {
        if (mute) return;
        steps.back().out.push_back(tensor(name, symbol, t.shape, t.ptr(), t.size(), t.size(), scale));
    }
};

static Tensor<double> ids_tensor(const std::vector<int>& ids) {
    return Tensor<double>::vector(std::vector<double>(ids.begin(), ids.end()));
}
static std::string ffn_box(Activation a) {
    if (a == Activation::relu) return "FFN_ReLU(X) = max(0, X W_1 + b_1) W_2 + b_2";
    const char* gelu = a == Activation::gelu_sigmoid ? "GELU(X) = X (.) sigmoid(1.702 X)"
                       : a == Activation::gelu_tanh  ? "GELU(X) = 0.5 X (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3)))"
                                                     : "GELU(X) = 0.5 X (1 + erf(X / sqrt(2)))";
    return std::string("FFN_GELU(X) = GELU(X W_1 + b_1) W_2 + b_2, ") + gelu;
}

// MultiHeadSA and, inside it, each head's Attention and the Concat, read from its cache.
template <typename T>
static void explain_attention(ExplainWalk<T>& w, const std::string& box, const std::string& X, const Tensor<T>& Xin,
                              const Tensor<T>& Mask, const MultiHeadSACache<T>& k, const Tensor<T>& out) {
    w.step(0, box, "MultiHeadSA(X, Mask) = Concat(head_1, ..., head_A) W^O", "MultiHeadSA");
    w.in(X, "n x H", Xin);
    w.in("Mask", "n x n", Mask, ExplainTensor::Scale::mask);
    w.out("MultiHeadSA(" + X + ", Mask)", "n x H", out);
    for (std::size_t i = 0; i < k.head.size(); i++) {
        const std::string h = std::to_string(i + 1);
        w.step(1, "head i = " + h, "head_i = Attention(X W_i^Q, X W_i^K, X W_i^V, Mask) = Softmax(Mask (.) Q K^T / sqrt(D)) V",
               "Attention (apply_mask, Softmax)");
        w.in("Q = X W_" + h + "^Q", "n x D", k.Q[i]);
        w.in("K = X W_" + h + "^K", "n x D", k.K[i]);
        w.in("V = X W_" + h + "^V", "n x D", k.V[i]);
        w.out("P = Softmax(Mask (.) Q K^T / sqrt(D))", "n x n", k.att[i][0].P, ExplainTensor::Scale::attention);
        w.out("head_" + h, "n x D", k.head[i]);
    }
    w.step(1, "Concat", "Concat(head_1, ..., head_A)_{:, (k-1)D+1 : kD} = head_k", "Concat");
    w.out("Concat(head_1, ..., head_A)", "n x AD", k.concat);
}

template <typename T>
static void explain_ffn(ExplainWalk<T>& w, const std::string& box, const std::string& X, const Tensor<T>& Xin,
                        const FFNCache<T>& k, const Tensor<T>& out) {
    w.step(0, box, ffn_box(w.c.activation), std::string("FFN (") + activation_name(w.c.activation) + ")");
    w.in(X, "n x H", Xin);
    w.out("X W_1 + b_1", "n x F", k.Z);
    w.out(w.c.activation == Activation::relu ? "max(0, X W_1 + b_1)" : "GELU(X W_1 + b_1)", "n x F", k.A);
    w.out(w.c.activation == Activation::relu ? "FFN_ReLU(" + X + ")" : "FFN_GELU(" + X + ")", "n x H", out);
}

// ---- explain's gradient checks: each backward box against finite differences of its own forward --
// In double, on the run's values; the step and tolerance of the tests' checks (tests.cpp, m_diff).
template <typename T>
static Tensor<double> to_f64(const Tensor<T>& t) {
    if (t.shape.empty()) return {};
    Tensor<double> d = Tensor<double>::uninit(t.shape);
    for (std::size_t k = 0; k < t.size(); k++) d[k] = (double)t[k];
    return d;
}
static Tensor<double> zeros_like(const Tensor<double>& t) { return t.shape.empty() ? Tensor<double>() : Tensor<double>(t.shape); }
static Tensor<double> random_like(const std::vector<int>& shape, uint64_t seed) {
    Rng r(seed);
    Tensor<double> R(shape);
    for (std::size_t k = 0; k < R.size(); k++) R[k] = r.normal();
    return R;
}
static double contract(const Tensor<double>& R, const Tensor<double>& Y) {
    if (R.shape != Y.shape) throw Error("explain: a box's check contracts " + shape_str(R.shape) + " with " + shape_str(Y.shape));
    double s = 0;
    for (std::size_t k = 0; k < R.size(); k++) s += R[k] * Y[k];
    return s;
}
// How many entries of each gradient a box compares: all of a small one, up to 256, fewer for a
// costly forward (about 4e9 flops per box), at least its entry of largest |g|.
static int entries_per_gradient(double flops, std::size_t gradients) {
    return (int)std::max(1.0, std::min(256.0, 4e9 / (2 * flops * (double)std::max<std::size_t>(1, gradients))));
}
struct FdTarget {
    std::string name;
    Tensor<double>* x;    // the input or parameter, perturbed in place
    Tensor<double> ana;   // the backward's gradient of it
    std::string formula;  // its line of the backward, as the box's formula writes it
};
// A gradient's values as a heat map draws them: value(k) at each kept entry k (row-major) of a
// tensor of `shape`, the first and last fold/2 rows and columns beyond fold.
static ExplainTensor gradient_view(const std::string& name, const std::vector<int>& shape, int fold,
                                   const std::function<double(std::size_t)>& value) {
    ExplainTensor t;
    t.name = name, t.shape = shape_str(shape), t.dims = shape;
    const int R = shape.size() == 2 ? shape[0] : 1, C = shape.empty() ? 1 : shape.back();
    t.rows = kept_indices(R, fold), t.cols = kept_indices(C, fold);
    for (int i : t.rows)
        for (int j : t.cols) t.cells.push_back(value((std::size_t)i * C + j));
    return t;
}
// The entries of a gradient of N entries that a check compares: all of a small one; of a large one
// the entry of largest |g| and entries drawn at random.
std::set<std::size_t> compared_entries(const Tensor<double>& ana, int per, Rng& r) {
    const std::size_t N = ana.size();
    std::set<std::size_t> idx;
    if (N <= (std::size_t)per) {
        for (std::size_t j = 0; j < N; j++) idx.insert(j);
        return idx;
    }
    std::size_t arg = 0;
    for (std::size_t j = 0; j < N; j++)
        if (!(std::fabs(ana[j]) <= std::fabs(ana[arg]))) arg = j;
    idx.insert(arg);
    while ((int)idx.size() < per) idx.insert((std::size_t)r.below((int)N));
    return idx;
}
// One gradient against central differences (transformer.hpp): moved(j, d) is the scalar with entry j
// of what ana is the gradient of moved by d.
ExplainGradient fd_gradient(const std::function<double(std::size_t, double)>& moved, const std::string& name, const std::string& formula,
                            const std::vector<int>& shape, const Tensor<double>& ana, int per, Rng& r, double h, double tol, int fold) {
    ExplainGradient g;
    g.name = name, g.formula = formula, g.shape = shape;
    if (ana.shape != shape) {
        g.pass = false;
        g.problem = name + " is " + shape_str(ana.shape) + ", expected " + shape_str(shape);
        return g;
    }
    std::map<std::size_t, double> fd;
    for (std::size_t j : compared_entries(ana, per, r)) {
        const double num = (moved(j, h) - moved(j, -h)) / (2 * h);
        const double a = ana[j];
        double err = std::fabs(num - a) / std::max(1.0, std::fabs(a));
        if (std::isnan(err)) err = INFINITY;
        if (g.entries == 0 || err > g.err) g.err = err, g.num = num, g.ana = a, g.at = j;
        g.entries++;
        if (!(err <= tol)) g.pass = false;
        fd[j] = num;
        g.compared.push_back(j);
        g.nums.push_back(num);
        g.anas.push_back(a);
    }
    auto at = [&](std::size_t k) {
        const auto it = fd.find(k);
        return it == fd.end() ? NAN : it->second;
    };
    g.fd = gradient_view("finite difference", g.shape, fold, at);
    g.backward = gradient_view("backward", g.shape, fold, [&](std::size_t k) { return ana[k]; });
    g.diff = gradient_view("backward \u2212 finite difference", g.shape, fold, [&](std::size_t k) { return ana[k] - at(k); });
    if (ana.size() <= 65536) g.values.assign(ana.data.begin(), ana.data.end());  // for the relations; a large one is not kept
    return g;
}
// A box's gradient of one of its inputs or parameters, perturbed in place (x0 + d, then x0 again).
static ExplainGradient fd_target(const std::function<double()>& f, FdTarget& t, int per, Rng& r, double h, double tol, int fold) {
    auto moved = [&](std::size_t j, double d) {
        double& x = (*t.x)[j];
        const double x0 = x;
        x = x0 + d;
        const double v = f();
        x = x0;
        return v;
    };
    return fd_gradient(moved, t.name, t.formula, t.x->shape, t.ana, per, r, h, tol, fold);
}
// The box's check: each gradient in the backward's order; the box's worst entry over all of them;
// where the first failing gradient follows passing ones, a note that the mistake comes after those.
static ExplainCheck fd_check(const std::string& function, const std::function<double()>& f, std::vector<FdTarget> targets,
                             double flops, uint64_t seed, int fold) {
    ExplainCheck k;
    k.done = true, k.function = function;
    std::size_t live = 0;
    for (const FdTarget& t : targets) live += t.x->shape.empty() ? 0 : 1;
    const int per = entries_per_gradient(flops, live);
    Rng r(seed);
    for (FdTarget& t : targets) {
        if (t.x->shape.empty()) continue;
        k.gradients.push_back(fd_target(f, t, per, r, k.h, k.tol, fold));
        const ExplainGradient& g = k.gradients.back();
        k.entries += g.entries;
        if (g.pass) continue;
        if (k.pass || (k.problem.empty() && (!g.problem.empty() || g.err > k.err)))
            k.tensor = g.name, k.shape = g.shape, k.at = g.at, k.num = g.num, k.ana = g.ana, k.err = g.err, k.problem = g.problem;
        k.pass = false;
    }
    if (k.pass)  // the worst entry of a passing box
        for (const ExplainGradient& g : k.gradients)
            if (k.tensor.empty() || g.err > k.err) k.tensor = g.name, k.shape = g.shape, k.at = g.at, k.num = g.num, k.ana = g.ana, k.err = g.err;
    std::size_t first = 0;
    while (first < k.gradients.size() && k.gradients[first].pass) first++;
    if (first > 0 && first < k.gradients.size()) {
        std::string before;
        for (std::size_t a = 0; a < first; a++) before += (a ? (a + 1 == first ? " and " : ", ") : "") + k.gradients[a].name;
        const ExplainGradient& g = k.gradients[first];
        k.first_failing = before + (first == 1 ? " passes" : " pass") + "; " + g.name + " is the first gradient in the backward's order to fail (" +
                          g.formula + "): the mistake is in its line or in what it uses that " + (first == 1 ? "the one" : "those") + " before it " +
                          (first == 1 ? "does" : "do") + " not.";
    }
    return k;
}

template <typename T>
static ExplainCheck check_layernorm(const Tensor<T>& X, const Tensor<T>& gamma, const Tensor<T>& beta, double eps,
                                    const ExplainBackwards& bw, uint64_t seed, int fold) {
    Tensor<double> Xd = to_f64(X), g = to_f64(gamma), b = to_f64(beta);
    const Tensor<double> R = random_like(X.shape, seed);
    LayerNormCache<double> kc;
    LayerNorm(Xd, g, b, eps, &kc);
    Tensor<double> dg = zeros_like(g), db = zeros_like(b);
    Tensor<double> dX = bw.LayerNorm_backward ? bw.LayerNorm_backward(g, kc, R, dg, db) : LayerNorm_backward(g, kc, R, dg, db);
    return fd_check("LayerNorm_backward", [&] { return contract(R, LayerNorm(Xd, g, b, eps)); },
                    {{"dgamma", &g, dg, "dgamma = sum_i dY (.) Xhat"}, {"dbeta", &b, db, "dbeta = sum_i dY"},
                     {"dX", &Xd, dX, "dX = rstd (G - mean(G) - Xhat mean(G (.) Xhat)), G = dY (.) gamma"}},
                    10.0 * (double)X.size(), seed, fold);
}

template <typename T>
static ExplainCheck check_ffn(const Tensor<T>& X, const FFNParams<T>& p, Activation act, const ExplainBackwards& bw, uint64_t seed, int fold) {
    Tensor<double> Xd = to_f64(X);
    FFNParams<double> q{to_f64(p.W_1), to_f64(p.b_1), to_f64(p.W_2), to_f64(p.b_2)};
    const Tensor<double> R = random_like(X.shape, seed);
    FFNCache<double> kc;
    FFN(Xd, q, act, &kc);
    FFNParams<double> g{zeros_like(q.W_1), zeros_like(q.b_1), zeros_like(q.W_2), zeros_like(q.b_2)};
    Tensor<double> dX = bw.FFN_backward ? bw.FFN_backward(Xd, q, act, kc, R, g) : FFN_backward(Xd, q, act, kc, R, g);
    return fd_check("FFN_backward", [&] { return contract(R, FFN(Xd, q, act)); },
                    {{"dW_2", &q.W_2, g.W_2, "dW_2 = A^T dY"}, {"db_2", &q.b_2, g.b_2, "db_2 = colsum(dY)"},
                     {"dW_1", &q.W_1, g.W_1, "dW_1 = X^T dZ, dZ = dY W_2^T (.) act'(Z)"}, {"db_1", &q.b_1, g.b_1, "db_1 = colsum(dZ)"},
                     {"dX", &Xd, dX, "dX = dZ W_1^T"}},
                    4.0 * (double)X.size() * (double)p.W_1.shape.back(), seed, fold);
}

template <typename T>
static ExplainCheck check_mhsa(const Tensor<T>& X, const Tensor<T>& Mask, const MultiHeadSAParams<T>& p, const ExplainBackwards& bw,
                               uint64_t seed, int fold) {
    Tensor<double> Xd = to_f64(X);
    const Tensor<double> M = to_f64(Mask);
    MultiHeadSAParams<double> q, g;
    auto both = [&](const std::vector<Tensor<T>>& from, std::vector<Tensor<double>>& to, std::vector<Tensor<double>>& zero) {
        for (const Tensor<T>& t : from) to.push_back(to_f64(t)), zero.push_back(zeros_like(to.back()));
    };
    both(p.W_Q, q.W_Q, g.W_Q), both(p.W_K, q.W_K, g.W_K), both(p.W_V, q.W_V, g.W_V);
    both(p.b_Q, q.b_Q, g.b_Q), both(p.b_K, q.b_K, g.b_K), both(p.b_V, q.b_V, g.b_V);
    q.W_O = to_f64(p.W_O), g.W_O = zeros_like(q.W_O), q.b_O = to_f64(p.b_O), g.b_O = zeros_like(q.b_O);
    const Tensor<double> R = random_like(X.shape, seed);
    MultiHeadSACache<double> kc;
    MultiHeadSA(Xd, M, q, &kc);
    Tensor<double> dX = bw.MultiHeadSA_backward ? bw.MultiHeadSA_backward(Xd, q, kc, R, g) : MultiHeadSA_backward(Xd, q, kc, R, g);
    std::vector<FdTarget> t = {{"dW^O", &q.W_O, g.W_O, "dW^O = Concat^T dY"}, {"db^O", &q.b_O, g.b_O, "db^O = colsum(dY)"}};
    for (std::size_t i = 0; i < q.W_Q.size(); i++) {
        const std::string h = std::to_string(i + 1);
        t.push_back({"dW_" + h + "^V", &q.W_V[i], g.W_V[i], "dW_" + h + "^V = X^T dV_" + h + ", dV_" + h + " = P_" + h + "^T dhead_" + h});
        t.push_back({"dW_" + h + "^Q", &q.W_Q[i], g.W_Q[i], "dW_" + h + "^Q = X^T dQ_" + h + ", dQ_" + h + " = dS_" + h + " K_" + h + " / sqrt(D)"});
        t.push_back({"dW_" + h + "^K", &q.W_K[i], g.W_K[i], "dW_" + h + "^K = X^T dK_" + h + ", dK_" + h + " = dS_" + h + "^T Q_" + h + " / sqrt(D)"});
        if (i < q.b_Q.size()) {
            t.push_back({"db_" + h + "^V", &q.b_V[i], g.b_V[i], "db_" + h + "^V = colsum(dV_" + h + ")"});
            t.push_back({"db_" + h + "^Q", &q.b_Q[i], g.b_Q[i], "db_" + h + "^Q = colsum(dQ_" + h + ")"});
            t.push_back({"db_" + h + "^K", &q.b_K[i], g.b_K[i], "db_" + h + "^K = colsum(dK_" + h + ")"});
        }
    }
    t.push_back({"dX", &Xd, dX, "dX = sum_i (dQ_i W_i^Q^T + dK_i W_i^K^T + dV_i W_i^V^T)"});
    const double AD = (double)p.W_O.shape[0], n = (double)X.rows();
    return fd_check("MultiHeadSA_backward", [&] { return contract(R, MultiHeadSA(Xd, M, q)); }, t,
                    8.0 * (double)X.size() * AD + 4.0 * n * n * AD, seed, fold);
}

// One head's Softmax alone: P = Softmax(S) on its masked scores S (the masked entries -inf stay so).
template <typename T>
static ExplainCheck check_softmax(const Tensor<T>& S, uint64_t seed, int fold) {
    Tensor<double> Sd = to_f64(S);
    const Tensor<double> R = random_like(S.shape, seed);
    const Tensor<double> dS = Softmax_backward(Softmax(Sd), R);
    return fd_check("Softmax_backward", [&] { return contract(R, Softmax(Sd)); }, {{"dS", &Sd, dS, "dS = P (.) (dP - rowsum(dP (.) P))"}},
                    10.0 * (double)S.size(), seed, fold);
}

// One head's Attention alone: head_i = Attention(Q, K, V, Mask) on the head's Q, K, V.
template <typename T>
static ExplainCheck check_attention(const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V, const Tensor<T>& Mask, uint64_t seed, int fold) {
    Tensor<double> Qd = to_f64(Q), Kd = to_f64(K), Vd = to_f64(V);
    const Tensor<double> M = to_f64(Mask);
    const Tensor<double> R = random_like(Q.shape, seed);
    AttentionCache<double> kc;
    Attention(Qd, Kd, Vd, M, &kc);
    Tensor<double> dQ, dK, dV;
    Attention_backward(Qd, Kd, Vd, kc, R, dQ, dK, dV);
    const double n = (double)Q.rows(), D = (double)Q.cols();
    return fd_check("Attention_backward", [&] { return contract(R, Attention(Qd, Kd, Vd, M)); },
                    {{"dV", &Vd, dV, "dV = P^T dO"}, {"dQ", &Qd, dQ, "dQ = dS K / sqrt(D), dS = Softmax_backward(dP), dP = dO V^T"},
                     {"dK", &Kd, dK, "dK = dS^T Q / sqrt(D)"}},
                    6.0 * n * n * D, seed, fold);
}

template <typename T>
static ExplainCheck check_loss(const Tensor<T>& Z, const std::vector<int>& targets, uint64_t seed, int fold) {
    Tensor<double> Zd = to_f64(Z), dZ;
    CrossEntropy_logits(Zd, targets, &dZ);
    return fd_check("CrossEntropy_logits", [&] { return CrossEntropy_logits(Zd, targets); },
                    {{"dZ", &Zd, dZ, "dZ = (Softmax(Z) - OneHot(targets)) / count"}}, 20.0 * (double)Z.size(), seed, fold);
}

// Z = X W_e^T: dW_e += dZ^T X (matmul_tn_acc), dX = dZ W_e (matmul), as model_backward writes it.
template <typename T>
static ExplainCheck check_output(const Tensor<T>& X, const Tensor<T>& W_e, uint64_t seed, int fold) {
    Tensor<double> Xd = to_f64(X), W = to_f64(W_e);
    const Tensor<double> R = random_like({X.rows(), W_e.rows()}, seed);
    Tensor<double> gW = zeros_like(W);
    matmul_tn_acc(R, Xd, gW);
    Tensor<double> dX = matmul(R, W);
    return fd_check("matmul_tn_acc, matmul", [&] { return contract(R, matmul_nt(Xd, W)); },
                    {{"dW_e", &W, gW, "dW_e += dZ^T X^(L)"}, {"dX^(L)", &Xd, dX, "dX^(L) = dZ W_e"}},
                    2.0 * (double)X.size() * (double)W_e.rows(), seed, fold);
}

template <typename T>
static ExplainCheck check_mlm_head(const Config& c, const Params<T>& p, const Tensor<T>& X, uint64_t seed, int fold) {
    Tensor<double> Xd = to_f64(X);
    Params<double> q, g;
    q.W_t = to_f64(p.W_t), q.b_t = to_f64(p.b_t), q.gamma_t = to_f64(p.gamma_t), q.beta_t = to_f64(p.beta_t);
    q.W_e = to_f64(p.W_e), q.b_z = to_f64(p.b_z);
    g.W_t = zeros_like(q.W_t), g.b_t = zeros_like(q.b_t), g.gamma_t = zeros_like(q.gamma_t), g.beta_t = zeros_like(q.beta_t);
    g.W_e = zeros_like(q.W_e), g.b_z = zeros_like(q.b_z);
    const Tensor<double> R = random_like({X.rows(), p.W_e.rows()}, seed);
    MLMHeadCache<double> kc;
    MLMHead(c, q, Xd, &kc);
    Tensor<double> dX = MLMHead_backward(c, q, kc, R, g);
    return fd_check("MLMHead_backward", [&] { return contract(R, MLMHead(c, q, Xd)); },
                    {{"db_z", &q.b_z, g.b_z, "db_z = colsum(dZ)"}, {"dW_e", &q.W_e, g.W_e, "dW_e += dZ^T X_t"},
                     {"dgamma_t", &q.gamma_t, g.gamma_t, "dgamma_t = sum_i dX_t (.) Xhat, dX_t = dZ W_e"},
                     {"dbeta_t", &q.beta_t, g.beta_t, "dbeta_t = sum_i dX_t"},
                     {"dW_t", &q.W_t, g.W_t, "dW_t = X^(L)^T dU, dU = LayerNorm_backward(dX_t) (.) GELU'(U)"},
                     {"db_t", &q.b_t, g.b_t, "db_t = colsum(dU)"}, {"dX^(L)", &Xd, dX, "dX^(L) = dU W_t^T"}},
                    2.0 * (double)X.size() * ((double)p.W_e.rows() + (double)c.H), seed, fold);
}

// embed_forward's gradients: the token and position rows (segments = false) or BERT's segment rows.
template <typename T>
static ExplainCheck check_embedding(const Config& c, const Params<T>& p, const Batch& batch, bool segments, uint64_t seed, int fold) {
    Params<double> q, g;
    q.W_e = to_f64(p.W_e), q.W_p = to_f64(p.W_p), q.w_pad = to_f64(p.w_pad), q.w_A = to_f64(p.w_A), q.w_B = to_f64(p.w_B);
    g.W_e = zeros_like(q.W_e), g.W_p = zeros_like(q.W_p), g.w_pad = zeros_like(q.w_pad), g.w_A = zeros_like(q.w_A), g.w_B = zeros_like(q.w_B);
    const Tensor<double> R = random_like({batch.n, c.H}, seed);
    embed_backward(c, batch, R, g);
    std::vector<FdTarget> t;
    if (!segments)
        t = {{"dW_e", &q.W_e, g.W_e, "dW_e += OneHot(x)^T dX^(0)"}, {"dW_p", &q.W_p, g.W_p, "dW_p[1..n] += dX^(0)"},
             {"dw_pad", &q.w_pad, g.w_pad, "dw_pad += the rows of dX^(0) at a <pad>"}};
    else
        t = {{"dw_A", &q.w_A, g.w_A, "dw_A = Stack_backward(diag(1 - t) dX^(0))"}, {"dw_B", &q.w_B, g.w_B, "dw_B = Stack_backward(diag(t) dX^(0))"}};
    return fd_check("embed_backward", [&] { return contract(R, embed_forward(c, q, batch)); }, t, 4.0 * batch.n * c.H, seed, fold);
}

// ---- explain's reading of a failing check: a relation between the backward and the finite difference --
// The sizes of the model a wrong constant factor is likely made of, by name: "D", "sqrt(D)", "1/n", ...
static std::vector<std::pair<std::string, double>> likely_factors(const Config& c, int n) {
    std::vector<std::pair<std::string, double>> f;
    for (const auto& s : std::vector<std::pair<std::string, double>>{{"D", c.D}, {"n", n}, {"H", c.H}, {"A", c.A}, {"n - 1", n - 1}}) {
        if (s.second <= 1) continue;
        f.push_back(s);
        f.push_back({"sqrt(" + s.first + ")", std::sqrt(s.second)});
        f.push_back({"1/" + (s.first == "n - 1" ? "(n - 1)" : s.first), 1 / s.second});
        f.push_back({"1/sqrt(" + s.first + ")", 1 / std::sqrt(s.second)});
    }
    f.push_back({"2", 2.0});
    f.push_back({"1/2", 0.5});
    return f;
}
// 1-based row or column numbers as a list: "2, 3 and 5".
static std::string index_list(const std::vector<int>& k) {
    std::string o;
    for (std::size_t a = 0; a < k.size(); a++) o += (a ? (a + 1 == k.size() ? " and " : ", ") : "") + std::to_string(k[a] + 1);
    return o;
}
// backward = c x finite difference at every compared entry (c != 1): "a sign?", "a factor of D?".
static std::string constant_ratio(const ExplainGradient& g, const std::vector<std::pair<std::string, double>>& factors) {
    double nn = 0, an = 0, amax = 0;
    for (std::size_t k = 0; k < g.compared.size(); k++) {
        nn += g.nums[k] * g.nums[k];
        an += g.anas[k] * g.nums[k];
        amax = std::max(amax, std::fabs(g.anas[k]));
    }
    if (nn == 0 || g.compared.size() < 2) return "";
    const double ratio = an / nn;
    for (std::size_t k = 0; k < g.compared.size(); k++)
        if (!(std::fabs(g.anas[k] - ratio * g.nums[k]) <= 1e-5 * amax)) return "";
    char b[80];
    std::snprintf(b, sizeof b, "%.4g", ratio);
    const std::string head = "backward = " + std::string(b) + " \u00d7 finite difference at every entry compared: ";
    if (std::fabs(ratio + 1) < 1e-4) return head + "a sign?";
    std::string names;
    for (const auto& f : factors)
        if (std::fabs(ratio / f.second - 1) < 1e-4 || std::fabs(-ratio / f.second - 1) < 1e-4)
            names += (names.empty() ? "" : " or ") + std::string(ratio < 0 ? "-" : "") + f.first;
    return head + (names.empty() ? "a constant factor?" : "a factor of " + names + "?");
}
// A square gradient that is the finite difference transposed, every entry compared.
static std::string transposed(const ExplainGradient& g) {
    if (g.shape.size() != 2 || g.shape[0] != g.shape[1] || g.compared.size() != (std::size_t)g.shape[0] * g.shape[1]) return "";
    const std::size_t C = (std::size_t)g.shape[1];
    double amax = 0;
    for (double a : g.anas) amax = std::max(amax, std::fabs(a));
    for (std::size_t k = 0; k < g.compared.size(); k++) {
        const std::size_t t = (g.compared[k] % C) * C + g.compared[k] / C;  // compared holds every entry, in order
        if (!(std::fabs(g.anas[k] - g.nums[t]) <= 1e-5 * std::max(1.0, amax))) return "";
    }
    return "backward = the finite difference transposed: a transpose?";
}
// The rows (columns) where the two differ, when that is some of them only, and those that should be 0.
static std::string where_they_differ(const ExplainGradient& g, double tol) {
    if (g.shape.size() != 2 || g.compared.size() != (std::size_t)g.shape[0] * g.shape[1]) return "";
    const int R = g.shape[0], C = g.shape[1];
    for (int axis = 0; axis < 2; axis++) {
        const int count = axis == 0 ? R : C;
        std::vector<int> bad, zero;  // differing lines; differing lines whose finite difference is 0
        for (int a = 0; a < count; a++) {
            bool differs = false, fd_zero = true;
            for (int b = 0; b < (axis == 0 ? C : R); b++) {
                const std::size_t k = axis == 0 ? (std::size_t)a * C + b : (std::size_t)b * C + a;
                differs |= !(std::fabs(g.nums[k] - g.anas[k]) <= tol * std::max(1.0, std::fabs(g.anas[k])));
                fd_zero &= std::fabs(g.nums[k]) <= tol;
            }
            if (differs) bad.push_back(a);
            if (differs && fd_zero) zero.push_back(a);
        }
        const std::string what = axis == 0 ? (bad.size() == 1 ? "row " : "rows ") : (bad.size() == 1 ? "column " : "columns ");
        if (!zero.empty() && zero.size() == bad.size())
            return what + index_list(zero) + " should be 0 (the finite difference is 0 there) and the backward's " +
                   (zero.size() == 1 ? "is" : "are") + " not";
        if (!bad.empty() && bad.size() * 2 <= (std::size_t)count)
            return "only " + what + index_list(bad) + (bad.size() == 1 ? " differs" : " differ") + "; the others agree";
    }
    return "";
}
// A gradient a failing one is compared with: its name, where it is ("of this box", "of the walk") and its every value.
struct RelatedGradient {
    std::string name, where;
    std::vector<int> shape;
    const double* values;  // every entry, row-major; null: not kept
    std::size_t size;
};
// A gradient's values beside another's: y = ratio x at every entry (least squares, then each entry
// within 1e-5 of the largest |y|), x not all 0.
static bool proportional(const std::vector<double>& y, const std::vector<double>& x, double& ratio) {
    double xx = 0, xy = 0, ymax = 0, xmax = 0;
    for (std::size_t k = 0; k < x.size(); k++) {
        xx += x[k] * x[k];
        xy += x[k] * y[k];
        ymax = std::max(ymax, std::fabs(y[k]));
        xmax = std::max(xmax, std::fabs(x[k]));
    }
    if (xx == 0 || ymax == 0 || x.size() < 2 || !std::isfinite(xx)) return false;
    ratio = xy / xx;
    for (std::size_t k = 0; k < x.size(); k++)
        if (!(std::fabs(y[k] - ratio * x[k]) <= 1e-5 * std::max(ymax, std::fabs(ratio) * xmax))) return false;
    return true;
}
static std::string times(double ratio) {
    if (std::fabs(ratio - 1) < 1e-4) return "";
    if (std::fabs(ratio + 1) < 1e-4) return "\u2212";
    return num(ratio) + " \u00d7 ";
}
// The backward, or its difference from the finite difference, proportional to another gradient of
// the box or of the walk (others: names and every value): "computed as dQ is?", "the term dX'^(1) left out?".
static std::string like_another(const ExplainGradient& g, const std::vector<RelatedGradient>& others) {
    for (const RelatedGradient& o : others) {
        std::size_t N = 1;
        for (int d : g.shape) N *= (std::size_t)d;
        if (o.name == g.name.substr(0, g.name.find(' ')) || o.shape != g.shape || !o.values || o.size != N) continue;
        std::vector<double> x, d;
        for (std::size_t k = 0; k < g.compared.size(); k++) {
            x.push_back(o.values[g.compared[k]]);
            d.push_back(g.anas[k] - g.nums[k]);
        }
        double r = 0;
        if (proportional(g.anas, x, r))
            return "backward = " + times(r) + o.name + " (another gradient " + o.where + ") at every entry compared: computed " +
                   (times(r).empty() ? "as " : "like ") + o.name + " is?";
        if (proportional(d, x, r))
            return "backward \u2212 finite difference = " + times(r) + o.name + " at every entry compared: " +
                   (std::fabs(r + 1) < 1e-4 ? "the term " + o.name + " left out (a path dropped)?"
                    : std::fabs(r - 1) < 1e-4 ? "the term " + o.name + " added twice?" : "a wrong factor on the term " + o.name + "?");
    }
    return "";
}
// Entries with no path to the loss (the finite difference exactly 0) where the backward is not 0,
// or the backward exactly 0 where the finite difference is not, the others agreeing.
static std::string paths(const ExplainGradient& g, double tol) {
    std::vector<std::size_t> extra, missing;
    for (std::size_t k = 0; k < g.compared.size(); k++) {
        const bool agree = std::fabs(g.nums[k] - g.anas[k]) <= tol * std::max(1.0, std::fabs(g.anas[k]));
        if (agree) continue;
        if (g.nums[k] == 0) extra.push_back(g.compared[k]);
        else if (g.anas[k] == 0) missing.push_back(g.compared[k]);
        else return "";
    }
    const std::vector<std::size_t>& at = extra.empty() ? missing : extra;
    if (at.empty() || (!extra.empty() && !missing.empty())) return "";
    std::string list;
    const std::size_t C = g.shape.size() == 2 ? (std::size_t)g.shape[1] : 0;
    for (std::size_t a = 0; a < at.size() && a < 4; a++)
        list += (a ? ", " : "") + (C ? "(" + std::to_string(at[a] / C + 1) + ", " + std::to_string(at[a] % C + 1) + ")" : "(" + std::to_string(at[a] + 1) + ")");
    if (at.size() > 4) list += ", ...";
    const std::string count = std::to_string(at.size()) + (at.size() == 1 ? " entry" : " entries");
    if (!extra.empty())
        return "the backward is not 0 at " + count + " where the finite difference is 0, " + list +
               ": no path leads from there to the loss (a key the mask hides from its query, a position or token not in the input?); the others agree";
    return "the backward is 0 at " + count + " where the finite difference is not, " + list + ": a path left out?; the others agree";
}
// backward - finite difference the same along each row (a number per row) or each column.
static std::string constant_along(const ExplainGradient& g) {
    if (g.shape.size() != 2 || g.compared.size() != (std::size_t)g.shape[0] * g.shape[1] || g.shape[0] < 2 || g.shape[1] < 2) return "";
    const int R = g.shape[0], C = g.shape[1];
    double scale = 0;
    for (std::size_t k = 0; k < g.compared.size(); k++) scale = std::max({scale, std::fabs(g.anas[k]), std::fabs(g.nums[k])});
    auto d = [&](int i, int j) { return g.anas[(std::size_t)i * C + j] - g.nums[(std::size_t)i * C + j]; };  // compared holds every entry, in order
    auto same = [&](double a, double b) { return std::fabs(a - b) <= 1e-5 * scale; };
    bool rows = true, cols = true, all = true;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            rows &= same(d(i, j), d(i, 0));
            cols &= same(d(i, j), d(0, j));
            all &= same(d(i, j), d(0, 0));
        }
    if (all) return "backward \u2212 finite difference = " + num(d(0, 0)) + " at every entry: a constant term?";
    if (rows) return "backward \u2212 finite difference is one number per row, the same along it: a term per row left out (a row sum, as rowsum(dP (.) P) in Softmax_backward)?";
    if (cols) return "backward \u2212 finite difference is one number per column, the same down it: a term per column left out (a column sum, as colsum(dY) or mean(G))?";
    return "";
}
// What explains a failing gradient, from its compared entries: a missing gradient, a constant
// factor or a sign, another gradient it equals (or whose term it lacks), a transpose, entries
// without a path to the loss, a term per row or column, the rows or columns where it differs;
// "" when none fits. Each is stated as a hypothesis.
static std::string explain_relation(const ExplainGradient& g, const std::vector<RelatedGradient>& others,
                                    const std::vector<std::pair<std::string, double>>& factors, double tol) {
    if (g.pass || !g.problem.empty() || g.compared.empty()) return "";
    double amax = 0, nmax = 0;
    for (std::size_t k = 0; k < g.compared.size(); k++) {
        amax = std::max(amax, std::fabs(g.anas[k]));
        nmax = std::max(nmax, std::fabs(g.nums[k]));
    }
    if (!std::isfinite(amax)) return "the backward is not finite";
    if (amax == 0) return "the backward is 0 at every entry compared and the finite difference is not: the gradient is never written?";
    if (nmax <= tol) return "the finite difference is 0 at every entry compared (this input does not reach the output) and the backward is not";
    for (const std::string& r : {constant_ratio(g, factors), like_another(g, others), transposed(g), paths(g, tol), constant_along(g), where_they_differ(g, tol)})
        if (!r.empty()) return r;
    return "";
}
// The gradients a box's relations compare with: its own, and those the walk reported before (as given).
static std::vector<RelatedGradient> related(const std::vector<ExplainGradient>& box, const std::vector<RelatedGradient>& walk) {
    std::vector<RelatedGradient> o;
    for (const ExplainGradient& g : box) o.push_back({g.name.substr(0, g.name.find(' ')), "of this box", g.shape, g.values.empty() ? nullptr : g.values.data(), g.values.size()});
    for (const RelatedGradient& r : walk) o.push_back(r);
    return o;
}

// The boxes a failing box calls whose own checks fail: MultiHeadSA_backward calls each head's
// Attention_backward (the depth-1 boxes after it), Attention_backward calls the head's
// Softmax_backward (the box before it). ExplainCheck::callee names the first.
static void link_callees(std::vector<ExplainStep>& steps) {
    auto fails = [&](std::size_t j) { return steps[j].check.done && !steps[j].check.pass && steps[j].check.missing.empty(); };
    for (std::size_t k = 0; k < steps.size(); k++) {
        ExplainCheck& ck = steps[k].check;
        if (!fails(k)) continue;
        if (ck.function == "MultiHeadSA_backward")
            for (std::size_t j = k + 1; j < steps.size() && steps[j].depth == 1 && ck.callee < 0; j++)
                if (steps[j].check.function == "Attention_backward" && fails(j)) ck.callee = (int)j;
        if (ck.function == "Attention_backward" && k > 0 && steps[k - 1].check.function == "Softmax_backward" && fails(k - 1))
            ck.callee = (int)k - 1;
    }
}

// ---- The walk's stages: each gradient the backward reports, against finite differences of its line ----
// explain and make check's stage walk observe model_loss through a Trace (transformer.hpp): a
// StageRecord keeps every stage's value in the forward's order and the gradient the backward
// reports for it. A StageNudge then checks one stage's gradient on its own line of the backward: it
// moves one entry of that stage as the forward passes it and, at every later stage, adds <reported
// gradient, value - recorded value> and puts the recorded value back, so that nothing beyond a
// later stage moves. Its central difference is the chain rule through the stages the moved one
// feeds directly, with the gradients the backward reported for them (the loss's own gradient is 1):
// what that stage's line must compute. A wrong line fails there alone; the lines below it, given
// the wrong gradient, still pass.
template <typename T>
struct StageRecord : Trace {
    using Trace::backward;
    using Trace::forward;
    std::vector<StageSeen<T>> seen;           // the forward's order
    std::vector<std::size_t> backward_order;  // indices into seen, as the backward reported them
    Trace* plant = nullptr;                   // sees each gradient first and may change it (ExplainDetail::plant)
    int find(Stage s, int l) const {
        for (std::size_t k = seen.size(); k-- > 0;)
            if (seen[k].s == s && seen[k].l == l) return (int)k;
        return -1;
    }
    void forward(Stage s, int l, Tensor<T>& value) override { seen.push_back({s, l, value, {}}); }
    void backward(Stage s, int l, Tensor<T>& gradient) override {
        if (plant) plant->backward(s, l, gradient);
        const int k = find(s, l);
        if (k < 0) return;  // a stage the forward did not report: the order check names it
        seen[(std::size_t)k].gradient = gradient;
        backward_order.push_back((std::size_t)k);
    }
};
struct StageNudge : Trace {
    using Trace::forward;
    const StageRecord<double>& rec;
    int target = -1;     // the stage moved (an index into rec.seen); -1: a parameter is moved instead
    std::size_t j = 0;   // its entry moved by d
    double d = 0;
    bool past = false;   // the walk has passed the moved stage (a parameter: from the start)
    double sum = 0;      // over the later stages: <reported gradient, value - recorded value>
    std::size_t at = 0;  // the next stage of rec.seen, as the forward reports them in the same order
    explicit StageNudge(const StageRecord<double>& r) : rec(r) {}
    void forward(Stage s, int l, Tensor<double>& value) override {
        const std::size_t k = at++;
        if (k >= rec.seen.size() || rec.seen[k].s != s || rec.seen[k].l != l) throw Error("explain: the walk's stages came in another order than recorded");
        if ((int)k == target) {
            value[j] += d;
            past = true;
            return;
        }
        const StageSeen<double>& st = rec.seen[k];
        if (!past) return;
        if (s == Stage::loss) {
            sum += value[0] - st.value[0];
            return;
        }
        if (st.gradient.empty() || st.gradient.shape != value.shape) return;  // no gradient of its own (a mask): it passes unchanged
        for (std::size_t i = 0; i < value.size(); i++) sum += st.gradient[i] * (value[i] - st.value[i]);
        value = st.value;
    }
};

std::string stage_gradient_name(const Config& c, Stage s, int l) {
    const std::string L = std::to_string(l), P = std::to_string(l - 1);
    const bool pre = is_pre_ln(c.variant);
    switch (s) {
        case Stage::embedding: return "dE";
        case Stage::X: return "dX^(" + L + ")";
        case Stage::mask: return "dMask^(" + L + ")";
        case Stage::ln_1: return "dLayerNorm(X^(" + P + "))";
        case Stage::attention: return pre ? "dMultiHeadSA(LayerNorm(X^(" + P + ")))" : "dMultiHeadSA(X^(" + P + "))";
        case Stage::attn_sum: return "dS";
        case Stage::X_mid: return "dX'^(" + L + ")";
        case Stage::ln_2: return "dLayerNorm(X'^(" + L + "))";
        case Stage::ffn: return pre ? "dFFN(LayerNorm(X'^(" + L + ")))" : "dFFN(X'^(" + L + "))";
        case Stage::ffn_sum: return "dU";
        case Stage::final_ln: return "dX_f";
        case Stage::logits: return "dZ";
        case Stage::loss: return "dloss";
    }
    return "?";
}

StageSource stage_source(const Config& c, Stage s, int l) {
    const bool pre = is_pre_ln(c.variant);
    const std::string block = pre ? "pre_ln_block_backward" : "post_ln_block_backward";
    const std::string head = c.mlm_head ? "MLMHead_backward" : "";
    const std::string L = std::to_string(l), P = std::to_string(l - 1);
    const std::string dX = "dX^(" + L + ")", dXq = "dX'^(" + L + ")";
    const std::string dA = stage_gradient_name(c, Stage::attention, l), dF = stage_gradient_name(c, Stage::ffn, l);
    switch (s) {
        case Stage::logits: return {"model_loss", "CrossEntropy_logits", "dZ = (Softmax(Z) - OneHot(targets)) / count"};
        case Stage::final_ln: return {"model_backward", head, c.mlm_head ? "dX_f = MLMHead_backward(dZ)" : "dX_f = dZ W_e"};
        case Stage::embedding: return {"model_backward", "LayerNorm_backward", "dE = LayerNorm_backward(dX^(0) (.) M)"};
        case Stage::X:
            if (l == c.L && pre) return {"blocks_backward", "LayerNorm_backward", dX + " = LayerNorm_backward(dX_f)"};
            if (l == c.L) return {"model_backward", head, c.mlm_head ? dX + " = MLMHead_backward(dZ)" : dX + " = dZ W_e"};
            if (pre) return {block, "LayerNorm_backward", "dX^(" + L + ") = dX'^(" + std::to_string(l + 1) + ") + LayerNorm_backward(dLayerNorm(X^(" + L + ")))"};
            return {block, "MultiHeadSA_backward", "dX^(" + L + ") = MultiHeadSA_backward(" + stage_gradient_name(c, Stage::attention, l + 1) + ") + dS"};
        case Stage::ffn_sum: return {block, "LayerNorm_backward", "dU = LayerNorm_backward(" + dX + ")"};
        case Stage::ffn: return {block, "", dF + " = " + (pre ? dX : std::string("dU")) + " (.) M (residual dropout)"};
        case Stage::X_mid:
            if (pre) return {block, "LayerNorm_backward", dXq + " = " + dX + " + LayerNorm_backward(dLayerNorm(X'^(" + L + ")))"};
            return {block, "FFN_backward", dXq + " = FFN_backward(" + dF + ") + dU"};
        case Stage::ln_2: return {block, "FFN_backward", "dLayerNorm(X'^(" + L + ")) = FFN_backward(" + dF + ")"};
        case Stage::attn_sum: return {block, "LayerNorm_backward", "dS = LayerNorm_backward(" + dXq + ")"};
        case Stage::attention: return {block, "", dA + " = " + (pre ? dXq : std::string("dS")) + " (.) M (residual dropout)"};
        case Stage::ln_1: return {block, "MultiHeadSA_backward", "dLayerNorm(X^(" + P + ")) = MultiHeadSA_backward(" + dA + ")"};
        case Stage::mask:
        case Stage::loss: break;
    }
    return {"model_backward", "", ""};
}

// Stage k's gradient (as rec holds it) against central differences of its line (StageNudge):
// loss(nullptr, &nudge) runs the walk again.
ExplainGradient stage_check(const WalkLoss& loss, const StageRecord<double>& rec, std::size_t k, const std::string& name,
                            const std::string& formula, int per, Rng& r, double h, double tol, int fold) {
    const StageSeen<double>& st = rec.seen[k];
    auto moved = [&](std::size_t j, double d) {
        StageNudge nudge(rec);
        nudge.target = (int)k, nudge.j = j, nudge.d = d;
        loss(nullptr, &nudge);
        return nudge.sum;
    };
    ExplainGradient g = fd_gradient(moved, name, formula, st.value.shape, st.gradient, per, r, h, tol, fold);
    g.model = true;
    return g;
}
// A parameter's gradient ana (of the whole walk) against central differences of the stages it
// feeds directly, with their reported gradients (StageNudge), x moved in place.
ExplainGradient parameter_check(const WalkLoss& loss, const StageRecord<double>& rec, Tensor<double>& x, const Tensor<double>& ana,
                                const std::string& name, const std::string& formula, int per, Rng& r, double h, double tol, int fold) {
    auto moved = [&](std::size_t j, double d) {
        const double x0 = x[j];
        x[j] = x0 + d;
        StageNudge nudge(rec);
        nudge.past = true;
        loss(nullptr, &nudge);
        x[j] = x0;
        return nudge.sum;
    };
    ExplainGradient g = fd_gradient(moved, name, formula, x.shape, ana, per, r, h, tol, fold);
    g.model = true;
    return g;
}

// The forward's flops for one sequence of n (the matrix products and the attention), for the
// checks' budget of whole-walk finite differences.
static double walk_flops(const Config& c, int rows, int n) {
    const double per_layer = 2.0 * rows * (4.0 * c.H * c.A * c.D + 2.0 * c.H * c.F) + 4.0 * rows * n * c.A * c.D;
    return c.L * per_layer + 2.0 * rows * c.H * c.V + 1.0;
}

// A parameter's name (named_tensors) as the formulas write it: "layers.0.attn.W_Q.1" -> "W_2^Q",
// "layers.1.ln_2.gamma" -> "gamma (ln_2)", "ln_f.beta" -> "beta (ln_f)".
static std::string parameter_symbol(const std::string& name) {
    std::string s = name;
    if (s.rfind("layers.", 0) == 0) s = s.substr(s.find('.', 7) + 1);
    for (const char* m : {"Q", "K", "V"}) {
        const std::string w = std::string("attn.W_") + m + ".", b = std::string("attn.b_") + m + ".";
        if (s.rfind(w, 0) == 0) return "W_" + std::to_string(std::atoi(s.c_str() + w.size()) + 1) + "^" + m;
        if (s.rfind(b, 0) == 0) return "b_" + std::to_string(std::atoi(s.c_str() + b.size()) + 1) + "^" + m;
    }
    if (s == "attn.W_O") return "W^O";
    if (s == "attn.b_O") return "b^O";
    if (s.rfind("ffn.", 0) == 0) return s.substr(4);
    const std::size_t dot = s.rfind('.');
    if (dot != std::string::npos && (s.substr(dot + 1) == "gamma" || s.substr(dot + 1) == "beta")) return s.substr(dot + 1) + " (" + s.substr(0, dot) + ")";
    return s;
}

// The formulas' section of a function that composes the walk, for make check's lines.
static std::string composer_section(const Config& c, const std::string& f) {
    if (f == "post_ln_block_backward") return c.variant == Variant::gpt ? "§18" : "§18, §21";
    if (f == "pre_ln_block_backward" || f == "blocks_backward") return "§19";
    if (f == "embed_backward") return std::string("§18") + (has_segments(c.variant) ? ", §21" : "") + (c.pad_id >= 0 ? ", §22" : "");
    if (f == "MLMHead_backward") return "§23";
    return "§17";
}

// Entry k (row-major) of a tensor of shape, counted from 1: "(3, 2)" or "(5)".
static std::string entry_at(const std::vector<int>& shape, std::size_t k) {
    if (shape.size() != 2) return "(" + std::to_string(k + 1) + ")";
    const std::size_t C = (std::size_t)shape[1];
    return "(" + std::to_string(k / C + 1) + ", " + std::to_string(k % C + 1) + ")";
}

// The layer a stage's gradient belongs to in make check's lines: the one whose backward computes it
// (X^(l-1) is layer l's output, going down); 0 for the head (dZ, dX_f, dX^(L)).
static int walk_layer(const Config& c, Stage s, int l) {
    if (s == Stage::logits || s == Stage::final_ln || (s == Stage::X && l == c.L)) return 0;
    return s == Stage::X ? l + 1 : l;
}
static std::string of_layer(const Config& c, int l) { return l >= 1 && l <= c.L ? " of layer " + std::to_string(l) : std::string(); }

// The backward must report the forward's stages in reverse (the masks and the loss have no
// gradient; a stage it does not report, as a backward written without its trace_backward lines, is
// passed over): "" when it does, else make check's line naming the function that does not.
static std::string walk_order(const Config& c, const StageRecord<double>& rec) {
    std::vector<std::size_t> expected;
    for (std::size_t k = rec.seen.size(); k-- > 0;)
        if (rec.seen[k].s != Stage::mask && rec.seen[k].s != Stage::loss) expected.push_back(k);
    std::vector<bool> reported(rec.seen.size(), false);
    for (std::size_t k : rec.backward_order) reported[k] = true;
    std::size_t next = 0;
    for (std::size_t got_k : rec.backward_order) {
        std::size_t k = next;
        while (k < expected.size() && expected[k] != got_k && !reported[expected[k]]) k++;  // passed over: never reported
        if (k < expected.size() && expected[k] == got_k) {
            next = k + 1;
            continue;
        }
        const StageSeen<double>& got = rec.seen[got_k];
        const StageSeen<double>& want = rec.seen[expected[std::min(next, expected.size() - 1)]];
        const StageSource src = stage_source(c, want.s, want.l);
        const std::string wanted = stage_gradient_name(c, want.s, want.l) + of_layer(c, walk_layer(c, want.s, want.l));
        const std::string arrived = stage_gradient_name(c, got.s, got.l) + of_layer(c, walk_layer(c, got.s, got.l));
        if (got.l != want.l)
            return "first wrong: blocks_backward (§18, §19): the layers' gradients arrive out of order: " + arrived + " comes where " + wanted +
                   " was due (blocks_backward walks from layer L down to 1, each block taking the gradient of the one above)";
        return "first wrong: " + src.composer + of_layer(c, walk_layer(c, want.s, want.l)) + " (" + composer_section(c, src.composer) + "): " +
               arrived + " comes where " + wanted + " was due (" + src.line + ")";
    }
    return "";
}

// Each stage's gradient from the loss down against the loss's finite differences: "right" lines,
// a line per layer, up to the first wrong one; true when every stage is right.
static bool walk_stages(const Config& c, const Batch& b, const WalkLoss& loss, const StageRecord<double>& rec, Rng& r,
                        std::vector<std::string>& out) {
    const double h = 1e-5, tol = 1e-6;
    const int per = std::max(1, entries_per_gradient(walk_flops(c, b.B * b.n, b.n), 1));
    std::vector<RelatedGradient> before;  // the gradients found right, for the relations
    std::string right;
    int right_layer = -1;
    for (std::size_t k : rec.backward_order) {
        const StageSeen<double>& st = rec.seen[k];
        const StageSource src = stage_source(c, st.s, st.l);
        const std::string name = stage_gradient_name(c, st.s, st.l);
        const int layer = walk_layer(c, st.s, st.l);
        const ExplainGradient eg = stage_check(loss, rec, k, name, src.line, per, r, h, tol, 8);
        if (layer != right_layer && !right.empty()) out.push_back("  right  " + right);
        if (layer != right_layer) right = layer ? "layer " + std::to_string(layer) + ": " : "";
        if (eg.pass) {
            right += (layer != right_layer || right.back() == ' ' ? "" : ", ") + name;
            right_layer = layer;
            before.push_back({name, "of the walk", st.gradient.shape, st.gradient.ptr(), st.gradient.size()});
            continue;
        }
        if (layer == right_layer && right.back() != ' ') out.push_back("  right  " + right);
        const std::vector<int>& shape = st.value.shape;
        out.push_back("first wrong: " + src.composer + of_layer(c, layer) + " (" + composer_section(c, src.composer) + "), its " + src.line +
                      (src.module.empty() ? "" : " (" + src.module + " is checked on its own by its cases)") + "; the stages above it are right");
        out.push_back("  " + name + ", entry " + entry_at(shape, eg.at) + " of " + shape_str(shape) + " (counted from 1): expected " + num(eg.num, "%.6g") +
                      " (central finite difference of its line), got " + num(eg.ana, "%.6g"));
        const std::vector<RelatedGradient> others(before.end() - std::min<std::size_t>(before.size(), 8), before.end());
        const std::string why = explain_relation(eg, others, likely_factors(c, b.n), tol);
        if (!why.empty()) out.push_back("  " + why);
        return false;
    }
    if (!right.empty()) out.push_back("  right  " + right);
    return true;
}

// Every stage right: each parameter's gradient, with the function that accumulates it (for the
// embedding rows, embed_backward checked alone on the walk's dX^(0) tells it from model_backward).
static void walk_parameters(const Config& c, Params<double>& p, const Batch& b, const WalkLoss& loss, const StageRecord<double>& rec,
                            const Params<double>& g, Rng& r, std::vector<std::string>& out) {
    const double h = 1e-5, tol = 1e-6;
    const int per = std::max(1, entries_per_gradient(walk_flops(c, b.B * b.n, b.n), 1));
    auto P = named_tensors(c, p);
    auto G = named_tensors(c, const_cast<Params<double>&>(g));
    for (std::size_t t = 0; t < P.size(); t++) {
        const std::string& name = P[t].name;
        const ExplainGradient eg = parameter_check(loss, rec, *P[t].tensor, *G[t].tensor, name, "", per, r, h, tol, 8);
        if (eg.pass) continue;
        std::string f = "model_backward";
        if (name.rfind("layers.", 0) == 0) f = is_pre_ln(c.variant) ? "pre_ln_block_backward" : "post_ln_block_backward";
        else if (name.rfind("ln_f.", 0) == 0) f = "blocks_backward";
        else if (name.rfind("mlm.", 0) == 0) f = "MLMHead_backward";
        else if (name == "W_e" || name == "W_p" || name == "w_pad" || name == "w_A" || name == "w_B") {
            Tensor<double> dX0 = rec.seen[(std::size_t)rec.find(c.emb_ln ? Stage::embedding : Stage::X, 0)].gradient;
            if (!c.emb_ln) {
                ForwardCache<double> k;
                model_forward(c, p, b, &k);
                multiply_inplace(dX0, k.drop_emb);
            }
            Params<double> ge = make_params<double>(c);
            embed_backward(c, b, dX0, ge);
            auto GE = named_tensors(c, ge);
            auto moved = [&](std::size_t j, double d) {
                const double x0 = (*P[t].tensor)[j];
                (*P[t].tensor)[j] = x0 + d;
                const double v = contract(dX0, embed_forward(c, p, b));
                (*P[t].tensor)[j] = x0;
                return v;
            };
            f = fd_gradient(moved, name, "", P[t].tensor->shape, *GE[t].tensor, per, r, h, tol, 8).pass ? "model_backward" : "embed_backward";
        }
        out.push_back("first wrong: " + f + of_layer(c, name.rfind("layers.", 0) == 0 ? std::atoi(name.c_str() + 7) + 1 : 0) + " (" + composer_section(c, f) +
                      "), its gradient of " + name + "; every stage's gradient is right");
        out.push_back("  entry " + entry_at(P[t].tensor->shape, eg.at) + " of " + shape_str(P[t].tensor->shape) + " (counted from 1): expected " +
                      num(eg.num, "%.6g") + " (central finite difference of the stages it feeds), got " + num(eg.ana, "%.6g"));
        return;
    }
    out.push_back("(every stage and every parameter agrees with the finite differences here)");
}

// make check's stage walk (transformer.hpp): the order, the stages, the parameters.
std::vector<std::string> locate_backward(const Config& c, Params<double>& p, const Batch& b, const WalkLoss& loss, uint64_t seed) {
    StageRecord<double> rec;
    Params<double> g = make_params<double>(c);
    try {
        loss(&g, &rec);
    } catch (const Error& e) {
        return {std::string("first wrong: the walk throws: ") + e.what()};
    }
    const std::string order = walk_order(c, rec);
    if (!order.empty()) return {order};
    std::vector<std::string> out = {"The backward from the loss down, each stage's gradient against central differences of its line (the stage moved in "
                                    "the walk's forward, the stages it feeds taken with their reported gradients; h = 1e-5):"};
    Rng r(seed);
    if (walk_stages(c, b, loss, rec, r, out)) walk_parameters(c, p, b, loss, rec, g, r, out);
    return out;
}

// The parameters in double, for the checks' walk.
template <typename T>
static Params<double> params_f64(const Config& c, const Params<T>& p) {
    Params<double> q = make_params<double>(c);
    auto from = named_tensors(c, const_cast<Params<T>&>(p));
    auto to = named_tensors(c, q);
    for (std::size_t k = 0; k < to.size(); k++) *to[k].tensor = to_f64(*from[k].tensor);
    return q;
}

// One run of explain: model_loss walked once in T with this run as its Trace (the values shown; each
// stage the walk reports writes its boxes) and, for the checks, once in double (StageRecord), whose
// every stage gradient is compared with central differences of the loss through the same walk.
// The boxes are written in the order the walk reports its stages; explain sequences nothing itself.
template <typename T>
struct ExplainRun : Trace {
    using Trace::backward;
    using Trace::forward;
    const Config& c;
    const Params<T>& p;
    const Batch& batch;
    const ExplainDetail* detail;
    const int n;
    const bool pre, seg;
    const std::string ffn;  // FFN_ReLU or FFN_GELU, as the formulas name the block's FFN
    ExplainWalk<T> w;
    const bool checking;
    const int fold;  // the gradients' heat maps: kept whole up to fold x fold
    const std::vector<std::pair<std::string, double>> factors;  // likely_factors of the model
    const ExplainBackwards no_replacements;
    const ExplainBackwards& bw;
    uint64_t seed = 0x5eed;        // each checked box draws its R from the next seed
    uint64_t drawn_seed = 0xda7a;  // inputs the run did not reach are drawn from the next one
    Explained<T> r;
    ForwardCache<T> k;
    std::vector<int> rows;         // every row de-embedded: Z is n x V, as the boxes show it
    StageRecord<T> shown;          // the walk in T
    StageRecord<double> record;    // the walk in double, for the checks
    Params<double> pd, gd;         // the parameters in double and their gradients
    WalkLoss loss;                 // model_loss in double with a trace
    int stage_entries = 1;         // entries compared per stage gradient
    // A model whose forward costs more than 1e9 flops (GPT-2 124M: 2.5e9 on 10 tokens) has its walk's
    // gradients compared at the layers' boundaries only (dZ, dX_f, dX^(l)), one entry each, and no
    // layer's parameters through the walk: each comparison is two passes of the whole forward.
    bool boundaries_only = false;
    bool backward_started = false;
    bool alone = false;            // past a stub: the boxes are checked alone, without the walk's gradients
    bool boxed_loss = false, boxed_output = false, boxed_ln_f = false, boxed_emb_ln = false;  // written by the walk
    std::set<int> layers_boxed;    // the layers whose backward boxes the walk began to write
    int masks_shown = 0, masks_seen = 0, blocks_shown = 0;
    std::vector<std::pair<Stage, int>> pending;  // stages reported since the last backward box
    std::set<std::string> checked_functions;  // the module backwards some box checked
    std::vector<RelatedGradient> walk_before;  // the walk's gradients checked so far, for the relations
    std::vector<std::size_t> due;  // the forward's stages in reverse, as the backward must report them
    std::size_t next_due = 0;
    std::string out_of_order, out_of_order_function;  // the first stage reported out of that order, and who reports it
    // The embedding's terms as the boxes show them.
    Tensor<T> E, Wp, t0, t1, sum;  // OneHot(x) W_e; the position rows; 1 - t and t; E with emb_ln
    std::vector<int> pos;
    bool pads = false;
    std::string Wp_name, X0, XL, XF;
    Tensor<T> dZ;
    const std::vector<int> nH, nD;
    const std::string ln_box = "LayerNorm(X)_{i,j} = gamma_j (X_{i,j} - mu_i) / sqrt(sigma_i^2 + eps) + beta_j";
    const std::string ln_grad = "dgamma = sum_i dY Xhat, dbeta = sum_i dY";
    const std::string ln_bwd = "dX = rstd (G - mean(G) - Xhat mean(G Xhat)), G = dY gamma; " + ln_grad;
    const std::string ffn_bwd = "dW_2 = A^T dY, db_2 = colsum(dY), dZ = dY W_2^T * act'(Z), dW_1 = X^T dZ, db_1 = colsum(dZ), dX = dZ W_1^T";
    const std::string mhsa_bwd = "per head: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D); dW^O = Concat^T dY";

    ExplainRun(const Config& c_, const Params<T>& p_, const Batch& batch_, int values, const ExplainDetail* detail_)
        : c(c_), p(p_), batch(batch_), detail(detail_), n(batch_.n), pre(is_pre_ln(c_.variant)), seg(has_segments(c_.variant)),
          ffn(c_.activation == Activation::relu ? "FFN_ReLU" : "FFN_GELU"), w{c_, batch_.n, values, {}, detail_},
          checking(detail_ && detail_->check), fold(detail_ ? detail_->fold : 64), factors(likely_factors(c_, batch_.n)),
          bw(detail_ ? detail_->backwards : no_replacements), nH{batch_.n, c_.H}, nD{batch_.n, c_.D} {
        for (int i = 0; i < n; i++) rows.push_back(i);
        XL = "X^(" + std::to_string(c.L) + ")";
        XF = pre ? "X_f" : XL;
    }

    // A handout's stub (NotImplemented), with ExplainDetail::stubs: the walk stops there and
    // r.stopped says so; without, it is an error like any other.
    bool stubs() const { return detail && detail->stubs; }
    ForwardOptions options(Trace* t) const {
        ForwardOptions o;
        o.keep_sublayers = true;
        o.trace = t;
        if (!is_causal(c.variant)) o.logit_rows = &rows;
        return o;
    }

    // The walk in double, recorded, for the checks; it stops where the walk in T stops.
    void record_walk() {
        pd = params_f64(c, p);
        gd = make_params<double>(c);
        loss = [this](Params<double>* g, Trace* t) { return model_loss(c, pd, batch, g, options(t)); };
        record.plant = detail ? detail->plant : nullptr;
        const int per = entries_per_gradient(walk_flops(c, n, n), 1);
        stage_entries = std::max(1, per);
        boundaries_only = walk_flops(c, n, n) > 1e9;
        try {
            loss(&gd, &record);
        } catch (const NotImplemented&) {
            if (!stubs()) throw;
        }
    }

    // The walk in T: each stage it reports writes its boxes (forward() and backward() below).
    void walk() {
        input_boxes();
        if (checking) record_walk();
        r.g = make_params<T>(c);
        shown.plant = detail ? detail->plant : nullptr;
        r.loss = NAN;
        try {
            r.loss = model_loss(c, p, batch, &r.g, options(this), &k);  // the loss event showed it in T; here as model_loss returns it
        } catch (const NotImplemented& e) {
            if (!stubs()) throw;
            r.stopped = e.what();
            r.stopped_at = e.function;
            if (!std::isnan(r.loss)) r.loss = CrossEntropy_logits(r.Z, batch.targets);  // the backward stopped: the loss as model_loss computed it
            if (masks_shown < masks_seen && blocks_shown == masks_shown) mask_box(masks_shown);
        }
        boxes_not_walked();
    }

    void forward(Stage s, int l, Tensor<T>& value) override {
        shown.forward(s, l, value);
        if (s == Stage::embedding) sum = value;
        if (s == Stage::X && l == 0) embedding_boxes(value);
        if (s == Stage::mask) masks_seen = l;
        if ((s == Stage::ln_1 || (s == Stage::attention && !pre)) && masks_shown < l) mask_box(l - 1);
        if (s == Stage::X && l > 0) block_boxes(l - 1, value);
        if (s == Stage::final_ln) final_ln_box(value);
        if (s == Stage::logits) output_boxes(value);
        if (s == Stage::loss) loss_boxes(value[0]);
    }
    void backward(Stage s, int l, Tensor<T>& gradient) override {
        shown.backward(s, l, gradient);
        due_order(s, l);
        pending.push_back({s, l});
        const bool last = l == c.L;
        switch (s) {
            case Stage::logits: backward_loss_box(gradient); break;
            case Stage::final_ln: backward_output_box(gradient); break;
            case Stage::X:
                if (last && pre) backward_ln_f_box(gradient);
                else if (last) backward_output_box(gradient);
                else if (pre) backward_pre_ln_input_box(l + 1, gradient);
                else backward_post_ln_attention_box(l + 1, gradient);
                if (!last && !boundaries_only) backward_layer_parameters_box(l + 1);
                break;
            case Stage::ffn_sum: backward_post_ln_ln2_box(l, gradient); break;
            case Stage::X_mid:
                if (pre) backward_pre_ln_ln2_box(l, gradient);
                else backward_post_ln_ffn_box(l, gradient);
                break;
            case Stage::attn_sum: backward_post_ln_ln1_box(l, gradient); break;
            case Stage::ln_2: backward_pre_ln_ffn_box(l, gradient); break;
            case Stage::ln_1: backward_pre_ln_attention_box(l, gradient); break;
            case Stage::embedding: backward_embedding_ln_box(gradient); break;
            default: break;  // a branch's dropout: its gradient is checked in the box after it
        }
    }

    // The backward reports the forward's stages in reverse (as locate_backward checks it); the first
    // one out of that order is named, with the function that walks them.
    void due_order(Stage s, int l) {
        if (due.empty())
            for (std::size_t k = shown.seen.size(); k-- > 0;)
                if (shown.seen[k].s != Stage::mask && shown.seen[k].s != Stage::loss) due.push_back(k);
        if (!out_of_order.empty() || next_due >= due.size()) return;
        // A stage the backward never reports (a backward written without its trace_backward lines;
        // the walk in double, done first, says which) is passed over; one it reports later is due first.
        auto reported = [&](const StageSeen<T>& st) { return !checking || record.find(st.s, st.l) < 0 || !record.seen[(std::size_t)record.find(st.s, st.l)].gradient.empty(); };
        for (std::size_t k = next_due; k < due.size(); k++) {
            const StageSeen<T>& st = shown.seen[due[k]];
            if (st.s == s && st.l == l) {
                next_due = k + 1;
                return;
            }
            if (reported(st)) break;
        }
        const StageSeen<T>& want = shown.seen[due[next_due]];
        const std::string got = stage_gradient_name(c, s, l), wanted = stage_gradient_name(c, want.s, want.l);
        out_of_order_function = want.l != l ? "blocks_backward" : stage_source(c, want.s, want.l).composer;
        out_of_order = want.l != l ? "the layers' gradients arrive out of order: " + got + " comes where " + wanted +
                                         " was due (blocks_backward walks from layer L down to 1, each block taking the gradient of the one above)"
                                   : got + " comes where " + wanted + " was due (" + stage_source(c, want.s, want.l).line + ")";
    }

    // The input box and OneHot(x) W_e; the embedding's other terms, for the boxes after them.
    void input_boxes() {
        ExplainWalk<double> ids{c, n, w.values, {}, detail};
        ids.step(0, "Input", std::string(seg ? "x' in {1..V}^n, t in {0, 1}^n" : is_causal(c.variant) ? "x = (x_1, ..., x_n) in {1, 2, ..., V}^n" : "x' = (x'_1, ..., x'_n) in {1, 2, ..., V}^n"),
                 "Batch::tokens (code id = formula id - 1)");
        ids.out("x", "n", ids_tensor(batch.tokens));
        if (seg) ids.out("t", "n", ids_tensor(batch.segments.empty() ? std::vector<int>(n, 0) : batch.segments));
        w.steps = ids.steps;
        E = Embedding(batch.tokens, p.W_e);
        w.step(0, "Embedding", "OneHot(x) W_e, OneHot(x)_{i,j} = 1 if j = x_i (so row i is row x_i of W_e)", "Embedding");
        w.in("W_e", "V x H", p.W_e);
        w.out("OneHot(x) W_e", "n x H", E);
        pos = position_rows(c, batch.tokens, n);  // 0..n-1 but for RoBERTa's <pad>
        pads = std::count(pos.begin(), pos.end(), -1) > 0;
        Wp = Tensor<T>::uninit(n, c.H);
        for (int i = 0; i < n; i++) std::copy(position_vector(p, pos[i]), position_vector(p, pos[i]) + c.H, Wp.row(i));
        Wp_name = pads ? "W_p (the rows of position_rows: a <pad> gets w_pad, the others rows 1, 2, ... in order)" : "W_p (rows 1..n)";
        t0 = Tensor<T>({n}), t1 = Tensor<T>({n});
        for (int i = 0; i < n; i++) {
            t1[i] = T(batch.segments.empty() ? 0 : batch.segments[i]);
            t0[i] = T(1) - t1[i];
        }
        // With the released BERT's embedding LayerNorm (formulas §23) the sum is E, and X^(0) = LayerNorm_e(E).
        X0 = c.emb_ln ? "E" : "X^(0)";
    }

    // X^(0): the token and position rows, BERT's segment rows, the released BERT's embedding LayerNorm.
    void embedding_boxes(const Tensor<T>& X_0) {
        const Tensor<T>& X0_value = c.emb_ln ? sum : X_0;
        if (!seg) {
            w.step(0, "Embedding", X0 + " = OneHot(x) W_e + W_p", "embed_forward");
            w.in(Wp_name, "n x H", Wp);
            w.out(X0, "n x H", X0_value);
        } else {  // the sheet's terms, each shown; X^(0) is embed_forward's
            w.step(0, "Embedding", "X'^(0) = OneHot(x') W_e + W_p", "add");
            w.in(Wp_name, "n x H", Wp);
            w.out("X'^(0)", "n x H", add(E, Wp));
            const Tensor<T> A = matmul(diag(t0), Stack(p.w_A, n));
            const Tensor<T> B = matmul(diag(t1), Stack(p.w_B, n));
            w.step(0, "Embedding", X0 + " = X'^(0) + diag(1 - t) Stack_n(w_A) + diag(t) Stack_n(w_B)  [t_i = 0 gets w_A: formulas §21]",
                   "embed_forward (" + X0 + "); the term shown: diag, Stack, matmul");
            w.in("diag(1 - t)", "n x n", diag(t0));
            w.in("Stack_n(w_A)", "n x H", Stack(p.w_A, n));
            w.out("diag(1 - t) Stack_n(w_A) + diag(t) Stack_n(w_B)", "n x H", add(A, B));
            w.out(X0, "n x H", X0_value);
        }
        if (c.emb_ln) {
            w.step(0, "Embedding LayerNorm", "X^(0) = LayerNorm_e(E) with gamma_e, beta_e (the released BERT's, formulas §23), " + ln_box,
                   "LayerNorm (emb_ln, model_forward)");
            w.in("gamma_e", "H", p.gamma_e);
            w.in("beta_e", "H", p.beta_e);
            w.out("X^(0)", "n x H", X_0);
        }
    }

    // Layer l's mask (code l), with its picture of 1s and dots.
    void mask_box(int l) {
        masks_shown = l + 1;
        const std::string L1 = std::to_string(l + 1), box = "Layers, l = " + L1, M = mask_name(c, l);
        const Tensor<T>& Mask = k.masks[l];
        const std::string block = pre ? "pre_ln_block_forward" : "post_ln_block_forward";
        w.step(0, box, c.variant == Variant::gpt3 ? "Mask^(l) = Mask^AR if l is even, Mask^ST if l is odd: " + M : "Mask: " + M,
               "layer_mask (" + std::string(M == "Mask^BD" ? "Mask_BD" : M == "Mask^ST" ? "Mask_ST" : "Mask_AR") + "); the block: " + block);
        w.out("Mask^(" + L1 + ")", "n x n", Mask, ExplainTensor::Scale::mask);
        for (int i = 0; i < n && n <= 16; i++) {
            std::string row;
            for (int j = 0; j < n; j++) row += Mask(i, j) == T(1) ? " 1" : " .";
            w.steps.back().picture.push_back(row);
        }
    }

    // Layer l's block (code l): MultiHeadSA, FFN, the residual sums and LayerNorms, post-LN or pre-LN.
    void block_boxes(int l, const Tensor<T>& X_out) {
        blocks_shown = l + 1;
        const std::string L1 = std::to_string(l + 1), L0 = std::to_string(l), box = "Layers, l = " + L1;
        const std::string Xp = "X^(" + L0 + ")", Xq = "X'^(" + L1 + ")", Xl = "X^(" + L1 + ")", M = mask_name(c, l);
        const BlockCache<T>& b = k.blocks[l];
        const Tensor<T>& Mask = k.masks[l];
        const Tensor<T>& X_in = pre ? b.X : b.attn_in;
        if (!pre) {  // X'^(l) = LayerNorm(MultiHeadSA(X^(l-1), Mask) + X^(l-1)), X^(l) = LayerNorm(FFN(X'^(l)) + X'^(l))
            explain_attention(w, box, Xp, X_in, Mask, b.attn, b.attn_out);
            w.step(0, box, Xq + " = LayerNorm(MultiHeadSA(" + Xp + ", " + M + ") + " + Xp + "), " + ln_box, "add, LayerNorm");
            w.out(Xq, "n x H", b.ffn_in);
            explain_ffn(w, box, Xq, b.ffn_in, b.ffn, b.ffn_out);
            w.step(0, box, Xl + " = LayerNorm(" + ffn + "(" + Xq + ") + " + Xq + ")", "add, LayerNorm");
        } else {  // X'^(l) = MultiHeadSA(LayerNorm(X^(l-1)), Mask) + X^(l-1), X^(l) = FFN(LayerNorm(X'^(l))) + X'^(l)
            w.step(0, box, "LayerNorm(" + Xp + "), " + ln_box, "LayerNorm");
            w.out("LayerNorm(" + Xp + ")", "n x H", b.attn_in);
            explain_attention(w, box, "LayerNorm(" + Xp + ")", b.attn_in, Mask, b.attn, b.attn_out);
            w.step(0, box, Xq + " = MultiHeadSA(LayerNorm(" + Xp + "), " + M + ") + " + Xp, "add");
            w.out(Xq, "n x H", b.X_mid);
            w.step(0, box, "LayerNorm(" + Xq + ")", "LayerNorm");
            w.out("LayerNorm(" + Xq + ")", "n x H", b.ffn_in);
            explain_ffn(w, box, "LayerNorm(" + Xq + ")", b.ffn_in, b.ffn, b.ffn_out);
            w.step(0, box, Xl + " = " + ffn + "(LayerNorm(" + Xq + ")) + " + Xq, "add");
        }
        w.out(Xl, "n x H", X_out);
    }

    // The final LayerNorm of the pre-LN variants: X_f, the rows that are de-embedded.
    void final_ln_box(const Tensor<T>& X_f) {
        w.step(0, "Layers", "X_f = LayerNorm_f(" + XL + ")", "LayerNorm (ln_f)");
        w.in(XL, "n x H", k.X_L_in);
        w.out("X_f", "n x H", X_f);
    }

    // The logits Z: the de-embedding, or the released BERT's masked-LM head.
    void output_boxes(const Tensor<T>& Z) {
        r.Z = Z;
        if (!c.mlm_head) {
            w.step(0, "Output", "Z = " + XF + " W_e^T (the de-embedding, formulas §17; Y = Softmax(Z))", "matmul_nt");
        } else {  // the released BERT's masked-LM head in its steps (formulas §23), read from its cache
            w.step(0, "Masked-LM head", "U = " + XL + " W_t + Stack_n(b_t) (formulas §23)", "MLMHead (Linear)");
            w.in("W_t", "H x H", p.W_t);
            w.out("U", "n x H", k.mlm.U);
            w.step(0, "Masked-LM head", "X_t = LayerNorm_t(GELU(U)) with gamma_t, beta_t (GELU: BERT's activation, RoBERTa's erf form)",
                   std::string("MLMHead (activation_array: ") +
                       activation_name(c.variant == Variant::roberta ? Activation::gelu_erf : c.activation) + "; LayerNorm)");
            w.out("X_t", "n x H", k.mlm.X_t);
            w.step(0, "Output", "Z = MLMHead(" + XL + ") = X_t W_e^T + Stack_n(b_z) (the tied de-embedding, formulas §23; Y = Softmax(Z))",
                   "MLMHead (matmul_nt, the bias b_z)");
            w.in("b_z", "V", p.b_z);
        }
        w.out("Z", "n x V", Z);
    }

    // Y = Softmax(Z), the model's output row, the loss (model_loss's) and one row's CrossEntropy.
    void loss_boxes(double loss_value) {
        r.loss = loss_value;
        const Tensor<T> Y = Softmax(r.Z);
        int first = 0;  // the first row with a target
        while (batch.targets[first] < 0) first++;
        const int row = is_causal(c.variant) ? n - 1 : first;
        const std::string j = std::to_string(row + 1);
        const std::string rows_of_X = pre ? "(X_f)" : XL;
        const std::string logits_j = c.mlm_head ? "MLMHead(" + XL + ")_{j,:}" : rows_of_X + "_{j,:} W_e^T";
        w.step(0, "Output", is_causal(c.variant) ? "GPT(x) = Softmax(" + rows_of_X + "_{n,:} W_e^T) = Y_{n,:}"
                            : std::string(seg ? "BERT(x', t, j)" : "RoBERTa(x', j)") + " = Softmax(" + logits_j + ") = Y_{j,:}",
               "Softmax");
        w.out("Y = Softmax(Z)", "n x V", Y, ExplainTensor::Scale::probability);
        Tensor<T> Y_row = rows_of(Y, row, 1);  // 1 x V, read as the vector V
        Y_row.shape = {c.V};
        w.out("Y_" + j + ",:", "V", Y_row, ExplainTensor::Scale::probability);
        w.step(0, "Loss", is_causal(c.variant) ? "loss = - sum_{j=2}^n log Y_{j-1, x_j}, as a mean over the n-1 terms (formulas §25)"
                                               : "loss = - sum_{i=1}^m log Y_{j_i, x_{j_i}} over the masked positions j_i, as a mean",
               "CrossEntropy_logits (logsumexp(Z_i) - Z_{i,t_i})");
        w.out("loss", "1", Tensor<T>::vector({(T)loss_value}));
        Tensor<T> y({c.V}), yhat = rows_of(Y, first, 1);
        yhat.shape = {c.V};
        y[batch.targets[first]] = T(1);
        w.step(1, "Loss", "CrossEntropy(y, yhat) = - sum_{j=1}^V y_j log yhat_j for the first row i with a target (y = OneHot of its target, yhat = Y_{i,:})",
               "CrossEntropy");
        w.out("CrossEntropy of row " + std::to_string(first + 1), "1", Tensor<T>::vector({CrossEntropy(y, yhat)}));
    }

    // ---- The backward: a box for each stage the walk reports, from the loss down ----
    // A module's check on its own (the existing box checks) where it met a stub: not implemented yet.
    ExplainCheck module_check(const std::function<ExplainCheck()>& f) {
        ExplainCheck ck;
        try {
            ck = f();
        } catch (const NotImplemented& e) {
            if (!stubs()) throw;
            ck = ExplainCheck();
            ck.done = true, ck.missing = e.what();
            const std::string& fn = w.steps.back().function;
            ck.function = fn.substr(0, fn.find_first_of(" ,("));
        }
        return ck;
    }
    // The last box's check: its module on its own (module; on the run's inputs where reached), then
    // each stage gradient the walk reported since the box before and the parameters named, each
    // against central differences of the loss through the whole walk. Where the module passes and a
    // gradient of the walk fails, the box fails in composer (the function that joins the module's
    // result into the walk), or through the box before it whose gradient of the walk failed first.
    void check_box(bool reached, const std::function<ExplainCheck()>& module, const std::string& composer,
                   const std::vector<std::string>& named = {}) {
        std::vector<std::pair<Stage, int>> stages;
        stages.swap(pending);
        if (!checking) return;
        std::vector<std::string> parameters = alone || boundaries_only ? std::vector<std::string>() : named;
        ExplainCheck ck;
        if (module) {
            ck = module_check(module);
        } else {
            ck.done = true;
            ck.function = composer;
        }
        ck.random = !reached;
        if (ck.missing.empty() && module) checked_functions.insert(ck.function);
        const bool module_pass = ck.pass;
        std::vector<ExplainGradient> walked;
        Rng rr(++seed);
        for (const auto& sl : stages) {
            if (sl.first == Stage::attention || sl.first == Stage::ffn) continue;  // no dropout in explain: the next stage's gradient
            if (boundaries_only && sl.first != Stage::X && sl.first != Stage::logits && sl.first != Stage::final_ln) continue;
            const int at = record.find(sl.first, sl.second);
            if (at < 0 || record.seen[(std::size_t)at].gradient.empty()) continue;
            const StageSource src = stage_source(c, sl.first, sl.second);
            walked.push_back(stage_check(loss, record, (std::size_t)at, stage_gradient_name(c, sl.first, sl.second) + " (its line's)",
                                         src.line, stage_entries, rr, ck.h, ck.tol, fold));
        }
        auto P = named_tensors(c, pd);
        auto G = named_tensors(c, gd);
        const int per = std::max(1, entries_per_gradient(walk_flops(c, n, n), std::max<std::size_t>(1, parameters.size())));
        for (const std::string& name : parameters)
            for (std::size_t t = 0; t < P.size(); t++)
                if (P[t].name == name)
                    walked.push_back(parameter_check(loss, record, *P[t].tensor, *G[t].tensor, "d" + parameter_symbol(name) + " (its line's)",
                                                     "d" + parameter_symbol(name) + " accumulated by " + composer, per, rr, ck.h, ck.tol, fold));
        bool walk_pass = true;
        for (const ExplainGradient& g : walked) {
            ck.gradients.push_back(g);
            ck.entries += g.entries;
            walk_pass &= g.pass;
        }
        const std::vector<RelatedGradient> others =
            related(ck.gradients, std::vector<RelatedGradient>(walk_before.end() - std::min<std::size_t>(walk_before.size(), 8), walk_before.end()));
        for (ExplainGradient& g : ck.gradients) g.relation = explain_relation(g, others, factors, ck.tol);
        for (const auto& sl : stages) {
            const int at = record.find(sl.first, sl.second);
            if (at >= 0 && !record.seen[(std::size_t)at].gradient.empty())
                walk_before.push_back({stage_gradient_name(c, sl.first, sl.second), "of the walk", record.seen[(std::size_t)at].gradient.shape,
                                       record.seen[(std::size_t)at].gradient.ptr(), record.seen[(std::size_t)at].gradient.size()});
        }
        if (!out_of_order.empty() && !out_of_order_function.empty() && ck.missing.empty()) {  // the first box after the walk left its order
            ck.function = out_of_order_function;
            ck.composition = "The backward reports its stages out of the forward's order: " + out_of_order;
            ck.problem = out_of_order;
            ck.pass = false;
            out_of_order_function.clear();
            walk_pass = false;
        } else if (!walk_pass && ck.missing.empty()) {
            if (module_pass) {
                for (const ExplainGradient& g : ck.gradients)
                    if (!g.pass && (ck.pass || g.err > ck.err)) {
                        ck.tensor = g.name, ck.shape = g.shape, ck.at = g.at, ck.num = g.num, ck.ana = g.ana, ck.err = g.err, ck.problem = g.problem;
                        ck.pass = false;
                    }
                {
                    std::string failing;
                    for (const ExplainGradient& g : ck.gradients)
                        if (!g.pass) failing += (failing.empty() ? "" : ", ") + g.name.substr(0, g.name.find(' '));
                    ck.composition = (module ? ck.function + " passes on its own; " : std::string()) + failing + " of the walk " +
                                     (failing.find(',') == std::string::npos ? "does" : "do") + " not agree with " +
                                     (failing.find(',') == std::string::npos ? "its line" : "their lines") + ": the mistake is in how " + composer +
                                     " joins its parts (a term, a path or a factor of its line)";
                    ck.function = composer;
                }
            }
            ck.pass = false;
        }
        w.steps.back().check = ck;
    }
    // The forward reached layer l (formula) and the logits; layer l's mask, made again where the forward did not reach it.
    bool at_layer(int l) const { return l <= blocks_shown; }
    bool at_logits() const { return !r.Z.empty(); }
    Tensor<T> mask_of(int l) const { return l <= masks_seen ? k.masks[l - 1] : layer_mask<T>(c, l - 1, n); }
    // Inputs the run did not reach, N(0, 1).
    Tensor<T> drawn(const std::vector<int>& shape) {
        Rng rr(++drawn_seed);
        Tensor<T> t(shape);
        for (std::size_t a = 0; a < t.size(); a++) t[a] = (T)rr.normal();
        return t;
    }

    void backward_loss_box(const Tensor<T>& gradient) {
        backward_started = true;
        w.backward = true;
        boxed_loss = true;
        dZ = gradient;
        w.step(0, "Backward: loss", "dZ = (Softmax(Z) - OneHot(targets)) / count (rows without a target: 0)", "CrossEntropy_logits");
        check_box(at_logits(), [&] { return check_loss(at_logits() ? r.Z : drawn({n, c.V}), batch.targets, ++seed, fold); }, "model_loss");
        w.out("dZ", "n x V", gradient);
    }
    // dZ back through the de-embedding or the masked-LM head to the rows that were de-embedded.
    void backward_output_box(const Tensor<T>& gradient) {
        boxed_output = true;
        Params<T>& g = r.g;
        if (!c.mlm_head) {
            w.step(0, "Backward: output", "Z = " + XF + " W_e^T: dW_e += dZ^T " + XF + ", d" + XF + " = dZ W_e", "matmul_tn_acc, matmul (model_backward)");
            check_box(at_logits(), [&] { return check_output(at_logits() ? k.X_L : drawn(nH), p.W_e, ++seed, fold); }, "model_backward");
        } else {
            w.step(0, "Backward: masked-LM head",
                   "Z = MLMHead(" + XL + "): db_z = colsum(dZ), dW_e += dZ^T X_t, dX_t = dZ W_e, dA = LayerNorm_backward(dX_t), "
                   "dU = dA * GELU'(U), dW_t = " + XL + "^T dU, db_t = colsum(dU), d" + XL + " = dU W_t^T",
                   "MLMHead_backward (model_backward)");
            check_box(at_logits(), [&] { return check_mlm_head(c, p, at_logits() ? k.X_L : drawn(nH), ++seed, fold); }, "model_backward",
                      {"mlm.W_t", "mlm.b_t", "mlm.ln.gamma", "mlm.ln.beta", "mlm.b_z"});
            w.out("db_z", "V", g.b_z);
            w.out("dgamma_t", "H", g.gamma_t);
            w.out("dbeta_t", "H", g.beta_t);
            w.out("dW_t", "H x H", g.W_t);
            w.out("db_t", "H", g.b_t);
        }
        w.out("d" + XF, "n x H", gradient);
        w.out("dW_e (so far)", "V x H", g.W_e);
    }
    void backward_ln_f_box(const Tensor<T>& gradient) {
        boxed_ln_f = true;
        w.step(0, "Backward: Layers", "X_f = LayerNorm_f(" + XL + "): d" + XL + " = LayerNorm_backward(dX_f); " + ln_bwd, "LayerNorm_backward (ln_f, blocks_backward)");
        check_box(at_logits(), [&] { return check_layernorm(at_logits() ? k.X_L_in : drawn(nH), p.ln_f_gamma, p.ln_f_beta, c.eps, bw, ++seed, fold); }, "blocks_backward",
                  {"ln_f.gamma", "ln_f.beta"});
        w.out("d" + XL, "n x H", gradient);
        w.out("dgamma (ln_f)", "H", r.g.ln_f_gamma);
        w.out("dbeta (ln_f)", "H", r.g.ln_f_beta);
    }

    // A LayerNorm's, the FFN's and MultiHeadSA's gradients of layer l, as the backward boxes show them.
    void ln_grads(const char* which, const Tensor<T>& dgamma, const Tensor<T>& dbeta) {
        w.out(std::string("dgamma (") + which + ")", "H", dgamma);
        w.out(std::string("dbeta (") + which + ")", "H", dbeta);
    }
    void ffn_grads(const Layer<T>& gl) {
        w.out("dW_1", "H x F", gl.ffn.W_1);
        w.out("db_1", "F", gl.ffn.b_1);
        w.out("dW_2", "F x H", gl.ffn.W_2);
        w.out("db_2", "H", gl.ffn.b_2);
    }
    void attention_grads(const Layer<T>& gl) {
        w.out("dW^O", "AD x H", gl.attn.W_O);
        for (int i = 0; i < c.A; i++) {
            const std::string h = std::to_string(i + 1);
            w.out("dW_" + h + "^Q", "H x D", gl.attn.W_Q[i]);
            w.out("dW_" + h + "^K", "H x D", gl.attn.W_K[i]);
            w.out("dW_" + h + "^V", "H x D", gl.attn.W_V[i]);
        }
    }

    // Each head's Softmax and Attention alone, inside MultiHeadSA's box of layer l (formula), on the
    // run's values where the forward reached the layer, else on drawn ones.
    void head_boxes(int l, const std::string& box) {
        const bool at = at_layer(l);
        for (int i = 0; i < c.A; i++) {
            const std::string h = std::to_string(i + 1);
            w.step(1, box, "P = Softmax(S), S = Mask (.) Q K^T / sqrt(D): dS = P * (dP - rowsum(dP * P))", "Softmax_backward (head " + h + ")");
            check_box(at, [&] {
                if (!at) return check_softmax(drawn({n, n}), ++seed, fold);
                const BlockCache<T>& kb = k.blocks[l - 1];
                Tensor<T> S = matmul_nt(kb.attn.Q[i], kb.attn.K[i]);
                for (auto& v : S.data) v /= std::sqrt(T(c.D));
                return check_softmax(apply_mask(k.masks[l - 1], S), ++seed, fold);
            }, "MultiHeadSA_backward");
            w.step(1, box, "head_i = Attention(Q, K, V, Mask) = P V, P = Softmax(Mask (.) Q K^T / sqrt(D)): dV = P^T dO, dP = dO V^T, "
                           "dS = P * (dP - rowsum(dP * P)), dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D)",
                   "Attention_backward (head " + h + ", Softmax_backward)");
            check_box(at, [&] {
                if (!at) return check_attention(drawn(nD), drawn(nD), drawn(nD), mask_of(l), ++seed, fold);
                const BlockCache<T>& kb = k.blocks[l - 1];
                return check_attention(kb.attn.Q[i], kb.attn.K[i], kb.attn.V[i], k.masks[l - 1], ++seed, fold);
            }, "MultiHeadSA_backward");
        }
    }
    void started(int l) { layers_boxed.insert(l); }

    std::string in_block() const { return std::string(" (") + (pre ? "pre_ln_block_backward" : "post_ln_block_backward") + ")"; }
    std::string composer() const { return pre ? "pre_ln_block_backward" : "post_ln_block_backward"; }
    static std::string layer_box(int l) { return "Backward, l = " + std::to_string(l); }

    // Post-LN (GPT, BERT, RoBERTa), layer l (formula): LayerNorm, FFN, LayerNorm, MultiHeadSA and its heads.
    void backward_post_ln_ln2_box(int l, const Tensor<T>& gradient) {
        const std::string Xl = "X^(" + std::to_string(l) + ")";
        const BlockCache<T>& kb = k.blocks[l - 1];
        const Layer<T>& pl = p.layers[l - 1];
        w.step(0, layer_box(l), Xl + " = LayerNorm(U): dU = LayerNorm_backward(d" + Xl + "), " + ln_bwd, "LayerNorm_backward" + in_block());
        started(l);
        check_box(at_layer(l), [&] { return check_layernorm(at_layer(l) ? add(kb.ffn_out, kb.ffn_in) : drawn(nH), pl.ln_2_gamma, pl.ln_2_beta, c.eps, bw, ++seed, fold); }, composer());
        ln_grads("ln_2", r.g.layers[l - 1].ln_2_gamma, r.g.layers[l - 1].ln_2_beta);
        w.out("dU", "n x H", gradient);
    }
    void backward_post_ln_ffn_box(int l, const Tensor<T>& gradient) {
        started(l);
        const std::string Xq = "X'^(" + std::to_string(l) + ")";
        const BlockCache<T>& kb = k.blocks[l - 1];
        w.step(0, layer_box(l), "U = " + ffn + "(" + Xq + ") + " + Xq + ": d" + Xq + " = " + ffn + "_backward(dU) + dU; " + ffn_bwd, "FFN_backward, add" + in_block());
        check_box(at_layer(l), [&] { return check_ffn(at_layer(l) ? kb.ffn_in : drawn(nH), p.layers[l - 1].ffn, c.activation, bw, ++seed, fold); }, composer());
        ffn_grads(r.g.layers[l - 1]);
        w.out("d" + Xq, "n x H", gradient);
    }
    void backward_post_ln_ln1_box(int l, const Tensor<T>& gradient) {
        started(l);
        const std::string Xq = "X'^(" + std::to_string(l) + ")";
        const BlockCache<T>& kb = k.blocks[l - 1];
        const Layer<T>& pl = p.layers[l - 1];
        w.step(0, layer_box(l), Xq + " = LayerNorm(S): dS = LayerNorm_backward(d" + Xq + "); " + ln_grad, "LayerNorm_backward" + in_block());
        check_box(at_layer(l), [&] { return check_layernorm(at_layer(l) ? add(kb.attn_out, kb.attn_in) : drawn(nH), pl.ln_1_gamma, pl.ln_1_beta, c.eps, bw, ++seed, fold); }, composer());
        ln_grads("ln_1", r.g.layers[l - 1].ln_1_gamma, r.g.layers[l - 1].ln_1_beta);
        w.out("dS", "n x H", gradient);
    }
    void backward_post_ln_attention_box(int l, const Tensor<T>& gradient) {
        started(l);
        const std::string Xp = "X^(" + std::to_string(l - 1) + ")";
        const BlockCache<T>& kb = k.blocks[l - 1];
        w.step(0, layer_box(l), "S = MultiHeadSA(" + Xp + ", Mask) + " + Xp + ": d" + Xp + " = MultiHeadSA_backward(dS) + dS; " + mhsa_bwd,
               "MultiHeadSA_backward (Concat_backward, Attention_backward), add" + in_block());
        check_box(at_layer(l), [&] { return check_mhsa(at_layer(l) ? kb.attn_in : drawn(nH), mask_of(l), p.layers[l - 1].attn, bw, ++seed, fold); }, composer());
        attention_grads(r.g.layers[l - 1]);
        w.out("d" + Xp, "n x H", gradient);
        head_boxes(l, layer_box(l));
    }

    // Pre-LN (GPT-2, GPT-3), layer l (formula): FFN, LayerNorm, MultiHeadSA and its heads, LayerNorm.
    void backward_pre_ln_ffn_box(int l, const Tensor<T>& gradient) {
        const std::string Xq = "X'^(" + std::to_string(l) + ")", Xl = "X^(" + std::to_string(l) + ")";
        w.step(0, layer_box(l), Xl + " = " + ffn + "(LayerNorm(" + Xq + ")) + " + Xq + ": dLayerNorm(" + Xq + ") = " + ffn + "_backward(d" + Xl + "); " + ffn_bwd,
               "FFN_backward" + in_block());
        started(l);
        check_box(at_layer(l), [&] { return check_ffn(at_layer(l) ? k.blocks[l - 1].ffn_in : drawn(nH), p.layers[l - 1].ffn, c.activation, bw, ++seed, fold); }, composer());
        ffn_grads(r.g.layers[l - 1]);
        w.out("dLayerNorm(" + Xq + ")", "n x H", gradient);
    }
    void backward_pre_ln_ln2_box(int l, const Tensor<T>& gradient) {
        started(l);
        const std::string Xq = "X'^(" + std::to_string(l) + ")", Xl = "X^(" + std::to_string(l) + ")";
        const Layer<T>& pl = p.layers[l - 1];
        w.step(0, layer_box(l), "d" + Xq + " = d" + Xl + " + LayerNorm_backward(dLayerNorm(" + Xq + ")); " + ln_bwd, "LayerNorm_backward, add" + in_block());
        check_box(at_layer(l), [&] { return check_layernorm(at_layer(l) ? k.blocks[l - 1].X_mid : drawn(nH), pl.ln_2_gamma, pl.ln_2_beta, c.eps, bw, ++seed, fold); }, composer());
        ln_grads("ln_2", r.g.layers[l - 1].ln_2_gamma, r.g.layers[l - 1].ln_2_beta);
        w.out("d" + Xq, "n x H", gradient);
    }
    void backward_pre_ln_attention_box(int l, const Tensor<T>& gradient) {
        started(l);
        const std::string Xq = "X'^(" + std::to_string(l) + ")", Xp = "X^(" + std::to_string(l - 1) + ")";
        w.step(0, layer_box(l), Xq + " = MultiHeadSA(LayerNorm(" + Xp + "), Mask) + " + Xp + ": dLayerNorm(" + Xp + ") = MultiHeadSA_backward(d" + Xq + "); " + mhsa_bwd,
               "MultiHeadSA_backward (Concat_backward, Attention_backward)" + in_block());
        check_box(at_layer(l), [&] { return check_mhsa(at_layer(l) ? k.blocks[l - 1].attn_in : drawn(nH), mask_of(l), p.layers[l - 1].attn, bw, ++seed, fold); }, composer());
        attention_grads(r.g.layers[l - 1]);
        w.out("dLayerNorm(" + Xp + ")", "n x H", gradient);
        head_boxes(l, layer_box(l));
    }
    void backward_pre_ln_input_box(int l, const Tensor<T>& gradient) {
        started(l);
        const std::string Xq = "X'^(" + std::to_string(l) + ")", Xp = "X^(" + std::to_string(l - 1) + ")";
        const Layer<T>& pl = p.layers[l - 1];
        w.step(0, layer_box(l), "d" + Xp + " = d" + Xq + " + LayerNorm_backward(dLayerNorm(" + Xp + ")); " + ln_grad, "LayerNorm_backward, add" + in_block());
        check_box(at_layer(l), [&] { return check_layernorm(at_layer(l) ? k.blocks[l - 1].X : drawn(nH), pl.ln_1_gamma, pl.ln_1_beta, c.eps, bw, ++seed, fold); }, composer());
        ln_grads("ln_1", r.g.layers[l - 1].ln_1_gamma, r.g.layers[l - 1].ln_1_beta);
        w.out("d" + Xp, "n x H", gradient);
    }
    // Layer l's parameters, each the loss's gradient as the block's backward accumulated it.
    void backward_layer_parameters_box(int l) {
        std::vector<std::string> names;
        const std::string prefix = "layers." + std::to_string(l - 1) + ".";
        for (const auto& t : named_tensors(c, const_cast<Params<T>&>(p)))
            if (t.name.rfind(prefix, 0) == 0) names.push_back(t.name);
        w.step(0, layer_box(l), "d theta_l: each gradient of the layer's parameters, as " + composer() + " accumulates it",
               composer() + " (the layer's gradients)");
        check_box(true, nullptr, composer(), names);
    }

    // The embedding LayerNorm's gradient (the released BERT's), then the embedding rows' and BERT's segment rows'.
    void backward_embedding_ln_box(const Tensor<T>& gradient) {
        boxed_emb_ln = true;
        w.step(0, "Backward: Embedding LayerNorm", "X^(0) = LayerNorm_e(E): dE = LayerNorm_backward(dX^(0)), " + ln_bwd,
               "LayerNorm_backward (emb_ln, model_backward)");
        check_box(!sum.empty(), [&] { return check_layernorm(!sum.empty() ? sum : drawn(nH), p.gamma_e, p.beta_e, c.eps, bw, ++seed, fold); }, "model_backward",
                  {"emb_ln.gamma", "emb_ln.beta"});
        w.out("dE", "n x H", gradient);
        w.out("dgamma_e", "H", r.g.gamma_e);
        w.out("dbeta_e", "H", r.g.beta_e);
    }
    void backward_embedding_boxes() {
        Params<T>& g = r.g;
        const std::string dX0 = "d" + X0;
        std::vector<std::string> rows_of_embedding = {"W_e", "W_p"};
        if (pads) rows_of_embedding.push_back("w_pad");
        w.step(0, "Backward: Embedding", pads ? X0 + " = OneHot(x) W_e + W_p: dW_e += OneHot(x)^T " + dX0 + " (scatter-add), each row of " + dX0 + " into the W_p row (or w_pad) it read"
                                              : X0 + " = OneHot(x) W_e + W_p: dW_e += OneHot(x)^T " + dX0 + " (scatter-add), dW_p[1..n] += " + dX0,
               "embed_backward (Embedding_backward)");
        check_box(true, [&] { return check_embedding(c, p, batch, false, ++seed, fold); }, "model_backward", rows_of_embedding);  // its own R: no input to reach
        w.out("dW_e", "V x H", g.W_e);
        w.out("dW_p", "n x H", rows_of(g.W_p, 0, n));
        if (pads) w.out("dw_pad", "H", g.w_pad);
        if (seg) {
            w.step(0, "Backward: Embedding", "diag(1 - t) Stack_n(w_A) + diag(t) Stack_n(w_B): dw_A = Stack_backward(diag(1 - t) " + dX0 + "), dw_B likewise with t",
                   "embed_backward (the segments' rows)");
            check_box(true, [&] { return check_embedding(c, p, batch, true, ++seed, fold); }, "embed_backward", {"w_A", "w_B"});
            w.out("dw_A", "H", g.w_A);
            w.out("dw_B", "H", g.w_B);
        }
    }

    // The backward boxes the walk did not write: past a handout's stub, or where a backward written
    // without its trace_backward lines reports fewer stages (a student's own pre_ln_block_backward,
    // say). Each is checked alone, without values (w.mute): on the run's inputs of it where the
    // forward reached it, else on inputs drawn at random (fixed seeds) with the model's shapes; one
    // that meets a stub is not implemented yet. Where the walk ran whole, a layer's parameters are
    // still checked through it (on the stages it did report).
    void boxes_not_walked() {
        pending.clear();
        const bool whole = r.stopped.empty();
        alone = !whole;
        w.mute = true;
        const Tensor<T> none;
        if (!boxed_loss) backward_loss_box(none);
        if (!boxed_output) backward_output_box(none);
        if (pre && !boxed_ln_f) backward_ln_f_box(none);
        for (int l = c.L; l >= 1; l--) {
            if (layers_boxed.count(l)) continue;
            if (pre) {
                backward_pre_ln_ffn_box(l, none);
                backward_pre_ln_ln2_box(l, none);
                backward_pre_ln_attention_box(l, none);
                backward_pre_ln_input_box(l, none);
            } else {
                backward_post_ln_ln2_box(l, none);
                backward_post_ln_ffn_box(l, none);
                backward_post_ln_ln1_box(l, none);
                backward_post_ln_attention_box(l, none);
            }
            if (whole) backward_layer_parameters_box(l);
        }
        if (c.emb_ln && !boxed_emb_ln) backward_embedding_ln_box(none);
        w.mute = !whole;
        backward_embedding_boxes();
    }
};

template <typename T>
Explained<T> explain(const Config& c, const Params<T>& p, const Batch& batch, int values, const ExplainDetail* detail) {
    check_batch(c, batch);
    if (batch.B != 1) throw Error("explain: one sequence (B = 1), got B = " + std::to_string(batch.B));
    if (batch.targets.empty()) throw Error("explain: the batch has no targets");
    if (values < 0 || values > 64) throw Error("explain: values must be in 0..64, got " + std::to_string(values));
    ExplainRun<T> run(c, p, batch, values, detail);
    run.walk();
    link_callees(run.w.steps);
    run.r.steps = std::move(run.w.steps);
    return std::move(run.r);
}

std::string explain_text(const Config& c, const std::vector<ExplainStep>& steps) {
    std::ostringstream o;
    o << "explain: " << variant_name(c.variant) << " (V=" << c.V << " H=" << c.H << " F=" << c.F << " D=" << c.D << " L=" << c.L
      << " A=" << c.A << ", " << activation_name(c.activation) << "); formula indices count from 1, shapes as in the formula boxes\n";
    bool backward = false;
    int number = 0;
    for (const ExplainStep& s : steps) {
        if (number == 0 || (!backward && s.backward)) {
            backward = number > 0;
            o << "\n==== " << (backward ? "backward: d loss / d theta, from the loss down" : "forward") << " ====\n";
        }
        const std::string pad(4 * (std::size_t)s.depth, ' ');
        o << pad << "[" << ++number << "] " << s.box << ":  " << s.formula << "\n";
        o << pad << "     code: " << s.function;
        for (std::size_t k = 0; k < s.in.size(); k++)
            o << (k ? ", " : "   in: ") << s.in[k].name << " (" << s.in[k].symbol << " = " << s.in[k].shape << ")";
        o << "\n";
        for (const ExplainTensor& t : s.out) {
            o << pad << "     " << t.name << "  " << t.symbol << " = " << t.shape << "  [";
            for (std::size_t k = 0; k < t.first.size(); k++) o << (k ? ", " : "") << num(t.first[k]);
            o << (t.more ? ", ...]\n" : "]\n");
        }
        for (const std::string& line : s.picture) o << pad << "        " << line << "\n";
    }
    return o.str();
}

// ---- explain --html: the run as one self-contained page -------------------------------------------
// Each occurrence of "name(" in turn (one pass over the source, not one per line): its line counts
// when the line starts in column 0 with code (not a comment, a preprocessor line or a closing
// brace), the name stands alone (a space, * or & before it) and a { comes before the next ;.
// Only the first such occurrence on a line is looked at, as grep -n would show the line.
int definition_line(const std::string& source, const std::string& name) {
    if (name.empty()) return 0;
    const std::string call = name + "(";
    std::size_t decided = std::string::npos;  // the start of a line already looked at
    for (std::size_t at = source.find(call); at != std::string::npos; at = source.find(call, at + 1)) {
        const std::size_t newline = at == 0 ? std::string::npos : source.rfind('\n', at - 1);
        const std::size_t start = newline == std::string::npos ? 0 : newline + 1;
        if (start == decided) continue;
        const char first = source[start];
        if (first == ' ' || first == '\t' || first == '/' || first == '#' || first == '}' || first == '*') {
            decided = start;
            continue;
        }
        const char before = at == start ? ' ' : source[at - 1];
        if (before != ' ' && before != '*' && before != '&') continue;
        const std::size_t brace = source.find('{', at), semi = source.find(';', at);
        if (brace != std::string::npos && brace < semi) return 1 + (int)std::count(source.begin(), source.begin() + (long)start, '\n');
        decided = start;
    }
    return 0;
}

// The project's plain-text notation (docs/formulas.md, explain_text) as MathML: identifiers with
// ^ and _ scripts (an argument in {} loses its braces, one in () keeps them: X^(0); a second script
// of the same kind scripts the whole: W_i^Q^T is (W_i^Q)^T), sqrt(...), sum_{..}^{..}, (.) as ⊙,
// * as ⊙ (elementwise), Greek names as letters (dgamma as dγ), Xhat as X̂, -inf as −∞; the
// compound operators += -= := == <= >= != -> .. each one operator; words of prose stay words,
// spaced, and a hyphenated word (scatter-add, pre-LN), a possessive (BERT's) and a token
// (<pad>) one word each.
namespace mathml {
struct Parser {
    const std::string& s;
    std::size_t i = 0;
    struct Atom {
        std::string ml;
        bool word = false;  // an identifier or a number (juxtaposed ones get a space between)
    };
    bool space_before() const { return i > 0 && (s[i - 1] == ' '); }
    static bool alpha(char ch) { return std::isalpha((unsigned char)ch) != 0; }
    static bool alnum(char ch) { return std::isalnum((unsigned char)ch) != 0; }
    // A Greek letter's name as the letter, and d before one (a gradient: dgamma) as d and the letter.
    static std::string greek(const std::string& w) {
        static const std::map<std::string, std::string> g = {
            {"gamma", "\u03b3"}, {"beta", "\u03b2"}, {"mu", "\u03bc"}, {"sigma", "\u03c3"}, {"eps", "\u03b5"},
            {"pi", "\u03c0"}, {"theta", "\u03b8"}, {"lambda", "\u03bb"}, {"inf", "\u221e"}};
        const auto it = g.find(w);
        if (it != g.end()) return it->second;
        const auto d = w.size() > 1 && w[0] == 'd' && w != "dinf" ? g.find(w.substr(1)) : g.end();
        return d == g.end() ? w : "d" + d->second;
    }
    // The length of a hyphenated word at j (a word of two letters or more, then -word of two letters
    // or more, once or more: scatter-add, pre-LN, key-padding) not followed by a script or an
    // argument list; 0 if none starts there. Single letters around a - are a difference (k-1, j-i).
    std::size_t hyphenated(std::size_t j) const {
        auto letters = [&](std::size_t k) {
            std::size_t e = k;
            while (e < s.size() && alpha(s[e])) e++;
            return e - k;
        };
        std::size_t e = j + letters(j);
        if (e - j < 2) return 0;
        bool hyphen = false;
        while (e + 2 < s.size() && s[e] == '-' && letters(e + 1) >= 2) e += 1 + letters(e + 1), hyphen = true;
        if (!hyphen || (e < s.size() && (alnum(s[e]) || s[e] == '_' || s[e] == '^' || s[e] == '(' || s[e] == '\''))) return 0;
        return e - j;
    }
    // The compound operators, each one <mo>: (the text, the <mo> set for it). A range's .. (1..n)
    // stands close to its ends.
    static const std::vector<std::pair<std::string, std::string>>& compounds() {
        static const std::vector<std::pair<std::string, std::string>> ops = {
            {"...", "<mo>\u2026</mo>"}, {"+=", "<mo>+=</mo>"}, {"-=", "<mo>\u2212=</mo>"}, {":=", "<mo>\u2254</mo>"},
            {"==", "<mo>==</mo>"}, {"<=", "<mo>\u2264</mo>"}, {">=", "<mo>\u2265</mo>"}, {"!=", "<mo>\u2260</mo>"},
            {"->", "<mo>\u2192</mo>"}, {"..", "<mo lspace=\"0\" rspace=\"0\">..</mo>"}};
        return ops;
    }
    // A name of the code, as FFN_GELU_backward, matmul_tn_acc: the word ending at j continued by
    // _word parts one of which is a suffix of the code's names. Returns the end of the name, or 0.
    std::size_t code_name(std::size_t j) const {
        static const std::set<std::string> suffixes = {"backward", "forward", "logits", "acc", "tn", "nt"};
        bool code = false;
        while (j + 1 < s.size() && s[j] == '_' && alpha(s[j + 1])) {
            std::size_t k = j + 1;
            while (k < s.size() && alnum(s[k])) k++;
            code |= suffixes.count(s.substr(j + 1, k - j - 1)) > 0;
            j = k;
        }
        return code ? j : 0;
    }
    // One atom at i: a group, a token; then its scripts, a sub- and a superscript at a time.
    Atom atom() {
        Atom a = base();
        while (i < s.size() && (s[i] == '^' || s[i] == '_')) {
            std::string sub, sup;
            while (i < s.size() && (s[i] == '^' || s[i] == '_')) {
                std::string& slot = s[i] == '_' ? sub : sup;
                if (!slot.empty()) break;  // X^(L)^T: the T scripts X^(L)
                i++;
                slot = script();
            }
            const bool big = a.ml.find("\u2211") != std::string::npos;
            if (!sub.empty() && !sup.empty()) a.ml = std::string(big ? "<munderover>" : "<msubsup>") + a.ml + sub + sup + (big ? "</munderover>" : "</msubsup>");
            else if (!sub.empty()) a.ml = std::string(big ? "<munder>" : "<msub>") + a.ml + sub + (big ? "</munder>" : "</msub>");
            else a.ml = std::string(big ? "<mover>" : "<msup>") + a.ml + sup + (big ? "</mover>" : "</msup>");
        }
        return a;
    }
    std::string script() {  // the argument of ^ or _
        if (i >= s.size()) return "<mrow></mrow>";
        if (s[i] == '{') {
            i++;
            const std::string in = seq('}');
            if (i < s.size() && s[i] == '}') i++;
            return "<mrow>" + in + "</mrow>";
        }
        if (s[i] == '(') return base().ml;
        if (alnum(s[i])) {
            std::size_t j = i;
            while (j < s.size() && alnum(s[j])) j++;
            const std::string w = s.substr(i, j - i);
            i = j;
            return std::isdigit((unsigned char)w[0]) ? "<mn>" + w + "</mn>" : "<mi>" + greek(w) + "</mi>";
        }
        if (s[i] == '-' && i + 1 < s.size() && s[i + 1] == '1') return i += 2, "<mrow><mo>\u2212</mo><mn>1</mn></mrow>";
        return "<mo>" + markup_text(std::string(1, s[i++])) + "</mo>";
    }
    // The token at i: a bracketed group, an operator, an identifier, a word, a number.
    Atom base() {
        const char ch = s[i];
        if (s.compare(i, 3, "(.)") == 0) return i += 3, Atom{"<mo>\u2299</mo>"};
        for (const auto& op : compounds())
            if (s.compare(i, op.first.size(), op.first) == 0) return i += op.first.size(), Atom{op.second};
        if (ch == '<' && i + 1 < s.size() && alpha(s[i + 1])) {  // a token as <pad>: one word
            std::size_t j = i + 1;
            while (j < s.size() && (alnum(s[j]) || s[j] == '_')) j++;
            if (j < s.size() && s[j] == '>') {
                const std::string t = s.substr(i, j + 1 - i);
                i = j + 1;
                return Atom{"<mtext>" + markup_text(t) + "</mtext>", true};
            }
        }
        if (s.compare(i, 2, "\u00a7") == 0) {  // § and its number: text
            std::size_t j = i + 2;
            while (j < s.size() && std::isdigit((unsigned char)s[j])) j++;
            const std::string t = s.substr(i, j - i);
            i = j;
            return Atom{"<mtext>" + t + "</mtext>", true};
        }
        if (ch == '(' || ch == '{' || ch == '[') {
            const char close = ch == '(' ? ')' : ch == '{' ? '}' : ']';
            i++;
            const std::string in = seq(close);
            const bool closed = i < s.size() && s[i] == close;
            if (closed) i++;
            return Atom{"<mrow><mo>" + std::string(1, ch) + "</mo>" + in + (closed ? "<mo>" + std::string(1, close) + "</mo>" : "") + "</mrow>"};
        }
        if (alpha(ch)) {
            if (const std::size_t h = hyphenated(i)) {  // scatter-add: one word, its hyphen a hyphen
                const std::string w = s.substr(i, h);
                i += h;
                return Atom{"<mtext>" + w + "</mtext>", true};
            }
            std::size_t j = i;
            while (j < s.size() && alnum(s[j])) j++;
            if (j + 1 < s.size() && s[j] == '\'' && s[j + 1] == 's' && (j + 2 == s.size() || !alnum(s[j + 2]))) {  // BERT's: a word
                const std::string w = s.substr(i, j - i);
                i = j + 2;
                return Atom{"<mtext>" + w + "\u2019s</mtext>", true};
            }
            const std::size_t code = code_name(j);
            if (code) {  // a function of the code: its name whole, upright
                const std::string w = s.substr(i, code - i);
                i = code;
                return Atom{"<mi mathvariant=\"normal\">" + markup_text(w) + "</mi>", true};
            }
            const std::string w = s.substr(i, j - i);
            i = j;
            std::string primes;
            while (i < s.size() && s[i] == '\'') primes += "\u2032", i++;
            if (w == "sqrt" && i < s.size() && s[i] == '(') {
                i++;
                const std::string in = seq(')');
                if (i < s.size() && s[i] == ')') i++;
                return Atom{"<msqrt>" + in + "</msqrt>", true};
            }
            if (w == "sum") return Atom{"<mo largeop=\"true\">\u2211</mo>"};
            if (w.size() == 4 && w.compare(1, 3, "hat") == 0 && (std::isupper((unsigned char)w[0]) || std::strchr("xyz", w[0])))  // Xhat, yhat: a hat
                return Atom{"<mover accent=\"true\"><mi>" + w.substr(0, 1) + "</mi><mo>^</mo></mover>" + (primes.empty() ? "" : "<mo>" + primes + "</mo>"), true};
            if (w == "in" && i + 1 < s.size() && s[i] == ' ' && s[i + 1] == '{') return Atom{"<mo>\u2208</mo>"};
            return Atom{"<mi>" + greek(w) + primes + "</mi>", true};
        }
        if (std::isdigit((unsigned char)ch)) {
            std::size_t j = i;
            while (j < s.size() && (std::isdigit((unsigned char)s[j]) || (s[j] == '.' && j + 1 < s.size() && std::isdigit((unsigned char)s[j + 1])))) j++;
            const std::string w = s.substr(i, j - i);
            i = j;
            return Atom{"<mn>" + w + "</mn>", true};
        }
        if ((unsigned char)ch >= 0x80) {  // a UTF-8 character: as text
            std::size_t j = i + 1;
            while (j < s.size() && ((unsigned char)s[j] & 0xC0) == 0x80) j++;
            const std::string t = s.substr(i, j - i);
            i = j;
            return Atom{"<mi>" + t + "</mi>", true};
        }
        i++;
        const std::string op = ch == '-' ? "\u2212" : ch == '*' ? "\u2299" : markup_text(std::string(1, ch));
        return Atom{"<mo>" + op + "</mo>"};
    }
    std::string seq(char close) {
        std::string o;
        bool last_word = false;
        while (i < s.size() && s[i] != close) {
            if (s[i] == ' ') {
                i++;
                continue;
            }
            if (close && (s[i] == ')' || s[i] == '}' || s[i] == ']') && s[i] != close) {  // a stray closer
                o += "<mo>" + std::string(1, s[i++]) + "</mo>";
                last_word = false;
                continue;
            }
            const bool spaced = space_before();
            if (close == 0 && (s[i] == ')' || s[i] == '}' || s[i] == ']')) {
                o += "<mo>" + std::string(1, s[i++]) + "</mo>";
                last_word = false;
                continue;
            }
            const Atom a = atom();
            if (a.word && last_word && spaced) o += "<mspace width=\"0.3em\"></mspace>";
            o += a.ml;
            last_word = a.word;
        }
        return o;
    }
};
}  // namespace mathml

// The formula as a <div class="formula"> of one <math> per piece, a space or a zero-width space
// between them: a long formula wraps there, and nowhere else. The pieces are cut outside brackets (but those of a
// remark, opened after a space) before each " = ", after each ", ", "; " and ": " (at its relations
// and between its equations), and before the prose of " for ", " if ", " as ", " with " and a remark.
std::string to_mathml(const std::string& plain, const std::string& open_tag, const std::string& close_tag) {
    std::vector<std::string> pieces(1);
    std::vector<bool> open;  // the brackets open at i: true for a remark's, one after a space ("(so row i is ...)")
    int depth = 0;           // the brackets open at i but remarks'
    auto word_at = [&](std::size_t i, const char* w) { return plain.compare(i, std::strlen(w), w) == 0; };
    for (std::size_t i = 0; i < plain.size(); i++) {
        const char ch = plain[i];
        const bool top = depth == 0 && !pieces.back().empty();
        if (top && ch == ' ' && (word_at(i, " = ") || word_at(i, " for ") || word_at(i, " if ") || word_at(i, " as ") || word_at(i, " with ") ||
                                 word_at(i, " (") || word_at(i, " ["))) pieces.emplace_back();
        pieces.back() += ch;
        if (ch == '(' || ch == '{' || ch == '[') {
            open.push_back(i > 0 && plain[i - 1] == ' ' && ch != '{');
            depth += !open.back();
        } else if ((ch == ')' || ch == '}' || ch == ']') && !open.empty()) {
            depth -= !open.back();
            open.pop_back();
        }
        if (top && (ch == ',' || ch == ';' || ch == ':') && i + 1 < plain.size() && plain[i + 1] == ' ') pieces.emplace_back();
    }
    std::string o = open_tag;
    for (std::size_t k = 0; k < pieces.size(); k++) {
        mathml::Parser p{pieces[k]};
        // Where a line may break: a space where the text has one, a zero-width space before " = " (its <mo> is spaced).
        if (k) o += pieces[k].compare(0, 3, " = ") == 0 || pieces[k][0] != ' ' ? "&#8203;" : " ";
        o += "<math><mrow>" + p.seq(0) + "</mrow></math>";
    }
    return o + close_tag;
}

// The § of docs/formulas.md a box stands in: the one its formula names, else by its function.
static int section_of(const Config& c, const ExplainStep& s) {
    const std::size_t at = s.formula.find("formulas \u00a7");
    if (at != std::string::npos) return std::atoi(s.formula.c_str() + at + 11);
    const std::string f = s.function;
    auto has = [&](const char* w) { return f.find(w) != std::string::npos; };
    auto starts = [&](const char* w) { return f.rfind(w, 0) == 0; };
    const int model = c.variant == Variant::gpt ? 18 : c.variant == Variant::gpt2 ? 19 : c.variant == Variant::gpt3 ? 20
                      : c.variant == Variant::bert ? 21 : 22;
    if (starts("layer_mask")) return has("Mask_ST") ? 7 : 6;
    if (starts("MultiHeadSA")) return 12;
    if (starts("Attention")) return 10;
    if (starts("Concat")) return 11;
    if (starts("FFN")) return 14;
    if (starts("LayerNorm")) return s.box.find("Embedding") != std::string::npos || s.box.find("Masked-LM") != std::string::npos ? 23 : 15;
    if (starts("Embedding") || starts("embed_")) return has("segments") ? 21 : 4;
    if (starts("CrossEntropy_logits")) return s.box == "Loss" ? (is_causal(c.variant) ? 25 : 26) : 17;
    if (starts("Softmax_backward")) return 10;  // P = Softmax(S) of a head
    if (starts("Softmax")) return 5;
    if (starts("CrossEntropy") || starts("matmul")) return 17;
    if (starts("MLMHead")) return 23;
    if (starts("add")) return model;
    return model;
}

// A number as JSON (%.9g: a float's value exactly; "-inf", "inf", "nan" as strings).
static std::string json_num(double v, const char* format = "%.9g") {
    if (std::isnan(v)) return "\"nan\"";
    if (std::isinf(v)) return v < 0 ? "\"-inf\"" : "\"inf\"";
    char b[40];
    std::snprintf(b, sizeof b, format, v);
    return b;
}

// WCAG 2's relative luminance of a colour 0xRRGGBB: each channel linearised from sRGB, weighted.
static double luminance(unsigned rgb) {
    auto lin = [&](int shift) {
        const double c = ((rgb >> shift) & 255) / 255.0;
        return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
    };
    return 0.2126 * lin(16) + 0.7152 * lin(8) + 0.0722 * lin(0);
}

// WCAG 2's contrast ratio of two colours, 1 to 21 (text needs 4.5).
static double contrast(unsigned a, unsigned b) {
    const double la = luminance(a), lb = luminance(b);
    return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

// The colour a cell's number is printed in on a fill: black or white, whichever contrasts more
// (at least 4.58:1 on any fill, so every step of every ramp reads).
static unsigned ink(unsigned fill) { return contrast(fill, 0x000000) >= contrast(fill, 0xffffff) ? 0x000000 : 0xffffff; }

// The colours of the heat maps: 8 steps from white (0) to red (positive) and to blue (negative),
// of the largest |value| of the tensor, and (b1..b8) along BLUES, the SVG pictures' scale, of a
// probability; dark mode from near black. Each step prints its numbers in its own ink(), so a
// number never takes the colour of the text around the map (a failing gradient's red).
static std::string heat_css() {
    auto cell = [&](const std::string& cls, unsigned fill) { return ".hm i." + cls + "{background:" + hex_colour(fill) + ";color:" + hex_colour(ink(fill)) + "}"; };
    std::string light, dark;
    for (int k = 1; k <= 8; k++) {
        const double t = k / 8.0;
        const std::string n = std::to_string(k);
        light += cell("p" + n, ramp({0xffffff, 0xb2182b}, t)) + cell("n" + n, ramp({0xffffff, 0x2166ac}, t)) + cell("b" + n, ramp(BLUES, t));
        dark += cell("p" + n, ramp({0x202124, 0xff6b5b}, t)) + cell("n" + n, ramp({0x202124, 0x5fa8ff}, t)) + cell("b" + n, ramp({0x202124, 0x9ecae1}, t));
    }
    return light + cell("z", 0xffffff) + cell("u", 0xd0d0d0) + "\n@media (prefers-color-scheme: dark){" + dark + cell("z", 0x202124) + "}\n";
}

// The page's style: the contents beside the boxes, light and dark. The page scrolls inside <body>,
// not the window (html does not scroll): a browser asked for page.html#b35 scrolls <body> to the
// box, and a picture of the window (headless Chromium's --screenshot, which draws the window's
// first screen of the document, blank once the document itself is scrolled) shows the box.
static const char* const PAGE_CSS = R"(
:root{color-scheme:light dark;--fg:#1b1b1b;--bg:#fff;--muted:#555;--line:#ccc;--pass:#1a7f37;--fail:#c62828;--box:#f6f8fa}
@media (prefers-color-scheme: dark){:root{--fg:#e6e6e6;--bg:#16171a;--muted:#a8a8a8;--line:#444;--pass:#4cc26a;--fail:#ff6b6b;--box:#1e2024}
 svg{background:#fff}}
html{height:100%;overflow:hidden}body:focus{outline:none}
body{font:15px/1.45 system-ui,sans-serif;color:var(--fg);background:var(--bg);margin:0;display:grid;grid-template-columns:22em 1fr;
 height:100%;overflow:auto;box-sizing:border-box}
nav{position:sticky;top:0;height:100vh;overflow:auto;border-right:1px solid var(--line);padding:.5em 1em;font-size:13px;box-sizing:border-box}
nav ol{padding-left:1.6em;margin:.2em 0}nav>ol{list-style:none;padding-left:0}nav a{color:inherit}
main{padding:0 1.5em 4em;min-width:0}header{padding:0 1.5em;grid-column:1/3;border-bottom:1px solid var(--line)}
section{border:1px solid var(--line);border-radius:6px;padding:.3em 1em .8em;margin:1em 0;background:var(--box)}
section:focus,section:target{outline:3px solid #4c8bf5}
section.d1{margin-left:2.5em}section.box{content-visibility:auto;contain-intrinsic-size:auto 30em}h3{margin:.4em 0;font-size:16px}
.fail{color:var(--fail)}.pass{color:var(--pass)}nav .tag.inside{color:var(--muted)}.missing{color:var(--muted)}section.bad{border-color:var(--fail);border-width:2px}
.tag{font-size:12px;border:1px solid currentColor;border-radius:3px;padding:0 .3em;margin-left:.4em;white-space:nowrap}
.formula{text-align:center;margin:.3em 0;font-size:1.15em;line-height:1.9}.formula math{display:inline math}
.plain,.code,.note{color:var(--muted);font-size:13px;margin:.2em 0}
code{font-size:12.5px}figure{margin:.6em 0;overflow-x:auto}figcaption{font-size:13px;margin-bottom:.2em}
details.sheet{font-size:13px;margin:.2em 0}details.sheet pre{white-space:pre-wrap;font-size:12.5px;max-height:30em;overflow:auto;
 background:var(--bg);border:1px solid var(--line);padding:.4em .6em}
.hm{display:inline-grid;gap:0;border:1px solid var(--line);line-height:0}.hm i{display:block;width:12px;height:12px;font-style:normal}
.hm.num i{width:5.4em;height:auto;font:10.5px/1.9 monospace;text-align:center;white-space:nowrap;overflow:hidden}
.hm i.x{background:repeating-linear-gradient(45deg,#bbb 0 2px,#eee 2px 4px);color:#333}
.hm:focus{outline:2px solid #4c8bf5}.hm i.cur{outline:2px solid #000;position:relative}
.tok{display:flex;flex-wrap:wrap;gap:3px}.tok span{border:1px solid var(--line);border-radius:3px;padding:0 .4em;background:var(--bg);
 font:13px/1.5 monospace;display:inline-flex;gap:.4em;align-items:baseline}.tok small{color:var(--muted);font-size:10.5px}
.key{display:inline-flex;align-items:center;gap:.4em;white-space:nowrap;vertical-align:bottom}
.legend{display:inline-block;width:120px;height:10px;border:1px solid var(--line);flex:none;
 background:linear-gradient(90deg,#2166ac,#fff,#b2182b)}.legend.prob{background:linear-gradient(90deg,#fff,#08306b)}
@media (prefers-color-scheme: dark){.legend{background:linear-gradient(90deg,#5fa8ff,#202124,#ff6b5b)}
 .legend.prob{background:linear-gradient(90deg,#202124,#9ecae1)}}
output.cell{font:12px monospace;margin-left:.5em}
.check{font-size:13.5px;margin:.4em 0;padding:.3em .6em;border-left:4px solid currentColor}
.pics svg{max-width:100%;height:auto}
@media print{html,body{height:auto;overflow:visible}body{display:block}nav{display:none}section{break-inside:avoid;background:none}section.box{content-visibility:visible}header{border:0}
 .hm i{print-color-adjust:exact;-webkit-print-color-adjust:exact}}
)";

// Keyboard: n / p (or j / k) move to the next / previous box, f / F to the next / previous failing
// box; on a focused heat map the arrow keys move a marked cell whose (i, j) and value show beside
// it; a box's § of the formula sheet opens with its text. Opened with #bN (or any id), the page
// lays the box out and scrolls <body> to it, then focuses it, when its script runs and again on
// load, and keeps it at the top for 90 frames while the boxes above it, laid out as they come near
// the view (content-visibility), take their height, unless the reader scrolls first (a reload or
// a step back returns to where the reader was instead); without one it focuses <body>, so that
// the keys scroll it from the start. Opened with ?rendered after its URL,
// <body data-rendered="boxes B, math M"> counts the sections and the formulas (each <math> of it)
// the browser laid out (the browser tests read it; it lays out the whole page, which a reader's
// browser does box by box as they come into view: content-visibility).
static const char* const PAGE_SCRIPT = R"(
(function(){var s=[].slice.call(document.querySelectorAll('main section'));
if(/[?&]rendered\b/.test(location.search)){var r=0,m=0;s.forEach(function(x){if(x.getBoundingClientRect().height>0)r++;});
 [].forEach.call(document.querySelectorAll('.formula'),function(f){var ms=f.querySelectorAll('math'),ok=ms.length>0;
  [].forEach.call(ms,function(x){if(!(x.getBoundingClientRect().width>0))ok=false;});if(ok)m++;});
 document.body.setAttribute('data-rendered','boxes '+r+', math '+m);}
var sc=document.body,key='explain-scroll:'+location.pathname;
function land(){var id=decodeURIComponent(location.hash.slice(1)),t=id&&document.getElementById(id);if(!t)return false;
 var b=t.closest('section')||t;b.style.contentVisibility='visible';t.scrollIntoView();if(b.hasAttribute('tabindex'))b.focus({preventScroll:true});
 var k=0,moved=false,evs=['wheel','keydown','mousedown','touchstart'];function off(){moved=true;}
 evs.forEach(function(e){window.addEventListener(e,off,{capture:true,once:true});});
 (function keep(){var d=t.getBoundingClientRect().top;if(!moved&&k++<90){if(Math.abs(d)>1)sc.scrollTop+=d;requestAnimationFrame(keep);}
  else evs.forEach(function(e){window.removeEventListener(e,off,{capture:true});});})();return true;}
function start(){var nv=performance.getEntriesByType?performance.getEntriesByType('navigation')[0]:null,y=null;
 try{y=sessionStorage.getItem(key);}catch(e){}
 if(nv&&(nv.type==='reload'||nv.type==='back_forward')&&y!==null){sc.scrollTop=+y;return;}
 if(!land()&&document.activeElement===sc){sc.tabIndex=-1;sc.focus({preventScroll:true});}}
start();window.addEventListener('load',start);window.addEventListener('hashchange',land);
window.addEventListener('pagehide',function(){try{sessionStorage.setItem(key,String(sc.scrollTop));}catch(e){}});
function at(){var k=0;for(var i=0;i<s.length;i++)if(s[i].getBoundingClientRect().top<=10)k=i;return k;}
document.addEventListener('keydown',function(e){if(e.target.closest&&e.target.closest('.hm'))return;
 var d={n:1,j:1,p:-1,k:-1,f:1,F:-1}[e.key];if(!d||e.ctrlKey||e.metaKey||e.altKey)return;
 var c=document.activeElement&&document.activeElement.closest?document.activeElement.closest('main section'):null;
 var i=c?s.indexOf(c):at(),t=null;
 if(e.key==='f'||e.key==='F'){for(var j=i+d;j>=0&&j<s.length;j+=d)if(s[j].classList.contains('bad')){t=s[j];break;}}
 else t=s[Math.max(0,Math.min(s.length-1,i+d))];if(t){t.focus();t.scrollIntoView();}});
[].forEach.call(document.querySelectorAll('.hm'),function(h){var cs=h.children,n=cs.length,w=+h.dataset.cols,k=0,o=h.nextElementSibling;
 function show(){for(var i=0;i<n;i++)cs[i].classList.remove('cur');cs[k].classList.add('cur');if(o)o.textContent=say(cs[k]);}
 h.addEventListener('keydown',function(e){var d={ArrowRight:1,ArrowLeft:-1,ArrowDown:w,ArrowUp:-w}[e.key];if(d===undefined)return;
  e.preventDefault();k=Math.max(0,Math.min(n-1,k+d));show();});
 h.addEventListener('focus',show);h.addEventListener('mouseover',function(e){var i=[].indexOf.call(cs,e.target);if(i>=0){k=i;if(o)o.textContent=say(cs[k]);}});});
function say(c){return c.title+(c.textContent?' '+c.textContent:'');}
[].forEach.call(document.querySelectorAll('details.sheet'),function(d){d.addEventListener('toggle',function(){
 var t=document.getElementById('s'+d.dataset.s);if(d.open&&t&&!d.querySelector('pre'))d.appendChild(t.content.cloneNode(true));});});
})();
)";

// A tensor's kept rows and columns shrunk to fold: the first and last fold/2 of the kept ones.
static void refold(ExplainTensor& t, int fold) {
    auto pick = [&](const std::vector<int>& kept) {
        std::vector<int> k;
        for (std::size_t a = 0; a < kept.size(); a++)
            if ((int)kept.size() <= fold || (int)a < fold / 2 || (int)a >= (int)kept.size() - fold / 2) k.push_back((int)a);
        return k;
    };
    const std::vector<int> ra = pick(t.rows), ca = pick(t.cols);
    std::vector<int> rows, cols;
    std::vector<double> cells;
    for (int a : ra) rows.push_back(t.rows[a]);
    for (int b : ca) cols.push_back(t.cols[b]);
    for (int a : ra)
        for (int b : ca) cells.push_back(t.cells[(std::size_t)a * t.cols.size() + b]);
    t.rows = rows, t.cols = cols, t.cells = cells;
}

static std::string left_out(const ExplainTensor& t) {
    const int R = t.dims.size() == 2 ? t.dims[0] : 1, C = t.dims.empty() ? 1 : t.dims.back();
    std::string o;
    auto gap = [&](const std::vector<int>& kept, int count, const char* what) {
        if ((int)kept.size() == count) return;
        const int a = kept[kept.size() / 2 - 1] + 2, b = kept[kept.size() / 2];
        o += std::string(o.empty() ? "" : "; ") + what + " " + std::to_string(a) + ".." + std::to_string(b) + " (" +
             std::to_string(b - a + 1) + ") left out";
    };
    gap(t.rows, R, "rows");
    gap(t.cols, C, t.dims.size() == 2 ? "columns" : "entries");
    return o;
}


// A cell's number: 3 significant digits, short ("−5.65e-4", a minus sign, no zero in the exponent).
static std::string cell_num(double v) {
    if (std::isinf(v)) return v < 0 ? "\u2212\u221e" : "\u221e";
    const double a = std::fabs(v);
    std::string o = num(v, a != 0 && (a < 1e-3 || a >= 1e5) ? "%.2e" : "%.3g");
    const std::size_t e = o.find('e');
    if (e != std::string::npos && e + 2 < o.size() && o[e + 2] == '0') o.erase(e + 2, 1);
    if (o[0] == '-') o = "\u2212" + o.substr(1);
    return o;
}

// The cells shown with their numbers in them: a tensor of up to NUMBERED x NUMBERED shown values.
static const std::size_t NUMBERED = 16;

// A tensor's heat map: a cell per value shown, its (i, j) and value in its title. On the probability
// scale (every ExplainTensor::Scale but values) white 0 to blue 1; else red positive, blue negative, white 0, with
// scale the |value| of the colour scale's ends (0: the tensor's own largest |value|; maps drawn side
// by side for comparison share one). NaN: not compared (grey); -inf, and the entries where mask (a
// mask of the same rows and columns, for P) is -inf: masked, hatched. Up to NUMBERED x NUMBERED
// values the cells print their numbers.
static std::string heat_map(const ExplainTensor& t, const std::string& role, double scale = 0, const ExplainTensor* mask = nullptr) {
    const bool vec = t.dims.size() < 2, prob = t.scale != ExplainTensor::Scale::values;
    const bool fits = mask && mask->rows == t.rows && mask->cols == t.cols && mask->cells.size() == t.cells.size();
    auto masked_at = [&](std::size_t at) { return fits && mask->cells[at] == -INFINITY; };
    double m = 0;
    bool inf = false, unknown = false;
    for (std::size_t a = 0; a < t.cells.size(); a++) {
        const double v = t.cells[a];
        if (std::isfinite(v)) m = std::max(m, std::fabs(v));
        else if (std::isnan(v)) unknown = true;
        else inf = true;
        inf |= masked_at(a);
    }
    if (scale > 0) m = scale;
    if (prob) m = 1;
    const bool numbers = t.rows.size() <= NUMBERED && t.cols.size() <= NUMBERED;
    std::ostringstream o;
    const std::string out = left_out(t);
    o << "<figure><figcaption><b>" << markup_text(t.name) << "</b> (" << role << ") " << markup_text(t.symbol) << " = " << t.shape;
    if (!out.empty()) o << " &middot; <span class=\"note\">folded: " << out << "</span>";
    // The legend: the colour scale between its ends, and what hatching and grey mean; each a
    // .key that stays on one line.
    if (prob) o << " &middot; <span class=\"key\">0 <span class=\"legend prob\" aria-hidden=\"true\"></span> 1</span>";
    else o << " &middot; <span class=\"key\">&minus;" << num(m) << " <span class=\"legend\" aria-hidden=\"true\"></span> " << num(m) << "</span>";
    o << (inf ? " &middot; <span class=\"key\">hatched: masked (&minus;inf" + std::string(prob && !t.cells.empty() && t.scale != ExplainTensor::Scale::mask ? ", so 0" : "") + ")</span>" : "")
      << (unknown ? " &middot; <span class=\"key\">grey: not compared</span>" : "") << "</figcaption>";
    o << "<div class=\"hm" << (numbers ? " num" : "") << "\" tabindex=\"0\" data-cols=\"" << t.cols.size() << "\" style=\"grid-template-columns:repeat("
      << t.cols.size() << ",auto)\" aria-label=\"" << markup_text(t.name) << ": " << t.rows.size() * t.cols.size()
      << (numbers ? " values; each cell holds its value, its title its (i, j), counted from 1\">" : " values; each cell's title holds its (i, j), counted from 1, and its value\">");
    for (std::size_t a = 0; a < t.rows.size(); a++)
        for (std::size_t b = 0; b < t.cols.size(); b++) {
            const std::size_t at = a * t.cols.size() + b;
            const double v = t.cells[at];
            std::string cls = "z";
            if (std::isnan(v)) cls = "u";
            else if (!std::isfinite(v) || masked_at(at)) cls = "x";
            else if (m > 0) {
                const int k = std::min(8, (int)std::lround(std::fabs(v) / m * 8));
                if (k > 0) cls = (prob ? "b" : v > 0 ? "p" : "n") + std::to_string(k);
            }
            o << "<i class=" << cls << " title=\"(";
            if (vec) o << t.cols[b] + 1;
            else o << t.rows[a] + 1 << "," << t.cols[b] + 1;
            o << ")";  // a cell printing its number: the number is its value, the title its place
            if (!numbers || std::isnan(v)) o << " " << (std::isnan(v) ? std::string("not compared") : num(v));
            o << (masked_at(at) ? " masked" : "") << "\">";
            if (numbers && !std::isnan(v)) o << cell_num(v);
            o << "</i>";
        }
    o << "</div><output class=\"cell\"></output></figure>\n";
    return o.str();
}

// The tokens (the input box's x, and BERT's segments t) as a row of labelled cells: position i, then
// the token's text (or its id) and, if that differs, its id.
static std::string token_row(const ExplainTensor& t, const std::vector<std::string>& labels, const std::string& role) {
    const bool ids = t.name == "x" || t.name == "x'";
    std::ostringstream o;
    o << "<figure><figcaption><b>" << markup_text(t.name) << "</b> (" << role << ") " << markup_text(t.symbol) << " = " << t.shape
      << (ids ? " &middot; the tokens: position i, the token, its id" : " &middot; the segment of each position") << "</figcaption><div class=\"tok\">";
    for (std::size_t b = 0; b < t.cols.size(); b++) {
        const int i = t.cols[b];
        const std::string v = num(t.cells[b], "%.0f");
        const std::string label = ids && i < (int)labels.size() ? labels[i] : v;
        o << "<span title=\"" << markup_text(t.name) << "_" << i + 1 << " = " << v << "\"><small>" << i + 1 << "</small><b>" << markup_text(label) << "</b>";
        if (label != v) o << "<small>" << v << "</small>";
        o << "</span>";
    }
    o << "</div></figure>\n";
    return o.str();
}

// The tensor's picture as a HeatPanel (token labels), for heatmap_svg: P of a head (masked where
// mask, of the same rows and columns, is -inf), or a mask.
static HeatPanel panel_of(const ExplainTensor& t, const std::vector<std::string>& labels, const std::string& title, const ExplainTensor* mask = nullptr) {
    HeatPanel q;
    q.title = title;
    for (int i : t.rows) q.rows.push_back(i < (int)labels.size() ? labels[i] : std::to_string(i + 1));
    for (int j : t.cols) q.cols.push_back(j < (int)labels.size() ? labels[j] : std::to_string(j + 1));
    const bool fits = mask && mask->rows == t.rows && mask->cols == t.cols && mask->cells.size() == t.cells.size();
    for (std::size_t a = 0; a < t.cells.size(); a++) {
        const double v = t.cells[a];
        q.masked.push_back(v == -INFINITY || (fits && mask->cells[a] == -INFINITY));
        q.values.push_back(q.masked.back() ? 0.0 : v);
    }
    return q;
}
static std::string inline_svg(const std::string& svg) {
    const std::size_t at = svg.find("<svg");
    return at == std::string::npos ? svg : svg.substr(at);
}

// The first of `tries` that is a regular file, read, and its path in used. None: an error naming the
// file if it was `given` (what it is: "the source"), else "" and used "".
static std::string read_first(const std::vector<std::string>& tries, const std::string& given, const char* what, std::string& used) {
    for (const std::string& p : tries) {
        if (path_kind(p) != PathKind::regular) continue;
        used = p;
        return read_file(p);
    }
    if (!given.empty()) throw Error(std::string("explain --html: cannot read ") + what + " '" + given + "'");
    used.clear();
    return "";
}

static std::string read_source(const std::string& given, std::string& used) {
    std::vector<std::string> tries;
    if (!given.empty()) tries.push_back(given);
    else {
        tries.push_back(__FILE__);
        const std::string e = executable_path();
        if (!e.empty()) tries.push_back(e.substr(0, e.rfind('/') + 1) + "transformer.cpp");
    }
    return read_first(tries, given, "the source", used);
}

// The formula sheet, docs/formulas.md, for the § texts: the given path, else docs/formulas.md beside
// the executable, else where the program was built; "" (used "") if none is found.
static std::string read_sheet(const std::string& given, std::string& used) {
    std::vector<std::string> tries;
    if (!given.empty()) tries.push_back(given);
    else {
        const std::string e = executable_path();
        if (!e.empty()) tries.push_back(e.substr(0, e.rfind('/') + 1) + "docs/formulas.md");
        const std::string built = __FILE__;
        tries.push_back(built.substr(0, last_separator(built) + 1) + "docs/formulas.md");
    }
    return read_first(tries, given, "the formula sheet", used);
}

// § n of the sheet: its heading's title and its text up to the next heading ("" if it has none).
static std::string sheet_section(const std::string& sheet, int n, std::string& title) {
    const std::string head = "\n## \u00a7" + std::to_string(n) + " ";
    const std::size_t at = sheet.find(head);
    if (at == std::string::npos) return "";
    const std::size_t eol = sheet.find('\n', at + 1), end = sheet.find("\n## ", at + 1);
    title = sheet.substr(at + head.size(), eol - at - head.size());
    return sheet.substr(eol + 1, end == std::string::npos ? std::string::npos : end - eol - 1);
}

// A count and its noun: "1 box", "3 boxes".
static std::string count_of(std::size_t k, const char* one, const char* many) {
    return std::to_string(k) + " " + (k == 1 ? one : many);
}

// explain --html's page being written: the run, its labels and source, and the page's HTML and JSON
// streams. Each member writes one part of the page, in the page's order.
struct ExplainPageWriter {
    const Config& c;
    const Batch& batch;
    const ExplainHtml& o;
    Explained<float>& e;
    ExplainPage& page;
    std::string stop_fn;  // where a handout's stub stopped the run: "Mask_AR" (Explained::stopped_at)
    std::string source;   // transformer.cpp's text, for the functions' lines ("": not found)
    std::string sheet;    // docs/formulas.md's text, for the boxes' § ("": not found)
    std::vector<std::string> labels;  // one per token
    std::vector<int> failing;         // the boxes whose gradient check fails
    bool passing_maps = true;         // passing gradients drawn too (all gradients' maps fit a third of the page's cells)
    int fold = 0;
    std::string what;  // the model: variant and sizes
    std::ostringstream h, json;
    std::ostringstream tail;   // the § texts, after the boxes
    std::set<int> sections;    // the § whose text tail holds

    ExplainPageWriter(const Config& c_, const Batch& batch_, const ExplainHtml& o_, Explained<float>& e_, ExplainPage& page_)
        : c(c_), batch(batch_), o(o_), e(e_), page(page_), labels(o_.labels) {}

    // Every tensor of the page: each box's inputs and outputs, and its check's gradients drawn
    // (the failing ones, and the passing ones of a box's own check with passing_maps; a passing
    // gradient of the whole walk takes one line: the box's output shows its values).
    bool drawn(const ExplainGradient& g) const { return !g.pass || (passing_maps && !g.model); }
    template <class F> void each_tensor(F f) {
        for (ExplainStep& s : e.steps) {
            for (ExplainTensor& t : s.in) f(t);
            for (ExplainTensor& t : s.out) f(t);
            for (ExplainGradient& g : s.check.gradients)
                if (drawn(g)) f(g.fd), f(g.backward), f(g.diff);
        }
    }
    // A tensor kept whole: no dimension beyond the tokens n (the tokens, a mask, P), n <= 64.
    bool small(const ExplainTensor& t) const {
        if (batch.n > 64) return false;
        for (int d : t.dims)
            if (d > batch.n) return false;
        return true;
    }
    // The fold of the large tensors shrinks until the page's heat maps hold at most o.cells cells.
    // Passing gradients are drawn when all gradients' maps fit in a third of the budget.
    void refold_to_budget() {
        std::size_t gradient_cells = 0;
        for (const ExplainStep& s : e.steps)
            for (const ExplainGradient& g : s.check.gradients) gradient_cells += g.model && g.pass ? 0 : 3 * g.backward.cells.size();
        passing_maps = gradient_cells <= o.cells / 3;
        fold = o.fold;
        for (;;) {
            std::size_t cells = 0;
            each_tensor([&](ExplainTensor& t) { cells += t.cells.size(); });
            if (cells <= o.cells || fold <= 4) break;
            fold /= 2;
            each_tensor([&](ExplainTensor& t) {
                if (!small(t)) refold(t, fold);
            });
        }
    }

    // The checks' tally: boxes checked, not implemented and failing; the failing boxes innermost
    // first: those failing on their own, then those failing through a box they call (ExplainCheck::callee).
    void count_checks() {
        for (int through = 0; through < 2; through++)
            for (std::size_t k = 0; k < e.steps.size(); k++) {
                const ExplainCheck& ck = e.steps[k].check;
                if (through == 0 && ck.done && ck.missing.empty()) page.checked++;
                if (through == 0 && ck.done && !ck.missing.empty()) page.missing++;
                const int via = ck.callee;
                if (!ck.done || ck.pass || (via >= 0) != (through == 1)) continue;
                failing.push_back((int)k);
                page.failing_boxes.push_back("[" + std::to_string(k + 1) + "] " + e.steps[k].box + " (" + ck.function + ")" +
                                             (via >= 0 ? ", through [" + std::to_string(via + 1) + "] (" + e.steps[(std::size_t)via].check.function + ")" : ""));
            }
        page.failing = (int)failing.size();
        page.boxes = (int)e.steps.size();
    }

    // The page's head and its header: the model, the tokens, the loss, where a stub stopped the run,
    // the checks' summary and how to read the page.
    void header_html() {
        const int n = batch.n;
        h << "<!DOCTYPE html>\n" << SVG_MARK << "\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
          << "<title>explain: " << markup_text(o.title) << ", " << markup_text(what) << "</title>\n<style>" << PAGE_CSS << heat_css() << GRADIENT_CSS << "</style></head>\n<body>\n";
        h << "<header><h1>explain: " << markup_text(o.title) << "</h1><p>" << markup_text(what) << "; tokens x = ";
        for (int i = 0; i < n; i++) h << (i ? ", " : "") << markup_text(labels[i]);
        h << "; loss " << (std::isnan(e.loss) ? std::string("not reached") : num(e.loss, "%.9g")) << ". One forward and backward pass, formula box by formula box, in the order of <code>explain</code>'s text; "
          << "formula indices count from 1.</p>";
        if (!e.stopped.empty())
            h << "<p class=\"stop\"><b>The run stops at " << markup_text(stop_fn) << ": " << markup_text(e.stopped) << ".</b> "
              << "The forward boxes are those the run reached; every backward box is still checked alone: on the run's own input of it where the "
                 "forward reached the box, else on inputs drawn at random (fixed seed) with the model's shapes, marked <i>random inputs</i>. "
                 "A box whose backward, or a function it needs, is not written yet is marked <span class=\"missing\">not implemented yet</span> "
                 "(" << count_of((std::size_t)page.missing, "box", "boxes") << "): neither pass nor fail. Boxes past the stop show no values.</p>";
        h << "<p>";
        if (failing.empty() && page.checked == 1) {
            h << "<span class=\"pass\">The one backward box checked passes its gradient check.</span>";
        } else if (failing.empty()) {
            h << "<span class=\"pass\">All " << page.checked << " backward boxes pass their gradient check.</span>";
        } else {
            h << "<span class=\"fail\"><b>" << failing.size() << " of " << count_of((std::size_t)page.checked, "backward box", "backward boxes")
              << (failing.size() == 1 ? " fails its" : " fail their") << " gradient check:</b></span> ";
            for (std::size_t k = 0; k < failing.size(); k++) {  // innermost first: those failing through a box they call last
                const ExplainCheck& ck = e.steps[failing[k]].check;
                h << (k ? ", " : "") << "<a href=\"#b" << failing[k] + 1 << "\">[" << failing[k] + 1 << "] " << markup_text(e.steps[failing[k]].box)
                  << " (" << markup_text(ck.function) << ")</a>";
                const int via = ck.callee;
                if (via >= 0) h << " through <a href=\"#b" << via + 1 << "\">[" << via + 1 << "]</a>";
            }
            const ExplainCheck& last = e.steps[failing.back()].check;
            if (last.callee >= 0) h << ". Fix the boxes failing on their own first: the others fail through a box they call.";
        }
        if (page.missing) h << " <span class=\"missing\">" << page.missing << (page.missing == 1 ? " more is" : " more are") << " not implemented yet.</span>";
        h << "</p><p class=\"note\">Each backward box is checked twice. Its function alone: its own forward, in double, on this run's input of it, "
             "contracted with a fixed random R of its output's shape (s = sum(R &#8857; f)); its backward's gradient of s is compared "
             "with central finite differences (s(x + h) &minus; s(x &minus; h)) / 2h, h = 1e-6, at every entry of a small gradient "
             "(of a large one, the entry of largest |g| and entries drawn at random); an entry passes if |num &minus; g| &le; 1e-6 max(1, |g|). "
             "And the walk: each gradient the model's own backward (model_backward) reports since the box before, and the parameters the box names, "
             "marked <i>(its line's)</i>, against central differences of its line: that intermediate (or parameter) moved in the model's own forward "
             "(model_forward, in double), the stages it feeds directly taken with the gradients the backward reported for them, nothing beyond them moving. "
             "Where the function passes alone and a gradient of the walk fails, the box fails in the function that joins the parts "
             "(pre_ln_block_backward, model_backward, ...); a wrong line fails in its box alone. "
             "Heat maps: red positive, blue negative, white 0, scaled to each tensor's largest |value|; probabilities (P, Y = Softmax(Z), "
             "the masks) white 0 to blue 1; hatched: masked; tensors of up to " << NUMBERED << " x " << NUMBERED << " values print them in their cells; "
             "a cell's title gives its (i, j) and, where the cell does not print it, its value (or focus the map and use the arrow keys). Keys: n / p next / previous box, "
             "f / F next / previous failing box. A backward box lists each gradient on its own, in the backward's order, with its verdict, "
             "its worst entry and, where one fits, the relation that explains a failure; a failing gradient is drawn three times on one scale "
             "(finite difference, backward, their difference)";
        h << (passing_maps ? "; a passing one under \"its heat maps\"." : "; on a page this large the passing ones take one line each.");
        if (fold < o.fold) h << " To keep the page small, tensors are folded beyond " << fold << " x " << fold << " (the first and last " << fold / 2 << " rows and columns)";
        else h << " Tensors beyond " << fold << " x " << fold << " are folded (the first and last " << fold / 2 << " rows and columns)";
        h << (batch.n <= 64 ? "; the tokens, the masks and P are never folded." : ".");
        h << (page.source.empty() ? " (transformer.cpp was not found: no line numbers.)" : "")
          << (page.sheet.empty() ? " (docs/formulas.md was not found: the boxes name their &sect; without its text.)" : "") << "</p></header>\n";
    }

    // The table of contents: consecutive boxes with the same heading form a group; a group (a block,
    // the backward of a layer) with a failing box is marked.
    void contents_html() {
        h << "<nav aria-label=\"Formula boxes\"><h2>Boxes</h2><ol>\n";
        for (std::size_t k = 0; k < e.steps.size();) {
            std::size_t end = k;
            bool bad = false;
            while (end < e.steps.size() && e.steps[end].box == e.steps[k].box) bad |= e.steps[end].check.done && !e.steps[end].check.pass, end++;
            const bool backward_start = e.steps[k].backward && (k == 0 || !e.steps[k - 1].backward);
            if (backward_start) h << "</ol><h2>Backward</h2><ol>\n";
            h << "<li class=\"group\"><a href=\"#b" << k + 1 << "\">" << markup_text(e.steps[k].box) << "</a>"
              << (bad ? " <span class=\"tag inside\">contains a failing box</span>" : "") << "<ol>";
            for (std::size_t j = k; j < end; j++) {
                const ExplainStep& s = e.steps[j];
                std::string label = s.function.substr(0, s.function.find_first_of(" ,("));
                if (s.depth) label = !s.backward ? s.box
                                     : s.function.find(',') == std::string::npos ? s.function : s.function.substr(0, s.function.find(',')) + ")";
                const bool fails = s.check.done && s.check.missing.empty() && !s.check.pass;
                h << "<li value=\"" << j + 1 << "\"" << (s.depth || fails ? std::string(" class=\"") + (s.depth ? "d1" : "") + (s.depth && fails ? " " : "") + (fails ? "fail" : "") + "\"" : "")
                  << "><a href=\"#b" << j + 1 << "\">" << markup_text(label) << "</a>";
                if (s.check.done && !s.check.missing.empty()) h << " <span class=\"tag missing\">not implemented yet</span>";
                else if (s.check.done) h << (s.check.pass ? " <span class=\"pass\">&#10003;</span>" : " <span class=\"tag fail\">&#10007; fails</span>");
                if (s.check.done && s.check.random) h << " <span class=\"note\">(random inputs)</span>";
                h << "</li>";
            }
            h << "</ol></li>\n";
            k = end;
        }
        h << "</ol></nav>\n<main>\n";
    }

    // A box's function(s), each with its line in transformer.cpp; returns them as JSON members.
    std::string code_html(const ExplainStep& s) {
        h << "<p class=\"code\">code: ";
        std::string lines_json;
        const std::string& f = s.function;
        std::size_t i = 0;
        while (i < f.size()) {
            if (std::isalpha((unsigned char)f[i]) || f[i] == '_') {
                std::size_t j = i;
                while (j < f.size() && (std::isalnum((unsigned char)f[j]) || f[j] == '_' || f[j] == ':')) j++;
                const std::string w = f.substr(i, j - i);
                const int line = w.find(':') == std::string::npos && w.size() > 2 ? definition_line(source, w) : 0;
                if (line) {
                    h << "<code>" << markup_text(w) << "</code> <span class=\"note\">(transformer.cpp:" << line << ")</span>";
                    lines_json += std::string(lines_json.empty() ? "" : ",") + json_escape(w) + ":" + std::to_string(line);
                } else h << markup_text(w);
                i = j;
            } else h << markup_text(std::string(1, f[i++]));
        }
        h << "</p>\n";
        return lines_json;
    }

    // The gradient rows of a backward box: the three heat maps side by side; the row's text takes
    // its verdict's colour, its maps' captions the page's.
    static constexpr const char* GRADIENT_CSS =
        ".grad{margin:.6em 0}.grad>p{margin:.2em 0}.maps{display:flex;flex-wrap:wrap;gap:0 1.5em;align-items:flex-start}"
        ".maps figure{margin:.2em 0}.grad .maps{color:var(--fg)}.gf math{display:inline math}.relation,.callee{font-weight:600}.first-failing{margin:.3em 0}details>summary{cursor:pointer;font-size:13px}\n";

    // An entry of a tensor of `shape` (row-major k, 0-based) as the formulas count it: "(2, 3)", "(5)".
    static std::string entry_of(const std::vector<int>& shape, std::size_t k) {
        if (shape.empty()) return "";
        const std::size_t C = (std::size_t)shape.back();
        return shape.size() == 2 ? "(" + std::to_string(k / C + 1) + ", " + std::to_string(k % C + 1) + ")" : "(" + std::to_string(k + 1) + ")";
    }

    // A backward box's gradient check: its verdict, the worst entry, the callee it fails through,
    // then each gradient on its own; the same as JSON.
    void check_html(std::size_t box, const ExplainCheck& ck) {
        const std::string entry = entry_of(ck.shape, ck.at);
        const std::string on = ck.random ? " on inputs drawn at random (fixed seed; the run did not reach this box)" : "";
        if (!ck.missing.empty())
            h << "<div class=\"check missing\" role=\"status\"><b>Not implemented yet</b>: " << markup_text(ck.function) << " is not checked" << on
              << ", the run meets a stub (" << markup_text(ck.missing) << ")";
        else
            h << "<div class=\"check " << (ck.pass ? "pass" : "fail") << "\" role=\"status\"><b>" << (ck.pass ? "Gradient check passes" : "Gradient check fails")
              << "</b> (" << markup_text(ck.function)
              << (ck.composition.empty() ? " against central differences of its forward" : ": the walk's gradients against central differences of their lines")
              << on << "): " << ck.entries << " entries compared; ";
        if (!ck.problem.empty()) h << markup_text(ck.problem) << "; ";
        if (!ck.tensor.empty())
            h << "worst: " << markup_text(ck.tensor) << " " << entry << " of " << shape_str(ck.shape) << ", finite difference " << num(ck.num, "%.9g")
              << ", backward " << num(ck.ana, "%.9g") << ", |num &minus; g| / max(1, |g|) = " << num(ck.err, "%.3g") << " against the tolerance "
              << num(ck.tol) << " (h = " << num(ck.h) << ")";
        h << "</div>\n";
        if (ck.callee >= 0) {
            const ExplainStep& callee = e.steps[(std::size_t)ck.callee];
            h << "<p class=\"callee fail\" data-callee=\"b" << ck.callee + 1 << "\">This box fails through <a href=\"#b" << ck.callee + 1 << "\">["
              << ck.callee + 1 << "] " << markup_text(callee.function.substr(0, callee.function.find(','))) << (callee.function.find(',') == std::string::npos ? "" : ")")
              << "</a>, which " << markup_text(ck.function) << " calls and whose own check fails: fix that first.</p>\n";
        }
        if (!ck.composition.empty()) h << "<p class=\"composition fail\">" << markup_text(ck.composition) << ".</p>\n";
        if (!ck.first_failing.empty()) h << "<p class=\"first-failing\">" << markup_text(ck.first_failing) << "</p>\n";
        json << ",\"check\":{\"pass\":" << (!ck.missing.empty() ? "null" : ck.pass ? "true" : "false") << ",\"missing\":" << json_escape(ck.missing)
             << ",\"random\":" << (ck.random ? "true" : "false") << ",\"function\":" << json_escape(ck.function)
             << ",\"tensor\":" << json_escape(ck.tensor) << ",\"entry\":" << json_escape(entry) << ",\"num\":" << json_num(ck.num)
             << ",\"ana\":" << json_num(ck.ana) << ",\"err\":" << json_num(ck.err) << ",\"tol\":" << json_num(ck.tol)
             << ",\"h\":" << json_num(ck.h) << ",\"entries\":" << ck.entries << ",\"problem\":" << json_escape(ck.problem)
             << ",\"callee\":" << (ck.callee >= 0 ? std::to_string(ck.callee + 1) : "null")
             << ",\"composition\":" << json_escape(ck.composition) << ",\"first_failing\":" << json_escape(ck.first_failing)
             << ",\"gradients\":[";
        for (std::size_t i = 0; i < ck.gradients.size(); i++) gradient_html(box, i, ck);
        json << "]}";
    }

    // Gradient i of box's check: its formula line, verdict, worst entry and relation, and three heat
    // maps on one colour scale (the finite difference, the backward, their difference); a passing
    // gradient's maps folded away.
    void gradient_html(std::size_t box, std::size_t i, const ExplainCheck& ck) {
        const ExplainGradient& g = ck.gradients[i];
        const char* verdict = g.pass ? "passes" : "fails";
        const std::string entry = entry_of(g.shape, g.at);
        const bool brief = !drawn(g);  // one line: a passing gradient of the walk, or a page too large to draw every gradient
        h << "<div class=\"grad " << (g.pass ? "pass" : "fail") << "\" id=\"b" << box + 1 << "-g" << i + 1 << "\" data-gradient=\"" << markup_text(g.name)
          << "\" data-verdict=\"" << verdict << "\"><p><b>" << markup_text(g.name) << "</b> ";
        if (!brief) h << to_mathml(g.formula, "<span class=\"gf\" title=\"" + markup_text(g.formula) + "\">", "</span>") << " &middot; ";
        h << "<span class=\"verdict " << (g.pass ? "pass" : "fail") << "\">" << verdict << "</span>: ";
        if (brief) h << g.entries << (g.entries == 1 ? " entry" : " entries") << ", error &le; " << num(g.err, "%.3g");
        else if (!g.problem.empty()) h << markup_text(g.problem);
        else if (!brief)
            h << g.entries << (g.entries == 1 ? " entry" : " entries") << " compared; worst " << entry << ": finite difference " << num(g.num, "%.9g")
              << ", backward " << num(g.ana, "%.9g") << ", error " << num(g.err, "%.3g");
        if (!g.relation.empty()) h << ". <span class=\"relation\">" << markup_text(g.relation) << "</span>";
        h << "</p>\n";
        json << (i ? "," : "") << "{\"name\":" << json_escape(g.name) << ",\"formula\":" << json_escape(g.formula) << ",\"pass\":" << (g.pass ? "true" : "false")
             << ",\"entries\":" << g.entries << ",\"entry\":" << json_escape(entry) << ",\"num\":" << json_num(g.num) << ",\"ana\":" << json_num(g.ana)
             << ",\"err\":" << json_num(g.err) << ",\"relation\":" << json_escape(g.relation) << ",\"problem\":" << json_escape(g.problem) << "}";
        if (!g.problem.empty() || brief) {
            h << "</div>\n";
            return;
        }
        double scale = 0;
        for (const ExplainTensor* t : {&g.fd, &g.backward})
            for (double v : t->cells)
                if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
        h << (g.pass ? "<details><summary>its heat maps</summary>" : "") << "<div class=\"maps\">";
        for (const ExplainTensor* t : {&g.fd, &g.backward, &g.diff}) h << heat_map(*t, markup_text(g.name), scale);
        h << "</div>" << (g.pass ? "</details>" : "") << "</div>\n";
    }

    // The prefix of the ids of box k's figure: its own, so that each figure renders alone.
    static std::string figure_ids(std::size_t k) { return "f" + std::to_string(k + 1) + "-"; }
    // The mask a P of box k (a MultiHeadSA box, or a head inside one) stands under: the box's input
    // "Mask" (null if none is shown).
    const ExplainTensor* mask_of(std::size_t k) const {
        for (std::size_t j = k + 1; j-- > 0;) {
            if (e.steps[j].function == "MultiHeadSA") {
                for (const ExplainTensor& t : e.steps[j].in)
                    if (t.name == "Mask") return &t;
                return nullptr;
            }
            if (e.steps[j].depth == 0) return nullptr;
        }
        return nullptr;
    }
    // Box k's pictures: a layer's mask, and each head's P with the tokens as labels.
    void pictures_html(std::size_t k) {
        const ExplainStep& s = e.steps[k];
        if (!s.out.empty() && s.out[0].scale == ExplainTensor::Scale::mask && !s.out[0].cells.empty())
            h << "<div class=\"pics\">" << inline_svg(heatmap_svg({panel_of(s.out[0], labels, s.out[0].name)}, 1, "The mask of " + s.box, {}, false, figure_ids(k)))
              << "</div>\n";
        if (s.depth == 0 && !s.backward) {  // a forward box's heads: each one's P
            std::vector<HeatPanel> heads;
            for (std::size_t j = k + 1; j < e.steps.size() && e.steps[j].depth == 1; j++)
                for (const ExplainTensor& t : e.steps[j].out)
                    if (t.scale == ExplainTensor::Scale::attention) heads.push_back(panel_of(t, labels, e.steps[j].box, mask_of(k)));
            if (!heads.empty())
                h << "<div class=\"pics\">" << inline_svg(heatmap_svg(heads, std::min<int>(4, (int)heads.size()), "Attention P of each head, " + s.box,
                                                                      {"Row i: the query token, column j: the key token."}, true, figure_ids(k)))
                  << "</div>\n";
        }
    }

    // Box k's tensors: a heat map each (the tokens a row of labelled cells), and their values as JSON.
    void tensors_html(std::size_t k) {
        const ExplainStep& s = e.steps[k];
        json << ",\"tensors\":[";
        bool first = true;
        for (int io = 0; io < 2; io++)
            for (const ExplainTensor& t : io ? s.out : s.in) {
                if (k == 0 && s.box == "Input" && t.dims.size() == 1) h << token_row(t, labels, io ? "out" : "in");
                else h << heat_map(t, io ? "out" : "in", 0, t.scale == ExplainTensor::Scale::attention ? mask_of(k) : nullptr);
                json << (first ? "" : ",") << "{\"role\":\"" << (io ? "out" : "in") << "\",\"name\":" << json_escape(t.name) << ",\"symbol\":"
                     << json_escape(t.symbol) << ",\"shape\":[";
                for (std::size_t a = 0; a < t.dims.size(); a++) json << (a ? "," : "") << t.dims[a];
                json << "],\"first\":[";
                for (std::size_t a = 0; a < t.first.size(); a++) json << (a ? "," : "") << json_num(t.first[a], "%.17g");
                json << "],\"more\":" << (t.more ? "true" : "false") << ",\"rows\":[";
                for (std::size_t a = 0; a < t.rows.size(); a++) json << (a ? "," : "") << t.rows[a] + 1;
                json << "],\"cols\":[";
                for (std::size_t a = 0; a < t.cols.size(); a++) json << (a ? "," : "") << t.cols[a] + 1;
                json << "],\"values\":[";
                for (std::size_t a = 0; a < t.cells.size(); a++) json << (a ? "," : "") << json_num(t.cells[a]);
                json << "]}";
                first = false;
            }
        json << "],\"picture\":[";
        for (std::size_t a = 0; a < s.picture.size(); a++) json << (a ? "," : "") << json_escape(s.picture[a]);
        json << "]}";
    }

    // The box's § of the formula sheet: a <details> whose text (the sheet's Markdown as it is), once
    // per § at the page's end in a <template id="sN">, the page's script puts in when it opens.
    void sheet_html(int sec) {
        std::string title;
        const std::string text = sheet_section(sheet, sec, title);
        if (text.empty()) {
            h << "<p class=\"note\">formulas &sect;" << sec << " (" << (sheet.empty() ? "docs/formulas.md was not found" : "not in docs/formulas.md")
              << ": its text is not in the page)</p>\n";
            return;
        }
        h << "<details class=\"sheet\" data-s=\"" << sec << "\"><summary>formulas &sect;" << sec << " " << markup_text(title) << "</summary></details>\n";
        if (sections.insert(sec).second) tail << "<template id=\"s" << sec << "\"><pre>" << markup_text(text) << "</pre></template>\n";
    }

    // Box k: its heading, formula, code, check, pictures and tensors.
    void box_html(std::size_t k) {
        const ExplainStep& s = e.steps[k];
        const int sec = section_of(c, s);
        const bool bad = s.check.done && !s.check.pass;
        h << "<section id=\"b" << k + 1 << "\" class=\"box" << (s.depth ? " d1" : "") << (bad ? " bad" : "") << "\" tabindex=\"-1\" aria-labelledby=\"h" << k + 1 << "\">\n";
        h << "<h3 id=\"h" << k + 1 << "\">[" << k + 1 << "] " << markup_text(s.box);
        if (s.check.done && !s.check.missing.empty()) h << " <span class=\"tag missing\">not implemented yet</span>";
        else if (s.check.done) h << (s.check.pass ? " <span class=\"tag pass\">gradient check passes</span>" : " <span class=\"tag fail\">gradient check fails</span>");
        h << "</h3>\n" << to_mathml(s.formula) << "\n";
        h << "<p class=\"plain\"><code>" << markup_text(s.formula) << "</code></p>\n";
        sheet_html(sec);
        const std::string lines_json = code_html(s);
        json << (k ? "," : "") << "\n{\"number\":" << k + 1 << ",\"depth\":" << s.depth << ",\"backward\":" << (s.backward ? "true" : "false") << ",\"box\":" << json_escape(s.box)
             << ",\"formula\":" << json_escape(s.formula) << ",\"section\":" << sec << ",\"function\":" << json_escape(s.function)
             << ",\"lines\":{" << lines_json << "}";
        if (s.check.done) check_html(k, s.check);
        pictures_html(k);
        tensors_html(k);
        h << "</section>\n";
        page.maths++;
    }

    // The boxes in order under the headings Forward and Backward, and the JSON of the run around them.
    void boxes_html() {
        json << "{\"title\":" << json_escape(o.title) << ",\"model\":" << json_escape(what) << ",\"variant\":" << json_escape(variant_name(c.variant))
             << ",\"tokens\":[";
        for (int i = 0; i < batch.n; i++) json << (i ? "," : "") << batch.tokens[i];
        json << "],\"loss\":" << json_num(e.loss) << ",\"stopped\":" << json_escape(e.stopped) << ",\"fold\":" << fold << ",\"source\":" << json_escape(page.source) << ",\"boxes\":[";
        bool backward = false;
        for (std::size_t k = 0; k < e.steps.size(); k++) {
            if (k == 0 || (!backward && e.steps[k].backward)) {
                backward = k > 0;
                if (backward && !e.stopped.empty())
                    h << "<p class=\"stop\" role=\"status\"><b>The run stops at " << markup_text(stop_fn) << ": " << markup_text(e.stopped) << ".</b></p>\n";
                h << "<h2>" << (backward ? "Backward: d loss / d &theta;, from the loss down" : "Forward") << "</h2>\n";
            }
            box_html(k);
        }
        json << "]}";
    }
};

ExplainPage explain_html(const Config& c, const Params<float>& p, const Batch& batch, const ExplainHtml& o) {
    ExplainDetail d;
    d.fold = o.fold, d.backwards = o.backwards, d.stubs = true;
    Explained<float> e = explain(c, p, batch, o.values, &d);
    ExplainPage page;
    page.loss = e.loss, page.stopped = e.stopped, page.stopped_at = e.stopped_at;
    ExplainPageWriter pw(c, batch, o, e, page);
    pw.stop_fn = e.stopped_at;
    pw.source = read_source(o.source, page.source);
    pw.sheet = read_sheet(o.sheet, page.sheet);
    pw.refold_to_budget();
    for (int i = (int)pw.labels.size(); i < batch.n; i++) pw.labels.push_back(std::to_string(batch.tokens[i]));
    pw.count_checks();
    pw.what = std::string(variant_name(c.variant)) + " (V=" + std::to_string(c.V) + " H=" + std::to_string(c.H) +
              " F=" + std::to_string(c.F) + " D=" + std::to_string(c.D) + " L=" + std::to_string(c.L) +
              " A=" + std::to_string(c.A) + ", " + activation_name(c.activation) + ")";
    pw.header_html();
    pw.contents_html();
    pw.boxes_html();
    std::string js = pw.json.str();
    for (std::size_t at = js.find("</"); at != std::string::npos; at = js.find("</", at + 2)) js.replace(at, 2, "<\\/");
    pw.h << "</main>\n" << pw.tail.str() << "<script type=\"application/json\" id=\"explain-data\">" << js << "</script>\n<script>" << PAGE_SCRIPT << "</script>\n</body></html>\n";
    page.html = pw.h.str();
    return page;
}

template Explained<float> explain(const Config&, const Params<float>&, const Batch&, int, const ExplainDetail*);
template Explained<double> explain(const Config&, const Params<double>&, const Batch&, int, const ExplainDetail*);

// ================================================================================================
// PLATFORM: every call to the operating system, behind the functions transformer.hpp declares
// under this banner: what a path names, sizes and seeking past 2 GiB, directories, the durable
// writers (AtomicFile, StagedDir) and the signals that clean up after them, the training loop's
// stop, the program's own path, the temporary directory, memory. The rest of the program calls
// these and nothing of the system; a port to another system changes this section alone. Each
// function has a POSIX branch (Linux, macOS, the BSDs) and a Windows one (_WIN32: MinGW-w64 and
// MSVC), with the same contract and the same error messages.
// ================================================================================================

// ---- Windows: UTF-8 names through the wide functions -----------------------------------------------
// The program's strings are UTF-8. Windows' narrow functions (fopen, _stat, argv) read the ANSI code
// page, which holds few characters; its wide ones (_wfopen, CreateFileW, ...) take any name, so every
// name is converted to UTF-16 on its way in and back to UTF-8 on its way out. The paths this section
// makes (executable_path, real_path, temporary_directory) use '/' between their parts, as Windows
// accepts and as the rest of the program splits paths; the ones it is given may use '\' or '/'.
#if defined(_WIN32)
static std::wstring wide(const std::string& s) {
    if (s.empty()) return std::wstring();
    const int n = ::MultiByteToWideChar(CP_UTF8, 0, s.data(), (int)s.size(), nullptr, 0);
    std::wstring w((std::size_t)std::max(n, 0), L'\0');
    if (n > 0) ::MultiByteToWideChar(CP_UTF8, 0, s.data(), (int)s.size(), &w[0], n);
    return w;
}

static std::string narrow(const wchar_t* w, std::size_t len) {
    if (len == 0) return std::string();
    const int n = ::WideCharToMultiByte(CP_UTF8, 0, w, (int)len, nullptr, 0, nullptr, nullptr);
    std::string s((std::size_t)std::max(n, 0), '\0');
    if (n > 0) ::WideCharToMultiByte(CP_UTF8, 0, w, (int)len, &s[0], n, nullptr, nullptr);
    return s;
}

static std::string narrow(const std::wstring& w) { return narrow(w.data(), w.size()); }

// A path made by Windows with '/' between its parts.
static std::string forward_slashes(std::string path) {
    std::replace(path.begin(), path.end(), '\\', '/');
    return path;
}

// errno for a Windows error code, so that strerror words a failure as it does on POSIX.
static int errno_of(DWORD error) {
    switch (error) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_DRIVE:
    case ERROR_BAD_NETPATH:
    case ERROR_BAD_NET_NAME:
        return ENOENT;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
    case ERROR_LOCK_VIOLATION:
        return EACCES;
    case ERROR_WRITE_PROTECT:
        return EROFS;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL:
        return ENOSPC;
    case ERROR_FILE_EXISTS:
    case ERROR_ALREADY_EXISTS:
        return EEXIST;
    case ERROR_DIRECTORY:
        return ENOTDIR;
    case ERROR_DIR_NOT_EMPTY:
        return ENOTEMPTY;
    case ERROR_FILENAME_EXCED_RANGE:
        return ENAMETOOLONG;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
        return ENOMEM;
    case ERROR_INVALID_NAME:
        return EINVAL;
    default:
        return EIO;
    }
}

// errno set from GetLastError; false, for `return failed();`.
static bool failed() {
    errno = errno_of(::GetLastError());
    return false;
}

// An existing file or directory opened for its metadata alone (no read or write access, every
// sharing mode, links followed); INVALID_HANDLE_VALUE when it cannot be.
static HANDLE open_metadata(const std::string& path) {
    return ::CreateFileW(wide(path).c_str(), 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr, OPEN_EXISTING,
                         FILE_FLAG_BACKUP_SEMANTICS, nullptr);
}

// The path an open handle reaches, every link resolved, without the "\\?\" prefix
// GetFinalPathNameByHandleW puts before it ("\\?\UNC\server\share" is "//server/share"); "" on failure.
static std::string final_path(HANDLE h) {
    std::vector<wchar_t> buf(MAX_PATH + 1);
    for (;;) {
        const DWORD n = ::GetFinalPathNameByHandleW(h, buf.data(), (DWORD)buf.size(), FILE_NAME_NORMALIZED | VOLUME_NAME_DOS);
        if (n == 0) return "";
        if (n < buf.size()) {
            std::string p = narrow(buf.data(), n);
            if (p.rfind("\\\\?\\UNC\\", 0) == 0) p = "\\\\" + p.substr(8);
            else if (p.rfind("\\\\?\\", 0) == 0) p = p.substr(4);
            return forward_slashes(p);
        }
        buf.resize((std::size_t)n + 1);
    }
}
#endif

// ---- Paths and files -----------------------------------------------------------------------------
// A path's separators and its root: '/' and "/" on POSIX; on Windows '\' or '/', and a root of a
// drive ("C:\", or "C:" alone: that drive's current directory) or of the current drive ("\").
#if defined(_WIN32)
static bool is_separator(char ch) { return ch == '/' || ch == '\\'; }

static std::size_t root_length(const std::string& path) {
    const std::size_t drive = path.size() >= 2 && path[1] == ':' && std::isalpha((unsigned char)path[0]) ? 2 : 0;
    return drive < path.size() && is_separator(path[drive]) ? drive + 1 : drive;
}

// The separator to put after dir: the one it uses ('\' when it holds one), else '/'.
static char separator_for(const std::string& dir) { return dir.find('\\') != std::string::npos ? '\\' : '/'; }
#else
static bool is_separator(char ch) { return ch == '/'; }

static std::size_t root_length(const std::string& path) { return !path.empty() && path[0] == '/' ? 1 : 0; }

static char separator_for(const std::string&) { return '/'; }
#endif

std::size_t last_separator(const std::string& path) {
    const std::size_t root = root_length(path);
    for (std::size_t k = path.size(); k > root; k--)
        if (is_separator(path[k - 1])) return k - 1;
    return root > 0 ? root - 1 : std::string::npos;
}

std::string trim_separators(const std::string& path) {
    std::string p = path;
    const std::size_t keep = std::max<std::size_t>(root_length(p), 1);
    while (p.size() > keep && is_separator(p.back())) p.pop_back();
    return p;
}

#if defined(_WIN32)
// A file opened for reading shares deletion as well, so that a file the program reads can be
// replaced (renamed over) while it is open, as on POSIX; _wfopen would refuse that to everyone. A
// directory opens too (FILE_FLAG_BACKUP_SEMANTICS), as fopen opens one on Linux: is_directory tells.
std::FILE* open_file(const std::string& path, const char* mode) {
    const std::string m = mode;
    if (m.empty() || m[0] != 'r' || m.find('+') != std::string::npos) return ::_wfopen(wide(path).c_str(), wide(mode).c_str());
    const HANDLE h = ::CreateFileW(wide(path).c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                   OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, nullptr);
    if (h == INVALID_HANDLE_VALUE) {
        failed();
        return nullptr;
    }
    const int fd = ::_open_osfhandle((intptr_t)h, _O_RDONLY | (m.find('b') != std::string::npos ? _O_BINARY : _O_TEXT));
    if (fd < 0) {
        ::CloseHandle(h);
        return nullptr;
    }
    std::FILE* f = ::_fdopen(fd, mode);
    if (!f) ::_close(fd);
    return f;
}
#else
std::FILE* open_file(const std::string& path, const char* mode) {
    return std::fopen(path.c_str(), mode);
}
#endif

#if defined(_WIN32)
// _wstat64 refuses a directory named with a separator after it ("dir\"): it is asked without one.
PathKind path_kind(const std::string& path) {
    struct _stat64 st;
    if (::_wstat64(wide(trim_separators(path)).c_str(), &st) != 0) return PathKind::missing;
    const unsigned type = (unsigned)st.st_mode & _S_IFMT;
    if (type == _S_IFREG) return PathKind::regular;
    if (type == _S_IFDIR) return PathKind::directory;
    if (type == _S_IFIFO) return PathKind::fifo;
    if (type == _S_IFCHR) return PathKind::device;
    return PathKind::other;
}

long long file_size(const std::string& path) {
    struct _stat64 st;
    return ::_wstat64(wide(path).c_str(), &st) == 0 ? (long long)st.st_size : -1;
}

long long file_size(std::FILE* f) {
    struct _stat64 st;
    return ::_fstat64(::_fileno(f), &st) == 0 ? (long long)st.st_size : -1;
}

bool is_directory(std::FILE* f) {
    const HANDLE h = (HANDLE)::_get_osfhandle(::_fileno(f));
    BY_HANDLE_FILE_INFORMATION info;
    return h != INVALID_HANDLE_VALUE && ::GetFileInformationByHandle(h, &info) && (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY);
}

bool seek_to(std::FILE* f, long long at) {
    return ::_fseeki64(f, at, SEEK_SET) == 0;
}

// A directory's permissions are its access list, which no mode bit shows: a probe file made there
// (and deleted when closed) answers whether files can be made.
bool directory_writable(const std::string& dir) {
    const std::string probe = path_in_dir(dir, ".transformer-probe." + std::to_string(::GetCurrentProcessId()));
    const HANDLE h = ::CreateFileW(wide(probe).c_str(), GENERIC_WRITE, 0, nullptr, CREATE_NEW,
                                   FILE_ATTRIBUTE_TEMPORARY | FILE_ATTRIBUTE_HIDDEN | FILE_FLAG_DELETE_ON_CLOSE, nullptr);
    if (h == INVALID_HANDLE_VALUE) return ::GetLastError() == ERROR_FILE_EXISTS || failed();
    ::CloseHandle(h);
    return true;
}

bool directory_entries(const std::string& dir, std::vector<std::string>& names) {
    WIN32_FIND_DATAW found;
    const HANDLE h = ::FindFirstFileW(wide(path_in_dir(dir, "*")).c_str(), &found);
    if (h == INVALID_HANDLE_VALUE) {
        const DWORD error = ::GetLastError();
        if (error == ERROR_FILE_NOT_FOUND) return true;  // a drive's root may hold nothing, not even "." and ".."
        errno = path_kind(dir) == PathKind::regular ? ENOTDIR : errno_of(error);
        return false;
    }
    do {
        const std::string name = narrow(found.cFileName);
        if (name != "." && name != "..") names.push_back(name);
    } while (::FindNextFileW(h, &found));
    ::FindClose(h);
    return true;
}

std::string real_path(const std::string& path) {
    const HANDLE h = open_metadata(path);
    if (h == INVALID_HANDLE_VALUE) return "";
    const std::string r = final_path(h);
    ::CloseHandle(h);
    return r;
}
#else
PathKind path_kind(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PathKind::missing;
    if (S_ISREG(st.st_mode)) return PathKind::regular;
    if (S_ISDIR(st.st_mode)) return PathKind::directory;
    if (S_ISFIFO(st.st_mode)) return PathKind::fifo;
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return PathKind::device;
    return PathKind::other;
}

long long file_size(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? (long long)st.st_size : -1;
}

long long file_size(std::FILE* f) {
    struct stat st;
    return ::fstat(::fileno(f), &st) == 0 ? (long long)st.st_size : -1;
}

bool is_directory(std::FILE* f) {
    struct stat st;
    return ::fstat(::fileno(f), &st) == 0 && S_ISDIR(st.st_mode);
}

bool seek_to(std::FILE* f, long long at) {
    return ::fseeko(f, (off_t)at, SEEK_SET) == 0;
}

bool directory_writable(const std::string& dir) {
    return ::access(dir.c_str(), W_OK | X_OK) == 0;
}

bool directory_entries(const std::string& dir, std::vector<std::string>& names) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return false;
    while (const dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    ::closedir(d);
    return true;
}

std::string real_path(const std::string& path) {
    char* real = ::realpath(path.c_str(), nullptr);
    const std::string r = real ? real : "";
    std::free(real);
    return r;
}
#endif

std::string dir_of(const std::string& path) {
    const std::size_t root = root_length(path);
    const std::size_t slash = last_separator(path);
    if (slash == std::string::npos) return ".";
    return slash + 1 <= root ? path.substr(0, root) : path.substr(0, slash);
}

// The file that writing to `path` replaces: symbolic links are followed, so a link stays a link
// and its target gets the new contents.
#if defined(_WIN32)
// On Windows a symbolic link is a reparse point with the tag IO_REPARSE_TAG_SYMLINK (other reparse
// points, such as a cloud drive's files, are files to write in place); it is followed by opening
// it, which reaches the final target, so a missing target is an error.
std::string resolve_output_path(const std::string& path) {
    WIN32_FIND_DATAW found;
    const HANDLE find = ::FindFirstFileW(wide(trim_separators(path)).c_str(), &found);
    if (find == INVALID_HANDLE_VALUE) return path;
    ::FindClose(find);
    if (!(found.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT) || found.dwReserved0 != IO_REPARSE_TAG_SYMLINK) return path;
    const HANDLE h = open_metadata(path);
    if (h == INVALID_HANDLE_VALUE) {
        failed();
        throw Error("cannot read the symbolic link '" + path + "': " + std::strerror(errno));
    }
    const std::string target = final_path(h);
    ::CloseHandle(h);
    if (target.empty()) throw Error("cannot read the symbolic link '" + path + "': its target has no name");
    return target;
}

// Two names are the same file if they reach the same file index on the same volume, or (for files
// that do not exist yet) the same name, in either case, in the same real directory: Windows' file
// systems compare names without case.
std::string file_identity(const std::string& path) {
    const std::string p = resolve_output_path(path);
    const HANDLE h = open_metadata(p);
    if (h != INVALID_HANDLE_VALUE) {
        BY_HANDLE_FILE_INFORMATION info;
        const BOOL got = ::GetFileInformationByHandle(h, &info);
        ::CloseHandle(h);
        if (got)
            return "file " + std::to_string(info.dwVolumeSerialNumber) + ":" +
                   std::to_string(((unsigned long long)info.nFileIndexHigh << 32) | info.nFileIndexLow);
    }
    const std::string real = real_path(dir_of(p));
    const std::size_t slash = last_separator(p);
    std::wstring name = wide((real.empty() ? dir_of(p) : real) + "/" + p.substr(slash == std::string::npos ? 0 : slash + 1));
    if (!name.empty()) ::CharLowerBuffW(&name[0], (DWORD)name.size());
    return "path " + narrow(name);
}

// GetTempPathW: %TMP%, else %TEMP%, else %USERPROFILE%, else the Windows directory.
std::string temporary_directory() {
    wchar_t buf[MAX_PATH + 2];
    const DWORD n = ::GetTempPathW(MAX_PATH + 2, buf);
    if (n == 0 || n > MAX_PATH + 1) return ".";
    return forward_slashes(trim_separators(narrow(buf, n)));
}

long long process_id() {
    return (long long)::GetCurrentProcessId();
}

bool stdout_is_terminal() {
    return ::_isatty(::_fileno(stdout)) != 0;
}

std::string executable_path() {
    std::vector<wchar_t> buf(MAX_PATH + 1);
    for (;;) {
        const DWORD n = ::GetModuleFileNameW(nullptr, buf.data(), (DWORD)buf.size());
        if (n == 0) return "";
        if (n < buf.size()) return forward_slashes(narrow(buf.data(), n));
        if (buf.size() > 65536) return "";
        buf.resize(buf.size() * 2);
    }
}
#else
std::string resolve_output_path(const std::string& path) {
    std::string p = path;
    for (int hops = 0; hops < 40; hops++) {
        struct stat st;
        if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
        std::vector<char> buf((std::size_t)PATH_MAX + 1);
        const ssize_t k = ::readlink(p.c_str(), buf.data(), buf.size() - 1);
        if (k < 0) throw Error("cannot read the symbolic link '" + p + "': " + std::strerror(errno));
        const std::string target(buf.data(), (std::size_t)k);
        p = target[0] == '/' ? target : dir_of(p) + "/" + target;
    }
    throw Error("'" + path + "': too many levels of symbolic links");
}

// Two names are the same file if they reach the same inode, or (for files that do not exist yet)
// the same name in the same real directory.
std::string file_identity(const std::string& path) {
    const std::string p = resolve_output_path(path);
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) return "inode " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    char* real = ::realpath(dir_of(p).c_str(), nullptr);
    const std::string dir = real ? real : dir_of(p);
    std::free(real);
    return "path " + dir + "/" + p.substr(p.rfind('/') == std::string::npos ? 0 : p.rfind('/') + 1);
}

std::string temporary_directory() {
    const char* tmp = std::getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

long long process_id() {
    return (long long)::getpid();
}

bool stdout_is_terminal() {
    return ::isatty(STDOUT_FILENO) != 0;
}

// The absolute path of the running program: /proc/self/exe on Linux, _NSGetExecutablePath (made
// absolute by realpath) on macOS; empty elsewhere, where explain --html looks for the source at the
// path it was compiled from alone.
std::string executable_path() {
#if defined(__APPLE__)
    char exe[4096];
    uint32_t size = sizeof exe;
    if (_NSGetExecutablePath(exe, &size) != 0) return "";
    char* real = ::realpath(exe, nullptr);
    const std::string e = real ? real : "";
    std::free(real);
    return e;
#elif defined(__linux__)
    char exe[4096];
    const ssize_t k = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    return k > 0 ? std::string(exe, (std::size_t)k) : std::string();
#else
    return "";
#endif
}
#endif

// ---- The program's start: its standard files and its arguments ---------------------------------------
#if defined(_WIN32)
// The console's output code page before platform_start made it UTF-8 (0: unchanged), put back when
// the program ends, normally or by a console event.
static UINT g_console_code_page = 0;

static void restore_console_code_page() {
    if (g_console_code_page != 0) ::SetConsoleOutputCP(g_console_code_page);
}

// Standard input, output and error in binary mode: the bytes as written, LF never made CR LF, so
// that output redirected to a file is the same as on POSIX. A console shows the UTF-8 the program
// writes when its output code page is UTF-8 (65001); it is set for the run and put back at the end.
void platform_start() {
    ::_setmode(::_fileno(stdin), _O_BINARY);
    ::_setmode(::_fileno(stdout), _O_BINARY);
    ::_setmode(::_fileno(stderr), _O_BINARY);
    const UINT page = ::GetConsoleOutputCP();
    if (page != 0 && page != CP_UTF8 && ::SetConsoleOutputCP(CP_UTF8)) {
        g_console_code_page = page;
        std::atexit(restore_console_code_page);
    }
}

// argv holds the ANSI code page's characters alone (others become '?'); the wide command line holds
// them all, split as the C runtime splits it (CommandLineToArgvW).
std::vector<std::string> program_arguments(int argc, char** argv) {
    int n = 0;
    LPWSTR* w = ::CommandLineToArgvW(::GetCommandLineW(), &n);
    std::vector<std::string> args;
    if (!w || n != argc) {  // not the command line argv came from: argv as it is
        if (w) ::LocalFree(w);
        for (int k = 0; k < argc; k++) args.push_back(argv[k]);
        return args;
    }
    for (int k = 0; k < n; k++) args.push_back(narrow(std::wstring(w[k])));
    ::LocalFree(w);
    return args;
}

// One word as cmd.exe and PowerShell pass it to the program: as it is when it is plain, else in
// double quotes, a quote inside as \" and the backslashes before a quote doubled, as the C
// runtime reads a command line back. cmd.exe still expands %NAME% and PowerShell $NAME inside
// double quotes; file names rarely hold them.
std::string shell_word(const std::string& s) {
    const bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./\\=+:,@-") ==
                                         std::string::npos;
    if (plain) return s;
    std::string q = "\"";
    std::size_t backslashes = 0;
    for (char ch : s) {
        if (ch == '\\') {
            backslashes++;
            continue;
        }
        q.append(ch == '"' ? 2 * backslashes + 1 : backslashes, '\\');
        backslashes = 0;
        q += ch;
    }
    q.append(2 * backslashes, '\\');
    return q + "\"";
}
#else
void platform_start() {}

std::vector<std::string> program_arguments(int argc, char** argv) {
    return std::vector<std::string>(argv, argv + argc);
}

// One word as a POSIX shell reads it back: as it is when it is plain, else in single quotes.
std::string shell_word(const std::string& s) {
    const bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=+:,@%-") ==
                                         std::string::npos;
    if (plain) return s;
    std::string q = "'";
    for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
}
#endif

// ---- The durable writers and the signals that clean up after them --------------------------------
// The temporary file being written, so that Ctrl-C (SIGINT), SIGTERM or SIGHUP removes it before
// the program ends (unlink is safe in a signal handler). kill -9 cannot be caught: then a hidden
// ".NAME.tmp.XXXXXX" beside the target may stay behind, and the target is untouched.
// While a training loop runs (g_loop_stoppable), the first SIGINT or SIGTERM only records itself
// in g_stop_signal: the loop finishes its step, writes a checkpoint and returns (TrainResult::signal);
// a second signal ends the program as before.
// Windows has no such signals: Ctrl-C and Ctrl-Break reach a console program as console events, on
// a thread of their own (SetConsoleCtrlHandler), as do the console's closing, log-off and shut-down.
// Ctrl-C stands for SIGINT, Ctrl-Break for SIGTERM and the others for SIGHUP; the handler does what
// the POSIX one does and ends the program as Windows' default handler does (exit status 0xC000013A,
// STATUS_CONTROL_C_EXIT).
// The paths are UTF-8, at most PATH_LIMIT bytes (Windows' own limit, MAX_PATH, counts UTF-16 units).
#if defined(_WIN32)
static constexpr std::size_t PATH_LIMIT = 4096;
#else
static constexpr std::size_t PATH_LIMIT = PATH_MAX;
#endif
static char g_tmp_path[PATH_LIMIT + 1];
static volatile std::sig_atomic_t g_tmp_active = 0;
static volatile std::sig_atomic_t g_loop_stoppable = 0, g_stop_signal = 0;
// A StagedDir's files and (when it made it) its directory, for the handler to remove: a slot is
// filled before the count that makes it visible grows.
static constexpr int STAGED_MAX = 16;
static char g_staged_paths[STAGED_MAX][PATH_LIMIT + 1];
static volatile std::sig_atomic_t g_staged_count = 0;
static char g_staged_dir[PATH_LIMIT + 1];
static volatile std::sig_atomic_t g_staged_dir_active = 0;

// The file operations of the writers, true on success (false: errno says why).
#if defined(_WIN32)
bool remove_file(const std::string& path) { return ::DeleteFileW(wide(path).c_str()) || failed(); }

static bool remove_empty_directory(const std::string& path) { return ::RemoveDirectoryW(wide(path).c_str()) || failed(); }

static bool make_directory(const std::string& path) { return ::CreateDirectoryW(wide(path).c_str(), nullptr) || failed(); }

// MoveFileExW replaces an existing `to` and returns once the move is on the disk. A virus scanner
// or an indexer that has just opened a new file holds it for a moment: a sharing failure is tried
// again for up to a second.
static bool replace_file(const std::string& from, const std::string& to) {
    const std::wstring f = wide(from), t = wide(to);
    for (int attempt = 0;; attempt++) {
        if (::MoveFileExW(f.c_str(), t.c_str(), MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) return true;
        const DWORD error = ::GetLastError();
        if (attempt == 20 || (error != ERROR_ACCESS_DENIED && error != ERROR_SHARING_VIOLATION && error != ERROR_LOCK_VIOLATION))
            return failed();
        ::Sleep(50);
    }
}

static long long write_some(int fd, const char* data, std::size_t n) {
    return ::_write(fd, data, (unsigned)std::min<std::size_t>(n, 1u << 30));
}

static int close_file(int fd) { return ::_close(fd); }

// The lock SignalsHeld takes and the console handler waits for.
static CRITICAL_SECTION& held_lock() {
    static CRITICAL_SECTION lock;
    static const bool ready = (::InitializeCriticalSection(&lock), true);
    (void)ready;
    return lock;
}

static BOOL WINAPI on_console_event(DWORD event) {
    const int sig = event == CTRL_C_EVENT ? SIGINT : event == CTRL_BREAK_EVENT ? SIGTERM : 0;
    if (g_loop_stoppable && !g_stop_signal && sig != 0) {
        g_stop_signal = sig;
        return TRUE;
    }
    ::EnterCriticalSection(&held_lock());  // kept: the program ends with the event
    if (g_tmp_active) ::DeleteFileW(wide(g_tmp_path).c_str());
    for (int k = 0; k < g_staged_count; k++) ::DeleteFileW(wide(g_staged_paths[k]).c_str());
    if (g_staged_dir_active) ::RemoveDirectoryW(wide(g_staged_dir).c_str());
    restore_console_code_page();
    ::ExitProcess(STATUS_CONTROL_C_EXIT);
}

static void install_removal_handlers() {
    static bool installed = false;
    if (installed) return;
    ::SetConsoleCtrlHandler(on_console_event, TRUE);
    installed = true;
}

// The console's events held off in a scope: the handler waits for its end.
struct SignalsHeld {
    SignalsHeld() { ::EnterCriticalSection(&held_lock()); }
    ~SignalsHeld() { ::LeaveCriticalSection(&held_lock()); }
    SignalsHeld(const SignalsHeld&) = delete;
    SignalsHeld& operator=(const SignalsHeld&) = delete;
};
#else
bool remove_file(const std::string& path) { return ::unlink(path.c_str()) == 0; }

static bool remove_empty_directory(const std::string& path) { return ::rmdir(path.c_str()) == 0; }

static bool make_directory(const std::string& path) { return ::mkdir(path.c_str(), 0777) == 0; }

static bool replace_file(const std::string& from, const std::string& to) { return ::rename(from.c_str(), to.c_str()) == 0; }

static long long write_some(int fd, const char* data, std::size_t n) { return (long long)::write(fd, data, n); }

static int close_file(int fd) { return ::close(fd); }

extern "C" void remove_tmp_on_signal(int sig) {
    if (g_loop_stoppable && !g_stop_signal && (sig == SIGINT || sig == SIGTERM)) {
        g_stop_signal = sig;
        return;
    }
    if (g_tmp_active) ::unlink(g_tmp_path);
    for (int k = 0; k < g_staged_count; k++) ::unlink(g_staged_paths[k]);
    if (g_staged_dir_active) ::rmdir(g_staged_dir);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}
// The handler on SIGINT, SIGTERM and SIGHUP (a signal the shell had ignored stays ignored).
static void install_removal_handlers() {
    static bool installed = false;
    if (installed) return;
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        if (std::signal(sig, remove_tmp_on_signal) == SIG_IGN) std::signal(sig, SIG_IGN);
    installed = true;
}
// SIGINT, SIGTERM and SIGHUP held off in a scope (delivered when it ends).
struct SignalsHeld {
    sigset_t old;
    SignalsHeld() {
        sigset_t set;
        sigemptyset(&set);
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
        sigprocmask(SIG_BLOCK, &set, &old);
    }
    ~SignalsHeld() { sigprocmask(SIG_SETMASK, &old, nullptr); }
};
#endif

#if defined(_WIN32)
// The temporary file is made with CreateFileW, sharing delete, so that the console handler can
// remove it while it is open; a new file has the default attributes, as a plain fopen would give.
AtomicFile::AtomicFile(const std::string& path) : target_(resolve_output_path(path)) {
    const PathKind kind = path_kind(target_);
    if (kind != PathKind::missing && kind != PathKind::regular)
        throw Error("cannot write '" + path + "': it exists and is not a regular file");
    const std::size_t slash = last_separator(target_);
    const std::string base = target_.substr(slash == std::string::npos ? 0 : slash + 1);
    const std::string dir = dir_of(target_);
    static const char letters[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned long long seed = ((unsigned long long)::GetCurrentProcessId() << 32) ^ ::GetTickCount64();
    for (int attempt = 0; fd_ < 0; attempt++) {
        std::string suffix;
        for (int k = 0; k < 6; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            suffix += letters[(seed >> 33) % 62];
        }
        const std::string name = path_in_dir(dir, "." + base + ".tmp." + suffix);
        if (name.size() > PATH_LIMIT) throw Error("cannot write '" + path + "': the path is too long");
        const HANDLE h = ::CreateFileW(wide(name).c_str(), GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_DELETE, nullptr, CREATE_NEW,
                                       FILE_ATTRIBUTE_NORMAL, nullptr);
        if (h == INVALID_HANDLE_VALUE && ::GetLastError() == ERROR_FILE_EXISTS && attempt < 100) continue;
        if (h == INVALID_HANDLE_VALUE) {
            failed();
            throw Error("cannot write '" + path + "': cannot create a temporary file in '" + dir + "': " + std::strerror(errno));
        }
        fd_ = ::_open_osfhandle((intptr_t)h, _O_WRONLY | _O_BINARY);
        if (fd_ < 0) {
            ::CloseHandle(h);
            ::DeleteFileW(wide(name).c_str());
            throw Error("cannot write '" + path + "': cannot create a temporary file in '" + dir + "': " + std::strerror(errno));
        }
        tmp_ = name;
    }
    install_removal_handlers();
    const SignalsHeld held;
    std::memcpy(g_tmp_path, tmp_.c_str(), tmp_.size() + 1);
    g_tmp_active = 1;
    buf_.reserve(1 << 20);
}
#else
AtomicFile::AtomicFile(const std::string& path) : target_(resolve_output_path(path)) {
    struct stat st;
    const bool exists = ::stat(target_.c_str(), &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) throw Error("cannot write '" + path + "': it exists and is not a regular file");
    std::string base = target_.substr(target_.rfind('/') == std::string::npos ? 0 : target_.rfind('/') + 1);
    std::string tmpl = dir_of(target_) + "/." + base + ".tmp.XXXXXX";
    if (tmpl.size() > PATH_MAX) throw Error("cannot write '" + path + "': the path is too long");
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0) throw Error("cannot write '" + path + "': cannot create a temporary file in '" + dir_of(target_) + "': " + std::strerror(errno));
    tmp_ = name.data();
    mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd_, exists ? (st.st_mode & 07777) : (0666 & ~mask));  // the mode a plain fopen would give
    install_removal_handlers();
    std::memcpy(g_tmp_path, tmp_.c_str(), tmp_.size() + 1);
    g_tmp_active = 1;
    buf_.reserve(1 << 20);
}
#endif

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) close_file(fd_);
    if (!committed_ && !tmp_.empty()) remove_file(tmp_);
    g_tmp_active = 0;
}

void AtomicFile::fail(const std::string& what) {
    const std::string reason = std::strerror(errno);
    if (fd_ >= 0) close_file(fd_), fd_ = -1;
    remove_file(tmp_);
    tmp_.clear();
    g_tmp_active = 0;
    throw Error("cannot write '" + target_ + "': " + what + ": " + reason + " (the previous file, if any, is unchanged)");
}

void AtomicFile::flush_buffer() {
    std::size_t done = 0;
    while (done < buf_.size()) {
        const long long k = write_some(fd_, buf_.data() + done, buf_.size() - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = ENOSPC;
            fail("write failed");
        }
        done += (std::size_t)k;
    }
    buf_.clear();
}

void AtomicFile::write(const void* data, std::size_t n) {
    if (fd_ < 0) throw Error("AtomicFile: write after commit or failure");
    const char* p = (const char*)data;
    if (buf_.size() + n > buf_.capacity()) flush_buffer();
    if (n >= buf_.capacity()) {  // large blocks go straight to the file
        buf_.assign(p, p + n);
        flush_buffer();
        buf_.shrink_to_fit(), buf_.reserve(1 << 20);
        return;
    }
    buf_.insert(buf_.end(), p, p + n);
}

#if defined(_WIN32)
// _commit is fsync (FlushFileBuffers); the rename is made durable by MOVEFILE_WRITE_THROUGH, and
// happens whole or not at all before a console event's handler runs.
void AtomicFile::commit() {
    if (fd_ < 0) throw Error("AtomicFile: commit twice or after failure");
    flush_buffer();
    if (::_commit(fd_) != 0) fail("fsync failed");
    const int fd = fd_;
    fd_ = -1;
    if (::_close(fd) != 0) fail("close failed");
    const SignalsHeld held;
    if (!replace_file(tmp_, target_)) fail("cannot rename the temporary file over it");
    committed_ = true;
    g_tmp_active = 0;
}
#else
void AtomicFile::commit() {
    if (fd_ < 0) throw Error("AtomicFile: commit twice or after failure");
    flush_buffer();
    if (::fsync(fd_) != 0) fail("fsync failed");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close failed");
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail("cannot rename the temporary file over it");
    committed_ = true;
    g_tmp_active = 0;
    const int dfd = ::open(dir_of(target_).c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {  // make the rename itself durable; some file systems cannot fsync a directory
        const int r = ::fsync(dfd);
        const int e = errno;
        ::close(dfd);
        if (r != 0 && e != EINVAL && e != EROFS)
            throw Error("wrote '" + target_ + "' but could not fsync its directory: " + std::strerror(e));
    }
}
#endif

void write_file_atomic(const std::string& path, const std::string& bytes) {
    AtomicFile f(path);
    f.write(bytes.data(), bytes.size());
    f.commit();
}

std::string path_in_dir(const std::string& dir, const std::string& name) {
    const std::string d = trim_separators(dir);
    if (!d.empty() && d.size() == root_length(d)) return d + name;
    return d + separator_for(d) + name;
}

std::string& program_name() {
    static std::string name = "transformer";
    return name;
}

StagedDir::StagedDir(const std::string& dir) : dir_(dir) {
    if (g_staged_count > 0 || g_staged_dir_active) throw Error("StagedDir: another staged directory is open");
    if (path_in_dir(dir, "").size() > PATH_LIMIT) throw Error("cannot write '" + dir + "': the path is too long");
    install_removal_handlers();
    if (path_kind(dir) != PathKind::missing) return;
    const SignalsHeld held;  // the directory and the note that it is ours come into being together
    if (!make_directory(dir)) throw Error("cannot create --out '" + dir + "': " + std::strerror(errno));
    std::snprintf(g_staged_dir, sizeof g_staged_dir, "%s", dir.c_str());
    g_staged_dir_active = 1;
    created_ = true;
}

std::string StagedDir::stage(const std::string& name) {
    if (committed_) throw Error("StagedDir: stage after commit");
    if ((int)staged_.size() >= STAGED_MAX) throw Error("StagedDir: more than " + std::to_string(STAGED_MAX) + " files");
    const std::string path = path_in_dir(dir_, "." + name + ".staged." + std::to_string(process_id()));
    if (path.size() > PATH_LIMIT) throw Error("cannot write '" + path_in_dir(dir_, name) + "': the path is too long");
    const int k = (int)g_staged_count;
    std::snprintf(g_staged_paths[k], sizeof g_staged_paths[k], "%s", path.c_str());
    g_staged_count = k + 1;
    staged_.push_back({path, path_in_dir(dir_, name)});
    return path;
}

void StagedDir::commit(const std::vector<std::string>& remove) {
    if (committed_) throw Error("StagedDir: commit twice");
    const SignalsHeld held;  // all of it, or (on an error) what the destructor leaves
    for (std::size_t k = 0; k < staged_.size(); k++) {
        if (!replace_file(staged_[k].first, staged_[k].second))
            throw Error("cannot rename '" + staged_[k].first + "' to '" + staged_[k].second + "': " + std::strerror(errno));
        staged_[k].first = staged_[k].second;  // in place now: removed only with a directory this object made
    }
    for (const std::string& name : remove) {
        const std::string path = path_in_dir(dir_, name);
        if (!remove_file(path) && errno != ENOENT)
            throw Error("cannot remove the earlier run's '" + path + "': " + std::strerror(errno));
    }
    committed_ = true;
    g_staged_count = 0, g_staged_dir_active = 0;
#if !defined(_WIN32)  // on Windows MOVEFILE_WRITE_THROUGH made each rename durable
    const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {  // the renames durable (some file systems cannot fsync a directory)
        ::fsync(dfd);
        ::close(dfd);
    }
#endif
}

std::string StagedDir::failure(std::string message) const {
    std::string moved;  // files a failed commit had already renamed into an existing directory
    for (const auto& f : staged_) {
        if (f.first == f.second) moved += (moved.empty() ? "" : ", ") + f.second;
        for (std::size_t at = message.find(f.first); at != std::string::npos; at = message.find(f.first, at + f.second.size()))
            message.replace(at, f.first.size(), f.second);
    }
    if (created_) return message + "; nothing written ('" + dir_ + "' not created)";
    return message + (moved.empty() ? "; '" + dir_ + "' unchanged" : "; only " + moved + " replaced");
}

StagedDir::~StagedDir() {
    if (committed_) return;
    const SignalsHeld held;
    g_staged_count = 0, g_staged_dir_active = 0;
    for (const auto& f : staged_)  // staged files, and files already in place when a commit failed in a new directory
        if (f.first != f.second || created_) remove_file(f.first);
    if (created_) remove_empty_directory(dir_);  // only if empty: a file someone else put there keeps it
}

// The training loop's stop: the first SIGINT or SIGTERM (on Windows Ctrl-C or Ctrl-Break) is
// recorded instead of ending the program.
void loop_stop_begin() {
    g_stop_signal = 0;
    g_loop_stoppable = 1;
#if defined(_WIN32)
    install_removal_handlers();
#else
    for (int sig : {SIGINT, SIGTERM})
        if (std::signal(sig, remove_tmp_on_signal) == SIG_IGN) std::signal(sig, SIG_IGN);
#endif
}

int loop_stop_signal() {
    return (int)g_stop_signal;
}

void loop_stop_end() {
    g_loop_stoppable = 0;
}

// ---- Memory --------------------------------------------------------------------------------------
#if defined(_WIN32)
// The peak working set (K32GetProcessMemoryInfo is kernel32's, so no psapi library is linked).
double peak_memory_mib() {
    PROCESS_MEMORY_COUNTERS pmc;
    if (!::K32GetProcessMemoryInfo(::GetCurrentProcess(), &pmc, sizeof pmc)) return -1;
    return (double)pmc.PeakWorkingSetSize / (1024.0 * 1024.0);
}

// The physical memory, and a job object's limit on the process or the job (Windows' cgroup).
MemoryLimit memory_limit() {
    MemoryLimit m;
    MEMORYSTATUSEX status;
    status.dwLength = sizeof status;
    m.bytes = ::GlobalMemoryStatusEx(&status) ? (double)status.ullTotalPhys : 0;
    m.source = "the machine's physical memory";
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION job;
    if (::QueryInformationJobObject(nullptr, JobObjectExtendedLimitInformation, &job, sizeof job, nullptr)) {
        const DWORD flags = job.BasicLimitInformation.LimitFlags;
        auto consider = [&](double bytes, const char* source) {
            if (bytes > 0 && (m.bytes <= 0 || bytes < m.bytes)) m.bytes = bytes, m.source = source;
        };
        if (flags & JOB_OBJECT_LIMIT_PROCESS_MEMORY) consider((double)job.ProcessMemoryLimit, "the job object's process memory limit");
        if (flags & JOB_OBJECT_LIMIT_JOB_MEMORY) consider((double)job.JobMemoryLimit, "the job object's memory limit");
    }
    return m;
}
#else
// The peak resident set of getrusage in MiB: ru_maxrss counts bytes on macOS, KiB on Linux and the BSDs.
double peak_memory_mib() {
    struct rusage ru;
    if (::getrusage(RUSAGE_SELF, &ru) != 0) return -1;
#if defined(__APPLE__)
    return (double)ru.ru_maxrss / (1024.0 * 1024.0);
#else
    return (double)ru.ru_maxrss / 1024.0;
#endif
}

// A number from a one-line file of the kernel's (cgroup limits), or -1 when there is none or it
// says "max".
static double read_limit_file(const char* path) {
    std::FILE* f = std::fopen(path, "r");
    if (!f) return -1;
    char buf[64] = {0};
    const bool got = std::fgets(buf, sizeof buf, f) != nullptr;
    std::fclose(f);
    if (!got) return -1;
    char* end = nullptr;
    const double v = std::strtod(buf, &end);
    return end == buf || v <= 0 ? -1 : v;
}

MemoryLimit memory_limit() {
    MemoryLimit m;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    m.bytes = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    m.source = "the machine's physical memory";
    auto consider = [&](double bytes, const char* source) {
        if (bytes > 0 && (m.bytes <= 0 || bytes < m.bytes)) m.bytes = bytes, m.source = source;
    };
    consider(read_limit_file("/sys/fs/cgroup/memory.max"), "the cgroup's memory.max");
    consider(read_limit_file("/sys/fs/cgroup/memory/memory.limit_in_bytes"), "the cgroup's memory.limit_in_bytes");
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) consider((double)as.rlim_cur, "the address-space limit (ulimit -v)");
    return m;
}
#endif

// ================================================================================================
// GENERATED TABLES: Unicode classes of the tokenizers
// ================================================================================================

// ---- Unicode tables: the code points of \p{L} (letters) and \p{N} (numbers), Unicode 17.0, as
// sorted ranges {first, last}; generated from the Unicode Character Database ------------------------
static const uint32_t UNICODE_L[][2] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xAA, 0xAA}, {0xB5, 0xB5}, {0xBA, 0xBA}, {0xC0, 0xD6}, {0xD8, 0xF6},
    {0xF8, 0x2C1}, {0x2C6, 0x2D1}, {0x2E0, 0x2E4}, {0x2EC, 0x2EC}, {0x2EE, 0x2EE}, {0x370, 0x374},
    {0x376, 0x377}, {0x37A, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
    {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556}, {0x559, 0x559},
    {0x560, 0x588}, {0x5D0, 0x5EA}, {0x5EF, 0x5F2}, {0x620, 0x64A}, {0x66E, 0x66F}, {0x671, 0x6D3},
    {0x6D5, 0x6D5}, {0x6E5, 0x6E6}, {0x6EE, 0x6EF}, {0x6FA, 0x6FC}, {0x6FF, 0x6FF}, {0x710, 0x710},
    {0x712, 0x72F}, {0x74D, 0x7A5}, {0x7B1, 0x7B1}, {0x7CA, 0x7EA}, {0x7F4, 0x7F5}, {0x7FA, 0x7FA},
    {0x800, 0x815}, {0x81A, 0x81A}, {0x824, 0x824}, {0x828, 0x828}, {0x840, 0x858}, {0x860, 0x86A},
    {0x870, 0x887}, {0x889, 0x88F}, {0x8A0, 0x8C9}, {0x904, 0x939}, {0x93D, 0x93D}, {0x950, 0x950},
    {0x958, 0x961}, {0x971, 0x980}, {0x985, 0x98C}, {0x98F, 0x990}, {0x993, 0x9A8}, {0x9AA, 0x9B0},
    {0x9B2, 0x9B2}, {0x9B6, 0x9B9}, {0x9BD, 0x9BD}, {0x9CE, 0x9CE}, {0x9DC, 0x9DD}, {0x9DF, 0x9E1},
    {0x9F0, 0x9F1}, {0x9FC, 0x9FC}, {0xA05, 0xA0A}, {0xA0F, 0xA10}, {0xA13, 0xA28}, {0xA2A, 0xA30},
    {0xA32, 0xA33}, {0xA35, 0xA36}, {0xA38, 0xA39}, {0xA59, 0xA5C}, {0xA5E, 0xA5E}, {0xA72, 0xA74},
    {0xA85, 0xA8D}, {0xA8F, 0xA91}, {0xA93, 0xAA8}, {0xAAA, 0xAB0}, {0xAB2, 0xAB3}, {0xAB5, 0xAB9},
    {0xABD, 0xABD}, {0xAD0, 0xAD0}, {0xAE0, 0xAE1}, {0xAF9, 0xAF9}, {0xB05, 0xB0C}, {0xB0F, 0xB10},
    {0xB13, 0xB28}, {0xB2A, 0xB30}, {0xB32, 0xB33}, {0xB35, 0xB39}, {0xB3D, 0xB3D}, {0xB5C, 0xB5D},
    {0xB5F, 0xB61}, {0xB71, 0xB71}, {0xB83, 0xB83}, {0xB85, 0xB8A}, {0xB8E, 0xB90}, {0xB92, 0xB95},
    {0xB99, 0xB9A}, {0xB9C, 0xB9C}, {0xB9E, 0xB9F}, {0xBA3, 0xBA4}, {0xBA8, 0xBAA}, {0xBAE, 0xBB9},
    {0xBD0, 0xBD0}, {0xC05, 0xC0C}, {0xC0E, 0xC10}, {0xC12, 0xC28}, {0xC2A, 0xC39}, {0xC3D, 0xC3D},
    {0xC58, 0xC5A}, {0xC5C, 0xC5D}, {0xC60, 0xC61}, {0xC80, 0xC80}, {0xC85, 0xC8C}, {0xC8E, 0xC90},
    {0xC92, 0xCA8}, {0xCAA, 0xCB3}, {0xCB5, 0xCB9}, {0xCBD, 0xCBD}, {0xCDC, 0xCDE}, {0xCE0, 0xCE1},
    {0xCF1, 0xCF2}, {0xD04, 0xD0C}, {0xD0E, 0xD10}, {0xD12, 0xD3A}, {0xD3D, 0xD3D}, {0xD4E, 0xD4E},
    {0xD54, 0xD56}, {0xD5F, 0xD61}, {0xD7A, 0xD7F}, {0xD85, 0xD96}, {0xD9A, 0xDB1}, {0xDB3, 0xDBB},
    {0xDBD, 0xDBD}, {0xDC0, 0xDC6}, {0xE01, 0xE30}, {0xE32, 0xE33}, {0xE40, 0xE46}, {0xE81, 0xE82},
    {0xE84, 0xE84}, {0xE86, 0xE8A}, {0xE8C, 0xEA3}, {0xEA5, 0xEA5}, {0xEA7, 0xEB0}, {0xEB2, 0xEB3},
    {0xEBD, 0xEBD}, {0xEC0, 0xEC4}, {0xEC6, 0xEC6}, {0xEDC, 0xEDF}, {0xF00, 0xF00}, {0xF40, 0xF47},
    {0xF49, 0xF6C}, {0xF88, 0xF8C}, {0x1000, 0x102A}, {0x103F, 0x103F}, {0x1050, 0x1055}, {0x105A, 0x105D},
    {0x1061, 0x1061}, {0x1065, 0x1066}, {0x106E, 0x1070}, {0x1075, 0x1081}, {0x108E, 0x108E},
    {0x10A0, 0x10C5}, {0x10C7, 0x10C7}, {0x10CD, 0x10CD}, {0x10D0, 0x10FA}, {0x10FC, 0x1248},
    {0x124A, 0x124D}, {0x1250, 0x1256}, {0x1258, 0x1258}, {0x125A, 0x125D}, {0x1260, 0x1288},
    {0x128A, 0x128D}, {0x1290, 0x12B0}, {0x12B2, 0x12B5}, {0x12B8, 0x12BE}, {0x12C0, 0x12C0},
    {0x12C2, 0x12C5}, {0x12C8, 0x12D6}, {0x12D8, 0x1310}, {0x1312, 0x1315}, {0x1318, 0x135A},
    {0x1380, 0x138F}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1401, 0x166C}, {0x166F, 0x167F},
    {0x1681, 0x169A}, {0x16A0, 0x16EA}, {0x16F1, 0x16F8}, {0x1700, 0x1711}, {0x171F, 0x1731},
    {0x1740, 0x1751}, {0x1760, 0x176C}, {0x176E, 0x1770}, {0x1780, 0x17B3}, {0x17D7, 0x17D7},
    {0x17DC, 0x17DC}, {0x1820, 0x1878}, {0x1880, 0x1884}, {0x1887, 0x18A8}, {0x18AA, 0x18AA},
    {0x18B0, 0x18F5}, {0x1900, 0x191E}, {0x1950, 0x196D}, {0x1970, 0x1974}, {0x1980, 0x19AB},
    {0x19B0, 0x19C9}, {0x1A00, 0x1A16}, {0x1A20, 0x1A54}, {0x1AA7, 0x1AA7}, {0x1B05, 0x1B33},
    {0x1B45, 0x1B4C}, {0x1B83, 0x1BA0}, {0x1BAE, 0x1BAF}, {0x1BBA, 0x1BE5}, {0x1C00, 0x1C23},
    {0x1C4D, 0x1C4F}, {0x1C5A, 0x1C7D}, {0x1C80, 0x1C8A}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1CE9, 0x1CEC}, {0x1CEE, 0x1CF3}, {0x1CF5, 0x1CF6}, {0x1CFA, 0x1CFA}, {0x1D00, 0x1DBF},
    {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57},
    {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2071, 0x2071},
    {0x207F, 0x207F}, {0x2090, 0x209C}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E},
    {0x2183, 0x2184}, {0x2C00, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0x2D00, 0x2D25},
    {0x2D27, 0x2D27}, {0x2D2D, 0x2D2D}, {0x2D30, 0x2D67}, {0x2D6F, 0x2D6F}, {0x2D80, 0x2D96},
    {0x2DA0, 0x2DA6}, {0x2DA8, 0x2DAE}, {0x2DB0, 0x2DB6}, {0x2DB8, 0x2DBE}, {0x2DC0, 0x2DC6},
    {0x2DC8, 0x2DCE}, {0x2DD0, 0x2DD6}, {0x2DD8, 0x2DDE}, {0x2E2F, 0x2E2F}, {0x3005, 0x3006},
    {0x3031, 0x3035}, {0x303B, 0x303C}, {0x3041, 0x3096}, {0x309D, 0x309F}, {0x30A1, 0x30FA},
    {0x30FC, 0x30FF}, {0x3105, 0x312F}, {0x3131, 0x318E}, {0x31A0, 0x31BF}, {0x31F0, 0x31FF},
    {0x3400, 0x4DBF}, {0x4E00, 0xA48C}, {0xA4D0, 0xA4FD}, {0xA500, 0xA60C}, {0xA610, 0xA61F},
    {0xA62A, 0xA62B}, {0xA640, 0xA66E}, {0xA67F, 0xA69D}, {0xA6A0, 0xA6E5}, {0xA717, 0xA71F},
    {0xA722, 0xA788}, {0xA78B, 0xA7DC}, {0xA7F1, 0xA801}, {0xA803, 0xA805}, {0xA807, 0xA80A},
    {0xA80C, 0xA822}, {0xA840, 0xA873}, {0xA882, 0xA8B3}, {0xA8F2, 0xA8F7}, {0xA8FB, 0xA8FB},
    {0xA8FD, 0xA8FE}, {0xA90A, 0xA925}, {0xA930, 0xA946}, {0xA960, 0xA97C}, {0xA984, 0xA9B2},
    {0xA9CF, 0xA9CF}, {0xA9E0, 0xA9E4}, {0xA9E6, 0xA9EF}, {0xA9FA, 0xA9FE}, {0xAA00, 0xAA28},
    {0xAA40, 0xAA42}, {0xAA44, 0xAA4B}, {0xAA60, 0xAA76}, {0xAA7A, 0xAA7A}, {0xAA7E, 0xAAAF},
    {0xAAB1, 0xAAB1}, {0xAAB5, 0xAAB6}, {0xAAB9, 0xAABD}, {0xAAC0, 0xAAC0}, {0xAAC2, 0xAAC2},
    {0xAADB, 0xAADD}, {0xAAE0, 0xAAEA}, {0xAAF2, 0xAAF4}, {0xAB01, 0xAB06}, {0xAB09, 0xAB0E},
    {0xAB11, 0xAB16}, {0xAB20, 0xAB26}, {0xAB28, 0xAB2E}, {0xAB30, 0xAB5A}, {0xAB5C, 0xAB69},
    {0xAB70, 0xABE2}, {0xAC00, 0xD7A3}, {0xD7B0, 0xD7C6}, {0xD7CB, 0xD7FB}, {0xF900, 0xFA6D},
    {0xFA70, 0xFAD9}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFB1D, 0xFB1D}, {0xFB1F, 0xFB28},
    {0xFB2A, 0xFB36}, {0xFB38, 0xFB3C}, {0xFB3E, 0xFB3E}, {0xFB40, 0xFB41}, {0xFB43, 0xFB44},
    {0xFB46, 0xFBB1}, {0xFBD3, 0xFD3D}, {0xFD50, 0xFD8F}, {0xFD92, 0xFDC7}, {0xFDF0, 0xFDFB},
    {0xFE70, 0xFE74}, {0xFE76, 0xFEFC}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0xFF66, 0xFFBE},
    {0xFFC2, 0xFFC7}, {0xFFCA, 0xFFCF}, {0xFFD2, 0xFFD7}, {0xFFDA, 0xFFDC}, {0x10000, 0x1000B},
    {0x1000D, 0x10026}, {0x10028, 0x1003A}, {0x1003C, 0x1003D}, {0x1003F, 0x1004D}, {0x10050, 0x1005D},
    {0x10080, 0x100FA}, {0x10280, 0x1029C}, {0x102A0, 0x102D0}, {0x10300, 0x1031F}, {0x1032D, 0x10340},
    {0x10342, 0x10349}, {0x10350, 0x10375}, {0x10380, 0x1039D}, {0x103A0, 0x103C3}, {0x103C8, 0x103CF},
    {0x10400, 0x1049D}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10500, 0x10527}, {0x10530, 0x10563},
    {0x10570, 0x1057A}, {0x1057C, 0x1058A}, {0x1058C, 0x10592}, {0x10594, 0x10595}, {0x10597, 0x105A1},
    {0x105A3, 0x105B1}, {0x105B3, 0x105B9}, {0x105BB, 0x105BC}, {0x105C0, 0x105F3}, {0x10600, 0x10736},
    {0x10740, 0x10755}, {0x10760, 0x10767}, {0x10780, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA},
    {0x10800, 0x10805}, {0x10808, 0x10808}, {0x1080A, 0x10835}, {0x10837, 0x10838}, {0x1083C, 0x1083C},
    {0x1083F, 0x10855}, {0x10860, 0x10876}, {0x10880, 0x1089E}, {0x108E0, 0x108F2}, {0x108F4, 0x108F5},
    {0x10900, 0x10915}, {0x10920, 0x10939}, {0x10940, 0x10959}, {0x10980, 0x109B7}, {0x109BE, 0x109BF},
    {0x10A00, 0x10A00}, {0x10A10, 0x10A13}, {0x10A15, 0x10A17}, {0x10A19, 0x10A35}, {0x10A60, 0x10A7C},
    {0x10A80, 0x10A9C}, {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE4}, {0x10B00, 0x10B35}, {0x10B40, 0x10B55},
    {0x10B60, 0x10B72}, {0x10B80, 0x10B91}, {0x10C00, 0x10C48}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2},
    {0x10D00, 0x10D23}, {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10E80, 0x10EA9}, {0x10EB0, 0x10EB1},
    {0x10EC2, 0x10EC7}, {0x10F00, 0x10F1C}, {0x10F27, 0x10F27}, {0x10F30, 0x10F45}, {0x10F70, 0x10F81},
    {0x10FB0, 0x10FC4}, {0x10FE0, 0x10FF6}, {0x11003, 0x11037}, {0x11071, 0x11072}, {0x11075, 0x11075},
    {0x11083, 0x110AF}, {0x110D0, 0x110E8}, {0x11103, 0x11126}, {0x11144, 0x11144}, {0x11147, 0x11147},
    {0x11150, 0x11172}, {0x11176, 0x11176}, {0x11183, 0x111B2}, {0x111C1, 0x111C4}, {0x111DA, 0x111DA},
    {0x111DC, 0x111DC}, {0x11200, 0x11211}, {0x11213, 0x1122B}, {0x1123F, 0x11240}, {0x11280, 0x11286},
    {0x11288, 0x11288}, {0x1128A, 0x1128D}, {0x1128F, 0x1129D}, {0x1129F, 0x112A8}, {0x112B0, 0x112DE},
    {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328}, {0x1132A, 0x11330}, {0x11332, 0x11333},
    {0x11335, 0x11339}, {0x1133D, 0x1133D}, {0x11350, 0x11350}, {0x1135D, 0x11361}, {0x11380, 0x11389},
    {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7}, {0x113D1, 0x113D1},
    {0x113D3, 0x113D3}, {0x11400, 0x11434}, {0x11447, 0x1144A}, {0x1145F, 0x11461}, {0x11480, 0x114AF},
    {0x114C4, 0x114C5}, {0x114C7, 0x114C7}, {0x11580, 0x115AE}, {0x115D8, 0x115DB}, {0x11600, 0x1162F},
    {0x11644, 0x11644}, {0x11680, 0x116AA}, {0x116B8, 0x116B8}, {0x11700, 0x1171A}, {0x11740, 0x11746},
    {0x11800, 0x1182B}, {0x118A0, 0x118DF}, {0x118FF, 0x11906}, {0x11909, 0x11909}, {0x1190C, 0x11913},
    {0x11915, 0x11916}, {0x11918, 0x1192F}, {0x1193F, 0x1193F}, {0x11941, 0x11941}, {0x119A0, 0x119A7},
    {0x119AA, 0x119D0}, {0x119E1, 0x119E1}, {0x119E3, 0x119E3}, {0x11A00, 0x11A00}, {0x11A0B, 0x11A32},
    {0x11A3A, 0x11A3A}, {0x11A50, 0x11A50}, {0x11A5C, 0x11A89}, {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8},
    {0x11BC0, 0x11BE0}, {0x11C00, 0x11C08}, {0x11C0A, 0x11C2E}, {0x11C40, 0x11C40}, {0x11C72, 0x11C8F},
    {0x11D00, 0x11D06}, {0x11D08, 0x11D09}, {0x11D0B, 0x11D30}, {0x11D46, 0x11D46}, {0x11D60, 0x11D65},
    {0x11D67, 0x11D68}, {0x11D6A, 0x11D89}, {0x11D98, 0x11D98}, {0x11DB0, 0x11DDB}, {0x11EE0, 0x11EF2},
    {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x11FB0, 0x11FB0}, {0x12000, 0x12399},
    {0x12480, 0x12543}, {0x12F90, 0x12FF0}, {0x13000, 0x1342F}, {0x13441, 0x13446}, {0x13460, 0x143FA},
    {0x14400, 0x14646}, {0x16100, 0x1611D}, {0x16800, 0x16A38}, {0x16A40, 0x16A5E}, {0x16A70, 0x16ABE},
    {0x16AD0, 0x16AED}, {0x16B00, 0x16B2F}, {0x16B40, 0x16B43}, {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F},
    {0x16D40, 0x16D6C}, {0x16E40, 0x16E7F}, {0x16EA0, 0x16EB8}, {0x16EBB, 0x16ED3}, {0x16F00, 0x16F4A},
    {0x16F50, 0x16F50}, {0x16F93, 0x16F9F}, {0x16FE0, 0x16FE1}, {0x16FE3, 0x16FE3}, {0x16FF2, 0x16FF3},
    {0x17000, 0x18CD5}, {0x18CFF, 0x18D1E}, {0x18D80, 0x18DF2}, {0x1AFF0, 0x1AFF3}, {0x1AFF5, 0x1AFFB},
    {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B122}, {0x1B132, 0x1B132}, {0x1B150, 0x1B152}, {0x1B155, 0x1B155},
    {0x1B164, 0x1B167}, {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C}, {0x1BC80, 0x1BC88},
    {0x1BC90, 0x1BC99}, {0x1D400, 0x1D454}, {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F}, {0x1D4A2, 0x1D4A2},
    {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB}, {0x1D4BD, 0x1D4C3},
    {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C}, {0x1D51E, 0x1D539},
    {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544}, {0x1D546, 0x1D546}, {0x1D54A, 0x1D550}, {0x1D552, 0x1D6A5},
    {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA}, {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714}, {0x1D716, 0x1D734},
    {0x1D736, 0x1D74E}, {0x1D750, 0x1D76E}, {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8}, {0x1D7AA, 0x1D7C2},
    {0x1D7C4, 0x1D7CB}, {0x1DF00, 0x1DF1E}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D}, {0x1E100, 0x1E12C},
    {0x1E137, 0x1E13D}, {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AD}, {0x1E2C0, 0x1E2EB}, {0x1E4D0, 0x1E4EB},
    {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0}, {0x1E6C0, 0x1E6DE}, {0x1E6E0, 0x1E6E2}, {0x1E6E4, 0x1E6E5},
    {0x1E6E7, 0x1E6ED}, {0x1E6F0, 0x1E6F4}, {0x1E6FE, 0x1E6FF}, {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB},
    {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE}, {0x1E800, 0x1E8C4}, {0x1E900, 0x1E943}, {0x1E94B, 0x1E94B},
    {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22}, {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27},
    {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37}, {0x1EE39, 0x1EE39}, {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42},
    {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B}, {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52},
    {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59}, {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D},
    {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62}, {0x1EE64, 0x1EE64}, {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72},
    {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C}, {0x1EE7E, 0x1EE7E}, {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B},
    {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB}, {0x20000, 0x2A6DF}, {0x2A700, 0x2B81D},
    {0x2B820, 0x2CEAD}, {0x2CEB0, 0x2EBE0}, {0x2EBF0, 0x2EE5D}, {0x2F800, 0x2FA1D}, {0x30000, 0x3134A},
    {0x31350, 0x33479},
};
static const uint32_t UNICODE_N[][2] = {
    {0x30, 0x39}, {0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9},
    {0x966, 0x96F}, {0x9E6, 0x9EF}, {0x9F4, 0x9F9}, {0xA66, 0xA6F}, {0xAE6, 0xAEF}, {0xB66, 0xB6F},
    {0xB72, 0xB77}, {0xBE6, 0xBF2}, {0xC66, 0xC6F}, {0xC78, 0xC7E}, {0xCE6, 0xCEF}, {0xD58, 0xD5E},
    {0xD66, 0xD78}, {0xDE6, 0xDEF}, {0xE50, 0xE59}, {0xED0, 0xED9}, {0xF20, 0xF33}, {0x1040, 0x1049},
    {0x1090, 0x1099}, {0x1369, 0x137C}, {0x16EE, 0x16F0}, {0x17E0, 0x17E9}, {0x17F0, 0x17F9},
    {0x1810, 0x1819}, {0x1946, 0x194F}, {0x19D0, 0x19DA}, {0x1A80, 0x1A89}, {0x1A90, 0x1A99},
    {0x1B50, 0x1B59}, {0x1BB0, 0x1BB9}, {0x1C40, 0x1C49}, {0x1C50, 0x1C59}, {0x2070, 0x2070},
    {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189}, {0x2460, 0x249B},
    {0x24EA, 0x24FF}, {0x2776, 0x2793}, {0x2CFD, 0x2CFD}, {0x3007, 0x3007}, {0x3021, 0x3029},
    {0x3038, 0x303A}, {0x3192, 0x3195}, {0x3220, 0x3229}, {0x3248, 0x324F}, {0x3251, 0x325F},
    {0x3280, 0x3289}, {0x32B1, 0x32BF}, {0xA620, 0xA629}, {0xA6E6, 0xA6EF}, {0xA830, 0xA835},
    {0xA8D0, 0xA8D9}, {0xA900, 0xA909}, {0xA9D0, 0xA9D9}, {0xA9F0, 0xA9F9}, {0xAA50, 0xAA59},
    {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x10107, 0x10133}, {0x10140, 0x10178}, {0x1018A, 0x1018B},
    {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341}, {0x1034A, 0x1034A}, {0x103D1, 0x103D5},
    {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF}, {0x108FB, 0x108FF},
    {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF}, {0x10A40, 0x10A48},
    {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F}, {0x10B78, 0x10B7F},
    {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39}, {0x10D40, 0x10D49}, {0x10E60, 0x10E7E},
    {0x10F1D, 0x10F26}, {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x11052, 0x1106F}, {0x110F0, 0x110F9},
    {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x111E1, 0x111F4}, {0x112F0, 0x112F9}, {0x11450, 0x11459},
    {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x116D0, 0x116E3}, {0x11730, 0x1173B},
    {0x118E0, 0x118F2}, {0x11950, 0x11959}, {0x11BF0, 0x11BF9}, {0x11C50, 0x11C6C}, {0x11D50, 0x11D59},
    {0x11DA0, 0x11DA9}, {0x11DE0, 0x11DE9}, {0x11F50, 0x11F59}, {0x11FC0, 0x11FD4}, {0x12400, 0x1246E},
    {0x16130, 0x16139}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x16B5B, 0x16B61},
    {0x16D70, 0x16D79}, {0x16E80, 0x16E96}, {0x16FF4, 0x16FF6}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3},
    {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9},
    {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}, {0x1E8C7, 0x1E8CF}, {0x1E950, 0x1E959}, {0x1EC71, 0x1ECAB},
    {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D}, {0x1ED2F, 0x1ED3D}, {0x1F100, 0x1F10C},
    {0x1FBF0, 0x1FBF9},
};

static bool in_ranges(const uint32_t (*r)[2], std::size_t count, uint32_t cp) {
    std::size_t lo = 0, hi = count;  // binary search: the last range with first <= cp
    while (lo < hi) {
        const std::size_t mid = (lo + hi) / 2;
        if (r[mid][0] <= cp) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && cp <= r[lo - 1][1];
}
static bool unicode_letter(uint32_t cp) { return in_ranges(UNICODE_L, sizeof UNICODE_L / sizeof UNICODE_L[0], cp); }
static bool unicode_number(uint32_t cp) { return in_ranges(UNICODE_N, sizeof UNICODE_N / sizeof UNICODE_N[0], cp); }

// ---- Unicode tables of BERT's normaliser and pre-tokeniser: Unicode 14.0.0, generated from Python's unicodedata ----
// General category Mn (nonspacing marks): removed after NFD when accents are stripped.
static const uint32_t UNICODE_MN[][2] = {
    {0x300, 0x36F}, {0x483, 0x487}, {0x591, 0x5BD}, {0x5BF, 0x5BF}, {0x5C1, 0x5C2}, {0x5C4, 0x5C5},
    {0x5C7, 0x5C7}, {0x610, 0x61A}, {0x64B, 0x65F}, {0x670, 0x670}, {0x6D6, 0x6DC}, {0x6DF, 0x6E4},
    {0x6E7, 0x6E8}, {0x6EA, 0x6ED}, {0x711, 0x711}, {0x730, 0x74A}, {0x7A6, 0x7B0}, {0x7EB, 0x7F3},
    {0x7FD, 0x7FD}, {0x816, 0x819}, {0x81B, 0x823}, {0x825, 0x827}, {0x829, 0x82D}, {0x859, 0x85B},
    {0x898, 0x89F}, {0x8CA, 0x8E1}, {0x8E3, 0x902}, {0x93A, 0x93A}, {0x93C, 0x93C}, {0x941, 0x948},
    {0x94D, 0x94D}, {0x951, 0x957}, {0x962, 0x963}, {0x981, 0x981}, {0x9BC, 0x9BC}, {0x9C1, 0x9C4},
    {0x9CD, 0x9CD}, {0x9E2, 0x9E3}, {0x9FE, 0x9FE}, {0xA01, 0xA02}, {0xA3C, 0xA3C}, {0xA41, 0xA42},
    {0xA47, 0xA48}, {0xA4B, 0xA4D}, {0xA51, 0xA51}, {0xA70, 0xA71}, {0xA75, 0xA75}, {0xA81, 0xA82},
    {0xABC, 0xABC}, {0xAC1, 0xAC5}, {0xAC7, 0xAC8}, {0xACD, 0xACD}, {0xAE2, 0xAE3}, {0xAFA, 0xAFF},
    {0xB01, 0xB01}, {0xB3C, 0xB3C}, {0xB3F, 0xB3F}, {0xB41, 0xB44}, {0xB4D, 0xB4D}, {0xB55, 0xB56},
    {0xB62, 0xB63}, {0xB82, 0xB82}, {0xBC0, 0xBC0}, {0xBCD, 0xBCD}, {0xC00, 0xC00}, {0xC04, 0xC04},
    {0xC3C, 0xC3C}, {0xC3E, 0xC40}, {0xC46, 0xC48}, {0xC4A, 0xC4D}, {0xC55, 0xC56}, {0xC62, 0xC63},
    {0xC81, 0xC81}, {0xCBC, 0xCBC}, {0xCBF, 0xCBF}, {0xCC6, 0xCC6}, {0xCCC, 0xCCD}, {0xCE2, 0xCE3},
    {0xD00, 0xD01}, {0xD3B, 0xD3C}, {0xD41, 0xD44}, {0xD4D, 0xD4D}, {0xD62, 0xD63}, {0xD81, 0xD81},
    {0xDCA, 0xDCA}, {0xDD2, 0xDD4}, {0xDD6, 0xDD6}, {0xE31, 0xE31}, {0xE34, 0xE3A}, {0xE47, 0xE4E},
    {0xEB1, 0xEB1}, {0xEB4, 0xEBC}, {0xEC8, 0xECD}, {0xF18, 0xF19}, {0xF35, 0xF35}, {0xF37, 0xF37},
    {0xF39, 0xF39}, {0xF71, 0xF7E}, {0xF80, 0xF84}, {0xF86, 0xF87}, {0xF8D, 0xF97}, {0xF99, 0xFBC},
    {0xFC6, 0xFC6}, {0x102D, 0x1030}, {0x1032, 0x1037}, {0x1039, 0x103A}, {0x103D, 0x103E}, {0x1058, 0x1059},
    {0x105E, 0x1060}, {0x1071, 0x1074}, {0x1082, 0x1082}, {0x1085, 0x1086}, {0x108D, 0x108D},
    {0x109D, 0x109D}, {0x135D, 0x135F}, {0x1712, 0x1714}, {0x1732, 0x1733}, {0x1752, 0x1753},
    {0x1772, 0x1773}, {0x17B4, 0x17B5}, {0x17B7, 0x17BD}, {0x17C6, 0x17C6}, {0x17C9, 0x17D3},
    {0x17DD, 0x17DD}, {0x180B, 0x180D}, {0x180F, 0x180F}, {0x1885, 0x1886}, {0x18A9, 0x18A9},
    {0x1920, 0x1922}, {0x1927, 0x1928}, {0x1932, 0x1932}, {0x1939, 0x193B}, {0x1A17, 0x1A18},
    {0x1A1B, 0x1A1B}, {0x1A56, 0x1A56}, {0x1A58, 0x1A5E}, {0x1A60, 0x1A60}, {0x1A62, 0x1A62},
    {0x1A65, 0x1A6C}, {0x1A73, 0x1A7C}, {0x1A7F, 0x1A7F}, {0x1AB0, 0x1ABD}, {0x1ABF, 0x1ACE},
    {0x1B00, 0x1B03}, {0x1B34, 0x1B34}, {0x1B36, 0x1B3A}, {0x1B3C, 0x1B3C}, {0x1B42, 0x1B42},
    {0x1B6B, 0x1B73}, {0x1B80, 0x1B81}, {0x1BA2, 0x1BA5}, {0x1BA8, 0x1BA9}, {0x1BAB, 0x1BAD},
    {0x1BE6, 0x1BE6}, {0x1BE8, 0x1BE9}, {0x1BED, 0x1BED}, {0x1BEF, 0x1BF1}, {0x1C2C, 0x1C33},
    {0x1C36, 0x1C37}, {0x1CD0, 0x1CD2}, {0x1CD4, 0x1CE0}, {0x1CE2, 0x1CE8}, {0x1CED, 0x1CED},
    {0x1CF4, 0x1CF4}, {0x1CF8, 0x1CF9}, {0x1DC0, 0x1DFF}, {0x20D0, 0x20DC}, {0x20E1, 0x20E1},
    {0x20E5, 0x20F0}, {0x2CEF, 0x2CF1}, {0x2D7F, 0x2D7F}, {0x2DE0, 0x2DFF}, {0x302A, 0x302D},
    {0x3099, 0x309A}, {0xA66F, 0xA66F}, {0xA674, 0xA67D}, {0xA69E, 0xA69F}, {0xA6F0, 0xA6F1},
    {0xA802, 0xA802}, {0xA806, 0xA806}, {0xA80B, 0xA80B}, {0xA825, 0xA826}, {0xA82C, 0xA82C},
    {0xA8C4, 0xA8C5}, {0xA8E0, 0xA8F1}, {0xA8FF, 0xA8FF}, {0xA926, 0xA92D}, {0xA947, 0xA951},
    {0xA980, 0xA982}, {0xA9B3, 0xA9B3}, {0xA9B6, 0xA9B9}, {0xA9BC, 0xA9BD}, {0xA9E5, 0xA9E5},
    {0xAA29, 0xAA2E}, {0xAA31, 0xAA32}, {0xAA35, 0xAA36}, {0xAA43, 0xAA43}, {0xAA4C, 0xAA4C},
    {0xAA7C, 0xAA7C}, {0xAAB0, 0xAAB0}, {0xAAB2, 0xAAB4}, {0xAAB7, 0xAAB8}, {0xAABE, 0xAABF},
    {0xAAC1, 0xAAC1}, {0xAAEC, 0xAAED}, {0xAAF6, 0xAAF6}, {0xABE5, 0xABE5}, {0xABE8, 0xABE8},
    {0xABED, 0xABED}, {0xFB1E, 0xFB1E}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0x101FD, 0x101FD},
    {0x102E0, 0x102E0}, {0x10376, 0x1037A}, {0x10A01, 0x10A03}, {0x10A05, 0x10A06}, {0x10A0C, 0x10A0F},
    {0x10A38, 0x10A3A}, {0x10A3F, 0x10A3F}, {0x10AE5, 0x10AE6}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC},
    {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11001, 0x11001}, {0x11038, 0x11046}, {0x11070, 0x11070},
    {0x11073, 0x11074}, {0x1107F, 0x11081}, {0x110B3, 0x110B6}, {0x110B9, 0x110BA}, {0x110C2, 0x110C2},
    {0x11100, 0x11102}, {0x11127, 0x1112B}, {0x1112D, 0x11134}, {0x11173, 0x11173}, {0x11180, 0x11181},
    {0x111B6, 0x111BE}, {0x111C9, 0x111CC}, {0x111CF, 0x111CF}, {0x1122F, 0x11231}, {0x11234, 0x11234},
    {0x11236, 0x11237}, {0x1123E, 0x1123E}, {0x112DF, 0x112DF}, {0x112E3, 0x112EA}, {0x11300, 0x11301},
    {0x1133B, 0x1133C}, {0x11340, 0x11340}, {0x11366, 0x1136C}, {0x11370, 0x11374}, {0x11438, 0x1143F},
    {0x11442, 0x11444}, {0x11446, 0x11446}, {0x1145E, 0x1145E}, {0x114B3, 0x114B8}, {0x114BA, 0x114BA},
    {0x114BF, 0x114C0}, {0x114C2, 0x114C3}, {0x115B2, 0x115B5}, {0x115BC, 0x115BD}, {0x115BF, 0x115C0},
    {0x115DC, 0x115DD}, {0x11633, 0x1163A}, {0x1163D, 0x1163D}, {0x1163F, 0x11640}, {0x116AB, 0x116AB},
    {0x116AD, 0x116AD}, {0x116B0, 0x116B5}, {0x116B7, 0x116B7}, {0x1171D, 0x1171F}, {0x11722, 0x11725},
    {0x11727, 0x1172B}, {0x1182F, 0x11837}, {0x11839, 0x1183A}, {0x1193B, 0x1193C}, {0x1193E, 0x1193E},
    {0x11943, 0x11943}, {0x119D4, 0x119D7}, {0x119DA, 0x119DB}, {0x119E0, 0x119E0}, {0x11A01, 0x11A0A},
    {0x11A33, 0x11A38}, {0x11A3B, 0x11A3E}, {0x11A47, 0x11A47}, {0x11A51, 0x11A56}, {0x11A59, 0x11A5B},
    {0x11A8A, 0x11A96}, {0x11A98, 0x11A99}, {0x11C30, 0x11C36}, {0x11C38, 0x11C3D}, {0x11C3F, 0x11C3F},
    {0x11C92, 0x11CA7}, {0x11CAA, 0x11CB0}, {0x11CB2, 0x11CB3}, {0x11CB5, 0x11CB6}, {0x11D31, 0x11D36},
    {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D}, {0x11D3F, 0x11D45}, {0x11D47, 0x11D47}, {0x11D90, 0x11D91},
    {0x11D95, 0x11D95}, {0x11D97, 0x11D97}, {0x11EF3, 0x11EF4}, {0x16AF0, 0x16AF4}, {0x16B30, 0x16B36},
    {0x16F4F, 0x16F4F}, {0x16F8F, 0x16F92}, {0x16FE4, 0x16FE4}, {0x1BC9D, 0x1BC9E}, {0x1CF00, 0x1CF2D},
    {0x1CF30, 0x1CF46}, {0x1D167, 0x1D169}, {0x1D17B, 0x1D182}, {0x1D185, 0x1D18B}, {0x1D1AA, 0x1D1AD},
    {0x1D242, 0x1D244}, {0x1DA00, 0x1DA36}, {0x1DA3B, 0x1DA6C}, {0x1DA75, 0x1DA75}, {0x1DA84, 0x1DA84},
    {0x1DA9B, 0x1DA9F}, {0x1DAA1, 0x1DAAF}, {0x1E000, 0x1E006}, {0x1E008, 0x1E018}, {0x1E01B, 0x1E021},
    {0x1E023, 0x1E024}, {0x1E026, 0x1E02A}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF},
    {0x1E8D0, 0x1E8D6}, {0x1E944, 0x1E94A}, {0xE0100, 0xE01EF},
};
// General category P* (punctuation: Pc Pd Pe Pf Pi Po Ps).
static const uint32_t UNICODE_P[][2] = {
    {0x21, 0x23}, {0x25, 0x2A}, {0x2C, 0x2F}, {0x3A, 0x3B}, {0x3F, 0x40}, {0x5B, 0x5D}, {0x5F, 0x5F},
    {0x7B, 0x7B}, {0x7D, 0x7D}, {0xA1, 0xA1}, {0xA7, 0xA7}, {0xAB, 0xAB}, {0xB6, 0xB7}, {0xBB, 0xBB},
    {0xBF, 0xBF}, {0x37E, 0x37E}, {0x387, 0x387}, {0x55A, 0x55F}, {0x589, 0x58A}, {0x5BE, 0x5BE},
    {0x5C0, 0x5C0}, {0x5C3, 0x5C3}, {0x5C6, 0x5C6}, {0x5F3, 0x5F4}, {0x609, 0x60A}, {0x60C, 0x60D},
    {0x61B, 0x61B}, {0x61D, 0x61F}, {0x66A, 0x66D}, {0x6D4, 0x6D4}, {0x700, 0x70D}, {0x7F7, 0x7F9},
    {0x830, 0x83E}, {0x85E, 0x85E}, {0x964, 0x965}, {0x970, 0x970}, {0x9FD, 0x9FD}, {0xA76, 0xA76},
    {0xAF0, 0xAF0}, {0xC77, 0xC77}, {0xC84, 0xC84}, {0xDF4, 0xDF4}, {0xE4F, 0xE4F}, {0xE5A, 0xE5B},
    {0xF04, 0xF12}, {0xF14, 0xF14}, {0xF3A, 0xF3D}, {0xF85, 0xF85}, {0xFD0, 0xFD4}, {0xFD9, 0xFDA},
    {0x104A, 0x104F}, {0x10FB, 0x10FB}, {0x1360, 0x1368}, {0x1400, 0x1400}, {0x166E, 0x166E},
    {0x169B, 0x169C}, {0x16EB, 0x16ED}, {0x1735, 0x1736}, {0x17D4, 0x17D6}, {0x17D8, 0x17DA},
    {0x1800, 0x180A}, {0x1944, 0x1945}, {0x1A1E, 0x1A1F}, {0x1AA0, 0x1AA6}, {0x1AA8, 0x1AAD},
    {0x1B5A, 0x1B60}, {0x1B7D, 0x1B7E}, {0x1BFC, 0x1BFF}, {0x1C3B, 0x1C3F}, {0x1C7E, 0x1C7F},
    {0x1CC0, 0x1CC7}, {0x1CD3, 0x1CD3}, {0x2010, 0x2027}, {0x2030, 0x2043}, {0x2045, 0x2051},
    {0x2053, 0x205E}, {0x207D, 0x207E}, {0x208D, 0x208E}, {0x2308, 0x230B}, {0x2329, 0x232A},
    {0x2768, 0x2775}, {0x27C5, 0x27C6}, {0x27E6, 0x27EF}, {0x2983, 0x2998}, {0x29D8, 0x29DB},
    {0x29FC, 0x29FD}, {0x2CF9, 0x2CFC}, {0x2CFE, 0x2CFF}, {0x2D70, 0x2D70}, {0x2E00, 0x2E2E},
    {0x2E30, 0x2E4F}, {0x2E52, 0x2E5D}, {0x3001, 0x3003}, {0x3008, 0x3011}, {0x3014, 0x301F},
    {0x3030, 0x3030}, {0x303D, 0x303D}, {0x30A0, 0x30A0}, {0x30FB, 0x30FB}, {0xA4FE, 0xA4FF},
    {0xA60D, 0xA60F}, {0xA673, 0xA673}, {0xA67E, 0xA67E}, {0xA6F2, 0xA6F7}, {0xA874, 0xA877},
    {0xA8CE, 0xA8CF}, {0xA8F8, 0xA8FA}, {0xA8FC, 0xA8FC}, {0xA92E, 0xA92F}, {0xA95F, 0xA95F},
    {0xA9C1, 0xA9CD}, {0xA9DE, 0xA9DF}, {0xAA5C, 0xAA5F}, {0xAADE, 0xAADF}, {0xAAF0, 0xAAF1},
    {0xABEB, 0xABEB}, {0xFD3E, 0xFD3F}, {0xFE10, 0xFE19}, {0xFE30, 0xFE52}, {0xFE54, 0xFE61},
    {0xFE63, 0xFE63}, {0xFE68, 0xFE68}, {0xFE6A, 0xFE6B}, {0xFF01, 0xFF03}, {0xFF05, 0xFF0A},
    {0xFF0C, 0xFF0F}, {0xFF1A, 0xFF1B}, {0xFF1F, 0xFF20}, {0xFF3B, 0xFF3D}, {0xFF3F, 0xFF3F},
    {0xFF5B, 0xFF5B}, {0xFF5D, 0xFF5D}, {0xFF5F, 0xFF65}, {0x10100, 0x10102}, {0x1039F, 0x1039F},
    {0x103D0, 0x103D0}, {0x1056F, 0x1056F}, {0x10857, 0x10857}, {0x1091F, 0x1091F}, {0x1093F, 0x1093F},
    {0x10A50, 0x10A58}, {0x10A7F, 0x10A7F}, {0x10AF0, 0x10AF6}, {0x10B39, 0x10B3F}, {0x10B99, 0x10B9C},
    {0x10EAD, 0x10EAD}, {0x10F55, 0x10F59}, {0x10F86, 0x10F89}, {0x11047, 0x1104D}, {0x110BB, 0x110BC},
    {0x110BE, 0x110C1}, {0x11140, 0x11143}, {0x11174, 0x11175}, {0x111C5, 0x111C8}, {0x111CD, 0x111CD},
    {0x111DB, 0x111DB}, {0x111DD, 0x111DF}, {0x11238, 0x1123D}, {0x112A9, 0x112A9}, {0x1144B, 0x1144F},
    {0x1145A, 0x1145B}, {0x1145D, 0x1145D}, {0x114C6, 0x114C6}, {0x115C1, 0x115D7}, {0x11641, 0x11643},
    {0x11660, 0x1166C}, {0x116B9, 0x116B9}, {0x1173C, 0x1173E}, {0x1183B, 0x1183B}, {0x11944, 0x11946},
    {0x119E2, 0x119E2}, {0x11A3F, 0x11A46}, {0x11A9A, 0x11A9C}, {0x11A9E, 0x11AA2}, {0x11C41, 0x11C45},
    {0x11C70, 0x11C71}, {0x11EF7, 0x11EF8}, {0x11FFF, 0x11FFF}, {0x12470, 0x12474}, {0x12FF1, 0x12FF2},
    {0x16A6E, 0x16A6F}, {0x16AF5, 0x16AF5}, {0x16B37, 0x16B3B}, {0x16B44, 0x16B44}, {0x16E97, 0x16E9A},
    {0x16FE2, 0x16FE2}, {0x1BC9F, 0x1BC9F}, {0x1DA87, 0x1DA8B}, {0x1E95E, 0x1E95F},
};
// General categories Cc, Cf, Co, Cs (control, format, private use, surrogates).
static const uint32_t UNICODE_CONTROL[][2] = {
    {0x0, 0x1F}, {0x7F, 0x9F}, {0xAD, 0xAD}, {0x600, 0x605}, {0x61C, 0x61C}, {0x6DD, 0x6DD}, {0x70F, 0x70F},
    {0x890, 0x891}, {0x8E2, 0x8E2}, {0x180E, 0x180E}, {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x2064},
    {0x2066, 0x206F}, {0xD800, 0xF8FF}, {0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFB}, {0x110BD, 0x110BD},
    {0x110CD, 0x110CD}, {0x13430, 0x13438}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
    {0xE0020, 0xE007F}, {0xF0000, 0xFFFFD}, {0x100000, 0x10FFFD},
};
// General category Cn (unassigned, noncharacters included): dropped by the clean step with the
// other C* categories, as BERT's _is_control does.
static const uint32_t UNICODE_UNASSIGNED[][2] = {
    {0x378, 0x379}, {0x380, 0x383}, {0x38B, 0x38B}, {0x38D, 0x38D}, {0x3A2, 0x3A2}, {0x530, 0x530},
    {0x557, 0x558}, {0x58B, 0x58C}, {0x590, 0x590}, {0x5C8, 0x5CF}, {0x5EB, 0x5EE}, {0x5F5, 0x5FF},
    {0x70E, 0x70E}, {0x74B, 0x74C}, {0x7B2, 0x7BF}, {0x7FB, 0x7FC}, {0x82E, 0x82F}, {0x83F, 0x83F},
    {0x85C, 0x85D}, {0x85F, 0x85F}, {0x86B, 0x86F}, {0x88F, 0x88F}, {0x892, 0x897}, {0x984, 0x984},
    {0x98D, 0x98E}, {0x991, 0x992}, {0x9A9, 0x9A9}, {0x9B1, 0x9B1}, {0x9B3, 0x9B5}, {0x9BA, 0x9BB},
    {0x9C5, 0x9C6}, {0x9C9, 0x9CA}, {0x9CF, 0x9D6}, {0x9D8, 0x9DB}, {0x9DE, 0x9DE}, {0x9E4, 0x9E5},
    {0x9FF, 0xA00}, {0xA04, 0xA04}, {0xA0B, 0xA0E}, {0xA11, 0xA12}, {0xA29, 0xA29}, {0xA31, 0xA31},
    {0xA34, 0xA34}, {0xA37, 0xA37}, {0xA3A, 0xA3B}, {0xA3D, 0xA3D}, {0xA43, 0xA46}, {0xA49, 0xA4A},
    {0xA4E, 0xA50}, {0xA52, 0xA58}, {0xA5D, 0xA5D}, {0xA5F, 0xA65}, {0xA77, 0xA80}, {0xA84, 0xA84},
    {0xA8E, 0xA8E}, {0xA92, 0xA92}, {0xAA9, 0xAA9}, {0xAB1, 0xAB1}, {0xAB4, 0xAB4}, {0xABA, 0xABB},
    {0xAC6, 0xAC6}, {0xACA, 0xACA}, {0xACE, 0xACF}, {0xAD1, 0xADF}, {0xAE4, 0xAE5}, {0xAF2, 0xAF8},
    {0xB00, 0xB00}, {0xB04, 0xB04}, {0xB0D, 0xB0E}, {0xB11, 0xB12}, {0xB29, 0xB29}, {0xB31, 0xB31},
    {0xB34, 0xB34}, {0xB3A, 0xB3B}, {0xB45, 0xB46}, {0xB49, 0xB4A}, {0xB4E, 0xB54}, {0xB58, 0xB5B},
    {0xB5E, 0xB5E}, {0xB64, 0xB65}, {0xB78, 0xB81}, {0xB84, 0xB84}, {0xB8B, 0xB8D}, {0xB91, 0xB91},
    {0xB96, 0xB98}, {0xB9B, 0xB9B}, {0xB9D, 0xB9D}, {0xBA0, 0xBA2}, {0xBA5, 0xBA7}, {0xBAB, 0xBAD},
    {0xBBA, 0xBBD}, {0xBC3, 0xBC5}, {0xBC9, 0xBC9}, {0xBCE, 0xBCF}, {0xBD1, 0xBD6}, {0xBD8, 0xBE5},
    {0xBFB, 0xBFF}, {0xC0D, 0xC0D}, {0xC11, 0xC11}, {0xC29, 0xC29}, {0xC3A, 0xC3B}, {0xC45, 0xC45},
    {0xC49, 0xC49}, {0xC4E, 0xC54}, {0xC57, 0xC57}, {0xC5B, 0xC5C}, {0xC5E, 0xC5F}, {0xC64, 0xC65},
    {0xC70, 0xC76}, {0xC8D, 0xC8D}, {0xC91, 0xC91}, {0xCA9, 0xCA9}, {0xCB4, 0xCB4}, {0xCBA, 0xCBB},
    {0xCC5, 0xCC5}, {0xCC9, 0xCC9}, {0xCCE, 0xCD4}, {0xCD7, 0xCDC}, {0xCDF, 0xCDF}, {0xCE4, 0xCE5},
    {0xCF0, 0xCF0}, {0xCF3, 0xCFF}, {0xD0D, 0xD0D}, {0xD11, 0xD11}, {0xD45, 0xD45}, {0xD49, 0xD49},
    {0xD50, 0xD53}, {0xD64, 0xD65}, {0xD80, 0xD80}, {0xD84, 0xD84}, {0xD97, 0xD99}, {0xDB2, 0xDB2},
    {0xDBC, 0xDBC}, {0xDBE, 0xDBF}, {0xDC7, 0xDC9}, {0xDCB, 0xDCE}, {0xDD5, 0xDD5}, {0xDD7, 0xDD7},
    {0xDE0, 0xDE5}, {0xDF0, 0xDF1}, {0xDF5, 0xE00}, {0xE3B, 0xE3E}, {0xE5C, 0xE80}, {0xE83, 0xE83},
    {0xE85, 0xE85}, {0xE8B, 0xE8B}, {0xEA4, 0xEA4}, {0xEA6, 0xEA6}, {0xEBE, 0xEBF}, {0xEC5, 0xEC5},
    {0xEC7, 0xEC7}, {0xECE, 0xECF}, {0xEDA, 0xEDB}, {0xEE0, 0xEFF}, {0xF48, 0xF48}, {0xF6D, 0xF70},
    {0xF98, 0xF98}, {0xFBD, 0xFBD}, {0xFCD, 0xFCD}, {0xFDB, 0xFFF}, {0x10C6, 0x10C6},
    {0x10C8, 0x10CC}, {0x10CE, 0x10CF}, {0x1249, 0x1249}, {0x124E, 0x124F}, {0x1257, 0x1257},
    {0x1259, 0x1259}, {0x125E, 0x125F}, {0x1289, 0x1289}, {0x128E, 0x128F}, {0x12B1, 0x12B1},
    {0x12B6, 0x12B7}, {0x12BF, 0x12BF}, {0x12C1, 0x12C1}, {0x12C6, 0x12C7}, {0x12D7, 0x12D7},
    {0x1311, 0x1311}, {0x1316, 0x1317}, {0x135B, 0x135C}, {0x137D, 0x137F}, {0x139A, 0x139F},
    {0x13F6, 0x13F7}, {0x13FE, 0x13FF}, {0x169D, 0x169F}, {0x16F9, 0x16FF}, {0x1716, 0x171E},
    {0x1737, 0x173F}, {0x1754, 0x175F}, {0x176D, 0x176D}, {0x1771, 0x1771}, {0x1774, 0x177F},
    {0x17DE, 0x17DF}, {0x17EA, 0x17EF}, {0x17FA, 0x17FF}, {0x181A, 0x181F}, {0x1879, 0x187F},
    {0x18AB, 0x18AF}, {0x18F6, 0x18FF}, {0x191F, 0x191F}, {0x192C, 0x192F}, {0x193C, 0x193F},
    {0x1941, 0x1943}, {0x196E, 0x196F}, {0x1975, 0x197F}, {0x19AC, 0x19AF}, {0x19CA, 0x19CF},
    {0x19DB, 0x19DD}, {0x1A1C, 0x1A1D}, {0x1A5F, 0x1A5F}, {0x1A7D, 0x1A7E}, {0x1A8A, 0x1A8F},
    {0x1A9A, 0x1A9F}, {0x1AAE, 0x1AAF}, {0x1ACF, 0x1AFF}, {0x1B4D, 0x1B4F}, {0x1B7F, 0x1B7F},
    {0x1BF4, 0x1BFB}, {0x1C38, 0x1C3A}, {0x1C4A, 0x1C4C}, {0x1C89, 0x1C8F}, {0x1CBB, 0x1CBC},
    {0x1CC8, 0x1CCF}, {0x1CFB, 0x1CFF}, {0x1F16, 0x1F17}, {0x1F1E, 0x1F1F}, {0x1F46, 0x1F47},
    {0x1F4E, 0x1F4F}, {0x1F58, 0x1F58}, {0x1F5A, 0x1F5A}, {0x1F5C, 0x1F5C}, {0x1F5E, 0x1F5E},
    {0x1F7E, 0x1F7F}, {0x1FB5, 0x1FB5}, {0x1FC5, 0x1FC5}, {0x1FD4, 0x1FD5}, {0x1FDC, 0x1FDC},
    {0x1FF0, 0x1FF1}, {0x1FF5, 0x1FF5}, {0x1FFF, 0x1FFF}, {0x2065, 0x2065}, {0x2072, 0x2073},
    {0x208F, 0x208F}, {0x209D, 0x209F}, {0x20C1, 0x20CF}, {0x20F1, 0x20FF}, {0x218C, 0x218F},
    {0x2427, 0x243F}, {0x244B, 0x245F}, {0x2B74, 0x2B75}, {0x2B96, 0x2B96}, {0x2CF4, 0x2CF8},
    {0x2D26, 0x2D26}, {0x2D28, 0x2D2C}, {0x2D2E, 0x2D2F}, {0x2D68, 0x2D6E}, {0x2D71, 0x2D7E},
    {0x2D97, 0x2D9F}, {0x2DA7, 0x2DA7}, {0x2DAF, 0x2DAF}, {0x2DB7, 0x2DB7}, {0x2DBF, 0x2DBF},
    {0x2DC7, 0x2DC7}, {0x2DCF, 0x2DCF}, {0x2DD7, 0x2DD7}, {0x2DDF, 0x2DDF}, {0x2E5E, 0x2E7F},
    {0x2E9A, 0x2E9A}, {0x2EF4, 0x2EFF}, {0x2FD6, 0x2FEF}, {0x2FFC, 0x2FFF}, {0x3040, 0x3040},
    {0x3097, 0x3098}, {0x3100, 0x3104}, {0x3130, 0x3130}, {0x318F, 0x318F}, {0x31E4, 0x31EF},
    {0x321F, 0x321F}, {0xA48D, 0xA48F}, {0xA4C7, 0xA4CF}, {0xA62C, 0xA63F}, {0xA6F8, 0xA6FF},
    {0xA7CB, 0xA7CF}, {0xA7D2, 0xA7D2}, {0xA7D4, 0xA7D4}, {0xA7DA, 0xA7F1}, {0xA82D, 0xA82F},
    {0xA83A, 0xA83F}, {0xA878, 0xA87F}, {0xA8C6, 0xA8CD}, {0xA8DA, 0xA8DF}, {0xA954, 0xA95E},
    {0xA97D, 0xA97F}, {0xA9CE, 0xA9CE}, {0xA9DA, 0xA9DD}, {0xA9FF, 0xA9FF}, {0xAA37, 0xAA3F},
    {0xAA4E, 0xAA4F}, {0xAA5A, 0xAA5B}, {0xAAC3, 0xAADA}, {0xAAF7, 0xAB00}, {0xAB07, 0xAB08},
    {0xAB0F, 0xAB10}, {0xAB17, 0xAB1F}, {0xAB27, 0xAB27}, {0xAB2F, 0xAB2F}, {0xAB6C, 0xAB6F},
    {0xABEE, 0xABEF}, {0xABFA, 0xABFF}, {0xD7A4, 0xD7AF}, {0xD7C7, 0xD7CA}, {0xD7FC, 0xD7FF},
    {0xFA6E, 0xFA6F}, {0xFADA, 0xFAFF}, {0xFB07, 0xFB12}, {0xFB18, 0xFB1C}, {0xFB37, 0xFB37},
    {0xFB3D, 0xFB3D}, {0xFB3F, 0xFB3F}, {0xFB42, 0xFB42}, {0xFB45, 0xFB45}, {0xFBC3, 0xFBD2},
    {0xFD90, 0xFD91}, {0xFDC8, 0xFDCE}, {0xFDD0, 0xFDEF}, {0xFE1A, 0xFE1F}, {0xFE53, 0xFE53},
    {0xFE67, 0xFE67}, {0xFE6C, 0xFE6F}, {0xFE75, 0xFE75}, {0xFEFD, 0xFEFE}, {0xFF00, 0xFF00},
    {0xFFBF, 0xFFC1}, {0xFFC8, 0xFFC9}, {0xFFD0, 0xFFD1}, {0xFFD8, 0xFFD9}, {0xFFDD, 0xFFDF},
    {0xFFE7, 0xFFE7}, {0xFFEF, 0xFFF8}, {0xFFFE, 0xFFFF}, {0x1000C, 0x1000C}, {0x10027, 0x10027},
    {0x1003B, 0x1003B}, {0x1003E, 0x1003E}, {0x1004E, 0x1004F}, {0x1005E, 0x1007F},
    {0x100FB, 0x100FF}, {0x10103, 0x10106}, {0x10134, 0x10136}, {0x1018F, 0x1018F},
    {0x1019D, 0x1019F}, {0x101A1, 0x101CF}, {0x101FE, 0x1027F}, {0x1029D, 0x1029F},
    {0x102D1, 0x102DF}, {0x102FC, 0x102FF}, {0x10324, 0x1032C}, {0x1034B, 0x1034F},
    {0x1037B, 0x1037F}, {0x1039E, 0x1039E}, {0x103C4, 0x103C7}, {0x103D6, 0x103FF},
    {0x1049E, 0x1049F}, {0x104AA, 0x104AF}, {0x104D4, 0x104D7}, {0x104FC, 0x104FF},
    {0x10528, 0x1052F}, {0x10564, 0x1056E}, {0x1057B, 0x1057B}, {0x1058B, 0x1058B},
    {0x10593, 0x10593}, {0x10596, 0x10596}, {0x105A2, 0x105A2}, {0x105B2, 0x105B2},
    {0x105BA, 0x105BA}, {0x105BD, 0x105FF}, {0x10737, 0x1073F}, {0x10756, 0x1075F},
    {0x10768, 0x1077F}, {0x10786, 0x10786}, {0x107B1, 0x107B1}, {0x107BB, 0x107FF},
    {0x10806, 0x10807}, {0x10809, 0x10809}, {0x10836, 0x10836}, {0x10839, 0x1083B},
    {0x1083D, 0x1083E}, {0x10856, 0x10856}, {0x1089F, 0x108A6}, {0x108B0, 0x108DF},
    {0x108F3, 0x108F3}, {0x108F6, 0x108FA}, {0x1091C, 0x1091E}, {0x1093A, 0x1093E},
    {0x10940, 0x1097F}, {0x109B8, 0x109BB}, {0x109D0, 0x109D1}, {0x10A04, 0x10A04},
    {0x10A07, 0x10A0B}, {0x10A14, 0x10A14}, {0x10A18, 0x10A18}, {0x10A36, 0x10A37},
    {0x10A3B, 0x10A3E}, {0x10A49, 0x10A4F}, {0x10A59, 0x10A5F}, {0x10AA0, 0x10ABF},
    {0x10AE7, 0x10AEA}, {0x10AF7, 0x10AFF}, {0x10B36, 0x10B38}, {0x10B56, 0x10B57},
    {0x10B73, 0x10B77}, {0x10B92, 0x10B98}, {0x10B9D, 0x10BA8}, {0x10BB0, 0x10BFF},
    {0x10C49, 0x10C7F}, {0x10CB3, 0x10CBF}, {0x10CF3, 0x10CF9}, {0x10D28, 0x10D2F},
    {0x10D3A, 0x10E5F}, {0x10E7F, 0x10E7F}, {0x10EAA, 0x10EAA}, {0x10EAE, 0x10EAF},
    {0x10EB2, 0x10EFF}, {0x10F28, 0x10F2F}, {0x10F5A, 0x10F6F}, {0x10F8A, 0x10FAF},
    {0x10FCC, 0x10FDF}, {0x10FF7, 0x10FFF}, {0x1104E, 0x11051}, {0x11076, 0x1107E},
    {0x110C3, 0x110CC}, {0x110CE, 0x110CF}, {0x110E9, 0x110EF}, {0x110FA, 0x110FF},
    {0x11135, 0x11135}, {0x11148, 0x1114F}, {0x11177, 0x1117F}, {0x111E0, 0x111E0},
    {0x111F5, 0x111FF}, {0x11212, 0x11212}, {0x1123F, 0x1127F}, {0x11287, 0x11287},
    {0x11289, 0x11289}, {0x1128E, 0x1128E}, {0x1129E, 0x1129E}, {0x112AA, 0x112AF},
    {0x112EB, 0x112EF}, {0x112FA, 0x112FF}, {0x11304, 0x11304}, {0x1130D, 0x1130E},
    {0x11311, 0x11312}, {0x11329, 0x11329}, {0x11331, 0x11331}, {0x11334, 0x11334},
    {0x1133A, 0x1133A}, {0x11345, 0x11346}, {0x11349, 0x1134A}, {0x1134E, 0x1134F},
    {0x11351, 0x11356}, {0x11358, 0x1135C}, {0x11364, 0x11365}, {0x1136D, 0x1136F},
    {0x11375, 0x113FF}, {0x1145C, 0x1145C}, {0x11462, 0x1147F}, {0x114C8, 0x114CF},
    {0x114DA, 0x1157F}, {0x115B6, 0x115B7}, {0x115DE, 0x115FF}, {0x11645, 0x1164F},
    {0x1165A, 0x1165F}, {0x1166D, 0x1167F}, {0x116BA, 0x116BF}, {0x116CA, 0x116FF},
    {0x1171B, 0x1171C}, {0x1172C, 0x1172F}, {0x11747, 0x117FF}, {0x1183C, 0x1189F},
    {0x118F3, 0x118FE}, {0x11907, 0x11908}, {0x1190A, 0x1190B}, {0x11914, 0x11914},
    {0x11917, 0x11917}, {0x11936, 0x11936}, {0x11939, 0x1193A}, {0x11947, 0x1194F},
    {0x1195A, 0x1199F}, {0x119A8, 0x119A9}, {0x119D8, 0x119D9}, {0x119E5, 0x119FF},
    {0x11A48, 0x11A4F}, {0x11AA3, 0x11AAF}, {0x11AF9, 0x11BFF}, {0x11C09, 0x11C09},
    {0x11C37, 0x11C37}, {0x11C46, 0x11C4F}, {0x11C6D, 0x11C6F}, {0x11C90, 0x11C91},
    {0x11CA8, 0x11CA8}, {0x11CB7, 0x11CFF}, {0x11D07, 0x11D07}, {0x11D0A, 0x11D0A},
    {0x11D37, 0x11D39}, {0x11D3B, 0x11D3B}, {0x11D3E, 0x11D3E}, {0x11D48, 0x11D4F},
    {0x11D5A, 0x11D5F}, {0x11D66, 0x11D66}, {0x11D69, 0x11D69}, {0x11D8F, 0x11D8F},
    {0x11D92, 0x11D92}, {0x11D99, 0x11D9F}, {0x11DAA, 0x11EDF}, {0x11EF9, 0x11FAF},
    {0x11FB1, 0x11FBF}, {0x11FF2, 0x11FFE}, {0x1239A, 0x123FF}, {0x1246F, 0x1246F},
    {0x12475, 0x1247F}, {0x12544, 0x12F8F}, {0x12FF3, 0x12FFF}, {0x1342F, 0x1342F},
    {0x13439, 0x143FF}, {0x14647, 0x167FF}, {0x16A39, 0x16A3F}, {0x16A5F, 0x16A5F},
    {0x16A6A, 0x16A6D}, {0x16ABF, 0x16ABF}, {0x16ACA, 0x16ACF}, {0x16AEE, 0x16AEF},
    {0x16AF6, 0x16AFF}, {0x16B46, 0x16B4F}, {0x16B5A, 0x16B5A}, {0x16B62, 0x16B62},
    {0x16B78, 0x16B7C}, {0x16B90, 0x16E3F}, {0x16E9B, 0x16EFF}, {0x16F4B, 0x16F4E},
    {0x16F88, 0x16F8E}, {0x16FA0, 0x16FDF}, {0x16FE5, 0x16FEF}, {0x16FF2, 0x16FFF},
    {0x187F8, 0x187FF}, {0x18CD6, 0x18CFF}, {0x18D09, 0x1AFEF}, {0x1AFF4, 0x1AFF4},
    {0x1AFFC, 0x1AFFC}, {0x1AFFF, 0x1AFFF}, {0x1B123, 0x1B14F}, {0x1B153, 0x1B163},
    {0x1B168, 0x1B16F}, {0x1B2FC, 0x1BBFF}, {0x1BC6B, 0x1BC6F}, {0x1BC7D, 0x1BC7F},
    {0x1BC89, 0x1BC8F}, {0x1BC9A, 0x1BC9B}, {0x1BCA4, 0x1CEFF}, {0x1CF2E, 0x1CF2F},
    {0x1CF47, 0x1CF4F}, {0x1CFC4, 0x1CFFF}, {0x1D0F6, 0x1D0FF}, {0x1D127, 0x1D128},
    {0x1D1EB, 0x1D1FF}, {0x1D246, 0x1D2DF}, {0x1D2F4, 0x1D2FF}, {0x1D357, 0x1D35F},
    {0x1D379, 0x1D3FF}, {0x1D455, 0x1D455}, {0x1D49D, 0x1D49D}, {0x1D4A0, 0x1D4A1},
    {0x1D4A3, 0x1D4A4}, {0x1D4A7, 0x1D4A8}, {0x1D4AD, 0x1D4AD}, {0x1D4BA, 0x1D4BA},
    {0x1D4BC, 0x1D4BC}, {0x1D4C4, 0x1D4C4}, {0x1D506, 0x1D506}, {0x1D50B, 0x1D50C},
    {0x1D515, 0x1D515}, {0x1D51D, 0x1D51D}, {0x1D53A, 0x1D53A}, {0x1D53F, 0x1D53F},
    {0x1D545, 0x1D545}, {0x1D547, 0x1D549}, {0x1D551, 0x1D551}, {0x1D6A6, 0x1D6A7},
    {0x1D7CC, 0x1D7CD}, {0x1DA8C, 0x1DA9A}, {0x1DAA0, 0x1DAA0}, {0x1DAB0, 0x1DEFF},
    {0x1DF1F, 0x1DFFF}, {0x1E007, 0x1E007}, {0x1E019, 0x1E01A}, {0x1E022, 0x1E022},
    {0x1E025, 0x1E025}, {0x1E02B, 0x1E0FF}, {0x1E12D, 0x1E12F}, {0x1E13E, 0x1E13F},
    {0x1E14A, 0x1E14D}, {0x1E150, 0x1E28F}, {0x1E2AF, 0x1E2BF}, {0x1E2FA, 0x1E2FE},
    {0x1E300, 0x1E7DF}, {0x1E7E7, 0x1E7E7}, {0x1E7EC, 0x1E7EC}, {0x1E7EF, 0x1E7EF},
    {0x1E7FF, 0x1E7FF}, {0x1E8C5, 0x1E8C6}, {0x1E8D7, 0x1E8FF}, {0x1E94C, 0x1E94F},
    {0x1E95A, 0x1E95D}, {0x1E960, 0x1EC70}, {0x1ECB5, 0x1ED00}, {0x1ED3E, 0x1EDFF},
    {0x1EE04, 0x1EE04}, {0x1EE20, 0x1EE20}, {0x1EE23, 0x1EE23}, {0x1EE25, 0x1EE26},
    {0x1EE28, 0x1EE28}, {0x1EE33, 0x1EE33}, {0x1EE38, 0x1EE38}, {0x1EE3A, 0x1EE3A},
    {0x1EE3C, 0x1EE41}, {0x1EE43, 0x1EE46}, {0x1EE48, 0x1EE48}, {0x1EE4A, 0x1EE4A},
    {0x1EE4C, 0x1EE4C}, {0x1EE50, 0x1EE50}, {0x1EE53, 0x1EE53}, {0x1EE55, 0x1EE56},
    {0x1EE58, 0x1EE58}, {0x1EE5A, 0x1EE5A}, {0x1EE5C, 0x1EE5C}, {0x1EE5E, 0x1EE5E},
    {0x1EE60, 0x1EE60}, {0x1EE63, 0x1EE63}, {0x1EE65, 0x1EE66}, {0x1EE6B, 0x1EE6B},
    {0x1EE73, 0x1EE73}, {0x1EE78, 0x1EE78}, {0x1EE7D, 0x1EE7D}, {0x1EE7F, 0x1EE7F},
    {0x1EE8A, 0x1EE8A}, {0x1EE9C, 0x1EEA0}, {0x1EEA4, 0x1EEA4}, {0x1EEAA, 0x1EEAA},
    {0x1EEBC, 0x1EEEF}, {0x1EEF2, 0x1EFFF}, {0x1F02C, 0x1F02F}, {0x1F094, 0x1F09F},
    {0x1F0AF, 0x1F0B0}, {0x1F0C0, 0x1F0C0}, {0x1F0D0, 0x1F0D0}, {0x1F0F6, 0x1F0FF},
    {0x1F1AE, 0x1F1E5}, {0x1F203, 0x1F20F}, {0x1F23C, 0x1F23F}, {0x1F249, 0x1F24F},
    {0x1F252, 0x1F25F}, {0x1F266, 0x1F2FF}, {0x1F6D8, 0x1F6DC}, {0x1F6ED, 0x1F6EF},
    {0x1F6FD, 0x1F6FF}, {0x1F774, 0x1F77F}, {0x1F7D9, 0x1F7DF}, {0x1F7EC, 0x1F7EF},
    {0x1F7F1, 0x1F7FF}, {0x1F80C, 0x1F80F}, {0x1F848, 0x1F84F}, {0x1F85A, 0x1F85F},
    {0x1F888, 0x1F88F}, {0x1F8AE, 0x1F8AF}, {0x1F8B2, 0x1F8FF}, {0x1FA54, 0x1FA5F},
    {0x1FA6E, 0x1FA6F}, {0x1FA75, 0x1FA77}, {0x1FA7D, 0x1FA7F}, {0x1FA87, 0x1FA8F},
    {0x1FAAD, 0x1FAAF}, {0x1FABB, 0x1FABF}, {0x1FAC6, 0x1FACF}, {0x1FADA, 0x1FADF},
    {0x1FAE8, 0x1FAEF}, {0x1FAF7, 0x1FAFF}, {0x1FB93, 0x1FB93}, {0x1FBCB, 0x1FBEF},
    {0x1FBFA, 0x1FFFF}, {0x2A6E0, 0x2A6FF}, {0x2B739, 0x2B73F}, {0x2B81E, 0x2B81F},
    {0x2CEA2, 0x2CEAF}, {0x2EBE1, 0x2F7FF}, {0x2FA1E, 0x2FFFF}, {0x3134B, 0xE0000},
    {0xE0002, 0xE001F}, {0xE0080, 0xE00FF}, {0xE01F0, 0xEFFFF}, {0xFFFFE, 0xFFFFF},
    {0x10FFFE, 0x10FFFF},
};
// Lower-case mapping, one code point to one, as runs {first, last, delta, step}: every step-th code
// point from first to last maps to itself + delta (step 2: upper/lower pairs that alternate).
// (U+0130 maps to two code points, i + U+0307, and is handled apart.)
static const int32_t UNICODE_LOWER[][4] = {
    {0x41, 0x5A, 32, 1}, {0xC0, 0xD6, 32, 1}, {0xD8, 0xDE, 32, 1}, {0x100, 0x12E, 1, 2}, {0x132, 0x136, 1, 2},
    {0x139, 0x147, 1, 2}, {0x14A, 0x176, 1, 2}, {0x178, 0x178, -121, 1}, {0x179, 0x17D, 1, 2},
    {0x181, 0x181, 210, 1}, {0x182, 0x184, 1, 2}, {0x186, 0x186, 206, 1}, {0x187, 0x187, 1, 1},
    {0x189, 0x18A, 205, 1}, {0x18B, 0x18B, 1, 1}, {0x18E, 0x18E, 79, 1}, {0x18F, 0x18F, 202, 1},
    {0x190, 0x190, 203, 1}, {0x191, 0x191, 1, 1}, {0x193, 0x193, 205, 1}, {0x194, 0x194, 207, 1},
    {0x196, 0x196, 211, 1}, {0x197, 0x197, 209, 1}, {0x198, 0x198, 1, 1}, {0x19C, 0x19C, 211, 1},
    {0x19D, 0x19D, 213, 1}, {0x19F, 0x19F, 214, 1}, {0x1A0, 0x1A4, 1, 2}, {0x1A6, 0x1A6, 218, 1},
    {0x1A7, 0x1A7, 1, 1}, {0x1A9, 0x1A9, 218, 1}, {0x1AC, 0x1AC, 1, 1}, {0x1AE, 0x1AE, 218, 1},
    {0x1AF, 0x1AF, 1, 1}, {0x1B1, 0x1B2, 217, 1}, {0x1B3, 0x1B5, 1, 2}, {0x1B7, 0x1B7, 219, 1},
    {0x1B8, 0x1B8, 1, 1}, {0x1BC, 0x1BC, 1, 1}, {0x1C4, 0x1C4, 2, 1}, {0x1C5, 0x1C5, 1, 1},
    {0x1C7, 0x1C7, 2, 1}, {0x1C8, 0x1C8, 1, 1}, {0x1CA, 0x1CA, 2, 1}, {0x1CB, 0x1DB, 1, 2},
    {0x1DE, 0x1EE, 1, 2}, {0x1F1, 0x1F1, 2, 1}, {0x1F2, 0x1F4, 1, 2}, {0x1F6, 0x1F6, -97, 1},
    {0x1F7, 0x1F7, -56, 1}, {0x1F8, 0x21E, 1, 2}, {0x220, 0x220, -130, 1}, {0x222, 0x232, 1, 2},
    {0x23A, 0x23A, 10795, 1}, {0x23B, 0x23B, 1, 1}, {0x23D, 0x23D, -163, 1}, {0x23E, 0x23E, 10792, 1},
    {0x241, 0x241, 1, 1}, {0x243, 0x243, -195, 1}, {0x244, 0x244, 69, 1}, {0x245, 0x245, 71, 1},
    {0x246, 0x24E, 1, 2}, {0x370, 0x372, 1, 2}, {0x376, 0x376, 1, 1}, {0x37F, 0x37F, 116, 1},
    {0x386, 0x386, 38, 1}, {0x388, 0x38A, 37, 1}, {0x38C, 0x38C, 64, 1}, {0x38E, 0x38F, 63, 1},
    {0x391, 0x3A1, 32, 1}, {0x3A3, 0x3AB, 32, 1}, {0x3CF, 0x3CF, 8, 1}, {0x3D8, 0x3EE, 1, 2},
    {0x3F4, 0x3F4, -60, 1}, {0x3F7, 0x3F7, 1, 1}, {0x3F9, 0x3F9, -7, 1}, {0x3FA, 0x3FA, 1, 1},
    {0x3FD, 0x3FF, -130, 1}, {0x400, 0x40F, 80, 1}, {0x410, 0x42F, 32, 1}, {0x460, 0x480, 1, 2},
    {0x48A, 0x4BE, 1, 2}, {0x4C0, 0x4C0, 15, 1}, {0x4C1, 0x4CD, 1, 2}, {0x4D0, 0x52E, 1, 2},
    {0x531, 0x556, 48, 1}, {0x10A0, 0x10C5, 7264, 1}, {0x10C7, 0x10C7, 7264, 1}, {0x10CD, 0x10CD, 7264, 1},
    {0x13A0, 0x13EF, 38864, 1}, {0x13F0, 0x13F5, 8, 1}, {0x1C90, 0x1CBA, -3008, 1},
    {0x1CBD, 0x1CBF, -3008, 1}, {0x1E00, 0x1E94, 1, 2}, {0x1E9E, 0x1E9E, -7615, 1}, {0x1EA0, 0x1EFE, 1, 2},
    {0x1F08, 0x1F0F, -8, 1}, {0x1F18, 0x1F1D, -8, 1}, {0x1F28, 0x1F2F, -8, 1}, {0x1F38, 0x1F3F, -8, 1},
    {0x1F48, 0x1F4D, -8, 1}, {0x1F59, 0x1F5F, -8, 2}, {0x1F68, 0x1F6F, -8, 1}, {0x1F88, 0x1F8F, -8, 1},
    {0x1F98, 0x1F9F, -8, 1}, {0x1FA8, 0x1FAF, -8, 1}, {0x1FB8, 0x1FB9, -8, 1}, {0x1FBA, 0x1FBB, -74, 1},
    {0x1FBC, 0x1FBC, -9, 1}, {0x1FC8, 0x1FCB, -86, 1}, {0x1FCC, 0x1FCC, -9, 1}, {0x1FD8, 0x1FD9, -8, 1},
    {0x1FDA, 0x1FDB, -100, 1}, {0x1FE8, 0x1FE9, -8, 1}, {0x1FEA, 0x1FEB, -112, 1}, {0x1FEC, 0x1FEC, -7, 1},
    {0x1FF8, 0x1FF9, -128, 1}, {0x1FFA, 0x1FFB, -126, 1}, {0x1FFC, 0x1FFC, -9, 1}, {0x2126, 0x2126, -7517, 1},
    {0x212A, 0x212A, -8383, 1}, {0x212B, 0x212B, -8262, 1}, {0x2132, 0x2132, 28, 1}, {0x2160, 0x216F, 16, 1},
    {0x2183, 0x2183, 1, 1}, {0x24B6, 0x24CF, 26, 1}, {0x2C00, 0x2C2F, 48, 1}, {0x2C60, 0x2C60, 1, 1},
    {0x2C62, 0x2C62, -10743, 1}, {0x2C63, 0x2C63, -3814, 1}, {0x2C64, 0x2C64, -10727, 1},
    {0x2C67, 0x2C6B, 1, 2}, {0x2C6D, 0x2C6D, -10780, 1}, {0x2C6E, 0x2C6E, -10749, 1},
    {0x2C6F, 0x2C6F, -10783, 1}, {0x2C70, 0x2C70, -10782, 1}, {0x2C72, 0x2C72, 1, 1}, {0x2C75, 0x2C75, 1, 1},
    {0x2C7E, 0x2C7F, -10815, 1}, {0x2C80, 0x2CE2, 1, 2}, {0x2CEB, 0x2CED, 1, 2}, {0x2CF2, 0x2CF2, 1, 1},
    {0xA640, 0xA66C, 1, 2}, {0xA680, 0xA69A, 1, 2}, {0xA722, 0xA72E, 1, 2}, {0xA732, 0xA76E, 1, 2},
    {0xA779, 0xA77B, 1, 2}, {0xA77D, 0xA77D, -35332, 1}, {0xA77E, 0xA786, 1, 2}, {0xA78B, 0xA78B, 1, 1},
    {0xA78D, 0xA78D, -42280, 1}, {0xA790, 0xA792, 1, 2}, {0xA796, 0xA7A8, 1, 2}, {0xA7AA, 0xA7AA, -42308, 1},
    {0xA7AB, 0xA7AB, -42319, 1}, {0xA7AC, 0xA7AC, -42315, 1}, {0xA7AD, 0xA7AD, -42305, 1},
    {0xA7AE, 0xA7AE, -42308, 1}, {0xA7B0, 0xA7B0, -42258, 1}, {0xA7B1, 0xA7B1, -42282, 1},
    {0xA7B2, 0xA7B2, -42261, 1}, {0xA7B3, 0xA7B3, 928, 1}, {0xA7B4, 0xA7C2, 1, 2}, {0xA7C4, 0xA7C4, -48, 1},
    {0xA7C5, 0xA7C5, -42307, 1}, {0xA7C6, 0xA7C6, -35384, 1}, {0xA7C7, 0xA7C9, 1, 2}, {0xA7D0, 0xA7D0, 1, 1},
    {0xA7D6, 0xA7D8, 1, 2}, {0xA7F5, 0xA7F5, 1, 1}, {0xFF21, 0xFF3A, 32, 1}, {0x10400, 0x10427, 40, 1},
    {0x104B0, 0x104D3, 40, 1}, {0x10570, 0x1057A, 39, 1}, {0x1057C, 0x1058A, 39, 1},
    {0x1058C, 0x10592, 39, 1}, {0x10594, 0x10595, 39, 1}, {0x10C80, 0x10CB2, 64, 1},
    {0x118A0, 0x118BF, 32, 1}, {0x16E40, 0x16E5F, 32, 1}, {0x1E900, 0x1E921, 34, 1},
};
// Canonical decomposition (NFD) with the nonspacing marks (Mn) removed, for the code points where
// that gives one code point: {code point, what it becomes}. Sorted by code point.
static const uint32_t UNICODE_STRIP1[][2] = {
    {0xC0,0x41}, {0xC1,0x41}, {0xC2,0x41}, {0xC3,0x41}, {0xC4,0x41}, {0xC5,0x41}, {0xC7,0x43}, {0xC8,0x45},
    {0xC9,0x45}, {0xCA,0x45}, {0xCB,0x45}, {0xCC,0x49}, {0xCD,0x49}, {0xCE,0x49}, {0xCF,0x49}, {0xD1,0x4E},
    {0xD2,0x4F}, {0xD3,0x4F}, {0xD4,0x4F}, {0xD5,0x4F}, {0xD6,0x4F}, {0xD9,0x55}, {0xDA,0x55}, {0xDB,0x55},
    {0xDC,0x55}, {0xDD,0x59}, {0xE0,0x61}, {0xE1,0x61}, {0xE2,0x61}, {0xE3,0x61}, {0xE4,0x61}, {0xE5,0x61},
    {0xE7,0x63}, {0xE8,0x65}, {0xE9,0x65}, {0xEA,0x65}, {0xEB,0x65}, {0xEC,0x69}, {0xED,0x69}, {0xEE,0x69},
    {0xEF,0x69}, {0xF1,0x6E}, {0xF2,0x6F}, {0xF3,0x6F}, {0xF4,0x6F}, {0xF5,0x6F}, {0xF6,0x6F}, {0xF9,0x75},
    {0xFA,0x75}, {0xFB,0x75}, {0xFC,0x75}, {0xFD,0x79}, {0xFF,0x79}, {0x100,0x41}, {0x101,0x61}, {0x102,0x41},
    {0x103,0x61}, {0x104,0x41}, {0x105,0x61}, {0x106,0x43}, {0x107,0x63}, {0x108,0x43}, {0x109,0x63},
    {0x10A,0x43}, {0x10B,0x63}, {0x10C,0x43}, {0x10D,0x63}, {0x10E,0x44}, {0x10F,0x64}, {0x112,0x45},
    {0x113,0x65}, {0x114,0x45}, {0x115,0x65}, {0x116,0x45}, {0x117,0x65}, {0x118,0x45}, {0x119,0x65},
    {0x11A,0x45}, {0x11B,0x65}, {0x11C,0x47}, {0x11D,0x67}, {0x11E,0x47}, {0x11F,0x67}, {0x120,0x47},
    {0x121,0x67}, {0x122,0x47}, {0x123,0x67}, {0x124,0x48}, {0x125,0x68}, {0x128,0x49}, {0x129,0x69},
    {0x12A,0x49}, {0x12B,0x69}, {0x12C,0x49}, {0x12D,0x69}, {0x12E,0x49}, {0x12F,0x69}, {0x130,0x49},
    {0x134,0x4A}, {0x135,0x6A}, {0x136,0x4B}, {0x137,0x6B}, {0x139,0x4C}, {0x13A,0x6C}, {0x13B,0x4C},
    {0x13C,0x6C}, {0x13D,0x4C}, {0x13E,0x6C}, {0x143,0x4E}, {0x144,0x6E}, {0x145,0x4E}, {0x146,0x6E},
    {0x147,0x4E}, {0x148,0x6E}, {0x14C,0x4F}, {0x14D,0x6F}, {0x14E,0x4F}, {0x14F,0x6F}, {0x150,0x4F},
    {0x151,0x6F}, {0x154,0x52}, {0x155,0x72}, {0x156,0x52}, {0x157,0x72}, {0x158,0x52}, {0x159,0x72},
    {0x15A,0x53}, {0x15B,0x73}, {0x15C,0x53}, {0x15D,0x73}, {0x15E,0x53}, {0x15F,0x73}, {0x160,0x53},
    {0x161,0x73}, {0x162,0x54}, {0x163,0x74}, {0x164,0x54}, {0x165,0x74}, {0x168,0x55}, {0x169,0x75},
    {0x16A,0x55}, {0x16B,0x75}, {0x16C,0x55}, {0x16D,0x75}, {0x16E,0x55}, {0x16F,0x75}, {0x170,0x55},
    {0x171,0x75}, {0x172,0x55}, {0x173,0x75}, {0x174,0x57}, {0x175,0x77}, {0x176,0x59}, {0x177,0x79},
    {0x178,0x59}, {0x179,0x5A}, {0x17A,0x7A}, {0x17B,0x5A}, {0x17C,0x7A}, {0x17D,0x5A}, {0x17E,0x7A},
    {0x1A0,0x4F}, {0x1A1,0x6F}, {0x1AF,0x55}, {0x1B0,0x75}, {0x1CD,0x41}, {0x1CE,0x61}, {0x1CF,0x49},
    {0x1D0,0x69}, {0x1D1,0x4F}, {0x1D2,0x6F}, {0x1D3,0x55}, {0x1D4,0x75}, {0x1D5,0x55}, {0x1D6,0x75},
    {0x1D7,0x55}, {0x1D8,0x75}, {0x1D9,0x55}, {0x1DA,0x75}, {0x1DB,0x55}, {0x1DC,0x75}, {0x1DE,0x41},
    {0x1DF,0x61}, {0x1E0,0x41}, {0x1E1,0x61}, {0x1E2,0xC6}, {0x1E3,0xE6}, {0x1E6,0x47}, {0x1E7,0x67},
    {0x1E8,0x4B}, {0x1E9,0x6B}, {0x1EA,0x4F}, {0x1EB,0x6F}, {0x1EC,0x4F}, {0x1ED,0x6F}, {0x1EE,0x1B7},
    {0x1EF,0x292}, {0x1F0,0x6A}, {0x1F4,0x47}, {0x1F5,0x67}, {0x1F8,0x4E}, {0x1F9,0x6E}, {0x1FA,0x41},
    {0x1FB,0x61}, {0x1FC,0xC6}, {0x1FD,0xE6}, {0x1FE,0xD8}, {0x1FF,0xF8}, {0x200,0x41}, {0x201,0x61},
    {0x202,0x41}, {0x203,0x61}, {0x204,0x45}, {0x205,0x65}, {0x206,0x45}, {0x207,0x65}, {0x208,0x49},
    {0x209,0x69}, {0x20A,0x49}, {0x20B,0x69}, {0x20C,0x4F}, {0x20D,0x6F}, {0x20E,0x4F}, {0x20F,0x6F},
    {0x210,0x52}, {0x211,0x72}, {0x212,0x52}, {0x213,0x72}, {0x214,0x55}, {0x215,0x75}, {0x216,0x55},
    {0x217,0x75}, {0x218,0x53}, {0x219,0x73}, {0x21A,0x54}, {0x21B,0x74}, {0x21E,0x48}, {0x21F,0x68},
    {0x226,0x41}, {0x227,0x61}, {0x228,0x45}, {0x229,0x65}, {0x22A,0x4F}, {0x22B,0x6F}, {0x22C,0x4F},
    {0x22D,0x6F}, {0x22E,0x4F}, {0x22F,0x6F}, {0x230,0x4F}, {0x231,0x6F}, {0x232,0x59}, {0x233,0x79},
    {0x374,0x2B9}, {0x37E,0x3B}, {0x385,0xA8}, {0x386,0x391}, {0x387,0xB7}, {0x388,0x395}, {0x389,0x397},
    {0x38A,0x399}, {0x38C,0x39F}, {0x38E,0x3A5}, {0x38F,0x3A9}, {0x390,0x3B9}, {0x3AA,0x399}, {0x3AB,0x3A5},
    {0x3AC,0x3B1}, {0x3AD,0x3B5}, {0x3AE,0x3B7}, {0x3AF,0x3B9}, {0x3B0,0x3C5}, {0x3CA,0x3B9}, {0x3CB,0x3C5},
    {0x3CC,0x3BF}, {0x3CD,0x3C5}, {0x3CE,0x3C9}, {0x3D3,0x3D2}, {0x3D4,0x3D2}, {0x400,0x415}, {0x401,0x415},
    {0x403,0x413}, {0x407,0x406}, {0x40C,0x41A}, {0x40D,0x418}, {0x40E,0x423}, {0x419,0x418}, {0x439,0x438},
    {0x450,0x435}, {0x451,0x435}, {0x453,0x433}, {0x457,0x456}, {0x45C,0x43A}, {0x45D,0x438}, {0x45E,0x443},
    {0x476,0x474}, {0x477,0x475}, {0x4C1,0x416}, {0x4C2,0x436}, {0x4D0,0x410}, {0x4D1,0x430}, {0x4D2,0x410},
    {0x4D3,0x430}, {0x4D6,0x415}, {0x4D7,0x435}, {0x4DA,0x4D8}, {0x4DB,0x4D9}, {0x4DC,0x416}, {0x4DD,0x436},
    {0x4DE,0x417}, {0x4DF,0x437}, {0x4E2,0x418}, {0x4E3,0x438}, {0x4E4,0x418}, {0x4E5,0x438}, {0x4E6,0x41E},
    {0x4E7,0x43E}, {0x4EA,0x4E8}, {0x4EB,0x4E9}, {0x4EC,0x42D}, {0x4ED,0x44D}, {0x4EE,0x423}, {0x4EF,0x443},
    {0x4F0,0x423}, {0x4F1,0x443}, {0x4F2,0x423}, {0x4F3,0x443}, {0x4F4,0x427}, {0x4F5,0x447}, {0x4F8,0x42B},
    {0x4F9,0x44B}, {0x622,0x627}, {0x623,0x627}, {0x624,0x648}, {0x625,0x627}, {0x626,0x64A}, {0x6C0,0x6D5},
    {0x6C2,0x6C1}, {0x6D3,0x6D2}, {0x929,0x928}, {0x931,0x930}, {0x934,0x933}, {0x958,0x915}, {0x959,0x916},
    {0x95A,0x917}, {0x95B,0x91C}, {0x95C,0x921}, {0x95D,0x922}, {0x95E,0x92B}, {0x95F,0x92F}, {0x9DC,0x9A1},
    {0x9DD,0x9A2}, {0x9DF,0x9AF}, {0xA33,0xA32}, {0xA36,0xA38}, {0xA59,0xA16}, {0xA5A,0xA17}, {0xA5B,0xA1C},
    {0xA5E,0xA2B}, {0xB48,0xB47}, {0xB5C,0xB21}, {0xB5D,0xB22}, {0xCC0,0xCD5}, {0xCC7,0xCD5}, {0xCC8,0xCD6},
    {0xCCA,0xCC2}, {0xDDA,0xDD9}, {0xF43,0xF42}, {0xF4D,0xF4C}, {0xF52,0xF51}, {0xF57,0xF56}, {0xF5C,0xF5B},
    {0xF69,0xF40}, {0x1026,0x1025}, {0x1B3B,0x1B35}, {0x1B3D,0x1B35}, {0x1B43,0x1B35}, {0x1E00,0x41},
    {0x1E01,0x61}, {0x1E02,0x42}, {0x1E03,0x62}, {0x1E04,0x42}, {0x1E05,0x62}, {0x1E06,0x42}, {0x1E07,0x62},
    {0x1E08,0x43}, {0x1E09,0x63}, {0x1E0A,0x44}, {0x1E0B,0x64}, {0x1E0C,0x44}, {0x1E0D,0x64}, {0x1E0E,0x44},
    {0x1E0F,0x64}, {0x1E10,0x44}, {0x1E11,0x64}, {0x1E12,0x44}, {0x1E13,0x64}, {0x1E14,0x45}, {0x1E15,0x65},
    {0x1E16,0x45}, {0x1E17,0x65}, {0x1E18,0x45}, {0x1E19,0x65}, {0x1E1A,0x45}, {0x1E1B,0x65}, {0x1E1C,0x45},
    {0x1E1D,0x65}, {0x1E1E,0x46}, {0x1E1F,0x66}, {0x1E20,0x47}, {0x1E21,0x67}, {0x1E22,0x48}, {0x1E23,0x68},
    {0x1E24,0x48}, {0x1E25,0x68}, {0x1E26,0x48}, {0x1E27,0x68}, {0x1E28,0x48}, {0x1E29,0x68}, {0x1E2A,0x48},
    {0x1E2B,0x68}, {0x1E2C,0x49}, {0x1E2D,0x69}, {0x1E2E,0x49}, {0x1E2F,0x69}, {0x1E30,0x4B}, {0x1E31,0x6B},
    {0x1E32,0x4B}, {0x1E33,0x6B}, {0x1E34,0x4B}, {0x1E35,0x6B}, {0x1E36,0x4C}, {0x1E37,0x6C}, {0x1E38,0x4C},
    {0x1E39,0x6C}, {0x1E3A,0x4C}, {0x1E3B,0x6C}, {0x1E3C,0x4C}, {0x1E3D,0x6C}, {0x1E3E,0x4D}, {0x1E3F,0x6D},
    {0x1E40,0x4D}, {0x1E41,0x6D}, {0x1E42,0x4D}, {0x1E43,0x6D}, {0x1E44,0x4E}, {0x1E45,0x6E}, {0x1E46,0x4E},
    {0x1E47,0x6E}, {0x1E48,0x4E}, {0x1E49,0x6E}, {0x1E4A,0x4E}, {0x1E4B,0x6E}, {0x1E4C,0x4F}, {0x1E4D,0x6F},
    {0x1E4E,0x4F}, {0x1E4F,0x6F}, {0x1E50,0x4F}, {0x1E51,0x6F}, {0x1E52,0x4F}, {0x1E53,0x6F}, {0x1E54,0x50},
    {0x1E55,0x70}, {0x1E56,0x50}, {0x1E57,0x70}, {0x1E58,0x52}, {0x1E59,0x72}, {0x1E5A,0x52}, {0x1E5B,0x72},
    {0x1E5C,0x52}, {0x1E5D,0x72}, {0x1E5E,0x52}, {0x1E5F,0x72}, {0x1E60,0x53}, {0x1E61,0x73}, {0x1E62,0x53},
    {0x1E63,0x73}, {0x1E64,0x53}, {0x1E65,0x73}, {0x1E66,0x53}, {0x1E67,0x73}, {0x1E68,0x53}, {0x1E69,0x73},
    {0x1E6A,0x54}, {0x1E6B,0x74}, {0x1E6C,0x54}, {0x1E6D,0x74}, {0x1E6E,0x54}, {0x1E6F,0x74}, {0x1E70,0x54},
    {0x1E71,0x74}, {0x1E72,0x55}, {0x1E73,0x75}, {0x1E74,0x55}, {0x1E75,0x75}, {0x1E76,0x55}, {0x1E77,0x75},
    {0x1E78,0x55}, {0x1E79,0x75}, {0x1E7A,0x55}, {0x1E7B,0x75}, {0x1E7C,0x56}, {0x1E7D,0x76}, {0x1E7E,0x56},
    {0x1E7F,0x76}, {0x1E80,0x57}, {0x1E81,0x77}, {0x1E82,0x57}, {0x1E83,0x77}, {0x1E84,0x57}, {0x1E85,0x77},
    {0x1E86,0x57}, {0x1E87,0x77}, {0x1E88,0x57}, {0x1E89,0x77}, {0x1E8A,0x58}, {0x1E8B,0x78}, {0x1E8C,0x58},
    {0x1E8D,0x78}, {0x1E8E,0x59}, {0x1E8F,0x79}, {0x1E90,0x5A}, {0x1E91,0x7A}, {0x1E92,0x5A}, {0x1E93,0x7A},
    {0x1E94,0x5A}, {0x1E95,0x7A}, {0x1E96,0x68}, {0x1E97,0x74}, {0x1E98,0x77}, {0x1E99,0x79}, {0x1E9B,0x17F},
    {0x1EA0,0x41}, {0x1EA1,0x61}, {0x1EA2,0x41}, {0x1EA3,0x61}, {0x1EA4,0x41}, {0x1EA5,0x61}, {0x1EA6,0x41},
    {0x1EA7,0x61}, {0x1EA8,0x41}, {0x1EA9,0x61}, {0x1EAA,0x41}, {0x1EAB,0x61}, {0x1EAC,0x41}, {0x1EAD,0x61},
    {0x1EAE,0x41}, {0x1EAF,0x61}, {0x1EB0,0x41}, {0x1EB1,0x61}, {0x1EB2,0x41}, {0x1EB3,0x61}, {0x1EB4,0x41},
    {0x1EB5,0x61}, {0x1EB6,0x41}, {0x1EB7,0x61}, {0x1EB8,0x45}, {0x1EB9,0x65}, {0x1EBA,0x45}, {0x1EBB,0x65},
    {0x1EBC,0x45}, {0x1EBD,0x65}, {0x1EBE,0x45}, {0x1EBF,0x65}, {0x1EC0,0x45}, {0x1EC1,0x65}, {0x1EC2,0x45},
    {0x1EC3,0x65}, {0x1EC4,0x45}, {0x1EC5,0x65}, {0x1EC6,0x45}, {0x1EC7,0x65}, {0x1EC8,0x49}, {0x1EC9,0x69},
    {0x1ECA,0x49}, {0x1ECB,0x69}, {0x1ECC,0x4F}, {0x1ECD,0x6F}, {0x1ECE,0x4F}, {0x1ECF,0x6F}, {0x1ED0,0x4F},
    {0x1ED1,0x6F}, {0x1ED2,0x4F}, {0x1ED3,0x6F}, {0x1ED4,0x4F}, {0x1ED5,0x6F}, {0x1ED6,0x4F}, {0x1ED7,0x6F},
    {0x1ED8,0x4F}, {0x1ED9,0x6F}, {0x1EDA,0x4F}, {0x1EDB,0x6F}, {0x1EDC,0x4F}, {0x1EDD,0x6F}, {0x1EDE,0x4F},
    {0x1EDF,0x6F}, {0x1EE0,0x4F}, {0x1EE1,0x6F}, {0x1EE2,0x4F}, {0x1EE3,0x6F}, {0x1EE4,0x55}, {0x1EE5,0x75},
    {0x1EE6,0x55}, {0x1EE7,0x75}, {0x1EE8,0x55}, {0x1EE9,0x75}, {0x1EEA,0x55}, {0x1EEB,0x75}, {0x1EEC,0x55},
    {0x1EED,0x75}, {0x1EEE,0x55}, {0x1EEF,0x75}, {0x1EF0,0x55}, {0x1EF1,0x75}, {0x1EF2,0x59}, {0x1EF3,0x79},
    {0x1EF4,0x59}, {0x1EF5,0x79}, {0x1EF6,0x59}, {0x1EF7,0x79}, {0x1EF8,0x59}, {0x1EF9,0x79}, {0x1F00,0x3B1},
    {0x1F01,0x3B1}, {0x1F02,0x3B1}, {0x1F03,0x3B1}, {0x1F04,0x3B1}, {0x1F05,0x3B1}, {0x1F06,0x3B1},
    {0x1F07,0x3B1}, {0x1F08,0x391}, {0x1F09,0x391}, {0x1F0A,0x391}, {0x1F0B,0x391}, {0x1F0C,0x391},
    {0x1F0D,0x391}, {0x1F0E,0x391}, {0x1F0F,0x391}, {0x1F10,0x3B5}, {0x1F11,0x3B5}, {0x1F12,0x3B5},
    {0x1F13,0x3B5}, {0x1F14,0x3B5}, {0x1F15,0x3B5}, {0x1F18,0x395}, {0x1F19,0x395}, {0x1F1A,0x395},
    {0x1F1B,0x395}, {0x1F1C,0x395}, {0x1F1D,0x395}, {0x1F20,0x3B7}, {0x1F21,0x3B7}, {0x1F22,0x3B7},
    {0x1F23,0x3B7}, {0x1F24,0x3B7}, {0x1F25,0x3B7}, {0x1F26,0x3B7}, {0x1F27,0x3B7}, {0x1F28,0x397},
    {0x1F29,0x397}, {0x1F2A,0x397}, {0x1F2B,0x397}, {0x1F2C,0x397}, {0x1F2D,0x397}, {0x1F2E,0x397},
    {0x1F2F,0x397}, {0x1F30,0x3B9}, {0x1F31,0x3B9}, {0x1F32,0x3B9}, {0x1F33,0x3B9}, {0x1F34,0x3B9},
    {0x1F35,0x3B9}, {0x1F36,0x3B9}, {0x1F37,0x3B9}, {0x1F38,0x399}, {0x1F39,0x399}, {0x1F3A,0x399},
    {0x1F3B,0x399}, {0x1F3C,0x399}, {0x1F3D,0x399}, {0x1F3E,0x399}, {0x1F3F,0x399}, {0x1F40,0x3BF},
    {0x1F41,0x3BF}, {0x1F42,0x3BF}, {0x1F43,0x3BF}, {0x1F44,0x3BF}, {0x1F45,0x3BF}, {0x1F48,0x39F},
    {0x1F49,0x39F}, {0x1F4A,0x39F}, {0x1F4B,0x39F}, {0x1F4C,0x39F}, {0x1F4D,0x39F}, {0x1F50,0x3C5},
    {0x1F51,0x3C5}, {0x1F52,0x3C5}, {0x1F53,0x3C5}, {0x1F54,0x3C5}, {0x1F55,0x3C5}, {0x1F56,0x3C5},
    {0x1F57,0x3C5}, {0x1F59,0x3A5}, {0x1F5B,0x3A5}, {0x1F5D,0x3A5}, {0x1F5F,0x3A5}, {0x1F60,0x3C9},
    {0x1F61,0x3C9}, {0x1F62,0x3C9}, {0x1F63,0x3C9}, {0x1F64,0x3C9}, {0x1F65,0x3C9}, {0x1F66,0x3C9},
    {0x1F67,0x3C9}, {0x1F68,0x3A9}, {0x1F69,0x3A9}, {0x1F6A,0x3A9}, {0x1F6B,0x3A9}, {0x1F6C,0x3A9},
    {0x1F6D,0x3A9}, {0x1F6E,0x3A9}, {0x1F6F,0x3A9}, {0x1F70,0x3B1}, {0x1F71,0x3B1}, {0x1F72,0x3B5},
    {0x1F73,0x3B5}, {0x1F74,0x3B7}, {0x1F75,0x3B7}, {0x1F76,0x3B9}, {0x1F77,0x3B9}, {0x1F78,0x3BF},
    {0x1F79,0x3BF}, {0x1F7A,0x3C5}, {0x1F7B,0x3C5}, {0x1F7C,0x3C9}, {0x1F7D,0x3C9}, {0x1F80,0x3B1},
    {0x1F81,0x3B1}, {0x1F82,0x3B1}, {0x1F83,0x3B1}, {0x1F84,0x3B1}, {0x1F85,0x3B1}, {0x1F86,0x3B1},
    {0x1F87,0x3B1}, {0x1F88,0x391}, {0x1F89,0x391}, {0x1F8A,0x391}, {0x1F8B,0x391}, {0x1F8C,0x391},
    {0x1F8D,0x391}, {0x1F8E,0x391}, {0x1F8F,0x391}, {0x1F90,0x3B7}, {0x1F91,0x3B7}, {0x1F92,0x3B7},
    {0x1F93,0x3B7}, {0x1F94,0x3B7}, {0x1F95,0x3B7}, {0x1F96,0x3B7}, {0x1F97,0x3B7}, {0x1F98,0x397},
    {0x1F99,0x397}, {0x1F9A,0x397}, {0x1F9B,0x397}, {0x1F9C,0x397}, {0x1F9D,0x397}, {0x1F9E,0x397},
    {0x1F9F,0x397}, {0x1FA0,0x3C9}, {0x1FA1,0x3C9}, {0x1FA2,0x3C9}, {0x1FA3,0x3C9}, {0x1FA4,0x3C9},
    {0x1FA5,0x3C9}, {0x1FA6,0x3C9}, {0x1FA7,0x3C9}, {0x1FA8,0x3A9}, {0x1FA9,0x3A9}, {0x1FAA,0x3A9},
    {0x1FAB,0x3A9}, {0x1FAC,0x3A9}, {0x1FAD,0x3A9}, {0x1FAE,0x3A9}, {0x1FAF,0x3A9}, {0x1FB0,0x3B1},
    {0x1FB1,0x3B1}, {0x1FB2,0x3B1}, {0x1FB3,0x3B1}, {0x1FB4,0x3B1}, {0x1FB6,0x3B1}, {0x1FB7,0x3B1},
    {0x1FB8,0x391}, {0x1FB9,0x391}, {0x1FBA,0x391}, {0x1FBB,0x391}, {0x1FBC,0x391}, {0x1FBE,0x3B9},
    {0x1FC1,0xA8}, {0x1FC2,0x3B7}, {0x1FC3,0x3B7}, {0x1FC4,0x3B7}, {0x1FC6,0x3B7}, {0x1FC7,0x3B7},
    {0x1FC8,0x395}, {0x1FC9,0x395}, {0x1FCA,0x397}, {0x1FCB,0x397}, {0x1FCC,0x397}, {0x1FCD,0x1FBF},
    {0x1FCE,0x1FBF}, {0x1FCF,0x1FBF}, {0x1FD0,0x3B9}, {0x1FD1,0x3B9}, {0x1FD2,0x3B9}, {0x1FD3,0x3B9},
    {0x1FD6,0x3B9}, {0x1FD7,0x3B9}, {0x1FD8,0x399}, {0x1FD9,0x399}, {0x1FDA,0x399}, {0x1FDB,0x399},
    {0x1FDD,0x1FFE}, {0x1FDE,0x1FFE}, {0x1FDF,0x1FFE}, {0x1FE0,0x3C5}, {0x1FE1,0x3C5}, {0x1FE2,0x3C5},
    {0x1FE3,0x3C5}, {0x1FE4,0x3C1}, {0x1FE5,0x3C1}, {0x1FE6,0x3C5}, {0x1FE7,0x3C5}, {0x1FE8,0x3A5},
    {0x1FE9,0x3A5}, {0x1FEA,0x3A5}, {0x1FEB,0x3A5}, {0x1FEC,0x3A1}, {0x1FED,0xA8}, {0x1FEE,0xA8},
    {0x1FEF,0x60}, {0x1FF2,0x3C9}, {0x1FF3,0x3C9}, {0x1FF4,0x3C9}, {0x1FF6,0x3C9}, {0x1FF7,0x3C9},
    {0x1FF8,0x39F}, {0x1FF9,0x39F}, {0x1FFA,0x3A9}, {0x1FFB,0x3A9}, {0x1FFC,0x3A9}, {0x1FFD,0xB4},
    {0x2000,0x2002}, {0x2001,0x2003}, {0x2126,0x3A9}, {0x212A,0x4B}, {0x212B,0x41}, {0x219A,0x2190},
    {0x219B,0x2192}, {0x21AE,0x2194}, {0x21CD,0x21D0}, {0x21CE,0x21D4}, {0x21CF,0x21D2}, {0x2204,0x2203},
    {0x2209,0x2208}, {0x220C,0x220B}, {0x2224,0x2223}, {0x2226,0x2225}, {0x2241,0x223C}, {0x2244,0x2243},
    {0x2247,0x2245}, {0x2249,0x2248}, {0x2260,0x3D}, {0x2262,0x2261}, {0x226D,0x224D}, {0x226E,0x3C},
    {0x226F,0x3E}, {0x2270,0x2264}, {0x2271,0x2265}, {0x2274,0x2272}, {0x2275,0x2273}, {0x2278,0x2276},
    {0x2279,0x2277}, {0x2280,0x227A}, {0x2281,0x227B}, {0x2284,0x2282}, {0x2285,0x2283}, {0x2288,0x2286},
    {0x2289,0x2287}, {0x22AC,0x22A2}, {0x22AD,0x22A8}, {0x22AE,0x22A9}, {0x22AF,0x22AB}, {0x22E0,0x227C},
    {0x22E1,0x227D}, {0x22E2,0x2291}, {0x22E3,0x2292}, {0x22EA,0x22B2}, {0x22EB,0x22B3}, {0x22EC,0x22B4},
    {0x22ED,0x22B5}, {0x2329,0x3008}, {0x232A,0x3009}, {0x2ADC,0x2ADD}, {0x304C,0x304B}, {0x304E,0x304D},
    {0x3050,0x304F}, {0x3052,0x3051}, {0x3054,0x3053}, {0x3056,0x3055}, {0x3058,0x3057}, {0x305A,0x3059},
    {0x305C,0x305B}, {0x305E,0x305D}, {0x3060,0x305F}, {0x3062,0x3061}, {0x3065,0x3064}, {0x3067,0x3066},
    {0x3069,0x3068}, {0x3070,0x306F}, {0x3071,0x306F}, {0x3073,0x3072}, {0x3074,0x3072}, {0x3076,0x3075},
    {0x3077,0x3075}, {0x3079,0x3078}, {0x307A,0x3078}, {0x307C,0x307B}, {0x307D,0x307B}, {0x3094,0x3046},
    {0x309E,0x309D}, {0x30AC,0x30AB}, {0x30AE,0x30AD}, {0x30B0,0x30AF}, {0x30B2,0x30B1}, {0x30B4,0x30B3},
    {0x30B6,0x30B5}, {0x30B8,0x30B7}, {0x30BA,0x30B9}, {0x30BC,0x30BB}, {0x30BE,0x30BD}, {0x30C0,0x30BF},
    {0x30C2,0x30C1}, {0x30C5,0x30C4}, {0x30C7,0x30C6}, {0x30C9,0x30C8}, {0x30D0,0x30CF}, {0x30D1,0x30CF},
    {0x30D3,0x30D2}, {0x30D4,0x30D2}, {0x30D6,0x30D5}, {0x30D7,0x30D5}, {0x30D9,0x30D8}, {0x30DA,0x30D8},
    {0x30DC,0x30DB}, {0x30DD,0x30DB}, {0x30F4,0x30A6}, {0x30F7,0x30EF}, {0x30F8,0x30F0}, {0x30F9,0x30F1},
    {0x30FA,0x30F2}, {0x30FE,0x30FD}, {0xF900,0x8C48}, {0xF901,0x66F4}, {0xF902,0x8ECA}, {0xF903,0x8CC8},
    {0xF904,0x6ED1}, {0xF905,0x4E32}, {0xF906,0x53E5}, {0xF907,0x9F9C}, {0xF908,0x9F9C}, {0xF909,0x5951},
    {0xF90A,0x91D1}, {0xF90B,0x5587}, {0xF90C,0x5948}, {0xF90D,0x61F6}, {0xF90E,0x7669}, {0xF90F,0x7F85},
    {0xF910,0x863F}, {0xF911,0x87BA}, {0xF912,0x88F8}, {0xF913,0x908F}, {0xF914,0x6A02}, {0xF915,0x6D1B},
    {0xF916,0x70D9}, {0xF917,0x73DE}, {0xF918,0x843D}, {0xF919,0x916A}, {0xF91A,0x99F1}, {0xF91B,0x4E82},
    {0xF91C,0x5375}, {0xF91D,0x6B04}, {0xF91E,0x721B}, {0xF91F,0x862D}, {0xF920,0x9E1E}, {0xF921,0x5D50},
    {0xF922,0x6FEB}, {0xF923,0x85CD}, {0xF924,0x8964}, {0xF925,0x62C9}, {0xF926,0x81D8}, {0xF927,0x881F},
    {0xF928,0x5ECA}, {0xF929,0x6717}, {0xF92A,0x6D6A}, {0xF92B,0x72FC}, {0xF92C,0x90CE}, {0xF92D,0x4F86},
    {0xF92E,0x51B7}, {0xF92F,0x52DE}, {0xF930,0x64C4}, {0xF931,0x6AD3}, {0xF932,0x7210}, {0xF933,0x76E7},
    {0xF934,0x8001}, {0xF935,0x8606}, {0xF936,0x865C}, {0xF937,0x8DEF}, {0xF938,0x9732}, {0xF939,0x9B6F},
    {0xF93A,0x9DFA}, {0xF93B,0x788C}, {0xF93C,0x797F}, {0xF93D,0x7DA0}, {0xF93E,0x83C9}, {0xF93F,0x9304},
    {0xF940,0x9E7F}, {0xF941,0x8AD6}, {0xF942,0x58DF}, {0xF943,0x5F04}, {0xF944,0x7C60}, {0xF945,0x807E},
    {0xF946,0x7262}, {0xF947,0x78CA}, {0xF948,0x8CC2}, {0xF949,0x96F7}, {0xF94A,0x58D8}, {0xF94B,0x5C62},
    {0xF94C,0x6A13}, {0xF94D,0x6DDA}, {0xF94E,0x6F0F}, {0xF94F,0x7D2F}, {0xF950,0x7E37}, {0xF951,0x964B},
    {0xF952,0x52D2}, {0xF953,0x808B}, {0xF954,0x51DC}, {0xF955,0x51CC}, {0xF956,0x7A1C}, {0xF957,0x7DBE},
    {0xF958,0x83F1}, {0xF959,0x9675}, {0xF95A,0x8B80}, {0xF95B,0x62CF}, {0xF95C,0x6A02}, {0xF95D,0x8AFE},
    {0xF95E,0x4E39}, {0xF95F,0x5BE7}, {0xF960,0x6012}, {0xF961,0x7387}, {0xF962,0x7570}, {0xF963,0x5317},
    {0xF964,0x78FB}, {0xF965,0x4FBF}, {0xF966,0x5FA9}, {0xF967,0x4E0D}, {0xF968,0x6CCC}, {0xF969,0x6578},
    {0xF96A,0x7D22}, {0xF96B,0x53C3}, {0xF96C,0x585E}, {0xF96D,0x7701}, {0xF96E,0x8449}, {0xF96F,0x8AAA},
    {0xF970,0x6BBA}, {0xF971,0x8FB0}, {0xF972,0x6C88}, {0xF973,0x62FE}, {0xF974,0x82E5}, {0xF975,0x63A0},
    {0xF976,0x7565}, {0xF977,0x4EAE}, {0xF978,0x5169}, {0xF979,0x51C9}, {0xF97A,0x6881}, {0xF97B,0x7CE7},
    {0xF97C,0x826F}, {0xF97D,0x8AD2}, {0xF97E,0x91CF}, {0xF97F,0x52F5}, {0xF980,0x5442}, {0xF981,0x5973},
    {0xF982,0x5EEC}, {0xF983,0x65C5}, {0xF984,0x6FFE}, {0xF985,0x792A}, {0xF986,0x95AD}, {0xF987,0x9A6A},
    {0xF988,0x9E97}, {0xF989,0x9ECE}, {0xF98A,0x529B}, {0xF98B,0x66C6}, {0xF98C,0x6B77}, {0xF98D,0x8F62},
    {0xF98E,0x5E74}, {0xF98F,0x6190}, {0xF990,0x6200}, {0xF991,0x649A}, {0xF992,0x6F23}, {0xF993,0x7149},
    {0xF994,0x7489}, {0xF995,0x79CA}, {0xF996,0x7DF4}, {0xF997,0x806F}, {0xF998,0x8F26}, {0xF999,0x84EE},
    {0xF99A,0x9023}, {0xF99B,0x934A}, {0xF99C,0x5217}, {0xF99D,0x52A3}, {0xF99E,0x54BD}, {0xF99F,0x70C8},
    {0xF9A0,0x88C2}, {0xF9A1,0x8AAA}, {0xF9A2,0x5EC9}, {0xF9A3,0x5FF5}, {0xF9A4,0x637B}, {0xF9A5,0x6BAE},
    {0xF9A6,0x7C3E}, {0xF9A7,0x7375}, {0xF9A8,0x4EE4}, {0xF9A9,0x56F9}, {0xF9AA,0x5BE7}, {0xF9AB,0x5DBA},
    {0xF9AC,0x601C}, {0xF9AD,0x73B2}, {0xF9AE,0x7469}, {0xF9AF,0x7F9A}, {0xF9B0,0x8046}, {0xF9B1,0x9234},
    {0xF9B2,0x96F6}, {0xF9B3,0x9748}, {0xF9B4,0x9818}, {0xF9B5,0x4F8B}, {0xF9B6,0x79AE}, {0xF9B7,0x91B4},
    {0xF9B8,0x96B8}, {0xF9B9,0x60E1}, {0xF9BA,0x4E86}, {0xF9BB,0x50DA}, {0xF9BC,0x5BEE}, {0xF9BD,0x5C3F},
    {0xF9BE,0x6599}, {0xF9BF,0x6A02}, {0xF9C0,0x71CE}, {0xF9C1,0x7642}, {0xF9C2,0x84FC}, {0xF9C3,0x907C},
    {0xF9C4,0x9F8D}, {0xF9C5,0x6688}, {0xF9C6,0x962E}, {0xF9C7,0x5289}, {0xF9C8,0x677B}, {0xF9C9,0x67F3},
    {0xF9CA,0x6D41}, {0xF9CB,0x6E9C}, {0xF9CC,0x7409}, {0xF9CD,0x7559}, {0xF9CE,0x786B}, {0xF9CF,0x7D10},
    {0xF9D0,0x985E}, {0xF9D1,0x516D}, {0xF9D2,0x622E}, {0xF9D3,0x9678}, {0xF9D4,0x502B}, {0xF9D5,0x5D19},
    {0xF9D6,0x6DEA}, {0xF9D7,0x8F2A}, {0xF9D8,0x5F8B}, {0xF9D9,0x6144}, {0xF9DA,0x6817}, {0xF9DB,0x7387},
    {0xF9DC,0x9686}, {0xF9DD,0x5229}, {0xF9DE,0x540F}, {0xF9DF,0x5C65}, {0xF9E0,0x6613}, {0xF9E1,0x674E},
    {0xF9E2,0x68A8}, {0xF9E3,0x6CE5}, {0xF9E4,0x7406}, {0xF9E5,0x75E2}, {0xF9E6,0x7F79}, {0xF9E7,0x88CF},
    {0xF9E8,0x88E1}, {0xF9E9,0x91CC}, {0xF9EA,0x96E2}, {0xF9EB,0x533F}, {0xF9EC,0x6EBA}, {0xF9ED,0x541D},
    {0xF9EE,0x71D0}, {0xF9EF,0x7498}, {0xF9F0,0x85FA}, {0xF9F1,0x96A3}, {0xF9F2,0x9C57}, {0xF9F3,0x9E9F},
    {0xF9F4,0x6797}, {0xF9F5,0x6DCB}, {0xF9F6,0x81E8}, {0xF9F7,0x7ACB}, {0xF9F8,0x7B20}, {0xF9F9,0x7C92},
    {0xF9FA,0x72C0}, {0xF9FB,0x7099}, {0xF9FC,0x8B58}, {0xF9FD,0x4EC0}, {0xF9FE,0x8336}, {0xF9FF,0x523A},
    {0xFA00,0x5207}, {0xFA01,0x5EA6}, {0xFA02,0x62D3}, {0xFA03,0x7CD6}, {0xFA04,0x5B85}, {0xFA05,0x6D1E},
    {0xFA06,0x66B4}, {0xFA07,0x8F3B}, {0xFA08,0x884C}, {0xFA09,0x964D}, {0xFA0A,0x898B}, {0xFA0B,0x5ED3},
    {0xFA0C,0x5140}, {0xFA0D,0x55C0}, {0xFA10,0x585A}, {0xFA12,0x6674}, {0xFA15,0x51DE}, {0xFA16,0x732A},
    {0xFA17,0x76CA}, {0xFA18,0x793C}, {0xFA19,0x795E}, {0xFA1A,0x7965}, {0xFA1B,0x798F}, {0xFA1C,0x9756},
    {0xFA1D,0x7CBE}, {0xFA1E,0x7FBD}, {0xFA20,0x8612}, {0xFA22,0x8AF8}, {0xFA25,0x9038}, {0xFA26,0x90FD},
    {0xFA2A,0x98EF}, {0xFA2B,0x98FC}, {0xFA2C,0x9928}, {0xFA2D,0x9DB4}, {0xFA2E,0x90DE}, {0xFA2F,0x96B7},
    {0xFA30,0x4FAE}, {0xFA31,0x50E7}, {0xFA32,0x514D}, {0xFA33,0x52C9}, {0xFA34,0x52E4}, {0xFA35,0x5351},
    {0xFA36,0x559D}, {0xFA37,0x5606}, {0xFA38,0x5668}, {0xFA39,0x5840}, {0xFA3A,0x58A8}, {0xFA3B,0x5C64},
    {0xFA3C,0x5C6E}, {0xFA3D,0x6094}, {0xFA3E,0x6168}, {0xFA3F,0x618E}, {0xFA40,0x61F2}, {0xFA41,0x654F},
    {0xFA42,0x65E2}, {0xFA43,0x6691}, {0xFA44,0x6885}, {0xFA45,0x6D77}, {0xFA46,0x6E1A}, {0xFA47,0x6F22},
    {0xFA48,0x716E}, {0xFA49,0x722B}, {0xFA4A,0x7422}, {0xFA4B,0x7891}, {0xFA4C,0x793E}, {0xFA4D,0x7949},
    {0xFA4E,0x7948}, {0xFA4F,0x7950}, {0xFA50,0x7956}, {0xFA51,0x795D}, {0xFA52,0x798D}, {0xFA53,0x798E},
    {0xFA54,0x7A40}, {0xFA55,0x7A81}, {0xFA56,0x7BC0}, {0xFA57,0x7DF4}, {0xFA58,0x7E09}, {0xFA59,0x7E41},
    {0xFA5A,0x7F72}, {0xFA5B,0x8005}, {0xFA5C,0x81ED}, {0xFA5D,0x8279}, {0xFA5E,0x8279}, {0xFA5F,0x8457},
    {0xFA60,0x8910}, {0xFA61,0x8996}, {0xFA62,0x8B01}, {0xFA63,0x8B39}, {0xFA64,0x8CD3}, {0xFA65,0x8D08},
    {0xFA66,0x8FB6}, {0xFA67,0x9038}, {0xFA68,0x96E3}, {0xFA69,0x97FF}, {0xFA6A,0x983B}, {0xFA6B,0x6075},
    {0xFA6C,0x242EE}, {0xFA6D,0x8218}, {0xFA70,0x4E26}, {0xFA71,0x51B5}, {0xFA72,0x5168}, {0xFA73,0x4F80},
    {0xFA74,0x5145}, {0xFA75,0x5180}, {0xFA76,0x52C7}, {0xFA77,0x52FA}, {0xFA78,0x559D}, {0xFA79,0x5555},
    {0xFA7A,0x5599}, {0xFA7B,0x55E2}, {0xFA7C,0x585A}, {0xFA7D,0x58B3}, {0xFA7E,0x5944}, {0xFA7F,0x5954},
    {0xFA80,0x5A62}, {0xFA81,0x5B28}, {0xFA82,0x5ED2}, {0xFA83,0x5ED9}, {0xFA84,0x5F69}, {0xFA85,0x5FAD},
    {0xFA86,0x60D8}, {0xFA87,0x614E}, {0xFA88,0x6108}, {0xFA89,0x618E}, {0xFA8A,0x6160}, {0xFA8B,0x61F2},
    {0xFA8C,0x6234}, {0xFA8D,0x63C4}, {0xFA8E,0x641C}, {0xFA8F,0x6452}, {0xFA90,0x6556}, {0xFA91,0x6674},
    {0xFA92,0x6717}, {0xFA93,0x671B}, {0xFA94,0x6756}, {0xFA95,0x6B79}, {0xFA96,0x6BBA}, {0xFA97,0x6D41},
    {0xFA98,0x6EDB}, {0xFA99,0x6ECB}, {0xFA9A,0x6F22}, {0xFA9B,0x701E}, {0xFA9C,0x716E}, {0xFA9D,0x77A7},
    {0xFA9E,0x7235}, {0xFA9F,0x72AF}, {0xFAA0,0x732A}, {0xFAA1,0x7471}, {0xFAA2,0x7506}, {0xFAA3,0x753B},
    {0xFAA4,0x761D}, {0xFAA5,0x761F}, {0xFAA6,0x76CA}, {0xFAA7,0x76DB}, {0xFAA8,0x76F4}, {0xFAA9,0x774A},
    {0xFAAA,0x7740}, {0xFAAB,0x78CC}, {0xFAAC,0x7AB1}, {0xFAAD,0x7BC0}, {0xFAAE,0x7C7B}, {0xFAAF,0x7D5B},
    {0xFAB0,0x7DF4}, {0xFAB1,0x7F3E}, {0xFAB2,0x8005}, {0xFAB3,0x8352}, {0xFAB4,0x83EF}, {0xFAB5,0x8779},
    {0xFAB6,0x8941}, {0xFAB7,0x8986}, {0xFAB8,0x8996}, {0xFAB9,0x8ABF}, {0xFABA,0x8AF8}, {0xFABB,0x8ACB},
    {0xFABC,0x8B01}, {0xFABD,0x8AFE}, {0xFABE,0x8AED}, {0xFABF,0x8B39}, {0xFAC0,0x8B8A}, {0xFAC1,0x8D08},
    {0xFAC2,0x8F38}, {0xFAC3,0x9072}, {0xFAC4,0x9199}, {0xFAC5,0x9276}, {0xFAC6,0x967C}, {0xFAC7,0x96E3},
    {0xFAC8,0x9756}, {0xFAC9,0x97DB}, {0xFACA,0x97FF}, {0xFACB,0x980B}, {0xFACC,0x983B}, {0xFACD,0x9B12},
    {0xFACE,0x9F9C}, {0xFACF,0x2284A}, {0xFAD0,0x22844}, {0xFAD1,0x233D5}, {0xFAD2,0x3B9D}, {0xFAD3,0x4018},
    {0xFAD4,0x4039}, {0xFAD5,0x25249}, {0xFAD6,0x25CD0}, {0xFAD7,0x27ED3}, {0xFAD8,0x9F43}, {0xFAD9,0x9F8E},
    {0xFB1D,0x5D9}, {0xFB1F,0x5F2}, {0xFB2A,0x5E9}, {0xFB2B,0x5E9}, {0xFB2C,0x5E9}, {0xFB2D,0x5E9},
    {0xFB2E,0x5D0}, {0xFB2F,0x5D0}, {0xFB30,0x5D0}, {0xFB31,0x5D1}, {0xFB32,0x5D2}, {0xFB33,0x5D3},
    {0xFB34,0x5D4}, {0xFB35,0x5D5}, {0xFB36,0x5D6}, {0xFB38,0x5D8}, {0xFB39,0x5D9}, {0xFB3A,0x5DA},
    {0xFB3B,0x5DB}, {0xFB3C,0x5DC}, {0xFB3E,0x5DE}, {0xFB40,0x5E0}, {0xFB41,0x5E1}, {0xFB43,0x5E3},
    {0xFB44,0x5E4}, {0xFB46,0x5E6}, {0xFB47,0x5E7}, {0xFB48,0x5E8}, {0xFB49,0x5E9}, {0xFB4A,0x5EA},
    {0xFB4B,0x5D5}, {0xFB4C,0x5D1}, {0xFB4D,0x5DB}, {0xFB4E,0x5E4}, {0x1109A,0x11099}, {0x1109C,0x1109B},
    {0x110AB,0x110A5}, {0x114BB,0x114B9}, {0x2F800,0x4E3D}, {0x2F801,0x4E38}, {0x2F802,0x4E41},
    {0x2F803,0x20122}, {0x2F804,0x4F60}, {0x2F805,0x4FAE}, {0x2F806,0x4FBB}, {0x2F807,0x5002},
    {0x2F808,0x507A}, {0x2F809,0x5099}, {0x2F80A,0x50E7}, {0x2F80B,0x50CF}, {0x2F80C,0x349E},
    {0x2F80D,0x2063A}, {0x2F80E,0x514D}, {0x2F80F,0x5154}, {0x2F810,0x5164}, {0x2F811,0x5177},
    {0x2F812,0x2051C}, {0x2F813,0x34B9}, {0x2F814,0x5167}, {0x2F815,0x518D}, {0x2F816,0x2054B},
    {0x2F817,0x5197}, {0x2F818,0x51A4}, {0x2F819,0x4ECC}, {0x2F81A,0x51AC}, {0x2F81B,0x51B5},
    {0x2F81C,0x291DF}, {0x2F81D,0x51F5}, {0x2F81E,0x5203}, {0x2F81F,0x34DF}, {0x2F820,0x523B},
    {0x2F821,0x5246}, {0x2F822,0x5272}, {0x2F823,0x5277}, {0x2F824,0x3515}, {0x2F825,0x52C7},
    {0x2F826,0x52C9}, {0x2F827,0x52E4}, {0x2F828,0x52FA}, {0x2F829,0x5305}, {0x2F82A,0x5306},
    {0x2F82B,0x5317}, {0x2F82C,0x5349}, {0x2F82D,0x5351}, {0x2F82E,0x535A}, {0x2F82F,0x5373},
    {0x2F830,0x537D}, {0x2F831,0x537F}, {0x2F832,0x537F}, {0x2F833,0x537F}, {0x2F834,0x20A2C},
    {0x2F835,0x7070}, {0x2F836,0x53CA}, {0x2F837,0x53DF}, {0x2F838,0x20B63}, {0x2F839,0x53EB},
    {0x2F83A,0x53F1}, {0x2F83B,0x5406}, {0x2F83C,0x549E}, {0x2F83D,0x5438}, {0x2F83E,0x5448},
    {0x2F83F,0x5468}, {0x2F840,0x54A2}, {0x2F841,0x54F6}, {0x2F842,0x5510}, {0x2F843,0x5553},
    {0x2F844,0x5563}, {0x2F845,0x5584}, {0x2F846,0x5584}, {0x2F847,0x5599}, {0x2F848,0x55AB},
    {0x2F849,0x55B3}, {0x2F84A,0x55C2}, {0x2F84B,0x5716}, {0x2F84C,0x5606}, {0x2F84D,0x5717},
    {0x2F84E,0x5651}, {0x2F84F,0x5674}, {0x2F850,0x5207}, {0x2F851,0x58EE}, {0x2F852,0x57CE},
    {0x2F853,0x57F4}, {0x2F854,0x580D}, {0x2F855,0x578B}, {0x2F856,0x5832}, {0x2F857,0x5831},
    {0x2F858,0x58AC}, {0x2F859,0x214E4}, {0x2F85A,0x58F2}, {0x2F85B,0x58F7}, {0x2F85C,0x5906},
    {0x2F85D,0x591A}, {0x2F85E,0x5922}, {0x2F85F,0x5962}, {0x2F860,0x216A8}, {0x2F861,0x216EA},
    {0x2F862,0x59EC}, {0x2F863,0x5A1B}, {0x2F864,0x5A27}, {0x2F865,0x59D8}, {0x2F866,0x5A66},
    {0x2F867,0x36EE}, {0x2F868,0x36FC}, {0x2F869,0x5B08}, {0x2F86A,0x5B3E}, {0x2F86B,0x5B3E},
    {0x2F86C,0x219C8}, {0x2F86D,0x5BC3}, {0x2F86E,0x5BD8}, {0x2F86F,0x5BE7}, {0x2F870,0x5BF3},
    {0x2F871,0x21B18}, {0x2F872,0x5BFF}, {0x2F873,0x5C06}, {0x2F874,0x5F53}, {0x2F875,0x5C22},
    {0x2F876,0x3781}, {0x2F877,0x5C60}, {0x2F878,0x5C6E}, {0x2F879,0x5CC0}, {0x2F87A,0x5C8D},
    {0x2F87B,0x21DE4}, {0x2F87C,0x5D43}, {0x2F87D,0x21DE6}, {0x2F87E,0x5D6E}, {0x2F87F,0x5D6B},
    {0x2F880,0x5D7C}, {0x2F881,0x5DE1}, {0x2F882,0x5DE2}, {0x2F883,0x382F}, {0x2F884,0x5DFD},
    {0x2F885,0x5E28}, {0x2F886,0x5E3D}, {0x2F887,0x5E69}, {0x2F888,0x3862}, {0x2F889,0x22183},
    {0x2F88A,0x387C}, {0x2F88B,0x5EB0}, {0x2F88C,0x5EB3}, {0x2F88D,0x5EB6}, {0x2F88E,0x5ECA},
    {0x2F88F,0x2A392}, {0x2F890,0x5EFE}, {0x2F891,0x22331}, {0x2F892,0x22331}, {0x2F893,0x8201},
    {0x2F894,0x5F22}, {0x2F895,0x5F22}, {0x2F896,0x38C7}, {0x2F897,0x232B8}, {0x2F898,0x261DA},
    {0x2F899,0x5F62}, {0x2F89A,0x5F6B}, {0x2F89B,0x38E3}, {0x2F89C,0x5F9A}, {0x2F89D,0x5FCD},
    {0x2F89E,0x5FD7}, {0x2F89F,0x5FF9}, {0x2F8A0,0x6081}, {0x2F8A1,0x393A}, {0x2F8A2,0x391C},
    {0x2F8A3,0x6094}, {0x2F8A4,0x226D4}, {0x2F8A5,0x60C7}, {0x2F8A6,0x6148}, {0x2F8A7,0x614C},
    {0x2F8A8,0x614E}, {0x2F8A9,0x614C}, {0x2F8AA,0x617A}, {0x2F8AB,0x618E}, {0x2F8AC,0x61B2},
    {0x2F8AD,0x61A4}, {0x2F8AE,0x61AF}, {0x2F8AF,0x61DE}, {0x2F8B0,0x61F2}, {0x2F8B1,0x61F6},
    {0x2F8B2,0x6210}, {0x2F8B3,0x621B}, {0x2F8B4,0x625D}, {0x2F8B5,0x62B1}, {0x2F8B6,0x62D4},
    {0x2F8B7,0x6350}, {0x2F8B8,0x22B0C}, {0x2F8B9,0x633D}, {0x2F8BA,0x62FC}, {0x2F8BB,0x6368},
    {0x2F8BC,0x6383}, {0x2F8BD,0x63E4}, {0x2F8BE,0x22BF1}, {0x2F8BF,0x6422}, {0x2F8C0,0x63C5},
    {0x2F8C1,0x63A9}, {0x2F8C2,0x3A2E}, {0x2F8C3,0x6469}, {0x2F8C4,0x647E}, {0x2F8C5,0x649D},
    {0x2F8C6,0x6477}, {0x2F8C7,0x3A6C}, {0x2F8C8,0x654F}, {0x2F8C9,0x656C}, {0x2F8CA,0x2300A},
    {0x2F8CB,0x65E3}, {0x2F8CC,0x66F8}, {0x2F8CD,0x6649}, {0x2F8CE,0x3B19}, {0x2F8CF,0x6691},
    {0x2F8D0,0x3B08}, {0x2F8D1,0x3AE4}, {0x2F8D2,0x5192}, {0x2F8D3,0x5195}, {0x2F8D4,0x6700},
    {0x2F8D5,0x669C}, {0x2F8D6,0x80AD}, {0x2F8D7,0x43D9}, {0x2F8D8,0x6717}, {0x2F8D9,0x671B},
    {0x2F8DA,0x6721}, {0x2F8DB,0x675E}, {0x2F8DC,0x6753}, {0x2F8DD,0x233C3}, {0x2F8DE,0x3B49},
    {0x2F8DF,0x67FA}, {0x2F8E0,0x6785}, {0x2F8E1,0x6852}, {0x2F8E2,0x6885}, {0x2F8E3,0x2346D},
    {0x2F8E4,0x688E}, {0x2F8E5,0x681F}, {0x2F8E6,0x6914}, {0x2F8E7,0x3B9D}, {0x2F8E8,0x6942},
    {0x2F8E9,0x69A3}, {0x2F8EA,0x69EA}, {0x2F8EB,0x6AA8}, {0x2F8EC,0x236A3}, {0x2F8ED,0x6ADB},
    {0x2F8EE,0x3C18}, {0x2F8EF,0x6B21}, {0x2F8F0,0x238A7}, {0x2F8F1,0x6B54}, {0x2F8F2,0x3C4E},
    {0x2F8F3,0x6B72}, {0x2F8F4,0x6B9F}, {0x2F8F5,0x6BBA}, {0x2F8F6,0x6BBB}, {0x2F8F7,0x23A8D},
    {0x2F8F8,0x21D0B}, {0x2F8F9,0x23AFA}, {0x2F8FA,0x6C4E}, {0x2F8FB,0x23CBC}, {0x2F8FC,0x6CBF},
    {0x2F8FD,0x6CCD}, {0x2F8FE,0x6C67}, {0x2F8FF,0x6D16}, {0x2F900,0x6D3E}, {0x2F901,0x6D77},
    {0x2F902,0x6D41}, {0x2F903,0x6D69}, {0x2F904,0x6D78}, {0x2F905,0x6D85}, {0x2F906,0x23D1E},
    {0x2F907,0x6D34}, {0x2F908,0x6E2F}, {0x2F909,0x6E6E}, {0x2F90A,0x3D33}, {0x2F90B,0x6ECB},
    {0x2F90C,0x6EC7}, {0x2F90D,0x23ED1}, {0x2F90E,0x6DF9}, {0x2F90F,0x6F6E}, {0x2F910,0x23F5E},
    {0x2F911,0x23F8E}, {0x2F912,0x6FC6}, {0x2F913,0x7039}, {0x2F914,0x701E}, {0x2F915,0x701B},
    {0x2F916,0x3D96}, {0x2F917,0x704A}, {0x2F918,0x707D}, {0x2F919,0x7077}, {0x2F91A,0x70AD},
    {0x2F91B,0x20525}, {0x2F91C,0x7145}, {0x2F91D,0x24263}, {0x2F91E,0x719C}, {0x2F91F,0x243AB},
    {0x2F920,0x7228}, {0x2F921,0x7235}, {0x2F922,0x7250}, {0x2F923,0x24608}, {0x2F924,0x7280},
    {0x2F925,0x7295}, {0x2F926,0x24735}, {0x2F927,0x24814}, {0x2F928,0x737A}, {0x2F929,0x738B},
    {0x2F92A,0x3EAC}, {0x2F92B,0x73A5}, {0x2F92C,0x3EB8}, {0x2F92D,0x3EB8}, {0x2F92E,0x7447},
    {0x2F92F,0x745C}, {0x2F930,0x7471}, {0x2F931,0x7485}, {0x2F932,0x74CA}, {0x2F933,0x3F1B},
    {0x2F934,0x7524}, {0x2F935,0x24C36}, {0x2F936,0x753E}, {0x2F937,0x24C92}, {0x2F938,0x7570},
    {0x2F939,0x2219F}, {0x2F93A,0x7610}, {0x2F93B,0x24FA1}, {0x2F93C,0x24FB8}, {0x2F93D,0x25044},
    {0x2F93E,0x3FFC}, {0x2F93F,0x4008}, {0x2F940,0x76F4}, {0x2F941,0x250F3}, {0x2F942,0x250F2},
    {0x2F943,0x25119}, {0x2F944,0x25133}, {0x2F945,0x771E}, {0x2F946,0x771F}, {0x2F947,0x771F},
    {0x2F948,0x774A}, {0x2F949,0x4039}, {0x2F94A,0x778B}, {0x2F94B,0x4046}, {0x2F94C,0x4096},
    {0x2F94D,0x2541D}, {0x2F94E,0x784E}, {0x2F94F,0x788C}, {0x2F950,0x78CC}, {0x2F951,0x40E3},
    {0x2F952,0x25626}, {0x2F953,0x7956}, {0x2F954,0x2569A}, {0x2F955,0x256C5}, {0x2F956,0x798F},
    {0x2F957,0x79EB}, {0x2F958,0x412F}, {0x2F959,0x7A40}, {0x2F95A,0x7A4A}, {0x2F95B,0x7A4F},
    {0x2F95C,0x2597C}, {0x2F95D,0x25AA7}, {0x2F95E,0x25AA7}, {0x2F95F,0x7AEE}, {0x2F960,0x4202},
    {0x2F961,0x25BAB}, {0x2F962,0x7BC6}, {0x2F963,0x7BC9}, {0x2F964,0x4227}, {0x2F965,0x25C80},
    {0x2F966,0x7CD2}, {0x2F967,0x42A0}, {0x2F968,0x7CE8}, {0x2F969,0x7CE3}, {0x2F96A,0x7D00},
    {0x2F96B,0x25F86}, {0x2F96C,0x7D63}, {0x2F96D,0x4301}, {0x2F96E,0x7DC7}, {0x2F96F,0x7E02},
    {0x2F970,0x7E45}, {0x2F971,0x4334}, {0x2F972,0x26228}, {0x2F973,0x26247}, {0x2F974,0x4359},
    {0x2F975,0x262D9}, {0x2F976,0x7F7A}, {0x2F977,0x2633E}, {0x2F978,0x7F95}, {0x2F979,0x7FFA},
    {0x2F97A,0x8005}, {0x2F97B,0x264DA}, {0x2F97C,0x26523}, {0x2F97D,0x8060}, {0x2F97E,0x265A8},
    {0x2F97F,0x8070}, {0x2F980,0x2335F}, {0x2F981,0x43D5}, {0x2F982,0x80B2}, {0x2F983,0x8103},
    {0x2F984,0x440B}, {0x2F985,0x813E}, {0x2F986,0x5AB5}, {0x2F987,0x267A7}, {0x2F988,0x267B5},
    {0x2F989,0x23393}, {0x2F98A,0x2339C}, {0x2F98B,0x8201}, {0x2F98C,0x8204}, {0x2F98D,0x8F9E},
    {0x2F98E,0x446B}, {0x2F98F,0x8291}, {0x2F990,0x828B}, {0x2F991,0x829D}, {0x2F992,0x52B3},
    {0x2F993,0x82B1}, {0x2F994,0x82B3}, {0x2F995,0x82BD}, {0x2F996,0x82E6}, {0x2F997,0x26B3C},
    {0x2F998,0x82E5}, {0x2F999,0x831D}, {0x2F99A,0x8363}, {0x2F99B,0x83AD}, {0x2F99C,0x8323},
    {0x2F99D,0x83BD}, {0x2F99E,0x83E7}, {0x2F99F,0x8457}, {0x2F9A0,0x8353}, {0x2F9A1,0x83CA},
    {0x2F9A2,0x83CC}, {0x2F9A3,0x83DC}, {0x2F9A4,0x26C36}, {0x2F9A5,0x26D6B}, {0x2F9A6,0x26CD5},
    {0x2F9A7,0x452B}, {0x2F9A8,0x84F1}, {0x2F9A9,0x84F3}, {0x2F9AA,0x8516}, {0x2F9AB,0x273CA},
    {0x2F9AC,0x8564}, {0x2F9AD,0x26F2C}, {0x2F9AE,0x455D}, {0x2F9AF,0x4561}, {0x2F9B0,0x26FB1},
    {0x2F9B1,0x270D2}, {0x2F9B2,0x456B}, {0x2F9B3,0x8650}, {0x2F9B4,0x865C}, {0x2F9B5,0x8667},
    {0x2F9B6,0x8669}, {0x2F9B7,0x86A9}, {0x2F9B8,0x8688}, {0x2F9B9,0x870E}, {0x2F9BA,0x86E2},
    {0x2F9BB,0x8779}, {0x2F9BC,0x8728}, {0x2F9BD,0x876B}, {0x2F9BE,0x8786}, {0x2F9BF,0x45D7},
    {0x2F9C0,0x87E1}, {0x2F9C1,0x8801}, {0x2F9C2,0x45F9}, {0x2F9C3,0x8860}, {0x2F9C4,0x8863},
    {0x2F9C5,0x27667}, {0x2F9C6,0x88D7}, {0x2F9C7,0x88DE}, {0x2F9C8,0x4635}, {0x2F9C9,0x88FA},
    {0x2F9CA,0x34BB}, {0x2F9CB,0x278AE}, {0x2F9CC,0x27966}, {0x2F9CD,0x46BE}, {0x2F9CE,0x46C7},
    {0x2F9CF,0x8AA0}, {0x2F9D0,0x8AED}, {0x2F9D1,0x8B8A}, {0x2F9D2,0x8C55}, {0x2F9D3,0x27CA8},
    {0x2F9D4,0x8CAB}, {0x2F9D5,0x8CC1}, {0x2F9D6,0x8D1B}, {0x2F9D7,0x8D77}, {0x2F9D8,0x27F2F},
    {0x2F9D9,0x20804}, {0x2F9DA,0x8DCB}, {0x2F9DB,0x8DBC}, {0x2F9DC,0x8DF0}, {0x2F9DD,0x208DE},
    {0x2F9DE,0x8ED4}, {0x2F9DF,0x8F38}, {0x2F9E0,0x285D2}, {0x2F9E1,0x285ED}, {0x2F9E2,0x9094},
    {0x2F9E3,0x90F1}, {0x2F9E4,0x9111}, {0x2F9E5,0x2872E}, {0x2F9E6,0x911B}, {0x2F9E7,0x9238},
    {0x2F9E8,0x92D7}, {0x2F9E9,0x92D8}, {0x2F9EA,0x927C}, {0x2F9EB,0x93F9}, {0x2F9EC,0x9415},
    {0x2F9ED,0x28BFA}, {0x2F9EE,0x958B}, {0x2F9EF,0x4995}, {0x2F9F0,0x95B7}, {0x2F9F1,0x28D77},
    {0x2F9F2,0x49E6}, {0x2F9F3,0x96C3}, {0x2F9F4,0x5DB2}, {0x2F9F5,0x9723}, {0x2F9F6,0x29145},
    {0x2F9F7,0x2921A}, {0x2F9F8,0x4A6E}, {0x2F9F9,0x4A76}, {0x2F9FA,0x97E0}, {0x2F9FB,0x2940A},
    {0x2F9FC,0x4AB2}, {0x2F9FD,0x29496}, {0x2F9FE,0x980B}, {0x2F9FF,0x980B}, {0x2FA00,0x9829},
    {0x2FA01,0x295B6}, {0x2FA02,0x98E2}, {0x2FA03,0x4B33}, {0x2FA04,0x9929}, {0x2FA05,0x99A7},
    {0x2FA06,0x99C2}, {0x2FA07,0x99FE}, {0x2FA08,0x4BCE}, {0x2FA09,0x29B30}, {0x2FA0A,0x9B12},
    {0x2FA0B,0x9C40}, {0x2FA0C,0x9CFD}, {0x2FA0D,0x4CCE}, {0x2FA0E,0x4CED}, {0x2FA0F,0x9D67},
    {0x2FA10,0x2A0CE}, {0x2FA11,0x4CF8}, {0x2FA12,0x2A105}, {0x2FA13,0x2A20E}, {0x2FA14,0x2A291},
    {0x2FA15,0x9EBB}, {0x2FA16,0x4D56}, {0x2FA17,0x9EF9}, {0x2FA18,0x9EFE}, {0x2FA19,0x9F05},
    {0x2FA1A,0x9F0F}, {0x2FA1B,0x9F16}, {0x2FA1C,0x9F3B}, {0x2FA1D,0x2A600},
};
// The same where it gives none or several: {code point, up to 3 code points (0 = none)}.
// Hangul syllables are decomposed by arithmetic (hangul_nfd) instead.
static const uint32_t UNICODE_STRIPN[][4] = {
    {0x340, 0x0, 0x0, 0x0}, {0x341, 0x0, 0x0, 0x0}, {0x343, 0x0, 0x0, 0x0}, {0x344, 0x0, 0x0, 0x0},
    {0x9CB, 0x9C7, 0x9BE, 0x0}, {0x9CC, 0x9C7, 0x9D7, 0x0}, {0xB4B, 0xB47, 0xB3E, 0x0},
    {0xB4C, 0xB47, 0xB57, 0x0}, {0xB94, 0xB92, 0xBD7, 0x0}, {0xBCA, 0xBC6, 0xBBE, 0x0},
    {0xBCB, 0xBC7, 0xBBE, 0x0}, {0xBCC, 0xBC6, 0xBD7, 0x0}, {0xC48, 0x0, 0x0, 0x0},
    {0xCCB, 0xCC2, 0xCD5, 0x0}, {0xD4A, 0xD46, 0xD3E, 0x0}, {0xD4B, 0xD47, 0xD3E, 0x0},
    {0xD4C, 0xD46, 0xD57, 0x0}, {0xDDC, 0xDD9, 0xDCF, 0x0}, {0xDDD, 0xDD9, 0xDCF, 0x0},
    {0xDDE, 0xDD9, 0xDDF, 0x0}, {0xF73, 0x0, 0x0, 0x0}, {0xF75, 0x0, 0x0, 0x0}, {0xF76, 0x0, 0x0, 0x0},
    {0xF78, 0x0, 0x0, 0x0}, {0xF81, 0x0, 0x0, 0x0}, {0xF93, 0x0, 0x0, 0x0}, {0xF9D, 0x0, 0x0, 0x0},
    {0xFA2, 0x0, 0x0, 0x0}, {0xFA7, 0x0, 0x0, 0x0}, {0xFAC, 0x0, 0x0, 0x0}, {0xFB9, 0x0, 0x0, 0x0},
    {0x1B06, 0x1B05, 0x1B35, 0x0}, {0x1B08, 0x1B07, 0x1B35, 0x0}, {0x1B0A, 0x1B09, 0x1B35, 0x0},
    {0x1B0C, 0x1B0B, 0x1B35, 0x0}, {0x1B0E, 0x1B0D, 0x1B35, 0x0}, {0x1B12, 0x1B11, 0x1B35, 0x0},
    {0x1B40, 0x1B3E, 0x1B35, 0x0}, {0x1B41, 0x1B3F, 0x1B35, 0x0}, {0x1112E, 0x0, 0x0, 0x0},
    {0x1112F, 0x0, 0x0, 0x0}, {0x1134B, 0x11347, 0x1133E, 0x0}, {0x1134C, 0x11347, 0x11357, 0x0},
    {0x114BC, 0x114B9, 0x114B0, 0x0}, {0x114BE, 0x114B9, 0x114BD, 0x0}, {0x115BA, 0x115B8, 0x115AF, 0x0},
    {0x115BB, 0x115B9, 0x115AF, 0x0}, {0x11938, 0x11935, 0x11930, 0x0}, {0x1D15E, 0x1D157, 0x1D165, 0x0},
    {0x1D15F, 0x1D158, 0x1D165, 0x0}, {0x1D160, 0x1D158, 0x1D165, 0x1D16E},
    {0x1D161, 0x1D158, 0x1D165, 0x1D16F}, {0x1D162, 0x1D158, 0x1D165, 0x1D170},
    {0x1D163, 0x1D158, 0x1D165, 0x1D171}, {0x1D164, 0x1D158, 0x1D165, 0x1D172},
    {0x1D1BB, 0x1D1B9, 0x1D165, 0x0}, {0x1D1BC, 0x1D1BA, 0x1D165, 0x0}, {0x1D1BD, 0x1D1B9, 0x1D165, 0x1D16E},
    {0x1D1BE, 0x1D1BA, 0x1D165, 0x1D16E}, {0x1D1BF, 0x1D1B9, 0x1D165, 0x1D16F},
    {0x1D1C0, 0x1D1BA, 0x1D165, 0x1D16F},
};

static bool unicode_mark_nonspacing(uint32_t cp) { return in_ranges(UNICODE_MN, sizeof UNICODE_MN / sizeof UNICODE_MN[0], cp); }
static bool unicode_punctuation(uint32_t cp) { return in_ranges(UNICODE_P, sizeof UNICODE_P / sizeof UNICODE_P[0], cp); }
static bool unicode_control(uint32_t cp) {
    return in_ranges(UNICODE_CONTROL, sizeof UNICODE_CONTROL / sizeof UNICODE_CONTROL[0], cp);
}
static bool unicode_unassigned(uint32_t cp) {
    return in_ranges(UNICODE_UNASSIGNED, sizeof UNICODE_UNASSIGNED / sizeof UNICODE_UNASSIGNED[0], cp);
}
static void unicode_lower(uint32_t cp, std::vector<uint32_t>& out) {
    if (cp == 0x130) return out.push_back('i'), out.push_back(0x307);
    std::size_t lo = 0, hi = sizeof UNICODE_LOWER / sizeof UNICODE_LOWER[0];  // the last run with first <= cp
    while (lo < hi) {
        const std::size_t mid = (lo + hi) / 2;
        if ((uint32_t)UNICODE_LOWER[mid][0] <= cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0) {
        const int32_t* r = UNICODE_LOWER[lo - 1];
        if (cp <= (uint32_t)r[1] && (cp - (uint32_t)r[0]) % (uint32_t)r[3] == 0) return out.push_back((uint32_t)((int32_t)cp + r[2]));
    }
    out.push_back(cp);
}
// NFD of one code point without its nonspacing marks: a mark vanishes, a decomposable character
// becomes what its table says, anything else stays.
static void unicode_strip_accents(uint32_t cp, std::vector<uint32_t>& out) {
    if (unicode_mark_nonspacing(cp)) return;
    if (cp < 0xC0) return out.push_back(cp);  // nothing below U+00C0 decomposes
    const std::size_t n1 = sizeof UNICODE_STRIP1 / sizeof UNICODE_STRIP1[0];
    const auto* e1 = std::lower_bound(UNICODE_STRIP1, UNICODE_STRIP1 + n1, cp,
                                      [](const uint32_t* row, uint32_t v) { return row[0] < v; });
    if (e1 != UNICODE_STRIP1 + n1 && (*e1)[0] == cp) return out.push_back((*e1)[1]);
    const std::size_t nn = sizeof UNICODE_STRIPN / sizeof UNICODE_STRIPN[0];
    const auto* en = std::lower_bound(UNICODE_STRIPN, UNICODE_STRIPN + nn, cp,
                                      [](const uint32_t* row, uint32_t v) { return row[0] < v; });
    if (en != UNICODE_STRIPN + nn && (*en)[0] == cp) {
        for (int k = 1; k < 4; k++)
            if ((*en)[k]) out.push_back((*en)[k]);
        return;
    }
    out.push_back(cp);
}

TF_COLD_END

#endif  // !defined(TF_ONLY_MATHEMATICS): the end of the machinery

// ================================================================================================
// Explicit instantiation for float (training) and double (gradient checks).
// ================================================================================================
#define TF_INSTANTIATE(T)                                                                                  \
    template struct Tensor<T>;                                                                             \
    template void require_shape(const Tensor<T>&, const std::vector<int>&, const char*, const char*);      \
    template void require_same_shape(const Tensor<T>&, const Tensor<T>&, const char*, const char*,         \
                                     const char*);                                                         \
    template Tensor<T> add(const Tensor<T>&, const Tensor<T>&);                                            \
    template void add_inplace(Tensor<T>&, const Tensor<T>&);                                               \
    template Tensor<T> transpose(const Tensor<T>&);                                                        \
    template void gemm_reference(int, int, int, const T*, long, long, const T*, long, long, T*, long, bool); \
    template Tensor<T> matmul(const Tensor<T>&, const Tensor<T>&);                                         \
    template Tensor<T> matmul_nt(const Tensor<T>&, const Tensor<T>&);                                      \
    template Tensor<T> matmul_tn(const Tensor<T>&, const Tensor<T>&);                                      \
    template void matmul_tn_acc(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);                           \
    template void matmul_acc(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);                              \
    template Tensor<T> diag(const Tensor<T>&);                                                             \
    template Tensor<T> diag_backward(const Tensor<T>&);                                                    \
    template Tensor<T> Stack(const Tensor<T>&, int);                                                       \
    template Tensor<T> Stack_backward(const Tensor<T>&);                                                   \
    template Tensor<T> OneHot(const std::vector<int>&, int);                                               \
    template Tensor<T> Embedding(const std::vector<int>&, const Tensor<T>&);                               \
    template void Embedding_backward(const std::vector<int>&, const Tensor<T>&, Tensor<T>&);               \
    template Tensor<T> Softmax(const Tensor<T>&);                                                          \
    template Tensor<T> Softmax_backward(const Tensor<T>&, const Tensor<T>&);                               \
    template Tensor<T> Mask_BD(int);                                                                       \
    template Tensor<T> Mask_AR(int);                                                                       \
    template Tensor<T> Mask_ST(int, int, int);                                                             \
    template Tensor<T> apply_mask(const Tensor<T>&, const Tensor<T>&);                                     \
    template Tensor<T> Attention(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,   \
                                 AttentionCache<T>*, const Tensor<T>*);                                    \
    template void Attention_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,                 \
                                     const AttentionCache<T>&, const Tensor<T>&, Tensor<T>&, Tensor<T>&,   \
                                     Tensor<T>&, const Tensor<T>*);                                        \
    template Tensor<T> rows_of(const Tensor<T>&, int, int);                                                 \
    template Tensor<T> Concat(const std::vector<Tensor<T>>&);                                              \
    template std::vector<Tensor<T>> Concat_backward(const Tensor<T>&, int);                                \
    template Tensor<T> MultiHeadSA(const Tensor<T>&, const Tensor<T>&, const MultiHeadSAParams<T>&,        \
                                   MultiHeadSACache<T>*, double, Rng*);                                    \
    template Tensor<T> MultiHeadSA_backward(const Tensor<T>&, const MultiHeadSAParams<T>&,                 \
                                            const MultiHeadSACache<T>&, const Tensor<T>&,                  \
                                            MultiHeadSAParams<T>&);                                        \
    template T activation(Activation, T);                                                                  \
    template T activation_derivative(Activation, T);                                                       \
    template void softmax_row_reference(const T*, T*, int);                                                \
    template Tensor<T> FFN(const Tensor<T>&, const FFNParams<T>&, Activation, FFNCache<T>*);               \
    template Tensor<T> FFN_backward(const Tensor<T>&, const FFNParams<T>&, Activation, const FFNCache<T>&, \
                                    const Tensor<T>&, FFNParams<T>&);                                      \
    template Tensor<T> FFN_ReLU(const Tensor<T>&, const FFNParams<T>&, FFNCache<T>*);                      \
    template Tensor<T> FFN_ReLU_backward(const Tensor<T>&, const FFNParams<T>&, const FFNCache<T>&,        \
                                         const Tensor<T>&, FFNParams<T>&);                                 \
    template Tensor<T> FFN_GELU(const Tensor<T>&, const FFNParams<T>&, FFNCache<T>*, Activation);          \
    template Tensor<T> FFN_GELU_backward(const Tensor<T>&, const FFNParams<T>&, const FFNCache<T>&,        \
                                         const Tensor<T>&, FFNParams<T>&, Activation);                     \
    template Tensor<T> LayerNorm(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, double,             \
                                 LayerNormCache<T>*);                                                      \
    template Tensor<T> LayerNorm_backward(const Tensor<T>&, const LayerNormCache<T>&, const Tensor<T>&,    \
                                          Tensor<T>&, Tensor<T>&);                                         \
    template T CrossEntropy(const Tensor<T>&, const Tensor<T>&);                                           \
    template Tensor<T> CrossEntropy_backward(const Tensor<T>&, const Tensor<T>&);                          \
    template double CrossEntropy_logits(const Tensor<T>&, const std::vector<int>&, Tensor<T>*);            \
    template Tensor<T> dropout_mask(const std::vector<int>&, double, Rng&);                                \
    template Tensor<T> dropout_mask(const std::vector<int>&, double, Rng*);                                \
    template void multiply_inplace(Tensor<T>&, const Tensor<T>&);

#define TF_INSTANTIATE_MODELS(T)                                                                           \
    template const T* position_vector(const Params<T>&, int);                                              \
    template Tensor<T> block_backward(const Config&, const Layer<T>&, const BlockCache<T>&, const Tensor<T>&, \
                                      Layer<T>&);                                                          \
    template void embed_backward(const Config&, const Batch&, const Tensor<T>&, Params<T>&);               \
    template Tensor<T> embed_forward(const Config&, const Params<T>&, const Batch&, int);                  \
    template Tensor<T> block_forward(const Config&, const Layer<T>&, const Tensor<T>&, const Tensor<T>&,   \
                                     BlockCache<T>&, const ForwardOptions&, KVLayer<T>*);                  \
    template Tensor<T> blocks_backward(const Config&, const Params<T>&, const ForwardCache<T>&, Tensor<T>, \
                                       Params<T>&);                                                        \
    template T* position_vector(Params<T>&, int);                                                          \
    template Tensor<T> xlnet_forward(const Config&, const Params<T>&, const Tensor<T>&, const std::vector<int>&, \
                                     int, const std::vector<int>&, ForwardCache<T>&);                      \
    template Params<T> make_params(const Config&, bool);                                                         \
    template std::vector<Named<T>> named_tensors(const Config&, Params<T>&);                               \
    template void init_params(const Config&, Params<T>&, uint64_t);                                        \
    template void zero_params(const Config&, Params<T>&);                                                  \
    template std::string first_nonfinite(const Config&, const Params<T>&);                                 \
    template void scale_residual_init(const Config&, Params<T>&);                                          \
    template Tensor<T> layer_mask(const Config&, int, int);                                                \
    template Tensor<T> key_padding_mask(const Tensor<T>&, const std::vector<int>&);                       \
    template Tensor<T> model_forward(const Config&, const Params<T>&, const Batch&, ForwardCache<T>*,      \
                                     ForwardOptions);                                                      \
    template void model_backward(const Config&, const Params<T>&, const ForwardCache<T>&, const Tensor<T>&, \
                                 Params<T>&, const Tensor<T>*);                                            \
    template FinetuneLoss finetune_loss(const Config&, const Params<T>&, const Tensor<T>&, FinetuneTask, int,  \
                                        const Batch&, const std::vector<int>&, const std::vector<int>&, double, \
                                        Params<T>*, Tensor<T>*, ForwardOptions);                           \
    template Tensor<T> finetune_probs(const Config&, const Params<T>&, const Tensor<T>&, FinetuneTask, int,    \
                                      const Batch&, const std::vector<int>&);                              \
    template Tensor<T> Mask_XL(const std::vector<int>&);                                                   \
    template double xlnet_loss(const Config&, const Params<T>&, const Tensor<T>&, const std::vector<int>&, int, \
                               const std::vector<int>&, int, Params<T>*, Tensor<T>*);                      \
    template Tensor<T> xlnet_query_probs(const Config&, const Params<T>&, const Tensor<T>&,                  \
                                         const std::vector<int>&, const std::vector<int>&);                \
    template double model_loss(const Config&, const Params<T>&, const Batch&, Params<T>*, ForwardOptions, ForwardCache<T>*); \
    template Tensor<T> GPT(const Config&, const Params<T>&, const std::vector<int>&);                      \
    template Tensor<T> MLMHead(const Config&, const Params<T>&, const Tensor<T>&, MLMHeadCache<T>*);         \
    template Tensor<T> MLMHead_backward(const Config&, const Params<T>&, const MLMHeadCache<T>&, const Tensor<T>&, \
                                        Params<T>&);                                                       \
    template Tensor<T> BERT(const Config&, const Params<T>&, const std::vector<int>&,                      \
                            const std::vector<int>&, int);                                                 \
    template Tensor<T> RoBERTa(const Config&, const Params<T>&, const std::vector<int>&, int);

#define TF_INSTANTIATE_GENERATION(T)                                                                       \
    template void kv_init(const Config&, KVCache<T>&);                                                     \
    template Tensor<T> model_step(const Config&, const Params<T>&, int, KVCache<T>&);                      \
    template Tensor<T> MultiHeadSA_cached(const Tensor<T>&, const Tensor<T>&, const MultiHeadSAParams<T>&,   \
                                          KVLayer<T>&);                                                    \
    template std::vector<int> generate(const Config&, const Params<T>&, std::vector<int>, int, double, int, Rng&, double, \
                                       const std::function<bool(const std::vector<int>&)>&);               \
    template std::vector<TokenProb> next_token_probs(const Config&, const Params<T>&, const std::vector<int>&, int);
#define TF_INSTANTIATE_CORPUS_LOSSES(T)                                                                    \
    template double corpus_loss(const Config&, const Params<T>&, const std::vector<int>&, uint64_t, long long*, int,      \
                                bool, const CorpusProgress&);                                                        \
    template double xlnet_left_to_right_loss(const Config&, const Params<T>&, const std::vector<int>&, long long*); \
    template double xlnet_corpus_loss(const Config&, const Params<T>&, const std::vector<int>&, int, int, uint64_t,      \
                                      long long*);

#if !defined(TF_ONLY_MACHINERY)
TF_INSTANTIATE(float)
TF_INSTANTIATE_MODELS(float)
TF_COLD_INSTANCES_BEGIN
TF_INSTANTIATE_MODELS(double)
TF_COLD_INSTANCES_END
TF_INSTANTIATE_GENERATION(float)
TF_COLD_INSTANCES_BEGIN
TF_INSTANTIATE_GENERATION(double)
TF_COLD_INSTANCES_END
TF_INSTANTIATE(double)  // the modules and the products: tests compare the fast and the plain bit for bit
#endif
#if !defined(TF_ONLY_MATHEMATICS) && !defined(TF_PART_I_ALONE)
TF_INSTANTIATE_CORPUS_LOSSES(float)
TF_COLD_INSTANCES_BEGIN
TF_INSTANTIATE_CORPUS_LOSSES(double)
TF_COLD_INSTANCES_END
#endif

}  // namespace tf
