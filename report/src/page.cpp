#include "page.h"

#include "assets.h"

#include <sonde/error.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;

namespace sonde::report {

namespace {

struct Part {
  const char* package;  // under node_modules
  const char* file;     // the browser build
};
// Order matters: vega-embed needs vega and vega-lite defined.
constexpr Part kParts[] = {{"vega", "build/vega.min.js"}, {"vega-lite", "build/vega-lite.min.js"}, {"vega-embed", "build/vega-embed.min.js"}};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool has_parts(const fs::path& web) {
  for (const auto& part : kParts)
    if (!fs::is_regular_file(web / "node_modules" / part.package / part.file)) return false;
  return true;
}

// A script's text inside <script>: "</script" would end it early, and a source map comment would
// make developer tools fetch a file.
std::string script_safe(std::string js) {
  for (std::size_t at = 0; (at = js.find("</script", at)) != std::string::npos;) js.replace(at, 2, "<\\/");
  if (const auto at = js.rfind("//# sourceMappingURL="); at != std::string::npos) js.erase(at, js.find('\n', at) - at);
  return js;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string plotting_library() {
  std::vector<fs::path> candidates;
  const char* env = std::getenv("SONDE_REPORT_WEB");
  if (env && *env) {
    candidates.emplace_back(env);  // alone: what the user named is what is used
  } else {
    // An installed program's own copy first (cmake --install puts it there), then the checkout's.
    std::error_code ec;
    if (const auto exe = fs::read_symlink("/proc/self/exe", ec); !ec)
      candidates.push_back(exe.parent_path().parent_path() / "share/sonde/report/web");
    candidates.emplace_back(SONDE_REPORT_WEB_SOURCE);
  }
  for (const auto& web : candidates) {
    if (!has_parts(web)) continue;
    std::string out;
    for (const auto& part : kParts) {
      const fs::path dir = web / "node_modules" / part.package;
      const auto pkg = nlohmann::json::parse(read_file(dir / "package.json"), nullptr, false);
      const std::string version = pkg.is_object() ? pkg.value("version", std::string("?")) : "?";
      const std::string licence = pkg.is_object() ? pkg.value("license", std::string("?")) : "?";
      // The licence travels with the code it covers (BSD-3-Clause asks for it in copies).
      std::string text = read_file(dir / "LICENSE");
      for (std::size_t at = 0; (at = text.find("*/", at)) != std::string::npos;) text.replace(at, 2, "* /");
      out += "<script>/*! " + std::string(part.package) + " " + version + " (" + licence + ", from the npm registry)\n" + text +
             "*/\n" + script_safe(read_file(dir / part.file)) + "\n</script>\n";
    }
    return out;
  }
  bad_input("the plotting library (vega, vega-lite, vega-embed) is not in {}: run npm ci --prefix {}",
            (candidates.front() / "node_modules").string(), SONDE_REPORT_WEB_SOURCE);
}

std::string render_page(const std::string& title, const nlohmann::json& data, const std::string& library) {
  // '<' as \u003c: no "</script>" or "<!--" can end the data early; JSON.parse reads it back.
  const std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string safe;
  safe.reserve(json.size());
  for (char c : json) safe += c == '<' ? std::string("\\u003c") : std::string(1, c);
  const std::map<std::string, std::string> values = {{"TITLE", escape_html(title)}, {"CSS", std::string(page_asset("report.css"))},
                                                     {"LIBRARY", library}, {"SCRIPT", script_safe(std::string(page_asset("report.js")))},
                                                     {"DATA", safe}};
  // One pass over the template, so a value that happens to contain "@KEY@" stays as it is.
  const std::string_view tpl = page_asset("report.html");
  std::string page;
  std::size_t at = 0;
  while (at < tpl.size()) {
    const auto open = tpl.find('@', at);
    const auto close = open == std::string_view::npos ? open : tpl.find('@', open + 1);
    const auto it = close == std::string_view::npos ? values.end() : values.find(std::string(tpl.substr(open + 1, close - open - 1)));
    if (it == values.end()) {
      page += tpl.substr(at, open == std::string_view::npos ? std::string_view::npos : open + 1 - at);
      at = open == std::string_view::npos ? tpl.size() : open + 1;
      continue;
    }
    page += tpl.substr(at, open - at);
    page += it->second;
    at = close + 1;
  }
  return page;
}

}  // namespace sonde::report
