#pragma once
// The page's own files (report/page: report.html, report.js, report.css), compiled in by
// report/cmake/embed.cmake; the plotting library is read at run time (page.cpp).
#include <string_view>

namespace sonde::report {

std::string_view page_asset(std::string_view name);  // empty for an unknown name

}  // namespace sonde::report
