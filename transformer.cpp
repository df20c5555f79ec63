// transformer.cpp - the implementation, in the order of the seed: tensor, matrix products,
// modules, models, objectives, parameters, checkpoints, training.
// Every forward has its backward right after it, with the derivation in a few comment lines.
#include "transformer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace tf {

// ================================================================================================
// Tensor
// ================================================================================================

std::string shape_str(const std::vector<int>& shape) {
    if (shape.empty()) return "(empty)";
    std::string s;
    for (std::size_t k = 0; k < shape.size(); k++) s += (k ? "x" : "") + std::to_string(shape[k]);
    return s;
}

template <typename T>
Tensor<T>::Tensor(std::vector<int> shape_, T fill) : shape(std::move(shape_)) {
    std::size_t n = 1;
    for (int d : shape) {
        if (d < 0) throw ShapeError("Tensor: negative dimension in shape " + shape_str(shape));
        n *= (std::size_t)d;
    }
    data.assign(n, fill);
}

template <typename T>
Tensor<T> Tensor<T>::from(int rows, int cols, std::vector<T> values) {
    if (values.size() != (std::size_t)rows * cols)
        throw ShapeError("Tensor::from: " + std::to_string(values.size()) + " values for a " +
                         shape_str({rows, cols}) + " matrix");
    Tensor t;
    t.shape = {rows, cols};
    t.data = std::move(values);
    return t;
}

template <typename T>
Tensor<T> Tensor<T>::vector(std::vector<T> values) {
    Tensor t;
    t.shape = {(int)values.size()};
    t.data = std::move(values);
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
#pragma GCC ivdep
    for (std::size_t k = 0; k < n; k++) a[k] += b[k];
}

template <typename T>
Tensor<T> transpose(const Tensor<T>& A) {
    require_matrix(A, "transpose", "A");
    Tensor<T> B(A.cols(), A.rows());
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

template <typename T>
void gemm(int M, int N, int K, const T* A, long rsA, long csA, const T* B, long rsB, long csB, T* C, long ldc,
          bool accumulate) {
    gemm_reference(M, N, K, A, rsA, csA, B, rsB, csB, C, ldc, accumulate);
}

template <typename T>
Tensor<T> matmul(const Tensor<T>& A, const Tensor<T>& B) {
    require_matrix(A, "matmul", "A");
    require_matrix(B, "matmul", "B");
    if (A.cols() != B.rows())
        throw ShapeError("matmul: A is " + shape_str(A) + " but B is " + shape_str(B) + " (A B needs A.cols == B.rows)");
    Tensor<T> C(A.rows(), B.cols());
    gemm(A.rows(), B.cols(), A.cols(), A.ptr(), A.cols(), 1, B.ptr(), B.cols(), 1, C.ptr(), C.cols(), false);
    return C;
}

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
    Tensor<T> C(A.rows(), B.rows());
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
#pragma GCC ivdep
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
#pragma GCC ivdep
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
    Tensor<T> dx({dY.rows()});
    for (int i = 0; i < dY.rows(); i++) dx[i] = dY(i, i);
    return dx;
}

// ---- Stack -----------------------------------------------------------------------------------
// Stack_n(x)_{i,j} = x_j;   x: H -> n x H.
template <typename T>
Tensor<T> Stack(const Tensor<T>& x, int n) {
    if (x.shape.size() != 1) throw ShapeError("Stack: x must be a vector, got shape " + shape_str(x));
    Tensor<T> Y(n, x.cols());
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
    Tensor<T> Y((int)x.size(), H);
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
#pragma GCC ivdep
        for (int j = 0; j < H; j++) w[j] += d[j];
    }
}

// ---- Softmax ---------------------------------------------------------------------------------
// Y_{i,j} = exp(X_{i,j} - m_i) / sum_k exp(X_{i,k} - m_i), m_i = max_k X_{i,k} (same value, no
// overflow). exp(-inf - m) = 0 exactly, so masked entries get probability 0.
template <typename T>
static void softmax_row(const T* x, T* y, int H) {
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
    Tensor<T> Y(X.rows(), X.cols());
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
    Tensor<T> dX(Y.rows(), Y.cols());
    for (int i = 0; i < Y.rows(); i++) softmax_backward_row(Y.row(i), dY.row(i), dX.row(i), Y.cols());
    return dX;
}

// ---- Attention masks -------------------------------------------------------------------------
// Entries are 1 (keep) or -inf (drop), exactly as in the seed. Formula (i, j) = code (i+1, j+1);
// "j > i" is the same comparison in both.
template <typename T>
Tensor<T> Mask_BD(int n) {
    return Tensor<T>(n, n, T(1));
}

template <typename T>
Tensor<T> Mask_AR(int n) {
    Tensor<T> M(n, n, T(1));
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) M(i, j) = -std::numeric_limits<T>::infinity();
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
template <typename T>
Tensor<T> Attention(const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V, const Tensor<T>& Mask,
                    AttentionCache<T>* cache, const Tensor<T>* dropout_scale) {
    require_matrix(Q, "Attention", "Q");
    require_same_shape(Q, K, "Attention", "Q", "K");
    require_same_shape(Q, V, "Attention", "Q", "V");
    const int n = Q.rows(), D = Q.cols();
    require_shape(Mask, {n, n}, "Attention", "Mask");
    Tensor<T> S = matmul_nt(Q, K);  // n x n, S_{i,j} = q_i . k_j
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
    Tensor<T> Y(n, A * D);
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
    std::vector<Tensor<T>> dX(A, Tensor<T>(n, D));
    for (int k = 0; k < A; k++)
        for (int i = 0; i < n; i++) std::copy(dY.row(i) + k * D, dY.row(i) + (k + 1) * D, dX[k].row(i));
    return dX;
}

// ---- Masked Multi-Head Self-Attention --------------------------------------------------------
// Rows b*n .. b*n+n-1 of a (B*n) x C matrix: sequence b.
template <typename T>
static Tensor<T> rows_of(const Tensor<T>& X, int first, int count) {
    Tensor<T> Y(count, X.cols());
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
}

// X: (B*n) x H, Mask: n x n, W_i^Q, W_i^K, W_i^V: H x D, W^O: AD x H -> (B*n) x H.
template <typename T>
Tensor<T> MultiHeadSA(const Tensor<T>& X, const Tensor<T>& Mask, const MultiHeadSAParams<T>& p,
                      MultiHeadSACache<T>* cache, double attn_dropout, Rng* rng) {
    check_mhsa_params(X, p, "MultiHeadSA");
    require_matrix(Mask, "MultiHeadSA", "Mask");
    const int n = Mask.rows(), A = (int)p.W_Q.size(), D = p.W_Q[0].cols();
    if (Mask.cols() != n || X.rows() % n != 0)
        throw ShapeError("MultiHeadSA: X is " + shape_str(X) + " but Mask is " + shape_str(Mask) +
                         " (X needs a multiple of n rows, Mask n x n)");
    const int B = X.rows() / n;
    MultiHeadSACache<T> local;
    MultiHeadSACache<T>& c = cache ? *cache : local;
    c.Q.assign(A, {}), c.K.assign(A, {}), c.V.assign(A, {}), c.head.assign(A, Tensor<T>(B * n, D));
    c.att.assign(A, std::vector<AttentionCache<T>>(B));
    c.dropout.assign(A, std::vector<Tensor<T>>(B));
    for (int i = 0; i < A; i++) {
        c.Q[i] = matmul(X, p.W_Q[i]);  // (B*n) x D
        c.K[i] = matmul(X, p.W_K[i]);
        c.V[i] = matmul(X, p.W_V[i]);
        for (int b = 0; b < B; b++) {
            if (attn_dropout > 0 && rng) c.dropout[i][b] = dropout_mask<T>({n, n}, attn_dropout, *rng);
            Tensor<T> O = Attention(rows_of(c.Q[i], b * n, n), rows_of(c.K[i], b * n, n), rows_of(c.V[i], b * n, n),
                                    Mask, &c.att[i][b], &c.dropout[i][b]);
            set_rows(c.head[i], b * n, O);
        }
    }
    c.concat = Concat(c.head);  // (B*n) x AD
    return matmul(c.concat, p.W_O);
}

// Y = C W^O with C = Concat(head_i): dW^O += C^T dY, dC = dY W^O^T, dhead_i = dC[:, iD:(i+1)D];
// per head Attention_backward gives dQ_i, dK_i, dV_i; Q_i = X W_i^Q gives dW_i^Q += X^T dQ_i and
// dX = sum_i (dQ_i W_i^Q^T + dK_i W_i^K^T + dV_i W_i^V^T).
template <typename T>
Tensor<T> MultiHeadSA_backward(const Tensor<T>& X, const MultiHeadSAParams<T>& p, const MultiHeadSACache<T>& c,
                               const Tensor<T>& dY, MultiHeadSAParams<T>& g) {
    check_mhsa_params(X, p, "MultiHeadSA_backward");
    require_same_shape(X, dY, "MultiHeadSA_backward", "X", "dY");
    const int A = (int)p.W_Q.size(), D = p.W_Q[0].cols();
    const int B = (int)c.att[0].size(), n = X.rows() / B;
    matmul_tn_acc(c.concat, dY, g.W_O);
    std::vector<Tensor<T>> dhead = Concat_backward(matmul_nt(dY, p.W_O), A);
    Tensor<T> dX(X.rows(), X.cols());
    for (int i = 0; i < A; i++) {
        Tensor<T> dQ(B * n, D), dK(B * n, D), dV(B * n, D);
        for (int b = 0; b < B; b++) {
            Tensor<T> dq, dk, dv;
            Attention_backward(rows_of(c.Q[i], b * n, n), rows_of(c.K[i], b * n, n), rows_of(c.V[i], b * n, n),
                               c.att[i][b], rows_of(dhead[i], b * n, n), dq, dk, dv, &c.dropout[i][b]);
            set_rows(dQ, b * n, dq), set_rows(dK, b * n, dk), set_rows(dV, b * n, dv);
        }
        matmul_tn_acc(X, dQ, g.W_Q[i]);
        matmul_tn_acc(X, dK, g.W_K[i]);
        matmul_tn_acc(X, dV, g.W_V[i]);
        add_inplace(dX, matmul_nt(dQ, p.W_Q[i]));
        add_inplace(dX, matmul_nt(dK, p.W_K[i]));
        add_inplace(dX, matmul_nt(dV, p.W_V[i]));
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
    for (Activation a : {Activation::relu, Activation::gelu_sigmoid, Activation::gelu_tanh, Activation::gelu_erf})
        if (s == activation_name(a)) return a;
    throw Error("unknown activation '" + s + "' (expected relu, gelu_sigmoid, gelu_tanh or gelu_erf)");
}

template <typename T>
T activation(Activation a, T x) {
    switch (a) {
        case Activation::relu: return x > T(0) ? x : T(0);
        case Activation::gelu_sigmoid: return x / (T(1) + std::exp(T(-1.702) * x));
        case Activation::gelu_tanh: {
            const T c = T(0.7978845608028654);  // sqrt(2/pi)
            return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
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
            const T c = T(0.7978845608028654);
            const T t = std::tanh(c * (x + T(0.044715) * x * x * x));
            return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x * x);
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
Tensor<T> FFN(const Tensor<T>& X, const FFNParams<T>& p, Activation act, FFNCache<T>* cache) {
    check_ffn_params(X, p, "FFN");
    FFNCache<T> local;
    FFNCache<T>& c = cache ? *cache : local;
    c.Z = Linear(X, p.W_1, p.b_1);
    c.A = c.Z;
    for (auto& v : c.A.data) v = activation(act, v);
    return Linear(c.A, p.W_2, p.b_2);
}

template <typename T>
Tensor<T> FFN_backward(const Tensor<T>& X, const FFNParams<T>& p, Activation act, const FFNCache<T>& c,
                       const Tensor<T>& dY, FFNParams<T>& g) {
    check_ffn_params(X, p, "FFN_backward");
    require_same_shape(X, dY, "FFN_backward", "X", "dY");
    Tensor<T> dZ = Linear_backward(c.A, p.W_2, dY, g.W_2, &g.b_2);  // dA, n x F
    for (std::size_t k = 0; k < dZ.size(); k++) dZ[k] *= activation_derivative(act, c.Z[k]);
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
template <typename T>
Tensor<T> LayerNorm(const Tensor<T>& X, const Tensor<T>& gamma, const Tensor<T>& beta, double eps,
                    LayerNormCache<T>* cache) {
    require_matrix(X, "LayerNorm", "X");
    const int n = X.rows(), H = X.cols();
    require_shape(gamma, {H}, "LayerNorm", "gamma");
    require_shape(beta, {H}, "LayerNorm", "beta");
    LayerNormCache<T> local;
    LayerNormCache<T>& c = cache ? *cache : local;
    c.Xhat = Tensor<T>(n, H);
    c.rstd = Tensor<T>({n});
    Tensor<T> Y(n, H);
    for (int i = 0; i < n; i++) {
        const T* x = X.row(i);
        T mu = 0;
        for (int j = 0; j < H; j++) mu += x[j];
        mu /= T(H);
        T var = 0;
        for (int j = 0; j < H; j++) var += (x[j] - mu) * (x[j] - mu);
        var /= T(H);
        const T rstd = T(1) / std::sqrt(var + T(eps));
        c.rstd[i] = rstd;
        T* xh = c.Xhat.row(i);
        T* y = Y.row(i);
        for (int j = 0; j < H; j++) {
            xh[j] = (x[j] - mu) * rstd;
            y[j] = gamma[j] * xh[j] + beta[j];
        }
    }
    return Y;
}

// Y = gamma Xhat + beta: dgamma = colsum(dY Xhat), dbeta = colsum(dY), G = dY gamma = dL/dXhat.
// Xhat_j = (x_j - mu) rstd with mu, rstd functions of the whole row; differentiating gives
//   dX_j = rstd (G_j - mean_k G_k - Xhat_j mean_k(G_k Xhat_k)).
template <typename T>
Tensor<T> LayerNorm_backward(const Tensor<T>& gamma, const LayerNormCache<T>& c, const Tensor<T>& dY,
                             Tensor<T>& dgamma, Tensor<T>& dbeta) {
    require_same_shape(c.Xhat, dY, "LayerNorm_backward", "Xhat", "dY");
    const int n = dY.rows(), H = dY.cols();
    require_shape(gamma, {H}, "LayerNorm_backward", "gamma");
    require_shape(dgamma, {H}, "LayerNorm_backward", "dgamma");
    require_shape(dbeta, {H}, "LayerNorm_backward", "dbeta");
    Tensor<T> dX(n, H);
    for (int i = 0; i < n; i++) {
        const T* dy = dY.row(i);
        const T* xh = c.Xhat.row(i);
        T mean_g = 0, mean_gx = 0;
        for (int j = 0; j < H; j++) {
            const T g = dy[j] * gamma[j];
            mean_g += g;
            mean_gx += g * xh[j];
            dgamma[j] += dy[j] * xh[j];
            dbeta[j] += dy[j];
        }
        mean_g /= T(H);
        mean_gx /= T(H);
        T* dx = dX.row(i);
        for (int j = 0; j < H; j++) dx[j] = c.rstd[i] * (dy[j] * gamma[j] - mean_g - xh[j] * mean_gx);
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
        if (y[j] != T(0)) loss -= y[j] * std::log(yhat[j]);
    return loss;
}
// d/dyhat_j (- y_j log yhat_j) = - y_j / yhat_j.
template <typename T>
Tensor<T> CrossEntropy_backward(const Tensor<T>& y, const Tensor<T>& yhat) {
    require_same_shape(y, yhat, "CrossEntropy_backward", "y", "yhat");
    Tensor<T> d(yhat.shape);
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
    if (dZ) *dZ = Tensor<T>(m, V);
    if (count == 0) return 0.0;
    double loss = 0;
    for (int i = 0; i < m; i++) {
        if (targets[i] < 0) continue;
        const T* z = Z.row(i);
        T mx = z[0];
        for (int j = 1; j < V; j++) mx = std::max(mx, z[j]);
        double sum = 0;
        for (int j = 0; j < V; j++) sum += std::exp((double)(z[j] - mx));
        const double lse = (double)mx + std::log(sum);
        loss += lse - (double)z[targets[i]];
        if (dZ) {
            T* d = dZ->row(i);
            const double inv = 1.0 / (sum * count);
            for (int j = 0; j < V; j++) d[j] = T(std::exp((double)(z[j] - mx)) * inv);
            d[targets[i]] -= T(1.0 / count);
        }
    }
    return loss / count;
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
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
int Rng::below(int n) { return (int)(uniform() * n); }

template <typename T>
Tensor<T> dropout_mask(const std::vector<int>& shape, double p, Rng& rng) {
    if (p <= 0) return Tensor<T>();
    if (p >= 1) throw Error("dropout: p must be below 1, got " + std::to_string(p));
    Tensor<T> m(shape);
    const T keep = T(1.0 / (1.0 - p));
    for (auto& v : m.data) v = rng.uniform() < p ? T(0) : keep;
    return m;
}

template <typename T>
void multiply_inplace(Tensor<T>& X, const Tensor<T>& scale) {
    if (scale.empty()) return;
    require_same_shape(X, scale, "dropout", "X", "scale");
    T* __restrict x = X.ptr();
    const T* __restrict s = scale.ptr();
    const std::size_t n = X.size();
#pragma GCC ivdep
    for (std::size_t k = 0; k < n; k++) x[k] *= s[k];
}

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
    template void gemm(int, int, int, const T*, long, long, const T*, long, long, T*, long, bool);         \
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
    template Tensor<T> Concat(const std::vector<Tensor<T>>&);                                              \
    template std::vector<Tensor<T>> Concat_backward(const Tensor<T>&, int);                                \
    template Tensor<T> MultiHeadSA(const Tensor<T>&, const Tensor<T>&, const MultiHeadSAParams<T>&,        \
                                   MultiHeadSACache<T>*, double, Rng*);                                    \
    template Tensor<T> MultiHeadSA_backward(const Tensor<T>&, const MultiHeadSAParams<T>&,                 \
                                            const MultiHeadSACache<T>&, const Tensor<T>&,                  \
                                            MultiHeadSAParams<T>&);                                        \
    template T activation(Activation, T);                                                                  \
    template T activation_derivative(Activation, T);                                                       \
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
    template void multiply_inplace(Tensor<T>&, const Tensor<T>&);

TF_INSTANTIATE(float)
TF_INSTANTIATE(double)

}  // namespace tf
