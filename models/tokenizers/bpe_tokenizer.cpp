// BPE: vocabulary tables, added-token split, normalizer, pre-tokenizer stages, rank-ordered merging
// with a priority queue (O(n log n) per word, so a megabyte without spaces is still fast) and decode.
// The SentencePiece style follows tokenizers' BPE::merge_word: a word starts as its characters, a
// character outside the vocabulary becomes its <0xNN> tokens (byte_fallback) or unk (fused).
#include "models/tokenizers/bpe_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "common/error.h"
#include "models/tokenizers/utf8.h"

namespace tandem::models {
namespace {

// Ids above this are refused: a corrupted file must not make us allocate gigabytes.
constexpr int64_t kMaxId = int64_t{1} << 24;
// Pieces longer than this are merged but not cached (they rarely repeat).
constexpr size_t kMaxCachedPieceBytes = 256;
constexpr size_t kMaxCacheEntries = 200000;

std::string byte_spelling(unsigned char b) {
  std::string s;
  utf8::append(s, byte_to_code_point()[b]);
  return s;
}

bool is_word_byte(unsigned char c) { return c >= 0x80 || std::isalnum(c) || c == '_'; }
bool is_space_byte(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Span {
  size_t begin, end;
  bool match;
};

// Hugging Face's SplitDelimiterBehavior applied to the match / gap spans of one piece.
std::vector<Span> apply_behavior(std::vector<Span> spans, SplitBehavior behavior) {
  std::vector<Span> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return spans;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.match) out.push_back(s);
      return out;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.match && !previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      return out;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !out.empty())
          out.back().begin = it->begin;
        else
          out.push_back({it->begin, it->end, false});
        previous_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      return out;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.match == previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      return out;
    }
  }
  return spans;
}

}  // namespace

struct BpeTokenizer::Stage {
  PreTokenizerStage::Kind kind;
  std::unique_ptr<PcreRegex> regex;
  SplitBehavior behavior;
  bool invert;
  std::string replacement;  // kMetaspace
  PrependScheme prepend;
  bool split;
};

BpeTokenizer::BpeTokenizer(BpeSpec spec)
    : source_(spec.source),
      ignore_merges_(spec.ignore_merges),
      byte_level_(spec.byte_level),
      byte_fallback_(spec.byte_fallback),
      fuse_unk_(spec.fuse_unk),
      normalizers_(std::move(spec.normalizers)),
      decoders_(std::move(spec.decoders)) {
  build_vocab(spec);
  build_merges(spec);
  build_added(spec);
  for (const PreTokenizerStage& s : spec.stages) {
    auto stage = std::make_unique<Stage>();
    stage->kind = s.kind;
    stage->behavior = s.behavior;
    stage->invert = s.invert;
    stage->replacement = s.pattern;
    stage->prepend = s.prepend;
    stage->split = s.split;
    if (s.kind == PreTokenizerStage::Kind::kRegexSplit)
      stage->regex = std::make_unique<PcreRegex>(s.pattern, source_ + ": " + s.where);
    stages_.push_back(std::move(stage));
  }
  if (spec.unk_token) {
    unk_ = token_to_id(*spec.unk_token);
    if (!unk_) throw UserError(source_ + ": model.unk_token: '" + *spec.unk_token + "' is not in the vocabulary");
  }
  const bool fallback = !spec.specials_from_config;
  bos_ = resolve_special(spec.bos_token, "bos_token", fallback, {"<|begin_of_text|>", "<s>", "<bos>"});
  eos_ = resolve_special(spec.eos_token, "eos_token", fallback, {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"});
  pad_ = resolve_special(spec.pad_token, "pad_token", fallback, {"<pad>", "<|pad|>"});
}

BpeTokenizer::~BpeTokenizer() = default;

void BpeTokenizer::build_vocab(const BpeSpec& spec) {
  int64_t max_id = -1;
  const auto check_range = [&](int64_t id, const std::string& token, const char* where) {
    if (id < 0 || id >= kMaxId)
      throw UserError(source_ + ": " + where + ": id " + std::to_string(id) + " of '" + token +
                      "' is out of range [0, " + std::to_string(kMaxId) + ")");
    max_id = std::max(max_id, id);
  };
  for (const auto& [token, id] : spec.vocab) check_range(id, token, "model.vocab");
  for (const AddedToken& t : spec.added) check_range(t.id, t.content, "added_tokens");
  const size_t entries = spec.vocab.size() + spec.added.size();
  const auto size = static_cast<size_t>(max_id + 1);
  if (size == 0) throw UserError(source_ + ": model.vocab: the vocabulary is empty");
  if (size > 2 * entries + 1024)
    throw UserError(source_ + ": model.vocab: ids reach " + std::to_string(max_id) + " but there are only " +
                    std::to_string(entries) + " tokens");
  token_strings_.assign(size, std::string());
  token_bytes_.assign(size, std::string());
  has_token_.assign(size, 0);
  special_.assign(size, 0);
  string_to_id_.reserve(spec.vocab.size() + spec.added.size());
  bytes_to_id_.reserve(spec.vocab.size());
  for (const auto& [token, id] : spec.vocab) {
    const auto i = static_cast<size_t>(id);
    if (has_token_[i])
      throw UserError(source_ + ": model.vocab: id " + std::to_string(id) + " is used by both '" + token_strings_[i] +
                      "' and '" + token + "'");
    has_token_[i] = 1;
    token_strings_[i] = token;
    // SentencePiece-style pieces are looked up by their spelling (characters, U+2581 for a space).
    token_bytes_[i] = byte_level_ ? byte_level_bytes(token) : token;
    string_to_id_.emplace(token, id);
    bytes_to_id_.emplace(token_bytes_[i], id);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = string_to_id_.find(byte_spelling(static_cast<unsigned char>(b)));
    byte_ids_[static_cast<size_t>(b)] = it == string_to_id_.end() ? -1 : static_cast<int32_t>(it->second);
    char spelled[8];
    std::snprintf(spelled, sizeof(spelled), "<0x%02X>", b);
    const auto fallback = string_to_id_.find(spelled);
    fallback_ids_[static_cast<size_t>(b)] =
        fallback == string_to_id_.end() ? -1 : static_cast<int32_t>(fallback->second);
  }
}

void BpeTokenizer::build_merges(const BpeSpec& spec) {
  merges_.reserve(spec.merges.size());
  const auto lookup = [&](const std::string& token, size_t rank) {
    const auto it = string_to_id_.find(token);
    if (it == string_to_id_.end())
      throw UserError(source_ + ": model.merges[" + std::to_string(rank) + "]: '" + token +
                      "' is not in the vocabulary");
    return static_cast<int32_t>(it->second);
  };
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const int32_t l = lookup(left, rank), r = lookup(right, rank), merged = lookup(left + right, rank);
    // A later duplicate overrides an earlier one, as in Hugging Face's loader.
    merges_.insert_or_assign(pair_key(l, r), Merge{static_cast<int32_t>(rank), merged});
  }
}

void BpeTokenizer::build_added(const BpeSpec& spec) {
  std::vector<uint8_t> added_id(token_strings_.size(), 0);
  for (size_t i = 0; i < spec.added.size(); ++i) {
    const AddedToken& t = spec.added[i];
    const std::string where = source_ + ": added_tokens[" + std::to_string(i) + "]";
    if (t.content.empty()) throw UserError(where + ": content is empty");
    const auto id = static_cast<size_t>(t.id);
    if (added_id[id])
      throw UserError(where + ": id " + std::to_string(t.id) + " is already used by added token '" +
                      token_strings_[id] + "'");
    added_id[id] = 1;
    has_token_[id] = 1;
    special_[id] = t.special ? 1 : 0;
    token_strings_[id] = t.content;
    token_bytes_[id] = t.content;  // added tokens are matched and decoded verbatim
    string_to_id_.insert_or_assign(t.content, t.id);
    added_.push_back(t);
    added_by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back(added_.size() - 1);
  }
  for (auto& candidates : added_by_first_byte_)
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](size_t a, size_t b) { return added_[a].content.size() > added_[b].content.size(); });
}

std::optional<int64_t> BpeTokenizer::resolve_special(const std::optional<std::string>& name, const char* what,
                                                     bool use_fallbacks,
                                                     const std::vector<const char*>& fallbacks) const {
  if (name) {
    auto id = token_to_id(*name);
    if (!id) throw UserError(source_ + ": " + what + " '" + *name + "' is not a token of this tokenizer");
    return id;
  }
  if (!use_fallbacks) return std::nullopt;
  for (const char* candidate : fallbacks)
    if (auto id = token_to_id(candidate)) return id;
  return std::nullopt;
}

// Longest added token at `pos` (leftmost-longest overall, since the caller scans left to right).
const AddedToken* BpeTokenizer::added_at(const std::string& text, size_t pos) const {
  for (size_t index : added_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& t = added_[index];
    if (text.compare(pos, t.content.size(), t.content) != 0) continue;
    if (t.single_word) {
      const size_t end = pos + t.content.size();
      if (pos > 0 && is_word_byte(static_cast<unsigned char>(text[pos - 1]))) continue;
      if (end < text.size() && is_word_byte(static_cast<unsigned char>(text[end]))) continue;
    }
    return &t;
  }
  return nullptr;
}

std::vector<int64_t> BpeTokenizer::encode(const std::string& text) const {
  if (auto bad = utf8::first_invalid(text))
    throw UserError(source_ + ": cannot encode text that is not valid UTF-8 (byte " + std::to_string(*bad) + ")");
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 8);
  size_t segment_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* token =
        added_by_first_byte_[static_cast<unsigned char>(text[pos])].empty() ? nullptr : added_at(text, pos);
    if (!token) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + token->content.size();
    if (token->lstrip)
      while (begin > segment_start && is_space_byte(static_cast<unsigned char>(text[begin - 1]))) --begin;
    if (token->rstrip)
      while (end < text.size() && is_space_byte(static_cast<unsigned char>(text[end]))) ++end;
    encode_segment(text.substr(segment_start, begin - segment_start), segment_start == 0, out);
    out.push_back(token->id);
    pos = segment_start = end;
  }
  encode_segment(text.substr(segment_start), segment_start == 0, out);
  return out;
}

// `at_start`: the segment begins the text (Metaspace's "first" scheme prepends only there).
void BpeTokenizer::encode_segment(const std::string& text, bool at_start, std::vector<int64_t>& out) const {
  if (text.empty()) return;
  // Hugging Face normalizes what lies between added tokens (theirs are matched on the raw text).
  std::string segment = normalize(normalizers_, text);
  if (segment.empty()) return;
  std::vector<std::string> pieces{std::move(segment)}, next;
  for (const auto& stage : stages_) {
    next.clear();
    for (size_t index = 0; index < pieces.size(); ++index) {
      std::string& piece = pieces[index];
      if (stage->kind == PreTokenizerStage::Kind::kPrefixSpace) {
        next.push_back(piece[0] == ' ' ? std::move(piece) : " " + piece);
        continue;
      }
      if (stage->kind == PreTokenizerStage::Kind::kMetaspace) {
        const std::string& rep = stage->replacement;
        std::string s = replace_all(piece, " ", rep);
        const bool first = at_start && index == 0;
        if ((stage->prepend == PrependScheme::kAlways || (stage->prepend == PrependScheme::kFirst && first)) &&
            s.compare(0, rep.size(), rep) != 0)
          s = rep + s;
        if (!stage->split) {
          next.push_back(std::move(s));
          continue;
        }
        // MergedWithNext on the replacement: each piece starts at one.
        size_t begin = 0;
        for (size_t hit = s.find(rep, 1); hit != std::string::npos; hit = s.find(rep, hit + rep.size())) {
          if (hit > begin) next.push_back(s.substr(begin, hit - begin));
          begin = hit;
        }
        if (begin < s.size()) next.push_back(s.substr(begin));
        continue;
      }
      std::vector<Span> spans;
      size_t previous = 0;
      stage->regex->for_each_match(piece, [&](size_t begin, size_t end) {
        if (begin > previous) spans.push_back({previous, begin, false});
        spans.push_back({begin, end, true});
        previous = end;
      });
      if (previous < piece.size()) spans.push_back({previous, piece.size(), false});
      if (stage->invert)
        for (Span& s : spans) s.match = !s.match;
      for (const Span& s : apply_behavior(std::move(spans), stage->behavior))
        if (s.end > s.begin) next.push_back(piece.substr(s.begin, s.end - s.begin));
    }
    pieces.swap(next);
  }
  for (const std::string& piece : pieces) encode_piece(piece, out);
}

int32_t BpeTokenizer::byte_id(unsigned char b) const {
  if (byte_ids_[b] >= 0) return byte_ids_[b];
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%02X", b);
  return unk_id(std::string("byte ") + hex + " (spelled '" + byte_spelling(b) + "')");
}

int32_t BpeTokenizer::unk_id(const std::string& what) const {
  if (unk_) return static_cast<int32_t>(*unk_);
  throw UserError(source_ + ": " + what + " has no token and the model has no unk_token");
}

// A word's first symbols. Byte-level: one per byte. SentencePiece style (tokenizers' merge_word):
// one per character in the vocabulary; any other character becomes its <0xNN> tokens when all of
// them exist (byte_fallback), else unk, consecutive unks fused into one under fuse_unk. As in
// tokenizers, a pending unk is written only before the next character found in the vocabulary.
void BpeTokenizer::initial_symbols(const std::string& piece, std::vector<int32_t>& out) const {
  if (byte_level_) {
    for (char c : piece) out.push_back(byte_id(static_cast<unsigned char>(c)));
    return;
  }
  bool pending_unk = false;
  for (size_t pos = 0; pos < piece.size();) {
    size_t len = utf8::sequence_length(piece, pos);
    if (len == 0) len = 1;  // encode() has validated the text; this only guards the loop
    const std::string character = piece.substr(pos, len);
    pos += len;
    if (const auto it = bytes_to_id_.find(character); it != bytes_to_id_.end()) {
      if (pending_unk) out.push_back(unk_id(""));
      pending_unk = false;
      out.push_back(static_cast<int32_t>(it->second));
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : character) all = all && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : character) out.push_back(fallback_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    const int32_t unk = unk_id("character " + utf8::describe(utf8::decode_at(character, 0, len)));
    if (pending_unk && !fuse_unk_) out.push_back(unk);
    pending_unk = true;
  }
  if (pending_unk) out.push_back(unk_id(""));
}

void BpeTokenizer::encode_piece(const std::string& piece, std::vector<int64_t>& out) const {
  if (ignore_merges_) {
    // Llama-3: a pre-token that is itself a vocabulary entry is emitted whole.
    const auto it = bytes_to_id_.find(piece);
    if (it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (byte_level_ && piece.size() == 1) {
    out.push_back(byte_id(static_cast<unsigned char>(piece[0])));
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_piece(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(piece, std::move(ids));
  }
}

// Repeatedly merges the adjacent pair of lowest rank (leftmost on ties). Symbols form a linked
// list over the piece's bytes; the heap holds candidate pairs, and a popped candidate is stale
// when either side has changed since it was pushed (checked by looking the pair up again).
void BpeTokenizer::merge_piece(const std::string& piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, id;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::vector<int32_t> initial;
  initial_symbols(piece, initial);
  const auto n = static_cast<int32_t>(initial.size());
  if (n == 0) return;
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    symbols[static_cast<size_t>(i)] = {initial[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<Candidate> heap;
  heap.reserve(static_cast<size_t>(n));
  const auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const auto it =
        merges_.find(pair_key(symbols[static_cast<size_t>(left)].id, symbols[static_cast<size_t>(right)].id));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, left, it->second.id});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<size_t>(c.pos)];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.rank != c.rank || it->second.id != c.id) continue;
    left.id = c.id;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = c.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next)
    out.push_back(symbols[static_cast<size_t>(i)].id);
}

void BpeTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_size() || !has_token_[static_cast<size_t>(id)])
    throw UserError(source_ + ": id " + std::to_string(id) + " is not a token (vocabulary size " +
                    std::to_string(vocab_size()) + ")");
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  if (!decoders_.empty()) {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int64_t id : ids) {
      check_id(id);
      if (!(skip_special && special_[static_cast<size_t>(id)]))
        tokens.push_back(token_strings_[static_cast<size_t>(id)]);
    }
    return run_decoders(decoders_, std::move(tokens));
  }
  std::string bytes;
  for (int64_t id : ids) {
    check_id(id);
    if (skip_special && special_[static_cast<size_t>(id)]) continue;
    bytes += token_bytes_[static_cast<size_t>(id)];
  }
  return utf8::make_valid(bytes);
}

bool BpeTokenizer::is_special(int64_t id) const {
  return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
}

std::string BpeTokenizer::id_to_token(int64_t id) const {
  check_id(id);
  return token_strings_[static_cast<size_t>(id)];
}

std::optional<int64_t> BpeTokenizer::token_to_id(const std::string& token) const {
  const auto it = string_to_id_.find(token);
  if (it == string_to_id_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tandem::models
