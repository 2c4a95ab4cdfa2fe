// The routes of sonde serve (server.h). A handler parses the body (protocol.cpp), submits its
// prompts to the engine (submit.cpp) and answers when they end, or streams them (stream.cpp).
// Every refusal is an OpenAI error object; nothing a client sends stops the server.
#include "server.h"

#include "mirror.h"
#include "respond.h"
#include "stream.h"

#include <sonde/error.h>
#include <sonde/log.h>

#include <httplib.h>

#include <sys/socket.h>

#include <fmt/format.h>

namespace sonde::serve {
namespace server_impl {

using nlohmann::json;

// How long a non-streamed handler waits itself before its body becomes a deferred one (whose
// status is then 200 whatever happens).
constexpr double kAnswerInHandler = 1.0;
constexpr int kMaxDepth = 64;

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) { reply(res, e.status, error_body(e)); }

// Nesting deeper than kMaxDepth is refused before parsing: the values are walked recursively later.
void check_depth(const std::string& body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) throw ApiError(400, "", fmt::format("the body nests deeper than {} levels", kMaxDepth));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

json parse_body(const httplib::Request& req) {
  if (req.body.empty()) throw ApiError(400, "", "the request has no body (a JSON object)");
  check_depth(req.body);
  try {
    return json::parse(req.body);
  } catch (const json::exception& e) {
    throw ApiError(400, "", fmt::format("the body is not JSON: {}", e.what()));
  }
}

bool authorized(const Service& svc, const httplib::Request& req) {
  if (svc.config.api_key.empty()) return true;
  const std::string want = "Bearer " + svc.config.api_key;
  return req.get_header_value("Authorization") == want || req.get_header_value("x-api-key") == svc.config.api_key;
}

}  // namespace server_impl

HttpServer::HttpServer(Service& svc) : svc_(svc), http_(std::make_unique<httplib::Server>()) {
  // Each running, waiting or streaming request holds a worker; with enough of them the engine's
  // queue, not the pool's, is what fills up, and the client gets a 429 rather than a wait.
  const auto& c = svc.config;
  const auto threads = static_cast<std::size_t>(c.http_threads > 0 ? c.http_threads : c.slots + c.max_waiting + 16);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(static_cast<std::size_t>(svc.config.max_body));
  http_->set_keep_alive_timeout(2);
  http_->set_read_timeout(10);
  http_->set_write_timeout(10);
  // SO_REUSEADDR, not the library's default SO_REUSEPORT, under which a second server on the same
  // port would start too and share its connections. The socket is kept to deepen its backlog.
  http_->set_socket_options([this](int fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = fd;
  });
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind(const std::string& host, int port) {
  const int got = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (got <= 0) bad_input("--host/--port: cannot listen on {}:{}", host, port);
  // The library listens with a backlog of 5: a burst of clients connecting at once (16 in the
  // load test) overflowed it and some got a reset. listen() again raises it.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return got;
}

void HttpServer::run() { http_->listen_after_bind(); }

void HttpServer::stop() { http_->stop(); }

void HttpServer::routes() {
  using namespace server_impl;
  // The handlers outlive this function: they hold the Service by pointer.
  Service* const svc = &svc_;
  // Each endpoint's handler, wrapped: the API key, errors as error objects, the metrics.
  const auto guarded = [svc](std::string name, bool keyed, auto handler) {
    return [svc, name, keyed, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        if (keyed && !server_impl::authorized(*svc, req))
          throw ApiError(401, "", "a valid API key is needed (Authorization: Bearer KEY)", "authentication_error");
        handler(req, res);
      } catch (const ApiError& e) {
        reply_error(res, e);
      } catch (const Error& e) {
        reply_error(res, ApiError(e.kind() == ErrorKind::BadInput ? 400 : 500, "", e.what(),
                                  e.kind() == ErrorKind::BadInput ? "invalid_request_error" : "server_error"));
      } catch (const std::exception& e) {
        reply_error(res, ApiError(500, "", fmt::format("internal error: {}", e.what()), "server_error"));
      }
      svc->metrics.request(name, res.status);
    };
  };
  const auto generation = [svc](Endpoint endpoint) {
    return [svc, endpoint](const httplib::Request& req, httplib::Response& res) {
      auto parsed = std::make_shared<const ParsedRequest>(parse_request(endpoint, parse_body(req), svc->traits));
      auto sub = std::make_shared<Submitted>(svc->mirror ? svc->mirror->submit(req.body, *parsed) : submit_request(*svc, *parsed));
      if (parsed->stream) return stream_response(*svc, parsed, sub, res);
      if (!wait_all(*sub, kAnswerInHandler)) return deferred_response(*svc, parsed, sub, res);
      reply(res, 200, finished_body(*svc, *parsed, *sub));
    };
  };

  http_->Get("/health", guarded("health", false, [](const httplib::Request&, httplib::Response& res) {
               reply(res, 200, {{"status", "ok"}});
             }));
  http_->Get("/v1/models", guarded("models", true, [svc](const httplib::Request&, httplib::Response& res) {
               const Service& sv = *svc;
               const auto& info = sv.session.info();
               json m{{"id", sv.model_id}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "sonde"},
                      {"sonde", {{"arch", info.arch}, {"decoding", sv.traits.diffusion ? "diffusion" : "autoregressive"},
                                 {"vocab_size", sv.traits.vocab_size}, {"tokenizer", sv.traits.tokenizer},
                                 {"chat_template", sv.traits.chat_template}, {"max_context", sv.config.max_context},
                                 {"max_tokens_cap", sv.config.max_tokens_cap}}}};
               reply(res, 200, {{"object", "list"}, {"data", json::array({m})}});
             }));
  http_->Get("/metrics", guarded("metrics", true, [svc](const httplib::Request&, httplib::Response& res) {
               res.set_content(svc->metrics.render(svc->engine.stats(), svc->live_jobs()), "text/plain; version=0.0.4");
             }));
  http_->Post("/v1/completions", guarded("completions", true, generation(Endpoint::Completions)));
  http_->Post("/v1/chat/completions", guarded("chat", true, generation(Endpoint::Chat)));
  http_->Post("/v1/activations", guarded("activations", true, generation(Endpoint::Activations)));

  // Statuses the library sets itself (404, 413 for a body over the limit, 400 for a bad request
  // line) with an error object, unless a handler wrote its own.
  http_->set_error_handler([svc](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = fmt::format("{} {}: HTTP status {}", req.method, req.path, res.status);
    if (res.status == 404) msg = fmt::format("no route {} {} (see GET /v1/models, POST /v1/completions, ...)", req.method, req.path);
    if (res.status == 413) msg = fmt::format("the body is larger than this server's limit of {} bytes", svc->config.max_body);
    reply_error(res, ApiError(res.status, "", msg, res.status >= 500 ? "server_error" : "invalid_request_error"));
    svc->metrics.request("other", res.status);
  });
}

}  // namespace sonde::serve
