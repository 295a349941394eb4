// complete_hf_dir (core/config/model_dir.h): the tokenizer's files beside the weights, the recipe's
// template file in place of the tokenizer's own.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/config/model_dir.h"

using namespace tandem;
namespace fs = std::filesystem;

TEST_CASE("complete_hf_dir copies the tokenizer's chat_template.jinja, and drops it for the recipe's template file",
          "[model_dir]") {
  const fs::path root = fs::temp_directory_path() / ("tandem_model_dir_" + std::to_string(getpid()));
  fs::remove_all(root);
  const fs::path tok = root / "tok", out = root / "out";
  fs::create_directories(tok);
  std::ofstream(tok / "tokenizer.json") << "{}";
  std::ofstream(tok / "tokenizer_config.json") << R"({"eos_token": "</s>"})";
  std::ofstream(tok / "chat_template.jinja") << "{{ messages[0].content }}";
  const auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const bool recipe_template : {false, true}) {
    INFO("the recipe names a template file: " << recipe_template);
    fs::remove_all(out);
    fs::create_directories(out);
    std::ofstream(out / "config.json") << "{}";
    HfDirCompanions c;
    c.tokenizer_path = tok.string();
    c.stop_ids = {2};
    if (recipe_template) c.chat_template = "RECIPE {{ messages[0].content }}";
    complete_hf_dir(out.string(), c);
    const nlohmann::json config = nlohmann::json::parse(read(out / "tokenizer_config.json"));
    if (recipe_template) {
      CHECK(config.at("chat_template") == "RECIPE {{ messages[0].content }}");
      CHECK_FALSE(fs::exists(out / "chat_template.jinja"));  // it would win over the recipe's
    } else {
      CHECK_FALSE(config.contains("chat_template"));
      CHECK(read(out / "chat_template.jinja") == "{{ messages[0].content }}");
    }
    CHECK(nlohmann::json::parse(read(out / "generation_config.json")).at("eos_token_id") == 2);
  }
  fs::remove_all(root);
}
