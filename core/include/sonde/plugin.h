#pragma once
// What every plugin exports: a descriptor the registry checks before anything else, and a
// factory. Use SONDE_PLUGIN(Class, kind, name, version, matches, priority) once per plugin.
#include <sonde/error.h>

#include <boost/dll/alias.hpp>

#include <exception>
#include <string>

namespace sonde {

// Bump when any interface in core/include/sonde changes layout or virtual functions.
constexpr int kPluginAbi = 12;  // 12: BatchShape::logits_from/logits_to (was last_logits_only); 11: Backend::hint, WeightHint; 10: OpKind SaeActivation, NormRescale, Sub; 9: ModelInfo::diffusion_loop; 8: ProcessGroup::allgather_into, RowRecord::fresh and computed_step, OpKind::SliceRows; 7: Sink::rewinds, SinkOptions::resume_at; 6: ProcessGroup, sharded options, edit ops

#define SONDE_STR2(x) #x
#define SONDE_STR(x) SONDE_STR2(x)
#if defined(__clang__)
#define SONDE_COMPILER_TAG "clang-" SONDE_STR(__clang_major__)
#else
#define SONDE_COMPILER_TAG "gcc-" SONDE_STR(__GNUC__)
#endif
#define SONDE_STDLIB_TAG "libstdc++-" SONDE_STR(_GLIBCXX_RELEASE)
#if defined(__SANITIZE_ADDRESS__)
#define SONDE_BUILD_TAG "asan"
#elif defined(_GLIBCXX_DEBUG)
#define SONDE_BUILD_TAG "debug-stl"
#else
#define SONDE_BUILD_TAG "plain"
#endif

struct PluginDescriptor {
  int abi;
  const char* kind;      // "backend", "model", "sink"
  const char* name;      // "cpu-blas", "qwen2", "hdf5"
  const char* version;
  const char* compiler;  // SONDE_COMPILER_TAG
  const char* stdlib;    // SONDE_STDLIB_TAG
  const char* build;     // SONDE_BUILD_TAG
  const char* matches;   // model plugins: comma-separated config.json model_type values
  int priority;          // backends: the default is the available one with the highest priority
};

// Base of every object a factory makes; the registry casts to the kind's interface.
class Plugin {
 public:
  virtual ~Plugin();
};

using DescriptorFn = const PluginDescriptor*();
// A factory returns a new object or throws sonde::Error (never another type).
using FactoryFn = Plugin*();

}  // namespace sonde

#define SONDE_PLUGIN(Class, kind, name, version, matches, priority)                              \
  namespace sonde_plugin_export {                                                               \
  const ::sonde::PluginDescriptor* descriptor() {                                               \
    static const ::sonde::PluginDescriptor d{::sonde::kPluginAbi, kind, name, version,          \
                                             SONDE_COMPILER_TAG, SONDE_STDLIB_TAG,               \
                                             SONDE_BUILD_TAG, matches, priority};                \
    return &d;                                                                                  \
  }                                                                                             \
  ::sonde::Plugin* create() {                                                                   \
    try {                                                                                       \
      return new Class();                                                                       \
    } catch (const ::sonde::Error&) {                                                           \
      throw;                                                                                    \
    } catch (const std::exception& e) {                                                         \
      throw ::sonde::Error(::sonde::ErrorKind::Runtime,                                         \
                           std::string("plugin ") + name + ": factory failed: " + e.what());    \
    } catch (...) {                                                                             \
      throw ::sonde::Error(::sonde::ErrorKind::Runtime,                                         \
                           std::string("plugin ") + name + ": factory failed");                 \
    }                                                                                           \
  }                                                                                             \
  }                                                                                             \
  BOOST_DLL_ALIAS(sonde_plugin_export::descriptor, sonde_descriptor)                            \
  BOOST_DLL_ALIAS(sonde_plugin_export::create, sonde_create)
