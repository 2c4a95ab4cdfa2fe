// sonde plugins: what the registry found (kind name version path, and a backend's description) and
// what it rejected, why.
#include "app_common.h"
#include "commands.h"

#include <sonde/log.h>
#include <sonde/registry.h>

#include <nlohmann/json.hpp>

#include <iostream>

namespace sonde::cli {

int cmd_plugins(const Args& args) {
  CommonOptions common;
  bool json = false;
  po::options_description desc("plugins options");
  add_common_options(desc, common, /*with_model=*/false);
  desc.add_options()("json", po::bool_switch(&json), "print JSON");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde plugins [--plugin-dir DIR] [--json]", desc, vm)) return 0;
  init_logging(common.log_level);
  auto& r = PluginRegistry::instance();
  r.scan(PluginRegistry::search_path(common.plugin_dir));
  // A backend describes itself without init() (nothing is started: no threads, no MPI).
  const auto description = [&](const PluginEntry& p) {
    return p.kind == "backend" ? r.backend(p.name)->info().description : std::string();
  };
  if (json) {
    nlohmann::json out{{"plugins", nlohmann::json::array()}, {"rejected", nlohmann::json::array()},
                       {"searched", nlohmann::json::array()}};
    for (const auto& p : r.plugins())
      out["plugins"].push_back({{"kind", p.kind}, {"name", p.name}, {"version", p.version}, {"path", p.path.string()},
                                {"description", description(p)}});
    for (const auto& p : r.rejected()) out["rejected"].push_back({{"path", p.path.string()}, {"reason", p.reason}});
    for (const auto& d : r.searched()) out["searched"].push_back(d.string());
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  for (const auto& p : r.plugins()) {
    std::cout << p.kind << " " << p.name << " " << p.version << " " << p.path.string();
    if (const std::string d = description(p); !d.empty()) std::cout << "\n    " << d;
    std::cout << "\n";
  }
  for (const auto& p : r.rejected()) std::cout << "rejected " << p.path.string() << ": " << p.reason << "\n";
  if (r.plugins().empty()) {
    std::cout << "no plugins found; searched:";
    for (const auto& d : r.searched()) std::cout << " " << d.string();
    std::cout << "\n";
    return 1;
  }
  return 0;
}

}  // namespace sonde::cli
