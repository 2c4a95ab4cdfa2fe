// The Split pre-tokenizer on PCRE2 with UTF+UCP and the JIT (toolchain.md §8: the subject is
// validated once by the caller, so matching never re-checks UTF-8, which would be quadratic).
#include <pcre2.h>

#include "sonde/error.h"
#include "tokenizer_internal.h"

namespace sonde::tok {
namespace {

// Unicode White_Space, which is what `\s` means in the Oniguruma/Python regexes the tokenizers
// were built with. PCRE2's UCP `\s` differs (it includes U+180E), so `\s` is spelled out.
constexpr std::string_view kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string translate_pattern(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        if (in_class) bad_input("tokenizer regex: \\S inside a character class is not supported: {}", p);
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// Per-thread match state: one match data and a JIT stack large enough for long whitespace runs.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(4, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

PreTokenizer::PreTokenizer(std::string_view pattern) {
  const std::string translated = translate_pattern(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    bad_input("tokenizer regex does not compile at offset {}: {}: {}", offset,
              reinterpret_cast<const char*>(msg), pattern);
  }
  jit_ = pcre2_jit_compile(as_code(code_), PCRE2_JIT_COMPLETE) == 0;
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(as_code(code_)); }

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& piece) const {
  MatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap = 0, search = 0;  // unmatched text since `gap` becomes a piece of its own
  while (search < text.size()) {
    int rc = jit_ ? pcre2_jit_match(as_code(code_), subject, text.size(), search, 0, st.data, st.context)
                  : PCRE2_ERROR_JIT_BADOPTION;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION)
      rc = pcre2_match(as_code(code_), subject, text.size(), search, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) runtime_error("tokenizer regex failed at byte {} (PCRE2 error {})", search, rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const std::size_t start = ov[0], end = ov[1];
    if (end == start) {  // empty matches make no piece; search again one character later
      search = start + 1;
      while (search < text.size() && (static_cast<unsigned char>(text[search]) & 0xC0) == 0x80) ++search;
      continue;
    }
    if (start > gap) piece(text.substr(gap, start - gap));
    piece(text.substr(start, end - start));
    gap = search = end;
  }
  if (gap < text.size()) piece(text.substr(gap));
}

}  // namespace sonde::tok
