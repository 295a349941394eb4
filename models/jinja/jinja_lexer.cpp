// Jinja lexer: template text -> tokens, following jinja2's Lexer rule by rule (whitespace control,
// trim_blocks, lstrip_blocks, brace balancing, literals) so the data between tags matches exactly.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "common/error.h"
#include "models/jinja/jinja_ast.h"

namespace tandem::models::jinja {

void fail_at(const std::string& origin, int line, const std::string& message) {
  throw UserError(origin + ":" + std::to_string(line) + ": " + message);
}

namespace {

// Longest first, as in jinja2's operator regex.
const char* const kOperators[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                  "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  // keep_trailing_newline=False: one final newline is not part of the template.
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& origin) : src_(normalize_newlines(source)), origin_(origin) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    push(TokenKind::kEof, "", line_);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { fail_at(origin_, line_, message); }

  void push(TokenKind kind, std::string text, int line) { tokens_.push_back(Token{kind, std::move(text), line}); }

  // Moves to `end`, counting the newlines passed.
  void advance(size_t end) {
    for (size_t i = pos_; i < end; ++i)
      if (src_[i] == '\n') ++line_;
    line_starting_ = end > pos_ && src_[end - 1] == '\n';
    pos_ = end;
  }

  // The whitespace control of text that ends at a tag: '-' strips all trailing whitespace;
  // otherwise lstrip_blocks removes the indentation in front of a block or comment tag when
  // nothing else stands between it and the start of its line.
  std::string strip_before(std::string text, char sign, bool is_variable) const {
    if (sign == '-') return rstrip_py_space(text);
    if (sign == '+' || is_variable) return text;
    const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if ((l_pos > 0 || line_starting_) && l_pos < text.size() && skip_py_space(text, l_pos) == text.size())
      text.resize(l_pos);
    return text;
  }

  void emit_data(const std::string& text, int line) {
    if (!text.empty()) push(TokenKind::kData, text, line);
  }

  // After a block-like end tag: '-' eats all following whitespace, '+' nothing, else
  // trim_blocks eats one newline.
  size_t after_block_end(size_t end_of_tag, char sign) const {
    if (sign == '-') return skip_py_space(src_, end_of_tag);
    if (sign == '+') return end_of_tag;
    return end_of_tag < src_.size() && src_[end_of_tag] == '\n' ? end_of_tag + 1 : end_of_tag;
  }

  void lex_root() {
    size_t tag = pos_;
    while ((tag = src_.find('{', tag)) != std::string::npos) {
      if (tag + 1 < src_.size() && (src_[tag + 1] == '%' || src_[tag + 1] == '{' || src_[tag + 1] == '#')) break;
      ++tag;
    }
    if (tag == std::string::npos) {
      const int line = line_;
      const std::string text = src_.substr(pos_);
      advance(src_.size());
      emit_data(text, line);
      return;
    }
    const char type = src_[tag + 1];
    const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
    const int text_line = line_;
    std::string text = strip_before(src_.substr(pos_, tag - pos_), sign, type == '{');
    emit_data(text, text_line);
    size_t raw_end = 0;
    if (type == '%' && match_raw_begin(tag, &raw_end)) {
      advance(raw_end);
      lex_raw();
      return;
    }
    advance(tag + 2 + (sign ? 1 : 0));
    if (type == '#') {
      lex_comment();
    } else {
      lex_tag(type == '{');
    }
  }

  // {%[-+]? raw [-]?%}; the '-' form also eats the whitespace that follows.
  bool match_raw_begin(size_t tag, size_t* end) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_py_space(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_py_space(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      *end = skip_py_space(src_, p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      *end = p + 2;
      return true;
    }
    return false;
  }

  void lex_raw() {
    for (size_t tag = src_.find("{%", pos_); tag != std::string::npos; tag = src_.find("{%", tag + 1)) {
      size_t p = tag + 2;
      const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (sign) ++p;
      p = skip_py_space(src_, p);
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p = skip_py_space(src_, p + 6);
      size_t end;
      if (src_.compare(p, 3, "+%}") == 0) {
        end = p + 3;
      } else if (src_.compare(p, 3, "-%}") == 0) {
        end = after_block_end(p + 3, '-');
      } else if (src_.compare(p, 2, "%}") == 0) {
        end = after_block_end(p + 2, 0);
      } else {
        continue;
      }
      const int line = line_;
      emit_data(strip_before(src_.substr(pos_, tag - pos_), sign, false), line);
      advance(end);
      return;
    }
    fail("missing end of raw directive");
  }

  void lex_comment() {
    const int start_line = line_;
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail_at(origin_, start_line, "missing end of comment tag");
    const char sign = close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    advance(after_block_end(close + 2, sign));
  }

  // Inside {{ }} or {% %}: tokens up to the closing tag, which only counts once every bracket
  // opened in the tag is closed again (so `{{ {'a': 1}}}` works).
  void lex_tag(bool is_variable) {
    push(is_variable ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", line_);
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= src_.size()) return;  // the parser reports the unterminated tag
      if (brackets.empty() && lex_tag_end(is_variable)) return;
      const char c = src_[pos_];
      if (is_py_space(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) >= 0x80) {
        const size_t next = skip_py_space(src_, pos_);
        if (next == pos_) {
          size_t len = 1;  // name the whole UTF-8 character
          while (pos_ + len < src_.size() && (static_cast<unsigned char>(src_[pos_ + len]) & 0xC0) == 0x80) ++len;
          fail("unexpected char '" + src_.substr(pos_, len) + "'");
        }
        advance(next);
        continue;
      }
      if (lex_number() || lex_name() || lex_string()) continue;
      lex_operator(&brackets);
    }
  }

  bool lex_tag_end(bool is_variable) {
    const int line = line_;
    if (is_variable) {
      if (src_.compare(pos_, 3, "-}}") == 0) {
        push(TokenKind::kVarEnd, "", line);
        advance(skip_py_space(src_, pos_ + 3));
        return true;
      }
      if (src_.compare(pos_, 2, "}}") == 0) {
        push(TokenKind::kVarEnd, "", line);
        advance(pos_ + 2);
        return true;
      }
      return false;
    }
    size_t end;
    if (src_.compare(pos_, 3, "+%}") == 0) {
      end = pos_ + 3;
    } else if (src_.compare(pos_, 3, "-%}") == 0) {
      end = after_block_end(pos_ + 3, '-');
    } else if (src_.compare(pos_, 2, "%}") == 0) {
      end = after_block_end(pos_ + 2, 0);
    } else {
      return false;
    }
    push(TokenKind::kBlockEnd, "", line);
    advance(end);
    return true;
  }

  // Digits with single underscores between them ("1_000").
  size_t digits_end(size_t p, bool (*ok)(char)) const {
    if (p >= src_.size() || !ok(src_[p])) return std::string::npos;
    while (p < src_.size()) {
      if (ok(src_[p])) {
        ++p;
      } else if (src_[p] == '_' && p + 1 < src_.size() && ok(src_[p + 1])) {
        p += 2;
      } else {
        break;
      }
    }
    return p;
  }

  static std::string without_underscores(std::string s) {
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    return s;
  }

  bool lex_number() {
    if (!is_digit(src_[pos_])) return false;
    const int line = line_;
    // Floats: digits, then a fraction and / or an exponent; never right after a '.'.
    if (pos_ == 0 || src_[pos_ - 1] != '.') {
      const size_t int_end = digits_end(pos_, is_digit);
      size_t p = int_end;
      bool is_float = false;
      if (p < src_.size() && src_[p] == '.') {
        const size_t frac = digits_end(p + 1, is_digit);
        if (frac != std::string::npos) {
          p = frac;
          is_float = true;
        }
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        const size_t exp = digits_end(q, is_digit);
        if (exp != std::string::npos) {
          p = exp;
          is_float = true;
        }
      }
      if (is_float) {
        Token t{TokenKind::kFloat, src_.substr(pos_, p - pos_), line};
        t.float_value = std::strtod(without_underscores(t.text).c_str(), nullptr);
        tokens_.push_back(std::move(t));
        advance(p);
        return true;
      }
    }
    size_t p = pos_;
    int base = 10;
    const char prefix = pos_ + 1 < src_.size() ? static_cast<char>(std::tolower(src_[pos_ + 1])) : 0;
    if (src_[pos_] == '0' && (prefix == 'b' || prefix == 'o' || prefix == 'x')) {
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
      p = pos_ + 2;
      if (p < src_.size() && src_[p] == '_') ++p;
      auto ok = base == 2   ? +[](char c) { return c == '0' || c == '1'; }
                : base == 8 ? +[](char c) { return c >= '0' && c <= '7'; }
                            : +[](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
      p = digits_end(p, ok);
      if (p == std::string::npos) p = pos_ + 1, base = 10;  // a lone "0"
    } else if (src_[pos_] == '0') {
      p = digits_end(
          pos_, +[](char c) { return c == '0'; });
    } else {
      p = digits_end(pos_, is_digit);
    }
    std::string digits = without_underscores(src_.substr(pos_, p - pos_));
    if (base != 10) digits = digits.substr(2);
    errno = 0;
    Token t{TokenKind::kInt, src_.substr(pos_, p - pos_), line};
    t.int_value = static_cast<int64_t>(std::strtoull(digits.c_str(), nullptr, base));
    if (errno == ERANGE || (base == 10 && t.int_value < 0)) fail("integer literal too large: " + t.text);
    tokens_.push_back(std::move(t));
    advance(p);
    return true;
  }

  bool lex_name() {
    if (!is_name_start(src_[pos_])) return false;
    size_t p = pos_;
    while (p < src_.size() && is_name_char(src_[p])) ++p;
    push(TokenKind::kName, src_.substr(pos_, p - pos_), line_);
    advance(p);
    return true;
  }

  bool lex_string() {
    const char quote = src_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
    if (p >= src_.size()) fail("unexpected char '" + std::string(1, quote) + "' (unterminated string)");
    push(TokenKind::kString, unescape(src_.substr(pos_ + 1, p - pos_ - 1)), line_);
    advance(p + 1);
    return true;
  }

  // Python's "unicode-escape" codec, which jinja2 applies to string literals.
  std::string unescape(const std::string& s) const {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out += s[i];
        continue;
      }
      const char c = s[++i];
      switch (c) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
          const std::string hex = s.substr(i + 1, n);
          if (hex.size() != n ||
              !std::all_of(hex.begin(), hex.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); }))
            fail("truncated \\" + std::string(1, c) + " escape in a string literal");
          const unsigned long cp = std::strtoul(hex.c_str(), nullptr, 16);
          if (cp > 0x10FFFF) fail("illegal Unicode character in a string literal");
          out += encode(std::u32string(1, static_cast<char32_t>(cp)));
          i += n;
          break;
        }
        case 'N':
          fail("unsupported: \\N{...} escapes in string literals");
        default:
          if (c >= '0' && c <= '7') {
            unsigned cp = c - '0';
            for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
              cp = cp * 8 + (s[++i] - '0');
            out += encode(std::u32string(1, static_cast<char32_t>(cp)));
          } else if (static_cast<unsigned char>(c) >= 0x80) {
            // jinja2 first turns non-ASCII into backslashreplace escapes, so "\é" reads as the
            // text "\xe9": the template's backslash escapes the escape's backslash.
            size_t len = 1;
            while (i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xC0) == 0x80) ++len;
            const std::u32string cp = decode(s.substr(i, len));
            char buf[16];
            const unsigned long v = cp.empty() ? 0 : cp[0];
            std::snprintf(buf, sizeof buf, v < 0x100 ? "\\x%02lx" : v < 0x10000 ? "\\u%04lx" : "\\U%08lx", v);
            out += buf;
            out += encode(cp.size() > 1 ? cp.substr(1) : std::u32string());
            i += len - 1;
          } else {
            out += '\\';  // unknown escapes stay as they are
            out += c;
          }
      }
    }
    return out;
  }

  void lex_operator(std::vector<char>* brackets) {
    for (const char* op : kOperators) {
      const size_t n = std::char_traits<char>::length(op);
      if (src_.compare(pos_, n, op) != 0) continue;
      const char c = op[0];
      if (n == 1 && (c == '(' || c == '[' || c == '{')) {
        brackets->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
        if (brackets->empty()) fail(std::string("unexpected '") + c + "'");
        if (brackets->back() != c) fail(std::string("unexpected '") + c + "', expected '" + brackets->back() + "'");
        brackets->pop_back();
      }
      push(TokenKind::kOp, op, line_);
      advance(pos_ + n);
      return;
    }
    fail("unexpected char '" + std::string(1, src_[pos_]) + "'");
  }

  std::string src_;
  const std::string& origin_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& origin) { return Lexer(source, origin).run(); }

}  // namespace tandem::models::jinja
