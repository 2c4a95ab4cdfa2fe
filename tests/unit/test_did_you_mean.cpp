// did_you_mean.h: only close names are suggested (edit distance <= max(2, len / 3)), closest first;
// and run_schema.h's check refuses unknown keys, keys of another kind and wrong types.
#include <sonde/did_you_mean.h>
#include <sonde/error.h>
#include <sonde/run_schema.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace {

using ::testing::HasSubstr;

TEST(DidYouMean, SuggestsOnlyCloseNamesClosestFirst) {
  const std::vector<std::string> names{"seed", "steps", "batch_size", "temperature"};
  EXPECT_EQ(sonde::did_you_mean("sead", names), "; did you mean: seed");          // distance 1
  EXPECT_EQ(sonde::did_you_mean("step", names), "; did you mean: steps, seed");   // 1, then 2
  EXPECT_EQ(sonde::did_you_mean("temprature", names), "; did you mean: temperature");
  EXPECT_EQ(sonde::did_you_mean("xyz", names), "");                               // nothing within 2
  EXPECT_EQ(sonde::did_you_mean("batch", names), "");                             // 5 edits from batch_size
  EXPECT_EQ(sonde::closest_names("step", names, 1), std::vector<std::string>{"steps"});
}

std::string refusal(const nlohmann::json& o, sonde::RunKind k) {
  try {
    sonde::check_run_options(o, k, {"memory"}, "options");
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput);
    return e.what();
  }
  return "";
}

TEST(RunSchema, RefusesUnknownMisplacedAndMistypedOptions) {
  using sonde::RunKind;
  EXPECT_EQ(refusal({{"seed", 1}, {"memory", true}, {"capture", nlohmann::json::object()}}, RunKind::Generate), "");
  EXPECT_THAT(refusal({{"sead", 1}}, RunKind::Generate), HasSubstr("unknown option \"sead\"; did you mean: seed"));
  EXPECT_THAT(refusal({{"batch_size", 2}}, RunKind::Forward),
              HasSubstr("option \"batch_size\" does not apply to a forward run (it applies to generate)"));
  EXPECT_THAT(refusal({{"checkpoint_seconds", "1"}}, RunKind::Generate), HasSubstr("must be a number, got \"1\""));
  EXPECT_EQ(sonde::run_kind_from_name("lens"), RunKind::Lens);
  EXPECT_THROW(sonde::run_kind_from_name("lense"), sonde::Error);
}

}  // namespace
