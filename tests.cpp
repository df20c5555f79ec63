// tests.cpp - the doctest suite of the modules declared in transformer.hpp.
//
// Every test case name starts with its module's name, so `./tests -tc="LayerNorm*"` runs the
// tests of one module. For every module there are
//   1. a small case computed by hand (the arithmetic is in a comment next to the numbers),
//   2. a gradient check in double precision of every input and every parameter against central
//      finite differences (grad_check below),
//   3. invariants (rows sum to 1, causality, mean 0 / variance 1, ...),
//   4. wrong shapes: a tf::ShapeError (tf::Error for bad ids) whose message names the shapes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "transformer.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

using namespace tf;
using TD = Tensor<double>;
using TF = Tensor<float>;

namespace {

const double INF = std::numeric_limits<double>::infinity();

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------
TD randn(int rows, int cols, Rng& rng, double scale = 1.0) {
    TD t(rows, cols);
    for (auto& v : t.data) v = scale * rng.normal();
    return t;
}
TD randn_vec(int n, Rng& rng, double scale = 1.0) {
    TD t(std::vector<int>{n});
    for (auto& v : t.data) v = scale * rng.normal();
    return t;
}
TF to_float(const TD& x) {
    TF y(x.shape);
    for (std::size_t k = 0; k < x.size(); k++) y[k] = (float)x[k];
    return y;
}
// L = sum(Y .* R): the scalar loss whose gradient in Y is R.
double sum_prod(const TD& Y, const TD& R) {
    REQUIRE(Y.shape == R.shape);
    double s = 0;
    for (std::size_t k = 0; k < Y.size(); k++) s += Y[k] * R[k];
    return s;
}
double max_abs(const TD& a) {
    double m = 0;
    for (double v : a.data) m = std::max(m, std::fabs(v));
    return m;
}
double max_abs_diff(const TD& a, const TD& b) {
    REQUIRE(a.shape == b.shape);
    double m = 0;
    for (std::size_t k = 0; k < a.size(); k++) {
        const double d = std::fabs(a[k] - b[k]);
        if (!(d <= m)) m = d;  // a NaN difference makes m NaN, which fails every "<= tol"
    }
    return m;
}
bool all_finite(const TD& a) {
    for (double v : a.data)
        if (!std::isfinite(v)) return false;
    return true;
}
bool same_row(const TD& a, const TD& b, int i) {
    for (int j = 0; j < a.cols(); j++)
        if (!(a(i, j) == b(i, j))) return false;
    return true;
}
double row_diff(const TD& a, const TD& b, int i) {
    double m = 0;
    for (int j = 0; j < a.cols(); j++) m = std::max(m, std::fabs(a(i, j) - b(i, j)));
    return m;
}
std::vector<int> shp(int r, int c) { return {r, c}; }

// grad_check: central finite differences of a scalar loss against an analytic gradient.
//   loss() recomputes L (normally L = sum(Y .* R) for a fixed random R, so dY = R) from the current
//   value of x; every entry x_k is perturbed by +-h and restored:
//     num_k = (L(x + h e_k) - L(x - h e_k)) / (2h).
//   Tolerance: max_k |num_k - ana_k| / max(1, |ana_k|) <= tol = 1e-6. With h = 1e-6 the truncation
//   error is O(h^2) ~ 1e-12 and the rounding error ~ 1e-16 |L| / h ~ 1e-9, far below 1e-6, while a
//   wrong derivative (a missing term, a wrong sign or factor) is off by O(1).
//   The analytic gradient must have x's shape and (unless expect_nonzero is false) must not be all
//   zero, so a backward that does nothing cannot pass.
template <class F>
void grad_check(F&& loss, TD& x, const TD& ana, const std::string& what, double h = 1e-6, double tol = 1e-6,
                bool expect_nonzero = true) {
    INFO("gradient check of ", what);
    REQUIRE(ana.shape == x.shape);
    double worst = 0, worst_num = 0, worst_ana = 0;
    std::size_t worst_k = 0;
    for (std::size_t k = 0; k < x.size(); k++) {
        const double x0 = x[k];
        x[k] = x0 + h;
        const double lp = loss();
        x[k] = x0 - h;
        const double lm = loss();
        x[k] = x0;
        const double num = (lp - lm) / (2 * h);
        const double err = std::fabs(num - ana[k]) / std::max(1.0, std::fabs(ana[k]));
        if (!(err <= worst)) {  // also catches NaN
            worst = std::isnan(err) ? INF : err;
            worst_k = k, worst_num = num, worst_ana = ana[k];
        }
    }
    INFO("worst entry ", worst_k, ": numeric ", worst_num, ", analytic ", worst_ana);
    CHECK(worst <= tol);
    CHECK(all_finite(ana));
    if (expect_nonzero) CHECK(max_abs(ana) > 0);
}

// The message of the exception of type E thrown by f ("<no exception>" if none).
template <class E, class F>
std::string what_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("<exception of another type> ") + e.what();
    }
    return "<no exception>";
}
void check_message_has(const std::string& msg, const std::vector<std::string>& parts, const char* expr) {
    for (const std::string& part : parts) {
        INFO("expression: ", std::string(expr));
        INFO("message: '", msg, "' should contain '", part, "'");
        CHECK(msg.find(part) != std::string::npos);
    }
}
// expr must throw E, and its what() must contain every one of the strings that follow.
#define CHECK_THROWS_NAMING(E, expr, ...)                                                       \
    do {                                                                                        \
        CHECK_THROWS_AS((void)(expr), E);                                                       \
        check_message_has(what_of<E>([&] { (void)(expr); }), std::vector<std::string>{__VA_ARGS__}, #expr); \
    } while (0)

// Runs f in a child process (fork) and says how it ended: "threw: <what>" for an exception of type E,
// "threw another exception: <what>", "returned normally", or "crashed with signal N" / "died with
// exit status N". So an implementation that crashes on a bad input (null dereference, division by
// zero) fails one check instead of killing the whole suite.
template <class E, class F>
std::string outcome_in_child(F&& f) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    std::fflush(nullptr);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // child: default signal handlers (not doctest's crash reporter), report, _exit
        for (int sig : {SIGSEGV, SIGFPE, SIGILL, SIGBUS, SIGABRT}) std::signal(sig, SIG_DFL);
        close(fds[0]);
        std::string r;
        try {
            f();
            r = "returned normally";
        } catch (const E& e) {
            r = std::string("threw: ") + e.what();
        } catch (const std::exception& e) {
            r = std::string("threw another exception: ") + e.what();
        }
        const ssize_t written = write(fds[1], r.data(), r.size());
        _exit(written == (ssize_t)r.size() ? 0 : 1);
    }
    close(fds[1]);
    std::string r;
    char buf[512];
    ssize_t k;
    while ((k = read(fds[0], buf, sizeof buf)) > 0) r.append(buf, (std::size_t)k);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return "crashed with signal " + std::to_string(WTERMSIG(status));
    if (r.empty()) return "died with exit status " + std::to_string(WEXITSTATUS(status));
    return r;
}
// expr, run in a child process, must throw E whose what() contains every string that follows.
#define CHECK_THROWS_NAMING_NO_CRASH(E, expr, ...)                                                \
    do {                                                                                          \
        const std::string outcome_ = outcome_in_child<E>([&] { (void)(expr); });                  \
        INFO("expression: ", #expr);                                                              \
        INFO("outcome: ", outcome_);                                                              \
        const bool threw_ = outcome_.rfind("threw: ", 0) == 0;                                    \
        CHECK(threw_);                                                                            \
        if (threw_) check_message_has(outcome_, std::vector<std::string>{__VA_ARGS__}, #expr);    \
    } while (0)

// Random parameters of one multi-head self-attention: A heads, H -> D, W_O: AD x H.
MultiHeadSAParams<double> make_mhsa(int H, int A, int D, Rng& rng, double scale = 0.6) {
    MultiHeadSAParams<double> p;
    for (int i = 0; i < A; i++) {
        p.W_Q.push_back(randn(H, D, rng, scale));
        p.W_K.push_back(randn(H, D, rng, scale));
        p.W_V.push_back(randn(H, D, rng, scale));
    }
    p.W_O = randn(A * D, H, rng, scale);
    return p;
}
MultiHeadSAParams<double> zeros_like(const MultiHeadSAParams<double>& p) {
    MultiHeadSAParams<double> g;
    for (std::size_t i = 0; i < p.W_Q.size(); i++) {
        g.W_Q.push_back(TD(p.W_Q[i].shape));
        g.W_K.push_back(TD(p.W_K[i].shape));
        g.W_V.push_back(TD(p.W_V[i].shape));
    }
    g.W_O = TD(p.W_O.shape);
    return g;
}
FFNParams<double> make_ffn(int H, int F, Rng& rng) {
    FFNParams<double> p;
    p.W_1 = randn(H, F, rng, 0.7);
    p.b_1 = randn_vec(F, rng, 0.5);
    p.W_2 = randn(F, H, rng, 0.7);
    p.b_2 = randn_vec(H, rng, 0.5);
    return p;
}
FFNParams<double> zeros_like(const FFNParams<double>& p) {
    FFNParams<double> g;
    g.W_1 = TD(p.W_1.shape), g.b_1 = TD(p.b_1.shape), g.W_2 = TD(p.W_2.shape), g.b_2 = TD(p.b_2.shape);
    return g;
}

// Typed null pointers for the optional cache arguments (a bare nullptr cannot deduce T).
AttentionCache<double>* const kNoAttCache = nullptr;
MultiHeadSACache<double>* const kNoMhsaCache = nullptr;
FFNCache<double>* const kNoFfnCache = nullptr;
Rng* const kNoRng = nullptr;

const Activation kAllActivations[] = {Activation::relu, Activation::gelu_sigmoid, Activation::gelu_tanh,
                                      Activation::gelu_erf};
const Activation kGelus[] = {Activation::gelu_sigmoid, Activation::gelu_tanh, Activation::gelu_erf};

}  // namespace

// ================================================================================================
// Tensor basics (used by every module)
// ================================================================================================
TEST_CASE("Tensor: construction, from, vector, shape_str") {
    TD a(2, 3, 1.5);
    CHECK(a.shape == shp(2, 3));
    CHECK(a.rows() == 2);
    CHECK(a.cols() == 3);
    CHECK(a.size() == 6);
    for (double v : a.data) CHECK(v == 1.5);
    TD b = TD::from(2, 2, {1, 2, 3, 4});
    CHECK(b(1, 0) == 3);  // row-major: (1,0) is the third value
    TD v = TD::vector({7, 8, 9});
    CHECK(v.shape == std::vector<int>{3});
    CHECK(v.rows() == 1);
    CHECK(v.cols() == 3);
    CHECK(shape_str(b) == "2x2");
    CHECK(shape_str(v) == "3");
    CHECK(transpose(TD::from(2, 3, {1, 2, 3, 4, 5, 6})).data == std::vector<double>{1, 4, 2, 5, 3, 6});
    CHECK(add(b, b).data == std::vector<double>{2, 4, 6, 8});
}

TEST_CASE("Tensor: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, TD::from(2, 3, {1, 2, 3}), "2x3", "3 values");
    CHECK_THROWS_NAMING(ShapeError, TD(std::vector<int>{2, -3}), "2x-3");
    // Negative dimensions must not slip through from(): (size_t)(-1) * (-1) wraps around to 1.
    CHECK_THROWS_NAMING(ShapeError, TD::from(-1, -1, {5}), "-1x-1");
    CHECK_THROWS_NAMING(ShapeError, add(TD(3, 4), TD(4, 5)), "3x4", "4x5");
    CHECK_THROWS_NAMING(ShapeError, require_shape(TD(3, 4), {4, 3}, "here", "M"), "here", "M is 3x4", "4x3");
}

// ================================================================================================
// diag
// ================================================================================================
TEST_CASE("diag: hand-computed case") {
    // diag((2, -1, 3)) = [[2, 0, 0], [0, -1, 0], [0, 0, 3]]
    TD Y = diag(TD::vector({2, -1, 3}));
    REQUIRE(Y.shape == shp(3, 3));
    CHECK(Y.data == std::vector<double>{2, 0, 0, 0, -1, 0, 0, 0, 3});
    // dx_i = dY_{i,i}: the diagonal of [[1,2,3],[4,5,6],[7,8,9]] is (1, 5, 9).
    TD dx = diag_backward(TD::from(3, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9}));
    REQUIRE(dx.shape == std::vector<int>{3});
    CHECK(dx.data == std::vector<double>{1, 5, 9});
    // n = 1: diag((4)) = [[4]].
    CHECK(diag(TD::vector({4})).data == std::vector<double>{4});
}

TEST_CASE("diag: gradient check") {
    Rng rng(11);
    TD x = randn_vec(5, rng), R = randn(5, 5, rng);
    TD dx = diag_backward(R);
    grad_check([&] { return sum_prod(diag(x), R); }, x, dx, "diag dx");
}

TEST_CASE("diag: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, diag(TD(2, 3)), "2x3");
    CHECK_THROWS_NAMING(ShapeError, diag_backward(TD(2, 3)), "2x3");
    CHECK_THROWS_NAMING(ShapeError, diag_backward(TD::vector({1, 2, 3, 4, 5, 6, 7})), "7");
}

// ================================================================================================
// Stack
// ================================================================================================
TEST_CASE("Stack: hand-computed case") {
    // Stack_2((1, 2, 3)) = [[1, 2, 3], [1, 2, 3]]
    TD Y = Stack(TD::vector({1, 2, 3}), 2);
    REQUIRE(Y.shape == shp(2, 3));
    CHECK(Y.data == std::vector<double>{1, 2, 3, 1, 2, 3});
    // dx_j = sum_i dY_{i,j}: [[1,2,3],[10,20,30]] -> (11, 22, 33)
    TD dx = Stack_backward(TD::from(2, 3, {1, 2, 3, 10, 20, 30}));
    REQUIRE(dx.shape == std::vector<int>{3});
    CHECK(dx.data == std::vector<double>{11, 22, 33});
    // n = 0 gives an empty 0 x H matrix.
    CHECK(Stack(TD::vector({1, 2, 3}), 0).shape == shp(0, 3));
}

TEST_CASE("Stack: gradient check") {
    Rng rng(12);
    TD x = randn_vec(4, rng), R = randn(3, 4, rng);
    TD dx = Stack_backward(R);
    grad_check([&] { return sum_prod(Stack(x, 3), R); }, x, dx, "Stack dx");
}

TEST_CASE("Stack: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, Stack(TD(2, 3), 4), "2x3");
    CHECK_THROWS_NAMING(ShapeError, Stack(TD::vector({1, 2, 3}), -2), "-2x3");
    CHECK_THROWS_NAMING(ShapeError, Stack_backward(TD::vector({1, 2, 3, 4, 5})), "5");
}

// ================================================================================================
// OneHot
// ================================================================================================
TEST_CASE("OneHot: hand-computed case") {
    // Code ids {2, 0, 2} (formula ids 3, 1, 3), V = 4:
    //   [[0, 0, 1, 0],
    //    [1, 0, 0, 0],
    //    [0, 0, 1, 0]]
    TD Y = OneHot<double>({2, 0, 2}, 4);
    REQUIRE(Y.shape == shp(3, 4));
    CHECK(Y.data == std::vector<double>{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0});
    TF Yf = OneHot<float>({3}, 4);
    CHECK(Yf.data == std::vector<float>{0, 0, 0, 1});
    CHECK(OneHot<double>({}, 5).shape == shp(0, 5));
}

TEST_CASE("OneHot: every row has a single 1") {
    std::vector<int> x = {6, 0, 3, 3, 1, 6, 2};
    TD Y = OneHot<double>(x, 7);
    for (int i = 0; i < Y.rows(); i++) {
        double s = 0;
        for (int j = 0; j < 7; j++) {
            CHECK((Y(i, j) == 0 || Y(i, j) == 1));
            s += Y(i, j);
        }
        CHECK(s == 1);
        CHECK(Y(i, x[i]) == 1);
    }
}

// OneHot's input is discrete, so it has no gradient; the gradient of OneHot(x) W_e in W_e is
// checked under Embedding.
TEST_CASE("OneHot: bad ids") {
    CHECK_THROWS_NAMING(Error, OneHot<double>({0, 4}, 4), "token id 4", "position 1", "0..3");
    CHECK_THROWS_NAMING(Error, OneHot<double>({-1}, 4), "token id -1", "position 0");
    CHECK_THROWS_NAMING(Error, OneHot<float>({0}, 0), "token id 0");
}

// ================================================================================================
// Embedding: OneHot(x) W_e as a row lookup
// ================================================================================================
TEST_CASE("Embedding: hand-computed case") {
    // W_e = [[1, 2], [3, 4], [5, 6]] (V = 3, H = 2), x = {2, 0, 2}: rows W_e[2], W_e[0], W_e[2].
    TD W = TD::from(3, 2, {1, 2, 3, 4, 5, 6});
    TD Y = Embedding<double>({2, 0, 2}, W);
    REQUIRE(Y.shape == shp(3, 2));
    CHECK(Y.data == std::vector<double>{5, 6, 1, 2, 5, 6});
    // Backward, scatter-add into dW_e pre-filled with 0.5 (gradients accumulate):
    //   dY = [[1, 1], [10, 10], [100, 100]]: row 2 gets 1 + 100 = 101, row 0 gets 10, row 1 nothing.
    TD dW(3, 2, 0.5);
    Embedding_backward<double>({2, 0, 2}, TD::from(3, 2, {1, 1, 10, 10, 100, 100}), dW);
    CHECK(dW.data == std::vector<double>{10.5, 10.5, 0.5, 0.5, 101.5, 101.5});
}

TEST_CASE("Embedding: equals matmul(OneHot(x), W_e), backward equals matmul_tn(OneHot(x), dY)") {
    Rng rng(13);
    const int V = 7, H = 5;
    const std::vector<int> x = {3, 3, 0, 6, 3, 1, 0, 3};  // repeated ids: 3 four times, 0 twice
    TD W = randn(V, H, rng);
    TD OH = OneHot<double>(x, V);
    // A product with a one-hot row is exact (1 * w + 0 * ...), so the lookup must agree exactly.
    CHECK(max_abs_diff(Embedding(x, W), matmul(OH, W)) == 0);
    TD dY = randn((int)x.size(), H, rng);
    TD dW(V, H);
    Embedding_backward(x, dY, dW);
    TD ref = matmul_tn(OH, dY);
    CHECK(max_abs_diff(dW, ref) <= 1e-14);
    // Rows of ids that never occur (2, 4, 5) stay exactly 0.
    for (int v : {2, 4, 5})
        for (int j = 0; j < H; j++) CHECK(dW(v, j) == 0);
    // Float too.
    TF Wf = to_float(W);
    CHECK(Embedding(x, Wf).data == matmul(OneHot<float>(x, V), Wf).data);
}

TEST_CASE("Embedding: gradient check") {
    Rng rng(14);
    const std::vector<int> x = {1, 4, 1, 0, 1};
    TD W = randn(5, 3, rng), R = randn(5, 3, rng);
    TD dW(5, 3);
    Embedding_backward(x, R, dW);
    grad_check([&] { return sum_prod(Embedding(x, W), R); }, W, dW, "Embedding dW_e");
}

TEST_CASE("Embedding: wrong shape and bad ids") {
    TD W(3, 2);
    CHECK_THROWS_NAMING(ShapeError, Embedding<double>({0}, TD::vector({1, 2, 3, 4, 5})), "5");
    CHECK_THROWS_NAMING(Error, Embedding<double>({0, 3}, W), "token id 3", "position 1", "0..2");
    CHECK_THROWS_NAMING(Error, Embedding<double>({-1}, W), "token id -1");
    CHECK_THROWS_NAMING(ShapeError, Embedding_backward<double>({0, 1, 2}, TD(2, 3), W), "2x3", "3x2");
    TD v = TD::vector({1, 2, 3});
    CHECK_THROWS_NAMING(ShapeError, Embedding_backward<double>({0}, TD(1, 3), v), "3");
    CHECK_THROWS_NAMING(Error, Embedding_backward<double>({0, 7}, TD(2, 2), W), "token id 7");
}

// ================================================================================================
// Softmax
// ================================================================================================
TEST_CASE("Softmax: hand-computed case") {
    // Row 0: e^{ln 1}, e^{ln 2}, e^{ln 5} = 1, 2, 5, sum 8 -> (1/8, 2/8, 5/8).
    // Row 1: equal entries -> (1/3, 1/3, 1/3).
    // Row 2: (0, -inf, ln 3) -> e^0, 0, 3, sum 4 -> (1/4, 0, 3/4); the -inf entry gets exactly 0.
    TD X = TD::from(3, 3, {0, std::log(2.0), std::log(5.0), 7, 7, 7, 0, -INF, std::log(3.0)});
    TD Y = Softmax(X);
    REQUIRE(Y.shape == shp(3, 3));
    const std::vector<double> expect = {0.125, 0.25, 0.625, 1. / 3, 1. / 3, 1. / 3, 0.25, 0, 0.75};
    for (std::size_t k = 0; k < expect.size(); k++) CHECK(Y[k] == doctest::Approx(expect[k]).epsilon(1e-14));
    CHECK(Y(2, 1) == 0.0);
    // Backward, dX = Y * (dY - rowsum(dY * Y)): row 0 with dY = (1, 0, 0):
    //   rowsum = 1/8, dX = (1/8 (1 - 1/8), 2/8 (0 - 1/8), 5/8 (0 - 1/8)) = (7/64, -2/64, -5/64).
    TD dY(3, 3);
    dY(0, 0) = 1;
    TD dX = Softmax_backward(Y, dY);
    CHECK(dX(0, 0) == doctest::Approx(7.0 / 64).epsilon(1e-14));
    CHECK(dX(0, 1) == doctest::Approx(-2.0 / 64).epsilon(1e-14));
    CHECK(dX(0, 2) == doctest::Approx(-5.0 / 64).epsilon(1e-14));
    for (int j = 0; j < 3; j++) CHECK(dX(1, j) == 0.0);
}

TEST_CASE("Softmax: gradient check, including a row with -inf entries") {
    Rng rng(15);
    TD X = randn(4, 5, rng, 2.0);
    X(1, 0) = -INF, X(1, 3) = -INF;  // row 1 has two masked entries
    TD R = randn(4, 5, rng);
    TD Y = Softmax(X);
    TD dX = Softmax_backward(Y, R);
    CHECK(all_finite(dX));
    // The -inf entries: probability exactly 0 and gradient exactly 0 (and not NaN).
    CHECK(Y(1, 0) == 0.0);
    CHECK(Y(1, 3) == 0.0);
    CHECK(dX(1, 0) == 0.0);
    CHECK(dX(1, 3) == 0.0);
    // The finite-difference perturbation of a -inf entry leaves it -inf, so its numeric gradient is 0.
    grad_check([&] { return sum_prod(Softmax(X), R); }, X, dX, "Softmax dX");
}

TEST_CASE("Softmax: rows sum to 1, huge inputs, -inf entries, all -inf row") {
    Rng rng(16);
    TD X = randn(6, 9, rng, 3.0);
    TD Y = Softmax(X);
    for (int i = 0; i < 6; i++) {
        double s = 0;
        for (int j = 0; j < 9; j++) {
            CHECK(Y(i, j) > 0);
            s += Y(i, j);
        }
        CHECK(s == doctest::Approx(1.0).epsilon(1e-14));
    }
    // Huge inputs: e^1000 overflows, the stable form does not. (1000, 1001, 1002) gives the same as
    // (0, 1, 2): e^0, e^1, e^2 over their sum.
    TD big = Softmax(TD::from(2, 3, {1000, 1001, 1002, -1000, -1001, -1002}));
    const double z = 1 + std::exp(1.0) + std::exp(2.0);
    CHECK(big(0, 0) == doctest::Approx(1 / z).epsilon(1e-14));
    CHECK(big(0, 1) == doctest::Approx(std::exp(1.0) / z).epsilon(1e-14));
    CHECK(big(0, 2) == doctest::Approx(std::exp(2.0) / z).epsilon(1e-14));
    CHECK(big(1, 0) == doctest::Approx(std::exp(2.0) / z).epsilon(1e-14));
    CHECK(big(1, 2) == doctest::Approx(1 / z).epsilon(1e-14));
    TF bigf = Softmax(TF::from(1, 2, {1000.f, 1000.f}));
    CHECK(bigf(0, 0) == 0.5f);
    CHECK(bigf(0, 1) == 0.5f);
    // -inf entries get exactly 0; an all -inf row gives zeros, not NaN, and so does its backward.
    TD M = TD::from(2, 3, {-INF, 2, -INF, -INF, -INF, -INF});
    TD Ym = Softmax(M);
    CHECK(Ym.data == std::vector<double>{0, 1, 0, 0, 0, 0});
    TD dXm = Softmax_backward(Ym, TD(2, 3, 1.0));
    CHECK(dXm.data == std::vector<double>{0, 0, 0, 0, 0, 0});
    TF Mf = TF::from(1, 2, {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()});
    CHECK(Softmax(Mf).data == std::vector<float>{0, 0});
    // Softmax is invariant to adding a constant per row.
    TD X2 = X;
    for (int j = 0; j < 9; j++) X2(2, j) += 50;
    CHECK(max_abs_diff(Softmax(X2), Y) <= 1e-14);
}

TEST_CASE("Softmax: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, Softmax(TD::vector({1, 2, 3, 4, 5})), "Softmax", "5");
    CHECK_THROWS_NAMING(ShapeError, Softmax_backward(TD(2, 3), TD(3, 2)), "2x3", "3x2");
    CHECK_THROWS_NAMING(ShapeError, Softmax_backward(TD::vector({1, 2}), TD::vector({1, 2})), "2");
}

// ================================================================================================
// Masks
// ================================================================================================
TEST_CASE("Mask_BD: hand-computed case") {
    // (Mask^BD)_{i,j} = 1 for all i, j.
    TD M = Mask_BD<double>(3);
    REQUIRE(M.shape == shp(3, 3));
    CHECK(M.data == std::vector<double>(9, 1.0));
    CHECK(Mask_BD<float>(1).data == std::vector<float>{1});
    CHECK(Mask_BD<double>(0).shape == shp(0, 0));
}

TEST_CASE("Mask_BD: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, Mask_BD<double>(-2), "-2x-2");
}

TEST_CASE("Mask_AR: hand-computed case (the seed's n = 4 example)") {
    // [[1, -inf, -inf, -inf], [1, 1, -inf, -inf], [1, 1, 1, -inf], [1, 1, 1, 1]]
    TD M = Mask_AR<double>(4);
    REQUIRE(M.shape == shp(4, 4));
    const std::vector<double> expect = {1, -INF, -INF, -INF, 1, 1, -INF, -INF, 1, 1, 1, -INF, 1, 1, 1, 1};
    CHECK(M.data == expect);
}

TEST_CASE("Mask_AR: definition entry by entry") {
    for (int n : {1, 2, 5, 9}) {
        TF M = Mask_AR<float>(n);
        REQUIRE(M.shape == shp(n, n));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                CHECK(M(i, j) == (j > i ? -std::numeric_limits<float>::infinity() : 1.0f));
    }
}

TEST_CASE("Mask_AR: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, Mask_AR<double>(-3), "-3x-3");
}

TEST_CASE("Mask_ST: hand-computed case") {
    // n = 6, window 2, stride 3: keep j <= i with i - j < 2 or (i - j) % 3 == 0.
    //   i=0: j=0            i=3: j=0 (3%3), 2, 3      i=5: j=2 (3%3), 4, 5
    //   i=1: j=0, 1         i=4: j=1 (3%3), 3, 4
    //   i=2: j=1, 2
    const double o = 1, x = -INF;
    const std::vector<double> expect = {o, x, x, x, x, x,  //
                                        o, o, x, x, x, x,  //
                                        x, o, o, x, x, x,  //
                                        o, x, o, o, x, x,  //
                                        x, o, x, o, o, x,  //
                                        x, x, o, x, o, o};
    CHECK(Mask_ST<double>(6, 2, 3).data == expect);
    // stride 0: only the band.
    CHECK(Mask_ST<double>(3, 1, 0).data == std::vector<double>{o, x, x, x, o, x, x, x, o});
}

TEST_CASE("Mask_ST: matches its definition entry by entry and is causal") {
    struct Case {
        int n, window, stride;
    };
    for (Case c : {Case{1, 1, 0}, Case{5, 1, 0}, Case{7, 2, 0}, Case{8, 3, 4}, Case{10, 2, 3}, Case{9, 1, 1},
                   Case{6, 10, 0}, Case{12, 4, 5}}) {
        CAPTURE(c.n);
        CAPTURE(c.window);
        CAPTURE(c.stride);
        TD M = Mask_ST<double>(c.n, c.window, c.stride);
        REQUIRE(M.shape == shp(c.n, c.n));
        for (int i = 0; i < c.n; i++)
            for (int j = 0; j < c.n; j++) {
                const bool keep =
                    j <= i && (i - j < c.window || (c.stride > 0 && (i - j) % c.stride == 0));
                CHECK(M(i, j) == (keep ? 1.0 : -INF));
                if (j > i) CHECK(M(i, j) == -INF);  // causal
            }
    }
    // A window of at least n is the autoregressive mask; stride 1 keeps everything causal too.
    CHECK(Mask_ST<double>(6, 6, 0).data == Mask_AR<double>(6).data);
    CHECK(Mask_ST<double>(6, 1, 1).data == Mask_AR<double>(6).data);
}

TEST_CASE("Mask_ST: wrong shape and bad arguments") {
    CHECK_THROWS_NAMING(Error, Mask_ST<double>(4, 0, 1), "window", "0");
    CHECK_THROWS_NAMING(Error, Mask_ST<double>(4, 2, -1), "stride", "-1");
    CHECK_THROWS_NAMING(ShapeError, Mask_ST<double>(-4, 2, 1), "-4x-4");
}

TEST_CASE("apply_mask: hand-computed case") {
    // A 1 keeps the score, a -inf replaces it by -inf (no 0 * inf product, so even a +inf or NaN
    // score under a -inf entry becomes -inf):
    //   Mask [[1, -inf, -inf], [1, 1, -inf]] (.) S [[2, 3, +inf], [-4, 5, NaN]]
    //     = [[2, -inf, -inf], [-4, 5, -inf]]
    TD Mask = TD::from(2, 3, {1, -INF, -INF, 1, 1, -INF});
    TD S = TD::from(2, 3, {2, 3, INF, -4, 5, std::numeric_limits<double>::quiet_NaN()});
    TD R = apply_mask(Mask, S);
    CHECK(R.data == std::vector<double>{2, -INF, -INF, -4, 5, -INF});
    // With Mask_BD nothing changes.
    Rng rng(17);
    TD S2 = randn(4, 4, rng);
    CHECK(apply_mask(Mask_BD<double>(4), S2).data == S2.data);
    // Softmax after masking: the masked entries get probability exactly 0.
    TD P = Softmax(apply_mask(Mask_AR<double>(4), S2));
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) CHECK(P(i, j) == 0.0);
}

TEST_CASE("apply_mask: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, apply_mask(Mask_AR<double>(3), TD(3, 4)), "3x3", "3x4");
}

// ================================================================================================
// Attention
// ================================================================================================
TEST_CASE("Attention: hand-computed case") {
    // n = 2, D = 4 (sqrt(D) = 2). Q rows (2, 0, 0, 0), K rows (0, 0, 0, 0) and (ln 3, 0, 0, 0):
    //   Q K^T / sqrt(D) = [[0, 2 ln3 / 2], [0, ln 3]] = [[0, ln 3], [0, ln 3]].
    // Mask_BD: P rows = (1, 3) / 4 = (1/4, 3/4);  V = [[1, 0, 0, 2], [5, 1, 0, -2]]:
    //   O rows = 1/4 (1, 0, 0, 2) + 3/4 (5, 1, 0, -2) = (4, 0.75, 0, -1).
    // Mask_AR: row 0 sees only key 0: O row 0 = V row 0 = (1, 0, 0, 2); row 1 as above.
    const double l3 = std::log(3.0);
    TD Q = TD::from(2, 4, {2, 0, 0, 0, 2, 0, 0, 0});
    TD K = TD::from(2, 4, {0, 0, 0, 0, l3, 0, 0, 0});
    TD V = TD::from(2, 4, {1, 0, 0, 2, 5, 1, 0, -2});
    AttentionCache<double> c;
    TD O = Attention(Q, K, V, Mask_BD<double>(2), &c);
    REQUIRE(O.shape == shp(2, 4));
    const std::vector<double> bd = {4, 0.75, 0, -1, 4, 0.75, 0, -1};
    for (std::size_t k = 0; k < bd.size(); k++) CHECK(O[k] == doctest::Approx(bd[k]).epsilon(1e-14));
    REQUIRE(c.P.shape == shp(2, 2));
    CHECK(c.P(0, 0) == doctest::Approx(0.25).epsilon(1e-14));
    CHECK(c.P(0, 1) == doctest::Approx(0.75).epsilon(1e-14));
    TD Oar = Attention(Q, K, V, Mask_AR<double>(2), &c);
    const std::vector<double> ar = {1, 0, 0, 2, 4, 0.75, 0, -1};
    for (std::size_t k = 0; k < ar.size(); k++) CHECK(Oar[k] == doctest::Approx(ar[k]).epsilon(1e-14));
    CHECK(c.P(0, 1) == 0.0);
    // With dropout scales [[2, 0], [0, 2]] (p = 1/2) under Mask_BD:
    //   row 0: P (.) drop = (1/2, 0)   -> O = 1/2 (1, 0, 0, 2)  = (0.5, 0, 0, 1)
    //   row 1: P (.) drop = (0, 3/2)   -> O = 3/2 (5, 1, 0, -2) = (7.5, 1.5, 0, -3)
    TD drop = TD::from(2, 2, {2, 0, 0, 2});
    TD Od = Attention(Q, K, V, Mask_BD<double>(2), &c, &drop);
    const std::vector<double> dr = {0.5, 0, 0, 1, 7.5, 1.5, 0, -3};
    for (std::size_t k = 0; k < dr.size(); k++) CHECK(Od[k] == doctest::Approx(dr[k]).epsilon(1e-14));
    // The cache keeps P itself (before dropout): rows still sum to 1.
    CHECK(c.P(1, 0) + c.P(1, 1) == doctest::Approx(1.0));
    // An empty dropout tensor means no dropout.
    TD none;
    CHECK(max_abs_diff(Attention(Q, K, V, Mask_BD<double>(2), kNoAttCache, &none), O) == 0);
}

namespace {
// dQ, dK, dV of Attention against finite differences, optionally with fixed dropout scales.
// qk_nonzero = false where every row sees one key only (P = 1 whatever Q and K): dQ = dK = 0 there.
void attention_grad_check(const TD& Mask, const TD* drop, uint64_t seed, const std::string& what,
                          bool qk_nonzero = true) {
    const int n = Mask.rows(), D = 3;
    Rng rng(seed);
    TD Q = randn(n, D, rng), K = randn(n, D, rng), V = randn(n, D, rng), R = randn(n, D, rng);
    AttentionCache<double> c;
    Attention(Q, K, V, Mask, &c, drop);
    TD dQ, dK, dV;
    Attention_backward(Q, K, V, c, R, dQ, dK, dV, drop);
    auto L = [&] { return sum_prod(Attention(Q, K, V, Mask, kNoAttCache, drop), R); };
    grad_check(L, Q, dQ, what + " dQ", 1e-6, 1e-6, qk_nonzero);
    grad_check(L, K, dK, what + " dK", 1e-6, 1e-6, qk_nonzero);
    if (!qk_nonzero) {
        CHECK(max_abs(dQ) == 0.0);
        CHECK(max_abs(dK) == 0.0);
    }
    grad_check(L, V, dV, what + " dV");
}
}  // namespace

TEST_CASE("Attention: gradient check of dQ, dK, dV under Mask_AR, Mask_BD, Mask_ST") {
    attention_grad_check(Mask_AR<double>(5), nullptr, 21, "Mask_AR");
    attention_grad_check(Mask_BD<double>(5), nullptr, 22, "Mask_BD");
    attention_grad_check(Mask_ST<double>(7, 2, 3), nullptr, 23, "Mask_ST(7,2,3)");
    attention_grad_check(Mask_ST<double>(9, 3, 4), nullptr, 24, "Mask_ST(9,3,4)");
    // Only the diagonal (and n = 1): the output is V itself, Q and K get exactly zero gradient.
    attention_grad_check(Mask_ST<double>(6, 1, 0), nullptr, 25, "Mask_ST(6,1,0)", false);
    attention_grad_check(Mask_BD<double>(1), nullptr, 26, "n = 1", false);
}

TEST_CASE("Attention: gradient check with fixed dropout scales") {
    Rng rng(26);
    TD drop = dropout_mask<double>({5, 5}, 0.4, rng);
    int zeros = 0;
    for (double v : drop.data) zeros += v == 0;
    REQUIRE(zeros > 0);
    REQUIRE(zeros < 25);
    attention_grad_check(Mask_AR<double>(5), &drop, 27, "Mask_AR + dropout");
    attention_grad_check(Mask_BD<double>(5), &drop, 28, "Mask_BD + dropout");
}

namespace {
// Row i of Attention's output must change when row j of V changes iff Mask(i, j) keeps it. Q and K
// enter only through the scores, which matter only in a row that sees at least two keys (a row
// seeing one key has P = 1 there whatever the scores): row j of K changes output row i iff Mask(i, j)
// keeps it and row i sees two or more keys; row j of Q only output row j (if it sees two keys).
void check_attention_dependence(const TD& Mask, uint64_t seed) {
    const int n = Mask.rows(), D = 3;
    Rng rng(seed);
    TD Q = randn(n, D, rng), K = randn(n, D, rng), V = randn(n, D, rng);
    TD O = Attention(Q, K, V, Mask);
    for (int which = 0; which < 3; which++) {
        for (int j = 0; j < n; j++) {
            TD Q2 = Q, K2 = K, V2 = V;
            TD& M = which == 0 ? Q2 : which == 1 ? K2 : V2;
            for (int d = 0; d < D; d++) M(j, d) += 0.5 + 0.25 * d;
            TD O2 = Attention(Q2, K2, V2, Mask);
            for (int i = 0; i < n; i++) {
                CAPTURE(which);  // 0: Q, 1: K, 2: V
                CAPTURE(i);
                CAPTURE(j);
                int visible = 0;
                for (int k = 0; k < n; k++) visible += Mask(i, k) == 1.0;
                const bool depends = which == 0   ? i == j && visible >= 2
                                     : which == 1 ? Mask(i, j) == 1.0 && visible >= 2
                                                  : Mask(i, j) == 1.0;
                if (depends)
                    CHECK(row_diff(O, O2, i) > 1e-9);
                else
                    CHECK(same_row(O, O2, i));  // exactly unchanged
            }
        }
    }
}
}  // namespace

TEST_CASE("Attention: Mask_AR row i ignores rows j > i, Mask_BD sees every row, Mask_ST its pattern") {
    check_attention_dependence(Mask_AR<double>(5), 31);
    check_attention_dependence(Mask_BD<double>(5), 32);
    check_attention_dependence(Mask_ST<double>(8, 2, 3), 33);
}

TEST_CASE("Attention: masked positions get probability exactly 0 and gradient exactly 0") {
    for (const TD& Mask : {Mask_AR<double>(6), Mask_ST<double>(8, 2, 3)}) {
        const int n = Mask.rows(), D = 4;
        Rng rng(34);
        TD Q = randn(n, D, rng, 2.0), K = randn(n, D, rng, 2.0), V = randn(n, D, rng);
        AttentionCache<double> c;
        Attention(Q, K, V, Mask, &c);
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int j = 0; j < n; j++) {
                if (Mask(i, j) == -INF) CHECK(c.P(i, j) == 0.0);
                else CHECK(c.P(i, j) > 0.0);
                s += c.P(i, j);
            }
            CHECK(s == doctest::Approx(1.0).epsilon(1e-14));
        }
        // A gradient on output row i only: keys and values that row i cannot see get exactly 0,
        // other query rows get exactly 0.
        for (int i = 0; i < n; i++) {
            TD dO(n, D);
            for (int d = 0; d < D; d++) dO(i, d) = 1.0 + d;
            TD dQ, dK, dV;
            Attention_backward(Q, K, V, c, dO, dQ, dK, dV);
            for (int j = 0; j < n; j++) {
                CAPTURE(i);
                CAPTURE(j);
                if (Mask(i, j) == -INF) {
                    CHECK(max_abs(TD::from(1, D, std::vector<double>(dK.row(j), dK.row(j) + D))) == 0.0);
                    CHECK(max_abs(TD::from(1, D, std::vector<double>(dV.row(j), dV.row(j) + D))) == 0.0);
                } else {
                    CHECK(max_abs(TD::from(1, D, std::vector<double>(dV.row(j), dV.row(j) + D))) > 0.0);
                }
                if (j != i) CHECK(max_abs(TD::from(1, D, std::vector<double>(dQ.row(j), dQ.row(j) + D))) == 0.0);
            }
            CHECK(all_finite(dQ));
            CHECK(all_finite(dK));
        }
    }
}

TEST_CASE("Attention: a fully masked row gives zeros, not NaN") {
    Rng rng(35);
    TD Q = randn(3, 2, rng), K = randn(3, 2, rng), V = randn(3, 2, rng);
    TD Mask = Mask_AR<double>(3);
    Mask(1, 0) = -INF, Mask(1, 1) = -INF;  // row 1 sees nothing
    AttentionCache<double> c;
    TD O = Attention(Q, K, V, Mask, &c);
    CHECK(all_finite(O));
    CHECK(O(1, 0) == 0.0);
    CHECK(O(1, 1) == 0.0);
    TD dQ, dK, dV;
    Attention_backward(Q, K, V, c, TD(3, 2, 1.0), dQ, dK, dV);
    CHECK(all_finite(dQ));
    CHECK(all_finite(dK));
    CHECK(all_finite(dV));
    CHECK(dQ(1, 0) == 0.0);
    CHECK(dQ(1, 1) == 0.0);
}

TEST_CASE("Attention: float agrees with double") {
    Rng rng(36);
    TD Q = randn(6, 4, rng), K = randn(6, 4, rng), V = randn(6, 4, rng);
    TD O = Attention(Q, K, V, Mask_AR<double>(6));
    TF Of = Attention(to_float(Q), to_float(K), to_float(V), Mask_AR<float>(6));
    for (std::size_t k = 0; k < O.size(); k++) CHECK(Of[k] == doctest::Approx(O[k]).epsilon(1e-5));
}

TEST_CASE("Attention: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD(3, 5), TD(3, 4), Mask_BD<double>(3)), "3x4", "3x5");
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD(3, 4), TD(2, 4), Mask_BD<double>(3)), "3x4", "2x4");
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD(3, 4), TD(3, 4), Mask_BD<double>(2)), "Mask", "2x2",
                        "3x3");
    TD drop(2, 2, 1.0);
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD(3, 4), TD(3, 4), Mask_BD<double>(3), kNoAttCache, &drop),
                        "3x3", "2x2");
    CHECK_THROWS_NAMING(ShapeError, Attention(TD::vector({1, 2}), TD::vector({1, 2}), TD::vector({1, 2}),
                                              Mask_BD<double>(1)),
                        "Q");
    AttentionCache<double> c;
    Rng rng(37);
    TD Q = randn(3, 4, rng);
    Attention(Q, Q, Q, Mask_AR<double>(3), &c);
    TD dQ, dK, dV;
    CHECK_THROWS_NAMING(ShapeError, Attention_backward(Q, Q, Q, c, TD(4, 3), dQ, dK, dV), "3x4", "4x3");
}

// ================================================================================================
// Concat
// ================================================================================================
TEST_CASE("Concat: hand-computed case") {
    // Concat([[1,2],[3,4]], [[5,6],[7,8]], [[9,10],[11,12]]) = [[1,2,5,6,9,10],[3,4,7,8,11,12]]
    std::vector<TD> X = {TD::from(2, 2, {1, 2, 3, 4}), TD::from(2, 2, {5, 6, 7, 8}), TD::from(2, 2, {9, 10, 11, 12})};
    TD Y = Concat(X);
    REQUIRE(Y.shape == shp(2, 6));
    CHECK(Y.data == std::vector<double>{1, 2, 5, 6, 9, 10, 3, 4, 7, 8, 11, 12});
    // The backward splits the columns back into the blocks.
    std::vector<TD> dX = Concat_backward(Y, 3);
    REQUIRE(dX.size() == 3);
    for (int k = 0; k < 3; k++) CHECK(dX[k].data == X[k].data);
    // A single block is the identity.
    CHECK(Concat(std::vector<TD>{X[1]}).data == X[1].data);
}

TEST_CASE("Concat: gradient check") {
    Rng rng(41);
    std::vector<TD> X = {randn(3, 2, rng), randn(3, 2, rng), randn(3, 2, rng), randn(3, 2, rng)};
    TD R = randn(3, 8, rng);
    std::vector<TD> dX = Concat_backward(R, 4);
    REQUIRE(dX.size() == 4);
    for (int k = 0; k < 4; k++)
        grad_check([&] { return sum_prod(Concat(X), R); }, X[k], dX[k], "Concat dX_" + std::to_string(k));
}

TEST_CASE("Concat: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, Concat(std::vector<TD>{TD(2, 2), TD(2, 3)}), "2x2", "2x3");
    CHECK_THROWS_NAMING(ShapeError, Concat(std::vector<TD>{TD(2, 2), TD(3, 2)}), "2x2", "3x2");
    CHECK_THROWS_AS(Concat(std::vector<TD>{}), ShapeError);
    CHECK_THROWS_NAMING(ShapeError, Concat(std::vector<TD>{TD::vector({1, 2, 3})}), "3");
    CHECK_THROWS_NAMING(ShapeError, Concat_backward(TD(2, 5), 2), "2x5", "2");
    CHECK_THROWS_NAMING(ShapeError, Concat_backward(TD(2, 4), 0), "2x4");
    CHECK_THROWS_NAMING(ShapeError, Concat_backward(TD::vector({1, 2, 3, 4}), 2), "4");
}

// ================================================================================================
// MultiHeadSA
// ================================================================================================
TEST_CASE("MultiHeadSA: hand-computed case") {
    // n = 2, H = 2, A = 2 heads of D = 1. W_Q = 0, so every score is 0 and attention averages the
    // visible values. X = [[1, 2], [3, 4]];
    //   head 1: W_V = (1, 0)^T -> V = (1, 3);  head 2: W_V = (0, 1)^T -> V = (2, 4).
    // Mask_BD: head 1 = (2, 2), head 2 = (3, 3); Concat = [[2, 3], [2, 3]];
    //   W_O = [[1, 2], [3, 4]]: Y rows = (2*1 + 3*3, 2*2 + 3*4) = (11, 16).
    // Mask_AR: head 1 = (1, 2), head 2 = (2, 3); Concat = [[1, 2], [2, 3]];
    //   Y row 0 = (1 + 6, 2 + 8) = (7, 10), row 1 = (2 + 9, 4 + 12) = (11, 16).
    MultiHeadSAParams<double> p;
    p.W_Q = {TD(2, 1), TD(2, 1)};
    p.W_K = {TD::from(2, 1, {1, 1}), TD::from(2, 1, {-1, 2})};
    p.W_V = {TD::from(2, 1, {1, 0}), TD::from(2, 1, {0, 1})};
    p.W_O = TD::from(2, 2, {1, 2, 3, 4});
    TD X = TD::from(2, 2, {1, 2, 3, 4});
    TD Y = MultiHeadSA(X, Mask_BD<double>(2), p);
    REQUIRE(Y.shape == shp(2, 2));
    const std::vector<double> bd = {11, 16, 11, 16};
    for (std::size_t k = 0; k < 4; k++) CHECK(Y[k] == doctest::Approx(bd[k]).epsilon(1e-14));
    TD Yar = MultiHeadSA(X, Mask_AR<double>(2), p);
    const std::vector<double> ar = {7, 10, 11, 16};
    for (std::size_t k = 0; k < 4; k++) CHECK(Yar[k] == doctest::Approx(ar[k]).epsilon(1e-14));
}

TEST_CASE("MultiHeadSA: equals Concat(Attention(X W_i^Q, X W_i^K, X W_i^V, Mask)) W^O") {
    Rng rng(51);
    const int n = 5, H = 6, A = 3, D = 2;
    MultiHeadSAParams<double> p = make_mhsa(H, A, D, rng);
    TD X = randn(n, H, rng);
    for (const TD& Mask : {Mask_AR<double>(n), Mask_BD<double>(n), Mask_ST<double>(n, 2, 2)}) {
        std::vector<TD> heads;
        for (int i = 0; i < A; i++)
            heads.push_back(Attention(matmul(X, p.W_Q[i]), matmul(X, p.W_K[i]), matmul(X, p.W_V[i]), Mask));
        TD ref = matmul(Concat(heads), p.W_O);
        MultiHeadSACache<double> c;
        TD Y = MultiHeadSA(X, Mask, p, &c);
        CHECK(max_abs_diff(Y, ref) <= 1e-13);
        REQUIRE(c.head.size() == (std::size_t)A);
        for (int i = 0; i < A; i++) CHECK(max_abs_diff(c.head[i], heads[i]) <= 1e-13);
        // Without dropout the dropout slots are empty.
        for (auto& per_head : c.dropout)
            for (auto& d : per_head) CHECK(d.empty());
    }
}

namespace {
// dX and every W_Q[i], W_K[i], W_V[i], W_O of MultiHeadSA against finite differences.
// With dropout, the forward draws the masks from the Rng, so it is re-seeded identically before
// every forward: the analytic run's cache then holds the very masks the numeric runs use.
void mhsa_grad_check(const TD& Mask, int B, int A, double attn_dropout, uint64_t seed, const std::string& what) {
    const int n = Mask.rows(), H = 4, D = 2;
    Rng rng(seed);
    MultiHeadSAParams<double> p = make_mhsa(H, A, D, rng);
    TD X = randn(B * n, H, rng), R = randn(B * n, H, rng);
    const uint64_t drop_seed = seed * 7 + 1;
    auto forward = [&](MultiHeadSACache<double>* c) {
        Rng r(drop_seed);
        return MultiHeadSA(X, Mask, p, c, attn_dropout, attn_dropout > 0 ? &r : nullptr);
    };
    MultiHeadSACache<double> c;
    forward(&c);
    if (attn_dropout > 0) {  // the dropout is really active: some probabilities are dropped
        int zeros = 0, total = 0;
        for (auto& per_head : c.dropout)
            for (auto& d : per_head) {
                REQUIRE(d.shape == shp(n, n));
                for (double v : d.data) zeros += v == 0, total++;
            }
        REQUIRE(zeros > 0);
        REQUIRE(zeros < total);
    }
    MultiHeadSAParams<double> g = zeros_like(p);
    TD dX = MultiHeadSA_backward(X, p, c, R, g);
    auto L = [&] { return sum_prod(forward(nullptr), R); };
    grad_check(L, X, dX, what + " dX");
    for (int i = 0; i < A; i++) {
        const std::string h = "[" + std::to_string(i) + "]";
        grad_check(L, p.W_Q[i], g.W_Q[i], what + " W_Q" + h);
        grad_check(L, p.W_K[i], g.W_K[i], what + " W_K" + h);
        grad_check(L, p.W_V[i], g.W_V[i], what + " W_V" + h);
    }
    grad_check(L, p.W_O, g.W_O, what + " W_O");
}
}  // namespace

TEST_CASE("MultiHeadSA: gradient check of dX, W_Q, W_K, W_V, W_O (B = 2, A = 2)") {
    mhsa_grad_check(Mask_AR<double>(4), 2, 2, 0.0, 52, "Mask_AR");
    mhsa_grad_check(Mask_BD<double>(4), 2, 2, 0.0, 53, "Mask_BD");
    mhsa_grad_check(Mask_ST<double>(5, 2, 3), 2, 2, 0.0, 54, "Mask_ST");
    mhsa_grad_check(Mask_AR<double>(3), 1, 3, 0.0, 55, "B = 1, A = 3");
}

TEST_CASE("MultiHeadSA: gradient check with attention dropout (B = 2, A = 2)") {
    mhsa_grad_check(Mask_AR<double>(4), 2, 2, 0.3, 56, "Mask_AR + dropout");
    mhsa_grad_check(Mask_BD<double>(4), 2, 2, 0.3, 57, "Mask_BD + dropout");
}

TEST_CASE("MultiHeadSA: parameter gradients accumulate") {
    Rng rng(58);
    MultiHeadSAParams<double> p = make_mhsa(4, 2, 2, rng);
    TD X = randn(6, 4, rng), R = randn(6, 4, rng);
    MultiHeadSACache<double> c;
    MultiHeadSA(X, Mask_AR<double>(3), p, &c);
    MultiHeadSAParams<double> g1 = zeros_like(p), g2 = zeros_like(p);
    // g1 receives the gradient twice, g2 three times: g2 = 1.5 g1.
    MultiHeadSA_backward(X, p, c, R, g1);
    MultiHeadSA_backward(X, p, c, R, g2);
    TD dX2 = MultiHeadSA_backward(X, p, c, R, g2);
    TD dX1 = MultiHeadSA_backward(X, p, c, R, g1);
    MultiHeadSA_backward(X, p, c, R, g2);
    CHECK(max_abs_diff(dX1, dX2) == 0);  // dX is returned, not accumulated
    for (int i = 0; i < 2; i++) {
        for (std::size_t k = 0; k < g1.W_Q[i].size(); k++) {
            CHECK(g2.W_Q[i][k] == doctest::Approx(1.5 * g1.W_Q[i][k]).epsilon(1e-12));
            CHECK(g2.W_K[i][k] == doctest::Approx(1.5 * g1.W_K[i][k]).epsilon(1e-12));
            CHECK(g2.W_V[i][k] == doctest::Approx(1.5 * g1.W_V[i][k]).epsilon(1e-12));
        }
    }
    for (std::size_t k = 0; k < g1.W_O.size(); k++)
        CHECK(g2.W_O[k] == doctest::Approx(1.5 * g1.W_O[k]).epsilon(1e-12));
    CHECK(max_abs(g1.W_O) > 0);
}

TEST_CASE("MultiHeadSA: Mask_AR row i ignores rows j > i of X, Mask_BD sees every row") {
    Rng rng(59);
    const int n = 5, H = 4;
    MultiHeadSAParams<double> p = make_mhsa(H, 2, 2, rng);
    TD X = randn(n, H, rng);
    for (const TD& Mask : {Mask_AR<double>(n), Mask_BD<double>(n), Mask_ST<double>(n, 1, 2)}) {
        TD Y = MultiHeadSA(X, Mask, p);
        for (int j = 0; j < n; j++) {
            TD X2 = X;
            for (int d = 0; d < H; d++) X2(j, d) += 0.3 + 0.1 * d;
            TD Y2 = MultiHeadSA(X2, Mask, p);
            for (int i = 0; i < n; i++) {
                CAPTURE(i);
                CAPTURE(j);
                if (Mask(i, j) == 1.0)
                    CHECK(row_diff(Y, Y2, i) > 1e-9);
                else
                    CHECK(same_row(Y, Y2, i));  // exactly unchanged
            }
        }
    }
}

TEST_CASE("MultiHeadSA: with B = 2 each sequence gets the output it gets alone") {
    Rng rng(60);
    const int n = 4, H = 6;
    MultiHeadSAParams<double> p = make_mhsa(H, 3, 2, rng);
    TD X1 = randn(n, H, rng), X2 = randn(n, H, rng);
    TD X(2 * n, H);
    std::copy(X1.data.begin(), X1.data.end(), X.data.begin());
    std::copy(X2.data.begin(), X2.data.end(), X.data.begin() + X1.size());
    for (const TD& Mask : {Mask_AR<double>(n), Mask_BD<double>(n)}) {
        TD Y = MultiHeadSA(X, Mask, p);
        TD Y1 = MultiHeadSA(X1, Mask, p), Y2 = MultiHeadSA(X2, Mask, p);
        REQUIRE(Y.shape == shp(2 * n, H));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < H; j++) {
                CHECK(Y(i, j) == doctest::Approx(Y1(i, j)).epsilon(1e-13));
                CHECK(Y(n + i, j) == doctest::Approx(Y2(i, j)).epsilon(1e-13));
            }
        // Changing sequence 2 leaves sequence 1 exactly alone, even under Mask_BD.
        TD Xc = X;
        for (int j = 0; j < H; j++) Xc(n, j) += 1.0;
        TD Yc = MultiHeadSA(Xc, Mask, p);
        for (int i = 0; i < n; i++) CHECK(same_row(Y, Yc, i));
        CHECK(row_diff(Y, Yc, n) > 1e-9);
    }
}

TEST_CASE("MultiHeadSA: attention dropout masks come from the rng") {
    Rng rng(61);
    const int n = 6, H = 4;
    MultiHeadSAParams<double> p = make_mhsa(H, 2, 2, rng);
    TD X = randn(2 * n, H, rng);
    TD Y0 = MultiHeadSA(X, Mask_BD<double>(n), p);
    const double pdrop = 0.25;
    Rng r1(5), r2(5), r3(6);
    MultiHeadSACache<double> c;
    TD Y1 = MultiHeadSA(X, Mask_BD<double>(n), p, &c, pdrop, &r1);
    TD Y2 = MultiHeadSA(X, Mask_BD<double>(n), p, kNoMhsaCache, pdrop, &r2);
    TD Y3 = MultiHeadSA(X, Mask_BD<double>(n), p, kNoMhsaCache, pdrop, &r3);
    CHECK(max_abs_diff(Y1, Y2) == 0);  // same seed, same masks, same output
    CHECK(max_abs_diff(Y1, Y3) > 0);   // another seed, other masks
    CHECK(max_abs_diff(Y1, Y0) > 0);   // dropout changes the output
    REQUIRE(c.dropout.size() == 2);
    for (auto& per_head : c.dropout) {
        REQUIRE(per_head.size() == 2);  // B = 2
        for (auto& d : per_head) {
            REQUIRE(d.shape == shp(n, n));
            for (double v : d.data) CHECK((v == 0.0 || v == doctest::Approx(1 / (1 - pdrop)).epsilon(1e-15)));
        }
    }
    CHECK(c.dropout[0][0].data != c.dropout[1][0].data);  // every head and sequence draws its own
    CHECK(c.dropout[0][0].data != c.dropout[0][1].data);
    // p = 0: no dropout at all, and nothing is drawn.
    Rng r4(5);
    CHECK(max_abs_diff(MultiHeadSA(X, Mask_BD<double>(n), p, kNoMhsaCache, 0.0, &r4), Y0) == 0);
    CHECK(r4.state == 5);
}

TEST_CASE("MultiHeadSA: wrong shape") {
    Rng rng(62);
    MultiHeadSAParams<double> p = make_mhsa(4, 2, 2, rng);  // H = 4, A = 2, D = 2
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(5, 4), Mask_AR<double>(2), p), "5x4", "2x2");
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 3), Mask_AR<double>(2), p), "W_Q", "4x2", "3x2");
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 4), TD(2, 3, 1.0), p), "4x4", "2x3");
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD::vector({1, 2, 3, 4}), Mask_AR<double>(1), p), "X", "4");
    {
        MultiHeadSAParams<double> q = p;
        q.W_K[1] = TD(4, 3);
        CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 4), Mask_AR<double>(2), q), "W_K", "4x3", "4x2");
    }
    {
        MultiHeadSAParams<double> q = p;
        q.W_V[0] = TD(3, 2);
        CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 4), Mask_AR<double>(2), q), "W_V", "3x2", "4x2");
    }
    {
        MultiHeadSAParams<double> q = p;
        q.W_O = TD(3, 4);
        CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 4), Mask_AR<double>(2), q), "W_O", "3x4", "4x4");
    }
    {
        MultiHeadSAParams<double> q = p;
        q.W_K.pop_back();
        CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 4), Mask_AR<double>(2), q), "2, 1, 2");
    }
    MultiHeadSACache<double> c;
    TD X = randn(4, 4, rng);
    MultiHeadSA(X, Mask_AR<double>(2), p, &c);
    MultiHeadSAParams<double> g = zeros_like(p);
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA_backward(X, p, c, TD(4, 3), g), "4x4", "4x3");
}

TEST_CASE("MultiHeadSA: an empty mask or a cache from another call throws instead of crashing") {
    Rng rng(63);
    MultiHeadSAParams<double> p = make_mhsa(4, 2, 2, rng);  // H = 4, A = 2, D = 2
    TD X = randn(4, 4, rng), dY = randn(4, 4, rng);
    // A 0 x 0 mask: n = 0 must be a ShapeError, not an integer division by zero (X.rows() % n).
    CHECK_THROWS_NAMING_NO_CRASH(ShapeError, MultiHeadSA(X, TD(0, 0), p), "4x4", "0x0");
    // A cache that no forward filled (or from another X, or another head count) is a bad input.
    MultiHeadSAParams<double> g = zeros_like(p);
    MultiHeadSACache<double> empty;
    CHECK_THROWS_NAMING_NO_CRASH(Error, MultiHeadSA_backward(X, p, empty, dY, g), "MultiHeadSA_backward");
    MultiHeadSACache<double> c;
    MultiHeadSA(X, Mask_AR<double>(2), p, &c);  // B = 2 sequences of n = 2
    TD X8 = randn(8, 4, rng), dY8 = randn(8, 4, rng);
    CHECK_THROWS_NAMING_NO_CRASH(ShapeError, MultiHeadSA_backward(X8, p, c, dY8, g), "8x4");
    MultiHeadSAParams<double> p3 = make_mhsa(4, 3, 2, rng), g3 = zeros_like(p3);
    CHECK_THROWS_NAMING_NO_CRASH(ShapeError, MultiHeadSA_backward(X, p3, c, dY, g3), "4x4");
}

// ================================================================================================
// Activations (used by FFN_ReLU and FFN_GELU)
// ================================================================================================
TEST_CASE("FFN_ReLU: relu activation and derivative") {
    CHECK(activation(Activation::relu, 2.5) == 2.5);
    CHECK(activation(Activation::relu, -2.5) == 0.0);
    CHECK(activation(Activation::relu, 0.0) == 0.0);
    CHECK(activation(Activation::relu, 3.0f) == 3.0f);
    CHECK(activation_derivative(Activation::relu, 2.5) == 1.0);
    CHECK(activation_derivative(Activation::relu, -2.5) == 0.0);
    CHECK(std::string(activation_name(Activation::relu)) == "relu");
    CHECK(activation_from_name("relu") == Activation::relu);
}

TEST_CASE("FFN_GELU: activation values of the three GELU forms") {
    // gelu_sigmoid(1) = 1 / (1 + e^{-1.702}) = 0.8457957659328212
    // gelu_tanh(1)    = 0.5 (1 + tanh(sqrt(2/pi) (1 + 0.044715)))   = 0.8411919906082768
    // gelu_erf(1)     = 0.5 (1 + erf(1/sqrt 2)) = Phi(1)             = 0.8413447460685429
    CHECK(activation(Activation::gelu_sigmoid, 1.0) == doctest::Approx(0.8457957659328212).epsilon(1e-14));
    CHECK(activation(Activation::gelu_sigmoid, 1.0) == doctest::Approx(1 / (1 + std::exp(-1.702))).epsilon(1e-14));
    CHECK(activation(Activation::gelu_tanh, 1.0) == doctest::Approx(0.8411919906082768).epsilon(1e-14));
    CHECK(activation(Activation::gelu_erf, 1.0) == doctest::Approx(0.8413447460685429).epsilon(1e-14));
    // gelu_erf(2) = 2 Phi(2) = 2 * 0.9772498680518208; gelu(-x) = gelu(x) - x for all three forms.
    CHECK(activation(Activation::gelu_erf, 2.0) == doctest::Approx(1.9544997361036416).epsilon(1e-14));
    for (Activation a : kGelus) {
        CAPTURE(activation_name(a));
        CHECK(activation(a, 0.0) == 0.0);
        for (double x : {0.3, 1.0, 2.7})
            CHECK(activation(a, -x) == doctest::Approx(activation(a, x) - x).epsilon(1e-13));
        // Far out: gelu(x) -> x for x -> +inf, -> 0 for x -> -inf, and never NaN.
        CHECK(activation(a, 40.0) == doctest::Approx(40.0).epsilon(1e-12));
        CHECK(std::fabs(activation(a, -40.0)) < 1e-12);
        CHECK(std::isfinite(activation(a, -1000.0)));
        CHECK(std::isfinite(activation(a, -1000.0f)));
        CHECK(std::isfinite(activation_derivative(a, -1000.0)));
        CHECK(std::isfinite(activation_derivative(a, 1000.0f)));
        // Float agrees with double.
        CHECK(activation(a, 0.7f) == doctest::Approx(activation(a, 0.7)).epsilon(1e-6));
    }
    // Derivatives: at 0 all three give 1/2;
    //   gelu_erf'(1) = Phi(1) + phi(1) = 0.8413447460685429 + 0.24197072451914337 = 1.0833154705876863
    //   gelu_sigmoid'(1) = s + 1.702 s (1 - s), s = 0.8457957659328212     -> 1.067779606556334
    //   gelu_tanh'(1) = 0.5 (1 + t) + 0.5 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715) -> 1.0829640838457826
    for (Activation a : kGelus) CHECK(activation_derivative(a, 0.0) == doctest::Approx(0.5).epsilon(1e-15));
    CHECK(activation_derivative(Activation::gelu_erf, 1.0) == doctest::Approx(1.0833154705876864).epsilon(1e-14));
    CHECK(activation_derivative(Activation::gelu_sigmoid, 1.0) ==
          doctest::Approx(1.067779606556334).epsilon(1e-14));
    CHECK(activation_derivative(Activation::gelu_tanh, 1.0) == doctest::Approx(1.0829640838457826).epsilon(1e-14));
}

TEST_CASE("FFN_GELU: activation_derivative matches finite differences") {
    // (act(x + h) - act(x - h)) / 2h with h = 1e-6: error ~ 1e-10; tolerance 1e-8.
    const double h = 1e-6;
    for (Activation a : kAllActivations) {
        CAPTURE(activation_name(a));
        for (double x : {-4.0, -2.2, -1.0, -0.37, -0.01, 0.013, 0.5, 1.0, 1.9, 3.3, 6.0}) {
            CAPTURE(x);
            const double num = (activation(a, x + h) - activation(a, x - h)) / (2 * h);
            CHECK(activation_derivative(a, x) == doctest::Approx(num).epsilon(1e-8).scale(1.0));
        }
    }
}

TEST_CASE("FFN_GELU: activation names") {
    for (Activation a : kAllActivations) CHECK(activation_from_name(activation_name(a)) == a);
    CHECK(std::string(activation_name(Activation::gelu_sigmoid)) == "gelu_sigmoid");
    CHECK(std::string(activation_name(Activation::gelu_tanh)) == "gelu_tanh");
    CHECK(std::string(activation_name(Activation::gelu_erf)) == "gelu_erf");
    CHECK_THROWS_NAMING(Error, activation_from_name("gelu_fancy"), "gelu_fancy");
}

// ================================================================================================
// FFN_ReLU and FFN_GELU
// ================================================================================================
namespace {
// The hand-computed network: X = [[1, -1]], W_1 = [[1, 0, 1], [0, 1, 1]] (X W_1 = (1, -1, 0)),
// W_2 = [[2, 0], [0, 1], [1, 1]], b_2 = (1, -1).
FFNParams<double> hand_ffn(std::vector<double> b1) {
    FFNParams<double> p;
    p.W_1 = TD::from(2, 3, {1, 0, 1, 0, 1, 1});
    p.b_1 = TD::vector(std::move(b1));
    p.W_2 = TD::from(3, 2, {2, 0, 0, 1, 1, 1});
    p.b_2 = TD::vector({1, -1});
    return p;
}

// dX, W_1, b_1, W_2, b_2 of an FFN against finite differences. For relu the points are chosen
// away from the kink: every pre-activation is at least 1e-3 from 0 (h = 1e-6 cannot cross it).
void ffn_grad_check(Activation act, bool via_named_entry, uint64_t seed) {
    const int n = 3, H = 4, F = 6;
    Rng rng(seed);
    FFNParams<double> p;
    TD X, R;
    for (int attempt = 0;; attempt++) {
        REQUIRE(attempt < 100);
        p = make_ffn(H, F, rng);
        X = randn(n, H, rng);
        R = randn(n, H, rng);
        FFNCache<double> c;
        FFN(X, p, act, &c);
        double closest = INF;
        int negative = 0;
        for (double z : c.Z.data) closest = std::min(closest, std::fabs(z)), negative += z < 0;
        if (closest > 1e-3 && negative > 0 && negative < (int)c.Z.size()) break;  // both sides of 0
    }
    auto forward = [&](FFNCache<double>* c) {
        if (!via_named_entry) return FFN(X, p, act, c);
        return act == Activation::relu ? FFN_ReLU(X, p, c) : FFN_GELU(X, p, c, act);
    };
    FFNCache<double> c;
    forward(&c);
    FFNParams<double> g = zeros_like(p);
    TD dX = via_named_entry ? (act == Activation::relu ? FFN_ReLU_backward(X, p, c, R, g)
                                                       : FFN_GELU_backward(X, p, c, R, g, act))
                            : FFN_backward(X, p, act, c, R, g);
    auto L = [&] { return sum_prod(forward(nullptr), R); };
    const std::string what = std::string(activation_name(act)) + (via_named_entry ? " (named)" : " (FFN)");
    grad_check(L, X, dX, what + " dX");
    grad_check(L, p.W_1, g.W_1, what + " W_1");
    grad_check(L, p.b_1, g.b_1, what + " b_1");
    grad_check(L, p.W_2, g.W_2, what + " W_2");
    grad_check(L, p.b_2, g.b_2, what + " b_2");
}
}  // namespace

TEST_CASE("FFN_ReLU: hand-computed case") {
    // b_1 = (0.5, 0.5, -1): Z = (1, -1, 0) + b_1 = (1.5, -0.5, -1), max(0, Z) = (1.5, 0, 0),
    // Y = 1.5 * (2, 0) + b_2 = (3 + 1, 0 - 1) = (4, -1).
    FFNParams<double> p = hand_ffn({0.5, 0.5, -1});
    TD X = TD::from(1, 2, {1, -1});
    FFNCache<double> c;
    TD Y = FFN_ReLU(X, p, &c);
    REQUIRE(Y.shape == shp(1, 2));
    CHECK(Y.data == std::vector<double>{4, -1});
    CHECK(c.Z.data == std::vector<double>{1.5, -0.5, -1});
    CHECK(c.A.data == std::vector<double>{1.5, 0, 0});
    // Backward with dY = (1, 0): dW_2 = A^T dY = rows (1.5, 0), (0, 0), (0, 0); db_2 = (1, 0);
    // dA = dY W_2^T = (2, 0, 1); dZ = dA * [Z > 0] = (2, 0, 0); db_1 = (2, 0, 0);
    // dW_1 = X^T dZ = [[2, 0, 0], [-2, 0, 0]]; dX = dZ W_1^T = (2, 0).
    FFNParams<double> g = zeros_like(p);
    TD dX = FFN_ReLU_backward(X, p, c, TD::from(1, 2, {1, 0}), g);
    CHECK(dX.data == std::vector<double>{2, 0});
    CHECK(g.W_2.data == std::vector<double>{1.5, 0, 0, 0, 0, 0});
    CHECK(g.b_2.data == std::vector<double>{1, 0});
    CHECK(g.b_1.data == std::vector<double>{2, 0, 0});
    CHECK(g.W_1.data == std::vector<double>{2, 0, 0, -2, 0, 0});
}

TEST_CASE("FFN_ReLU: gradient check of dX, W_1, b_1, W_2, b_2") {
    ffn_grad_check(Activation::relu, true, 71);
    ffn_grad_check(Activation::relu, false, 72);
}

TEST_CASE("FFN_ReLU: parameter gradients accumulate, float agrees with double") {
    Rng rng(73);
    FFNParams<double> p = make_ffn(3, 5, rng);
    TD X = randn(4, 3, rng), R = randn(4, 3, rng);
    FFNCache<double> c;
    TD Y = FFN_ReLU(X, p, &c);
    FFNParams<double> g1 = zeros_like(p), g2 = zeros_like(p);
    FFN_ReLU_backward(X, p, c, R, g1);
    FFN_ReLU_backward(X, p, c, R, g2);
    FFN_ReLU_backward(X, p, c, R, g2);
    const std::vector<std::pair<TD*, TD*>> pairs = {
        {&g1.W_1, &g2.W_1}, {&g1.b_1, &g2.b_1}, {&g1.W_2, &g2.W_2}, {&g1.b_2, &g2.b_2}};
    for (auto [a, b] : pairs) {
        CHECK(max_abs(*a) > 0);
        for (std::size_t k = 0; k < a->size(); k++) CHECK((*b)[k] == doctest::Approx(2 * (*a)[k]).epsilon(1e-14));
    }
    FFNParams<float> pf{to_float(p.W_1), to_float(p.b_1), to_float(p.W_2), to_float(p.b_2)};
    TF Yf = FFN_ReLU(to_float(X), pf);
    for (std::size_t k = 0; k < Y.size(); k++) CHECK(Yf[k] == doctest::Approx(Y[k]).epsilon(1e-5).scale(1.0));
}

TEST_CASE("FFN_ReLU: wrong shape") {
    Rng rng(74);
    FFNParams<double> p = make_ffn(4, 5, rng);  // H = 4, F = 5
    CHECK_THROWS_NAMING(ShapeError, FFN_ReLU(TD(2, 3), p), "W_1", "4x5", "3x5");
    {
        FFNParams<double> q = p;
        q.b_1 = TD(std::vector<int>{4});
        CHECK_THROWS_NAMING(ShapeError, FFN_ReLU(TD(2, 4), q), "b_1", "is 4", "expected 5");
    }
    {
        FFNParams<double> q = p;
        q.W_2 = TD(4, 5);
        CHECK_THROWS_NAMING(ShapeError, FFN_ReLU(TD(2, 4), q), "W_2", "4x5", "5x4");
    }
    {
        FFNParams<double> q = p;
        q.b_2 = TD(std::vector<int>{7});
        CHECK_THROWS_NAMING(ShapeError, FFN_ReLU(TD(2, 4), q), "b_2", "7", "4");
    }
    CHECK_THROWS_NAMING(ShapeError, FFN_ReLU(TD::vector({1, 2, 3, 4}), p), "X", "4");
    FFNCache<double> c;
    TD X = randn(2, 4, rng);
    FFN_ReLU(X, p, &c);
    FFNParams<double> g = zeros_like(p);
    CHECK_THROWS_NAMING(ShapeError, FFN_ReLU_backward(X, p, c, TD(2, 5), g), "2x4", "2x5");
}

TEST_CASE("FFN_GELU: hand-computed case for gelu_sigmoid (default), gelu_tanh, gelu_erf") {
    // b_1 = 0: Z = (1, -1, 0), GELU(Z) = (g(1), g(-1), 0) = (g1, g1 - 1, 0) (gelu(-x) = gelu(x) - x),
    // Y = g1 (2, 0) + (g1 - 1) (0, 1) + b_2 = (2 g1 + 1, g1 - 2), with
    //   g1 = 0.8457957659328212 (sigmoid), 0.8411919906082768 (tanh), 0.8413447460685429 (erf).
    FFNParams<double> p = hand_ffn({0, 0, 0});
    TD X = TD::from(1, 2, {1, -1});
    struct Case {
        Activation a;
        double g1;
    };
    for (Case cs : {Case{Activation::gelu_sigmoid, 0.8457957659328212}, Case{Activation::gelu_tanh, 0.8411919906082768},
                    Case{Activation::gelu_erf, 0.8413447460685429}}) {
        CAPTURE(activation_name(cs.a));
        TD Y = FFN_GELU(X, p, kNoFfnCache, cs.a);
        REQUIRE(Y.shape == shp(1, 2));
        CHECK(Y(0, 0) == doctest::Approx(2 * cs.g1 + 1).epsilon(1e-14));
        CHECK(Y(0, 1) == doctest::Approx(cs.g1 - 2).epsilon(1e-14));
    }
    // The default is the seed's x sigmoid(1.702 x).
    TD Yd = FFN_GELU(X, p);
    CHECK(Yd(0, 0) == doctest::Approx(2 * 0.8457957659328212 + 1).epsilon(1e-14));
    Rng rng(75);
    FFNParams<double> q = make_ffn(3, 4, rng);
    TD X2 = randn(2, 3, rng);
    CHECK(max_abs_diff(FFN_GELU(X2, q), FFN(X2, q, Activation::gelu_sigmoid)) == 0);
    CHECK(max_abs_diff(FFN_GELU(X2, q), FFN_GELU(X2, q, kNoFfnCache, Activation::gelu_erf)) > 1e-4);
}

TEST_CASE("FFN_GELU: gradient check of dX, W_1, b_1, W_2, b_2 for every GELU form") {
    uint64_t seed = 76;
    for (Activation a : kGelus) {
        ffn_grad_check(a, true, seed++);
        ffn_grad_check(a, false, seed++);
    }
    // The default-argument backward is the sigmoid form.
    Rng rng(80);
    FFNParams<double> p = make_ffn(3, 4, rng);
    TD X = randn(2, 3, rng), R = randn(2, 3, rng);
    FFNCache<double> c;
    FFN_GELU(X, p, &c);
    FFNParams<double> g1 = zeros_like(p), g2 = zeros_like(p);
    TD d1 = FFN_GELU_backward(X, p, c, R, g1);
    TD d2 = FFN_backward(X, p, Activation::gelu_sigmoid, c, R, g2);
    CHECK(max_abs_diff(d1, d2) == 0);
    CHECK(max_abs_diff(g1.W_1, g2.W_1) == 0);
}

TEST_CASE("FFN_GELU: wrong shape and relu is not a GELU") {
    Rng rng(81);
    FFNParams<double> p = make_ffn(4, 5, rng);
    CHECK_THROWS_NAMING(ShapeError, FFN_GELU(TD(2, 3), p), "W_1", "4x5", "3x5");
    {
        FFNParams<double> q = p;
        q.W_2 = TD(5, 3);
        CHECK_THROWS_NAMING(ShapeError, FFN_GELU(TD(2, 4), q, kNoFfnCache, Activation::gelu_erf), "W_2", "5x3", "5x4");
    }
    CHECK_THROWS_AS(FFN_GELU(TD(2, 4), p, kNoFfnCache, Activation::relu), Error);
    FFNCache<double> c;
    TD X = randn(2, 4, rng);
    FFN_GELU(X, p, &c);
    FFNParams<double> g = zeros_like(p);
    CHECK_THROWS_NAMING(ShapeError, FFN_GELU_backward(X, p, c, TD(3, 4), g), "2x4", "3x4");
    CHECK_THROWS_AS(FFN_GELU_backward(X, p, c, TD(2, 4), g, Activation::relu), Error);
    {
        FFNParams<double> gbad = zeros_like(p);
        gbad.b_1 = TD(std::vector<int>{3});
        CHECK_THROWS_NAMING(ShapeError, FFN_GELU_backward(X, p, c, TD(2, 4), gbad), "3", "5");
    }
}

// ================================================================================================
// LayerNorm
// ================================================================================================
TEST_CASE("LayerNorm: hand-computed case") {
    // Row (2, 4, 4, 4, 5, 5, 7, 9): mu = 40 / 8 = 5; squared deviations 9, 1, 1, 1, 0, 0, 4, 16,
    // sigma^2 = 32 / 8 = 4 (the 1/H variance); eps = 5: sqrt(4 + 5) = 3, so
    //   Xhat = (-3, -1, -1, -1, 0, 0, 2, 4) / 3.
    // gamma = (1, 2, 3, 1, 1, 1, 3, 0.75), beta = (0, 0, 0, 1, 0, 0, 0, -1):
    //   Y = (-1, -2/3, -1, -1/3 + 1, 0, 0, 2, 1 - 1) = (-1, -2/3, -1, 2/3, 0, 0, 2, 0).
    // Row 2 (1, 1, ..., 1): mu = 1, sigma^2 = 0, Xhat = 0, Y = beta.
    TD X = TD::from(2, 8, {2, 4, 4, 4, 5, 5, 7, 9, 1, 1, 1, 1, 1, 1, 1, 1});
    TD gamma = TD::vector({1, 2, 3, 1, 1, 1, 3, 0.75}), beta = TD::vector({0, 0, 0, 1, 0, 0, 0, -1});
    LayerNormCache<double> c;
    TD Y = LayerNorm(X, gamma, beta, 5.0, &c);
    REQUIRE(Y.shape == shp(2, 8));
    const std::vector<double> expect = {-1, -2. / 3, -1, 2. / 3, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0, 0, -1};
    for (std::size_t k = 0; k < expect.size(); k++) CHECK(Y[k] == doctest::Approx(expect[k]).epsilon(1e-14).scale(1.0));
    CHECK(c.rstd[0] == doctest::Approx(1.0 / 3).epsilon(1e-15));
    CHECK(c.rstd[1] == doctest::Approx(1.0 / std::sqrt(5.0)).epsilon(1e-15));
    CHECK(c.Xhat(0, 7) == doctest::Approx(4.0 / 3).epsilon(1e-15));
    // Backward with dY = row 0 all ones, row 1 zeros: dbeta = (1, ..., 1, 0 from row 1),
    // dgamma_j = Xhat_0j. With gamma = 1: G = 1, mean(G) = 1, mean(G Xhat) = 0 -> dX = 0.
    TD ones(std::vector<int>{8}, 1.0);
    TD dY(2, 8);
    for (int j = 0; j < 8; j++) dY(0, j) = 1;
    TD dgamma(std::vector<int>{8}), dbeta(std::vector<int>{8});
    TD dX = LayerNorm_backward(ones, c, dY, dgamma, dbeta);
    CHECK(max_abs(dX) <= 1e-15);
    for (int j = 0; j < 8; j++) {
        CHECK(dbeta[j] == 1.0);
        CHECK(dgamma[j] == doctest::Approx(c.Xhat(0, j)).epsilon(1e-15));
    }
}

TEST_CASE("LayerNorm: gradient check of dX, dgamma, dbeta") {
    for (double eps : {1e-5, 0.5}) {
        CAPTURE(eps);
        Rng rng(91);
        TD X = randn(3, 5, rng, 2.0), gamma = randn_vec(5, rng), beta = randn_vec(5, rng), R = randn(3, 5, rng);
        for (int j = 0; j < 5; j++) X(1, j) += 10;  // an offset row
        LayerNormCache<double> c;
        LayerNorm(X, gamma, beta, eps, &c);
        TD dgamma(std::vector<int>{5}), dbeta(std::vector<int>{5});
        TD dX = LayerNorm_backward(gamma, c, R, dgamma, dbeta);
        auto L = [&] { return sum_prod(LayerNorm(X, gamma, beta, eps), R); };
        grad_check(L, X, dX, "LayerNorm dX");
        grad_check(L, gamma, dgamma, "LayerNorm dgamma");
        grad_check(L, beta, dbeta, "LayerNorm dbeta");
        // Gradients accumulate into dgamma and dbeta.
        TD dgamma2 = dgamma, dbeta2 = dbeta;
        LayerNorm_backward(gamma, c, R, dgamma2, dbeta2);
        for (int j = 0; j < 5; j++) {
            CHECK(dgamma2[j] == doctest::Approx(2 * dgamma[j]).epsilon(1e-14));
            CHECK(dbeta2[j] == doctest::Approx(2 * dbeta[j]).epsilon(1e-14));
        }
    }
}

TEST_CASE("LayerNorm: mean 0 variance 1 before gamma and beta") {
    Rng rng(92);
    const int n = 5, H = 16;
    TD X = randn(n, H, rng, 3.0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < H; j++) X(i, j) += 10.0 * i - 20;
    TD Y = LayerNorm(X, TD(std::vector<int>{H}, 1.0), TD(std::vector<int>{H}, 0.0), 1e-12);
    for (int i = 0; i < n; i++) {
        double mu = 0, var = 0;
        for (int j = 0; j < H; j++) mu += Y(i, j);
        mu /= H;
        for (int j = 0; j < H; j++) var += (Y(i, j) - mu) * (Y(i, j) - mu);
        var /= H;
        CHECK(std::fabs(mu) <= 1e-12);
        CHECK(var == doctest::Approx(1.0).epsilon(1e-5));
    }
    // Float, eps = 1e-5 as in training: still mean ~0, variance ~1.
    TF Yf = LayerNorm(to_float(X), TF(std::vector<int>{H}, 1.0f), TF(std::vector<int>{H}, 0.0f), 1e-5);
    for (int i = 0; i < n; i++) {
        double mu = 0, var = 0;
        for (int j = 0; j < H; j++) mu += Yf(i, j);
        mu /= H;
        for (int j = 0; j < H; j++) var += (Yf(i, j) - mu) * (Yf(i, j) - mu);
        var /= H;
        CHECK(std::fabs(mu) <= 1e-5);
        CHECK(var == doctest::Approx(1.0).epsilon(1e-4));
    }
    // Shifting and scaling a row does not change the normalized output (eps tiny).
    TD X2 = X;
    for (int j = 0; j < H; j++) X2(2, j) = 4.0 * X2(2, j) + 100;
    TD Y2 = LayerNorm(X2, TD(std::vector<int>{H}, 1.0), TD(std::vector<int>{H}, 0.0), 1e-12);
    CHECK(max_abs_diff(Y, Y2) <= 1e-9);
}

TEST_CASE("LayerNorm: wrong shape") {
    TD g4(std::vector<int>{4}, 1.0), g5(std::vector<int>{5}, 1.0);
    CHECK_THROWS_NAMING(ShapeError, LayerNorm(TD(3, 4), g5, g4, 1e-5), "gamma", "is 5", "expected 4");
    CHECK_THROWS_NAMING(ShapeError, LayerNorm(TD(3, 4), g4, g5, 1e-5), "beta", "is 5", "expected 4");
    CHECK_THROWS_NAMING(ShapeError, LayerNorm(TD::vector({1, 2, 3, 4}), g4, g4, 1e-5), "X", "4");
    LayerNormCache<double> c;
    Rng rng(93);
    LayerNorm(randn(3, 4, rng), g4, g4, 1e-5, &c);
    TD dg(std::vector<int>{4}), db(std::vector<int>{4}), dg5(std::vector<int>{5});
    CHECK_THROWS_NAMING(ShapeError, LayerNorm_backward(g4, c, TD(4, 3), dg, db), "3x4", "4x3");
    CHECK_THROWS_NAMING(ShapeError, LayerNorm_backward(g5, c, TD(3, 4), dg, db), "gamma", "5", "4");
    CHECK_THROWS_NAMING(ShapeError, LayerNorm_backward(g4, c, TD(3, 4), dg5, db), "dgamma", "5", "4");
    CHECK_THROWS_NAMING(ShapeError, LayerNorm_backward(g4, c, TD(3, 4), dg, dg5), "dbeta", "5", "4");
}

// ================================================================================================
// CrossEntropy
// ================================================================================================
TEST_CASE("CrossEntropy: hand-computed case") {
    // y = (0, 1, 0), yhat = (1/4, 1/2, 1/4): - log(1/2) = ln 2 = 0.6931471805599453.
    TD yhat = TD::vector({0.25, 0.5, 0.25});
    CHECK(CrossEntropy(TD::vector({0, 1, 0}), yhat) == doctest::Approx(0.6931471805599453).epsilon(1e-15));
    // Soft target y = (1/2, 1/2, 0): - (1/2 ln(1/4) + 1/2 ln(1/2)) = (ln 4 + ln 2) / 2 = 1.5 ln 2.
    TD y = TD::vector({0.5, 0.5, 0});
    CHECK(CrossEntropy(y, yhat) == doctest::Approx(1.5 * 0.6931471805599453).epsilon(1e-15));
    // d/dyhat_j = - y_j / yhat_j = (-0.5 / 0.25, -0.5 / 0.5, 0) = (-2, -1, 0).
    CHECK(CrossEntropy_backward(y, yhat).data == std::vector<double>{-2, -1, 0});
    // 0 log 0 := 0: a zero prediction where y is zero costs nothing and gives no NaN.
    TD y1 = TD::vector({0, 1, 0}), p1 = TD::vector({0, 1, 0});
    CHECK(CrossEntropy(y1, p1) == 0.0);
    CHECK(CrossEntropy_backward(y1, p1).data == std::vector<double>{0, -1, 0});
    // Float.
    CHECK(CrossEntropy(TF::vector({0, 1}), TF::vector({0.5f, 0.5f})) == doctest::Approx(0.6931472f));
}

TEST_CASE("CrossEntropy: gradient check of d yhat") {
    Rng rng(101);
    TD y(std::vector<int>{6}), yhat(std::vector<int>{6});
    double sy = 0;
    for (int j = 0; j < 6; j++) {
        y[j] = j == 2 ? 0.0 : rng.uniform() + 0.1;  // one zero entry
        yhat[j] = rng.uniform() * 0.8 + 0.2;
        sy += y[j];
    }
    for (auto& v : y.data) v /= sy;
    TD d = CrossEntropy_backward(y, yhat);
    CHECK(d[2] == 0.0);
    grad_check([&] { return CrossEntropy(y, yhat); }, yhat, d, "CrossEntropy d yhat");
}

TEST_CASE("CrossEntropy: equals CrossEntropy_logits on OneHot targets and Softmax predictions") {
    Rng rng(102);
    TD Z = randn(4, 5, rng, 2.0);
    const std::vector<int> t = {3, 0, 4, 3};
    TD P = Softmax(Z), Y = OneHot<double>(t, 5);
    double mean = 0;
    for (int i = 0; i < 4; i++) {
        TD yi = TD::vector(std::vector<double>(Y.row(i), Y.row(i) + 5));
        TD pi = TD::vector(std::vector<double>(P.row(i), P.row(i) + 5));
        mean += CrossEntropy(yi, pi) / 4;
    }
    CHECK(CrossEntropy_logits(Z, t) == doctest::Approx(mean).epsilon(1e-13));
}

TEST_CASE("CrossEntropy: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, CrossEntropy(TD(std::vector<int>{5}), TD(std::vector<int>{7})), "y is 5",
                        "yhat is 7");
    CHECK_THROWS_NAMING(ShapeError, CrossEntropy_backward(TD(std::vector<int>{5}), TD(std::vector<int>{7})),
                        "y is 5", "yhat is 7");
}

// ================================================================================================
// CrossEntropy_logits
// ================================================================================================
TEST_CASE("CrossEntropy_logits: hand-computed case with a skipped target") {
    // Row 0: z = (0, ln 3), t = 1: logsumexp = ln(1 + 3) = ln 4, loss = ln 4 - ln 3 = ln(4/3).
    // Row 1: z = (0, 0),    t = 0: loss = ln 2.
    // Row 2: t = -1, skipped. Mean over 2 counted rows: (ln(4/3) + ln 2) / 2 = ln(8/3) / 2
    //   = 0.4904146265058631.
    // dZ = (Softmax - OneHot) / 2: row 0 ((1/4, 3/4) - (0, 1)) / 2 = (1/8, -1/8);
    //   row 1 ((1/2, 1/2) - (1, 0)) / 2 = (-1/4, 1/4); row 2 = 0.
    TD Z = TD::from(3, 2, {0, std::log(3.0), 0, 0, 5, -7});
    TD dZ;
    const double loss = CrossEntropy_logits(Z, {1, 0, -1}, &dZ);
    CHECK(loss == doctest::Approx(0.4904146265058631).epsilon(1e-14));
    REQUIRE(dZ.shape == shp(3, 2));
    const std::vector<double> expect = {0.125, -0.125, -0.25, 0.25, 0, 0};
    for (std::size_t k = 0; k < expect.size(); k++) CHECK(dZ[k] == doctest::Approx(expect[k]).epsilon(1e-14));
    CHECK(dZ(2, 0) == 0.0);
    CHECK(dZ(2, 1) == 0.0);
    // Without dZ the loss is the same.
    CHECK(CrossEntropy_logits(Z, {1, 0, -1}) == loss);
}

TEST_CASE("CrossEntropy_logits: gradient check of dZ, with skipped rows") {
    Rng rng(111);
    TD Z = randn(5, 6, rng, 2.0);
    const std::vector<int> t = {2, -1, 5, 0, -1};
    TD dZ;
    CrossEntropy_logits(Z, t, &dZ);
    grad_check([&] { return CrossEntropy_logits(Z, t); }, Z, dZ, "CrossEntropy_logits dZ");
    for (int j = 0; j < 6; j++) {
        CHECK(dZ(1, j) == 0.0);
        CHECK(dZ(4, j) == 0.0);
    }
    // Rows of dZ sum to 0 (Softmax and OneHot both sum to 1).
    for (int i = 0; i < 5; i++) {
        double s = 0;
        for (int j = 0; j < 6; j++) s += dZ(i, j);
        CHECK(std::fabs(s) <= 1e-15);
    }
}

TEST_CASE("CrossEntropy_logits: huge logits, all rows skipped, float") {
    // z = (1000, 1000), t = 0: ln 2 without overflow; z = (-1000, 0), t = 0: loss 1000 (+ e^-1000).
    TD Z = TD::from(2, 2, {1000, 1000, -1000, 0});
    // (1000 + ln 2) - 1000 cancels: about 1000 * 2^-52 = 2e-13 of absolute rounding, hence 1e-12.
    CHECK(CrossEntropy_logits(Z, {0, -1}) == doctest::Approx(0.6931471805599453).epsilon(1e-12));
    CHECK(CrossEntropy_logits(Z, {-1, 0}) == doctest::Approx(1000.0).epsilon(1e-14));
    TF Zf = TF::from(1, 3, {1000.f, 1000.f, 1000.f});
    TF dZf;
    CHECK(CrossEntropy_logits(Zf, {2}, &dZf) == doctest::Approx(std::log(3.0)).epsilon(1e-6));
    CHECK(dZf(0, 0) == doctest::Approx(1.0 / 3).epsilon(1e-6));
    CHECK(dZf(0, 2) == doctest::Approx(-2.0 / 3).epsilon(1e-6));
    // Nothing to count: loss 0 and a zero gradient of the right shape, no NaN.
    TD dZ;
    CHECK(CrossEntropy_logits(Z, {-1, -1}, &dZ) == 0.0);
    REQUIRE(dZ.shape == shp(2, 2));
    CHECK(dZ.data == std::vector<double>{0, 0, 0, 0});
    // A pre-filled dZ is overwritten, not accumulated: row 0 ((1/2, 1/2) - (1, 0)) / 1 = (-1/2, 1/2),
    // skipped row 1 is 0.
    TD dZ2(2, 2, 9.0);
    CrossEntropy_logits(Z, {0, -1}, &dZ2);
    CHECK(dZ2.data == std::vector<double>{-0.5, 0.5, 0, 0});
}

TEST_CASE("CrossEntropy_logits: wrong shape and bad targets") {
    CHECK_THROWS_NAMING(ShapeError, CrossEntropy_logits(TD(3, 4), {0, 1}), "3x4", "2 targets");
    CHECK_THROWS_NAMING(Error, CrossEntropy_logits(TD(2, 4), {0, 4}), "target id 4", "0..3");
    CHECK_THROWS_NAMING(Error, CrossEntropy_logits(TD(2, 4), {-2, 0}), "target id -2");
    CHECK_THROWS_NAMING(ShapeError, CrossEntropy_logits(TD::vector({1, 2, 3}), {0}), "Z", "3");
}

// ================================================================================================
// Matrix products: matmul, matmul_nt, matmul_tn, gemm against gemm_reference
// ================================================================================================
namespace {
struct Dims {
    int M, N, K;
};
const Dims kOddShapes[] = {{1, 1, 1},   {1, 7, 3},    {5, 1, 9},     {3, 5, 7},    {17, 13, 29}, {31, 33, 65},
                           {64, 64, 64}, {67, 130, 259}, {129, 5, 300}, {2, 257, 17}, {8, 8, 1}};

template <typename T>
Tensor<T> rand_t(int r, int c, Rng& rng) {
    Tensor<T> t(r, c);
    for (auto& v : t.data) v = (T)rng.normal();
    return t;
}
template <typename T>
Tensor<T> abs_t(const Tensor<T>& a) {
    Tensor<T> b = a;
    for (auto& v : b.data) v = std::fabs(v);
    return b;
}
// |C - Cref| <= 2 (K + 1) u (|C0| + |A| |B|) entrywise: the rounding bound of any summation order
// (u = unit roundoff), so any correct kernel passes and a wrong index or stride fails.
template <typename T>
void check_close(const Tensor<T>& C, const Tensor<T>& Cref, const Tensor<T>& bound, int K, const char* what) {
    INFO(what);
    REQUIRE(C.shape == Cref.shape);
    const double u = std::numeric_limits<T>::epsilon();
    double worst = 0;
    for (std::size_t k = 0; k < C.size(); k++) {
        const double tol = 2.0 * (K + 1) * u * (double)bound[k] + 1e-300;
        const double r = std::fabs((double)C[k] - (double)Cref[k]) / tol;
        if (!(r <= worst)) worst = std::isnan(r) ? INF : r;
    }
    CHECK(worst <= 1.0);
}

template <typename T>
void gemm_vs_reference() {
    Rng rng(121);
    for (Dims d : kOddShapes) {
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++) {
                    CAPTURE(d.M);
                    CAPTURE(d.N);
                    CAPTURE(d.K);
                    CAPTURE(ta);
                    CAPTURE(tb);
                    CAPTURE(acc);
                    // A(i,k) stored as M x K (rsA = K, csA = 1) or transposed K x M (rsA = 1, csA = M).
                    Tensor<T> A = ta ? rand_t<T>(d.K, d.M, rng) : rand_t<T>(d.M, d.K, rng);
                    Tensor<T> B = tb ? rand_t<T>(d.N, d.K, rng) : rand_t<T>(d.K, d.N, rng);
                    const long rsA = ta ? 1 : d.K, csA = ta ? d.M : 1;
                    const long rsB = tb ? 1 : d.N, csB = tb ? d.K : 1;  // B(k,j) likewise
                    // C lives in a wider buffer (ldc = N + 3); the 3 padding columns must stay untouched.
                    const int ldc = d.N + 3;
                    Tensor<T> C0 = rand_t<T>(d.M, ldc, rng);
                    Tensor<T> C = C0, Cref = C0;
                    gemm<T>(d.M, d.N, d.K, A.ptr(), rsA, csA, B.ptr(), rsB, csB, C.ptr(), ldc, acc == 1);
                    gemm_reference<T>(d.M, d.N, d.K, A.ptr(), rsA, csA, B.ptr(), rsB, csB, Cref.ptr(), ldc,
                                      acc == 1);
                    Tensor<T> bound = acc ? abs_t(C0) : Tensor<T>(d.M, ldc);
                    Tensor<T> absA = abs_t(A), absB = abs_t(B);
                    gemm_reference<T>(d.M, d.N, d.K, absA.ptr(), rsA, csA, absB.ptr(), rsB, csB, bound.ptr(), ldc,
                                      true);
                    check_close(C, Cref, bound, d.K, "gemm vs gemm_reference");
                    bool padding_untouched = true;
                    for (int i = 0; i < d.M; i++)
                        for (int j = d.N; j < ldc; j++) padding_untouched &= C(i, j) == C0(i, j);
                    CHECK(padding_untouched);
                }
    }
}
}  // namespace

TEST_CASE("gemm: hand-computed case") {
    // [[1, 2], [3, 4]] [[5, 6], [7, 8]] = [[1*5 + 2*7, 1*6 + 2*8], [3*5 + 4*7, 3*6 + 4*8]] = [[19, 22], [43, 50]]
    const double A[] = {1, 2, 3, 4}, B[] = {5, 6, 7, 8};
    double C[4] = {0, 0, 0, 0};
    gemm<double>(2, 2, 2, A, 2, 1, B, 2, 1, C, 2, false);
    CHECK(std::vector<double>(C, C + 4) == std::vector<double>{19, 22, 43, 50});
    // accumulate: C += A B -> [[38, 44], [86, 100]]
    gemm<double>(2, 2, 2, A, 2, 1, B, 2, 1, C, 2, true);
    CHECK(std::vector<double>(C, C + 4) == std::vector<double>{38, 44, 86, 100});
    // A^T B via strides (rsA = 1, csA = 2): [[1, 3], [2, 4]] [[5, 6], [7, 8]] = [[26, 30], [38, 44]]
    gemm<double>(2, 2, 2, A, 1, 2, B, 2, 1, C, 2, false);
    CHECK(std::vector<double>(C, C + 4) == std::vector<double>{26, 30, 38, 44});
    // Not accumulating overwrites C even if it held NaN; K = 0 gives zeros.
    double D[2] = {std::numeric_limits<double>::quiet_NaN(), 5};
    gemm<double>(1, 2, 0, A, 1, 1, B, 2, 1, D, 2, false);
    CHECK(D[0] == 0.0);
    CHECK(D[1] == 0.0);
}

TEST_CASE("gemm: equals gemm_reference on odd shapes, transposed strides, accumulate, ldc > N (double)") {
    gemm_vs_reference<double>();
}

TEST_CASE("gemm: equals gemm_reference on odd shapes, transposed strides, accumulate, ldc > N (float)") {
    gemm_vs_reference<float>();
}

TEST_CASE("matmul: hand-computed case and agreement with gemm_reference") {
    // [[1, 2, 3], [4, 5, 6]] [[1, 0], [0, 1], [1, 1]] = [[1 + 3, 2 + 3], [4 + 6, 5 + 6]] = [[4, 5], [10, 11]]
    TD C = matmul(TD::from(2, 3, {1, 2, 3, 4, 5, 6}), TD::from(3, 2, {1, 0, 0, 1, 1, 1}));
    REQUIRE(C.shape == shp(2, 2));
    CHECK(C.data == std::vector<double>{4, 5, 10, 11});
    Rng rng(122);
    for (Dims d : kOddShapes) {
        CAPTURE(d.M);
        CAPTURE(d.N);
        CAPTURE(d.K);
        TD A = randn(d.M, d.K, rng), B = randn(d.K, d.N, rng);
        TD ref(d.M, d.N), bound(d.M, d.N);
        gemm_reference<double>(d.M, d.N, d.K, A.ptr(), d.K, 1, B.ptr(), d.N, 1, ref.ptr(), d.N, false);
        TD absA = abs_t(A), absB = abs_t(B);
        gemm_reference<double>(d.M, d.N, d.K, absA.ptr(), d.K, 1, absB.ptr(), d.N, 1, bound.ptr(), d.N, false);
        check_close(matmul(A, B), ref, bound, d.K, "matmul");
        // matmul_acc: C += A B.
        TD C0 = randn(d.M, d.N, rng), Cacc = C0;
        matmul_acc(A, B, Cacc);
        TD refacc = add(C0, ref);
        check_close(Cacc, refacc, add(abs_t(C0), bound), d.K, "matmul_acc");
    }
}

TEST_CASE("matmul_nt: equals matmul(A, transpose(B)) on odd shapes") {
    // [[1, 2]] [[3, 4], [5, 6]]^T = [[1*3 + 2*4, 1*5 + 2*6]] = [[11, 17]]
    CHECK(matmul_nt(TD::from(1, 2, {1, 2}), TD::from(2, 2, {3, 4, 5, 6})).data == std::vector<double>{11, 17});
    Rng rng(123);
    for (Dims d : kOddShapes) {
        CAPTURE(d.M);
        CAPTURE(d.N);
        CAPTURE(d.K);
        TD A = randn(d.M, d.K, rng), B = randn(d.N, d.K, rng);
        TD ref(d.M, d.N), bound(d.M, d.N);
        TD absA = abs_t(A), absB = abs_t(B);
        gemm_reference<double>(d.M, d.N, d.K, A.ptr(), d.K, 1, B.ptr(), 1, d.K, ref.ptr(), d.N, false);
        gemm_reference<double>(d.M, d.N, d.K, absA.ptr(), d.K, 1, absB.ptr(), 1, d.K, bound.ptr(), d.N, false);
        TD C = matmul_nt(A, B);
        check_close(C, ref, bound, d.K, "matmul_nt vs reference");
        check_close(C, matmul(A, transpose(B)), bound, d.K, "matmul_nt vs matmul(A, B^T)");
    }
}

TEST_CASE("matmul_tn: equals matmul(transpose(A), B) on odd shapes, and matmul_tn_acc accumulates") {
    // [[1, 2], [3, 4]]^T [[1], [1]] = [[1 + 3], [2 + 4]] = [[4], [6]]
    CHECK(matmul_tn(TD::from(2, 2, {1, 2, 3, 4}), TD::from(2, 1, {1, 1})).data == std::vector<double>{4, 6});
    Rng rng(124);
    for (Dims d : kOddShapes) {
        CAPTURE(d.M);
        CAPTURE(d.N);
        CAPTURE(d.K);
        TD A = randn(d.K, d.M, rng), B = randn(d.K, d.N, rng);
        TD ref(d.M, d.N), bound(d.M, d.N);
        TD absA = abs_t(A), absB = abs_t(B);
        gemm_reference<double>(d.M, d.N, d.K, A.ptr(), 1, d.M, B.ptr(), d.N, 1, ref.ptr(), d.N, false);
        gemm_reference<double>(d.M, d.N, d.K, absA.ptr(), 1, d.M, absB.ptr(), d.N, 1, bound.ptr(), d.N, false);
        TD C = matmul_tn(A, B);
        check_close(C, ref, bound, d.K, "matmul_tn vs reference");
        check_close(C, matmul(transpose(A), B), bound, d.K, "matmul_tn vs matmul(A^T, B)");
        TD C0 = randn(d.M, d.N, rng), Cacc = C0;
        matmul_tn_acc(A, B, Cacc);
        check_close(Cacc, add(C0, ref), add(abs_t(C0), bound), d.K, "matmul_tn_acc");
    }
    // Float.
    TF Af = rand_t<float>(9, 4, rng), Bf = rand_t<float>(9, 3, rng);
    TF Cf = matmul_tn(Af, Bf), Rf = matmul(transpose(Af), Bf);
    for (std::size_t k = 0; k < Cf.size(); k++) CHECK(Cf[k] == doctest::Approx(Rf[k]).epsilon(1e-5).scale(1.0));
}

TEST_CASE("matmul: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, matmul(TD(3, 4), TD(5, 6)), "3x4", "5x6");
    CHECK_THROWS_NAMING(ShapeError, matmul(TD::vector({1, 2, 3}), TD(3, 2)), "A", "3");
    TD C(3, 3);
    CHECK_THROWS_NAMING(ShapeError, matmul_acc(TD(3, 4), TD(4, 5), C), "3x4", "4x5", "3x3");
    CHECK_THROWS_NAMING(ShapeError, transpose(TD::vector({1, 2})), "2");
}

TEST_CASE("matmul_nt: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, matmul_nt(TD(3, 4), TD(5, 6)), "3x4", "5x6");
    CHECK_THROWS_NAMING(ShapeError, matmul_nt(TD(3, 4), TD::vector({1, 2, 3, 4})), "B", "4");
}

TEST_CASE("matmul_tn: wrong shape") {
    TD C(3, 3);
    CHECK_THROWS_NAMING(ShapeError, matmul_tn(TD(3, 4), TD(5, 6)), "3x4", "5x6");
    CHECK_THROWS_NAMING(ShapeError, matmul_tn(TD(3, 4), TD::vector({1, 2, 3})), "B", "3");
    CHECK_THROWS_NAMING(ShapeError, matmul_tn_acc(TD(3, 4), TD(3, 5), C), "3x4", "3x5", "3x3");
}

// ================================================================================================
// dropout_mask
// ================================================================================================
TEST_CASE("dropout_mask: fraction of zeros near p, scale 1/(1-p), expectation preserved") {
    for (double p : {0.1, 0.3, 0.5, 0.9}) {
        CAPTURE(p);
        Rng rng(131);
        const int rows = 200, cols = 500;  // 100000 entries: std of the zero fraction <= 0.0016
        TD m = dropout_mask<double>({rows, cols}, p, rng);
        REQUIRE(m.shape == shp(rows, cols));
        const double keep = 1.0 / (1.0 - p);
        std::size_t zeros = 0;
        double sum = 0;
        bool only_two_values = true;
        for (double v : m.data) {
            zeros += v == 0.0;
            only_two_values &= v == 0.0 || v == keep;
            sum += v;
        }
        CHECK(only_two_values);
        CHECK(std::fabs((double)zeros / m.size() - p) <= 0.01);
        CHECK(std::fabs(sum / m.size() - 1.0) <= 0.01 * keep);  // E[mask] = (1 - p) / (1 - p) = 1
        // X * mask keeps the mean of X = 2: E[2 mask] = 2.
        TD X(rows, cols, 2.0);
        multiply_inplace(X, m);
        double mx = 0;
        for (double v : X.data) mx += v;
        CHECK(std::fabs(mx / X.size() - 2.0) <= 0.02 * keep);
    }
    // Float: scale 1/(1 - 0.2) = 1.25 exactly representable.
    Rng rng(132);
    TF mf = dropout_mask<float>({10, 10}, 0.2, rng);
    for (float v : mf.data) CHECK((v == 0.0f || v == 1.25f));
}

TEST_CASE("dropout_mask: reproducible, p = 0 gives an empty mask, multiply_inplace") {
    Rng a(7), b(7), c(8);
    TD ma = dropout_mask<double>({4, 6}, 0.5, a), mb = dropout_mask<double>({4, 6}, 0.5, b),
       mc = dropout_mask<double>({4, 6}, 0.5, c);
    CHECK(ma.data == mb.data);
    CHECK(ma.data != mc.data);
    Rng d(7);
    TD empty = dropout_mask<double>({4, 6}, 0.0, d);
    CHECK(empty.empty());
    CHECK(d.state == 7);  // nothing drawn
    TD X = TD::from(1, 3, {1, 2, 3});
    multiply_inplace(X, empty);  // no-op
    CHECK(X.data == std::vector<double>{1, 2, 3});
    // Hand: (1, 2, 3) * (0, 2, 2) = (0, 4, 6).
    multiply_inplace(X, TD::from(1, 3, {0, 2, 2}));
    CHECK(X.data == std::vector<double>{0, 4, 6});
}

TEST_CASE("dropout_mask: bad p and wrong shape") {
    Rng rng(133);
    CHECK_THROWS_NAMING(Error, dropout_mask<double>({2, 2}, 1.0, rng), "p", "1");
    CHECK_THROWS_AS(dropout_mask<double>({2, 2}, 1.5, rng), Error);
    // A NaN p (a typo in a config) must not give a mask of NaNs.
    CHECK_THROWS_AS(dropout_mask<double>({2, 2}, std::numeric_limits<double>::quiet_NaN(), rng), Error);
    CHECK_THROWS_NAMING(ShapeError, dropout_mask<double>({2, -2}, 0.5, rng), "2x-2");
    TD X(3, 4);
    CHECK_THROWS_NAMING(ShapeError, multiply_inplace(X, TD(4, 3, 1.0)), "3x4", "4x3");
}

// ================================================================================================
// Rng
// ================================================================================================
TEST_CASE("Rng: same seed same sequence, known splitmix64 values") {
    // splitmix64 from state 0: the published first outputs.
    Rng r0(0);
    CHECK(r0.next() == 0xE220A8397B1DCDAFull);
    CHECK(r0.next() == 0x6E789E6AA1B965F4ull);
    CHECK(r0.next() == 0x06C45D188009454Full);
    Rng a(12345), b(12345), c(12346);
    bool same = true, differs = false;
    for (int k = 0; k < 1000; k++) {
        const uint64_t x = a.next(), y = b.next(), z = c.next();
        same &= x == y;
        differs |= x != z;
    }
    CHECK(same);
    CHECK(differs);
    Rng d(99), e(99);
    for (int k = 0; k < 100; k++) {
        CHECK(d.uniform() == e.uniform());
        CHECK(d.normal() == e.normal());
        CHECK(d.below(17) == e.below(17));
    }
    // uniform() uses the top 53 bits: from state 0 it is 0xE220A8397B1DCDAF >> 11 / 2^53.
    Rng f(0);
    CHECK(f.uniform() == (double)(0xE220A8397B1DCDAFull >> 11) / 9007199254740992.0);
}

TEST_CASE("Rng: known mean and variance of uniform() and normal(), range of below()") {
    Rng rng(2024);
    const int N = 200000;
    double su = 0, su2 = 0, sn = 0, sn2 = 0, sn4 = 0;
    double umin = 1, umax = 0;
    for (int k = 0; k < N; k++) {
        const double u = rng.uniform();
        umin = std::min(umin, u), umax = std::max(umax, u);
        su += u, su2 += u * u;
        const double z = rng.normal();
        REQUIRE(std::isfinite(z));
        sn += z, sn2 += z * z, sn4 += z * z * z * z;
    }
    CHECK(umin >= 0.0);
    CHECK(umax < 1.0);
    // uniform: mean 1/2, variance 1/12 (std of the sample mean 0.00065).
    CHECK(std::fabs(su / N - 0.5) <= 0.005);
    CHECK(std::fabs(su2 / N - (su / N) * (su / N) - 1.0 / 12) <= 0.002);
    // normal: mean 0 (std error 0.0022), variance 1 (std error 0.0032), E z^4 = 3 (std error ~0.022).
    const double mean = sn / N, var = sn2 / N - mean * mean;
    CHECK(std::fabs(mean) <= 0.012);
    CHECK(std::fabs(var - 1.0) <= 0.02);
    CHECK(std::fabs(sn4 / N - 3.0) <= 0.12);
    // below(n): every value in 0..n-1, each about N/n times.
    std::vector<int> counts(7, 0);
    for (int k = 0; k < 70000; k++) {
        const int v = rng.below(7);
        REQUIRE(v >= 0);
        REQUIRE(v < 7);
        counts[v]++;
    }
    for (int v = 0; v < 7; v++) CHECK(std::abs(counts[v] - 10000) <= 500);
}
