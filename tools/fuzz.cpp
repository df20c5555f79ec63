// tools/fuzz.cpp: the libFuzzer targets of `make fuzz`, one per reader of the program, and the
// properties every input must keep. Built with clang++ -fsanitize=fuzzer,address,undefined and the
// standard library's index checks, one program per target (-DFUZZ_TARGET_NAME); tools/fuzz runs
// them (docs/files.md, "Fuzzing"). Every target holds the program to one rule: bad input is a
// tf::Error, never another exception, an abort, a hang or a sanitizer's report. The property
// targets add what must hold for every valid input:
//   bpe_roundtrip    GPT-2's and RoBERTa's byte-level BPE: decode(encode(x)) == x for valid UTF-8 x
//                    (RoBERTa: but the white space before a "<mask>", which it takes along)
//   subword_utf8     BERT's WordPiece and GPT-1's BPE encode every valid UTF-8 text without an error
// The readers:
//   json             parse_json (safetensors headers, tokenizer files, config.json)
//   safetensors      load_safetensors and load_model on the bytes as a file (every layout: ours and
//                    Hugging Face's GPT-2, GPT-1, BERT and RoBERTa)
//   hf_config        load_model of an exported tiny GPT-2 whose config.json is the bytes
//   gpt2_bpe         encoder.json + vocab.bpe (the bytes split at the first NUL) as a GPT-2 BPE
//   gpt1_bpe         encoder.json + merges.txt (the same split) as GPT-1's BPE
//   wordpiece        vocab.txt as BERT's WordPiece
//   token_file       llm.c's token files
//   labelled         fine-tuning's tab-separated files (the first byte picks the task and the columns)
#include "../transformer.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <string>
#include <vector>
#include <unistd.h>

using namespace tf;

namespace {

// A directory of the fuzzer's own under $TMPDIR (or /tmp), emptied and removed when the fuzzer
// exits (libFuzzer ends a timed run with exit(), which runs the atexit handlers).
std::vector<std::string>& temp_dirs() {
    static std::vector<std::string> dirs;
    return dirs;
}
void remove_temp_dirs() {
    for (const std::string& d : temp_dirs()) {
        if (DIR* h = ::opendir(d.c_str())) {
            while (const dirent* e = ::readdir(h)) {
                const std::string name = e->d_name;
                if (name != "." && name != "..") std::remove((d + "/" + name).c_str());
            }
            ::closedir(h);
        }
        ::rmdir(d.c_str());
    }
}
std::string temp_dir(const char* prefix) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "XXXXXX";
    if (!::mkdtemp(&tmpl[0])) std::abort();
    if (temp_dirs().empty()) std::atexit(remove_temp_dirs);
    temp_dirs().push_back(tmpl);
    return tmpl;
}

// The input as a file of its own (the readers of checkpoints take a path).
[[maybe_unused]] std::string as_file(const std::string& bytes, const std::string& name) {
    static const std::string dir = temp_dir("tf-fuzz-");
    const std::string path = dir + "/" + name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
    std::fclose(f);
    return path;
}

// Whether text is valid UTF-8 (the tokenizers' input contract).
[[maybe_unused]] bool valid_utf8(const std::string& text) {
    uint32_t cp = 0;
    for (std::size_t i = 0; i < text.size();) {
        const int n = utf8_next(text, i, cp);
        if (n == 0) return false;
        i += (std::size_t)n;
    }
    return true;
}

// A byte-level BPE learnt from a small text (kind gpt2-bpe, or roberta-bpe with RoBERTa's specials).
[[maybe_unused]] Tokenizer learnt_bpe(const std::string& kind) {
    BpePieces pieces;
    const std::vector<std::string> specials =
        kind == "roberta-bpe" ? std::vector<std::string>{"<s>", "<pad>", "</s>", "<unk>", "<mask>"} : std::vector<std::string>{};
    bpe_count_text(pieces, "the quick brown fox jumps over the lazy dog\nthe the the fox fox \xc3\xa9t\xc3\xa9 \xe2\x82\xac 123 1234\n");
    BpeLearnOptions o;
    o.merges = 40;
    o.specials = specials;
    const BpeLearnt b = bpe_learn(pieces, o);
    return make_tokenizer(kind, bpe_encoder_json(b), bpe_vocab_bpe(b), "the fuzzer's BPE");
}

// What decode(encode(x)) gives for RoBERTa: x, but the white space (' ', '\t', '\n', '\r') just
// before each "<mask>" is gone, which <mask> takes along (Hugging Face's lstrip), up to the end of
// the special token before it. Its special tokens are matched left to right as they appear.
[[maybe_unused]] std::string roberta_round_trip(const std::string& x) {
    static const char* const specials[] = {"<s>", "<pad>", "</s>", "<unk>", "<mask>"};
    std::string out;
    std::size_t kept = 0;  // out's length at the end of the last special token
    for (std::size_t i = 0; i < x.size(); i++) {
        const char* hit = nullptr;
        if (x[i] == '<')
            for (const char* sp : specials)
                if (x.compare(i, std::string(sp).size(), sp) == 0) {
                    hit = sp;
                    break;
                }
        if (!hit) {
            out += x[i];
            continue;
        }
        if (std::string(hit) == "<mask>")
            while (out.size() > kept && (out.back() == ' ' || out.back() == '\t' || out.back() == '\n' || out.back() == '\r')) out.pop_back();
        out += hit;
        kept = out.size();
        i += std::string(hit).size() - 1;
    }
    return out;
}

[[noreturn, maybe_unused]] void property_broken(const char* what) {
    std::fprintf(stderr, "property broken: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    const std::string in(reinterpret_cast<const char*>(data), size);
    const std::size_t nul = in.find('\0');
    const std::string first = in.substr(0, nul), second = nul == std::string::npos ? std::string() : in.substr(nul + 1);
    try {
#if defined(FUZZ_TARGET_json)
        const Json j = parse_json(in);
        (void)j.get("x");
#elif defined(FUZZ_TARGET_safetensors)
        const std::string path = as_file(in, "model.safetensors");
        try {
            const SafeTensors st = load_safetensors(path);
            (void)st.find("W_e");
        } catch (const Error&) {
        }
        const LoadedModel m = load_model(path, {"adam.", "train."});
        (void)m;
#elif defined(FUZZ_TARGET_hf_config)
        static const std::string model = [] {
            const Config c = preset("tiny-gpt2");
            Params<float> p = make_params<float>(c);
            init_params(c, p, 1);
            const std::string d = temp_dir("tf-fuzz-hf-");
            Config e = c;
            e.activation = Activation::gelu_tanh;
            e.attn_bias = true;
            Params<float> q = make_params<float>(e);
            init_params(e, q, 1);
            export_hf(d, e, q);
            return d + "/model.safetensors";
        }();
        std::FILE* f = std::fopen((model.substr(0, model.rfind('/')) + "/config.json").c_str(), "wb");
        if (!f) std::abort();
        std::fwrite(in.data(), 1, in.size(), f);
        std::fclose(f);
        const LoadedModel m = load_model(model);
        (void)m;
#elif defined(FUZZ_TARGET_gpt2_bpe)
        const Tokenizer t = make_tokenizer("gpt2-bpe", first, second, "the fuzzed files");
        const std::vector<int> ids = t.encode("hello world, h\xc3\xa9llo");
        (void)t.decode(ids);
#elif defined(FUZZ_TARGET_gpt1_bpe)
        const GPT1BPE b = make_gpt1_bpe(first, second);
        const std::vector<int> ids = b.encode("hello world, h\xc3\xa9llo");
        (void)b.decode(ids);
#elif defined(FUZZ_TARGET_wordpiece)
        const WordPiece w = make_wordpiece(in);
        const std::vector<int> ids = w.encode("Hello, world! h\xc3\xa9llo [MASK]");
        (void)w.decode(ids);
#elif defined(FUZZ_TARGET_token_file)
        const std::vector<int> ids = parse_token_file(in, "the fuzzed file");
        (void)ids;
#elif defined(FUZZ_TARGET_labelled)
        if (in.empty()) return 0;
        const unsigned char pick = (unsigned char)in[0];
        const FinetuneKind kinds[] = {FinetuneKind::classify, FinetuneKind::entailment, FinetuneKind::similarity,
                                      FinetuneKind::choice};
        std::vector<std::string> classes;
        if (pick & 8) classes = {"pos", "neg"};
        const auto examples = parse_labelled(in.substr(1), "the fuzzed file", kinds[pick % 4], classes, (pick & 4) != 0,
                                             (pick & 16) == 0);
        (void)examples;
#elif defined(FUZZ_TARGET_bpe_roundtrip)
        static const Tokenizer gpt2 = learnt_bpe("gpt2-bpe"), roberta = learnt_bpe("roberta-bpe");
        if (!valid_utf8(in)) return 0;
        for (const Tokenizer* t : {&gpt2, &roberta}) {
            std::vector<int> ids;
            try {
                ids = t->encode(in);
            } catch (const Error&) {
                property_broken("a byte-level BPE refused valid UTF-8");
            }
            const std::string want = t == &roberta ? roberta_round_trip(in) : in;
            if (t->decode(ids) != want) property_broken("decode(encode(x)) != x (RoBERTa: but the white space <mask> takes)");
        }
#elif defined(FUZZ_TARGET_subword_utf8)
        static const WordPiece wp = make_wordpiece("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nquick\n##ly\nfox\n,\n.\n!\n");
        static const GPT1BPE g1 = make_gpt1_bpe("{\"<unk>\": 0, \"t\": 1, \"h\": 2, \"e</w>\": 3, \"th\": 4, \"the</w>\": 5, "
                                                "\"e\": 6, \"a</w>\": 7}",
                                                "#version: 0.2\nt h\nth e</w>\n");
        if (!valid_utf8(in)) return 0;
        try {
            (void)wp.decode(wp.encode(in));
        } catch (const Error&) {
            property_broken("WordPiece refused valid UTF-8");
        }
        try {
            (void)g1.decode(g1.encode(in));
        } catch (const Error&) {
            property_broken("GPT-1's BPE refused valid UTF-8");
        }
#else
#error "define one FUZZ_TARGET_name (see the top of tools/fuzz.cpp)"
#endif
    } catch (const Error&) {
        // the one way bad input may end: an error naming what is wrong
    }
    return 0;
}
