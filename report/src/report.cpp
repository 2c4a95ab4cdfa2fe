// write_report: reads the files, gathers each panel's data (collect_*.cpp) and writes the page
// (page.cpp) whole under <out>.tmp, renamed over <out>: no half-written page is ever left.
#include <sonde/report.h>

#include "collect.h"
#include "page.h"

#include <sonde/error.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace sonde::report {
namespace {

struct Opened {
  H5File file;
  nlohmann::json attrs;
  std::string kind;
};

Opened open_file(const std::string& path) {
  Opened o{H5File(path), {}, {}};
  o.attrs = o.file.root_attrs();
  o.kind = file_kind(o.file, o.attrs);
  return o;
}

void expect_kind(const Opened& o, const std::string& option, const std::string& kind) {
  if (o.kind != kind)
    bad_input("{}: {}: a {} file, not a {} file ({})", o.file.path(), option, o.kind, kind,
              kind == "lens" ? "sonde lens --out writes one" : "--stats of forward, generate or batch writes one");
}

std::vector<std::string> panels_of(const nlohmann::json& data) {
  std::vector<std::string> panels{"run"};
  bool timeline = false, norms = false, text = false;
  if (data.contains("acts"))
    for (const auto& p : data["acts"]["prompts"]) {
      timeline = timeline || p.contains("timeline");
      norms = norms || !p["norms"].empty();
      text = text || (p.contains("scored") && !p["scored"].empty());
    }
  if (timeline) panels.push_back("timeline");
  if (norms) panels.push_back("norms");
  if (text) panels.push_back("text");
  if (!data["lens"].empty()) panels.push_back("lens");
  if (!data["stats"].empty()) panels.push_back("stats");
  return panels;
}

}  // namespace
}  // namespace sonde::report

namespace sonde {

ReportSummary write_report(const ReportOptions& o) {
  using namespace report;
  if (o.out.empty()) bad_setting("out", "give the page's file name (report.html)");
  if (fs::exists(o.out) && !o.overwrite) bad_setting("out", "{} exists (use --overwrite to replace it)", o.out);
  if (o.max_prompts < 1 || o.max_positions < 1 || o.max_steps < 1 || o.max_cells < 1 || o.max_features < 1)
    bad_input("report budget: every max_* must be at least 1");
  const std::string library = plotting_library();  // first: a missing library is said before any work

  Opened main = open_file(o.dump);
  TokenTable tokens;
  tokens.load(!o.model.empty() ? o.model : main.attrs.value("model_path", std::string()));
  if (!o.model.empty() && !tokens.has_tokenizer()) bad_setting("model", "{} has no tokenizer files", o.model);
  std::vector<std::string> notes;
  nlohmann::json data = {{"run", {{"file", o.dump}, {"kind", main.kind}, {"attrs", main.attrs}}},
                         {"others", nlohmann::json::array()}, {"lens", nlohmann::json::array()}, {"stats", nlohmann::json::array()}};
  if (!main.file.attrs_readable()) notes.push_back(o.dump + ": its attributes are unreadable while it is being written; the run card is empty");
  if (main.kind == "acts") data["acts"] = collect_acts(main.file, main.attrs, o, tokens, notes);
  if (main.kind == "lens") data["lens"].push_back(collect_lens(main.file, tokens));
  if (main.kind == "stats") data["stats"].push_back(collect_stats(main.file, o, notes));
  if (!o.prompts.empty() && main.kind != "acts") bad_setting("prompt", "{} is a {} file, which has no prompts", o.dump, main.kind);
  for (const auto& path : o.lens) {
    Opened f = open_file(path);
    expect_kind(f, "--lens", "lens");
    data["lens"].push_back(collect_lens(f.file, tokens));
    data["others"].push_back({{"role", "lens"}, {"file", path}, {"attrs", f.attrs}});
  }
  for (const auto& path : o.stats) {
    Opened f = open_file(path);
    expect_kind(f, "--stats", "stats");
    data["stats"].push_back(collect_stats(f.file, o, notes));
    data["others"].push_back({{"role", "stats"}, {"file", path}, {"attrs", f.attrs}});
  }
  data["tokens"] = tokens.to_json();
  data["tokenizer"] = tokens.source();
  data["notes"] = notes;
  data["budget"] = {{"max_prompts", o.max_prompts}, {"max_positions", o.max_positions}, {"max_steps", o.max_steps}, {"max_cells", o.max_cells},
                    {"max_features", o.max_features}};

  const std::string page = render_page(fs::path(o.dump).filename().string(), data, library);
  const std::string tmp = o.out + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) bad_setting("out", "cannot write {}", tmp);
    out.write(page.data(), static_cast<std::streamsize>(page.size()));
    out.close();
    if (!out) runtime_error("{}: write failed", tmp);
  }
  fs::rename(tmp, o.out);
  return {panels_of(data), notes, page.size()};
}

}  // namespace sonde
