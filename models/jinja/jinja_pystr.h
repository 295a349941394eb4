// Internal to the Jinja interpreter: CPython's str algorithms on code points (split, strip, case
// mapping, find, splitlines), so string methods and filters give Python's exact results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::models::jinja {

// UTF-8 <-> code points. Bytes that are not valid UTF-8 travel through unchanged (as
// U+DC80..U+DCFF, Python's surrogateescape), so no input can make an operation fail.
std::u32string decode(const std::string& s);
std::string encode(const std::u32string& s);
bool is_ascii(const std::string& s);

// Python's str.isspace() for one code point (what `\s`, strip() and split() use).
bool is_py_space(char32_t cp);
// The index just past the whitespace starting at s[pos], and `s` without trailing whitespace.
size_t skip_py_space(const std::string& s, size_t pos);
std::string rstrip_py_space(const std::string& s);

// str.split() / str.rsplit() without a separator: runs of whitespace, ends trimmed.
std::vector<std::u32string> py_split_whitespace(const std::u32string& s, int64_t maxsplit, bool from_right);
std::vector<std::u32string> py_split(const std::u32string& s, const std::u32string& sep, int64_t maxsplit,
                                     bool from_right);
// `chars` null strips whitespace.
std::u32string py_strip(const std::u32string& s, const std::u32string* chars, bool left, bool right);
std::vector<std::u32string> py_splitlines(const std::u32string& s, bool keepends);
std::u32string py_replace(const std::u32string& s, const std::u32string& old, const std::u32string& repl,
                          int64_t count);
// Within s[start, end); start past the end finds nothing, as in CPython.
int64_t py_find(const std::u32string& s, const std::u32string& sub, int64_t start, int64_t end, bool reverse);
int64_t py_count(const std::u32string& s, const std::u32string& sub, int64_t start, int64_t end);

// Case mapping: ASCII exactly, other scripts through the C library's Unicode tables (simple case
// mapping, plus U+00DF -> "SS" in upper()).
std::u32string py_upper(const std::u32string& s);
std::u32string py_lower(const std::u32string& s);
std::u32string py_title(const std::u32string& s);       // str.title()
std::u32string py_capitalize(const std::u32string& s);  // str.capitalize()
std::u32string py_swapcase(const std::u32string& s);
std::u32string jinja_title(const std::u32string& s);  // jinja2's `title` filter (words split at -\s({[<)
// isdigit / isalpha / isalnum / isspace / isupper / islower.
bool py_is(const std::u32string& s, const std::string& predicate);

}  // namespace tandem::models::jinja
