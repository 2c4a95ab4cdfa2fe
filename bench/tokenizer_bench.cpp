// Tokenizer throughput on one thread: a few MB of mixed code, prose, CJK and emoji built in
// code, encoded with the Qwen2.5 tokenizer. Usage: tokenizer_bench [TOKENIZER_DIR] [MB]
// (default: ../shared/fixtures/qwen2.5-tokenizer, 4 MB). The goal is 10 MB/s or more.
#include <sonde/error.h>
#include <sonde/tokenizer.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Varied snippets with a counter woven in, so the BPE cache sees new words as real text does.
std::string mixed_text(std::size_t bytes) {
  const std::vector<std::string> snippets = {
      "def train(model, batch_size={n}):\n    for step in range({n}):\n        loss = model(x[step]) * 0.5\n",
      "int main() {\n\tstd::vector<int> v(" "{n});\n\treturn v.size() > 0 ? 0 : 1;\n}\n",
      "The committee reviewed proposal {n} and found that the evidence, although incomplete, "
      "supported further study of the long-term effects.\n",
      "Researchers don't always agree; they'll argue about sample {n} until it's settled. ",
      "机器学习模型在第{n}次实验中表现出色，研究人员对结果感到满意。",
      "東京で{n}人の研究者が会議に参加しました。한국어 문장도 포함됩니다 {n}. ",
      "Привет, мир! Γειά σου κόσμε {n}. مرحبا بالعالم ",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 #{n}   \n\n",
      "https://example.org/path/{n}?q=tokenizer&lang=en    <tag attr=\"{n}\"/>\r\n",
  };
  std::string out;
  for (std::size_t n = 0; out.size() < bytes; ++n) {
    std::string s = snippets[n % snippets.size()];
    for (auto pos = s.find("{n}"); pos != std::string::npos; pos = s.find("{n}")) s.replace(pos, 3, std::to_string(n * 7919 % 100000));
    out += s;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : SONDE_DEFAULT_TOKENIZER_DIR;
  const double mb = argc > 2 ? std::atof(argv[2]) : 4.0;
  auto t0 = Clock::now();
  const sonde::Tokenizer tok = sonde::Tokenizer::load(dir);
  const double load_s = seconds_since(t0);

  const std::string text = mixed_text(static_cast<std::size_t>(mb * 1e6));
  // Encode in 64 KB documents, as a batch of prompts would be.
  constexpr std::size_t kDoc = 64 * 1024;
  std::size_t tokens = 0;
  t0 = Clock::now();
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = std::min(text.size(), pos + kDoc);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    tokens += tok.encode(std::string_view(text).substr(pos, end - pos)).size();
    pos = end;
  }
  const double enc_s = seconds_since(t0);
  std::printf("tokenizer: %s\nload: %.3f s\ntext: %.2f MB mixed (code, prose, CJK, emoji)\n", dir.c_str(), load_s,
              text.size() / 1e6);
  std::printf("encode: %.3f s, %.1f MB/s, %.2f M tokens/s (%zu tokens), one thread\n", enc_s,
              text.size() / 1e6 / enc_s, tokens / 1e6 / enc_s, tokens);
  return 0;
} catch (const sonde::Error& e) {
  std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
  return e.exit_code();
}
