// Normalizer and decoder steps, following tokenizers' normalizers/ and decoders/ (0.23).
#include "models/tokenizers/text_pipeline.h"

#include <utility>

#include "models/tokenizers/utf8.h"

namespace tandem::models {
namespace {

// Code points bytes_to_unicode produces fit below this bound (256 + 68 remapped bytes).
constexpr uint32_t kByteLevelCodePoints = 324;

std::array<int16_t, kByteLevelCodePoints> make_code_point_to_byte() {
  std::array<int16_t, kByteLevelCodePoints> table;
  table.fill(-1);
  const auto& forward = byte_to_code_point();
  for (int b = 0; b < 256; ++b) table[forward[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
  return table;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xNN>" (6 characters) -> the byte, or -1 (tokenizers' ByteFallback test).
int fallback_byte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  const int hi = hex_digit(token[3]), lo = hex_digit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  const auto flush = [&] {
    if (bytes.empty()) return;
    if (!utf8::first_invalid(bytes)) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");  // one U+FFFD per byte
    }
    bytes.clear();
  };
  for (std::string& token : tokens) {
    const int b = fallback_byte(token);
    if (b >= 0) {
      bytes += static_cast<char>(b);
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  return out;
}

// The code points of a valid UTF-8 string, each as its own string.
std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = utf8::sequence_length(s, pos);
    if (len == 0) len = 1;
    out.push_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

std::string strip(const std::string& token, const std::string& c, int64_t start, int64_t stop) {
  const std::vector<std::string> chars = characters(token);
  size_t begin = 0, end = chars.size();
  for (int64_t i = 0; i < start && begin < end && chars[begin] == c; ++i) ++begin;
  for (int64_t i = 0; i < stop && end > begin && chars[end - 1] == c; ++i) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += chars[i];
  return out;
}

}  // namespace

const std::array<uint32_t, 256>& byte_to_code_point() {
  // Printable Latin-1 bytes spell themselves; the rest move to U+0100 onwards, in byte order.
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

std::string byte_level_bytes(const std::string& spelling) {
  static const auto table = make_code_point_to_byte();
  std::string out;
  out.reserve(spelling.size());
  for (size_t pos = 0; pos < spelling.size();) {
    const size_t len = utf8::sequence_length(spelling, pos);
    if (len == 0) return spelling;
    const uint32_t cp = utf8::decode_at(spelling, pos, len);
    if (cp >= kByteLevelCodePoints || table[cp] < 0) return spelling;
    out += static_cast<char>(table[cp]);
    pos += len;
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string text) {
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        text = utf8::nfc(text);
        break;
      case NormalizerStep::Kind::kNfkc:
        text = utf8::nfkc(text);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!text.empty()) text = step.text + text;
        break;
      case NormalizerStep::Kind::kReplace:
        text = replace_all(text, step.text, step.content);
        break;
    }
  }
  return text;
}

std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens) {
  for (const DecoderStep& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) bytes += byte_level_bytes(t);
        tokens.assign(1, utf8::make_valid(bytes));
        break;
      }
      case DecoderStep::Kind::kReplace:
        for (std::string& t : tokens) t = replace_all(t, step.text, step.content);
        break;
      case DecoderStep::Kind::kByteFallback:
        tokens = byte_fallback(std::move(tokens));
        break;
      case DecoderStep::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Kind::kStrip:
        for (std::string& t : tokens) t = strip(t, step.text, step.start, step.stop);
        break;
      case DecoderStep::Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], step.text, i == 0 && step.drop_first ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return utf8::make_valid(out);
}

}  // namespace tandem::models
