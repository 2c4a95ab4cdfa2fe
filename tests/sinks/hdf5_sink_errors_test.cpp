// Bad input and misuse of the hdf5 sink: each is a sonde::Error of the right kind whose message
// names the path or hook and the values involved.
#include "sink_test_support.h"

#include <sonde/error.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <fstream>

namespace sonde::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;


TEST(Hdf5SinkErrors, ExistingFileIsRefusedWithoutOverwrite) {
  const auto path = (temp_dir() / "exists.h5").string();
  { std::ofstream(path) << "precious"; }
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(options_for(path, DType::f32), scenario_meta(), scenario_hooks()); },
                            ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("already exists")));
  std::ifstream in(path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST(Hdf5SinkErrors, OverwriteReplacesAnExistingFile) {
  const auto path = (temp_dir() / "exists.h5").string();
  { std::ofstream(path) << "old"; }
  auto sink = make_hdf5_sink();
  auto options = options_for(path, DType::f32);
  options.overwrite = true;
  sink->open(options, scenario_meta(), scenario_hooks());
  sink->close();
  H5Reader f(path);
  EXPECT_EQ(f.attr_string("/", "schema"), "sonde.acts/1");
}

TEST(Hdf5SinkErrors, MissingOutputDirectoryIsBadInput) {
  const auto dir = temp_dir() / "no" / "such" / "dir";
  const auto path = (dir / "out.h5").string();
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(options_for(path, DType::f32), scenario_meta(), scenario_hooks()); },
                            ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr(dir.string()), HasSubstr("does not exist")));
}

TEST(Hdf5SinkErrors, OutputDirectoryThatIsAFileIsBadInput) {
  const auto not_dir = temp_dir() / "plain-file";
  { std::ofstream(not_dir) << "x"; }
  const auto path = (not_dir / "out.h5").string();
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(options_for(path, DType::f32), scenario_meta(), scenario_hooks()); },
                            ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("not a directory")));
}

TEST(Hdf5SinkErrors, ReadOnlyOutputDirectoryIsBadInput) {
  const auto dir = temp_dir() / "read-only";
  std::filesystem::create_directories(dir);
  // Root writes through a directory's permissions, not through a read-only mount.
  struct Unmount {
    std::filesystem::path p;
    bool mounted = false;
    ~Unmount() {
      if (mounted) ::umount(p.c_str());
    }
  } unmount{dir};
  if (::geteuid() == 0) {
    unmount.mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", MS_RDONLY, "size=1m") == 0;
    if (!unmount.mounted) GTEST_SKIP() << "skipped: as root, a read-only tmpfs is needed and cannot be mounted";
  } else {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  const auto path = (dir / "out.h5").string();
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(options_for(path, DType::f32), scenario_meta(), scenario_hooks()); },
                            ErrorKind::BadInput);
  if (!unmount.mounted) std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("not writable")));
}

// Runs in a death-test child. A file size limit makes writes fail with EFBIG, as a full disk does
// with ENOSPC. Exit code 0: a Runtime error naming the file, then a normal exit (HDF5's own exit
// handler used to crash here); 2: another kind of error; 3: no error at all.
[[noreturn]] void write_until_the_disk_is_full(const std::string& path) {
  std::signal(SIGXFSZ, SIG_IGN);
  const rlimit limit{256 * 1024, 256 * 1024};
  ::setrlimit(RLIMIT_FSIZE, &limit);
  auto sink = make_hdf5_sink();
  std::vector<float> rows(64 * 896, 0.5f);
  int code = 3;
  try {
    sink->open(options_for(path, DType::f32), scenario_meta(), {{"blocks.0.hook_resid_post", {896}}});
    for (int i = 0; i < 64; ++i) {
      sink->write({"blocks.0.hook_resid_post", 0}, TensorView(rows.data(), DType::f32, {64, 896}));
      sink->flush();
    }
    sink->close();
  } catch (const Error& e) {
    std::fprintf(stderr, "caught %s\n", e.what());
    code = e.kind() == ErrorKind::Runtime && std::string(e.what()).find(path) != std::string::npos ? 0 : 2;
  }
  sink.reset();
  std::exit(code);
}

TEST(Hdf5SinkErrors, FullDiskIsARuntimeErrorAndTheProcessStillExitsCleanly) {
  // A fresh process, so that the sink makes the first HDF5 call in it (see h5_handles.h).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto path = (temp_dir() / "full.h5").string();
  EXPECT_EXIT(write_until_the_disk_is_full(path), ::testing::ExitedWithCode(0), "caught HDF5: cannot .*full\\.h5");
}

TEST(Hdf5SinkErrors, RowShapeMismatchNamesHookAndBothShapes) {
  auto sink = make_hdf5_sink();
  sink->open(options_for((temp_dir() / "shape.h5").string(), DType::f32), scenario_meta(), scenario_hooks());
  std::vector<float> data(2 * 5, 1.0f);
  const auto msg = error_of([&] { sink->write({"blocks.0.hook_resid_post", 0}, TensorView(data.data(), DType::f32, {2, 5})); },
                            ErrorKind::Runtime);
  EXPECT_THAT(msg, AllOf(HasSubstr("blocks.0.hook_resid_post"), HasSubstr("[2, 5]"), HasSubstr("[N, 6]")));
  const auto rank_msg = error_of([&] { sink->write({"blocks.1.attn.hook_q", 0}, TensorView(data.data(), DType::f32, {2, 5})); },
                                 ErrorKind::Runtime);
  EXPECT_THAT(rank_msg, AllOf(HasSubstr("blocks.1.attn.hook_q"), HasSubstr("[2, 5]"), HasSubstr("[N, 2, 3]")));
}

TEST(Hdf5SinkErrors, WriteToAHookNotSelectedIsRuntime) {
  auto sink = make_hdf5_sink();
  sink->open(options_for((temp_dir() / "unknown.h5").string(), DType::f32), scenario_meta(), scenario_hooks());
  std::vector<float> data(6, 1.0f);
  const auto msg = error_of([&] { sink->write({"blocks.7.hook_resid_post", 0}, TensorView(data.data(), DType::f32, {1, 6})); },
                            ErrorKind::Runtime);
  EXPECT_THAT(msg, HasSubstr("blocks.7.hook_resid_post"));
}

TEST(Hdf5SinkErrors, UnsupportedStorageDtypeIsBadInput) {
  auto sink = make_hdf5_sink();
  const auto path = (temp_dir() / "i32.h5").string();
  const auto msg = error_of([&] { sink->open(options_for(path, DType::i32), scenario_meta(), scenario_hooks()); },
                            ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("i32")));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Hdf5SinkErrors, HookSelectedTwiceIsBadInputBeforeAnyFileIsMade) {
  auto sink = make_hdf5_sink();
  const auto path = (temp_dir() / "twice.h5").string();
  auto hooks = scenario_hooks();
  hooks.push_back(hooks.front());
  const auto msg = error_of([&] { sink->open(options_for(path, DType::f32), scenario_meta(), hooks); }, ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr(hooks.front().name), HasSubstr("twice")));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Hdf5SinkErrors, ReservedRootAttributeIsBadInput) {
  auto sink = make_hdf5_sink();
  auto meta = scenario_meta();
  meta.strings["schema"] = "mine";
  const auto msg = error_of([&] { sink->open(options_for((temp_dir() / "r.h5").string(), DType::f32), meta, {}); },
                            ErrorKind::BadInput);
  EXPECT_THAT(msg, HasSubstr("'schema'"));
}

TEST(Hdf5SinkErrors, CallsAfterCloseAreRuntimeErrors) {
  auto sink = make_hdf5_sink();
  const auto path = (temp_dir() / "closed.h5").string();
  sink->open(options_for(path, DType::f32), scenario_meta(), scenario_hooks());
  sink->close();
  sink->close();  // a second close is harmless
  const auto msg = error_of([&] { sink->add_rows({}); }, ErrorKind::Runtime);
  EXPECT_THAT(msg, AllOf(HasSubstr("add_rows"), HasSubstr(path)));
}

TEST(Hdf5SinkErrors, DuplicateArrayPathNamesThePath) {
  auto sink = make_hdf5_sink();
  const auto path = (temp_dir() / "dup.h5").string();
  sink->open(options_for(path, DType::f32), scenario_meta(), {});
  std::vector<std::int32_t> ids{1, 2};
  sink->write_array("/input_ids", TensorView(ids.data(), DType::i32, {2}));
  const auto msg = error_of([&] { sink->write_array("/input_ids", TensorView(ids.data(), DType::i32, {2})); },
                            ErrorKind::Runtime);
  EXPECT_THAT(msg, AllOf(HasSubstr("/input_ids"), HasSubstr(path)));
}

}  // namespace
}  // namespace sonde::test
