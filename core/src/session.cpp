#include <sonde/capture.h>
#include <sonde/compute.h>
#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/model_dir.h>
#include <sonde/registry.h>
#include <sonde/session.h>
#include <sonde/tokenizer.h>

#include "plan_cache.h"

#include <algorithm>
#include <thread>

namespace sonde {

Session::~Session() = default;

namespace {
// --compute: one of <sonde/compute.h>'s modes; int8 is W8A8 and so takes the q8 weights, bf16
// multiplies bf16 weights and so does not take them.
void check_compute(const std::string& compute, const std::string& weights) {
  // Checked here, before a backend sees it, so that every front end gets the same BadInput.
  if (weights != "native" && weights != "q8") bad_setting("weights", "'{}' is not native or q8", weights);
  const auto c = parse_compute(compute);
  if (!c) bad_setting("compute", "'{}' is not f32, bf16 or int8", compute);
  if (*c == Compute::int8 && weights != "q8")
    bad_setting("compute", "int8 (int8 activations times int8 weights) needs the q8 weights, not '{}'", weights);
  if (*c == Compute::bf16 && weights == "q8")
    bad_setting("compute", "bf16 multiplies bf16 weights; with the q8 weights use int8 or f32");
}
}  // namespace

std::unique_ptr<Session> Session::open(const SessionOptions& o) {
  auto& registry = PluginRegistry::instance();
  if (registry.searched().empty()) registry.scan(PluginRegistry::search_path(o.plugin_dir));

  // A thread count far past the cores is a typo, and thousands of threads exhaust the process.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int max_threads = std::max(64, 4 * cores);
  if (o.threads < 0 || o.threads > max_threads)
    bad_input("threads: {} is outside 0..{} (0: every core; this machine has {})", o.threads, max_threads, cores);
  check_compute(o.compute, o.weights);
  std::unique_ptr<Session> s(new Session());
  s->compute_ = o.compute;
  s->dir_ = resolve_model_dir(o.model);
  s->config_ = ModelConfig::load(s->dir_);
  try {  // an unknown variant is a fact of the checkpoint's config.json: name the file and field
    s->model_ = registry.model_for(s->config_.model_type);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    bad_input("{}: field 'model_type' is '{}': {}", (s->dir_ / "config.json").string(), s->config_.model_type, e.what());
  }
  s->model_->configure(s->config_);
  s->weights_ = std::make_unique<WeightSource>(WeightSource::open(s->dir_));

  s->backend_ = registry.backend(o.backend);
  s->backend_->init(BackendOptions{o.threads, o.weights, o.shard_backend, o.tensor_parallel, o.compute});
  s->reference_ = s->backend_->info().name == "reference" ? s->backend_ : registry.backend("reference");
  // The fallback for what the backend declines computes in the session's mode too.
  BackendOptions ref{1};
  ref.compute = o.compute;
  s->reference_->init(ref);
  s->model_->load(*s->weights_, *s->backend_);
  s->executor_ = std::make_unique<Executor>(*s->backend_, *s->reference_);
  s->plans_ = std::make_unique<PlanCache>();
  s->info_ = s->model_->info();
  const auto& kv = s->info_;
  if (kv.new_k.size() != kv.past_k.size() || kv.new_v.size() != kv.past_k.size() || kv.past_v.size() != kv.past_k.size())
    runtime_error("model plugin {}: KV cache names for {} / {} past and {} / {} new layers", kv.arch, kv.past_k.size(),
                  kv.past_v.size(), kv.new_k.size(), kv.new_v.size());
  for (std::size_t i = 0; i < kv.past_k.size(); ++i) {
    s->kv_hooks_[kv.new_k[i]] = {i, false};
    s->kv_hooks_[kv.new_v[i]] = {i, true};
  }
  spdlog::debug("loaded {} ({}) from {} on backend {}", s->config_.model_type, s->model_->info().arch,
                s->dir_.string(), s->backend_->info().name);
  return s;
}

void Session::check_ids(const ForwardInput& in) const {
  const std::int64_t n = in.batch * in.tokens;
  if (in.tokens <= 0 || in.batch <= 0) bad_input("forward: empty input ({} rows of {} tokens)", in.batch, in.tokens);
  if (static_cast<std::int64_t>(in.ids.size()) != n)
    runtime_error("forward: {} ids for a batch of {} x {}", in.ids.size(), in.batch, in.tokens);
  check_ids(in.ids);
}

void Session::check_ids(const std::vector<std::int32_t>& ids) const {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= config_.vocab_size)
      bad_input("token id {} at position {} is outside the vocabulary [0, {}) of {}", ids[i], i, config_.vocab_size,
                (dir_ / "config.json").string());
}

Tensor Session::forward(const ForwardInput& in, bool need_logits, const std::set<std::string>& taps,
                        const Executor::Tap& tap) {
  const std::int64_t n = in.batch * in.tokens;
  check_ids(in);
  std::vector<std::int32_t> positions = in.positions;
  if (positions.empty()) {
    positions.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % in.tokens);
  }
  if (static_cast<std::int64_t>(positions.size()) != n) runtime_error("forward: {} positions for {} ids", positions.size(), n);
  if (!in.mask.empty() && static_cast<std::int64_t>(in.mask.size()) != n)
    runtime_error("forward: {} mask entries for {} ids", in.mask.size(), n);

  const auto head = head_rows(in, need_logits, taps);  // not a structured binding: clang 14 cannot capture one
  const std::int64_t lfrom = head.first, lto = head.second;
  const PlanKey key{false, in.batch, in.tokens, !in.mask.empty(), need_logits, false, lfrom, lto};
  const Plan& plan = plans_->get(key, taps, [&] {
    return build_planned(BatchShape{in.batch, in.tokens, !in.mask.empty(), need_logits, 0, lfrom, lto},
                         [&](const std::string& h) { return taps.count(h) > 0; });
  }).plan;

  const Shape bt{in.batch, in.tokens};
  std::map<std::string, TensorView> feeds{
      {"ids", TensorView(const_cast<std::int32_t*>(in.ids.data()), DType::i32, bt)},
      {"positions", TensorView(positions.data(), DType::i32, bt)},
  };
  if (!in.mask.empty()) feeds["mask"] = TensorView(const_cast<std::uint8_t*>(in.mask.data()), DType::u8, bt);
  std::vector<Tensor> edit_storage;
  if (!edits_.empty())
    edit_feeds(edits_, in.edit ? *in.edit : EditCall{}, in.batch, in.tokens, 0, positions, in.mask, edit_storage, feeds);
  auto out = executor_->run(plan, feeds, tap);
  return need_logits ? out.at("logits") : Tensor();
}

// The hooks at the head (the final norm's, the logits, an SAE's points on them) give every slot
// when tapped, and their edits and SAEs act on every slot; the head then runs everywhere.
// "The last slot" is an autoregressive model's next-token row; a diffusion step names its rows.
std::pair<std::int64_t, std::int64_t> Session::head_rows(const ForwardInput& in, bool need_logits,
                                                         const std::set<std::string>& taps) const {
  const std::int64_t T = in.tokens;
  std::int64_t from = 0, to = 0;
  if (in.last_logits_only && info_.decoding == DecodingKind::Autoregressive) from = T - 1, to = T;
  else if (in.logits_from < in.logits_to) from = in.logits_from, to = in.logits_to;
  if (from < 0 || to > T) runtime_error("forward: logits of slots [{}, {}) of a {}-slot forward", from, to, T);
  const auto at_head = [](const std::string& hook) { return hook.starts_with("ln_final.") || hook.starts_with("hook_logits"); };
  bool head_used = std::any_of(taps.begin(), taps.end(), at_head);
  for (const auto& e : edits_) head_used = head_used || at_head(e.hook);
  for (const auto& a : saes_) head_used = head_used || at_head(a.hook) || at_head(a.hook_out);
  if (!need_logits || head_used || from >= to || (from == 0 && to == T)) return {0, 0};
  return {from, to};
}

std::unique_ptr<PlannedGraph> Session::build_planned(const BatchShape& shape, const Executor::Wants& tapped) const {
  auto pg = std::make_unique<PlannedGraph>();
  GraphBuilder b([this](const std::string& name) { return backend_->weight(name); });
  model_->build(shape, b);
  pg->graph = b.finish();
  // SAEs first: an edit of a hook an SAE reads then changes what the SAE sees, and an edit can
  // name the SAE's own points (hook_sae_acts_post).
  if (!saes_.empty()) insert_saes(pg->graph, saes_, [this](const std::string& name) { return backend_->weight(name); });
  if (!edits_.empty()) insert_edits(pg->graph, edits_);
  pg->plan = executor_->plan(pg->graph, shape.need_logits ? std::vector<std::string>{"logits"} : std::vector<std::string>{},
                             tapped);
  pg->past = shape.past_tokens;
  return pg;
}

std::map<std::string, Tensor> Session::run_graph(const Graph& g, const std::vector<std::string>& outputs,
                                                 const std::map<std::string, TensorView>& feeds) {
  const Plan plan = executor_->plan(g, outputs, {});
  return executor_->run(plan, feeds, {});
}

std::vector<HookPoint> Session::hook_points() const {
  auto hooks = model_->hook_points();
  for (const auto& a : saes_) {
    const auto at = std::find_if(hooks.begin(), hooks.end(), [&](const HookPoint& h) { return h.name == a.hook_out; });
    auto points = sae_hook_points(a);
    // A later SAE on the same hook goes after the earlier one's points.
    auto pos = at == hooks.end() ? hooks.end() : at + 1;
    while (pos != hooks.end() && pos->name.rfind(a.hook + ".hook_sae_", 0) == 0) ++pos;
    hooks.insert(pos, points.begin(), points.end());
  }
  if (info().diffusion())
    for (auto& s : diffusion_state_hooks()) hooks.push_back(std::move(s));
  return hooks;
}

const AttachedSae& Session::attach_sae(std::shared_ptr<const Sae> sae, bool splice, bool error_term) {
  const auto& c = sae->config();
  AttachedSae a = resolve_sae(std::move(sae), model_->hook_points(), config_.num_hidden_layers, saes_.size(), splice, error_term);
  for (const auto& s : saes_)
    if (s.hook == a.hook)
      bad_setting("sae", "{}: hook '{}' already has an SAE ({}); one SAE per hook", c.folder, a.hook, s.sae->config().folder);
  // The KV cache keeps these hooks' values by name, before any splice: a spliced K or V would
  // reach this step's attention but not the cache.
  if (splice && kv_hooks_.count(a.hook_out))
    bad_setting("sae", "{}: splicing at '{}' (a hook the KV cache stores) is not supported", c.folder, a.hook_out);
  upload_sae_weights(*backend_, a);
  saes_.push_back(std::move(a));
  plans_->clear();
  return saes_.back();
}

void Session::set_edits(std::vector<Edit> edits) {
  edits_ = std::move(edits);
  plans_->clear();
}

std::int64_t Session::graphs_built() const { return plans_->made(); }

const Tokenizer* Session::tokenizer() const {
  std::call_once(tokenizer_once_, [this] {
    if (Tokenizer::available(dir_)) tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(dir_));
  });
  return tokenizer_.get();
}

}  // namespace sonde
