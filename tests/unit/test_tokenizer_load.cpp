// Tokenizer loading: both file layouts give the same ids, Dream's extra tokens, merges as pairs,
// the #version header, bad files, and the synthetic tokenizer of make-model. Dream's layout is
// built from the facts in qwen_tokenizer.h on the suite's own vocabulary; TokenizerLoadShared
// repeats it on ../shared's real vocabulary and upstream Dream files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sonde/error.h"
#include "sonde/tokenizer.h"
#include "qwen_tokenizer.h"
#include "test_paths.h"

namespace sonde {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// The texts of a cases file that are valid UTF-8 (lines split on '\n' only).
std::vector<std::string> case_texts(const fs::path& file) {
  std::vector<std::string> texts;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && json::parse(line).contains("text")) texts.push_back(json::parse(line)["text"]);
  return texts;
}

// Where the vocabulary and Dream's files come from: the own vocabulary with Dream's files written
// by the tests from qwen_tokenizer.h, or ../shared's real vocabulary and upstream copies (linked,
// nothing copied).
enum class Source { Own, Shared };

const test::QwenTokenizerDirs& tokenizer_dirs(Source source) {
  return source == Source::Own ? test::own_tokenizer_dirs() : test::qwen25_tokenizer_dirs();
}

void link_vocab(Source source, const fs::path& dir, bool merges) {
  const fs::path from = source == Source::Own ? test::own_tokenizer_data() : test::shared_tokenizer_fixture();
  fs::create_symlink(from / "vocab.json", dir / "vocab.json");
  if (merges) fs::create_symlink(from / "merges.txt", dir / "merges.txt");
}

void add_dream_files(Source source, const fs::path& dir, std::initializer_list<const char*> files) {
  if (source == Source::Own) {
    const fs::path all = dir / "all";
    fs::create_directories(all);
    test::write_dream_tokenizer_files(all);
    for (const char* f : files) fs::rename(all / f, dir / f);
    fs::remove_all(all);
  } else {
    for (const char* f : files) fs::create_symlink(test::shared_tokenizer_fixture() / "dream" / f, dir / f);
  }
}

fs::path dream_dir(Source source, bool with_version_header) {
  const fs::path dir = test::temp_dir() / (with_version_header ? "with-header" : "plain");
  fs::create_directories(dir);
  link_vocab(source, dir, !with_version_header);
  add_dream_files(source, dir, {"tokenizer_config.json", "added_tokens.json", "special_tokens_map.json"});
  if (with_version_header) {
    const fs::path from = source == Source::Own ? test::own_tokenizer_data() : test::shared_tokenizer_fixture();
    std::ifstream in(from / "merges.txt", std::ios::binary);
    std::ostringstream ss;
    ss << "#version: 0.2\n" << in.rdbuf();
    write(dir / "merges.txt", ss.str());
  }
  return dir;
}

void expect_slow_layout_like_tokenizer_json(Source source, const fs::path& cases) {
  const Tokenizer fast = Tokenizer::load(tokenizer_dirs(source).fast);
  const auto texts = case_texts(cases);
  ASSERT_GT(texts.size(), 40u);
  for (bool header : {false, true}) {
    const Tokenizer slow = Tokenizer::load(dream_dir(source, header));
    for (const std::string& text : texts) {
      // Dream's own tokens are text to Qwen2.5 but tokens to Dream, so compare only elsewhere.
      if (text.find("<|mask|>") != std::string::npos || text.find("<|beginoftext|>") != std::string::npos) continue;
      EXPECT_EQ(slow.encode(text), fast.encode(text)) << text;
    }
    EXPECT_EQ(slow.vocab_size(), 151667u);
    EXPECT_FALSE(slow.chat_template().empty());
  }
}

// Ids of "a", " b" and "hi" in the vocabulary (the real one: ../shared's README; the own one:
// its vocab.json, read here).
struct PlainIds {
  std::int32_t a, space_b, hi;
};

PlainIds plain_ids(Source source) {
  if (source == Source::Shared) return {64, 293, 6023};
  return {test::own_vocab_id("a"), test::own_vocab_id("\xC4\xA0" "b"), test::own_vocab_id("hi")};
}

void expect_dream_tokens(Source source) {
  const Tokenizer dream = Tokenizer::load(dream_dir(source, false));
  const PlainIds plain = plain_ids(source);
  EXPECT_EQ(dream.token_id("<|beginoftext|>"), 151665);
  EXPECT_EQ(dream.token_id("<|mask|>"), 151666);
  EXPECT_TRUE(dream.is_special(151665));
  EXPECT_TRUE(dream.is_special(151666));
  EXPECT_FALSE(dream.is_special(151657));
  EXPECT_THAT(dream.encode("a<|mask|><|mask|> b<|beginoftext|>"),
              testing::ElementsAre(plain.a, 151666, 151666, plain.space_b, 151665));
  const std::vector<std::int32_t> ids = {151665, plain.hi, 151666};
  EXPECT_EQ(dream.decode(ids), "<|beginoftext|>hi<|mask|>");
  EXPECT_EQ(dream.decode(ids, true), "hi");
}

void expect_tokens_from_added_tokens_json(Source source) {
  const fs::path dir = test::temp_dir();
  link_vocab(source, dir, true);
  add_dream_files(source, dir, {"added_tokens.json", "special_tokens_map.json"});
  const Tokenizer t = Tokenizer::load(dir);
  EXPECT_EQ(t.token_id("<|mask|>"), 151666);
  EXPECT_EQ(t.token_id("<|beginoftext|>"), 151665);
  EXPECT_TRUE(t.is_special(151666));  // listed in special_tokens_map.json
  EXPECT_TRUE(t.chat_template().empty());
}

TEST(TokenizerLoad, SlowLayoutGivesTheSameIdsAsTokenizerJson) {
  expect_slow_layout_like_tokenizer_json(Source::Own, test::data_dir() / "tokenizer-cases.jsonl");
}
TEST(TokenizerLoad, DreamHasBeginOfTextAndMask) { expect_dream_tokens(Source::Own); }
TEST(TokenizerLoad, DreamTokensFromAddedTokensJsonAlone) { expect_tokens_from_added_tokens_json(Source::Own); }

// The same on ../shared's upstream Dream-v0-Instruct-7B tokenizer files.
TEST(TokenizerLoadShared, SlowLayoutGivesTheSameIdsAsTokenizerJson) {
  expect_slow_layout_like_tokenizer_json(Source::Shared, test::shared_tokenizer_fixture() / "cases.jsonl");
}
TEST(TokenizerLoadShared, DreamHasBeginOfTextAndMask) { expect_dream_tokens(Source::Shared); }
TEST(TokenizerLoadShared, DreamTokensFromAddedTokensJsonAlone) { expect_tokens_from_added_tokens_json(Source::Shared); }

// A hand-made byte-level tokenizer.json: bytes for a, b, c, space plus two merges.
std::string tiny_json(const json& merges) {
  json vocab = json::object();
  // GPT-2 byte alphabet: printable bytes stand for themselves, the rest shift to U+0100...
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const char32_t c = printable ? b : next++;
    std::string utf8;
    if (c < 0x80) utf8 = std::string(1, static_cast<char>(c));
    else utf8 = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    vocab[utf8] = b;
  }
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["Ġabc"] = 258;
  json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
            {"added_tokens", json::array({{{"id", 259}, {"content", "<s>"}, {"special", true}}})},
            {"normalizer", {{"type", "NFC"}}},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               json::array({{{"type", "Split"}, {"pattern", {{"Regex", R"( ?\p{L}+|\s+|.)"}}}, {"behavior", "Isolated"}, {"invert", false}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}}};
  return j.dump();
}

TEST(TokenizerLoad, MergesAsStringsOrPairsAreTheSame) {
  const Tokenizer strings = Tokenizer::from_json(tiny_json(json::array({"a b", "ab c", "Ġ abc"})));
  const Tokenizer pairs = Tokenizer::from_json(tiny_json(json::array({json::array({"a", "b"}), json::array({"ab", "c"}),
                                                                     json::array({"Ġ", "abc"})})));
  for (const Tokenizer* t : {&strings, &pairs}) {
    EXPECT_THAT(t->encode("abc abc<s>ab ba"), testing::ElementsAre(257, 258, 259, 256, 32, 98, 97));
    EXPECT_EQ(t->vocab_size(), 260u);
  }
}

TEST(TokenizerLoad, MergeRankDecidesTheOrder) {
  // With "b c" ranked first, "abc" cannot become "ab"+"c": it ends as a, bc.
  json merges = json::array({"b c", "a b", "ab c"});
  std::string text = tiny_json(merges);
  json j = json::parse(text);
  j["model"]["vocab"]["bc"] = 260;
  const Tokenizer t = Tokenizer::from_json(j.dump());
  EXPECT_THAT(t.encode("abc"), testing::ElementsAre(97, 260));
}

void expect_bad_input(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_THAT(e.what(), testing::HasSubstr(needle));
  }
}

TEST(TokenizerLoad, BadFilesAreBadInputNamingTheProblem) {
  const fs::path dir = test::temp_dir();
  expect_bad_input([&] { Tokenizer::load(dir); }, dir.string());
  EXPECT_FALSE(Tokenizer::available(dir));
  write(dir / "tokenizer.json", "{\"model\": {\"vocab\": ");
  EXPECT_TRUE(Tokenizer::available(dir));
  expect_bad_input([&] { Tokenizer::load(dir); }, "tokenizer.json");
  expect_bad_input([] { Tokenizer::from_json(tiny_json(json::array({"a q"}))); }, "merge 0 ('a q')");
  expect_bad_input([] { Tokenizer::from_json(tiny_json(json::array({"a b c"}))); }, "merge 0 'a b c'");
  expect_bad_input([] { Tokenizer::from_json(R"({"model": {"type": "WordPiece", "vocab": {}}})"); }, "WordPiece");
  std::string no_pre = tiny_json(json::array());
  json j = json::parse(no_pre);
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_bad_input([&] { Tokenizer::from_json(j.dump()); }, "Whitespace");
  j = json::parse(no_pre);
  j["model"]["vocab"].erase("a");
  expect_bad_input([&] { Tokenizer::from_json(j.dump()); }, "byte 0x61");
}

TEST(TokenizerLoad, MalformedMergesTxtNamesTheLine) {
  const fs::path dir = test::temp_dir();
  fs::create_symlink(test::own_tokenizer_data() / "vocab.json", dir / "vocab.json");
  write(dir / "merges.txt", "#version: 0.2\nĠ t\nthree parts here\n");
  expect_bad_input([&] { Tokenizer::load(dir); }, "line 3");
}

TEST(SyntheticTokenizer, LoadsRoundTripsAndHasTheSpecials) {
  const std::vector<std::pair<std::string, std::int32_t>> specials = {
      {"<|endoftext|>", 509}, {"<|im_start|>", 510}, {"<|im_end|>", 511}};
  const std::string text = make_synthetic_tokenizer_json(512, specials, 7);
  EXPECT_EQ(text, make_synthetic_tokenizer_json(512, specials, 7));
  const Tokenizer t = Tokenizer::from_json(text, "synthetic");
  EXPECT_EQ(t.vocab_size(), 512u);
  EXPECT_EQ(t.token_id("<|im_end|>"), 511);
  EXPECT_TRUE(t.is_special(509));
  EXPECT_FALSE(t.is_special(300));
  const std::string sample = "<|im_start|>user\nThe model reads tokens: def f(x): return x + 1 日本語 😀<|im_end|>";
  const auto ids = t.encode(sample);
  EXPECT_EQ(t.decode(ids), sample);
  EXPECT_EQ(ids.front(), 510);
  EXPECT_EQ(ids.back(), 511);
  for (auto id : ids) EXPECT_LT(id, 512);
  // Training merged frequent English: " the" is shorter than its 4 bytes.
  EXPECT_LT(t.encode(" the model").size(), 10u);
  const json j = json::parse(text);
  EXPECT_EQ(j["normalizer"]["type"], "NFC");
  EXPECT_EQ(j["model"]["vocab"].size(), 509u);
  EXPECT_NE(make_synthetic_tokenizer_json(512, specials, 8), text);
}

TEST(SyntheticTokenizer, LargeVocabularyUsesFillerMerges) {
  const std::string text = make_synthetic_tokenizer_json(4096, {{"<|endoftext|>", 4000}, {"<|mask|>", 4095}}, 1);
  const Tokenizer t = Tokenizer::from_json(text, "synthetic");
  EXPECT_EQ(t.vocab_size(), 4096u);
  EXPECT_EQ(t.token_id("<|mask|>"), 4095);
  EXPECT_EQ(t.token_bytes(4050), "");  // between the specials: unused
  const std::string sample = "filler merges keep any text decodable: 12345 ÄÖÜ";
  EXPECT_EQ(t.decode(t.encode(sample)), sample);
}

TEST(SyntheticTokenizer, RejectsSpecialsThatDoNotFit) {
  expect_bad_input([] { make_synthetic_tokenizer_json(512, {{"<a>", 512}}, 0); }, "id 512");
  expect_bad_input([] { make_synthetic_tokenizer_json(512, {{"<a>", 100}}, 0); }, "lowest special id is 100");
  expect_bad_input([] { make_synthetic_tokenizer_json(512, {{"<a>", 510}, {"<b>", 510}}, 0); }, "repeated");
}

}  // namespace
}  // namespace sonde
