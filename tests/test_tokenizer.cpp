// Char tokenizer and Hugging Face byte-level BPE: hand-computed ids on tiny fixtures, ids from an
// independent JavaScript implementation (tests/fixtures/tokenizer_reference.json), malformed and
// fuzzed tokenizer.json, and the real GPT-2 / Llama-3 / Qwen2 files when they have been fetched.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "fixtures.h"
#include "models/tokenizers/tokenizer.h"

using namespace tandem;
using namespace tandem::models;
using Ids = std::vector<int64_t>;
using nlohmann::json;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string fixture_dir(const std::string& name) { return std::string(TANDEM_FIXTURES_DIR) + "/tokenizers/" + name; }
std::string fixture_json(const std::string& name) { return read_text(fixture_dir(name) + "/tokenizer.json"); }

// The message of the UserError `f` throws, or a marker when it throws nothing.
std::string parse_error(const json& tokenizer, const std::string& config = "") {
  return test::user_error_of([&] { parse_hf_tokenizer(tokenizer.dump(), "t.json", config); });
}

std::unique_ptr<Tokenizer> parse(const json& tokenizer) { return parse_hf_tokenizer(tokenizer.dump(), "t.json"); }

// Where fetch_tokenizers.sh put the real files: $TANDEM_TOKENIZER_DIR, else build/_deps/tokenizers.
// The formatter would split this literal again on every run (multi-byte characters).
// clang-format off
const std::string kMultilingual =
    "Grüße, naïve café! 你好，世界。こんにちは 안녕하세요 Привет мир 🙂👍🏽 🇺🇸 👨‍👩‍👧‍👦\n\n\tTabs\tand   "
    "spaces   \r\nline 2\n   indented 0123456789 3.14159 $42.50 I'm DON'T you'll";
// clang-format on

}  // namespace

TEST_CASE("char tokenizer: specials first, then the alphabet in order", "[tokenizer]") {
  const auto t = make_char_tokenizer("0123456789+=é");
  CHECK(t->vocab_size() == 16);
  CHECK(*t->pad_id() == 0);
  CHECK(*t->bos_id() == 1);
  CHECK(*t->eos_id() == 2);
  CHECK(t->encode("12+3=15") == Ids{4, 5, 13, 6, 14, 4, 8});
  CHECK(t->encode("é0") == Ids{15, 3});
  CHECK(t->encode("").empty());
  CHECK(t->decode({1, 4, 5, 13, 6, 2, 0}) == "<bos>12+3<eos><pad>");
  CHECK(t->decode({1, 4, 5, 13, 6, 2, 0}, true) == "12+3");
  CHECK(t->id_to_token(15) == "é");
  CHECK(*t->token_to_id("<eos>") == 2);
  CHECK(*t->token_to_id("é") == 15);
  CHECK_FALSE(t->token_to_id("x"));
  CHECK_FALSE(t->token_to_id("12"));
  CHECK(t->is_special(0));
  CHECK_FALSE(t->is_special(3));
  const std::string text = "9+9=18é";
  CHECK(t->decode(t->encode(text)) == text);
}

TEST_CASE("char tokenizer: clear errors", "[tokenizer]") {
  const auto t = make_char_tokenizer("abc ");
  CHECK(test::user_error_of([&] { t->encode("ab cx"); }) ==
        "char tokenizer: 'x' (U+0078) at character 4 (byte 4) is not in the alphabet");
  CHECK_THAT(test::user_error_of([&] { t->encode("aé!"); }), Catch::Contains("'é' (U+00E9) at character 1 (byte 1)"));
  CHECK_THAT(test::user_error_of([&] { t->encode("a\n"); }), Catch::Contains("U+000A at character 1"));
  CHECK_THAT(test::user_error_of([&] { t->encode("a\xff"); }), Catch::Contains("not valid UTF-8 at byte 1"));
  CHECK_THAT(test::user_error_of([&] { t->decode({7}); }), Catch::Contains("id 7 is outside the vocabulary [0, 7)"));
  CHECK_THAT(test::user_error_of([&] { t->decode({-1}); }), Catch::Contains("id -1"));
  CHECK(test::user_error_of([] { make_char_tokenizer(""); }) == "char tokenizer: the alphabet is empty");
  CHECK_THAT(test::user_error_of([] { make_char_tokenizer("abca"); }),
             Catch::Contains("repeats 'a' (U+0061) at character 3"));
}

TEST_CASE("tiny GPT-2-layout BPE: hand-computed ids", "[tokenizer]") {
  // Bytes are ids 0-255; merges add he=256 ll=257 hell=258 hello=259 Ġw=260 or=261 Ġwor=262
  // Ġworl=263 Ġworld=264 ĠĠ=265 12=266 aa=267; <|endoftext|>=268 (special), <tool>=269.
  const auto t = load_hf_tokenizer(fixture_dir("bytelevel_tiny"));
  CHECK(t->vocab_size() == 270);
  CHECK(t->encode("hello world") == Ids{259, 264});
  CHECK(t->encode("hello  world") == Ids{259, 32, 264});  // "hello", " ", " world"
  CHECK(t->encode("   x") == Ids{265, 32, 120});          // \s+(?!\S) leaves the last space to " x"
  CHECK(t->encode("hell") == Ids{258});
  CHECK(t->encode("llhe") == Ids{257, 256});
  CHECK(t->encode("12345") == Ids{266, 51, 52, 53});
  CHECK(t->encode("aaaaa") == Ids{267, 267, 97});  // equal ranks merge leftmost first
  CHECK(t->encode("hello<|endoftext|>world<tool>!") == Ids{259, 268, 119, 261, 108, 100, 269, 33});
  CHECK(t->decode({259, 268, 119, 261, 108, 100, 269, 33}) == "hello<|endoftext|>world<tool>!");
  CHECK(t->decode({259, 268, 119, 261, 108, 100, 269, 33}, true) == "helloworld<tool>!");
  CHECK(t->id_to_token(264) == "Ġworld");
  CHECK(*t->token_to_id("Ġworld") == 264);
  CHECK(*t->token_to_id("<tool>") == 269);
  CHECK(t->is_special(268));
  CHECK_FALSE(t->is_special(269));
  CHECK(*t->eos_id() == 268);  // no tokenizer_config.json: found by its well-known name
  CHECK_FALSE(t->bos_id());
  CHECK_FALSE(t->pad_id());
  CHECK(t->encode("").empty());
  CHECK(t->decode(t->encode(kMultilingual)) == kMultilingual);
}

TEST_CASE("tiny Llama-3-layout BPE: Split regex, pair merges, ignore_merges, config", "[tokenizer]") {
  // Ġt=256 he=257 Ġthe=258 12=259 123=260 Ġcat=261 (no merge reaches it); added 262-265.
  const auto t = load_hf_tokenizer(fixture_dir("split_tiny") + "/tokenizer.json");
  CHECK(t->encode(" the cat") == Ids{258, 261});
  CHECK(t->encode("the") == Ids{116, 257});
  CHECK(t->encode("12345") == Ids{260, 52, 53});  // \p{N}{1,3}
  CHECK(t->encode("a\n\nb") == Ids{97, 10, 10, 98});
  CHECK(t->encode("IT'S") == Ids{73, 84, 39, 83});
  CHECK(t->encode("a <mask>b") == Ids{97, 265, 98});  // lstrip swallows the space
  CHECK(t->encode("<|begin_of_text|>the<think>12<|end_of_text|>") == Ids{262, 116, 257, 264, 259, 263});
  CHECK(*t->bos_id() == 262);  // from tokenizer_config.json
  CHECK(*t->eos_id() == 263);
  CHECK_FALSE(t->pad_id());  // "pad_token": null there means none
  CHECK(t->decode(t->encode(kMultilingual)) == kMultilingual);

  json j = json::parse(fixture_json("split_tiny"));
  j["model"]["ignore_merges"] = false;
  CHECK(parse(j)->encode(" the cat") == Ids{258, 32, 99, 97, 116});
}

TEST_CASE("tiny fixtures agree with the JavaScript reference", "[tokenizer]") {
  const json ref = test::load_fixture("tokenizer_reference.json");
  for (const char* name : {"bytelevel_tiny", "split_tiny"}) {
    const auto t = load_hf_tokenizer(fixture_dir(name));
    for (const json& c : ref["tokenizers"][name]["cases"]) {
      const std::string text = c["text"];
      INFO(name << ": " << text);
      CHECK(t->encode(text) == c["ids"].get<Ids>());
      // lstrip tokens swallow whitespace by design, so those texts do not round-trip.
      if (text.find("<mask>") == std::string::npos) CHECK(t->decode(t->encode(text)) == text);
    }
  }
}

TEST_CASE("the NFC normalizer composes text before the split; no normalizer leaves it", "[tokenizer]") {
  const std::string decomposed = "cafe\u0301 \u1112\u1161\u11ab", composed = "caf\u00e9 \ud55c";
  json j = json::parse(fixture_json("split_tiny"));
  const auto raw = parse(j);  // no normalizer: the control, the two spellings differ
  CHECK(raw->encode(decomposed) != raw->encode(composed));
  j["normalizer"] = {{"type", "NFC"}};
  const auto nfc = parse(j);
  CHECK(nfc->encode(decomposed) == nfc->encode(composed));
  CHECK(nfc->decode(nfc->encode(decomposed)) == composed);
  CHECK(nfc->encode("\ufb01") == raw->encode("\ufb01"));  // a compatibility ligature is not NFC's to change
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};  // DeepSeek-V3's: nothing to do
  CHECK(parse(j)->encode(decomposed) == raw->encode(decomposed));
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  CHECK(parse(j)->encode(decomposed) == nfc->encode(composed));
}

// A SentencePiece-style BPE small enough to work out by hand: a vocabulary of characters with
// U+2581 for a space, the 256 <0xNN> byte tokens, Mistral's normalizer and decoder.
json sentencepiece_tiny() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char spelled[8];
    std::snprintf(spelled, sizeof(spelled), "<0x%02X>", b);
    vocab[spelled] = 3 + b;
  }
  const std::vector<std::string> pieces = {"\u2581", "h", "i", "a", "\u2581h", "hi", "\u2581hi", "f", "\u2581a"};
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 259 + static_cast<int>(i);
  const json specials = {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                         {{"id", 1}, {"content", "<s>"}, {"special", true}},
                         {{"id", 2}, {"content", "</s>"}, {"special", true}}};
  return {{"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", {"\u2581 h", "h i", "\u2581h i", "\u2581 a"}},
            {"unk_token", "<unk>"},
            {"byte_fallback", true},
            {"fuse_unk", true}}},
          {"added_tokens", specials},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\u2581"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
          {"pre_tokenizer", nullptr},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}}};
}

TEST_CASE("SentencePiece-style BPE: characters, byte fallback, unk, normalizer and decoder steps", "[tokenizer]") {
  const json base = sentencepiece_tiny();
  const auto t = parse(base);
  // "hi a": normalized to "▁hi▁a" -> ▁ h i ▁ a -> (▁h) i -> (▁hi), (▁a).
  CHECK(t->encode("hi a") == Ids{265, 267});
  // é is not in the vocabulary: its two UTF-8 bytes, 0xC3 0xA9, as <0xC3> <0xA9> (ids 3 + byte).
  CHECK(t->encode("hé") == Ids{263, 3 + 0xC3, 3 + 0xA9});
  CHECK(t->decode(t->encode("hé")) == "hé");
  // Prepend acts on each stretch between added tokens, and only on a non-empty one.
  CHECK(t->encode("<s>hi</s>") == Ids{1, 265, 2});
  CHECK(t->encode("<s>") == Ids{1});
  // The decoder: ▁ back to a space, then Strip drops one leading space of the fused text.
  CHECK(t->decode({265, 267}) == "hi a");
  CHECK(t->decode({1, 265, 267}) == "<s> hi a");
  CHECK(t->decode({1, 265, 267}, true) == "hi a");
  // A run of byte tokens that is not UTF-8 is one U+FFFD per byte (tokenizers' ByteFallback).
  CHECK(t->decode({260, 3 + 0xC3, 260}) == "h\uFFFDh");
  CHECK(t->decode({260, 3 + 0xE4, 3 + 0xBD, 260}) == "h\uFFFD\uFFFDh");
  SECTION("without byte fallback unknown characters become unk, fused when fuse_unk") {
    json j = base;
    j["model"]["byte_fallback"] = false;
    CHECK(parse(j)->encode("hééa") == Ids{263, 0, 262});
    j["model"]["fuse_unk"] = false;
    CHECK(parse(j)->encode("hééa") == Ids{263, 0, 0, 262});
    j["model"].erase("unk_token");
    CHECK_THAT(test::user_error_of([&] { parse(j)->encode("hé"); }),
               Catch::Contains("has no token and the model has no unk_token"));
  }
  SECTION("the Metaspace pre-tokenizer and decoder (the newer spelling of the same tokenizer)") {
    json j = base;
    j.erase("normalizer");
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
    j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}};
    const auto m = parse(j);
    CHECK(m->encode("hi a") == Ids{265, 267});
    // "first": only the stretch at the very start of the text gets the replacement prepended.
    CHECK(m->encode("<s>hi") == Ids{1, 264});
    CHECK(m->decode({265, 267}) == "hi a");
    j["pre_tokenizer"]["prepend_scheme"] = "always";
    CHECK(parse(j)->encode("<s>hi") == Ids{1, 265});
    j["pre_tokenizer"]["split"] = true;  // split before each ▁: "▁hi▁a" -> "▁hi" "▁a", same merges here
    CHECK(parse(j)->encode("hi a") == Ids{265, 267});
  }
  SECTION("NFKC folds compatibility characters; NFC (the control) does not") {
    json j = base;
    j["normalizer"]["normalizers"].push_back({{"type", "NFKC"}});
    CHECK(parse(j)->encode("\ufb01") == parse(j)->encode("fi"));
    j["normalizer"]["normalizers"].back()["type"] = "NFC";
    CHECK(parse(j)->encode("\ufb01") != parse(j)->encode("fi"));
  }
}

TEST_CASE("merge layouts and pre-tokenizer variants", "[tokenizer]") {
  const json base = json::parse(fixture_json("bytelevel_tiny"));
  SECTION("merges as pairs give the same ids as merges as strings") {
    json j = base;
    json pairs = json::array();
    for (const json& m : j["model"]["merges"]) {
      const std::string s = m;
      pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
    }
    j["model"]["merges"] = pairs;
    CHECK(parse(j)->encode("hello world 12 aaaa") == parse(base)->encode("hello world 12 aaaa"));
  }
  SECTION("ByteLevel add_prefix_space") {
    json j = base;
    j["pre_tokenizer"]["add_prefix_space"] = true;
    CHECK(parse(j)->encode("world") == Ids{264});
    CHECK(parse(j)->encode(" world") == Ids{264});
  }
  SECTION("Split on a literal string, Removed and MergedWithPrevious") {
    json j = base;
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    CHECK(parse(j)->encode("hello world") == Ids{259, 119, 261, 108, 100});
    j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
    CHECK(parse(j)->encode("hello world") == Ids{259, 32, 119, 261, 108, 100});
    j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext";
    CHECK(parse(j)->encode("hello world") == Ids{259, 264});
    // A pattern that also matches the empty string: empty matches are skipped, not looped on.
    j["pre_tokenizer"]["pretokenizers"][0] = {
        {"type", "Split"}, {"pattern", {{"Regex", "l*"}}}, {"behavior", "Isolated"}};
    CHECK(parse(j)->encode("hello") == Ids{256, 257, 111});
    j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
    CHECK(parse(j)->encode("hello") == Ids{256, 257, 111});
  }
  SECTION("tokenizer_config.json specials as strings or AddedToken objects") {
    const auto t = parse_hf_tokenizer(base.dump(), "t.json",
                                      R"({"bos_token": {"content": "<tool>"}, "eos_token": "<|endoftext|>"})");
    CHECK(*t->bos_id() == 269);
    CHECK(*t->eos_id() == 268);
    CHECK_FALSE(t->pad_id());
  }
}

TEST_CASE("malformed or unsupported tokenizer.json is a UserError naming the path", "[tokenizer]") {
  const json base = json::parse(fixture_json("bytelevel_tiny"));
  const auto with = [&](const std::function<void(json&)>& edit) {
    json j = base;
    edit(j);
    return parse_error(j);
  };
  CHECK_THAT(test::user_error_of([] { parse_hf_tokenizer("{\"model\": ", "t.json"); }),
             Catch::StartsWith("t.json: not valid JSON"));
  CHECK_THAT(test::user_error_of([] { parse_hf_tokenizer("[1, 2]", "t.json"); }),
             Catch::Contains("(root): expected an object"));
  CHECK_THAT(with([](json& j) { j.erase("model"); }), Catch::Contains("t.json: model: missing"));
  CHECK_THAT(with([](json& j) { j["model"]["type"] = "Unigram"; }),
             Catch::Contains("model.type: 'Unigram' is not supported"));
  CHECK_THAT(with([](json& j) { j["model"]["byte_fallback"] = true; }),
             Catch::Contains("model.byte_fallback: byte fallback with a ByteLevel pre-tokenizer"));
  CHECK_THAT(with([](json& j) { j["model"]["dropout"] = 0.1; }), Catch::Contains("model.dropout"));
  CHECK_THAT(with([](json& j) { j["model"]["vocab"]["h"] = "7"; }),
             Catch::Contains("model.vocab['h']: expected an integer, got string"));
  CHECK_THAT(with([](json& j) { j["model"]["vocab"]["h"] = -3; }), Catch::Contains("id -3 of 'h' is out of range"));
  CHECK_THAT(with([](json& j) { j["model"]["vocab"]["h"] = 1 << 30; }), Catch::Contains("out of range"));
  CHECK_THAT(with([](json& j) { j["model"]["vocab"]["h"] = 5000; }), Catch::Contains("ids reach 5000"));
  CHECK_THAT(with([](json& j) { j["model"]["vocab"]["h"] = 101; }), Catch::Contains("id 101 is used by both"));
  CHECK_THAT(with([](json& j) { j["model"]["merges"][3] = "hello"; }),
             Catch::Contains("model.merges[3]: expected \"left right\""));
  CHECK_THAT(with([](json& j) { j["model"]["merges"][0] = "h zz"; }),
             Catch::Contains("model.merges[0]: 'zz' is not in the vocabulary"));
  CHECK_THAT(with([](json& j) {
               j["model"]["merges"][0] = {"q", 5};
             }),
             Catch::Contains("model.merges[0][1]: expected a string"));
  CHECK_THAT(with([](json& j) { j["model"]["merges"] = "x"; }), Catch::Contains("model.merges: expected an array"));
  CHECK_THAT(with([](json& j) { j["added_tokens"][0].erase("id"); }), Catch::Contains("added_tokens[0].id: missing"));
  CHECK_THAT(with([](json& j) { j["added_tokens"][1]["content"] = ""; }),
             Catch::Contains("added_tokens[1]: content is empty"));
  CHECK_THAT(
      with([](json& j) {
        j["pre_tokenizer"] = nullptr;
        j.erase("decoder");
      }),
      Catch::Contains("t.json: decoder: missing; a tokenizer without a ByteLevel pre-tokenizer needs a decoder"));
  CHECK_THAT(with([](json& j) {
               j["pre_tokenizer"] = {{"type", "Metaspace"}};
             }),
             Catch::Contains("t.json: pre_tokenizer.replacement: missing"));
  CHECK_THAT(with([](json& j) {
               j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
             }),
             Catch::Contains("pre_tokenizer.prepend_scheme: 'sometimes' is not one of always|first|never"));
  CHECK_THAT(with([](json& j) {
               j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
             }),
             Catch::Contains("pre_tokenizer.type: pre-tokenizer 'WhitespaceSplit' is not supported"));
  CHECK_THAT(with([](json& j) {
               j["pre_tokenizer"] = {
                   {"type", "Sequence"},
                   {"pretokenizers",
                    {{{"type", "Split"}, {"pattern", {{"Regex", "(\\p{L}"}}}, {"behavior", "Isolated"}},
                     {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
             }),
             Catch::Contains("t.json: pre_tokenizer.pretokenizers[0].pattern: missing closing parenthesis"));
  CHECK_THAT(with([](json& j) {
               j["normalizer"] = {{"type", "Lowercase"}};
             }),
             Catch::Contains("t.json: normalizer.type: normalizer 'Lowercase' is not supported (NFC, NFKC, Prepend, "
                             "Replace, Sequence)"));
  CHECK_THAT(with([](json& j) {
               j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}};
             }),
             Catch::Contains("t.json: normalizer.normalizers[1].type: normalizer 'Strip' is not supported"));
  CHECK_THAT(with([](json& j) {
               j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}};
             }),
             Catch::Contains("t.json: normalizer.pattern: only a {\"String\": ...} pattern is supported"));
  CHECK_THAT(with([](json& j) {
               j["decoder"] = {{"type", "CTC"}};
             }),
             Catch::Contains("t.json: decoder.type: decoder 'CTC' is not supported"));
  CHECK_THAT(with([](json& j) {
               j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Strip"}, {"content", "ab"}}}}};
             }),
             Catch::Contains("t.json: decoder.decoders[0].content: expected one character"));
  CHECK_THAT(parse_error(base, R"({"eos_token": "</s>"})"), Catch::Contains("eos_token '</s>' is not a token"));
  CHECK_THAT(parse_error(base, "{"), Catch::Contains("tokenizer_config.json beside t.json: not valid JSON"));
  CHECK_THAT(test::user_error_of([] { load_hf_tokenizer("/nonexistent/tokenizer.json"); }),
             Catch::Contains("/nonexistent/tokenizer.json: no such tokenizer file"));

  // A vocabulary without every byte cannot encode every text; that is an error, not a crash.
  json j = base;
  j["model"]["vocab"].erase("!");
  const auto t = parse(j);
  CHECK_THAT(test::user_error_of([&] { t->encode("hi!"); }), Catch::Contains("byte 0x21 (spelled '!') has no token"));
  CHECK_THAT(test::user_error_of([&] { t->decode({33}); }), Catch::Contains("id 33 is not a token"));
  CHECK_THAT(test::user_error_of([&] { t->decode({270}); }), Catch::Contains("id 270 is not a token"));
  CHECK_THAT(test::user_error_of([&] { t->encode("ok\xc3("); }), Catch::Contains("not valid UTF-8 (byte 2)"));
}

TEST_CASE("truncated and byte-flipped tokenizer.json never crash", "[tokenizer]") {
  std::mt19937 rng(1234);
  for (const char* name : {"bytelevel_tiny", "split_tiny"}) {
    const std::string text = fixture_json(name);
    const auto attempt = [&](const std::string& mutated, const std::string& what) {
      INFO(name << " " << what);
      try {
        const auto t = parse_hf_tokenizer(mutated, "fuzz.json");
        // A mutation can leave a valid tokenizer; it must still behave.
        try {
          const Ids ids = t->encode("hello world 123 <|endoftext|> ünï");
          (void)t->decode(ids);
        } catch (const UserError&) {
        }
      } catch (const UserError&) {
      } catch (const std::exception& e) {
        FAIL("not a UserError: " << e.what());
      }
    };
    for (size_t cut = 0; cut + 1 < text.size(); cut += 1) {
      const std::string truncated = text.substr(0, cut);
      if (cut % 7 == 0 || cut > text.size() - 64)
        attempt(truncated, "truncated at " + std::to_string(cut));
      else
        CHECK_THROWS_AS(parse_hf_tokenizer(truncated, "fuzz.json"), UserError);
    }
    std::uniform_int_distribution<size_t> where(0, text.size() - 1);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int i = 0; i < 600; ++i) {
      std::string flipped = text;
      const size_t at = where(rng);
      flipped[at] = static_cast<char>(i % 2 ? byte(rng) : flipped[at] ^ (1 << (i % 8)));
      attempt(flipped, "byte " + std::to_string(at) + " flipped");
    }
  }
}

TEST_CASE("encode is thread-safe", "[tokenizer]") {
  const auto t = load_hf_tokenizer(fixture_dir("split_tiny"));
  const Ids expected = t->encode(kMultilingual);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) results[i] = t->encode(kMultilingual + std::to_string(k % 3));
    });
  for (auto& th : threads) th.join();
  for (const Ids& r : results) CHECK(Ids(r.begin(), r.end() - 1) == expected);
}

TEST_CASE("real GPT-2 / Llama-3 / Qwen2 tokenizer.json", "[tokenizer]") {
  struct Expect {
    const char* name;
    int64_t vocab_size;
    Ids hello_world;
    std::optional<int64_t> bos, eos, pad;
  };
  const std::vector<Expect> expects = {
      {"gpt2", 50257, {15496, 995}, 50256, 50256, std::nullopt},
      {"llama3", 128256, {9906, 1917}, 128000, 128001, std::nullopt},
      {"qwen2_5", 151665, {9707, 1879}, std::nullopt, 151645, 151643},
      {"qwen3", 151669, {9707, 1879}, std::nullopt, 151645, 151643},
  };
  const json ref = test::load_fixture("tokenizer_reference.json");
  for (const Expect& e : expects) {
    const std::string dir = test::real_tokenizer_dir(e.name);
    if (!std::filesystem::exists(dir + "/tokenizer.json")) {
      WARN("skipping the real " << e.name << " tokenizer: " << dir
                                << "/tokenizer.json is absent (run scripts/fixtures/fetch_tokenizers.sh)");
      continue;
    }
    INFO(e.name);
    const auto t = load_hf_tokenizer(dir);
    CHECK(t->vocab_size() == e.vocab_size);
    CHECK(t->encode("Hello world") == e.hello_world);
    CHECK(t->bos_id() == e.bos);
    CHECK(t->eos_id() == e.eos);
    CHECK(t->pad_id() == e.pad);
    CHECK(t->decode(t->encode(kMultilingual)) == kMultilingual);
    for (const json& c : ref["tokenizers"][e.name]["cases"]) {
      const std::string text = c["text"];
      INFO(text);
      const Ids ids = t->encode(text);
      CHECK(ids == c["ids"].get<Ids>());
      CHECK(t->decode(ids) == text);
    }
  }
  const std::string gpt2 = test::real_tokenizer_dir("gpt2");
  if (std::filesystem::exists(gpt2 + "/tokenizer.json")) {
    const auto t = load_hf_tokenizer(gpt2);
    CHECK(t->encode(" world") == Ids{995});
    CHECK(t->encode("<|endoftext|>") == Ids{50256});
    CHECK(t->id_to_token(995) == "Ġworld");
    CHECK(t->decode({15496, 50256, 995}, true) == "Hello world");
    // A cut through a multi-byte character decodes to U+FFFD, never to invalid UTF-8.
    const Ids smile = t->encode("🙂");
    REQUIRE(smile.size() > 1);
    CHECK(t->decode(Ids(smile.begin(), smile.begin() + 1)) == "\xEF\xBF\xBD");
  }
  const std::string qwen = test::real_tokenizer_dir("qwen3");
  if (std::filesystem::exists(qwen + "/tokenizer.json")) {
    const auto t = load_hf_tokenizer(qwen);
    const Ids ids = t->encode("<|im_start|>user\nHi<|im_end|>\n<think>\n</think>");
    CHECK(t->decode(ids, true) == "user\nHi\n<think>\n</think>");  // <think> is not special
  }
}

TEST_CASE("encode throughput and pathological inputs", "[tokenizer]") {
  // About 1 MB of natural text (words repeat, as in real prompts) and 1 MB of random words (the
  // merge cache rarely helps), on every real tokenizer present, else on the tiny fixture.
  std::string natural;
  while (natural.size() < (1u << 20)) natural += kMultilingual + " The quick brown fox jumps over the lazy dog.\n";
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "e", "i", "o", "u",  "n",  "r",  "s", "t", "l", "k", "z",
                                             "é", "ß", "ж", "я", "的", "学", "あ", "7", "0", "'", "-"};
  std::string random_words;
  while (random_words.size() < (1u << 20)) {
    const size_t len = 1 + rng() % 12;
    random_words += rng() % 3 == 0 ? "\n" : " ";
    for (size_t i = 0; i < len; ++i) random_words += alphabet[rng() % alphabet.size()];
  }
  std::vector<std::pair<std::string, std::string>> tokenizers;
  // Mistral and Gemma 3 do not pre-split: each stretch between added tokens is one BPE word.
  for (const char* name : {"gpt2", "llama3", "qwen2_5", "mistral", "gemma3"})
    if (std::filesystem::exists(test::real_tokenizer_dir(name) + "/tokenizer.json"))
      tokenizers.emplace_back(name, test::real_tokenizer_dir(name));
  if (tokenizers.empty()) tokenizers.emplace_back("bytelevel_tiny", fixture_dir("bytelevel_tiny"));
  for (const auto& [name, dir] : tokenizers) {
    const auto t = load_hf_tokenizer(dir);
    for (const auto& [kind, text] : {std::pair<const char*, const std::string&>{"natural", natural},
                                     std::pair<const char*, const std::string&>{"random words", random_words}}) {
      const auto start = std::chrono::steady_clock::now();
      const Ids ids = t->encode(text);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      WARN(name << " encode, " << kind << ": " << text.size() << " bytes -> " << ids.size() << " tokens in " << seconds
                << " s (" << text.size() / seconds / 1e6 << " MB/s)");
      CHECK(seconds < 3.0);  // a guard against quadratic behaviour, not a benchmark
      CHECK(t->decode(ids) == text);
    }
  }

  // One 1 MB word and one 1 MB whitespace run: the merge loop must stay O(n log n).
  const auto t = load_hf_tokenizer(tokenizers.front().second);
  for (const std::string& s : {std::string(1 << 20, 'a'), std::string(1 << 20, ' ')}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids one = t->encode(s);
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 3.0);
    CHECK(t->decode(one) == s);
  }
}

// Hugging Face's tokenizers (the Rust library) as the oracle: tests/check_tokenizers_oracle.sh has
// scripts/fixtures/hf_oracle.py encode and decode its corpus (text not in NFC, jamo, compatibility
// characters, controls, emoji, literal special tokens) with the real tokenizer files, and this case
// checks tandem gives the same ids and the same decoded text (TANDEM_HF_TOKENIZERS names the file).
TEST_CASE("real tokenizers encode and decode as Hugging Face's tokenizers", "[.hf_tokenizers]") {
  const char* path = std::getenv("TANDEM_HF_TOKENIZERS");
  REQUIRE(path != nullptr);
  const nlohmann::json ref = nlohmann::json::parse(std::ifstream(path));
  REQUIRE(ref.size() == 7);  // gpt2, llama3, qwen2_5, qwen3, mistral, gemma3, mistral_metaspace
  for (const auto& [name, entry] : ref.items()) {
    const auto t = load_hf_tokenizer(entry.at("path").get<std::string>());
    for (const nlohmann::json& c : entry.at("cases")) {
      const std::string text = c.at("text");
      INFO(name << ": " << text);
      const Ids ids = t->encode(text);
      CHECK(ids == c.at("ids").get<Ids>());
      CHECK(t->decode(ids, false) == c.at("decoded").get<std::string>());
    }
  }
}
