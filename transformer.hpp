// transformer.hpp - the formulated transformer (GPT, GPT-2, GPT-3, BERT, RoBERTa) in plain C++.
//
// Every formula box of the formula sheet (docs/formulas.md, after "The Formulated GPT-2") has one function here, named after it,
// with its forward and its hand-derived backward side by side in transformer.cpp.
//
// The declarations follow transformer.cpp's two parts. Search for a banner's title to jump to it:
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
//
// Conventions used everywhere:
//   * Matrices are row-major Tensor<T>; "n x H" means n rows, H columns.
//   * The formulas count from 1, the code from 0: formula row i is code row i-1, token id
//     x in {1..V} is code id x-1 in {0..V-1}, layer l in {1..L} is code layer l-1, head
//     i in {1..A} is code head i-1.
//   * T is the scalar type: float for training and the program, double for gradient checks.
//     Every template below is instantiated for both at the end of transformer.cpp.
//   * A minibatch of B sequences of length n is stored as (B*n) x H rows: sequence b occupies
//     rows b*n .. b*n+n-1. Linear layers see all B*n rows at once; attention works per sequence.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <unordered_map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tf {

// ################################################################################################
// PART I. THE MATHEMATICS: Tensor, the matrix products, the modules, the models, the objectives, training
// ################################################################################################
// ------------------------------------------------------------------------------------------------
// Errors: every bad input becomes one of these, with a message that says what is wrong.
// ------------------------------------------------------------------------------------------------
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// What a handout's stub throws in place of a function still to be written (tools/blank.awk writes
// them): the message "not implemented: NAME (assignment N)", and NAME in `function`, which explain
// reports as the place the run stops.
struct NotImplemented : Error {
    std::string function;
    explicit NotImplemented(const std::string& name, const std::string& assignment = "")
        : Error("not implemented: " + name + (assignment.empty() ? "" : " (" + assignment + ")")), function(name) {}
};
// The value of an enum whose name is s, among all of them; else an Error "unknown WHAT 's'
// (expected a, b or c)".
template <typename E>
E enum_from_name(const std::string& s, std::initializer_list<E> all, const char* (*name)(E), const char* what) {
    std::string expected;
    std::size_t k = 0;
    for (E e : all) {
        if (s == name(e)) return e;
        expected += std::string(k == 0 ? "" : k + 1 == all.size() ? " or " : ", ") + name(e);
        k++;
    }
    throw Error("unknown " + std::string(what) + " '" + s + "' (expected " + expected + ")");
}

struct ShapeError : Error {
    using Error::Error;
};

// Every Tensor's numbers live in a Storage: a std::vector whose allocator takes its blocks from a
// recycling pool (Part II's machinery, declared after Tensor below, "Storage").
template <class T>
struct PoolAllocator;
template <typename T>
using Storage = std::vector<T, PoolAllocator<T>>;

// ------------------------------------------------------------------------------------------------
// Tensor: a row-major array with a shape of one ({H}) or two ({rows, cols}) dimensions.
// ------------------------------------------------------------------------------------------------
template <typename T>
struct Tensor {
    std::vector<int> shape;  // {len} or {rows, cols}
    Storage<T> data;         // row-major, size = product of shape

    Tensor() = default;
    explicit Tensor(std::vector<int> shape_, T fill = T(0));
    // A tensor whose numbers are not written: only for results that the caller overwrites
    // entirely (saves zero-filling them first). Unoptimised builds fill it with NaN, so an entry
    // left unwritten shows up in the tests.
    static Tensor uninit(std::vector<int> shape);
    static Tensor uninit(int rows, int cols) { return uninit(std::vector<int>{rows, cols}); }
    // rows x cols. Only integer sizes are accepted: Tensor<float>({5}, 2.0f) is the 5-vector of 2s
    // (the constructor above), never a 5 x 2 matrix, and Tensor<float>(5, 2.0f) does not compile.
    template <class R, class C,
              typename std::enable_if<std::is_integral<R>::value && std::is_integral<C>::value, int>::type = 0>
    Tensor(R rows, C cols, T fill = T(0)) : Tensor(std::vector<int>{(int)rows, (int)cols}, fill) {}
    // A matrix from its entries in row-major order (for hand-computed tests).
    static Tensor from(int rows, int cols, std::vector<T> values);
    static Tensor vector(std::vector<T> values);

    int rows() const { return shape.size() == 2 ? shape[0] : 1; }
    int cols() const { return shape.empty() ? 0 : shape.back(); }
    std::size_t size() const { return data.size(); }
    bool empty() const { return data.empty(); }
    T* ptr() { return data.data(); }
    const T* ptr() const { return data.data(); }
    T* row(int i) { return data.data() + (std::size_t)i * cols(); }
    const T* row(int i) const { return data.data() + (std::size_t)i * cols(); }
    T& operator()(int i, int j) { return data[(std::size_t)i * cols() + j]; }
    const T& operator()(int i, int j) const { return data[(std::size_t)i * cols() + j]; }
    T& operator[](std::size_t k) { return data[k]; }
    const T& operator[](std::size_t k) const { return data[k]; }
    void zero();
};

std::string shape_str(const std::vector<int>& shape);  // "3x4", "5"
template <typename T>
std::string shape_str(const Tensor<T>& t) {
    return shape_str(t.shape);
}
// Throw ShapeError "where: <name> is AxB, expected CxD" unless t has the given shape.
template <typename T>
void require_shape(const Tensor<T>& t, const std::vector<int>& shape, const char* where, const char* name);
// Throw ShapeError "where: a is AxB but b is CxD" unless a and b have the same shape.
template <typename T, typename U>
void require_same_shape(const Tensor<T>& a, const Tensor<U>& b, const char* where, const char* a_name,
                        const char* b_name);

// Element-wise helpers (shapes checked).
template <typename T>
Tensor<T> add(const Tensor<T>& A, const Tensor<T>& B);  // A + B
template <typename T>
void add_inplace(Tensor<T>& A, const Tensor<T>& B);  // A += B
template <typename T>
Tensor<T> transpose(const Tensor<T>& A);

// ------------------------------------------------------------------------------------------------
// Storage: every Tensor's numbers come from a recycling pool.
// ------------------------------------------------------------------------------------------------
// A training step allocates the same shapes every step. A freed block is kept in a list per size
// class (sizes rounded up to 4 classes per doubling) and handed out again, so a warm step asks the
// system for no memory: no page faults, no zero pages, no munmap (glibc returns big blocks to the
// system on every free). At most pool_limit bytes are kept; beyond that, blocks go back at once.
struct PoolStats {
    long long fresh = 0;           // blocks obtained from the system (operator new)
    long long reused = 0;          // blocks handed out again from the pool
    std::size_t cached_bytes = 0;  // bytes held in the pool now, free for reuse
};
PoolStats pool_stats();
void pool_trim();  // gives every cached block back to the system
constexpr std::size_t pool_limit = std::size_t(1) << 30;
// Every block is followed by a guard of this many bytes (signalling NaNs): a loop that reads one
// element past a tensor's end reads a NaN, one that writes or adds there stops the program when the
// tensor is freed (with a message). See write_guard in transformer.cpp.
constexpr std::size_t pool_guard_bytes = 64;
void* pool_allocate(std::size_t bytes);
void pool_deallocate(void* p, std::size_t bytes) noexcept;

// Arenas: while an ArenaScope is alive, the pool hands out consecutive 64-byte-aligned stretches
// of one block of the given size (from the pool, like any block) instead of separate blocks. A
// model's parameters are made inside one, so that reading every weight (one generated token)
// streams through one stretch of memory rather than through ~500 scattered blocks. A stretch is
// never reused on its own; the arena goes back to the pool when the scope has ended and every
// stretch is freed. Requests that do not fit, and scopes opened inside a scope, take the usual path.
// Under AddressSanitizer (make debug) there are no arenas: every tensor keeps a block of its own,
// so that reading or writing past a tensor's end is caught.
#if defined(__SANITIZE_ADDRESS__)
#define TF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TF_ASAN 1
#endif
#endif
#ifdef TF_ASAN
constexpr bool arenas_enabled = false;
#else
constexpr bool arenas_enabled = true;
#endif
class ArenaScope {
public:
    explicit ArenaScope(std::size_t bytes);
    ~ArenaScope();
    ArenaScope(const ArenaScope&) = delete;
    ArenaScope& operator=(const ArenaScope&) = delete;

private:
    bool opened_ = false;
};

template <typename T>
struct PoolAllocator {
    using value_type = T;
    PoolAllocator() = default;
    template <class U>
    PoolAllocator(const PoolAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) { return static_cast<T*>(pool_allocate(n * sizeof(T))); }
    void deallocate(T* p, std::size_t n) noexcept { pool_deallocate(p, n * sizeof(T)); }
    // resize(n) without a value default-initialises: numbers stay unwritten (Tensor::uninit).
    // Every other way (Tensor(shape, fill), copies, assign) writes values as usual.
    template <class U>
    void construct(U* p) { ::new ((void*)p) U; }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) { ::new ((void*)p) U(std::forward<Args>(args)...); }
};
template <class T, class U>
bool operator==(const PoolAllocator<T>&, const PoolAllocator<U>&) { return true; }
template <class T, class U>
bool operator!=(const PoolAllocator<T>&, const PoolAllocator<U>&) { return false; }

// A tensor's numbers compared with a plain vector (tests: CHECK(Y.data == std::vector<double>{...})).
template <typename T>
bool operator==(const Storage<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}
template <typename T>
bool operator==(const std::vector<T>& a, const Storage<T>& b) { return b == a; }
template <typename T>
bool operator!=(const Storage<T>& a, const std::vector<T>& b) { return !(a == b); }
template <typename T>
bool operator!=(const std::vector<T>& a, const Storage<T>& b) { return !(b == a); }

// ------------------------------------------------------------------------------------------------
// Matrix products. All go through one kernel, gemm, which handles transposes by strides.
// ------------------------------------------------------------------------------------------------
// C (M x N, row stride ldc) = (accumulate ? C : 0) + A B, with A(i,k) = A[i*rsA + k*csA] and
// B(k,j) = B[k*rsB + j*csB]. gemm is the blocked, packed kernel; gemm_reference the plain loop.
template <typename T>
void gemm(int M, int N, int K, const T* A, long rsA, long csA, const T* B, long rsB, long csB, T* C,
          long ldc, bool accumulate);
template <typename T>
void gemm_reference(int M, int N, int K, const T* A, long rsA, long csA, const T* B, long rsB, long csB,
                    T* C, long ldc, bool accumulate);
// The register-only FMA peak of one core for float at this build's vector width (GFLOP/s,
// 2 per multiply-add), measured in about 0.2 s: the yardstick for gemm's GFLOP/s.
double fma_peak_gflops();
// Whether transformer.cpp was compiled to fuse a*b + c into one rounding on its own (g++'s default);
// the Makefile's builds say -ffp-contract=off, so that every target rounds as the source says.
bool products_fused_by_compiler();
// One core's streaming read speed in GB/s: the best of a few passes summing a buffer of 4x
// weight_bytes, at least 32 MiB and at most 256 MiB. The yardstick for generating a token of a
// model with that many bytes of weights, which reads every weight once.
double mem_read_gbps(double weight_bytes);

template <typename T>
Tensor<T> matmul(const Tensor<T>& A, const Tensor<T>& B);  // A B:    (m x k)(k x n) -> m x n
template <typename T>
Tensor<T> matmul_nt(const Tensor<T>& A, const Tensor<T>& B);  // A B^T:  (m x k)(n x k) -> m x n
template <typename T>
Tensor<T> matmul_tn(const Tensor<T>& A, const Tensor<T>& B);  // A^T B:  (k x m)(k x n) -> m x n
template <typename T>
void matmul_tn_acc(const Tensor<T>& A, const Tensor<T>& B, Tensor<T>& C);  // C += A^T B
template <typename T>
void matmul_acc(const Tensor<T>& A, const Tensor<T>& B, Tensor<T>& C);  // C += A B

// ================================================================================================
// MODULES (formulas §2-§17), each a forward and its backward.
// ================================================================================================

// Diagonal Matrix:  diag : R^n -> R^{n x n},  diag(x)_{i,j} = x_i if i = j, 0 otherwise.
template <typename T>
Tensor<T> diag(const Tensor<T>& x);
// dx_i = dY_{i,i}
template <typename T>
Tensor<T> diag_backward(const Tensor<T>& dY);

// Stack:  Stack_n : R^H -> R^{n x H},  Stack_n(x)_{i,j} = x_j   (x repeated as n rows).
template <typename T>
Tensor<T> Stack(const Tensor<T>& x, int n);
// dx_j = sum_i dY_{i,j}
template <typename T>
Tensor<T> Stack_backward(const Tensor<T>& dY);

// One-Hot Encoding:  OneHot : {1..V}^n -> {0,1}^{n x V},  OneHot(x)_{i,j} = 1 if j = x_i.
// Code ids are 0-based: OneHot(x)(i, x[i]) = 1. Ids outside 0..V-1 throw Error.
template <typename T>
Tensor<T> OneHot(const std::vector<int>& x, int V);

// Embedding:  OneHot(x) W_e   (n x V)(V x H) -> n x H, computed as the row lookup W_e[x_i, :].
template <typename T>
Tensor<T> Embedding(const std::vector<int>& x, const Tensor<T>& W_e);
// d(OneHot(x) W_e)/dW_e: dW_e = OneHot(x)^T dY, i.e. scatter-add: dW_e[x_i, :] += dY[i, :].
template <typename T>
void Embedding_backward(const std::vector<int>& x, const Tensor<T>& dY, Tensor<T>& dW_e);

// Softmax (row-wise):  Softmax(X)_{i,j} = e^{X_{i,j}} / sum_k e^{X_{i,k}}   (n x H -> n x H).
// Stable form: subtract the row maximum. Entries equal to -inf get probability exactly 0; a row
// that is all -inf (nothing to attend to) gives a row of zeros instead of NaN.
template <typename T>
Tensor<T> Softmax(const Tensor<T>& X);
// dX = Y * (dY - rowsum(dY * Y))
template <typename T>
Tensor<T> Softmax_backward(const Tensor<T>& Y, const Tensor<T>& dY);

// Bidirectional Attention Mask:  (Mask^BD)_{i,j} = 1      (n x n).
template <typename T>
Tensor<T> Mask_BD(int n);
// Autoregressive Attention Mask:  (Mask^AR)_{i,j} = -inf if j > i, 1 otherwise   (n x n).
template <typename T>
Tensor<T> Mask_AR(int n);
// Sparse causal mask of GPT-3 (never defined in the source formulas (formulas §7); our definition, after the Sparse
// Transformer's strided pattern, Child et al. 2019), n x n:
//   (Mask^ST)_{i,j} = 1 if j <= i and (i - j < window or (stride > 0 and (i - j) mod stride == 0)),
//                    -inf otherwise.
// "window" is the local band (the GPT-3 paper's "locally banded"), "stride" adds the strided
// columns that let information hop further back; stride 0 leaves only the band.
template <typename T>
Tensor<T> Mask_ST(int n, int window, int stride);

// How "Mask (.) S" is carried out (formulas §9): a mask entry 1 keeps the score, a mask
// entry -inf replaces it by -inf, so Softmax gives it probability exactly 0 and its gradient is
// exactly 0. This equals the additive 0/-inf mask; no 0 * inf product is ever formed.
template <typename T>
Tensor<T> apply_mask(const Tensor<T>& Mask, const Tensor<T>& S);

// Masked Scaled Dot-Product Attention (Q, K, V: n x D, Mask: n x n -> n x D):
//   Attention(Q, K, V, Mask) = Softmax( Mask (.) Q K^T / sqrt(D) ) V
// (The code also takes Q with m rows and Mask m x n, for one new row at a time: model_step.)
// P (n x n) is the softmax output, kept for the backward. If dropout_scale is given (n x n, each
// entry 0 or 1/(1-p)), the product uses P (.) dropout_scale instead of P (dropout on attention
// probabilities, formulas §16).
template <typename T>
struct AttentionCache {
    Tensor<T> P;  // n x n attention probabilities
};
template <typename T>
Tensor<T> Attention(const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V, const Tensor<T>& Mask,
                    AttentionCache<T>* cache = nullptr, const Tensor<T>* dropout_scale = nullptr);
// With S = Mask (.) QK^T / sqrt(D), P = Softmax(S), O = P V:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),  dQ = dS K / sqrt(D),
//   dK = dS^T Q / sqrt(D). Masked entries have P = 0, hence dS = 0.
template <typename T>
void Attention_backward(const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V,
                        const AttentionCache<T>& cache, const Tensor<T>& dO, Tensor<T>& dQ, Tensor<T>& dK,
                        Tensor<T>& dV, const Tensor<T>* dropout_scale = nullptr);

// Concatenation:  Concat(X_1, ..., X_A)_{:, (k-1)D+1 : kD} = X_k   (A matrices n x D -> n x AD).
// Code: head k (0-based) fills columns k*D .. k*D+D-1.
template <typename T>
Tensor<T> Concat(const std::vector<Tensor<T>>& X);
// The backward splits dY (n x AD) back into A blocks of n x D.
template <typename T>
std::vector<Tensor<T>> Concat_backward(const Tensor<T>& dY, int A);

// Parameters of one Masked Multi-Head Self-Attention: W_Q[i], W_K[i], W_V[i] (H x D) for the
// heads i = 0..A-1 (formula i = 1..A) and W_O (AD x H). The biases are not in the formulas' boxes (formulas §12); GPT-2
// as released has them (Config::attn_bias). Empty = no biases.
template <typename T>
struct MultiHeadSAParams {
    std::vector<Tensor<T>> W_Q, W_K, W_V;  // A tensors of H x D each
    Tensor<T> W_O;                         // AD x H
    std::vector<Tensor<T>> b_Q, b_K, b_V;  // A tensors of D each, or none
    Tensor<T> b_O;                         // H, or empty
};
template <typename T>
struct MultiHeadSACache {
    std::vector<Tensor<T>> Q, K, V, head;          // A tensors of (B*n) x D: X W_i^Q, ..., head_i
    std::vector<std::vector<AttentionCache<T>>> att;  // [i][b]: head i, sequence b
    Tensor<T> concat;                              // (B*n) x AD
    std::vector<std::vector<Tensor<T>>> dropout;   // [i][b]: n x n scales, empty without dropout
};
// Masked Multi-Head Self-Attention  (X: n x H, Mask: n x n -> n x H):
//   MultiHeadSA(X, Mask) = Concat(head_1, ..., head_A) W^O,
//   head_i = Attention(X W_i^Q, X W_i^K, X W_i^V, Mask).
// With biases (not in the formulas' boxes (formulas §12)): X W_i^Q + Stack_n(b_i^Q), likewise for K and V, and
// Concat(...) W^O + Stack_n(b^O).
// X may hold B sequences of n rows ((B*n) x H); attention is applied to each sequence alone.
// attn_dropout > 0 draws dropout masks for the attention probabilities from rng (an Error without one).
struct Rng;
template <typename T>
Tensor<T> MultiHeadSA(const Tensor<T>& X, const Tensor<T>& Mask, const MultiHeadSAParams<T>& p,
                      MultiHeadSACache<T>* cache = nullptr, double attn_dropout = 0, Rng* rng = nullptr);
// Backward through Concat, the heads and the projections; returns dX, accumulates into g.
template <typename T>
Tensor<T> MultiHeadSA_backward(const Tensor<T>& X, const MultiHeadSAParams<T>& p,
                               const MultiHeadSACache<T>& cache, const Tensor<T>& dY,
                               MultiHeadSAParams<T>& g);

// Activations of the feed-forward network. The GELU of the source formulas is x * sigmoid(1.702 x) (formulas §13); released
// GPT-2 weights need the tanh form, BERT the exact erf form (formulas §13).
enum class Activation { relu, gelu_sigmoid, gelu_tanh, gelu_erf };
const char* activation_name(Activation a);      // "relu", "gelu_sigmoid", ...
Activation activation_from_name(const std::string& s);  // throws Error on an unknown name
//   relu(x)         = max(0, x)
//   gelu_sigmoid(x) = x * sigmoid(1.702 x)
//   gelu_tanh(x)    = 0.5 x (1 + tanh( sqrt(2/pi) (x + 0.044715 x^3) ))
//   gelu_erf(x)     = 0.5 x (1 + erf(x / sqrt(2)))
template <typename T>
T activation(Activation a, T x);
template <typename T>
T activation_derivative(Activation a, T x);  // d activation(x) / dx
// The same over arrays, in loops the compiler vectorises (no library call per number; see vexp):
// y_k = activation(z_k), and dz_k *= activation_derivative(z_k). Tested against the two above.
template <typename T>
void activation_array(Activation a, const T* z, T* y, std::size_t n);
template <typename T>
void activation_derivative_array(Activation a, const T* z, T* dz, std::size_t n);

// exp(x) as plain arithmetic that vectorises (std::exp is a library call): relative error below
// 1.01e-7 for float, 1.76e-16 for double; 0 below the normal range, exp(-inf) = 0, NaN stays NaN.
template <typename T>
T vexp(T x);
// The C library's transcendental functions, computed by the program: range reduction and a
// polynomial in plain IEEE arithmetic, in a fixed order, so that a run writes the same bits whichever
// C library (glibc, macOS's, musl) the program is linked with (docs/performance.md, "The same numbers
// on every machine"). Every result of a run goes through these; the plain reference loops
// (softmax_row_reference, activation, activation_derivative) keep std::. Measured against the C
// library's long double functions (the "math: ..." tests): the largest errors in units in the last place.
namespace math {
float exp(float x);    // vexp: under 1.2 ulp; 0 below the normal range (x < -87.3), inf above 88.72
double exp(double x);  // vexp: under 1.2 ulp; 0 for x < -708, inf above 709.78
float log(float x);    // under 0.51 ulp (computed in double); log(0) = -inf, log(x < 0) = NaN
double log(double x);  // under 1 ulp, subnormal x included
float erf(float x);    // under 0.51 ulp (computed in double)
double erf(double x);  // under 1.3 ulp; erf(x) = +-1 for |x| >= 6
double cos_pi(double t);  // cos(pi t), under 1 ulp; exact at the multiples of 1/2; inf and NaN give NaN
double pow_int(double b, long long n);  // b^n by squaring in double-double: under 0.51 ulp in the normal range
}  // namespace math
// One row of Softmax: the plain loop with std::exp, and the vectorised form (vexp) used by Softmax.
template <typename T>
void softmax_row_reference(const T* x, T* y, int H);
template <typename T>
void softmax_row(const T* x, T* y, int H);

// Parameters of a feed-forward network: W_1 (H x F), b_1 (F), W_2 (F x H), b_2 (H).
template <typename T>
struct FFNParams {
    Tensor<T> W_1, b_1, W_2, b_2;
};
template <typename T>
struct FFNCache {
    Tensor<T> Z;  // n x F, pre-activation X W_1 + b_1
    Tensor<T> A;  // n x F, activation(Z)
};
// Feed-Forward Network (n x H -> n x H):
//   FFN(X) = act(X W_1 + b_1) W_2 + b_2
// with act = max(0, .) for FFN_ReLU and act = GELU for FFN_GELU.
template <typename T>
Tensor<T> FFN(const Tensor<T>& X, const FFNParams<T>& p, Activation act, FFNCache<T>* cache = nullptr);
// dW_2 = A^T dY, db_2 = colsum(dY), dA = dY W_2^T, dZ = dA * act'(Z), dW_1 = X^T dZ,
// db_1 = colsum(dZ), dX = dZ W_1^T. Returns dX, accumulates into g.
template <typename T>
Tensor<T> FFN_backward(const Tensor<T>& X, const FFNParams<T>& p, Activation act, const FFNCache<T>& cache,
                       const Tensor<T>& dY, FFNParams<T>& g);
// Feed-Forward ReLU Network:  FFN_ReLU(X) = max(0, X W_1 + b_1) W_2 + b_2.
template <typename T>
Tensor<T> FFN_ReLU(const Tensor<T>& X, const FFNParams<T>& p, FFNCache<T>* cache = nullptr);
template <typename T>
Tensor<T> FFN_ReLU_backward(const Tensor<T>& X, const FFNParams<T>& p, const FFNCache<T>& cache,
                            const Tensor<T>& dY, FFNParams<T>& g);
// Feed-Forward GELU Network:  FFN_GELU(X) = GELU(X W_1 + b_1) W_2 + b_2,
// GELU(X) = X (.) sigmoid(1.702 X) by default; gelu_tanh and gelu_erf selectable.
template <typename T>
Tensor<T> FFN_GELU(const Tensor<T>& X, const FFNParams<T>& p, FFNCache<T>* cache = nullptr,
                   Activation gelu = Activation::gelu_sigmoid);
template <typename T>
Tensor<T> FFN_GELU_backward(const Tensor<T>& X, const FFNParams<T>& p, const FFNCache<T>& cache,
                            const Tensor<T>& dY, FFNParams<T>& g,
                            Activation gelu = Activation::gelu_sigmoid);

// Layer normalization (n x H -> n x H), gamma, beta: H:
//   LayerNorm(X)_{i,j} = gamma_j (X_{i,j} - mu_i) / sqrt(sigma_i^2 + eps) + beta_j,
//   mu_i = (1/H) sum_j X_{i,j},  sigma_i^2 = (1/H) sum_j (X_{i,j} - mu_i)^2.
template <typename T>
struct LayerNormCache {
    Tensor<T> Xhat;  // n x H, (X - mu) / sqrt(sigma^2 + eps)
    Tensor<T> rstd;  // n, 1 / sqrt(sigma^2 + eps)
};
template <typename T>
Tensor<T> LayerNorm(const Tensor<T>& X, const Tensor<T>& gamma, const Tensor<T>& beta, double eps,
                    LayerNormCache<T>* cache = nullptr);
// dgamma_j = sum_i dY_ij Xhat_ij, dbeta_j = sum_i dY_ij, and with G = dY * gamma:
//   dX_i = rstd_i (G_i - mean(G_i) - Xhat_i * mean(G_i * Xhat_i)).
template <typename T>
Tensor<T> LayerNorm_backward(const Tensor<T>& gamma, const LayerNormCache<T>& cache, const Tensor<T>& dY,
                             Tensor<T>& dgamma, Tensor<T>& dbeta);

// Cross Entropy (formulas §17):  CrossEntropy(y, yhat) = - sum_{j=1}^V y_j log(yhat_j)
// y, yhat: V (a distribution and a prediction). d/dyhat_j = -y_j / yhat_j.
template <typename T>
T CrossEntropy(const Tensor<T>& y, const Tensor<T>& yhat);
template <typename T>
Tensor<T> CrossEntropy_backward(const Tensor<T>& y, const Tensor<T>& yhat);
// The stable fused form used for training: rows of logits Z (m x V) and target ids t (m; -1 means
// "no target here", the row is skipped). Returns the mean over the counted rows of
//   CrossEntropy(OneHot(t_i), Softmax(Z_i)) = logsumexp(Z_i) - Z_{i,t_i}
// and, if dZ is given, dZ_i = (Softmax(Z_i) - OneHot(t_i)) / count (zero rows for skipped ones).
template <typename T>
double CrossEntropy_logits(const Tensor<T>& Z, const std::vector<int>& targets, Tensor<T>* dZ = nullptr);

// ------------------------------------------------------------------------------------------------
// Random numbers: the project's own generator, so a seed gives the same numbers on any machine.
// ------------------------------------------------------------------------------------------------
struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed = 0) : state(seed) {}
    uint64_t next();          // splitmix64
    double uniform();         // [0, 1) with 53 random bits
    double normal();          // N(0, 1), Box-Muller
    int below(int n);         // uniform integer in 0..n-1
};

// Dropout scales: each entry 0 with probability p, else 1/(1-p) ("inverted" dropout, so the
// expectation is unchanged and evaluation needs no rescaling). p = 0 gives an empty tensor and
// draws nothing; p > 0 needs a generator (an error for a null Rng*).
template <typename T>
Tensor<T> dropout_mask(const std::vector<int>& shape, double p, Rng& rng);
template <typename T>
Tensor<T> dropout_mask(const std::vector<int>& shape, double p, Rng* rng);
template <typename T>
void multiply_inplace(Tensor<T>& X, const Tensor<T>& scale);  // X *= scale (empty scale: no-op)


// ================================================================================================
// MODELS (formulas §18-§24): GPT, GPT-2, GPT-3, BERT, RoBERTa.
// ================================================================================================
enum class Variant { gpt, gpt2, gpt3, bert, roberta };
const char* variant_name(Variant v);              // "gpt", "gpt2", "gpt3", "bert", "roberta"
Variant variant_from_name(const std::string& s);  // throws Error on an unknown name

// The hyperparameters (formulas §24) plus what the source formulas leave loose (formulas §1).
struct Config {
    Variant variant = Variant::gpt2;
    int V = 0;      // vocabulary size
    int H = 0;      // dimension of the residual stream
    int F = 0;      // hidden dimension of the feed-forward nets
    int D = 0;      // dimension of queries, keys and values (per head)
    int L = 0;      // number of layers
    int A = 0;      // number of heads
    int n_ctx = 0;  // context size: W_p is n_ctx x H (formulas §18)
    Activation activation = Activation::gelu_sigmoid;
    double eps = 1e-5;  // LayerNorm epsilon (GPT/GPT-2: 1e-5, BERT: 1e-12)
    int cls_id = -1, sep_id = -1, mask_id = -1;  // BERT [CLS] [SEP] [MASK]; RoBERTa <s> </s> <mask>
    int pad_id = -1;  // RoBERTa's <pad> (Hugging Face's padding_idx), -1 = none: see position_rows
    int st_window = 0, st_stride = 0;             // GPT-3's Mask_ST (see Mask_ST)
    bool attn_bias = false;  // biases b_i^Q, b_i^K, b_i^V, b^O in every MultiHeadSA (GPT-2 as released; not in the formulas' boxes (formulas §12))
    int W_y_rows = 0, W_y_cols = 0;  // the fine-tuning head W_y (formulas §28), 0 x 0 = none
    bool xlnet = false;              // XLNet's query-stream start vector w (H): trained with the permutation objective
    // The released BERT beyond the formulas (formulas §23; bert and roberta only; all off by default):
    bool emb_ln = false;    // X^(0) = LayerNorm(OneHot(x) W_e + W_p + segments; gamma_e, beta_e)
    bool mlm_head = false;  // Z = MLMHead(X^(L)): dense W_t, b_t, GELU, LayerNorm gamma_t, beta_t, W_e^T, bias b_z
    bool pooler = false;    // W_pool (H x H), b_pool (H): read from the file and kept, unused here
};
// Named presets: gpt1 (the published hyperparameters, formulas §24), gpt2-124m, gpt3-125m, bert-base, roberta-base
// (the published sizes; gpt2-124m, bert-base and roberta-base with attention biases, as released)
// and tiny-gpt, tiny-gpt2, tiny-gpt3, tiny-bert, tiny-roberta (for tests and demos).
Config preset(const std::string& name);
std::vector<std::string> preset_names();
void validate(const Config& c);  // throws Error naming the bad field
bool is_pre_ln(Variant v);       // GPT-2, GPT-3: LayerNorm before each sub-block
bool is_causal(Variant v);       // GPT, GPT-2, GPT-3: next-token models
bool has_segments(Variant v);    // BERT: segment vectors w_A, w_B

// All parameters theta (seed "Parameters"). Layer l (formula l = 1..L) is layers[l-1].
template <typename T>
struct Layer {
    MultiHeadSAParams<T> attn;
    FFNParams<T> ffn;
    Tensor<T> ln_1_gamma, ln_1_beta;  // H: the LayerNorm nearer the block's input
    Tensor<T> ln_2_gamma, ln_2_beta;  // H: the second one
};
template <typename T>
struct Params {
    Tensor<T> W_e;  // V x H token embedding (also the de-embedding, tied: W_e^T)
    Tensor<T> W_p;  // n_ctx x H positional embedding; rows 0..n-1 are used
    Tensor<T> w_pad;  // H, RoBERTa's position vector of a <pad> (Config::pad_id; empty otherwise): position_rows
    Tensor<T> w_A, w_B;  // H, BERT's segment vectors (empty for other variants)
    std::vector<Layer<T>> layers;
    Tensor<T> ln_f_gamma, ln_f_beta;  // H, final LayerNorm of GPT-2/GPT-3 (empty otherwise)
    Tensor<T> W_y;  // Config::W_y_rows x W_y_cols, the fine-tuning head (empty otherwise)
    Tensor<T> w;    // H, XLNet's query start vector (empty unless Config::xlnet)
    // The released BERT's additions (empty unless their Config option is on):
    Tensor<T> gamma_e, beta_e;            // H: the embedding LayerNorm (emb_ln)
    Tensor<T> W_t, b_t, gamma_t, beta_t;  // H x H, H, H, H: the masked-LM head's transform (mlm_head)
    Tensor<T> b_z;                        // V: the masked-LM head's output bias (mlm_head)
    Tensor<T> W_pool, b_pool;             // H x H, H: the pooler (pooler), unused
};
// Every tensor of the variant, with all entries 0 (shapes from the config), in one arena in
// named_tensors' order. allocate = false gives the shapes alone, without numbers, for load_model,
// which reads each tensor into its place.
template <typename T>
Params<T> make_params(const Config& c, bool allocate = true);
// The parameter tensors by checkpoint name ("W_e", "layers.0.attn.W_Q.0", ...), in a fixed order.
template <typename T>
struct Named {
    std::string name;
    Tensor<T>* tensor;
};
template <typename T>
std::vector<Named<T>> named_tensors(const Config& c, Params<T>& p);
// The initialisation of GPT-1's paper (formulas §24): matrices and segment vectors N(0, 0.02), gamma 1, beta and biases 0.
template <typename T>
void init_params(const Config& c, Params<T>& p, uint64_t seed);
// GPT-2's variant of it (GPT-2 paper, section 2.3, as in nanoGPT): the weights that end a residual
// branch (W_O and W_2) are scaled by 1/sqrt(2L), so the residual stream does not grow with depth.
template <typename T>
void scale_residual_init(const Config& c, Params<T>& p);
template <typename T>
void zero_params(const Config& c, Params<T>& p);
// The name of the first parameter tensor holding a NaN or an infinity, "" if all are finite.
template <typename T>
std::string first_nonfinite(const Config& c, const Params<T>& p);

// The parameter count lambda of formulas §24 (with n = n_ctx):
//   lambda = V H + n H                                 embeddings
//          + L (A (H D + H D + H D) + A D H)           MultiHeadSAs
//          + L (H F + F + F H + H)                     FFNets
//          + L (H + H + H + H)                         LayerNorms
struct ParamCount {
    long long embeddings = 0, attention = 0, ffn = 0, layernorms = 0, segments = 0, final_ln = 0;
    long long attn_biases = 0;  // L (A (D + D + D) + H) with Config::attn_bias, not in the formulas' boxes (formulas §12)'s lambda
    long long heads = 0;        // W_y (fine-tuning) and w (XLNet), not in the formulas' boxes (formulas §12)'s lambda
    long long emb_ln = 0;       // 2 H with Config::emb_ln
    long long mlm_head = 0;     // H H + H + 2 H + V with Config::mlm_head
    long long pooler = 0;       // H H + H with Config::pooler
    long long pad_position = 0; // H with Config::pad_id (w_pad)
    long long seed_lambda = 0;  // formulas §24's lambda
    long long actual = 0;       // floats the variant really holds
};
ParamCount count_params(const Config& c);

// The input of one forward pass: B sequences of n token ids (code ids 0..V-1), row-major B x n.
struct Batch {
    int B = 1, n = 0;
    std::vector<int> tokens;    // B*n ids: x (or x' for BERT/RoBERTa)
    std::vector<int> segments;  // B*n values t_i in {0, 1} (BERT only; empty = all 0)
    std::vector<int> targets;   // B*n target ids for the loss, -1 = no target at this position
    std::vector<int> lengths;   // B: tokens before the padding (empty = all n); BERT and RoBERTa
                                // mask the padding's keys (key_padding_mask), GPTs need not
};

// The masked-LM head of the released BERT (not in the formulas' boxes (formulas §12); Config::mlm_head), on the rows X^(L):
//   MLMHead(X) = LayerNorm(GELU(X W_t + Stack_n(b_t)); gamma_t, beta_t) W_e^T + Stack_n(b_z)
//   X: n x H;  W_t: H x H;  b_t, gamma_t, beta_t: H;  W_e: V x H (tied: the embedding's);  b_z: V
//   -> n x V logits. GELU is c.activation for BERT (BertPredictionHeadTransform applies hidden_act)
//   and the erf GELU for RoBERTa whatever c.activation is (RobertaLMHead calls gelu, not hidden_act).
//   Row i of X (formula row i+1) gives row i of the result.
template <typename T>
struct MLMHeadCache {
    Tensor<T> X;            // n x H, the input X^(L)
    Tensor<T> U;            // n x H, X W_t + b_t (before GELU)
    LayerNormCache<T> ln;   // of LayerNorm(GELU(U))
    Tensor<T> X_t;          // n x H, the transformed rows that are de-embedded
};
template <typename T>
Tensor<T> MLMHead(const Config& c, const Params<T>& p, const Tensor<T>& X, MLMHeadCache<T>* cache = nullptr);
// With Z = X_t W_e^T + b_z, X_t = LN(A), A = GELU(U), U = X W_t + b_t:
//   db_z = colsum(dZ), dW_e += dZ^T X_t, dX_t = dZ W_e, dA = LayerNorm_backward(dX_t),
//   dU = dA * GELU'(U), dW_t = X^T dU, db_t = colsum(dU), dX = dU W_t^T.
// Returns dX; accumulates into g (W_e included).
template <typename T>
Tensor<T> MLMHead_backward(const Config& c, const Params<T>& p, const MLMHeadCache<T>& cache, const Tensor<T>& dZ,
                           Params<T>& g);

// ---- The walk observed: one pass's intermediates, as model_forward and model_backward reach them ----
// Each value the formulas name, with l the formula's layer (1..L; X^(0) is Stage::X with l = 0; the
// stages after the layers have l = L). Post-LN (GPT, BERT, RoBERTa; formulas §18):
//   S = MultiHeadSA(X^(l-1)) + X^(l-1), X'^(l) = LayerNorm(S), U = FFN(X'^(l)) + X'^(l), X^(l) = LayerNorm(U).
// Pre-LN (GPT-2, GPT-3; formulas §19):
//   X'^(l) = MultiHeadSA(LayerNorm(X^(l-1))) + X^(l-1), X^(l) = FFN(LayerNorm(X'^(l))) + X'^(l).
// A branch's output (attention, ffn) is reported before its residual dropout.
enum class Stage {
    embedding,  // E = OneHot(x) W_e + W_p (+ segments), the embedding LayerNorm's input (Config::emb_ln only)
    X,          // X^(l), l = 0..L: layer l's output (X^(0): the embedding's, after its dropout)
    mask,       // Mask^(l), n x n (forward only)
    ln_1,       // pre-LN: LayerNorm(X^(l-1)), MultiHeadSA's input
    attention,  // MultiHeadSA(...) of layer l
    attn_sum,   // post-LN: S, LayerNorm's input
    X_mid,      // X'^(l)
    ln_2,       // pre-LN: LayerNorm(X'^(l)), the FFN's input
    ffn,        // FFN(...) of layer l
    ffn_sum,    // post-LN: U, LayerNorm's input
    final_ln,   // pre-LN: X_f = LayerNorm_f(X^(L)), the rows that are de-embedded
    logits,     // Z (rows: ForwardOptions::logit_rows)
    loss,       // the loss (1 entry; model_loss)
};
// Sees each stage once per pass, in the walk's order: forward() as the forward computes it (it may
// change the value in place: a finite difference perturbs one entry), backward() with the gradient
// of the loss with respect to it as the backward computes it (the loss's own gradient is not
// reported; the logits' is, by model_loss). explain draws its boxes from these, and the checks
// compare each gradient with finite differences of the loss through the same forward.
struct Trace {
    virtual ~Trace() = default;
    virtual void forward(Stage, int /*l*/, Tensor<float>& /*value*/) {}
    virtual void forward(Stage, int /*l*/, Tensor<double>& /*value*/) {}
    virtual void backward(Stage, int /*l*/, Tensor<float>& /*gradient*/) {}
    virtual void backward(Stage, int /*l*/, Tensor<double>& /*gradient*/) {}
};
// Everything the forward pass keeps for the backward pass.
template <typename T>
struct BlockCache {
    LayerNormCache<T> ln_1, ln_2;
    Tensor<T> attn_in;             // (B*n) x H, input of MultiHeadSA: X^(l-1) (post-LN), LayerNorm(X^(l-1)) (pre-LN)
    MultiHeadSACache<T> attn;
    Tensor<T> drop_attn;           // residual dropout scales of the attention branch
    Tensor<T> ffn_in;              // (B*n) x H, input of the FFN: X'^(l) (post-LN), LayerNorm(X'^(l)) (pre-LN)
    FFNCache<T> ffn;
    Tensor<T> drop_ffn;            // residual dropout scales of the FFN branch
    // Kept only with ForwardOptions::keep_sublayers (explain shows them), for the values the
    // backward pass does not need: each branch's output before its dropout and residual sum and,
    // pre-LN, the block's input X^(l-1) and X'^(l) (post-LN they are attn_in and ffn_in).
    Tensor<T> attn_out, ffn_out, X, X_mid;
    Trace* trace = nullptr;        // ForwardOptions::trace, for the backward to report to
    int l = 0;                     // the formula's layer (1..L), as the trace names it
};
template <typename T>
struct ForwardCache {
    Batch batch;
    Tensor<T> drop_emb;            // (B*n) x H embedding dropout scales
    std::vector<Tensor<T>> masks;  // Mask^(l) per layer, n x n (XLNet: Mask^XL, 2n x 2n; padded BERT: (B*n) x n)
    std::vector<BlockCache<T>> blocks;
    Tensor<T> X_L_in;              // X^(L) before the final LayerNorm (pre-LN variants)
    LayerNormCache<T> ln_f;
    Tensor<T> X_L;                 // (B*n) x H, the rows that are de-embedded
    LayerNormCache<T> ln_e;        // the embedding LayerNorm (Config::emb_ln)
    MLMHeadCache<T> mlm;           // the masked-LM head (Config::mlm_head)
    std::vector<int> logit_rows;   // ForwardOptions::logit_rows: the rows of X_L that were de-embedded
    bool all_rows = true;          // false: Z holds only those rows
    Tensor<T> X_L_rows;            // m x H, those rows of X_L (when not all_rows)
    Trace* trace = nullptr;        // ForwardOptions::trace, for the backward to report to
};
// Training-time switches: dropout (formulas §16) on embeddings, residual branches and attention
// probabilities, drawn from rng. dropout = 0 (evaluation) switches all of it off.
struct ForwardOptions {
    double dropout = 0;
    Rng* rng = nullptr;
    // De-embed only these rows of X^(L) (0-based, in this order): Z is then m x V instead of
    // (B*n) x V. A masked LM needs the logits of its few target rows only (BERT's original code
    // gathers the masked positions the same way); null = every row.
    const std::vector<int>* logit_rows = nullptr;
    bool keep_sublayers = false;  // keep what BlockCache lists for explain
    Trace* trace = nullptr;       // sees every stage of the forward and (through the cache) the backward
};
// The mask of layer l (0-based code index; formula l = code l + 1):
//   GPT, GPT-2: Mask^AR; BERT, RoBERTa: Mask^BD;
//   GPT-3: Mask^AR if formula l is even, Mask^ST if it is odd (code layer 0 is formula l = 1: ST).
template <typename T>
Tensor<T> layer_mask(const Config& c, int l, int n);
// Batches of padded sequences (Batch::lengths) of a bidirectional model: Mask (n x n) repeated per
// sequence b with the key columns j >= lengths[b] set to -inf ((B*n) x n), so no token attends
// to padding. MultiHeadSA takes either form.
template <typename T>
Tensor<T> key_padding_mask(const Tensor<T>& Mask, const std::vector<int>& lengths);

// The position vector each token of B sequences of n (tokens: B*n ids) gets: a row of W_p, or -1
// for w_pad. Token i of a sequence gets row i (W_p[0:n, :], formulas §18), except that with
// Config::pad_id a <pad> gets w_pad and is not counted, as Hugging Face's
// create_position_ids_from_input_ids numbers RoBERTa's positions: (cumsum(x != pad) * (x != pad)) + pad,
// i.e. the c-th non-pad token gets Hugging Face's row pad + c (W_p[c - 1] here), a pad its row pad.
std::vector<int> position_rows(const Config& c, const std::vector<int>& tokens, int n);

// The whole network up to the logits Z = X^(L) W_e^T ((B*n) x V); Softmax(Z) is Y of formulas §17.
template <typename T>
Tensor<T> model_forward(const Config& c, const Params<T>& p, const Batch& batch, ForwardCache<T>* cache = nullptr,
                        ForwardOptions opt = {});
// Backward from dZ ((B*n) x V, or m x V for ForwardOptions::logit_rows) to every parameter; gradients are accumulated into g. dX_L, if
// given ((B*n) x H), is a further gradient on the de-embedded rows X^(L) (a fine-tuning head's);
// an empty dZ then means no gradient through the logits.
template <typename T>
void model_backward(const Config& c, const Params<T>& p, const ForwardCache<T>& cache, const Tensor<T>& dZ,
                    Params<T>& g, const Tensor<T>* dX_L = nullptr);
// The pieces of model_forward and model_backward that explain and the tests walk one at a time.
// embed_forward: X^(0) = OneHot(x) W_e + W_p[0:n, :] (+ BERT's segment rows), (B*n) x H, before
// the embedding LayerNorm and dropout. block_forward: one layer's block, pre-LN or post-LN by the
// variant (X^(l-1) -> X^(l)), drawing its dropout from o.rng. block_backward: dX^(l) -> dX^(l-1),
// the layer's gradients accumulated into g. blocks_backward: the final LayerNorm (pre-LN), then
// the layers from l = L down to 1 (dX^(L) -> dX^(0)). embed_backward: dX^(0) into dW_e, dW_p or
// dw_pad, and BERT's dw_A, dw_B.
template <typename T>
struct KVLayer;
template <typename T>
Tensor<T> embed_forward(const Config& c, const Params<T>& p, const Batch& batch, int first_position = 0);
template <typename T>
Tensor<T> block_forward(const Config& c, const Layer<T>& w, const Tensor<T>& X, const Tensor<T>& Mask,
                        BlockCache<T>& cache, const ForwardOptions& o, KVLayer<T>* kv = nullptr);
template <typename T>
Tensor<T> block_backward(const Config& c, const Layer<T>& w, const BlockCache<T>& cache, const Tensor<T>& dY, Layer<T>& g);
template <typename T>
Tensor<T> blocks_backward(const Config& c, const Params<T>& p, const ForwardCache<T>& cache, Tensor<T> dX, Params<T>& g);
template <typename T>
void embed_backward(const Config& c, const Batch& batch, const Tensor<T>& dX, Params<T>& g);
// Forward, mean cross-entropy over the batch's targets (nats per predicted token), and, if g is
// given, backward into g. The one function training and the grad command call. BERT and RoBERTa
// de-embed only the rows with a target (logit_rows): the same loss and gradients, up to rounding,
// for about 15% of the de-embedding's work. cache, if given, keeps the forward's cache (explain
// shows its sublayers).
template <typename T>
double model_loss(const Config& c, const Params<T>& p, const Batch& batch, Params<T>* g = nullptr,
                  ForwardOptions opt = {}, ForwardCache<T>* cache = nullptr);

// The formula boxes' outputs, one sequence at a time (ids 0-based):
//   GPT(x) = GPT2(x) = GPT3(x) = Softmax(X^(L)_{n,:} W_e^T)              (V)
//   BERT(x', t, j) = Softmax(X^(L)_{j,:} W_e^T),  RoBERTa(x', j) likewise  (V)
template <typename T>
Tensor<T> GPT(const Config& c, const Params<T>& p, const std::vector<int>& x);
template <typename T>
Tensor<T> BERT(const Config& c, const Params<T>& p, const std::vector<int>& x, const std::vector<int>& t,
               int j_masked);
template <typename T>
Tensor<T> RoBERTa(const Config& c, const Params<T>& p, const std::vector<int>& x, int j_masked);

// ================================================================================================
// OBJECTIVES
// ================================================================================================
// GPT: targets of x are x shifted by one: position i predicts x_{i+1}; the last has none (-1).
// loss = - (1/(n-1)) sum_{j=2}^n log Y[j-1, x_j]  (formula indices; mean in nats per token).
std::vector<int> next_token_targets(const std::vector<int>& x, int B, int n);
// BERT/RoBERTa masked-LM corruption (formulas §26): each position that is not [CLS]/[SEP] is chosen
// with probability p_select (0.15); a chosen token becomes [MASK] with probability 0.8, a random
// token with 0.1, stays with 0.1. targets = the original id at chosen positions, -1 elsewhere.
// At least one position per sequence is chosen.
struct MLMExample {
    std::vector<int> tokens, targets;
};
MLMExample mlm_corrupt(const std::vector<int>& x, int B, int n, const Config& c, Rng& rng, double p_select = 0.15);
// The BERT input (formulas §21): ([CLS], A, [SEP], B, [SEP]) and t_i = 0 up to and including the
// first [SEP], 1 after it.
void bert_pair(const Config& c, const std::vector<int>& a, const std::vector<int>& b, std::vector<int>& x,
               std::vector<int>& t);

// GPT-1 fine-tuning (formulas §28). A linear head W_y on h_L^m, the final hidden state (the
// de-embedded row X^(L), after ln_f for GPT-2/GPT-3) at the sequence's extract token m:
//   P(y | x^1, ..., x^m) = Softmax(h_L^m W_y),   L2 = -log P(y | x),
//   L1 = the language-model loss on x,           L3 = L2 + lambda L1.
// Losses are means (L2 over the examples, L1 over the predicted tokens). The task's input
// transformations (start s, delimiter $, extract e are extra token ids):
//   classify:        [s] text [e]                                   one sequence, W_y: H x C
//   entailment:      [s] premise [$] hypothesis [e]                 one sequence, W_y: H x C
//   similarity:      [s] a [$] b [e] and [s] b [$] a [e]            two sequences whose h are
//                    concatenated [h_1, h_2] (formulas §28; the paper adds them), W_y: 2H x C
//   multiple choice: [s] context [$] answer_k [e] for k = 1..K      K sequences, a score h W_y
//                    per answer (W_y: H x 1), Softmax over the K answers
// A batch holds E examples of K sequences each (K = 1 for classify and entailment, 2 for
// similarity, the number of answers for multiple choice), B = E K rows of n tokens; at[b] is the
// 0-based row of sequence b's extract token (padding after it cannot reach h: Mask^AR).
// BERT and RoBERTa (BERT paper, section 4) use the same head on h = X^(L) at [CLS] (at[b] = 0),
// with [CLS] A [SEP] B [SEP] as the pair, Batch::lengths masking the padding, and L1 the masked-LM
// loss of the batch's targets (mlm_corrupt on the same inputs).
enum class FinetuneTask { classify, similarity, multiple_choice };
struct GPT1Specials {
    int start = -1, delim = -1, extract = -1;
};
std::vector<int> gpt1_classify_input(const std::vector<int>& text, const GPT1Specials& s);
std::vector<int> gpt1_entailment_input(const std::vector<int>& premise, const std::vector<int>& hypothesis,
                                       const GPT1Specials& s);
std::vector<std::vector<int>> gpt1_similarity_inputs(const std::vector<int>& a, const std::vector<int>& b,
                                                     const GPT1Specials& s);
std::vector<std::vector<int>> gpt1_multiple_choice_inputs(const std::vector<int>& context,
                                                          const std::vector<std::vector<int>>& answers,
                                                          const GPT1Specials& s);
// Sequences of any lengths up to n -> one batch: padded after the end with `pad`, next-token
// targets inside each sequence (-1 on the padding), at = each sequence's last row.
Batch gpt1_batch(const std::vector<std::vector<int>>& sequences, int n, int pad, std::vector<int>& at);
struct FinetuneLoss {
    double L1 = 0, L2 = 0, L3 = 0;
};
// The losses; with g and dW_y, the gradients of L3 are accumulated into them.
template <typename T>
FinetuneLoss finetune_loss(const Config& c, const Params<T>& p, const Tensor<T>& W_y, FinetuneTask task, int K,
                           const Batch& batch, const std::vector<int>& at, const std::vector<int>& labels,
                           double lambda, Params<T>* g = nullptr, Tensor<T>* dW_y = nullptr, ForwardOptions opt = {});
// P(y | x) of each example (E x C, or E x K for multiple choice), dropout off.
template <typename T>
Tensor<T> finetune_probs(const Config& c, const Params<T>& p, const Tensor<T>& W_y, FinetuneTask task, int K,
                         const Batch& batch, const std::vector<int>& at);

// XLNet's permutation objective with two-stream attention (formulas §27;
// two-stream attention from the XLNet paper, Yang et al. 2019). For a permutation z of the n
// positions (0-based here), with rank(z_t) = t:
//   log P(x) = sum over the last `predict` t of  log P(x_{z_t} | x_{z_1}, ..., x_{z_{t-1}}).
// Two streams run through the same blocks (the config's variant, shared weights):
//   content h_i:  h^(0)_i = W_e[x_i] + W_p[i]; sees the content of every j with rank(j) <= rank(i),
//                 its own token included;
//   query   g_i:  g^(0)_i = w + W_p[i] (w: H, learned); sees the content of every j with
//                 rank(j) < rank(i) and its own position, never its own token.
//   P(x_i | ...) = Softmax(g^(L)_i W_e^T)  (after ln_f for pre-LN variants).
// Each sequence becomes 2n rows [h_1..h_n; g_1..g_n] and one mask does both streams, Mask^XL(z)
// (2n x 2n): (content i, content j) = 1 if rank(j) <= rank(i); (query i, content j) = 1 if
// rank(j) < rank(i); every other entry -inf, so no row attends to the query stream. FFN and
// LayerNorm act on each row alone, so every row gets exactly its stream's block. The query row of
// z_1 sees nothing: its attention probabilities are 0 (Softmax of a row of -inf is 0 here, not
// NaN), so its attention sub-block adds only b^O (if the model has attention biases). Every layer
// uses Mask^XL, GPT-3's included (no strided layers). Cost: attention runs over 2n x 2n where
// each stream needs n x n; kept so that the blocks' code serves both streams unchanged.
// Absolute positions W_p stand in for XLNet's relative encoding. BERT (segments) is refused.
template <typename T>
Tensor<T> Mask_XL(const std::vector<int>& z);
// Mean -log P over the B x predict targets of a batch of B sequences of n tokens (one z for the
// batch); with g and dw, the gradients are accumulated into them.
template <typename T>
double xlnet_loss(const Config& c, const Params<T>& p, const Tensor<T>& w, const std::vector<int>& tokens, int B,
                  const std::vector<int>& z, int predict, Params<T>* g = nullptr, Tensor<T>* dw = nullptr);
// The query stream's distributions Softmax(g^(L)_i W_e^T) for sequence 0, n x V (row i: position i).
template <typename T>
Tensor<T> xlnet_query_probs(const Config& c, const Params<T>& p, const Tensor<T>& w, const std::vector<int>& tokens,
                            const std::vector<int>& z);

// ================================================================================================
// TRAINING (formulas §29-§31, §24, §16: Adam with decoupled weight decay, linear warmup then cosine decay,
// N(0, 0.02) init, dropout 0.1 on residual branches, embeddings and attention).
// ================================================================================================

// AdamW (Loshchilov & Hutter): for each parameter theta with gradient g, at step t = 1, 2, ...
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2,
//   mhat = m / (1 - beta1^t),      vhat = v / (1 - beta2^t),
//   theta -= lr (mhat / (sqrt(vhat) + eps) + wd theta)     (wd only for matrices: decays())
struct AdamW {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
    long long t = 0;  // steps taken
    Params<float> m, v;
};
bool decays(const std::string& name, const Tensor<float>& t);  // matrices yes; gains, biases, w_A/w_B no
void adamw_init(const Config& c, AdamW& opt);
void adamw_step(const Config& c, Params<float>& p, Params<float>& g, AdamW& opt, double lr);

// Learning rate at step s = 0 .. steps-1: linear warmup from lr/warmup to lr over `warmup` steps,
// then cosine decay from lr to min_lr at the last step.
double lr_schedule(long long s, long long steps, long long warmup, double lr, double min_lr);
// The same warmup, then linear decay from lr to min_lr at the last step (the GPT-1 paper's
// fine-tuning schedule).
double lr_linear(long long s, long long steps, long long warmup, double lr, double min_lr);
// Global gradient norm ||g|| over every tensor; if it exceeds max_norm (> 0), scale g by
// max_norm / ||g||. Returns the norm before clipping.
double clip_grad_norm(const Config& c, Params<float>& g, double max_norm);
// One training step (formulas §29-§31): zero g, add into it the gradients of `accum` batches
// (loss_and_grad adds one batch's mean-loss gradient and returns its loss), take their mean, clip
// it to global norm max_norm (0: no clipping), one AdamW step at rate lr. The step's loss is the
// batches' mean; norm is the gradient's norm before clipping. A loss or norm that is not finite
// leaves p untouched.
struct StepResult {
    double loss = 0, norm = 0;
};
StepResult train_step(const Config& c, Params<float>& p, Params<float>& g, AdamW& opt, double lr, double max_norm,
                      int accum, const std::function<double(Params<float>&)>& loss_and_grad);
// Draw one id from logits z (V) with temperature, top-k and top-p (formulas §32; exposed for tests).
// Among equal logits at the k-th place the lower ids are kept, so the draw does not depend on the
// standard library. top_p in (0, 1]: after top-k, the fewest most likely ids (ties: lower id first)
// whose probabilities add up to top_p or more; 1 keeps them all and draws as without it.
int sample_logits(const std::vector<float>& z, double temperature, int top_k, Rng& rng, double top_p = 1.0);

// Generation with a key/value cache (GPT variants). Under a causal mask row t of every layer
// depends only on rows 0..t below it, so when tokens arrive one at a time the keys X W_i^K and
// values X W_i^V of earlier rows can be kept and only the new row computed: O(t) work per token
// instead of O(t^2). model_step feeds token x at position kv.t and returns the logits (V) for
// the next token, equal to row t of model_forward on the whole prefix.
template <typename T>
struct KVLayer {
    std::vector<Tensor<T>> K, V;  // [i]: t x D, the rows' X W_i^K and X W_i^V (room reserved for n_ctx rows)
};
template <typename T>
struct KVCache {
    int t = 0;                        // tokens fed so far (the next position)
    std::vector<KVLayer<T>> layers;   // [l]: layer l's keys and values
    std::vector<Tensor<T>> masks;     // [l]: layer_mask(c, l, n_ctx)
};
// MultiHeadSA of m new rows that attend to the earlier rows' keys and values as well:
//   head_i = Attention(X W_i^Q, [K_i; X W_i^K], [V_i; X W_i^V], Mask),  result Concat(head_1..A) W^O
//   X: m x H (rows t..t+m-1); K_i, V_i: t x D before the call, (t+m) x D after it (X's rows
//   appended); Mask: m x (t+m), rows t..t+m-1 of the layer's mask. With t = 0 it is MultiHeadSA.
template <typename T>
Tensor<T> MultiHeadSA_cached(const Tensor<T>& X, const Tensor<T>& Mask, const MultiHeadSAParams<T>& p, KVLayer<T>& kv);
template <typename T>
void kv_init(const Config& c, KVCache<T>& cache);
template <typename T>
Tensor<T> model_step(const Config& c, const Params<T>& p, int x, KVCache<T>& kv);

// Generation from a GPT-variant checkpoint: next token ~ Softmax(z / temperature) restricted to the
// top_k most likely (top_k 0 = all; temperature 0 = greedy), then to the nucleus of probability
// top_p (1 = all; formulas §32). The context is the last n_ctx tokens: while the text fits in n_ctx
// the key/value cache is used, after that the window slides and each token runs model_forward on
// the last n_ctx tokens. stop, if given, is asked after each new token and ends the generation
// when it says so.
template <typename T>
std::vector<int> generate(const Config& c, const Params<T>& p, std::vector<int> prompt, int new_tokens,
                          double temperature, int top_k, Rng& rng, double top_p = 1.0,
                          const std::function<bool(const std::vector<int>&)>& stop = nullptr);
// The next token's distribution after x (GPT variants), without drawing: P = Softmax(z), z the
// last row of model_forward on the last n_ctx tokens of x (what generate draws from at
// temperature 1, formulas §32), computed in double; the k most likely ids with their
// probabilities, most likely first (ties: the lower id first), min(k, V) of them.
struct TokenProb {
    int id = 0;
    double p = 0;
};
template <typename T>
std::vector<TokenProb> next_token_probs(const Config& c, const Params<T>& p, const std::vector<int>& x, int k);

// ################################################################################################
// PART II. THE MACHINERY: the fast product, text, model files, runs, teaching, the platform
// ################################################################################################
// ================================================================================================
// THE FAST MATRIX PRODUCT: the memory pool (Storage) and gemm are declared in Part I, where Tensor
// and the matrix products need them.
// ================================================================================================

// ================================================================================================
// TEXT: numbers read and written, JSON, UTF-8, the character vocabulary, GPT-2's byte-level BPE
// and learning one, the tokenizers of the released GPT-1 and BERT, the tokenizer of a checkpoint,
// the tokenizer's files for Hugging Face.
// ================================================================================================
// ---- Numbers, read from text and written as text ------------------------------------------------
// Every number read from a flag, a metadata value or a file: the whole text is the number (decimal,
// nothing after it; read_unsigned takes digits alone). The caller words the error.
enum class NumberRead { ok, not_a_number, out_of_range };
NumberRead read_integer(const std::string& s, long long& v);
NumberRead read_unsigned(const std::string& s, uint64_t& v);
NumberRead read_real(const std::string& s, double& v);  // out_of_range: not finite
// The same, throwing Error("WHAT: 'TEXT' is not an integer" / "... an unsigned integer" / "... a number").
int parse_int(const std::string& s, const std::string& what);  // |v| <= 2^31 - 1
long long parse_i64(const std::string& s, const std::string& what);
uint64_t parse_u64(const std::string& s, const std::string& what);
double parse_double(const std::string& s, const std::string& what);
// Written: 17 significant digits (reads back as the same double: metadata, logs); the shortest text
// that reads back as the same double; a count for an error message (whole digits below 1e18).
std::string full_digits(double v);
std::string shortest_double(double v);
std::string whole_number(double v);

// A minimal JSON reader (for safetensors headers and tokenizer files).
struct Json {
    enum Type { null, boolean, number, string, array, object } type = null;
    bool b = false;
    double num = 0;
    std::string str;
    std::vector<Json> arr;
    std::vector<std::pair<std::string, Json>> obj;
    const Json* get(const std::string& key) const;  // nullptr if absent or not an object
};
Json parse_json(const std::string& text);  // throws Error with the byte offset
std::string json_escape(const std::string& s);  // a byte that is not UTF-8 becomes U+FFFD
// UTF-8: the length (1..4) of the valid sequence at byte i and its code point, or 0 if invalid.
int utf8_next(const std::string& text, std::size_t i, uint32_t& cp);
// cp appended to out as UTF-8 (1 to 4 bytes): the one encoder, as utf8_next is the one decoder.
void utf8_append(std::string& out, uint32_t cp);
// "character '€' (U+20AC) at byte 16 (line 1, column 17) of WHERE" for the character holding byte
// `offset` (the one message of every "not in the vocabulary" error).
std::string describe_char_at(const std::string& text, std::size_t offset, const std::string& where);

// A character-level vocabulary: the distinct bytes of a text, sorted; id = index. BERT/RoBERTa add
// three special tokens after them ([CLS]/<s>, [SEP]/</s>, [MASK]/<mask>).
struct CharVocab {
    std::vector<unsigned char> chars;
    int id[256];
    CharVocab();
    static CharVocab from_text(const std::string& text);
    int size() const { return (int)chars.size(); }
    // Throws Error on an unknown character, naming it and where it is (describe_char_at).
    std::vector<int> encode(const std::string& text, const std::string& where = "the text") const;
    std::string decode(const std::vector<int>& ids) const;   // special ids become "[CLS]", "[SEP]", "_"
    std::string to_metadata() const;                         // "10,32,33,..." byte values
    static CharVocab from_metadata(const std::string& s);
};

// ---- GPT-2's byte-level BPE ---------------------------------------------------------------------
// GPT-2 paper, section 2.2; for the released weights and for vocabularies learnt with bpe.

// Text -> ids in three steps:
//   1. pre-tokenize: split the UTF-8 text into pieces with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (the first alternative that matches at the current position, as long as it can be; a run of
//      white space before more text leaves its last character to start the next piece, " word");
//   2. each piece's bytes become symbols: byte b -> one printable character bytes_to_unicode(b)
//      (the printable bytes stand for themselves, the 68 others for U+0100 + k in byte order, so a
//      space is "Ġ", a newline "Ċ");
//   3. BPE: repeatedly merge the adjacent pair of symbols with the lowest rank in the merge list
//      (every occurrence, left to right) until no pair is in the list; each symbol is a token id.
// decode maps ids back to their symbols and the symbols back to bytes. The ids match OpenAI's
// encoder (encode treats "<|endoftext|>" as plain text; its id is eot).
struct BPE {
    std::unordered_map<std::string, int> encoder;  // symbol string (UTF-8) -> id
    std::vector<std::string> decoder;              // id -> the raw bytes it stands for
    std::unordered_map<std::string, int> ranks;    // "A B" (two symbols) -> merge rank, 0 first
    int eot = -1;                                  // id of "<|endoftext|>", -1 if absent
    int size() const { return (int)decoder.size(); }
    // throws Error on invalid UTF-8; progress, if given, is called after each piece with the bytes
    // of text done and the ids so far
    std::vector<int> encode(const std::string& text,
                            const std::function<void(std::size_t bytes, std::size_t ids)>& progress = {}) const;
    std::string decode(const std::vector<int>& ids) const;  // throws Error on an id outside 0..size-1
    std::vector<std::string> bpe(const std::string& piece) const;  // step 3 for one piece: its symbols
};
// From the contents of encoder.json ({"token": id, ...}, ids 0..N-1 each once) and vocab.bpe (a
// "#version" line, then one merge "A B" per line); throws Error naming what is malformed.
BPE make_bpe(const std::string& encoder_json, const std::string& vocab_bpe);
BPE load_bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
// RoBERTa's tokenizer (kind roberta-bpe): GPT-2's byte-level BPE with RoBERTa's vocab.json and
// merges.txt; <s>, <pad>, </s>, <unk>, <mask> written in the text are those tokens, and <mask> takes
// the white space before it along (Hugging Face's lstrip): "is <mask>." -> "Ġis" <mask> ".".
// No <s> ... </s> are added.
std::vector<int> roberta_encode(const BPE& bpe, const std::string& text);
// Step 1 alone: the pieces (byte strings) of GPT-2's pattern; throws Error on invalid UTF-8.
std::vector<std::string> gpt2_pretokenize(const std::string& text);
// Step 2's alphabet: the UTF-8 of the character that stands for byte b.
std::string bytes_to_unicode(unsigned char b);

// ---- Learning a byte-level BPE vocabulary (bpe) ----
// Learns the two files of GPT-2's tokenizer (encoder.json, vocab.bpe) from text, with the rule of
// Hugging Face's BpeTrainer behind a ByteLevel pre-tokenizer (add_prefix_space=false, use_regex=true):
//   1. count: each line (its newline kept) loses the --special tokens, the rest is cut into pieces by
//      gpt2_pretokenize, and identical pieces are counted once with their number of occurrences;
//   2. the 256 byte symbols are ids 0..255, numbered in code-point order of their characters (the
//      order of GPT-2's encoder.json: "!" is 0, "Ġ" (the space) is 220);
//   3. each merge joins the adjacent pair of symbols with the largest count (occurrences inside the
//      pieces, weighted by the pieces' counts); among equal counts the smallest (left id, right id)
//      wins. Inside a piece the pair is merged left to right without overlap ("aaa" -> "aa" "a").
//      The new symbol takes the next id (Hugging Face's rule would keep the id of a string made
//      before from other halves; the code follows it, though with plain byte symbols each string
//      is always made by one pair: see docs/bpe.md);
//   4. stop after `merges` merges, or when the most frequent pair occurs fewer than min_count times;
//      the special tokens then take the next ids.
// Counting is incremental as in Hugging Face's trainer: each pair keeps the pieces where it was
// formed, a merge rewrites only those pieces, and a heap holds (count, pair) entries whose stale
// counts are corrected when they come to the top.
struct BpePieces {
    std::unordered_map<std::string, long long> count;  // piece (raw bytes) -> occurrences
    long long pieces = 0, bytes = 0, lines = 0;        // totals over everything counted
};
// Why s cannot be a --special token ("" if it can): it must be printable ASCII without spaces and a
// form the GPT-2 loader keeps out of the merges: <|NAME|>, or RoBERTa's <s> <pad> </s> <unk> <mask>.
std::string bpe_special_problem(const std::string& s);
// Counts the pieces of text (lines up to and with each "\n"; the last one may lack it). where names
// the text in errors: invalid UTF-8 is an error giving where, the line and the byte offset.
void bpe_count_text(BpePieces& p, const std::string& text, const std::vector<std::string>& specials = {},
                    const std::string& where = "the text");
// The same for a file, streamed (memory follows the distinct pieces, not the file); progress, if
// given, is called every few MB with the bytes of this file read so far.
void bpe_count_file(BpePieces& p, const std::string& path, const std::vector<std::string>& specials,
                    const std::function<void(long long bytes)>& progress = {});
struct BpeMerge {
    int left, right, id;  // ids of the two halves and of the symbol they make
    long long count;      // occurrences of the pair when it was merged
};
struct BpeLearnt {
    std::vector<std::string> tokens;  // id -> raw bytes: 0..255 the bytes, then merged symbols, then specials
    std::vector<BpeMerge> merges;     // in the order learnt
    int specials = 0;                 // the last `specials` tokens
};
struct BpeLearnOptions {
    long long merges = 0;     // at most this many (> 0)
    long long min_count = 1;  // stop when the most frequent pair occurs fewer times (>= 1)
    std::vector<std::string> specials;
    // called after each merge with the result so far (for a progress line)
    std::function<void(const BpeLearnt&)> progress;
};
BpeLearnt bpe_learn(const BpePieces& pieces, const BpeLearnOptions& o);
// The files: encoder.json ({"symbols": id, ...} in id order) and vocab.bpe (BPE_VOCAB_HEADER, then
// one merge "A B" a line). A pair merged twice (possible only after a reused id) is written once,
// at its last place, as Hugging Face's trainer stores it.
extern const char* const BPE_VOCAB_HEADER;  // "#version: 0.2 written by transformer bpe"
std::string bpe_encoder_json(const BpeLearnt& b);
std::string bpe_vocab_bpe(const BpeLearnt& b);
// Throws Error unless --out DIR can take the files: DIR exists (writable) or can be created, and any
// encoder.json or vocab.bpe in it was written by this command (vocab.bpe starts with
// BPE_VOCAB_HEADER; an encoder.json without such a vocab.bpe is not ours). inputs may not be replaced.
void bpe_check_out_dir(const std::string& dir, const std::vector<std::string>& inputs);
// DIR/encoder.json and DIR/vocab.bpe through AtomicFile (DIR created if missing), after bpe_check_out_dir.
void bpe_write(const std::string& dir, const BpeLearnt& b, const std::vector<std::string>& inputs);

// The files of a byte-pair encoding, read one way for GPT-2, GPT-1 and RoBERTa: the merges of
// vocab.bpe / merges.txt in order ("A B" lines; a "#version" first line, empty lines and CR line
// ends skipped; FILE names the file in the error for a line that is not two symbols), and an
// encoder (encoder.json, vocab.json: {"symbol": id} with the ids 0..N-1, each once) as the symbol of
// each id, its pairs added to `encoder` (WHAT names an entry in an error: "token", "symbol").
struct MergeLine {
    std::string a, b;
    int line_no;  // 1-based
};
std::vector<MergeLine> read_merges(const std::string& text, const std::string& file);
std::vector<std::string> read_encoder(const std::string& json, const std::string& file, const std::string& what,
                                      std::unordered_map<std::string, int>& encoder);

// ---- The tokenizers of the released GPT-1 and BERT ----------------------------------------------
// BERT's normaliser and pre-tokeniser, then
// GPT-1's BPE (end-of-word suffix "</w>") or BERT's WordPiece (continuation prefix "##"), as Hugging
// Face's fast tokenizers for openai-gpt and bert-base-uncased do it; llm.c's token files; the one
// Tokenizer of the commands.

// BERT's normaliser (BertNormalizer with lowercase, hence strip_accents) on UTF-8 text, in order:
//   1. clean: drop U+0000, U+FFFD and every character of category Cc, Cf, Cn, Co or Cs except \t \n \r;
//      each remaining White_Space character becomes ' ';
//   2. CJK: ' ' before and after every CJK ideograph (the ranges of BERT's _is_chinese_char);
//   3. strip accents: canonical decomposition (NFD), then drop the nonspacing marks (Mn);
//   4. lower-case, one code point at a time (Unicode's mapping; U+0130 -> "i" U+0307).
// Tables: Unicode 14.0 (Python's unicodedata), every canonical decomposition (Hangul by arithmetic).
// Not done: marks are not reordered by their
// combining class (it cannot change what is left once the Mn marks are dropped, except for the
// few spacing marks with a class). Throws Error on invalid UTF-8.
std::string bert_normalize(const std::string& text);
// BERT's pre-tokeniser on normalised text: split at white space (dropped) and around every
// punctuation character (ASCII 33-47, 58-64, 91-96, 123-126, and category P*), which becomes a
// word of its own: "hi,there!!" -> "hi" "," "there" "!" "!".
std::vector<std::string> bert_pretokenize(const std::string& normalized);
// Both, then the words (what GPT-1's BPE and WordPiece see).
std::vector<std::string> bert_words(const std::string& text);

// GPT-1's BPE: each word's characters are its first symbols, the last one with "</w>" appended
// ("cat" -> c a t</w>); a symbol not in the vocabulary is "<unk>"; then the merges (lowest rank
// first, as GPT-2's). "<unk>" written in the text is the token <unk> itself. decode joins the
// symbols and turns each "</w>" into a space (none after the last word).
struct GPT1BPE {
    std::unordered_map<std::string, int> encoder;  // symbol -> id ("the</w>" -> 481)
    std::vector<std::string> decoder;              // id -> symbol
    std::unordered_map<std::string, int> ranks;    // "A B" -> merge rank, 0 first
    int unk = -1;                                  // id of "<unk>"
    int size() const { return (int)decoder.size(); }
    std::vector<std::string> bpe(const std::string& word) const;  // one word -> its symbols
    std::vector<int> encode(const std::string& text) const;       // throws Error on invalid UTF-8
    std::string decode(const std::vector<int>& ids) const;       // throws Error on an id outside 0..size-1
};
// From encoder_bpe_40000.json (vocab.json: {"symbol": id}, ids 0..N-1 each once, "<unk>" among them)
// and vocab_40000.bpe (merges.txt: an optional "#version" line, then "A B" per line; both halves and
// their concatenation must be symbols); throws Error naming what is malformed.
GPT1BPE make_gpt1_bpe(const std::string& encoder_json, const std::string& vocab_bpe);
GPT1BPE load_gpt1_bpe(const std::string& encoder_json_path, const std::string& vocab_bpe_path);

// llm.c's token files (dev/data/*.bin, e.g. its tiny Shakespeare and FineWeb in GPT-2's tokens):
// a header of 256 little-endian int32 (magic 20240520, version 1, the number of tokens N, the rest
// 0), then N uint16 token ids. A text tokenized once is read by train and eval in no time. This
// program's own token files carry the text "written by transformer" at byte 64 of the header
// (where llm.c's readers see zeros they ignore), so that tokenize --out replaces only its own.
constexpr int32_t TOKEN_FILE_MAGIC = 20240520;
bool is_token_file(const std::string& bytes);      // starts with the magic
bool is_own_token_file(const std::string& bytes);  // and carries this program's mark
// The ids of a token file; throws Error naming `name` on a short header, another version, a size
// that is not the header's 1024 bytes plus 2 N, or an id >= V (the tokenizer's size).
std::vector<int> parse_token_file(const std::string& bytes, const std::string& name, int V = 65536);
// The file's bytes; throws Error if an id is outside 0..65535 (uint16).
std::string token_file_bytes(const std::vector<int>& ids);

// BERT's WordPiece (uncased): each word, if longer than 100 characters [UNK], else split greedily
// into the longest pieces in the vocabulary from the left, pieces after the first written "##...";
// a word with a part no piece matches is [UNK] as a whole. The vocabulary's special tokens [PAD],
// [UNK], [CLS], [SEP], [MASK] written in the text (exactly so) are those tokens. No [CLS]/[SEP]
// are added. decode joins the tokens with spaces, a "##" piece glued to the one before it.
struct WordPiece {
    std::unordered_map<std::string, int> vocab;  // token -> id (line number - 1)
    std::vector<std::string> tokens;             // id -> token
    int unk = -1, cls = -1, sep = -1, mask = -1, pad = -1;
    int max_chars = 100;
    int size() const { return (int)tokens.size(); }
    std::vector<int> wordpiece(const std::string& word) const;  // one word -> its ids
    std::vector<int> encode(const std::string& text) const;     // throws Error on invalid UTF-8
    std::string decode(const std::vector<int>& ids) const;
};
// From vocab.txt: one token per line (a final newline optional); [UNK] is required; an empty line,
// a token given twice or invalid UTF-8 is an error naming the line.
WordPiece make_wordpiece(const std::string& vocab_txt);
WordPiece load_wordpiece(const std::string& vocab_txt_path);

// One tokenizer for the commands and for checkpoints (see "The tokenizer of a checkpoint" below).
struct Tokenizer {
    std::string kind;  // "" (none recorded), "char", "gpt2-bpe", "gpt1-bpe", "roberta-bpe", "bert-wordpiece"
    CharVocab chars;
    BPE bpe;              // gpt2-bpe, roberta-bpe
    GPT1BPE gpt1;         // gpt1-bpe
    WordPiece wordpiece;  // bert-wordpiece
    std::string encoder_json, vocab;  // the subword kinds' files, as read (vocab: vocab.bpe or vocab.txt)
    int size() const;                 // ids 0..size-1 (char: without BERT's 3 specials)
    std::vector<int> encode(const std::string& text, const std::string& where = "the text") const;
    std::string decode(const std::vector<int>& ids) const;
    std::map<std::string, std::string> metadata() const;  // what a checkpoint records
};
// A subword tokenizer from its files' contents (kind named; where: for errors).
Tokenizer make_tokenizer(const std::string& kind, const std::string& encoder_text, const std::string& vocab_text,
                         const std::string& where);
// kind "" recognises it from the files: a vocabulary alone is WordPiece's; with an encoder, GPT-1's
// has "</w>" symbols, GPT-2's the byte symbols ("\u0120"), RoBERTa's those and "<mask>". A kind named that the files are not is
// an error saying what they are.
Tokenizer load_tokenizer(const std::string& kind, const std::string& encoder_path, const std::string& vocab_path);
// Whether a tokenizer kind goes with bert/roberta models (bert-wordpiece, roberta-bpe) rather than GPTs.
bool is_bidirectional_tokenizer(const std::string& kind);
// The ids of [CLS], [SEP], [MASK] in a bert-wordpiece or roberta-bpe vocabulary (<s>, </s>, <mask>),
// into c.cls_id, c.sep_id, c.mask_id (and, for a roberta model, [PAD] or <pad> into c.pad_id);
// throws Error for other kinds or a vocabulary without them.
void subword_special_ids(const Tokenizer& t, Config& c);
const char* tokenizer_title(const std::string& kind);  // "GPT-2's byte-level BPE", ..., "characters"
// The kind the files are ("gpt2-bpe", ...), from their contents.
std::string tokenizer_kind_of(const std::string& encoder_text, const std::string& vocab_text);

// ---- The tokenizer of a checkpoint --------------------------------------------------------------
// Which text <-> ids mapping a model was trained with, kept in its
// metadata so that sample and eval need no tokenizer flags.

// Recorded in the metadata under a kind string:
//   no "tokenizer", "vocab"   characters: "vocab" = CharVocab::to_metadata() (every older checkpoint)
//   "tokenizer" = KIND        a subword tokenizer (gpt2-bpe, gpt1-bpe, roberta-bpe, bert-wordpiece: see the
//                             TOKENIZERS section above) with its files whole, so a moved checkpoint
//                             still samples: "tokenizer.encoder_json" and "tokenizer.vocab_bpe" for
//                             the BPEs (encoder.json and vocab.bpe; about 1.5 MB of header for GPT-2's
//                             50257 tokens), "tokenizer.vocab_txt" for WordPiece
// The Tokenizer struct itself (one for every kind) is declared with the tokenizers above.
struct Tokenizer;
Tokenizer gpt2_tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
// The tokenizer a checkpoint's metadata records (kind "" if none: released weights); throws
// Error naming `path` on an unknown kind or a damaged record.
Tokenizer tokenizer_of(const std::map<std::string, std::string>& metadata, const std::string& path);
// tokenizer.encode with a progress line on stderr for a large text (BPE of a few MB takes seconds).
// A text that is not UTF-8 is an Error naming `where` (a quoted file name or a flag) and the byte offset.
std::vector<int> encode_with_progress(const Tokenizer& t, const std::string& text, const std::string& where, bool quiet);

// A character-level model's tokenizer.json names this as its unk_token, which is not in its
// vocabulary: the tokenizers library then refuses a text with a byte outside the vocabulary
// ("Unk token `...` not found in the vocabulary"), as `transformer tokenize` does, instead of
// dropping the byte.
extern const char* const HF_CHAR_OUTSIDE;
// The tokenizer's files in the formats Hugging Face's classes read, as (name, contents):
//   gpt2-bpe (GPT-2's or a learnt byte-level BPE): vocab.json, merges.txt (GPT2Tokenizer)
//   gpt1-bpe: vocab.json, merges.txt with "</w>" (OpenAIGPTTokenizer)
//   roberta-bpe: vocab.json, merges.txt (RobertaTokenizer, with <s> <pad> </s> <unk> <mask>)
//   bert-wordpiece: vocab.txt (BertTokenizer, lower-casing and stripping accents, as bert_normalize)
//   char: none of these (no slow class reads characters)
// and for every kind tokenizer.json (the `tokenizers` library's format: the same normaliser,
// pre-tokeniser and model; characters as a byte-level model without merges, each byte's symbol
// mapped to its id) and tokenizer_config.json (the class AutoTokenizer builds, the special tokens).
// merges.txt always starts with a "#version" line and ends with a newline (the slow classes drop
// the first and the last line). Empty for a tokenizer of no kind (released weights read alone).
struct Tokenizer;
std::vector<std::pair<std::string, std::string>> hf_tokenizer_files(const Tokenizer& t, const Config& c);

// ================================================================================================
// MODEL FILES: every output checked and written by one durable writer, safetensors (8-byte
// little-endian header size N, N bytes of JSON header, raw little-endian data; float32 tensors,
// the configuration as strings in "__metadata__"), checkpoints, load_model and its Hugging Face
// imports, the export to the Hugging Face classes (GPT2LMHeadModel, OpenAIGPTLMHeadModel,
// BertForMaskedLM, RobertaForMaskedLM, ...).
// ================================================================================================
// ---- Files: every output is checked before the work starts and written by one durable writer ----
// The kinds of file this program writes. Each is recognisable as this program's own (a mark in the
// file, or its format), and only such files, or empty ones, are ever replaced.
enum class OutputKind { checkpoint, csv_log, svg_plot, task_file, token_file, in_own_dir, html_page };  // in_own_dir: see check_output_dir
struct OutputFile {
    std::string path, role;  // role names it in errors: "--out", "the log"
    OutputKind kind;
};
struct InputFile {
    std::string path, role;       // "--data", "--resume"
    bool may_be_replaced = false;  // --resume writing over the checkpoint it resumed
};
// Throws Error, before any work, unless every output can be written: its directory exists and is
// writable, it is not a directory, FIFO or device (a symlink is followed: its target is written),
// an existing file is one this program wrote as that kind (or is empty), no two outputs are the same
// file, and no output is an input.
void check_outputs(const std::vector<OutputFile>& outputs, const std::vector<InputFile>& inputs = {});
// The file a write to path replaces (symbolic links followed).
std::string resolve_output_path(const std::string& path);
// The one writer: a unique temporary file beside the target (".NAME.tmp.XXXXXX"), every write and
// the close checked, fsync, rename over the target, fsync of the directory. Until commit() the
// target is untouched; on any failure, on destruction without commit, and on SIGINT/SIGTERM/SIGHUP
// the temporary is removed. Two writers of the same path both succeed; the last rename wins whole.
class AtomicFile {
public:
    explicit AtomicFile(const std::string& path);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    void write(const void* data, std::size_t n);
    void commit();

private:
    std::string target_, tmp_;
    int fd_ = -1;
    bool committed_ = false;
    std::vector<char> buf_;
    void flush_buffer();
    [[noreturn]] void fail(const std::string& what);
};
// Whole files: read, and write through AtomicFile.
std::string read_file(const std::string& path);
// The checks every command makes of the files it reads, one wording each:
//   open_input: opened for reading, or an Error "cannot open 'F': ..." / "cannot read 'F': it is a
//     directory, not a file" (fopen opens a directory on Linux; reading it then fails);
//   require_text: an Error "'F' looks binary, not text: ..." when more than 1% of the bytes are
//     control bytes other than tab, LF and CR.
std::FILE* open_input(const std::string& path);
void require_text(const std::string& text, const std::string& path);
// A text with CR bytes (Windows line ends, CR LF): the one-line warning train and tokenize print on
// stderr, saying what it means (each CR is a character, with tokens of its own) and how to
// convert; "" for a text without CR. The text is used as its bytes say either way.
std::string line_end_warning(const std::string& text, const std::string& path);
void write_file_atomic(const std::string& path, const std::string& bytes);
// DIR/NAME with one slash between them, however many DIR ends with ("hf/" and "hf" give
// "hf/model.safetensors"; "/" gives "/NAME").
std::string path_in_dir(const std::string& dir, const std::string& name);
// A directory of outputs written as one: each file is staged under a hidden name beside its place
// (".NAME.staged.PID", through AtomicFile) and commit() renames them all into place, in the order
// staged, with SIGINT, SIGTERM and SIGHUP held off until it is done. Until then nothing in the
// directory has changed but the staged files, and an error (the destructor without commit) or one
// of those signals removes them, and removes the directory itself when this object created it
// (never one that existed before). One at a time in a process.
class StagedDir {
public:
    explicit StagedDir(const std::string& dir);  // creates dir when it does not exist
    ~StagedDir();
    StagedDir(const StagedDir&) = delete;
    StagedDir& operator=(const StagedDir&) = delete;
    // The path to write NAME's contents to (registered for removal before it exists).
    std::string stage(const std::string& name);
    // Every staged file renamed to its name; then `remove`'s names that exist (an earlier run's
    // files this one does not write) are removed.
    void commit(const std::vector<std::string>& remove = {});
    bool created() const { return created_; }
    // An error message with each staged path replaced by the file it stands for, and what the
    // directory holds now ("nothing written", "--out unchanged", or which files are new).
    std::string failure(std::string message) const;

private:
    std::string dir_;
    std::vector<std::pair<std::string, std::string>> staged_;  // (staged path, final path)
    bool created_ = false, committed_ = false;
};
// The program as the user ran it (main sets it from argv[0], quoted for the shell when needed;
// "transformer" until then): the first word of every command line the program prints.
std::string& program_name();

struct SafeTensors {
    std::map<std::string, std::string> metadata;
    std::vector<std::pair<std::string, Tensor<float>>> tensors;  // in file order
    const Tensor<float>* find(const std::string& name) const;
};
// Written through AtomicFile: a crash or a full disk never leaves a half-written file.
void save_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                      const std::vector<std::pair<std::string, const Tensor<float>*>>& tensors);
SafeTensors load_safetensors(const std::string& path);  // throws Error naming what is wrong

std::map<std::string, std::string> config_metadata(const Config& c);
Config config_from_metadata(const std::map<std::string, std::string>& m);
// A model checkpoint: the config, every parameter under its name, and extra tensors/metadata
// (e.g. the optimiser state "adam.m.<name>", "adam.v.<name>" of a training checkpoint).
void save_model(const std::string& path, const Config& c, Params<float>& p,
                const std::map<std::string, std::string>& extra_metadata = {},
                const std::vector<std::pair<std::string, const Tensor<float>*>>& extra_tensors = {});
struct LoadedModel {
    Config config;
    Params<float> params;
    SafeTensors file;  // metadata and the tensors that are not parameters
};
// Every parameter must be present with its shape; any other tensor is an error unless its name
// starts with one of allowed_extra_prefixes. A file without our metadata whose tensors are named
// as in the released GPT-2 (wte.weight, h.0.attn.c_attn.weight, ...: a Hugging Face
// model.safetensors) is read as a gpt2 model with gelu_tanh and attention biases (see
// import_hf_gpt2 in transformer.cpp for the mapping of names). Likewise a Hugging Face GPT-1 file
// (tokens_embed.weight, ...: a gpt model, import_hf_openai_gpt) and a BERT file
// (bert.embeddings.word_embeddings.weight, ...: a bert model with emb_ln, mlm_head and pooler as
// the file has them, import_hf_bert; the next-sentence head goes to file.tensors).
LoadedModel load_model(const std::string& path, const std::vector<std::string>& allowed_extra_prefixes = {});
// `strip`: the checkpoint at `in` written to `out` without AdamW's m and v and the state that
// resuming needs (adam.t, train.rng), marked "weights_only": a third of the file, read by sample,
// eval, fill, predict, export, finetune and --init-from alike; --resume refuses it. Returns the
// sizes of the two files in bytes.
std::pair<long long, long long> strip_checkpoint(const std::string& in, const std::string& out);

// Export: DIR/model.safetensors and DIR/config.json as the Hugging Face class that holds the model
// exactly reads them, the inverse of the imports in load_model (one table of names per layout,
// shared with them: see "Released GPT-1, BERT and RoBERTa weights" in transformer.cpp):
//   gpt2    -> GPT2LMHeadModel (model_type gpt2; Conv1D: in x out, as ours; c_attn joins the heads:
//              [W_Q^1..W_Q^A | W_K^1..W_K^A | W_V^1..W_V^A], head i in columns i*D .. i*D+D-1 of each third)
//   gpt     -> OpenAIGPTLMHeadModel (model_type openai-gpt; the same Conv1D layout, post-LN, no ln_f;
//              afn relu or gelu, which is the tanh form there; its FFN is always 4 n_embd wide)
//   bert    -> BertForMaskedLM with the masked-LM head (Config::mlm_head), else BertModel (X^(L); only
//              with a pooler, Config::pooler, which BertModel always has);
//              Linear layers out x in (ours transposed); token_type_embeddings = [w_A; w_B]
//   roberta -> RobertaForMaskedLM / RobertaModel likewise; position_embeddings = zeros up to the
//              <pad> row pad_id, w_pad there, then W_p (pad_token_id -1 when the model has no <pad>:
//              Hugging Face then numbers positions from row 0); one token type of zeros
// Attention biases the model lacks are written as zeros (every one of these classes has them);
// lm_head / decoder weights are tied to the word embeddings and not written.
// Why c cannot be exported ("" if it can): D A = H, no fine-tuning head W_y, no XLNet vector w,
// and per variant: gpt's activation (relu or gelu_tanh) and F = 4 H; bert's and roberta's
// embedding LayerNorm (Config::emb_ln, which every Hugging Face BERT applies) and, without the
// masked-LM head, a pooler (BertModel / RobertaModel always build one, which would otherwise load
// with random weights); gpt3 never (its Mask^ST layers have no exact Hugging Face class:
// docs/released-weights.md says why).
std::string hf_export_problem(const Config& c);
// The class export writes for c: "GPT2LMHeadModel", "OpenAIGPTLMHeadModel", "BertForMaskedLM", ...
std::string hf_architecture(const Config& c);
std::string hf_gpt2_config_json(const Config& c, int eos_id);  // eos_id -1: GPT2Config's default
// config.json for any exportable c: eos_id as above (gpt2), pad_token_id for bert (the vocabulary's
// [PAD], else 0; roberta's is c.pad_id).
std::string hf_export_config_json(const Config& c, int eos_id = -1, int bert_pad_id = 0);
// Throws Error unless dir can take a command's files `names`: a name whose parent directory exists
// and is writable (the caller creates it), an empty writable directory, or one that an earlier run
// of the command wrote: it holds none but `names`, and its file `marker` carries this program's mark
// (file_has_mark). A directory of released weights, or of anything else, is never written into.
void check_output_dir(const std::string& dir, const std::string& role, const std::vector<std::string>& names,
                      const std::string& marker);
// The first 4 KB of the file hold this program's mark ("written_by": "transformer" in a JSON file,
// the words "written by transformer" in a text).
bool file_has_mark(const std::string& path);
// The files export may write into its directory (the tokenizer's as its kind has them; an earlier
// export's files that this one does not write are removed).
extern const std::vector<std::string> HF_EXPORT_FILES;

// What export wrote: the class, model_type and the files (names in DIR), in order.
struct HfExport {
    std::string architecture, model_type;
    std::vector<std::string> files;
};
// Writes DIR/model.safetensors (metadata: "format" = "pt" plus extra_metadata, e.g. the tokenizer,
// so that loading the file gives back the tokenizer too), DIR/config.json and the tokenizer's files
// (hf_tokenizer_files of the tokenizer extra_metadata records), each through AtomicFile; DIR is
// created if missing, and checked with check_output_dir. Throws Error with hf_export_problem.
// input: the checkpoint exported, which no output may overwrite.
HfExport export_hf(const std::string& dir, const Config& c, const Params<float>& p,
                   const std::map<std::string, std::string>& extra_metadata = {}, const std::string& input = "");

// ================================================================================================
// RUNS: the built-in tasks, the memory a run needs, the plot, one training loop for every objective,
// starting from a checkpoint, fine-tuning (formulas §28), bench
// ================================================================================================
// The built-in task: 3-digit addition "123+456=" -> the sum's 4 digits, least significant first
// (so each digit depends only on digits already seen: 123+456=9750). One problem = 13 characters
// including the newline. A tenth of the problems, chosen by a hash of the pair
// (Rng(a * 1000 + b).next() % 10 == 0), is held out for evaluation.
struct AdditionTask {
    static const std::string alphabet;  // "\n+0123456789="
    static std::string problem(int a, int b);      // "123+456=9750\n"
    static bool held_out(int a, int b);
    static int prompt_len() { return 8; }          // "123+456="
    static int answer_len() { return 4; }
};

// The held-out accuracy of a model on the built-in addition task (greedy answers, all 4 digits right).
double addition_accuracy(const Config& c, const Params<float>& p, const CharVocab& vocab, int problems, uint64_t seed);

// Bytes the training loop holds for a model: parameters, gradients, AdamW's m and v (4 bytes per
// float each), and an estimate of one step's activations (forward caches and logits at B x n; a
// masked LM de-embeds about 15% of its rows).
struct TrainMemory {
    double params = 0, grads = 0, adam = 0, activations = 0;
};
TrainMemory train_memory(const Config& c, long long B, int n);
// The memory this process can have, in bytes: the least of the machine's physical memory, its
// cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes) and the address-space limit (ulimit -v);
// `source` names the one that sets it.
struct MemoryLimit {
    double bytes = 0;
    std::string source;
};
MemoryLimit memory_limit();
// A run is refused before any work when its estimate (`need` bytes, `detail` says of what) exceeds
// `limit`: the error names the command, the estimate, the limit and its source, the flags that
// drive the estimate (`drivers`, e.g. "--batch 64 --block 8192") and --no-memory-check, which lets
// the run start anyway (check = false skips the test).
void require_memory(const std::string& command, double need, const std::string& detail, const std::string& drivers,
                    const MemoryLimit& limit, bool check = true);

// A loss-curve plot (SVG, written by hand): train loss per step and val loss at its steps.
std::string loss_svg(const std::vector<std::pair<long long, double>>& train,
                     const std::vector<std::pair<long long, double>>& val, const std::string& title);

// Everything `transformer train` takes; the defaults are the main job (make run).
struct TrainOptions {
    std::string data;            // text file; empty = the built-in addition task
    std::string val_data;        // --val: the validation text (all of it); empty = the last 10% of data
    std::string model = "gpt2";  // variant
    int layers = 2, heads = 4, embd = 64, ffn = 0, block = 0, batch = 32;  // ffn 0 = 4H, block 0 = auto
    int accum = 1;  // gradient accumulation: each step sums the gradients of `accum` batches of `batch`
                    // (nanoGPT's gradient_accumulation_steps), so a step sees accum x batch sequences
    long long steps = 3000, warmup = 100, eval_every = 250, eval_steps = 20, save_every = 0, log_every = 100;
    long long stop_at = 0;       // stop (and save) after this step; 0 = run to `steps`
    double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, grad_clip = 1.0;
    double dropout = 0.1;
    bool gpt2_init = false;      // scale_residual_init after init_params
    bool attn_bias = false;      // Config::attn_bias
    // The released BERT's additions on a new bert or roberta (formulas §23): the embedding LayerNorm
    // (Config::emb_ln) and the masked-LM head (Config::mlm_head, which brings emb_ln along: every
    // Hugging Face class with that head has both, so export can write the model exactly).
    bool emb_ln = false, mlm_head = false;
    std::string activation;      // empty: gelu_sigmoid (the GELU of formulas §13) for every variant
    uint64_t seed = 1337;
    std::string out = "model.safetensors";  // with resume: empty = overwrite the resumed file
    std::string resume;          // checkpoint to continue from (steps 0 = the checkpoint's)
    bool quiet = false;
    bool memory_check = true;  // refuse a run whose memory estimate exceeds memory_limit() (require_memory)
    std::string schedule = "cosine";  // after warmup: "cosine" (lr_schedule) or "linear" (lr_linear)
    std::string objective = "lm";     // "lm": next token / masked LM; "xlnet": XLNet's permutation objective (formulas §27)
    int predict = 0;                  // xlnet: positions predicted per sequence (the last K of z), 0 = n/6
    bool line_windows = false;        // text windows start at a newline, so each line of the text
                                      // begins at position 1, as a fine-tuning example does after
                                      // its start token (formulas §28)
    // Starting from a checkpoint's weights; GPT-2's tokenizer.
    std::string init_from;  // start from this checkpoint's weights (ours or a Hugging Face GPT-2 file);
                            // fresh optimiser. Its shape rules: layers, heads, embd, ffn 0 and model,
                            // activation "" mean "the file's" (main.cpp passes them so); a value that
                            // differs from the file is an error, as is gpt2_init or attn_bias the file lacks
    std::string encoder, bpe_vocab;  // a subword tokenizer's files (encoder.json + vocab.bpe, vocab.json + merges.txt, or vocab.txt alone)
};
// --line-windows: the offsets i where a training window may start, those with ids[i] == newline
// and a whole window (n inputs and their n next-token targets: n + 1 ids) from i on.
std::vector<int> line_window_starts(const std::vector<int>& ids, int newline, int n);
// Mean loss in nats per predicted token over a whole sequence of ids (evaluation: no dropout), in
// consecutive windows of n_ctx tokens. GPT variants predict every token after the first (a window
// holds n_ctx + 1 ids, the next window starts at its last one); BERT/RoBERTa predict the positions
// mlm_corrupt picks in each window, drawn from Rng(seed). *count, if given: the predicted tokens.
// cls_sep (BERT/RoBERTa read as in their pre-training): windows of n_ctx - 2 ids, each given as
// [CLS] window [SEP] (the special positions are never predicted).
// progress, if given, is called after each window with the windows done, their total and the mean
// loss so far.
using CorpusProgress = std::function<void(long long done, long long total, double mean)>;
template <typename T>
double corpus_loss(const Config& c, const Params<T>& p, const std::vector<int>& ids, uint64_t seed,
                   long long* count = nullptr, int window = 0,  // window 1..n_ctx: shorter windows (0 = n_ctx)
                   bool cls_sep = false, const CorpusProgress& progress = nullptr);

// XLNet's loss over a whole sequence of ids in consecutive windows of n_ctx tokens, each under
// `perms` random permutations (from Rng(seed)) predicting the last min(predict, window) positions
// in z: the mean -log P per predicted token. Needs a model with w (Config::xlnet).
template <typename T>
double xlnet_corpus_loss(const Config& c, const Params<T>& p, const std::vector<int>& ids, int predict, int perms,
                         uint64_t seed, long long* count = nullptr);

// The same model read left to right: z = the identity order, every position after the first of
// each window predicted from the ones before it, so the mean is the next-token loss a GPT's
// corpus_loss reports on the same text (the GPT objective against XLNet's, on one footing).
template <typename T>
double xlnet_left_to_right_loss(const Config& c, const Params<T>& p, const std::vector<int>& ids,
                                long long* count = nullptr);

struct TrainResult {
    long long steps_done = 0;
    std::vector<double> train_losses;  // per step, from the first step of this run
    double val_loss = -1;              // last evaluation (--eval-steps batches), -1 if none
    long long val_step = 0;            // the step of that evaluation
    double val_loss_split = -1;        // at the end: corpus_loss over the whole validation split (text data)
    double accuracy = -1;              // held-out task accuracy (built-in task), -1 otherwise
    double seconds = 0;
    double val_loss_before = -1;       // --init-from: the validation estimate of the starting weights
    int signal = 0;                    // SIGINT or SIGTERM stopped the run after step steps_done (saved), else 0
};
TrainResult train(const TrainOptions& opt);

// The one training loop (style: one loop, the objective passed in). What differs between `train`
// (next token or masked LM), `train --objective xlnet` and `finetune` is how a batch is drawn and
// its loss and gradient computed, and how the model is validated; run_training does the rest for
// all of them: the lr schedule, clipping, AdamW, the divergence checks, progress lines,
// checkpoints (with the optimiser and generator state), the CSV log and the SVG plot.
struct Objective {
    // One batch drawn from rng: returns its loss, adds its gradient to g (a step zeroes g, then
    // calls this --accum times); parts[j] receives the j-th part of the loss named in part_names (e.g. L1, L2).
    std::function<double(Params<float>& g, Rng& rng, std::vector<double>& parts)> step;
    // The validation loss (no dropout); `shown` may replace what the progress line prints after "val".
    std::function<double(const Params<float>& p, std::string& shown)> validate;
    std::vector<std::string> part_names;
    long long tokens_per_step = 0;  // of one batch, for the tokens/s of the progress line
    std::string title;              // of the plot
};
struct RunState {
    Config c;
    Params<float> p;
    AdamW adam;
    Rng rng;
    long long step0 = 0;  // steps already taken (resume)
    long long on_disk = -1;  // the step the file at --out holds, -1 = none
    std::string log_csv = "step,train_loss,val_loss,lr\n";
    std::map<std::string, std::string> meta;  // saved with every checkpoint (vocabulary, data, task, ...)
};
TrainResult run_training(const TrainOptions& o, RunState& s, const Objective& obj);

// ---- Fine-tuning (formulas §28): labelled files, the head on a pre-trained model ----------------

// Fine-tuning as a command (formulas §28): labelled tab-separated files, one example a line:
//   classify    LABEL<TAB>TEXT
//   entailment  LABEL<TAB>PREMISE<TAB>HYPOTHESIS
//   similarity  LABEL<TAB>TEXT_A<TAB>TEXT_B          (both orderings are fed, formulas §28)
//   choice      ANSWER<TAB>CONTEXT<TAB>CHOICE_1<TAB>...<TAB>CHOICE_K   (ANSWER 0-based, K may vary)
// Labels are any strings; the classes are those of the training file, in order of appearance.
// Without the label column (predict) a line has one field fewer.
enum class FinetuneKind { classify, entailment, similarity, choice };
const char* finetune_kind_name(FinetuneKind k);
FinetuneKind finetune_kind_from_name(const std::string& s);
struct LabelledExample {
    int label = -1;                   // class index (choice: the answer's index), -1 = no label column
    std::vector<std::string> fields;  // the text fields after the label
    std::vector<std::size_t> at;      // each field's byte offset in the file (for error messages)
    int line = 0;                     // 1-based
};
// Throws Error naming the file, the line and what is wrong (field count, empty field, a label not
// in classes unless learn_classes, an answer out of range).
std::vector<LabelledExample> parse_labelled(const std::string& text, const std::string& file, FinetuneKind kind,
                                            std::vector<std::string>& classes, bool learn_classes, bool labelled);
// Whether a file has the label column: by the field count of its first line (choice: every first
// field is an index into its line's choices).
bool has_label_column(const std::string& text, FinetuneKind kind);
// What a fine-tuned model needs to read its input (kept in its checkpoint as finetune.* metadata).
struct FinetuneSpec {
    FinetuneKind kind = FinetuneKind::classify;
    std::vector<std::string> classes;  // C labels; empty for choice
    GPT1Specials specials;             // GPT: new ids V, V+1, V+2; BERT/RoBERTa: [CLS], [SEP]
};
struct LoadedModel;
FinetuneSpec finetune_spec_of(const LoadedModel& lm, const std::string& path);
// An example longer than n_ctx after the input transformation (finetune and predict --truncate):
// none keeps it whole (check_example_lengths then names every such example); right / left drops
// tokens from the end / the start of its longer text (of a pair: the longer of the two, the first
// on a tie), one at a time, until every sequence fits, as Hugging Face's truncation_side with the
// "longest_first" strategy.
enum class Truncation { none, right, left };
Truncation truncation_from_name(const std::string& name);  // "right", "left" (an Error names the choices)
// One example after the input transformation: K sequences (and BERT's segments), as ids.
struct EncodedExample {
    std::vector<std::vector<int>> seqs, segs;
    int label = -1, line = 0;
    int length = 0;          // tokens in its longest sequence before any truncation
    bool truncated = false;  // tokens were dropped to fit n_ctx
};
EncodedExample encode_example(const Config& c, const FinetuneSpec& s, const CharVocab& v, const LabelledExample& e,
                              const std::string& text, const std::string& file, Truncation t = Truncation::none);
// The same with a subword tokenizer (GPT-1's BPE, BERT's WordPiece, GPT-2's BPE): each
// field is encoded as a text of its own, then the same input transformation.
struct Tokenizer;
EncodedExample encode_example(const Config& c, const FinetuneSpec& s, const Tokenizer& t, const LabelledExample& e,
                              const std::string& file, Truncation tr = Truncation::none);
// A file's encoded examples against n_ctx: with Truncation::none, an Error when any is longer,
// naming how many and which (line and length, the first 10) and --truncate; otherwise a note of
// how many were truncated, and how ("" when none was).
std::string check_example_lengths(const std::vector<EncodedExample>& ex, const Config& c, const std::string& file, Truncation t);
// Examples with the same K -> one padded batch and the head rows `at`; GPT: next-token targets
// (L1); BERT/RoBERTa: mlm_corrupt targets when mlm_rng is given, else none. Multiple choice: L1's
// targets on the right answer's sequence only (every sequence of an unlabelled example keeps them).
Batch finetune_batch(const Config& c, const FinetuneSpec& s, const std::vector<const EncodedExample*>& examples,
                     std::vector<int>& at, std::vector<int>& labels, Rng* mlm_rng);
// The most likely class (choice: answer) of each example, in order; mean_L2 over the labelled ones.
// probs, if given: each example's probabilities over its classes (choice: its answers).
std::vector<int> finetune_predict(const Config& c, const Params<float>& p, const FinetuneSpec& s,
                                  const std::vector<EncodedExample>& examples, double* mean_L2 = nullptr,
                                  std::vector<std::vector<double>>* probs = nullptr);
// Predictions against gold labels 0..C-1: confusion[gold][predicted] counts, and per class the
// precision TP / (TP + FP), the recall TP / (TP + FN) and F1 = 2 P R / (P + R) (0 where a
// denominator is 0, as scikit-learn's zero_division=0), their unweighted means and the accuracy.
struct ClassReport {
    std::vector<std::vector<int>> confusion;
    std::vector<double> precision, recall, f1;
    std::vector<int> support;  // gold examples of each class
    double macro_precision = 0, macro_recall = 0, macro_f1 = 0, accuracy = 0;
};
ClassReport class_report(const std::vector<int>& predicted, const std::vector<int>& gold, int C);
// The report as a table under the class names: the confusion matrix (rows: the labels given,
// columns: the labels predicted), then precision, recall, F1 and support per class.
std::string class_report_text(const ClassReport& r, const std::vector<std::string>& names);
// The training loop's options of fine-tuning, the GPT-1 paper's: lr 6.25e-5 decaying linearly to 0
// after a warm-up of 0.2% of the steps (warmup -1), batch 32, 3 epochs (steps 0), dropout 0.1,
// weight decay 0.01, the gradient clipped at 1, an evaluation every epoch (eval_every -1).
TrainOptions finetune_loop_defaults();
struct FinetuneOptions {
    std::string checkpoint, task, train_file, val_file;
    Truncation truncate = Truncation::none;  // examples longer than n_ctx (check_example_lengths)
    double lambda = 0.5;   // L3 = L2 + lambda L1 (formulas §28)
    bool scratch = false;  // same shapes and vocabulary, fresh initialisation
    // A subword tokenizer for a released model: its kind ("" = recognised) and files, as
    // load_tokenizer takes them; none = the character vocabulary that `train` stored.
    std::string tokenizer, encoder, vocab;
    TrainOptions loop = finetune_loop_defaults();  // steps 0: 3 epochs, warmup -1: 0.2% of the steps, eval_every -1: every epoch
};
struct FinetuneResult {
    double accuracy = 0;
    int correct = 0, total = 0;
    double chance = 0;   // the accuracy of always answering the most frequent validation label
    int majority = -1;   // that label (a class index; for choice, an answer index)
    int signal = 0;      // SIGINT or SIGTERM stopped the run after step steps_done (saved), else 0
    long long steps_done = 0;
};
// The share of the most frequent label among the examples (0 when there are none) and that label:
// the accuracy a model reaches without reading its input. finetune compares its result with it.
double majority_share(const std::vector<EncodedExample>& examples, int* label = nullptr);
FinetuneResult finetune(const FinetuneOptions& o);
// The built-in labelled tasks in the world of the addition task (one per input transformation;
// see transformer.cpp): `examples` lines of the file format above. held_out: only pairs that the
// pre-training never saw (validation).
std::string addition_finetune_task(FinetuneKind kind, int examples, uint64_t seed, bool held_out);

// ---- bench: the speed of a model (loading, generation) ------------------------------------------

// What `bench` measures besides a training step: p is written as a checkpoint to the temporary
// directory ($TMPDIR or /tmp), then timed (best of 3 each) as load_model and as one fread of the
// whole file into fresh memory, the reference; the file is removed. token_ms: the mean time of
// one token from model_step with a warm cache at contexts context_from..context_to-1 (64..127
// when n_ctx allows), the best of 5 such runs; -1 for a model that does not generate.
// mem_read_gbps: the yardstick of mem_read_gbps(weight bytes), its passes taken between those runs.
struct ModelSpeed {
    double file_bytes = 0, load_ms = 0, fread_ms = 0, token_ms = -1;
    int context_from = 0, context_to = 0;
    double mem_read_gbps = 0;  // measured in passes between the token passes (causal models), else 0
};
ModelSpeed model_speed(const Config& c, Params<float>& p);

// ================================================================================================
// TEACHING: pictures and explain. Layers, heads and permutation positions count from 1
// here, as in the formulas; token ids are code ids (0-based), as everywhere.
// ================================================================================================
// One heat map of a matrix: values in [0, 1] (an attention probability, or a mask entry 1), masked
// entries (the mask is -inf there) drawn hatched, apart from a probability of 0 (white).
struct HeatPanel {
    std::string title;                     // "layer l=1, head i=2"
    std::vector<std::string> rows, cols;   // axis labels: the tokens (queries i, keys j)
    std::vector<double> values;            // rows x cols, row-major
    std::vector<bool> masked;              // rows x cols: Mask_{i,j} = -inf
    std::vector<std::string> notes;        // lines under the panel (a mask's formula)
};
// The panels in a grid of per_row columns with a title and caption lines, and a legend: a labelled
// colour scale of P from 0 to 1 (probability) or the two mask entries 1 and -inf (masks). Each
// panel is a <g class='panel'>, each cell a <rect> of class 'p' or 'masked' in row-major order
// with its value in a <title> (a masked cell: "-inf", the mask's entry, in a picture of masks;
// "0 (masked: Mask_ij = -inf)", the probability, in a picture of P). ids: the prefix of the
// figure's own ids (its hatching ids + "hatch", its colour bar ids + "scale"), so that figures
// inlined in one page each keep theirs.
std::string heatmap_svg(const std::vector<HeatPanel>& panels, int per_row, const std::string& title,
                        const std::vector<std::string>& caption, bool probability, const std::string& ids = "");
// A token as an SVG label: printable UTF-8 as it is, a space "␣", a newline "⏎", other bytes \xNN.
std::string token_label(const std::string& bytes);
// Mask^BD, Mask^AR, Mask^ST (window, stride) and Mask^XL(z) (z: a permutation of 0..n-1, code
// positions) for n positions, side by side, each with its formula.
std::string masks_svg(int n, int window, int stride, const std::vector<int>& z);
// The attention probabilities P of one sequence x (code ids; labels: one per token) from the caches
// of the model's own forward pass (model_forward; XLNet checkpoints: both streams of the two-stream
// forward under permutation z, code positions, empty = 0..n-1): one panel per layer and head, or
// only layer `layer` and head `head` (1-based; 0 = all). XLNet gives two panels per head: the
// content stream h and the query stream g (the query columns, all -inf, are left out).
std::vector<HeatPanel> attention_panels(const Config& c, const Params<float>& p, const std::vector<int>& x,
                                        const std::vector<std::string>& labels, int layer, int head,
                                        const std::vector<int>& z = {});

// explain: one forward and backward pass, formula box by formula box, by calling the module
// functions in the order of the variant's formula box (no dropout). Each step records the formula
// as the formula sheet writes it, the function that computes it, the shapes of its inputs and outputs as
// symbols (n x H) and numbers, checked against each other, and the first values of each output.
struct ExplainTensor {
    std::string name, symbol, shape;  // "X^(0)", "n x H", "5x8"
    std::vector<double> first;        // outputs: the first values, row-major
    bool more = false;                // it has more values than those
    // With ExplainDetail (the page of explain --html), inputs and outputs alike: the dimensions and
    // the values shown, all of them up to ExplainDetail::fold rows and columns; beyond, the first
    // and last fold/2 rows (columns). rows, cols: the code indices (0-based) kept; a vector is one
    // row (rows = {0}) of its entries.
    std::vector<int> dims, rows, cols;
    std::vector<double> cells;        // rows.size() x cols.size(), row-major
    // How a heat map colours it: signed values (red above 0, blue below), or on the probability
    // scale, white 0 to blue 1: a probability (Y = Softmax(Z) and its rows), a head's attention P
    // (hatched where its layer's mask is -inf), a mask (its kept entry 1; -inf hatched).
    enum class Scale { values, probability, attention, mask } scale = Scale::values;
};
// A backward box's own gradient check (ExplainDetail::check): the box's forward f, in double, on
// the run's inputs, contracted with a fixed pseudo-random R of f's shape (s = sum(R .* f), as the
// tests' checks do), against central finite differences of s (step h) at the compared entries
// (all of a small gradient; of a large one the entry of largest |g| and a few drawn at random).
// An entry passes if |num - g| <= tol max(1, |g|).
// ---- The walk's stages checked (explain's boxes, make check's stage walk) ----
// One stage as a pass reported it: its value (forward) and the gradient of the loss (backward).
template <typename T>
struct StageSeen {
    Stage s;
    int l;
    Tensor<T> value, gradient;
};
// The loss of the walk in double: model_loss with its gradient into g (if given) and trace (if
// given) seeing the walk, the same dropout draws at every call.
using WalkLoss = std::function<double(Params<double>* g, Trace* trace)>;
// A stage's gradient as the formulas write it: "dX'^(2)", "dS", "dLayerNorm(X^(1))", "dX_f".
std::string stage_gradient_name(const Config& c, Stage s, int l);
// The function whose code line computes stage (s, l)'s gradient (composer: the one joining it into
// the walk), the module it calls there ("" for a line of its own), and the line.
struct StageSource {
    std::string composer, module, line;
};
StageSource stage_source(const Config& c, Stage s, int l);
// make check's stage walk of model_loss (loss; p: the parameters it reads, moved in place for the
// parameters' differences), from the loss down: the backward must report the forward's stages in
// reverse; then each stage's gradient against central differences (h = 1e-5, tolerance 1e-6
// max(1, |g|)) of the loss with that stage moved in the walk; then each parameter's. Lines
// "right ..." up to "first wrong: FUNCTION ...", with the entry, the two values and a relation.
std::vector<std::string> locate_backward(const Config& c, Params<double>& p, const Batch& b, const WalkLoss& loss, uint64_t seed);

// One gradient of a backward box, checked on its own: its verdict, its worst entry, a relation that
// explains a failure, and its values to draw (the finite difference where compared, the backward's
// value, their difference), kept as ExplainTensor::rows and cols keep a tensor's.
struct ExplainGradient {
    std::string name;                 // "dW_1"
    std::string formula;              // its line of the backward: "dW_1 = X^T dZ"
    std::vector<int> shape;
    bool pass = true;
    int entries = 0;                  // entries compared
    std::size_t at = 0;               // the worst entry, row-major (0-based)
    double num = 0, ana = 0, err = 0;  // at the worst entry: finite difference, backward, relative error
    std::string relation;             // a failure explained: "backward = 4.00 x finite difference everywhere: a factor of D?"
    std::string problem;              // of the wrong shape, or not finite
    ExplainTensor fd, backward, diff;  // the drawn values: fd and diff NaN where no entry was compared
    std::vector<std::size_t> compared;  // the entries compared (row-major), with their values:
    std::vector<double> nums, anas;      // finite difference and backward
    std::vector<double> values;          // the backward's every entry (row-major)
    bool model = false;                  // of the loss through the whole walk (model_loss), not of the box's forward alone
};
// The one finite-difference sampler of explain, its stage walk and the tests: the gradient ana of a
// scalar s against central differences (s(x + h e_j) - s(x - h e_j)) / 2h at the entries that
// compared_entries chooses; moved(j, d) is s with entry j moved by d. An entry passes if
// |num - ana| <= tol max(1, |ana|). fold: the drawn views' rows and columns (ExplainTensor).
std::set<std::size_t> compared_entries(const Tensor<double>& ana, int per, Rng& r);  // all of a small gradient (<= per); else the largest |g| and per - 1 drawn
ExplainGradient fd_gradient(const std::function<double(std::size_t, double)>& moved, const std::string& name, const std::string& formula,
                            const std::vector<int>& shape, const Tensor<double>& ana, int per, Rng& r, double h, double tol, int fold = 64);
struct ExplainCheck {
    bool done = false, pass = true;
    std::string function;             // the backward checked: "LayerNorm_backward"
    std::string tensor;               // the gradient holding the worst entry: "dX", "dgamma"
    std::vector<int> shape;           // its shape
    std::size_t at = 0;               // the worst entry, row-major (0-based)
    double num = 0, ana = 0, err = 0;  // finite difference, backward's value, |num - ana| / max(1, |ana|)
    double tol = 1e-6, h = 1e-6;
    int entries = 0;                  // entries compared, over every gradient of the box
    std::string problem;              // a gradient of the wrong shape, or not finite
    // ExplainDetail::stubs: the check could not run, its backward (or a function it needs) being a
    // handout's stub: "not implemented: Mask_AR (assignment 3)". Neither pass nor fail (pass stays true).
    std::string missing;
    bool random = false;              // its inputs drawn at random (the run did not reach the box)
    std::vector<ExplainGradient> gradients;  // each gradient the backward returns, in the backward's order
    std::string first_failing;        // the first gradient in that order that fails, those before it passing: a note
    // The box of a function this box's backward calls whose own check fails (a step index, 0-based;
    // -1: none): this box fails through it, and the page says to fix that one first.
    int callee = -1;
    // Where the box's own function passes and a gradient of the walk does not: a note naming the
    // function that joins it into the walk (function is then that one).
    std::string composition;
};
struct ExplainStep {
    int depth = 0;                    // 1: a box inside the one above (a head inside MultiHeadSA)
    std::string box;                  // where: "Layers, l = 1", "Backward, l = 2", ...
    bool backward = false;            // a box of the backward pass
    std::string formula;              // as the formula sheet writes it
    std::string function;             // the function(s) in transformer.cpp
    std::vector<ExplainTensor> in, out;
    std::vector<std::string> picture;  // optional lines (a mask as 1 and .)
    ExplainCheck check;                // backward boxes, with ExplainDetail::check
};
// The backward functions explain's checks call, replaceable (a test injects a wrong one to see the
// page mark its boxes); empty: the library's own.
struct ExplainBackwards {
    std::function<Tensor<double>(const Tensor<double>& gamma, const LayerNormCache<double>& cache, const Tensor<double>& dY,
                                 Tensor<double>& dgamma, Tensor<double>& dbeta)> LayerNorm_backward;
    std::function<Tensor<double>(const Tensor<double>& X, const FFNParams<double>& p, Activation act, const FFNCache<double>& cache,
                                 const Tensor<double>& dY, FFNParams<double>& g)> FFN_backward;
    std::function<Tensor<double>(const Tensor<double>& X, const MultiHeadSAParams<double>& p, const MultiHeadSACache<double>& cache,
                                 const Tensor<double>& dY, MultiHeadSAParams<double>& g)> MultiHeadSA_backward;
};
// What explain keeps beyond the text's first values: every tensor's values (folded beyond fold x
// fold), and each backward box's gradient check.
struct ExplainDetail {
    int fold = 64;
    bool check = true;
    // A handout's stubs (an Error "not implemented: ..."): the walk stops there (Explained::stopped)
    // instead of throwing; every backward box is still emitted and checked alone, on the run's input
    // of it where the forward reached it, else on inputs drawn at random (fixed seed) with the
    // model's shapes; a check that meets a stub is ExplainCheck::missing.
    bool stubs = false;
    ExplainBackwards backwards;
    // Sees each gradient the walk reports before explain does and may change it: a test plants a
    // mistake of a composing function (a path dropped, a term doubled) in the walk itself.
    Trace* plant = nullptr;
};
template <typename T>
struct Explained {
    std::vector<ExplainStep> steps;  // forward, then backward
    Tensor<T> Z;                     // the logits X^(L) W_e^T, n x V
    double loss = 0;                 // as model_loss
    Params<T> g;                     // d loss / d theta, as model_loss's g
    // With ExplainDetail::stubs: the stub's message where the run stopped ("": it ran whole). The
    // forward boxes are those it reached (the loss NaN if it did not reach it); the backward boxes
    // after the stop carry no values, only their checks.
    std::string stopped;
    std::string stopped_at;  // the function whose stub stopped it ("Mask_AR"), NotImplemented::function
};
// batch: one sequence (B = 1) with targets (GPT: next_token_targets; BERT/RoBERTa: the masked
// positions' ids, the tokens there replaced by the mask id). values: how many first values to keep.
template <typename T>
Explained<T> explain(const Config& c, const Params<T>& p, const Batch& batch, int values = 4,
                     const ExplainDetail* detail = nullptr);
std::string explain_text(const Config& c, const std::vector<ExplainStep>& steps);

// explain --html: one self-contained HTML page of the run (no request leaves the file): per box
// of explain_text, in its order, the formula as MathML and its § of docs/formulas.md, the
// function(s) with their line in transformer.cpp, every tensor as a heat map (folded beyond
// ExplainHtml::fold; the fold shrinks until the page holds at most `cells` cells), each layer's
// attention P per head and its mask, each backward box's gradient check, and all of it as JSON in
// <script type="application/json" id="explain-data">.
struct ExplainHtml {
    std::string title;                  // what ran: "preset tiny-gpt2", "checkpoint m.safetensors"
    std::vector<std::string> labels;    // one per token (its text, or its id)
    int values = 4;                     // first values per tensor, as explain_text's
    int fold = 64;
    std::size_t cells = 150000;         // the page's budget of heat-map cells
    std::string source;                 // transformer.cpp to read the lines from ("": where it was built)
    std::string formulas = "docs/formulas.md";  // the § links' target
    std::string sheet;                  // docs/formulas.md to copy each box's § from ("": beside the program, then where it was built)
    ExplainBackwards backwards;
};
// In a handout the page survives the stubs (ExplainDetail::stubs): it says where the run stopped
// and marks the boxes whose check met a stub "not implemented yet".
struct ExplainPage {
    std::string html;
    int boxes = 0, checked = 0, failing = 0, maths = 0, missing = 0;
    std::string stopped;                // Explained::stopped
    std::string stopped_at;             // Explained::stopped_at
    std::vector<std::string> failing_boxes;  // "[17] Backward, l = 2 (LayerNorm_backward)"
    double loss = 0;
    std::string source;                 // the transformer.cpp whose lines the page cites ("": none found)
    std::string sheet;                  // the formulas.md whose sections the page holds ("": none found)
};
ExplainPage explain_html(const Config& c, const Params<float>& p, const Batch& batch, const ExplainHtml& o);
// The line of transformer.cpp (its text: source) where the function `name` is defined, as
// `grep -n` finds it: the first line, not indented and not a comment, holding "name(" after a
// return type, whose declaration reaches "{" before ";". 0: none.
int definition_line(const std::string& source, const std::string& name);
// A formula of the project's plain-text notation (docs/formulas.md) as explain --html sets it: open_tag,
// one <math> per piece (it wraps between them, at its relations and commas), close_tag.
std::string to_mathml(const std::string& plain, const std::string& open_tag = "<div class=\"formula\">",
                      const std::string& close_tag = "</div>");

// ================================================================================================
// PLATFORM: every call to the operating system (transformer.cpp's PLATFORM section holds them all,
// with AtomicFile's and StagedDir's; a port to another system changes that section alone). POSIX
// and Windows (MinGW-w64, MSVC): on Windows every path is UTF-8 and may use '\' or '/' and a drive
// ("C:\"), and the paths the section makes use '/'.
// ================================================================================================
// What the program does first (main calls it): on Windows, standard input, output and error in
// binary mode (LF is never written as CR LF) and the console's output code page UTF-8 until the
// program ends; nothing elsewhere.
void platform_start();
// The program's arguments as UTF-8: argv itself on POSIX; on Windows the wide command line's, which
// hold every character (argv holds the ANSI code page's alone).
std::vector<std::string> program_arguments(int argc, char** argv);
// One word as the user's shell reads it back: as it is when plain, else quoted (POSIX sh: in single
// quotes; Windows' cmd.exe and PowerShell: in double quotes, as the C runtime reads a command line).
std::string shell_word(const std::string& s);
// fopen of a UTF-8 path. On Windows through its wide name; a file opened for reading can be
// replaced (renamed over) while open, and a directory opens, as on POSIX.
std::FILE* open_file(const std::string& path, const char* mode);
// Removes a file (false: errno says why).
bool remove_file(const std::string& path);
// What a path names, symbolic links followed: nothing (or nothing this process may see), a regular
// file, a directory, a FIFO or pipe, a device, or something else.
enum class PathKind { missing, regular, directory, fifo, device, other };
PathKind path_kind(const std::string& path);
// The size in bytes of the file at a path, or of an open file; -1 when the system does not say.
long long file_size(const std::string& path);
long long file_size(std::FILE* f);
// Whether an open file is a directory (fopen opens one on Linux, open_file everywhere; reading it
// then fails).
bool is_directory(std::FILE* f);
// f moved to byte `at` from its start, with 64-bit offsets (files over 2 GiB); false on failure.
bool seek_to(std::FILE* f, long long at);
// The position of the last separator of a path ('/'; on Windows '\' too, or the ':' of "C:NAME"),
// std::string::npos when it has none: the name in it starts one after.
std::size_t last_separator(const std::string& path);
// The path without the separators it ends with, a root kept ("dir//" gives "dir", "/" stays "/").
std::string trim_separators(const std::string& path);
// The directory of a path ("." for a bare name, "/" for "/NAME"; on Windows "C:\" for "C:\NAME").
std::string dir_of(const std::string& path);
// Whether files can be made in the directory (false: errno says why).
bool directory_writable(const std::string& dir);
// The names a directory holds but "." and "..", appended to names (false: errno says why not).
bool directory_entries(const std::string& dir, std::vector<std::string>& names);
// The absolute path with every link resolved; "" when it cannot be resolved.
std::string real_path(const std::string& path);
// A string equal for two paths of the same file: the device and inode of an existing file (on
// Windows the volume serial number and file index), else the real directory and the name (on
// Windows compared without case).
std::string file_identity(const std::string& path);
// The directory for temporary files: $TMPDIR, else /tmp; on Windows GetTempPathW's (%TMP%, %TEMP%, ...).
std::string temporary_directory();
// This process's number (in the names of its temporary files).
long long process_id();
// Whether standard output is a terminal.
bool stdout_is_terminal();
// The running program's absolute path; "" where the system does not say.
std::string executable_path();
// The training loop's stop: from loop_stop_begin() to loop_stop_end(), the first SIGINT or SIGTERM
// (on Windows Ctrl-C or Ctrl-Break) is recorded (loop_stop_signal(): its number, else 0) instead
// of ending the program; a second ends it.
void loop_stop_begin();
int loop_stop_signal();
void loop_stop_end();
// This process's peak resident memory (on Windows its peak working set) in MiB; -1 when the system
// does not say.
double peak_memory_mib();

// ================================================================================================
// GENERATED TABLES: the Unicode classes of the tokenizers, internal to transformer.cpp (nothing
// declared here).
// ================================================================================================

}  // namespace tf
