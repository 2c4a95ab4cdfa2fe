#pragma once
// Server-sent events for a streamed completion or chat completion (OpenAI's chunk objects, ending
// with "data: [DONE]"): a token's text as it comes (autoregressive), or the canvas after each
// denoising step (diffusion). A write that fails (the client has gone) cancels the request.
#include "respond.h"

#include <httplib.h>

#include <memory>

namespace sonde::serve {

void stream_response(Service& svc, std::shared_ptr<const ParsedRequest> req, std::shared_ptr<Submitted> sub,
                     httplib::Response& res);

// A non-streamed response whose result is not ready yet: a chunked JSON body that sends a
// newline (JSON's leading whitespace) each second while it waits, so that a client that has
// gone is noticed by the failed write and its request cancelled.
void deferred_response(Service& svc, std::shared_ptr<const ParsedRequest> req, std::shared_ptr<Submitted> sub,
                       httplib::Response& res);

// The finished request's body (completion, chat or activations), or its error as an ApiError.
nlohmann::json finished_body(Service& svc, const ParsedRequest& req, const Submitted& sub);
// Tokens and timings of a finished request into the metrics.
void record_finished(Service& svc, const Submitted& sub);

}  // namespace sonde::serve
