#pragma once
// The Session as the run layer reads it to prepare requests for the engine (engine_request,
// make_capture_spec, resolve_edits) in a front end that submits one request at a time (Python's
// Model.submit, sonde serve): its config, hook points, tokenizer, backend and compute mode, and
// no forwards, which the engine runs. Its hook points are the model's own, not those of the
// Session's current edits (`.pre_edit` points), which the engine changes on its own thread.
#include <sonde/run.h>
#include <sonde/session.h>

#include <memory>

namespace sonde {

std::unique_ptr<RunModel> session_request_view(Session& session);

}  // namespace sonde
