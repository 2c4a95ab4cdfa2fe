// config.json / generation_config.json: Dream-v0-Instruct-7B's layout, every bad-input case, and
// ../shared's golden and upstream configs on top (*Shared).
#include <sonde/config.h>
#include <sonde/error.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;

// A Qwen2.5-0.5B-shaped config (model-spec §1.1) that tests then break one field at a time.
json valid_config() {
  return json{{"model_type", "qwen2"},
              {"architectures", json::array({"Qwen2ForCausalLM"})},
              {"hidden_size", 896},
              {"num_hidden_layers", 24},
              {"num_attention_heads", 14},
              {"num_key_value_heads", 2},
              {"intermediate_size", 4864},
              {"vocab_size", 151936},
              {"max_position_embeddings", 32768},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 1000000.0},
              {"rope_scaling", nullptr},
              {"use_sliding_window", false},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", true},
              {"bos_token_id", 151643},
              {"eos_token_id", 151643},
              {"torch_dtype", "bfloat16"}};
}

std::string config_error(const json& j, const std::string& label = "cfg/config.json") {
  try {
    sonde::ModelConfig::parse(j.dump(), label);
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput) << e.what();
    EXPECT_THAT(std::string(e.what()), HasSubstr(label));
    return e.what();
  }
  ADD_FAILURE() << "no error for " << j.dump();
  return "";
}

std::string generation_error(const std::string& text) {
  try {
    sonde::parse_generation_config(text, "gen.json");
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for " << text;
  return "";
}

TEST(ModelConfig, ParsesAValidConfig) {
  const auto c = sonde::ModelConfig::parse(valid_config().dump(), "x");
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"Qwen2ForCausalLM"});
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{151643});
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.raw_json, valid_config().dump());
}

TEST(ModelConfig, ExplicitHeadDimAndEosList) {
  auto j = valid_config();
  j["head_dim"] = 128;
  j["eos_token_id"] = {151643, 151645};
  j.erase("tie_word_embeddings");
  const auto c = sonde::ModelConfig::parse(j.dump(), "x");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int64_t>{151643, 151645}));
  EXPECT_FALSE(c.tie_word_embeddings) << "default is untied";
}

TEST(ModelConfig, NotJson) {
  const std::string label = "m/config.json";
  try {
    sonde::ModelConfig::parse("{\"hidden_size\": ", label);
    FAIL() << "no error";
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput);
    EXPECT_THAT(e.what(), HasSubstr("m/config.json: not valid JSON: "));
  }
}

TEST(ModelConfig, NotAnObject) {
  EXPECT_THAT(config_error(json::array({1, 2})), HasSubstr("expected a JSON object, got [1,2]"));
}

TEST(ModelConfig, MissingField) {
  for (const char* field : {"model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "intermediate_size", "vocab_size", "rms_norm_eps",
                            "rope_theta", "max_position_embeddings"}) {
    auto j = valid_config();
    j.erase(field);
    EXPECT_THAT(config_error(j), HasSubstr(std::string("cfg/config.json: field '") + field + "' is missing"));
  }
}

TEST(ModelConfig, WrongType) {
  auto j = valid_config();
  j["hidden_size"] = "abc";
  EXPECT_THAT(config_error(j), HasSubstr(R"(cfg/config.json: field 'hidden_size' is "abc", expected a positive integer)"));
}

TEST(ModelConfig, NonPositiveOrFractionalSizes) {
  auto j = valid_config();
  j["num_hidden_layers"] = 0;
  EXPECT_THAT(config_error(j), HasSubstr("field 'num_hidden_layers' is 0, expected a positive integer"));
  j = valid_config();
  j["vocab_size"] = 2048.5;
  EXPECT_THAT(config_error(j), HasSubstr("field 'vocab_size' is 2048.5"));
  j = valid_config();
  j["rope_theta"] = -1;
  EXPECT_THAT(config_error(j), HasSubstr("field 'rope_theta' is -1, expected a positive number"));
  j = valid_config();
  j["model_type"] = 3;
  EXPECT_THAT(config_error(j), HasSubstr("field 'model_type' is 3, expected a string"));
}

TEST(ModelConfig, HeadsMustDivide) {
  auto j = valid_config();
  j["hidden_size"] = 900;
  EXPECT_THAT(config_error(j), HasSubstr("hidden_size 900 is not divisible by num_attention_heads 14"));
  j = valid_config();
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(config_error(j), HasSubstr("num_attention_heads 14 is not a multiple of num_key_value_heads 3"));
  j = valid_config();
  j["head_dim"] = 63;
  EXPECT_THAT(config_error(j), HasSubstr("head_dim 63 is odd"));
}

TEST(ModelConfig, UnsupportedFeatures) {
  auto j = valid_config();
  j["hidden_act"] = "gelu";
  EXPECT_THAT(config_error(j), HasSubstr("field 'hidden_act' is \"gelu\""));
  j = valid_config();
  j["use_sliding_window"] = true;
  EXPECT_THAT(config_error(j), HasSubstr("field 'use_sliding_window' is true"));
  j = valid_config();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(config_error(j), HasSubstr(R"(field 'rope_scaling' is {"factor":4.0,"type":"yarn"})"));
}

TEST(ModelConfig, BadTokenIds) {
  auto j = valid_config();
  j["eos_token_id"] = {1, "x"};
  EXPECT_THAT(config_error(j), HasSubstr("field 'eos_token_id' is \"x\""));
  j = valid_config();
  j["bos_token_id"] = -5;
  EXPECT_THAT(config_error(j), HasSubstr("field 'bos_token_id' is -5"));
}

TEST(ModelConfig, LoadFromAMissingDirectory) {
  const auto dir = sonde::test::temp_dir() / "absent";
  try {
    sonde::ModelConfig::load(dir);
    FAIL() << "no error";
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput);
    EXPECT_THAT(e.what(), HasSubstr((dir / "config.json").string()));
  }
}

TEST(ModelConfig, LoadWithoutGenerationConfigDerivesIds) {
  const auto dir = sonde::test::temp_dir();
  std::ofstream(dir / "config.json") << valid_config().dump();
  const auto c = sonde::ModelConfig::load(dir);
  EXPECT_EQ(c.dir, dir);
  EXPECT_EQ(c.generation.eos_token_ids, std::vector<std::int64_t>{151643});
  EXPECT_EQ(c.generation.raw_json, "{}");
}

TEST(ModelConfig, LoadReportsABadGenerationConfigByItsPath) {
  const auto dir = sonde::test::temp_dir();
  std::ofstream(dir / "config.json") << valid_config().dump();
  std::ofstream(dir / "generation_config.json") << R"({"top_k": "many"})";
  try {
    sonde::ModelConfig::load(dir);
    FAIL() << "no error";
  } catch (const sonde::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "generation_config.json").string() + ": field 'top_k' is \"many\""));
  }
}

TEST(GenerationConfig, OptionalFieldsAndNulls) {
  const auto g = sonde::parse_generation_config(
      R"({"eos_token_id":[1,2],"do_sample":true,"temperature":0.7,"top_p":null,"top_k":20,)"
      R"("repetition_penalty":1.05,"max_new_tokens":64,"steps":32,"eps":0.001,"alg":"entropy","alg_temp":null,)"
      R"("mask_token_id":null})",
      "gen.json");
  EXPECT_EQ(g.eos_token_ids, (std::vector<std::int64_t>{1, 2}));
  EXPECT_TRUE(g.do_sample);
  EXPECT_DOUBLE_EQ(*g.temperature, 0.7);
  EXPECT_FALSE(g.top_p.has_value());
  EXPECT_EQ(g.top_k, 20);
  EXPECT_DOUBLE_EQ(*g.repetition_penalty, 1.05);
  EXPECT_EQ(g.max_new_tokens, 64);
  EXPECT_EQ(g.steps, 32);
  EXPECT_DOUBLE_EQ(*g.eps, 0.001);
  EXPECT_EQ(g.alg, "entropy");
  EXPECT_FALSE(g.alg_temp.has_value());
  EXPECT_FALSE(g.mask_token_id.has_value());
}

TEST(GenerationConfig, WrongTypes) {
  EXPECT_THAT(generation_error(R"({"temperature":"hot"})"), HasSubstr("gen.json: field 'temperature' is \"hot\""));
  EXPECT_THAT(generation_error(R"({"do_sample":1})"), HasSubstr("field 'do_sample' is 1, expected true or false"));
  EXPECT_THAT(generation_error(R"({"eos_token_id":"x"})"), HasSubstr("field 'eos_token_id' is \"x\""));
  EXPECT_THAT(generation_error(R"({"alg":3})"), HasSubstr("field 'alg' is 3, expected a string"));
  EXPECT_THAT(generation_error("not json"), HasSubstr("gen.json: not valid JSON"));
}

// ---- the Dream-v0-Instruct-7B config -------------------------------------------------------

// The values every Dream-v0-Instruct-7B config load must give (its Hugging Face config.json and
// generation_config.json), whether the files are the tests' own or ../shared's upstream copies.
void expect_dream_instruct_7b(const sonde::ModelConfig& c) {
  EXPECT_EQ(c.model_type, "Dream");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"DreamModel"});
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.intermediate_size, 18944);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 28);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);  // 3584 / 28, not in the file
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.mask_token_id, 151666);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.pad_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{151643});
  EXPECT_EQ(c.generation.alg, "origin");
  EXPECT_EQ(c.generation.steps, 512);
  EXPECT_DOUBLE_EQ(*c.generation.eps, 0.001);
  EXPECT_DOUBLE_EQ(*c.generation.temperature, 0.0);
  EXPECT_FALSE(c.generation.alg_temp.has_value());
  EXPECT_FALSE(c.generation.top_k.has_value());
  EXPECT_FALSE(c.generation.mask_token_id.has_value());
}

// The fields of Dream-v0-Instruct-7B's config.json and generation_config.json, written here with
// the upstream names, nulls and extras (auto_map, use_mrope, sliding_window null, ...).
TEST(UpstreamConfig, DreamInstruct7BLayout) {
  const auto dir = sonde::test::temp_dir();
  const json config = {{"architectures", {"DreamModel"}},
                       {"attention_dropout", 0.0},
                       {"auto_map", {{"AutoConfig", "configuration_dream.DreamConfig"}, {"AutoModel", "modeling_dream.DreamModel"}}},
                       {"bos_token_id", 151643},
                       {"eos_token_id", 151643},
                       {"hidden_act", "silu"},
                       {"hidden_size", 3584},
                       {"initializer_range", 0.02},
                       {"intermediate_size", 18944},
                       {"mask_token_id", 151666},
                       {"max_position_embeddings", 131072},
                       {"max_window_layers", 28},
                       {"model_type", "Dream"},
                       {"num_attention_heads", 28},
                       {"num_hidden_layers", 28},
                       {"num_key_value_heads", 4},
                       {"pad_token_id", 151643},
                       {"rms_norm_eps", 1e-06},
                       {"rope_scaling", nullptr},
                       {"rope_theta", 1000000.0},
                       {"sliding_window", nullptr},
                       {"tie_word_embeddings", false},
                       {"torch_dtype", "bfloat16"},
                       {"use_cache", true},
                       {"use_mrope", false},
                       {"use_sliding_window", false},
                       {"vocab_size", 152064}};
  const json generation = {{"_from_model_config", true}, {"alg", "origin"},   {"alg_temp", nullptr},
                           {"bos_token_id", 151643},     {"eos_token_id", 151643}, {"eps", 0.001},
                           {"mask_token_id", nullptr},   {"output_history", false}, {"pad_token_id", 151643},
                           {"steps", 512},               {"temperature", 0.0},   {"top_k", nullptr},
                           {"top_p", nullptr}};
  std::ofstream(dir / "config.json") << config.dump(2);
  std::ofstream(dir / "generation_config.json") << generation.dump(2);
  expect_dream_instruct_7b(sonde::ModelConfig::load(dir));
}

// ../shared's byte copies of the upstream files.
// LLaDA-8B-Base's config.json (OLMo-derived names): read as the same quantities.
json llada_8b_config() {
  return json{{"activation_type", "silu"}, {"architectures", json::array({"LLaDAModelLM"})}, {"block_type", "llama"},
              {"d_model", 4096}, {"embedding_size", 126464}, {"eos_token_id", 126081}, {"include_bias", false},
              {"mask_token_id", 126336}, {"max_sequence_length", 4096}, {"mlp_hidden_size", 12288},
              {"mlp_ratio", 4}, {"model_type", "llada"}, {"multi_query_attention", nullptr}, {"n_heads", 32},
              {"n_kv_heads", 32}, {"n_layers", 32}, {"pad_token_id", 126081}, {"rms_norm_eps", 1e-5},
              {"rope_theta", 500000.0}, {"vocab_size", 126464}, {"weight_tying", false}};
}

TEST(UpstreamConfig, Llada8BOlmoNames) {
  const auto c = sonde::ModelConfig::parse(llada_8b_config().dump(), "llada/config.json");
  EXPECT_EQ(c.model_type, "llada");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.vocab_size, 126464);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.mask_token_id, 126336);
  // null n_kv_heads: one per query head; null mlp_hidden_size: mlp_ratio * d_model.
  auto j = llada_8b_config();
  j["n_kv_heads"] = nullptr;
  j["mlp_hidden_size"] = nullptr;
  j["weight_tying"] = true;
  const auto d = sonde::ModelConfig::parse(j.dump(), "llada/config.json");
  EXPECT_EQ(d.num_key_value_heads, 32);
  EXPECT_EQ(d.intermediate_size, 4 * 4096);
  EXPECT_TRUE(d.tie_word_embeddings);
  j["activation_type"] = "gelu";
  EXPECT_THAT(config_error(j), HasSubstr("field 'activation_type' is \"gelu\""));
  j.erase("d_model");
  j["activation_type"] = "silu";
  EXPECT_THAT(config_error(j), HasSubstr("field 'hidden_size' is missing"));
}

TEST(UpstreamConfigShared, DreamInstruct7B) {
  expect_dream_instruct_7b(sonde::ModelConfig::load(sonde::test::shared_dir() / "fixtures/qwen2.5-tokenizer/dream"));
}

// ---- golden configs (../shared) ------------------------------------------------------------

TEST(GoldenConfigShared, TinyQwen2) {
  const auto c = sonde::ModelConfig::load(sonde::test::shared_dir() / "golden/models/tiny-qwen2-float32-v2048");
  // Values from golden/README.md: hidden 64, 2 layers, 4 heads, 2 KV heads (head dim 16), ...
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 2047);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{2047});
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_FALSE(c.generation.do_sample);
  EXPECT_EQ(c.generation.eos_token_ids, std::vector<std::int64_t>{2047});
}

TEST(GoldenConfigShared, TinyDream) {
  const auto c = sonde::ModelConfig::load(sonde::test::shared_dir() / "golden/models/tiny-dream-float32-v2048");
  // README: Dream bos = eos = pad = 2046, mask_token_id = 2047; untied.
  EXPECT_EQ(c.model_type, "Dream");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"DreamModel"});
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.mask_token_id, 2047);
  EXPECT_EQ(c.pad_token_id, 2046);
  EXPECT_EQ(c.bos_token_id, 2046);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{2046});
  // generation_config.json there: alg "origin", steps 512, eps 0.001, alg_temp/top_k/mask null.
  EXPECT_EQ(c.generation.alg, "origin");
  EXPECT_EQ(c.generation.steps, 512);
  EXPECT_DOUBLE_EQ(*c.generation.eps, 0.001);
  EXPECT_DOUBLE_EQ(*c.generation.temperature, 0.0);
  EXPECT_FALSE(c.generation.alg_temp.has_value());
  EXPECT_FALSE(c.generation.top_k.has_value());
  EXPECT_FALSE(c.generation.mask_token_id.has_value());
}

}  // namespace
