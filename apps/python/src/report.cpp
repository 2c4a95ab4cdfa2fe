#include "report.h"

#include <sonde/report.h>

#include <pybind11/stl.h>

namespace pb = pybind11;
using namespace pybind11::literals;

namespace sonde::py {

void bind_report(pb::module_& m) {
  m.def(
      "write_report",
      [](const std::string& dump, const std::string& out, const std::vector<std::string>& stats,
         const std::vector<std::string>& lens, const std::vector<std::string>& prompts, const std::string& model,
         bool overwrite, std::int64_t max_prompts, std::int64_t max_positions, std::int64_t max_steps) {
        ReportOptions o;
        o.dump = dump;
        o.out = out;
        o.stats = stats;
        o.lens = lens;
        o.prompts = prompts;
        o.model = model;
        o.overwrite = overwrite;
        o.max_prompts = max_prompts;
        o.max_positions = max_positions;
        o.max_steps = max_steps;
        ReportSummary s;
        {
          pb::gil_scoped_release nogil;
          s = write_report(o);
        }
        return pb::dict("panels"_a = s.panels, "notes"_a = s.notes, "bytes"_a = s.bytes);
      },
      "dump"_a, "out"_a, "stats"_a, "lens"_a, "prompts"_a, "model"_a, "overwrite"_a, "max_prompts"_a, "max_positions"_a,
      "max_steps"_a);
}

}  // namespace sonde::py
