// UTF-8 validation and repair, NFC, and GPT-2's byte-level alphabet.
#include <utf8proc.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "sonde/error.h"
#include "tokenizer_internal.h"

namespace sonde::tok {
namespace {

// Length of the valid sequence starting at s[i], or 0 with `bad` = length of the maximal
// invalid subpart (Unicode §3.9 Table 3-7: the second byte's range depends on the lead byte).
std::size_t sequence_at(std::string_view s, std::size_t i, std::size_t& bad) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  bad = 1;
  if (b0 < 0x80) return 1;
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  for (std::size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    bad = k + 1;
  }
  return need;
}

bool all_ascii(std::string_view s) {
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ull) return false;
  }
  for (; i < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) >= 0x80) return false;
  return true;
}

std::array<char32_t, 256> make_byte_table() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace

const std::array<char32_t, 256>& byte_to_char() {
  static const auto table = make_byte_table();
  return table;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(out, byte_to_char()[b]);
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
  // The table's code points are all below U+0144, so a reverse array covers them.
  static const auto reverse = [] {
    std::array<int, 0x144> r;
    r.fill(-1);
    for (int b = 0; b < 256; ++b) r[byte_to_char()[b]] = b;
    return r;
  }();
  out.clear();
  for (std::size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    char32_t c;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
      c = (char32_t(b0 & 0x1F) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;
    }
    if (c >= reverse.size() || reverse[c] < 0) return false;
    out += static_cast<char>(reverse[c]);
  }
  return true;
}

std::size_t find_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t bad;
    const std::size_t n = sequence_at(s, i, bad);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::size_t incomplete_utf8_tail(std::string_view s) {
  // A lead byte within the last 3 bytes whose sequence is cut short by the end of `s`.
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) == 0x80) continue;
    std::size_t bad;
    if (b >= 0xC2 && b <= 0xF4 && sequence_at(s, i, bad) == 0 && bad == back) return back;
    return 0;
  }
  return 0;
}

std::string nfc(std::string_view s) {
  if (all_ascii(s)) return std::string(s);
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
  if (n < 0) runtime_error("NFC normalization failed: {}", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

}  // namespace sonde::tok

namespace sonde {

std::string utf8_replace_invalid(std::string_view bytes) {
  if (tok::find_invalid_utf8(bytes) == std::string_view::npos) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  for (std::size_t i = 0; i < bytes.size();) {
    std::size_t bad;
    const std::size_t n = tok::sequence_at(bytes, i, bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

}  // namespace sonde
