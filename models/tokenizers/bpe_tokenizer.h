// BPE built from a parsed tokenizer.json: byte-level (GPT-2 / Llama-3 / Qwen2: the vocabulary spells
// bytes) or SentencePiece-style (Llama-2 / Mistral / Gemma: it spells characters, with U+2581 for a
// space and <0xNN> byte-fallback tokens). Added-token split, normalizer, pre-split, rank-ordered
// merges, decoder steps. Internal to models/: callers use the Tokenizer interface and load_hf_tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/tokenizers/pcre_regex.h"
#include "models/tokenizers/text_pipeline.h"
#include "models/tokenizers/tokenizer.h"

namespace tandem::models {

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false;
  bool single_word = false;  // only where it is not glued to a word character
  bool lstrip = false;       // also swallows the whitespace before it
  bool rstrip = false;       // also swallows the whitespace after it
};

// How a regex split keeps the matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Metaspace's prepend_scheme: where the replacement character is put in front of a piece.
enum class PrependScheme { kAlways, kFirst, kNever };

// One pre-tokenizer stage, in order. ByteLevel(use_regex) becomes a prefix-space stage (when
// add_prefix_space) followed by a split on the GPT-2 pattern.
struct PreTokenizerStage {
  enum class Kind { kRegexSplit, kPrefixSpace, kMetaspace } kind = Kind::kRegexSplit;
  std::string pattern;  // kRegexSplit: PCRE2 syntax; kMetaspace: the replacement character
  std::string where;    // JSON path, for error messages
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  PrependScheme prepend = PrependScheme::kAlways;  // kMetaspace
  bool split = true;                               // kMetaspace: split before each replacement character
};

// Everything the JSON loader extracted; strings are as the file spells them (byte-level mapped).
struct BpeSpec {
  std::string source;  // the file, for messages
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<AddedToken> added;
  std::vector<PreTokenizerStage> stages;
  bool ignore_merges = false;
  // True when a ByteLevel pre-tokenizer says the vocabulary spells bytes; false for the
  // SentencePiece style, whose words start as characters (bytes only through byte_fallback).
  bool byte_level = true;
  bool byte_fallback = false;               // a character not in the vocabulary becomes its <0xNN> byte tokens
  bool fuse_unk = false;                    // consecutive unknown characters become one unk token
  std::vector<NormalizerStep> normalizers;  // applied to the text between added tokens
  std::vector<DecoderStep> decoders;        // empty: byte-level decode
  std::optional<std::string> unk_token;
  // From tokenizer_config.json when there is one (a null there means "none"); without one,
  // well-known names (<|endoftext|>, </s>, ...) are looked up instead.
  bool specials_from_config = false;
  std::optional<std::string> bos_token, eos_token, pad_token;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws UserError (naming spec.source) for inconsistent input: duplicate or out-of-range ids,
  // merges whose parts or result are not in the vocabulary, a bad regex.
  explicit BpeTokenizer(BpeSpec spec);
  ~BpeTokenizer() override;

  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(token_strings_.size()); }
  std::optional<int64_t> bos_id() const override { return bos_; }
  std::optional<int64_t> eos_id() const override { return eos_; }
  std::optional<int64_t> pad_id() const override { return pad_; }
  bool is_special(int64_t id) const override;
  std::string id_to_token(int64_t id) const override;
  std::optional<int64_t> token_to_id(const std::string& token) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  struct Stage;

  void build_vocab(const BpeSpec& spec);
  void build_merges(const BpeSpec& spec);
  void build_added(const BpeSpec& spec);
  std::optional<int64_t> resolve_special(const std::optional<std::string>& name, const char* what, bool use_fallbacks,
                                         const std::vector<const char*>& fallbacks) const;
  const AddedToken* added_at(const std::string& text, size_t pos) const;
  void encode_segment(const std::string& segment, bool at_start, std::vector<int64_t>& out) const;
  void encode_piece(const std::string& piece, std::vector<int64_t>& out) const;
  void merge_piece(const std::string& piece, std::vector<int32_t>& out) const;
  void initial_symbols(const std::string& piece, std::vector<int32_t>& out) const;
  int32_t byte_id(unsigned char b) const;
  int32_t unk_id(const std::string& what) const;
  void check_id(int64_t id) const;

  std::string source_;
  std::vector<std::string> token_strings_;                 // id -> spelling in the file ("" for a hole)
  std::vector<std::string> token_bytes_;                   // id -> the raw bytes it decodes to
  std::vector<uint8_t> has_token_;                         // id -> 1 when some token has that id
  std::vector<uint8_t> special_;                           // id -> 1 for a special added token
  std::unordered_map<std::string, int64_t> string_to_id_;  // file spelling -> id
  std::unordered_map<std::string, int64_t> bytes_to_id_;   // raw bytes -> id (model vocab only)
  std::array<int32_t, 256> byte_ids_{};                    // single byte -> id, -1 when absent
  std::array<int32_t, 256> fallback_ids_{};                // byte -> id of <0xNN>, -1 when absent
  std::unordered_map<uint64_t, Merge> merges_;             // (left id << 32 | right id) -> merge
  std::vector<AddedToken> added_;
  std::array<std::vector<size_t>, 256> added_by_first_byte_;  // indices into added_, longest first
  std::vector<std::unique_ptr<Stage>> stages_;
  bool ignore_merges_ = false;
  bool byte_level_ = true;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  std::vector<NormalizerStep> normalizers_;
  std::vector<DecoderStep> decoders_;
  std::optional<int64_t> unk_, bos_, eos_, pad_;

  // Words repeat constantly in natural text, so merged pieces are cached (bounded, guarded).
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tandem::models
