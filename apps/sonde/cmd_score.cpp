// sonde score: log-likelihood of completions given prompts (core score.h). Input lines
// {"id", "prompt" | "messages" | "ids", "completion" | "completion_ids"}; output lines carry the id,
// the per-token log-probabilities (autoregressive) and their sum as "logprob"; for a diffusion
// model, the Monte Carlo estimate of the bound as "logprob" with its "stderr".
#include "app_common.h"
#include "commands.h"

#include <sonde/chat.h>
#include <sonde/capture.h>
#include <sonde/error.h>
#include <sonde/hooks.h>
#include <sonde/model_dir.h>
#include <sonde/registry.h>
#include <sonde/sink.h>
#include <sonde/score.h>
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

namespace sonde::cli {

namespace {

std::vector<std::int32_t> id_array(const nlohmann::json& j, const std::string& where, const char* key) {
  const auto& a = j.at(key);
  bool ok = a.is_array() && !a.empty();
  for (const auto& x : a.is_array() ? a : nlohmann::json::array()) ok = ok && x.is_number_integer();
  if (!ok) bad_input("{}: '{}' must be a non-empty list of token ids", where, key);
  return a.get<std::vector<std::int32_t>>();
}

std::string text_of(const nlohmann::json& j, const std::string& where, const char* key) {
  if (!j.at(key).is_string()) bad_input("{}: '{}' must be a string", where, key);
  return j.at(key).get<std::string>();
}

const Tokenizer& need(const Tokenizer* tok, const std::string& where) {
  if (!tok) bad_input("{}: the model has no tokenizer; give ids and completion_ids", where);
  return *tok;
}

struct Item {
  std::string id;
  std::vector<std::int32_t> prompt, completion;
};

Item parse_line(const nlohmann::json& j, const std::string& where, const Tokenizer* tok, std::size_t index) {
  if (!j.is_object()) bad_input("{}: not a JSON object", where);
  for (const auto& [k, v] : j.items())
    if (k != "id" && k != "prompt" && k != "messages" && k != "ids" && k != "completion" && k != "completion_ids")
      bad_input("{}: unknown key '{}' (keys: id, prompt, messages, ids, completion, completion_ids)", where, k);
  Item it;
  it.id = j.contains("id") ? (j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump()) : std::to_string(index);
  const int prompts = static_cast<int>(j.contains("prompt")) + j.contains("messages") + j.contains("ids");
  if (prompts != 1) bad_input("{}: give exactly one of prompt, messages, ids", where);
  if (j.contains("completion") == j.contains("completion_ids")) bad_input("{}: give exactly one of completion, completion_ids", where);
  if (j.contains("ids")) {
    it.prompt = id_array(j, where, "ids");
  } else if (j.contains("prompt")) {
    it.prompt = need(tok, where).encode(text_of(j, where, "prompt"));
  } else {
    std::vector<ChatMessage> msgs;
    if (!j["messages"].is_array()) bad_input("{}: 'messages' must be a list", where);
    for (const auto& m : j["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m.contains("content")) bad_input("{}: a message needs role and content", where);
      msgs.push_back(ChatMessage{m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    it.prompt = need(tok, where).encode(apply_chat_template(msgs, tok->chat_template(), true));
  }
  it.completion = j.contains("completion_ids") ? id_array(j, where, "completion_ids") : need(tok, where).encode(text_of(j, where, "completion"));
  return it;
}

void as_flag_hooks(Session& s, const std::string& sel, std::vector<HookPoint>& out) {
  try {
    out = HookSelector::parse(sel).resolve(s.hook_points(), s.config().num_hidden_layers);
    require_fixed_row_shapes(out);
  } catch (const Error& e) {
    if (e.setting().empty()) throw;
    throw Error(e.kind(), fmt::format("--hooks: {}", e.detail()));
  }
}

// A one-shot sonde.acts/1 file (written as OUT.partial, renamed when scoring ends).
std::shared_ptr<Sink> open_score_sink(const Session& s, const std::string& out, const std::vector<HookPoint>& hooks,
                                      const std::string& sel, const std::string& input) {
  auto sink = PluginRegistry::instance().sink("hdf5");
  SinkOptions so;
  so.path = out + ".partial";
  so.overwrite = true;
  const std::string run_config = nlohmann::json{{"command", "score"}, {"hooks", sel}, {"input_sha256", sha256_file(input)}}.dump();
  RunMetadata meta;
  meta.strings = {{"model_arch", s.info().arch}, {"model_path", std::filesystem::absolute(s.model_dir()).string()},
                  {"config_json", s.config().raw_json}, {"run_config_json", run_config},
                  {"run_config_sha256", sha256_hex(run_config.data(), run_config.size())}, {"backend", s.backend_name()},
                  {"compute_dtype", "f32"}, {"compute", s.compute()}, {"storage_dtype", "f32"}};
  meta.ints = {{"prediction_shift", s.info().prediction_shift}};
  sink->open(so, meta, hooks);
  return sink;
}

// Rows: the prompt's slots (kind prompt, step -1), then the completion's (kind generated).
void end_score_prompt(Sink& sink, std::int64_t idx, const std::string& id, const std::vector<std::int32_t>& prompt,
                      const std::vector<std::int32_t>& completion) {
  std::vector<RowRecord> rows;
  std::vector<std::int32_t> all = prompt;
  all.insert(all.end(), completion.begin(), completion.end());
  for (std::size_t t = 0; t < all.size(); ++t)
    rows.push_back({idx, static_cast<std::int32_t>(t), all[t], -1, t < prompt.size() ? RowKind::Prompt : RowKind::Generated});
  sink.add_rows(rows);
  PromptRecord rec;
  rec.prompt_idx = idx;
  rec.id = id;
  rec.finish_reason = "score";
  rec.token_ids = all;
  sink.end_prompt(rec);
}

}  // namespace

int cmd_score(const Args& args) {
  CommonOptions common;
  std::string input, output;
  DiffusionScoreOptions d;
  bool overwrite = false, record_masks = false;
  std::string hooks, out_h5;
  po::options_description desc("score options");
  add_common_options(desc, common);
  desc.add_options()
      ("input", po::value(&input)->required(), "JSONL: {\"id\", \"prompt\" | \"messages\" | \"ids\", \"completion\" | \"completion_ids\"}")
      ("output", po::value(&output)->required(), "JSONL: id, token_logprobs, logprob, ... per input line")
      ("samples", po::value(&d.samples)->default_value(32), "diffusion: Monte Carlo samples (forward passes)")
      ("coupled", po::bool_switch(&d.coupled), "diffusion: complementary mask pairs (each token scored once per pair)")
      ("seed", po::value(&d.seed)->default_value(0), "diffusion: the masks' seed (line i uses seed + i)")
      ("record-masks", po::bool_switch(&record_masks), "diffusion: each sample's t, weight, masked indices and loss")
      ("hooks", po::value(&hooks), "autoregressive: hooks to capture over prompt + completion (with --out)")
      ("out", po::value(&out_h5), "HDF5 activation file for --hooks (sonde.acts/1; rows: prompt then completion)")
      ("overwrite", po::bool_switch(&overwrite), "replace an existing --output / --out");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde score --model DIR --input F.jsonl --output S.jsonl [--samples K --coupled --seed S]", desc, vm))
    return 0;
  if (!std::filesystem::exists(input)) bad_input("--input: {} does not exist", input);
  if (std::filesystem::exists(output) && !overwrite) bad_input("--output: {} exists (use --overwrite to replace it)", output);
  if (d.samples < 1 || (d.coupled && d.samples % 2)) bad_input("--samples: {} (with --coupled an even number >= 2)", d.samples);
  if (hooks.empty() != out_h5.empty()) bad_input("--hooks and --out go together");
  if (!out_h5.empty() && std::filesystem::exists(out_h5) && !overwrite) bad_input("--out: {} exists (use --overwrite to replace it)", out_h5);
  auto session = open_session(common);
  const Tokenizer* tok = session->tokenizer();
  std::vector<HookPoint> captured;
  if (!hooks.empty()) {
    if (session->info().diffusion())
      bad_input("--hooks: capturing while scoring is for autoregressive models ({} is not)", session->info().arch);
    as_flag_hooks(*session, hooks, captured);
  }

  std::vector<Item> items;  // every line checked before anything is written
  std::ifstream in(input);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", input, n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      bad_input("{}: not JSON", where);
    }
    items.push_back(parse_line(j, where, tok, items.size()));
    session->check_ids(items.back().prompt);
    session->check_ids(items.back().completion);
  }
  if (items.empty()) bad_input("--input: {} has no lines", input);

  const bool diffusion = session->info().diffusion();
  std::shared_ptr<Sink> sink;
  std::set<std::string> taps;
  if (!captured.empty()) {
    sink = open_score_sink(*session, out_h5, captured, hooks, input);
    for (const auto& h : captured) taps.insert(h.name);
  }
  const std::string partial = output + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    if (!out) bad_input("--output: cannot write {}", partial);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& it = items[i];
      nlohmann::json j{{"id", it.id}, {"prompt_tokens", it.prompt.size()}, {"completion_tokens", it.completion.size()}};
      if (!diffusion) {
        const auto idx = static_cast<std::int64_t>(i);
        const ArScore s = score_autoregressive(*session, it.prompt, it.completion, taps, [&](const std::string& hook, const TensorView& v) {
          Shape rows = v.shape;  // [1, T, ...] -> [T, ...]
          for (int k = 1; k < rows.rank; ++k) rows[k - 1] = rows[k];
          rows.rank -= 1;
          sink->write(TapRecord{hook, idx}, v.reshaped(rows));
        });
        if (sink) end_score_prompt(*sink, idx, it.id, it.prompt, it.completion);
        j.update({{"token_logprobs", s.token_logprobs}, {"logprob", s.logprob}, {"mean_logprob", s.mean_logprob},
                  {"perplexity", s.perplexity}});
      } else {
        DiffusionScoreOptions o = d;
        o.seed = d.seed + i;
        const DiffusionScore s = score_diffusion(*session, it.prompt, it.completion, o);
        j.update({{"logprob", s.logprob}, {"stderr", s.stderr_}, {"samples", d.samples}, {"coupled", d.coupled}, {"seed", o.seed}});
        if (record_masks) {
          nlohmann::json m = nlohmann::json::array();
          for (const auto& x : s.samples) m.push_back({{"t", x.t}, {"weight", x.weight}, {"masked", x.masked}, {"loss", x.loss}});
          j["masks"] = m;
        }
      }
      out << j.dump() << "\n";
    }
  }
  if (sink) {
    sink->close();
    std::filesystem::rename(out_h5 + ".partial", out_h5);
  }
  std::filesystem::rename(partial, output);
  std::cout << "scored " << items.size() << " completions -> " << output << "\n";
  return 0;
}

}  // namespace sonde::cli
