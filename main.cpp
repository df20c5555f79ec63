// main.cpp - the command-line program.
#include <cstdio>
#include <exception>

#include "transformer.hpp"

int main(int argc, char** argv) {
    (void)argc, (void)argv;
    try {
        std::printf("transformer: modules diag Stack OneHot Softmax Mask_BD Mask_AR Attention Concat MultiHeadSA FFN_ReLU FFN_GELU LayerNorm CrossEntropy\n");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
