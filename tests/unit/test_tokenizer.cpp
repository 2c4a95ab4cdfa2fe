// The Qwen2.5 tokenizer's algorithm on the suite's own trained vocabulary (tests/data/bpe-vocab):
// our cases (tests/data/tokenizer-cases.jsonl, ids from tests/reference/qwen_tokenizer_ref.py),
// added tokens, and UTF-8 handling of encode, decode and the streaming decoder. The real Qwen2.5
// vocabulary is ../shared's (TokenizerQwenShared: our texts with the reference's ids on it, its
// cases.jsonl from Tokenizers.js, llama.cpp's vectors, its assembled tokenizer.json).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "sonde/error.h"
#include "sonde/tokenizer.h"
#include "qwen_tokenizer.h"
#include "test_paths.h"

namespace sonde {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The own vocabulary's tokenizer.json (tokenizer.json layout; the slow layout is TokenizerLoad's).
const Tokenizer& qwen() {
  static const Tokenizer tok = Tokenizer::load(test::own_tokenizer_dirs().fast);
  return tok;
}

// Loading the real 7 MB tokenizer.json is slow enough to share it between the tests of this file.
const Tokenizer& real_qwen() {
  static const Tokenizer tok = [] {
    const auto t0 = std::chrono::steady_clock::now();
    Tokenizer t = Tokenizer::load(test::qwen25_tokenizer_dirs().fast);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ info ] tokenizer.json loaded in " << ms << " ms\n";
    return t;
  }();
  return tok;
}

// One JSON object per line; lines split on '\n' only (texts hold U+2028 and U+0085).
std::vector<json> read_cases(const fs::path& file) {
  std::vector<json> cases;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) cases.push_back(json::parse(line));
  return cases;
}

std::vector<json> own_cases() { return read_cases(test::data_dir() / "tokenizer-cases.jsonl"); }
// The same texts with the reference's ids on the real Qwen2.5 vocabulary.
std::vector<json> own_cases_on_qwen25() { return read_cases(test::data_dir() / "tokenizer-cases-qwen2.5.jsonl"); }
std::vector<json> shared_cases() { return read_cases(test::shared_tokenizer_fixture() / "cases.jsonl"); }

std::string unhex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// A valid case: ids, decoded text (NFC of the text) and whether it round-trips. An invalid one
// ("hex", "error_offset"): encode refuses it as bad input naming the first bad byte.
void expect_case(const Tokenizer& tok, const json& c) {
  SCOPED_TRACE(c["name"].get<std::string>());
  if (c.contains("hex")) {
    const std::string offset = "byte offset " + std::to_string(c["error_offset"].get<int>());
    try {
      tok.encode(unhex(c["hex"]));
      ADD_FAILURE() << "no error; expected one naming " << offset;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_THAT(e.what(), testing::HasSubstr(offset));
    }
    return;
  }
  const std::string text = c["text"];
  const auto expected = c["ids"].get<std::vector<std::int32_t>>();
  const std::string decoded = c["decoded"];
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tok.decode(expected), decoded);
  EXPECT_EQ(c["round_trip"].get<bool>(), decoded == text);
  EXPECT_EQ(tok.decode(ids), decoded);  // decode(encode(s)) == NFC(s)
}

bool valid_utf8(std::string_view s) {
  // Independent of the code under test: re-encode through a strict decoder.
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    char32_t c = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto cb = static_cast<unsigned char>(s[i + k]);
      if ((cb & 0xC0) != 0x80) return false;
      c = (c << 6) | (cb & 0x3F);
    }
    const char32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

TEST(TokenizerQwen, OwnCasesMatchTheReferenceScript) {
  const auto cases = own_cases();
  ASSERT_EQ(cases.size(), 51u);  // tests/reference/qwen_tokenizer_ref.py generate
  int invalid = 0, not_nfc = 0;
  for (const json& c : cases) {
    expect_case(qwen(), c);
    invalid += c.contains("hex");
    not_nfc += c.contains("round_trip") && !c["round_trip"].get<bool>();
  }
  EXPECT_EQ(invalid, 6);
  EXPECT_GT(not_nfc, 0) << "some cases should change under NFC";
}

TEST(TokenizerQwen, AddedTokensKeepQwenIdsBesideTheVocabulary) {
  EXPECT_EQ(qwen().token_id("<|endoftext|>"), 151643);
  EXPECT_EQ(qwen().token_id("<|file_sep|>"), 151664);
  EXPECT_EQ(qwen().token_id("\xC4\xA0the"), test::own_vocab_id("\xC4\xA0the"));  // "Ġthe" as written in vocab.json
  EXPECT_THAT(qwen().encode("<|im_start|>hi<|im_end|>"),
              testing::ElementsAre(151644, test::own_vocab_id("hi"), 151645));
  EXPECT_EQ(qwen().token_id("<|mask|>"), std::nullopt);  // Dream's, not Qwen2.5's
  EXPECT_EQ(qwen().vocab_size(), 151665u);               // ids up to the last added token
  EXPECT_EQ(qwen().token_bytes(151000), "");             // between the vocabulary and the added tokens
  EXPECT_TRUE(qwen().is_special(151643));
  EXPECT_FALSE(qwen().is_special(151657));  // <tool_call> is added but not special
  EXPECT_FALSE(qwen().is_special(test::own_vocab_id("\xC4\xA0the")));
}

// `hi` is one token in both vocabularies.
void expect_decode_skips_specials(const Tokenizer& tok, std::int32_t hi, std::int32_t user, std::int32_t newline) {
  const std::vector<std::int32_t> ids = {151644, user, newline, hi, 151645, 151657};
  EXPECT_EQ(tok.decode(ids), "<|im_start|>user\nhi<|im_end|><tool_call>");
  EXPECT_EQ(tok.decode(ids, true), "user\nhi<tool_call>");
  const std::vector<std::int32_t> unknown = {hi, 151665, 999999, -1};
  EXPECT_EQ(tok.decode(unknown), "hi");
}

TEST(TokenizerQwen, DecodeSkipsSpecialTokensOnRequest) {
  expect_decode_skips_specials(qwen(), test::own_vocab_id("hi"), test::own_vocab_id("user"), test::own_vocab_id("\xC4\x8A"));
}

TEST(TokenizerQwen, InvalidUtf8InputIsBadInputNamingTheOffset) {
  for (const auto& [text, offset] : std::vector<std::pair<std::string, int>>{
           {"ab\xFF" "cd", 2}, {"\xC0\xAF", 0}, {"x\xED\xA0\x80", 1}, {"hi \xE4\xBD", 3}, {"\xF4\x90\x80\x80", 0}}) {
    try {
      qwen().encode(text);
      ADD_FAILURE() << "no error for offset " << offset;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_THAT(e.what(), testing::HasSubstr("byte offset " + std::to_string(offset)));
    }
  }
}

// Expected strings from Python: bytes.decode("utf-8", errors="replace"), one U+FFFD per maximal
// invalid subpart.
TEST(TokenizerUtf8, ReplacementFollowsMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xFF", r},
      {"a\x80" "b", "a" + r + "b"},
      {"\xE4\xBD", r},
      {"\xE4\xBD" "a", r + "a"},
      {"\xF0\x9F\x98", r},
      {"\xED\xA0\x80", r + r + r},
      {"\xC0\xAF", r + r},
      {"\xF4\x90\x80\x80", r + r + r + r},
      {"\xE0\x80\x80", r + r + r},
      {"\xF0\x80\x80\x80x", r + r + r + r + "x"},
      {"\xE4\xBD\xA0\xBD", "\xE4\xBD\xA0" + r},
      {"\xF5" "a", r + "a"},
      {"\xC2", r},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(utf8_replace_invalid(in), want);
}

TEST(TokenizerQwen, DecodeOfPartialByteTokensShowsReplacement) {
  // "你" is E4 BD A0; its first two bytes alone decode to one U+FFFD, as in Python.
  const std::vector<std::int32_t> ids = {*qwen().token_id("\xC3\xA4"), *qwen().token_id("\xC2\xBD")};
  EXPECT_EQ(qwen().token_bytes(ids[0]), "\xE4");
  EXPECT_EQ(qwen().decode(ids), "\xEF\xBF\xBD");
}

TEST(TokenizerQwen, StreamDecoderNeverEmitsHalfACharacter) {
  const std::string text =
      "数据科学家说：\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 家族 "
      "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5 東京 <|im_end|> 한국어 ok";
  const auto ids = qwen().encode(text);
  for (bool skip : {false, true}) {
    StreamDecoder stream(qwen(), skip);
    std::string all;
    int split_chars = 0;
    for (std::int32_t id : ids) {
      const std::string chunk = stream.push(id);
      EXPECT_TRUE(valid_utf8(chunk)) << "id " << id;
      if (!valid_utf8(std::string(qwen().token_bytes(id)))) ++split_chars;
      all += chunk;
    }
    all += stream.finish();
    EXPECT_EQ(all, qwen().decode(ids, skip));
    EXPECT_GT(split_chars, 0) << "the text should exercise tokens that split a character";
  }
  EXPECT_EQ(qwen().decode(ids), text);
}

TEST(TokenizerUtf8, StreamDecoderFlushesInvalidBytes) {
  const auto e4 = *qwen().token_id("\xC3\xA4");  // byte E4, a 3-byte lead
  const auto a = *qwen().token_id("a");
  StreamDecoder stream(qwen());
  EXPECT_EQ(stream.push(e4), "");
  EXPECT_EQ(stream.push(a), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(stream.push(e4), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
}

TEST(TokenizerQwen, EncodeIsThreadSafe) {
  std::vector<json> cases;
  for (const json& c : own_cases())
    if (!c.contains("hex")) cases.push_back(c);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (const json& c : cases)
          if (qwen().encode(c["text"].get<std::string>()) != c["ids"].get<std::vector<std::int32_t>>()) ++failures[t];
    });
  for (auto& th : threads) th.join();
  EXPECT_THAT(failures, testing::Each(0));
}

TEST(TokenizerQwen, LongRunsUseTheHeapMergeAndAgreeWithShortOnes) {
  // A 5000-letter word goes through the O(n log n) merge; it must decode back exactly, and
  // a 40-letter word (small path) must match the prefix pattern of repeated merges.
  const std::string long_word(5000, 'a');
  const auto ids = qwen().encode(long_word);
  EXPECT_EQ(qwen().decode(ids), long_word);
  EXPECT_LT(ids.size(), 5000u / 2);
  std::string mixed;
  for (int i = 0; i < 300; ++i) mixed += "abracadabra";
  EXPECT_EQ(qwen().decode(qwen().encode(mixed)), mixed);
  const std::string spaces(100000, ' ');
  EXPECT_EQ(qwen().decode(qwen().encode(spaces)), spaces);
}

// ---- independent checks on ../shared's data ------------------------------------------------

// Ids stated in ../shared's README for the real vocabulary.
TEST(TokenizerQwenShared, KnownIdsFromTheReadme) {
  EXPECT_THAT(real_qwen().encode("<|im_start|>user\nhi<|im_end|>"), testing::ElementsAre(151644, 872, 198, 6023, 151645));
  EXPECT_THAT(real_qwen().encode("\xF0\x9F\x98\x8A"), testing::ElementsAre(144236));
  EXPECT_EQ(real_qwen().token_id("<|endoftext|>"), 151643);
  EXPECT_EQ(real_qwen().token_id("<|file_sep|>"), 151664);
  EXPECT_EQ(real_qwen().token_id("\xC4\xA0the"), 279);  // "Ġthe" as written in vocab.json
  EXPECT_EQ(real_qwen().token_id("<|mask|>"), std::nullopt);
  EXPECT_EQ(real_qwen().vocab_size(), 151665u);
  EXPECT_TRUE(real_qwen().is_special(151643));
  EXPECT_FALSE(real_qwen().is_special(151657));
  EXPECT_FALSE(real_qwen().is_special(279));
}

TEST(TokenizerQwenShared, DecodeSkipsSpecialTokensOnRequest) { expect_decode_skips_specials(real_qwen(), 6023, 872, 198); }

// Our texts (tests/reference/qwen_tokenizer_ref.py CASES) with the reference's ids on the real vocabulary.
TEST(TokenizerQwenShared, OwnTextsOnTheRealVocabulary) {
  const auto cases = own_cases_on_qwen25();
  ASSERT_EQ(cases.size(), 51u);
  for (const json& c : cases) expect_case(real_qwen(), c);
}

// 68 cases whose ids come from Hugging Face Tokenizers.js (an independent implementation).
TEST(TokenizerQwenShared, CasesJsonlIdsDecodedAndRoundTrip) {
  const auto cases = shared_cases();
  ASSERT_EQ(cases.size(), 68u);
  for (const json& c : cases) expect_case(real_qwen(), c);
}

// llama.cpp's test vectors, made there with the Hugging Face Qwen2 tokenizer.
TEST(TokenizerQwenShared, LlamaCppVectors) {
  const fs::path dir = test::shared_tokenizer_fixture() / "llamacpp-vectors";
  const std::string inp = slurp(dir / "ggml-vocab-qwen2.gguf.inp");
  const std::string marker = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (std::size_t pos = 0; pos < inp.size();) {
    const auto end = inp.find(marker, pos);
    ASSERT_NE(end, std::string::npos);
    inputs.push_back(inp.substr(pos, end - pos));
    pos = end + marker.size();
  }
  std::ifstream out(dir / "ggml-vocab-qwen2.gguf.out");
  std::vector<std::vector<std::int32_t>> expected;
  for (std::string line; std::getline(out, line);) {
    std::istringstream ss(line);
    expected.emplace_back();
    for (std::int32_t id; ss >> id;) expected.back().push_back(id);
  }
  ASSERT_EQ(inputs.size(), 43u);
  ASSERT_EQ(expected.size(), inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + inputs[i]);
    EXPECT_EQ(real_qwen().encode(inputs[i]), expected[i]);
    EXPECT_EQ(real_qwen().decode(expected[i]), inputs[i]);
  }
}

// The added-token table of tests/support/qwen_tokenizer.h against Dream's upstream
// tokenizer_config.json (Qwen2.5's 22 tokens plus Dream's two).
TEST(TokenizerQwenShared, AddedTokenTableMatchesTheUpstreamConfig) {
  std::ifstream in(test::shared_tokenizer_fixture() / "dream/tokenizer_config.json");
  const json upstream = json::parse(in)["added_tokens_decoder"];
  std::size_t n = 0;
  for (const auto* list : {&test::qwen25_added_tokens(), &test::dream_extra_tokens()})
    for (const test::AddedToken& t : *list) {
      SCOPED_TRACE(t.content);
      ++n;
      ASSERT_TRUE(upstream.contains(std::to_string(t.id)));
      EXPECT_EQ(upstream[std::to_string(t.id)], test::added_token_entry(t));
    }
  EXPECT_EQ(upstream.size(), n);
}

// The team's assembled tokenizer.json (../shared) against the one the tests assemble.
TEST(TokenizerQwenShared, SharedTokenizerJsonGivesTheSameIds) {
  const Tokenizer shared = Tokenizer::load(test::shared_tokenizer_fixture());
  EXPECT_EQ(shared.vocab_size(), real_qwen().vocab_size());
  for (const auto& cases : {shared_cases(), own_cases_on_qwen25()})
    for (const json& c : cases) {
      if (c.contains("hex")) continue;
      const std::string text = c["text"];
      EXPECT_EQ(shared.encode(text), real_qwen().encode(text)) << text;
      EXPECT_EQ(shared.encode(text), c["ids"].get<std::vector<std::int32_t>>()) << text;
    }
}

}  // namespace
}  // namespace sonde
