// sonde generate: autoregressive decoding (Qwen2) or Dream's diffusion_generate, on one or
// several prompts (design §6). Text streams to the terminal as it is made; --json prints one
// object per prompt instead.
#include "app_common.h"
#include "capture_setup.h"
#include "run_metadata.h"
#include "commands.h"
#include "gen_options.h"

#include <sonde/capture.h>
#include <sonde/chat.h>
#include <sonde/decode.h>
#include <sonde/error.h>
#include <sonde/registry.h>
#include <sonde/session_decode.h>
#include <sonde/stop_strings.h>
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <optional>

namespace sonde::cli {
namespace {

struct GenerateOptions {
  CommonOptions common;
  std::vector<std::string> ids, stop;
  std::string prompt, alg, out;
  CaptureOptions capture;
  bool chat = false, json = false, history = false, no_cache = false, overwrite = false;
  std::int64_t max_new_tokens = 0, steps = 0, top_k = 0;
  double temperature = 0, top_p = 1, alg_temp = 0, eps = 1e-3, repetition_penalty = 1;
  std::uint64_t seed = 0;
};

// Where captured rows go (--hooks with --out); sink is null without capture.
struct CaptureTarget {
  CaptureSpec spec;
  std::shared_ptr<Sink> sink;
  std::vector<std::string> prompt_texts;  // per prompt: the text encoded ("" for --ids)
};

std::vector<std::int64_t> prompt_indices(std::size_t n) {
  std::vector<std::int64_t> idx(n);
  for (std::size_t r = 0; r < n; ++r) idx[r] = static_cast<std::int64_t>(r);
  return idx;
}

// Prompt r of the command line: id "r", its tokens followed by the completion's.
void write_prompt(CaptureTarget& c, const std::vector<CapturedPrompt>& captured, std::size_t r,
                  const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion,
                  const std::optional<std::string>& text, const std::string& finish, std::uint64_t seed) {
  if (!c.sink) return;
  PromptRecord rec;
  rec.prompt_idx = static_cast<std::int64_t>(r);
  rec.id = std::to_string(r);
  rec.text = c.prompt_texts.at(r);
  rec.completion = text.value_or("");
  rec.finish_reason = finish;
  rec.token_ids = prompt;
  rec.token_ids.insert(rec.token_ids.end(), completion.begin(), completion.end());
  rec.seed = seed;
  write_captured(*c.sink, c.spec, captured.at(r), rec);
}

template <typename T>
std::optional<T> flag(const po::variables_map& vm, const char* name) {
  return vm.count(name) ? std::optional<T>(vm[name].as<T>()) : std::nullopt;
}

// The command line's generation settings as a request with batch-line keys (gen_options.h).
nlohmann::json request(const GenerateOptions& o, const po::variables_map& vm) {
  nlohmann::json r{{"max_new_tokens", o.max_new_tokens}, {"stop", o.stop}};
  for (const auto& [flag_name, key] : {std::pair{"temperature", "temperature"}, {"top-p", "top_p"},
                                       {"repetition-penalty", "repetition_penalty"}, {"eps", "eps"}})
    if (auto v = flag<double>(vm, flag_name)) r[key] = *v;
  for (const auto& [flag_name, key] : {std::pair{"top-k", "top_k"}, {"steps", "steps"}})
    if (auto v = flag<std::int64_t>(vm, flag_name)) r[key] = *v;
  if (auto v = flag<std::string>(vm, "alg")) r["alg"] = *v;
  if (vm.count("alg-temp")) r["alg_temp"] = o.alg_temp;
  return r;
}

// The prompts' tokens; `texts` receives the text each encodes (the rendered chat with --chat).
std::vector<std::vector<std::int32_t>> read_prompts(const GenerateOptions& o, const po::variables_map& vm,
                                                    const ModelConfig& cfg, const std::optional<Tokenizer>& tok,
                                                    std::vector<std::string>& texts) {
  std::vector<std::vector<std::int32_t>> prompts;
  for (const auto& ids : o.ids) {
    prompts.push_back(parse_id_list(ids, "--ids"));
    texts.emplace_back();
  }
  if (vm.count("prompt")) {
    if (!tok) bad_input("--prompt: {} has no tokenizer; give token ids with --ids", cfg.dir.string());
    std::string text = o.prompt;
    if (o.chat) text = apply_chat_template({{"user", o.prompt}}, tok->chat_template(), true);
    prompts.push_back(tok->encode(text));
    texts.push_back(text);
    if (prompts.back().empty()) bad_input("--prompt: the prompt is empty (it encodes to no tokens)");
  }
  for (std::size_t r = 0; r < prompts.size(); ++r)
    for (auto id : prompts[r])
      if (id >= cfg.vocab_size) bad_input("prompt {}: token id {} is outside the vocabulary [0, {})", r, id, cfg.vocab_size);
  return prompts;
}

void print_json(const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion,
                const std::optional<std::string>& text, const std::string& finish, const nlohmann::json* history) {
  nlohmann::json j{{"prompt_ids", prompt}, {"completion_ids", completion}, {"finish_reason", finish}};
  j["completion"] = text ? nlohmann::json(*text) : nlohmann::json(nullptr);
  if (history) j["history"] = *history;
  std::cout << j.dump() << "\n";
}

int run_autoregressive(Session& s, const GenerateOptions& o, const po::variables_map& vm,
                       const std::vector<std::vector<std::int32_t>>& prompts, const std::optional<Tokenizer>& tok,
                       CaptureTarget& target) {
  ArOptions a = ar_options(s, request(o, vm), tok);
  for (std::size_t r = 0; r < prompts.size(); ++r) a.seeds.push_back(o.seed + r);  // request r: seed + r
  a.use_cache = !o.no_cache;

  std::optional<StreamDecoder> stream;
  const bool streaming = !o.json && prompts.size() == 1 && tok;
  if (streaming) stream.emplace(*tok, false);
  StopStringFilter shown(o.stop);  // the terminal never shows a stop string or what follows it
  SessionDecodeForward fwd(s);
  const auto res = generate_autoregressive_captured(fwd, prompts, a, target.spec, prompt_indices(prompts.size()),
                                                    [&](const ArStep& st) {
    if (stream && st.new_tokens[0] >= 0) std::cout << shown.push(stream->push(st.new_tokens[0])) << std::flush;
  });
  if (streaming) std::cout << shown.push(stream->finish()) << shown.finish() << "\n";
  for (std::size_t r = 0; r < res.completions.size(); ++r) {
    const auto& c = res.completions[r];
    const auto text = completion_text(tok, c.tokens, /*diffusion=*/false, a.stop_strings);
    write_prompt(target, res.captured, r, c.prompt, c.tokens, text, c.finish_reason, a.seeds[r]);
    if (o.json) print_json(c.prompt, c.tokens, text, c.finish_reason, nullptr);
    else if (!streaming) std::cout << (text ? *text : nlohmann::json(c.tokens).dump()) << "\n";
  }
  return 0;
}

int run_diffusion(Session& s, const GenerateOptions& o, const po::variables_map& vm,
                  const std::vector<std::vector<std::int32_t>>& prompts, const std::optional<Tokenizer>& tok,
                  CaptureTarget& target) {
  DiffusionOptions d = diffusion_options(s, request(o, vm));
  for (std::size_t r = 0; r < prompts.size(); ++r) d.seeds.push_back(o.seed + r);

  // history[r]: row r's canvas after every step, left padding removed.
  std::vector<nlohmann::json> history(prompts.size(), nlohmann::json::array());
  SessionDecodeForward fwd(s);
  const auto cap = diffusion_generate_captured(fwd, prompts, d, target.spec, prompt_indices(prompts.size()),
                                              [&](const DiffusionStep& st) {
    if (!o.history) return;
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      const auto pad = st.length - d.max_new_tokens - static_cast<std::int64_t>(prompts[r].size());
      auto b = st.canvas.begin() + static_cast<std::int64_t>(r) * st.length;
      history[r].push_back(std::vector<std::int32_t>(b + pad, b + st.length));
    }
  });
  const auto& res = cap.result;
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const auto text = completion_text(tok, res.completions[r], /*diffusion=*/true, {});
    write_prompt(target, cap.captured, r, prompts[r], res.completions[r], text, "length", d.seeds[r]);
    if (o.json) print_json(prompts[r], res.completions[r], text, "length", o.history ? &history[r] : nullptr);
    else std::cout << (text ? *text : nlohmann::json(res.completions[r]).dump()) << "\n";
  }
  return 0;
}

// Resolves --hooks (unknown names fail here, before the file exists) and opens --out.
CaptureTarget open_capture(Session& s, const GenerateOptions& o, const std::vector<std::vector<std::int32_t>>& prompts) {
  CaptureTarget t;
  if (o.out.empty()) return t;
  t.spec = make_capture_spec(s, o.capture);
  nlohmann::json run{{"command", "generate"}, {"prompts", prompts}, {"max_new_tokens", o.max_new_tokens},
                     {"seed", o.seed}, {"capture", capture_config(o.capture)}};
  SinkOptions so;
  so.path = o.out;
  so.storage = storage_dtype(o.capture.storage);
  so.compress = o.capture.compress;
  so.overwrite = o.overwrite;
  so.diffusion = s.info().decoding == DecodingKind::MaskedDiffusion;
  t.sink = PluginRegistry::instance().sink("hdf5");
  t.sink->open(so, run_metadata(s, run.dump(), o.capture.storage), t.spec.hooks);
  return t;
}

}  // namespace

int cmd_generate(const Args& args) {
  GenerateOptions o;
  po::options_description desc("generate options");
  add_common_options(desc, o.common);
  desc.add_options()
      ("prompt", po::value(&o.prompt), "prompt text (needs the model's tokenizer)")
      ("ids", po::value(&o.ids)->composing(), "prompt token ids, e.g. 1,2,3; repeat for a batch of prompts")
      ("chat", po::bool_switch(&o.chat), "wrap --prompt in the model's chat template")
      ("max-new-tokens", po::value(&o.max_new_tokens), "tokens to generate (default: generation_config.json, else 64)")
      ("temperature", po::value<double>(), "0: greedy / argmax")
      ("top-k", po::value<std::int64_t>(), "keep the k most likely tokens")
      ("top-p", po::value<double>(), "nucleus sampling mass")
      ("repetition-penalty", po::value<double>(), "autoregressive only")
      ("seed", po::value(&o.seed)->default_value(0), "seed of the first prompt; prompt r uses seed + r")
      ("steps", po::value<std::int64_t>(), "diffusion steps (default: max-new-tokens)")
      ("alg", po::value<std::string>(), "origin, maskgit_plus, topk_margin or entropy (default entropy)")
      ("alg-temp", po::value(&o.alg_temp), "diffusion: > 0 samples positions from softmax(conf / alg_temp)")
      ("eps", po::value<double>(), "diffusion: final timestep (default 1e-3)")
      ("stop", po::value(&o.stop)->composing(),
       "autoregressive: stop when the completion text contains this string (repeatable); the text "
       "ends before it, the ids keep every token up to the one that completed it")
      ("json", po::bool_switch(&o.json), "print one JSON object per prompt")
      ("history", po::bool_switch(&o.history), "diffusion, with --json: the canvas after every step")
      ("no-kv-cache", po::bool_switch(&o.no_cache), "autoregressive: recompute the whole prefix every step")
      ("out", po::value(&o.out), "HDF5 file for the activations selected with --hooks")
      ("overwrite", po::bool_switch(&o.overwrite), "replace an existing --out file");
  add_capture_options(desc, o.capture);
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde generate --model DIR (--prompt T | --ids 1,2,3 ...) [--chat] [--max-new-tokens N] [--json]",
                     desc, vm))
    return 0;
  if (vm.count("hooks") != vm.count("out")) bad_input("--hooks and --out go together: give both or neither");
  check_capture_options(o.capture);
  if (o.ids.empty() == !vm.count("prompt")) bad_input("give --prompt or --ids (not both)");
  if (o.chat && !vm.count("prompt")) bad_input("--chat needs --prompt");
  if (auto s = flag<std::int64_t>(vm, "steps"); s && *s < 1) bad_input("--steps must be at least 1, got {}", *s);
  if (auto a = flag<std::string>(vm, "alg")) parse_diffusion_alg(*a);

  auto session = open_session(o.common);
  const auto& cfg = session->config();
  std::optional<Tokenizer> tok;
  if (Tokenizer::available(session->model_dir())) tok.emplace(Tokenizer::load(session->model_dir()));
  std::vector<std::string> prompt_texts;
  const auto prompts = read_prompts(o, vm, cfg, tok, prompt_texts);
  if (!vm.count("max-new-tokens")) o.max_new_tokens = cfg.generation.max_new_tokens.value_or(64);
  if (o.max_new_tokens < 1) bad_input("--max-new-tokens must be at least 1, got {}", o.max_new_tokens);
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const auto total = static_cast<std::int64_t>(prompts[r].size()) + o.max_new_tokens;
    if (total > cfg.max_position_embeddings)
      bad_input("prompt {}: {} prompt tokens + {} new tokens = {} exceed max_position_embeddings {}", r,
                prompts[r].size(), o.max_new_tokens, total, cfg.max_position_embeddings);
  }
  CaptureTarget target = open_capture(*session, o, prompts);
  target.prompt_texts = prompt_texts;
  const int rc = session->info().decoding == DecodingKind::MaskedDiffusion
                     ? run_diffusion(*session, o, vm, prompts, tok, target)
                     : run_autoregressive(*session, o, vm, prompts, tok, target);
  if (target.sink) target.sink->close();
  return rc;
}

}  // namespace sonde::cli
