// resolve_model_dir (local paths, the Hugging Face cache layout) and SHA-256 against NIST vectors.
#include <sonde/error.h>
#include <sonde/model_dir.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// ---- SHA-256: FIPS 180-4 example vectors (NIST CSRC "Examples with intermediate values") ----

TEST(Sha256, NistAbc) {
  EXPECT_EQ(sonde::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, NistEmpty) {
  EXPECT_EQ(sonde::sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, Nist448BitMessage) {
  const std::string m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  ASSERT_EQ(m.size() * 8, 448u);
  EXPECT_EQ(sonde::sha256_hex(m.data(), m.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, Nist896BitMessage) {
  const std::string m =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  EXPECT_EQ(sonde::sha256_hex(m.data(), m.size()), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, FileOfAMillionAs) {
  // NIST long-message vector; 1e6 bytes also crosses the file reader's buffer refills.
  const auto file = sonde::test::temp_dir() / "a.bin";
  std::ofstream(file, std::ios::binary) << std::string(1000000, 'a');
  EXPECT_EQ(sonde::sha256_file(file), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, MissingFileIsBadInput) {
  const auto file = sonde::test::temp_dir() / "none.bin";
  try {
    sonde::sha256_file(file);
    FAIL() << "no error";
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput);
    EXPECT_THAT(e.what(), HasSubstr(file.string()));
  }
}

TEST(Sha256Shared, GoldenModelFilesMatchTheirRecordedDigests) {
  const auto root = sonde::test::shared_dir() / "golden";
  const auto summary = nlohmann::json::parse(std::ifstream(root / "summary.json"));
  for (const char* model : {"tiny-qwen2-float32-v2048", "tiny-dream-float32-v2048"}) {
    const auto& digests = summary.at(model).at("model").at("sha256");
    for (const auto& [file, digest] : digests.items())
      EXPECT_EQ(sonde::sha256_file(root / "models" / model / file), digest.get<std::string>()) << model << "/" << file;
  }
}

// ---- resolve_model_dir --------------------------------------------------------------------

// Sets (or unsets) an environment variable for one test and restores it afterwards.
class EnvVar {
 public:
  EnvVar(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~EnvVar() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string resolve_error(const std::string& model) {
  try {
    sonde::resolve_model_dir(model);
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for " << model;
  return "";
}

// A fake cache: <cache>/models--org--name/snapshots/<rev>/ for each rev, refs/main if given.
fs::path make_cache_repo(const fs::path& cache, const std::vector<std::string>& revs, const std::string& main_ref) {
  const auto repo = cache / "models--acme--tiny-lm";
  for (const auto& r : revs) fs::create_directories(repo / "snapshots" / r);
  if (!main_ref.empty()) {
    fs::create_directories(repo / "refs");
    std::ofstream(repo / "refs" / "main") << main_ref << "\n";
  }
  return repo;
}

TEST(ResolveModelDir, ExistingDirectoryIsReturnedAbsolute) {
  const auto dir = sonde::test::temp_dir();
  const auto got = sonde::resolve_model_dir(dir.string());
  EXPECT_TRUE(got.is_absolute());
  EXPECT_TRUE(fs::equivalent(got, dir));
}

TEST(ResolveModelDir, CacheSnapshotNamedByRefsMain) {
  const auto cache = sonde::test::temp_dir();
  EnvVar hub("HF_HUB_CACHE", cache.string());
  const auto repo = make_cache_repo(cache, {"1111aaaa", "2222bbbb"}, "2222bbbb");
  EXPECT_EQ(sonde::resolve_model_dir("acme/tiny-lm"), repo / "snapshots" / "2222bbbb");
}

TEST(ResolveModelDir, SingleSnapshotWithoutRefs) {
  const auto cache = sonde::test::temp_dir();
  EnvVar hub("HF_HUB_CACHE", cache.string());
  const auto repo = make_cache_repo(cache, {"3333cccc"}, "");
  EXPECT_EQ(sonde::resolve_model_dir("acme/tiny-lm"), repo / "snapshots" / "3333cccc");
}

TEST(ResolveModelDir, StaleRefFallsBackToTheNewestSnapshot) {
  const auto cache = sonde::test::temp_dir();
  EnvVar hub("HF_HUB_CACHE", cache.string());
  const auto repo = make_cache_repo(cache, {"old", "new"}, "deadbeef");
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(repo / "snapshots" / "old", now - std::chrono::hours(2));
  fs::last_write_time(repo / "snapshots" / "new", now - std::chrono::hours(1));
  EXPECT_EQ(sonde::resolve_model_dir("acme/tiny-lm"), repo / "snapshots" / "new");
}

TEST(ResolveModelDir, HfHomeIsUsedWhenHubCacheIsUnset) {
  const auto home = sonde::test::temp_dir();
  EnvVar hub("HF_HUB_CACHE", std::nullopt);
  EnvVar hf_home("HF_HOME", home.string());
  const auto repo = make_cache_repo(home / "hub", {"abcd"}, "abcd");
  EXPECT_EQ(sonde::resolve_model_dir("acme/tiny-lm"), repo / "snapshots" / "abcd");
}

TEST(ResolveModelDir, NotFoundListsEveryPlaceSearched) {
  const auto cache = sonde::test::temp_dir();
  EnvVar hub("HF_HUB_CACHE", cache.string());
  const auto msg = resolve_error("acme/absent-model");
  EXPECT_THAT(msg, HasSubstr("model 'acme/absent-model' not found"));
  EXPECT_THAT(msg, HasSubstr(fs::absolute("acme/absent-model").string()));
  EXPECT_THAT(msg, HasSubstr(cache.string()));
  EXPECT_THAT(msg, HasSubstr("models--acme--absent-model"));
  EXPECT_THAT(msg, HasSubstr("never downloads"));
}

TEST(ResolveModelDir, MissingPathThatIsNotARepoId) {
  const auto dir = sonde::test::temp_dir() / "no" / "such";
  const auto msg = resolve_error(dir.string());
  EXPECT_THAT(msg, HasSubstr(dir.string()));
  EXPECT_THAT(msg, HasSubstr("no such directory"));
}

}  // namespace
