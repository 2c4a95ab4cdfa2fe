// Plugin discovery. Each candidate library is loaded once with RTLD_NOW, its descriptor read and
// checked (ABI, compiler, standard library, build flavour) before its factory may be called. The
// libraries are kept in the registry, which is never destroyed, and every object's deleter also
// holds its library: an object can never outlive its code (toolchain §3).
#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/registry.h>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace sonde {
namespace fs = std::filesystem;

PluginRegistry& PluginRegistry::instance() {
  static auto* registry = new PluginRegistry();  // intentionally leaked: see file comment
  return *registry;
}

std::vector<fs::path> PluginRegistry::search_path(const std::string& plugin_dir) {
  std::vector<fs::path> dirs;
  if (!plugin_dir.empty()) dirs.emplace_back(plugin_dir);
  if (const char* env = std::getenv("SONDE_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) dirs.emplace_back(item);
  }
  dirs.push_back(boost::dll::program_location().parent_path().parent_path() / "lib" / "sonde");
  return dirs;
}

namespace {

std::vector<fs::path> candidate_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it.depth() > 1) it.disable_recursion_pending();
    if (it->is_regular_file(ec) && it->path().extension() == ".so") files.push_back(fs::absolute(it->path()));
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string check_descriptor(const PluginDescriptor& d) {
  if (d.abi != kPluginAbi) return fmt::format("ABI {} but this sonde has ABI {}", d.abi, kPluginAbi);
  if (std::string_view(d.compiler) != SONDE_COMPILER_TAG)
    return fmt::format("built with {} but sonde with {}", d.compiler, SONDE_COMPILER_TAG);
  if (std::string_view(d.stdlib) != SONDE_STDLIB_TAG)
    return fmt::format("built against {} but sonde against {}", d.stdlib, SONDE_STDLIB_TAG);
  if (std::string_view(d.build) != SONDE_BUILD_TAG)
    return fmt::format("built as '{}' but sonde as '{}'", d.build, SONDE_BUILD_TAG);
  std::string_view kind = d.kind ? d.kind : "";
  if (kind != "backend" && kind != "model" && kind != "sink") return fmt::format("unknown kind '{}'", kind);
  if (!d.name || !*d.name) return "empty plugin name";
  return {};
}

// Boost.DLL appends a stale errno text to its messages; keep the first line only.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

void PluginRegistry::scan(const std::vector<fs::path>& dirs) {
  for (const auto& dir : dirs) {
    searched_.push_back(dir);
    for (const auto& file : candidate_files(dir)) {
      if (std::any_of(plugins_.begin(), plugins_.end(), [&](const PluginEntry& e) { return e.path == file; }))
        continue;
      auto lib = std::make_shared<boost::dll::shared_library>();
      try {
        lib->load(file, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
      } catch (const std::exception& e) {
        rejected_.push_back({file, "cannot be loaded: " + first_line(e.what())});
        continue;
      }
      if (!lib->has("sonde_descriptor") || !lib->has("sonde_create")) {
        rejected_.push_back({file, "not a sonde plugin: missing symbol sonde_descriptor or sonde_create"});
        libraries_[file] = lib;  // never unloaded: see file comment
        continue;
      }
      const PluginDescriptor* d = lib->get_alias<DescriptorFn>("sonde_descriptor")();
      libraries_[file] = lib;
      if (std::string why = check_descriptor(*d); !why.empty()) {
        rejected_.push_back({file, why});
        continue;
      }
      auto same = [&](const PluginEntry& e) { return e.kind == d->kind && e.name == d->name; };
      if (auto it = std::find_if(plugins_.begin(), plugins_.end(), same); it != plugins_.end()) {
        rejected_.push_back({file, fmt::format("shadowed by {} {} at {}", d->kind, d->name, it->path.string())});
        continue;
      }
      plugins_.push_back({d->kind, d->name, d->version, d->matches ? d->matches : "", d->priority, file});
    }
  }
}

std::shared_ptr<Plugin> PluginRegistry::create_from(const PluginEntry& e) {
  auto lib = libraries_.find(e.path);
  if (lib == libraries_.end()) runtime_error("plugin {} {}: library {} is not loaded", e.kind, e.name, e.path.string());
  auto* shared = static_cast<boost::dll::shared_library*>(lib->second.get());
  Plugin* raw = nullptr;
  try {
    raw = shared->get_alias<FactoryFn>("sonde_create")();
  } catch (const Error& err) {
    runtime_error("plugin {} '{}' ({}): {}", e.kind, e.name, e.path.string(), err.what());
  }
  if (!raw) runtime_error("plugin {} '{}' ({}): factory returned nothing", e.kind, e.name, e.path.string());
  std::shared_ptr<void> keep = lib->second;
  return std::shared_ptr<Plugin>(raw, [keep](Plugin* p) { delete p; });
}

void PluginRegistry::not_found(const std::string& kind, const std::string& name) const {
  std::string found, dirs, rejected;
  for (const auto& p : plugins_)
    if (p.kind == kind) found += (found.empty() ? "" : ", ") + p.name;
  for (const auto& d : searched_) dirs += (dirs.empty() ? "" : ", ") + d.string();
  for (const auto& r : rejected_) rejected += fmt::format("; rejected {}: {}", r.path.filename().string(), r.reason);
  bad_input("no {} plugin named '{}' (found: {}; searched: {}{})", kind, name,
            found.empty() ? "none" : found, dirs.empty() ? "nothing" : dirs, rejected);
}

std::shared_ptr<Plugin> PluginRegistry::create(const std::string& kind, const std::string& name) {
  for (const auto& p : plugins_)
    if (p.kind == kind && p.name == name) return create_from(p);
  not_found(kind, name);
}

template <typename T>
static std::shared_ptr<T> cast_plugin(std::shared_ptr<Plugin> p, const std::string& kind, const std::string& name) {
  auto t = std::dynamic_pointer_cast<T>(p);
  if (!t) runtime_error("plugin {} '{}' does not implement the {} interface", kind, name, kind);
  return t;
}

std::shared_ptr<Backend> PluginRegistry::backend(const std::string& name) {
  if (!name.empty()) return cast_plugin<Backend>(create("backend", name), "backend", name);
  const PluginEntry* best = nullptr;
  for (const auto& p : plugins_)
    if (p.kind == "backend" && (!best || p.priority > best->priority)) best = &p;
  if (!best) not_found("backend", "(default)");
  return cast_plugin<Backend>(create_from(*best), "backend", best->name);
}

std::shared_ptr<ModelPlugin> PluginRegistry::model_for(const std::string& model_type) {
  for (const auto& p : plugins_) {
    if (p.kind != "model") continue;
    std::stringstream ss(p.matches);
    std::string m;
    while (std::getline(ss, m, ','))
      if (m == model_type) return cast_plugin<ModelPlugin>(create_from(p), "model", p.name);
  }
  std::string known;
  for (const auto& p : plugins_)
    if (p.kind == "model") known += fmt::format("{}{} ({})", known.empty() ? "" : ", ", p.name, p.matches);
  bad_input("no model plugin handles model_type '{}' (model plugins found: {})", model_type,
            known.empty() ? "none" : known);
}

std::shared_ptr<Sink> PluginRegistry::sink(const std::string& name) {
  return cast_plugin<Sink>(create("sink", name), "sink", name);
}

}  // namespace sonde
