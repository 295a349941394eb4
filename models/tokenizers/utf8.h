// Minimal UTF-8 helpers for the tokenizers: strict validation (no overlongs, surrogates or code
// points past U+10FFFF), code point iteration and lossy repair to U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::models::utf8 {

// Length (1-4) of the well-formed sequence starting at s[pos], or 0 when it is ill-formed.
size_t sequence_length(std::string_view s, size_t pos);

// Byte offset of the first ill-formed sequence, or nullopt when all of `s` is valid.
std::optional<size_t> first_invalid(std::string_view s);

// Decodes the well-formed sequence at s[pos] (check with sequence_length first).
uint32_t decode_at(std::string_view s, size_t pos, size_t len);

void append(std::string& out, uint32_t code_point);

// Replaces each maximal ill-formed subpart with U+FFFD (the WHATWG / Rust from_utf8_lossy rule).
std::string make_valid(std::string_view s);

// Unicode normalization form C of valid UTF-8 `s` (utf8proc, Debian's libutf8proc): what the NFC
// normalizer of a tokenizer.json applies before splitting.
std::string nfc(std::string_view s);

// Normalization form KC (compatibility decomposition, then composition): the NFKC normalizer.
std::string nfkc(std::string_view s);

// "'x' (U+0078)" for messages; control characters are shown by code point only.
std::string describe(uint32_t code_point);

}  // namespace tandem::models::utf8
