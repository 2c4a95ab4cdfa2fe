#include "sink_under_test.h"

#include <sonde/registry.h>

#include <test_paths.h>

namespace sonde::test {

std::shared_ptr<Sink> make_hdf5_sink() {
  // One registry for the test process: plugins stay loaded until exit (toolchain §3).
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry;
    r->scan({plugin_root()});
    return r;
  }();
  return registry->sink("hdf5");
}

}  // namespace sonde::test
