// The engines of a tensor-parallel sonde serve kept in lockstep (mirror.h).
#include "mirror.h"

#include <sonde/error.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>

namespace sonde::serve {

using nlohmann::json;

namespace {

const char* endpoint_name(Endpoint e) {
  return e == Endpoint::Chat ? "chat" : e == Endpoint::Activations ? "activations" : "completions";
}

Endpoint endpoint_of(const std::string& s) {
  return s == "chat" ? Endpoint::Chat : s == "activations" ? Endpoint::Activations : Endpoint::Completions;
}

}  // namespace

Mirror::Mirror(Service& svc, ProcessGroup& group) : svc_(svc), group_(group) {}

Mirror::~Mirror() {
  if (loop_.joinable()) stop();
}

bool Mirror::busy() const {
  const EngineStats st = svc_.engine.stats();
  return st.running > 0 || st.waiting > 0;
}

std::string Mirror::exchange(const std::string& mine) {
  std::uint64_t n = mine.size();
  group_.broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&n, 1)), 0);
  std::string text(n, '\0');
  if (group_.rank() == 0) std::memcpy(text.data(), mine.data(), n);
  if (n > 0) group_.broadcast(std::as_writable_bytes(std::span<char>(text.data(), n)), 0);
  return text;
}

Submitted Mirror::submit(const std::string& body, const ParsedRequest& req) {
  auto p = std::make_unique<Pending>();
  p->body = body;
  p->req = &req;
  auto result = p->done.get_future();
  {
    std::lock_guard lk(mu_);
    if (stopping_) throw ApiError(503, "", "the server is stopping", "server_error");
    queue_.push_back(std::move(p));
  }
  cv_.notify_all();
  return result.get();
}

void Mirror::cancel(std::int64_t engine_id) {
  auto p = std::make_unique<Pending>();
  p->cancel = engine_id;
  {
    std::lock_guard lk(mu_);
    queue_.push_back(std::move(p));
  }
  cv_.notify_all();
}

void Mirror::lead() {
  loop_ = std::thread([this] {
    while (true) {
      std::vector<std::unique_ptr<Pending>> now;
      bool stop = false;
      {
        std::unique_lock lk(mu_);
        // Idle: wait for work (a short tick, since a request cancelled while waiting ends
        // without a step and nothing else wakes us).
        if (!busy()) cv_.wait_for(lk, std::chrono::milliseconds(50), [&] { return !queue_.empty() || stopping_; });
        now.swap(queue_);
        stop = stopping_ && now.empty() && !busy();
      }
      json list = json::array();
      for (const auto& p : now)
        list.push_back(p->cancel >= 0 ? json{{"cancel", p->cancel}}
                                      : json{{"submit", endpoint_name(p->req->endpoint)}, {"body", p->body}});
      const bool step = !stop && (!now.empty() || busy());
      if (!step && !stop) continue;  // nothing to tell: the other ranks wait in the broadcast
      exchange(json{{"do", list}, {"step", step}, {"stop", stop}}.dump());
      for (auto& p : now) {
        if (p->cancel >= 0) {
          if (svc_.engine.cancel(p->cancel)) svc_.metrics.cancelled();
          continue;
        }
        try {
          p->done.set_value(submit_request(svc_, *p->req));
        } catch (...) {
          p->done.set_exception(std::current_exception());
        }
      }
      if (stop) return;
      svc_.engine.step();
    }
  });
}

void Mirror::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

void Mirror::follow() {
  while (true) {
    const json msg = json::parse(exchange(""));
    for (const auto& item : msg.at("do")) {
      if (item.contains("cancel")) {
        svc_.engine.cancel(item.at("cancel").get<std::int64_t>());
        continue;
      }
      // Rank 0 parsed this body before sending it, and its refusals (a 400 or 429 from
      // preparing it) are met here too: the engines stay equal either way.
      try {
        const ParsedRequest req =
            parse_request(endpoint_of(item.at("submit").get<std::string>()), json::parse(item.at("body").get<std::string>()), svc_.traits);
        submit_request(svc_, req);
      } catch (const ApiError&) {
      } catch (const Error&) {
      }
    }
    if (msg.at("stop").get<bool>()) return;
    if (msg.at("step").get<bool>()) svc_.engine.step();
  }
}

}  // namespace sonde::serve
