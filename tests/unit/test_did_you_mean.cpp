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
  // An object option's keys are checked by the same table (capture, score, lens, defaults).
  EXPECT_THAT(refusal({{"capture", {{"positons", "last"}}}}, RunKind::Generate),
              HasSubstr("capture: unknown option \"positons\"; did you mean: positions"));
  EXPECT_THAT(refusal({{"defaults", {{"temprature", 0}}}}, RunKind::Generate),
              HasSubstr("defaults: unknown option \"temprature\"; did you mean: temperature"));
  EXPECT_EQ(refusal({{"defaults", {{"block_size", 4}}}, {"capture", {{"sae_sparse", "nonzero"}}}}, RunKind::Generate), "");
  EXPECT_EQ(sonde::run_kind_from_name("lens"), RunKind::Lens);
  EXPECT_THROW(sonde::run_kind_from_name("lense"), sonde::Error);
}

// The flat check (sonde serve's body): the same table through the front end's field names.
std::pair<std::string, std::string> flat_refusal(const nlohmann::json& o, sonde::RunKind k) {
  const std::vector<sonde::OptionAlias> aliases{{"positions", "capture.positions"}, {"steps", "defaults.steps"}, {"seed", "seed"}};
  try {
    sonde::check_flat_options(o, k, {"prompt"}, aliases);
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput);
    return {e.setting(), e.what()};
  }
  return {};
}

TEST(RunSchema, FlatFieldsAreCheckedAgainstTheSameTable) {
  using sonde::RunKind;
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(flat_refusal({{"prompt", 1}, {"positions", "last"}, {"steps", 2}, {"seed", 1}}, RunKind::Generate), P{});
  EXPECT_EQ(flat_refusal({{"positons", "last"}}, RunKind::Generate), (P{"positons", "positons: unknown field; did you mean: positions"}));
  EXPECT_EQ(flat_refusal({{"promt", 1}}, RunKind::Forward), (P{"promt", "promt: unknown field; did you mean: prompt"}));
  EXPECT_EQ(flat_refusal({{"steps", 4}}, RunKind::Forward),
            (P{"steps", "steps: does not apply to a forward run (it applies to generate, lens)"}));
  EXPECT_EQ(flat_refusal({{"seed", 4}}, RunKind::Lens), (P{"seed", "seed: does not apply to a lens run (it applies to generate, score)"}));
  // An alias to an option the table lacks is the front end's bug, not the user's.
  try {
    sonde::check_flat_options({{"x", 1}}, RunKind::Generate, {}, {{"x", "capture.nope"}});
    ADD_FAILURE() << "an alias to capture.nope was taken";
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::Runtime);
  }
}

}  // namespace
