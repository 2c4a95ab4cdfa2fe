#pragma once
// sonde.report (sonde/_report.py): the same write_report as `sonde report` (libsonde_report).
#include <pybind11/pybind11.h>

namespace sonde::py {

void bind_report(pybind11::module_& m);

}  // namespace sonde::py
