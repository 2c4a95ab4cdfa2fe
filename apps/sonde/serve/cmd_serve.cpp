// sonde serve: an OpenAI-compatible HTTP server on the step-level engine (docs/serve.md). Loads
// the model once, prints the address it listens on, serves until SIGINT or SIGTERM, then cancels
// what still runs and exits 0.
#include "../app_common.h"
#include "../commands.h"
#include "mirror.h"
#include "server.h"

#include <sonde/error.h>

#include <fmt/format.h>

#include <csignal>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>

#include <pthread.h>

namespace sonde::cli {
namespace serve_cmd {

void check_serve_flags(const serve::ServeConfig& c) {
  if (c.port < 0 || c.port > 65535) bad_input("--port: {} is not a port number (0 picks a free one)", c.port);
  if (c.slots < 1) bad_input("--slots: {} is less than 1", c.slots);
  if (c.max_waiting < 0) bad_input("--max-waiting: {} is negative", c.max_waiting);
  if (c.max_tokens_cap < 1) bad_input("--max-tokens-cap: {} is less than 1", c.max_tokens_cap);
  if (c.max_context < 2) bad_input("--max-context: {} is less than 2", c.max_context);
  if (c.max_body < 1024) bad_input("--max-body: {} bytes is less than 1024", c.max_body);
  if (c.http_threads < 0 || c.http_threads > 4096) bad_input("--http-threads: {} is outside [0, 4096]", c.http_threads);
  if (!c.files_dir.empty() && !std::filesystem::is_directory(c.files_dir))
    bad_input("--files-dir: {} is not a directory", c.files_dir);
}

}  // namespace serve_cmd

int cmd_serve(const Args& args) {
  CommonOptions common;
  serve::ServeConfig c;
  po::options_description desc("serve options");
  add_common_options(desc, common);
  desc.add_options()
      ("host", po::value(&c.host)->default_value(c.host), "address to listen on (loopback by default)")
      ("port", po::value(&c.port)->default_value(c.port), "port (0: a free one, printed)")
      ("api-key", po::value(&c.api_key), "clients must send Authorization: Bearer KEY (all but /health)")
      ("files-dir", po::value(&c.files_dir), "the only directory whose files requests may name (vectors, stats)")
      ("served-model-name", po::value(&c.model_name), "the model's id in /v1/models (default: the directory's name)")
      ("slots", po::value(&c.slots)->default_value(c.slots), "sequences running at once in the engine")
      ("max-waiting", po::value(&c.max_waiting)->default_value(c.max_waiting), "sequences waiting beyond the slots (then 429)")
      ("max-tokens-cap", po::value(&c.max_tokens_cap)->default_value(c.max_tokens_cap), "the most max_tokens a request may ask")
      ("max-context", po::value(&c.max_context)->default_value(c.max_context), "prompt + new tokens of one sequence")
      ("max-body", po::value(&c.max_body)->default_value(c.max_body), "request body limit in bytes (then 413)")
      ("http-threads", po::value(&c.http_threads)->default_value(c.http_threads), "HTTP worker threads, connections served at once (0: slots + max-waiting + 16)");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--files-dir D]", desc, vm))
    return 0;
  serve_cmd::check_serve_flags(c);

  // SIGINT and SIGTERM go to one thread of ours (sigwait): blocked before any thread exists.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that has gone is a failed write, not the end

  auto session = open_session(common);
  EngineOptions eo;
  eo.decoding = session->info().decoding;
  eo.slots = c.slots;
  eo.max_waiting = c.max_waiting;
  eo.max_context = c.max_context;
  auto model = session_engine_model(*session);
  Engine engine(*model, eo);
  serve::Service svc(*session, engine, c);

  // Under mpiexec with --backend sharded every rank holds a share of one model: rank 0 serves
  // HTTP and leads, the others follow its engine step for step (mirror.h).
  ProcessGroup* job = current_job();
  std::unique_ptr<serve::Mirror> mirror;
  if (job && job->size() > 1) {
    if (session->backend().info().tensor_parallel != job->size())
      bad_input("--tensor-parallel: sonde serve runs one model over all {} ranks of the job (0 or {}), not {}", job->size(),
                job->size(), session->backend().info().tensor_parallel);
    mirror = std::make_unique<serve::Mirror>(svc, *job);
    if (job->rank() != 0) {
      mirror->follow();
      return 0;
    }
    svc.mirror = mirror.get();
  }

  serve::HttpServer http(svc);
  const int port = http.bind(c.host, c.port);
  if (mirror)
    mirror->lead();
  else
    engine.start();
  std::cout << "sonde serve: " << svc.model_id << " listening on http://" << c.host << ":" << port
            << (mirror ? fmt::format(" ({} ranks, tensor parallel)", job->size()) : std::string()) << std::endl;

  std::atomic<bool> over{false};
  std::thread waiter([&] {
    const timespec tick{0, 200'000'000};
    while (!over) {
      if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
        std::cout << "sonde serve: stopping" << std::endl;
        svc.cancel_everything();
        http.stop();
        return;
      }
    }
  });
  http.run();
  over = true;
  waiter.join();
  svc.cancel_everything();
  if (mirror)
    mirror->stop();  // every rank's engine idle, the others told to stop
  else
    engine.stop();
  return 0;
}

}  // namespace sonde::cli
