#pragma once
// sonde._sonde.Sae: a loaded SAELens folder (sae.h) for the Python package: encode/decode on
// NumPy rows, its training-time feature densities, and the handle Engine.attach_sae takes.
#include <sonde/sae.h>

#include <pybind11/pybind11.h>

#include <memory>

namespace sonde::py {

struct PySae {
  std::shared_ptr<const Sae> sae;
};

void bind_sae(pybind11::module_& m);

}  // namespace sonde::py
