// CPython's str algorithms on code points for the Jinja interpreter: lenient UTF-8, split /
// rsplit, strip, splitlines, replace, find, count and case mapping.
#include "models/jinja/jinja_pystr.h"

#include <locale.h>

#include <algorithm>
#include <cwctype>

namespace tandem::models::jinja {

namespace {

// The C library's Unicode case tables, independent of the process locale; ASCII-only if the
// UTF-8 locale is missing.
locale_t unicode_locale() {
  static const locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    return l ? l : newlocale(LC_CTYPE_MASK, "C.utf8", static_cast<locale_t>(0));
  }();
  return loc;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  const locale_t loc = unicode_locale();
  return loc ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc)) : c;
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  const locale_t loc = unicode_locale();
  return loc ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc)) : c;
}

bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c; }
bool is_lower(char32_t c) { return to_upper(c) != c && to_lower(c) == c; }
bool is_upper(char32_t c) { return to_lower(c) != c && to_upper(c) == c; }

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  const locale_t loc = unicode_locale();
  return loc && iswalpha_l(static_cast<wint_t>(c), loc);
}

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

void upper_into(std::u32string& out, char32_t c) {
  if (c == 0xDF) {
    out += U"SS";
  } else {
    out.push_back(to_upper(c));
  }
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

}  // namespace

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::u32string decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8 either.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
               (cp >= 0xD800 && cp <= 0xDFFF)))
      ok = false;
    if (!ok) {
      out.push_back(0xDC00 + c);  // surrogateescape: encode() gives the byte back
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) {
      out.push_back(static_cast<char>(cp - 0xDC00));
    } else if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

bool is_py_space(char32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t skip_py_space(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    const auto c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      if (!is_py_space(c)) break;
      ++pos;
      continue;
    }
    const size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    const std::u32string cp = decode(s.substr(pos, len));
    if (cp.size() != 1 || !is_py_space(cp[0])) break;
    pos += len;
  }
  return pos;
}

std::string rstrip_py_space(const std::string& s) {
  if (is_ascii(s)) {
    size_t end = s.size();
    while (end > 0 && is_py_space(static_cast<unsigned char>(s[end - 1]))) --end;
    return s.substr(0, end);
  }
  std::u32string cps = decode(s);
  while (!cps.empty() && is_py_space(cps.back())) cps.pop_back();
  return encode(cps);
}

std::vector<std::u32string> py_split_whitespace(const std::u32string& s, int64_t maxsplit, bool from_right) {
  std::vector<std::u32string> out;
  const auto n = static_cast<int64_t>(s.size());
  int64_t budget = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (!from_right) {
    int64_t i = 0;
    while (budget-- > 0) {
      while (i < n && is_py_space(s[i])) ++i;
      if (i == n) break;
      const int64_t j = i++;
      while (i < n && !is_py_space(s[i])) ++i;
      out.push_back(s.substr(j, i - j));
    }
    if (i < n) {
      while (i < n && is_py_space(s[i])) ++i;
      if (i != n) out.push_back(s.substr(i));
    }
    return out;
  }
  int64_t i = n - 1;
  while (budget-- > 0) {
    while (i >= 0 && is_py_space(s[i])) --i;
    if (i < 0) break;
    const int64_t j = i--;
    while (i >= 0 && !is_py_space(s[i])) --i;
    out.push_back(s.substr(i + 1, j - i));
  }
  if (i >= 0) {
    while (i >= 0 && is_py_space(s[i])) --i;
    if (i >= 0) out.push_back(s.substr(0, i + 1));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::u32string> py_split(const std::u32string& s, const std::u32string& sep, int64_t maxsplit,
                                     bool from_right) {
  std::vector<std::u32string> out;
  int64_t budget = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (!from_right) {
    size_t i = 0;
    for (size_t j; budget-- > 0 && (j = s.find(sep, i)) != std::u32string::npos; i = j + sep.size())
      out.push_back(s.substr(i, j - i));
    out.push_back(s.substr(i));
    return out;
  }
  size_t end = s.size();
  while (budget-- > 0 && end >= sep.size()) {
    const size_t j = s.rfind(sep, end - sep.size());
    if (j == std::u32string::npos) break;
    out.push_back(s.substr(j + sep.size(), end - j - sep.size()));
    end = j;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::u32string py_strip(const std::u32string& s, const std::u32string* chars, bool left, bool right) {
  auto strip = [&](char32_t c) { return chars ? chars->find(c) != std::u32string::npos : is_py_space(c); };
  size_t begin = 0, end = s.size();
  if (left)
    while (begin < end && strip(s[begin])) ++begin;
  if (right)
    while (end > begin && strip(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

std::vector<std::u32string> py_splitlines(const std::u32string& s, bool keepends) {
  std::vector<std::u32string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && !is_line_break(s[j])) ++j;
    size_t eol = j;
    if (j < s.size()) {
      eol = s[j] == '\r' && j + 1 < s.size() && s[j + 1] == '\n' ? j + 2 : j + 1;
    }
    out.push_back(s.substr(i, (keepends ? eol : j) - i));
    i = eol;
  }
  return out;
}

std::u32string py_replace(const std::u32string& s, const std::u32string& old, const std::u32string& repl,
                          int64_t count) {
  int64_t budget = count < 0 ? INT64_MAX : count;
  std::u32string out;
  if (old.empty()) {
    // CPython inserts the replacement before every character and at the end.
    for (size_t i = 0; i <= s.size(); ++i) {
      if (budget > 0) {
        out += repl;
        --budget;
      }
      if (i < s.size()) out.push_back(s[i]);
    }
    return out;
  }
  size_t i = 0;
  for (size_t j; budget > 0 && (j = s.find(old, i)) != std::u32string::npos; --budget) {
    out.append(s, i, j - i);
    out += repl;
    i = j + old.size();
  }
  out.append(s, i, std::u32string::npos);
  return out;
}

int64_t py_find(const std::u32string& s, const std::u32string& sub, int64_t start, int64_t end, bool reverse) {
  if (start > static_cast<int64_t>(s.size()) || end - start < static_cast<int64_t>(sub.size())) return -1;
  const std::u32string window = s.substr(start, end - start);
  const size_t at = reverse ? window.rfind(sub) : window.find(sub);
  return at == std::u32string::npos ? -1 : static_cast<int64_t>(at) + start;
}

int64_t py_count(const std::u32string& s, const std::u32string& sub, int64_t start, int64_t end) {
  if (start > static_cast<int64_t>(s.size()) || end < start) return 0;
  if (sub.empty()) return end - start + 1;
  const std::u32string window = s.substr(start, end - start);
  int64_t count = 0;
  for (size_t i = window.find(sub); i != std::u32string::npos; i = window.find(sub, i + sub.size())) ++count;
  return count;
}

std::u32string py_upper(const std::u32string& s) {
  std::u32string out;
  for (char32_t c : s) upper_into(out, c);
  return out;
}

std::u32string py_lower(const std::u32string& s) {
  std::u32string out;
  for (char32_t c : s) out.push_back(to_lower(c));
  return out;
}

std::u32string py_title(const std::u32string& s) {
  std::u32string out;
  bool previous_cased = false;
  for (char32_t c : s) {
    const char32_t m = previous_cased ? to_lower(c) : to_upper(c);
    out.push_back(m);
    previous_cased = is_cased(m);
  }
  return out;
}

std::u32string py_capitalize(const std::u32string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 0) {
      upper_into(out, s[i]);
    } else {
      out.push_back(to_lower(s[i]));
    }
  }
  return out;
}

std::u32string py_swapcase(const std::u32string& s) {
  std::u32string out;
  for (char32_t c : s) {
    if (is_upper(c)) {
      out.push_back(to_lower(c));
    } else {
      upper_into(out, c);
    }
  }
  return out;
}

std::u32string jinja_title(const std::u32string& s) {
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c); };
  std::u32string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool starts_item = i == 0 || is_sep(s[i]) != is_sep(s[i - 1]);
    if (starts_item) {
      upper_into(out, s[i]);
    } else {
      out.push_back(to_lower(s[i]));
    }
  }
  return out;
}

bool py_is(const std::u32string& s, const std::string& predicate) {
  if (s.empty()) return false;
  if (predicate == "isupper" || predicate == "islower") {
    bool any_cased = false;
    for (char32_t c : s) {
      if (predicate == "isupper" ? is_lower(c) : is_upper(c)) return false;
      any_cased = any_cased || is_cased(c);
    }
    return any_cased;
  }
  return std::all_of(s.begin(), s.end(), [&](char32_t c) {
    if (predicate == "isdigit") return is_digit(c);
    if (predicate == "isalpha") return is_alpha(c);
    if (predicate == "isalnum") return is_alpha(c) || is_digit(c);
    return is_py_space(c);
  });
}

}  // namespace tandem::models::jinja
