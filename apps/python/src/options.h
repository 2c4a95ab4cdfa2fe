#pragma once
// The Python package's calls as JSON (built by sonde/_model.py): requests and run options, read
// into the run layer's types with the same field names and checks as a dataset line.
#include <sonde/run.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sonde::py {

struct CallSpec {
  std::vector<Request> requests;
  RunOptions options;
  std::string dataset;     // a JSONL file read on the worker (sonde.batch)
  bool skip_bad = false;
  bool memory = false;     // capture into a MemorySink (run_with_cache, generate)
  bool stream = false;     // queue tokens and diffusion steps as events (generator form)
  bool progress = false;   // queue progress events
  bool stop_mid_batch = true;  // cancel at the next token or step, not only between micro-batches
};

// BadInput naming the field and value for anything malformed.
CallSpec parse_call(const std::string& requests_json, const std::string& options_json);

}  // namespace sonde::py
