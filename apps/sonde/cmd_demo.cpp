// sonde demo: the main job end to end on a built-in model. Makes a tiny random Qwen2 model (once),
// captures the residual stream of every layer for a short text into an HDF5 file through the run
// layer, and shows how to read it.
#include "app_common.h"
#include "commands.h"
#include "make_model.h"

#include <sonde/run.h>

#include <filesystem>
#include <iostream>

namespace sonde::cli {

int cmd_demo(const Args& args) {
  std::string dir = "sonde-demo", backend, plugin_dir, text = "The quick brown fox jumps over the lazy dog.";
  po::options_description desc("demo options");
  desc.add_options()
      ("dir", po::value(&dir)->default_value("sonde-demo"), "where the demo model and output go")
      ("text", po::value(&text), "the text to run")
      ("backend", po::value(&backend), "compute backend (default: the fastest available)")
      ("plugin-dir", po::value(&plugin_dir), "look for plugins here first");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde demo [--dir DIR] [--text T]", desc, vm)) return 0;
  namespace fs = std::filesystem;
  const fs::path model = fs::path(dir) / "tiny-qwen2", out = fs::path(dir) / "acts.h5";

  if (!fs::exists(model / "config.json")) {
    MakeOptions make;
    make.seed = 1;
    make.out = model.string();
    make.force = true;
    make_model(make, plugin_dir);
  } else {
    std::cout << "using the demo model in " << model.string() << "\n";
  }
  CommonOptions common;
  common.model = model.string();
  common.backend = backend;
  common.plugin_dir = plugin_dir;
  auto session = open_session(common);
  Request request;
  request.text = text;
  request.where = "--text";
  RunOptions o;
  o.kind = RunKind::Forward;
  o.command = "demo";
  o.capture.hooks = "hook_embed,blocks.*.hook_resid_post,blocks.0.attn.hook_z,ln_final.hook_out";
  o.sinks = {SinkSpec{"hdf5", out.string(), /*overwrite=*/true, nullptr}};
  const RunResult res = run(*session, {request}, o);
  std::cout << "wrote " << out.string() << " (" << res.logits.shape()[0] << " tokens, " << res.hooks.size()
            << " hooks, backend " << session->backend_name() << ")\n";

  std::cout << "\nRead it with h5py (Debian: apt-get install python3-h5py; run /usr/bin/python3):\n\n"
            << "  import h5py\n"
            << "  f = h5py.File('" << out.string() << "', 'r')\n"
            << "  x = f['acts/blocks.1.hook_resid_post'][:]     # [tokens, hidden] float32\n"
            << "  ids = f['rows/token_id'][:]                    # the token at each row\n"
            << "  print(x.shape, ids, f.attrs['model_arch'])\n\n"
            << "Next: sonde hooks --model " << model.string() << "   (every hook point)\n"
            << "      sonde forward --model " << model.string() << " --text '...' --hooks 'blocks.*.mlp.hook_post' --out my.h5\n";
  return 0;
}

}  // namespace sonde::cli
