// Safetensors: every bad-input case of the loader, round trips through the writer, sharded
// indexes, and the golden tiny checkpoints from ../shared.
#include <sonde/dtype.h>
#include <sonde/error.h>
#include <sonde/safetensors.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using sonde::DType;
using sonde::ErrorKind;

// A safetensors file built by hand: u64 LE header length, the header text, `data_size` bytes of 0x5a.
std::string file_bytes(const std::string& header, std::size_t data_size, std::uint64_t declared_len = UINT64_MAX) {
  const std::uint64_t len = declared_len == UINT64_MAX ? header.size() : declared_len;
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + std::string(data_size, '\x5a');
}

std::span<const std::byte> as_span(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The error parse_safetensors_header throws; fails the test when it does not throw BadInput.
std::string parse_error(const std::string& bytes, const std::string& label = "m.safetensors") {
  try {
    sonde::parse_safetensors_header(as_span(bytes), label);
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    EXPECT_THAT(std::string(e.what()), HasSubstr(label));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "messages are one line";
    return e.what();
  }
  ADD_FAILURE() << "no error for input of " << bytes.size() << " bytes";
  return "";
}

std::string open_error(const fs::path& p) {
  try {
    sonde::WeightSource::open(p);
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error opening " << p;
  return "";
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kOneF32x4 = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";

// ---- parse_safetensors_header: bad input ---------------------------------------------------

TEST(SafetensorsHeader, AcceptsAMinimalValidFile) {
  const auto h = sonde::parse_safetensors_header(as_span(file_bytes(kOneF32x4, 16)), "m.safetensors");
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].name, "w");
  EXPECT_EQ(h.tensors[0].dtype, DType::f32);
  EXPECT_EQ(h.tensors[0].shape, sonde::Shape({4}));
  EXPECT_EQ(h.data_start, 8 + kOneF32x4.size());
  EXPECT_EQ(h.tensors[0].offset, 8 + kOneF32x4.size());
  EXPECT_EQ(h.tensors[0].nbytes, 16u);
}

TEST(SafetensorsHeader, TruncatedFile) {
  const auto msg = parse_error(std::string(5, '\0'));
  EXPECT_THAT(msg, HasSubstr("5 bytes"));
  EXPECT_THAT(msg, HasSubstr("too short"));
}

TEST(SafetensorsHeader, HeaderLengthPastTheEnd) {
  const auto msg = parse_error(file_bytes("{}", 0, 1000));
  EXPECT_THAT(msg, HasSubstr("header length 1000 runs past the end of the file (10 bytes)"));
}

TEST(SafetensorsHeader, AbsurdHeaderLength) {
  const auto msg = parse_error(file_bytes("{}", 0, std::uint64_t{1} << 63));
  EXPECT_THAT(msg, HasSubstr("header length 9223372036854775808"));
}

TEST(SafetensorsHeader, OffsetsOutsideTheData) {
  const auto msg = parse_error(file_bytes(kOneF32x4, 8));
  EXPECT_THAT(msg, HasSubstr("m.safetensors: tensor 'w': data_offsets [0, 16] end past the data section (8 bytes)"));
}

TEST(SafetensorsHeader, OffsetsBeginAfterEnd) {
  const auto msg = parse_error(file_bytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16));
  EXPECT_THAT(msg, HasSubstr("tensor 'w': data_offsets [8, 4] begin after end"));
}

TEST(SafetensorsHeader, OffsetsNotMatchingTheShape) {
  const auto msg = parse_error(file_bytes(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_THAT(msg, HasSubstr("tensor 'w'"));
  EXPECT_THAT(msg, HasSubstr("span 8 bytes"));
  EXPECT_THAT(msg, HasSubstr("needs 6"));
}

TEST(SafetensorsHeader, OverlappingOffsets) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const auto msg = parse_error(file_bytes(h, 16));
  EXPECT_THAT(msg, HasSubstr("tensor 'b'"));
  EXPECT_THAT(msg, HasSubstr("overlaps tensor 'a'"));
}

TEST(SafetensorsHeader, OverlapHiddenBehindALongTensor) {
  // c lies inside a but after b: only a running maximum of the end offsets catches it.
  const std::string h = R"({"a":{"dtype":"U8","shape":[20],"data_offsets":[0,20]},)"
                        R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                        R"("c":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})";
  EXPECT_THAT(parse_error(file_bytes(h, 20)), HasSubstr("overlaps tensor 'a'"));
}

TEST(SafetensorsHeader, UnknownDtype) {
  const auto msg = parse_error(file_bytes(R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(msg, HasSubstr("tensor 'w'"));
  EXPECT_THAT(msg, HasSubstr("dtype \"F8_E4M3\""));
}

TEST(SafetensorsHeader, DtypeNotAString) {
  const auto msg = parse_error(file_bytes(R"({"w":{"dtype":7,"shape":[4],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(msg, HasSubstr("tensor 'w': field 'dtype' is 7, expected a string"));
}

TEST(SafetensorsHeader, MissingField) {
  const auto msg = parse_error(file_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4));
  EXPECT_THAT(msg, HasSubstr("tensor 'w': field 'shape' is missing"));
}

TEST(SafetensorsHeader, NegativeDimension) {
  const auto msg = parse_error(file_bytes(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(msg, HasSubstr("tensor 'w': shape [-1]"));
  EXPECT_THAT(msg, HasSubstr("not a non-negative integer"));
}

TEST(SafetensorsHeader, FractionalDimension) {
  const auto msg = parse_error(file_bytes(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(msg, HasSubstr("shape [1.5]"));
}

TEST(SafetensorsHeader, RankAboveFour) {
  const auto msg = parse_error(file_bytes(R"({"w":{"dtype":"U8","shape":[1,1,1,1,1],"data_offsets":[0,1]}})", 1));
  EXPECT_THAT(msg, HasSubstr("tensor 'w': shape [1,1,1,1,1] has rank 5"));
}

TEST(SafetensorsHeader, ShapeWhoseByteCountOverflows) {
  // 2^32 * 2^32 * 4 bytes wraps to 0 in 64 bits; without the overflow check it would match [0, 0].
  const auto msg = parse_error(
      file_bytes(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0));
  EXPECT_THAT(msg, HasSubstr("tensor 'w'"));
  EXPECT_THAT(msg, HasSubstr("overflows"));
}

TEST(SafetensorsHeader, JsonGarbage) {
  const auto msg = parse_error(file_bytes("{\"w\": [1, 2", 0));
  EXPECT_THAT(msg, HasSubstr("m.safetensors: header is not valid JSON"));
}

TEST(SafetensorsHeader, HeaderNotAnObject) {
  EXPECT_THAT(parse_error(file_bytes("[1,2]", 0)), HasSubstr("header is [1,2], expected a JSON object"));
}

TEST(SafetensorsHeader, DeepNestingIsRejectedNotRecursedInto) {
  const std::string deep = "{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_THAT(parse_error(file_bytes(deep, 0)), HasSubstr("nests deeper"));
}

TEST(SafetensorsHeader, MetadataMustMapStringsToStrings) {
  const auto msg = parse_error(file_bytes(R"({"__metadata__":{"format":1}})", 0));
  EXPECT_THAT(msg, HasSubstr("'__metadata__' entry 'format' is 1, expected a string"));
}

TEST(SafetensorsHeader, ControlCharactersInNamesStayOnOneLine) {
  const auto msg = parse_error(file_bytes(R"({"a\nb":{"dtype":"X","shape":[],"data_offsets":[0,0]}})", 0));
  EXPECT_THAT(msg, HasSubstr("tensor 'a\\x0ab'"));
}

// ---- WeightSource::open: bad input ---------------------------------------------------------

TEST(WeightSource, MissingDirectory) {
  const auto dir = sonde::test::temp_dir() / "nope";
  const auto msg = open_error(dir);
  EXPECT_THAT(msg, HasSubstr(dir.string()));
  EXPECT_THAT(msg, HasSubstr("no such file or directory"));
}

TEST(WeightSource, EmptyDirectory) {
  const auto dir = sonde::test::temp_dir();
  const auto msg = open_error(dir);
  EXPECT_THAT(msg, HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(msg, HasSubstr((dir / "model.safetensors").string()));
  EXPECT_THAT(msg, HasSubstr("the directory is empty"));
}

TEST(WeightSource, DirectoryWithoutSafetensorsListsWhatIsThere) {
  const auto dir = sonde::test::temp_dir();
  write_file(dir / "pytorch_model.bin", "x");
  EXPECT_THAT(open_error(dir), HasSubstr("pytorch_model.bin"));
}

TEST(WeightSource, EmptyFileIsTruncated) {
  const auto dir = sonde::test::temp_dir();
  write_file(dir / "model.safetensors", "");
  const auto msg = open_error(dir);
  EXPECT_THAT(msg, HasSubstr((dir / "model.safetensors").string()));
  EXPECT_THAT(msg, HasSubstr("0 bytes"));
}

TEST(WeightSource, BadHeaderNamesTheFile) {
  const auto dir = sonde::test::temp_dir();
  write_file(dir / "model.safetensors", file_bytes(kOneF32x4, 8));
  const auto msg = open_error(dir);
  EXPECT_THAT(msg, HasSubstr((dir / "model.safetensors").string()));
  EXPECT_THAT(msg, HasSubstr("end past the data section (8 bytes)"));
}

TEST(WeightSource, MissingTensor) {
  const auto dir = sonde::test::temp_dir();
  write_file(dir / "model.safetensors", file_bytes(kOneF32x4, 16));
  const auto ws = sonde::WeightSource::open(dir);
  EXPECT_TRUE(ws.has("w"));
  EXPECT_FALSE(ws.has("lm_head.weight"));
  try {
    ws.info("lm_head.weight");
    FAIL() << "no error";
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_THAT(e.what(), HasSubstr("missing tensor 'lm_head.weight' in " + fs::absolute(dir).string()));
  }
  EXPECT_THROW(ws.view("lm_head.weight"), sonde::Error);
}

// Two shards a.safetensors (x, y) and b.safetensors (z), hand-built, with an index.
struct Shards {
  fs::path dir;
  explicit Shards(const fs::path& d) : dir(d) {
    write_file(dir / "a.safetensors",
               file_bytes(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                          R"("y":{"dtype":"U8","shape":[3],"data_offsets":[2,5]}})", 5));
    write_file(dir / "b.safetensors", file_bytes(R"({"z":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4));
  }
  void index(const std::string& weight_map) const {
    write_file(dir / "model.safetensors.index.json", R"({"metadata":{"total_size":9},"weight_map":)" + weight_map + "}");
  }
};

TEST(WeightSource, IndexNamingAMissingFile) {
  Shards s(sonde::test::temp_dir());
  s.index(R"({"x":"a.safetensors","y":"a.safetensors","z":"c.safetensors"})");
  const auto msg = open_error(s.dir);
  EXPECT_THAT(msg, HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(msg, HasSubstr("'c.safetensors' (for tensor 'z')"));
  EXPECT_THAT(msg, HasSubstr("does not exist"));
}

TEST(WeightSource, IndexNamingATensorAbsentFromItsFile) {
  Shards s(sonde::test::temp_dir());
  s.index(R"({"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors","w":"b.safetensors"})");
  const auto msg = open_error(s.dir);
  EXPECT_THAT(msg, HasSubstr("missing tensor 'w' in " + (s.dir / "b.safetensors").string()));
}

TEST(WeightSource, TensorClaimedByTheIndexForAnotherFile) {
  Shards s(sonde::test::temp_dir());
  s.index(R"({"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"})");
  const auto msg = open_error(s.dir);
  EXPECT_THAT(msg, HasSubstr("tensor 'y' is in " + (s.dir / "a.safetensors").string()));
  EXPECT_THAT(msg, HasSubstr("maps it to 'b.safetensors'"));
}

TEST(WeightSource, IndexEscapingTheDirectory) {
  Shards s(sonde::test::temp_dir());
  s.index(R"({"x":"../a.safetensors"})");
  EXPECT_THAT(open_error(s.dir), HasSubstr("'../a.safetensors'"));
}

TEST(WeightSource, IndexNotJson) {
  Shards s(sonde::test::temp_dir());
  write_file(s.dir / "model.safetensors.index.json", "{weight_map");
  const auto msg = open_error(s.dir);
  EXPECT_THAT(msg, HasSubstr("model.safetensors.index.json: not valid JSON"));
}

TEST(WeightSource, ShardedIndexOfTwoFiles) {
  Shards s(sonde::test::temp_dir());
  s.index(R"({"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"})");
  const auto ws = sonde::WeightSource::open(s.dir);
  EXPECT_EQ(ws.size(), 3u);
  EXPECT_EQ(ws.total_bytes(), 2u + 3u + 4u);
  EXPECT_EQ(ws.info("y").file, s.dir / "a.safetensors");
  EXPECT_EQ(ws.info("z").file, s.dir / "b.safetensors");
  EXPECT_EQ(ws.info("z").dtype, DType::i32);
  // Data bytes are all 0x5a (see file_bytes).
  const auto z = ws.view("z");
  std::int32_t v;
  std::memcpy(&v, z.data, 4);
  EXPECT_EQ(v, 0x5a5a5a5a);
  std::vector<std::string> names;
  ws.visit([&](const sonde::WeightInfo& w) { names.push_back(w.name); });
  EXPECT_EQ(names, (std::vector<std::string>{"x", "y", "z"}));
}

// ---- write_safetensors round trips -------------------------------------------------------

TEST(WriteSafetensors, RoundTripOfEveryCommonDtype) {
  const auto dir = sonde::test::temp_dir();
  std::vector<float> f32 = {1.5f, -2.25f, 3.0e-3f, 65504.0f, -0.0f, 7.0f};
  std::vector<std::uint16_t> bf16, f16;
  for (float x : {0.5f, -3.0f, 100.0f, 1.0f / 3.0f}) bf16.push_back(sonde::f32_to_bf16(x));
  for (float x : {0.25f, -6.5f, 2048.0f}) f16.push_back(sonde::f32_to_f16(x));
  std::vector<std::int32_t> i32 = {-7, 0, 2147483647, 42, 5};
  sonde::write_safetensors(dir / "model.safetensors",
                           {{"w.f32", sonde::TensorView(f32.data(), DType::f32, {2, 3})},
                            {"b.bf16", sonde::TensorView(bf16.data(), DType::bf16, {4})},
                            {"c.f16", sonde::TensorView(f16.data(), DType::f16, {1, 3})},
                            {"a.i32", sonde::TensorView(i32.data(), DType::i32, {5})}},
                           {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.tmp"));

  const auto ws = sonde::WeightSource::open(dir / "model.safetensors");
  ASSERT_EQ(ws.size(), 4u);
  const auto check = [&](const char* name, DType t, sonde::Shape shape, const void* want, std::size_t nbytes) {
    const auto v = ws.view(name);
    EXPECT_EQ(v.dtype, t) << name;
    EXPECT_EQ(v.shape, shape) << name;
    ASSERT_EQ(v.nbytes(), nbytes) << name;
    EXPECT_EQ(std::memcmp(v.data, want, nbytes), 0) << name;
  };
  check("w.f32", DType::f32, {2, 3}, f32.data(), 24);
  check("b.bf16", DType::bf16, {4}, bf16.data(), 8);
  check("c.f16", DType::f16, {1, 3}, f16.data(), 6);
  check("a.i32", DType::i32, {5}, i32.data(), 20);
  EXPECT_FLOAT_EQ(sonde::bf16_to_f32(ws.view("b.bf16").as<std::uint16_t>()[2]), 100.0f);
}

TEST(WriteSafetensors, LayoutIsSortedPaddedAndContiguous) {
  const auto dir = sonde::test::temp_dir();
  std::vector<std::uint8_t> a = {1, 2, 3}, b = {4, 5}, c = {6};
  sonde::write_safetensors(dir / "m.safetensors", {{"c", sonde::TensorView(c.data(), DType::u8, {1})},
                                                   {"a", sonde::TensorView(a.data(), DType::u8, {3})},
                                                   {"b", sonde::TensorView(b.data(), DType::u8, {2})}});
  const std::string bytes = read_file(dir / "m.safetensors");
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(len % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + len + 6);
  // Data in name order a, b, c, back to back.
  EXPECT_EQ(bytes.substr(8 + len), std::string("\x01\x02\x03\x04\x05\x06", 6));
  const std::string header = bytes.substr(8, len);
  EXPECT_THAT(header, HasSubstr(R"("a":{"data_offsets":[0,3])"));
  EXPECT_THAT(header, HasSubstr(R"("b":{"data_offsets":[3,5])"));
  EXPECT_THAT(header, HasSubstr(R"("c":{"data_offsets":[5,6])"));
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
}

TEST(WriteSafetensors, StridedViewsAreWrittenContiguously) {
  const auto dir = sonde::test::temp_dir();
  std::vector<float> m = {1, 2, 3, 4, 5, 6};  // [2, 3]
  sonde::TensorView t(m.data(), DType::f32, {3, 2});  // its transpose
  t.strides = {1, 3, 0, 0};
  sonde::write_safetensors(dir / "t.safetensors", {{"t", t}});
  const auto ws = sonde::WeightSource::open(dir / "t.safetensors");
  const auto v = ws.view("t");
  std::vector<float> got(6);
  std::memcpy(got.data(), v.data, 24);
  EXPECT_EQ(got, (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(WriteSafetensors, MetadataRoundTrips) {
  std::vector<float> x = {1};
  const std::string bytes = sonde::safetensors_bytes({{"x", sonde::TensorView(x.data(), DType::f32, {1})}},
                                                     {{"format", "pt"}, {"seed", "7"}});
  const auto h = sonde::parse_safetensors_header(as_span(bytes), "mem");
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("seed"), "7");
  EXPECT_EQ(h.data_start % 8, 0u);
}

// ---- golden checkpoints from ../shared -----------------------------------------------------

constexpr const char* kQwen = "golden/models/tiny-qwen2-float32-v2048";
constexpr const char* kDream = "golden/models/tiny-dream-float32-v2048";

// Names per layer from model-spec §1.2: 3 projections with bias, o_proj, 2 norms, 3 MLP mats.
constexpr std::size_t kTensorsPerLayer = 12;

TEST(GoldenWeightsShared, Qwen2ShapesFromTheSpec) {
  const auto ws = sonde::WeightSource::open(sonde::test::shared_dir() / kQwen);
  const std::int64_t V = 2048, H = 64, nh = 4, nkv = 2, d = 16, I = 128;
  EXPECT_EQ(ws.info("model.embed_tokens.weight").shape, sonde::Shape({V, H}));
  EXPECT_EQ(ws.info("model.layers.0.self_attn.q_proj.weight").shape, sonde::Shape({nh * d, H}));
  EXPECT_EQ(ws.info("model.layers.1.self_attn.k_proj.bias").shape, sonde::Shape({nkv * d}));
  EXPECT_EQ(ws.info("model.layers.1.mlp.down_proj.weight").shape, sonde::Shape({H, I}));
  EXPECT_EQ(ws.info("model.norm.weight").shape, sonde::Shape({H}));
  EXPECT_EQ(ws.info("model.norm.weight").dtype, DType::f32);
  EXPECT_FALSE(ws.has("lm_head.weight")) << "tied embeddings: no lm_head in the file";
  EXPECT_FALSE(ws.has("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_EQ(ws.size(), 2 + 2 * kTensorsPerLayer);
}

TEST(GoldenWeightsShared, DreamHasAnLmHead) {
  const auto ws = sonde::WeightSource::open(sonde::test::shared_dir() / kDream);
  EXPECT_EQ(ws.info("lm_head.weight").shape, sonde::Shape({2048, 64}));
  EXPECT_EQ(ws.info("model.embed_tokens.weight").shape, sonde::Shape({2048, 64}));
  EXPECT_EQ(ws.size(), 3 + 2 * kTensorsPerLayer);
  // Every weight of a float32 checkpoint is finite; a misplaced offset would read garbage.
  ws.visit([&](const sonde::WeightInfo& w) {
    const auto v = ws.view(w.name);
    for (std::int64_t i = 0; i < v.numel(); ++i) {
      float x;
      std::memcpy(&x, static_cast<const char*>(v.data) + 4 * i, 4);
      ASSERT_TRUE(std::isfinite(x)) << w.name << "[" << i << "]";
    }
  });
}

}  // namespace
