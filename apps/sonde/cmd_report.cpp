// sonde report: one self-contained HTML page from any file sonde writes (libsonde_report does the
// work; docs/report.md). Prints the page's size and panels.
#include "app_common.h"
#include "commands.h"

#include <sonde/error.h>
#include <sonde/report.h>

#include <iostream>

namespace sonde::cli {

int cmd_report(const Args& args) {
  ReportOptions o;
  po::options_description desc("report options");
  desc.add_options()
      ("file", po::value(&o.dump), "the file to show: an activation dump, a lens file or a statistics file")
      ("stats", po::value(&o.stats)->composing(), "a statistics file (--stats of forward/generate/batch) to show too; repeatable")
      ("lens", po::value(&o.lens)->composing(), "a logit lens file (sonde lens --out) to show too; repeatable")
      ("prompt", po::value(&o.prompts)->composing(), "a prompt's dataset id to show (repeatable); default: the first --max-prompts")
      ("model", po::value(&o.model), "the model directory whose tokenizer names tokens (default: the file's model_path)")
      ("out", po::value(&o.out), "the page to write (.html)")
      ("overwrite", po::bool_switch(&o.overwrite), "replace an existing --out file")
      ("max-prompts", po::value(&o.max_prompts)->default_value(o.max_prompts), "prompts shown without --prompt")
      ("max-positions", po::value(&o.max_positions)->default_value(o.max_positions), "positions per heatmap; beyond, averaged in bins")
      ("max-steps", po::value(&o.max_steps)->default_value(o.max_steps), "steps per heatmap and timeline; beyond, evenly spaced")
      ("max-cells", po::value(&o.max_cells)->default_value(o.max_cells), "cells per heatmap; beyond, fewer steps, then wider bins");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde report FILE.h5 [--stats S.h5] [--lens L.h5] [--prompt ID ...] --out report.html", desc, vm, &pos))
    return 0;
  if (o.dump.empty()) bad_input("give the file to show (sonde report FILE.h5 --out report.html)");
  if (o.out.empty()) bad_input("--out: give the page's file name (report.html)");
  try {
    const ReportSummary s = write_report(o);
    std::string panels;
    for (const auto& p : s.panels) panels += (panels.empty() ? "" : ", ") + p;
    std::cout << "wrote " << o.out << " (" << (s.bytes + 1023) / 1024 << " KiB; panels: " << panels << ")\n";
    for (const auto& n : s.notes) std::cout << "  " << n << "\n";
    std::cout << "open it in a browser (it needs no network): xdg-open " << o.out << "\n";
  } catch (const Error& e) {
    if (e.setting().empty()) throw;
    throw Error(e.kind(), "--" + e.setting() + ": " + e.detail());
  }
  return 0;
}

}  // namespace sonde::cli
