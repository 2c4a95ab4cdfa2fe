// Where a completion's text ends: HF-style stop strings (text cut before the first stop string,
// also while streaming) and Dream's end tokens (<|endoftext|> 151643, DiffuCoder's <|dlm_pad|>
// 151667, which only real vocabularies have).
#include <sonde/stop_strings.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sonde {
namespace {

TEST(StopStrings, TextEndsBeforeTheEarliestStopString) {
  EXPECT_EQ(cut_at_stop_string("hello world. bye", {"."}), "hello world");
  // The earliest occurrence wins, whichever stop string it is.
  EXPECT_EQ(cut_at_stop_string("a;b.c;d", {".", ";"}), "a");
  EXPECT_EQ(cut_at_stop_string("abcabc", {"bc", "ca"}), "a");
  // A stop string at the very start leaves an empty text; none found leaves the text alone.
  EXPECT_EQ(cut_at_stop_string("STOPrest", {"STOP"}), "");
  EXPECT_EQ(cut_at_stop_string("no stop here", {"STOP"}), "no stop here");
  EXPECT_EQ(cut_at_stop_string("abc", {}), "abc");
  EXPECT_EQ(cut_at_stop_string("abc", {""}), "abc");  // an empty stop string never matches
  EXPECT_EQ(find_stop_string("xx\n\nyy", {"\n\n"}), 2u);
  EXPECT_EQ(find_stop_string("xx", {"y"}), std::string::npos);
  // Multi-byte UTF-8 stop strings are matched as bytes.
  EXPECT_EQ(cut_at_stop_string("d\xc3\xa9j\xc3\xa0 vu", {"\xc3\xa0"}), "d\xc3\xa9j");
}

// Streaming in chunks shows exactly the cut text, however the chunks split a stop string.
TEST(StopStrings, StreamingFilterShowsExactlyTheCutText) {
  const std::vector<std::string> stops{"<END>", "##"};
  const std::vector<std::string> texts{"abc<END>def", "ab#c##d", "<<EN<END>", "plain text", "x<EN", "#", "a#"};
  for (const auto& text : texts)
    for (std::size_t chunk = 1; chunk <= text.size(); ++chunk) {
      StopStringFilter f(stops);
      std::string shown;
      for (std::size_t i = 0; i < text.size(); i += chunk) shown += f.push(text.substr(i, chunk));
      shown += f.finish();
      EXPECT_EQ(shown, cut_at_stop_string(text, stops)) << text << " in chunks of " << chunk;
      EXPECT_EQ(f.stopped(), find_stop_string(text, stops) != std::string::npos) << text;
    }
}

TEST(StopStrings, StreamingFilterHoldsBackOnlyAPossibleStopPrefix) {
  StopStringFilter f({"STOP"});
  EXPECT_EQ(f.push("abc ST"), "abc ");  // "ST" may begin STOP
  EXPECT_EQ(f.push("AR"), "STAR");      // it did not
  EXPECT_EQ(f.push("xSTO"), "x");
  EXPECT_EQ(f.push("P and more"), "");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.push("later"), "");
  EXPECT_EQ(f.finish(), "");
  StopStringFilter none({});
  EXPECT_EQ(none.push("ab"), "ab");
  EXPECT_EQ(none.finish(), "");
}

// Dream: the completion ids are cut at the first end token before decoding (model-spec §3.5).
TEST(EndTokens, DreamCompletionIsCutAtTheFirstEndToken) {
  const std::int32_t eot = 151643, dlm_pad = 151667;
  EXPECT_EQ(cut_at_end_tokens({5, 6, eot, 7, eot}, {eot, dlm_pad}), (std::vector<std::int32_t>{5, 6}));
  EXPECT_EQ(cut_at_end_tokens({5, dlm_pad, 6, eot}, {eot, dlm_pad}), (std::vector<std::int32_t>{5}));
  EXPECT_EQ(cut_at_end_tokens({5, 6, dlm_pad, dlm_pad}, {eot, dlm_pad}), (std::vector<std::int32_t>{5, 6}));
  EXPECT_EQ(cut_at_end_tokens({eot, 5}, {eot, dlm_pad}), (std::vector<std::int32_t>{}));
  EXPECT_EQ(cut_at_end_tokens({5, 6}, {eot, dlm_pad}), (std::vector<std::int32_t>{5, 6}));
  // A vocabulary without <|dlm_pad|> passes only the ids it has.
  EXPECT_EQ(cut_at_end_tokens({5, dlm_pad, 6, eot}, {eot}), (std::vector<std::int32_t>{5, dlm_pad, 6}));
  EXPECT_EQ(cut_at_end_tokens({5, 6}, {}), (std::vector<std::int32_t>{5, 6}));
}

}  // namespace
}  // namespace sonde
