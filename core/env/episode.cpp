// Token-in-token-out episodes: renders differences, never re-tokenises the model's ids.
#include "core/env/episode.h"

#include <algorithm>

#include "common/error.h"

namespace tandem::env {

namespace {

using ojson = nlohmann::ordered_json;

// Stands in for an assistant message's content to find the template's closing text: plain letters
// no template trims, splits or escapes.
constexpr const char* kSentinel = "TANDEMxASSISTANTxCONTENTxSENTINEL";

std::string shown(const std::string& s, size_t from) {
  std::string out = s.substr(from, 60);
  std::string escaped;
  for (char c : out) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
  return "'" + escaped + (s.size() > from + 60 ? "...'" : "'");
}

}  // namespace

std::string ConversationFormat::render(const ojson& messages, bool add_generation_prompt) const {
  return chat_template->render(messages, add_generation_prompt, tools, extra);
}

Episode::Episode(const ConversationFormat& format, ojson first, int64_t max_tokens)
    : format_(format), messages_(std::move(first)), max_tokens_(max_tokens) {
  if (!format_.chat_template || !format_.tokenizer)
    throw UserError("multi-turn episodes need a chat template (tracks.ar.data.chat_template) and a tokenizer");
  append(format_.tokenizer->encode(format_.render(messages_, true)), TokenSource::kPrompt);
  prompt_tokens_ = static_cast<int64_t>(tokens_.size());
}

void Episode::append(const std::vector<int64_t>& ids, TokenSource source) {
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  sources_.insert(sources_.end(), ids.size(), source);
}

std::string Episode::extension(const std::string& shorter, const std::string& longer,
                               const std::string& boundary) const {
  if (longer.size() >= shorter.size() && longer.compare(0, shorter.size(), shorter) == 0)
    return longer.substr(shorter.size());
  const auto diff = std::mismatch(shorter.begin(), shorter.end(), longer.begin(), longer.end());
  const size_t at = static_cast<size_t>(diff.first - shorter.begin());
  throw NotAppendOnly("chat template " + format_.origin + " is not append-only " + boundary +
                      ": adding messages re-renders earlier text (at character " + std::to_string(at) + ", " +
                      shown(shorter, at) + " becomes " + shown(longer, at) +
                      "), so the tokens the model saw would not be the conversation's. See docs/env_protocol.md "
                      "(templates that are not append-only).");
}

std::string Episode::add_model_turn(const std::vector<int64_t>& sampled, bool ended_by_stop_id) {
  const int64_t begin = static_cast<int64_t>(tokens_.size());
  append(sampled, TokenSource::kModel);
  turns_.emplace_back(begin, static_cast<int64_t>(tokens_.size()));

  std::vector<int64_t> content(sampled.begin(), sampled.end() - (ended_by_stop_id && !sampled.empty() ? 1 : 0));
  const std::string text = format_.tokenizer->decode(content);

  // The closing text follows an assistant message's content: found with a sentinel content.
  const std::string before = format_.render(messages_, true);
  ojson probe = messages_;
  probe.push_back(ojson{{"role", "assistant"}, {"content", kSentinel}});
  const std::string after = extension(before, format_.render(probe, false), "after the generation prompt");
  const size_t at = after.rfind(kSentinel);
  if (at == std::string::npos)
    throw UserError("chat template " + format_.origin + " does not render an assistant message's content as it is");
  std::string closing = after.substr(at + std::string(kSentinel).size());
  if (ended_by_stop_id && !sampled.empty()) {
    const std::string stop = format_.tokenizer->decode({sampled.back()});
    if (closing.compare(0, stop.size(), stop) == 0) closing.erase(0, stop.size());
  }
  // The text the model's context now holds: the conversation before the turn, the sampled ids' own
  // text (the stop id's included) and the closing text (add_observation's fallback).
  seen_ = before + format_.tokenizer->decode(sampled) + closing;
  if (!closing.empty()) {
    std::vector<int64_t> ids = format_.tokenizer->encode(closing);
    const int64_t room = std::max<int64_t>(0, max_tokens_ - static_cast<int64_t>(tokens_.size()));
    if (static_cast<int64_t>(ids.size()) > room) ids.resize(static_cast<size_t>(room));
    append(ids, TokenSource::kTemplate);
  }
  messages_.push_back(ojson{{"role", "assistant"}, {"content", text}});
  return text;
}

bool Episode::add_observation(const ojson& messages) {
  const std::string before = format_.render(messages_, false);
  ojson next = messages_;
  for (const auto& m : messages) next.push_back(m);
  const std::string after = format_.render(next, true);
  std::string delta;
  try {
    delta = extension(before, after, "after an assistant turn");
  } catch (const NotAppendOnly&) {
    // A template may render the last assistant turn otherwise than the same turn once more
    // messages follow: Qwen3 puts an empty think block in front of a last turn that has no closed
    // one (a turn that skipped thinking, or was cut inside <think>). The render that matters is the
    // longer one: if it begins with exactly the text the model's context holds, the tokens are
    // the conversation's.
    if (!seen_ || after.compare(0, seen_->size(), *seen_) != 0) throw;
    delta = after.substr(seen_->size());
  }
  const std::vector<int64_t> ids = format_.tokenizer->encode(delta);
  if (static_cast<int64_t>(tokens_.size() + ids.size()) > max_tokens_) return false;
  append(ids, TokenSource::kEnv);
  messages_ = std::move(next);
  seen_.reset();
  return true;
}

}  // namespace tandem::env
