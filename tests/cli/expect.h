#pragma once
// Assertions shared by the CLI tests.
#include "process.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

namespace sonde::test {

// True when `text` contains `word`, ignoring ASCII case.
bool contains_nocase(const std::string& text, const std::string& word);

// Exit code 2, nothing on stdout, exactly one line on stderr that starts with
// "sonde <command>: error:", with no HDF5 error stack or exception dump, containing every
// string of `all` and at least one of `problem` (ignoring case).
::testing::AssertionResult one_line_error(const Outcome& o, const std::string& command,
                                          std::initializer_list<std::string> all,
                                          std::initializer_list<std::string> problem);

}  // namespace sonde::test
