// The char tokenizer for the built-in tasks (specials + one id per alphabet character) and the
// file-reading front of the Hugging Face loader.
#include "models/tokenizers/tokenizer.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "common/error.h"
#include "models/tokenizers/utf8.h"

namespace tandem::models {
namespace {

constexpr std::array<const char*, 3> kCharSpecials = {"<pad>", "<bos>", "<eos>"};
constexpr int64_t kNumCharSpecials = static_cast<int64_t>(kCharSpecials.size());

class CharTokenizer final : public Tokenizer {
 public:
  explicit CharTokenizer(const std::string& alphabet) {
    if (alphabet.empty()) throw UserError("char tokenizer: the alphabet is empty");
    if (auto bad = utf8::first_invalid(alphabet))
      throw UserError("char tokenizer: the alphabet is not valid UTF-8 at byte " + std::to_string(*bad));
    for (size_t pos = 0, index = 0; pos < alphabet.size(); ++index) {
      const size_t len = utf8::sequence_length(alphabet, pos);
      const uint32_t cp = utf8::decode_at(alphabet, pos, len);
      const int64_t id = kNumCharSpecials + static_cast<int64_t>(chars_.size());
      if (!ids_.emplace(cp, id).second)
        throw UserError("char tokenizer: the alphabet repeats " + utf8::describe(cp) + " at character " +
                        std::to_string(index));
      chars_.push_back(alphabet.substr(pos, len));
      pos += len;
    }
  }

  std::vector<int64_t> encode(const std::string& text) const override {
    if (auto bad = utf8::first_invalid(text))
      throw UserError("char tokenizer: text is not valid UTF-8 at byte " + std::to_string(*bad));
    std::vector<int64_t> ids;
    ids.reserve(text.size());
    for (size_t pos = 0, index = 0; pos < text.size(); ++index) {
      const size_t len = utf8::sequence_length(text, pos);
      const uint32_t cp = utf8::decode_at(text, pos, len);
      const auto it = ids_.find(cp);
      if (it == ids_.end())
        throw UserError("char tokenizer: " + utf8::describe(cp) + " at character " + std::to_string(index) + " (byte " +
                        std::to_string(pos) + ") is not in the alphabet");
      ids.push_back(it->second);
      pos += len;
    }
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids, bool skip_special) const override {
    std::string out;
    for (int64_t id : ids) {
      if (skip_special && is_special(id)) continue;
      out += id_to_token(id);
    }
    return out;
  }

  int64_t vocab_size() const override { return kNumCharSpecials + static_cast<int64_t>(chars_.size()); }
  std::optional<int64_t> bos_id() const override { return kCharBosId; }
  std::optional<int64_t> eos_id() const override { return kCharEosId; }
  std::optional<int64_t> pad_id() const override { return kCharPadId; }
  bool is_special(int64_t id) const override { return id >= 0 && id < kNumCharSpecials; }

  std::string id_to_token(int64_t id) const override {
    if (id < 0 || id >= vocab_size())
      throw UserError("char tokenizer: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                      std::to_string(vocab_size()) + ")");
    if (id < kNumCharSpecials) return kCharSpecials[static_cast<size_t>(id)];
    return chars_[static_cast<size_t>(id - kNumCharSpecials)];
  }

  std::optional<int64_t> token_to_id(const std::string& token) const override {
    for (int64_t i = 0; i < kNumCharSpecials; ++i)
      if (token == kCharSpecials[static_cast<size_t>(i)]) return i;
    const size_t len = token.empty() ? 0 : utf8::sequence_length(token, 0);
    if (len == 0 || len != token.size()) return std::nullopt;
    const auto it = ids_.find(utf8::decode_at(token, 0, len));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::unordered_map<uint32_t, int64_t> ids_;  // code point -> id
  std::vector<std::string> chars_;             // id - kNumCharSpecials -> UTF-8 character
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path.string() + ": cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw UserError(path.string() + ": read error");
  return buf.str();
}

}  // namespace

std::unique_ptr<Tokenizer> make_char_tokenizer(const std::string& alphabet) {
  return std::make_unique<CharTokenizer>(alphabet);
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "tokenizer.json";
  if (!fs::is_regular_file(file, ec)) throw UserError(file.string() + ": no such tokenizer file");
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  std::string config_text;
  if (fs::is_regular_file(config, ec)) config_text = read_file(config);
  return parse_hf_tokenizer(read_file(file), file.string(), config_text);
}

}  // namespace tandem::models
