// PromptFormat: the chat template's extra variables (data.chat_template_kwargs) reach the template,
// with the real Qwen3 tokenizer's thinking template where it has been fetched, and a template file
// of the test's own (which always runs) for the refusals.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "core/policies/prompt_format.h"
#include "models/tokenizers/tokenizer.h"

using namespace tandem;

namespace {

std::string real_dir(const std::string& name) {
  const char* env = std::getenv("TANDEM_TOKENIZER_DIR");
  const std::string root = env && *env ? env : TANDEM_TOKENIZER_CACHE_DIR;
  return root + "/" + name;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("chat_template_kwargs reach the template: Qwen3's enable_thinking", "[prompt_format]") {
  const std::string dir = real_dir("qwen3");
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
  CHECK_THAT(error_of([&] { PromptFormat(o, *tok); }),
             Catch::Contains("chat_template_kwargs ({\"flag\":false,\"n\":41,\"s\":\"ab\"}) need a chat template"));
  std::filesystem::remove(path);
}
