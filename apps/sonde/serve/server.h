#pragma once
// sonde serve's HTTP side (cpp-httplib, docs/serve.md): the routes, the API key, the body limit,
// errors as OpenAI error objects, and the hand-off from a handler to the engine.
#include "service.h"

#include <memory>
#include <string>

namespace httplib {
class Server;
}

namespace sonde::serve {

class HttpServer {
 public:
  explicit HttpServer(Service& svc);
  ~HttpServer();
  // Binds host:port (port 0: a free one); returns the port. BadInput when it cannot.
  int bind(const std::string& host, int port);
  void run();   // serves until stop()
  void stop();  // from any thread: cancels what runs, then ends run()

 private:
  void routes();
  Service& svc_;
  std::unique_ptr<httplib::Server> http_;
  int listen_fd_ = -1;  // the listening socket, as the library made it
};

}  // namespace sonde::serve
