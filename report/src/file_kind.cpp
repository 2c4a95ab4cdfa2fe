#include "collect.h"

#include <sonde/error.h>

namespace sonde::report {

std::string file_kind(H5File& f, const nlohmann::json& attrs) {
  const std::string schema = attrs.value("schema", std::string());
  // A live writer's attributes may be unreadable; its /progress says what it is (as sonde.open_dump).
  const bool live = !f.attrs_readable() && f.has("/progress/mark");
  if (schema == "sonde.stats/1" || (live && f.has("/stats"))) return "stats";
  if (schema != "sonde.acts/1" && !live)
    bad_input("{}: schema is '{}', not a file sonde writes (sonde.acts/1 or sonde.stats/1)", f.path(),
              schema.empty() ? std::string("(none)") : schema);
  if (!live && attrs.value("complete", std::int64_t{0}) != 1 && !f.has("/progress/mark"))
    bad_input("{}: complete is 0 and there is no /progress/mark: a one-shot file whose writer did not finish", f.path());
  return f.has("/lens/top_ids") ? "lens" : "acts";
}

std::vector<std::size_t> sample_evenly(std::size_t n, std::size_t max) {
  std::vector<std::size_t> out;
  if (n <= max) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(i);
  } else if (max <= 1) {
    out.push_back(n - 1);
  } else {
    for (std::size_t k = 0; k < max; ++k) out.push_back(k * (n - 1) / (max - 1));  // 0 ... n - 1, increasing
  }
  return out;
}

}  // namespace sonde::report
