// main.cpp - the command-line program: train, finetune, predict, sample, fill, eval, init, grad, params,
// tokenize, bpe, bench, export, and for teaching masks, attention, explain.
// Every command parses its flags strictly: an unknown flag, a missing value or a malformed number
// is an error with a message and exit status 1.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>


#include "transformer.hpp"

using namespace tf;


// ---- Flags -----------------------------------------------------------------------------------------
struct Flags {
    std::map<std::string, std::string> values;
    std::set<std::string> used;
    std::string command;               // the command whose flags these are
    std::set<std::string> documented;  // the flags its help lists: the only ones it may read
    std::set<std::string> switches;    // those of them that are switches (FlagKind SWITCH)
    std::vector<std::string> resumable;  // those train --resume may change (RESUMABLE)
    bool has(const std::string& k) const { return values.count(k) > 0; }
    void use(const std::string& k) {  // a command reads only flags its help documents
        if (!documented.empty() && !documented.count(k))
            throw Error("internal error: " + command + " reads --" + k + ", which its help does not document");
        used.insert(k);
    }
    std::string str(const std::string& k, const std::string& fallback = "") {
        use(k);
        auto it = values.find(k);
        return it == values.end() ? fallback : it->second;
    }
    std::string need(const std::string& k) {
        if (!has(k)) throw Error("missing flag --" + k);
        return str(k);
    }
    long long integer(const std::string& k, long long fallback) {
        if (!has(k)) return use(k), fallback;
        const std::string s = str(k);
        long long v = 0;
        const NumberRead r = read_integer(s, v);
        if (r == NumberRead::not_a_number) throw Error("--" + k + " expects an integer, got '" + s + "'");
        if (r == NumberRead::out_of_range) throw Error("--" + k + " is out of range (at most " + std::to_string(LLONG_MAX) + "), got '" + s + "'");
        return v;
    }
    // A random seed: any integer 0..2^64-1 (every state of the generator), nothing else.
    uint64_t seed(const std::string& k, uint64_t fallback) {
        if (!has(k)) return use(k), fallback;
        const std::string s = str(k);
        uint64_t v = 0;
        if (read_unsigned(s, v) != NumberRead::ok)
            throw Error("--" + k + " takes an integer 0.." + std::to_string(ULLONG_MAX) + ", got '" + s + "'");
        return v;
    }
    int int32(const std::string& k, int fallback) {
        const long long v = integer(k, fallback);
        if (v < INT_MIN || v > INT_MAX) throw Error("--" + k + " is out of range, got " + std::to_string(v));
        return (int)v;
    }
    // A count or size: given, it must be at least `min` (0 or a negative number is never taken as
    // "the default"); the error names the flag and the value.
    long long count(const std::string& k, long long fallback, long long min = 1) {
        const long long v = integer(k, fallback);
        if (has(k) && v < min)
            throw Error("--" + k + " must be " + (min == 1 ? std::string("positive") : min == 0 ? std::string("0 or more") : "at least " + std::to_string(min)) +
                        ", got " + std::to_string(v));
        return v;
    }
    int count32(const std::string& k, int fallback, int min = 1) {
        const long long v = count(k, fallback, min);
        if (v > INT_MAX) throw Error("--" + k + " is out of range, got " + std::to_string(v));
        return (int)v;
    }
    double number(const std::string& k, double fallback) {
        if (!has(k)) return use(k), fallback;
        const std::string s = str(k);
        double v = 0;
        if (read_real(s, v) != NumberRead::ok) throw Error("--" + k + " expects a number, got '" + s + "'");
        return v;
    }
    std::vector<std::string> list(const std::string& k) {  // a flag that may be given again: every value
        std::vector<std::string> out;
        if (!has(k)) return use(k), out;
        const std::string v = str(k);
        for (std::size_t i = 0, e;; i = e + 1) {
            e = v.find('\0', i);
            out.push_back(v.substr(i, e == std::string::npos ? std::string::npos : e - i));
            if (e == std::string::npos) return out;
        }
    }
    bool flag(const std::string& k) {  // a boolean flag: parse_flags stored "1" or "0"
        use(k);
        return has(k) && values.at(k) == "1";
    }
    std::string valid;  // the flags the command takes, for the unknown-flag error
    void done() const {  // every flag given must have been read by the command
        for (auto& kv : values)
            if (!used.count(kv.first)) throw unknown_flag(kv.first, command, valid);
    }
    static Error unknown_flag(const std::string& name, const std::string& command, const std::string& valid) {
        return Error("unknown flag --" + name + " for " + (command.empty() ? "this command" : command) +
                     (valid.empty() ? "" : " (its flags: " + valid + ")"));
    }
};


// ---- The table's types (the table itself follows the commands) -------------------------------------
// Each command's help and its flag checks come from one table: `transformer CMD --help` prints the
// command's entry, an unknown flag's error lists the entry's flags, and Flags refuses to read a
// flag the entry does not document (so the help cannot fall behind the parser).
// Convention: each flag's text says what it is, its default ("default: ...") and unit where it has
// one; positions of tokens count from 1, as in the formulas (docs/formulas.md).
// A flag's kind: a value (--name VALUE), a switch (--name alone, or --name=true|false|1|0), one that
// may be given again (its values kept in order), one that train --resume may still change.
enum FlagKind { VALUE = 0, SWITCH = 1, REPEATED = 2, RESUMABLE = 4 };
struct FlagDoc {
    const char* name;  // without the leading --
    std::string text;  // "VALUE  what it is (default: ...)"
    int kind = VALUE;  // FlagKind bits
};
// A default as the help prints it, taken from the options' own initialisers (TrainOptions,
// finetune_loop_defaults()), so that the help and the code cannot disagree.
static std::string dflt(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}
static const TrainOptions& train_defaults() {
    static const TrainOptions t;
    return t;
}
static const TrainOptions& finetune_defaults() {
    static const TrainOptions t = finetune_loop_defaults();
    return t;
}
struct CommandDoc {
    const char* name;
    const char* group;    // train, use, inspect, files: the overview's groups
    const char* summary;  // one line
    std::vector<FlagDoc> flags;
    const char* example;
    const char* notes;  // printed after the flags ("" = none)
    int (*run)(Flags&);  // the command
};

static std::vector<int> parse_ids(const std::string& s, const std::string& what) {
    std::vector<int> ids;
    if (!s.empty() && s.back() == ',') throw Error(what + " ends with a comma");
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) ids.push_back(parse_int(item, what));
    if (ids.empty()) throw Error(what + " is empty");
    return ids;
}

// ---- tokenize ----------------------------------------------------------------------------------------
static int cmd_tokenize(Flags& f) {
    const std::string enc = f.str("encoder"), merges = f.str("vocab"), kind = f.str("tokenizer"), ck = f.str("checkpoint");
    const std::string text = f.str("text"), file = f.str("file"), ids = f.str("ids"), out = f.str("out");
    f.done();
    if (f.has("checkpoint") && (f.has("encoder") || f.has("vocab") || f.has("tokenizer")))
        throw Error("tokenize: --checkpoint brings its own tokenizer; leave out --encoder, --vocab and --tokenizer");
    if (!f.has("checkpoint") && !f.has("vocab")) throw Error("tokenize: missing flag --vocab (or --checkpoint, a model's recorded tokenizer)");
    if (f.has("text") + f.has("file") + f.has("ids") != 1) throw Error("tokenize: give exactly one of --text, --file, --ids");
    if (f.has("out") && f.has("ids")) throw Error("tokenize: --out writes the ids of --text or --file, not of --ids");
    if (f.has("out")) check_outputs({{out, "--out", OutputKind::token_file}}, {{file, "--file"}});
    Tokenizer bpe;  // GPT-2's or GPT-1's BPE, or WordPiece; from a checkpoint also characters
    if (f.has("checkpoint")) {
        bpe = tokenizer_of(load_model(ck, {"adam."}).file.metadata, ck);
        if (bpe.kind.empty()) throw Error("tokenize: '" + ck + "' records no tokenizer (released weights): give --vocab (and --encoder)");
    } else {
        bpe = load_tokenizer(kind, enc, merges);
    }
    if (f.has("ids")) {
        // Exactly the decoded bytes, so `tokenize --ids ... > f` gives back the encoded file; a
        // newline after them only on a terminal, where the prompt would follow the text.
        const std::string decoded = bpe.decode(parse_ids(ids, "--ids"));
        std::fwrite(decoded.data(), 1, decoded.size(), stdout);
        if (stdout_is_terminal()) std::printf("\n");
        return 0;
    }
    const std::string input = f.has("file") ? read_file(file) : text;
    const std::string where = f.has("file") ? "'" + file + "'" : "--text";
    const std::vector<int> tokens = encode_with_progress(bpe, input, where, !f.has("file"));
    const std::string line_ends = f.has("file") ? line_end_warning(input, file) : "";  // after any error: a refused run says that first
    if (!line_ends.empty()) std::fprintf(stderr, "%s\n", line_ends.c_str());
    if (f.has("out")) {  // llm.c's token file, for train --data and eval --data
        write_file_atomic(out, token_file_bytes(tokens));
        std::printf("wrote %s: %zu tokens (llm.c's .bin format: a 1024-byte header, then uint16 ids)\n", out.c_str(), tokens.size());
        return 0;
    }
    for (std::size_t k = 0; k < tokens.size(); k++) std::printf(k ? ",%d" : "%d", tokens[k]);
    std::printf("\n");
    std::fprintf(stderr, "%zu tokens\n", tokens.size());
    return 0;
}

// ---- params, init, grad ------------------------------------------------------------------------------
static int cmd_params(Flags& f) {
    const std::string name = f.str("preset"), path = f.str("checkpoint");
    f.done();
    if (f.has("preset") == f.has("checkpoint")) throw Error("params: give exactly one of --preset and --checkpoint");
    LoadedModel lm;
    if (!path.empty()) lm = load_model(path, {"adam."});  // a released file (GPT-1, GPT-2, BERT) or our own
    const Config c = path.empty() ? preset(name) : lm.config;
    const ParamCount k = count_params(c);
    std::printf("%s %s (%s): V=%d H=%d F=%d D=%d L=%d A=%d n_ctx=%d\n", path.empty() ? "preset" : "file",
                (path.empty() ? name : path).c_str(), variant_name(c.variant), c.V, c.H, c.F, c.D, c.L, c.A, c.n_ctx);
    std::printf("  embeddings    V*H + n_ctx*H            %12lld\n", k.embeddings);
    std::printf("  MultiHeadSAs  L*(A*3*H*D + A*D*H)      %12lld\n", k.attention);
    std::printf("  FFNets        L*(H*F + F + F*H + H)    %12lld\n", k.ffn);
    std::printf("  LayerNorms    L*4*H                    %12lld\n", k.layernorms);
    std::printf("lambda of the formulas (§24):            %12lld\n", k.seed_lambda);
    if (k.final_ln) std::printf("  + final LayerNorm ln_f (2*H)           %12lld\n", k.final_ln);
    if (k.segments) std::printf("  + segment vectors w_A, w_B (2*H)       %12lld\n", k.segments);
    if (k.pad_position) std::printf("  + <pad>'s position vector w_pad (H)    %12lld\n", k.pad_position);
    if (k.attn_biases) std::printf("  + attention biases L*(A*3*D + H)       %12lld\n", k.attn_biases);
    if (k.emb_ln) std::printf("  + embedding LayerNorm (2*H)            %12lld\n", k.emb_ln);
    if (k.mlm_head) std::printf("  + masked-LM head H*H + 3*H + V         %12lld\n", k.mlm_head);
    if (k.pooler) std::printf("  + pooler H*H + H (unused)              %12lld\n", k.pooler);
    if (k.heads) std::printf("  + heads W_y, w                         %12lld\n", k.heads);
    std::printf("floats the model holds:                  %12lld\n", k.actual);
    if (!path.empty()) {  // what the file holds beside the parameters (the next-sentence head, ...)
        long long other = 0;
        for (auto& t : lm.file.tensors)
            if (t.first.rfind("adam.", 0) != 0) {
                std::printf("  + %-36s %12lld (kept, unused)\n", t.first.c_str(), (long long)t.second.size());
                other += (long long)t.second.size();
            }
        std::printf("floats the file holds (a tied copy once):%12lld (%+lld against the formulas' lambda)\n", k.actual + other,
                    k.actual + other - k.seed_lambda);
    }
    return 0;
}

static int cmd_init(Flags& f) {
    const std::string name = f.need("preset"), out = f.need("out");
    const uint64_t seed = f.seed("seed", 1);
    const bool emb_ln = f.flag("emb-ln"), mlm_head = f.flag("mlm-head");
    f.done();
    Config c = preset(name);
    if ((emb_ln || mlm_head) && is_causal(c.variant))
        throw Error(std::string("init: --emb-ln and --mlm-head (the released BERT's additions) apply to bert and roberta presets, not ") +
                    variant_name(c.variant));
    c.emb_ln = c.emb_ln || emb_ln || mlm_head, c.mlm_head = c.mlm_head || mlm_head;
    check_outputs({{out, "--out", OutputKind::checkpoint}});
    Params<float> p = make_params<float>(c);
    init_params(c, p, seed);
    save_model(out, c, p, {{"init_seed", std::to_string(seed)}});
    std::printf("wrote %s: %s, %lld parameters, seed %llu\n", out.c_str(), variant_name(c.variant), count_params(c).actual,
                (unsigned long long)seed);
    return 0;
}

// The batch of grad and explain: GPT variants predict positions 2..n; BERT/RoBERTa the --masked
// positions (counted from 1, as in the formulas), whose tokens become the mask id.
static Batch loss_batch(const Config& c, const std::vector<int>& tokens, const std::string& seg, const std::string& masked) {
    Batch b;
    b.n = (int)tokens.size(), b.tokens = tokens;
    if (!seg.empty()) {
        if (!has_segments(c.variant)) throw Error("--segments applies to bert only");
        b.segments = parse_ids(seg, "--segments");
    }
    if (is_causal(c.variant)) {
        if (!masked.empty()) throw Error("--masked applies to bert and roberta only");
        if (b.n < 2) throw Error("a GPT loss needs at least 2 tokens");
        b.targets = next_token_targets(tokens, 1, b.n);
    } else {
        if (masked.empty()) throw Error("missing flag --masked (positions to predict, counted from 1)");
        b.targets.assign(tokens.size(), -1);
        for (int position : parse_ids(masked, "--masked")) {
            if (position < 1 || position > b.n)
                throw Error("--masked position " + std::to_string(position) + " is outside 1.." + std::to_string(b.n) +
                            " (positions count from 1, as in the formulas)");
            const int j = position - 1;
            if (tokens[j] < 0 || tokens[j] >= c.V) break;  // model_loss reports the bad id
            b.targets[j] = tokens[j];
            b.tokens[j] = c.mask_id;
        }
    }
    return b;
}

static int cmd_grad(Flags& f) {
    const std::string path = f.need("checkpoint"), out = f.need("out");
    const std::vector<int> tokens = parse_ids(f.need("tokens"), "--tokens");
    const std::string seg = f.str("segments"), masked = f.str("masked");
    f.done();
    check_outputs({{out, "--out", OutputKind::checkpoint}}, {{path, "--checkpoint"}});
    LoadedModel lm = load_model(path, {"adam."});
    const Config& c = lm.config;
    const Batch b = loss_batch(c, tokens, seg, masked);
    Params<float> g = make_params<float>(c);
    const double loss = model_loss(c, lm.params, b, &g);
    std::vector<std::pair<std::string, const Tensor<float>*>> list;
    for (auto& nt : named_tensors(c, g)) list.push_back({nt.name, nt.tensor});
    std::map<std::string, std::string> meta = config_metadata(c);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", loss);
    meta["loss"] = buf;
    save_safetensors(out, meta, list);
    std::printf("loss %.9g\nwrote %s\n", loss, out.c_str());
    return 0;
}

// ---- train, sample, fill, eval ---------------------------------------------------------------------
// A training run stopped by SIGINT or SIGTERM: it finished its step and saved a checkpoint (through
// save_model's atomic writer); the exit status is the shell's for that signal, 128 + its number.
// A run stopped by SIGINT or SIGTERM: where it stopped, its checkpoint, and the command that goes on
// from it (`how`: "resume with", ...), which works as printed.
static int stopped_by_signal(int sig, long long step, const std::string& file, const std::string& command,
                             const std::string& how = "resume with") {
    std::fflush(stdout);
    std::fprintf(stderr, "stopped at step %lld by %s; checkpoint %s; %s: %s %s\n", step, sig == SIGINT ? "SIGINT" : "SIGTERM",
                 file.c_str(), how.c_str(), program_name().c_str(), command.c_str());
    return 128 + sig;
}

// `command` with the flags it was given, each as the shell reads it back, where `replace` gives
// a flag a new value (placed first, in its order).
static std::string command_again(const std::string& command, const Flags& f,
                                 const std::vector<std::pair<std::string, std::string>>& replace) {
    std::string line = command;
    std::set<std::string> replaced;
    auto add = [&](const std::string& k, const std::string& v) {
        if (f.switches.count(k)) {
            if (v == "1") line += " --" + k;
            return;
        }
        line += v.rfind("--", 0) == 0 ? " " + shell_word("--" + k + "=" + v) : " --" + k + " " + shell_word(v);
    };
    for (const auto& kv : replace) add(kv.first, kv.second), replaced.insert(kv.first);
    for (const auto& kv : f.values)
        if (!replaced.count(kv.first)) add(kv.first, kv.second);
    return line;
}

// The file name after `path` in the series NAME.EXT, NAME-2.EXT, NAME-3.EXT, ...
static std::string next_in_series(const std::string& path) {
    const std::size_t slash = last_separator(path), dot = path.find_last_of('.');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    std::string stem = has_ext ? path.substr(0, dot) : path;
    const std::string ext = has_ext ? path.substr(dot) : "";
    int k = 2;
    const std::size_t dash = stem.find_last_of('-');
    if (dash != std::string::npos && dash + 1 < stem.size() && (slash == std::string::npos || dash > slash) &&
        stem.find_first_not_of("0123456789", dash + 1) == std::string::npos && stem.size() - dash <= 6) {
        k = std::atoi(stem.c_str() + dash + 1) + 1;
        stem = stem.substr(0, dash);
    }
    return stem + "-" + std::to_string(k) + ext;
}

static int cmd_train(Flags& f) {
    if (f.has("resume")) {  // a resumed run keeps its model, data and hyperparameters
        std::string may;
        for (const std::string& k : f.resumable)
            if (k != "resume") may += (may.empty() ? "--" : ", --") + k;
        for (auto& kv : f.values)
            if (std::find(f.resumable.begin(), f.resumable.end(), kv.first) == f.resumable.end())
                throw Error("--" + kv.first + " cannot change a resumed run (it continues with the checkpoint's settings; only " + may +
                            " may be given; --data and --val: moved copies of the same texts)");
    }
    TrainOptions o;
    o.data = f.str("data");
    o.val_data = f.str("val");
    o.model = f.str("model", o.model);
    o.layers = f.count32("layers", o.layers);
    o.heads = f.count32("heads", o.heads);
    o.embd = f.count32("embd", o.embd);
    o.ffn = f.count32("ffn", o.ffn);
    o.block = f.count32("block", o.block);
    o.batch = f.count32("batch", o.batch);
    o.accum = f.count32("accum", o.accum);
    o.steps = f.has("steps") ? f.count("steps", 0) : f.has("resume") ? 0 : o.steps;
    o.warmup = f.count("warmup", o.warmup, 0);
    o.eval_every = f.count("eval-every", o.eval_every, 0);
    o.eval_steps = f.count("eval-steps", o.eval_steps);
    o.save_every = f.count("save-every", o.save_every, 0);
    o.log_every = f.count("log-every", o.log_every);
    o.stop_at = f.count("stop-at", o.stop_at, 0);
    o.lr = f.number("lr", o.lr);
    o.min_lr = f.number("min-lr", f.has("lr") ? o.lr / 10 : o.min_lr);
    o.weight_decay = f.number("weight-decay", o.weight_decay);
    o.beta1 = f.number("beta1", o.beta1);
    o.beta2 = f.number("beta2", o.beta2);
    o.grad_clip = f.number("grad-clip", o.grad_clip);
    o.dropout = f.number("dropout", o.dropout);
    o.activation = f.str("activation");
    o.gpt2_init = f.flag("gpt2-init");
    o.attn_bias = f.flag("attn-bias");
    o.emb_ln = f.flag("emb-ln");
    o.mlm_head = f.flag("mlm-head");
    o.line_windows = f.flag("line-windows");
    o.seed = f.seed("seed", o.seed);
    o.out = f.str("out", f.has("resume") ? "" : o.out);
    o.resume = f.str("resume");
    o.quiet = f.flag("quiet");
    o.memory_check = !f.flag("no-memory-check");
    o.init_from = f.str("init-from");
    o.encoder = f.str("encoder"), o.bpe_vocab = f.str("vocab");
    if (!o.init_from.empty()) {  // the model's shape comes from the file: a flag not given is 0 / "" (train checks the rest)
        o.model = f.str("model"), o.activation = f.str("activation");
        o.layers = f.count32("layers", 0), o.heads = f.count32("heads", 0), o.embd = f.count32("embd", 0), o.ffn = f.count32("ffn", 0);
        if (f.has("vocab") && !f.has("encoder")) throw Error("--vocab is GPT-2's vocab.bpe and goes with --encoder encoder.json");
    }
    o.objective = f.str("objective", o.objective);
    o.predict = f.count32("predict", o.predict);
    if (f.has("predict") && o.objective != "xlnet") throw Error("--predict applies to --objective xlnet only");
    if (o.objective == "xlnet") {  // XLNet's two streams run without dropout (formulas §16)
        if (f.has("dropout") && o.dropout != 0) throw Error("--dropout does not apply to --objective xlnet (trained without dropout)");
        o.dropout = 0;
    }
    f.done();
    const TrainResult r = train(o);
    const std::string file = o.out.empty() ? o.resume : o.out;
    if (r.signal) return stopped_by_signal(r.signal, r.steps_done, file, "train --resume " + shell_word(file));
    return 0;
}

// ---- finetune, predict -----------------------------------------------------------------------------
static int cmd_finetune(Flags& f) {
    FinetuneOptions o;
    o.checkpoint = f.need("checkpoint"), o.task = f.need("task"), o.train_file = f.need("train"), o.val_file = f.need("val");
    TrainOptions& t = o.loop;
    t.out = f.need("out");
    o.lambda = f.number("lambda", o.lambda);
    o.scratch = f.flag("scratch");
    if (f.has("truncate")) o.truncate = truncation_from_name(f.str("truncate"));
    o.encoder = f.str("encoder"), o.vocab = f.str("vocab"), o.tokenizer = f.str("tokenizer");  // released weights' tokenizer
    t.steps = f.count("steps", t.steps, 0);  // the defaults: finetune_loop_defaults()
    t.batch = f.count32("batch", t.batch);
    t.accum = f.count32("accum", t.accum);
    t.lr = f.number("lr", t.lr);
    t.warmup = f.count("warmup", t.warmup, 0);
    t.dropout = f.number("dropout", t.dropout);
    t.weight_decay = f.number("weight-decay", t.weight_decay);
    t.grad_clip = f.number("grad-clip", t.grad_clip);
    t.eval_every = f.count("eval-every", t.eval_every, 0);
    t.log_every = f.count("log-every", t.log_every);
    t.seed = f.seed("seed", t.seed);
    t.quiet = f.flag("quiet");
    t.memory_check = !f.flag("no-memory-check");
    f.done();
    const FinetuneResult r = finetune(o);
    // Fine-tuning goes on from the checkpoint's weights (not --scratch), with the same flags and a
    // new schedule (its optimiser state is not kept), into the next file of the series.
    if (r.signal)
        return stopped_by_signal(r.signal, r.steps_done, t.out,
                                 command_again("finetune", f, {{"checkpoint", t.out}, {"out", next_in_series(t.out)}, {"scratch", "0"}}),
                                 "fine-tune further from its weights (a new schedule of the same flags) with");
    return 0;
}

static int cmd_task(Flags& f) {
    const std::string task = f.need("task"), out = f.need("out");
    const int examples = f.count32("examples", 2000);
    const uint64_t seed = f.seed("seed", 1);
    const bool held_out = f.flag("held-out");
    f.done();
    if (task != "text" && task != "classify" && task != "entailment" && task != "similarity" && task != "choice")
        throw Error("unknown task '" + task + "' (the tasks: text, classify, entailment, similarity, choice)");
    if (examples > 10000000) throw Error("--examples must be between 1 and 10000000, got " + std::to_string(examples));
    check_outputs({{out, "--out", OutputKind::task_file}});
    std::string text;
    if (task == "text") {  // unlabelled problems "123+456=9750", one a line: a pre-training text
        Rng rng(seed);
        for (int k = 0; k < examples; k++) {
            int a, b;
            do a = rng.below(1000), b = rng.below(1000);
            while (AdditionTask::held_out(a, b) != held_out);
            text += AdditionTask::problem(a, b);
        }
    } else {
        text = addition_finetune_task(finetune_kind_from_name(task), examples, seed, held_out);
    }
    write_file_atomic(out, text);
    std::printf("wrote %s: %d %s examples%s\n", out.c_str(), examples, task.c_str(), held_out ? " (held-out pairs)" : "");
    return 0;
}

// Text for the terminal: valid, printable UTF-8 as it is; a byte that is not (an invalid UTF-8
// sequence, a control character) as \xNN, as tokenize and the pictures show it (token_label).
static std::string terminal_text(const std::string& s) {
    std::string o;
    for (std::size_t i = 0; i < s.size();) {
        uint32_t cp = 0;
        const int len = utf8_next(s, i, cp);
        if (len > 0 && (cp >= 0x20 || cp == '\t' || cp == '\n') && cp != 0x7F) {
            o += s.substr(i, (std::size_t)len), i += (std::size_t)len;
        } else {
            o += token_label(s.substr(i, 1)), i++;
        }
    }
    return o;
}

// predict's input, line by line: the fields the model's task needs, with or without the label
// (the model's task, not a guess from the file, decides: a classify file given to an entailment
// model is an error, not two unlabelled texts).
static void check_predict_fields(const std::string& text, const std::string& file, const FinetuneSpec& spec) {
    const int want = spec.kind == FinetuneKind::classify ? 2 : spec.kind == FinetuneKind::choice ? -1 : 3;
    const std::string task = finetune_kind_name(spec.kind);
    std::size_t line_no = 0, labels_first = 0, lines = 0;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t e = text.find('\n', i);
        if (e == std::string::npos) e = text.size();
        std::string line = text.substr(i, e - i);
        i = e + 1, line_no++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        lines++;
        const int fields = 1 + (int)std::count(line.begin(), line.end(), '\t');
        const std::string first = line.substr(0, line.find('\t'));
        if (std::find(spec.classes.begin(), spec.classes.end(), first) != spec.classes.end()) labels_first++;
        const bool ok = want > 0 ? fields == want || fields == want - 1 : fields >= 3;
        if (!ok)
            throw Error("'" + file + "' line " + std::to_string(line_no) + ": found " + std::to_string(fields) +
                        " tab-separated field" + (fields == 1 ? "" : "s") + "; the " + task + " task needs " +
                        (want > 0 ? std::to_string(want) + " with a label or " + std::to_string(want - 1) + " without"
                                  : std::string("at least 4 with the answer or 3 without")));
    }
    if (want == 3 && lines > 0 && labels_first == lines && !has_label_column(text, spec.kind))
        throw Error("'" + file + "' has 2 fields a line and every first field is one of the model's labels: an " + task +
                    " example is LABEL<TAB>TEXT_A<TAB>TEXT_B (3 fields), or TEXT_A<TAB>TEXT_B without the label");
}

static int cmd_predict(Flags& f) {
    const std::string path = f.need("checkpoint"), data = f.need("data");
    Truncation truncate = Truncation::none;
    if (f.has("truncate")) truncate = truncation_from_name(f.str("truncate"));
    const bool with_probs = f.flag("probs");
    f.done();
    LoadedModel lm = load_model(path, {"adam."});
    const FinetuneSpec spec = finetune_spec_of(lm, path);
    const auto& md = lm.file.metadata;
    const Tokenizer tok = tokenizer_of(md, path);  // finetune records the tokenizer it was given
    const bool subword = !tok.kind.empty() && tok.kind != "char";
    if (!subword && !md.count("vocab")) throw Error("'" + path + "' has no character vocabulary");
    const CharVocab vocab = subword ? CharVocab() : CharVocab::from_metadata(md.at("vocab"));
    const std::string text = read_file(data);
    require_text(text, data);
    check_predict_fields(text, data, spec);
    const bool labelled = has_label_column(text, spec.kind);
    std::vector<std::string> classes = spec.classes;
    std::vector<EncodedExample> ex;
    for (const LabelledExample& e : parse_labelled(text, data, spec.kind, classes, false, labelled))
        ex.push_back(subword ? encode_example(lm.config, spec, tok, e, data, truncate)
                             : encode_example(lm.config, spec, vocab, e, text, data, truncate));
    const std::string note = check_example_lengths(ex, lm.config, data, truncate);
    if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
    std::vector<std::vector<double>> probs;
    const std::vector<int> pred = finetune_predict(lm.config, lm.params, spec, ex, nullptr, with_probs ? &probs : nullptr);
    const bool choice = spec.kind == FinetuneKind::choice;
    auto name = [&](int y) { return choice ? std::to_string(y) : terminal_text(spec.classes[y]); };
    int right = 0;
    for (std::size_t i = 0; i < pred.size(); i++) {
        std::string line = name(pred[i]);
        if (with_probs)  // each class (answer) with its probability, in the model's order
            for (std::size_t y = 0; y < probs[i].size(); y++) {
                char p[32];
                std::snprintf(p, sizeof p, "=%.4f", probs[i][y]);
                line += "\t" + name((int)y) + p;
            }
        std::printf("%s\n", line.c_str());
        right += pred[i] == ex[i].label;
    }
    if (labelled) {
        // Beside the accuracy, what always answering the most frequent label would get (as finetune's note).
        int majority = 0;
        const double chance = majority_share(ex, &majority);
        const std::string label = spec.kind == FinetuneKind::choice ? std::to_string(majority) : terminal_text(spec.classes[majority]);
        std::fprintf(stderr, "accuracy: %.1f%% (%d of %zu); always answering '%s': %.1f%%\n", 100.0 * right / (double)pred.size(),
                     right, pred.size(), label.c_str(), 100.0 * chance);
        if (!choice) {  // per class: the confusion matrix, precision, recall and F1
            std::vector<int> gold;
            for (const EncodedExample& e : ex) gold.push_back(e.label);
            std::vector<std::string> names;
            for (const std::string& k : spec.classes) names.push_back(terminal_text(k));
            std::fprintf(stderr, "%s", class_report_text(class_report(pred, gold, (int)spec.classes.size()), names).c_str());
        }
    }
    return 0;
}

// The checkpoint's character vocabulary (written by `train`).
static CharVocab vocab_of(const LoadedModel& lm, const std::string& path) {
    auto it = lm.file.metadata.find("vocab");
    if (it == lm.file.metadata.end())
        throw Error("'" + path + "' has no character vocabulary (it was not written by `" + program_name() +
                    " train`; for GPT-2's tokenizer give --encoder and --vocab)");
    CharVocab v = CharVocab::from_metadata(it->second);
    const int expected = lm.config.V - (is_causal(lm.config.variant) ? 0 : 3);
    if (v.size() != expected)
        throw Error("'" + path + "': its vocabulary has " + std::to_string(v.size()) + " characters but V = " +
                    std::to_string(lm.config.V));
    return v;
}

// Text <-> ids for sample, eval, fill and attention: the tokenizer the flags name (released weights:
// --encoder/--vocab, --tokenizer gpt2-bpe|gpt1-bpe|bert-wordpiece, "" = recognised from the files;
// WordPiece takes --vocab vocab.txt alone), else the one the checkpoint records (the
// character vocabulary train stored, or the subword tokenizer train or finetune stored).
static Tokenizer codec_of(const LoadedModel& lm, const std::string& path, const std::string& encoder, const std::string& merges,
                          const std::string& kind = "") {
    if (!encoder.empty() && merges.empty()) throw Error("--encoder and --vocab go together (GPT-2's encoder.json and vocab.bpe)");
    Tokenizer t;
    if (merges.empty()) {
        if (!kind.empty()) throw Error("--tokenizer " + kind + " needs its files: --vocab (and --encoder for a BPE)");
        t = tokenizer_of(lm.file.metadata, path);
        if (t.kind.empty() || t.kind == "char") {  // characters (or none: vocab_of says what to give)
            t.kind = "char", t.chars = vocab_of(lm, path);
            return t;
        }
    } else {
        t = load_tokenizer(kind, encoder, merges);
    }
    const int V0 = lm.config.V - (lm.config.W_y_rows > 0 && is_causal(lm.config.variant) ? 3 : 0);  // a fine-tuned GPT's 3 new rows
    if (t.size() != V0)
        throw Error("the tokenizer has " + std::to_string(t.size()) + " tokens but the model's V = " + std::to_string(V0));
    if (is_bidirectional_tokenizer(t.kind) == is_causal(lm.config.variant))
        throw Error("the tokenizer is " + t.kind + " but '" + path + "' is a " + variant_name(lm.config.variant) +
                    " model (gpt1-bpe and gpt2-bpe go with gpt models, bert-wordpiece with bert, roberta-bpe with roberta)");
    return t;
}

// sample --top-probs: the k most likely next tokens after x, one line each.
static int print_top_probs(const LoadedModel& lm, const Tokenizer& codec, const std::vector<int>& x, int k) {
    const Config& c = lm.config;
    const std::vector<TokenProb> top = next_token_probs(c, lm.params, x, k);
    const int context = std::min((int)x.size(), c.n_ctx);
    std::printf("the next token after %d token%s%s: the %zu most likely of V = %d, P = Softmax(z) of the last position\n", context,
                context == 1 ? "" : "s", (int)x.size() > c.n_ctx ? " (the last n_ctx of the prompt)" : "", top.size(), c.V);
    std::printf("rank  probability     id  token\n");
    for (std::size_t r = 0; r < top.size(); r++)  // token_label: a space as "␣", a newline as "⏎", other bytes \xNN
        std::printf("%4zu  %.9f  %5d  %s\n", r + 1, top[r].p, top[r].id, token_label(codec.decode({top[r].id})).c_str());
    return 0;
}

static int cmd_sample(Flags& f) {
    const std::string path = f.need("checkpoint"), prompt = f.need("prompt");
    const std::string encoder = f.str("encoder"), merges = f.str("vocab"), kind = f.str("tokenizer");
    const long long tokens = f.count("tokens", 200);
    const uint64_t seed = f.seed("seed", 1);
    const int top_k = f.int32("top-k", 0);
    const double temperature = f.number("temperature", 1.0), top_p = f.number("top-p", 1.0);
    const long long samples = f.count("num-samples", 1);
    const std::string stop = f.str("stop");
    const int top_probs = f.count32("top-probs", 0);
    f.done();
    if (f.has("top-probs"))  // the distribution itself: nothing is drawn or generated
        for (const char* k : {"tokens", "temperature", "top-k", "top-p", "num-samples", "stop", "seed"})
            if (f.has(k)) throw Error(std::string("--") + k + " does not apply with --top-probs (it prints the next token's distribution, draws nothing)");
    if (tokens > 1000000) throw Error("--tokens must be between 1 and 1000000, got " + std::to_string(tokens));
    if (samples > 10000) throw Error("--num-samples must be between 1 and 10000, got " + std::to_string(samples));
    if (temperature < 0) throw Error("--temperature must be >= 0 (0 = greedy), got " + f.str("temperature"));
    if (top_k < 0) throw Error("--top-k must be 0 (all tokens) or more, got " + std::to_string(top_k));
    if (!(top_p > 0 && top_p <= 1)) throw Error("--top-p must be in (0, 1] (1 = all tokens), got " + f.str("top-p"));
    if (f.has("stop") && stop.empty()) throw Error("--stop is empty");
    if (temperature == 0)  // greedy: nothing is drawn
        for (const char* k : {"top-k", "top-p", "seed"})
            if (f.has(k)) throw Error(std::string("--") + k + " does not apply with --temperature 0 (greedy decoding draws nothing)");
    LoadedModel lm = load_model(path, {"adam."});
    if (!is_causal(lm.config.variant)) throw Error("sample needs a gpt, gpt2 or gpt3 model; use fill for bert/roberta");
    const Tokenizer codec = codec_of(lm, path, encoder, merges, kind);
    // An empty prompt starts from the model's own start: GPT-2's <|endoftext|>, else a newline (as
    // nanoGPT's start="\n"), else id 0; that token is not printed.
    std::vector<int> x = codec.encode(prompt, "--prompt");
    const bool unconditional = prompt.empty();
    if (unconditional) {
        const std::vector<int> eot = codec.kind == "gpt2-bpe" ? codec.encode("<|endoftext|>", "--prompt") : std::vector<int>();
        const std::vector<int> newline = codec.encode("\n", "--prompt");
        x = eot.size() == 1 ? eot : newline.size() == 1 ? newline : std::vector<int>{0};
    }
    if (x.empty()) throw Error("--prompt has no tokens");
    if (top_probs > 0) return print_top_probs(lm, codec, x, top_probs);
    const std::size_t start = unconditional ? x.size() : 0;  // what is printed: the prompt and what follows
    // --stop: generation ends once the new text holds it (it is printed, the rest is not generated).
    auto stops = [&](const std::vector<int>& y) {
        return !stop.empty() && codec.decode(std::vector<int>(y.begin() + x.size(), y.end())).find(stop) != std::string::npos;
    };
    Rng rng(seed);
    for (long long s = 0; s < samples; s++) {
        const std::vector<int> y = generate(lm.config, lm.params, x, (int)tokens, temperature, top_k, rng, top_p,
                                            stop.empty() ? std::function<bool(const std::vector<int>&)>() : stops);
        std::string out = codec.decode(std::vector<int>(y.begin() + start, y.end()));
        if (!stop.empty()) {  // cut after the stop text (a token may run past it)
            const std::string prompt_text = codec.decode(std::vector<int>(x.begin() + start, x.end()));
            const std::size_t at = out.find(stop, prompt_text.size());
            if (at != std::string::npos) out.resize(at + stop.size());
        }
        if (s > 0) std::printf("---------------\n");  // between samples, as nanoGPT's sample.py
        std::fwrite(out.data(), 1, out.size(), stdout);
        std::printf("\n");
    }
    return 0;
}

// fill with BERT's WordPiece or RoBERTa's BPE: [CLS] text [SEP] (RoBERTa: <s> text </s>),
// as Hugging Face's tokenizers add them, then the top candidates at each mask token ([MASK], <mask>)
// with their probabilities Softmax(z_j), and the text with the best candidate at each.
static int fill_subword(const LoadedModel& lm, const std::string& path, const Tokenizer& codec, const std::string& text, int top) {
    const Config& c = lm.config;
    std::vector<int> x = codec.encode(text, "--text"), masked;
    x.insert(x.begin(), c.cls_id), x.push_back(c.sep_id);
    for (int j = 0; j < (int)x.size(); j++)
        if (x[j] == c.mask_id) masked.push_back(j);
    const std::string MASK = codec.decode({c.mask_id});  // [MASK] or <mask>
    if (masked.empty()) throw Error("--text has no " + MASK);
    if ((int)x.size() > c.n_ctx)
        throw Error("--text is " + std::to_string(x.size()) + " tokens with " + codec.decode({c.cls_id}) + " and " +
                    codec.decode({c.sep_id}) + ", longer than n_ctx = " + std::to_string(c.n_ctx));
    // A released encoder saved without its head (BertModel, RobertaModel; our own checkpoints record
    // "variant", and one trained from such a file has trained its de-embedding since).
    if (c.emb_ln && !c.mlm_head && !lm.file.metadata.count("variant"))
        std::fprintf(stderr, "note: '%s' has no masked-LM head (cls.predictions / lm_head): the logits are the formulas' (§17) "
                             "X^(L) W_e^T, which the released model was not trained to produce\n", path.c_str());
    Batch b;
    b.n = (int)x.size(), b.tokens = x;
    const Tensor<float> Z = model_forward(c, lm.params, b);
    for (float z : Z.data)
        if (!std::isfinite(z)) throw Error("the logits of '" + path + "' are not finite: the model's numbers overflow");
    std::vector<int> filled = x;
    for (int j : masked) {
        std::vector<float> y(c.V);
        softmax_row(Z.row(j), y.data(), c.V);
        std::vector<int> order(c.V);
        for (int v = 0; v < c.V; v++) order[v] = v;
        const int k = std::min(top, c.V);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int bb) { return y[a] > y[bb] || (y[a] == y[bb] && a < bb); });
        std::printf("%s at token %d:", MASK.c_str(), j + 1);  // positions count from 1; token 1 is [CLS] / <s>
        for (int r = 0; r < k; r++)  // token_label: a leading space as "␣", a piece of a UTF-8 character as \xNN
            std::printf("%s %s %.3g", r ? "," : "", token_label(codec.decode({order[r]})).c_str(), y[order[r]]);  // 3 significant digits: small probabilities stay visible
        std::printf("\n");
        filled[j] = order[0];
    }
    std::printf("%s\n", codec.decode(std::vector<int>(filled.begin() + 1, filled.end() - 1)).c_str());
    return 0;
}

static int cmd_fill(Flags& f) {
    const std::string path = f.need("checkpoint"), text = f.need("text");
    const std::string encoder = f.str("encoder"), merges = f.str("vocab"), kind = f.str("tokenizer");
    const int top = f.count32("top", 5);
    f.done();
        LoadedModel lm = load_model(path, {"adam."});
    const Config& c = lm.config;
    if (is_causal(c.variant)) throw Error("fill needs a bert or roberta model; use sample for gpt variants");
    const std::map<std::string, std::string>& md = lm.file.metadata;
    const bool recorded_subword = md.count("tokenizer") && md.at("tokenizer") != "char";  // train --vocab, finetune
    if (!merges.empty() || !encoder.empty() || !kind.empty() || recorded_subword)
        return fill_subword(lm, path, codec_of(lm, path, encoder, merges, kind), text, top);
    if (f.has("top")) throw Error("--top goes with a tokenizer (--vocab vocab.txt)");
    const CharVocab vocab = vocab_of(lm, path);
    std::vector<int> x, masked;
    const std::string MASK = "[MASK]";
    for (std::size_t i = 0; i < text.size();) {
        if (text.compare(i, MASK.size(), MASK) == 0) {
            masked.push_back((int)x.size()), x.push_back(c.mask_id), i += MASK.size();
        } else {
            const int id = vocab.id[(unsigned char)text[i]];
            if (id < 0) throw Error(describe_char_at(text, i, "--text") + " is not in the model's vocabulary");
            x.push_back(id), i++;
        }
    }
    if (masked.empty()) throw Error("--text has no [MASK]");
    if ((int)x.size() > c.n_ctx)
        throw Error("--text is " + std::to_string(x.size()) + " tokens, longer than n_ctx = " + std::to_string(c.n_ctx));
    Batch b;
    b.n = (int)x.size(), b.tokens = x;
    const Tensor<float> Z = model_forward(c, lm.params, b);
    for (int j : masked) {  // the most likely ordinary character at each [MASK]
        int best = 0;
        for (int v = 1; v < vocab.size(); v++)
            if (Z(j, v) > Z(j, best)) best = v;
        x[j] = best;
    }
    std::printf("%s\n", vocab.decode(x).c_str());
    return 0;
}

static int cmd_eval(Flags& f) {
    const std::string path = f.need("checkpoint"), data = f.need("data");
    const std::string encoder = f.str("encoder"), merges = f.str("vocab"), kind = f.str("tokenizer");
    f.done();
    LoadedModel lm = load_model(path, {"adam."});
    const Config& c = lm.config;
    const Tokenizer codec = codec_of(lm, path, encoder, merges, kind);
    const std::string bytes = read_file(data);
    std::vector<int> ids;
    if (is_token_file(bytes)) {  // llm.c's .bin: ids already, in the model's tokenizer
        ids = parse_token_file(bytes, "'" + data + "'", codec.size());
    } else {
        ids = encode_with_progress(codec, bytes, "'" + data + "'", false);
    }
    if ((int)ids.size() < 2) throw Error("'" + data + "' is too short to evaluate");
    long long count = 0;
    if (c.xlnet) {  // trained with --objective xlnet: its own loss, over several permutations
        const auto it = lm.file.metadata.find("train.predict");
        const int predict = it == lm.file.metadata.end() ? std::max(1, c.n_ctx / 6) : std::max(1, std::atoi(it->second.c_str()));
        const double loss = xlnet_corpus_loss(c, lm.params, ids, predict, 4, 1234, &count);
        if (!std::isfinite(loss)) throw Error("the loss on '" + data + "' is not finite: the model's numbers overflow");
        std::printf("%s: mean XLNet permutation loss %.4f nats per predicted token over %lld predictions (windows of %d, "
                    "4 random permutations each, the last %d positions in each permutation predicted)\n",
                    data.c_str(), loss, count, c.n_ctx, predict);
        const double ltr = xlnet_left_to_right_loss(c, lm.params, ids, &count);
        if (!std::isfinite(ltr)) throw Error("the left-to-right loss on '" + data + "' is not finite: the model's numbers overflow");
        std::printf("%s: read left to right (z = identity, every position after the first predicted, as a GPT's eval): "
                    "mean loss %.4f nats per token over %lld predicted tokens\n", data.c_str(), ltr, count);
        return 0;
    }
    // Released BERT (WordPiece) and RoBERTa (BPE) were pre-trained on [CLS] A [SEP] B [SEP] (<s> ... </s>):
    // read them so, as fill does.
    const bool cls_sep = is_bidirectional_tokenizer(codec.kind);
    // Progress on standard error at every tenth of the windows (from 10 windows on), as train's.
    const auto t0 = std::chrono::steady_clock::now();
    auto progress = [&](long long done, long long total, double mean) {
        if (total < 10 || done == total || done * 10 / total == (done - 1) * 10 / total) return;
        std::fprintf(stderr, "eval: %lld of %lld windows (%lld%%), mean loss so far %.4f, %.1f s\n", done, total, done * 100 / total, mean,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    const double loss = corpus_loss(c, lm.params, ids, 1234, &count, 0, cls_sep, progress);
    if (!std::isfinite(loss)) throw Error("the loss on '" + data + "' is not finite (" + std::to_string(loss) + "): the model's numbers overflow");
    std::printf("%s: mean loss %.4f nats per token over %lld predicted tokens%s\n", data.c_str(), loss, count,
                cls_sep ? (" (windows of " + std::to_string(c.n_ctx - 2) + " tokens, each as " + codec.decode({c.cls_id}) +
                           " window " + codec.decode({c.sep_id}) + ")").c_str() : "");
    if (is_causal(c.variant)) {  // bits per byte compare models whose tokenizers differ
        const double text_bytes = is_token_file(bytes) ? (double)codec.decode(ids).size() : (double)bytes.size();
        std::printf("bits per byte of text: %.4f (%.4f nats per token x %zu tokens / %.0f bytes / ln 2)\n",
                    loss * (double)ids.size() / text_bytes / math::log(2.0), loss, ids.size(), text_bytes);
    }
    return 0;
}

// ---- masks, attention, explain (teaching) ----------------------------------------------------------
// The pictures are SVG: an --out named .png (or anything but .svg) would hold text a viewer refuses.
static void check_svg_out(const std::string& out) {
    const std::size_t dot = out.rfind('.');
    const std::size_t slash = last_separator(out);
    std::string ext = dot == std::string::npos || (slash != std::string::npos && slash > dot) ? "" : out.substr(dot);
    for (char& ch : ext) ch = (char)std::tolower((unsigned char)ch);
    if (ext != ".svg") throw Error("--out '" + out + "': the picture is SVG, so its name must end in .svg");
}

// --perm lists positions 1..n as the formulas count them; the code's permutation counts from 0.
static std::vector<int> parse_perm(const std::string& s, int n) {
    std::vector<int> z = parse_ids(s, "--perm");
    if ((int)z.size() != n)
        throw Error("--perm has " + std::to_string(z.size()) + " positions but n = " + std::to_string(n));
    std::set<int> seen;
    for (int& v : z) {
        if (v < 1 || v > n)
            throw Error("--perm: position " + std::to_string(v) + " is outside 1.." + std::to_string(n) + " (positions count from 1, as in the formulas)");
        if (!seen.insert(v).second) throw Error("--perm is not a permutation: " + std::to_string(v) + " appears twice");
        v--;
    }
    return z;
}

static int cmd_masks(Flags& f) {
    const std::string out = f.need("out"), perm = f.str("perm");
    if (!f.has("n")) throw Error("missing flag --n");
    const int n = f.int32("n", 0), window = f.int32("window", 3), stride = f.int32("stride", 4);
    f.done();
    if (n < 1 || n > 64) throw Error("--n must be between 1 and 64, got " + std::to_string(n));
    if (window < 1) throw Error("--window must be positive, got " + std::to_string(window));
    if (stride < 0) throw Error("--stride must be 0 or more, got " + std::to_string(stride));
    std::vector<int> z;
    if (perm.empty()) {  // a fixed example: the even positions, then the odd ones, each backwards
        for (int i = n - (n % 2 == 0 ? 1 : 2); i >= 1; i -= 2) z.push_back(i);
        for (int i = n - (n % 2 == 0 ? 2 : 1); i >= 0; i -= 2) z.push_back(i);
    } else {
        z = parse_perm(perm, n);
    }
    check_outputs({{out, "--out", OutputKind::svg_plot}});
    check_svg_out(out);
    write_file_atomic(out, masks_svg(n, window, stride, z));
    std::printf("wrote %s: Mask^BD, Mask^AR, Mask^ST (window %d, stride %d) and Mask^XL(z), z =", out.c_str(), window, stride);
    for (std::size_t t = 0; t < z.size(); t++) std::printf("%s%d", t ? "," : " ", z[t] + 1);
    std::printf(", for n = %d\n", n);
    return 0;
}

static int cmd_attention(Flags& f) {
    const std::string path = f.need("checkpoint"), out = f.need("out");
    const std::string text = f.str("text"), tokens = f.str("tokens"), perm = f.str("perm");
    const std::string encoder = f.str("encoder"), merges = f.str("vocab");
    const int layer = f.int32("layer", 0), head = f.int32("head", 0);
    f.done();
    if (f.has("text") == f.has("tokens")) throw Error("attention: give exactly one of --text and --tokens");
    check_outputs({{out, "--out", OutputKind::svg_plot}}, {{path, "--checkpoint"}});
    check_svg_out(out);
    LoadedModel lm = load_model(path, {"adam."});
    const Config& c = lm.config;
    if (f.has("layer") && (layer < 1 || layer > c.L))
        throw Error("--layer " + std::to_string(layer) + " is outside 1..L = " + std::to_string(c.L) + " (layers count from 1, as in the formulas)");
    if (f.has("head") && (head < 1 || head > c.A))
        throw Error("--head " + std::to_string(head) + " is outside 1..A = " + std::to_string(c.A) + " (heads count from 1, as in the formulas)");
    std::vector<int> x;
    std::vector<std::string> labels;
    if (f.has("text")) {
        const Tokenizer codec = codec_of(lm, path, encoder, merges);
        x = codec.encode(text, "--text");
        for (int id : x) labels.push_back(token_label(codec.decode({id})));
    } else {
        if (!encoder.empty() || !merges.empty()) throw Error("--encoder and --vocab go with --text");
        x = parse_ids(tokens, "--tokens");
        for (int id : x) labels.push_back(std::to_string(id));
    }
    if (x.empty()) throw Error("--text is empty");
    const std::vector<HeatPanel> panels =
        attention_panels(c, lm.params, x, labels, layer, head, perm.empty() ? std::vector<int>() : parse_perm(perm, (int)x.size()));
    const std::string name = path.substr(last_separator(path) == std::string::npos ? 0 : last_separator(path) + 1);
    const std::string what = std::string(variant_name(c.variant)) + (c.xlnet ? " trained as XLNet" : "") + ", L=" +
                             std::to_string(c.L) + " A=" + std::to_string(c.A) + " D=" + std::to_string(c.D);
    std::vector<std::string> caption = {
        "Each panel: P = Softmax(Mask (.) Q K^T / sqrt(D)) of one head, read from the forward pass's cache (AttentionCache::P).",
        "Layers l and heads i count from 1, as in the formulas; row i is the query token, column j the key token."};
    if (c.xlnet) caption.push_back("XLNet: two panels per head, the content stream h and the query stream g (whose columns, all -inf, are left out).");
    write_file_atomic(out, heatmap_svg(panels, head ? 1 : c.A, "Attention of " + name + " (" + what + ")", caption, true));
    std::printf("wrote %s: %zu panel%s (%s), %zu token%s\n", out.c_str(), panels.size(), panels.size() == 1 ? "" : "s", what.c_str(),
                x.size(), x.size() == 1 ? "" : "s");
    return 0;
}

static int cmd_explain(Flags& f) {
    const std::string path = f.str("checkpoint"), name = f.str("preset"), text = f.str("text");
    if (f.has("tokens") == f.has("text")) throw Error("explain: give exactly one of --tokens and --text");
    if (f.has("text") && !f.has("checkpoint")) throw Error("explain: --text needs --checkpoint (a preset has no tokenizer; give --tokens)");
    std::vector<int> tokens = f.has("tokens") ? parse_ids(f.str("tokens"), "--tokens") : std::vector<int>{};
    const std::string seg = f.str("segments"), masked = f.str("masked");
    const uint64_t seed = f.seed("seed", 1);
    const int values = f.int32("values", 4);
    const std::string html = f.str("html");
    f.done();
    if (f.has("checkpoint") == f.has("preset")) throw Error("explain: give exactly one of --preset and --checkpoint");
    if (f.has("html")) check_outputs({{html, "--html", OutputKind::html_page}}, f.has("checkpoint") ? std::vector<InputFile>{{path, "--checkpoint"}} : std::vector<InputFile>{});
    if (f.has("seed") && !f.has("preset")) throw Error("--seed applies to --preset only (it initialises the model)");
    if (values < 0 || values > 64) throw Error("--values must be between 0 and 64, got " + std::to_string(values));
    LoadedModel lm;
    if (f.has("checkpoint")) {
        lm = load_model(path, {"adam."});
    } else {
        lm.config = preset(name);
        lm.params = make_params<float>(lm.config);
        init_params(lm.config, lm.params, seed);
    }
    // The tokens' text for the page's labels, where the checkpoint records a tokenizer (else their ids).
    std::vector<std::string> labels;
    if (f.has("checkpoint")) {
        Tokenizer codec;
        bool have = true;
        try {
            codec = codec_of(lm, path, "", "");
        } catch (const Error&) {
            if (f.has("text")) throw;
            have = false;
        }
        if (f.has("text")) tokens = codec.encode(text, "--text");
        for (int id : tokens) {
            std::string label = std::to_string(id);
            if (have) try {
                    label = token_label(codec.decode({id}));
                } catch (const Error&) {
                }  // a special token outside the tokenizer's ids: its id
            labels.push_back(label);
        }
    }
    const Batch b = loss_batch(lm.config, tokens, seg, masked);
    try {
        const Explained<float> e = explain(lm.config, lm.params, b, values);
        std::fputs(explain_text(lm.config, e.steps).c_str(), stdout);
        std::printf("\nloss %.9g (model_loss on the same input gives the same number; `%s grad` writes every gradient)\n", e.loss,
                    program_name().c_str());
    } catch (const NotImplemented& e) {
        // A handout's stub ends the text; the page is still written, and says where the run stopped.
        if (!f.has("html")) throw;
        std::printf("explain: %s: the text stops here; the page shows the boxes the run reached and checks every backward box alone\n", e.what());
    }
    if (f.has("html")) {
        ExplainHtml o;
        o.title = f.has("checkpoint") ? "checkpoint " + path : "preset " + name + " (seed " + std::to_string(seed) + ")";
        o.values = values;
        o.labels = labels;
        // The § links: formulas.md beside the page (docs/), else the repository's, by its full path.
        const std::string full = real_path("docs/formulas.md");
        if (path_kind(path_in_dir(dir_of(html), "formulas.md")) != PathKind::missing) o.formulas = "formulas.md";
        else if (!full.empty()) o.formulas = (full[0] == '/' ? "file://" : "file:///") + full;  // file:///C:/... on Windows
        const ExplainPage page = explain_html(lm.config, lm.params, b, o);
        write_file_atomic(html, page.html);
        auto boxes = [](int k, const char* what) { return std::to_string(k) + " " + what + (k == 1 ? "box" : "boxes"); };
        std::printf("wrote %s: %s, %s checked against finite differences, %d failing, %zu bytes\n", html.c_str(), boxes(page.boxes, "").c_str(),
                    boxes(page.checked, "backward ").c_str(), page.failing, page.html.size());
        if (!page.stopped.empty())
            std::printf("the run stops at %s: %s; backward boxes not implemented yet: %d\n",
                        page.stopped_at.c_str(), page.stopped.c_str(), page.missing);
        for (const std::string& box : page.failing_boxes) std::printf("failing: %s\n", box.c_str());
        // 1: a box fails its gradient check (a student's script can tell); stubs alone are no failure.
        if (page.failing) return 1;
    }
    return 0;
}

// ---- bench -------------------------------------------------------------------------------------------
using Clock = std::chrono::steady_clock;
static double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// GFLOP/s of gemm alone: C (M x N) = A (M x K) B (K x N); B given transposed (N x K) if bt.
static double gemm_gflops(int M, int N, int K, bool bt) {
    std::vector<float> A((std::size_t)M * K), B((std::size_t)K * N), C((std::size_t)M * N);
    Rng r(7);
    for (auto& v : A) v = (float)r.normal();
    for (auto& v : B) v = (float)r.normal();
    double best = 1e30;
    for (int rep = 0; rep < 4; rep++) {
        const auto t = Clock::now();
        if (bt) gemm(M, N, K, A.data(), K, 1, B.data(), 1, K, C.data(), N, false);
        else gemm(M, N, K, A.data(), K, 1, B.data(), N, 1, C.data(), N, false);
        best = std::min(best, ms_since(t));
    }
    return 2.0 * M * N * K / (best * 1e6);
}

// The bench's model: the preset with train's model flags on top (--embd alone also sets F = 4H).
static Config bench_config(Flags& f, std::string& name) {
    name = f.str("preset", "gpt2-124m");
    Config c = preset(name);
    const bool sized = f.has("model") || f.has("layers") || f.has("heads") || f.has("embd") || f.has("ffn") ||
                       f.has("vocab") || f.has("activation");
    if (f.has("model")) c.variant = variant_from_name(f.str("model"));
    c.L = f.int32("layers", c.L), c.A = f.int32("heads", c.A), c.H = f.int32("embd", c.H);
    c.F = f.int32("ffn", f.has("embd") ? 4 * c.H : c.F), c.V = f.int32("vocab", c.V);
    if (f.has("activation")) c.activation = activation_from_name(f.str("activation"));
    for (const auto& kv : {std::make_pair("layers", c.L), std::make_pair("heads", c.A), std::make_pair("embd", c.H), std::make_pair("ffn", c.F),
                           std::make_pair("vocab", c.V)})
        if (kv.second < 1) throw Error(std::string("--") + kv.first + " must be positive, got " + std::to_string(kv.second));
    if (c.H % c.A != 0) throw Error("--embd " + std::to_string(c.H) + " is not a multiple of --heads " + std::to_string(c.A));
    c.D = c.H / c.A;
    if ((c.variant == Variant::bert || c.variant == Variant::roberta) && f.has("vocab"))  // their special ids, at the end
        c.cls_id = c.V - 3, c.sep_id = c.V - 2, c.mask_id = c.V - 1;
    if (c.variant == Variant::gpt3 && c.st_window < 1) c.st_window = c.st_stride = 8;
    if (sized) {  // labelled by what runs: "custom (gpt2-124m with --layers 2): L=2 ..."
        std::string changed;
        for (const char* k : {"model", "layers", "heads", "embd", "ffn", "vocab", "activation"})
            if (f.has(k)) changed += std::string(changed.empty() ? "" : " ") + "--" + k + " " + f.str(k);
        name = "custom (" + name + " with " + changed + "): L=" + std::to_string(c.L) + " A=" + std::to_string(c.A) + " H=" +
               std::to_string(c.H) + " F=" + std::to_string(c.F) + " V=" + std::to_string(c.V) + " " + variant_name(c.variant);
    }
    validate(c);
    return c;
}

static int cmd_bench(Flags& f) {
    std::string name;
    const Config c = bench_config(f, name);
    const int B = f.int32("batch", 4), n = f.int32("block", std::min(64, c.n_ctx)), steps = f.int32("steps", 3);
    const bool json = f.flag("json"), memory_check = !f.flag("no-memory-check");
    f.done();
    for (const auto& kv : {std::make_pair("batch", B), std::make_pair("block", n), std::make_pair("steps", steps)})
        if (kv.second < 1) throw Error(std::string("--") + kv.first + " must be positive, got " + std::to_string(kv.second));
    if (n > c.n_ctx) throw Error("--block " + std::to_string(n) + " is longer than n_ctx = " + std::to_string(c.n_ctx));
    if ((long long)B * n > (1 << 20)) throw Error("--batch x --block is too large for a benchmark");
    const TrainMemory mem = train_memory(c, B, n);  // and a checkpoint of the model, written and read back
    require_memory("bench", mem.params * 3 + mem.grads + mem.adam + mem.activations,
                   "the model twice more for its checkpoint, its gradient, AdamW's m and v, and the activations of a step at B=" +
                       std::to_string(B) + ", n=" + std::to_string(n),
                   "--batch, --block or the model (--preset, --layers, --embd, --ffn, --vocab)", memory_limit(), memory_check);
    Params<float> p = make_params<float>(c), g = make_params<float>(c);
    init_params(c, p, 1);
    const ModelSpeed ms = model_speed(c, p);
    AdamW adam;
    adamw_init(c, adam);
    Rng rng(3);
    Batch b;
    b.B = B, b.n = n;
    for (int k = 0; k < B * n; k++) b.tokens.push_back(rng.below(c.V));
    b.targets = next_token_targets(b.tokens, B, n);
    if (!is_causal(c.variant)) {
        MLMExample e = mlm_corrupt(b.tokens, B, n, c, rng);
        b.tokens = e.tokens, b.targets = e.targets;
    }
    double fwd = 0, bwd = 0, upd = 0, loss = 0;
    for (int s = 0; s <= steps; s++) {  // step 0 is the warm-up
        auto t = Clock::now();
        ForwardCache<float> cache;
        Tensor<float> Z = model_forward(c, p, b, &cache), dZ;
        loss = CrossEntropy_logits(Z, b.targets, &dZ);
        const double t_f = ms_since(t);
        t = Clock::now();
        zero_params(c, g);
        model_backward(c, p, cache, dZ, g);
        const double t_b = ms_since(t);
        t = Clock::now();
        adamw_step(c, p, g, adam, 1e-4);
        const double t_u = ms_since(t);
        if (s > 0) fwd += t_f / steps, bwd += t_b / steps, upd += t_u / steps;
    }
    // FLOPs of the matrix products: per layer Q, K, V (3 H A D), W_O (A D H), FFN (2 H F) per row,
    // attention 2 n^2 D per head and sequence (S = QK^T and PV), de-embedding H V per row.
    const double rows = (double)B * n;
    const double fwd_flops = 2.0 * rows * (c.L * (4.0 * c.H * c.A * c.D + 2.0 * c.H * c.F) + (double)c.H * c.V) +
                             (double)c.L * B * c.A * 4.0 * n * n * c.D;
    const double step = fwd + bwd + upd, gflops = 3.0 * fwd_flops / ((fwd + bwd) * 1e6);
    const int M = B * n;
    const double mm[4] = {gemm_gflops(M, 3 * c.H, c.H, false), gemm_gflops(M, c.F, c.H, false),
                          gemm_gflops(M, c.H, c.F, false), gemm_gflops(M, c.V, c.H, true)};
    double mm_min = mm[0];
    for (double v : mm) mm_min = std::min(mm_min, v);
    const double weight_bytes = 4.0 * (double)count_params(c).actual;
    const double peak = fma_peak_gflops(), gbps = ms.mem_read_gbps > 0 ? ms.mem_read_gbps : mem_read_gbps(weight_bytes);
    if (json) {
        std::printf("{\"preset\": %s, \"batch\": %d, \"block\": %d, \"steps\": %d, \"loss\": %.6f, \"step_ms\": %.2f, "
                    "\"forward_ms\": %.2f, \"backward_ms\": %.2f, \"update_ms\": %.2f, \"tokens_per_s\": %.1f, "
                    "\"gflops\": %.2f, \"matmul_gflops\": %.2f, \"peak_gflops\": %.2f, \"matmul_gflops_shapes\": {\"%dx%dx%d\": %.2f, "
                    "\"%dx%dx%d\": %.2f, \"%dx%dx%d\": %.2f, \"%dx%dx%d\": %.2f}, \"load_ms\": %.2f, \"fread_ms\": %.2f, "
                    "\"token_ms\": %.3f, \"token_context\": [%d, %d], \"mem_read_gbps\": %.2f, \"weight_bytes\": %.0f}\n",
                    json_escape(name).c_str(), B, n, steps, loss, step, fwd, bwd, upd, rows / (step / 1000.0), gflops, mm_min, peak, M, c.H,
                    3 * c.H, mm[0], M, c.H, c.F, mm[1], M, c.F, c.H, mm[2], M, c.H, c.V, mm[3], ms.load_ms, ms.fread_ms,
                    ms.token_ms, ms.context_from, ms.context_to, gbps, weight_bytes);
        return 0;
    }
    std::printf("bench %s, B=%d n=%d, %d steps after 1 warm-up (loss %.4f)\n", name.c_str(), B, n, steps, loss);
    std::printf("  forward   %9.1f ms\n  backward  %9.1f ms\n  update    %9.1f ms\n  step      %9.1f ms\n", fwd, bwd, upd, step);
    std::printf("  %.0f tokens/s, %.1f GFLOP/s in the matrix products of forward + backward\n", rows / (step / 1000.0), gflops);
    std::printf("matrix-product kernel alone (GFLOP/s):\n");
    std::printf("  %4dx%-5d by %5dx%-5d (QKV)        %6.1f\n", M, c.H, c.H, 3 * c.H, mm[0]);
    std::printf("  %4dx%-5d by %5dx%-5d (FFN W_1)    %6.1f\n", M, c.H, c.H, c.F, mm[1]);
    std::printf("  %4dx%-5d by %5dx%-5d (FFN W_2)    %6.1f\n", M, c.F, c.F, c.H, mm[2]);
    std::printf("  %4dx%-5d by %5dx%-5d (W_e^T)      %6.1f\n", M, c.H, c.H, c.V, mm[3]);
    std::printf("register-only FMA peak of one core at this build's vector width: %.1f GFLOP/s (slowest shape %.0f%%)\n",
                peak, 100.0 * mm_min / peak);
    std::printf("checkpoint of %.1f MB: load %.1f ms, one fread of the file into fresh memory %.1f ms (%.2fx)\n",
                ms.file_bytes / 1e6, ms.load_ms, ms.fread_ms, ms.load_ms / ms.fread_ms);
    if (ms.token_ms >= 0)
        std::printf("generation: %.2f ms per token (context %d..%d); one read of the %.1f MB of weights at %.1f GB/s: %.2f ms (%.2fx)\n",
                    ms.token_ms, ms.context_from, ms.context_to, weight_bytes / 1e6, gbps, weight_bytes / (gbps * 1e6),
                    ms.token_ms / (weight_bytes / (gbps * 1e6)));
    else
        std::printf("generation: not timed (a %s model does not generate); streaming read %.1f GB/s\n", variant_name(c.variant), gbps);
    return 0;
}

// ---- export --------------------------------------------------------------------------------------------
static int cmd_export(Flags& f) {
    const std::string path = f.need("checkpoint"), out = f.need("out");
    f.done();
    check_output_dir(out, "--out", HF_EXPORT_FILES, "config.json");  // before the model is read
    LoadedModel lm = load_model(path, {"adam."});
    const std::string problem = hf_export_problem(lm.config);
    if (!problem.empty()) throw Error("export '" + path + "': " + problem);
    std::map<std::string, std::string> meta;  // the tokenizer travels along (characters too), so import + sample need no flags
    for (auto& kv : lm.file.metadata)
        if (kv.first == "vocab" || kv.first == "tokenizer" || kv.first.rfind("tokenizer.", 0) == 0) meta[kv.first] = kv.second;
    const HfExport done = export_hf(out, lm.config, lm.params, meta, path);
    const Config& c = lm.config;
    std::string files;
    for (const std::string& name : done.files) files += (files.empty() ? "" : ", ") + path_in_dir(out, name);
    std::printf("wrote %s: %s (model_type %s), ", files.c_str(), done.architecture.c_str(), done.model_type.c_str());
    if (c.variant == Variant::gpt2) {  // n_inner as config.json writes it: null when F = 4 H (Hugging Face's default)
        const std::string n_inner = c.F == 4 * c.H ? "null (4 n_embd = " + std::to_string(c.F) + ")" : std::to_string(c.F);
        std::printf("n_layer %d, n_head %d, n_embd %d, n_inner %s, vocab_size %d, n_positions %d", c.L, c.A, c.H, n_inner.c_str(), c.V,
                    c.n_ctx);
    } else if (c.variant == Variant::gpt) {
        std::printf("n_layer %d, n_head %d, n_embd %d, vocab_size %d, n_positions %d", c.L, c.A, c.H, c.V, c.n_ctx);
    } else {
        std::printf("num_hidden_layers %d, num_attention_heads %d, hidden_size %d, intermediate_size %d, vocab_size %d, "
                    "max_position_embeddings %d", c.L, c.A, c.H, c.F, c.V,
                    c.n_ctx + (c.variant == Variant::roberta ? c.pad_id + 1 : 0));
    }
    std::printf(", activation %s%s%s\n", activation_name(c.activation), c.attn_bias ? "" : ", attention biases written as zeros",
                done.files.size() > 2 ? "" : "; no tokenizer recorded in the checkpoint, so none written");
    return 0;
}

static int cmd_strip(Flags& f) {
    const std::string in = f.need("checkpoint"), out = f.need("out");
    f.done();
    const std::pair<long long, long long> bytes = strip_checkpoint(in, out);
    std::printf("wrote %s: the weights of %s without AdamW's m and v (%.1f MB of %.1f MB); it cannot be resumed, "
                "--init-from starts a new run from it\n", out.c_str(), in.c_str(), bytes.second / 1e6, bytes.first / 1e6);
    return 0;
}

// ---- bpe: learn a byte-level BPE vocabulary ------------------------------------------------------------
static int cmd_bpe(Flags& f) {
    const std::vector<std::string> data = f.list("data"), specials = f.list("special");
    const std::string out = f.str("out");
    const bool has_merges = f.has("merges"), has_out = f.has("out");
    const long long merges = f.integer("merges", 0), min_count = f.integer("min-count", 1), show = f.integer("show", 0);
    const bool quiet = f.flag("quiet");
    f.done();
    if (data.empty()) throw Error("bpe: missing flag --data (a text file to learn from; give --data again for more files)");
    if (!has_merges) throw Error("bpe: missing flag --merges (how many merges to learn; GPT-1 learnt 40000)");
    if (!has_out) throw Error("bpe: missing flag --out (the directory for encoder.json and vocab.bpe)");
    if (merges < 1) throw Error("--merges must be positive, got " + std::to_string(merges));
    if (min_count < 1) throw Error("--min-count must be at least 1, got " + std::to_string(min_count));
    if (show < 0) throw Error("--show must be 0 or more, got " + std::to_string(show));
    for (std::size_t k = 0; k < specials.size(); k++) {
        const std::string problem = bpe_special_problem(specials[k]);
        if (!problem.empty()) throw Error("--special '" + specials[k] + "': " + problem);
        for (std::size_t j = 0; j < k; j++)
            if (specials[j] == specials[k]) throw Error("--special '" + specials[k] + "' is given twice");
    }
    const bool roberta = std::find(specials.begin(), specials.end(), "<mask>") != specials.end();
    for (const char* sp : {"<s>", "<pad>", "</s>", "<unk>"})  // the loader reads "<mask>" as RoBERTa's kind
        if (roberta && std::find(specials.begin(), specials.end(), sp) == specials.end())
            throw Error("--special '<mask>' makes the files RoBERTa's kind, which needs all five of <s> <pad> </s> <unk> <mask>: "
                        "give --special '" + std::string(sp) + "' too");
    for (const std::string& d : data) {  // every input readable before any work
        std::FILE* in = open_file(d, "rb");
        if (!in) throw Error("--data '" + d + "': cannot open it: " + std::strerror(errno));
        std::fclose(in);
    }
    bpe_check_out_dir(out, data);
    const auto t0 = Clock::now();
    BpePieces pieces;
    for (const std::string& d : data) {
        const auto t = Clock::now();
        const BpePieces before_file{{}, pieces.pieces, pieces.bytes, pieces.lines};
        bpe_count_file(pieces, d, specials, [&](long long bytes) {
            if (!quiet)
                std::fprintf(stderr, "bpe: counting '%s': %.0f MB read, %zu distinct pieces so far, %.1f s\n", d.c_str(), bytes / 1e6,
                             pieces.count.size(), ms_since(t) / 1000);
        });
        if (!quiet)
            std::fprintf(stderr, "bpe: counted '%s': %lld lines, %lld bytes, %lld pieces (%zu distinct pieces in all so far), %.1f s\n",
                         d.c_str(), pieces.lines - before_file.lines, pieces.bytes - before_file.bytes,
                         pieces.pieces - before_file.pieces, pieces.count.size(), ms_since(t) / 1000);
    }
    if (pieces.pieces == 0) {
        std::string names;
        for (const std::string& d : data) names += (names.empty() ? "'" : ", '") + d + "'";
        throw Error("the corpus is empty: --data " + names + " holds no text" + (specials.empty() ? "" : " besides --special tokens"));
    }
    const double count_ms = ms_since(t0);
    auto symbols = [](const std::string& bytes) {  // as vocab.bpe writes them: a space is "Ġ"
        std::string out;
        for (unsigned char ch : bytes) out += bytes_to_unicode(ch);
        return out;
    };
    const auto t1 = Clock::now();
    auto last = Clock::now();
    BpeLearnOptions o;
    o.merges = merges, o.min_count = min_count, o.specials = specials;
    o.progress = [&](const BpeLearnt& b) {
        if (quiet || ms_since(last) < 2000) return;
        last = Clock::now();
        const BpeMerge& m = b.merges.back();
        std::fprintf(stderr, "bpe: merge %zu of %lld: %s %s (count %lld), %.1f s\n", b.merges.size(), merges,
                     symbols(b.tokens[m.left]).c_str(), symbols(b.tokens[m.right]).c_str(), m.count, ms_since(t1) / 1000);
    };
    const BpeLearnt b = bpe_learn(pieces, o);
    const double merge_ms = ms_since(t1);
    if (b.merges.empty())
        throw Error("no pair of symbols occurs " + std::to_string(min_count) + " times or more (--min-count) in " +
                    std::to_string(pieces.pieces) + " pieces: nothing to learn, nothing written");
    for (long long k = 0; k < show && k < (long long)b.merges.size(); k++) {
        const BpeMerge& m = b.merges[k];
        std::printf("merge %6lld: %s %s -> id %d (count %lld)\n", k + 1, symbols(b.tokens[m.left]).c_str(),
                    symbols(b.tokens[m.right]).c_str(), m.id, m.count);
    }
    const auto t2 = Clock::now();
    bpe_write(out, b, data);
    const double write_ms = ms_since(t2);
    const bool reached = (long long)b.merges.size() == merges;
    const long long made = (long long)b.tokens.size() - 256 - b.specials;
    std::printf("learnt %zu merges (%s) from %lld pieces (%zu distinct) in %lld bytes of %zu file%s\n", b.merges.size(),
                reached ? "--merges reached" : ("no pair left with a count of at least " + std::to_string(min_count)).c_str(),
                pieces.pieces, pieces.count.size(), pieces.bytes, data.size(), data.size() == 1 ? "" : "s");
    std::printf("wrote %s (%zu tokens: 256 bytes, %lld merged, %d special) and %s\n", path_in_dir(out, "encoder.json").c_str(),
                b.tokens.size(), made, b.specials, path_in_dir(out, "vocab.bpe").c_str());
    std::printf("time: counting %.2f s, merging %.2f s, writing %.2f s\n", count_ms / 1000, merge_ms / 1000, write_ms / 1000);
    return 0;
}


// ---- The commands: one table ------------------------------------------------------------------------
// Each command's entry gives its name, group, summary, flags (each with its kind and its help,
// whose default comes from the options the command fills) and the function that runs it. The
// dispatch, `--help`, the flag checks and the flags train --resume may change all come from it.
static const std::vector<FlagDoc> MODEL_FLAGS = {
    {"model", "gpt|gpt2|gpt3|bert|roberta  the variant (default: " + train_defaults().model + ")"},
    {"layers", "L  number of layers, >= 1 (default: " + dflt(train_defaults().layers) + ")"},
    {"heads", "A  attention heads per layer, >= 1, dividing --embd (default: " + dflt(train_defaults().heads) + ")"},
    {"embd", "H  embedding width in floats, >= 1 (default: " + dflt(train_defaults().embd) + ")"},
    {"ffn", "F  feed-forward width in floats, >= 1 (default: 4 H)"},
    {"activation", "NAME  the FFN's activation: relu|gelu_sigmoid|gelu_tanh|gelu_erf (default: gelu_sigmoid, formulas §13)"},
};

static std::vector<FlagDoc> join(std::vector<FlagDoc> a, const std::vector<FlagDoc>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// The model flags of bench, which change its --preset: each one's default is the preset's.
static const std::vector<FlagDoc> PRESET_MODEL_FLAGS = {
    {"model", "gpt|gpt2|gpt3|bert|roberta  the variant (default: the preset's)"},
    {"layers", "L  number of layers, >= 1 (default: the preset's)"},
    {"heads", "A  attention heads per layer, >= 1, dividing --embd (default: the preset's)"},
    {"embd", "H  embedding width in floats, >= 1 (default: the preset's)"},
    {"ffn", "F  feed-forward width in floats, >= 1 (default: the preset's, 4 H with --embd)"},
    {"activation", "NAME  the FFN's activation: relu|gelu_sigmoid|gelu_tanh|gelu_erf (default: the preset's)"},
};

static const std::vector<CommandDoc>& command_docs() {
    static const std::vector<CommandDoc> docs = {
        {"train", "train", "train a model (default: a small GPT-2 on the built-in 3-digit addition task)",
         join(MODEL_FLAGS,
              {{"data", "FILE  training text, or llm.c's .bin token file (default: the built-in addition task)", RESUMABLE},
               {"val", "FILE  validation text (default: the last 10% of --data)", RESUMABLE},
               {"block", "n  context length in tokens, >= 1 (default: the task's or the text's, at most 64)"},
               {"batch", "B  sequences per batch, >= 1 (default: " + dflt(train_defaults().batch) + ")"},
               {"accum", "K  gradient accumulation: a step averages K batches, >= 1 (default: " + dflt(train_defaults().accum) + ")"},
               {"steps", "S  optimiser steps, >= 1 (default: " + dflt((double)train_defaults().steps) + "; with --resume: the checkpoint's)", RESUMABLE},
               {"lr", "LR  peak learning rate (default: " + dflt(train_defaults().lr) + ")"},
               {"min-lr", "LR  learning rate at the end of the cosine decay (default: --lr / 10, " + dflt(train_defaults().min_lr) + ")"},
               {"warmup", "S  steps of linear warm-up, >= 0 (default: " + dflt((double)train_defaults().warmup) + ")"},
               {"weight-decay", "W  AdamW's decoupled weight decay (default: " + dflt(train_defaults().weight_decay) + ")"},
               {"beta1", "B1  AdamW's beta1 (default: " + dflt(train_defaults().beta1) + ")"},
               {"beta2", "B2  AdamW's beta2 (default: " + dflt(train_defaults().beta2) + ")"},
               {"grad-clip", "C  clip the gradient's global norm to C, 0 = off (default: " + dflt(train_defaults().grad_clip) + ")"},
               {"dropout", "P  dropout probability (default: " + dflt(train_defaults().dropout) + ")"},
               {"eval-every", "S  validation loss every S steps and at the last, then once over the whole validation split; 0 = never (default: " + dflt((double)train_defaults().eval_every) + ")"},
               {"eval-steps", "S  batches per validation loss, >= 1 (default: " + dflt((double)train_defaults().eval_steps) + ")"},
               {"save-every", "S  checkpoint every S steps, 0 = only at the end (default: " + dflt((double)train_defaults().save_every) + ")"},
               {"log-every", "S  progress line every S steps, >= 1 (default: " + dflt((double)train_defaults().log_every) + ")"},
               {"stop-at", "S  stop (and save) after step S, 0 = run to --steps (default: " + dflt((double)train_defaults().stop_at) + ")", RESUMABLE},
               {"seed", "S  random seed, 0..2^64-1 (default: " + std::to_string(train_defaults().seed) + ")"},
               {"out", "FILE  the checkpoint written (default: model.safetensors; with --resume: the resumed file)", RESUMABLE},
               {"resume", "FILE  continue a run from its checkpoint (only RESUMABLE may be given)", RESUMABLE},
               {"gpt2-init", "scale W_O, W_2 by 1/sqrt(2L) at init (default: off)", SWITCH},
               {"attn-bias", "biases on Q, K, V, O (default: off)", SWITCH},
               {"emb-ln", "bert, roberta: LayerNorm of the embeddings, as the released BERT (formulas §23; default: off)", SWITCH},
               {"mlm-head", "bert, roberta: the released BERT's masked-LM head, with --emb-ln (formulas §23; export: BertForMaskedLM; default: off)", SWITCH},
               {"quiet", "no progress lines (default: off)", SWITCH | RESUMABLE},
               {"no-memory-check", "start even when the memory estimate exceeds what the computer can give (default: off: refused)", SWITCH | RESUMABLE},
               {"objective", "lm|xlnet  next-token / masked LM, or XLNet's permutation LM with two-stream attention (default: lm)"},
               {"predict", "K  xlnet: positions predicted per sequence, >= 1 (default: n/6)"},
               {"line-windows", "every window starts at a newline: pre-training for finetune's line examples (default: off)", SWITCH},
               {"init-from", "FILE  start from FILE's weights: a checkpoint of this program, or Hugging Face's model.safetensors of "
                             "GPT-1 (openai-gpt), GPT-2, BERT or RoBERTa with its config.json beside it (and its tokenizer's files: "
                             "--encoder, --vocab); the shape comes from the file, fresh optimiser"},
               {"encoder", "FILE  GPT-2's encoder.json (GPT-1: vocab.json or encoder_bpe_40000.json; RoBERTa: vocab.json): train on its BPE tokens; the checkpoint records them"},
               {"vocab", "FILE  GPT-2's vocab.bpe (GPT-1: merges.txt or vocab_40000.bpe; RoBERTa: merges.txt; bert: vocab.txt, WordPiece, alone)"}}),
         "train --data tiny.txt --steps 500 --out tiny.safetensors",
         "A run stopped by Ctrl-C (SIGINT) or SIGTERM finishes its step, saves a checkpoint and says how to resume.", cmd_train},
        {"finetune", "train", "fine-tune a pre-trained model on a labelled task (tab-separated files, see docs)",
         {{"checkpoint", "FILE  the pre-trained model (required)"},
          {"task", "classify|entailment|similarity|choice  the task's kind (required)"},
          {"train", "FILE  training examples (required)"},
          {"val", "FILE  validation examples (required)"},
          {"out", "FILE  the fine-tuned checkpoint (required)"},
          {"lambda", "X  weight of the auxiliary LM loss (default: " + dflt(FinetuneOptions().lambda) + ")"},
          {"steps", "S  optimiser steps, 0 = 3 epochs (default: 0)"},
          {"batch", "B  examples per batch, >= 1 (default: " + dflt(finetune_defaults().batch) + ")"},
          {"accum", "K  gradient accumulation, as train's (default: " + dflt(finetune_defaults().accum) + ")"},
          {"lr", "LR  peak learning rate, linear decay (default: " + dflt(finetune_defaults().lr) + ")"},
          {"warmup", "S  warm-up steps (default: 0.2% of the steps)"},
          {"dropout", "P  dropout probability (default: " + dflt(finetune_defaults().dropout) + ")"},
          {"weight-decay", "W  AdamW's weight decay (default: " + dflt(finetune_defaults().weight_decay) + ")"},
          {"grad-clip", "C  clip the gradient's global norm, 0 = off (default: " + dflt(finetune_defaults().grad_clip) + ")"},
          {"eval-every", "S  validation accuracy every S steps and at the last, 0 = only the final accuracy (default: every epoch)"},
          {"log-every", "S  progress line every S steps, >= 1 (default: " + dflt((double)finetune_defaults().log_every) + ")"},
          {"seed", "S  random seed, 0..2^64-1 (default: " + std::to_string(finetune_defaults().seed) + ")"},
          {"scratch", "same shapes, fresh weights (default: off)", SWITCH},
          {"truncate", "right|left  cut an example longer than n_ctx to fit: drop the end / the start of its longer text (default: none: an error listing them)"},
          {"quiet", "no progress lines (default: off)", SWITCH},
          {"no-memory-check", "start even when the memory estimate exceeds what the computer can give (default: off: refused)", SWITCH},
          {"encoder", "FILE  released weights' tokenizer: encoder.json / vocab.json"},
          {"vocab", "FILE  released weights' tokenizer: vocab.bpe / merges.txt / vocab.txt"},
          {"tokenizer", "KIND  gpt2-bpe|gpt1-bpe|roberta-bpe|bert-wordpiece (default: recognised from the files)"}},
         "finetune --checkpoint pre.st --task classify --train t.tsv --val v.tsv --out ft.st",
         "A run stopped by Ctrl-C (SIGINT) or SIGTERM finishes its step and saves a checkpoint.", cmd_finetune},
        {"bpe", "train", "learn a byte-level BPE vocabulary (as Hugging Face's BpeTrainer with a ByteLevel pre-tokenizer)",
         {{"data", "FILE  a text to learn from (required; may be repeated)", REPEATED},
          {"merges", "N  how many merges to learn, >= 1 (required; GPT-1 learnt 40000)"},
          {"out", "DIR  writes DIR/encoder.json and DIR/vocab.bpe (required)"},
          {"special", "TOKEN  a special token (<|NAME|>, or RoBERTa's <s> <pad> </s> <unk> <mask>), cut out of the text; may be repeated", REPEATED},
          {"min-count", "N  stop when no pair occurs N times, >= 1 (default: 1)"},
          {"show", "K  print the first K merges with their counts (default: 0)"},
          {"quiet", "no progress lines (default: off)", SWITCH}},
         "bpe --data corpus.txt --merges 1000 --out bpe/", "", cmd_bpe},
        {"sample", "use", "generate text from a GPT checkpoint",
         {{"checkpoint", "FILE  the model (required)"},
          {"prompt", "TEXT  the text to continue (required; \"\" starts from <|endoftext|> or a newline, not printed)"},
          {"tokens", "N  tokens to generate, 1..1000000 (default: 200)"},
          {"temperature", "T  softmax temperature, 0 = greedy (default: 1)"},
          {"top-k", "K  draw from the K most likely tokens, 0 = all (default: 0)"},
          {"top-p", "P  then from the fewest most likely whose probabilities add up to P or more, in (0, 1], 1 = all (default: 1)"},
          {"num-samples", "N  samples, each from where the last left the generator, separated by a line of dashes, 1..10000 (default: 1)"},
          {"stop", "TEXT  end a sample once it has generated TEXT, printed with it (default: none)"},
          {"seed", "S  random seed, 0..2^64-1 (default: 1)"},
          {"top-probs", "K  draw nothing: print the K most likely next tokens after the prompt with their probabilities, "
                        "Softmax(z) of the last position (default: off)"},
          {"encoder", "FILE  GPT-2's encoder.json (released weights)"},
          {"vocab", "FILE  GPT-2's vocab.bpe (released weights)"},
          {"tokenizer", "KIND  gpt2-bpe|gpt1-bpe (default: recognised from the files, or the checkpoint's)"}},
         "sample --checkpoint model.safetensors --prompt 123+456= --tokens 5",
         "--top-probs K shows the distribution the first token would be drawn from at temperature 1, most likely first: "
         "rank, probability, id, token.", cmd_sample},
        {"fill", "use", "fill in the [MASK]s (<mask>s) of a text with a BERT or RoBERTa model",
         {{"checkpoint", "FILE  the model (required)"},
          {"text", "TEXT  the text with [MASK]s (required)"},
          {"top", "K  candidates shown at each mask, >= 1 (default: 5; with a tokenizer)"},
          {"encoder", "FILE  RoBERTa's vocab.json"},
          {"vocab", "FILE  BERT's vocab.txt (WordPiece), or RoBERTa's merges.txt"},
          {"tokenizer", "KIND  bert-wordpiece|roberta-bpe (default: recognised from the files)"}},
         "fill --checkpoint bert.st --text 'the [MASK] sat'",
         "Positions count from 1 (\"[MASK] at token 3\"; the first token is [CLS] / <s>). Probabilities are Softmax(z_j).", cmd_fill},
        {"eval", "use", "mean loss on a text, in nats per token (GPT variants also bits per byte)",
         {{"checkpoint", "FILE  the model (required)"},
          {"data", "FILE  the text, or llm.c's .bin token file (required)"},
          {"encoder", "FILE  encoder.json / vocab.json (released weights)"},
          {"vocab", "FILE  vocab.bpe / merges.txt / vocab.txt (released weights)"},
          {"tokenizer", "KIND  gpt2-bpe|gpt1-bpe|roberta-bpe|bert-wordpiece (default: recognised from the files)"}},
         "eval --checkpoint model.safetensors --data val.txt", "", cmd_eval},
        {"predict", "use", "label each line of a file with a fine-tuned model (accuracy on stderr if it has labels)",
         {{"checkpoint", "FILE  the fine-tuned model (required)"},
          {"data", "FILE  tab-separated examples in finetune's format, labels optional (required)"},
          {"truncate", "right|left  cut an example longer than n_ctx to fit: drop the end / the start of its longer text (default: none: an error listing them)"},
          {"probs", "after each label, every class with its probability, tab-separated (default: off)", SWITCH}},
         "predict --checkpoint ft.st --data test.tsv",
         "One label per example on stdout (with --probs, then each class's probability); with labelled input, the accuracy, "
         "the confusion matrix and each class's precision, recall and F1 on stderr.", cmd_predict},
        {"explain", "inspect", "one forward and backward pass, formula box by formula box",
         {{"preset", "NAME  a preset model, freshly initialised (or --checkpoint)"},
          {"checkpoint", "FILE  a model file (or --preset)"},
          {"seed", "S  initialisation seed with --preset, 0..2^64-1 (default: 1)"},
          {"tokens", "IDS  token ids, comma-separated (or --text)"},
          {"text", "TEXT  the input through the checkpoint's tokenizer (or --tokens); with a tokenizer the page labels the tokens with their text"},
          {"segments", "IDS  bert: segment of each token, 0 or 1"},
          {"masked", "POSITIONS  bert/roberta: positions to predict, comma-separated, from 1 (required for them)"},
          {"values", "K  first values shown per tensor, 0..64 (default: 4)"},
          {"html", "FILE  also write one self-contained page: per box its formula, code line, every value as a heat map and, "
                   "per backward box, its own gradient check"}},
         "explain --preset tiny-bert --tokens 3,1,4 --masked 2",
         "Positions count from 1, as in the formulas. With --html, a backward box whose gradient disagrees with finite "
         "differences of its own forward, or whose gradients of the model's walk disagree with finite differences of the "
         "loss through model_forward, is marked failing on the page (and listed on stdout); the exit status is then 1. "
         "In a handout the run stops at the first function not written yet (\"not implemented: ...\"): the text stops "
         "there, but the page is still written, saying where the run stopped, checking every backward box the walk did "
         "not reach alone (on random inputs where the forward did not reach it) and marking those that need a stub "
         "\"not implemented yet\"; exit status 0 when no box fails, 1 when one does.", cmd_explain},
        {"grad", "inspect", "write the gradient of the loss on a few tokens to a safetensors file",
         {{"checkpoint", "FILE  the model (required)"},
          {"tokens", "IDS  token ids, comma-separated (required)"},
          {"segments", "IDS  bert: segment of each token, 0 or 1"},
          {"masked", "POSITIONS  bert/roberta: positions to predict, comma-separated, from 1 (required for them)"},
          {"out", "FILE  the gradients (required)"}},
         "grad --checkpoint model.safetensors --tokens 3,1,4 --out grad.safetensors",
         "Positions count from 1, as in the formulas.", cmd_grad},
        {"params", "inspect", "count a model's parameters: the formulas' lambda (formulas §24) beside the floats it holds",
         {{"preset", "NAME  a preset (or --checkpoint)"}, {"checkpoint", "FILE  a model file (or --preset)"}},
         "params --preset gpt2-124m", "", cmd_params},
        {"attention", "inspect", "heat maps of the attention probabilities P, one per layer and head (SVG)",
         {{"checkpoint", "FILE  the model (required)"},
          {"text", "TEXT  the input (or --tokens)"},
          {"tokens", "IDS  token ids, comma-separated (or --text)"},
          {"out", "FILE.svg  the picture (required)"},
          {"layer", "l  only layer l, from 1 (default: all)"},
          {"head", "i  only head i, from 1 (default: all)"},
          {"perm", "z  XLNet: the factorisation order, positions 1..n comma-separated"},
          {"encoder", "FILE  encoder.json / vocab.json for --text"},
          {"vocab", "FILE  vocab.bpe / merges.txt / vocab.txt for --text"}},
         "attention --checkpoint model.safetensors --text 12+34= --out attention.svg",
         "Layers, heads and positions count from 1, as in the formulas.", cmd_attention},
        {"masks", "inspect", "draw the attention masks Mask^BD, Mask^AR, Mask^ST and Mask^XL(z) beside their formulas (SVG)",
         {{"n", "N  sequence length, 1..64 (required)"},
          {"out", "FILE.svg  the picture (required)"},
          {"window", "W  Mask^ST's window, >= 1 (default: 3)"},
          {"stride", "S  Mask^ST's stride, >= 0 (default: 4)"},
          {"perm", "z  the permutation for Mask^XL, positions 1..n comma-separated (default: a fixed example)"}},
         "masks --n 6 --out masks.svg", "Positions count from 1, as in the formulas.", cmd_masks},
        {"bench", "inspect", "time forward, backward and update steps of a model",
         join({{"preset", "NAME  the model (default: gpt2-124m); model flags change it"},
               {"vocab", "V  vocabulary size, >= 1 (default: the preset's)"},
               {"batch", "B  sequences per batch, >= 1 (default: 4)"},
               {"block", "n  tokens per sequence, >= 1 (default: min(64, n_ctx))"},
               {"steps", "S  timed steps after one warm-up, >= 1 (default: 3)"},
               {"json", "one line of JSON (default: off)", SWITCH},
               {"no-memory-check", "start even when the memory estimate exceeds what the computer can give (default: off: refused)", SWITCH}},
              PRESET_MODEL_FLAGS),
         "bench --preset tiny-gpt --steps 5", "", cmd_bench},
        {"strip", "files", "write a checkpoint's weights without the optimiser state (a third of the size)",
         {{"checkpoint", "FILE  the checkpoint (required)"}, {"out", "FILE  the weights-only checkpoint (required)"}},
         "strip --checkpoint model.safetensors --out weights.safetensors",
         "sample, eval, fill, predict, export, finetune and train --init-from read it; train --resume cannot.", cmd_strip},
        {"init", "files", "write a freshly initialised preset model",
         {{"preset", "NAME  the preset (required)"}, {"seed", "S  random seed, 0..2^64-1 (default: 1)"}, {"out", "FILE  the checkpoint (required)"},
          {"emb-ln", "bert, roberta: the released BERT's embedding LayerNorm (default: the preset's)", SWITCH},
          {"mlm-head", "bert, roberta: the released BERT's masked-LM head, with the embedding LayerNorm (default: the preset's)", SWITCH}},
         "init --preset tiny-gpt --out tiny.safetensors", "", cmd_init},
        {"task", "files", "write one of the built-in tasks on 3-digit sums",
         {{"task", "text|classify|entailment|similarity|choice  text: unlabelled problems to pre-train on (required)"},
          {"out", "FILE  the file written, in finetune's format (required)"},
          {"examples", "N  examples, 1..10000000 (default: 2000)"},
          {"seed", "S  random seed, 0..2^64-1 (default: 1)"},
          {"held-out", "only the held-out pairs (default: off)", SWITCH}},
         "task --task classify --out train.tsv", "", cmd_task},
        {"tokenize", "files", "text -> token ids, or ids -> text (GPT-2's, GPT-1's, RoBERTa's BPE, BERT's WordPiece)",
         {{"encoder", "FILE  encoder.json / vocab.json (a BPE)"},
          {"vocab", "FILE  vocab.bpe / merges.txt / vocab.txt (required, unless --checkpoint)"},
          {"checkpoint", "FILE  use the tokenizer this model records (characters too) instead of --encoder/--vocab"},
          {"tokenizer", "KIND  gpt2-bpe|gpt1-bpe|roberta-bpe|bert-wordpiece (default: recognised from the files)"},
          {"text", "TEXT  the text (or --file, --ids)"},
          {"file", "FILE  a text file (or --text, --ids)"},
          {"ids", "IDS  ids to decode, comma-separated (or --text, --file)"},
          {"out", "FILE.bin  write the ids as llm.c's token file"}},
         "tokenize --encoder encoder.json --vocab vocab.bpe --text 'Hello world'", "", cmd_tokenize},
        {"export", "files", "write a model and its tokenizer as the Hugging Face class that holds it (docs/released-weights.md)",
         {{"checkpoint", "FILE  the model (required): gpt2; gpt trained with --activation relu or gelu_tanh and F = 4 H (--ffn "
                         "left at its default); bert or roberta with --mlm-head (or a released encoder's pooler); not gpt3"},
          {"out", "DIR  a new or empty directory (or an earlier export): model.safetensors, config.json, tokenizer.json, "
                  "tokenizer_config.json (+ vocab.json, merges.txt or vocab.txt) (required)"}},
         "export --checkpoint model.safetensors --out hf/",
         "Each class must hold every weight of the model and the model every weight of the class, so nothing loads with random "
         "numbers: a gpt needs OpenAIGPTLMHeadModel's activation (afn relu or gelu, the tanh form) and its 4 n_embd wide "
         "feed-forward nets; a bert or roberta needs the masked-LM head (BertForMaskedLM, RobertaForMaskedLM) or, as a "
         "BertModel / RobertaModel, a pooler (a released encoder's, kept by --init-from); gpt3's Mask^ST has no class. "
         "An interrupted export leaves the directory as it was (a new one is removed).", cmd_export},
    };
    return docs;
}

static const CommandDoc* command_doc(const std::string& name) {
    for (const CommandDoc& d : command_docs())
        if (name == d.name) return &d;
    return nullptr;
}

static std::string command_names() {
    std::string s;
    for (const CommandDoc& d : command_docs()) s += std::string(s.empty() ? "" : ", ") + d.name;
    return s;
}

static std::string flag_names(const CommandDoc& d) {
    std::string s;
    for (const FlagDoc& fd : d.flags) s += std::string(s.empty() ? "--" : ", --") + fd.name;
    return s;
}

static std::string command_help(const CommandDoc& d) {
    std::string s = "usage: " + program_name() + " " + d.name + " [flags]\n" + d.summary + "\n\nflags:\n";
    std::string resumable;  // the flags marked RESUMABLE, named where a text says "RESUMABLE"
    for (const FlagDoc& fd : d.flags)
        if ((fd.kind & RESUMABLE) && std::string(fd.name) != "resume") resumable += (resumable.empty() ? "--" : ", --") + std::string(fd.name);
    for (const FlagDoc& fd : d.flags) {
        const bool sw = (fd.kind & SWITCH) != 0;
        std::string text = fd.text;
        const std::size_t at = text.find("RESUMABLE");
        if (at != std::string::npos) text.replace(at, 9, resumable);
        s += std::string("  --") + fd.name + (sw ? "  " : " ") + text + "\n";
    }
    if (*d.notes) s += std::string("\n") + d.notes + "\n";
    s += "\nexample:\n  " + program_name() + " " + d.example + "\n";
    return s;
}

static std::string overview() {
    std::string s = "usage: " + program_name() + " COMMAND [flags]   (" + program_name() + " COMMAND --help: its flags, defaults and an example)\n";
    for (const char* group : {"train", "use", "inspect", "files"}) {
        s += std::string("\n") + group + ":\n";
        for (const CommandDoc& d : command_docs())
            if (std::string(d.group) == group) {
                char line[256];
                std::snprintf(line, sizeof line, "  %-10s %s\n", d.name, d.summary);
                s += line;
            }
    }
    s += "\npresets: gpt1 gpt2-124m gpt3-125m bert-base roberta-base tiny-gpt tiny-gpt2 tiny-gpt3 tiny-bert tiny-roberta\n";
    s += "Positions, layers and heads count from 1, as in the formulas (docs/formulas.md).\n";
    return s;
}

// --name VALUE or --name=VALUE. The word after a flag is its value unless it is itself a flag
// (--out --window 3 is an error, never a file named "--window"); a value that starts with -- is
// given as --name=VALUE (--prompt=--help prompts with "--help"). A boolean flag is --name alone, or
// --name=true|false|1|0. --help (or -h) in a flag's place asks for the usage. A flag the command's
// help does not list is an unknown flag, whatever follows it (--bogus --help too). A REPEATED flag
// may be given again: its values are kept in order, joined by NUL bytes (no argument holds one), for
// Flags::list.
static Flags parse_flags(int argc, char** argv, int first, bool& help, const CommandDoc& doc) {
    Flags f;
    help = false;
    for (int i = first; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            help = true;
            continue;
        }
        if (a.size() < 3 || a.compare(0, 2, "--") != 0) throw Error("unexpected argument '" + a + "' (flags look like --name value)");
        a = a.substr(2);
        std::string v;
        const std::size_t eq = a.find('=');
        const bool inline_value = eq != std::string::npos;
        if (inline_value) v = a.substr(eq + 1), a = a.substr(0, eq);
        const auto fd = std::find_if(doc.flags.begin(), doc.flags.end(), [&](const FlagDoc& d) { return a == d.name; });
        if (fd == doc.flags.end()) throw Flags::unknown_flag(a, doc.name, flag_names(doc));
        if (fd->kind & SWITCH) {
            if (!inline_value || v == "true" || v == "1") v = "1";
            else if (v == "false" || v == "0") v = "0";
            else throw Error("--" + a + " is a switch: give --" + a + " alone, or --" + a + "=true|false|1|0, not '" + v + "'");
        } else if (!inline_value) {
            if (i + 1 >= argc) throw Error("flag --" + a + " needs a value");
            v = argv[++i];
            if (v.size() > 2 && v.compare(0, 2, "--") == 0 && std::isalpha((unsigned char)v[2]))
                throw Error("flag --" + a + " needs a value, but the next word is the flag '" + v + "' (a value that starts with -- is written --" +
                            a + "=" + v + ")");
        }
        if (f.values.count(a) && (fd->kind & REPEATED)) {
            f.values[a] += std::string(1, '\0') + v;
            continue;
        }
        if (f.values.count(a)) throw Error("flag --" + a + " given twice");
        f.values[a] = v;
    }
    return f;
}

// A failed write of the help shows in fputs or at main's final flush: its errno is kept for
// main's message (by then errno may say no more than EIO).
static int g_stdout_errno = 0;
static int print_text(const std::string& text) {
    if (std::fputs(text.c_str(), stdout) == EOF) g_stdout_errno = errno;
    return 0;
}

static int run(int argc, char** argv) {
    if (argc < 2) return std::fputs(overview().c_str(), stderr), 1;
    const std::string cmd = argv[1];
    auto unknown_command = [](const std::string& name) {
        std::fprintf(stderr, "error: unknown command '%s' (the commands: %s; %s --help describes them)\n", terminal_text(name).c_str(),
                     command_names().c_str(), program_name().c_str());
        return 1;
    };
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {  // help, or help CMD
        if (argc == 2) return print_text(overview());
        if (!command_doc(argv[2])) return unknown_command(argv[2]);
        if (argc > 3) {
            std::fprintf(stderr, "error: %s takes one command, got '%s' after '%s' (%s %s --help lists its flags)\n", cmd.c_str(),
                         terminal_text(argv[3]).c_str(), argv[2], program_name().c_str(), argv[2]);
            return 1;
        }
        return print_text(command_help(*command_doc(argv[2])));
    }
    const CommandDoc* doc = command_doc(cmd);
    if (!doc) return unknown_command(cmd);  // whatever follows it
    try {
        bool help = false;
        Flags f = parse_flags(argc, argv, 2, help, *doc);
        if (help) return print_text(command_help(*doc));
        f.command = cmd, f.valid = flag_names(*doc);
        for (const FlagDoc& fd : doc->flags) {
            f.documented.insert(fd.name);
            if (fd.kind & SWITCH) f.switches.insert(fd.name);
            if (fd.kind & RESUMABLE) f.resumable.push_back(fd.name);
        }
        return doc->run(f);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", terminal_text(e.what()).c_str());  // a file's stray bytes escaped, never raw
        return 1;
    }
}

// Standard output is checked like any other file (as coreutils do): output that could not be
// written (a full disk, /dev/full, a closed pipe) is an error, never a silent exit 0.
// The arguments are UTF-8 on every system (program_arguments).
int main(int argc, char** argv) {
    platform_start();
    std::vector<std::string> args = program_arguments(argc, argv);
    std::vector<char*> arg_pointers;
    for (std::string& a : args) arg_pointers.push_back(&a[0]);
    arg_pointers.push_back(nullptr);
    if (!args.empty() && !args[0].empty()) program_name() = shell_word(args[0]);  // ./transformer as typed, not "transformer"
    const int status = run((int)args.size(), arg_pointers.data());
    errno = 0;
    const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout);
    const int err = g_stdout_errno ? g_stdout_errno : errno;
    if (std::fclose(stdout) != 0 || failed) {
        std::fprintf(stderr, "error: writing standard output: %s\n", std::strerror(err ? err : errno ? errno : EIO));
        return 1;
    }
    return status;
}
