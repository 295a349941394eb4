// PromptFormat: the chat template's extra variables (data.chat_template_kwargs) reach the template,
// with the real Qwen3 tokenizer's thinking template where it has been fetched, and a template file
// of the test's own (which always runs) for the refusals.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "core/policies/prompt_format.h"
#include "fixtures.h"
#include "models/llama/next_token.h"
#include "models/llama/sampler.h"
#include "models/tokenizers/tokenizer.h"

using namespace tandem;

TEST_CASE("chat_template_kwargs reach the template: Qwen3's enable_thinking", "[prompt_format]") {
  const std::string dir = test::real_tokenizer_dir("qwen3");
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    WARN("skipping: the real Qwen3 tokenizer is not in " << dir << " (scripts/fixtures/fetch_tokenizers.sh)");
    return;
  }
  const auto tok = models::load_hf_tokenizer(dir);
  PromptFormatOptions o;
  o.tokenizer_path = dir;
  const std::string opening = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  // The control: without the variable the template leaves the thinking block to the model.
  CHECK(PromptFormat(o, *tok).render("Hi") == opening);
  o.template_kwargs = {{"enable_thinking", "false"}};
  const PromptFormat off(o, *tok);
  CHECK(off.render("Hi") == opening + "<think>\n\n</think>\n\n");
  CHECK(off.encode("Hi") == tok->encode(opening + "<think>\n\n</think>\n\n"));
  CHECK_THAT(off.describe(), Catch::Contains("template variables {\"enable_thinking\":false}"));
  o.template_kwargs = {{"enable_thinking", "true"}};
  CHECK(PromptFormat(o, *tok).render("Hi") == opening);
}

TEST_CASE("chat_template_kwargs: typed values, and refused without a template", "[prompt_format]") {
  const auto tok = models::make_char_tokenizer("abcdefghijklmnopqrstuvwxyz0123456789:| ");
  const std::string path = (std::filesystem::temp_directory_path() / "tandem_prompt_format.jinja").string();
  std::ofstream(path) << "{{ messages[0].content }}|{{ flag is sameas false }}|{{ n + 1 }}|{{ s }}";
  PromptFormatOptions o;
  o.chat_template = path;
  o.template_kwargs = {{"flag", "false"}, {"n", "41"}, {"s", "\"ab\""}};
  CHECK(PromptFormat(o, *tok).render("q") == "q|True|42|ab");
  o.chat_template = "none";
  CHECK_THAT(test::user_error_of([&] { PromptFormat(o, *tok); }),
             Catch::Contains("chat_template_kwargs ({\"flag\":false,\"n\":41,\"s\":\"ab\"}) need a chat template"));
  std::filesystem::remove(path);
}

TEST_CASE("a tokenizer may run past the model's vocabulary only with special tokens, which prompts may not use",
          "[prompt_format]") {
  // Always: a char tokenizer's characters are ordinary tokens, so a model one id short is refused.
  const auto chars = models::make_char_tokenizer("ab");  // <pad> <bos> <eos> a b: 5 ids
  CHECK_NOTHROW(check_tokenizer_fits(*chars, 5, "tok"));
  CHECK(test::user_error_of([&] {
          check_tokenizer_fits(*chars, 4, "tok");
        }).find("tok has 5 ids but the model's vocabulary has 4") != std::string::npos);
  // Gemma 3 1B: a 262144-id model with the family's tokenizer, whose <image_soft_token> is id 262144.
  const std::string dir = test::real_tokenizer_dir("gemma3");
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    WARN("skipping the Gemma 3 half: its tokenizer is not in " << dir << " (scripts/fixtures/fetch_tokenizers.sh)");
    return;
  }
  const auto gemma = models::load_hf_tokenizer(dir);
  REQUIRE(gemma->vocab_size() == 262145);
  CHECK_NOTHROW(check_tokenizer_fits(*gemma, 262144, "gemma"));
  CHECK(test::user_error_of([&] { check_tokenizer_fits(*gemma, 262000, "gemma"); }).find("no special token") !=
        std::string::npos);
  PromptFormatOptions o;
  o.tokenizer_path = dir;
  o.model_vocab = 262144;
  const PromptFormat format(o, *gemma);
  const std::vector<int64_t> ids = format.encode("What is 2+2?");
  CHECK(*std::max_element(ids.begin(), ids.end()) < 262144);
  const std::string e = test::user_error_of([&] { format.encode("look: <image_soft_token>"); });
  CHECK(e.find("<image_soft_token> (id 262144), past the model's vocabulary of 262144") != std::string::npos);
  o.model_vocab = 0;  // no model (the tokenizer alone): nothing to refuse
  CHECK_NOTHROW(PromptFormat(o, *gemma).encode("look: <image_soft_token>"));
}

TEST_CASE("stop strings end a response where the real tokenizer merged them with the text before", "[prompt_format]") {
  const std::string dir = test::real_tokenizer_dir("qwen2_5");
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << dir << " (scripts/fixtures/fetch_tokenizers.sh)");
    return;
  }
  const auto tok = models::load_hf_tokenizer(dir);
  models::SamplingParams sp;
  add_stop_strings({"\nObservation:", "</tool_call>"}, *tok, sp);
  // "done." then the string: Qwen2.5 writes ".\n" as one token, so the string's own ids are not there.
  const std::vector<int64_t> response = tok->encode("It is done.\nObservation:");
  const std::vector<int64_t> alone = tok->encode("\nObservation:");
  CHECK(std::search(response.begin(), response.end(), alone.begin(), alone.end()) == response.end());
  for (size_t n = 1; n < response.size(); ++n)
    CHECK_FALSE(models::ends_at_stop({response.begin(), response.begin() + static_cast<long>(n)}, sp));
  CHECK(models::ends_at_stop(response, sp));
  // Control: the string's ids alone, as stops were matched before, never fire on it.
  models::SamplingParams by_ids;
  by_ids.stop_sequences = {alone};
  CHECK_FALSE(models::ends_at_stop(response, by_ids));
  // A string that is one id alone (an added token) stops on that id too.
  const auto call = tok->encode("</tool_call>");
  REQUIRE(call.size() == 1);
  CHECK(std::count(sp.stop_ids.begin(), sp.stop_ids.end(), call[0]) == 1);
  CHECK(models::ends_at_stop(tok->encode("<tool_call>\n{}\n</tool_call>"), sp));
}

TEST_CASE("the token a template closes an assistant turn with stops a response", "[prompt_format]") {
  // Llama 3: tokenizer and config say <|end_of_text|>, the template ends turns with <|eot_id|>.
  for (const auto& [name, end] : {std::pair<std::string, std::string>{"llama3", "<|eot_id|>"},
                                  {"llama3_1", "<|eot_id|>"},
                                  {"qwen2_5", "<|im_end|>"},
                                  {"gemma3", "<end_of_turn>"}}) {
    INFO(name);
    const std::string dir = test::real_tokenizer_dir(name);
    if (!std::filesystem::exists(dir + "/tokenizer.json")) {
      WARN("skipping: the real " << name << " tokenizer is not in " << dir);
      continue;
    }
    const auto tok = models::load_hf_tokenizer(dir);
    PromptFormatOptions o;
    o.tokenizer_path = dir;
    const PromptFormat format(o, *tok);
    const auto id = tok->token_to_id(end);
    REQUIRE(id);
    CHECK(std::count(format.stop_ids().begin(), format.stop_ids().end(), *id) == 1);
    // Warm-start answers and demonstrated turns end with it, not with a base tokenizer's EOS.
    CHECK(format.end_of_turn_id() == *id);
    if (name == "llama3") {  // control: the tokenizer's eos is another token, and first among the stops
      CHECK(tok->eos_id() != id);
      CHECK(format.stop_ids().front() != *id);
    }
  }
}

TEST_CASE(
    "auto finds the template where transformers 5 saves it (chat_template.jinja, none in tokenizer_config.json), "
    "which wins over tokenizer_config.json's; a directory with neither is raw text",
    "[prompt_format]") {
  namespace fs = std::filesystem;
  const std::string real = test::real_tokenizer_dir("qwen2_5");
  if (!fs::exists(real + "/tokenizer.json")) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << real << " (scripts/fixtures/fetch_tokenizers.sh)");
    return;
  }
  const auto tok = models::load_hf_tokenizer(real);
  PromptFormatOptions o;
  o.tokenizer_path = real;
  const PromptFormat original(o, *tok);  // the template in tokenizer_config.json
  const std::string want = original.render("Hi");
  REQUIRE_THAT(want, Catch::Contains("<|im_start|>assistant"));
  // The directory as tokenizer.save_pretrained writes it in transformers 5.
  const fs::path dir = fs::temp_directory_path() / ("tandem_jinja_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(real + "/tokenizer.json", dir / "tokenizer.json");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(real + "/tokenizer_config.json"));
  const std::string source = config["chat_template"].get<std::string>();
  config.erase("chat_template");
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  std::ofstream(dir / "chat_template.jinja") << source;
  o.tokenizer_path = dir.string();
  const PromptFormat saved(o, *tok);
  CHECK(saved.render("Hi") == want);
  CHECK(saved.template_origin() == (dir / "chat_template.jinja").string());
  CHECK(saved.stop_ids() == original.stop_ids());
  // Both: the .jinja file wins, as in transformers.
  config["chat_template"] = source;
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  std::ofstream(dir / "chat_template.jinja") << "X{{ messages[0].content }}";
  CHECK(PromptFormat(o, *tok).render("Hi") == "XHi");
  // Neither (a base model): raw text. Control for the first check: the template came from the file.
  config.erase("chat_template");
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  fs::remove(dir / "chat_template.jinja");
  CHECK(PromptFormat(o, *tok).render("Hi") == "Hi");
  fs::remove_all(dir);
}
