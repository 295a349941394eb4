// A compiled PCRE2 pattern in UTF + UCP mode (so \s, \p{L}, \p{N} are Unicode-aware, as in the
// Oniguruma patterns Hugging Face tokenizers ship), JIT-compiled when the library supports it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::models {

class PcreRegex {
 public:
  // Throws UserError "<what>: <PCRE2 message> at offset N" when the pattern does not compile.
  PcreRegex(const std::string& pattern, const std::string& what);
  ~PcreRegex();
  PcreRegex(const PcreRegex&) = delete;
  PcreRegex& operator=(const PcreRegex&) = delete;

  // Calls on_match(begin, end) for every non-empty, non-overlapping match, left to right.
  // `text` must be valid UTF-8 (checked by the caller once; PCRE2's own check is skipped
  // because it would rescan the whole text at every match). Thread-safe. Throws UserError when
  // the pattern exceeds PCRE2's match limits on this text.
  void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

  bool jit() const { return jit_; }

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string what_;
  bool jit_ = false;
};

}  // namespace tandem::models
