#pragma once
// The sink the tests exercise, loaded the way the program loads it (PluginRegistry).
#include <sonde/sink.h>

#include <memory>

namespace sonde::test {

std::shared_ptr<Sink> make_hdf5_sink();

}  // namespace sonde::test
