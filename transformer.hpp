// transformer.hpp - the formulated transformer (GPT, GPT-2, GPT-3, BERT, RoBERTa) in plain C++.
//
// Every formula box of the seed ("The Formulated GPT-2") has one function here, named after it,
// with its forward and its hand-derived backward side by side in transformer.cpp.
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

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tf {

// ------------------------------------------------------------------------------------------------
// Errors: every bad input becomes one of these, with a message that says what is wrong.
// ------------------------------------------------------------------------------------------------
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct ShapeError : Error {
    using Error::Error;
};

// ------------------------------------------------------------------------------------------------
// Tensor: a row-major array with a shape of one ({H}) or two ({rows, cols}) dimensions.
// ------------------------------------------------------------------------------------------------
template <typename T>
struct Tensor {
    std::vector<int> shape;  // {len} or {rows, cols}
    std::vector<T> data;     // row-major, size = product of shape

    Tensor() = default;
    explicit Tensor(std::vector<int> shape_, T fill = T(0));
    Tensor(int rows, int cols, T fill = T(0)) : Tensor(std::vector<int>{rows, cols}, fill) {}
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
// MODULES (seed section "Modules"), each a forward and its backward.
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
// Sparse causal mask of GPT-3 (never defined in the seed; our definition, after the Sparse
// Transformer's strided pattern, Child et al. 2019), n x n:
//   (Mask^ST)_{i,j} = 1 if j <= i and (i - j < window or (stride > 0 and (i - j) mod stride == 0)),
//                    -inf otherwise.
// "window" is the local band (the GPT-3 paper's "locally banded"), "stride" adds the strided
// columns that let information hop further back; stride 0 leaves only the band.
template <typename T>
Tensor<T> Mask_ST(int n, int window, int stride);

// How "Mask (.) S" is carried out (seed README item 1): a mask entry 1 keeps the score, a mask
// entry -inf replaces it by -inf, so Softmax gives it probability exactly 0 and its gradient is
// exactly 0. This equals the additive 0/-inf mask; no 0 * inf product is ever formed.
template <typename T>
Tensor<T> apply_mask(const Tensor<T>& Mask, const Tensor<T>& S);

// Masked Scaled Dot-Product Attention (Q, K, V: n x D, Mask: n x n -> n x D):
//   Attention(Q, K, V, Mask) = Softmax( Mask (.) Q K^T / sqrt(D) ) V
// P (n x n) is the softmax output, kept for the backward. If dropout_scale is given (n x n, each
// entry 0 or 1/(1-p)), the product uses P (.) dropout_scale instead of P (dropout on attention
// probabilities, seed 003).
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
// heads i = 0..A-1 (formula i = 1..A) and W_O (AD x H).
template <typename T>
struct MultiHeadSAParams {
    std::vector<Tensor<T>> W_Q, W_K, W_V;  // A tensors of H x D each
    Tensor<T> W_O;                         // AD x H
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
// X may hold B sequences of n rows ((B*n) x H); attention is applied to each sequence alone.
// attn_dropout > 0 draws dropout masks for the attention probabilities from rng.
struct Rng;
template <typename T>
Tensor<T> MultiHeadSA(const Tensor<T>& X, const Tensor<T>& Mask, const MultiHeadSAParams<T>& p,
                      MultiHeadSACache<T>* cache = nullptr, double attn_dropout = 0, Rng* rng = nullptr);
// Backward through Concat, the heads and the projections; returns dX, accumulates into g.
template <typename T>
Tensor<T> MultiHeadSA_backward(const Tensor<T>& X, const MultiHeadSAParams<T>& p,
                               const MultiHeadSACache<T>& cache, const Tensor<T>& dY,
                               MultiHeadSAParams<T>& g);

// Activations of the feed-forward network. The seed's GELU is x * sigmoid(1.702 x); released
// GPT-2 weights need the tanh form, BERT the exact erf form (seed README item 2).
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

// Cross Entropy (seed 001):  CrossEntropy(y, yhat) = - sum_{j=1}^V y_j log(yhat_j)
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
// expectation is unchanged and evaluation needs no rescaling). p = 0 gives an empty tensor.
template <typename T>
Tensor<T> dropout_mask(const std::vector<int>& shape, double p, Rng& rng);
template <typename T>
void multiply_inplace(Tensor<T>& X, const Tensor<T>& scale);  // X *= scale (empty scale: no-op)

}  // namespace tf
