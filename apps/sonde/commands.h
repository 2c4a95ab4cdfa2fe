#pragma once
// One function per command, each in its own cmd_<name>.cpp. A command parses its own options
// (Boost.program_options), throws sonde::Error for bad input or failures, and returns an exit code.
#include <string>
#include <vector>

namespace sonde::cli {

using Args = std::vector<std::string>;  // the arguments after the command name

int cmd_make_model(const Args& args);
int cmd_inspect(const Args& args);
int cmd_hooks(const Args& args);
int cmd_forward(const Args& args);
int cmd_plugins(const Args& args);
int cmd_demo(const Args& args);
int cmd_tokenize(const Args& args);
int cmd_generate(const Args& args);
int cmd_bench(const Args& args);
int cmd_batch(const Args& args);
int cmd_lens(const Args& args);
int cmd_score(const Args& args);
int cmd_serve(const Args& args);
int cmd_report(const Args& args);

}  // namespace sonde::cli
