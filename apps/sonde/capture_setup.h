#pragma once
// The capture options shared by generate and batch (--hooks, --positions, --diffusion-capture,
// --storage-dtype) and their translation into a core CaptureSpec.
#include "app_common.h"

#include <sonde/capture.h>
#include <sonde/session.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace sonde::cli {

struct CaptureOptions {
  std::string hooks, positions = "all", diffusion_capture = "commit", storage = "f32";
  bool compress = false;  // shuffle + deflate, whole chunks compressed by the writer
};

void add_capture_options(po::options_description& desc, CaptureOptions& o);
// Checks the policies and the storage dtype before anything is opened.
void check_capture_options(const CaptureOptions& o);
DType storage_dtype(const std::string& name);
// The selected hooks (closest names suggested for unknown ones), the policies, and the special
// ids of the model's config. record_steps for diffusion models.
CaptureSpec make_capture_spec(Session& s, const CaptureOptions& o);
// Row kind "special": the config's bos/eos/pad/mask ids and the tokenizer's special tokens.
std::function<bool(std::int32_t)> special_token_test(const Session& s);
// The capture part of run_config_json: what decides the file's contents.
nlohmann::json capture_config(const CaptureOptions& o);

}  // namespace sonde::cli
