#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "transformer.hpp"
using namespace tf;

TEST_CASE("Softmax: rows sum to 1") {
    Tensor<double> X = Tensor<double>::from(2, 3, {1, 2, 3, -1, 0, 1});
    Tensor<double> Y = Softmax(X);
    CHECK(Y(0, 0) + Y(0, 1) + Y(0, 2) == doctest::Approx(1.0));
}
