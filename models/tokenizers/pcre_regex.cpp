// PCRE2 (8-bit) wrapper for the tokenizer pre-split patterns.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "models/tokenizers/pcre_regex.h"

#include <pcre2.h>

#include <new>

#include "common/error.h"

namespace tandem::models {
namespace {

std::string pcre_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-call match state: match data sized for the pattern, and a JIT stack large enough for long
// runs of one class (a megabyte of spaces) where the 32 KiB default could run out.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  explicit MatchState(const pcre2_code* code, bool jit) {
    data = pcre2_match_data_create_from_pattern(code, nullptr);
    if (jit) {
      context = pcre2_match_context_create(nullptr);
      stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
      if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
    }
    if (!data) throw std::bad_alloc();
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

size_t next_char(std::string_view text, size_t pos) {
  ++pos;
  while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

}  // namespace

struct PcreRegex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

PcreRegex::PcreRegex(const std::string& pattern, const std::string& what)
    : code_(std::make_unique<Code>()), what_(what) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &error, &offset, nullptr);
  if (!code_->code)
    throw UserError(what + ": " + pcre_message(error) + " at offset " + std::to_string(offset) + " of the pattern");
  jit_ = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

PcreRegex::~PcreRegex() = default;

void PcreRegex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const {
  MatchState state(code_->code, jit_);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  uint32_t options = 0;
  while (pos <= text.size()) {
    const int rc =
        pcre2_match(code_->code, subject, text.size(), pos, options | PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) return;
      // No non-empty match at the empty match's position: move one character on.
      options = 0;
      if (pos >= text.size()) return;
      pos = next_char(text, pos);
      continue;
    }
    // Only a pathological pattern from the file gets here (match or JIT-stack limit exceeded).
    if (rc < 0) throw UserError(what_ + ": matching failed: " + pcre_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      on_match(begin, end);
      pos = end;
      options = 0;
    } else {
      // Standard PCRE2 idiom for empty matches: retry here, anchored and non-empty.
      pos = begin;
      options = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
      if (pos >= text.size()) return;
    }
  }
}

}  // namespace tandem::models
