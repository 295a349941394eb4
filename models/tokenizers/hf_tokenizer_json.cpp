// Reads a Hugging Face tokenizer.json (+ tokenizer_config.json) into a BpeSpec, checking every
// field it uses so a malformed, truncated or unsupported file is one UserError naming the file
// and the JSON path, never a crash.
#include <cctype>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "models/tokenizers/bpe_tokenizer.h"
#include "models/tokenizers/tokenizer.h"
#include "models/tokenizers/utf8.h"

namespace tandem::models {
namespace {

using nlohmann::json;

// The pre-split pattern of GPT-2, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw UserError(source_ + ": " + (path.empty() ? "" : path + ": ") + what);
  }

  // The member, or nullptr when it is absent or null.
  const json* optional(const json& object, const char* key) const {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& required(const json& object, const char* key, const std::string& path) const {
    const json* v = optional(object, key);
    if (!v) fail(join(path, key), "missing");
    return *v;
  }
  const json& object(const json& v, const std::string& path) const {
    if (!v.is_object()) fail(path, std::string("expected an object, got ") + v.type_name());
    return v;
  }
  const json& array(const json& v, const std::string& path) const {
    if (!v.is_array()) fail(path, std::string("expected an array, got ") + v.type_name());
    return v;
  }
  std::string string(const json& v, const std::string& path) const {
    if (!v.is_string()) fail(path, std::string("expected a string, got ") + v.type_name());
    return v.get<std::string>();
  }
  bool boolean(const json& v, const std::string& path) const {
    if (!v.is_boolean()) fail(path, std::string("expected true or false, got ") + v.type_name());
    return v.get<bool>();
  }
  int64_t integer(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(path, std::string("expected an integer, got ") + v.type_name());
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(path, "too large");
    return v.get<int64_t>();
  }
  bool flag(const json& object, const char* key, const std::string& path, bool fallback) const {
    const json* v = optional(object, key);
    return v ? boolean(*v, join(path, key)) : fallback;
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

 private:
  std::string source_;
};

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix; keep the position and reason.
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) what = what.substr(bracket + 2);
    throw UserError(source + ": not valid JSON: " + what);
  }
}

void read_model(const Reader& r, const json& root, BpeSpec& spec) {
  const json& model = r.object(r.required(root, "model", ""), "model");
  const json* type = r.optional(model, "type");
  const std::string kind = type ? r.string(*type, "model.type") : (r.optional(model, "merges") ? "BPE" : "?");
  if (kind != "BPE")
    r.fail("model.type", "'" + kind + "' is not supported; tandem reads BPE tokenizers only (byte-level or " +
                             "SentencePiece-style)");
  spec.byte_fallback = r.flag(model, "byte_fallback", "model", false);
  spec.fuse_unk = r.flag(model, "fuse_unk", "model", false);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* v = r.optional(model, key); v && !r.string(*v, Reader::join("model", key)).empty())
      r.fail(Reader::join("model", key), "a non-empty value is not supported (WordPiece-style BPE)");
  if (const json* v = r.optional(model, "dropout")) {
    if (!v->is_number()) r.fail("model.dropout", std::string("expected a number, got ") + v->type_name());
    if (v->get<double>() != 0.0)
      r.fail("model.dropout", "BPE dropout is not supported (encoding must be deterministic)");
  }
  spec.ignore_merges = r.flag(model, "ignore_merges", "model", false);
  if (const json* v = r.optional(model, "unk_token")) spec.unk_token = r.string(*v, "model.unk_token");

  const json& vocab = r.object(r.required(model, "vocab", "model"), "model.vocab");
  spec.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    spec.vocab.emplace_back(it.key(), r.integer(it.value(), "model.vocab['" + it.key() + "']"));

  const json& merges = r.array(r.required(model, "merges", "model"), "model.merges");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string path = Reader::index("model.merges", i);
    if (m.is_string()) {
      // "a b": byte-level spellings never contain a plain space, so exactly one separates the parts.
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos)
        r.fail(path, "expected \"left right\" (two tokens separated by one space), got '" + s + "'");
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2) {
      spec.merges.emplace_back(r.string(m[0], Reader::index(path, 0)), r.string(m[1], Reader::index(path, 1)));
    } else {
      r.fail(path, "expected \"left right\" or [\"left\", \"right\"]");
    }
  }
}

void read_added_tokens(const Reader& r, const json& root, BpeSpec& spec) {
  const json* added = r.optional(root, "added_tokens");
  if (!added) return;
  r.array(*added, "added_tokens");
  for (size_t i = 0; i < added->size(); ++i) {
    const std::string path = Reader::index("added_tokens", i);
    const json& t = r.object((*added)[i], path);
    AddedToken token;
    token.id = r.integer(r.required(t, "id", path), Reader::join(path, "id"));
    token.content = r.string(r.required(t, "content", path), Reader::join(path, "content"));
    token.special = r.flag(t, "special", path, false);
    token.single_word = r.flag(t, "single_word", path, false);
    token.lstrip = r.flag(t, "lstrip", path, false);
    token.rstrip = r.flag(t, "rstrip", path, false);
    spec.added.push_back(std::move(token));
  }
}

// A literal split string as a PCRE2 pattern: every ASCII non-alphanumeric gets a backslash.
std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

SplitBehavior read_behavior(const Reader& r, const json& v, const std::string& path) {
  const std::string s = r.string(v, path);
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  r.fail(path, "'" + s + "' is not one of Isolated|Removed|MergedWithPrevious|MergedWithNext|Contiguous");
}

// Visits `node`, or each member when it is {"type": "Sequence", <list_key>: [...]} (nested ones
// too, to depth 8): how the normalizer, pre-tokenizer and decoder lists are all read.
// visit(node, path, type) gets every step that is not a Sequence.
template <class F>
void for_each_step(const Reader& r, const json& node, const std::string& path, const char* list_key, const char* what,
                   F&& visit, int depth = 0) {
  if (depth > 8) r.fail(path, std::string(what) + " are nested too deeply");
  r.object(node, path);
  const std::string type = r.string(r.required(node, "type", path), Reader::join(path, "type"));
  if (type != "Sequence") return visit(node, path, type);
  const std::string list_path = Reader::join(path, list_key);
  const json& list = r.array(r.required(node, list_key, path), list_path);
  for (size_t i = 0; i < list.size(); ++i)
    for_each_step(r, list[i], Reader::index(list_path, i), list_key, what, visit, depth + 1);
}

// Appends the stages of one pre-tokenizer step (not a Sequence); returns whether it is a ByteLevel.
bool read_pre_tokenizer_step(const Reader& r, const json& node, const std::string& path, const std::string& type,
                             BpeSpec& spec) {
  if (type == "ByteLevel") {
    const bool prefix = r.boolean(r.required(node, "add_prefix_space", path), Reader::join(path, "add_prefix_space"));
    if (prefix) spec.stages.push_back({PreTokenizerStage::Kind::kPrefixSpace, "", path});
    if (r.flag(node, "use_regex", path, true))
      spec.stages.push_back({PreTokenizerStage::Kind::kRegexSplit, kGpt2Pattern, path + " (GPT-2 pattern)"});
    return true;
  }
  if (type == "Split") {
    const std::string pattern_path = Reader::join(path, "pattern");
    const json& pattern = r.object(r.required(node, "pattern", path), pattern_path);
    PreTokenizerStage stage;
    stage.where = pattern_path;
    if (const json* regex = r.optional(pattern, "Regex")) {
      stage.pattern = r.string(*regex, Reader::join(pattern_path, "Regex"));
    } else if (const json* literal = r.optional(pattern, "String")) {
      stage.pattern = escape_literal(r.string(*literal, Reader::join(pattern_path, "String")));
    } else {
      r.fail(pattern_path, "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    stage.behavior = read_behavior(r, r.required(node, "behavior", path), Reader::join(path, "behavior"));
    stage.invert = r.flag(node, "invert", path, false);
    spec.stages.push_back(std::move(stage));
    return false;
  }
  if (type == "Metaspace") {
    PreTokenizerStage stage;
    stage.kind = PreTokenizerStage::Kind::kMetaspace;
    stage.where = path;
    stage.pattern = r.string(r.required(node, "replacement", path), Reader::join(path, "replacement"));
    if (stage.pattern.empty()) r.fail(Reader::join(path, "replacement"), "must not be empty");
    if (const json* scheme = r.optional(node, "prepend_scheme")) {
      const std::string s = r.string(*scheme, Reader::join(path, "prepend_scheme"));
      if (s == "always")
        stage.prepend = PrependScheme::kAlways;
      else if (s == "first")
        stage.prepend = PrependScheme::kFirst;
      else if (s == "never")
        stage.prepend = PrependScheme::kNever;
      else
        r.fail(Reader::join(path, "prepend_scheme"), "'" + s + "' is not one of always|first|never");
    } else {
      // Files written before prepend_scheme say add_prefix_space instead.
      stage.prepend = r.flag(node, "add_prefix_space", path, true) ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    stage.split = r.flag(node, "split", path, true);
    spec.stages.push_back(std::move(stage));
    return false;
  }
  r.fail(Reader::join(path, "type"),
         "pre-tokenizer '" + type + "' is not supported (ByteLevel, Metaspace, Split, Sequence)");
}

// A Replace step's pattern: {"String": s} only (a regex pattern is named as unsupported).
std::string literal_pattern(const Reader& r, const json& node, const std::string& path) {
  const std::string pattern_path = Reader::join(path, "pattern");
  const json& pattern = r.object(r.required(node, "pattern", path), pattern_path);
  const json* literal = r.optional(pattern, "String");
  if (!literal) r.fail(pattern_path, "only a {\"String\": ...} pattern is supported");
  const std::string s = r.string(*literal, Reader::join(pattern_path, "String"));
  if (s.empty()) r.fail(Reader::join(pattern_path, "String"), "must not be empty");
  return s;
}

constexpr const char* kNormalizers = "NFC, NFKC, Prepend, Replace, Sequence";

void read_normalizer_step(const Reader& r, const json& node, const std::string& path, const std::string& type,
                          BpeSpec& spec) {
  NormalizerStep step;
  if (type == "NFC") {
    step.kind = NormalizerStep::Kind::kNfc;
  } else if (type == "NFKC") {
    step.kind = NormalizerStep::Kind::kNfkc;
  } else if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    step.text = r.string(r.required(node, "prepend", path), Reader::join(path, "prepend"));
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Kind::kReplace;
    step.text = literal_pattern(r, node, path);
    step.content = r.string(r.required(node, "content", path), Reader::join(path, "content"));
  } else {
    r.fail(Reader::join(path, "type"), "normalizer '" + type + "' is not supported (" + kNormalizers + ")");
  }
  spec.normalizers.push_back(std::move(step));
}

// Any normalizer tandem does not implement is an error naming it: skipping one would tokenize
// differently from Hugging Face. An empty Sequence (DeepSeek-V3's) is no normalization.
void read_normalizer(const Reader& r, const json& root, BpeSpec& spec) {
  const json* node = r.optional(root, "normalizer");
  if (node)
    for_each_step(
        r, *node, "normalizer", "normalizers", "normalizers",
        [&](const json& n, const std::string& p, const std::string& t) { read_normalizer_step(r, n, p, t, spec); });
}

void read_decoder_step(const Reader& r, const json& node, const std::string& path, const std::string& type,
                       BpeSpec& spec) {
  DecoderStep step;
  if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    step.text = literal_pattern(r, node, path);
    step.content = r.string(r.required(node, "content", path), Reader::join(path, "content"));
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    step.text = r.string(r.required(node, "content", path), Reader::join(path, "content"));
    if (utf8::first_invalid(step.text) || step.text.empty() || utf8::sequence_length(step.text, 0) != step.text.size())
      r.fail(Reader::join(path, "content"), "expected one character");
    step.start = r.integer(r.required(node, "start", path), Reader::join(path, "start"));
    step.stop = r.integer(r.required(node, "stop", path), Reader::join(path, "stop"));
    if (step.start < 0 || step.stop < 0) r.fail(path, "start and stop must not be negative");
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::kMetaspace;
    step.text = r.string(r.required(node, "replacement", path), Reader::join(path, "replacement"));
    if (step.text.empty()) r.fail(Reader::join(path, "replacement"), "must not be empty");
    if (const json* scheme = r.optional(node, "prepend_scheme"))
      step.drop_first = r.string(*scheme, Reader::join(path, "prepend_scheme")) != "never";
    else
      step.drop_first = r.flag(node, "add_prefix_space", path, true);
  } else {
    r.fail(
        Reader::join(path, "type"),
        "decoder '" + type + "' is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)");
  }
  spec.decoders.push_back(std::move(step));
}

// A byte-level tokenizer whose decoder is exactly ByteLevel (or absent, as before) keeps the fast
// byte path; any other decoder runs step by step. A SentencePiece-style tokenizer needs one.
void read_decoder(const Reader& r, const json& root, BpeSpec& spec) {
  const json* node = r.optional(root, "decoder");
  if (!node) {
    if (!spec.byte_level) r.fail("decoder", "missing; a tokenizer without a ByteLevel pre-tokenizer needs a decoder");
    return;
  }
  for_each_step(
      r, *node, "decoder", "decoders", "decoders",
      [&](const json& n, const std::string& p, const std::string& t) { read_decoder_step(r, n, p, t, spec); });
  if (spec.byte_level && spec.decoders.size() == 1 && spec.decoders[0].kind == DecoderStep::Kind::kByteLevel)
    spec.decoders.clear();
}

// bos_token / eos_token / pad_token are a string, null, or an AddedToken object with "content".
std::optional<std::string> read_config_token(const Reader& r, const json& config, const char* key) {
  const json* v = r.optional(config, key);
  if (!v) return std::nullopt;
  if (v->is_object()) return r.string(r.required(*v, "content", key), Reader::join(key, "content"));
  return r.string(*v, key);
}

}  // namespace

std::unique_ptr<Tokenizer> parse_hf_tokenizer(const std::string& tokenizer_json, const std::string& source,
                                              const std::string& tokenizer_config_json) {
  try {
    const Reader r(source);
    const json root = parse_json(tokenizer_json, source);
    r.object(root, "(root)");
    BpeSpec spec;
    spec.source = source;
    read_model(r, root, spec);
    read_added_tokens(r, root, spec);
    read_normalizer(r, root, spec);
    // Without a ByteLevel pre-tokenizer the vocabulary spells characters (SentencePiece style).
    const json* pre = r.optional(root, "pre_tokenizer");
    bool byte_level = false;
    if (pre)
      for_each_step(r, *pre, "pre_tokenizer", "pretokenizers", "pre-tokenizers",
                    [&](const json& n, const std::string& p, const std::string& t) {
                      byte_level = read_pre_tokenizer_step(r, n, p, t, spec) || byte_level;
                    });
    spec.byte_level = byte_level;
    if (spec.byte_level && spec.byte_fallback)
      r.fail("model.byte_fallback", "byte fallback with a ByteLevel pre-tokenizer is not supported");
    read_decoder(r, root, spec);
    // post_processor is not read: encode() never adds BOS/EOS, the caller lays out the prompt.
    if (!tokenizer_config_json.empty()) {
      const std::string config_source = "tokenizer_config.json beside " + source;
      const Reader c(config_source);
      const json config = parse_json(tokenizer_config_json, config_source);
      c.object(config, "(root)");
      spec.specials_from_config = true;
      spec.bos_token = read_config_token(c, config, "bos_token");
      spec.eos_token = read_config_token(c, config, "eos_token");
      spec.pad_token = read_config_token(c, config, "pad_token");
    }
    return std::make_unique<BpeTokenizer>(std::move(spec));
  } catch (const json::exception& e) {
    throw UserError(source + ": " + e.what());  // a shape the checks above did not foresee
  }
}

}  // namespace tandem::models
