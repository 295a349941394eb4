// Text <-> token ids for the AR track: a char tokenizer for the built-in tasks and the Hugging Face
// byte-level BPE (GPT-2, Llama-3, Qwen2 tokenizer.json) behind one interface.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::models {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Never adds BOS/EOS: the caller decides the prompt layout. Throws UserError for text the
  // tokenizer cannot represent (a char outside the alphabet, invalid UTF-8).
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;

  // Always returns valid UTF-8: byte sequences cut mid-character (a partial generation) come
  // back as U+FFFD, as Hugging Face does. Throws UserError for an id outside [0, vocab_size()) or
  // one with no token, so a sampler that forgot to mask a padded vocabulary fails loudly.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const = 0;

  // One past the largest id (what an embedding table needs at least).
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int64_t> bos_id() const = 0;
  virtual std::optional<int64_t> eos_id() const = 0;
  virtual std::optional<int64_t> pad_id() const = 0;
  virtual bool is_special(int64_t id) const = 0;

  // The vocabulary's own spelling ("Ġworld" for a byte-level BPE token, "<eos>", "a").
  // id_to_token throws UserError for an id with no token; token_to_id returns nullopt.
  virtual std::string id_to_token(int64_t id) const = 0;
  virtual std::optional<int64_t> token_to_id(const std::string& token) const = 0;
};

// Ids: <pad>=0, <bos>=1, <eos>=2, then one id per character (Unicode code point) of `alphabet`
// in order. Throws UserError for an empty alphabet, invalid UTF-8 or a repeated character.
std::unique_ptr<Tokenizer> make_char_tokenizer(const std::string& alphabet);

inline constexpr int64_t kCharPadId = 0;
inline constexpr int64_t kCharBosId = 1;
inline constexpr int64_t kCharEosId = 2;

// `path` is a tokenizer.json or a directory holding one. bos/eos/pad come from a
// tokenizer_config.json beside it when present, else from well-known added-token names.
// Throws UserError naming the file and the JSON path for anything malformed or unsupported.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path);

// The same from text already in memory; `source` names it in error messages.
std::unique_ptr<Tokenizer> parse_hf_tokenizer(const std::string& tokenizer_json, const std::string& source,
                                              const std::string& tokenizer_config_json = "");

}  // namespace tandem::models
