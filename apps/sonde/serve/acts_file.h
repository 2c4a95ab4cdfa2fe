#pragma once
// A request's activations written on the server (activations_file, under --files-dir).
#include "service.h"

namespace sonde::serve {

// Every prompt's captured rows into req.activations_file (prompt i's rows with prompt_idx i).
// ApiError 400 when the file exists or its directory does not, 409 while another request writes it.
void write_activations_file(Service& svc, const ParsedRequest& req, const Submitted& sub);

}  // namespace sonde::serve
