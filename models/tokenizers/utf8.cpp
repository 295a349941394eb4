// UTF-8 validation and repair following Unicode Table 3-7 (well-formed byte sequences).
#include "models/tokenizers/utf8.h"

#include <utf8proc.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace tandem::models::utf8 {
namespace {

struct Prefix {
  size_t matched;   // bytes from pos that are a prefix of some well-formed sequence (>= 1)
  size_t expected;  // length the lead byte announces (0 for a byte that cannot start one)
};

// The allowed range of the second byte depends on the lead byte; later bytes are 80..BF.
Prefix scan(std::string_view s, size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {1, 1};
  size_t expected = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    expected = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    expected = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    expected = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, 0};
  }
  size_t matched = 1;
  while (matched < expected && pos + matched < s.size()) {
    const auto b = static_cast<unsigned char>(s[pos + matched]);
    const bool second = matched == 1;
    if (b < (second ? lo : 0x80) || b > (second ? hi : 0xBF)) break;
    ++matched;
  }
  return {matched, expected};
}

}  // namespace

size_t sequence_length(std::string_view s, size_t pos) {
  const Prefix p = scan(s, pos);
  return p.matched == p.expected ? p.matched : 0;
}

std::optional<size_t> first_invalid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t len = sequence_length(s, pos);
    if (len == 0) return pos;
    pos += len;
  }
  return std::nullopt;
}

uint32_t decode_at(std::string_view s, size_t pos, size_t len) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[pos + i])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string make_valid(std::string_view s) {
  if (!first_invalid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t pos = 0;
  while (pos < s.size()) {
    const Prefix p = scan(s, pos);
    if (p.matched == p.expected) {
      out.append(s.substr(pos, p.matched));
    } else {
      append(out, 0xFFFD);
    }
    pos += p.matched;
  }
  return out;
}

std::string describe(uint32_t cp) {
  char code[16];
  std::snprintf(code, sizeof(code), "U+%04X", cp);
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) return code;
  std::string out = "'";
  append(out, cp);
  return out + "' (" + code + ")";
}

namespace {

std::string utf8proc_normalize(std::string_view s, utf8proc_option_t options) {
  bool ascii = true;  // ASCII is its own normal form: the common case costs one scan
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out, options);
  if (n < 0) throw std::invalid_argument(std::string("utf8proc: ") + utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

std::string nfc(std::string_view s) {
  return utf8proc_normalize(s, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
}

std::string nfkc(std::string_view s) {
  return utf8proc_normalize(s, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
}

}  // namespace tandem::models::utf8
