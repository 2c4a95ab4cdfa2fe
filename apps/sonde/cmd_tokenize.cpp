// sonde tokenize --model DIR (--text T | --input F.jsonl) [--decode]
// Encodes text to ids (no special tokens added; added tokens written in the text recognised), or
// with --decode turns ids back into text. Output is JSON, one object per input.
#include <sonde/error.h>
#include <sonde/model_dir.h>
#include <sonde/tokenizer.h>

#include <boost/program_options.hpp>
#include <charconv>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"

namespace sonde::cli {
namespace {

namespace po = boost::program_options;
using nlohmann::ordered_json;

std::vector<std::int32_t> parse_id_list(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view item(text.data() + pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    std::int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      bad_input("--text: '{}' is not a token id (expected comma-separated integers like 1,2,3)", item);
    ids.push_back(id);
    pos = end + 1;
  }
  return ids;
}

void check_ids(const Tokenizer& tok, const std::vector<std::int32_t>& ids, const std::string& where) {
  for (std::int32_t id : ids)
    if (tok.token_bytes(id).empty()) bad_input("{}: token id {} is not in the tokenizer (vocab size {})", where, id, tok.vocab_size());
}

ordered_json encode_one(const Tokenizer& tok, const std::string& text) {
  return {{"text", text}, {"ids", tok.encode(text)}};
}

ordered_json decode_one(const Tokenizer& tok, const std::vector<std::int32_t>& ids, const std::string& where) {
  check_ids(tok, ids, where);
  return {{"ids", ids}, {"text", tok.decode(ids)}};
}

ordered_json process_line(const Tokenizer& tok, const std::string& line, const std::string& where, bool decode) {
  ordered_json j;
  try {
    j = ordered_json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    bad_input("{}: not JSON: {}", where, e.what());
  }
  const char* key = decode ? "ids" : "text";
  if (!j.is_object() || !j.contains(key)) bad_input("{}: expected an object with \"{}\"", where, key);
  if (!decode) {
    if (!j[key].is_string()) bad_input("{}: \"text\" is {}, expected a string", where, j[key].dump());
    try {
      return encode_one(tok, j[key].get<std::string>());
    } catch (const Error& e) {
      bad_input("{}: {}", where, e.what());
    }
  }
  std::vector<std::int32_t> ids;
  try {
    ids = j[key].get<std::vector<std::int32_t>>();
  } catch (const nlohmann::json::exception&) {
    bad_input("{}: \"ids\" is {}, expected an array of integers", where, j[key].dump().substr(0, 200));
  }
  return decode_one(tok, ids, where);
}

void process_file(const Tokenizer& tok, const std::string& path, bool decode) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_input("{}: cannot be read", path);
  std::size_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::cout << process_line(tok, line, path + ":" + std::to_string(line_no), decode).dump() << '\n';
  }
}

}  // namespace

int cmd_tokenize(const Args& args) {
  po::options_description opts("sonde tokenize --model DIR (--text T | --input F.jsonl) [--decode]");
  opts.add_options()("help,h", "show this help")(
      "model", po::value<std::string>(), "model directory (tokenizer.json, or vocab.json + merges.txt) or org/name")(
      "text", po::value<std::string>(), "text to encode (with --decode: ids such as 1,2,3)")(
      "input", po::value<std::string>(), "JSONL file: lines {\"text\": ...} (with --decode: {\"ids\": [...]})")(
      "decode", po::bool_switch(), "turn ids into text instead");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    bad_input("tokenize: {}", e.what());
  }
  if (vm.count("help")) {
    std::cout << opts << "Prints JSON: {\"text\": ..., \"ids\": [...]} per input (one line each with --input).\n"
                         "No special tokens are added; added tokens written in the text are recognised.\n";
    return 0;
  }
  if (!vm.count("model")) bad_input("tokenize: --model is required");
  if (vm.count("text") == vm.count("input")) bad_input("tokenize: give exactly one of --text and --input");
  const Tokenizer tok = Tokenizer::load(resolve_model_dir(vm["model"].as<std::string>()));
  const bool decode = vm["decode"].as<bool>();
  if (vm.count("input")) {
    process_file(tok, vm["input"].as<std::string>(), decode);
    return 0;
  }
  const std::string text = vm["text"].as<std::string>();
  std::cout << (decode ? decode_one(tok, parse_id_list(text), "--text") : encode_one(tok, text)).dump() << '\n';
  return 0;
}

}  // namespace sonde::cli
