// The shared state of sonde serve (service.h).
#include "service.h"

#include "mirror.h"

#include <sonde/error.h>
#include <sonde/session_view.h>
#include <sonde/tokenizer.h>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace sonde::serve {

Service::Service(Session& s, Engine& e, const ServeConfig& c) : session(s), engine(e), config(c) {
  const Tokenizer* tok = s.tokenizer();
  traits.diffusion = s.info().diffusion();
  traits.tokenizer = tok != nullptr;
  traits.chat_template = tok && !tok->chat_template().empty();
  traits.vocab_size = s.config().vocab_size;
  traits.max_tokens_cap = c.max_tokens_cap;
  traits.default_max_tokens = std::min<std::int64_t>(s.config().generation.max_new_tokens.value_or(16), c.max_tokens_cap);
  if (!c.files_dir.empty()) traits.files_dir = std::filesystem::canonical(c.files_dir);
  std::string dir = std::filesystem::absolute(s.model_dir()).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  model_id = c.model_name.empty() ? std::filesystem::path(dir).filename().string() : c.model_name;
  view = session_request_view(s);
  std::string tmpl = (std::filesystem::temp_directory_path() / "sonde-serve-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) runtime_error("serve: cannot make a scratch directory under {}", std::filesystem::temp_directory_path().string());
  scratch = tmpl;
}

void Service::track(const std::vector<std::shared_ptr<Job>>& jobs) {
  std::lock_guard lk(live_mu_);
  if (live_.size() > 1024)
    live_.erase(std::remove_if(live_.begin(), live_.end(), [](const std::weak_ptr<Job>& w) { return w.expired(); }), live_.end());
  live_.insert(live_.end(), jobs.begin(), jobs.end());
}

void Service::cancel_everything() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard lk(live_mu_);
    for (const auto& w : live_)
      if (auto j = w.lock()) jobs.push_back(std::move(j));
  }
  for (const auto& j : jobs)
    if (j->handle && cancel(*j->handle)) metrics.cancelled();
}

bool Service::cancel(const EngineHandle& handle) {
  if (handle.done()) return false;
  if (!mirror) return engine.cancel(handle.id());
  mirror->cancel(handle.id());  // counted by the mirror when it takes effect
  return false;
}

std::int64_t Service::live_jobs() {
  std::lock_guard lk(live_mu_);
  return std::count_if(live_.begin(), live_.end(), [](const std::weak_ptr<Job>& w) { return !w.expired(); });
}

Service::~Service() {
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
}

}  // namespace sonde::serve
