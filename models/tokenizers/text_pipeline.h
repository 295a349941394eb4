// The normalizer and decoder pipelines of a tokenizer.json as Hugging Face's tokenizers runs them:
// normalizer steps rewrite the text between added tokens before it is split (NFC, NFKC, Prepend,
// Replace); decoder steps turn token spellings back into text, each acting on the whole list of
// token strings (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::models {

struct NormalizerStep {
  enum class Kind { kNfc, kNfkc, kPrepend, kReplace } kind = Kind::kNfc;
  std::string text;     // kPrepend: what is prepended; kReplace: the literal it replaces
  std::string content;  // kReplace: the replacement
};

// Applies the steps in order. Prepend adds its text to a non-empty string only (as tokenizers).
std::string normalize(const std::vector<NormalizerStep>& steps, std::string text);

struct DecoderStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind = Kind::kByteLevel;
  std::string text;        // kReplace: the literal replaced; kStrip: the character; kMetaspace: the replacement
  std::string content;     // kReplace: the replacement
  int64_t start = 0;       // kStrip: at most this many leading `text` characters go
  int64_t stop = 0;        // kStrip: at most this many trailing ones
  bool drop_first = true;  // kMetaspace: the first token loses its replacement characters (scheme != never)
};

// Runs the steps over the tokens' spellings and joins what is left (tokenizers' decode). The result
// is valid UTF-8: ByteLevel repairs with U+FFFD per ill-formed subpart, ByteFallback with one U+FFFD
// per byte of a run of byte tokens that is not UTF-8, exactly as tokenizers does.
std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);

// GPT-2's bytes_to_unicode: byte -> the printable code point that spells it in vocab strings.
const std::array<uint32_t, 256>& byte_to_code_point();

// A byte-level vocabulary spelling back to raw bytes. Like tokenizers' ByteLevel decoder, a token
// with a character outside the byte-level alphabet is taken as its own UTF-8 bytes.
std::string byte_level_bytes(const std::string& spelling);

// Every occurrence of `from` (non-empty) in `s` replaced by `to`.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to);

}  // namespace tandem::models
