// sonde forward: one forward pass over one sequence. Writes /input_ids, /logits (unshifted, as
// the model returns them) and the selected hooks at every position, with /rows and /prompts.
#include "app_common.h"
#include "capture_setup.h"
#include "commands.h"
#include "run_metadata.h"

#include <sonde/error.h>
#include <sonde/hooks.h>
#include <sonde/registry.h>
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>

namespace sonde::cli {

namespace {

RowKind row_kind(const ModelConfig& c, const std::function<bool(std::int32_t)>& is_special, std::int32_t id) {
  if (c.mask_token_id && *c.mask_token_id == id) return RowKind::Masked;
  return is_special(id) ? RowKind::Special : RowKind::Prompt;
}

}  // namespace

int cmd_forward(const Args& args) {
  CommonOptions common;
  std::string ids_text, text, out, hooks_spec, storage = "f32";
  bool overwrite = false, compress = false;
  po::options_description desc("forward options");
  add_common_options(desc, common);
  desc.add_options()
      ("ids", po::value(&ids_text), "token ids, e.g. 1,2,3")
      ("text", po::value(&text), "text to tokenize with the model's tokenizer")
      ("out", po::value(&out)->required(), "output HDF5 file")
      ("hooks", po::value(&hooks_spec), "hooks to capture: names, aliases, globs, ranges, comma-separated")
      ("storage-dtype", po::value(&storage)->default_value("f32"), "f32, bf16 or f16")
      ("compress", po::bool_switch(&compress), "shuffle + deflate")
      ("overwrite", po::bool_switch(&overwrite), "replace an existing output file");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde forward --model DIR (--ids 1,2,3 | --text T) --out F.h5 [--hooks SEL]", desc, vm))
    return 0;
  if (vm.count("ids") == vm.count("text")) bad_input("give exactly one of --ids and --text");
  const auto st = parse_dtype(storage);
  if (!st || (*st != DType::f32 && *st != DType::bf16 && *st != DType::f16))
    bad_input("--storage-dtype: '{}' is not f32, bf16 or f16", storage);

  auto session = open_session(common);
  const ModelConfig& cfg = session->config();
  std::vector<std::int32_t> ids;
  if (vm.count("ids")) {
    ids = parse_id_list(ids_text, "--ids");
  } else {
    ids = Tokenizer::load(session->model_dir()).encode(text);
    if (ids.empty()) bad_input("--text: the text encodes to no tokens");
  }
  const auto T = static_cast<std::int64_t>(ids.size());
  if (T > cfg.max_position_embeddings)
    bad_input("--ids: {} tokens exceed max_position_embeddings {}", T, cfg.max_position_embeddings);

  session->check_ids(ids);  // before the output file exists: bad input leaves nothing behind
  if (std::filesystem::exists(out) && !overwrite) bad_input("--out: {} exists (use --overwrite to replace it)", out);

  auto hooks = HookSelector::parse(hooks_spec).resolve(session->hook_points(), cfg.num_hidden_layers);
  for (auto& h : hooks)  // one sequence: attention patterns have exactly T keys per row
    std::replace(h.row_shape.begin(), h.row_shape.end(), kKeysDim, T);
  nlohmann::json run{{"command", "forward"}, {"hooks", hooks_spec}, {"ids", ids}, {"text", text},
                     {"positions", "all"}, {"storage_dtype", storage}, {"compress", compress}};
  auto sink = PluginRegistry::instance().sink("hdf5");
  sink->open(SinkOptions{out, *st, overwrite, compress}, run_metadata(*session, run.dump(), storage), hooks);

  std::set<std::string> taps;
  for (const auto& h : hooks) taps.insert(h.name);
  ForwardInput in;
  in.tokens = T;
  in.ids = ids;
  Tensor logits = session->forward(in, true, taps, [&](const std::string& hook, const TensorView& v) {
    Shape rows = v.shape;  // [1, T, ...] -> [T, ...]
    for (int k = 1; k < rows.rank; ++k) rows[k - 1] = rows[k];
    rows.rank -= 1;
    sink->write(TapRecord{hook, 0}, v.reshaped(rows));
  });

  std::vector<RowRecord> rows;
  const auto is_special = special_token_test(*session);
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int32_t id = ids[static_cast<std::size_t>(t)];
    rows.push_back({0, static_cast<std::int32_t>(t), id, -1, row_kind(cfg, is_special, id)});
  }
  sink->add_rows(rows);
  PromptRecord prompt;
  prompt.id = "0";
  prompt.text = text;
  prompt.finish_reason = "forward";
  prompt.token_ids = ids;
  sink->end_prompt(prompt);
  sink->write_array("/input_ids", TensorView(ids.data(), DType::i32, Shape{T}));
  sink->write_array("/logits", logits.view().reshaped(Shape{T, cfg.vocab_size}));
  sink->close();

  std::cout << "wrote " << out << " (" << session->info().arch << ", backend " << session->backend().info().name
            << ", " << T << " tokens)\n"
            << "  /input_ids  [" << T << "] i32\n"
            << "  /logits     [" << T << ", " << cfg.vocab_size << "] f32\n";
  for (const auto& h : hooks) {
    std::string shape = std::to_string(T);
    for (auto d : h.row_shape) shape += ", " + std::to_string(d);
    std::cout << "  /acts/" << h.name << "  [" << shape << "] " << storage << "\n";
  }
  return 0;
}

}  // namespace sonde::cli
