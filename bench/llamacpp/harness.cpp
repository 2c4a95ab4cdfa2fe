// The llama.cpp side of bench/vs_llamacpp.sh where llama-bench does not measure what sonde does.
// Built against a llama.cpp tree's static libraries by bench/llamacpp/vs_llamacpp.py (never by the
// project's CMake: CI does not build llama.cpp).
//
//   prefill: harness MODEL N [--threads T] [--reps R] [--ubatch U] [--last]
//            one llama_decode of N tokens with logits at EVERY position (sonde bench --mode prefill
//            --logits all), set up like llama-bench: F16 KV cache, own threadpool with poll 50, no
//            flash attention, n_batch = N and n_ubatch = U (default N: the whole prompt in one
//            ubatch). --last: logits at the last position only (llama-bench -p N -n 0's work).
//            One warm-up, then R timed runs, each after clearing the KV cache.
//   decode:  harness MODEL N --depth D [--threads T] [--reps R]
//            D prompt tokens in one llama_decode (not timed), then N single-token llama_decode calls
//            (logits of each) timed: what later llama-bench versions call -p 0 -n N -d D.
//   dump:    harness MODEL N --ids 1,2,... --dump OUT.f32 [--threads T]
//            N x n_vocab float32 logits (row-major, every position) for the agreement check.
// Prints one JSON line. The API names differ across llama.cpp versions; the driver defines
// HARNESS_MEMORY_API (llama_memory_clear), HARNESS_KV_SELF (llama_kv_self_clear) and
// HARNESS_FA_TYPE (llama_context_params::flash_attn_type) after reading the tree's llama.h.
#include "ggml-cpu.h"
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

void clear_kv(llama_context * ctx) {
#if defined(HARNESS_MEMORY_API)
    llama_memory_clear(llama_get_memory(ctx), false);
#elif defined(HARNESS_KV_SELF)
    llama_kv_self_clear(ctx);
#else
    llama_kv_cache_clear(ctx);
#endif
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void decode_or_die(llama_context * ctx, llama_batch & b) {
    if (llama_decode(ctx, b) != 0) {
        std::fprintf(stderr, "llama_decode failed\n");
        std::exit(1);
    }
    llama_synchronize(ctx);
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr,
                     "usage: %s MODEL N [--threads T] [--reps R] [--ubatch U] [--last] [--depth D] "
                     "[--ids L --dump F]\n",
                     argv[0]);
        return 2;
    }
    const char * path = argv[1];
    const int n = std::atoi(argv[2]);
    int threads = 2, reps = 3, ubatch = 0, depth = -1;
    bool last = false;
    std::string ids_arg, dump;
    for (int i = 3; i < argc; i++) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--threads" && has_value) threads = std::atoi(argv[++i]);
        else if (a == "--reps" && has_value) reps = std::atoi(argv[++i]);
        else if (a == "--ubatch" && has_value) ubatch = std::atoi(argv[++i]);
        else if (a == "--depth" && has_value) depth = std::atoi(argv[++i]);
        else if (a == "--ids" && has_value) ids_arg = argv[++i];
        else if (a == "--dump" && has_value) dump = argv[++i];
        else if (a == "--last") last = true;
        else {
            std::fprintf(stderr, "unknown option or missing value: %s\n", a.c_str());
            return 2;
        }
    }
    if (n < 1 || reps < 1) {
        std::fprintf(stderr, "N and --reps must be positive\n");
        return 2;
    }
    const bool decode = depth >= 0;

    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(path, llama_model_default_params());
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", path);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    llama_context_params cp = llama_context_default_params();
    const int prompt = decode ? std::max(depth, 1) : n;
    cp.n_ctx = decode ? depth + n + 1 : n;
    cp.n_batch = prompt;
    cp.n_ubatch = ubatch > 0 ? std::min(ubatch, prompt) : prompt;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = GGML_TYPE_F16;
#if defined(HARNESS_FA_TYPE)
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
#else
    cp.flash_attn = false;
#endif
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "cannot create a context\n");
        return 1;
    }
    ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    tpp.poll = 50;  // llama-bench's default
    ggml_threadpool * tp = ggml_threadpool_new(&tpp);
    llama_attach_threadpool(ctx, tp, nullptr);

    std::srand(1234);
    std::vector<llama_token> toks(prompt);
    if (!ids_arg.empty()) {
        std::stringstream ss(ids_arg);
        std::string x;
        int k = 0;
        while (std::getline(ss, x, ',') && k < n) toks[k++] = std::atoi(x.c_str());
        if (k != n || decode) {
            std::fprintf(stderr, "--ids needs exactly N ids (got %d, N = %d) and no --depth\n", k, n);
            return 2;
        }
    } else {
        for (auto & t : toks) t = std::rand() % n_vocab;
    }

    llama_batch b = llama_batch_init(prompt, 0, 1);
    auto fill = [&](int count, int pos0, const llama_token * src, bool all_logits) {
        b.n_tokens = count;
        for (int i = 0; i < count; i++) {
            b.token[i] = src[i];
            b.pos[i] = pos0 + i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = all_logits || i == count - 1;
        }
    };
    // One timed run: seconds of the measured part.
    auto run = [&]() {
        clear_kv(ctx);
        if (!decode) {
            fill(n, 0, toks.data(), !last);
            const double t0 = now();
            decode_or_die(ctx, b);
            return now() - t0;
        }
        if (depth > 0) {
            fill(depth, 0, toks.data(), false);
            decode_or_die(ctx, b);
        }
        llama_token t = std::rand() % n_vocab;
        const double t0 = now();
        for (int i = 0; i < n; i++) {
            fill(1, depth + i, &t, true);
            decode_or_die(ctx, b);
            t = std::rand() % n_vocab;  // as llama-bench's test_gen: random tokens, logits each step
        }
        return now() - t0;
    };

    if (!dump.empty()) {
        run();
        FILE * f = std::fopen(dump.c_str(), "wb");
        if (!f) {
            std::fprintf(stderr, "cannot write %s\n", dump.c_str());
            return 1;
        }
        for (int i = 0; i < n; i++) std::fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, f);
        std::fclose(f);
        std::printf("{\"n\":%d,\"n_vocab\":%d,\"dump\":\"%s\"}\n", n, n_vocab, dump.c_str());
    } else {
        run();  // warm-up
        std::vector<double> ts;
        for (int r = 0; r < reps; r++) ts.push_back(n / run());
        std::vector<double> s = ts;
        std::sort(s.begin(), s.end());
        const double median = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
        std::printf("{\"mode\":\"%s\",\"n\":%d,\"depth\":%d,\"threads\":%d,\"n_batch\":%u,\"n_ubatch\":%u,"
                    "\"logits\":\"%s\",\"samples_ts\":[",
                    decode ? "decode" : "prefill", n, decode ? depth : 0, threads, cp.n_batch, cp.n_ubatch,
                    decode ? "each step" : (last ? "last" : "all"));
        for (size_t i = 0; i < ts.size(); i++) std::printf("%s%.4f", i ? "," : "", ts[i]);
        std::printf("],\"median_ts\":%.4f}\n", median);
    }
    llama_batch_free(b);
    llama_free(ctx);
    ggml_threadpool_free(tp);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
