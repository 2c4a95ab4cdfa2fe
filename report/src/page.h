#pragma once
// The HTML page: the template with the plotting library, the page script and the data inlined.
#include <nlohmann/json.hpp>

#include <string>

namespace sonde::report {

// The plotting library's files, with their licences, as <script> elements. Looked for in
// $SONDE_REPORT_WEB when it is set (there only), else in the source tree's report/web (where
// `npm ci --prefix report/web` puts them), then in <prefix>/share/sonde/report/web. BadInput
// naming the npm ci to run when none has them.
std::string plotting_library();

std::string render_page(const std::string& title, const nlohmann::json& data, const std::string& library);

}  // namespace sonde::report
