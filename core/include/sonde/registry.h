#pragma once
// Finds plugins, checks each descriptor before its factory is called, and hands out objects whose
// deleter holds the library. Libraries are never unloaded before the process exits.
#include <sonde/backend.h>
#include <sonde/model.h>
#include <sonde/sink.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sonde {

struct PluginEntry {
  std::string kind, name, version, matches;
  int priority = 0;
  std::filesystem::path path;
};

struct RejectedPlugin {
  std::filesystem::path path;
  std::string reason;
};

class PluginRegistry {
 public:
  // The process-wide registry (never destroyed, so no library is unloaded early).
  static PluginRegistry& instance();
  // --plugin-dir (if given), then $SONDE_PLUGIN_PATH (colon-separated), then lib/sonde beside
  // the executable.
  static std::vector<std::filesystem::path> search_path(const std::string& plugin_dir);

  PluginRegistry() = default;
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Scans each directory and its subdirectories for *.so. The first plugin of a kind and name
  // wins; later ones are recorded as rejected (shadowed).
  void scan(const std::vector<std::filesystem::path>& dirs);
  const std::vector<PluginEntry>& plugins() const { return plugins_; }
  const std::vector<RejectedPlugin>& rejected() const { return rejected_; }
  const std::vector<std::filesystem::path>& searched() const { return searched_; }

  // name "" picks the backend with the highest priority.
  std::shared_ptr<Backend> backend(const std::string& name);
  std::shared_ptr<ModelPlugin> model_for(const std::string& model_type);
  std::shared_ptr<Sink> sink(const std::string& name);
  std::shared_ptr<Plugin> create(const std::string& kind, const std::string& name);

 private:
  std::shared_ptr<Plugin> create_from(const PluginEntry& e);
  [[noreturn]] void not_found(const std::string& kind, const std::string& name) const;
  std::vector<PluginEntry> plugins_;
  std::vector<RejectedPlugin> rejected_;
  std::vector<std::filesystem::path> searched_;
  std::map<std::filesystem::path, std::shared_ptr<void>> libraries_;  // kept for the process's life
};

}  // namespace sonde
