// tests.cpp - the doctest suite of the modules declared in transformer.hpp.
//
// Every test case name starts with its module's name, so `./tests -tc="LayerNorm*"` runs the
// tests of one module. For every module there are
//   1. a small case computed by hand (the arithmetic is in a comment next to the numbers),
//   2. a gradient check in double precision of every input and every parameter against central
//      finite differences (grad_check below),
//   3. invariants (rows sum to 1, causality, mean 0 / variance 1, ...),
//   4. wrong shapes: a tf::ShapeError (tf::Error for bad ids) whose message names the shapes.
//
// The banners of transformer.cpp and transformer.hpp (a test keeps the three lists the same):
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
// The sections follow those parts (middle: the banner each group belongs to; right: the doctest
// test suite its section opens, which `./tests -ts=...` selects). Every case is in one suite: its
// section's, or the assignment's that grades it ("assignment N"), or its topic's long suite ("...
// (long)": the cases that build, run handouts, start a browser or a debugger), which ./tests and
// ./tests-debug skip unless --no-skip asks (make test-long). Search for a section's title to jump to it:
//
//   The operating system                              starting a program (an argument vector), fork: POSIX and Windows
//   Helpers                                           grad_check, CHECK_THROWS_NAMING, random modules
//   Helpers of the model, file and command tests      m_*: the program under test, tiny models, files
//     Fixtures the sections share                     hand-made tokenizers, explain's batch, SVG panels
//   PART I. THE MATHEMATICS
//     Tensor basics                                   Tensor                           tensor
//     Matrix products                                 Matrix products                  matrix products
//     diag                                            MODULES                          modules
//     Stack
//     OneHot
//     Embedding
//     Softmax
//     Masks
//     Attention
//     Concat
//     MultiHeadSA
//     Activations
//     FFN_ReLU and FFN_GELU
//     LayerNorm
//     CrossEntropy
//     CrossEntropy_logits
//     dropout_mask
//     Rng
//     Parameters                                      MODELS                           models
//     Whole-model gradient checks
//     Causality and the masks of each layer
//     The formula boxes' outputs
//     Dropout
//     The released BERT's additions
//     RoBERTa as Hugging Face's RobertaForMaskedLM
//     Objectives                                      OBJECTIVES                       objectives
//     GPT-1 fine-tuning
//     XLNet
//     AdamW, learning-rate schedule                   TRAINING                         training
//     Sampling
//     Mistakes a student makes                        (Part I; docs/mutation.md)       modules
//   PART II. THE MACHINERY
//     The vectorised forms                            THE FAST MATRIX PRODUCT          fast paths
//     The C library's functions
//     Generation with a key/value cache               TRAINING (generation)            training
//     Tokenizer: GPT-2's byte-level BPE               TEXT                             text
//     bpe: learning a byte-level BPE vocabulary
//     Tokenizers of the released GPT-1 and BERT
//     The tokenizer of a checkpoint
//     Checkpoints                                     MODEL FILES                      model files
//     Released GPT-2 weights
//     Released GPT-1, BERT and RoBERTa weights
//     Export to Hugging Face's layout
//     Export to the Hugging Face classes
//     What a new user's bad inputs and exports showed
//     Training                                        RUNS                             runs
//     Starting from a checkpoint's weights
//     Fine-tuning and XLNet as commands
//     Teaching                                        TEACHING                         teaching
//     Files and failures                              MODEL FILES, PLATFORM            platform
//     The command-line program                        main.cpp                         command line
//     Help, flag checks
//   The project itself                                the sources, the tools, builds   the project
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "transformer.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// ================================================================================================
// The operating system: this file's only calls to it outside transformer.hpp's PLATFORM functions.
// Starting a program with an argument vector, child processes, FIFOs, links, file descriptors: a
// POSIX branch and a Windows branch. A case that needs what Windows lacks (fork, signals, FIFOs, a
// POSIX shell, make) starts with M_SKIP_ON_WINDOWS(reason).
// ================================================================================================
#if defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#include <fcntl.h>
#include <io.h>
#include <sys/stat.h>
#else
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace {

#if defined(_WIN32)
constexpr bool m_ON_WINDOWS = true;
#else
constexpr bool m_ON_WINDOWS = false;
#endif
// The rest of a case needs what Windows lacks: there it ends here, saying what it needs.
#define M_SKIP_ON_WINDOWS(needs)                                    \
    do {                                                            \
        if (m_ON_WINDOWS) {                                         \
            MESSAGE("skipped on Windows: needs " << needs);         \
            return;                                                 \
        }                                                           \
    } while (0)

// The program under test, relative to the working directory (make test runs ./tests from the root;
// make debug builds tests-debug with TF_TESTS_DEBUG, which tests the sanitized transformer-debug).
#if defined(TF_TESTS_DEBUG) && defined(_WIN32)
const char* const m_PROGRAM = "transformer-debug.exe";
#elif defined(TF_TESTS_DEBUG)
const char* const m_PROGRAM = "./transformer-debug";
#elif defined(_WIN32)
const char* const m_PROGRAM = "transformer.exe";
#else
const char* const m_PROGRAM = "./transformer";
#endif

// How a started program or child process ended: exited with status, or killed by signal (POSIX).
struct m_Exit {
    bool exited = false;
    int status = -1;
    int signal = 0;
};
// A started program or child process.
struct m_Child {
    long long pid = -1;
#if defined(_WIN32)
    HANDLE handle = nullptr;
#endif
};

// The exit status in std::system's result; -1 when the command did not exit (a signal, no shell).
int m_system_status(int st) {
#if defined(_WIN32)
    return st;
#else
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
#endif
}

#if defined(_WIN32)
std::wstring m_wide(const std::string& s) {
    if (s.empty()) return std::wstring();
    const int n = ::MultiByteToWideChar(CP_UTF8, 0, s.data(), (int)s.size(), nullptr, 0);
    std::wstring w((std::size_t)n, L'\0');
    ::MultiByteToWideChar(CP_UTF8, 0, s.data(), (int)s.size(), &w[0], n);
    return w;
}
// One argument as CommandLineToArgvW and the C runtime read it back: quoted when it holds a space,
// a tab or a quote, a quote preceded by a backslash, and the backslashes before a quote doubled.
std::wstring m_windows_quoted(const std::wstring& arg) {
    if (!arg.empty() && arg.find_first_of(L" \t\n\v\"") == std::wstring::npos) return arg;
    std::wstring q = L"\"";
    std::size_t backslashes = 0;
    for (const wchar_t ch : arg) {
        if (ch == L'\\') {
            backslashes++;
            continue;
        }
        q.append(ch == L'"' ? 2 * backslashes + 1 : backslashes, L'\\');
        backslashes = 0;
        q.push_back(ch);
    }
    q.append(2 * backslashes, L'\\');
    q.push_back(L'"');
    return q;
}
// A file handle the child inherits: path opened for reading (in) or truncated for writing.
HANDLE m_inheritable(const std::string& path, bool in) {
    SECURITY_ATTRIBUTES sa = {sizeof sa, nullptr, TRUE};
    const std::wstring w = m_wide(path.empty() ? "NUL" : path);
    return ::CreateFileW(w.c_str(), in ? GENERIC_READ : GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, &sa,
                         in ? OPEN_EXISTING : CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr);
}
#endif

// Starts argv[0] (found as execvp / CreateProcessW find it) with the arguments argv[1..], no shell
// between: standard output to the file out, standard error to the file err, standard input from the
// file in ("": the null device). The case fails when it cannot be started.
m_Child m_start_argv(const std::vector<std::string>& argv, const std::string& out, const std::string& err, const std::string& in = "") {
    REQUIRE(!argv.empty());
    std::fflush(nullptr);
    m_Child c;
#if defined(_WIN32)
    std::wstring line;
    for (const std::string& a : argv) line += (line.empty() ? L"" : L" ") + m_windows_quoted(m_wide(a));
    HANDLE hin = m_inheritable(in, true), hout = m_inheritable(out, false), herr = m_inheritable(err, false);
    REQUIRE_MESSAGE(hin != INVALID_HANDLE_VALUE, "cannot open '" << in << "' for " << argv[0] << "'s standard input");
    REQUIRE_MESSAGE(hout != INVALID_HANDLE_VALUE, "cannot create '" << out << "'");
    REQUIRE_MESSAGE(herr != INVALID_HANDLE_VALUE, "cannot create '" << err << "'");
    STARTUPINFOW si = {};
    si.cb = sizeof si;
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = hin, si.hStdOutput = hout, si.hStdError = herr;
    PROCESS_INFORMATION pi = {};
    // wine's CreateProcessW fails now and then with ERROR_INTERNAL_ERROR (1359) while many processes
    // start: a few tries, a tenth of a second apart.
    BOOL started = FALSE;
    DWORD why = 0;
    for (int attempt = 0; attempt < 5 && !started; attempt++) {
        if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        started = ::CreateProcessW(nullptr, &line[0], nullptr, nullptr, TRUE, 0, nullptr, nullptr, &si, &pi);
        why = started ? 0 : ::GetLastError();
        if (why != ERROR_INTERNAL_ERROR) break;
    }
    ::CloseHandle(hin), ::CloseHandle(hout), ::CloseHandle(herr);
    REQUIRE_MESSAGE(started, "CreateProcessW could not start " << argv[0] << " (error " << why << ")");
    ::CloseHandle(pi.hThread);
    c.pid = (long long)pi.dwProcessId;
    c.handle = pi.hProcess;
#else
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // the child: its three files, then the program (127: it could not be started)
        std::signal(SIGINT, SIG_DFL), std::signal(SIGTERM, SIG_DFL);
        const int i = ::open(in.empty() ? "/dev/null" : in.c_str(), O_RDONLY);
        const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (i < 0 || o < 0 || e < 0 || ::dup2(i, 0) < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0) ::_exit(127);
        ::execvp(args[0], args.data());
        ::_exit(127);
    }
    c.pid = (long long)pid;
#endif
    return c;
}
// Waits for a started program or child: until it ends (block), or only if it has ended already.
// False when it still runs (block false).
bool m_wait(m_Child& c, m_Exit& e, bool block = true) {
#if defined(_WIN32)
    if (::WaitForSingleObject(c.handle, block ? INFINITE : 0) != WAIT_OBJECT_0) return false;
    DWORD code = 0;
    ::GetExitCodeProcess(c.handle, &code);
    ::CloseHandle(c.handle);
    c.handle = nullptr;
    e.exited = true, e.status = (int)code, e.signal = 0;
#else
    int st = 0;
    const pid_t got = ::waitpid((pid_t)c.pid, &st, block ? 0 : WNOHANG);
    if (got != (pid_t)c.pid) return false;
    e.exited = WIFEXITED(st), e.status = e.exited ? WEXITSTATUS(st) : -1, e.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
#endif
    return true;
}
// argv run to its end (m_start_argv): how it ended.
m_Exit m_run_argv(const std::vector<std::string>& argv, const std::string& out, const std::string& err, const std::string& in = "") {
    m_Child c = m_start_argv(argv, out, err, in);
    m_Exit e;
    REQUIRE(m_wait(c, e));
    return e;
}
// Ends a started program at once (SIGKILL; TerminateProcess) and waits for it.
void m_kill(m_Child& c) {
#if defined(_WIN32)
    ::TerminateProcess(c.handle, 137);
#else
    ::kill((pid_t)c.pid, SIGKILL);
#endif
    m_Exit ignored;
    m_wait(c, ignored);
}
// Sends a POSIX signal to a started program (POSIX only: a Windows case skips first).
void m_send_signal(const m_Child& c, int sig) {
#if defined(_WIN32)
    FAIL("no POSIX signal " << sig << " can be sent to process " << c.pid << " on Windows");
#else
    ::kill((pid_t)c.pid, sig);
#endif
}

// Runs f in a child process (fork; POSIX only: a Windows case skips first) that exits with f's
// value: its standard output and error to the files out and err when named, its files limited to
// file_size_limit bytes when that is not negative (SIGXFSZ ignored: a write past it fails with
// EFBIG), the crash signals at their defaults (not doctest's report), so a crash is its end.
m_Child m_fork(const std::function<int()>& f, const std::string& out = "", const std::string& err = "", long long file_size_limit = -1) {
    m_Child c;
#if defined(_WIN32)
    (void)f, (void)out, (void)err, (void)file_size_limit;
    FAIL("no fork on Windows");
#else
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        for (int sig : {SIGSEGV, SIGFPE, SIGILL, SIGBUS, SIGABRT}) std::signal(sig, SIG_DFL);
        if (!out.empty()) {
            const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (o < 0 || ::dup2(o, 1) < 0) ::_exit(126);
        }
        if (!err.empty()) {
            const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (e < 0 || ::dup2(e, 2) < 0) ::_exit(126);
        }
        if (file_size_limit >= 0) {
            std::signal(SIGXFSZ, SIG_IGN);
            struct rlimit lim = {(rlim_t)file_size_limit, (rlim_t)file_size_limit};
            ::setrlimit(RLIMIT_FSIZE, &lim);
        }
        int code = 125;
        try {
            code = f();
        } catch (...) {
        }
        std::fflush(nullptr);
        ::_exit(code);
    }
    c.pid = (long long)pid;
#endif
    return c;
}
// What f returns, computed in a child process (fork) so that a crash there is reported instead of
// ending the suite: "crashed with signal N", or "died with exit status N" when it returned nothing.
// Windows has no fork: f runs in this process.
std::string m_result_in_child(const std::function<std::string()>& f) {
#if defined(_WIN32)
    return f();
#else
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    m_Child c = m_fork([&] {
        ::close(fds[0]);
        const std::string r = f();
        const ssize_t written = ::write(fds[1], r.data(), r.size());
        return written == (ssize_t)r.size() ? 0 : 1;
    });
    ::close(fds[1]);
    std::string r;
    char buf[512];
    for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) > 0;) r.append(buf, (std::size_t)k);
    ::close(fds[0]);
    m_Exit e;
    m_wait(c, e);
    if (e.signal) return "crashed with signal " + std::to_string(e.signal);
    if (r.empty()) return "died with exit status " + std::to_string(e.status);
    return r;
#endif
}
// The number of a process that has ended (a child that exited at once).
long long m_ended_process_id() {
#if defined(_WIN32)
    m_Child c = m_start_argv({m_PROGRAM, "--help"}, "NUL", "NUL");
#else
    m_Child c = m_fork([] { return 0; });
#endif
    m_Exit e;
    m_wait(c, e);
    return c.pid;
}
// The number of another process that runs: the parent (POSIX), this process itself (Windows, where
// a process does not know its parent).
long long m_running_process_id() {
#if defined(_WIN32)
    return (long long)::GetCurrentProcessId();
#else
    return (long long)::getppid();
#endif
}
// Whether process pid has ended (or never was): false while it runs.
bool m_process_gone(long long pid) {
#if defined(_WIN32)
    HANDLE h = ::OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    if (!h) return ::GetLastError() == ERROR_INVALID_PARAMETER;
    DWORD code = 0;
    const bool ended = ::GetExitCodeProcess(h, &code) && code != STILL_ACTIVE;
    ::CloseHandle(h);
    return ended;
#else
    return ::kill((pid_t)pid, 0) != 0 && errno == ESRCH;
#endif
}

// A FIFO at path (POSIX only; false on Windows).
bool m_make_fifo(const std::string& path) {
#if defined(_WIN32)
    (void)path;
    return false;
#else
    return ::mkfifo(path.c_str(), 0644) == 0;
#endif
}
// A symbolic link at link to target (POSIX only here; false on Windows, where making one needs a
// privilege).
bool m_make_symlink(const std::string& target, const std::string& link) {
#if defined(_WIN32)
    (void)target, (void)link;
    return false;
#else
    return ::symlink(target.c_str(), link.c_str()) == 0;
#endif
}
// The path in Windows' short form (8.3 names) when it holds a space, so that a command line split
// at spaces keeps it whole; on POSIX, and when there is no short form, the path itself.
std::string m_short_path(const std::string& path) {
#if defined(_WIN32)
    if (path.find(' ') == std::string::npos) return path;
    const std::wstring w = m_wide(path);
    const DWORD n = ::GetShortPathNameW(w.c_str(), nullptr, 0);
    if (n == 0) return path;
    std::wstring shorter(n, L'\0');
    const DWORD got = ::GetShortPathNameW(w.c_str(), &shorter[0], n);
    if (got == 0 || got >= n) return path;
    shorter.resize(got);
    const int bytes = ::WideCharToMultiByte(CP_UTF8, 0, shorter.data(), (int)shorter.size(), nullptr, 0, nullptr, nullptr);
    std::string out((std::size_t)bytes, '\0');
    ::WideCharToMultiByte(CP_UTF8, 0, shorter.data(), (int)shorter.size(), &out[0], bytes, nullptr, nullptr);
    return out;
#else
    return path;
#endif
}
// Whether path itself (a link not followed) is a FIFO; a symbolic link.
bool m_is_fifo(const std::string& path) {
    std::error_code ec;
    return std::filesystem::symlink_status(path, ec).type() == std::filesystem::file_type::fifo;
}
bool m_is_symlink(const std::string& path) {
    std::error_code ec;
    return std::filesystem::symlink_status(path, ec).type() == std::filesystem::file_type::symlink;
}

// Standard error (file descriptor 2) sent to the file path; the descriptor it had, for
// m_stderr_restore.
int m_stderr_to(const std::string& path) {
    std::fflush(stderr);
#if defined(_WIN32)
    const int saved = ::_dup(2);
    const int fd = ::_open(path.c_str(), _O_WRONLY | _O_CREAT | _O_TRUNC | _O_BINARY, _S_IREAD | _S_IWRITE);
    REQUIRE(saved >= 0);
    REQUIRE(fd >= 0);
    ::_dup2(fd, 2);
    ::_close(fd);
#else
    const int saved = ::dup(2);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(saved >= 0);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
#endif
    return saved;
}
void m_stderr_restore(int saved) {
    std::fflush(stderr);
#if defined(_WIN32)
    ::_dup2(saved, 2);
    ::_close(saved);
#else
    ::dup2(saved, 2);
    ::close(saved);
#endif
}

}  // namespace

using namespace tf;
using TD = Tensor<double>;
using TF = Tensor<float>;

// make check's reporter (-r=student): a wrong answer in at most 40 lines, the most telling first.
// The first failing case in the cases' order (the formula sheet's: a module's own case before the
// whole-model ones that call it) is shown as doctest's console shows it, cut at 26 lines; each later
// failing case takes one line (its name and its first failure's line), at most 8 of them; then the
// summary. `./build-fast/tests -tc="NAME"` shows a case whole.
struct m_ReporterBuffer {
    std::ostringstream buffer;
};
struct m_StudentReporter : m_ReporterBuffer, doctest::ConsoleReporter {
    std::ostream& out;
    int failing = 0, listed = 0;
    explicit m_StudentReporter(const doctest::ContextOptions& o) : ConsoleReporter(o, buffer), out(*o.cout) {}
    void test_case_start(const doctest::TestCaseData& in) override {
        buffer.str("");
        ConsoleReporter::test_case_start(in);
    }
    void test_case_end(const doctest::CurrentTestCaseStats& st) override {
        ConsoleReporter::test_case_end(st);
        const std::string text = buffer.str();
        buffer.str("");
        if (!st.failure_flags || text.empty()) return;
        failing++;
        std::vector<std::string> lines;
        std::istringstream in(text);
        for (std::string line; std::getline(in, line);) lines.push_back(line);
        if (failing == 1) {
            const std::size_t keep = std::min<std::size_t>(lines.size(), 26);
            for (std::size_t k = 0; k < keep; k++) out << lines[k] << "\n";
            if (keep < lines.size())
                out << "(" << lines.size() - keep << " more lines of this case: ./build-fast/tests -tc=\"" << tc->m_name << "\" shows it whole)\n";
            return;
        }
        if (++listed > 8) return;
        std::string first;  // what its first failure logged first (else its line)
        for (const std::string& line : lines) {
            const std::size_t at = line.find("logged: ");
            if (at != std::string::npos || (first.empty() && line.find(": ERROR: ") != std::string::npos))
                first = at != std::string::npos ? line.substr(at + 8) : line;
            if (at != std::string::npos) break;
        }
        if (first.size() > 110) first = first.substr(0, 107) + "...";
        if (listed == 1) out << "===============================================================================\nAlso failing:\n";
        out << "  " << tc->m_name << (first.empty() ? "" : ": " + first) << "\n";
    }
    void test_run_end(const doctest::TestRunStats& stats) override {
        buffer.str("");
        ConsoleReporter::test_run_end(stats);
        if (listed > 8) out << "  ... and " << listed - 8 << " more failing cases\n";
        out << buffer.str();
    }
};
REGISTER_REPORTER("student", 1, m_StudentReporter);

// How a failing check shows a tensor or a vector: its shape and its first numbers, so that
// CHECK(Y.data == expected) prints the two lists instead of "{?} == {?}".
namespace doctest {
template <typename T, typename A>
struct StringMaker<std::vector<T, A>> {
    static String convert(const std::vector<T, A>& v) {
        std::ostringstream out;
        out << "{";
        for (std::size_t k = 0; k < v.size() && k < 16; k++) out << (k ? ", " : "") << toString(v[k]).c_str();
        if (v.size() > 16) out << ", ... (" << v.size() << " in all)";
        out << "}";
        return out.str().c_str();
    }
};
template <typename T>
struct StringMaker<tf::Tensor<T>> {
    static String convert(const tf::Tensor<T>& t) {
        std::ostringstream out;
        out.precision(8);
        out << "Tensor " << tf::shape_str(t.shape) << " ";
        const int rows = t.shape.size() == 2 ? t.shape[0] : 1;
        const std::size_t cols = rows > 0 ? t.size() / (std::size_t)rows : 0;
        out << "{";
        for (int i = 0; i < rows && i < 4; i++) {
            out << (i ? ", " : "") << "{";
            for (std::size_t j = 0; j < cols && j < 8; j++) out << (j ? ", " : "") << t.data[(std::size_t)i * cols + j];
            out << (cols > 8 ? ", ...}" : "}");
        }
        out << (rows > 4 ? ", ...}" : "}");
        return out.str().c_str();
    }
};
// A number reader's verdict by its name: CHECK(read_integer(...) == NumberRead::ok) shows what it got.
template <>
struct StringMaker<tf::NumberRead> {
    static String convert(tf::NumberRead r) {
        return r == tf::NumberRead::ok ? "ok" : r == tf::NumberRead::not_a_number ? "not_a_number" : "out_of_range";
    }
};
}  // namespace doctest

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
// The larger of m and x, or NaN if either is NaN (std::max(m, NaN) is m, which would hide a NaN
// from every "<= tol" that follows).
double nan_max(double m, double x) { return x <= m || m != m ? m : x; }
double max_abs(const TD& a) {
    double m = 0;
    for (double v : a.data) m = nan_max(m, std::fabs(v));
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
    for (int j = 0; j < a.cols(); j++) m = nan_max(m, std::fabs(a(i, j) - b(i, j)));
    return m;
}
std::vector<int> shp(int r, int c) { return {r, c}; }

// Entry k of a tensor named as the formulas index it, from 1: "(2, 3)" for row 2, column 3 of a
// matrix (code [1][2]), "3" for a vector.
std::string entry_name(const std::vector<int>& shape, std::size_t k) {
    if (shape.size() == 2 && shape[1] > 0)
        return "(" + std::to_string(k / shape[1] + 1) + ", " + std::to_string(k % shape[1] + 1) + ")";
    return std::to_string(k + 1);
}

// got must equal expected to within tol in every entry (tol 0: exactly). A failure says what was
// compared, where the expected values come from, the first entry that differs by more than tol
// (1-based, as the formulas write it) with both values, and the largest difference.
#define CHECK_CLOSE(got, expected, tol, what, source)                   \
    do {                                                                \
        INFO("the check at " << __FILE__ << ":" << __LINE__);          \
        check_close((got), (expected), (tol), (what), (source));       \
    } while (0)
template <typename T>
void check_close(const Tensor<T>& got, const Tensor<T>& expected, double tol, const std::string& what,
                 const std::string& source) {
    {
        INFO(what << ": expected a tensor of shape " << shape_str(expected.shape) << " (" << source << "), got "
                  << shape_str(got.shape));
        REQUIRE(got.shape == expected.shape);
    }
    std::size_t first = got.size();
    double worst = 0;
    for (std::size_t k = 0; k < got.size(); k++) {
        const double d = std::fabs((double)got[k] - (double)expected[k]);
        const bool off = !(d <= tol) && !(got[k] == expected[k]);  // equal infinities differ by NaN
        if (off && first == got.size()) first = k;
        if (off && !(d <= worst)) worst = std::isnan(d) ? INF : d;
    }
    if (first == got.size()) return;
    INFO(what << ": entry " << entry_name(got.shape, first) << " (the first of those off by more than " << tol
              << "): expected " << expected[first] << " (" << source << "), got " << got[first]
              << "; the largest difference is " << worst);
    const double difference = std::fabs((double)got[first] - (double)expected[first]);  // NaN for a NaN
    CHECK(difference <= tol);
}

// check_close with doctest's relative tolerance: every entry must satisfy
// got[k] == doctest::Approx(expected[k]).epsilon(eps), i.e. |got - expected| < eps (1 + max(|got|, |expected|)).
// A failure names the first entry off (1-based), both values, the source, and how many are off.
#define CHECK_APPROX(got, expected, eps, what, source)                  \
    do {                                                                \
        INFO("the check at " << __FILE__ << ":" << __LINE__);          \
        check_approx((got), (expected), (eps), (what), (source));      \
    } while (0)
template <typename T, typename U>
void check_approx(const Tensor<T>& got, const Tensor<U>& expected, double eps, const std::string& what,
                  const std::string& source) {
    {
        INFO(what << ": expected a tensor of shape " << shape_str(expected.shape) << " (" << source << "), got "
                  << shape_str(got.shape));
        REQUIRE(got.shape == expected.shape);
    }
    std::size_t first = got.size(), count = 0;
    for (std::size_t k = 0; k < got.size(); k++)
        if (!((double)got[k] == doctest::Approx((double)expected[k]).epsilon(eps))) {
            if (first == got.size()) first = k;
            count++;
        }
    if (first == got.size()) return;
    INFO(what << ": entry " << entry_name(got.shape, first) << " (the first of " << count << " off by more than "
              << "a relative " << eps << "): expected " << expected[first] << " (" << source << "), got "
              << got[first]);
    const double got_entry = (double)got[first], expected_entry = (double)expected[first];
    CHECK(got_entry == doctest::Approx(expected_entry).epsilon(eps));
}
// An expected matrix or vector from a list of values, row by row (for CHECK_CLOSE).
TD mat(int rows, int cols, std::vector<double> values) { return TD::from(rows, cols, std::move(values)); }
TD vec(std::vector<double> values) { return TD::vector(std::move(values)); }

// Where two lists of token ids differ, for a failure message: the first entry (1-based) with both
// values, or their sizes.
std::string first_difference(const std::vector<int>& got, const std::vector<int>& expected) {
    if (got.size() != expected.size())
        return "got " + std::to_string(got.size()) + " entries, expected " + std::to_string(expected.size());
    for (std::size_t k = 0; k < got.size(); k++)
        if (got[k] != expected[k])
            return "entry " + std::to_string(k + 1) + " (1-based): expected " + std::to_string(expected[k]) + ", got " +
                   std::to_string(got[k]);
    return "equal";
}

// loss() with entry j of x moved by d (x0 + d, then x0 again): what fd_gradient differences.
template <class F>
std::function<double(std::size_t, double)> m_moved(F& loss, TD& x) {
    return [&loss, &x](std::size_t j, double d) {
        const double x0 = x[j];
        x[j] = x0 + d;
        const double v = loss();
        x[j] = x0;
        return v;
    };
}

// The entry where the analytic gradient is furthest from the central finite difference.
struct GradWorst {
    std::size_t k = 0;  // 0-based index into x's entries
    double num = 0;     // (L(x + h e_k) - L(x - h e_k)) / 2h
    double ana = 0;     // the backward's entry k
    double err = 0;     // |num - ana| / max(1, |ana|); infinity for a NaN
};
// Every entry compared, by the library's one sampler (fd_gradient, which explain and make check's
// stage walk use too); x is moved in place and restored.
template <class F>
GradWorst grad_worst(F&& loss, TD& x, const TD& ana, double h) {
    Rng r(0);
    const ExplainGradient g = fd_gradient(m_moved(loss, x), "", "", x.shape, ana, (int)x.size(), r, h, INF, 1);
    return {g.at, g.num, g.ana, g.err};
}

// Whether a grad_check equation starts with its section of docs/formulas.md and then is an
// equation: "§", the section's number, a space, then text with an "=" ("§10 dK = dS^T Q / sqrt(D)").
bool cites_a_section(const std::string& equation) {
    const std::string mark = "§";
    if (equation.compare(0, mark.size(), mark) != 0) return false;
    const std::size_t first = mark.size();
    const std::size_t space = equation.find_first_not_of("0123456789", first);
    if (space == std::string::npos || space == first || equation[first] == '0' || equation[space] != ' ') return false;
    return equation.find('=', space) != std::string::npos;
}

// The line a failing grad_check logs under "gradient check of <what>": the equation, then the worst
// entry (counted from 1, as the formulas count) with the finite difference and the backward's value.
std::string grad_check_message(const std::string& equation, const std::vector<int>& shape, const GradWorst& w, double h,
                               double tol) {
    std::ostringstream s;
    s << equation << ": entry " << entry_name(shape, w.k) << " of " << shape_str(shape) << " (counted from 1), the worst: "
      << "expected " << w.num << " (central finite difference (L(x + h) - L(x - h)) / 2h, h = " << h << "), got " << w.ana
      << " from the backward; relative error " << w.err << ", allowed " << tol;
    return s.str();
}

// grad_check: central finite differences of a scalar loss against an analytic gradient.
//   loss() recomputes L (normally L = sum(Y .* R) for a fixed random R, so dY = R) from the current
//   value of x; every entry x_k is perturbed by +-h and restored:
//     num_k = (L(x + h e_k) - L(x - h e_k)) / (2h).
//   Tolerance: max_k |num_k - ana_k| / max(1, |ana_k|) <= tol = 1e-6. With h = 1e-6 the truncation
//   error is O(h^2) ~ 1e-12 and the rounding error ~ 1e-16 |L| / h ~ 1e-9, far below 1e-6, while a
//   wrong derivative (a missing term, a wrong sign or factor) is off by O(1).
//   The analytic gradient must have x's shape and (unless expect_nonzero is false) must not be all
//   zero, so a backward that does nothing cannot pass.
//   what names the backward and the gradient ("Attention_backward's dK (n = 5, ...)"); equation is
//   that gradient's equation as docs/formulas.md writes it, after its section: "§10 dK = dS^T Q / sqrt(D)".
//   A failure logs both, the worst entry counted from 1, its finite difference and the backward's value.
template <class F>
void grad_check(F&& loss, TD& x, const TD& ana, const std::string& what, const std::string& equation, double h = 1e-6,
                double tol = 1e-6, bool expect_nonzero = true) {
    INFO("gradient check of ", what);
    REQUIRE_MESSAGE(cites_a_section(equation), "grad_check's equation must start with its section of docs/formulas.md, "
                                               "\"§N \", then the equation; got \"" << equation << "\"");
    REQUIRE(ana.shape == x.shape);
    const GradWorst w = grad_worst(loss, x, ana, h);
    INFO(grad_check_message(equation, x.shape, w, h, tol));
    CHECK(w.err <= tol);
    CHECK_MESSAGE(all_finite(ana), what << ": the backward's gradient holds a NaN or an infinity");
    if (expect_nonzero) CHECK_MESSAGE(max_abs(ana) > 0, what << ": the backward's gradient is all zero (nothing written?)");
}

// A gradient check must be able to fail, and its failure must say where to look. The wrong backward
// here is a common one: an embedding backward that assigns where §4 adds.
TEST_CASE("grad_check: a wrong gradient's message names the § and its equation, the entry, both values" * doctest::test_suite("the project")) {
    // L = sum(OneHot(x) W_e .* R), written out here, so dW_e = OneHot(x)^T R (formulas §4): row x_i
    // of dW_e receives row i of R. Code id 1 (formula id 2) occurs at positions 1 and 3.
    const std::vector<int> x = {1, 3, 1};
    TD W = mat(4, 3, {0.3, -0.1, 0.2, 1.0, 0.5, -0.7, 0.4, 0.9, -0.2, -0.6, 0.8, 0.1});
    const TD R = mat(3, 3, {0.5, -2, 1, 3, 0.25, -1, 1.5, 1, 0.75});
    auto L = [&] {
        double s = 0;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) s += W(x[i], j) * R(i, j);
        return s;
    };
    TD added(4, 3), assigned(4, 3);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            added(x[i], j) += R(i, j);
            assigned(x[i], j) = R(i, j);
        }
    const std::string equation = "§4 dW_e = OneHot(x)^T dY";
    grad_check(L, W, added, "the scatter-add dW_e = OneHot(x)^T R written out (x = {1, 3, 1} (code ids), W_e 4x3)", equation);
    // Assigned, row 2 of dW_e holds R's row 3 alone, (1.5, 1, 0.75), where R's rows 1 and 3 add to
    // (2, -1, 1.75); relative errors 0.5 / 1.5, 2 / 1, 1 / 1: the worst is entry (2, 2).
    const GradWorst w = grad_worst(L, W, assigned, 1e-6);
    CHECK_MESSAGE(w.k == 4, "grad_worst's entry (0-based): expected 4, row 2 column 2 of 4x3, got " << w.k);
    CHECK_MESSAGE(w.num == doctest::Approx(-1.0).epsilon(1e-8), "grad_worst's finite difference: expected -1, got " << w.num);
    CHECK_MESSAGE(w.ana == 1.0, "grad_worst's value of the backward: expected 1, got " << w.ana);
    CHECK_MESSAGE(w.err == doctest::Approx(2.0).epsilon(1e-8), "grad_worst's relative error: expected 2, got " << w.err);
    const std::string expected = "§4 dW_e = OneHot(x)^T dY: entry (2, 2) of 4x3 (counted from 1), the worst: expected -1 "
                                 "(central finite difference (L(x + h) - L(x - h)) / 2h, h = 1e-06), got 1 from the backward; "
                                 "relative error 2, allowed 1e-06";
    const std::string got = grad_check_message(equation, W.shape, w, 1e-6, 1e-6);
    CHECK_MESSAGE(got == expected, "grad_check_message:\n  expected: " << expected << "\n  got:      " << got);
    // Every call names its section and its equation; grad_check REQUIREs it.
    CHECK(cites_a_section(equation));
    CHECK(cites_a_section("§10 dK = dS^T Q / sqrt(D)"));
    for (const std::string bad : {"", "dW_e = OneHot(x)^T dY", "§ dW_e = OneHot(x)^T dY", "§4dW_e = OneHot(x)^T dY",
                                  "§04 dW_e = OneHot(x)^T dY", "§4 dW_e", "§4 ", "§4"}) {
        CHECK_MESSAGE(!cites_a_section(bad), "cites_a_section(\"" << bad << "\") must be false");
    }
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
// Whether an error message names part: case does not matter, and "a | b" accepts either (the
// rule of formulas §1 names the argument and the shapes or values; the wording is the writer's).
bool message_names(const std::string& msg, const std::string& part) {
    auto lower = [](std::string t) {
        for (char& ch : t) ch = (char)std::tolower((unsigned char)ch);
        return t;
    };
    const std::string m = lower(msg);
    std::size_t from = 0;
    while (true) {
        const std::size_t bar = part.find(" | ", from);
        if (m.find(lower(part.substr(from, bar == std::string::npos ? std::string::npos : bar - from))) != std::string::npos)
            return true;
        if (bar == std::string::npos) return false;
        from = bar + 3;
    }
}
void check_message_has(const std::string& msg, const std::vector<std::string>& parts, const char* expr) {
    for (const std::string& part : parts) {
        INFO("expression: ", std::string(expr));
        INFO("message: '", msg, "' should name '", part, "' (formulas §1: the function, the argument, the shapes or values)");
        CHECK(message_names(msg, part));
    }
}
// expr must throw E, and its what() must contain every one of the strings that follow.
#define CHECK_THROWS_NAMING(E, expr, ...)                                                       \
    do {                                                                                        \
        CHECK_THROWS_AS((void)(expr), E);                                                       \
        check_message_has(what_of<E>([&] { (void)(expr); }), std::vector<std::string>{__VA_ARGS__}, #expr); \
    } while (0)

// Runs f in a child process (m_result_in_child) and says how it ended: "threw: <what>" for an
// exception of type E, "threw another exception: <what>", "returned normally", or "crashed with
// signal N" / "died with exit status N". So an implementation that crashes on a bad input (null
// dereference, division by zero) fails one check instead of killing the whole suite (on POSIX).
template <class E, class F>
std::string outcome_in_child(F&& f) {
    return m_result_in_child([&]() -> std::string {
        try {
            f();
            return "returned normally";
        } catch (const E& e) {
            return std::string("threw: ") + e.what();
        } catch (const std::exception& e) {
            return std::string("threw another exception: ") + e.what();
        }
    });
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
MultiHeadSAParams<double> make_mhsa(int H, int A, int D, Rng& rng, double scale = 0.6, bool bias = false) {
    MultiHeadSAParams<double> p;
    for (int i = 0; i < A; i++) {
        p.W_Q.push_back(randn(H, D, rng, scale));
        p.W_K.push_back(randn(H, D, rng, scale));
        p.W_V.push_back(randn(H, D, rng, scale));
    }
    p.W_O = randn(A * D, H, rng, scale);
    if (bias) {
        for (int i = 0; i < A; i++) {
            p.b_Q.push_back(randn_vec(D, rng, 0.5));
            p.b_K.push_back(randn_vec(D, rng, 0.5));
            p.b_V.push_back(randn_vec(D, rng, 0.5));
        }
        p.b_O = randn_vec(H, rng, 0.5);
    }
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
    for (std::size_t i = 0; i < p.b_Q.size(); i++) {
        g.b_Q.push_back(TD(p.b_Q[i].shape));
        g.b_K.push_back(TD(p.b_K[i].shape));
        g.b_V.push_back(TD(p.b_V[i].shape));
    }
    if (!p.b_O.empty()) g.b_O = TD(p.b_O.shape);
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

const Activation kAllActivations[] = {Activation::relu, Activation::gelu_sigmoid, Activation::gelu_tanh,
                                      Activation::gelu_erf};
const Activation kGelus[] = {Activation::gelu_sigmoid, Activation::gelu_tanh, Activation::gelu_erf};

}  // namespace

// ================================================================================================
// Helpers of the model, file and command tests (m_*): the program under test, a scratch
// directory, tiny models and batches, whole-model gradient checks, tokenizer files
// ================================================================================================
#include <cctype>
#include <cerrno>
#include <csignal>
#include <limits>
#include <type_traits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

// The system's directory for temporary files (tf::temporary_directory(): $TMPDIR, else /tmp on
// POSIX), with '/' between names and no '/' at the end.
std::string m_temp_root() {
    std::string root = m_ON_WINDOWS ? m_short_path(temporary_directory()) : temporary_directory();
    if (m_ON_WINDOWS) std::replace(root.begin(), root.end(), '\\', '/');
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    return root;
}
// Scratch directories tfm_tests_PID of test runs that were killed (their PID no longer runs):
// removed, so a killed run does not leave its files behind for good.
void m_remove_stale_dirs(const std::string& root) {
    std::vector<std::string> names;
    if (!directory_entries(root, names)) return;
    for (const std::string& name : names) {
        if (name.rfind("tfm_tests_", 0) != 0) continue;
        const std::string digits = name.substr(10);
        if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
        const long long pid = std::stoll(digits);
        if (pid == process_id() || !m_process_gone(pid)) continue;
        std::error_code ec;
        std::filesystem::remove_all(root + "/" + name, ec);
        if (ec) std::fprintf(stderr, "could not remove the stale test directory %s/%s: %s\n", root.c_str(), name.c_str(), ec.message().c_str());
    }
}
// A scratch directory for this process in the system's temporary directory, removed at exit.
const std::string& m_dir() {
    static const std::string d = [] {
        m_remove_stale_dirs(m_temp_root());
        const std::string s = m_temp_root() + "/tfm_tests_" + std::to_string(process_id());
        std::error_code ec;
        std::filesystem::create_directory(s, ec);
        std::atexit([] {
            std::error_code gone;
            std::filesystem::remove_all(m_temp_root() + "/tfm_tests_" + std::to_string(process_id()), gone);
            if (gone) std::fprintf(stderr, "could not remove the test directory: %s\n", gone.message().c_str());
        });
        return s;
    }();
    return d;
}
std::string m_path(const std::string& name) { return m_dir() + "/" + name; }
// A directory at path and the directories above it that are missing (mkdir -p); false when it
// could not be made.
bool m_make_dir(const std::string& path) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    return !ec;
}

void m_write(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), (std::streamsize)bytes.size());
}
std::string m_read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream o;
    o << f.rdbuf();
    return o.str();
}
bool m_exists(const std::string& path) { return path_kind(path) != PathKind::missing; }
// The working directory, with '/' between names.
std::string m_cwd() { return std::filesystem::current_path().generic_string(); }
bool m_contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The message of what f throws: "tf::Error: ..." for tf::Error, something else otherwise.
template <class F>
std::string m_error_of(F&& f) {
    try {
        f();
    } catch (const tf::Error& e) {
        return std::string("tf::Error: ") + e.what();
    } catch (const std::exception& e) {
        return std::string("<not a tf::Error> ") + e.what();
    } catch (...) {
        return "<unknown exception>";
    }
    return "<no exception>";
}
// expr must throw a tf::Error whose message contains every given string.
#define M_CHECK_TF_ERROR(expr, ...)                                                         \
    do {                                                                                    \
        const std::string m_msg_ = m_error_of([&] { (void)(expr); });                       \
        INFO("expression: " #expr);                                                         \
        INFO("message: " << m_msg_);                                                        \
        CHECK(m_msg_.rfind("tf::Error: ", 0) == 0);                                         \
        for (const std::string& m_part_ : std::vector<std::string>{__VA_ARGS__})            \
            CHECK_MESSAGE(message_names(m_msg_, m_part_), "message lacks '" << m_part_ << "'");      \
    } while (0)

template <typename T>
bool m_bits_equal(const Tensor<T>& a, const Tensor<T>& b) {
    return a.shape == b.shape && a.data.size() == b.data.size() &&
           (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(T)) == 0);
}
template <typename T>
bool m_row_bits_equal(const Tensor<T>& a, const Tensor<T>& b, int i) {
    return std::memcmp(a.row(i), b.row(i), sizeof(T) * (std::size_t)a.cols()) == 0;
}
template <typename T>
bool m_params_bits_equal(const Config& c, Params<T>& a, Params<T>& b) {
    auto A = named_tensors(c, a), B = named_tensors(c, b);
    if (A.size() != B.size()) return false;
    for (std::size_t k = 0; k < A.size(); k++)
        if (A[k].name != B[k].name || !m_bits_equal(*A[k].tensor, *B[k].tensor)) return false;
    return true;
}
// The largest |a - b / d| over every parameter of the two (NaN-aware: a NaN anywhere is the result).
template <typename T>
double m_params_max_diff(const Config& c, Params<T>& a, Params<T>& b, double d = 1) {
    auto A = named_tensors(c, a), B = named_tensors(c, b);
    REQUIRE(A.size() == B.size());
    double m = 0;
    for (std::size_t k = 0; k < A.size(); k++) {
        REQUIRE(A[k].tensor->size() == B[k].tensor->size());
        for (std::size_t i = 0; i < A[k].tensor->size(); i++)
            m = nan_max(m, std::fabs((double)A[k].tensor->data[i] - (double)B[k].tensor->data[i] / d));
    }
    return m;
}

// init_params plus noise of the given size, so LayerNorm gains, biases, ... are not trivial.
template <typename T>
Params<T> m_model(const Config& c, uint64_t seed, double noise) {
    Params<T> p = make_params<T>(c);
    init_params(c, p, seed);
    Rng r(seed * 7919 + 17);
    for (auto& nt : named_tensors(c, p))
        for (auto& v : nt.tensor->data) v += T(noise * r.normal());
    return p;
}

// The ordinary (non-special) token ids of a tiny preset: 0..9 (BERT/RoBERTa use 10, 11, 12).
std::vector<int> m_random_ids(int count, int below, Rng& r) {
    std::vector<int> x(count);
    for (int& v : x) v = r.below(below);
    return x;
}

// A batch of B = 2, n = 6 for the variant: GPT next-token targets; BERT ([CLS] .. [SEP] .. [SEP])
// with segments and masked positions; RoBERTa the same without segments.
Batch m_batch(const Config& c, uint64_t seed) {
    Rng r(seed);
    Batch b;
    b.B = 2, b.n = 6;
    b.tokens = m_random_ids(b.B * b.n, 10, r);
    if (is_causal(c.variant)) {
        b.targets = next_token_targets(b.tokens, b.B, b.n);
        return b;
    }
    b.targets.assign(b.tokens.size(), -1);
    for (int s = 0; s < b.B; s++) {
        int* x = &b.tokens[s * b.n];
        x[0] = c.cls_id, x[3] = c.sep_id, x[5] = c.sep_id;
        const int masked[2] = {s == 0 ? 1 : 2, 4};
        for (int j : masked) b.targets[s * b.n + j] = x[j], x[j] = c.mask_id;
        if (has_segments(c.variant))
            for (int i = 0; i < b.n; i++) b.segments.push_back(i <= 3 ? 0 : 1);
    }
    return b;
}

// ---- Whole-model gradient checks, and where a wrong one goes wrong --------------------------------
// The parameter group of a tensor in a failure's summary: its layer, or the tensor itself.
std::string m_group_of(const std::string& name) {
    if (name.rfind("layers.", 0) == 0) return "layer " + std::to_string(std::stoi(name.substr(7)) + 1);
    if (name.rfind("ln_f.", 0) == 0) return "ln_f (gamma, beta)";
    if (name.rfind("emb_ln.", 0) == 0) return "the embedding LayerNorm (emb_ln: gamma_e, beta_e)";
    if (name.rfind("mlm.", 0) == 0) return "the masked-LM head (mlm: W_t, b_t, gamma_t, beta_t, b_z)";
    if (name.rfind("pooler.", 0) == 0) return "the pooler";
    return name;
}

// A gradient against central differences (h = 1e-5) of a scalar function f of x: every entry of
// a small x (at most 400), else its largest-gradient entry and 8 random ones. An entry is right
// when |num - ana| <= 1e-6 max(1, |ana|) (the tolerance of the whole-model checks); worst is the
// largest ratio of the error to that tolerance (NaN counts as infinite).
struct m_Diff {
    double worst = 0, num = 0, ana = 0;
    std::size_t at = 0;
    std::string shape_error;  // the gradient's shape is not x's
    bool right() const { return shape_error.empty() && worst <= 1.0; }
};
m_Diff m_diff(const std::function<double()>& f, TD& x, const TD& ana, Rng& r, double h = 1e-5) {
    m_Diff d;
    if (ana.shape != x.shape) {
        d.shape_error = "its shape is " + shape_str(ana.shape) + ", expected " + shape_str(x.shape);
        return d;
    }
    const ExplainGradient g = fd_gradient(m_moved(f, x), "", "", x.shape, ana, x.size() <= 400 ? 400 : 9, r, h, 1e-6, 1);
    d.worst = g.err / 1e-6, d.at = g.at, d.num = g.num, d.ana = g.ana;
    return d;
}
// "entry (3, 2) of 12x8 (counted from 1): expected 0.12 (SOURCE), got 0.5".
std::string m_diff_text(const m_Diff& d, const std::vector<int>& shape, const std::string& source) {
    if (!d.shape_error.empty()) return d.shape_error;
    std::ostringstream s;
    s << "entry " << entry_name(shape, d.at) << " of " << shape_str(shape) << " (counted from 1): expected " << d.num
      << " (" << source << "), got " << d.ana;
    return s.str();
}

// A Trace that shows each gradient of the walk to plant first (a test's planted mistake, which may
// change it in place) and then passes every stage on to next.
struct m_Chain : Trace {
    using Trace::backward;
    using Trace::forward;
    Trace* plant = nullptr;
    Trace* next = nullptr;
    void forward(Stage s, int l, TD& v) override {
        if (next) next->forward(s, l, v);
    }
    void backward(Stage s, int l, TD& d) override {
        if (plant) plant->backward(s, l, d);
        if (next) next->backward(s, l, d);
    }
};
// Where a wrong gradient of model_loss(c, p, b) (dropout > 0: drawn from Rng(seed) afresh at every
// call) comes from: the library's stage walk (locate_backward), which observes model_loss itself
// through a Trace. plant, if given, changes the walk's gradients as a mistake would.
std::vector<std::string> m_locate_model_loss(const Config& c, Params<double>& p, const Batch& b, double dropout, uint64_t seed,
                                             Trace* plant = nullptr) {
    WalkLoss loss = [&](Params<double>* g, Trace* t) {
        Rng rng(seed);
        ForwardOptions o;
        o.dropout = dropout, o.rng = dropout > 0 ? &rng : nullptr;
        m_Chain chain;
        chain.plant = plant, chain.next = t;
        o.trace = &chain;
        return model_loss(c, p, b, g, o);
    };
    return locate_backward(c, p, b, loss, seed + 17);
}

// A wrong gradient of xlnet_loss: the functions it calls (embed_backward, blocks_backward, the
// blocks) are assignment 4's and are checked by its cases, so xlnet_loss's own joining is what is
// left; the groups that are wrong say which part (formulas §27).
std::vector<std::string> m_locate_xlnet() {
    return {"first wrong: xlnet_loss (§27): the backwards it calls are assignment 4's; which groups are wrong says which "
            "part of its own:",
            "  W_e: the predicted query rows' de-embedding (dZ^T X^(L) rows) and the content rows (embed_backward)",
            "  w and W_p: the query rows w + W_p[i] (every query row, predicted or not)",
            "  the layers: the predicted query rows' dX^(L) = dZ W_e, scattered to their rows of the 2n, into blocks_backward"};
}

// Central differences (h = 1e-5) on ~5 random entries plus the largest-gradient entry of EVERY
// parameter tensor; loss(g) computes the loss and, if g is given, the gradient into g. A failure is
// one message of at most about 40 lines: a line per parameter group (right, or its worst entry),
// then what locate (if given) finds of where the backward goes wrong.
struct m_GradReport {
    bool right = true;
    std::string text;  // a line per parameter group, then what locate found
    int checked = 0, expected = 0;
};
m_GradReport m_grad_report(const Config& c, Params<double>& p, Params<double>& g,
                           const std::function<double(Params<double>*)>& loss, uint64_t seed, const std::string& what,
                           const std::function<std::vector<std::string>()>& locate) {
    auto P = named_tensors(c, p);
    auto G = named_tensors(c, g);
    REQUIRE(P.size() == G.size());
    Rng r(seed);
    const double h = 1e-5;
    int checked = 0, expected = 0;
    double worst = 0;
    std::vector<std::string> groups;  // in named_tensors' order
    std::map<std::string, std::pair<double, std::string>> group_worst;  // ratio, its text
    for (std::size_t k = 0; k < P.size(); k++) {
        Tensor<double>& x = *P[k].tensor;
        const Tensor<double>& ana = *G[k].tensor;
        REQUIRE(ana.shape == x.shape);
        const std::string group = m_group_of(P[k].name);
        if (!group_worst.count(group)) groups.push_back(group), group_worst[group] = {0.0, ""};
        auto& gw = group_worst[group];
        std::size_t arg = 0;
        for (std::size_t j = 0; j < ana.size(); j++)
            if (std::fabs(ana[j]) > std::fabs(ana[arg])) arg = j;
        // Every tensor really receives a gradient, but a key bias: it adds q_i . b^K to the whole
        // score row i, which the softmax ignores, so its gradient is 0 (checked numerically below).
        if (P[k].name.find(".b_K.") == std::string::npos && !(std::fabs(ana[arg]) > 1e-7) && gw.first <= 1.0) {
            std::ostringstream s;
            s << P[k].name << " " << shape_str(x.shape) << ": the backward's gradient is (nearly) all zero, largest entry "
              << ana[arg] << " (nothing written to it?)";
            gw = {INF, s.str()};
        }
        expected += (int)std::min<std::size_t>(5, x.size());
        // The largest-gradient entry and 5 drawn (every entry of a small vector: a tiny model's biases),
        // by the library's one sampler.
        auto L = [&] { return loss(nullptr); };
        const ExplainGradient eg = fd_gradient(m_moved(L, x), P[k].name, "", x.shape, ana, x.size() <= 8 ? 8 : 6, r, h, 1e-6, 1);
        for (std::size_t e = 0; e < eg.compared.size(); e++) {
            const std::size_t j = eg.compared[e];
            const double num = eg.nums[e];
            const double ratio = std::fabs(num - ana[j]) / (1e-6 * std::max(1.0, std::fabs(ana[j])));
            if (!(ratio <= gw.first)) {
                std::ostringstream s;
                if (P[k].name != group) s << P[k].name << ", ";
                s << "entry " << entry_name(x.shape, j) << " of " << shape_str(x.shape) << ": expected " << num
                  << " (central finite difference of the loss, h = 1e-5), got " << ana[j];
                gw = {std::isnan(ratio) ? INF : ratio, s.str()};
            }
            if (!(ratio <= worst)) worst = std::isnan(ratio) ? INF : ratio;
            checked++;
        }
    }
    std::ostringstream report;
    int wrong = 0;
    for (const std::string& group : groups) wrong += !(group_worst[group].first <= 1.0);
    // The most telling lines first: where the walk finds the first wrong gradient, then the groups,
    // then the walk's stages found right above it.
    std::vector<std::string> walk;
    if (wrong > 0 && locate) {
        try {
            walk = locate();
        } catch (const std::exception& e) {
            walk = {std::string("(not localised: ") + e.what() + ")"};
        }
    }
    std::size_t first = 0;
    while (first < walk.size() && walk[first].rfind("first wrong", 0) != 0) first++;
    for (std::size_t k = first; k < walk.size(); k++) report << walk[k] << "\n";
    report << what << ": the gradient of " << wrong << " of " << groups.size()
           << " parameter groups disagrees with central finite differences of the loss (allowed: 1e-6 max(1, |gradient|))\n";
    for (const std::string& group : groups) {
        const auto& gw = group_worst[group];
        if (gw.first <= 1.0) report << "  right  " << group << "\n";
        else report << "  WRONG  " << group << ": " << gw.second << "\n";
    }
    for (std::size_t k = 0; k < first && k < walk.size(); k++) report << walk[k] << "\n";
    return {worst <= 1.0, report.str(), checked, expected};
}
bool m_grad_check(const Config& c, Params<double>& p, const std::function<double(Params<double>*)>& loss,
                  uint64_t seed, const std::string& what, const std::function<std::vector<std::string>()>& locate = {}) {
    Params<double> g = make_params<double>(c);
    const double L0 = loss(&g);
    {
        INFO(what << ": the loss with a gradient is " << L0);
        REQUIRE(std::isfinite(L0));
        CHECK_MESSAGE(loss(nullptr) == L0, what << ": the loss without a gradient must be the same number, got "
                                                << loss(nullptr));
    }
    const m_GradReport r = m_grad_report(c, p, g, loss, seed, what, locate);
    CHECK_MESSAGE(r.right, r.text);
    CHECK_MESSAGE(r.checked >= r.expected, what << ": only " << r.checked << " entries checked, expected at least " << r.expected);
    return r.right;
}

// model_loss's whole gradient for a batch, with the localisation of a wrong one.
bool m_model_loss_grad_check(const Config& c, Params<double>& p, const Batch& b, uint64_t seed, const std::string& what,
                             double dropout = 0, uint64_t rng_seed = 0) {
    auto loss = [&](Params<double>* g) {
        Rng rng(rng_seed);
        ForwardOptions o;
        o.dropout = dropout, o.rng = dropout > 0 ? &rng : nullptr;
        return model_loss(c, p, b, g, o);
    };
    return m_grad_check(c, p, loss, seed, what, [&] { return m_locate_model_loss(c, p, b, dropout, rng_seed); });
}

void m_model_grad_check(const std::string& preset_name, uint64_t seed, bool attn_bias = false) {
    Config c = preset(preset_name);
    c.attn_bias = attn_bias;
    Params<double> p = m_model<double>(c, seed, 0.2);
    const Batch b = m_batch(c, seed + 1);
    m_model_loss_grad_check(c, p, b, seed + 2,
                            "model_loss's backward (" + preset_name + (attn_bias ? ", attn_bias" : "") + ", B = 2, n = 6)");
}

// With dropout: a re-seeded generator gives the same masks, hence the same loss, every time.
// Returns whether the gradient is right.
bool m_model_grad_check_dropout(const std::string& preset_name, uint64_t seed) {
    const Config c = preset(preset_name);
    Params<double> p = m_model<double>(c, seed, 0.2);
    const Batch b = m_batch(c, seed + 1);
    auto loss = [&](Params<double>* g) {
        Rng rng(seed + 3);
        ForwardOptions o;
        o.dropout = 0.3, o.rng = &rng;
        return model_loss(c, p, b, g, o);
    };
    const double l1 = loss(nullptr), l2 = loss(nullptr), l0 = model_loss(c, p, b);
    CHECK_MESSAGE(l1 == l2, preset_name << ": model_loss with dropout 0.3 and a re-seeded generator must repeat: " << l1
                                        << " then " << l2);
    CHECK_MESSAGE(l1 != l0, preset_name << ": model_loss with dropout 0.3 (" << l1 << ") must differ from without (" << l0
                                        << ")");  // dropout does something
    return m_model_loss_grad_check(c, p, b, seed + 2,
                                   "model_loss's backward (" + preset_name + ", B = 2, n = 6, dropout 0.3)", 0.3, seed + 3);
}

// Changing token x_k: causal models keep rows < k bit-identical and change row k; bidirectional
// models change the earlier rows too.
void m_check_causality(const std::string& preset_name) {
    const Config c = preset(preset_name);
    const Params<double> p = m_model<double>(c, 11, 0.2);
    Rng r(5);
    Batch b;
    b.n = 10;
    b.tokens = m_random_ids(b.n, 10, r);
    const Tensor<double> Z0 = model_forward(c, p, b);
    for (int k : {1, 4, 9}) {
        Batch b2 = b;
        b2.tokens[k] = (b.tokens[k] + 1) % 10;
        const Tensor<double> Z1 = model_forward(c, p, b2);
        INFO(preset_name << ": changed x_" << k);
        CHECK_FALSE(m_row_bits_equal(Z0, Z1, k));
        for (int i = 0; i < k; i++) {
            INFO("row " << i);
            if (is_causal(c.variant)) CHECK(m_row_bits_equal(Z0, Z1, i));
            else CHECK_FALSE(m_row_bits_equal(Z0, Z1, i));
        }
    }
}

// ---- the command-line program ------------------------------------------------------------------
struct m_Run {
    bool exited = false;  // ended by exit(), not by a signal
    int status = -1;
    std::string out, err;
};
// The shell command cmd run with its output in base.out and its errors in base.err: its exit and
// both outputs. Only for what needs a shell (a case that calls it skips on Windows).
m_Run m_run_to(const std::string& cmd, const std::string& base) {
    const int st = std::system((cmd + " > " + base + ".out 2> " + base + ".err").c_str());
    m_Run r;
    r.status = m_system_status(st);
    r.exited = r.status != -1;
    r.out = m_read(base + ".out");
    r.err = m_read(base + ".err");
    return r;
}
// The program argv[0] with the arguments argv[1..], started without a shell (m_start_argv), its
// output in base.out and its errors in base.err, its input from the file in ("": none): its exit and
// both outputs.
m_Run m_capture(const std::vector<std::string>& argv, const std::string& base, const std::string& in = "") {
    const m_Exit e = m_run_argv(argv, base + ".out", base + ".err", in);
    m_Run r;
    r.exited = e.exited;
    r.status = e.exited ? e.status : -1;
    r.out = m_read(base + ".out");
    r.err = m_read(base + ".err");
    return r;
}
// The words of a command line written as for a POSIX shell: split at spaces, tabs and newlines,
// '...' taken as it is, "..." with \" and \\ inside, a backslash outside quotes taking the next
// character. No shell reads it: a character the shell would act on (| & ; < > ( ) $ ` * ?) outside
// quotes fails the case.
std::vector<std::string> m_words(const std::string& line) {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    for (std::size_t k = 0; k < line.size(); k++) {
        const char ch = line[k];
        if (ch == ' ' || ch == '\t' || ch == '\n') {
            if (in_word) words.push_back(word);
            word.clear();
            in_word = false;
            continue;
        }
        in_word = true;
        if (ch == '\'') {
            const std::size_t end = line.find('\'', k + 1);
            REQUIRE_MESSAGE(end != std::string::npos, "m_words: an unclosed ' in: " << line);
            word += line.substr(k + 1, end - k - 1);
            k = end;
        } else if (ch == '"') {
            for (k++; k < line.size() && line[k] != '"'; k++) {
                REQUIRE_MESSAGE((line[k] != '$' && line[k] != '`'),
                                "m_words: '" << line[k] << "' inside \"...\" asks for a shell, which no case's program gets: " << line);
                if (line[k] == '\\' && k + 1 < line.size() && (line[k + 1] == '"' || line[k + 1] == '\\')) k++;
                word += line[k];
            }
            REQUIRE_MESSAGE(k < line.size(), "m_words: an unclosed \" in: " << line);
        } else if (ch == '\\' && k + 1 < line.size()) {
            word += line[++k];
        } else {
            REQUIRE_MESSAGE(std::strchr("|&;<>()$`*?", ch) == nullptr,
                            "m_words: '" << ch << "' outside quotes asks for a shell, which no case's program gets: " << line);
            word += ch;
        }
    }
    if (in_word) words.push_back(word);
    return words;
}
// PROGRAM ARGS, started without a shell: its exit and both outputs.
m_Run m_run_program(const std::string& program, const std::vector<std::string>& args) {
    static int counter = 0;
    std::vector<std::string> argv = {program};
    argv.insert(argv.end(), args.begin(), args.end());
    return m_capture(argv, m_path("run" + std::to_string(counter++)));
}
// The program under test with the arguments args (a vector, or a line split by m_words).
m_Run m_run(const std::vector<std::string>& args) { return m_run_program(m_PROGRAM, args); }
m_Run m_run(const std::string& args) { return m_run(m_words(args)); }
// The command must fail cleanly: exit status exactly 1 (no signal, no abort) and stderr starting
// with "error:" and containing `part`.
void m_cli_fails(const std::vector<std::string>& args, const std::string& part) {
    const m_Run r = m_run(args);
    std::string line;
    for (const std::string& arg : args) line += " " + arg;
    INFO("command: transformer" << line);
    INFO("stdout: " << r.out);
    INFO("stderr: " << r.err);
    CHECK(r.exited);
    CHECK(r.status == 1);
    CHECK(r.err.rfind("error:", 0) == 0);
    CHECK_MESSAGE(m_contains(r.err, part), "stderr lacks '" << part << "'");
}
void m_cli_fails(const std::string& args, const std::string& part) { m_cli_fails(m_words(args), part); }
// The make that the cases which build run: the caller's make's flags and level unset, quiet, and
// without "Entering directory" lines.
const std::string m_MAKE = "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory";
// Runs cmd in the shell with its output and errors in the file log; its exit status (-1 when it
// did not exit).
int m_sh(const std::string& cmd, const std::string& log) {
    return m_system_status(std::system(("(" + cmd + ") > " + log + " 2>&1").c_str()));
}
// Whether s starts with prefix.
bool m_starts(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
// Requires every file of files to exist, else fails with why and the file missing.
void m_require_files(std::initializer_list<const char*> files, const std::string& why) {
    for (const char* f : files)
        REQUIRE_MESSAGE(m_exists(f), why << ": no " << f);
}
// The C++ compiler the cases that build use: $CXX when set, else g++.
std::string m_cxx() {
    const char* env_cxx = std::getenv("CXX");
    return env_cxx && *env_cxx ? env_cxx : "g++";
}

// What `run` writes to standard error (file descriptor 2), captured instead of shown: a case that
// provokes a warning checks it rather than printing it into the suite's output.
std::string m_stderr_of(const std::function<void()>& run) {
    const std::string path = m_path("stderr" + std::to_string(process_id()) + ".txt");
    const int saved = m_stderr_to(path);
    try {
        run();
    } catch (...) {
        m_stderr_restore(saved);
        throw;
    }
    m_stderr_restore(saved);
    return m_read(path);
}

// The number a command's help gives as --flag's default ("(default: N...)"); the case fails when
// the help has no such line.
double m_help_default(const std::string& help, const std::string& flag) {
    const std::size_t at = help.find("  --" + flag + " ");
    REQUIRE_MESSAGE(at != std::string::npos, "the help lists no --" << flag);
    const std::string line = help.substr(at, help.find('\n', at) - at);
    const std::size_t d = line.find("(default: ");
    REQUIRE_MESSAGE(d != std::string::npos, "the help gives no default for --" << flag << ": " << line);
    return std::strtod(line.c_str() + d + 10, nullptr);
}

// A small text file for training runs (~2 KB, a few dozen distinct characters).
std::string m_text_file() {
    const std::string path = m_path("corpus.txt");
    if (!m_exists(path)) {
        std::string text;
        for (int k = 0; k < 40; k++) text += "the quick brown fox jumps over the lazy dog; abc abd abe.\n";
        m_write(path, text);
    }
    return path;
}

TrainOptions m_small_train(const std::string& out) {
    TrainOptions o;
    o.data = m_text_file();
    o.model = "gpt2";
    o.layers = 1, o.heads = 2, o.embd = 16, o.block = 16, o.batch = 8;
    o.steps = 60, o.warmup = 5, o.eval_every = 0, o.eval_steps = 2;
    o.lr = 1e-2, o.min_lr = 1e-3;
    o.quiet = true;
    o.out = out;
    return o;
}

// Bytes of a safetensors file: 8-byte little-endian header size, the header, the body.
std::string m_st_bytes(const std::string& header, const std::string& body = "") {
    std::string out;
    const uint64_t n = header.size();
    for (int k = 0; k < 8; k++) out += (char)((n >> (8 * k)) & 0xFF);
    return out + header + body;
}

const char* const m_TINY[] = {"tiny-gpt", "tiny-gpt2", "tiny-gpt3", "tiny-bert", "tiny-roberta"};
// Runs body on each tiny preset (captured by name) with its model m_model<T>(c, model_seed, noise)
// and its batch m_batch(c, batch_seed).
template <typename T>
void m_each_tiny(uint64_t model_seed, double noise, uint64_t batch_seed,
                 const std::function<void(const Config&, const Params<T>&, const Batch&)>& body) {
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        const Config c = preset(name);
        const Params<T> p = m_model<T>(c, model_seed, noise);
        const Batch b = m_batch(c, batch_seed);
        body(c, p, b);
    }
}

}  // namespace

namespace {
// encoder.json with the 256 byte symbols as ids 0..255 (in byte order), then `merged` tokens as
// 256, 257, ...; vocab.bpe with the given merges in rank order.
std::string m_encoder_json(const std::vector<std::string>& merged) {
    std::string j = "{";
    for (int b = 0; b < 256; b++) j += (b ? ", " : "") + json_escape(bytes_to_unicode((unsigned char)b)) + ": " + std::to_string(b);
    for (std::size_t k = 0; k < merged.size(); k++) j += ", " + json_escape(merged[k]) + ": " + std::to_string(256 + k);
    return j + "}";
}
std::string m_vocab_bpe(const std::vector<std::string>& merges) {
    std::string v = "#version: 0.2\n";
    for (auto& m : merges) v += m + "\n";
    return v;
}
const std::string m_G = bytes_to_unicode(' ');  // "Ġ"
BPE m_small_bpe() {
    return make_bpe(m_encoder_json({"he", "ll", "hell", m_G + "hell", "<|endoftext|>"}),
                    m_vocab_bpe({"h e", "l l", "he ll", m_G + " hell"}));
}
}  // namespace

namespace {

// The init-from options: the model's shape from the file (0 / "" as main.cpp passes them).
TrainOptions m11_init_from(const std::string& from, const std::string& out) {
    TrainOptions o = m_small_train(out);
    o.init_from = from;
    o.model = "", o.layers = 0, o.heads = 0, o.embd = 0, o.ffn = 0;
    o.steps = 5, o.eval_steps = 3;
    return o;
}

// A hand-made byte-level BPE: the 256 byte symbols (id = byte), then "Ġt" (256), "he" (257),
// "Ġthe" (258), "<|endoftext|>" (259); three merges.
void m11_write_bpe(const std::string& enc_path, const std::string& merges_path) {
    std::string enc = "{";
    for (int b = 0; b < 256; b++) enc += json_escape(bytes_to_unicode((unsigned char)b)) + ": " + std::to_string(b) + ", ";
    enc += "\"\\u0120t\": 256, \"he\": 257, \"\\u0120the\": 258, \"<|endoftext|>\": 259}";
    m_write(enc_path, enc);
    m_write(merges_path, "#version: 0.2\n\xC4\xA0 t\nh e\n\xC4\xA0t he\n");
}

// A HF-layout file without our metadata (as released): the export's tensors, saved again bare.
void m11_strip_metadata(const std::string& from, const std::string& to) {
    const SafeTensors st = load_safetensors(from);
    std::vector<std::pair<std::string, const Tensor<float>*>> list;
    for (auto& kv : st.tensors) list.push_back({kv.first, &kv.second});
    save_safetensors(to, {}, list);
}

}  // namespace

// ---- Fixtures the sections share ----------------------------------------------------------------
// Tokenizers on hand-made vocabularies, explain's batch, the panels of an SVG, the commands, a
// program started in the background.
namespace {
// tiny-bert (or tiny-roberta) with the released BERT's additions switched on.
Config m_released_bert(const std::string& preset_name, bool pooler) {
    Config c = preset(preset_name);
    c.attn_bias = true, c.emb_ln = true, c.mlm_head = true, c.pooler = pooler;
    c.activation = Activation::gelu_erf;
    return c;
}
}  // namespace

// A command that must succeed; on failure its stderr is the message (in a handout it names the
// function to implement).
m_Run m_run_ok(const std::string& args) {
    const m_Run r = m_run(args);
    REQUIRE_MESSAGE(r.status == 0, "transformer " << args << "\nstderr: " << r.err);
    return r;
}

// Every name in directory `dir` that starts with `prefix` (to find stray temporaries).
std::vector<std::string> m_names_in(const std::string& dir, const std::string& prefix) {
    std::vector<std::string> names, out;
    REQUIRE_MESSAGE(directory_entries(dir, names), "cannot list the directory " << dir);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names)
        if (name.rfind(prefix, 0) == 0) out.push_back(name);
    return out;
}

namespace {
// The query, key and value weights and biases of layer y packed as GPT-2's and GPT-1's c_attn
// (Conv1D: in x out): W = [W_Q^1..W_Q^A | W_K^1.. | W_V^1..] (H x 3H), b likewise.
void m_pack_c_attn(const Config& c, const Layer<float>& y, Tensor<float>& W, Tensor<float>& b) {
    const int H = c.H, D = c.D;
    W = Tensor<float>(H, 3 * H);
    b = Tensor<float>({3 * H});
    for (int i = 0; i < c.A; i++) {
        const Tensor<float>* Wi[3] = {&y.attn.W_Q[i], &y.attn.W_K[i], &y.attn.W_V[i]};
        const Tensor<float>* bi[3] = {&y.attn.b_Q[i], &y.attn.b_K[i], &y.attn.b_V[i]};
        for (int part = 0; part < 3; part++)
            for (int d = 0; d < D; d++) {
                for (int r = 0; r < H; r++) W(r, part * H + i * D + d) = (*Wi[part])(r, d);
                b[part * H + i * D + d] = (*bi[part])[d];
            }
    }
}
// The tensors of c/p under GPT-2's names: c_attn = [W_Q^1..W_Q^A | W_K^1.. | W_V^1..] and so on.
std::vector<std::pair<std::string, Tensor<float>>> m_hf_tensors(const Config& c, const Params<float>& p,
                                                                const std::string& prefix = "") {
    std::vector<std::pair<std::string, Tensor<float>>> t;
    t.push_back({prefix + "wte.weight", p.W_e});
    t.push_back({prefix + "wpe.weight", p.W_p});
    for (int l = 0; l < c.L; l++) {
        const Layer<float>& y = p.layers[l];
        const std::string h = prefix + "h." + std::to_string(l) + ".";
        Tensor<float> W, b;
        m_pack_c_attn(c, y, W, b);
        t.push_back({h + "ln_1.weight", y.ln_1_gamma});
        t.push_back({h + "ln_1.bias", y.ln_1_beta});
        t.push_back({h + "attn.c_attn.weight", W});
        t.push_back({h + "attn.c_attn.bias", b});
        t.push_back({h + "attn.c_proj.weight", y.attn.W_O});
        t.push_back({h + "attn.c_proj.bias", y.attn.b_O});
        t.push_back({h + "ln_2.weight", y.ln_2_gamma});
        t.push_back({h + "ln_2.bias", y.ln_2_beta});
        t.push_back({h + "mlp.c_fc.weight", y.ffn.W_1});
        t.push_back({h + "mlp.c_fc.bias", y.ffn.b_1});
        t.push_back({h + "mlp.c_proj.weight", y.ffn.W_2});
        t.push_back({h + "mlp.c_proj.bias", y.ffn.b_2});
        t.push_back({h + "attn.bias", Tensor<float>({1, 1, c.n_ctx, c.n_ctx}, 1.f)});  // a mask buffer
    }
    t.push_back({prefix + "ln_f.weight", p.ln_f_gamma});
    t.push_back({prefix + "ln_f.bias", p.ln_f_beta});
    return t;
}
void m_write_hf(const std::string& path, const std::vector<std::pair<std::string, Tensor<float>>>& t) {
    std::vector<std::pair<std::string, const Tensor<float>*>> list;
    for (auto& kv : t) list.push_back({kv.first, &kv.second});
    save_safetensors(path, {{"format", "pt"}}, list);
}
Config m_hf_config(int V) {  // a small GPT-2 as released: gelu_tanh, attention biases, 3 heads
    Config c = preset("tiny-gpt2");
    c.V = V, c.H = 12, c.A = 3, c.D = 4, c.F = 20, c.L = 2, c.n_ctx = 16;
    c.activation = Activation::gelu_tanh, c.attn_bias = true;
    return c;
}
// A released model's configuration c in small and its model m_model<float>(c, seed, 0.5), as the
// weights cases use them.
std::pair<Config, Params<float>> m_hf_model(const Config& c, uint64_t seed) { return {c, m_model<float>(c, seed, 0.5)}; }
// Checks a GPT-2 or GPT-1 of 13 tokens as released in small (m_hf_config, m_gpt1_hf_config), made
// from c and p and loaded as lm: its variant, gelu_tanh and attention biases, its sizes and eps,
// every number of p and hence the same logits.
void m_check_hf_gpt_loaded(LoadedModel& lm, Variant variant, const Config& c, const Params<float>& p) {
    const Config& d = lm.config;
    CHECK(d.variant == variant);
    CHECK(d.activation == Activation::gelu_tanh);
    CHECK(d.attn_bias);
    CHECK(d.V == 13);
    CHECK(d.H == 12);
    CHECK(d.A == 3);
    CHECK(d.D == 4);
    CHECK(d.F == 20);
    CHECK(d.L == 2);
    CHECK(d.n_ctx == 16);
    CHECK(d.eps == 1e-5);
    Params<float> q = p;
    CHECK(m_params_bits_equal(c, q, lm.params));
    Batch b;
    b.n = 6, b.tokens = {1, 5, 2, 12, 0, 7};
    CHECK(m_bits_equal(model_forward(d, lm.params, b), model_forward(c, p, b)));
}
}  // namespace

namespace {
// A safetensors file written byte by byte: (name, dtype, shape, raw little-endian bytes).
struct m_RawTensor {
    std::string name, dtype;
    std::vector<int> shape;
    std::string bytes;
};
m_RawTensor m_raw(const std::string& name, const Tensor<float>& t) {
    return {name, "F32", t.shape, std::string(reinterpret_cast<const char*>(t.ptr()), t.size() * 4)};
}
void m_write_raw(const std::string& path, const std::vector<m_RawTensor>& ts) {
    std::string header = "{\"__metadata__\":{\"format\":\"pt\"}", body;
    for (auto& t : ts) {
        std::string shape;
        for (std::size_t k = 0; k < t.shape.size(); k++) shape += (k ? "," : "") + std::to_string(t.shape[k]);
        header += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
                  std::to_string(body.size()) + "," + std::to_string(body.size() + t.bytes.size()) + "]}";
        body += t.bytes;
    }
    m_write(path, m_st_bytes(header + "}", body));
}
std::string m_mkdir(const std::string& name) {
    REQUIRE(m_make_dir(m_path(name)));
    return m_path(name) + "/";
}
// Makes the directory name in the scratch directory with a config.json holding config_json; its
// path, with a "/" after it.
std::string m_hf_dir(const std::string& name, const std::string& config_json) {
    const std::string dir = m_mkdir(name);
    m_write(dir + "config.json", config_json);
    return dir;
}
// Writes the tensors t, changed by change, to path and checks that load_model(path) then fails
// naming every one of parts.
void m_check_raw_error(const std::string& path, std::vector<m_RawTensor> t, const std::function<void(std::vector<m_RawTensor>&)>& change,
                       const std::vector<std::string>& parts) {
    change(t);
    m_write_raw(path, t);
    M_CHECK_TF_ERROR(load_model(path), parts);
}
// For each (config.json text, parts) of cases: writes the text to dir/config.json and checks that
// load_model(path) then fails naming every one of parts.
void m_check_config_errors(const std::string& dir, const std::string& path,
                           const std::vector<std::pair<std::string, std::vector<std::string>>>& cases) {
    for (const auto& k : cases) {
        CAPTURE(k.first);
        m_write(dir + "config.json", k.first);
        M_CHECK_TF_ERROR(load_model(path), k.second);
    }
}
Config m_gpt1_hf_config() {  // GPT-1 as released in small: post-LN, gelu_tanh, attention biases, 3 heads
    Config c = preset("tiny-gpt");
    c.V = 13, c.H = 12, c.A = 3, c.D = 4, c.F = 20, c.L = 2, c.n_ctx = 16;
    c.activation = Activation::gelu_tanh, c.attn_bias = true;
    return c;
}
// The tensors of a gpt model under Hugging Face's OpenAIGPTModel names (Conv1D: in x out).
std::vector<m_RawTensor> m_gpt1_hf(const Config& c, const Params<float>& p, const std::string& prefix) {
    std::vector<m_RawTensor> t = {m_raw(prefix + "tokens_embed.weight", p.W_e), m_raw(prefix + "positions_embed.weight", p.W_p)};
    for (int l = 0; l < c.L; l++) {
        const Layer<float>& y = p.layers[l];
        const std::string h = prefix + "h." + std::to_string(l) + ".";
        Tensor<float> W, b;
        m_pack_c_attn(c, y, W, b);
        for (auto& kv : std::vector<std::pair<std::string, const Tensor<float>*>>{
                 {"attn.c_attn.weight", &W}, {"attn.c_attn.bias", &b}, {"attn.c_proj.weight", &y.attn.W_O},
                 {"attn.c_proj.bias", &y.attn.b_O}, {"ln_1.weight", &y.ln_1_gamma}, {"ln_1.bias", &y.ln_1_beta},
                 {"mlp.c_fc.weight", &y.ffn.W_1}, {"mlp.c_fc.bias", &y.ffn.b_1}, {"mlp.c_proj.weight", &y.ffn.W_2},
                 {"mlp.c_proj.bias", &y.ffn.b_2}, {"ln_2.weight", &y.ln_2_gamma}, {"ln_2.bias", &y.ln_2_beta}})
            t.push_back(m_raw(h + kv.first, *kv.second));
    }
    return t;
}
Config m_bert_hf_config() {  // BERT as released in small: tiny-bert with attention biases and the additions
    Config c = m_released_bert("tiny-bert", true);
    c.A = 2, c.D = 4, c.H = 8, c.F = 16, c.L = 2, c.n_ctx = 16, c.V = 13;
    return c;
}
const std::string m_BERT_VOCAB = "[UNK]\nt1\nt2\nt3\nt4\nt5\nt6\nt7\nt8\nt9\n[CLS]\n[SEP]\n[MASK]\n";
// The tensors of a bert model under Hugging Face's BertForPreTraining names (Linear: out x in).
std::vector<m_RawTensor> m_bert_hf(const Config& c, const Params<float>& p, bool legacy_ln) {
    const std::string g = legacy_ln ? "gamma" : "weight", be = legacy_ln ? "beta" : "bias";
    Tensor<float> tt(2, c.H);
    std::copy(p.w_A.data.begin(), p.w_A.data.end(), tt.row(0));
    std::copy(p.w_B.data.begin(), p.w_B.data.end(), tt.row(1));
    std::vector<m_RawTensor> t = {m_raw("bert.embeddings.word_embeddings.weight", p.W_e),
                                  m_raw("bert.embeddings.position_embeddings.weight", p.W_p),
                                  m_raw("bert.embeddings.token_type_embeddings.weight", tt),
                                  m_raw("bert.embeddings.LayerNorm." + g, p.gamma_e), m_raw("bert.embeddings.LayerNorm." + be, p.beta_e)};
    for (int l = 0; l < c.L; l++) {
        const Layer<float>& y = p.layers[l];
        const std::string e = "bert.encoder.layer." + std::to_string(l) + ".";
        const std::vector<Tensor<float>>* Ws[3] = {&y.attn.W_Q, &y.attn.W_K, &y.attn.W_V};
        const std::vector<Tensor<float>>* bs[3] = {&y.attn.b_Q, &y.attn.b_K, &y.attn.b_V};
        const char* names[3] = {"query", "key", "value"};
        for (int part = 0; part < 3; part++) {
            Tensor<float> W(c.A * c.D, c.H), b({c.A * c.D});
            for (int i = 0; i < c.A; i++)
                for (int d = 0; d < c.D; d++) {
                    for (int r = 0; r < c.H; r++) W(i * c.D + d, r) = (*Ws[part])[i](r, d);
                    b[i * c.D + d] = (*bs[part])[i][d];
                }
            t.push_back(m_raw(e + "attention.self." + names[part] + ".weight", W));
            t.push_back(m_raw(e + "attention.self." + names[part] + ".bias", b));
        }
        t.push_back(m_raw(e + "attention.output.dense.weight", transpose(y.attn.W_O)));
        t.push_back(m_raw(e + "attention.output.dense.bias", y.attn.b_O));
        t.push_back(m_raw(e + "attention.output.LayerNorm." + g, y.ln_1_gamma));
        t.push_back(m_raw(e + "attention.output.LayerNorm." + be, y.ln_1_beta));
        t.push_back(m_raw(e + "intermediate.dense.weight", transpose(y.ffn.W_1)));
        t.push_back(m_raw(e + "intermediate.dense.bias", y.ffn.b_1));
        t.push_back(m_raw(e + "output.dense.weight", transpose(y.ffn.W_2)));
        t.push_back(m_raw(e + "output.dense.bias", y.ffn.b_2));
        t.push_back(m_raw(e + "output.LayerNorm." + g, y.ln_2_gamma));
        t.push_back(m_raw(e + "output.LayerNorm." + be, y.ln_2_beta));
    }
    t.push_back(m_raw("bert.pooler.dense.weight", transpose(p.W_pool)));
    t.push_back(m_raw("bert.pooler.dense.bias", p.b_pool));
    t.push_back(m_raw("cls.predictions.bias", p.b_z));
    t.push_back(m_raw("cls.predictions.transform.dense.weight", transpose(p.W_t)));
    t.push_back(m_raw("cls.predictions.transform.dense.bias", p.b_t));
    t.push_back(m_raw("cls.predictions.transform.LayerNorm." + g, p.gamma_t));
    t.push_back(m_raw("cls.predictions.transform.LayerNorm." + be, p.beta_t));
    return t;
}
}  // namespace

namespace {
// RoBERTa's tokenizer in small: the 256 byte symbols (ids 0..255), four merged tokens and the
// special ones (<s> 260, <pad> 261, </s> 262, <unk> 263, <mask> 264).
const std::vector<std::string> m_RB_MERGED = {"he", "ll", "hell", m_G + "hell", "<s>", "<pad>", "</s>", "<unk>", "<mask>"};
const std::vector<std::string> m_RB_MERGES = {"h e", "l l", "he ll", m_G + " hell"};
Config m_roberta_hf_config() {  // RoBERTa as released in small: tiny-roberta with attention biases and the additions
    Config c = m_released_bert("tiny-roberta", true);
    c.A = 2, c.D = 4, c.H = 8, c.F = 16, c.L = 2, c.n_ctx = 16, c.V = 265, c.eps = 1e-5;
    c.cls_id = 260, c.sep_id = 262, c.mask_id = 264;
    c.pad_id = 1;  // padding_idx: RobertaConfig's pad_token_id when config.json does not say
    return c;
}
// The tensors of a roberta model under Hugging Face's RobertaForMaskedLM names: BERT's, renamed,
// with positions numbered from padding_idx + 1 = c.pad_id + 1, row padding_idx the pads' (w_pad),
// rows before it never read, each less the one token type row tt.
std::vector<m_RawTensor> m_roberta_hf(const Config& c, const Params<float>& p, const Tensor<float>& tt, const std::string& prefix) {
    std::vector<m_RawTensor> out;
    for (m_RawTensor& t : m_bert_hf(c, p, false)) {
        const std::pair<const char*, const char*> renames[] = {
            {"cls.predictions.transform.dense.", "lm_head.dense."}, {"cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."},
            {"cls.predictions.bias", "lm_head.bias"}, {"bert.", prefix.c_str()}};
        for (const auto& r : renames)
            if (t.name.rfind(r.first, 0) == 0) {
                t.name = r.second + t.name.substr(std::strlen(r.first));
                break;
            }
        if (t.name == prefix + "embeddings.token_type_embeddings.weight") t = m_raw(t.name, tt);
        if (t.name == prefix + "embeddings.position_embeddings.weight") {
            const int pad = c.pad_id;
            Tensor<float> wp(c.n_ctx + pad + 1, c.H, 0.f);
            for (int r = 0; r < pad; r++)
                for (int h = 0; h < c.H; h++) wp(r, h) = 9.f;  // rows no sequence reads
            for (int h = 0; h < c.H; h++) wp(pad, h) = p.w_pad[h] - tt(0, h);
            for (int i = 0; i < c.n_ctx; i++)
                for (int h = 0; h < c.H; h++) wp(i + pad + 1, h) = p.W_p(i, h) - tt(0, h);
            t = m_raw(t.name, wp);
        }
        out.push_back(t);
    }
    return out;
}
}  // namespace

namespace {
// A GPT-1 tokenizer on a hand-made vocabulary: ids in the order given.
const std::vector<std::string> m_GPT1_SYMBOLS = {"<unk>", "l", "o", "w", "e", "s", "t", "r", "w</w>", "r</w>", "t</w>",
                                                 "!</w>", "lo", "low", "low</w>", "er</w>", "lower</w>", "es", "est</w>",
                                                 "o</w>", "a</w>"};
std::string m_gpt1_encoder_json(const std::vector<std::string>& symbols) {
    std::string j = "{";
    for (std::size_t k = 0; k < symbols.size(); k++) j += (k ? ", \"" : "\"") + symbols[k] + "\": " + std::to_string(k);
    return j + "}";
}
const std::string m_GPT1_MERGES = "#version: 0.2\nl o\nlo w</w>\ne r</w>\nlo w\nlow er</w>\ne s\nes t</w>\n";
GPT1BPE m_gpt1() { return make_gpt1_bpe(m_gpt1_encoder_json(m_GPT1_SYMBOLS), m_GPT1_MERGES); }
int m_gpt1_id(const std::string& s) { return (int)(std::find(m_GPT1_SYMBOLS.begin(), m_GPT1_SYMBOLS.end(), s) - m_GPT1_SYMBOLS.begin()); }

const std::string m_WP_VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncapital\nof\nfrance\nis\n.\nun\n##aff\n##able\na\n##a\n"
                               "ecole\n\xE4\xB8\xAD\n,\n!\n";  // 中 at id 17
}  // namespace

// The panels of an SVG written by heatmap_svg: each one's title and its cells in row-major order
// (masked or not, and the value in the cell's <title>).
struct m_SvgPanel {
    std::string title;
    std::vector<bool> masked;
    std::vector<double> values;
};
std::vector<m_SvgPanel> m_svg_panels(const std::string& svg) {
    std::vector<m_SvgPanel> out;
    const std::string start = "<g class='panel'";
    for (std::size_t p = svg.find(start); p != std::string::npos; p = svg.find(start, p + 1)) {
        const std::string g = svg.substr(p, svg.find("</g>", p) - p);
        m_SvgPanel q;
        const std::size_t t = g.find("font-weight='bold'>") + 19;
        q.title = g.substr(t, g.find("</text>", t) - t);
        for (std::size_t r = g.find("<rect "); r != std::string::npos; r = g.find("<rect ", r + 1)) {
            const std::size_t e = g.find('>', r);
            const std::string tag = g.substr(r, e - r);
            if (!m_contains(tag, "class=")) continue;  // the frame
            q.masked.push_back(m_contains(tag, "class='masked'"));
            const std::size_t v = g.find("<title>", e) + 7;
            const std::string value = g.substr(v, g.find("</title>", v) - v);
            q.values.push_back(value == "-inf" ? -INFINITY : std::stod(value));
        }
        out.push_back(q);
    }
    return out;
}

// The batch of `transformer explain` / `grad` for a tiny preset: GPT variants predict 2..n, BERT
// ([CLS] a [SEP] b [SEP], segments) and RoBERTa predict masked positions.
Batch m_explain_batch(const Config& c) {
    Batch b;
    if (is_causal(c.variant)) {
        b.n = 5, b.tokens = {3, 1, 4, 1, 5}, b.targets = next_token_targets(b.tokens, 1, 5);
    } else if (c.variant == Variant::bert) {
        b.n = 6, b.tokens = {10, 12, 2, 11, 12, 11}, b.segments = {0, 0, 0, 0, 1, 1}, b.targets = {-1, 1, -1, -1, 3, -1};
    } else {
        b.n = 5, b.tokens = {10, 1, 12, 3, 11}, b.targets = {-1, -1, 2, -1, -1};
    }
    return b;
}

const std::vector<std::string> m_COMMANDS = {"train", "finetune", "bpe", "sample", "fill", "eval", "predict", "explain", "grad", "strip",
                                             "params", "attention", "masks", "bench", "init", "task", "tokenize", "export"};

// Starts the program with `args` in the background (no shell, SIGINT and SIGTERM at their defaults),
// stdout and stderr to base.out / base.err.
m_Child m_start(const std::string& args, const std::string& base) {
    std::vector<std::string> argv = {m_PROGRAM};
    for (const std::string& word : m_words(args)) argv.push_back(word);
    return m_start_argv(argv, base + ".out", base + ".err");
}

// ################################################################################################
// PART I. THE MATHEMATICS, in transformer.cpp's order: Tensor, matrix products, the modules,
// the models, the objectives, training
// ################################################################################################
// ================================================================================================
// Tensor basics (used by every module)
// ================================================================================================
TEST_SUITE_BEGIN("tensor");
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

// The guard after every tensor's numbers (pool_guard_bytes of signalling NaNs): a loop that runs one
// element too far reads a NaN, and one that writes or adds there stops the program when the tensor
// is freed.
// This is what makes an off-by-one loop bound fail the tests in the optimised build too.
TEST_CASE("Tensor: one element past the end reads as NaN; a write there, even adding to it, stops the program") {
    {
        TF f(3, 2);
        TD d(std::vector<int>{5});
        CHECK(std::isnan(f.ptr()[f.size()]));
        for (int k = 0; k < 8; k++) CHECK(std::isnan(d.ptr()[d.size() + k]));  // the whole guard
        CHECK(f.ptr()[f.size()] * 0.0f != 0.0f);  // a product with 0 is NaN too (a huge number would give 0)
        std::uint32_t bits = 0;
        std::memcpy(&bits, f.ptr() + f.size(), 4);
        CHECK((bits & 0xFFFFFF00u) == 0x7F800000u);  // read as an int id: over 2139095040, far outside any vocabulary
        // Adding a number changes the bits (a signalling NaN becomes a quiet one): a += loop one
        // element too far changes the guard.
        const float v = f.ptr()[f.size()] + 0.25f;
        std::uint32_t after = 0;
        std::memcpy(&after, &v, 4);
        CHECK(after != bits);
        const double w = d.ptr()[d.size()] + 0.25, x = d.ptr()[d.size()];
        CHECK(std::memcmp(&w, &x, 8) != 0);
        TF g = TF::uninit(4, 4);  // a block handed out again gets its guard again
        CHECK(std::isnan(g.ptr()[g.size()]));
    }
    {  // a loop that copies one element too far copies a guard into a guard: still caught
        TD a(std::vector<int>{3}), b(std::vector<int>{3});
        CHECK(std::memcmp(a.ptr() + 3, b.ptr() + 3, pool_guard_bytes) != 0);
    }
    M_SKIP_ON_WINDOWS("fork: the write past the end aborts a child process");
    for (int where : {0, 63, -1}) {  // the first and the last byte of the guard; -1: 0.25 added to the first element
        const std::string base = m_path("past_end" + std::to_string(where));
        m_Child child = m_fork([where] {
            {
                TF t(2, 2);
                if (where < 0)
                    t.ptr()[t.size()] += 0.25f;
                else
                    ((unsigned char*)t.ptr())[t.size() * sizeof(float) + where] = 0;
            }
            return 0;
        }, base + ".out", base + ".err");
        m_Exit e;
        REQUIRE(m_wait(child, e));
        const std::string err = m_read(base + ".err");
        INFO("stderr: " << err);
        CHECK(e.signal == SIGABRT);
        CHECK(err.find("memory written past the end of a tensor of 16 bytes (within bytes " + std::to_string(where < 0 ? 0 : where / 4 * 4)) != std::string::npos);
    }
}

TEST_CASE("Tensor: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, TD::from(2, 3, {1, 2, 3}), "2x3", "3 values");
    CHECK_THROWS_NAMING(ShapeError, TD(std::vector<int>{2, -3}), "2x-3");
    // Negative dimensions must not slip through from(): (size_t)(-1) * (-1) wraps around to 1.
    CHECK_THROWS_NAMING(ShapeError, TD::from(-1, -1, {5}), "-1x-1");
    CHECK_THROWS_NAMING(ShapeError, add(TD(3, 4), TD(4, 5)), "3x4", "4x5");
    CHECK_THROWS_NAMING(ShapeError, require_shape(TD(3, 4), {4, 3}, "here", "M"), "here", "M is 3x4", "4x3");
}

// A shape in braces and a fill value build that shape; a float never becomes a size.
static_assert(!std::is_constructible<Tensor<float>, int, float>::value, "Tensor<float>(5, 2.0f) must not compile");
static_assert(!std::is_constructible<Tensor<float>, double, double>::value, "float sizes must not compile");
static_assert(!std::is_constructible<Tensor<double>, float, int>::value, "float sizes must not compile");
static_assert(std::is_constructible<Tensor<float>, int, int>::value, "rows x cols");
static_assert(std::is_constructible<Tensor<float>, int, int, float>::value, "rows x cols filled");
TEST_CASE("Tensor: Tensor<float>({5}, 2.0f) is the 5-vector of 2s (compile-time checks above)") {
    const Tensor<float> t({5}, 2.0f);
    CHECK(t.shape == std::vector<int>{5});
    CHECK(t.data == std::vector<float>(5, 2.0f));
    const Tensor<float> m({2, 3}, 1.5f);
    CHECK(m.shape == std::vector<int>{2, 3});
    CHECK(m.data == std::vector<float>(6, 1.5f));
    CHECK(Tensor<float>(2, 3).shape == std::vector<int>{2, 3});
}
TEST_SUITE_END();

// ================================================================================================
// Matrix products: matmul, matmul_nt, matmul_tn, gemm against gemm_reference
// ================================================================================================
TEST_SUITE_BEGIN("matrix products");
namespace {
struct Dims {
    int M, N, K;
};
// A shape as a failing check shows it: "M=3, N=5, K=7".
std::ostream& operator<<(std::ostream& os, const Dims& d) { return os << "M=" << d.M << ", N=" << d.N << ", K=" << d.K; }
const Dims kOddShapes[] = {{1, 1, 1},   {1, 7, 3},    {5, 1, 9},     {3, 5, 7},    {17, 13, 29}, {31, 33, 65},
                           {64, 64, 64}, {67, 130, 259}, {129, 5, 300}, {2, 257, 17}, {8, 8, 1}};
// Edges of the blocked kernel's tiles and blocks on every target (MR in 3..12, NR in 8..64,
// KC 256 or 384, MC 48, NC 2016 or 4032): a partial last tile in rows and columns, a narrow
// product just at and just past the narrow tile's width, several KC chunks (accumulated into C),
// more rows than MC and more columns than NC.
const Dims kTileEdgeShapes[] = {{25, 16, 40}, {13, 32, 9},   {50, 33, 17}, {11, 24, 30}, {23, 25, 31},
                                {7, 49, 19},  {61, 70, 773}, {7, 4100, 20}, {3, 40, 50}};

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
    std::vector<Dims> shapes(std::begin(kOddShapes), std::end(kOddShapes));
    shapes.insert(shapes.end(), std::begin(kTileEdgeShapes), std::end(kTileEdgeShapes));
    for (Dims d : shapes) {
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++) {
                    CAPTURE(d);
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

TEST_CASE("build: transformer.cpp rounds a*b + c twice unless it calls std::fma") {
    // The same numbers on every target (docs/performance.md): a compiler left to fuse a product into
    // the sum after it (g++'s default -ffp-contract=fast) fuses or not by target, tuning and vector
    // width. The Makefile's FP flags turn it off; a build without them fails here.
    CHECK_MESSAGE(!products_fused_by_compiler(),
                  "expected (1 + 2^-12)^2 - (1 + 2^-11) = 0 in float with two roundings (Makefile's -ffp-contract=off), "
                  "got 2^-24: transformer.cpp was compiled with a*b + c fused into one rounding");
}

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

namespace {
// gemv_rows (1 to 3 rows of A, row-major B: generation's one-token products) adds the reference's
// terms in an order of its own, so it must agree bit for bit with the reference run on A and B
// with k put in that order: N = 64 (sums in registers, k in order), other N (8 rows of B at a
// time, one from each eighth) and K not a multiple of 8 (the remainder rows).
template <typename T>
void gemv_rows_vs_reference() {
    Rng rng(5);
    const Dims shapes[] = {{1, 64, 768}, {2, 64, 37}, {3, 64, 8}, {1, 100, 50}, {3, 300, 13}, {1, 2304, 64}, {1, 48, 5}, {2, 77, 771}};
    for (Dims d : shapes)
        for (int ta = 0; ta < 2; ta++)
            for (int acc = 0; acc < 2; acc++) {
                CAPTURE(d);
                CAPTURE(ta);
                CAPTURE(acc);
                Tensor<T> A = ta ? rand_t<T>(d.K, d.M, rng) : rand_t<T>(d.M, d.K, rng);
                const long rsA = ta ? 1 : d.K, csA = ta ? d.M : 1;
                Tensor<T> B = rand_t<T>(d.K, d.N, rng);
                const int ldc = d.N + 2;
                Tensor<T> C = rand_t<T>(d.M, ldc, rng), Cref = C;
                gemm<T>(d.M, d.N, d.K, A.ptr(), rsA, csA, B.ptr(), d.N, 1, C.ptr(), ldc, acc == 1);
                // The reference with the terms of each sum in gemv_rows' order: k itself for N = 64,
                // else k = 0, S, ..., 7S, 1, S+1, ..., 7S+1, ..., then 8S, ..., K-1 (S = K/8). The
                // reference on A and B with their k reordered so adds in exactly that order.
                std::vector<int> order;
                const int S = d.K / 8;
                if (d.N == 64)
                    for (int k = 0; k < d.K; k++) order.push_back(k);
                else {
                    for (int k = 0; k < S; k++)
                        for (int r = 0; r < 8; r++) order.push_back(r * S + k);
                    for (int k = 8 * S; k < d.K; k++) order.push_back(k);
                }
                Tensor<T> Ap = A, Bp = B;
                for (int q = 0; q < d.K; q++) {
                    for (int i = 0; i < d.M; i++) Ap[(long)i * rsA + (long)q * csA] = A[(long)i * rsA + (long)order[q] * csA];
                    for (int j = 0; j < d.N; j++) Bp(q, j) = B(order[q], j);
                }
                gemm_reference<T>(d.M, d.N, d.K, Ap.ptr(), rsA, csA, Bp.ptr(), d.N, 1, Cref.ptr(), ldc, acc == 1);
                CHECK(C.data == Cref.data);
            }
}
}  // namespace
TEST_CASE("gemm: a few rows times row-major B (gemv_rows) equal gemm_reference bit for bit, terms in gemv_rows' order") {
    gemv_rows_vs_reference<float>();
    gemv_rows_vs_reference<double>();
}

namespace {
// gemm_reference's A B (M x N of shape d, A and B read with the strides given) and the bound
// |A| |B| of its rounding errors.
struct m_RefBound {
    TD ref, bound;
};
m_RefBound m_gemm_ref_bound(const Dims& d, const TD& A, long rsA, long csA, const TD& B, long rsB, long csB) {
    m_RefBound r{TD(d.M, d.N), TD(d.M, d.N)};
    const TD absA = abs_t(A), absB = abs_t(B);
    gemm_reference<double>(d.M, d.N, d.K, A.ptr(), rsA, csA, B.ptr(), rsB, csB, r.ref.ptr(), d.N, false);
    gemm_reference<double>(d.M, d.N, d.K, absA.ptr(), rsA, csA, absB.ptr(), rsB, csB, r.bound.ptr(), d.N, false);
    return r;
}
// Checks a product C (named name) against the reference r and against plain, the same product by
// matmul and transpose (named plain_name), within r's bound.
void m_check_product(const TD& C, const m_RefBound& r, const TD& plain, int K, const std::string& name, const std::string& plain_name) {
    check_close(C, r.ref, r.bound, K, (name + " vs reference").c_str());
    check_close(C, plain, r.bound, K, (name + " vs " + plain_name).c_str());
}
}  // namespace

TEST_CASE("matmul: hand-computed case and agreement with gemm_reference") {
    // [[1, 2, 3], [4, 5, 6]] [[1, 0], [0, 1], [1, 1]] = [[1 + 3, 2 + 3], [4 + 6, 5 + 6]] = [[4, 5], [10, 11]]
    TD C = matmul(TD::from(2, 3, {1, 2, 3, 4, 5, 6}), TD::from(3, 2, {1, 0, 0, 1, 1, 1}));
    REQUIRE(C.shape == shp(2, 2));
    CHECK(C.data == std::vector<double>{4, 5, 10, 11});
    Rng rng(122);
    for (Dims d : kOddShapes) {
        CAPTURE(d);
        TD A = randn(d.M, d.K, rng), B = randn(d.K, d.N, rng);
        const m_RefBound r = m_gemm_ref_bound(d, A, d.K, 1, B, d.N, 1);
        check_close(matmul(A, B), r.ref, r.bound, d.K, "matmul");
        // matmul_acc: C += A B.
        TD C0 = randn(d.M, d.N, rng), Cacc = C0;
        matmul_acc(A, B, Cacc);
        TD refacc = add(C0, r.ref);
        check_close(Cacc, refacc, add(abs_t(C0), r.bound), d.K, "matmul_acc");
    }
}

TEST_CASE("matmul_nt: equals matmul(A, transpose(B)) on odd shapes") {
    // [[1, 2]] [[3, 4], [5, 6]]^T = [[1*3 + 2*4, 1*5 + 2*6]] = [[11, 17]]
    CHECK(matmul_nt(TD::from(1, 2, {1, 2}), TD::from(2, 2, {3, 4, 5, 6})).data == std::vector<double>{11, 17});
    Rng rng(123);
    for (Dims d : kOddShapes) {
        CAPTURE(d);
        TD A = randn(d.M, d.K, rng), B = randn(d.N, d.K, rng);
        m_check_product(matmul_nt(A, B), m_gemm_ref_bound(d, A, d.K, 1, B, 1, d.K), matmul(A, transpose(B)), d.K, "matmul_nt",
                        "matmul(A, B^T)");
    }
}

TEST_CASE("matmul_tn: equals matmul(transpose(A), B) on odd shapes, and matmul_tn_acc accumulates") {
    // [[1, 2], [3, 4]]^T [[1], [1]] = [[1 + 3], [2 + 4]] = [[4], [6]]
    CHECK(matmul_tn(TD::from(2, 2, {1, 2, 3, 4}), TD::from(2, 1, {1, 1})).data == std::vector<double>{4, 6});
    Rng rng(124);
    for (Dims d : kOddShapes) {
        CAPTURE(d);
        TD A = randn(d.K, d.M, rng), B = randn(d.K, d.N, rng);
        const m_RefBound r = m_gemm_ref_bound(d, A, 1, d.M, B, d.N, 1);
        m_check_product(matmul_tn(A, B), r, matmul(transpose(A), B), d.K, "matmul_tn", "matmul(A^T, B)");
        TD C0 = randn(d.M, d.N, rng), Cacc = C0;
        matmul_tn_acc(A, B, Cacc);
        check_close(Cacc, add(C0, r.ref), add(abs_t(C0), r.bound), d.K, "matmul_tn_acc");
    }
    // Float.
    TF Af = rand_t<float>(9, 4, rng), Bf = rand_t<float>(9, 3, rng);
    TF Cf = matmul_tn(Af, Bf), Rf = matmul(transpose(Af), Bf);
    for (std::size_t k = 0; k < Cf.size(); k++) CHECK(Cf[k] == doctest::Approx(Rf[k]).epsilon(1e-5).scale(1.0));
}

TEST_CASE("matmul: wrong shape") {
    CHECK_THROWS_NAMING(ShapeError, matmul(TD(3, 4), TD(5, 6)), "3x4", "5x6");
    CHECK_THROWS_NAMING(ShapeError, matmul(TD::vector({1, 2, 3}), TD(3, 2)), "A", "3");
    CHECK_THROWS_NAMING(ShapeError, matmul(TD(2, 1), TD::vector({1, 2, 3})), "matmul", "B", "3");  // B.rows() is 1 for a vector
    TD C(3, 3);
    CHECK_THROWS_NAMING(ShapeError, matmul_acc(TD(3, 4), TD(4, 5), C), "3x4", "4x5", "3x3");
    TD C23(2, 3);  // a vector B (rows() 1) whose sizes would otherwise fit, for C += A B and C += A^T B
    CHECK_THROWS_NAMING(ShapeError, matmul_acc(TD(2, 1), TD::vector({1, 2, 3}), C23), "matmul_acc", "B", "3");
    CHECK_THROWS_NAMING(ShapeError, matmul_tn_acc(TD(1, 2), TD::vector({1, 2, 3}), C23), "matmul_tn", "B", "3");
    TD C13(1, 3);
    CHECK_THROWS_NAMING(ShapeError, matmul_acc(TD::vector({5}), TD(1, 3), C13), "matmul_acc", "A");
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
TEST_SUITE_END();

// ================================================================================================
// diag
// ================================================================================================
TEST_SUITE_BEGIN("modules");
TEST_CASE("diag: hand-computed case" * doctest::test_suite("assignment 1")) {
    // diag((2, -1, 3)) = [[2, 0, 0], [0, -1, 0], [0, 0, 3]]
    TD Y = diag(TD::vector({2, -1, 3}));
    REQUIRE(Y.shape == shp(3, 3));
    CHECK_CLOSE(Y, mat(3, 3, {2, 0, 0, 0, -1, 0, 0, 0, 3}), 0.0, "diag((2, -1, 3))", "hand-computed, formulas §2");
    // dx_i = dY_{i,i}: the diagonal of [[1,2,3],[4,5,6],[7,8,9]] is (1, 5, 9).
    TD dx = diag_backward(TD::from(3, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9}));
    CHECK_CLOSE(dx, vec({1, 5, 9}), 0.0, "diag_backward(dY = [[1,2,3],[4,5,6],[7,8,9]])",
                "hand-computed dx_i = dY_ii, formulas §2");
    // n = 1: diag((4)) = [[4]].
    CHECK_CLOSE(diag(TD::vector({4})), mat(1, 1, {4}), 0.0, "diag((4))", "hand-computed, formulas §2");
}

TEST_CASE("diag: gradient check" * doctest::test_suite("assignment 1")) {
    Rng rng(11);
    TD x = randn_vec(5, rng), R = randn(5, 5, rng);
    TD dx = diag_backward(R);
    grad_check([&] { return sum_prod(diag(x), R); }, x, dx, "diag_backward's dx (x: 5 entries, L = sum(diag(x) .* R))",
               "§2 dx_i = dY_{i,i}");
}

TEST_CASE("diag: wrong shape" * doctest::test_suite("assignment 1")) {
    CHECK_THROWS_NAMING(ShapeError, diag(TD(2, 3)), "2x3");
    CHECK_THROWS_NAMING(ShapeError, diag_backward(TD(2, 3)), "2x3");
    CHECK_THROWS_NAMING(ShapeError, diag_backward(TD::vector({1, 2, 3, 4, 5, 6, 7})), "7");
}

// ================================================================================================
// Stack
// ================================================================================================
TEST_CASE("Stack: hand-computed case" * doctest::test_suite("assignment 1")) {
    // Stack_2((1, 2, 3)) = [[1, 2, 3], [1, 2, 3]]
    TD Y = Stack(TD::vector({1, 2, 3}), 2);
    REQUIRE(Y.shape == shp(2, 3));
    CHECK_CLOSE(Y, mat(2, 3, {1, 2, 3, 1, 2, 3}), 0.0, "Stack_2((1, 2, 3))", "hand-computed, formulas §3");
    // dx_j = sum_i dY_{i,j}: [[1,2,3],[10,20,30]] -> (11, 22, 33)
    TD dx = Stack_backward(TD::from(2, 3, {1, 2, 3, 10, 20, 30}));
    CHECK_CLOSE(dx, vec({11, 22, 33}), 0.0, "Stack_backward(dY = [[1,2,3],[10,20,30]])",
                "hand-computed column sums dx_j = sum_i dY_ij, formulas §3");
    // n = 0 gives an empty 0 x H matrix.
    CHECK_MESSAGE(Stack(TD::vector({1, 2, 3}), 0).shape == shp(0, 3), "Stack_0((1, 2, 3)) must be an empty 0x3 matrix (formulas §3)");
}

TEST_CASE("Stack: gradient check" * doctest::test_suite("assignment 1")) {
    Rng rng(12);
    TD x = randn_vec(4, rng), R = randn(3, 4, rng);
    TD dx = Stack_backward(R);
    grad_check([&] { return sum_prod(Stack(x, 3), R); }, x, dx, "Stack_backward's dx (x: 4 entries, n = 3, L = sum(Stack_3(x) .* R))",
               "§3 dx_j = sum_{i=1}^n dY_{i,j}");
}

TEST_CASE("Stack: wrong shape" * doctest::test_suite("assignment 1")) {
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
TEST_CASE("Embedding: hand-computed case" * doctest::test_suite("assignment 1")) {
    // W_e = [[1, 2], [3, 4], [5, 6]] (V = 3, H = 2), x = {2, 0, 2}: rows W_e[2], W_e[0], W_e[2].
    TD W = TD::from(3, 2, {1, 2, 3, 4, 5, 6});
    TD Y = Embedding<double>({2, 0, 2}, W);
    REQUIRE(Y.shape == shp(3, 2));
    CHECK_CLOSE(Y, mat(3, 2, {5, 6, 1, 2, 5, 6}), 0.0, "Embedding(x = {2, 0, 2}, W_e = [[1,2],[3,4],[5,6]])",
                "hand-computed rows W_e[2], W_e[0], W_e[2], formulas §4");
    // Backward, scatter-add into dW_e pre-filled with 0.5 (gradients accumulate):
    //   dY = [[1, 1], [10, 10], [100, 100]]: row 2 gets 1 + 100 = 101, row 0 gets 10, row 1 nothing.
    TD dW(3, 2, 0.5);
    Embedding_backward<double>({2, 0, 2}, TD::from(3, 2, {1, 1, 10, 10, 100, 100}), dW);
    CHECK_CLOSE(dW, mat(3, 2, {10.5, 10.5, 0.5, 0.5, 101.5, 101.5}), 0.0,
                "Embedding_backward(x = {2, 0, 2} (code ids), dY = [[1,1],[10,10],[100,100]]) added to dW_e = 0.5",
                "hand-computed scatter-add: 0.5 + the dY rows of each id (id 2 twice: 1 + 100), formulas §4");
}

TEST_CASE("Embedding: equals matmul(OneHot(x), W_e), backward equals matmul_tn(OneHot(x), dY)" * doctest::test_suite("assignment 1")) {
    Rng rng(13);
    const int V = 7, H = 5;
    const std::vector<int> x = {3, 3, 0, 6, 3, 1, 0, 3};  // repeated ids: 3 four times, 0 twice
    TD W = randn(V, H, rng);
    TD OH = OneHot<double>(x, V);
    // A product with a one-hot row is exact (1 * w + 0 * ...), so the lookup must agree exactly.
    CHECK_CLOSE(Embedding(x, W), matmul(OH, W), 0.0, "Embedding(x, W_e)", "OneHot(x) W_e, formulas §4");
    TD dY = randn((int)x.size(), H, rng);
    TD dW(V, H);
    Embedding_backward(x, dY, dW);
    TD ref = matmul_tn(OH, dY);
    CHECK_CLOSE(dW, ref, 1e-14, "Embedding_backward's dW_e", "OneHot(x)^T dY, formulas §4");
    // Rows of ids that never occur (2, 4, 5) stay exactly 0.
    for (int v : {2, 4, 5})
        for (int j = 0; j < H; j++) {
            INFO("Embedding_backward's dW_e, entry (" << v + 1 << ", " << j + 1 << "): expected 0 (code id " << v
                 << " is not in x, formulas §4), got " << dW(v, j));
            CHECK(dW(v, j) == 0);
        }
    // Float too.
    TF Wf = to_float(W);
    CHECK_CLOSE(Embedding(x, Wf), matmul(OneHot<float>(x, V), Wf), 0.0, "Embedding(x, W_e) in float",
                "OneHot(x) W_e in float, formulas §4");
}

TEST_CASE("Embedding: gradient check" * doctest::test_suite("assignment 1")) {
    Rng rng(14);
    const std::vector<int> x = {1, 4, 1, 0, 1};
    TD W = randn(5, 3, rng), R = randn(5, 3, rng);
    TD dW(5, 3);
    Embedding_backward(x, R, dW);
    grad_check([&] { return sum_prod(Embedding(x, W), R); }, W, dW,
               "Embedding_backward's dW_e (x = {1, 4, 1, 0, 1} (code ids), W_e 5x3)", "§4 dW_e = OneHot(x)^T dY");
}

TEST_CASE("Embedding: wrong shape and bad ids" * doctest::test_suite("assignment 1")) {
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
TEST_CASE("Softmax: hand-computed case" * doctest::test_suite("assignment 2")) {
    // Row 0: e^{ln 1}, e^{ln 2}, e^{ln 5} = 1, 2, 5, sum 8 -> (1/8, 2/8, 5/8).
    // Row 1: equal entries -> (1/3, 1/3, 1/3).
    // Row 2: (0, -inf, ln 3) -> e^0, 0, 3, sum 4 -> (1/4, 0, 3/4); the -inf entry gets exactly 0.
    TD X = TD::from(3, 3, {0, std::log(2.0), std::log(5.0), 7, 7, 7, 0, -INF, std::log(3.0)});
    TD Y = Softmax(X);
    REQUIRE(Y.shape == shp(3, 3));
    const TD expect = mat(3, 3, {0.125, 0.25, 0.625, 1. / 3, 1. / 3, 1. / 3, 0.25, 0, 0.75});
    CHECK_APPROX(Y, expect, 1e-14, "Softmax(X = [[0, ln 2, ln 5], [7, 7, 7], [0, -inf, ln 3]])",
                 "hand-computed e^x / sum e^x, formulas §5");
    CHECK_MESSAGE(Y(2, 1) == 0.0, "Softmax's entry (3, 2) of a -inf input: expected exactly 0 (formulas §5), got " << Y(2, 1));
    // Backward, dX = Y * (dY - rowsum(dY * Y)): row 0 with dY = (1, 0, 0):
    //   rowsum = 1/8, dX = (1/8 (1 - 1/8), 2/8 (0 - 1/8), 5/8 (0 - 1/8)) = (7/64, -2/64, -5/64).
    TD dY(3, 3);
    dY(0, 0) = 1;
    TD dX = Softmax_backward(Y, dY);
    REQUIRE(dX.shape == shp(3, 3));
    // Row 1 (of the three, the rows above): (7/64, -2/64, -5/64); row 2, where dY = 0: exactly 0.
    CHECK_APPROX(mat(1, 3, {dX(0, 0), dX(0, 1), dX(0, 2)}), mat(1, 3, {7.0 / 64, -2.0 / 64, -5.0 / 64}), 1e-14,
                 "Softmax_backward(Y, dY = [[1, 0, 0], [0, 0, 0], [0, 0, 0]]), row 1",
                 "hand-computed Y .* (dY - rowsum(dY .* Y)) = (1/8 (1 - 1/8), 2/8 (0 - 1/8), 5/8 (0 - 1/8)), formulas §5");
    for (int j = 0; j < 3; j++) {
        INFO("Softmax_backward(Y, dY = [[1, 0, 0], [0, 0, 0], [0, 0, 0]]), entry (2, " << j + 1
             << "): expected exactly 0 (hand-computed: dY's row 2 is 0, formulas §5), got " << dX(1, j));
        CHECK(dX(1, j) == 0.0);
    }
}

TEST_CASE("Softmax: gradient check, including a row with -inf entries" * doctest::test_suite("assignment 2")) {
    Rng rng(15);
    TD X = randn(4, 5, rng, 2.0);
    X(1, 0) = -INF, X(1, 3) = -INF;  // row 1 has two masked entries
    TD R = randn(4, 5, rng);
    TD Y = Softmax(X);
    TD dX = Softmax_backward(Y, R);
    REQUIRE(dX.shape == X.shape);
    CHECK_MESSAGE(all_finite(dX), "Softmax_backward's dX (X 4x5, entries (2, 1) and (2, 4) -inf) holds a NaN or an infinity: " << dX);
    // The -inf entries: probability exactly 0 and gradient exactly 0 (and not NaN).
    CHECK_MESSAGE(Y(1, 0) == 0.0, "Softmax(X), entry (2, 1) where X is -inf: expected exactly 0 (formulas §5), got " << Y(1, 0));
    CHECK_MESSAGE(Y(1, 3) == 0.0, "Softmax(X), entry (2, 4) where X is -inf: expected exactly 0 (formulas §5), got " << Y(1, 3));
    CHECK_MESSAGE(dX(1, 0) == 0.0, "Softmax_backward's dX, entry (2, 1) where X is -inf: expected exactly 0 (Y = 0 there, "
                                   "dX = Y .* (dY - rowsum(dY .* Y)), formulas §5), got " << dX(1, 0));
    CHECK_MESSAGE(dX(1, 3) == 0.0, "Softmax_backward's dX, entry (2, 4) where X is -inf: expected exactly 0 (Y = 0 there, "
                                   "dX = Y .* (dY - rowsum(dY .* Y)), formulas §5), got " << dX(1, 3));
    // The finite-difference perturbation of a -inf entry leaves it -inf, so its numeric gradient is 0.
    grad_check([&] { return sum_prod(Softmax(X), R); }, X, dX, "Softmax_backward's dX (X 4x5, two -inf in row 2, L = sum(Softmax(X) .* R))",
               "§5 dX_{i,j} = Y_{i,j} (dY_{i,j} - sum_{k=1}^m dY_{i,k} Y_{i,k})");
}

TEST_CASE("Softmax: rows sum to 1, huge inputs, -inf entries, all -inf row" * doctest::test_suite("assignment 2")) {
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
    CHECK_CLOSE(dXm, mat(2, 3, {0, 0, 0, 0, 0, 0}), 0.0,
                "Softmax_backward(Y = [[0, 1, 0], [0, 0, 0]] (an all -inf row 2), dY = 1)",
                "hand-computed: row 1 is Y .* (1 - 1) = 0, row 2 is Y = 0, formulas §5");
    TF Mf = TF::from(1, 2, {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()});
    CHECK(Softmax(Mf).data == std::vector<float>{0, 0});
    // Softmax is invariant to adding a constant per row.
    TD X2 = X;
    for (int j = 0; j < 9; j++) X2(2, j) += 50;
    CHECK_CLOSE(Softmax(X2), Y, 1e-14, "Softmax of X with 50 added to row 3", "Softmax(X): a constant per row cancels, formulas §5");
}

TEST_CASE("Softmax: wrong shape" * doctest::test_suite("assignment 2")) {
    CHECK_THROWS_NAMING(ShapeError, Softmax(TD::vector({1, 2, 3, 4, 5})), "Softmax", "5");
    CHECK_THROWS_NAMING(ShapeError, Softmax_backward(TD(2, 3), TD(3, 2)), "2x3", "3x2");
    CHECK_THROWS_NAMING(ShapeError, Softmax_backward(TD::vector({1, 2}), TD::vector({1, 2})), "2");
}

// ================================================================================================
// Masks
// ================================================================================================
TEST_CASE("Mask_BD: hand-computed case" * doctest::test_suite("assignment 3")) {
    // (Mask^BD)_{i,j} = 1 for all i, j.
    TD M = Mask_BD<double>(3);
    CHECK_CLOSE(M, TD(3, 3, 1.0), 0.0, "Mask_BD(3)", "hand-computed: every entry 1, formulas §6");
    CHECK_CLOSE(Mask_BD<float>(1), TF(1, 1, 1.0f), 0.0, "Mask_BD<float>(1)", "hand-computed [[1]], formulas §6");
    CHECK_MESSAGE(Mask_BD<double>(0).shape == shp(0, 0), "Mask_BD(0) must be an empty 0x0 matrix (formulas §6)");
}

TEST_CASE("Mask_BD: wrong shape" * doctest::test_suite("assignment 3")) {
    CHECK_THROWS_NAMING(Error, Mask_BD<double>(-2), "-2");  // a shape or a value: ShapeError is an Error
}

TEST_CASE("Mask_AR: hand-computed case (the n = 4 example of formulas §6)" * doctest::test_suite("assignment 3")) {
    // [[1, -inf, -inf, -inf], [1, 1, -inf, -inf], [1, 1, 1, -inf], [1, 1, 1, 1]]
    TD M = Mask_AR<double>(4);
    const TD expect = mat(4, 4, {1, -INF, -INF, -INF, 1, 1, -INF, -INF, 1, 1, 1, -INF, 1, 1, 1, 1});
    CHECK_CLOSE(M, expect, 0.0, "Mask_AR(4)",
                "the n = 4 example of formulas §6: 1 where j <= i, -inf where j > i (row i, column j)");
}

TEST_CASE("Mask_AR: definition entry by entry" * doctest::test_suite("assignment 3")) {
    for (int n : {1, 2, 5, 9}) {
        TF M = Mask_AR<float>(n);
        INFO("Mask_AR<float>(" << n << ")");
        REQUIRE(M.shape == shp(n, n));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                INFO("entry (" << i + 1 << ", " << j + 1 << "): expected " << std::string(j > i ? "-inf (column j > row i: masked" : "1 (column j <= row i: visible")
                     << ", Mask^AR, formulas §6), got " << M(i, j));
                CHECK(M(i, j) == (j > i ? -std::numeric_limits<float>::infinity() : 1.0f));
            }
    }
}

TEST_CASE("Mask_AR: wrong shape" * doctest::test_suite("assignment 3")) {
    CHECK_THROWS_NAMING(Error, Mask_AR<double>(-3), "-3");  // a shape or a value: ShapeError is an Error
}

TEST_CASE("Mask_ST: hand-computed case" * doctest::test_suite("assignment 3")) {
    // n = 6, window 2, stride 3: keep j <= i with i - j < 2 or (i - j) % 3 == 0.
    //   i=0: j=0            i=3: j=0 (3%3), 2, 3      i=5: j=2 (3%3), 4, 5
    //   i=1: j=0, 1         i=4: j=1 (3%3), 3, 4
    //   i=2: j=1, 2
    // (Row i, column j of the comment count from 0; the messages count from 1, as formulas §7.)
    const double o = 1, x = -INF;
    const TD expect = mat(6, 6, {o, x, x, x, x, x,  //
                                 o, o, x, x, x, x,  //
                                 x, o, o, x, x, x,  //
                                 o, x, o, o, x, x,  //
                                 x, o, x, o, o, x,  //
                                 x, x, o, x, o, o});
    CHECK_CLOSE(Mask_ST<double>(6, 2, 3), expect, 0.0, "Mask_ST(n = 6, window 2, stride 3)",
                "hand-computed: 1 where j <= i and (i - j < 2 or (i - j) % 3 == 0), formulas §7");
    // stride 0: only the band.
    CHECK_CLOSE(Mask_ST<double>(3, 1, 0), mat(3, 3, {o, x, x, x, o, x, x, x, o}), 0.0,
                "Mask_ST(n = 3, window 1, stride 0)", "hand-computed: the diagonal only, formulas §7");
}

TEST_CASE("Mask_ST: matches its definition entry by entry and is causal" * doctest::test_suite("assignment 3")) {
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
                INFO("Mask_ST(" << c.n << ", " << c.window << ", " << c.stride << "), entry (" << i + 1 << ", " << j + 1
                     << "): expected " << std::string(keep ? "1" : "-inf")
                     << " (formulas §7: kept iff j <= i and (i - j < window or (i - j) % stride == 0)), got " << M(i, j));
                CHECK(M(i, j) == (keep ? 1.0 : -INF));
                if (j > i)
                    CHECK_MESSAGE(M(i, j) == -INF, "causality: column j > row i must be -inf (Mask^ST, formulas §7)");
            }
    }
    // A window of at least n is the autoregressive mask; stride 1 keeps everything causal too.
    CHECK_CLOSE(Mask_ST<double>(6, 6, 0), Mask_AR<double>(6), 0.0, "Mask_ST(n = 6, window 6, stride 0)",
                "Mask_AR(6): a window of n keeps every j <= i, formulas §7");
    CHECK_CLOSE(Mask_ST<double>(6, 1, 1), Mask_AR<double>(6), 0.0, "Mask_ST(n = 6, window 1, stride 1)",
                "Mask_AR(6): stride 1 keeps every j <= i, formulas §7");
}

TEST_CASE("Mask_ST: wrong shape and bad arguments" * doctest::test_suite("assignment 3")) {
    CHECK_THROWS_NAMING(Error, Mask_ST<double>(4, 0, 1), "window", "0");
    CHECK_THROWS_NAMING(Error, Mask_ST<double>(4, 2, -1), "stride", "-1");
    CHECK_THROWS_NAMING(Error, Mask_ST<double>(-4, 2, 1), "-4");  // a shape or a value: ShapeError is an Error
}

TEST_CASE("apply_mask: hand-computed case" * doctest::test_suite("assignment 3")) {
    // A 1 keeps the score, a -inf replaces it by -inf (no 0 * inf product, so even a +inf or NaN
    // score under a -inf entry becomes -inf):
    //   Mask [[1, -inf, -inf], [1, 1, -inf]] (.) S [[2, 3, +inf], [-4, 5, NaN]]
    //     = [[2, -inf, -inf], [-4, 5, -inf]]
    TD Mask = TD::from(2, 3, {1, -INF, -INF, 1, 1, -INF});
    TD S = TD::from(2, 3, {2, 3, INF, -4, 5, std::numeric_limits<double>::quiet_NaN()});
    TD R = apply_mask(Mask, S);
    CHECK_CLOSE(R, mat(2, 3, {2, -INF, -INF, -4, 5, -INF}), 0.0,
                "apply_mask(Mask = [[1, -inf, -inf], [1, 1, -inf]], S = [[2, 3, +inf], [-4, 5, NaN]])",
                "hand-computed: S where Mask is 1, -inf where Mask is -inf (even over +inf or NaN), formulas §9");
    // With Mask_BD nothing changes.
    Rng rng(17);
    TD S2 = randn(4, 4, rng);
    CHECK_CLOSE(apply_mask(Mask_BD<double>(4), S2), S2, 0.0, "apply_mask(Mask_BD(4), S) for a random 4x4 S",
                "S itself: Mask^BD keeps every score, formulas §9");
    // Softmax after masking: the masked entries get probability exactly 0.
    TD P = Softmax(apply_mask(Mask_AR<double>(4), S2));
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) {
            INFO("Softmax(apply_mask(Mask_AR(4), S)), entry (" << i + 1 << ", " << j + 1 << "): expected exactly 0 "
                 << "(column j > row i is masked: Mask^AR, formulas §6 and §9), got " << P(i, j));
            CHECK(P(i, j) == 0.0);
        }
}

TEST_CASE("apply_mask: wrong shape" * doctest::test_suite("assignment 3")) {
    CHECK_THROWS_NAMING(ShapeError, apply_mask(Mask_AR<double>(3), TD(3, 4)), "3x3", "3x4");
}

// ================================================================================================
// Attention
// ================================================================================================
TEST_CASE("Attention: hand-computed case" * doctest::test_suite("assignment 3")) {
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
    const std::string qkv = "Q rows (2, 0, 0, 0), K rows 0 and (ln 3, 0, 0, 0), V = [[1, 0, 0, 2], [5, 1, 0, -2]]";
    CHECK_APPROX(O, mat(2, 4, {4, 0.75, 0, -1, 4, 0.75, 0, -1}), 1e-14, "Attention(" + qkv + ", Mask_BD)",
                 "hand-computed: P rows (1/4, 3/4), O = P V, formulas §10");
    REQUIRE(c.P.shape == shp(2, 2));
    CHECK_APPROX(mat(1, 2, {c.P(0, 0), c.P(0, 1)}), mat(1, 2, {0.25, 0.75}), 1e-14,
                 "Attention's cached P, row 1, Mask_BD", "hand-computed Softmax((0, ln 3)) = (1/4, 3/4), formulas §10");
    TD Oar = Attention(Q, K, V, Mask_AR<double>(2), &c);
    CHECK_APPROX(Oar, mat(2, 4, {1, 0, 0, 2, 4, 0.75, 0, -1}), 1e-14, "Attention(" + qkv + ", Mask_AR)",
                 "hand-computed: row 1 sees key 1 only (O row 1 = V row 1), row 2 as under Mask_BD, formulas §10");
    CHECK_MESSAGE(c.P(0, 1) == 0.0, "Attention's cached P under Mask_AR, entry (1, 2): expected exactly 0 (column j > row i "
                                    "is masked, Mask^AR, formulas §6), got " << c.P(0, 1));
    // With dropout scales [[2, 0], [0, 2]] (p = 1/2) under Mask_BD:
    //   row 0: P (.) drop = (1/2, 0)   -> O = 1/2 (1, 0, 0, 2)  = (0.5, 0, 0, 1)
    //   row 1: P (.) drop = (0, 3/2)   -> O = 3/2 (5, 1, 0, -2) = (7.5, 1.5, 0, -3)
    TD drop = TD::from(2, 2, {2, 0, 0, 2});
    TD Od = Attention(Q, K, V, Mask_BD<double>(2), &c, &drop);
    CHECK_APPROX(Od, mat(2, 4, {0.5, 0, 0, 1, 7.5, 1.5, 0, -3}), 1e-14,
                 "Attention(" + qkv + ", Mask_BD, dropout scales [[2, 0], [0, 2]])",
                 "hand-computed: O = (P .* drop) V, formulas §10 and §16");
    // The cache keeps P itself (before dropout): rows still sum to 1.
    CHECK_MESSAGE(c.P(1, 0) + c.P(1, 1) == doctest::Approx(1.0),
                  "Attention's cached P with dropout, row 2: must sum to 1 (P before dropout, formulas §10), sums to "
                      << c.P(1, 0) + c.P(1, 1));
    // An empty dropout tensor means no dropout.
    TD none;
    CHECK_CLOSE(Attention(Q, K, V, Mask_BD<double>(2), kNoAttCache, &none), O, 0.0, "Attention with an empty dropout tensor",
                "Attention without dropout");
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
    const std::string of = "Attention_backward's ";
    const std::string where = " (n = " + std::to_string(n) + ", D = 3, " + what + ", L = sum(Attention(Q, K, V) .* R))";
    grad_check(L, Q, dQ, of + "dQ" + where, "§10 dQ = dS K / sqrt(D)", 1e-6, 1e-6, qk_nonzero);
    grad_check(L, K, dK, of + "dK" + where, "§10 dK = dS^T Q / sqrt(D)", 1e-6, 1e-6, qk_nonzero);
    if (!qk_nonzero) {
        const std::string why = " must be exactly 0: every row sees one key, so P = 1 whatever Q and K (formulas §10)";
        CHECK_MESSAGE(max_abs(dQ) == 0.0, of << "dQ" << where << why << "; got " << dQ);
        CHECK_MESSAGE(max_abs(dK) == 0.0, of << "dK" << where << why << "; got " << dK);
    }
    grad_check(L, V, dV, of + "dV" + where, drop ? "§10 dV = Ptilde^T dO, Ptilde = P (.) M" : "§10 dV = P^T dO");
}
}  // namespace

TEST_CASE("Attention: gradient check of dQ, dK, dV under Mask_AR, Mask_BD, Mask_ST" * doctest::test_suite("assignment 3")) {
    attention_grad_check(Mask_AR<double>(5), nullptr, 21, "Mask_AR");
    attention_grad_check(Mask_BD<double>(5), nullptr, 22, "Mask_BD");
    attention_grad_check(Mask_ST<double>(7, 2, 3), nullptr, 23, "Mask_ST(7,2,3)");
    attention_grad_check(Mask_ST<double>(9, 3, 4), nullptr, 24, "Mask_ST(9,3,4)");
    // Only the diagonal (and n = 1): the output is V itself, Q and K get exactly zero gradient.
    attention_grad_check(Mask_ST<double>(6, 1, 0), nullptr, 25, "Mask_ST(6,1,0)", false);
    attention_grad_check(Mask_BD<double>(1), nullptr, 26, "n = 1", false);
}

TEST_CASE("Attention: gradient check with fixed dropout scales" * doctest::test_suite("assignment 3")) {
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
                int visible = 0;
                for (int k = 0; k < n; k++) visible += Mask(i, k) == 1.0;
                const bool depends = which == 0   ? i == j && visible >= 2
                                     : which == 1 ? Mask(i, j) == 1.0 && visible >= 2
                                                  : Mask(i, j) == 1.0;
                INFO("Attention (n = " << n << ", D = 3): row " << j + 1 << " of " << std::string(1, "QKV"[which])
                     << " changed; output row " << i + 1 << " must " << std::string(depends ? "change" : "stay exactly the same")
                     << " (Mask(" << i + 1 << ", " << j + 1 << ") = " << Mask(i, j) << ", row " << i + 1 << " sees "
                     << visible << " key(s); formulas §10); largest change of the row: " << row_diff(O, O2, i));
                if (depends)
                    CHECK(row_diff(O, O2, i) > 1e-9);
                else
                    CHECK(same_row(O, O2, i));  // exactly unchanged
            }
        }
    }
}
}  // namespace

TEST_CASE("Attention: Mask_AR row i ignores rows j > i, Mask_BD sees every row, Mask_ST its pattern" * doctest::test_suite("assignment 3")) {
    check_attention_dependence(Mask_AR<double>(5), 31);
    check_attention_dependence(Mask_BD<double>(5), 32);
    check_attention_dependence(Mask_ST<double>(8, 2, 3), 33);
}

TEST_CASE("Attention: masked positions get probability exactly 0 and gradient exactly 0" * doctest::test_suite("assignment 3")) {
    for (const TD& Mask : {Mask_AR<double>(6), Mask_ST<double>(8, 2, 3)}) {
        const int n = Mask.rows(), D = 4;
        Rng rng(34);
        TD Q = randn(n, D, rng, 2.0), K = randn(n, D, rng, 2.0), V = randn(n, D, rng);
        AttentionCache<double> c;
        Attention(Q, K, V, Mask, &c);
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int j = 0; j < n; j++) {
                INFO("Attention's P (n = " << n << "), entry (" << i + 1 << ", " << j + 1 << "): Mask = " << Mask(i, j)
                     << ", so expected " << std::string(Mask(i, j) == -INF ? "exactly 0" : "> 0")
                     << " (formulas §9 and §10), got " << c.P(i, j));
                if (Mask(i, j) == -INF) CHECK(c.P(i, j) == 0.0);
                else CHECK(c.P(i, j) > 0.0);
                s += c.P(i, j);
            }
            CHECK_MESSAGE(s == doctest::Approx(1.0).epsilon(1e-14),
                          "Attention's P, row " << i + 1 << ": must sum to 1 (Softmax, formulas §5), sums to " << s);
        }
        // A gradient on output row i only: keys and values that row i cannot see get exactly 0,
        // other query rows get exactly 0.
        for (int i = 0; i < n; i++) {
            TD dO(n, D);
            for (int d = 0; d < D; d++) dO(i, d) = 1.0 + d;
            TD dQ, dK, dV;
            Attention_backward(Q, K, V, c, dO, dQ, dK, dV);
            for (int j = 0; j < n; j++) {
                const TD dKj = TD::from(1, D, std::vector<double>(dK.row(j), dK.row(j) + D));
                const TD dVj = TD::from(1, D, std::vector<double>(dV.row(j), dV.row(j) + D));
                const TD dQj = TD::from(1, D, std::vector<double>(dQ.row(j), dQ.row(j) + D));
                INFO("Attention_backward (n = " << n << ", D = 4) with dO nonzero in row " << i + 1 << " only; row " << j + 1
                     << ": Mask(" << i + 1 << ", " << j + 1 << ") = " << Mask(i, j) << "; got dK row " << dKj << ", dV row "
                     << dVj << ", dQ row " << dQj);
                if (Mask(i, j) == -INF) {
                    CHECK_MESSAGE(max_abs(dKj) == 0.0, "dK's row must be exactly 0: row " << i + 1 << " cannot see key "
                                                           << j + 1 << " (formulas §10)");
                    CHECK_MESSAGE(max_abs(dVj) == 0.0, "dV's row must be exactly 0: row " << i + 1 << " cannot see value "
                                                           << j + 1 << " (formulas §10)");
                } else {
                    CHECK_MESSAGE(max_abs(dVj) > 0.0, "dV's row must be nonzero: row " << i + 1 << " sees value " << j + 1
                                                          << " (formulas §10)");
                }
                if (j != i)
                    CHECK_MESSAGE(max_abs(dQj) == 0.0, "dQ's row must be exactly 0: only query row " << i + 1
                                                           << " reaches the loss (formulas §10)");
            }
            CHECK_MESSAGE(all_finite(dQ), "Attention_backward's dQ holds a NaN or an infinity: " << dQ);
            CHECK_MESSAGE(all_finite(dK), "Attention_backward's dK holds a NaN or an infinity: " << dK);
        }
    }
}

TEST_CASE("Attention: a fully masked row gives zeros, not NaN" * doctest::test_suite("assignment 3")) {
    Rng rng(35);
    TD Q = randn(3, 2, rng), K = randn(3, 2, rng), V = randn(3, 2, rng);
    TD Mask = Mask_AR<double>(3);
    Mask(1, 0) = -INF, Mask(1, 1) = -INF;  // row 1 sees nothing
    AttentionCache<double> c;
    TD O = Attention(Q, K, V, Mask, &c);
    INFO("Attention (n = 3, D = 2) under Mask_AR(3) with row 2 all -inf (row 2 sees nothing: P row 0, formulas §10)");
    CHECK_MESSAGE(all_finite(O), "O holds a NaN or an infinity: " << O);
    CHECK_MESSAGE(O(1, 0) == 0.0, "O, entry (2, 1): expected exactly 0, got " << O(1, 0));
    CHECK_MESSAGE(O(1, 1) == 0.0, "O, entry (2, 2): expected exactly 0, got " << O(1, 1));
    TD dQ, dK, dV;
    Attention_backward(Q, K, V, c, TD(3, 2, 1.0), dQ, dK, dV);
    CHECK_MESSAGE(all_finite(dQ), "Attention_backward's dQ holds a NaN or an infinity: " << dQ);
    CHECK_MESSAGE(all_finite(dK), "Attention_backward's dK holds a NaN or an infinity: " << dK);
    CHECK_MESSAGE(all_finite(dV), "Attention_backward's dV holds a NaN or an infinity: " << dV);
    CHECK_MESSAGE(dQ(1, 0) == 0.0, "Attention_backward's dQ, entry (2, 1): expected exactly 0 (P row 2 is 0), got " << dQ(1, 0));
    CHECK_MESSAGE(dQ(1, 1) == 0.0, "Attention_backward's dQ, entry (2, 2): expected exactly 0 (P row 2 is 0), got " << dQ(1, 1));
}

TEST_CASE("Attention: float agrees with double" * doctest::test_suite("assignment 3")) {
    Rng rng(36);
    TD Q = randn(6, 4, rng), K = randn(6, 4, rng), V = randn(6, 4, rng);
    TD O = Attention(Q, K, V, Mask_AR<double>(6));
    TF Of = Attention(to_float(Q), to_float(K), to_float(V), Mask_AR<float>(6));
    CHECK_APPROX(Of, O, 1e-5, "Attention in float (n = 6, D = 4, Mask_AR)", "Attention in double");
}

TEST_CASE("Attention: wrong shape" * doctest::test_suite("assignment 3")) {
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD(3, 5), TD(3, 4), Mask_BD<double>(3)), "Attention", "3x4", "3x5");
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD(3, 4), TD(2, 4), Mask_BD<double>(3)), "Attention", "3x4", "2x4");
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD(3, 4), TD(3, 4), Mask_BD<double>(2)), "Attention", "Mask", "2x2",
                        "3x3");
    TD drop(2, 2, 1.0);
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD(3, 4), TD(3, 4), Mask_BD<double>(3), kNoAttCache, &drop),
                        "Attention", "dropout_scale", "3x3", "2x2");
    // A vector K (with V and Mask to match it as one key) is not a matrix: an error, not one key.
    CHECK_THROWS_NAMING(ShapeError, Attention(TD(3, 4), TD::vector({1, 2, 3, 4}), TD::vector({1, 2, 3, 4}), TD(3, 1, 1.0)),
                        "Attention: K must be a matrix");
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
TEST_CASE("Concat: hand-computed case" * doctest::test_suite("assignment 3")) {
    // Concat([[1,2],[3,4]], [[5,6],[7,8]], [[9,10],[11,12]]) = [[1,2,5,6,9,10],[3,4,7,8,11,12]]
    std::vector<TD> X = {TD::from(2, 2, {1, 2, 3, 4}), TD::from(2, 2, {5, 6, 7, 8}), TD::from(2, 2, {9, 10, 11, 12})};
    TD Y = Concat(X);
    CHECK_CLOSE(Y, mat(2, 6, {1, 2, 5, 6, 9, 10, 3, 4, 7, 8, 11, 12}), 0.0,
                "Concat([[1,2],[3,4]], [[5,6],[7,8]], [[9,10],[11,12]])", "hand-computed, formulas §11");
    // The backward splits the columns back into the blocks.
    std::vector<TD> dX = Concat_backward(Y, 3);
    REQUIRE_MESSAGE(dX.size() == 3, "Concat_backward(dY 2x6, 3 blocks) must return 3 blocks, returned " << dX.size());
    for (int k = 0; k < 3; k++)
        CHECK_CLOSE(dX[k], X[k], 0.0,
                    "Concat_backward(dY = [[1,2,5,6,9,10],[3,4,7,8,11,12]], 3)'s block " + std::to_string(k + 1),
                    "hand-computed: columns " + std::to_string(2 * k + 1) + ".." + std::to_string(2 * k + 2) +
                        " of dY, formulas §11");
    // A single block is the identity.
    CHECK_CLOSE(Concat(std::vector<TD>{X[1]}), X[1], 0.0, "Concat of the single block [[5,6],[7,8]]",
                "the block itself, formulas §11");
}

TEST_CASE("Concat: gradient check" * doctest::test_suite("assignment 3")) {
    Rng rng(41);
    std::vector<TD> X = {randn(3, 2, rng), randn(3, 2, rng), randn(3, 2, rng), randn(3, 2, rng)};
    TD R = randn(3, 8, rng);
    std::vector<TD> dX = Concat_backward(R, 4);
    REQUIRE_MESSAGE(dX.size() == 4, "Concat_backward(dY 3x8, 4 blocks) must return 4 blocks, returned " << dX.size());
    for (int k = 0; k < 4; k++)
        grad_check([&] { return sum_prod(Concat(X), R); }, X[k], dX[k],
                   "Concat_backward's block " + std::to_string(k + 1) + " of 4 (blocks 3x2, L = sum(Concat(X_1..X_4) .* R))",
                   "§11 dX_k = dY_{:, (k-1)D+1 : kD}");
}

TEST_CASE("Concat: wrong shape" * doctest::test_suite("assignment 3")) {
    CHECK_THROWS_NAMING(ShapeError, Concat(std::vector<TD>{TD(2, 2), TD(2, 3)}), "2x2", "2x3");
    CHECK_THROWS_NAMING(ShapeError, Concat(std::vector<TD>{TD(2, 2), TD(3, 2)}), "2x2", "3x2");
    CHECK_THROWS_AS(Concat(std::vector<TD>{}), ShapeError);
    CHECK_THROWS_NAMING(ShapeError, Concat(std::vector<TD>{TD::vector({1, 2, 3})}), "3");
    CHECK_THROWS_NAMING(ShapeError, Concat_backward(TD(2, 5), 2), "2x5", "2");
    CHECK_THROWS_NAMING(Error, Concat_backward(TD(2, 4), 0), "0");  // A = 0 blocks
    CHECK_THROWS_NAMING(ShapeError, Concat_backward(TD::vector({1, 2, 3, 4}), 2), "4");
}

// ================================================================================================
// MultiHeadSA
// ================================================================================================
TEST_CASE("MultiHeadSA: hand-computed case" * doctest::test_suite("assignment 3")) {
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
    CHECK_APPROX(Y, mat(2, 2, {11, 16, 11, 16}), 1e-14, "MultiHeadSA(X = [[1, 2], [3, 4]], Mask_BD), 2 heads of D = 1",
                 "hand-computed in the comment above, formulas §12");
    TD Yar = MultiHeadSA(X, Mask_AR<double>(2), p);
    CHECK_APPROX(Yar, mat(2, 2, {7, 10, 11, 16}), 1e-14, "MultiHeadSA(X = [[1, 2], [3, 4]], Mask_AR), 2 heads of D = 1",
                 "hand-computed in the comment above, formulas §12");
}

TEST_CASE("MultiHeadSA: equals Concat(Attention(X W_i^Q, X W_i^K, X W_i^V, Mask)) W^O" * doctest::test_suite("assignment 3")) {
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
        CHECK_CLOSE(Y, ref, 1e-13, "MultiHeadSA(X)", "Concat(head_1..head_A) W^O, each head Attention(X W^Q_i, X W^K_i, X W^V_i), formulas §12");
        REQUIRE(c.head.size() == (std::size_t)A);
        for (int i = 0; i < A; i++) CHECK_CLOSE(c.head[i], heads[i], 1e-13, "MultiHeadSA's cached head " + std::to_string(i + 1), "Attention(X W^Q_i, X W^K_i, X W^V_i)");
        // Without dropout the dropout slots are empty.
        for (auto& per_head : c.dropout)
            for (auto& d : per_head) CHECK(d.empty());
    }
}

namespace {
// dX and every W_Q[i], W_K[i], W_V[i], W_O of MultiHeadSA against finite differences.
// With dropout, the forward draws the masks from the Rng, so it is re-seeded identically before
// every forward: the analytic run's cache then holds the very masks the numeric runs use.
void mhsa_grad_check(const TD& Mask, int B, int A, double attn_dropout, uint64_t seed, const std::string& what,
                     bool bias = false) {
    const int n = Mask.rows(), H = 4, D = 2;
    Rng rng(seed);
    MultiHeadSAParams<double> p = make_mhsa(H, A, D, rng, 0.6, bias);
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
    const std::string of = "MultiHeadSA_backward's ";
    const std::string where = " (B = " + std::to_string(B) + ", n = " + std::to_string(n) + ", H = 4, A = " +
                              std::to_string(A) + ", D = 2, " + what + ", L = sum(MultiHeadSA(X) .* R))";
    grad_check(L, X, dX, of + "dX" + where, "§12 dX = sum_i (dQ_i (W_i^Q)^T + dK_i (W_i^K)^T + dV_i (W_i^V)^T)");
    for (int i = 0; i < A; i++) {
        const std::string h = " of head " + std::to_string(i + 1);
        grad_check(L, p.W_Q[i], g.W_Q[i], of + "dW_Q" + h + where, "§12 dW_i^Q += X^T dQ_i");
        grad_check(L, p.W_K[i], g.W_K[i], of + "dW_K" + h + where, "§12 dW_i^K += X^T dK_i");
        grad_check(L, p.W_V[i], g.W_V[i], of + "dW_V" + h + where, "§12 dW_i^V += X^T dV_i");
    }
    grad_check(L, p.W_O, g.W_O, of + "dW_O" + where, "§12 dW^O += C^T dY, C = Concat(head_i)");
    if (!bias) return;
    for (int i = 0; i < A; i++) {
        const std::string h = " of head " + std::to_string(i + 1);
        grad_check(L, p.b_Q[i], g.b_Q[i], of + "db_Q" + h + where, "§12 db_i^Q += colsum(dQ_i)");
        grad_check(L, p.b_K[i], g.b_K[i], of + "db_K" + h + where, "§12 db_i^K += colsum(dK_i)");  // zero: softmax ignores q . b_K
        grad_check(L, p.b_V[i], g.b_V[i], of + "db_V" + h + where, "§12 db_i^V += colsum(dV_i)");
    }
    grad_check(L, p.b_O, g.b_O, of + "db_O" + where, "§12 db^O += colsum(dY)");
    CHECK_MESSAGE(max_abs(g.b_Q[0]) > 1e-3, of << "db_Q of head 1" << where << ": largest entry " << max_abs(g.b_Q[0])
                                              << ", expected above 1e-3 (b_Q reaches the scores, formulas §12)");
    CHECK_MESSAGE(max_abs(g.b_O) > 1e-3, of << "db_O" << where << ": largest entry " << max_abs(g.b_O)
                                            << ", expected above 1e-3 (db_O = column sums of dY, formulas §12)");
}
}  // namespace

TEST_CASE("MultiHeadSA: gradient check of dX, W_Q, W_K, W_V, W_O (B = 2, A = 2)" * doctest::test_suite("assignment 3")) {
    mhsa_grad_check(Mask_AR<double>(4), 2, 2, 0.0, 52, "Mask_AR");
    mhsa_grad_check(Mask_BD<double>(4), 2, 2, 0.0, 53, "Mask_BD");
    mhsa_grad_check(Mask_ST<double>(5, 2, 3), 2, 2, 0.0, 54, "Mask_ST");
    mhsa_grad_check(Mask_AR<double>(3), 1, 3, 0.0, 55, "B = 1, A = 3");
}

TEST_CASE("MultiHeadSA: gradient check with attention dropout (B = 2, A = 2)" * doctest::test_suite("assignment 3")) {
    mhsa_grad_check(Mask_AR<double>(4), 2, 2, 0.3, 56, "Mask_AR + dropout");
    mhsa_grad_check(Mask_BD<double>(4), 2, 2, 0.3, 57, "Mask_BD + dropout");
}

TEST_CASE("MultiHeadSA: gradient check with biases b_Q, b_K, b_V, b_O (GPT-2 as released)" * doctest::test_suite("assignment 3")) {
    mhsa_grad_check(Mask_AR<double>(4), 2, 2, 0.0, 61, "Mask_AR + biases", true);
    mhsa_grad_check(Mask_BD<double>(3), 1, 3, 0.3, 62, "Mask_BD + dropout + biases", true);
}

TEST_CASE("MultiHeadSA: biases: b_K changes nothing, b_V adds b_V W^O's rows to every row, b_O adds b_O" * doctest::test_suite("assignment 3")) {
    // Each probability row sums to 1, so a bias on the values reaches the output as the constant
    // row Concat(b_1^V, ..., b_A^V) W^O; a key bias adds q . b^K to a whole score row, which the
    // softmax ignores.
    const int H = 4, A = 2, D = 2, n = 3;
    Rng rng(63);
    const MultiHeadSAParams<double> p = make_mhsa(H, A, D, rng);
    const TD X = randn(n, H, rng), Mask = Mask_AR<double>(n);
    const TD Y0 = MultiHeadSA(X, Mask, p);
    MultiHeadSAParams<double> pk = zeros_like(p);
    pk.W_Q = p.W_Q, pk.W_K = p.W_K, pk.W_V = p.W_V, pk.W_O = p.W_O;
    for (int i = 0; i < A; i++) pk.b_Q.push_back(TD({D})), pk.b_K.push_back(randn_vec(D, rng, 2.0)), pk.b_V.push_back(TD({D}));
    pk.b_O = TD({H});
    CHECK_CLOSE(MultiHeadSA(X, Mask, pk), Y0, 1e-12, "MultiHeadSA with random key biases b^K", "MultiHeadSA without them: q . b^K is the same for a whole score row");
    MultiHeadSAParams<double> pv = pk;
    for (int i = 0; i < A; i++) pv.b_V[i] = randn_vec(D, rng, 1.0);
    pv.b_O = randn_vec(H, rng, 1.0);
    const TD Yv = MultiHeadSA(X, Mask, pv);
    TD shifted(n, H);
    for (int r = 0; r < n; r++)
        for (int j = 0; j < H; j++) {
            double shift = pv.b_O[j];
            for (int i = 0; i < A; i++)
                for (int d = 0; d < D; d++) shift += pv.b_V[i][d] * p.W_O(i * D + d, j);
            shifted(r, j) = Y0(r, j) + shift;
        }
    CHECK_APPROX(Yv, shifted, 1e-12, "MultiHeadSA with random b^V and b^O (n = 3, H = 4, A = 2, Mask_AR)",
                 "MultiHeadSA without them + Concat(b^V_1, .., b^V_A) W^O + b^O in every row (P's rows sum to 1), formulas §12");
    MultiHeadSAParams<double> bad = pv;
    bad.b_V.pop_back();
    CHECK_THROWS_AS(MultiHeadSA(X, Mask, bad), ShapeError);
    bad = pv;
    bad.b_O = TD({H + 1});
    CHECK_THROWS_AS(MultiHeadSA(X, Mask, bad), ShapeError);
}

TEST_CASE("MultiHeadSA: parameter gradients accumulate" * doctest::test_suite("assignment 3")) {
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
    CHECK_CLOSE(dX2, dX1, 0.0, "MultiHeadSA_backward's dX, called a second time", "the first call's: dX is returned, not accumulated");
    auto times = [](const TD& t, double f) {
        TD r = t;
        for (auto& v : r.data) v *= f;
        return r;
    };
    const std::string acc = "1.5 x the gradient after 2 calls: parameter gradients are added to g, not assigned (formulas §12)";
    for (int i = 0; i < 2; i++) {
        const std::string h = " of head " + std::to_string(i + 1) + " after 3 calls of MultiHeadSA_backward";
        CHECK_APPROX(g2.W_Q[i], times(g1.W_Q[i], 1.5), 1e-12, "dW_Q" + h, acc);
        CHECK_APPROX(g2.W_K[i], times(g1.W_K[i], 1.5), 1e-12, "dW_K" + h, acc);
        CHECK_APPROX(g2.W_V[i], times(g1.W_V[i], 1.5), 1e-12, "dW_V" + h, acc);
    }
    CHECK_APPROX(g2.W_O, times(g1.W_O, 1.5), 1e-12, "dW_O after 3 calls of MultiHeadSA_backward", acc);
    CHECK_MESSAGE(max_abs(g1.W_O) > 0, "MultiHeadSA_backward's dW_O is all zero (nothing written?)");
    // With biases, and a gradient without them: an error, not silently dropped gradients.
    Rng rb(60);
    MultiHeadSAParams<double> pb = make_mhsa(4, 2, 2, rb, 0.6, true);
    MultiHeadSAParams<double> gb = zeros_like(pb), gb2 = zeros_like(pb);
    MultiHeadSA(X, Mask_AR<double>(3), pb, &c);
    MultiHeadSA_backward(X, pb, c, R, gb);
    MultiHeadSA_backward(X, pb, c, R, gb2);
    MultiHeadSA_backward(X, pb, c, R, gb2);
    const std::string acc2 = "2 x the gradient after 1 call: parameter gradients are added to g, not assigned (formulas §12)";
    CHECK_APPROX(gb2.b_O, times(gb.b_O, 2), 1e-12, "db_O after 2 calls of MultiHeadSA_backward", acc2);
    CHECK_APPROX(gb2.b_V[1], times(gb.b_V[1], 2), 1e-12, "db_V of head 2 after 2 calls of MultiHeadSA_backward", acc2);
    MultiHeadSAParams<double> g_nobias = zeros_like(p);
    CHECK_THROWS_AS(MultiHeadSA_backward(X, pb, c, R, g_nobias), ShapeError);
}

TEST_CASE("MultiHeadSA: Mask_AR row i ignores rows j > i of X, Mask_BD sees every row" * doctest::test_suite("assignment 3")) {
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
                INFO("MultiHeadSA (n = 5, H = 4, A = 2): row " << j + 1 << " of X changed; output row " << i + 1
                     << " must " << std::string(Mask(i, j) == 1.0 ? "change" : "stay exactly the same") << " (Mask(" << i + 1 << ", "
                     << j + 1 << ") = " << Mask(i, j) << ", formulas §12); largest change of the row: " << row_diff(Y, Y2, i));
                if (Mask(i, j) == 1.0)
                    CHECK(row_diff(Y, Y2, i) > 1e-9);
                else
                    CHECK(same_row(Y, Y2, i));  // exactly unchanged
            }
        }
    }
}

TEST_CASE("MultiHeadSA: with B = 2 each sequence gets the output it gets alone" * doctest::test_suite("assignment 3")) {
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
        TD Ya(n, H), Yb(n, H);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < H; j++) Ya(i, j) = Y(i, j), Yb(i, j) = Y(n + i, j);
        CHECK_APPROX(Ya, Y1, 1e-13, "MultiHeadSA of B = 2 sequences (n = 4, H = 6, A = 3), rows 1..4",
                     "MultiHeadSA of sequence 1 alone, formulas §12");
        CHECK_APPROX(Yb, Y2, 1e-13, "MultiHeadSA of B = 2 sequences (n = 4, H = 6, A = 3), rows 5..8",
                     "MultiHeadSA of sequence 2 alone, formulas §12");
        // Changing sequence 2 leaves sequence 1 exactly alone, even under Mask_BD.
        TD Xc = X;
        for (int j = 0; j < H; j++) Xc(n, j) += 1.0;
        TD Yc = MultiHeadSA(Xc, Mask, p);
        for (int i = 0; i < n; i++)
            CHECK_MESSAGE(same_row(Y, Yc, i), "MultiHeadSA, B = 2: row 5 (sequence 2) of X changed; row " << i + 1
                                                  << " (sequence 1) must stay exactly the same, changed by " << row_diff(Y, Yc, i));
        CHECK_MESSAGE(row_diff(Y, Yc, n) > 1e-9, "MultiHeadSA, B = 2: row 5 of X changed; output row 5 must change");
    }
    // One n x n mask per sequence ((B*n) x n, as key_padding_mask makes): B = 3 sequences with three
    // different masks, each row block the output of its sequence alone under its own mask.
    TD X3 = randn(3 * n, H, rng), Masks(3 * n, n);
    const TD M0 = Mask_AR<double>(n), M1 = Mask_BD<double>(n);
    TD M2 = Mask_BD<double>(n);
    for (int i = 0; i < n; i++) M2(i, n - 1) = M2(i, 0) = -std::numeric_limits<double>::infinity();
    const TD* Ms[3] = {&M0, &M1, &M2};
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) Masks(b * n + i, j) = (*Ms[b])(i, j);
    const TD Y3 = MultiHeadSA(X3, Masks, p);
    for (int b = 0; b < 3; b++) {
        TD Xb(n, H);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < H; j++) Xb(i, j) = X3(b * n + i, j);
        const TD Yb = MultiHeadSA(Xb, *Ms[b], p);
        TD Y3b(n, H);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < H; j++) Y3b(i, j) = Y3(b * n + i, j);
        CHECK_APPROX(Y3b, Yb, 1e-13,
                     "MultiHeadSA of B = 3 sequences with a (B n) x n mask, sequence " + std::to_string(b + 1) + "'s rows",
                     "MultiHeadSA of that sequence alone under its own mask, formulas §12");
    }
}

TEST_CASE("MultiHeadSA: attention dropout masks come from the rng" * doctest::test_suite("assignment 3")) {
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
    CHECK_CLOSE(Y2, Y1, 0.0, "MultiHeadSA with dropout, seed repeated", "the first run: the same seed draws the same masks");
    CHECK_MESSAGE(max_abs_diff(Y1, Y3) > 0, "MultiHeadSA with dropout 0.25: seeds 5 and 6 must draw other masks, other outputs");
    CHECK_MESSAGE(max_abs_diff(Y1, Y0) > 0, "MultiHeadSA with dropout 0.25 must differ from without (formulas §16)");
    REQUIRE(c.dropout.size() == 2);
    for (auto& per_head : c.dropout) {
        REQUIRE(per_head.size() == 2);  // B = 2
        for (auto& d : per_head) {
            REQUIRE(d.shape == shp(n, n));
            for (double v : d.data)
                CHECK_MESSAGE((v == 0.0 || v == doctest::Approx(1 / (1 - pdrop)).epsilon(1e-15)),
                              "a dropout scale must be 0 or 1 / (1 - p) = " << 1 / (1 - pdrop) << " (formulas §16), got " << v);
        }
    }
    CHECK(c.dropout[0][0].data != c.dropout[1][0].data);  // every head and sequence draws its own
    CHECK(c.dropout[0][0].data != c.dropout[0][1].data);
    // p = 0: no dropout at all, and nothing is drawn.
    Rng r4(5);
    CHECK_CLOSE(MultiHeadSA(X, Mask_BD<double>(n), p, kNoMhsaCache, 0.0, &r4), Y0, 0.0, "MultiHeadSA with dropout p = 0", "MultiHeadSA without dropout");
    CHECK(r4.state == 5);
    // p > 0 with no generator is an error, not a forward that silently drops nothing.
    CHECK_THROWS_NAMING_NO_CRASH(Error, MultiHeadSA(X, Mask_BD<double>(n), p, kNoMhsaCache, pdrop, nullptr),
                                 "MultiHeadSA", "0.25", "random generator");
}

TEST_CASE("MultiHeadSA: wrong shape" * doctest::test_suite("assignment 3")) {
    Rng rng(62);
    MultiHeadSAParams<double> p = make_mhsa(4, 2, 2, rng);  // H = 4, A = 2, D = 2
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(5, 4), Mask_AR<double>(2), p), "5x4", "2x2");
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 3), Mask_AR<double>(2), p), "W_Q", "4x2", "3x2");
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 4), TD(2, 3, 1.0), p), "4x4", "2x3");
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA(TD(4, 4), TD::vector({0, 0}), p), "Mask must be a matrix", "2");
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
    CHECK_THROWS_NAMING(ShapeError, MultiHeadSA_backward(X, p, c, TD(4, 3), g), "MultiHeadSA_backward", "dY", "4x4", "4x3");
    // A gradient whose biases do not match the parameters', one kind of bias at a time.
    MultiHeadSAParams<double> pb = make_mhsa(4, 2, 2, rng, 0.6, true);
    MultiHeadSACache<double> cb;
    MultiHeadSA(X, Mask_AR<double>(2), pb, &cb);
    for (int which = 0; which < 4; which++) {
        CAPTURE(which);
        MultiHeadSAParams<double> gb = zeros_like(pb);
        if (which == 0) gb.b_Q.clear();
        if (which == 1) gb.b_K.clear();
        if (which == 2) gb.b_V.clear();
        if (which == 3) gb.b_O = TD();
        CHECK_THROWS_NAMING_NO_CRASH(ShapeError, MultiHeadSA_backward(X, pb, cb, TD(4, 4), gb), "bias | b_Q | b_K | b_V | b_O");
        CHECK_THROWS_NAMING_NO_CRASH(ShapeError, MultiHeadSA_backward(X, p, c, TD(4, 4), gb), "bias | b_Q | b_K | b_V | b_O");
    }
}

TEST_CASE("MultiHeadSA: an empty mask or a cache from another call throws instead of crashing" * doctest::test_suite("assignment 3")) {
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
    CHECK_THROWS_NAMING_NO_CRASH(ShapeError, MultiHeadSA_backward(X8, p, c, dY8, g), "cache | c.", "8x4");
    MultiHeadSAParams<double> p3 = make_mhsa(4, 3, 2, rng), g3 = zeros_like(p3);
    CHECK_THROWS_NAMING_NO_CRASH(ShapeError, MultiHeadSA_backward(X, p3, c, dY, g3), "4x4 | 3");  // a shape, or the head counts
}

// ================================================================================================
// Activations (used by FFN_ReLU and FFN_GELU)
// ================================================================================================
TEST_CASE("FFN_ReLU: relu activation and derivative" * doctest::test_suite("assignment 2")) {
    CHECK(activation(Activation::relu, 2.5) == 2.5);
    CHECK(activation(Activation::relu, -2.5) == 0.0);
    CHECK(activation(Activation::relu, 0.0) == 0.0);
    CHECK(activation(Activation::relu, 3.0f) == 3.0f);
    CHECK_MESSAGE(activation_derivative(Activation::relu, 2.5) == 1.0, "relu'(2.5): expected 1 (formulas §13)");
    CHECK_MESSAGE(activation_derivative(Activation::relu, -2.5) == 0.0, "relu'(-2.5): expected 0 (formulas §13)");
    // At zero: ReLU(-0.0) is +0.0 (never negative, not even a negative zero) and relu'(0) = 0, as
    // PyTorch takes it; the same in the array forms the FFN uses.
    CHECK_FALSE(std::signbit(activation(Activation::relu, -0.0)));
    CHECK_FALSE(std::signbit(activation(Activation::relu, -0.0f)));
    CHECK_MESSAGE(activation_derivative(Activation::relu, 0.0) == 0.0, "relu'(0): expected 0, as PyTorch takes it (formulas §13)");
    CHECK_MESSAGE(activation_derivative(Activation::relu, -0.0f) == 0.0f, "relu'(-0.0f): expected 0 (formulas §13)");
    const std::vector<double> z = {-0.0, 0.0, 2.0};
    std::vector<double> y(3, 7.0), dz(3, 1.0);
    activation_array(Activation::relu, z.data(), y.data(), 3);
    activation_derivative_array(Activation::relu, z.data(), dz.data(), 3);
    CHECK(y == std::vector<double>{0.0, 0.0, 2.0});
    CHECK_FALSE(std::signbit(y[0]));
    const std::vector<double> want_dz = {0.0, 0.0, 1.0};
    CHECK_MESSAGE(dz == want_dz,
                  "activation_derivative_array(relu, z = (-0.0, 0.0, 2.0)): expected (0, 0, 1) (relu'(0) = 0, formulas §13)");
    CHECK(std::string(activation_name(Activation::relu)) == "relu");
    CHECK(activation_from_name("relu") == Activation::relu);
}

TEST_CASE("FFN_GELU: activation values of the three GELU forms" * doctest::test_suite("assignment 2")) {
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
        INFO("activation " << std::string(activation_name(a)));
        CHECK(activation(a, 0.0) == 0.0);
        for (double x : {0.3, 1.0, 2.7})
            CHECK(activation(a, -x) == doctest::Approx(activation(a, x) - x).epsilon(1e-13));
        // Far out: gelu(x) -> x for x -> +inf, -> 0 for x -> -inf, and never NaN.
        CHECK(activation(a, 40.0) == doctest::Approx(40.0).epsilon(1e-12));
        CHECK(std::fabs(activation(a, -40.0)) < 1e-12);
        CHECK(std::isfinite(activation(a, -1000.0)));
        CHECK(std::isfinite(activation(a, -1000.0f)));
        CHECK_MESSAGE(std::isfinite(activation_derivative(a, -1000.0)), "activation_derivative(" << std::string(activation_name(a))
                          << ", -1000.0) must be finite (formulas §13)");
        CHECK_MESSAGE(std::isfinite(activation_derivative(a, 1000.0f)), "activation_derivative(" << std::string(activation_name(a))
                          << ", 1000.0f) must be finite (formulas §13)");
        // Float agrees with double.
        CHECK(activation(a, 0.7f) == doctest::Approx(activation(a, 0.7)).epsilon(1e-6));
    }
    // Derivatives: at 0 all three give 1/2;
    //   gelu_erf'(1) = Phi(1) + phi(1) = 0.8413447460685429 + 0.24197072451914337 = 1.0833154705876863
    //   gelu_sigmoid'(1) = s + 1.702 s (1 - s), s = 0.8457957659328212     -> 1.067779606556334
    //   gelu_tanh'(1) = 0.5 (1 + t) + 0.5 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715) -> 1.0829640838457826
    for (Activation a : kGelus)
        CHECK_MESSAGE(activation_derivative(a, 0.0) == doctest::Approx(0.5).epsilon(1e-15),
                      "activation_derivative(" << std::string(activation_name(a)) << ", 0): expected 1/2 (hand-computed, formulas §13)");
    CHECK_MESSAGE(activation_derivative(Activation::gelu_erf, 1.0) == doctest::Approx(1.0833154705876864).epsilon(1e-14),
                  "gelu_erf'(1): expected Phi(1) + phi(1) = 1.0833154705876864 (hand-computed, formulas §13)");
    CHECK_MESSAGE(activation_derivative(Activation::gelu_sigmoid, 1.0) == doctest::Approx(1.067779606556334).epsilon(1e-14),
                  "gelu_sigmoid'(1): expected s + 1.702 s (1 - s), s = sigmoid(1.702), = 1.067779606556334 (hand-computed, formulas §13)");
    CHECK_MESSAGE(activation_derivative(Activation::gelu_tanh, 1.0) == doctest::Approx(1.0829640838457826).epsilon(1e-14),
                  "gelu_tanh'(1): expected 0.5 (1 + t) + 0.5 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715) = 1.0829640838457826 "
                  "(hand-computed, formulas §13)");
}

TEST_CASE("FFN_GELU: activation_derivative matches finite differences" * doctest::test_suite("assignment 2")) {
    // (act(x + h) - act(x - h)) / 2h with h = 1e-6: error ~ 1e-10; tolerance 1e-8.
    const double h = 1e-6;
    for (Activation a : kAllActivations) {
        INFO("activation " << std::string(activation_name(a)));
        for (double x : {-4.0, -2.2, -1.0, -0.37, -0.01, 0.013, 0.5, 1.0, 1.9, 3.3, 6.0}) {
            CAPTURE(x);
            const double num = (activation(a, x + h) - activation(a, x - h)) / (2 * h);
            CHECK_MESSAGE(activation_derivative(a, x) == doctest::Approx(num).epsilon(1e-8).scale(1.0),
                          "activation_derivative(" << std::string(activation_name(a)) << ", " << x << "): expected " << num
                                                   << " (central finite difference of activation, h = 1e-6; formulas §13)");
        }
    }
}

TEST_CASE("FFN_GELU: activation names" * doctest::test_suite("assignment 2 (0 points)")) {
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

// An FFN p (H -> F -> H) of Rng(seed), an input X (n x H) and an upstream gradient R whose
// pre-activations are all at least `away` from 0 (away from relu's kink), on both sides of 0.
void m_ffn_point(Activation act, uint64_t seed, double away, int n, int H, int F, FFNParams<double>& p, TD& X, TD& R) {
    Rng rng(seed);
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
        if (closest > away && negative > 0 && negative < (int)c.Z.size()) break;  // both sides of 0
    }
}

// dX, W_1, b_1, W_2, b_2 of an FFN against finite differences. For relu the points are chosen
// away from the kink: every pre-activation is at least 1e-3 from 0 (h = 1e-6 cannot cross it).
void ffn_grad_check(Activation act, bool via_named_entry, uint64_t seed) {
    const int n = 3, H = 4, F = 6;
    FFNParams<double> p;
    TD X, R;
    m_ffn_point(act, seed, 1e-3, n, H, F, p, X, R);
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
    const std::string fn = via_named_entry ? (act == Activation::relu ? "FFN_ReLU_backward" : "FFN_GELU_backward")
                                           : "FFN_backward";
    const std::string what = fn + "'s ";
    const std::string where = " (" + std::string(activation_name(act)) + ", X 3x4, F = 6, L = sum(FFN(X) .* R))";
    grad_check(L, X, dX, what + "dX" + where, "§14 dX = dZ W_1^T");
    grad_check(L, p.W_1, g.W_1, what + "dW_1" + where, "§14 dW_1 += X^T dZ");
    grad_check(L, p.b_1, g.b_1, what + "db_1" + where, "§14 db_1 += colsum(dZ)");
    grad_check(L, p.W_2, g.W_2, what + "dW_2" + where, "§14 dW_2 += A^T dY, A = act(Z)");
    grad_check(L, p.b_2, g.b_2, what + "db_2" + where, "§14 db_2 += colsum(dY)");
}
}  // namespace

TEST_CASE("FFN_ReLU: hand-computed case" * doctest::test_suite("assignment 2")) {
    // b_1 = (0.5, 0.5, -1): Z = (1, -1, 0) + b_1 = (1.5, -0.5, -1), max(0, Z) = (1.5, 0, 0),
    // Y = 1.5 * (2, 0) + b_2 = (3 + 1, 0 - 1) = (4, -1).
    FFNParams<double> p = hand_ffn({0.5, 0.5, -1});
    TD X = TD::from(1, 2, {1, -1});
    FFNCache<double> c;
    TD Y = FFN_ReLU(X, p, &c);
    REQUIRE(Y.shape == shp(1, 2));
    const std::string f = "FFN_ReLU(X = [[1, -1]], b_1 = (0.5, 0.5, -1))";
    CHECK_CLOSE(Y, mat(1, 2, {4, -1}), 0.0, f, "hand-computed in the comment above, formulas §14");
    CHECK_CLOSE(c.Z, mat(1, 3, {1.5, -0.5, -1}), 0.0, f + "'s cached Z", "X W_1 + b_1, hand-computed, formulas §14");
    CHECK_CLOSE(c.A, mat(1, 3, {1.5, 0, 0}), 0.0, f + "'s cached A", "max(0, Z), hand-computed, formulas §14");
    // Backward with dY = (1, 0): dW_2 = A^T dY = rows (1.5, 0), (0, 0), (0, 0); db_2 = (1, 0);
    // dA = dY W_2^T = (2, 0, 1); dZ = dA * [Z > 0] = (2, 0, 0); db_1 = (2, 0, 0);
    // dW_1 = X^T dZ = [[2, 0, 0], [-2, 0, 0]]; dX = dZ W_1^T = (2, 0).
    FFNParams<double> g = zeros_like(p);
    TD dX = FFN_ReLU_backward(X, p, c, TD::from(1, 2, {1, 0}), g);
    const std::string fb = "FFN_ReLU_backward(X = [[1, -1]], b_1 = (0.5, 0.5, -1), dY = [[1, 0]])'s ";
    const std::string src = "hand-computed in the comment above, formulas §14";
    CHECK_CLOSE(dX, mat(1, 2, {2, 0}), 0.0, fb + "dX", "dZ W_1^T, " + src);
    CHECK_CLOSE(g.W_2, mat(3, 2, {1.5, 0, 0, 0, 0, 0}), 0.0, fb + "dW_2", "A^T dY, " + src);
    CHECK_CLOSE(g.b_2, vec({1, 0}), 0.0, fb + "db_2", "column sums of dY, " + src);
    CHECK_CLOSE(g.b_1, vec({2, 0, 0}), 0.0, fb + "db_1", "column sums of dZ = (dY W_2^T) .* [Z > 0], " + src);
    CHECK_CLOSE(g.W_1, mat(2, 3, {2, 0, 0, -2, 0, 0}), 0.0, fb + "dW_1", "X^T dZ, " + src);
}

TEST_CASE("FFN_ReLU: gradient check of dX, W_1, b_1, W_2, b_2" * doctest::test_suite("assignment 2")) {
    ffn_grad_check(Activation::relu, true, 71);
    ffn_grad_check(Activation::relu, false, 72);
}

TEST_CASE("FFN_ReLU: parameter gradients accumulate, float agrees with double" * doctest::test_suite("assignment 2")) {
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
    const char* names[] = {"dW_1", "db_1", "dW_2", "db_2"};
    int which = 0;
    for (auto [a, b] : pairs) {
        const std::string name = names[which++];
        CHECK_MESSAGE(max_abs(*a) > 0, "FFN_ReLU_backward's " << name << " is all zero (nothing written?)");
        TD twice = *a;
        for (auto& v : twice.data) v *= 2;
        CHECK_APPROX(*b, twice, 1e-14, "FFN_ReLU_backward's " + name + " after 2 calls",
                     "2 x the gradient after 1 call: parameter gradients are added, not assigned (formulas §14)");
    }
    FFNParams<float> pf{to_float(p.W_1), to_float(p.b_1), to_float(p.W_2), to_float(p.b_2)};
    TF Yf = FFN_ReLU(to_float(X), pf);
    CHECK_APPROX(Yf, Y, 1e-5, "FFN_ReLU in float (X 4x3, F = 5)", "FFN_ReLU in double");
}

TEST_CASE("FFN_ReLU: wrong shape" * doctest::test_suite("assignment 2")) {
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

TEST_CASE("FFN_GELU: hand-computed case for gelu_sigmoid (default), gelu_tanh, gelu_erf" * doctest::test_suite("assignment 2 (0 points)")) {
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
        INFO("activation " << std::string(activation_name(cs.a)));
        TD Y = FFN_GELU(X, p, kNoFfnCache, cs.a);
        REQUIRE(Y.shape == shp(1, 2));
        CHECK(Y(0, 0) == doctest::Approx(2 * cs.g1 + 1).epsilon(1e-14));
        CHECK(Y(0, 1) == doctest::Approx(cs.g1 - 2).epsilon(1e-14));
    }
    // The default is x sigmoid(1.702 x) (formulas §13).
    TD Yd = FFN_GELU(X, p);
    CHECK(Yd(0, 0) == doctest::Approx(2 * 0.8457957659328212 + 1).epsilon(1e-14));
    Rng rng(75);
    FFNParams<double> q = make_ffn(3, 4, rng);
    TD X2 = randn(2, 3, rng);
    CHECK_CLOSE(FFN_GELU(X2, q), FFN(X2, q, Activation::gelu_sigmoid), 0.0, "FFN_GELU(X)", "FFN with the sigmoid GELU, formulas §14");
    CHECK(max_abs_diff(FFN_GELU(X2, q), FFN_GELU(X2, q, kNoFfnCache, Activation::gelu_erf)) > 1e-4);
}

TEST_CASE("FFN_GELU: gradient check of dX, W_1, b_1, W_2, b_2 for every GELU form" * doctest::test_suite("assignment 2")) {
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
    CHECK_CLOSE(d1, d2, 0.0, "FFN_GELU_backward's dX", "FFN_backward with the sigmoid GELU");
    CHECK_CLOSE(g1.W_1, g2.W_1, 0.0, "FFN_GELU_backward's dW_1", "FFN_backward with the sigmoid GELU");
}

TEST_CASE("FFN_GELU: wrong shape and relu is not a GELU" * doctest::test_suite("assignment 2")) {
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
TEST_CASE("LayerNorm: hand-computed case" * doctest::test_suite("assignment 2")) {
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
    const TD expect = mat(2, 8, {-1, -2. / 3, -1, 2. / 3, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0, 0, -1});
    CHECK_APPROX(Y, expect, 1e-14, "LayerNorm(rows (2, 4, 4, 4, 5, 5, 7, 9) and (1, ..., 1), eps 5)",
                 "hand-computed in the comment above, formulas §15");
    CHECK_MESSAGE(c.rstd[0] == doctest::Approx(1.0 / 3).epsilon(1e-15),
                  "LayerNorm's cached rstd, row 1: expected 1/sqrt(4 + 5) = 1/3 (hand-computed, formulas §15)");
    CHECK_MESSAGE(c.rstd[1] == doctest::Approx(1.0 / std::sqrt(5.0)).epsilon(1e-15),
                  "LayerNorm's cached rstd, row 2: expected 1/sqrt(0 + 5) (hand-computed, formulas §15)");
    CHECK_MESSAGE(c.Xhat(0, 7) == doctest::Approx(4.0 / 3).epsilon(1e-15),
                  "LayerNorm's cached Xhat, entry (1, 8): expected (9 - 5) / 3 = 4/3 (hand-computed, formulas §15)");
    // Backward with dY = row 0 all ones, row 1 zeros: dbeta = (1, ..., 1, 0 from row 1),
    // dgamma_j = Xhat_0j. With gamma = 1: G = 1, mean(G) = 1, mean(G Xhat) = 0 -> dX = 0.
    TD ones(std::vector<int>{8}, 1.0);
    TD dY(2, 8);
    for (int j = 0; j < 8; j++) dY(0, j) = 1;
    TD dgamma(std::vector<int>{8}), dbeta(std::vector<int>{8});
    TD dX = LayerNorm_backward(ones, c, dY, dgamma, dbeta);
    const std::string f = "LayerNorm_backward(gamma = 1, the rows above, dY = [[1, ..., 1], [0, ..., 0]])'s ";
    CHECK_CLOSE(dX, TD(2, 8, 0.0), 1e-15, f + "dX",
                "hand-computed 0: gamma = 1 gives G = dY, mean(G) = 1 and mean(G .* Xhat) = 0 in row 1, G = 0 in row 2; "
                "dX = rstd (G - mean(G) - Xhat mean(G .* Xhat)), formulas §15");
    CHECK_CLOSE(dbeta, TD(std::vector<int>{8}, 1.0), 0.0, f + "dbeta", "hand-computed column sums of dY: 1 + 0, formulas §15");
    CHECK_APPROX(dgamma, vec(std::vector<double>(c.Xhat.row(0), c.Xhat.row(0) + 8)), 1e-15, f + "dgamma",
                 "hand-computed column sums of dY .* Xhat: row 1 of Xhat, formulas §15");
}

TEST_CASE("LayerNorm: gradient check of dX, dgamma, dbeta" * doctest::test_suite("assignment 2")) {
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
        const std::string where = " (X 3x5, row 2 offset by 10, eps " + std::string(eps == 0.5 ? "0.5" : "1e-5") +
                                  ", L = sum(LayerNorm(X) .* R))";
        grad_check(L, X, dX, "LayerNorm_backward's dX" + where,
                   "§15 dX_{i,j} = (G_{i,j} - 1/H sum_k G_{i,k} - Xhat_{i,j} 1/H sum_k G_{i,k} Xhat_{i,k}) / sqrt(sigma_i^2 + eps), "
                   "G = dY (.) Stack_n(gamma)");
        grad_check(L, gamma, dgamma, "LayerNorm_backward's dgamma" + where, "§15 dgamma_j += sum_i dY_{i,j} Xhat_{i,j}");
        grad_check(L, beta, dbeta, "LayerNorm_backward's dbeta" + where, "§15 dbeta_j += sum_i dY_{i,j}");
        // Gradients accumulate into dgamma and dbeta.
        TD dgamma2 = dgamma, dbeta2 = dbeta, twice_dgamma = dgamma, twice_dbeta = dbeta;
        LayerNorm_backward(gamma, c, R, dgamma2, dbeta2);
        for (auto& v : twice_dgamma.data) v *= 2;
        for (auto& v : twice_dbeta.data) v *= 2;
        const std::string acc = "2 x its value after 1 call: dgamma and dbeta are added to, not assigned (formulas §15)";
        CHECK_APPROX(dgamma2, twice_dgamma, 1e-14, "LayerNorm_backward's dgamma after 2 calls" + where, acc);
        CHECK_APPROX(dbeta2, twice_dbeta, 1e-14, "LayerNorm_backward's dbeta after 2 calls" + where, acc);
    }
}

namespace {
// Checks that every row of Y has a mean within mean_tol of 0 and a variance of 1 within the
// relative var_eps.
template <typename T>
void m_check_rows_standardized(const Tensor<T>& Y, double mean_tol, double var_eps) {
    const int n = Y.rows(), H = Y.cols();
    for (int i = 0; i < n; i++) {
        CAPTURE(i);
        double mu = 0, var = 0;
        for (int j = 0; j < H; j++) mu += Y(i, j);
        mu /= H;
        for (int j = 0; j < H; j++) var += (Y(i, j) - mu) * (Y(i, j) - mu);
        var /= H;
        CHECK(std::fabs(mu) <= mean_tol);
        CHECK(var == doctest::Approx(1.0).epsilon(var_eps));
    }
}
}  // namespace

TEST_CASE("LayerNorm: mean 0 variance 1 before gamma and beta" * doctest::test_suite("assignment 2 (0 points)")) {
    Rng rng(92);
    const int n = 5, H = 16;
    TD X = randn(n, H, rng, 3.0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < H; j++) X(i, j) += 10.0 * i - 20;
    TD Y = LayerNorm(X, TD(std::vector<int>{H}, 1.0), TD(std::vector<int>{H}, 0.0), 1e-12);
    m_check_rows_standardized(Y, 1e-12, 1e-5);
    // Float, eps = 1e-5 as in training: still mean ~0, variance ~1.
    TF Yf = LayerNorm(to_float(X), TF(std::vector<int>{H}, 1.0f), TF(std::vector<int>{H}, 0.0f), 1e-5);
    m_check_rows_standardized(Yf, 1e-5, 1e-4);
    // Shifting and scaling a row does not change the normalized output (eps tiny).
    TD X2 = X;
    for (int j = 0; j < H; j++) X2(2, j) = 4.0 * X2(2, j) + 100;
    TD Y2 = LayerNorm(X2, TD(std::vector<int>{H}, 1.0), TD(std::vector<int>{H}, 0.0), 1e-12);
    CHECK_CLOSE(Y2, Y, 1e-9, "LayerNorm with row 3 scaled by 4 and shifted by 100", "LayerNorm(X): a row's scale and offset cancel, formulas §15");
}

TEST_CASE("LayerNorm: wrong shape" * doctest::test_suite("assignment 2")) {
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

TEST_CASE("LayerNorm: a constant row gives exactly beta (H 768, eps 1e-12), and an offset of 1000 costs no precision" * doctest::test_suite("assignment 2 (0 points)")) {
    const int H = 768;
    Tensor<float> gamma({H}), beta({H});
    Rng r(5);
    for (int j = 0; j < H; j++) gamma[j] = (float)(1 + 0.1 * r.normal()), beta[j] = (float)(0.1 * r.normal());
    for (const float value : {0.1f, -1000.3f, 3.0e4f, 1e-20f}) {
        for (const double eps : {1e-12, 1e-5}) {
            const Tensor<float> Y = LayerNorm(Tensor<float>(1, H, value), gamma, beta, eps);
            INFO("value " << value << ", eps " << eps);
            CHECK(m_bits_equal(Y, Tensor<float>::from(1, H, std::vector<float>(beta.data.begin(), beta.data.end()))));
        }
    }
    // Rows of 1000 +- 0.5: float LayerNorm against a double computation of the same numbers.
    Tensor<float> X(4, H);
    for (auto& v : X.data) v = (float)(1000.0 + r.uniform() - 0.5);
    const Tensor<float> Y = LayerNorm(X, gamma, beta, 1e-5);
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        double mu = 0, var = 0;
        for (int j = 0; j < H; j++) mu += X(i, j);
        mu /= H;
        for (int j = 0; j < H; j++) var += (X(i, j) - mu) * (X(i, j) - mu);
        var /= H;
        for (int j = 0; j < H; j++)
            worst = nan_max(worst, std::abs(Y(i, j) - (gamma[j] * (X(i, j) - mu) / std::sqrt(var + 1e-5) + beta[j])));
    }
    CHECK(worst < 2e-6);  // float rounding of the output; the old float mean was off by ~1e-2
    // In double, rows of 1e8 +- 0.5: the variance is the mean of (x - mu)^2, which keeps every digit,
    // not E[x^2] - mu^2, which keeps none here (x^2 is about 1e16, whose rounding step is 2).
    const int Hd = 16;
    Tensor<double> Xd(2, Hd), gd({Hd}, 1.0), bd({Hd}, 0.0);
    for (auto& v : Xd.data) v = 1e8 + r.uniform() - 0.5;
    const Tensor<double> Yd = LayerNorm(Xd, gd, bd, 1e-5);
    for (int i = 0; i < 2; i++) {
        double d_mean = 0, var = 0;
        for (int j = 0; j < Hd; j++) d_mean += Xd(i, j) - Xd(i, 0);
        const double mu = Xd(i, 0) + d_mean / Hd;
        for (int j = 0; j < Hd; j++) var += (Xd(i, j) - mu) * (Xd(i, j) - mu);
        var /= Hd;
        for (int j = 0; j < Hd; j++) CHECK(Yd(i, j) == doctest::Approx((Xd(i, j) - mu) / std::sqrt(var + 1e-5)).epsilon(1e-6));
    }
}

// ================================================================================================
// CrossEntropy
// ================================================================================================
TEST_CASE("CrossEntropy: hand-computed case" * doctest::test_suite("assignment 4")) {
    // y = (0, 1, 0), yhat = (1/4, 1/2, 1/4): - log(1/2) = ln 2 = 0.6931471805599453.
    TD yhat = TD::vector({0.25, 0.5, 0.25});
    CHECK(CrossEntropy(TD::vector({0, 1, 0}), yhat) == doctest::Approx(0.6931471805599453).epsilon(1e-15));
    // Soft target y = (1/2, 1/2, 0): - (1/2 ln(1/4) + 1/2 ln(1/2)) = (ln 4 + ln 2) / 2 = 1.5 ln 2.
    TD y = TD::vector({0.5, 0.5, 0});
    CHECK(CrossEntropy(y, yhat) == doctest::Approx(1.5 * 0.6931471805599453).epsilon(1e-15));
    // d/dyhat_j = - y_j / yhat_j = (-0.5 / 0.25, -0.5 / 0.5, 0) = (-2, -1, 0).
    CHECK_CLOSE(CrossEntropy_backward(y, yhat), vec({-2, -1, 0}), 0.0,
                "CrossEntropy_backward(y = (1/2, 1/2, 0), yhat = (1/4, 1/2, 1/4))",
                "hand-computed -y_j / yhat_j = (-0.5 / 0.25, -0.5 / 0.5, 0), formulas §17");
    // 0 log 0 := 0: a zero prediction where y is zero costs nothing and gives no NaN.
    TD y1 = TD::vector({0, 1, 0}), p1 = TD::vector({0, 1, 0});
    CHECK(CrossEntropy(y1, p1) == 0.0);
    CHECK_CLOSE(CrossEntropy_backward(y1, p1), vec({0, -1, 0}), 0.0, "CrossEntropy_backward(y = (0, 1, 0), yhat = (0, 1, 0))",
                "hand-computed -y_j / yhat_j with 0 / 0 := 0 where y_j = 0 (0 log 0 := 0), formulas §17");
    // Float.
    CHECK(CrossEntropy(TF::vector({0, 1}), TF::vector({0.5f, 0.5f})) == doctest::Approx(0.6931472f));
}

TEST_CASE("CrossEntropy: gradient check of d yhat" * doctest::test_suite("assignment 4")) {
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
    REQUIRE(d.shape == yhat.shape);
    CHECK_MESSAGE(d[2] == 0.0, "CrossEntropy_backward's d yhat, entry 3 where y_3 = 0: expected exactly 0 (-y_j / yhat_j, "
                               "formulas §17), got " << d[2]);
    grad_check([&] { return CrossEntropy(y, yhat); }, yhat, d, "CrossEntropy_backward's d yhat (6 entries, y_3 = 0)",
               "§17 d yhat_j = -y_j / yhat_j");
}

TEST_CASE("CrossEntropy: equals CrossEntropy_logits on OneHot targets and Softmax predictions" * doctest::test_suite("assignment 4 (0 points)")) {
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

TEST_CASE("CrossEntropy: wrong shape" * doctest::test_suite("assignment 4")) {
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
    grad_check([&] { return CrossEntropy_logits(Z, t); }, Z, dZ, "CrossEntropy_logits's dZ (Z 5x6, rows 2 and 5 without a target)",
               "§17 dZ_{i,:} = (Softmax(Z_{i,:}) - OneHot(t_i)) / |R|; dZ_{i,:} = 0 for i not in R");
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
    // An entry is dropped when its draw u < p, so P(drop) = p exactly for a uniform u: a draw equal
    // to p is kept. Here p is the first draw itself; the second is dropped iff it is below p.
    Rng e(19), f(19);
    const double u0 = e.uniform(), u1 = e.uniform();
    TD m = dropout_mask<double>({1, 2}, u0, f);
    CHECK(m(0, 0) == 1 / (1 - u0));
    CHECK(m(0, 1) == (u1 < u0 ? 0.0 : 1 / (1 - u0)));
}

TEST_CASE("dropout_mask: bad p and wrong shape") {
    Rng rng(133);
    CHECK_THROWS_NAMING(Error, dropout_mask<double>({2, 2}, 1.0, rng), "p", "1");
    CHECK_THROWS_AS(dropout_mask<double>({2, 2}, 1.5, rng), Error);
    // A NaN p (a typo in a config) must not give a mask of NaNs.
    CHECK_THROWS_AS(dropout_mask<double>({2, 2}, std::numeric_limits<double>::quiet_NaN(), rng), Error);
    CHECK_THROWS_NAMING(ShapeError, dropout_mask<double>({2, -2}, 0.5, rng), "2x-2");
    // The generator by pointer: p = 0 needs none; p > 0 without one names the p.
    CHECK(dropout_mask<double>({2, 2}, 0.0, (Rng*)nullptr).empty());
    CHECK(dropout_mask<float>({2, 2}, 0.0, (Rng*)nullptr).empty());
    CHECK_THROWS_NAMING(Error, dropout_mask<double>({2, 2}, 0.25, (Rng*)nullptr), "random generator", "0.25");
    Rng g(5), h(5);
    CHECK(m_bits_equal(dropout_mask<float>({3, 2}, 0.5, &g), dropout_mask<float>({3, 2}, 0.5, h)));
    CHECK(g.state == h.state);
    TD X(3, 4);
    CHECK_THROWS_NAMING(ShapeError, multiply_inplace(X, TD(4, 3, 1.0)), "3x4", "4x3");
}

// ================================================================================================
// Rng
// ================================================================================================
// An Rng whose draw number k (from 0) of next() is `out`. splitmix64's output function is a
// bijection (xor-shifts and products with odd constants), so the state can be solved for: tests use
// it to put a draw exactly on a boundary (u = p), which a seed meets once in 2^53 draws.
static uint64_t m_unxorshift(uint64_t y, int s) {  // x from y = x ^ (x >> s)
    uint64_t x = y;
    for (int i = s; i < 64; i += s) x ^= y >> i;
    return x;
}
static uint64_t m_inverse_odd(uint64_t a) {  // a * inv = 1 mod 2^64 (Newton: 3, 6, 12, ... 96 bits)
    uint64_t inv = a;
    for (int i = 0; i < 5; i++) inv *= 2 - a * inv;
    return inv;
}
static Rng m_rng_drawing(int k, uint64_t out) {
    uint64_t z = m_unxorshift(out, 31) * m_inverse_odd(0x94D049BB133111EBull);
    z = m_unxorshift(z, 27) * m_inverse_odd(0xBF58476D1CE4E5B9ull);
    Rng r;
    r.state = m_unxorshift(z, 30) - (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull;
    return r;
}
// ... whose uniform() number k is u (a multiple of 2^-53 in [0, 1)).
static Rng m_rng_uniform(int k, double u) {
    const uint64_t m = (uint64_t)(u * 9007199254740992.0);
    REQUIRE((double)m == u * 9007199254740992.0);
    return m_rng_drawing(k, m << 11);
}

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
    // normal() is Box-Muller on two uniforms: sqrt(-2 ln u1) cos(2 pi u2), value for value.
    Rng g(0);
    const double u1 = (double)(0xE220A8397B1DCDAFull >> 11) / 9007199254740992.0;
    const double u2 = (double)(0x6E789E6AA1B965F4ull >> 11) / 9007199254740992.0;
    // Box-Muller with the program's own log and cos(pi t) (math::), within 1e-15 of the C library's.
    const double z = g.normal();
    CHECK(z == std::sqrt(-2.0 * math::log(u1)) * math::cos_pi(2.0 * u2));
    CHECK(z == doctest::Approx(std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * 3.141592653589793 * u2)).epsilon(1e-15));
    CHECK(g.next() == 0x06C45D188009454Full);  // two draws, no more
    // The solved states: draw k is the asked value (state 0 gives splitmix64's first output).
    CHECK(m_rng_drawing(0, 0xE220A8397B1DCDAFull).state == 0);
    for (uint64_t out : {0ull, 1ull, 0x8000000000000000ull, 0x06C45D188009454Full, ~0ull})
        for (int k : {0, 1, 3}) {
            Rng q = m_rng_drawing(k, out);
            for (int i = 0; i < k; i++) q.next();
            CHECK(q.next() == out);
        }
    // A first uniform of exactly 0 (one draw in 2^53): u1 is taken as 1e-300, so the value is finite.
    Rng h = m_rng_uniform(0, 0.0), h2 = h;
    CHECK(h2.uniform() == 0.0);
    const double v2 = h2.uniform();
    const double v = h.normal();
    CHECK(std::isfinite(v));
    CHECK(v == std::sqrt(-2.0 * math::log(1e-300)) * math::cos_pi(2.0 * v2));
    CHECK(v == doctest::Approx(std::sqrt(-2.0 * std::log(1e-300)) * std::cos(2 * 3.141592653589793 * v2)).epsilon(1e-15));
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
    CHECK(rng.below(1) == 0);
    CHECK_THROWS_NAMING(Error, rng.below(0), "empty range 0..-1");
    CHECK_THROWS_NAMING(Error, rng.below(-3), "empty range 0..-4");
}
TEST_SUITE_END();

// ================================================================================================
// Parameters
// ================================================================================================
TEST_SUITE_BEGIN("models");
TEST_CASE("parameters: the formulas' lambda for GPT-1 is 116,497,920") {
    const ParamCount k = count_params(preset("gpt1"));
    CHECK(k.seed_lambda == 116497920LL);
    CHECK(k.actual == 116497920LL);  // GPT: no final LayerNorm, no segment vectors
    CHECK(k.embeddings + k.attention + k.ffn + k.layernorms == k.seed_lambda);
}

TEST_CASE("parameters: actual counts of every preset (lambda + ln_f for GPT-2/3, + w_A, w_B for BERT)") {
    // Each released model's activation and LayerNorm epsilon (formulas §13, §15).
    CHECK(preset("gpt1").activation == Activation::gelu_sigmoid);
    CHECK(preset("gpt2-124m").activation == Activation::gelu_tanh);
    CHECK(preset("gpt3-125m").activation == Activation::gelu_tanh);
    CHECK(preset("bert-base").activation == Activation::gelu_erf);
    CHECK(preset("roberta-base").activation == Activation::gelu_erf);
    CHECK(preset("bert-base").eps == 1e-12);
    CHECK(preset("gpt2-124m").eps == 1e-5);
    for (const std::string& name : preset_names()) {
        CAPTURE(name);
        const Config c = preset(name);
        const ParamCount k = count_params(c);
        const long long V = c.V, H = c.H, F = c.F, D = c.D, L = c.L, A = c.A, n = c.n_ctx;
        const long long lambda =
            V * H + n * H + L * (A * (H * D + H * D + H * D) + A * D * H) + L * (H * F + F + F * H + H) + L * 4 * H;
        CHECK(k.seed_lambda == lambda);
        const long long biases = c.attn_bias ? L * (A * 3 * D + H) : 0;
        CHECK(k.attn_biases == biases);
        const long long extra = (is_pre_ln(c.variant) ? 2 * H : 0) + (has_segments(c.variant) ? 2 * H : 0) + biases;
        CHECK(k.actual == lambda + extra);
        if (c.variant == Variant::gpt2 || c.variant == Variant::gpt3 || c.variant == Variant::bert)
            CHECK(k.actual == k.seed_lambda + 2 * H + biases);
        else CHECK(k.actual == k.seed_lambda + biases);
    }
    // Published sizes without the parts this model leaves out (BERT's and RoBERTa's pooler and
    // embedding LayerNorm, RoBERTa's one-row token type embedding): GPT-2 small 124,439,808;
    // BERT-base 109,482,240 - 590,592 - 1,536; RoBERTa-base 124,645,632 - 590,592 - 1,536 - 768.
    CHECK(count_params(preset("gpt2-124m")).actual == 124439808LL);
    CHECK(count_params(preset("gpt2-124m")).attn_biases == 36864);
    CHECK(count_params(preset("bert-base")).actual == 109482240LL - 590592 - 1536);
    CHECK(count_params(preset("roberta-base")).actual == 124645632LL - 590592 - 1536 - 768);
    CHECK(count_params(preset("gpt1")).actual == 116497920LL);  // GPT-1 as formulas §24 counts it: no attention biases
}

TEST_CASE("parameters: named tensors of every tiny preset add up to the actual count, names unique") {
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        const Config c = preset(name);
        Params<float> p = make_params<float>(c);
        long long total = 0;
        std::set<std::string> names;
        for (auto& nt : named_tensors(c, p)) total += (long long)nt.tensor->size(), names.insert(nt.name);
        CHECK(total == count_params(c).actual);
        CHECK(names.size() == named_tensors(c, p).size());
        CHECK(names.count("W_e") == 1);
        CHECK(names.count("layers.1.attn.W_V.1") == 1);
        CHECK(names.count("w_A") == (has_segments(c.variant) ? 1u : 0u));
        CHECK(names.count("ln_f.gamma") == (is_pre_ln(c.variant) ? 1u : 0u));
    }
    // Every optional tensor, one option at a time, on every preset that takes it: the count adds
    // exactly its numbers (XLNet's w: H; the MLM head: H*H + H + 2H + V; W_y: its rows x cols ...).
    std::vector<int> checked(9, 0);
    for (const std::string name : m_TINY)
        for (int opt = 1; opt < 9; opt++) {
            Config c = preset(name);
            const long long H = c.H, V = c.V, A = c.A, D = c.D, L = c.L, before = count_params(c).actual;
            long long added = 0;
            switch (opt) {
                case 1: c.attn_bias = true, added = L * (3 * A * D + H); break;
                case 2: c.W_y_rows = 2 * c.H, c.W_y_cols = 3, added = 2 * H * 3; break;
                case 3: c.xlnet = true, added = H; break;
                case 4: c.emb_ln = true, added = 2 * H; break;
                case 5: c.mlm_head = true, added = H * H + H + 2 * H + V; break;
                case 6: c.pooler = true, added = H * H + H; break;
                case 7: c.pad_id = 1, added = H; break;
                case 8: c.pad_id = 0, added = H; break;  // id 0 is a pad id too (-1: none)
            }
            try {
                validate(c);
            } catch (const Error&) {
                continue;  // an option this variant does not take
            }
            CAPTURE(name);
            CAPTURE(opt);
            checked[opt]++;
            CHECK(count_params(c).actual == before + added);
            Params<float> p = make_params<float>(c);
            long long total = 0;
            for (auto& nt : named_tensors(c, p)) total += (long long)nt.tensor->size();
            CHECK(total == before + added);
        }
    for (int opt = 1; opt < 9; opt++) CHECK(checked[opt] > 0);
}

TEST_CASE("parameters: scale_residual_init multiplies W^O and W_2 of every layer by 1/sqrt(2L), nothing else") {
    Config c = preset("tiny-gpt2");
    c.L = 3;
    Params<double> p = make_params<double>(c);
    init_params(c, p, 5);
    Params<double> before = p;
    scale_residual_init(c, p);
    const double s = 1.0 / std::sqrt(6.0);  // GPT-2: the residual projections scaled by 1/sqrt(2L), L = 3
    auto now = named_tensors(c, p);
    auto was = named_tensors(c, before);
    REQUIRE(now.size() == was.size());
    int scaled = 0;
    for (std::size_t k = 0; k < now.size(); k++) {
        const std::string& name = now[k].name;
        const bool residual = name.find("W_O") != std::string::npos || name.find("W_2") != std::string::npos;
        scaled += residual;
        INFO(name);
        for (std::size_t i = 0; i < now[k].tensor->size(); i++)
            CHECK((*now[k].tensor)[i] == (residual ? (*was[k].tensor)[i] * s : (*was[k].tensor)[i]));
    }
    CHECK(scaled == 2 * c.L);
}

TEST_CASE("parameters: init_params is reproducible, N(0, 0.02) matrices, gamma 1, beta and biases 0") {
    Config c = preset("tiny-bert");
    c.V = 100, c.H = 64, c.F = 256, c.D = 16, c.A = 4, c.L = 2, c.n_ctx = 64;
    Params<float> p = make_params<float>(c), q = make_params<float>(c), r = make_params<float>(c);
    init_params(c, p, 42);
    init_params(c, q, 42);
    init_params(c, r, 43);
    CHECK(m_params_bits_equal(c, p, q));
    CHECK_FALSE(m_bits_equal(p.W_e, r.W_e));
    CHECK_FALSE(m_bits_equal(p.layers[1].ffn.W_2, r.layers[1].ffn.W_2));
    double s1 = 0, s2 = 0, within = 0;
    long long count = 0;
    for (auto& nt : named_tensors(c, p)) {
        CAPTURE(nt.name);
        const Tensor<float>& t = *nt.tensor;
        const bool gamma = m_contains(nt.name, "gamma");
        if (t.shape.size() == 2 || nt.name == "w_A" || nt.name == "w_B") {
            double a = 0, b = 0;
            for (float v : t.data) a += v, b += (double)v * v, within += std::fabs(v) < 0.02;
            s1 += a, s2 += b, count += (long long)t.size();
            const double sd = std::sqrt(b / (double)t.size() - (a / (double)t.size()) * (a / (double)t.size()));
            if (t.size() >= 4096) CHECK(sd == doctest::Approx(0.02).epsilon(0.05));
            else CHECK((sd > 0.01 && sd < 0.03));
        } else {
            for (float v : t.data) CHECK(v == (gamma ? 1.0f : 0.0f));
        }
    }
    const double mean = s1 / (double)count, sd = std::sqrt(s2 / (double)count - mean * mean);
    CHECK(std::fabs(mean) < 3e-4);
    CHECK(sd == doctest::Approx(0.02).epsilon(0.02));
    CHECK(within / (double)count == doctest::Approx(0.6827).epsilon(0.02));  // normal, not uniform
}

TEST_CASE("parameters: validate refuses configs too large to allocate, W_p (n_ctx x H) included") {
    Config c = preset("tiny-gpt");
    c.n_ctx = 1000000000;  // W_p alone would be 8e9 floats (32 GB)
    M_CHECK_TF_ERROR(validate(c), "2e9");
    c = preset("tiny-gpt");
    c.V = 1000000000;
    M_CHECK_TF_ERROR(validate(c), "2e9");
    c = preset("tiny-gpt");
    c.H = 0;
    M_CHECK_TF_ERROR(validate(c), "H");
    c = preset("tiny-bert");
    c.mask_id = c.V;
    M_CHECK_TF_ERROR(validate(c), "mask_id");
    c = preset("tiny-gpt3");
    c.st_window = 0;
    M_CHECK_TF_ERROR(validate(c), "st_window");
    for (const std::string& name : preset_names()) CHECK_NOTHROW(validate(preset(name)));
}

TEST_CASE("params of the released files' shapes: GPT-1 116,534,784 floats, bert-base-uncased 110,104,890 + 1,538") {
    Config g = preset("gpt1");
    g.attn_bias = true;  // what import_hf_openai_gpt makes of openai-gpt's 146 arrays
    const ParamCount k = count_params(g);
    CHECK(k.seed_lambda == 116497920);
    CHECK(k.attn_biases == 36864);
    CHECK(k.actual == 116534784);  // the sum of OpenAI's params_shapes.json
    Config b = preset("bert-base");
    b.emb_ln = b.mlm_head = b.pooler = true;
    const ParamCount kb = count_params(b);
    CHECK(kb.actual - kb.mlm_head == 109482240);  // BertModel with its pooler, the published count
    CHECK(kb.mlm_head == 768 * 768 + 3 * 768 + 30522);
    CHECK(kb.actual + 2 * 768 + 2 == 110106428);  // with the next-sentence head: BertForPreTraining
}

// ================================================================================================
// Whole-model gradient checks (double, every parameter tensor)
// ================================================================================================
TEST_CASE("GPT: whole-model gradient check of every parameter tensor (B = 2, n = 6)" * doctest::test_suite("assignment 4")) {
    m_model_grad_check("tiny-gpt", 101);
}
TEST_CASE("GPT-2: whole-model gradient check of every parameter tensor (B = 2, n = 6)" * doctest::test_suite("assignment 4")) {
    m_model_grad_check("tiny-gpt2", 202);
}
TEST_CASE("GPT-2: whole-model gradient check with attention biases (attn_bias, as released GPT-2)" * doctest::test_suite("assignment 4")) {
    m_model_grad_check("tiny-gpt2", 207, true);
}
TEST_CASE("GPT-3: whole-model gradient check of every parameter tensor (B = 2, n = 6)" * doctest::test_suite("assignment 4")) {
    m_model_grad_check("tiny-gpt3", 303);
}
TEST_CASE("BERT: whole-model gradient check of every parameter tensor (segments, masked targets)" * doctest::test_suite("assignment 4")) {
    m_model_grad_check("tiny-bert", 404);
}
TEST_CASE("RoBERTa: whole-model gradient check of every parameter tensor (masked targets)" * doctest::test_suite("assignment 4")) {
    m_model_grad_check("tiny-roberta", 505);
}
// A mistake planted in the walk itself: change(s, l, d) may rewrite the gradient of stage (s, l) as the
// backward reports it, and so as it flows on.
struct m_Plant : Trace {
    using Trace::backward;
    std::function<void(Stage, int, TD&)> change;
    void backward(Stage s, int l, TD& d) override { change(s, l, d); }
};
TEST_CASE("localising: a wrong whole-model gradient is summed up per group and located at its function and layer") {
    // Mistakes planted in the walk (m_Plant: the gradient a block passes down, as its code would
    // compute it wrongly) and in the gradient model_loss returns; each report must stay short and
    // name the function and the stage where the mistake is (locate_backward, make check's walk).
    auto lines = [](const std::string& s) { return (int)std::count(s.begin(), s.end(), '\n'); };
    const Config c = preset("tiny-gpt2");
    Params<double> p = m_model<double>(c, 202, 0.2);
    const Batch b = m_batch(c, 203);
    auto locate_with = [&](Trace* plant) {
        std::string s;
        for (const std::string& line : m_locate_model_loss(c, p, b, 0, 0, plant)) s += line + "\n";
        return s;
    };
    {  // The right gradient: no stage and no parameter disagrees.
        Params<double> g = make_params<double>(c);
        model_loss(c, p, b, &g);
        const m_GradReport r = m_grad_report(c, p, g, [&](Params<double>* q) { return model_loss(c, p, b, q); }, 1, "right", {});
        CHECK_MESSAGE(r.right, r.text);
        const std::string s = locate_with(nullptr);
        CHECK_MESSAGE(m_contains(s, "(every stage and every parameter agrees"), "a right walk: expected every stage to agree, got:\n" << s);
        CHECK_MESSAGE(!m_contains(s, "first wrong"), "a right walk names no function, got:\n" << s);
    }
    {  // model_loss's W_e gradient halved (the tied W_e's second use forgotten, say): one group wrong.
        auto loss = [&](Params<double>* q) {
            const double L = model_loss(c, p, b, q);
            if (q) multiply_inplace(q->W_e, TD(q->W_e.shape, 0.5));
            return L;
        };
        Params<double> g = make_params<double>(c);
        loss(&g);
        WalkLoss walk = [&](Params<double>* q, Trace* t) {
            ForwardOptions o;
            o.trace = t;
            const double L = model_loss(c, p, b, q, o);
            if (q) multiply_inplace(q->W_e, TD(q->W_e.shape, 0.5));
            return L;
        };
        const m_GradReport r = m_grad_report(c, p, g, loss, 1, "halved W_e", [&] { return locate_backward(c, p, b, walk, 3); });
        CHECK_FALSE(r.right);
        INFO(r.text);
        CHECK(m_contains(r.text, "halved W_e: the gradient of 1 of 5 parameter groups disagrees"));
        CHECK(m_contains(r.text, "  WRONG  W_e: entry ("));
        CHECK(m_contains(r.text, "  right  layer 1\n"));
        CHECK(m_contains(r.text, "first wrong: model_backward (§17), its gradient of W_e; every stage's gradient is right"));
        CHECK(lines(r.text) <= 30);
    }
    for (int l : {1, 2}) {  // layer l's block backward: half its dX^(l-1), or no gradient for its W_1
        for (bool dX_wrong : {true, false}) {
            m_Plant half;
            half.change = [&](Stage s, int at, TD& d) {
                if (dX_wrong && s == Stage::X && at == l - 1) multiply_inplace(d, TD(d.shape, 0.5));
            };
            WalkLoss walk = [&](Params<double>* q, Trace* t) {
                m_Chain chain;
                chain.plant = &half, chain.next = t;
                ForwardOptions o;
                o.trace = &chain;
                const double L = model_loss(c, p, b, q, o);
                if (q && !dX_wrong) q->layers[l - 1].ffn.W_1 = TD(q->layers[l - 1].ffn.W_1.shape, 0.0);
                return L;
            };
            std::string s;
            for (const std::string& line : locate_backward(c, p, b, walk, 5)) s += line + "\n";
            INFO(s);
            const std::string layer = "pre_ln_block_backward of layer " + std::to_string(l) + " (§19)";
            const std::string dX = "dX^(" + std::to_string(l - 1) + ")";
            CHECK(m_contains(s, "first wrong: " + layer + (dX_wrong ? ", its " + dX + " = dX'^(" + std::to_string(l) + ") + LayerNorm_backward(" : ", its gradient of layers." + std::to_string(l - 1) + ".ffn.W_1")));
            if (dX_wrong) CHECK(m_contains(s, "backward = 0.5 \u00d7 finite difference at every entry compared: a factor of "));
            if (l == 1 && dX_wrong) CHECK(m_contains(s, "  right  layer 2: "));
            CHECK(m_contains(s, "(counted from 1): expected "));
            CHECK(lines(s) <= 12);
        }
    }
    {  // pre_ln_block_backward of layer 2 dropping its residual path: dX^(1) without the dX'^(2) term.
        TD dX_mid;
        m_Plant drop;
        drop.change = [&](Stage s, int at, TD& d) {
            if (s == Stage::X_mid && at == 2) dX_mid = d;
            if (s != Stage::X || at != 1) return;
            multiply_inplace(dX_mid, TD(d.shape, -1.0));
            add_inplace(d, dX_mid);
        };
        const std::string s = locate_with(&drop);
        INFO(s);
        CHECK(m_contains(s, "first wrong: pre_ln_block_backward of layer 2 (§19), its dX^(1) = dX'^(2) + LayerNorm_backward(dLayerNorm(X^(1)))"));
        CHECK(m_contains(s, "backward \u2212 finite difference = \u2212dX'^(2) at every entry compared: the term dX'^(2) left out (a path dropped)?"));
    }
    {  // BERT: w_A's and w_B's gradients swapped after the walk: every stage right, model_backward named.
        const Config cb = preset("tiny-bert");
        Params<double> pb = m_model<double>(cb, 404, 0.2);
        const Batch bb = m_batch(cb, 405);
        WalkLoss walk = [&](Params<double>* q, Trace* t) {
            ForwardOptions o;
            o.trace = t;
            const double L = model_loss(cb, pb, bb, q, o);
            if (q) std::swap(q->w_A, q->w_B);
            return L;
        };
        std::string s;
        for (const std::string& line : locate_backward(cb, pb, bb, walk, 7)) s += line + "\n";
        CHECK_MESSAGE(m_contains(s, "first wrong: model_backward (§17), its gradient of w_A; every stage's gradient is right"), s);
    }
}

TEST_CASE("dropout: reproducible masks, whole-model gradient check with dropout for every variant" * doctest::test_suite("assignment 4")) {
    for (const std::string name : m_TINY)
        if (!m_model_grad_check_dropout(name, 606)) {
            MESSAGE("the variants after " << name << " are not checked: the first wrong one is enough to look at");
            break;
        }
}

// ================================================================================================
// Causality and the masks of each layer
// ================================================================================================
TEST_CASE("GPT: changing x_k leaves rows < k bit-identical and changes row k") { m_check_causality("tiny-gpt"); }
TEST_CASE("GPT-2: changing x_k leaves rows < k bit-identical and changes row k") { m_check_causality("tiny-gpt2"); }
TEST_CASE("GPT-3: changing x_k leaves rows < k bit-identical and changes row k") { m_check_causality("tiny-gpt3"); }
TEST_CASE("BERT: changing x_k changes earlier rows (bidirectional)") { m_check_causality("tiny-bert"); }
TEST_CASE("RoBERTa: changing x_k changes earlier rows (bidirectional)") { m_check_causality("tiny-roberta"); }

TEST_CASE("GPT-3: layer_mask alternates Mask_ST (code layer 0 = formula l = 1, odd) and Mask_AR") {
    Config c = preset("tiny-gpt3");
    c.L = 4;
    const int n = 9;
    const Tensor<double> ST = Mask_ST<double>(n, c.st_window, c.st_stride), AR = Mask_AR<double>(n);
    CHECK_FALSE(m_bits_equal(ST, AR));  // the tiny preset's pattern really is sparse
    for (int l = 0; l < c.L; l++) {
        CAPTURE(l);
        CHECK(m_bits_equal(layer_mask<double>(c, l, n), l % 2 == 0 ? ST : AR));
    }
    for (const std::string name : {"tiny-gpt", "tiny-gpt2"})
        for (int l = 0; l < 2; l++) CHECK(m_bits_equal(layer_mask<double>(preset(name), l, n), AR));
    for (const std::string name : {"tiny-bert", "tiny-roberta"})
        for (int l = 0; l < 2; l++) CHECK(m_bits_equal(layer_mask<double>(preset(name), l, n), Mask_BD<double>(n)));
}

TEST_CASE("GPT-3: a one-layer model (Mask_ST only) ignores positions outside the sparse pattern") {
    // tiny-gpt3: window 2, stride 3. Row 5 sees j with 5 - j < 2 or (5 - j) % 3 == 0: j = 5, 4, 2.
    Config c = preset("tiny-gpt3");
    REQUIRE(c.st_window == 2);
    REQUIRE(c.st_stride == 3);
    c.L = 1;
    const Params<double> p = m_model<double>(c, 21, 0.2);
    Batch b;
    b.n = 8;
    b.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
    const Tensor<double> Z0 = model_forward(c, p, b);
    for (int k = 0; k < 6; k++) {
        Batch b2 = b;
        b2.tokens[k] = 9;
        const Tensor<double> Z1 = model_forward(c, p, b2);
        CAPTURE(k);
        const bool seen = k == 5 || k == 4 || k == 2;
        CHECK(m_row_bits_equal(Z0, Z1, 5) == !seen);
    }
    // Two layers (ST, then AR): row 5 now reaches x_3 through row 4.
    c.L = 2;
    const Params<double> p2 = m_model<double>(c, 21, 0.2);
    Batch b3 = b;
    b3.tokens[3] = 9;
    CHECK_FALSE(m_row_bits_equal(model_forward(c, p2, b), model_forward(c, p2, b3), 5));
}

TEST_CASE("GPT-2: a batch of B sequences gives each sequence the logits it gets alone") {
    m_each_tiny<double>(8, 0.2, 9, [](const Config& c, const Params<double>& p, const Batch& b) {
        const Tensor<double> Z = model_forward(c, p, b);
        for (int s = 0; s < b.B; s++) {
            Batch one;
            one.n = b.n;
            one.tokens.assign(b.tokens.begin() + s * b.n, b.tokens.begin() + (s + 1) * b.n);
            if (!b.segments.empty()) one.segments.assign(b.segments.begin() + s * b.n, b.segments.begin() + (s + 1) * b.n);
            const Tensor<double> Z1 = model_forward(c, p, one);
            for (int i = 0; i < b.n; i++)
                for (int v = 0; v < c.V; v++) CHECK(Z1(i, v) == doctest::Approx(Z(s * b.n + i, v)).epsilon(1e-12));
        }
    });
}

// ================================================================================================
// The formula boxes' outputs
// ================================================================================================
TEST_CASE("GPT: GPT(x), GPT2(x), GPT3(x) are Softmax of the last logits row, a distribution over V") {
    for (const std::string name : {"tiny-gpt", "tiny-gpt2", "tiny-gpt3"}) {
        CAPTURE(name);
        const Config c = preset(name);
        const Params<double> p = m_model<double>(c, 3, 0.2);
        const std::vector<int> x = {3, 1, 4, 1, 5, 9, 2};
        const Tensor<double> y = GPT(c, p, x);
        REQUIRE(y.shape == std::vector<int>{c.V});
        double sum = 0;
        for (double v : y.data) {
            CHECK(v > 0);
            sum += v;
        }
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
        Batch b;
        b.n = (int)x.size(), b.tokens = x;
        const Tensor<double> Y = Softmax(model_forward(c, p, b));
        for (int v = 0; v < c.V; v++) CHECK(y[v] == doctest::Approx(Y(b.n - 1, v)).epsilon(1e-12));
        CHECK_THROWS_AS(BERT(c, p, x, std::vector<int>(x.size(), 0), 1), tf::Error);
    }
    const Config cb = preset("tiny-bert");
    const Params<double> pb = make_params<double>(cb);
    CHECK_THROWS_AS(GPT(cb, pb, {1, 2}), tf::Error);
}

TEST_CASE("BERT: BERT(x, t, j) is Softmax of logits row j, segments matter") {
    const Config c = preset("tiny-bert");
    const Params<double> p = m_model<double>(c, 4, 0.2);
    std::vector<int> x, t;
    bert_pair(c, {1, 2, c.mask_id}, {4, 5}, x, t);
    const int j = 3;
    REQUIRE(x[j] == c.mask_id);
    const Tensor<double> y = BERT(c, p, x, t, j);
    REQUIRE(y.shape == std::vector<int>{c.V});
    double sum = 0;
    for (double v : y.data) sum += v;
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    Batch b;
    b.n = (int)x.size(), b.tokens = x, b.segments = t;
    const Tensor<double> Y = Softmax(model_forward(c, p, b));
    for (int v = 0; v < c.V; v++) CHECK(y[v] == doctest::Approx(Y(j, v)).epsilon(1e-12));
    for (int jj : {0, (int)x.size() - 1}) {  // the first and the last row too
        const Tensor<double> yj = BERT(c, p, x, t, jj);
        for (int v = 0; v < c.V; v++) CHECK(yj[v] == doctest::Approx(Y(jj, v)).epsilon(1e-12));
    }
    // Other segment ids give another distribution.
    const Tensor<double> y0 = BERT(c, p, x, std::vector<int>(x.size(), 0), j);
    CHECK_FALSE(m_bits_equal(y, y0));
    M_CHECK_TF_ERROR(BERT(c, p, x, t, (int)x.size()), "j_masked");
    M_CHECK_TF_ERROR(BERT(c, p, x, t, -1), "j_masked");
}

TEST_CASE("RoBERTa: RoBERTa(x, j) is Softmax of logits row j") {
    const Config c = preset("tiny-roberta");
    const Params<double> p = m_model<double>(c, 5, 0.2);
    const std::vector<int> x = {c.cls_id, 1, c.mask_id, 3, c.sep_id};
    for (int j : {0, 2, 4}) {
        const Tensor<double> y = RoBERTa(c, p, x, j);
        Batch b;
        b.n = (int)x.size(), b.tokens = x;
        const Tensor<double> Y = Softmax(model_forward(c, p, b));
        double sum = 0;
        for (int v = 0; v < c.V; v++) {
            sum += y[v];
            CHECK(y[v] == doctest::Approx(Y(j, v)).epsilon(1e-12));
        }
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    }
    M_CHECK_TF_ERROR(RoBERTa(c, p, x, 5), "j_masked");
    M_CHECK_TF_ERROR(RoBERTa(c, p, x, -1), "j_masked");
    CHECK_THROWS_AS(RoBERTa(preset("tiny-bert"), make_params<double>(preset("tiny-bert")), x, 1), tf::Error);
}

TEST_CASE("BERT: rows with t_i = 0 get w_A, rows with t_i = 1 get w_B") {
    const Config c = preset("tiny-bert");
    Params<double> p = m_model<double>(c, 6, 0.2);
    Batch b;
    b.n = 7;
    b.tokens = {c.cls_id, 1, 2, c.sep_id, 3, 4, c.sep_id};
    b.segments = {0, 0, 0, 0, 1, 1, 1};
    b.targets = {-1, 1, -1, -1, 3, -1, -1};
    // X^(0)_i = W_e[x_i] + W_p[i] + (t_i = 0 ? w_A : w_B), so with B = 1 the gradient of W_p row i
    // is dX^(0)_i, and dw_A = sum of the t = 0 rows, dw_B = sum of the t = 1 rows.
    Params<double> g = make_params<double>(c);
    model_loss(c, p, b, &g);
    for (int h = 0; h < c.H; h++) {
        double a = 0, bb = 0;
        for (int i = 0; i < b.n; i++) (b.segments[i] == 0 ? a : bb) += g.W_p(i, h);
        CHECK(g.w_A[h] == doctest::Approx(a).epsilon(1e-10));
        CHECK(g.w_B[h] == doctest::Approx(bb).epsilon(1e-10));
    }
    CHECK(std::fabs(g.w_A[0]) + std::fabs(g.w_B[0]) > 0);
    // Moving w_A into every row of W_p (and zeroing w_A) changes nothing for t = 0 rows, so rows
    // with t_i = 0 really receive w_A (and t_i = 1 rows w_B: same with w_B).
    for (int seg = 0; seg < 2; seg++) {
        CAPTURE(seg);
        Batch same = b;
        same.segments.assign(b.n, seg);
        Params<double> moved = p;
        Tensor<double>& w = seg == 0 ? moved.w_A : moved.w_B;
        for (int i = 0; i < c.n_ctx; i++)
            for (int h = 0; h < c.H; h++) moved.W_p(i, h) += w[h];
        w.zero();
        const Tensor<double> Za = model_forward(c, p, same), Zb = model_forward(c, moved, same);
        for (std::size_t k = 0; k < Za.size(); k++) CHECK(Za[k] == doctest::Approx(Zb[k]).epsilon(1e-10));
    }
    // Swapping w_A and w_B and flipping every t_i gives the same logits, bit for bit.
    const Tensor<double> Z = model_forward(c, p, b);
    Params<double> q = p;
    std::swap(q.w_A, q.w_B);
    Batch flipped = b;
    for (int& t : flipped.segments) t = 1 - t;
    CHECK(m_bits_equal(Z, model_forward(c, q, flipped)));
    // Empty segments mean all t_i = 0 (w_A everywhere).
    Batch none = b, zeros = b;
    none.segments.clear();
    zeros.segments.assign(b.n, 0);
    CHECK(m_bits_equal(model_forward(c, p, none), model_forward(c, p, zeros)));
    // Bad segment ids are an error.
    Batch bad = b;
    bad.segments[2] = 2;
    M_CHECK_TF_ERROR(model_forward(c, p, bad), "segment");
    bad.segments.pop_back();
    M_CHECK_TF_ERROR(model_forward(c, p, bad), "segment");
}

TEST_CASE("BERT: bert_pair builds ([CLS], A, [SEP], B, [SEP]) with t = 0 through the first [SEP]") {
    const Config c = preset("tiny-bert");
    std::vector<int> x = {99}, t = {99};  // overwritten, not appended to
    bert_pair(c, {1, 2}, {3, 4, 5}, x, t);
    CHECK(x == std::vector<int>{c.cls_id, 1, 2, c.sep_id, 3, 4, 5, c.sep_id});
    CHECK(t == std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
    bert_pair(c, {}, {7}, x, t);
    CHECK(x == std::vector<int>{c.cls_id, c.sep_id, 7, c.sep_id});
    CHECK(t == std::vector<int>{0, 0, 1, 1});
}

TEST_CASE("GPT-2: model_forward rejects bad batches with a message") {
    const Config c = preset("tiny-gpt2");
    const Params<float> p = make_params<float>(c);
    Batch b;
    b.n = 3, b.tokens = {1, 2, 13};
    M_CHECK_TF_ERROR(model_forward(c, p, b), "token id 13", "0..12");
    b.tokens = {1, 2, -1};
    M_CHECK_TF_ERROR(model_forward(c, p, b), "token id -1");
    b.n = 17, b.tokens.assign(17, 1);
    M_CHECK_TF_ERROR(model_forward(c, p, b), "n_ctx = 16");
    b.n = 3, b.tokens = {1, 2};
    M_CHECK_TF_ERROR(model_forward(c, p, b), "2 tokens");
    b.n = 0, b.tokens = {};
    M_CHECK_TF_ERROR(model_forward(c, p, b), "positive");
    b.n = 2, b.tokens = {1, 2}, b.targets = {2};
    M_CHECK_TF_ERROR(model_loss(c, p, b), "targets");
    b.targets = {2, 13};
    M_CHECK_TF_ERROR(model_loss(c, p, b), "13");
    b.targets = {};
    M_CHECK_TF_ERROR(model_loss(c, p, b), "no targets");
    ForwardOptions o;
    o.dropout = 0.1;  // no generator
    b.targets = {2, -1};
    M_CHECK_TF_ERROR(model_loss(c, p, b, (Params<float>*)nullptr, o), "random generator");
}

TEST_CASE("model_forward: logit_rows picks rows of X^(L), the first and the last included; model_backward checks dZ's shape" * doctest::test_suite("assignment 4")) {
    const Config c = preset("tiny-bert");
    const Params<double> p = m_model<double>(c, 45, 0.2);
    const Batch b = m_batch(c, 46);
    const TD all = model_forward(c, p, b);
    const int last = b.B * b.n - 1;
    const std::vector<int> rows = {0, last, 3};
    ForwardOptions o;
    o.logit_rows = &rows;
    ForwardCache<double> k;
    const TD some = model_forward(c, p, b, &k, o);
    REQUIRE(some.shape == std::vector<int>{3, c.V});
    TD picked(3, c.V);
    for (int r = 0; r < 3; r++)
        for (int v = 0; v < c.V; v++) picked(r, v) = all(rows[r], v);
    CHECK_CLOSE(some, picked, 0.0, "model_forward(tiny-bert) with logit_rows = {0, last, 3} (code rows)",
                "rows 1, last and 4 of model_forward's full Z (B = 2, n = 6)");
    const std::vector<int> outside = {last + 1}, negative = {-1};
    o.logit_rows = &outside;
    M_CHECK_TF_ERROR(model_forward(c, p, b, &k, o), "logit_rows: row " + std::to_string(last + 1) + " is outside 0.." + std::to_string(last));
    o.logit_rows = &negative;
    M_CHECK_TF_ERROR(model_forward(c, p, b, &k, o), "logit_rows: row -1 is outside");
    // model_backward: dZ must have the shape of the forward's Z.
    o.logit_rows = &rows;
    model_forward(c, p, b, &k, o);
    Params<double> g = make_params<double>(c);
    M_CHECK_TF_ERROR(model_backward(c, p, k, TD(4, c.V), g), "model_backward", "dZ", "4x" + std::to_string(c.V));
}

TEST_CASE("model_forward: model_backward adds a gradient dX_L given at X^(L) (a fine-tuning head's), with and without dZ" * doctest::test_suite("assignment 4")) {
    // loss = sum(Z (.) R) + sum(X^(L) (.) S): dZ = R, dX_L = S; with no logits (dZ empty) only S.
    for (const char* name : {"tiny-gpt2", "tiny-bert"}) {
        for (bool logits : {true, false}) {
            INFO("preset " << std::string(name));
            CAPTURE(logits);
            const Config c = preset(name);
            Params<double> p = m_model<double>(c, 47, 0.2);
            const Batch b = m_batch(c, 48);
            Rng r(49);
            const TD R = randn(b.B * b.n, c.V, r), S = randn(b.B * b.n, c.H, r);
            auto loss = [&](Params<double>* g) {
                ForwardCache<double> k;
                const TD Z = model_forward(c, p, b, &k);
                REQUIRE(k.X_L.shape == S.shape);
                double L = 0;
                for (std::size_t j = 0; j < S.size(); j++) L += k.X_L[j] * S[j];
                if (logits)
                    for (std::size_t j = 0; j < R.size(); j++) L += Z[j] * R[j];
                if (g) model_backward(c, p, k, logits ? R : TD(), *g, &S);
                return L;
            };
            // A wrong gradient is located as model_loss's: the same stages, the same functions.
            const bool right = m_grad_check(c, p, loss, 50,
                                            std::string("model_backward with dX_L given (") + name + (logits ? ", and dZ)" : ", no dZ)"),
                                            [&] { return m_locate_model_loss(c, p, b, 0, 0); });
            if (!right) return;
            // dX_L must have X^(L)'s shape.
            ForwardCache<double> k;
            model_forward(c, p, b, &k);
            Params<double> g = make_params<double>(c);
            const TD wrong(b.B * b.n, c.H + 1);
            CHECK_THROWS_NAMING_NO_CRASH(ShapeError, model_backward(c, p, k, R, g, &wrong), "model_backward", "dX_L");
        }
    }
}

TEST_CASE("model_loss: a masked LM de-embeds only its target rows, with the loss and gradients of every row's logits" * doctest::test_suite("assignment 4")) {
    for (const std::string name : {"tiny-bert", "tiny-roberta"})
        for (bool head : {false, true}) {
            CAPTURE(name);
            CAPTURE(head);
            Config c = preset(name);
            c.mlm_head = head, c.emb_ln = head;
            Params<double> p = m_model<double>(c, 77, 0.5);
            Batch b;
            b.B = 2, b.n = 6;
            b.tokens = {10, 1, 12, 3, 12, 11, 10, 5, 6, 12, 8, 11};
            b.targets = {3, -1, 2, -1, 0, -1, -1, 7, -1, 9, -1, -1};  // row 0 and token id 0 among them
            if (c.variant == Variant::bert) b.segments = {0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1};
            // The reference: every row de-embedded, the rows without a target contribute zero.
            Params<double> g_all = make_params<double>(c);
            ForwardCache<double> k;
            const TD Z = model_forward(c, p, b, &k);
            REQUIRE(Z.rows() == 12);
            TD dZ;
            const double L_all = CrossEntropy_logits(Z, b.targets, &dZ);
            model_backward(c, p, k, dZ, g_all);
            Params<double> g = make_params<double>(c);
            const double L = model_loss(c, p, b, &g);
            CHECK_MESSAGE(L == doctest::Approx(L_all).epsilon(1e-14),
                          "model_loss (" << name << ", 5 target rows of 12): expected " << L_all
                                         << " (CrossEntropy_logits of every row's logits, rows without a target skipped, "
                                            "formulas §17 and §26), got " << L);
            CHECK_MESSAGE(m_params_max_diff(c, g, g_all) < 1e-14,
                          "model_loss's gradients (" << name << "): largest difference from model_backward on every row's "
                                                     << "logits (the rows without a target get dZ = 0): "
                                                     << m_params_max_diff(c, g, g_all) << ", allowed 1e-14");
            // The forward alone on four rows: those rows of the full Z.
            const std::vector<int> rows = {9, 2, 4, 2};
            ForwardOptions o;
            o.logit_rows = &rows;
            const TD Zr = model_forward<double>(c, p, b, nullptr, o);
            REQUIRE(Zr.shape == std::vector<int>{4, c.V});
            bool same = true;
            std::string first_off;
            for (int r = 0; r < 4; r++)
                for (int v = 0; v < c.V; v++) {
                    const bool ok = std::fabs(Zr(r, v) - Z(rows[r], v)) < 1e-14;
                    if (!ok && same)
                        first_off = "entry (" + std::to_string(r + 1) + ", " + std::to_string(v + 1) + "): expected " +
                                    std::to_string(Z(rows[r], v)) + " (row " + std::to_string(rows[r] + 1) +
                                    " of the full Z), got " + std::to_string(Zr(r, v));
                    same &= ok;
                }
            CHECK_MESSAGE(same, "model_forward with logit_rows = {9, 2, 4, 2} (code rows), " << first_off);
            const std::vector<int> bad = {12};
            o.logit_rows = &bad;
            M_CHECK_TF_ERROR(model_forward<double>(c, p, b, nullptr, o), "row 12 is outside 0..11");
        }
}

// ================================================================================================
// Dropout
// ================================================================================================
TEST_CASE("dropout: dropout_mask zeros a fraction p, keeps 1/(1-p), expectation 1") {
    Rng rng(5);
    const double p = 0.3;
    const Tensor<double> m = dropout_mask<double>({400, 250}, p, rng);
    REQUIRE(m.shape == std::vector<int>({400, 250}));
    long long zeros = 0, bad = 0;
    double sum = 0;
    for (double v : m.data) {
        zeros += v == 0;
        bad += v != 0 && v != 1.0 / (1.0 - p);
        sum += v;
    }
    CHECK(bad == 0);
    CHECK((double)zeros / m.size() == doctest::Approx(p).epsilon(0.01 / p));
    CHECK(sum / m.size() == doctest::Approx(1.0).epsilon(0.01));
    CHECK(dropout_mask<double>({3, 3}, 0.0, rng).empty());
    M_CHECK_TF_ERROR(dropout_mask<double>({3, 3}, 1.0, rng), "dropout");
    Rng a(9), b(9);
    CHECK(m_bits_equal(dropout_mask<float>({7, 5}, 0.5, a), dropout_mask<float>({7, 5}, 0.5, b)));
}

TEST_CASE("dropout: 0 is the plain forward; > 0 changes the loss; evaluation is deterministic") {
    m_each_tiny<float>(41, 0.1, 42, [](const Config& c, const Params<float>& p, const Batch& b) {
        Rng rng(1);
        ForwardOptions off;
        off.dropout = 0, off.rng = &rng;
        const uint64_t before = rng.state;
        CHECK(m_bits_equal(model_forward(c, p, b, (ForwardCache<float>*)nullptr, off), model_forward(c, p, b)));
        CHECK(rng.state == before);  // dropout 0 draws nothing
        const double l0 = model_loss(c, p, b);
        CHECK(model_loss(c, p, b) == l0);
        ForwardOptions on;
        on.dropout = 0.2, on.rng = &rng;
        const double l1 = model_loss(c, p, b, (Params<float>*)nullptr, on), l2 = model_loss(c, p, b, (Params<float>*)nullptr, on);
        CHECK(l1 != l0);
        CHECK(l1 != l2);  // fresh masks from the advancing generator
        CHECK(rng.state != before);
    });
}

// Every dropout site of formulas §16 draws its own mask when dropout > 0: the embedding and, in
// every layer, both residual branches, each (B*n) x H of 0 and 1/(1-p), about a fraction p zero.
TEST_CASE("dropout: every site draws a mask: the embedding and both residual branches of every layer") {
    m_each_tiny<float>(43, 0.1, 44, [](const Config& c, const Params<float>& p, const Batch& b) {
        Rng rng(2);
        ForwardOptions on;
        on.dropout = 0.25, on.rng = &rng;
        ForwardCache<float> k;
        model_forward(c, p, b, &k, on);
        const int rows = b.B * b.n;
        auto check_mask = [&](const TF& m, const char* site, int layer) {
            INFO(site << " of layer " << layer);
            REQUIRE(m.shape == std::vector<int>{rows, c.H});
            std::size_t zeros = 0;
            for (float v : m.data) {
                CHECK((v == 0.0f || v == 1.0f / 0.75f));
                zeros += v == 0.0f;
            }
            CHECK(zeros > m.size() / 10);
            CHECK(zeros < m.size() * 2 / 5);
        };
        check_mask(k.drop_emb, "the embedding", 0);
        REQUIRE((int)k.blocks.size() == c.L);
        for (int l = 0; l < c.L; l++) {
            check_mask(k.blocks[l].drop_attn, "the attention branch", l + 1);
            check_mask(k.blocks[l].drop_ffn, "the FFN branch", l + 1);
        }
    });
}

// ================================================================================================
// The released BERT's additions: the masked-LM head (MLMHead), the embedding LayerNorm, the pooler
// ================================================================================================

TEST_CASE("MLMHead: a value computed by hand (H = 2: the LayerNorm of two numbers is +-1)") {
    Config c = preset("tiny-bert");
    c.H = 2, c.V = 3, c.eps = 1e-12, c.activation = Activation::gelu_erf;
    Params<double> p;
    p.W_t = TD::from(2, 2, {1, 0, 0, 1}), p.b_t = TD::vector({0, 0});
    p.gamma_t = TD::vector({2, 1}), p.beta_t = TD::vector({0.5, 0});
    p.W_e = TD::from(3, 2, {1, 0, 0, 1, 1, 1}), p.b_z = TD::vector({0.25, 1, 2});
    // U = [1, 0], GELU(U) = [0.841.., 0], LayerNorm -> [1, -1], * gamma + beta = [2.5, -1],
    // Z = [2.5, -1] W_e^T + b_z = [2.5 + 0.25, -1 + 1, 1.5 + 2].
    MLMHeadCache<double> k;
    const TD Z = MLMHead(c, p, TD::from(1, 2, {1, 0}), &k);
    REQUIRE(Z.shape == std::vector<int>{1, 3});
    CHECK(Z(0, 0) == doctest::Approx(2.75).epsilon(1e-9));
    CHECK(Z(0, 1) == doctest::Approx(0.0).epsilon(1e-9));
    CHECK(Z(0, 2) == doctest::Approx(3.5).epsilon(1e-9));
    CHECK(k.U.data == std::vector<double>{1, 0});
    // A bias b_t of the wrong length is refused where it is added (Linear), not read past its end.
    Params<double> q = p;
    q.b_t = TD::vector({0});
    CHECK_THROWS_NAMING_NO_CRASH(ShapeError, MLMHead(c, q, TD::from(1, 2, {1, 0})), "Linear", "bias");
}

TEST_CASE("MLMHead: gradient check of dX, W_t, b_t, gamma_t, beta_t, b_z and the tied W_e") {
    Config c = m_released_bert("tiny-bert", false);
    Params<double> p = m_model<double>(c, 1201, 0.3);
    Rng r(1202);
    TD X(5, c.H), R(5, c.V);
    for (auto& v : X.data) v = r.normal();
    for (auto& v : R.data) v = r.normal();
    // loss = sum(MLMHead(X) * R): dZ = R.
    auto loss = [&](const TD& x) {
        const TD Z = MLMHead(c, p, x);
        double s = 0;
        for (std::size_t k = 0; k < Z.size(); k++) s += Z[k] * R[k];
        return s;
    };
    MLMHeadCache<double> k;
    MLMHead(c, p, X, &k);
    Params<double> g = make_params<double>(c);
    const TD dX = MLMHead_backward(c, p, k, R, g);
    const double h = 1e-5;
    auto check = [&](TD& x, const TD& ana, const char* name) {
        CAPTURE(name);
        REQUIRE(ana.shape == x.shape);
        double biggest = 0;
        for (std::size_t j = 0; j < x.size(); j++) {
            const double x0 = x[j];
            x[j] = x0 + h;
            const double lp = loss(X);
            x[j] = x0 - h;
            const double lm = loss(X);
            x[j] = x0;
            const double num = (lp - lm) / (2 * h);
            CHECK(std::fabs(num - ana[j]) <= 1e-6 * std::max(1.0, std::fabs(ana[j])));
            biggest = std::max(biggest, std::fabs(ana[j]));
        }
        CHECK(biggest > 1e-3);  // a real gradient, not zeros
    };
    check(X, dX, "X");
    check(p.W_t, g.W_t, "W_t");
    check(p.b_t, g.b_t, "b_t");
    check(p.gamma_t, g.gamma_t, "gamma_t");
    check(p.beta_t, g.beta_t, "beta_t");
    check(p.b_z, g.b_z, "b_z");
    check(p.W_e, g.W_e, "W_e");
}

TEST_CASE("released BERT options: whole-model gradient check with emb_ln and mlm_head (BERT and RoBERTa)" * doctest::test_suite("assignment 4")) {
    for (const std::string name : {"tiny-bert", "tiny-roberta"}) {
        CAPTURE(name);
        const Config c = m_released_bert(name, false);
        Params<double> p = m_model<double>(c, 1210, 0.2);
        const Batch b = m_batch(c, 1211);
        if (!m_model_loss_grad_check(c, p, b, 1212, "model_loss's backward (" + name + ", emb_ln and mlm_head)")) break;
        // With dropout (embedding dropout after the embedding LayerNorm): the same masks each time.
        if (!m_model_loss_grad_check(c, p, b, 1213, "model_loss's backward (" + name + ", emb_ln and mlm_head, dropout 0.1)",
                                     0.1, 77))
            break;
    }
}

TEST_CASE("released BERT options: the pooler is kept and unused, the embedding LayerNorm normalises X^(0)") {
    const Config c = m_released_bert("tiny-bert", true);
    Params<double> p = m_model<double>(c, 1220, 0.2);
    const Batch b = m_batch(c, 1221);
    Params<double> g = make_params<double>(c);
    const double L0 = model_loss(c, p, b, &g);
    for (double v : g.W_pool.data) CHECK(v == 0.0);
    for (double v : g.b_pool.data) CHECK(v == 0.0);
    for (auto& v : p.W_pool.data) v += 1.0;
    CHECK(model_loss(c, p, b) == L0);
    // Adding 5 to every entry of W_p adds the same number to every entry of a row of X^(0), which
    // the embedding LayerNorm subtracts again (its mean): the loss stays; without it, it changes.
    for (auto& v : p.W_p.data) v += 5.0;
    CHECK(model_loss(c, p, b) == doctest::Approx(L0).epsilon(1e-9));
    Config off = c;
    off.emb_ln = false;
    Params<double> q = make_params<double>(off);
    auto Q = named_tensors(off, q);
    for (auto& nt : named_tensors(c, p))
        for (auto& qt : Q)
            if (qt.name == nt.name) *qt.tensor = *nt.tensor;
    Params<double> q2 = q;
    for (auto& v : q2.W_p.data) v -= 5.0;
    CHECK(model_loss(off, q, b) != doctest::Approx(model_loss(off, q2, b)).epsilon(1e-6));  // without it, it does change
}

TEST_CASE("released BERT options: metadata round trip, checkpoints, defaults off, only for bert and roberta") {
    for (const std::string name : {"bert-base", "roberta-base", "gpt1", "tiny-bert"}) {
        const auto m = config_metadata(preset(name));
        CHECK(m.count("emb_ln") == 0);
        CHECK(m.count("mlm_head") == 0);
        CHECK(m.count("pooler") == 0);
    }
    const Config c = m_released_bert("tiny-bert", true);
    const auto m = config_metadata(c);
    CHECK(m.at("emb_ln") == "1");
    CHECK(m.at("mlm_head") == "1");
    CHECK(m.at("pooler") == "1");
    const Config d = config_from_metadata(m);
    CHECK(d.emb_ln);
    CHECK(d.mlm_head);
    CHECK(d.pooler);
    auto bad = m;
    bad["mlm_head"] = "2";
    M_CHECK_TF_ERROR(config_from_metadata(bad), "mlm_head", "expected 0 or 1");
    Config g = preset("tiny-gpt");
    g.mlm_head = true;
    M_CHECK_TF_ERROR(validate(g), "bert and roberta only");
    {  // explain walks these options' boxes too (formulas §23), with model_loss's loss
        Params<double> pd = m_model<double>(c, 1231, 0.2);
        Batch one;
        one.n = 4, one.tokens = {10, 12, 1, 11}, one.targets = {-1, 5, -1, -1};
        CHECK(explain(c, pd, one).loss == doctest::Approx(model_loss(c, pd, one)).epsilon(1e-12));
    }
    Params<float> p = m_model<float>(c, 1230, 0.2);
    save_model(m_path("released_bert.safetensors"), c, p);
    LoadedModel lm = load_model(m_path("released_bert.safetensors"));
    CHECK(lm.config.emb_ln);
    CHECK(lm.config.pooler);
    CHECK(m_params_bits_equal(c, p, lm.params));
    const ParamCount k = count_params(c);
    CHECK(k.emb_ln == 2 * 8);
    CHECK(k.mlm_head == 8 * 8 + 8 + 2 * 8 + 13);
    CHECK(k.pooler == 8 * 8 + 8);
    CHECK(k.actual == k.seed_lambda + k.segments + k.attn_biases + k.emb_ln + k.mlm_head + k.pooler);
    Params<float> counted = make_params<float>(c);
    long long floats = 0;
    for (auto& nt : named_tensors(c, counted)) floats += (long long)nt.tensor->size();
    CHECK(floats == k.actual);
}

// ================================================================================================
// RoBERTa as Hugging Face's RobertaForMaskedLM computes it: <pad> positions, the head's GELU
// ================================================================================================
TEST_CASE("RoBERTa: a <pad> among the ids takes position row padding_idx and is not counted (ids [0, 5, 1, 7, 2] -> rows [2, 3, 1, 4, 5])") {
    Config c = preset("tiny-roberta");
    c.pad_id = 1;  // padding_idx = 1, as released
    // create_position_ids_from_input_ids: cumsum(x != 1) * (x != 1) + 1 = [1, 2, 0, 3, 4] + 1 = [2, 3, 1, 4, 5];
    // W_p holds Hugging Face's rows 2, 3, ... (W_p[r - 2]) and w_pad its row 1 (-1 here).
    const std::vector<int> rows = position_rows(c, {0, 5, 1, 7, 2}, 5);
    CHECK(rows == std::vector<int>{0, 1, -1, 2, 3});
    std::vector<int> hf;
    for (int r : rows) hf.push_back(r < 0 ? c.pad_id : r + c.pad_id + 1);
    CHECK(hf == std::vector<int>{2, 3, 1, 4, 5});
    // Each sequence counts from its start; pads at the start, inside and at the end.
    CHECK(position_rows(c, {0, 1, 1, 5, 2, 1, 0, 5, 2, 1}, 5) == std::vector<int>{0, -1, -1, 1, 2, -1, 0, 1, 2, -1});
    // Without pad_id (RoBERTa as formulas §22 writes it, BERT, GPTs): token i gets row i, id 1 or not.
    CHECK(position_rows(preset("tiny-roberta"), {0, 5, 1, 7, 2}, 5) == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(position_rows(preset("tiny-bert"), {0, 5, 1, 7, 2}, 5) == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(position_rows(c, {5, 1, 7}, 1) == std::vector<int>{0, -1, 0});  // sequences of one token each
    {   // pad_id 0 is a pad id like any other (-1 is none).
        Config c0 = c;
        c0.pad_id = 0;
        CHECK(position_rows(c0, {5, 0, 7, 1}, 4) == std::vector<int>{0, -1, 1, 2});
    }
    M_CHECK_TF_ERROR(position_rows(c, {5, 1, 7}, 2), "3 tokens are not sequences of n = 2");
    M_CHECK_TF_ERROR(position_rows(c, {5, 1, 7}, 0), "not sequences of n = 0");

    // X^(0) by hand: W_e[v] = v, W_p[i] = 100 (i + 1), w_pad = -1000 (every column), so row i of X^(0)
    // is x_i + the position's number: [0 + 100, 5 + 200, 1 - 1000, 7 + 300, 2 + 400].
    Params<double> p = m_model<double>(c, 1240, 0.2);
    for (int v = 0; v < c.V; v++)
        for (int h = 0; h < c.H; h++) p.W_e(v, h) = v;
    for (int i = 0; i < c.n_ctx; i++)
        for (int h = 0; h < c.H; h++) p.W_p(i, h) = 100.0 * (i + 1);
    for (int h = 0; h < c.H; h++) p.w_pad[h] = -1000;
    Batch b;
    b.n = 5, b.tokens = {0, 5, 1, 7, 2}, b.targets = {-1, 5, -1, 7, -1};
    ForwardCache<double> k;
    model_forward(c, p, b, &k);
    const double expected[5] = {100, 205, -999, 307, 402};
    for (int i = 0; i < 5; i++)
        for (int h = 0; h < c.H; h++) {
            CAPTURE(i);
            CHECK(k.blocks[0].attn_in(i, h) == expected[i]);  // X^(0), the first block's input (post-LN, no emb_ln)
        }

    // The whole model against positions 1..n with the rows put in place by hand: a model
    // without pad_id whose W_p rows 0..4 are W_p[0], W_p[1], w_pad, W_p[2], W_p[3].
    p = m_model<double>(c, 1241, 0.3);
    Config c0 = c;
    c0.pad_id = -1;
    Params<double> p0 = make_params<double>(c0);
    for (auto& nt : named_tensors(c0, p0))
        for (auto& mine : named_tensors(c, p))
            if (mine.name == nt.name) *nt.tensor = *mine.tensor;
    const int from[5] = {0, 1, -1, 2, 3};
    for (int i = 0; i < 5; i++)
        for (int h = 0; h < c.H; h++) p0.W_p(i, h) = from[i] < 0 ? p.w_pad[h] : p.W_p(from[i], h);
    CHECK(m_bits_equal(model_forward(c, p, b), model_forward(c0, p0, b)));
    Params<double> g = make_params<double>(c), g0 = make_params<double>(c0);
    CHECK(model_loss(c, p, b, &g) == model_loss(c0, p0, b, &g0));
    // The gradient lands on the rows the forward read: dw_pad is row 2's, dW_p[2], dW_p[3] rows 3's
    // and 4's; W_p[4] (Hugging Face's row 6) was not read and gets nothing.
    bool same = true, zero = true, nonzero = false;
    for (int h = 0; h < c.H; h++) {
        same &= g.w_pad[h] == g0.W_p(2, h);
        for (int i = 0; i < 5; i++) same &= (from[i] < 0 ? g.w_pad[h] : g.W_p(from[i], h)) == g0.W_p(i, h);
        for (int i = 4; i < c.n_ctx; i++) zero &= g.W_p(i, h) == 0.0;
        nonzero |= g.w_pad[h] != 0.0;
    }
    CHECK(same);
    CHECK(zero);
    CHECK(nonzero);
    // Everything else is the same too.
    for (auto& nt : named_tensors(c0, g0))
        for (auto& mine : named_tensors(c, g))
            if (mine.name == nt.name && nt.name != "W_p") {
                CAPTURE(nt.name);
                CHECK(m_bits_equal(*mine.tensor, *nt.tensor));
            }
}

TEST_CASE("RoBERTa: whole-model gradient check with <pad> inside the ids (w_pad and W_p), plain and released options" * doctest::test_suite("assignment 4")) {
    for (const bool released : {false, true}) {
        CAPTURE(released);
        Config c = released ? m_released_bert("tiny-roberta", false) : preset("tiny-roberta");
        c.pad_id = 1;
        if (released) c.activation = Activation::relu;  // the FFNs' hidden_act; the head stays erf GELU
        Params<double> p = m_model<double>(c, 1242, 0.2);
        Batch b = m_batch(c, 1243);
        b.tokens[2] = 1, b.tokens[6 + 1] = 1, b.tokens[6 + 5] = 1;  // pads inside both sequences, and last in the second
        REQUIRE(b.targets[2] < 0);
        REQUIRE(b.targets[6 + 1] < 0);
        if (!m_model_loss_grad_check(c, p, b, 1244, std::string("model_loss's backward (tiny-roberta, <pad> inside the ids") +
                                                        (released ? ", released options)" : ")")))
            break;
        Params<double> g = make_params<double>(c);
        model_loss(c, p, b, &g);
        double biggest = 0;
        for (int h = 0; h < c.H; h++) biggest = std::max(biggest, std::fabs(g.w_pad[h]));
        CHECK_MESSAGE(biggest > 1e-4, "model_backward (roberta, <pad> at 3 positions): the gradient of w_pad is (nearly) 0, "
                                      "largest entry " << biggest << "; the pads' rows must reach w_pad (formulas §22)");
    }
}

// explain's logits Z, loss and every parameter gradient against model_forward and model_loss on the
// same input (explain computes no layer itself: it reads them off the model's own functions).
static void m_check_explained_against_model(const Config& c, const Params<double>& p, const Batch& b,
                                            const Explained<double>& e) {
    const Tensor<double> Z = model_forward(c, p, b);
    REQUIRE(e.Z.shape == Z.shape);
    for (std::size_t k = 0; k < Z.size(); k++) CHECK(e.Z[k] == doctest::Approx(Z[k]).epsilon(1e-12));
    Params<double> g = make_params<double>(c);
    CHECK(e.loss == doctest::Approx(model_loss(c, p, b, &g)).epsilon(1e-12));
    Params<double> eg = e.g;
    auto mine = named_tensors(c, eg), theirs = named_tensors(c, g);
    REQUIRE(mine.size() == theirs.size());
    for (std::size_t t = 0; t < mine.size(); t++) {
        CAPTURE(theirs[t].name);
        REQUIRE(mine[t].tensor->shape == theirs[t].tensor->shape);
        for (std::size_t k = 0; k < mine[t].tensor->size(); k++)
            CHECK(mine[t].tensor->data[k] == doctest::Approx(theirs[t].tensor->data[k]).epsilon(1e-9).scale(1e-12));
    }
}

TEST_CASE("RoBERTa: explain and xlnet read and train the same position rows as model_forward with <pad> inside") {
    Config c = preset("tiny-roberta");
    c.pad_id = 1;
    const Params<double> p = m_model<double>(c, 1245, 0.2);
    Batch b;
    b.n = 6, b.tokens = {10, 3, 1, 12, 4, 11}, b.targets = {-1, -1, -1, 7, -1, -1};
    const Explained<double> e = explain(c, p, b);
    m_check_explained_against_model(c, p, b, e);
    // XLNet's query stream: w + the token's position vector, the pad's w_pad.
    Rng r(1246);
    Params<double> q = m_model<double>(c, 1247, 0.2);
    TD w = randn_vec(c.H, r, 0.5);
    const std::vector<int> z = {4, 1, 0, 3, 2}, x = {3, 1, 5, 1, 7, 1, 2, 4, 6, 8};
    auto loss = [&](Params<double>* gg) {
        TD dw({c.H});
        return xlnet_loss(c, q, w, x, 2, z, 3, gg, gg ? &dw : nullptr);
    };
    m_grad_check(c, q, loss, 1248, "xlnet_loss (tiny-roberta with <pad>)", m_locate_xlnet);
}

TEST_CASE("RoBERTa: the masked-LM head's GELU is the erf form whatever hidden_act says; BERT's head applies hidden_act") {
    // By hand, H = 3 (with two numbers any activation would LayerNorm to +-1): W_t = I, b_t = 0,
    // gamma = 1, beta = 0, b_z = 0, W_e = the rows e_1 and e_3, so Z = columns 1 and 3 of
    // LayerNorm(act(X)). X = U = [1, -1, 0]: erf GELU gives A = [0.841345, -0.158655, 0], LayerNorm
    // [1.398723, -0.880138, -0.518585]; ReLU gives [1, 0, 0], LayerNorm [sqrt 2, -1/sqrt 2, -1/sqrt 2].
    for (const bool roberta : {true, false}) {
        CAPTURE(roberta);
        Config c = preset(roberta ? "tiny-roberta" : "tiny-bert");
        c.H = 3, c.V = 2, c.eps = 1e-12, c.activation = Activation::relu;
        Params<double> p;
        p.W_t = TD::from(3, 3, {1, 0, 0, 0, 1, 0, 0, 0, 1}), p.b_t = TD::vector({0, 0, 0});
        p.gamma_t = TD::vector({1, 1, 1}), p.beta_t = TD::vector({0, 0, 0});
        p.W_e = TD::from(2, 3, {1, 0, 0, 0, 0, 1}), p.b_z = TD::vector({0, 0});
        const TD X = TD::from(1, 3, {1, -1, 0});
        auto gelu = [](double u) { return 0.5 * u * (1 + std::erf(u / std::sqrt(2.0))); };
        const double a[3] = {roberta ? gelu(1) : 1.0, roberta ? gelu(-1) : 0.0, 0.0};
        const double mu = (a[0] + a[1] + a[2]) / 3;
        const double var = ((a[0] - mu) * (a[0] - mu) + (a[1] - mu) * (a[1] - mu) + (a[2] - mu) * (a[2] - mu)) / 3;
        const double rstd = 1 / std::sqrt(var + 1e-12);
        const TD Z = MLMHead(c, p, X);
        REQUIRE(Z.shape == std::vector<int>{1, 2});
        CHECK(Z(0, 0) == doctest::Approx((a[0] - mu) * rstd).epsilon(1e-12));
        CHECK(Z(0, 1) == doctest::Approx((a[2] - mu) * rstd).epsilon(1e-12));
        if (roberta) CHECK((Z(0, 0) == doctest::Approx(1.398723).epsilon(1e-6) && Z(0, 1) == doctest::Approx(-0.518585).epsilon(1e-5)));
        else CHECK((Z(0, 0) == doctest::Approx(std::sqrt(2.0)).epsilon(1e-9) && Z(0, 1) == doctest::Approx(-1 / std::sqrt(2.0)).epsilon(1e-9)));
    }
    // A tiny random model, forward and backward: RoBERTa's head with hidden_act relu is the head with
    // gelu_erf, bit for bit; BERT's is not.
    for (const bool roberta : {true, false}) {
        CAPTURE(roberta);
        Config relu = m_released_bert(roberta ? "tiny-roberta" : "tiny-bert", false);
        relu.activation = Activation::relu;
        Config erf = relu;
        erf.activation = Activation::gelu_erf;
        const Params<double> p = m_model<double>(relu, 1249, 0.5);
        Rng r(1250);
        TD X(5, relu.H), dZ(5, relu.V);
        for (auto& v : X.data) v = r.normal();
        for (auto& v : dZ.data) v = r.normal();
        MLMHeadCache<double> k1, k2;
        const TD Z1 = MLMHead(relu, p, X, &k1), Z2 = MLMHead(erf, p, X, &k2);
        Params<double> g1 = make_params<double>(relu), g2 = make_params<double>(erf);
        const TD d1 = MLMHead_backward(relu, p, k1, dZ, g1), d2 = MLMHead_backward(erf, p, k2, dZ, g2);
        CHECK(m_bits_equal(Z1, Z2) == roberta);
        CHECK(m_bits_equal(d1, d2) == roberta);
        CHECK(m_bits_equal(g1.W_t, g2.W_t) == roberta);
        // BERT's relu head: its pre-activation's negative entries are cut to exactly 0 before the LayerNorm.
        if (!roberta) {
            TD A = k1.U;
            for (auto& v : A.data) v = std::max(v, 0.0);
            LayerNormCache<double> ln;
            const TD Xt = LayerNorm(A, p.gamma_t, p.beta_t, relu.eps, &ln);
            CHECK(m_bits_equal(Xt, k1.X_t));
        }
    }
    // The whole model: a relu RoBERTa's gradients are its loss's (the head's backward uses the same GELU).
    Config c = m_released_bert("tiny-roberta", false);
    c.activation = Activation::relu;
    Params<double> p = m_model<double>(c, 1251, 0.2);
    const Batch b = m_batch(c, 1252);
    m_model_loss_grad_check(c, p, b, 1253, "model_loss's backward (tiny-roberta, relu FFNs, erf GELU head)");
}
TEST_SUITE_END();

// ================================================================================================
// Objectives
// ================================================================================================
TEST_SUITE_BEGIN("objectives");
TEST_CASE("objective: next_token_targets shifts each sequence by one, last position -1") {
    CHECK(next_token_targets({5, 6, 7, 8, 1, 2, 3, 4}, 2, 4) == std::vector<int>{6, 7, 8, -1, 2, 3, 4, -1});
    CHECK(next_token_targets({5}, 1, 1) == std::vector<int>{-1});
    M_CHECK_TF_ERROR(next_token_targets({1, 2, 3}, 2, 2), "B x n");
}

TEST_CASE("objective: the GPT loss is the mean of -log Y[j-1, x_j] (formulas §25, with the log)" * doctest::test_suite("assignment 4 (0 points)")) {
    const Config c = preset("tiny-gpt");
    const Params<double> p = m_model<double>(c, 12, 0.2);
    Batch b;
    b.n = 5, b.tokens = {1, 7, 3, 3, 0};
    b.targets = next_token_targets(b.tokens, 1, b.n);
    const Tensor<double> Y = Softmax(model_forward(c, p, b));
    double expected = 0;
    for (int j = 1; j < b.n; j++) expected -= std::log(Y(j - 1, b.tokens[j]));
    expected /= (b.n - 1);
    CHECK_MESSAGE(model_loss(c, p, b) == doctest::Approx(expected).epsilon(1e-12),
                  "model_loss(tiny-gpt, x = (1, 7, 3, 3, 0)): expected " << expected
                      << " (the mean over j = 2..5 of -log Softmax(Z)[j-1, x_j], formulas §25)");
}

TEST_CASE("objective: mlm_corrupt frequencies (15% chosen; 80% [MASK], 10% random, 10% kept)" * doctest::test_suite("assignment 5")) {
    const Config c = preset("tiny-bert");
    const int B = 1000, n = 200;  // 200,000 positions, 198,000 candidates
    std::vector<int> x;
    Rng r(77);
    for (int s = 0; s < B; s++) {
        x.push_back(c.cls_id);
        for (int i = 1; i < n - 1; i++) x.push_back(r.below(10));
        x.push_back(c.sep_id);
    }
    Rng rng(2024);
    const MLMExample e = mlm_corrupt(x, B, n, c, rng);
    REQUIRE(e.tokens.size() == x.size());
    REQUIRE(e.targets.size() == x.size());
    long long chosen = 0, masked = 0, kept = 0, replaced = 0, candidates = 0, bad = 0;
    for (std::size_t i = 0; i < x.size(); i++) {
        const bool special = x[i] == c.cls_id || x[i] == c.sep_id;
        candidates += !special;
        if (e.targets[i] < 0) {
            bad += e.tokens[i] != x[i];  // unchosen positions are untouched
            continue;
        }
        bad += special;                  // [CLS]/[SEP] are never chosen
        bad += e.targets[i] != x[i];     // the target is the original token
        chosen++;
        if (e.tokens[i] == c.mask_id) masked++;
        else if (e.tokens[i] == x[i]) kept++;
        else replaced++;
        bad += e.tokens[i] < 0 || e.tokens[i] >= c.V;
    }
    INFO("mlm_corrupt over B = 1000 sequences of n = 200 (198,000 candidates): " << chosen << " chosen, " << masked
         << " [MASK], " << kept << " kept, " << replaced << " replaced by another token (formulas §26: 15% chosen; "
         << "of those 80% [MASK], 10% a random token, 10% kept)");
    CHECK_MESSAGE(bad == 0, bad << " violations: an unchosen position changed, a [CLS]/[SEP] chosen, a target that is not "
                                   "the original token, or a token outside 0..V-1");
    const double f = (double)chosen / (double)candidates;
    CHECK_MESSAGE(f == doctest::Approx(0.15).epsilon(0.005 / 0.15), "the fraction chosen must be 0.15 +- 0.005");
    CHECK_MESSAGE((double)masked / chosen == doctest::Approx(0.8).epsilon(0.015 / 0.8),
                  "the fraction of chosen set to [MASK] must be 0.8 +- 0.015");
    // The random 10% can draw the original token (1 in V) or even [MASK]; kept + replaced ~ 0.2.
    CHECK_MESSAGE((double)(kept + replaced) / chosen == doctest::Approx(0.2).epsilon(0.015 / 0.2),
                  "the fraction of chosen kept or replaced must be 0.2 +- 0.015");
    CHECK_MESSAGE((double)kept / chosen > 0.085, "the fraction kept (10%, plus random draws of the same token) must be in (0.085, 0.125)");
    CHECK_MESSAGE((double)kept / chosen < 0.125, "the fraction kept (10%, plus random draws of the same token) must be in (0.085, 0.125)");
    CHECK_MESSAGE((double)replaced / chosen > 0.07, "the fraction replaced (10% random, less draws of the same token) must be in (0.07, 0.105)");
    CHECK_MESSAGE((double)replaced / chosen < 0.105, "the fraction replaced (10% random, less draws of the same token) must be in (0.07, 0.105)");
    // Reproducible with the same seed, different with another.
    Rng again(2024), other(2025);
    const MLMExample e2 = mlm_corrupt(x, B, n, c, again), e3 = mlm_corrupt(x, B, n, c, other);
    CHECK_MESSAGE(e2.tokens == e.tokens, "mlm_corrupt's tokens with the same seed again: " << first_difference(e2.tokens, e.tokens));
    CHECK_MESSAGE(e2.targets == e.targets, "mlm_corrupt's targets with the same seed again: " << first_difference(e2.targets, e.targets));
    CHECK_MESSAGE(e3.targets != e.targets, "mlm_corrupt's targets with seeds 2024 and 2025 must differ");
}

// Draw by draw: every position that is not [CLS] or [SEP] takes one uniform() (chosen when below
// p_select), a chosen one takes one more (< 0.8: [MASK]; < 0.9: below(V), a random token; else kept),
// and a sequence with nothing chosen has one of its candidates chosen by below(#candidates). The
// expected result is built from a copy of the Rng, step by step, and the two Rngs end in one state.
TEST_CASE("objective: mlm_corrupt, draw by draw, over sequences with and without a forced choice" * doctest::test_suite("assignment 5")) {
    const Config c = preset("tiny-bert");
    const int B = 3, n = 6;
    // [CLS] a b [SEP] c [SEP] | a short sequence that p_select 0.15 often leaves empty | ...
    std::vector<int> x = {c.cls_id, 5, 6, c.sep_id, 7, c.sep_id, c.cls_id, 8, c.sep_id, c.sep_id, c.sep_id, c.sep_id,
                          c.cls_id, 9, 10, 11, 12, c.sep_id};
    int forced = 0, kinds[3] = {0, 0, 0};
    for (uint64_t seed = 0; seed < 60; seed++) {
        Rng r(seed), copy(seed);
        const MLMExample e = mlm_corrupt(x, B, n, c, r);
        std::vector<int> tokens = x, targets(x.size(), -1);
        for (int b = 0; b < B; b++) {
            std::vector<int> cand;
            bool any = false;
            auto choose = [&](int i) {
                targets[i] = x[i];
                const double u = copy.uniform();
                const int kind = u < 0.8 ? 0 : u < 0.9 ? 1 : 2;
                kinds[kind]++;
                if (kind == 0) tokens[i] = c.mask_id;
                if (kind == 1) tokens[i] = copy.below(c.V);
            };
            for (int i = 0; i < n; i++) {
                const int k = b * n + i;
                if (x[k] == c.cls_id || x[k] == c.sep_id) continue;
                cand.push_back(k);
                if (copy.uniform() < 0.15) choose(k), any = true;
            }
            if (!any && !cand.empty()) choose(cand[copy.below((int)cand.size())]), forced++;
        }
        INFO("mlm_corrupt(x = [CLS] 5 6 [SEP] 7 [SEP] | [CLS] 8 [SEP] [SEP] [SEP] [SEP] | [CLS] 9 10 11 12 [SEP], "
             "B = 3, n = 6), Rng seed " << seed << "; expected: the draws replayed in the order of formulas §26 "
             "(the comment above this case)");
        CHECK_MESSAGE(e.tokens == tokens, "tokens: " << first_difference(e.tokens, tokens));
        CHECK_MESSAGE(e.targets == targets, "targets: " << first_difference(e.targets, targets));
        CHECK_MESSAGE(r.next() == copy.next(), "the Rng must end where the replay ends: one uniform() per candidate, one "
                                               "more per chosen, below(V) for a random token, below(#candidates) if none chosen");
    }
    CHECK(forced > 10);  // the cases reach every branch
    CHECK(kinds[0] > 0);
    CHECK(kinds[1] > 0);
    CHECK(kinds[2] > 0);
    // Draws exactly on a boundary (a seed meets one in 2^53): a position is chosen when u < p_select,
    // and then [MASK] when u < 0.8, a random token when u < 0.9, else kept.
    const std::vector<int> one = {c.cls_id, 5, c.sep_id};
    {   // p_select = 0.5, first draw 0.5: not chosen, so the forced choice draws below(1), then the kind.
        Rng r = m_rng_uniform(0, 0.5), copy = r;
        const MLMExample e = mlm_corrupt(one, 1, 3, c, r, 0.5);
        CHECK(copy.uniform() == 0.5);
        CHECK(copy.below(1) == 0);
        const double u = copy.uniform();
        const int expected = u < 0.8 ? c.mask_id : u < 0.9 ? copy.below(c.V) : 5;
        INFO("mlm_corrupt([CLS] 5 [SEP], p_select 0.5) with first draw exactly 0.5: not chosen (chosen iff u < p_select), "
             "so the forced choice draws below(1), then the kind (formulas §26)");
        const std::vector<int> want_tokens = {c.cls_id, expected, c.sep_id}, want_targets = {-1, 5, -1};
        CHECK_MESSAGE(e.tokens == want_tokens, "tokens: " << first_difference(e.tokens, want_tokens));
        CHECK_MESSAGE(e.targets == want_targets, "targets: " << first_difference(e.targets, want_targets));
        CHECK_MESSAGE(r.next() == copy.next(), "the Rng must end where the replay of those draws ends");
    }
    {   // A mask id of 0 is a token id like any other (-1 is "none").
        Config c0 = c;
        c0.mask_id = 0;
        Rng r = m_rng_uniform(1, 0.5);  // p_select = 1: chosen; the kind draw 0.5: [MASK]
        const MLMExample e = mlm_corrupt(one, 1, 3, c0, r, 1.0);
        const std::vector<int> want_tokens = {c.cls_id, 0, c.sep_id};
        CHECK_MESSAGE(e.tokens == want_tokens, "mlm_corrupt([CLS] 5 [SEP]) with mask id 0, chosen and kind draw 0.5 "
                                               "([MASK], formulas §26): " << first_difference(e.tokens, want_tokens));
        c0.mask_id = -1;
        M_CHECK_TF_ERROR(mlm_corrupt(one, 1, 3, c0, r, 1.0), "mask");
    }
    for (double kind_u : {0.8, 0.9}) {  // p_select = 1: chosen; the kind draw exactly 0.8, 0.9
        CAPTURE(kind_u);
        Rng r = m_rng_uniform(1, kind_u), copy = r;
        const MLMExample e = mlm_corrupt(one, 1, 3, c, r, 1.0);
        copy.uniform();
        CHECK(copy.uniform() == kind_u);
        const int expected = kind_u == 0.8 ? copy.below(c.V) : 5;  // 0.8: a random token; 0.9: kept
        INFO("mlm_corrupt([CLS] 5 [SEP], p_select 1) with the kind draw exactly " << kind_u << ": "
             << std::string(kind_u == 0.8 ? "a random token (u < 0.8 is [MASK])" : "kept (u < 0.9 is a random token)") << ", formulas §26");
        const std::vector<int> want_tokens = {c.cls_id, expected, c.sep_id}, want_targets = {-1, 5, -1};
        CHECK_MESSAGE(e.tokens == want_tokens, "tokens: " << first_difference(e.tokens, want_tokens));
        CHECK_MESSAGE(e.targets == want_targets, "targets: " << first_difference(e.targets, want_targets));
        CHECK_MESSAGE(r.next() == copy.next(), "the Rng must end where the replay of those draws ends");
    }
}

TEST_CASE("objective: mlm_corrupt chooses at least one position per sequence, never [CLS]/[SEP]" * doctest::test_suite("assignment 5")) {
    const Config c = preset("tiny-roberta");
    const int B = 500, n = 3;
    std::vector<int> x;
    for (int s = 0; s < B; s++) x.insert(x.end(), {c.cls_id, s % 10, c.sep_id});
    Rng rng(9);
    const MLMExample e = mlm_corrupt(x, B, n, c, rng, 0.01);
    REQUIRE(e.targets.size() == x.size());
    REQUIRE(e.tokens.size() == x.size());
    for (int s = 0; s < B; s++) {
        INFO("mlm_corrupt(500 sequences [CLS] t [SEP], p_select 0.01), sequence " << s + 1
             << ": [CLS] and [SEP] are never chosen (target -1, token kept), and t must be chosen (at least one per "
                "sequence, formulas §26): target " << s % 10);
        CHECK(e.targets[s * n] == -1);
        CHECK(e.targets[s * n + 2] == -1);
        CHECK(e.tokens[s * n] == c.cls_id);
        CHECK(e.tokens[s * n + 2] == c.sep_id);
        CHECK(e.targets[s * n + 1] == s % 10);
    }
    Rng r2(1);
    M_CHECK_TF_ERROR(mlm_corrupt({1, 2, 3}, 2, 2, c, r2), "B x n | B*n | 3");
    M_CHECK_TF_ERROR(mlm_corrupt({1, 2}, 1, 2, preset("tiny-gpt"), r2), "mask");
}

// ================================================================================================
// GPT-1 fine-tuning (formulas §28): the head W_y, L3 = L2 + lambda L1, the input transformations
// ================================================================================================
namespace {
const GPT1Specials m_S{10, 11, 12};  // tiny presets: ids 10, 11, 12 as start, delimiter, extract
std::vector<std::vector<int>> m_concat(std::vector<std::vector<int>> a, const std::vector<std::vector<int>>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}
}  // namespace

TEST_CASE("finetune: GPT-1's input transformations and the padded batch") {
    using V = std::vector<int>;
    CHECK(gpt1_classify_input({1, 2, 3}, m_S) == V{10, 1, 2, 3, 12});
    CHECK(gpt1_entailment_input({1, 2}, {3}, m_S) == V{10, 1, 2, 11, 3, 12});
    CHECK(gpt1_similarity_inputs({1}, {2, 3}, m_S) == std::vector<V>{{10, 1, 11, 2, 3, 12}, {10, 2, 3, 11, 1, 12}});
    CHECK(gpt1_multiple_choice_inputs({1, 2}, {{3}, {4, 5}}, m_S) ==
          std::vector<V>{{10, 1, 2, 11, 3, 12}, {10, 1, 2, 11, 4, 5, 12}});
    std::vector<int> at;
    const Batch b = gpt1_batch({{10, 1, 12}, {10, 1, 2, 3, 12}}, 5, 0, at);
    CHECK(b.B == 2);
    CHECK(b.n == 5);
    CHECK(b.tokens == V{10, 1, 12, 0, 0, 10, 1, 2, 3, 12});
    CHECK(b.targets == V{1, 12, -1, -1, -1, 1, 2, 3, 12, -1});
    CHECK(at == V{2, 4});
    // The head reads row at[b] of each sequence: a row before the first or past the last is an error.
    const Config c = preset("tiny-gpt2");
    const Params<double> p = m_model<double>(c, 3, 0.5);
    for (int bad : {-1, 5}) {
        V bad_at = at;
        bad_at[1] = bad;
        M_CHECK_TF_ERROR(finetune_probs(c, p, TD(c.H, 2), FinetuneTask::classify, 1, b, bad_at), "at[1] is outside 0..n-1");
    }
    M_CHECK_TF_ERROR(gpt1_batch({{1, 2, 3, 4, 5, 6}}, 5, 0, at), "6 tokens", "n = 5");
}

TEST_CASE("finetune: the head's shapes: W_y is H x 1 for multiple choice, similarity takes K = 2, classify K = 1") {
    const Config c = preset("tiny-gpt2");
    const Params<double> p = m_model<double>(c, 3, 0.5);
    std::vector<int> at;
    const Batch b = gpt1_batch({{1, 2, 3}, {4, 5}, {6, 7, 8}}, 4, 0, at);  // B = 3 sequences
    const TD P = finetune_probs(c, p, TD(c.H, 1), FinetuneTask::multiple_choice, 3, b, at);
    CHECK(P.shape == std::vector<int>{1, 3});
    M_CHECK_TF_ERROR(finetune_probs(c, p, TD(c.H, 2), FinetuneTask::multiple_choice, 3, b, at), "multiple choice", "W_y");
    M_CHECK_TF_ERROR(finetune_probs(c, p, TD(3 * c.H, 2), FinetuneTask::similarity, 3, b, at), "similarity takes K = 2");
    M_CHECK_TF_ERROR(finetune_probs(c, p, TD(3 * c.H, 2), FinetuneTask::classify, 3, b, at), "classify takes K = 1");
    M_CHECK_TF_ERROR(finetune_probs(c, p, TD(2 * c.H, 2), FinetuneTask::classify, 1, b, at), "W_y", "needs " + std::to_string(c.H) + " rows");
    M_CHECK_TF_ERROR(finetune_probs(c, p, TD(c.H, 2), FinetuneTask::classify, 2, b, at), "B = 3 is not a multiple of K = 2");
    CHECK_THROWS_NAMING_NO_CRASH(Error, finetune_probs(c, p, TD(c.H, 2), FinetuneTask::classify, 0, b, at), "K = 0");
    // W_y must be a matrix (a vector of H numbers is not H x 1), named by the head.
    const Batch b1 = gpt1_batch({{1, 2, 3}}, 4, 0, at);
    CHECK_THROWS_NAMING_NO_CRASH(ShapeError, finetune_probs(c, p, TD({c.H}), FinetuneTask::classify, 1, b1, at), "finetune", "W_y must be a matrix");
}

TEST_CASE("finetune: multiple choice takes L1 on the right answer's sequence only") {
    using V = std::vector<int>;
    FinetuneSpec s;
    s.kind = FinetuneKind::choice, s.specials = m_S;
    EncodedExample e1, e2;
    e1.seqs = gpt1_multiple_choice_inputs({1, 2}, {{3}, {4, 5}, {6}}, m_S), e1.label = 1;
    e2.seqs = gpt1_multiple_choice_inputs({7}, {{8}, {9}, {1, 2, 3}}, m_S), e2.label = 2;
    std::vector<int> at, labels;
    const Batch b = finetune_batch(preset("tiny-gpt2"), s, {&e1, &e2}, at, labels, nullptr);
    REQUIRE(b.B == 6);
    REQUIRE(b.n == 7);
    CHECK(labels == V{1, 2});
    const V none(7, -1);
    auto targets = [&](int row) { return V(b.targets.begin() + row * 7, b.targets.begin() + row * 7 + 7); };
    CHECK(targets(0) == none);
    CHECK(targets(1) == V{1, 2, 11, 4, 5, 12, -1});  // [s] 1 2 [$] 4 5 [e]: the next tokens
    CHECK(targets(2) == none);
    CHECK(targets(3) == none);
    CHECK(targets(4) == none);
    CHECK(targets(5) == V{7, 11, 1, 2, 3, 12, -1});
    CHECK(b.tokens[2 * 7 + 4] == 6);  // the wrong answers are still in the input
    // Unlabelled (predict): every sequence keeps its targets.
    e1.label = -1;
    const Batch u = finetune_batch(preset("tiny-gpt2"), s, {&e1}, at, labels, nullptr);
    CHECK(V(u.targets.begin(), u.targets.begin() + 6) == V{1, 2, 11, 3, 12, -1});
    // BERT: every answer's pair is corrupted alike (the [MASK]s must not mark the right one); the
    // right one's targets count.
    const Config cb = preset("tiny-bert");
    FinetuneSpec sb;
    sb.kind = FinetuneKind::choice, sb.specials = {cb.cls_id, cb.sep_id, cb.sep_id};
    EncodedExample be;
    be.label = 0;
    for (int k = 0; k < 2; k++) {
        std::vector<int> x, t;
        bert_pair(cb, {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, x, t);
        be.seqs.push_back(x), be.segs.push_back(t);
    }
    Rng mlm(5);
    const Batch bb = finetune_batch(cb, sb, {&be}, at, labels, &mlm);
    int changed[2] = {0, 0}, counted[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < bb.n; i++) {
            changed[k] += bb.tokens[k * bb.n + i] != be.seqs[k][i];
            counted[k] += bb.targets[k * bb.n + i] >= 0;
        }
    CHECK(changed[0] > 0);
    CHECK(changed[1] > 0);
    CHECK(counted[0] > 0);
    CHECK(counted[1] == 0);
}

TEST_CASE("finetune: gradient check of L3 = L2 + lambda L1 for every task (all parameters and W_y)") {
    for (const char* model : {"tiny-gpt2", "tiny-gpt"}) {
        CAPTURE(model);
        const Config c = preset(model);
        struct Case {
            FinetuneTask task;
            int K, rows, C;
            std::vector<std::vector<int>> seqs;
            std::vector<int> labels;
            const char* name;
        };
        const std::vector<Case> cases = {
            {FinetuneTask::classify, 1, c.H, 3, {gpt1_classify_input({1, 2, 3}, m_S), gpt1_entailment_input({4}, {5, 6}, m_S)}, {2, 0}, "classify"},
            {FinetuneTask::similarity, 2, 2 * c.H, 2, m_concat(gpt1_similarity_inputs({1, 2}, {3}, m_S), gpt1_similarity_inputs({4}, {5, 6}, m_S)), {1, 0}, "similarity"},
            {FinetuneTask::multiple_choice, 3, c.H, 1,
             m_concat(gpt1_multiple_choice_inputs({1, 2}, {{3}, {4, 5}, {6}}, m_S), gpt1_multiple_choice_inputs({7}, {{8}, {9}, {1, 1}}, m_S)), {1, 2}, "multiple choice"},
        };
        for (const Case& t : cases) {
            CAPTURE(t.name);
            Params<double> p = m_model<double>(c, 81, 0.2);
            Rng r(82);
            TD W_y = randn(t.rows, t.C, r, 0.5);
            std::vector<int> at;
            const Batch b = gpt1_batch(t.seqs, 8, 0, at);
            const double lambda = t.task == FinetuneTask::similarity ? 2.0 : 0.5;
            auto loss = [&](Params<double>* g) {
                TD dW(W_y.shape);
                return finetune_loss(c, p, W_y, t.task, t.K, b, at, t.labels, lambda, g, g ? &dW : nullptr).L3;
            };
            m_grad_check(c, p, loss, 83, std::string("finetune ") + t.name);
            Params<double> g = make_params<double>(c);
            TD dW(W_y.shape);
            const FinetuneLoss L = finetune_loss(c, p, W_y, t.task, t.K, b, at, t.labels, lambda, &g, &dW);
            grad_check([&] { return finetune_loss(c, p, W_y, t.task, t.K, b, at, t.labels, lambda).L3; }, W_y, dW,
                       std::string("finetune_loss's dW_y (") + t.name + ", L3 = L2 + lambda L1)",
                       "§28 dW_y += h^T dS, dS = (Softmax(S) - OneHot(y)) / E");
            CHECK(L.L3 == doctest::Approx(L.L2 + lambda * L.L1).epsilon(1e-14));
            CHECK(L.L1 == doctest::Approx(model_loss(c, p, b)).epsilon(1e-14));  // L1 is the LM loss on x
            // L2 is -log of the label's probability, averaged over the examples.
            const TD P = finetune_probs(c, p, W_y, t.task, t.K, b, at);
            double L2 = 0;
            for (int e = 0; e < P.rows(); e++) {
                double row = 0;
                for (int k = 0; k < P.cols(); k++) row += P(e, k);
                CHECK(row == doctest::Approx(1.0).epsilon(1e-12));
                L2 -= std::log(P(e, t.labels[e])) / P.rows();
            }
            CHECK(L.L2 == doctest::Approx(L2).epsilon(1e-12));
        }
        // lambda = 0: the head's gradient alone (the logits' dZ is skipped); L1 is still reported.
        Params<double> p = m_model<double>(c, 88, 0.2);
        Rng r(89);
        TD W_y = randn(c.H, 3, r, 0.5);
        std::vector<int> at;
        const Batch b = gpt1_batch({gpt1_classify_input({1, 2}, m_S), gpt1_classify_input({3, 4, 5}, m_S)}, 7, 0, at);
        auto loss0 = [&](Params<double>* g) {
            TD dW(W_y.shape);
            return finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, {0, 2}, 0.0, g, g ? &dW : nullptr).L3;
        };
        m_grad_check(c, p, loss0, 90, "finetune classify, lambda = 0");
        const FinetuneLoss L0 = finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, {0, 2}, 0.0);
        CHECK(L0.L3 == L0.L2);
        CHECK(L0.L1 == doctest::Approx(model_loss(c, p, b)).epsilon(1e-14));
        M_CHECK_TF_ERROR(finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, {0, 2}, -1.0), "lambda");
        // A label outside the C = 3 classes names the range 0..2.
        M_CHECK_TF_ERROR(finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, {0, 3}, 0.0), "label 3 outside 0..2");
        M_CHECK_TF_ERROR(finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, {-1, 0}, 0.0), "label -1 outside 0..2");
        // A target of token id 0 is a target (-1 is "none"): with it as the only one, L1 is its
        // -log P, and lambda > 0 is accepted.
        Batch b0 = b;
        std::fill(b0.targets.begin(), b0.targets.end(), -1);
        b0.targets[1] = 0;
        const FinetuneLoss Lt = finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b0, at, {0, 2}, 0.5);
        CHECK(Lt.L1 > 0);
        CHECK(Lt.L1 == doctest::Approx(model_loss(c, p, b0)).epsilon(1e-14));
        CHECK(Lt.L3 == doctest::Approx(Lt.L2 + 0.5 * Lt.L1).epsilon(1e-14));
    }
}

TEST_CASE("finetune: padding after the extract token and the order of the answers do not matter") {
    const Config c = preset("tiny-gpt2");
    const Params<double> p = m_model<double>(c, 84, 0.3);
    Rng r(85);
    const TD W_y = randn(c.H, 1, r, 0.5);
    const auto seqs = gpt1_multiple_choice_inputs({1, 2}, {{3}, {4, 5}, {6}}, m_S);
    std::vector<int> at, at2;
    const TD P = finetune_probs(c, p, W_y, FinetuneTask::multiple_choice, 3, gpt1_batch(seqs, 7, 0, at), at);
    // Other padding, longer rows: the same probabilities (the causal mask keeps the pads out of h).
    const TD P2 = finetune_probs(c, p, W_y, FinetuneTask::multiple_choice, 3, gpt1_batch(seqs, 12, 9, at2), at2);
    CHECK_CLOSE(P2, P, 1e-12, "finetune_probs with other padding", "finetune_probs with the first padding: the causal mask keeps the pads out of h");
    // The answers reversed: the probabilities reversed.
    const std::vector<std::vector<int>> rev(seqs.rbegin(), seqs.rend());
    const TD P3 = finetune_probs(c, p, W_y, FinetuneTask::multiple_choice, 3, gpt1_batch(rev, 7, 0, at2), at2);
    for (int k = 0; k < 3; k++) CHECK(P3(0, k) == doctest::Approx(P(0, 2 - k)).epsilon(1e-12));
    std::vector<int> at3;
    const Batch b = gpt1_batch(seqs, 7, 0, at3);
    M_CHECK_TF_ERROR(finetune_loss(c, p, W_y, FinetuneTask::multiple_choice, 3, b, at3, {3}, 0.5), "label 3");
    M_CHECK_TF_ERROR(finetune_loss(c, p, W_y, FinetuneTask::multiple_choice, 2, b, at3, {0}, 0.5), "multiple of K");
    const TD W_bad = randn(c.H + 1, 2, r, 0.5);  // classify needs H rows
    CHECK_THROWS_AS(finetune_loss(c, p, W_bad, FinetuneTask::classify, 1, b, at3, {0, 0, 0}, 0.5), ShapeError);
    Batch no_targets = b;  // lambda > 0 needs L1's targets (next tokens, or BERT's masked positions)
    no_targets.targets.assign(no_targets.tokens.size(), -1);
    M_CHECK_TF_ERROR(finetune_loss(preset("tiny-bert"), m_model<double>(preset("tiny-bert"), 1, 0.1), W_y,
                                   FinetuneTask::classify, 1, no_targets, at3, {0, 0, 0}, 0.5), "needs targets for L1");
}

TEST_CASE("finetune: gradient descent on L3 learns a toy classification (does the text contain 3?)") {
    const Config c = preset("tiny-gpt2");
    Params<double> p = m_model<double>(c, 86, 0.0);
    Rng r(87);
    TD W_y = randn(c.H, 2, r, 0.02);
    std::vector<std::vector<int>> seqs;
    std::vector<int> labels;
    for (int e = 0; e < 8; e++) {
        std::vector<int> text = m_random_ids(4, 10, r);
        for (int& v : text) v = v == 3 ? 4 : v;
        if (e % 2) text[r.below(4)] = 3;
        seqs.push_back(gpt1_classify_input(text, m_S));
        labels.push_back(e % 2);
    }
    std::vector<int> at;
    const Batch b = gpt1_batch(seqs, 6, 0, at);
    const double first = finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, labels, 0.5).L2;
    for (int step = 0; step < 300; step++) {
        Params<double> g = make_params<double>(c);
        TD dW(W_y.shape);
        finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, labels, 0.5, &g, &dW);
        auto P = named_tensors(c, p), G = named_tensors(c, g);
        for (std::size_t k = 0; k < P.size(); k++)
            for (std::size_t j = 0; j < P[k].tensor->size(); j++) (*P[k].tensor)[j] -= 0.1 * (*G[k].tensor)[j];
        for (std::size_t j = 0; j < W_y.size(); j++) W_y[j] -= 0.1 * dW[j];
    }
    const double last = finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, labels, 0.5).L2;
    MESSAGE("L2 from " << first << " to " << last);
    CHECK(first > 0.6);  // about log 2 at the start
    CHECK(last < 0.1);
}

// ================================================================================================
// XLNet: the permutation objective with two-stream attention
// ================================================================================================
// The gradient of XLNet's query vector w: every query row starts as g^(0)_i = w + (W_p)_{i,:}.
const char* const m_xlnet_dw_equation = "§27 dw = sum_i dg^(0)_i over every sequence's query rows, g^(0)_i = w + (W_p)_{i,:}";

TEST_CASE("xlnet: Mask_XL for z = (2, 0, 1): content sees up to its own rank, query strictly before" * doctest::test_suite("assignment 5")) {
    const TD M = Mask_XL<double>({2, 0, 1});  // ranks: position 2 -> 0, 0 -> 1, 1 -> 2
    const double o = 1, x = -INF;
    const TD expected = TD(6, 6, x);
    const double rows[6][6] = {
        {o, x, o, x, x, x},  // content 0 (rank 1): positions 2 and 0
        {o, o, o, x, x, x},  // content 1 (rank 2): all
        {x, x, o, x, x, x},  // content 2 (rank 0): itself
        {x, x, o, x, x, x},  // query 0: position 2 only, not its own token
        {o, x, o, x, x, x},  // query 1: positions 2 and 0
        {x, x, x, x, x, x},  // query 2 (first in z): nothing
    };
    REQUIRE(M.shape == expected.shape);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            INFO("Mask_XL(z = (2, 0, 1)) (code positions), entry (" << i + 1 << ", " << j + 1 << "): expected "
                 << rows[i][j] << " (hand-computed from the ranks, formulas §8: " << std::string(i < 3 ? "content" : "query")
                 << " row " << i % 3 + 1 << std::string(i < 3 ? " sees positions up to its own rank" : " sees positions strictly before its rank")
                 << "), got " << M(i, j));
            CHECK(M(i, j) == rows[i][j]);
        }
    M_CHECK_TF_ERROR(Mask_XL<double>({0, 0, 1}), "permutation");
    M_CHECK_TF_ERROR(Mask_XL<double>({0, 3, 1}), "permutation");
}

TEST_CASE("xlnet: the query stream of position i never sees x_i nor what comes after i in z" * doctest::test_suite("assignment 5")) {
    for (const char* name : {"tiny-gpt2", "tiny-roberta"}) {
        INFO("preset " << std::string(name));
        const Config c = preset(name);
        const Params<double> p = m_model<double>(c, 95, 0.3);
        Rng r(96);
        const TD w = randn_vec(c.H, r, 0.5);
        const std::vector<int> z = {3, 0, 5, 1, 4, 2};
        std::vector<int> rank(6);
        for (int t = 0; t < 6; t++) rank[z[t]] = t;
        const std::vector<int> x = {1, 7, 2, 9, 4, 6};
        const TD P = xlnet_query_probs(c, p, w, x, z);
        for (int j = 0; j < 6; j++) {
            std::vector<int> x2 = x;
            x2[j] = (x[j] + 3) % 10;
            const TD P2 = xlnet_query_probs(c, p, w, x2, z);
            for (int i = 0; i < 6; i++) {
                INFO("xlnet_query_probs (z = (3, 0, 5, 1, 4, 2), code positions): x_" << j + 1 << " changed; row " << i + 1
                     << " must "
                     << std::string(rank[j] >= rank[i] ? "stay exactly the same (x_j is x_i itself or comes at or after i in z"
                                                        : "change (x_j comes before i in z")
                     << "; the query stream, formulas §27)");
                if (rank[j] >= rank[i]) CHECK(m_row_bits_equal(P, P2, i));  // x_i itself, or later in z
                else CHECK_FALSE(m_row_bits_equal(P, P2, i));
            }
        }
        for (int i = 0; i < 6; i++) {
            double sum = 0;
            for (int v = 0; v < c.V; v++) sum += P(i, v);
            CHECK_MESSAGE(sum == doctest::Approx(1.0).epsilon(1e-12),
                          "xlnet_query_probs, row " << i + 1 << ": must sum to 1 (a softmax, formulas §27), sums to " << sum);
        }
    }
}

TEST_CASE("xlnet: gradient check of every parameter and w (pre-LN and post-LN blocks)" * doctest::test_suite("assignment 5")) {
    for (const char* name : {"tiny-gpt2", "tiny-gpt"}) {
        INFO("preset " << std::string(name));
        const Config c = preset(name);
        Params<double> p = m_model<double>(c, 97, 0.2);
        Rng r(98);
        TD w = randn_vec(c.H, r, 0.5);
        const std::vector<int> z = {4, 1, 0, 3, 2}, x = m_random_ids(2 * 5, 10, r);
        auto loss = [&](Params<double>* g) {
            TD dw({c.H});
            return xlnet_loss(c, p, w, x, 2, z, 3, g, g ? &dw : nullptr);
        };
        const std::string f = std::string("xlnet_loss (") + name + ", B = 2, n = 5, z = (4, 1, 0, 3, 2), predict 3)";
        if (!m_grad_check(c, p, loss, 99, f, m_locate_xlnet)) break;
        Params<double> g = make_params<double>(c);
        TD dw({c.H});
        xlnet_loss(c, p, w, x, 2, z, 3, &g, &dw);
        grad_check([&] { return xlnet_loss(c, p, w, x, 2, z, 3); }, w, dw, f + "'s dw", m_xlnet_dw_equation);
        // The gradient adds into g and dw (train's --accum sums batches so): a second call doubles them.
        Params<double> g2 = g;
        TD dw2 = dw;
        xlnet_loss(c, p, w, x, 2, z, 3, &g2, &dw2);
        const std::string acc = ": a second call must add to the gradients, not assign them (2 x the first call's ";
        CHECK_MESSAGE(dw2.data[0] == doctest::Approx(2 * dw.data[0]).epsilon(1e-12), f << "'s dw, entry 1" << acc << dw.data[0] << ")");
        CHECK_MESSAGE(g2.W_e(x[0], 0) == doctest::Approx(2 * g.W_e(x[0], 0)).epsilon(1e-12),
                      f << "'s gradient of W_e, entry (" << x[0] + 1 << ", 1)" << acc << g.W_e(x[0], 0) << ")");
        CHECK_MESSAGE(g2.W_e(x[0], 0) != 0.0, f << "'s gradient of W_e, entry (" << x[0] + 1 << ", 1) is 0 (nothing written?)");
        // The loss is the mean -log P of the predicted tokens (the last 3 of z) under the query stream.
        const TD P = xlnet_query_probs(c, p, w, std::vector<int>(x.begin(), x.begin() + 5), z);
        const TD P1 = xlnet_query_probs(c, p, w, std::vector<int>(x.begin() + 5, x.end()), z);
        double expected = 0;
        for (int t = 2; t < 5; t++) expected -= (std::log(P(z[t], x[z[t]])) + std::log(P1(z[t], x[5 + z[t]]))) / 6;
        CHECK_MESSAGE(xlnet_loss(c, p, w, x, 2, z, 3) == doctest::Approx(expected).epsilon(1e-12),
                      f << ": expected " << expected << " (the mean -log P of the last 3 tokens of z under xlnet_query_probs, "
                                                        "formulas §27)");
        // More sequences than tokens in each (B = 3, n = 2): the batch's loss is the mean of each
        // sequence's loss alone (sequence b's rows are b n .. b n + n - 1).
        const std::vector<int> z2 = {1, 0}, x3 = {1, 2, 3, 4, 5, 6};
        double alone = 0;
        for (int s = 0; s < 3; s++) alone += xlnet_loss(c, p, w, {x3[2 * s], x3[2 * s + 1]}, 1, z2, 2) / 3;
        const std::string f3 = std::string("xlnet_loss (") + name + ", B = 3, n = 2, x = (1, 2, 3, 4, 5, 6), z = (1, 0), predict 2)";
        CHECK_MESSAGE(xlnet_loss(c, p, w, x3, 3, z2, 2) == doctest::Approx(alone).epsilon(1e-12),
                      f3 << ": expected " << alone << " (the mean of each sequence's xlnet_loss alone, formulas §27)");
        // ... and its gradient the mean of theirs (each sequence's query rows into W_p[i] and w).
        Params<double> g3 = make_params<double>(c), ga = make_params<double>(c);
        TD dw3({c.H}), dwa({c.H});
        xlnet_loss(c, p, w, x3, 3, z2, 2, &g3, &dw3);
        for (int s = 0; s < 3; s++) xlnet_loss(c, p, w, {x3[2 * s], x3[2 * s + 1]}, 1, z2, 2, &ga, &dwa);  // sums
        CHECK_MESSAGE(m_params_max_diff(c, g3, ga, 3) < 1e-12,
                      f3 << "'s gradients: largest difference from the mean of each sequence's alone "
                         << m_params_max_diff(c, g3, ga, 3) << ", allowed 1e-12 (formulas §27)");
        double gap = 0;
        for (int j = 0; j < c.H; j++) gap = nan_max(gap, std::fabs(dw3[j] - dwa[j] / 3));
        CHECK_MESSAGE(gap < 1e-12, f3 << "'s dw: largest difference from the mean of each sequence's alone " << gap
                                      << ", allowed 1e-12");
        CHECK_MESSAGE(max_abs(g3.W_p) > 1e-3, f3 << "'s gradient of W_p: largest entry " << max_abs(g3.W_p)
                                                 << ", expected above 1e-3 (the query rows reach W_p)");
    }
    const Config c = preset("tiny-gpt2");
    const Params<double> p = m_model<double>(c, 1, 0.1);
    const TD w({c.H});
    M_CHECK_TF_ERROR(xlnet_loss(c, p, w, {1, 2, 3}, 1, {0, 1, 2}, 0), "predict");
    M_CHECK_TF_ERROR(xlnet_loss(c, p, w, {1, 2, 3}, 2, {0, 1, 2}, 1), "tokens");
    M_CHECK_TF_ERROR(xlnet_loss(c, p, w, {1, 2, 3}, 1, {0, 2, 2}, 1), "permutation");
    M_CHECK_TF_ERROR(xlnet_loss(preset("tiny-bert"), m_model<double>(preset("tiny-bert"), 1, 0.1), w, {1, 2, 3}, 1, {0, 1, 2}, 1), "bert");
    // No sequences, or sequences of no tokens, even where the token count fits (0 = 0 x 2, 0 = 1 x 0).
    M_CHECK_TF_ERROR(xlnet_loss(c, p, w, {}, 0, {1, 0}, 1), "0");
    M_CHECK_TF_ERROR(xlnet_query_probs(c, p, w, {}, {}), "xlnet: 0 tokens for B = 1 sequences of n = 0");  // xlnet's own check
    {   // n = n_ctx fits, n_ctx + 1 does not.
        std::vector<int> zz(c.n_ctx), xx(c.n_ctx, 1);
        for (int i = 0; i < c.n_ctx; i++) zz[i] = c.n_ctx - 1 - i;
        CHECK_MESSAGE(std::isfinite(xlnet_loss(c, p, w, xx, 1, zz, 2)), "xlnet_loss of n = n_ctx tokens must be finite");
        zz.push_back(c.n_ctx), xx.push_back(1);
        M_CHECK_TF_ERROR(xlnet_loss(c, p, w, xx, 1, zz, 2), "n_ctx");
    }
    CHECK_THROWS_NAMING_NO_CRASH(ShapeError, xlnet_loss(c, p, TD({c.H + 1}), {1, 2, 3}, 1, {0, 1, 2}, 1), "xlnet", "w");
    CHECK_THROWS_NAMING_NO_CRASH(Error, xlnet_loss(c, p, w, {1, c.V, 3}, 1, {0, 1, 2}, 1), "token id " + std::to_string(c.V));
}

TEST_CASE("xlnet: sequences of one token: the query sees only w and its position; gradient check" * doctest::test_suite("assignment 5")) {
    // n = 1, z = (0): the query stream of the only position attends to nothing (an all-masked row
    // gives zeros), so its X^(L) row depends on w, W_p[0] and the layers' biases and LayerNorms alone.
    const Config c = preset("tiny-gpt2");
    Params<double> p = m_model<double>(c, 121, 0.2);
    Rng r(122);
    TD w = randn_vec(c.H, r, 0.5);
    const std::vector<int> z = {0}, x = {3, 7};
    // The content stream reaches no loss here, so the attention weights get no gradient: check w,
    // W_e (the query's de-embedding), W_p and an FFN matrix by central differences.
    Params<double> g = make_params<double>(c);
    TD dw({c.H});
    xlnet_loss(c, p, w, x, 2, z, 1, &g, &dw);
    auto L = [&] { return xlnet_loss(c, p, w, x, 2, z, 1); };
    const std::string f = "xlnet_loss (tiny-gpt2, B = 2 sequences of n = 1: x = (3), (7), z = (1), predict 1)'s ";
    grad_check(L, w, dw, f + "dw", m_xlnet_dw_equation);
    grad_check(L, p.W_e, g.W_e, f + "gradient of W_e", "§27 dW_e += dZ^T g^(L) + OneHot(x)^T dh^(0)");
    grad_check(L, p.W_p, g.W_p, f + "gradient of W_p", "§27 d(W_p)_{i,:} += dh^(0)_i + dg^(0)_i");
    grad_check(L, p.layers[1].ffn.W_1, g.layers[1].ffn.W_1, f + "gradient of W_1 of layer 2", "§14 dW_1 += X^T dZ");
    CHECK_CLOSE(g.layers[0].attn.W_Q[0], TD(g.layers[0].attn.W_Q[0].shape, 0.0), 0.0, f + "gradient of W_Q of layer 1, head 1",
                "0: the query attends to nothing and the content stream reaches no loss, formulas §27");
    // Both sequences' queries are the same row (w + W_p[0]), so their probabilities are equal.
    const TD P3 = xlnet_query_probs(c, p, w, {3}, z), P7 = xlnet_query_probs(c, p, w, {7}, z);
    CHECK_CLOSE(P3, P7, 0.0, "xlnet_query_probs of x = (3)", "that of x = (7): the query row w + W_p[1] does not see x");
    CHECK_MESSAGE(xlnet_loss(c, p, w, x, 2, z, 1) == doctest::Approx(-(std::log(P3(0, 3)) + std::log(P3(0, 7))) / 2).epsilon(1e-12),
                  f << "loss: expected " << -(std::log(P3(0, 3)) + std::log(P3(0, 7))) / 2
                    << " (-(log P(3) + log P(7)) / 2 under xlnet_query_probs, formulas §27)");
}

TEST_CASE("xlnet: predicting every position (the first in z sees nothing) for every variant but BERT" * doctest::test_suite("assignment 5")) {
    for (const char* name : {"tiny-gpt", "tiny-gpt2", "tiny-gpt3", "tiny-roberta"}) {
        INFO("preset " << std::string(name));
        Config c = preset(name);
        c.attn_bias = std::string(name) == "tiny-gpt2";
        Params<double> p = m_model<double>(c, 102, 0.2);
        Rng r(103);
        TD w = randn_vec(c.H, r, 0.5);
        const std::vector<int> z = {2, 0, 3, 1}, x = m_random_ids(4, 10, r);
        auto loss = [&](Params<double>* g) {
            TD dw({c.H});
            return xlnet_loss(c, p, w, x, 1, z, 4, g, g ? &dw : nullptr);
        };
        if (!m_grad_check(c, p, loss, 104, std::string("xlnet_loss (") + name + ", n = 4, z = (2, 0, 3, 1), predict all 4)",
                          m_locate_xlnet))
            break;
    }
}

TEST_CASE("xlnet: one post-LN layer's query stream equals Attention(g W^Q, h W^K, h W^V) written out" * doctest::test_suite("assignment 5")) {
    Config c = preset("tiny-gpt");
    c.L = 1;
    const Params<double> p = m_model<double>(c, 105, 0.3);
    Rng r(106);
    const TD w = randn_vec(c.H, r, 0.5);
    const std::vector<int> z = {1, 3, 0, 2}, x = {4, 8, 1, 6};
    const int n = 4;
    std::vector<int> rank(n);
    for (int t = 0; t < n; t++) rank[z[t]] = t;
    TD h(n, c.H), g(n, c.H), Mq(n, n, -INF);  // h^(0), g^(0); query i sees content j before it in z
    for (int i = 0; i < n; i++)
        for (int j = 0; j < c.H; j++) h(i, j) = p.W_e(x[i], j) + p.W_p(i, j), g(i, j) = w[j] + p.W_p(i, j);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (rank[j] < rank[i]) Mq(i, j) = 1;
    const Layer<double>& y = p.layers[0];
    std::vector<TD> heads;
    for (int a = 0; a < c.A; a++)
        heads.push_back(Attention(matmul(g, y.attn.W_Q[a]), matmul(h, y.attn.W_K[a]), matmul(h, y.attn.W_V[a]), Mq));
    TD u = matmul(Concat(heads), y.attn.W_O);
    add_inplace(u, g);
    const TD g1 = LayerNorm(u, y.ln_1_gamma, y.ln_1_beta, c.eps);  // post-LN: LN(MHA + g), LN(FFN + .)
    TD v = FFN(g1, y.ffn, c.activation);
    add_inplace(v, g1);
    const TD gL = LayerNorm(v, y.ln_2_gamma, y.ln_2_beta, c.eps);
    const TD P_hand = Softmax(matmul_nt(gL, p.W_e));
    const TD P = xlnet_query_probs(c, p, w, x, z);
    CHECK_CLOSE(P, P_hand, 1e-12, "xlnet_query_probs", "the query stream written out by hand, formulas §27");
}

TEST_CASE("xlnet: gradient descent on random permutations lowers the loss of a repeating text" * doctest::test_suite("assignment 5")) {
    const Config c = preset("tiny-gpt2");
    Params<double> p = m_model<double>(c, 100, 0.0);
    Rng r(101);
    TD w = randn_vec(c.H, r, 0.02);
    const std::vector<int> x = {1, 2, 3, 4, 1, 2, 3, 4};  // the pattern makes every token predictable
    auto shuffled = [&] {
        std::vector<int> z = {0, 1, 2, 3, 4, 5, 6, 7};
        for (int i = 7; i > 0; i--) std::swap(z[i], z[r.below(i + 1)]);
        return z;
    };
    double first = 0, last = 0;
    std::vector<std::vector<int>> eval_z;
    for (int k = 0; k < 8; k++) eval_z.push_back(shuffled());
    for (auto& z : eval_z) first += xlnet_loss(c, p, w, x, 1, z, 3) / 8;
    for (int step = 0; step < 300; step++) {
        Params<double> g = make_params<double>(c);
        TD dw({c.H});
        xlnet_loss(c, p, w, x, 1, shuffled(), 3, &g, &dw);
        auto P = named_tensors(c, p), G = named_tensors(c, g);
        for (std::size_t k = 0; k < P.size(); k++)
            for (std::size_t j = 0; j < P[k].tensor->size(); j++) (*P[k].tensor)[j] -= 0.1 * (*G[k].tensor)[j];
        for (std::size_t j = 0; j < w.size(); j++) w[j] -= 0.1 * dw[j];
    }
    for (auto& z : eval_z) last += xlnet_loss(c, p, w, x, 1, z, 3) / 8;
    MESSAGE("xlnet loss from " << first << " to " << last);
    CHECK(first > 2.0);  // about log 13 at the start
    CHECK(last < first - 1.0);
}
TEST_SUITE_END();

// ================================================================================================
// AdamW, learning-rate schedule, gradient clipping
// ================================================================================================
TEST_SUITE_BEGIN("training");
TEST_CASE("AdamW: decays() is true for matrices only, never for gains, biases, w_A, w_B" * doctest::test_suite("assignment 6 (0 points)")) {
    CHECK(decays("W_e", Tensor<float>(3, 2)));
    CHECK(decays("layers.0.attn.W_Q.0", Tensor<float>(3, 2)));
    CHECK_FALSE(decays("layers.0.ffn.b_1", Tensor<float>({4})));
    CHECK_FALSE(decays("layers.0.ln_1.gamma", Tensor<float>({4})));
    CHECK_FALSE(decays("ln_f.beta", Tensor<float>({4})));
    CHECK_FALSE(decays("w_A", Tensor<float>({4})));
    CHECK_FALSE(decays("w_B", Tensor<float>(1, 4)));
}

TEST_CASE("AdamW: adamw_step matches a hand-computed step (t = 1 and t = 2), decay on matrices only" * doctest::test_suite("assignment 6")) {
    const Config c = preset("tiny-bert");
    Params<float> p = make_params<float>(c), g = make_params<float>(c);
    // theta = 1 everywhere, g = 0.5: at t = 1 mhat = g, vhat = g^2, so the Adam part is lr * 1.
    for (auto& nt : named_tensors(c, p)) nt.tensor->data.assign(nt.tensor->size(), 1.0f);
    for (auto& nt : named_tensors(c, g)) nt.tensor->data.assign(nt.tensor->size(), 0.5f);
    AdamW opt;
    opt.beta1 = 0.9, opt.beta2 = 0.95, opt.eps = 1e-8, opt.weight_decay = 0.1;
    adamw_init(c, opt);
    {
    INFO("adamw_step at t = 1 (theta = 1, g = 0.5, lr 0.1, beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1); expected "
         "values hand-computed, formulas §29");
    adamw_step(c, p, g, opt, 0.1);
    CHECK_MESSAGE(opt.t == 1, "the step count t after one step");
    // matrix: 1 - 0.1 * 0.1 * 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.89; others 1 - 0.1 = 0.9
    const std::string mat_t1 = ": expected 0.89 = 1 - lr wd theta - lr mhat / (sqrt(vhat) + eps) with the bias-corrected mhat = m / (1 - beta1) = g, "
        "vhat = v / (1 - beta2) = g^2 (a matrix: decayed)";
    const std::string vec_t1 = ": expected 0.9 = 1 - lr mhat / (sqrt(vhat) + eps) with the bias-corrected mhat = g, vhat = g^2 (not a matrix: no decay)";
    CHECK_MESSAGE(p.W_e(2, 3) == doctest::Approx(0.89).epsilon(1e-6), "W_e, entry (3, 4)" << mat_t1);
    CHECK_MESSAGE(p.layers[1].attn.W_O(0, 0) == doctest::Approx(0.89).epsilon(1e-6), "layer 2's W_O, entry (1, 1)" << mat_t1);
    CHECK_MESSAGE(p.layers[0].ffn.b_1[3] == doctest::Approx(0.9).epsilon(1e-6), "layer 1's b_1, entry 4" << vec_t1);
    CHECK_MESSAGE(p.layers[0].ln_2_gamma[1] == doctest::Approx(0.9).epsilon(1e-6), "layer 1's ln_2 gamma, entry 2" << vec_t1);
    CHECK_MESSAGE(p.w_A[0] == doctest::Approx(0.9).epsilon(1e-6), "w_A, entry 1" << vec_t1);
    CHECK_MESSAGE(p.w_B[5] == doctest::Approx(0.9).epsilon(1e-6), "w_B, entry 6" << vec_t1);
    CHECK_MESSAGE(opt.m.W_e(2, 3) == doctest::Approx(0.05).epsilon(1e-6), "m of W_e, entry (3, 4): expected (1 - 0.9) * 0.5 = 0.05");
    CHECK_MESSAGE(opt.v.W_e(2, 3) == doctest::Approx(0.0125).epsilon(1e-6),
                  "v of W_e, entry (3, 4): expected (1 - 0.95) * 0.5^2 = 0.0125");
    }
    // t = 2 with g = -0.25 and lr = 0.05:
    //   m = 0.9 * 0.05 - 0.1 * 0.25 = 0.02,  v = 0.95 * 0.0125 + 0.05 * 0.0625 = 0.015
    //   mhat = 0.02 / (1 - 0.81) = 0.105263..., vhat = 0.015 / (1 - 0.9025) = 0.153846...
    for (auto& nt : named_tensors(c, g)) nt.tensor->data.assign(nt.tensor->size(), -0.25f);
    const double mhat = 0.02 / (1 - 0.81), vhat = 0.015 / (1 - 0.9025);
    const double adam = 0.05 * mhat / (std::sqrt(vhat) + 1e-8);
    {
    INFO("adamw_step at t = 2 (after the step above; g = -0.25, lr 0.05): m = 0.02, v = 0.015, bias-corrected "
         "mhat = m / (1 - 0.9^2) = " << mhat << ", vhat = v / (1 - 0.95^2) = " << vhat << ", lr mhat / (sqrt(vhat) + eps) = "
         << adam << "; expected values hand-computed, formulas §29");
    adamw_step(c, p, g, opt, 0.05);
    CHECK_MESSAGE(opt.t == 2, "the step count t after two steps");
    CHECK_MESSAGE(p.W_e(2, 3) == doctest::Approx(0.89 - 0.05 * 0.1 * 0.89 - adam).epsilon(1e-6),
                  "W_e, entry (3, 4): expected 0.89 - lr wd 0.89 - " << adam << " = " << 0.89 - 0.05 * 0.1 * 0.89 - adam << " (a matrix: decayed)");
    CHECK_MESSAGE(p.layers[0].ffn.b_1[3] == doctest::Approx(0.9 - adam).epsilon(1e-6),
                  "layer 1's b_1, entry 4: expected 0.9 - " << adam << " = " << 0.9 - adam << " (no decay)");
    CHECK_MESSAGE(p.w_A[0] == doctest::Approx(0.9 - adam).epsilon(1e-6),
                  "w_A, entry 1: expected 0.9 - " << adam << " = " << 0.9 - adam << " (no decay)");
    CHECK_MESSAGE(p.layers[1].ln_1_beta[0] == doctest::Approx(0.9 - adam).epsilon(1e-6),
                  "layer 2's ln_1 beta, entry 1: expected 0.9 - " << adam << " = " << 0.9 - adam << " (no decay)");
    CHECK_MESSAGE(opt.m.W_e(2, 3) == doctest::Approx(0.02).epsilon(1e-5),
                  "m of W_e, entry (3, 4): expected 0.9 * 0.05 + 0.1 * (-0.25) = 0.02 (m is stored without the correction)");
    CHECK_MESSAGE(opt.v.W_e(2, 3) == doctest::Approx(0.015).epsilon(1e-5),
                  "v of W_e, entry (3, 4): expected 0.95 * 0.0125 + 0.05 * 0.0625 = 0.015 (v is stored without the correction)");
    }
    // A zero gradient moves only the decayed matrices.
    Params<float> z = make_params<float>(c);
    AdamW fresh;
    adamw_init(c, fresh);
    Params<float> q = make_params<float>(c);
    for (auto& nt : named_tensors(c, q)) nt.tensor->data.assign(nt.tensor->size(), 2.0f);
    adamw_step(c, q, z, fresh, 0.1);
    CHECK_MESSAGE(q.W_e(0, 0) == doctest::Approx(2.0 - 0.1 * 0.1 * 2.0).epsilon(1e-6),
                  "adamw_step with g = 0 at t = 1 (theta = 2, lr 0.1, the default weight decay 0.1), W_e entry (1, 1): expected "
                  "2 - lr wd theta = 1.98 (only the decay moves a matrix; hand-computed, formulas §29)");
    CHECK_MESSAGE(q.layers[0].ffn.b_2[0] == 2.0f, "adamw_step with g = 0 at t = 1, layer 1's b_2 entry 1: expected exactly 2 "
                                                  "(no decay, and mhat = 0; formulas §29)");
    // A gradient as small as eps: at t = 1 the Adam part is lr * g / (|g| + eps) = lr / 2.
    Params<float> tiny = make_params<float>(c);
    for (auto& nt : named_tensors(c, tiny)) nt.tensor->data.assign(nt.tensor->size(), 1e-8f);
    AdamW small;
    small.eps = 1e-8;
    adamw_init(c, small);
    Params<float> r = make_params<float>(c);
    for (auto& nt : named_tensors(c, r)) nt.tensor->data.assign(nt.tensor->size(), 1.0f);
    adamw_step(c, r, tiny, small, 0.1);
    INFO("adamw_step at t = 1 with g = eps = 1e-8 (theta = 1, lr 0.1): the Adam part is lr g / (|g| + eps) = lr / 2 = 0.05 "
         "(hand-computed, formulas §29: eps outside the square root)");
    CHECK_MESSAGE(r.layers[0].ffn.b_1[0] == doctest::Approx(1.0 - 0.05).epsilon(1e-6), "layer 1's b_1, entry 1: expected 0.95");
    CHECK_MESSAGE(r.W_e(1, 1) == doctest::Approx(1.0 - 0.1 * 0.1 - 0.05).epsilon(1e-6),
                  "W_e, entry (2, 2): expected 1 - lr wd 1 - 0.05 = 0.94");
    // adamw_init on a used optimiser starts it afresh: t = 0, m = v = 0.
    adamw_init(c, opt);
    CHECK(opt.t == 0);
    for (auto* s : {&opt.m, &opt.v})
        for (auto& nt : named_tensors(c, *s))
            for (float v : nt.tensor->data) REQUIRE(v == 0.0f);
}

TEST_CASE("lr_schedule: linear warmup, peak at warmup, cosine to min_lr at the last step" * doctest::test_suite("assignment 6")) {
    const long long steps = 31, warmup = 10;
    const double lr = 1.0, min_lr = 0.1;
    {
    INFO("lr_schedule(step, steps = 31, warmup = 10, lr = 1, min_lr = 0.1) (steps counted from 0), formulas §30");
    for (long long s = 0; s < warmup; s++)
        CHECK_MESSAGE(lr_schedule(s, steps, warmup, lr, min_lr) == doctest::Approx(lr * (double)(s + 1) / warmup).epsilon(1e-12),
                      "step " << s << " (warm-up): expected lr (step + 1) / warmup = " << lr * (double)(s + 1) / warmup);
    CHECK_MESSAGE(lr_schedule(0, steps, warmup, lr, min_lr) == doctest::Approx(0.1), "step 0: expected lr / warmup = 0.1");
    CHECK_MESSAGE(lr_schedule(warmup - 1, steps, warmup, lr, min_lr) == doctest::Approx(lr), "step 9, the last of the warm-up: expected lr");
    CHECK_MESSAGE(lr_schedule(warmup, steps, warmup, lr, min_lr) == doctest::Approx(lr), "step 10, the first of the cosine: expected lr");
    CHECK_MESSAGE(lr_schedule(20, steps, warmup, lr, min_lr) == doctest::Approx(0.55).epsilon(1e-12),
                  "step 20, half way down the cosine: expected (lr + min_lr) / 2 = 0.55");  // half way
    CHECK_MESSAGE(lr_schedule(steps - 1, steps, warmup, lr, min_lr) == doctest::Approx(min_lr).epsilon(1e-12),
                  "step 30, the last: expected min_lr = 0.1");
    double prev = lr_schedule(warmup, steps, warmup, lr, min_lr);
    for (long long s = warmup + 1; s < steps; s++) {
        const double cur = lr_schedule(s, steps, warmup, lr, min_lr);
        INFO("step " << s << ": " << cur << ", step " << s - 1 << ": " << prev
                     << "; after the warm-up the rate must fall at every step and stay >= min_lr");
        CHECK(cur < prev);
        CHECK(cur >= min_lr - 1e-15);
        prev = cur;
    }
    double peak = 0;
    for (long long s = 0; s < steps; s++) peak = std::max(peak, lr_schedule(s, steps, warmup, lr, min_lr));
    CHECK_MESSAGE(peak == doctest::Approx(lr), "the largest rate over all steps must be lr = 1");
    }
    // No warmup: starts at lr. One step: lr.
    CHECK_MESSAGE(lr_schedule(0, 100, 0, 0.5, 0.0) == doctest::Approx(0.5), "lr_schedule(0, 100, warmup 0, 0.5, 0): expected lr = 0.5");
    CHECK_MESSAGE(lr_schedule(99, 100, 0, 0.5, 0.0) == doctest::Approx(0.0), "lr_schedule(99, 100, warmup 0, 0.5, 0), the last step: expected min_lr = 0");
    CHECK_MESSAGE(lr_schedule(0, 1, 0, 0.5, 0.05) == doctest::Approx(0.5), "lr_schedule(0, 1, warmup 0, 0.5, 0.05), the only step: expected lr = 0.5");
    CHECK_MESSAGE(std::isfinite(lr_schedule(5, 5, 5, 0.5, 0.05)), "lr_schedule(5, steps 5, warmup 5, ...) must be finite "
                                                                  "(no division by steps - warmup = 0)");
}

TEST_CASE("AdamW: clip_grad_norm returns the norm, scales down to max_norm, leaves small gradients" * doctest::test_suite("assignment 6")) {
    const Config c = preset("tiny-gpt2");
    Params<float> g = make_params<float>(c);
    g.W_e(1, 2) = 3.0f;
    g.layers[1].ffn.b_1[4] = 4.0f;  // norm 5
    INFO("clip_grad_norm on a gradient with W_e (2, 3) = 3 and layer 2's b_1 entry 5 = 4, all else 0: the global norm is "
         "sqrt(3^2 + 4^2) = 5 (hand-computed, formulas §31)");
    CHECK_MESSAGE(clip_grad_norm(c, g, 10.0) == doctest::Approx(5.0), "max_norm 10: must return the norm 5");
    CHECK_MESSAGE(g.W_e(1, 2) == 3.0f, "max_norm 10 > 5: W_e (2, 3) must stay exactly 3, got " << g.W_e(1, 2));
    CHECK_MESSAGE(g.layers[1].ffn.b_1[4] == 4.0f, "max_norm 10 > 5: b_1 entry 5 must stay exactly 4, got " << g.layers[1].ffn.b_1[4]);
    CHECK_MESSAGE(clip_grad_norm(c, g, 0.0) == doctest::Approx(5.0), "max_norm 0 (no clipping): must return the norm 5");  // 0: no clipping
    CHECK_MESSAGE(g.W_e(1, 2) == 3.0f, "max_norm 0 means no clipping: W_e (2, 3) must stay exactly 3, got " << g.W_e(1, 2));
    CHECK_MESSAGE(clip_grad_norm(c, g, 1.0) == doctest::Approx(5.0), "max_norm 1: must return the norm before clipping, 5");
    CHECK_MESSAGE(g.W_e(1, 2) == doctest::Approx(0.6).epsilon(1e-6), "max_norm 1: W_e (2, 3) must become 3 / 5 = 0.6, got " << g.W_e(1, 2));
    CHECK_MESSAGE(g.layers[1].ffn.b_1[4] == doctest::Approx(0.8).epsilon(1e-6),
                  "max_norm 1: b_1 entry 5 must become 4 / 5 = 0.8, got " << g.layers[1].ffn.b_1[4]);
    CHECK_MESSAGE(clip_grad_norm(c, g, 100.0) == doctest::Approx(1.0).epsilon(1e-6), "after clipping to 1 the norm must be 1");
    g.ln_f_gamma[0] = 1.0f;  // every tensor counts, ln_f included
    CHECK_MESSAGE(clip_grad_norm(c, g, 100.0) == doctest::Approx(std::sqrt(2.0)).epsilon(1e-6),
                  "with ln_f's gamma entry 1 = 1 added: the norm must be sqrt(0.6^2 + 0.8^2 + 1) = sqrt 2 (every tensor counts)");
}

TEST_CASE("train_step: zero, the mean of accum batches' gradients, clip, one AdamW step; a loss that is not finite changes nothing") {
    const Config c = preset("tiny-gpt2");
    const Batch b1 = m_batch(c, 31), b2 = m_batch(c, 32);
    // By hand: the mean of the two batches' gradients, clipped to norm 0.5, one AdamW step.
    Params<float> p = m_model<float>(c, 7, 0.1), q = m_model<float>(c, 7, 0.1);
    Params<float> g = make_params<float>(c), h = make_params<float>(c);
    AdamW opt, ref;
    adamw_init(c, opt), adamw_init(c, ref);
    for (auto& nt : named_tensors(c, g))
        for (float& v : nt.tensor->data) v = 1.0f;  // stale values: train_step zeroes g first
    const double l1 = model_loss(c, q, b1, &h), l2 = model_loss(c, q, b2, &h);
    for (auto& nt : named_tensors(c, h))
        for (float& v : nt.tensor->data) v *= 0.5f;
    const double norm = clip_grad_norm(c, h, 0.5);
    adamw_step(c, q, h, ref, 1e-2);
    int calls = 0;
    const StepResult r = train_step(c, p, g, opt, 1e-2, 0.5, 2, [&](Params<float>& grad) {
        return model_loss(c, p, calls++ == 0 ? b1 : b2, &grad);
    });
    CHECK(calls == 2);
    CHECK(r.loss == doctest::Approx((l1 + l2) / 2).epsilon(1e-12));
    CHECK(r.norm == doctest::Approx(norm).epsilon(1e-6));
    CHECK(norm > 0.5);  // the clipping was exercised
    CHECK(opt.t == 1);
    CHECK(m_params_bits_equal(c, p, q));
    // A loss that is not finite: no update, the caller stops.
    Params<float> before = m_model<float>(c, 7, 0.1);
    Params<float> p2 = m_model<float>(c, 7, 0.1);
    AdamW o2;
    adamw_init(c, o2);
    const StepResult bad = train_step(c, p2, g, o2, 1e-2, 1.0, 1, [&](Params<float>&) { return std::nan(""); });
    CHECK_FALSE(std::isfinite(bad.loss));
    CHECK(o2.t == 0);
    CHECK(m_params_bits_equal(c, p2, before));
}

// ================================================================================================
// Sampling
// ================================================================================================
TEST_CASE("sample: sample_logits with top-p draws from the nucleus with its renormalised probabilities (formulas §32)") {
    // p = Softmax(z) = (0.5, 0.3, 0.15, 0.05) (z = log p). top_p 0.7: the nucleus {0, 1} (0.5 < 0.7
    // <= 0.8), drawn as 0.625 / 0.375; top_p 0.9: {0, 1, 2} (0.95 >= 0.9); top_p 1: all four.
    // With temperature 2 the probabilities are p^(1/2) renormalised: (0.4463, 0.3457, 0.2444, 0.1411)/1.1775...
    const std::vector<float> z = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    auto frequencies = [&](double T, double top_p, int top_k) {
        Rng rng(7);
        std::vector<double> f(4, 0);
        const int N = 40000;
        for (int k = 0; k < N; k++) f[sample_logits(z, T, top_k, rng, top_p)] += 1.0 / N;
        return f;
    };
    auto check_frequencies = [](const std::vector<double>& f, const std::vector<double>& want) {
        for (std::size_t j = 0; j < f.size(); j++) {
            CAPTURE(j);
            CAPTURE(f[j]);
            CAPTURE(want[j]);
            CHECK(std::abs(f[j] - want[j]) <= 4 * std::sqrt(want[j] * (1 - want[j]) / 40000) + 1e-12);  // four standard errors
        }
    };
    check_frequencies(frequencies(1, 0.7, 0), {0.625, 0.375, 0, 0});
    check_frequencies(frequencies(1, 0.9, 0), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
    check_frequencies(frequencies(1, 1.0, 0), {0.5, 0.3, 0.15, 0.05});
    check_frequencies(frequencies(1, 0.9, 2), {0.625, 0.375, 0, 0});  // top-k first: {0, 1}, whose 0.8 of 0.8 is all of it
    const double a = std::sqrt(0.5), b = std::sqrt(0.3), c = std::sqrt(0.15), d = std::sqrt(0.05), S = a + b + c + d;
    check_frequencies(frequencies(2, 1.0, 0), {a / S, b / S, c / S, d / S});
    check_frequencies(frequencies(2, 0.6, 0), {a / (a + b), b / (a + b), 0, 0});  // a/S = 0.38 < 0.6 <= (a+b)/S = 0.67
    // A nucleus of one: top_p below the largest probability draws it always.
    Rng rng(1);
    for (int k = 0; k < 100; k++) CHECK(sample_logits(z, 1.0, 0, rng, 0.1) == 0);
    // Ties keep the lower id first: (1, 1, 1, 1) / 4 with top_p 0.5 is {0, 1}.
    check_frequencies([&] {
        Rng r(3);
        std::vector<double> f(4, 0);
        for (int k = 0; k < 40000; k++) f[sample_logits({0, 0, 0, 0}, 1.0, 0, r, 0.5)] += 1.0 / 40000;
        return f;
    }(), {0.5, 0.5, 0, 0});
    // Logits out of id order, with a tie at the nucleus' edge: z = (0, 0, 1, 0) gives (1, 1, e, 1)
    // / (e + 3) = (0.175, 0.175, 0.475, 0.175); top_p 0.6 keeps id 2, then the lowest of the tied
    // ids, 0: {2, 0} drawn as e / (e + 1) and 1 / (e + 1).
    check_frequencies([&] {
        Rng r(5);
        std::vector<double> f(4, 0);
        for (int k = 0; k < 40000; k++) f[sample_logits({0, 0, 1, 0}, 1.0, 0, r, 0.6)] += 1.0 / 40000;
        return f;
    }(), {1 / (std::exp(1.0) + 1), 0, std::exp(1.0) / (std::exp(1.0) + 1), 0});
    Rng r0(1);
    M_CHECK_TF_ERROR(sample_logits(z, 1.0, 0, r0, 0.0), "top_p must be in (0, 1]");
}

TEST_CASE("sample: sample_logits greedy, reproducible, top-k restricted") {
    const std::vector<float> z = {0.1f, 2.0f, -1.0f, 1.5f, 1.9f, 0.0f, -3.0f, 1.0f, 0.5f, -0.5f};
    Rng rng(1);
    for (int k : {0, 1, 3, 10})
        CHECK(sample_logits(z, 0.0, k, rng) == 1);  // temperature 0: argmax
    CHECK(sample_logits(z, 1.0, 1, rng) == 1);      // top-1: argmax
    Rng a(7), b(7);
    std::vector<int> da, db;
    for (int k = 0; k < 200; k++) da.push_back(sample_logits(z, 1.0, 0, a)), db.push_back(sample_logits(z, 1.0, 0, b));
    CHECK(da == db);
    CHECK(std::set<int>(da.begin(), da.end()).size() > 3);
    std::map<int, int> counts;
    Rng r(3);
    for (int k = 0; k < 2000; k++) counts[sample_logits(z, 1.0, 3, r)]++;
    CHECK(counts.size() == 3);  // all of the top 3 occur, nothing else
    CHECK(counts.count(1) == 1);
    CHECK(counts.count(4) == 1);
    CHECK(counts.count(3) == 1);
    // Frequencies follow Softmax over the top 3: e^2 : e^1.9 : e^1.5.
    const double s = std::exp(2.0) + std::exp(1.9) + std::exp(1.5);
    CHECK(counts[1] / 2000.0 == doctest::Approx(std::exp(2.0) / s).epsilon(0.1));
    CHECK(counts[3] / 2000.0 == doctest::Approx(std::exp(1.5) / s).epsilon(0.15));
    // High temperature spreads, low temperature concentrates.
    Rng cold(4);
    int top = 0;
    for (int k = 0; k < 500; k++) top += sample_logits(z, 0.01, 0, cold) == 1;
    CHECK(top == 500);
}

// Exact, not statistical: for one Rng state the draw is determined. The reference below follows the
// formula: the kept ids (the top_k largest logits, largest first and equal logits in id order, or all
// V in id order), weights w_j = exp((z_j - max z) / T), u = uniform() * sum w, and the first id whose
// cumulative weight passes u. The second logit vector has ties at the k-th place for k = 2, 3, 4.
TEST_CASE("sample: sample_logits draws exactly the id whose cumulative weight passes u * sum, for every T and top_k") {
    const std::vector<std::vector<float>> cases = {{0.1f, 2.0f, -1.0f, 1.5f, 1.9f, 0.0f, -3.0f, 1.0f, 0.5f, -0.5f},
                                                   {3.0f, 3.0f, 5.0f, 3.0f, 1.0f, 3.0f, 0.0f, 3.0f}};
    for (const std::vector<float>& z : cases) {
        const int V = (int)z.size();
        std::map<int, int> drawn;
        for (double T : {0.5, 1.0, 2.0})
            for (int top_k : {0, 1, 2, 3, 4, 9, 10, 11})
                for (uint64_t seed = 0; seed < 40; seed++) {
                    const int k = (top_k > 0 && top_k < V) ? top_k : V;
                    std::vector<int> ids(V);
                    for (int j = 0; j < V; j++) ids[j] = j;
                    if (k < V) {
                        std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return z[a] > z[b]; });
                        ids.resize(k);
                    }
                    float z_max = z[ids[0]];
                    for (int i : ids) z_max = std::max(z_max, z[i]);
                    std::vector<double> w;
                    double sum = 0;
                    for (int i : ids) w.push_back(std::exp((z[i] - z_max) / T)), sum += w.back();
                    Rng r(seed), copy(seed);
                    double u = copy.uniform() * sum;
                    int expected = ids.back();
                    for (int j = 0; j < k; j++) {
                        if (u < w[j]) {
                            expected = ids[j];
                            break;
                        }
                        u -= w[j];
                    }
                    const int got = sample_logits(z, T, top_k, r);
                    INFO("T " << T << ", top_k " << top_k << ", seed " << seed);
                    CHECK(got == expected);
                    CHECK(r.next() == copy.next());  // one uniform() drawn, no more
                    if (k < V) CHECK(std::count(ids.begin(), ids.end(), got) == 1);
                    drawn[got]++;
                }
        CHECK(drawn.size() == (std::size_t)V);  // every id is drawn somewhere: the cases above reach all of them
    }
    // Logits far apart: the weights are exp((z - max z) / T), so nothing overflows (exp(z - z_1) would).
    const std::vector<float> far_logits = {-1000.0f, 0.0f, 1.0f};
    std::set<int> seen;
    for (uint64_t seed = 0; seed < 30; seed++) {
        Rng r(seed), copy(seed);
        const double w1 = std::exp(-1.0), sum = std::exp(-1001.0) + w1 + 1.0, u = copy.uniform() * sum;
        const int expected = u < std::exp(-1001.0) ? 0 : u < std::exp(-1001.0) + w1 ? 1 : 2;
        CHECK(sample_logits(far_logits, 1.0, 0, r) == expected);
        seen.insert(expected);
    }
    CHECK(seen == std::set<int>{1, 2});
    // Large logits: exp(1000) overflows to infinity unless the largest is subtracted first.
    const std::vector<float> high = {1000.0f, 999.0f};
    std::set<int> seen_high;
    for (uint64_t seed = 0; seed < 30; seed++) {
        Rng r(seed), copy(seed);
        const double u = copy.uniform() * (1.0 + std::exp(-1.0));
        const int expected = u < 1.0 ? 0 : 1;
        CHECK(sample_logits(high, 1.0, 0, r) == expected);
        seen_high.insert(expected);
    }
    CHECK(seen_high == std::set<int>{0, 1});
    // u exactly on a boundary (one draw in 2^53): id j owns the half-open interval [W_j-1, W_j) of the
    // cumulative weights. Two equal logits and a draw of 0.5: u = 1 = w_0 is the second id's.
    Rng half = m_rng_uniform(0, 0.5);
    CHECK(sample_logits({0.0f, 0.0f}, 1.0, 0, half) == 1);
    // A draw of 0 where the first id's weight exp(-1000) is 0: never the id of weight 0.
    Rng zero = m_rng_uniform(0, 0.0);
    CHECK(sample_logits({-1000.0f, 0.0f}, 1.0, 0, zero) == 1);
    // The check for non-finite logits reads every id, the last too, and no further: the element after
    // the end (inside the vector's capacity) is NaN here.
    const std::vector<float>& z = cases[0];
    std::vector<float> bad = z;
    bad.back() = std::numeric_limits<float>::infinity();
    Rng r(1);
    M_CHECK_TF_ERROR(sample_logits(bad, 1.0, 0, r), "not finite", "token id 9");
    std::vector<float> bad0 = z;  // the first id too
    bad0.front() = std::numeric_limits<float>::quiet_NaN();
    M_CHECK_TF_ERROR(sample_logits(bad0, 1.0, 0, r), "not finite", "token id 0");
    std::vector<float> padded;
    padded.reserve(z.size() + 1);
    padded.assign(z.begin(), z.end());
    padded.push_back(std::numeric_limits<float>::quiet_NaN());
    padded.pop_back();
    CHECK(sample_logits(padded, 0.0, 0, r) == 1);
    CHECK(sample_logits(padded, 1.0, 3, r) >= 0);
}
TEST_SUITE_END();

// ================================================================================================
// Mistakes a student makes: cases that fail for wrong versions `make mutants` found passing (docs/mutation.md)
// ================================================================================================
TEST_SUITE_BEGIN("modules");
namespace {
// FFN_backward in float (training's path, activation_derivative_array) against double
// (activation_derivative): dX and every parameter gradient, relative tolerance 1e-4.
void ffn_float_vs_double(Activation act, uint64_t seed) {
    const int n = 3, H = 4, F = 6;
    FFNParams<double> p;
    TD X, R;
    m_ffn_point(act, seed, 1e-2, n, H, F, p, X, R);
    FFNCache<double> cd;
    FFN(X, p, act, &cd);
    FFNParams<double> gd = zeros_like(p);
    const TD dXd = FFN_backward(X, p, act, cd, R, gd);
    const TF Xf = to_float(X), Rf = to_float(R);
    FFNParams<float> pf{to_float(p.W_1), to_float(p.b_1), to_float(p.W_2), to_float(p.b_2)};
    FFNParams<float> gf{TF(p.W_1.shape), TF(p.b_1.shape), TF(p.W_2.shape), TF(p.b_2.shape)};
    FFNCache<float> cf;
    FFN(Xf, pf, act, &cf);
    const TF dXf = FFN_backward(Xf, pf, act, cf, Rf, gf);
    const std::vector<std::pair<const TD*, const TF*>> pairs = {
        {&dXd, &dXf}, {&gd.W_1, &gf.W_1}, {&gd.b_1, &gf.b_1}, {&gd.W_2, &gf.W_2}, {&gd.b_2, &gf.b_2}};
    const char* names[] = {"dX", "dW_1", "db_1", "dW_2", "db_2"};
    int which = 0;
    for (const std::pair<const TD*, const TF*>& pair : pairs) {
        const TD* d = pair.first;
        const TF* f = pair.second;
        const std::string what = std::string("FFN_backward's ") + names[which++] + " (" + activation_name(act) + ", X 3x4, F = 6)";
        REQUIRE(d->shape == f->shape);
        CHECK_MESSAGE(max_abs(*d) > 1e-2, what << " in double: largest entry " << max_abs(*d) << ", expected above 1e-2");
        CHECK_APPROX(*f, *d, 1e-4, what + " in float", "the same in double");
    }
}
}  // namespace

TEST_CASE("FFN_GELU: FFN_backward's float path equals the double path (relu and every GELU form)" * doctest::test_suite("assignment 2")) {
    uint64_t seed = 9101;
    for (Activation a : {Activation::relu, Activation::gelu_sigmoid, Activation::gelu_tanh, Activation::gelu_erf}) {
        INFO("activation " << std::string(activation_name(a)));
        ffn_float_vs_double(a, seed++);
    }
}

TEST_CASE("lr_schedule: lr_linear, hand-computed step by step (warm-up, decay, last step, past the end)" * doctest::test_suite("assignment 6 (0 points)")) {
    // steps 7, warmup 3, lr 0.9, min_lr 0.3: warm-up 0.3, 0.6, 0.9; then span = 7 - 1 - 3 = 3 steps
    // down to min_lr: 0.9, 0.7, 0.5, 0.3 at the last step (6), and 0.3 after it.
    const double want[] = {0.3, 0.6, 0.9, 0.9, 0.7, 0.5, 0.3, 0.3, 0.3};
    for (long long s = 0; s < 9; s++) {
        CAPTURE(s);
        CHECK(lr_linear(s, 7, 3, 0.9, 0.3) == doctest::Approx(want[s]).epsilon(1e-12));
    }
    CHECK(lr_linear(100, 7, 3, 0.9, 0.3) == doctest::Approx(0.3).epsilon(1e-12));
    // No warmup, 5 steps: 0.9, 0.75, 0.6, 0.45, 0.3.
    const double nowarm[] = {0.9, 0.75, 0.6, 0.45, 0.3};
    for (long long s = 0; s < 5; s++) {
        CAPTURE(s);
        CHECK(lr_linear(s, 5, 0, 0.9, 0.3) == doctest::Approx(nowarm[s]).epsilon(1e-12));
    }
    // One step and no warmup: the span is 1 (never 0), so step 0 is lr.
    CHECK(lr_linear(0, 1, 0, 0.9, 0.3) == doctest::Approx(0.9).epsilon(1e-12));
    CHECK(lr_linear(1, 1, 0, 0.9, 0.3) == doctest::Approx(0.3).epsilon(1e-12));
}

TEST_CASE("lr_schedule: the cosine schedule, hand-computed step by step (warm-up, decay, last step, past the end)" * doctest::test_suite("assignment 6")) {
    // steps 7, warmup 3, lr 0.9, min_lr 0.3: warm-up 0.3, 0.6, 0.9; then
    // min_lr + (1 + cos(pi r)) / 2 (lr - min_lr) for r = 0, 1/3, 2/3, 1: 0.9, 0.75, 0.45, 0.3.
    const double want[] = {0.3, 0.6, 0.9, 0.9, 0.75, 0.45, 0.3, 0.3, 0.3};
    const std::string src = " (hand-computed in the comment above, formulas §30)";
    for (long long s = 0; s < 9; s++)
        CHECK_MESSAGE(lr_schedule(s, 7, 3, 0.9, 0.3) == doctest::Approx(want[s]).epsilon(1e-12),
                      "lr_schedule(step " << s << ", steps 7, warmup 3, lr 0.9, min_lr 0.3): expected " << want[s] << src);
    CHECK_MESSAGE(lr_schedule(100, 7, 3, 0.9, 0.3) == doctest::Approx(0.3).epsilon(1e-12),
                  "lr_schedule(step 100, steps 7, warmup 3, lr 0.9, min_lr 0.3), past the end: expected min_lr = 0.3" << src);
    CHECK_MESSAGE(lr_schedule(0, 1, 0, 0.9, 0.3) == doctest::Approx(0.9).epsilon(1e-12),
                  "lr_schedule(step 0, steps 1, warmup 0, lr 0.9, min_lr 0.3): expected lr = 0.9" << src);
    CHECK_MESSAGE(lr_schedule(1, 1, 0, 0.9, 0.3) == doctest::Approx(0.3).epsilon(1e-12),
                  "lr_schedule(step 1, steps 1, warmup 0, lr 0.9, min_lr 0.3), past the end: expected min_lr = 0.3" << src);
    // No warmup, 3 steps: r = 0, 1/2, 1: 0.9, 0.6, 0.3.
    const double want3[] = {0.9, 0.6, 0.3};
    for (int s = 0; s < 3; s++)
        CHECK_MESSAGE(lr_schedule(s, 3, 0, 0.9, 0.3) == doctest::Approx(want3[s]).epsilon(1e-12),
                      "lr_schedule(step " << s << ", steps 3, warmup 0, lr 0.9, min_lr 0.3): expected " << want3[s]
                                          << " (r = step / 2, min_lr + (1 + cos(pi r)) / 2 (lr - min_lr); formulas §30)");
}

TEST_CASE("embed_backward: a BERT row's gradient goes to w_A when t_i = 0 or there are no segments" * doctest::test_suite("assignment 4")) {
    const Config c = preset("tiny-bert");
    Params<double> p = m_model<double>(c, 17, 0.2);
    Batch b;
    b.n = 6;
    b.tokens = {c.cls_id, 1, 2, c.sep_id, 3, c.sep_id};
    b.targets = {-1, 2, -1, -1, 1, -1};
    for (int mode = 0; mode < 3; mode++) {  // no segments; segments 0 0 0 0 1 1; every segment 1
        CAPTURE(mode);
        Batch bb = b;
        if (mode == 1) bb.segments = {0, 0, 0, 0, 1, 1};
        if (mode == 2) bb.segments.assign(b.n, 1);
        Params<double> g = make_params<double>(c);
        Rng r(18 + mode);
        const TD dX = randn(bb.n, c.H, r);
        embed_backward(c, bb, dX, g);
        const std::string segs = mode == 0 ? "no segments" : mode == 1 ? "segments 0 0 0 0 1 1" : "every segment 1";
        INFO("embed_backward (tiny-bert, n = 6, " << segs << ", a random dX^(0))");
        // Against central differences of embed_forward's X^(0) contracted with dX (L = sum(X^(0) .* dX)).
        bool right = true;
        const std::pair<const char*, const char*> eqs[] = {
            {"W_e", "§18 dW_e = OneHot(x)^T dX^(0)"}, {"W_p", "§18 dW_p[i] = sum over sequences of dX^(0)_i"},
            {"w_A", "§21 dw_A = sum of dX^(0)_i over the rows with t_i = 0"}, {"w_B", "§21 dw_B = sum of dX^(0)_i over the rows with t_i = 1"}};
        for (const auto& named : eqs) {
            // Plain names, not a structured binding: CHECK_MESSAGE's lambda captures them (C++17).
            const char* const tn = named.first;
            const char* const eq = named.second;
            TD& x = std::string(tn) == "W_e" ? p.W_e : std::string(tn) == "W_p" ? p.W_p : std::string(tn) == "w_A" ? p.w_A : p.w_B;
            const TD& ana = std::string(tn) == "W_e" ? g.W_e : std::string(tn) == "W_p" ? g.W_p : std::string(tn) == "w_A" ? g.w_A : g.w_B;
            const m_Diff d = m_diff([&] { return sum_prod(embed_forward(c, p, bb), dX); }, x, ana, r);
            CHECK_MESSAGE(d.right(), std::string(eq) << ": embed_backward's gradient of " << std::string(tn) << ", "
                                        << m_diff_text(d, x.shape, "central finite difference of embed_forward, h = 1e-5"));
            right = right && d.right();
        }
        if (!right) break;  // the first wrong mode is enough to look at
        TD want_A({c.H}), want_B({c.H});
        for (int h = 0; h < c.H; h++) {
            double a = 0, s = 0;
            for (int i = 0; i < bb.n; i++) ((bb.segments.empty() || bb.segments[i] == 0) ? a : s) += g.W_p(i, h);
            want_A[h] = a, want_B[h] = s;
        }
        // Every row i adds the same gradient to W_p's row i and to its segment's vector (X^(0) = ... + W_p[i] + w_t).
        CHECK_APPROX(g.w_A, want_A, 1e-10, "the gradient of w_A",
                     "the sum of W_p's gradient rows i with t_i = 0 (all rows without segments), formulas §21");
        CHECK_APPROX(g.w_B, want_B, 1e-10, "the gradient of w_B", "the sum of W_p's gradient rows i with t_i = 1, formulas §21");
        if (mode == 0) CHECK_MESSAGE(max_abs(g.w_B) == 0.0, "without segments w_B gets no gradient, got " << g.w_B);
        if (mode == 2) CHECK_MESSAGE(max_abs(g.w_A) == 0.0, "with every segment 1 w_A gets no gradient, got " << g.w_A);
        CHECK_MESSAGE(max_abs(mode == 2 ? g.w_B : g.w_A) > 1e-4,
                      std::string(mode == 2 ? "w_B" : "w_A") << "'s gradient is (nearly) 0, expected above 1e-4 in some entry");
    }
}

TEST_CASE("key_padding_mask: a non-symmetric mask, hand-computed") {
    // Mask(i, j) = 10 i + j + 1 (not symmetric); lengths 2 and 3: key j >= length is -inf.
    const TD Mask = TD::from(3, 3, {1, 2, 3, 11, 12, 13, 21, 22, 23});
    const double X = -INF;
    const TD want = TD::from(6, 3, {1, 2, X, 11, 12, X, 21, 22, X, 1, 2, 3, 11, 12, 13, 21, 22, 23});
    const TD M = key_padding_mask(Mask, std::vector<int>{2, 3});
    REQUIRE(M.shape == want.shape);
    for (std::size_t k = 0; k < M.size(); k++) {
        CAPTURE(k);
        CHECK(M[k] == want[k]);
    }
    // Mask_AR (not symmetric either), one sequence of length 1 then one of length 3, in float.
    const TF Mf = key_padding_mask(Mask_AR<float>(3), std::vector<int>{1, 3});
    const float Y = -std::numeric_limits<float>::infinity();
    const std::vector<float> wf = {1, Y, Y, 1, Y, Y, 1, Y, Y, 1, Y, Y, 1, 1, Y, 1, 1, 1};
    REQUIRE(Mf.shape == shp(6, 3));
    for (std::size_t k = 0; k < Mf.size(); k++) {
        CAPTURE(k);
        CHECK(Mf[k] == wf[k]);
    }
}

TEST_CASE("MultiHeadSA: MultiHeadSA_backward with one head (A = 1), gradient-checked" * doctest::test_suite("assignment 3")) {
    mhsa_grad_check(Mask_AR<double>(4), 2, 1, 0.0, 9201, "A = 1, Mask_AR");
    mhsa_grad_check(Mask_BD<double>(3), 1, 1, 0.0, 9202, "A = 1, Mask_BD, biases", true);
}

TEST_CASE("apply_mask: the first entry is masked too (Mask(0, 0) = -inf), double and float" * doctest::test_suite("assignment 3")) {
    const TD Mask = TD::from(2, 3, {-INF, 1, -INF, 1, -INF, 1});
    const TD S = TD::from(2, 3, {1, 2, 3, 4, 5, 6});
    const TD R = apply_mask(Mask, S);
    const std::vector<double> want = {-INF, 2, -INF, 4, -INF, 6};
    const TF Rf = apply_mask(to_float(Mask), to_float(S));
    REQUIRE(R.shape == shp(2, 3));
    REQUIRE(Rf.shape == shp(2, 3));
    for (std::size_t k = 0; k < want.size(); k++) {
        INFO("apply_mask(Mask = [[-inf, 1, -inf], [1, -inf, 1]], S = [[1, 2, 3], [4, 5, 6]]), entry "
             << entry_name(R.shape, k) << ": expected " << want[k]
             << " (hand-computed: S where Mask is 1, -inf where it is -inf, formulas §9), got " << R[k]
             << " in double, " << Rf[k] << " in float");
        CHECK(R[k] == want[k]);
        CHECK((double)Rf[k] == want[k]);
    }
}
TEST_SUITE_END();

// ################################################################################################
// PART II. THE MACHINERY, in transformer.cpp's order: the fast forms and the pool, text, model
// files, runs, teaching, the platform; then the command-line program (main.cpp)
// ################################################################################################
// ================================================================================================
// The vectorised forms against their references, and no memory per warm step
// ================================================================================================
TEST_SUITE_BEGIN("fast paths");

TEST_CASE("Softmax: vexp matches std::exp (float to under one ulp, double to 3.2e-16), -inf, inf, NaN" * doctest::test_suite("assignment 2 (0 points)")) {
    double worst_f = 0, worst_d = 0;
    for (double x = -87.0; x < 88.7; x += 0.0137) {
        const double ref = std::exp(x);
        worst_f = nan_max(worst_f, std::fabs((double)vexp((float)x) - std::exp((double)(float)x)) / ref);
        worst_d = nan_max(worst_d, std::fabs(vexp(x) - ref) / ref);
    }
    CHECK(worst_f < 1.2e-7);
    CHECK(worst_d < 4e-16);
    CHECK(vexp(-std::numeric_limits<float>::infinity()) == 0.0f);
    CHECK(vexp(-std::numeric_limits<double>::infinity()) == 0.0);
    CHECK(vexp(-1000.0f) == 0.0f);
    CHECK(vexp(0.0f) == 1.0f);
    CHECK(vexp(0.0) == 1.0);
    CHECK(std::isinf(vexp(89.0f)));
    CHECK(std::isinf(vexp(std::numeric_limits<float>::infinity())));
    CHECK(std::isinf(vexp(710.0)));
    // The ends of vexp's range are computed, not cut off: exp(88.72f) is finite and exp(-87.3f) a
    // normal float (the float constants hi, lo); for double, exp(709.78) and exp(-708).
    for (float x : {88.72f, -87.3f, 88.7f, -87.2f}) {
        CAPTURE(x);
        CHECK(std::isfinite(vexp(x)));
        CHECK(std::fabs((double)vexp(x) / std::exp((double)x) - 1) < 1.2e-7);
    }
    for (double x : {709.78, -708.0, 709.7, -707.9}) {
        CAPTURE(x);
        CHECK(std::fabs(vexp(x) / std::exp(x) - 1) < 4e-16);
    }
    CHECK(std::isnan(vexp(std::numeric_limits<float>::quiet_NaN())));
    CHECK(std::isnan(vexp(std::numeric_limits<double>::quiet_NaN())));
}

// ================================================================================================
// The C library's functions, the program's own (math::): against the C library's long double ones
// ================================================================================================

// |got - ref| in units in the last place of T at ref (the spacing of T's numbers there; below the
// normal range, the subnormal spacing). ref is the C library's long double function: with 64
// significant bits (x86) or 113 (aarch64 Linux) its own error is far below T's ulp. Where long double
// is double (macOS on ARM, MSVC) the reference is the double function itself, and m_ref_slack adds
// the half ulp that reference may be off by.
template <typename T>
static double m_ulps(T got, long double ref) {
    if (got != got || ref != ref) return got != got && ref != ref ? 0 : HUGE_VAL;
    if (std::isinf(ref) || std::isinf(got)) return (long double)got == ref ? 0 : HUGE_VAL;
    int e = 0;
    std::frexp(ref, &e);  // ref = f 2^e, f in [0.5, 1)
    e = std::max(e, std::numeric_limits<T>::min_exponent);
    return (double)(std::fabs((long double)got - ref) / std::ldexp(1.0L, e - std::numeric_limits<T>::digits));
}
static const double m_ref_slack = std::numeric_limits<long double>::digits >= 64 ? 0.0 : 0.5;
// The largest error of f against ref over xs, and where.
template <typename T, typename F, typename R>
static std::pair<double, T> m_worst_ulps(const std::vector<T>& xs, F f, R ref) {
    std::pair<double, T> worst{0.0, T(0)};
    for (T x : xs) {
        const double u = m_ulps<T>(f(x), ref((long double)x));
        if (!(u <= worst.first)) worst = {u, x};
    }
    return worst;
}
// n numbers of every binade of the positive doubles (random significands) or floats: the whole range.
template <typename T>
static std::vector<T> m_every_binade(int per_binade, uint64_t seed) {
    Rng g(seed);
    std::vector<T> xs;
    const int digits = std::numeric_limits<T>::digits;
    for (int e = std::numeric_limits<T>::min_exponent - digits; e <= std::numeric_limits<T>::max_exponent; e++)
        for (int i = 0; i < per_binade; i++) {
            const T x = std::ldexp(T(1) + T(g.next() >> 11) * T(1.0 / 9007199254740992.0), e - 1);  // [2^(e-1), 2^e)
            if (std::isfinite(x) && x > 0) xs.push_back(x);
        }
    return xs;
}

TEST_CASE("math: log against the C library's long double log, double and float, over the whole range, and its special values") {
    std::vector<double> xs = m_every_binade<double>(200, 1);
    Rng g(2);
    for (int i = 0; i < 100000; i++) xs.push_back(1 + std::ldexp((double)(int64_t)(g.next() >> 12) - 2251799813685248.0, -52 - (int)(g.next() % 50)));  // near 1
    for (double x = 0.5; x < 2; x += 1.0 / 4096) xs.push_back(x);
    const auto wd = m_worst_ulps<double>(xs, [](double x) { return math::log(x); }, [](long double x) { return std::log(x); });
    CHECK_MESSAGE(wd.first <= 1.0 + m_ref_slack, "math::log(double): " << wd.first << " ulp from std::log(long double) at x = "
                                                     << std::setprecision(17) << wd.second << "; documented: under 1 ulp");
    MESSAGE("math::log(double): at most " << wd.first << " ulp over " << xs.size() << " numbers");
    std::vector<float> fs = m_every_binade<float>(2000, 3);
    for (float x = 0.5f; x < 2; x += 1.0f / 65536) fs.push_back(x);
    const auto wf = m_worst_ulps<float>(fs, [](float x) { return math::log(x); }, [](long double x) { return std::log(x); });
    CHECK_MESSAGE(wf.first <= 0.51 + m_ref_slack, "math::log(float): " << wf.first << " ulp at x = " << std::setprecision(9) << wf.second
                                                      << "; documented: under 0.51 ulp (computed in double, rounded once)");
    MESSAGE("math::log(float): at most " << wf.first << " ulp over " << fs.size() << " numbers");
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    CHECK(math::log(1.0) == 0.0);
    CHECK_FALSE(std::signbit(math::log(1.0)));
    CHECK(math::log(2.0) == 0.6931471805599453);  // ln 2 rounded to double
    CHECK(math::log(0.0) == -inf);
    CHECK(math::log(-0.0) == -inf);
    CHECK(std::isnan(math::log(-1.0)));
    CHECK(std::isnan(math::log(-inf)));
    CHECK(math::log(inf) == inf);
    CHECK(std::isnan(math::log(nan)));
    CHECK(m_ulps(math::log(std::numeric_limits<double>::denorm_min()), std::log((long double)std::numeric_limits<double>::denorm_min())) <= 1);
    CHECK(m_ulps(math::log(std::numeric_limits<double>::max()), std::log((long double)std::numeric_limits<double>::max())) <= 1);
    CHECK(math::log(1.0f) == 0.0f);
    CHECK(math::log(0.0f) == -std::numeric_limits<float>::infinity());
    CHECK(std::isnan(math::log(-1.0f)));
    CHECK(math::log(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
    CHECK(std::isnan(math::log(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("math: erf against the C library's long double erf, double and float, over [-7, 7] and the tiny numbers, and its special values") {
    std::vector<double> xs = m_every_binade<double>(20, 4);
    xs.erase(std::remove_if(xs.begin(), xs.end(), [](double x) { return x > 8; }), xs.end());
    Rng g(5);
    auto u = [&](Rng& r) { return -7 + 14 * r.uniform(); };
    for (int i = 0; i < 200000; i++) xs.push_back(u(g));
    for (double edge : {1.0, 2.0, 3.0, 4.0, 6.0})  // the ends of the pieces
        for (int k = -200; k <= 200; k++) xs.push_back(edge + k * std::ldexp(edge, -52));
    const size_t positive = xs.size();
    for (size_t i = 0; i < positive; i++) xs.push_back(-xs[i]);
    const auto wd = m_worst_ulps<double>(xs, [](double x) { return math::erf(x); }, [](long double x) { return std::erf(x); });
    CHECK_MESSAGE(wd.first <= 1.3 + m_ref_slack, "math::erf(double): " << wd.first << " ulp from std::erf(long double) at x = "
                                                     << std::setprecision(17) << wd.second << "; documented: under 1.3 ulp");
    MESSAGE("math::erf(double): at most " << wd.first << " ulp over " << xs.size() << " numbers");
    std::vector<float> fs;
    for (uint32_t b = 0; b < 0x40e00000u; b += 1999) {  // every 1999th float from 0 to 7, and its negative
        float x;
        std::memcpy(&x, &b, sizeof x);
        fs.push_back(x);
        fs.push_back(-x);
    }
    const auto wf = m_worst_ulps<float>(fs, [](float x) { return math::erf(x); }, [](long double x) { return std::erf(x); });
    CHECK_MESSAGE(wf.first <= 0.51 + m_ref_slack, "math::erf(float): " << wf.first << " ulp at x = " << std::setprecision(9) << wf.second
                                                      << "; documented: under 0.51 ulp (computed in double, rounded once)");
    MESSAGE("math::erf(float): at most " << wf.first << " ulp over " << fs.size() << " numbers");
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(math::erf(0.0) == 0.0);
    CHECK_FALSE(std::signbit(math::erf(0.0)));
    CHECK(std::signbit(math::erf(-0.0)));  // erf is odd: -0 stays -0
    CHECK(math::erf(inf) == 1.0);
    CHECK(math::erf(-inf) == -1.0);
    CHECK(math::erf(6.0) == 1.0);  // the clamp: erf(x) rounds to 1 from x = 5.93
    CHECK(math::erf(-6.0) == -1.0);
    CHECK(math::erf(5.99) == 1.0);
    CHECK(std::isnan(math::erf(std::numeric_limits<double>::quiet_NaN())));
    CHECK(math::erf(0.0f) == 0.0f);
    CHECK(std::signbit(math::erf(-0.0f)));
    CHECK(math::erf(std::numeric_limits<float>::infinity()) == 1.0f);
    CHECK(std::isnan(math::erf(std::numeric_limits<float>::quiet_NaN())));
    // Monotone across the ends of the pieces (1, 2, 3, 4) and the clamp (6).
    for (double edge : {1.0, 2.0, 3.0, 4.0, 6.0}) {
        CAPTURE(edge);
        CHECK(math::erf(std::nextafter(edge, 0.0)) <= math::erf(edge));
        CHECK(math::erf(edge) <= math::erf(std::nextafter(edge, 7.0)));
    }
}

TEST_CASE("math: cos_pi against the C library's long double cos and sin, and its exact values") {
    // The reference reduces t as cos_pi does (exact arithmetic in long double), then takes cosl on
    // [0, pi/4] or sinl on the rest, where its argument is known to a relative 1e-19.
    const long double pi = 3.14159265358979323846264338327950288L;
    auto ref = [&](long double t) {
        long double a = std::fabs(t);
        a = std::fabs(a - 2 * std::nearbyint(a / 2));
        const long double sign = a > 0.5L ? -1 : 1;
        if (a > 0.5L) a = 1 - a;
        return a <= 0.25L ? sign * std::cos(pi * a) : sign * std::sin(pi * (0.5L - a));
    };
    std::vector<double> ts;
    Rng g(6);
    auto u = [&](Rng& r) { return -4 + 8 * r.uniform(); };
    for (int i = 0; i < 400000; i++) ts.push_back(u(g));
    for (int i = 0; i < 100000; i++) ts.push_back(0.5 + std::ldexp(u(g), -(int)(g.next() % 50)));  // near the zero at 1/2
    for (int i = 0; i < 1000; i++) ts.push_back(std::ldexp(u(g), (int)(g.next() % 50)));             // large t
    const auto w = m_worst_ulps<double>(ts, [](double t) { return math::cos_pi(t); }, ref);
    CHECK_MESSAGE(w.first <= 1.0 + m_ref_slack, "math::cos_pi: " << w.first << " ulp from cos(pi t) at t = " << std::setprecision(17)
                                                    << w.second << "; documented: under 1 ulp");
    MESSAGE("math::cos_pi: at most " << w.first << " ulp over " << ts.size() << " numbers");
    CHECK(math::cos_pi(0.0) == 1.0);
    CHECK(math::cos_pi(-0.0) == 1.0);
    CHECK(math::cos_pi(0.5) == 0.0);
    CHECK(math::cos_pi(-0.5) == 0.0);
    CHECK(math::cos_pi(1.0) == -1.0);
    CHECK(math::cos_pi(1.5) == 0.0);
    CHECK(math::cos_pi(2.0) == 1.0);
    CHECK(math::cos_pi(-3.0) == -1.0);
    CHECK(math::cos_pi(1.0 / 3) == doctest::Approx(0.5).epsilon(1e-15));
    CHECK(math::cos_pi(4503599627370497.0) == -1.0);  // 2^52 + 1, odd
    CHECK(math::cos_pi(9007199254740994.0) == 1.0);   // 2^53 + 2 and above: even integers
    CHECK(math::cos_pi(1e300) == 1.0);
    CHECK(std::isnan(math::cos_pi(std::numeric_limits<double>::infinity())));
    CHECK(std::isnan(math::cos_pi(-std::numeric_limits<double>::infinity())));
    CHECK(std::isnan(math::cos_pi(std::numeric_limits<double>::quiet_NaN())));
}

TEST_CASE("math: pow_int against the C library's long double pow, AdamW's bias corrections, and its special values") {
    Rng g(7);
    auto near1 = [](Rng& r) { return 0.9 + 0.1 * r.uniform(); };
    auto wide = [](Rng& r) { return 0.25 + 3.75 * r.uniform(); };
    double worst = 0, worst_b = 0;
    long long worst_n = 0;
    int counted = 0;
    auto check = [&](double b, long long n) {
        const long double ref = std::pow((long double)b, (long double)n);
        if (!(std::fabs(ref) > 1e-280L && std::fabs(ref) < 1e300L)) return;  // the double-double range
        const double e = m_ulps(math::pow_int(b, n), ref);
        counted++;
        if (!(e <= worst)) worst = e, worst_b = b, worst_n = n;
    };
    for (int i = 0; i < 50000; i++) check(i % 2 ? near1(g) : wide(g), (long long)(g.next() % 1000000));
    for (double beta : {0.9, 0.95, 0.98, 0.99, 0.999})  // AdamW's bias corrections: beta^t for every step t
        for (long long t = 1; t <= 20000; t++) check(beta, t);
    for (int i = 0; i < 10000; i++) check(-wide(g), (long long)(g.next() % 400));  // negative bases, odd and even powers
    // The reference judged first: 1.0001970636354514^719865 is 4.0050155028857925120672e61 (worked
    // out exactly in decimal). A C library whose long double pow misses it by more than a tenth of a
    // double's ulp (half an ulp where long double is double) cannot judge pow_int (MinGW-w64's gives
    // 4.00501550288569608e61, 2.4e-14 off).
    volatile double probe_b = 1.0001970636354514;
    const long double probe = std::pow((long double)probe_b, 719865.0L), exact = 4.0050155028857925120672e61L;
    const long double probe_error = std::fabs(probe / exact - 1);
    if (probe_error > (m_ref_slack > 0 ? 1.2e-16L : 1e-17L)) {
        MESSAGE("skipped the ulp check of math::pow_int: this C library's long double pow is off by " << (double)probe_error
                << " at 1.0001970636354514^719865 (" << std::setprecision(17) << (double)probe << " for 4.0050155028857925e61), too far to judge it");
    } else {
        CHECK_MESSAGE(worst <= 0.51 + m_ref_slack, "math::pow_int: " << worst << " ulp from std::pow(long double) at "
                                                      << std::setprecision(17) << worst_b << "^" << worst_n << "; documented: under 0.51 ulp");
        MESSAGE("math::pow_int: at most " << worst << " ulp over " << counted << " powers");
    }
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    CHECK(math::pow_int(0.999, 0) == 1.0);
    CHECK(math::pow_int(nan, 0) == 1.0);  // as std::pow
    CHECK(math::pow_int(0.999, 1) == 0.999);
    CHECK(math::pow_int(3.0, 4) == 81.0);
    CHECK(math::pow_int(-2.0, 3) == -8.0);
    CHECK(math::pow_int(-1.0, 1000000000001LL) == -1.0);
    CHECK(math::pow_int(2.0, -2) == 0.25);
    CHECK(math::pow_int(0.0, 5) == 0.0);
    CHECK(math::pow_int(2.0, 1023) == std::ldexp(1.0, 1023));
    CHECK(math::pow_int(2.0, 1024) == inf);                                   // overflow
    CHECK(math::pow_int(0.5, 1074) == std::numeric_limits<double>::denorm_min());  // down to the last subnormal
    CHECK(math::pow_int(0.5, 1076) == 0.0);
    CHECK(math::pow_int(inf, 2) == inf);
    CHECK(std::isnan(math::pow_int(nan, 3)));
}

TEST_CASE("math: exp is vexp, and its error in ulp over the whole normal range") {
    std::vector<double> xs;
    std::vector<float> fs;
    Rng g(8);
    auto u = [](Rng& r) { return -708 + 1417.78 * r.uniform(); };
    auto uf = [](Rng& r) { return (float)(-87.3 + 176.02 * r.uniform()); };
    for (int i = 0; i < 300000; i++) xs.push_back(u(g)), fs.push_back(uf(g));
    for (int i = 0; i < 100000; i++) xs.push_back(std::ldexp(u(g), -(int)(g.next() % 60))), fs.push_back(std::ldexp(uf(g), -(int)(g.next() % 30)));
    const auto wd = m_worst_ulps<double>(xs, [](double x) { return math::exp(x); }, [](long double x) { return std::exp(x); });
    CHECK_MESSAGE(wd.first <= 1.2 + m_ref_slack, "math::exp(double): " << wd.first << " ulp from std::exp(long double) at x = "
                                                     << std::setprecision(17) << wd.second << "; documented: under 1.2 ulp");
    MESSAGE("math::exp(double): at most " << wd.first << " ulp over " << xs.size() << " numbers");
    const auto wf = m_worst_ulps<float>(fs, [](float x) { return math::exp(x); }, [](long double x) { return std::exp(x); });
    CHECK_MESSAGE(wf.first <= 1.2 + m_ref_slack, "math::exp(float): " << wf.first << " ulp at x = " << std::setprecision(9) << wf.second
                                                     << "; documented: under 1.2 ulp");
    MESSAGE("math::exp(float): at most " << wf.first << " ulp over " << fs.size() << " numbers");
    for (double x : {-700.5, -1.0, 0.0, 0.25, 1.0, 700.25}) CHECK(math::exp(x) == vexp(x));
    for (float x : {-80.5f, -1.0f, 0.0f, 0.25f, 1.0f, 80.25f}) CHECK(math::exp(x) == vexp(x));
    CHECK(math::exp(0.0) == 1.0);
    CHECK(math::exp(-std::numeric_limits<double>::infinity()) == 0.0);
    CHECK(math::exp(std::numeric_limits<double>::infinity()) == std::numeric_limits<double>::infinity());
    CHECK(math::exp(-709.0) == 0.0);  // below the normal range: 0, as documented
    CHECK(std::isnan(math::exp(std::numeric_limits<double>::quiet_NaN())));
    CHECK(math::exp(-88.0f) == 0.0f);
    CHECK(std::isnan(math::exp(std::numeric_limits<float>::quiet_NaN())));
}

// The largest gap between softmax_row and softmax_row_reference on a random row (NaN if either gives
// a NaN). The rows are tensors (a write past the end stops the program) filled with 7 first, so a
// zero that is never written shows.
template <typename T>
static double m_softmax_row_gap(int H, Rng& r, bool with_inf) {
    Tensor<T> x({H}), y({H}, T(7)), ref({H}, T(7));
    for (auto& v : x.data) v = (T)(8 * r.normal());
    if (with_inf)
        for (int j = 0; j < H; j += 3) x[j] = -std::numeric_limits<T>::infinity();
    softmax_row(x.ptr(), y.ptr(), H);
    softmax_row_reference(x.ptr(), ref.ptr(), H);
    double gap = 0, sum = 0;
    for (int j = 0; j < H; j++) {
        const double d = std::fabs((double)y[j] - (double)ref[j]);
        if (!(d <= gap)) gap = d;
        if (ref[j] == 0) CHECK(y[j] == 0);  // masked entries stay exactly 0
        if (x[j] == -std::numeric_limits<T>::infinity()) CHECK(ref[j] == 0);
        sum += (double)ref[j];
    }
    const bool all_masked = with_inf && H == 1;
    CHECK(sum == doctest::Approx(all_masked ? 0.0 : 1.0).epsilon(1e-6));
    return gap;
}

TEST_CASE("Softmax: the vectorised row equals the plain loop (float and double, -inf entries, all -inf rows)" * doctest::test_suite("assignment 2 (0 points)")) {
    Rng r(21);
    double gap_f = 0, gap_d = 0;
    for (int H = 1; H <= 80; H++)
        for (bool inf : {false, true}) gap_f = nan_max(gap_f, m_softmax_row_gap<float>(H, r, inf)), gap_d = nan_max(gap_d, m_softmax_row_gap<double>(H, r, inf));
    CHECK(gap_f < 1e-6);
    CHECK(gap_d < 1e-14);
    // A row read in place inside a longer buffer: the entry just past its end (here 1000, far above
    // the row) must not be read, by the plain loop or the vectorised one.
    for (int H = 1; H <= 40; H++) {
        CAPTURE(H);
        TF buf(1, H + 1), alone(1, H), y_ref(1, H), y(1, H), want(1, H);
        for (int j = 0; j < H; j++) buf(0, j) = alone(0, j) = (float)r.normal();
        buf(0, H) = 1000.0f;
        softmax_row_reference(alone.ptr(), want.ptr(), H);
        softmax_row_reference(buf.ptr(), y_ref.ptr(), H);
        softmax_row(buf.ptr(), y.ptr(), H);
        CHECK(m_bits_equal(y_ref, want));
        for (int j = 0; j < H; j++) CHECK(std::fabs(y(0, j) - want(0, j)) < 1e-6);
    }
    std::vector<float> x(5, -std::numeric_limits<float>::infinity()), y(5, 7.0f);
    softmax_row(x.data(), y.data(), 5);
    for (float v : y) CHECK(v == 0.0f);
    // One entry 1000 above the others, at every position of rows wider than the 16 lanes of the
    // maximum: the maximum must be that entry (a smaller one overflows exp), whichever lane has it.
    for (int H : {16, 33, 40})
        for (int at = 0; at < H; at++) {
            CAPTURE(H);
            CAPTURE(at);
            TF z(1, H);
            z(0, at) = 1000.0f;
            TF p(1, H);
            softmax_row(z.ptr(), p.ptr(), H);
            for (int j = 0; j < H; j++) CHECK(p(0, j) == (j == at ? 1.0f : 0.0f));
            softmax_row_reference(z.ptr(), p.ptr(), H);  // the plain loop subtracts the maximum too
            for (int j = 0; j < H; j++) CHECK(p(0, j) == (j == at ? 1.0f : 0.0f));
            TF low(1, H, -1000.0f);  // every entry far below 0: exp(x) alone would be 0 everywhere
            low(0, at) = -999.0f;
            softmax_row_reference(low.ptr(), p.ptr(), H);
            CHECK(p(0, at) == doctest::Approx(1 / (1 + (H - 1) * std::exp(-1.0))).epsilon(1e-6));
            softmax_row(low.ptr(), p.ptr(), H);
            CHECK(p(0, at) == doctest::Approx(1 / (1 + (H - 1) * std::exp(-1.0))).epsilon(1e-6));
            CHECK(CrossEntropy_logits(z, {at}) == doctest::Approx(0.0).epsilon(1e-12));
            CHECK(CrossEntropy_logits(z, {(at + 1) % H}) == doctest::Approx(1000.0).epsilon(1e-9));
        }
}

namespace {
// The vectorised sums add in one fixed order: entry j into partial sum j mod W, the W partials in
// order, then the entries past the last multiple of W (W = 16 for softmax_row, CrossEntropy_logits
// and A B^T with one row of A; W = 8 for LayerNorm's row statistics). The same order on every
// machine and compiler makes results reproducible bit for bit. The rows below tell orders apart:
// one entry 1 and 31 entries of e = 0.6 ulp(1). One running sum rounds every 1 + k ulp + e up to
// 1 + (k + 1) ulp: 1 + 31 ulp. In 16 lanes, lane 0 holds 1 + e (rounded up to 1 + ulp) and lanes 1..15
// hold 2e = 1.2 ulp each, which round to one ulp each when added: 1 + 16 ulp (17 lanes: 1 + 31 ulp,
// 15 lanes: 1 + 17 ulp).
template <typename T>
void m_lane_order_check() {
    const T ulp = std::numeric_limits<T>::epsilon(), e = T(0.6) * ulp;
    const T sum16 = T(1) + 16 * ulp;  // exact
    std::vector<T> z(32, (T)std::log((double)e)), y(32);
    z[0] = 0;
    softmax_row(z.data(), y.data(), 32);
    CHECK(y[0] == T(1) / sum16);  // y_0 = exp(0) / sum
    // One row of A times B^T (64 rows of ones): every entry is the sum of A's row, as lane_dot adds it.
    std::vector<T> a(32, e);
    a[0] = 1;
    const Tensor<T> C = matmul_nt(Tensor<T>::from(1, 32, a), Tensor<T>(64, 32, T(1)));
    for (int j = 0; j < 64; j++) REQUIRE(C(0, j) == sum16);
}
}  // namespace

TEST_CASE("Reductions: softmax_row, CrossEntropy_logits, A B^T and LayerNorm add in their fixed lane order, bit for bit") {
    m_lane_order_check<float>();
    m_lane_order_check<double>();
    // CrossEntropy_logits sums in double: the same row in double, target 0: loss = log(sum) - z_0.
    const double ulp = std::numeric_limits<double>::epsilon();
    TD Z(1, 32, std::log(0.6 * ulp));
    Z(0, 0) = 0;
    CHECK(CrossEntropy_logits(Z, {0}) == math::log(1 + 16 * ulp));  // the program's log, as CrossEntropy_logits takes it
    // LayerNorm's mean in 8 lanes: x_4 = 1, x_7 = 2^53, x_13 = -2^53, the rest 0 (H = 16). Lanes
    // 4, 5, 7 hold 1, -2^53, 2^53; added in order, 1 - 2^53 + 2^53 = 1 exactly, so mu = 1/16. One
    // running sum (or 9 lanes) adds 1 + 2^53 first, which rounds to 2^53, and gives mu = 0.
    const double big = std::ldexp(1.0, 53);
    TD X(1, 16);
    X(0, 4) = 1, X(0, 7) = big, X(0, 13) = -big;
    const TD Y = LayerNorm(X, TD({16}, 1.0), TD({16}, 0.0), 1e-5);
    // var = ((2^53)^2 + (2^53)^2 + tiny) / 16 = 2^103 (x - mu rounds to +-2^53 in both big entries).
    const double rstd = 1 / std::sqrt(std::ldexp(1.0, 103) + 1e-5);
    CHECK(Y(0, 0) == -0.0625 * rstd);
    CHECK(Y(0, 4) == 0.9375 * rstd);
}

TEST_CASE("FFN_GELU: activation_array and activation_derivative_array equal activation and activation_derivative" * doctest::test_suite("assignment 2")) {
    std::vector<double> zs;
    for (double z = -30; z <= 30; z += 0.01) zs.push_back(z);
    for (double z : {-1e30, -1e20, -1e4, -25.0, -20.5, 20.5, 25.0, 1e4, 1e20, 1e30, 0.0, -1e200, 1e200}) zs.push_back(z);
    for (Activation a : {Activation::relu, Activation::gelu_sigmoid, Activation::gelu_tanh, Activation::gelu_erf}) {
        INFO(std::string(activation_name(a)));
        const std::size_t n = zs.size();
        std::vector<float> zf(n), yf(n), df(n, 1.0f);
        for (std::size_t k = 0; k < n; k++) zf[k] = (float)std::max(-1e38, std::min(1e38, zs[k]));  // +-1e200: +-1e38
        std::vector<double> yd(n), dd(n, 1.0);
        activation_array(a, zf.data(), yf.data(), n);
        activation_derivative_array(a, zf.data(), df.data(), n);
        activation_array(a, zs.data(), yd.data(), n);
        activation_derivative_array(a, zs.data(), dd.data(), n);
        double worst_f = 0, worst_df = 0, worst_d = 0, worst_dd = 0;
        double at_f = 0, at_df = 0, at_d = 0, at_dd = 0;  // the z of each worst gap
        // NaN-aware (std::max(w, NaN) is w): a NaN anywhere, e.g. 0 * inf at |z| = 1e30, fails.
        double z_now = 0;
        auto worse = [&z_now](double& w, double e, double& at) { if (!(e <= w)) w = e, at = z_now; };
        auto gap = [](double x, double ref) { return x == ref ? 0.0 : std::fabs(x - ref) / (1 + std::fabs(ref)); };
        for (std::size_t k = 0; k < n; k++) {
            CAPTURE(zs[k]);
            const double y_ref = activation(a, (double)zf[k]), d_ref = activation_derivative(a, (double)zf[k]);
            z_now = zs[k];
            worse(worst_f, gap(yf[k], y_ref), at_f);  // equal values (an infinite one included) differ by 0
            worse(worst_df, gap(df[k], d_ref), at_df);
            worse(worst_d, gap(yd[k], activation(a, zs[k])), at_d);
            worse(worst_dd, gap(dd[k], activation_derivative(a, zs[k])), at_dd);
            INFO("activation_derivative(" << std::string(activation_name(a)) << ", " << zs[k] << ") must be finite (formulas §13), got " << d_ref);
            REQUIRE(std::isfinite(d_ref));
        }
        const std::string gap_is = " (gap |x - ref| / (1 + |ref|)) at z = ";
        CHECK_MESSAGE(worst_f < 5e-7, "activation_array in float against activation: worst" << gap_is << at_f << ": " << worst_f);
        CHECK_MESSAGE(worst_df < 2e-6, "activation_derivative_array in float against activation_derivative in double: worst"
                                           << gap_is << at_df << ": " << worst_df);  // a few float operations more than the value
        CHECK_MESSAGE(worst_d < 1e-14, "activation_array in double against activation: worst" << gap_is << at_d << ": " << worst_d);
        CHECK_MESSAGE(worst_dd < 1e-14, "activation_derivative_array in double against activation_derivative: worst"
                                            << gap_is << at_dd << ": " << worst_dd);
    }
    // Around |x| = 20 the tanh form's derivative is 1 to double precision on the right and, on the
    // left, a number below 1e-250 in magnitude (about -1e-260 at x = -20: GELU's slope is negative
    // left of its minimum near x = -0.75). The formula's 0 x inf there (1 - tanh^2 u = 0 times x^3)
    // may be avoided by any exact guard: saturating beyond some |x|, or testing s (1 - s) == 0.
    const double zb[4] = {-20.0, -20.5, 20.0, 20.5};
    double db[4] = {1, 1, 1, 1};
    activation_derivative_array(Activation::gelu_tanh, zb, db, 4);
    for (int k = 0; k < 4; k++) {
        INFO("activation_derivative_array(gelu_tanh) at x = " << zb[k] << " gave " << db[k] << "; formulas §13: "
             << (zb[k] < 0 ? "a finite number below 1e-250 in magnitude" : "1 to double precision"));
        CHECK(std::isfinite(db[k]));
        if (zb[k] < 0) CHECK(std::fabs(db[k]) < 1e-250);
        else CHECK(db[k] == doctest::Approx(1.0).epsilon(1e-15));
    }
}

TEST_CASE("train: a warm training step takes no memory from the system (the pool hands out last step's blocks)") {
    for (const char* name : {"tiny-gpt2", "tiny-bert"}) {
        INFO(name);
        Config c = preset(name);
        c.attn_bias = true;
        Params<float> p = make_params<float>(c), g = make_params<float>(c);
        init_params(c, p, 1);
        AdamW adam;
        adamw_init(c, adam);
        Rng rng(5);
        Batch b;
        b.B = 3, b.n = c.n_ctx;
        for (int k = 0; k < b.B * b.n; k++) b.tokens.push_back(rng.below(c.V));
        b.targets = next_token_targets(b.tokens, b.B, b.n);
        ForwardOptions fo;
        fo.dropout = 0.1, fo.rng = &rng;
        long long fresh_before = 0;
        for (int step = 0; step < 4; step++) {
            if (step == 3) fresh_before = pool_stats().fresh;
            zero_params(c, g);
            const double loss = model_loss(c, p, b, &g, fo);
            CHECK(std::isfinite(loss));
            clip_grad_norm(c, g, 1.0);
            adamw_step(c, p, g, adam, 1e-3);
        }
        CHECK(pool_stats().fresh == fresh_before);
        CHECK(pool_stats().reused > 0);
    }
}

TEST_CASE("sample: model_step takes no memory from the system once warm, and its K, V grow in place") {
    Config c = preset("tiny-gpt2");
    c.n_ctx = 40, c.attn_bias = true;
    Params<float> p = make_params<float>(c);
    init_params(c, p, 2);
    KVCache<float> k;
    long long fresh_before = 0;
    for (int pass = 0; pass < 2; pass++) {
        kv_init(c, k);
        if (pass == 1) fresh_before = pool_stats().fresh;
        const float* K0 = k.layers[0].K[0].ptr();
        for (int t = 0; t < c.n_ctx; t++) {
            const Tensor<float> z = model_step(c, p, t % c.V, k);
            CHECK(z.shape == std::vector<int>{c.V});
        }
        CHECK(k.layers[0].K[0].shape == std::vector<int>{c.n_ctx, c.D});
        CHECK(k.layers[0].K[0].ptr() == K0);  // rows were appended where room was reserved
    }
    CHECK(pool_stats().fresh == fresh_before);
}

TEST_CASE("Tensor: uninit has the shape, pool blocks are reused, and storage compares with std::vector") {
    const Tensor<float> t = Tensor<float>::uninit(3, 4);
    CHECK(t.shape == std::vector<int>{3, 4});
    CHECK(t.size() == 12);
    CHECK_THROWS_AS(Tensor<float>::uninit({-1, 2}), ShapeError);
    const float* first;
    {
        Tensor<float> a(100, 100);
        first = a.ptr();
    }
    const long long fresh = pool_stats().fresh;
    Tensor<float> b(100, 100);
    CHECK(b.ptr() == first);  // the block just freed, handed out again
    CHECK(pool_stats().fresh == fresh);
    for (float v : b.data) CHECK(v == 0.0f);  // Tensor(shape) still fills
    CHECK(Tensor<double>::from(1, 2, {1, 2}).data == std::vector<double>{1, 2});
    CHECK(Tensor<double>::from(1, 2, {1, 2}).data != std::vector<double>{1, 3});
}

TEST_CASE("ArenaScope: a model's parameters lie in one block, in order; the block is reused once all are freed") {
    if (!arenas_enabled) return;  // AddressSanitizer builds (make debug): one block per tensor
    Config c = preset("tiny-gpt2");
    c.attn_bias = true;
    auto span_of = [&](Params<float>& p, std::size_t& bytes) {  // [lowest address, end of the highest)
        const char *lo = nullptr, *hi = nullptr;
        bytes = 0;
        for (auto& nt : named_tensors(c, p)) {
            const char* b = (const char*)nt.tensor->ptr();
            const char* e = b + nt.tensor->size() * sizeof(float);
            if (!lo || b < lo) lo = b;
            if (!hi || e > hi) hi = e;
            bytes += nt.tensor->size() * sizeof(float);
            CHECK((std::uintptr_t)b % 64 == 0);  // every tensor starts on a cache line
        }
        return std::make_pair(lo, (std::size_t)(hi - lo));
    };
    const char* first_begin;
    {
        Params<float> p = make_params<float>(c);
        std::size_t bytes = 0;
        const auto span = span_of(p, bytes);
        first_begin = span.first;
        // One stretch: the tensors plus each one's guard and at most 63 bytes of padding (separate
        // blocks would be at least 256 bytes each and scattered).
        CHECK(span.second < bytes + (pool_guard_bytes + 64) * named_tensors(c, p).size());
        CHECK((const char*)p.W_p.ptr() > (const char*)p.W_e.ptr());  // made in make_params' order
        CHECK((const char*)p.layers[1].ffn.W_1.ptr() > (const char*)p.layers[0].ffn.W_2.ptr());
        // Freeing one tensor of a live arena does not hand its stretch out alone.
        p.W_y = Tensor<float>(3, 3);
        const char* y = (const char*)p.W_y.ptr();
        CHECK((y < span.first || y >= span.first + span.second));
    }
    const long long fresh = pool_stats().fresh;
    Params<float> q = make_params<float>(c);  // the whole arena came back to the pool: reused as one block
    std::size_t bytes = 0;
    CHECK(span_of(q, bytes).first == first_begin);
    CHECK(pool_stats().fresh == fresh);
    {  // a scope inside a scope: the outer arena serves both; a request that does not fit goes elsewhere
        ArenaScope outer(1024);
        Tensor<float> a(8, 8);
        {
            ArenaScope inner(1 << 20);
            Tensor<float> b(8, 8), big(100, 100);
            // 256 bytes and a's guard on: the next stretch of the outer arena
            CHECK((const char*)b.ptr() == (const char*)a.ptr() + 256 + pool_guard_bytes);
            CHECK((big.ptr() < a.ptr() || big.ptr() > a.ptr() + 256));
        }
    }
    // Loading reads every tensor into one arena too.
    const std::string path = m_path("arena.safetensors");
    save_model(path, c, q);
    LoadedModel lm = load_model(path);
    CHECK(span_of(lm.params, bytes).second < bytes + (pool_guard_bytes + 64) * named_tensors(c, lm.params).size());
    CHECK(lm.params.W_e.data == q.W_e.data);
}
TEST_SUITE_END();

// ================================================================================================
// Generation with a key/value cache
// ================================================================================================
TEST_SUITE_BEGIN("training");
TEST_CASE("sample: generate is reproducible, keeps the prompt, greedy follows GPT(x), slides the context") {
    const Config c = preset("tiny-gpt");
    const Params<float> p = m_model<float>(c, 51, 0.5);
    const std::vector<int> prompt = {1, 2, 3};
    Rng a(5), b(5);
    const std::vector<int> ga = generate(c, p, prompt, 10, 1.0, 0, a), gb = generate(c, p, prompt, 10, 1.0, 0, b);
    CHECK(ga == gb);
    REQUIRE(ga.size() == 13);
    CHECK(std::equal(prompt.begin(), prompt.end(), ga.begin()));
    for (int t : ga) CHECK((t >= 0 && t < c.V));
    Rng unused(0);
    const std::vector<int> greedy = generate(c, p, prompt, 5, 0.0, 0, unused);
    for (std::size_t i = prompt.size(); i < greedy.size(); i++) {
        const std::vector<int> ctx(greedy.begin(), greedy.begin() + (long)i);
        const Tensor<float> y = GPT(c, p, ctx);
        CHECK(greedy[i] == (int)(std::max_element(y.data.begin(), y.data.end()) - y.data.begin()));
    }
    // A prompt longer than n_ctx uses its last n_ctx tokens.
    std::vector<int> long_prompt(20);
    for (int i = 0; i < 20; i++) long_prompt[i] = i % 10;
    const std::vector<int> gl = generate(c, p, long_prompt, 3, 0.0, 0, unused);
    CHECK(gl.size() == 23);
    const std::vector<int> tail(long_prompt.end() - c.n_ctx, long_prompt.end());
    CHECK(generate(c, p, tail, 1, 0.0, 0, unused).back() == gl[20]);
    M_CHECK_TF_ERROR(generate(c, p, {}, 3, 1.0, 0, unused), "empty");
    M_CHECK_TF_ERROR(generate(c, p, {1, 13}, 3, 1.0, 0, unused), "13");
    const Config cb = preset("tiny-bert");
    M_CHECK_TF_ERROR(generate(cb, make_params<float>(cb), {1}, 3, 1.0, 0, unused), "bert");
}

TEST_CASE("sample: MultiHeadSA_cached over m new rows at a time gives MultiHeadSA's rows; a cache for other heads is an error") {
    // formulas §32: head_i = Attention(x W_i^Q, [K_i; x W_i^K], [V_i; x W_i^V], Mask rows t..t+m-1),
    // fed 3, 1 and 3 rows, equals rows t..t+m-1 of MultiHeadSA on all 7 rows (causal mask, biases).
    Config c = preset("tiny-gpt2");
    c.attn_bias = true;
    const Params<double> p = m_model<double>(c, 7, 0.3);
    const MultiHeadSAParams<double>& w = p.layers[0].attn;
    const int n = 7;
    Rng r(3);
    Tensor<double> X(n, c.H);
    for (double& v : X.data) v = r.normal();
    const Tensor<double> Mask = Mask_AR<double>(n);
    const Tensor<double> Y = MultiHeadSA(X, Mask, w);
    KVLayer<double> kv;
    kv.K.assign(c.A, Tensor<double>(std::vector<int>{0, c.D}));
    kv.V.assign(c.A, Tensor<double>(std::vector<int>{0, c.D}));
    int t = 0;
    for (const int m : {3, 1, 3}) {
        Tensor<double> X_m(m, c.H), Mask_m(m, t + m);
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < c.H; j++) X_m(i, j) = X(t + i, j);
            for (int j = 0; j < t + m; j++) Mask_m(i, j) = Mask(t + i, j);
        }
        const Tensor<double> Y_m = MultiHeadSA_cached(X_m, Mask_m, w, kv);
        REQUIRE(Y_m.shape == std::vector<int>{m, c.H});
        for (int i = 0; i < m; i++)
            for (int j = 0; j < c.H; j++) {
                INFO("row " << t + i + 1 << ", column " << j + 1 << ": expected " << Y(t + i, j) << " (MultiHeadSA on all rows), got " << Y_m(i, j));
                CHECK(Y_m(i, j) == doctest::Approx(Y(t + i, j)).epsilon(1e-12));
            }
        t += m;
        CHECK(kv.K[1].shape == std::vector<int>{t, c.D});
        CHECK(kv.V[1].shape == std::vector<int>{t, c.D});
    }
    const std::vector<int> rows_before = {kv.K[0].rows(), kv.V[1].rows()};
    M_CHECK_TF_ERROR(MultiHeadSA_cached(X, Mask, w, kv), "MultiHeadSA_cached | Mask");  // 7 rows need a 7 x 14 mask
    CHECK_MESSAGE((std::vector<int>{kv.K[0].rows(), kv.V[1].rows()} == rows_before), "an error must leave the cache as it was");
    KVLayer<double> no_values;  // keys for A heads, no values
    no_values.K.assign(c.A, Tensor<double>(std::vector<int>{0, c.D}));
    M_CHECK_TF_ERROR(MultiHeadSA_cached(X, Mask, w, no_values), "MultiHeadSA_cached | kv_init");
    KVLayer<double> one_head;
    one_head.K.assign(1, Tensor<double>(std::vector<int>{0, c.D}));
    one_head.V.assign(1, Tensor<double>(std::vector<int>{0, c.D}));
    M_CHECK_TF_ERROR(MultiHeadSA_cached(X, Mask, w, one_head), "MultiHeadSA_cached | kv_init");
}

TEST_CASE("sample: model_step equals model_forward row by row (GPT, GPT-2, GPT-3, GPT-2 with attention biases)") {
    for (const char* name : {"tiny-gpt", "tiny-gpt2", "tiny-gpt3", "tiny-gpt2+attn_bias"}) {
        CAPTURE(name);
        const std::string s = name;
        Config c = preset(s.substr(0, s.find('+')));
        c.attn_bias = s.find("+attn_bias") != std::string::npos;
        Params<double> p = make_params<double>(c);
        init_params(c, p, 11);
        Rng r(5);
        for (auto& nt : named_tensors(c, p))  // away from the init's symmetric values
            for (auto& v : nt.tensor->data) v += 0.3 * r.normal();
        Batch b;
        b.n = c.n_ctx;
        for (int i = 0; i < b.n; i++) b.tokens.push_back(r.below(c.V));
        const Tensor<double> Z = model_forward(c, p, b);
        KVCache<double> cache;
        kv_init(c, cache);
        double worst = 0;
        for (int t = 0; t < b.n; t++) {
            const Tensor<double> z = model_step(c, p, b.tokens[t], cache);
            REQUIRE(z.shape == std::vector<int>{c.V});
            for (int v = 0; v < c.V; v++) worst = nan_max(worst, std::fabs(z[v] - Z(t, v)));
        }
        CHECK(worst < 1e-10);
        CHECK(cache.t == c.n_ctx);
        CHECK_THROWS_AS(model_step(c, p, 1, cache), Error);  // the cache is full
    }
    const Config bert = preset("tiny-bert");
    KVCache<double> cache;
    CHECK_THROWS_AS(kv_init(bert, cache), Error);  // not a causal model
}

TEST_CASE("sample: generate with the cache gives the tokens of full forward passes, across the n_ctx window") {
    const Config c = preset("tiny-gpt2");  // n_ctx 16: 30 new tokens slide the window
    Params<double> p = make_params<double>(c);
    init_params(c, p, 3);
    Rng r(9);
    for (auto& nt : named_tensors(c, p))
        for (auto& v : nt.tensor->data) v += 0.5 * r.normal();
    const std::vector<int> prompt = {1, 2, 3, 4, 5};
    Rng unused(0);
    const std::vector<int> cached = generate(c, p, prompt, 30, 0.0, 0, unused);
    std::vector<int> plain = prompt;  // greedy decoding with model_forward on the last n_ctx tokens
    for (int s = 0; s < 30; s++) {
        Batch b;
        const int start = std::max(0, (int)plain.size() - c.n_ctx);
        b.tokens = std::vector<int>(plain.begin() + start, plain.end());
        b.n = (int)b.tokens.size();
        const Tensor<double> Z = model_forward(c, p, b);
        int best = 0;
        for (int v = 1; v < c.V; v++)
            if (Z(b.n - 1, v) > Z(b.n - 1, best)) best = v;
        plain.push_back(best);
    }
    CHECK(cached == plain);
}
TEST_SUITE_END();

// ================================================================================================
// Tokenizer: GPT-2's byte-level BPE (on a small hand-made vocabulary; the real files are not
// part of the repository)
// ================================================================================================
TEST_SUITE_BEGIN("text");
TEST_CASE("text: a text with CR bytes gets one warning line from line_end_warning, train and tokenize, and is used as its bytes say") {
    CHECK(line_end_warning("to be\nor not\n", "a.txt").empty());
    const std::string w = line_end_warning("to be\r\nor not\r\n", "a.txt");
    INFO("line_end_warning said: " << w);
    CHECK(m_starts(w, "warning: 'a.txt' has 2 CR bytes (Windows ends its lines with CR LF)"));
    CHECK(m_contains(w, "dos2unix 'a.txt'"));
    CHECK(w.find('\n') == std::string::npos);  // one line
    CHECK(m_contains(line_end_warning("\r", "b"), "has 1 CR byte "));
    // The commands: the warning on stderr, once per file, and the CR is a character of the vocabulary.
    const std::string crlf = m_path("crlf.txt"), lf = m_path("crlf-lf.txt");
    auto lines_with = [](const std::string& s, const std::string& part) {
        std::size_t k = 0;
        for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) k++;
        return k;
    };
    std::string text;
    for (int i = 0; i < 40; i++) text += "to be or not to be\r\n";
    m_write(crlf, text);
    std::string lf_text = text;
    lf_text.erase(std::remove(lf_text.begin(), lf_text.end(), '\r'), lf_text.end());
    m_write(lf, lf_text);
    const m_Run t = m_run("train --data " + crlf + " --steps 1 --layers 1 --embd 16 --heads 2 --eval-every 1 --out " + m_path("crlf-m.safetensors"));
    INFO("train said:\n" << t.out << t.err);
    REQUIRE(t.status == 0);
    CHECK(lines_with(t.err, "warning: '" + crlf + "' has 40 CR bytes") == 1);
    const m_Run u = m_run("train --data " + lf + " --steps 1 --layers 1 --embd 16 --heads 2 --eval-every 1 --out " + m_path("crlf-n.safetensors"));
    REQUIRE(u.status == 0);
    CHECK_FALSE(m_contains(u.err, "CR byte"));
    const LoadedModel with_cr = load_model(m_path("crlf-m.safetensors"), {"adam."}), without = load_model(m_path("crlf-n.safetensors"), {"adam."});
    CHECK(with_cr.config.V == without.config.V + 1);  // '\r' is a token of its own
    const m_Run k = m_run("tokenize --checkpoint " + m_path("crlf-m.safetensors") + " --file " + crlf);
    INFO("tokenize said:\n" << k.out << k.err);
    CHECK(k.status == 0);
    CHECK(lines_with(k.err, "warning: '" + crlf + "' has 40 CR bytes") == 1);
}

TEST_CASE("numbers: read_integer, read_unsigned and read_real take the whole text as one decimal number, and say why not") {
    long long i = 0;
    CHECK(read_integer("-42", i) == NumberRead::ok);
    CHECK(i == -42);
    CHECK(read_integer("9223372036854775807", i) == NumberRead::ok);  // LLONG_MAX, the last that fits
    CHECK(i == 9223372036854775807LL);
    CHECK(read_integer("9223372036854775808", i) == NumberRead::out_of_range);
    for (const char* bad : {"", "12x", "1.5", "0x10", "-", "3 "}) {
        INFO("read_integer(\"" << bad << "\") should be not_a_number: nothing may follow the digits");
        CHECK(read_integer(bad, i) == NumberRead::not_a_number);
    }
    uint64_t u = 0;
    CHECK(read_unsigned("18446744073709551615", u) == NumberRead::ok);  // 2^64 - 1
    CHECK(u == 18446744073709551615ULL);
    CHECK(read_unsigned("18446744073709551616", u) == NumberRead::out_of_range);
    for (const char* bad : {"", "-1", "+1", " 1", "1e3"}) {
        INFO("read_unsigned(\"" << bad << "\") should be not_a_number: digits alone");
        CHECK(read_unsigned(bad, u) == NumberRead::not_a_number);
    }
    double d = 0;
    CHECK(read_real("1e-3", d) == NumberRead::ok);
    CHECK(d == 1e-3);
    CHECK(read_real("1e999", d) == NumberRead::out_of_range);
    CHECK(read_real("nan", d) == NumberRead::out_of_range);
    CHECK(read_real("0.5.", d) == NumberRead::not_a_number);
    // The errors every metadata value gets, and int's range.
    CHECK(parse_int("2147483647", "x") == 2147483647);
    CHECK_THROWS_WITH_AS(parse_int("2147483648", "metadata 'H'"), "metadata 'H': '2147483648' is not an integer", Error);
    CHECK_THROWS_WITH_AS(parse_u64("-1", "train.seed"), "train.seed: '-1' is not an unsigned integer", Error);
    CHECK_THROWS_WITH_AS(parse_double("fast", "train.lr"), "train.lr: 'fast' is not a number", Error);
    CHECK(parse_i64("-9000000000", "x") == -9000000000LL);
}

TEST_CASE("numbers: full_digits and shortest_double read back as the same double; whole_number writes a count") {
    for (double v : {0.1, 1e-5, 1.0 / 3.0, 6.25e-5, -2.5, 1e300, 5e-324}) {
        INFO("v = " << std::setprecision(17) << v);
        CHECK(std::strtod(full_digits(v).c_str(), nullptr) == v);
        CHECK(std::strtod(shortest_double(v).c_str(), nullptr) == v);
    }
    CHECK(full_digits(0.1) == "0.10000000000000001");  // %.17g
    CHECK(shortest_double(0.1) == "0.1");
    CHECK(shortest_double(1e-5) == "1e-05");
    CHECK(whole_number(123456789.0) == "123456789");
    CHECK(whole_number(1e20) == "1e+20");
}

TEST_CASE("tokenizer: bytes_to_unicode maps printable bytes to themselves and the 68 others to U+0100...") {
    CHECK(bytes_to_unicode('A') == "A");
    CHECK(bytes_to_unicode('~') == "~");
    CHECK(bytes_to_unicode(0xFF) == "\xC3\xBF");   // U+00FF
    CHECK(bytes_to_unicode(0) == "\xC4\x80");      // U+0100: the first non-printable byte
    CHECK(bytes_to_unicode('\n') == "\xC4\x8A");   // U+010A "Ċ"
    CHECK(bytes_to_unicode(' ') == "\xC4\xA0");    // U+0120 "Ġ": bytes 0..32 are the first 33
    CHECK(bytes_to_unicode(0xAD) == "\xC5\x83");   // U+0143: the 68th and last (33 + 34 before it)
    std::set<std::string> all;
    for (int b = 0; b < 256; b++) all.insert(bytes_to_unicode((unsigned char)b));
    CHECK(all.size() == 256);
}

TEST_CASE("tokenizer: gpt2_pretokenize splits as GPT-2's pattern does") {
    using V = std::vector<std::string>;
    CHECK(gpt2_pretokenize("Hello world") == V{"Hello", " world"});
    // Contractions, a run of two spaces (the last one starts " ok"), newlines before a letter.
    CHECK(gpt2_pretokenize("it's  ok\n\nyes") == V{"it", "'s", " ", " ok", "\n", "\n", "yes"});
    CHECK(gpt2_pretokenize("I'll 2024... x") == V{"I", "'ll", " 2024", "...", " x"});
    CHECK(gpt2_pretokenize("we're they've I'm he'd 'S") == V{"we", "'re", " they", "'ve", " I", "'m", " he", "'d", " '", "S"});
    CHECK(gpt2_pretokenize("a  ") == V{"a", "  "});            // white space at the end stays whole
    CHECK(gpt2_pretokenize("a\t b") == V{"a", "\t", " b"});
    CHECK(gpt2_pretokenize("!'s") == V{"!'", "s"});            // the run of punctuation comes first
    // Letters and numbers beyond ASCII: accents, CJK, Arabic-Indic digits, superscript two (N).
    CHECK(gpt2_pretokenize("h\xC3\xA9llo w\xC3\xB6rld") == V{"h\xC3\xA9llo", " w\xC3\xB6rld"});
    CHECK(gpt2_pretokenize("\xE6\x97\xA5\xE6\x9C\xAC!") == V{"\xE6\x97\xA5\xE6\x9C\xAC", "!"});
    CHECK(gpt2_pretokenize("x\xC2\xB2 \xD9\xA3\xD9\xA4") == V{"x", "\xC2\xB2", " \xD9\xA3\xD9\xA4"});
    // A no-break space is white space, so it does not join the letters after it.
    CHECK(gpt2_pretokenize("\xC2\xA0" "a") == V{"\xC2\xA0", "a"});
    CHECK(gpt2_pretokenize("").empty());
    // The pieces always put the text back together.
    const std::string mixed = "  Tom's  caf\xC3\xA9 \xE2\x80\x94 2\xC2\xBD cups!!\r\n\tend \xF0\x9F\x98\x80 ";
    std::string joined;
    for (auto& p : gpt2_pretokenize(mixed)) joined += p;
    CHECK(joined == mixed);
    M_CHECK_TF_ERROR(gpt2_pretokenize("ok\xFF"), "UTF-8", "byte 2");
    M_CHECK_TF_ERROR(gpt2_pretokenize("\xC3"), "UTF-8");          // truncated
    M_CHECK_TF_ERROR(gpt2_pretokenize("\xC0\x80"), "UTF-8");      // overlong NUL
    M_CHECK_TF_ERROR(gpt2_pretokenize("\xED\xA0\x80"), "UTF-8");  // a surrogate
}

TEST_CASE("tokenizer: BPE merges the lowest-ranked pair first, every occurrence, and decodes back") {
    const BPE t = m_small_bpe();
    CHECK(t.size() == 261);
    CHECK(t.eot == 260);
    // "hello": h e l l o -> (rank 0) he l l o -> (1) he ll o -> (2) hell o.
    CHECK(t.bpe("hello") == std::vector<std::string>{"hell", "o"});
    // " hello": the space symbol joins "hell" last (rank 3).
    CHECK(t.bpe(" hello") == std::vector<std::string>{m_G + "hell", "o"});
    CHECK(t.encode("hello hello") == std::vector<int>{258, 'o', 259, 'o'});
    CHECK(t.bpe("llll") == std::vector<std::string>{"ll", "ll"});  // every occurrence, left to right
    CHECK(t.bpe("lll") == std::vector<std::string>{"ll", "l"});
    // Rank, not position, decides: with "b c" ranked before "a b", "abc" is a + bc.
    const BPE r = make_bpe(m_encoder_json({"bc", "ab"}), m_vocab_bpe({"b c", "a b"}));
    CHECK(r.encode("abc") == std::vector<int>{'a', 256});
    CHECK(r.encode("abd") == std::vector<int>{257, 'd'});
    // Any bytes that are valid UTF-8 round trip, "<|endoftext|>" is plain text to encode.
    const std::string text = "hello, w\xC3\xB6rld!\n\n  \xF0\x9F\x98\x80 <|endoftext|>\t";
    CHECK(t.decode(t.encode(text)) == text);
    CHECK(t.decode({258, 'o', t.eot}) == "hello<|endoftext|>");
    M_CHECK_TF_ERROR(t.decode({261}), "261", "0..260");
    M_CHECK_TF_ERROR(t.decode({-1}), "-1");
}

TEST_CASE("tokenizer: malformed encoder.json and vocab.bpe are errors naming the problem") {
    const std::string merges = m_vocab_bpe({"h e"});
    M_CHECK_TF_ERROR(make_bpe("{\"a\": 0", merges), "JSON");
    M_CHECK_TF_ERROR(make_bpe("[1, 2]", merges), "encoder.json", "object");
    M_CHECK_TF_ERROR(make_bpe("{\"a\": 0, \"b\": 0}", merges), "id 0", "twice");
    M_CHECK_TF_ERROR(make_bpe("{\"a\": 0, \"b\": 2}", merges), "'b'", "0..1");
    M_CHECK_TF_ERROR(make_bpe("{\"a\": 0.5}", merges), "'a'");
    M_CHECK_TF_ERROR(make_bpe("{\"a\": \"0\"}", merges), "'a'");
    M_CHECK_TF_ERROR(make_bpe("{\"a b\": 0}", merges), "outside the 256 byte symbols");  // a raw space
    const std::string enc = m_encoder_json({"he"});
    M_CHECK_TF_ERROR(make_bpe(enc, "#version: 0.2\nh e\nhe\n"), "line 3");
    M_CHECK_TF_ERROR(make_bpe(enc, "#version: 0.2\nh  e\n"), "line 2");
    M_CHECK_TF_ERROR(make_bpe(enc, "#version: 0.2\n"), "no merges");
    // A vocab.bpe cut at a line boundary: fewer merges than tokens made by merges (the byte symbols
    // and <|endoftext|> are not), like GPT-2's 50000 merges for 50257 tokens.
    std::string enc3 = m_encoder_json({"he", "ll", "hell"});
    enc3.insert(enc3.rfind('}'), ", \"<|endoftext|>\": 259");
    CHECK(make_bpe(enc3, m_vocab_bpe({"h e", "l l", "he ll"})).encode("hell").size() == 1);
    M_CHECK_TF_ERROR(make_bpe(enc3, m_vocab_bpe({"h e", "l l"})), "2 merges", "3 tokens made by merges", "cut short");
    // A merge whose result is not in the vocabulary: encoding names the symbol.
    const BPE t = make_bpe(m_encoder_json({}), m_vocab_bpe({"h e"}));
    M_CHECK_TF_ERROR(t.encode("he"), "'he'", "not in the vocabulary");
    M_CHECK_TF_ERROR(load_bpe(m_path("no_such_encoder.json"), m_path("no_such.bpe")), "no_such_encoder.json");
}

TEST_CASE("CLI: tokenize encodes text and files, decodes ids, rejects bad input") {
    m_write(m_path("enc.json"), m_encoder_json({"he", "ll", "hell", m_G + "hell"}));
    m_write(m_path("merges.bpe"), m_vocab_bpe({"h e", "l l", "he ll", m_G + " hell"}));
    const std::string files = "tokenize --encoder " + m_path("enc.json") + " --vocab " + m_path("merges.bpe");
    const m_Run r = m_run(files + " --text 'hello hello'");
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(r.out == "258,111,259,111\n");
    m_write(m_path("text.txt"), "hello\n");
    CHECK(m_run(files + " --file " + m_path("text.txt")).out == "258,111,10\n");
    CHECK(m_run(files + " --ids 258,111,259,111").out == "hello hello");  // exactly the bytes: no newline added
    // --file then --ids gives back the file byte for byte, whatever its text (CRLF, no final
    // newline, tabs, runs of spaces, accents, CJK).
    const std::string probe = "h\xC3\xA9llo\r\n\t  hell \xE6\xBC\xA2\xE5\xAD\x97\n\nhello";
    m_write(m_path("probe.txt"), probe);
    const m_Run enc = m_run_ok(files + " --file " + m_path("probe.txt"));
    const std::string ids = enc.out.substr(0, enc.out.size() - 1);
    CHECK(m_run_ok(files + " --ids " + ids).out == probe);
    m_cli_fails(files + " --ids 258,9999", "9999");
    m_cli_fails(files + " --text hi --ids 1", "exactly one of");
    m_cli_fails(files, "exactly one of");
    m_cli_fails("tokenize --encoder " + m_path("enc.json") + " --text hi", "--vocab");
    m_write(m_path("latin1.txt"), "caf\xE9\n");  // Latin-1, not UTF-8
    m_cli_fails(files + " --file " + m_path("latin1.txt"), "UTF-8");
    m_write(m_path("bad.json"), "{\"a\": 7}");
    m_cli_fails("tokenize --encoder " + m_path("bad.json") + " --vocab " + m_path("merges.bpe") + " --text hi", "bad.json");
}

TEST_CASE("tokenizer: the heap-based merges equal GPT-2's rescanning loop on random pieces") {
    // GPT-2's loop, written plainly: lowest-ranked pair, every occurrence left to right, repeat.
    auto plain = [](const BPE& t, const std::string& piece) {
        std::vector<std::string> w;
        for (unsigned char b : piece) w.push_back(bytes_to_unicode(b));
        while (w.size() > 1) {
            int best = -1;
            std::size_t at = 0;
            for (std::size_t k = 0; k + 1 < w.size(); k++) {
                auto it = t.ranks.find(w[k] + " " + w[k + 1]);
                if (it != t.ranks.end() && (best < 0 || it->second < best)) best = it->second, at = k;
            }
            if (best < 0) break;
            const std::string a = w[at], b = w[at + 1];
            std::vector<std::string> m;
            for (std::size_t k = 0; k < w.size(); k++) {
                if (k + 1 < w.size() && w[k] == a && w[k + 1] == b) m.push_back(a + b), k++;
                else m.push_back(w[k]);
            }
            w = m;
        }
        return w;
    };
    // Merges whose results create pairs of lower rank than the pass that made them ("bc b" before
    // "b c", "aa c" before "a a"): impossible in a trained vocabulary, but the passes must still be
    // GPT-2's.
    const std::vector<std::string> merges = {"bc b", "aa c", "a a", "b c", "a bc", "aa a", "c a", "b b",
                                             "ca b", "bb bb", "a b", "ab c", "aabc a"};
    std::vector<std::string> tokens;
    for (auto& m : merges) {
        const std::string joined = m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1);
        if (std::find(tokens.begin(), tokens.end(), joined) == tokens.end()) tokens.push_back(joined);
    }
    const BPE t = make_bpe(m_encoder_json(tokens), m_vocab_bpe(merges));
    Rng r(91);
    for (int trial = 0; trial < 500; trial++) {
        std::string piece(1 + r.below(40), 'a');
        for (char& ch : piece) ch = "abc"[r.below(3)];
        CAPTURE(piece);
        CHECK(t.bpe(piece) == plain(t, piece));
    }
    std::string long_piece(3000, 'a');  // a long piece, where the passes matter most
    for (std::size_t k = 0; k < long_piece.size(); k += 7) long_piece[k] = "bc"[k % 2];
    CHECK(t.bpe(long_piece) == plain(t, long_piece));
}

TEST_CASE("RoBERTa's tokenizer: GPT-2's byte-level BPE whose <s>, </s>, <mask> in the text are tokens, <mask> taking the space before it") {
    const std::string enc = m_encoder_json(m_RB_MERGED), merges = m_vocab_bpe(m_RB_MERGES);
    CHECK(tokenizer_kind_of(enc, merges) == "roberta-bpe");
    CHECK(tokenizer_kind_of(m_encoder_json({"he", "ll", "hell", m_G + "hell"}), merges) == "gpt2-bpe");
    const Tokenizer t = make_tokenizer("roberta-bpe", enc, merges, "test");  // 9 tokens beyond the bytes, 4 merges: not cut
    CHECK(t.size() == 265);
    CHECK(t.encode("hell <mask>.") == std::vector<int>{258, 264, '.'});  // no "Ġ" before <mask>
    CHECK(t.encode("hell\t\n <mask>") == std::vector<int>{258, 264});
    CHECK(t.encode("<mask> hell") == std::vector<int>{264, 259});         // the space after it stays: "Ġhell"
    CHECK(t.encode("<s>hell</s>") == std::vector<int>{260, 258, 262});
    CHECK(t.encode("hell <s>") == std::vector<int>{258, ' ', 260});       // only <mask> takes the space
    CHECK(t.encode("<pad><unk></s") == std::vector<int>{261, 263, '<', '/', 's'});
    CHECK(t.encode("a <mask") == std::vector<int>{'a', ' ', '<', 'm', 'a', 's', 'k'});
    CHECK(t.decode({260, 258, 264, '.', 262}) == "<s>hell<mask>.</s>");
    // The plain GPT-2 BPE of the same files reads "<mask>" as text.
    CHECK(make_tokenizer("gpt2-bpe", enc, merges, "test").encode("<mask>").size() == 6);
    CHECK(is_bidirectional_tokenizer("roberta-bpe"));
    CHECK(is_bidirectional_tokenizer("bert-wordpiece"));
    CHECK_FALSE(is_bidirectional_tokenizer("gpt2-bpe"));
    M_CHECK_TF_ERROR(make_tokenizer("roberta-bpe", m_encoder_json({"he", "<mask>"}), m_vocab_bpe({"h e"}), "test"),
                     "lacks RoBERTa's special token <s>");
    M_CHECK_TF_ERROR(make_bpe(enc, m_vocab_bpe({"h e", "l l", "he ll"})), "3 merges", "4 tokens made by merges", "cut short");
    CHECK(make_bpe(m_encoder_json({"he", "madeupword0000", "madeupword0001"}), m_vocab_bpe({"h e"})).size() == 259);
    // Recorded in a checkpoint and read back.
    const Tokenizer back = tokenizer_of(t.metadata(), "x.safetensors");
    CHECK(back.kind == "roberta-bpe");
    CHECK(back.encode("hell <mask>.") == t.encode("hell <mask>."));
}

// ================================================================================================
// bpe: learning a byte-level BPE vocabulary (Hugging Face's BpeTrainer rule; see transformer.hpp)
// ================================================================================================
namespace {
// The merges of a learnt vocabulary as "A B" lines of byte-level symbols (vocab.bpe without its header).
std::vector<std::string> m_bpe_merge_lines(const BpeLearnt& b) {
    std::vector<std::string> out;
    std::istringstream in(bpe_vocab_bpe(b));
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) out.push_back(line);
    return out;
}
BpeLearnt m_bpe_learn(const std::string& text, long long merges = 1000, long long min_count = 1,
                      const std::vector<std::string>& specials = {}) {
    BpePieces p;
    bpe_count_text(p, text, specials);
    BpeLearnOptions o;
    o.merges = merges, o.min_count = min_count, o.specials = specials;
    return bpe_learn(p, o);
}
}  // namespace

TEST_CASE("bpe: the byte symbols are ids 0..255 in code-point order, GPT-2's encoder.json order") {
    const BpeLearnt b = m_bpe_learn("ab\n");
    REQUIRE(b.tokens.size() >= 256);
    CHECK(b.tokens[0] == "!");
    CHECK(b.tokens['a' - '!'] == "a");                 // printable ASCII: byte - 0x21
    CHECK(b.tokens[93] == "~");
    CHECK(b.tokens[94] == "\xA1");                      // then 0xA1..0xAC, 0xAE..0xFF stand for themselves
    CHECK(b.tokens[187] == "\xFF");
    CHECK(b.tokens[188] == std::string(1, '\0'));      // then the 68 others in byte order (U+0100..)
    CHECK(b.tokens[220] == " ");                        // "Ġ" (U+0120) is GPT-2's 220
    CHECK(b.tokens[198] == "\n");                       // "Ċ"
    CHECK(b.tokens[255] == "\xAD");
    const std::string enc = bpe_encoder_json(b);
    CHECK(enc.rfind("{\"!\": 0, \"\\\"\": 1, \"#\": 2,", 0) == 0);
    CHECK(m_contains(enc, "\"\xC4\xA0\": 220"));          // "Ġ"
    CHECK(m_contains(enc, "\"ab\": 256}"));
}

// "hello world\nhello there\n": pieces "hello" x2, " world", " there", "\n" x2. Ids: e 68, h 71,
// l 75, o 78, d 67, r 81, t 83, w 86, Ġ 220. Counts: (h e) 3: "hello" twice and " there";
// then (l l), (he ll), (hell o) 2 each, the ties going to the smallest (left, right): (l l) = (75, 75)
// before (l o) = (75, 78) and (e l); then every pair left occurs once, taken by smallest ids:
// (l d) = (75, 67), (o r) = (78, 81), (r e) = (81, 68), (t he) = (83, 256), (w or) = (86, 261), ...
TEST_CASE("bpe: hand-computed merges of a small text, ties broken by the smallest (left id, right id)") {
    const BpeLearnt b = m_bpe_learn("hello world\nhello there\n");
    const std::vector<std::string> want = {"h e", "l l", "he ll", "hell o", "l d", "o r", "r e", "t he", "w or",
                                           "\xC4\xA0 the", "\xC4\xA0 wor", "\xC4\xA0the re", "\xC4\xA0wor ld"};
    CHECK(m_bpe_merge_lines(b) == want);
    REQUIRE(b.merges.size() == 13);
    const long long counts[13] = {3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int k = 0; k < 13; k++) {
        CHECK(b.merges[k].count == counts[k]);
        CHECK(b.merges[k].id == 256 + k);  // each merge a new symbol, the next id
    }
    CHECK(b.merges[0].left == 71);
    CHECK(b.merges[0].right == 68);
    CHECK(b.merges[4].left == 75);  // (l d): the smallest pair among the ties
    CHECK(b.merges[4].right == 67);
    CHECK(b.tokens.back() == " world");
    // A tie where the smallest pair is not the first seen: "ba ab" has (b a), (Ġ a), (a b) once each.
    CHECK(m_bpe_merge_lines(m_bpe_learn("ba ab\n")) == std::vector<std::string>{"a b", "b a", "\xC4\xA0 ab"});
}

TEST_CASE("bpe: a pair inside a piece is merged left to right without overlap (\"aaaa\", \"aaa\")") {
    // "aaaa": (a a) occurs 3 times (overlapping windows count, as Hugging Face counts them); merged left
    // to right it becomes "aa aa", whose one pair (aa aa) is the next merge.
    const BpeLearnt four = m_bpe_learn("aaaa\n");
    CHECK(m_bpe_merge_lines(four) == std::vector<std::string>{"a a", "aa aa"});
    REQUIRE(four.merges.size() == 2);
    CHECK(four.merges[0].count == 3);
    CHECK(four.merges[1].count == 1);
    const BpeLearnt three = m_bpe_learn("aaa\n");  // "aa a": then (aa a)
    CHECK(m_bpe_merge_lines(three) == std::vector<std::string>{"a a", "aa a"});
    CHECK(three.merges[0].count == 2);
    // Five a's and three a's, each 3 times: (a a) 4x3 + 2x3 = 18; then "aa aa a" and "aa a" give (aa a) 6
    // and (aa aa) 3; then "aa aaa" (aa aaa) 3.
    const BpeLearnt mix = m_bpe_learn("aaaaa\naaaaa\naaaaa\naaa\naaa\naaa\n");
    CHECK(m_bpe_merge_lines(mix) == std::vector<std::string>{"a a", "aa a", "aa aaa"});
    REQUIRE(mix.merges.size() == 3);
    CHECK(mix.merges[0].count == 18);
    CHECK(mix.merges[1].count == 6);
    CHECK(mix.merges[2].count == 3);
}

TEST_CASE("bpe: --min-count and --merges stop the merging; no pair left stops it too") {
    // "hello world\nhello there\n" (above): 4 merges occur at least twice, 13 at least once.
    CHECK(m_bpe_merge_lines(m_bpe_learn("hello world\nhello there\n", 1000, 2)) ==
          std::vector<std::string>{"h e", "l l", "he ll", "hell o"});
    CHECK(m_bpe_learn("hello world\nhello there\n", 1000, 3).merges.size() == 1);
    CHECK(m_bpe_learn("hello world\nhello there\n", 1000, 4).merges.empty());
    CHECK(m_bpe_merge_lines(m_bpe_learn("hello world\nhello there\n", 3)) == std::vector<std::string>{"h e", "l l", "he ll"});
    const BpeLearnt ab = m_bpe_learn("ab\n", 1000);  // one merge, then no pair is left
    CHECK(m_bpe_merge_lines(ab) == std::vector<std::string>{"a b"});
    CHECK(ab.tokens.size() == 257);
    CHECK(m_bpe_learn("a\nb\n").merges.empty());  // pieces of one byte: nothing to merge
    BpePieces p;
    bpe_count_text(p, "ab\n");
    BpeLearnOptions o;
    o.merges = 0;
    M_CHECK_TF_ERROR(bpe_learn(p, o), "merges must be positive");
    o.merges = 5, o.min_count = 0;
    M_CHECK_TF_ERROR(bpe_learn(p, o), "minimum count");
}

TEST_CASE("bpe: counting pieces: lines keep their newline, GPT-2's pattern, each distinct piece once") {
    BpePieces p;
    bpe_count_text(p, "I don't know.\r\nI  know\n\n\tok");
    // "I" " don" "'t" " know" "." "\r\n" | "I" " " " know" "\n\n" is two lines: "\n" and "\n" | "\t" "ok"
    CHECK(p.lines == 4);
    CHECK(p.bytes == 27);
    CHECK(p.count.at("I") == 2);
    CHECK(p.count.at(" don") == 1);
    CHECK(p.count.at("'t") == 1);
    CHECK(p.count.at(" know") == 2);
    CHECK(p.count.at(".") == 1);
    CHECK(p.count.at("\r\n") == 1);
    CHECK(p.count.at(" ") == 1);
    CHECK(p.count.at("\n") == 2);  // a blank line is its own line: never "\n\n"
    CHECK(p.count.count("\n\n") == 0);
    CHECK(p.count.at("\t") == 1);
    CHECK(p.count.at("ok") == 1);
    CHECK(p.pieces == 13);
    CHECK(p.count.size() == 10);
    // Invalid UTF-8: the line and the byte offset.
    BpePieces q;
    M_CHECK_TF_ERROR(bpe_count_text(q, "fine\nstill fine\nbad \xFF here\n", {}, "'x.txt'"), "'x.txt'", "line 3",
                     "byte 0xFF at byte offset 20", "byte 5 of the line");
    M_CHECK_TF_ERROR(bpe_count_text(q, "\xE2\x82", {}, "'y'"), "line 1", "offset 0");  // a cut sequence
}

TEST_CASE("bpe: --special tokens are cut out before pre-tokenizing, never merged, and take ids after the merges") {
    const std::string text = "ab<|endoftext|>ab\n<|endoftext|><|endoftext|>\nab<|end|>ab\n";
    const BpeLearnt b = m_bpe_learn(text, 1000, 1, {"<|endoftext|>", "<|end|>"});
    // What is left: "ab" x4 and "\n" x3: one pair; nothing from '<', '|' or "endoftext".
    CHECK(m_bpe_merge_lines(b) == std::vector<std::string>{"a b"});
    CHECK(b.merges[0].count == 4);
    REQUIRE(b.tokens.size() == 259);
    CHECK(b.specials == 2);
    CHECK(b.tokens[257] == "<|endoftext|>");
    CHECK(b.tokens[258] == "<|end|>");
    const std::string enc = bpe_encoder_json(b);
    CHECK(m_contains(enc, "\"ab\": 256, \"<|endoftext|>\": 257, \"<|end|>\": 258}"));
    // Without --special they are text: "<|" and "|>" pieces, merged like any other.
    const BpeLearnt plain = m_bpe_learn(text);
    CHECK(m_bpe_merge_lines(plain).size() > 5);
    CHECK(m_contains(bpe_vocab_bpe(plain), "< |"));
    // The longest special at a position wins ("<|end|>" inside "<|endoftext|>" never matches).
    BpePieces p;
    bpe_count_text(p, "x<|end|>y<|endoftext|>z\n", {"<|end|>", "<|endoftext|>"});
    CHECK(p.pieces == 4);  // "x" "y" "z" "\n"
    CHECK(bpe_special_problem("<|endoftext|>").empty());
    CHECK(bpe_special_problem("<mask>").empty());
    CHECK(m_contains(bpe_special_problem("[SEP]"), "<|NAME|>"));
    CHECK(m_contains(bpe_special_problem("<|a b|>"), "ASCII"));
    CHECK(m_contains(bpe_special_problem(""), "empty"));
}

TEST_CASE("bpe: several inputs count as their concatenation; a file is streamed line by line") {
    const std::string a = m_path("bpe_a.txt"), b = m_path("bpe_b.txt");
    std::string big;  // more than the reader's 1 MB block, lines cut across blocks
    for (int k = 0; k < 30000; k++) big += "line " + std::to_string(k) + " of the first file, with some words\n";
    m_write(a, big);
    m_write(b, "the second file\nends without a newline");
    BpePieces files, text;
    bpe_count_file(files, a, {});
    bpe_count_file(files, b, {});
    bpe_count_text(text, big + "the second file\nends without a newline");
    CHECK(files.count == text.count);
    CHECK(files.pieces == text.pieces);
    CHECK(files.lines == 30002);
    CHECK(files.bytes == (long long)big.size() + 38);
    BpeLearnOptions o;
    o.merges = 300;
    CHECK(m_bpe_merge_lines(bpe_learn(files, o)) == m_bpe_merge_lines(bpe_learn(text, o)));
    // Invalid UTF-8 in a file: its name, the line and the byte offset in the file.
    const std::string bad = m_path("bpe_bad.txt");
    m_write(bad, "good line\nanother\nbroken \xC3\x28 here\n");
    BpePieces q;
    M_CHECK_TF_ERROR(bpe_count_file(q, bad, {}), "--data '" + bad + "'", "line 3", "byte 0xC3 at byte offset 25");
    M_CHECK_TF_ERROR(bpe_count_file(q, m_path("bpe_missing.txt"), {}), "bpe_missing.txt", "cannot open");
}

TEST_CASE("bpe: the learnt files load through GPT-2's tokenizer loader, and any UTF-8 text round-trips") {
    std::string corpus;
    for (int k = 0; k < 20; k++)
        corpus += "Caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 "
                  "\xF0\x9F\x98\x80 x = [1, 2, 3];\r\n\tindented    spaces  \n\n";
    const BpeLearnt b = m_bpe_learn(corpus, 40, 2, {"<|endoftext|>"});
    REQUIRE(b.merges.size() == 40);
    const BPE bpe = make_bpe(bpe_encoder_json(b), bpe_vocab_bpe(b));
    CHECK(bpe.size() == (int)b.tokens.size());
    CHECK(bpe.eot == (int)b.tokens.size() - 1);
    CHECK(bpe.ranks.size() == 40);
    for (std::size_t id = 0; id + 1 < b.tokens.size(); id++) CHECK(bpe.decoder[id] == b.tokens[id]);
    const std::string texts[] = {corpus, "unseen: \xEA\xB0\x80\xEB\x82\x98 \xC3\xB1 \x01\x7F zebra\n",
                                 std::string("nul\0byte", 8), "", "    \t\t\r\n\r\n", "Caf\xC3\xA9\xC3\xA9\xC3\xA9"};
    for (const std::string& t : texts) {
        const std::vector<int> ids = bpe.encode(t);
        CHECK(bpe.decode(ids) == t);
    }
    // 40 merges already halve the corpus: 780 tokens for its 1600 bytes.
    CHECK(corpus.size() == 1600);
    CHECK(bpe.encode(corpus).size() == 780);
    // Through the files and the commands' loader: recognised as GPT-2's kind.
    const std::string dir = m_path("bpe_load");
    bpe_write(dir, b, {});
    const Tokenizer t = load_tokenizer("", dir + "/encoder.json", dir + "/vocab.bpe");
    CHECK(t.kind == "gpt2-bpe");
    CHECK(t.size() == (int)b.tokens.size());
    CHECK(t.decode(t.encode(corpus)) == corpus);
}

TEST_CASE("bpe: vocab.bpe starts with our header; a pair merged twice is written once, at its last place") {
    BpeLearnt b;
    for (int x = 0; x < 256; x++) b.tokens.push_back("");
    b.tokens['a' - '!'] = "a", b.tokens['b' - '!'] = "b", b.tokens['c' - '!'] = "c";
    b.tokens.push_back("ab"), b.tokens.push_back("abc");
    const int a = 'a' - '!', bb = 'b' - '!', c = 'c' - '!';
    b.merges = {{a, bb, 256, 9}, {256, c, 257, 5}, {a, bb, 256, 2}};
    CHECK(bpe_vocab_bpe(b) == std::string(BPE_VOCAB_HEADER) + "\nab c\na b\n");
    CHECK(std::string(BPE_VOCAB_HEADER).rfind("#version: 0.2", 0) == 0);  // what GPT-2's and HF's readers skip
}

TEST_CASE("bpe: the command writes encoder.json and vocab.bpe that tokenize reads; --show prints the merges") {
    const std::string data = m_path("bpe_cli.txt"), more = m_path("bpe_cli2.txt"), dir = m_path("bpe_cli_out");
    m_write(data, "hello world\n");
    m_write(more, "hello there\n<|endoftext|>\n");
    const m_Run r = m_run("bpe --data " + data + " --data " + more + " --merges 4 --special '<|endoftext|>' --show 2 --out " + dir);
    INFO("stderr: " << r.err);
    REQUIRE(r.status == 0);
    CHECK(m_contains(r.out, "merge      1: h e -> id 256 (count 3)"));
    CHECK(m_contains(r.out, "merge      2: l l -> id 257 (count 2)"));
    CHECK(!m_contains(r.out, "merge      3:"));
    CHECK(m_contains(r.out, "learnt 4 merges (--merges reached)"));
    CHECK(m_contains(r.out, "261 tokens: 256 bytes, 4 merged, 1 special"));
    CHECK(m_contains(r.err, "bpe: counted"));
    CHECK(m_read(dir + "/vocab.bpe") == std::string(BPE_VOCAB_HEADER) + "\nh e\nl l\nhe ll\nhell o\n");
    CHECK(m_contains(m_read(dir + "/encoder.json"), "\"hello\": 259, \"<|endoftext|>\": 260}"));
    const m_Run t = m_run("tokenize --encoder " + dir + "/encoder.json --vocab " + dir + "/vocab.bpe --text 'hello hello'");
    CHECK(t.status == 0);
    CHECK(t.out == "259,220,259\n");  // "hello", "Ġ", "hello": " hello" was never merged
    const m_Run back = m_run("tokenize --encoder " + dir + "/encoder.json --vocab " + dir + "/vocab.bpe --ids 259,220,259");
    CHECK(back.out == "hello hello");
    // Run again into the same directory: its own files are replaced; nothing else is left there.
    const m_Run again = m_run("bpe --data " + data + " --merges 2 --out " + dir + " --quiet");
    INFO("stderr: " << again.err);
    CHECK(again.status == 0);
    CHECK(again.err.empty());
    // "hello world" alone: every pair once, so the smallest ids first: (e l) = (68, 75), then (h el) = (71, 256)
    CHECK(m_read(dir + "/vocab.bpe") == std::string(BPE_VOCAB_HEADER) + "\ne l\nh el\n");
    CHECK(m_names_in(dir, "") == std::vector<std::string>{"encoder.json", "vocab.bpe"});
    // RoBERTa's five special tokens make RoBERTa's kind, whose <mask> is one token in the text.
    const std::string rdir = m_path("bpe_cli_roberta");
    const m_Run rr = m_run("bpe --data " + data + " --merges 2 --quiet --out " + rdir +
                           " --special '<s>' --special '<pad>' --special '</s>' --special '<unk>' --special '<mask>'");
    INFO("stderr: " << rr.err);
    REQUIRE(rr.status == 0);
    const Tokenizer rt = load_tokenizer("", rdir + "/encoder.json", rdir + "/vocab.bpe");
    CHECK(rt.kind == "roberta-bpe");
    // "hello": hel l o (merges e l, h el); the space before <mask> goes with it (lstrip); ids 258..262 the five
    CHECK(rt.encode("hello <mask>") == std::vector<int>{257, 75, 78, 262});
}

TEST_CASE("bpe: bad input is an error naming the flag or file, with nothing written") {
    const std::string data = m_path("bpe_err.txt"), dir = m_path("bpe_err_out");
    m_write(data, "some text to learn from\n");
    m_cli_fails("bpe --data " + data + " --merges 0 --out " + dir, "--merges must be positive");
    m_cli_fails("bpe --data " + data + " --merges -3 --out " + dir, "--merges must be positive");
    m_cli_fails("bpe --data " + data + " --merges x --out " + dir, "--merges expects an integer");
    m_cli_fails("bpe --data " + data + " --out " + dir, "missing flag --merges");
    m_cli_fails("bpe --merges 5 --out " + dir, "missing flag --data");
    m_cli_fails("bpe --data " + data + " --merges 5", "missing flag --out");
    m_cli_fails("bpe --data " + data + " --merges 5 --min-count 0 --out " + dir, "--min-count must be at least 1");
    m_cli_fails("bpe --data " + data + " --merges 5 --show -1 --out " + dir, "--show");
    m_cli_fails("bpe --data " + m_path("bpe_nofile.txt") + " --merges 5 --out " + dir, "--data '" + m_path("bpe_nofile.txt") + "'");
    m_cli_fails("bpe --data " + data + " --data " + m_path("bpe_nofile.txt") + " --merges 5 --out " + dir, "bpe_nofile.txt");
    m_cli_fails("bpe --data " + data + " --merges 5 --special '[SEP]' --out " + dir, "--special '[SEP]'");
    m_cli_fails("bpe --data " + data + " --merges 5 --special '<s>' --special '<s>' --out " + dir, "given twice");
    m_cli_fails("bpe --data " + data + " --merges 5 --special '<mask>' --out " + dir, "give --special '<s>' too");
    m_cli_fails("bpe --data " + data + " --merges 5 --out " + dir + " --merges 6", "given twice");
    m_cli_fails("bpe --data " + data + " --merges 5 --out " + m_path("no_such_dir") + "/x", "does not exist");
    // Corpora it refuses: the file's name and text, the flags between --data and --out, the error.
    const struct {
        const char *name, *text, *flags, *error;
    } corpora[] = {{"bpe_empty.txt", "", " --merges 5 --quiet", "the corpus is empty"},
                   {"bpe_special_only.txt", "<|endoftext|>", " --special '<|endoftext|>' --merges 5 --quiet", "besides --special"},
                   {"bpe_single.txt", "a b c\n", " --merges 5 --min-count 2 --quiet", "nothing written"},
                   {"bpe_bad_utf8.txt", "ok\n\xFF\n", " --merges 5", "line 2 is not valid UTF-8"}};
    for (const auto& k : corpora) {
        m_write(m_path(k.name), k.text);
        m_cli_fails("bpe --data " + m_path(k.name) + k.flags + " --out " + dir, k.error);
    }
    CHECK(!m_exists(dir));  // none of these created the directory
    // An --out holding files this program did not write: GPT-2's own vocab.bpe, or an encoder.json alone.
    const std::string foreign = m_path("bpe_foreign");
    m_make_dir(foreign);
    m_write(foreign + "/vocab.bpe", "#version: 0.2\nh e\n");
    m_write(foreign + "/encoder.json", "{\"h\": 0}");
    m_cli_fails("bpe --data " + data + " --merges 5 --out " + foreign, "its vocab.bpe was not written by this program");
    CHECK(m_read(foreign + "/vocab.bpe") == "#version: 0.2\nh e\n");
    const std::string lone = m_path("bpe_lone");
    m_make_dir(lone);
    m_write(lone + "/encoder.json", "{\"h\": 0}");
    m_cli_fails("bpe --data " + data + " --merges 5 --out " + lone, "its vocab.bpe was not written by this program");
    CHECK(m_read(lone + "/encoder.json") == "{\"h\": 0}");
    CHECK(!m_exists(lone + "/vocab.bpe"));
    // An input inside --out with an output's name is never overwritten.
    const std::string self = m_path("bpe_self");
    m_make_dir(self);
    m_write(self + "/vocab.bpe", std::string(BPE_VOCAB_HEADER) + "\nh e\nhello there\n");
    m_cli_fails("bpe --data " + self + "/vocab.bpe --merges 5 --out " + self, "would overwrite --data");
}

TEST_CASE("bpe: a GPT trains on the learnt tokens, and eval reports bits per byte beside the loss per token") {
    const std::string dir = m_path("bpe_train");
    BpePieces p;
    bpe_count_file(p, m_text_file(), {});
    BpeLearnOptions o;
    o.merges = 30;
    bpe_write(dir, bpe_learn(p, o), {});
    TrainOptions t = m_small_train(m_path("bpe_train.safetensors"));
    t.encoder = dir + "/encoder.json", t.bpe_vocab = dir + "/vocab.bpe", t.steps = 5, t.block = 8;
    train(t);
    const m_Run e = m_run("eval --checkpoint " + m_path("bpe_train.safetensors") + " --data " + m_text_file());
    INFO("stderr: " << e.err);
    REQUIRE(e.status == 0);
    const std::size_t at = e.out.find("bits per byte of text: ");
    REQUIRE(at != std::string::npos);
    double bpb = 0, nats = 0, tokens = 0, bytes = 0;
    REQUIRE(std::sscanf(e.out.c_str() + at, "bits per byte of text: %lf (%lf nats per token x %lf tokens / %lf bytes", &bpb, &nats,
                        &tokens, &bytes) == 4);
    const Tokenizer tok = load_tokenizer("", t.encoder, t.bpe_vocab);
    CHECK(tokens == (double)tok.encode(m_read(m_text_file())).size());
    CHECK(bytes == (double)m_read(m_text_file()).size());
    CHECK(tokens < bytes / 2);  // 30 merges of a repetitive text
    CHECK(bpb == doctest::Approx(nats * tokens / bytes / std::log(2.0)).epsilon(1e-3));
}

// ================================================================================================
// Tokenizers of the released GPT-1 and BERT: BERT's normaliser and pre-tokeniser, GPT-1's BPE,
// WordPiece, tokenizer files, llm.c's token files
// ================================================================================================

TEST_CASE("BERT normaliser: control characters, white space, CJK, accents, lower case, Hangul") {
    CHECK(bert_normalize("") == "");
    // \t becomes a space, \x01 (Cc), U+200B (Cf) and U+FFFD vanish, U+3000 is a space.
    CHECK(bert_normalize("H\xC3\xA9llo\tWORLD\x01\xE2\x80\x8B!\xEF\xBF\xBD\xE3\x80\x80x") == "hello world! x");
    // Each CJK ideograph between spaces; Hiragana is not one.
    CHECK(bert_normalize("a\xE4\xB8\xAD\xE6\x96\x87\xE3\x81\x82") == "a \xE4\xB8\xAD  \xE6\x96\x87 \xE3\x81\x82");
    // Accents: precomposed (é, Ǖ twice decomposed), combining (e + U+0301), Greek with tonos, Cyrillic й -> и.
    CHECK(bert_normalize("\xC3\x89\xC7\x95 e\xCC\x81 \xCE\x86\xCE\xA3 \xD0\x99") == "eu e \xCE\xB1\xCF\x83 \xD0\xB8");
    // ø and ß have no decomposition and stay (lower-cased); İ is I + a mark, stripped before lower-casing.
    CHECK(bert_normalize("\xC3\x98\xC3\x9F\xC4\xB0") == "\xC3\xB8\xC3\x9F" "i");
    // A Hangul syllable decomposes into its jamo: 한 = U+1112 U+1161 U+11AB.
    CHECK(bert_normalize("\xED\x95\x9C") == "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");
    // The CJK compatibility ideograph U+F900 is a CJK character and decomposes to U+8C48.
    CHECK(bert_normalize("\xEF\xA4\x80") == " \xE8\xB1\x88 ");
    // Unassigned code points (Cn) go with the rest of category C: U+0378 (a gap in Greek), U+FFFF
    // (a noncharacter), U+E0080 (a gap among the tags); U+0377 next to the first is a letter and stays.
    CHECK(bert_normalize("a\xCD\xB8" "b\xEF\xBF\xBF" "c\xF3\xA0\x82\x80" "d\xCD\xB7") == "abcd\xCD\xB7");
    M_CHECK_TF_ERROR(bert_normalize("ab\xFF"), "not valid UTF-8");
}

TEST_CASE("BERT pre-tokeniser: white space dropped, every punctuation character a word of its own") {
    CHECK(bert_pretokenize("hi,there!!  a--b $5 \xE2\x80\x9Cq\xE2\x80\x9D") ==
          std::vector<std::string>{"hi", ",", "there", "!", "!", "a", "-", "-", "b", "$", "5", "\xE2\x80\x9C", "q", "\xE2\x80\x9D"});
    CHECK(bert_pretokenize("   ").empty());
    CHECK(bert_words("Don't STOP.") == std::vector<std::string>{"don", "'", "t", "stop", "."});
}

TEST_CASE("GPT-1 BPE: </w> on the last symbol, merges by rank, <unk>, accents and CJK, decode") {
    const GPT1BPE t = m_gpt1();
    CHECK(t.size() == (int)m_GPT1_SYMBOLS.size());
    CHECK(t.unk == 0);
    CHECK(t.bpe("low") == std::vector<std::string>{"low</w>"});
    CHECK(t.bpe("lower") == std::vector<std::string>{"lower</w>"});
    CHECK(t.bpe("lowest") == std::vector<std::string>{"low", "est</w>"});
    CHECK(t.bpe("o") == std::vector<std::string>{"o</w>"});
    const int low = m_gpt1_id("low</w>"), lower = m_gpt1_id("lower</w>"), low_ = m_gpt1_id("low"),
              est = m_gpt1_id("est</w>"), bang = m_gpt1_id("!</w>");
    CHECK(t.encode("LOWER Lowest!") == std::vector<int>{lower, low_, est, bang});
    CHECK(t.encode("l\xC3\xB3w") == std::vector<int>{low});  // ó loses its accent
    // ø is not in the vocabulary: <unk> in its place, no merge across it.
    CHECK(t.encode("l\xC3\xB8w") == std::vector<int>{m_gpt1_id("l"), 0, m_gpt1_id("w</w>")});
    // A CJK character is a word of its own (here unknown); "<unk>" in the text is the token itself.
    CHECK(t.encode("low\xE4\xB8\xADlow <unk>") == std::vector<int>{low, 0, low, 0});
    CHECK(t.encode("").empty());
    CHECK(t.decode({low_, est, bang, low}) == "lowest ! low");
    CHECK(t.decode({low_}) == "low");
    M_CHECK_TF_ERROR(t.decode({99}), "outside 0..20");
}

TEST_CASE("WordPiece: specials in the text, ## pieces, [UNK] for no match and for words over 100 characters") {
    const WordPiece w = make_wordpiece(m_WP_VOCAB);
    CHECK(w.size() == 20);
    CHECK(w.unk == 1);
    CHECK(w.cls == 2);
    CHECK(w.sep == 3);
    CHECK(w.mask == 4);
    CHECK(w.encode("[CLS] The capital of FRANCE is [MASK].[SEP]") == std::vector<int>{2, 5, 6, 7, 8, 9, 4, 10, 3});
    CHECK(w.encode("[mask]") == std::vector<int>{1, 1, 1});  // not the special token: [ mask ] (no "[" in the vocabulary)
    CHECK(w.wordpiece("unaffable") == std::vector<int>{11, 12, 13});
    CHECK(w.wordpiece("unaffablex") == std::vector<int>{1});  // no piece for "x": the whole word is [UNK]
    // Control and format characters vanish before the split: un\x01aff\u200Bable is one word.
    CHECK(w.encode("un\x01" "aff\xE2\x80\x8B" "able") == std::vector<int>{11, 12, 13});
    CHECK(w.encode("\xC3\x89" "COLE") == std::vector<int>{16});  // École -> ecole
    CHECK(w.encode("\xE4\xB8\xAD\xE5\x9B\xBD!") == std::vector<int>{17, 1, 19});  // 中 known, 国 not
    const std::vector<int> hundred = w.encode(std::string(100, 'a'));
    CHECK(hundred.size() == 100);
    CHECK(hundred.front() == 14);
    CHECK(hundred.back() == 15);
    CHECK(w.encode(std::string(101, 'A')) == std::vector<int>{1});
    CHECK(w.encode(" \t\n").empty());
    CHECK(w.decode({2, 11, 12, 13, 18, 5, 4}) == "[CLS] unaffable , the [MASK]");
}

TEST_CASE("tokenizer files: malformed vocabularies and merges, and a kind that does not match the files") {
    M_CHECK_TF_ERROR(make_gpt1_bpe("{\"a\": 0", "a b\n"), "");
    M_CHECK_TF_ERROR(make_gpt1_bpe("{\"a\": 0, \"b\": 0}", "a b\n"), "id 0 is given twice");
    M_CHECK_TF_ERROR(make_gpt1_bpe("{\"a\": 0, \"b\": 5}", "a b\n"), "not an integer in 0..1");
    M_CHECK_TF_ERROR(make_gpt1_bpe("{\"a\": 0, \"b</w>\": 1}", "#version: 0.2\na b</w>\n"), "line 2", "'ab</w>' is not in the encoder");
    M_CHECK_TF_ERROR(make_gpt1_bpe("{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b c\n"), "line 1 is not two symbols");
    M_CHECK_TF_ERROR(make_gpt1_bpe("{\"a\": 0}", "#version: 0.2\n"), "no merges");
    // A merge list cut short: the toy vocabulary has 7 symbols made by merges, the cut list 6.
    M_CHECK_TF_ERROR(make_gpt1_bpe(m_gpt1_encoder_json(m_GPT1_SYMBOLS), m_GPT1_MERGES.substr(0, m_GPT1_MERGES.rfind("es t</w>"))),
                     "6 merges, but the encoder has 7 symbols made by merges", "cut short");
    M_CHECK_TF_ERROR(make_wordpiece(""), "no tokens");
    M_CHECK_TF_ERROR(make_wordpiece("[CLS]\nthe\n"), "no [UNK]");
    M_CHECK_TF_ERROR(make_wordpiece("[UNK]\nthe\nthe\n"), "line 3", "given twice");
    M_CHECK_TF_ERROR(make_wordpiece("[UNK]\n\nthe\n"), "line 2 is empty");
    M_CHECK_TF_ERROR(make_wordpiece("[UNK]\nth\xFF\n"), "line 2 is not valid UTF-8");
    // The kind, recognised from the files or named: GPT-1 (</w>), GPT-2 (byte symbols), WordPiece.
    const std::string g1e = m_path("g1_encoder.json"), g1m = m_path("g1_merges.bpe"), g2e = m_path("g2_encoder.json"),
                      g2m = m_path("g2_merges.bpe"), wp = m_path("wp_vocab.txt");
    m_write(g1e, m_gpt1_encoder_json(m_GPT1_SYMBOLS)), m_write(g1m, m_GPT1_MERGES);
    m_write(g2e, "{\"a\": 0, \"\\u0120\": 1, \"\\u0120a\": 2}"), m_write(g2m, "#version: 0.2\n\xC4\xA0 a\n");
    m_write(wp, m_WP_VOCAB);
    CHECK(load_tokenizer("", g1e, g1m).kind == "gpt1-bpe");
    CHECK(load_tokenizer("", g2e, g2m).kind == "gpt2-bpe");
    CHECK(load_tokenizer("", "", wp).kind == "bert-wordpiece");
    CHECK(load_tokenizer("gpt1-bpe", g1e, g1m).encode("lowest") == std::vector<int>{m_gpt1_id("low"), m_gpt1_id("est</w>")});
    CHECK(load_tokenizer("", g2e, g2m).encode(" a") == std::vector<int>{2});
    CHECK(load_tokenizer("bert-wordpiece", "", wp).encode("the") == std::vector<int>{5});
    M_CHECK_TF_ERROR(load_tokenizer("gpt1-bpe", g2e, g2m), "these are gpt2-bpe files, not gpt1-bpe");
    M_CHECK_TF_ERROR(load_tokenizer("gpt2-bpe", g1e, g1m), "these are gpt1-bpe files, not gpt2-bpe");
    M_CHECK_TF_ERROR(load_tokenizer("bert-wordpiece", g1e, g1m), "not bert-wordpiece");
    M_CHECK_TF_ERROR(load_tokenizer("", "", g1e), "not a tokenizer this program knows");
    M_CHECK_TF_ERROR(load_tokenizer("sentencepiece", "", wp), "unknown tokenizer 'sentencepiece'");
}

TEST_CASE("token files: llm.c's .bin format, written by tokenize --out, read by train and eval as the text's ids") {
    // The format by hand: 256 int32 (20240520, 1, N, 0...), then N uint16 little-endian.
    const std::string b = token_file_bytes({1, 258, 65535});
    REQUIRE(b.size() == 1024 + 6);
    CHECK((unsigned char)b[0] == (20240520 & 0xFF));
    CHECK(b.substr(4, 8) == std::string("\x01\0\0\0\x03\0\0\0", 8));
    // This program's mark at byte 64 (llm.c's readers ignore the rest of the header): zeros around it.
    CHECK(b.substr(12, 52) == std::string(52, '\0'));
    CHECK(b.substr(64, 22) == "written by transformer");
    CHECK(b.substr(86, 1024 - 86) == std::string(1024 - 86, '\0'));
    CHECK(is_own_token_file(b));
    std::string llmc = b;  // the same file as llm.c writes it: a token file, but not ours
    llmc.replace(64, 22, std::string(22, '\0'));
    CHECK(is_token_file(llmc));
    CHECK_FALSE(is_own_token_file(llmc));
    CHECK(parse_token_file(llmc, "x") == std::vector<int>{1, 258, 65535});
    CHECK(b.substr(1024) == std::string("\x01\0\x02\x01\xFF\xFF", 6));
    CHECK(is_token_file(b));
    CHECK(parse_token_file(b, "x") == std::vector<int>{1, 258, 65535});
    M_CHECK_TF_ERROR(parse_token_file(b, "'t.bin'", 300), "'t.bin': token 2 is 65535, outside the tokenizer's 300 ids");
    CHECK_FALSE(is_token_file("hello\n"));
    M_CHECK_TF_ERROR(token_file_bytes({70000}), "70000", "uint16");
    M_CHECK_TF_ERROR(parse_token_file(b.substr(0, b.size() - 1), "'t.bin'"), "'t.bin'", "3 tokens", "1029 bytes", "cut short");
    M_CHECK_TF_ERROR(parse_token_file(b.substr(0, 100), "'t.bin'"), "header is cut short");
    std::string neg = b;
    neg[11] = '\xFF';  // the count's high byte: negative
    M_CHECK_TF_ERROR(parse_token_file(neg, "'t.bin'"), "token count is negative");
    std::string v2 = b;
    v2[4] = 2;
    M_CHECK_TF_ERROR(parse_token_file(v2, "'t.bin'"), "version 2");
    // The CLI: tokenize --out, then train and eval on the .bin give what the text gives.
    const std::string enc = m_path("tf_enc.json"), merges = m_path("tf_merges.bpe"), text = m_path("tf.txt"), bin = m_path("tf.bin");
    m11_write_bpe(enc, merges);
    std::string t;
    for (int k = 0; k < 60; k++) t += k % 2 ? "the cat and the hat\n" : "then the other\n";
    m_write(text, t);
    const std::string tok = " --encoder " + enc + " --vocab " + merges;
    const m_Run w = m_run("tokenize" + tok + " --file " + text + " --out " + bin);
    INFO(w.out << w.err);
    REQUIRE(w.status == 0);
    CHECK(parse_token_file(m_read(bin), "bin") == load_bpe(enc, merges).encode(t));
    auto trained = [&](const std::string& data, const std::string& out) {
        TrainOptions o = m_small_train(m_path(out));
        o.data = data, o.encoder = enc, o.bpe_vocab = merges, o.steps = 5, o.block = 8, o.dropout = 0;
        return train(o).train_losses;
    };
    CHECK(trained(bin, "tf_bin.safetensors") == trained(text, "tf_text.safetensors"));  // the same ids, the same steps
    const m_Run e1 = m_run("eval --checkpoint " + m_path("tf_text.safetensors") + " --data " + text);
    const m_Run e2 = m_run("eval --checkpoint " + m_path("tf_text.safetensors") + " --data " + bin);
    CHECK(e1.status == 0);
    CHECK(e2.status == 0);
    const std::size_t loss1 = e1.out.find(": mean loss "), loss2 = e2.out.find(": mean loss ");  // after the data's path
    REQUIRE(loss1 != std::string::npos);
    REQUIRE(loss2 != std::string::npos);
    CHECK(e1.out.substr(loss1) == e2.out.substr(loss2));  // the same loss over the same count
    // Progress on standard error at every tenth of the windows, its last mean the final loss's
    // neighbour; the final lines in nats per token and bits per byte.
    const long long windows = (load_bpe(enc, merges).encode(t).size() - 1 + 7) / 8;
    CAPTURE(e1.err);
    if (windows >= 10) {
        CHECK(m_contains(e1.err, "eval: "));
        CHECK(m_contains(e1.err, " of " + std::to_string(windows) + " windows (10%), mean loss so far "));
        CHECK(m_contains(e1.err, " of " + std::to_string(windows) + " windows (90%), mean loss so far "));
        CHECK_FALSE(m_contains(e1.err, "(100%)"));
    }
    CHECK(m_contains(e1.out, "bits per byte of text: "));
    // Errors: no tokenizer, an id the tokenizer lacks, --out over a file that is not a token file, --out with --ids.
    m_cli_fails("train --data " + bin + " --steps 1 --out " + m_path("tf_x.safetensors"), "is a token file (llm.c's format, token ids, not text): give the tokenizer its ids belong to, --encoder");
    m_write(m_path("tf_big.bin"), token_file_bytes(std::vector<int>(200, 300)));
    m_cli_fails("train --data " + m_path("tf_big.bin") + tok + " --steps 1 --out " + m_path("tf_x.safetensors"), "token 0 is 300");
    m_cli_fails("eval --checkpoint " + m_path("tf_text.safetensors") + " --data " + m_path("tf_big.bin"), "token 0 is 300");
    m_cli_fails("tokenize" + tok + " --file " + text + " --out " + text, "would overwrite");
    m_write(m_path("tf_notes.txt"), "keep me\n");
    m_cli_fails("tokenize" + tok + " --text hi --out " + m_path("tf_notes.txt"), "not a token file");
    m_cli_fails("tokenize" + tok + " --ids 258 --out " + bin, "not of --ids");
    CHECK(!m_exists(m_path("tf_x.safetensors")));
}

// ================================================================================================
// The tokenizer of a checkpoint: the commands with released and learnt tokenizers; the memory
// of a training run
// ================================================================================================
TEST_CASE("CLI: sample and eval with GPT-2's tokenizer on imported GPT-2 weights") {
    m_write(m_path("enc.json"), m_encoder_json({"he", "ll", "hell", m_G + "hell"}));
    m_write(m_path("merges.bpe"), m_vocab_bpe({"h e", "l l", "he ll", m_G + " hell"}));
    const Config c = m_hf_config(260);  // as many ids as the tokenizer
    const Params<float> p = m_model<float>(c, 73, 0.5);
    REQUIRE(m_make_dir(m_path("hf_cli")));
    m_write(m_path("hf_cli/config.json"), "{\"n_head\": 3}");
    m_write_hf(m_path("hf_cli/model.safetensors"), m_hf_tensors(c, p));
    const std::string model = " --checkpoint " + m_path("hf_cli/model.safetensors");
    const std::string tok = " --encoder " + m_path("enc.json") + " --vocab " + m_path("merges.bpe");
    const m_Run r = m_run("sample" + model + tok + " --prompt 'hello hello' --tokens 5 --temperature 0");
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(r.out.rfind("hello hello", 0) == 0);
    // The greedy continuation is the one generate gives for the prompt's ids 258, 111, 259, 111.
    Rng unused(0);
    const BPE bpe = m_small_bpe();
    const std::vector<int> ids = generate(c, p, std::vector<int>{258, 111, 259, 111}, 5, 0.0, 0, unused);
    CHECK(r.out == bpe.decode(ids) + "\n");
    m_write(m_path("hf_cli/text.txt"), "hello hello hello");
    const m_Run e = m_run("eval" + model + tok + " --data " + m_path("hf_cli/text.txt"));
    CHECK(e.status == 0);
    CHECK(m_contains(e.out, "over 5 predicted tokens"));  // 6 ids: hell o Ġhell o Ġhell o
    m_cli_fails("sample" + model + " --encoder " + m_path("enc.json") + " --prompt hi", "--encoder and --vocab");
    m_cli_fails("sample" + model + " --prompt hi", "no character vocabulary");
    const Config small = m_hf_config(100);
    m_write_hf(m_path("hf_cli/model.safetensors"), m_hf_tensors(small, m_model<float>(small, 74, 0.5)));
    m_cli_fails("sample" + model + tok + " --prompt hi", "260 tokens but the model's V = 100");
}

TEST_CASE("CLI: released RoBERTa files with their tokenizer: fill, eval, tokenize, finetune and predict") {
    const std::string dir = m_mkdir("cli_roberta");
    const auto [c, p] = m_hf_model(m_roberta_hf_config(), 1257);
    m_write(dir + "config.json", "{\"num_attention_heads\": 2}");
    m_write(dir + "vocab.json", m_encoder_json(m_RB_MERGED));
    m_write(dir + "merges.txt", m_vocab_bpe(m_RB_MERGES));
    m_write_raw(dir + "model.safetensors", m_roberta_hf(c, p, Tensor<float>(1, c.H, 0.f), "roberta."));
    const std::string model = " --checkpoint " + dir + "model.safetensors";
    const std::string tok = " --encoder " + dir + "vocab.json --vocab " + dir + "merges.txt";
    CHECK(m_run("tokenize" + tok + " --text 'hell <mask>.'").out == "258,264,46\n");
    const m_Run f = m_run("fill" + model + tok + " --text 'hell <mask>.' --top 2");
    INFO(f.out << f.err);
    REQUIRE(f.status == 0);
    Batch b;  // <s> hell <mask> . </s>
    b.n = 5, b.tokens = {260, 258, 264, '.', 262};
    const Tensor<float> Z = model_forward(c, p, b);
    std::vector<float> y(c.V);
    softmax_row(Z.row(2), y.data(), c.V);
    const int best = (int)(std::max_element(y.begin(), y.end()) - y.begin());
    char line[96];
    const std::string label = token_label(make_tokenizer("roberta-bpe", m_encoder_json(m_RB_MERGED), m_vocab_bpe(m_RB_MERGES), "t").decode({best}));
    std::snprintf(line, sizeof line, "<mask> at token 3: %s %.3g,", label.c_str(), y[best]);
    CHECK(m_contains(f.out, line));
    m_cli_fails("fill" + model + tok + " --text 'hell'", "no <mask>");
    m_write(dir + "text.txt", "hell hell. hell\n");
    const m_Run e = m_run("eval" + model + tok + " --data " + dir + "text.txt");
    INFO(e.out << e.err);
    CHECK(e.status == 0);
    CHECK(m_contains(e.out, "each as <s> window </s>"));
    std::string train;
    for (int k = 0; k < 8; k++) train += "a\thell hell\nb\the. he\n";
    m_write(dir + "train.tsv", train);
    const m_Run r = m_run("finetune" + model + tok + " --train " + dir + "train.tsv --val " + dir + "train.tsv --out " + dir +
                          "ft.safetensors --task classify --steps 60 --batch 8 --lr 1e-2 --lambda 0 --dropout 0 --quiet");
    INFO(r.out << r.err);
    REQUIRE(r.status == 0);
    LoadedModel lm = load_model(dir + "ft.safetensors", {"adam."});
    CHECK(lm.file.metadata.at("tokenizer") == "roberta-bpe");
    CHECK(lm.config.variant == Variant::roberta);
    const m_Run pr = m_run("predict --checkpoint " + dir + "ft.safetensors --data " + dir + "train.tsv");
    CHECK(pr.status == 0);
    CHECK(m_contains(pr.err, "accuracy: 100.0% (16 of 16)"));
    // A RobertaModel file (no lm_head) still fills, and says what its logits are.
    std::vector<m_RawTensor> bare;
    for (const auto& x : m_roberta_hf(c, p, Tensor<float>(1, c.H, 0.f), ""))
        if (x.name.rfind("lm_head.", 0) != 0) bare.push_back(x);
    REQUIRE(m_make_dir(dir + "bare"));
    m_write(dir + "bare/config.json", "{\"num_attention_heads\": 2}");
    m_write(dir + "bare/vocab.json", m_encoder_json(m_RB_MERGED));
    m_write_raw(dir + "bare/model.safetensors", bare);
    const m_Run fb = m_run("fill --checkpoint " + dir + "bare/model.safetensors" + tok + " --text 'hell <mask>.'");
    CHECK(fb.status == 0);
    CHECK(m_contains(fb.err, "has no masked-LM head"));
    CHECK_FALSE(m_contains(f.err, "has no masked-LM head"));
    // Trained on from that file, the de-embedding is the model's own: no note.
    m_write(dir + "bare_text.txt", [] { std::string t; for (int k = 0; k < 200; k++) t += "hell he. "; return t; }());
    const m_Run tr = m_run("train --init-from " + dir + "bare/model.safetensors" + tok + " --data " + dir + "bare_text.txt --steps 2 --batch 2 --quiet --out " +
                           dir + "bare_trained.safetensors");
    INFO(tr.out << tr.err);
    REQUIRE(tr.status == 0);
    const m_Run ft = m_run("fill --checkpoint " + dir + "bare_trained.safetensors --text 'hell <mask>.'");
    CHECK(ft.status == 0);
    CHECK_FALSE(m_contains(ft.err, "has no masked-LM head"));
    // RoBERTa's tokenizer goes with roberta models only.
    const Config g = preset("tiny-gpt2");
    Config g265 = g;
    g265.V = 265;
    Params<float> gp = m_model<float>(g265, 1258, 0.5);
    save_model(dir + "gpt.safetensors", g265, gp);
    m_cli_fails("sample --checkpoint " + dir + "gpt.safetensors" + tok + " --prompt hell", "the tokenizer is roberta-bpe but");
}

TEST_CASE("train: BERT on WordPiece and RoBERTa on its BPE, [CLS] window [SEP], from scratch and from released weights" * doctest::test_suite("runs (long)") * doctest::skip()) {
    const std::string dir = m_mkdir("train_subword");
    m_write(dir + "vocab.txt", m_WP_VOCAB);
    std::string text;
    for (int k = 0; k < 120; k++) text += k % 3 ? "the capital of france is a ecole. " : "un affable , the capital ! ";
    m_write(dir + "text.txt", text);
    const Tokenizer wp = load_tokenizer("", "", dir + "vocab.txt");
    const std::vector<int> ids = wp.encode(text);
    TrainOptions o = m_small_train(dir + "bert.safetensors");
    o.model = "bert", o.data = dir + "text.txt", o.bpe_vocab = dir + "vocab.txt";
    o.dropout = 0, o.steps = 1500, o.layers = 2, o.embd = 32, o.lr = 3e-3, o.min_lr = 1e-4, o.warmup = 20, o.eval_every = 1500;
    const TrainResult r = train(o);
    double first = 0, last = 0;
    for (int s = 0; s < 10; s++) first += r.train_losses[s] / 10, last += r.train_losses[r.train_losses.size() - 1 - s] / 10;
    CHECK(last < 0.5 * first);  // the masked-LM loss goes down
    LoadedModel lm = load_model(dir + "bert.safetensors", {"adam."});
    const Config& c = lm.config;
    CHECK(c.variant == Variant::bert);
    CHECK(c.V == 20);  // the vocabulary's size: [CLS], [SEP], [MASK] are in it
    CHECK((c.cls_id == 2 && c.sep_id == 3 && c.mask_id == 4));
    CHECK(lm.file.metadata.at("tokenizer") == "bert-wordpiece");
    CHECK(lm.file.metadata.at("tokenizer.vocab_txt") == m_WP_VOCAB);
    // The whole-split loss is read as [CLS] window [SEP] (windows of n - 2 = 14 tokens), as eval reads it.
    const std::vector<int> val(ids.begin() + ids.size() * 9 / 10, ids.end());
    CHECK(r.val_loss_split == doctest::Approx(corpus_loss(c, lm.params, val, 1234, nullptr, 16, true)).epsilon(1e-9));
    CHECK(r.val_loss_split != doctest::Approx(corpus_loss(c, lm.params, val, 1234, nullptr, 16, false)).epsilon(1e-6));
    const m_Run e = m_run("eval --checkpoint " + dir + "bert.safetensors --data " + dir + "text.txt");
    CHECK(e.status == 0);
    CHECK(m_contains(e.out, "(windows of 14 tokens, each as [CLS] window [SEP])"));
    const m_Run f = m_run("fill --checkpoint " + dir + "bert.safetensors --text 'the capital of [MASK] is a ecole.'");
    INFO(f.out << f.err);
    CHECK(f.status == 0);
    CHECK(m_contains(f.out, "[MASK] at token 5: france "));  // learnt: "france" after "the capital of"
    // From released BERT weights (Hugging Face's layout, vocab.txt beside them): continued pre-training.
    Config b = m_bert_hf_config();
    b.V = 20, b.cls_id = 2, b.sep_id = 3, b.mask_id = 4;
    const Params<float> bp = m_model<float>(b, 1262, 0.5);
    REQUIRE(m_make_dir(dir + "hf"));
    m_write(dir + "hf/config.json", "{\"num_attention_heads\": 2}");
    m_write(dir + "hf/vocab.txt", m_WP_VOCAB);
    m_write_raw(dir + "hf/model.safetensors", m_bert_hf(b, bp, false));
    TrainOptions i = m_small_train(dir + "bert_ft.safetensors");
    i.model = "", i.layers = 0, i.heads = 0, i.embd = 0, i.block = 0;
    i.data = dir + "text.txt", i.init_from = dir + "hf/model.safetensors", i.bpe_vocab = dir + "hf/vocab.txt";
    i.dropout = 0, i.steps = 40, i.lr = 3e-3, i.min_lr = 3e-4;
    const TrainResult ri = train(i);
    LoadedModel li = load_model(dir + "bert_ft.safetensors", {"adam."});
    CHECK(li.config.variant == Variant::bert);
    CHECK((li.config.emb_ln && li.config.mlm_head && li.config.pooler && li.config.attn_bias));
    CHECK(li.file.metadata.at("tokenizer") == "bert-wordpiece");
    const std::vector<int> val_ids(ids.begin() + ids.size() * 9 / 10, ids.end());
    CHECK(corpus_loss(li.config, li.params, val_ids, 7, nullptr, 0, true) < 0.8 * corpus_loss(b, bp, val_ids, 7, nullptr, 0, true));
    CHECK(ri.val_loss_before > ri.val_loss);
    // Without the tokenizer, or with one that is not the model's, it stops before training.
    i.bpe_vocab = "";
    M_CHECK_TF_ERROR(train(i), "records no tokenizer", "--vocab vocab.txt (BERT)");
    std::string swapped = m_WP_VOCAB;  // the same 20 tokens, [CLS] and [SEP] swapped
    swapped.replace(swapped.find("[CLS]"), 5, "[XXX]"), swapped.replace(swapped.find("[SEP]"), 5, "[CLS]"), swapped.replace(swapped.find("[XXX]"), 5, "[SEP]");
    m_write(dir + "swapped.txt", swapped);
    i.bpe_vocab = dir + "swapped.txt";
    M_CHECK_TF_ERROR(train(i), "the tokenizer's [CLS], [SEP], [MASK] are ids 3, 2, 4 but the model's are 2, 3, 4");
    TrainOptions g = o;
    g.model = "gpt2";
    M_CHECK_TF_ERROR(train(g), "bert-wordpiece, which goes with bert and roberta");
    g = o, g.objective = "xlnet", g.model = "roberta";
    M_CHECK_TF_ERROR(train(g), "xlnet");
    // A released GPT-1 file with GPT-1's BPE: continued next-token training.
    Config g1 = m_gpt1_hf_config();
    g1.V = (int)m_GPT1_SYMBOLS.size();
    REQUIRE(m_make_dir(dir + "gpt1"));
    m_write(dir + "gpt1/config.json", "{\"n_head\": 3}");
    m_write_raw(dir + "gpt1/model.safetensors", m_gpt1_hf(g1, m_model<float>(g1, 1263, 0.5), ""));
    m_write(dir + "enc.json", m_gpt1_encoder_json(m_GPT1_SYMBOLS));
    m_write(dir + "merges.bpe", m_GPT1_MERGES);
    m_write(dir + "low.txt", [] { std::string t; for (int k = 0; k < 100; k++) t += k % 2 ? "low lower lowest " : "lowest low "; return t; }());
    TrainOptions t1 = i;
    t1.init_from = dir + "gpt1/model.safetensors", t1.encoder = dir + "enc.json", t1.bpe_vocab = dir + "merges.bpe";
    t1.data = dir + "low.txt", t1.out = dir + "gpt1_ft.safetensors";
    const TrainResult r1 = train(t1);
    CHECK(r1.val_loss < 0.5 * r1.val_loss_before);
    CHECK(load_model(t1.out, {"adam."}).file.metadata.at("tokenizer") == "gpt1-bpe");
    // RoBERTa from scratch on its BPE: <s> window </s>.
    m_write(dir + "vocab.json", m_encoder_json(m_RB_MERGED));
    m_write(dir + "merges.txt", m_vocab_bpe(m_RB_MERGES));
    m_write(dir + "hell.txt", [] { std::string t; for (int k = 0; k < 200; k++) t += k % 2 ? "hell he. " : "he hell! "; return t; }());
    TrainOptions rb = m_small_train(dir + "roberta.safetensors");
    rb.model = "roberta", rb.data = dir + "hell.txt", rb.encoder = dir + "vocab.json", rb.bpe_vocab = dir + "merges.txt";
    rb.dropout = 0, rb.steps = 60;
    const TrainResult rr = train(rb);
    double a = 0, z = 0;
    for (int s = 0; s < 10; s++) a += rr.train_losses[s] / 10, z += rr.train_losses[rr.train_losses.size() - 1 - s] / 10;
    CHECK(z < 0.5 * a);
    LoadedModel lr = load_model(dir + "roberta.safetensors", {"adam."});
    CHECK(lr.config.variant == Variant::roberta);
    CHECK((lr.config.V == 265 && lr.config.cls_id == 260 && lr.config.sep_id == 262 && lr.config.mask_id == 264));
    CHECK(lr.file.metadata.at("tokenizer") == "roberta-bpe");
    const m_Run re = m_run("eval --checkpoint " + dir + "roberta.safetensors --data " + dir + "hell.txt");
    CHECK(m_contains(re.out, "each as <s> window </s>"));
}

TEST_CASE("CLI: GPT-1 and BERT files with their tokenizers: params, tokenize, sample, eval, fill, and mismatches") {
    const std::string dir = m_mkdir("cli_released");
    // GPT-1: V = 21, the hand-made BPE above.
    Config g = m_gpt1_hf_config();
    g.V = (int)m_GPT1_SYMBOLS.size();
    const Params<float> gp = m_model<float>(g, 1260, 0.5);
    REQUIRE(m_make_dir(dir + "gpt1"));
    REQUIRE(m_make_dir(dir + "bert"));
    m_write(dir + "gpt1/config.json", "{\"afn\": \"gelu\", \"n_head\": 3}");
    m_write_raw(dir + "gpt1/model.safetensors", m_gpt1_hf(g, gp, "transformer."));
    m_write(dir + "enc.json", m_gpt1_encoder_json(m_GPT1_SYMBOLS));
    m_write(dir + "merges.bpe", m_GPT1_MERGES);
    const std::string gpt1 = " --checkpoint " + dir + "gpt1/model.safetensors";
    const std::string gtok = " --encoder " + dir + "enc.json --vocab " + dir + "merges.bpe";
    const m_Run pr = m_run("params" + gpt1);
    INFO(pr.out << pr.err);
    CHECK(pr.status == 0);
    const ParamCount k = count_params(g);
    CHECK(m_contains(pr.out, std::to_string(k.seed_lambda)));
    CHECK(m_contains(pr.out, "attention biases L*(A*3*D + H)                 96"));
    CHECK(m_contains(pr.out, "(+96 against the formulas' lambda)"));
    CHECK(m_run("tokenize" + gtok + " --text 'Lowest LOWER'").out == "13,18,16\n");
    CHECK(m_run("tokenize" + gtok + " --ids 13,18,16").out == "lowest lower");
    const m_Run s = m_run("sample" + gpt1 + gtok + " --prompt 'low lower' --tokens 4 --temperature 0");
    INFO(s.out << s.err);
    CHECK(s.status == 0);
    Rng unused(0);
    const std::vector<int> ids = generate(g, gp, std::vector<int>{14, 16}, 4, 0.0, 0, unused);
    CHECK(s.out == m_gpt1().decode(ids) + "\n");
    m_write(dir + "text.txt", "low lower lowest low lower");
    const m_Run e = m_run("eval" + gpt1 + gtok + " --tokenizer gpt1-bpe --data " + dir + "text.txt");
    CHECK(e.status == 0);
    CHECK(m_contains(e.out, "over 5 predicted tokens"));  // low lower low est low lower: 6 ids
    // BERT: V = 20, the hand-made WordPiece vocabulary above (beside the file: its special ids).
    Config b = m_bert_hf_config();
    b.V = 20, b.cls_id = 2, b.sep_id = 3, b.mask_id = 4;
    const Params<float> bp = m_model<float>(b, 1261, 0.5);
    m_write(dir + "bert/config.json", "{\"num_attention_heads\": 2}");
    m_write(dir + "bert/vocab.txt", m_WP_VOCAB);
    m_write_raw(dir + "bert/model.safetensors", m_bert_hf(b, bp, true));
    const std::string bert = " --checkpoint " + dir + "bert/model.safetensors", btok = " --vocab " + dir + "bert/vocab.txt";
    const m_Run f = m_run("fill" + bert + btok + " --text 'The capital of France is [MASK].' --top 3");
    INFO(f.out << f.err);
    CHECK(f.status == 0);
    // The same numbers from the library: [CLS] the capital of france is [MASK] . [SEP]
    Batch batch;
    batch.tokens = {2, 5, 6, 7, 8, 9, 4, 10, 3}, batch.n = 9;
    const Tensor<float> Z = model_forward(b, bp, batch);
    std::vector<float> y(b.V);
    softmax_row(Z.row(6), y.data(), b.V);
    const int best = (int)(std::max_element(y.begin(), y.end()) - y.begin());
    char line[64];
    std::snprintf(line, sizeof line, "[MASK] at token 7: %s %.3g,", make_wordpiece(m_WP_VOCAB).tokens[best].c_str(), y[best]);
    CHECK(m_contains(f.out, line));
    CHECK(std::count(f.out.begin(), f.out.end(), ',') == 2);  // three candidates
    CHECK(m_run("tokenize" + btok + " --text 'unaffable, [MASK]'").out == "11,12,13,18,4\n");
    // Mismatches: the wrong kind for the model, the wrong size, a named kind the files are not.
    m_cli_fails("fill" + bert + gtok + " --text '[MASK]'", "21 tokens but the model's V = 20");
    m_cli_fails("sample" + gpt1 + " --tokenizer bert-wordpiece" + gtok + " --prompt low", "these are gpt1-bpe files, not bert-wordpiece");
    m_write(dir + "wp21.txt", m_WP_VOCAB + "extra\n");
    m_cli_fails("sample" + gpt1 + " --vocab " + dir + "wp21.txt --prompt low", "the tokenizer is bert-wordpiece but");
    m_cli_fails("fill" + bert + btok + " --text 'no mask here'", "no [MASK]");
    m_cli_fails("fill" + bert + btok + " --text '[MASK]' --top 0", "--top");
    m_cli_fails("params --preset gpt1" + gpt1, "exactly one of --preset and --checkpoint");
    m_write(dir + "bad_vocab.txt", "[UNK]\n\n");
    m_cli_fails("tokenize --vocab " + dir + "bad_vocab.txt --text hi", "line 2 is empty");
}

TEST_CASE("CLI: finetune and predict from released GPT-1 and BERT files with their tokenizers") {
    const std::string dir = m_mkdir("cli_released_ft");
    REQUIRE(m_make_dir(dir + "gpt1"));
    REQUIRE(m_make_dir(dir + "bert"));
    Config g = m_gpt1_hf_config();
    g.V = (int)m_GPT1_SYMBOLS.size();
    m_write(dir + "gpt1/config.json", "{\"n_head\": 3}");
    m_write_raw(dir + "gpt1/model.safetensors", m_gpt1_hf(g, m_model<float>(g, 1270, 0.5), ""));
    m_write(dir + "enc.json", m_gpt1_encoder_json(m_GPT1_SYMBOLS));
    m_write(dir + "merges.bpe", m_GPT1_MERGES);
    Config b = m_bert_hf_config();
    b.V = 20, b.cls_id = 2, b.sep_id = 3, b.mask_id = 4;
    m_write(dir + "bert/config.json", "{\"num_attention_heads\": 2}");
    m_write(dir + "bert/vocab.txt", m_WP_VOCAB);
    m_write_raw(dir + "bert/model.safetensors", m_bert_hf(b, m_model<float>(b, 1271, 0.5), false));
    std::string train_gpt1, train_bert;
    for (int k = 0; k < 8; k++) train_gpt1 += "a\tlow lower low\nb\tlowest est\n", train_bert += "a\tthe capital\nb\tunaffable france\n";
    m_write(dir + "g_train.tsv", train_gpt1), m_write(dir + "b_train.tsv", train_bert);
    // eval reads released BERT as it was pre-trained: [CLS] window [SEP].
    m_write(dir + "b_text.txt", "the capital , unaffable france\n");
    const m_Run be = m_run("eval --checkpoint " + dir + "bert/model.safetensors --vocab " + dir + "bert/vocab.txt --data " + dir + "b_text.txt");
    CHECK(be.status == 0);
    CHECK(m_contains(be.out, "each as [CLS] window [SEP]"));
    const std::string common = " --task classify --steps 60 --batch 8 --lr 1e-2 --lambda 0 --dropout 0 --quiet";
    const m_Run r = m_run("finetune --checkpoint " + dir + "gpt1/model.safetensors --encoder " + dir + "enc.json --vocab " + dir +
                          "merges.bpe --train " + dir + "g_train.tsv --val " + dir + "g_train.tsv --out " + dir + "g_ft.safetensors" + common);
    INFO(r.out << r.err);
    REQUIRE(r.status == 0);
    LoadedModel lm = load_model(dir + "g_ft.safetensors", {"adam."});
    CHECK(lm.file.metadata.at("tokenizer") == "gpt1-bpe");
    CHECK(lm.config.V == g.V + 3);  // start, delimiter, extract
    m_write(dir + "g_test.txt", "low lower low\nlowest est\n");
    const m_Run p = m_run("predict --checkpoint " + dir + "g_ft.safetensors --data " + dir + "g_test.txt");
    INFO(p.out << p.err);
    CHECK(p.status == 0);
    CHECK(p.out == "a\nb\n");
    const m_Run rb = m_run("finetune --checkpoint " + dir + "bert/model.safetensors --vocab " + dir + "bert/vocab.txt --train " + dir +
                           "b_train.tsv --val " + dir + "b_train.tsv --out " + dir + "b_ft.safetensors" + common);
    INFO(rb.out << rb.err);
    REQUIRE(rb.status == 0);
    LoadedModel lb = load_model(dir + "b_ft.safetensors", {"adam."});
    CHECK(lb.file.metadata.at("tokenizer") == "bert-wordpiece");
    CHECK(lb.config.mlm_head);
    CHECK(lb.config.emb_ln);
    const m_Run pb = m_run("predict --checkpoint " + dir + "b_ft.safetensors --data " + dir + "b_train.tsv");
    CHECK(pb.status == 0);
    CHECK(m_contains(pb.err, "accuracy: 100.0% (16 of 16); always answering 'a': 50.0%\n"));  // 8 a, 8 b: the first wins a tie
    // The tokenizer must fit the model.
    m_cli_fails("finetune --checkpoint " + dir + "bert/model.safetensors --encoder " + dir + "enc.json --vocab " + dir +
                    "merges.bpe --train " + dir + "b_train.tsv --val " + dir + "b_train.tsv --out " + dir + "x.safetensors" + common,
                "21 tokens but the model's V = 20");
    m_cli_fails("finetune --checkpoint " + dir + "gpt1/model.safetensors --train " + dir + "g_train.tsv --val " + dir +
                    "g_train.tsv --out " + dir + "x.safetensors" + common,
                "give its tokenizer");
}

TEST_CASE("BPE training: a hand-made vocabulary end to end; sample, eval and resume use the recorded tokenizer") {
    const std::string enc = m_path("i11_enc.json"), merges = m_path("i11_merges.bpe"), text_path = m_path("i11_bpe.txt");
    m11_write_bpe(enc, merges);
    std::string text;
    for (int k = 0; k < 120; k++) text += k % 2 ? "the cat and the hat\n" : "then the other\n";
    m_write(text_path, text);
    const BPE bpe = load_bpe(enc, merges);
    REQUIRE(bpe.size() == 260);
    CHECK(bpe.encode(" the") == std::vector<int>{258});
    const std::string out = m_path("i11_bpe.safetensors");
    TrainOptions o = m_small_train(out);
    o.data = text_path, o.encoder = enc, o.bpe_vocab = merges;
    o.steps = 400, o.eval_steps = 4, o.block = 8, o.dropout = 0;
    const TrainResult r = train(o);
    CHECK(r.val_loss < 0.5);  // from log(260) = 5.56: the two alternating lines are learnt
    CHECK(r.train_losses.front() > 5.0);
    LoadedModel lm = load_model(out, {"adam."});
    CHECK(lm.config.V == 260);
    const auto& md = lm.file.metadata;
    CHECK(md.at("tokenizer") == "gpt2-bpe");
    CHECK(md.at("tokenizer.encoder_json") == m_read(enc));
    CHECK(md.at("tokenizer.vocab_bpe") == m_read(merges));
    CHECK(!md.count("vocab"));
    const Tokenizer t = tokenizer_of(md, out);
    CHECK(t.kind == "gpt2-bpe");
    CHECK(t.encode(text, "text") == bpe.encode(text));
    CHECK(encode_with_progress(t, text, "text", false) == bpe.encode(text));
    // No tokenizer flags: greedy continuation of the learnt lines, and the loss of the text.
    const m_Run s = m_run("sample --checkpoint " + out + " --prompt 'the cat' --tokens 12 --temperature 0");
    INFO("stderr: " << s.err);
    CHECK(s.status == 0);
    CHECK(s.out.rfind("the cat and the hat\n", 0) == 0);
    const m_Run e = m_run("eval --checkpoint " + out + " --data " + text_path);
    INFO("stderr: " << e.err);
    CHECK(e.status == 0);
    CHECK(m_contains(e.out, "predicted tokens"));
    // Exported, the tokenizer goes along: GPT2Tokenizer's vocab.json and merges.txt, and the
    // metadata, so the exported file samples without flags too.
    const std::string dir = m_path("i11_bpe_hf");
    const m_Run x = m_run("export --checkpoint " + out + " --out " + dir);
    INFO("stderr: " << x.err);
    CHECK(x.status == 0);
    CHECK(m_read(dir + "/vocab.json") == m_read(enc));
    CHECK(m_read(dir + "/merges.txt") == m_read(merges));
    CHECK(parse_json(m_read(dir + "/config.json")).get("eos_token_id")->num == 259);
    const m_Run s2 = m_run("sample --checkpoint " + dir + "/model.safetensors --prompt 'the cat' --tokens 12 --temperature 0");
    INFO("stderr: " << s2.err);
    CHECK(s2.status == 0);
    CHECK(s2.out == s.out);
    // Resume continues with the recorded tokenizer; the flags are refused there.
    const m_Run rs = m_run("train --resume " + out + " --steps 402 --quiet");
    INFO("stderr: " << rs.err);
    CHECK(rs.status == 0);
    CHECK(load_model(out, {"adam."}).file.metadata.at("train.step") == "402");
    m_cli_fails("train --resume " + out + " --steps 404 --encoder " + enc + " --vocab " + merges, "cannot change a resumed run");
    // Damaged records and mismatched flags are errors.
    std::map<std::string, std::string> bad = md;
    bad["tokenizer"] = "sentencepiece";
    M_CHECK_TF_ERROR(tokenizer_of(bad, "x"), "sentencepiece");
    bad = md, bad.erase("tokenizer.vocab_bpe");
    M_CHECK_TF_ERROR(tokenizer_of(bad, "x"), "tokenizer.vocab_bpe");
    TrainOptions b = o;
    b.model = "bert";
    M_CHECK_TF_ERROR(train(b), "gpt, gpt2 and gpt3");
    b = o, b.bpe_vocab = "";
    M_CHECK_TF_ERROR(train(b), "--encoder and --vocab go together");
    b = o, b.line_windows = true;
    M_CHECK_TF_ERROR(train(b), "--line-windows");
}

TEST_CASE("train: prints the memory of the model, its gradients and AdamW at the start") {
    const Config c = preset("gpt2-124m");
    const TrainMemory m = train_memory(c, 4, 64);
    const double floats = (double)count_params(c).actual;
    CHECK(m.params == 4 * floats);
    CHECK(m.grads == 4 * floats);
    CHECK(m.adam == 8 * floats);
    CHECK(m.activations > 4.0 * 4 * 64 * 2 * c.V);        // at least the logits and their gradient
    CHECK(m.params + m.grads + m.adam + m.activations < 3.5e9);  // GPT-2 124M at B=4, n=64: a few GB
    const TrainMemory mb = train_memory(preset("bert-base"), 4, 64);  // the masked LM's logits: 15% of the rows
    CHECK(mb.activations - 0.15 * 4 * 4 * 64 * 2 * 30522 == doctest::Approx(m.activations - 4.0 * 4 * 64 * 2 * c.V));
    const m_Run r = m_run("train --data " + m_text_file() + " --layers 1 --heads 2 --embd 16 --block 16 --steps 2 --batch 2 --out " +
                          m_path("i11_mem.safetensors"));
    INFO("stderr: " << r.err);
    CHECK(r.status == 0);
    CHECK(m_contains(r.out, "memory: parameters"));
    CHECK(m_contains(r.out, "AdamW m and v"));
    CHECK(m_contains(r.out, "peak memory"));
}
TEST_SUITE_END();

// ================================================================================================
// Checkpoints
// ================================================================================================
TEST_SUITE_BEGIN("model files");
TEST_CASE("checkpoint: save_model / load_model round trip bit for bit for every tiny variant") {
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        const Config c = preset(name);
        Params<float> p = m_model<float>(c, 31, 0.5);
        const std::string path = m_path("rt_" + name + ".safetensors");
        save_model(path, c, p, {{"note", "hello \"world\"\n\\"}});
        CHECK_FALSE(m_exists(path + ".tmp"));  // atomic write: the temporary was renamed
        LoadedModel lm = load_model(path);
        CHECK(lm.config.variant == c.variant);
        CHECK(lm.config.V == c.V);
        CHECK(lm.config.activation == c.activation);
        CHECK(lm.config.eps == c.eps);
        CHECK(lm.config.st_window == c.st_window);
        CHECK(lm.config.mask_id == c.mask_id);
        CHECK(m_params_bits_equal(c, p, lm.params));
        CHECK(lm.file.metadata["note"] == "hello \"world\"\n\\");
        CHECK(lm.file.tensors.empty());
        // Overwriting an existing checkpoint replaces it.
        Params<float> p2 = m_model<float>(c, 32, 0.5);
        save_model(path, c, p2);
        LoadedModel lm2 = load_model(path);
        CHECK(m_params_bits_equal(c, p2, lm2.params));
        CHECK_FALSE(m_exists(path + ".tmp"));
    }
}

TEST_CASE("checkpoint: config_metadata round trip for every preset") {
    for (const std::string& name : preset_names()) {
        CAPTURE(name);
        const Config c = preset(name);
        const Config d = config_from_metadata(config_metadata(c));
        CHECK(d.variant == c.variant);
        CHECK(d.activation == c.activation);
        CHECK(d.eps == c.eps);  // exactly: 17 significant digits
        CHECK(d.attn_bias == c.attn_bias);
        const struct {
            const char* field;
            int got, want;
        } sizes[] = {{"V", d.V, c.V}, {"H", d.H, c.H}, {"F", d.F, c.F}, {"D", d.D, c.D}, {"L", d.L, c.L}, {"A", d.A, c.A},
                     {"n_ctx", d.n_ctx, c.n_ctx}, {"cls_id", d.cls_id, c.cls_id}, {"sep_id", d.sep_id, c.sep_id},
                     {"mask_id", d.mask_id, c.mask_id}, {"st_window", d.st_window, c.st_window}, {"st_stride", d.st_stride, c.st_stride}};
        for (const auto& f : sizes) CHECK_MESSAGE(f.got == f.want, f.field << ": expected " << f.want << ", got " << f.got);
    }
    CHECK(preset("gpt2-124m").attn_bias);
    CHECK_FALSE(preset("gpt1").attn_bias);
    std::map<std::string, std::string> m = config_metadata(preset("tiny-gpt2"));
    CHECK(m.count("attn_bias") == 0);  // absent means no biases: older checkpoints load unchanged
    m["attn_bias"] = "2";
    M_CHECK_TF_ERROR(config_from_metadata(m), "attn_bias");
}

TEST_CASE("checkpoint: a model with attention biases round trips with its b_Q, b_K, b_V, b_O tensors") {
    Config c = preset("tiny-gpt2");
    c.attn_bias = true;
    Params<float> p = m_model<float>(c, 33, 0.5);
    const std::string path = m_path("rt_attn_bias.safetensors");
    save_model(path, c, p);
    LoadedModel lm = load_model(path);
    CHECK(lm.config.attn_bias);
    CHECK(m_params_bits_equal(c, p, lm.params));
    const std::string bytes = m_read(path);
    CHECK(m_contains(bytes, "\"layers.1.attn.b_Q.1\""));
    CHECK(m_contains(bytes, "\"layers.0.attn.b_O\""));
    CHECK(m_contains(bytes, "\"attn_bias\":\"1\""));
    CHECK(lm.params.layers[1].attn.b_V[0].shape == std::vector<int>{c.D});
    // Without biases: no bias tensors, no attn_bias key, and loading gives empty biases.
    Config c0 = c;
    c0.attn_bias = false;
    Params<float> p0 = m_model<float>(c0, 33, 0.5);
    save_model(path, c0, p0);
    LoadedModel lm0 = load_model(path);
    CHECK_FALSE(lm0.config.attn_bias);
    CHECK(lm0.params.layers[0].attn.b_O.empty());
    CHECK_FALSE(m_contains(m_read(path), "b_O"));
    CHECK_FALSE(m_contains(m_read(path), "attn_bias"));
    // attn_bias = 1 in the metadata but no bias tensors in the file: a missing tensor, named.
    std::vector<std::pair<std::string, const Tensor<float>*>> list;
    for (auto& nt : named_tensors(c0, p0)) list.push_back({nt.name, nt.tensor});
    save_safetensors(path, config_metadata(c), list);
    M_CHECK_TF_ERROR(load_model(path), "missing tensor 'layers.0.attn.b_");
}

TEST_CASE("checkpoint: save_safetensors byte layout (u64 LE header size, padded JSON, LE float32 data)") {
    const std::string f = m_path("layout.safetensors");
    const Tensor<float> t = Tensor<float>::vector({1.0f, -2.0f});
    save_safetensors(f, {{"k", "v"}}, {{"t", &t}});
    CHECK_FALSE(m_exists(f + ".tmp"));
    const std::string b = m_read(f);
    REQUIRE(b.size() >= 16);
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)(unsigned char)b[k] << (8 * k);
    CHECK(n % 8 == 0);
    REQUIRE(b.size() == 8 + n + 8);
    const Json h = parse_json(b.substr(8, n));
    REQUIRE(h.type == Json::object);
    REQUIRE(h.get("t") != nullptr);
    CHECK(h.get("t")->get("dtype")->str == "F32");
    CHECK(h.get("t")->get("shape")->arr.size() == 1);
    CHECK(h.get("t")->get("shape")->arr[0].num == 2);
    CHECK(h.get("t")->get("data_offsets")->arr[0].num == 0);
    CHECK(h.get("t")->get("data_offsets")->arr[1].num == 8);
    CHECK(h.get("__metadata__")->get("k")->str == "v");
    CHECK(b.substr(8 + n) == std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8));  // 1.0f, -2.0f
}

TEST_CASE("checkpoint: malformed safetensors files give a tf::Error naming the problem") {
    const std::string f = m_path("bad.safetensors");
    auto load = [&](const std::string& bytes) {
        m_write(f, bytes);
        return load_safetensors(f);
    };
    M_CHECK_TF_ERROR(load(""), "bad.safetensors", "8-byte");
    M_CHECK_TF_ERROR(load("\x05\x00\x00"), "8-byte");
    M_CHECK_TF_ERROR(load(m_st_bytes("{}").substr(0, 7)), "8-byte");
    {  // header size larger than the file, including absurd sizes
        std::string b = m_st_bytes("{}");
        b[0] = 100;
        M_CHECK_TF_ERROR(load(b), "header size 100", "exceeds");
        for (int k = 0; k < 8; k++) b[k] = (char)0xFF;
        M_CHECK_TF_ERROR(load(b), "exceeds");
        b = m_st_bytes("{}");
        b[0] = 3;  // the header "{}" has 2 bytes, the size says 3
        M_CHECK_TF_ERROR(load(b), "exceeds");
    }
    M_CHECK_TF_ERROR(load(m_st_bytes("{not json")), "header", "JSON");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":1} trailing")), "header", "JSON");
    M_CHECK_TF_ERROR(load(m_st_bytes("[1, 2]")), "not a JSON object");
    M_CHECK_TF_ERROR(load(m_st_bytes("\"text\"")), "not a JSON object");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", std::string(8, '\0'))),
                     "'a'", "dtype");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", std::string(8, '\0'))),
                     "'a'", "shape");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", std::string(8, '\0'))), "'a'",
                     "data_offsets");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", std::string(8, '\0'))),
                     "'a'", "data_offsets");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":7}", std::string(8, '\0'))), "'a'");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", std::string(4, '\0'))),
                     "'a'", "F16");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", std::string(8, '\0'))),
                     "'a'", "8 bytes");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", std::string(8, '\0'))),
                     "'a'");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", std::string(8, '\0'))),
                     "'a'", "shape");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", std::string(10, '\0'))),
                     "'a'", "shape");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", std::string(6, '\0'))),
                     "'a'", "truncated");
    M_CHECK_TF_ERROR(
        load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2147483647,2147483647],\"data_offsets\":[0,18446744056529682436]}}",
                        std::string(8, '\0'))),
        "'a'");
    // A shape whose size is beyond any integer type is named as a number, not converted to one
    // (converting 4 x (2^31 - 1)^3 to long long is undefined; the fuzzer found it).
    M_CHECK_TF_ERROR(
        load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2147483647,2147483647,2147483647],\"data_offsets\":[0,4]}}",
                        std::string(4, '\0'))),
        "'a' of shape 2147483647x2147483647x2147483647 needs 3.96e+28 bytes but data_offsets give 4");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                                     std::string(12, '\0'))),
                     "overlap");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                                     std::string(8, '\0'))),
                     "'a'", "twice");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"__metadata__\":{\"k\":1}}")), "metadata");
    M_CHECK_TF_ERROR(load(m_st_bytes("{\"__metadata__\":[]}")), "__metadata__");
    M_CHECK_TF_ERROR(load_safetensors(m_path("does_not_exist.safetensors")), "does_not_exist.safetensors");
    // A valid minimal file loads.
    const SafeTensors ok = load(m_st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                                           std::string("\x00\x00\x80\x3f", 4)));
    REQUIRE(ok.find("a"));
    CHECK(ok.find("a")->data == std::vector<float>{1.0f});
    CHECK(ok.find("b") == nullptr);
}

TEST_CASE("checkpoint: a truncated model checkpoint is an error, at every cut") {
    const Config c = preset("tiny-gpt2");
    Params<float> p = m_model<float>(c, 33, 0.1);
    const std::string full = m_path("full.safetensors"), cut = m_path("cut.safetensors");
    save_model(full, c, p);
    const std::string bytes = m_read(full);
    for (std::size_t keep : {bytes.size() - 1, bytes.size() - 10, bytes.size() / 2, (std::size_t)100, (std::size_t)9}) {
        CAPTURE(keep);
        m_write(cut, bytes.substr(0, keep));
        const std::string msg = m_error_of([&] { (void)load_model(cut); });
        INFO(msg);
        CHECK(msg.rfind("tf::Error: ", 0) == 0);
        CHECK(m_contains(msg, "cut.safetensors"));
    }
    m_write(cut, bytes.substr(0, bytes.size() - 10));
    M_CHECK_TF_ERROR(load_model(cut), "truncated");
}

TEST_CASE("checkpoint: load_model reports missing, misshaped and unexpected tensors, bad metadata") {
    const Config c = preset("tiny-gpt2");
    Params<float> p = m_model<float>(c, 34, 0.1);
    const std::string f = m_path("model_bad.safetensors");
    auto tensors = [&](Params<float>& q) {
        std::vector<std::pair<std::string, const Tensor<float>*>> list;
        for (auto& nt : named_tensors(c, q)) list.push_back({nt.name, nt.tensor});
        return list;
    };
    {  // one tensor left out
        auto list = tensors(p);
        const std::string left_out = list[5].first;
        list.erase(list.begin() + 5);
        save_safetensors(f, config_metadata(c), list);
        M_CHECK_TF_ERROR(load_model(f), "model_bad.safetensors", "missing tensor '" + left_out + "'");
    }
    {  // a tensor of the wrong shape
        auto list = tensors(p);
        Tensor<float> wrong(3, 8, 0.5f);
        list[1].second = &wrong;  // W_p is 16x8
        save_safetensors(f, config_metadata(c), list);
        M_CHECK_TF_ERROR(load_model(f), "'W_p'", "3x8", "16x8");
        Tensor<float> vec({128});  // same size, different shape
        list[1].second = &vec;
        save_safetensors(f, config_metadata(c), list);
        M_CHECK_TF_ERROR(load_model(f), "'W_p'", "16x8");
    }
    {  // an extra tensor: an error, unless its name has an allowed prefix
        auto list = tensors(p);
        Tensor<float> extra(std::vector<int>{4}, 2.0f);
        list.push_back({"bogus", &extra});
        save_safetensors(f, config_metadata(c), list);
        M_CHECK_TF_ERROR(load_model(f), "unexpected tensor 'bogus'");
        M_CHECK_TF_ERROR(load_model(f, {"adam."}), "unexpected tensor 'bogus'");
        list.back().first = "layers.2.attn.W_O";  // a layer the config does not have
        save_safetensors(f, config_metadata(c), list);
        M_CHECK_TF_ERROR(load_model(f), "unexpected tensor 'layers.2.attn.W_O'");
        list.back().first = "adam.m.W_e";
        save_safetensors(f, config_metadata(c), list);
        LoadedModel lm = load_model(f, {"adam."});
        CHECK(m_params_bits_equal(c, p, lm.params));
        REQUIRE(lm.file.tensors.size() == 1);
        CHECK(lm.file.tensors[0].first == "adam.m.W_e");
        CHECK(lm.file.tensors[0].second.data == extra.data);
        M_CHECK_TF_ERROR(load_model(f), "unexpected tensor 'adam.m.W_e'");
    }
    {  // metadata problems
        auto meta = config_metadata(c);
        meta.erase("variant");
        save_safetensors(f, meta, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "model_bad.safetensors", "'variant'");
        meta = config_metadata(c);
        meta["variant"] = "gpt5";
        save_safetensors(f, meta, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "model_bad.safetensors", "gpt5");
        meta = config_metadata(c);
        meta["H"] = "eight";
        save_safetensors(f, meta, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "'H'", "eight");
        meta["H"] = "8x";
        save_safetensors(f, meta, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "'H'");
        meta["H"] = "-8";
        save_safetensors(f, meta, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "H");
        meta = config_metadata(c);
        meta["eps"] = "tiny";
        save_safetensors(f, meta, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "eps");
        meta = config_metadata(c);
        meta["activation"] = "swish";
        save_safetensors(f, meta, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "swish");
        meta = config_metadata(c);
        meta.erase("n_ctx");
        save_safetensors(f, meta, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "'n_ctx'");
        save_safetensors(f, {}, tensors(p));
        M_CHECK_TF_ERROR(load_model(f), "lacks");
    }
    {  // BERT ids outside the vocabulary
        const Config cb = preset("tiny-bert");
        Params<float> pb = m_model<float>(cb, 35, 0.1);
        auto meta = config_metadata(cb);
        meta["mask_id"] = "13";
        std::vector<std::pair<std::string, const Tensor<float>*>> list;
        for (auto& nt : named_tensors(cb, pb)) list.push_back({nt.name, nt.tensor});
        save_safetensors(f, meta, list);
        M_CHECK_TF_ERROR(load_model(f), "mask_id");
    }
    M_CHECK_TF_ERROR(save_model(m_path("no/such/dir/x.safetensors"), c, p), "no/such/dir");
}

TEST_CASE("checkpoint: a file written by another writer (key order, spaces, no padding) loads") {
    const Config c = preset("tiny-bert");
    Params<float> p = m_model<float>(c, 36, 0.3);
    auto named = named_tensors(c, p);
    // Body in reverse order of the header; header keys in another order, with spaces; metadata last.
    std::string body;
    std::vector<std::pair<std::size_t, std::size_t>> offsets(named.size());
    for (std::size_t k = named.size(); k-- > 0;) {
        offsets[k].first = body.size();
        for (float v : named[k].tensor->data) {
            uint32_t u;
            std::memcpy(&u, &v, 4);
            for (int b = 0; b < 4; b++) body += (char)((u >> (8 * b)) & 0xFF);
        }
        offsets[k].second = body.size();
    }
    std::string header = "{ ";
    for (std::size_t k = 0; k < named.size(); k++) {
        const Tensor<float>& t = *named[k].tensor;
        header += "\"" + named[k].name + "\" : { \"shape\" : [ ";
        for (std::size_t d = 0; d < t.shape.size(); d++) header += (d ? ", " : "") + std::to_string(t.shape[d]);
        header += " ], \"data_offsets\" : [ " + std::to_string(offsets[k].first) + ", " +
                  std::to_string(offsets[k].second) + " ], \"dtype\" : \"F32\" },\n  ";
    }
    header += "\"__metadata__\" : { ";
    bool first = true;
    for (auto& kv : config_metadata(c)) header += (first ? "" : ", ") + json_escape(kv.first) + " : " + json_escape(kv.second), first = false;
    header += " } }";
    if (header.size() % 8 == 0) header += "\n";  // make sure it is not a multiple of 8
    REQUIRE(header.size() % 8 != 0);
    const std::string f = m_path("other_writer.safetensors");
    m_write(f, m_st_bytes(header, body));
    LoadedModel lm = load_model(f);
    CHECK(lm.config.variant == Variant::bert);
    CHECK(lm.config.eps == c.eps);
    CHECK(m_params_bits_equal(c, p, lm.params));
}

// ================================================================================================
// Released GPT-2 weights: a Hugging Face model.safetensors (names and layout of GPT-2), made here
// from a small model so that the test knows every number
// ================================================================================================

TEST_CASE("GPT-2 weights: a Hugging Face model.safetensors loads as a gpt2 model, every number in place") {
    const auto [c, p] = m_hf_model(m_hf_config(13), 71);
    const std::string dir = m_path("");
    const std::string path = m_path("hf_model.safetensors");
    m_write(dir + "config.json", "{\"n_head\": 3, \"n_embd\": 12, \"layer_norm_epsilon\": 1e-05, \"activation_function\": \"gelu_new\"}");
    for (const std::string prefix : {"", "transformer."}) {
        CAPTURE(prefix);
        m_write_hf(path, m_hf_tensors(c, p, prefix));
        LoadedModel lm = load_model(path);
        m_check_hf_gpt_loaded(lm, Variant::gpt2, c, p);
        // It round trips through this project's own format.
        save_model(m_path("hf_converted.safetensors"), lm.config, lm.params);
        LoadedModel back = load_model(m_path("hf_converted.safetensors"));
        Params<float> q = p;
        CHECK(m_params_bits_equal(c, q, back.params));
    }
    // A tied lm_head is accepted; an untied one is an error.
    auto t = m_hf_tensors(c, p);
    t.push_back({"lm_head.weight", p.W_e});
    m_write_hf(path, t);
    CHECK(load_model(path).config.V == 13);
    t.back().second[3] += 1.f;
    m_write_hf(path, t);
    M_CHECK_TF_ERROR(load_model(path), "lm_head.weight", "tied");
}

TEST_CASE("GPT-2 weights: missing, misshaped and unexpected tensors, and unknown head counts, are errors") {
    // c and p by reference, not by a structured binding: the lambda below captures them (C++17 does not capture a binding).
    const std::pair<Config, Params<float>> made = m_hf_model(m_hf_config(13), 72);
    const Config& c = made.first;
    const Params<float>& p = made.second;
    const std::string path = m_path("hf_bad/model.safetensors");
    REQUIRE(m_make_dir(m_path("hf_bad")));
    m_write(m_path("hf_bad/config.json"), "{\"n_head\": 3}");
    auto with = [&](const std::function<void(std::vector<std::pair<std::string, Tensor<float>>>&)>& change) {
        auto t = m_hf_tensors(c, p);
        change(t);
        m_write_hf(path, t);
    };
    auto find = [](std::vector<std::pair<std::string, Tensor<float>>>& t, const std::string& name) -> Tensor<float>& {
        for (auto& kv : t)
            if (kv.first == name) return kv.second;
        throw std::runtime_error("no " + name);
    };
    with([](auto& t) { t.erase(std::remove_if(t.begin(), t.end(), [](auto& kv) { return kv.first == "h.1.mlp.c_fc.bias"; }), t.end()); });
    M_CHECK_TF_ERROR(load_model(path), "missing tensor 'h.1.mlp.c_fc.bias'", "GPT-2 weights");
    with([&](auto& t) { find(t, "h.0.attn.c_attn.weight") = Tensor<float>(12, 35); });
    M_CHECK_TF_ERROR(load_model(path), "h.0.attn.c_attn.weight", "12x35", "expected 12x36");
    with([](auto& t) { t.push_back({"h.0.attn.extra", Tensor<float>({3})}); });
    M_CHECK_TF_ERROR(load_model(path), "unexpected tensor 'h.0.attn.extra'");
    with([](auto& t) { t.push_back({"h.x.ln_1.weight", Tensor<float>({3})}); });
    M_CHECK_TF_ERROR(load_model(path), "unexpected tensor 'h.x.ln_1.weight'");
    with([](auto&) {});
    m_write(m_path("hf_bad/config.json"), "{\"n_head\": 5}");  // 12 is not a multiple of 5
    M_CHECK_TF_ERROR(load_model(path), "config.json", "n_head", "n_head must divide n_embd = 12");
    m_write(m_path("hf_bad/config.json"), "{\"n_head\": 1e12}");
    M_CHECK_TF_ERROR(load_model(path), "n_head");
    m_write(m_path("hf_bad/config.json"), "{\"n_embd\": 12}");
    M_CHECK_TF_ERROR(load_model(path), "n_head");
    m_write(m_path("hf_bad/config.json"), "{\"n_head\": 3, \"activation_function\": \"swish\"}");
    M_CHECK_TF_ERROR(load_model(path), "activation_function 'swish'");
    m_write(m_path("hf_bad/config.json"), "{\"n_head\": 3, \"layer_norm_epsilon\": \"small\"}");
    M_CHECK_TF_ERROR(load_model(path), "layer_norm_epsilon");
    m_write(m_path("hf_bad/config.json"), "{\"n_head\": 3, \"n_layer\": 12}");
    M_CHECK_TF_ERROR(load_model(path), "n_layer does not match the weights (2)");
    m_write(m_path("hf_bad/config.json"), "{\"n_head\": 3, \"activation_function\": \"gelu\", \"n_layer\": 2, \"vocab_size\": 13}");
    CHECK(load_model(path).config.activation == Activation::gelu_erf);  // Hugging Face's "gelu" is the erf form
    REQUIRE(std::remove(m_path("hf_bad/config.json").c_str()) == 0);  // no config.json: H = 12 has no heads of 64
    M_CHECK_TF_ERROR(load_model(path), "config.json", "n_head");
}

// ================================================================================================
// Released GPT-1, BERT and RoBERTa weights: Hugging Face model.safetensors files written byte
// by byte from small models
// ================================================================================================

TEST_CASE("GPT-1 weights: a Hugging Face openai-gpt model.safetensors loads as a gpt model, every number in place") {
    const auto [c, p] = m_hf_model(m_gpt1_hf_config(), 1240);
    const std::string dir = m_hf_dir("hf_gpt1", "{\"afn\": \"gelu\", \"n_head\": 3, \"n_embd\": 12, \"n_layer\": 2, \"n_positions\": 16, "
                                      "\"vocab_size\": 13, \"layer_norm_epsilon\": 1e-05}");
    for (const std::string prefix : {"", "transformer."}) {
        CAPTURE(prefix);
        auto t = m_gpt1_hf(c, p, prefix);
        t.push_back(m_raw(prefix + "h.0.attn.bias", Tensor<float>({1, 1, 16, 16}, 1.f)));  // a mask buffer
        if (!prefix.empty()) t.push_back(m_raw("lm_head.weight", p.W_e));                   // tied
        m_write_raw(dir + "model.safetensors", t);
        LoadedModel lm = load_model(dir + "model.safetensors");
        m_check_hf_gpt_loaded(lm, Variant::gpt, c, p);
        const ParamCount k = count_params(lm.config);
        CHECK(k.actual - k.seed_lambda == k.attn_biases);
        CHECK(k.attn_biases == 2 * (3 * 12 + 12));
    }
    m_write(dir + "config.json", "{\"afn\": \"relu\", \"n_head\": 4, \"layer_norm_epsilon\": 1e-3}");
    m_write_raw(dir + "model.safetensors", m_gpt1_hf(c, p, ""));
    const Config r = load_model(dir + "model.safetensors").config;
    CHECK(r.activation == Activation::relu);
    CHECK(r.A == 4);
    CHECK(r.D == 3);
    CHECK(r.eps == 1e-3);
}

TEST_CASE("GPT-1 weights: missing, misshaped, unexpected and untied tensors, and a contradicting config, are errors") {
    const auto [c, p] = m_hf_model(m_gpt1_hf_config(), 1241);
    const std::string dir = m_hf_dir("hf_gpt1_bad", "{\"n_head\": 3}"), path = dir + "model.safetensors";
    const auto t = m_gpt1_hf(c, p, "transformer.");
    m_check_raw_error(path, t, [](auto& x) { x.erase(x.begin() + 4); },  // h.0.attn.c_proj.weight
                      {"GPT-1 weights", "missing tensor 'h.0.attn.c_proj.weight'"});
    m_check_raw_error(path, t, [](auto& x) { x[3] = m_raw("transformer.h.0.attn.c_attn.bias", Tensor<float>({35})); },
                      {"tensor 'h.0.attn.c_attn.bias' is 35, expected 36"});
    m_check_raw_error(path, t, [](auto& x) { x.push_back(m_raw("transformer.h.1.attn.extra", Tensor<float>({2}))); },
                      {"unexpected tensor 'h.1.attn.extra'"});
    m_check_raw_error(path, t, [](auto& x) { x.push_back(m_raw("transformer.h.x.ln_1.weight", Tensor<float>({2}))); },
                      {"unexpected tensor 'h.x.ln_1.weight'"});
    Tensor<float> other = p.W_e;
    other[7] += 1.f;
    m_check_raw_error(path, t, [&](auto& x) { x.push_back(m_raw("lm_head.weight", other)); }, {"lm_head.weight differs", "tied"});
    m_write_raw(path, t);
    m_check_config_errors(dir, path,
                          {{"{\"n_head\": 5}", {"n_head must divide n_embd = 12"}},
                           {"{\"n_head\": 3, \"n_layer\": 3}", {"n_layer does not match the weights (2)"}},
                           {"{\"n_head\": 3, \"afn\": \"swish\"}", {"afn 'swish'"}},
                           {"{\"n_head\": 3", {"config.json"}}});
    std::remove((dir + "config.json").c_str());
    M_CHECK_TF_ERROR(load_model(path), "cannot tell the number of heads");  // H = 12: no multiple of 64
    Tensor<float> bad = p.W_p;
    bad[3] = std::nanf("");
    m_write(dir + "config.json", "{\"n_head\": 3}");
    m_check_raw_error(path, t, [&](auto& x) { x[1] = m_raw("transformer.positions_embed.weight", bad); }, {"W_p", "not finite"});
}

TEST_CASE("BERT weights: a Hugging Face bert-base-uncased model.safetensors loads as a bert model, every number in place") {
    const auto [c, p] = m_hf_model(m_bert_hf_config(), 1250);
    const std::string dir = m_hf_dir("hf_bert", "{\"hidden_act\": \"gelu\", \"num_attention_heads\": 2, \"hidden_size\": 8, \"num_hidden_layers\": 2, "
                                      "\"intermediate_size\": 16, \"max_position_embeddings\": 16, \"vocab_size\": 13, "
                                      "\"type_vocab_size\": 2, \"layer_norm_eps\": 1e-12, \"position_embedding_type\": \"absolute\"}");
    m_write(dir + "vocab.txt", m_BERT_VOCAB);
    Tensor<float> nsp_W(2, 8, 0.25f), nsp_b({2}, 0.5f);
    for (bool legacy : {false, true}) {
        CAPTURE(legacy);
        auto t = m_bert_hf(c, p, legacy);
        t.push_back({"bert.embeddings.position_ids", "I64", {1, 16}, std::string(16 * 8, '\0')});  // a buffer
        t.push_back(m_raw("cls.predictions.decoder.weight", p.W_e));  // tied
        t.push_back(m_raw("cls.predictions.decoder.bias", p.b_z));    // tied
        t.push_back(m_raw("cls.seq_relationship.weight", nsp_W));
        t.push_back(m_raw("cls.seq_relationship.bias", nsp_b));
        m_write_raw(dir + "model.safetensors", t);
        LoadedModel lm = load_model(dir + "model.safetensors");
        const Config& d = lm.config;
        CHECK(d.variant == Variant::bert);
        CHECK(d.activation == Activation::gelu_erf);
        CHECK(d.attn_bias);
        CHECK(d.emb_ln);
        CHECK(d.mlm_head);
        CHECK(d.pooler);
        CHECK(d.eps == 1e-12);
        CHECK(d.cls_id == 10);
        CHECK(d.sep_id == 11);
        CHECK(d.mask_id == 12);
        CHECK((d.V == 13 && d.H == 8 && d.A == 2 && d.D == 4 && d.F == 16 && d.L == 2 && d.n_ctx == 16));
        Params<float> q = p;
        CHECK(m_params_bits_equal(c, q, lm.params));
        REQUIRE(lm.file.tensors.size() == 2);  // the next-sentence head, kept
        CHECK(lm.file.tensors[0].first == "cls.seq_relationship.weight");
        CHECK(m_bits_equal(lm.file.tensors[0].second, nsp_W));
        Batch b;
        b.n = 6, b.tokens = {10, 5, 12, 11, 3, 11}, b.segments = {0, 0, 0, 0, 1, 1};
        CHECK(m_bits_equal(model_forward(d, lm.params, b), model_forward(c, p, b)));
    }
    // Without the masked-LM head and the pooler (BertModel): the de-embedding of formulas §17; ids 101..103 need V > 103.
    auto t = m_bert_hf(c, p, false);
    t.resize(t.size() - 7);
    m_write_raw(dir + "model.safetensors", t);
    const Config d = load_model(dir + "model.safetensors").config;
    CHECK_FALSE(d.mlm_head);
    CHECK_FALSE(d.pooler);
    CHECK(d.emb_ln);
    std::remove((dir + "vocab.txt").c_str());
    M_CHECK_TF_ERROR(load_model(dir + "model.safetensors"), "[CLS], [SEP], [MASK]", "no vocab.txt");
}

TEST_CASE("BERT weights: missing, misshaped, unexpected and untied tensors, bad vocab.txt and config, are errors") {
    const auto [c, p] = m_hf_model(m_bert_hf_config(), 1251);
    const std::string dir = m_hf_dir("hf_bert_bad", "{\"num_attention_heads\": 2}"), path = dir + "model.safetensors";
    m_write(dir + "vocab.txt", m_BERT_VOCAB);
    const auto t = m_bert_hf(c, p, false);
    m_check_raw_error(path, t, [](auto& x) { x.erase(x.begin() + 2); },  // token_type_embeddings
                      {"BERT weights", "missing tensor 'embeddings.token_type_embeddings.weight'"});
    m_check_raw_error(path, t, [](auto& x) { x[5] = m_raw("bert.encoder.layer.0.attention.self.query.weight", Tensor<float>(8, 7)); },
                      {"'encoder.layer.0.attention.self.query.weight' is 8x7, expected 8x8"});
    m_check_raw_error(path, t, [](auto& x) { x.push_back(m_raw("cls.predictions.extra", Tensor<float>({2}))); },
                      {"unexpected tensor 'cls.predictions.extra'"});
    Tensor<float> bias = p.b_z;
    bias[0] += 1.f;
    m_check_raw_error(path, t, [&](auto& x) { x.push_back(m_raw("cls.predictions.decoder.bias", bias)); },
                      {"cls.predictions.decoder.bias differs"});
    m_check_raw_error(path, t, [](auto& x) { x.push_back({"bert.embeddings.other_ids", "I64", {1, 2}, std::string(16, '\0')}); },
                      {"only F32 is supported"});
    m_write_raw(path, t);
    m_write(dir + "vocab.txt", "[UNK]\n[CLS]\n");
    M_CHECK_TF_ERROR(load_model(path), "vocab.txt' has 2 tokens but the model's V = 13");
    m_write(dir + "vocab.txt", "[UNK]\nt1\nt2\nt3\nt4\nt5\nt6\nt7\nt8\nt9\n[CLS]\n[SEP]\nmask\n");
    M_CHECK_TF_ERROR(load_model(path), "lacks [CLS], [SEP] or [MASK]");
    m_write(dir + "vocab.txt", m_BERT_VOCAB);
    m_check_config_errors(dir, path,
                          {{"{\"num_attention_heads\": 2, \"type_vocab_size\": 3}", {"type_vocab_size does not match the weights (2)"}},
                           {"{\"num_attention_heads\": 2, \"position_embedding_type\": \"relative_key\"}", {"position_embedding_type must be absolute"}},
                           {"{\"num_attention_heads\": 2, \"hidden_act\": \"tanh\"}", {"hidden_act 'tanh'"}}});
}

TEST_CASE("RoBERTa weights: a Hugging Face roberta-base model.safetensors loads as a roberta model, every number in place") {
    const auto [c, p] = m_hf_model(m_roberta_hf_config(), 1255);
    const std::string dir = m_hf_dir("hf_roberta", "{\"model_type\": \"roberta\", \"hidden_act\": \"gelu\", \"num_attention_heads\": 2, \"hidden_size\": 8, "
                                      "\"num_hidden_layers\": 2, \"intermediate_size\": 16, \"max_position_embeddings\": 18, "
                                      "\"vocab_size\": 265, \"type_vocab_size\": 1, \"layer_norm_eps\": 1e-05, \"pad_token_id\": 1}");
    m_write(dir + "vocab.json", m_encoder_json(m_RB_MERGED));
    const Tensor<float> zero(1, c.H, 0.f);
    auto t = m_roberta_hf(c, p, zero, "roberta.");
    t.push_back({"roberta.embeddings.position_ids", "I64", {1, 18}, std::string(18 * 8, '\0')});    // buffers
    t.push_back({"roberta.embeddings.token_type_ids", "I64", {1, 18}, std::string(18 * 8, '\0')});
    t.push_back(m_raw("lm_head.decoder.weight", p.W_e));  // tied
    t.push_back(m_raw("lm_head.decoder.bias", p.b_z));    // tied
    m_write_raw(dir + "model.safetensors", t);
    LoadedModel lm = load_model(dir + "model.safetensors");
    const Config& d = lm.config;
    CHECK(d.variant == Variant::roberta);
    CHECK(d.activation == Activation::gelu_erf);
    CHECK((d.attn_bias && d.emb_ln && d.mlm_head && d.pooler));
    CHECK(d.eps == 1e-5);
    CHECK((d.cls_id == 260 && d.sep_id == 262 && d.mask_id == 264));
    CHECK(d.pad_id == 1);  // pad_token_id: the pads' position row
    CHECK((d.V == 265 && d.H == 8 && d.A == 2 && d.D == 4 && d.F == 16 && d.L == 2 && d.n_ctx == 16));
    Params<float> q = p;
    CHECK(m_params_bits_equal(c, q, lm.params));
    Batch b;
    b.n = 6, b.tokens = {260, 5, 264, 262, 3, 262};
    CHECK(m_bits_equal(model_forward(d, lm.params, b), model_forward(c, p, b)));
    // The token type row is added at every position: folded into W_p.
    Tensor<float> tt(1, c.H);
    for (int h = 0; h < c.H; h++) tt(0, h) = 0.125f * (float)(h + 1);
    const auto t2 = m_roberta_hf(c, p, tt, "");  // RobertaModel's names, and no lm_head: told by the one token type
    std::vector<m_RawTensor> bare;
    for (const auto& x : t2)
        if (x.name.rfind("lm_head.", 0) != 0 && x.name.rfind("pooler.", 0) != 0) bare.push_back(x);
    m_write_raw(dir + "model.safetensors", bare);
    LoadedModel l2 = load_model(dir + "model.safetensors");
    CHECK(l2.config.variant == Variant::roberta);
    CHECK_FALSE(l2.config.mlm_head);
    CHECK_FALSE(l2.config.pooler);
    bool folded = true;
    for (int i = 0; i < c.n_ctx; i++)
        for (int h = 0; h < c.H; h++) folded &= l2.params.W_p(i, h) == (p.W_p(i, h) - tt(0, h)) + tt(0, h);
    for (int h = 0; h < c.H; h++) folded &= l2.params.w_pad[h] == (p.w_pad[h] - tt(0, h)) + tt(0, h);
    CHECK(folded);
    // Another pad_token_id moves the rows: padding_idx 261 (this vocabulary's <pad>) needs n_ctx + 262 rows.
    Config c261 = c;
    c261.pad_id = 261;
    const Params<float> p261 = m_model<float>(c261, 1259, 0.5);
    m_write(dir + "config.json", "{\"num_attention_heads\": 2, \"pad_token_id\": 261, \"max_position_embeddings\": 278}");
    m_write_raw(dir + "model.safetensors", m_roberta_hf(c261, p261, tt, "roberta."));
    LoadedModel l3 = load_model(dir + "model.safetensors");
    CHECK(l3.config.pad_id == 261);
    CHECK(l3.config.n_ctx == 16);
    bool moved = true;
    for (int i = 0; i < c.n_ctx; i++)
        for (int h = 0; h < c.H; h++) moved &= l3.params.W_p(i, h) == (p261.W_p(i, h) - tt(0, h)) + tt(0, h);
    for (int h = 0; h < c.H; h++) moved &= l3.params.w_pad[h] == (p261.w_pad[h] - tt(0, h)) + tt(0, h);
    CHECK(moved);
    m_write(dir + "config.json", "{\"num_attention_heads\": 2, \"pad_token_id\": 300}");  // more than the table's rows
    M_CHECK_TF_ERROR(load_model(dir + "model.safetensors"), "(n_ctx + pad_token_id + 1) x H");
    m_write(dir + "config.json", "{\"num_attention_heads\": 2}");
    // Without vocab.json, only roberta-base's size tells the special ids.
    std::remove((dir + "vocab.json").c_str());
    M_CHECK_TF_ERROR(load_model(dir + "model.safetensors"), "RoBERTa weights", "<s>, </s>, <mask>", "no vocab.json");
}

TEST_CASE("RoBERTa weights: a bad vocab.json or config.json and an untied decoder are errors") {
    const auto [c, p] = m_hf_model(m_roberta_hf_config(), 1256);
    const std::string dir = m_hf_dir("hf_roberta_bad", "{\"num_attention_heads\": 2}"), path = dir + "model.safetensors";
    m_write(dir + "vocab.json", m_encoder_json(m_RB_MERGED));
    const auto t = m_roberta_hf(c, p, Tensor<float>(1, c.H, 0.f), "roberta.");
    m_write_raw(path, t);
    CHECK(load_model(path).config.variant == Variant::roberta);
    Tensor<float> W = p.W_e;
    W[3] += 1.f;
    m_check_raw_error(path, t, [&](auto& x) { x.push_back(m_raw("lm_head.decoder.weight", W)); },
                      {"RoBERTa weights", "lm_head.decoder.weight differs"});
    m_write_raw(path, t);
    m_check_config_errors(dir, path,
                          {{"{\"num_attention_heads\": 2, \"max_position_embeddings\": 16}", {"max_position_embeddings does not match the weights (18)"}},
                           {"{\"num_attention_heads\": 2, \"type_vocab_size\": 2}", {"type_vocab_size does not match the weights (1)"}}});
    m_write(dir + "config.json", "{\"num_attention_heads\": 2}");
    std::vector<std::string> no_mask(m_RB_MERGED.begin(), m_RB_MERGED.end() - 1);
    no_mask.push_back("<masks>");
    m_write(dir + "vocab.json", m_encoder_json(no_mask));
    M_CHECK_TF_ERROR(load_model(path), "vocab.json' lacks <mask>");
    m_write(dir + "vocab.json", m_encoder_json({"he"}));
    M_CHECK_TF_ERROR(load_model(path), "vocab.json' has 257 tokens but the model's V = 265");
    m_write(dir + "vocab.json", "{\"<s>\": 0");
    M_CHECK_TF_ERROR(load_model(path), "vocab.json'", "JSON");
}

// ================================================================================================
// Export to Hugging Face's layout
// ================================================================================================
TEST_CASE("export: a directory of released weights, or of anything else, is never written into; a re-export leaves no stale tokenizer") {
    const std::string dir = m_path("exp_foreign");
    m_make_dir(dir);
    const std::string ck = dir + "/ck.safetensors";
    m_run_ok("init --preset tiny-gpt2 --out " + ck);
    // A downloaded GPT-2: its model, config and tokenizer. Nothing in it changes.
    const std::string hf = dir + "/gpt2";
    m_make_dir(hf);
    const std::map<std::string, std::string> released = {
        {"model.safetensors", m_st_bytes("{\"__metadata__\":{\"format\":\"pt\"}}")},
        {"config.json", "{\"model_type\": \"gpt2\", \"vocab_size\": 50257}\n"},
        {"vocab.json", "{\"!\": 0}\n"},
        {"merges.txt", "#version: 0.2\nh e\n"}};
    for (auto& kv : released) m_write(hf + "/" + kv.first, kv.second);
    m_cli_fails("export --checkpoint " + ck + " --out " + hf, "config.json was not written by this program");
    for (auto& kv : released) CHECK(m_read(hf + "/" + kv.first) == kv.second);
    // Only a config.json (someone's), or one of ours beside a file export does not write: refused too.
    const std::string other = dir + "/other";
    m_make_dir(other);
    m_write(other + "/config.json", released.at("config.json"));
    m_cli_fails("export --checkpoint " + ck + " --out " + other, "refusing to write into --out");
    CHECK(m_read(other + "/config.json") == released.at("config.json"));
    const std::string mine = dir + "/mine";
    m_run_ok("export --checkpoint " + ck + " --out " + mine);
    CHECK(m_contains(m_read(mine + "/config.json"), "\"written_by\": \"transformer\""));
    m_write(mine + "/README.md", "my notes\n");
    m_cli_fails("export --checkpoint " + ck + " --out " + mine, "it holds 'README.md'");
    CHECK(m_read(mine + "/README.md") == "my notes\n");
    std::remove((mine + "/README.md").c_str());
    // An earlier export of ours is replaced whole: a tokenizer it had does not stay beside a model
    // that records none (init's checkpoint).
    m_write(mine + "/vocab.json", released.at("vocab.json"));
    m_write(mine + "/merges.txt", released.at("merges.txt"));
    m_run_ok("export --checkpoint " + ck + " --out " + mine);
    CHECK_FALSE(m_exists(mine + "/vocab.json"));
    CHECK_FALSE(m_exists(mine + "/merges.txt"));
    CHECK(m_exists(mine + "/model.safetensors"));
    // An empty directory is fine.
    const std::string empty = dir + "/empty";
    m_make_dir(empty);
    m_run_ok("export --checkpoint " + ck + " --out " + empty);
    CHECK(m_exists(empty + "/config.json"));
}

TEST_CASE("export: Hugging Face layout, read back with identical tensors and logits, for every activation and with or without biases") {
    const Activation acts[] = {Activation::gelu_tanh, Activation::gelu_erf, Activation::relu, Activation::gelu_sigmoid};
    const char* hf[] = {"gelu_new", "gelu", "relu", "quick_gelu"};
    int case_no = 0;
    for (int bias = 0; bias < 2; bias++)
        for (int k = 0; k < 4; k++) {
            Config c = preset("tiny-gpt2");
            c.activation = acts[k], c.attn_bias = bias == 1, c.eps = 1e-6;
            c.F = k == 2 ? 3 * c.H : 4 * c.H;  // n_inner: a number, or null (= 4 n_embd)
            INFO("activation " << std::string(activation_name(c.activation)));
            CAPTURE(bias);
            Params<float> p = m_model<float>(c, 11 + case_no, 0.05);
            const std::string dir = m_path("i11_export_" + std::to_string(case_no++));
            export_hf(dir, c, p);
            const Json j = parse_json(m_read(dir + "/config.json"));
            CHECK(j.get("model_type")->str == "gpt2");
            CHECK(j.get("architectures")->arr.at(0).str == "GPT2LMHeadModel");
            CHECK(j.get("activation_function")->str == hf[k]);
            CHECK(j.get("n_head")->num == c.A);
            CHECK(j.get("n_layer")->num == c.L);
            CHECK(j.get("n_positions")->num == c.n_ctx);
            CHECK(j.get("layer_norm_epsilon")->num == c.eps);
            CHECK(j.get("n_inner")->type == (c.F == 4 * c.H ? Json::null : Json::number));
            const SafeTensors st = load_safetensors(dir + "/model.safetensors");
            CHECK(st.metadata.at("format") == "pt");
            CHECK(st.find("lm_head.weight") == nullptr);  // tied to wte
            // c_attn joins the heads: row r, column part*H + i*D + d is W_{Q,K,V}^i(r, d).
            const Tensor<float>* ca = st.find("h.1.attn.c_attn.weight");
            REQUIRE(ca);
            CHECK(ca->shape == std::vector<int>{c.H, 3 * c.H});
            CHECK((*ca)(3, 1 * c.H + 1 * c.D + 2) == p.layers[1].attn.W_K[1](3, 2));
            CHECK((*ca)(0, 2 * c.H + (c.A - 1) * c.D) == p.layers[1].attn.W_V[c.A - 1](0, 0));
            LoadedModel lm = load_model(dir + "/model.safetensors");
            const Config& r = lm.config;
            CHECK(r.variant == Variant::gpt2);
            CHECK(r.activation == c.activation);
            CHECK(r.eps == c.eps);
            CHECK((r.V == c.V && r.H == c.H && r.F == c.F && r.D == c.D && r.L == c.L && r.A == c.A && r.n_ctx == c.n_ctx));
            CHECK(r.attn_bias);  // a released GPT-2 has them: absent ones come back as zeros
            for (auto& nt : named_tensors(c, p)) {  // every tensor of the original, bit for bit
                CAPTURE(nt.name);
                Tensor<float>* back = nullptr;
                for (auto& mt : named_tensors(r, lm.params))
                    if (mt.name == nt.name) back = mt.tensor;
                REQUIRE(back);
                CHECK(m_bits_equal(*nt.tensor, *back));
            }
            if (!c.attn_bias)
                for (auto& y : lm.params.layers) {
                    for (auto* heads : {&y.attn.b_Q, &y.attn.b_K, &y.attn.b_V})
                        for (auto& b : *heads)
                            for (float v : b.data) CHECK(v == 0.0f);
                    for (float v : y.attn.b_O.data) CHECK(v == 0.0f);
                }
            Batch b = m_batch(c, 5);
            CHECK(m_bits_equal(model_forward(c, p, b), model_forward(r, lm.params, b)));
        }
}

TEST_CASE("export: unfit models and bad outputs are refused; the command writes every file or none") {
    for (const char* name : {"tiny-gpt3", "tiny-bert", "tiny-roberta"}) {  // gpt3 never; the formulas' BERTs lack emb_ln
        const Config c = preset(name);
        CAPTURE(name);
        CHECK(!hf_export_problem(c).empty());
        Params<float> p = make_params<float>(c);
        M_CHECK_TF_ERROR(export_hf(m_path("i11_never"), c, p), c.variant == Variant::gpt3 ? "gpt3" : "--mlm-head");
    }
    CHECK(!m_exists(m_path("i11_never")));
    Config odd = preset("tiny-gpt2");
    odd.D = odd.H / odd.A + 1;
    CHECK(m_contains(hf_export_problem(odd), "D = H / A"));
    Config head = preset("tiny-gpt2");
    head.W_y_rows = head.H, head.W_y_cols = 2;
    CHECK(m_contains(hf_export_problem(head), "W_y"));
    Config xl = preset("tiny-gpt2");
    xl.xlnet = true;
    CHECK(m_contains(hf_export_problem(xl), "xlnet"));
    CHECK(hf_export_problem(preset("gpt2-124m")).empty());
    // The command line.
    const std::string gpt = m_path("i11_gpt.safetensors"), g2 = m_path("i11_g2.safetensors");
    REQUIRE(m_run("init --preset tiny-gpt --out " + gpt).status == 0);
    REQUIRE(m_run("init --preset tiny-gpt2 --out " + g2).status == 0);
    m_cli_fails("export --checkpoint " + gpt + " --out " + m_path("i11_x1"), "OpenAIGPTLMHeadModel's activations");
    CHECK(!m_exists(m_path("i11_x1")));
    m_cli_fails("export --checkpoint " + g2 + " --out " + m_path("no_such_dir/x"), "does not exist");
    m_cli_fails("export --checkpoint " + g2 + " --out " + g2, "is not a directory");
    m_cli_fails("export --checkpoint " + m_path("i11_none.safetensors") + " --out " + m_path("i11_x2"), "cannot open");
    CHECK(!m_exists(m_path("i11_x2")));
    m_cli_fails("export --checkpoint " + g2, "missing flag --out");
    const std::string dir = m_path("i11_x3");
    m_make_dir(dir);
    m_write(dir + "/config.json", "not json, someone's notes");
    m_cli_fails("export --checkpoint " + g2 + " --out " + dir, "config.json");
    CHECK(!m_exists(dir + "/model.safetensors"));  // checked before anything is written
    CHECK(m_read(dir + "/config.json") == "not json, someone's notes");
    std::remove((dir + "/config.json").c_str());
    const m_Run ok = m_run("export --checkpoint " + g2 + " --out " + dir);
    INFO("stderr: " << ok.err);
    CHECK(ok.status == 0);
    CHECK(m_contains(ok.out, "attention biases written as zeros"));
    CHECK(m_exists(dir + "/model.safetensors"));
    CHECK(m_exists(dir + "/config.json"));
    const m_Run again = m_run("export --checkpoint " + g2 + " --out " + dir);  // replaces its own files
    INFO("stderr: " << again.err);
    CHECK(again.status == 0);
    m_cli_fails("export --checkpoint " + dir + "/model.safetensors --out " + dir, "would overwrite --checkpoint");
    // Only the two files: no temporary (".NAME.tmp.XXXXXX") is left behind.
    CHECK(m_names_in(dir, "") == std::vector<std::string>{"config.json", "model.safetensors"});
}

// ================================================================================================
// Export to the Hugging Face classes of every variant, with the tokenizer's files
// ================================================================================================
namespace {
// The probe text of the tokenizer checks: accents, CJK, a tab, CRLF, runs of spaces.
const std::string m_PROBE = "Caf\xC3\xA9 na\xC3\xAFve,\t\xE4\xB8\xAD \xE6\x96\x87!\r\nlower  lowest   the capital.\r\n";
struct m_ExportCase {
    std::string preset, tokenizer;  // tokenizer: "char" or a subword kind
    Activation activation;
    bool bias, mlm_head;
};
// The tokenizer of a case: characters of the probe, or the small hand-made vocabularies.
Tokenizer m_export_tokenizer(const std::string& kind) {
    if (kind == "char") {
        Tokenizer t;
        t.kind = "char", t.chars = CharVocab::from_text(m_PROBE);
        return t;
    }
    if (kind == "gpt1-bpe") return make_tokenizer(kind, m_gpt1_encoder_json(m_GPT1_SYMBOLS), m_GPT1_MERGES, "test");
    if (kind == "bert-wordpiece") return make_tokenizer(kind, "", m_WP_VOCAB, "test");
    if (kind == "roberta-bpe")
        return make_tokenizer(kind, m_encoder_json({"he", "<s>", "<pad>", "</s>", "<unk>", "<mask>"}), m_vocab_bpe({"h e"}), "test");
    return make_tokenizer(kind, m_encoder_json({"he", "ll", "hell", m_G + "hell", "<|endoftext|>"}),
                          m_vocab_bpe({"h e", "l l", "he ll", m_G + " hell"}), "test");
}
// The config of a case: the preset's shape with the tokenizer's vocabulary and special ids.
Config m_export_config(const m_ExportCase& k, const Tokenizer& t) {
    Config c = preset(k.preset);
    c.activation = k.activation, c.attn_bias = k.bias;
    const bool masked = !is_causal(c.variant);
    c.V = t.size() + (masked && t.kind == "char" ? 3 : 0);
    if (c.variant == Variant::gpt) c.F = 4 * c.H;  // OpenAIGPTLMHeadModel's width
    c.pad_id = -1;
    if (masked) {  // without the head the class is BertModel / RobertaModel, which needs a pooler
        c.emb_ln = true, c.mlm_head = k.mlm_head, c.pooler = !k.mlm_head;
        if (t.kind == "char") c.cls_id = t.size(), c.sep_id = t.size() + 1, c.mask_id = t.size() + 2;
        else subword_special_ids(t, c);
    }
    validate(c);
    return c;
}
Tensor<float>* m_tensor_named(const Config& c, Params<float>& p, const std::string& name) {
    for (auto& nt : named_tensors(c, p))
        if (nt.name == name) return nt.tensor;
    return nullptr;
}
}  // namespace

TEST_CASE("export: every variant through its Hugging Face class and back, weights bit for bit, the tokenizer's ids the same") {
    const Activation tanh_ = Activation::gelu_tanh, erf = Activation::gelu_erf, relu = Activation::relu, sig = Activation::gelu_sigmoid;
    const std::vector<m_ExportCase> cases = {
        {"tiny-gpt", "char", tanh_, false, false},        {"tiny-gpt", "gpt1-bpe", relu, true, false},
        {"tiny-gpt", "gpt2-bpe", tanh_, true, false},     {"tiny-gpt2", "char", sig, false, false},
        {"tiny-gpt2", "gpt2-bpe", erf, true, false},      {"tiny-bert", "bert-wordpiece", erf, true, true},
        {"tiny-bert", "bert-wordpiece", relu, false, false}, {"tiny-bert", "char", sig, true, true},
        {"tiny-bert", "char", tanh_, false, false},       {"tiny-roberta", "roberta-bpe", erf, true, true},
        {"tiny-roberta", "roberta-bpe", sig, false, false}, {"tiny-roberta", "char", relu, true, true},
        {"tiny-roberta", "char", tanh_, false, false}};
    const char* classes[][2] = {{"OpenAIGPTLMHeadModel", "OpenAIGPTLMHeadModel"}, {"GPT2LMHeadModel", "GPT2LMHeadModel"},
                                {"BertModel", "BertForMaskedLM"}, {"RobertaModel", "RobertaForMaskedLM"}};
    int case_no = 0;
    for (const m_ExportCase& k : cases) {
        CAPTURE(k.preset);
        CAPTURE(k.tokenizer);
        CAPTURE(activation_name(k.activation));
        CAPTURE(k.bias);
        CAPTURE(k.mlm_head);
        const Tokenizer tok = m_export_tokenizer(k.tokenizer);
        const Config c = m_export_config(k, tok);
        REQUIRE(hf_export_problem(c) == "");
        Params<float> p = m_model<float>(c, 31 + case_no, 0.05);
        const std::string dir = m_path("i12_export_" + std::to_string(case_no++));
        const HfExport done = export_hf(dir, c, p, tok.metadata());
        const int row = c.variant == Variant::gpt ? 0 : c.variant == Variant::gpt2 ? 1 : c.variant == Variant::bert ? 2 : 3;
        CHECK(done.architecture == classes[row][c.mlm_head ? 1 : 0]);
        // config.json: the class, the shapes and the activation under the class's own keys.
        const Json j = parse_json(m_read(dir + "/config.json"));
        CHECK(j.get("architectures")->arr.at(0).str == done.architecture);
        CHECK(j.get("model_type")->str == done.model_type);
        CHECK(j.get("vocab_size")->num == c.V);
        if (c.variant == Variant::gpt) {
            CHECK(j.get("afn")->str == (c.activation == relu ? "relu" : "gelu"));
            CHECK(j.get("n_positions")->num == c.n_ctx);
            CHECK(j.get("n_head")->num == c.A);
            CHECK(j.get("layer_norm_epsilon")->num == c.eps);
        } else if (!is_causal(c.variant)) {
            const char* act[] = {"quick_gelu", "gelu_new", "gelu", "relu"};
            const int a = c.activation == sig ? 0 : c.activation == tanh_ ? 1 : c.activation == erf ? 2 : 3;
            CHECK(j.get("hidden_act")->str == act[a]);
            CHECK(j.get("num_attention_heads")->num == c.A);
            CHECK(j.get("intermediate_size")->num == c.F);
            CHECK(j.get("layer_norm_eps")->num == c.eps);
            CHECK(j.get("type_vocab_size")->num == (c.variant == Variant::bert ? 2 : 1));
            if (c.variant == Variant::roberta) {
                CHECK(j.get("pad_token_id")->num == c.pad_id);
                CHECK(j.get("max_position_embeddings")->num == c.n_ctx + c.pad_id + 1);
            } else {
                CHECK(j.get("max_position_embeddings")->num == c.n_ctx);
            }
        }
        // The file's names: the class's prefix and head, the tied decoder left out.
        const SafeTensors st = load_safetensors(dir + "/model.safetensors");
        CHECK(st.metadata.at("format") == "pt");
        if (c.variant == Variant::gpt) {
            REQUIRE(st.find("transformer.h.1.attn.c_attn.weight"));
            CHECK((*st.find("transformer.h.1.attn.c_attn.weight"))(3, c.H + c.D + 2) == p.layers[1].attn.W_K[1](3, 2));
            CHECK(!st.find("lm_head.weight"));
        }
        if (!is_causal(c.variant)) {
            const bool roberta = c.variant == Variant::roberta;
            const std::string pre = c.mlm_head ? (roberta ? "roberta." : "bert.") : "";
            const Tensor<float>* q = st.find(pre + "encoder.layer.1.attention.self.query.weight");
            REQUIRE(q);
            CHECK(q->shape == std::vector<int>{c.A * c.D, c.H});
            CHECK((*q)(1 * c.D + 2, 3) == p.layers[1].attn.W_Q[1](3, 2));  // out x in: head 1's column 2, input 3
            const Tensor<float>* tt = st.find(pre + "embeddings.token_type_embeddings.weight");
            REQUIRE(tt);
            if (!roberta) CHECK(((*tt)(0, 1) == p.w_A[1] && (*tt)(1, 1) == p.w_B[1]));  // t_i = 0 -> w_A
            if (roberta && c.pad_id >= 0) CHECK((*st.find(pre + "embeddings.position_embeddings.weight"))(c.pad_id, 2) == p.w_pad[2]);
            const std::string head = roberta ? "lm_head." : "cls.predictions.";
            CHECK(!st.find(head + "decoder.weight"));
            CHECK(static_cast<bool>(st.find(head + "bias")) == c.mlm_head);
            CHECK(static_cast<bool>(st.find(pre + "pooler.dense.weight")) == c.pooler);
        }
        // Read back: the same config and every tensor bit for bit (absent attention biases as zeros).
        LoadedModel lm = load_model(dir + "/model.safetensors");
        const Config& r = lm.config;
        CHECK(r.variant == c.variant);
        CHECK(r.activation == c.activation);
        CHECK(r.eps == c.eps);
        CHECK((r.V == c.V && r.H == c.H && r.F == c.F && r.D == c.D && r.L == c.L && r.A == c.A && r.n_ctx == c.n_ctx));
        CHECK((r.cls_id == c.cls_id && r.sep_id == c.sep_id && r.mask_id == c.mask_id && r.pad_id == c.pad_id));
        CHECK((r.emb_ln == c.emb_ln && r.mlm_head == c.mlm_head && r.pooler == c.pooler));
        CHECK(r.attn_bias);
        for (auto& nt : named_tensors(c, p)) {
            CAPTURE(nt.name);
            const Tensor<float>* back = m_tensor_named(r, lm.params, nt.name);
            REQUIRE(back);
            CHECK(m_bits_equal(*nt.tensor, *back));
        }
        if (!c.attn_bias)
            for (auto& y : lm.params.layers) {
                for (float v : y.attn.b_O.data) CHECK(v == 0.0f);
                for (auto& b : y.attn.b_Q) CHECK(std::all_of(b.data.begin(), b.data.end(), [](float v) { return v == 0.0f; }));
            }
        Batch b = m_batch(c, 5);
        for (int& x : b.tokens)  // ids of this vocabulary (the batch's 0..9 may be special here)
            if (x == 4 && c.pad_id >= 0) x = c.pad_id;  // RoBERTa's <pad> inside: w_pad's row
        CHECK(m_bits_equal(model_forward(c, p, b), model_forward(r, lm.params, b)));
        CHECK(model_loss(c, p, b) == model_loss(r, lm.params, b));
        // The tokenizer comes back with the model, and its files say the same.
        const Tokenizer back = tokenizer_of(lm.file.metadata, dir);
        CHECK(back.kind == tok.kind);
        const std::string text = k.tokenizer == "char" ? m_PROBE : m_PROBE + " hello lower [MASK] <mask>";
        CHECK(back.encode(text) == tok.encode(text));
        const Json tj = parse_json(m_read(dir + "/tokenizer.json"));
        const Json* model = tj.get("model");
        REQUIRE(model);
        const Json* vocab = model->get("vocab");
        REQUIRE(vocab);
        CHECK((int)vocab->obj.size() == tok.size());
        const Json tc = parse_json(m_read(dir + "/tokenizer_config.json"));
        if (k.tokenizer == "char") {
            CHECK(model->get("type")->str == "BPE");
            CHECK(model->get("merges")->arr.empty());
            for (int id = 0; id < tok.size(); id++) CHECK(vocab->get(bytes_to_unicode(tok.chars.chars[id]))->num == id);
            CHECK(tc.get("tokenizer_class")->str == "PreTrainedTokenizerFast");
            CHECK(tj.get("added_tokens")->arr.size() == (is_causal(c.variant) ? 0u : 3u));
            CHECK(!m_exists(dir + "/vocab.json"));
        } else if (k.tokenizer == "bert-wordpiece") {
            CHECK(m_read(dir + "/vocab.txt") == m_WP_VOCAB);
            CHECK(model->get("type")->str == "WordPiece");
            CHECK(vocab->get("##aff")->num == 12);
            CHECK(tc.get("tokenizer_class")->str == "BertTokenizer");
            CHECK(tc.get("do_lower_case")->b);
            CHECK(tj.get("normalizer")->get("lowercase")->b);
        } else {
            CHECK(m_read(dir + "/vocab.json") == tok.encoder_json);
            const std::string merges = m_read(dir + "/merges.txt");
            CHECK(merges.rfind("#version", 0) == 0);
            CHECK(merges.back() == '\n');
            CHECK(model->get("merges")->arr.size() == (k.tokenizer == "gpt1-bpe" ? 7u : k.tokenizer == "roberta-bpe" ? 1u : 4u));
            CHECK(model->get("merges")->arr.at(0).str == (k.tokenizer == "gpt1-bpe" ? "l o" : "h e"));
            CHECK(model->get("end_of_word_suffix")->str == (k.tokenizer == "gpt1-bpe" ? "</w>" : ""));
            const char* cls = k.tokenizer == "gpt1-bpe" ? "OpenAIGPTTokenizer" : k.tokenizer == "roberta-bpe" ? "RobertaTokenizer" : "GPT2Tokenizer";
            CHECK(tc.get("tokenizer_class")->str == cls);
            CHECK(!m_exists(dir + "/vocab.txt"));
        }
    }
}

TEST_CASE("export: refusals name the reason (gpt3, a gpt activation or width the class lacks, no embedding LayerNorm)") {
    Params<float> none;
    M_CHECK_TF_ERROR(export_hf(m_path("i12_never"), preset("tiny-gpt3"), none), "gpt3", "GPTNeoForCausalLM", "1/sqrt(D)");
    Config gpt = preset("tiny-gpt");
    gpt.activation = Activation::gelu_sigmoid;
    CHECK(m_contains(hf_export_problem(gpt), "relu, silu and gelu"));
    CHECK(m_contains(hf_export_problem(gpt), "gelu_sigmoid"));
    gpt.activation = Activation::gelu_erf;
    CHECK(m_contains(hf_export_problem(gpt), "gelu_erf"));
    gpt.activation = Activation::relu, gpt.F = 3 * gpt.H;
    CHECK(m_contains(hf_export_problem(gpt), "4 n_embd"));
    for (const char* name : {"tiny-bert", "tiny-roberta"}) {
        CAPTURE(name);
        Config c = preset(name);
        CHECK(m_contains(hf_export_problem(c), "embeddings.LayerNorm"));
        CHECK(m_contains(hf_export_problem(c), "--mlm-head"));
        c.emb_ln = true;  // BertModel / RobertaModel: only with a pooler (see the case below)
        c.pooler = true;
        CHECK(hf_export_problem(c) == "");
        c.W_y_rows = c.H, c.W_y_cols = 2;
        CHECK(m_contains(hf_export_problem(c), "W_y"));
    }
    Config odd = preset("tiny-gpt2");
    odd.D = odd.H / odd.A + 1;
    CHECK(m_contains(hf_export_problem(odd), "D = H / A"));
    CHECK(!m_exists(m_path("i12_never")));
    // A recorded tokenizer that does not fit the model is an error before anything is written.
    Config g2 = preset("tiny-gpt2");
    Params<float> p = make_params<float>(g2);
    M_CHECK_TF_ERROR(export_hf(m_path("i12_unfit"), g2, p, m_export_tokenizer("gpt2-bpe").metadata()), "recorded tokenizer", "V = 13");
    CHECK(!m_exists(m_path("i12_unfit")));
}

TEST_CASE("CLI: train a BERT and a RoBERTa with --mlm-head, export, and read back the same loss and tokens") {
    const std::string dir = m_path("i12_cli");
    m_make_dir(dir);
    const std::string data = dir + "/data.txt";
    std::string text;
    for (int i = 0; i < 30; i++) text += m_PROBE;
    m_write(data, text);
    m_write(dir + "/probe.txt", m_PROBE);
    const std::string common = " --data " + data + " --steps 2 --warmup 1 --layers 1 --heads 2 --embd 16 --block 16 --eval-every 0 --quiet";
    struct Run {
        std::string name, flags, cls;
    };
    const std::vector<Run> runs = {{"bert", "--model bert --mlm-head --activation relu", "BertForMaskedLM"},
                                   {"roberta", "--model roberta --mlm-head --attn-bias --activation gelu_tanh", "RobertaForMaskedLM"},
                                   {"gpt", "--model gpt --activation gelu_tanh", "OpenAIGPTLMHeadModel"}};
    for (const Run& run : runs) {
        CAPTURE(run.name);
        const std::string ck = dir + "/" + run.name + ".safetensors", hf = dir + "/hf_" + run.name;
        m_run_ok("train " + run.flags + common + " --out " + ck);
        const LoadedModel orig = load_model(ck, {"adam."});
        CHECK(orig.config.mlm_head == (run.name != "gpt"));
        CHECK(orig.config.emb_ln == (run.name != "gpt"));
        const m_Run e = m_run_ok("export --checkpoint " + ck + " --out " + hf);
        CHECK(m_contains(e.out, run.cls));
        CHECK(m_contains(e.out, hf + "/tokenizer.json"));
        const std::string masked = run.name == "gpt" ? "" : " --masked 2,5";
        const m_Run a = m_run_ok("grad --checkpoint " + ck + " --tokens 1,5,9,3,2,7" + masked + " --out " + dir + "/g1.st");
        const m_Run b = m_run_ok("grad --checkpoint " + hf + "/model.safetensors --tokens 1,5,9,3,2,7" + masked + " --out " + dir + "/g2.st");
        CHECK(a.out.substr(0, a.out.find('\n')) == b.out.substr(0, b.out.find('\n')));  // "loss X", printed to 9 digits
        const m_Run ta = m_run_ok("tokenize --checkpoint " + ck + " --file " + dir + "/probe.txt");
        const m_Run tb = m_run_ok("tokenize --checkpoint " + hf + "/model.safetensors --file " + dir + "/probe.txt");
        CHECK(ta.out == tb.out);
        std::string ids;
        for (int id : tokenizer_of(orig.file.metadata, ck).encode(m_PROBE)) ids += (ids.empty() ? "" : ",") + std::to_string(id);
        CHECK(ta.out == ids + "\n");
    }
    m_cli_fails("train --model gpt2 --mlm-head" + common + " --out " + dir + "/x.safetensors", "apply to bert and roberta");
    m_cli_fails("init --preset tiny-gpt --mlm-head --out " + dir + "/x.safetensors", "apply to bert and roberta");
    m_run_ok("init --preset tiny-bert --mlm-head --out " + dir + "/init.safetensors");
    CHECK(load_model(dir + "/init.safetensors").config.mlm_head);
    m_cli_fails("tokenize --checkpoint " + dir + "/init.safetensors --text hi", "records no tokenizer");
    m_cli_fails("tokenize --text hi", "missing flag --vocab");
}

// ================================================================================================
// What a new user's bad inputs and exports showed: the export's classes and tokenizer, interrupted
// exports, help, printed commands, wording, the next token's distribution
// ================================================================================================
TEST_CASE("export: a BERT or RoBERTa without the masked-LM head and without a pooler is refused: BertModel would load pooler.dense with random weights") {
    for (const char* name : {"tiny-bert", "tiny-roberta"}) {
        CAPTURE(name);
        Config c = preset(name);
        c.emb_ln = true;
        const std::string problem = hf_export_problem(c);
        CHECK(m_contains(problem, std::string(c.variant == Variant::bert ? "BertModel" : "RobertaModel") + " has a pooler (pooler.dense)"));
        CHECK(m_contains(problem, "random weights"));
        CHECK(m_contains(problem, "--mlm-head"));
        const std::string dir = m_path(std::string("nopool_") + name);
        const Params<float> p = m_model<float>(c, 3, 0.1);
        M_CHECK_TF_ERROR(export_hf(dir, c, p), "pooler.dense", "random weights");
        CHECK_FALSE(m_exists(dir));
        c.pooler = true;  // a released encoder's pooler: BertModel / RobertaModel then hold every weight
        CHECK(hf_export_problem(c) == "");
        c.pooler = false, c.mlm_head = true;  // BertForMaskedLM / RobertaForMaskedLM have no pooler
        CHECK(hf_export_problem(c) == "");
    }
    // The command line: a RoBERTa trained with --emb-ln alone is refused, and nothing is created.
    const std::string ck = m_path("nopool.safetensors"), out = m_path("nopool_hf");
    m_run_ok("train --model roberta --emb-ln --data " + m_text_file() +
             " --steps 1 --layers 1 --heads 2 --embd 8 --block 8 --eval-every 0 --quiet --out " + ck);
    m_cli_fails("export --checkpoint " + ck + " --out " + out,
                "RobertaModel has a pooler (pooler.dense) and this model has none, so Hugging Face would load it with random weights");
    CHECK_FALSE(m_exists(out));
}

TEST_CASE("export: a character model's tokenizer.json refuses a byte outside its vocabulary, as tokenize does (its unk_token is no token of it)") {
    const CharVocab v = CharVocab::from_text("the cat sat\n");
    for (const char* name : {"tiny-gpt2", "tiny-bert"}) {
        CAPTURE(name);
        Config c = preset(name);
        const bool masked = !is_causal(c.variant);
        c.V = v.size() + (masked ? 3 : 0);
        if (masked) c.cls_id = v.size(), c.sep_id = v.size() + 1, c.mask_id = v.size() + 2, c.emb_ln = c.mlm_head = true;
        Params<float> p = m_model<float>(c, 7, 0.05);
        const std::string ck = m_path(std::string("charunk_") + name + ".st"), dir = m_path(std::string("charunk_") + name);
        save_model(ck, c, p, {{"vocab", v.to_metadata()}});
        m_run_ok("export --checkpoint " + ck + " --out " + dir);
        const Json tj = parse_json(m_read(dir + "/tokenizer.json"));
        const Json* model = tj.get("model");
        REQUIRE(model);
        // With "unk_token": null the tokenizers library drops an unknown byte without a word; a name
        // that is not in the vocabulary makes it fail ("Unk token `...` not found in the vocabulary").
        const Json* unk = model->get("unk_token");
        REQUIRE(unk);
        REQUIRE(unk->type == Json::string);
        CHECK(unk->str == HF_CHAR_OUTSIDE);
        CHECK(model->get("vocab")->get(unk->str) == nullptr);
        for (const Json& added : tj.get("added_tokens")->arr) CHECK(added.get("content")->str != unk->str);
        CHECK_FALSE(model->get("fuse_unk")->b);
        CHECK_FALSE(model->get("byte_fallback")->b);
        // transformer tokenize refuses such a text, from the checkpoint and from the export alike.
        for (const std::string& from : {ck, dir + "/model.safetensors"}) {
            m_cli_fails({"tokenize", "--checkpoint", from, "--text", "the\tcat"}, "character U+0009 at byte 3 (line 1, column 4) of --text is not in the model's vocabulary");
            CHECK(m_run_ok("tokenize --checkpoint " + from + " --text 'the cat'").out != "");
        }
    }
}

TEST_CASE("CLI: help for an unknown command and an unknown flag followed by --help are errors that name them" * doctest::test_suite("command line")) {
    m_cli_fails("help nosuch", "unknown command 'nosuch' (the commands: train,");
    m_cli_fails("--help nosuch", "unknown command 'nosuch'");
    m_cli_fails("help train extra", "takes one command, got 'extra' after 'train'");
    m_cli_fails("train --bogus --help", "unknown flag --bogus for train (its flags: --model, --layers");
    m_cli_fails("train --help --bogus", "unknown flag --bogus for train");
    m_cli_fails("sample --bogus", "unknown flag --bogus for sample");
    m_cli_fails("export --bogus=1 --checkpoint x", "unknown flag --bogus for export");
    m_cli_fails("init --emb-ln=maybe --bogus", "--emb-ln is a switch");  // a known flag's value is checked as before
    CHECK(m_run_ok("help train").out == m_run_ok("train --help").out);
    CHECK(m_run_ok("help").out == m_run_ok("--help").out);
}

TEST_CASE("CLI: every command line it prints starts with the program as it was run (argv[0], quoted for the shell)" * doctest::test_suite("command line")) {
    // As the tests run it, ./transformer: no bare "transformer " starts a printed command.
    CHECK(m_contains(m_run_ok("sample --help").out, "example:\n  " + std::string(m_PROGRAM) + " sample --checkpoint"));
    CHECK_FALSE(m_contains(m_run_ok("--help").out, "usage: transformer "));
    M_SKIP_ON_WINDOWS("a symbolic link to the program (a name with a space), which Windows makes only with a privilege");
    const std::string program = std::filesystem::current_path().generic_string() + "/" + std::string(m_PROGRAM).substr(2);  // m_PROGRAM is ./NAME
    const std::string link = m_path("my tf"), quoted = "'" + link + "'";  // a space: the printed name must be quoted
    std::remove(link.c_str());
    REQUIRE(m_make_symlink(program, link));
    auto run = [&](const std::string& args) {
        std::vector<std::string> argv = {link};
        for (const std::string& word : m_words(args)) argv.push_back(word);
        return m_capture(argv, m_path("argv0"));
    };
    const m_Run overview = run("--help");
    CHECK(overview.status == 0);
    CHECK(m_contains(overview.out, "usage: " + quoted + " COMMAND [flags]   (" + quoted + " COMMAND --help"));
    const m_Run train = run("train --help");
    CHECK(m_contains(train.out, "usage: " + quoted + " train [flags]"));
    CHECK(m_contains(train.out, "example:\n  " + quoted + " train --data "));
    const m_Run bad = run("nosuch");
    CHECK(bad.status == 1);
    CHECK(m_contains(bad.err, "; " + quoted + " --help describes them"));
    const m_Run ex = run("explain --preset tiny-gpt --tokens 1,2");
    INFO("explain's stderr: " << ex.err);
    CHECK(m_contains(ex.out, "`" + quoted + " grad` writes every gradient"));
}

TEST_CASE("StagedDir: until commit only staged files exist; without commit a new directory is removed and an existing one is as it was" * doctest::test_suite("platform")) {
    const std::string fresh = m_path("staged_new");
    {
        StagedDir s(fresh);
        CHECK(s.created());
        write_file_atomic(s.stage("a.txt"), "A");
        CHECK(m_exists(fresh));
        CHECK_FALSE(m_exists(fresh + "/a.txt"));
    }
    CHECK_FALSE(m_exists(fresh));
    const std::string old = m_path("staged_old");
    m_make_dir(old);
    m_write(old + "/a.txt", "old A");
    m_write(old + "/c.txt", "old C");
    {
        StagedDir s(old);
        CHECK_FALSE(s.created());
        write_file_atomic(s.stage("a.txt"), "new A");
        write_file_atomic(s.stage("b.txt"), "B");
        CHECK(m_contains(s.failure("cannot write '" + old + "/.a.txt.staged." + std::to_string(process_id()) + "'"),
                         "cannot write '" + old + "/a.txt'; '" + old + "' unchanged"));
    }
    CHECK(m_read(old + "/a.txt") == "old A");
    CHECK(m_names_in(old, ".").empty());
    CHECK_FALSE(m_exists(old + "/b.txt"));
    {
        StagedDir s(old);
        write_file_atomic(s.stage("a.txt"), "new A");
        write_file_atomic(s.stage("b.txt"), "B");
        s.commit({"c.txt", "d.txt"});  // c.txt an earlier run's, removed; d.txt absent
    }
    CHECK(m_read(old + "/a.txt") == "new A");
    CHECK(m_read(old + "/b.txt") == "B");
    CHECK_FALSE(m_exists(old + "/c.txt"));
    CHECK(m_names_in(old, ".").empty());
    StagedDir one(m_path("staged_one"));
    M_CHECK_TF_ERROR(StagedDir(m_path("staged_two")), "another staged directory");
    CHECK_FALSE(m_exists(m_path("staged_two")));
    CHECK(path_in_dir("hf/", "model.safetensors") == "hf/model.safetensors");
    CHECK(path_in_dir("hf//", "config.json") == "hf/config.json");
    CHECK(path_in_dir("/", "x") == "/x");
}

TEST_CASE("export: an error midway (a write that fails) leaves no new directory, and an earlier export as it was") {
    M_SKIP_ON_WINDOWS("a POSIX shell's ulimit -f (a file size limit) on the program");
    const std::string ck = m_path("mid.st"), ck2 = m_path("mid2.st");
    m_run_ok("init --preset tiny-gpt2 --out " + ck);
    m_run_ok("init --preset tiny-gpt2 --seed 2 --out " + ck2);
    // A file size limit (SIGXFSZ ignored, so the write fails with EFBIG) stops the first file.
    auto limited = [&](const std::string& args) {
        m_Run r;
        const std::string base = m_path("mid_run");
        const std::string cmd = "sh -c \"trap '' XFSZ; ulimit -f 2; exec " + std::string(m_PROGRAM) + " " + args + "\" > " + base +
                                ".out 2> " + base + ".err";
        const int st = std::system(cmd.c_str());
        r.status = m_system_status(st);
        r.err = m_read(base + ".err");
        return r;
    };
    const std::string fresh = m_path("mid_new");
    const m_Run a = limited("export --checkpoint " + ck + " --out " + fresh);
    INFO("stderr: " << a.err);
    CHECK(a.status == 1);
    CHECK(m_contains(a.err, "error: cannot write '" + fresh + "/model.safetensors'"));  // the file asked for, not the staged name
    CHECK(m_contains(a.err, "nothing written ('" + fresh + "' not created)"));
    CHECK_FALSE(m_exists(fresh));
    const std::string earlier = m_path("mid_old");
    m_run_ok("export --checkpoint " + ck + " --out " + earlier);
    const std::string model = m_read(earlier + "/model.safetensors"), config = m_read(earlier + "/config.json");
    const m_Run b = limited("export --checkpoint " + ck2 + " --out " + earlier);
    INFO("stderr: " << b.err);
    CHECK(b.status == 1);
    CHECK(m_contains(b.err, "'" + earlier + "' unchanged"));
    CHECK(m_read(earlier + "/model.safetensors") == model);
    CHECK(m_read(earlier + "/config.json") == config);
    CHECK(m_names_in(earlier, ".").empty());
    const std::string empty = m_path("mid_empty");  // an empty directory of the user's stays
    m_make_dir(empty);
    CHECK(limited("export --checkpoint " + ck + " --out " + empty).status == 1);
    CHECK(m_exists(empty));
    CHECK(m_names_in(empty, "").empty());
}

TEST_CASE("export: SIGINT or SIGTERM while it writes leaves no new directory and no file behind" * doctest::test_suite("model files (long)") * doctest::skip()) {
    M_SKIP_ON_WINDOWS("POSIX signals (SIGINT, SIGTERM) sent to a running program");
    // A model of some 60 MB, so that the signal arrives while the files are written.
    Config c = preset("tiny-gpt2");
    c.V = 60000, c.H = 256, c.A = 4, c.D = 64, c.F = 1024, c.L = 1;
    validate(c);
    Params<float> p = make_params<float>(c);
    init_params(c, p, 1);
    const std::string dir = m_path("sigexp");
    m_make_dir(dir);
    const std::string ck = dir + "/big.st";
    save_model(ck, c, p);
    int caught = 0;
    for (const int sig : {SIGINT, SIGTERM, SIGINT, SIGTERM}) {
        CAPTURE(sig);
        const std::string out = dir + "/hf", base = dir + "/log";
        std::filesystem::remove_all(out);  // the directory that appears is this run's
        m_Child run = m_start("export --checkpoint " + ck + " --out " + out, base);
        m_Exit e;
        bool ended = false;
        for (int k = 0; k < 20000 && !m_exists(out); k++) {  // until the directory appears (at most 20 s)
            if (m_wait(run, e, false)) {
                ended = true;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (!ended) {
            m_send_signal(run, sig);
            REQUIRE(m_wait(run, e));
        }
        INFO("stderr: " << m_read(base + ".err"));
        if (e.signal && !m_exists(out + "/config.json")) {  // stopped while it wrote: the handler removed what it made
            CHECK(e.signal == sig);
            CHECK_FALSE(m_exists(out));
            caught++;
        } else if (e.signal) {  // the signal waited for the renames into place: a whole export
            CHECK(m_exists(out + "/model.safetensors"));
            CHECK(m_names_in(out, ".").empty());
            std::filesystem::remove_all(out);
        } else {  // it finished first: a whole export
            CHECK(e.exited);
            CHECK(e.status == 0);
            CHECK(m_exists(out + "/config.json"));
            std::filesystem::remove_all(out);
        }
        CHECK(m_names_in(dir, ".").empty());
    }
    CHECK_MESSAGE(caught >= 1, "no signal arrived while export ran (each run finished first)");
}

TEST_CASE("CLI help: train's --init-from names GPT-1, export says what each variant needs, the README lists every command and the build's level" * doctest::test_suite("command line")) {
    const std::string train = m_run_ok("train --help").out;
    const std::string init_from = train.substr(train.find("  --init-from "), train.find('\n', train.find("  --init-from ")) - train.find("  --init-from "));
    CHECK(m_contains(init_from, "GPT-1 (openai-gpt), GPT-2, BERT or RoBERTa"));
    CHECK(m_contains(init_from, "config.json"));
    const std::string exp = m_run_ok("export --help").out;
    CHECK(m_contains(exp, "gpt trained with --activation relu or gelu_tanh and F = 4 H"));
    CHECK(m_contains(exp, "--mlm-head"));
    CHECK(m_contains(exp, "pooler"));
    const std::string readme = m_read("README.md");
    REQUIRE_FALSE(readme.empty());
    for (const std::string& cmd : m_COMMANDS) CHECK_MESSAGE(m_contains(readme, "| `" + cmd + "` |"), "README's command table lacks " << cmd);
    CHECK_MESSAGE(m_contains(readme, "| `strip` |"), "README's command table lacks strip");
    // The optimisation level the README names is the Makefile's.
    const std::string makefile = m_read("Makefile");
    const std::size_t defined = makefile.find("\nLEVEL "), level = makefile.find("-O", defined);
    REQUIRE(defined != std::string::npos);
    REQUIRE(level < makefile.find('\n', defined + 1));
    const std::string O = makefile.substr(level, 3);  // "-O2"
    CHECK(m_contains(readme, "`" + O + " "));
    for (const char* other : {"-O0 -march", "-O1 -march", "-O2 -march", "-O3 -march"})
        if (std::string(other).substr(0, 3) != O) CHECK_MESSAGE(!m_contains(readme, other), "README names " << other << "; the Makefile builds " << O);
}

TEST_CASE("explain: a BERT or RoBERTa with the embedding LayerNorm and the masked-LM head, box by box, equals model_forward and model_loss" * doctest::test_suite("teaching")) {
    for (const char* name : {"tiny-bert", "tiny-roberta"})
        for (const bool head : {false, true}) {
            CAPTURE(name);
            CAPTURE(head);
            Config c = preset(name);
            c.emb_ln = true, c.mlm_head = head;
            const Batch b = m_explain_batch(c);
            const Params<double> p = m_model<double>(c, 23, 0.2);
            const Explained<double> e = explain(c, p, b, 64);
            m_check_explained_against_model(c, p, b, e);
            // The extra boxes, with the values the model computes.
            std::map<std::string, std::vector<double>> shown;
            std::vector<std::string> boxes;
            for (const ExplainStep& s : e.steps) {
                boxes.push_back(s.box);
                for (const ExplainTensor& t : s.out) shown[t.name] = t.first;
            }
            auto has_box = [&](const std::string& box) { return std::find(boxes.begin(), boxes.end(), box) != boxes.end(); };
            CHECK(has_box("Embedding LayerNorm"));
            CHECK(has_box("Backward: Embedding LayerNorm"));
            CHECK(has_box("Masked-LM head") == head);
            CHECK(has_box("Backward: masked-LM head") == head);
            ForwardCache<double> k;
            ForwardOptions keep;
            keep.keep_sublayers = true;
            model_forward(c, p, b, &k, keep);
            const Tensor<double>& X0 = k.blocks[0].attn_in;  // X^(0) = LayerNorm_e(E), the first block's input
            for (std::size_t i = 0; i < shown["X^(0)"].size(); i++) CHECK(shown["X^(0)"][i] == doctest::Approx(X0[i]).epsilon(1e-12));
            for (std::size_t i = 0; i < shown["dgamma_e"].size(); i++) CHECK(shown["dgamma_e"][i] == doctest::Approx(e.g.gamma_e[i]).epsilon(1e-9));
            if (head) {
                for (std::size_t i = 0; i < shown["X_t"].size(); i++) CHECK(shown["X_t"][i] == doctest::Approx(k.mlm.X_t[i]).epsilon(1e-12));
                for (std::size_t i = 0; i < shown["dW_t"].size(); i++) CHECK(shown["dW_t"][i] == doctest::Approx(e.g.W_t[i]).epsilon(1e-9));
                for (std::size_t i = 0; i < shown["db_z"].size(); i++) CHECK(shown["db_z"][i] == doctest::Approx(e.g.b_z[i]).epsilon(1e-9));
            }
        }
    // The command line, on a checkpoint init wrote with the head.
    const std::string ck = m_path("explain_mlm.st");
    m_run_ok("init --preset tiny-roberta --mlm-head --out " + ck);
    const m_Run r = m_run_ok("explain --checkpoint " + ck + " --tokens 10,3,12,4,11 --masked 3");
    CHECK(m_contains(r.out, "Embedding LayerNorm:  X^(0) = LayerNorm_e(E)"));
    CHECK(m_contains(r.out, "Masked-LM head:  U = X^(2) W_t + Stack_n(b_t)"));
    CHECK(m_contains(r.out, "Output:  Z = MLMHead(X^(2)) = X_t W_e^T + Stack_n(b_z)"));
    const m_Run g = m_run_ok("grad --checkpoint " + ck + " --tokens 10,3,12,4,11 --masked 3 --out " + m_path("explain_mlm_g.st"));
    const std::string loss = g.out.substr(0, g.out.find('\n'));  // "loss X"
    CHECK(m_contains(r.out, "\n" + loss + " (model_loss"));
}

TEST_CASE("CLI: wording: numbers as written, singular panels, one slash in paths, a divergence hint that fits --grad-clip, masked cells' P" * doctest::test_suite("command line")) {
    // A number in an error as it was written, not std::to_string's "-1.000000".
    const std::string ck = m_path("wording.st");
    m_run_ok("train --data " + m_text_file() + " --steps 1 --layers 1 --heads 2 --embd 8 --block 8 --eval-every 0 --quiet --out " + ck);
    m_cli_fails("sample --checkpoint " + ck + " --prompt the --temperature -1", "--temperature must be >= 0 (0 = greedy), got -1");
    CHECK_FALSE(m_contains(m_run("sample --checkpoint " + ck + " --prompt the --temperature -1").err, "-1.000000"));
    m_cli_fails("train --lr -1 --steps 1", "--lr must be > 0, got -1");
    m_cli_fails("train --lr 0.1 --min-lr 0.5 --steps 1", "--min-lr must be in [0, --lr] = [0, 0.1], got 0.5");
    m_cli_fails("train --beta2 1.5 --steps 1", "--beta2 must be in [0, 1), got 1.5");
    m_cli_fails("train --grad-clip -2 --steps 1", "--grad-clip must be >= 0 (0 = off), got -2");
    m_cli_fails("train --dropout 1 --steps 1", "--dropout must be in [0, 1), got 1");
    // One panel, one token.
    const m_Run one = m_run_ok("attention --checkpoint " + ck + " --tokens 1 --layer 1 --head 1 --out " + m_path("one.svg"));
    CHECK(m_contains(one.out, ": 1 panel ("));
    CHECK(m_contains(one.out, ", 1 token\n"));
    // A directory given with a trailing slash: one slash in every path printed.
    const m_Run ex = m_run_ok("export --checkpoint " + ck + " --out " + m_path("slash_hf") + "/");
    CHECK(m_contains(ex.out, "wrote " + m_path("slash_hf") + "/model.safetensors, "));
    CHECK_FALSE(m_contains(ex.out, "//"));
    const m_Run bp = m_run_ok("bpe --data " + m_text_file() + " --merges 5 --quiet --out " + m_path("slash_bpe") + "/");
    CHECK(m_contains(bp.out, "wrote " + m_path("slash_bpe") + "/encoder.json ("));
    CHECK_FALSE(m_contains(bp.out, "//"));
    // Divergence: with clipping off the hint does not say to lower it.
    const std::string flags = " --data " + m_text_file() + " --steps 20 --warmup 0 --layers 1 --heads 2 --embd 8 --block 8 --eval-every 0 "
                              "--quiet --lr 1e30 --min-lr 0 --out " + m_path("diverged.st");
    const m_Run off = m_run(std::string("train") + flags + " --grad-clip 0");
    CHECK(off.status == 1);
    CHECK(m_contains(off.err, "Lower --lr, or clip the gradient (--grad-clip 1)?"));
    CHECK_FALSE(m_contains(off.err, "or --grad-clip?"));
    const m_Run on = m_run(std::string("train") + flags + " --grad-clip 1");
    CHECK(on.status == 1);
    CHECK(m_contains(on.err, "Lower --lr or --grad-clip?"));
    // The attention picture's masked cells show P = 0; the masks picture keeps the mask's -inf.
    const Config c = preset("tiny-gpt2");
    const Params<float> p = m_model<float>(c, 3, 0.1);
    const std::vector<HeatPanel> panels = attention_panels(c, p, {1, 2, 3}, {"a", "b", "c"}, 1, 1);
    const std::string att = heatmap_svg(panels, 1, "t", {}, true);
    CHECK(m_contains(att, "class='masked' fill='url(#hatch)'><title>0 (masked: Mask_ij = -inf)</title>"));
    CHECK_FALSE(m_contains(att, "<title>-inf</title>"));
    for (const m_SvgPanel& q : m_svg_panels(att))
        for (std::size_t a = 0; a < q.masked.size(); a++)
            if (q.masked[a]) CHECK(q.values[a] == 0.0);
    CHECK(m_contains(masks_svg(4, 2, 2, {0, 1, 2, 3}), "<title>-inf</title>"));
}

TEST_CASE("sample --top-probs: the K most likely next tokens with Softmax(z) of model_forward's last row, sorted, summing to at most 1" * doctest::test_suite("runs")) {
    Config c = preset("tiny-gpt2");
    const CharVocab v = CharVocab::from_text("the cat sat on a mat\n");
    c.V = v.size();
    Params<float> p = m_model<float>(c, 41, 0.5);
    const std::string ck = m_path("topprobs.st");
    save_model(ck, c, p, {{"vocab", v.to_metadata()}});
    const std::vector<int> x = v.encode("the ca");
    // Softmax of the last row, in double.
    Batch b;
    b.n = (int)x.size(), b.tokens = x;
    const Tensor<float> Z = model_forward(c, p, b);
    std::vector<double> P(c.V);
    double m = -1e300, sum = 0;
    for (int j = 0; j < c.V; j++) m = std::max(m, (double)Z(b.n - 1, j));
    for (int j = 0; j < c.V; j++) sum += P[j] = std::exp((double)Z(b.n - 1, j) - m);
    for (double& q : P) q /= sum;
    // The library: every id with its probability, most likely first.
    const std::vector<TokenProb> all = next_token_probs(c, p, x, 1000);
    REQUIRE((int)all.size() == c.V);
    double total = 0;
    for (std::size_t r = 0; r < all.size(); r++) {
        CHECK(all[r].p == doctest::Approx(P[all[r].id]).epsilon(1e-12));
        if (r) CHECK(all[r - 1].p >= all[r].p);
        total += all[r].p;
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
    // The command: 5 lines of rank, probability, id, token.
    const m_Run r = m_run_ok("sample --checkpoint " + ck + " --prompt 'the ca' --top-probs 5");
    std::istringstream lines(r.out);
    std::string line;
    std::getline(lines, line);
    CHECK(m_contains(line, "the next token after 6 tokens: the 5 most likely of V = " + std::to_string(c.V)));
    std::getline(lines, line);
    CHECK(line == "rank  probability     id  token");
    double shown_sum = 0, last = 2;
    int rank = 0;
    while (std::getline(lines, line)) {
        std::istringstream f(line);
        int k = 0, id = -1;
        double prob = -1;
        std::string token;
        f >> k >> prob >> id >> token;
        CAPTURE(line);
        CHECK(k == ++rank);
        REQUIRE((id >= 0 && id < c.V));
        CHECK(prob == doctest::Approx(P[id]).epsilon(1e-6).scale(1e-9));
        CHECK(id == all[rank - 1].id);
        CHECK(token == token_label(v.decode({id})));
        CHECK(prob <= last);
        last = prob, shown_sum += prob;
    }
    CHECK(rank == 5);
    CHECK(shown_sum <= 1.0 + 1e-8);
    // It draws nothing: the sampling flags do not apply; a count is positive; a GPT only.
    m_cli_fails("sample --checkpoint " + ck + " --prompt the --top-probs 3 --temperature 0.5", "--temperature does not apply with --top-probs");
    m_cli_fails("sample --checkpoint " + ck + " --prompt the --top-probs 3 --tokens 4", "--tokens does not apply with --top-probs");
    m_cli_fails("sample --checkpoint " + ck + " --prompt the --top-probs 0", "--top-probs must be positive, got 0");
    m_cli_fails("sample --checkpoint " + ck + " --prompt the --top-probs x", "--top-probs expects an integer, got 'x'");
    CHECK(m_contains(m_run_ok("sample --help").out, "  --top-probs K  draw nothing"));
    const std::string bert = m_path("topprobs_bert.st");
    m_run_ok("init --preset tiny-bert --out " + bert);
    m_cli_fails("sample --checkpoint " + bert + " --prompt x --top-probs 3", "sample needs a gpt, gpt2 or gpt3 model");
    M_CHECK_TF_ERROR(next_token_probs(preset("tiny-bert"), m_model<float>(preset("tiny-bert"), 1, 0.1), {1, 2}, 3), "does not predict");
}
TEST_SUITE_END();

// ================================================================================================
// Training
// ================================================================================================
TEST_SUITE_BEGIN("runs");
TEST_CASE("corpus_loss: consecutive windows of n_ctx + 1 ids, each weighted by its predicted tokens") {
    const Config c = preset("tiny-gpt2");
    const int n = c.n_ctx;
    const Params<double> p = m_model<double>(c, 3, 0.05);
    Rng r(11);
    const std::vector<int> ids = m_random_ids(2 * n + 5, 10, r);
    auto window = [&](int start, int m) {  // x_{start+1..start+m} predicting x_{start+2..start+m+1}
        Batch b;
        b.n = m;
        b.tokens.assign(ids.begin() + start, ids.begin() + start + m);
        b.targets.assign(ids.begin() + start + 1, ids.begin() + start + m + 1);
        return model_loss(c, p, b);
    };
    const double expected = (n * window(0, n) + n * window(n, n) + 4 * window(2 * n, 4)) / (2.0 * n + 4);
    long long count = 0;
    CHECK(corpus_loss(c, p, ids, 1, &count) == doctest::Approx(expected).epsilon(1e-12));
    CHECK(count == 2 * n + 4);  // every id but the first is predicted once
    const std::vector<int> one(ids.begin(), ids.begin() + n + 1);
    CHECK(corpus_loss(c, p, one, 1, &count) == doctest::Approx(window(0, n)).epsilon(1e-12));
    CHECK(count == n);
    CHECK_THROWS_AS(corpus_loss(c, p, std::vector<int>{3}, 1), Error);

    const Config cb = preset("tiny-bert");
    const Params<double> pb = m_model<double>(cb, 4, 0.05);
    const std::vector<int> text = m_random_ids(3 * cb.n_ctx, 10, r);
    long long masked = 0;
    const double lb = corpus_loss(cb, pb, text, 7, &masked);
    CHECK(masked > 0);
    CHECK(masked < (long long)text.size() / 2);  // about 15% of the positions
    CHECK(std::isfinite(lb));
    CHECK(corpus_loss(cb, pb, text, 7) == lb);  // the masking is drawn from the seed
    // cls_sep: windows of n_ctx - 2 ids, each read as [CLS] window [SEP]; the specials never predicted.
    Rng rw(7);
    double sum = 0;
    long long m_all = 0;
    const int body = cb.n_ctx - 2;
    for (std::size_t start = 0; start < text.size(); start += body) {
        std::vector<int> w = {cb.cls_id};
        w.insert(w.end(), text.begin() + start, text.begin() + std::min(text.size(), start + body));
        w.push_back(cb.sep_id);
        const MLMExample e = mlm_corrupt(w, 1, (int)w.size(), cb, rw);
        CHECK(e.targets.front() == -1);
        CHECK(e.targets.back() == -1);
        long long m = 0;
        for (int t : e.targets) m += t >= 0;
        Batch b;
        b.n = (int)w.size(), b.tokens = e.tokens, b.targets = e.targets;
        sum += model_loss(cb, pb, b) * (double)m, m_all += m;
    }
    long long wrapped = 0;
    CHECK(corpus_loss(cb, pb, text, 7, &wrapped, 0, true) == doctest::Approx(sum / (double)m_all).epsilon(1e-12));
    CHECK(wrapped == m_all);
    CHECK(corpus_loss(cb, pb, text, 7, nullptr, 0, true) != lb);
    CHECK_THROWS_AS(corpus_loss(c, p, ids, 1, nullptr, 0, true), Error);  // a GPT has no [CLS]
}

// The largest |a - b| over every parameter of two models of the same shape.
double m_max_param_diff(const LoadedModel& a, const LoadedModel& b) {
    const auto A = named_tensors(a.config, const_cast<Params<float>&>(a.params));
    const auto B = named_tensors(b.config, const_cast<Params<float>&>(b.params));
    REQUIRE(A.size() == B.size());
    double d = 0;
    for (std::size_t j = 0; j < A.size(); j++) {
        REQUIRE(A[j].tensor->data.size() == B[j].tensor->data.size());
        for (std::size_t i = 0; i < A[j].tensor->data.size(); i++)
            d = std::max(d, (double)std::fabs(A[j].tensor->data[i] - B[j].tensor->data[i]));
    }
    return d;
}

TEST_CASE("train: --accum 2 with batch 8 takes the steps of batch 16 (the mean of the two batches' gradients)") {
    // Without dropout the generator draws only window starts, so two batches of 8 are the 16 windows of one batch.
    auto run = [](int batch, int accum, const std::string& name) {
        TrainOptions o = m_small_train(m_path(name));
        o.batch = batch, o.accum = accum, o.dropout = 0, o.steps = 3, o.warmup = 1;
        const TrainResult r = train(o);
        return std::make_pair(r.train_losses, load_model(o.out, {"adam."}));
    };
    const auto one = run(16, 1, "accum_16x1.safetensors"), two = run(8, 2, "accum_8x2.safetensors"),
               half = run(8, 1, "accum_8x1.safetensors");
    REQUIRE(one.first.size() == 3);
    for (int k = 0; k < 3; k++) CHECK(two.first[k] == doctest::Approx(one.first[k]).epsilon(1e-5));
    CHECK(two.first[0] != doctest::Approx(half.first[0]).epsilon(1e-5));  // the first batch of 8 alone differs
    const auto max_diff = m_max_param_diff;
    CHECK(max_diff(one.second, two.second) < 1e-4);  // float sums in another order; a step moves weights by ~lr = 1e-2
    CHECK(max_diff(one.second, half.second) > 1e-3);
    CHECK(two.second.file.metadata.at("train.accum") == "2");
    TrainOptions bad = m_small_train(m_path("accum_bad.safetensors"));
    bad.accum = 0;
    M_CHECK_TF_ERROR(train(bad), "--accum must be 1..65536");
}

TEST_CASE("train: --val FILE is the validation split (its whole-split loss is eval's on it), recorded and checked on resume") {
    const std::string val = m_path("val_only.txt"), out = m_path("val_run.safetensors");
    m_write(val, "the lazy dog jumps over the quick brown fox; abe abd abc.\nthe quick brown fox; abc.\n");
    TrainOptions o = m_small_train(out);
    o.val_data = val, o.steps = 20, o.eval_every = 20;  // validated at the last step, then the whole split
    const TrainResult r = train(o);
    LoadedModel lm = load_model(out, {"adam."});
    const auto& md = lm.file.metadata;
    CHECK(md.at("train.val_data") == val);
    CHECK(md.at("train.val_data_bytes") == std::to_string(m_read(val).size()));
    // The whole-split loss at the end is the loss of the --val text, as eval measures it.
    const CharVocab v = CharVocab::from_metadata(md.at("vocab"));
    const double expected = corpus_loss(lm.config, lm.params, v.encode(m_read(val)), 1234, nullptr, o.block);
    CHECK(r.val_loss_split == doctest::Approx(expected).epsilon(1e-9));
    TrainOptions plain = m_small_train(m_path("val_plain.safetensors"));
    plain.steps = 20;
    CHECK(train(plain).val_loss_split != doctest::Approx(r.val_loss_split));  // the last 10% of --data is another text
    // Resume finds and checks the recorded file; a changed one is refused, naming it.
    const m_Run ok = m_run("train --resume " + out + " --steps 22 --quiet");
    INFO(ok.err);
    CHECK(ok.status == 0);
    m_write(val, "the lazy dog jumps over the quick brown fox; abe abd abc.\nthe quick brown fox; abd.\n");
    m_cli_fails("train --resume " + out + " --steps 24 --quiet", "the validation data '" + val + "' has changed");
    // Errors: a character outside --data's vocabulary, no --data, --val on a run trained without it.
    m_write(m_path("val_bad.txt"), std::string(80, 'Z'));
    M_CHECK_TF_ERROR(train([&] { TrainOptions b = m_small_train(m_path("val_x.safetensors")); b.val_data = m_path("val_bad.txt"); return b; }()),
                     "val_bad.txt");
    m_write(m_path("val_short.txt"), "the fox\n");
    M_CHECK_TF_ERROR(train([&] { TrainOptions b = m_small_train(m_path("val_x.safetensors")); b.val_data = m_path("val_short.txt"); return b; }()),
                     "--val '" + m_path("val_short.txt") + "' is too short: 8 tokens");
    TrainOptions task = m_small_train(m_path("val_x.safetensors"));
    task.data = "", task.val_data = val, task.block = 0;
    M_CHECK_TF_ERROR(train(task), "--val needs --data");
    m_cli_fails("train --resume " + m_path("val_plain.safetensors") + " --val " + val + " --steps 22", "--val: '" + m_path("val_plain.safetensors") + "' was trained without --val");
    CHECK(!m_exists(m_path("val_x.safetensors")));
}

TEST_CASE("train: a tiny GPT-2 run on a text file lowers the loss and writes .safetensors, .csv, .svg" * doctest::test_suite("assignment 6")) {
    TrainOptions o = m_small_train(m_path("train_small.safetensors"));
    o.eval_every = 60;  // validated at the last step, then the whole split
    const TrainResult r = train(o);
    REQUIRE(r.train_losses.size() == 60);
    CHECK(r.steps_done == 60);
    double first = 0, last = 0;
    for (int k = 0; k < 10; k++) first += r.train_losses[k] / 10, last += r.train_losses[50 + k] / 10;
    MESSAGE("mean loss of the first 10 steps " << first << ", of the last 10 " << last);
    INFO("train (tiny GPT-2 on a text file, 60 steps; every step calls clip_grad_norm, lr_schedule and adamw_step, "
         "formulas §29-§31): mean loss of the first 10 steps " << first << ", of the last 10 " << last
         << ", validation " << r.val_loss);
    CHECK_MESSAGE(last < first - 0.5, "the mean loss of the last 10 steps must be at least 0.5 below that of the first 10");
    CHECK_MESSAGE(r.val_loss > 0, "the validation loss must be positive");
    CHECK_MESSAGE(std::isfinite(r.val_loss), "the validation loss must be finite");
    CHECK(r.accuracy == -1);  // a text file, not the built-in task
    CHECK(r.val_loss_split > 0);  // the whole validation split, measured at the end
    CHECK(std::fabs(r.val_loss_split - r.val_loss) < 0.5);
    CHECK(m_exists(m_path("train_small.safetensors")));
    CHECK_FALSE(m_exists(m_path("train_small.safetensors.tmp")));
    const std::string csv = m_read(m_path("train_small.csv"));
    CHECK(csv.rfind("step,train_loss,val_loss,lr\n", 0) == 0);
    CHECK(std::count(csv.begin(), csv.end(), '\n') == 61);
    CHECK(m_contains(csv, "\n60,"));
    CHECK(m_read(m_path("train_small.svg")).rfind("<svg", 0) == 0);
    LoadedModel lm = load_model(m_path("train_small.safetensors"), {"adam."});
    CHECK(lm.config.variant == Variant::gpt2);
    CHECK(lm.config.H == 16);
    CHECK(lm.config.n_ctx == 16);
    CHECK(lm.file.metadata.count("vocab") == 1);
    CHECK(lm.file.metadata["train.step"] == "60");
    CHECK(lm.file.find("adam.m.W_e") != nullptr);
    CHECK(lm.file.find("adam.v.ln_f.gamma") != nullptr);
}

TEST_CASE("train: resuming at step 20 gives the losses and weights of an uninterrupted run, bit for bit") {
    for (const std::string model : {"gpt3", "bert"}) {
        CAPTURE(model);
        TrainOptions u = m_small_train(m_path("resume_u_" + model + ".safetensors"));
        u.model = model, u.steps = 40, u.eval_every = 10, u.dropout = 0.1;
        const TrainResult ru = train(u);
        REQUIRE(ru.train_losses.size() == 40);

        TrainOptions a = u;
        a.out = m_path("resume_a_" + model + ".safetensors");
        a.stop_at = 20;
        const TrainResult ra = train(a);
        REQUIRE(ra.train_losses.size() == 20);
        CHECK(ra.steps_done == 20);
        for (int s = 0; s < 20; s++) CHECK(ra.train_losses[s] == ru.train_losses[s]);

        TrainOptions b;
        b.resume = a.out;
        b.steps = 40;
        b.quiet = true;
        b.out = m_path("resume_b_" + model + ".safetensors");
        const TrainResult rb = train(b);
        REQUIRE(rb.train_losses.size() == 20);  // the steps of this call: 21..40
        CHECK(rb.steps_done == 40);
        for (int s = 0; s < 20; s++) {
            CAPTURE(s + 21);
            CHECK(rb.train_losses[s] == ru.train_losses[20 + s]);
        }
        CHECK(rb.val_loss == ru.val_loss);
        LoadedModel mu = load_model(u.out, {"adam."}), mb = load_model(b.out, {"adam."});
        CHECK(m_params_bits_equal(mu.config, mu.params, mb.params));
        const Tensor<float>*vu = mu.file.find("adam.v.W_e"), *vb = mb.file.find("adam.v.W_e");
        REQUIRE(vu);
        REQUIRE(vb);
        CHECK(m_bits_equal(*vu, *vb));
        // The CSV of the resumed run covers all 40 steps.
        const std::string csv = m_read(m_path("resume_b_" + model + ".csv"));
        CHECK(std::count(csv.begin(), csv.end(), '\n') == 41);
        CHECK(m_contains(csv, "\n1,"));
        CHECK(m_contains(csv, "\n40,"));
        // Resuming a finished run has nothing to do: no step, no file.
        TrainOptions again = b;
        again.resume = b.out;
        again.out = m_path("resume_again.safetensors");
        long long done = -1;
        const std::string warned = m_stderr_of([&] { done = train(again).steps_done; });
        CHECK(done == 0);
        CHECK(m_contains(warned, "is already at step 40 and --steps is 40: nothing to train, no file written"));
        CHECK_FALSE(m_exists(again.out));
    }
}

TEST_CASE("train: a tampered training checkpoint is a tf::Error naming the problem, not a crash") {
    TrainOptions o = m_small_train(m_path("tamper_src.safetensors"));
    o.steps = 4, o.stop_at = 2, o.warmup = 1;
    train(o);
    LoadedModel lm = load_model(o.out, {"adam."});
    auto rewrite = [&](const std::string& key, const std::string& value) {
        std::map<std::string, std::string> meta = lm.file.metadata;
        if (value.empty()) meta.erase(key);
        else meta[key] = value;
        std::vector<std::pair<std::string, const Tensor<float>*>> extra;
        for (auto& kv : lm.file.tensors) extra.push_back({kv.first, &kv.second});
        const std::string f = m_path("tampered.safetensors");
        save_model(f, lm.config, lm.params, meta, extra);
        TrainOptions r;
        r.resume = f, r.steps = 4, r.quiet = true, r.out = m_path("tampered_out.safetensors");
        return r;
    };
    M_CHECK_TF_ERROR(train(rewrite("train.seed", "abc")), "train.seed");
    M_CHECK_TF_ERROR(train(rewrite("train.rng", "xyz")), "train.rng");
    M_CHECK_TF_ERROR(train(rewrite("train.step", "two")), "train.step");
    M_CHECK_TF_ERROR(train(rewrite("vocab", "")), "vocab");
    M_CHECK_TF_ERROR(train(rewrite("train.log", "step,train_loss,val_loss,lr\nabc,def,,\n")), "train.log");
    M_CHECK_TF_ERROR(train(rewrite("train.log", "step,train_loss,val_loss,lr\n1e300,2.5,,\n")), "train.log", "step 1e300",
                     "whole number");
    M_CHECK_TF_ERROR(train(rewrite("train.log", "step,train_loss,val_loss,lr\n-1,2.5,,\n")), "train.log", "step -1");
}

TEST_CASE("train: attn_bias trains the attention biases, saves them, and a resumed run keeps them") {
    TrainOptions o = m_small_train(m_path("train_bias.safetensors"));
    o.attn_bias = true;
    o.steps = 20;
    const TrainResult r = train(o);
    CHECK(r.train_losses.back() < r.train_losses.front());
    LoadedModel lm = load_model(m_path("train_bias.safetensors"), {"adam."});
    REQUIRE(lm.config.attn_bias);
    auto nonzero = [](const Tensor<float>& t) { return std::any_of(t.data.begin(), t.data.end(), [](float v) { return v != 0; }); };
    CHECK(nonzero(lm.params.layers[0].attn.b_Q[1]));  // initialised to 0, moved by AdamW
    CHECK(nonzero(lm.params.layers[0].attn.b_O));
    TrainOptions ro;
    ro.resume = m_path("train_bias.safetensors");
    ro.out = "";  // continue in the same file
    ro.steps = 25;
    ro.quiet = true;
    CHECK(train(ro).steps_done == 25);
    LoadedModel lm2 = load_model(m_path("train_bias.safetensors"), {"adam."});
    CHECK(lm2.config.attn_bias);
    CHECK(nonzero(lm2.params.layers[0].attn.b_V[0]));
    CHECK_FALSE(m_bits_equal(lm2.params.layers[0].attn.b_V[0], lm.params.layers[0].attn.b_V[0]));  // trained on
}

TEST_CASE("train: the built-in addition task runs and reports a held-out accuracy") {
    TrainOptions o;
    o.model = "gpt";
    o.layers = 1, o.heads = 2, o.embd = 16, o.batch = 8, o.steps = 20, o.warmup = 2, o.eval_every = 0, o.eval_steps = 1;
    o.quiet = true;
    o.out = m_path("task.safetensors");
    const TrainResult r = train(o);
    CHECK(r.train_losses.size() == 20);
    CHECK(r.accuracy >= 0);
    CHECK(r.accuracy <= 1);
    LoadedModel lm = load_model(o.out, {"adam."});
    CHECK(lm.config.n_ctx == 12);
    CHECK(lm.config.V == 13);
}

TEST_CASE("train: bad data and bad options are tf::Errors") {
    const std::string empty = m_path("empty.txt"), binary = m_path("binary.bin"), tiny = m_path("short.txt");
    m_write(empty, "");
    std::string bin;
    for (int k = 0; k < 2000; k++) bin += (char)(k * 37 % 256);
    m_write(binary, bin);
    m_write(tiny, "hello world\n");
    TrainOptions o = m_small_train(m_path("bad_train.safetensors"));
    o.steps = 2;
    o.data = empty;
    M_CHECK_TF_ERROR(train(o), "empty.txt", "empty");
    o.data = binary;
    M_CHECK_TF_ERROR(train(o), "binary.bin", "binary");
    o.data = tiny;
    M_CHECK_TF_ERROR(train(o), "short.txt", "too short: 12 bytes (12 tokens)");
    o.data = m_path("missing.txt");
    M_CHECK_TF_ERROR(train(o), "missing.txt");
    o = m_small_train(m_path("bad_train.safetensors"));
    o.heads = 3;
    M_CHECK_TF_ERROR(train(o), "divisible");
    o = m_small_train(m_path("bad_train.safetensors"));
    o.dropout = 1.5;
    M_CHECK_TF_ERROR(train(o), "dropout");
    o = m_small_train(m_path("bad_train.safetensors"));
    o.model = "gpt5";
    M_CHECK_TF_ERROR(train(o), "gpt5");
    o = m_small_train(m_path("bad_train.safetensors"));
    o.lr = 0;
    M_CHECK_TF_ERROR(train(o), "lr");
    o = m_small_train(m_path("bad_train.safetensors"));
    o.resume = m_path("no_such_checkpoint.safetensors");
    M_CHECK_TF_ERROR(train(o), "no_such_checkpoint");
    // A checkpoint that is not a training checkpoint.
    const Config c = preset("tiny-gpt2");
    Params<float> p = make_params<float>(c);
    init_params(c, p, 1);
    save_model(m_path("plain.safetensors"), c, p);
    o.resume = m_path("plain.safetensors");
    M_CHECK_TF_ERROR(train(o), "plain.safetensors");
    CHECK_FALSE(m_exists(m_path("bad_train.safetensors")));
}

TEST_CASE("train --line-windows: windows start at newlines with a whole window after them") {
    // ids: 0 = newline; n = 3 needs 4 ids from the start on.
    const std::vector<int> ids = {0, 5, 6, 0, 7, 8, 9, 0, 1};
    CHECK(line_window_starts(ids, 0, 3) == std::vector<int>{0, 3});  // 7 has only 2 ids after it
    CHECK(line_window_starts(ids, 0, 1) == std::vector<int>{0, 3, 7});
    CHECK(line_window_starts(ids, -1, 3).empty());  // no newline in the vocabulary
    const std::string dir = m_path("linewin");
    m_make_dir(dir);
    std::string lines;
    for (int i = 0; i < 200; i++) lines += "ab" + std::string(1 + i % 5, 'c') + "\n";
    m_write(dir + "/lines.txt", lines);
    m_write(dir + "/flat.txt", std::string(4000, 'a'));
    m_run_ok("train --data " + dir + "/lines.txt --line-windows --block 8 --layers 1 --embd 16 --heads 2 --steps 2 "
             "--eval-every 0 --quiet --out " + dir + "/m.safetensors");
    CHECK(load_model(dir + "/m.safetensors", {"adam."}).file.metadata.at("train.line_windows") == "1");
    const m_Run flat = m_run("train --data " + dir + "/flat.txt --line-windows --block 8 --steps 2 --out " + dir + "/f.safetensors");
    CHECK(flat.status == 1);
    CHECK(m_contains(flat.err, "--line-windows: the training (first 90%) split"));
    CHECK(m_contains(flat.err, "has no newline"));
    const m_Run task = m_run("train --line-windows --steps 2 --out " + dir + "/t.safetensors");
    CHECK(task.status == 1);
    CHECK(m_contains(task.err, "not to the built-in task"));
}

TEST_CASE("training: AdamW, the cosine schedule and clipping take a tiny GPT-2 on the built-in addition task below loss 1.6" * doctest::test_suite("assignment 6")) {
    // Assignment 6 of docs/assignments.md: adamw_step, lr_schedule and clip_grad_norm are what
    // train's loop calls each step; with them a 1-layer GPT-2 takes the built-in 3-digit addition
    // task (no data file) from about log 13 = 2.56 nats per answer token to below the stated loss in
    // 300 steps (about 1.39: the units digit, the thousands digit and the newline learnt; the other
    // digits need the carry and some 1000 steps of a 2-layer model, too slow for a student's check).
#ifdef TF_TESTS_DEBUG
    MESSAGE("300 training steps take half a minute under the sanitizers: run by ./tests; the cases of adamw_step, "
            "lr_schedule and clip_grad_norm run here");
#else
    TrainOptions o;  // o.data empty: the built-in task
    o.model = "gpt2";
    o.layers = 1, o.heads = 2, o.embd = 32, o.batch = 16, o.steps = 300, o.warmup = 20;
    o.eval_every = 0, o.eval_steps = 4;
    o.lr = 1e-2, o.min_lr = 1e-3, o.dropout = 0;
    o.quiet = true;
    o.out = m_path("assignment6.safetensors");
    const TrainResult r = train(o);
    REQUIRE(r.train_losses.size() == 300);
    double last = 0;
    for (int k = 300 - 20; k < 300; k++) last += r.train_losses[k] / 20;
    INFO("train (1-layer GPT-2, H 32, the built-in addition task, 300 steps, lr 1e-2 to 1e-3, warm-up 20), which calls "
         "clip_grad_norm, lr_schedule and adamw_step every step (formulas §29-§31): first step's loss "
         << r.train_losses[0] << ", mean of the last 20 " << last << ", validation " << r.val_loss
         << ", held-out accuracy " << r.accuracy);
    CHECK_MESSAGE(r.train_losses[0] > 2.3, "the first step's loss must be about log 13 = 2.56 (above 2.3): "
                                           "the model starts untrained");
    CHECK_MESSAGE(last < 1.6, "the mean training loss of the last 20 steps must fall below 1.6 (a correct AdamW, schedule "
                              "and clipping reach about 1.39)");
    CHECK_MESSAGE(r.val_loss < 1.6, "the validation loss must fall below 1.6 (a correct solution reaches about 1.39)");
#endif
}

// ================================================================================================
// Starting from a checkpoint's weights (train --init-from)
// ================================================================================================
TEST_CASE("init-from: fine-tuning starts from the file's weights bit for bit (ours and the exported HF file), fresh optimiser") {
    const std::string base = m_path("i11_base.safetensors");
    TrainOptions a = m_small_train(base);
    a.steps = 20, a.eval_steps = 3, a.dropout = 0, a.eval_every = 20;
    const TrainResult ra = train(a);
    // The validation batches depend only on the seed, batch and block: the same numbers at the start
    // of the fine-tuning run mean the same weights.
    TrainOptions b = m11_init_from(base, m_path("i11_ft.safetensors"));
    b.dropout = 0;
    const TrainResult rb = train(b);
    CHECK(rb.val_loss_before == ra.val_loss);
    CHECK(rb.steps_done == 5);
    LoadedModel ft = load_model(b.out, {"adam."});
    CHECK(ft.file.metadata.at("train.step") == "5");  // steps count from 0 again
    CHECK(ft.file.metadata.at("adam.t") == "5");
    CHECK(ft.file.metadata.at("train.init_from") == base);
    CHECK(ft.file.metadata.at("vocab") == load_model(base, {"adam."}).file.metadata.at("vocab"));
    LoadedModel orig = load_model(base, {"adam."});
    CHECK(ft.config.L == orig.config.L);
    CHECK(ft.config.H == orig.config.H);
    CHECK(!m_params_bits_equal(ft.config, ft.params, orig.params));  // it did train
    // A step of lr 1e-30 moves no weight of this size by half a unit in the last place: what is
    // saved after it is the file's weights, bit for bit.
    TrainOptions z = m11_init_from(base, m_path("i11_ft_zero.safetensors"));
    z.steps = 1, z.lr = 1e-30, z.min_lr = 0, z.warmup = 0;
    train(z);
    LoadedModel same = load_model(z.out, {"adam."});
    CHECK(m_params_bits_equal(same.config, same.params, orig.params));
    // The same through Hugging Face's layout (attention biases come back as zeros: same sums).
    const std::string dir = m_path("i11_base_hf");
    export_hf(dir, orig.config, orig.params, {{"vocab", orig.file.metadata.at("vocab")}});
    TrainOptions h = m11_init_from(dir + "/model.safetensors", m_path("i11_ft_hf.safetensors"));
    h.dropout = 0;
    const TrainResult rh = train(h);
    CHECK(rh.val_loss_before == ra.val_loss);
    CHECK(load_model(h.out, {"adam."}).config.attn_bias);
}

TEST_CASE("init-from: flags that contradict the file, and bad inputs, are errors") {
    const std::string base = m_path("i11_contra.safetensors");
    TrainOptions a = m_small_train(base);
    a.steps = 3, a.warmup = 1;
    train(a);  // L=1, A=2, H=16, F=64, n_ctx=16, gelu_sigmoid, no attention biases
    const std::string out = m_path("i11_contra_out.safetensors");
    auto with = [&](const std::function<void(TrainOptions&)>& set) {
        TrainOptions o = m11_init_from(base, out);
        set(o);
        return o;
    };
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.layers = 2; })), "--layers 2", "L = 1");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.heads = 4; })), "--heads 4", "A = 2");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.embd = 32; })), "--embd 32", "H = 16");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.ffn = 10; })), "--ffn 10", "F = 64");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.model = "gpt"; })), "--model gpt", "gpt2");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.activation = "relu"; })), "--activation relu", "gelu_sigmoid");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.attn_bias = true; })), "--attn-bias", "no attention biases");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.gpt2_init = true; })), "--gpt2-init");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.block = 17; })), "--block 17", "n_ctx = 16");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.resume = o.init_from; })), "--init-from and --resume");
    M_CHECK_TF_ERROR(train(with([](TrainOptions& o) { o.init_from = m_path("i11_missing.safetensors"); })), "cannot open");
    CHECK_NOTHROW(train(with([&](TrainOptions& o) { o.layers = 1, o.heads = 2, o.embd = 16, o.block = 8, o.out = out + ".ok.safetensors"; })));  // agreeing flags, shorter windows
    // A character the checkpoint's vocabulary lacks is named.
    const std::string euro = m_path("i11_euro.txt");
    m_write(euro, std::string(300, 'a') + "\xE2\x82\xAC" + std::string(300, 'b'));
    M_CHECK_TF_ERROR(train(with([&](TrainOptions& o) { o.data = euro; })), "U+20AC", "i11_euro.txt");
    // GPT-2's BPE on a character model; a bare Hugging Face file needs the tokenizer, of its size.
    const std::string enc = m_path("i11_c_enc.json"), merges = m_path("i11_c_merges.bpe");
    m11_write_bpe(enc, merges);
    M_CHECK_TF_ERROR(train(with([&](TrainOptions& o) { o.encoder = enc, o.bpe_vocab = merges; })), "trained on characters");
    LoadedModel lm = load_model(base, {"adam."});
    const std::string dir = m_path("i11_contra_hf"), bare_dir = m_path("i11_contra_bare"), bare = bare_dir + "/model.safetensors";
    export_hf(dir, lm.config, lm.params);
    m_make_dir(bare_dir);
    m11_strip_metadata(dir + "/model.safetensors", bare);  // as released: config.json beside it, no tokenizer
    m_write(bare_dir + "/config.json", m_read(dir + "/config.json"));
    M_CHECK_TF_ERROR(train(with([&](TrainOptions& o) { o.init_from = bare; })), "records no tokenizer", "--encoder");
    M_CHECK_TF_ERROR(train(with([&](TrainOptions& o) { o.init_from = bare, o.encoder = enc, o.bpe_vocab = merges; })),
                     "260 tokens", "V = " + std::to_string(lm.config.V));
    // The command line: the same refusals, exit status 1.
    const std::string data = m_text_file();
    m_cli_fails("train --init-from " + base + " --data " + data + " --heads 4 --out " + out, "--heads 4 contradicts");
    m_cli_fails("train --init-from " + base + " --data " + data + " --block 64 --out " + out, "n_ctx = 16");
    m_cli_fails("train --init-from " + base + " --data " + data + " --vocab " + merges + " --out " + out, "--encoder");
    m_cli_fails("train --init-from " + base + " --data " + data + " --out " + base, "would overwrite --init-from");
    CHECK(!m_exists(out));
}

// ================================================================================================
// Fine-tuning and XLNet as commands
// ================================================================================================
TEST_CASE("finetune: the four file formats parse, and each malformed line names the file, the line and the reason") {
    std::vector<std::string> classes;
    auto ex = parse_labelled("pos\tgood film\nneg\tbad\r\npos\tfine\n", "c.tsv", FinetuneKind::classify, classes, true, true);
    REQUIRE(ex.size() == 3);
    CHECK(classes == std::vector<std::string>{"pos", "neg"});
    CHECK(ex[1].label == 1);
    CHECK(ex[1].fields == std::vector<std::string>{"bad"});
    CHECK(ex[2].line == 3);
    CHECK(ex[1].at == std::vector<std::size_t>{18});  // byte offset of "bad" in the file
    classes = {};
    ex = parse_labelled("yes\ta b\tc\nno\td\te\n", "e.tsv", FinetuneKind::entailment, classes, true, true);
    CHECK(ex[0].fields == std::vector<std::string>{"a b", "c"});
    ex = parse_labelled("2\tctx\tx\ty\tz\n0\tc2\tp\tq\n", "m.tsv", FinetuneKind::choice, classes, false, true);
    CHECK(ex[0].label == 2);
    CHECK(ex[0].fields.size() == 4);
    CHECK(ex[1].fields.size() == 3);  // K may differ between lines
    classes = {"pos", "neg"};
    M_CHECK_TF_ERROR(parse_labelled("pos\tok\npos\ta\tb\n", "c.tsv", FinetuneKind::classify, classes, false, true), "'c.tsv' line 2", "expected 2");
    M_CHECK_TF_ERROR(parse_labelled("pos\t\n", "c.tsv", FinetuneKind::classify, classes, false, true), "line 1", "field 2 is empty");
    M_CHECK_TF_ERROR(parse_labelled("pos\tok\nmaybe\tx\n", "v.tsv", FinetuneKind::classify, classes, false, true), "'v.tsv' line 2", "'maybe' was not in the training file");
    M_CHECK_TF_ERROR(parse_labelled("3\tctx\tx\ty\tz\n", "m.tsv", FinetuneKind::choice, classes, false, true), "answer '3' is not an index 0..2");
    M_CHECK_TF_ERROR(parse_labelled("x\tctx\n", "m.tsv", FinetuneKind::choice, classes, false, true), "at least 4");
    M_CHECK_TF_ERROR(parse_labelled("", "e.tsv", FinetuneKind::similarity, classes, false, true), "is empty");
    M_CHECK_TF_ERROR(parse_labelled("\n \r\n\n", "e.tsv", FinetuneKind::similarity, classes, false, true), "'e.tsv' has no examples");
    // Blank lines (empty, spaces, a lone CR) are skipped wherever they are; a last line without a
    // newline and CRLF ends are read as lines; an error keeps the file's own line number.
    classes = {};
    ex = parse_labelled("\npos\tgood\r\n\r\n  \nneg\tbad\n\n", "b.tsv", FinetuneKind::classify, classes, true, true);
    REQUIRE(ex.size() == 2);
    CHECK(ex[0].line == 2);
    CHECK(ex[1].line == 5);
    CHECK(ex[1].fields == std::vector<std::string>{"bad"});
    CHECK(ex[1].at == std::vector<std::size_t>{20});  // byte offset of "bad" in the file
    ex = parse_labelled("pos\tgood\nneg\tbad", "b.tsv", FinetuneKind::classify, classes, false, true);
    CHECK(ex.size() == 2);
    CHECK(ex[1].fields == std::vector<std::string>{"bad"});
    M_CHECK_TF_ERROR(parse_labelled("pos\tgood\n\n\nneg\n", "b.tsv", FinetuneKind::classify, classes, false, true), "'b.tsv' line 4",
                     "expected 2 tab-separated fields");
    CHECK(has_label_column("\n\npos\tgood\n", FinetuneKind::classify));
    std::vector<std::string> one;
    M_CHECK_TF_ERROR(parse_labelled("a\tx\na\ty\n", "c.tsv", FinetuneKind::classify, one, true, true), "at least 2");
    // Without the label column: one field fewer, decided per file.
    CHECK(has_label_column("pos\tgood\n", FinetuneKind::classify));
    CHECK_FALSE(has_label_column("good film\n", FinetuneKind::classify));
    CHECK(has_label_column("1\tctx\ta\tb\n", FinetuneKind::choice));
    CHECK_FALSE(has_label_column("ctx\ta\tb\n", FinetuneKind::choice));
    ex = parse_labelled("good film\n", "p.tsv", FinetuneKind::classify, classes, false, false);
    CHECK(ex[0].label == -1);
    CHECK(ex[0].fields == std::vector<std::string>{"good film"});
    // Characters and lengths: the input transformation through the pre-trained vocabulary.
    Config c = preset("tiny-gpt");
    c.n_ctx = 8;
    const CharVocab v = CharVocab::from_text("abcdefg ");
    FinetuneSpec s;
    s.kind = FinetuneKind::entailment, s.classes = {"yes", "no"}, s.specials = {10, 11, 12};
    const std::string text = "yes\tab\tcd\nno\tab\tc\xE2\x82\xAC\nno\tabcdef\tg\n";
    classes = s.classes;
    ex = parse_labelled(text, "t.tsv", FinetuneKind::entailment, classes, false, true);
    const EncodedExample e0 = encode_example(c, s, v, ex[0], text, "t.tsv");
    CHECK(e0.seqs == std::vector<std::vector<int>>{{10, 1, 2, 11, 3, 4, 12}});  // [s] a b [$] c d [e]
    M_CHECK_TF_ERROR(encode_example(c, s, v, ex[1], text, "t.tsv"), "(U+20AC) at byte 17 (line 2, column 8) of 't.tsv'");
    // Longer than n_ctx: kept whole, and check_example_lengths names every such example; with
    // --truncate, the longer text loses tokens at the end (right) or the start (left) until it fits.
    const EncodedExample e2 = encode_example(c, s, v, ex[2], text, "t.tsv");
    CHECK(e2.length == 10);  // [s] abcdef [$] g [e]
    CHECK_FALSE(e2.truncated);
    M_CHECK_TF_ERROR(check_example_lengths({e0, e2}, c, "t.tsv", Truncation::none), "'t.tsv': 1 of 2 examples are longer than n_ctx = 8",
                     "at lines 3 (10 tokens); give --truncate right or --truncate left");
    const EncodedExample r2 = encode_example(c, s, v, ex[2], text, "t.tsv", Truncation::right);
    CHECK(r2.seqs == std::vector<std::vector<int>>{{10, 1, 2, 3, 4, 11, 7, 12}});  // [s] abcd [$] g [e]
    CHECK(r2.truncated);
    CHECK(r2.length == 10);
    const EncodedExample l2 = encode_example(c, s, v, ex[2], text, "t.tsv", Truncation::left);
    CHECK(l2.seqs == std::vector<std::vector<int>>{{10, 3, 4, 5, 6, 11, 7, 12}});  // [s] cdef [$] g [e]
    CHECK(check_example_lengths({e0, r2}, c, "t.tsv", Truncation::right) ==
          "'t.tsv': 1 of 2 examples longer than n_ctx = 8 tokens truncated to fit (--truncate right: the end of the longer text dropped)");
    CHECK(check_example_lengths({e0}, c, "t.tsv", Truncation::none).empty());
    CHECK_FALSE(encode_example(c, s, v, ex[0], text, "t.tsv", Truncation::right).truncated);
    // A tie: the first text loses the token; a classify text keeps [s] and [e].
    const std::string tie = "yes\tabc\tdef\n";
    auto tx = parse_labelled(tie, "t.tsv", FinetuneKind::entailment, classes, false, true);
    CHECK(encode_example(c, s, v, tx[0], tie, "t.tsv", Truncation::right).seqs == std::vector<std::vector<int>>{{10, 1, 2, 11, 4, 5, 6, 12}});
    FinetuneSpec s1 = s;
    s1.kind = FinetuneKind::classify;
    const std::string one_text = "yes\tabcdefgab\n";
    auto cx = parse_labelled(one_text, "c.tsv", FinetuneKind::classify, classes, false, true);
    CHECK(encode_example(c, s1, v, cx[0], one_text, "c.tsv", Truncation::left).seqs ==
          std::vector<std::vector<int>>{{10, 4, 5, 6, 7, 1, 2, 12}});  // [s] defgab (the last 6) [e]
    c.n_ctx = 4;
    M_CHECK_TF_ERROR(encode_example(c, s, v, tx[0], tie, "t.tsv", Truncation::right), "'t.tsv' line 1", "leaves no room");
    M_CHECK_TF_ERROR(truncation_from_name("middle"), "--truncate takes right or left", "'middle'");
}

TEST_CASE("finetune: class_report's confusion matrix, precision, recall and F1 against a hand count") {
    // gold 0 0 0 1 1 2, predicted 0 1 0 1 2 2: class 0 TP 2 (P 2/2, R 2/3), class 1 TP 1 (P 1/2,
    // R 1/2), class 2 TP 1 (P 1/2, R 1/1); F1 = 2PR/(P+R): 0.8, 0.5, 2/3.
    const ClassReport r = class_report({0, 1, 0, 1, 2, 2}, {0, 0, 0, 1, 1, 2}, 3);
    CHECK(r.confusion == std::vector<std::vector<int>>{{2, 1, 0}, {0, 1, 1}, {0, 0, 1}});
    CHECK(r.precision[0] == doctest::Approx(1.0));
    CHECK(r.recall[0] == doctest::Approx(2.0 / 3));
    CHECK(r.f1[0] == doctest::Approx(0.8));
    CHECK(r.precision[1] == doctest::Approx(0.5));
    CHECK(r.recall[1] == doctest::Approx(0.5));
    CHECK(r.f1[1] == doctest::Approx(0.5));
    CHECK(r.precision[2] == doctest::Approx(0.5));
    CHECK(r.recall[2] == doctest::Approx(1.0));
    CHECK(r.f1[2] == doctest::Approx(2.0 / 3));
    CHECK(r.support == std::vector<int>{3, 2, 1});
    CHECK(r.macro_f1 == doctest::Approx((0.8 + 0.5 + 2.0 / 3) / 3));
    CHECK(r.accuracy == doctest::Approx(4.0 / 6));
    // A class never predicted and never given: 0, not a division by zero.
    const ClassReport z = class_report({0, 0}, {0, 0}, 2);
    CHECK(z.precision[1] == 0);
    CHECK(z.recall[1] == 0);
    CHECK(z.f1[1] == 0);
    const std::string text = class_report_text(r, {"pos", "neg", "neutral"});
    CHECK(m_contains(text, "  pos               2         1         0\n"));
    CHECK(m_contains(text, "  pos           1.000     0.667     0.800         3\n"));
    M_CHECK_TF_ERROR(class_report({0}, {0, 1}, 2), "1 predictions for 2 labels");
    M_CHECK_TF_ERROR(class_report({0, 2}, {0, 1}, 2), "outside 0..1");
}

// The sum a + b as the pre-training text writes it (least significant digit first) and back.
static int m_sum_from_text(const std::string& d) { return (d[0] - '0') + 10 * (d[1] - '0') + 100 * (d[2] - '0') + 1000 * (d[3] - '0'); }
static void m_operands(const std::string& f, int& a, int& b) {
    REQUIRE(f.size() == 7);
    REQUIRE(f[3] == '+');
    a = std::stoi(f.substr(0, 3)), b = std::stoi(f.substr(4, 3));
}

TEST_CASE("finetune: the built-in labelled tasks' labels are the arithmetic's truth") {
    for (bool held : {false, true}) {
        std::vector<std::string> classes;
        int a, b, c, d;
        const std::string cl = addition_finetune_task(FinetuneKind::classify, 200, 5, held);
        for (const auto& e : parse_labelled(cl, "c", FinetuneKind::classify, classes, true, true)) {
            m_operands(e.fields[0], a, b);
            CHECK(AdditionTask::held_out(a, b) == held);
            CHECK(classes[e.label] == (a + b >= 1000 ? "big" : "small"));
        }
        classes = {};
        int yes = 0;
        for (const auto& e : parse_labelled(addition_finetune_task(FinetuneKind::entailment, 200, 6, held), "e",
                                            FinetuneKind::entailment, classes, true, true)) {
            m_operands(e.fields[0], a, b);
            const bool right = m_sum_from_text(e.fields[1]) == a + b;
            CHECK(classes[e.label] == (right ? "yes" : "no"));
            yes += right;
        }
        CHECK(yes > 60);
        CHECK(yes < 140);  // about half
        classes = {};
        for (const auto& e : parse_labelled(addition_finetune_task(FinetuneKind::similarity, 200, 7, held), "s",
                                            FinetuneKind::similarity, classes, true, true)) {
            m_operands(e.fields[0], a, b);
            m_operands(e.fields[1], c, d);
            CHECK(classes[e.label] == (a + b == c + d ? "same" : "different"));
        }
        std::vector<int> answers(4, 0);
        for (const auto& e : parse_labelled(addition_finetune_task(FinetuneKind::choice, 200, 8, held), "m",
                                            FinetuneKind::choice, classes, false, true)) {
            REQUIRE(e.fields.size() == 5);
            m_operands(e.fields[0], a, b);  // the context stops before "=": the delimiter takes its place
            for (int k = 1; k <= 4; k++) CHECK((m_sum_from_text(e.fields[k]) == a + b) == (k - 1 == e.label));
            answers[e.label]++;
        }
        for (int n : answers) CHECK(n > 25);  // every position holds the answer sometimes
    }
}

TEST_CASE("finetune: BERT's [CLS] head with segments; padding is masked out (key_padding_mask)") {
    const Config c = preset("tiny-bert");
    Params<double> p = m_model<double>(c, 91, 0.2);
    Rng r(92);
    const TD W_y = randn(c.H, 2, r, 0.5);
    FinetuneSpec s;
    s.kind = FinetuneKind::entailment, s.classes = {"a", "b"}, s.specials = {c.cls_id, c.sep_id, c.sep_id};
    EncodedExample short_ex, long_ex;
    std::vector<int> x, t;
    bert_pair(c, {1, 2}, {3}, x, t);
    short_ex.seqs = {x}, short_ex.segs = {t}, short_ex.label = 0;
    bert_pair(c, {4, 5, 6, 7}, {8, 9}, x, t);
    long_ex.seqs = {x}, long_ex.segs = {t}, long_ex.label = 1;
    std::vector<int> at, labels;
    // Alone (no padding) and batched with a longer example (padded): the same P(y | x).
    const Batch alone = finetune_batch(c, s, {&short_ex}, at, labels, nullptr);
    CHECK(at == std::vector<int>{0});
    CHECK(alone.segments == std::vector<int>{0, 0, 0, 0, 1, 1});
    const TD P1 = finetune_probs(c, p, W_y, FinetuneTask::classify, 1, alone, at);
    const Batch both = finetune_batch(c, s, {&short_ex, &long_ex}, at, labels, nullptr);
    CHECK(both.lengths == std::vector<int>{6, 9});
    CHECK(both.n == 9);
    const TD P2 = finetune_probs(c, p, W_y, FinetuneTask::classify, 1, both, at);
    CHECK(P2(0, 0) == doctest::Approx(P1(0, 0)).epsilon(1e-12));
    Batch unmasked = both;  // without the mask the padding would change [CLS]
    unmasked.lengths.clear();
    CHECK(std::abs(finetune_probs(c, p, W_y, FinetuneTask::classify, 1, unmasked, at)(0, 0) - P1(0, 0)) > 1e-6);
    // Gradient check of L3 with the masked-LM L1 on the padded batch.
    Rng mlm(93);
    const Batch b = finetune_batch(c, s, {&short_ex, &long_ex}, at, labels, &mlm);
    REQUIRE(std::any_of(b.targets.begin(), b.targets.end(), [](int y) { return y >= 0; }));
    auto loss = [&](Params<double>* g) {
        TD dW(W_y.shape);
        return finetune_loss(c, p, W_y, FinetuneTask::classify, 1, b, at, labels, 0.5, g, g ? &dW : nullptr).L3;
    };
    m_grad_check(c, p, loss, 94, "finetune bert padded");
}

TEST_CASE("finetune: CLI pre-train, fine-tune, predict; reload gives the same predictions; --scratch starts fresh") {
    const std::string dir = m_path("ft");
    m_make_dir(dir);
    const std::string pre = dir + "/pre.st", text = dir + "/pre.txt", tr = dir + "/tr.tsv", va = dir + "/va.tsv";
    m_run_ok("task --task text --examples 600 --out " + text);
    m_run_ok("task --task classify --examples 300 --out " + tr);
    m_run_ok("task --task classify --examples 60 --seed 2 --held-out --out " + va);
    const bool labelled_line = m_read(tr).rfind("big\t", 0) == 0 || m_read(tr).rfind("small\t", 0) == 0;
    CHECK(labelled_line);
    m_run_ok("train --data " + text + " --layers 1 --heads 2 --embd 16 --block 24 --batch 8 --steps 30 --eval-steps 1 --quiet --out " + pre);
    const std::string ft = dir + "/ft.st", sc = dir + "/sc.st";
    const std::string files = " --task classify --train " + tr + " --val " + va, args = files + " --lr 3e-3 --steps 40 --batch 16";
    const m_Run r = m_run_ok("finetune --checkpoint " + pre + args + " --out " + ft);
    CHECK(m_contains(r.out, "val accuracy: "));
    CHECK(m_contains(r.out, "(L1 "));
    CHECK(m_exists(dir + "/ft.csv"));
    const LoadedModel pm = load_model(pre, {"adam."}), fm = load_model(ft, {"adam."});
    CHECK(fm.config.V == pm.config.V + 3);  // start, delimiter, extract: new rows of W_e
    CHECK(fm.config.W_y_rows == fm.config.H);
    CHECK(fm.config.W_y_cols == 2);
    const FinetuneSpec spec = finetune_spec_of(fm, ft);
    CHECK(spec.specials.start == pm.config.V);
    CHECK(spec.classes.size() == 2);
    // predict: one label per line, in order, equal to finetune_predict on the reloaded model.
    const m_Run p1 = m_run_ok("predict --checkpoint " + ft + " --data " + va);
    CHECK(m_contains(p1.err, "accuracy: "));
    // --accum 2 with batch 8 takes the steps of batch 16 (lambda 0, no dropout: L2 is a mean over examples).
    const std::string acc = files + " --lr 3e-3 --steps 3 --lambda 0 --dropout 0 --quiet --out " + dir;
    m_run_ok("finetune --checkpoint " + pre + acc + "/a16.st --batch 16");
    m_run_ok("finetune --checkpoint " + pre + acc + "/a8x2.st --batch 8 --accum 2");
    m_run_ok("finetune --checkpoint " + pre + acc + "/a8.st --batch 8");
    const LoadedModel a16 = load_model(dir + "/a16.st", {"adam."}), a8x2 = load_model(dir + "/a8x2.st", {"adam."});
    CHECK(m_max_param_diff(a16, a8x2) < 1e-5);
    CHECK(m_max_param_diff(a16, load_model(dir + "/a8.st", {"adam."})) > 1e-4);
    // --quiet silences the progress but not the result: one line, the accuracy predict reports.
    const m_Run q = m_run_ok("finetune --checkpoint " + pre + args + " --quiet --out " + dir + "/q.st");
    CHECK(q.out == "val " + p1.err.substr(0, p1.err.find(';')) + "\n");
    CHECK(m_contains(p1.err, "; always answering '"));
    std::vector<std::string> classes = spec.classes;
    const std::string vtext = m_read(va);
    std::vector<EncodedExample> ex;
    for (auto& e : parse_labelled(vtext, va, FinetuneKind::classify, classes, false, true))
        ex.push_back(encode_example(fm.config, spec, CharVocab::from_metadata(fm.file.metadata.at("vocab")), e, vtext, va));
    std::string want;
    for (int y : finetune_predict(fm.config, fm.params, spec, ex)) want += spec.classes[y] + "\n";
    CHECK(p1.out == want);
    // finetune's help states the defaults the run records (its checkpoint's train.* metadata).
    {
        const std::string fhelp = m_run_ok("finetune --help").out;
        m_run_ok("finetune --checkpoint " + pre + " --task classify --train " + tr + " --val " + va + " --steps 1 --quiet --out " + dir +
                 "/defaults.st");
        const auto md = load_model(dir + "/defaults.st", {"adam."}).file.metadata;
        for (const auto& kv : std::vector<std::pair<std::string, std::string>>{
                 {"batch", "train.batch"}, {"accum", "train.accum"}, {"lr", "train.lr"}, {"dropout", "train.dropout"},
                 {"weight-decay", "train.weight_decay"}, {"grad-clip", "train.grad_clip"}, {"log-every", "train.log_every"},
                 {"seed", "train.seed"}, {"lambda", "finetune.lambda"}}) {
            CAPTURE(kv.first);
            CHECK(m_help_default(fhelp, kv.first) == doctest::Approx(std::stod(md.at(kv.second))));
        }
    }
    // --probs: each label, then every class with its probability (the largest is the label's).
    const m_Run pp = m_run_ok("predict --checkpoint " + ft + " --data " + va + " --probs");
    std::stringstream pps(pp.out), p1s(p1.out);
    int prob_lines = 0;
    for (std::string l, label; std::getline(pps, l) && std::getline(p1s, label); prob_lines++) {
        CAPTURE(l);
        CHECK(l.rfind(label + "\t", 0) == 0);
        double sum = 0, best = -1;
        std::string best_name;
        std::stringstream fs(l.substr(l.find('\t') + 1));
        for (std::string field; std::getline(fs, field, '\t');) {
            const double p = std::stod(field.substr(field.find('=') + 1));
            sum += p;
            if (p > best) best = p, best_name = field.substr(0, field.find('='));
        }
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-3));
        CHECK(best_name == label);
    }
    CHECK(prob_lines == (int)std::count(p1.out.begin(), p1.out.end(), '\n'));
    // With labels: the confusion matrix and each class's precision, recall and F1 on stderr.
    CHECK(m_contains(p1.err, "confusion matrix (rows: the label given, columns: the label predicted):"));
    CHECK(m_contains(p1.err, "precision    recall        F1   support"));
    // Without labels: the same predictions, no accuracy.
    std::string unlabelled;
    std::stringstream ss(vtext);
    for (std::string line; std::getline(ss, line);) unlabelled += line.substr(line.find('\t') + 1) + "\n";
    m_write(dir + "/u.tsv", unlabelled);
    const m_Run p2 = m_run_ok("predict --checkpoint " + ft + " --data " + dir + "/u.tsv");
    CHECK(p2.out == p1.out);
    CHECK_FALSE(m_contains(p2.err, "accuracy"));
    // Blank lines (a trailing one, CRLF ends, a last line without a newline) change nothing.
    std::string crlf;
    for (char ch : vtext) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
    m_write(dir + "/blank.tsv", "\n" + crlf.substr(0, crlf.size() - 2) + "\r\n\r\n\n");
    const m_Run p3 = m_run_ok("predict --checkpoint " + ft + " --data " + dir + "/blank.tsv");
    CHECK(p3.out == p1.out);
    m_write(dir + "/last.tsv", vtext.substr(0, vtext.size() - 1));
    CHECK(m_run_ok("predict --checkpoint " + ft + " --data " + dir + "/last.tsv").out == p1.out);
    m_run_ok("finetune --checkpoint " + pre + " --task classify --train " + dir + "/blank.tsv --val " + dir + "/last.tsv --steps 1 --quiet --out " +
             dir + "/blank.st");
    // Examples longer than n_ctx: an error naming every one (file, lines, lengths), or --truncate.
    const std::string first = vtext.substr(0, vtext.find('\n'));
    std::string long_text = first.substr(first.find('\t') + 1);
    while ((int)long_text.size() < 3 * fm.config.n_ctx) long_text += long_text;
    const std::string label = first.substr(0, first.find('\t'));
    m_write(dir + "/long.tsv", vtext + label + "\t" + long_text + "\n" + vtext + label + "\t" + long_text + "\n");
    const int lines_before = (int)std::count(vtext.begin(), vtext.end(), '\n');
    m_cli_fails("predict --checkpoint " + ft + " --data " + dir + "/long.tsv",
                "2 of " + std::to_string(2 * lines_before + 2) + " examples are longer than n_ctx = " + std::to_string(fm.config.n_ctx));
    m_cli_fails("predict --checkpoint " + ft + " --data " + dir + "/long.tsv",
                "at lines " + std::to_string(lines_before + 1) + " (" + std::to_string(long_text.size() + 2) + " tokens), " +
                    std::to_string(2 * lines_before + 2));
    // One wording per kind of bad input, whichever command reads it: a directory, a binary file.
    std::string binary(400, '\0');
    for (int k = 0; k < 400; k += 7) binary[k] = 'a';
    m_write(dir + "/binary.dat", binary);
    for (const std::string& cmd : std::vector<std::string>{"predict --checkpoint " + ft + " --data " + dir + "/binary.dat",
                                   "finetune --checkpoint " + pre + " --task classify --train " + dir + "/binary.dat --val " + va +
                                       " --out " + dir + "/bin.st",
                                   "train --data " + dir + "/binary.dat --steps 1 --out " + dir + "/bin.st"}) {
        CAPTURE(cmd);
        m_cli_fails(cmd, "binary.dat' looks binary, not text: 342 control bytes, the first 0x00 at byte offset 1");
    }
    for (const std::string& cmd : std::vector<std::string>{"predict --checkpoint " + dir + " --data " + va, "predict --checkpoint " + ft + " --data " + dir,
                                   "sample --checkpoint " + dir + " --prompt 1", "eval --checkpoint " + pre + " --data " + dir,
                                   "train --data " + dir + " --steps 1 --out " + dir + "/dir.st",
                                   "finetune --checkpoint " + pre + " --task classify --train " + dir + " --val " + va + " --out " + dir + "/d.st"}) {
        CAPTURE(cmd);
        m_cli_fails(cmd, "cannot read '" + dir + "': it is a directory, not a file");
    }
    const m_Run pt = m_run_ok("predict --checkpoint " + ft + " --data " + dir + "/long.tsv --truncate right");
    CHECK(std::count(pt.out.begin(), pt.out.end(), '\n') == 2 * lines_before + 2);
    CHECK(m_contains(pt.err, "note: '" + dir + "/long.tsv': 2 of " + std::to_string(2 * lines_before + 2) + " examples longer than n_ctx"));
    m_cli_fails("predict --checkpoint " + ft + " --data " + dir + "/long.tsv --truncate middle", "--truncate takes right or left");
    m_cli_fails("finetune --checkpoint " + pre + " --task classify --train " + dir + "/long.tsv --val " + va + " --steps 1 --quiet --out " +
                    dir + "/long.st",
                "examples are longer than n_ctx");
    const m_Run ftt = m_run_ok("finetune --checkpoint " + pre + " --task classify --train " + dir + "/long.tsv --val " + va +
                               " --steps 1 --quiet --truncate left --out " + dir + "/long.st");
    CHECK(m_contains(ftt.err, "(--truncate left: the start of the longer text dropped)"));
    // --scratch: the same shapes, but the pre-trained rows of W_e are not carried over.
    const m_Run s0 = m_run_ok("finetune --checkpoint " + pre + files + " --steps 1 --lr 1e-9 --scratch --out " + sc);
    // At chance (one step at lr 1e-9), finetune says so, naming the most frequent label and its share.
    int big = 0, lines = 0;
    std::stringstream vs(m_read(va));
    for (std::string l; std::getline(vs, l);) lines++, big += l.rfind("big\t", 0) == 0;
    char share[64];
    std::snprintf(share, sizeof share, "' (%.1f%% of the validation examples)", 100.0 * std::max(big, lines - big) / lines);
    const std::string most = 2 * big == lines ? "" : 2 * big > lines ? "'big" : "'small";  // a tie: the first to reach it
    CHECK(lines == 60);
    CHECK(m_contains(s0.err, "note: that is within two standard errors of always answering " + most));
    CHECK(m_contains(s0.err, most + share));
    CHECK(m_contains(s0.err, "needs a larger --lr"));
    m_run_ok("finetune --checkpoint " + pre + files + " --steps 1 --lr 1e-9 --out " + dir + "/one.st");
    const LoadedModel s1 = load_model(sc, {"adam."}), o1 = load_model(dir + "/one.st", {"adam."});
    CHECK(s1.config.V == o1.config.V);
    double d_scratch = 0, d_pre = 0;
    for (int k = 0; k < pm.params.W_e.cols(); k++) {
        d_scratch += std::abs(s1.params.W_e(3, k) - pm.params.W_e(3, k));
        d_pre += std::abs(o1.params.W_e(3, k) - pm.params.W_e(3, k));
    }
    CHECK(d_pre < 1e-5);
    CHECK(d_scratch > 1e-2);
    // Bad input.
    m_cli_fails("finetune --checkpoint " + pre + " --task sorting --train " + tr + " --val " + va + " --out " + dir + "/x.st", "unknown task 'sorting'");
    m_cli_fails("predict --checkpoint " + pre + " --data " + va, "not a fine-tuned checkpoint");
    m_write(dir + "/bad.tsv", "big\t123+456\nhuge\t1+1\n");
    m_cli_fails("finetune --checkpoint " + pre + " --task classify --train " + tr + " --val " + dir + "/bad.tsv --out " + dir + "/x.st",
                "bad.tsv' line 2: the label 'huge' was not in the training file");
    // A batch no machine holds is refused before any work, naming --batch and the way around it.
    m_cli_fails("finetune --checkpoint " + pre + " --task classify --train " + tr + " --val " + va + " --batch 4000000 --out " +
                    dir + "/x.st",
                "finetune: this run needs about");
    m_cli_fails("finetune --checkpoint " + pre + " --task classify --train " + tr + " --val " + va + " --batch 4000000 --out " +
                    dir + "/x.st",
                "make --batch smaller, or give --no-memory-check");
    CHECK_FALSE(m_exists(dir + "/x.st"));
}

TEST_CASE("xlnet: train --objective xlnet lowers the loss, keeps w in the checkpoint and resumes exactly") {
    const std::string dir = m_path("xl");
    m_make_dir(dir);
    const std::string full = dir + "/full.st", half = dir + "/half.st";
    const std::string args = " --objective xlnet --data " + m_text_file() +
                             " --layers 1 --heads 2 --embd 16 --block 16 --batch 16 --predict 8 --steps 200 --warmup 5 --eval-steps 2 --lr 1e-2 --quiet";
    m_run_ok("train" + args + " --out " + full);
    m_run_ok("train" + args + " --stop-at 100 --out " + half);
    m_run_ok("train --resume " + half);
    const LoadedModel a = load_model(full, {"adam."}), b = load_model(half, {"adam."});
    CHECK(a.config.xlnet);
    CHECK(a.params.w.size() == 16);
    CHECK(a.file.metadata.at("train.objective") == "xlnet");
    CHECK(a.file.metadata.at("train.predict") == "8");
    CHECK(m_bits_equal(a.params.W_e, b.params.W_e));
    CHECK(m_bits_equal(a.params.w, b.params.w));
    // The loss went down: the log's first and last train losses.
    std::stringstream log(a.file.metadata.at("train.log"));
    std::string line;
    std::vector<double> losses;
    std::getline(log, line);
    while (std::getline(log, line)) losses.push_back(std::stod(line.substr(line.find(',') + 1)));
    REQUIRE(losses.size() == 200);
    double first = 0, last = 0;  // means of the first and the last 20 steps (one batch is noisy)
    for (int k = 0; k < 20; k++) first += losses[k] / 20, last += losses[180 + k] / 20;
    CHECK(last < first - 0.3);
    const m_Run e = m_run_ok("eval --checkpoint " + full + " --data " + m_text_file());
    CHECK(m_contains(e.out, "mean XLNet permutation loss"));
    CHECK(m_contains(e.out, "4 random permutations"));
    CHECK(m_contains(e.out, "read left to right (z = identity"));
    // Left to right: windows of n_ctx, z = identity, every position after the first predicted.
    const CharVocab v = CharVocab::from_metadata(a.file.metadata.at("vocab"));
    const std::vector<int> ids = v.encode(m_read(m_text_file()).substr(0, 40));  // windows of 16, 16, 8
    long long count = 0;
    const double ltr = xlnet_left_to_right_loss(a.config, a.params, ids, &count);
    CHECK(count == 15 + 15 + 7);
    double sum = 0;
    for (int start : {0, 16, 32}) {
        const int n = start == 32 ? 8 : 16;
        std::vector<int> z(n);
        for (int i = 0; i < n; i++) z[i] = i;
        sum += xlnet_loss(a.config, a.params, a.params.w, std::vector<int>(ids.begin() + start, ids.begin() + start + n), 1, z, n - 1) * (n - 1);
    }
    CHECK(ltr == doctest::Approx(sum / 37).epsilon(1e-12));
    CHECK(ltr < std::log((double)a.config.V));  // the trained model beats the uniform guess
    m_cli_fails("train --objective xlnet --model bert --data " + m_text_file() + " --out " + dir + "/b.st", "not bert");
    m_cli_fails("train --objective xlnet --steps 2 --out " + dir + "/t.st", "needs --data");
    m_cli_fails("train --predict 3 --data " + m_text_file() + " --out " + dir + "/t.st", "--predict applies to --objective xlnet");
}
TEST_SUITE_END();

// ================================================================================================
// Teaching: token labels, the mask and attention pictures, explain, handouts.
// ================================================================================================
TEST_SUITE_BEGIN("teaching");
TEST_CASE("token_label: printable UTF-8 as it is, a space as an open box, a newline as a return sign, other bytes as \\xNN") {
    CHECK(token_label("a b") == "a\u2423b");
    CHECK(token_label("\n") == "\u23CE");
    CHECK(token_label("\xC4") == "\\xC4");            // the first byte of a two-byte character, alone
    CHECK(token_label("\x7F\x01") == "\\x7F\\x01");
    CHECK(token_label("\xC3\xA9t\xC3\xA9") == "\xC3\xA9t\xC3\xA9");  // "ete" with accents
    CHECK(token_label("") == "\u2205");
}

// Well-formed XML (xmllint when the machine has it, else python3's parser; with neither, the
// check is skipped with a warning: .ci/run installs libxml2-utils for xmllint).
void m_check_xml(const std::string& path) {
    CHECK(m_read(path).rfind("<?xml", 0) == 0);
    if (m_ON_WINDOWS) {
        MESSAGE("skipped on Windows: the XML check of " << path << " needs a POSIX shell and xmllint or python3");
        return;
    }
    static const bool have_checker = std::system("command -v xmllint >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1") == 0;
    if (!have_checker) {
        WARN_MESSAGE(false, "skipped the XML check of " << path << ": neither xmllint (libxml2-utils) nor python3 is installed");
        return;
    }
    const std::string log = path + ".xmlcheck";
    const std::string cmd = "if command -v xmllint >/dev/null; then xmllint --noout '" + path +
                            "'; else python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' '" + path + "'; fi > " +
                            log + " 2>&1";
    const int st = std::system(cmd.c_str());
    INFO("XML check of " << path << ": " << m_read(log));
    CHECK(st == 0);
}
// An SVG file: well-formed XML with a viewBox.
void m_check_svg(const std::string& path) {
    CHECK(m_contains(m_read(path), "viewBox='0 0 "));
    m_check_xml(path);
}
bool m_is_minus_inf(float v) { return v == -std::numeric_limits<float>::infinity(); }

TEST_CASE("masks: the picture shows Mask^BD, Mask^AR, Mask^ST and Mask^XL(z) cell for cell, each with its formula") {
    const int n = 7, window = 2, stride = 3;
    const std::vector<int> z = {3, 0, 6, 2, 5, 1, 4};
    const std::string svg = masks_svg(n, window, stride, z);
    const std::vector<m_SvgPanel> panels = m_svg_panels(svg);
    REQUIRE(panels.size() == 4);
    const Tensor<float> masks[4] = {Mask_BD<float>(n), Mask_AR<float>(n), Mask_ST<float>(n, window, stride), Mask_XL<float>(z)};
    const char* names[4] = {"Mask^BD", "Mask^AR", "Mask^ST", "Mask^XL"};
    for (int k = 0; k < 4; k++) {
        CAPTURE(names[k]);
        CHECK(m_contains(panels[k].title, names[k]));
        REQUIRE(panels[k].masked.size() == masks[k].size());
        for (std::size_t a = 0; a < masks[k].size(); a++) {
            CHECK(panels[k].masked[a] == m_is_minus_inf(masks[k][a]));
            if (!panels[k].masked[a]) CHECK(panels[k].values[a] == 1.0);
        }
    }
    for (const char* formula : {"(Mask^BD)_i,j = 1", "-inf if j &gt; i", "(i - j) mod stride = 0", "window = 2, stride = 3",
                                "rank(j) &lt; rank(i)", "z = (4,1,7,3,6,2,5)"})
        CHECK_MESSAGE(m_contains(svg, formula), formula);
    M_CHECK_TF_ERROR(masks_svg(0, 2, 3, {}), "1..64");
    M_CHECK_TF_ERROR(masks_svg(3, 2, 3, {0, 1}), "permutation");
    M_CHECK_TF_ERROR(masks_svg(3, 2, 3, {0, 1, 1}), "not a permutation");
    M_CHECK_TF_ERROR(masks_svg(3, 0, 3, {0, 1, 2}), "window");
}

TEST_CASE("attention picture: one panel per layer and head, P of the model's forward pass, masked exactly where Mask is -inf") {
    const std::vector<int> x = {3, 1, 4, 1, 5, 9, 2};
    const int n = (int)x.size();
    const std::vector<std::string> labels = {"a", "b", "<", "&", "e", "f", "g"};
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        const Config c = preset(name);
        const Params<float> p = m_model<float>(c, 11, 0.1);
        const std::vector<HeatPanel> all = attention_panels(c, p, x, labels, 0, 0);
        REQUIRE((int)all.size() == c.L * c.A);
        const std::string svg = heatmap_svg(all, c.A, "t", {"caption"}, true);
        const std::vector<m_SvgPanel> drawn = m_svg_panels(svg);
        REQUIRE(drawn.size() == all.size());
        CHECK(m_contains(svg, "&lt;</text>"));  // tokens are labels, escaped
        // Layer 1 by hand: X^(0) = Embedding + W_p, LayerNorm first for pre-LN, then per head
        // P = Softmax(Mask (.) (X W_Q)(X W_K)^T / sqrt(D)).
        Tensor<float> X = Embedding(x, p.W_e);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < c.H; j++) X(i, j) += p.W_p(i, j) + (has_segments(c.variant) ? p.w_A[j] : 0.0f);
        if (is_pre_ln(c.variant)) X = LayerNorm(X, p.layers[0].ln_1_gamma, p.layers[0].ln_1_beta, c.eps);
        for (int l = 0; l < c.L; l++)
            for (int i = 0; i < c.A; i++) {
                const HeatPanel& q = all[(std::size_t)(l * c.A + i)];
                const m_SvgPanel& d = drawn[(std::size_t)(l * c.A + i)];
                CHECK(m_contains(q.title, "layer l=" + std::to_string(l + 1) + ", head i=" + std::to_string(i + 1)));
                CHECK(d.title == q.title);
                const Tensor<float> M = layer_mask<float>(c, l, n);
                REQUIRE(q.values.size() == (std::size_t)(n * n));
                REQUIRE(d.masked.size() == (std::size_t)(n * n));
                for (int r = 0; r < n; r++) {
                    double row = 0;
                    for (int j = 0; j < n; j++) {
                        const std::size_t a = (std::size_t)(r * n + j);
                        CHECK(q.masked[a] == m_is_minus_inf(M(r, j)));
                        CHECK(d.masked[a] == q.masked[a]);
                        if (q.masked[a]) CHECK(q.values[a] == 0.0);
                        else CHECK(d.values[a] == doctest::Approx(q.values[a]).epsilon(1e-3).scale(1e-4));
                        row += q.values[a];
                    }
                    CHECK(row == doctest::Approx(1.0).epsilon(1e-5));
                }
                if (l > 0) continue;
                Tensor<float> S = matmul_nt(matmul(X, p.layers[0].attn.W_Q[i]), matmul(X, p.layers[0].attn.W_K[i]));
                for (auto& v : S.data) v /= std::sqrt((float)c.D);
                const Tensor<float> P = Softmax(apply_mask(M, S));
                for (std::size_t a = 0; a < P.size(); a++) CHECK(q.values[a] == doctest::Approx(P[a]).epsilon(1e-5).scale(1e-6));
            }
        // One layer and head (1-based) is that panel alone.
        const std::vector<HeatPanel> one = attention_panels(c, p, x, labels, 2, 1);
        REQUIRE(one.size() == 1);
        CHECK(one[0].values == all[(std::size_t)c.A].values);
        M_CHECK_TF_ERROR(attention_panels(c, p, x, labels, 3, 0), "layer 3", "1..L = 2", "count from 1");
        M_CHECK_TF_ERROR(attention_panels(c, p, x, labels, 0, 3), "head 3", "1..A = 2");
        M_CHECK_TF_ERROR(attention_panels(c, p, x, labels, -1, 0), "layer -1");
        M_CHECK_TF_ERROR(attention_panels(c, p, {1, 13}, {"a", "b"}, 0, 0), "token id 13");
        M_CHECK_TF_ERROR(attention_panels(c, p, std::vector<int>(17, 1), std::vector<std::string>(17, "a"), 0, 0), "n_ctx = 16");
        M_CHECK_TF_ERROR(attention_panels(c, p, x, labels, 0, 0, {0, 1, 2, 3, 4, 5, 6}), "XLNet");
    }
}

TEST_CASE("attention picture: an XLNet model shows both streams, masked exactly where Mask^XL(z) is -inf") {
    Config c = preset("tiny-gpt2");
    c.xlnet = true;
    const Params<float> p = m_model<float>(c, 5, 0.1);
    const std::vector<int> x = {3, 1, 4, 1, 5}, z = {2, 4, 0, 3, 1};
    const int n = (int)x.size();
    const std::vector<HeatPanel> all = attention_panels(c, p, x, std::vector<std::string>(5, "t"), 0, 0, z);
    REQUIRE((int)all.size() == 2 * c.L * c.A);
    const Tensor<float> M = Mask_XL<float>(z);
    for (std::size_t k = 0; k < all.size(); k++) {
        const int s = (int)(k / c.A) % 2;  // per layer: the A content panels, then the A query panels
        CHECK(m_contains(all[k].title, s == 0 ? "content h" : "query g"));
        for (int r = 0; r < n; r++)
            for (int j = 0; j < n; j++) CHECK(all[k].masked[(std::size_t)(r * n + j)] == m_is_minus_inf(M(s * n + r, j)));
    }
    const std::vector<HeatPanel> identity = attention_panels(c, p, x, std::vector<std::string>(5, "t"), 1, 1);
    REQUIRE(identity.size() == 2);
    CHECK(identity[1].masked[1] == true);   // query 1 never sees position 2 under z = 1..n ...
    CHECK(identity[1].masked[n] == false);  // ... query 2 sees position 1
    CHECK(identity[0].masked[0] == false);  // content 1 sees itself
}

TEST_CASE("CLI: masks and attention write SVGs (valid XML, a panel per head), bad input is an error before any file") {
    const std::string dir = m_path("pictures");
    m_make_dir(dir);
    const m_Run rm = m_run_ok("masks --n 6 --window 2 --stride 3 --perm 2,4,6,1,3,5 --out " + dir + "/masks.svg");
    CHECK(m_contains(rm.out, "wrote " + dir + "/masks.svg"));
    m_check_svg(dir + "/masks.svg");
    CHECK(m_svg_panels(m_read(dir + "/masks.svg")).size() == 4);
    CHECK(m_read(dir + "/masks.svg") == masks_svg(6, 2, 3, {1, 3, 5, 0, 2, 4}));
    m_run_ok("masks --n 5 --out " + dir + "/masks.svg");  // replaces its own picture; a default z
    m_check_svg(dir + "/masks.svg");

    // A checkpoint with a character vocabulary and no training (as train writes it).
    Config c = preset("tiny-gpt3");
    const CharVocab v = CharVocab::from_text("1+2=3 &<\n");
    c.V = v.size();
    Params<float> p = m_model<float>(c, 3, 0.05);
    const std::string ck = dir + "/gpt3.safetensors";
    save_model(ck, c, p, {{"vocab", v.to_metadata()}});
    const m_Run ra = m_run_ok("attention --checkpoint " + ck + " --text '1+2=3 &<' --out " + dir + "/att.svg");
    CHECK(m_contains(ra.out, "4 panels"));
    m_check_svg(dir + "/att.svg");
    const std::string svg = m_read(dir + "/att.svg");
    const std::vector<m_SvgPanel> drawn = m_svg_panels(svg);
    CHECK((int)drawn.size() == c.L * c.A);
    CHECK(m_contains(svg, ">&amp;</text>"));
    CHECK(m_contains(svg, ">\u2423</text>"));  // the space, readable
    CHECK(m_contains(svg, "Mask^ST"));
    const m_Run r1 = m_run_ok("attention --checkpoint " + ck + " --tokens 1,2,3 --layer 2 --head 1 --out " + dir + "/one.svg");
    CHECK(m_contains(r1.out, ": 1 panel ("));  // singular
    CHECK(m_contains(r1.out, ", 3 tokens"));
    const std::vector<m_SvgPanel> one = m_svg_panels(m_read(dir + "/one.svg"));
    REQUIRE(one.size() == 1);
    CHECK(one[0].title == "layer l=2, head i=1 (Mask^AR)");
    CHECK(one[0].masked == std::vector<bool>{false, true, true, false, false, true, false, false, false});

    const std::string out = " --out " + dir + "/bad.svg";
    m_cli_fails("masks" + out, "missing flag --n");
    m_cli_fails("masks --n 4", "missing flag --out");
    m_cli_fails("masks --n 0" + out, "--n must be between 1 and 64");
    m_cli_fails("masks --n x" + out, "--n expects an integer");
    m_cli_fails("masks --n 4 --window 0" + out, "--window");
    m_cli_fails("masks --n 3 --perm 1,2" + out, "--perm has 2 positions but n = 3");
    m_cli_fails("masks --n 3 --perm 1,2,2" + out, "appears twice");
    m_cli_fails("masks --n 3 --perm 0,1,2" + out, "count from 1");
    m_cli_fails("masks --n 3 --out " + dir + "/no/such/dir/m.svg", "does not exist");
    m_write(dir + "/notes.txt", "my notes");
    m_cli_fails("masks --n 3 --out " + dir + "/notes.txt", "refusing to replace");
    CHECK(m_read(dir + "/notes.txt") == "my notes");
    m_cli_fails("attention --text 12" + out, "missing flag --checkpoint");
    m_cli_fails("attention --checkpoint " + ck + " --text 12", "missing flag --out");
    m_cli_fails("attention --checkpoint " + ck + out, "exactly one of --text and --tokens");
    m_cli_fails("attention --checkpoint " + ck + " --text 12 --tokens 1,2" + out, "exactly one of --text and --tokens");
    m_cli_fails("attention --checkpoint " + ck + " --text 12 --layer 0" + out, "--layer 0 is outside 1..L");
    m_cli_fails("attention --checkpoint " + ck + " --text 12 --layer 3" + out, "layer 3 is outside 1..L = 2");
    m_cli_fails("attention --checkpoint " + ck + " --text 12 --head 3" + out, "head 3 is outside 1..A = 2");
    m_cli_fails("attention --checkpoint " + ck + " --text 12 --head x" + out, "--head expects an integer");
    m_cli_fails("attention --checkpoint " + ck + " --tokens 1,99" + out, "token id 99");
    m_cli_fails("attention --checkpoint " + ck + " --tokens 1,,2" + out, "not an integer");
    m_cli_fails("attention --checkpoint " + ck + " --text 'abc'" + out, "not in the model's vocabulary");
    m_cli_fails("attention --checkpoint " + ck + " --text 11111111111111111" + out, "n_ctx = 16");
    m_cli_fails("attention --checkpoint " + ck + " --text 12 --perm 2,1" + out, "XLNet");
    m_cli_fails("attention --checkpoint " + dir + "/none.safetensors --text 12" + out, "none.safetensors");
    m_cli_fails("attention --checkpoint " + ck + " --text 12 --out " + dir + "/no/such/dir/a.svg", "does not exist");
    m_cli_fails("attention --checkpoint " + ck + " --text 12 --out " + ck, "would overwrite --checkpoint");
    CHECK_FALSE(m_exists(dir + "/bad.svg"));
}

// Runs body on the preset name (captured) with its batch m_explain_batch(c), its model
// m_model<T>(c, seed, noise) and what explain makes of them, showing `values` values a tensor.
template <typename T>
void m_with_explained(const std::string& name, uint64_t seed, double noise, int values,
                      const std::function<void(const Config&, const Batch&, const Params<T>&, const Explained<T>&)>& body) {
    CAPTURE(name);
    const Config c = preset(name);
    const Batch b = m_explain_batch(c);
    const Params<T> p = m_model<T>(c, seed, noise);
    const Explained<T> e = explain(c, p, b, values);
    body(c, b, p, e);
}

TEST_CASE("explain: its logits, loss and every gradient are model_forward's and model_loss's, for all five variants") {
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        for (const bool bias : {false, true}) {
            CAPTURE(bias);
            Config c = preset(name);
            c.attn_bias = bias;
            const Batch b = m_explain_batch(c);
            const Params<double> p = m_model<double>(c, 21, 0.2);
            const Explained<double> e = explain(c, p, b);
            m_check_explained_against_model(c, p, b, e);
            // float, as the program runs it: the same loss as model_loss.
            const Params<float> pf = m_model<float>(c, 21, 0.2);
            CHECK(explain(c, pf, b).loss == doctest::Approx(model_loss(c, pf, b)).epsilon(1e-6));
        }
    }
}

TEST_CASE("explain: every formula box of the variant in order, shapes as in the formula boxes, first values of each output") {
    for (const std::string name : m_TINY)
        m_with_explained<float>(name, 4, 0.1, 3, [&](const Config& c, const Batch& b, const Params<float>&, const Explained<float>& e) {
            const int n = b.n;
            const bool pre = is_pre_ln(c.variant), seg = has_segments(c.variant);
            // The function of each box, as the variant's formula box orders them (first word).
            std::vector<std::string> want = {"Batch::tokens", "Embedding"};
            if (seg) want.push_back("add");
            want.push_back("embed_forward");
            for (int l = 0; l < c.L; l++) {
                want.push_back("layer_mask");
                if (pre) want.push_back("LayerNorm");
                want.push_back("MultiHeadSA");
                for (int i = 0; i < c.A; i++) want.push_back("Attention");
                want.push_back("Concat");
                for (const char* f : pre ? std::vector<const char*>{"add", "LayerNorm", "FFN", "add"}
                                         : std::vector<const char*>{"add", "FFN", "add"})
                    want.push_back(f);
            }
            if (pre) want.push_back("LayerNorm");
            for (const char* f : {"matmul_nt", "Softmax", "CrossEntropy_logits", "CrossEntropy", "CrossEntropy_logits", "matmul_tn_acc"})
                want.push_back(f);
            if (pre) want.push_back("LayerNorm_backward");
            for (int l = c.L - 1; l >= 0; l--) {
                for (const char* f : pre ? std::vector<const char*>{"FFN_backward", "LayerNorm_backward", "MultiHeadSA_backward", "LayerNorm_backward"}
                                         : std::vector<const char*>{"LayerNorm_backward", "FFN_backward", "LayerNorm_backward", "MultiHeadSA_backward"}) {
                    want.push_back(f);
                    if (std::string(f) == "MultiHeadSA_backward")  // each head's Softmax_backward and Attention_backward checked alone
                        for (int i = 0; i < c.A; i++) want.push_back("Softmax_backward"), want.push_back("Attention_backward");
                }
                want.push_back(pre ? "pre_ln_block_backward" : "post_ln_block_backward");  // the layer's parameters, through the walk
            }
            want.push_back("embed_backward");
            if (seg) want.push_back("embed_backward");
            std::vector<std::string> got;
            for (const ExplainStep& s : e.steps) got.push_back(s.function.substr(0, s.function.find_first_of(" ,")));
            CHECK(got == want);
            // Shapes: the symbols of the formula boxes, with this model's numbers.
            std::map<std::string, std::string> shape_of;  // output name -> "symbol = shape"
            for (const ExplainStep& s : e.steps)
                for (const ExplainTensor& t : s.out) {
                    shape_of[t.name] = t.symbol + " = " + t.shape;
                    CHECK(t.first.size() == std::min<std::size_t>(3, t.first.size() + (t.more ? 3 : 0)));
                }
            const std::string nH = "n x H = " + std::to_string(n) + "x8";
            CHECK(shape_of["X^(0)"] == nH);
            CHECK(shape_of["X^(2)"] == nH);
            CHECK(shape_of["X'^(1)"] == nH);
            CHECK(shape_of["Z"] == "n x V = " + std::to_string(n) + "x13");
            CHECK(shape_of["Concat(head_1, ..., head_A)"] == "n x AD = " + std::to_string(n) + "x8");
            CHECK(shape_of["P = Softmax(Mask (.) Q K^T / sqrt(D))"] == "n x n = " + std::to_string(n) + "x" + std::to_string(n));
            CHECK(shape_of["head_2"] == "n x D = " + std::to_string(n) + "x4");
            CHECK(shape_of[c.activation == Activation::relu ? "max(0, X W_1 + b_1)" : "GELU(X W_1 + b_1)"] == "n x F = " + std::to_string(n) + "x16");
            CHECK(shape_of["dW_e"] == "V x H = 13x8");
            CHECK(shape_of["loss"] == "1 = 1");
            // The first values are the real ones: the logits' and the masks'.
            for (const ExplainStep& s : e.steps)
                for (const ExplainTensor& t : s.out) {
                    if (t.name == "Z")
                        for (std::size_t k = 0; k < 3; k++) CHECK(t.first[k] == e.Z[k]);
                    if (t.name == "Mask^(1)") {
                        const Tensor<float> M = layer_mask<float>(c, 0, n);
                        for (std::size_t k = 0; k < 3; k++) CHECK(t.first[k] == (double)M[k]);
                        CHECK(s.picture.size() == (std::size_t)n);
                    }
                    if (t.name == "loss") CHECK(t.first[0] == doctest::Approx(e.loss).epsilon(1e-6));
                }
            const std::string text = explain_text(c, e.steps);
            CHECK(m_contains(text, "==== forward ===="));
            CHECK(m_contains(text, "==== backward"));
            CHECK(m_contains(text, seg ? "diag(1 - t) Stack_n(w_A) + diag(t) Stack_n(w_B)" : "X^(0) = OneHot(x) W_e + W_p"));
            if (c.variant == Variant::gpt3) CHECK(m_contains(text, "Mask^AR if l is even, Mask^ST if l is odd: Mask^ST"));
        });
    const Config c = preset("tiny-gpt2");
    const Params<float> p = m_model<float>(c, 4, 0.1);
    Batch b = m_explain_batch(c);
    b.targets.clear();
    M_CHECK_TF_ERROR(explain(c, p, b), "no targets");
    M_CHECK_TF_ERROR(explain(c, p, m_explain_batch(c), 65), "values");
    b = m_explain_batch(c);
    b.tokens[1] = 13;
    M_CHECK_TF_ERROR(explain(c, p, b), "token id 13");
}

TEST_CASE("explain: the values it shows are the model's: layer 1 recomputed from the sheet's equations, each gradient model_loss's") {
    // The forward values explain prints come from model_forward's caches and the backward from
    // block_backward; here layer 1 is computed again from formulas §18 (post-LN, GPT) and §19 (pre-LN, GPT-2)
    // and every printed gradient is compared with model_loss's of the parameter it names.
    for (const std::string name : {"tiny-gpt", "tiny-gpt2", "tiny-bert"})
        m_with_explained<double>(name, 5, 0.3, 64, [&](const Config& c, const Batch& b, const Params<double>& p, const Explained<double>& e) {
            const int n = b.n;
            auto shown = [&](const std::string& out) {  // the first values explain prints for the output named out
                for (const ExplainStep& s : e.steps)
                    for (const ExplainTensor& t : s.out)
                        if (t.name == out) return t.first;
                FAIL("explain prints no output named " << out);
                return std::vector<double>();
            };
            auto check_shown = [&](const std::string& out, const Tensor<double>& want, const char* from) {
                const std::vector<double> got = shown(out);
                REQUIRE(got.size() == std::min<std::size_t>(64, want.size()));
                for (std::size_t k = 0; k < got.size(); k++) {
                    INFO(out << " entry " << k + 1 << ": expected " << want[k] << " (" << from << "), explain shows " << got[k]);
                    CHECK(got[k] == doctest::Approx(want[k]).epsilon(1e-12));
                }
            };
            // X^(0) = OneHot(x) W_e + W_p (+ BERT's segment vectors), formulas §18, §21.
            Tensor<double> X0 = Embedding(b.tokens, p.W_e);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < c.H; j++)
                    X0(i, j) += p.W_p(i, j) + (c.variant == Variant::bert ? (b.segments[i] ? p.w_B[j] : p.w_A[j]) : 0.0);
            check_shown("X^(0)", X0, "OneHot(x) W_e + W_p, formulas §18");
            const Layer<double>& w = p.layers[0];
            const Tensor<double> Mask = c.variant == Variant::bert ? Mask_BD<double>(n) : Mask_AR<double>(n);
            const std::string ffn = c.activation == Activation::relu ? "FFN_ReLU" : "FFN_GELU";
            if (!is_pre_ln(c.variant)) {  // §18: X' = LN(MHSA(X) + X), X^(1) = LN(FFN(X') + X')
                const Tensor<double> a = MultiHeadSA(X0, Mask, w.attn);
                const Tensor<double> Xq = LayerNorm(add(a, X0), w.ln_1_gamma, w.ln_1_beta, c.eps);
                const Tensor<double> f = FFN(Xq, w.ffn, c.activation);
                check_shown("MultiHeadSA(X^(0), Mask)", a, "MultiHeadSA(X^(0), Mask), formulas §12");
                check_shown("X'^(1)", Xq, "LayerNorm(MultiHeadSA(X^(0)) + X^(0)), formulas §18");
                check_shown(ffn + "(X'^(1))", f, "FFN(X'^(1)), formulas §14");
                check_shown("X^(1)", LayerNorm(add(f, Xq), w.ln_2_gamma, w.ln_2_beta, c.eps), "LayerNorm(FFN(X') + X'), formulas §18");
            } else {  // §19: X' = MHSA(LN(X)) + X, X^(1) = FFN(LN(X')) + X'
                const Tensor<double> a = MultiHeadSA(LayerNorm(X0, w.ln_1_gamma, w.ln_1_beta, c.eps), Mask, w.attn);
                const Tensor<double> Xq = add(a, X0);
                const Tensor<double> f = FFN(LayerNorm(Xq, w.ln_2_gamma, w.ln_2_beta, c.eps), w.ffn, c.activation);
                check_shown("MultiHeadSA(LayerNorm(X^(0)), Mask)", a, "MultiHeadSA(LayerNorm(X^(0)), Mask), formulas §12");
                check_shown("X'^(1)", Xq, "MultiHeadSA(LayerNorm(X^(0))) + X^(0), formulas §19");
                check_shown(ffn + "(LayerNorm(X'^(1)))", f, "FFN(LayerNorm(X'^(1))), formulas §14");
                check_shown("X^(1)", add(f, Xq), "FFN(LayerNorm(X')) + X', formulas §19");
            }
            // Every gradient printed under a layer's box is that layer's; dX^(0) is what W_p's rows receive.
            Params<double> g = make_params<double>(c);
            model_loss(c, p, b, &g);
            for (int l = 0; l < c.L; l++) {
                std::map<std::string, const Tensor<double>*> of = {
                    {"dW_1", &g.layers[l].ffn.W_1}, {"db_2", &g.layers[l].ffn.b_2}, {"dW^O", &g.layers[l].attn.W_O},
                    {"dW_2^K", &g.layers[l].attn.W_K[1]}, {"dgamma (ln_1)", &g.layers[l].ln_1_gamma}, {"dbeta (ln_2)", &g.layers[l].ln_2_beta}};
                std::set<std::string> seen;
                for (const ExplainStep& s : e.steps)
                    if (s.box == "Backward, l = " + std::to_string(l + 1))
                        for (const ExplainTensor& t : s.out)
                            if (of.count(t.name)) {
                                seen.insert(t.name);
                                for (std::size_t k = 0; k < t.first.size(); k++) {
                                    INFO("layer " << l + 1 << ", " << t.name << " entry " << k + 1 << ": expected " << (*of[t.name])[k]
                                                  << " (model_loss's gradient), explain shows " << t.first[k]);
                                    CHECK(t.first[k] == doctest::Approx((*of[t.name])[k]).epsilon(1e-12));
                                }
                            }
                CHECK(seen.size() == of.size());
            }
            Tensor<double> dW_p_rows(n, c.H);  // rows 0..n-1 of dW_p
            std::copy(g.W_p.data.begin(), g.W_p.data.begin() + (std::ptrdiff_t)n * c.H, dW_p_rows.data.begin());
            check_shown("dX^(0)", dW_p_rows, "the rows of dW_p: position i reads W_p row i once, formulas §18");
        });
}

// A step of explain as docs/formulas.md lists it: its box and formula with the instance numbers of
// its layer written as the sheet writes the box (in "Layers, l = 2", X^(1) is X^(l-1) and X'^(2) is
// X'^(l); outside the layers, the last layer's X^(L)); "head i = 2" is "head i".
std::string m_generic_step(const ExplainStep& s, int L) {
    auto replace_all = [](std::string t, const std::string& a, const std::string& b) {
        for (std::size_t at = t.find(a); at != std::string::npos; at = t.find(a, at + b.size())) t.replace(at, a.size(), b);
        return t;
    };
    std::string box = s.box, formula = s.formula;
    const std::size_t l_at = box.find("l = ");
    if (l_at != std::string::npos) {
        const int l = std::stoi(box.substr(l_at + 4));
        box = box.substr(0, l_at) + "l";
        formula = replace_all(formula, "^(" + std::to_string(l) + ")", "^(l)");
        formula = replace_all(formula, "^(" + std::to_string(l - 1) + ")", "^(l-1)");
    } else {
        formula = replace_all(formula, "^(" + std::to_string(L) + ")", "^(L)");
    }
    const std::size_t i_at = box.find("i = ");
    if (i_at != std::string::npos) box = box.substr(0, i_at) + "i";
    return "- " + box + ": `" + formula + "`";
}

// ---- explain --html --------------------------------------------------------------------------------
// The page's JSON block, parsed.
Json m_page_json(const std::string& html) {
    const std::string start = "<script type=\"application/json\" id=\"explain-data\">";
    const std::size_t a = html.find(start), b = html.find("</script>", a);
    REQUIRE(a != std::string::npos);
    std::string js = html.substr(a + start.size(), b - a - start.size());
    for (std::size_t at = js.find("<\\/"); at != std::string::npos; at = js.find("<\\/", at)) js.replace(at, 3, "</");
    return parse_json(js);
}
std::size_t m_count(const std::string& s, const std::string& part) {
    std::size_t k = 0;
    for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) k++;
    return k;
}
// The steps as the page's JSON holds them, for explain_text: the text printed from the page's
// numbers must be explain's text, byte for byte.
std::vector<ExplainStep> m_steps_of_page(const Json& j) {
    std::vector<ExplainStep> steps;
    for (const Json& box : j.get("boxes")->arr) {
        ExplainStep s;
        s.depth = (int)box.get("depth")->num, s.box = box.get("box")->str, s.formula = box.get("formula")->str;
        s.backward = box.get("backward")->b;
        s.function = box.get("function")->str;
        for (const Json& line : box.get("picture")->arr) s.picture.push_back(line.str);
        for (const Json& t : box.get("tensors")->arr) {
            ExplainTensor e;
            e.name = t.get("name")->str, e.symbol = t.get("symbol")->str, e.more = t.get("more")->b;
            std::vector<int> dims;
            for (const Json& d : t.get("shape")->arr) dims.push_back((int)d.num);
            e.shape = shape_str(dims);
            for (const Json& v : t.get("first")->arr)
                e.first.push_back(v.type == Json::string ? (v.str == "-inf" ? -INFINITY : v.str == "inf" ? INFINITY : NAN) : v.num);
            (t.get("role")->str == "in" ? s.in : s.out).push_back(e);
        }
        steps.push_back(s);
    }
    return steps;
}

TEST_CASE("explain --html: a section and a formula per box, the JSON's numbers explain_text's, each cited line its function's") {
    const std::string source = m_read("transformer.cpp");
    std::vector<std::string> lines = {""};
    for (std::size_t a = 0, b; a < source.size(); a = b + 1) {
        b = source.find('\n', a);
        if (b == std::string::npos) b = source.size();
        lines.push_back(source.substr(a, b - a));
    }
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        const Config c = preset(name);
        const Batch b = m_explain_batch(c);
        const Params<float> p = m_model<float>(c, 4, 0.1);
        const Explained<float> e = explain(c, p, b, 4);
        ExplainHtml o;
        o.title = name, o.source = "transformer.cpp";
        const ExplainPage page = explain_html(c, p, b, o);
        REQUIRE_MESSAGE(page.stopped.empty(), "the run stopped at a function not written yet: " << page.stopped);
        CHECK(page.source == "transformer.cpp");
        CHECK(page.html.rfind("<!DOCTYPE html>\n<!-- written by transformer -->", 0) == 0);
        CHECK(page.boxes == (int)e.steps.size());
        CHECK(m_count(page.html, "<section id=\"b") == e.steps.size());
        CHECK(m_count(page.html, "<div class=\"formula\"><math>") == e.steps.size());  // a formula: one <math> per piece
        CHECK(m_count(page.html, "</math></div>") == e.steps.size());
        // Every backward box is checked, and passes; no forward box is.
        int backward = 0;
        for (const ExplainStep& s : e.steps) backward += s.box.rfind("Backward", 0) == 0;
        CHECK(page.checked == backward);
        CHECK(page.failing == 0);
        // The header says they pass, and nothing else about failing.
        CHECK(m_contains(page.html, "All " + std::to_string(backward) + " backward boxes pass their gradient check."));
        CHECK_FALSE(m_contains(page.html, "backward boxes fail their gradient check"));
        CHECK_FALSE(m_contains(page.html, "contains a failing box"));
        CHECK(m_count(page.html, "gradient check passes</span>") == (std::size_t)backward);
        // The numbers: the text printed from the page's JSON is explain's, and the loss is its loss.
        const Json j = m_page_json(page.html);
        CHECK(explain_text(c, m_steps_of_page(j)) == explain_text(c, e.steps));
        CHECK(j.get("loss")->num == doctest::Approx(e.loss).epsilon(1e-8));
        // Every value of a small tensor is on the page: X^(0)'s cells are its n x H values.
        bool seen = false;
        for (const Json& box : j.get("boxes")->arr)
            for (const Json& t : box.get("tensors")->arr)
                if (t.get("name")->str == "X^(1)" && !seen) {
                    seen = true;
                    CHECK(t.get("values")->arr.size() == (std::size_t)(b.n * c.H));
                    CHECK(t.get("rows")->arr.size() == (std::size_t)b.n);
                }
        CHECK(seen);
        // Each function's line is the line of its definition in transformer.cpp.
        std::size_t cited = 0;
        for (const Json& box : j.get("boxes")->arr)
            for (const auto& fl : box.get("lines")->obj) {
                const int line = (int)fl.second.num;
                CAPTURE(fl.first);
                CAPTURE(line);
                REQUIRE(line >= 1);
                REQUIRE(line < (int)lines.size());
                CHECK(m_contains(lines[line], " " + fl.first + "("));
                CHECK(lines[line].back() != ';');
                cited++;
            }
        CHECK(cited >= e.steps.size() - 1);  // all but the input box, whose "function" is a field
        CHECK(page.html.size() < 1000000);
        // No URL that would load something: no src, no url(), no http(s) link but the page's own.
        CHECK_FALSE(m_contains(page.html, " src="));
        CHECK_FALSE(m_contains(page.html, "url(http"));
        CHECK_FALSE(m_contains(page.html, "href=\"http"));
    }
    CHECK(definition_line(source, "LayerNorm_backward") > 0);
    CHECK(definition_line(source, "no_such_function_anywhere") == 0);
}

TEST_CASE("explain --html: a folded heat map keeps the first and last rows and says what it left out; the fold shrinks to the page's budget") {
    Config c = preset("tiny-gpt2");
    const Batch b = m_explain_batch(c);
    const Params<float> p = m_model<float>(c, 4, 0.1);
    ExplainHtml o;
    o.source = "transformer.cpp", o.fold = 4;  // W_e (V x H) and every n x H tensor are folded to 4 x 4
    const ExplainPage page = explain_html(c, p, b, o);
    REQUIRE_MESSAGE(page.stopped.empty(), "the run stopped at a function not written yet: " << page.stopped);
    const Json j = m_page_json(page.html);
    CHECK(j.get("fold")->num == 4);
    const Json& We = j.get("boxes")->arr[1].get("tensors")->arr[0];  // Embedding: W_e, V x H
    REQUIRE(We.get("name")->str == "W_e");
    std::vector<int> rows;
    for (const Json& r : We.get("rows")->arr) rows.push_back((int)r.num);
    CHECK(rows == std::vector<int>{1, 2, c.V - 1, c.V});
    CHECK(We.get("values")->arr[0].num == doctest::Approx(p.W_e[0]).epsilon(1e-7));
    CHECK(We.get("values")->arr[4 * 3 + 3].num == doctest::Approx(p.W_e(c.V - 1, c.H - 1)).epsilon(1e-7));
    CHECK(m_contains(page.html, "folded: rows 3.." + std::to_string(c.V - 2) + " (" + std::to_string(c.V - 4) + ") left out; columns 3.." +
                                    std::to_string(c.H - 2) + " (" + std::to_string(c.H - 4) + ") left out"));
    // A cell's title: the formula's (i, j), counted from 1; the cell (4 x 4 shown: numbered) the value to 3 significant digits.
    const double v = p.W_e(c.V - 1, c.H - 1);
    char want[96];
    std::snprintf(want, sizeof want, "title=\"(%d,%d)\">%s%.3g</i>", c.V, c.H, v < 0 ? "\u2212" : "", std::fabs(v));
    CHECK_MESSAGE(m_contains(page.html, want), "no cell " << want);
    // A budget of cells too small for 64 x 64 halves the fold until it fits.
    o.fold = 64, o.cells = 3000;
    const Json small = m_page_json(explain_html(c, p, b, o).html);
    CHECK(small.get("fold")->num < 64);
}

// The part of a page from box k's <section> (k counted from 1) to its end.
std::string m_box_html(const std::string& html, int k) {
    const std::size_t a = html.find("<section id=\"b" + std::to_string(k) + "\"");
    REQUIRE_MESSAGE(a != std::string::npos, "no box " << k << " on the page");
    return html.substr(a, html.find("</section>", a) - a);
}

// The part of a box's HTML from the heat map whose caption names `name` to its </figure>.
std::string m_figure_of(const std::string& box, const std::string& name) {
    const std::size_t a = box.find("<figure><figcaption><b>" + name + "</b>");
    REQUIRE_MESSAGE(a != std::string::npos, "no heat map of " << name << " in the box");
    return box.substr(a, box.find("</figure>", a) - a);
}

TEST_CASE("explain --html: a small tensor's cells print their values, the tokens are labelled cells, P and the masks on the 0..1 scale with masked cells hatched") {
    const Config c = preset("tiny-gpt2");
    const Batch b = m_explain_batch(c);  // 3, 1, 4, 1, 5: n = 5
    const Params<float> p = m_model<float>(c, 4, 0.1);
    const Explained<float> e = explain(c, p, b, 4);
    ExplainHtml o;
    o.source = "transformer.cpp", o.labels = {"c", "a", "t", "a", "s"};
    const ExplainPage page = explain_html(c, p, b, o);
    REQUIRE_MESSAGE(page.stopped.empty(), "the run stopped at a function not written yet: " << page.stopped);
    // Box 5, LayerNorm(X^(0)) (n x H = 5 x 8): each cell holds its value to 3 significant digits after its title's 4.
    REQUIRE(e.steps[4].function == "LayerNorm");
    const std::string ln = m_figure_of(m_box_html(page.html, 5), "LayerNorm(X^(0))");
    CHECK(m_contains(ln, "<div class=\"hm num\""));
    const double v = e.steps[4].out[0].first[1];  // (1, 2)
    char want[96];
    std::snprintf(want, sizeof want, "title=\"(1,2)\">%s%.3g</i>", v < 0 ? "\u2212" : "", std::fabs(v));  // the place in the title, the value in the cell
    CHECK_MESSAGE(m_contains(ln, want), "expected the cell " << want << " (explain's value of LayerNorm(X^(0))_{1,2}) in\n" << ln.substr(0, 600));
    CHECK(m_count(ln, "</i>") == (std::size_t)(b.n * c.H));
    // The input box: x as a row of labelled cells (position, token text, id), no heat map.
    const std::string input = m_box_html(page.html, 1);
    CHECK_FALSE(m_contains(input, "class=\"hm"));
    CHECK(m_contains(input, "<div class=\"tok\"><span title=\"x_1 = 3\"><small>1</small><b>c</b><small>3</small></span>"));
    CHECK(m_count(input, "<span title=\"x_") == (std::size_t)b.n);
    // P of head 1 of layer 1 (box 7): row 1 is (1, 0, 0, 0, 0) under Mask^AR. Its 1 is the darkest
    // blue of the 0..1 scale; the four entries j > 1 are masked: hatched, their title says so.
    REQUIRE(e.steps[6].box == "head i = 1");
    const std::string P = m_figure_of(m_box_html(page.html, 7), "P = Softmax(Mask (.) Q K^T / sqrt(D))");
    CHECK(m_contains(P, "<i class=b8 title=\"(1,1)\">1</i>"));
    CHECK(m_contains(P, "<i class=x title=\"(1,2) masked\">0</i>"));
    CHECK(m_count(P, "<i class=x ") == (std::size_t)(b.n * (b.n - 1) / 2));  // j > i
    CHECK(m_contains(P, "hatched: masked"));
    for (const char* red_blue : {"<i class=p", "<i class=n", "legend\" "}) CHECK_FALSE(m_contains(P, red_blue));
    // The mask (box 4): its kept entries 1 at the dark end, -inf hatched; Y = Softmax(Z) on the 0..1 scale too.
    const std::string M = m_figure_of(m_box_html(page.html, 4), "Mask^(1)");
    CHECK(m_contains(M, "<i class=b8 title=\"(2,1)\">1</i>"));
    CHECK(m_contains(M, "<i class=x title=\"(1,2)\">\u2212\u221e</i>"));
    CHECK(m_contains(m_figure_of(m_box_html(page.html, 26), "Y = Softmax(Z)"), "legend prob"));
    // The attention picture of the MultiHeadSA box hatches P's masked cells with its own pattern;
    // every id on the page is its own.
    const std::string sa = m_box_html(page.html, 6);
    CHECK(m_count(sa, "class='masked' fill='url(#f6-hatch)'") == (std::size_t)(c.A * b.n * (b.n - 1) / 2));
    CHECK(m_contains(sa, "<pattern id='f6-hatch'"));
    std::set<std::string> ids;
    for (std::size_t at = page.html.find(" id="); at != std::string::npos; at = page.html.find(" id=", at + 1)) {
        const char q = page.html[at + 4];
        const std::string id = page.html.substr(at + 5, page.html.find(q, at + 5) - at - 5);
        CHECK_MESSAGE(ids.insert(id).second, "the id " << id << " is on the page twice");
    }
    CHECK(ids.count("f4-scale") + ids.count("f4-hatch") == 2);
    // A formula wraps at its relations: one <math> per piece; code names upright and whole.
    const std::string ffn = m_box_html(page.html, 32);
    CHECK(m_contains(ffn, "<mi mathvariant=\"normal\">FFN_GELU_backward</mi>"));
    CHECK(m_count(ffn, "<math>") >= 8);
    CHECK_FALSE(m_contains(page.html, "<mi>backward</mi>"));
}

TEST_CASE("explain --html: the tokens, the masks and P are never folded, while the V x H tensors are; each box carries its § of formulas.md") {
    Config c = preset("tiny-gpt2");
    Batch b;
    b.n = 6, b.tokens = {3, 1, 4, 1, 5, 9}, b.targets = next_token_targets(b.tokens, 1, 6);
    const Params<float> p = m_model<float>(c, 4, 0.1);
    ExplainHtml o;
    o.source = "transformer.cpp", o.sheet = "docs/formulas.md";
    o.cells = 500;  // far below the page's cells: the fold halves down to 4
    const ExplainPage page = explain_html(c, p, b, o);
    REQUIRE_MESSAGE(page.stopped.empty(), "the run stopped at a function not written yet: " << page.stopped);
    const Json j = m_page_json(page.html);
    REQUIRE(j.get("fold")->num == 4);
    std::map<std::string, std::pair<std::size_t, std::size_t>> shown;  // first tensor of each name: rows, cols kept
    for (const Json& box : j.get("boxes")->arr)
        for (const Json& t : box.get("tensors")->arr)
            shown.insert({t.get("name")->str, {t.get("rows")->arr.size(), t.get("cols")->arr.size()}});
    CHECK(shown.at("W_e") == std::make_pair<std::size_t, std::size_t>(4, 4));  // V x H = 13 x 8, folded
    CHECK(shown.at("X^(0)") == std::make_pair<std::size_t, std::size_t>(4, 4));
    CHECK(shown.at("x") == std::make_pair<std::size_t, std::size_t>(1, 6));
    CHECK(shown.at("Mask^(1)") == std::make_pair<std::size_t, std::size_t>(6, 6));
    CHECK(shown.at("Mask") == std::make_pair<std::size_t, std::size_t>(6, 6));
    CHECK(shown.at("P = Softmax(Mask (.) Q K^T / sqrt(D))") == std::make_pair<std::size_t, std::size_t>(6, 6));
    CHECK(m_contains(page.html, "the tokens, the masks and P are never folded"));
    // The § of each box: Softmax (§5) for the output's Softmax, §10 for a head's Softmax_backward,
    // §15 for LayerNorm; each § once on the page, with the sheet's text.
    CHECK(page.sheet == "docs/formulas.md");
    const std::string sheet = m_read("docs/formulas.md");
    for (const Json& box : j.get("boxes")->arr) {
        const std::string f = box.get("function")->str;
        CAPTURE(f);
        const int sec = (int)box.get("section")->num;
        if (f == "Softmax") CHECK(sec == 5);
        if (f.rfind("Softmax_backward", 0) == 0) CHECK(sec == 10);
        if (f == "LayerNorm") CHECK(sec == 15);
        const std::string head = "## \u00a7" + std::to_string(sec) + " ";
        const std::size_t at = sheet.find(head);
        REQUIRE_MESSAGE(at != std::string::npos, "formulas.md has no heading " << head);
        const std::string title = sheet.substr(at + head.size(), sheet.find('\n', at) - at - head.size());
        CHECK(m_contains(m_box_html(page.html, (int)box.get("number")->num), "<summary>formulas &sect;" + std::to_string(sec) + " " + title + "</summary>"));
        CHECK(m_count(page.html, "<template id=\"s" + std::to_string(sec) + "\">") == 1);
    }
    // The text of §15 is the sheet's, from its heading's next line to the next heading.
    const std::size_t s15 = sheet.find("\n## \u00a715 "), s16 = sheet.find("\n## \u00a716 ");
    REQUIRE(s15 != std::string::npos);
    REQUIRE(s16 != std::string::npos);
    const std::size_t body = sheet.find('\n', s15 + 1) + 1;
    std::string text = sheet.substr(body, s16 - body);
    for (std::size_t at = text.find('&'); at != std::string::npos; at = text.find('&', at + 1)) text.replace(at, 1, "&amp;");
    for (std::size_t at = text.find('<'); at != std::string::npos; at = text.find('<', at + 1)) text.replace(at, 1, "&lt;");
    for (std::size_t at = text.find('>'); at != std::string::npos; at = text.find('>', at + 1)) text.replace(at, 1, "&gt;");
    for (std::size_t at = text.find('"'); at != std::string::npos; at = text.find('"', at + 1)) text.replace(at, 1, "&quot;");
    for (std::size_t at = text.find('\''); at != std::string::npos; at = text.find('\'', at + 1)) text.replace(at, 1, "&apos;");
    CHECK(m_contains(page.html, "<template id=\"s15\"><pre>" + text + "</pre></template>"));
    // Without the sheet the page says so; a sheet that cannot be read is an error naming it.
    ExplainHtml none = o;
    none.sheet = "no/such/formulas.md";
    CHECK_THROWS_WITH(explain_html(c, p, b, none), doctest::Contains("no/such/formulas.md"));
}

// A wrong FFN_backward of the page cases: dW_1 twice what it should be (formulas §14), the rest right.
Tensor<double> m_ffn_backward_dW1_doubled(const Tensor<double>& X, const FFNParams<double>& q, Activation act, const FFNCache<double>& k,
                                          const Tensor<double>& dY, FFNParams<double>& g) {
    Tensor<double> dX = FFN_backward(X, q, act, k, dY, g);
    for (std::size_t a = 0; a < g.W_1.size(); a++) g.W_1[a] *= 2;
    return dX;
}
TEST_CASE("explain --html: one failing box is \"1 of N backward boxes fails its gradient check\", in the contents only it is red") {
    Config c = preset("tiny-gpt2");
    c.L = 1;  // one FFN: one FFN_backward box
    const Batch b = m_explain_batch(c);
    const Params<float> p = m_model<float>(c, 4, 0.1);
    ExplainHtml o;
    o.source = "transformer.cpp";
    o.backwards.FFN_backward = m_ffn_backward_dW1_doubled;
    const ExplainPage page = explain_html(c, p, b, o);
    REQUIRE_MESSAGE(page.stopped.empty(), "the run stopped at a function not written yet: " << page.stopped);
    REQUIRE(page.failing == 1);
    CHECK(m_contains(page.html, "1 of " + std::to_string(page.checked) + " backward boxes fails its gradient check:"));
    // The contents: the failing item's <li> is red (class fail), its group's is not.
    CHECK(m_count(page.html, "<li value=\"") > 20);
    std::size_t red = 0;
    for (std::size_t at = page.html.find("<li "); at != std::string::npos && at < page.html.find("</nav>"); at = page.html.find("<li ", at + 1)) {
        const std::string li = page.html.substr(at, page.html.find('>', at) - at);
        if (m_contains(li, "fail")) {
            red++;
            CHECK_MESSAGE(m_contains(li, "<li value=\""), "a group is marked red: " << li);
        }
    }
    CHECK(red == 1);
    CHECK(m_contains(page.html, "f / F next / previous failing box"));
    // A stub in place of FFN_backward: its one box is not implemented yet, "1 more is".
    o.backwards.FFN_backward = [](const Tensor<double>&, const FFNParams<double>&, Activation, const FFNCache<double>&, const Tensor<double>&,
                                  FFNParams<double>&) -> Tensor<double> { throw NotImplemented("FFN_backward", "assignment 5"); };
    const ExplainPage stub = explain_html(c, p, b, o);
    REQUIRE(stub.missing == 1);
    CHECK(m_contains(stub.html, "<span class=\"missing\">1 more is not implemented yet.</span>"));
    CHECK_FALSE(m_contains(stub.html, "more are not"));
}

// A LayerNorm_backward with one term left out (the - Xhat mean(G Xhat) of dX): what a student's
// wrong line gives.
Tensor<double> m_wrong_layernorm_backward(const Tensor<double>& gamma, const LayerNormCache<double>& k, const Tensor<double>& dY,
                                          Tensor<double>& dgamma, Tensor<double>& dbeta) {
    const int n = dY.rows(), H = dY.cols();
    Tensor<double> dX(dY.shape);
    for (int i = 0; i < n; i++) {
        double mean = 0;
        for (int j = 0; j < H; j++) mean += dY(i, j) * gamma[j] / H;
        for (int j = 0; j < H; j++) {
            dX(i, j) = k.rstd[i] * (dY(i, j) * gamma[j] - mean);
            dgamma[j] += dY(i, j) * k.Xhat(i, j);
            dbeta[j] += dY(i, j);
        }
    }
    return dX;
}

// A mistake in how the walk joins its parts, planted in the walk itself (ExplainDetail::plant): the
// gradient of stage (s, l) as the backward reports it is changed before it flows on, as the composing
// function's wrong line would compute it. seen keeps the gradients reported before, for mistakes
// that leave a term out or reuse a neighbour's.
struct m_Joined : Trace {
    using Trace::backward;
    std::map<std::pair<int, int>, TD> seen;
    std::function<void(Stage, int, TD&, m_Joined&)> change;
    const TD& of(Stage s, int l) { return seen.at({(int)s, l}); }
    void backward(Stage s, int l, TD& d) override {
        change(s, l, d, *this);
        seen[{(int)s, l}] = d;
    }
};
TEST_CASE("explain: a mistake in how a block's backward joins its parts fails in that function's box, the relation named, and never passes") {
    // Each class of mistake, planted in several stages, post-LN (BERT) and pre-LN (GPT-2): the first
    // box failing on its own is the composing function's (pre_ln_block_backward, ...), whose module
    // passes on its own; its failing gradient of the walk names the relation (formulas: the block's
    // backward line); every other box passes gradient by gradient.
    struct Case {
        std::string preset, what;
        Stage s;
        int l;
        std::function<void(TD&, m_Joined&)> change;
        std::string function, gradient, relation;
    };
    auto minus = [](TD& d, const TD& t) {
        TD u = t;
        multiply_inplace(u, TD(u.shape, -1.0));
        add_inplace(d, u);
    };
    auto per_row = [](TD& d, bool rows) {
        for (int i = 0; i < d.rows(); i++)
            for (int j = 0; j < d.cols(); j++) d(i, j) += rows ? 0.1 * (i + 1) : 0.1 * (j + 1);
    };
    const std::vector<Case> cases = {
        {"tiny-gpt2", "the residual dX'^(2) left out of dX^(1)", Stage::X, 1, [&](TD& d, m_Joined& j) { minus(d, j.of(Stage::X_mid, 2)); },
         "pre_ln_block_backward", "dX^(1)", "backward \u2212 finite difference = \u2212dX'^(2) at every entry compared: the term dX'^(2) left out (a path dropped)?"},
        {"tiny-gpt2", "dX^(2) left out of dX'^(2)", Stage::X_mid, 2, [&](TD& d, m_Joined& j) { minus(d, j.of(Stage::X, 2)); },
         "pre_ln_block_backward", "dX'^(2)", "the term dX^(2) left out (a path dropped)?"},
        {"tiny-bert", "dU left out of dX'^(1)", Stage::X_mid, 1, [&](TD& d, m_Joined& j) { minus(d, j.of(Stage::ffn_sum, 1)); },
         "post_ln_block_backward", "dX'^(1)", "the term dU left out (a path dropped)?"},
        {"tiny-bert", "dS left out of dX^(1)", Stage::X, 1, [&](TD& d, m_Joined& j) { minus(d, j.of(Stage::attn_sum, 2)); },
         "post_ln_block_backward", "dX^(1)", "the term dS left out (a path dropped)?"},
        {"tiny-gpt2", "dX'^(1) taken as dX^(1), its neighbour's", Stage::X_mid, 1, [&](TD& d, m_Joined& j) { d = j.of(Stage::X, 1); },
         "pre_ln_block_backward", "dX'^(1)", "backward = dX^(1) (another gradient of the walk) at every entry compared: computed as dX^(1) is?"},
        {"tiny-bert", "dS taken as dX'^(2), its neighbour's", Stage::attn_sum, 2, [&](TD& d, m_Joined& j) { d = j.of(Stage::X_mid, 2); },
         "post_ln_block_backward", "dS", "computed as dX'^(2) is?"},
        {"tiny-gpt2", "dX^(1) doubled", Stage::X, 1, [&](TD& d, m_Joined&) { multiply_inplace(d, TD(d.shape, 2.0)); },
         "pre_ln_block_backward", "dX^(1)", "backward = 2 \u00d7 finite difference at every entry compared: a factor of"},
        {"tiny-bert", "dU's sign flipped", Stage::ffn_sum, 2, [&](TD& d, m_Joined&) { multiply_inplace(d, TD(d.shape, -1.0)); },
         "post_ln_block_backward", "dU", "a sign?"},
        {"tiny-gpt2", "a number added per row of dX'^(2)", Stage::X_mid, 2, [&](TD& d, m_Joined&) { per_row(d, true); },
         "pre_ln_block_backward", "dX'^(2)", "one number per row, the same along it: a term per row left out"},
        {"tiny-bert", "a number added per column of dS", Stage::attn_sum, 1, [&](TD& d, m_Joined&) { per_row(d, false); },
         "post_ln_block_backward", "dS", "one number per column, the same down it: a term per column left out"},
        {"tiny-gpt2", "dZ not 0 on the last row, which has no target", Stage::logits, 2, [&](TD& d, m_Joined&) { d(d.rows() - 1, 0) += 0.5; },
         "model_loss", "dZ", "where the finite difference is 0, (5, 1): no path leads from there to the loss"},
        {"tiny-bert", "dZ not 0 on a row without a target", Stage::logits, 2, [&](TD& d, m_Joined&) { d(0, 3) += 0.5, d(2, 1) -= 0.25; },
         "model_loss", "dZ", "the backward is not 0 at 2 entries where the finite difference is 0, (1, 4), (3, 2): no path"},
        {"tiny-gpt2", "row 3 of dX'^(1) left 0", Stage::X_mid, 1, [&](TD& d, m_Joined&) { std::fill(d.row(2), d.row(2) + d.cols(), 0.0); },
         "pre_ln_block_backward", "dX'^(1)", "the backward is 0 at 8 entries where the finite difference is not, (3, 1), (3, 2), (3, 3), (3, 4), ...: a path left out?"},
        {"tiny-bert", "dX^(2) never written", Stage::X, 2, [&](TD& d, m_Joined&) { d = TD(d.shape, 0.0); },
         "model_backward", "dX^(2)", "the gradient is never written?"},
    };
    for (const Case& k : cases) {
        CAPTURE(k.preset);
        CAPTURE(k.what);
        const Config c = preset(k.preset);
        const Batch b = m_explain_batch(c);
        const Params<double> p = m_model<double>(c, 31, 0.2);
        m_Joined plant;
        plant.change = [&](Stage s, int l, TD& d, m_Joined& j) {
            if (s == k.s && l == k.l) k.change(d, j);
        };
        ExplainDetail detail;
        detail.plant = &plant;
        const Explained<double> e = explain(c, p, b, 2, &detail);
        int first = -1;
        for (std::size_t i = 0; i < e.steps.size(); i++) {
            const ExplainCheck& ck = e.steps[i].check;
            if (!ck.done) continue;
            CAPTURE(e.steps[i].box + ": " + e.steps[i].formula);
            if (first < 0 && ck.pass) {
                for (const ExplainGradient& g : ck.gradients) CHECK_MESSAGE(g.pass, g.name << " fails before the planted mistake");
                continue;
            }
            if (first < 0) {
                first = (int)i;
                CHECK_MESSAGE(ck.callee < 0, "the first failing box fails through a callee");
                CHECK_MESSAGE(ck.function == k.function, "the first failing box's function: expected " << k.function << " (the composing one), got " << ck.function);
                bool named = false;
                for (const ExplainGradient& g : ck.gradients)
                    if (!g.pass && g.name.rfind(k.gradient + " ", 0) == 0) {
                        named = true;
                        CHECK_MESSAGE(m_contains(g.relation, k.relation), g.name << "'s relation: expected it to hold \"" << k.relation << "\", got \"" << g.relation << "\"");
                    }
                CHECK_MESSAGE(named, "the first failing box has no failing gradient " << k.gradient);
                continue;
            }
            // Every other box passes gradient by gradient: each line of the walk is checked given the
            // gradient it receives, so the boxes below the mistake are right about their own lines.
            CHECK_MESSAGE(ck.pass, "a box after the mistake fails too: [" << i + 1 << "] " << ck.function << ", " << ck.tensor);
            for (const ExplainGradient& g : ck.gradients) CHECK_MESSAGE(g.pass, g.name << " fails after the planted mistake");
        }
        CHECK_MESSAGE(first >= 0, "no box fails: the mistake passes");
    }
}

TEST_CASE("explain --html: each gradient of a backward box has its own verdict, and a factor, a sign, a transpose, another gradient or a term per row is named") {
    // Wrong backwards a student writes, injected through ExplainBackwards, on tiny-gpt2 (D = 4):
    // each gradient row of the failing boxes says passes or fails on its own (the finite differences of
    // the box's forward decide it, formulas §14/§15), and the relation that explains the failure.
    const Config c = preset("tiny-gpt2");
    const Batch b = m_explain_batch(c);
    const Params<float> p = m_model<float>(c, 4, 0.1);
    REQUIRE(c.D == 4);
    struct Wrong {
        std::string what, function;
        ExplainBackwards bw;
        std::map<std::string, bool> pass;  // each gradient's expected verdict
        std::string relation_of, relation;  // a gradient and the words its relation holds
        std::string first_failing;          // the box's note: the first gradient in the backward's order to fail
    };
    std::vector<Wrong> wrongs;
    {  // FFN_backward with the activation's derivative taken at A = act(Z), not at Z
        Wrong w{"act'(A) for act'(Z)", "FFN_backward", {}, {{"dW_2", true}, {"db_2", true}, {"dW_1", false}, {"db_1", false}, {"dX", false}}, "", "", "dW_1"};
        w.bw.FFN_backward = [](const Tensor<double>& X, const FFNParams<double>& q, Activation act, const FFNCache<double>& k, const Tensor<double>& dY,
                               FFNParams<double>& g) {
            FFNCache<double> at_A = k;  // FFN_backward's own steps, with Z replaced by A
            at_A.Z = k.A;
            return FFN_backward(X, q, act, at_A, dY, g);
        };
        wrongs.push_back(w);
    }
    {  // LayerNorm_backward without dX's term - Xhat mean(G Xhat)
        Wrong w{"a term left out", "LayerNorm_backward", {}, {{"dgamma", true}, {"dbeta", true}, {"dX", false}}, "", "", "dX"};
        w.bw.LayerNorm_backward = m_wrong_layernorm_backward;
        wrongs.push_back(w);
    }
    {  // LayerNorm_backward with dgamma times 1.5 and dbeta of the wrong sign
        Wrong w{"dgamma x 1.5, -dbeta", "LayerNorm_backward", {}, {{"dgamma", false}, {"dbeta", false}, {"dX", true}}, "dgamma",
                "backward = 1.5 \u00d7 finite difference at every entry compared: a constant factor?", ""};
        w.bw.LayerNorm_backward = [](const Tensor<double>& gamma, const LayerNormCache<double>& k, const Tensor<double>& dY, Tensor<double>& dgamma,
                                     Tensor<double>& dbeta) {
            Tensor<double> dX = LayerNorm_backward(gamma, k, dY, dgamma, dbeta);
            for (std::size_t a = 0; a < dgamma.size(); a++) dgamma[a] *= 1.5, dbeta[a] = -dbeta[a];
            return dX;
        };
        wrongs.push_back(w);
    }
    {  // MultiHeadSA_backward whose dW_i^K is D times too large (sqrt(D) for 1/sqrt(D) in dK)
        Wrong w{"dW^K x D", "MultiHeadSA_backward", {}, {{"dW^O", true}, {"dW_1^V", true}, {"dW_1^Q", true}, {"dW_1^K", false}, {"dW_2^K", false}, {"dX", true}},
                "dW_1^K", "backward = 4 \u00d7 finite difference at every entry compared: a factor of D", "dW_1^K"};
        w.bw.MultiHeadSA_backward = [](const Tensor<double>& X, const MultiHeadSAParams<double>& q, const MultiHeadSACache<double>& k, const Tensor<double>& dY,
                                       MultiHeadSAParams<double>& g) {
            Tensor<double> dX = MultiHeadSA_backward(X, q, k, dY, g);
            for (Tensor<double>& t : g.W_K)
                for (std::size_t a = 0; a < t.size(); a++) t[a] *= 4;
            return dX;
        };
        wrongs.push_back(w);
    }
    {  // MultiHeadSA_backward whose dW^O (AD x H = 8 x 8) is transposed
        Wrong w{"dW^O transposed", "MultiHeadSA_backward", {}, {{"dW^O", false}, {"dW_1^V", true}, {"dW_1^Q", true}, {"dW_1^K", true}, {"dX", true}},
                "dW^O", "backward = the finite difference transposed: a transpose?", ""};
        w.bw.MultiHeadSA_backward = [](const Tensor<double>& X, const MultiHeadSAParams<double>& q, const MultiHeadSACache<double>& k, const Tensor<double>& dY,
                                       MultiHeadSAParams<double>& g) {
            Tensor<double> dX = MultiHeadSA_backward(X, q, k, dY, g);
            g.W_O = transpose(g.W_O);
            return dX;
        };
        wrongs.push_back(w);
    }
    {  // LayerNorm_backward whose dX is wrong in row 2 alone
        Wrong w{"dX's row 2", "LayerNorm_backward", {}, {{"dgamma", true}, {"dbeta", true}, {"dX", false}}, "dX", "only row 2 differs; the others agree", "dX"};
        w.bw.LayerNorm_backward = [](const Tensor<double>& gamma, const LayerNormCache<double>& k, const Tensor<double>& dY, Tensor<double>& dgamma,
                                     Tensor<double>& dbeta) {
            Tensor<double> dX = LayerNorm_backward(gamma, k, dY, dgamma, dbeta);
            dX(1, 0) += 0.5;
            return dX;
        };
        wrongs.push_back(w);
    }
    {  // MultiHeadSA_backward whose dW_i^K is computed as its neighbour dW_i^Q is
        Wrong w{"dW^K as dW^Q", "MultiHeadSA_backward", {}, {{"dW^O", true}, {"dW_1^V", true}, {"dW_1^Q", true}, {"dW_1^K", false}, {"dW_2^K", false}, {"dX", true}},
                "dW_1^K", "backward = dW_1^Q (another gradient of this box) at every entry compared: computed as dW_1^Q is?", "dW_1^K"};
        w.bw.MultiHeadSA_backward = [](const Tensor<double>& X, const MultiHeadSAParams<double>& q, const MultiHeadSACache<double>& k, const Tensor<double>& dY,
                                       MultiHeadSAParams<double>& g) {
            Tensor<double> dX = MultiHeadSA_backward(X, q, k, dY, g);
            for (std::size_t i = 0; i < g.W_K.size(); i++) g.W_K[i] = g.W_Q[i];
            return dX;
        };
        wrongs.push_back(w);
    }
    {  // LayerNorm_backward without dX's term - mean(G): a number per row left out, rstd_i mean_j G_ij
        Wrong w{"a row mean left out", "LayerNorm_backward", {}, {{"dgamma", true}, {"dbeta", true}, {"dX", false}}, "dX",
                "backward \u2212 finite difference is one number per row, the same along it: a term per row left out", "dX"};
        w.bw.LayerNorm_backward = [](const Tensor<double>& gamma, const LayerNormCache<double>& k, const Tensor<double>& dY, Tensor<double>& dgamma,
                                     Tensor<double>& dbeta) {
            Tensor<double> dX = LayerNorm_backward(gamma, k, dY, dgamma, dbeta);
            for (int i = 0; i < dX.rows(); i++) {
                double mean_g = 0;
                for (int j = 0; j < dX.cols(); j++) mean_g += dY(i, j) * gamma[j] / dX.cols();
                for (int j = 0; j < dX.cols(); j++) dX(i, j) += k.rstd[i] * mean_g;
            }
            return dX;
        };
        wrongs.push_back(w);
    }
    for (const Wrong& w : wrongs) {
        CAPTURE(w.what);
        ExplainHtml o;
        o.source = "transformer.cpp";
        o.backwards = w.bw;
        const ExplainPage page = explain_html(c, p, b, o);
        REQUIRE_MESSAGE(page.stopped.empty(), "the run stopped at a function not written yet: " << page.stopped);
        const Json j = m_page_json(page.html);
        int boxes = 0;
        for (const Json& box : j.get("boxes")->arr) {
            const Json* ck = box.get("check");
            if (!ck || ck->get("function")->str != w.function) continue;
            boxes++;
            CAPTURE(box.get("number")->num);
            CHECK(ck->get("pass")->b == false);
            std::map<std::string, bool> got;
            std::vector<std::string> order;
            for (const Json& g : ck->get("gradients")->arr) {
                got[g.get("name")->str] = g.get("pass")->b;
                order.push_back(g.get("name")->str);
                CHECK_MESSAGE(g.get("entries")->num > 0, g.get("name")->str << ": no entry compared");
                if (g.get("name")->str == w.relation_of)
                    CHECK_MESSAGE(m_contains(g.get("relation")->str, w.relation), w.relation_of << "'s relation: expected \"" << w.relation << "\", got \"" << g.get("relation")->str << "\"");
                if (g.get("name")->str == "dbeta" && w.relation_of == "dgamma")
                    CHECK(m_contains(g.get("relation")->str, "backward = -1 \u00d7 finite difference at every entry compared: a sign?"));
            }
            for (const auto& kv : w.pass) {
                CAPTURE(kv.first);
                REQUIRE_MESSAGE(got.count(kv.first), "no gradient row " << kv.first << " in the " << w.function << " box");
                CHECK_MESSAGE(got[kv.first] == kv.second, kv.first << ": expected " << (kv.second ? "passes" : "fails")
                              << " (finite differences of the box's forward), got " << (got[kv.first] ? "passes" : "fails"));
                // The page's row says the same as the JSON.
                CHECK(m_contains(page.html, "data-gradient=\"" + kv.first + "\" data-verdict=\"" + (kv.second ? "passes" : "fails") + "\""));
            }
            if (w.first_failing.empty()) CHECK(ck->get("first_failing")->str.empty());  // the first gradient fails: no note
            else CHECK(m_contains(ck->get("first_failing")->str, w.first_failing + " is the first gradient in the backward's order to fail"));
        }
        CHECK(boxes > 0);
        // The other boxes pass, gradient by gradient.
        for (const Json& box : j.get("boxes")->arr) {
            const Json* ck = box.get("check");
            if (!ck || ck->get("function")->str == w.function) continue;
            CHECK(ck->get("pass")->b);
            for (const Json& g : ck->get("gradients")->arr) CHECK_MESSAGE(g.get("pass")->b, box.get("number")->num << " " << g.get("name")->str);
        }
    }
}

TEST_CASE("explain --html: a wrong LayerNorm_backward or a wrong dW^K fails exactly its boxes, and marks the blocks holding them") {
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        const Config c = preset(name);
        const Batch b = m_explain_batch(c);
        const Params<float> p = m_model<float>(c, 4, 0.1);
        for (const std::string wrong : {"LayerNorm_backward", "MultiHeadSA_backward"}) {
            CAPTURE(wrong);
            ExplainHtml o;
            o.source = "transformer.cpp";
            if (wrong == "LayerNorm_backward") o.backwards.LayerNorm_backward = m_wrong_layernorm_backward;
            else  // Attention_backward's dK without its transpose changes dW^K alone: here, dW^K halved
                o.backwards.MultiHeadSA_backward = [](const Tensor<double>& X, const MultiHeadSAParams<double>& q, const MultiHeadSACache<double>& k,
                                                      const Tensor<double>& dY, MultiHeadSAParams<double>& g) {
                    Tensor<double> dX = MultiHeadSA_backward(X, q, k, dY, g);
                    for (Tensor<double>& t : g.W_K)
                        for (std::size_t a = 0; a < t.size(); a++) t[a] *= 0.5;
                    return dX;
                };
            const ExplainPage page = explain_html(c, p, b, o);
            REQUIRE_MESSAGE(page.stopped.empty(), "the run stopped at a function not written yet: " << page.stopped);
            const Json j = m_page_json(page.html);
            int failing = 0, of_it = 0;
            std::set<std::string> groups;
            for (const Json& box : j.get("boxes")->arr) {
                const Json* ck = box.get("check");
                if (!ck) continue;
                const bool mine = ck->get("function")->str == wrong;
                CAPTURE(box.get("box")->str);
                CHECK(ck->get("pass")->b == !mine);
                of_it += mine;
                if (!ck->get("pass")->b) {
                    failing++, groups.insert(box.get("box")->str);
                    CHECK(ck->get("err")->num > ck->get("tol")->num);
                    CHECK(ck->get("tensor")->str == (mine && wrong == "LayerNorm_backward" ? "dX" : ck->get("tensor")->str));
                }
            }
            CHECK(of_it > 0);
            CHECK(failing == of_it);
            CHECK(page.failing == failing);
            CHECK(m_count(page.html, "gradient check fails</span>") == (std::size_t)failing);
            CHECK(m_count(page.html, "contains a failing box</span>") == groups.size());
            CHECK(m_contains(page.html, std::to_string(failing) + " of " + std::to_string(page.checked) + " backward boxes fail"));
            CHECK_FALSE(m_contains(page.html, "backward boxes pass their gradient check"));
        }
    }
}

TEST_CASE("explain --text: the checkpoint's tokenizer encodes the text, and the page labels the tokens with their text") {
    const std::string dir = m_path("explain-text");
    std::filesystem::remove_all(dir);
    REQUIRE(m_make_dir(dir));
    std::string text;
    for (int k = 0; k < 20; k++) text += "hello world, the cat sat on the mat\n";
    m_write(dir + "/tiny.txt", text);
    const std::string ck = dir + "/tiny.st";
    m_run_ok("train --data " + dir + "/tiny.txt --layers 1 --heads 2 --embd 8 --block 8 --steps 2 --warmup 0 --eval-every 0 --quiet --out " + ck);
    // --text "cat" is the same run as --tokens of its characters' ids.
    const m_Run by_text = m_run_ok("explain --checkpoint " + ck + " --text cat --html " + dir + "/text.html");
    const CharVocab v = CharVocab::from_text(text);
    const std::string ids = std::to_string(v.id[(unsigned char)'c']) + "," + std::to_string(v.id[(unsigned char)'a']) + "," + std::to_string(v.id[(unsigned char)'t']);
    const m_Run by_ids = m_run_ok("explain --checkpoint " + ck + " --tokens " + ids + " --html " + dir + "/ids.html");
    const auto text_part = [](const std::string& out) { return out.substr(0, out.find("\nwrote ")); };
    CHECK(text_part(by_text.out) == text_part(by_ids.out));
    // Both pages name the tokens by their text, in the header and on the attention pictures' axes.
    for (const char* page : {"text.html", "ids.html"}) {
        CAPTURE(page);
        const std::string html = m_read(dir + "/" + page);
        CHECK(m_contains(html, "tokens x = c, a, t;"));
        CHECK(m_contains(html, "text-anchor='middle'>a</text>"));
    }
    // Without a checkpoint there is no tokenizer: an error naming --text; one of the two is needed.
    CHECK(m_contains(m_run("explain --preset tiny-gpt --text cat").err, "--text needs --checkpoint"));
    CHECK(m_contains(m_run("explain --preset tiny-gpt").err, "give exactly one of --tokens and --text"));
    CHECK(m_contains(m_run("explain --checkpoint " + ck + " --text cat --tokens 1").err, "give exactly one of --tokens and --text"));
}

TEST_CASE("explain --html FILE: the text unchanged, one page written whole; a bad --html is an error naming it and writes nothing") {
    const std::string dir = m_path("explain_html");
    m_make_dir(dir);
    const std::string page = dir + "/tiny.html";
    const m_Run text = m_run_ok("explain --preset tiny-gpt2 --tokens 3,1,4");
    const m_Run both = m_run_ok("explain --preset tiny-gpt2 --tokens 3,1,4 --html " + page);
    CHECK(both.out.rfind(text.out, 0) == 0);
    CHECK(m_contains(both.out.substr(text.out.size()), "wrote " + page + ": 50 boxes, 22 backward boxes checked against finite differences, 0 failing"));
    const std::string html = m_read(page);
    CHECK(m_contains(html, "</html>\n"));
    CHECK(html.size() < 1000000);
    m_run_ok("explain --preset tiny-gpt2 --tokens 3,1,4 --html " + page);  // its own page is replaced
    m_write(dir + "/notes.html", "<p>mine</p>");
    m_cli_fails("explain --preset tiny-gpt2 --tokens 3,1,4 --html " + dir + "/notes.html", "--html");
    CHECK(m_read(dir + "/notes.html") == "<p>mine</p>");
    m_cli_fails("explain --preset tiny-gpt2 --tokens 3,1,4 --html " + dir + "/no/such/dir/x.html", "--html");
    m_cli_fails("explain --preset tiny-bert --tokens 3,1,4 --html " + dir + "/b.html", "masked");
    CHECK_FALSE(m_exists(dir + "/b.html"));
}

// The <math> pieces of to_mathml's formula, joined: what a reader sees, without the wrapper.
static std::string m_mathml(const std::string& plain) { return to_mathml(plain, "", ""); }

TEST_CASE("explain --html: a compound operator (+=, <=, ...) is one <mo>, a hyphenated word (scatter-add, pre-LN) one word, no script is lost") {
    // Compound operators: one <mo> each, never two operators side by side.
    const std::vector<std::pair<std::string, std::string>> ops = {{"+=", "+="}, {"-=", "\u2212="}, {":=", "\u2254"}, {"==", "=="},
                                                                  {"<=", "\u2264"}, {">=", "\u2265"}, {"!=", "\u2260"}, {"->", "\u2192"}};
    for (const auto& op : ops) {
        const std::string ml = m_mathml("dW_e " + op.first + " dZ^T X");
        INFO(op.first << " set as " << ml);
        CHECK(m_contains(ml, "<mo>" + op.second + "</mo>"));
        CHECK(m_count(ml, "<mo>") == 1);
    }
    CHECK(m_contains(m_mathml("dW_p[1..n] += dX^(0)"), "<mn>1</mn><mo lspace=\"0\" rspace=\"0\">..</mo><mi>n</mi>"));
    // Hyphenated words: one <mtext>, the hyphen a hyphen, not a minus between two words.
    for (const std::string w : {"scatter-add", "pre-LN", "post-LN", "key-padding", "de-embedding", "Masked-LM", "right-to-left"}) {
        const std::string ml = m_mathml("dW_e += OneHot(x)^T dX^(0) (" + w + "), the " + w + " of it");
        INFO(w << " set as " << ml);
        CHECK(m_count(ml, "<mtext>" + w + "</mtext>") == 2);
        CHECK_FALSE(m_contains(ml, "\u2212"));
    }
    // Single letters or numbers around a - are a difference.
    CHECK(m_contains(m_mathml("Y_{j-1, x_j}"), "<mi>j</mi><mo>\u2212</mo><mn>1</mn>"));
    CHECK(m_contains(m_mathml("(k-1)D+1"), "<mi>k</mi><mo>\u2212</mo><mn>1</mn>"));
    CHECK(m_contains(m_mathml("1 - t"), "<mn>1</mn><mo>\u2212</mo><mi>t</mi>"));
    CHECK(m_contains(m_mathml("-inf"), "<mo>\u2212</mo><mi>\u221e</mi>"));
    // A second script of the same kind scripts the whole: (X^(L))^T and (W_i^Q)^T keep (L) and Q.
    CHECK(m_mathml("X^(L)^T") == "<math><mrow><msup><msup><mi>X</mi><mrow><mo>(</mo><mi>L</mi><mo>)</mo></mrow></msup><mi>T</mi></msup></mrow></math>");
    CHECK(m_contains(m_mathml("dQ_i W_i^Q^T"), "<msup><msubsup><mi>W</mi><mi>i</mi><mi>Q</mi></msubsup><mi>T</mi></msup>"));
    // Words: a possessive, a token in angle brackets, Greek gradients, hats.
    CHECK(m_contains(m_mathml("GELU: BERT's activation"), "<mtext>BERT\u2019s</mtext>"));
    CHECK_FALSE(m_contains(m_mathml("GELU: BERT's activation"), "\u2032"));
    CHECK(m_contains(m_mathml("X'^(l)"), "<mi>X\u2032</mi>"));  // a prime stays a prime
    CHECK(m_contains(m_mathml("dw_pad += the rows of dX^(0) at a <pad>"), "<mtext>&lt;pad&gt;</mtext>"));
    CHECK(m_contains(m_mathml("dgamma = sum_i dY Xhat"), "<mi>d\u03b3</mi>"));
    CHECK(m_contains(m_mathml("dgamma = sum_i dY Xhat"), "<mover accent=\"true\"><mi>X</mi><mo>^</mo></mover>"));
    CHECK(m_contains(m_mathml("that"), "<mi>that</mi>"));
    // Every formula the pages of the five variants hold (box and gradient lines): each compound
    // operator one <mo>, each hyphenated word one <mtext>, no two <mo> for one operator.
    std::set<std::string> formulas;
    for (const std::string name : m_TINY) {
        const Config c = preset(name);
        ExplainHtml o;
        o.source = "transformer.cpp";
        const ExplainPage page = explain_html(c, m_model<float>(c, 4, 0.1), m_explain_batch(c), o);
        const Json j = m_page_json(page.html);
        for (const Json& box : j.get("boxes")->arr) {
            formulas.insert(box.get("formula")->str);
            if (const Json* ck = box.get("check"))
                for (const Json& g : ck->get("gradients")->arr) formulas.insert(g.get("formula")->str);
        }
    }
    CHECK(formulas.size() > 60);
    const std::regex hyphenated(R"([A-Za-z]{2,}(-[A-Za-z]{2,})+)");
    std::size_t compounds = 0, words = 0;
    for (const std::string& f : formulas) {
        const std::string ml = m_mathml(f);
        INFO("the formula " << f << "\nset as " << ml);
        for (const auto& op : ops)
            for (std::size_t at = f.find(op.first); at != std::string::npos; at = f.find(op.first, at + 1), compounds++)
                CHECK(m_contains(ml, "<mo>" + op.second + "</mo>"));
        for (auto it = std::sregex_iterator(f.begin(), f.end(), hyphenated); it != std::sregex_iterator(); ++it, words++)
            CHECK(m_contains(ml, "<mtext>" + it->str() + "</mtext>"));
        for (const char* twice : {"<mo>+</mo><mo>=</mo>", "<mo>\u2212</mo><mo>=</mo>", "<mo>&lt;</mo><mo>=</mo>", "<mo>.</mo><mo>.</mo>", "\u2032</mi><mi>s</mi>"})
            CHECK_FALSE(m_contains(ml, twice));
    }
    CHECK(compounds >= 3);  // dW_e += in the embedding's and the output's backward
    CHECK(words >= 2);      // scatter-add, de-embedding
}

// ---- browser: explain --html in a real browser ---------------------------------------------------
// Headless Chromium opens the page of every variant: no console message, no request made by the
// page (the net log's requests with an initiator: the browser's own have none), and the page's
// script reports as many laid-out boxes and <math> elements as explain prints boxes.
// The test directory m_path(name), made, as an absolute path (Chromium opens file:// URLs).
std::string m_abs_dir(const std::string& name) {
    const std::string dir = m_path(name);
    m_make_dir(dir);
    const std::string cwd = m_cwd();
    return dir[0] == '/' ? dir : std::string(cwd) + "/" + dir;
}

TEST_CASE("browser: explain --html's page of every variant renders in headless Chromium, each box and its MathML, offline" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    std::string browser;
    for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
        if (browser.empty() && std::system((std::string("command -v ") + b + " > /dev/null 2>&1").c_str()) == 0) browser = b;
    if (browser.empty()) {
        FAIL_CHECK("no browser: this case needs headless Chromium (Debian: apt-get install chromium; .ci/run installs it)");
        return;
    }
    const std::string abs = m_abs_dir("browser");
    for (const std::string v : {"gpt", "gpt2", "gpt3", "bert", "roberta"}) {
        CAPTURE(v);
        const std::string page = abs + "/" + v + ".html", profile = abs + "/profile-" + v, net = abs + "/net-" + v + ".json";
        const m_Run r = m_run_ok("explain --preset tiny-" + v + " --tokens 3,1,4,1,5" + (v == "bert" || v == "roberta" ? " --masked 2" : "") +
                                 " --html " + page);
        REQUIRE_MESSAGE(!m_contains(r.out + r.err, "not implemented"), "the run stopped at a function not written yet:\n" << r.out << r.err);
        std::size_t boxes = 0;
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);) {
            const std::size_t a = line.find_first_not_of(' ');
            boxes += a != std::string::npos && line[a] == '[' && std::isdigit((unsigned char)line[a + 1]) && m_contains(line, "] ");
        }
        REQUIRE(boxes > 30);
        const std::string cmd = "timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                                "--disable-background-networking --disable-component-update --disable-sync --host-resolver-rules='MAP * ~NOTFOUND' "
                                "--user-data-dir=" + profile + " --enable-logging=stderr --v=0 --log-net-log=" + net +
                                " --dump-dom 'file://" + page + "?rendered' > " + abs + "/dom-" + v + ".html 2> " + abs + "/log-" + v + ".txt";
        INFO("command: " << cmd);
        REQUIRE(std::system(cmd.c_str()) == 0);
        const std::string dom = m_read(abs + "/dom-" + v + ".html"), log = m_read(abs + "/log-" + v + ".txt");
        // The page's script ran and counted what the browser laid out.
        CHECK(m_contains(dom, "data-rendered=\"boxes " + std::to_string(boxes) + ", math " + std::to_string(boxes) + "\""));
        CHECK(m_count(dom, "<section id=\"b") == boxes);
        CHECK(m_count(dom, "<div class=\"formula\"><math>") == boxes);
        // No console message (an error in the script, a refused resource).
        std::istringstream ls(log);
        for (std::string line; std::getline(ls, line);) CHECK_MESSAGE(!m_contains(line, ":CONSOLE"), line);
        // No request from the page: every URL request in the net log is the browser's own.
        const Json j = parse_json(m_read(net));
        int start = -1;
        for (const auto& kv : j.get("constants")->get("logEventTypes")->obj)
            if (kv.first == "URL_REQUEST_START_JOB") start = (int)kv.second.num;
        REQUIRE(start >= 0);
        for (const Json& e : j.get("events")->arr) {
            if ((int)e.get("type")->num != start || !e.get("params")) continue;
            const Json* initiator = e.get("params")->get("initiator");
            const Json* url = e.get("params")->get("url");
            CHECK_MESSAGE((!initiator || initiator->str == "not an origin"), "the page requested " << (url ? url->str : "?"));
        }
    }
}

// The page's layout at 1400 px, measured by a script the test appends to a copy of the page (every
// box laid out first, not only those in view): every <math> inside its box's content box and scrolled by nothing (no scroll bar of its own), each id
// once on the page, and every url(#id) or href="#id" of a figure (an inline <svg>) an element of the
// same figure. Its findings go to <body data-probe="..."> for --dump-dom.
static const char* const m_PAGE_PROBE = R"(<script>(function(){var over=[],n=0;
[].forEach.call(document.querySelectorAll('section.box'),function(s){s.style.contentVisibility='visible';});
[].forEach.call(document.querySelectorAll('main section'),function(sec){var cs=getComputedStyle(sec),r=sec.getBoundingClientRect();
 var left=r.left+parseFloat(cs.borderLeftWidth)+parseFloat(cs.paddingLeft),right=r.right-parseFloat(cs.borderRightWidth)-parseFloat(cs.paddingRight);
 [].forEach.call(sec.querySelectorAll('math'),function(m){n++;var b=m.getBoundingClientRect(),st=getComputedStyle(m);
  if(b.left<left-0.5||b.right>right+0.5)over.push(sec.id+' by '+Math.round(Math.max(left-b.left,b.right-right))+' px');
  if(st.overflowX!='visible'||st.overflowY!='visible')over.push(sec.id+' scrolls ('+st.overflowX+')');});
 [].forEach.call(sec.querySelectorAll('.formula'),function(f){if(f.scrollWidth>f.clientWidth+1)over.push(sec.id+' formula wider than its box');});});
var seen={},dup=[];[].forEach.call(document.querySelectorAll('[id]'),function(e){if(seen[e.id])dup.push(e.id);seen[e.id]=1;});
var bad=[];[].forEach.call(document.querySelectorAll('svg'),function(svg,k){[].forEach.call(svg.querySelectorAll('*'),function(e){
 [].forEach.call(e.attributes,function(a){var m=/url\(#([^)]+)\)/.exec(a.value)||(/href$/.test(a.name)&&/^#(.+)/.exec(a.value));
  if(m){var t=document.getElementById(m[1]);if(!t||t.closest('svg')!==svg)bad.push('figure '+(k+1)+' #'+m[1]);}});});});
function say(a){return a.length+(a.length?' ('+a.slice(0,4).join(', ')+')':'');}
document.body.setAttribute('data-probe','maths '+n+'; overflowing: '+say(over)+'; ids twice: '+say(dup)+'; references outside their figure: '+say(bad));})();</script>)";

// Headless Chromium at width x 1000 px, offline: the DOM of url after its scripts ran, in out;
// flags: more of Chromium's (--force-dark-mode, --screenshot=FILE).
static int m_chromium_dom(const std::string& browser, const std::string& url, const std::string& out, const std::string& profile, int width,
                          const std::string& flags = "") {
    const std::string cmd = "timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                            "--disable-background-networking --disable-component-update --disable-sync --host-resolver-rules='MAP * ~NOTFOUND' "
                            "--user-data-dir=" + profile + " --window-size=" + std::to_string(width) + ",1000 " + flags + " --dump-dom '" + url + "' > " + out +
                            " 2> " + out + ".log";
    return std::system(cmd.c_str());
}

// The browser the "browser: ..." cases run: headless Chromium by one of its names; "" (and a failed
// check saying how to install it) when there is none.
static std::string m_browser() {
    for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
        if (std::system((std::string("command -v ") + b + " > /dev/null 2>&1").c_str()) == 0) return b;
    FAIL_CHECK("no browser: this case needs headless Chromium (Debian: apt-get install chromium; .ci/run installs it)");
    return "";
}

// The page as headless Chromium lays it out at `width` px, every box laid out (not only those in
// view), read by a probe script appended to a copy of it: the probe writes what it measured, as
// JSON, into <pre id="probe"> of the DOM Chromium dumps. "" with a failed check when that fails.
// flags: more of Chromium's, as --force-dark-mode.
std::string m_browser_probe(const std::string& page, const std::string& probe_js, int width, const std::string& name, const std::string& flags = "") {
    const std::string browser = m_browser();
    if (browser.empty()) return "";
    const std::string abs = m_abs_dir("probe-" + name);
    std::string html = m_read(page);
    const std::size_t end = html.rfind("</body>");
    REQUIRE(end != std::string::npos);
    html.insert(end, "<pre id=\"probe\"></pre><script>\n(function(){var out={};\n"
                     "[].forEach.call(document.querySelectorAll('section.box'),function(s){s.style.contentVisibility='visible';});\n" +
                         probe_js + "\ndocument.getElementById('probe').textContent=JSON.stringify(out);})();\n</script>\n");
    m_write(abs + "/page.html", html);
    if (m_chromium_dom(browser, "file://" + abs + "/page.html", abs + "/dom.html", abs + "/profile", width, flags) != 0) {
        FAIL_CHECK("Chromium failed on " << abs << "/page.html: " << m_read(abs + "/dom.html.log"));
        return "";
    }
    const std::string dom = m_read(abs + "/dom.html");
    const std::size_t a = dom.find("<pre id=\"probe\">"), b = dom.find("</pre>", a);
    if (a == std::string::npos || b == std::string::npos || b == a + 16) {
        FAIL_CHECK("the probe wrote nothing into the page Chromium laid out: " << abs << "/dom.html, " << abs << "/dom.html.log");
        return "";
    }
    std::string js = dom.substr(a + 16, b - a - 16);
    for (const auto& e : std::vector<std::pair<std::string, std::string>>{{"&lt;", "<"}, {"&gt;", ">"}, {"&nbsp;", "\u00a0"}, {"&amp;", "&"}})
        for (std::size_t at = js.find(e.first); at != std::string::npos; at = js.find(e.first, at + e.second.size())) js.replace(at, e.first.size(), e.second);
    return js;
}

TEST_CASE("browser: explain --html's page at 1400 px: no formula overflows its box or scrolls, each id once, every figure renders alone" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    const std::string browser = m_browser();
    if (browser.empty()) return;
    const std::string abs = m_abs_dir("browser-layout");
    for (const std::string v : {"gpt2", "bert"}) {
        CAPTURE(v);
        const std::string page = abs + "/" + v + ".html";
        m_run_ok("explain --preset tiny-" + v + " --tokens 3,1,4,1,5" + (v == "bert" ? " --masked 2" : "") + " --html " + page);
        std::string html = m_read(page);
        const std::size_t boxes = m_count(html, "<section id=\"b");
        REQUIRE(boxes > 30);
        // The page with the probe: the boxes' maths measured at 1400 px.
        const std::size_t body = html.rfind("</body>");
        REQUIRE(body != std::string::npos);
        m_write(abs + "/probe-" + v + ".html", html.substr(0, body) + m_PAGE_PROBE + html.substr(body));
        REQUIRE(m_chromium_dom(browser, "file://" + abs + "/probe-" + v + ".html", abs + "/probe-dom-" + v + ".html", abs + "/profile-" + v, 1400) == 0);
        const std::string dom = m_read(abs + "/probe-dom-" + v + ".html");
        const std::size_t at = dom.find("data-probe=\"");
        REQUIRE_MESSAGE(at != std::string::npos, "the probe did not run: " << m_read(abs + "/probe-dom-" + v + ".html.log"));
        const std::string probe = dom.substr(at + 12, dom.find('"', at + 12) - at - 12);
        INFO("the probe found: " << probe);
        CHECK(m_contains(probe, "; overflowing: 0; ids twice: 0; references outside their figure: 0"));
        CHECK(std::atoi(probe.c_str() + 6) > (int)boxes);  // a <math> per piece of each formula
        // Each figure alone, in a file of its own: what it refers to, it holds.
        std::size_t figures = 0;
        for (std::size_t a = html.find("<svg"); a != std::string::npos; a = html.find("<svg", a + 1), figures++) {
            const std::string svg = html.substr(a, html.find("</svg>", a) + 6 - a);
            const std::string alone = abs + "/figure-" + v + "-" + std::to_string(figures + 1) + ".html";
            m_write(alone, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"></head><body><main></main>" + svg + m_PAGE_PROBE + "</body></html>\n");
            if (figures > 1) continue;  // Chromium opens the first two, the mask's and the heads' P; the others the probe above checked in place
            REQUIRE(m_chromium_dom(browser, "file://" + alone, alone + ".dom", abs + "/profile-" + v, 1400) == 0);
            const std::string fig = m_read(alone + ".dom");
            CAPTURE(alone);
            CHECK(m_contains(fig, "data-probe=\"maths 0; overflowing: 0; ids twice: 0; references outside their figure: 0\""));
            CHECK(m_count(svg, "url(#") > 0);
        }
        CHECK(figures >= 4);  // two layers' masks and P of their heads
    }
}

// A page whose backward boxes fail: tiny-gpt2 with dW_1 of FFN_backward twice too large and
// LayerNorm_backward's dX missing a term, so that failing gradient rows (red around them) draw
// their heat maps with numbers in the cells. Returns its path.
static std::string m_failing_page(const std::string& name) {
    const Config c = preset("tiny-gpt2");
    ExplainHtml o;
    o.source = "transformer.cpp";
    o.backwards.FFN_backward = m_ffn_backward_dW1_doubled;
    o.backwards.LayerNorm_backward = m_wrong_layernorm_backward;
    const ExplainPage page = explain_html(c, m_model<float>(c, 4, 0.1), m_explain_batch(c), o);
    REQUIRE(page.failing >= 2);
    const std::string path = m_path(name + ".html");
    m_write(path, page.html);
    return path;
}

// The probe of the heat-map cells' contrast (WCAG 2): each cell printing a number, and one cell of
// every colour of the ramps added to the page (.ramp), against its fill (the cell's background
// colour, or each colour of its hatching); out.worst the cell of the lowest ratio.
static const char* const m_CONTRAST_PROBE = R"(
var ramp='<div class="hm num" id="ramp">',cls=['z','x','u'];for(var k=1;k<=8;k++)cls.push('p'+k,'n'+k,'b'+k);
cls.forEach(function(c){ramp+='<i class='+c+' title="ramp '+c+'">\u22120.123</i>';});
document.querySelector('main section').insertAdjacentHTML('beforeend',ramp+'</div>');
function rgb(s){var m=String(s).match(/[\d.]+/g);return m?m.map(Number):null;}
function lum(c){function f(v){v/=255;return v<=0.04045?v/12.92:Math.pow((v+0.055)/1.055,2.4);}return 0.2126*f(c[0])+0.7152*f(c[1])+0.0722*f(c[2]);}
function ratio(a,b){var x=lum(a),y=lum(b);return (Math.max(x,y)+0.05)/(Math.min(x,y)+0.05);}
out.dark=matchMedia('(prefers-color-scheme: dark)').matches;out.cells=0;out.failing=0;out.below=0;out.classes={};out.worst=null;
[].forEach.call(document.querySelectorAll('.hm i'),function(c){if(!c.textContent)return;out.cells++;
 if(c.closest('.grad.fail'))out.failing++;out.classes[c.className]=1;
 var st=getComputedStyle(c),fg=rgb(st.color),fills=[],bg=rgb(st.backgroundColor);
 if(bg&&(bg.length<4||bg[3]>0))fills.push(bg);
 (st.backgroundImage.match(/rgba?\([^)]*\)/g)||[]).forEach(function(s){fills.push(rgb(s));});
 for(var e=c.parentElement;!fills.length&&e;e=e.parentElement){var b=rgb(getComputedStyle(e).backgroundColor);if(b&&(b.length<4||b[3]>0))fills.push(b);}
 fills.forEach(function(f){var r=ratio(fg,f);if(r<4.5)out.below++;
  if(!out.worst||r<out.worst.ratio)out.worst={ratio:r,where:(c.closest('section')||{}).id+' '+c.title,cls:c.className,text:c.textContent,
   color:st.color,fill:'rgb('+f.slice(0,3).join(', ')+')'};});});
)";

// Chromium measures the contrast of every number on a heat-map cell of the failing page, light or dark.
static void m_check_cell_contrast(bool dark) {
    const std::string page = m_failing_page(dark ? "contrast-dark" : "contrast-light");
    const std::string js = m_browser_probe(page, m_CONTRAST_PROBE, 1400, dark ? "contrast-dark" : "contrast-light", dark ? "--force-dark-mode" : "");
    if (js.empty()) return;
    const Json j = parse_json(js);
    CHECK(j.get("dark")->b == dark);
    CHECK(j.get("cells")->num > 500);
    CHECK(j.get("failing")->num > 50);  // cells of failing gradient rows, where the text around is red
    for (const char* c : {"p8", "n8", "b8", "x", "z", "p1", "n1"}) CHECK_MESSAGE(j.get("classes")->get(c), "no cell of class " << c << " measured");
    const Json* w = j.get("worst");
    REQUIRE(w);
    INFO("the cell of the lowest contrast: " << w->get("where")->str << " (class " << w->get("cls")->str << ", \"" << w->get("text")->str << "\"): text "
                                            << w->get("color")->str << " on " << w->get("fill")->str << ", " << w->get("ratio")->num << ":1; "
                                            << j.get("below")->num << " cell fills below 4.5:1");
    CHECK(w->get("ratio")->num >= 4.5);
    MESSAGE(std::string(dark ? "dark" : "light") << " mode: " << j.get("cells")->num << " numbered cells, the lowest contrast " << w->get("ratio")->num << ":1");
}

TEST_CASE("browser: explain --html's numbers on heat-map cells contrast at least 4.5:1 with their cell, light mode, failing rows too" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    m_check_cell_contrast(false);
}

TEST_CASE("browser: explain --html's numbers on heat-map cells contrast at least 4.5:1 with their cell, dark mode (--force-dark-mode)" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    m_check_cell_contrast(true);
}

TEST_CASE("browser: explain --html's legends at 1400 px: each colour scale with its ends, and each note, on the line of its caption's title" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // Every .key of a figure caption (the scale and its two ends, "hatched: ...", "grey: ...")
    // lays out on one line, the line of the caption's title (the tensor's name in <b>): the middles
    // of its parts (text and bar, from a Range's client rects) within 3 px of each other and of the
    // title's, and it ends inside its caption.
    const std::string page = m_failing_page("legends");
    const std::string js = m_browser_probe(page, R"(
var bad=[];out.keys=0;
function mid(x){return (x.top+x.bottom)/2;}
[].forEach.call(document.querySelectorAll('figcaption .key'),function(k){out.keys++;var r=document.createRange();r.selectNodeContents(k);
 var mids=[].filter.call(r.getClientRects(),function(x){return x.width>0&&x.height>0;}).map(mid);
 var cap=k.closest('figcaption'),c=cap.getBoundingClientRect(),b=k.getBoundingClientRect();
 mids.push(mid(cap.querySelector('b').getClientRects()[0]));
 var spread=Math.max.apply(null,mids)-Math.min.apply(null,mids);
 if(!(spread<=3)||b.right>c.right+1)bad.push((k.closest('section')||{}).id+' "'+k.textContent+'": parts and title '+Math.round(spread)+' px apart, '+
  Math.round(b.right-c.right)+' px past its caption');});
out.bad=bad.length;out.first=bad.slice(0,5).join('; ');)", 1400, "legends");
    if (js.empty()) return;
    const Json j = parse_json(js);
    CHECK(j.get("keys")->num > 100);
    INFO("legends not on one line: " << j.get("first")->str);
    CHECK(j.get("bad")->num == 0);
}

// The data of a zlib stream (RFC 1950, 1951: stored, fixed and dynamic Huffman blocks), for
// m_png_rgb; an error past its end.
static std::string m_inflate(const std::string& z) {
    std::size_t pos = 2;  // past the zlib header
    uint32_t buf = 0;
    int have = 0;
    auto bits = [&](int n) {
        while (have < n) {
            if (pos >= z.size()) throw std::runtime_error("inflate: the stream ends early");
            buf |= (uint32_t)(unsigned char)z[pos++] << have, have += 8;
        }
        const int v = (int)(buf & ((1u << n) - 1));
        buf >>= n, have -= n;
        return v;
    };
    struct Code {
        std::vector<int> count = std::vector<int>(16, 0), symbol;
    };
    auto code_of = [](const std::vector<int>& lengths) {  // canonical Huffman: counts per length, symbols in order
        Code h;
        for (int l : lengths) h.count[l]++;
        h.count[0] = 0;
        std::vector<int> offs(16, 0);
        for (int l = 1; l < 15; l++) offs[l + 1] = offs[l] + h.count[l];
        h.symbol.assign(lengths.size(), 0);
        for (std::size_t s = 0; s < lengths.size(); s++)
            if (lengths[s]) h.symbol[offs[lengths[s]]++] = (int)s;
        return h;
    };
    auto decode = [&](const Code& h) {
        int code = 0, first = 0, index = 0;
        for (int l = 1; l < 16; l++) {
            code |= bits(1);
            const int count = h.count[l];
            if (code - count < first) return h.symbol[index + (code - first)];
            index += count, first += count, first <<= 1, code <<= 1;
        }
        throw std::runtime_error("inflate: a bad code");
    };
    static const int lbase[] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static const int lext[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    static const int dbase[] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097,
                                6145, 8193, 12289, 16385, 24577};
    static const int dext[] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
    std::string out;
    for (int last = 0; !last;) {
        last = bits(1);
        const int type = bits(2);
        if (type == 0) {  // stored: the rest of the byte dropped, then LEN, NLEN and the bytes
            buf = 0, have = 0;
            if (pos + 4 > z.size()) throw std::runtime_error("inflate: the stream ends early");
            const std::size_t len = (unsigned char)z[pos] | (std::size_t)(unsigned char)z[pos + 1] << 8;
            pos += 4;
            if (pos + len > z.size()) throw std::runtime_error("inflate: the stream ends early");
            out.append(z, pos, len), pos += len;
            continue;
        }
        if (type == 3) throw std::runtime_error("inflate: a bad block type");
        std::vector<int> lit(288, 0), dist(30, 5);
        if (type == 1) {
            for (int s = 0; s < 288; s++) lit[s] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
        } else {
            const int nlit = bits(5) + 257, ndist = bits(5) + 1, nclen = bits(4) + 4;
            static const int order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
            std::vector<int> cl(19, 0), lengths;
            for (int k = 0; k < nclen; k++) cl[order[k]] = bits(3);
            const Code clc = code_of(cl);
            while ((int)lengths.size() < nlit + ndist) {
                const int s = decode(clc);
                if (s < 16) lengths.push_back(s);
                else {
                    const int n = s == 16 ? 3 + bits(2) : s == 17 ? 3 + bits(3) : 11 + bits(7);
                    const int v = s == 16 ? (lengths.empty() ? throw std::runtime_error("inflate: a repeat first") : lengths.back()) : 0;
                    lengths.insert(lengths.end(), (std::size_t)n, v);
                }
            }
            lit.assign(lengths.begin(), lengths.begin() + nlit), dist.assign(lengths.begin() + nlit, lengths.begin() + nlit + ndist);
        }
        const Code lc = code_of(lit), dc = code_of(dist);
        for (;;) {
            const int s = decode(lc);
            if (s < 256) out += (char)s;
            else if (s == 256) break;
            else {
                if (s - 257 >= 29) throw std::runtime_error("inflate: a bad length");
                const int len = lbase[s - 257] + bits(lext[s - 257]), d = decode(dc);
                if (d >= 30) throw std::runtime_error("inflate: a bad distance");
                const std::size_t back = (std::size_t)(dbase[d] + bits(dext[d]));
                if (back > out.size()) throw std::runtime_error("inflate: a distance before the start");
                for (int k = 0; k < len; k++) out += out[out.size() - back];
            }
        }
    }
    return out;
}

// A PNG of 8-bit RGB or RGBA, not interlaced (what Chromium's --screenshot writes): its width,
// height and pixels as 0xRRGGBB, row by row. An error for any other PNG.
struct MImage {
    int w = 0, h = 0;
    std::vector<uint32_t> px;
};
static MImage m_png_rgb(const std::string& png) {
    if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) throw std::runtime_error("not a PNG");
    auto u32 = [&](std::size_t at) { return (uint32_t)(unsigned char)png[at] << 24 | (uint32_t)(unsigned char)png[at + 1] << 16 |
                                            (uint32_t)(unsigned char)png[at + 2] << 8 | (uint32_t)(unsigned char)png[at + 3]; };
    MImage im;
    int bpp = 0;
    std::string idat;
    for (std::size_t at = 8; at + 12 <= png.size();) {
        const std::size_t n = u32(at);
        const std::string type = png.substr(at + 4, 4);
        if (type == "IHDR") {
            im.w = (int)u32(at + 8), im.h = (int)u32(at + 12);
            const int depth = (unsigned char)png[at + 16], colour = (unsigned char)png[at + 17], interlace = (unsigned char)png[at + 20];
            if (depth != 8 || (colour != 2 && colour != 6) || interlace) throw std::runtime_error("a PNG other than 8-bit RGB(A)");
            bpp = colour == 6 ? 4 : 3;
        } else if (type == "IDAT") idat += png.substr(at + 8, n);
        at += 12 + n;
    }
    const std::string raw = m_inflate(idat);
    const std::size_t stride = (std::size_t)im.w * bpp;
    if (!bpp || raw.size() < (stride + 1) * (std::size_t)im.h) throw std::runtime_error("a PNG's pixels are short");
    std::vector<unsigned char> prev(stride, 0), line(stride);
    for (int y = 0; y < im.h; y++) {  // undo each row's filter: none, sub, up, average, Paeth
        const unsigned char f = (unsigned char)raw[y * (stride + 1)];
        for (std::size_t x = 0; x < stride; x++) {
            const int a = x >= (std::size_t)bpp ? line[x - bpp] : 0, b = prev[x], c = x >= (std::size_t)bpp ? prev[x - bpp] : 0;
            const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
            const int pred = f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : f == 4 ? (pa <= pb && pa <= pc ? a : pb <= pc ? b : c) : 0;
            line[x] = (unsigned char)((unsigned char)raw[y * (stride + 1) + 1 + x] + pred);
        }
        for (int x = 0; x < im.w; x++) im.px.push_back((uint32_t)line[x * bpp] << 16 | (uint32_t)line[x * bpp + 1] << 8 | line[x * bpp + 2]);
        prev = line;
    }
    return im;
}

TEST_CASE("browser: explain --html's page#bN in headless Chromium: box N at the top and focused, and the screenshot shows it" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // page.html#b40 (of 50 boxes): the page scrolls <body> to the box, as the browser's own
    // fragment scroll does, and keeps it there while the boxes around it are laid out. Chromium's
    // --screenshot draws the window's first screen of the document (blank when the document itself
    // is scrolled); the page scrolls inside <body>, so the picture shows box 40: its focus outline
    // (#4c8bf5) from the picture's top, and text and heat maps right of the contents.
    const std::string browser = m_browser();
    if (browser.empty()) return;
    const std::string abs = m_abs_dir("browser-fragment");
    m_run_ok("explain --preset tiny-gpt2 --tokens 3,1,4,1,5 --html " + abs + "/page.html");
    std::string html = m_read(abs + "/page.html");
    REQUIRE(m_count(html, "<section id=\"b") >= 40);  // b40 is far down (of 50; fewer in a handout past its stub): its box must be scrolled to
    const std::size_t body = html.rfind("</body>");
    REQUIRE(body != std::string::npos);
    html.insert(body, "<pre id=\"probe\"></pre><script>window.addEventListener('load',function(){var t=document.getElementById('b40').getBoundingClientRect();"
                      "document.getElementById('probe').textContent=JSON.stringify({top:t.top,height:t.height,scrolled:document.body.scrollTop,"
                      "window:window.scrollY,focus:document.activeElement.id});});</script>\n");
    m_write(abs + "/probe.html", html);
    const std::string shot = abs + "/b40.png";
    std::remove(shot.c_str());
    REQUIRE(m_chromium_dom(browser, "file://" + abs + "/probe.html#b40", abs + "/dom.html", abs + "/profile", 1400, "--screenshot=" + shot) == 0);
    const std::string dom = m_read(abs + "/dom.html");
    const std::size_t a = dom.find("<pre id=\"probe\">"), b = dom.find("</pre>", a);
    REQUIRE_MESSAGE((a != std::string::npos && b > a + 16), "the probe wrote nothing: " << abs << "/dom.html");
    const Json j = parse_json(dom.substr(a + 16, b - a - 16));
    INFO("box 40 after load: " << dom.substr(a + 16, b - a - 16));
    CHECK(std::fabs(j.get("top")->num) <= 2);
    CHECK(j.get("height")->num > 100);
    CHECK(j.get("scrolled")->num > 5000);
    CHECK(j.get("window")->num == 0);  // the document itself stays at its top
    CHECK(j.get("focus")->str == "b40");
    // The picture: decoded, 1400 x 1000; right of the contents (x >= 400) not blank, and box 40's
    // outline there from its first rows.
    REQUIRE(m_exists(shot));
    const MImage im = m_png_rgb(m_read(shot));
    REQUIRE(im.w == 1400);
    REQUIRE(im.h == 1000);
    std::size_t ink = 0, outline = 0, area = 0;
    int outline_top = im.h;
    for (int y = 0; y < im.h; y++)
        for (int x = 400; x < im.w; x++, area++) {
            const uint32_t p = im.px[(std::size_t)y * im.w + x];
            const int r = p >> 16, g = p >> 8 & 255, bl = p & 255;
            ink += p != 0xffffff;
            if (std::abs(r - 0x4c) < 16 && std::abs(g - 0x8b) < 16 && std::abs(bl - 0xf5) < 16) outline++, outline_top = std::min(outline_top, y);
        }
    INFO("the screenshot " << shot << ": " << ink << " of " << area << " pixels right of the contents not white, " << outline
                           << " of box 40's outline, the first in row " << outline_top);
    CHECK(ink > area / 10);
    CHECK(outline > 1000);
    CHECK(outline_top <= 10);
}

TEST_CASE("browser: the gpt2-124m page of 10 tokens is under 10 MB, keeps its tokens, masks and P whole, and lays out in Chromium" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // A real model's page: every tensor of V x H or H x F folded to the page's budget, the tokens,
    // the 10 x 10 masks and each head's P never; the passing gradients one line each. Chromium's
    // time to lay it out is printed (a measurement, not a check: docs/teaching.md gives it).
    const std::string page = m_path("gpt2-124m.html");
    const m_Run r = m_run_ok("explain --preset gpt2-124m --tokens 1,2,3,4,5,6,7,8,9,10 --html " + page);
    REQUIRE_MESSAGE(!m_contains(r.out + r.err, "not implemented"), "the run stopped at a function not written yet:\n" << r.out << r.err);
    const std::string html = m_read(page);
    CHECK_MESSAGE(html.size() < 10000000, "the page is " << html.size() << " bytes, over 10 MB");
    const Json j = m_page_json(html);
    CHECK(j.get("fold")->num < 64);  // the budget folded the large tensors
    int masks = 0, probabilities = 0;
    for (const Json& box : j.get("boxes")->arr)
        for (const Json& t : box.get("tensors")->arr) {
            const std::string name = t.get("name")->str;
            const bool whole = name == "x" || name.rfind("Mask^(", 0) == 0 || name.rfind("P = ", 0) == 0;
            if (!whole) continue;
            CAPTURE(name);
            masks += name.rfind("Mask^(", 0) == 0;
            probabilities += name.rfind("P = ", 0) == 0;
            CHECK(t.get("values")->arr.size() == (name == "x" ? 10u : 100u));
        }
    CHECK(masks == 12);
    CHECK(probabilities == 12 * 12);
    CHECK(m_contains(html, "on a page this large the passing ones take one line each"));
    const auto t0 = std::chrono::steady_clock::now();
    const std::string js = m_browser_probe(page, "out.boxes=document.querySelectorAll('section.box').length;", 1400, "gpt2-124m");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (js.empty()) return;
    CHECK(parse_json(js).get("boxes")->num == j.get("boxes")->arr.size());
    MESSAGE("gpt2-124m's page: " << html.size() << " bytes; Chromium laid out every box in " << seconds << " s");
}

TEST_CASE("explain: every box's formula is one docs/formulas.md lists (section 1), and every one listed is printed") {
    // The sheet lists, in plain text, the formula of every box explain prints; a box printed with
    // another formula (an index swapped, a term missing) or a listed one no variant prints fails.
    const std::string sheet = m_read("docs/formulas.md");
    const std::string start = "<!-- explain's boxes -->", end = "<!-- end of explain's boxes -->";
    const std::size_t a = sheet.find(start), b = sheet.find(end);
    REQUIRE_MESSAGE(a != std::string::npos, "docs/formulas.md should hold the list of explain's boxes after " << start);
    REQUIRE(b != std::string::npos);
    std::set<std::string> listed, printed;
    {
        std::istringstream in(sheet.substr(a + start.size(), b - a - start.size()));
        for (std::string line; std::getline(in, line);)
            if (line.rfind("- ", 0) == 0) listed.insert(line);
    }
    // Every variant, and BERT and RoBERTa with the released BERT's embedding LayerNorm and head (formulas §23).
    std::vector<std::pair<std::string, int>> models;  // (preset, 0 = as is, 1 = emb_ln, 2 = emb_ln and mlm_head)
    for (const std::string name : m_TINY) models.push_back({name, 0});
    for (const char* name : {"tiny-bert", "tiny-roberta"}) models.push_back({name, 1}), models.push_back({name, 2});
    for (const auto& model : models)
        for (Activation act : {Activation::relu, Activation::gelu_sigmoid, Activation::gelu_tanh, Activation::gelu_erf}) {
            const std::string& name = model.first;
            Config c = preset(name);
            c.activation = act;
            c.emb_ln = model.second >= 1, c.mlm_head = model.second == 2;
            const Params<float> p = m_model<float>(c, 4, 0.1);
            for (const ExplainStep& s : explain(c, p, m_explain_batch(c), 3).steps) {
                const std::string line = m_generic_step(s, c.L);
                printed.insert(line);
                INFO(name << (c.mlm_head ? " with emb_ln and mlm_head" : c.emb_ln ? " with emb_ln" : "") << ", " << activation_name(act)
                          << ": explain prints the box \"" << s.box << ": " << s.formula
                          << "\"; docs/formulas.md (section 1, the list of explain's boxes) should hold the line\n" << line);
                CHECK(listed.count(line) == 1);
            }
        }
    for (const std::string& line : listed) {
        INFO("docs/formulas.md lists a box that no variant of explain prints:\n" << line);
        CHECK(printed.count(line) == 1);
    }
}

TEST_CASE("CLI: explain prints every box and model_loss's loss for a preset or a checkpoint; bad input is an error") {
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        const Config c = preset(name);
        const std::string args = is_causal(c.variant) ? "--tokens 3,1,4,1,5"
                                 : c.variant == Variant::bert ? "--tokens 10,1,2,11,3,11 --segments 0,0,0,0,1,1 --masked 2,5"
                                                              : "--tokens 10,1,2,3,11 --masked 3";
        const m_Run r = m_run_ok("explain --preset " + name + " " + args);
        Params<float> p = make_params<float>(c);
        init_params(c, p, 1);
        const Batch b = m_explain_batch(c);
        const std::size_t at = r.out.rfind("\nloss ");
        REQUIRE(at != std::string::npos);
        CHECK(std::stod(r.out.substr(at + 6)) == doctest::Approx(model_loss(c, p, b)).epsilon(1e-7));
        CHECK(r.out == explain_text(c, explain(c, p, b).steps) + r.out.substr(at));
        CHECK(std::count(r.out.begin(), r.out.end(), '\n') < 220);  // a few screens
    }
    const std::string dir = m_path("explain");
    m_make_dir(dir);
    const std::string ck = dir + "/gpt.safetensors";
    m_run_ok("init --preset tiny-gpt --seed 5 --out " + ck);
    const m_Run r = m_run_ok("explain --checkpoint " + ck + " --tokens 3,1,4 --values 2");
    CHECK(m_contains(r.out, "explain: gpt ("));
    CHECK(m_contains(r.out, "X'^(1) = LayerNorm(MultiHeadSA(X^(0), Mask^AR) + X^(0))"));
    const std::string seeded = m_run_ok("explain --preset tiny-gpt --seed 5 --tokens 3,1,4 --values 2").out;
    CHECK(seeded == r.out);
    m_cli_fails("explain --tokens 3,1,4", "exactly one of --preset and --checkpoint");
    m_cli_fails("explain --preset tiny-gpt --checkpoint " + ck + " --tokens 3,1,4", "exactly one of --preset and --checkpoint");
    m_cli_fails("explain --preset tiny-gpt", "give exactly one of --tokens and --text");
    m_cli_fails("explain --preset gpt9 --tokens 3,1", "unknown preset 'gpt9'");
    m_cli_fails("explain --preset tiny-gpt --tokens 3,13", "token id 13");
    m_cli_fails("explain --preset tiny-gpt --tokens 3,x", "'x' is not an integer");
    m_cli_fails("explain --preset tiny-gpt --tokens 3", "at least 2 tokens");
    m_cli_fails("explain --preset tiny-gpt --tokens 1,2,3,4,5,6,7,8,9,1,2,3,4,5,6,7,8", "n_ctx = 16");
    m_cli_fails("explain --preset tiny-gpt --tokens 3,1 --masked 1", "--masked applies to bert and roberta");
    m_cli_fails("explain --preset tiny-bert --tokens 10,1,11", "missing flag --masked");
    m_cli_fails("explain --preset tiny-bert --tokens 10,1,11 --masked 4", "outside 1..3");
    m_cli_fails("explain --preset tiny-bert --tokens 10,1,11 --masked 0", "outside 1..3");
    m_cli_fails("explain --checkpoint " + ck + " --seed 2 --tokens 3,1", "--seed applies to --preset only");
    m_cli_fails("explain --preset tiny-gpt --tokens 3,1 --values 65", "--values");
    m_cli_fails("explain --checkpoint " + dir + "/none.safetensors --tokens 3,1", "none.safetensors");
    m_cli_fails("explain --preset tiny-gpt --tokens 3,1 --out x.svg", "unknown flag --out");
}

// ---- the debugger: gdb_tensor.py ------------------------------------------------------------------
// and lldb_tensor.py, lldb's counterpart: the two cases run the same small program.
// The values a debugger's batch run printed, in order: each from after the " = " of a line where
// value_at finds one (its position; npos on other lines) up to the next line that does not start
// with a space (a value's rows start with one).
std::vector<std::string> m_debugger_values(const std::string& out, const std::function<std::size_t(const std::string&)>& value_at) {
    std::vector<std::string> values;
    std::istringstream in(out);
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
        const std::size_t eq = value_at(line);
        if (eq != std::string::npos) {
            values.push_back(line.substr(eq + 3));
            inside = true;
        } else if (inside && !line.empty() && line[0] == ' ') {
            values.back() += "\n" + line;
        } else {
            inside = false;
        }
    }
    return values;
}

// The values a gdb -batch run printed, in order: each from after "$N = " up to the next line
// that does not start with a space (a value's rows start with one; "$", "#", a source line do not).
std::vector<std::string> m_gdb_values(const std::string& out) {
    return m_debugger_values(out, [](const std::string& line) {
        const std::size_t eq = line.find(" = ");
        return line.size() > 1 && line[0] == '$' && std::isdigit((unsigned char)line[1]) ? eq : std::string::npos;
    });
}

// The rows of a printed tensor ("  [a, b, ..., ...], " after the header line), as numbers; a row
// that ends in ", ..." gets NaN as its last entry.
std::vector<std::vector<double>> m_gdb_rows(const std::string& printed) {
    std::vector<std::vector<double>> rows;
    std::istringstream in(printed);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
        const std::size_t open = line.find('['), close = line.find(']');
        if (open == std::string::npos || close == std::string::npos) continue;
        std::vector<double> row;
        std::istringstream cells(line.substr(open + 1, close - open - 1));
        for (std::string cell; std::getline(cells, cell, ',');)
            row.push_back(m_contains(cell, "...") ? std::nan("") : std::strtod(cell.c_str(), nullptr));
        rows.push_back(row);
    }
    return rows;
}

// `printed` is "Tensor<float> RxC = {" and the first rows of `want` (columns 1..8, rows 1..6) with
// 4 significant digits, as gdb_tensor.py and lldb_tensor.py print them (`who`: the debugger).
void m_check_gdb_tensor(const std::string& printed, const Tensor<float>& want, const std::string& who = "gdb") {
    const std::string header = "Tensor<float> " + shape_str(want) + " = {";
    INFO(who << " printed:\n" << printed);
    REQUIRE_MESSAGE(printed.rfind(header + "\n", 0) == 0, "expected the header line '" << header << "'");
    const std::vector<std::vector<double>> rows = m_gdb_rows(printed);
    REQUIRE(rows.size() == (std::size_t)std::min(want.rows(), 6));
    std::ostringstream wrong;  // "row i, column j: expected w, gdb printed g" for each value off
    for (int i = 0; i < (int)rows.size(); i++) {
        REQUIRE(rows[i].size() == (std::size_t)std::min(want.cols(), 8));
        for (int j = 0; j < (int)rows[i].size(); j++) {
            const double w = want.row(i)[j];
            if (!(std::fabs(rows[i][j] - w) <= 6e-4 * std::fabs(w)))  // 4 digits: within 5e-4 of w
                wrong << "\nrow " << i << ", column " << j << ": expected " << w << ", " << who << " printed " << rows[i][j];
        }
    }
    CHECK_MESSAGE(wrong.str().empty(), "values other than X's (to 4 significant digits):" << wrong.str());
}

// X^(0) = OneHot(x) W_e + W_p (rows 1..3) of explain's model (explain --preset tiny-gpt2 --tokens
// 3,1,4, --seed 1): what `p X` shows at the README's breakpoint tf::LayerNorm<float>.
Tensor<float> m_debugger_X0() {
    const Config c = preset("tiny-gpt2");
    Params<float> p = make_params<float>(c);
    init_params(c, p, 1);
    Tensor<float> X0 = Embedding<float>({3, 1, 4}, p.W_e);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < c.H; j++) X0(i, j) += p.W_p(i, j);
    REQUIRE(X0.shape == std::vector<int>{3, 8});
    return X0;
}

// The small program the debugger cases run: built from transformer.hpp in `dir` (dir/tensors.cpp to
// dir/tensors) with `cxx` (a compiler and its flags) at -O0 -g, with the pool as plain new and delete
// instead of transformer.cpp. It stops in look(X), which takes X (= X0) by reference as LayerNorm
// does; main holds odd tensors (10x12 double, a vector, empty ones, garbage). Returns "" or the
// compiler's messages.
std::string m_debugger_program(const std::string& dir, const std::string& cxx, const Tensor<float>& X0) {
    const std::string cwd = m_cwd();
    m_make_dir(dir);
    std::string values;
    for (float v : X0.data) {
        char s[32];
        std::snprintf(s, sizeof s, "%.8ef, ", v);  // 9 significant digits: the float itself
        values += s;
    }
    m_write(dir + "/tensors.cpp", R"(#include "transformer.hpp"
#include <cstdint>
#include <cstring>
// The pool's two functions as plain new and delete: transformer.cpp is not linked.
void* tf::pool_allocate(std::size_t bytes) { return ::operator new(bytes); }
void tf::pool_deallocate(void* p, std::size_t) noexcept { ::operator delete(p); }
template <typename T>
tf::Tensor<T> make(std::vector<int> shape, std::vector<T> values) {
    tf::Tensor<T> t;
    t.shape = shape;
    t.data.assign(values.begin(), values.end());
    return t;
}
// The breakpoint: X by reference, as LayerNorm takes it. The body is on lines of its own: on a
// function of one line, lldb's `break look` stops before X is stored and reads it from elsewhere.
void look(const tf::Tensor<float>& X) {
    (void)X;
}
int main() {
    const tf::Tensor<float> X = make<float>({3, 8}, {)" + values + R"(});
    std::vector<double> b;  // 10x12, entry (i, j) = i + j / 100
    for (int k = 0; k < 120; k++) b.push_back(k / 12 + k % 12 / 100.0);
    const tf::Tensor<double> big = make<double>({10, 12}, b);
    const tf::Tensor<float> v = make<float>({4}, {0.5f, -2, 1e-6f, 12345678});
    const tf::Tensor<float> none = make<float>({0, 8}, {}), fresh;
    // Garbage, as a tensor not constructed yet holds (the pointers of shape, then of data: first,
    // end, end of storage): pointers to nowhere; a shape 2000000000x2000000000 with 3 values; a
    // billion dimensions; a shape -1x-3 with 3 values; a vector whose end comes before its start;
    // a shape 1x3 with 3 values at an address that cannot be read.
    static const int huge[2] = {2000000000, 2000000000}, negative[2] = {-1, -3}, three[2] = {1, 3};
    static const float few[3] = {1, 2, 3};
    const std::uintptr_t h = (std::uintptr_t)huge, n = (std::uintptr_t)negative, t = (std::uintptr_t)three,
                         f = (std::uintptr_t)few;
    const std::uintptr_t bad[6][6] = {{16, 24, 24, 64, 76, 76},
                                      {h, h + 8, h + 8, f, f + 12, f + 12},
                                      {h, h + 4000000000u, h + 4000000000u, f, f + 12, f + 12},
                                      {n, n + 8, n + 8, f, f + 12, f + 12},
                                      {h + 8, h, h + 8, f, f + 12, f + 12},
                                      {t, t + 8, t + 8, 64, 76, 76}};
    static_assert(sizeof(tf::Tensor<float>) == sizeof bad[0], "a tensor is two vectors of three pointers");
    alignas(tf::Tensor<float>) unsigned char junk[6][sizeof(tf::Tensor<float>)];
    std::memcpy(junk, bad, sizeof junk);
    // garbage[k] is junk[k] as a tensor (lldb's expressions cannot name tf::Tensor<float> in a cast).
    const tf::Tensor<float>* garbage = reinterpret_cast<const tf::Tensor<float>*>(junk);
    (void)garbage;
    look(X);
    return (int)(big.size() + v.size() + none.size() + fresh.size()) + junk[0][0];
}
)");
    const std::string build = cxx + " -std=c++17 -O0 -g -I'" + std::string(cwd) + "' -o " + dir + "/tensors " + dir +
                              "/tensors.cpp > " + dir + "/build.log 2>&1";
    return std::system(build.c_str()) == 0 ? "" : "`" + cxx + "` failed: " + m_read(dir + "/build.log");
}

// What the debuggers print for the program's 10x12 tensor `big`, its rows separated by `between`
// (gdb: ", \n  "; lldb: ",\n  "): the first 6 rows and 8 columns, ", ..." after each row and a last
// line "...".
std::string m_debugger_big(const std::string& between) {
    std::string want = "Tensor<double> 10x12 = {\n  ";
    for (int i = 0; i < 6; i++) {
        want += "[" + std::to_string(i);
        for (int j = 1; j < 8; j++) want += ", " + std::to_string(i) + ".0" + std::to_string(j);
        want += ", ...]" + between;
    }
    return want + "...}";
}

// Runs the debugger command cmd (input /dev/null, output in base.out, errors in base.err) and
// checks that it succeeds; its exit status and outputs.
m_Run m_debugger_run(const std::string& cmd, const std::string& base, const std::string& who) {
    const m_Run r = m_run_to(cmd + " < /dev/null", base);
    INFO(who << "'s output:\n" << r.out << "\n" << who << "'s errors:\n" << r.err);
    CHECK(r.status == 0);
    return r;
}
// Checks the values 2 to 11 of the small program that gdb and lldb print alike: big (its rows
// joined by sep), v, none, fresh, the garbage (5 times) and the unreadable tensor.
void m_check_debugger_values_2_to_11(const std::vector<std::string>& v, const std::string& sep, const std::string& who) {
    CHECK(v[2] == m_debugger_big(sep));
    CHECK(v[3] == "Tensor<float> 4 = {\n  [0.5, -2, 1e-06, 1.235e+07]}");
    CHECK(v[4] == "Tensor<float> 0x8");
    CHECK(v[5] == "Tensor<float> (empty, no shape)");
    for (int k = 6; k < 11; k++) CHECK_MESSAGE(v[k] == "Tensor<float> (invalid shape)", "garbage " << k - 6 << ": " << who << " printed " << v[k]);
    CHECK(v[11] == "Tensor<float> 1x3 (values unreadable)");
}
// Runs the README's recipe of debugger who (the shell command recipe, its output in dir/recipe.out
// and recipe.err) and checks it: it succeeds, prints stop (the stop line), and prints two values,
// X, the tensor X0 as m_check_gdb_tensor wants it, and X.shape, holding every one of shape_parts.
void m_check_debugger_recipe(const std::string& recipe, const std::string& dir, const std::string& who, const std::string& stop,
                             std::vector<std::string> (*values_of)(const std::string&), const Tensor<float>& X0,
                             const std::vector<std::string>& shape_parts) {
    CHECK(std::system(recipe.c_str()) == 0);
    const std::string rout = m_read(dir + "/recipe.out");
    INFO(who << "'s output on ./transformer-debug:\n" << rout << "\n" << who << "'s errors:\n" << m_read(dir + "/recipe.err"));
    CHECK(m_contains(rout, stop));
    const std::vector<std::string> rv = values_of(rout);
    REQUIRE(rv.size() == 2);
    m_check_gdb_tensor(rv[0], X0, who);
    for (const std::string& part : shape_parts)
        CHECK_MESSAGE(m_contains(rv[1], part), "p X.shape: expected " << part << ", " << who << " printed " << rv[1]);
}

TEST_CASE("debugger: gdb with gdb_tensor.py prints p X as Tensor<float> 3x8 and its first rows, garbage as an invalid shape" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // docs/teaching.md, "Stepping through in a debugger". gdb needs debug information, which ./tests
    // lacks (tests.cpp at -O0 without -g, transformer.cpp at -O2): the tensors are in a small program
    // built here with -O0 -g (m_debugger_program), and gdb prints them where it stops in a function
    // that takes X by reference, as LayerNorm does. X holds what `p X` shows at the README's
    // breakpoint (tf::LayerNorm<float> in `explain --preset tiny-gpt2 --tokens 3,1,4`): the first
    // LayerNorm's input X^(0) of explain's model, computed here (m_debugger_X0). In tests-debug (make
    // debug) gdb also runs that recipe on ./transformer-debug. The VS Code launch file loads the
    // printer for both recipes.
#ifdef __APPLE__
    MESSAGE("skipped on macOS: gdb does not run there; the case \"debugger: lldb ...\" checks the printer in lldb (docs/teaching.md)");
    return;
#endif
    const bool at_root = m_exists("gdb_tensor.py") && m_exists("transformer.hpp");
    REQUIRE_MESSAGE(at_root, "run the tests from the project's root (make test does)");
    REQUIRE_MESSAGE(std::system("gdb --version > /dev/null 2>&1") == 0,
                    "gdb is not installed: install it (Debian and Ubuntu: apt-get install gdb) to check gdb_tensor.py");
    const std::string cwd = m_cwd();
    const std::string root = cwd, gdb = "gdb -batch -nx -x '" + root + "/gdb_tensor.py' ";
    const Tensor<float> X0 = m_debugger_X0();
    const std::string dir = m_path("gdb");
    const std::string built = m_debugger_program(dir, m_cxx(), X0);
    REQUIRE_MESSAGE(built.empty(), "the small program did not build: " << built);

    std::string gdb_command = gdb + "-ex 'break look' -ex run -ex 'p X' -ex 'p X.shape' -ex up -ex 'p big' -ex 'p v' -ex 'p none' -ex 'p fresh'";
    for (int k = 0; k < 6; k++) gdb_command += " -ex 'p *(tf::Tensor<float>*)junk[" + std::to_string(k) + "]'";
    gdb_command += " -ex 'p/r v' " + dir + "/tensors";
    const m_Run run = m_debugger_run(gdb_command, dir + "/gdb", "gdb");
    const std::string &out = run.out, &err = run.err;
    INFO("gdb's output:\n" << out << "\ngdb's errors:\n" << err);
    CHECK_FALSE(m_contains(out + err, "Python"));  // no Python exception, no missing Python
    CHECK_MESSAGE(m_contains(out, "look (X=Tensor<float> 3x8 = {...})"), "expected the breakpoint's line to give X's shape");
    const std::vector<std::string> v = m_gdb_values(out);
    REQUIRE(v.size() == 13);
    m_check_gdb_tensor(v[0], X0);
    CHECK_MESSAGE(m_contains(v[1], "{3, 8}"), "p X.shape: expected {3, 8}, gdb printed " << v[1]);
    m_check_debugger_values_2_to_11(v, ", \n  ", "gdb");
    CHECK_MESSAGE(m_contains(v[12], "data = "), "p/r v: expected the raw struct, gdb printed " << v[12]);

#ifdef TF_TESTS_DEBUG
    {  // The README's recipe itself.
        const std::string recipe = gdb + "-ex 'break tf::LayerNorm<float>' -ex run -ex 'p X' -ex 'p X.shape' --args ./transformer-debug explain " +
                                   "--preset tiny-gpt2 --tokens 3,1,4 < /dev/null > " + dir + "/recipe.out 2> " + dir + "/recipe.err";
        m_check_debugger_recipe(recipe, dir, "gdb", "(X=Tensor<float> 3x8 = {...}, gamma=Tensor<float> 8 = {...}, beta=Tensor<float> 8 = {...}",
                                m_gdb_values, X0, {"{3, 8}"});
    }
#endif

    // VS Code's launch file: the two recipes in gdb, from the project's root, with the printer loaded.
    const std::string launch = m_read(".vscode/launch.json");
    for (const char* part : {"\"program\": \"${workspaceFolder}/transformer-debug\"",
                             "\"args\": [\"explain\", \"--preset\", \"tiny-gpt2\", \"--tokens\", \"3,1,4\"]",
                             "\"program\": \"${workspaceFolder}/tests-debug\"", "\"args\": [\"-tc=Attention*\"]",
                             "\"cwd\": \"${workspaceFolder}\"", "\"MIMode\": \"gdb\"", "\"text\": \"source ${workspaceFolder}/gdb_tensor.py\""})
        CHECK_MESSAGE(m_contains(launch, part), ".vscode/launch.json lacks " << part);
}

// The values an lldb --batch run printed, in order: each from after "($TYPE) $N = " up to the next
// line that does not start with a space (a value's rows start with one; "(lldb)", "}" do not).
std::vector<std::string> m_lldb_values(const std::string& out) {
    return m_debugger_values(out, [](const std::string& line) {
        const std::size_t dollar = line.find(") $"), eq = line.find(" = ", dollar == std::string::npos ? 0 : dollar);
        const bool value = !line.empty() && line[0] == '(' && dollar != std::string::npos && std::isdigit((unsigned char)line[dollar + 3]);
        return value ? eq : std::string::npos;
    });
}

// The lldb configurations of .vscode/launch.json (the text of each "{ ... }" whose "type" is "lldb"
// or whose "MIMode" is "lldb") and, in `commands`, the lldb commands each runs before the program
// (CodeLLDB's "initCommands", the C/C++ extension's "setupCommands" texts), in order.
std::vector<std::string> m_launch_lldb_configs(const std::string& launch, std::vector<std::vector<std::string>>& commands) {
    std::vector<std::string> configs;
    for (std::size_t at = launch.find("{\n            \"name\": "); at != std::string::npos;
         at = launch.find("{\n            \"name\": ", at + 1)) {
        const std::string config = launch.substr(at, launch.find("\n        }", at) - at);
        const bool codelldb = m_contains(config, "\"type\": \"lldb\""), mi = m_contains(config, "\"MIMode\": \"lldb\"");
        if (!codelldb && !mi) continue;
        configs.push_back(config);
        std::vector<std::string> cs;
        std::string list = config.substr(config.find(codelldb ? "\"initCommands\": [" : "\"setupCommands\": ["));
        list = list.substr(0, list.find(']'));
        const std::string key = codelldb ? "\"" : "\"text\": \"";
        for (std::size_t k = list.find('[') + 1; (k = list.find(key, k)) != std::string::npos;) {
            const std::size_t from = k + key.size(), to = list.find('"', from);
            cs.push_back(list.substr(from, to - from));
            k = to + 1;
            if (!codelldb) continue;
            k = list.find(',', k);  // the next string of the list
            if (k == std::string::npos) break;
        }
        commands.push_back(cs);
    }
    return configs;
}

TEST_CASE("debugger: lldb with lldb_tensor.py prints p X as Tensor<float> 3x8 and its first rows, garbage as an invalid shape" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // docs/teaching.md, "Stepping through in a debugger": lldb_tensor.py, gdb_tensor.py's counterpart
    // (macOS on Apple Silicon has no gdb), on the gdb case's small program, built twice: with $CXX
    // or g++ (libstdc++'s vectors) and with clang++ -stdlib=libc++ (libc++'s, as on macOS). lldb
    // prints what gdb does (m_check_gdb_tensor), the header alone for a reference, and in the tree
    // view of VS Code's lldb configurations, run here with the commands launch.json gives them, the
    // shape and the rows as children. Where lldb is missing or its Python does not start, the case
    // says so and stops, except in CI (CI set), which installs lldb and mends its Python (.ci/run).
    const bool at_root = m_exists("lldb_tensor.py") && m_exists("transformer.hpp");
    REQUIRE_MESSAGE(at_root, "run the tests from the project's root (make test does)");
    const bool ci = std::getenv("CI") != nullptr && *std::getenv("CI") != '\0';
    const std::string dir = m_path("lldb");
    m_make_dir(dir);
    const int started = std::system(("lldb --batch --no-lldbinit -o 'script print(6 * 7)' > " + dir + "/python.out 2>&1 < /dev/null").c_str());
    const std::string python = m_read(dir + "/python.out");
    std::string unusable;
    if (started != 0 && !m_contains(python, "lldb"))
        unusable = "lldb is not installed (Debian and Ubuntu: apt-get install lldb; macOS: xcode-select --install)";
    else if (!m_contains(python, "\n42") || m_contains(python, "Traceback"))
        unusable = "lldb's Python does not start (Debian and Ubuntu's lldb 14: docs/teaching.md, \"Stepping through in a "
                   "debugger\", says how to mend it); lldb printed:\n" + python;
    if (!unusable.empty()) {
        if (ci) FAIL(unusable << "\nCI installs lldb and mends its Python (.ci/run)");
        MESSAGE("the lldb case is not run: " << unusable);
        return;
    }
    const std::string cwd = m_cwd();
    const std::string root = cwd;
    const Tensor<float> X0 = m_debugger_X0();

    // VS Code's launch file: the two recipes in lldb for CodeLLDB and for the C/C++ extension, each
    // importing lldb_tensor.py from the workspace folder and choosing the tree view.
    const std::string launch = m_read(".vscode/launch.json");
    std::vector<std::vector<std::string>> init;
    const std::vector<std::string> configs = m_launch_lldb_configs(launch, init);
    REQUIRE_MESSAGE(configs.size() == 4, ".vscode/launch.json: expected 4 lldb configurations (2 recipes x CodeLLDB, C/C++), found " << configs.size());
    const std::string makefile = m_read("Makefile");
    for (std::size_t k = 0; k < configs.size(); k++) {
        INFO("lldb configuration of .vscode/launch.json:\n" << configs[k]);
        const bool explain = m_contains(configs[k], "\"program\": \"${workspaceFolder}/transformer-debug\""),
                   tests = m_contains(configs[k], "\"program\": \"${workspaceFolder}/tests-debug\"");
        CHECK_MESSAGE(explain != tests, "expected the program transformer-debug or tests-debug, the binaries of make debug");
        CHECK(m_contains(makefile, "\ndebug: transformer-debug tests-debug"));
        CHECK(m_contains(configs[k], explain ? "\"args\": [\"explain\", \"--preset\", \"tiny-gpt2\", \"--tokens\", \"3,1,4\"]" : "\"args\": [\"-tc=Attention*\"]"));
        CHECK(m_contains(configs[k], "\"cwd\": \"${workspaceFolder}\""));
        CHECK(m_contains(configs[k], "detect_leaks=0"));
        CHECK(init[k] == std::vector<std::string>{"command script import ${workspaceFolder}/lldb_tensor.py", "tensor-view tree"});
    }
    REQUIRE_FALSE(init.empty());
    std::string vscode_commands;  // the configuration's commands, ${workspaceFolder} the project's root
    for (std::string command : init[0]) {
        const std::size_t at = command.find("${workspaceFolder}");
        if (at != std::string::npos) command.replace(at, std::string("${workspaceFolder}").size(), root);
        vscode_commands += " -o '" + command + "'";
    }

    std::vector<std::pair<std::string, std::string>> builds = {{"libstdc++", m_cxx()}};
    if (std::system("clang++ --version > /dev/null 2>&1") == 0)
        builds.push_back({"libc++", "clang++ -stdlib=libc++"});
    for (const auto& build : builds) {
        INFO("the small program with " << build.first << " (" << build.second << ")");
        const std::string bdir = dir + "/" + build.first, built = m_debugger_program(bdir, build.second, X0);
        if (build.first == "libc++" && !built.empty() && !ci) {
            MESSAGE("libc++'s vectors are not checked: clang++ -stdlib=libc++ does not build here (Debian: apt-get install libc++-dev)");
            continue;
        }
        REQUIRE_MESSAGE(built.empty(), "the small program did not build: " << built);

        // The command line: p prints the header and the rows; a reference (the stop line, frame
        // variable) the header alone; members print as before.
        std::string lldb = "lldb --batch --no-lldbinit -o 'command script import " + root + "/lldb_tensor.py' -o 'break set -n look' -o run" +
                           " -o 'p X' -o 'p X.shape' -o 'frame variable X' -o up -o 'p big' -o 'p v' -o 'p none' -o 'p fresh'";
        for (int k = 0; k < 6; k++) lldb += " -o 'p garbage[" + std::to_string(k) + "]'";
        lldb += " -o 'frame variable --raw v' " + bdir + "/tensors";
        const m_Run run = m_debugger_run(lldb, bdir + "/lldb", "lldb");
        const std::string &out = run.out, &err = run.err;
        INFO("lldb's output:\n" << out << "\nlldb's errors:\n" << err);
        CHECK_FALSE(m_contains(out + err, "Traceback"));  // no Python exception
        CHECK_FALSE(m_contains(out + err, "error:"));
        CHECK_MESSAGE(m_contains(out, "look(X=Tensor<float> 3x8) at"), "expected the stop line to give X's shape");
        CHECK_MESSAGE((m_contains(out, "(const tf::Tensor<float> &) X = 0x") && m_contains(out, " Tensor<float> 3x8\n(lldb) up")),
                      "frame variable X (a reference): expected its address and the header alone");
        const std::vector<std::string> v = m_lldb_values(out);
        REQUIRE(v.size() == 12);
        m_check_gdb_tensor(v[0], X0, "lldb");
        CHECK_MESSAGE((m_contains(v[1], "[0] = 3") && m_contains(v[1], "[1] = 8")), "p X.shape: expected 3 and 8, lldb printed " << v[1]);
        m_check_debugger_values_2_to_11(v, ",\n  ", "lldb");
        CHECK_MESSAGE(m_contains(out, "(const tf::Tensor<float>) v = {\n  shape = {"), "frame variable --raw v: expected the raw struct");

        // VS Code: the commands of launch.json's first lldb configuration, then what its Variables
        // pane asks for: X as its header with the children shape and the rows [0] [1] [2] of 8
        // values each; a vector as one row; garbage without children.
        // The front ends read X through lldb's API, as the line "vscode: ..." does here: its summary,
        // its children's count and names, and each row's type and values.
        const std::string api = "script X = lldb.frame.FindVariable(\"X\"); rows = [X.GetChildAtIndex(i) for i in range(1, X.GetNumChildren())]; "
                                "print(\"vscode:\", X.GetSummary(), \"|\", X.GetNumChildren(), \"|\", X.GetChildAtIndex(0).GetName(), \"|\", "
                                "rows[0].GetTypeName(), \"|\", \" \".join(r.GetChildAtIndex(j).GetValue() for r in rows for j in range(r.GetNumChildren())))";
        const std::string tree = "lldb --batch --no-lldbinit" + vscode_commands + " -o 'break set -n look' -o run -o '" + api + "' -o 'p X' -o up -o 'p v'" +
                                 " -o 'p garbage[0]' " + bdir + "/tensors < /dev/null > " + bdir + "/tree.out 2> " + bdir + "/tree.err";
        CHECK(std::system(tree.c_str()) == 0);
        const std::string tout = m_read(bdir + "/tree.out");
        INFO("lldb's output in the tree view:\n" << tout << "\nlldb's errors:\n" << m_read(bdir + "/tree.err"));
        CHECK_FALSE(m_contains(tout, "Traceback"));
        {
            const std::size_t at = tout.find("\nvscode: ");
            REQUIRE_MESSAGE(at != std::string::npos, "expected the line vscode: ... of the script");
            std::istringstream line(tout.substr(at + 9, tout.find('\n', at + 1) - at - 9));
            std::string summary, count, first, type, values;
            std::getline(line, summary, '|');
            std::getline(line, count, '|');
            std::getline(line, first, '|');
            std::getline(line, type, '|');
            std::getline(line, values);
            CHECK(summary == "Tensor<float> 3x8 ");
            CHECK(count == " 4 ");  // shape and the 3 rows
            CHECK(first == " shape ");
            CHECK(type == " float[8] ");
            std::istringstream numbers(values);
            std::vector<double> got;
            for (double x; numbers >> x;) got.push_back(x);
            REQUIRE(got.size() == X0.data.size());
            for (std::size_t k = 0; k < got.size(); k++)  // lldb prints a float with 9 significant digits
                CHECK_MESSAGE(std::fabs(got[k] - X0.data[k]) <= 1e-7 * std::fabs(X0.data[k]),
                              "value " << k << " of X's rows: expected " << X0.data[k] << ", lldb's API gave " << got[k]);
        }
        const std::vector<std::string> t = m_lldb_values(tout);
        REQUIRE(t.size() == 3);
        CHECK(t[0].rfind("Tensor<float> 3x8 {\n  shape = size=2 {\n    [0] = 3\n    [1] = 8\n  }\n", 0) == 0);
        for (int i = 0; i < 4; i++) {
            const std::size_t row = t[0].find("\n  [" + std::to_string(i) + "] = (");
            CHECK_MESSAGE((row != std::string::npos) == (i < 3), "row " << i << (i < 3 ? " missing" : " is one too many"));
            if (row == std::string::npos || i == 3) continue;
            const std::string line = t[0].substr(row + 1, t[0].find('\n', row + 1) - row - 1);
            CHECK_MESSAGE(std::count(line.begin(), line.end(), '=') == 9, "row " << i << ": expected 8 values, lldb printed " << line);
        }
        CHECK(m_contains(t[1], "Tensor<float> 4 {\n  shape = size=1 {\n    [0] = 4\n  }\n  [0] = (0.5, -2, "));
        CHECK(t[2] == "Tensor<float> (invalid shape)");
    }

#ifdef TF_TESTS_DEBUG
    {  // The README's recipe in lldb (docs/teaching.md), on ./transformer-debug.
        const std::string recipe = "lldb --batch --no-lldbinit -o 'command script import " + root + "/lldb_tensor.py' -o 'settings set target.env-vars " +
                                   "ASAN_OPTIONS=detect_leaks=0' -o 'break set -n tf::LayerNorm<float>' -o run -o 'p X' -o 'p X.shape' -- " +
                                   "./transformer-debug explain --preset tiny-gpt2 --tokens 3,1,4 < /dev/null > " + dir + "/recipe.out 2> " + dir + "/recipe.err";
        m_check_debugger_recipe(recipe, dir, "lldb", "LayerNorm<float>(X=Tensor<float> 3x8, gamma=Tensor<float> 8, beta=Tensor<float> 8, eps=",
                                m_lldb_values, X0, {"[0] = 3", "[1] = 8"});
    }
#endif
}

TEST_CASE("handout: make handout FUNCS=\"Softmax_backward LayerNorm_backward\" fails exactly the cases needing them" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // Teaching: `make handout` copies the project into DIR with the bodies of FUNCS replaced by
    // a stub throwing tf::NotImplemented("NAME"), whose message is "not implemented: NAME". Checked here on a handout in the scratch
    // directory: an unknown name is an error; only the two bodies change (and the "handout: ..." cases
    // leave tests.cpp); the handout's transformer.cpp compiles without a warning; its tests, run in the
    // handout, fail exactly where a blanked function is needed, each failure naming it. To keep this
    // fast, only transformer.cpp is compiled (at -O1; -O0 with the sanitizers in tests-debug): it is
    // linked with this build's objects of tests.cpp and main.cpp (the handout's main.cpp and
    // transformer.hpp are the solution's, checked below), and the handout's tests.cpp differs from this
    // one only by the "handout: ..." cases, which the handout run leaves out with -tce.
#ifdef TF_TESTS_DEBUG
    const std::string obj = "build/debug-",
                      flags = "-O0 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined";
#else
    const std::string obj = "build/", flags = "-O1 -ffp-contract=off";
#endif
    const std::vector<std::string> funcs = {"Softmax_backward", "LayerNorm_backward"};
    const std::string cxx = m_cxx();
    auto lines_of = [](const std::string& text) {
        std::vector<std::string> v;
        std::istringstream in(text);
        for (std::string l; std::getline(in, l);) v.push_back(l);
        return v;
    };
    m_require_files({"Makefile", "transformer.cpp", "tests.cpp", "main.cpp"}, "run the tests from the project's root (make test does)");
    for (const char* o : {"tests.o", "main.o"})
        REQUIRE_MESSAGE(m_exists(obj + o), obj << o << " is missing: make test (make debug) builds it");

    {  // An unknown name: an error naming it, and no directory.
        const std::string bad = m_path("handout-bad");
        CHECK(m_sh(m_MAKE + " handout DIR=" + bad + " FUNCS='Softmax_backward No_such_function'", bad + ".log") != 0);
        INFO("make handout with an unknown name said: " << m_read(bad + ".log"));
        CHECK(m_contains(m_read(bad + ".log"), "No_such_function"));
        CHECK_FALSE(m_exists(bad));
    }

    const std::string dir = m_path("handout");
    const int made = m_sh(m_MAKE + " handout HANDOUT_OBJECTS=0 DIR=" + dir + " FUNCS='" + funcs[0] + " " + funcs[1] + "'", dir + ".log");
    REQUIRE_MESSAGE(made == 0, m_read(dir + ".log"));
    CHECK_FALSE(m_exists(dir + "/.git"));
    for (const char* f : {"transformer.hpp", "main.cpp", "Makefile", "README.md", ".gitignore", ".ci/run",
                          "gdb_tensor.py", "lldb_tensor.py", ".vscode/launch.json", "tools/finetune-demo"}) {
        INFO("file " << f);
        CHECK(m_read(dir + "/" + f) == m_read(f));
    }
    const std::string note = m_read(dir + "/HANDOUT.md");
    for (const std::string& f : funcs) CHECK(m_contains(note, "`" + f + "`"));

    // tests.cpp: the solution's without the TEST_CASEs "handout: ..." (and the empty line after each).
    {
        const std::vector<std::string> a = lines_of(m_read("tests.cpp")), b = lines_of(m_read(dir + "/tests.cpp"));
        std::vector<std::string> expect;
        for (std::size_t i = 0; i < a.size(); i++) {
            if (!m_starts(a[i], "TEST_CASE(\"handout: ")) {
                expect.push_back(a[i]);
                continue;
            }
            while (i < a.size() && a[i] != "}") i++;
            if (i + 1 < a.size() && a[i + 1].empty()) i++;
        }
        CHECK(expect.size() < a.size());
        CHECK(b == expect);
    }
    // transformer.cpp: the solution's line for line, except that the body of each named function (its
    // "{" ends a line whose definition starts in column 0 with the name, the body ends with "}" in
    // column 0) is "(void)parameter;" lines and the throw.
    {
        const std::vector<std::string> a = lines_of(m_read("transformer.cpp"));
        const std::vector<std::string> b = lines_of(m_read(dir + "/transformer.cpp"));
        std::multiset<std::string> blanked;
        std::size_t i = 0, j = 0;
        bool same = true;
        while (same && i < a.size() && j < b.size()) {
            if (a[i] == b[j]) {
                i++, j++;
                continue;
            }
            std::size_t s = i;  // back from the line with "{" to the definition's line in column 0
            while (s > 1 && !a[s - 1].empty() && a[s - 1][0] == ' ') s--;
            std::string sig;
            for (std::size_t k = s > 0 ? s - 1 : 0; k < i; k++) sig += a[k];
            while (j < b.size() && m_starts(b[j], "    (void)")) j++;
            const std::string throw_pre = "    throw tf::NotImplemented(\"";
            if (j >= b.size() || !m_starts(b[j], throw_pre) || b[j].substr(b[j].size() - 2) != ");") {
                same = false;
                break;
            }
            const std::string name = b[j].substr(throw_pre.size(), b[j].find('"', throw_pre.size()) - throw_pre.size());
            INFO("blanked " << name << " after line " << i << ": " << (i > 0 ? a[i - 1] : ""));
            CHECK(i > 0);
            CHECK(m_contains(sig, " " + name + "("));
            CHECK(a[i - 1].back() == '{');
            blanked.insert(name);
            j++;
            while (i < a.size() && a[i] != "}") i++;  // the solution's body
        }
        INFO("first difference: solution line " << i + 1 << ", handout line " << j + 1);
        CHECK(same);
        CHECK(i == a.size());
        CHECK(j == b.size());
        CHECK(blanked == std::multiset<std::string>(funcs.begin(), funcs.end()));
    }

    // It compiles without a warning; link it with this build's tests and main.
    const std::string compile = cxx + " -std=c++17 -Wall -Wextra -Wpedantic " + flags + " -c -o " + dir +
                                "/transformer.o " + dir + "/transformer.cpp";
    {
        const int compiled = m_sh(compile, dir + "/compile.log");
        INFO("compiler output: " << m_read(dir + "/compile.log"));
        REQUIRE(compiled == 0);
        CHECK(m_read(dir + "/compile.log").empty());
    }
    const std::string program = std::string(m_PROGRAM).substr(2);  // transformer or transformer-debug
    REQUIRE(m_sh(cxx + " " + flags + " -o " + dir + "/tests " + obj + "tests.o " + dir + "/transformer.o",
               dir + "/link.log") == 0);
    REQUIRE(m_sh(cxx + " " + flags + " -o " + dir + "/" + program + " " + obj + "main.o " + dir + "/transformer.o",
               dir + "/link.log") == 0);

    // Its tests, run in the handout (the CLI cases call its program), as XML.
    m_sh("cd " + dir + " && ./tests -r=xml '-tce=handout: *' > results.xml", dir + "/run.log");
    const std::string xml = m_read(dir + "/results.xml");
    REQUIRE_MESSAGE(m_contains(xml, "</doctest>"), m_read(dir + "/run.log"));  // it ran to the end
    auto unescape = [](std::string s) {
        const std::pair<const char*, const char*> entities[] = {
            {"&quot;", "\""}, {"&apos;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}};
        for (const auto& e : entities)
            for (std::size_t p; (p = s.find(e.first)) != std::string::npos;) s.replace(p, std::strlen(e.first), e.second);
        return s;
    };
    std::map<std::string, std::string> failed;  // name -> the case's XML
    std::set<std::string> passed, skipped;
    for (std::size_t p = xml.find("<TestCase name=\""); p != std::string::npos; p = xml.find("<TestCase name=\"", p + 1)) {
        const std::size_t q = p + 16, qe = xml.find('"', q), tag_end = xml.find('>', qe);
        const std::string name = unescape(xml.substr(q, qe - q));
        if (xml[tag_end - 1] == '/') {
            skipped.insert(name);
            continue;
        }
        const std::size_t end = xml.find("</TestCase>", tag_end);
        REQUIRE(end != std::string::npos);
        const std::string body = xml.substr(tag_end, end - tag_end);
        if (m_contains(body, "test_case_success=\"true\"")) passed.insert(name);
        else failed[name] = body;
    }
    std::string failed_names;
    for (const auto& f : failed) failed_names += "\n  " + f.first;
    // The list of failing cases is the expected result: shown only when a check below fails.
    INFO("handout with " << funcs[0] << ", " << funcs[1] << ": " << passed.size() << " cases pass, "
                         << failed.size() << " fail:" << failed_names);
    CHECK(!failed.empty());
    CHECK(passed.size() > failed.size());
    // Only the long cases are left out (their suites "... (long)" skip them unless asked for).
    m_sh("cd " + dir + " && ./tests -nc -ltc --no-skip '-ts=*(long)'", dir + "/long.log");
    const std::string long_cases = m_read(dir + "/long.log");
    for (const std::string& s : skipped) {
        CHECK_MESSAGE(m_contains(long_cases, "\n" + s + "\n"), "the handout's run skipped '" << s << "', expected only the long cases "
                                                                "(the suites \"... (long)\", which ./tests skips), which are:\n" << long_cases);
    }
    for (const auto& f : failed) {  // each failure names a blanked function, and only those
        INFO("failing case: " << f.first);
        CHECK((m_contains(f.second, "not implemented: " + funcs[0]) ||
               m_contains(f.second, "not implemented: " + funcs[1])));
        for (std::size_t p = f.second.find("not implemented: "); p != std::string::npos;
             p = f.second.find("not implemented: ", p + 1)) {
            const std::string rest = f.second.substr(p + 17);
            CHECK((m_starts(rest, funcs[0]) || m_starts(rest, funcs[1])));
        }
    }
    auto cases_starting = [&](const std::string& prefix) {
        std::vector<std::string> v;
        for (const auto& f : failed)
            if (m_starts(f.first, prefix)) v.push_back(f.first);
        for (const std::string& s : passed)
            if (m_starts(s, prefix)) v.push_back(s);
        return v;
    };
    // The cases that check these backwards fail, directly or through Attention and the models ...
    for (const char* prefix : {"Softmax: gradient check", "LayerNorm: gradient check", "Attention: gradient check",
                               "MultiHeadSA: gradient check", "GPT-2: whole-model gradient check", "train: a tiny GPT-2"}) {
        INFO("cases starting with " << prefix);
        const std::vector<std::string> v = cases_starting(prefix);
        CHECK(!v.empty());
        for (const std::string& name : v) CHECK_MESSAGE(failed.count(name), name);
    }
    // ... and those that need neither pass: forward passes, other modules' backwards, the rest.
    for (const char* prefix : {"LayerNorm: mean 0 variance 1", "Attention: hand-computed", "MultiHeadSA: equals",
                               "GPT: GPT(x)", "diag: ", "Stack: ", "Concat: ", "FFN_GELU: gradient check",
                               "CrossEntropy: ", "Mask_ST: ", "gemm: ", "checkpoint: ", "tokenizer: "}) {
        INFO("cases starting with " << prefix);
        const std::vector<std::string> v = cases_starting(prefix);
        CHECK(!v.empty());
        for (const std::string& name : v) CHECK_MESSAGE(passed.count(name), name);
    }
}

TEST_CASE("handout: a wrong solution of every assignment fails make check in at most 40 lines, its function named first" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // A student's wrong answer to assignment N is the solution with one mistake in a function of N,
    // of the kinds students make (an add written as an assignment, a term left out, an operand not
    // transposed, a path dropped, the layers walked the wrong way, rows swapped, a gradient never
    // written, a constant computed like its neighbour's). Planted in a copy of the project, `make
    // check ASSIGNMENT=N` (the handout's command) must fail; its report (make check's reporter,
    // -r=student) must be at most 40 lines, and the first failing case, shown first, must name the
    // function; in assignment 4 some line says "first wrong: FUNCTION" (the walk of the whole-model
    // checks, locate_backward).
    struct Planted {
        int assignment;
        std::string function, mistake, right, wrong;
        std::string preset = "";  // also explain --html on this preset: the page fails in the function's box first
    };
    const std::vector<Planted> planted = {
        {1, "Embedding_backward", "an add written as an assignment", "j < H; j++) w[j] += d[j];", "j < H; j++) w[j] = d[j];"},
        {2, "LayerNorm_backward", "a term left out", "dx[j] = cache.rstd[i] * (dy[j] * gamma[j] - mean_g - xh[j] * mean_gx);",
         "dx[j] = cache.rstd[i] * (dy[j] * gamma[j] - mean_g);"},
        {3, "Attention_backward", "an operand not transposed", "    dK = matmul_tn(dS, Q);\n}", "    dK = matmul(dS, Q);\n}"},
        {4, "post_ln_block_backward", "the residual's gradient dropped",
         "    Tensor<T> dX = MultiHeadSA_backward(k.attn_in, w.attn, k.attn, da, g.attn);\n    add_inplace(dX, dv);\n",
         "    Tensor<T> dX = MultiHeadSA_backward(k.attn_in, w.attn, k.attn, da, g.attn);\n", "tiny-bert"},
        {4, "blocks_backward", "the layers walked forwards", "    for (int l = c.L - 1; l >= 0; l--) {\n        trace_backward(k.trace, Stage::X, l + 1, dX);",
         "    for (int l = 0; l < c.L; l++) {\n        trace_backward(k.trace, Stage::X, l + 1, dX);", "tiny-gpt2"},
        {4, "embed_backward", "the segment rows swapped", "T* w = t == 0 ? g.w_A.ptr() : g.w_B.ptr();", "T* w = t == 0 ? g.w_B.ptr() : g.w_A.ptr();",
         "tiny-bert"},
        {5, "xlnet_loss", "a gradient never written", "                (*dw)[j] += dq[j];\n", ""},
        {6, "adamw_step", "a constant computed like its neighbour's", "const float c2 = (float)(1.0 / (1.0 - math::pow_int(opt.beta2, opt.t)));",
         "const float c2 = (float)(1.0 / (1.0 - math::pow_int(opt.beta1, opt.t)));"}};
    m_require_files({"Makefile", "transformer.cpp", "transformer.hpp", "tests.cpp", "main.cpp", "build/tests.o"},
                    "run the tests from the project's root after make tests");
    const std::string dir = m_path("planted");
    REQUIRE(std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/build && cp Makefile transformer.hpp main.cpp tests.cpp " + dir +
                         " && cp -R tools " + dir + "/ && cp build/toolchain.key build/tests.o " + dir + "/build/").c_str()) == 0);
    const std::string solution = m_read("transformer.cpp");
    const std::string make = m_MAKE + " -C " + dir;
    const std::string main_o = real_path("build/main.o");
    REQUIRE(!main_o.empty());
    const std::string machinery = real_path("build/transformer-machinery.o");
    REQUIRE(!machinery.empty());
    for (const Planted& m : planted) {
        CAPTURE(m.assignment);
        CAPTURE(m.function);
        CAPTURE(m.mistake);
        const std::size_t at = solution.find(m.right);
        REQUIRE_MESSAGE(at != std::string::npos, "the code to plant the mistake in is not in transformer.cpp: " << m.right);
        REQUIRE_MESSAGE(solution.find(m.right, at + 1) == std::string::npos, "the code to plant the mistake in is not unique: " << m.right);
        std::string wrong = solution;
        wrong.replace(at, m.right.size(), m.wrong);
        m_write(dir + "/transformer.cpp", wrong);
        const std::string log = dir + "/check.log";
        const int st = std::system((make + " check ASSIGNMENT=" + std::to_string(m.assignment) + " > " + log + " 2>&1").c_str());
        const std::string out = m_read(log);
        REQUIRE_MESSAGE(m_contains(out, "[doctest] test cases:"), "make check did not run the tests:\n" << out);
        CHECK_MESSAGE(st != 0, "make check ASSIGNMENT=" << m.assignment << " passes with " << m.mistake << " in " << m.function);
        CHECK_MESSAGE(!m_contains(out, "build/tests.o"), "make check compiled the tests again, though build/tests.o and "
                                                         "build/toolchain.key were copied from this build:\n" << out);
        // The report: from doctest's first separator line to the summary.
        const std::size_t from = out.find("=========");
        REQUIRE_MESSAGE(from != std::string::npos, "no case fails:\n" << out);
        const std::string report = out.substr(from);
        const int n = (int)std::count(report.begin(), report.end(), '\n');
        CHECK_MESSAGE(n <= 40, "make check's report is " << n << " lines, expected at most 40:\n" << report);
        const std::size_t second = report.find("\n=========");
        const std::string first_case = report.substr(0, second);
        CHECK_MESSAGE(m_contains(first_case, m.function), "the first failing case, shown first, does not name " << m.function << ":\n" << report);
        if (m.assignment == 4)
            CHECK_MESSAGE(m_contains(first_case, "first wrong: " + m.function), "the first case does not say \"first wrong: " << m.function << "\":\n" << report);
        if (m.preset.empty()) continue;
        // The page of the same answer: Part I (where the mistake is) compiled at -Og, linked with this
        // build's machinery and main.o; the first box failing on its own is the function's.
        const std::string build = "cd " + dir + " && g++ -std=c++17 -Og -ffp-contract=off -fno-trapping-math -fno-math-errno -DTF_COLD_O0 "
                                  "-DTF_ONLY_MATHEMATICS -c -o mathematics.o transformer.cpp && g++ -o transformer mathematics.o " + machinery + " " + main_o;
        REQUIRE_MESSAGE(std::system((build + " > build.log 2>&1").c_str()) == 0, m_read(dir + "/build.log"));
        const Config c = preset(m.preset);
        const Batch b = m_explain_batch(c);
        std::string ids, masked;
        for (int t : b.tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
        for (int i = 0; i < b.n; i++)
            if (!is_causal(c.variant) && b.targets[i] >= 0) masked += (masked.empty() ? "" : ",") + std::to_string(i + 1);
        const std::string cmd = "cd " + dir + " && ./transformer explain --preset " + m.preset + " --tokens " + ids +
                                (c.variant == Variant::bert ? " --segments 0,0,0,0,1,1" : "") + (masked.empty() ? "" : " --masked " + masked) +
                                " --html page.html > explain.out 2>&1";
        CHECK(m_system_status(std::system(cmd.c_str())) == 1);
        const Json j = m_page_json(m_read(dir + "/page.html"));
        std::string own;  // the first box failing on its own: not through a callee
        for (const Json& box : j.get("boxes")->arr) {
            const Json* ck = box.get("check");
            if (!ck || ck->get("pass")->type != Json::boolean || ck->get("pass")->b) continue;
            if (ck->get("callee")->type == Json::null) {
                own = ck->get("function")->str;
                break;
            }
        }
        CHECK_MESSAGE(own == m.function, "explain --html on " << m.preset << ": the first box failing on its own is " << own << "'s, expected "
                                                               << m.function << "'s:\n" << m_read(dir + "/explain.out"));
    }
    // A student's pre_ln_block_backward and blocks_backward written without their trace_backward lines
    // (the handout's stubs have none): right, the page passes; with the residual's path dropped, it
    // fails first in pre_ln_block_backward's box (its layer's parameters, through the stages reported).
    auto without_trace = [&](const std::string& code, const std::string& function) {
        const std::size_t a = code.find(function + "(");
        const std::size_t b = code.find("\n}\n", a);
        std::string body = code.substr(a, b - a), kept;
        std::istringstream in(body);
        for (std::string line; std::getline(in, line);)
            if (!m_contains(line, "trace_backward(")) kept += line + "\n";
        return code.substr(0, a) + kept.substr(0, kept.size() - 1) + code.substr(b);
    };
    const std::string untraced = without_trace(without_trace(solution, "static Tensor<T> pre_ln_block_backward"), "Tensor<T> blocks_backward");
    const std::string dropped = "    add_inplace(dX, dX_mid);\n    return dX;";
    REQUIRE(m_count(untraced, dropped) == 1);
    for (const bool wrong : {false, true}) {
        CAPTURE(wrong);
        std::string code = untraced;
        if (wrong) code.replace(code.find(dropped), dropped.size(), "    return dX;");
        m_write(dir + "/transformer.cpp", code);
        const std::string build = "cd " + dir + " && g++ -std=c++17 -Og -ffp-contract=off -fno-trapping-math -fno-math-errno -DTF_COLD_O0 "
                                  "-DTF_ONLY_MATHEMATICS -c -o mathematics.o transformer.cpp && g++ -o transformer mathematics.o " + machinery + " " + main_o;
        REQUIRE_MESSAGE(std::system((build + " > build.log 2>&1").c_str()) == 0, m_read(dir + "/build.log"));
        const int st = std::system(("cd " + dir + " && ./transformer explain --preset tiny-gpt2 --tokens 3,1,4 --html page.html > explain.out 2>&1").c_str());
        const std::string out = m_read(dir + "/explain.out");
        CHECK_MESSAGE(m_system_status(st) == (wrong ? 1 : 0), out);
        const Json j = m_page_json(m_read(dir + "/page.html"));
        std::string own;
        int checked = 0;
        for (const Json& box : j.get("boxes")->arr) {
            const Json* ck = box.get("check");
            if (!ck) continue;
            checked++;
            if (own.empty() && ck->get("pass")->type == Json::boolean && !ck->get("pass")->b && ck->get("callee")->type == Json::null)
                own = ck->get("function")->str;
        }
        CHECK_MESSAGE(checked == 22, "every backward box of tiny-gpt2 is still checked: expected 22, got " << checked << "\n" << out);
        CHECK_MESSAGE(own == (wrong ? "pre_ln_block_backward" : ""), "the first box failing on its own: " << own << "\n" << out);
    }
}

TEST_CASE("handout: explain --html in handouts 2 and 3 with planted mistakes: in Chromium each gradient row's verdict, a factor named, the callee first" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // A student's handout N: the solution with the functions of the later assignments blanked (as
    // make handout writes them) and mistakes planted in functions of assignment N, of four kinds: a
    // term left out (LayerNorm_backward's dX), a derivative taken at the wrong point (FFN_backward's
    // act'(A) for act'(Z)), a wrong factor (Attention_backward's sqrt(D) for 1/sqrt(D)), and so a
    // callee's mistake (MultiHeadSA_backward calls Attention_backward). explain --html stops at the
    // first stub but still writes the page: it checks every backward box alone (on random inputs
    // where the run did not reach it) and fails the boxes of the wrong functions and no other. In the
    // page headless Chromium lays out (1400 px), each gradient row of a failing box shows its own
    // verdict (formulas §10/§12/§14/§15: the finite differences decide), the wrong factor's row names
    // D, and MultiHeadSA_backward's boxes send the reader to Attention_backward's first.
    // transformer.cpp is compiled at -Og and linked with this build's main.o.
    struct Mistake {
        std::string function, right, wrong;
    };
    struct Planted {
        int assignment;
        std::vector<Mistake> mistakes;
        std::string stop;
        // Each failing function's gradients and their verdicts (a head's i for its number).
        std::map<std::string, std::map<std::string, bool>> verdicts;
    };
    const std::vector<Planted> planted = {
        {2,
         {{"LayerNorm_backward", "dx[j] = cache.rstd[i] * (dy[j] * gamma[j] - mean_g - xh[j] * mean_gx);",
           "dx[j] = cache.rstd[i] * (dy[j] * gamma[j] - mean_g);"},
          {"FFN_backward", "activation_derivative_array(act, cache.Z.ptr(), dZ.ptr(), dZ.size());",
           "activation_derivative_array(act, cache.A.ptr(), dZ.ptr(), dZ.size());"}},
         "Mask_AR",
         {{"LayerNorm_backward", {{"dgamma", true}, {"dbeta", true}, {"dX", false}}},
          {"FFN_backward", {{"dW_2", true}, {"db_2", true}, {"dW_1", false}, {"db_1", false}, {"dX", false}}}}},
        {3,
         {{"Attention_backward", "Softmax_backward(cache.P, dP);\n    const T scale = T(1) / std::sqrt(T(D));\n",
           "Softmax_backward(cache.P, dP);\n    const T scale = std::sqrt(T(D));\n"}},
         "model_backward",
         {{"Attention_backward", {{"dV", true}, {"dQ", false}, {"dK", false}}},
          {"MultiHeadSA_backward", {{"dW^O", true}, {"dW_i^V", true}, {"dW_i^Q", false}, {"dW_i^K", false}, {"dX", false}}}}}};
    m_require_files({"Makefile", "transformer.cpp", "tools/blank.awk", "build/main.o"},
                    "run the tests from the project's root after make (build/main.o)");
    const std::string makefile = m_read("Makefile");
    const std::string main_o = real_path("build/main.o");
    REQUIRE(!main_o.empty());
    auto funcs_of = [&](int n) {  // ASSIGNMENT_N_FUNCS, its continuation lines joined
        const std::string key = "ASSIGNMENT_" + std::to_string(n) + "_FUNCS :=";
        std::size_t a = makefile.find(key);
        REQUIRE(a != std::string::npos);
        a += key.size();
        std::string v;
        for (;;) {
            const std::size_t e = makefile.find('\n', a);
            std::string line = makefile.substr(a, e - a);
            const bool more = !line.empty() && line.back() == '\\';
            if (more) line.pop_back();
            v += " " + line;
            if (!more) break;
            a = e + 1;
        }
        std::istringstream in(v);
        std::vector<std::string> names;
        for (std::string w; in >> w;) names.push_back(w);
        return names;
    };
    const std::string compiler = m_cxx();
    // The probe: every gradient row as laid out (its box, name, verdict, relation, whether it shows),
    // and every callee message with the box its link reaches.
    const std::string probe =  // every box laid out, not only those in view (the page's content-visibility: auto)
        "[].forEach.call(document.querySelectorAll('section.box'),function(s){s.style.contentVisibility='visible';});"
        "out.rows=[].map.call(document.querySelectorAll('section .grad'),function(g){var v=g.querySelector('.verdict'),r=g.querySelector('.relation');"
        "return {box:g.closest('section').id,name:g.getAttribute('data-gradient'),verdict:v?v.innerText:'',relation:r?r.innerText:'',"
        "shown:g.getBoundingClientRect().height>0&&!!v&&v.getBoundingClientRect().width>0};});"
        "out.callees=[].map.call(document.querySelectorAll('section .callee'),function(c){var a=c.querySelector('a'),t=a?document.getElementById(a.getAttribute('href').slice(1)):null;"
        "return {box:c.closest('section').id,text:c.innerText,to:t?t.id:'',to_fails:!!(t&&t.querySelector('.check.fail')),shown:c.getBoundingClientRect().height>0};});";
    for (const Planted& m : planted) {
        CAPTURE(m.assignment);
        const std::string dir = m_path("explain-handout-" + std::to_string(m.assignment));
        REQUIRE(std::system(("rm -rf " + dir + " && " + m_MAKE + " handout ASSIGNMENT=" + std::to_string(m.assignment) + " DIR=" + dir +
                             " HANDOUT_OBJECTS=0 > /dev/null 2>&1").c_str()) == 0);
        // The student's answer: the solution, the later assignments blanked, the mistakes planted.
        std::string funcs, labels;
        for (int n = m.assignment + 1; n <= 6; n++)
            for (const std::string& f : funcs_of(n)) funcs += f + " ", labels += f + "=assignment+" + std::to_string(n) + " ";
        const std::string blanked = dir + "/blanked.cpp";
        REQUIRE(std::system(("awk -v funcs='" + funcs + "' -v labels='" + labels + "' -f tools/blank.awk transformer.cpp > " + blanked).c_str()) == 0);
        std::string answer = m_read(blanked);
        for (const Mistake& k : m.mistakes) {
            REQUIRE(m_contains(m_read(dir + "/transformer.cpp"), "NotImplemented(\"" + k.function + "\""));
            const std::size_t at = answer.find(k.right);
            REQUIRE_MESSAGE(at != std::string::npos, "the code to plant the mistake in is not in transformer.cpp: " << k.right);
            REQUIRE_MESSAGE(answer.find(k.right, at + 1) == std::string::npos, "the code to plant the mistake in is not unique: " << k.right);
            answer.replace(at, k.right.size(), k.wrong);
        }
        m_write(dir + "/transformer.cpp", answer);
        const std::string build = "cd " + dir + " && mkdir -p build && " + compiler +
                                  " -std=c++17 -Og -ffp-contract=off -fno-trapping-math -fno-math-errno -DTF_COLD_O0 -c -o build/transformer.o transformer.cpp && " +
                                  compiler + " -o transformer " + main_o + " build/transformer.o";
        REQUIRE_MESSAGE(std::system((build + " > " + dir + "/build.log 2>&1").c_str()) == 0, m_read(dir + "/build.log"));
        const int st = std::system(("cd " + dir + " && ./transformer explain --preset tiny-gpt2 --tokens 3,1,4 --html page.html > explain.out 2>&1").c_str());
        const std::string out = m_read(dir + "/explain.out");
        CAPTURE(out);
        CHECK(m_system_status(st) == 1);  // a box fails
        CHECK(m_contains(out, "the run stops at " + m.stop + ": not implemented: " + m.stop + " (assignment "));
        const std::string html = m_read(dir + "/page.html");
        CHECK(m_contains(html, "The run stops at " + m.stop + ": not implemented: " + m.stop));
        const Json j = m_page_json(html);
        CHECK(j.get("stopped")->str.rfind("not implemented: " + m.stop, 0) == 0);
        std::map<std::string, std::string> function_of;  // "b17" -> its check's function
        std::set<std::string> failing;
        int checked = 0, missing = 0, random = 0;
        for (const Json& box : j.get("boxes")->arr) {
            const Json* ck = box.get("check");
            if (!ck) continue;
            CAPTURE(box.get("box")->str);
            const std::string f = ck->get("function")->str;
            function_of["b" + std::to_string((int)box.get("number")->num)] = f;
            random += ck->get("random")->b;
            if (!ck->get("missing")->str.empty()) {
                missing++;
                CHECK(ck->get("missing")->str.rfind("not implemented: ", 0) == 0);
                continue;
            }
            checked++;
            CHECK(ck->get("pass")->b == !m.verdicts.count(f));  // every box of a wrong function fails, none of another
            if (!ck->get("pass")->b) failing.insert(f);
        }
        CHECK(failing.size() == m.verdicts.size());
        CHECK(missing > 0);  // the later assignments' boxes: not implemented yet
        CHECK(checked >= 9);
        if (m.assignment == 2) CHECK(random > 0);  // past the masks, on inputs drawn at random
        else CHECK(random == 0);                   // the forward ran whole
        CHECK(m_contains(html, "not implemented yet"));
        // The text names the innermost failing boxes first: Attention_backward's before MultiHeadSA_backward's,
        // which fail through them.
        std::vector<std::string> said;
        std::istringstream lines(out);
        for (std::string l; std::getline(lines, l);)
            if (l.rfind("failing: ", 0) == 0) said.push_back(l);
        CHECK(!said.empty());
        bool through = false;
        for (const std::string& l : said) {
            CAPTURE(l);
            if (m_contains(l, ", through [")) through = true;
            else CHECK_MESSAGE(!through, "a box failing on its own is listed after one failing through a box it calls");
            CHECK(m_contains(l, "(MultiHeadSA_backward)") == m_contains(l, ", through ["));
        }
        // The page as Chromium lays it out.
        const std::string js = m_browser_probe(dir + "/page.html", probe, 1400, "handout-" + std::to_string(m.assignment));
        if (js.empty()) continue;
        const Json seen = parse_json(js);
        std::map<std::string, int> rows_of;  // failing function -> gradient rows seen
        for (const Json& r : seen.get("rows")->arr) {
            const std::string box = r.get("box")->str, f = function_of[box];
            CAPTURE(box);
            CAPTURE(f);
            const std::string name = std::regex_replace(r.get("name")->str, std::regex("_[0-9]+\\^"), "_i^");
            CAPTURE(name);
            CHECK(r.get("shown")->b);
            if (!m.verdicts.count(f)) {
                CHECK_MESSAGE(r.get("verdict")->str == "passes", "a gradient of a right function: expected passes, got " << r.get("verdict")->str);
                continue;
            }
            const auto& want = m.verdicts.at(f);
            if (!want.count(name)) continue;  // biases: none in tiny-gpt2
            rows_of[f]++;
            CHECK_MESSAGE(r.get("verdict")->str == (want.at(name) ? "passes" : "fails"), "expected " << (want.at(name) ? "passes" : "fails")
                          << " (the finite differences of the planted mistake), the page shows " << r.get("verdict")->str);
            if (f == "Attention_backward" && !want.at(name))  // dQ and dK are D = 4 times too large
                CHECK_MESSAGE(m_contains(r.get("relation")->str, "backward = 4 \u00d7 finite difference at every entry compared: a factor of D"),
                              "the relation shown: " << r.get("relation")->str);
        }
        for (const auto& kv : m.verdicts) CHECK_MESSAGE(rows_of[kv.first] >= (int)kv.second.size(), kv.first << ": " << rows_of[kv.first] << " gradient rows shown");
        // The callee first: each MultiHeadSA_backward box says it fails through a failing Attention_backward box, and links it.
        int callees = 0;
        for (const Json& cm : seen.get("callees")->arr) {
            CAPTURE(cm.get("text")->str);
            CHECK(function_of[cm.get("box")->str] == "MultiHeadSA_backward");
            CHECK(function_of[cm.get("to")->str] == "Attention_backward");
            CHECK(cm.get("to_fails")->b);
            CHECK(cm.get("shown")->b);
            CHECK(m_contains(cm.get("text")->str, "This box fails through ["));
            CHECK(m_contains(cm.get("text")->str, "Attention_backward (head 1), which MultiHeadSA_backward calls and whose own check fails: fix that first."));
            callees++;
        }
        CHECK(callees == (m.assignment == 3 ? 2 : 0));  // one MultiHeadSA box per layer of tiny-gpt2
    }
}

TEST_CASE("assignments: each assignment's text reads every § and names every rule its graded cases need") {
    M_SKIP_ON_WINDOWS("make and a POSIX shell (make assignments-text-check)");
    // make assignments-text-check (docs/assignments.md, "How the numbers are kept true"): each
    // assignment's graded cases (the test suites "assignment N" and "assignment N (...)") against its
    // section of docs/assignments.md: every § the cases cite or the formula sheet's code map lists
    // them under is in the section's Read list, every function of the assignment whose argument
    // checks a case grades is in its Rules list. Then the check must fail, naming the assignment, the
    // case and what is missing, on copies of the page that lack one § and one rule.
    for (const char* f : {"Makefile", "tests.cpp", "docs/assignments.md", "docs/formulas.md"})
        REQUIRE_MESSAGE(m_exists(f), "run the tests from the project's root (make test does): no " << f);
    const std::string make = m_MAKE + " assignments-text-check";
    auto run = [&](const std::string& args, const std::string& log) {
        const int st = std::system((make + args + " > " + log + " 2>&1").c_str());
        return m_system_status(st);
    };
    {
        const std::string log = m_path("assignments-text.log");
        const int st = run("", log);
        const std::string out = m_read(log);
        INFO("make assignments-text-check said:\n" << out);
        CHECK(st == 0);
        int agree = 0;  // "assignment N: K cases, reads §..., rules: ...: text and cases agree", one for each N
        std::istringstream lines(out);
        for (std::string l; std::getline(lines, l);) agree += l.rfind("assignment ", 0) == 0 && m_contains(l, ": text and cases agree");
        CHECK(agree == 6);
        CHECK(m_contains(out, "assignment 3: 35 cases, reads §1 "));
        CHECK(m_contains(out, ", rules: Mask_BD, Mask_AR, Mask_ST, apply_mask, Attention_backward, Concat_backward, MultiHeadSA_backward: "));
    }
    // A copy of the page whose text breaks the rule: `from` replaced by `to` inside the section of
    // assignment n, up to `until`.
    const std::string page = m_read("docs/assignments.md");
    auto broken = [&](int n, const std::string& until, const std::string& from, const std::string& to) {
        std::string t = page;
        const std::size_t a = t.find("\n## Assignment " + std::to_string(n) + ":");
        REQUIRE(a != std::string::npos);
        const std::size_t b = t.find(until, a);
        REQUIRE(b != std::string::npos);
        int replaced = 0;
        for (std::size_t p = t.find(from, a); p != std::string::npos && p < b; p = t.find(from, p + to.size()), replaced++)
            t.replace(p, from.size(), to);
        REQUIRE_MESSAGE(replaced > 0, "the section of assignment " << n << " has no \"" << from << "\" before \"" << until << "\"");
        const std::string path = m_path("assignments-" + std::to_string(n) + ".md");
        m_write(path, t);
        return path;
    };
    struct Case {
        int n;
        std::string until, from, to;
        std::vector<std::string> said;
    };
    const Case cases[] = {
        {4, "\nWrite:", "§16", "S16", {"assignment 4: the case \"dropout: reproducible masks", "under §16, which the Read list of"}},
        {3, "\n```", "- `MultiHeadSA_backward`:", "- MultiHeadSA_backward:",
         {"assignment 3: the case \"MultiHeadSA: wrong shape\"", "grades the argument checks of MultiHeadSA_backward",
          "which the Rules list of"}},
    };
    for (const Case& c : cases) {
        const std::string doc = broken(c.n, c.until, c.from, c.to), log = doc + ".log";
        const int st = run(" ASSIGN_DOC=" + doc, log);
        const std::string out = m_read(log);
        INFO("assignment " << c.n << "'s section with \"" << c.from << "\" made \"" << c.to << "\"; make assignments-text-check said:\n" << out);
        CHECK(st != 0);
        for (const std::string& part : c.said) CHECK_MESSAGE(m_contains(out, part), "the output lacks: " << part);
    }
}

TEST_CASE("handout: every assignment's handout fails the cases docs/assignments.md says, the solution none" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // The assignments of docs/assignments.md (Makefile: ASSIGNMENT_N_FUNCS; tests.cpp: the test
    // suites "assignment N" and "assignment N (0 points)").
    // make assignments-check writes each one's handout, compiles its transformer.cpp with the fast
    // build's flags (no warning allowed), links it with this build's tests.o, runs the assignment's
    // cases in it and on the solution, and compares the counts with those the document states. Its
    // output (the counts, which include failing cases by design) is shown only when it fails.
#ifdef TF_TESTS_DEBUG
    MESSAGE("make assignments-check links the -O3 build's tests.o: run by make test-long, not ./tests-debug");
#else
    REQUIRE_MESSAGE(m_exists("docs/assignments.md"), "run the tests from the project's root (make test does)");
    const std::string log = m_path("assignments-check.log");
    const int st = m_sh(m_MAKE + " assignments-check", log);
    INFO("make assignments-check said:\n" << m_read(log));
    CHECK(st == 0);
#endif
}

// The make grade cases link this build's tests.o: in ./tests-debug (-O0) a message says to run them
// by ./tests and this is false; else the files they need must be there, and this is true.
bool m_grade_can_run(std::initializer_list<const char*> files) {
#ifdef TF_TESTS_DEBUG
    MESSAGE("make grade links the -O0 build's tests.o: run by make test-long, not ./tests-debug");
    (void)files;
    return false;
#else
    m_require_files(files, "run the tests from the project's root after make tests (make test does)");
    return true;
#endif
}

TEST_CASE("handout: make grade scores a fresh handout 0 and the solution full marks, in results.json and results.xml" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // make grade (docs/assignments.md, "Grading") on assignment 1, as a course platform runs it: in
    // a fresh handout every case fails and the score is 0; in a copy of the handout holding the
    // solution's transformer.cpp (the autograder copies the student's file in) full marks, written
    // where GRADE_DIR says; in a copy whose Stack_backward prints bytes that JSON must escape and
    // aborts, and whose diag_backward never returns, the Embedding cases keep their points and the
    // others score 0 with the crash's or the time limit's text; with a transformer.cpp that does not
    // compile, 0 and the compiler's message. Every results.json is parsed, checked case by case
    // against the cases of assignment 1's test suites, and every results.xml must be well-formed XML. To keep
    // it fast the handout links this build's tests.o (make grade compiles transformer.cpp alone)
    // and the copies keep the handout's objects (only what an edit changes is compiled again).
    if (!m_grade_can_run({"Makefile", "transformer.cpp", "build/tests.o", "tests"})) return;

    // The cases make grade must report, in doctest's order: those of assignment 1's test suites.
    const std::string suites = "assignment 1,assignment 1 (*)";
    std::vector<std::string> names;
    {
        const std::string list = m_path("grade-list.txt");
        REQUIRE(m_sh("./tests -nc -ltc '-ts=" + suites + "'", list) == 0);
        std::istringstream in(m_read(list));
        int part = 0;
        for (std::string l; std::getline(in, l);) {
            if (!l.empty() && l.find_first_not_of('=') == std::string::npos) part++;
            else if (part == 1) names.push_back(l);
        }
    }
    REQUIRE_MESSAGE(names.size() >= 3, "the test suites " << suites << " hold " << names.size() << " cases");

    // results.json: valid UTF-8 and JSON, {"score", "output", "tests": [{"name", "score", "max_score",
    // "status", "output"}]} with one entry per case in order and the score their sum. Returns the
    // tests by name.
    struct Result {
        double score = 0, max_score = 0;
        std::string status, output;
    };
    auto results = [&](const std::string& path) {
        std::map<std::string, Result> by_name;
        const std::string text = m_read(path);
        INFO(path << " holds:\n" << text);
        REQUIRE_MESSAGE(!text.empty(), "make grade wrote no " << path);
        std::size_t bad = std::string::npos;
        for (std::size_t i = 0; i < text.size() && bad == std::string::npos;) {
            uint32_t cp = 0;
            const int len = utf8_next(text, i, cp);
            if (len > 0) i += (std::size_t)len;
            else bad = i;
        }
        REQUIRE_MESSAGE(bad == std::string::npos, "byte " << bad << " of " << path << " is not UTF-8");
        Json j;
        try {
            j = parse_json(text);
        } catch (const std::exception& e) {
            FAIL("results.json is not JSON: " << std::string(e.what()));
        }
        REQUIRE(j.type == Json::object);
        const Json *score = j.get("score"), *tests = j.get("tests"), *output = j.get("output");
        REQUIRE_MESSAGE((score && score->type == Json::number), "no number \"score\"");
        REQUIRE_MESSAGE((output && output->type == Json::string), "no string \"output\"");
        REQUIRE_MESSAGE((tests && tests->type == Json::array), "no array \"tests\"");
        REQUIRE_MESSAGE(tests->arr.size() == names.size(), "expected " << names.size() << " tests, got " << tests->arr.size());
        double sum = 0;
        for (std::size_t k = 0; k < names.size(); k++) {
            const Json& t = tests->arr[k];
            CAPTURE(k);
            REQUIRE(t.type == Json::object);
            const Json *name = t.get("name"), *s = t.get("score"), *m = t.get("max_score"), *st = t.get("status"),
                       *out = t.get("output");
            REQUIRE_MESSAGE((name && name->type == Json::string), "test " << k << " has no string \"name\"");
            CHECK_MESSAGE(name->str == names[k], "expected the case \"" << names[k] << "\", got \"" << name->str << "\"");
            REQUIRE_MESSAGE((s && s->type == Json::number && m && m->type == Json::number), "test " << k << ": no number \"score\" or \"max_score\"");
            REQUIRE_MESSAGE((st && st->type == Json::string && out && out->type == Json::string), "test " << k << ": no string \"status\" or \"output\"");
            CHECK_MESSAGE(m->num > 0, name->str << ": expected a max_score above 0, got " << m->num);
            CHECK_MESSAGE((st->str == "passed" || st->str == "failed"), name->str << ": status " << st->str);
            CHECK_MESSAGE(s->num == (st->str == "passed" ? m->num : 0.0),
                          name->str << ": " << st->str << " with score " << s->num << " of " << m->num);
            sum += s->num;
            by_name[name->str] = Result{s->num, m->num, st->str, out->str};
        }
        CHECK_MESSAGE(score->num == sum, "expected the score to be the tests' sum " << sum << ", got " << score->num);
        return by_name;
    };
    // results.xml: well-formed, a <testcase> of every case.
    auto junit = [&](const std::string& path) {
        m_check_xml(path);
        const std::string xml = m_read(path);
        for (const std::string& n : names)
            CHECK_MESSAGE(m_contains(xml, "<testcase classname=\"tests.cpp\" name=\"" + n + "\""), path << " has no <testcase> of " << n);
    };
    auto total = [](const std::map<std::string, Result>& r) {
        double s = 0, m = 0;
        for (const auto& kv : r) s += kv.second.score, m += kv.second.max_score;
        return std::make_pair(s, m);
    };

    // The fresh handout: every case fails on a stub, 0 points.
    const std::string h = m_path("grade-handout");
    REQUIRE_MESSAGE(m_sh(m_MAKE + " handout ASSIGNMENT=1 HANDOUT_OBJECTS=0 DIR=" + h, h + ".log") == 0, m_read(h + ".log"));
    REQUIRE(m_sh("mkdir -p " + h + "/build && cp build/toolchain.key build/tests.o " + h + "/build/", h + ".log") == 0);
    {
        const int st = m_sh("cd " + h + " && " + m_MAKE + " grade", h + "/grade.log");
        INFO("make grade in the handout said:\n" << m_read(h + "/grade.log"));
        REQUIRE(st == 0);
        CHECK(m_contains(m_read(h + "/grade.log"), "make grade: assignment 1: 0 of "));
        const auto r = results(h + "/results.json");
        CHECK(total(r).first == 0);
        CHECK_MESSAGE(!parse_json(m_read(h + "/results.json")).get("visibility"), "without GRADE_VISIBILITY results.json should set none");
        for (const auto& kv : r) {
            CAPTURE(kv.first);
            CHECK(kv.second.status == "failed");
            CHECK_MESSAGE(m_contains(kv.second.output, "not implemented: "), "the output lacks the stub's message: " << kv.second.output);
        }
        junit(h + "/results.xml");
    }

    // The solution in a copy of the handout, results in GRADE_DIR: full marks.
    const std::string s = m_path("grade-solution"), out = m_path("grade-results");
    REQUIRE(m_sh("cp -Rp " + h + " " + s + " && rm " + s + "/results.json " + s + "/results.xml && cp transformer.cpp " + s + "/", s + ".log") == 0);
    {
        const int st = m_sh("cd " + s + " && " + m_MAKE + " grade GRADE_VISIBILITY=after_due_date GRADE_DIR=" + out, s + "/grade.log");
        INFO("make grade with the solution said:\n" << m_read(s + "/grade.log"));
        REQUIRE(st == 0);
        const auto r = results(out + "/results.json");
        const Json j = parse_json(m_read(out + "/results.json"));
        REQUIRE_MESSAGE(j.get("visibility"), "GRADE_VISIBILITY=after_due_date: results.json should set \"visibility\"");
        CHECK(j.get("visibility")->str == "after_due_date");
        const auto t = total(r);
        CHECK_MESSAGE(t.first == t.second, "expected full marks, got " << t.first << " of " << t.second);
        for (const auto& kv : r) CHECK_MESSAGE(kv.second.status == "passed", kv.first << ": " << kv.second.output);
        junit(out + "/results.xml");
        CHECK_FALSE(m_exists(s + "/results.json"));
        CHECK(m_sh("cd " + s + " && " + m_MAKE + " grade GRADE_VISIBILITY=later GRADE_DIR=" + out, s + "/bad.log") != 0);
        CHECK(m_contains(m_read(s + "/bad.log"), "GRADE_VISIBILITY=later"));
    }

    // A crash and a hang in a copy: they cost their own cases only.
    std::string src = m_read("transformer.cpp");
    auto inject = [&](const std::string& name, const std::string& stmt) {  // stmt first in name's body
        std::istringstream in(src);
        std::string edited;
        bool done = false;
        for (std::string l; std::getline(in, l);) {
            edited += l + "\n";
            if (!done && !l.empty() && l[0] != ' ' && m_contains(l, " " + name + "(") && l.back() == '{') {
                edited += stmt + "\n";
                done = true;
            }
        }
        REQUIRE_MESSAGE(done, "transformer.cpp has no line defining " << name << " that ends with {");
        src = edited;
    };
    inject("Stack_backward", R"cpp(    std::fputs("grade \"quote\" back\\slash\ttab ctl\x01 bad\xff euro\xe2\x82\xac\n", stderr); std::abort();)cpp");
    inject("diag_backward", "    for (volatile int spin = 0; spin == 0;) {}");
    const std::string c = m_path("grade-crash");
    REQUIRE(m_sh("cp -Rp " + s + " " + c, c + ".log") == 0);
    m_write(c + "/transformer.cpp", src);
    {
        const int st = m_sh("cd " + c + " && " + m_MAKE + " grade GRADE_TIMEOUT=2", c + "/grade.log");
        INFO("make grade with an abort and a hang said:\n" << m_read(c + "/grade.log"));
        REQUIRE(st == 0);
        const auto r = results(c + "/results.json");
        double embedding = 0;
        for (const auto& kv : r) {
            CAPTURE(kv.first);
            CAPTURE(kv.second.output);
            if (m_starts(kv.first, "Embedding:")) {
                CHECK(kv.second.status == "passed");
                embedding += kv.second.max_score;
            } else if (m_starts(kv.first, "Stack:")) {
                CHECK(kv.second.status == "failed");
                CHECK(m_contains(kv.second.output, "SIGABRT"));
                // What the program wrote, decoded: the byte 0xFF (not UTF-8) is U+FFFD.
                CHECK(m_contains(kv.second.output, "grade \"quote\" back\\slash\ttab ctl\x01 bad\xEF\xBF\xBD euro\xE2\x82\xAC\n"));
            } else {
                CHECK(kv.second.status == "failed");
                CHECK(m_contains(kv.second.output, "stopped after 2 s"));
            }
        }
        CHECK(embedding > 0);
        CHECK_MESSAGE(total(r).first == embedding, "expected the Embedding cases' " << embedding << " points, got " << total(r).first);
        junit(c + "/results.xml");
    }

    // A transformer.cpp that does not compile: make grade fails, results.json says why, 0 points.
    m_write(c + "/transformer.cpp", m_read("transformer.cpp") + "\nthis is not C++;\n");
    {
        const int st = m_sh("cd " + c + " && " + m_MAKE + " grade GRADE_DIR=broken", c + "/grade.log");
        INFO("make grade with a compile error said:\n" << m_read(c + "/grade.log"));
        CHECK(st != 0);
        const Json j = parse_json(m_read(c + "/broken/results.json"));
        REQUIRE(j.get("score"));
        CHECK(j.get("score")->num == 0);
        REQUIRE(j.get("output"));
        CHECK_MESSAGE(m_contains(j.get("output")->str, "error"), "expected the compiler's error, got: " << j.get("output")->str);
        m_check_xml(c + "/broken/results.xml");
    }
}

TEST_CASE("handout: the student's path with macOS's tools (BSD awk, no timeout, no nproc) gives the same handout, counts and grade" * doctest::test_suite("teaching (long)") * doctest::skip()) {
    // A Mac's awk is BSD's (Debian packages it as original-awk), and it has no timeout or nproc (GNU
    // coreutils). With a PATH of links to every program but those, awk being BSD's, make handout
    // ASSIGNMENT=1 writes the same handout as with the usual tools, and in it make check prints the
    // same counts and make grade the same score and results.json. Then with the solution, its
    // diag_backward made to never return, make grade GRADE_TIMEOUT=2 stops the diag cases by
    // tools/time-limit and scores the others (the case above checks timeout's). To save the fast
    // build, the handout starts from the objects of the case above when it ran in this process
    // (only mathematics.o is compiled again).
    if (!m_grade_can_run({"Makefile", "transformer.cpp", "build/tests.o", "build/toolchain.key"})) return;
#ifndef __APPLE__
    REQUIRE_MESSAGE(std::system("command -v original-awk > /dev/null 2>&1") == 0,
                    "original-awk is not installed (BSD's awk, macOS's): apt-get install original-awk");
#endif
    auto line_of = [](const std::string& text, const std::string& start) {  // the last line that starts so, up to " ("
        std::istringstream in(text);
        std::string found;
        for (std::string l; std::getline(in, l);)
            if (l.rfind(start, 0) == 0) found = l.substr(0, l.find(" ("));
        return found;
    };
    const std::string bin = m_path("bsd-bin");
    REQUIRE(m_sh("d='" + bin + "'; a=$(command -v original-awk || command -v awk) && rm -rf \"$d\" && mkdir -p \"$d\" && IFS=: && "
               "for p in $PATH; do for f in \"$p\"/*; do n=${f##*/}; case $n in awk|gawk|mawk|nawk|original-awk|timeout|nproc) continue;; esac; "
               "[ -f \"$f\" ] && [ -x \"$f\" ] && [ ! -e \"$d/$n\" ] && ln -s \"$f\" \"$d/$n\"; done; done; ln -s \"$a\" \"$d/awk\"",
               bin + ".log") == 0);
    // Where there is a timeout (Linux), a make that hangs (a tools/time-limit that never stops a case) fails.
    const std::string guard = std::system("command -v timeout > /dev/null 2>&1") == 0 ? "timeout 600 " : "";
    const std::string make = guard + m_MAKE;
    const std::string bsd = guard + "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH=" + bin + " make -s --no-print-directory";
    m_sh("env PATH=" + bin + " sh -c 'command -v timeout; command -v nproc; command -v gawk; command -v mawk; awk -version'", bin + ".log");
    const std::string tools = m_read(bin + ".log");
    INFO("in the PATH of BSD's tools: " << tools);
    REQUIRE(m_contains(tools, "awk version"));  // BSD's awk; gawk and mawk name themselves
    REQUIRE(std::count(tools.begin(), tools.end(), '\n') == 1);

    const std::string hb = m_path("bsd-handout"), hg = m_path("gnu-handout");
    REQUIRE_MESSAGE(m_sh(bsd + " handout ASSIGNMENT=1 HANDOUT_OBJECTS=0 DIR=" + hb, hb + ".log") == 0, m_read(hb + ".log"));
    REQUIRE_MESSAGE(m_sh(make + " handout ASSIGNMENT=1 HANDOUT_OBJECTS=0 DIR=" + hg, hg + ".log") == 0, m_read(hg + ".log"));
    CHECK_MESSAGE(m_sh("diff -r " + hb + " " + hg, hb + ".diff") == 0, "the handouts differ:\n" << m_read(hb + ".diff"));
    const std::string seen = m_path("grade-handout/build-fast");  // the case above's fast build
    REQUIRE(m_sh("mkdir -p " + hb + "/build && cp build/toolchain.key build/tests.o " + hb + "/build/ && { [ ! -d " + seen +
                   " ] || cp -Rp " + seen + " " + hb + "/; }", hb + ".log") == 0);

    // make check and make grade in the fresh handout: the same counts, score and results.json.
    const int check_bsd = m_sh("cd " + hb + " && " + bsd + " check", hb + "/check-bsd.log");
    const int check_gnu = m_sh("cd " + hb + " && " + make + " check", hb + "/check-gnu.log");
    const std::string counts = line_of(m_read(hb + "/check-bsd.log"), "[doctest] test cases:");
    INFO("make check with BSD's tools said:\n" << m_read(hb + "/check-bsd.log"));
    CHECK(check_bsd == check_gnu);
    std::string packed = counts;  // doctest pads the counts to one width
    packed.erase(std::remove(packed.begin(), packed.end(), ' '), packed.end());
    CHECK_MESSAGE(m_contains(packed, "|0passed|"), "expected every case of a fresh handout to fail, got: " << counts);
    CHECK(counts == line_of(m_read(hb + "/check-gnu.log"), "[doctest] test cases:"));
    auto grade = [&](const std::string& how, const std::string& args, const std::string& out) {  // "make grade: ..." line
        const int st = m_sh("cd " + hb + " && " + how + " grade GRADE_DIR=" + out + " " + args, out + ".log");
        INFO("make grade " << args << " said:\n" << m_read(out + ".log"));
        CHECK(st == 0);
        m_check_xml(out + "/results.xml");
        return line_of(m_read(out + ".log"), "make grade: assignment 1: ");
    };
    const std::string fresh = grade(bsd, "", m_path("bsd-fresh"));
    CHECK_MESSAGE(fresh.rfind("make grade: assignment 1: 0 of ", 0) == 0, "expected 0 points, got: " << fresh);
    CHECK(fresh == grade(make, "", m_path("gnu-fresh")));
    CHECK(m_read(m_path("bsd-fresh/results.json")) == m_read(m_path("gnu-fresh/results.json")));

    // The solution with a diag_backward that never returns: tools/time-limit stops its cases.
    std::string edited = m_read("transformer.cpp");
    const std::size_t def = edited.find("\nTensor<T> diag_backward(");  // its definition's first line, ending with {
    REQUIRE_MESSAGE(def != std::string::npos, "transformer.cpp has no line starting with Tensor<T> diag_backward(");
    edited.insert(edited.find('\n', def + 1) + 1, "    for (volatile int spin = 0; spin == 0;) {}\n");
    m_write(hb + "/transformer.cpp", edited);
    CHECK(grade(bsd, "GRADE_TIMEOUT=2", m_path("bsd-hang")).rfind("make grade: assignment 1: ", 0) == 0);
    const Json j = parse_json(m_read(m_path("bsd-hang/results.json")));
    REQUIRE((j.get("tests") && j.get("tests")->type == Json::array && j.get("tests")->arr.size() >= 3));
    for (const Json& t : j.get("tests")->arr) {
        REQUIRE((t.get("name") && t.get("status") && t.get("output")));
        const bool diag = t.get("name")->str.rfind("diag:", 0) == 0;
        INFO(t.get("name")->str << ": " << t.get("output")->str);
        CHECK(t.get("status")->str == (diag ? "failed" : "passed"));
        CHECK(m_contains(t.get("output")->str, "stopped after 2 s") == diag);
    }
}
TEST_SUITE_END();

// ================================================================================================
// Files and failures: outputs checked before work, one durable writer, no non-finite
// model, resume knows its data, stdout checked, strict flags, errors that point at the place.
// ================================================================================================
TEST_SUITE_BEGIN("platform");

TEST_CASE("files: train checks every output before any work (missing directory, directory, log clash, FIFO, foreign file, input)") {
    const std::string text = m_text_file();
    const std::string dir = m_path("outs");
    m_make_dir(dir);
    const std::string args = " --data " + text + " --layers 1 --heads 2 --embd 8 --block 8 --steps 200000 --quiet";
    // No "model ..." line and no file: the command failed before training started.
    auto refused = [&](const std::string& out, const std::string& part) {
        const m_Run r = m_run("train" + args + " --out " + out);
        INFO("--out " << out << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK(r.out.empty());
        CHECK(m_contains(r.err, part));
    };
    refused(dir + "/nodir/m.st", "directory '" + dir + "/nodir' does not exist");
    refused(dir, "it is a directory");
    refused(dir + "/run.csv", "the loss log '" + dir + "/run.csv' are the same file");
    const std::string notes = dir + "/notes.txt";
    m_write(notes, "my notes\n");
    refused(notes, "refusing to replace --out '" + notes + "'");
    CHECK(m_read(notes) == "my notes\n");
    refused(text, "would overwrite --data '" + text + "'");
    // The log's name clashes with the data: train --data X.csv --out X.st.
    const std::string csv_data = dir + "/data.csv";
    m_write(csv_data, m_read(text));
    const m_Run r = m_run("train --data " + csv_data + " --layers 1 --heads 2 --embd 8 --block 8 --steps 2 --quiet --out " + dir + "/data.st");
    CHECK(r.status == 1);
    CHECK(m_contains(r.err, "the loss log '" + dir + "/data.csv' would overwrite --data"));
    CHECK(m_read(csv_data) == m_read(text));
    CHECK(m_names_in(dir, "data.st").empty());
    // Files the program wrote are replaced: a second run over the same --out succeeds.
    const std::string ok = dir + "/ok.st";
    for (int k = 0; k < 2; k++) m_run_ok("train --data " + text + " --layers 1 --heads 2 --embd 8 --block 8 --steps 2 --quiet --out " + ok);
    CHECK(m_run("grad --checkpoint " + ok + " --tokens 1,2,3 --out " + ok).status == 1);  // grad's input
    CHECK(m_contains(m_run("grad --checkpoint " + ok + " --tokens 1,2,3 --out " + ok).err, "would overwrite --checkpoint"));
    M_SKIP_ON_WINDOWS("a FIFO (mkfifo) and a POSIX shell's pipe for the FIFO's checks");
    const std::string fifo = dir + "/fifo";
    REQUIRE(m_make_fifo(fifo));
    refused(fifo, "it is a FIFO");
    {  // --out /dev/stdout into a pipe: /proc/self/fd/1 is a link to "pipe:[...]", no file name
        const std::string b = dir + "/stdout_pipe";
        const std::string cmd = "( " + std::string(m_PROGRAM) + " init --preset tiny-gpt --out /dev/stdout 2> " + b +
                                ".err; echo $? > " + b + ".rc ) | cat > " + b + ".out";
        REQUIRE(std::system(cmd.c_str()) == 0);
        CHECK(m_read(b + ".rc") == "1\n");
        CHECK(m_read(b + ".out").empty());
        CHECK(m_contains(m_read(b + ".err"), "--out '/dev/stdout': it is a FIFO or pipe"));
    }
    CHECK(m_is_fifo(fifo));  // still a FIFO
}

TEST_CASE("files: a symlinked --out writes the link's target and keeps the link; check_outputs on a dangling link") {
    M_SKIP_ON_WINDOWS("a symbolic link, which Windows makes only with a privilege");
    const std::string dir = m_path("links");
    m_make_dir(dir);
    const std::string link = dir + "/link.st", target = dir + "/real.st";
    REQUIRE(m_make_symlink("real.st", link));  // dangling until written
    CHECK_NOTHROW(check_outputs({{link, "--out", OutputKind::checkpoint}}));
    CHECK(resolve_output_path(link) == dir + "/real.st");
    const m_Run r = m_run("init --preset tiny-gpt --out " + link);
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(m_is_symlink(link));
    CHECK(load_model(target).config.variant == Variant::gpt);
    m_run_ok("init --preset tiny-gpt2 --out " + link);  // again, through the link
    CHECK(m_is_symlink(link));
    CHECK(load_model(target).config.variant == Variant::gpt2);
    CHECK(m_names_in(dir, ".").empty());  // no temporaries left
}

TEST_CASE("files: two concurrent writers of the same path both succeed and leave one whole file") {
    const std::string dir = m_path("concurrent");
    m_make_dir(dir);
    // Through the program: two `init` runs at once on one --out.
    const std::string out = dir + "/init.st";
    std::vector<m_Child> runs;
    for (const char* seed : {"1", "2"})
        runs.push_back(m_start_argv({m_PROGRAM, "init", "--preset", "tiny-gpt", "--seed", seed, "--out", out}, dir + "/init" + seed + ".out",
                                    dir + "/init" + seed + ".err"));
    for (m_Child& run : runs) {
        m_Exit e;
        REQUIRE(m_wait(run, e));
        INFO("stderr: " << m_read(dir + "/init1.err") << m_read(dir + "/init2.err"));
        CHECK(e.exited);
        CHECK(e.status == 0);
    }
    CHECK_NOTHROW(load_model(out));
    M_SKIP_ON_WINDOWS("fork, for two processes that call save_safetensors");
    const std::string path = dir + "/same.st";
    Tensor<float> a(300, 700, 1.0f), b(300, 700, 2.0f);  // ~0.8 MB each, so the writes overlap
    std::vector<m_Child> kids;
    for (int w = 0; w < 2; w++)
        kids.push_back(m_fork([&, w] {
            for (int rep = 0; rep < 10; rep++) save_safetensors(path, {{"writer", std::to_string(w)}}, {{"t", w ? &b : &a}});
            return 0;
        }));
    for (m_Child& kid : kids) {
        m_Exit e;
        REQUIRE(m_wait(kid, e));
        CHECK(e.exited);
        CHECK(e.status == 0);
    }
    const SafeTensors f = load_safetensors(path);
    REQUIRE(f.metadata.count("writer"));
    const float want = f.metadata.at("writer") == "1" ? 2.0f : 1.0f;
    REQUIRE(f.find("t"));
    CHECK(std::all_of(f.find("t")->data.begin(), f.find("t")->data.end(), [&](float v) { return v == want; }));
    CHECK(m_names_in(dir, ".").empty());
}

TEST_CASE("files: a failed write (file size limit, as on a full disk) keeps the previous file and leaves no temporary") {
    M_SKIP_ON_WINDOWS("fork and setrlimit's file size limit");
    const std::string dir = m_path("fulldisk");
    m_make_dir(dir);
    const std::string path = dir + "/m.st";
    Tensor<float> small(4, 4, 1.0f), big(1000, 1000, 3.0f);
    save_safetensors(path, {{"which", "old"}}, {{"t", &small}});
    const std::string before = m_read(path);
    m_Child kid = m_fork([&] {  // the write fails with EFBIG past 64 KiB
        try {
            save_safetensors(path, {{"which", "new"}}, {{"t", &big}});
            return 0;
        } catch (const Error& e) {
            return m_contains(e.what(), "previous file, if any, is unchanged") ? 2 : 4;
        }
    }, "", "", 1 << 16);
    m_Exit e;
    REQUIRE(m_wait(kid, e));
    REQUIRE(e.exited);
    CHECK(e.status == 2);  // a tf::Error that says so
    CHECK(m_read(path) == before);
    CHECK(m_names_in(dir, ".").empty());
    {  // destroyed without commit: the target is untouched, the temporary gone
        AtomicFile f(path);
        f.write("partial", 7);
    }
    CHECK(m_read(path) == before);
    CHECK(m_names_in(dir, ".").empty());
}

TEST_CASE("train: a divergent run (lr 1e38) stops naming the step and writes nothing over the last checkpoint") {
    const std::string dir = m_path("diverge");
    m_make_dir(dir);
    const std::string out = dir + "/m.st";
    const m_Run r = m_run("train --steps 1 --lr 1e38 --warmup 0 --quiet --out " + out);
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(m_contains(r.err, "at step 1"));
    CHECK(m_contains(r.err, "no checkpoint was written"));
    CHECK_FALSE(m_exists(out));
    CHECK(m_names_in(dir, "").empty());
    // A good checkpoint at --out stays as it was when the next run over it diverges.
    m_run_ok("train --steps 2 --quiet --out " + out);
    const std::string good = m_read(out);
    const m_Run r2 = m_run("train --steps 3 --lr 1e38 --warmup 0 --quiet --out " + out);
    CHECK(r2.status == 1);
    CHECK(m_contains(r2.err, "at step 2"));  // the first update's huge weights overflow the next loss
    CHECK(m_read(out) == good);
    CHECK(m_names_in(dir, ".").empty());
}

TEST_CASE("files: load checks every chunk it reads: a NaN or infinity past the first 1 MiB of a tensor is found") {
    Config c = preset("tiny-gpt");
    c.V = (1 << 18) / c.H + 16;  // W_e: more than the 2^18 floats of one chunk
    Params<float> p = make_params<float>(c);
    init_params(c, p, 1);
    const std::string path = m_path("nan_chunk.st");
    save_model(path, c, p);
    CHECK(load_model(path).params.W_e.data.back() == p.W_e.data.back());
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        p.W_e.data.back() = bad;  // in the second chunk
        save_model(path, c, p);
        M_CHECK_TF_ERROR(load_model(path), "'W_e'", "not finite");
    }
}

TEST_CASE("files: a NaN parameter is named by first_nonfinite, an infinity too, and sample_logits refuses a NaN logit") {
    // No command runs here (make mutants runs this case where no ./transformer is built).
    const Config c = preset("tiny-gpt");
    Params<float> p = make_params<float>(c);
    init_params(c, p, 1);
    CHECK(first_nonfinite(c, p) == "");
    p.layers[1].ffn.W_2(2, 3) = std::numeric_limits<float>::quiet_NaN();
    CHECK(first_nonfinite(c, p) == "layers.1.ffn.W_2");
    p.layers[0].attn.W_Q[1](0, 0) = -std::numeric_limits<float>::infinity();
    CHECK(first_nonfinite(c, p) == "layers.0.attn.W_Q.1");
    p.layers[0].attn.W_Q[1](0, 0) = 0;
    p.layers[1].ffn.W_2(2, 3) = std::numeric_limits<float>::infinity();
    CHECK(first_nonfinite(c, p) == "layers.1.ffn.W_2");
    p.layers[1].ffn.W_2(2, 3) = 0;
    CHECK(first_nonfinite(c, p) == "");
    std::vector<float> z = {0.5f, std::numeric_limits<float>::quiet_NaN()};
    Rng rng(1);
    M_CHECK_TF_ERROR(sample_logits(z, 1.0, 0, rng), "not finite");
}

TEST_CASE("files: load_model, sample and eval refuse a checkpoint with a NaN parameter, naming the tensor") {
    const Config c = preset("tiny-gpt");
    Params<float> p = make_params<float>(c);
    init_params(c, p, 1);
    p.layers[1].ffn.W_2(2, 3) = std::numeric_limits<float>::quiet_NaN();
    const std::string path = m_path("nan.st");
    save_model(path, c, p, {{"vocab", CharVocab::from_text("abcdefghijklm").to_metadata()}});
    M_CHECK_TF_ERROR(load_model(path), "layers.1.ffn.W_2", "not finite");
    m_cli_fails("sample --checkpoint " + path + " --prompt abc", "layers.1.ffn.W_2");
    m_write(m_path("nan_eval.txt"), "abcabcabcabc");
    m_cli_fails("eval --checkpoint " + path + " --data " + m_path("nan_eval.txt"), "layers.1.ffn.W_2");
}

TEST_CASE("train: --resume refuses a changed or missing data file and accepts a moved copy with --data") {
    const std::string dir = m_path("resume_data");
    m_make_dir(dir);
    const std::string data = dir + "/a.txt", moved = dir + "/b.txt", ck = dir + "/r.st";
    std::string text = m_read(m_text_file());
    m_write(data, text);
    const std::string args = " --layers 1 --heads 2 --embd 8 --block 8 --batch 2 --steps 4 --eval-steps 1 --quiet";
    m_run_ok("train --data " + data + args + " --stop-at 2 --out " + ck);
    const LoadedModel lm = load_model(ck, {"adam."});
    CHECK(lm.file.metadata.at("train.data") == data);
    CHECK(lm.file.metadata.at("train.data_bytes") == std::to_string(text.size()));
    CHECK(lm.file.metadata.count("train.data_fnv1a64"));
    CHECK(std::filesystem::path(lm.file.metadata.at("train.data_path")).is_absolute());
    const std::string saved = m_read(ck);
    std::string edited = text;  // same characters, same size, other text
    std::swap(edited[0], edited[1]);
    REQUIRE(edited != text);
    m_write(data, edited);
    m_cli_fails("train --resume " + ck, "'" + data + "' has changed");
    m_write(data, text + "x");
    m_cli_fails("train --resume " + ck, "its size is");
    CHECK(m_read(ck) == saved);
    REQUIRE(std::rename(data.c_str(), moved.c_str()) == 0);
    m_cli_fails("train --resume " + ck, "cannot be opened");
    m_write(moved, edited);
    m_cli_fails("train --resume " + ck + " --data " + moved, "'" + moved + "' has changed");
    m_write(moved, text);
    const m_Run ok = m_run("train --resume " + ck + " --data " + moved);
    INFO(ok.err);
    CHECK(ok.status == 0);
    CHECK(load_model(ck, {"adam."}).file.metadata.at("train.data") == moved);
}

TEST_CASE("CLI: a failed write to standard output is an error (stdout on /dev/full)") {
#ifdef __APPLE__
    MESSAGE("skipped on macOS: it has no /dev/full (a device on which every write fails, ENOSPC); the case runs on Linux");
    return;
#endif
    M_SKIP_ON_WINDOWS("/dev/full, a device on which every write fails (ENOSPC)");
    // stdout goes to /dev/full, stderr to a file (m_run sends stdout to a file of its own, so not through it).
    auto run_full = [](const std::string& args) {
        std::vector<std::string> argv = {m_PROGRAM};
        for (const std::string& word : m_words(args)) argv.push_back(word);
        const std::string err = m_path("full.err");
        const m_Exit e = m_run_argv(argv, "/dev/full", err);
        m_Run r;
        r.exited = e.exited;
        r.status = e.exited ? e.status : -1;
        r.err = m_read(err);
        return r;
    };
    for (const std::string args : {"params --preset gpt2-124m", "--help", "help", "train --help", "bench --preset tiny-gpt --steps 1"}) {
        const m_Run r = run_full(args);
        INFO(args << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK(m_contains(r.err, "error: writing standard output: No space left on device"));
    }
    const std::string ck = m_path("stdout_full.st");
    m_run_ok("train --steps 2 --quiet --out " + ck);
    const m_Run s = run_full("sample --checkpoint " + ck + " --prompt 12 --tokens 3");
    CHECK(s.status == 1);
    CHECK(m_contains(s.err, "writing standard output"));
}

TEST_CASE("CLI: switches take =true/false/1/0 or nothing, values are taken as values, unknown commands fail") {
    const std::string off = m_path("ab_off.st"), on = m_path("ab_on.st");
    m_run_ok("train --steps 1 --quiet --attn-bias=0 --out " + off);
    m_run_ok("train --steps 1 --quiet --attn-bias=true --out " + on);
    CHECK_FALSE(load_model(off, {"adam."}).config.attn_bias);
    CHECK(load_model(on, {"adam."}).config.attn_bias);
    m_cli_fails("train --steps 1 --attn-bias=maybe", "--attn-bias is a switch");
    m_cli_fails("params --preset --help", "--help");  // a value, not a request for help
    m_cli_fails("bogus --help", "unknown command 'bogus'");
    m_cli_fails("bogus", "unknown command 'bogus'");
    m_cli_fails("train --block 32", "--block does not apply to the built-in addition task");
    m_cli_fails("sample --checkpoint x.st --prompt a --temperature 0 --top-k 5", "--top-k does not apply with --temperature 0");
    m_cli_fails("sample --checkpoint x.st --prompt a --temperature 0 --seed 5", "--seed does not apply with --temperature 0");
    for (const std::string& name : preset_names()) {
        if (name.rfind("tiny-", 0) != 0) continue;  // the published sizes work too, but take seconds
        const m_Run r = m_run("bench --preset " + name + " --steps 1 --json");
        INFO(name << ": " << r.err);
        CHECK(r.status == 0);
    }
}

TEST_CASE("errors: an unknown character is named with its code point, byte offset, line and column") {
    const std::string s = "hello [MASK] wor\xE2\x82\xAC" "ld";
    CHECK(describe_char_at(s, 16, "--text") == "character '\xE2\x82\xAC' (U+20AC) at byte 16 (line 1, column 17) of --text");
    CHECK(describe_char_at(s, 17, "--text") == describe_char_at(s, 16, "--text"));  // a continuation byte
    CHECK(describe_char_at("ab\ncd\x01", 5, "'f.txt'") == "character U+0001 at byte 5 (line 2, column 3) of 'f.txt'");
    CHECK(describe_char_at("a\xFFz", 1, "x") == "byte 0xFF (not UTF-8) at byte 1 (line 1, column 2) of x");
    CHECK(describe_char_at("\xC3\xA9t\xC3\xA9\n\xC3\xA9!", 8, "y") == "character '!' (U+0021) at byte 8 (line 2, column 2) of y");
    const CharVocab v = CharVocab::from_text("abc\n");
    M_CHECK_TF_ERROR(v.encode("ab\nc\xE2\x82\xAC", "'d.txt'"), "character '\xE2\x82\xAC' (U+20AC) at byte 4 (line 2, column 2) of 'd.txt'");
    // fill names the place in the whole text, not in one character.
    const std::string bert = m_path("chars_bert.st");
    m_run_ok("train --model bert --data " + m_text_file() + " --layers 1 --heads 2 --embd 8 --block 16 --batch 2 --steps 1 --quiet --out " + bert);
    m_cli_fails("fill --checkpoint " + bert + " --text 'the [MASK] wor\xE2\x82\xAC" "ld'", "(U+20AC) at byte 14 (line 1, column 15) of --text");
    const std::string other = m_path("chars_other.txt");
    m_write(other, "the fox\nthe dog\nthe cat\xE2\x82\xAC\n");
    m_cli_fails("eval --checkpoint " + bert + " --data " + other, "at byte 23 (line 3, column 8) of '" + other + "'");
}

TEST_CASE("files: checkpoint headers are valid UTF-8 JSON whatever the strings (a file name that is not UTF-8)") {
    CHECK(json_escape("a\xFF" "b") == "\"a\xEF\xBF\xBD" "b\"");
    CHECK(json_escape("\xE2\x82\xAC\x01\"") == "\"\xE2\x82\xAC\\u0001\\\"\"");
    CHECK(json_escape("\xE2\x82") == "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");  // truncated sequence
    M_SKIP_ON_WINDOWS("a file name that is not UTF-8, which Windows (its names are UTF-16) cannot hold");
    const std::string dir = m_path("utf8 dir");
    m_make_dir(dir);
    const std::string data = dir + "/x\xFF.txt", ck = m_path("utf8.st");
    m_write(data, m_read(m_text_file()));
    const m_Run r = m_run("train --data '" + data + "' --layers 1 --heads 2 --embd 8 --block 8 --steps 1 --quiet --out " + ck);
    INFO(r.err);
    REQUIRE(r.status == 0);
    const std::string bytes = m_read(ck);
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)(unsigned char)bytes[k] << (8 * k);
    const std::string header = bytes.substr(8, n);
    for (std::size_t i = 0; i < header.size();) {  // valid UTF-8 throughout
        uint32_t cp;
        const int len = utf8_next(header, i, cp);
        REQUIRE(len > 0);
        i += (std::size_t)len;
    }
    const Json h = parse_json(header);
    CHECK(h.get("__metadata__")->get("train.data")->str == dir + "/x\xEF\xBF\xBD.txt");
}

TEST_CASE("files: no command replaces a file it did not write (every writing command, every kind of foreign file)") {
    const std::string dir = m_path("foreign");
    m_make_dir(dir);
    const std::string ck = dir + "/ck.safetensors", corpus = m_text_file(), tr = dir + "/tr.tsv", va = dir + "/va.tsv";
    const std::string enc = dir + "/enc.json", merges = dir + "/merges.bpe";
    m11_write_bpe(enc, merges);
    m_run_ok("init --preset tiny-gpt2 --out " + ck);
    m_run_ok("task --task classify --examples 40 --out " + tr);
    m_run_ok("task --task classify --examples 20 --seed 2 --out " + va);
    const std::string pre = dir + "/pre.safetensors", sums = dir + "/sums.txt";  // finetune starts from a trained model
    m_run_ok("task --task text --examples 200 --out " + sums);
    m_run_ok("train --data " + sums + " --layers 1 --heads 2 --embd 8 --block 16 --steps 2 --quiet --out " + pre);
    std::string llmc = token_file_bytes({1, 2, 3});  // llm.c's own token file: the format, not our mark
    llmc.replace(64, 22, std::string(22, '\0'));
    const std::vector<std::pair<std::string, std::string>> foreign = {
        {"source", "#include <cstdio>\nint main() { return 0; }\n"},
        {"released model", m_st_bytes("{\"__metadata__\":{\"format\":\"pt\"},\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd")},
        {"picture", "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"></svg>\n"},
        {"spreadsheet", "step,loss\n1,2.5\n"},
        {"llm.c tokens", llmc},
        {"labelled notes", "good\tthe play was fine\n"},
        {"JSON", "{\"model_type\": \"gpt2\"}\n"}};
    // Each command with its output flag; a train or finetune run's log and plot are --out's name
    // with .csv and .svg, so a foreign file there is tried too.
    const std::string train = "train --data " + corpus + " --layers 1 --heads 2 --embd 8 --block 8 --steps 2 --quiet";
    const std::string ft = "finetune --checkpoint " + pre + " --task classify --train " + tr + " --val " + va + " --steps 1 --quiet";
    struct Writer {
        std::string args, ext;  // the command before --out; the extension its --out takes
        std::string sibling;    // "" or the extension of the file beside --out that gets the foreign bytes
    };
    const std::vector<Writer> writers = {
        {"task --task classify --examples 10", ".tsv", ""},
        {"task --task text --examples 10", ".txt", ""},
        {"init --preset tiny-gpt", ".safetensors", ""},
        {"grad --checkpoint " + ck + " --tokens 1,2,3", ".safetensors", ""},
        {"tokenize --encoder " + enc + " --vocab " + merges + " --text hat", ".bin", ""},
        {"masks --n 3", ".svg", ""},
        {"attention --checkpoint " + ck + " --tokens 1,2,3", ".svg", ""},
        {train, ".safetensors", ""},
        {train, ".safetensors", ".csv"},
        {train, ".safetensors", ".svg"},
        {ft, ".safetensors", ""},
        {ft, ".safetensors", ".csv"},
        {ft, ".safetensors", ".svg"}};
    int k = 0;
    for (const Writer& w : writers)
        for (const auto& f : foreign) {
            const std::string base = dir + "/f" + std::to_string(k++);
            const std::string out = base + w.ext, victim = w.sibling.empty() ? out : base + w.sibling;
            m_write(victim, f.second);
            const m_Run r = m_run(w.args + " --out " + out);
            INFO("transformer " << w.args << " --out " << out << "\nforeign file: " << f.first << " at " << victim
                                << "\nstdout: " << r.out << "\nstderr: " << r.err);
            CHECK(r.status == 1);
            CHECK(m_contains(r.err, "refusing to replace"));
            CHECK(m_read(victim) == f.second);  // byte for byte
            if (!w.sibling.empty()) CHECK_FALSE(m_exists(out));
        }
    // What this program wrote is replaced: the same commands over their own files succeed.
    for (const Writer& w : writers) {
        const std::string out = dir + "/own" + w.ext;
        INFO("transformer " << w.args << " --out " << out);
        m_run_ok(w.args + " --out " + out);
        m_run_ok(w.args + " --out " + out);
    }
}
TEST_SUITE_END();

// ================================================================================================
// The command-line program
// ================================================================================================
TEST_SUITE_BEGIN("command line");
TEST_CASE("CLI: params --preset gpt1 prints 116497920") {
    const m_Run r = m_run("params --preset gpt1");
    INFO(r.out << r.err);
    CHECK(r.exited);
    CHECK(r.status == 0);
    CHECK(m_contains(r.out, "116497920"));
    const m_Run r2 = m_run("params --preset gpt2-124m");
    CHECK(r2.status == 0);
    CHECK(m_contains(r2.out, "124439808"));  // released GPT-2 small, attention biases included
    CHECK(m_contains(r2.out, "36864"));
}

TEST_CASE("CLI: the defaults a help states are the ones the program takes") {
    // train: every numeric default of the help against TrainOptions' initialisers (what train runs with).
    const std::string help = m_run_ok("train --help").out;
    const TrainOptions o;
    const std::vector<std::pair<std::string, double>> want = {
        {"layers", o.layers}, {"heads", o.heads}, {"embd", o.embd}, {"batch", o.batch}, {"accum", o.accum},
        {"steps", (double)o.steps}, {"lr", o.lr}, {"warmup", (double)o.warmup}, {"weight-decay", o.weight_decay},
        {"beta1", o.beta1}, {"beta2", o.beta2}, {"grad-clip", o.grad_clip}, {"dropout", o.dropout},
        {"eval-every", (double)o.eval_every}, {"eval-steps", (double)o.eval_steps}, {"save-every", (double)o.save_every},
        {"log-every", (double)o.log_every}, {"stop-at", (double)o.stop_at}, {"seed", (double)o.seed}};
    for (const auto& kv : want) {
        CAPTURE(kv.first);
        CHECK(m_help_default(help, kv.first) == doctest::Approx(kv.second));
    }
    // bench's model flags change its preset: their defaults are the preset's, not train's.
    const std::string bench = m_run_ok("bench --help").out;
    for (const char* flag : {"--layers", "--heads", "--embd", "--model", "--activation"}) {
        CAPTURE(flag);
        const std::size_t at = bench.find(std::string("  ") + flag + " ");
        REQUIRE(at != std::string::npos);
        CHECK(m_contains(bench.substr(at, bench.find('\n', at) - at), "(default: the preset's"));
    }
    // sample: the range the help gives is the range it takes.
    CHECK(m_contains(m_run_ok("sample --help").out, "tokens to generate, 1..1000000"));
    m_cli_fails("sample --checkpoint x.st --prompt a --tokens 0", "--tokens must be positive");
    m_cli_fails("sample --checkpoint x.st --prompt a --tokens 1000001", "--tokens must be between 1 and 1000000");
}

TEST_CASE("CLI: strip writes the weights without AdamW's state; every reader takes it, --resume refuses it") {
    const std::string full = m_path("strip_full.safetensors"), lean = m_path("strip_lean.safetensors");
    m_run_ok("train --data " + m_text_file() + " --layers 1 --heads 2 --embd 16 --block 16 --batch 4 --steps 3 --eval-every 0 --quiet --out " + full);
    const m_Run r = m_run_ok("strip --checkpoint " + full + " --out " + lean);
    CHECK(m_contains(r.out, "wrote " + lean + ": the weights of " + full + " without AdamW's m and v"));
    LoadedModel a = load_model(full, {"adam."}), b = load_model(lean);  // no adam.* tensor left in it
    CHECK(m_params_bits_equal(a.config, a.params, b.params));
    CHECK(b.file.metadata.at("weights_only") == "1");
    CHECK(b.file.metadata.at("vocab") == a.file.metadata.at("vocab"));
    CHECK(m_read(lean).size() * 2 < m_read(full).size());  // m and v are twice the weights
    CHECK(m_run_ok("sample --checkpoint " + lean + " --prompt the --tokens 8 --temperature 0").out ==
          m_run_ok("sample --checkpoint " + full + " --prompt the --tokens 8 --temperature 0").out);
    CHECK(m_run_ok("eval --checkpoint " + lean + " --data " + m_text_file()).out.substr(m_text_file().size()) ==
          m_run_ok("eval --checkpoint " + full + " --data " + m_text_file()).out.substr(m_text_file().size()));
    m_cli_fails("train --resume " + lean + " --steps 5", "holds the weights only (written by strip, without AdamW's state): it cannot be resumed; "
                                                         "start a new run from its weights with --init-from " + lean);
    m_run_ok("train --init-from " + lean + " --data " + m_text_file() + " --steps 2 --eval-every 0 --quiet --out " + m_path("strip_next.safetensors"));
    m_cli_fails("strip --checkpoint " + lean + " --out " + lean, "--out");
    m_write(m_path("strip_foreign.txt"), "notes");
    m_cli_fails("strip --checkpoint " + full + " --out " + m_path("strip_foreign.txt"), "strip_foreign.txt");
    CHECK(m_read(m_path("strip_foreign.txt")) == "notes");
}

TEST_CASE("CLI: train --eval-every 0 never validates; otherwise at every S-th step, the last, and the whole split once") {
    const std::string out = m_path("evalevery.safetensors");
    const std::string args = "train --data " + m_text_file() + " --layers 1 --heads 2 --embd 16 --block 16 --batch 4 --steps 3 --eval-steps 1 --out " + out;
    const m_Run never = m_run_ok(args + " --eval-every 0");
    INFO(never.out);
    CHECK_FALSE(m_contains(never.out, "val loss"));
    CHECK_FALSE(m_contains(never.out, "| val "));
    CHECK(m_contains(never.out, "done: steps 1-3 of 3"));
    const m_Run two = m_run_ok(args + " --eval-every 2");
    INFO(two.out);
    CHECK(m_contains(two.out, "step     2/3 | "));
    CHECK(m_contains(two.out, "done: steps 1-3 of 3 (3 in this run)"));
    CHECK(m_contains(two.out.substr(two.out.find("done: ")), ", val loss "));
    CHECK_FALSE(m_contains(two.out, "(at step"));
    CHECK(m_contains(two.out, "val loss over the whole validation split: "));  // once, at the end
    CHECK(m_contains(two.out, "| val "));
}

TEST_CASE("CLI: a run whose memory estimate exceeds what the machine can give is refused before any work") {
    // require_memory: the estimate against memory_limit() (physical memory, a cgroup's limit,
    // ulimit -v). A batch of 10^9 rows needs terabytes on any machine.
    const MemoryLimit limit = memory_limit();
    CAPTURE(limit.source);
    CHECK(limit.bytes > 0);
    CHECK_NOTHROW(require_memory("train", limit.bytes, "all of it", "--batch", limit));
    CHECK_NOTHROW(require_memory("train", 2 * limit.bytes, "twice", "--batch", limit, false));  // --no-memory-check
    const MemoryLimit four{4.0 * 1024 * 1024 * 1024, "the test's limit"};
    try {
        require_memory("train", 6.0 * 1024 * 1024 * 1024, "activations", "--batch or --block", four);
        FAIL("require_memory accepted 6 GB against a limit of 4 GB");
    } catch (const Error& e) {
        const std::string msg = e.what();
        CHECK(msg == "train: this run needs about 6.00 GB (activations), more than the 4.00 GB it can have (the test's limit); "
                     "make --batch or --block smaller, or give --no-memory-check to start it anyway");
    }
    const std::string out = m_path("memory.safetensors");
    // 262144 x 16 tokens (the most a step takes) through 48 layers of width 1024: about 16 TB.
    const std::string huge = " --batch 262144 --block 16 --layers 48 --embd 1024 --heads 16 --steps 1 --out " + out;
    m_cli_fails("train --data " + m_text_file() + huge, "train: this run needs about");
    m_cli_fails("train --data " + m_text_file() + huge, "make --batch, --block or the model (--layers, --embd, --ffn) smaller, or give --no-memory-check");
    CHECK_FALSE(m_exists(out));
    m_cli_fails("bench --batch 16384 --block 64 --layers 48 --embd 1024 --heads 16", "bench: this run needs about");
    // A resumed run takes --no-memory-check (and is checked like a new one without it).
    m_run_ok("train --data " + m_text_file() + " --layers 1 --heads 2 --embd 16 --block 16 --batch 4 --steps 2 --eval-every 0 --quiet --out " + out);
    m_run_ok("train --resume " + out + " --steps 3 --no-memory-check --quiet");
    // A --stop-at the checkpoint has passed is an error before the plan is printed.
    const m_Run early = m_run("train --resume " + out + " --steps 10 --stop-at 2");
    CHECK(early.status == 1);
    CHECK(early.out.empty());
    CHECK(m_contains(early.err, "error: train: --stop-at 2 is not after the checkpoint's step 3"));
#ifndef TF_TESTS_DEBUG  // AddressSanitizer reserves more address space than any such limit
    // Under ulimit -v 2 GB, a run that needs about 3 GB is refused, naming the limit.
    M_SKIP_ON_WINDOWS("a POSIX shell's ulimit -v (an address-space limit) for the last check");
    const std::string base = m_path("memory-ulimit");
    const int st = std::system(("ulimit -v 2000000 && " + std::string(m_PROGRAM) + " train --data " + m_text_file() +
                                " --batch 4000 --block 64 --steps 1 --out " + out + "2 > " + base + ".out 2> " + base + ".err").c_str());
    INFO("stderr: " << m_read(base + ".err"));
    CHECK(m_system_status(st) == 1);
    CHECK(m_contains(m_read(base + ".err"), "the address-space limit (ulimit -v)"));
#endif
}

TEST_CASE("CLI: init then grad for every tiny variant writes every parameter's gradient and the loss") {
    for (const std::string name : m_TINY) {
        CAPTURE(name);
        const Config c = preset(name);
        const std::string ck = m_path("cli_" + name + ".safetensors");
        const std::string gr = m_path("cli_grad_" + name + ".safetensors");
        const m_Run ri = m_run("init --preset " + name + " --seed 7 --out " + ck);
        INFO(ri.out << ri.err);
        REQUIRE(ri.status == 0);
        CHECK_FALSE(m_exists(ck + ".tmp"));
        std::string args;
        Batch b;
        if (c.variant == Variant::bert) {
            args = "--tokens 10,1,2,11,3,11 --segments 0,0,0,0,1,1 --masked 2,5";
            b.n = 6, b.tokens = {10, 12, 2, 11, 12, 11}, b.segments = {0, 0, 0, 0, 1, 1};
            b.targets = {-1, 1, -1, -1, 3, -1};
        } else if (c.variant == Variant::roberta) {
            args = "--tokens 10,1,2,3,11 --masked 3";
            b.n = 5, b.tokens = {10, 1, 12, 3, 11}, b.targets = {-1, -1, 2, -1, -1};
        } else {
            args = "--tokens 3,1,4,1,5";
            b.n = 5, b.tokens = {3, 1, 4, 1, 5}, b.targets = next_token_targets(b.tokens, 1, 5);
        }
        const m_Run rg = m_run("grad --checkpoint " + ck + " " + args + " --out " + gr);
        INFO(rg.out << rg.err);
        REQUIRE(rg.status == 0);
        CHECK(m_contains(rg.out, "loss "));
        const SafeTensors st = load_safetensors(gr);
        // The same model and batch here give the same loss and gradients.
        LoadedModel lm = load_model(ck);
        Params<float> g = make_params<float>(c);
        const double loss = model_loss(c, lm.params, b, &g);
        REQUIRE(st.metadata.count("loss") == 1);
        CHECK(std::stod(st.metadata.at("loss")) == doctest::Approx(loss).epsilon(1e-6));
        CHECK(st.metadata.at("variant") == variant_name(c.variant));
        for (auto& nt : named_tensors(c, g)) {
            CAPTURE(nt.name);
            const Tensor<float>* t = st.find(nt.name);
            REQUIRE(t != nullptr);
            REQUIRE(t->shape == nt.tensor->shape);
            for (std::size_t k = 0; k < t->size(); k++)
                CHECK(t->data[k] == doctest::Approx(nt.tensor->data[k]).epsilon(1e-4).scale(1e-3));
        }
        CHECK(st.tensors.size() == named_tensors(c, g).size());
    }
}

TEST_CASE("CLI: bad input gives exit status 1 and 'error: ...' on stderr, never a crash") {
    const std::string gpt = m_path("cli_err_gpt.safetensors"), bert = m_path("cli_err_bert.safetensors");
    REQUIRE(m_run("init --preset tiny-gpt2 --out " + gpt).status == 0);
    const std::string text = m_text_file();
    const std::string trained_bert = m_path("cli_trained_bert.safetensors");
    {
        const m_Run r = m_run("train --model bert --data " + text +
                              " --layers 1 --heads 2 --embd 8 --block 8 --batch 2 --steps 2 --eval-steps 1 --quiet --out " +
                              trained_bert);
        INFO(r.out << r.err);
        REQUIRE(r.status == 0);
    }
    REQUIRE(m_run("init --preset tiny-bert --out " + bert).status == 0);
    const std::string truncated = m_path("cli_truncated.safetensors");
    {
        const std::string bytes = m_read(gpt);
        m_write(truncated, bytes.substr(0, bytes.size() - 20));
    }
    const std::string empty = m_path("cli_empty.txt");
    m_write(empty, "");

    m_cli_fails("frobnicate", "unknown command 'frobnicate'");
    m_cli_fails("params --preset gpt1 --bogus 1", "unknown flag --bogus");
    m_cli_fails("params --preset", "--preset needs a value");
    m_cli_fails("params --preset gpt9", "unknown preset 'gpt9'");
    m_cli_fails("params --preset gpt1 --preset gpt1", "twice");
    m_cli_fails("params gpt1", "unexpected argument");
    // grad on the checkpoint ck with each (flags, part) of cases, writing g.safetensors: an error naming part.
    auto grad_fails = [](const std::string& ck, const std::vector<std::pair<std::string, std::string>>& cases) {
        for (const auto& k : cases) m_cli_fails("grad --checkpoint " + ck + " " + k.first + " --out " + m_path("g.safetensors"), k.second);
    };
    grad_fails(gpt, {{"--tokens 1,99", "token id 99"}, {"--tokens 1,-1", "token id -1"}, {"--tokens 1,2,x", "'x' is not an integer"},
                     {"--tokens 1,2,99999999999", "not an integer"}, {"--tokens 1,2,3,4,5,6,7,8,9,1,2,3,4,5,6,7,8", "n_ctx = 16"},
                     {"--tokens 1", "at least 2 tokens"}, {"--tokens 1,2 --masked 1", "--masked"}});
    grad_fails(bert, {{"--tokens 1,2,3", "--masked"}, {"--tokens 1,2,3 --masked 4", "outside 1..3"}, {"--tokens 1,2,13 --masked 3", "13"},
                      {"--tokens 1,2,3 --segments 0,1 --masked 1", "segment"}, {"--tokens 1,2,3 --segments 0,1,2 --masked 1", "segment"}});
    m_cli_fails("grad --checkpoint " + gpt + " --tokens 1,2 --out " + m_path("no/such/dir/g.safetensors"), "no/such/dir");
    m_cli_fails("train --steps abc", "--steps expects an integer, got 'abc'");
    m_cli_fails("train --steps 99999999999999999999", "--steps is out of range (at most 9223372036854775807), got '99999999999999999999'");
    // A seed is any integer 0..2^64-1, for every command that takes one; nothing else.
    for (const std::string& cmd : std::vector<std::string>{"train", "init --preset tiny-gpt --out " + m_path("s.st"),
                                                           "task --task text --out " + m_path("s.txt"), "explain --preset tiny-gpt --tokens 1,2"}) {
        CAPTURE(cmd);
        m_cli_fails(cmd + " --seed -1", "--seed takes an integer 0..18446744073709551615, got '-1'");
        m_cli_fails(cmd + " --seed 18446744073709551616", "--seed takes an integer 0..18446744073709551615");
        m_cli_fails(cmd + " --seed 1.5", "--seed takes an integer");
    }
    CHECK(m_contains(m_run_ok("init --preset tiny-gpt --seed 18446744073709551615 --out " + m_path("seed64.st")).out, "seed 18446744073709551615"));
    m_cli_fails("train --lr fast", "--lr expects a number");
    m_cli_fails("train --lr nan", "--lr expects a number");
    m_cli_fails("sample --prompt abc", "missing flag --checkpoint");
    m_cli_fails("sample --checkpoint " + m_path("nonexistent.safetensors") + " --prompt abc", "nonexistent.safetensors");
    m_cli_fails("sample --checkpoint " + truncated + " --prompt abc", "truncated");
    m_cli_fails("grad --checkpoint " + truncated + " --tokens 1,2 --out " + m_path("g.safetensors"), "truncated");
    m_cli_fails("sample --checkpoint " + gpt + " --prompt abc", "vocabulary");
    m_cli_fails("sample --checkpoint " + trained_bert + " --prompt the", "sample needs a gpt");
    m_cli_fails("sample --checkpoint " + trained_bert + " --prompt the --tokens -1", "--tokens");
    m_cli_fails("sample --checkpoint " + trained_bert + " --prompt the --temperature -1", "--temperature");
    m_cli_fails("fill --checkpoint " + trained_bert + " --text the", "no [MASK]");
    m_cli_fails("fill --checkpoint " + trained_bert + " --text 'th[MASK] ~'", "not in the model's vocabulary");
    m_cli_fails("fill --checkpoint " + gpt + " --text 'a[MASK]'", "fill needs a bert");
    m_cli_fails("eval --checkpoint " + trained_bert + " --data " + empty, "too short");
    m_cli_fails("train --data " + empty + " --steps 2 --quiet --out " + m_path("t.safetensors"), "empty");
    m_cli_fails("train --heads 3 --embd 64 --quiet --out " + m_path("t.safetensors"), "not divisible");
    m_cli_fails("train --dropout 1.5 --quiet --out " + m_path("t.safetensors"), "--dropout");
    m_cli_fails("train --model gpt5 --quiet --out " + m_path("t.safetensors"), "gpt5");
    m_cli_fails("train --resume " + m_path("nonexistent.safetensors") + " --quiet", "nonexistent.safetensors");
    m_cli_fails("bench --batch 0", "must be positive");
    m_cli_fails("bench --preset tiny-gpt --block 17", "n_ctx");
    m_cli_fails("init --preset tiny-gpt", "missing flag --out");
    m_cli_fails("init --preset tiny-gpt --seed 1x --out " + m_path("i.safetensors"), "--seed");
    CHECK_FALSE(m_exists(m_path("t.safetensors")));
    CHECK_FALSE(m_exists(m_path("g.safetensors")));
}

TEST_CASE("CLI: integer flags out of the int range are errors, not silently wrapped") {
    // 4294967297 = 2^32 + 1 would become 1 after a cast to int.
    m_cli_fails("bench --preset tiny-gpt --batch 4294967297 --block 4 --steps 1", "--batch");
    m_cli_fails("bench --preset tiny-gpt --block 4294967300 --steps 1", "--block");
    m_cli_fails("train --layers 4294967298 --embd 8 --heads 2 --steps 1 --eval-steps 1 --batch 2 --quiet --out " +
                    m_path("wrap.safetensors"),
                "--layers");
    CHECK_FALSE(m_exists(m_path("wrap.safetensors")));
}

TEST_CASE("CLI: fill and sample work on trained checkpoints, usage on no arguments") {
    const std::string text = m_text_file();
    const std::string g = m_path("cli_ok_gpt.safetensors"), b = m_path("cli_ok_roberta.safetensors");
    const m_Run tg = m_run("train --model gpt --data " + text +
                           " --layers 1 --heads 2 --embd 8 --block 8 --batch 2 --steps 3 --eval-steps 1 --quiet --out " + g);
    REQUIRE_MESSAGE(tg.status == 0, tg.err);
    const m_Run tb = m_run("train --model roberta --data " + text +
                           " --layers 1 --heads 2 --embd 8 --block 16 --batch 2 --steps 3 --eval-steps 1 --quiet --out " + b);
    REQUIRE_MESSAGE(tb.status == 0, tb.err);
    const m_Run s1 = m_run("sample --checkpoint " + g + " --prompt the --tokens 12 --seed 3");
    const m_Run s2 = m_run("sample --checkpoint " + g + " --prompt the --tokens 12 --seed 3");
    INFO(s1.out << s1.err);
    CHECK(s1.status == 0);
    CHECK(s1.out == s2.out);
    CHECK(s1.out.rfind("the", 0) == 0);
    CHECK(s1.out.size() == 3 + 12 + 1);  // prompt, 12 characters, newline
    // --num-samples: each sample from where the last left the generator, a line of dashes between.
    const m_Run three = m_run_ok("sample --checkpoint " + g + " --prompt the --tokens 12 --seed 3 --num-samples 3");
    CHECK(three.out.rfind(s1.out + "---------------\nthe", 0) == 0);
    CHECK(std::count(three.out.begin(), three.out.end(), '\n') == 5);
    // An empty prompt starts from a newline (the character model's), which is not printed.
    const m_Run free = m_run_ok("sample --checkpoint " + g + " --prompt '' --tokens 12 --seed 3");
    CHECK(free.out.size() == 12 + 1);
    // --stop: the sample ends with the first occurrence of the text in what is generated.
    const m_Run greedy = m_run_ok("sample --checkpoint " + g + " --prompt the --tokens 12 --temperature 0");
    const std::string gen = greedy.out.substr(3, 12);
    const std::string cut = gen.substr(2, 2);  // a text that the greedy continuation holds
    const m_Run stopped = m_run_ok("sample --checkpoint " + g + " --prompt the --tokens 12 --temperature 0 --stop '" + cut + "'");
    CHECK(stopped.out == "the" + gen.substr(0, gen.find(cut) + cut.size()) + "\n");
    m_cli_fails("sample --checkpoint " + g + " --prompt the --top-p 0", "--top-p must be in (0, 1]");
    m_cli_fails("sample --checkpoint " + g + " --prompt the --top-p 1.5", "--top-p must be in (0, 1]");
    m_cli_fails("sample --checkpoint " + g + " --prompt the --temperature 0 --top-p 0.9", "--top-p does not apply with --temperature 0");
    m_cli_fails("sample --checkpoint " + g + " --prompt the --num-samples 0", "--num-samples must be positive");
    m_cli_fails("sample --checkpoint " + g + " --prompt the --stop ''", "--stop is empty");
    const m_Run f = m_run("fill --checkpoint " + b + " --text 'th[MASK] quick'");
    INFO(f.out << f.err);
    CHECK(f.status == 0);
    CHECK(f.out.size() == std::string("the quick\n").size());
    CHECK(f.out.rfind("th", 0) == 0);
    CHECK_FALSE(m_contains(f.out, "[MASK]"));
    const m_Run e = m_run("eval --checkpoint " + g + " --data " + text);
    CHECK(e.status == 0);
    CHECK(m_contains(e.out, "mean loss"));
    const m_Run none = m_run("");
    CHECK(none.status == 1);
    CHECK(m_contains(none.err, "usage"));
    const m_Run help = m_run("help");
    CHECK(help.status == 0);
    CHECK(m_contains(help.out, "usage"));
    const m_Run bench = m_run("bench --preset tiny-bert --batch 2 --block 8 --steps 1 --json");
    INFO(bench.out << bench.err);
    CHECK(bench.status == 0);
    CHECK(bench.out.rfind("{\"preset\": \"tiny-bert\"", 0) == 0);
}

// ================================================================================================
// Help, flag checks, 1-based positions, signals, clean-up
// ================================================================================================
// The flags a command's code reads: every f.str/f.need/f.integer/... call in its function in
// main.cpp (and in the helpers that read its flags), found by reading the source.
std::set<std::string> m_flags_read(const std::string& source, const std::string& function) {
    std::set<std::string> flags;
    const std::size_t at = source.find("\n" + function);
    if (at == std::string::npos) return flags;
    const std::size_t end = source.find("\n}\n", at);
    const std::string body = source.substr(at, end - at);
    for (const char* call : {"f.str(\"", "f.need(\"", "f.integer(\"", "f.int32(\"", "f.number(\"", "f.flag(\"", "f.list(\"", "f.has(\"",
                             "f.count(\"", "f.count32(\""})
        for (std::size_t i = body.find(call); i != std::string::npos; i = body.find(call, i + 1)) {
            const std::size_t from = i + std::strlen(call);
            flags.insert(body.substr(from, body.find('"', from) - from));
        }
    return flags;
}

TEST_CASE("CLI help: every command's --help exits 0, names the command, has an example and lists every flag its code reads") {
    const std::string source = m_read("main.cpp");
    REQUIRE_FALSE(source.empty());
    for (const std::string& cmd : m_COMMANDS) {
        CAPTURE(cmd);
        const m_Run r = m_run(cmd + " --help");
        CHECK(r.exited);
        CHECK(r.status == 0);
        CHECK(m_contains(r.out, "usage: " + std::string(m_PROGRAM) + " " + cmd));  // the program as it was run
        CHECK(m_contains(r.out, "example:\n  " + std::string(m_PROGRAM) + " " + cmd + " "));
        CHECK(m_run("help " + cmd).out == r.out);
        std::set<std::string> flags = m_flags_read(source, "static int cmd_" + cmd + "(Flags& f)");
        if (cmd == "bench") {
            const std::set<std::string> more = m_flags_read(source, "static Config bench_config(Flags& f");
            flags.insert(more.begin(), more.end());
        }
        CHECK(flags.size() >= 2);
        for (const std::string& flag : flags) {
            CAPTURE(flag);
            CHECK(m_contains(r.out, "  --" + flag + " "));
        }
        // Every flag line gives a default, says it is required, or is one of a choice of inputs.
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);)
            if (line.rfind("  --", 0) == 0) {
                CAPTURE(line);
                CHECK((m_contains(line, "default") || m_contains(line, "required") || m_contains(line, "(or --") ||
                       m_contains(line, "FILE") || m_contains(line, "IDS") || m_contains(line, "z ") || m_contains(line, "bert") ||
                       m_contains(line, "may be repeated")));
            }
    }
    // An unknown flag lists the command's flags.
    m_cli_fails("init --preset tiny-gpt --out x.st --bogus 1", "unknown flag --bogus for init (its flags: --preset, --seed, --out, --emb-ln, --mlm-head)");
}

TEST_CASE("CLI help: transformer --help is a grouped overview of every command on one screen") {
    const m_Run r = m_run_ok("--help");
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') <= 40);
    for (const char* group : {"\ntrain:\n", "\nuse:\n", "\ninspect:\n", "\nfiles:\n"}) CHECK(m_contains(r.out, group));
    for (const std::string& cmd : m_COMMANDS) CHECK(m_contains(r.out, "\n  " + cmd + " "));
    const std::size_t use = r.out.find("\nuse:"), inspect = r.out.find("\ninspect:");
    CHECK(r.out.find("  predict ") > use);
    CHECK(r.out.find("  predict ") < inspect);
    const m_Run none = m_run("");
    CHECK(none.status == 1);
    CHECK(none.err == r.out);
}

TEST_CASE("flags: a flag's value that is itself a flag is an error, for every command; --name=--value gives such a value") {
    const std::string out = m_path("flagval");
    m_make_dir(out);
    m_cli_fails("masks --n 6 --out --window 3", "flag --out needs a value, but the next word is the flag '--window'");
    CHECK_FALSE(m_exists("--window"));
    m_cli_fails("task --task classify --out --examples 10", "flag --out needs a value");
    CHECK_FALSE(m_exists("--examples"));
    m_cli_fails("train --data --steps 5", "flag --data needs a value");
    m_cli_fails("sample --checkpoint --prompt hi", "flag --checkpoint needs a value");
    m_cli_fails("init --preset --out " + out + "/x.safetensors", "flag --preset needs a value");
    CHECK_FALSE(m_exists(out + "/x.safetensors"));
    m_cli_fails("export --checkpoint x --out --quiet", "flag --out needs a value");
    // Negative numbers are values; --name=VALUE passes a value that starts with --.
    m_cli_fails("masks --n -3 --out " + out + "/m.svg", "--n");
    const m_Run r = m_run("task --task text --examples 2 --out=" + out + "/--odd.txt");
    CHECK(r.status == 0);
    CHECK(m_exists(out + "/--odd.txt"));
}

TEST_CASE("CLI: a size or count given as 0 or less is an error naming the flag and the value") {
    const std::string out = " --out " + m_path("zero.st");
    // command --flag value rest must fail naming the flag and the value.
    auto must_be_positive = [](const std::string& command, const std::string& flag, const std::string& value, const std::string& rest) {
        m_cli_fails(command + " --" + flag + " " + value + rest, "--" + flag + " must be positive, got " + value);
    };
    for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
             {"block", "0"}, {"ffn", "0"}, {"layers", "-2"}, {"heads", "0"}, {"embd", "0"}, {"batch", "0"}, {"steps", "0"},
             {"eval-steps", "0"}, {"log-every", "0"}, {"accum", "0"}})
        must_be_positive("train", flag, value, out);
    m_cli_fails("train --warmup -1" + out, "--warmup must be 0 or more, got -1");
    must_be_positive("finetune --checkpoint a --task classify --train a --val b", "batch", "0", out);
    must_be_positive("task --task text", "examples", "0", out);
    must_be_positive("sample --checkpoint x.st --prompt a", "tokens", "0", "");
    m_cli_fails("sample --checkpoint x.st --prompt a --top-k -1", "--top-k must be 0 (all tokens) or more, got -1");
    must_be_positive("fill --checkpoint x.st --text a", "top", "0", "");
    m_cli_fails("masks --n 0 --out " + m_path("m.svg"), "--n must be between 1 and 64, got 0");
    must_be_positive("masks --n 4", "window", "0", " --out " + m_path("m.svg"));
    for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{{"layers", "0"}, {"heads", "-1"}, {"steps", "0"}})
        must_be_positive("bench --preset tiny-gpt", flag, value, "");
    CHECK_FALSE(m_exists(m_path("zero.st")));
}

TEST_CASE("CLI: warnings for --warmup beyond --steps and --val the same file as --data; a finished run says nothing to do") {
    const std::string dir = m_path("warn");
    m_make_dir(dir);
    const m_Run w = m_run_ok("train --steps 2 --warmup 10 --quiet --out " + dir + "/w.st");
    CHECK(m_contains(w.err, "warning: --warmup 10 is longer than --steps 2"));
    CHECK(m_contains(w.err, "never reaching it"));
    const std::string text = m_text_file();
    const m_Run v = m_run_ok("train --data " + text + " --val " + text + " --layers 1 --heads 2 --embd 8 --block 8 --steps 2 --quiet --out " +
                             dir + "/v.st");
    CHECK(m_contains(v.err, "warning: --val '" + text + "' is the same file as --data"));
    const m_Run quiet = m_run_ok("train --steps 2 --warmup 1 --quiet --out " + dir + "/q.st");
    CHECK_FALSE(m_contains(quiet.err, "warning"));
    const m_Run done = m_run_ok("train --resume " + dir + "/w.st --steps 2 --out " + dir + "/w2.st");
    CHECK(m_contains(done.err, "warning: '" + dir + "/w.st' is already at step 2 and --steps is 2: nothing to train, no file written"));
    CHECK_FALSE(m_exists(dir + "/w2.st"));
    // finetune: --val the same file as --train.
    const std::string task = dir + "/cls.tsv";
    m_run_ok("task --task classify --examples 40 --out " + task);
    const m_Run ft = m_run_ok("finetune --checkpoint " + dir + "/w.st --task classify --train " + task + " --val " + task +
                              " --steps 1 --batch 4 --quiet --out " + dir + "/ft.st");
    CHECK(m_contains(ft.err, "warning: --val '" + task + "' is the same file as --train"));
    // The default warm-up (100 steps) is longer than a short run too.
    const m_Run d = m_run_ok("train --steps 3 --quiet --out " + dir + "/d.st");
    CHECK(m_contains(d.err, "warning: --warmup 100 is longer than --steps 3"));
    // train --encoder on a binary text names the file and the byte, as tokenize does; a text of control bytes says where the first is.
    std::string bin = "hello world, a text of a few words. ";
    for (int k = 0; k < 6; k++) bin += bin;
    bin.insert(1000, "\xff\xfe");
    const std::string binf = m_path("binary.txt");
    m_write(binf, bin);
    m_write(dir + "/enc.json", m_encoder_json({"he", "ll"}));
    m_write(dir + "/merges.bpe", m_vocab_bpe({"h e", "l l"}));
    const std::string gpt2 = " --encoder " + dir + "/enc.json --vocab " + dir + "/merges.bpe";
    m_cli_fails("train --data " + binf + gpt2 + " --steps 1 --out " + dir + "/b.st",
                "'" + binf + "' is not UTF-8 text: byte 0xFF at byte offset 1000 (line 1, byte 1001 of the line); is it a binary file?");
    std::string ctl(4000, 'a');
    for (int k = 0; k < 200; k++) ctl[10 + 7 * k] = '\x01';
    m_write(binf, ctl);
    m_cli_fails("train --data " + binf + " --steps 1 --out " + dir + "/b.st",
                "'" + binf + "' looks binary, not text: 200 control bytes, the first 0x01 at byte offset 10");
}

TEST_CASE("CLI: messages give the values: --head and --layer print A and L, unknown commands and tasks list the valid ones") {
    const std::string ck = m_path("msg_values.st");
    m_run_ok("init --preset tiny-gpt --out " + ck);
    const Config c = preset("tiny-gpt");
    const std::string out = " --out " + m_path("msg.svg");
    m_cli_fails("attention --checkpoint " + ck + " --tokens 1,2 --head 0" + out, "--head 0 is outside 1..A = " + std::to_string(c.A));
    m_cli_fails("attention --checkpoint " + ck + " --tokens 1,2 --layer 0" + out, "--layer 0 is outside 1..L = " + std::to_string(c.L));
    m_cli_fails("trian", "the commands: train, finetune, bpe, sample");
    m_cli_fails("task --task sums --out " + m_path("t.txt"), "the tasks: text, classify, entailment, similarity, choice");
    m_write(m_path("bin_enc.json"), m_encoder_json({"he"}));
    m_write(m_path("bin_merges.bpe"), m_vocab_bpe({"h e"}));
    m_write(m_path("binary.dat"), std::string("he\nh\xff\x01", 6));
    m_cli_fails("tokenize --encoder " + m_path("bin_enc.json") + " --vocab " + m_path("bin_merges.bpe") + " --file " + m_path("binary.dat"),
                "'" + m_path("binary.dat") + "' is not UTF-8 text: byte 0xFF at byte offset 4 (line 2");
}

TEST_CASE("CLI: positions count from 1 in --masked, fill's output and their errors") {
    const std::string ck = m_path("pos_bert.st");
    m_run_ok("init --preset tiny-bert --out " + ck);
    m_cli_fails("grad --checkpoint " + ck + " --tokens 1,2,3 --masked 0 --out " + m_path("g.st"), "--masked position 0 is outside 1..3");
    m_cli_fails("explain --preset tiny-bert --tokens 1,2,3 --masked 4", "--masked position 4 is outside 1..3");
    // --masked 1 is the first token: the same loss as a batch with target position 0.
    const m_Run r = m_run_ok("explain --preset tiny-bert --tokens 10,1,2,11 --masked 1");
    const Config c = preset("tiny-bert");
    Params<float> p = make_params<float>(c);
    init_params(c, p, 1);
    Batch b;
    b.n = 4, b.tokens = {c.mask_id, 1, 2, 11}, b.targets = {10, -1, -1, -1};
    const std::size_t at = r.out.rfind("\nloss ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(r.out.substr(at + 6)) == doctest::Approx(model_loss(c, p, b)).epsilon(1e-7));
    for (const std::string cmd : {"explain", "grad", "fill", "attention", "masks"}) CHECK(m_contains(m_run(cmd + " --help").out, "from 1"));
}

TEST_CASE("CLI: the pictures' --out must end in .svg, naming the flag") {
    m_cli_fails("masks --n 4 --out " + m_path("masks.png"), "--out '" + m_path("masks.png") + "': the picture is SVG");
    m_run_ok("init --preset tiny-gpt --out " + m_path("svg_out.st"));
    m_cli_fails("attention --checkpoint " + m_path("svg_out.st") + " --tokens 1,2 --out " + m_path("a.png"), "--out '" + m_path("a.png") + "'");
    CHECK_FALSE(m_exists(m_path("masks.png")));
    m_run_ok("masks --n 4 --out " + m_path("masks.SVG"));
}

// A fine-tuning set-up in the new directory dir: a text task of 200 examples (pre.txt), a
// one-layer model trained on it for 2 steps (pre.st), the task's training file of train_examples
// (tr.tsv) and validation file of 20 (va.tsv, seed 2); ft.st, where the fine-tuned model goes.
struct m_FinetuneFiles {
    std::string pre, text, tr, va, ft;
};
m_FinetuneFiles m_finetune_files(const std::string& dir, const std::string& task, int train_examples) {
    m_make_dir(dir);
    const m_FinetuneFiles f{dir + "/pre.st", dir + "/pre.txt", dir + "/tr.tsv", dir + "/va.tsv", dir + "/ft.st"};
    m_run_ok("task --task text --examples 200 --out " + f.text);
    m_run_ok("task --task " + task + " --examples " + std::to_string(train_examples) + " --out " + f.tr);
    m_run_ok("task --task " + task + " --examples 20 --seed 2 --out " + f.va);
    m_run_ok("train --data " + f.text + " --layers 1 --heads 2 --embd 8 --block 24 --batch 4 --steps 2 --eval-steps 1 --quiet --out " + f.pre);
    return f;
}

TEST_CASE("CLI: predict checks every line's fields against the model's task, naming line and counts; stray bytes are escaped") {
    const std::string dir = m_path("pred");
    const m_FinetuneFiles f = m_finetune_files(dir, "entailment", 100);
    const std::string pre = f.pre, tr = f.tr, va = f.va, ft = f.ft;
    m_run_ok("finetune --checkpoint " + pre + " --task entailment --train " + tr + " --val " + va + " --steps 2 --batch 4 --quiet --out " + ft);
    // The labels of the built-in entailment task: the first field of each line of its file.
    const std::string first = m_read(tr).substr(0, m_read(tr).find('\t'));
    m_write(dir + "/two.tsv", first + "\t123+456\n" + first + "\t1+2\n");
    m_cli_fails("predict --checkpoint " + ft + " --data " + dir + "/two.tsv", "every first field is one of the model's labels");
    m_write(dir + "/four.tsv", "1+2\t3\n1+2\t3\t4\t5\n");
    m_cli_fails("predict --checkpoint " + ft + " --data " + dir + "/four.tsv", "line 2: found 4 tab-separated fields; the entailment task needs 3 with a label or 2 without");
    m_write(dir + "/bytes.tsv", "x\xff\t1+2\t3\n");
    const m_Run r = m_run("predict --checkpoint " + ft + " --data " + dir + "/bytes.tsv");
    CHECK(r.status == 1);
    CHECK(m_contains(r.err, "x\\xFF"));
    CHECK_FALSE(m_contains(r.err, "\xff"));
    m_write(dir + "/ok.tsv", "123+456\t579\n");
    CHECK(m_run_ok("predict --checkpoint " + ft + " --data " + dir + "/ok.tsv").out.size() > 1);
}

TEST_CASE("CLI: bench names a changed preset custom; export prints n_inner as written and the shortest epsilon") {
    const m_Run b = m_run_ok("bench --preset tiny-gpt --layers 1 --steps 1 --batch 1 --block 4");
    CHECK(m_contains(b.out, "bench custom (tiny-gpt with --layers 1): L=1"));
    const m_Run plain = m_run_ok("bench --preset tiny-gpt --steps 1 --batch 1 --block 4");
    CHECK(m_contains(plain.out, "bench tiny-gpt,"));
    const std::string ck = m_path("exp.st"), dir = m_path("exp_hf");
    m_run_ok("train --steps 1 --quiet --out " + ck);
    const m_Run e = m_run_ok("export --checkpoint " + ck + " --out " + dir);
    const std::string config = m_read(dir + "/config.json");
    CHECK(m_contains(config, "\"layer_norm_epsilon\": 1e-05,"));
    CHECK(m_contains(config, "\"n_inner\": null"));
    CHECK(m_contains(e.out, "n_inner null (4 n_embd = "));
}

TEST_CASE("CLI: tokenize's progress ends with the final count; --line-windows says what the whole-split loss is") {
    m_write(m_path("prog_enc.json"), m_encoder_json({"he"}));
    m_write(m_path("prog_merges.bpe"), m_vocab_bpe({"h e"}));
    std::string big;
    while (big.size() < (1u << 20) + 100) big += "he he heh\n";
    m_write(m_path("big.txt"), big);
    const m_Run r = m_run_ok("tokenize --encoder " + m_path("prog_enc.json") + " --vocab " + m_path("prog_merges.bpe") + " --file " +
                             m_path("big.txt") + " --out " + m_path("big.bin"));
    const std::vector<int> ids = make_bpe(m_encoder_json({"he"}), m_vocab_bpe({"h e"})).encode(big);
    INFO("stderr: " << r.err);
    // The count of the whole text once, at the end; the lines before name the share of the bytes
    // read and never say 100%; the tokenizer is named for what it is (a learnt BPE of 257 tokens).
    const std::string what = "encoding '" + m_path("big.txt") + "' (a byte-level BPE of 257 tokens): ";
    CHECK(m_contains(r.err, what + "done, " + std::to_string(ids.size()) + " tokens in "));
    CHECK(m_contains(r.err, what + " 10% of the bytes, "));
    CHECK_FALSE(m_contains(r.err, "100%"));
    CHECK_FALSE(m_contains(r.err, "GPT-2's BPE"));
    const std::string dir = m_path("lw");
    m_make_dir(dir);
    std::string lines;
    for (int k = 0; k < 60; k++) lines += "the fox " + std::to_string(k % 7) + "\n";
    m_write(dir + "/lines.txt", lines);
    const m_Run t = m_run_ok("train --data " + dir + "/lines.txt --line-windows --block 8 --layers 1 --embd 8 --heads 2 --steps 2 "
                             "--eval-steps 1 --out " + dir + "/m.st");
    CHECK(m_contains(t.out, "not starting at newlines as --line-windows' training and estimate windows do"));
}

// Waits until the run started by m_start prints its first progress line (the loop runs); false,
// with its stderr shown, if it ends first or prints none within 30 s.
bool m_wait_for_progress(m_Child& run, const std::string& base) {
    for (int k = 0; k < 600; k++) {
        if (m_contains(m_read(base + ".out"), " | loss ")) return true;
        m_Exit ended;
        if (m_wait(run, ended, false)) {
            MESSAGE("the run ended (exit status " << ended.status << ", signal " << ended.signal << ") before a progress line; stderr: " << m_read(base + ".err"));
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    m_kill(run);
    MESSAGE("the run printed no progress line in 30 s; stderr: " << m_read(base + ".err"));
    return false;
}

// Starts the run args in the background (its output in base.out and base.err), sends it sig after
// its first progress line and requires it to exit with 128 + sig; its stderr.
std::string m_interrupt(const std::string& args, const std::string& base, int sig) {
    m_Child run = m_start(args, base);
    REQUIRE(m_wait_for_progress(run, base));
    m_send_signal(run, sig);
    m_Exit e;
    REQUIRE(m_wait(run, e));
    const std::string err = m_read(base + ".err");
    INFO("stderr: " << err);
    REQUIRE(e.exited);
    CHECK(e.status == 128 + sig);
    return err;
}

TEST_CASE("train: SIGINT or SIGTERM finishes the step, writes a checkpoint, says how to resume and exits 130 or 143") {
    M_SKIP_ON_WINDOWS("POSIX signals (SIGINT, SIGTERM) sent to a running program");
    const std::string dir = m_path("sig");
    m_make_dir(dir);
    for (const int sig : {SIGINT, SIGTERM}) {
        CAPTURE(sig);
        const std::string ck = dir + "/run" + std::to_string(sig) + ".st", base = dir + "/log" + std::to_string(sig);
        const std::string err = m_interrupt("train --steps 1000000 --log-every 1 --eval-every 3 --eval-steps 1 --out " + ck, base, sig);
        INFO("stderr: " << err);
        CHECK(m_contains(err, "stopped at step "));
        CHECK(m_contains(err, "; checkpoint " + ck + "; resume with: " + m_PROGRAM + " train --resume " + ck));
        const long long step = std::atoll(err.substr(err.find("stopped at step ") + 16).c_str());
        CHECK(step >= 1);
        // The done line's validation loss is the last evaluation's, at a multiple of 3, and says
        // which step it was when that is not the last.
        const std::string out = m_read(base + ".out");
        const std::string done = out.substr(out.find("done: "));
        INFO("done line: " << done);
        CHECK(m_contains(done, "val loss") == (step >= 3));
        if (step >= 3) CHECK(m_contains(done, "(at step " + std::to_string(step / 3 * 3) + ")") == (step % 3 != 0));
        const LoadedModel lm = load_model(ck, {"adam."});
        CHECK(lm.file.metadata.at("train.step") == std::to_string(step));
        CHECK(m_names_in(dir, ".run").empty());  // no temporary left
        const m_Run r = m_run_ok("train --resume " + ck + " --steps " + std::to_string(step + 2));
        CHECK(m_contains(r.out, "done: steps " + std::to_string(step + 1) + "-" + std::to_string(step + 2) + " of " +
                                    std::to_string(step + 2) + " (2 in this run)"));
    }
}

TEST_CASE("finetune: SIGINT stops after the step; the command it prints goes on from the checkpoint with the same flags") {
    M_SKIP_ON_WINDOWS("POSIX signals (SIGINT, SIGTERM) sent to a running program");
    const std::string dir = m_path("ftsig");
    m_make_dir(dir);
    const std::string pre = dir + "/pre.st", tr = dir + "/tr.tsv", va = dir + "/va.tsv";
    m_run_ok("task --task text --examples 300 --out " + dir + "/sums.txt");
    m_run_ok("train --data " + dir + "/sums.txt --layers 1 --heads 2 --embd 16 --block 32 --batch 4 --steps 3 --eval-every 0 --quiet --out " + pre);
    m_run_ok("task --task classify --examples 200 --seed 1 --out " + tr);
    m_run_ok("task --task classify --examples 50 --seed 2 --held-out --out " + va);
    const std::string ck = dir + "/ft.st";
    const std::string err = m_interrupt("finetune --checkpoint " + pre + " --task classify --train " + tr + " --val " + va +
                                            " --steps 1000000 --log-every 1 --lr 1e-3 --batch 4 --scratch --out " + ck,
                                        dir + "/log1", SIGINT);
    INFO("stderr: " << err);
    const std::string with = "(a new schedule of the same flags) with: " + std::string(m_PROGRAM) + " ";
    REQUIRE(m_contains(err, with));
    std::string again = err.substr(err.find(with) + with.size());
    again = again.substr(0, again.find('\n'));
    CAPTURE(again);
    CHECK(again.rfind("finetune --checkpoint " + ck + " --out " + dir + "/ft-2.st ", 0) == 0);
    for (const std::string& kept : std::vector<std::string>{" --lr 1e-3", " --batch 4", " --task classify", " --train " + tr, " --val " + va, " --steps 1000000"})
        CHECK_MESSAGE(m_contains(again, kept), "the command lacks '" << kept << "'");
    CHECK_FALSE(m_contains(again, "--scratch"));  // it goes on from the fine-tuned weights
    // Run as printed: it starts from ft.st, and stopped in turn names the next file of the series.
    const std::string err2 = m_interrupt(again, dir + "/log2", SIGINT);
    INFO("stderr of the printed command: " << err2);
    CHECK(m_contains(err2, "; checkpoint " + dir + "/ft-2.st; "));
    CHECK(m_contains(err2, "with: " + std::string(m_PROGRAM) + " finetune --checkpoint " + dir + "/ft-2.st --out " + dir + "/ft-3.st "));
    CHECK(m_read(dir + "/log2.out").find("error") == std::string::npos);
}

TEST_CASE("finetune: SIGTERM finishes the step, writes the checkpoint, says how to go on and exits 143") {
    M_SKIP_ON_WINDOWS("POSIX signals (SIGINT, SIGTERM) sent to a running program");
    const std::string dir = m_path("sigft");
    const m_FinetuneFiles f = m_finetune_files(dir, "classify", 200);
    const std::string ft = f.ft;
    const std::string err = m_interrupt("finetune --checkpoint " + f.pre + " --task classify --train " + f.tr + " --val " + f.va +
                                            " --steps 1000000 --batch 4 --log-every 1 --out " + ft,
                                        dir + "/log", SIGTERM);  // exits 143
    INFO("stderr: " << err);
    CHECK(m_contains(err, "stopped at step "));
    CHECK(m_contains(err, "by SIGTERM; checkpoint " + ft + "; fine-tune further from its weights (a new schedule of the same flags) with: " +
                          m_PROGRAM + " finetune --checkpoint " + ft + " --out " + dir + "/ft-2.st "));
    CHECK(load_model(ft, {"adam."}).file.metadata.count("finetune.task") == 1);
}
TEST_SUITE_END();

// ================================================================================================
// The project itself: the sources' shape, the README's quoted output, the other builds' bytes, the
// tools, the build times, the scratch directory
// ================================================================================================
TEST_SUITE_BEGIN("the project");

TEST_CASE("banners: transformer.hpp, transformer.cpp and tests.cpp list the same banners, and the first two follow them") {
    // The list at the top of each file, from "PART I. THE MATHEMATICS" to "GENERATED TABLES", is the
    // same text; in transformer.hpp and transformer.cpp every title of it heads a section (a line
    // "// TITLE..." right after a "// ====" or "// ----" line, or the PART banners), in its order.
    auto index_of = [](const std::string& text) {
        const std::size_t a = text.find("//   PART I. THE MATHEMATICS\n");
        const std::size_t b = text.find("GENERATED TABLES", a);
        return a == std::string::npos || b == std::string::npos ? std::string() : text.substr(a, text.find('\n', b) - a);
    };
    const std::string cpp = m_read("transformer.cpp"), hpp = m_read("transformer.hpp"), tests = m_read("tests.cpp");
    const std::string list = index_of(cpp);
    REQUIRE_MESSAGE(!list.empty(), "transformer.cpp should list its banners from PART I. THE MATHEMATICS to GENERATED TABLES");
    CHECK_MESSAGE(index_of(hpp) == list, "transformer.hpp's banner list should be transformer.cpp's:\n" << list);
    CHECK_MESSAGE(index_of(tests) == list, "tests.cpp's banner list should be transformer.cpp's:\n" << list);
    std::vector<std::string> titles;  // the first column of the list, "PART I. ..." and "PART II. ..." included
    {
        std::istringstream in(list);
        for (std::string line; std::getline(in, line);) {
            const std::string t = line.substr(std::min(line.size(), line.find_first_not_of("/ ")));
            const std::size_t gap = t.find("  ");
            titles.push_back(t.substr(0, gap));
        }
    }
    CHECK(titles.size() >= 15);
    for (const std::pair<const char*, const std::string*>& file : {std::make_pair("transformer.cpp", &cpp), std::make_pair("transformer.hpp", &hpp)}) {
        std::vector<std::string> heads;  // the title line of every banner, in order
        std::istringstream in(*file.second);
        std::string prev;
        for (std::string line; std::getline(in, line); prev = line) {
            const bool after_rule = prev.rfind("// ====", 0) == 0 || prev.rfind("// ----", 0) == 0 || prev.rfind("// ####", 0) == 0;
            if (after_rule && line.rfind("// ", 0) == 0 && line.rfind("// ====", 0) != 0 && line.rfind("// ----", 0) != 0)
                heads.push_back(line.substr(3));
        }
        std::size_t at = 0;
        for (const std::string& title : titles) {
            while (at < heads.size() && heads[at].rfind(title, 0) != 0) at++;
            INFO(std::string(file.first) << ": the banner \"" << title << "\" of the list should head a section, after the ones before it in the list");
            CHECK(at < heads.size());
            if (at == heads.size()) break;
        }
    }
}

// ---- reading: the code's shape, read as text ----------------------------------------------------
// The source with every comment, string literal, character literal and preprocessor line blanked
// (newlines kept, so offsets and line numbers stay the source's): what the scans below read.
static std::string m_code_only(const std::string& s) {
    std::string o = s;
    std::size_t i = 0;
    auto blank = [&](std::size_t from, std::size_t to) {
        for (std::size_t a = from; a < to && a < o.size(); a++)
            if (o[a] != '\n') o[a] = ' ';
    };
    bool line_start = true;
    while (i < s.size()) {
        const char ch = s[i];
        if (line_start && ch == '#') {  // a preprocessor line, with its continuations
            std::size_t e = i;
            while (e < s.size() && !(s[e] == '\n' && s[e - 1] != '\\')) e++;
            blank(i, e);
            i = e;
            continue;
        }
        if (ch == '\n') line_start = true;
        else if (ch != ' ' && ch != '\t') line_start = false;
        if (ch == '/' && i + 1 < s.size() && s[i + 1] == '/') {
            const std::size_t e = s.find('\n', i);
            blank(i, e == std::string::npos ? s.size() : e);
            i = e == std::string::npos ? s.size() : e;
        } else if (ch == '/' && i + 1 < s.size() && s[i + 1] == '*') {
            const std::size_t e = s.find("*/", i + 2);
            const std::size_t end = e == std::string::npos ? s.size() : e + 2;
            blank(i, end);
            i = end;
        } else if (ch == 'R' && i + 1 < s.size() && s[i + 1] == '"' && (i == 0 || !(std::isalnum((unsigned char)s[i - 1]) || s[i - 1] == '_'))) {
            const std::size_t open = s.find('(', i + 2);  // R"delim( ... )delim"
            const std::string close = ")" + s.substr(i + 2, open - i - 2) + "\"";
            const std::size_t e = s.find(close, open);
            const std::size_t end = e == std::string::npos ? s.size() : e + close.size();
            blank(i + 2, end - 1);
            i = end;
        } else if (ch == '"' || (ch == '\'' && !(i > 0 && std::isxdigit((unsigned char)s[i - 1]) && i + 1 < s.size() && std::isxdigit((unsigned char)s[i + 1])))) {
            std::size_t e = i + 1;  // a literal; a ' between two digits is a digit separator
            while (e < s.size() && s[e] != ch && s[e] != '\n') e += s[e] == '\\' ? 2 : 1;
            blank(i + 1, e);
            i = e + 1;
        } else {
            i++;
        }
    }
    return o;
}

// The line of an offset in a text, from the offsets of its newlines.
struct MLineIndex {
    std::vector<std::size_t> newlines;
    explicit MLineIndex(const std::string& s) {
        for (std::size_t i = 0; i < s.size(); i++)
            if (s[i] == '\n') newlines.push_back(i);
    }
    int line_at(std::size_t at) const { return 1 + (int)(std::lower_bound(newlines.begin(), newlines.end(), at) - newlines.begin()); }
};

struct MFunctionLength {
    std::string name;
    int line = 0, lines = 0;  // the line of its name, and the lines from there to its closing brace
};

// The functions defined in a source: each { at namespace or class level whose head (the text since the
// last ;, { or } there) has a parameter list and is not an initializer (= {...}). Lambdas and the
// blocks inside a function count as the function's lines; doctest's TEST_CASE and SUBCASE bodies are
// not functions here.
static std::vector<MFunctionLength> m_function_lengths(const std::string& source) {
    const std::string s = m_code_only(source);
    const MLineIndex lines(s);
    std::vector<MFunctionLength> found;
    std::vector<char> scopes;  // per open brace: 'n' a namespace, class or extern block, 'f' a function, 'h' a
                               // default argument in a head, 'o' anything else
    std::size_t head = 0;  // where the current head at namespace level starts
    auto open_level = [&] { return std::all_of(scopes.begin(), scopes.end(), [](char k) { return k == 'n'; }); };
    for (std::size_t i = 0; i < s.size(); i++) {
        const char ch = s[i];
        if (ch == ';' && open_level()) head = i + 1;
        if (ch == '{') {
            char kind = 'o';
            if (open_level()) {
                const std::string h = s.substr(head, i - head);
                int depth = 0;
                bool eq = false, paren = false;
                std::size_t name_end = std::string::npos;
                for (std::size_t a = 0; a < h.size(); a++) {
                    if (h[a] == '(' && depth++ == 0 && !paren) {
                        std::size_t e = a;
                        while (e > 0 && std::isspace((unsigned char)h[e - 1])) e--;
                        std::size_t b = e;
                        while (b > 0 && (std::isalnum((unsigned char)h[b - 1]) || h[b - 1] == '_' || h[b - 1] == ':' || h[b - 1] == '~')) b--;
                        const std::string word = h.substr(b, e - b);
                        if (!word.empty() && word != "decltype" && word != "alignas" && word != "__attribute__") paren = true, name_end = e;
                    } else if (h[a] == ')') {
                        depth--;
                    } else if (h[a] == '=' && depth == 0 && h.find("operator") == std::string::npos) {
                        eq = true;
                    }
                }
                static const std::regex type_head(R"(^\s*(template\s*<[^{]*>\s*)?(struct|class|union|namespace|enum|extern)\b)");
                if (depth > 0) {  // a default argument's {}, inside the parameter list: part of the head
                    kind = 'h';
                } else if (std::regex_search(h, type_head) || h.find_first_not_of(" \t\n") == std::string::npos) {
                    kind = 'n';
                } else if (paren && !eq) {
                    std::size_t b = name_end;
                    while (b > 0 && (std::isalnum((unsigned char)h[b - 1]) || h[b - 1] == '_' || h[b - 1] == ':' || h[b - 1] == '~')) b--;
                    const std::string name = h.substr(b, name_end - b);
                    if (name != "TEST_CASE" && name != "SUBCASE" && name != "TEST_CASE_TEMPLATE") {
                        kind = 'f';
                        found.push_back({name, lines.line_at(head + b), 0});
                    }
                }
            }
            scopes.push_back(kind);
            if (kind == 'n') head = i + 1;
        } else if (ch == '}' && !scopes.empty()) {
            const char kind = scopes.back();
            scopes.pop_back();
            if (kind == 'f') found.back().lines = lines.line_at(i) - found.back().line + 1;
            if (open_level() && kind != 'h') head = i + 1;
        }
    }
    return found;
}

// Part I's statements that use the comma operator: a , outside every (), [], template <> and braced
// initializer, in a statement that is not a declaration. A declaration of several variables
// (double m = 0, s = 0;) is one statement, and Part I writes them; a, b; joining two expressions is two.
// Returns "LINE: the statement" per comma statement.
static std::vector<std::string> m_comma_statements(const std::string& source, std::size_t from, std::size_t to) {
    const std::string s = m_code_only(source);
    const MLineIndex lines(s);
    std::vector<std::string> found;
    std::vector<char> open;  // 'b' a block, 'i' a braced initializer, '(' and '['
    std::size_t start = from;  // the current statement's start
    auto prev_char = [&](std::size_t i) {
        while (i > from && std::isspace((unsigned char)s[i - 1])) i--;
        return i;  // one past the last non-space before i
    };
    auto word_before = [&](std::size_t e) {
        std::size_t b = e;
        while (b > from && (std::isalnum((unsigned char)s[b - 1]) || s[b - 1] == '_')) b--;
        return s.substr(b, e - b);
    };
    static const std::regex declaration(
        R"(^\s*(?:(?:const|static|constexpr|thread_local|volatile|unsigned|signed|long|short|inline)\s+)*[A-Za-z_][\w:]*(?:\s*<[^;{}]*>)?(?:\s*[*&]+)*\s+[*&]*\s*[A-Za-z_]\w*\s*(?:=|,|\(|\{|\[|;))");
    static const std::set<std::string> not_types = {"return", "throw", "else", "if", "for", "while", "do", "case", "goto", "delete", "new", "switch"};
    for (std::size_t i = from; i < to; i++) {
        const char ch = s[i];
        const bool top = !open.empty() && open.back() == 'b';
        if (ch == '{') {
            const std::size_t p = prev_char(i);
            const char before = p > from ? s[p - 1] : ';';
            const std::string word = word_before(p);
            const bool block = before == ')' || before == ']' || before == ';' || before == '}' || (before == '{' && (open.empty() || open.back() == 'b')) ||
                               word == "else" || word == "do" || word == "try" || word == "const" || word == "noexcept" || word == "override" || word == "mutable";
            open.push_back(block ? 'b' : 'i');
            start = i + 1;
        } else if (ch == '}') {
            if (!open.empty()) open.pop_back();
            start = i + 1;
        } else if (ch == '(' || ch == '[') {
            open.push_back(ch);
        } else if ((ch == ')' || ch == ']') && !open.empty()) {
            open.pop_back();
        } else if (ch == ';' && top) {
            start = i + 1;
        } else if (ch == '<' && top && i > from && (std::isalnum((unsigned char)s[i - 1]) || s[i - 1] == '_')) {
            int depth = 0;  // a template's arguments: skip to the matching >, if there is one before the statement ends
            std::size_t e = i;
            for (; e < to; e++) {
                const char c2 = s[e];
                if (c2 == '<' || c2 == '(' || c2 == '[') depth++;
                else if (c2 == '>' || c2 == ')' || c2 == ']') depth--;
                else if (c2 == ';' || c2 == '{' || c2 == '}') break;
                if (depth == 0) break;
            }
            if (e < to && depth == 0 && s[e] == '>') i = e;
        } else if (ch == ',' && top) {
            const std::string stmt = s.substr(start, s.find(';', i) - start);
            std::smatch m;
            const std::size_t first = stmt.find_first_not_of(" \t\n");
            const std::size_t first_end = stmt.find_first_of(" \t\n(<:;", first);
            const std::string first_word = first == std::string::npos ? "" : stmt.substr(first, first_end - first);
            if (!std::regex_search(stmt, m, declaration) || not_types.count(first_word)) {
                const std::size_t from_text = s.find_first_not_of(" \t\n", start);  // the source's text, from the statement's first word
                found.push_back(std::to_string(lines.line_at(i)) + ": " + source.substr(from_text, s.find(';', i) + 1 - from_text));
            }
            i = s.find(';', i);  // one report per statement
            start = i + 1;
        }
    }
    return found;
}
TEST_CASE("reading: no function of transformer.cpp, main.cpp or tests.cpp is over 100 lines; Part I has no comma statements") {
    // A function is read from its name to its closing brace: over 100 lines it no longer reads at
    // once. Tables of data written as a function are allowed (main.cpp's command_docs: the flags' docs).
    const std::set<std::string> tables = {"command_docs"};
    for (const char* file : {"transformer.cpp", "main.cpp", "tests.cpp"}) {
        const std::vector<MFunctionLength> fs = m_function_lengths(m_read(file));
        CHECK_MESSAGE(fs.size() > 50, std::string(file) << ": the scan should find the file's functions, found " << fs.size());
        for (const MFunctionLength& f : fs)
            CHECK_MESSAGE((f.lines <= 100 || tables.count(f.name)),
                          std::string(file) << ":" << f.line << ": " << f.name << " is " << f.lines << " lines, expected at most 100 (split it into named steps)");
    }
    // The guide's "one statement per line" in Part I: a, b; is two statements on a line.
    const std::string cpp = m_read("transformer.cpp");
    const std::size_t part1 = cpp.find("\n// PART I. "), part2 = cpp.find("\n// PART II. ");
    REQUIRE_MESSAGE((part1 != std::string::npos && part2 != std::string::npos && part1 < part2),
                    "transformer.cpp should have the banners // PART I. and // PART II., in that order");
    for (const std::string& s : m_comma_statements(cpp, part1, part2))
        CHECK_MESSAGE(false, "transformer.cpp:" << s << "\n  joins statements with the comma operator in Part I: write one statement per line");
    // The scans themselves, on a hand-made source: what they must find and what they must let pass.
    const std::string sample = "// PART I. \nstruct S { int f(int a = {}) const {\n return a; } };\n"
                               "template <typename T>\nT g(T x) {\n    int a = 0, b = 1;\n    std::map<int, int> m;\n"
                               "    for (int i = 0, j = 0; i < 2; i++, j++) a += i, b += j;\n    std::vector<int> v = {1, 2};\n"
                               "    const char* s = \"a, b\";  // a, b\n    a = 1, b = 2;\n    return {a, b};\n}\n// PART II. \n";
    const std::vector<MFunctionLength> fs = m_function_lengths(sample);
    REQUIRE(fs.size() == 2);
    CHECK((fs[0].name == "f" && fs[0].line == 2 && fs[0].lines == 2));
    CHECK((fs[1].name == "g" && fs[1].line == 5 && fs[1].lines == 9));
    CHECK(m_comma_statements(sample, 0, sample.size()) ==
          std::vector<std::string>{"8: for (int i = 0, j = 0; i < 2; i++, j++) a += i, b += j;", "11: a = 1, b = 2;"});
}

TEST_CASE("teaching: Part I calls only itself and the entry points declared at its top (make part-one-check)" * doctest::test_suite("the project (long)") * doctest::skip()) {
    // The compiler's view: transformer.cpp built with Part I alone leaves undefined only gemm, the
    // row kernels and the parameters' memory (the Makefile's PART_ONE_CALLS); anything else that a
    // formula function calls would take the reader who steps through it out of Part I.
    const std::string log = m_path("part-one-check.log");
    const int st = m_sh(m_MAKE + " part-one-check", log);
    INFO("make part-one-check said:\n" << m_read(log));
    CHECK(st == 0);
    CHECK(m_contains(m_read(log), "Part I calls only itself and"));
}

TEST_CASE("teaching: every pointer the program prints leads somewhere: formulas §N exists, docs/NAME.md exists, no README item") {
    // The string literals of transformer.cpp and main.cpp (what the program can print): each
    // "formulas §N" is a section of docs/formulas.md, each "docs/NAME.md" a file, and no text points
    // at the README by an item number or a heading (the README is a guide that changes; docs/ hold
    // the reference).
    const std::string sheet = m_read("docs/formulas.md");
    int pointers = 0;
    for (const char* file : {"transformer.cpp", "main.cpp"}) {
        std::istringstream in(m_read(file));
        int line_no = 0;
        for (std::string line; std::getline(in, line);) {
            line_no++;
            std::string literals;  // the text inside "..." on this line, outside // comments
            bool in_string = false;
            for (std::size_t k = 0; k < line.size(); k++) {
                const char ch = line[k];
                if (!in_string && ch == '/' && k + 1 < line.size() && line[k + 1] == '/') break;
                if (!in_string && ch == '\'' && k + 2 < line.size() && line[k + 2] == '\'') { k += 2; continue; }
                if (in_string && ch == '\\') { literals += line[++k]; continue; }
                if (ch == '"') { in_string = !in_string; literals += ' '; continue; }
                if (in_string) literals += ch;
            }
            INFO(std::string(file) << ":" << line_no << ": " << literals);
            CHECK_MESSAGE(literals.find("README") == std::string::npos,
                          "a printed text points at the README; point at formulas §N or a docs/ file instead");
            for (std::size_t at = literals.find("formulas §"); at != std::string::npos; at = literals.find("formulas §", at + 1)) {
                const std::size_t d = at + std::string("formulas §").size();
                if (d >= literals.size() || !std::isdigit((unsigned char)literals[d])) continue;  // "formulas §N" as a pattern
                const std::string n = literals.substr(d, literals.find_first_not_of("0123456789", d) - d);
                CHECK_MESSAGE(m_contains(sheet, "\n## §" + n + " "), "formulas §" << n << " is not a section of docs/formulas.md");
                pointers++;
            }
            for (std::size_t at = literals.find("docs/"); at != std::string::npos; at = literals.find("docs/", at + 1)) {
                const std::size_t e = literals.find(".md", at);
                if (e == std::string::npos) continue;
                const std::string path = literals.substr(at, e + 3 - at);
                if (path.find(' ') != std::string::npos) continue;
                CHECK_MESSAGE(m_exists(path), path << " does not exist");
                pointers++;
            }
        }
    }
    CHECK(pointers > 10);  // the scan sees the pointers the program has
}

// A line of `make run`'s output with what changes from run to run (times, speeds, memory) taken
// out: the step lines keep their step, loss and validation loss; the done line its steps and losses.
[[maybe_unused]] static std::string m_steady_part(const std::string& line) {  // unused in tests-debug
    if (line.rfind("peak memory", 0) == 0) return "peak memory";
    if (line.rfind("step ", 0) == 0) {
        const std::size_t lr = line.find(" | lr "), val = line.find(" | val ");
        return line.substr(0, lr) + (val == std::string::npos ? "" : line.substr(val));
    }
    if (line.rfind("done: ", 0) == 0) {
        const std::size_t in = line.find(" in "), loss = line.find(", train loss");
        if (in != std::string::npos && loss != std::string::npos) return line.substr(0, in) + line.substr(loss);
    }
    return line;
}

// The project's root, where the tests run (make test runs them there): the absolute path of the
// working directory, which must hold README.md and the Makefile.
[[maybe_unused]] static std::string m_project_root() {  // unused in tests-debug
    REQUIRE_MESSAGE((m_exists("README.md") && m_exists("Makefile")), "run the tests from the project's root (make test does)");
    const std::string cwd = m_cwd();
    return cwd;
}

TEST_CASE("readme: make run prints what README.md and docs/training.md quote" * doctest::test_suite("the project (long)") * doctest::skip()) {
    // make run's commands, run in a scratch directory (its files are written there), and its
    // output against the blocks that the README and docs/training.md quote, line by line.
#ifdef TF_TESTS_DEBUG
    MESSAGE("the 3000 steps of make run take minutes in the sanitized build: run by make test-long, not ./tests-debug");
#else
    const std::string dir = m_path("makerun"), program = m_project_root() + "/transformer";
    m_make_dir(dir);
    std::string cmd = "cd " + dir + " && { echo './transformer train --dropout 0 --out addition.safetensors'; " + program +
                      " train --dropout 0 --out addition.safetensors && echo 'greedy answers to held-out problems (the sum is written "
                      "least significant digit first: 106+752=8580 means 858):'";
    for (const char* p : {"106+752=", "439+039=", "866+363=", "539+585="})
        cmd += std::string(" && ") + program + " sample --checkpoint addition.safetensors --prompt " + p + " --tokens 4 --temperature 0";
    cmd += "; } > out.txt 2> err.txt";
    const int status = std::system(cmd.c_str());
    const std::string out = m_read(dir + "/out.txt");
    INFO("make run printed:\n" << out << m_read(dir + "/err.txt"));
    REQUIRE(status == 0);
    std::set<std::string> printed;
    std::stringstream ps(out);
    for (std::string l; std::getline(ps, l);) printed.insert(m_steady_part(l));
    // The first ``` block after `after` in `file`: its lines.
    auto block = [](const std::string& file, const std::string& after) {
        const std::string text = m_read(file);
        const std::size_t at = text.find(after);
        REQUIRE_MESSAGE(at != std::string::npos, file << " no longer says '" << after << "'");
        const std::size_t open = text.find("```\n", at), close = text.find("\n```", open + 4);
        std::vector<std::string> lines;
        std::stringstream bs(text.substr(open + 4, close - open - 4));
        for (std::string l; std::getline(bs, l);) lines.push_back(l);
        return lines;
    };
    for (const auto& quoted : {std::make_pair(std::string("README.md"), std::string("`make run` takes about")),
                               std::make_pair(std::string("docs/training.md"), std::string("`make run` on a fresh clone"))}) {
        const std::vector<std::string> lines = block(quoted.first, quoted.second);
        CHECK(lines.size() >= 9);
        for (const std::string& l : lines) {
            if (l == "...") continue;
            CAPTURE(quoted.first);
            CHECK_MESSAGE(printed.count(m_steady_part(l)), quoted.first << " quotes a line make run does not print: " << l);
        }
    }
#endif
}

// The commands of the identical: cases, each run as ./transformer RUN in a directory of its own,
// and the files and outputs they compare (outN.txt: what run N printed; these runs print no time,
// and of bench's line only the loss is kept).
[[maybe_unused]] static const std::vector<std::string> m_identical_runs = {
    "train --steps 300 --quiet --out add.safetensors",  // GPT-2, gelu_sigmoid, dropout 0.1
    "train --model bert --activation gelu_erf --emb-ln --mlm-head --steps 100 --quiet --out bert.safetensors",
    "train --model gpt3 --activation gelu_tanh --steps 100 --quiet --out gpt3.safetensors",
    "task --task text --examples 400 --seed 1 --out sums.txt",
    "train --model gpt --activation relu --objective xlnet --data sums.txt --steps 60 --quiet --out xlnet.safetensors",
    "train --data sums.txt --line-windows --block 32 --batch 8 --steps 100 --quiet --out pre.safetensors",
    "task --task entailment --examples 300 --seed 1 --out ent.tsv",
    "task --task entailment --examples 100 --seed 2 --held-out --out val.tsv",
    "finetune --checkpoint pre.safetensors --task entailment --train ent.tsv --val val.tsv --batch 8 --steps 40 --warmup 10 "
    "--quiet --out ft.safetensors",
    "sample --checkpoint add.safetensors --prompt 123+456= --tokens 8 --temperature 0.9 --seed 5",
    "explain --preset tiny-gpt2 --tokens 3,1,4",
    "bench --preset tiny-gpt2 --embd 128 --heads 4 --vocab 1000 --block 16 --batch 8 --steps 1 --json > bench.json 2> bench.err && sed -nE 's/.*(\"loss\": [-0-9.e]+).*/\\1/p' bench.json"};
[[maybe_unused]] static const std::vector<std::string> m_identical_compared = {
    "add.safetensors", "bert.safetensors", "gpt3.safetensors", "xlnet.safetensors", "pre.safetensors", "ft.safetensors",
    "out8.txt",        "out9.txt",         "out10.txt",        "out11.txt"};

// One build of the program for the identical: cases: its name, the program, the make arguments that
// build it (empty: ./transformer, built already) and what runs it ("qemu-aarch64": another CPU's
// program under qemu's user-mode emulator; "LD_PRELOAD=...": variables for the run; empty: nothing).
struct m_Build {
    std::string name, program, make_args, runner;
};

// `runs` run by `program` (named `name` in a failure), each command preceded by `runner`, in one
// directory emptied first (a checkpoint records the path of its data; each_dir, when given, is
// set to it): the contents of `compared` (outN.txt: what run N printed on standard output), none empty.
[[maybe_unused]] static std::vector<std::string> m_identical_outputs(const std::string& name, const std::string& program,
                                                                      const std::string& runner,
                                                                      const std::vector<std::string>& runs = m_identical_runs,
                                                                      const std::vector<std::string>& compared = m_identical_compared) {
    const std::string dir = m_path("identical");
    std::filesystem::remove_all(dir);
    REQUIRE(m_make_dir(dir));
    // Each build runs as ./transformer (a link to it): the commands it prints name the program as it was run.
    REQUIRE(m_make_symlink(program, dir + "/transformer"));
    const std::string prefix = runner.empty() ? "" : runner + " ";
    for (std::size_t r = 0; r < runs.size(); r++) {
        const std::string cmd = "cd " + dir + " && " + prefix + "./transformer " + runs[r] + " > out" + std::to_string(r) + ".txt 2> err.txt";
        REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, name << ": " << prefix << "./transformer " << runs[r] << " failed: " << m_read(dir + "/err.txt"));
    }
    std::vector<std::string> got;
    for (const std::string& f : compared) {
        got.push_back(m_read(dir + "/" + f));
        CHECK_MESSAGE(got.back().size() > 0, name << ": " << f << " is empty");
    }
    return got;
}

// Each file of `compared` the same bytes in `got` (by `name`) as in `want` (by `want_name`); a
// difference names the command that wrote the file (run N for outN.txt, else the run naming it
// after --out) and its first differing byte.
[[maybe_unused]] static void m_identical_compare(const std::vector<std::string>& got, const std::string& name,
                                                 const std::vector<std::string>& want, const std::string& want_name,
                                                 const std::vector<std::string>& runs = m_identical_runs,
                                                 const std::vector<std::string>& compared = m_identical_compared) {
    for (std::size_t k = 0; k < compared.size(); k++) {
        const std::string& f = compared[k];
        std::string writer = "(no run names it)";
        for (std::size_t r = 0; r < runs.size(); r++)
            if (f == "out" + std::to_string(r) + ".txt" || runs[r].find("--out " + f) != std::string::npos) writer = runs[r];
        std::size_t at = 0;
        while (at < got[k].size() && at < want[k].size() && got[k][at] == want[k][at]) at++;
        const bool same = got[k] == want[k];  // not CHECK(got[k] == want[k]): doctest would print both files
        CHECK_MESSAGE(same, name << " wrote " << f << " (" << got[k].size() << " bytes) other than " << want_name << " ("
                                 << want[k].size() << " bytes): the first difference at byte " << at << "; the command: ./transformer "
                                 << writer << " (docs/performance.md: the same numbers on every machine)");
    }
}

// Builds each of `builds` with the Makefile into its own directory (as make bench-portable does),
// runs `runs` with it and checks that each file of `compared` is the same bytes as the first
// build's. `each(b, dir)`, when given, is called after build b's runs, with their directory.
[[maybe_unused]] static void m_identical_builds(const std::vector<m_Build>& builds, const std::vector<std::string>& runs,
                                                const std::vector<std::string>& compared,
                                                const std::function<void(std::size_t, const std::string&)>& each = nullptr) {
    const std::string root = m_project_root(), make = m_MAKE;
    std::vector<std::string> first;
    for (std::size_t bi = 0; bi < builds.size(); bi++) {
        const m_Build& b = builds[bi];
        CAPTURE(b.name);
        if (!b.make_args.empty()) {
            const std::string log = m_path("identical-make.log");
            const std::string target = b.program.substr(root.size() + 1);
            const int made = std::system((make + " " + b.make_args + " " + target + " > " + log + " 2>&1").c_str());
            REQUIRE_MESSAGE(made == 0, "make " << b.make_args << " " << target << " failed:\n" << m_read(log));
        }
        const std::vector<std::string> got = m_identical_outputs(b.name, b.program, b.runner, runs, compared);
        if (each) each(bi, m_path("identical"));
        if (first.empty())
            first = got;
        else
            m_identical_compare(got, b.name, first, builds[0].name, runs, compared);
    }
}

TEST_CASE("identical: builds for x86-64-v3, the native CPU, x86-64-v4 and clang++ give the same bytes" * doctest::test_suite("the project (long)") * doctest::skip()) {
    // docs/performance.md, "The same numbers on every machine": the rounding of every result is fixed
    // by the source, so the program built for AVX2 + FMA (x86-64-v3: most laptops), for this CPU
    // (-march=native, ./transformer) and, where the CPU runs them, for AVX-512 (x86-64-v4) and with
    // clang++ (with libstdc++, and with libc++, the Mac's library, where installed), trains,
    // fine-tunes, samples and explains to the same bytes.
#ifdef TF_TESTS_DEBUG
    MESSAGE("the other builds take minutes: run by make test-long, not ./tests-debug");
#else
    const std::string root = m_project_root();
    std::vector<m_Build> builds = {{"g++ -march=native", root + "/transformer", "", ""}};
#if defined(__x86_64__)
    __builtin_cpu_init();
    builds.push_back({"g++ -march=x86-64-v3", root + "/build-avx2/transformer", "BUILD=build-avx2 CXX=g++ ARCH=-march=x86-64-v3", ""});
    const bool v4 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    if (v4)
        builds.push_back({"g++ -march=x86-64-v4", root + "/build-v4/transformer", "BUILD=build-v4 CXX=g++ ARCH=-march=x86-64-v4", ""});
    else
        MESSAGE("this CPU has no AVX-512: the x86-64-v4 build is not run");
#else
    WARN_MESSAGE(false, "the other targets compared here are x86-64's: only the native build runs");
#endif
    if (std::system("command -v clang++ > /dev/null 2>&1") == 0) {
        builds.push_back({"clang++ -march=native", root + "/build-clang/transformer", "BUILD=build-clang CXX=clang++", ""});
        // libc++ (Debian's libc++-dev): does a program that includes <vector> link with it?
        const std::string probe = m_path("libcxx-probe");
        m_write(probe + ".cpp", "#include <vector>\nint main() { return (int)std::vector<int>(1).size() - 1; }\n");
        if (std::system(("clang++ -stdlib=libc++ -o " + probe + " " + probe + ".cpp > /dev/null 2>&1 && " + probe).c_str()) == 0)
            builds.push_back({"clang++ -stdlib=libc++ -march=native", root + "/build-libcxx/transformer",
                              "BUILD=build-libcxx CXX='clang++ -stdlib=libc++'", ""});
        else
            MESSAGE("clang++ -stdlib=libc++ does not link a program (apt-get install libc++-dev): its build is not compared");
    } else {
        MESSAGE("clang++ is not installed: its build is not compared");
    }
    m_identical_builds(builds, m_identical_runs, m_identical_compared);
#endif
}

TEST_CASE("identical: aarch64 builds (g++ and clang++) under qemu give the x86 bytes" * doctest::test_suite("the project (long)") * doctest::skip()) {
    // docs/performance.md, "ARM": on aarch64 (Apple's M-series, Graviton, a Raspberry Pi 4) every
    // multiply-add the source fuses (madd) is one IEEE fused multiply-add, as with FMA on x86-64, and
    // no other is fused (-ffp-contract=off holds for both compilers there too), so the program built
    // for armv8-a by g++ and by clang++, statically linked and run under qemu-aarch64, trains,
    // fine-tunes, samples and explains to the bytes of ./transformer. That includes gelu_erf, whose
    // erf is the program's own (verf): glibc's aarch64 erff fuses its own multiply-adds and differs
    // from x86-64's in the last bit of a few results.
    // qemu runs the program about 100 times slower: the runs are tens of steps of small batches.
#ifdef TF_TESTS_DEBUG
    MESSAGE("the aarch64 builds take minutes: run by make test-long, not ./tests-debug");
#elif !defined(__x86_64__)
    WARN_MESSAGE(false, "./transformer is not an x86-64 program here: the x86 bytes the aarch64 builds are compared with are not made");
#else
    if (std::system("command -v aarch64-linux-gnu-g++ > /dev/null 2>&1") != 0 || std::system("command -v qemu-aarch64 > /dev/null 2>&1") != 0) {
        WARN_MESSAGE(false, "aarch64-linux-gnu-g++ or qemu-aarch64 is missing (apt-get install g++-aarch64-linux-gnu qemu-user): "
                            "the aarch64 builds are not compared");
        return;
    }
    const std::string root = m_project_root();
    // -static: qemu-aarch64 runs the program without the aarch64 C library's directory (-L).
    std::vector<m_Build> builds = {
        {"g++ -march=native (x86-64)", root + "/transformer", "", ""},
        {"aarch64-linux-gnu-g++ -march=armv8-a", root + "/build-aarch64/transformer",
         "BUILD=build-aarch64 CXX=aarch64-linux-gnu-g++ ARCH='-march=armv8-a -static'", "qemu-aarch64"}};
    // clang++ links for aarch64 with the GNU cross tools' linker, C library and libstdc++.
    if (std::system("command -v clang++ > /dev/null 2>&1") == 0)
        builds.push_back({"clang++ --target=aarch64-linux-gnu -march=armv8-a", root + "/build-aarch64-clang/transformer",
                          "BUILD=build-aarch64-clang CXX='clang++ --target=aarch64-linux-gnu' ARCH='-march=armv8-a -static'",
                          "qemu-aarch64"});
    else
        MESSAGE("clang++ is not installed: its aarch64 build is not compared");
    const std::vector<std::string> runs = {
        "train --batch 8 --steps 8 --warmup 4 --eval-every 4 --eval-steps 1 --quiet --out add.safetensors",  // GPT-2, dropout 0.1
        "train --model bert --emb-ln --mlm-head --batch 4 --steps 10 --eval-every 0 --quiet --out bert.safetensors",
        "train --model bert --activation gelu_erf --batch 4 --steps 10 --eval-every 0 --quiet --out erf.safetensors",
        "train --model gpt3 --activation gelu_tanh --batch 4 --steps 4 --eval-every 0 --quiet --out gpt3.safetensors",
        "task --task text --examples 200 --seed 1 --out sums.txt",
        "train --model gpt --activation relu --objective xlnet --data sums.txt --block 24 --batch 4 --steps 6 --eval-every 0 --quiet "
        "--out xlnet.safetensors",
        // 16 windows of 32 tokens: the weight gradients' products sum over 512 > KC = 384 rows, in two chunks.
        "train --data sums.txt --line-windows --block 32 --batch 16 --steps 4 --eval-every 0 --quiet --out pre.safetensors",
        "task --task entailment --examples 100 --seed 1 --out ent.tsv",
        "task --task entailment --examples 40 --seed 2 --held-out --out val.tsv",
        "finetune --checkpoint pre.safetensors --task entailment --train ent.tsv --val val.tsv --batch 4 --steps 6 --warmup 2 "
        "--quiet --out ft.safetensors",
        "sample --checkpoint add.safetensors --prompt 123+456= --tokens 8 --temperature 0.9 --seed 5",
        "explain --preset tiny-gpt --tokens 3,1,4",
        "explain --preset tiny-gpt2 --tokens 3,1,4",
        "explain --preset tiny-gpt3 --tokens 3,1,4",
        "explain --preset tiny-bert --tokens 3,1,4 --masked 2",  // gelu_erf: the printed digits agree
        "explain --preset tiny-roberta --tokens 3,1,4 --masked 2"};
    m_identical_builds(builds, runs,
                       {"add.safetensors", "bert.safetensors", "erf.safetensors", "erf.csv", "gpt3.safetensors", "xlnet.safetensors",
                        "pre.safetensors", "ft.safetensors", "out10.txt", "out11.txt", "out12.txt", "out13.txt", "out14.txt", "out15.txt"});
#endif
}

TEST_CASE("identical: the C library's exp, log, tanh, erf, cos, sin and pow moved by one ulp change no byte of a run" * doctest::test_suite("the project (long)") * doctest::skip()) {
    // docs/performance.md, "The same numbers on every machine": every result of a run goes through the
    // program's own math:: functions, so a C library that rounds exp, log, ... otherwise (macOS's,
    // musl) gives the same bytes. An LD_PRELOAD shim written here stands in for such a library: it
    // calls the real function (dlsym(RTLD_NEXT)) and moves the result up by one ulp for half of the
    // arguments (the low bit of a hash of the argument's bits). The identical: commands are run with
    // and without it by ./transformer and must write the same bytes.
#if defined(TF_TESTS_DEBUG)
    MESSAGE("the sanitized transformer-debug takes no LD_PRELOAD shim before its sanitizer runtime: run by make test-long, not ./tests-debug");
#elif !defined(__linux__) || !defined(__GLIBC__)
    MESSAGE("skipped: the LD_PRELOAD shim needs Linux's dynamic linker and glibc's dlsym(RTLD_NEXT) (this is not Linux with glibc)");
#else
    if (std::system("command -v cc > /dev/null 2>&1") != 0) {
        MESSAGE("skipped: no C compiler `cc` to build the LD_PRELOAD shim with");
        return;
    }
    const std::string root = m_project_root(), dir = m_path("libm-shim");
    std::filesystem::remove_all(dir);
    REQUIRE(m_make_dir(dir));
    const char* const moved[] = {"exp", "expf", "log", "logf", "tanh", "tanhf", "erf", "erff",
                                 "cos", "cosf", "sin", "sinf", "pow", "powf"};
    {
        std::ofstream c(dir + "/shim.c");
        c << "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
             "static unsigned long long calls, moved;\n"
             "static int odd(uint64_t h) { h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33; return (int)(h & 1); }\n"
             "static double up_d(double y, uint64_t h) {\n"
             "    uint64_t u; memcpy(&u, &y, 8); calls++;\n"
             "    if (odd(h) && y == y && y != 0 && y - y == 0) { u++; moved++; memcpy(&y, &u, 8); }\n"
             "    return y;\n}\n"
             "static float up_f(float y, uint64_t h) {\n"
             "    uint32_t u; memcpy(&u, &y, 4); calls++;\n"
             "    if (odd(h) && y == y && y != 0 && y - y == 0) { u++; moved++; memcpy(&y, &u, 4); }\n"
             "    return y;\n}\n"
             "static uint64_t bits_d(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }\n"
             "static uint64_t bits_f(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }\n"
             "static void *real(const char *name) {\n"
             "    void *f = dlsym(RTLD_NEXT, name);\n"
             "    if (!f) { fprintf(stderr, \"libm shim: no %s after the shim\\n\", name); abort(); }\n"
             "    return f;\n}\n"
             "#define ONE(T, name, up, bits) T name(T x) { static T (*f)(T); if (!f) f = (T (*)(T))real(#name); return up(f(x), bits(x)); }\n"
             "#define TWO(T, name, up, bits) T name(T x, T y) { static T (*f)(T, T); if (!f) f = (T (*)(T, T))real(#name); \\\n"
             "    return up(f(x, y), bits(x) * 31 + bits(y)); }\n";
        for (const char* f : moved) {
            const std::string name = f;
            const bool flt = name.back() == 'f' && name != "erf";
            c << (name.rfind("pow", 0) == 0 ? "TWO" : "ONE") << (flt ? "(float, " : "(double, ") << name
              << (flt ? ", up_f, bits_f)\n" : ", up_d, bits_d)\n");
        }
        // What the shim did, written where TF_SHIM_LOG says when the program ends.
        c << "__attribute__((destructor)) static void report(void) {\n"
             "    const char *p = getenv(\"TF_SHIM_LOG\"); FILE *f = p ? fopen(p, \"a\") : 0;\n"
             "    if (f) { fprintf(f, \"%llu %llu\\n\", calls, moved); fclose(f); }\n}\n";
    }
    const std::string log = dir + "/cc.log";
    REQUIRE_MESSAGE(std::system(("cc -O2 -shared -fPIC -o " + dir + "/shim.so " + dir + "/shim.c -ldl > " + log + " 2>&1").c_str()) == 0,
                    "cc could not build the shim " << dir << "/shim.c:\n" << m_read(log));
    // The shim reaches a program: a probe that prints each function over 32 arguments prints other
    // digits with it, for every function.
    {
        std::ofstream c(dir + "/probe.c");
        c << "#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\nint main(int argc, char **argv) {\n"
             "    double x0 = argc > 1 ? atof(argv[1]) : 0;\n"
             "    for (int i = 0; i < 32; i++) {\n        double x = x0 + 0.0123 * i; float y = (float)x;\n";
        for (const char* f : moved) {
            const std::string name = f;
            const bool flt = name.back() == 'f' && name != "erf";
            const std::string arg = flt ? "y" : "x", fmt = flt ? "(double)" : "";
            c << "        printf(\"" << name << " %a\\n\", " << fmt << name << "(" << arg << (name.rfind("pow", 0) == 0 ? ", " + arg : "")
              << "));\n";
        }
        c << "    }\n    return 0;\n}\n";
    }
    REQUIRE_MESSAGE(std::system(("cc -O0 -o " + dir + "/probe " + dir + "/probe.c -lm > " + log + " 2>&1").c_str()) == 0,
                    "cc could not build the probe:\n" << m_read(log));
    REQUIRE(std::system((dir + "/probe 0.37 > " + dir + "/plain.txt").c_str()) == 0);
    REQUIRE(std::system(("LD_PRELOAD=" + dir + "/shim.so " + dir + "/probe 0.37 > " + dir + "/shim.txt").c_str()) == 0);
    {
        std::map<std::string, int> lines, differ;
        std::istringstream plain(m_read(dir + "/plain.txt")), shim(m_read(dir + "/shim.txt"));
        for (std::string a, b; std::getline(plain, a) && std::getline(shim, b);) {
            const std::string name = a.substr(0, a.find(' '));
            lines[name]++;
            differ[name] += a != b;
        }
        for (const char* f : moved) {
            CAPTURE(f);
            CHECK_MESSAGE(lines[f] == 32, "the probe printed " << lines[f] << " results of " << f << ", not 32");
            CHECK_MESSAGE(differ[f] > 0, "the shim moved none of 32 results of " << f << ": it does not reach the probe");
        }
    }
    // Every function of the C library's libm that ./transformer calls is one the shim moves, or an
    // exact one (its result is the same in every C library).
    const std::string program = root + "/transformer";
    if (std::system("command -v nm > /dev/null 2>&1 && command -v ldd > /dev/null 2>&1") == 0) {
        const std::string libm_path = dir + "/libm.txt", calls_path = dir + "/calls.txt";
        REQUIRE(std::system(("nm -D --defined-only \"$(ldd " + program + " | sed -nE 's/.*libm\\.so[^ ]* => ([^ ]+).*/\\1/p')\" 2> /dev/null"
                             " | awk '{ print $3 }' | sed 's/@.*//' | sort -u > " + libm_path + "; nm -D --undefined-only " + program +
                             " | awk '{ print $2 }' | sed 's/@.*//' | sort -u > " + calls_path).c_str()) == 0);
        std::set<std::string> libm;
        std::istringstream ls(m_read(libm_path));
        for (std::string w; ls >> w;) libm.insert(w);
        if (libm.empty()) MESSAGE("ldd names no libm of ./transformer (the C library holds it): the list of its calls is not checked");
        const std::set<std::string> exact = {"sqrt", "sqrtf", "fabs", "fabsf", "floor", "floorf", "ceil", "ceilf", "trunc", "truncf",
                                             "round", "roundf", "lround", "lroundf", "llround", "rint", "nearbyint", "lrint",
                                             "ldexp", "ldexpf", "frexp", "frexpf", "fmod", "fmodf", "nextafter", "nextafterf",
                                             "copysign", "copysignf", "fmin", "fmax", "fminf", "fmaxf", "scalbn", "scalbnf", "modf"};
        std::istringstream cs(m_read(calls_path));
        int counted = 0;
        for (std::string w; cs >> w;) {
            if (!libm.count(w) || exact.count(w)) continue;
            counted++;
            CHECK_MESSAGE(std::find(std::begin(moved), std::end(moved), w) != std::end(moved),
                          "./transformer calls " << w << " of the C library's libm, which the shim does not move: add it to the shim's list");
        }
        MESSAGE("./transformer links " << counted << " functions of libm, each moved by the shim");
    } else
        MESSAGE("nm or ldd is not installed: the libm functions ./transformer links are not listed");
    // The runs, without and with the shim.
    const std::vector<std::string> want = m_identical_outputs("./transformer", program, "");
    const std::string shim_log = dir + "/moved.txt";
    const std::vector<std::string> got =
        m_identical_outputs("./transformer with the shim", program, "LD_PRELOAD=" + dir + "/shim.so TF_SHIM_LOG=" + shim_log);
    m_identical_compare(got, "./transformer with the libm shim", want, "./transformer");
    unsigned long long calls = 0, moved_results = 0, runs = 0;
    std::istringstream ms(m_read(shim_log));
    for (unsigned long long c = 0, m = 0; ms >> c >> m; runs++) calls += c, moved_results += m;
    CHECK_MESSAGE(runs >= m_identical_runs.size(), "the shim reported from " << runs << " programs, not every run's ./transformer: it was not loaded");
    MESSAGE("under the shim, " << runs << " programs called its functions " << calls << " times and it moved " << moved_results << " results");
#endif
}

TEST_CASE("tools: the blanker and the mutant generator find a body written in other styles") {
    M_SKIP_ON_WINDOWS("awk and a C++ compiler run by a POSIX shell");
    // tools/blank.awk (make handout, make mutants) finds a definition by its name in column 0 and its
    // body by counting braces outside comments and literals: a one-line body, a signature over three
    // lines with the brace on a line of its own, a lambda and braces in strings, characters and a
    // comment inside the body, a comment after the closing brace. tools/mutant-gen.awk mutates the
    // lines of a body's range alone.
    for (const char* f : {"tools/blank.awk", "tools/mutant-gen.awk"}) REQUIRE_MESSAGE(m_exists(f), "run from the project's root: no " << f);
    const std::string src =
        "#include <stdexcept>\n"
        "#include <string>\n"
        "namespace tf { struct Error : std::runtime_error { using std::runtime_error::runtime_error; }; "
        "struct NotImplemented : Error { explicit NotImplemented(const std::string& f) : Error(\"not implemented: \" + f) {} }; }\n"
        "int one_line(int x) { return x + 1; }\n"
        "static double\n"
        "three_lines(const double* v,\n"
        "            int n)\n"
        "{\n"
        "    double s = 0;\n"
        "    for (int i = 0; i < n; i++) s += v[i];\n"
        "    return s;\n"
        "}\n"
        "int with_lambda(int x) {\n"
        "    auto f = [](int y) { return y * 2; };\n"
        "    const std::string s = \"}{ \\\"}\\\" '}'\";\n"
        "    const char c = '}';\n"
        "    /* } a brace\n"
        "}   in a comment */\n"
        "    return f(x) + (int)s.size() + c + 1'000;\n"
        "}  // with_lambda\n"
        "int after(int x) {\n"
        "    return x - 1;\n"
        "}\n";
    const std::string in = m_path("styles.cpp"), out = m_path("styles-blanked.cpp"), ranges = m_path("styles.ranges");
    m_write(in, src);
    const std::string blank = "awk -v funcs='one_line three_lines with_lambda' -v ranges=" + ranges + " -f tools/blank.awk " + in;
    REQUIRE_MESSAGE(std::system((blank + " > " + out + " 2> " + out + ".err").c_str()) == 0, m_read(out + ".err"));
    const std::string got = m_read(out);
    INFO("tools/blank.awk wrote:\n" << got);
    for (const char* f : {"one_line", "three_lines", "with_lambda"})
        CHECK(m_contains(got, std::string("throw tf::NotImplemented(\"") + f + "\");"));
    CHECK(m_contains(got, "int one_line(int x) {\n"));
    CHECK(m_contains(got, "            int n)\n{\n    (void)v; (void)n;\n"));
    CHECK(m_contains(got, "}  // with_lambda\nint after(int x) {\n    return x - 1;\n}\n"));
    for (const char* gone : {"return x + 1", "s += v[i]", "y * 2", "a brace", "1'000"}) CHECK_MESSAGE(!m_contains(got, gone), gone);
    CHECK_MESSAGE(std::system(("g++ -std=c++17 -fsyntax-only -x c++ " + out + " 2> " + out + ".cc").c_str()) == 0,
                  "the blanked file does not compile:\n" << m_read(out + ".cc"));
    // The ranges: the lines strictly between each body's "{" and "}" (1-based).
    const std::string r = m_read(ranges);
    CHECK_MESSAGE(m_contains(r, "three_lines 9 11\n"), r);
    CHECK_MESSAGE(m_contains(r, "with_lambda 14 19\n"), r);
    // The mutants of with_lambda: inside lines 14..19 only, none inside a string literal.
    const std::string mut = m_path("styles.mutants");
    REQUIRE(std::system(("awk -v from=14 -v to=19 -f tools/mutant-gen.awk " + in + " > " + mut).c_str()) == 0);
    std::istringstream lines(m_read(mut));
    int count = 0;
    for (std::string l; std::getline(lines, l); count++) {
        const int at = std::stoi(l);
        CHECK_MESSAGE((at >= 14 && at <= 19), "a mutant of line " << at << ": " << l);
        CHECK_MESSAGE(m_contains(l, "\"}{ \\\"}\\\" '}'\"") == (at == 15), "a mutant changed the string literal: " << l);
    }
    CHECK_MESSAGE(count >= 5, "tools/mutant-gen.awk made " << count << " mutants of with_lambda, expected at least 5");
}

TEST_CASE("tools: every program in tools/ answers --help, refuses an unknown argument, and works from another directory") {
    M_SKIP_ON_WINDOWS("a POSIX shell: the programs of tools/ are sh programs");
    const std::vector<std::string> programs = {"tools/handout",         "tools/grade",      "tools/mutants",        "tools/assignments-check",
                                               "tools/build-times",     "tools/part-one-check", "tools/fuzz",
                                               "tools/finetune-demo",   "tools/time-limit", "tools/doctest-check", "tools/windows-check"};
    const std::string cwd = m_cwd();
    const std::string root = cwd, scratch = m_path("tools-elsewhere");
    REQUIRE(m_make_dir(scratch));
    for (const std::string& p : programs) {
        CAPTURE(p);
        REQUIRE(m_exists(p));
        const std::string log = m_path("tool.log");
        CHECK(std::system(("cd " + scratch + " && sh " + root + "/" + p + " --help > " + log + " 2>&1").c_str()) == 0);
        CHECK_MESSAGE(m_contains(m_read(log), "usage: "), p << " --help printed: " << m_read(log));
        const int st = std::system(("cd " + scratch + " && sh " + root + "/" + p + " --no-such-flag > " + log + " 2>&1").c_str());
        CHECK(st != 0);
        const bool named = m_contains(m_read(log), "--no-such-flag") || m_contains(m_read(log), "usage");
        CHECK_MESSAGE(named, p << " said: " << m_read(log));
    }
    // tools/handout from another directory: DIR is the caller's, the files the project's.
    const int made = std::system(("cd " + scratch + " && sh " + root + "/tools/handout --dir h --funcs diag_backward > hand.log 2>&1").c_str());
    CHECK_MESSAGE(made == 0, m_read(scratch + "/hand.log"));
    CHECK(m_contains(m_read(scratch + "/h/transformer.cpp"), "NotImplemented(\"diag_backward\""));
    CHECK(m_exists(scratch + "/h/tools/handout"));
}

TEST_CASE("build times: make and make test from a fresh copy within docs/performance.md's targets, scaled by a reference compile" * doctest::test_suite("the project (long)") * doctest::skip()) {
    // docs/performance.md, "Build time": tools/build-times --check (make build-times CHECK=1) times a
    // fixed reference compile, then `make` and `make test` in a fresh copy of the sources, and fails
    // when one is more than its margin over its target scaled by the reference's time against the
    // documented computer's. A slow computer scales its targets; a slower build fails.
#ifdef TF_TESTS_DEBUG
    MESSAGE("the builds take minutes: run by make test-long, not ./tests-debug");
#else
    const std::string root = m_project_root(), log = m_path("build-times.log");
    const std::string cmd = "cd '" + root + "' && " + m_MAKE + " build-times CHECK=1 > " + log + " 2>&1";
    const int st = std::system(cmd.c_str());
    const std::string out = m_read(log);
    INFO("make build-times CHECK=1 printed:\n" << out);
    CHECK_MESSAGE(st == 0, "expected every figure within its target scaled by the reference (docs/performance.md, Build time); the rows above say which is not");
    for (const char* row : {"| `make` from a fresh copy |", "| `make test` from a fresh copy |", "| its run of the cases |"})
        CHECK_MESSAGE(out.find(row) != std::string::npos, "expected the row " << row);
    // The reference time the script scales by is the one docs/performance.md states.
    const std::string script = m_read(root + "/tools/build-times");
    const std::size_t at = script.find("\nREFERENCE_SECONDS=");
    REQUIRE(at != std::string::npos);
    const std::string seconds = script.substr(at + 19, script.find('\n', at + 1) - at - 19);
    CHECK_MESSAGE(m_read(root + "/docs/performance.md").find("reference compile took " + seconds + " s") != std::string::npos,
                  "docs/performance.md should say \"reference compile took " << seconds << " s\", as tools/build-times's REFERENCE_SECONDS");
#endif
}

TEST_CASE("shellcheck: the sh programs of tools/ are clean" * doctest::test_suite("the project (long)") * doctest::skip()) {
    REQUIRE_MESSAGE(std::system("command -v shellcheck > /dev/null 2>&1") == 0,
                    "shellcheck is not installed (Debian: apt-get install shellcheck; .ci/run installs it)");
    const std::string log = m_path("shellcheck.log");
    const int st = std::system(("shellcheck tools/handout tools/grade tools/mutants tools/assignments-check tools/build-times "
                                "tools/part-one-check tools/fuzz tools/finetune-demo tools/time-limit tools/doctest-check tools/windows-check .ci/run > " + log + " 2>&1").c_str());
    CHECK_MESSAGE(st == 0, "shellcheck said:\n" << m_read(log));
}

TEST_CASE("tests: the scratch directory is in $TMPDIR; directories of killed runs are removed") {
    CHECK(m_dir().rfind(m_temp_root() + "/tfm_tests_", 0) == 0);
    const std::string root = m_path("tmproot");
    m_make_dir(root);
    const std::string dead = root + "/tfm_tests_" + std::to_string(m_ended_process_id());
    const std::string alive = root + "/tfm_tests_" + std::to_string(m_running_process_id());
    const std::string other = root + "/tfm_other_1";
    for (const std::string& d : {dead, alive, other}) m_make_dir(d);
    m_write(dead + "/big.bin", "x");
    m_remove_stale_dirs(root);
    CHECK_FALSE(m_exists(dead));
    CHECK(m_exists(alive));
    CHECK(m_exists(other));
}

TEST_CASE("make clean: removes what the Makefile's targets write, never a file git tracks") {
    M_SKIP_ON_WINDOWS("a POSIX shell, git and make");
    if (std::system("command -v git >/dev/null 2>&1 && command -v make >/dev/null 2>&1") != 0) {
        WARN_MESSAGE(false, "skipped: git or make is not installed");
        return;
    }
    const std::string dir = m_path("clean");
    m_make_dir(dir);
    m_write(dir + "/Makefile", m_read("Makefile"));
    const std::string setup = "cd " + dir + " && git init -q . && mkdir -p demo handout build && touch addition.safetensors addition.svg "
                              "masks.svg demo/x handout/HANDOUT.md build/main.o transformer notes.txt addition.csv && "
                              "git add addition.csv Makefile && git -c user.email=t@t -c user.name=t commit -qm t";
    REQUIRE(std::system(setup.c_str()) == 0);
    const m_Run r = [&] {
        m_Run x;
        x.status = std::system(("make -C " + dir + " clean > " + dir + "/clean.log 2>&1").c_str());
        x.out = m_read(dir + "/clean.log");
        return x;
    }();
    INFO(r.out);
    CHECK(r.status == 0);
    for (const char* gone : {"demo", "handout", "build", "addition.safetensors", "addition.svg", "masks.svg", "transformer"})
        CHECK_FALSE(m_exists(dir + "/" + gone));
    CHECK(m_exists(dir + "/addition.csv"));  // tracked: kept
    CHECK(m_contains(r.out, "keeping addition.csv"));
    CHECK(m_exists(dir + "/notes.txt"));
    CHECK(m_exists(dir + "/Makefile"));
}

// tools/finetune-demo (make finetune-demo) without its training runs: the usage, the errors, and the
// statistics of its table on a results file made by hand, whose means, standard deviations and
// verdicts are worked out below.
TEST_CASE("tools/finetune-demo: --help, bad arguments name themselves, the table's means, spreads and verdicts") {
    M_SKIP_ON_WINDOWS("a POSIX shell: tools/finetune-demo is an sh program");
    const std::string tool = "tools/finetune-demo";
    REQUIRE_MESSAGE(m_exists(tool), "run the tests from the project's root");
    const auto run = [&](const std::string& args) { return m_run_program(tool, m_words(args)); };
    {
        const m_Run r = run("--help");
        INFO(r.out << r.err);
        CHECK(r.status == 0);
        for (const char* part : {"usage: tools/finetune-demo", "--quick", "--seeds N", "--program PATH", "--out DIR", "--summarize"})
            CHECK_MESSAGE(m_contains(r.out, part), "the help lacks " << part);
    }
    // Bad arguments: a non-zero exit and a message naming the argument; nothing is trained.
    for (const auto& bad : std::vector<std::pair<std::string, std::string>>{
             {"--bogus", "unknown argument '--bogus'"},
             {"--out", "--out needs a value"},
             {"--seeds 1", "--seeds takes a number of seeds, 2 or more"},
             {"--seeds five", "--seeds takes a number of seeds, 2 or more; got 'five'"},
             {"--model gpt3", "--model takes gpt2 or bert; got 'gpt3'"},
             {"--program " + m_path("no-such-program"), "no program at '" + m_path("no-such-program") + "'"},
             {"--summarize " + m_path("no-such.tsv"), "cannot read the results file '" + m_path("no-such.tsv") + "'"}}) {
        const m_Run r = run(bad.first);
        INFO("tools/finetune-demo " << bad.first << "\nstdout: " << r.out << "\nstderr: " << r.err);
        CHECK(r.exited);
        CHECK(r.status != 0);
        CHECK(m_contains(r.err, "tools/finetune-demo: error: " + bad.second));
        CHECK(r.out.empty());
    }
    // Accuracies (right of 500) by task, way and seed. classify: lambda .5 80, 82, 84% (mean 82.0,
    // s 2.0), lambda 0 70, 71, 72 (71.0, 1.0), scratch 81, 83, 85 (83.0, 2.0). Twice the standard
    // error of a difference of means with s 2 and 2 over 3 seeds each: 2 sqrt(8/3) = 3.27; with s 2
    // and 1: 2 sqrt(5/3) = 2.58. entailment: means 52, 49 and 48 (s 2 each), so +3.0 falls under
    // 3.27 and +4.0 over it (one standard error would resolve both, three neither).
    std::string tsv;
    const auto add = [&](const std::string& task, const std::string& way, std::vector<int> right) {
        for (std::size_t s = 0; s < right.size(); s++)
            tsv += task + "\t" + way + "\t" + std::to_string(s + 1) + "\t100\t" + std::to_string(right[s]) + "\t500\n";
    };
    add("classify", "lambda0.5", {400, 410, 420});
    add("classify", "lambda0", {350, 355, 360});
    add("classify", "scratch", {405, 415, 425});
    add("entailment", "lambda0.5", {250, 260, 270});
    add("entailment", "lambda0", {235, 245, 255});
    add("entailment", "scratch", {230, 240, 250});
    const std::string results = m_path("demo_results.tsv");
    m_write(results, tsv);
    const m_Run r = run("--summarize " + results);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(m_contains(r.out, "fine-tuning seeds 1 2 3:"));
    CHECK(m_contains(r.out, "500 each"));
    CHECK(m_contains(r.out, "resolved when larger than 2 standard errors of the difference"));
    for (const char* cell : {"82.0 ± 2.0 (80.0-84.0)", "71.0 ± 1.0 (70.0-72.0)", "83.0 ± 2.0 (81.0-85.0)",
                             "52.0 ± 2.0 (50.0-54.0)", "49.0 ± 2.0 (47.0-51.0)", "48.0 ± 2.0 (46.0-50.0)"})
        CHECK_MESSAGE(m_contains(r.out, cell), "the table lacks " << cell);
    for (const char* verdict : {"lambda .5 - lambda 0:           +11.0 (2 SE 2.6)  resolved: pre-trained, lambda .5 ahead",
                                "lambda .5 - no pre-training:     -1.0 (2 SE 3.3)  not resolved",
                                "lambda 0 - no pre-training:     -12.0 (2 SE 2.6)  resolved: no pre-training ahead",
                                "lambda .5 - lambda 0:            +3.0 (2 SE 3.3)  not resolved",
                                "lambda .5 - no pre-training:     +4.0 (2 SE 3.3)  resolved: pre-trained, lambda .5 ahead",
                                "lambda 0 - no pre-training:      +1.0 (2 SE 3.3)  not resolved"})
        CHECK_MESSAGE(m_contains(r.out, verdict), "the differences lack " << verdict);
    // A line that is not a result: an error naming the file and the line.
    m_write(results, tsv + "choice\tlambda 0.5\t1\t100\t200\t500\n");
    const m_Run b = run("--summarize " + results);
    CHECK(b.status != 0);
    CHECK(m_contains(b.err, "demo_results.tsv line 19"));
    // POSIX sh, clean under shellcheck where it is installed.
    if (std::system("command -v shellcheck >/dev/null 2>&1") == 0) {
        const int st = std::system(("shellcheck --shell=sh " + tool + " > " + m_path("shellcheck.log") + " 2>&1").c_str());
        INFO(m_read(m_path("shellcheck.log")));
        CHECK(st == 0);
    } else {
        WARN_MESSAGE(false, "shellcheck is not installed: tools/finetune-demo is not checked by it");
    }
}

TEST_CASE("docs/hf_check.py reads a probe file's bytes exactly: a CRLF stays a CRLF") {
    M_SKIP_ON_WINDOWS("python3 run by a POSIX shell");
    // Text mode would turn "\r\n" into "\n" and report a difference for any CRLF probe.
    static const bool have_python = std::system("command -v python3 >/dev/null 2>&1") == 0;
    if (!have_python) {
        WARN_MESSAGE(false, "skipped: python3 is not installed");
        return;
    }
    const std::string probe = m_path("crlf_probe.txt"), out = m_path("crlf_probe.out");
    const std::string bytes = "Caf\xC3\xA9\r\nlone CR\rtab\t\r\n";
    m_write(probe, bytes);
    // read_text needs neither torch nor transformers (main imports them).
    const std::string cmd = "python3 -c 'import sys; sys.path.insert(0, \"docs\"); import hf_check; "
                            "sys.stdout.buffer.write(hf_check.read_text(sys.argv[1]).encode(\"utf-8\"))' " + probe + " > " + out + " 2>&1";
    const int st = std::system(cmd.c_str());
    INFO("output: " << m_read(out));
    CHECK(st == 0);
    CHECK(m_read(out) == bytes);
}
TEST_SUITE_END();
